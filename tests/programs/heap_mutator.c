/* heap_mutator: keeps mutating a large heap and a running checksum.
 *
 *   heap_mutator [MIB [ROUNDS [SEED]]]      defaults: 256 MiB, 600 rounds, seed 1
 *
 * Allocates MIB MiB with malloc, fills it from a seeded xorshift64*, then for
 * ROUNDS rounds mutates pseudo-random 64-bit words and folds each new value
 * into a running checksum.  At the end the whole heap is folded in too, so
 * any word that a restart got wrong changes the result.  Output (stdout):
 *
 *   start mib=M rounds=R seed=S
 *   round N/R            (ten times)
 *   checksum <16 hex digits>
 *
 * The output depends only on the arguments, never on timing.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { MUTATIONS_PER_ROUND = 1 << 20 };

static uint64_t rng_state;

static inline uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static inline uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

int main(int argc, char **argv)
{
    unsigned long mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 256;
    unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 0) : 600;
    uint64_t seed = argc > 3 ? strtoull(argv[3], NULL, 0) : 1;
    if (mib == 0 || rounds == 0) {
        fprintf(stderr, "usage: heap_mutator [MIB [ROUNDS [SEED]]]\n");
        return 2;
    }
    size_t nwords = (size_t)mib << 17; /* 1 MiB = 2^17 words */
    uint64_t *heap = malloc(nwords * sizeof *heap);
    if (!heap) {
        perror("malloc");
        return 1;
    }
    rng_state = seed * 0x9e3779b97f4a7c15ull + 0x1234567;
    if (rng_state == 0)
        rng_state = 1;
    for (size_t i = 0; i < nwords; i++)
        heap[i] = rng();

    printf("start mib=%lu rounds=%lu seed=%" PRIu64 "\n", mib, rounds, seed);
    fflush(stdout);

    uint64_t sum = 0;
    unsigned long report = rounds >= 10 ? rounds / 10 : 1;
    for (unsigned long r = 1; r <= rounds; r++) {
        for (unsigned m = 0; m < MUTATIONS_PER_ROUND; m++) {
            uint64_t x = rng();
            size_t idx = (size_t)(x % nwords);
            uint64_t v = heap[idx] * 6364136223846793005ull + (x >> 7) + r;
            heap[idx] = v;
            sum = mix(sum, v);
        }
        if (r % report == 0 || r == rounds) {
            printf("round %lu/%lu\n", r, rounds);
            fflush(stdout);
        }
    }
    for (size_t i = 0; i < nwords; i++)
        sum = mix(sum, heap[i] ^ i);
    printf("checksum %016" PRIx64 "\n", sum);
    fflush(stdout);
    free(heap);
    return 0;
}
