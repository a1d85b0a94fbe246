/* The fault server of a lazy restart (`lazarus restart --lazy`, issue 20).
 *
 * The restorer registers the program's private anonymous regions with a
 * userfaultfd (restorer/restore_lazy.c) and sends it to the supervisor,
 * which runs this server as a process of its own (`lazarus __lazy-serve`)
 * and keeps a copy of the userfaultfd until the server has exited with
 * everything in.  Pages are placed a frame at a time: a frame is read,
 * expanded and its XXH3 checked in a buffer before any byte of it goes into
 * the program (UFFDIO_COPY, which also wakes the threads waiting on it).
 *  - An event thread reads the userfaultfd: faults are queued for the
 *    workers; the program's own changes to its memory are followed, so that
 *    a page is never filled over them: pages it discards (MADV_DONTNEED,
 *    REMOVE) or unmaps (UNMAP) are marked and later read as zeros, as they
 *    would have; a moved range (REMAP: realloc's mremap) is followed by a
 *    table of moves; a fork (FORK) brings the child's own userfaultfd, filled
 *    in the same way.  Events are read under the write side of a lock whose
 *    read side covers every copy: a copy then never lands after a discard
 *    it did not see (the kernel refuses a copy while an event is unread:
 *    EAGAIN, and the worker tries again).
 *  - Two workers serve the queued faults first, each with its whole frame,
 *    then prefetch: the frames after the last fault first, then every frame
 *    in order (the pack's order: one sequential read).
 *  - A frame that cannot be read, expanded or checked stops the job: one
 *    line naming the checkpoint and the frame, the program killed before
 *    anything of that frame (or zeros in its place) reaches it.
 * Once every frame is in, the server exits 0; the supervisor closes its
 * copy of the userfaultfd, and the regions are ordinary memory again. */
#include "cli.h"
#include "lazy.h"
#include "manifest.h"
#include "store.h"
#include "hash.h"
#include "codec.h"
#include "util.h"
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#define PAGE 4096ull
#define MAX_MM 64     /* the program and the children it forks during the fill */
#define NWORKERS 2
#define HINT_FRAMES 8 /* frames prefetched after a fault before going on in order */

struct lrange { uint64_t start, end, page0; }; /* a registered region (original addresses) */
struct move { uint64_t from, to, len; };
struct mm {
    int fd, dead;
    uint8_t *removed;            /* per page of the ranges: discarded or unmapped by the program */
    struct move *moves;          /* REMAP events, in order */
    size_t nmoves, capmoves;
};
struct fault { int mm; uint64_t page; };

static struct {
    struct lz_image img;
    uint64_t index;
    int *packfds;
    const char **packmaps;  /* each pack mapped read-only (NULL: not) */
    struct lrange *ranges;
    size_t nranges;
    uint64_t npages;
    uint32_t *fx_at, *fx;   /* per frame: the extents of the ranges it fills */
    _Atomic uint8_t *state; /* per frame: 0 not yet, 1 being placed, 2 placed (or nothing to place) */
    _Atomic size_t cursor;  /* next frame in order */
    _Atomic long hint, hint_left;
    _Atomic size_t placed;  /* frames at state 2 */
    size_t nused;           /* frames with extents of the ranges */
    struct mm mms[MAX_MM];
    _Atomic int nmm;
    pthread_rwlock_t lock;
    pthread_mutex_t qlock;
    struct fault *queue;
    size_t qlen, qcap;
    _Atomic size_t pending; /* faults queued or being served */
    pid_t victim;
    int pause_ms;
    _Atomic int failing;
    _Atomic int finished; /* every frame in and no fault waiting: the workers end */
} S;

