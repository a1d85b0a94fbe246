/* Exercises runtime/rt_dirty.c (userfaultfd async write-protect + PAGEMAP_SCAN).
 * Built directly with the module:
 *   gcc -O2 -Wall -D_GNU_SOURCE -Icommon -Iinclude -Iruntime \
 *       tests/programs/dirty_probe.c runtime/rt_dirty.c -o dirty_probe
 * Usage: dirty_probe MODE [DIR] ; DIR is a writable directory for file modes.
 * Each mode checks exact page sets itself, prints "fact key=value" lines and
 * "PASS mode" at the end; exit status 1 on any failed check, 2 when the module
 * cannot initialize. */
#include "rt_dirty.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

#define PG 4096ul
#define FD_BASE 980

static int failures;
static const char *dir = "/tmp";

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        if (!(cond)) {                                                                        \
            fprintf(stdout, "FAIL %s:%d: (%s) ", __FILE__, __LINE__, #cond);                  \
            fprintf(stdout, __VA_ARGS__);                                                     \
            fputc('\n', stdout);                                                              \
            failures++;                                                                       \
        }                                                                                     \
    } while (0)

static void init_or_die(void)
{
    char err[256];
    if (rt_dirty_init(FD_BASE, err, sizeof err) != 0) {
        printf("INIT-FAILED %s\n", err);
        fflush(stdout);
        exit(2);
    }
}

