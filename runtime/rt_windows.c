/* Windows: an old frame stored again as the address range it was written
 * for, every page of that range in one new frame (rt_pages.h).
 *
 * A restart places a frame whose pages sit in address order over a range the
 * image covers straight into that range (restorer/restore_fill.c, step 1);
 * every other frame goes through a buffer and is copied out a page at a time,
 * each page faulted in alone: about twice the cost per byte.  The live pages
 * of a sparse frame, stored again among the checkpoint's other pages, land
 * in frames of the second kind: the holes between them are pages that later
 * increments hold.  So when the sparse frame was itself one such range (a
 * first checkpoint's frame: every extent at the same address less skip), the
 * writer stores the whole range again: its live pages, the changed pages
 * there, and the pages later increments hold there ("pulled in"), in one new
 * frame that starts and ends with the range.  The new checkpoint is then
 * mostly frames placed whole, and the increments' frames lose their pages
 * there, become sparse in turn and go.
 *
 * In copy mode (the program runs on) the pulled-in pages are read back from
 * their frames in the packs, each frame once, in frame order, into a staging
 * map made for this checkpoint; a forked writer reads them from its snapshot.
 * Only under `run --compact` (rt.compact), with the bound on stale bytes. */
#include "rt_pages.h"
#include <string.h>
#include <sys/mman.h>

#define NO_BASE ~0ull

static void sift(struct rt_window *v, size_t i, size_t n)
{
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && v[c + 1].start > v[c].start) c++;
        if (v[i].start >= v[c].start) return;
        struct rt_window t = v[i]; v[i] = v[c]; v[c] = t;
        i = c;
    }
}

static void sort_windows(struct rt_window *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;) sift(v, i, n);
    for (size_t k = n; k > 1; k--) {
        struct rt_window t = v[0]; v[0] = v[k - 1]; v[k - 1] = t;
        sift(v, 0, k - 1);
    }
}

long rt_window_of(const struct writer *w, uint64_t a)
{
    size_t lo = 0, hi = w->nwin;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (w->win[m].end <= a) lo = m + 1; else hi = m; }
    return lo < w->nwin && w->win[lo].start <= a ? (long)lo : -1;
}

int rt_window_overlaps(const struct writer *w, uint64_t a, uint64_t len)
{
    size_t lo = 0, hi = w->nwin;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (w->win[m].end <= a) lo = m + 1; else hi = m; }
    return lo < w->nwin && w->win[lo].start < a + len;
}

/* A page the new checkpoint would reference in a frame kept, inside a window. */
static int pulled_in(const struct writer *w, const struct rt_item *it, uint64_t o)
{
    return it->kind == IT_REF && !w->sparse[it->pframe] && rt_window_of(w, it->addr + o) >= 0;
}

/* Copy mode: at most this much pulled in per checkpoint (the staging map is
 * memory of the program's process or its writer's); the windows past it wait
 * for a later checkpoint, their frames' live pages stored again alone. */
#define PULL_MAX (128ull << 20)

