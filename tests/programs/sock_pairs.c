/* sock_pairs: AF_UNIX socket pairs of each type with messages in flight both ways.
 *
 *   sock_pairs ROUNDS [SLEEP_US]
 *
 * Makes a SOCK_STREAM, a SOCK_DGRAM and a SOCK_SEQPACKET pair; the second
 * end of each is O_NONBLOCK; a dup D of the datagram pair's second end takes
 * every other message sent to it.  Prints `start fds A0 A1 B0 B1 C0 C1 D`.
 * Round r sends batch r (12 messages of 0..1500 bytes from a fixed
 * generator, both ways, the stream ones framed by a 4-byte length) on every
 * pair, sleeps SLEEP_US (default 2000) with it in flight, then receives
 * batch r-1 without waiting and checks each message, its length (message
 * boundaries, empty messages included) and bytes (`LOST` and exit 3 on any
 * difference, or if a queue is not empty after the last batch).  The
 * descriptors' flags and that D shares B1's open file (kcmp) are checked
 * every round (`FLAGS`, exit 3).  Prints `round N` every 100 rounds and at
 * the end `messages N bytes B checksum X`: the same for every run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kcmp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BATCH 12
#define MAXLEN 1500

static const int types[3] = {SOCK_STREAM, SOCK_DGRAM, SOCK_SEQPACKET};
static const char *const names[3] = {"stream", "dgram", "seqpacket"};
static uint64_t checksum = 1469598103934665603ull, nbytes, nmsgs;

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* message k of pair t, direction d (0: end 0 to end 1) */
static size_t message(int t, int d, uint64_t k, unsigned char *buf)
{
    uint64_t seed = mix(k * 6 + (uint64_t)t * 2 + (uint64_t)d);
    size_t len = seed % 5 == 0 ? 0 : 1 + mix(seed) % MAXLEN;
    if (types[t] == SOCK_STREAM && len == 0) len = 1;
    uint64_t s = seed;
    for (size_t i = 0; i < len; i++) {
        if (i % 8 == 0) s = mix(s);
        buf[i] = (unsigned char)(s >> (8 * (i % 8)));
    }
    return len;
}

static void lost(int t, int d, uint64_t k, const char *what)
{
    printf("LOST %s: %s message %" PRIu64 " towards end %d\n", names[t], what, k, 1 - d);
    fflush(stdout);
    exit(3);
}

static void send_msg(int s, int t, int d, uint64_t k, const unsigned char *buf, size_t len)
{
    unsigned char frame[MAXLEN + 4];
    const unsigned char *p = buf;
    size_t n = len;
    if (types[t] == SOCK_STREAM) {
        uint32_t l = (uint32_t)len;
        memcpy(frame, &l, 4);
        memcpy(frame + 4, buf, len);
        p = frame;
        n = len + 4;
    }
    do { /* once at least: an empty datagram is a message */
        ssize_t r;
        do r = send(s, p, n, MSG_NOSIGNAL);
        while (r < 0 && errno == EINTR);
        if (r < 0) { printf("send %s %" PRIu64 ": %s\n", names[t], k, strerror(errno)); exit(1); }
        if (types[t] != SOCK_STREAM && (size_t)r != n) lost(t, d, k, "short send");
        p += r;
        n -= (size_t)r;
    } while (n);
}

static void recv_exact(int s, int t, int d, uint64_t k, unsigned char *buf, size_t len)
{
    while (len) {
        ssize_t r = recv(s, buf, len, MSG_DONTWAIT);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) lost(t, d, k, r == 0 ? "end of stream" : "nothing queued");
        buf += r;
        len -= (size_t)r;
    }
}

