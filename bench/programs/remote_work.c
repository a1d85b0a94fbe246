/* remote_work: the program bench/remote.py checkpoints to a remote store.
 *
 *   remote_work [MIB]      (run it under `lazarus run`)
 *
 * Fills MIB MiB (default 1024) of heap with pseudo-random data (nothing
 * compresses, no page is zero), prints "filled", then computes for ever on
 * a small cache-resident buffer, printing every ~10 ms "slice NS UNITS": the
 * CLOCK_REALTIME at the slice's end and the units of work done in it.  The
 * driver reads its compute rate around a checkpoint and its flush from
 * these lines, and the first line after a restart is the restart's end.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    size_t words = (mib << 20) / sizeof(uint64_t);
    uint64_t *heap = malloc(words * sizeof(uint64_t));
    if (!heap) {
        fprintf(stderr, "remote_work: cannot allocate %zu MiB\n", mib);
        return 2;
    }
    uint64_t x = 0x243f6a8885a308d3ull; /* xorshift64 */
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        heap[i] = x;
    }
    printf("filled\n");
    fflush(stdout);
    static uint64_t buf[8192]; /* 64 KiB: the work stays in the cache */
    uint64_t acc = 1;
    for (;;) {
        uint64_t end = ns(CLOCK_MONOTONIC) + 10000000ull, units = 0;
        while (ns(CLOCK_MONOTONIC) < end) {
            for (size_t i = 0; i < 8192; i++) {
                acc = (acc ^ buf[i]) * 0x100000001b3ull + (acc >> 29);
                buf[i] = acc;
            }
            units++;
        }
        printf("slice %llu %llu %llu\n", (unsigned long long)ns(CLOCK_REALTIME), (unsigned long long)units,
               (unsigned long long)(acc & 0xff) + (unsigned long long)(heap[acc % words] & 0));
        fflush(stdout);
    }
}
