/* Checking the frames of a part before a restart of several processes
 * (frames_check.h; cli/restart_tree.c).
 *
 * Phase 1 of `lazarus restart` must find a damaged, truncated or missing pack
 * before any file is rolled back.  A single process's restorer does that
 * itself while it fills the anonymous memory, before the rollback
 * (restorer/restore_main.c); the restorers of a job of several processes
 * start only after the rollback (they reopen shared files before they make
 * their children), so their frames are checked here first.  A frame is not
 * expanded (the restorer does that, and checks the XXH3 of the raw bytes):
 * the XXH3-64 of its stored bytes, as written to the pack (lz_frame.sxxh3), is
 * checked, which for compressed frames is a fraction of the data.  Every pack
 * the manifest lists must be there with the size it records, as the restorer
 * requires; every frame some extent references is read once, in pack and
 * offset order.  Frames no extent references are not read: `gc` may have
 * punched holes where they were.
 *
 * Reading is what costs, so the frames are hashed straight from a read-only
 * mapping of each pack, by two threads (one per core of the machines this is
 * tuned for) each taking half of the bytes in order.  The mapping starts on a
 * 2 MiB boundary and is marked MADV_HUGEPAGE: the page cache holds packs in
 * 2 MiB folios (the mapping's faults read ahead in such folios when the pack
 * is not cached yet), which the kernel then maps whole, one page-table entry
 * per 2 MiB.  Measured here on 1 GiB in the page cache, two threads: 0.035 s
 * this way, against 0.075 s to pread() each frame into a buffer (the copy)
 * and 0.09-0.13 s through a mapping at any address (a page-table entry per
 * 4 KiB page, built and torn down); from a cold cache 0.37-0.48 s (the disk's
 * speed).  See bench/README.md, "restart_check.py".
 * Explicit read-ahead (MADV_WILLNEED, readahead(2)) is not used: it fills the
 * page cache with 4 KiB folios, which made the warm check 4 times slower.
 * What was read stays in the page cache, where the restorer finds it.  A pack
 * truncated while it is read raises SIGBUS, caught and reported.
 */
#include "frames_check.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NTHREADS 2
#define ALIGN (2ull << 20) /* a huge page: mappings start on one */

/* A pack as the user knows it: part_dir/rel with the ".." resolved
 * (ckpt.N/../packs/pack.N is DIR/packs/pack.N), for messages only. */
static void pack_shown(char *out, size_t len, const char *part_dir, const char *rel)
{
    snprintf(out, len, "%s", part_dir);
    size_t n = strlen(out);
    while (n > 1 && out[n - 1] == '/') out[--n] = 0;
    for (const char *c = rel; *c;) {
        const char *e = strchr(c, '/');
        size_t cl = e ? (size_t)(e - c) : strlen(c);
        char *last = strrchr(out, '/');
        if (cl == 0 || (cl == 1 && c[0] == '.')) {
            /* nothing */
        } else if (cl == 2 && c[0] == '.' && c[1] == '.' && last && last[1] && strcmp(last + 1, "..") &&
                   strcmp(last + 1, ".")) {
            if (last == out) out[1] = 0; /* "/x/.." is "/" */
            else *last = 0;
        } else {
            n = strlen(out);
            if (n + 1 + cl < len) {
                if (n == 0 || out[n - 1] != '/') out[n++] = '/';
                memcpy(out + n, c, cl);
                out[n + cl] = 0;
            }
        }
        c = e ? e + 1 : c + cl;
    }
}

struct packmap {
    const char *data;      /* the pack, mapped read-only; NULL: no frame of it is read */
    void *area;            /* what to unmap */
    size_t area_len;
};

struct check {
    const char *part_dir;
    const struct lz_image *img;
    const uint32_t *order; /* frames to read, in pack and offset order */
    const struct packmap *maps;
    int stop;              /* a thread failed: the other stops too (atomic) */
};

struct worker {
    struct check *ck;
    size_t first, last;    /* of order[] */
    volatile size_t at;    /* the frame being read */
    size_t failed_at;      /* position in order[] of the frame that failed, or SIZE_MAX */
    char why[LZ_PATH_MAX + 256];
};

/* A pack shorter than its mapping (truncated meanwhile) faults with SIGBUS:
 * the thread reading it goes back to its sigsetjmp. */
static __thread sigjmp_buf *bus_jmp;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
    (void)si; (void)uc;
    if (bus_jmp) siglongjmp(*bus_jmp, 1);
    signal(sig, SIG_DFL); /* not ours */
    raise(sig);
}