static void cap_pulled(struct writer *w)
{
    struct rt_ckpt *ck = w->ck;
    uint64_t *in = arena_alloc(&ck->arena, (w->nwin + 1) * 8), total = 0;
    if (!in) { w->nwin = 0; return; }
    memset(in, 0, (w->nwin + 1) * 8);
    for (size_t k = 0; k < ck->nitems; k++) {
        const struct rt_item *it = &ck->items[k];
        if (it->kind != IT_REF || w->sparse[it->pframe] || !rt_window_overlaps(w, it->addr, it->len)) continue;
        for (uint64_t o = 0; o < it->len; o += PAGE) {
            long i = rt_window_of(w, it->addr + o);
            if (i >= 0) in[i] += PAGE;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < w->nwin; i++)
        if (total + in[i] <= PULL_MAX) { total += in[i]; w->win[n++] = w->win[i]; }
    w->nwin = n;
}

/* Copy mode: the pulled-in pages, in the order the writer stores them, read
 * back from their frames (each once) into a map of their own. */
static int stage_pulled(struct writer *w, size_t pf)
{
    struct rt_ckpt *ck = w->ck;
    size_t n = 0;
    for (size_t k = 0; k < ck->nitems; k++)
        if (ck->items[k].kind == IT_REF && !w->sparse[ck->items[k].pframe] && rt_window_overlaps(w, ck->items[k].addr, ck->items[k].len))
            for (uint64_t o = 0; o < ck->items[k].len; o += PAGE) n += pulled_in(w, &ck->items[k], o);
    if (!n) return 0;
    uint32_t *at = arena_alloc(&ck->arena, (pf + 1) * 4), *order = arena_alloc(&ck->arena, n * 4);
    uint32_t *frame = arena_alloc(&ck->arena, n * 4), *skip = arena_alloc(&ck->arena, n * 4);
    if (!at || !order || !frame || !skip) return rt_fail(ck, "out of checkpoint scratch memory", 0);
    long m = lz_sc6(SYS_mmap, 0, n * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m < 0 && m >= -LZ_MAX_ERRNO) return rt_fail(ck, "cannot map the pages to store again", m);
    w->pull = (char *)m;
    w->pull_len = n * PAGE;
    /* the same walk as the writer's (regions, then their items, in order) */
    size_t j = 0;
    memset(at, 0, (pf + 1) * 4);
    for (size_t i = 0; i < ck->nregions; i++)
        for (uint32_t k = ck->ritems[i]; k < ck->ritems[i + 1]; k++) {
            const struct rt_item *it = &ck->items[k];
            if (it->kind != IT_REF || w->sparse[it->pframe] || !rt_window_overlaps(w, it->addr, it->len)) continue;
            for (uint64_t o = 0; o < it->len && j < n; o += PAGE)
                if (pulled_in(w, it, o)) { frame[j] = it->pframe; skip[j] = it->skip + (uint32_t)o; at[it->pframe + 1]++; j++; }
        }
    n = j;
    for (size_t f = 1; f <= pf; f++) at[f] += at[f - 1];
    for (size_t i = 0; i < n; i++) order[at[frame[i]]++] = (uint32_t)i;
    for (size_t k = 0; k < n; k++) {
        uint32_t i = order[k];
        const char *src = rt_prev_frame_data(w, frame[i]);
        if (!src) return -1;
        memcpy(w->pull + (size_t)i * PAGE, src + skip[i], PAGE);
    }
    return 0;
}

int rt_windows_plan(struct writer *w, size_t pf)
{
    struct rt_ckpt *ck = w->ck;
    w->cur_win = -1;
    if (!pf || !rt.compact) return 0; /* by default a sparse frame's live pages only */
    uint64_t *base = arena_alloc(&ck->arena, (pf + 1) * 8);
    w->win = arena_alloc(&ck->arena, (pf + 1) * sizeof *w->win);
    if (!base || !w->win) return rt_fail(ck, "out of checkpoint scratch memory", 0);
    /* where each frame was written: the one address less skip of all its
     * extents, if there is one (NO_BASE - 1: there is not) */
    for (size_t f = 0; f < pf; f++) base[f] = NO_BASE;
    for (size_t k = 0; k < ck->nitems; k++) {
        const struct rt_item *it = &ck->items[k];
        if (it->kind != IT_REF) continue;
        uint64_t b = it->addr - it->skip;
        if (base[it->pframe] == NO_BASE) base[it->pframe] = b;
        else if (base[it->pframe] != b) base[it->pframe] = NO_BASE - 1;
    }
    for (size_t f = 0; f < pf; f++)
        if (w->sparse[f] && base[f] < NO_BASE - 1)
            w->win[w->nwin++] = (struct rt_window){base[f], base[f] + w->pm->frames[f].raw};
    sort_windows(w->win, w->nwin);
    size_t n = 0; /* overlapping ones: the first kept */
    for (size_t i = 0; i < w->nwin; i++)
        if (!n || w->win[i].start >= w->win[n - 1].end) w->win[n++] = w->win[i];
    w->nwin = n;
    if (!ck->planned) return 0;
    cap_pulled(w);
    return stage_pulled(w, pf);
}

const char *rt_window_pulled(struct writer *w, const struct rt_item *it, uint64_t o)
{
    if (!w->ck->planned) return (const char *)(it->src + o);
    if (w->pulled * PAGE >= w->pull_len) { rt_fail(w->ck, "the pages to store again ran out", 0); return NULL; }
    return w->pull + w->pulled++ * PAGE;
}

void rt_windows_done(struct writer *w)
{
    if (w->pull) lz_sc2(SYS_munmap, w->pull, w->pull_len);
    w->pull = NULL;
}
