/* bigheap: the program bench/ckpt_restart.py checkpoints and restarts.
 *
 *   bigheap TSFILE [MIB]      (run it under `lazarus run`)
 *
 * 1. Fills MIB MiB (default 1024) of heap with pseudo-random data, so that no
 *    page is zero and nothing compresses, and prints "filled BYTES".
 * 2. Waits for a line on stdin (the driver syncs the disks first).
 * 3. Calls lazarus_checkpoint() and measures its wall time around the call:
 *    that is the time until the checkpoint is durable, the pause included.
 *    Prints "checkpoint index=N seconds=S", then sleeps until killed.
 * 4. After a restart, lazarus_checkpoint() returns LAZARUS_RESTARTED: the
 *    program at once writes CLOCK_REALTIME in ns to TSFILE, then checks that
 *    its heap came back intact, twice, and writes the seconds of each pass to
 *    TSFILE.work (the first runs during a lazy restart's fill, the second
 *    with every page in), and exits 0 (4 if the heap differs).
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lazarus.h"

static uint64_t digest(const uint64_t *p, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull + (h >> 29);
    return h;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bigheap TSFILE [MIB]\n");
        return 2;
    }
    const char *tsfile = argv[1];
    size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 1024;
    size_t words = (mib << 20) / sizeof(uint64_t);

    uint64_t *heap = malloc(words * sizeof(uint64_t));
    if (!heap) {
        fprintf(stderr, "bigheap: cannot allocate %zu MiB\n", mib);
        return 2;
    }
    uint64_t x = 0x243f6a8885a308d3ull; /* xorshift64 */
    for (size_t i = 0; i < words; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        heap[i] = x;
    }
    __asm__ volatile("" : : "r"(heap) : "memory"); /* the stores must happen */
    uint64_t expect = digest(heap, words);
    printf("filled %zu\n", words * sizeof(uint64_t));
    fflush(stdout);

    char line[64];
    if (!fgets(line, sizeof line, stdin)) {
        fprintf(stderr, "bigheap: no go line on stdin\n");
        return 2;
    }

    unsigned long long index = 0;
    double t0 = mono_s();
    int r = lazarus_checkpoint(&index);
    double t1 = mono_s();

    if (r == LAZARUS_RESTARTED) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        char buf[32];
        int len = snprintf(buf, sizeof buf, "%lld\n", (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
        int fd = open(tsfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || write(fd, buf, (size_t)len) != len || close(fd) != 0) {
            perror("bigheap: writing the timestamp");
            return 3;
        }
        /* the work rate right after the restart (a lazy one still fills
         * the heap, in the order this pass reads it), then with every page in */
        double w0 = mono_s();
        uint64_t got = digest(heap, words);
        double w1 = mono_s();
        uint64_t again = digest(heap, words);
        double w2 = mono_s();
        if (got != expect || again != expect) {
            fprintf(stderr, "bigheap: the heap differs after the restart\n");
            return 4;
        }
        char wpath[4096];
        snprintf(wpath, sizeof wpath, "%s.work", tsfile);
        FILE *wf = fopen(wpath, "w");
        if (!wf || fprintf(wf, "%.6f %.6f\n", w1 - w0, w2 - w1) < 0 || fclose(wf) != 0) {
            perror("bigheap: writing the work times");
            return 3;
        }
        return 0;
    }
    if (r == LAZARUS_INACTIVE) {
        fprintf(stderr, "bigheap: not running under lazarus\n");
        return 2;
    }
    if (r != LAZARUS_CONTINUED) {
        fprintf(stderr, "bigheap: lazarus_checkpoint failed\n");
        return 3;
    }
    printf("checkpoint index=%llu seconds=%.6f\n", index, t1 - t0);
    fflush(stdout);
    for (;;)
        sleep(60);
}
