/* Copy-on-write sharing between a parent and the children it forked, kept
 * through a restart.  The kernel shares private pages between processes only
 * through fork, so a parent's restorer fills its anonymous memory before it
 * makes its children (restore_main.c), and each child goes on in the copy of
 * that restorer fork gave it (restore_continue_child) instead of running a
 * fresh one.  Here the child keeps each of the parent's regions that is the
 * same private anonymous region in its own image (same start, end and flags)
 * and unmaps the others; restore_fill.c then fills a kept region by
 * comparing: each frame is read and checked as always, and only the pages
 * that differ from the parent's are written (the kernel copies just those),
 * zero extents are dropped with MADV_DONTNEED (a private anonymous page then
 * reads as zero), and so are the pages no extent covers.
 *
 * Filling first delays the children (a restart of a job is serialised down
 * each branch of its tree), which is worth it only where they do share: so
 * before its own fill a parent estimates, per child, what it would share
 * (restore_inherit_worth: a few pages of each region they could share, read
 * from both images and compared), makes the children that would share less
 * than LAZARUS_INHERIT_MIN_KIB (4 MiB) at once, with a fresh restorer each,
 * as before, and the others after its fill. */
#include "restorer.h"
#include "codec.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Flags under which a region is not the same after fork: not copied to the
 * child (MADV_DONTFORK), zero in the child (MADV_WIPEONFORK), mapped with
 * room below it (a stack), or memory the kernel may drop (MAP_DROPPABLE). */
#define NOT_INHERITED (LZ_RF_DONTFORK | LZ_RF_WIPEONFORK | LZ_RF_GROWSDOWN | LZ_RF_STACK | LZ_RF_DROPPABLE)

static int keepable(const struct lz_region *pr, const struct lz_region *cr)
{
    return pr->kind == LZ_R_ANON && cr->kind == LZ_R_ANON && pr->start == cr->start && pr->end == cr->end &&
           pr->flags == cr->flags && !(pr->flags & NOT_INHERITED) && pr->nextents > 0 && cr->nextents > 0;
}

/* The region of img starting at `start` (regions are sorted), or -1. */
static long region_at(const struct lz_image *img, uint64_t start)
{
    size_t lo = 0, hi = img->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (img->regions[mid].start < start) lo = mid + 1; else hi = mid;
    }
    return lo < img->nregions && img->regions[lo].start == start ? (long)lo : -1;
}

static void zero_range(uint64_t a, uint64_t b)
{
    if (b > a && madvise((void *)a, b - a, MADV_DONTNEED) < 0)
        restore_fail("cannot clear the memory at 0x%llx-0x%llx: %s", (unsigned long long)a, (unsigned long long)b, strerror(errno));
}

void restore_inherit(struct restore_ctx *rc, const struct restore_ctx *parent)
{
    const struct lz_image *img = &rc->img, *pimg = &parent->img;
    if (!(rc->inherited = calloc(img->nregions + 1, 1))) restore_fail("out of memory");
    uint64_t kept = 0;
    for (size_t i = 0; i < pimg->nregions; i++) {
        const struct lz_region *pr = &pimg->regions[i];
        uint64_t lo = parent->mapped_lo ? parent->mapped_lo[i] : 0;
        if (!lo) continue; /* not mapped (yet) by the parent */
        long j = region_at(img, pr->start);
        if (j >= 0 && lo == pr->start && keepable(pr, &img->regions[j])) {
            rc->inherited[j] = 1;
            kept += pr->end - pr->start;
            continue;
        }
        if (munmap((void *)lo, pr->end - lo) < 0)
            restore_fail("cannot unmap the parent's memory at 0x%llx: %s", (unsigned long long)lo, strerror(errno));
    }
    restore_forget_views();
    restore_park_vdso(rc); /* where the parent parked it may be the child's */
    for (size_t j = 0; j < img->nregions; j++) {
        if (!rc->inherited[j]) continue;
        const struct lz_region *r = &img->regions[j];
        if (mprotect((void *)r->start, r->end - r->start, (int)r->prot | PROT_READ | PROT_WRITE) < 0)
            restore_fail("cannot set protections at 0x%llx: %s", (unsigned long long)r->start, strerror(errno));
        /* pages no extent covers were never touched in this process: zero */
        uint64_t at = r->start;
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents; e++) {
            zero_range(at, img->extents[e].addr);
            at = img->extents[e].addr + img->extents[e].length;
        }
        zero_range(at, r->end);
    }
    char step[96];
    snprintf(step, sizeof step, "continues from its parent's restorer, keeping %llu KiB of its memory",
             (unsigned long long)(kept >> 10));
    restore_trace(step);
}

/* A page of an image, for an estimate: read alone from a frame stored as
 * is, else from its frame expanded (one kept); not checked (the fill checks
 * every frame it uses).  1, or 0 if no extent holds the page or its frame
 * cannot be had (the fill says what is wrong, later). */
struct page_reader {
    const struct restore_ctx *rc;
    char *raw, *in, *work;
    long cached;
};

