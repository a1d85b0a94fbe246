/* calls_signals: the program's own signals beside checkpoints.
 *
 *   calls_signals own CYCLES
 *     Handlers for SIGUSR1 (sigaction, SA_RESTART), SIGUSR2 (signal), SIGHUP
 *     (sysv_signal, installed again each time) and SIGWINCH (sigset); checks
 *     that sigaction() shows each its own handler and flags.  Per cycle C it
 *     prints "waiting C (pid P)" and blocks in poll() with no timeout on a
 *     pipe nobody writes: the call must come back only with EINTR after one
 *     of its handlers ran: "interrupted C by SIG<number>".  Then "done".
 *
 *   calls_signals pending CYCLES TRIGGER [N]
 *     Per cycle C: with SIGCHLD, SIGUSR1 and the real-time signals blocked,
 *     a child exits with status 7 (reaped: its SIGCHLD stays pending), N
 *     (5) SIGRTMIN+2 are queued to the process with values C*1000+1..N, three
 *     SIGRTMIN+3 (values C*100+11..13) and a SIGUSR1 to the second thread
 *     only.  It prints "ready C" and waits until the file TRIGGER.C exists;
 *     then each thread takes its pending signals with sigtimedwait and checks
 *     every siginfo (number, code, value, the child's PID and status, the
 *     order of the queued ones, nothing else pending): "check C ok", else
 *     "FAIL ...".  Then "done".
 *
 *   calls_signals shared TRIGGER
 *     With SIGUSR1 and SIGRTMIN+4 blocked in every thread, it sends itself
 *     SIGUSR1 (kill) and SIGRTMIN+4 (sigqueue, value 42): pending for the
 *     process.  It prints "ready" and waits until the file TRIGGER exists;
 *     then its second thread, not the main one, takes both with
 *     sigtimedwait (2 s each): "shared ok", else "FAIL ...".  Then "done". */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t last_sig, hup_count;

static _Noreturn void fail(const char *fmt, long a, long b)
{
    printf("FAIL ");
    printf(fmt, a, b);
    printf("\n");
    exit(1);
}

static void on_sig(int sig)
{
    last_sig = sig;
    if (sig == SIGHUP) { hup_count++; sysv_signal(SIGHUP, on_sig); }
}

static void check_shown(int sig, int want_flags)
{
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0) fail("sigaction query %ld errno %ld", sig, errno);
    if (old.sa_handler != on_sig) fail("sigaction shows another handler for signal %ld (%lx)", sig, (long)old.sa_handler);
    if ((old.sa_flags & (SA_SIGINFO | SA_RESTART | SA_RESETHAND | SA_NODEFER)) != want_flags)
        fail("signal %ld: flags %lx", sig, old.sa_flags);
}

static int own(int cycles)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sig;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGUSR2, on_sig);
    sysv_signal(SIGHUP, on_sig);
    {
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        sigset(SIGWINCH, on_sig); /* (System V, still used) */
    }
    check_shown(SIGUSR1, SA_RESTART);
    check_shown(SIGUSR2, SA_RESTART);
    check_shown(SIGHUP, SA_RESETHAND | SA_NODEFER);
    check_shown(SIGWINCH, 0);
    int p[2];
    if (pipe(p) != 0) return 2;
    for (int c = 1; c <= cycles; c++) {
        last_sig = 0;
        printf("waiting %d (pid %d)\n", c, (int)getpid());
        struct pollfd pf = {p[0], POLLIN, 0};
        int r = poll(&pf, 1, -1);
        if (r != -1 || errno != EINTR) fail("poll returned %ld errno %ld", r, errno);
        if (!last_sig) fail("poll returned EINTR with no handler of the program run (%ld %ld)", 0, 0);
        printf("interrupted %d by SIG%d\n", c, (int)last_sig);
    }
    printf("done\n");
    return 0;
}

/* ------------------------------------------------------------------ */
static pthread_t th;
static volatile int thread_cycle, thread_done;
static volatile int thread_ok;
static char thread_why[200];

static int take(int sig, siginfo_t *si)
{
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    struct timespec zero = {0, 0};
    return sigtimedwait(&s, si, &zero);
}

/* nothing of `sigs` is pending (for the thread or the process) */
static int none_pending(void)
{
    sigset_t p;
    sigpending(&p);
    return !sigismember(&p, SIGCHLD) && !sigismember(&p, SIGUSR1) && !sigismember(&p, SIGRTMIN + 2) &&
           !sigismember(&p, SIGRTMIN + 3);
}

