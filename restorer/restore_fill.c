/* Filling the program's memory from the frames of the packs, by two threads,
 * every frame checked against its XXH3 before any byte of it is used.
 *
 * The fill is planned by frame, not by address: the newest checkpoint of an
 * incremental chain takes most pages from old frames and the rest from the
 * frames of each later increment, so in address order the extents alternate
 * between frames, and each would be read, expanded and checked again and
 * again.  So, per stage (restorer.h):
 *  1. A frame whose extents all sit where it was written (addr - skip the same
 *     for each) inside one region, over a range that the image's extents
 *     cover without a gap, is placed whole: read (or expanded) straight into
 *     that range and hashed there.  Its pages that later checkpoints replaced
 *     hold stale bytes for a moment: step 2 writes them.  Such ranges never
 *     overlap (the later of two is left to step 2), so the threads need no
 *     order among themselves.  This is the common case: every frame of a full
 *     checkpoint, and the old frames a chain still uses; no copy through a
 *     buffer.
 *  2. The other extents, grouped by frame (a counting sort): each frame read,
 *     expanded and checked once into a buffer, its extents copied out.
 * Before step 1 the disk is asked to read ahead exactly the frames the stage
 * uses, merged into ranges, in pack order (not the whole packs: a chain's
 * packs hold frames no checkpoint uses any more).
 *
 * The first stage also checks the stored bytes of every frame the second will
 * use (CHECK_ONLY), so that all of them are proven before the file rollback. */
#include "restorer.h"
#include "hash.h"
#include "codec.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* An entry of a fill order: an extent index, with a flag saying what to do. */
#define CHECK_ONLY 0x80000000u /* check its frame's stored bytes (the first stage, for the second) */
#define WHOLE 0x40000000u      /* place its frame whole (step 1) */
#define COMPARE 0x20000000u    /* in a region kept from the parent's restorer: write only what differs */
#define INDEX(k) ((k) & ~(CHECK_ONLY | WHOLE | COMPARE))
#define SKIP_EXTENT ~0u        /* not this stage's */

struct fill_job {
    struct restore_ctx *rc;
    const int *packfds;
    const uint32_t *order;  /* extent indices grouped by frame */
    size_t first, last;     /* the run of `order` this worker fills */
    char *raw, *in, *work; /* a frame expanded, as stored, the decompressor's work area */
    long cached;           /* frame now in raw, -1 none */
    long checked;          /* frame whose stored bytes were just checked, -1 none */
    uint64_t compared, written; /* bytes of COMPARE extents, and of their pages that differed */
    char err[512];
};

static int damaged(struct fill_job *j, const struct lz_extent *x, const char *what)
{
    const struct lz_image *img = &j->rc->img;
    snprintf(j->err, sizeof j->err, "checkpoint %llu is damaged: page data at 0x%llx %s (%s/%s)",
             (unsigned long long)j->rc->index, (unsigned long long)x->addr, what, j->rc->ckpt_dir,
             lz_str(img, img->packs[img->frames[x->frame].pack].path));
    return -1;
}

/* Ranges from this size are faulted in with one madvise before they are filled. */
#define POPULATE_MIN (64u << 10)

/* Reads frame f's stored bytes (to `to`, or j->in), expands them into `raw`
 * and checks them: 0, or -1 with j->err said (x names the place). */
static int load_frame(struct fill_job *j, const struct lz_extent *x, const struct lz_frame *f, char *raw)
{
    int fd = j->packfds[f->pack];
    char *stored = f->codec == LZ_CODEC_NONE ? raw : j->in;
    if (lz_pread_all(fd, stored, f->codec == LZ_CODEC_NONE ? f->raw : f->stored, (off_t)f->offset) < 0)
        return damaged(j, x, errno == ENODATA ? "cannot be read: file is truncated" : "cannot be read");
    if (f->codec != LZ_CODEC_NONE && lz_decompress((int)f->codec, j->in, f->stored, raw, f->raw, j->work, lz_dctx_size()) < 0)
        return damaged(j, x, "does not decompress");
    return lz_hash_fast(raw, f->raw) == f->xxh3 ? 0 : damaged(j, x, "fails its checksum");
}

/* Step 1: extent x's frame, whole, at x->addr - x->skip. */
static int place_whole(struct fill_job *j, const struct lz_extent *x)
{
    const struct lz_frame *f = &j->rc->img.frames[x->frame];
    char *dst = (char *)(x->addr - x->skip);
    if (f->raw >= POPULATE_MIN) madvise(dst, f->raw, MADV_POPULATE_WRITE); /* fault the range in one go */
    return load_frame(j, x, f, dst);
}

/* Step 2: one extent, from its frame expanded in the buffer (once for the
 * run of extents that use it). */
