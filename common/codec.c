/* Compression of checkpoint page data: see codec.h.
 *
 * Nothing here allocates, prints or locks: zstd runs in a static CCtx/DCtx
 * carved out of caller memory (ZSTD_initStaticCCtx/ZSTD_initStaticDCtx, whose
 * custom allocator is "none", so the library fails rather than allocating),
 * LZ4 in a caller-provided state (LZ4_compress_fast_extState).  zstd is never
 * given ZSTD_c_nbWorkers, so it starts no threads and takes no locks. */
#include "codec.h"

#include <limits.h>
#include <stdint.h>
#include <string.h>

#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_initStatic*, ZSTD_estimate* */
#include <lz4.h>
#include <zstd.h>
#include <zstd_errors.h>

#define LZ_ALIGN 64u

struct lz_cctx {
    int codec;
    int level;
    size_t max_input;
    void *engine; /* ZSTD_CCtx * or the LZ4 state */
    size_t engine_size;
};

/* libzstd.a calls these tracing hooks through weak undefined references.  In
 * the LD_PRELOAD runtime such references would be bound by the dynamic linker
 * to whatever the host program exports under these names; hidden stubs bind
 * them here instead (a begin hook returning 0 disables tracing, so the end
 * hooks are never called).  With libzstd.so they are not seen (hidden). */
#define LZ_HIDDEN __attribute__((visibility("hidden")))
LZ_HIDDEN unsigned long long ZSTD_trace_compress_begin(const void *cctx);
LZ_HIDDEN unsigned long long ZSTD_trace_compress_begin(const void *cctx) { (void)cctx; return 0; }
LZ_HIDDEN void ZSTD_trace_compress_end(unsigned long long ctx, const void *trace);
LZ_HIDDEN void ZSTD_trace_compress_end(unsigned long long ctx, const void *trace) { (void)ctx; (void)trace; }
LZ_HIDDEN unsigned long long ZSTD_trace_decompress_begin(const void *dctx);
LZ_HIDDEN unsigned long long ZSTD_trace_decompress_begin(const void *dctx) { (void)dctx; return 0; }
LZ_HIDDEN void ZSTD_trace_decompress_end(unsigned long long ctx, const void *trace);
LZ_HIDDEN void ZSTD_trace_decompress_end(unsigned long long ctx, const void *trace) { (void)ctx; (void)trace; }

static size_t round_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

static void *align_ptr(void *p, size_t a)
{
    return (void *)(((uintptr_t)p + a - 1) & ~(uintptr_t)(a - 1));
}

/* ---------------------------------------------------------------- names -- */

const char *lz_codec_name(int codec)
{
    switch (codec) {
    case LZ_CODEC_NONE: return "none";
    case LZ_CODEC_ZERO: return "zero";
    case LZ_CODEC_LZ4: return "lz4";
    case LZ_CODEC_ZSTD: return "zstd";
    default: return "?";
    }
}

/* Appends s to the message being built in err[0..errlen), always terminated. */
struct msg {
    char *buf;
    size_t cap, len;
};

static void msg_add(struct msg *m, const char *s)
{
    if (!m->cap)
        return;
    while (*s && m->len + 1 < m->cap)
        m->buf[m->len++] = *s++;
    m->buf[m->len] = '\0';
}

static int parse_level(const char *s, int *out)
{
    int neg = 0, v = 0;
    if (*s == '-') {
        neg = 1;
        s++;
    } else if (*s == '+') {
        s++;
    }
    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 1000)
            return -1;
        v = v * 10 + (*s - '0');
    }
    v = neg ? -v : v;
    if (v == 0 || v < LZ_ZSTD_LEVEL_MIN || v > LZ_ZSTD_LEVEL_MAX)
        return -1;
    *out = v;
    return 0;
}