static void *map_anon(size_t npages, int shared)
{
    void *p = mmap(NULL, npages * PG, PROT_READ | PROT_WRITE,
                   (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) { perror("mmap"); exit(3); }
    return p;
}

static uint64_t A(const void *p) { return (uint64_t)(uintptr_t)p; }

/* Scans [base, base+npages) with an output array of cap entries, following
 * *resume, into marks[] (1 = reported).  Checks the ranges are aligned,
 * inside, increasing and merged.  Returns the number of reported pages, or
 * -errno of the first failing call. */
static long scan_marks(void *base, size_t npages, unsigned char *marks, size_t cap)
{
    struct rt_dirty_range *out = calloc(cap, sizeof *out);
    uint64_t a = A(base), e = A(base) + npages * PG, prev_end = 0;
    long pages = 0;
    memset(marks, 0, npages);
    int calls = 0;
    while (a < e) {
        uint64_t resume = 0;
        long r = rt_dirty_scan(a, e, out, cap, &resume);
        if (r < 0) { free(out); return r; }
        CHECK((size_t)r <= cap, "r=%ld cap=%zu", r, cap);
        for (long i = 0; i < r; i++) {
            CHECK(out[i].start % PG == 0 && out[i].end % PG == 0 && out[i].start < out[i].end,
                  "bad range %lx-%lx", (unsigned long)out[i].start, (unsigned long)out[i].end);
            CHECK(out[i].start >= a && out[i].end <= e, "range %lx-%lx outside %lx-%lx",
                  (unsigned long)out[i].start, (unsigned long)out[i].end, (unsigned long)a,
                  (unsigned long)e);
            CHECK(out[i].start > prev_end || prev_end == 0 || (i == 0 && out[i].start >= prev_end),
                  "ranges not increasing/merged");
            prev_end = out[i].end;
            for (uint64_t p = out[i].start; p < out[i].end && p < e; p += PG) {
                size_t idx = (p - A(base)) / PG;
                CHECK(!marks[idx], "page %zu reported twice", idx);
                marks[idx] = 1;
                pages++;
            }
        }
        CHECK(resume > a && resume <= e, "resume %lx not in (%lx, %lx]", (unsigned long)resume,
              (unsigned long)a, (unsigned long)e);
        if ((size_t)r < cap) CHECK(resume == e, "short answer but resume != end");
        if (resume <= a) break;
        a = resume;
        if (++calls > 1000000) { CHECK(0, "scan does not progress"); break; }
    }
    free(out);
    return pages;
}

/* Compares marks with expected; prints the first differences. */
static void expect_pages(const char *what, const unsigned char *marks, const unsigned char *want,
                         size_t npages)
{
    size_t bad = 0, nw = 0, ng = 0;
    for (size_t i = 0; i < npages; i++) {
        nw += want[i] != 0;
        ng += marks[i] != 0;
        if (!marks[i] != !want[i]) {
            if (bad < 8) printf("  %s: page %zu reported=%d expected=%d\n", what, i, marks[i], want[i]);
            bad++;
        }
    }
    printf("check %s: reported=%zu expected=%zu mismatches=%zu\n", what, ng, nw, bad);
    CHECK(bad == 0, "%s: %zu mismatching pages", what, bad);
}

/* Scans and compares with a list of page indexes (terminated by -1). */
static void expect_list(const char *what, void *base, size_t npages, size_t cap, const long *list)
{
    unsigned char *marks = malloc(npages), *want = calloc(npages, 1);
    for (; *list >= 0; list++) want[*list] = 1;
    long r = scan_marks(base, npages, marks, cap);
    CHECK(r >= 0, "%s: scan failed: %s", what, strerror((int)-r));
    if (r >= 0) expect_pages(what, marks, want, npages);
    free(marks);
    free(want);
}

static void expect_none(const char *what, void *base, size_t npages)
{
    static const long none[] = { -1 };
    expect_list(what, base, npages, 64, none);
}

static void track_or_fail(const char *what, void *base, size_t npages)
{
    long r = rt_dirty_track(A(base), A(base) + npages * PG);
    CHECK(r == 0, "%s: track failed: %s", what, strerror((int)-r));
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Picks k distinct pages of n into want[]. */
static void pick(unsigned char *want, size_t n, size_t k)
{
    memset(want, 0, n);
    for (size_t got = 0; got < k;) {
        size_t i = rnd() % n;
        if (!want[i]) { want[i] = 1; got++; }
    }
}

static void write_pages(char *base, const unsigned char *want, size_t n, int val)
{
    for (size_t i = 0; i < n; i++)
        if (want[i]) base[i * PG + (rnd() % PG)] = (char)val;
}

static volatile char sink;

static void read_pages(const char *base, size_t n, size_t step)
{
    for (size_t i = 0; i < n; i += step) sink = base[i * PG];
}

/* ------------------------------------------------------------------------- */
static void mode_init(void)
{
    /* before init */
    static char pad[2 * PG] __attribute__((aligned(4096)));
    CHECK(rt_dirty_track(A(pad), A(pad) + PG) == -ENODEV, "track before init");
    CHECK(!rt_dirty_active(), "active before init");

    /* plain userfaultfd (without UFFD_USER_MODE_ONLY): who may? */
    long fd = syscall(SYS_userfaultfd, O_CLOEXEC);
    printf("fact plain_userfaultfd=%s\n", fd >= 0 ? "ok" : strerrorname_np(errno));
    if (fd >= 0) close((int)fd);
    fd = syscall(SYS_userfaultfd, O_CLOEXEC | UFFD_USER_MODE_ONLY);
    printf("fact user_mode_only_userfaultfd=%s\n", fd >= 0 ? "ok" : strerrorname_np(errno));
    if (fd >= 0) close((int)fd);

    int lo = open("/dev/null", O_RDONLY);
    close(lo);
    init_or_die();
    CHECK(rt_dirty_active(), "not active after init");
    int lo2 = open("/dev/null", O_RDONLY);
    CHECK(lo2 == lo, "init took a low descriptor (%d then %d)", lo, lo2);
    close(lo2);
    int owned = 0, owned_fds[4] = { -1, -1, -1, -1 };
    DIR *d = opendir("/proc/self/fd");
    struct dirent *de;
    while ((de = readdir(d))) {
        int n = atoi(de->d_name);
        if (de->d_name[0] == '.') continue;
        if (rt_dirty_owns_fd(n)) {
            CHECK(n >= FD_BASE, "owned fd %d below base", n);
            if (owned < 4) owned_fds[owned] = n;
            owned++;
            CHECK(fcntl(n, F_GETFD) & FD_CLOEXEC, "fd %d not close-on-exec", n);
        }
    }
    closedir(d);
    CHECK(owned == 2, "owns %d descriptors", owned);
    printf("fact fds=%d,%d\n", owned_fds[0], owned_fds[1]);
    CHECK(!rt_dirty_owns_fd(0) && !rt_dirty_owns_fd(-1), "owns_fd too wide");

    /* idempotent */
    char err[256];
    CHECK(rt_dirty_init(FD_BASE, err, sizeof err) == 0, "second init");
    CHECK(rt_dirty_owns_fd(owned_fds[0]) && rt_dirty_owns_fd(owned_fds[1]), "second init moved fds");

    /* argument checks */
    CHECK(rt_dirty_track(A(pad) + 1, A(pad) + PG) == -EINVAL, "unaligned track");
    struct rt_dirty_range out[4];
    uint64_t res;
    CHECK(rt_dirty_scan(A(pad), A(pad) + PG, out, 0, &res) == -EINVAL, "cap 0");
    /* tracking the same range twice, and a part of it */
    char *m = map_anon(16, 0);
    memset(m, 1, 16 * PG);
    track_or_fail("init-track", m, 16);
    track_or_fail("init-track-again", m, 16);
    track_or_fail("init-track-part", m + 4 * PG, 4);
    m[5 * PG] = 2;
    static const long l5[] = { 5, -1 };
    expect_list("init-after-double-track", m, 16, 4, l5);

    /* reset closes */
    rt_dirty_reset();
    CHECK(!rt_dirty_active(), "active after reset");
    CHECK(fcntl(owned_fds[0], F_GETFD) < 0 && fcntl(owned_fds[1], F_GETFD) < 0, "reset left fds open");
    CHECK(rt_dirty_scan(A(m), A(m) + PG, out, 4, &res) == -ENODEV, "scan after reset");

    /* a descriptor limit below the base: init fails cleanly */
    struct rlimit old, low = { 256, 256 };
    getrlimit(RLIMIT_NOFILE, &old);
    low.rlim_max = old.rlim_max;
    setrlimit(RLIMIT_NOFILE, &low);
    int r = rt_dirty_init(FD_BASE, err, sizeof err);
    printf("fact init_with_nofile_256=%d (%s)\n", r, err);
    CHECK(r == -1 && err[0], "init below the base should fail with a reason");
    CHECK(!rt_dirty_active(), "active after failed init");
    setrlimit(RLIMIT_NOFILE, &old);
    int fd_after = open("/dev/null", O_RDONLY);
    CHECK(fd_after == lo, "failed init leaked a descriptor (%d)", fd_after);
    close(fd_after);
    init_or_die();
    rt_dirty_reset();
}

static void mode_none(void)
{
    init_or_die();
    size_t n = 64 * 256; /* 64 MiB */
    char *m = map_anon(n, 0);
    memset(m, 7, n * PG / 2); /* half touched, half never */
    track_or_fail("none", m, n);
    read_pages(m, n, 1); /* reads of both halves report nothing */
    expect_none("none-64MiB", m, n);
    expect_none("none-64MiB-again", m, n);
}

static void mode_random(void)
{
    init_or_die();
    size_t n = 64 * 256, k = n / 100;
    unsigned char *want = malloc(n), *marks = malloc(n);
    /* touched before tracking */
    char *m = map_anon(n, 0);
    memset(m, 1, n * PG);
    track_or_fail("random", m, n);
    pick(want, n, k);
    write_pages(m, want, n, 2);
    long r = scan_marks(m, n, marks, 5); /* small output: many resumes (stack buffer path) */
    CHECK(r == (long)k, "scan returned %ld", r);
    expect_pages("random-1%-cap5", marks, want, n);
    expect_none("random-second-scan", m, n);
    pick(want, n, k);
    write_pages(m, want, n, 3);
    r = scan_marks(m, n, marks, 4096); /* in-place path */
    expect_pages("random-1%-cap4096", marks, want, n);
    pick(want, n, k);
    write_pages(m, want, n, 4);
    r = scan_marks(m, n, marks, 40); /* in-place path with resumes */
    expect_pages("random-1%-cap40", marks, want, n);
    expect_none("random-second-scan-2", m, n);

    /* never touched before tracking (write-protect markers on empty entries) */
    char *u = map_anon(n, 0);
    track_or_fail("random-untouched", u, n);
    read_pages(u, n, 3);
    pick(want, n, k);
    write_pages(u, want, n, 5);
    r = scan_marks(u, n, marks, 64);
    expect_pages("random-untouched-1%", marks, want, n);
    expect_none("random-untouched-second-scan", u, n);
    free(want);
    free(marks);
}

static void mode_twice(void)
{
    init_or_die();
    char *m = map_anon(16, 0);
    memset(m, 1, 16 * PG);
    track_or_fail("twice", m, 16);
    m[5 * PG + 10] = 1;
    m[5 * PG + 10] = 2;
    m[5 * PG + 4000] = 3;
    struct rt_dirty_range out[8];
    uint64_t res;
    long r = rt_dirty_scan(A(m), A(m) + 16 * PG, out, 8, &res);
    CHECK(r == 1 && out[0].start == A(m) + 5 * PG && out[0].end == A(m) + 6 * PG,
          "expected one range [5,6), got %ld", r);
    CHECK(res == A(m) + 16 * PG, "resume");
    expect_none("twice-rescan", m, 16);
    m[5 * PG] = 4;
    m[5 * PG] = 5;
    static const long l5[] = { 5, -1 };
    expect_list("twice-again", m, 16, 8, l5);
    /* adjacent pages merge into one range */
    m[7 * PG] = 1; m[8 * PG] = 1; m[9 * PG] = 1;
    r = rt_dirty_scan(A(m), A(m) + 16 * PG, out, 8, &res);
    CHECK(r == 1 && out[0].start == A(m) + 7 * PG && out[0].end == A(m) + 10 * PG, "merge 7-9: %ld", r);
}

static void mode_pipe(void)
{
    init_or_die();
    char *m = map_anon(16, 0);
    memset(m, 1, 8 * PG); /* 0..7 touched, 8..15 never */
    track_or_fail("pipe", m, 16);
    int p[2];
    CHECK(pipe(p) == 0, "pipe");
    static char src[3 * PG];
    for (size_t i = 0; i < sizeof src; i++) src[i] = (char)(i * 7 + 1);
    CHECK(write(p[1], src, sizeof src) == (ssize_t)sizeof src, "pipe write");
    ssize_t got = read(p[0], m + 2 * PG + 100, sizeof src); /* pages 2..5 */
    CHECK(got == (ssize_t)sizeof src, "read into protected buffer: %zd (%s)", got, strerror(errno));
    CHECK(memcmp(m + 2 * PG + 100, src, sizeof src) == 0, "data");
    CHECK(write(p[1], src, PG) == (ssize_t)PG, "pipe write 2");
    got = read(p[0], m + 10 * PG, PG); /* never-touched page 10 */
    CHECK(got == (ssize_t)PG, "read into untouched protected page: %zd", got);
    static const long l[] = { 2, 3, 4, 5, 10, -1 };
    expect_list("pipe-read", m, 16, 8, l);
    /* other kernel writes: clock_gettime (vDSO, user mode), pread of a file */
    struct timespec *ts = (struct timespec *)(m + 12 * PG);
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, ts); /* the real syscall */
    int fd = open("/proc/self/stat", O_RDONLY);
    CHECK(pread(fd, m + 14 * PG, 100, 0) > 0, "pread");
    close(fd);
    static const long l2[] = { 12, 14, -1 };
    expect_list("syscall-writes", m, 16, 8, l2);
    close(p[0]);
    close(p[1]);
}

static void heap_case(const char *what, char *p, size_t size)
{
    uint64_t a = (A(p) + PG - 1) & ~(PG - 1), e = (A(p) + size) & ~(PG - 1);
    size_t n = (e - a) / PG;
    memset(p, 1, size);
    long r = rt_dirty_track(a, e);
    CHECK(r == 0, "%s: track: %s", what, strerror((int)-r));
    unsigned char *want = malloc(n), *marks = malloc(n);
    pick(want, n, n / 100 + 1);
    write_pages((char *)(uintptr_t)a, want, n, 9);
    r = scan_marks((void *)(uintptr_t)a, n, marks, 32);
    CHECK(r >= 0, "%s: scan: %s", what, strerror((int)-r));
    expect_pages(what, marks, want, n);
    char again[64];
    snprintf(again, sizeof again, "%s-rescan", what);
    expect_none(again, (void *)(uintptr_t)a, n);
    free(want);
    free(marks);
}

static void mode_heap(void)
{
    init_or_die();
    size_t size = 8ul << 20;
    char *big = malloc(size); /* above the mmap threshold: its own mapping */
    heap_case("heap-malloc-mmapped", big, size);
    mallopt(M_MMAP_THRESHOLD, 512 << 20);
    void *brk0 = sbrk(0);
    char *h = malloc(size); /* now from the brk heap */
    void *brk1 = sbrk(0);
    int in_brk = (void *)h >= (void *)((char *)brk0 - (64 << 20)) && (void *)(h + size) <= brk1;
    printf("fact heap_from_brk=%d\n", in_brk);
    CHECK(in_brk, "8 MiB malloc not from the brk heap");
    heap_case("heap-brk", h, size);
    /* the whole [heap] VMA, while malloc keeps working */
    char *small[100];
    for (int i = 0; i < 100; i++) small[i] = malloc(1000);
    for (int i = 0; i < 100; i++) free(small[i]);
    free(h);
    free(big);
}

static void __attribute__((noinline)) stack_case(void)
{
    volatile char arr[1 << 20];
    for (size_t i = 0; i < sizeof arr; i += 64) arr[i] = 1;
    uint64_t a = (A((const void *)arr) + PG - 1) & ~(PG - 1);
    uint64_t e = (A((const void *)arr) + sizeof arr) & ~(PG - 1);
    size_t n = (e - a) / PG;
    long r = rt_dirty_track(a, e);
    CHECK(r == 0, "stack track: %s", strerror((int)-r));
    unsigned char want[256], marks[256];
    CHECK(n <= 256, "n");
    pick(want, n, 7);
    for (size_t i = 0; i < n; i++)
        if (want[i]) ((volatile char *)(uintptr_t)a)[i * PG + 17] = 5;
    r = scan_marks((void *)(uintptr_t)a, n, marks, 16);
    CHECK(r >= 0, "stack scan: %s", strerror((int)-r));
    expect_pages("stack", marks, want, n);
    expect_none("stack-rescan", (void *)(uintptr_t)a, n);
    sink = arr[0];
}

static void mode_stack(void)
{
    init_or_die();
    stack_case();
    /* the whole [stack] VMA: every page written by the calls below is found */
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    unsigned long s = 0, e = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, "[stack]")) sscanf(line, "%lx-%lx", &s, &e);
    fclose(f);
    CHECK(s && e, "no [stack]");
    long r = rt_dirty_track(s, e);
    CHECK(r == 0, "whole stack track: %s", strerror((int)-r));
    volatile char local[3 * PG];
    local[0] = 1;
    local[2 * PG] = 1;
    struct rt_dirty_range out[64];
    uint64_t res;
    r = rt_dirty_scan(s, e, out, 64, &res);
    CHECK(r > 0, "whole stack scan: %ld", r);
    int found0 = 0, found2 = 0;
    for (long i = 0; i < r; i++) {
        if (out[i].start <= A((const void *)&local[0]) && A((const void *)&local[0]) < out[i].end) found0 = 1;
        if (out[i].start <= A((const void *)&local[2 * PG]) && A((const void *)&local[2 * PG]) < out[i].end) found2 = 1;
    }
    CHECK(found0 && found2, "stack writes not reported");
    printf("fact whole_stack_ranges=%ld\n", r);
}

