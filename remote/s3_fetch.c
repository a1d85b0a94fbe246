/* Many objects fetched at once (a restart elsewhere: every manifest, tree
 * and pack of a checkpoint).  One batch of ranged GETs over the request
 * engine, object after object, so that `in_flight` of them run at once
 * across objects and small objects never wait for each other; each range is
 * written straight into place in its file (pwrite at its offset, no buffer).
 *
 * The MD5 of an object must be computed in order, while ranges end in any
 * order and a range cut in the middle is fetched again from its start.  So
 * the hasher, a thread of its own (the other core, while this one receives),
 * reads each object back from its file once its next range is complete (from
 * the page cache) and hashes it, and starts that range's writeback
 * (sync_file_range), so the caller's fsync at the end finds little left. */
#include "s3.h"
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct obj_state {
    size_t first, count;     /* its ranges in the batch */
    size_t hashed;           /* ranges hashed so far (in order) */
    EVP_MD_CTX *md;
    int failed;
};

struct fetch {
    const struct s3_conf *c;
    struct s3_fetch *objs;
    struct obj_state *os;
    size_t n, nr;
    struct s3_req *rq;
    int *range_obj;          /* the object of each range */
    unsigned char *done;     /* per range: 1 fetched and whole (release/acquire: its bytes are in the file) */
    char size_err[1024];     /* the first object whose size is not what the commit said */
    size_t size_err_obj;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    unsigned gen;            /* bumped at each range's end */
    int over;                /* the engine returned: no range will end any more */
    uint64_t received, total;
    s3_progress_fn progress;
    void *arg;
    uint64_t t0;
    char hash_err[1024];
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* In the engine's thread, as each range ends. */
static void range_done(struct s3_req *r, void *arg)
{
    struct fetch *f = arg;
    size_t i = (size_t)(r - f->rq), o = (size_t)f->range_obj[i];
    const struct s3_fetch *ob = &f->objs[o];
    /* the server's size of the object (Content-Range, or the body of an empty one) */
    if (r->failed && r->status == 404) /* its commit lists it: the store lost it */
        snprintf(r->err, sizeof r->err, "remote object s3://%s/%s is gone", f->c->bucket, ob->key);
    uint64_t said = r->range_len ? r->total : r->got;
    if (!r->failed && (said != ob->size || (r->range_len == 0 && r->length != 0))) {
        if (!*f->size_err || o < f->size_err_obj) {
            snprintf(f->size_err, sizeof f->size_err, "remote object s3://%s/%s holds %llu bytes, its commit says %llu",
                     f->c->bucket, ob->key, (unsigned long long)(said ? said : r->length), (unsigned long long)ob->size);
            f->size_err_obj = o;
        }
        r->failed = 1;
    }
    if (!r->failed) __atomic_store_n(&f->done[i], 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&f->mu);
    f->gen++;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

/* Hashes what is complete of object o in order: 1 if it moved on, 0 if not, -1 failed. */
static int hash_some(struct fetch *f, size_t o, char *buf, size_t blen)
{
    struct obj_state *s = &f->os[o];
    int moved = 0;
    while (s->hashed < s->count && __atomic_load_n(&f->done[s->first + s->hashed], __ATOMIC_ACQUIRE)) {
        const struct s3_req *r = &f->rq[s->first + s->hashed];
        for (uint64_t at = 0; at < r->got;) {
            size_t want = r->got - at < blen ? (size_t)(r->got - at) : blen;
            ssize_t k = pread(f->objs[o].fd, buf, want, (off_t)(r->range_off + at));
            if (k <= 0) {
                snprintf(f->hash_err, sizeof f->hash_err, "cannot read back what s3://%s/%s holds: %s", f->c->bucket, f->objs[o].key,
                         k < 0 ? strerror(errno) : "the file is shorter");
                return -1;
            }
            EVP_DigestUpdate(s->md, buf, (size_t)k);
            at += (uint64_t)k;
        }
        if (r->got) sync_file_range(f->objs[o].fd, (off_t)r->range_off, (off_t)r->got, SYNC_FILE_RANGE_WRITE);
        s->hashed++;
        moved = 1;
    }
    if (s->hashed == s->count && s->md) {
        unsigned char m[16];
        unsigned int ml = 0;
        EVP_DigestFinal_ex(s->md, m, &ml);
        s3_hex(m, 16, f->objs[o].md5_hex);
        EVP_MD_CTX_free(s->md);
        s->md = NULL;
    }
    return moved;
}

static void *hasher(void *arg)
{
    struct fetch *f = arg;
    size_t blen = 1u << 20, lowest = 0;
    char *buf = malloc(blen);
    uint64_t last_shown = 0;
    unsigned seen = 0;
    if (!buf) { snprintf(f->hash_err, sizeof f->hash_err, "out of memory"); return NULL; }
    for (;;) {
        pthread_mutex_lock(&f->mu);
        int over = f->over;
        if (f->gen == seen && !over) {
            struct timespec dl;
            clock_gettime(CLOCK_REALTIME, &dl);
            dl.tv_nsec += 200000000;
            if (dl.tv_nsec >= 1000000000) { dl.tv_sec++; dl.tv_nsec -= 1000000000; }
            pthread_cond_timedwait(&f->cv, &f->mu, &dl);
        }
        seen = f->gen;
        over = f->over;
        pthread_mutex_unlock(&f->mu);
        int moved = 0;
        while (lowest < f->n && f->os[lowest].hashed == f->os[lowest].count) lowest++;
        for (size_t o = lowest; o < f->n && !*f->hash_err; o++) {
            int h = hash_some(f, o, buf, blen);
            if (h < 0) break;
            moved |= h;
        }
        uint64_t t = now_ns();
        if (f->progress && t - last_shown >= 200000000ull) {
            uint64_t got = __atomic_load_n(&f->received, __ATOMIC_RELAXED);
            f->progress(got < f->total ? got : f->total, f->total, (double)(t - f->t0) / 1e9, f->arg);
            last_shown = t;
        }
        if (*f->hash_err || lowest == f->n || (over && !moved)) break;
    }
    free(buf);
    return NULL;
}

int s3_get_objects(const struct s3_conf *c, struct s3_fetch *objs, size_t n, int in_flight, s3_progress_fn progress,
                   void *arg, char *why, size_t whylen)
{
    size_t chunk = s3_part_size(), nr = 0;
    for (size_t o = 0; o < n; o++) nr += objs[o].size ? (size_t)((objs[o].size + chunk - 1) / chunk) : 1;
    struct fetch f;
    memset(&f, 0, sizeof f);
    f.c = c;
    f.objs = objs;
    f.n = n;
    f.nr = nr;
    f.progress = progress;
    f.arg = arg;
    f.os = calloc(n ? n : 1, sizeof *f.os);
    f.rq = calloc(nr ? nr : 1, sizeof *f.rq);
    f.range_obj = calloc(nr ? nr : 1, sizeof *f.range_obj);
    f.done = calloc(nr ? nr : 1, 1);
    int rc = f.os && f.rq && f.range_obj && f.done ? 0 : -1;
    for (size_t o = 0; o < n && rc == 0; o++) if (!(f.os[o].md = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(f.os[o].md, EVP_md5(), NULL)) rc = -1;
    if (rc < 0) snprintf(why, whylen, "out of memory");
    for (size_t o = 0, i = 0; o < n && rc == 0; o++) {
        f.os[o].first = i;
        f.total += objs[o].size;
        size_t count = objs[o].size ? (size_t)((objs[o].size + chunk - 1) / chunk) : 1;
        for (size_t k = 0; k < count; k++, i++) {
            struct s3_req *r = &f.rq[i];
            uint64_t off = (uint64_t)k * chunk;
            r->method = "GET";
            snprintf(r->key, sizeof r->key, "%s", objs[o].key);
            r->range_off = off;
            r->range_len = objs[o].size - off < chunk ? objs[o].size - off : chunk; /* 0: an empty object, whole */
            r->to_fd = 1;
            r->fd = objs[o].fd;
            r->received = &f.received;
            r->on_done = range_done;
            r->done_arg = &f;
            f.range_obj[i] = (int)o;
            f.os[o].count++;
        }
    }
    pthread_t th;
    int started = 0;
    if (rc == 0) {
        pthread_mutex_init(&f.mu, NULL);
        pthread_cond_init(&f.cv, NULL);
        f.t0 = now_ns();
        started = pthread_create(&th, NULL, hasher, &f) == 0;
        if (!started) { snprintf(why, whylen, "cannot start a thread: %s", strerror(errno)); rc = -1; }
    }
    if (rc == 0) {
        struct s3_conf cc = *c;
        cc.parallel = in_flight > 0 ? in_flight : c->parallel;
        if (s3_perform(&cc, f.rq, nr) < 0) rc = -1;
        pthread_mutex_lock(&f.mu);
        f.over = 1;
        pthread_cond_signal(&f.cv);
        pthread_mutex_unlock(&f.mu);
        pthread_join(th, NULL);
        /* the first object that failed, in the commit's order */
        for (size_t o = 0; o < n && rc == 0; o++) if (f.os[o].hashed < f.os[o].count) rc = -1;
        if (rc < 0) {
            const char *first = NULL;
            for (size_t i = 0; i < nr && !first; i++) {
                if (*f.size_err && (size_t)f.range_obj[i] == f.size_err_obj) first = f.size_err;
                else if (f.rq[i].failed && *f.rq[i].err) first = f.rq[i].err;
            }
            snprintf(why, whylen, "%s", *f.hash_err ? f.hash_err : first ? first : "a remote object was not fetched");
        } else if (progress) {
            progress(f.total, f.total, (double)(now_ns() - f.t0) / 1e9, arg);
        }
        pthread_mutex_destroy(&f.mu);
        pthread_cond_destroy(&f.cv);
    }
    for (size_t o = 0; f.os && o < n; o++) EVP_MD_CTX_free(f.os[o].md);
    for (size_t i = 0; f.rq && i < nr; i++) s3_req_free(&f.rq[i]);
    free(f.os);
    free(f.rq);
    free(f.range_obj);
    free(f.done);
    return rc;
}
