/* Compression of checkpoint page data (extents of struct lz_extent).
 *
 * Used by three callers with different constraints:
 *  - the LD_PRELOAD runtime, possibly inside the checkpoint signal handler or
 *    in a child forked from a multi-threaded program: after lz_cctx_init()
 *    nothing here calls malloc, stdio or takes a lock (zstd and LZ4 run in
 *    caller-provided memory; zstd is never asked for worker threads);
 *  - the static restorer (-static-pie): lz_decompress() with a caller-provided
 *    work area, no allocation either;
 *  - the CLI: lz_codec_parse() for --compress=SPEC, lz_codec_name().
 *
 * Link with -lzstd -llz4 (or -l:libzstd.a -l:liblz4.a for static binaries).
 *
 * Thread safety: a struct lz_cctx is used by one thread at a time; the other
 * functions are reentrant (lz_decompress with one work area per caller).
 */
#ifndef LZ_CODEC_H
#define LZ_CODEC_H
#include <stddef.h>

#include "format.h" /* enum lz_codec, the codec id stored in struct lz_extent */

#define LZ_CODEC_COUNT 4

#define LZ_ZSTD_LEVEL_MIN (-7)
#define LZ_ZSTD_LEVEL_MAX 19
#define LZ_ZSTD_LEVEL_DEFAULT 3

/* Parses "none", "lz4", "zstd" (level LZ_ZSTD_LEVEL_DEFAULT) or "zstd:LEVEL"
 * (LEVEL 1..19, or a negative fast level down to -7); case-sensitive.  Sets
 * *codec and *level (0 for none and lz4) and returns 0; or returns -1 and
 * writes a one-line message (no trailing newline, truncated to errlen) into
 * err when errlen > 0, e.g.
 *   unknown compression "gzip" (choose none, lz4, zstd or zstd:LEVEL)
 *   bad zstd level "25" in "zstd:25" (choose 1..19 or -7..-1)
 * No malloc, no stdio: safe anywhere. */
int lz_codec_parse(const char *spec, int *codec, int *level, char *err, size_t errlen);

/* "none", "zero", "lz4", "zstd"; "?" for an unknown id. */
const char *lz_codec_name(int codec);

/* 1 if the len bytes at p are all zero, else 0.  Word-at-a-time in blocks the
 * compiler vectorises; stops at the first non-zero 64-byte block.  len should
 * be a multiple of 8 (a tail is handled, more slowly); p needs no alignment. */
int lz_is_zero(const void *p, size_t len);

/* Worst-case stored size of len bytes: len for NONE, 0 for ZERO, the LZ4 or
 * zstd bound otherwise; 0 for an unknown codec or a len LZ4 cannot take.
 * lz_compress never needs more than len - 1 bytes of dst (a result of len
 * bytes or more is reported as 0), so a dst of len bytes is always enough. */
size_t lz_codec_bound(int codec, size_t len);

/* Compression context in caller-provided memory.  codec is LZ_CODEC_NONE,
 * LZ_CODEC_LZ4 or LZ_CODEC_ZSTD (ZERO is not a compressor: test with
 * lz_is_zero first); level is the zstd level (ignored otherwise, 0 = default);
 * max_input is the largest len that will be passed to lz_compress (e.g.
 * LZ_EXTENT_MAX): zstd's work space is sized for it.
 * lz_cctx_size returns 0 for bad arguments.  lz_cctx_init wants at least
 * lz_cctx_size() bytes at mem (any alignment) and returns NULL otherwise;
 * it does not allocate.  There is nothing to free: the memory is the caller's.
 * Sizes on x86-64 with zstd 1.5.4 / lz4 1.9.4 for max_input 8 MiB: lz4 16 KiB,
 * zstd:-7..-1 537 KiB, zstd:1 569 KiB, zstd:3 1.3 MiB, zstd:9 12.5 MiB,
 * zstd:19 81 MiB (tests/programs/codec_probe sizes). */
size_t lz_cctx_size(int codec, int level, size_t max_input);
struct lz_cctx *lz_cctx_init(void *mem, size_t memsize, int codec, int level, size_t max_input);

/* Compresses len bytes (len <= max_input) into dst (cap bytes).  Returns the
 * compressed length (< len); 0 when the result would not be smaller than len
 * (store the data raw with LZ_CODEC_NONE; always 0 for a NONE context or
 * len 0); (size_t)-1 on error (len > max_input, cap < len - 1 and the result
 * did not fit, library error).  Uses no malloc, no stdio, no locks. */
size_t lz_compress(struct lz_cctx *c, const void *src, size_t len, void *dst, size_t cap);

/* Size of the work area lz_decompress needs (zstd's static DCtx, 94 KiB);
 * the work area needs no particular alignment. */
size_t lz_dctx_size(void);

/* Decompresses slen bytes at src, stored with codec, into exactly dlen bytes
 * at dst.  Returns 0, or -1 when the data is corrupt, does not decompress to
 * exactly dlen bytes, codec is unknown or work is too small (ZSTD only; work
 * may be NULL for the other codecs).  Never writes outside [dst, dst+dlen)
 * (the contents of dst are unspecified after a failure), never reads outside
 * [src, src+slen), never crashes on corrupt input.  NONE copies (slen must be
 * dlen), ZERO zero-fills (slen must be 0).  No malloc, no stdio, no locks.
 * Note: only the length is checked; the content of a corrupted stream may
 * decode to dlen wrong bytes: verify struct lz_extent.xxh3 afterwards. */
int lz_decompress(int codec, const void *src, size_t slen, void *dst, size_t dlen, void *work,
                  size_t worksize);
#endif
