/* prodcons: pthread producers and consumers around a bounded queue in
 * memory (one mutex, two condition variables), in rounds.
 *
 *   prodcons NPROD NCONS ITEMS ROUNDS QCAP WORK
 *
 * In each round every producer puts ITEMS items (a value derived from the
 * round, the producer and the item's number) into a queue of QCAP slots,
 * waiting while it is full; NCONS consumers take them, waiting while it is
 * empty, spend WORK mixing steps on each value and add the result to the
 * round's sum and xor, and mark the item as seen.  The main thread waits
 * for the round's last item, checks that every item was seen exactly once,
 * prints the round's line, and starts the next round.  Sums and xors do not
 * depend on which consumer took which item, so the output depends only on
 * the arguments:
 *
 *   start nprod=P ncons=C items=I rounds=R qcap=Q work=W
 *   round N sum=<16 hex> xor=<16 hex> items=K   (each round)
 *   round N LOST|DUPLICATE item ...              (never, with a correct run)
 *   done digest=<16 hex>
 *
 * A watchdog (SIGALRM every second) exits 3 with "STALLED" on stderr after
 * 10 s without a finished round.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static long nprod, ncons, items, rounds, qcap, work;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t round_cv = PTHREAD_COND_INITIALIZER; /* a round starts or ends */
static uint64_t *queue;   /* item ids (producer * items + k) */
static long qhead, qlen;
static long round_no = -1, consumed, finished;
static uint64_t rsum, rxor;
static unsigned char *seen;

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
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static void *producer(void *arg)
{
    long p = (long)arg, done_round = -1;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (round_no == done_round && !finished) pthread_cond_wait(&round_cv, &mu);
        if (finished) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        long r = round_no;
        pthread_mutex_unlock(&mu);
        for (long k = 0; k < items; k++) {
            pthread_mutex_lock(&mu);
            while (qlen == qcap) pthread_cond_wait(&not_full, &mu);
            queue[(qhead + qlen) % qcap] = (uint64_t)(p * items + k) << 20 | (uint64_t)r;
            qlen++;
            pthread_cond_signal(&not_empty);
            pthread_mutex_unlock(&mu);
        }
        done_round = r;
    }
}

static void *consumer(void *arg)
{
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        while (qlen == 0 && !finished) pthread_cond_wait(&not_empty, &mu);
        if (qlen == 0) {
            pthread_mutex_unlock(&mu);
            return NULL;
        }
        uint64_t it = queue[qhead];
        qhead = (qhead + 1) % qcap;
        qlen--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&mu);
        uint64_t v = mix(it * 0x9e3779b97f4a7c15ull + 7);
        for (long w = 0; w < work; w++) v = mix(v + (uint64_t)w);
        pthread_mutex_lock(&mu);
        rsum += v;
        rxor ^= v;
        uint64_t id = it >> 20;
        if (seen[id] < 255) seen[id]++;
        consumed++;
        if (consumed == nprod * items) pthread_cond_broadcast(&round_cv);
        pthread_mutex_unlock(&mu);
    }
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: prodcons NPROD NCONS ITEMS ROUNDS QCAP WORK\n");
        return 2;
    }
    nprod = atol(argv[1]);
    ncons = atol(argv[2]);
    items = atol(argv[3]);
    rounds = atol(argv[4]);
    qcap = atol(argv[5]);
    work = atol(argv[6]);
    start_watchdog();
    setvbuf(stdout, NULL, _IOLBF, 0);
    queue = calloc((size_t)qcap, sizeof *queue);
    seen = calloc((size_t)(nprod * items), 1);
    pthread_t *th = calloc((size_t)(nprod + ncons), sizeof *th);
    if (!queue || !seen || !th) return 1;
    printf("start nprod=%ld ncons=%ld items=%ld rounds=%ld qcap=%ld work=%ld\n", nprod, ncons, items, rounds, qcap, work);
    for (long i = 0; i < nprod + ncons; i++) {
        int e = pthread_create(&th[i], NULL, i < nprod ? producer : consumer, (void *)i);
        if (e) {
            fprintf(stderr, "pthread_create: %s\n", strerror(e));
            return 1;
        }
        char name[16];
        snprintf(name, sizeof name, i < nprod ? "prod-%ld" : "cons-%ld", i < nprod ? i : i - nprod);
        pthread_setname_np(th[i], name);
    }
    uint64_t digest = 0;
    int bad = 0;
    for (long r = 0; r < rounds; r++) {
        pthread_mutex_lock(&mu);
        memset(seen, 0, (size_t)(nprod * items));
        consumed = 0;
        rsum = rxor = 0;
        round_no = r;
        pthread_cond_broadcast(&round_cv);
        while (consumed < nprod * items) pthread_cond_wait(&round_cv, &mu);
        uint64_t s = rsum, x = rxor;
        long lost = 0, dup = 0;
        for (long i = 0; i < nprod * items; i++) {
            lost += seen[i] == 0;
            dup += seen[i] > 1;
        }
        pthread_mutex_unlock(&mu);
        if (lost || dup) {
            printf("round %ld LOST %ld DUPLICATE %ld\n", r, lost, dup);
            bad = 1;
        }
        printf("round %ld sum=%016" PRIx64 " xor=%016" PRIx64 " items=%ld\n", r, s, x, nprod * items);
        digest = mix(digest ^ s) + x;
        progress++;
    }
    pthread_mutex_lock(&mu);
    finished = 1;
    pthread_cond_broadcast(&round_cv);
    pthread_cond_broadcast(&not_empty);
    pthread_mutex_unlock(&mu);
    for (long i = 0; i < nprod + ncons; i++) pthread_join(th[i], NULL);
    printf("done digest=%016" PRIx64 "\n", digest);
    return bad ? 3 : 0;
}
