/* cell: libckpt's CELL workload (Plank et al., "Libckpt", USENIX 1995, Table 2):
 * a cellular automaton that rewrites its whole grid every step.
 *
 *   cell N        (under `lazarus run`; driven over stdin)
 *
 * Two N x N grids of bytes (the current one and the next), the first filled
 * with pseudo-random bytes.  A step computes every cell of the next grid from
 * the cell and its four neighbours in the current one (a torus):
 *     next = (n + s + e + w + 3 * c + 1) mod 256
 * and swaps the grids.  The rule keeps random data random (bit 0 is a linear
 * XOR rule), so zero pages and deduplication play no part.  Prints
 * "ready BYTES" (both grids), then for each line "steps K" on stdin runs K
 * steps and prints "done step=T seconds=S checksum=X".  "quit" exits. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: cell N\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10);
    uint8_t *cur = malloc(n * n), *next = malloc(n * n);
    if (!cur || !next) { fprintf(stderr, "cell: out of memory\n"); return 2; }
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < n * n; i += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        memcpy(cur + i, &x, n * n - i < 8 ? n * n - i : 8);
    }
    memset(next, 0, n * n);
    printf("ready %zu\n", 2 * n * n);
    fflush(stdout);

    size_t step = 0;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        size_t k;
        if (sscanf(line, "steps %zu", &k) == 1) {
            double t0 = mono_s();
            for (size_t s = 0; s < k; s++, step++) {
                for (size_t i = 0; i < n; i++) {
                    const uint8_t *up = cur + ((i + n - 1) % n) * n, *mid = cur + i * n, *dn = cur + ((i + 1) % n) * n;
                    uint8_t *out = next + i * n;
                    out[0] = (uint8_t)(up[0] + dn[0] + mid[n - 1] + mid[1] + 3 * mid[0] + 1);
                    for (size_t j = 1; j + 1 < n; j++)
                        out[j] = (uint8_t)(up[j] + dn[j] + mid[j - 1] + mid[j + 1] + 3 * mid[j] + 1);
                    out[n - 1] = (uint8_t)(up[n - 1] + dn[n - 1] + mid[n - 2] + mid[0] + 3 * mid[n - 1] + 1);
                }
                uint8_t *t = cur; cur = next; next = t;
            }
            uint64_t sum = 0;
            for (size_t i = 0; i < n * n; i += 4096) sum += cur[i];
            printf("done step=%zu seconds=%.6f checksum=%llu\n", step, mono_s() - t0, (unsigned long long)sum);
        } else if (!strncmp(line, "quit", 4)) {
            return 0;
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
