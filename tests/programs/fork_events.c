/* A parent and its forked child sharing an eventfd, a timerfd, an epoll
 * watching both (a prefork worker pool's event objects) and a signalfd for
 * SIGUSR1, checking after each restart that they are still ONE object each:
 *   - before each checkpoint the parent adds 100*c to the counter and arms
 *     the timer for an hour;
 *   - after the restart (trigger file TRIG.c) the child finds the epoll
 *     reporting the eventfd only (its data, which it then changes with
 *     EPOLL_CTL_MOD through its own descriptor), reads 100*c from it, finds the
 *     timer with most of its hour left, reads a SIGUSR1 it raised through
 *     the signalfd, and re-arms the timer for 0.2 s;
 *   - the parent waits on the epoll for the timer the child armed (its
 *     data), reads one expiration, and finds the counter empty (the child
 *     read it).
 * Both wait for TRIG.(CYCLES+1) before they end.
 * Prints "pids PARENT CHILD efd tfd ep sfd", "ready c", "check c ok", "done";
 * "FAIL ..." on any difference.  Usage: fork_events CYCLES TRIG */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EFD_DATA 0x1111deadbeefull
#define TFD_DATA 0x2222cafef00dull

static void fail(const char *who, const char *what, long long v)
{
    printf("FAIL %s: %s (%lld, errno %d)\n", who, what, v, errno);
    fflush(stdout);
    _exit(1);
}

static void wait_file(const char *base, int c)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%d", base, c);
    while (access(p, F_OK) != 0) usleep(20000);
}

static void arm(int tfd, time_t sec, long nsec)
{
    struct itimerspec its = {{0, 0}, {sec, nsec}};
    if (timerfd_settime(tfd, 0, &its, NULL) < 0) fail("timer", "timerfd_settime", -1);
}

static void child(int cycles, const char *trig, int efd, int tfd, int ep, int sfd)
{
    for (int c = 1; c <= cycles; c++) {
        wait_file(trig, c);
        struct epoll_event ev[4];
        int n = epoll_wait(ep, ev, 4, 0);
        if (n != 1 || ev[0].data.u64 != EFD_DATA + (uint64_t)(c - 1)) fail("child", "epoll does not report the eventfd alone", n);
        /* the watch is found by the child's own descriptor number (registered with it at the restart) */
        struct epoll_event mod = {.events = EPOLLIN, .data.u64 = EFD_DATA + (uint64_t)c};
        if (epoll_ctl(ep, EPOLL_CTL_MOD, efd, &mod) < 0) fail("child", "EPOLL_CTL_MOD of the eventfd's watch", c);
        uint64_t v = 0;
        if (read(efd, &v, sizeof v) != sizeof v || v != (uint64_t)(100 * c)) fail("child", "eventfd counter", (long long)v);
        struct itimerspec its;
        if (timerfd_gettime(tfd, &its) < 0 || its.it_value.tv_sec < 3000 || its.it_value.tv_sec > 3600)
            fail("child", "timer's time left", (long long)its.it_value.tv_sec);
        /* the signalfd's mask: a SIGUSR1 of its own, blocked, read through it */
        raise(SIGUSR1);
        struct signalfd_siginfo si;
        if (read(sfd, &si, sizeof si) != sizeof si || si.ssi_signo != SIGUSR1) fail("child", "signalfd", (long long)si.ssi_signo);
        arm(tfd, 0, 200000000);
        printf("child %d ok\n", c);
        fflush(stdout);
    }
    wait_file(trig, cycles + 1);
    _exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    int cycles = atoi(argv[1]);
    const char *trig = argv[2];
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    int efd = eventfd(0, EFD_NONBLOCK), tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK), ep = epoll_create1(0);
    int sfd = signalfd(-1, &usr1, SFD_NONBLOCK);
    if (efd < 0 || tfd < 0 || ep < 0 || sfd < 0) fail("parent", "cannot make the objects", -1);
    struct epoll_event e1 = {.events = EPOLLIN, .data.u64 = EFD_DATA}, e2 = {.events = EPOLLIN, .data.u64 = TFD_DATA};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, efd, &e1) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e2) < 0)
        fail("parent", "epoll_ctl", -1);
    pid_t pid = fork();
    if (pid < 0) fail("parent", "fork", -1);
    if (pid == 0) child(cycles, trig, efd, tfd, ep, sfd);
    printf("pids %d %d %d %d %d %d\n", (int)getpid(), (int)pid, efd, tfd, ep, sfd);
    for (int c = 1; c <= cycles; c++) {
        uint64_t add = (uint64_t)(100 * c);
        if (write(efd, &add, sizeof add) != sizeof add) fail("parent", "eventfd write", -1);
        arm(tfd, 3600, 0);
        printf("ready %d\n", c);
        fflush(stdout);
        wait_file(trig, c);
        /* the timer the child arms after reading the counter */
        int got = 0;
        for (int i = 0; i < 500 && !got; i++) {
            struct epoll_event ev[4];
            int n = epoll_wait(ep, ev, 4, 20);
            for (int k = 0; k < n; k++) got |= ev[k].data.u64 == TFD_DATA;
            if (!got) usleep(10000);
        }
        if (!got) fail("parent", "the timer the child armed did not fire through the epoll", c);
        uint64_t ticks = 0;
        if (read(tfd, &ticks, sizeof ticks) != sizeof ticks || ticks != 1) fail("parent", "timer expirations", (long long)ticks);
        uint64_t v = 0;
        if (read(efd, &v, sizeof v) >= 0 || errno != EAGAIN) fail("parent", "the counter the child read is not empty", (long long)v);
        printf("check %d ok\n", c);
        fflush(stdout);
    }
    wait_file(trig, cycles + 1); /* (seen from outside meanwhile) */
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) fail("parent", "child's status", st);
    printf("done\n");
    return 0;
}
