/* A local store made from a remote checkpoint (`restart -d s3://...`,
 * `verify -d s3://...`), and `list -d s3://...`.  The commit object names
 * every object the checkpoint needs; each is fetched (large ones in ranges,
 * several in flight), its size and MD5 checked against the commit, and put
 * in place in the cache directory, the job file last.  What `restart` then
 * checks is what it checks of any store: every manifest, tree and frame.
 *
 * The journals of the job's changes to its files are never remote (the
 * open interval's is written until the machine dies: ARCHITECTURE.md,
 * "Remote store"): a job run with --journal-dir keeps them on the file
 * system of its files, where the restart finds them (the job file names the
 * directory) and rolls the files back as any restart does; without it, or
 * when that directory is not here, the restart refuses, unless
 * --files-as-they-are, with which every part's journal is an empty sealed
 * log and the files stay as they are. */
#include "cli.h"
#include "remote_store.h"
#include "json_out.h"
#include "remote_key.h"
#include "store_admin.h"
#include "journal_layout.h"
#include "rollback.h"
#include "tree.h"
#include "util.h"
#include "log_out.h"
#include "exit_codes.h"
#include "jobid.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char *shown_url(const struct s3_conf *c)
{
    static char buf[800];
    snprintf(buf, sizeof buf, "s3://%s%s%s", c->bucket, *c->prefix ? "/" : "", c->prefix);
    return buf;
}

/* The commits of the one job under the URL: count (0 = none), or -1 having
 * said why (-LZ_EXIT_REMOTE: the store did not answer, or refused, the listing). */
static ssize_t job_commits(const struct s3_conf *c, struct rc_ref **out)
{
    char why[2048];
    ssize_t n = rc_list_commits(c, out, why, sizeof why);
    if (n < 0) { lz_err("%s", why); return -LZ_EXIT_REMOTE; }
    for (ssize_t i = 1; i < n; i++)
        if ((*out)[i].job[0] != (*out)[0].job[0] || (*out)[i].job[1] != (*out)[0].job[1]) {
            lz_err("%s holds the checkpoints of more than one job; give each job a prefix of its own", shown_url(c));
            free(*out);
            return -1;
        }
    return n;
}