static int make_file(const char *name, size_t npages, char **path_out)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); exit(3); }
    char *buf = malloc(PG);
    for (size_t i = 0; i < npages; i++) {
        memset(buf, (int)('a' + i % 26), PG);
        if (pwrite(fd, buf, PG, (off_t)(i * PG)) != (ssize_t)PG) { perror("pwrite"); exit(3); }
    }
    free(buf);
    if (path_out) *path_out = path;
    return fd;
}

static void mode_privfile(void)
{
    init_or_die();
    size_t n = 32;
    int fd = make_file("priv.dat", n, NULL);
    char *m = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    CHECK(m != MAP_FAILED, "mmap");
    read_pages(m, 16, 1); /* 0..15 mapped from the page cache, 16..31 never */
    m[1 * PG] = 'X';       /* page 1 already copied-on-write before tracking */
    track_or_fail("privfile", m, n);
    read_pages(m, n, 1);
    m[1 * PG + 1] = 'Y';
    m[2 * PG] = 'Z';
    m[7 * PG] = 'Z';
    m[20 * PG + 5] = 'Z';
    m[25 * PG] = 'Z';
    static const long l[] = { 1, 2, 7, 20, 25, -1 };
    expect_list("privfile-cow", m, n, 3, l);
    char c;
    CHECK(pread(fd, &c, 1, 2 * PG) == 1 && c == 'c', "file changed by a private write");
    expect_none("privfile-rescan", m, n);
    close(fd);
}

