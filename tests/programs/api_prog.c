/* api_prog: exercises the C API, lazarus_checkpoint().
 *
 *   api_prog STEPS MIB GOFILE|- [sock]
 *
 * Allocates MIB MiB, then for step 1..STEPS: mutates the whole heap in a way
 * that depends on the step, calls lazarus_checkpoint(&index) and prints
 *
 *   step S ret continued|restarted|inactive|error index N pid P digest D
 *
 * where D is a digest of the heap computed after the call returned (so after
 * a restart it shows the restored memory) and P is getpid().  With `sock`, a
 * socket is held on descriptor 9 during step 1 only (its checkpoint must fail
 * with LAZARUS_ERROR and the program must go on).  After the last step it
 * prints `waiting`, waits until GOFILE exists (unless GOFILE is `-`), and
 * prints `done digest D` and exits 0.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "lazarus.h"

static uint64_t *heap;
static size_t nwords;

static uint64_t digest(void)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < nwords; i++)
        h = (h ^ heap[i]) * 0x100000001b3ull;
    return h;
}

static const char *name(int r)
{
    switch (r) {
    case LAZARUS_INACTIVE: return "inactive";
    case LAZARUS_CONTINUED: return "continued";
    case LAZARUS_RESTARTED: return "restarted";
    case LAZARUS_ERROR: return "error";
    default: return "unknown";
    }
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: api_prog STEPS MIB GOFILE|- [sock]\n");
        return 2;
    }
    int steps = atoi(argv[1]);
    nwords = (size_t)strtoul(argv[2], NULL, 0) << 17;
    const char *gofile = argv[3];
    int with_sock = argc > 4 && strcmp(argv[4], "sock") == 0;

    heap = malloc(nwords * sizeof *heap);
    if (!heap) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < nwords; i++)
        heap[i] = i * 0x9e3779b97f4a7c15ull;

    if (with_sock) {
        int s = socket(AF_NETLINK, SOCK_RAW, 0); /* NETLINK_ROUTE: a socket Lazarus does not restore */
        if (s < 0 || dup2(s, 9) != 9) {
            perror("socket");
            return 1;
        }
        close(s);
    }

    for (int step = 1; step <= steps; step++) {
        for (size_t i = 0; i < nwords; i++)
            heap[i] = heap[i] * 6364136223846793005ull + (uint64_t)step;
        unsigned long long index = 0;
        int r = lazarus_checkpoint(&index);
        printf("step %d ret %s index %llu pid %d digest %016" PRIx64 "\n", step, name(r), index,
               (int)getpid(), digest());
        fflush(stdout);
        if (with_sock && step == 1)
            close(9);
    }
    printf("waiting\n");
    fflush(stdout);
    if (strcmp(gofile, "-") != 0) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        while (access(gofile, F_OK) != 0)
            nanosleep(&ts, NULL);
    }
    printf("done digest %016" PRIx64 "\n", digest());
    fflush(stdout);
    return 0;
}