/* mkdir -p of the directories above cache/path */
static int make_parents(const char *cache, const char *path)
{
    char p[LZ_PATH_MAX + 600];
    snprintf(p, sizeof p, "%s/%s", cache, path);
    for (char *s = p + strlen(cache) + 1; (s = strchr(s, '/')); s++) {
        *s = 0;
        if (mkdir(p, 0700) < 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return 0;
}

/* One object of an encrypted remote into cache/path, its chunks authenticated as they come
 * (s3_crypt_get_file: ranged and in flight within the object), its MD5 checked. */
static int fetch_one(const struct s3_conf *c, const char *cache, const struct rc_object *o, char *why, size_t whylen)
{
    char p[LZ_PATH_MAX + 600], md5[33];
    if (make_parents(cache, o->path) < 0) { snprintf(why, whylen, "cannot make the directories of %.2000s/%s: %s", cache, o->path, strerror(errno)); return -1; }
    snprintf(p, sizeof p, "%s/%s", cache, o->path);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) { snprintf(why, whylen, "cannot create %.3000s: %s", p, strerror(errno)); return -1; }
    uint64_t size = 0;
    int h = s3_head(c, o->key, &size, NULL, 0, why, whylen);
    if (h > 0) snprintf(why, whylen, "remote object s3://%s/%s is gone", c->bucket, o->key);
    else if (h == 0 && size != o->size)
        snprintf(why, whylen, "remote object s3://%s/%s holds %" PRIu64 " bytes, its commit says %" PRIu64, c->bucket, o->key, size, o->size);
    /* an encrypted remote: each chunk authenticated as it comes (the commit's MD5 is the sealed object's) */
    const struct s3_key *k = remote_key();
    uint64_t len = size;
    int rc = h != 0 || size != o->size ? -1
             : k ? s3_crypt_get_file(c, k, o->key, size, fd, md5, &len, why, whylen)
                 : s3_get_file(c, o->key, size, fd, md5, why, whylen);
    if (rc == 0 && strcmp(md5, o->md5)) {
        snprintf(why, whylen, "remote object s3://%s/%s fails its checksum (MD5 %s, its commit says %s)", c->bucket, o->key, md5, o->md5);
        rc = -2; /* damaged: LZ_EXIT_DAMAGED */
    }
    if (rc == 0 && (ftruncate(fd, (off_t)len) < 0 || fsync(fd) < 0)) { snprintf(why, whylen, "cannot write %.3000s: %s", p, strerror(errno)); rc = -1; }
    close(fd);
    return rc;
}

/* The progress line of a fetch, on a terminal only (one line, rewritten). */
struct shown { uint64_t index; int shown; };

static void show_progress(uint64_t got, uint64_t total, double secs, void *arg)
{
    struct shown *sh = arg;
    double mib = 1024.0 * 1024.0;
    fprintf(stderr, "\rlazarus: fetching checkpoint %" PRIu64 ": %.0f of %.0f MiB, %.0f MiB/s\033[K", sh->index,
            (double)got / mib, (double)total / mib, secs > 0 ? (double)got / mib / secs : 0.0);
    sh->shown = 1;
}

/* Ranges in flight at once across the objects of a fetch: LAZARUS_S3_FETCH_PARALLEL, else
 * twice the client's parallel requests, at least 8 (a restart has nothing else to do). */
static int fetch_in_flight(const struct s3_conf *c)
{
    const char *e = getenv("LAZARUS_S3_FETCH_PARALLEL");
    int n = e ? atoi(e) : 0;
    if (n <= 0) n = 2 * c->parallel < 8 ? 8 : 2 * c->parallel;
    return n > 64 ? 64 : n;
}

/* Every object of the commit but the job file into cache/path, fetched
 * together (s3_get_objects), each checked against its commit (size, MD5)
 * and made durable. */
static int fetch_objects(const struct s3_conf *c, const char *cache, const struct rc_commit *cm, const struct rc_object *skip,
                         int quiet, char *why, size_t whylen)
{
    struct s3_fetch *v = calloc(cm->nobjs ? cm->nobjs : 1, sizeof *v);
    const struct rc_object **src = calloc(cm->nobjs ? cm->nobjs : 1, sizeof *src);
    size_t n = 0;
    int rc = v && src ? 0 : -1;
    if (rc < 0) snprintf(why, whylen, "out of memory");
    for (size_t i = 0; i < cm->nobjs && rc == 0; i++) {
        const struct rc_object *o = &cm->objs[i];
        if (o == skip) continue;
        char p[LZ_PATH_MAX + 600];
        if (make_parents(cache, o->path) < 0) { snprintf(why, whylen, "cannot make the directories of %.2000s/%s: %s", cache, o->path, strerror(errno)); rc = -1; break; }
        snprintf(p, sizeof p, "%s/%s", cache, o->path);
        int fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600); /* read back to hash it */
        if (fd < 0) { snprintf(why, whylen, "cannot create %.3000s: %s", p, strerror(errno)); rc = -1; break; }
        v[n] = (struct s3_fetch){.key = o->key, .size = o->size, .fd = fd};
        src[n++] = o;
    }
    struct shown sh = {cm->index, 0};
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC), bytes = 0;
    if (rc == 0)
        rc = s3_get_objects(c, v, n, fetch_in_flight(c), !quiet && isatty(2) ? show_progress : NULL, &sh, why, whylen);
    if (sh.shown) fputc('\n', stderr);
    for (size_t i = 0; i < n; i++) bytes += v[i].size;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (strcmp(v[i].md5_hex, src[i]->md5)) {
            snprintf(why, whylen, "remote object s3://%s/%s fails its checksum (MD5 %s, its commit says %s)", c->bucket,
                     src[i]->key, v[i].md5_hex, src[i]->md5);
            rc = -2; /* damaged */
        }
    uint64_t t1 = lz_now_ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < n && rc == 0; i++)
        if (ftruncate(v[i].fd, (off_t)v[i].size) < 0 || fsync(v[i].fd) < 0) {
            snprintf(why, whylen, "cannot write %.2000s/%s: %s", cache, src[i]->path, strerror(errno));
            rc = -1;
        }
    for (size_t i = 0; i < n; i++) close(v[i].fd);
    if (rc == 0 && getenv("LAZARUS_TRACE")) /* bench/remote.py: the fetch alone */
        fprintf(stderr, "lazarus: fetched %zu objects, %" PRIu64 " bytes, in %.3f s (%.3f s of it to make them durable)\n",
                n, bytes, (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e9, (double)(lz_now_ns(CLOCK_MONOTONIC) - t1) / 1e9);
    free(v);
    free(src);
    return rc;
}

/* The cache: made, or emptied if it holds a store of the same job that no
 * supervisor runs; anything else is refused.  0, or -1 having said why. */
