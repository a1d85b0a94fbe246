/* SOLVE (libckpt's Table 2): a linear equation solver run on a new system
 * each iteration (Gaussian elimination with partial pivoting, N x N).
 *
 *   lk_solve N ITERATIONS [user]
 *
 * At the end of each iteration the matrix, the right-hand side and the
 * solution are dead (the next iteration builds them anew).  User directives
 * (the paper's): exclude_bytes(CKPT_DEAD) for them, checkpoint_here(),
 * include_bytes.  Prints `result X` (the solutions folded). */
#include <math.h>
#include <stdlib.h>

#include "lk_common.h"

int main(int argc, char **argv)
{
    lk_args(&argc, argv);
    if (argc != 3) { fprintf(stderr, "usage: lk_solve N ITERATIONS [user]\n"); return 2; }
    size_t n = strtoul(argv[1], NULL, 10);
    int iters = atoi(argv[2]);
    double *a = malloc(n * n * sizeof *a), *rhs = malloc(n * sizeof *rhs), *sol = malloc(n * sizeof *sol);
    if (!a || !rhs || !sol) return 1;
    uint64_t h = 1469598103934665603ull;
    for (int it = 0; it < iters; it++) {
        uint64_t x = 0x9e3779b97f4a7c15ull * (uint64_t)(it + 1);
        for (size_t i = 0; i < n * n; i++) a[i] = lk_unit(&x) - 0.5;
        for (size_t i = 0; i < n; i++) { a[i * n + i] += (double)n / 4; rhs[i] = lk_unit(&x); }
        for (size_t k = 0; k < n; k++) {
            size_t p = k;
            for (size_t i = k + 1; i < n; i++)
                if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
            if (p != k) {
                for (size_t j = 0; j < n; j++) { double t = a[k * n + j]; a[k * n + j] = a[p * n + j]; a[p * n + j] = t; }
                double t = rhs[k]; rhs[k] = rhs[p]; rhs[p] = t;
            }
            for (size_t i = k + 1; i < n; i++) {
                double f = a[i * n + k] / a[k * n + k];
                const double *ak = a + k * n;
                double *ai = a + i * n;
                for (size_t j = k; j < n; j++) ai[j] -= f * ak[j];
                rhs[i] -= f * rhs[k];
            }
        }
        for (size_t i = n; i-- > 0;) {
            double s = rhs[i];
            for (size_t j = i + 1; j < n; j++) s -= a[i * n + j] * sol[j];
            sol[i] = s / a[i * n + i];
        }
        h = lk_fold(h, sol, n * sizeof *sol);
        if (lk_user) {
            lazarus_exclude(a, n * n * sizeof *a, LAZARUS_DEAD);
            lazarus_exclude(rhs, n * sizeof *rhs, LAZARUS_DEAD);
            lazarus_exclude(sol, n * sizeof *sol, LAZARUS_DEAD);
            lazarus_checkpoint_here(NULL);
            lazarus_include(a, n * n * sizeof *a);
            lazarus_include(rhs, n * sizeof *rhs);
            lazarus_include(sol, n * sizeof *sol);
        }
    }
    printf("result %016llx\n", (unsigned long long)h);
    return 0;
}
