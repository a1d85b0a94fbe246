/* A parent that forked workers over a large data set: the parent fills MIB
 * MiB of private anonymous memory, forks NW workers that share it
 * copy-on-write, and each process (the parent too, after the fork) writes a
 * small part of its own copy (64 pages, its slice).  Every page holds one
 * 64-bit word repeated, a function of its index and of who last wrote it,
 * so each process checks its whole copy against the formula, not against
 * anything kept in memory.  On each trigger file TRIG.c (c = 1, 2, ...)
 * every process checks its copy, prints "round c IDX ok", then writes its
 * slice again with round c's words (a write after a restart must stay its
 * own).  TRIG.0 ... is not used; TRIG.end ends them all ("done").
 * MODE: share (as above), rewrite (worker 1 also rewrites 90 % of its copy
 * before the first checkpoint: nothing left to share), resize (the parent
 * forks workers 1 and 2, then unmaps the last MiB of its region, then forks
 * the others: 1 and 2 no longer have the parent's region).
 * Prints "ready IDX PID" once each process has checked its copy, "FAIL ..."
 * on any difference.  Usage: cow_workers MIB NW TRIG MODE */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define PAGE 4096
#define SLICE 64

static uint64_t *mem;
static size_t npages;
static int idx, nw, rewrite1;
static int writes; /* rounds this process has written its slice for (0: the first write) */

static uint64_t word(size_t p, uint64_t who)
{
    uint64_t x = (p + 1) * 0x9E3779B97F4A7C15ull ^ (who << 40);
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ull;
}

static size_t slice_at(int i) { return (size_t)i * 1024 + 17; }

/* who last wrote page p of this process's copy */
static uint64_t owner(size_t p)
{
    size_t s = slice_at(idx);
    if (p >= s && p < s + SLICE) return 1000 + (uint64_t)idx * 100 + (uint64_t)writes;
    if (rewrite1 && idx == 1 && p % 10) return 7;
    return 0;
}

static void fill_page(size_t p, uint64_t who)
{
    uint64_t w = word(p, who), *q = mem + p * (PAGE / 8);
    for (size_t k = 0; k < PAGE / 8; k++) q[k] = w;
}

static void check(const char *when)
{
    for (size_t p = 0; p < npages; p++) {
        uint64_t w = word(p, owner(p)), *q = mem + p * (PAGE / 8);
        for (size_t k = 0; k < PAGE / 8; k++)
            if (q[k] != w) {
                printf("FAIL process %d %s: page %zu word %zu is %016llx, not %016llx\n", idx, when, p, k,
                       (unsigned long long)q[k], (unsigned long long)w);
                fflush(stdout);
                _exit(1);
            }
    }
}

static void write_slice(void)
{
    size_t s = slice_at(idx);
    for (size_t p = s; p < s + SLICE; p++) fill_page(p, 1000 + (uint64_t)idx * 100 + (uint64_t)writes);
}

static int exists(const char *trig, const char *what)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%s", trig, what);
    return access(p, F_OK) == 0;
}

static void run(const char *trig)
{
    write_slice();
    if (rewrite1 && idx == 1)
        for (size_t p = 0; p < npages; p++)
            if (p % 10 && owner(p) == 7) fill_page(p, 7);
    check("before the first checkpoint");
    printf("ready %d %d\n", idx, (int)getpid());
    fflush(stdout);
    for (int c = 1;;) {
        char num[16];
        snprintf(num, sizeof num, "%d", c);
        if (exists(trig, num)) {
            check("after a restart");
            printf("round %d %d ok\n", c, idx);
            fflush(stdout);
            writes = c++;
            write_slice();
            continue;
        }
        if (exists(trig, "end")) break;
        usleep(50000);
    }
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: cow_workers MIB NW TRIG share|rewrite|resize\n");
        return 2;
    }
    size_t mib = strtoul(argv[1], NULL, 10);
    nw = atoi(argv[2]);
    const char *mode = argv[4];
    rewrite1 = !strcmp(mode, "rewrite");
    int resize = !strcmp(mode, "resize");
    npages = mib * 256;
    if (slice_at(nw) + SLICE > npages - 256) {
        fprintf(stderr, "cow_workers: too little memory for %d workers\n", nw);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    mem = mmap(NULL, npages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) return 1;
    for (size_t p = 0; p < npages; p++) fill_page(p, 0);
    pid_t kids[64];
    for (int i = 1; i <= nw; i++) {
        if (resize && i == 3) { /* the parent's region changes size after workers 1 and 2 */
            munmap((char *)mem + (npages - 256) * PAGE, 256 * PAGE);
            npages -= 256;
        }
        pid_t k = fork();
        if (k < 0) return 1;
        if (k == 0) {
            idx = i;
            run(argv[3]);
            _exit(0);
        }
        kids[i] = k;
    }
    if (resize && nw < 3) {
        munmap((char *)mem + (npages - 256) * PAGE, 256 * PAGE);
        npages -= 256;
    }
    run(argv[3]);
    int bad = 0;
    for (int i = 1; i <= nw; i++) {
        int st;
        if (waitpid(kids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st)) bad = 1;
    }
    printf(bad ? "FAIL a worker failed\n" : "done\n");
    return bad;
}
