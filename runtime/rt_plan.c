/* Which pages a checkpoint stores, decided: in the pause, the dirty scan
 * (and the regions compared by digest instead); then the plan, runs of
 * pages clean, zero or new (rt_pages.h). */
#include "rt_pages.h"
#include "rt_dirty.h"
#include "rt_exclude.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE (1ull << 61)
#define DIRTY_CAP (4u << 20)
#define ITEMS_CAP (8u << 20)
#define COPY_MAX (256ull << 20) /* changed bytes copied in the pause rather than forking */

/* ------------------------------------------------------- the dirty scan */

/* Regions kept out of dirty tracking because transparent huge pages back
 * them: write-protect faults split a huge page into 4 KiB ones (the kernel
 * does so for asynchronous write-protect), after which the program runs
 * slower and every fork copies 512 times as many page-table entries.  Their
 * pages are compared by digest in the writer instead (the spare core's work,
 * not the pause's).  Known by their bounds; after a restart, memory restored
 * in huge pages is found again (rt_pages_keep_whole). */
#define WHOLE_MAX 256
struct span { uint64_t start, end; };
static struct span whole[WHOLE_MAX];
static size_t nwhole;

/* Large mappings new at the previous checkpoint, which its forked writer
 * registered for tracking after the fork (rt_dirty_track_parent): the walk
 * that write-protects every page of a fresh 4 GiB heap takes 80 ms, kept out
 * of the pause.  What the program wrote between the fork and the
 * registration was not seen, so at this checkpoint every mapping that
 * overlaps one (it may have been split or cut since) is compared by digest
 * once; from the next on, only written pages count. */
#define LATE_MIN (16ull << 20)
static struct span late[WHOLE_MAX];
static size_t nlate;

void rt_pages_forget(void) { nwhole = nlate = 0; }

static int add_span(struct span *v, size_t *n, uint64_t start, uint64_t end)
{
    if (*n == WHOLE_MAX) return 0;
    v[*n].start = start;
    v[(*n)++].end = end;
    return 1;
}

static int in_spans(const struct span *v, size_t n, const struct lz_region *r, int overlap)
{
    for (size_t k = 0; k < n; k++)
        if (overlap ? v[k].start < r->end && v[k].end > r->start : v[k].start == r->start && v[k].end == r->end) return 1;
    return 0;
}

void rt_track_late(struct rt_ckpt *ck, int by_writer)
{
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        if (!ck->rdirty[i].late) continue;
        if (!by_writer || !add_span(late, &nlate, r->start, r->end)) {
            ck->rdirty[i].late = 0; /* the writer leaves it alone */
            rt_dirty_track(r->start, r->end);
        }
    }
}

static int huge_backed(const struct lz_region *r)
{
    if (r->kind != LZ_R_ANON || r->end - r->start < (2u << 20) || nwhole == WHOLE_MAX) return 0;
    if (r->flags & LZ_RF_NOHUGEPAGE) return 0;
    /* a sample (its start, middle and end): walking all of it costs 4 ms per GiB */
    uint64_t present = 0, huge = 0, len = r->end - r->start, w = 32ull << 20;
    uint64_t at[3] = {r->start, r->start + (len / 2 & ~((2ull << 20) - 1)), r->end > w ? r->end - w : r->start};
    for (int k = 0; k < 3; k++) {
        uint64_t a = at[k] < r->start ? r->start : at[k], b = a + w < r->end ? a + w : r->end, p, h;
        if (rt_dirty_huge(a, b, &p, &h) < 0) return 0;
        present += p; huge += h;
        if (len <= w) break;
    }
    /* MADV_HUGEPAGE and nothing there yet: it will be huge (unless THP is off) */
    if (!present) return (r->flags & LZ_RF_HUGEPAGE) != 0;
    return huge * 2 >= present;
}

int rt_pages_keep_whole(uint64_t start, uint64_t end)
{
    struct lz_region r = {0};
    r.start = start; r.end = end; r.kind = LZ_R_ANON;
    return huge_backed(&r) && add_span(whole, &nwhole, start, end);
}

