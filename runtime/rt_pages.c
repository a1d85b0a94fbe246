/* Which pages a checkpoint stores, and storing them.
 *
 * In the pause (rt_scan_dirty): the dirty tracker reports, per region, the
 * pages written since the previous checkpoint and re-arms itself.
 *
 * In the writer (rt_store_pages, normally a forked child): every page with
 * data is either
 *  - clean and held by a frame of the previous checkpoint: referenced there
 *    (nothing read, nothing written);
 *  - all zeros: nothing stored;
 *  - a page whose content some referenced frame already holds (its XXH3-128
 *    digest is in the dedup table): referenced there;
 *  - new: copied into a frame of up to LZ_FRAME_MAX bytes, compressed, and
 *    appended to this checkpoint's pack, packs/pack.N.
 * Coalescing (libckpt's): a frame of which less than half is still
 * referenced has its live pages stored again, so old frames and packs stop
 * being needed and `gc` can delete them; restarts never expand more than
 * twice the data they need. */
#include "rt.h"
#include "rt_map.h"
#include "rt_dirty.h"
#include "rt_packio.h"
#include "codec.h"
#include "hash.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096ull
#define PM_PRESENT (1ull << 63)
#define PM_SWAPPED (1ull << 62)
#define PM_FILE (1ull << 61)
#define DIRTY_CAP (4u << 20)
#define ITEMS_CAP (8u << 20)
#define PENDING_SLOTS 512 /* > pages per frame */
#define COPY_MAX (256ull << 20) /* changed bytes copied in the pause rather than forking */

static int region_stored(const struct lz_region *r)
{
    return r->kind == LZ_R_ANON || r->kind == LZ_R_FILE_PRIVATE || r->kind == LZ_R_SHARED_ANON;
}

static int contains(const struct lz_region *r, const void *p)
{
    return (uint64_t)p >= r->start && (uint64_t)p < r->end;
}

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
        if (r->kind == LZ_R_SHARED_ANON) {
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

/* A run of pages and what becomes of it.  NEW pages are read at `src`: the
 * program's memory (a forked writer's copy of it), or a copy taken in the
 * pause (copy mode). */
struct rt_item {
    uint64_t addr, src;
    uint32_t len;
    uint8_t kind, region_file; /* IT_* */
    uint16_t pad;
    uint32_t pframe; /* previous map's frame (REF) */
    uint32_t skip;
};
enum { IT_REF = 1, IT_NEW = 2, IT_ZERO = 3 };

struct planner {
    struct rt_ckpt *ck;
    const struct rt_map *pm;
    size_t pe; /* cursor in pm->extents */
};

static int push(struct planner *pl, uint64_t addr, uint64_t len, int kind, uint32_t pframe, uint32_t skip, int file, int64_t delta)
{
    struct rt_ckpt *ck = pl->ck;
    while (len) { /* runs of any size, items of at most LZ_EXTENT_MAX (their length is 32 bits) */
        uint64_t n = len < LZ_EXTENT_MAX ? len : LZ_EXTENT_MAX;
        if (ck->nitems == ITEMS_CAP) return rt_fail(ck, "the program's memory is too fragmented to checkpoint", 0);
        ck->items[ck->nitems++] = (struct rt_item){addr, addr + (uint64_t)delta, (uint32_t)n, (uint8_t)kind, (uint8_t)file, 0, pframe, skip};
        addr += n; len -= n;
        if (kind == IT_REF) skip += (uint32_t)n;
    }
    return 0;
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
static int plan_all(struct rt_ckpt *ck)
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
    if (!pm->index || !pm->tracked || !ck->tracking) return 0;
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

/* ------------------------------------------------------------ the writer */

struct pend { uint64_t d0, d1; uint32_t skip, used; };

struct writer {
    struct rt_ckpt *ck;
    const struct rt_map *pm;
    struct rt_map *nm;
    uint32_t *newidx;  /* previous frame -> index in the new map, ~0 = not yet */
    uint64_t *live;    /* previous frame -> bytes the new checkpoint references */
    uint8_t *sparse;
    uint32_t *psorted; /* previous frames sorted by (pack id, offset) */
    uint32_t *nf_idx;  /* new frames of this checkpoint, in pack order */
    uint64_t *nf_off;
    size_t n_new;
    struct lz_cctx *cctx;
    int codec;
    char *stage; uint32_t spos; uint32_t sframe;
    const char *src0; int contig; /* the frame's pages lie in order from src0: read there, not copied */
    /* copy mode: a previous frame read back from its pack */
    uint32_t rf_frame; long rf_fd; uint64_t rf_pack;
    char *rf_in, *rf_raw, *rf_work;
    char *cbuf; /* a compressed frame */
    uint32_t failed_compress, skip_compress, backoff; /* frames in a row that did not compress; frames
                                                       * left uncompressed; the skip after the next failure */
    struct pend pend[PENDING_SLOTS];
    struct rt_packio *io;
    uint32_t packidx; /* this pack in nm->packs */
    char pack_path[LZ_PATH_MAX + 64];
    uint64_t changed;
};

/* heap sort of previous frames by (pack id, offset): no libc in here */
static int pf_less(const struct rt_map *pm, uint32_t a, uint32_t b)
{
    uint64_t pa = pm->packs[pm->frames[a].pack].id, pb = pm->packs[pm->frames[b].pack].id;
    return pa != pb ? pa < pb : pm->frames[a].offset < pm->frames[b].offset;
}

static void sift(const struct rt_map *pm, uint32_t *v, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && pf_less(pm, v[c], v[c + 1])) c++;
        if (!pf_less(pm, v[i], v[c])) return;
        uint32_t t = v[i]; v[i] = v[c]; v[c] = t;
        i = c;
    }
}

