/* calls_wait: blocking calls with timeouts that must not see a checkpoint.
 *
 *   calls_wait MODE ROUNDS MS [times]
 *   calls_wait all ROUNDS MS [times]
 *
 * Each round makes one call of MODE that waits MS milliseconds and must
 * come back as a plain timeout (or, for the calls a second thread ends, with
 * what it sends MS after the round began), never with EINTR or early:
 *   poll ppoll select pselect epoll epoll_pwait epoll_pwait2 nanosleep
 *   clock_nanosleep clock_abs sleep (MS rounded up to seconds) usleep
 *   thrd_sleep sigtimedwait sigsuspend (the program's own SIGUSR2 ends it)
 *   pause (likewise) sem_timedwait sem_clockwait cond_timedwait semtimedop
 *   msgrcv semop read (a pipe the second thread writes one byte to)
 * It prints "start MODE", then per round "round I ok" (the call lasted at
 * least MS by CLOCK_MONOTONIC), and "done MODE ROUNDS"; any EINTR, early
 * return or wrong result prints "FAIL ..." and exits 1.  With "times", each
 * round's line ends with " took_ms=N from=A to=B": how long its call
 * lasted, and when it began and ended (CLOCK_MONOTONIC, ms).
 *
 * "all" runs every MODE at once, one thread each (and the second threads),
 * in this process and in a child it forks first; their lines are "WHO MODE:
 * round I ok..." and "WHO MODE: done ROUNDS" (WHO main or child).  "start
 * all" once every thread of both processes is made; the main thread then
 * waits for the child (waitpid, which must not fail either) and prints
 * "done all ROUNDS".  The same lines for the same arguments, in an order
 * that varies. */
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
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

static const char *const MODES[] = {
    "poll", "ppoll", "select", "pselect", "epoll", "epoll_pwait", "epoll_pwait2", "nanosleep", "clock_nanosleep",
    "clock_abs", "sleep", "usleep", "thrd_sleep", "sigtimedwait", "sigsuspend", "pause", "sem_timedwait",
    "sem_clockwait", "cond_timedwait", "semtimedop", "msgrcv", "semop", "read"};
#define NMODES (sizeof MODES / sizeof *MODES)

/* one waiting thread and what it waits on */
struct waiter {
    const char *mode;
    char tag[48];     /* "" alone, "WHO MODE: " in all */
    pthread_t self;
    int pfd[2];       /* a pipe: nobody writes it (poll...), or the sender does (read) */
    int ep, msq, semid;
    sem_t sem;        /* sem_timedwait, sem_clockwait: never posted */
    sem_t go;         /* a round began: the sender starts counting MS */
    pthread_mutex_t mu;
    pthread_cond_t cv; /* never signalled */
};

static long ms, rounds;
static int times;
static __thread struct waiter *me;
static __thread volatile sig_atomic_t usr2;

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static _Noreturn void fail(const char *what, long r)
{
    if (me && me->tag[0]) printf("FAIL %s%s returned %ld errno %d (%s)\n", me->tag, what, r, errno, strerror(errno));
    else printf("FAIL %s %s returned %ld errno %d (%s)\n", me ? me->mode : "", what, r, errno, strerror(errno));
    fflush(stdout);
    exit(1);
}

static struct timespec ts_of(long msec) { return (struct timespec){msec / 1000, (msec % 1000) * 1000000L}; }

static struct timespec deadline(clockid_t c)
{
    int64_t end = now_ns(c) + ms * 1000000;
    return (struct timespec){end / 1000000000, end % 1000000000};
}

static int ends_by_sender(const char *m)
{
    return !strcmp(m, "msgrcv") || !strcmp(m, "semop") || !strcmp(m, "pause") || !strcmp(m, "sigsuspend") ||
           !strcmp(m, "read");
}

/* the second thread of a waiter that a sender ends: MS after each round
 * began, it sends, posts, signals or writes */
static void *sender(void *arg)
{
    struct waiter *w = arg;
    me = w;
    for (;;) {
        while (sem_wait(&w->go) != 0)
            if (errno != EINTR) fail("sender sem_wait", -1);
        struct timespec t = ts_of(ms);
        while (nanosleep(&t, &t) != 0)
            if (errno != EINTR) fail("sender nanosleep", -1);
        if (!strcmp(w->mode, "msgrcv")) {
            struct { long type; char text[8]; } m = {1, "hello"};
            while (msgsnd(w->msq, &m, sizeof m.text, 0) != 0)
                if (errno != EINTR) fail("msgsnd", -1);
        } else if (!strcmp(w->mode, "semop")) {
            struct sembuf op = {0, 1, 0};
            if (semop(w->semid, &op, 1) != 0) fail("semop +1", -1);
        } else if (!strcmp(w->mode, "read")) {
            if (write(w->pfd[1], "x", 1) != 1) fail("write", -1);
        } else {
            pthread_kill(w->self, SIGUSR2);
        }
    }
    return NULL;
}

