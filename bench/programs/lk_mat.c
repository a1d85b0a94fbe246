/* MAT (libckpt's Table 2): C = A x B for N x N doubles, row after row.
 *
 *   lk_mat N [user]
 *
 * A and B are read-only once filled; each row of C is read-only once
 * computed.  User directives (the paper's): exclude_bytes(CKPT_READONLY) for
 * A and B after filling them and for each row of C after computing it.
 * Prints `result X`. */
#include <stdlib.h>

#include "lk_common.h"

int main(int argc, char **argv)
{
    lk_args(&argc, argv);
    if (argc != 2) { fprintf(stderr, "usage: lk_mat N [user]\n"); return 2; }
    size_t n = strtoul(argv[1], NULL, 10);
    double *a = malloc(n * n * sizeof *a), *b = malloc(n * n * sizeof *b), *c = calloc(n * n, sizeof *c);
    if (!a || !b || !c) return 1;
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < n * n; i++) { a[i] = lk_unit(&x); b[i] = lk_unit(&x); }
    if (lk_user) {
        lazarus_exclude(a, n * n * sizeof *a, LAZARUS_READONLY);
        lazarus_exclude(b, n * n * sizeof *b, LAZARUS_READONLY);
    }
    for (size_t i = 0; i < n; i++) {
        double *ci = c + i * n;
        for (size_t k = 0; k < n; k++) {
            double aik = a[i * n + k];
            const double *bk = b + k * n;
            for (size_t j = 0; j < n; j++) ci[j] += aik * bk[j];
        }
        if (lk_user) lazarus_exclude(ci, n * sizeof *ci, LAZARUS_READONLY);
    }
    printf("result %016llx\n", (unsigned long long)lk_fold(1469598103934665603ull, c, n * n * sizeof *c));
    return 0;
}
