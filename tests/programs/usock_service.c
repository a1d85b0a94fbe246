/* A local service the way daemons make one, checking itself after every
 * restart (tests/test_unix_sockets.py): a stream listener bound to the
 * relative path svc.sock (mode 0640, backlog 7, SO_PASSCRED, O_NONBLOCK), a
 * seqpacket listener on an abstract name, a datagram server bound to
 * dgram.sock (SO_RCVBUF, SO_RCVTIMEO) with datagrams queued on it, a
 * datagram client bound to client.sock and connected to the server, an
 * unnamed unconnected socket, a connection whose peer is gone with bytes
 * still to read, and connections made by connect/accept -- in one process
 * (`one`), or with the clients in a forked child (`tree`: a stream and a
 * seqpacket connection and a datagram client in the child, which keeps the
 * listener on svc.sock it inherited, one open file with its parent's).
 *
 * usage: usock_service one|tree CYCLES TRIGGER
 * For each cycle c: puts data in flight everywhere, prints `ready c`, waits
 * for the file TRIGGER.c, then checks every socket and prints `check c ok`
 * (or `FAIL why` and exits 3).  Then `done`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void fail(const char *what)
{
    printf("FAIL %s (errno %d %s)\n", what, errno, strerror(errno));
    fflush(stdout);
    exit(3);
}
#define CHECK(c, what) do { if (!(c)) fail(what); } while (0)

static socklen_t addr_of(struct sockaddr_un *sa, const char *name, size_t len)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
}

static int bound(int type, const char *name, size_t len)
{
    int s = socket(AF_UNIX, type, 0);
    struct sockaddr_un sa;
    socklen_t l = addr_of(&sa, name, len);
    CHECK(s >= 0 && bind(s, (struct sockaddr *)&sa, l) == 0, "bind");
    return s;
}

static int connected(int type, const char *name, size_t len)
{
    int s = socket(AF_UNIX, type, 0);
    struct sockaddr_un sa;
    socklen_t l = addr_of(&sa, name, len);
    CHECK(s >= 0 && connect(s, (struct sockaddr *)&sa, l) == 0, "connect");
    return s;
}

static int accept_wait(int l)
{
    struct pollfd p = {l, POLLIN, 0};
    CHECK(poll(&p, 1, 10000) == 1, "poll on a listening socket");
    int s = accept4(l, NULL, NULL, 0);
    CHECK(s >= 0, "accept");
    return s;
}

static void send_str(int s, const char *m)
{
    CHECK(send(s, m, strlen(m), MSG_NOSIGNAL) == (ssize_t)strlen(m), "send");
}

static void recv_str(int s, const char *want, const char *what)
{
    char buf[256];
    size_t n = strlen(want), got = 0;
    while (got < n) {
        ssize_t r = recv(s, buf + got, n - got, 0);
        if (r <= 0) fail(what);
        got += (size_t)r;
    }
    buf[got] = 0;
    if (strcmp(buf, want)) { printf("FAIL %s: got '%s', want '%s'\n", what, buf, want); exit(3); }
}

static void recv_msg(int s, const char *want, const char *what)
{
    char buf[256];
    ssize_t r = recv(s, buf, sizeof buf - 1, 0);
    if (r < 0) fail(what);
    buf[r] = 0;
    if (strcmp(buf, want)) { printf("FAIL %s: got '%s', want '%s'\n", what, buf, want); exit(3); }
}

/* A datagram and who sent it (a path, or "" for an unnamed sender). */
static void recv_from(int s, const char *want, const char *sender, const char *what)
{
    char buf[256];
    struct sockaddr_un sa;
    socklen_t l = sizeof sa;
    memset(&sa, 0, sizeof sa);
    ssize_t r = recvfrom(s, buf, sizeof buf - 1, 0, (struct sockaddr *)&sa, &l);
    if (r < 0) fail(what);
    buf[r] = 0;
    const char *got = l > offsetof(struct sockaddr_un, sun_path) ? sa.sun_path : "";
    if (strcmp(buf, want) || strcmp(got, sender)) {
        printf("FAIL %s: got '%s' from '%s', want '%s' from '%s'\n", what, buf, got, want, sender);
        exit(3);
    }
}

static int getint(int s, int opt)
{
    int v = -1;
    socklen_t l = sizeof v;
    CHECK(getsockopt(s, SOL_SOCKET, opt, &v, &l) == 0, "getsockopt");
    return v;
}

static void name_is(int s, int peer, const char *name, size_t len, const char *what)
{
    struct sockaddr_un sa;
    socklen_t l = sizeof sa;
    CHECK((peer ? getpeername(s, (struct sockaddr *)&sa, &l) : getsockname(s, (struct sockaddr *)&sa, &l)) == 0, what);
    size_t n = l - offsetof(struct sockaddr_un, sun_path);
    if (len && name[0]) n = strnlen(sa.sun_path, n);
    if (n != len || memcmp(sa.sun_path, name, len)) { printf("FAIL %s: name differs (%zu bytes)\n", what, n); exit(3); }
}