static void mode_sharedfile(void)
{
    init_or_die();
    size_t n = 32;
    char *path;
    int fd = make_file("shared.dat", n, &path);
    char *m = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED, "mmap");
    read_pages(m, 8, 1);
    m[3 * PG] = '3'; /* dirty before tracking */
    track_or_fail("sharedfile", m, n);
    read_pages(m, n, 1);
    m[1 * PG] = 'X';
    m[9 * PG] = 'X';
    m[17 * PG] = 'X';
    m[30 * PG] = 'X';
    static const long l[] = { 1, 9, 17, 30, -1 };
    expect_list("sharedfile", m, n, 8, l);
    char c;
    CHECK(pread(fd, &c, 1, 9 * PG) == 1 && c == 'X', "shared write not in the file");
    CHECK(msync(m, n * PG, MS_SYNC) == 0, "msync");
    expect_none("sharedfile-after-msync", m, n);
    m[9 * PG + 1] = 'Y'; /* after writeback the page is clean and protected again */
    static const long l9[] = { 9, -1 };
    expect_list("sharedfile-write-after-msync", m, n, 8, l9);
    /* a write through the file, not the mapping: visible, not reported */
    CHECK(pwrite(fd, "W", 1, 4 * PG) == 1, "pwrite");
    CHECK(m[4 * PG] == 'W', "pwrite not visible in the mapping");
    unsigned char marks[32];
    long r = scan_marks(m, n, marks, 8);
    printf("fact sharedfile_pwrite_reported=%d\n", r > 0 && marks[4]);
    expect_none("sharedfile-pwrite-not-reported", m, n);
    /* read-only MAP_SHARED mapping of a file opened read-only */
    int rfd = open(path, O_RDONLY);
    char *ro = mmap(NULL, n * PG, PROT_READ, MAP_SHARED, rfd, 0);
    r = rt_dirty_track(A(ro), A(ro) + n * PG);
    printf("fact track_readonly_shared_file=%s\n", r == 0 ? "ok" : strerrorname_np((int)-r));
    CHECK(r == -EPERM, "read-only shared file mapping: %ld", r);
    /* the same file opened read-only, mapped MAP_PRIVATE: fine */
    char *rp = mmap(NULL, n * PG, PROT_READ, MAP_PRIVATE, rfd, 0);
    r = rt_dirty_track(A(rp), A(rp) + n * PG);
    CHECK(r == 0, "read-only private file mapping: %ld", r);
    close(rfd);
    close(fd);
}

