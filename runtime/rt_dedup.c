/* The dedup table: pages found by their XXH3-128 digest in a frame of the
 * previous checkpoint or of this one (rt_pages.h). */
#include "rt_pages.h"
#include "codec.h"
#include "hash.h"

/* ------------------------------------------------------------ previous frames */

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

void rt_sort_prev_frames(const struct rt_map *pm, uint32_t *v)
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

/* ------------------------------------------------------------ the table */

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
struct rt_dedup_ent *rt_dedup_victim(const struct writer *w, uint64_t d0, uint64_t d1)
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

/* A previous frame holding this content: its index there, or -1. */
static long dedup_prev(const struct writer *w, uint64_t d0, uint64_t d1, uint32_t *skip)
{
    if (rt.noincr) return -1; /* run --no-incremental: nothing referred to in earlier checkpoints */
    const struct rt_dedup_ent *e = dedup_find(d0, d1);
    if (!e || e->pack == (uint32_t)w->ck->index) return -1;
    long f = find_prev_frame(w, e->pack, e->offset);
    if (f < 0 || e->skip + PAGE > w->pm->frames[f].raw) return -1;
    *skip = e->skip;
    return f;
}

/* A frame of this checkpoint holding this content (being filled, or
 * written already): its index in the new map, or -1. */
long rt_dedup_new(const struct writer *w, uint64_t d0, uint64_t d1, uint32_t *skip)
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
void rt_examine_page(struct writer *w, const void *p, struct pgref *g)
{
    if (lz_is_zero(p, PAGE)) { g->frame = PG_ZERO; return; }
    XXH128_hash_t d = XXH3_128bits(p, PAGE);
    g->d0 = d.low64;
    g->d1 = d.high64;
    long f = dedup_prev(w, g->d0, g->d1, &g->skip);
    g->frame = f < 0 ? PG_NONE : (uint32_t)f;
    if (f >= 0) w->live[f] += PAGE;
}
