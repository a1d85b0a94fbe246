/* forkheap: the machine's limits for a checkpoint's pause.
 *
 *   forkheap MIB none|nohuge|huge N [PCT]
 *
 * Maps MIB MiB of private anonymous memory (2 MiB-aligned) with the same
 * advice as incrheap, writes every page (an 8-byte stamp per page), then
 *  - times N bare fork()s: from the call to its return in the parent; each
 *    child _exit()s at once and is reaped before the next fork;
 *  - with PCT, N times: copies PCT % of the pages (distinct, chosen at random)
 *    into freshly mapped memory, timed from the mmap() to the end of the copy
 *    (what copying the changed pages in the pause costs at least).
 * Prints "hugekb=K pte_kb=P", one "fork seconds=S" line per fork and one
 * "copy seconds=S bytes=B" line per copy.  Not run under Lazarus. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_clock.h"

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: forkheap MIB none|nohuge|huge N [PCT]\n");
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 10) << 20, align = 2ul << 20;
    int n = atoi(argv[3]);
    double pct = argc > 4 ? atof(argv[4]) : 0;
    unsigned char *raw = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { perror("forkheap: mmap"); return 2; }
    unsigned char *heap = (unsigned char *)(((uintptr_t)raw + align - 1) & ~(align - 1));
    int adv = !strcmp(argv[2], "huge") ? MADV_HUGEPAGE : !strcmp(argv[2], "nohuge") ? MADV_NOHUGEPAGE : -1;
    if (adv >= 0 && madvise(heap, bytes, adv) != 0) { perror("forkheap: madvise"); return 2; }
    for (size_t off = 0; off < bytes; off += 4096) *(uint64_t *)(heap + off) = off / 4096 + 1;

    long hk = -1, pk = -1;
    char line[256];
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &hk) == 1) break;
    if (f) fclose(f);
    f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmPTE: %ld kB", &pk) == 1) break;
    if (f) fclose(f);
    printf("hugekb=%ld pte_kb=%ld\n", hk, pk);
    fflush(stdout);

    for (int i = 0; i < n; i++) {
        double t0 = mono_s();
        pid_t pid = fork();
        double t1 = mono_s();
        if (pid == 0) _exit(0);
        if (pid < 0) { perror("forkheap: fork"); return 3; }
        waitpid(pid, NULL, 0);
        printf("fork seconds=%.6f\n", t1 - t0);
    }
    size_t npages = bytes / 4096, want = (size_t)((double)npages * pct / 100.0);
    unsigned char *mark = calloc(npages, 1);
    uint64_t x = 0x243f6a8885a308d3ull;
    for (int i = 0; i < n && want; i++) {
        memset(mark, 0, npages);
        double t0 = mono_s();
        unsigned char *buf = mmap(NULL, want * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED) { perror("forkheap: mmap"); return 3; }
        for (size_t done = 0; done < want;) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            size_t p = x % npages;
            if (mark[p]) continue;
            mark[p] = 1;
            memcpy(buf + done * 4096, heap + p * 4096, 4096);
            done++;
        }
        double t1 = mono_s();
        munmap(buf, want * 4096);
        printf("copy seconds=%.6f bytes=%zu\n", t1 - t0, want * 4096);
    }
    return 0;
}
