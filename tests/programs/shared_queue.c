/* shared_queue: one end of a socket pair held by several processes, with
 * many messages queued on it, for test_pipes.py.
 *
 *   shared_queue TYPE HOLDERS FILE
 *
 * Makes a socket pair of TYPE (stream, dgram or seqpacket), queues 400
 * messages of 1..300 bytes on end R (its SO_PEEK_OFF left as the program
 * set it: off, or 5 for dgram), then forks HOLDERS-1 children that keep R
 * (and nothing else of the pair) and compute, prints `ready`, and computes
 * until FILE exists.  Then it checks R's SO_PEEK_OFF, reads every message
 * back and checks its length and bytes (`LOST` and exit 3 on a difference,
 * `PEEKOFF` and exit 3 if SO_PEEK_OFF changed), ends the children and
 * prints `done N` (N: the messages read).  Every holder takes part in every
 * checkpoint, so the same queue is captured by all of them at once. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSGS 400

static uint64_t state = 88172645463325252ull;

static void spin(void)
{
    for (int i = 0; i < 200000; i++) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
    }
}

static size_t msg_len(int i) { return 1 + (size_t)((i * 7919) % 300); }
static char msg_byte(int i, size_t k) { return (char)('a' + (i + (int)k) % 26); }

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: shared_queue stream|dgram|seqpacket HOLDERS FILE\n");
        return 2;
    }
    int type = !strcmp(argv[1], "stream") ? SOCK_STREAM : !strcmp(argv[1], "dgram") ? SOCK_DGRAM : SOCK_SEQPACKET;
    int holders = atoi(argv[2]), sv[2];
    if (holders < 1 || socketpair(AF_UNIX, type, 0, sv) < 0) {
        perror("socketpair");
        return 1;
    }
    int r = sv[0], w = sv[1], big = 1 << 20;
    setsockopt(w, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
    setsockopt(r, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    int want_off = type == SOCK_DGRAM ? 5 : -1;
    if (want_off >= 0 && setsockopt(r, SOL_SOCKET, SO_PEEK_OFF, &want_off, sizeof want_off) < 0) {
        perror("SO_PEEK_OFF");
        return 1;
    }
    char buf[512];
    for (int i = 0; i < MSGS; i++) {
        size_t n = msg_len(i);
        for (size_t k = 0; k < n; k++) buf[k] = msg_byte(i, k);
        if (send(w, buf, n, MSG_DONTWAIT) != (ssize_t)n) {
            perror("send");
            return 1;
        }
    }
    pid_t kids[64];
    int nkids = 0;
    for (int h = 1; h < holders && nkids < 64; h++) {
        pid_t pid = fork();
        if (pid == 0) {
            close(w);
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            for (;;) {
                spin();
                struct timespec ts = {0, 1000000};
                nanosleep(&ts, NULL);
            }
        }
        kids[nkids++] = pid;
    }
    printf("ready\n");
    fflush(stdout);
    while (access(argv[3], F_OK) != 0) {
        spin();
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    int off = 0;
    socklen_t ol = sizeof off;
    if (getsockopt(r, SOL_SOCKET, SO_PEEK_OFF, &off, &ol) < 0 || off != want_off) {
        printf("PEEKOFF %d (was %d)\n", off, want_off);
        return 3;
    }
    if (want_off >= 0) { /* back to plain reads */
        int none = -1;
        setsockopt(r, SOL_SOCKET, SO_PEEK_OFF, &none, sizeof none);
    }
    int got = 0;
    for (int i = 0; i < MSGS; i++) {
        size_t n = msg_len(i), have = 0;
        while (have < n) { /* a stream's message may come in pieces */
            ssize_t k = recv(r, buf + have, type == SOCK_STREAM ? n - have : sizeof buf, MSG_DONTWAIT);
            if (k <= 0 || (type != SOCK_STREAM && (size_t)k != n)) {
                printf("LOST message %d: %zd bytes (want %zu)\n", i, k, n);
                return 3;
            }
            have += (size_t)k;
        }
        for (size_t k = 0; k < n; k++)
            if (buf[k] != msg_byte(i, k)) {
                printf("LOST message %d: byte %zu differs\n", i, k);
                return 3;
            }
        got++;
    }
    if (recv(r, buf, sizeof buf, MSG_DONTWAIT) != -1 || errno != EAGAIN) {
        printf("LOST: more than was sent\n");
        return 3;
    }
    for (int k = 0; k < nkids; k++) {
        kill(kids[k], SIGKILL);
        waitpid(kids[k], NULL, 0);
    }
    printf("done %d\n", got);
    return 0;
}