static int frame_cmp(const void *a, const void *b, void *frames)
{
    const struct lz_frame *x = (const struct lz_frame *)frames + *(const uint32_t *)a;
    const struct lz_frame *y = (const struct lz_frame *)frames + *(const uint32_t *)b;
    if (x->pack != y->pack) return x->pack < y->pack ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->stored != y->stored) return x->stored < y->stored ? -1 : 1;
    if (x->sxxh3 != y->sxxh3) return x->sxxh3 < y->sxxh3 ? -1 : 1;
    return *(const uint32_t *)a < *(const uint32_t *)b ? -1 : *(const uint32_t *)a > *(const uint32_t *)b;
}

static int same_stored(const struct lz_frame *x, const struct lz_frame *y)
{
    return x->pack == y->pack && x->offset == y->offset && x->stored == y->stored && x->sxxh3 == y->sxxh3;
}

static void frame_fail(struct worker *w, size_t k, const char *what)
{
    const struct lz_image *img = w->ck->img;
    const struct lz_frame *f = &img->frames[w->ck->order[k]];
    char shown[LZ_PATH_MAX + 64];
    pack_shown(shown, sizeof shown, w->ck->part_dir, lz_str(img, img->packs[f->pack].path));
    snprintf(w->why, sizeof w->why, "pack %s: frame %" PRIu32 " (offset %" PRIu64 ", %" PRIu32 " bytes) %s", shown,
             w->ck->order[k], f->offset, f->stored, what);
    w->failed_at = k;
    __atomic_store_n(&w->ck->stop, 1, __ATOMIC_RELAXED);
}

static void *check_worker(void *arg)
{
    struct worker *w = arg;
    struct check *ck = w->ck;
    const struct lz_image *img = ck->img;
    sigjmp_buf jb;
    if (sigsetjmp(jb, 1)) {
        bus_jmp = NULL;
        frame_fail(w, w->at, "cannot be read: the pack was truncated while it was read");
        return NULL;
    }
    bus_jmp = &jb;
    for (size_t k = w->first; k < w->last && !__atomic_load_n(&ck->stop, __ATOMIC_RELAXED); k++) {
        const struct lz_frame *f = &img->frames[ck->order[k]];
        w->at = k;
        if (lz_hash_fast(ck->maps[f->pack].data + f->offset, f->stored) != f->sxxh3) {
            frame_fail(w, k, "fails its checksum");
            break;
        }
    }
    bus_jmp = NULL;
    return NULL;
}

