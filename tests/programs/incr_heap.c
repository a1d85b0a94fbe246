/* incr_heap: a heap that changes a few pages at a time, driven line by line,
 * for incremental checkpoints.
 *
 *   incr_heap MIB PERCENT [KIND]     KIND: random (default), halfzero, sparse
 *
 * Maps MIB MiB and fills it: random = pseudo-random bytes (incompressible);
 * halfzero = every other page zero, the others random doubles in [0,1)
 * (compressible); sparse = only every 16th page touched.  Then serves
 * commands read from stdin, one per line:
 *   next     change PERCENT % of the pages, chosen pseudo-randomly from the
 *            round number (the same in every run), each with new random bytes
 *   digest   print the state
 * and after each prints "state ROUND DIGEST CHANGED_PAGES" (DIGEST over the
 * whole heap, hex).  At end of input prints "bye" and exits 0.
 * The output depends only on the arguments and the commands. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define PAGE 4096u

static uint64_t rng_state;
static uint64_t rng(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static void fill_page(uint64_t *p, int kind)
{
    for (unsigned i = 0; i < PAGE / 8; i++) {
        if (kind == 1) {
            double d = (double)(rng() >> 11) / 9007199254740992.0;
            memcpy(&p[i], &d, 8);
        } else {
            p[i] = rng();
        }
    }
}

static uint64_t digest(const uint64_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull + (h >> 31);
    return h;
}

int main(int argc, char **argv)
{
    if (argc < 3) { fprintf(stderr, "usage: incr_heap MIB PERCENT [random|halfzero|sparse]\n"); return 2; }
    size_t mib = strtoull(argv[1], NULL, 10);
    double percent = strtod(argv[2], NULL);
    const char *k = argc > 3 ? argv[3] : "random";
    int kind = !strcmp(k, "halfzero") ? 1 : !strcmp(k, "sparse") ? 2 : 0;
    size_t bytes = mib << 20, pages = bytes / PAGE;
    uint64_t *heap = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (heap == MAP_FAILED) { perror("mmap"); return 1; }
    rng_state = 88172645463325252ull;
    for (size_t pg = 0; pg < pages; pg++) {
        uint64_t *p = heap + pg * (PAGE / 8);
        if (kind == 1 && pg % 2) continue;
        if (kind == 2 && pg % 16) continue;
        fill_page(p, kind);
    }
    uint64_t round = 0, changed = 0;
    printf("state %" PRIu64 " %016" PRIx64 " %" PRIu64 "\n", round, digest(heap, bytes / 8), changed);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "next", 4)) {
            round++;
            rng_state = 0x9E3779B97F4A7C15ull * (round + 1);
            changed = (size_t)((double)pages * percent / 100.0);
            for (size_t i = 0; i < changed; i++) {
                size_t pg = (size_t)(rng() % pages);
                fill_page(heap + pg * (PAGE / 8), kind == 1 && pg % 2 ? 3 : kind);
            }
        }
        printf("state %" PRIu64 " %016" PRIx64 " %" PRIu64 "\n", round, digest(heap, bytes / 8), changed);
        fflush(stdout);
    }
    printf("bye\n");
    return 0;
}
