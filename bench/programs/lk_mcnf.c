/* MCNF's stand-in (libckpt's Table 2 ran a multicommodity network flow
 * code): a comparable sparse optimisation, least squares min |Ax - b| by
 * conjugate gradient on the normal equations, A a random sparse M x N matrix
 * (CSR, K entries a row) built once and only read afterwards; a few vectors
 * change every iteration.
 *
 *   lk_mcnf M N K ITERATIONS
 *
 * The paper added no directives to MCNF.  Prints `result X`. */
#include <stdlib.h>

#include "lk_common.h"

int main(int argc, char **argv)
{
    lk_args(&argc, argv);
    if (argc != 5) { fprintf(stderr, "usage: lk_mcnf M N K ITERATIONS\n"); return 2; }
    size_t m = strtoul(argv[1], NULL, 10), n = strtoul(argv[2], NULL, 10), k = strtoul(argv[3], NULL, 10);
    long iters = atol(argv[4]);
    uint32_t *col = malloc(m * k * sizeof *col);
    double *val = malloc(m * k * sizeof *val), *b = malloc(m * sizeof *b), *xv = calloc(n, sizeof *xv);
    double *r = malloc(n * sizeof *r), *d = malloc(n * sizeof *d), *q = malloc(n * sizeof *q), *t = malloc(m * sizeof *t);
    if (!col || !val || !b || !xv || !r || !d || !q || !t) return 1;
    uint64_t x = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < m * k; i++) { col[i] = (uint32_t)(lk_rand(&x) % n); val[i] = lk_unit(&x) - 0.5; }
    for (size_t i = 0; i < m; i++) b[i] = lk_unit(&x);
    /* r = A^T b (x = 0), d = r */
    memset(r, 0, n * sizeof *r);
    for (size_t i = 0; i < m; i++)
        for (size_t e = i * k; e < (i + 1) * k; e++) r[col[e]] += val[e] * b[i];
    memcpy(d, r, n * sizeof *d);
    double rr = 0;
    for (size_t j = 0; j < n; j++) rr += r[j] * r[j];
    for (long it = 0; it < iters && rr > 1e-30; it++) {
        /* q = A^T (A d) */
        for (size_t i = 0; i < m; i++) {
            double s = 0;
            for (size_t e = i * k; e < (i + 1) * k; e++) s += val[e] * d[col[e]];
            t[i] = s;
        }
        memset(q, 0, n * sizeof *q);
        for (size_t i = 0; i < m; i++)
            for (size_t e = i * k; e < (i + 1) * k; e++) q[col[e]] += val[e] * t[i];
        double dq = 0;
        for (size_t j = 0; j < n; j++) dq += d[j] * q[j];
        double alpha = rr / dq, rr2 = 0;
        for (size_t j = 0; j < n; j++) { xv[j] += alpha * d[j]; r[j] -= alpha * q[j]; rr2 += r[j] * r[j]; }
        for (size_t j = 0; j < n; j++) d[j] = r[j] + rr2 / rr * d[j];
        rr = rr2;
    }
    printf("result %016llx\n", (unsigned long long)lk_fold(1469598103934665603ull, xv, n * sizeof *xv));
    return 0;
}
