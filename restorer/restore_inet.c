/* TCP and UDP sockets made anew (format.h, lz_inet; runtime/rt_inet.c):
 *   - a TCP connection whose two ends the process held: a private listener
 *     on the accepting end's old address, the other end bound to its old
 *     address (a fresh port if that one is held: TIME_WAIT leftovers of the
 *     killed job without SO_REUSEADDR) and connected, the listener's new
 *     connection accepted; each end then sends what the other had queued to
 *     read, and its FIN if it had sent one;
 *   - a listening socket: bound to its address (SO_REUSEADDR on while it
 *     binds: the killed job's connections may linger in TIME_WAIT), listening
 *     with its backlog;
 *   - a bound socket bound; a connected UDP socket connected again;
 *   - a connection between two processes of the job: made by their nearest
 *     common ancestor (restore_tree.c) through restore_inet_pair, as above;
 *   - a TCP connection to outside the job (`run --tcp=reset`): connected
 *     to a private loopback listener whose accepted end is closed with
 *     SO_LINGER 0, so that the program's next call on it fails with ECONNRESET;
 *   - then every socket's options and flags as the program had set them.
 * The port checks happen in `lazarus restart`'s phase 1 (cli/restart_inet.c):
 * here a failure is unexpected (a port taken in between). */
#include "restorer.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static socklen_t sockaddr_of(uint32_t family, const uint8_t *a, uint16_t port, uint32_t scope, struct sockaddr_storage *ss)
{
    memset(ss, 0, sizeof *ss);
    if (family == AF_INET) {
        struct sockaddr_in *s4 = (void *)ss;
        s4->sin_family = AF_INET;
        memcpy(&s4->sin_addr, a, 4);
        s4->sin_port = htons(port);
        return sizeof *s4;
    }
    struct sockaddr_in6 *s6 = (void *)ss;
    s6->sin6_family = AF_INET6;
    memcpy(&s6->sin6_addr, a, 16);
    s6->sin6_port = htons(port);
    s6->sin6_scope_id = scope;
    return sizeof *s6;
}

static void set_int(int fd, int level, int name, int v, const struct lz_inet *s, const char *what)
{
    if (setsockopt(fd, level, name, &v, sizeof v) < 0)
        restore_fail("cannot set %s on socket descriptor %d: %s", what, s->fd, strerror(errno));
}

/* A socket like s (close-on-exec), with what must precede bind. */
static int new_socket(const struct lz_inet *s, int *rcv0, int *snd0)
{
    int fd = socket((int)s->family, (int)s->type | SOCK_CLOEXEC, s->type == SOCK_STREAM ? IPPROTO_TCP : IPPROTO_UDP);
    if (fd < 0) restore_fail("cannot make socket descriptor %d again: %s", s->fd, strerror(errno));
    socklen_t l = sizeof *rcv0;
    getsockopt(fd, SOL_SOCKET, SO_RCVBUF, rcv0, &l); /* a fresh socket's: kept unless the program's differed */
    l = sizeof *snd0;
    getsockopt(fd, SOL_SOCKET, SO_SNDBUF, snd0, &l);
    if (s->family == AF_INET6) set_int(fd, IPPROTO_IPV6, IPV6_V6ONLY, !!(s->opts & LZ_INO_V6ONLY), s, "IPV6_V6ONLY");
    set_int(fd, SOL_SOCKET, SO_REUSEADDR, 1, s, "SO_REUSEADDR"); /* set back to the program's at the end */
    if (s->opts & LZ_INO_REUSEPORT) set_int(fd, SOL_SOCKET, SO_REUSEPORT, 1, s, "SO_REUSEPORT");
    return fd;
}

static void bind_to(int fd, const struct lz_inet *s)
{
    struct sockaddr_storage ss;
    socklen_t len = sockaddr_of(s->family, s->local, s->lport, s->scope, &ss);
    if (bind(fd, (struct sockaddr *)&ss, len) < 0)
        restore_fail("cannot bind socket descriptor %d to port %u again: %s", s->fd, s->lport, strerror(errno));
}

static void set_buffer(int fd, int name, int force, uint32_t want, int fresh, const struct lz_inet *s)
{
    /* what the program set is even (twice its value); TCP's own tuning of an
     * unset size may be odd: left to TCP again */
    if (!want || (int)want == fresh || (want & 1)) return;
    int half = (int)(want / 2); /* the kernel doubles what it is given */
    if (setsockopt(fd, SOL_SOCKET, force, &half, sizeof half) < 0 && setsockopt(fd, SOL_SOCKET, name, &half, sizeof half) < 0)
        restore_fail("cannot set the buffer size of socket descriptor %d: %s", s->fd, strerror(errno));
}

