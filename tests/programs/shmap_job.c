/* shmap_job: stores into a MAP_SHARED mapping of a file, checkpointing
 * itself through the C API (link with -llazarus).
 *
 *   shmap_job FILE SRC STEPS PAGES EVERY
 *
 * FILE (a multiple of 4 KiB, at least 1 MiB) is mapped MAP_SHARED read-write
 * whole.  Step s = 0..STEPS-1 changes PAGES pages chosen from s (a stretch
 * of 1..4096-off bytes at an offset in the page, never crossing it, each
 * byte XORed with a value: what a step leaves depends on what was there, so
 * a page not rolled back exactly shows in the end), and besides:
 *   s % 7 == 3    msync(MS_SYNC) of the whole mapping
 *   s % 11 == 5   pread() of 2 pages of SRC straight into the mapping (the
 *                 kernel writes them)
 *   s % 13 == 6   a forked child XORs 2 pages through the inherited mapping,
 *                 then exits (waited for)
 *   s % 25 == 24  the file grows by 1 MiB + 8 KiB (ftruncate), then is mapped
 *                 whole again: mremap(MREMAP_MAYMOVE) or munmap + mmap, in turn
 *   s % 40 == 39  the file is mapped 12 KiB shorter, then cut to that size
 * After step s with s % EVERY == EVERY-1 it calls lazarus_checkpoint().  So
 * the pages a step changes are at most PAGES + 2 + 2 + 3, and the file's
 * content at the end depends only on the arguments.  Prints
 *   ckpt S I H    after a checkpoint at step S got index I, H a digest of
 *                 the mapped file then (ckpt S RI H after a restart from I,
 *                 ckpt S - H without Lazarus)
 *   done SIZE H   at the end
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lazarus.h"

static uint64_t rnd(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static char *map;
static size_t size; /* the file's and the mapping's */
static int fd;

static uint64_t digest(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    const uint64_t *w = (const uint64_t *)map;
    for (size_t i = 0; i < size / 8; i++) h = (h ^ w[i]) * 0x100000001b3ull;
    return h;
}

static char *remap(size_t newsize, int move)
{
    char *m;
    if (move) {
        m = mremap(map, size, newsize, MREMAP_MAYMOVE);
        if (m == MAP_FAILED) die("mremap");
    } else {
        if (munmap(map, size) < 0) die("munmap");
        m = mmap(NULL, newsize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) die("mmap");
    }
    return m;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: shmap_job FILE SRC STEPS PAGES EVERY\n");
        return 2;
    }
    long steps = atol(argv[3]), pages = atol(argv[4]), every = atol(argv[5]);
    fd = open(argv[1], O_RDWR);
    int src = open(argv[2], O_RDONLY);
    if (fd < 0 || src < 0) die("open");
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size < (1 << 20) || st.st_size % 4096) die("FILE size");
    size = (size_t)st.st_size;
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) die("mmap");
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct timespec nap = {0, 3 * 1000 * 1000};
    for (long s = 0; s < steps; s++) {
        uint64_t x = (uint64_t)s * 7919 + 17;
        size_t npages = size / 4096;
        for (long k = 0; k < pages; k++) {
            size_t page = rnd(&x) % npages, off = rnd(&x) % 4000, len = 1 + rnd(&x) % (4096 - off);
            unsigned char b = (unsigned char)rnd(&x);
            for (size_t i = 0; i < len; i++) map[page * 4096 + off + i] ^= (char)(b + i);
        }
        if (s % 7 == 3 && msync(map, size, MS_SYNC) < 0) die("msync");
        if (s % 11 == 5) {
            size_t page = rnd(&x) % (npages - 1);
            if (pread(src, map + page * 4096, 8192, (off_t)(rnd(&x) % 62) * 4096) != 8192) die("pread into the mapping");
        }
        if (s % 13 == 6) {
            size_t a = rnd(&x) % npages, b = rnd(&x) % npages;
            int c = (int)(rnd(&x) & 0xff);
            pid_t p = fork();
            if (p < 0) die("fork");
            if (p == 0) {
                for (int i = 0; i < 4096; i++) map[a * 4096 + i] ^= (char)(c + i);
                for (int i = 100; i < 300; i++) map[b * 4096 + i] ^= (char)(c ^ 0x55);
                _exit(0);
            }
            int status;
            if (waitpid(p, &status, 0) != p || status != 0) die("child");
        }
        if (s % 25 == 24) {
            size_t ns = size + (1 << 20) + 8192;
            if (ftruncate(fd, (off_t)ns) < 0) die("ftruncate up");
            map = remap(ns, (s / 25) % 2);
            size = ns;
        }
        if (s % 40 == 39) {
            size_t ns = size - 12288;
            map = remap(ns, (s / 40) % 2);
            size = ns;
            if (ftruncate(fd, (off_t)ns) < 0) die("ftruncate down");
        }
        if (s % every == every - 1) {
            unsigned long long idx = 0;
            int r = lazarus_checkpoint(&idx);
            if (r == LAZARUS_CONTINUED) printf("ckpt %ld %llu %016llx\n", s, idx, (unsigned long long)digest());
            else if (r == LAZARUS_RESTARTED) printf("ckpt %ld R%llu %016llx\n", s, idx, (unsigned long long)digest());
            else if (r == LAZARUS_INACTIVE) printf("ckpt %ld - %016llx\n", s, (unsigned long long)digest());
            else { fprintf(stderr, "checkpoint at step %ld failed\n", s); return 3; }
        }
        nanosleep(&nap, NULL);
    }
    if (msync(map, size, MS_SYNC) < 0) die("msync");
    printf("done %zu %016llx\n", size, (unsigned long long)digest());
    return 0;
}
