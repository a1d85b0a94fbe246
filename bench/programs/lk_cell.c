/* CELL (libckpt's Table 2): a cellular automaton on two N x N byte grids;
 * each generation computes the next grid from the current one (a torus,
 * next = n + s + e + w + 3c + 1 mod 256), then they swap.
 *
 *   lk_cell N GENERATIONS [user]
 *
 * After a generation the previous grid is dead.  User directives (the
 * paper's): exclude_bytes(CKPT_DEAD) for it, checkpoint_here(), include_bytes
 * (the paper also set mintime: bench/libckpt_table2.py passes --mintime).
 * Prints `result X`. */
#include <stdlib.h>

#include "lk_common.h"

int main(int argc, char **argv)
{
    lk_args(&argc, argv);
    if (argc != 3) { fprintf(stderr, "usage: lk_cell N GENERATIONS [user]\n"); return 2; }
    size_t n = strtoul(argv[1], NULL, 10);
    long gens = atol(argv[2]);
    uint8_t *cur = malloc(n * n), *next = malloc(n * n);
    if (!cur || !next) return 1;
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < n * n; i++) cur[i] = (uint8_t)lk_rand(&x);
    memset(next, 0, n * n);
    for (long g = 0; g < gens; g++) {
        for (size_t i = 0; i < n; i++) {
            const uint8_t *up = cur + ((i + n - 1) % n) * n, *mid = cur + i * n, *dn = cur + ((i + 1) % n) * n;
            uint8_t *out = next + i * n;
            out[0] = (uint8_t)(up[0] + dn[0] + mid[n - 1] + mid[1] + 3 * mid[0] + 1);
            for (size_t j = 1; j + 1 < n; j++) out[j] = (uint8_t)(up[j] + dn[j] + mid[j - 1] + mid[j + 1] + 3 * mid[j] + 1);
            out[n - 1] = (uint8_t)(up[n - 1] + dn[n - 1] + mid[n - 2] + mid[0] + 3 * mid[n - 1] + 1);
        }
        uint8_t *t = cur; cur = next; next = t;
        if (lk_user) {
            lazarus_exclude(next, n * n, LAZARUS_DEAD); /* the previous generation */
            lazarus_checkpoint_here(NULL);
            lazarus_include(next, n * n);
        }
    }
    printf("result %016llx\n", (unsigned long long)lk_fold(1469598103934665603ull, cur, n * n));
    return 0;
}