static void grow_sndbuf(int fd, uint64_t bytes)
{
    int v = bytes > (1u << 30) ? 1 << 30 : (int)bytes + (1 << 20);
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &v, sizeof v) < 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
}

/* Every option the program set, once the socket is in its state. */
static void set_options(int fd, const struct lz_inet *s, int rcv0, int snd0, int keep_reuse)
{
    set_buffer(fd, SO_RCVBUF, SO_RCVBUFFORCE, s->rcvbuf, rcv0, s);
    set_buffer(fd, SO_SNDBUF, SO_SNDBUFFORCE, s->sndbuf, snd0, s);
    if (!keep_reuse) set_int(fd, SOL_SOCKET, SO_REUSEADDR, !!(s->opts & LZ_INO_REUSEADDR), s, "SO_REUSEADDR");
    if (s->opts & LZ_INO_BROADCAST) set_int(fd, SOL_SOCKET, SO_BROADCAST, 1, s, "SO_BROADCAST");
    if (s->opts & LZ_INO_LINGER) {
        struct linger lg = {1, s->linger};
        if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
            restore_fail("cannot set SO_LINGER on socket descriptor %d: %s", s->fd, strerror(errno));
    }
    struct timeval tv = {(time_t)(s->rcvtimeo_us / 1000000), (suseconds_t)(s->rcvtimeo_us % 1000000)};
    if (s->rcvtimeo_us && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0)
        restore_fail("cannot set SO_RCVTIMEO on socket descriptor %d: %s", s->fd, strerror(errno));
    tv = (struct timeval){(time_t)(s->sndtimeo_us / 1000000), (suseconds_t)(s->sndtimeo_us % 1000000)};
    if (s->sndtimeo_us && setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0)
        restore_fail("cannot set SO_SNDTIMEO on socket descriptor %d: %s", s->fd, strerror(errno));
    if (s->type != SOCK_STREAM) return;
    if (s->opts & LZ_INO_NODELAY) set_int(fd, IPPROTO_TCP, TCP_NODELAY, 1, s, "TCP_NODELAY");
    if (s->opts & LZ_INO_KEEPALIVE) set_int(fd, SOL_SOCKET, SO_KEEPALIVE, 1, s, "SO_KEEPALIVE");
    if (s->keepidle > 0) set_int(fd, IPPROTO_TCP, TCP_KEEPIDLE, s->keepidle, s, "TCP_KEEPIDLE");
    if (s->keepintvl > 0) set_int(fd, IPPROTO_TCP, TCP_KEEPINTVL, s->keepintvl, s, "TCP_KEEPINTVL");
    if (s->keepcnt > 0) set_int(fd, IPPROTO_TCP, TCP_KEEPCNT, s->keepcnt, s, "TCP_KEEPCNT");
}

/* The data file of s (path), checked against its checksum; malloc'ed (NULL if none). */
static char *read_data(const char *path, const struct lz_inet *s)
{
    if (!s->bytes) return NULL;
    size_t len = 0;
    char *buf = lz_read_file(path, &len);
    if (!buf || len != s->bytes || lz_hash(buf, len) != s->xxh3)
        restore_fail("the data queued on socket descriptor %d (%s) is missing or fails its checksum", s->fd, path);
    return buf;
}

/* Sends all of buf on fd (the peer reads it as queued data), within 10 s. */
static void send_all(int fd, const char *buf, size_t len, const struct lz_inet *s)
{
    size_t done = 0;
    for (int idle = 0; done < len;) {
        ssize_t n = send(fd, buf + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) { done += (size_t)n; idle = 0; continue; }
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            restore_fail("cannot put back the data queued on socket descriptor %d: %s", s->fd, strerror(errno));
        if (++idle > 1000) restore_fail("cannot put back the data queued on socket descriptor %d: its peer takes none", s->fd);
        struct pollfd p = {fd, POLLOUT, 0};
        poll(&p, 1, 10);
    }
}

/* The TCP connection between records a (accepting end) and b, with the data
 * files of each (pa, pb). */
