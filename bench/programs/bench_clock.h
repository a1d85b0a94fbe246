/* Clocks shared by the benchmark programs: a monotonic clock for durations
 * and CLOCK_REALTIME (to match checkpoint creation times in `lazarus list`),
 * and the process's CPU time. */
#ifndef BENCH_CLOCK_H
#define BENCH_CLOCK_H
#include <time.h>

static inline double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* this process's CPU time, user and system */
static inline double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline long long real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
#endif
