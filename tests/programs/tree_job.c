/* A job of several processes for restart tests (test_tree_restart.py).
 *
 *   tree_job STEPS
 *
 * main forks:
 *   A  leads its own process group, reads records from main over a pipe
 *      (main keeps a few unread records in it) and acknowledges each over a
 *      seqpacket socket pair (main reads them three behind), forks A1 (in
 *      A's group)
 *   B  leads its own session, works in ./bdir; writes lines to shared.txt
 *      through the description it inherited from main (one offset shared
 *      with main)
 *   C  joins A's process group; sends a message each step on one end of a
 *      socket pair whose both ends main holds (and reads only at the end)
 *   Z  exits at once with status 7; main waits for it only at the end
 *   K  is killed by SIGTERM at once; waited for at the end too
 * Every process prints "id NAME pid ppid pgid sid" when it starts and again
 * ("end NAME ...") when it finishes, each step "step NAME i", and main "done"
 * once every child ended as it should.  Exit 3 on any inconsistency. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int steps;

static void nap(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000};
    while (nanosleep(&t, &t) < 0 && errno == EINTR) {}
}

static void id(const char *what, const char *name)
{
    printf("%s %s %d %d %d %d\n", what, name, getpid(), getppid(), getpgid(0), getsid(0));
    fflush(stdout);
}

static void fail(const char *why)
{
    printf("FAIL %s (%s)\n", why, strerror(errno));
    fflush(stdout);
    exit(3);
}

static void stepper(const char *name, void (*each)(int))
{
    for (int i = 0; i < steps; i++) {
        if (each) each(i);
        printf("step %s %d\n", name, i);
        fflush(stdout);
        nap(40);
    }
}

static int pipe_r, pipe_w, shared_fd, sock_m, sock_a, cpair[2];

static void c_each(int i)
{
    char msg[32];
    int k = snprintf(msg, sizeof msg, "c %d", i);
    if (send(cpair[1], msg, (size_t)k, 0) != k) fail("send c");
}

/* A acknowledges every record over a seqpacket socket pair; M reads the
 * acknowledgements three behind, so some are always in flight */
static void read_ack(int i)
{
    char msg[32], want[32];
    ssize_t n = recv(sock_m, msg, sizeof msg - 1, 0);
    if (n <= 0) fail("ack missing");
    msg[n] = 0;
    snprintf(want, sizeof want, "ack %d", i);
    if (strcmp(msg, want)) fail("ack out of order");
}

#define REC 64
static void a_each(int i)
{
    char rec[REC], want[REC];
    ssize_t n = read(pipe_r, rec, REC);
    if (n != REC) fail("short record");
    snprintf(want, REC, "record %d", i);
    if (strcmp(rec, want)) fail("record out of order");
    char ack[32];
    int k = snprintf(ack, sizeof ack, "ack %d", i);
    if (send(sock_a, ack, (size_t)k, 0) != k) fail("send ack");
}

static void b_each(int i)
{
    char line[32];
    int n = snprintf(line, sizeof line, "B %06d\n", i);
    if (write(shared_fd, line, (size_t)n) != n) fail("write shared");
}

static void m_each(int i)
{
    char line[32];
    int n = snprintf(line, sizeof line, "M %06d\n", i);
    if (write(shared_fd, line, (size_t)n) != n) fail("write shared");
    /* A reads one record per step: keep 4 ahead of it in the pipe */
    if (i == 0)
        for (int k = 0; k < 4; k++) {
            char rec[REC] = {0};
            snprintf(rec, REC, "record %d", k);
            if (write(pipe_w, rec, REC) != REC) fail("write pipe");
        }
    if (i >= 3) read_ack(i - 3);
    if (i + 4 < steps) {
        char rec[REC] = {0};
        snprintf(rec, REC, "record %d", i + 4);
        if (write(pipe_w, rec, REC) != REC) fail("write pipe");
    }
}

int main(int argc, char **argv)
{
    steps = argc > 1 ? atoi(argv[1]) : 50;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int p[2];
    if (pipe(p) < 0) fail("pipe");
    pipe_r = p[0];
    pipe_w = p[1];
    shared_fd = open("shared.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0) fail("socketpair");
    sock_m = sv[0];
    sock_a = sv[1];
    if (shared_fd < 0) fail("open shared.txt");
    id("id", "M");
    int ready[2];
    if (pipe(ready) < 0) fail("pipe");
    pid_t a = fork();
    if (a == 0) {
        close(pipe_w);
        close(sock_m);
        setpgid(0, 0);
        id("id", "A");
        if (write(ready[1], "a", 1) != 1) fail("ready");
        pid_t a1 = fork();
        if (a1 == 0) {
            id("id", "A1");
            stepper("A1", NULL);
            id("end", "A1");
            _exit(0);
        }
        stepper("A", a_each);
        int st;
        if (waitpid(a1, &st, 0) != a1 || !WIFEXITED(st) || WEXITSTATUS(st)) fail("A1 status");
        id("end", "A");
        _exit(0);
    }
    char c;
    if (read(ready[0], &c, 1) != 1) fail("ready"); /* A's group exists */
    close(pipe_r);
    close(sock_a);
    pid_t b = fork();
    if (b == 0) {
        close(pipe_w);
        setsid();
        /* B works in bdir (shared.txt stays open): a test removes it to make B's restore fail */
        if ((mkdir("bdir", 0755) < 0 && errno != EEXIST) || chdir("bdir") < 0) fail("bdir");
        id("id", "B");
        stepper("B", b_each);
        id("end", "B");
        _exit(0);
    }
    /* C sends a message each step on one end of a pair whose both ends main
     * keeps (read only at the end) */
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, cpair) < 0) fail("socketpair");
    pid_t cc = fork();
    if (cc == 0) {
        close(pipe_w);
        close(cpair[0]);
        if (setpgid(0, a) < 0) fail("join A's group");
        id("id", "C");
        stepper("C", c_each);
        id("end", "C");
        _exit(0);
    }
    pid_t z = fork();
    if (z == 0) _exit(7);
    pid_t k = fork();
    if (k == 0) {
        for (;;) pause();
    }
    kill(k, SIGTERM);
    /* both are zombies from here on: reaped only at the end */
    siginfo_t si;
    if (waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT) < 0 || waitid(P_PID, (id_t)k, &si, WEXITED | WNOWAIT) < 0)
        fail("zombies");
    printf("ready %d %d\n", z, k);
    stepper("M", m_each);
    for (int i = steps > 3 ? steps - 3 : 0; i < steps; i++) read_ack(i);
    int st;
    if (waitpid(a, &st, 0) != a || !WIFEXITED(st) || WEXITSTATUS(st)) fail("A status");
    if (waitpid(b, &st, 0) != b || !WIFEXITED(st) || WEXITSTATUS(st)) fail("B status");
    if (waitpid(cc, &st, 0) != cc || !WIFEXITED(st) || WEXITSTATUS(st)) fail("C status");
    for (int i = 0; i < steps; i++) {
        char msg[32], want[32];
        ssize_t n = recv(cpair[0], msg, sizeof msg - 1, MSG_DONTWAIT);
        if (n <= 0) fail("C's message missing");
        msg[n] = 0;
        snprintf(want, sizeof want, "c %d", i);
        if (strcmp(msg, want)) fail("C's message out of order");
    }
    if (waitpid(z, &st, 0) != z) fail("Z gone");
    printf("zombie Z exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    if (waitpid(k, &st, 0) != k) fail("K gone");
    printf("zombie K signal %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
    id("end", "M");
    printf("done\n");
    return 0;
}