static void connect_pair(const char *pa, const struct lz_inet *a, const char *pb, const struct lz_inet *b, int *fa, int *fb,
                         int fresh[2][2])
{
    int t = new_socket(a, &fresh[0][0], &fresh[0][1]);
    bind_to(t, a);
    if (listen(t, 1) < 0) restore_fail("cannot listen on port %u for descriptor %d: %s", a->lport, a->fd, strerror(errno));
    struct sockaddr_storage to, me;
    /* a's address as b's family sees it: an IPv4 end may face a dual-stack IPv6 one (v4-mapped) */
    uint8_t at[16];
    if (a->family == b->family) memcpy(at, a->local, 16);
    else if (b->family == AF_INET) memcpy(at, a->local + 12, 4);
    else { memset(at, 0, 10); at[10] = at[11] = 0xff; memcpy(at + 12, a->local, 4); }
    socklen_t tolen = sockaddr_of(b->family, at, a->lport, b->family == a->family ? a->scope : 0, &to);
    socklen_t melen = sockaddr_of(b->family, b->local, b->lport, b->scope, &me);
    int c = -1;
    for (int fresh_port = 0; fresh_port < 2 && c < 0; fresh_port++) {
        c = new_socket(b, &fresh[1][0], &fresh[1][1]);
        if (fresh_port) ((struct sockaddr_in *)&me)->sin_port = 0; /* same offset in sockaddr_in6 */
        if (bind(c, (struct sockaddr *)&me, melen) < 0 || connect(c, (struct sockaddr *)&to, tolen) < 0) {
            if (fresh_port) restore_fail("cannot connect descriptor %d to descriptor %d again: %s", b->fd, a->fd, strerror(errno));
            close(c);
            c = -1; /* its old port is held (TIME_WAIT): a fresh one */
        }
    }
    int s = accept4(t, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) restore_fail("cannot accept the connection of descriptor %d again: %s", a->fd, strerror(errno));
    close(t);
    /* room for what each end had queued, then the data, then the FINs */
    set_buffer(s, SO_RCVBUF, SO_RCVBUFFORCE, a->rcvbuf, fresh[0][0], a);
    set_buffer(c, SO_RCVBUF, SO_RCVBUFFORCE, b->rcvbuf, fresh[1][0], b);
    char *da = read_data(pa, a), *db = read_data(pb, b);
    /* what the receiver's window does not take waits in the sender's queue, as
     * it did (a full window): the sender's buffer made large enough for the
     * time being, then as it was */
    if (da) { grow_sndbuf(c, a->bytes); send_all(c, da, a->bytes, a); set_buffer(c, SO_SNDBUF, SO_SNDBUFFORCE, b->sndbuf & ~1u, -1, b); }
    if (db) { grow_sndbuf(s, b->bytes); send_all(s, db, b->bytes, b); set_buffer(s, SO_SNDBUF, SO_SNDBUFFORCE, a->sndbuf & ~1u, -1, a); }
    free(da);
    free(db);
    if ((a->opts & LZ_INO_SHUT_WR) && shutdown(s, SHUT_WR) < 0) restore_fail("cannot shut descriptor %d: %s", a->fd, strerror(errno));
    if ((b->opts & LZ_INO_SHUT_WR) && shutdown(c, SHUT_WR) < 0) restore_fail("cannot shut descriptor %d: %s", b->fd, strerror(errno));
    *fa = s;
    *fb = c;
}

/* A connection that the program's next call finds reset (ECONNRESET). */
static int reset_socket(const struct lz_inet *s)
{
    struct sockaddr_storage lo;
    uint8_t any[16] = {0};
    if (s->family == AF_INET) { any[0] = 127; any[3] = 1; } else any[15] = 1;
    socklen_t len = sockaddr_of(s->family, any, 0, 0, &lo);
    int l = socket((int)s->family, SOCK_STREAM | SOCK_CLOEXEC, 0), c = socket((int)s->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&lo, len) < 0 || listen(l, 1) < 0 ||
        getsockname(l, (struct sockaddr *)&lo, &len) < 0 || connect(c, (struct sockaddr *)&lo, len) < 0)
        restore_fail("cannot make the reset connection of descriptor %d (loopback): %s", s->fd, strerror(errno));
    int a = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    struct linger lg = {1, 0};
    if (a < 0 || setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) < 0)
        restore_fail("cannot make the reset connection of descriptor %d: %s", s->fd, strerror(errno));
    close(a); /* sends RST */
    close(l);
    struct pollfd p = {c, POLLERR, 0};
    poll(&p, 1, 2000);
    return c;
}

static int record_of(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->ninets; i++)
        if (img->inets[i].fd == fd) return (int)i;
    restore_fail("socket descriptor %d has no record in the image", fd);
}

/* The pair's accepting end: the one on a port a listener of the process has. */
static int accepts(const struct lz_image *img, const struct lz_inet *a, const struct lz_inet *b)
{
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *l = &img->inets[i];
        if (l->state != LZ_IN_LISTEN || l->family != a->family) continue;
        if (l->lport == a->lport) return 1;
        if (l->lport == b->lport) return 0;
    }
    return a->fd < b->fd;
}

