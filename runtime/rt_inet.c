/* TCP and UDP sockets (AF_INET, AF_INET6), read in the pause into struct
 * lz_inet records (format.h) without touching their data:
 *   - a listening socket: its address, backlog and options (a connection
 *     still waiting in its accept queue fails the checkpoint: it has no
 *     descriptor to hold it, and what its client sent cannot be seen);
 *   - a bound or unbound socket: its address; a UDP socket its peer too
 *     (the datagrams queued on it are not kept: UDP may lose them);
 *   - a TCP connection whose two ends this process holds (an echo server and
 *     its client in one event loop): both ends, each with the bytes queued to
 *     be read on it, copied with MSG_PEEK.  Bytes still in a send queue
 *     beyond what the peer received can be read only in TCP repair mode
 *     (root); otherwise the checkpoint fails naming the connection;
 *   - a TCP connection to another process of this host: the other socket's
 *     inode (sock_diag) and, once the data sent settled, this end's queue:
 *     if the other end is the job's, the restart connects the two again
 *     (cli/restart_tree.c), else it is one to outside:
 *   - a TCP connection to outside the job (another host, a process not of
 *     the job): by the job's policy (`run --tcp`, LAZARUS_TCP): `reset`
 *     (default) records it to come back reset, `refuse` fails the checkpoint
 *     naming it (for a peer on this host the supervisor tells, cli/job_inet.c).
 * The restorer makes them anew (restorer/restore_inet.c). */
#include "rt.h"
#include "hash.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

/* include/net/tcp_states.h (linux/tcp.h has tcp_info with its newer fields, not these) */
enum { TCP_ESTABLISHED = 1, TCP_SYN_SENT, TCP_SYN_RECV, TCP_FIN_WAIT1, TCP_FIN_WAIT2, TCP_TIME_WAIT, TCP_CLOSE,
       TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_LISTEN, TCP_CLOSING };

static int tcp_refuse; /* LAZARUS_TCP=refuse */

__attribute__((constructor)) static void rt_inet_policy(void)
{
    const char *p = rt_env("LAZARUS_TCP");
    tcp_refuse = p && !strcmp(p, "refuse");
}

static const char *const tcp_states[] = {"?", "ESTABLISHED", "SYN_SENT", "SYN_RECV", "FIN_WAIT1", "FIN_WAIT2", "TIME_WAIT",
                                         "CLOSE", "CLOSE_WAIT", "LAST_ACK", "LISTEN", "CLOSING"};

/* "127.0.0.1:5000", "[::1]:5000" */
static void addr_text(char *out, size_t len, uint32_t family, const uint8_t *a, uint16_t port)
{
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop((int)family, a, ip, sizeof ip)) rt_fmt(ip, sizeof ip, "?");
    rt_fmt(out, len, family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
}

static void describe(char *out, size_t len, const struct lz_inet *s)
{
    char l[64], p[64];
    addr_text(l, sizeof l, s->family, s->local, s->lport);
    addr_text(p, sizeof p, s->family, s->peer, s->pport);
    if (s->pport) rt_fmt(out, len, "%s %s -> %s", s->type == SOCK_STREAM ? "TCP" : "UDP", l, p);
    else rt_fmt(out, len, "%s %s", s->type == SOCK_STREAM ? "TCP" : "UDP", l);
}

static int refuse(struct rt_ckpt *ck, const struct lz_inet *s, const char *what)
{
    char d[160];
    describe(d, sizeof d, s);
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (%s) is %s", s->fd, d, what);
    return -1;
}

static long opt(int fd, int level, int name, void *v, int len)
{
    return lz_sc5(SYS_getsockopt, fd, level, name, v, &len);
}

static int opt_int(int fd, int level, int name)
{
    int v = 0;
    return opt(fd, level, name, &v, sizeof v) < 0 ? 0 : v;
}

