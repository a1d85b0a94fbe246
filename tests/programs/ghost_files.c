/* Open deleted files shared the way programs share them, checking itself
 * after every restart (tests/test_unix_sockets.py): data.tmp with a hole
 * between two written blocks, a hard link link.tmp to it, both names
 * removed; descriptor A (read-write, at an offset past the end) is shared
 * with a forked child, descriptor B (read-only) was opened through the link,
 * and the child opens a description of its own of the inode; a second
 * child holds the inode only through a description of its own.
 *
 * usage: ghost_files CYCLES TRIGGER
 * Cycle c: the child appends "Kc" through the shared A; the parent sets the
 * file's modification time, prints `ready c`, waits for TRIGGER.c, then
 * checks: A and B one inode with no name, mode 0604, the time, the size,
 * the hole (SEEK_HOLE/SEEK_DATA), the bytes through B; then has the child
 * append "Pc" through A and reads it through B at the shared offset (one
 * inode and one description across the two processes); `check c ok`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1024 * 1024)

static void fail(const char *what)
{
    printf("FAIL %s (errno %d %s)\n", what, errno, strerror(errno));
    fflush(stdout);
    exit(3);
}
#define CHECK(c, what) do { if (!(c)) fail(what); } while (0)

static int a, b, to_kid[2], from_kid[2], to_rd[2], from_rd[2];

/* The second child reads two bytes at an offset through its own description. */
static void reader_read(off_t at, char out[2])
{
    CHECK(write(to_rd[1], &at, sizeof at) == sizeof at, "ask the reader");
    CHECK(read(from_rd[0], out, 2) == 2, "the reader's answer");
}

/* the child appends two bytes through A */
static void kid_write(char tag, int c)
{
    char m[2] = {tag, (char)('0' + c)};
    CHECK(write(to_kid[1], m, 2) == 2, "ask the child");
    char ack;
    CHECK(read(from_kid[0], &ack, 1) == 1 && ack == 'k', "the child's ack");
}

