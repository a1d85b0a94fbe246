/* exit_code: exit status pass-through.
 *
 *   exit_code CODE|term|sleep|trap [GOFILE]
 *
 * Prints `ready`, waits until GOFILE exists (if given), then exits with CODE,
 * kills itself with SIGTERM (`term`), sleeps until a signal ends it
 * (`sleep`), or (`trap`) sleeps until SIGTERM, SIGINT or SIGHUP arrives,
 * prints `got signal N` and exits with 40+N.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t got;

static void on_signal(int sig) { got = sig; }

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exit_code CODE|term|sleep|trap [GOFILE]\n");
        return 2;
    }
    int trap = strcmp(argv[1], "trap") == 0;
    if (trap) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
    }
    printf("ready\n");
    fflush(stdout);
    struct timespec ts = {0, 20 * 1000 * 1000};
    if (argc > 2)
        while (access(argv[2], F_OK) != 0)
            nanosleep(&ts, NULL);
    if (strcmp(argv[1], "term") == 0) {
        signal(SIGTERM, SIG_DFL);
        raise(SIGTERM);
        return 99; /* not reached */
    }
    if (trap) {
        while (!got)
            nanosleep(&ts, NULL);
        printf("got signal %d\n", (int)got);
        fflush(stdout);
        return 40 + got;
    }
    if (strcmp(argv[1], "sleep") == 0) {
        for (;;)
            pause();
    }
    return atoi(argv[1]);
}