int rt_scan_dirty(struct rt_ckpt *ck)
{
    ck->dirty = arena_alloc(&ck->arena, DIRTY_CAP * sizeof *ck->dirty);
    if (!ck->dirty) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    char err[200];
    int ok = !rt.nodirty && (rt_dirty_active() || rt_dirty_init(RT_DIRTY_FD_BASE, err, sizeof err) == 0);
    ck->tracking = ok;
    /* A write-protect marker left in an empty page-table entry reads as a
     * swapped page in pagemap; with no swap in use none is a real one. */
    char sw[512];
    long swn = rt_read_file("/proc/swaps", sw, sizeof sw - 1);
    int lines = 0;
    for (long k = 0; k < swn; k++) lines += sw[k] == '\n';
    ck->swap_active = swn < 0 || lines > 1;
    size_t n = 0;
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        struct rt_region_dirty *rd = &ck->rdirty[i];
        if (r->kind == LZ_R_SHARED_ANON && !(r->flags & LZ_RF_SYSV)) {
            /* the writer must see it as it is now, not as the program goes on changing it */
            char *copy = arena_alloc(&ck->arena, r->end - r->start);
            if (!copy) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory (shared memory copy)"); return -1; }
            if (!(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot | PROT_READ);
            memcpy(copy, (void *)r->start, r->end - r->start);
            if (!(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot);
            rd->delta = (int64_t)((uint64_t)copy - r->start);
            rd->from_content = 1;
        }
        rd->first = (uint32_t)n;
        rd->n = 0;
        rd->all = 1;
        /* shared memory may be written by others, unseen; the runtime's own
         * data changes after the scan: both are compared by digest */
        if (!ok || !region_stored(r) || r->kind == LZ_R_SHARED_ANON || rd->from_content || contains(r, &rt) || contains(r, &fj))
            continue;
        if (in_spans(whole, nwhole, r, 0)) { rd->digest = 1; continue; }
        int was_late = in_spans(late, nlate, r, 1);
        uint64_t at = r->start;
        int failed = 0;
        while (at < r->end) {
            if (n == DIRTY_CAP) { failed = 1; break; }
            long k = rt_dirty_scan(at, r->end, (struct rt_dirty_range *)ck->dirty + n, DIRTY_CAP - n, &at);
            if (k < 0) { failed = 1; break; }
            n += (size_t)k;
        }
        if (failed) {
            /* never tracked (a new mapping) or moved: all of it, and track it from now on */
            n = rd->first;
            if (huge_backed(r) && add_span(whole, &nwhole, r->start, r->end)) {
                rd->digest = 1;
            } else if (r->end - r->start >= LATE_MIN) {
                rd->late = 1;
            } else {
                rt_dirty_track(r->start, r->end);
            }
            continue;
        }
        if (was_late) { /* re-armed by the scan; its pages compared by digest this once */
            n = rd->first;
            rd->digest = 1;
            continue;
        }
        rd->n = (uint32_t)(n - rd->first);
        rd->all = 0;
    }
    ck->ndirty = n;
    size_t keep = 0; /* forget regions that are gone */
    for (size_t k = 0; k < nwhole; k++)
        for (size_t i = 0; i < ck->nregions; i++)
            if (ck->regions[i].start == whole[k].start && ck->regions[i].end == whole[k].end) { whole[keep++] = whole[k]; break; }
    nwhole = keep;
    nlate = 0;
    return 0;
}

/* ------------------------------------------------------- page runs (items) */

struct planner {
    struct rt_ckpt *ck;
    const struct rt_map *pm;
    size_t pe; /* cursor in pm->extents */
};

static int push_run(void *plv, uint64_t addr, uint64_t len, int kind, uint32_t pframe, uint32_t skip, int file, int64_t delta,
                    int flags)
{
    struct planner *pl = plv;
    struct rt_ckpt *ck = pl->ck;
    while (len) { /* runs of any size, items of at most LZ_EXTENT_MAX (their length is 32 bits) */
        uint64_t n = len < LZ_EXTENT_MAX ? len : LZ_EXTENT_MAX;
        if (ck->nitems == ITEMS_CAP) return rt_fail(ck, "the program's memory is too fragmented to checkpoint", 0);
        ck->items[ck->nitems++] = (struct rt_item){addr, addr + (uint64_t)delta, (uint32_t)n, (uint8_t)kind, (uint8_t)file, (uint16_t)flags, pframe, skip};
        addr += n; len -= n;
        if (kind == IT_REF) skip += (uint32_t)n;
    }
    return 0;
}

/* Every run goes through the program's exclusions, if it made any (rt_exclude.c). */
static int push(struct planner *pl, uint64_t addr, uint64_t len, int kind, uint32_t pframe, uint32_t skip, int file, int64_t delta)
{
    if (rt_excl_used()) return rt_excl_split(pl, push_run, pl->pm, addr, len, kind, pframe, skip, file, delta);
    return push_run(pl, addr, len, kind, pframe, skip, file, delta, 0);
}

/* A clean run [a,b): what the previous map says it holds. */
static int close_clean(struct planner *pl, uint64_t a, uint64_t b, int file, int64_t delta)
{
    const struct rt_map *pm = pl->pm;
    while (pl->pe < pm->nextents && pm->extents[pl->pe].addr + pm->extents[pl->pe].length <= a) pl->pe++;
    uint64_t cur = a;
    for (size_t k = pl->pe; k < pm->nextents && pm->extents[k].addr < b; k++) {
        const struct lz_extent *x = &pm->extents[k];
        uint64_t lo = x->addr > cur ? x->addr : cur, hi = x->addr + x->length < b ? x->addr + x->length : b;
        if (lo > cur && push(pl, cur, lo - cur, IT_NEW, 0, 0, file, delta) < 0) return -1;
        int rc = x->frame == LZ_FRAME_ZERO ? push(pl, lo, hi - lo, IT_ZERO, 0, 0, file, 0)
                                           : push(pl, lo, hi - lo, IT_REF, x->frame, x->skip + (uint32_t)(lo - x->addr), file, 0);
        if (rc < 0) return -1;
        cur = hi;
    }
    return push(pl, cur, b - cur, IT_NEW, 0, 0, file, delta);
}

/* One region from /proc/self/pagemap: which pages hold data (present or
 * swapped; in a private file mapping, copied on write), clean or not. */
static int plan_region_pagemap(struct planner *pl, size_t i, long pm_fd, uint64_t *ents, size_t batch)
{
    struct rt_ckpt *ck = pl->ck;
    const struct lz_region *r = &ck->regions[i];
    const struct rt_region_dirty *rd = &ck->rdirty[i];
    int use_clean = pl->pm->index && pl->pm->tracked && ck->tracking && !rd->all;
    int file = r->kind == LZ_R_FILE_PRIVATE;
    const struct rt_dirty_range *dr = (const struct rt_dirty_range *)ck->dirty + rd->first, *dend = dr + rd->n;
    uint64_t run = 0, run_len = 0;
    int run_clean = 0, rc = 0;
#define CLOSE_RUN() (run_clean ? close_clean(pl, run, run + run_len, file, rd->delta) \
                               : push(pl, run, run_len, IT_NEW, 0, 0, file, rd->delta))
    for (uint64_t a = r->start; a < r->end && rc == 0;) {
        uint64_t npages = (r->end - a) / PAGE;
        if (npages > batch) npages = batch;
        long got = rd->from_content ? (long)(npages * 8) : lz_sc4(SYS_pread64, pm_fd, ents, npages * 8, (a / PAGE) * 8);
        if (got == -EINTR) continue;
        if (got <= 0) return rt_fail(ck, "cannot read /proc/self/pagemap", got);
        npages = (uint64_t)got / 8;
        for (uint64_t k = 0; k < npages && rc == 0; k++, a += PAGE) {
            uint64_t e = rd->from_content ? PM_PRESENT : ents[k];
            uint64_t held = PM_PRESENT | (ck->swap_active ? PM_SWAPPED : 0);
            int has = (e & held) && !(file && (e & PM_FILE) && !(e & PM_SWAPPED & held));
            if (!has) {
                if (run_len) rc = CLOSE_RUN();
                run_len = 0;
                continue;
            }
            int clean = use_clean;
            if (clean) {
                while (dr < dend && dr->end <= a) dr++;
                if (dr < dend && dr->start <= a) clean = 0;
            }
            if (run_len && run_clean == clean) { run_len += PAGE; continue; }
            if (run_len) rc = CLOSE_RUN();
            run = a; run_len = PAGE; run_clean = clean;
        }
    }
    if (run_len && rc == 0) rc = CLOSE_RUN();
#undef CLOSE_RUN
    return rc;
}

