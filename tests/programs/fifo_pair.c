/* A producer and a consumer process over named pipes, checking themselves
 * after every restart (tests/test_unix_sockets.py).  The main program makes
 * chan.fifo (mode 0620) and ack.fifo in its working directory and forks the
 * consumer; the producer writes records into chan.fifo (O_WRONLY), the
 * consumer reads them (O_RDONLY) and answers on ack.fifo; the consumer also
 * holds self.fifo read-write, as daemons hold their own FIFO, with a note
 * to itself in it.
 *
 * usage: fifo_pair CYCLES TRIGGER
 * Cycle c: the producer writes 5 records (they wait in the pipe), prints
 * `ready c` and waits for the consumer's `ack c`; the consumer waits for the
 * file TRIGGER.c, reads the 5 records and its note, checks them and its
 * descriptors' flags, prints `check c ok` (or `FAIL why`, exit 3) and acks.
 * At the end the producer closes chan.fifo: the consumer must read end of
 * file (no writer is left), then both exit and the producer prints `done`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what)
{
    printf("FAIL %s (errno %d %s)\n", what, errno, strerror(errno));
    fflush(stdout);
    exit(3);
}
#define CHECK(c, what) do { if (!(c)) fail(what); } while (0)

static void read_exact(int fd, char *buf, size_t n, const char *what)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) fail(what);
        got += (size_t)r;
    }
    buf[n] = 0;
}

static void write_str(int fd, const char *s)
{
    CHECK(write(fd, s, strlen(s)) == (ssize_t)strlen(s), "write");
}

static void consumer(int cycles, const char *trig)
{
    int in = open("chan.fifo", O_RDONLY);
    int ack = open("ack.fifo", O_WRONLY);
    int self = open("self.fifo", O_RDWR | O_NONBLOCK);
    CHECK(in >= 0 && ack >= 0 && self >= 0, "consumer open");
    for (int c = 1; c <= cycles; c++) {
        char note[32], buf[64], want[64];
        snprintf(note, sizeof note, "note %02d\n", c);
        write_str(self, note);
        char p[4096];
        snprintf(p, sizeof p, "%s.%d", trig, c);
        while (access(p, F_OK) != 0) usleep(20000);
        for (int k = 0; k < 5; k++) {
            snprintf(want, sizeof want, "rec %02d %d\n", c, k);
            read_exact(in, buf, strlen(want), "read a record");
            if (strcmp(buf, want)) { printf("FAIL record: got '%s' want '%s'\n", buf, want); exit(3); }
        }
        read_exact(self, buf, strlen(note), "read the note");
        CHECK(!strcmp(buf, note), "the note");
        CHECK(read(self, buf, 1) < 0 && errno == EAGAIN, "nothing more in self.fifo");
        CHECK((fcntl(in, F_GETFL) & (O_ACCMODE | O_NONBLOCK)) == O_RDONLY, "chan.fifo flags");
        CHECK((fcntl(self, F_GETFL) & (O_ACCMODE | O_NONBLOCK)) == (O_RDWR | O_NONBLOCK), "self.fifo flags");
        struct stat st;
        CHECK(fstat(in, &st) == 0 && S_ISFIFO(st.st_mode), "chan.fifo is a fifo");
        printf("check %d ok\n", c);
        fflush(stdout);
        snprintf(buf, sizeof buf, "ack %02d\n", c);
        write_str(ack, buf);
    }
    char b;
    CHECK(read(in, &b, 1) == 0, "end of file once the producer closed chan.fifo");
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: fifo_pair CYCLES TRIGGER\n"); return 2; }
    int cycles = atoi(argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    unlink("chan.fifo"); unlink("ack.fifo"); unlink("self.fifo");
    CHECK(mkfifo("chan.fifo", 0600) == 0 && chmod("chan.fifo", 0620) == 0, "mkfifo chan.fifo");
    CHECK(mkfifo("ack.fifo", 0600) == 0 && mkfifo("self.fifo", 0600) == 0, "mkfifo");
    pid_t kid = fork();
    CHECK(kid >= 0, "fork");
    if (kid == 0) consumer(cycles, argv[2]);
    int out = open("chan.fifo", O_WRONLY);
    int ack = open("ack.fifo", O_RDONLY);
    CHECK(out >= 0 && ack >= 0, "producer open");
    for (int c = 1; c <= cycles; c++) {
        char buf[64], want[64];
        for (int k = 0; k < 5; k++) {
            snprintf(buf, sizeof buf, "rec %02d %d\n", c, k);
            write_str(out, buf);
        }
        usleep(100000); /* the consumer's note is written too */
        printf("ready %d\n", c);
        snprintf(want, sizeof want, "ack %02d\n", c);
        read_exact(ack, buf, strlen(want), "read the ack");
        CHECK(!strcmp(buf, want), "the ack");
    }
    close(out);
    int status;
    CHECK(waitpid(kid, &status, 0) == kid, "waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status)) { printf("FAIL the consumer ended with %#x\n", status); return 3; }
    unlink("chan.fifo"); unlink("ack.fifo"); unlink("self.fifo");
    printf("done\n");
    return 0;
}
