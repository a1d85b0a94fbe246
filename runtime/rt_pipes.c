/* Pipes and AF_UNIX socket pairs the program made, with the data in flight
 * in them (struct lz_chan).  In the pause, with every thread stopped: which
 * ends the process holds, each object's capacity, and the bytes a read would
 * return next, copied without consuming them, for the program goes on after
 * the checkpoint:
 *   - a pipe's buffers are duplicated with tee(2) into a scratch pipe of the
 *     same capacity, which is then read (a pipe whose read end the process
 *     does not hold is read through a reader opened on /proc/self/fd/N);
 *   - a socket's receive queue is peeked with SO_PEEK_OFF set, so successive
 *     MSG_PEEK calls walk it, one message per call for datagrams.  The offset
 *     is the socket's, and every process holding the socket captures it at
 *     the same time: each peek is done under a lock of the socket (rt_obj_lock.c).
 * The peer of a socket comes from sock_diag (UNIX_DIAG_PEER).  A pipe may be
 * shared with other processes of the job (all are stopped while this runs;
 * the restart makes one pipe for all its holders, by inode); a socket whose
 * other end lives outside the process (or nowhere) fails the checkpoint with
 * a message naming the descriptor.  The
 * writer puts each object's data in a file of the checkpoint directory
 * (rt_store_chans); the restorer rebuilds them (restorer/restore_pipes.c). */
#include "rt.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <poll.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>

#ifndef SPLICE_F_NONBLOCK
#define SPLICE_F_NONBLOCK 2
#endif

static int refuse(struct rt_ckpt *ck, const struct lz_fd *f, const char *what)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (%s:[%llu]) is %s", f->fd,
           f->kind == LZ_FD_PIPE ? "pipe" : f->kind == LZ_FD_FIFO ? "fifo" : "socket",
           (unsigned long long)f->ino, what);
    return -1;
}

static int refuse_err(struct rt_ckpt *ck, const struct lz_fd *f, const char *what, long err)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (%s:[%llu]): %s (errno %ld)", f->fd,
           f->kind == LZ_FD_PIPE ? "pipe" : f->kind == LZ_FD_FIFO ? "fifo" : "socket", (unsigned long long)f->ino, what, -err);
    return -1;
}

static int is_chan_end(const struct lz_fd *f)
{
    return (f->kind == LZ_FD_PIPE || f->kind == LZ_FD_FIFO || f->kind == LZ_FD_SOCKET) && f->dup_of < 0;
}


static long read_full(long fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        long n = lz_sc3(SYS_read, fd, buf + got, len - got);
        if (n == -EINTR) continue;
        if (n <= 0) return n ? n : -EIO;
        got += (size_t)n;
    }
    return 0;
}

/* ---------------------------------------------------------------- pipes */

/* The pipe `ino`: every description of it the process holds (records from
 * `first` on), its capacity and what a read would return next. */
