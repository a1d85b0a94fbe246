/* omp_phases: an OpenMP program that works in phases on a large array.
 *
 *   omp_phases MIB PHASES ROUNDS RESULTFILE     (gcc -fopenmp; OMP_NUM_THREADS)
 *
 * Fills MIB MiB of 64-bit words, then for each of PHASES phases rewrites
 * every word ROUNDS times with an integer mixing function (a parallel for,
 * static schedule) while reducing the new words with + and ^ (OpenMP
 * reductions), and appends one line per phase to RESULTFILE (fopen "a",
 * fclose: a file the program changes, which a restart must roll back).
 * Integer sums and xors do not depend on the order of the terms, so the
 * results are the same for any number of threads and any schedule.
 * Output (stdout, and the same "phase" lines in RESULTFILE):
 *
 *   start mib=M phases=P rounds=R
 *   phase N sum=<16 hex> xor=<16 hex>       (each phase)
 *   done digest=<16 hex>                    (of the whole array at the end)
 *
 * On stderr: "threads T" (omp_get_max_threads), and "FEWER THREADS" if a
 * parallel region ran with fewer threads than that.  A watchdog (SIGALRM
 * every second) exits 3 with "STALLED" after 10 s without a finished phase.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* Watchdog: a process-wide interval timer (restored by a restart like any
 * itimer); if the program makes no progress for STALL_S seconds (a thread
 * lost by a restart, so a barrier or a condition never comes) it says so and
 * exits 3 instead of hanging. */
#define STALL_S 10
static volatile sig_atomic_t progress, last_progress, idle_s;

static void on_alarm(int sig)
{
    (void)sig;
    if (progress != last_progress) {
        last_progress = progress;
        idle_s = 0;
    } else if (++idle_s >= STALL_S) {
        static const char msg[] = "STALLED: no progress for 10 s\n";
        ssize_t r = write(2, msg, sizeof msg - 1);
        (void)r;
        _exit(3);
    }
}

static void start_watchdog(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{1, 0}, {1, 0}};
    setitimer(ITIMER_REAL, &it, NULL);
}

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: omp_phases MIB PHASES ROUNDS RESULTFILE\n");
        return 2;
    }
    size_t n = strtoul(argv[1], NULL, 0) << 17;
    long phases = strtol(argv[2], NULL, 0), rounds = strtol(argv[3], NULL, 0);
    const char *result = argv[4];
    uint64_t *a = malloc(n * sizeof *a);
    if (!a) {
        perror("malloc");
        return 1;
    }
    start_watchdog();
    int want = omp_get_max_threads();
    fprintf(stderr, "threads %d\n", want);
    printf("start mib=%s phases=%ld rounds=%ld\n", argv[1], phases, rounds);
    fflush(stdout);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = mix(i + 1);
    for (long p = 0; p < phases; p++) {
        uint64_t sum = 0, x = 0;
        int team = 0;
#pragma omp parallel reduction(+ : sum) reduction(^ : x)
        {
#pragma omp single
            team = omp_get_num_threads();
#pragma omp for schedule(static)
            for (size_t i = 0; i < n; i++) {
                uint64_t v = a[i] ^ (uint64_t)p;
                for (long r = 0; r < rounds; r++) v = mix(v + (uint64_t)r);
                a[i] = v;
                sum += v;
                x ^= v * (i | 1);
            }
        }
        if (team < want) fprintf(stderr, "FEWER THREADS: phase %ld ran with %d\n", p, team);
        FILE *f = fopen(result, "a");
        if (!f) {
            perror(result);
            return 1;
        }
        fprintf(f, "phase %ld sum=%016" PRIx64 " xor=%016" PRIx64 "\n", p, sum, x);
        if (fclose(f) != 0) {
            perror(result);
            return 1;
        }
        printf("phase %ld sum=%016" PRIx64 " xor=%016" PRIx64 "\n", p, sum, x);
        fflush(stdout);
        progress++;
    }
    uint64_t d = 0;
#pragma omp parallel for schedule(static) reduction(+ : d)
    for (size_t i = 0; i < n; i++) d += mix(a[i] + i);
    printf("done digest=%016" PRIx64 "\n", d);
    return 0;
}