static void recv_msg(int s, int t, int d, uint64_t k)
{
    unsigned char want[MAXLEN], got[MAXLEN + 64];
    size_t len = message(t, d, k, want);
    ssize_t r;
    if (types[t] == SOCK_STREAM) {
        uint32_t l;
        recv_exact(s, t, d, k, (unsigned char *)&l, 4);
        if (l != len) lost(t, d, k, "wrong length");
        recv_exact(s, t, d, k, got, len);
        r = (ssize_t)len;
    } else {
        do r = recv(s, got, sizeof got, MSG_DONTWAIT | MSG_TRUNC);
        while (r < 0 && errno == EINTR);
        if (r < 0) lost(t, d, k, "nothing queued");
        if ((size_t)r != len) lost(t, d, k, "wrong length (boundaries lost)");
    }
    if (memcmp(got, want, len)) lost(t, d, k, "wrong bytes");
    for (size_t i = 0; i < len; i++) checksum = (checksum ^ got[i]) * 1099511628211ull;
    checksum = (checksum ^ len) * 1099511628211ull;
    nbytes += len;
    nmsgs++;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sock_pairs ROUNDS [SLEEP_US]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    long sleep_us = argc > 2 ? atol(argv[2]) : 2000;
    int sv[3][2];
    for (int t = 0; t < 3; t++)
        if (socketpair(AF_UNIX, types[t], 0, sv[t]) < 0 || fcntl(sv[t][1], F_SETFL, O_NONBLOCK) < 0) {
            perror("socketpair");
            return 1;
        }
    int dd = dup(sv[1][1]);
    if (dd < 0) {
        perror("dup");
        return 1;
    }
    printf("start fds %d %d %d %d %d %d %d\n", sv[0][0], sv[0][1], sv[1][0], sv[1][1], sv[2][0], sv[2][1], dd);
    fflush(stdout);
    unsigned char buf[MAXLEN];
    for (long r = 0; r <= rounds; r++) {
        for (int t = 0; t < 3; t++)
            for (int e = 0; e < 2; e++) {
                int fl = fcntl(sv[t][e], F_GETFL), ty = -1;
                socklen_t tl = sizeof ty;
                getsockopt(sv[t][e], SOL_SOCKET, SO_TYPE, &ty, &tl);
                if ((fl & O_ACCMODE) != O_RDWR || !(fl & O_NONBLOCK) != !e || ty != types[t]) {
                    printf("FLAGS %s end %d: %#x type %d\n", names[t], e, fl, ty);
                    fflush(stdout);
                    exit(3);
                }
            }
        if (syscall(SYS_kcmp, getpid(), getpid(), KCMP_FILE, sv[1][1], dd) != 0) {
            printf("FLAGS dgram end 1 and its dup are no longer one open file\n");
            fflush(stdout);
            exit(3);
        }
        if (r < rounds)
            for (uint64_t k = (uint64_t)r * BATCH; k < (uint64_t)(r + 1) * BATCH; k++)
                for (int t = 0; t < 3; t++)
                    for (int d = 0; d < 2; d++) send_msg(sv[t][d], t, d, k, buf, message(t, d, k, buf));
        struct timespec ts = {0, sleep_us * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
        if (r == 0) continue;
        for (uint64_t k = (uint64_t)(r - 1) * BATCH; k < (uint64_t)r * BATCH; k++)
            for (int t = 0; t < 3; t++)
                for (int d = 0; d < 2; d++) recv_msg(t == 1 && d == 0 && k % 2 ? dd : sv[t][1 - d], t, d, k);
        if (r == rounds)
            for (int t = 0; t < 3; t++)
                for (int e = 0; e < 2; e++)
                    if (recv(sv[t][e], buf, sizeof buf, MSG_DONTWAIT) != -1 || errno != EAGAIN) lost(t, 1 - e, 0, "left over");
        if (r % 100 == 0) {
            printf("round %ld\n", r);
            fflush(stdout);
        }
    }
    printf("messages %" PRIu64 " bytes %" PRIu64 " checksum %016" PRIx64 "\n", nmsgs, nbytes, checksum);
    return 0;
}