static int fill_extent(struct fill_job *j, const struct lz_extent *x)
{
    char *dst = (char *)x->addr;
    if (x->length >= POPULATE_MIN) madvise(dst, x->length, MADV_POPULATE_WRITE);
    if (x->frame == LZ_FRAME_ZERO) { memset(dst, 0, x->length); return 0; }
    if (j->cached != (long)x->frame) {
        j->cached = -1;
        if (load_frame(j, x, &j->rc->img.frames[x->frame], j->raw) < 0) return -1;
        j->cached = (long)x->frame;
    }
    memcpy(dst, j->raw + x->skip, x->length);
    return 0;
}

/* An extent of a region kept from the parent's restorer (restore_inherit.c):
 * only the pages that differ from the parent's are written, so the others
 * stay shared with it; a zero extent is dropped (reads as zero after). */
static int compare_extent(struct fill_job *j, const struct lz_extent *x)
{
    char *dst = (char *)x->addr;
    j->compared += x->length;
    if (x->frame == LZ_FRAME_ZERO) {
        if (madvise(dst, x->length, MADV_DONTNEED) == 0) return 0;
        snprintf(j->err, sizeof j->err, "cannot clear the memory at 0x%llx: %s", (unsigned long long)x->addr, strerror(errno));
        return -1;
    }
    if (j->cached != (long)x->frame) {
        j->cached = -1;
        if (load_frame(j, x, &j->rc->img.frames[x->frame], j->raw) < 0) return -1;
        j->cached = (long)x->frame;
    }
    const char *src = j->raw + x->skip;
    for (uint64_t o = 0; o < x->length; o += 4096)
        if (memcmp(dst + o, src + o, 4096)) {
            memcpy(dst + o, src + o, 4096);
            j->written += 4096;
        }
    return 0;
}

/* The stored bytes of an extent's frame, checked without placing them: a
 * frame of the second stage is proven before any file is rolled back (and
 * read again, expanded and checked once more, after). */
static int check_extent(struct fill_job *j, const struct lz_extent *x)
{
    if (x->frame == LZ_FRAME_ZERO || j->cached == (long)x->frame || j->checked == (long)x->frame) return 0;
    const struct lz_frame *f = &j->rc->img.frames[x->frame];
    if (lz_pread_all(j->packfds[f->pack], j->in, f->stored, (off_t)f->offset) < 0)
        return damaged(j, x, errno == ENODATA ? "cannot be read: file is truncated" : "cannot be read");
    if (lz_hash_fast(j->in, f->stored) != f->sxxh3) return damaged(j, x, "fails its checksum");
    j->checked = (long)x->frame;
    return 0;
}

static void *fill_worker(void *arg)
{
    struct fill_job *j = arg;
    for (size_t e = j->first; e < j->last; e++) {
        uint32_t k = j->order[e];
        const struct lz_extent *x = &j->rc->img.extents[INDEX(k)];
        int rc = (k & CHECK_ONLY) ? check_extent(j, x) : (k & WHOLE) ? place_whole(j, x)
               : (k & COMPARE) ? compare_extent(j, x) : fill_extent(j, x);
        if (rc < 0) return NULL;
    }
    return NULL;
}

#define NWORKERS 2
static char worker_stacks[NWORKERS][256 << 10] __attribute__((aligned(4096)));

/* Bytes an order entry stands for: a frame placed whole counts its frame. */
static uint64_t entry_bytes(const struct lz_image *img, uint32_t k)
{
    const struct lz_extent *x = &img->extents[INDEX(k)];
    return (k & WHOLE) ? img->frames[x->frame].raw : x->length;
}

/* Runs order[0..n) on NWORKERS threads, split into runs of about equal
 * bytes between frames; fails the restore on the first damage found. */
