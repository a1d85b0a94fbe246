/* A pseudo-terminal user for the pty tests: `pty_script one CYCLES TRIG`
 * holds both ends in one process; `pty_script tree CYCLES TRIG` is a
 * script(1)-like pair: the parent holds the master, a forked child in a
 * session of its own has the terminal end as controlling terminal and
 * stdin/stdout and echoes each line it reads.
 * Each cycle leaves bytes queued both ways, prints `ready C`, waits until
 * the file TRIG.C exists (the test checkpoints, kills and restarts it
 * meanwhile), then checks everything: termios, window size, packet mode,
 * exactly the queued bytes each way (nothing echoed twice, a partial line
 * still partial), and prints `check C ok` (or `FAIL ...`, exit 1). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static int pkt; /* the master is in packet mode: every read starts with a status byte */

#define FAIL(...) do { printf("FAIL " __VA_ARGS__); printf("\n"); fflush(stdout); exit(1); } while (0)

static void wait_trigger(const char *trig, int c)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%d", trig, c);
    struct stat st;
    while (stat(p, &st) < 0) usleep(20000);
}

/* Exactly `want` from the master (within 5 s), then nothing more for 100 ms. */
static void expect_master(int m, const char *want, const char *what)
{
    char got[4096];
    size_t n = 0, len = strlen(want);
    while (n < len) {
        struct pollfd p = {m, POLLIN, 0};
        if (poll(&p, 1, 5000) <= 0) FAIL("%s: got %zu bytes '%.*s', want '%s'", what, n, (int)n, got, want);
        char buf[4096];
        ssize_t r = read(m, buf, sizeof buf);
        if (r <= 0) FAIL("%s: read: %s", what, strerror(errno));
        int skip = pkt ? 1 : 0;
        if (pkt && buf[0] != 0) FAIL("%s: packet status byte %d", what, buf[0]);
        if (n + (size_t)(r - skip) > sizeof got) FAIL("%s: too much", what);
        memcpy(got + n, buf + skip, (size_t)(r - skip));
        n += (size_t)(r - skip);
    }
    struct pollfd p = {m, POLLIN, 0};
    if (n != len || memcmp(got, want, len)) FAIL("%s: got '%.*s', want '%s'", what, (int)n, got, want);
    if (poll(&p, 1, 100) > 0) {
        char buf[256];
        ssize_t r = read(m, buf, sizeof buf);
        FAIL("%s: more bytes than '%s': '%.*s'", what, want, (int)(r > 0 ? r : 0), buf);
    }
}

static void expect_slave_line(int s, const char *want, const char *what)
{
    char buf[4096];
    ssize_t r = read(s, buf, sizeof buf); /* canonical: one line */
    if (r < 0) FAIL("%s: read: %s", what, strerror(errno));
    if ((size_t)r != strlen(want) || memcmp(buf, want, (size_t)r)) FAIL("%s: got '%.*s', want '%s'", what, (int)r, buf, want);
}

static void set_terminal(int s, struct termios *t, int echo)
{
    tcgetattr(s, t);
    t->c_iflag = ICRNL | IXON;
    t->c_oflag = OPOST | ONLCR;
    t->c_lflag = ICANON | ISIG | IEXTEN | (echo ? ECHO | ECHOE | ECHOK : 0);
    t->c_cc[VINTR] = 7;
    t->c_cc[VERASE] = '#';
    cfsetispeed(t, B9600);
    cfsetospeed(t, B9600);
    if (tcsetattr(s, TCSANOW, t) < 0) FAIL("tcsetattr: %s", strerror(errno));
    tcgetattr(s, t);
}

static void check_terminal(int m, const struct termios *want, int c)
{
    struct termios t;
    struct winsize ws;
    int p = -1;
    if (tcgetattr(m, &t) < 0 || ioctl(m, TIOCGWINSZ, &ws) < 0 || ioctl(m, TIOCGPKT, &p) < 0) FAIL("cycle %d: ioctl: %s", c, strerror(errno));
    if (t.c_iflag != want->c_iflag || t.c_oflag != want->c_oflag || t.c_cflag != want->c_cflag ||
        t.c_lflag != want->c_lflag || memcmp(t.c_cc, want->c_cc, sizeof t.c_cc) || cfgetospeed(&t) != B9600)
        FAIL("cycle %d: termios differ (lflag %o want %o, iflag %o want %o)", c, t.c_lflag, want->c_lflag, t.c_iflag, want->c_iflag);
    if (ws.ws_row != 33 || ws.ws_col != 77) FAIL("cycle %d: window %dx%d, want 33x77", c, ws.ws_row, ws.ws_col);
    if (p != pkt) FAIL("cycle %d: packet mode %d, want %d", c, p, pkt);
}

static int open_master(void)
{
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0) FAIL("openpt: %s", strerror(errno));
    struct winsize ws = {33, 77, 0, 0};
    ioctl(m, TIOCSWINSZ, &ws);
    return m;
}