static void on_usr2(int sig) { (void)sig; usr2 = 1; }

static void one_round(struct waiter *w)
{
    const char *mode = w->mode;
    long r;
    if (!strcmp(mode, "poll")) {
        struct pollfd p = {w->pfd[0], POLLIN, 0};
        if ((r = poll(&p, 1, (int)ms)) != 0) fail("poll", r);
    } else if (!strcmp(mode, "ppoll")) {
        struct pollfd p = {w->pfd[0], POLLIN, 0};
        struct timespec t = ts_of(ms);
        sigset_t all;
        sigfillset(&all);
        if ((r = ppoll(&p, 1, &t, &all)) != 0) fail("ppoll", r);
    } else if (!strcmp(mode, "select") || !strcmp(mode, "pselect")) {
        fd_set rd;
        FD_ZERO(&rd);
        FD_SET(w->pfd[0], &rd);
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        struct timespec t = ts_of(ms);
        r = mode[0] == 's' ? select(w->pfd[0] + 1, &rd, NULL, NULL, &tv)
                           : pselect(w->pfd[0] + 1, &rd, NULL, NULL, &t, NULL);
        if (r != 0) fail(mode, r);
    } else if (!strncmp(mode, "epoll", 5)) {
        struct epoll_event out;
        sigset_t none;
        sigemptyset(&none);
        struct timespec t = ts_of(ms);
        r = !strcmp(mode, "epoll") ? epoll_wait(w->ep, &out, 1, (int)ms)
            : !strcmp(mode, "epoll_pwait") ? epoll_pwait(w->ep, &out, 1, (int)ms, &none)
                                           : epoll_pwait2(w->ep, &out, 1, &t, &none);
        if (r != 0) fail(mode, r);
    } else if (!strcmp(mode, "nanosleep")) {
        struct timespec t = ts_of(ms), rem;
        if ((r = nanosleep(&t, &rem)) != 0) fail("nanosleep", r);
    } else if (!strcmp(mode, "clock_nanosleep")) {
        struct timespec t = ts_of(ms);
        if ((r = clock_nanosleep(CLOCK_MONOTONIC, 0, &t, NULL)) != 0) { errno = (int)r; fail("clock_nanosleep", r); }
    } else if (!strcmp(mode, "clock_abs")) {
        struct timespec t = deadline(CLOCK_REALTIME);
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
        struct timespec t = deadline(CLOCK_REALTIME);
        if ((r = sem_timedwait(&w->sem, &t)) != -1 || errno != ETIMEDOUT) fail("sem_timedwait", r);
    } else if (!strcmp(mode, "sem_clockwait")) {
        struct timespec t = deadline(CLOCK_MONOTONIC);
        if ((r = sem_clockwait(&w->sem, CLOCK_MONOTONIC, &t)) != -1 || errno != ETIMEDOUT) fail("sem_clockwait", r);
    } else if (!strcmp(mode, "cond_timedwait")) {
        struct timespec t = deadline(CLOCK_REALTIME);
        pthread_mutex_lock(&w->mu);
        r = pthread_cond_timedwait(&w->cv, &w->mu, &t); /* an error number */
        pthread_mutex_unlock(&w->mu);
        if (r != ETIMEDOUT) { errno = (int)r; fail("pthread_cond_timedwait", r); }
    } else if (!strcmp(mode, "semtimedop")) {
        struct sembuf op = {0, -1, 0};
        struct timespec t = ts_of(ms);
        if ((r = semtimedop(w->semid, &op, 1, &t)) != -1 || errno != EAGAIN) fail("semtimedop", r);
    } else if (!strcmp(mode, "msgrcv")) {
        struct { long type; char text[8]; } m;
        if ((r = msgrcv(w->msq, &m, sizeof m.text, 1, 0)) != (long)sizeof m.text || strcmp(m.text, "hello"))
            fail("msgrcv", r);
    } else if (!strcmp(mode, "semop")) {
        struct sembuf op = {0, -1, 0};
        if ((r = semop(w->semid, &op, 1)) != 0) fail("semop -1", r);
    } else if (!strcmp(mode, "read")) {
        char c;
        if ((r = read(w->pfd[0], &c, 1)) != 1 || c != 'x') fail("read", r);
    } else if (!strcmp(mode, "pause")) {
        /* SIGUSR2 is the program's own: pause returns once its handler ran */
        while (!usr2) {
            r = pause();
            if (r != -1 || errno != EINTR) fail("pause", r);
            if (!usr2) fail("pause returned before the program's signal", r);
        }
        usr2 = 0;
    } else if (!strcmp(mode, "sigsuspend")) {
        /* SIGUSR2 blocked in this thread but inside sigsuspend */
        sigset_t open;
        pthread_sigmask(SIG_BLOCK, NULL, &open);
        sigdelset(&open, SIGUSR2);
        while (!usr2) {
            r = sigsuspend(&open);
            if (r != -1 || errno != EINTR) fail("sigsuspend", r);
            if (!usr2) fail("sigsuspend returned before the program's signal", r);
        }
        usr2 = 0;
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
}

/* the thread of one waiter: ROUNDS rounds, each checked */
static void *run_waiter(void *arg)
{
    struct waiter *w = arg;
    me = w;
    if (!strcmp(w->mode, "sigsuspend")) {
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGUSR2);
        pthread_sigmask(SIG_BLOCK, &s, NULL);
    }
    long want = !strcmp(w->mode, "sleep") ? (ms + 999) / 1000 * 1000 : ms;
    for (long i = 1; i <= rounds; i++) {
        int64_t t0 = now_ns(CLOCK_MONOTONIC);
        if (ends_by_sender(w->mode)) sem_post(&w->go);
        one_round(w);
        int64_t t1 = now_ns(CLOCK_MONOTONIC), took = t1 - t0;
        if (took < want * 1000000 - 1000000) {
            printf("FAIL %s%s round %ld lasted %.3f s, want %.3f\n", w->tag, w->mode, i, took / 1e9, want / 1e3);
            exit(1);
        }
        if (times)
            printf("%sround %ld ok took_ms=%lld from=%lld to=%lld\n", w->tag, i, (long long)(took / 1000000),
                   (long long)(t0 / 1000000), (long long)(t1 / 1000000));
        else
            printf("%sround %ld ok\n", w->tag, i);
    }
    return NULL;
}