static void run_workers(struct restore_ctx *rc, const int *fds, const uint32_t *order, size_t n, uint64_t *cmp)
{
    const struct lz_image *img = &rc->img;
    uint64_t total = 0, acc = 0;
    for (size_t e = 0; e < n; e++) total += entry_bytes(img, order[e]);
    struct fill_job jobs[NWORKERS];
    size_t e = 0;
    for (int w = 0; w < NWORKERS; w++) {
        memset(&jobs[w], 0, sizeof jobs[w]);
        jobs[w].rc = rc;
        jobs[w].packfds = fds;
        jobs[w].order = order;
        jobs[w].cached = jobs[w].checked = -1;
        jobs[w].raw = malloc(LZ_FRAME_MAX);
        jobs[w].in = malloc(LZ_FRAME_MAX);
        jobs[w].work = malloc(lz_dctx_size());
        if (!jobs[w].raw || !jobs[w].in || !jobs[w].work) restore_fail("out of memory");
        jobs[w].first = e;
        while (e < n && (w == NWORKERS - 1 || acc < total * (uint64_t)(w + 1) / NWORKERS ||
                         (e > 0 && img->extents[INDEX(order[e])].frame == img->extents[INDEX(order[e - 1])].frame)))
            acc += entry_bytes(img, order[e++]);
        jobs[w].last = e;
    }
    pthread_t th[NWORKERS];
    int started[NWORKERS] = {0};
    for (int w = 1; w < NWORKERS; w++) {
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstack(&at, worker_stacks[w], sizeof worker_stacks[w]);
        started[w] = pthread_create(&th[w], &at, fill_worker, &jobs[w]) == 0;
        pthread_attr_destroy(&at);
        if (!started[w]) fill_worker(&jobs[w]);
    }
    fill_worker(&jobs[0]);
    for (int w = 1; w < NWORKERS; w++) if (started[w]) pthread_join(th[w], NULL);
    for (int w = 0; w < NWORKERS; w++) if (jobs[w].err[0]) restore_fail("%s", jobs[w].err);
    for (int w = 0; w < NWORKERS; w++) { cmp[0] += jobs[w].compared; cmp[1] += jobs[w].written; }
    for (int w = 0; w < NWORKERS; w++) { free(jobs[w].raw); free(jobs[w].in); free(jobs[w].work); }
}

