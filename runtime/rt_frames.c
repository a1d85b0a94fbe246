/* The writer: the new map's frames and extents, pages stored into frames
 * that are compressed and appended to the checkpoint's pack, and
 * coalescing, sparse frames of the previous checkpoint stored again
 * (rt_pages.h). */
#include "rt_pages.h"
#include "rt_exclude.h"
#include "rt_packio.h"
#include "codec.h"
#include "hash.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

/* ------------------------------------------------------------ the writer */

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
        struct rt_dedup_ent *e = rt_dedup_victim(w, p->d0, p->d1);
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

/* Copy mode: the program runs on while this writer works, so the clean
 * pages of a sparse frame, stored again, are read back from that frame in
 * its pack rather than from the program's memory. */
const char *rt_prev_frame_data(struct writer *w, uint32_t f)
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
 * written (the program's snapshot or a copy of it), not a reused buffer.
 * In a window (rt_windows.c) the page is stored whatever holds it already:
 * the window's frame holds its range whole, in order. */
static int store_page(struct writer *w, size_t rfirst, uint64_t a, const void *p, int stable, int file,
                      const struct pgref *g)
{
    struct pgref mine;
    long win = w->nwin ? rt_window_of(w, a) : -1;
    if (!g) { rt_examine_page(w, p, &mine); g = &mine; } /* a page of a sparse frame, stored again */
    if (g->frame == PG_ZERO && win < 0) return file ? emit(w, rfirst, a, PAGE, LZ_FRAME_ZERO, 0) : 0;
    if (g->frame != PG_NONE && g->frame != PG_ZERO && !w->sparse[g->frame] && win < 0) {
        long f = use_prev_frame(w, g->frame);
        return f < 0 ? -1 : emit(w, rfirst, a, PAGE, (uint32_t)f, g->skip);
    }
    uint32_t skip;
    long f = win < 0 ? rt_dedup_new(w, g->d0, g->d1, &skip) : -1;
    if (f >= 0) return emit(w, rfirst, a, PAGE, (uint32_t)f, skip);
    /* a window's frame starts and ends with it */
    if (win != w->cur_win && w->spos && flush_frame(w) < 0) return -1;
    w->cur_win = win;
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
    if (g->frame != PG_ZERO) { /* a zero page (in a window) has no digest: not findable */
        uint32_t i = pend_slot(g->d0);
        while (w->pend[i].used) i = (i + 1) % PENDING_SLOTS;
        w->pend[i] = (struct pend){g->d0, g->d1, w->spos, 1};
    }
    int rc = emit(w, rfirst, a, PAGE, w->sframe, w->spos);
    w->spos += PAGE;
    if (rc == 0 && w->spos == LZ_FRAME_MAX) rc = flush_frame(w);
    return rc;
}

/* Which previous frames have their live pages stored again.  A restart reads
 * every frame it uses whole (one checksum per frame), replaced pages too, so
 * what a chain of increments leaves in its old frames is what a restart from
 * its newest checkpoint reads in vain.  Bounded two ways:
 *  - a frame less than half referenced is stored again (libckpt's rule: old
 *    packs stop being needed, `gc` deletes them);
 *  - under `run --compact` (rt.compact), the stale bytes of all frames kept
 *    stay within 1/LZ_STALE_SHARE of the bytes the checkpoint holds: the
 *    sparsest frames go first, by buckets of live share (no sort, no
 *    allocation), until the rest fit; a frame that was one address range is
 *    stored again as that range whole (rt_windows.c).  It costs increments
 *    several times what changed, so it is not the default.
 * A frame stored again costs the writer its live pages (off the pause: read
 * back from the pack in copy mode, from the snapshot in a forked writer). */
#define LZ_STALE_SHARE 16
#define SHARE_BUCKETS 64
static int choose_sparse(struct writer *w, size_t pf, uint64_t nnew)
{
    uint64_t held = nnew * PAGE, stale_kept = 0, stale_in[SHARE_BUCKETS] = {0};
    for (size_t f = 0; f < pf; f++) {
        uint64_t raw = w->pm->frames[f].raw, live = w->live[f] < raw ? w->live[f] : raw;
        w->sparse[f] = live * 2 < raw;
        held += live;
        if (w->sparse[f] || !live) continue;
        stale_kept += raw - live;
        stale_in[live * SHARE_BUCKETS / (raw + 1)] += raw - live;
    }
    if (!rt.compact) return 0; /* the default: an increment writes what changed */
    uint64_t budget = held / LZ_STALE_SHARE;
    /* whole buckets stored again, sparsest first, and of the last one only
     * the frames needed: a chain's frames, aging alike, are then stored
     * again a few at each checkpoint rather than all at once */
    size_t cut = 0;
    uint64_t part = 0; /* in the last bucket: the stale bytes still to free */
    int partial = 0;
    while (cut < SHARE_BUCKETS && stale_kept > budget) {
        if (stale_kept - stale_in[cut] < budget) { part = stale_kept - budget; partial = 1; cut++; break; }
        stale_kept -= stale_in[cut++];
    }
    for (size_t f = 0; f < pf && cut; f++) {
        uint64_t raw = w->pm->frames[f].raw, live = w->live[f] < raw ? w->live[f] : raw;
        if (w->sparse[f] || !live) continue;
        size_t b = (size_t)(live * SHARE_BUCKETS / (raw + 1));
        if (b + 1 < cut || (b + 1 == cut && !partial)) w->sparse[f] = 1;
        else if (b + 1 == cut && part) { w->sparse[f] = 1; part = part > raw - live ? part - (raw - live) : 0; }
    }
    return 0;
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
    rt_sort_prev_frames(w->pm, w->psorted);

    int rc = 0;
    if (!ck->planned) {
        /* a forked writer reads the memory itself: readable while it copies
         * (a PROT_NONE region that holds data, say) */
        for (size_t i = 0; i < ck->nregions; i++)
            if (region_stored(&ck->regions[i]) && !(ck->regions[i].prot & PROT_READ))
                lz_sc3(SYS_mprotect, ck->regions[i].start, ck->regions[i].end - ck->regions[i].start, ck->regions[i].prot | PROT_READ);
        rc = rt_plan_all(ck);
        if (rc == 0) rc = rt_excl_zero(ck); /* partly dead pages: their dead bytes as zeros */
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
            for (uint64_t o = 0; o < it->len; o += PAGE) rt_examine_page(w, (const void *)(it->src + o), &pg[n++]);
    }
    if (rc == 0) rc = choose_sparse(w, pf, nnew);
    if (rc == 0) rc = rt_windows_plan(w, pf);
    size_t npg = 0;
    for (size_t i = 0; i < ck->nregions && rc == 0; i++) {
        struct lz_region *r = &ck->regions[i];
        size_t rfirst = w->nm->nextents;
        r->first_extent = (uint32_t)rfirst;
        for (uint32_t k = ck->ritems[i]; k < ck->ritems[i + 1] && rc == 0; k++) {
            const struct rt_item *it = &ck->items[k];
            if (it->kind == IT_ZERO) { rc = emit(w, rfirst, it->addr, it->len, LZ_FRAME_ZERO, 0); continue; }
            int kept = it->kind == IT_REF && !w->sparse[it->pframe];
            if (kept && !(w->nwin && rt_window_overlaps(w, it->addr, it->len))) {
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
                if (kept && rt_window_of(w, it->addr + o) < 0) { /* beside a window: referenced */
                    long f = use_prev_frame(w, it->pframe);
                    rc = f < 0 ? -1 : emit(w, rfirst, it->addr + o, PAGE, (uint32_t)f, it->skip + (uint32_t)o);
                    continue;
                }
                if (kept) { /* pulled into a window */
                    if (!(src = rt_window_pulled(w, it, o))) { rc = -1; break; }
                    rc = store_page(w, rfirst, it->addr + o, src, 1, it->region_file, NULL);
                    continue;
                }
                int again = it->kind == IT_REF && ck->planned; /* a sparse frame's page, the program running */
                if (again && !(src = rt_prev_frame_data(w, it->pframe))) { rc = -1; break; }
                if (again) src += it->skip + o;
                rc = store_page(w, rfirst, it->addr + o, src, !again && !(moving && it->src == it->addr), it->region_file, g);
            }
        }
        r->nextents = (uint32_t)(w->nm->nextents - rfirst);
    }
    if (rc == 0) rc = flush_frame(w);
    rt_windows_done(w);
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
