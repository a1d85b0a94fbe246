/* calls_wait: blocking calls with timeouts that must not see a checkpoint.
 *
 *   calls_wait MODE ROUNDS MS [times]
 *
 * Each round makes one call of MODE that waits MS milliseconds and must
 * come back as a plain timeout (or, msgrcv/semop, with what a second thread
 * sends after MS), never with EINTR or early:
 *   poll ppoll select pselect epoll epoll_pwait nanosleep clock_nanosleep
 *   clock_abs sleep (MS rounded up to seconds) usleep thrd_sleep sigtimedwait
 *   sem_timedwait msgrcv semop pause (a thread sends SIGUSR2, handled)
 * It prints "start MODE", then per round "round I ok" (the call lasted at
 * least MS by CLOCK_MONOTONIC), and "done MODE ROUNDS"; any EINTR, early
 * return or wrong result prints "FAIL ..." and exits 1.  The same output
 * for the same arguments; with "times", each round's line ends with
 * " took_ms=N", how long its call lasted by CLOCK_MONOTONIC. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static const char *mode;
static long ms;
static int pfd[2], msq = -1, semid = -1;
static sem_t sem;
static volatile sig_atomic_t usr2;

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static _Noreturn void fail(const char *what, long r)
{
    printf("FAIL %s %s returned %ld errno %d (%s)\n", mode, what, r, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static struct timespec ts_of(long msec) { return (struct timespec){msec / 1000, (msec % 1000) * 1000000L}; }

/* the second thread of msgrcv, semop and pause: does its part after MS, per round */
static void *sender(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec t = ts_of(ms);
        while (nanosleep(&t, &t) != 0) {
            if (errno != EINTR) fail("sender nanosleep", -1);
        }
        if (!strcmp(mode, "msgrcv")) {
            struct { long type; char text[8]; } m = {1, "hello"};
            while (msgsnd(msq, &m, sizeof m.text, 0) != 0)
                if (errno != EINTR) fail("msgsnd", -1);
        } else if (!strcmp(mode, "semop")) {
            struct sembuf op = {0, 1, 0};
            if (semop(semid, &op, 1) != 0) fail("semop +1", -1);
        } else {
            kill(getpid(), SIGUSR2);
        }
        /* wait for the round to be taken */
        struct timespec s = ts_of(50);
        nanosleep(&s, NULL);
    }
    return NULL;
}

static void on_usr2(int sig) { (void)sig; usr2 = 1; }

