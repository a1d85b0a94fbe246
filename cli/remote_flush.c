/* The flusher: a thread of the supervisor that copies each committed
 * checkpoint off the machine (never the program, never in its pause: the
 * supervisor only queues the index).  For checkpoint N it uploads what is
 * not remote yet -- the files of ckpt.N but its journal, the packs its
 * manifests reference, the job file -- each checked by the server (MD5)
 * and by a HEAD of its size, then writes N's commit object last, under a
 * key no other flusher writes.  Retention of the remote (--keep-remote)
 * follows; the checkpoint being flushed and the newest queued one are never
 * dropped locally (flusher_protected).  A failure is one line on stderr;
 * the next checkpoint tries again.  A spool's flusher (run -d s3://,
 * remote_spool.c) publishes every checkpoint not published yet in order,
 * tries again with backoff when the remote does not take one, and empties
 * the spool of what it published. */
#include "remote_store.h"
#include "remote_key.h"
#include "tree.h"
#include "util.h"
#include "jobid.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct flusher {
    char dir[LZ_PATH_MAX];
    struct s3_conf conf;
    uint64_t job[2];
    char writer[17];
    char jp[700];            /* PREFIX/JOB/ */
    uint64_t keep_remote;
    const struct s3_key *key; /* --encrypt-key: every object sealed (s3_crypt.c), NULL = plain */
    pthread_t thr;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t queued, current; /* 0 = none */
    int stop, started;
    /* a spool (run -d s3://, job->stream): every checkpoint is published in
     * order; one that cannot be stays in the fallback, tried again with backoff */
    int stream;
    uint64_t published;       /* the newest published: the spool keeps it (its journal) */
    uint64_t retry_upto, retry_ns, backoff_ms, said;
};

/* Journal pieces (common/journal_layout.h): files.log, files.data, files.keep/, files.reset... */
static int journal_piece(const char *name) { return !strncmp(name, "files.", 6); }

/* One local file as the remote object key (unless the state has it): into the commit. */
static int put_one(struct flusher *f, struct rs_state *st, struct rc_commit *cm, const char *path, const char *key,
                   uint64_t size_limit, int persist, char *why, size_t whylen)
{
    const struct rc_object *have = st ? rs_find(st, path) : NULL;
    if (have && strcmp(have->md5, "deleted")) {
        /* uploaded before: still there, whole (a gc or a person may have removed an
         * object no commit listed yet: one whose flush failed) */
        uint64_t size = 0;
        int h = s3_head(&f->conf, have->key, &size, NULL, 0, why, whylen);
        if (h < 0) return -1;
        if (h == 0 && size == have->size) { rc_commit_add(cm, have); return 0; }
    }
    char full[LZ_PATH_MAX + 600];
    snprintf(full, sizeof full, "%s/%s", f->dir, path);
    int fd = open(full, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whylen, "cannot read %.3000s: %s", full, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return -1;
    }
    struct rc_object o;
    memset(&o, 0, sizeof o);
    snprintf(o.path, sizeof o.path, "%s", path);
    snprintf(o.key, sizeof o.key, "%s", key);
    o.size = size_limit && size_limit < (uint64_t)sb.st_size ? size_limit : (uint64_t)sb.st_size;
    int rc = f->key ? s3_crypt_put_file(&f->conf, f->key, key, fd, o.size, o.md5, &o.size, why, whylen)
                    : s3_put_file(&f->conf, key, fd, o.size, o.md5, why, whylen);
    close(fd);
    if (rc < 0) return -1;
    /* read after write: the object is there, whole */
    uint64_t size = 0;
    int h = s3_head(&f->conf, key, &size, NULL, 0, why, whylen);
    if (h < 0) return -1;
    if (h > 0 || size != o.size) {
        snprintf(why, whylen, "s3://%s/%s holds %" PRIu64 " bytes after an upload of %" PRIu64, f->conf.bucket, key, size, o.size);
        return -1;
    }
    rc_commit_add(cm, &o);
    if (persist) {
        rs_append(f->dir, "object %s %" PRIu64 " %s %s\n", o.path, o.size, o.md5, o.key);
    }
    return 0;
}