static void mode_memfd(void)
{
    init_or_die();
    size_t n = 64;
    int fd = memfd_create("dirty-probe", MFD_CLOEXEC);
    CHECK(fd >= 0 && ftruncate(fd, (off_t)(n * PG)) == 0, "memfd");
    char *m = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *alias = mmap(NULL, n * PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(m != MAP_FAILED && alias != MAP_FAILED, "mmap");
    memset(m, 1, n / 2 * PG);
    track_or_fail("memfd", m, n);
    read_pages(m, n, 1);
    m[0] = 2;
    m[33 * PG] = 2;
    m[63 * PG + 4095] = 2;
    static const long l[] = { 0, 33, 63, -1 };
    expect_list("memfd", m, n, 8, l);
    alias[3 * PG] = 7; /* through another mapping of the same memfd */
    CHECK(m[3 * PG] == 7, "alias write not visible");
    unsigned char marks[64];
    long r = scan_marks(m, n, marks, 8);
    printf("fact memfd_alias_write_reported=%d\n", r > 0 && marks[3]);
    CHECK(r == 0, "alias write reported in the tracked mapping (%ld)", r);
    close(fd);
}

static void mode_shmanon(void)
{
    init_or_die();
    size_t n = 64;
    char *m = map_anon(n, 1);
    memset(m, 1, n / 2 * PG);
    track_or_fail("shmanon", m, n);
    read_pages(m, n, 1);
    m[5 * PG] = 2;
    m[40 * PG] = 2;
    m[41 * PG] = 2;
    static const long l[] = { 5, 40, 41, -1 };
    expect_list("shmanon", m, n, 8, l);
    /* a fork child writes the shared memory: the parent's tracking does not see it */
    pid_t pid = fork();
    if (pid == 0) {
        m[7 * PG] = 9;
        _exit(0);
    }
    int stt;
    waitpid(pid, &stt, 0);
    CHECK(m[7 * PG] == 9, "child write not visible");
    unsigned char marks[64];
    long r = scan_marks(m, n, marks, 8);
    printf("fact shmanon_child_write_reported=%d\n", r > 0 && marks[7]);
    CHECK(r == 0, "child's write reported (%ld)", r);
    m[7 * PG] = 10;
    static const long l7[] = { 7, -1 };
    expect_list("shmanon-parent-write", m, n, 8, l7);
}

static void mode_newmap(void)
{
    init_or_die();
    struct rt_dirty_range out[16];
    uint64_t res;
    char *a = map_anon(16, 0);
    memset(a, 1, 16 * PG);
    track_or_fail("newmap-a", a, 16);
    char *b = map_anon(16, 0); /* mapped after tracking started */
    memset(b, 1, 16 * PG);
    long r = rt_dirty_scan(A(b), A(b) + 16 * PG, out, 16, &res);
    printf("fact unregistered_scan=%s\n", r >= 0 ? "ok" : strerrorname_np((int)-r));
    CHECK(r == -EPERM, "scan of an unregistered mapping returned %ld", r);
    track_or_fail("newmap-b", b, 16);
    b[2 * PG] = 3;
    static const long l2[] = { 2, -1 };
    expect_list("newmap-b-after-track", b, 16, 8, l2);

    /* mprotect keeps the registration */
    a[1 * PG] = 4;
    CHECK(mprotect(a, 16 * PG, PROT_READ) == 0, "mprotect ro");
    CHECK(mprotect(a + 8 * PG, 8 * PG, PROT_READ | PROT_WRITE) == 0, "mprotect rw part");
    CHECK(mprotect(a, 8 * PG, PROT_READ | PROT_WRITE) == 0, "mprotect rw");
    a[3 * PG] = 4;
    a[12 * PG] = 4;
    static const long l3[] = { 1, 3, 12, -1 };
    expect_list("newmap-mprotect", a, 16, 8, l3);

    /* MAP_FIXED over a tracked mapping: the new one is not registered */
    char *f = mmap(a + 4 * PG, 4 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(f == a + 4 * PG, "map fixed");
    r = rt_dirty_scan(A(a), A(a) + 16 * PG, out, 16, &res);
    printf("fact map_fixed_replaced_scan=%s\n", r >= 0 ? "ok" : strerrorname_np((int)-r));
    CHECK(r == -EPERM, "scan over a MAP_FIXED replacement returned %ld", r);
    r = rt_dirty_scan(A(a), A(a) + 4 * PG, out, 16, &res); /* the untouched part still works */
    CHECK(r == 0, "scan of the remaining tracked part: %ld", r);

    /* mremap (moved): the moved mapping is not registered */
    char *c = map_anon(16, 0);
    memset(c, 1, 16 * PG);
    track_or_fail("newmap-c", c, 16);
    char *hole = map_anon(32, 0);
    char *moved = mremap(c, 16 * PG, 16 * PG, MREMAP_MAYMOVE | MREMAP_FIXED, hole + 8 * PG);
    CHECK(moved == hole + 8 * PG, "mremap");
    r = rt_dirty_scan(A(moved), A(moved) + 16 * PG, out, 16, &res);
    printf("fact mremap_moved_scan=%s\n", r >= 0 ? "ok" : strerrorname_np((int)-r));
    CHECK(r == -EPERM, "scan after mremap returned %ld", r);

    /* a failing scan over [tracked D][unregistered E] loses D's report */
    char *de = map_anon(32, 0);
    memset(de, 1, 32 * PG);
    track_or_fail("newmap-d", de, 16);
    munmap(de + 16 * PG, 16 * PG);
    char *e = mmap(de + 16 * PG, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    CHECK(e == de + 16 * PG, "map e");
    de[5 * PG] = 1;
    r = rt_dirty_scan(A(de), A(de) + 32 * PG, out, 16, &res);
    CHECK(r == -EPERM, "scan over D+E returned %ld", r);
    unsigned char marks[16];
    r = scan_marks(de, 16, marks, 8);
    int lost = r == 0;
    printf("fact failed_scan_loses_earlier_reports=%d\n", lost);
    CHECK(lost, "expected the failed scan to have re-protected D's page (r=%ld)", r);
}

#define PM_PRESENT_BIT (1ull << 63)
#define PM_FILE_BIT (1ull << 61)
static uint64_t pagemap_entry(const void *p)
{
    uint64_t v = 0;
    int fd = open("/proc/self/pagemap", O_RDONLY);
    if (pread(fd, &v, 8, (off_t)(A(p) / PG * 8)) != 8) v = 0;
    close(fd);
    return v;
}

static void mode_dontneed(void)
{
    init_or_die();
    /* 8 MiB aligned to 2 MiB, so a whole page table can be emptied */
    size_t n = 2048;
    char *raw = map_anon(n + 512, 0);
    char *m = (char *)((A(raw) + (2ul << 20) - 1) & ~((2ul << 20) - 1));
    memset(m, 1, n * PG);
    track_or_fail("dontneed", m, n);
    CHECK(madvise(m + 3 * PG, PG, MADV_DONTNEED) == 0, "madvise");
    CHECK(madvise(m + 10 * PG, 3 * PG, MADV_DONTNEED) == 0, "madvise");
    CHECK(madvise(m + 512 * PG, 512 * PG, MADV_DONTNEED) == 0, "madvise 2M");
    unsigned char *marks = malloc(n), *want = calloc(n, 1);
    want[3] = want[10] = want[11] = want[12] = 1;
    for (int i = 512; i < 1024; i++) want[i] = 1;
    long r = scan_marks(m, n, marks, 16);
    CHECK(r >= 0, "scan: %ld", r);
    int small = marks[3] && marks[10] && marks[11] && marks[12];
    int whole = 1;
    for (int i = 512; i < 1024; i++) whole &= marks[i];
    printf("fact dontneed_pages_reported=%d dontneed_2MiB_reported=%d\n", small, whole);
    expect_pages("dontneed-anon", marks, want, n);
    /* afterwards: reading them (zero page) reports nothing, writing does */
    read_pages(m, n, 1);
    CHECK(m[3 * PG] == 0 && m[600 * PG] == 0, "dropped pages not zero");
    expect_none("dontneed-read-after", m, n);
    m[3 * PG] = 1;
    m[600 * PG] = 1;
    static const long l[] = { 3, 600, -1 };
    expect_list("dontneed-write-after", m, n, 16, l);

    /* private file mapping: a dropped copy-on-write page goes back to the
     * file's content, but the zap leaves a write-protect marker in its place
     * (file VMAs keep markers), so it is NOT reported.  The caller has to see
     * it from pagemap instead: the page is no longer anonymous (PM_FILE). */
    int fd = make_file("dn.dat", 16, NULL);
    char *f = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    read_pages(f, 16, 1);
    f[2 * PG] = 'Q'; /* copied before tracking */
    CHECK(!(pagemap_entry(f + 2 * PG) & PM_FILE_BIT), "copied page not anonymous");
    track_or_fail("dontneed-file", f, 16);
    CHECK(madvise(f + 2 * PG, PG, MADV_DONTNEED) == 0, "madvise f2");
    CHECK(madvise(f + 5 * PG, PG, MADV_DONTNEED) == 0, "madvise f5"); /* never copied */
    CHECK(f[2 * PG] == 'c', "dropped private page not back to the file");
    unsigned char fm[16];
    r = scan_marks(f, 16, fm, 8);
    CHECK(r >= 0, "scan: %ld", r);
    printf("fact dontneed_private_file_cow_reported=%d dontneed_private_file_clean_reported=%d\n",
           fm[2], fm[5]);
    CHECK(r == 0, "expected no report for dropped pages of a private file mapping (%ld)", r);
    uint64_t pme = pagemap_entry(f + 2 * PG);
    printf("fact dontneed_private_file_cow_now_file_page=%d\n", !!(pme & PM_FILE_BIT));
    CHECK((pme & PM_PRESENT_BIT) && (pme & PM_FILE_BIT), "pagemap %llx", (unsigned long long)pme);
    f[2 * PG] = 'R'; /* copied again: reported */
    static const long l2[] = { 2, -1 };
    expect_list("dontneed-file-recopy", f, 16, 8, l2);

    /* MADV_REMOVE (hole punch) of a memfd page: zeroed, and not reported either */
    int mfd = memfd_create("dn", MFD_CLOEXEC);
    CHECK(ftruncate(mfd, 16 * PG) == 0, "ftruncate");
    char *sm = mmap(NULL, 16 * PG, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    memset(sm, 1, 16 * PG);
    track_or_fail("remove-memfd", sm, 16);
    CHECK(madvise(sm + 4 * PG, PG, MADV_REMOVE) == 0, "madvise remove");
    CHECK(sm[4 * PG] == 0, "removed memfd page not zero");
    r = scan_marks(sm, 16, fm, 8);
    printf("fact madv_remove_memfd_reported=%d\n", r > 0 && fm[4]);
    CHECK(r == 0, "MADV_REMOVE reported (%ld)", r);
    close(mfd);
    close(fd);
    free(marks);
    free(want);
}

static void mode_fork(void)
{
    init_or_die();
    size_t n = 64;
    char *m = map_anon(n, 0);
    memset(m, 1, n * PG);
    track_or_fail("fork", m, n);
    m[1 * PG] = 2;
    int pfd[2];
    CHECK(pipe(pfd) == 0, "pipe");
    pid_t pid = fork();
    if (pid == 0) {
        close(pfd[0]);
        failures = 0;
        int ok = 1;
        struct rt_dirty_range out[8];
        uint64_t res;
        /* inherited state: refused, it would act on the parent */
        if (rt_dirty_active()) ok = 0, printf("FAIL child: active before reset\n");
        long r = rt_dirty_scan(A(m), A(m) + n * PG, out, 8, &res);
        if (r != -ECHILD) ok = 0, printf("FAIL child: inherited scan returned %ld\n", r);
        r = rt_dirty_track(A(m), A(m) + n * PG);
        if (r != -ECHILD) ok = 0, printf("FAIL child: inherited track returned %ld\n", r);
        rt_dirty_reset();
        init_or_die();
        r = rt_dirty_scan(A(m), A(m) + n * PG, out, 8, &res);
        printf("fact child_scan_before_track=%s\n", r >= 0 ? "ok" : strerrorname_np((int)-r));
        if (r != -EPERM) ok = 0, printf("FAIL child: registration inherited? scan %ld\n", r);
        track_or_fail("child", m, n);
        m[5 * PG] = 3;
        m[6 * PG] = 3;
        static const long l[] = { 5, 6, -1 };
        expect_list("fork-child", m, n, 8, l);
        ok = ok && failures == 0;
        fflush(stdout);
        if (write(pfd[1], ok ? "1" : "0", 1) != 1) _exit(4);
        _exit(ok ? 0 : 1);
    }
    close(pfd[1]);
    m[2 * PG] = 2; /* copy-on-write after fork, in the parent */
    char okc = '0';
    CHECK(read(pfd[0], &okc, 1) == 1 && okc == '1', "child checks failed");
    int stt;
    waitpid(pid, &stt, 0);
    CHECK(WIFEXITED(stt) && WEXITSTATUS(stt) == 0, "child status %d", stt);
    CHECK(rt_dirty_active(), "parent not active");
    static const long l[] = { 1, 2, -1 };
    expect_list("fork-parent", m, n, 8, l);
    m[9 * PG] = 2;
    static const long l9[] = { 9, -1 };
    expect_list("fork-parent-after", m, n, 8, l9);
    close(pfd[0]);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void mode_bench(size_t mib)
{
    init_or_die();
    size_t n = mib * 256;
    char *m = map_anon(n, 0);
    madvise(m, n * PG, MADV_NOHUGEPAGE);
    memset(m, 1, n * PG);
    double t0 = now();
    long r = rt_dirty_track(A(m), A(m) + n * PG);
    double t1 = now();
    CHECK(r == 0, "track");
    printf("bench track (register + write-protect) %zu MiB touched: %.2f ms\n", mib, (t1 - t0) * 1e3);
    size_t cap = 1 << 16;
    struct rt_dirty_range *out = malloc(cap * sizeof *out);
    uint64_t res;
    t0 = now();
    r = rt_dirty_scan(A(m), A(m) + n * PG, out, cap, &res);
    t1 = now();
    CHECK(r == 0, "clean scan %ld", r);
    printf("bench scan %zu MiB clean: %.3f ms\n", mib, (t1 - t0) * 1e3);

    unsigned char *want = malloc(n);
    pick(want, n, n / 100);
    size_t *idx = malloc(n / 100 * sizeof *idx), k = 0;
    for (size_t i = 0; i < n; i++)
        if (want[i]) idx[k++] = i;
    t0 = now();
    for (size_t i = 0; i < k; i++) m[idx[i] * PG] = 2; /* first writes: protected */
    t1 = now();
    for (size_t i = 0; i < k; i++) m[idx[i] * PG] = 3; /* same pages again: unprotected */
    double t2 = now();
    printf("bench first write to a protected page: %.0f ns (a write to the same pages afterwards: %.0f ns) [%zu pages]\n",
           (t1 - t0) / k * 1e9, (t2 - t1) / k * 1e9, k);
    t0 = now();
    r = rt_dirty_scan(A(m), A(m) + n * PG, out, cap, &res);
    t1 = now();
    CHECK(r > 0 && (size_t)r <= k, "dirty scan %ld", r);
    printf("bench scan %zu MiB with 1%% dirty (%zu pages, %ld ranges): %.3f ms\n", mib, k, r, (t1 - t0) * 1e3);

    /* every page written once: per-page fault cost on a larger sample */
    t0 = now();
    for (size_t i = 0; i < n; i++) m[i * PG] = 4;
    t1 = now();
    printf("bench first write, all %zu pages sequentially: %.0f ns per page\n", n, (t1 - t0) / n * 1e9);
    t0 = now();
    r = rt_dirty_scan(A(m), A(m) + n * PG, out, cap, &res);
    t1 = now();
    printf("bench scan %zu MiB 100%% dirty (%ld ranges): %.3f ms\n", mib, r, (t1 - t0) * 1e3);
    t0 = now();
    r = rt_dirty_track(A(m), A(m) + n * PG);
    t1 = now();
    printf("bench re-track (already registered) %zu MiB: %.2f ms\n", mib, (t1 - t0) * 1e3);
    free(idx);
    free(want);
    free(out);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODE [DIR|MiB]\n", argv[0]);
        return 64;
    }
    const char *mode = argv[1];
    if (argc > 2) dir = argv[2];
    printf("uid %d mode %s\n", (int)getuid(), mode);
    if (!strcmp(mode, "init")) mode_init();
    else if (!strcmp(mode, "none")) mode_none();
    else if (!strcmp(mode, "random")) mode_random();
    else if (!strcmp(mode, "twice")) mode_twice();
    else if (!strcmp(mode, "pipe")) mode_pipe();
    else if (!strcmp(mode, "heap")) mode_heap();
    else if (!strcmp(mode, "stack")) mode_stack();
    else if (!strcmp(mode, "privfile")) mode_privfile();
    else if (!strcmp(mode, "sharedfile")) mode_sharedfile();
    else if (!strcmp(mode, "memfd")) mode_memfd();
    else if (!strcmp(mode, "shmanon")) mode_shmanon();
    else if (!strcmp(mode, "newmap")) mode_newmap();
    else if (!strcmp(mode, "dontneed")) mode_dontneed();
    else if (!strcmp(mode, "fork")) mode_fork();
    else if (!strcmp(mode, "bench")) mode_bench(argc > 2 ? (size_t)atol(argv[2]) : 1024);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 64;
    }
    if (failures) {
        printf("FAILED %s: %d checks\n", mode, failures);
        return 1;
    }
    printf("PASS %s\n", mode);
    return 0;
}
