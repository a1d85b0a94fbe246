/* Buffer mode (--fs-mode buffer, CprFS §3): what the job writes or
 * truncates under PATH is held here and reaches the real files only once
 * the checkpoint that holds it is committed.
 *
 * Per file (device, inode) up to two layers over the real file: `cur`, what
 * the job did since the last commit, and `frozen`, what the last CLOSE
 * wrote into the redo log and APPLY will write to the file.  A layer is a
 * cut (its bytes from there on are gone: a truncation), a size, and
 * extents (sorted, disjoint) that override what is below.  The job's reads
 * merge real <- frozen <- cur; everyone else's read the real file.
 *
 * Memory: extents live in memory until the buffered bytes pass the upper
 * threshold, then are moved into a backing file in the store until they
 * are at the lower one (CprFS's two thresholds).  The backing file is an
 * unnamed file (O_TMPFILE) in DIR: nothing is left after a crash, and
 * nothing in it is needed after one (the redo log holds what was
 * committed).  One lock for all of it: the daemon's threads meet here only
 * for buffered files. */
#include "fsd.h"
#include "redo_log.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct fb_ext {
    uint64_t off, len;
    char *mem;      /* the bytes, or NULL: in the backing file at spill */
    uint64_t cap;   /* allocated at mem */
    uint64_t spill;
};

struct fb_set {
    int on;
    uint64_t cut;   /* UINT64_MAX: nothing cut */
    uint64_t size;
    struct fb_ext *v;
    size_t n, cap;
};

struct fb_file {
    dev_t dev;
    ino_t ino;
    int fd;         /* the real file, writable (a dup of the first handle that wrote) */
    struct fb_set cur, frozen;
    struct fb_file *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fb_file *files;
static uint64_t in_mem;           /* buffered bytes in memory */
static int spill_fd = -1;
static uint64_t spill_end;
uint64_t fb_max = 256ull << 20, fb_low = 128ull << 20;
uint64_t fb_spilled_total;        /* bytes ever moved to the backing file (tests read it in the log) */

static struct fb_file *find(dev_t dev, ino_t ino)
{
    for (struct fb_file *f = files; f; f = f->next)
        if (f->dev == dev && f->ino == ino) return f;
    return NULL;
}

static uint64_t real_size(int fd)
{
    struct stat st;
    return fstat(fd, &st) < 0 ? 0 : (uint64_t)st.st_size;
}

static uint64_t top_size(struct fb_file *f)
{
    return f->cur.on ? f->cur.size : f->frozen.on ? f->frozen.size : real_size(f->fd);
}

static void ext_free(struct fb_ext *e)
{
    if (e->mem) { in_mem -= e->len; free(e->mem); }
    e->mem = NULL;
}

static void set_free(struct fb_set *s)
{
    for (size_t i = 0; i < s->n; i++) ext_free(&s->v[i]);
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int set_insert(struct fb_set *s, size_t at, const struct fb_ext *e)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 8;
        struct fb_ext *v = realloc(s->v, nc * sizeof *v);
        if (!v) return -ENOMEM;
        s->v = v;
        s->cap = nc;
    }
    memmove(&s->v[at + 1], &s->v[at], (s->n - at) * sizeof *s->v);
    s->v[at] = *e;
    s->n++;
    return 0;
}

/* drops the first d bytes of e */
static void ext_behead(struct fb_ext *e, uint64_t d)
{
    if (e->mem) { memmove(e->mem, e->mem + d, e->len - d); in_mem -= d; }
    else e->spill += d;
    e->off += d;
    e->len -= d;
}

/* keeps the first l bytes of e */
static void ext_cut(struct fb_ext *e, uint64_t l)
{
    if (e->mem) in_mem -= e->len - l;
    e->len = l;
}