/* Every regular file below DIR/rel but the journal's pieces, into the commit. */
static int put_tree(struct flusher *f, struct rs_state *st, struct rc_commit *cm, const char *rel, const char *key_rel,
                    char *why, size_t whylen)
{
    char full[LZ_PATH_MAX + 600];
    snprintf(full, sizeof full, "%s/%s", f->dir, rel);
    DIR *d = opendir(full);
    if (!d) { snprintf(why, whylen, "cannot read %.3000s: %s", full, strerror(errno)); return -1; }
    struct dirent *e;
    char (*names)[256] = NULL;
    size_t n = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        names = lz_xrealloc(names, (n + 1) * sizeof *names);
        snprintf(names[n++], sizeof *names, "%s", e->d_name);
    }
    closedir(d);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        char p[600], k[1100], ep[LZ_PATH_MAX + 900];
        struct stat sb;
        snprintf(p, sizeof p, "%s/%s", rel, names[i]);
        snprintf(k, sizeof k, "%s%s/%s", f->jp, key_rel, names[i]);
        snprintf(ep, sizeof ep, "%s/%s", f->dir, p);
        if (lstat(ep, &sb) < 0) continue; /* gone meanwhile */
        char krel[700];
        snprintf(krel, sizeof krel, "%s/%s", key_rel, names[i]);
        if (journal_piece(names[i])) continue; /* files.keep/ too */
        if (S_ISDIR(sb.st_mode)) {
            rc = put_tree(f, st, cm, p, krel, why, whylen); /* proc.<pid>/: another process's part */
        } else if (S_ISREG(sb.st_mode)) {
            rc = put_one(f, st, cm, p, k, 0, 1, why, whylen);
        }
    }
    free(names);
    return rc;
}

/* The packs the manifests of checkpoint N's parts reference. */
static int put_packs(struct flusher *f, struct rs_state *st, struct rc_commit *cm, uint64_t index, char *why, size_t whylen)
{
    char ck[LZ_PATH_MAX + 64], part[LZ_PATH_MAX + 200], inner[1024];
    lz_ckpt_path(ck, sizeof ck, f->dir, index);
    struct lz_tree t;
    if (lz_tree_load(ck, &t, inner, sizeof inner) < 0) { snprintf(why, whylen, "checkpoint %" PRIu64 ": %s", index, inner); return -1; }
    int rc = 0;
    char (*done)[64] = NULL;
    size_t ndone = 0;
    for (size_t k = 0; k < t.nprocs && rc == 0; k++) {
        if (t.procs[k].state != LZ_TP_LIVE) continue;
        lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
        struct lz_image img;
        if (lz_manifest_load(part, &img, inner, sizeof inner) < 0) { snprintf(why, whylen, "%s", inner); rc = -1; break; }
        for (size_t i = 0; i < img.npacks && rc == 0; i++) {
            /* packs/pack.N (the main program's) or packs/pack.N.PID (another process's) */
            const char *rel = lz_str(&img, img.packs[i].path), *base = strrchr(rel, '/');
            base = base ? base + 1 : rel;
            if (strncmp(base, LZ_PACK_PREFIX, strlen(LZ_PACK_PREFIX)) || strlen(base) > 60) {
                snprintf(why, whylen, "checkpoint %" PRIu64 " names a pack '%.80s' of no store", index, rel);
                rc = -1;
                break;
            }
            int seen = 0;
            for (size_t j = 0; j < ndone; j++) seen |= !strcmp(done[j], base);
            if (seen) continue;
            done = lz_xrealloc(done, (ndone + 1) * sizeof *done);
            snprintf(done[ndone++], sizeof *done, "%s", base);
            char p[128], key[1100];
            snprintf(p, sizeof p, LZ_PACKS_DIR "/%s", base);
            snprintf(key, sizeof key, "%s%s/%s", f->jp, f->writer, base);
            rc = put_one(f, st, cm, p, key, img.packs[i].size, 1, why, whylen);
        }
        lz_image_free(&img);
    }
    free(done);
    lz_tree_free(&t);
    return rc;
}

/* --keep-remote: the oldest commits of the job beyond N go, then this
 * flusher's objects no remaining commit lists. */