static int reader_init(struct page_reader *pr, const struct restore_ctx *rc)
{
    pr->rc = rc;
    pr->cached = -1;
    pr->raw = malloc(LZ_FRAME_MAX);
    pr->in = malloc(LZ_FRAME_MAX);
    pr->work = malloc(lz_dctx_size());
    return pr->raw && pr->in && pr->work ? 0 : -1;
}

static void reader_free(struct page_reader *pr)
{
    free(pr->raw);
    free(pr->in);
    free(pr->work);
}

static int read_page(struct page_reader *pr, uint64_t addr, char *page)
{
    const struct lz_image *img = &pr->rc->img;
    size_t lo = 0, hi = img->nextents; /* the first extent ending after addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (img->extents[mid].addr + img->extents[mid].length <= addr) lo = mid + 1; else hi = mid;
    }
    if (lo == img->nextents || img->extents[lo].addr > addr) return 0;
    const struct lz_extent *x = &img->extents[lo];
    if (x->frame == LZ_FRAME_ZERO) { memset(page, 0, 4096); return 1; }
    const struct lz_frame *f = &img->frames[x->frame];
    uint64_t at = x->skip + (addr - x->addr);
    if (pr->cached == (long)x->frame) { memcpy(page, pr->raw + at, 4096); return 1; }
    char path[LZ_PATH_MAX + 600];
    snprintf(path, sizeof path, "%s/%s", pr->rc->ckpt_dir, lz_str(img, img->packs[f->pack].path));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int ok;
    if (f->codec == LZ_CODEC_NONE) {
        ok = at + 4096 <= f->raw && lz_pread_all(fd, page, 4096, (off_t)(f->offset + at)) == 0;
    } else {
        ok = lz_pread_all(fd, pr->in, f->stored, (off_t)f->offset) == 0 &&
             lz_decompress((int)f->codec, pr->in, f->stored, pr->raw, f->raw, pr->work, lz_dctx_size()) == 0;
        pr->cached = ok ? (long)x->frame : -1;
        if (ok) memcpy(page, pr->raw + at, 4096);
    }
    close(fd);
    return ok;
}

/* Pages compared per region a child could keep. */
#define SAMPLES 4

/* The parent's pages read for the estimates, kept: children forked alike
 * sample the same addresses (by image: a child judging its own children
 * has another). */
static struct { const void *img; uint64_t addr; char page[4096]; } parent_pages[16];
static int nparent_pages;

static int parent_page(struct page_reader *pr, uint64_t addr, char *page)
{
    for (int k = 0; k < nparent_pages; k++)
        if (parent_pages[k].img == pr->rc->img.regions && parent_pages[k].addr == addr) {
            memcpy(page, parent_pages[k].page, 4096);
            return 1;
        }
    if (read_page(pr, addr, page) != 1) return 0;
    int k = nparent_pages < 16 ? nparent_pages++ : (int)(addr / 4096 % 16);
    parent_pages[k].img = pr->rc->img.regions;
    parent_pages[k].addr = addr;
    memcpy(parent_pages[k].page, page, 4096);
    return 1;
}

static uint64_t inherit_min = 4ull << 20;

void restore_inherit_init(void)
{
    const char *v = getenv("LAZARUS_INHERIT_MIN_KIB");
    uint64_t kib;
    if (v && *v && lz_parse_u64(v, &kib) == 0 && kib < (1ull << 40)) inherit_min = kib << 10;
}

int restore_inherit_worth(const struct restore_ctx *parent, const struct restore_ctx *child)
{
    uint64_t min = inherit_min;
    if (min == 0) return 1; /* LAZARUS_INHERIT_MIN_KIB=0: every child (the tests) */
    const struct lz_image *img = &child->img;
    struct page_reader pp, cp;
    if (reader_init(&pp, parent) < 0 || reader_init(&cp, child) < 0) restore_fail("out of memory");
    char *a = malloc(4096), *b = malloc(4096);
    if (!a || !b) restore_fail("out of memory");
    uint64_t shared = 0;
    for (size_t j = 0; j < img->nregions && shared < min; j++) {
        const struct lz_region *cr = &img->regions[j];
        long i = region_at(&parent->img, cr->start);
        if (i < 0 || !keepable(&parent->img.regions[i], cr)) continue;
        /* pages spread over the region's stored bytes, each compared */
        uint64_t bytes = 0;
        for (uint32_t e = cr->first_extent; e < cr->first_extent + cr->nextents; e++) bytes += img->extents[e].length;
        int equal = 0;
        for (int k = 0; k < SAMPLES; k++) {
            uint64_t at = bytes * (uint64_t)(2 * k + 1) / (2 * SAMPLES) & ~4095ull, addr = 0;
            for (uint32_t e = cr->first_extent; e < cr->first_extent + cr->nextents && !addr; e++) {
                if (at < img->extents[e].length) addr = img->extents[e].addr + at;
                else at -= img->extents[e].length;
            }
            equal += addr && read_page(&cp, addr, a) == 1 && parent_page(&pp, addr, b) == 1 && !memcmp(a, b, 4096);
        }
        shared += bytes / SAMPLES * (uint64_t)equal;
    }
    reader_free(&pp);
    reader_free(&cp);
    free(a);
    free(b);
    return shared >= min;
}