/* address and port of a sockaddr_in/_in6 into rec's fields */
static void take_addr(const struct sockaddr_storage *ss, uint8_t a[16], uint16_t *port, uint32_t *scope)
{
    memset(a, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *s4 = (const void *)ss;
        memcpy(a, &s4->sin_addr, 4);
        *port = ntohs(s4->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s6 = (const void *)ss;
        memcpy(a, &s6->sin6_addr, 16);
        *port = ntohs(s6->sin6_port);
        if (scope) *scope = s6->sin6_scope_id;
    } else {
        *port = 0;
    }
}

/* The socket's addresses, type and options; its state is decided later. */
static int read_socket(struct rt_ckpt *ck, const struct lz_fd *f, struct lz_inet *s, int *tcpstate)
{
    int fd = f->fd;
    memset(s, 0, sizeof *s);
    s->fd = fd;
    s->peer_fd = -1;
    s->family = (uint32_t)opt_int(fd, SOL_SOCKET, SO_DOMAIN);
    s->type = (uint32_t)opt_int(fd, SOL_SOCKET, SO_TYPE);
    int proto = opt_int(fd, SOL_SOCKET, SO_PROTOCOL);
    struct sockaddr_storage ss;
    int len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (lz_sc3(SYS_getsockname, fd, &ss, &len) == 0) take_addr(&ss, s->local, &s->lport, &s->scope);
    len = sizeof ss;
    memset(&ss, 0, sizeof ss);
    if (lz_sc3(SYS_getpeername, fd, &ss, &len) == 0) take_addr(&ss, s->peer, &s->pport, NULL);
    if (!((s->type == SOCK_STREAM && proto == IPPROTO_TCP) || (s->type == SOCK_DGRAM && proto == IPPROTO_UDP)))
        return refuse(ck, s, "a network socket other than TCP or UDP (raw, ICMP, SCTP, UDP-Lite...), which Lazarus cannot restore");
    uint32_t o = 0;
    if (opt_int(fd, SOL_SOCKET, SO_REUSEADDR)) o |= LZ_INO_REUSEADDR;
    if (opt_int(fd, SOL_SOCKET, SO_REUSEPORT)) o |= LZ_INO_REUSEPORT;
    if (opt_int(fd, SOL_SOCKET, SO_KEEPALIVE)) o |= LZ_INO_KEEPALIVE;
    if (opt_int(fd, SOL_SOCKET, SO_BROADCAST)) o |= LZ_INO_BROADCAST;
    if (s->family == AF_INET6 && opt_int(fd, IPPROTO_IPV6, IPV6_V6ONLY)) o |= LZ_INO_V6ONLY;
    struct linger lg = {0, 0};
    if (opt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg) == 0 && lg.l_onoff) { o |= LZ_INO_LINGER; s->linger = lg.l_linger; }
    struct timeval tv = {0, 0};
    if (opt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0) s->rcvtimeo_us = tv.tv_sec * 1000000ll + tv.tv_usec;
    tv = (struct timeval){0, 0};
    if (opt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0) s->sndtimeo_us = tv.tv_sec * 1000000ll + tv.tv_usec;
    s->rcvbuf = (uint32_t)opt_int(fd, SOL_SOCKET, SO_RCVBUF);
    s->sndbuf = (uint32_t)opt_int(fd, SOL_SOCKET, SO_SNDBUF);
    *tcpstate = 0;
    if (s->type == SOCK_STREAM) {
        if (opt_int(fd, IPPROTO_TCP, TCP_NODELAY)) o |= LZ_INO_NODELAY;
        s->keepidle = opt_int(fd, IPPROTO_TCP, TCP_KEEPIDLE);
        s->keepintvl = opt_int(fd, IPPROTO_TCP, TCP_KEEPINTVL);
        s->keepcnt = opt_int(fd, IPPROTO_TCP, TCP_KEEPCNT);
        struct tcp_info ti;
        memset(&ti, 0, sizeof ti);
        if (opt(fd, IPPROTO_TCP, TCP_INFO, &ti, sizeof ti) < 0) return refuse(ck, s, "a TCP socket whose state cannot be read");
        *tcpstate = ti.tcpi_state;
        if (ti.tcpi_state == TCP_LISTEN) {
            s->backlog = ti.tcpi_sacked; /* a listener's: sk_max_ack_backlog */
            if (ti.tcpi_unacked) { /* its accept queue */
                char why[200];
                rt_fmt(why, sizeof why, "a listening socket with %u connection(s) not yet accepted, which Lazarus cannot "
                       "restore (the checkpoint can be taken once the program has accepted them)", ti.tcpi_unacked);
                return refuse(ck, s, why);
            }
        }
        if (ti.tcpi_state == TCP_FIN_WAIT2) o |= LZ_INO_SHUT_WR;
    }
    s->opts = o;
    return 0;
}

