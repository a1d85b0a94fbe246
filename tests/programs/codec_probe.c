/* codec_probe: exercises common/codec.c for tests/test_codec.py.
 *
 * Build:  gcc -O2 -Wall -Icommon -Iinclude tests/programs/codec_probe.c common/codec.c -lzstd -llz4
 *         (-DPROBE_STATIC -static-pie ... -l:libzstd.a -l:liblz4.a for the static variant,
 *          which has no malloc counter: glibc's static malloc cannot be interposed)
 *
 * Modes (exit status 0 = all checks passed, 1 = a check failed, 2 = usage):
 *   roundtrip KIND SPEC [SIZE...]   KIND random|zero|sci|text; SIZE in bytes (default
 *                                   4 KiB, 64 KiB, 1 MiB, 8 MiB)
 *   tiers                           zstd contexts at every level and max_input tier
 *   iszero                          lz_is_zero on many lengths/offsets/positions
 *   parse SPEC                      prints "ok CODEC LEVEL" or "err MESSAGE"
 *   corrupt SPEC trunc|dlen|flip|garbage
 *   nomalloc SPEC [BIGGEST]         counts malloc/calloc/realloc/memalign calls made
 *                                   during compress/decompress (must be 0); inputs of
 *                                   4 KiB, 64 KiB and BIGGEST (default 8 MiB) bytes
 *   sizes                           context sizes
 *   stack SPEC                      stack bytes used by lz_compress/lz_decompress
 *   bench [MIB]                     throughput and ratio (default 256 MiB per data kind)
 * Every buffer handed to the codec is mmap'ed so that its end is followed by a
 * PROT_NONE page: an overrun (read of src, write of dst) crashes the probe.
 * Random data comes from LAZARUS_TEST_SEED (default 20240611). */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <lz4.h>
#include <zstd.h>

#include "codec.h"

#define MAXIN (8u << 20)
#define PAGE 4096u

