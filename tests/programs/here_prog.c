/* here_prog: lazarus_checkpoint_here() in a loop.
 *
 *   here_prog SECONDS PERIOD_MS [MIB]
 *
 * Fills MIB MiB (default 0) with pseudo-random bytes, then calls
 * lazarus_checkpoint_here() for SECONDS, sleeping PERIOD_MS between calls
 * (0: a tight loop), and prints `taken N calls C` (N checkpoints it took, of
 * C calls). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lazarus.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) { fprintf(stderr, "usage: here_prog SECONDS PERIOD_MS [MIB]\n"); return 2; }
    size_t n = argc == 4 ? (size_t)atol(argv[3]) << 20 : 0;
    unsigned char *heap = malloc(n + 1);
    if (!heap) return 1;
    unsigned long long x = 88172645463325252ull;
    for (size_t i = 0; i < n; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; heap[i] = (unsigned char)x; }
    double end = now() + atof(argv[1]);
    long period = atol(argv[2]);
    long taken = 0, calls = 0;
    while (now() < end) {
        int r = lazarus_checkpoint_here(NULL);
        calls++;
        if (r == LAZARUS_CONTINUED) taken++;
        if (r == LAZARUS_ERROR) { fprintf(stderr, "checkpoint failed\n"); return 1; }
        if (period) {
            struct timespec ts = {period / 1000, (period % 1000) * 1000000};
            nanosleep(&ts, NULL);
        }
    }
    printf("taken %ld calls %ld\n", taken, calls);
    return 0;
}
