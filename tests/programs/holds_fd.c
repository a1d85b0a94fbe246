/* holds_fd: holds a descriptor that cannot be checkpointed, then lets go.
 *
 *   holds_fd socket|pidfd FD FILE1 FILE2
 *
 * Opens a netlink socket (or a pidfd of itself) on descriptor FD, prints `ready`, keeps
 * computing until FILE1 exists, closes FD, prints `closed`, keeps computing
 * until FILE2 exists, then prints `done` and exits 0.
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t state = 88172645463325252ull;

static void work_until(const char *path)
{
    struct timespec ts = {0, 10 * 1000 * 1000};
    while (access(path, F_OK) != 0) {
        for (int i = 0; i < 100000; i++) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
        }
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: holds_fd socket|pidfd FD FILE1 FILE2\n");
        return 2;
    }
    int want = atoi(argv[2]);
    int fd = strcmp(argv[1], "pidfd") == 0 ? (int)syscall(SYS_pidfd_open, getpid(), 0) : socket(AF_NETLINK, SOCK_RAW, 0 /* NETLINK_ROUTE */);
    if (fd < 0 || dup2(fd, want) != want) {
        perror("open");
        return 1;
    }
    if (fd != want)
        close(fd);
    printf("ready\n");
    fflush(stdout);
    work_until(argv[3]);
    close(want);
    printf("closed\n");
    fflush(stdout);
    work_until(argv[4]);
    printf("done\n");
    fflush(stdout);
    return 0;
}