/* pack i mapped read-only on a 2 MiB boundary, or -1 with why said */
static int map_pack(int fd, uint64_t size, struct packmap *m, const char *shown, char *why, size_t whylen)
{
    size_t len = (size_t)size, area_len = len + ALIGN;
    char *area = mmap(NULL, area_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (area == MAP_FAILED) {
        snprintf(why, whylen, "pack %s cannot be read: %s", shown, strerror(errno));
        return -1;
    }
    char *at = (char *)(((uintptr_t)area + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    if (mmap(at, len, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
        snprintf(why, whylen, "pack %s cannot be read: %s", shown, strerror(errno));
        munmap(area, area_len);
        return -1;
    }
    madvise(at, len, MADV_HUGEPAGE); /* read ahead and mapped in 2 MiB folios (where THP is built in) */
    m->data = at;
    m->area = area;
    m->area_len = area_len;
    return 0;
}

/* Every pack the manifest lists is there with the size it records (the
 * restorer opens them all and checks that; a truncated one names the first
 * frame it lacks); those with frames to read are mapped. */
static int open_packs(const char *part_dir, const struct lz_image *img, const uint32_t *order, size_t n,
                      struct packmap *maps, char *why, size_t whylen)
{
    char path[LZ_PATH_MAX + 600], shown[LZ_PATH_MAX + 64];
    size_t k = 0;
    for (size_t i = 0; i < img->npacks; i++) {
        const char *rel = lz_str(img, img->packs[i].path);
        snprintf(path, sizeof path, "%s/%s", part_dir, rel);
        pack_shown(shown, sizeof shown, part_dir, rel);
        /* the first frame of this pack that is read (order is by pack, then offset) */
        while (k < n && img->frames[order[k]].pack < i) k++;
        int used = k < n && img->frames[order[k]].pack == i;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) {
            int e = errno;
            if (fd >= 0) close(fd);
            if (e == ENOENT && used) {
                const struct lz_frame *f = &img->frames[order[k]];
                snprintf(why, whylen, "pack %s is missing (it holds frame %" PRIu32 ": offset %" PRIu64 ", %" PRIu32 " bytes)",
                         shown, order[k], f->offset, f->stored);
            } else if (e == ENOENT) {
                snprintf(why, whylen, "pack %s is missing", shown);
            } else {
                snprintf(why, whylen, "pack %s cannot be read: %s", shown, strerror(e));
            }
            return -1;
        }
        uint64_t size = (uint64_t)st.st_size, want = img->packs[i].size;
        int rc = -1;
        if (!S_ISREG(st.st_mode)) {
            snprintf(why, whylen, "pack %s is not a regular file", shown);
        } else if (size < want) {
            size_t j = k;
            while (j < n && img->frames[order[j]].pack == i && img->frames[order[j]].offset + img->frames[order[j]].stored <= size) j++;
            if (j < n && img->frames[order[j]].pack == i)
                snprintf(why, whylen, "pack %s is truncated (%" PRIu64 " bytes, frame %" PRIu32 " needs %" PRIu64 ")", shown,
                         size, order[j], img->frames[order[j]].offset + img->frames[order[j]].stored);
            else
                snprintf(why, whylen, "pack %s is truncated (%" PRIu64 " bytes, the checkpoint wrote %" PRIu64 ")", shown,
                         size, want);
        } else if (size > want) {
            snprintf(why, whylen, "pack %s has %" PRIu64 " bytes, the checkpoint wrote %" PRIu64, shown, size, want);
        } else {
            rc = used ? map_pack(fd, size, &maps[i], shown, why, whylen) : 0;
        }
        close(fd);
        if (rc < 0) return -1;
    }
    return 0;
}

int lz_check_frames(const char *part_dir, const struct lz_image *img, char *why, size_t whylen)
{
    /* the frames extents reference, each stored range once, in pack order */
    uint8_t *used = calloc(img->nframes ? img->nframes : 1, 1);
    uint32_t *order = malloc((img->nframes ? img->nframes : 1) * sizeof *order);
    struct packmap *maps = calloc(img->npacks ? img->npacks : 1, sizeof *maps);
    if (!used || !order || !maps) {
        free(used); free(order); free(maps);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    for (size_t e = 0; e < img->nextents; e++)
        if (img->extents[e].frame != LZ_FRAME_ZERO) used[img->extents[e].frame] = 1;
    size_t n = 0;
    for (size_t i = 0; i < img->nframes; i++)
        if (used[i]) order[n++] = (uint32_t)i;
    free(used);
    qsort_r(order, n, sizeof *order, frame_cmp, (void *)img->frames);
    size_t m = 0;
    uint64_t total = 0;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        const struct lz_frame *f = &img->frames[order[k]];
        if (m && same_stored(f, &img->frames[order[m - 1]])) continue;
        if (f->stored > LZ_FRAME_MAX) { /* the restorer reads a frame into a buffer of that size */
            snprintf(why, whylen, "frame %" PRIu32 " is malformed (%" PRIu32 " bytes stored, at most %u)", order[k],
                     f->stored, LZ_FRAME_MAX);
            rc = -1;
        }
        order[m++] = order[k];
        total += f->stored;
    }
    n = m;
    if (rc == 0) rc = open_packs(part_dir, img, order, n, maps, why, whylen);

    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    if (rc == 0 && n) {
        /* NTHREADS runs of about equal bytes, each read in order */
        struct check ck = {part_dir, img, order, maps, 0};
        struct worker w[NTHREADS];
        size_t k = 0;
        uint64_t acc = 0;
        for (int t = 0; t < NTHREADS; t++) {
            memset(&w[t], 0, sizeof w[t]);
            w[t].ck = &ck;
            w[t].failed_at = SIZE_MAX;
            w[t].first = k;
            while (k < n && (t == NTHREADS - 1 || acc < total * (uint64_t)(t + 1) / NTHREADS))
                acc += img->frames[order[k++]].stored;
            w[t].last = k;
        }
        sigaction(SIGBUS, &sa, &old);
        pthread_t th[NTHREADS];
        int started[NTHREADS] = {0};
        for (int t = 1; t < NTHREADS; t++) {
            started[t] = w[t].first < w[t].last && pthread_create(&th[t], NULL, check_worker, &w[t]) == 0;
            if (!started[t]) check_worker(&w[t]);
        }
        check_worker(&w[0]);
        for (int t = 1; t < NTHREADS; t++)
            if (started[t]) pthread_join(th[t], NULL);
        sigaction(SIGBUS, &old, NULL);
        /* the first failure in pack order */
        int bad = -1;
        for (int t = 0; t < NTHREADS; t++)
            if (w[t].failed_at != SIZE_MAX && (bad < 0 || w[t].failed_at < w[bad].failed_at)) bad = t;
        if (bad >= 0) {
            snprintf(why, whylen, "%s", w[bad].why);
            rc = -1;
        }
    }
    for (size_t i = 0; i < img->npacks; i++)
        if (maps[i].area) munmap(maps[i].area, maps[i].area_len);
    free(maps);
    free(order);
    return rc;
}
