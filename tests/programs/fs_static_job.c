/* A self-checkpointing program of the kind HPC codes are (tests/test_fs.py):
 * statically linked, it writes its own restart file and then commits its
 * files: built with -DWITH_API (and liblazarus.a) through
 * lazarus_tx_commit(), as a C code would; without, as a program that cannot
 * link C does, by running `lazarus checkpoint -d $LAZARUS_DIR`.
 * Between commits it appends to a log, overwrites a data file in place,
 * writes a temporary file and renames it into place, and deletes an older
 * output.  Without LAZARUS_DIR it runs the same steps without committing:
 * an uninterrupted run to compare with.
 *   fs_static_job WORKDIR STEPS LAZARUS [EVERY]
 * EVERY: steps between commits (3).  Deterministic: every byte follows
 * from the step number. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef WITH_API
#include <lazarus.h>
#endif

#define BLOCK 4096
#define BLOCKS 16

static void die(const char *what)
{
    fprintf(stderr, "fs_static_job: %s: %s\n", what, strerror(errno));
    exit(2);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

static void write_all(int fd, const void *buf, size_t n, off_t off)
{
    const char *p = buf;
    while (n) {
        ssize_t w = off >= 0 ? pwrite(fd, p, n, off) : write(fd, p, n);
        if (w < 0) { if (errno == EINTR) continue; die("write"); }
        p += w; n -= (size_t)w;
        if (off >= 0) off += w;
    }
}

static void nap(long us)
{
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv)
{
    if (argc < 4) { fprintf(stderr, "usage: fs_static_job WORKDIR STEPS LAZARUS [EVERY]\n"); return 2; }
    if (chdir(argv[1]) < 0) die(argv[1]);
    long steps = atol(argv[2]), every = argc > 4 ? atol(argv[4]) : 3;
    const char *store = getenv("LAZARUS_DIR");
    /* the restart file: the step to go on from (absent: the beginning) */
    long step = 0;
    FILE *rf = fopen("restart.dat", "r");
    if (rf) { if (fscanf(rf, "%ld", &step) != 1) step = 0; fclose(rf); }
    if (step == 0) { /* the data file, overwritten in place from now on */
        int fd = open("data.bin", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die("data.bin");
        char z[BLOCK];
        for (int b = 0; b < BLOCKS; b++) { memset(z, 'a' + b, sizeof z); write_all(fd, z, sizeof z, -1); }
        close(fd);
    }
    printf("start at step %ld\n", step);
    fflush(stdout);
    for (; step < steps; step++) {
        char line[128], name[64], tmp[64];
        int n = snprintf(line, sizeof line, "step %ld value %016llx\n", step, (unsigned long long)mix((uint64_t)step));
        int fd = open("log.txt", O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0) die("log.txt");
        write_all(fd, line, (size_t)n, -1);
        close(fd);
        nap(2000);
        /* a block of the data file, overwritten where it is */
        fd = open("data.bin", O_RDWR);
        if (fd < 0) die("data.bin");
        char blk[BLOCK];
        for (int i = 0; i < BLOCK; i += 8) {
            uint64_t x = mix((uint64_t)step * 4096 + (uint64_t)i);
            memcpy(blk + i, &x, 8);
        }
        write_all(fd, blk, sizeof blk, (off_t)(mix((uint64_t)step) % BLOCKS) * BLOCK);
        close(fd);
        nap(2000);
        /* a temporary made whole, then renamed into place; an older one deleted */
        snprintf(tmp, sizeof tmp, "out.%ld.tmp", step);
        snprintf(name, sizeof name, "out.%ld", step);
        fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) die(tmp);
        for (int k = 0; k < 50; k++) write_all(fd, line, (size_t)n, -1);
        close(fd);
        if (rename(tmp, name) < 0) die("rename");
        if (step >= 2) {
            snprintf(name, sizeof name, "out.%ld", step - 2);
            if (unlink(name) < 0) die("unlink");
        }
        nap(2000);
        if ((step + 1) % every == 0) {
            /* the restart file, then the commit of everything with it */
            fd = open("restart.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd < 0) die("restart.dat");
            n = snprintf(line, sizeof line, "%ld\n", step + 1);
            write_all(fd, line, (size_t)n, -1);
            close(fd);
            if (store) {
#ifdef WITH_API
                unsigned long long index;
                if (lazarus_tx_commit(&index) != LAZARUS_CONTINUED) {
                    fprintf(stderr, "fs_static_job: commit failed at step %ld: %s\n", step, lazarus_strerror());
                    return 3;
                }
#else
                char cmd[4200];
                snprintf(cmd, sizeof cmd, "'%s' checkpoint -d '%s' >/dev/null", argv[3], store);
                if (system(cmd) != 0) { fprintf(stderr, "fs_static_job: commit failed at step %ld\n", step); return 3; }
#endif
            }
            printf("committed step %ld\n", step + 1);
            fflush(stdout);
        }
    }
    int fd = open("final.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die("final.txt");
    write_all(fd, "done\n", 5, -1);
    close(fd);
    printf("done\n");
    return 0;
}