static int one(int cycles, const char *trig)
{
    int m = open_master();
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    if (s < 0) FAIL("open %s: %s", ptsname(m), strerror(errno));
    struct termios want;
    set_terminal(s, &want, 1);
    pkt = 1;
    ioctl(m, TIOCPKT, &pkt);
    for (int c = 1; c <= cycles; c++) {
        char in[64], echo[64], out[64], outq[64], line[64];
        snprintf(in, sizeof in, "in %d\npart %d", c, c);
        snprintf(echo, sizeof echo, "in %d\r\npart %d", c, c);
        if (write(m, in, strlen(in)) < 0) FAIL("write");
        expect_master(m, echo, "echo of the typed input");
        snprintf(out, sizeof out, "out %d\n", c);
        snprintf(outq, sizeof outq, "out %d\r\n", c);
        if (write(s, out, strlen(out)) < 0) FAIL("write");
        printf("ready %d\n", c);
        fflush(stdout);
        wait_trigger(trig, c);
        fprintf(stderr, "cycle %d: terminal %s\n", c, ptsname(m));
        check_terminal(m, &want, c);
        expect_master(m, outq, "the terminal's queued output");
        snprintf(line, sizeof line, "in %d\n", c);
        expect_slave_line(s, line, "the queued complete line");
        if (write(m, "ial\n", 4) < 0) FAIL("write");
        expect_master(m, "ial\r\n", "echo of the rest of the line");
        snprintf(line, sizeof line, "part %dial\n", c);
        expect_slave_line(s, line, "the queued partial line, completed");
        printf("check %d ok\n", c);
        fflush(stdout);
    }
    printf("done\n");
    return 0;
}

/* The child of `tree`: in its own session, the terminal end its controlling
 * terminal and stdio; answers each line with its session facts. */
static void child(const char *name)
{
    setsid();
    int s = open(name, O_RDWR); /* no O_NOCTTY: the session's controlling terminal */
    if (s < 0) _exit(3);
    dup2(s, 0); dup2(s, 1); dup2(s, 2);
    if (s > 2) close(s);
    char line[512];
    while (fgets(line, sizeof line, stdin)) {
        if (!strcmp(line, "quit\n")) _exit(0);
        line[strcspn(line, "\n")] = 0;
        int ctty = tcgetsid(0) == getpid() && tcgetpgrp(0) == getpgrp() && getsid(0) == getpid();
        printf("echo: %s %s\n", line, ctty ? "ctty-ok" : "ctty-bad");
        fflush(stdout);
    }
    _exit(2);
}

static int tree(int cycles, const char *trig)
{
    int m = open_master();
    struct termios want;
    int s = open(ptsname(m), O_RDWR | O_NOCTTY);
    set_terminal(s, &want, 0); /* kept open until the child has it open too */
    char name[64];
    snprintf(name, sizeof name, "%s", ptsname(m));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) { close(m); close(s); child(name); }
    for (int c = 1; c <= cycles; c++) {
        char in[64], reply[96];
        /* one line answered before the checkpoint, one on its way through it */
        snprintf(in, sizeof in, "hello %d\n", c);
        snprintf(reply, sizeof reply, "echo: hello %d ctty-ok\r\n", c);
        if (write(m, in, strlen(in)) < 0) FAIL("write");
        expect_master(m, reply, "the child's answer");
        if (s >= 0) close(s);
        s = -1;
        snprintf(in, sizeof in, "queued %d\n", c);
        if (write(m, in, strlen(in)) < 0) FAIL("write");
        printf("ready %d\n", c);
        fflush(stdout);
        wait_trigger(trig, c);
        fprintf(stderr, "cycle %d: terminal %s\n", c, ptsname(m));
        check_terminal(m, &want, c);
        snprintf(reply, sizeof reply, "echo: queued %d ctty-ok\r\n", c);
        expect_master(m, reply, "the child's answer across the checkpoint");
        printf("check %d ok\n", c);
        fflush(stdout);
    }
    if (write(m, "quit\n", 5) < 0) FAIL("write");
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("child ended with status %#x", st);
    printf("done\n");
    return 0;
}

/* What Lazarus refuses: `outside PATH TRIG` holds the terminal end PATH of
 * a pty made outside the job; `twice X TRIG` forks a child that keeps the
 * master too.  Prints `ready 1`, waits for TRIG.1, prints `done`. */
static int refused(const char *how, const char *arg, const char *trig)
{
    pid_t pid = -1;
    if (!strcmp(how, "outside")) {
        if (open(arg, O_RDWR | O_NOCTTY) < 0) FAIL("open %s: %s", arg, strerror(errno));
    } else {
        open_master();
        pid = fork();
        if (pid == 0) { wait_trigger(trig, 1); _exit(0); }
    }
    printf("ready 1\n");
    wait_trigger(trig, 1);
    if (pid > 0) waitpid(pid, NULL, 0);
    printf("done\n");
    return 0;
}