/* what the waiter of w->mode needs, made by the thread that starts it */
static void setup(struct waiter *w)
{
    if (pipe(w->pfd) != 0 || sem_init(&w->sem, 0, 0) != 0 || sem_init(&w->go, 0, 0) != 0) fail("setup", -1);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->ep = w->msq = w->semid = -1;
    if (!strncmp(w->mode, "epoll", 5)) {
        w->ep = epoll_create1(0);
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = 7};
        if (epoll_ctl(w->ep, EPOLL_CTL_ADD, w->pfd[0], &e) != 0) fail("epoll_ctl", -1);
    }
    if (!strcmp(w->mode, "msgrcv") && (w->msq = msgget(IPC_PRIVATE, IPC_CREAT | 0600)) < 0) fail("msgget", -1);
    if ((!strcmp(w->mode, "semop") || !strcmp(w->mode, "semtimedop")) &&
        (w->semid = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) < 0)
        fail("semget", -1);
}

static void teardown(struct waiter *w)
{
    if (w->msq >= 0) msgctl(w->msq, IPC_RMID, NULL);
    if (w->semid >= 0) semctl(w->semid, 0, IPC_RMID);
}

static void start(struct waiter *w, const char *mode, const char *who, int own_thread)
{
    w->mode = mode;
    if (who) snprintf(w->tag, sizeof w->tag, "%s %s: ", who, mode);
    setup(w);
    pthread_t th;
    if (own_thread) {
        if (pthread_create(&w->self, NULL, run_waiter, w) != 0) fail("pthread_create", -1);
    } else {
        w->self = pthread_self();
    }
    if (ends_by_sender(mode) && pthread_create(&th, NULL, sender, w) != 0) fail("pthread_create sender", -1);
}

/* every mode at once, in this process and a forked child */
static int run_all(void)
{
    static struct waiter ws[NMODES];
    int hs[2];
    if (pipe(hs) != 0) return 2;
    fflush(stdout);
    pid_t child = fork();
    if (child < 0) return 2;
    const char *who = child ? "main" : "child";
    for (size_t i = 0; i < NMODES; i++) start(&ws[i], MODES[i], who, 1);
    if (child == 0) {
        close(hs[0]);
        if (write(hs[1], "r", 1) != 1) return 2;
        close(hs[1]);
    } else {
        char c;
        close(hs[1]);
        if (read(hs[0], &c, 1) != 1) fail("handshake read", -1);
        close(hs[0]);
        printf("start all\n");
    }
    for (size_t i = 0; i < NMODES; i++) {
        pthread_join(ws[i].self, NULL);
        teardown(&ws[i]);
        printf("%s %s: done %ld\n", who, ws[i].mode, rounds);
    }
    if (child == 0) exit(0);
    int st;
    pid_t r = waitpid(child, &st, 0);
    if (r != child) fail("waitpid", r);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL the child ended with status %#x\n", st);
        return 1;
    }
    printf("done all %ld\n", rounds);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: calls_wait MODE|all ROUNDS MS [times]\n"); return 2; }
    times = argc == 5 && !strcmp(argv[4], "times");
    rounds = atol(argv[2]);
    ms = atol(argv[3]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    if (!strcmp(argv[1], "all")) return run_all();
    static struct waiter w;
    start(&w, argv[1], NULL, 0);
    printf("start %s\n", argv[1]);
    run_waiter(&w);
    teardown(&w);
    printf("done %s %ld\n", argv[1], rounds);
    return 0;
}