static int prepare_cache(const char *cache, const uint64_t job[2], uint64_t newest, int *lock)
{
    char why[1024];
    struct stat sb;
    *lock = -1;
    if (stat(cache, &sb) == 0) {
        struct lz_job j;
        int same = lz_job_read(cache, &j) == 0 && j.id[0] == job[0] && j.id[1] == job[1];
        /* else only an empty directory (never delete what may be the user's) */
        if (!same && (!S_ISDIR(sb.st_mode) || (rmdir(cache) < 0 && errno != ENOENT))) {
            lz_err("cannot restart: %s holds something else than this job's store; give another with --cache DIR; "
                   "nothing was changed", cache);
            return -1;
        }
    }
    /* a store this job ran on since: checkpoints not flushed yet are not thrown away */
    uint64_t *have;
    int nh = lz_store_list(cache, &have);
    if (nh > 0 && have[nh - 1] > newest) {
        lz_err("cannot restart: %s holds checkpoint %" PRIu64 ", newer than any in the remote store (%" PRIu64 "); "
               "resume it with `lazarus restart -d %s`, or give another --cache; nothing was changed", cache, have[nh - 1],
               newest, cache);
        free(have);
        return -1;
    }
    if (nh >= 0) free(have);
    if (lz_store_prepare(cache, why, sizeof why) < 0) { lz_err("cannot restart: %s; nothing was changed", why); return -1; }
    *lock = lz_store_lock(cache);
    if (*lock < 0) { lz_err("cannot restart: a job is running with %s", cache); return -LZ_EXIT_RUNNING; }
    /* the job file first: what is removed below is the cache's, never the
     * journals in the job's --journal-dir (they are what a rollback needs) */
    char jf[LZ_PATH_MAX + 32];
    snprintf(jf, sizeof jf, "%s/" LZ_JOBFILE, cache);
    unlink(jf);
    /* what an earlier fetch or run left: the remote is the truth now */
    uint64_t *v;
    int *jr;
    int n = lz_store_list_journals(cache, &v, &jr);
    for (int i = 0; i < n; i++) {
        if (jr[i]) lz_jrnl_remove(cache, v[i]);
        else lz_store_remove(cache, v[i]);
    }
    if (n >= 0) { free(v); free(jr); }
    lz_store_cleanup_tmp(cache);
    lz_store_clear_data(cache);
    char p[LZ_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/" RS_STATE, cache);
    unlink(p);
    return 0;
}

int remote_fetch_store(const char *url, const struct remote_opts *ro, int have_at, uint64_t at, char *cache_out,
                       size_t cache_len, uint64_t *index)
{
    struct s3_conf c;
    char why[4096];
    const char *verb = ro->quiet ? "verify" : "restart";
    if (s3_conf_load(&c, url, ro->endpoint, ro->addressing, ro->ca_file, ro->insecure, why, sizeof why) < 0) {
        lz_err("cannot %s: %s", verb, why);
        return -1;
    }
    struct rc_ref *refs;
    ssize_t n = job_commits(&c, &refs);
    if (n < 0) return (int)n;
    if (n == 0) { lz_err("no checkpoint in %s", shown_url(&c)); free(refs); return -LZ_EXIT_NOT_FOUND; }
    ssize_t pick = -1;
    for (ssize_t i = 0; i < n; i++)
        if (!have_at || refs[i].index == at) pick = i; /* the newest (a tie of two flushers: the last writer id) */
    if (pick < 0) {
        char list[300] = "";
        size_t l = 0;
        for (ssize_t i = 0; i < n && l < sizeof list - 24; i++) l += (size_t)snprintf(list + l, sizeof list - l, "%s%" PRIu64, i ? ", " : "", refs[i].index);
        lz_err("no checkpoint %" PRIu64 " in %s (published: %s)", at, shown_url(&c), list);
        free(refs);
        return -LZ_EXIT_NOT_FOUND;
    }
    const struct rc_ref *newest = &refs[n - 1];
    struct rc_commit cm;
    if (rc_fetch_commit(&c, &refs[pick], &cm, why, sizeof why) != 0) { lz_err("cannot %s: %s; nothing was changed", verb, why); free(refs); return -1; }
    if (remote_key_fits(cm.keyfp, shown_url(&c), why, sizeof why) < 0) {
        lz_err("cannot %s: %s; nothing was changed", verb, why);
        rc_commit_free(&cm);
        free(refs);
        return -1;
    }
    /* the job file first: where the journals of the job's changes to its files are */
    const struct rc_object *jobobj = NULL;
    for (size_t i = 0; i < cm.nobjs; i++) if (!strcmp(cm.objs[i].path, LZ_JOBFILE)) jobobj = &cm.objs[i];
    char *jobbuf = NULL, jdir[600] = "", md5[33];
    size_t joblen = 0;
    int g = jobobj ? s3_get_buf(&c, jobobj->key, &jobbuf, &joblen, why, sizeof why) : (snprintf(why, sizeof why, "commit object s3://%s/%s lists no job file", c.bucket, refs[pick].key), -1);
    if (g > 0) snprintf(why, sizeof why, "remote object s3://%s/%s is gone", c.bucket, jobobj->key);
    if (g == 0) {
        s3_md5_hex(jobbuf, joblen, md5);
        if (joblen != jobobj->size || strcmp(md5, jobobj->md5)) {
            snprintf(why, sizeof why, "remote object s3://%s/%s fails its checksum (MD5 %s, its commit says %s)", c.bucket, jobobj->key, md5, jobobj->md5);
            g = -1;
        }
    }
    if (g == 0 && remote_key()) {
        char name[2400], *plain;
        size_t plen;
        snprintf(name, sizeof name, "remote object s3://%s/%s", c.bucket, jobobj->key);
        g = s3_crypt_open_buf(remote_key(), jobbuf, joblen, name, &plain, &plen, why, sizeof why);
        if (g == 0) { free(jobbuf); jobbuf = plain; joblen = plen; }
    }
    if (g != 0) { lz_err("cannot %s: %s; nothing was changed", verb, why); free(jobbuf); rc_commit_free(&cm); free(refs); return -1; }
    const char *jl = memmem(jobbuf, joblen, "\njournal_dir=", 13);
    if (jl) {
        jl += 13;
        const char *e = memchr(jl, '\n', joblen - (size_t)(jl - jobbuf));
        snprintf(jdir, sizeof jdir, "%.*s", e ? (int)(e - jl) : 0, jl);
    }
    char id[33], jhome[700];
    lz_job_id_text(id, cm.job);
    snprintf(jhome, sizeof jhome, "%s/%s", jdir, id);
    struct stat jst;
    if (!ro->files_as_they_are && (!*jdir || stat(jhome, &jst) < 0 || !S_ISDIR(jst.st_mode))) {
        if (!*jdir)
            lz_err("cannot restart from checkpoint %" PRIu64 " of %s: the journal of the job's changes to its files since "
                   "checkpoint %" PRIu64 " was on the machine that ran the job (it ran without --journal-dir), so the files "
                   "cannot be rolled back; nothing was changed (`--files-as-they-are` resumes with the files as they are)",
                   refs[pick].index, shown_url(&c), newest->index);
        else
            lz_err("cannot restart from checkpoint %" PRIu64 " of %s: the job's journal directory %s is not here (%s), so "
                   "the files cannot be rolled back; nothing was changed (`--files-as-they-are` resumes with the files as "
                   "they are)", refs[pick].index, shown_url(&c), jhome, strerror(errno ? errno : ENOTDIR));
        free(jobbuf);
        rc_commit_free(&cm);
        free(refs);
        return -1;
    }
    /* the journals since N: from N's on (retention drops the oldest first, so
     * N's there means every later one is); a local -k smaller than
     * --keep-remote may have dropped it on the lost machine */
    char jn[800], jj[800];
    snprintf(jn, sizeof jn, "%s/" LZ_CKPT_PREFIX "%06" PRIu64, jhome, cm.index);
    snprintf(jj, sizeof jj, "%s/" LZ_JRNL_PREFIX "%06" PRIu64, jhome, cm.index);
    if (!ro->files_as_they_are && stat(jn, &jst) < 0 && stat(jj, &jst) < 0) {
        lz_err("cannot restart from checkpoint %" PRIu64 " of %s: the journal of the interval after it is not in %s (the "
               "machine that ran the job dropped it with its local copy: -k), so the files cannot be rolled back to it; "
               "nothing was changed (a newer checkpoint, or `--files-as-they-are`)", cm.index, shown_url(&c), jhome);
        free(jobbuf);
        rc_commit_free(&cm);
        free(refs);
        return -1;
    }

    if (ro->cache) {
        char *a = abs_dir(ro->cache);
        snprintf(cache_out, cache_len, "%s", a);
        free(a);
    } else {
        const char *t = getenv("TMPDIR");
        snprintf(cache_out, cache_len, "%s/lazarus-%s", t && *t ? t : "/tmp", id);
    }
    int lock;
    int pr = prepare_cache(cache_out, cm.job, newest->index, &lock);
    if (pr < 0) { free(jobbuf); rc_commit_free(&cm); free(refs); return pr; }
    if (!ro->quiet) log_info("restarting checkpoint %" PRIu64 " of %s through the local store %s", cm.index, shown_url(&c), cache_out);
    int rc = 0;
    if (remote_key()) /* sealed objects: opened one after another, not written in place */
        for (size_t i = 0; i < cm.nobjs && rc == 0; i++) {
            if (&cm.objs[i] != jobobj) rc = fetch_one(&c, cache_out, &cm.objs[i], why, sizeof why);
        }
    else
        rc = fetch_objects(&c, cache_out, &cm, jobobj, ro->quiet, why, sizeof why);
    /* the job file (the tree is checked against it), rewritten below */
    char jp[LZ_PATH_MAX + 32];
    snprintf(jp, sizeof jp, "%s/" LZ_JOBFILE, cache_out);
    int jfd = rc == 0 ? open(jp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (rc == 0 && (jfd < 0 || lz_write_all(jfd, jobbuf, joblen) < 0 || fsync(jfd) < 0)) {
        snprintf(why, sizeof why, "cannot write %.3000s: %s", jp, strerror(errno));
        rc = -1;
    }
    if (jfd >= 0) close(jfd);
    free(jobbuf);
    char ck[LZ_PATH_MAX + 64], inner[1024];
    lz_ckpt_path(ck, sizeof ck, cache_out, cm.index);
    /* the files as they are: each part's journal an empty sealed log, as after a rollback */
    struct lz_tree t;
    if (rc == 0 && lz_tree_load(ck, &t, inner, sizeof inner) < 0) { snprintf(why, sizeof why, "checkpoint %" PRIu64 " is damaged: %s", cm.index, inner); rc = -2; }
    else if (rc == 0 && !ro->files_as_they_are) lz_tree_free(&t); /* the journals are in the journal directory */
    else if (rc == 0) {
        for (size_t k = 0; k < t.nprocs && rc == 0; k++) {
            if (t.procs[k].state != LZ_TP_LIVE) continue;
            char part[LZ_PATH_MAX + 200];
            lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
            if (fj_write_empty_log(part, cm.job, cm.index, t.procs[k].pid) < 0) {
                snprintf(why, sizeof why, "cannot write %.3000s/%s: %s", part, FJ_LOG, strerror(errno));
                rc = -1;
            }
        }
        lz_tree_free(&t);
    }
    struct lz_job job;
    if (rc == 0 && lz_job_read(cache_out, &job) != 0) { snprintf(why, sizeof why, "the job file of checkpoint %" PRIu64 " is damaged", cm.index); rc = -1; }
    if (rc == 0) {
        /* the job goes on flushing to where it came from, reached as now */
        snprintf(job.remote, sizeof job.remote, "%s", url);
        if (ro->endpoint) snprintf(job.remote_endpoint, sizeof job.remote_endpoint, "%s", ro->endpoint);
        if (ro->ca_file) {
            char *a = abs_dir(ro->ca_file);
            snprintf(job.remote_ca, sizeof job.remote_ca, "%s", a);
            free(a);
        }
        if (ro->addressing) snprintf(job.remote_addressing, sizeof job.remote_addressing, "%s", ro->addressing);
        if (ro->insecure) job.remote_insecure = 1;
        if (ro->files_as_they_are) job.journal_dir[0] = 0; /* none applied: this store's own from now on */
        snprintf(job.state, sizeof job.state, "stopped");
        job.rolling_to = -1;
        job.stopped_ns = 0;
        /* no index any flusher used may be given again (a dead machine's may still publish one) */
        if (job.next_index <= newest->index) job.next_index = newest->index + 1;
        if (lz_job_write(cache_out, &job) < 0) { snprintf(why, sizeof why, "cannot write %s/%s: %s", cache_out, LZ_JOBFILE, strerror(errno)); rc = -1; }
    }
    if (rc == 0) {
        /* nothing of this checkpoint is uploaded again */
        for (size_t i = 0; i < cm.nobjs; i++)
            if (strcmp(cm.objs[i].path, LZ_JOBFILE))
                rs_append(cache_out, "object %s %" PRIu64 " %s %s\n", cm.objs[i].path, cm.objs[i].size, cm.objs[i].md5, cm.objs[i].key);
        rs_append(cache_out, "published %" PRIu64 " %s\n", cm.index, refs[pick].key);
        /* N's journal taken for a failed checkpoint's by an earlier attempt's clean-up: N's again */
        if (!ro->files_as_they_are && *jdir && stat(jn, &jst) < 0) rename(jj, jn);
    }
    if (rc < 0) {
        lz_err("cannot %s: %s; nothing was changed", verb, why);
        /* a cache that holds half a store is of no use: removed, the remote as it was */
        char *slash = strrchr(cache_out, '/');
        if (slash && slash != cache_out) {
            *slash = 0;
            int pfd = open(cache_out, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            *slash = '/';
            if (pfd >= 0) { lz_remove_tree(pfd, slash + 1); close(pfd); }
        }
    }
    *index = cm.index;
    rc_commit_free(&cm);
    free(refs);
    close(lock); /* cmd_restart locks it again */
    return rc == -2 ? -LZ_EXIT_DAMAGED : rc; /* an object fails its commit's checksum: damage (exit_codes.h) */
}

int remote_list(const char *url, const struct remote_opts *ro, int json)
{
    struct s3_conf c;
    char why[4096];
    if (s3_conf_load(&c, url, ro->endpoint, ro->addressing, ro->ca_file, ro->insecure, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    struct rc_ref *refs;
    ssize_t n = job_commits(&c, &refs);
    if (n < 0) return n == -1 ? LZ_EXIT_FAIL : (int)-n;
    if (json) printf("[");
    else printf("%6s  %-20s  %12s  %7s  %s\n", "INDEX", "TIME (UTC)", "BYTES", "OBJECTS", "WHERE");
    int bad = 0, shown = 0;
    for (ssize_t i = 0; i < n; i++) {
        struct rc_commit cm;
        int g = rc_fetch_commit(&c, &refs[i], &cm, why, sizeof why);
        if (g > 0) continue; /* remote retention removed it since the listing */
        if (g < 0) {
            lz_err("%s", why);
            bad = 1;
            continue;
        }
        if (remote_key() && remote_key_fits(cm.keyfp, shown_url(&c), why, sizeof why) < 0) {
            lz_err("%s", why);
            rc_commit_free(&cm);
            bad = 1;
            break;
        }
        uint64_t bytes = 0;
        for (size_t k = 0; k < cm.nobjs; k++) bytes += cm.objs[k].size;
        char when[32], id[33];
        utc_text(when, sizeof when, cm.created_ns);
        lz_job_id_text(id, cm.job);
        if (json)
            printf("%s\n  {" JW_VERSION_MEMBER ", \"index\": %" PRIu64 ", \"time\": \"%s\", \"created_ns\": %" PRIu64 ", \"bytes\": %" PRIu64
                   ", \"objects\": %zu, \"job\": \"%s\", \"writer\": \"%s\", \"key\": \"%s\", \"local\": false, \"remote\": true}",
                   shown ? "," : "", cm.index, when, cm.created_ns, bytes, cm.nobjs, id, cm.writer, cm.keyfp);
        else
            printf("%6" PRIu64 "  %-20s  %12" PRIu64 "  %7zu  remote\n", cm.index, when, bytes, cm.nobjs);
        rc_commit_free(&cm);
        shown++;
    }
    if (json) printf("%s]\n", shown ? "\n" : "");
    free(refs);
    return bad;
}

int remote_in_scratch(const char *url, struct remote_opts ro, int have_at, uint64_t at, const char *what,
                      int (*fn)(const char *dir, uint64_t index, void *arg), void *arg)
{
    const char *t = getenv("TMPDIR");
    char tmpl[LZ_PATH_MAX], cache[LZ_PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/lazarus-%s-XXXXXX", t && *t ? t : "/tmp", what);
    if (!mkdtemp(tmpl)) {
        lz_err("cannot make a scratch directory in %s: %s", t && *t ? t : "/tmp", strerror(errno));
        return 1;
    }
    ro.cache = tmpl;
    uint64_t index;
    int rc = remote_fetch_store(url, &ro, have_at, at, cache, sizeof cache, &index);
    rc = rc == 0 ? fn(cache, index, arg) : rc == -1 ? LZ_EXIT_FAIL : -rc;
    char *slash = strrchr(tmpl, '/');
    *slash = 0;
    int pfd = open(tmpl, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd >= 0) { lz_remove_tree(pfd, slash + 1); close(pfd); }
    return rc;
}