/* [off, end) of s emptied: extents there removed, trimmed or split */
static int set_carve(struct fb_set *s, uint64_t off, uint64_t end)
{
    for (size_t i = 0; i < s->n; i++) {
        struct fb_ext *e = &s->v[i];
        uint64_t eend = e->off + e->len;
        if (eend <= off || e->off >= end) continue;
        if (e->off >= off && eend <= end) { /* inside: gone */
            ext_free(e);
            memmove(e, e + 1, (s->n - i - 1) * sizeof *e);
            s->n--;
            i--;
        } else if (e->off < off && eend > end) { /* around: split in two */
            struct fb_ext t = {.off = end, .len = eend - end};
            if (e->mem) {
                t.mem = malloc(t.len);
                if (!t.mem) return -ENOMEM;
                memcpy(t.mem, e->mem + (end - e->off), t.len);
                t.cap = t.len;
                in_mem += t.len;
            } else {
                t.spill = e->spill + (end - e->off);
            }
            ext_cut(e, off - e->off);
            if (set_insert(s, i + 1, &t) < 0) { ext_free(&t); return -ENOMEM; }
            return 0;
        } else if (e->off < off) {
            ext_cut(e, off - e->off);
        } else {
            ext_behead(e, end - e->off);
        }
    }
    return 0;
}

/* e (owned from now on) over what s holds in its range */
static int set_put(struct fb_set *s, struct fb_ext *e)
{
    int r = set_carve(s, e->off, e->off + e->len);
    if (r < 0) { ext_free(e); return r; }
    size_t at = s->n;
    while (at > 0 && s->v[at - 1].off > e->off) at--;
    if (set_insert(s, at, e) < 0) { ext_free(e); return -ENOMEM; }
    return 0;
}

static void set_truncate(struct fb_set *s, uint64_t size)
{
    set_carve(s, size, UINT64_MAX); /* never splits: nothing lies past UINT64_MAX */
    if (size < s->cut) s->cut = size;
    s->size = size;
}

static void set_start(struct fb_file *f)
{
    if (f->cur.on) return;
    f->cur.on = 1;
    f->cur.cut = UINT64_MAX;
    f->cur.size = f->frozen.on ? f->frozen.size : real_size(f->fd);
}

/* Moves extents out of memory until the lower threshold. */
static void spill(void)
{
    if (spill_fd < 0) {
        spill_fd = open(fsd.store, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (spill_fd < 0) return; /* stays in memory: no worse than no buffer at all */
    }
    for (struct fb_file *f = files; f && in_mem > fb_low; f = f->next) {
        struct fb_set *sets[2] = {&f->frozen, &f->cur};
        for (int k = 0; k < 2; k++)
            for (size_t i = 0; i < sets[k]->n && in_mem > fb_low; i++) {
                struct fb_ext *e = &sets[k]->v[i];
                if (!e->mem) continue;
                if (pwrite(spill_fd, e->mem, e->len, (off_t)spill_end) != (ssize_t)e->len) return;
                e->spill = spill_end;
                spill_end += e->len;
                fb_spilled_total += e->len;
                ext_free(e);
            }
    }
}

static struct fb_file *get(int fd)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return NULL;
    struct fb_file *f = find(st.st_dev, st.st_ino);
    if (f) return f;
    f = calloc(1, sizeof *f);
    if (!f) return NULL;
    /* readable and writable: the engine reads the old bytes through it at CLOSE
     * (the handle that wrote may be write-only) */
    char p[64];
    snprintf(p, sizeof p, "/proc/self/fd/%d", fd);
    f->fd = open(p, O_RDWR | O_CLOEXEC);
    if (f->fd < 0) f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (f->fd < 0) { free(f); return NULL; }
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->next = files;
    files = f;
    return f;
}

