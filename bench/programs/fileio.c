/* fileio: the read and overwrite workloads of bench/files_io.py: what fio
 * does with its psync engine, in one process and one thread. (fio runs its
 * job in a child process, with helper threads and a pipe; under `lazarus run`
 * every checkpoint of it fails, so it cannot be measured there.)
 *
 *   fileio [-w WARMUP] [-n OPS | -t SECONDS] [-f FLOOR] MODE FILE BS
 *
 *   MODE seqread    pread() of BS bytes at 0, BS, 2*BS, ... wrapping at the
 *                   end of FILE                      (fio rw=read)
 *   MODE randread   pread() of BS bytes at BS-aligned offsets in a random
 *                   order that visits every block once per pass, a new
 *                   order each pass                  (fio rw=randread, its
 *                   default random map)
 *   MODE randwrite  the same with pwrite(), never extending FILE, no fsync
 *                   (fio rw=randwrite end_fsync=0)
 *
 * -f FLOOR (randwrite): before each pwrite, copy the BS bytes it will
 * overwrite from a read-only shared mapping of FILE into a shared mapping of
 * FLOOR (made FILE's size, its pages allocated and made writable before the
 * warm-up), one after the other: the floor of an undo that keeps the old
 * bytes in a file (bench/reflink_io.py, files_io.py).
 *
 * FILE must exist; its size rounded down to BS is used. With -w the same
 * loop first runs untimed for WARMUP seconds (so that the timed part starts
 * after the first checkpoint of `lazarus run -i 1`, in the steady state),
 * then the timed part goes on from there: OPS more operations (-n) or
 * SECONDS seconds (-t, checked every 64 ops). The order of the offsets
 * depends only on the op number. The timed region is the loop alone (FILE
 * is opened before it).
 *
 * Prints one line:
 *   ops=N bytes=B seconds=S t0_ns=T0 t1_ns=T1 cpu=C
 * (T0, T1: CLOCK_REALTIME at the start and end of the timed region; C: the
 * process's CPU time in it, user and system: on a loaded machine a steadier
 * figure than the wall time, which counts the waits for a CPU). Exit 0,
 * 1 on an I/O error, 2 on bad usage.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"

/* A bijection of [0, 2^bits) keyed by `key`: xor, odd multiplications and
 * xorshifts, each invertible modulo 2^bits. */
static uint64_t mix(uint64_t x, uint64_t key, unsigned bits)
{
    uint64_t mask = bits >= 64 ? ~0ull : (1ull << bits) - 1;
    unsigned sh = bits / 2 + 1;
    x = (x ^ key) & mask;
    x = (x * 0x9e3779b97f4a7c15ull) & mask;
    x ^= x >> sh;
    x = (x * 0xbf58476d1ce4e5b9ull) & mask;
    x ^= x >> sh;
    x = (x * 0x94d049bb133111ebull) & mask;
    x ^= x >> sh;
    return x;
}

/* The block of op number i: a permutation of [0, nblocks) per pass, by
 * cycle-walking the bijection of the enclosing power of two. */
static uint64_t rand_block(uint64_t i, uint64_t nblocks, unsigned bits)
{
    uint64_t pass = i / nblocks;
    uint64_t key = (pass + 1) * 0xd1b54a32d192ed03ull;
    uint64_t x = i % nblocks;
    do
        x = mix(x, key, bits);
    while (x >= nblocks);
    return x;
}

