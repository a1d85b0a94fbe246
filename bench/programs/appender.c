/* appender: the append workloads of bench/files_io.py.
 *
 *   appender MODE FILE RECSIZE COUNT
 *
 * Appends COUNT records of RECSIZE bytes to FILE (created if missing, opened
 * for appending), one call per record:
 *
 *   MODE stdio   fopen(FILE, "a"), fwrite() per record, fclose()
 *   MODE write   open(O_WRONLY|O_CREAT|O_APPEND), write() per record, close()
 *
 * Every record differs (its number is stamped into it), as in a log. The
 * timed region runs from the open to the return of the close (so the stdio
 * buffer's last flush is in it), on CLOCK_MONOTONIC; nothing is synced.
 *
 * Prints one line:
 *   ops=N bytes=B seconds=S t0_ns=T0 t1_ns=T1
 * where T0 and T1 are CLOCK_REALTIME at the start and the end of the timed
 * region (to find the checkpoints taken inside it). Exit 0, 1 on an I/O
 * error, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_clock.h"

static void usage(void)
{
    fprintf(stderr, "usage: appender stdio|write FILE RECSIZE COUNT\n");
    exit(2);
}

int main(int argc, char **argv)
{
    if (argc != 5)
        usage();
    const char *mode = argv[1], *path = argv[2];
    size_t recsize = strtoull(argv[3], NULL, 10);
    unsigned long long count = strtoull(argv[4], NULL, 10);
    int use_stdio = strcmp(mode, "stdio") == 0;
    if ((!use_stdio && strcmp(mode, "write") != 0) || recsize < 8)
        usage();

    unsigned char *rec = malloc(recsize);
    if (!rec) {
        fprintf(stderr, "appender: cannot allocate %zu bytes\n", recsize);
        return 2;
    }
    for (size_t i = 0; i < recsize; i++)
        rec[i] = (unsigned char)('a' + i % 26);
    rec[recsize - 1] = '\n';

    long long t0_ns = real_ns();
    double t0 = mono_s();
    if (use_stdio) {
        FILE *f = fopen(path, "a");
        if (!f) {
            perror("appender: fopen");
            return 1;
        }
        for (unsigned long long i = 0; i < count; i++) {
            memcpy(rec, &i, sizeof i);
            if (fwrite(rec, recsize, 1, f) != 1) {
                perror("appender: fwrite");
                return 1;
            }
        }
        if (fclose(f) != 0) {
            perror("appender: fclose");
            return 1;
        }
    } else {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) {
            perror("appender: open");
            return 1;
        }
        for (unsigned long long i = 0; i < count; i++) {
            memcpy(rec, &i, sizeof i);
            size_t done = 0;
            while (done < recsize) {
                ssize_t n = write(fd, rec + done, recsize - done);
                if (n < 0 && errno == EINTR)
                    continue;
                if (n <= 0) {
                    perror("appender: write");
                    return 1;
                }
                done += (size_t)n;
            }
        }
        if (close(fd) != 0) {
            perror("appender: close");
            return 1;
        }
    }
    double t1 = mono_s();
    long long t1_ns = real_ns();

    printf("ops=%llu bytes=%llu seconds=%.6f t0_ns=%lld t1_ns=%lld\n", count,
           count * (unsigned long long)recsize, t1 - t0, t0_ns, t1_ns);
    return fflush(stdout) == 0 ? 0 : 1;
}
