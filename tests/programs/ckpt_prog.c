/* ckpt_prog: a program written for libckpt (1995), unchanged: main renamed
 * ckpt_target, linked with -lckpt only.  A SOLVE-like loop: each iteration
 * builds a matrix A anew, multiplies it by a read-only input vector B a few
 * times into x, and folds x into the result; at the end of the iteration A
 * and x are dead (excluded in two halves, included back whole: calls need
 * not match), then checkpoint_here().
 *
 *   ckpt_prog ITERATIONS
 *
 * prints `iter I ACC` per iteration and `result ACC` at the end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "libckpt.h"

#define N 1024
static uint64_t B[N]; /* the input, read-only once read */

int ckpt_target(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: ckpt_prog ITERATIONS\n"); return 2; }
    int iters = atoi(argv[1]);
    uint64_t *A = malloc(sizeof *A * N * N), *x = malloc(sizeof *x * N);
    if (!A || !x) return 1;
    for (int i = 0; i < N; i++) B[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull + 7;
    exclude_bytes((char *)B, sizeof B, CKPT_READONLY);
    uint64_t acc = 1469598103934665603ull;
    for (int it = 0; it < iters; it++) {
        for (size_t k = 0; k < (size_t)N * N; k++) A[k] = (k + 1) * (uint64_t)(it + 3) ^ (k >> 7);
        for (int rep = 0; rep < 4; rep++)
            for (int r = 0; r < N; r++) {
                uint64_t s = rep ? x[r] : 0;
                for (int c = 0; c < N; c++) s += A[(size_t)r * N + c] * B[c];
                x[r] = s;
            }
        for (int r = 0; r < N; r++) acc = (acc ^ x[r]) * 1099511628211ull;
        printf("iter %d %016llx\n", it, (unsigned long long)acc);
        fflush(stdout);
        exclude_bytes((char *)A, (int)(sizeof *A * N * N / 2), CKPT_DEAD);
        exclude_bytes((char *)A + sizeof *A * N * N / 2, (int)(sizeof *A * N * N / 2), CKPT_DEAD);
        exclude_bytes((char *)x, (int)(sizeof *x * N), CKPT_DEAD);
        checkpoint_here();
        include_bytes((char *)A, (int)(sizeof *A * N * N));
        include_bytes((char *)x, (int)(sizeof *x * N));
    }
    printf("result %016llx\n", (unsigned long long)acc);
    return 0;
}
