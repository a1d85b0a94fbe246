/* After a checkpoint (the program sleeps while one is taken), fills the
 * address space from the top with large PROT_NONE reservations until one
 * lands below its stack, then recurses 4 MiB deep: natively the kernel keeps
 * a stack limit's room below the stack for it; a restarted program must
 * still have it (test_memory_restart.py).  Prints "deep N" and exits 0. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static int rec(int n)
{
    volatile char buf[1024];
    memset((char *)buf, n & 0x7f, sizeof buf);
    return n ? rec(n - 1) + (buf[5] & 1) : 0;
}

int main(int argc, char **argv)
{
    int naps = argc > 1 ? 0 : 30;
    (void)argv;
    printf("start\n");
    fflush(stdout);
    for (int i = 0; i < naps; i++) {
        struct timespec t = {0, 100000000};
        nanosleep(&t, NULL);
    }
    volatile char here;
    uintptr_t sp = (uintptr_t)&here;
    int below = 0;
    for (int i = 0; i < 400 && !below; i++) {
        void *m = mmap(NULL, 256ul << 20, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) break;
        below = (uintptr_t)m < sp;
    }
    printf("deep %d\n", rec(4000));
    return 0;
}
