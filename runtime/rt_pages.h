/* Which pages a checkpoint stores, and storing them: private to the three
 * files that do it (rt.h declares what the rest of the runtime calls).
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
 * twice the data they need.
 *
 * Who owns what:
 *   rt_plan.c    in the pause: the dirty scan, the regions compared by
 *                digest (huge pages, mappings tracked late), and the plan:
 *                runs of pages (items) clean, zero or new, copied in the
 *                pause in copy mode, read from pagemap in a forked writer
 *   rt_dedup.c   the dedup table (4-way set-associative, in the shared
 *                map), the previous frames sorted to find an entry's frame,
 *                the first pass over a page (zero, or held by a frame)
 *   rt_frames.c  the writer: the new map's frames and extents, filling,
 *                compressing and writing frames, coalescing sparse frames */
#ifndef LZ_RT_PAGES_H
#define LZ_RT_PAGES_H
#include "rt.h"
#include "rt_map.h"

#define PAGE 4096ull
#define PENDING_SLOTS 512 /* > pages per frame */

static inline int region_stored(const struct lz_region *r)
{
    /* a System V segment's content is in the IPC section (rt_sysv.c) */
    return r->kind == LZ_R_ANON || r->kind == LZ_R_FILE_PRIVATE || (r->kind == LZ_R_SHARED_ANON && !(r->flags & LZ_RF_SYSV));
}

static inline int contains(const struct lz_region *r, const void *p)
{
    return (uint64_t)p >= r->start && (uint64_t)p < r->end;
}

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

struct pend { uint64_t d0, d1; uint32_t skip, used; };
struct rt_window { uint64_t start, end; }; /* an old frame's range, stored again whole (rt_windows.c) */

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
    struct rt_window *win; size_t nwin; long cur_win; /* by address; the window of the frame being filled, -1 */
    char *pull; uint64_t pull_len; uint64_t pulled;   /* copy mode: the pulled-in pages, in store order */
};

static inline uint32_t pend_slot(uint64_t d0) { return (uint32_t)(d0 % PENDING_SLOTS); }

/* A page's digest and what the first pass found for it. */
struct pgref { uint64_t d0, d1; uint32_t frame, skip; };
#define PG_ZERO 0xfffffffeu
#define PG_NONE 0xffffffffu

/* rt_frames.c: copy mode, a previous frame read back from its pack (checked). */
const char *rt_prev_frame_data(struct writer *w, uint32_t f);

/* rt_windows.c: once the sparse frames are chosen, their ranges (and in copy
 * mode the pages to pull in, read back); the window holding an address, or
 * -1; whether a run meets one; the next pulled-in page's bytes. */
int rt_windows_plan(struct writer *w, size_t pf);
long rt_window_of(const struct writer *w, uint64_t a);
int rt_window_overlaps(const struct writer *w, uint64_t a, uint64_t len);
const char *rt_window_pulled(struct writer *w, const struct rt_item *it, uint64_t o);
void rt_windows_done(struct writer *w);

/* rt_plan.c: in a forked writer, every region from pagemap. */
int rt_plan_all(struct rt_ckpt *ck);

/* rt_dedup.c */
void rt_sort_prev_frames(const struct rt_map *pm, uint32_t *v);
struct rt_dedup_ent *rt_dedup_victim(const struct writer *w, uint64_t d0, uint64_t d1);
long rt_dedup_new(const struct writer *w, uint64_t d0, uint64_t d1, uint32_t *skip);
void rt_examine_page(struct writer *w, const void *p, struct pgref *g);
#endif
