/* Bytes of a process's memory from its checkpoint (image_read.h).
 *
 * The layout is the one the restorer fills memory from (docs/format.md,
 * "To read memory"): a region's extents, sorted by address, each naming the
 * raw bytes [skip, skip + length) of a frame, or zeros; pages of an anonymous
 * region no extent covers are zeros.  A frame is read from its pack (the
 * manifest lists every pack it needs, older ones of an incremental chain
 * too), expanded by lz_decompress and checked against its XXH3 as the
 * restorer checks it.  Meant for a few bytes: each frame touched is read
 * whole, once per call. */
#include "image_read.h"
#include "codec.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct reader {
    const char *part_dir;
    const struct lz_image *img;
    char *raw, *in, *work; /* a frame expanded, as stored (in_cap bytes), the decompressor's work area */
    size_t in_cap;
    long cached; /* frame now in raw, -1 none */
    char *why;
    size_t whylen;
};

static const struct lz_region *region_at(const struct lz_image *img, uint64_t a)
{
    size_t lo = 0, hi = img->nregions;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (img->regions[mid].end <= a) lo = mid + 1;
        else hi = mid;
    }
    return lo < img->nregions && img->regions[lo].start <= a ? &img->regions[lo] : NULL;
}

/* The extent of r that holds a, or NULL (a page not stored). */
static const struct lz_extent *extent_at(const struct lz_image *img, const struct lz_region *r, uint64_t a)
{
    size_t lo = r->first_extent, hi = (size_t)r->first_extent + r->nextents;
    if (hi > img->nextents) hi = img->nextents;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (img->extents[mid].addr + img->extents[mid].length <= a) lo = mid + 1;
        else hi = mid;
    }
    const struct lz_extent *x = lo < (size_t)r->first_extent + r->nextents && lo < img->nextents ? &img->extents[lo] : NULL;
    return x && x->addr <= a ? x : NULL;
}

const char *lz_frame_load(int fd, const struct lz_frame *f, char *in, char *raw, void *work, int check_stored)
{
    if (f->codec == LZ_CODEC_NONE) { /* stored as is (the manifest holds stored == raw, sxxh3 of the same bytes) */
        if (lz_pread_all(fd, raw, f->raw, (off_t)f->offset) < 0) return "cannot be read";
        uint64_t h = lz_hash_fast(raw, f->raw);
        return h != f->xxh3 || (check_stored && h != f->sxxh3) ? "fails its checksum" : NULL;
    }
    if (lz_pread_all(fd, in, f->stored, (off_t)f->offset) < 0) return "cannot be read";
    if (check_stored && lz_hash_fast(in, f->stored) != f->sxxh3) return "fails its checksum";
    if (lz_decompress((int)f->codec, in, f->stored, raw, f->raw, work, lz_dctx_size()) < 0) return "does not expand";
    return lz_hash_fast(raw, f->raw) != f->xxh3 ? "fails its checksum" : NULL;
}

/* Frame f expanded and checked in rd->raw: 0, or -1 having said why. */
static int load_frame(struct reader *rd, uint32_t f)
{
    if (rd->cached == (long)f) return 0;
    rd->cached = -1;
    const struct lz_image *img = rd->img;
    const struct lz_frame *fr = &img->frames[f];
    if (fr->pack >= img->npacks || fr->raw > LZ_FRAME_MAX || fr->stored > lz_codec_bound((int)fr->codec, LZ_FRAME_MAX)) {
        snprintf(rd->why, rd->whylen, "frame %u of the manifest is out of range", f);
        return -1;
    }
    if (fr->codec != LZ_CODEC_NONE && fr->stored > rd->in_cap) {
        char *in = realloc(rd->in, fr->stored);
        if (!in) { snprintf(rd->why, rd->whylen, "out of memory"); return -1; }
        rd->in = in;
        rd->in_cap = fr->stored;
    }
    const char *rel = lz_str(img, img->packs[fr->pack].path);
    char path[LZ_PATH_MAX + 600];
    snprintf(path, sizeof path, "%s/%s", rd->part_dir, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) { snprintf(rd->why, rd->whylen, "cannot open %s: %s", path, strerror(errno)); return -1; }
    const char *what = lz_frame_load(fd, fr, rd->in, rd->raw, rd->work, 0);
    int shorter = what && !strcmp(what, "cannot be read") && errno == ENODATA;
    close(fd);
    if (what) {
        snprintf(rd->why, rd->whylen, "page data %s%s (frame %u at offset %" PRIu64 " of %s)", what,
                 shorter ? ": the pack is shorter" : "", f, fr->offset, path);
        return -1;
    }
    rd->cached = (long)f;
    return 0;
}