static void sort_prev_frames(const struct rt_map *pm, uint32_t *v)
{
    size_t n = pm->nframes;
    for (size_t i = 0; i < n; i++) v[i] = (uint32_t)i;
    for (size_t i = n / 2; i-- > 0;) sift(pm, v, i, n);
    for (size_t end = n; end > 1; end--) {
        uint32_t t = v[0]; v[0] = v[end - 1]; v[end - 1] = t;
        sift(pm, v, 0, end - 1);
    }
}

static long find_prev_frame(const struct writer *w, uint64_t pack, uint64_t offset)
{
    const struct rt_map *pm = w->pm;
    size_t lo = 0, hi = pm->nframes;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const struct lz_frame *f = &pm->frames[w->psorted[mid]];
        uint64_t id = pm->packs[f->pack].id & 0xffffffffu;
        if (id < pack || (id == pack && f->offset < offset)) lo = mid + 1;
        else hi = mid;
    }
    if (lo < pm->nframes) {
        const struct lz_frame *f = &pm->frames[w->psorted[lo]];
        if ((pm->packs[f->pack].id & 0xffffffffu) == pack && f->offset == offset) return w->psorted[lo];
    }
    return -1;
}

static long pack_index(struct writer *w, uint64_t id, uint64_t size)
{
    struct rt_map *nm = w->nm;
    for (size_t i = 0; i < nm->npacks; i++) if (nm->packs[i].id == id) return (long)i;
    if (nm->npacks == nm->packs_cap) return rt_fail(w->ck, "too many packs referenced", 0);
    nm->packs[nm->npacks] = (struct rt_map_pack){id, size};
    return (long)nm->npacks++;
}

/* The new map's index of previous frame f (copied on first use). */
static long use_prev_frame(struct writer *w, uint32_t f)
{
    if (w->newidx[f] != ~0u) return w->newidx[f];
    struct rt_map *nm = w->nm;
    if (nm->nframes == nm->frames_cap) return rt_fail(w->ck, "too many frames referenced", 0);
    const struct rt_map_pack *p = &w->pm->packs[w->pm->frames[f].pack];
    long pi = pack_index(w, p->id, p->size);
    if (pi < 0) return -1;
    nm->frames[nm->nframes] = w->pm->frames[f];
    nm->frames[nm->nframes].pack = (uint32_t)pi;
    w->newidx[f] = (uint32_t)nm->nframes;
    return (long)nm->nframes++;
}

