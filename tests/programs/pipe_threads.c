/* pipe_threads: a producer and a consumer thread over one pipe.
 *
 *   pipe_threads RECORDS OUTFILE
 *
 * Prints `start`.  The producer thread writes records 0..RECORDS-1 (8-byte
 * header: number and length, then 1..2000 bytes from a fixed generator)
 * into a 16 KiB pipe with blocking writes; the consumer thread reads them
 * with blocking reads, pausing 1 ms every 8 records, checks each (`LOST` and
 * exit 3 on a mismatch), and appends `NUMBER CHECKSUM` (FNV-1a of the
 * record's bytes) as one line to OUTFILE with write(2).  The pipe is nearly
 * always full, the producer blocked in a write (often with part of a record
 * written), when a checkpoint comes.  Prints `consumed N` every 2000 records and at
 * the end `done records N checksum X` (FNV-1a of every byte read): the same
 * for every run, as is OUTFILE.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAXLEN 2000

static int p[2], out;
static long nrecords;
static uint64_t total = 1469598103934665603ull;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static size_t record(uint64_t k, unsigned char *buf)
{
    size_t len = 1 + mix(k * 7 + 3) % MAXLEN;
    uint64_t s = mix(k ^ 0x5a5a5a);
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) s = mix(s);
        buf[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
    return len;
}

static void lost(const char *what, long k)
{
    printf("LOST %s at record %ld\n", what, k);
    fflush(stdout);
    exit(3);
}

static void write_all(int fd, const void *buf, size_t len)
{
    const char *q = buf;
    while (len) {
        ssize_t n = write(fd, q, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { perror("write"); exit(1); }
        q += n;
        len -= (size_t)n;
    }
}

static void read_exact(int fd, void *buf, size_t len, long k)
{
    char *q = buf;
    while (len) {
        ssize_t n = read(fd, q, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) lost(n ? "data (read failed)" : "data (end of file)", k);
        q += n;
        len -= (size_t)n;
    }
}

static void *producer(void *unused)
{
    (void)unused;
    static unsigned char buf[MAXLEN + 8];
    for (long k = 0; k < nrecords; k++) {
        size_t len = record((uint64_t)k, buf + 8);
        uint32_t hdr[2] = {(uint32_t)k, (uint32_t)len};
        memcpy(buf, hdr, 8);
        write_all(p[1], buf, len + 8);
    }
    return NULL;
}

static void *consumer(void *unused)
{
    (void)unused;
    static unsigned char buf[MAXLEN], want[MAXLEN];
    for (long k = 0; k < nrecords; k++) {
        uint32_t hdr[2];
        read_exact(p[0], hdr, 8, k);
        size_t len = record((uint64_t)k, want);
        if (hdr[0] != (uint32_t)k || hdr[1] != len) lost("header", k);
        read_exact(p[0], buf, len, k);
        if (memcmp(buf, want, len)) lost("bytes", k);
        uint64_t h = 1469598103934665603ull;
        for (size_t i = 0; i < len; i++) {
            h = (h ^ buf[i]) * 1099511628211ull;
            total = (total ^ buf[i]) * 1099511628211ull;
        }
        char line[64];
        int n = snprintf(line, sizeof line, "%ld %016" PRIx64 "\n", k, h);
        write_all(out, line, (size_t)n);
        if (k % 8 == 7) {
            struct timespec ts = {0, 1000000};
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
        }
        if (k % 2000 == 1999) {
            printf("consumed %ld\n", k + 1);
            fflush(stdout);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: pipe_threads RECORDS OUTFILE\n");
        return 2;
    }
    nrecords = atol(argv[1]);
    out = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (out < 0 || pipe2(p, O_CLOEXEC) < 0 || fcntl(p[1], F_SETPIPE_SZ, 16384) < 0) {
        perror("setup");
        return 1;
    }
    printf("start\n");
    fflush(stdout);
    pthread_t tp, tc;
    if (pthread_create(&tc, NULL, consumer, NULL) || pthread_create(&tp, NULL, producer, NULL)) {
        fprintf(stderr, "pthread_create failed\n");
        return 1;
    }
    pthread_join(tp, NULL);
    pthread_join(tc, NULL);
    printf("done records %ld checksum %016" PRIx64 "\n", nrecords, total);
    return 0;
}