static void expect_at(off_t at, char tag, int c, const char *what)
{
    char got[2];
    CHECK(pread(b, got, 2, at) == 2 && got[0] == tag && got[1] == '0' + c, what);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: ghost_files CYCLES TRIGGER\n"); return 2; }
    int cycles = atoi(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    unlink("data.tmp"); unlink("link.tmp");
    a = open("data.tmp", O_RDWR | O_CREAT | O_TRUNC, 0600);
    char blk[4096];
    memset(blk, 'A', sizeof blk);
    CHECK(a >= 0 && pwrite(a, blk, sizeof blk, 0) == sizeof blk, "write A");
    memset(blk, 'B', sizeof blk);
    CHECK(pwrite(a, blk, sizeof blk, MiB) == sizeof blk, "write B");
    CHECK(link("data.tmp", "link.tmp") == 0, "link");
    b = open("link.tmp", O_RDONLY);
    CHECK(b >= 0 && fchmod(a, 0604) == 0, "open the link");
    CHECK(unlink("data.tmp") == 0 && unlink("link.tmp") == 0, "unlink");
    CHECK(lseek(a, 2 * MiB, SEEK_SET) == 2 * MiB, "lseek");
    CHECK(pipe(to_kid) == 0 && pipe(from_kid) == 0, "pipe");
    /* a second child holds the inode only through a description of its own */
    CHECK(pipe(to_rd) == 0 && pipe(from_rd) == 0, "pipe");
    pid_t rd = fork();
    CHECK(rd >= 0, "fork the reader");
    if (rd == 0) {
        char lp[64];
        snprintf(lp, sizeof lp, "/proc/self/fd/%d", a);
        int own = open(lp, O_RDONLY);
        CHECK(own >= 0, "reader: open its own description");
        close(a); close(b);
        for (;;) {
            off_t at;
            char got[2] = {0, 0};
            if (read(to_rd[0], &at, sizeof at) != sizeof at || at < 0) _exit(0);
            if (pread(own, got, 2, at) != 2) got[0] = got[1] = '?';
            CHECK(write(from_rd[1], got, 2) == 2, "reader: answer");
        }
    }
    pid_t kid = fork();
    CHECK(kid >= 0, "fork");
    if (kid == 0) {
        close(b);
        /* a description of its own of the same inode (as if opened by name before the unlink) */
        char lp[64];
        snprintf(lp, sizeof lp, "/proc/self/fd/%d", a);
        int own = open(lp, O_RDONLY);
        CHECK(own >= 0, "child: open its own description");
        for (;;) {
            char m[2], got[2];
            if (read(to_kid[0], m, 2) != 2 || m[0] == 'q') _exit(0);
            off_t at = lseek(a, 0, SEEK_CUR);
            CHECK(write(a, m, 2) == 2, "child: write through A");
            struct stat s1, s2;
            CHECK(fstat(own, &s1) == 0 && fstat(a, &s2) == 0 && s1.st_ino == s2.st_ino, "child: one inode");
            CHECK(pread(own, got, 2, at) == 2 && got[0] == m[0] && got[1] == m[1], "child: read through its own");
            CHECK(lseek(own, 0, SEEK_CUR) == 0, "child: its own offset");
            CHECK(write(from_kid[1], "k", 1) == 1, "child: ack");
        }
    }
    off_t end = 2 * MiB;
    for (int c = 1; c <= cycles; c++) {
        kid_write('K', c);
        end += 2;
        struct timespec t[2] = {{0, UTIME_OMIT}, {1000000000 + c, 123456789}};
        CHECK(futimens(a, t) == 0, "futimens");
        printf("ready %d\n", c);
        char p[4096];
        snprintf(p, sizeof p, "%s.%d", argv[2], c);
        while (access(p, F_OK) != 0) usleep(20000);

        struct stat sa, sb;
        CHECK(fstat(a, &sa) == 0 && fstat(b, &sb) == 0, "fstat");
        CHECK(sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev, "A and B one inode");
        CHECK(sa.st_nlink == 0, "no name");
        CHECK((sa.st_mode & 07777) == 0604, "mode 0604");
        CHECK(sa.st_mtim.tv_sec == 1000000000 + c && sa.st_mtim.tv_nsec == 123456789, "modification time");
        CHECK(sa.st_size == end, "size");
        CHECK(lseek(b, 0, SEEK_HOLE) == 4096 && lseek(b, 4096, SEEK_DATA) == MiB, "the hole");
        CHECK((fcntl(b, F_GETFL) & O_ACCMODE) == O_RDONLY && (fcntl(a, F_GETFL) & O_ACCMODE) == O_RDWR, "access modes");
        char got[4096];
        CHECK(pread(b, got, 4096, 0) == 4096 && got[0] == 'A' && got[4095] == 'A', "block A");
        CHECK(pread(b, got, 4096, MiB) == 4096 && got[0] == 'B' && got[4095] == 'B', "block B");
        CHECK(pread(b, got, 1, 8192) == 1 && got[0] == 0, "zeros in the hole");
        expect_at(end - 2, 'K', c, "the child's bytes");
        CHECK(lseek(a, 0, SEEK_CUR) == end, "the shared offset");
        kid_write('P', c); /* after the restart: the same description and inode in both */
        expect_at(end, 'P', c, "the child's bytes after the restart");
        char seen[2];
        reader_read(end, seen); /* one inode in the three processes */
        CHECK(seen[0] == 'P' && seen[1] == '0' + c, "the reader sees the child's bytes");
        end += 2;
        CHECK(lseek(a, 0, SEEK_CUR) == end, "the shared offset moved by the child");
        printf("check %d ok\n", c);
    }
    CHECK(write(to_kid[1], "qq", 2) == 2, "end the child");
    off_t stop = -1;
    CHECK(write(to_rd[1], &stop, sizeof stop) == sizeof stop, "end the reader");
    int status;
    CHECK(waitpid(kid, &status, 0) == kid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's end");
    CHECK(waitpid(rd, &status, 0) == rd && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the reader's end");
    printf("done\n");
    return 0;
}
