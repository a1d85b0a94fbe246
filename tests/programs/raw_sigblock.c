/* raw_sigblock: a thread that blocks SIGURG (the checkpoint signal) with a
 * raw rt_sigprocmask system call, which the runtime does not see.
 *
 *   raw_sigblock CHUNKS WORK      (in a directory the program may poll)
 *
 * Threads: main (named "urg-main"), "urg-blocker" and "urg-worker".
 * urg-blocker blocks SIGURG with syscall(SYS_rt_sigprocmask), prints
 * "blocked tid=T", then computes CHUNKS chunks of WORK mixing steps and waits
 * (polling every 20 ms, SIGURG still blocked) until a file named "unblock"
 * exists in the working directory; then it unblocks SIGURG the same raw way,
 * prints "unblocked", checks that its mask holds exactly what it should, and
 * computes CHUNKS more chunks.  urg-worker computes 2*CHUNKS chunks meanwhile.
 * Results depend only on the arguments:
 *
 *   start chunks=C work=W
 *   blocked tid=T
 *   unblocked
 *   blocker result=<16 hex> mask ok|mask BAD <hex>
 *   worker result=<16 hex>
 *   done
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static long chunks, work;
static uint64_t blocker_result, worker_result;
static uint64_t blocker_mask;

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

static uint64_t chunk(uint64_t v)
{
    for (long w = 0; w < work; w++) v = mix(v + (uint64_t)w);
    return v;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void *blocker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "urg-blocker");
    uint64_t set = 1ull << (SIGURG - 1), cur = 0;
    if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &set, NULL, 8) != 0) {
        perror("rt_sigprocmask");
        exit(1);
    }
    printf("blocked tid=%d\n", (int)gettid());
    uint64_t v = 1;
    for (long c = 0; c < chunks; c++) v = chunk(v);
    while (access("unblock", F_OK) != 0) sleep_ms(20);
    syscall(SYS_rt_sigprocmask, SIG_UNBLOCK, &set, NULL, 8);
    printf("unblocked\n");
    syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &cur, 8);
    blocker_mask = cur;
    for (long c = 0; c < chunks; c++) v = chunk(v);
    blocker_result = v;
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "urg-worker");
    uint64_t v = 2;
    for (long c = 0; c < 2 * chunks; c++) v = chunk(v);
    worker_result = v;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: raw_sigblock CHUNKS WORK\n");
        return 2;
    }
    chunks = atol(argv[1]);
    work = atol(argv[2]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_setname_np(pthread_self(), "urg-main");
    printf("start chunks=%ld work=%ld\n", chunks, work);
    pthread_t b, w;
    if (pthread_create(&b, NULL, blocker, NULL) || pthread_create(&w, NULL, worker, NULL)) return 1;
    pthread_join(b, NULL);
    pthread_join(w, NULL);
    /* only SIGURG was ever touched, and it is unblocked again */
    if (blocker_mask == 0) printf("blocker result=%016" PRIx64 " mask ok\n", blocker_result);
    else printf("blocker result=%016" PRIx64 " mask BAD %016" PRIx64 "\n", blocker_result, blocker_mask);
    printf("worker result=%016" PRIx64 "\n", worker_result);
    printf("done\n");
    return 0;
}