static _Noreturn void stop_job(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static _Noreturn void stop_job(const char *fmt, ...)
{
    if (atomic_exchange(&S.failing, 1)) for (;;) pause(); /* another thread says it */
    char buf[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    lz_err("%s", buf); /* first: the supervisor ends us once the job is gone */
    /* the job must not run on without us (the supervisor's copy of the
     * userfaultfd keeps its missing pages waiting meanwhile, never zeros) */
    if (S.victim > 0) kill(S.victim, SIGKILL);
    _exit(1);
}

static const struct lrange *range_of(uint64_t orig)
{
    size_t lo = 0, hi = S.nranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (S.ranges[mid].end <= orig) lo = mid + 1; else hi = mid;
    }
    return lo < S.nranges && S.ranges[lo].start <= orig ? &S.ranges[lo] : NULL;
}

static int removed(const struct mm *m, uint64_t orig)
{
    const struct lrange *r = range_of(orig);
    if (!r) return 1;
    uint64_t p = r->page0 + (orig - r->start) / PAGE;
    return (m->removed[p / 8] >> (p % 8)) & 1;
}

/* Original address -> where it is now in mm m, and for how many bytes that holds. */
static uint64_t xlate(const struct mm *m, uint64_t a, uint64_t *run)
{
    uint64_t lim = ~0ull;
    for (size_t i = 0; i < m->nmoves; i++) {
        const struct move *v = &m->moves[i];
        if (a >= v->from && a < v->from + v->len) {
            if (v->from + v->len - a < lim) lim = v->from + v->len - a;
            a = a - v->from + v->to;
        } else if (a < v->from && v->from - a < lim) {
            lim = v->from - a;
        }
    }
    *run = lim;
    return a;
}

/* Where address a of mm m was in the image; ~0 (no range) for a place a
 * move emptied (the kernel reports the source of a move as unmapped after
 * the move: that must not touch the pages that moved away). */
static uint64_t unxlate(const struct mm *m, uint64_t a)
{
    for (size_t i = m->nmoves; i-- > 0;) {
        const struct move *v = &m->moves[i];
        if (a >= v->to && a < v->to + v->len) a = a - v->to + v->from;
        else if (a >= v->from && a < v->from + v->len) return ~0ull;
    }
    return a;
}

/* The program discarded or unmapped [a, b) (its addresses now): never filled. */
static void mark_removed(struct mm *m, uint64_t a, uint64_t b)
{
    for (uint64_t p = a & ~(PAGE - 1); p < b; p += PAGE) {
        uint64_t o = unxlate(m, p);
        const struct lrange *r = range_of(o);
        if (!r) continue;
        uint64_t k = r->page0 + (o - r->start) / PAGE;
        m->removed[k / 8] |= (uint8_t)(1u << (k % 8));
    }
}

enum { COPIED, AGAIN, GONE };

/* len bytes from src to original address orig in mm m, skipping what the
 * program removed and pages already there (EEXIST).  Under the read lock. */
static int copy_into(struct mm *m, uint64_t orig, const char *src, uint64_t len)
{
    uint64_t off = 0;
    while (off < len) {
        if (m->dead) return GONE;
        if (removed(m, orig + off)) { off += PAGE; continue; }
        uint64_t run, n = PAGE;
        uint64_t cur = xlate(m, orig + off, &run);
        while (off + n < len && n + PAGE <= run && !removed(m, orig + off + n)) n += PAGE;
        struct uffdio_copy c = {.dst = cur, .src = (uint64_t)(uintptr_t)(src + off), .len = n, .mode = 0};
        if (ioctl(m->fd, UFFDIO_COPY, &c) == 0) { off += n; continue; }
        int e = errno;
        if (c.copy > 0) off += (uint64_t)c.copy;
        if (e == EAGAIN) return AGAIN; /* an event is unread: the event thread reads it first */
        if (e == ESRCH) { m->dead = 1; return GONE; } /* the process is gone */
        if (e == EEXIST || e == ENOENT || e == EINVAL) { if (c.copy <= 0) off += PAGE; continue; } /* there, or not ours any more */
        if (e == EFAULT) /* the mapped pack was cut short after its frame was checked */
            stop_job("lazy restart of checkpoint %llu failed: checkpoint %llu is damaged: a pack was truncated while it was "
                     "read; the job was stopped", (unsigned long long)S.index, (unsigned long long)S.index);
        stop_job("lazy restart of checkpoint %llu: cannot place the memory at 0x%llx: %s; the job was stopped",
                 (unsigned long long)S.index, (unsigned long long)cur, strerror(e));
    }
    return COPIED;
}

/* The extent into every process (or only into mm `only`, >= 0). */
static void place_extent(const struct lz_extent *x, const char *raw, int only)
{
    for (;;) {
        pthread_rwlock_rdlock(&S.lock);
        int again = 0, n = atomic_load(&S.nmm);
        for (int k = 0; k < n; k++)
            if ((only < 0 || k == only) && !S.mms[k].dead && copy_into(&S.mms[k], x->addr, raw + x->skip, x->length) == AGAIN) again = 1;
        pthread_rwlock_unlock(&S.lock);
        if (!again) return;
        struct timespec t = {0, 20000};
        nanosleep(&t, NULL);
    }
}

struct worker { char *raw, *in, *work, *buf; long cached; };

/* A pack cut short while it is mapped: the read of the frame raises SIGBUS,
 * which returns to the frame's load (as a short read would). */
static __thread sigjmp_buf *bus_jmp;
static void on_sigbus(int sig)
{
    (void)sig;
    if (bus_jmp) siglongjmp(*bus_jmp, 1);
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
}

/* XXH3 of n bytes of a pack's mapping: 0, or -1 if the pack is shorter now. */
static int hash_mapped(const char *p, size_t n, uint64_t *h)
{
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1) != 0) { bus_jmp = NULL; return -1; }
    bus_jmp = &jb;
    *h = lz_hash_fast(p, n);
    bus_jmp = NULL;
    return 0;
}