int lz_codec_parse(const char *spec, int *codec, int *level, char *err, size_t errlen)
{
    struct msg m = {err, errlen, 0};
    if (errlen)
        err[0] = '\0';
    if (!spec)
        spec = "";
    if (!strcmp(spec, "none") || !strcmp(spec, "lz4")) {
        *codec = spec[0] == 'n' ? LZ_CODEC_NONE : LZ_CODEC_LZ4;
        *level = 0;
        return 0;
    }
    if (!strcmp(spec, "zstd")) {
        *codec = LZ_CODEC_ZSTD;
        *level = LZ_ZSTD_LEVEL_DEFAULT;
        return 0;
    }
    if (!strncmp(spec, "zstd:", 5)) {
        int v;
        if (parse_level(spec + 5, &v) == 0) {
            *codec = LZ_CODEC_ZSTD;
            *level = v;
            return 0;
        }
        msg_add(&m, "bad zstd level \"");
        msg_add(&m, spec + 5);
        msg_add(&m, "\" in \"");
        msg_add(&m, spec);
        msg_add(&m, "\" (choose 1..19 or -7..-1)");
        return -1;
    }
    msg_add(&m, "unknown compression \"");
    msg_add(&m, spec);
    msg_add(&m, "\" (choose none, lz4, zstd or zstd:LEVEL)");
    return -1;
}

/* ------------------------------------------------------------- is_zero -- */

int lz_is_zero(const void *p, size_t len)
{
    const unsigned char *b = p;
    size_t i = 0;
    /* Most non-zero pages differ from zero in their first bytes. */
    for (; i + 64 <= len && i < 256; i += 64) {
        uint64_t acc = 0;
        for (int k = 0; k < 8; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * k, 8);
            acc |= w;
        }
        if (acc)
            return 0;
    }
    /* Blocks of 256 bytes, a fixed trip count the compiler vectorises. */
    for (; i + 256 <= len; i += 256) {
        uint64_t acc = 0;
        for (int k = 0; k < 32; k++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * k, 8);
            acc |= w;
        }
        if (acc)
            return 0;
    }
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, b + i, 8);
        if (w)
            return 0;
    }
    for (; i < len; i++)
        if (b[i])
            return 0;
    return 1;
}

/* ------------------------------------------------------------- bounds -- */

size_t lz_codec_bound(int codec, size_t len)
{
    switch (codec) {
    case LZ_CODEC_NONE: return len;
    case LZ_CODEC_ZERO: return 0;
    case LZ_CODEC_LZ4:
        if (len > (size_t)LZ4_MAX_INPUT_SIZE)
            return 0;
        return (size_t)LZ4_compressBound((int)len);
    case LZ_CODEC_ZSTD: {
        size_t b = ZSTD_compressBound(len);
        return ZSTD_isError(b) ? 0 : b;
    }
    default: return 0;
    }
}

/* ------------------------------------------------------------ compress -- */

static int zstd_level(int level) { return level ? level : LZ_ZSTD_LEVEL_DEFAULT; }

/* Work space of a static CCtx able to compress any input of up to max_input
 * bytes at level with ZSTD_compressCCtx.  zstd picks its parameters from a
 * table row chosen by the input size (<= 16 KiB, <= 128 KiB, <= 256 KiB,
 * larger) and then shrinks the window to the input size; within a row the
 * memory needed only grows with the input size, but a smaller row may need
 * more than a larger one (ZSTD_estimateCCtxSize takes the same maximum).  So:
 * the maximum over the rows, each at the largest size it can see. */
static size_t zstd_cctx_size(int level, size_t max_input)
{
    static const size_t tiers[] = {16u << 10, 128u << 10, 256u << 10};
    size_t best = 0;
    for (size_t t = 0; t <= sizeof tiers / sizeof tiers[0]; t++) {
        size_t s = t < sizeof tiers / sizeof tiers[0] ? tiers[t] : max_input;
        if (s > max_input)
            s = max_input;
        ZSTD_compressionParameters cp = ZSTD_getCParams(level, s, 0);
        size_t n = ZSTD_estimateCCtxSize_usingCParams(cp);
        if (ZSTD_isError(n))
            return 0;
        if (n > best)
            best = n;
    }
    return best;
}

static size_t engine_size(int codec, int level, size_t max_input)
{
    switch (codec) {
    case LZ_CODEC_NONE: return 0;
    case LZ_CODEC_LZ4:
        if (max_input > (size_t)LZ4_MAX_INPUT_SIZE)
            return 0;
        return (size_t)LZ4_sizeofState();
    case LZ_CODEC_ZSTD:
        if (level < LZ_ZSTD_LEVEL_MIN || level > LZ_ZSTD_LEVEL_MAX || max_input == 0)
            return 0;
        return zstd_cctx_size(zstd_level(level), max_input);
    default: return 0;
    }
}

