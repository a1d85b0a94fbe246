/* A thread made in a pthread_atfork child handler that a library registers
 * in its constructor (which runs before the preloaded runtime's: tclsh's
 * way).  Built twice: with -DLIB as libatfork_thread.so, and as the program
 * linked to it.
 * The program forks; the child's handler thread counts every 10 ms; the
 * child, for each cycle c, waits for TRIG.c, checks the count still goes up
 * and prints "child c ok"; after CYCLES it waits for TRIG.(CYCLES+1) and
 * exits 0, and so does the parent after it.  Usage: atfork_thread CYCLES TRIG */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef LIB
static volatile unsigned long ticks;

static void *counter(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ms10 = {0, 10000000};
        nanosleep(&ms10, NULL);
        ticks++;
    }
    return NULL;
}

static void child_handler(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, counter, NULL) != 0) _exit(3);
}

__attribute__((constructor)) static void lib_init(void) { pthread_atfork(NULL, NULL, child_handler); }

unsigned long atfork_ticks(void) { return ticks; }
#else
unsigned long atfork_ticks(void);

static void wait_file(const char *base, int c)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%d", base, c);
    while (access(p, F_OK) != 0) usleep(20000);
}

int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    int cycles = atoi(argv[1]);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        for (int c = 1; c <= cycles; c++) {
            if (c == 1) { printf("ready\n"); fflush(stdout); }
            wait_file(argv[2], c);
            unsigned long t0 = atfork_ticks();
            usleep(300000);
            unsigned long t1 = atfork_ticks();
            if (t1 <= t0) { printf("FAIL child %d: the handler's thread does not run (%lu)\n", c, t1); fflush(stdout); _exit(1); }
            printf("child %d ok\n", c);
            fflush(stdout);
        }
        wait_file(argv[2], cycles + 1);
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 1;
    printf("done\n");
    return 0;
}
#endif