/* Frame f read, expanded and checked in w->raw; stops the job if it cannot be.
 * A frame stored raw is hashed and copied straight from the pack's mapping
 * (the page cache): no copy through a buffer. */
static void load_frame(struct worker *w, uint32_t f)
{
    if (w->cached == (long)f) return;
    w->cached = -1;
    const struct lz_frame *fr = &S.img.frames[f];
    const char *pack = lz_str(&S.img, S.img.packs[fr->pack].path);
    const char *what = NULL;
    const char *map = S.packmaps ? S.packmaps[fr->pack] : NULL;
    if (fr->codec == LZ_CODEC_NONE && map && fr->offset + fr->raw <= S.img.packs[fr->pack].size) {
        w->raw = (char *)map + fr->offset;
        uint64_t h;
        if (hash_mapped(w->raw, fr->raw, &h) < 0) what = "cannot be read: the pack is truncated";
        else if (h != fr->xxh3) what = "fails its checksum";
        if (what)
            stop_job("lazy restart of checkpoint %llu failed: checkpoint %llu is damaged: frame %u (%s, offset %llu) %s; "
                     "the job was stopped, nothing of that frame was placed",
                     (unsigned long long)S.index, (unsigned long long)S.index, f, pack, (unsigned long long)fr->offset, what);
        w->cached = (long)f;
        return;
    }
    w->raw = w->buf;
    char *stored = fr->codec == LZ_CODEC_NONE ? w->raw : w->in;
    if (lz_pread_all(S.packfds[fr->pack], stored, fr->codec == LZ_CODEC_NONE ? fr->raw : fr->stored, (off_t)fr->offset) < 0)
        what = errno == ENODATA ? "cannot be read: the pack is truncated" : "cannot be read";
    else if (fr->codec != LZ_CODEC_NONE && lz_decompress((int)fr->codec, w->in, fr->stored, w->raw, fr->raw, w->work, lz_dctx_size()) < 0)
        what = "does not decompress";
    else if (lz_hash_fast(w->raw, fr->raw) != fr->xxh3)
        what = "fails its checksum";
    if (what)
        stop_job("lazy restart of checkpoint %llu failed: checkpoint %llu is damaged: frame %u (%s, offset %llu) %s; "
                 "the job was stopped, nothing of that frame was placed",
                 (unsigned long long)S.index, (unsigned long long)S.index, f, pack, (unsigned long long)fr->offset, what);
    w->cached = (long)f;
}

