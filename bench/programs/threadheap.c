/* threadheap: a heap shared by N threads, each writing its own slice;
 * bench/threads.py checkpoints it, driven over stdin.
 *
 *   threadheap MIB NTHREADS MODE        (normally under `lazarus run`)
 *
 * Maps MIB MiB of private anonymous memory (MADV_NOHUGEPAGE: 4 KiB pages,
 * like bench/incremental.py's pause figure) and cuts it into NTHREADS
 * slices.  NTHREADS threads in all, the main thread being the first: each
 * fills its own slice with pseudo-random data (nothing compresses, no page
 * repeats), then the main thread prints
 *   filled BYTES threads=N hugekb=K
 * and reads commands, one a line:
 *   dirty PCT   each thread rewrites about PCT % of its slice's pages (chosen
 *               at random, in its slice only) with new random data; prints
 *               "dirtied PAGES seconds=S"
 *   quit        exits 0
 * MODE says what the threads do between commands, i.e. while checkpoints
 * are taken:
 *   idle   the main thread waits in read(), the others on a condition
 *          variable (futex)
 *   busy   every thread computes (a loop over its registers, no stores to
 *          the heap); the main thread polls stdin between rounds of it
 * With NTHREADS 1 there is only the main thread.
 */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_mem.h"

#define PAGE 4096ul

static unsigned char *heap;
static size_t heap_pages;
static long nthreads;
static int busy;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static volatile long generation, ndone;
static volatile long cmd_pct; /* 0: fill */
static volatile int quitting;
static volatile uint64_t sink;
static long dirtied_pages[1024];

struct slice {
    long index;
    size_t first, count; /* pages */
    uint64_t rng;
};
static struct slice slices[1024];

static inline uint64_t next64(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void write_page(struct slice *sl, size_t page)
{
    uint64_t *w = (uint64_t *)(heap + page * PAGE);
    for (size_t i = 0; i < PAGE / sizeof *w; i++) w[i] = next64(&sl->rng);
}

/* the command of the current generation, on this thread's slice */
static void do_command(struct slice *sl, long pct)
{
    long n = 0;
    if (pct == 0) {
        for (size_t p = 0; p < sl->count; p++) write_page(sl, sl->first + p);
        n = (long)sl->count;
    } else {
        /* about pct % of the pages: each with probability pct/100 */
        uint64_t limit = (uint64_t)pct * (UINT64_MAX / 100);
        for (size_t p = 0; p < sl->count; p++)
            if (next64(&sl->rng) < limit) {
                write_page(sl, sl->first + p);
                n++;
            }
    }
    dirtied_pages[sl->index] = n;
}

static uint64_t compute(uint64_t x, long rounds)
{
    for (long i = 0; i < rounds; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

static void *worker(void *arg)
{
    struct slice *sl = arg;
    long seen = 0;
    uint64_t x = (uint64_t)sl->index;
    for (;;) {
        if (busy) {
            while (__atomic_load_n(&generation, __ATOMIC_ACQUIRE) == seen && !quitting) x = compute(x, 1000);
            sink = x;
        } else {
            pthread_mutex_lock(&mu);
            while (generation == seen && !quitting) pthread_cond_wait(&cv, &mu);
            pthread_mutex_unlock(&mu);
        }
        if (quitting) return NULL;
        seen = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
        do_command(sl, cmd_pct);
        pthread_mutex_lock(&mu);
        ndone++;
        pthread_cond_signal(&done_cv);
        pthread_mutex_unlock(&mu);
    }
}

/* every thread runs the command on its slice; returns the pages written */
static long run_command(long pct)
{
    pthread_mutex_lock(&mu);
    cmd_pct = pct;
    ndone = 0;
    __atomic_fetch_add(&generation, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    do_command(&slices[0], pct);
    pthread_mutex_lock(&mu);
    while (ndone < nthreads - 1) pthread_cond_wait(&done_cv, &mu);
    pthread_mutex_unlock(&mu);
    long n = 0;
    for (long i = 0; i < nthreads; i++) n += dirtied_pages[i];
    return n;
}

/* a line from stdin; in busy mode the main thread computes until one comes */
static int read_line(char *buf, size_t cap)
{
    if (busy) {
        uint64_t x = 7;
        struct pollfd p = {.fd = 0, .events = POLLIN};
        while (poll(&p, 1, 0) == 0) x = compute(x, 1000);
        sink = x;
    }
    return fgets(buf, (int)cap, stdin) != NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "idle") && strcmp(argv[3], "busy"))) {
        fprintf(stderr, "usage: threadheap MIB NTHREADS idle|busy\n");
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 0) << 20;
    nthreads = strtol(argv[2], NULL, 0);
    busy = !strcmp(argv[3], "busy");
    if (nthreads < 1 || nthreads > 1024) {
        fprintf(stderr, "threadheap: 1 to 1024 threads\n");
        return 2;
    }
    heap = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (heap == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    madvise(heap, bytes, MADV_NOHUGEPAGE);
    heap_pages = bytes / PAGE;
    for (long i = 0; i < nthreads; i++) {
        slices[i].index = i;
        slices[i].first = heap_pages * (size_t)i / (size_t)nthreads;
        slices[i].count = heap_pages * (size_t)(i + 1) / (size_t)nthreads - slices[i].first;
        slices[i].rng = 0x243f6a8885a308d3ull * (uint64_t)(i + 1) | 1;
    }
    pthread_t th[1024];
    for (long i = 1; i < nthreads; i++)
        if (pthread_create(&th[i], NULL, worker, &slices[i])) {
            perror("pthread_create");
            return 1;
        }
    run_command(0);
    printf("filled %zu threads=%ld hugekb=%ld\n", bytes, nthreads, hugekb());
    fflush(stdout);
    char line[128];
    while (read_line(line, sizeof line)) {
        long pct;
        if (sscanf(line, "dirty %ld", &pct) == 1 && pct > 0) {
            double t0 = mono_s();
            long n = run_command(pct);
            printf("dirtied %ld seconds=%.6f\n", n, mono_s() - t0);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    pthread_mutex_lock(&mu);
    quitting = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (long i = 1; i < nthreads; i++) pthread_join(th[i], NULL);
    return 0;
}