/* One anonymous region without reading pagemap (copy mode, in the pause):
 * its pages with data are those the previous checkpoint held, clean, and
 * those written since (a page dropped since reads as zeros and is skipped
 * as such). */
static int plan_region_tracked(struct planner *pl, size_t i, struct rt_dirty_range *hold, size_t holdcap)
{
    struct rt_ckpt *ck = pl->ck;
    const struct lz_region *r = &ck->regions[i];
    const struct rt_region_dirty *rd = &ck->rdirty[i];
    const struct rt_map *pm = pl->pm;
    /* clean pages the kernel dropped (MADV_FREE) are not reported written:
     * a clean page counts only if it still holds data.  Finding out walks
     * every page (4 ms per GiB), done only for a program that ever called
     * madvise(MADV_FREE) through libc.  (Through a raw system call, a page
     * the kernel reclaimed comes back from the checkpoint with its old data,
     * one of the two contents MADV_FREE allows.) */
    long nh = 1;
    if (rt.lazyfree) nh = rt_dirty_holding(r->start, r->end, hold, holdcap, ck->swap_active);
    else hold[0] = (struct rt_dirty_range){r->start, r->end};
    if (nh < 0) return 1; /* let the caller fork instead */
    const struct rt_dirty_range *h = hold, *hend = hold + nh;
    const struct rt_dirty_range *dr = (const struct rt_dirty_range *)ck->dirty + rd->first, *dend = dr + rd->n;
    uint64_t cur = r->start;
    while (pl->pe < pm->nextents && pm->extents[pl->pe].addr + pm->extents[pl->pe].length <= cur) pl->pe++;
    while (cur < r->end) {
        while (dr < dend && dr->end <= cur) dr++;
        while (pl->pe < pm->nextents && pm->extents[pl->pe].addr + pm->extents[pl->pe].length <= cur) pl->pe++;
        const struct lz_extent *x = pl->pe < pm->nextents ? &pm->extents[pl->pe] : NULL;
        uint64_t nd = dr < dend ? dr->start : r->end, nx = x ? x->addr : r->end;
        if (nd > r->end) nd = r->end;
        if (nx > r->end) nx = r->end;
        if (dr < dend && dr->start <= cur) {
            uint64_t end = dr->end < r->end ? dr->end : r->end;
            if (push(pl, cur, end - cur, IT_NEW, 0, 0, 0, 0) < 0) return -1;
            cur = end;
        } else if (x && x->addr <= cur) {
            uint64_t end = x->addr + x->length;
            if (end > nd) end = nd;
            while (h < hend && h->end <= cur) h++;
            if (!(h < hend && h->start <= cur)) { /* dropped: no data until the next held page */
                cur = h < hend && h->start < end ? h->start : end;
                continue;
            }
            if (end > h->end) end = h->end;
            int rc = x->frame == LZ_FRAME_ZERO ? push(pl, cur, end - cur, IT_ZERO, 0, 0, 0, 0)
                                               : push(pl, cur, end - cur, IT_REF, x->frame, x->skip + (uint32_t)(cur - x->addr), 0, 0);
            if (rc < 0) return -1;
            cur = end;
        } else {
            cur = nd < nx ? nd : nx; /* no data here */
        }
    }
    return 0;
}

