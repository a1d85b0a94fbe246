/* incrheap: the heap bench/incremental.py checkpoints, driven over stdin.
 *
 *   incrheap MIB PATTERN ADVICE [TSFILE]      (normally under `lazarus run`)
 *
 * Maps MIB MiB of private anonymous memory (2 MiB-aligned), applies ADVICE
 * (none: nothing, nohuge: MADV_NOHUGEPAGE, huge: MADV_HUGEPAGE) and writes
 * every page according to PATTERN:
 *   random    pseudo-random bytes: nothing compresses, no page repeats
 *   halfzero  each page: random doubles in [0,1) in its first half, zeros
 *             in its second (no page is all zeros: only compression halves it)
 *   zeropages even pages zero (written), odd pages random doubles in [0,1)
 *   stamp     a distinct 8-byte stamp at the start of each page, the rest
 *             zero: every page differs, yet compresses to a few bytes
 * then prints "filled BYTES hugekb=K pte_kb=P" (AnonHugePages and VmPTE of
 * the process) and reads commands, one a line:
 *   dirty PCT    rewrites PCT % of the pages (distinct, chosen at random)
 *                with new content of the pattern; prints "dirtied PAGES seconds=S hugekb=K pte_kb=P"
 *   api          calls lazarus_checkpoint() and times it (until durable);
 *                prints "api index=N seconds=S".  After a restart the call
 *                returns LAZARUS_RESTARTED: the program at once writes
 *                CLOCK_REALTIME in ns to TSFILE, checks that the heap came
 *                back as it was when "api" was given, and exits 0 (4 if not)
 *   digest       prints "digest HEX" of the whole heap (to compare before a
 *                checkpoint and after a restart from it)
 *   quit         exits 0
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_clock.h"
#include "lazarus.h"

#define PAGE 4096ul

static uint64_t rng = 0x243f6a8885a308d3ull;

static inline uint64_t next64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static enum { P_RANDOM, P_HALFZERO, P_ZEROPAGES, P_STAMP } pattern;
static uint64_t stamp;

static void write_page(unsigned char *p, size_t idx)
{
    uint64_t *w = (uint64_t *)p;
    size_t n = PAGE / sizeof(uint64_t);
    switch (pattern) {
    case P_RANDOM:
        for (size_t i = 0; i < n; i++) w[i] = next64();
        break;
    case P_HALFZERO: {
        double *d = (double *)p;
        for (size_t i = 0; i < n / 2; i++) d[i] = (double)(next64() >> 11) * 0x1.0p-53;
        memset(p + PAGE / 2, 0, PAGE / 2);
        break;
    }
    case P_ZEROPAGES:
        if (idx % 2 == 0) {
            memset(p, 0, PAGE);
        } else {
            double *d = (double *)p;
            for (size_t i = 0; i < n; i++) d[i] = (double)(next64() >> 11) * 0x1.0p-53;
        }
        break;
    case P_STAMP:
        memset(p, 0, PAGE);
        w[0] = ++stamp;
        break;
    }
}

static uint64_t digest(const uint64_t *p, size_t n)
{
    uint64_t h = 0;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull + (h >> 29);
    return h;
}

/* AnonHugePages (kB) from smaps_rollup and VmPTE (kB) from status */
static void mem_stats(long *hugekb, long *ptekb)
{
    char line[256];
    *hugekb = *ptekb = -1;
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "AnonHugePages: %ld kB", hugekb) == 1) break;
        fclose(f);
    }
    f = fopen("/proc/self/status", "r");
    if (f) {
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "VmPTE: %ld kB", ptekb) == 1) break;
        fclose(f);
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: incrheap MIB random|halfzero|zeropages|stamp none|nohuge|huge [TSFILE]\n");
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 10) << 20;
    if (!strcmp(argv[2], "random")) pattern = P_RANDOM;
    else if (!strcmp(argv[2], "halfzero")) pattern = P_HALFZERO;
    else if (!strcmp(argv[2], "zeropages")) pattern = P_ZEROPAGES;
    else if (!strcmp(argv[2], "stamp")) pattern = P_STAMP;
    else { fprintf(stderr, "incrheap: unknown pattern %s\n", argv[2]); return 2; }
    const char *tsfile = argc > 4 ? argv[4] : NULL;

    size_t align = 2ul << 20;
    unsigned char *raw = mmap(NULL, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) { perror("incrheap: mmap"); return 2; }
    unsigned char *heap = (unsigned char *)(((uintptr_t)raw + align - 1) & ~(align - 1));
    int adv = !strcmp(argv[3], "huge") ? MADV_HUGEPAGE : !strcmp(argv[3], "nohuge") ? MADV_NOHUGEPAGE : -1;
    if (adv >= 0 && madvise(heap, bytes, adv) != 0) { perror("incrheap: madvise"); return 2; }

    size_t npages = bytes / PAGE;
    for (size_t i = 0; i < npages; i++) write_page(heap + i * PAGE, i);
    long hk, pk;
    mem_stats(&hk, &pk);
    printf("filled %zu hugekb=%ld pte_kb=%ld\n", bytes, hk, pk);
    fflush(stdout);

    unsigned char *mark = calloc(npages, 1);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        double pct;
        if (sscanf(line, "dirty %lf", &pct) == 1) {
            size_t want = (size_t)((double)npages * pct / 100.0), done = 0;
            memset(mark, 0, npages);
            double t0 = mono_s();
            while (done < want) {
                size_t i = next64() % npages;
                if (mark[i]) continue;
                mark[i] = 1;
                write_page(heap + i * PAGE, i);
                done++;
            }
            double t1 = mono_s();
            mem_stats(&hk, &pk);
            printf("dirtied %zu seconds=%.6f hugekb=%ld pte_kb=%ld\n", done, t1 - t0, hk, pk);
        } else if (!strncmp(line, "api", 3)) {
            uint64_t expect = digest((const uint64_t *)heap, bytes / sizeof(uint64_t));
            unsigned long long index = 0;
            double t0 = mono_s();
            int r = lazarus_checkpoint(&index);
            double t1 = mono_s();
            if (r == LAZARUS_RESTARTED) {
                if (tsfile) {
                    char buf[32];
                    int len = snprintf(buf, sizeof buf, "%lld\n", real_ns());
                    int fd = open(tsfile, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                    if (fd < 0 || write(fd, buf, (size_t)len) != len || close(fd) != 0) {
                        perror("incrheap: writing the timestamp");
                        return 3;
                    }
                }
                if (digest((const uint64_t *)heap, bytes / sizeof(uint64_t)) != expect) {
                    fprintf(stderr, "incrheap: the heap differs after the restart\n");
                    return 4;
                }
                return 0;
            }
            if (r != LAZARUS_CONTINUED) {
                printf("api failed r=%d\n", r);
            } else {
                printf("api index=%llu seconds=%.6f\n", index, t1 - t0);
            }
        } else if (!strncmp(line, "digest", 6)) {
            printf("digest %016llx\n", (unsigned long long)digest((const uint64_t *)heap, bytes / sizeof(uint64_t)));
        } else if (!strncmp(line, "quit", 4)) {
            return 0;
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    return 0;
}
