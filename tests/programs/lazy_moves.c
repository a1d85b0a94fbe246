/* lazy_moves: moves and discards its memory while a lazy restart fills it.
 *
 *   lazy_moves [MIB]          (default 128)
 *
 * Fills MIB MiB (its own mapping) from a seeded xorshift64, prints "ready",
 * then forever: moves the mapping 256 MiB away and back in turn (mremap
 * MREMAP_FIXED: the kernel's REMAP event, and the source's UNMAP), discards
 * 1 MiB of it (MADV_DONTNEED: REMOVE), prints "K DIGEST" over the whole
 * mapping, writes the discarded MiB again, sleeps 0.1 s.  The digest is the
 * same every round: the discarded MiB reads as zeros before it is written. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    size_t n = (argc > 1 ? strtoul(argv[1], NULL, 0) : 128) << 20;
    uint64_t *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); return 1; }
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < n / 8; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = x;
    }
    printf("ready\n");
    fflush(stdout);
    const long away = 256l << 20;
    for (int k = 0;; k++) {
        char *to = (char *)p + (k & 1 ? -away : away);
        uint64_t *q = mremap(p, n, n, MREMAP_MAYMOVE | MREMAP_FIXED, to);
        if (q == MAP_FAILED) { perror("mremap"); return 1; }
        p = q;
        madvise((char *)p + n / 2, 1u << 20, MADV_DONTNEED);
        uint64_t h = 0;
        for (size_t i = 0; i < n / 8; i++) h = (h ^ p[i]) * 0x100000001b3ull;
        printf("%d %016" PRIx64 "\n", k, h);
        fflush(stdout);
        memset((char *)p + n / 2, 0x5a, 1u << 20);
        usleep(100000);
    }
}
