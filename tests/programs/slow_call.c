/* slow_call: a thread that spends seconds inside one system call while
 * making progress, as on a loaded machine (the test throttles it).
 *
 *   slow_call TASKS FILE ROUNDS
 *
 * Thread "slow-reader" writes its TID into TASKS (a cgroup v1 `tasks` file
 * whose CPU quota the test made tiny; "-" for none), then ROUNDS times reads
 * all of FILE with one pread() into a buffer of its size and folds it into a
 * digest; the main thread prints "ready" when the reader is in its first
 * read, "round N DIGEST" after each, and "done DIGEST" at the end.  Output
 * depends only on FILE and ROUNDS (and "start ROUNDS" first). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const char *tasks, *path;
static long rounds;
static volatile int reading, done_rounds;
static uint64_t digest = 1469598103934665603ull;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void *reader(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "slow-reader");
    if (strcmp(tasks, "-")) {
        FILE *f = fopen(tasks, "w");
        if (!f || fprintf(f, "%ld\n", (long)syscall(SYS_gettid)) < 0 || fclose(f)) { perror(tasks); exit(2); }
    }
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) { perror(path); exit(2); }
    size_t size = (size_t)st.st_size;
    unsigned char *buf = malloc(size);
    if (!buf) exit(2);
    for (long r = 0; r < rounds; r++) {
        reading = 1;
        size_t got = 0;
        while (got < size) { /* one call, unless the kernel returns less */
            ssize_t n = pread(fd, buf + got, size - got, (off_t)got);
            if (n <= 0) { perror("pread"); exit(2); }
            got += (size_t)n;
        }
        uint64_t h = digest;
        for (size_t i = 0; i < size; i += 64) h = (h ^ buf[i] ^ ((uint64_t)buf[i + 63] << 8)) * 1099511628211ull;
        pthread_mutex_lock(&mu);
        digest = h;
        done_rounds++;
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: slow_call TASKS FILE ROUNDS\n"); return 2; }
    tasks = argv[1];
    path = argv[2];
    rounds = atol(argv[3]);
    printf("start %ld\n", rounds);
    fflush(stdout);
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    while (!reading) usleep(1000);
    printf("ready\n");
    fflush(stdout);
    for (long r = 1; r <= rounds; r++) {
        pthread_mutex_lock(&mu);
        while (done_rounds < r) pthread_cond_wait(&cv, &mu);
        uint64_t d = digest;
        pthread_mutex_unlock(&mu);
        printf("round %ld %016" PRIx64 "\n", r, d);
        fflush(stdout);
    }
    pthread_join(t, NULL);
    printf("done %016" PRIx64 "\n", digest);
    return 0;
}