int *restore_inet(struct restore_ctx *rc, int base)
{
    const struct lz_image *img = &rc->img;
    int *src = malloc((img->nfds + 1) * sizeof *src), *made = calloc(img->ninets + 1, sizeof *made);
    int (*fresh)[2] = calloc(img->ninets + 1, sizeof *fresh);
    if (!src || !made || !fresh) restore_fail("out of memory");
    for (size_t i = 0; i < img->nfds; i++) src[i] = -1;
    if (!img->ninets) { free(made); free(fresh); return src; }
    for (size_t i = 0; i < img->ninets; i++) {
        made[i] = -1;
        for (size_t k = 0; k < img->nfds; k++) /* a connection with another process: the plan makes it */
            if (img->fds[k].fd == img->inets[i].fd && restore_tree_shared_chan(img->fds[k].ino)) made[i] = -2;
    }
    /* connections inside the process first: their private listener takes the
     * listening port for a moment */
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        if (s->state != LZ_IN_CONNECTED || s->type != SOCK_STREAM || made[i] != -1) continue;
        size_t j = (size_t)record_of(img, s->peer_fd);
        int f2[2][2];
        char pi[LZ_PATH_MAX + 128], pj[LZ_PATH_MAX + 128];
        snprintf(pi, sizeof pi, "%s/%s", rc->ckpt_dir, lz_str(img, s->path));
        snprintf(pj, sizeof pj, "%s/%s", rc->ckpt_dir, lz_str(img, img->inets[j].path));
        if (accepts(img, s, &img->inets[j])) {
            connect_pair(pi, s, pj, &img->inets[j], &made[i], &made[j], f2);
            fresh[i][0] = f2[0][0]; fresh[i][1] = f2[0][1]; fresh[j][0] = f2[1][0]; fresh[j][1] = f2[1][1];
        } else {
            connect_pair(pj, &img->inets[j], pi, s, &made[j], &made[i], f2);
            fresh[j][0] = f2[0][0]; fresh[j][1] = f2[0][1]; fresh[i][0] = f2[1][0]; fresh[i][1] = f2[1][1];
        }
    }
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        if (made[i] != -1) continue;
        if (s->state == LZ_IN_RESET) {
            int r0 = 0, s0 = 0;
            made[i] = reset_socket(s);
            socklen_t l = sizeof r0;
            getsockopt(made[i], SOL_SOCKET, SO_RCVBUF, &r0, &l);
            l = sizeof s0;
            getsockopt(made[i], SOL_SOCKET, SO_SNDBUF, &s0, &l);
            fresh[i][0] = r0; fresh[i][1] = s0;
            continue;
        }
        made[i] = new_socket(s, &fresh[i][0], &fresh[i][1]);
        if (s->state != LZ_IN_UNBOUND && s->lport) bind_to(made[i], s);
        if (s->state == LZ_IN_LISTEN && listen(made[i], (int)s->backlog) < 0)
            restore_fail("cannot listen on port %u again (descriptor %d): %s", s->lport, s->fd, strerror(errno));
        if (s->state == LZ_IN_CONNECTED) {
            struct sockaddr_storage to;
            socklen_t len = sockaddr_of(s->family, s->peer, s->pport, 0, &to);
            if (connect(made[i], (struct sockaddr *)&to, len) < 0)
                restore_fail("cannot connect UDP descriptor %d to port %u again: %s", s->fd, s->pport, strerror(errno));
        }
    }
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        if (made[i] == -2) continue;
        if (s->state != LZ_IN_RESET) set_options(made[i], s, fresh[i][0], fresh[i][1], 0);
        int fd = fcntl(made[i], F_DUPFD_CLOEXEC, base);
        if (fd < 0) restore_fail("cannot place socket descriptor %d: %s", s->fd, strerror(errno));
        close(made[i]);
        for (size_t k = 0; k < img->nfds; k++)
            if (img->fds[k].fd == s->fd) {
                src[k] = fd;
                if (img->fds[k].flags & O_NONBLOCK) fcntl(fd, F_SETFL, O_NONBLOCK);
            }
    }
    free(made);
    free(fresh);
    return src;
}

void restore_inet_pair(const struct lz_inet *a, const char *pa, const struct lz_inet *b, const char *pb, int sv[2])
{
    int fresh[2][2];
    connect_pair(pa, a, pb, b, &sv[0], &sv[1], fresh);
    /* SO_REUSEADDR stays on: the listener on a's port is bound after, in its own process */
    set_options(sv[0], a, fresh[0][0], fresh[0][1], 1);
    set_options(sv[1], b, fresh[1][0], fresh[1][1], 1);
}