static int capture_pipe(struct rt_ckpt *ck, size_t first, struct lz_chan *c, char **data)
{
    const struct lz_fd *f0 = &ck->fds[first];
    const struct lz_fd *rd = NULL, *wr = NULL;
    for (size_t i = first; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != f0->kind || f->dup_of >= 0 || f->ino != f0->ino || f->dev != f0->dev) continue;
        if (f->flags & O_DIRECT) return refuse(ck, f, "a pipe in packet mode (O_DIRECT), which Lazarus cannot restore yet");
        if ((f->flags & O_ACCMODE) != O_WRONLY && !rd) rd = f;
        if ((f->flags & O_ACCMODE) != O_RDONLY && !wr) wr = f;
    }
    /* one end only: the other is closed, or another process of the job holds it (every
     * process is stopped now, and the restart matches the ends by inode) */
    memset(c, 0, sizeof *c);
    c->ino = f0->ino;
    c->kind = f0->kind == LZ_FD_FIFO ? LZ_CH_FIFO : LZ_CH_PIPE;
    if (f0->kind == LZ_FD_FIFO) { c->reserved[0] = f0->dev; c->reserved[1] = f0->mode & 07777; }
    long cap = lz_sc2(SYS_fcntl, f0->fd, F_GETPIPE_SZ);
    if (cap <= 0) return refuse_err(ck, f0, "cannot read the pipe's size", cap);
    c->capacity = (uint32_t)cap;
    long r = rd ? rd->fd : -1;
    if (!rd) { /* a reader of our own, for as long as we look */
        if (!wr) return refuse(ck, f0, "a pipe descriptor that is neither end of its pipe"); /* f0 is one end: never */
        char lp[40];
        rt_fmt(lp, sizeof lp, "/proc/self/fd/%d", wr->fd);
        r = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0);
        if (r < 0) return refuse_err(ck, wr, "cannot open a reader on the pipe to copy its data", r);
    }
    int inq = 0;
    long e = lz_sc3(SYS_ioctl, r, FIONREAD, &inq);
    long s[2] = {-1, -1};
    if (e == 0 && inq > 0) {
        /* tee needs a free slot per buffer of the pipe: a scratch pipe as large */
        int p[2];
        e = lz_sc2(SYS_pipe2, p, O_NONBLOCK | O_CLOEXEC);
        if (e == 0) {
            s[0] = p[0]; s[1] = p[1];
            long got = lz_sc3(SYS_fcntl, s[1], F_SETPIPE_SZ, cap);
            e = got < 0 ? got : got < cap ? -ENOSPC : 0;
        }
        *data = e == 0 ? arena_alloc(&ck->arena, (size_t)inq) : NULL;
        if (e == 0 && !*data) e = -ENOMEM;
        if (e == 0) {
            long n = lz_sc4(SYS_tee, r, s[1], (size_t)inq, SPLICE_F_NONBLOCK);
            e = n < 0 ? n : n != inq ? -EAGAIN : read_full(s[0], *data, (size_t)inq);
        }
        c->bytes = (uint64_t)inq;
    }
    if (s[0] >= 0) { lz_sc1(SYS_close, s[0]); lz_sc1(SYS_close, s[1]); }
    if (!rd) lz_sc1(SYS_close, r);
    if (e < 0) return refuse_err(ck, f0, "cannot copy the data in flight in the pipe", e);
    return 0;
}

/* -------------------------------------------------------------- sockets */

struct sockinfo {
    uint32_t peer;      /* the connected socket's inode (sock_diag), 0 = none */
    uint32_t shutdown;  /* RCV_SHUTDOWN 1, SEND_SHUTDOWN 2 */
    int type;           /* SOCK_* */
};

static long getopt_int(int fd, int level, int name, int *v)
{
    int len = sizeof *v;
    return lz_sc5(SYS_getsockopt, fd, level, name, v, &len);
}

/* The kernel's sock_diag answer about the local socket `ino` with the
 * attributes `show` (UDIAG_SHOW_*), asked through the NETLINK_SOCK_DIAG
 * socket nl, in buf (RT_DIAG_BUF bytes, aligned): its length, *m its
 * message (attributes from m + 1 to buf + length), or -errno. */
long rt_unix_diag(long nl, uint32_t ino, uint32_t show, void *buf, const struct unix_diag_msg **m)
{
    struct { struct nlmsghdr h; struct unix_diag_req r; } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = ~0u;
    req.r.udiag_ino = ino;
    req.r.udiag_show = show;
    req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u; /* no cookie: by inode */
    struct sockaddr_nl sa;
    memset(&sa, 0, sizeof sa);
    sa.nl_family = AF_NETLINK;
    long n = lz_sc6(SYS_sendto, nl, (long)&req, sizeof req, 0, (long)&sa, sizeof sa);
    if (n < 0) return n;
    const struct nlmsghdr *h = buf;
    /* the kernel answers within sendto: never wait in the pause */
    do n = lz_sc6(SYS_recvfrom, nl, (long)buf, RT_DIAG_BUF, MSG_DONTWAIT, 0, 0);
    while (n == -EINTR);
    if (n < (long)sizeof(struct nlmsghdr) || h->nlmsg_len > (uint32_t)n) return n < 0 ? n : -EIO;
    if (h->nlmsg_type == NLMSG_ERROR) {
        const struct nlmsgerr *er = NLMSG_DATA(h);
        return er->error ? er->error : -EIO;
    }
    if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct unix_diag_msg))) return -EIO;
    *m = NLMSG_DATA(h);
    if ((*m)->udiag_ino != ino) return -EIO;
    return (long)h->nlmsg_len;
}

