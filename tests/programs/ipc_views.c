/* One object mapped at several addresses, a large MAP_NORESERVE
 * reservation and madvise flags, checked by the program itself after every
 * restart (tests/test_ipc.py):
 * - a ring buffer: a memfd mapped twice back to back (a record written
 *   across the end of the first view reads whole through the second);
 * - shared anonymous memory given a second view with mremap(old_size 0);
 * - 8 GiB PROT_READ|PROT_WRITE MAP_NORESERVE (more if memory and swap
 *   reach that: a mapping without MAP_NORESERVE larger than both is then
 *   refused by the kernel's overcommit heuristic), a few pages touched;
 * - mappings advised DONTDUMP, DONTFORK, WIPEONFORK, HUGEPAGE, NOHUGEPAGE,
 *   MERGEABLE, SEQUENTIAL, RANDOM (their VmFlags, from /proc/self/smaps;
 *   the test reads /proc/PID/smaps from outside too: "adv NAME ADDR").
 * With the views, a forked child holds them too (a job of two processes):
 * asked through the shared anonymous mapping's second view, it sums the
 * ring through its own second view and answers through the first, and the
 * parent compares with its own sum (the views are one object across the
 * processes too).
 * Usage: ipc_views CYCLES all|noviews FILE_PREFIX (noviews: without the
 * two kinds of views and the child).  Prints "ready N" and waits for
 * FILE_PREFIX.N; "check N ok" or FAIL; "done" at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)
#define RING (64 << 10)
static uint64_t RES = 8ull << 30; /* or more than memory and swap: see reservation_size */
#define ADV (2 << 20)

static char *ring;           /* two views of one memfd, back to back */
static char *sa, *sb;        /* two views of one shared anonymous mapping */
static char *res;            /* the reservation */
static int noviews;
static size_t head;          /* ring position */
static uint64_t seq;

static const struct { const char *name; int advice; const char *flag; } advs[] = {
    {"dontdump", MADV_DONTDUMP, "dd"}, {"dontfork", MADV_DONTFORK, "dc"}, {"wipeonfork", MADV_WIPEONFORK, "wf"},
    {"hugepage", MADV_HUGEPAGE, "hg"}, {"nohugepage", MADV_NOHUGEPAGE, "nh"}, {"mergeable", MADV_MERGEABLE, "mg"},
    {"sequential", MADV_SEQUENTIAL, "sr"}, {"random", MADV_RANDOM, "rr"},
};
#define NADV (sizeof advs / sizeof advs[0])
static char *adv[NADV];

static void put_record(void)
{
    if (noviews) return;
    /* a 100-byte record at head: may run past the first view into the second */
    char rec[100];
    memset(rec, 'a' + (int)(seq % 26), sizeof rec);
    memcpy(rec, &seq, sizeof seq);
    memcpy(ring + head, rec, sizeof rec);
    head = (head + sizeof rec) % RING;
    seq++;
}

static void check_ring(void)
{
    if (noviews) return;
    /* every record written so far is still there, read through the first
     * view only from its own offset on (wrapping through the second) */
    uint64_t n = seq < RING / 100 ? seq : RING / 100 - 1;
    size_t at = (head + RING - n * 100) % RING;
    for (uint64_t k = seq - n; k < seq; k++) {
        uint64_t v;
        memcpy(&v, ring + at, sizeof v);
        if (v != k) FAIL("ring record %llu reads %llu at %zu", (unsigned long long)k, (unsigned long long)v, at);
        for (int b = 8; b < 100; b++)
            if (ring[at + b] != 'a' + (int)(k % 26)) FAIL("ring record %llu damaged at byte %d", (unsigned long long)k, b);
        at = (at + 100) % RING;
    }
    /* the views are one object: a store through one is seen through the other */
    ring[RING + 5] ^= 0x55;
    if (ring[5] != ring[RING + 5]) FAIL("the ring's two views are not one memfd");
    ring[5] ^= 0x55;
    sa[100] = (char)(seq & 0x7f);
    if (sb[100] != sa[100]) FAIL("the shared anonymous mapping's two views are not one object");
    if (memcmp(sa + 4096, "shared-anon", 11)) FAIL("shared anonymous content lost");
}

/* The child's side: requests at sb+2048, answers at sb+3072 (seen by the
 * parent at sa+...: another view). */
static uint64_t ring_sum(const char *v)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < RING; i++) h = (h ^ (unsigned char)v[i]) * 1099511628211ull;
    return h;
}

static void child_loop(void)
{
    volatile uint64_t *req = (volatile uint64_t *)(sb + 2048), *ans = (volatile uint64_t *)(sb + 3072);
    uint64_t seen = 0;
    for (;;) {
        uint64_t t = req[0];
        if (t == ~0ull) _exit(0);
        if (t != seen) {
            ans[1] = ring_sum(ring + RING);
            __sync_synchronize();
            ans[0] = t;
            seen = t;
        }
        usleep(2000);
    }
}

