/* here_prog: lazarus_checkpoint_here() in a loop.
 *
 *   here_prog SECONDS PERIOD_MS
 *
 * Calls lazarus_checkpoint_here() for SECONDS, sleeping PERIOD_MS between
 * calls (0: a tight loop), and prints `taken N calls C` (N checkpoints it
 * took, of C calls). */
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
    if (argc != 3) { fprintf(stderr, "usage: here_prog SECONDS PERIOD_MS\n"); return 2; }
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