/* Whether the extents this stage fills (what[e] == 0) cover [a, b) without a gap. */
static int covered(const struct lz_image *img, const uint32_t *what, uint64_t a, uint64_t b)
{
    size_t lo = 0, hi = img->nextents; /* the first extent ending after a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (img->extents[mid].addr + img->extents[mid].length <= a) lo = mid + 1; else hi = mid;
    }
    for (size_t e = lo; a < b; e++) {
        if (e >= img->nextents || img->extents[e].addr != a || what[e] != 0) return 0;
        a += img->extents[e].length;
    }
    return 1;
}

struct span { uint64_t start, end; uint32_t frame; };

static int by_start(const void *a, const void *b)
{
    const struct span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Step 1's frames: whole[f] = 1 for each frame placed whole. */
static void plan_whole(const struct lz_image *img, const uint32_t *what, const uint32_t *region_of, uint8_t *whole)
{
    size_t nf = img->nframes;
    uint64_t *base = malloc((nf + 1) * sizeof *base);
    uint8_t *state = calloc(nf + 1, 1); /* 0 unseen, 1 a candidate, 2 not */
    uint32_t *reg = malloc((nf + 1) * sizeof *reg);
    struct span *sp = malloc((nf + 1) * sizeof *sp);
    if (!base || !state || !reg || !sp) restore_fail("out of memory");
    for (size_t e = 0; e < img->nextents; e++) {
        const struct lz_extent *x = &img->extents[e];
        if (x->frame == LZ_FRAME_ZERO || what[e] == SKIP_EXTENT) continue;
        uint32_t f = x->frame;
        if (what[e] != 0 || x->addr < x->skip) { state[f] = 2; continue; }
        if (state[f] == 0) { state[f] = 1; base[f] = x->addr - x->skip; reg[f] = region_of[e]; }
        else if (base[f] != x->addr - x->skip || reg[f] != region_of[e]) state[f] = 2;
    }
    size_t ns = 0;
    for (size_t f = 0; f < nf; f++) {
        if (state[f] != 1) continue;
        const struct lz_region *r = &img->regions[reg[f]];
        uint64_t a = base[f], b = a + img->frames[f].raw;
        if (a < r->start || b > r->end || b < a || !covered(img, what, a, b)) continue;
        sp[ns++] = (struct span){a, b, (uint32_t)f};
    }
    qsort(sp, ns, sizeof *sp, by_start);
    uint64_t end = 0;
    for (size_t i = 0; i < ns; i++) {
        if (sp[i].start < end) continue; /* overlaps the one before: its extents are step 2's */
        whole[sp[i].frame] = 1;
        end = sp[i].end;
    }
    free(base); free(state); free(reg); free(sp);
}

/* posix_fadvise(WILLNEED) over the stored bytes of the frames this stage
 * reads, adjacent ones merged, in pack and offset order (the frames table is
 * in that order as written; a range out of order is simply asked for). */
static void read_ahead(const struct lz_image *img, const int *fds, const uint8_t *used)
{
    long pack = -1;
    uint64_t a = 0, b = 0;
    for (size_t f = 0; f <= img->nframes; f++) {
        const struct lz_frame *fr = f < img->nframes && used[f] ? &img->frames[f] : NULL;
        if (fr && (long)fr->pack == pack && fr->offset == b) { b += fr->stored; continue; }
        if (pack >= 0 && b > a) posix_fadvise(fds[pack], (off_t)a, (off_t)(b - a), POSIX_FADV_WILLNEED);
        if (!fr) { pack = -1; continue; }
        pack = fr->pack;
        a = fr->offset;
        b = a + fr->stored;
    }
}

void restore_fill_memory(struct restore_ctx *rc, int stage)
{
    const struct lz_image *img = &rc->img;
    if (img->nextents >= COMPARE) restore_fail("the image has too many extents");
    int *fds = calloc(img->npacks + 1, sizeof *fds);
    if (!fds) restore_fail("out of memory");
    for (size_t i = 0; i < img->npacks; i++) {
        char path[LZ_PATH_MAX + 600];
        snprintf(path, sizeof path, "%s/%s", rc->ckpt_dir, lz_str(img, img->packs[i].path));
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) restore_fail("checkpoint %llu is damaged: cannot open %s: %s", (unsigned long long)rc->index, path, strerror(errno));
        off_t sz = lseek(fds[i], 0, SEEK_END);
        if (sz < 0 || (uint64_t)sz != img->packs[i].size)
            restore_fail("checkpoint %llu is damaged: %s has %lld bytes, expected %llu", (unsigned long long)rc->index, path,
                         (long long)sz, (unsigned long long)img->packs[i].size);
    }
    size_t nf = img->nframes;
    /* what this stage does with each extent: fills it (0), checks its frame
     * (CHECK_ONLY), or leaves it (SKIP_EXTENT); and the region it is in */
    uint32_t *what = malloc((img->nextents + 1) * sizeof *what), *region_of = calloc(img->nextents + 1, sizeof *region_of);
    uint8_t *whole = calloc(nf + 1, 1), *used = calloc(nf + 1, 1);
    if (!what || !region_of || !whole || !used) restore_fail("out of memory");
    memset(what, 0xff, (img->nextents + 1) * sizeof *what);
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *r = &img->regions[i];
        uint32_t w = restore_region_stage(r) != stage ? (stage == RESTORE_ANON ? CHECK_ONLY : SKIP_EXTENT)
                   : rc->lazy && rc->lazy[i] ? SKIP_EXTENT /* the lazy fill's server places it */
                   : rc->inherited && rc->inherited[i] ? COMPARE : 0;
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents; e++) {
            what[e] = w;
            region_of[e] = (uint32_t)i;
        }
    }
    plan_whole(img, what, region_of, whole);
    /* the order: step 1's frames (one entry each, by its first extent), then
     * step 2's extents grouped by frame, in address order within one */
    uint32_t *order = calloc(img->nextents + 1, sizeof *order), *at = calloc(nf + 2, sizeof *at);
    if (!order || !at) restore_fail("out of memory");
    size_t n1 = 0, n = 0;
    for (size_t e = 0; e < img->nextents; e++) {
        uint32_t f = img->extents[e].frame;
        if (what[e] == SKIP_EXTENT) continue;
        if (f != LZ_FRAME_ZERO) used[f] = 1;
        if (f != LZ_FRAME_ZERO && whole[f]) {
            if (whole[f] == 1) { order[n1++] = (uint32_t)e | WHOLE; whole[f] = 2; }
            continue;
        }
        at[(f == LZ_FRAME_ZERO ? nf : f) + 1]++;
        n++;
    }
    for (size_t k = 1; k <= nf + 1; k++) at[k] += at[k - 1];
    for (size_t e = 0; e < img->nextents; e++) {
        uint32_t f = img->extents[e].frame;
        if (what[e] == SKIP_EXTENT || (f != LZ_FRAME_ZERO && whole[f])) continue;
        order[n1 + at[f == LZ_FRAME_ZERO ? nf : f]++] = (uint32_t)e | what[e];
    }
    free(at);
    free(what);
    free(region_of);
    free(whole);
    read_ahead(img, fds, used);
    free(used);
    uint64_t cmp[2] = {0, 0};
    run_workers(rc, fds, order, n1, cmp); /* step 1: frames placed whole, never overlapping */
    char step[96];
    snprintf(step, sizeof step, "%zu frames placed whole, %zu extents to fill", n1, n);
    restore_trace(step);
    run_workers(rc, fds, order + n1, n, cmp); /* step 2: what later frames replaced, and the rest */
    if (cmp[0]) {
        snprintf(step, sizeof step, "%llu KiB kept from the parent compared, %llu KiB of it differed",
                 (unsigned long long)(cmp[0] >> 10), (unsigned long long)(cmp[1] >> 10));
        restore_trace(step);
    }
    for (size_t i = 0; i < img->npacks; i++) close(fds[i]);
    free(fds);
    free(order);
}
