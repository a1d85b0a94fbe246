/* show_regs: known register values for `lazarus show threads` (tests/test_show.py).
 *
 *   show_regs DIR
 *
 * Names its main thread "regs-main" and starts "regs-spin", which blocks
 * SIGUSR2 and SIGWINCH, loads r12-r15 with the values below and spins on one
 * jump forever: wherever a checkpoint interrupts it after `ready`, those
 * registers hold them.  Prints `ready TID` (the spinning thread's) once it spins, then polls
 * every 20 ms for DIR/stop and exits when it appears.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static volatile pid_t spin_tid;

static void *spin(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "regs-spin");
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR2);
    sigaddset(&m, SIGWINCH);
    pthread_sigmask(SIG_BLOCK, &m, NULL);
    pid_t tid = gettid();
    /* the TID is published only once the registers hold their values: main
     * says `ready` after that, so no checkpoint comes between */
    __asm__ volatile("mov $0x1122334455667788, %%r12\n\t"
                     "mov $0x99aabbccddeeff00, %%r13\n\t"
                     "mov $0x0123456789abcdef, %%r14\n\t"
                     "mov $0xfedcba9876543210, %%r15\n\t"
                     "movl %1, %0\n\t"
                     "1: jmp 1b\n\t"
                     : "=m"(spin_tid) : "r"(tid) : "r12", "r13", "r14", "r15", "memory");
    __builtin_unreachable();
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: show_regs DIR\n"); return 2; }
    pthread_setname_np(pthread_self(), "regs-main");
    pthread_t t;
    if (pthread_create(&t, NULL, spin, NULL)) return 1;
    struct timespec tick = {0, 20 * 1000000};
    while (!spin_tid) nanosleep(&tick, NULL);
    printf("ready %d\n", (int)spin_tid);
    fflush(stdout);
    char stop[4096];
    snprintf(stop, sizeof stop, "%s/stop", argv[1]);
    while (access(stop, F_OK) != 0) nanosleep(&tick, NULL);
    return 0;
}