size_t lz_cctx_size(int codec, int level, size_t max_input)
{
    size_t e = engine_size(codec, level, max_input);
    if (!e && codec != LZ_CODEC_NONE)
        return 0;
    return LZ_ALIGN + round_up(sizeof(struct lz_cctx), LZ_ALIGN) + e;
}

struct lz_cctx *lz_cctx_init(void *mem, size_t memsize, int codec, int level, size_t max_input)
{
    size_t need = lz_cctx_size(codec, level, max_input);
    if (!mem || !need || memsize < need)
        return NULL;
    struct lz_cctx *c = align_ptr(mem, LZ_ALIGN);
    unsigned char *eng = (unsigned char *)c + round_up(sizeof *c, LZ_ALIGN);
    c->codec = codec;
    c->level = codec == LZ_CODEC_ZSTD ? zstd_level(level) : 0;
    c->max_input = max_input;
    c->engine_size = (size_t)((unsigned char *)mem + memsize - eng);
    c->engine = NULL;
    if (codec == LZ_CODEC_ZSTD) {
        c->engine = ZSTD_initStaticCCtx(eng, c->engine_size);
        if (!c->engine)
            return NULL;
    } else if (codec == LZ_CODEC_LZ4) {
        c->engine = eng;
    }
    return c;
}

size_t lz_compress(struct lz_cctx *c, const void *src, size_t len, void *dst, size_t cap)
{
    if (!c || len > c->max_input)
        return (size_t)-1;
    if (len == 0 || c->codec == LZ_CODEC_NONE)
        return 0;
    /* Only results smaller than len are of use. */
    int limited = cap < len - 1; /* dst smaller than what "smaller than len" needs */
    size_t room = limited ? cap : len - 1;
    if (c->codec == LZ_CODEC_LZ4) {
        if (room > INT_MAX)
            room = INT_MAX;
        int n = LZ4_compress_fast_extState(c->engine, src, dst, (int)len, (int)room, 1);
        if (n > 0)
            return (size_t)n;
        return limited ? (size_t)-1 : 0;
    }
    if (c->codec == LZ_CODEC_ZSTD) {
        size_t n = ZSTD_compressCCtx(c->engine, dst, room, src, len, c->level);
        if (!ZSTD_isError(n))
            return n < len ? n : 0;
        if (ZSTD_getErrorCode(n) == ZSTD_error_dstSize_tooSmall)
            return limited ? (size_t)-1 : 0;
        return (size_t)-1;
    }
    return (size_t)-1;
}

/* ---------------------------------------------------------- decompress -- */

size_t lz_dctx_size(void) { return ZSTD_estimateDCtxSize() + LZ_ALIGN; }

int lz_decompress(int codec, const void *src, size_t slen, void *dst, size_t dlen, void *work,
                  size_t worksize)
{
    switch (codec) {
    case LZ_CODEC_NONE:
        if (slen != dlen)
            return -1;
        if (dlen)
            memcpy(dst, src, dlen);
        return 0;
    case LZ_CODEC_ZERO:
        if (slen != 0)
            return -1;
        if (dlen)
            memset(dst, 0, dlen);
        return 0;
    case LZ_CODEC_LZ4: {
        if (slen == 0 || slen > INT_MAX || dlen > INT_MAX)
            return -1;
        int n = LZ4_decompress_safe(src, dst, (int)slen, (int)dlen);
        return n >= 0 && (size_t)n == dlen ? 0 : -1;
    }
    case LZ_CODEC_ZSTD: {
        if (!work || worksize < lz_dctx_size())
            return -1;
        /* Exactly one frame, of the announced content size, covering src. */
        unsigned long long fcs = ZSTD_getFrameContentSize(src, slen);
        if (fcs == ZSTD_CONTENTSIZE_ERROR || fcs == ZSTD_CONTENTSIZE_UNKNOWN || fcs != dlen)
            return -1;
        size_t fsz = ZSTD_findFrameCompressedSize(src, slen);
        if (ZSTD_isError(fsz) || fsz != slen)
            return -1;
        void *w = align_ptr(work, LZ_ALIGN);
        ZSTD_DCtx *d = ZSTD_initStaticDCtx(w, worksize - (size_t)((char *)w - (char *)work));
        if (!d)
            return -1;
        size_t n = ZSTD_decompressDCtx(d, dst, dlen, src, slen);
        return !ZSTD_isError(n) && n == dlen ? 0 : -1;
    }
    default: return -1;
    }
}