static void remote_retain(struct flusher *f, uint64_t newest)
{
    char why[2048];
    struct rc_ref *refs;
    ssize_t n = rc_list_commits(&f->conf, &refs, why, sizeof why);
    if (n < 0) { lz_warn("remote retention: %s", why); return; }
    size_t mine = 0;
    for (ssize_t i = 0; i < n; i++) if (refs[i].job[0] == f->job[0] && refs[i].job[1] == f->job[1]) refs[mine++] = refs[i];
    size_t drop = mine > f->keep_remote ? mine - f->keep_remote : 0;
    for (size_t i = 0; i < drop; i++) {
        if (refs[i].index == newest) continue;
        if (s3_delete(&f->conf, refs[i].key, why, sizeof why) < 0) { lz_warn("remote retention: %s", why); free(refs); return; }
        if (!strcmp(refs[i].writer, f->writer)) rs_append(f->dir, "dropped %" PRIu64 "\n", refs[i].index);
        refs[i].index = 0;
    }
    /* what the commits left reference */
    char **keys = NULL;
    size_t nkeys = 0;
    for (size_t i = 0; i < mine; i++) {
        if (!refs[i].index) continue;
        struct rc_commit c;
        if (rc_fetch_commit(&f->conf, &refs[i], &c, why, sizeof why) != 0) { lz_warn("remote retention: %s", why); goto out; }
        for (size_t k = 0; k < c.nobjs; k++) {
            keys = lz_xrealloc(keys, (nkeys + 1) * sizeof *keys);
            keys[nkeys++] = lz_xstrdup(c.objs[k].key);
        }
        rc_commit_free(&c);
    }
    char mine_prefix[800];
    snprintf(mine_prefix, sizeof mine_prefix, "%s%s/", f->jp, f->writer);
    struct s3_object *objs;
    ssize_t no = s3_list(&f->conf, mine_prefix, &objs, why, sizeof why);
    if (no < 0) { lz_warn("remote retention: %s", why); goto out; }
    struct rs_state st;
    rs_load(f->dir, &st);
    for (ssize_t i = 0; i < no; i++) {
        int used = 0;
        for (size_t k = 0; k < nkeys && !used; k++) used = !strcmp(keys[k], objs[i].key);
        if (used) continue;
        if (s3_delete(&f->conf, objs[i].key, why, sizeof why) < 0) { lz_warn("remote retention: %s", why); break; }
        for (size_t k = 0; k < st.nobjs; k++)
            if (!strcmp(st.objs[k].key, objs[i].key)) rs_append(f->dir, "object %s 0 deleted -\n", st.objs[k].path);
    }
    rs_free(&st);
    free(objs);
out:
    for (size_t k = 0; k < nkeys; k++) free(keys[k]);
    free(keys);
    free(refs);
}

static int flush_one(struct flusher *f, uint64_t index, char *why, size_t whylen)
{
    char ck[LZ_PATH_MAX + 64], rel[64], krel[128];
    lz_ckpt_path(ck, sizeof ck, f->dir, index);
    if (access(ck, F_OK) < 0) return 0; /* dropped meanwhile (a restart's abandoned branch) */
    struct rs_state st;
    rs_load(f->dir, &st);
    if (rs_is_published(&st, index)) { rs_free(&st); return 0; }
    struct rc_commit cm;
    memset(&cm, 0, sizeof cm);
    cm.job[0] = f->job[0];
    cm.job[1] = f->job[1];
    cm.index = index;
    snprintf(cm.writer, sizeof cm.writer, "%s", f->writer);
    if (f->key) snprintf(cm.keyfp, sizeof cm.keyfp, "%s", f->key->fp);
    cm.created_ns = lz_now_ns(CLOCK_REALTIME);
    snprintf(rel, sizeof rel, LZ_CKPT_PREFIX "%06" PRIu64, index);
    snprintf(krel, sizeof krel, "%s/%s", f->writer, rel);
    int rc = put_tree(f, &st, &cm, rel, krel, why, whylen);
    if (rc == 0) rc = put_packs(f, &st, &cm, index, why, whylen);
    if (rc == 0) {
        char key[1100];
        snprintf(key, sizeof key, "%s%s/job", f->jp, krel);
        rc = put_one(f, NULL, &cm, LZ_JOBFILE, key, 0, 0, why, whylen);
    }
    if (rc == 0) {
        /* the commit, last: the checkpoint exists on the remote from here on */
        char key[1100];
        size_t len;
        snprintf(key, sizeof key, "%scommit/%012" PRIu64 ".%s", f->jp, index, f->writer);
        char *text = rc_commit_text(&cm, &len);
        uint64_t size;
        int h = s3_head(&f->conf, key, &size, NULL, 0, why, whylen); /* never overwritten, If-None-Match or not */
        if (h == 0) { snprintf(why, whylen, "s3://%s/%s exists already", f->conf.bucket, key); rc = -1; }
        else if (h < 0) rc = -1;
        if (rc == 0) rc = s3_put_buf(&f->conf, key, text, len, 1, why, whylen);
        free(text);
        if (rc == 0) rs_append(f->dir, "published %" PRIu64 " %s\n", index, key);
    }
    if (rc == 0 && f->stream) {
        pthread_mutex_lock(&f->mu);
        f->published = index;
        pthread_mutex_unlock(&f->mu);
        spool_trim(f->dir, index, &cm);
    }
    rc_commit_free(&cm);
    rs_free(&st);
    if (rc == 0 && f->keep_remote) remote_retain(f, index);
    return rc;
}