static void place_frame(struct worker *w, uint32_t f)
{
    load_frame(w, f);
    for (uint32_t k = S.fx_at[f]; k < S.fx_at[f + 1]; k++) place_extent(&S.img.extents[S.fx[k]], w->raw, -1);
    atomic_store(&S.state[f], 2);
    atomic_fetch_add(&S.placed, 1);
}

/* The extent that holds original address a, or NULL. */
static const struct lz_extent *extent_of(uint64_t a)
{
    size_t lo = 0, hi = S.img.nextents;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (S.img.extents[mid].addr + S.img.extents[mid].length <= a) lo = mid + 1; else hi = mid;
    }
    return lo < S.img.nextents && S.img.extents[lo].addr <= a ? &S.img.extents[lo] : NULL;
}

static void zero_page(int k, uint64_t page)
{
    for (;;) {
        pthread_rwlock_rdlock(&S.lock);
        struct mm *m = &S.mms[k];
        struct uffdio_zeropage z = {.range = {page, PAGE}, .mode = 0};
        int r = m->dead ? 0 : ioctl(m->fd, UFFDIO_ZEROPAGE, &z), e = errno;
        pthread_rwlock_unlock(&S.lock);
        if (r == 0 || e != EAGAIN) return;
        struct timespec t = {0, 20000};
        nanosleep(&t, NULL);
    }
}

/* One fault: 1 served, 0 to be tried again later (its frame is being placed). */
static int serve_fault(struct worker *w, const struct fault *q)
{
    struct mm *m = &S.mms[q->mm];
    pthread_rwlock_rdlock(&S.lock);
    uint64_t orig = unxlate(m, q->page);
    int gone = removed(m, orig);
    pthread_rwlock_unlock(&S.lock);
    const struct lz_extent *x = gone ? NULL : extent_of(orig);
    if (!x || x->frame == LZ_FRAME_ZERO) { zero_page(q->mm, q->page); return 1; } /* zeros, as an eager restart leaves */
    uint32_t f = x->frame;
    uint8_t zero = 0;
    if (atomic_compare_exchange_strong(&S.state[f], &zero, 1)) {
        place_frame(w, f);
        atomic_store(&S.hint, (long)f + 1);
        atomic_store(&S.hint_left, HINT_FRAMES);
    } else if (atomic_load(&S.state[f]) == 1) {
        return 0;
    } else {
        /* placed already, yet missing here (a race, or a child forked while
         * it was placed): the 64 KiB around the page, from the frame again */
        load_frame(w, f);
        struct lz_extent part = *x;
        uint64_t a = orig >= x->addr + (32ull << 10) ? orig - (32ull << 10) : x->addr, b = a + (64ull << 10);
        if (b > x->addr + x->length) b = x->addr + x->length;
        part.addr = a;
        part.length = b - a;
        part.skip = x->skip + (a - x->addr);
        place_extent(&part, w->raw, q->mm);
    }
    /* discarded meanwhile: zeros; then whoever waits on it goes on */
    pthread_rwlock_rdlock(&S.lock);
    gone = removed(m, unxlate(m, q->page));
    pthread_rwlock_unlock(&S.lock);
    if (gone) zero_page(q->mm, q->page);
    struct uffdio_range wr = {q->page, PAGE};
    ioctl(m->fd, UFFDIO_WAKE, &wr);
    return 1;
}