/* UNIX_DIAG_PEER and UNIX_DIAG_SHUTDOWN of the socket `ino`: 0, or -errno. */
static long diag_unix(long nl, uint32_t ino, struct sockinfo *si)
{
    _Alignas(struct nlmsghdr) char buf[RT_DIAG_BUF];
    const struct unix_diag_msg *m;
    long len = rt_unix_diag(nl, ino, UDIAG_SHOW_PEER, buf, &m);
    if (len < 0) return len;
    si->peer = 0;
    si->shutdown = 0;
    const char *a = (const char *)(m + 1), *end = buf + len;
    while (end - a >= (long)sizeof(struct nlattr)) {
        const struct nlattr *at = (const void *)a;
        if (at->nla_len < sizeof *at || at->nla_len > end - a) break;
        const char *v = a + NLA_HDRLEN;
        if (at->nla_type == UNIX_DIAG_PEER && at->nla_len >= NLA_HDRLEN + 4) memcpy(&si->peer, v, 4);
        if (at->nla_type == UNIX_DIAG_SHUTDOWN && at->nla_len >= NLA_HDRLEN + 1) si->shutdown = (uint8_t)*v;
        a += NLA_ALIGN(at->nla_len);
    }
    return 0;
}

/* Is f one end of a connected, unnamed AF_UNIX socket?  Its peer and type in si. */
static int check_socket(struct rt_ckpt *ck, const struct lz_fd *f, long *nl, struct sockinfo *si)
{
    int dom = 0, listening = 0;
    if (getopt_int(f->fd, SOL_SOCKET, SO_DOMAIN, &dom) < 0 || dom != AF_UNIX)
        return refuse(ck, f, "a socket, and not one end of a local (AF_UNIX) socket pair");
    if (getopt_int(f->fd, SOL_SOCKET, SO_TYPE, &si->type) < 0 ||
        (si->type != SOCK_STREAM && si->type != SOCK_DGRAM && si->type != SOCK_SEQPACKET))
        return refuse(ck, f, "a local socket of a type Lazarus cannot restore");
    if (getopt_int(f->fd, SOL_SOCKET, SO_ACCEPTCONN, &listening) == 0 && listening)
        return refuse(ck, f, "a listening socket, which Lazarus cannot restore yet");
    /* (a name is kept only by rt_usock.c's sockets: an end of a connection
     * made by connect/accept comes back as an end of a pair, unnamed) */
    if (*nl < 0) {
        *nl = lz_sc3(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (*nl < 0) return refuse_err(ck, f, "cannot ask the kernel for the socket's peer (sock_diag)", *nl);
    }
    long e = diag_unix(*nl, (uint32_t)f->ino, si);
    if (e < 0) return refuse_err(ck, f, "cannot ask the kernel for the socket's peer (sock_diag)", e);
    if (!si->peer) return refuse(ck, f, "a local socket that is not connected, or whose other end is closed");
    return 0;
}

/* Copies the receive queue of socket f into *data without consuming it:
 * with SO_PEEK_OFF on, each MSG_PEEK goes on where the previous one ended
 * (one whole message per call for datagrams, kept with its length). */
static int peek_queue(struct rt_ckpt *ck, const struct lz_fd *f, const struct sockinfo *si, struct lz_chan *c,
                      char **data, size_t cap, struct rt_senders *from)
{
    int msgs = si->type != SOCK_STREAM;
    int saved = -1, zero = 0, inq = 0;
    long lock = rt_obj_lock("sock", f->ino);
    if (lock == -2) return refuse(ck, f, "a local socket whose queue another process kept to itself for 10 s");
    getopt_int(f->fd, SOL_SOCKET, SO_PEEK_OFF, &saved);
    c->peek_off = saved;
    long e = lz_sc3(SYS_ioctl, f->fd, FIONREAD, &inq);
    if (e == 0) e = lz_sc5(SYS_setsockopt, f->fd, SOL_SOCKET, SO_PEEK_OFF, &zero, sizeof zero);
    if (e < 0) {
        rt_obj_unlock(lock);
        return refuse_err(ck, f, "cannot look at the data queued on the socket", e);
    }
    char *buf = arena_alloc(&ck->arena, cap);
    size_t len = 0;
    uint64_t payload = 0;
    const char *why = buf ? NULL : "too much data queued for the checkpoint's scratch memory";
    while (!why) {
        if (len + (msgs ? 4 : 0) >= cap) { why = "more data queued on the socket than its buffers can hold"; break; }
        size_t room = cap - len - (msgs ? 4 : 0);
        struct iovec iov = {buf + len + (msgs ? 4 : 0), room};
        struct msghdr mh;
        memset(&mh, 0, sizeof mh);
        mh.msg_iov = &iov;
        mh.msg_iovlen = 1;
        /* credentials (SO_PASSCRED on either end) are made again by the
         * refill; descriptors a peek installs are closed at once */
        union { struct cmsghdr h; char b[512]; } ctl;
        mh.msg_control = &ctl;
        mh.msg_controllen = sizeof ctl;
        struct sockaddr_un sa; /* a datagram's sender, when asked for */
        if (from) { mh.msg_name = &sa; mh.msg_namelen = sizeof sa; }
        long n = lz_sc3(SYS_recvmsg, f->fd, &mh, MSG_PEEK | MSG_DONTWAIT | MSG_CMSG_CLOEXEC | (msgs ? MSG_TRUNC : 0));
        int rights = 0;
        for (struct cmsghdr *cm = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm; cm = CMSG_NXTHDR(&mh, cm)) {
            if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
            rights = 1;
            for (size_t k = 0; k < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) lz_sc1(SYS_close, ((int *)CMSG_DATA(cm))[k]);
        }
        if (rights) { why = "a local socket with descriptors in flight, which Lazarus cannot restore"; break; }
        if (n == -EINTR) continue;
        if (n == -EAGAIN) break;
        if (n < 0) { e = n; why = "cannot look at the data queued on the socket"; break; }
        if (mh.msg_flags & MSG_CTRUNC) { why = "a local socket with descriptors in flight, which Lazarus cannot restore"; break; }
        /* end of the stream (the peer shut its side); for SEQPACKET an empty
         * message and the end look alike: the end once every byte was seen */
        if (n == 0 && (!msgs || (si->type == SOCK_SEQPACKET && (si->shutdown & 1) && payload == (uint64_t)inq))) break;
        if ((size_t)n > room) { why = "more data queued on the socket than its buffers can hold"; break; }
        if (msgs) {
            uint32_t l = (uint32_t)n;
            memcpy(buf + len, &l, 4);
            len += 4;
            c->nmsgs++;
        }
        if (from) { /* u32 length of sun_path (0: unnamed) + its bytes */
            long nl = (long)mh.msg_namelen - (long)offsetof(struct sockaddr_un, sun_path);
            uint32_t l = nl <= 0 ? 0 : nl > 108 ? 108 : (uint32_t)nl;
            if (l && sa.sun_path[0]) l = (uint32_t)strnlen(sa.sun_path, l);
            if (from->len + 4 + l > from->cap) { why = "too many datagrams queued on the socket"; break; }
            memcpy(from->buf + from->len, &l, 4);
            memcpy(from->buf + from->len + 4, sa.sun_path, l);
            from->len += 4 + l;
        }
        len += (size_t)n;
        payload += (uint64_t)n;
    }
    lz_sc5(SYS_setsockopt, f->fd, SOL_SOCKET, SO_PEEK_OFF, &saved, sizeof saved);
    rt_obj_unlock(lock);
    /* FIONREAD: every queued byte (STREAM, SEQPACKET), the first message's (DGRAM) */
    if (!why && (si->type == SOCK_DGRAM ? (c->nmsgs ? *(uint32_t *)buf : 0) != (uint32_t)inq : payload != (uint64_t)inq))
        why = "a local socket whose queued data could not all be seen";
    if (why) return e < 0 ? refuse_err(ck, f, why, e) : refuse(ck, f, why);
    c->bytes = len;
    *data = len ? buf : NULL;
    return 0;
}

static uint32_t wmem(long fd)
{
    uint32_t m[SK_MEMINFO_VARS];
    int len = sizeof m;
    return lz_sc5(SYS_getsockopt, fd, SOL_SOCKET, SO_MEMINFO, m, &len) < 0 ? 0 : m[SK_MEMINFO_WMEM_ALLOC];
}

/* A peek does not see every queued message: the kernel marks an empty
 * message "peeked" the first time a peek returns it, and a peek at an offset
 * skips such a message from then on (an earlier checkpoint's look, or the
 * program's own MSG_PEEK).  Every message the peer sent and this socket has
 * not read is charged to the peer's send buffer; the same messages sent on a
 * scratch pair cost the same, so a shortfall of whole empty messages means
 * some were not seen.  1 if so; 0 if not, or if it cannot be told. */
static int hidden_messages(int type, long peer, const char *buf, size_t len)
{
    uint32_t charged = wmem(peer);
    if (!charged) return 0;
    int x[2];
    if (lz_sc4(SYS_socketpair, AF_UNIX, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, x) < 0) return 0;
    int room = (int)(charged > (1u << 29) ? 1u << 29 : charged), hidden = 0;
    lz_sc5(SYS_setsockopt, x[1], SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
    long e = 0;
    for (size_t off = 0; off + 4 <= len && e >= 0;) {
        uint32_t l;
        memcpy(&l, buf + off, 4);
        e = lz_sc6(SYS_sendto, x[1], (long)(buf + off + 4), l, MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0);
        off += 4 + l;
    }
    uint32_t seen = wmem(x[1]);
    if (e >= 0 && lz_sc6(SYS_sendto, x[1], (long)buf, 0, MSG_DONTWAIT | MSG_NOSIGNAL, 0, 0) == 0) {
        uint32_t empty = wmem(x[1]) - seen;
        hidden = charged > seen && empty && (charged - seen) % empty == 0;
    }
    lz_sc1(SYS_close, x[0]);
    lz_sc1(SYS_close, x[1]);
    return hidden;
}

int rt_peek_socket(struct rt_ckpt *ck, const struct lz_fd *f, int type, uint32_t shutdown, struct lz_chan *c, char **data,
                   size_t cap, struct rt_senders *from)
{
    struct sockinfo si = {0, shutdown, type};
    return peek_queue(ck, f, &si, c, data, cap, from);
}

static int capture_socket(struct rt_ckpt *ck, const struct lz_fd *f, const struct sockinfo *si, long peer,
                          struct lz_chan *c, char **data)
{
    memset(c, 0, sizeof *c);
    c->ino = f->ino;
    c->peer = si->peer;
    c->kind = si->type == SOCK_STREAM ? LZ_CH_STREAM : si->type == SOCK_DGRAM ? LZ_CH_DGRAM : LZ_CH_SEQPACKET;
    c->shutdown = si->shutdown & 3;
    int v = 0;
    if (getopt_int(f->fd, SOL_SOCKET, SO_RCVBUF, &v) == 0) c->capacity = (uint32_t)v;
    if (getopt_int(f->fd, SOL_SOCKET, SO_SNDBUF, &v) == 0) c->sndbuf = (uint32_t)v;
    if (getopt_int(f->fd, SOL_SOCKET, SO_PASSCRED, &v) == 0 && v) c->sockflags |= LZ_CHS_PASSCRED;
    for (int k = 0; k < 2; k++) { /* SO_RCVTIMEO, SO_SNDTIMEO in microseconds */
        struct { int64_t sec, usec; } tv = {0, 0};
        int len = sizeof tv;
        if (lz_sc5(SYS_getsockopt, f->fd, SOL_SOCKET, k ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, &len) == 0)
            c->reserved[k] = (uint64_t)(tv.sec * 1000000 + tv.usec);
    }
    if (!c->capacity || !c->sndbuf) return refuse(ck, f, "a local socket whose buffer sizes cannot be read");
    /* what is queued here was charged to the peer's send buffer (at most one
     * message over it); untouched scratch pages cost nothing */
    int peer_sndbuf = 0;
    if (peer >= 0) getopt_int((int)peer, SOL_SOCKET, SO_SNDBUF, &peer_sndbuf);
    else peer_sndbuf = (int)(c->capacity > c->sndbuf ? c->capacity : c->sndbuf); /* the peer is another process's */
    size_t cap = 4 * (size_t)peer_sndbuf + (1u << 20);
    if (peek_queue(ck, f, si, c, data, cap, NULL) < 0) return -1;
    if (si->type != SOCK_STREAM && peer >= 0 && hidden_messages(si->type, peer, *data, c->bytes))
        return refuse(ck, f, "a local socket holding empty messages that the kernel no longer shows to a peek (an "
                             "earlier checkpoint or the program peeked at them); it can be checkpointed once they are read");
    return 0;
}

/* ------------------------------------------------------------ the table */

/* 0/1/2 (or a descriptor from the launcher) that is an end of a pipe or
 * socket pair the program made itself is that pipe's, not the restarter's. */
static void adopt_stdio(struct rt_ckpt *ck, const uint64_t *peer)
{
    for (size_t i = 0; i < ck->nfds; i++) {
        struct lz_fd *s = &ck->fds[i];
        if (s->kind != LZ_FD_STDIO || !(S_ISFIFO(s->mode) || S_ISSOCK(s->mode))) continue;
        for (size_t j = 0; j < ck->nfds; j++) {
            const struct lz_fd *f = &ck->fds[j];
            if (!is_chan_end(f)) continue;
            if ((S_ISFIFO(s->mode) && f->kind == LZ_FD_PIPE && f->ino == s->ino) ||
                (S_ISSOCK(s->mode) && f->kind == LZ_FD_SOCKET && peer[j] == s->ino)) {
                s->kind = s->dup_of >= 0 ? LZ_FD_DUP : f->kind;
                break;
            }
        }
    }
}

static long chan_slot(struct rt_ckpt *ck, size_t cap)
{
    if (ck->nchans == cap) { rt_fmt(ck->err, sizeof ck->err, "too many pipes and sockets"); return -1; }
    ck->chan_data[ck->nchans] = NULL;
    return (long)ck->nchans;
}

int rt_capture_chans(struct rt_ckpt *ck)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->nfds; i++) n += is_chan_end(&ck->fds[i]);
    if (n == 0) return 0;
    struct sockinfo *si = arena_alloc(&ck->arena, ck->nfds * sizeof *si);
    uint64_t *peer = arena_alloc(&ck->arena, ck->nfds * sizeof *peer);
    if (!si || !peer) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    long nl = -1;
    int rc = 0;
    /* the sockets' peers first: a 0/1/2 may be one; then the adopted ones' */
    for (int round = 0; round < 2 && rc == 0; round++) {
        if (round == 1) adopt_stdio(ck, peer);
        for (size_t i = 0; i < ck->nfds && rc == 0; i++) {
            if (round == 0) peer[i] = 0;
            if (is_chan_end(&ck->fds[i]) && ck->fds[i].kind == LZ_FD_SOCKET && !peer[i]) {
                rc = check_socket(ck, &ck->fds[i], &nl, &si[i]);
                peer[i] = si[i].peer;
            }
        }
    }
    if (nl >= 0) lz_sc1(SYS_close, nl);
    if (rc) return rc;
    n = 0;
    for (size_t i = 0; i < ck->nfds; i++) n += is_chan_end(&ck->fds[i]);
    ck->chans = arena_alloc(&ck->arena, n * sizeof *ck->chans);
    ck->chan_data = arena_alloc(&ck->arena, n * sizeof *ck->chan_data);
    if (!ck->chans || !ck->chan_data) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (size_t i = 0; i < ck->nfds && rc == 0; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (!is_chan_end(f)) continue;
        if (f->kind == LZ_FD_PIPE || f->kind == LZ_FD_FIFO) {
            int seen = 0; /* by its first description */
            uint32_t kind = f->kind == LZ_FD_FIFO ? LZ_CH_FIFO : LZ_CH_PIPE;
            for (size_t k = 0; k < ck->nchans && !seen; k++) seen = ck->chans[k].ino == f->ino && ck->chans[k].kind == kind;
            if (seen) continue;
            long k = chan_slot(ck, n);
            rc = k < 0 ? -1 : capture_pipe(ck, i, &ck->chans[k], &ck->chan_data[k]);
        } else {
            /* the other end here, connected to this one; or in another
             * process, which the supervisor checks is one of the job's */
            size_t j = 0;
            while (j < ck->nfds && !(is_chan_end(&ck->fds[j]) && ck->fds[j].kind == LZ_FD_SOCKET && ck->fds[j].ino == peer[i])) j++;
            if (j < ck->nfds && peer[j] != f->ino)
                return refuse(ck, f, "one end of a local socket pair whose other end is connected elsewhere");
            long k = chan_slot(ck, n);
            rc = k < 0 ? -1 : capture_socket(ck, f, &si[i], j < ck->nfds ? ck->fds[j].fd : -1, &ck->chans[k], &ck->chan_data[k]);
            if (rc == 0 && j == ck->nfds) {
                ck->chans[k].sockflags |= LZ_CHS_REMOTE;
                rt_notify("PEER %llu %d %llu", (unsigned long long)ck->index, f->fd, (unsigned long long)peer[i]);
            }
        }
        if (rc == 0) ck->nchans++;
    }
    if (rc) return rc;
    for (size_t k = 0; k < ck->nchans; k++) {
        struct lz_chan *c = &ck->chans[k];
        if (!c->bytes) continue;
        char name[48];
        rt_fmt(name, sizeof name, "%s.%llu", c->kind == LZ_CH_PIPE ? "pipe" : c->kind == LZ_CH_FIFO ? "fifo" : "sock",
               (unsigned long long)c->ino);
        c->path = strings_add(&ck->strings, name);
    }
    return 0;
}

/* The writer: each object's data in a file of the checkpoint directory,
 * with its checksum in the record (the manifest covers the record). */
int rt_store_chans(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 160];
    for (size_t k = 0; k < ck->nchans; k++) {
        struct lz_chan *c = &ck->chans[k];
        if (!c->bytes) continue;
        c->xxh3 = lz_hash(ck->chan_data[k], c->bytes);
        rt_fmt(path, sizeof path, "%s/%s", ck->tmpdir, ck->strings.buf + c->path);
        long e = rt_write_file(path, ck->chan_data[k], c->bytes);
        if (e < 0) return rt_fail(ck, "cannot keep the data in flight in a pipe or socket", e);
    }
    return 0;
}