/* A spool: every local checkpoint up to `upto` newer than the newest
 * published, in order, up to the first that cannot be. */
static int publish_pending(struct flusher *f, uint64_t upto, char *why, size_t whylen)
{
    uint64_t *v;
    int n = spool_unpublished(f->dir, &v), rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (v[i] > upto) break;
        pthread_mutex_lock(&f->mu);
        f->current = v[i];
        pthread_mutex_unlock(&f->mu);
        rc = flush_one(f, v[i], why, whylen);
    }
    free(v);
    return rc;
}

int flusher_publish_now(struct flusher *f, char *why, size_t whylen)
{
    return publish_pending(f, UINT64_MAX, why, whylen);
}

/* A spool's flush failed: the checkpoints not published, up to `index` (the
 * newest), stay in the fallback.  Said once per newest checkpoint, tried
 * again after 0.5 s doubling to 30 s (the program never waits: this is the
 * flusher). */
static void fallback(struct flusher *f, uint64_t index, const char *why)
{
    if (index > f->said)
        lz_err("checkpoint %" PRIu64 " kept in the fallback %s: s3://%s/%s %s; flushed when it answers", index, f->dir,
               f->conf.bucket, f->conf.prefix, why);
    if (index > f->said) f->said = index;
    f->backoff_ms = f->backoff_ms ? (f->backoff_ms * 2 > 30000 ? 30000 : f->backoff_ms * 2) : 500;
    f->retry_ns = lz_now_ns(CLOCK_MONOTONIC) + f->backoff_ms * 1000000ull;
    if (index > f->retry_upto) f->retry_upto = index;
}

