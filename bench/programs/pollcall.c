/* pollcall: the cost of one cheap blocking-call wrapper.
 *
 *   pollcall N REPS
 *
 * Times N calls of poll() on one pipe with a zero timeout (nothing ready:
 * the call returns 0 at once), REPS times, and prints the best rep as
 * "ns_per_call X" (CLOCK_MONOTONIC).  Run natively and under the runtime,
 * the difference is what rt_calls.c adds per call. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000, reps = argc > 2 ? atol(argv[2]) : 5;
    int p[2];
    if (pipe(p) != 0) return 2;
    struct pollfd pf = {p[0], POLLIN, 0};
    double best = 1e18;
    for (long r = 0; r < reps; r++) {
        double t0 = now();
        for (long i = 0; i < n; i++)
            if (poll(&pf, 1, 0) != 0) return 3;
        double per = (now() - t0) / (double)n;
        if (per < best) best = per;
    }
    printf("ns_per_call %.1f\n", best);
    return 0;
}