static int emit(struct writer *w, size_t region_first, uint64_t addr, uint64_t len, uint32_t frame, uint32_t skip)
{
    struct rt_map *nm = w->nm;
    if (nm->nextents > region_first) {
        struct lz_extent *x = &nm->extents[nm->nextents - 1];
        if (x->frame == frame && x->addr + x->length == addr && (frame == LZ_FRAME_ZERO || x->skip + x->length == skip) &&
            (uint64_t)x->length + len <= LZ_EXTENT_MAX) {
            x->length += (uint32_t)len;
            return 0;
        }
    }
    if (nm->nextents == nm->extents_cap) return rt_fail(w->ck, "the program's memory is too fragmented to checkpoint", 0);
    nm->extents[nm->nextents++] = (struct lz_extent){addr, (uint32_t)len, frame, skip, 0};
    return 0;
}

static int open_pack(struct writer *w)
{
    char dir[LZ_PATH_MAX + 16];
    rt_fmt(dir, sizeof dir, "%s/" LZ_PACKS_DIR, rt.dir);
    lz_sc3(SYS_mkdirat, AT_FDCWD, dir, 0700);
    rt_pack_path(w->pack_path, sizeof w->pack_path, w->ck->index);
    long e = 0;
    /* a writer beside the program: the disk written from a thread of its own */
    w->io = rt_packio_open(&w->ck->arena, w->pack_path, w->ck->in_child, &e);
    if (!w->io) return rt_fail(w->ck, "cannot create the checkpoint's pack", e);
    long pi = pack_index(w, w->ck->index, 0);
    if (pi < 0) return -1;
    w->packidx = (uint32_t)pi;
    return 0;
}

static uint32_t pend_slot(uint64_t d0) { return (uint32_t)(d0 % PENDING_SLOTS); }

/* The dedup table is 4-way set-associative: a direct-mapped table loses a
 * fifth of its entries to collisions at half load, and a region compared by
 * digest (huge pages, no tracking) would then store those pages again. */
#define DEDUP_WAYS 4

static struct rt_dedup_ent *dedup_bucket(uint64_t d0)
{
    uint64_t nslots;
    struct rt_dedup_ent *tab = rt_map_dedup(&nslots);
    return &tab[d0 & (nslots - 1) & ~(uint64_t)(DEDUP_WAYS - 1)];
}

/* Where to record a digest: its own entry, else an empty or torn one, else
 * one no frame of the previous checkpoint backs, else the oldest. */
static struct rt_dedup_ent *dedup_victim(const struct writer *w, uint64_t d0, uint64_t d1)
{
    struct rt_dedup_ent *b = dedup_bucket(d0), *oldest = b;
    for (int k = 0; k < DEDUP_WAYS; k++)
        if (b[k].d0 == d0 && b[k].d1 == d1) return &b[k];
    for (int k = 0; k < DEDUP_WAYS; k++)
        if (b[k].check != rt_dedup_check(&b[k]) || (!b[k].d0 && !b[k].d1)) return &b[k];
    for (int k = 0; k < DEDUP_WAYS; k++) {
        if (b[k].pack != (uint32_t)w->ck->index && find_prev_frame(w, b[k].pack, b[k].offset) < 0) return &b[k];
        if (b[k].pack < oldest->pack) oldest = &b[k];
    }
    return oldest;
}

/* The valid entry for this digest, or NULL. */
static const struct rt_dedup_ent *dedup_find(uint64_t d0, uint64_t d1)
{
    const struct rt_dedup_ent *b = dedup_bucket(d0);
    for (int k = 0; k < DEDUP_WAYS; k++)
        if (b[k].d0 == d0 && b[k].d1 == d1 && b[k].check == rt_dedup_check(&b[k])) return &b[k];
    return NULL;
}