/* `ctty CYCLES TRIG`, run on a terminal: the process and a forked child
 * (same session) check each cycle that the terminal is their controlling
 * terminal; the child, in a group of its own, made that group the
 * foreground (as a job control shell does for its foreground job) and
 * checks it still is and that ^C typed on the terminal reaches it. */
static volatile sig_atomic_t sigints;
static void on_int(int s) { (void)s; sigints++; }

static pid_t fg_group;

static void ctty_check(const char *who, int c)
{
    int t = open("/dev/tty", O_RDWR | O_NOCTTY);
    int ok = t >= 0 && isatty(0) && tcgetpgrp(t) == fg_group;
    if (t >= 0) close(t);
    if (!ok) FAIL("%s cycle %d: no controlling terminal, or not in its foreground: %s", who, c, strerror(errno));
    printf("%s ctty %d ok\n", who, c);
    if (getpgrp() != fg_group) return;
    int before = sigints;
    for (int i = 0; i < 1000 && sigints == before; i++) usleep(10000);
    if (sigints == before) FAIL("%s cycle %d: no SIGINT from ^C", who, c);
    printf("%s sigint %d\n", who, c);
}

static int ctty(int cycles, const char *trig)
{
    signal(SIGINT, on_int);
    pid_t pid = fork();
    fg_group = pid ? pid : getpid();
    if (pid == 0) { /* the foreground job */
        sigset_t ttou, old;
        sigemptyset(&ttou);
        sigaddset(&ttou, SIGTTOU);
        setpgid(0, 0);
        sigprocmask(SIG_BLOCK, &ttou, &old);
        if (tcsetpgrp(0, getpgrp()) < 0) FAIL("tcsetpgrp: %s", strerror(errno));
        sigprocmask(SIG_SETMASK, &old, NULL);
    } else {
        setpgid(pid, pid);
        while (tcgetpgrp(0) != pid) usleep(5000);
    }
    for (int c = 1; c <= cycles; c++) {
        if (pid) printf("ready %d\n", c);
        wait_trigger(trig, c);
        ctty_check(pid ? "parent" : "child", c);
        char p[4096];
        snprintf(p, sizeof p, "%s.%d.%s", trig, c, pid ? "parent" : "child");
        close(open(p, O_CREAT | O_WRONLY, 0644));
    }
    if (!pid) _exit(0);
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("child ended with status %#x", st);
    printf("done\n");
    return 0;
}

/* `late 1 TRIG`: the master made, its terminal end not opened yet when
 * checkpointed (a script-like parent before its child opened it): after
 * the restart the master reads no hang-up (EAGAIN, not EIO), and a child
 * that opens the terminal end then answers through it. */
static int late(const char *trig)
{
    int m = open_master();
    struct termios want;
    int s = open(ptsname(m), O_RDWR | O_NOCTTY); /* settings made through a first opener... */
    set_terminal(s, &want, 0);
    int pm = posix_openpt(O_RDWR | O_NOCTTY); /* ...so the one checkpointed is a second pty, never opened */
    if (pm < 0 || grantpt(pm) < 0 || unlockpt(pm) < 0) FAIL("openpt: %s", strerror(errno));
    struct winsize ws = {33, 77, 0, 0};
    ioctl(pm, TIOCSWINSZ, &ws);
    tcsetattr(pm, TCSANOW, &want);
    close(s);
    close(m);
    printf("ready 1\n");
    wait_trigger(trig, 1);
    struct pollfd p = {pm, POLLIN, 0};
    if (poll(&p, 1, 0) != 0) FAIL("the unopened terminal end's master polls %#x", p.revents);
    fcntl(pm, F_SETFL, O_NONBLOCK);
    char c;
    if (read(pm, &c, 1) != -1 || errno != EAGAIN) FAIL("a master read says %s, want EAGAIN", strerror(errno));
    fcntl(pm, F_SETFL, 0);
    check_terminal(pm, &want, 1);
    char name[64];
    snprintf(name, sizeof name, "%s", ptsname(pm));
    pid_t pid = fork();
    if (pid == 0) { close(pm); child(name); }
    if (write(pm, "late\n", 5) < 0) FAIL("write");
    expect_master(pm, "echo: late ctty-ok\r\n", "the child's answer");
    if (write(pm, "quit\n", 5) < 0) FAIL("write");
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("child ended with status %#x", st);
    printf("check 1 ok\ndone\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: pty_script one|tree CYCLES TRIG\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(argv[1], "outside") || !strcmp(argv[1], "twice")) return refused(argv[1], argv[2], argv[3]);
    if (!strcmp(argv[1], "one")) return one(atoi(argv[2]), argv[3]);
    if (!strcmp(argv[1], "ctty")) return ctty(atoi(argv[2]), argv[3]);
    if (!strcmp(argv[1], "late")) return late(argv[3]);
    return tree(atoi(argv[2]), argv[3]);
}
