/* excl_prog: memory exclusion through the C API (lazarus_exclude/_include).
 *
 *   excl_prog MIB GOFILE
 *
 * Fills four heap buffers with a pattern: DEAD (MIB MiB), RO (MIB MiB), LIVE
 * (MIB/4 MiB) and PART (3 pages; its bytes 100..4999 dead: two pages partly
 * dead, the third not at all).  Declares DEAD dead, RO read-only,
 * then checkpoints (lazarus_checkpoint).  Then writes into the first MiB
 * of RO (against its own directive), changes a little of LIVE and checkpoints
 * again; prints
 *
 *   ckpt K index N digests ro R live L part P
 *   waiting
 *
 * waits for GOFILE, checkpoints once more (after a restart: the exclusions
 * must still hold) and prints what memory holds now:
 *
 *   after index N dead_zero Z part_dead_zero Z ro R live L part P
 *
 * R, L, P: FNV digests of RO, LIVE and PART's bytes outside its dead range. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "lazarus.h"

static uint64_t fnv(const unsigned char *p, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        p[i] = (unsigned char)(x | 1); /* never zero: a zero byte after a restart was not stored */
    }
}

static int all_zero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

enum { PART_LEN = 3 * 4096, PART_DEAD_AT = 100, PART_DEAD_LEN = 4900 };
static unsigned char *dead, *ro, *live, *part;
static size_t big, small;

static uint64_t part_digest(void)
{
    uint64_t h = fnv(part, PART_DEAD_AT, 0xcbf29ce484222325ull);
    return fnv(part + PART_DEAD_AT + PART_DEAD_LEN, PART_LEN - PART_DEAD_AT - PART_DEAD_LEN, h);
}

static void report(const char *what, int k, unsigned long long idx)
{
    printf("%s %d index %llu digests ro %016" PRIx64 " live %016" PRIx64 " part %016" PRIx64 "\n", what, k, idx,
           fnv(ro, big, 0xcbf29ce484222325ull), fnv(live, small, 0xcbf29ce484222325ull), part_digest());
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: excl_prog MIB GOFILE\n"); return 2; }
    big = (size_t)atoi(argv[1]) << 20;
    small = big / 4;
    dead = malloc(big); ro = aligned_alloc(4096, big); /* RO: whole pages (a partly read-only page is stored when written) */ live = malloc(small);
    part = aligned_alloc(4096, PART_LEN);
    if (!dead || !ro || !live || !part) return 1;
    fill(dead, big, 1); fill(ro, big, 2); fill(live, small, 3); fill(part, PART_LEN, 4);
    if (lazarus_exclude(dead, big, LAZARUS_DEAD) || lazarus_exclude(ro, big, LAZARUS_READONLY) ||
        lazarus_exclude(part + PART_DEAD_AT, PART_DEAD_LEN, LAZARUS_DEAD)) {
        perror("lazarus_exclude");
        return 1;
    }
    if (lazarus_exclude(ro, 10, 7) == 0) { fprintf(stderr, "a bad kind was accepted\n"); return 1; }
    unsigned long long idx = 0;
    if (lazarus_checkpoint(&idx) != LAZARUS_CONTINUED) { fprintf(stderr, "checkpoint 1 failed\n"); return 1; }
    report("ckpt", 1, idx);
    fill(ro, 1 << 20, 5);     /* a write its directive said would not come */
    fill(live, 64 << 10, 6);
    int r2 = lazarus_checkpoint(&idx); /* a restart resumes here */
    if (r2 != LAZARUS_CONTINUED && r2 != LAZARUS_RESTARTED) { fprintf(stderr, "checkpoint 2 failed\n"); return 1; }
    report("ckpt", 2, idx);
    printf("waiting\n");
    fflush(stdout);
    while (access(argv[2], F_OK) != 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    int r = lazarus_checkpoint(&idx);
    printf("after %d index %llu dead_zero %d part_dead_zero %d ro %016" PRIx64 " live %016" PRIx64 " part %016" PRIx64 "\n",
           r, idx, all_zero(dead, big), all_zero(part + PART_DEAD_AT, PART_DEAD_LEN), fnv(ro, big, 0xcbf29ce484222325ull),
           fnv(live, small, 0xcbf29ce484222325ull), part_digest());
    return 0;
}