static int flush_frame(struct writer *w)
{
    if (!w->spos) return 0;
    if (!w->io && open_pack(w) < 0) return -1;
    struct lz_frame *f = &w->nm->frames[w->sframe];
    const char *raw = w->contig ? w->src0 : w->stage;
    f->raw = w->spos;
    f->xxh3 = lz_hash(raw, w->spos);
    /* data that did not compress (random, already compressed) is not tried
     * again for a while: a failed attempt costs nearly what succeeding does */
    int attempt = w->codec != LZ_CODEC_NONE && w->skip_compress == 0;
    size_t n = attempt ? lz_compress(w->cctx, raw, w->spos, w->cbuf, w->spos) : 0;
    if (n == (size_t)-1) return rt_fail(w->ck, "cannot compress page data", 0);
    if (w->skip_compress) {
        w->skip_compress--;
    } else if (attempt && n) {
        w->failed_compress = 0;
        w->backoff = 0;
    } else if (attempt && ++w->failed_compress >= 4) {
        /* 4 in a row did not compress: skip 28 frames, then try one; each
         * failed try doubles the skip, up to a GiB of data */
        w->backoff = w->backoff ? (w->backoff < 512 ? w->backoff * 2 : 1024) : 28;
        w->skip_compress = w->backoff;
        w->failed_compress = 3;
    }
    f->codec = n ? (uint32_t)w->codec : LZ_CODEC_NONE;
    if (!n) n = w->spos;
    f->pack = w->packidx;
    f->offset = rt_packio_offset(w->io);
    f->stored = (uint32_t)n;
    /* what a restart checks before it changes anything: the bytes as written
     * (raw ones were just hashed; compressed ones are few, and hot) */
    f->sxxh3 = f->codec == LZ_CODEC_NONE ? f->xxh3 : lz_hash(w->cbuf, n);
    long e = rt_packio_append(w->io, f->codec == LZ_CODEC_NONE ? raw : w->cbuf, n);
    if (e < 0) return rt_fail(w->ck, "cannot write the checkpoint's page data", e);
    w->nf_idx[w->n_new] = w->sframe;
    w->nf_off[w->n_new++] = f->offset;
    /* the frame's pages become findable by digest */
    for (uint32_t i = 0; i < PENDING_SLOTS; i++) {
        struct pend *p = &w->pend[i];
        if (!p->used) continue;
        struct rt_dedup_ent *e = dedup_victim(w, p->d0, p->d1);
        e->check = 0;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        e->d0 = p->d0; e->d1 = p->d1; e->offset = f->offset; e->pack = (uint32_t)w->ck->index; e->skip = p->skip;
        __atomic_thread_fence(__ATOMIC_RELEASE);
        e->check = rt_dedup_check(e);
        p->used = 0;
    }
    w->spos = 0;
    return 0;
}

/* A page's digest and what the first pass found for it. */
struct pgref { uint64_t d0, d1; uint32_t frame, skip; };
#define PG_ZERO 0xfffffffeu
#define PG_NONE 0xffffffffu

/* A previous frame holding this content: its index there, or -1. */
static long dedup_prev(const struct writer *w, uint64_t d0, uint64_t d1, uint32_t *skip)
{
    const struct rt_dedup_ent *e = dedup_find(d0, d1);
    if (!e || e->pack == (uint32_t)w->ck->index) return -1;
    long f = find_prev_frame(w, e->pack, e->offset);
    if (f < 0 || e->skip + PAGE > w->pm->frames[f].raw) return -1;
    *skip = e->skip;
    return f;
}

/* A frame of this checkpoint holding this content (being filled, or
 * written already): its index in the new map, or -1. */
static long dedup_new(const struct writer *w, uint64_t d0, uint64_t d1, uint32_t *skip)
{
    for (uint32_t i = pend_slot(d0), k = 0; k < PENDING_SLOTS && w->pend[i].used; k++, i = (i + 1) % PENDING_SLOTS)
        if (w->pend[i].d0 == d0 && w->pend[i].d1 == d1) { *skip = w->pend[i].skip; return w->sframe; }
    const struct rt_dedup_ent *e = dedup_find(d0, d1);
    if (!e || e->pack != (uint32_t)w->ck->index) return -1;
    size_t lo = 0, hi = w->n_new;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (w->nf_off[m] < e->offset) lo = m + 1; else hi = m; }
    if (lo < w->n_new && w->nf_off[lo] == e->offset && e->skip + PAGE <= w->nm->frames[w->nf_idx[lo]].raw) {
        *skip = e->skip;
        return w->nf_idx[lo];
    }
    return -1;
}

/* First pass over a page to store: zero, or found in a previous frame
 * (which then counts as referenced for coalescing). */