/* The part of [a, a + n) in one region and one extent (or one stretch of no
 * extent), into out: the bytes done (> 0), 0 not held, -1 damaged. */
static long read_piece(struct reader *rd, uint64_t a, size_t n, char *out)
{
    const struct lz_image *img = rd->img;
    const struct lz_region *r = region_at(img, a);
    if (!r) { snprintf(rd->why, rd->whylen, "0x%" PRIx64 " is in no memory region of the checkpoint", a); return 0; }
    if (r->end - a < n) n = (size_t)(r->end - a);
    if (r->kind == LZ_R_VDSO || r->kind == LZ_R_FILE_SHARED) {
        snprintf(rd->why, rd->whylen, "0x%" PRIx64 " is in %s, which the checkpoint does not store", a,
                 r->kind == LZ_R_VDSO ? "the vDSO" : "a shared file mapping");
        return 0;
    }
    const struct lz_extent *x = extent_at(img, r, a);
    if (!x) {
        /* up to the next extent: not stored */
        const struct lz_extent *next = NULL;
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents && e < img->nextents && !next; e++)
            if (img->extents[e].addr > a) next = &img->extents[e];
        if (next && next->addr - a < n) n = (size_t)(next->addr - a);
        if (r->kind == LZ_R_FILE_PRIVATE) { /* the file's own bytes, not the checkpoint's */
            snprintf(rd->why, rd->whylen, "0x%" PRIx64 " is an unchanged page of the file %s, which the checkpoint does not store",
                     a, lz_str(img, r->path));
            return 0;
        }
        memset(out, 0, n); /* anonymous memory never written */
        return (long)n;
    }
    uint64_t off = a - x->addr;
    if (x->length - off < n) n = (size_t)(x->length - off);
    if (x->frame == LZ_FRAME_ZERO) { memset(out, 0, n); return (long)n; }
    if (x->frame >= img->nframes) { snprintf(rd->why, rd->whylen, "an extent at 0x%" PRIx64 " names no frame", x->addr); return -1; }
    if (load_frame(rd, x->frame) < 0) return -1;
    if ((uint64_t)x->skip + off + n > img->frames[x->frame].raw) {
        snprintf(rd->why, rd->whylen, "the extent at 0x%" PRIx64 " lies past its frame", x->addr);
        return -1;
    }
    memcpy(out, rd->raw + x->skip + off, n);
    return (long)n;
}

int lz_image_read(const char *part_dir, const struct lz_image *img, uint64_t addr, void *buf, size_t len, char *why, size_t whylen)
{
    if (addr + len < addr) { snprintf(why, whylen, "0x%" PRIx64 " is in no memory region of the checkpoint", addr); return LZ_NOT_HELD; }
    /* memory the program excluded is not the program's at the checkpoint (zeros, or not there) */
    for (size_t i = 0; i < img->nexcl; i++)
        if (img->excl[i].kind == LZ_EXCL_DEAD && img->excl[i].start < addr + len && addr < img->excl[i].end) {
            snprintf(why, whylen, "0x%" PRIx64 " is in memory the program excluded from its checkpoints", addr);
            return LZ_NOT_HELD;
        }
    struct reader rd = {part_dir, img, malloc(LZ_FRAME_MAX), NULL, malloc(lz_dctx_size()), 0, -1, why, whylen};
    int rc = 0;
    if (!rd.raw || !rd.work) { snprintf(why, whylen, "out of memory"); rc = -1; }
    for (size_t done = 0; rc == 0 && done < len;) {
        long n = read_piece(&rd, addr + done, len - done, (char *)buf + done);
        if (n <= 0) rc = n < 0 ? -1 : LZ_NOT_HELD;
        else done += (size_t)n;
    }
    free(rd.raw);
    free(rd.in);
    free(rd.work);
    return rc;
}
