/* The commit object of a remote checkpoint: the list of every object the
 * checkpoint needs (local path, size, MD5, key), the job, the index, the
 * flusher that wrote it; a text whose last line is the XXH3-64 of all
 * before it, like DIR/job.  Also the job's key prefix and the listing of
 * commits. */
#include "remote_store.h"
#include "hash.h"
#include "jobid.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RC_MAGIC "lazarus-remote-commit 1"

void rc_job_prefix(char *buf, size_t len, const struct s3_conf *c, const uint64_t job[2])
{
    char id[33];
    lz_job_id_text(id, job);
    snprintf(buf, len, "%s%s%s/", c->prefix, *c->prefix ? "/" : "", id);
}

void rc_commit_add(struct rc_commit *c, const struct rc_object *o)
{
    if (c->nobjs == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 32;
        c->objs = lz_xrealloc(c->objs, c->cap * sizeof *c->objs);
    }
    c->objs[c->nobjs++] = *o;
}

void rc_commit_free(struct rc_commit *c)
{
    free(c->objs);
    c->objs = NULL;
    c->nobjs = c->cap = 0;
}

char *rc_commit_text(const struct rc_commit *c, size_t *len)
{
    size_t cap = 512 + c->nobjs * 1700, n = 0;
    char *buf = lz_xmalloc(cap), id[33];
    lz_job_id_text(id, c->job);
    n += (size_t)snprintf(buf + n, cap - n, RC_MAGIC "\njob %s\nindex %" PRIu64 "\nwriter %s\ncreated_ns %" PRIu64
                          "\n", id, c->index, c->writer, c->created_ns);
    if (*c->keyfp) n += (size_t)snprintf(buf + n, cap - n, "key %s\n", c->keyfp);
    for (size_t i = 0; i < c->nobjs; i++)
        n += (size_t)snprintf(buf + n, cap - n, "object %" PRIu64 " %s %s %s\n", c->objs[i].size, c->objs[i].md5,
                              c->objs[i].path, c->objs[i].key);
    n += (size_t)snprintf(buf + n, cap - n, "check %016" PRIx64 "\n", lz_hash(buf, n));
    *len = n;
    return buf;
}

/* A local path is relative, without "..", without spaces: it is joined to the cache directory. */
static int path_ok(const char *p)
{
    if (!*p || *p == '/' || strstr(p, "..") || strchr(p, ' ')) return 0;
    return 1;
}

int rc_commit_parse(const char *buf, size_t len, struct rc_commit *c, char *why, size_t whylen)
{
    memset(c, 0, sizeof *c);
    const char *end = buf + len, *last = len > 1 ? memrchr(buf, '\n', len - 1) : NULL;
    last = last ? last + 1 : buf;
    char want[40];
    snprintf(want, sizeof want, "check %016" PRIx64 "\n", lz_hash(buf, (size_t)(last - buf)));
    if ((size_t)(end - last) != strlen(want) || memcmp(last, want, strlen(want)) || memchr(buf, 0, len)) {
        snprintf(why, whylen, "its checksum line is missing or wrong");
        return -1;
    }
    char *text = lz_xmalloc((size_t)(last - buf) + 1);
    memcpy(text, buf, (size_t)(last - buf));
    text[last - buf] = 0;
    int have = 0, rc = 0;
    char *save, *line = strtok_r(text, "\n", &save);
    if (!line || strcmp(line, RC_MAGIC)) { snprintf(why, whylen, "it is not a commit object of this version (%s)", RC_MAGIC); free(text); return -1; }
    while (rc == 0 && (line = strtok_r(NULL, "\n", &save))) {
        char a[1100], b[600];
        struct rc_object o;
        memset(&o, 0, sizeof o);
        if (sscanf(line, "job %32s", a) == 1) have |= (lz_job_id_parse(a, c->job) == 0) << 0;
        else if (sscanf(line, "index %" SCNu64, &c->index) == 1) have |= 2;
        else if (sscanf(line, "writer %16s", c->writer) == 1) have |= 4;
        else if (sscanf(line, "created_ns %" SCNu64, &c->created_ns) == 1) continue;
        else if (sscanf(line, "key %16[0-9a-f]", c->keyfp) == 1 && strlen(c->keyfp) == 16) continue;
        else if (sscanf(line, "object %" SCNu64 " %32s %511s %1023s", &o.size, o.md5, b, a) == 4 && strlen(o.md5) == 32 && path_ok(b)) {
            snprintf(o.path, sizeof o.path, "%.511s", b);
            snprintf(o.key, sizeof o.key, "%.1023s", a);
            rc_commit_add(c, &o);
        } else {
            snprintf(why, whylen, "it has a line it should not: '%.80s'", line);
            rc = -1;
        }
    }
    free(text);
    if (rc == 0 && have != 7) { snprintf(why, whylen, "it lacks its job, index or writer"); rc = -1; }
    if (rc < 0) rc_commit_free(c);
    return rc;
}

