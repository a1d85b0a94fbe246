/* thread_churn: up to SLOTS threads at a time, each created for one small
 * job and exiting when it is done, in waves.
 *
 *   thread_churn SLOTS WAVES JOBS WORK
 *
 * Each wave has JOBS jobs; the main thread keeps SLOTS of them running, each
 * in a thread of its own (pthread_create; the thread names itself "job-N",
 * computes WORK mixing steps from its job number, stores the result and
 * exits; every 4th thread is detached, the others joined), starting the next
 * job as soon as a thread is done.  After the last job of a wave, the main
 * thread folds the wave's results, in job order, into a digest.  The output
 * depends only on the arguments:
 *
 *   start slots=S waves=W jobs=J work=K
 *   wave N digest=<16 hex>           (each wave)
 *   done digest=<16 hex>
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long slots, waves, jobs, work;
static uint64_t *results;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long running, finished_jobs;
static long *done_list, ndone; /* joinable jobs whose thread is done */

struct job {
    long id, index;
    int detached;
};

static inline uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static pthread_t *tids;

static void *job_main(void *arg)
{
    struct job j = *(struct job *)arg;
    free(arg);
    char name[16];
    snprintf(name, sizeof name, "job-%ld", j.id);
    pthread_setname_np(pthread_self(), name);
    uint64_t v = (uint64_t)j.id * 0x9e3779b97f4a7c15ull;
    for (long w = 0; w < work; w++) v = mix(v + (uint64_t)w);
    pthread_mutex_lock(&mu);
    results[j.index] = v;
    running--;
    finished_jobs++;
    if (!j.detached) done_list[ndone++] = j.index;
    pthread_cond_signal(&cv);
    pthread_mutex_unlock(&mu);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: thread_churn SLOTS WAVES JOBS WORK\n");
        return 2;
    }
    slots = atol(argv[1]);
    waves = atol(argv[2]);
    jobs = atol(argv[3]);
    work = atol(argv[4]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    results = calloc((size_t)jobs, sizeof *results);
    done_list = calloc((size_t)jobs, sizeof *done_list);
    tids = calloc((size_t)jobs, sizeof *tids);
    if (!results || !done_list || !tids) return 1;
    printf("start slots=%ld waves=%ld jobs=%ld work=%ld\n", slots, waves, jobs, work);
    uint64_t total = 0;
    for (long w = 0; w < waves; w++) {
        memset(results, 0, (size_t)jobs * sizeof *results);
        long next = 0;
        pthread_mutex_lock(&mu);
        finished_jobs = 0;
        while (finished_jobs < jobs) {
            while (next < jobs && running < slots) {
                struct job *j = malloc(sizeof *j);
                if (!j) return 1;
                j->id = w * jobs + next;
                j->index = next;
                j->detached = next % 4 == 3;
                pthread_attr_t a;
                pthread_attr_init(&a);
                pthread_attr_setstacksize(&a, 256 << 10);
                if (j->detached) pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
                int e = pthread_create(&tids[next], &a, job_main, j);
                pthread_attr_destroy(&a);
                if (e) {
                    fprintf(stderr, "pthread_create: %s\n", strerror(e));
                    return 1;
                }
                running++;
                next++;
            }
            while (ndone > 0) {
                long idx = done_list[--ndone];
                pthread_mutex_unlock(&mu);
                pthread_join(tids[idx], NULL);
                pthread_mutex_lock(&mu);
            }
            if (finished_jobs < jobs && (next == jobs || running == slots) && ndone == 0)
                pthread_cond_wait(&cv, &mu);
        }
        while (ndone > 0) {
            long idx = done_list[--ndone];
            pthread_mutex_unlock(&mu);
            pthread_join(tids[idx], NULL);
            pthread_mutex_lock(&mu);
        }
        pthread_mutex_unlock(&mu);
        uint64_t d = 0;
        for (long i = 0; i < jobs; i++) d = mix(d ^ results[i]) + (uint64_t)i;
        total = mix(total ^ d);
        printf("wave %ld digest=%016" PRIx64 "\n", w, d);
    }
    printf("done digest=%016" PRIx64 "\n", total);
    return 0;
}