/* The socket at the other end of TCP connection s on this host (sock_diag,
 * asked by its addresses): its inode (0: none has a descriptor, or the peer is
 * another host) and its tcp_info.  0, or -1 if not found. */
static int diag_peer(long *nl, const struct lz_inet *s, uint64_t *ino, struct tcp_info *ti)
{
    if (*nl < 0) *nl = lz_sc3(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (*nl < 0) return -1;
    struct { struct nlmsghdr h; struct inet_diag_req_v2 r; } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = (uint8_t)s->family;
    req.r.sdiag_protocol = IPPROTO_TCP;
    req.r.idiag_ext = 1 << (INET_DIAG_INFO - 1);
    req.r.idiag_states = ~0u;
    req.r.id.idiag_sport = htons(s->pport); /* the peer's side */
    req.r.id.idiag_dport = htons(s->lport);
    memcpy(req.r.id.idiag_src, s->peer, s->family == AF_INET ? 4 : 16);
    memcpy(req.r.id.idiag_dst, s->local, s->family == AF_INET ? 4 : 16);
    req.r.id.idiag_cookie[0] = req.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
    struct sockaddr_nl sa;
    memset(&sa, 0, sizeof sa);
    sa.nl_family = AF_NETLINK;
    if (lz_sc6(SYS_sendto, *nl, (long)&req, sizeof req, 0, (long)&sa, sizeof sa) < 0) return -1;
    union { struct nlmsghdr h; char b[8192]; } buf;
    long n;
    do n = lz_sc6(SYS_recvfrom, *nl, (long)&buf, sizeof buf, MSG_DONTWAIT, 0, 0);
    while (n == -EINTR);
    if (n < (long)sizeof(struct nlmsghdr) || buf.h.nlmsg_len > (uint32_t)n || buf.h.nlmsg_type != SOCK_DIAG_BY_FAMILY ||
        buf.h.nlmsg_len < NLMSG_LENGTH(sizeof(struct inet_diag_msg)))
        return -1;
    const struct inet_diag_msg *m = NLMSG_DATA(&buf.h);
    *ino = m->idiag_inode;
    memset(ti, 0, sizeof *ti);
    const char *a = (const char *)(m + 1), *end = (const char *)&buf + buf.h.nlmsg_len;
    while (end - a >= (long)sizeof(struct nlattr)) {
        const struct nlattr *at = (const void *)a;
        if (at->nla_len < sizeof *at || at->nla_len > end - a) break;
        if (at->nla_type == INET_DIAG_INFO) {
            size_t l = at->nla_len - NLA_HDRLEN;
            memcpy(ti, a + NLA_HDRLEN, l < sizeof *ti ? l : sizeof *ti);
        }
        a += NLA_ALIGN(at->nla_len);
    }
    return 0;
}

/* addr of a socket of family fam as IPv6 (an IPv4 address v4-mapped, as a
 * dual-stack IPv6 socket sees an IPv4 peer) */
static void as_v6(uint32_t fam, const uint8_t *addr, uint8_t out[16])
{
    if (fam == AF_INET6) { memcpy(out, addr, 16); return; }
    memset(out, 0, 10);
    out[10] = out[11] = 0xff;
    memcpy(out + 12, addr, 4);
}

static int same_addr(uint32_t fa, const uint8_t *a, uint32_t fb, const uint8_t *b)
{
    uint8_t x[16], y[16];
    as_v6(fa, a, x);
    as_v6(fb, b, y);
    return !memcmp(x, y, 16);
}

/* a and b are the two ends of one connection (an IPv4 end may face a dual-stack IPv6 one) */
static int same_end(const struct lz_inet *a, const struct lz_inet *b)
{
    return a->type == b->type && same_addr(a->family, a->local, b->family, b->peer) && a->lport == b->pport &&
           same_addr(a->family, a->peer, b->family, b->local) && a->pport == b->lport;
}

static int open_state(int st)
{
    return st == TCP_ESTABLISHED || st == TCP_CLOSE_WAIT || st == TCP_FIN_WAIT2;
}

static int tcp_info_of(int fd, struct tcp_info *ti)
{
    memset(ti, 0, sizeof *ti);
    return opt(fd, IPPROTO_TCP, TCP_INFO, ti, sizeof *ti) < 0 ? -1 : 0;
}

/* The bytes end a has sent or queued to send that its peer has not received
 * up to stream position pos: a's position at its last queued byte (data sent
 * once, retransmissions taken off, plus what is not sent yet: the SYN is
 * not counted, as in the peer's received bytes) less pos.  -1 if unknown. */
static long unreceived(const struct lz_inet *a, uint64_t pos, uint64_t *end)
{
    struct tcp_info t;
    if (tcp_info_of(a->fd, &t) < 0 || t.tcpi_bytes_retrans > t.tcpi_bytes_sent) return -1;
    *end = t.tcpi_bytes_sent - t.tcpi_bytes_retrans + t.tcpi_notsent_bytes;
    return *end >= pos ? (long)(*end - pos) : -1;
}

/* A send queue's bytes the peer has not received cannot be read from user
 * space but in TCP repair mode (CAP_NET_ADMIN: CRIU's way).  As root, they are
 * peeked there and appended to what the peer will read (rec b, whose queue
 * was already peeked: *data, b->bytes, ending at stream position pos).
 * Otherwise the checkpoint fails naming the connection (wait_received gave
 * the bytes their chance to arrive before the peek). */
static int take_send_queue(struct rt_ckpt *ck, const struct lz_inet *a, struct lz_inet *b, uint64_t pos, char **data)
{
    uint64_t end = 0;
    long left = unreceived(a, pos, &end);
    if (left > 0) {
        int on = 1;
        struct stat st; /* repair mode is the socket's: one holder at a time */
        long lock = lz_sc2(SYS_fstat, a->fd, &st) == 0 ? rt_obj_lock("sock", st.st_ino) : -1;
        if (lock == -2) return refuse(ck, a, "one end of a TCP connection that another process kept to itself for 10 s");
        if (lz_sc5(SYS_setsockopt, a->fd, IPPROTO_TCP, TCP_REPAIR, &on, sizeof on) < 0) {
            rt_obj_unlock(lock);
        } else {
            int q = TCP_SEND_QUEUE, off = TCP_REPAIR_OFF_NO_WP, outq = 0;
            long e = lz_sc5(SYS_setsockopt, a->fd, IPPROTO_TCP, TCP_REPAIR_QUEUE, &q, sizeof q);
            if (e == 0) e = lz_sc3(SYS_ioctl, a->fd, SIOCOUTQ, &outq);
            char *buf = e == 0 && outq > 0 ? arena_alloc(&ck->arena, (size_t)outq + (size_t)b->bytes) : NULL;
            long n = -ENOMEM;
            if (buf) {
                do n = lz_sc6(SYS_recvfrom, a->fd, (long)(buf + b->bytes), (size_t)outq, MSG_PEEK | MSG_DONTWAIT, 0, 0);
                while (n == -EINTR);
            }
            lz_sc5(SYS_setsockopt, a->fd, IPPROTO_TCP, TCP_REPAIR, &off, sizeof off);
            int reuse = !!(a->opts & LZ_INO_REUSEADDR); /* leaving repair mode clears it */
            lz_sc5(SYS_setsockopt, a->fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof reuse);
            rt_obj_unlock(lock);
            /* the queue holds [end - n, end); the peer's peek ended at end - left */
            if (n != outq || left > n)
                return refuse(ck, a, "one end of a TCP connection whose send queue could not be read in repair mode");
            if (b->bytes) memcpy(buf, *data, b->bytes);
            memmove(buf + b->bytes, buf + b->bytes + (n - left), (size_t)left);
            b->bytes += (uint64_t)left;
            *data = buf;
            return 0;
        }
    }
    if (left == 0) return 0;
    char why[360];
    if (left < 0) return refuse(ck, a, "one end of a TCP connection whose send queue cannot be measured");
    rt_fmt(why, sizeof why, "one end of a TCP connection with %ld byte(s) it sent that its peer, descriptor %d, has not "
           "received (its receive buffer is full); without CAP_NET_ADMIN (TCP repair mode) Lazarus cannot read a TCP "
           "send queue: the checkpoint can be taken once the peer has read", left, b->fd);
    return refuse(ck, a, why);
}

/* Before the receive queues are peeked: waits (at most ~200 ms, in the pause)
 * until each end of a connection inside the process has received all its
 * peer sent, as loopback delivers at once unless the receive window is full. */
static void wait_received(const struct lz_inet *v, size_t n)
{
    for (int round = 0; round < 200; round++) {
        int busy = 0;
        for (size_t i = 0; i < n && !busy; i++) {
            if (v[i].state != LZ_IN_CONNECTED || v[i].type != SOCK_STREAM) continue;
            size_t j = 0;
            while (v[j].fd != v[i].peer_fd) j++;
            struct tcp_info t;
            uint64_t end = 0;
            if (tcp_info_of(v[i].fd, &t) == 0 && unreceived(&v[j], t.tcpi_bytes_received, &end) > 0) busy = 1;
        }
        if (!busy) return;
        struct timespec ts = {0, 1000000};
        lz_sc2(SYS_nanosleep, &ts, 0);
    }
}

/* A connection to another process of this host (peer_ino): once every
 * process of the job is stopped, waits (at most ~200 ms) until this end has
 * received all the other end sent, as for one inside the process.  If it
 * does not (the other end's process is not the job's and goes on sending, or
 * this end's window is full), peer_ino is dropped: the connection comes back
 * reset even if the other end is the job's. */
static int wait_remote(struct lz_inet *v, size_t n, long *nl)
{
    for (int round = 0;; round++) {
        int busy = 0;
        for (size_t i = 0; i < n; i++) {
            if (!v[i].peer_ino) continue;
            struct tcp_info me, peer;
            uint64_t ino = 0;
            if (tcp_info_of(v[i].fd, &me) < 0 || diag_peer(nl, &v[i], &ino, &peer) < 0 || ino != v[i].peer_ino ||
                peer.tcpi_bytes_retrans > peer.tcpi_bytes_sent) {
                v[i].peer_ino = 0;
                continue;
            }
            uint64_t end = peer.tcpi_bytes_sent - peer.tcpi_bytes_retrans + peer.tcpi_notsent_bytes;
            if (end == me.tcpi_bytes_received) continue;
            if (round == 200) v[i].peer_ino = 0;
            else busy = 1;
        }
        if (!busy) return 0;
        struct timespec ts = {0, 1000000};
        lz_sc2(SYS_nanosleep, &ts, 0);
    }
}

/* The receive queue of s, and where in the stream it ends (*pos: the bytes
 * received when it was measured; more may arrive while it is peeked). */
static int peek_queue(struct rt_ckpt *ck, struct lz_inet *s, char **data, uint64_t *pos)
{
    int inq = 0;
    long e = -EAGAIN;
    for (int round = 0; round < 10 && e == -EAGAIN; round++) {
        struct tcp_info x, y;
        if (tcp_info_of(s->fd, &x) < 0 || lz_sc3(SYS_ioctl, s->fd, SIOCINQ, &inq) < 0 || tcp_info_of(s->fd, &y) < 0) break;
        e = x.tcpi_bytes_received == y.tcpi_bytes_received ? 0 : -EAGAIN;
        *pos = y.tcpi_bytes_received;
    }
    if (e < 0) return refuse(ck, s, "a TCP socket whose queued data cannot be measured");
    *data = NULL;
    if (inq <= 0) return 0;
    char *buf = arena_alloc(&ck->arena, (size_t)inq);
    if (!buf) return refuse(ck, s, "a TCP socket with more queued data than the checkpoint's scratch memory holds");
    long n;
    do n = lz_sc6(SYS_recvfrom, s->fd, (long)buf, (size_t)inq, MSG_PEEK | MSG_DONTWAIT, 0, 0);
    while (n == -EINTR);
    if (n != inq) return refuse(ck, s, "a TCP socket whose queued data could not all be seen");
    s->bytes = (uint64_t)inq;
    *data = buf;
    return 0;
}

int rt_capture_inet(struct rt_ckpt *ck)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->nfds; i++) n += ck->fds[i].kind == LZ_FD_INET;
    ck->ninets = 0;
    if (!n) return 0;
    ck->inets = arena_alloc(&ck->arena, n * sizeof *ck->inets);
    ck->inet_data = arena_alloc(&ck->arena, n * sizeof *ck->inet_data);
    int *st = arena_alloc(&ck->arena, n * sizeof *st);
    if (!ck->inets || !ck->inet_data || !st) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    struct lz_inet *v = ck->inets;
    long nl = -1; /* sock_diag, once needed */
    for (size_t i = 0; i < ck->nfds; i++)
        if (ck->fds[i].kind == LZ_FD_INET) {
            if (read_socket(ck, &ck->fds[i], &v[ck->ninets], &st[ck->ninets]) < 0) return -1;
            ck->inet_data[ck->ninets++] = NULL;
        }
    /* each socket's state; a TCP connection's ends matched by their addresses */
    for (size_t i = 0; i < n; i++) {
        struct lz_inet *s = &v[i];
        if (s->type == SOCK_DGRAM) {
            s->state = s->pport ? LZ_IN_CONNECTED : s->lport ? LZ_IN_BOUND : LZ_IN_UNBOUND;
            continue;
        }
        if (st[i] == TCP_LISTEN) { s->state = LZ_IN_LISTEN; continue; }
        if (st[i] == TCP_CLOSE) { s->state = s->lport ? LZ_IN_BOUND : LZ_IN_UNBOUND; memset(s->peer, 0, 16); s->pport = 0; continue; }
        size_t j = 0;
        while (j < n && !(j != i && v[j].type == SOCK_STREAM && st[j] != TCP_LISTEN && same_end(s, &v[j]))) j++;
        if (j < n && open_state(st[i]) && open_state(st[j])) {
            s->state = LZ_IN_CONNECTED;
            s->peer_fd = v[j].fd;
            continue;
        }
        if (j < n) {
            char why[200];
            rt_fmt(why, sizeof why, "a TCP connection with descriptor %d of this process that is opening or closing (%s): "
                   "the checkpoint can be taken once it is open or closed", v[j].fd, tcp_states[st[i] < 12 ? st[i] : 0]);
            if (nl >= 0) lz_sc1(SYS_close, nl);
            return refuse(ck, s, why);
        }
        /* another process of this host holds the other end: one of the job's
         * (the supervisor tells, cli/job_inet.c; the restart pairs them up)? */
        struct tcp_info pti;
        if (open_state(st[i]) && diag_peer(&nl, s, &s->peer_ino, &pti) < 0) s->peer_ino = 0;
        if (tcp_refuse && !s->peer_ino) {
            lz_sc1(SYS_close, nl);
            return refuse(ck, s, "a TCP connection to outside the job, and the job was started with --tcp=refuse "
                                 "(`lazarus run --tcp=reset` restores it as a connection the program sees reset)");
        }
        s->state = LZ_IN_RESET;
    }
    if (wait_remote(v, n, &nl) < 0) return -1;
    if (nl >= 0) lz_sc1(SYS_close, nl);
    wait_received(v, n);
    uint64_t *pos = arena_alloc(&ck->arena, n * sizeof *pos);
    if (!pos) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (size_t i = 0; i < n; i++) /* what each end will read: its receive queue */
        if (((v[i].state == LZ_IN_CONNECTED && v[i].type == SOCK_STREAM) || v[i].peer_ino) &&
            peek_queue(ck, &v[i], &ck->inet_data[i], &pos[i]) < 0)
            return -1;
    for (size_t i = 0; i < n; i++) { /* and what its peer sent that has not reached it */
        struct lz_inet *s = &v[i];
        if (s->state == LZ_IN_CONNECTED && s->type == SOCK_STREAM) {
            size_t j = 0;
            while (v[j].fd != s->peer_fd) j++;
            if (take_send_queue(ck, &v[j], s, pos[i], &ck->inet_data[i]) < 0) return -1;
        }
        if (s->bytes) {
            char name[48];
            rt_fmt(name, sizeof name, "inet.%d", s->fd);
            s->path = strings_add(&ck->strings, name);
        }
    }
    return 0;
}

/* The writer: each connection end's queued bytes in a file of the
 * checkpoint directory, with its checksum in the record. */
int rt_store_inet(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 160];
    for (size_t k = 0; k < ck->ninets; k++) {
        struct lz_inet *s = &ck->inets[k];
        if (!s->bytes) continue;
        s->xxh3 = lz_hash(ck->inet_data[k], s->bytes);
        rt_fmt(path, sizeof path, "%s/%s", ck->tmpdir, ck->strings.buf + s->path);
        long e = rt_write_file(path, ck->inet_data[k], s->bytes);
        if (e < 0) return rt_fail(ck, "cannot keep the data queued on a TCP connection", e);
    }
    return 0;
}