static void *flusher_main(void *arg)
{
    struct flusher *f = arg;
    pthread_mutex_lock(&f->mu);
    for (;;) {
        while (!f->queued && !f->stop && !f->retry_ns) pthread_cond_wait(&f->cv, &f->mu);
        if (!f->queued && !f->stop) { /* a spool's retry, unless a checkpoint or the end comes first */
            struct timespec at = {(time_t)(f->retry_ns / 1000000000ull), (long)(f->retry_ns % 1000000000ull)};
            pthread_cond_timedwait(&f->cv, &f->mu, &at);
            if (!f->queued && !f->stop && lz_now_ns(CLOCK_MONOTONIC) < f->retry_ns) continue;
        }
        if (!f->queued && !f->retry_ns) break;
        int last = f->stop; /* the end of the job: one more try, then the spool keeps it */
        /* the newest committed checkpoint: an older one still queued is superseded
         * (a spool publishes the older ones first) */
        uint64_t index = f->queued > f->retry_upto ? f->queued : f->retry_upto;
        f->queued = 0;
        f->current = index;
        pthread_mutex_unlock(&f->mu);
        char why[4096];
        uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
        int rc = f->stream ? publish_pending(f, index, why, sizeof why) : flush_one(f, index, why, sizeof why);
        pthread_mutex_lock(&f->mu);
        if (rc < 0 && f->stream) {
            fallback(f, index, why);
        } else if (rc < 0) {
            lz_err("checkpoint %" PRIu64 " was not flushed to s3://%s/%s: %s; the next checkpoint tries again", index,
                   f->conf.bucket, f->conf.prefix, why);
        } else {
            if (f->retry_ns) lz_err("s3://%s/%s answers again: checkpoint %" PRIu64 " published", f->conf.bucket, f->conf.prefix, index);
            f->retry_ns = f->retry_upto = f->backoff_ms = 0;
            if (getenv("LAZARUS_TRACE"))
                fprintf(stderr, "lazarus: checkpoint %" PRIu64 " flushed in %.3f s\n", index, (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        }
        f->current = 0;
        pthread_cond_broadcast(&f->cv);
        if (last && rc < 0) break;
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

struct flusher *flusher_start(const char *dir, const struct lz_job *job, char *why, size_t whylen)
{
    why[0] = 0;
    if (!*job->remote) return NULL;
    char where[600];
    snprintf(where, sizeof where, "the job in %s", dir);
    if (remote_key_fits(job->encrypt_fp, where, why, whylen) < 0) return NULL;
    struct flusher *f = lz_xcalloc(1, sizeof *f);
    f->key = *job->encrypt_fp ? remote_key() : NULL;
    if (rc_conf_of_job(&f->conf, job, why, whylen) < 0) { free(f); return NULL; }
    /* reachable, and the bucket there, before the job starts: one line now rather than at each checkpoint */
    struct s3_object *v;
    char probe[700];
    rc_job_prefix(probe, sizeof probe, &f->conf, job->id);
    if (job->stream) {
        /* a spool: a remote that does not answer yet is its fallback's case */
        int p = spool_probe(&f->conf, probe, why, whylen);
        if (p < 0) { free(f); return NULL; }
        if (p > 0) lz_warn("the remote store %s does not answer (%s): checkpoints stay in the fallback %s until it does", job->remote, why, dir);
        why[0] = 0;
    } else {
        ssize_t n = s3_list(&f->conf, probe, &v, why, whylen);
        if (n < 0) { free(f); return NULL; }
        free(v);
    }
    f->stream = job->stream;
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    f->job[0] = job->id[0];
    f->job[1] = job->id[1];
    snprintf(f->jp, sizeof f->jp, "%s", probe);
    f->keep_remote = job->keep_remote;
    uint64_t w = 0;
    if (getrandom(&w, sizeof w, 0) != sizeof w) w = lz_now_ns(CLOCK_REALTIME) ^ ((uint64_t)getpid() << 40);
    snprintf(f->writer, sizeof f->writer, "%016" PRIx64, w);
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* the spool's retries */
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (f->stream) {
        struct rs_state st;
        rs_load(dir, &st);
        for (size_t i = 0; i < st.npub; i++) if (st.published[i] > f->published) f->published = st.published[i];
        rs_free(&st);
    }
    return f;
}

void flusher_enqueue(struct flusher *f, uint64_t index)
{
    if (!f) return;
    if (!f->started) {
        /* made at the first checkpoint, after the program or restorer was forked
         * (a fork of a process with threads is best avoided); it takes no
         * signal: the supervisor's signalfd has them */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        int e = pthread_create(&f->thr, NULL, flusher_main, f);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (e) { lz_err("cannot start the flusher: %s; checkpoint %" PRIu64 " stays local", strerror(e), index); return; }
        f->started = 1;
    }
    pthread_mutex_lock(&f->mu);
    if (index > f->queued) f->queued = index;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

size_t flusher_protected(struct flusher *f, uint64_t out[3])
{
    if (!f) return 0;
    size_t n = 0;
    pthread_mutex_lock(&f->mu);
    if (f->current) out[n++] = f->current;
    if (f->queued) out[n++] = f->queued;
    if (f->stream && f->published) out[n++] = f->published; /* the journal a restart from the remote needs */
    pthread_mutex_unlock(&f->mu);
    return n;
}

void flusher_stop(struct flusher *f)
{
    if (!f || !f->started) return;
    pthread_mutex_lock(&f->mu);
    int busy = f->queued || f->current || f->retry_ns;
    f->stop = 1;
    pthread_cond_broadcast(&f->cv);
    pthread_mutex_unlock(&f->mu);
    if (busy && isatty(2)) lz_err("flushing the last checkpoint to s3://%s/%s...", f->conf.bucket, f->conf.prefix);
    pthread_join(f->thr, NULL);
}
