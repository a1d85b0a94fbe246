/* Checksums: XXH3-64 from libxxhash, inlined so the runtime (loaded into
 * arbitrary programs) and the static restorer carry no extra shared library. */
#ifndef LZ_HASH_H
#define LZ_HASH_H
#define XXH_INLINE_ALL
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#include <stddef.h>
#include <stdint.h>

static inline uint64_t lz_hash(const void *p, size_t n) { return XXH3_64bits(p, n); }
/* The same value, with AVX2 where the CPU has it (hash_fast.c; not in the
 * runtime, which hashes little). */
uint64_t lz_hash_fast(const void *p, size_t n);
#endif
