/* lz_hash_fast(): the XXH3-64 of lz_hash() with xxhash's AVX2 code where the
 * CPU has it (hash.h).  Compiled for that target only and chosen at run time,
 * as xxhash's own xxh_x86dispatch.c does: this build's baseline is SSE2,
 * which hashes a cached buffer about 4 times slower than AVX2 here.  Used
 * where a restart hashes whole frames (the restorer, the frame check): the
 * same function as the writer's, or every restart would fail.  Internal names
 * of xxhash 0.8.1; other versions use lz_hash() alone. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#endif
#include "hash.h"

#if defined(__x86_64__) && defined(__GNUC__) && XXH_VERSION_NUMBER == 801
__attribute__((__target__("avx2"))) static uint64_t hash_avx2(const void *p, size_t n)
{
    if (n <= XXH3_MIDSIZE_MAX) return XXH3_64bits(p, n);
    return XXH3_hashLong_64b_internal(p, n, XXH3_kSecret, sizeof XXH3_kSecret, XXH3_accumulate_512_avx2,
                                      XXH3_scrambleAcc_avx2);
}

uint64_t lz_hash_fast(const void *p, size_t n)
{
    static int avx2 = -1;
    if (avx2 < 0) avx2 = __builtin_cpu_supports("avx2");
    return avx2 ? hash_avx2(p, n) : lz_hash(p, n);
}
#else
uint64_t lz_hash_fast(const void *p, size_t n) { return lz_hash(p, n); }
#endif