static void wait_trigger(const char *trig, int c)
{
    char p[4096];
    snprintf(p, sizeof p, "%s.%d", trig, c);
    while (access(p, F_OK) != 0) usleep(20000);
}

static const char ORPHAN_DATA[] = "tail-one...tail-two...";

/* The child of `tree`: the client end of a stream connection to svc.sock and
 * a seqpacket one to the abstract name, and a datagram client of dgram.sock;
 * answers each "ping N" with "pong N" on both connections and sends "kid N"
 * to the datagram server, until the stream connection ends. */
static void child(int l1, const char *abs, size_t abslen)
{
    int st = connected(SOCK_STREAM, "svc.sock", 8);
    int sq = connected(SOCK_SEQPACKET, abs, abslen);
    int dg = connected(SOCK_DGRAM, "dgram.sock", 10);
    send_str(st, "hello");
    send_str(sq, "hello");
    for (;;) {
        char buf[64];
        ssize_t r = recv(st, buf, 7, MSG_WAITALL); /* "ping NN" */
        if (r <= 0) _exit(0); /* the server ended (or was killed with its job) */
        if (r != 7) fail("child: stream recv");
        buf[7] = 0;
        char m[64];
        snprintf(m, sizeof m, "pong %s", buf + 5);
        name_is(l1, 0, "svc.sock", 8, "child: the shared listener's name");
        CHECK(getint(l1, SO_ACCEPTCONN) == 1 && (fcntl(l1, F_GETFL) & O_NONBLOCK), "child: the shared listener");
        char kid[16];
        snprintf(kid, sizeof kid, "kid %s", buf + 5);
        send_str(dg, kid); /* first: once the seqpacket answer is there, so is this */
        send_str(st, m);
        r = recv(sq, buf, sizeof buf - 1, 0);
        if (r <= 0) _exit(0);
        send_str(sq, m);
    }
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: usock_service one|tree CYCLES TRIGGER\n"); return 2; }
    int tree = !strcmp(argv[1], "tree"), cycles = atoi(argv[2]);
    const char *trig = argv[3];
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    char abs[64];
    abs[0] = 0;
    size_t abslen = 1 + (size_t)snprintf(abs + 1, sizeof abs - 1, "lz-usock-%d", (int)getpid());
    unlink("svc.sock"); unlink("dgram.sock"); unlink("client.sock");

    int l1 = bound(SOCK_STREAM, "svc.sock", 8);
    CHECK(chmod("svc.sock", 0640) == 0 && listen(l1, 7) == 0, "listen svc.sock");
    int one = 1;
    CHECK(setsockopt(l1, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) == 0, "SO_PASSCRED");
    CHECK(fcntl(l1, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
    int l2 = bound(SOCK_SEQPACKET, abs, abslen);
    CHECK(listen(l2, 3) == 0, "listen abstract");
    int d = bound(SOCK_DGRAM, "dgram.sock", 10);
    int rb = 300000;
    CHECK(setsockopt(d, SOL_SOCKET, SO_RCVBUF, &rb, sizeof rb) == 0, "SO_RCVBUF");
    struct timeval tv = {1, 500000};
    CHECK(setsockopt(d, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0, "SO_RCVTIMEO");
    int dc = bound(SOCK_DGRAM, "client.sock", 11);
    struct sockaddr_un sa;
    socklen_t sl = addr_of(&sa, "dgram.sock", 10);
    CHECK(connect(dc, (struct sockaddr *)&sa, sl) == 0, "connect dgram");
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    int sb = 100000;
    CHECK(u >= 0 && setsockopt(u, SOL_SOCKET, SO_SNDBUF, &sb, sizeof sb) == 0, "SO_SNDBUF");
    int op[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, op) == 0, "socketpair");
    send_str(op[1], ORPHAN_DATA);
    close(op[1]);
    int orphan = op[0];
    int want_sndbuf = getint(u, SO_SNDBUF), want_rcvbuf = getint(d, SO_RCVBUF);

    /* connections by connect/accept: the clients here, or in a child */
    int c1 = -1, c2 = -1;
    pid_t kid = -1;
    if (tree) {
        kid = fork();
        CHECK(kid >= 0, "fork");
        if (kid == 0) {
            /* it keeps the listener on svc.sock, as a preforked worker would */
            close(l2); close(d); close(dc); close(u); close(orphan);
            child(l1, abs, abslen);
        }
    } else {
        c1 = connected(SOCK_STREAM, "svc.sock", 8);
        c2 = connected(SOCK_SEQPACKET, abs, abslen);
        struct timeval st = {2, 250000};
        CHECK(setsockopt(c1, SOL_SOCKET, SO_SNDTIMEO, &st, sizeof st) == 0, "SO_SNDTIMEO");
        send_str(c1, "hello");
        send_str(c2, "hello");
    }
    int s1 = accept_wait(l1), s2 = accept_wait(l2);
    recv_str(s1, "hello", "stream hello");
    recv_msg(s2, "hello", "seqpacket hello");

    for (int c = 1; c <= cycles; c++) {
        char m[64], ping[16];
        snprintf(ping, sizeof ping, "ping %02d", c);
        /* in flight at the checkpoint: two datagrams on the server, a ping
         * each way or its answer, the orphan's tail */
        snprintf(m, sizeof m, "dg %d a", c); send_str(dc, m);
        snprintf(m, sizeof m, "dg %d b", c); send_str(dc, m);
        send_str(s1, ping);
        send_str(s2, ping);
        if (!tree) { send_str(c1, ping); send_str(c2, ping); }
        else { /* the child answers: its datagram waits on d, the pongs on s1 and s2 (the last) */
            struct pollfd pf = {s2, POLLIN, 0};
            CHECK(poll(&pf, 1, 60000) == 1, "the child's answer");
        }
        printf("ready %d\n", c);
        wait_trigger(trig, c);

        /* the listeners: names, file mode, options, and new connections */
        name_is(l1, 0, "svc.sock", 8, "svc.sock name");
        name_is(l2, 0, abs, abslen, "abstract name");
        struct stat st;
        CHECK(lstat("svc.sock", &st) == 0 && S_ISSOCK(st.st_mode) && (st.st_mode & 07777) == 0640, "svc.sock file");
        CHECK(getint(l1, SO_ACCEPTCONN) == 1 && getint(l2, SO_ACCEPTCONN) == 1, "listening");
        CHECK(getint(l1, SO_PASSCRED) == 1, "SO_PASSCRED kept");
        CHECK(fcntl(l1, F_GETFL) & O_NONBLOCK, "O_NONBLOCK kept");
        CHECK(fcntl(l2, F_GETFL) & O_NONBLOCK ? 0 : 1, "blocking kept");
        for (int k = 0; k < 2; k++) {
            int x = k ? connected(SOCK_SEQPACKET, abs, abslen) : connected(SOCK_STREAM, "svc.sock", 8);
            int y = accept_wait(k ? l2 : l1);
            send_str(x, "new");
            if (k) recv_msg(y, "new", "new seqpacket connection"); else recv_str(y, "new", "new stream connection");
            close(x); close(y);
        }
        /* the datagram server: its queue in order, then a live one */
        CHECK(getint(d, SO_RCVBUF) == want_rcvbuf, "SO_RCVBUF kept");
        struct timeval got;
        socklen_t gl = sizeof got;
        CHECK(getsockopt(d, SOL_SOCKET, SO_RCVTIMEO, &got, &gl) == 0 && got.tv_sec == 1 && got.tv_usec >= 490000 &&
              got.tv_usec <= 510000, "SO_RCVTIMEO kept");
        snprintf(m, sizeof m, "dg %d a", c); recv_from(d, m, "client.sock", "queued datagram a");
        snprintf(m, sizeof m, "dg %d b", c); recv_from(d, m, "client.sock", "queued datagram b");
        if (tree) { snprintf(m, sizeof m, "kid %02d", c); m[6] = 0; recv_msg(d, m, "the child's datagram"); }
        name_is(dc, 1, "dgram.sock", 10, "datagram client's peer");
        name_is(dc, 0, "client.sock", 11, "datagram client's name");
        send_str(dc, "live");
        recv_msg(d, "live", "live datagram");
        struct sockaddr_un to;
        socklen_t tl = addr_of(&to, "client.sock", 11);
        CHECK(sendto(d, "reply", 5, 0, (struct sockaddr *)&to, tl) == 5, "reply to the client");
        recv_msg(dc, "reply", "reply");
        /* the unnamed one */
        CHECK(getint(u, SO_TYPE) == SOCK_STREAM && getint(u, SO_SNDBUF) == want_sndbuf, "unnamed socket");
        name_is(u, 0, "", 0, "unnamed socket's name");
        /* the orphan: its next piece, and at the end, end of file */
        char buf[64];
        CHECK(recv(orphan, buf, 11, MSG_WAITALL) == 11 && !memcmp(buf, ORPHAN_DATA + 11 * (c - 1), 11), "orphan data");
        if (c == 2) CHECK(recv(orphan, buf, sizeof buf, MSG_DONTWAIT) == 0, "orphan end of file");
        /* the connections: data in flight both ways */
        if (tree) {
            snprintf(m, sizeof m, "pong %02d", c);
            recv_str(s1, m, "stream pong");
            recv_msg(s2, m, "seqpacket pong");
        } else {
            struct timeval got2;
            socklen_t gl2 = sizeof got2;
            CHECK(getsockopt(c1, SOL_SOCKET, SO_SNDTIMEO, &got2, &gl2) == 0 && got2.tv_sec == 2 && got2.tv_usec >= 240000 &&
                  got2.tv_usec <= 260000, "SO_SNDTIMEO of a connection kept");
            recv_str(s1, ping, "stream ping to the server"); recv_str(c1, ping, "stream ping to the client");
            recv_msg(s2, ping, "seqpacket ping to the server"); recv_msg(c2, ping, "seqpacket ping to the client");
        }
        printf("check %d ok\n", c);
    }
    if (tree) {
        close(s1);
        int status;
        CHECK(waitpid(kid, &status, 0) == kid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child's end");
    }
    unlink("svc.sock"); unlink("dgram.sock"); unlink("client.sock");
    printf("done\n");
    return 0;
}
