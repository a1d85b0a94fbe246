/* mat: libckpt's MAT workload (Plank et al., "Libckpt", USENIX 1995, Table 2).
 *
 *   mat N         (under `lazarus run`; driven over stdin)
 *
 * C = A x B for N x N matrices of doubles.  A and B are filled with
 * pseudo-random doubles once and only read afterwards; C starts zero (its
 * pages written) and is computed row after row.  Prints "ready BYTES" (the
 * three matrices), then for each line "rows K" on stdin computes the next K
 * rows of C (wrapping to row 0 after the last, so C is rewritten
 * progressively) and prints "done row=R seconds=S checksum=X".  "quit" exits. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_clock.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mat N\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 10);
    double *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b), *c = malloc(n * n * sizeof *c);
    if (!a || !b || !c) { fprintf(stderr, "mat: out of memory\n"); return 2; }
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < n * n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        a[i] = (double)(x >> 11) * 0x1.0p-53;
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        b[i] = (double)(x >> 11) * 0x1.0p-53;
    }
    memset(c, 0, n * n * sizeof *c);
    printf("ready %zu\n", 3 * n * n * sizeof *a);
    fflush(stdout);

    size_t row = 0;
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        size_t k;
        if (sscanf(line, "rows %zu", &k) == 1) {
            double t0 = mono_s(), sum = 0;
            for (size_t r = 0; r < k; r++, row = (row + 1) % n) {
                double *ci = c + row * n;
                const double *ai = a + row * n;
                memset(ci, 0, n * sizeof *ci);
                for (size_t kk = 0; kk < n; kk++) {
                    double aik = ai[kk];
                    const double *bk = b + kk * n;
                    for (size_t j = 0; j < n; j++) ci[j] += aik * bk[j];
                }
                sum += ci[row % n];
            }
            printf("done row=%zu seconds=%.6f checksum=%.6g\n", row, mono_s() - t0, sum);
        } else if (!strncmp(line, "quit", 4)) {
            return 0;
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