static int plan_begin(struct rt_ckpt *ck, struct planner *pl)
{
    pl->ck = ck;
    pl->pm = rt_map_current();
    pl->pe = 0;
    ck->nitems = 0;
    ck->items = arena_alloc(&ck->arena, (size_t)ITEMS_CAP * sizeof *ck->items);
    ck->ritems = arena_alloc(&ck->arena, (ck->nregions + 1) * 4);
    return ck->items && ck->ritems ? 0 : rt_fail(ck, "out of checkpoint scratch memory", 0);
}

/* In a forked writer: every region from pagemap. */
int rt_plan_all(struct rt_ckpt *ck)
{
    struct planner pl;
    if (plan_begin(ck, &pl) < 0) return -1;
    long pm_fd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    if (pm_fd < 0) return rt_fail(ck, "cannot open /proc/self/pagemap", pm_fd);
    enum { BATCH = 8192 };
    uint64_t *ents = arena_alloc(&ck->arena, BATCH * 8);
    int rc = ents ? 0 : rt_fail(ck, "out of checkpoint scratch memory", 0);
    for (size_t i = 0; i < ck->nregions && rc == 0; i++) {
        ck->ritems[i] = (uint32_t)ck->nitems;
        if (region_stored(&ck->regions[i])) rc = plan_region_pagemap(&pl, i, pm_fd, ents, BATCH);
    }
    ck->ritems[ck->nregions] = (uint32_t)ck->nitems;
    lz_sc1(SYS_close, pm_fd);
    return rc;
}

