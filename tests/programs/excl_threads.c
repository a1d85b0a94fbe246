/* excl_threads: lazarus_exclude/lazarus_include from several threads at once.
 *
 *   excl_threads SECONDS
 *
 * Four threads, each with its own heap buffer (1000, 5000, 20000 and 70000
 * bytes, unaligned), exclude it as dead and include it again as fast as they
 * can for SECONDS; prints `ready` once they run and `done N` (calls made). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "lazarus.h"

static const size_t sizes[4] = {1000, 5000, 20000, 70000};
static double end;
static long calls[4];

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
    long k = (long)arg;
    char *buf = malloc(sizes[k] + 8);
    if (!buf) return NULL;
    buf += 3; /* not aligned */
    while (now() < end) {
        if (lazarus_exclude(buf, sizes[k], LAZARUS_DEAD) || lazarus_include(buf, sizes[k])) abort();
        calls[k] += 2;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    end = now() + atof(argv[1]);
    pthread_t t[4];
    for (long k = 0; k < 4; k++) pthread_create(&t[k], NULL, worker, (void *)k);
    printf("ready\n");
    fflush(stdout);
    long n = 0;
    for (int k = 0; k < 4; k++) { pthread_join(t[k], NULL); n += calls[k]; }
    printf("done %ld\n", n);
    return 0;
}
