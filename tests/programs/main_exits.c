/* The main thread calls pthread_exit while a worker runs on (about 3 s),
 * for tests/test_job_processes.py: prints "ready", then the worker prints
 * "worker done" and the process exits 0. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void *work(void *arg)
{
    (void)arg;
    for (int i = 0; i < 30; i++) usleep(100000);
    printf("worker done\n");
    fflush(stdout);
    return NULL;
}

int main(void)
{
    pthread_t t;
    pthread_create(&t, NULL, work, NULL);
    printf("ready\n");
    fflush(stdout);
    pthread_exit(NULL);
}