static int failures;
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            fflush(stdout);                                                                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------ malloc counter */
#ifndef PROBE_STATIC
static volatile long n_alloc;
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);
void *malloc(size_t n) { n_alloc++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { n_alloc++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { n_alloc++; return __libc_realloc(p, n); }
void free(void *p) { __libc_free(p); }
void *memalign(size_t a, size_t n) { n_alloc++; return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { n_alloc++; return __libc_memalign(a, n); }
void *valloc(size_t n) { n_alloc++; return __libc_memalign(PAGE, n); }
int posix_memalign(void **out, size_t a, size_t n)
{
    n_alloc++;
    void *p = __libc_memalign(a, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
#endif

/* ------------------------------------------------------------------ helpers */
static uint64_t rng_state;
static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void seed(uint64_t salt)
{
    const char *s = getenv("LAZARUS_TEST_SEED");
    rng_state = (s ? strtoull(s, NULL, 10) : 20240611ull) * 1000003ull + salt;
}

/* A region of n usable bytes whose end is followed by a PROT_NONE page; data
 * of length k is placed at end(r) - k so that the guard follows it directly. */
struct region {
    unsigned char *map, *end;
    size_t maplen;
};

static struct region region_new(size_t n)
{
    size_t body = (n + PAGE - 1) / PAGE * PAGE;
    struct region r;
    r.maplen = body + PAGE;
    r.map = mmap(NULL, r.maplen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r.map == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    if (mprotect(r.map + body, PAGE, PROT_NONE)) {
        perror("mprotect");
        exit(1);
    }
    r.end = r.map + body;
    return r;
}

static void region_free(struct region *r) { munmap(r->map, r->maplen); }
static unsigned char *at_end(struct region *r, size_t k) { return r->end - k; }

static void *mapmem(size_t n)
{
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

static const char *words[] = {"checkpoint", "restart", "page", "region", "the", "of", "memory",
                              "lazarus", "signal", "0x7ffd", "thread", "=", " ", "\n", "42",
                              "extent", "zstd", "struct", "{", "}", ";", "NULL", "return"};

/* Fills buf with data of the given kind.  "sci": a realistic scientific heap,
 * each 4 KiB page either all zero or 512 random doubles in [0,1) (page 0 is
 * never zero, page 1 always is); "text": words from a small vocabulary. */
static int fill(const char *kind, unsigned char *buf, size_t len)
{
    if (!strcmp(kind, "random")) {
        for (size_t i = 0; i < len; i += 8) {
            uint64_t v = rnd();
            memcpy(buf + i, &v, len - i < 8 ? len - i : 8);
        }
    } else if (!strcmp(kind, "zero")) {
        memset(buf, 0, len);
    } else if (!strcmp(kind, "sci")) {
        for (size_t pg = 0; pg * PAGE < len; pg++) {
            size_t off = pg * PAGE, n = len - off < PAGE ? len - off : PAGE;
            int zero = pg == 0 ? 0 : pg == 1 ? 1 : (int)(rnd() & 1);
            if (zero) {
                memset(buf + off, 0, n);
                continue;
            }
            for (size_t i = 0; i + 8 <= n; i += 8) {
                double d = (double)(rnd() >> 11) * 0x1.0p-53;
                memcpy(buf + off + i, &d, 8);
            }
        }
    } else if (!strcmp(kind, "text")) {
        size_t i = 0;
        while (i < len) {
            const char *w = words[rnd() % (sizeof words / sizeof words[0])];
            size_t n = strlen(w);
            if (n > len - i)
                n = len - i;
            memcpy(buf + i, w, n);
            i += n;
        }
    } else {
        return -1;
    }
    return 0;
}

static int parse_or_die(const char *spec, int *codec, int *level)
{
    char err[256];
    if (lz_codec_parse(spec, codec, level, err, sizeof err)) {
        fprintf(stderr, "codec_probe: %s\n", err);
        exit(2);
    }
    return 0;
}

static struct lz_cctx *make_cctx(int codec, int level, size_t maxin)
{
    size_t n = lz_cctx_size(codec, level, maxin);
    if (!n) {
        fprintf(stderr, "codec_probe: lz_cctx_size(%d, %d, %zu) = 0\n", codec, level, maxin);
        exit(1);
    }
    /* deliberately misaligned: lz_cctx_init must cope with any alignment */
    unsigned char *m = mapmem(n + 3);
    struct lz_cctx *c = lz_cctx_init(m + 3, n, codec, level, maxin);
    if (!c) {
        fprintf(stderr, "codec_probe: lz_cctx_init failed\n");
        exit(1);
    }
    CHECK(lz_cctx_init(m + 3, n - 1, codec, level, maxin) == NULL, "init with too little memory");
    /* init again for real (the failed init above must not matter) */
    c = lz_cctx_init(m + 3, n, codec, level, maxin);
    return c;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* -------------------------------------------------------------- roundtrip -- */
static int one_roundtrip(const char *kind, const char *spec, int codec, struct lz_cctx *c, void *work,
                         size_t worksize, size_t len)
{
    struct region rs = region_new(len), rd = region_new(len), ro = region_new(len);
    unsigned char *src = at_end(&rs, len), *dst = at_end(&rd, len), *out = at_end(&ro, len);
    fill(kind, src, len);
    int zero = lz_is_zero(src, len);
    double t0 = now();
    size_t r = lz_compress(c, src, len, dst, len); /* a dst of len bytes is always enough */
    double t1 = now();
    CHECK(r != (size_t)-1, "%s %s len=%zu: lz_compress error", kind, spec, len);
    if (r == (size_t)-1)
        goto out;
    CHECK(r < len, "%s %s len=%zu: result %zu not smaller", kind, spec, len, r);
    /* the same with a dst of the worst-case bound gives the same answer */
    if (codec != LZ_CODEC_NONE) {
        size_t b = lz_codec_bound(codec, len);
        CHECK(b >= len, "bound %zu < len %zu", b, len);
        struct region rb = region_new(b);
        size_t r2 = lz_compress(c, src, len, at_end(&rb, b), b);
        CHECK(r2 == r, "%s %s len=%zu: cap=bound gives %zu, cap=len gives %zu", kind, spec, len, r2, r);
        region_free(&rb);
    }
    memset(out, 0xAA, len);
    int dc = r ? codec : LZ_CODEC_NONE;
    const void *stored = r ? (const void *)dst : (const void *)src;
    size_t slen = r ? r : len;
    /* the stored bytes are read from the end of a guarded region too */
    struct region rss = region_new(slen);
    memcpy(at_end(&rss, slen), stored, slen);
    double t2 = now();
    int d = lz_decompress(dc, at_end(&rss, slen), slen, out, len, work, worksize);
    double t3 = now();
    CHECK(d == 0, "%s %s len=%zu: lz_decompress(%s) failed", kind, spec, len, lz_codec_name(dc));
    CHECK(memcmp(src, out, len) == 0, "%s %s len=%zu: data differs after round trip", kind, spec, len);
    region_free(&rss);

    int want_zero = !strcmp(kind, "zero");
    CHECK(zero == want_zero, "%s len=%zu: lz_is_zero = %d", kind, len, zero);
    if (codec != LZ_CODEC_NONE) {
        if (!strcmp(kind, "random"))
            CHECK(r == 0, "%s %s len=%zu: random data compressed to %zu", kind, spec, len, r);
        if (want_zero)
            CHECK(r > 0 && r * 50 <= len, "%s %s len=%zu: zeros compressed to %zu only", kind, spec, len, r);
        if (!strcmp(kind, "sci") && len >= 2 * PAGE)
            CHECK(r > 0 && r < len * 3 / 4, "%s %s len=%zu: half-zero heap compressed to %zu", kind, spec,
                  len, r);
        if (!strcmp(kind, "text"))
            CHECK(r > 0 && r < len * 3 / 5, "%s %s len=%zu: text compressed to %zu", kind, spec, len, r);
    } else {
        CHECK(r == 0, "none must store raw, returned %zu", r);
    }
    if (want_zero) { /* and the ZERO codec itself */
        memset(out, 0xAA, len);
        CHECK(lz_decompress(LZ_CODEC_ZERO, NULL, 0, out, len, NULL, 0) == 0, "ZERO decompress");
        CHECK(lz_is_zero(out, len), "ZERO decompress did not zero-fill");
    }
    printf("roundtrip kind=%s spec=%s len=%zu stored=%zu (%s) ratio=%.3f compress=%.0fMB/s "
           "decompress=%.0fMB/s\n",
           kind, spec, len, slen, lz_codec_name(dc), (double)len / (double)(slen ? slen : 1),
           (double)len / 1e6 / (t1 - t0 + 1e-9), (double)len / 1e6 / (t3 - t2 + 1e-9));
out:
    region_free(&rs);
    region_free(&rd);
    region_free(&ro);
    return 0;
}

static int mode_roundtrip(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    const char *kind = argv[2], *spec = argv[3];
    int codec, level;
    parse_or_die(spec, &codec, &level);
    size_t sizes[64], n = 0;
    for (int i = 4; i < argc && n < 64; i++)
        sizes[n++] = strtoull(argv[i], NULL, 0);
    if (!n) {
        size_t def[] = {4096, 65536, 1u << 20, MAXIN};
        for (n = 0; n < 4; n++)
            sizes[n] = def[n];
    }
    size_t maxin = 0;
    for (size_t i = 0; i < n; i++)
        maxin = sizes[i] > maxin ? sizes[i] : maxin;
    struct lz_cctx *c = make_cctx(codec, level, maxin);
    size_t ws = lz_dctx_size();
    unsigned char *work = mapmem(ws + 1) + 1; /* misaligned on purpose */
    unsigned char tmp[8];
    if (fill(kind, tmp, sizeof tmp))
        return 2;
    seed(1);
    for (size_t i = 0; i < n; i++)
        one_roundtrip(kind, spec, codec, c, work, ws, sizes[i]);
    /* inputs larger than max_input are refused */
    struct region big = region_new(maxin + 8);
    CHECK(lz_compress(c, at_end(&big, maxin + 8), maxin + 8, big.map, maxin + 8) == (size_t)-1,
          "input above max_input accepted");
    region_free(&big);
    return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ tiers -- */
/* zstd picks its parameters by input size (rows <= 16 KiB, <= 128 KiB,
 * <= 256 KiB, larger); a context sized for max_input must serve every input
 * size up to max_input, at every level. */
static int mode_tiers(void)
{
    size_t maxins[] = {4096, 16384, 16392, 131072, 131080, 262144, 262152, 1u << 20};
    struct region rs = region_new(1u << 20), rd = region_new(1u << 20), ro = region_new(1u << 20);
    size_t ws = lz_dctx_size();
    void *work = mapmem(ws);
    seed(7);
    fill("text", rs.map, 1u << 20);
    long n = 0;
    for (int level = LZ_ZSTD_LEVEL_MIN; level <= LZ_ZSTD_LEVEL_MAX; level++) {
        if (!level)
            continue;
        for (size_t m = 0; m < sizeof maxins / sizeof maxins[0]; m++) {
            size_t mi = maxins[m];
            size_t csize = lz_cctx_size(LZ_CODEC_ZSTD, level, mi);
            unsigned char *mem = mapmem(csize);
            struct lz_cctx *c = lz_cctx_init(mem, csize, LZ_CODEC_ZSTD, level, mi);
            CHECK(c != NULL, "init level %d max_input %zu", level, mi);
            size_t lens[] = {mi, mi / 2 / 8 * 8, 4096, 16384, 16392, 131072, 131080, 262144, 262152};
            for (size_t l = 0; c && l < sizeof lens / sizeof lens[0]; l++) {
                size_t len = lens[l];
                if (len > mi || !len || (level >= 16 && len > 262152)) /* (slow; see roundtrip) */
                    continue;
                unsigned char *src = at_end(&rs, len);
                size_t r = lz_compress(c, src, len, rd.map, len);
                n++;
                CHECK(r != (size_t)-1 && r != 0, "level %d max_input %zu len %zu: lz_compress returned %zd",
                      level, mi, len, (ssize_t)r);
                if (r && r != (size_t)-1)
                    CHECK(lz_decompress(LZ_CODEC_ZSTD, rd.map, r, at_end(&ro, len), len, work, ws) == 0 &&
                              !memcmp(at_end(&ro, len), src, len),
                          "level %d max_input %zu len %zu: round trip", level, mi, len);
            }
            munmap(mem, csize);
        }
    }
    printf("tiers: %ld compressions, %s\n", n, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

/* ----------------------------------------------------------------- iszero -- */
static int mode_iszero(void)
{
    size_t lens[] = {0, 8, 16, 56, 64, 72, 248, 256, 264, 320, 1000, 4096, 4104, 65536, 1u << 20};
    struct region r = region_new((1u << 20) + 64);
    seed(2);
    for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
        for (size_t off = 0; off < 16; off += 3) { /* unaligned starts too */
            size_t len = lens[li];
            unsigned char *p = at_end(&r, len + off) + off; /* misaligned by off, guard at p+len */
            memset(r.map, 0, (size_t)(r.end - r.map));
            CHECK(lz_is_zero(p, len) == 1, "zeros len=%zu off=%zu", len, off);
            if (!len)
                continue;
            size_t pos[] = {0, 1, 7, 8, 63, 64, 255, 256, len / 2, len - 8, len - 1, rnd() % len};
            for (size_t k = 0; k < sizeof pos / sizeof pos[0]; k++) {
                if (pos[k] >= len)
                    continue;
                for (int bit = 0; bit < 8; bit += 7) {
                    p[pos[k]] = (unsigned char)(1u << bit);
                    CHECK(lz_is_zero(p, len) == 0, "len=%zu off=%zu byte %zu set", len, off, pos[k]);
                    p[pos[k]] = 0;
                }
            }
            unsigned char *q = r.map + off; /* bytes around the range do not count */
            q[len] = 1;
            if (off)
                q[-1] = 1;
            CHECK(lz_is_zero(q, len) == 1, "len=%zu off=%zu byte next to range", len, off);
            q[len] = 0;
            if (off)
                q[-1] = 0;
        }
    }
    printf("iszero: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ parse -- */
static int mode_parse(const char *spec)
{
    int codec = -99, level = -99;
    char err[512];
    memset(err, 'X', sizeof err);
    if (lz_codec_parse(spec, &codec, &level, err, sizeof err) == 0) {
        printf("ok %s %d\n", lz_codec_name(codec), level);
        return 0;
    }
    printf("err %s\n", err);
    /* tiny buffers truncate and stay terminated */
    char small[6];
    memset(small, 'X', sizeof small);
    lz_codec_parse(spec, &codec, &level, small, sizeof small);
    if (memchr(small, 0, sizeof small) == NULL || strncmp(small, err, 5) != 0) {
        printf("FAIL truncated message\n");
        return 1;
    }
    lz_codec_parse(spec, &codec, &level, NULL, 0); /* must not crash */
    return 3;
}

/* ---------------------------------------------------------------- corrupt -- */
static int mode_corrupt(const char *spec, const char *what)
{
    int codec, level;
    if (!strcmp(spec, "zero")) {
        codec = LZ_CODEC_ZERO;
        level = 0;
    } else {
        parse_or_die(spec, &codec, &level);
    }
    seed(3);
    size_t ws = lz_dctx_size();
    unsigned char *work = mapmem(ws);
    size_t lens[] = {3 * PAGE, 64 * PAGE};
    long tried = 0, detected = 0;
    for (size_t li = 0; li < 2; li++) {
        size_t dlen = lens[li];
        struct region rs = region_new(dlen), rc = region_new(dlen);
        unsigned char *src = at_end(&rs, dlen), *comp = rc.map;
        /* half text, half random doubles: both literals and matches */
        fill("text", src, dlen / 2);
        fill("sci", src + dlen / 2, dlen - dlen / 2);
        size_t slen;
        if (codec == LZ_CODEC_NONE) {
            memcpy(comp, src, dlen);
            slen = dlen;
        } else if (codec == LZ_CODEC_ZERO) {
            memset(src, 0, dlen);
            slen = 0;
        } else {
            struct lz_cctx *c = make_cctx(codec, level, dlen);
            slen = lz_compress(c, src, dlen, comp, dlen);
            if (slen == 0 || slen == (size_t)-1) {
                printf("FAIL: test data did not compress (%zu)\n", slen);
                return 1;
            }
        }
        struct region rin = region_new(2 * dlen + 4096), rout = region_new(4 * dlen + 8192);
        unsigned char *out = at_end(&rout, dlen);
        /* sanity: the intact data decompresses */
        memcpy(at_end(&rin, slen), comp, slen);
        CHECK(lz_decompress(codec, at_end(&rin, slen), slen, out, dlen, work, ws) == 0 &&
                  memcmp(out, src, dlen) == 0,
              "intact %s data (dlen %zu) does not decompress", spec, dlen);

        if (!strcmp(what, "trunc")) {
            if (codec == LZ_CODEC_ZERO) { /* ZERO stores nothing: any stored byte is an error */
                for (size_t k = 1; k < 64; k++)
                    CHECK(lz_decompress(codec, at_end(&rin, k), k, out, dlen, work, ws) == -1,
                          "ZERO with %zu stored bytes accepted", k);
                tried += 63;
                detected += 63;
            }
            for (size_t k = 0; k < slen; k++) {
                /* every length near both ends, a sample in between */
                if (k > 64 && k + 64 < slen && rnd() % 16)
                    continue;
                memcpy(at_end(&rin, k), comp, k);
                int rc2 = lz_decompress(codec, at_end(&rin, k), k, out, dlen, work, ws);
                tried++;
                detected += rc2 == -1;
                CHECK(rc2 == -1, "%s truncated to %zu of %zu bytes accepted", spec, k, slen);
            }
        } else if (!strcmp(what, "dlen")) {
            size_t bad[] = {0, 1, 8, dlen - 1, dlen + 1, dlen - 8, dlen + 8, dlen - PAGE, dlen + PAGE,
                            dlen / 2, 2 * dlen, 4 * dlen};
            memcpy(at_end(&rin, slen), comp, slen);
            for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
                if (codec == LZ_CODEC_ZERO) /* any length of zeros is valid */
                    break;
                unsigned char *o = at_end(&rout, bad[k]); /* guard right after o+bad[k] */
                int rc2 = lz_decompress(codec, at_end(&rin, slen), slen, o, bad[k], work, ws);
                tried++;
                detected += rc2 == -1;
                CHECK(rc2 == -1, "%s with dlen %zu instead of %zu accepted", spec, bad[k], dlen);
            }
            /* other bad arguments */
            CHECK(lz_decompress(7, at_end(&rin, slen), slen, out, dlen, work, ws) == -1, "codec 7");
            CHECK(lz_decompress(-1, at_end(&rin, slen), slen, out, dlen, work, ws) == -1, "codec -1");
            if (codec == LZ_CODEC_ZSTD) {
                CHECK(lz_decompress(codec, at_end(&rin, slen), slen, out, dlen, work, ws - 65) == -1,
                      "work area too small accepted");
                CHECK(lz_decompress(codec, at_end(&rin, slen), slen, out, dlen, NULL, 0) == -1,
                      "no work area accepted");
                /* trailing bytes after the frame */
                unsigned char *in = at_end(&rin, slen + 4);
                memcpy(in, comp, slen);
                memcpy(in + slen, comp, 4); /* another magic number */
                CHECK(lz_decompress(codec, in, slen + 4, out, dlen, work, ws) == -1, "trailing bytes");
                /* two frames of half the size each */
                struct lz_cctx *c = make_cctx(codec, level, dlen);
                struct region r2 = region_new(2 * dlen);
                size_t a = lz_compress(c, src, dlen / 2, r2.map, dlen);
                size_t b = lz_compress(c, src + dlen / 2, dlen - dlen / 2, r2.map + a, dlen);
                if (a && b && a != (size_t)-1 && b != (size_t)-1) {
                    CHECK(lz_decompress(codec, r2.map, a + b, out, dlen, work, ws) == -1,
                          "two concatenated frames accepted");
                }
                region_free(&r2);
            }
        } else if (!strcmp(what, "flip")) {
            unsigned char *in = at_end(&rin, slen);
            if (codec == LZ_CODEC_ZERO) {
                printf("flip: nothing stored for ZERO\n");
            }
            /* every bit of the first 24 bytes (headers), then random multi-byte damage */
            for (size_t pos = 0; pos < slen && pos < 24; pos++) {
                for (int bit = 0; bit < 8; bit++) {
                    memcpy(in, comp, slen);
                    in[pos] ^= (unsigned char)(1u << bit);
                    int rc2 = lz_decompress(codec, in, slen, out, dlen, work, ws);
                    tried++;
                    detected += rc2 == -1;
                    CHECK(rc2 == -1 || rc2 == 0, "result %d", rc2);
                }
            }
            for (int it = 0; it < 1500 && slen; it++) {
                memcpy(in, comp, slen);
                int nflip = 1 + (int)(rnd() % 4);
                for (int f = 0; f < nflip; f++)
                    in[rnd() % slen] ^= (unsigned char)(1 + rnd() % 255);
                if (it % 10 == 0) { /* a run of garbage */
                    size_t at = rnd() % slen, n = 1 + rnd() % 32;
                    for (size_t q = at; q < at + n && q < slen; q++)
                        in[q] = (unsigned char)rnd();
                }
                int rc2 = lz_decompress(codec, in, slen, out, dlen, work, ws);
                tried++;
                detected += rc2 == -1;
                CHECK(rc2 == -1 || rc2 == 0, "result %d", rc2);
            }
        } else if (!strcmp(what, "garbage")) {
            for (int it = 0; it < 3000; it++) {
                size_t k = rnd() % 2048, dl = rnd() % 2 ? dlen : rnd() % (2 * dlen);
                unsigned char *in = at_end(&rin, k);
                for (size_t q = 0; q < k; q++)
                    in[q] = (unsigned char)rnd();
                if (k >= 4 && slen >= 4 && it % 2 == 0) { /* a valid-looking header */
                    size_t h = 4 + rnd() % 12;
                    h = h > k ? k : h;
                    memcpy(in, comp, h > slen ? slen : h);
                }
                unsigned char *o = at_end(&rout, dl);
                int rc2 = lz_decompress(codec, in, k, o, dl, work, ws);
                tried++;
                detected += rc2 == -1;
                CHECK(rc2 == -1 || rc2 == 0, "result %d", rc2);
            }
        } else {
            return 2;
        }
        region_free(&rs);
        region_free(&rc);
        region_free(&rin);
        region_free(&rout);
    }
    printf("corrupt spec=%s what=%s tried=%ld rejected=%ld accepted=%ld (no crash, no overrun)\n", spec,
           what, tried, detected, tried - detected);
    return failures ? 1 : 0;
}

/* --------------------------------------------------------------- nomalloc -- */
static int mode_nomalloc(const char *spec, size_t biggest)
{
#ifdef PROBE_STATIC
    (void)spec;
    (void)biggest;
    printf("nomalloc: not available in the static probe\n");
    return 2;
#else
    int codec, level;
    parse_or_die(spec, &codec, &level);
    if (biggest < 65536 || biggest > MAXIN)
        return 2;
    seed(4);
    const char *kinds[] = {"random", "zero", "sci", "text"};
    size_t lens[] = {4096, 65536, biggest};
    struct region rs[4][3], rd[4][3];
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 3; l++) {
            rs[k][l] = region_new(lens[l]);
            rd[k][l] = region_new(lens[l]);
            fill(kinds[k], at_end(&rs[k][l], lens[l]), lens[l]);
        }
    struct region ro = region_new(biggest);
    size_t ws = lz_dctx_size();
    void *work = mapmem(ws);
    size_t csize = lz_cctx_size(codec, level, MAXIN);
    void *cmem = mapmem(csize);
    struct lz_cctx *c;
    size_t stored[4][3];
    int nok = 0;

    long before = n_alloc;
    c = lz_cctx_init(cmem, csize, codec, level, MAXIN);
    long after_init = n_alloc;
    for (int rep = 0; rep < 2; rep++)
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 3; l++)
                stored[k][l] = lz_compress(c, at_end(&rs[k][l], lens[l]), lens[l], rd[k][l].map, lens[l]);
    long after_compress = n_alloc;
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 3; l++) {
            size_t s = stored[k][l];
            unsigned char *out = at_end(&ro, lens[l]);
            if (s && s != (size_t)-1) {
                nok += lz_decompress(codec, rd[k][l].map, s, out, lens[l], work, ws) == 0;
                lz_decompress(codec, rd[k][l].map, s / 2, out, lens[l], work, ws);     /* truncated */
                lz_decompress(codec, rd[k][l].map, s, out, lens[l] - 8, work, ws);     /* bad dlen */
                rd[k][l].map[s / 2] ^= 0x55;                                          /* corrupt */
                lz_decompress(codec, rd[k][l].map, s, out, lens[l], work, ws);
            } else {
                nok += lz_decompress(LZ_CODEC_NONE, at_end(&rs[k][l], lens[l]), lens[l], out, lens[l], work,
                                     ws) == 0;
            }
            nok += lz_decompress(LZ_CODEC_ZERO, NULL, 0, out, lens[l], work, ws) == 0;
            nok += lz_is_zero(out, lens[l]);
        }
    long after_decompress = n_alloc;
    /* the counter does see the libraries' allocations */
    ZSTD_CCtx *zc = ZSTD_createCCtx();
    ZSTD_freeCCtx(zc);
    long after_zstd = n_alloc;
    LZ4_stream_t *ls = LZ4_createStream();
    LZ4_freeStream(ls);
    long after_lz4 = n_alloc;

    printf("nomalloc spec=%s init=%ld compress=%ld decompress=%ld (control: ZSTD_createCCtx=%ld "
           "LZ4_createStream=%ld) ok=%d/36\n",
           spec, after_init - before, after_compress - after_init, after_decompress - after_compress,
           after_zstd - after_decompress, after_lz4 - after_zstd, nok);
    CHECK(c != NULL, "init");
    CHECK(after_init == before, "lz_cctx_init allocated");
    CHECK(after_compress == after_init, "lz_compress allocated");
    CHECK(after_decompress == after_compress, "lz_decompress allocated");
    CHECK(after_zstd > after_decompress, "malloc counter does not see libzstd");
    CHECK(after_lz4 > after_zstd, "malloc counter does not see liblz4");
    CHECK(nok == 36, "round trips failed");
    return failures ? 1 : 0;
#endif
}

/* ------------------------------------------------------------------ sizes -- */
static int mode_sizes(void)
{
    printf("dctx %zu\n", lz_dctx_size());
    printf("cctx none %zu\n", lz_cctx_size(LZ_CODEC_NONE, 0, MAXIN));
    printf("cctx lz4 %zu\n", lz_cctx_size(LZ_CODEC_LZ4, 0, MAXIN));
    for (int l = LZ_ZSTD_LEVEL_MIN; l <= LZ_ZSTD_LEVEL_MAX; l++)
        if (l)
            printf("cctx zstd:%d %zu (4 KiB max input: %zu)\n", l, lz_cctx_size(LZ_CODEC_ZSTD, l, MAXIN),
                   lz_cctx_size(LZ_CODEC_ZSTD, l, 4096));
    CHECK(lz_cctx_size(LZ_CODEC_ZERO, 0, MAXIN) == 0, "ZERO is not a compressor");
    CHECK(lz_cctx_size(LZ_CODEC_ZSTD, 20, MAXIN) == 0, "level 20");
    CHECK(lz_cctx_size(LZ_CODEC_ZSTD, -8, MAXIN) == 0, "level -8");
    CHECK(lz_cctx_size(9, 0, MAXIN) == 0, "codec 9");
    CHECK(lz_codec_bound(LZ_CODEC_NONE, 4096) == 4096, "bound none");
    CHECK(lz_codec_bound(LZ_CODEC_ZERO, 4096) == 0, "bound zero");
    CHECK(lz_codec_bound(LZ_CODEC_LZ4, MAXIN) >= MAXIN, "bound lz4");
    CHECK(lz_codec_bound(LZ_CODEC_ZSTD, MAXIN) >= MAXIN, "bound zstd");
    CHECK(!strcmp(lz_codec_name(LZ_CODEC_NONE), "none") && !strcmp(lz_codec_name(LZ_CODEC_ZERO), "zero") &&
              !strcmp(lz_codec_name(LZ_CODEC_LZ4), "lz4") && !strcmp(lz_codec_name(LZ_CODEC_ZSTD), "zstd"),
          "names");
    return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ stack -- */
#define STK (1u << 20)
static ucontext_t uc_main, uc_run;
static struct {
    struct lz_cctx *c;
    unsigned char *src, *dst, *out, *work;
    size_t len, r;
    int codec, d;
    int which; /* 0 compress, 1 decompress */
} job;

static void run_job(void)
{
    if (job.which == 0)
        job.r = lz_compress(job.c, job.src, job.len, job.dst, job.len);
    else
        job.d = lz_decompress(job.codec, job.dst, job.r, job.out, job.len, job.work, lz_dctx_size());
}

static size_t stack_used(unsigned char *stk)
{
    memset(stk, 0xA5, STK);
    getcontext(&uc_run);
    uc_run.uc_stack.ss_sp = stk;
    uc_run.uc_stack.ss_size = STK;
    uc_run.uc_link = &uc_main;
    makecontext(&uc_run, run_job, 0);
    swapcontext(&uc_main, &uc_run);
    size_t i = 0;
    while (i < STK && stk[i] == 0xA5)
        i++;
    return STK - i;
}

static int mode_stack(const char *spec)
{
    int codec, level;
    parse_or_die(spec, &codec, &level);
    seed(5);
    job.len = MAXIN;
    job.codec = codec;
    job.c = make_cctx(codec, level, MAXIN);
    job.src = mapmem(MAXIN);
    job.dst = mapmem(MAXIN);
    job.out = mapmem(MAXIN);
    job.work = mapmem(lz_dctx_size());
    unsigned char *stk = mapmem(STK);
    fill("sci", job.src, MAXIN / 2);
    fill("text", job.src + MAXIN / 2, MAXIN / 2);
    job.which = 0;
    size_t cu = stack_used(stk);
    job.which = 1;
    size_t du = stack_used(stk);
    if (codec == LZ_CODEC_NONE)
        job.r = 0;
    else
        CHECK(job.r && job.r != (size_t)-1 && job.d == 0 && !memcmp(job.src, job.out, MAXIN), "round trip");
    printf("stack spec=%s compress=%zu decompress=%zu bytes\n", spec, cu, du);
    return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ bench -- */
static int mode_bench(size_t mib)
{
    size_t ext = MAXIN, next = (mib << 20) / ext, total = next * ext;
    const char *kinds[] = {"random", "sci", "zero"};
    const char *names[] = {"random bytes", "half zero pages + random doubles", "all zero"};
    const char *specs[] = {"none", "lz4", "zstd:1", "zstd:3"};
    if (!next)
        return 2;
    unsigned char *src = mapmem(total), *comp = mapmem(total), *out = mapmem(ext);
    size_t ws = lz_dctx_size();
    void *work = mapmem(ws);
    size_t *slen = mapmem(next * sizeof *slen);
    int *codecs = mapmem(next * sizeof *codecs);
    memset(comp, 0, total);
    memset(out, 0, ext);
    printf("bench: %zu MiB per data kind in extents of %zu MiB, one thread, MB = 1e6 bytes of input.\n"
           "Each extent goes through the codec (no lz_is_zero test first); one that does not shrink is\n"
           "stored raw (NONE).  Decompression goes into one warm %zu MiB buffer.\n",
           total >> 20, ext >> 20, ext >> 20);
    printf("%-33s %-7s %8s %13s %15s %14s\n", "data", "codec", "ratio", "compress", "decompress", "stored bytes");
    for (int k = 0; k < 3; k++) {
        seed(6);
        fill(kinds[k], src, total);
        for (int s = 0; s < 4; s++) {
            int codec, level;
            parse_or_die(specs[s], &codec, &level);
            struct lz_cctx *c = make_cctx(codec, level, ext);
            size_t stored = 0;
            double t0 = now();
            for (size_t e = 0; e < next; e++) {
                size_t r = lz_compress(c, src + e * ext, ext, comp + e * ext, ext);
                if (r == (size_t)-1) {
                    printf("FAIL compress\n");
                    return 1;
                }
                codecs[e] = r ? codec : LZ_CODEC_NONE;
                slen[e] = r ? r : ext;
                stored += slen[e];
            }
            double t1 = now(), td = 0;
            for (size_t e = 0; e < next; e++) {
                const void *in = codecs[e] == LZ_CODEC_NONE ? src + e * ext : comp + e * ext;
                double a = now();
                int d = lz_decompress(codecs[e], in, slen[e], out, ext, work, ws);
                td += now() - a;
                if (d || memcmp(out, src + e * ext, ext)) {
                    printf("FAIL decompress\n");
                    return 1;
                }
            }
            char cs[32];
            if (codec == LZ_CODEC_NONE)
                snprintf(cs, sizeof cs, "-");
            else
                snprintf(cs, sizeof cs, "%.0f MB/s", (double)total / 1e6 / (t1 - t0));
            printf("%-33s %-7s %8.3f %13s %10.0f MB/s %14zu\n", names[k], specs[s], (double)total / (double)stored,
                   cs, (double)total / 1e6 / td, stored);
        }
        /* what the ZERO codec adds: the test, and the zero-fill on restore */
        size_t nzero = 0;
        double t0 = now();
        for (size_t e = 0; e < next; e++)
            nzero += (size_t)lz_is_zero(src + e * ext, ext);
        double t1 = now();
        for (size_t e = 0; e < next; e++)
            lz_decompress(LZ_CODEC_ZERO, NULL, 0, out, ext, work, ws);
        double t2 = now();
        printf("%-33s %-7s %zu of %zu extents all zero; lz_is_zero %.0f MB/s; ZERO fill %.0f MB/s\n", names[k],
               "(zero)", nzero, next, (double)total / 1e6 / (t1 - t0), (double)total / 1e6 / (t2 - t1));
    }
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        goto usage;
    const char *m = argv[1];
    if (!strcmp(m, "roundtrip")) {
        int r = mode_roundtrip(argc, argv);
        if (r == 2)
            goto usage;
        return r;
    }
    if (!strcmp(m, "tiers"))
        return mode_tiers();
    if (!strcmp(m, "iszero"))
        return mode_iszero();
    if (!strcmp(m, "parse") && argc == 3)
        return mode_parse(argv[2]);
    if (!strcmp(m, "corrupt") && argc == 4)
        return mode_corrupt(argv[2], argv[3]);
    if (!strcmp(m, "nomalloc") && (argc == 3 || argc == 4))
        return mode_nomalloc(argv[2], argc == 4 ? strtoull(argv[3], NULL, 0) : MAXIN);
    if (!strcmp(m, "sizes"))
        return mode_sizes();
    if (!strcmp(m, "stack") && argc == 3)
        return mode_stack(argv[2]);
    if (!strcmp(m, "bench"))
        return mode_bench(argc > 2 ? strtoull(argv[2], NULL, 0) : 256);
usage:
    fprintf(stderr, "usage: codec_probe roundtrip KIND SPEC [SIZE...] | iszero | parse SPEC | corrupt SPEC "
                    "trunc|dlen|flip|garbage | nomalloc SPEC [BIGGEST] | sizes | stack SPEC | bench [MIB]\n");
    return 2;
}
