/* The remote store as the CLI sees it (ARCHITECTURE.md, "Remote store"):
 * where a job's objects go (remote_commit.c), what of a local store is
 * remote already (remote_state.c), the supervisor's flusher
 * (remote_flush.c), the spool of a streamed job (remote_spool.c), and a
 * local store made from a remote checkpoint (remote_fetch.c).
 *
 * Layout under s3://BUCKET/PREFIX, JOB the job's identity (32 hex), W the
 * flusher's own random id (16 hex, one per supervisor run: two flushers on
 * one prefix never write one key):
 *   JOB/W/ckpt.N/...       the files of checkpoint N but its own journal
 *   JOB/W/pack.M           a pack
 *   JOB/commit/N.W         checkpoint N's commit object, written last, never overwritten:
 *                          every object it needs, with its local path, size and MD5
 *                          (with --encrypt-key: of the encrypted object; the commit,
 *                          plain, names the key's fingerprint)
 */
#ifndef LZ_REMOTE_STORE_H
#define LZ_REMOTE_STORE_H
#include "s3.h"
#include "store.h"
#include <stddef.h>
#include <stdint.h>

#define RS_STATE "remote.state" /* DIR/remote.state: what this store has flushed (remote_state.c) */

struct rc_object {
    char path[512];   /* where it goes in a local store: "ckpt.000005/manifest", "packs/pack.000003", "job" */
    char key[1024];
    uint64_t size;
    char md5[33];
};
struct rc_commit {
    uint64_t job[2];
    uint64_t index;
    char writer[17];
    uint64_t created_ns;
    char keyfp[17];   /* "key FP": its objects are encrypted with that key (remote_key.h), "" = plain */
    struct rc_object *objs;
    size_t nobjs, cap;
};
/* A commit object's text (its last line the XXH3-64 of all before it), malloc'ed. */
char *rc_commit_text(const struct rc_commit *c, size_t *len);
int rc_commit_parse(const char *buf, size_t len, struct rc_commit *c, char *why, size_t whylen);
void rc_commit_add(struct rc_commit *c, const struct rc_object *o);
void rc_commit_free(struct rc_commit *c);
/* "PREFIX/JOB/" (PREFIX/ left out when empty) */
void rc_job_prefix(char *buf, size_t len, const struct s3_conf *c, const uint64_t job[2]);
/* A commit found by listing: its job, index, writer and key. */
struct rc_ref { uint64_t job[2]; uint64_t index; char writer[17]; char key[1024]; };
/* Every commit under the URL's prefix, sorted by job then index: count or -1 with why. */
ssize_t rc_list_commits(const struct s3_conf *c, struct rc_ref **out, char *why, size_t whylen);
/* Fetches and parses a commit, checking it names its job and index: 0, 1 if it is gone (remote
 * retention removed it after it was listed), or -1 with why (why is set for 1 too). */
int rc_fetch_commit(const struct s3_conf *c, const struct rc_ref *ref, struct rc_commit *out, char *why, size_t whylen);
/* The client's configuration from what DIR/job records of the remote: 0 or -1 with why. */
int rc_conf_of_job(struct s3_conf *c, const struct lz_job *job, char *why, size_t whylen);

/* remote_state.c: DIR/remote.state, appended to and fsync'ed by the flusher:
 * "object PATH SIZE MD5 KEY", "published N KEY", "dropped N". */