static void *second(void *arg)
{
    (void)arg;
    for (int c = 1;; c++) {
        while (thread_cycle < c) usleep(10000);
        siginfo_t si;
        int ok = 1;
        for (int k = 11; k <= 13 && ok; k++) {
            if (take(SIGRTMIN + 3, &si) != SIGRTMIN + 3 || si.si_code != SI_QUEUE || si.si_value.sival_int != c * 100 + k) {
                snprintf(thread_why, sizeof thread_why, "thread: SIGRTMIN+3 #%d: code %d value %d", k, si.si_code, si.si_value.sival_int);
                ok = 0;
            }
        }
        if (ok && (take(SIGUSR1, &si) != SIGUSR1 || (si.si_code != SI_TKILL && si.si_code != SI_USER) || si.si_pid != getpid())) {
            snprintf(thread_why, sizeof thread_why, "thread: SIGUSR1 not pending (code %d signo %d)", si.si_code, si.si_signo);
            ok = 0;
        }
        if (ok && !none_pending()) { snprintf(thread_why, sizeof thread_why, "thread: more pending"); ok = 0; }
        thread_ok = ok;
        thread_done = c;
    }
    return NULL;
}

static int pending(int cycles, const char *trigger, int n)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGUSR1);
    sigaddset(&block, SIGRTMIN + 2);
    sigaddset(&block, SIGRTMIN + 3);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    if (pthread_create(&th, NULL, second, NULL) != 0) return 2;
    for (int c = 1; c <= cycles; c++) {
        pid_t child = fork();
        if (child == 0) _exit(7);
        int st;
        if (waitpid(child, &st, 0) != child) fail("waitpid %ld", child, 0);
        for (int k = 1; k <= n; k++)
            if (sigqueue(getpid(), SIGRTMIN + 2, (union sigval){.sival_int = c * 1000 + k}) != 0) fail("sigqueue %ld: errno %ld", k, errno);
        for (int k = 11; k <= 13; k++) pthread_sigqueue(th, SIGRTMIN + 3, (union sigval){.sival_int = c * 100 + k});
        pthread_kill(th, SIGUSR1);
        printf("ready %d\n", c);
        char path[4096];
        snprintf(path, sizeof path, "%s.%d", trigger, c);
        while (access(path, F_OK) != 0) usleep(20000);
        siginfo_t si;
        if (take(SIGCHLD, &si) != SIGCHLD) fail("cycle %ld: SIGCHLD not pending", c, 0);
        if (si.si_code != CLD_EXITED || si.si_pid != child || si.si_status != 7)
            fail("SIGCHLD: code %ld status %ld", si.si_code, si.si_status);
        for (int k = 1; k <= n; k++) {
            if (take(SIGRTMIN + 2, &si) != SIGRTMIN + 2) fail("cycle %ld: queued signal %ld missing", c, k);
            if (si.si_code != SI_QUEUE || si.si_value.sival_int != c * 1000 + k || si.si_pid != getpid())
                fail("queued signal: value %ld want %ld", si.si_value.sival_int, c * 1000 + k);
        }
        if (!none_pending()) fail("cycle %ld: more signals pending for the process", c, 0);
        thread_cycle = c;
        while (thread_done < c) usleep(10000);
        if (!thread_ok) { printf("FAIL %s\n", thread_why); return 1; }
        printf("check %d ok\n", c);
    }
    printf("done\n");
    return 0;
}

static volatile int shared_go;

static void *shared_taker(void *arg)
{
    (void)arg;
    while (!shared_go) usleep(10000);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    struct timespec two = {2, 0};
    siginfo_t si;
    if (sigtimedwait(&s, &si, &two) != SIGUSR1 || si.si_code != SI_USER || si.si_pid != getpid())
        fail("the second thread did not get the process's SIGUSR1 (errno %ld)", errno, 0);
    sigemptyset(&s);
    sigaddset(&s, SIGRTMIN + 4);
    if (sigtimedwait(&s, &si, &two) != SIGRTMIN + 4 || si.si_value.sival_int != 42)
        fail("the second thread did not get the process's SIGRTMIN+4 (errno %ld)", errno, 0);
    return NULL;
}

static int shared(const char *trigger)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGUSR1);
    sigaddset(&block, SIGRTMIN + 4);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, shared_taker, NULL) != 0) return 2;
    kill(getpid(), SIGUSR1);
    sigqueue(getpid(), SIGRTMIN + 4, (union sigval){.sival_int = 42});
    printf("ready\n");
    while (access(trigger, F_OK) != 0) usleep(20000);
    shared_go = 1;
    pthread_join(t, NULL);
    printf("shared ok\ndone\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 3 && !strcmp(argv[1], "own")) return own(atoi(argv[2]));
    if (argc >= 3 && !strcmp(argv[1], "shared")) return shared(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "pending")) return pending(atoi(argv[2]), argv[3], argc > 4 ? atoi(argv[4]) : 5);
    fprintf(stderr, "usage: calls_signals own CYCLES | pending CYCLES TRIGGER [N] | shared TRIGGER\n");
    return 2;
}
