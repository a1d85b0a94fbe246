/* POSIX timers of every notification kind, checked from inside after each
 * restart (tests/test_timers.py).
 *   timers_posix CYCLES TRIG [fork]
 * Makes: A SIGEV_SIGNAL periodic 50 ms; B SIGEV_THREAD_ID periodic 70 ms at a
 * worker thread (sigwaitinfo); C SIGEV_NONE one-shot 1000 s; D SIGEV_THREAD
 * periodic 40 ms (its function counts, in a thread of its own); E SIGEV_SIGNAL
 * one-shot 2 s; F SIGEV_SIGNAL absolute CLOCK_REALTIME periodic 1 s (its
 * handler keeps the largest overrun); H SIGEV_THREAD one-shot 2.5 s; one made and
 * deleted between C and D, and G made and deleted last (the next id is the one
 * after it).  For each cycle c: runs
 * 0.5 s, prints `ready c`, waits for TRIG.c, then checks that the kernel
 * lists exactly its ids with their kinds and signals, that every periodic
 * timer goes on, that a SIGEV_THREAD timer made now gets the next id and runs,
 * and prints `check c ok` (or FAIL).  At the end the one-shots
 * fired once each and a new timer gets the next id: `done`.
 * With `fork`, a child forked once the timers run has none (POSIX), makes its
 * own (a SIGEV_THREAD and a SIGEV_SIGNAL one, ids 0 and 1) and checks them
 * after each TRIG.c the same way (`child check c ok`); the parent waits for it. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL " __VA_ARGS__); printf("\n"); fflush(stdout); exit(1); } while (0)

enum { TA, TB, TC, TD, TE, TF, TH, NT };
static const char *names = "ABCDEFH";
static timer_t ids[NT];
static int gap_id, next_id; /* the id a new timer must get */
static atomic_long fresh_calls;
static atomic_long count[NT];
static atomic_int max_overrun_f;
static atomic_int d_tid, worker_tid;
static pid_t main_tid;

static double now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void pause_for(double s)
{
    double end = now(CLOCK_MONOTONIC) + s;
    while (now(CLOCK_MONOTONIC) < end) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL); /* signals and checkpoints cut it short: loop on */
    }
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    if (si->si_code != SI_TIMER) return;
    if (sig == SIGRTMIN + 1) count[TA]++;
    if (sig == SIGRTMIN + 3) count[TE]++;
    if (sig == SIGRTMIN + 4) {
        count[TF]++;
        int o = timer_getoverrun(ids[TF]);
        if (o > max_overrun_f) max_overrun_f = o;
    }
}

static void *worker(void *arg)
{
    (void)arg;
    worker_tid = (int)gettid();
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGRTMIN + 2);
    for (;;) {
        siginfo_t si;
        if (sigwaitinfo(&s, &si) == SIGRTMIN + 2 && si.si_code == SI_TIMER) count[TB]++;
    }
    return NULL;
}

static void on_d(union sigval v)
{
    if (v.sival_int != 0xD) return;
    d_tid = (int)gettid();
    count[TD]++;
}

static void on_h(union sigval v)
{
    if (v.sival_int == 0x4) count[TH]++;
}

static timer_t make(clockid_t clock, int notify, int sig, int value, int tid, void (*fn)(union sigval))
{
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = notify;
    ev.sigev_signo = sig;
    ev.sigev_value.sival_int = value;
    if (notify == SIGEV_THREAD_ID) ev._sigev_un._tid = tid;
    if (notify == SIGEV_THREAD) ev.sigev_notify_function = fn;
    timer_t t;
    if (timer_create(clock, &ev, &t) < 0) FAIL("timer_create: %m");
    return t;
}

static void arm(timer_t t, int flags, double value, double interval)
{
    struct itimerspec its = {{(time_t)interval, (long)((interval - (time_t)interval) * 1e9)},
                             {(time_t)value, (long)((value - (time_t)value) * 1e9)}};
    if (timer_settime(t, flags, &its, NULL) < 0) FAIL("timer_settime: %m");
}

/* /proc/self/timers: "signal/pid", "signal/tid" (SIGEV_THREAD_ID: glibc's
 * SIGEV_THREAD too) or "none/pid" */
static const char *kind_of(int i)
{
    return i == TB || i == TD || i == TH ? "signal/tid" : i == TC ? "none/pid" : "signal/pid";
}

/* The kernel's list: our ids, each with its kind (a SIGEV_THREAD timer's
 * timer_t is glibc's own handle natively, the kernel's id under Lazarus: such
 * an unknown id must be a thread-aimed one, two of them); every timer_t works. */
