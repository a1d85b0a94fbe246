/* Memory exclusion (libckpt's user directives, §3.1 of its paper): the table
 * of excluded byte ranges, kept by lazarus_exclude/lazarus_include from any
 * thread, and what a checkpoint makes of it (rt_exclude.h). */
#include "rt_exclude.h"
#include "rt_pages.h"
#include "rt_dirty.h"
#include <errno.h>
#include <sched.h>
#include <string.h>

#define EXCL_CAP 4096

/* Sorted by address, disjoint.  In the runtime's own memory, so the table
 * comes back with the program after a restart as it was at the checkpoint. */
static struct lz_exclusion table[EXCL_CAP], scratch[EXCL_CAP];
static size_t ntable;
static int used;
static int lock;
static int check = -1; /* LAZARUS_CHECK_EXCLUSIONS=1, read once */

int rt_excl_used(void) { return used; }

size_t rt_excl_table(const struct lz_exclusion **v)
{
    *v = table;
    return ntable;
}

/* Changes take the lock inside rt_enter: a checkpoint asked for meanwhile
 * waits until the table is whole again (the pause reads it unlocked). */
static void take(void)
{
    rt_enter();
    while (__atomic_exchange_n(&lock, 1, __ATOMIC_ACQUIRE)) sched_yield();
}

static void give(void)
{
    __atomic_store_n(&lock, 0, __ATOMIC_RELEASE);
    rt_leave();
}

/* [a,b) taken out of every range (a range across it is cut in two). */
static void cut(uint64_t a, uint64_t b)
{
    size_t n = 0;
    for (size_t i = 0; i < ntable; i++) {
        const struct lz_exclusion *e = &table[i];
        if (e->end <= a || e->start >= b) { scratch[n++] = *e; continue; }
        if (e->start < a) { scratch[n] = *e; scratch[n++].end = a; }
        if (e->end > b) { scratch[n] = *e; scratch[n++].start = b; }
    }
    memcpy(table, scratch, n * sizeof *table);
    ntable = n;
}

static int range_of(const void *addr, size_t len, uint64_t *a, uint64_t *b)
{
    *a = (uint64_t)addr;
    *b = *a + len;
    if (*b < *a) { errno = EINVAL; return -1; }
    return 0;
}

/* Later calls win byte by byte: an include need not match an exclude. */
RT_API int lazarus_rt_exclude(void *addr, size_t len, int how)
{
    uint64_t a, b;
    if ((how != LZ_EXCL_DEAD && how != LZ_EXCL_READONLY) || range_of(addr, len, &a, &b) < 0) { errno = EINVAL; return -1; }
    if (a == b) return 0;
    take();
    int rc = 0;
    if (ntable + 2 > EXCL_CAP) {
        errno = ENOMEM;
        rc = -1;
    } else {
        cut(a, b);
        size_t k = 0;
        while (k < ntable && table[k].start < a) k++;
        memmove(&table[k + 1], &table[k], (ntable - k) * sizeof *table);
        table[k] = (struct lz_exclusion){a, b, (uint32_t)how, 0, 0};
        ntable++;
        used = 1;
    }
    give();
    return rc;
}

RT_API int lazarus_rt_include(void *addr, size_t len)
{
    uint64_t a, b;
    if (range_of(addr, len, &a, &b) < 0) return -1;
    if (a == b) return 0;
    take();
    int rc = 0;
    if (ntable + 1 > EXCL_CAP) { errno = ENOMEM; rc = -1; }
    else cut(a, b);
    give();
    return rc;
}

/* ------------------------------------------------------- in the pause */

static int sealed(const struct lz_exclusion *e, const struct rt_map *pm)
{
    return e->kind == LZ_EXCL_READONLY && e->stored_at && pm->index >= e->stored_at;
}

static void warn_write(const struct lz_exclusion *e, uint64_t page)
{
    char msg[200];
    int n = rt_fmt(msg, sizeof msg,
                   "lazarus: the program wrote into memory it declared read-only: bytes 0x%llx-0x%llx (%llu bytes; "
                   "page 0x%llx written); stored again\n",
                   (unsigned long long)e->start, (unsigned long long)e->end, (unsigned long long)(e->end - e->start),
                   (unsigned long long)page);
    lz_sc3(SYS_write, 2, msg, n);
}

