/* pipe_records: one thread, one pipe, records always in flight.
 *
 *   pipe_records ROUNDS [SLEEP_US]
 *
 * Makes a pipe of 128 KiB (F_SETPIPE_SZ), its read end O_NONBLOCK, its write
 * end FD_CLOEXEC, a dup D of the read end (one open file with it) and a
 * second, blocking, read description B opened on /proc/self/fd/R, and prints
 * `start fds R W D B`.  Reads go through R and D in turn.  Round r writes
 * batch r (about 16 records of 1..3000 bytes, from a fixed generator) into
 * the pipe, sleeps SLEEP_US (default 2000) with the batch in flight, then
 * reads batch r-1 back, so one batch or two are always in the pipe.  Every
 * record is checked against the generator (`LOST` and exit 3 on a mismatch
 * or a missing byte); once a batch is read, the pipe must be empty: the read
 * must fail with EAGAIN.  The descriptors' flags, which of them share an
 * open file (kcmp) and the pipe's size are checked every round (`FLAGS` and
 * exit 3).  Prints `round N` every 100 rounds and at the end `records N
 * bytes B checksum X`: the same for every run with the same ROUNDS.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PIPE_SIZE (128 * 1024)
#define BATCH 16
#define MAXLEN 3000

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* record k: its length and its bytes, from k alone */
static size_t record(uint64_t k, unsigned char *buf)
{
    size_t len = 1 + mix(k) % MAXLEN;
    uint64_t s = mix(k ^ 0xabcdef);
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) s = mix(s);
        buf[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
    return len;
}

static void lost(const char *what, uint64_t k)
{
    printf("LOST %s at record %" PRIu64 "\n", what, k);
    fflush(stdout);
    exit(3);
}

static int same_file(int a, int b)
{
    pid_t me = getpid();
    return syscall(SYS_kcmp, me, me, KCMP_FILE, a, b) == 0;
}

static void check_flags(int r, int w, int d, int b)
{
    int fr = fcntl(r, F_GETFL), fw = fcntl(w, F_GETFL), fb = fcntl(b, F_GETFL);
    int dr = fcntl(r, F_GETFD), dw = fcntl(w, F_GETFD);
    if ((fr & O_ACCMODE) != O_RDONLY || !(fr & O_NONBLOCK) || (fw & O_ACCMODE) != O_WRONLY || (fw & O_NONBLOCK) ||
        (dr & FD_CLOEXEC) || !(dw & FD_CLOEXEC) || fcntl(w, F_GETPIPE_SZ) != PIPE_SIZE || (fb & O_ACCMODE) != O_RDONLY ||
        (fb & O_NONBLOCK) || !same_file(r, d) || same_file(r, b) || same_file(r, w)) {
        printf("FLAGS read %#x/%d write %#x/%d second reader %#x size %d shared %d/%d\n", fr, dr, fw, dw, fb,
               fcntl(w, F_GETPIPE_SZ), same_file(r, d), same_file(r, b));
        fflush(stdout);
        exit(3);
    }
}

static void write_all(int fd, const unsigned char *p, size_t len)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { perror("write"); exit(1); }
        p += n;
        len -= (size_t)n;
    }
}

static void read_exact(int fd, unsigned char *p, size_t len, uint64_t k)
{
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) lost("data (the pipe is empty)", k);
        if (n <= 0) lost("data (end of file)", k);
        p += n;
        len -= (size_t)n;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pipe_records ROUNDS [SLEEP_US]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    long sleep_us = argc > 2 ? atol(argv[2]) : 2000;
    int p[2];
    if (pipe2(p, 0) < 0 || fcntl(p[1], F_SETPIPE_SZ, PIPE_SIZE) < 0 || fcntl(p[0], F_SETFL, O_NONBLOCK) < 0 ||
        fcntl(p[1], F_SETFD, FD_CLOEXEC) < 0) {
        perror("pipe");
        return 1;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
    int d = dup(p[0]), b = open(path, O_RDONLY);
    if (d < 0 || b < 0) {
        perror("dup");
        return 1;
    }
    printf("start fds %d %d %d %d\n", p[0], p[1], d, b);
    fflush(stdout);
    static unsigned char buf[MAXLEN + 16], want[MAXLEN];
    uint64_t checksum = 1469598103934665603ull, bytes = 0, records = 0;
    for (long r = 0; r <= rounds; r++) {
        check_flags(p[0], p[1], d, b);
        if (r < rounds)
            for (uint64_t k = (uint64_t)r * BATCH; k < (uint64_t)(r + 1) * BATCH; k++) {
                size_t len = record(k, buf + 8);
                uint32_t hdr[2] = {(uint32_t)k, (uint32_t)len};
                memcpy(buf, hdr, 8);
                write_all(p[1], buf, len + 8);
            }
        struct timespec ts = {0, sleep_us * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
        if (r == 0) continue;
        for (uint64_t k = (uint64_t)(r - 1) * BATCH; k < (uint64_t)r * BATCH; k++) {
            uint32_t hdr[2];
            int rd = k % 2 ? d : p[0];
            read_exact(rd, (unsigned char *)hdr, 8, k);
            size_t len = record(k, want);
            if (hdr[0] != (uint32_t)k || hdr[1] != len) lost("header", k);
            read_exact(rd, buf, len, k);
            if (memcmp(buf, want, len)) lost("bytes", k);
            for (size_t i = 0; i < len; i++) checksum = (checksum ^ buf[i]) * 1099511628211ull;
            bytes += len;
            records++;
        }
        if (r == rounds) { /* all read: the pipe is empty, and says so */
            ssize_t n = read(p[0], buf, 1);
            if (n != -1 || errno != EAGAIN) lost("the end (the pipe is not empty, or blocks)", records);
        }
        if (r % 100 == 0) {
            printf("round %ld\n", r);
            fflush(stdout);
        }
    }
    printf("records %" PRIu64 " bytes %" PRIu64 " checksum %016" PRIx64 "\n", records, bytes, checksum);
    return 0;
}