static void one_round(void)
{
    long r;
    char buf[16];
    if (!strcmp(mode, "poll")) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        if ((r = poll(&p, 1, (int)ms)) != 0) fail("poll", r);
    } else if (!strcmp(mode, "ppoll")) {
        struct pollfd p = {pfd[0], POLLIN, 0};
        struct timespec t = ts_of(ms);
        sigset_t all;
        sigfillset(&all);
        if ((r = ppoll(&p, 1, &t, &all)) != 0) fail("ppoll", r);
    } else if (!strcmp(mode, "select") || !strcmp(mode, "pselect")) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(pfd[0], &rd);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        struct timespec t = ts_of(ms);
        r = mode[0] == 's' ? select(pfd[0] + 1, &rd, NULL, NULL, &tv) : pselect(pfd[0] + 1, &rd, NULL, NULL, &t, NULL);
        if (r != 0) fail(mode, r);
    } else if (!strcmp(mode, "epoll") || !strcmp(mode, "epoll_pwait")) {
        static int ep = -1;
        if (ep < 0) {
            ep = epoll_create1(0);
            struct epoll_event e = {.events = EPOLLIN, .data.u64 = 7};
            if (epoll_ctl(ep, EPOLL_CTL_ADD, pfd[0], &e) != 0) fail("epoll_ctl", -1);
        }
        struct epoll_event out;
        sigset_t none;
        sigemptyset(&none);
        r = mode[5] ? epoll_pwait(ep, &out, 1, (int)ms, &none) : epoll_wait(ep, &out, 1, (int)ms);
        if (r != 0) fail(mode, r);
    } else if (!strcmp(mode, "nanosleep")) {
        struct timespec t = ts_of(ms), rem;
        if ((r = nanosleep(&t, &rem)) != 0) fail("nanosleep", r);
    } else if (!strcmp(mode, "clock_nanosleep")) {
        struct timespec t = ts_of(ms);
        if ((r = clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL)) != 0) { errno = (int)r; fail("clock_nanosleep", r); }
    } else if (!strcmp(mode, "clock_abs")) {
        int64_t end = now_ns(CLOCK_REALTIME) + ms * 1000000;
        struct timespec t = {end / 1000000000, end % 1000000000};
        if ((r = clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &t, NULL)) != 0) { errno = (int)r; fail("clock_nanosleep", r); }
    } else if (!strcmp(mode, "sleep")) {
        if ((r = sleep((unsigned)((ms + 999) / 1000))) != 0) fail("sleep", r);
    } else if (!strcmp(mode, "usleep")) {
        if ((r = usleep((useconds_t)(ms * 1000))) != 0) fail("usleep", r);
    } else if (!strcmp(mode, "thrd_sleep")) {
        struct timespec t = ts_of(ms);
        if ((r = thrd_sleep(&t, NULL)) != 0) fail("thrd_sleep", r);
    } else if (!strcmp(mode, "sigtimedwait")) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR1);
        struct timespec t = ts_of(ms);
        if ((r = sigtimedwait(&s, NULL, &t)) != -1 || errno != EAGAIN) fail("sigtimedwait", r);
    } else if (!strcmp(mode, "sem_timedwait")) {
        int64_t end = now_ns(CLOCK_REALTIME) + ms * 1000000;
        struct timespec t = {end / 1000000000, end % 1000000000};
        if ((r = sem_timedwait(&sem, &t)) != -1 || errno != ETIMEDOUT) fail("sem_timedwait", r);
    } else if (!strcmp(mode, "msgrcv")) {
        struct { long type; char text[8]; } m;
        if ((r = msgrcv(msq, &m, sizeof m.text, 1, 0)) != (long)sizeof m.text || strcmp(m.text, "hello")) fail("msgrcv", r);
    } else if (!strcmp(mode, "semop")) {
        struct sembuf op = {0, -1, 0};
        if ((r = semop(semid, &op, 1)) != 0) fail("semop -1", r);
    } else if (!strcmp(mode, "pause")) {
        /* SIGUSR2 is the program's own: pause returns once its handler ran */
        while (!usr2) {
            r = pause();
            if (r != -1 || errno != EINTR) fail("pause", r);
            if (!usr2) fail("pause returned before the program's signal", r);
        }
        usr2 = 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
    (void)buf;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: calls_wait MODE ROUNDS MS [times]\n"); return 2; }
    int times = argc == 5 && !strcmp(argv[4], "times");
    mode = argv[1];
    long rounds = atol(argv[2]);
    ms = atol(argv[3]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (pipe(pfd) != 0 || sem_init(&sem, 0, 0) != 0) return 2;
    if (!strcmp(mode, "msgrcv") && (msq = msgget(IPC_PRIVATE, IPC_CREAT | 0600)) < 0) fail("msgget", -1);
    if (!strcmp(mode, "semop") && (semid = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) < 0) fail("semget", -1);
    if (!strcmp(mode, "pause")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr2;
        sigaction(SIGUSR2, &sa, NULL);
    }
    pthread_t th;
    if ((msq >= 0 || semid >= 0 || !strcmp(mode, "pause")) && pthread_create(&th, NULL, sender, NULL) != 0) return 2;
    printf("start %s\n", mode);
    long want = !strcmp(mode, "sleep") ? (ms + 999) / 1000 * 1000 : ms;
    for (long i = 1; i <= rounds; i++) {
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        one_round();
        int64_t took = now_ns(CLOCK_MONOTONIC) - t0;
        if (took < want * 1000000 - 1000000) {
            printf("FAIL %s round %ld lasted %.3f s, want %.3f\n", mode, i, took / 1e9, want / 1e3);
            exit(1);
        }
        if (times) printf("round %ld ok took_ms=%lld\n", i, (long long)(took / 1000000));
        else printf("round %ld ok\n", i);
    }
    if (msq >= 0) msgctl(msq, IPC_RMID, NULL);
    if (semid >= 0) semctl(semid, 0, IPC_RMID);
    printf("done %s %ld\n", mode, rounds);
    return 0;
}