static int cmp_ref(const void *a, const void *b)
{
    const struct rc_ref *x = a, *y = b;
    for (int i = 0; i < 2; i++) if (x->job[i] != y->job[i]) return x->job[i] < y->job[i] ? -1 : 1;
    if (x->index != y->index) return x->index < y->index ? -1 : 1;
    return strcmp(x->writer, y->writer);
}

ssize_t rc_list_commits(const struct s3_conf *c, struct rc_ref **out, char *why, size_t whylen)
{
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s%s", c->prefix, *c->prefix ? "/" : "");
    struct s3_object *v;
    ssize_t n = s3_list(c, prefix, &v, why, whylen);
    if (n < 0) return -1;
    struct rc_ref *r = lz_xcalloc((size_t)n + 1, sizeof *r);
    size_t k = 0, pl = strlen(prefix);
    for (ssize_t i = 0; i < n; i++) {
        /* JOB/commit/N.W */
        const char *rest = v[i].key + pl;
        char id[33], w[17];
        uint64_t idx;
        int used = 0;
        if (strncmp(v[i].key, prefix, pl) || sscanf(rest, "%32[0-9a-f]/commit/%" SCNu64 ".%16[0-9a-f]%n", id, &idx, w, &used) != 3 ||
            rest[used] || strlen(id) != 32 || strlen(w) != 16)
            continue;
        if (lz_job_id_parse(id, r[k].job) < 0) continue;
        r[k].index = idx;
        snprintf(r[k].writer, sizeof r[k].writer, "%s", w);
        snprintf(r[k].key, sizeof r[k].key, "%s", v[i].key);
        k++;
    }
    free(v);
    qsort(r, k, sizeof *r, cmp_ref);
    *out = r;
    return (ssize_t)k;
}

int rc_fetch_commit(const struct s3_conf *c, const struct rc_ref *ref, struct rc_commit *out, char *why, size_t whylen)
{
    char *buf, inner[600];
    size_t len;
    int g = s3_get_buf(c, ref->key, &buf, &len, why, whylen);
    if (g < 0) return -1;
    if (g > 0) { snprintf(why, whylen, "commit object s3://%s/%s is gone", c->bucket, ref->key); return 1; }
    int rc = rc_commit_parse(buf, len, out, inner, sizeof inner);
    free(buf);
    if (rc < 0) { snprintf(why, whylen, "commit object s3://%s/%s is damaged: %s", c->bucket, ref->key, inner); return -1; }
    if (out->index != ref->index || out->job[0] != ref->job[0] || out->job[1] != ref->job[1] || strcmp(out->writer, ref->writer)) {
        snprintf(why, whylen, "commit object s3://%s/%s names another checkpoint (%" PRIu64 ")", c->bucket, ref->key, out->index);
        rc_commit_free(out);
        return -1;
    }
    return 0;
}

int rc_conf_of_job(struct s3_conf *c, const struct lz_job *job, char *why, size_t whylen)
{
    return s3_conf_load(c, job->remote, job->remote_endpoint, job->remote_addressing, job->remote_ca, job->remote_insecure,
                        why, whylen);
}