static int next_fault(struct fault *q, size_t skip)
{
    pthread_mutex_lock(&S.qlock);
    int got = S.qlen > skip;
    if (got) {
        *q = S.queue[skip];
        memmove(&S.queue[skip], &S.queue[skip + 1], (S.qlen - skip - 1) * sizeof *q);
        S.qlen--;
    }
    pthread_mutex_unlock(&S.qlock);
    return got;
}

static void push_fault(const struct fault *q)
{
    pthread_mutex_lock(&S.qlock);
    if (S.qlen == S.qcap) {
        size_t cap = S.qcap ? S.qcap * 2 : 256;
        struct fault *nq = realloc(S.queue, cap * sizeof *nq);
        if (!nq) stop_job("lazy restart: out of memory");
        S.queue = nq;
        S.qcap = cap;
    }
    S.queue[S.qlen++] = *q;
    pthread_mutex_unlock(&S.qlock);
}

/* The next frame to prefetch, claimed; -1 when none is left. */
static long next_frame(void)
{
    while (atomic_load(&S.hint_left) > 0) {
        atomic_fetch_sub(&S.hint_left, 1);
        long f = atomic_fetch_add(&S.hint, 1);
        uint8_t zero = 0;
        if (f >= 0 && (size_t)f < S.img.nframes && atomic_compare_exchange_strong(&S.state[f], &zero, 1)) return f;
    }
    for (;;) {
        size_t f = atomic_fetch_add(&S.cursor, 1);
        if (f >= S.img.nframes) return -1;
        uint8_t zero = 0;
        if (atomic_compare_exchange_strong(&S.state[f], &zero, 1)) return (long)f;
    }
}

static const char *hold; /* tests: nothing is served until this file exists */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    while (hold && access(hold, F_OK) < 0) {
        struct timespec t = {0, 2000000};
        nanosleep(&t, NULL);
    }
    int prefetching = S.pause_ms <= 0;
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    for (;;) {
        struct fault q;
        size_t skip = 0;
        int served = 0;
        while (next_fault(&q, skip)) {
            if (serve_fault(w, &q)) { atomic_fetch_sub(&S.pending, 1); served = 1; }
            else { push_fault(&q); skip++; } /* its frame is coming: the others first */
            pthread_mutex_lock(&S.qlock);
            size_t left = S.qlen;
            pthread_mutex_unlock(&S.qlock);
            if (skip >= left) break;
        }
        if (!prefetching) prefetching = lz_now_ns(CLOCK_MONOTONIC) - t0 >= (uint64_t)S.pause_ms * 1000000ull;
        long f = prefetching ? next_frame() : -1;
        if (f >= 0) { place_frame(w, (uint32_t)f); continue; }
        if (atomic_load(&S.finished)) return NULL; /* the event thread decides: a fault may come in still */
        if (!served) {
            struct timespec t = {0, 100000};
            nanosleep(&t, NULL);
        }
    }
}

/* The events of mm k, read under the write lock: faults queued, the
 * program's own changes to its memory noted. */