/* Copy mode: when dirty tracking covers all but a little memory, the pause
 * copies the changed pages (and the few untracked ones) instead of forking:
 * fork copies the page tables of all memory (20 ms per GiB of 4 KiB pages),
 * this costs about what changed.  Returns 1 when planned, 0 when the
 * checkpoint must fork instead, -1 on error. */
int rt_plan_copy(struct rt_ckpt *ck)
{
    const struct rt_map *pm = rt_map_current();
    if (!pm->index || !pm->tracked || !ck->tracking || rt_excl_used()) return 0;
    /* a spool (run -d s3://) has dropped the packs it published: the copy
     * mode's writer would read a sparse frame back from one; a forked writer
     * reads it from its snapshot */
    if (rt.spool) return 0;
    uint64_t budget = 0;
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        const struct rt_region_dirty *rd = &ck->rdirty[i];
        if (!region_stored(r)) continue;
        if (rd->all && !rd->delta && r->kind != LZ_R_FILE_PRIVATE) budget += r->end - r->start;
        for (uint32_t k = 0; k < rd->n; k++) {
            const struct rt_dirty_range *d = (const struct rt_dirty_range *)ck->dirty + rd->first + k;
            budget += d->end - d->start;
        }
    }
    /* a fork costs about 20 ms per GiB of memory, a copy about 1 ms per MiB */
    if (budget > COPY_MAX || budget > ck->mem_bytes / 40) return 0;
    struct planner pl;
    if (plan_begin(ck, &pl) < 0) return -1;
    long pm_fd = -1;
    enum { BATCH = 512 };
    uint64_t *ents = arena_alloc(&ck->arena, BATCH * 8);
    enum { HOLD_CAP = 1 << 20 };
    struct rt_dirty_range *hold = arena_alloc(&ck->arena, HOLD_CAP * sizeof *hold);
    if (!ents || !hold) return rt_fail(ck, "out of checkpoint scratch memory", 0);
    /* the copies go next in the arena: its pages made at once rather than by
     * one fault each (MADV_POPULATE_WRITE, Linux 5.14; harmless if refused) */
    uint64_t from = ((uint64_t)ck->arena.base + ck->arena.used + 4095) & ~4095ull;
    uint64_t upto = ((uint64_t)ck->arena.base + ck->arena.cap) & ~4095ull;
    if (from < upto) lz_sc3(SYS_madvise, from, budget + 4096 < upto - from ? budget + 4096 : upto - from, MADV_POPULATE_WRITE);
    int rc = 0;
    for (size_t i = 0; i < ck->nregions && rc == 0; i++) {
        const struct lz_region *r = &ck->regions[i];
        const struct rt_region_dirty *rd = &ck->rdirty[i];
        size_t first = ck->nitems;
        ck->ritems[i] = (uint32_t)first;
        if (!region_stored(r)) continue;
        if (rd->all && r->kind != LZ_R_FILE_PRIVATE) {
            rc = push(&pl, r->start, r->end - r->start, IT_NEW, 0, 0, 0, rd->delta);
        } else if (r->kind == LZ_R_FILE_PRIVATE) {
            /* only its copied-on-write pages: pagemap says which (never the file's own) */
            if (pm_fd < 0) pm_fd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
            rc = pm_fd < 0 ? rt_fail(ck, "cannot open /proc/self/pagemap", pm_fd) : plan_region_pagemap(&pl, i, pm_fd, ents, BATCH);
        } else {
            rc = plan_region_tracked(&pl, i, hold, HOLD_CAP);
            if (rc > 0) return 0; /* cannot tell which pages hold data: fork */
        }
        /* the pages to store, copied now: the program changes them as soon as it runs */
        for (size_t k = first; k < ck->nitems && rc == 0; k++) {
            struct rt_item *it = &ck->items[k];
            if (it->kind != IT_NEW || it->src != it->addr) continue; /* shared memory is copied already */
            char *copy = arena_alloc(&ck->arena, it->len);
            if (!copy) { rc = rt_fail(ck, "out of checkpoint scratch memory", 0); break; }
            if (!(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot | PROT_READ);
            memcpy(copy, (const void *)it->addr, it->len);
            if (!(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot);
            it->src = (uint64_t)copy;
        }
    }
    ck->ritems[ck->nregions] = (uint32_t)ck->nitems;
    if (pm_fd >= 0) lz_sc1(SYS_close, pm_fd);
    if (rc == 0) ck->planned = 1;
    return rc < 0 ? -1 : 1;
}
