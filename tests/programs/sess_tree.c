/* A tree of sessions and process groups, as daemons, shells and job
 * control make them: `sess_tree CYCLES BASE`.
 *   M (the main program, a child subreaper)
 *   +- A   forked B, then called setsid: B stays in M's session, below A
 *   |  +- B
 *   +- C   setsid; D its child leads group D (E below it is in it); F led a
 *   |  |   group G joined, then exited: G's group has no leader
 *   |  +- D +- E
 *   |  +- G
 *   +- T   its parent S made session S and exited: T (now M's child) is in
 *          a session whose leader is gone
 * Every process remembers its parent, group and session (as it sees them)
 * and, for each cycle, once BASE/trig.C exists, checks them again and
 * writes BASE/check.C.NAME ("ok" or what differs).  M prints `ready C` when
 * all are in place and `check C ok` once every check passed (`FAIL ...`
 * otherwise), and `done` at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *base;
static int cycles;
static pid_t mpid; /* M: its session and group are the launcher's (the restarter's after a restart) */

static int exists(const char *fmt, int c, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, fmt, base, c, name);
    struct stat st;
    return stat(p, &st) == 0;
}

/* Checks its ids at each cycle, until killed. */
static _Noreturn void watch(const char *name)
{
    pid_t ppid = getppid(), pgid = getpgrp(), sid = getsid(0);
    int lpg = pgid == getpgid(mpid), lsid = sid == getsid(mpid); /* M's: compared as such */
    char p[4096];
    snprintf(p, sizeof p, "%s/up.%s.tmp", base, name);
    FILE *f = fopen(p, "w");
    fprintf(f, "%d\n", getpid());
    fclose(f);
    char q[4096];
    snprintf(q, sizeof q, "%s/up.%s", base, name);
    rename(p, q);
    for (int c = 1; c <= cycles; c++) {
        while (!exists("%s/trig.%d%s", c, "")) usleep(20000);
        char msg[256];
        int pg_ok = lpg ? getpgrp() == getpgid(mpid) : getpgrp() == pgid;
        int sid_ok = lsid ? getsid(0) == getsid(mpid) : getsid(0) == sid;
        if (getppid() == ppid && pg_ok && sid_ok) snprintf(msg, sizeof msg, "ok");
        else snprintf(msg, sizeof msg, "%s: ppid %d pgid %d sid %d, were %d %d %d", name, getppid(), getpgrp(),
                      getsid(0), ppid, pgid, sid);
        snprintf(p, sizeof p, "%s/check.%d.%s", base, c, name);
        int fd = open(p, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (write(fd, msg, strlen(msg)) < 0) _exit(1);
        close(fd);
    }
    for (;;) pause();
}

static void wait_up(const char *name)
{
    while (!exists("%s/up%.0d.%s", 0, name)) usleep(5000);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: sess_tree CYCLES BASE\n"); return 2; }
    cycles = atoi(argv[1]);
    base = argv[2];
    setvbuf(stdout, NULL, _IOLBF, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    mpid = getpid();
    if (fork() == 0) { /* A */
        if (fork() == 0) watch("B");
        wait_up("B");
        setsid();
        watch("A");
    }
    if (fork() == 0) { /* C */
        setsid();
        if (fork() == 0) { /* D */
            setpgid(0, 0);
            if (fork() == 0) watch("E");
            watch("D");
        }
        int gp[2];
        if (pipe(gp) < 0) return 1;
        pid_t f = fork();
        if (f == 0) { /* F: leads a group, then goes */
            setpgid(0, 0);
            char x;
            close(gp[1]);
            if (read(gp[0], &x, 1) < 0) _exit(1);
            _exit(0);
        }
        setpgid(f, f);
        if (fork() == 0) { /* G */
            close(gp[0]);
            close(gp[1]);
            setpgid(0, f);
            watch("G");
        }
        wait_up("G");
        close(gp[1]);
        waitpid(f, NULL, 0);
        wait_up("D");
        wait_up("E");
        watch("C");
    }
    if (fork() == 0) { /* S: a session whose leader goes */
        setsid();
        pid_t s = getpid();
        if (fork() == 0) { /* T: once S is gone and it is M's */
            while (getppid() == s) usleep(5000);
            watch("T");
        }
        _exit(0);
    }
    const char *names[] = {"A", "B", "C", "D", "E", "G", "T"};
    for (int i = 0; i < 7; i++) wait_up(names[i]);
    int st;
    while (waitpid(-1, &st, WNOHANG) > 0) {} /* S */
    usleep(100000);
    while (waitpid(-1, &st, WNOHANG) > 0) {}
    for (int c = 1; c <= cycles; c++) {
        printf("ready %d\n", c);
        while (!exists("%s/trig.%d%s", c, "")) usleep(20000);
        for (int i = 0; i < 7; i++) {
            char p[4096], msg[256] = "";
            snprintf(p, sizeof p, "%s/check.%d.%s", base, c, names[i]);
            for (int k = 0; k < 1000 && !msg[0]; k++) {
                int fd = open(p, O_RDONLY);
                if (fd >= 0) {
                    ssize_t n = read(fd, msg, sizeof msg - 1);
                    msg[n > 0 ? n : 0] = 0;
                    close(fd);
                }
                if (!msg[0]) usleep(10000);
            }
            if (strcmp(msg, "ok")) { printf("FAIL %s\n", msg[0] ? msg : names[i]); return 1; }
        }
        printf("check %d ok\n", c);
    }
    for (int i = 0; i < 7; i++) { /* the end: every other process */
        char p[4096];
        snprintf(p, sizeof p, "%s/up.%s", base, names[i]);
        FILE *f = fopen(p, "r");
        int pid = 0;
        if (f && fscanf(f, "%d", &pid) == 1 && pid > 0) kill(pid, SIGKILL);
        if (f) fclose(f);
    }
    while (wait(&st) > 0 || errno == EINTR) {}
    printf("done\n");
    return 0;
}