static void check_listed(void)
{
    FILE *f = fopen("/proc/self/timers", "r");
    if (!f) FAIL("cannot read /proc/self/timers: %m");
    char line[256];
    int seen[NT] = {0}, id = -1, n = 0, unknown = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "ID: %d", &id) == 1) { n++; continue; }
        char how[16], to[8], kind[32];
        if (sscanf(line, "notify: %15[a-z]/%7[a-z]", how, to) != 2) continue;
        snprintf(kind, sizeof kind, "%s/%s", how, to);
        int k = -1;
        for (int i = 0; i < NT; i++)
            if ((long)ids[i] == id) k = i;
        if (k < 0 && strcmp(kind, "signal/tid")) FAIL("the kernel lists timer %d (%s), which the program does not have", id, kind);
        if (k < 0) { unknown++; continue; }
        if (strcmp(kind, kind_of(k))) FAIL("timer %c (%d) is %s, not %s", names[k], id, kind, kind_of(k));
        seen[k]++;
    }
    fclose(f);
    if (n != NT) FAIL("the kernel lists %d timers, not %d", n, NT);
    for (int i = 0; i < NT; i++)
        if (seen[i] != 1 && !(unknown == 2 && (i == TD || i == TH)))
            FAIL("timer %c (%ld) is listed %d times", names[i], (long)ids[i], seen[i]);
    for (int i = 0; i < NT; i++) {
        struct itimerspec its;
        if (timer_gettime(ids[i], &its) < 0) FAIL("timer_gettime %c: %m", names[i]);
    }
}

static void on_fresh(union sigval v)
{
    if (v.sival_int == 0x5) fresh_calls++;
}

/* A SIGEV_THREAD timer made now (after a restart: the restored helper) gets
 * the next id and runs its function; then it is deleted. */
static void check_fresh(void)
{
    timer_t t = make(CLOCK_MONOTONIC, SIGEV_THREAD, 0, 0x5, 0, on_fresh);
    /* natively glibc's handle (negative), the kernel's id under Lazarus */
    if ((long)t >= 0 && (long)t != next_id) FAIL("a new timer got id %ld, not %d", (long)t, next_id);
    next_id++;
    long before = fresh_calls;
    arm(t, 0, 0.05, 0);
    pause_for(0.3);
    if (fresh_calls != before + 1) FAIL("a new SIGEV_THREAD timer's function ran %ld times", fresh_calls - before);
    timer_delete(t);
}

static void check_running(int c)
{
    long before[NT];
    for (int i = 0; i < NT; i++) before[i] = count[i];
    pause_for(0.6);
    int periodic[] = {TA, TB, TD};
    for (int i = 0; i < 3; i++)
        if (count[periodic[i]] <= before[periodic[i]]) FAIL("periodic timer %c stopped", names[periodic[i]]);
    if (d_tid == main_tid || d_tid == worker_tid || d_tid == 0) FAIL("SIGEV_THREAD ran in thread %d", (int)d_tid);
    struct itimerspec its;
    if (timer_gettime(ids[TC], &its) < 0) FAIL("timer_gettime C: %m");
    double left = its.it_value.tv_sec + its.it_value.tv_nsec / 1e9;
    if (left <= 900 || left > 1000) FAIL("SIGEV_NONE timer C has %.3f s left", left);
    printf("c left %.3f\n", left);
    printf("f overrun %d\n", (int)max_overrun_f);
    fflush(stdout);
    check_fresh();
    printf("check %d ok\n", c);
    fflush(stdout);
}

static void wait_trigger(const char *trig, int c)
{
    char path[4096];
    snprintf(path, sizeof path, "%s.%d", trig, c);
    while (access(path, F_OK) != 0) pause_for(0.02);
}

static int listed(void)
{
    FILE *f = fopen("/proc/self/timers", "r");
    if (!f) FAIL("cannot read /proc/self/timers: %m");
    char line[256];
    int n = 0;
    while (fgets(line, sizeof line, f)) n += !strncmp(line, "ID:", 3);
    fclose(f);
    return n;
}

