/* WATER (libckpt's Table 2): molecular dynamics, N particles in a periodic
 * box with a Lennard-Jones pair force (all pairs, O(N^2) a step), velocity
 * Verlet; every step's positions are kept in a trajectory of the last H
 * steps (the program's output data, as MD codes keep).
 *
 *   lk_water N STEPS H
 *
 * The paper added no directives to WATER.  Prints `result X`. */
#include <stdlib.h>

#include "lk_common.h"

int main(int argc, char **argv)
{
    lk_args(&argc, argv);
    if (argc != 4) { fprintf(stderr, "usage: lk_water N STEPS H\n"); return 2; }
    size_t n = strtoul(argv[1], NULL, 10), h = strtoul(argv[3], NULL, 10);
    long steps = atol(argv[2]);
    double *p = malloc(3 * n * sizeof *p), *v = calloc(3 * n, sizeof *v), *f = calloc(3 * n, sizeof *f);
    double *traj = malloc(h * 3 * n * sizeof *traj);
    if (!p || !v || !f || !traj || !h) return 1;
    double box = 1.2 * __builtin_cbrt((double)n), dt = 0.002;
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < 3 * n; i++) p[i] = lk_unit(&x) * box;
    for (long s = 0; s < steps; s++) {
        memset(f, 0, 3 * n * sizeof *f);
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++) {
                double d[3], r2 = 0;
                for (int k = 0; k < 3; k++) {
                    d[k] = p[3 * i + k] - p[3 * j + k];
                    d[k] -= box * __builtin_nearbyint(d[k] / box);
                    r2 += d[k] * d[k];
                }
                if (r2 > 6.25 || r2 < 0.64) continue; /* cut-off; too close: skipped (soft start) */
                double i6 = 1 / (r2 * r2 * r2), g = 24 * i6 * (2 * i6 - 1) / r2;
                for (int k = 0; k < 3; k++) { f[3 * i + k] += g * d[k]; f[3 * j + k] -= g * d[k]; }
            }
        for (size_t i = 0; i < 3 * n; i++) {
            v[i] += dt * f[i];
            p[i] += dt * v[i];
            if (p[i] < 0) p[i] += box;
            if (p[i] >= box) p[i] -= box;
        }
        memcpy(traj + (size_t)(s % (long)h) * 3 * n, p, 3 * n * sizeof *p);
    }
    printf("result %016llx\n", (unsigned long long)lk_fold(lk_fold(1469598103934665603ull, p, 3 * n * sizeof *p), traj, h * 3 * n * sizeof *traj));
    return 0;
}