/* The first sealed range at or after address a's range, by binary search. */
static size_t first_ending_after(uint64_t a)
{
    size_t lo = 0, hi = ntable;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (table[mid].end <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

void rt_excl_pause(struct rt_ckpt *ck)
{
    if (!ntable) return;
    const struct rt_map *pm = rt_map_current();
    if (check < 0) {
        const char *c = rt_env("LAZARUS_CHECK_EXCLUSIONS");
        check = c && *c == '1';
    }
    /* the dirty tracker's word on each page of a stored read-only range */
    if (check && ck->tracking && pm->tracked) {
        for (size_t i = 0; i < ck->nregions; i++) {
            const struct rt_region_dirty *rd = &ck->rdirty[i];
            if (rd->all) continue;
            const struct rt_dirty_range *d = (const struct rt_dirty_range *)ck->dirty + rd->first;
            for (uint32_t k = 0; k < rd->n; k++)
                for (size_t x = first_ending_after(d[k].start); x < ntable && table[x].start < d[k].end; x++) {
                    struct lz_exclusion *e = &table[x];
                    if (!sealed(e, pm) || e->stored_at == ck->index) continue;
                    warn_write(e, d[k].start > e->start ? d[k].start : e->start & ~(PAGE - 1));
                    e->stored_at = 0; /* stored by this checkpoint, referred to after */
                }
        }
    }
    /* read-only bytes not yet in a committed checkpoint: this one stores them */
    for (size_t i = 0; i < ntable; i++)
        if (table[i].kind == LZ_EXCL_READONLY && !sealed(&table[i], pm)) table[i].stored_at = ck->index;
}

/* ------------------------------------------------------- the plan */

/* What a page is, as the exclusions say. */
enum { P_ASIS, P_DEAD, P_RO, P_PARTLY_DEAD };

static int classify(size_t k, uint64_t page, const struct rt_map *pm)
{
    uint64_t dead = 0, ro = 0, end = page + PAGE;
    for (; k < ntable && table[k].start < end; k++) {
        uint64_t lo = table[k].start > page ? table[k].start : page, hi = table[k].end < end ? table[k].end : end;
        if (hi <= lo) continue;
        if (table[k].kind == LZ_EXCL_DEAD) dead += hi - lo;
        else if (sealed(&table[k], pm)) ro += hi - lo;
    }
    if (dead == PAGE) return P_DEAD;
    if (dead) return P_PARTLY_DEAD;
    return ro == PAGE ? P_RO : P_ASIS;
}

struct split {
    void *pl; rt_push_fn fn; const struct rt_map *pm;
    uint64_t addr; int kind; uint32_t pframe, skip; int file; int64_t delta;
};

static int asis(const struct split *s, uint64_t a, uint64_t b)
{
    if (b <= a) return 0;
    return s->fn(s->pl, a, b - a, s->kind, s->pframe, s->kind == IT_REF ? s->skip + (uint32_t)(a - s->addr) : 0, s->file,
                 s->delta, 0);
}

/* Pages [a,b) wholly read-only and stored before: what the previous map holds
 * there, written since or not; nothing where it held no data then. */
static int stored_copy(const struct split *s, uint64_t a, uint64_t b)
{
    if (s->kind != IT_NEW) return asis(s, a, b);
    const struct rt_map *pm = s->pm;
    size_t lo = 0, hi = pm->nextents;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (pm->extents[mid].addr + pm->extents[mid].length <= a) lo = mid + 1;
        else hi = mid;
    }
    for (size_t k = lo; k < pm->nextents && pm->extents[k].addr < b; k++) {
        const struct lz_extent *x = &pm->extents[k];
        uint64_t l = x->addr > a ? x->addr : a, h = x->addr + x->length < b ? x->addr + x->length : b;
        if (h <= l) continue;
        int rc = x->frame == LZ_FRAME_ZERO ? s->fn(s->pl, l, h - l, IT_ZERO, 0, 0, s->file, 0, 0)
                                           : s->fn(s->pl, l, h - l, IT_REF, x->frame, x->skip + (uint32_t)(l - x->addr), s->file, 0, 0);
        if (rc < 0) return rc;
    }
    return 0;
}

static int whole(const struct split *s, int cls, uint64_t a, uint64_t b)
{
    switch (cls) {
    case P_DEAD: /* nothing; in a file mapping zeros, not the file's bytes */
        return s->file ? s->fn(s->pl, a, b - a, IT_ZERO, 0, 0, s->file, 0, 0) : 0;
    case P_RO: return stored_copy(s, a, b);
    case P_PARTLY_DEAD: /* one page, stored from a copy (rt_excl_zero) */
        return s->kind == IT_ZERO ? asis(s, a, b) : s->fn(s->pl, a, PAGE, IT_NEW, 0, 0, s->file, s->delta, RT_ITEM_ZEROED);
    default: return asis(s, a, b);
    }
}

int rt_excl_split(void *pl, rt_push_fn fn, const struct rt_map *pm, uint64_t addr, uint64_t len, int kind,
                  uint32_t pframe, uint32_t skip, int file, int64_t delta)
{
    struct split s = {pl, fn, pm, addr, kind, pframe, skip, file, delta};
    uint64_t a = addr, b = addr + len;
    int rc = 0;
    while (a < b && rc == 0) {
        size_t k = first_ending_after(a);
        if (k == ntable || table[k].start >= b) return asis(&s, a, b);
        uint64_t first = table[k].start & ~(PAGE - 1);
        if (first > a) {
            if ((rc = asis(&s, a, first)) < 0) break;
            a = first;
        }
        /* whole pages inside this one range go together */
        uint64_t inner = table[k].end & ~(PAGE - 1);
        if (inner > b) inner = b;
        if (table[k].start <= a && inner > a) {
            int cls = table[k].kind == LZ_EXCL_DEAD ? P_DEAD : sealed(&table[k], pm) ? P_RO : P_ASIS;
            rc = whole(&s, cls, a, inner);
            a = inner;
            continue;
        }
        rc = whole(&s, classify(k, a, pm), a, a + PAGE);
        a += PAGE;
    }
    return rc;
}

/* ------------------------------------------------------- in the writer */

int rt_excl_zero(struct rt_ckpt *ck)
{
    for (size_t i = 0; i < ck->nitems; i++) {
        struct rt_item *it = &ck->items[i];
        if (!(it->pad & RT_ITEM_ZEROED)) continue;
        char *copy = arena_alloc(&ck->arena, PAGE);
        if (!copy) return rt_fail(ck, "out of checkpoint scratch memory", 0);
        memcpy(copy, (const void *)it->src, PAGE);
        for (size_t k = first_ending_after(it->addr); k < ntable && table[k].start < it->addr + PAGE; k++) {
            if (table[k].kind != LZ_EXCL_DEAD) continue;
            uint64_t lo = table[k].start > it->addr ? table[k].start : it->addr;
            uint64_t hi = table[k].end < it->addr + PAGE ? table[k].end : it->addr + PAGE;
            if (hi > lo) memset(copy + (lo - it->addr), 0, hi - lo);
        }
        it->src = (uint64_t)copy;
    }
    return 0;
}
