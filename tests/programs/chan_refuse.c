/* chan_refuse: holds, on descriptor 7, a pipe or socket end a checkpoint must
 * refuse (its other end is elsewhere, or it is not a local pair), then lets go.
 *
 *   chan_refuse KIND FILE1 FILE2
 *
 * KIND: halfpair (a socket pair whose other end was closed), listen (a
 * listening AF_UNIX socket) -- both restored now (test_unix_sockets.py), no
 * longer used --, inet (a listening TCP socket on 127.0.0.1),
 * longer used --, inet (a listening TCP socket on 127.0.0.1 with a
 * connection of its own not yet accepted),
 * childpipe (the write end of a pipe whose read end a child process holds),
 * childsock (a socket pair whose other end a child process holds),
 * outsock (a socket pair whose other end an orphan outside the job holds),
 * peekedempty (a datagram socket pair, both ends held, with an empty message
 * queued on descriptor 7 that the program peeked at: a peek at an offset no
 * longer sees it, so a checkpoint cannot copy it).
 * Prints `ready`, keeps computing until FILE1 exists, closes descriptor 7
 * (and ends the child), prints `closed`, keeps computing until FILE2 exists,
 * then prints `done` and exits 0.
 */
#define _GNU_SOURCE
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
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

/* A child holding `keep` (and nothing else of ours) until we are gone. */
static pid_t child_holding(int keep, int drop)
{
    pid_t pid = fork();
    if (pid == 0) {
        close(drop);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) pause();
    }
    close(keep);
    return pid;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: chan_refuse halfpair|listen|inet|childpipe|childsock|outsock|peekedempty FILE1 FILE2\n");
        return 2;
    }
    const char *kind = argv[1];
    int fd = -1, two[2], other = -1;
    pid_t child = 0;
    if (!strcmp(kind, "halfpair") && socketpair(AF_UNIX, SOCK_STREAM, 0, two) == 0) {
        fd = two[0];
        close(two[1]);
    } else if (!strcmp(kind, "listen")) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "lazarus-test-%d", getpid()); /* abstract */
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd >= 0 && (bind(fd, (void *)&a, sizeof a) < 0 || listen(fd, 4) < 0)) fd = -1;
    } else if (!strcmp(kind, "inet")) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t al = sizeof a;
        fd = socket(AF_INET, SOCK_STREAM, 0);
        other = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && (bind(fd, (void *)&a, sizeof a) < 0 || listen(fd, 4) < 0 ||
                        getsockname(fd, (void *)&a, &al) < 0 || connect(other, (void *)&a, al) < 0))
            fd = -1;
    } else if (!strcmp(kind, "childpipe") && pipe(two) == 0) {
        child = child_holding(two[0], two[1]);
        fd = two[1];
    } else if (!strcmp(kind, "peekedempty") && socketpair(AF_UNIX, SOCK_DGRAM, 0, two) == 0) {
        char c;
        fd = two[0];
        other = two[1];
        if (send(other, "", 0, 0) != 0 || recv(fd, &c, 1, MSG_PEEK) != 0) fd = -1;
    } else if (!strcmp(kind, "childsock") && socketpair(AF_UNIX, SOCK_STREAM, 0, two) == 0) {
        child = child_holding(two[1], two[0]);
        fd = two[0];
    } else if (!strcmp(kind, "outsock") && socketpair(AF_UNIX, SOCK_STREAM, 0, two) == 0) {
        /* the other end goes to an orphan (a double fork): it leaves the job's
         * tree, and ends when descriptor 7 is closed */
        pid_t c = fork();
        if (c == 0) {
            if (fork() == 0) {
                char b;
                close(two[0]);
                while (read(two[1], &b, 1) > 0) {}
                _exit(0);
            }
            _exit(0);
        }
        waitpid(c, NULL, 0);
        close(two[1]);
        fd = two[0];
    }
    if (fd < 0 || dup2(fd, 7) != 7) {
        perror(kind);
        return 1;
    }
    if (fd != 7) close(fd);
    printf("ready\n");
    fflush(stdout);
    work_until(argv[2]);
    close(7);
    if (other >= 0) close(other);
    if (child > 0) {
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
    }
    printf("closed\n");
    fflush(stdout);
    work_until(argv[3]);
    printf("done\n");
    fflush(stdout);
    return 0;
}