int fb_write(int fd, int append, uint64_t off, const char *data, uint64_t len)
{
    pthread_mutex_lock(&lock);
    struct fb_file *f = get(fd);
    int r = f ? 0 : -EIO;
    if (f) {
        set_start(f);
        struct fb_set *s = &f->cur;
        if (append) off = s->size;
        struct fb_ext *last = s->n ? &s->v[s->n - 1] : NULL;
        if (last && last->mem && last->off + last->len == off) { /* the common case, appends: aggregated */
            if (last->len + len > last->cap) {
                uint64_t nc = last->cap * 2 > last->len + len ? last->cap * 2 : last->len + len;
                char *m = realloc(last->mem, nc);
                if (!m) r = -ENOMEM;
                else { last->mem = m; last->cap = nc; }
            }
            if (!r) {
                memcpy(last->mem + last->len, data, len);
                last->len += len;
                in_mem += len;
            }
        } else {
            struct fb_ext e = {.off = off, .len = len, .mem = malloc(len ? len : 1), .cap = len};
            if (!e.mem) r = -ENOMEM;
            else {
                memcpy(e.mem, data, len);
                in_mem += len;
                r = set_put(s, &e);
            }
        }
        if (!r && off + len > s->size) s->size = off + len;
        if (in_mem > fb_max) spill();
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int fb_truncate(int fd, uint64_t size)
{
    pthread_mutex_lock(&lock);
    struct fb_file *f = get(fd);
    if (f) {
        set_start(f);
        set_truncate(&f->cur, size);
    }
    pthread_mutex_unlock(&lock);
    return f ? 0 : -EIO;
}

/* [off, off+len) of layer k (2 cur, 1 frozen, 0 the file) into buf */
static int layer_read(struct fb_file *f, int k, int realfd, char *buf, uint64_t off, uint64_t len)
{
    struct fb_set *s = k == 2 ? &f->cur : &f->frozen;
    if (k == 0 || !s->on) {
        if (k > 0) return layer_read(f, k - 1, realfd, buf, off, len);
        uint64_t got = 0;
        while (got < len) {
            ssize_t n = pread(realfd, buf + got, len - got, (off_t)(off + got));
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return -errno;
            if (n == 0) break;
            got += (uint64_t)n;
        }
        memset(buf + got, 0, len - got);
        return 0;
    }
    uint64_t end = off + len, lim = end < s->cut ? end : s->cut;
    if (off < lim) {
        int r = layer_read(f, k - 1, realfd, buf, off, lim - off);
        if (r < 0) return r;
    }
    if (lim < end) memset(buf + (lim > off ? lim - off : 0), 0, end - (lim > off ? lim : off));
    for (size_t i = 0; i < s->n; i++) {
        struct fb_ext *e = &s->v[i];
        uint64_t a = e->off > off ? e->off : off, b = e->off + e->len < end ? e->off + e->len : end;
        if (a >= b) continue;
        if (e->mem) memcpy(buf + (a - off), e->mem + (a - e->off), b - a);
        else if (pread(spill_fd, buf + (a - off), b - a, (off_t)(e->spill + (a - e->off))) != (ssize_t)(b - a)) return -EIO;
    }
    return 0;
}

/* A job's read: its own data over the file.  1 done (*got bytes at buf),
 * 0 the file holds nothing buffered (read the real file). */
int fb_read(int fd, uint64_t off, uint64_t len, char *buf, uint64_t *got)
{
    struct stat st;
    if (fstat(fd, &st) < 0) return -errno;
    pthread_mutex_lock(&lock);
    struct fb_file *f = find(st.st_dev, st.st_ino);
    int r = 0;
    if (f && (f->cur.on || f->frozen.on)) {
        uint64_t size = top_size(f);
        *got = off >= size ? 0 : (off + len > size ? size - off : len);
        r = *got ? layer_read(f, 2, fd, buf, off, *got) : 0;
        if (r == 0) r = 1;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* The size the job sees of (dev, ino): 1 set, 0 nothing buffered. */
int fb_size(dev_t dev, ino_t ino, uint64_t *size)
{
    pthread_mutex_lock(&lock);
    struct fb_file *f = find(dev, ino);
    int r = f && (f->cur.on || f->frozen.on);
    if (r) *size = top_size(f);
    pthread_mutex_unlock(&lock);
    return r;
}

/* cur put into frozen (a failed checkpoint's data joins the next), cur emptied */
static int compose(struct fb_file *f)
{
    if (!f->cur.on) return 0;
    if (!f->frozen.on) {
        f->frozen = f->cur;
        memset(&f->cur, 0, sizeof f->cur);
        return 0;
    }
    /* what cur cut is gone from frozen too: x >= cut reads as zeros, unless cur wrote it */
    if (f->cur.cut != UINT64_MAX) {
        set_carve(&f->frozen, f->cur.cut, UINT64_MAX);
        if (f->cur.cut < f->frozen.cut) f->frozen.cut = f->cur.cut;
    }
    int r = 0;
    for (size_t i = 0; i < f->cur.n; i++)
        if (r == 0) r = set_put(&f->frozen, &f->cur.v[i]);
        else ext_free(&f->cur.v[i]);
    f->cur.n = 0;
    f->frozen.size = f->cur.size;
    set_free(&f->cur);
    return r;
}

static int ext_bytes(const struct fb_ext *e, char **tmp, const char **p)
{
    if (e->mem) { *p = e->mem; return 0; }
    char *b = realloc(*tmp, e->len ? e->len : 1);
    if (!b) return -ENOMEM;
    *tmp = b;
    if (pread(spill_fd, b, e->len, (off_t)e->spill) != (ssize_t)e->len) return -EIO;
    *p = b;
    return 0;
}

/* CLOSE of checkpoint `index`, the gate closed, in the interval's journal
 * still: every buffered file's undo recorded (the bytes APPLY will
 * overwrite, at their state of the last commit), then the redo log written
 * into dir and ended with FIN.  0 or -errno (why). */
int fb_close(const char *dir, const uint64_t job[2], uint64_t index, char *why, size_t whylen)
{
    pthread_mutex_lock(&lock);
    int r = 0;
    for (struct fb_file *f = files; f && !r; f = f->next) r = compose(f);
    const char *fail = getenv("LAZARUS_TEST_FSD_CLOSE_FAIL"); /* tests fail this checkpoint here */
    if (!r && fail && strtoull(fail, NULL, 10) == index) {
        r = -EIO;
        snprintf(why, whylen, "cannot write the redo log: failed for a test");
    }
    /* the undo of the apply, in the journal of the interval that ends */
    for (struct fb_file *f = files; f && !r; f = f->next) {
        struct stat st;
        if (!f->frozen.on || fstat(f->fd, &st) < 0 || st.st_nlink == 0) continue;
        fj_fd_changed(f->fd);
        fj_after_open(f->fd, 0);
        uint64_t rs = (uint64_t)st.st_size;
        if (f->frozen.cut < rs) r = fj_before_truncate_fd(f->fd, (int64_t)f->frozen.cut);
        for (size_t i = 0; i < f->frozen.n && !r; i++) r = fj_before_write(f->fd, (int64_t)f->frozen.v[i].off, f->frozen.v[i].len);
        if (!r && f->frozen.size != rs) r = fj_before_truncate_fd(f->fd, (int64_t)f->frozen.size);
        if (r) snprintf(why, whylen, "cannot record the undo of a buffered file: %s", strerror(-r));
    }
    int log = r ? -1 : fr_create(dir, job, index);
    if (!r && log < 0) { r = log; snprintf(why, whylen, "cannot make the redo log: %s", strerror(-r)); }
    uint64_t nf = 0, ne = 0, nb = 0;
    char *tmp = NULL;
    for (struct fb_file *f = files; f && !r; f = f->next) {
        struct stat st;
        if (!f->frozen.on || fstat(f->fd, &st) < 0 || st.st_nlink == 0) continue; /* no name: nothing to redo */
        char p[64], path[4200];
        snprintf(p, sizeof p, "/proc/self/fd/%d", f->fd);
        ssize_t l = readlink(p, path, sizeof path - 1);
        if (l < 0) { r = -errno; snprintf(why, whylen, "cannot name a buffered file: %s", strerror(errno)); break; }
        path[l] = 0;
        r = fr_file(log, path, (uint64_t)f->dev, (uint64_t)f->ino, f->frozen.cut, f->frozen.size);
        nf++;
        for (size_t i = 0; i < f->frozen.n && !r; i++) {
            const char *b;
            r = ext_bytes(&f->frozen.v[i], &tmp, &b);
            if (!r) r = fr_ext(log, f->frozen.v[i].off, b, f->frozen.v[i].len);
            ne++;
            nb += f->frozen.v[i].len;
        }
        if (r) snprintf(why, whylen, "cannot write the redo log: %s", strerror(-r));
    }
    free(tmp);
    const char *d = getenv("LAZARUS_TEST_FSD_FIN_DELAY_MS"); /* tests kill us before FIN */
    if (!r && d) usleep((useconds_t)atoi(d) * 1000);
    if (!r && (r = fr_fin(log, dir, nf, ne, nb)) < 0) snprintf(why, whylen, "cannot end the redo log: %s", strerror(-r));
    if (log >= 0) close(log);
    pthread_mutex_unlock(&lock);
    return r;
}

static void drop_empty(void)
{
    for (struct fb_file **p = &files; *p;) {
        struct fb_file *f = *p;
        if (f->cur.on || f->frozen.on) { p = &f->next; continue; }
        *p = f->next;
        fj_fd_changed(f->fd);
        close(f->fd);
        free(f);
    }
    if (!files && spill_fd >= 0 && spill_end) { /* the backing file is empty again */
        if (ftruncate(spill_fd, 0) == 0) spill_end = 0;
    }
}

static int apply_frozen(struct fb_file *f, char **tmp)
{
    struct fb_set *s = &f->frozen;
    int r = 0;
    if (real_size(f->fd) > s->cut && ftruncate(f->fd, (off_t)s->cut) < 0) r = -errno;
    for (size_t i = 0; i < s->n && !r; i++) {
        const char *b;
        r = ext_bytes(&s->v[i], tmp, &b);
        for (uint64_t done = 0; !r && done < s->v[i].len;) {
            ssize_t n = pwrite(f->fd, b + done, s->v[i].len - done, (off_t)(s->v[i].off + done));
            if (n < 0) r = -errno;
            else done += (uint64_t)n;
        }
    }
    if (!r && real_size(f->fd) != s->size && ftruncate(f->fd, (off_t)s->size) < 0) r = -errno;
    set_free(s);
    return r;
}

/* APPLY: checkpoint committed, its redo log on the disk: the frozen layers
 * written to the files.  A crash in here is finished by the next restart
 * (fr_apply_checkpoint).  0 or -errno. */
int fb_apply(const char *who)
{
    (void)who;
    pthread_mutex_lock(&lock);
    const char *d = getenv("LAZARUS_TEST_FSD_APPLY_DELAY_MS"); /* tests kill us between FIN and the apply */
    int r = 0, any = 0;
    char *tmp = NULL;
    for (struct fb_file *f = files; f; f = f->next) {
        if (!f->frozen.on) continue;
        if (d && !any) usleep((useconds_t)atoi(d) * 1000);
        any = 1;
        int e = apply_frozen(f, &tmp);
        if (e && !r) r = e;
    }
    free(tmp);
    drop_empty();
    pthread_mutex_unlock(&lock);
    return r;
}

/* FINISH: the program ended by itself, its end is its last commit: what it
 * wrote since the last checkpoint reaches the files, its undo recorded in
 * the interval's journal first (as an undo-mode write would be). */
int fb_finish(char *why, size_t whylen)
{
    pthread_mutex_lock(&lock);
    int r = 0;
    char *tmp = NULL;
    for (struct fb_file *f = files; f && !r; f = f->next) {
        r = compose(f);
        struct stat st;
        if (r || !f->frozen.on || fstat(f->fd, &st) < 0) continue;
        fj_fd_changed(f->fd);
        fj_after_open(f->fd, 0);
        if (st.st_nlink) {
            if (f->frozen.cut < (uint64_t)st.st_size) r = fj_before_truncate_fd(f->fd, (int64_t)f->frozen.cut);
            for (size_t i = 0; i < f->frozen.n && !r; i++) r = fj_before_write(f->fd, (int64_t)f->frozen.v[i].off, f->frozen.v[i].len);
            if (!r && f->frozen.size != (uint64_t)st.st_size) r = fj_before_truncate_fd(f->fd, (int64_t)f->frozen.size);
        }
        if (!r) r = apply_frozen(f, &tmp);
        if (r) snprintf(why, whylen, "cannot write the buffered data: %s", strerror(-r));
    }
    free(tmp);
    drop_empty();
    pthread_mutex_unlock(&lock);
    return r;
}