static void check_child(int c)
{
    if (noviews) return;
    volatile uint64_t *req = (volatile uint64_t *)(sa + 2048), *ans = (volatile uint64_t *)(sa + 3072);
    uint64_t t = (uint64_t)c * 1000 + seq % 1000 + 1;
    req[0] = t;
    for (int i = 0; ans[0] != t; i++) {
        if (i == 5000) FAIL("the child did not answer through the shared views");
        usleep(2000);
    }
    __sync_synchronize();
    if (ans[1] != ring_sum(ring)) FAIL("the child's view of the ring differs from the parent's");
}

static void check_res(void)
{
    for (uint64_t k = 0; k < 8; k++) {
        uint64_t v;
        memcpy(&v, res + k * (1ull << 30) + 12345, sizeof v);
        if (v != 0x1234567800ull + k) FAIL("reservation page %llu reads %llx", (unsigned long long)k, (unsigned long long)v);
    }
    if (res[RES - 1] != 0) FAIL("untouched reservation byte not zero");
}

static int has_flag(char *addr, const char *flag)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) FAIL("cannot read smaps");
    char line[1024];
    int in = 0, found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) { in = a <= (unsigned long)addr && (unsigned long)addr < b; continue; }
        if (in && !strncmp(line, "VmFlags:", 8)) {
            char want[8];
            snprintf(want, sizeof want, " %s", flag);
            found = strstr(line, want) != NULL;
            break;
        }
    }
    fclose(f);
    return found;
}

static void check_adv(void)
{
    for (size_t i = 0; i < NADV; i++) {
        if (has_flag(adv[i], advs[i].flag) != 1) FAIL("VmFlags of the %s mapping lack %s", advs[i].name, advs[i].flag);
        if (adv[i][4096] != (char)(i + 1)) FAIL("%s mapping's content lost", advs[i].name);
    }
    if (has_flag(res, "nr") != 1) FAIL("the reservation lost its nr (MAP_NORESERVE) flag");
}

static void reservation_size(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    unsigned long long kb, total = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemTotal: %llu", &kb) == 1 || sscanf(line, "SwapTotal: %llu", &kb) == 1) total += kb << 10;
    if (f) fclose(f);
    if (total + (1ull << 30) > RES) RES = (total + (2ull << 30)) & ~((1ull << 30) - 1);
}

static void setup(void)
{
    reservation_size();
    if (noviews) goto memory;
    int fd = memfd_create("ring", 0);
    if (fd < 0 || ftruncate(fd, RING) < 0) FAIL("memfd: %s", strerror(errno));
    ring = mmap(NULL, 2 * RING, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ring == MAP_FAILED || mmap(ring, RING, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED ||
        mmap(ring + RING, RING, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
        FAIL("ring views: %s", strerror(errno));
    close(fd);
    sa = mmap(NULL, 2 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sa == MAP_FAILED) FAIL("shared anon: %s", strerror(errno));
    memcpy(sa + 4096, "shared-anon", 11);
    sb = mremap(sa, 0, 2 * 4096, MREMAP_MAYMOVE);
    if (sb == MAP_FAILED) FAIL("mremap second view: %s", strerror(errno));
memory:
    res = mmap(NULL, RES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) FAIL("reservation: %s", strerror(errno));
    for (uint64_t k = 0; k < 8; k++) {
        uint64_t v = 0x1234567800ull + k;
        memcpy(res + k * (1ull << 30) + 12345, &v, sizeof v);
    }
    for (size_t i = 0; i < NADV; i++) {
        adv[i] = mmap(NULL, ADV, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (adv[i] == MAP_FAILED) FAIL("mmap: %s", strerror(errno));
        if (madvise(adv[i], ADV, advs[i].advice) < 0) FAIL("madvise %s: %s", advs[i].name, strerror(errno));
        adv[i][4096] = (char)(i + 1);
        printf("adv %s %lx %s\n", advs[i].name, (unsigned long)adv[i], advs[i].flag);
    }
    printf("adv reservation %lx nr\n", (unsigned long)res);
    printf("reservation %llu GiB\n", (unsigned long long)(RES >> 30));
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: ipc_views CYCLES all|noviews FILE_PREFIX\n"); return 2; }
    noviews = !strcmp(argv[2], "noviews");
    setvbuf(stdout, NULL, _IOLBF, 0);
    int cycles = atoi(argv[1]);
    setup();
    for (int i = 0; i < 1000; i++) put_record();
    check_ring(); check_res(); check_adv();
    pid_t child = -1;
    if (!noviews && (child = fork()) == 0) child_loop();
    check_child(0);
    for (int c = 1; c <= cycles; c++) {
        char f[4096];
        snprintf(f, sizeof f, "%s.%d", argv[3], c);
        printf("ready %d\n", c);
        while (access(f, F_OK) != 0) usleep(20000);
        check_ring(); check_res(); check_adv();
        check_child(c);
        for (int i = 0; i < 777; i++) put_record();
        check_ring();
        check_child(c + 100);
        printf("check %d ok\n", c);
    }
    if (child > 0) {
        int st;
        *(volatile uint64_t *)(sa + 2048) = ~0ull;
        if (waitpid(child, &st, 0) != child || !WIFEXITED(st)) FAIL("the child did not end");
    }
    printf("done\n");
    return 0;
}