static void read_events(int k)
{
    struct uffd_msg msg[16];
    pthread_rwlock_wrlock(&S.lock);
    for (;;) {
        struct mm *m = &S.mms[k];
        ssize_t r = read(m->fd, msg, sizeof msg);
        if (r <= 0) {
            if (r == 0 || (errno != EAGAIN && errno != EINTR)) m->dead = 1;
            break;
        }
        for (size_t i = 0; i < (size_t)r / sizeof msg[0]; i++) {
            const struct uffd_msg *e = &msg[i];
            m = &S.mms[k];
            if (e->event == UFFD_EVENT_PAGEFAULT) {
                struct fault q = {k, e->arg.pagefault.address & ~(PAGE - 1)};
                atomic_fetch_add(&S.pending, 1);
                push_fault(&q);
            } else if (e->event == UFFD_EVENT_REMOVE || e->event == UFFD_EVENT_UNMAP) {
                mark_removed(m, e->arg.remove.start, e->arg.remove.end);
            } else if (e->event == UFFD_EVENT_REMAP) {
                if (m->nmoves == m->capmoves) {
                    size_t cap = m->capmoves ? m->capmoves * 2 : 16;
                    struct move *nv = realloc(m->moves, cap * sizeof *nv);
                    if (!nv) stop_job("lazy restart: out of memory");
                    m->moves = nv;
                    m->capmoves = cap;
                }
                m->moves[m->nmoves++] = (struct move){e->arg.remap.from, e->arg.remap.to, e->arg.remap.len};
            } else if (e->event == UFFD_EVENT_FORK) {
                int n = atomic_load(&S.nmm);
                if (n == MAX_MM) stop_job("lazy restart of checkpoint %llu: the program forked more than %d processes "
                                          "during the fill; the job was stopped", (unsigned long long)S.index, MAX_MM - 1);
                struct mm *c = &S.mms[n];
                memset(c, 0, sizeof *c);
                c->fd = (int)e->arg.fork.ufd;
                fcntl(c->fd, F_SETFD, FD_CLOEXEC);
                fcntl(c->fd, F_SETFL, O_NONBLOCK);
                if (!(c->removed = malloc(S.npages / 8 + 1))) stop_job("lazy restart: out of memory");
                memcpy(c->removed, m->removed, S.npages / 8 + 1);
                if (m->nmoves) {
                    if (!(c->moves = malloc(m->nmoves * sizeof *c->moves))) stop_job("lazy restart: out of memory");
                    memcpy(c->moves, m->moves, m->nmoves * sizeof *c->moves);
                    c->nmoves = c->capmoves = m->nmoves;
                }
                atomic_store(&S.nmm, n + 1);
            }
        }
    }
    pthread_rwlock_unlock(&S.lock);
}

static void setup(const char *ckpt_dir)
{
    char why[1024];
    if (lz_manifest_load(ckpt_dir, &S.img, why, sizeof why) < 0) stop_job("lazy restart of checkpoint %llu failed: %s", (unsigned long long)S.index, why);
    const struct lz_image *img = &S.img;
    if (!(S.packfds = calloc(img->npacks + 1, sizeof *S.packfds))) stop_job("lazy restart: out of memory");
    for (size_t i = 0; i < img->npacks; i++) {
        char path[LZ_PATH_MAX + 600];
        snprintf(path, sizeof path, "%s/%s", ckpt_dir, lz_str(img, img->packs[i].path));
        if ((S.packfds[i] = open(path, O_RDONLY | O_CLOEXEC)) < 0)
            stop_job("lazy restart of checkpoint %llu failed: cannot open %s: %s", (unsigned long long)S.index, path, strerror(errno));
    }
    /* raw frames are read through mappings of the packs (a pack of the
     * wrong size: by pread, which says what is wrong) */
    if ((S.packmaps = calloc(img->npacks + 1, sizeof *S.packmaps)))
        for (size_t i = 0; i < img->npacks; i++) {
            struct stat st;
            if (fstat(S.packfds[i], &st) < 0 || (uint64_t)st.st_size != img->packs[i].size || !st.st_size) continue;
            void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, S.packfds[i], 0);
            if (m != MAP_FAILED) { S.packmaps[i] = m; madvise(m, (size_t)st.st_size, MADV_SEQUENTIAL); }
        }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigbus;
    sa.sa_flags = SA_NODEFER;
    sigaction(SIGBUS, &sa, NULL);
    if (!(S.ranges = calloc(img->nregions + 1, sizeof *S.ranges))) stop_job("lazy restart: out of memory");
    size_t nf = img->nframes;
    S.fx_at = calloc(nf + 2, sizeof *S.fx_at);
    S.fx = calloc(img->nextents + 1, sizeof *S.fx);
    S.state = calloc(nf + 1, sizeof *S.state);
    if (!S.fx_at || !S.fx || !S.state) stop_job("lazy restart: out of memory");
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *r = &img->regions[i];
        if (!lz_lazy_region(r)) continue;
        S.ranges[S.nranges++] = (struct lrange){r->start, r->end, S.npages};
        S.npages += (r->end - r->start) / PAGE;
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents; e++)
            if (img->extents[e].frame != LZ_FRAME_ZERO && img->extents[e].frame < nf) S.fx_at[img->extents[e].frame + 1]++;
    }
    for (size_t f = 1; f <= nf; f++) S.fx_at[f] += S.fx_at[f - 1];
    uint32_t *at = malloc((nf + 1) * sizeof *at);
    if (!at) stop_job("lazy restart: out of memory");
    memcpy(at, S.fx_at, (nf + 1) * sizeof *at);
    for (size_t i = 0; i < S.nranges; i++) {
        const struct lz_region *r = NULL;
        for (size_t k = 0; k < img->nregions && !r; k++) if (img->regions[k].start == S.ranges[i].start) r = &img->regions[k];
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents; e++)
            if (img->extents[e].frame != LZ_FRAME_ZERO && img->extents[e].frame < nf) S.fx[at[img->extents[e].frame]++] = e;
    }
    free(at);
    for (size_t f = 0; f < nf; f++) {
        if (S.fx_at[f + 1] == S.fx_at[f]) { S.state[f] = 2; S.placed++; } /* nothing of it is lazy */
        else S.nused++;
    }
    /* the disk reads ahead what the fill will read, in order */
    for (size_t f = 0; f < nf; f++)
        if (S.fx_at[f + 1] > S.fx_at[f])
            posix_fadvise(S.packfds[img->frames[f].pack], (off_t)img->frames[f].offset, (off_t)img->frames[f].stored, POSIX_FADV_WILLNEED);
}

