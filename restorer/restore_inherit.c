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
 * reads as zero), and so are the pages no extent covers. */
#include "restorer.h"
#include "util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
