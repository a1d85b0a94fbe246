/* term_probe MODE: what a program sees of SIGTERM (tests/test_sigterm.py).
 * Prints "disposition default|ignore|handler" as sigaction() shows SIGTERM
 * to it, then "ready", then "step N" every 20 ms, forever.  MODE:
 *   dfl   SIGTERM left at its default;
 *   own   a handler of its own: it prints "handler ran" and exits 3;
 *   fork  a child that steps too (a second process of the job);
 *   reap  a child ended with SIGTERM by this process: "child signal S in
 *         N ms", then exit 0. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void on_term(int sig)
{
    (void)sig;
    static const char m[] = "handler ran\n";
    write(1, m, sizeof m - 1);
    _exit(3);
}

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static void steps(const char *who)
{
    struct timespec d = {0, 20 * 1000 * 1000};
    for (long n = 0;; n++) {
        printf("%sstep %ld\n", who, n);
        fflush(stdout);
        nanosleep(&d, NULL);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "dfl";
    struct sigaction old;
    sigaction(SIGTERM, NULL, &old);
    printf("disposition %s\n", old.sa_handler == SIG_DFL ? "default" : old.sa_handler == SIG_IGN ? "ignore" : "handler");
    if (!strcmp(mode, "own")) signal(SIGTERM, on_term);
    if (!strcmp(mode, "reap")) {
        pid_t c = fork();
        if (c == 0) { for (;;) pause(); }
        struct timespec d = {0, 200 * 1000 * 1000};
        nanosleep(&d, NULL);
        double t0 = now_ms();
        kill(c, SIGTERM);
        int st;
        waitpid(c, &st, 0);
        printf("child signal %d in %.0f ms\n", WIFSIGNALED(st) ? WTERMSIG(st) : 0, now_ms() - t0);
        return 0;
    }
    if (!strcmp(mode, "fork") && fork() == 0) {
        printf("child %d ready\n", getpid());
        steps("child ");
    }
    printf("ready\n");
    steps("");
}
