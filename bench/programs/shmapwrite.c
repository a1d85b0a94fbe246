/* shmapwrite: stores into a few pages of a large MAP_SHARED file mapping per
 * round (bench/shmap.py).
 *
 *   shmapwrite FILE PAGES ROUNDS
 *
 * Maps FILE whole (MAP_SHARED, read-write) and reads one byte of every page
 * (the page cache and the page table filled, as a program that works on the
 * file would have them).  Then for round r = 0..ROUNDS-1: stores 8 bytes into
 * each of PAGES distinct pages chosen from r (the same pages in every run),
 * timing the stores alone, prints
 *
 *   round R pages P ns N
 *
 * and waits for a line on stdin (the benchmark takes a checkpoint
 * meanwhile).  Prints `done` at the end. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench_clock.h"

static uint64_t rnd(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: shmapwrite FILE PAGES ROUNDS\n");
        return 2;
    }
    long pages = atol(argv[2]), rounds = atol(argv[3]);
    int fd = open(argv[1], O_RDWR);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) { perror(argv[1]); return 2; }
    size_t npages = (size_t)st.st_size / 4096;
    if (pages < 1 || (size_t)pages > npages) { fprintf(stderr, "shmapwrite: PAGES out of range\n"); return 2; }
    volatile char *map = mmap(NULL, npages * 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { perror("mmap"); return 2; }
    unsigned sum = 0;
    for (size_t i = 0; i < npages; i++) sum += (unsigned char)map[i * 4096];
    uint32_t *perm = malloc(npages * sizeof *perm);
    if (!perm) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    char line[64];
    for (long r = 0; r < rounds; r++) {
        /* PAGES distinct pages: the first PAGES of a permutation seeded by r */
        uint64_t x = (uint64_t)r * 1000003 + 7;
        for (size_t i = 0; i < npages; i++) perm[i] = (uint32_t)i;
        for (long i = 0; i < pages; i++) {
            size_t j = (size_t)i + rnd(&x) % (npages - (size_t)i);
            uint32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
        double t0 = mono_s();
        for (long i = 0; i < pages; i++) *(volatile uint64_t *)(map + (size_t)perm[i] * 4096 + 64) = (uint64_t)r << 32 | (uint64_t)i;
        double t1 = mono_s();
        printf("round %ld pages %ld ns %.0f\n", r, pages, (t1 - t0) * 1e9);
        if (!fgets(line, sizeof line, stdin)) break;
    }
    printf("done %u\n", sum & 1);
    return 0;
}