/* lazarus __lazy-serve CKPT_DIR INDEX UFFD HUP_FD VICTIM (started by the supervisor) */
int cmd_lazy_serve(int argc, char **argv)
{
    if (argc != 6) { lz_err("__lazy-serve is started by `lazarus restart --lazy`"); return 2; }
    uint64_t v;
    if (lz_parse_u64(argv[2], &v) < 0) return 2;
    S.index = v;
    int uffd = atoi(argv[3]), hup = atoi(argv[4]);
    S.victim = atoi(argv[5]);
    fcntl(uffd, F_SETFD, FD_CLOEXEC);
    fcntl(hup, F_SETFD, FD_CLOEXEC);
    const char *p = getenv("LAZARUS_TEST_LAZY_PAUSE_MS"); /* tests: faults only, for this long */
    S.pause_ms = p ? atoi(p) : 0;
    hold = getenv("LAZARUS_TEST_LAZY_HOLD");
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    setup(argv[1]);
    /* the event thread must not wait behind the workers' copies (it reads
     * the faults they are to serve) */
    pthread_rwlockattr_t la;
    pthread_rwlockattr_init(&la);
    pthread_rwlockattr_setkind_np(&la, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&S.lock, &la);
    pthread_rwlockattr_destroy(&la);
    /* the signals a terminal or a batch system sends the whole job are the
     * program's and the supervisor's business: the server ends with the job */
    static const int quiet[] = {SIGINT, SIGQUIT, SIGHUP, SIGTERM, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2, SIGPIPE};
    for (size_t i = 0; i < sizeof quiet / sizeof quiet[0]; i++) signal(quiet[i], SIG_IGN);
    pthread_mutex_init(&S.qlock, NULL);
    S.mms[0].fd = uffd;
    if (!(S.mms[0].removed = calloc(S.npages / 8 + 1, 1))) stop_job("lazy restart: out of memory");
    S.nmm = 1;
    struct worker w[NWORKERS];
    pthread_t th[NWORKERS];
    for (int i = 0; i < NWORKERS; i++) {
        w[i] = (struct worker){NULL, malloc(LZ_FRAME_MAX), malloc(lz_dctx_size()), malloc(LZ_FRAME_MAX), -1};
        if (!w[i].buf || !w[i].in || !w[i].work || pthread_create(&th[i], NULL, worker_main, &w[i]) != 0)
            stop_job("lazy restart: cannot start the fill: out of memory");
    }
    /* the event thread: until the workers are done (every frame in, no fault waiting) */
    int done = 0;
    for (;;) {
        int n = atomic_load(&S.nmm);
        struct pollfd pf[MAX_MM + 1];
        pf[0] = (struct pollfd){hup, POLLIN, 0};
        for (int k = 0; k < n; k++) pf[k + 1] = (struct pollfd){S.mms[k].dead ? -1 : S.mms[k].fd, POLLIN, 0};
        int r = poll(pf, (nfds_t)n + 1, 20);
        if (r < 0 && errno != EINTR) stop_job("lazy restart: poll: %s", strerror(errno));
        if (r > 0 && pf[0].revents) /* the supervisor is gone: so is the job */
            stop_job("lazy restart of checkpoint %llu: the supervisor is gone; the job was stopped", (unsigned long long)S.index);
        for (int k = 0; r > 0 && k < n; k++) if (pf[k + 1].revents & (POLLIN | POLLERR | POLLHUP)) read_events(k);
        if (S.mms[0].dead) break; /* the program is gone */
        if (atomic_load(&S.placed) >= S.img.nframes && atomic_load(&S.pending) == 0) { done = 1; break; }
    }
    /* faults read from here on (pages that hold zeros) are answered by the
     * kernel once the supervisor closes its copy: zero-filled, as they must */
    atomic_store(&S.finished, 1);
    if (done) for (int i = 0; i < NWORKERS; i++) pthread_join(th[i], NULL);
    if (getenv("LAZARUS_TRACE"))
        fprintf(stderr, "lazarus: lazy fill of checkpoint %llu: %zu frames in %.3f ms, done at %llu (realtime ns)\n",
                (unsigned long long)S.index, S.nused, (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e6,
                (unsigned long long)lz_now_ns(CLOCK_REALTIME));
    return 0;
}

pid_t lazy_spawn(struct supervisor *s, int uffd, int *hup_keep)
{
    char ckpt[LZ_PATH_MAX + 64], idx[32], fdarg[16], hfd[16], victim[16];
    lz_ckpt_path(ckpt, sizeof ckpt, s->dir, s->restore_index);
    int hup[2];
    if (pipe2(hup, O_CLOEXEC) < 0) return -1;
    snprintf(idx, sizeof idx, "%llu", (unsigned long long)s->restore_index);
    snprintf(fdarg, sizeof fdarg, "%d", uffd);
    snprintf(hfd, sizeof hfd, "%d", hup[0]);
    snprintf(victim, sizeof victim, "%d", (int)s->child);
    const char *bin = install_path("bin/lazarus");
    char *args[] = {(char *)bin, "__lazy-serve", ckpt, idx, fdarg, hfd, victim, NULL};
    pid_t p = fork();
    if (p == 0) {
        /* nothing of the supervisor's but what the server needs */
        int lo = uffd < hup[0] ? uffd : hup[0], hi = uffd < hup[0] ? hup[0] : uffd;
        if (lo > 3) close_range(3, (unsigned)lo - 1, 0);
        if (hi > lo + 1) close_range((unsigned)lo + 1, (unsigned)hi - 1, 0);
        close_range((unsigned)hi + 1, ~0u, 0);
        fcntl(uffd, F_SETFD, 0);
        fcntl(hup[0], F_SETFD, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(bin, args);
        _exit(127);
    }
    close(hup[0]);
    if (p < 0) { close(hup[1]); return -1; }
    *hup_keep = hup[1];
    return p;
}