static _Noreturn void child(int cycles, const char *trig)
{
    if (listed() != 0) FAIL("a forked child has %d timers", listed());
    for (int i = 0; i < NT; i++) count[i] = 0;
    d_tid = 0;
    main_tid = (pid_t)gettid();
    timer_t a = make(CLOCK_MONOTONIC, SIGEV_THREAD, 0, 0xD, 0, on_d);
    timer_t b = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGRTMIN + 1, 0xA, 0, NULL);
    if ((long)b != 1) FAIL("the child's second timer has id %ld, not 1", (long)b);
    arm(a, 0, 0.03, 0.03);
    arm(b, 0, 0.03, 0.03);
    for (int c = 1; c <= cycles; c++) {
        wait_trigger(trig, c);
        if (listed() != 2) FAIL("the child has %d timers, not 2", listed());
        long ca = count[TD], cb = count[TA];
        pause_for(0.5);
        if (count[TD] <= ca || count[TA] <= cb) FAIL("the child's timers stopped");
        if (d_tid == main_tid || !d_tid) FAIL("the child's SIGEV_THREAD ran in thread %d", (int)d_tid);
        struct itimerspec its;
        if (timer_gettime(a, &its) < 0 || timer_gettime(b, &its) < 0) FAIL("the child's timer_gettime: %m");
        printf("child check %d ok\n", c);
        fflush(stdout);
    }
    exit(0);
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "fork"))) {
        fprintf(stderr, "usage: timers_posix CYCLES TRIG [fork]\n");
        return 2;
    }
    int cycles = atoi(argv[1]);
    main_tid = (pid_t)gettid();
    sigset_t b;
    sigemptyset(&b);
    sigaddset(&b, SIGRTMIN + 2);
    pthread_sigmask(SIG_BLOCK, &b, NULL); /* only the worker takes B's signal */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    for (int s = 1; s <= 4; s++) sigaction(SIGRTMIN + s, &sa, NULL);
    pthread_t w;
    pthread_create(&w, NULL, worker, NULL);
    while (!worker_tid) pause_for(0.001);

    ids[TA] = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGRTMIN + 1, 0xA, 0, NULL);
    ids[TB] = make(CLOCK_MONOTONIC, SIGEV_THREAD_ID, SIGRTMIN + 2, 0xB, worker_tid, NULL);
    ids[TC] = make(CLOCK_BOOTTIME, SIGEV_NONE, 0, 0xC, 0, NULL);
    timer_delete(make(CLOCK_MONOTONIC, SIGEV_NONE, 0, 0, 0, NULL)); /* a gap among the ids */
    ids[TD] = make(CLOCK_MONOTONIC, SIGEV_THREAD, 0, 0xD, 0, on_d);
    ids[TE] = make(CLOCK_MONOTONIC, SIGEV_SIGNAL, SIGRTMIN + 3, 0xE, 0, NULL);
    ids[TF] = make(CLOCK_REALTIME, SIGEV_SIGNAL, SIGRTMIN + 4, 0xF, 0, NULL);
    ids[TH] = make(CLOCK_MONOTONIC, SIGEV_THREAD, 0, 0x4, 0, on_h);
    timer_t g = make(CLOCK_MONOTONIC, SIGEV_NONE, 0, 0, 0, NULL);
    gap_id = (int)(long)g;
    next_id = gap_id + 1;
    timer_delete(g);
    arm(ids[TA], 0, 0.05, 0.05);
    arm(ids[TB], 0, 0.07, 0.07);
    arm(ids[TC], 0, 1000, 0);
    arm(ids[TD], 0, 0.04, 0.04);
    arm(ids[TE], 0, 2.0, 0);
    arm(ids[TF], TIMER_ABSTIME, (double)(time(NULL) + 1), 1.0);
    arm(ids[TH], 0, 2.5, 0);
    printf("ids");
    for (int i = 0; i < NT; i++) printf(" %c=%ld", names[i], (long)ids[i]);
    printf(" gap=%d\n", gap_id);
    check_listed();
    pid_t kid = -1;
    if (argc == 4) {
        pause_for(0.2);
        fflush(stdout);
        kid = fork();
        if (kid < 0) FAIL("fork: %m");
        if (kid == 0) child(cycles, argv[2]);
    }

    for (int c = 1; c <= cycles; c++) {
        pause_for(0.5);
        printf("ready %d\n", c);
        fflush(stdout);
        wait_trigger(argv[2], c);
        check_listed();
        check_running(c);
    }
    pause_for(3.0); /* past E's and H's expiry, in program time */
    if (count[TE] != 1 || count[TH] != 1)
        FAIL("one-shot timers fired E %ld and H %ld times, not once", (long)count[TE], (long)count[TH]);
    timer_t n = make(CLOCK_MONOTONIC, SIGEV_NONE, 0, 0, 0, NULL);
    if ((long)n != next_id) FAIL("a new timer got id %ld, not %d", (long)n, next_id);
    if (kid > 0) {
        int st;
        if (waitpid(kid, &st, 0) != kid || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("the child ended with status %#x", st);
    }
    printf("done\n");
    return 0;
}
