/* signals_timers: alarms, interval timers, signal handlers and clock_gettime.
 *
 *   signals_timers [PHASES [WORK]]          defaults: 24 phases, 30000000 work units
 *
 * Each phase does WORK units of deterministic work (on a 4 MiB static array
 * and a running checksum, reading CLOCK_MONOTONIC and CLOCK_REALTIME through
 * the vDSO as it goes), raises SIGUSR1 once, then arms a one-shot SIGALRM --
 * alarm(1) in every third phase, setitimer(ITIMER_REAL, 0.2 s) in the
 * others -- and waits in sigsuspend() until the handler has counted it.  So
 * the program only finishes if alarms keep arriving after every restart.
 *
 * Other state that must survive: a periodic ITIMER_PROF (10 ms, SIGPROF
 * handler), SIGUSR2 blocked and pending since the start, SIGALRM blocked
 * outside sigsuspend, the SIGUSR1 handler.  At the end the program prints one
 * line per check and the counters; with a correct restart every line is the
 * same as in an uninterrupted run:
 *
 *   start phases=P work=W
 *   phase N/P                    (every 4 phases)
 *   ticks P usr1 P
 *   prof-timer ok | prof-timer LOST
 *   usr1-handler ok | usr1-handler LOST
 *   mask ok | mask LOST
 *   pending ok | pending LOST
 *   realtime ok | realtime BACKWARDS
 *   work <16 hex digits>
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define ARRAY_WORDS (4u << 17) /* 4 MiB */

static uint64_t array[ARRAY_WORDS];
static volatile sig_atomic_t ticks, usr1, prof;

static void on_alarm(int sig) { (void)sig; ticks++; }
static void on_usr1(int sig) { (void)sig; usr1++; }
static void on_prof(int sig) { (void)sig; prof++; }

static int64_t now_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void handle(int sig, void (*fn)(int), int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = fn;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    if (sigaction(sig, &sa, NULL) != 0) {
        perror("sigaction");
        exit(1);
    }
}

int main(int argc, char **argv)
{
    long phases = argc > 1 ? strtol(argv[1], NULL, 0) : 24;
    long work = argc > 2 ? strtol(argv[2], NULL, 0) : 30000000;
    if (phases <= 0 || work <= 0) {
        fprintf(stderr, "usage: signals_timers [PHASES [WORK]]\n");
        return 2;
    }

    handle(SIGALRM, on_alarm, 0);
    handle(SIGUSR1, on_usr1, 0);
    handle(SIGPROF, on_prof, SA_RESTART);

    sigset_t block, waitmask;
    sigemptyset(&block);
    sigaddset(&block, SIGALRM);
    sigaddset(&block, SIGUSR2);
    sigprocmask(SIG_BLOCK, &block, NULL);
    raise(SIGUSR2); /* stays pending for the whole run */
    sigprocmask(SIG_BLOCK, NULL, &waitmask);
    sigdelset(&waitmask, SIGALRM);

    struct itimerval prof_it = {{0, 10000}, {0, 10000}};
    if (setitimer(ITIMER_PROF, &prof_it, NULL) != 0) {
        perror("setitimer");
        return 1;
    }

    int64_t rt_start = now_ns(CLOCK_REALTIME);
    int realtime_ok = 1;
    uint64_t x = 0x243f6a8885a308d3ull, sum = 0;
    for (size_t i = 0; i < ARRAY_WORDS; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        array[i] = x;
    }
    printf("start phases=%ld work=%ld\n", phases, work);
    fflush(stdout);

    for (long p = 1; p <= phases; p++) {
        int64_t mono_last = now_ns(CLOCK_MONOTONIC);
        for (long w = 0; w < work; w++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t idx = (size_t)(x >> 33) % ARRAY_WORDS;
            array[idx] ^= x + (uint64_t)p;
            sum = (sum ^ array[idx]) * 0x100000001b3ull;
            if ((w & 0xffff) == 0) {
                /* the vDSO clocks must keep working after a restart */
                int64_t m = now_ns(CLOCK_MONOTONIC);
                if (m > mono_last)
                    mono_last = m;
                if (now_ns(CLOCK_REALTIME) < rt_start)
                    realtime_ok = 0;
            }
        }
        raise(SIGUSR1);

        int want = ticks + 1;
        if (p % 3 == 0) {
            alarm(1);
        } else {
            struct itimerval it = {{0, 0}, {0, 200000}};
            setitimer(ITIMER_REAL, &it, NULL);
        }
        while (ticks < want)
            sigsuspend(&waitmask);

        if (p % 4 == 0 || p == phases) {
            printf("phase %ld/%ld\n", p, phases);
            fflush(stdout);
        }
    }

    printf("ticks %d usr1 %d\n", (int)ticks, (int)usr1);

    struct itimerval cur;
    getitimer(ITIMER_PROF, &cur);
    printf("prof-timer %s\n",
           cur.it_interval.tv_sec == 0 && cur.it_interval.tv_usec == 10000 ? "ok" : "LOST");

    struct sigaction sa;
    sigaction(SIGUSR1, NULL, &sa);
    printf("usr1-handler %s\n", sa.sa_handler == on_usr1 ? "ok" : "LOST");

    sigset_t mask, pending;
    sigprocmask(SIG_BLOCK, NULL, &mask);
    printf("mask %s\n", sigismember(&mask, SIGUSR2) && sigismember(&mask, SIGALRM) &&
                                !sigismember(&mask, SIGUSR1) ? "ok" : "LOST");
    sigpending(&pending);
    printf("pending %s\n", sigismember(&pending, SIGUSR2) ? "ok" : "LOST");

    if (now_ns(CLOCK_REALTIME) < rt_start)
        realtime_ok = 0;
    printf("realtime %s\n", realtime_ok ? "ok" : "BACKWARDS");

    for (size_t i = 0; i < ARRAY_WORDS; i++)
        sum = (sum ^ array[i]) * 0x100000001b3ull;
    printf("work %016" PRIx64 "\n", sum);
    fflush(stdout);
    return 0;
}