struct rs_state {
    struct rc_object *objs;
    size_t nobjs, cap;
    uint64_t *published; /* published and not dropped since, ascending */
    size_t npub;
};
void rs_load(const char *dir, struct rs_state *st);
const struct rc_object *rs_find(const struct rs_state *st, const char *path);
int rs_is_published(const struct rs_state *st, uint64_t index);
void rs_free(struct rs_state *st);
int rs_append(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* remote_flush.c: the supervisor's flusher, a thread that uploads each
 * committed checkpoint (never in the program's pause: the supervisor only
 * queues it) and publishes it with its commit object. */
struct flusher;
/* NULL when the job has no remote (why ""), or when it cannot be reached
 * from here (why says so: then the job does not start). */
struct flusher *flusher_start(const char *dir, const struct lz_job *job, char *why, size_t whylen);
void flusher_enqueue(struct flusher *f, uint64_t index);
/* The checkpoints retention must keep: being flushed or queued (count, into out[2]). */
size_t flusher_protected(struct flusher *f, uint64_t out[3]);
/* A spool (run -d s3://): every checkpoint of it not published yet, in
 * order, now, in this thread: 0, or -1 with why. */
int flusher_publish_now(struct flusher *f, char *why, size_t whylen);
/* Waits until the queue is flushed, then ends the thread. */
void flusher_stop(struct flusher *f);

/* remote_spool.c: the spool of `run -d s3://URL` (job->stream).  Its
 * directory: --fallback DIR, else $TMPDIR/lazarus-spool-<XXH3 of the URL>. */
void spool_path(char *out, size_t len, const char *url, const char *fallback);
/* Can the remote be listed: 0 yes, 1 not now (no answer, 5xx, throttled:
 * checkpoints stay in the fallback), -1 never (refused: why). */
int spool_probe(const struct s3_conf *c, const char *prefix, char *why, size_t whylen);
/* After checkpoint `published` was published (commit cm): what the spool drops. */
void spool_trim(const char *dir, uint64_t published, const struct rc_commit *cm);
/* The checkpoints of a spool newer than its newest published one (ascending, malloc'ed). */
int spool_unpublished(const char *dir, uint64_t **out);
/* restart -d s3://URL on the machine whose spool holds checkpoints not
 * published yet: they are published first.  0, or -1 having said why
 * (-LZ_EXIT_RUNNING: the job runs with that spool; cli/exit_codes.h). */
int spool_publish_before_restart(const char *spool, const char *url);
/* `list -d s3://URL`: the rows of what is only in this machine's spool. */
void spool_list(const char *url, const char *fallback);

/* remote_fetch.c: a local store made from the remote checkpoint (--at N or
 * the newest) of the job under URL, in cache (made; refused if it holds
 * anything but a store of the same job that is not running): every object
 * fetched, checked against its commit, in place.  0 and the index, or -1
 * having said why on one line, or minus the exit status that says why better
 * (cli/exit_codes.h: the store did not answer, no such checkpoint, a job runs,
 * an object that fails its commit's checksum or a damaged tree: damaged;
 * with cache). */
struct remote_opts {
    const char *endpoint, *ca_file, *addressing, *cache;
    int insecure;
    int files_as_they_are; /* restart --files-as-they-are: no journal is needed, none applied */
    int quiet;             /* verify: no line saying where the store is made */
};
int remote_fetch_store(const char *url, const struct remote_opts *ro, int have_at, uint64_t at, char *cache_out,
                       size_t cache_len, uint64_t *index);
/* A store fetched only to be read (verify, diff): checkpoint `at` (have_at) or the newest of url
 * fetched into a scratch directory of $TMPDIR ("lazarus-WHAT-XXXXXX", ro's cache ignored), fn run
 * on it with its index, the directory removed: fn's result, or an exit status having said why. */
int remote_in_scratch(const char *url, struct remote_opts ro, int have_at, uint64_t at, const char *what,
                      int (*fn)(const char *dir, uint64_t index, void *arg), void *arg);
/* `gc -d s3://...` (remote_gc.c): every object no commit lists and every
 * multipart upload, older than older_than_s: 0, or 1 having said why; what
 * it removed on one line, or (json) as one object (docs/json.md). */
int remote_gc(const char *url, const struct remote_opts *ro, uint64_t older_than_s, int json);
/* `list -d s3://...`: one row per published checkpoint. */
int remote_list(const char *url, const struct remote_opts *ro, int json);
#endif
