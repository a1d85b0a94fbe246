/* The spool of `run -d s3://BUCKET/PREFIX` (ARCHITECTURE.md, "Remote store",
 * "Streaming"): a local store every checkpoint commits into as usual, which
 * the flusher publishes at once; what is published leaves it, and what could
 * not be published stays in it (the fallback) until the remote answers. */
#include "cli.h"
#include "exit_codes.h"
#include "remote_store.h"
#include "hash.h"
#include "store_admin.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void spool_path(char *out, size_t len, const char *url, const char *fallback)
{
    if (fallback) {
        char *a = abs_dir(fallback);
        snprintf(out, len, "%s", a);
        free(a);
        return;
    }
    /* the URL as s3_url_parse reads it: "s3://b/p/" and "s3://b//p" are one spool */
    char b[256], p[512], why[600], norm[800];
    if (s3_url_parse(url, b, sizeof b, p, sizeof p, why, sizeof why) == 0)
        snprintf(norm, sizeof norm, "s3://%s%s%s", b, *p ? "/" : "", p);
    else
        snprintf(norm, sizeof norm, "%s", url);
    const char *t = getenv("TMPDIR");
    snprintf(out, len, "%s/lazarus-spool-%016" PRIx64, t && *t ? t : "/tmp", lz_hash(norm, strlen(norm)));
}

int spool_probe(const struct s3_conf *c, const char *prefix, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "GET";
    char ep[1600];
    s3_encode(ep, sizeof ep, prefix, 0);
    snprintf(r.query, sizeof r.query, "list-type=2&max-keys=1&prefix=%s", ep); /* sorted by name (SigV4) */
    int rc = s3_perform1(c, &r);
    long status = r.status;
    if (rc < 0) snprintf(why, whylen, "%s", r.err);
    s3_req_free(&r);
    if (rc == 0) return 0;
    /* no answer, a server error or throttling (after the client's retries): it may
     * answer later; anything else (a bad secret, no such bucket, a certificate) never will */
    if (status == 0 && strstr(why, "(tried ")) return 1; /* refused, timed out, cut: tried again in vain */
    return status >= 500 || status == 429 ? 1 : -1;
}

/* Checkpoint `published` is in the remote store: its packs leave the spool
 * (commit cm lists them), and so does every checkpoint before it (the next
 * checkpoint, a restart, a rollback to the newest published need none of
 * them).  Kept: its directory (manifests the next settle and restart read,
 * the open interval's journal) and what is not published yet. */
void spool_trim(const char *dir, uint64_t published, const struct rc_commit *cm)
{
    int lk = lz_gc_lock(dir);
    char p[LZ_PATH_MAX + 600];
    for (size_t i = 0; i < cm->nobjs; i++) {
        if (strncmp(cm->objs[i].path, LZ_PACKS_DIR "/", strlen(LZ_PACKS_DIR) + 1)) continue;
        snprintf(p, sizeof p, "%s/%s", dir, cm->objs[i].path);
        if (unlink(p) < 0 && errno != ENOENT) lz_warn("cannot drop %s from the spool: %s", p, strerror(errno));
    }
    if (lk >= 0) close(lk);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    for (int i = 0; i < n; i++)
        if (v[i] < published) lz_store_remove(dir, v[i]);
    if (n >= 0) free(v);
}

int spool_unpublished(const char *dir, uint64_t **out)
{
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { *out = NULL; return 0; }
    struct rs_state st;
    rs_load(dir, &st);
    uint64_t newest_pub = 0;
    for (size_t i = 0; i < st.npub; i++) if (st.published[i] > newest_pub) newest_pub = st.published[i];
    int k = 0;
    for (int i = 0; i < n; i++) if (v[i] > newest_pub) v[k++] = v[i];
    rs_free(&st);
    *out = v;
    return k;
}

/* A spool of the job of `url` on this machine: a job file saying so. */
static int spool_of(const char *spool, const char *url, struct lz_job *j)
{
    if (lz_job_read(spool, j) != 0 || !j->stream) return 0;
    char a[800], b[800];
    spool_path(a, sizeof a, url, NULL);
    spool_path(b, sizeof b, j->remote, NULL); /* the same URL, as normalised */
    return !strcmp(a, b);
}

int spool_publish_before_restart(const char *spool, const char *url)
{
    struct lz_job j;
    if (!spool_of(spool, url, &j)) return 0;
    uint64_t *v;
    int n = spool_unpublished(spool, &v);
    if (n <= 0) { free(v); return 0; }
    uint64_t newest = v[n - 1];
    free(v);
    int lock = lz_store_lock(spool);
    if (lock < 0) {
        lz_err("cannot restart: the job is running with its fallback %s (checkpoint it with `lazarus checkpoint -d %s`); "
               "nothing was changed", spool, url);
        return -LZ_EXIT_RUNNING;
    }
    char why[4096], jp[700];
    struct s3_conf c;
    struct flusher *f = NULL;
    int rc = rc_conf_of_job(&c, &j, why, sizeof why);
    if (rc == 0) {
        rc_job_prefix(jp, sizeof jp, &c, j.id);
        rc = spool_probe(&c, jp, why, sizeof why) ? -1 : 0; /* not answering: one line, below */
    }
    if (rc == 0) f = flusher_start(spool, &j, why, sizeof why);
    if (rc == 0) rc = f ? flusher_publish_now(f, why, sizeof why) : -1;
    close(lock);
    if (rc < 0) {
        lz_err("cannot restart: checkpoint %" PRIu64 " is only in the fallback %s on this machine and cannot be published: %s; "
               "nothing was changed", newest, spool, why);
        return -LZ_EXIT_REMOTE;
    }
    lz_err("checkpoint %" PRIu64 " of the fallback %s published to %s", newest, spool, url);
    return 0;
}

void spool_list(const char *url, const char *fallback)
{
    char spool[LZ_PATH_MAX];
    struct lz_job j;
    spool_path(spool, sizeof spool, url, fallback);
    if (!spool_of(spool, url, &j)) return;
    uint64_t *v;
    int n = spool_unpublished(spool, &v);
    for (int i = 0; i < n; i++) printf("%6" PRIu64 "  only in the fallback %s on this machine (not published yet)\n", v[i], spool);
    free(v);
}