static void usage(void)
{
    fprintf(stderr, "usage: fileio [-w WARMUP] [-n OPS | -t SECONDS] [-f FLOOR] "
                    "seqread|randread|randwrite FILE BS\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double seconds = 0, warmup = 0;
    unsigned long long ops = 0;
    const char *floor_path = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "w:n:t:f:")) != -1) {
        if (opt == 'f')
            floor_path = optarg;
        else if (opt == 'w')
            warmup = strtod(optarg, NULL);
        else if (opt == 'n')
            ops = strtoull(optarg, NULL, 10);
        else if (opt == 't')
            seconds = strtod(optarg, NULL);
        else
            usage();
    }
    if (argc - optind != 3 || (ops == 0) == (seconds <= 0))
        usage();
    const char *mode = argv[optind], *path = argv[optind + 1];
    size_t bs = strtoull(argv[optind + 2], NULL, 10);
    int seq = strcmp(mode, "seqread") == 0;
    int wr = strcmp(mode, "randwrite") == 0;
    if ((!seq && !wr && strcmp(mode, "randread") != 0) || bs == 0)
        usage();

    int fd = open(path, wr ? O_RDWR : O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror("fileio: open");
        return 1;
    }
    uint64_t nblocks = (uint64_t)st.st_size / bs;
    if (nblocks == 0) {
        fprintf(stderr, "fileio: %s is smaller than one block\n", path);
        return 1;
    }
    unsigned bits = 1;
    while ((1ull << bits) < nblocks)
        bits++;

    /* -f: the old bytes' copy, into pages ready for it */
    const unsigned char *view = NULL;
    unsigned char *floor = NULL;
    if (floor_path) {
        int ffd = open(floor_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        if (!wr || ffd < 0 || posix_fallocate(ffd, 0, st.st_size) != 0) {
            fprintf(stderr, "fileio: -f needs randwrite and a file it can make\n");
            return 1;
        }
        view = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        floor = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, ffd, 0);
        if (view == MAP_FAILED || floor == MAP_FAILED || madvise(floor, st.st_size, MADV_POPULATE_WRITE) != 0) {
            perror("fileio: -f");
            return 1;
        }
        close(ffd);
    }

    unsigned char *buf = aligned_alloc(4096, (bs + 4095) / 4096 * 4096);
    if (!buf) {
        fprintf(stderr, "fileio: cannot allocate %zu bytes\n", bs);
        return 2;
    }
    uint64_t x = 0x243f6a8885a308d3ull; /* xorshift64: incompressible data */
    for (size_t i = 0; i + 8 <= bs; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }

    /* Untimed warm-up, then the timed part, both through the same loop. */
    unsigned long long i = 0, first = 0;
    double t0 = mono_s(), end = t0 + warmup, c0 = cpu_s();
    long long t0_ns = real_ns();
    for (int timed = warmup > 0 ? 0 : 1; timed < 2; timed++) {
        if (timed) {
            first = i;
            t0_ns = real_ns();
            t0 = mono_s();
            c0 = cpu_s();
            end = t0 + seconds;
        }
        for (;; i++) {
            if (timed && ops ? i - first >= ops : ((i & 63) == 0 && mono_s() >= end))
                break;
            uint64_t block = seq ? i % nblocks : rand_block(i, nblocks, bits);
            off_t off = (off_t)(block * bs);
            ssize_t n;
            if (wr) {
                if (floor)
                    memcpy(floor + (i % nblocks) * bs, view + off, bs);
                memcpy(buf, &i, sizeof i); /* every write differs */
                n = pwrite(fd, buf, bs, off);
            } else {
                n = pread(fd, buf, bs, off);
            }
            if (n < 0 && errno == EINTR) {
                i--;
                continue;
            }
            if (n != (ssize_t)bs) {
                if (n < 0)
                    perror(wr ? "fileio: pwrite" : "fileio: pread");
                else
                    fprintf(stderr, "fileio: short %s at %lld\n", mode, (long long)off);
                return 1;
            }
        }
    }
    double t1 = mono_s(), c1 = cpu_s();
    long long t1_ns = real_ns();
    close(fd);

    printf("ops=%llu bytes=%llu seconds=%.6f t0_ns=%lld t1_ns=%lld cpu=%.6f\n", i - first,
           (i - first) * (unsigned long long)bs, t1 - t0, t0_ns, t1_ns, c1 - c0);
    return fflush(stdout) == 0 ? 0 : 1;
}