static void examine_page(struct writer *w, const void *p, struct pgref *g)
{
    if (lz_is_zero(p, PAGE)) { g->frame = PG_ZERO; return; }
    XXH128_hash_t d = XXH3_128bits(p, PAGE);
    g->d0 = d.low64;
    g->d1 = d.high64;
    long f = dedup_prev(w, g->d0, g->d1, &g->skip);
    g->frame = f < 0 ? PG_NONE : (uint32_t)f;
    if (f >= 0) w->live[f] += PAGE;
}

/* Copy mode: the program runs on while this writer works, so the clean
 * pages of a sparse frame, stored again, are read back from that frame in
 * its pack rather than from the program's memory. */
static const char *prev_frame_data(struct writer *w, uint32_t f)
{
    if (w->rf_frame == f) return w->rf_raw;
    const struct lz_frame *fr = &w->pm->frames[f];
    uint64_t pack = w->pm->packs[fr->pack].id;
    if (!w->rf_in) {
        w->rf_in = arena_alloc(&w->ck->arena, LZ_FRAME_MAX);
        w->rf_raw = arena_alloc(&w->ck->arena, LZ_FRAME_MAX);
        w->rf_work = arena_alloc(&w->ck->arena, lz_dctx_size());
        if (!w->rf_in || !w->rf_raw || !w->rf_work) { rt_fail(w->ck, "out of checkpoint scratch memory", 0); return NULL; }
    }
    if (w->rf_fd < 0 || w->rf_pack != pack) {
        if (w->rf_fd >= 0) lz_sc1(SYS_close, w->rf_fd);
        char path[LZ_PATH_MAX + 64];
        rt_pack_path(path, sizeof path, pack);
        w->rf_fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
        w->rf_pack = pack;
        if (w->rf_fd < 0) { rt_fail(w->ck, "cannot read back an earlier checkpoint's pack", w->rf_fd); return NULL; }
    }
    w->rf_frame = ~0u;
    if (fr->stored > LZ_FRAME_MAX || fr->raw > LZ_FRAME_MAX) { rt_fail(w->ck, "an earlier checkpoint's frame is damaged", 0); return NULL; }
    for (uint32_t got = 0; got < fr->stored;) {
        long n = lz_sc4(SYS_pread64, w->rf_fd, w->rf_in + got, fr->stored - got, fr->offset + got);
        if (n == -EINTR) continue;
        if (n <= 0) { rt_fail(w->ck, "cannot read back an earlier checkpoint's pack", n ? n : -EIO); return NULL; }
        got += (uint32_t)n;
    }
    if (lz_decompress((int)fr->codec, w->rf_in, fr->stored, w->rf_raw, fr->raw, w->rf_work, lz_dctx_size()) < 0 ||
        lz_hash(w->rf_raw, fr->raw) != fr->xxh3) {
        rt_fail(w->ck, "an earlier checkpoint's frame is damaged", 0);
        return NULL;
    }
    w->rf_frame = f;
    return w->rf_raw;
}

/* p is stable when it stays readable and unchanged until the frame is
 * written (the program's snapshot or a copy of it), not a reused buffer. */
static int store_page(struct writer *w, size_t rfirst, uint64_t a, const void *p, int stable, int file,
                      const struct pgref *g)
{
    struct pgref mine;
    if (!g) { examine_page(w, p, &mine); g = &mine; } /* a page of a sparse frame, stored again */
    if (g->frame == PG_ZERO) return file ? emit(w, rfirst, a, PAGE, LZ_FRAME_ZERO, 0) : 0;
    if (g->frame != PG_NONE && !w->sparse[g->frame]) {
        long f = use_prev_frame(w, g->frame);
        return f < 0 ? -1 : emit(w, rfirst, a, PAGE, (uint32_t)f, g->skip);
    }
    uint32_t skip;
    long f = dedup_new(w, g->d0, g->d1, &skip);
    if (f >= 0) return emit(w, rfirst, a, PAGE, (uint32_t)f, skip);
    if (!w->spos) {
        if (w->nm->nframes == w->nm->frames_cap) return rt_fail(w->ck, "too many frames", 0);
        w->sframe = (uint32_t)w->nm->nframes++;
        w->nm->frames[w->sframe] = (struct lz_frame){0};
    }
    /* the memory read is a snapshot (fork), a copy (copy mode) or paused:
     * it holds still until the frame is written */
    if (!w->spos) {
        w->src0 = p;
        w->contig = 1;
    } else if (w->contig && (const char *)p != w->src0 + w->spos) {
        memcpy(w->stage, w->src0, w->spos);
        w->contig = 0;
    }
    if (!stable && w->contig) {
        if (w->spos) memcpy(w->stage, w->src0, w->spos);
        w->contig = 0;
    }
    if (!w->contig) memcpy(w->stage + w->spos, p, PAGE);
    uint32_t i = pend_slot(g->d0);
    while (w->pend[i].used) i = (i + 1) % PENDING_SLOTS;
    w->pend[i] = (struct pend){g->d0, g->d1, w->spos, 1};
    int rc = emit(w, rfirst, a, PAGE, w->sframe, w->spos);
    w->spos += PAGE;
    if (rc == 0 && w->spos == LZ_FRAME_MAX) rc = flush_frame(w);
    return rc;
}

int rt_store_pages(struct rt_ckpt *ck)
{
    struct writer *w = arena_alloc(&ck->arena, sizeof *w);
    if (!w) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    memset(w, 0, sizeof *w);
    w->ck = ck;
    w->rf_frame = ~0u;
    w->rf_fd = -1;
    w->pm = rt_map_current();
    w->nm = rt_map_next();
    w->nm->nextents = w->nm->nframes = w->nm->npacks = 0;
    w->nm->index = 0;
    size_t pf = w->pm->nframes;
    w->codec = ck->codec;
    size_t csz = w->codec != LZ_CODEC_NONE ? lz_cctx_size(w->codec, ck->level, LZ_FRAME_MAX) : 0;
    void *cmem = csz ? arena_alloc(&ck->arena, csz) : NULL;
    w->newidx = arena_alloc(&ck->arena, (pf + 1) * 4);
    w->live = arena_alloc(&ck->arena, (pf + 1) * 8);
    w->sparse = arena_alloc(&ck->arena, pf + 1);
    w->psorted = arena_alloc(&ck->arena, (pf + 1) * 4);
    w->nf_idx = arena_alloc(&ck->arena, (size_t)w->nm->frames_cap * 4);
    w->nf_off = arena_alloc(&ck->arena, (size_t)w->nm->frames_cap * 8);
    w->stage = arena_alloc(&ck->arena, LZ_FRAME_MAX);
    w->cbuf = arena_alloc(&ck->arena, LZ_FRAME_MAX);
    if (!w->newidx || !w->live || !w->sparse || !w->psorted || !w->nf_idx || !w->nf_off || !w->stage ||
        !w->cbuf || (csz && !cmem)) {
        rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory");
        return -1;
    }
    if (csz && !(w->cctx = lz_cctx_init(cmem, csz, w->codec, ck->level, LZ_FRAME_MAX))) {
        rt_fmt(ck->err, sizeof ck->err, "cannot set up compression");
        return -1;
    }
    memset(w->newidx, 0xff, (pf + 1) * 4);
    memset(w->live, 0, (pf + 1) * 8);
    sort_prev_frames(w->pm, w->psorted);

    int rc = 0;
    if (!ck->planned) {
        /* a forked writer reads the memory itself: readable while it copies
         * (a PROT_NONE region that holds data, say) */
        for (size_t i = 0; i < ck->nregions; i++)
            if (region_stored(&ck->regions[i]) && !(ck->regions[i].prot & PROT_READ))
                lz_sc3(SYS_mprotect, ck->regions[i].start, ck->regions[i].end - ck->regions[i].start, ck->regions[i].prot | PROT_READ);
        rc = plan_all(ck);
    }
    /* what the new checkpoint references of each previous frame: clean runs,
     * and changed pages whose content a previous frame holds (dedup) */
    uint64_t nnew = 0;
    for (size_t k = 0; k < ck->nitems && rc == 0; k++) {
        if (ck->items[k].kind == IT_REF) w->live[ck->items[k].pframe] += ck->items[k].len;
        if (ck->items[k].kind == IT_NEW) nnew += ck->items[k].len / PAGE;
    }
    rt_trace(ck->t0, "writer", "pages planned");
    /* First pass, over the changed pages: what each previous frame is still
     * referenced for decides which frames are sparse.  Without previous
     * frames there is nothing to decide: one pass, and the disk busy sooner. */
    int two_pass = pf > 0;
    struct pgref *pg = rc == 0 && two_pass ? arena_alloc(&ck->arena, (nnew + 1) * sizeof *pg) : NULL;
    if (rc == 0 && two_pass && !pg) rc = rt_fail(w->ck, "out of checkpoint scratch memory", 0);
    for (size_t k = 0, n = 0; k < ck->nitems && rc == 0 && two_pass; k++) {
        const struct rt_item *it = &ck->items[k];
        if (it->kind == IT_NEW)
            for (uint64_t o = 0; o < it->len; o += PAGE) examine_page(w, (const void *)(it->src + o), &pg[n++]);
    }
    for (size_t f = 0; f < pf; f++) w->sparse[f] = w->live[f] * 2 < w->pm->frames[f].raw;
    size_t npg = 0;
    for (size_t i = 0; i < ck->nregions && rc == 0; i++) {
        struct lz_region *r = &ck->regions[i];
        size_t rfirst = w->nm->nextents;
        r->first_extent = (uint32_t)rfirst;
        for (uint32_t k = ck->ritems[i]; k < ck->ritems[i + 1] && rc == 0; k++) {
            const struct rt_item *it = &ck->items[k];
            if (it->kind == IT_ZERO) { rc = emit(w, rfirst, it->addr, it->len, LZ_FRAME_ZERO, 0); continue; }
            if (it->kind == IT_REF && !w->sparse[it->pframe]) {
                long f = use_prev_frame(w, it->pframe);
                rc = f < 0 ? -1 : emit(w, rfirst, it->addr, it->len, (uint32_t)f, it->skip);
                continue;
            }
            /* compared by digest: changed if no previous frame holds it */
            int digest = ck->rdirty[i].digest && two_pass;
            /* memory that changes while we read it: the stack we run on (a fork
             * child or the pause), the runtime's own data, a file's pages read
             * through its mapping: copied once, so the frame's checksum is of
             * the bytes written */
            int moving = ck->rdirty[i].from_content || contains(r, __builtin_frame_address(0)) ||
                         contains(r, &rt) || contains(r, &fj);
            if (it->kind == IT_NEW && !digest) w->changed += it->len;
            for (uint64_t o = 0; o < it->len && rc == 0; o += PAGE) {
                const struct pgref *g = it->kind == IT_NEW && two_pass ? &pg[npg++] : NULL;
                if (digest && g && g->frame == PG_NONE) w->changed += PAGE;
                const char *src = (const char *)(it->src + o);
                int again = it->kind == IT_REF && ck->planned; /* a sparse frame's page, the program running */
                if (again && !(src = prev_frame_data(w, it->pframe))) { rc = -1; break; }
                if (again) src += it->skip + o;
                rc = store_page(w, rfirst, it->addr + o, src, !again && !(moving && it->src == it->addr), it->region_file, g);
            }
        }
        r->nextents = (uint32_t)(w->nm->nextents - rfirst);
    }
    if (rc == 0) rc = flush_frame(w);
    if (w->rf_fd >= 0) lz_sc1(SYS_close, w->rf_fd);
    rt_trace(ck->t0, "writer", "pages stored");
    uint64_t written = w->io ? rt_packio_offset(w->io) : 0;
    if (w->io) {
        if (rc == 0) {
            long e = rt_packio_finish(w->io);
            if (e < 0) rc = rt_fail(w->ck, "cannot write the checkpoint's page data", e);
        } else {
            rt_packio_abort(w->io);
        }
        if (rc < 0) lz_sc1(SYS_unlink, w->pack_path);
    }
    rt_trace(ck->t0, "writer", "pack durable");
    if (rc < 0) return -1;
    if (w->io) w->nm->packs[w->packidx].size = written;
    ck->stored_bytes = written;
    ck->changed_bytes = w->changed;
    ck->data_bytes = 0;
    for (size_t i = 0; i < w->nm->nextents; i++)
        if (w->nm->extents[i].frame != LZ_FRAME_ZERO) ck->data_bytes += w->nm->extents[i].length;
    w->nm->index = ck->index;
    w->nm->tracked = (uint32_t)ck->tracking;
    return 0;
}
