/* Local (AF_UNIX) sockets that are not one end of a connected pair: a
 * listening socket (bound to a path or an abstract name), a bound or
 * unbound socket that is not connected (a datagram server, with the
 * datagrams queued on it), a datagram socket connected to a named socket
 * (a client of a datagram server, or of /dev/log), and a connected socket
 * whose peer is gone.  Each becomes an LZ_FD_USOCK descriptor with a struct
 * lz_usock saying how to make it again (restorer/restore_usock.c); its
 * receive queue is copied without consuming it, as a pair's (rt_pipes.c).
 * Connected pairs -- socketpair, or connect/accept between processes of the
 * job -- stay rt_pipes.c's.  Runs in the pause, before rt_capture_chans. */
#include "rt.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#ifndef TCP_ESTABLISHED
#define TCP_ESTABLISHED 1
#define TCP_LISTEN 10
#endif

struct diag {
    uint32_t state, type;
    uint32_t peer;               /* 0: none (never connected, or the peer is gone) */
    int has_peer;                /* connected, even if to a socket that is gone (peer 0) */
    uint32_t shutdown;
    uint32_t rq, wq;             /* listening: connections waiting, backlog */
    uint32_t vfs_ino, vfs_dev;   /* the socket file it is bound to (0: none) */
};

static int refuse(struct rt_ckpt *ck, const struct lz_fd *f, const char *what)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (socket:[%llu]) is %s", f->fd, (unsigned long long)f->ino, what);
    return -1;
}

static int refuse_err(struct rt_ckpt *ck, const struct lz_fd *f, const char *what, long err)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (socket:[%llu]): %s (errno %ld)", f->fd, (unsigned long long)f->ino,
           what, -err);
    return -1;
}

static long getopt_int(int fd, int name, int *v)
{
    int len = sizeof *v;
    return lz_sc5(SYS_getsockopt, fd, SOL_SOCKET, name, v, &len);
}

static int64_t timeo_us(int fd, int name)
{
    struct { int64_t sec, usec; } tv = {0, 0};
    int len = sizeof tv;
    return lz_sc5(SYS_getsockopt, fd, SOL_SOCKET, name, &tv, &len) < 0 ? 0 : tv.sec * 1000000 + tv.usec;
}

/* What sock_diag knows of the local socket `ino`: 0 or -errno. */
static long diag(long nl, uint32_t ino, struct diag *d)
{
    _Alignas(struct nlmsghdr) char buf[RT_DIAG_BUF];
    const struct unix_diag_msg *m;
    long len = rt_unix_diag(nl, ino, UDIAG_SHOW_PEER | UDIAG_SHOW_RQLEN | UDIAG_SHOW_VFS, buf, &m);
    if (len < 0) return len;
    memset(d, 0, sizeof *d);
    d->state = m->udiag_state;
    d->type = m->udiag_type;
    const char *a = (const char *)(m + 1), *end = buf + len;
    while (end - a >= (long)sizeof(struct nlattr)) {
        const struct nlattr *at = (const void *)a;
        if (at->nla_len < sizeof *at || at->nla_len > end - a) break;
        const char *v = a + NLA_HDRLEN;
        size_t vl = at->nla_len - NLA_HDRLEN;
        if (at->nla_type == UNIX_DIAG_PEER && vl >= 4) { memcpy(&d->peer, v, 4); d->has_peer = 1; }
        if (at->nla_type == UNIX_DIAG_SHUTDOWN && vl >= 1) d->shutdown = (uint8_t)*v;
        if (at->nla_type == UNIX_DIAG_RQLEN && vl >= sizeof(struct unix_diag_rqlen)) {
            const struct unix_diag_rqlen *q = (const void *)v;
            d->rq = q->udiag_rqueue;
            d->wq = q->udiag_wqueue;
        }
        if (at->nla_type == UNIX_DIAG_VFS && vl >= sizeof(struct unix_diag_vfs)) {
            const struct unix_diag_vfs *fs = (const void *)v;
            d->vfs_ino = fs->udiag_vfs_ino;
            d->vfs_dev = fs->udiag_vfs_dev;
        }
        a += NLA_ALIGN(at->nla_len);
    }
    return 0;
}

/* sun_path of getsockname/getpeername: its length (0: unnamed), or -errno. */
static long sock_name(int fd, int peer, char out[108])
{
    struct sockaddr_un sa;
    int len = sizeof sa;
    memset(&sa, 0, sizeof sa);
    long e = lz_sc3(peer ? SYS_getpeername : SYS_getsockname, fd, &sa, &len);
    if (e < 0) return e;
    long n = len - (long)offsetof(struct sockaddr_un, sun_path);
    if (n <= 0) return 0;
    if (n > 108) n = 108;
    if (sa.sun_path[0]) n = (long)strnlen(sa.sun_path, (size_t)n); /* a path: without its NUL */
    memcpy(out, sa.sun_path, (size_t)n);
    return n;
}

static int usock_slot(struct rt_ckpt *ck, size_t cap)
{
    if (ck->nusocks == cap) { rt_fmt(ck->err, sizeof ck->err, "too many local sockets"); return -1; }
    return 0;
}

/* One socket: its record in *u (data in *data), or -1 with ck->err. */
static int capture_one(struct rt_ckpt *ck, const struct lz_fd *f, const struct diag *d, struct lz_usock *u, char **data,
                       char **from)
{
    memset(u, 0, sizeof *u);
    *data = *from = NULL;
    u->fd = f->fd;
    u->q.ino = f->ino;
    u->q.kind = d->type == SOCK_STREAM ? LZ_CH_STREAM : d->type == SOCK_DGRAM ? LZ_CH_DGRAM : LZ_CH_SEQPACKET;
    u->q.shutdown = d->shutdown & 3;
    u->q.peek_off = -1;
    int v = 0;
    if (getopt_int(f->fd, SO_RCVBUF, &v) == 0) u->q.capacity = (uint32_t)v;
    if (getopt_int(f->fd, SO_SNDBUF, &v) == 0) u->q.sndbuf = (uint32_t)v;
    if (getopt_int(f->fd, SO_PASSCRED, &v) == 0 && v) u->q.sockflags |= LZ_CHS_PASSCRED;
    if (!u->q.capacity || !u->q.sndbuf) return refuse(ck, f, "a local socket whose buffer sizes cannot be read");
    u->rcvtimeo_us = timeo_us(f->fd, SO_RCVTIMEO);
    u->sndtimeo_us = timeo_us(f->fd, SO_SNDTIMEO);
    long n = sock_name(f->fd, 0, u->addr);
    if (n < 0) return refuse_err(ck, f, "cannot read the local socket's name", n);
    u->addr_len = (uint32_t)n;
    if (n > 0 && u->addr[0]) {
        /* a path: does it still lead to this socket?  (relative: to the working directory) */
        char path[112];
        memcpy(path, u->addr, (size_t)n);
        path[n] = 0;
        struct stat st;
        if (lz_sc4(SYS_newfstatat, AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) &&
            st.st_ino == d->vfs_ino) {
            u->flags |= LZ_US_MODE;
            u->mode = st.st_mode & 07777;
            u->uid = st.st_uid;
            u->gid = st.st_gid;
        } else {
            u->flags |= LZ_US_UNLINKED;
        }
    }
    if (d->state == TCP_LISTEN) {
        if (d->rq)
            return refuse(ck, f, "a listening socket with connections it has not accepted yet (Lazarus cannot put "
                                 "them back in its queue); the checkpoint can be taken once they are accepted");
        u->flags |= LZ_US_LISTEN;
        u->backlog = d->wq;
        return 0;
    }
    if (d->state == TCP_ESTABLISHED && d->peer) {
        /* a datagram socket connected to another that is not connected back: to its name */
        n = sock_name(f->fd, 1, u->peer_addr);
        if (n <= 0) return refuse(ck, f, "a local datagram socket connected to a socket without a name");
        u->peer_len = (uint32_t)n;
        u->flags |= LZ_US_CONNECT;
        int inq = 0;
        lz_sc3(SYS_ioctl, f->fd, FIONREAD, &inq);
        if (inq > 0)
            return refuse(ck, f, "a local datagram socket connected to a name, with datagrams from it not read yet "
                                 "(they could only be put back by that socket); the checkpoint can be taken once they are read");
        return 0;
    }
    /* (a datagram socket others connected to says "established" too: it has no peer of its own) */
    if (d->state == TCP_ESTABLISHED && d->has_peer) u->flags |= LZ_US_ORPHAN;
    else if (d->type != SOCK_DGRAM) return 0; /* never connected: nothing can be queued */
    /* its receive queue: a datagram server's datagrams, what an orphan still has to read */
    size_t cap = 4 * (size_t)(u->q.capacity > u->q.sndbuf ? u->q.capacity : u->q.sndbuf) + (1u << 20);
    /* a datagram server's: who sent each (its reply goes there) */
    struct rt_senders snd = {NULL, 0, 0};
    if (d->type == SOCK_DGRAM && !(u->flags & LZ_US_ORPHAN)) {
        snd.cap = 1024 * (4 + 108);
        if (!(snd.buf = arena_alloc(&ck->arena, snd.cap))) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    }
    if (rt_peek_socket(ck, f, (int)d->type, d->shutdown, &u->q, data, cap, snd.buf ? &snd : NULL) < 0) return -1;
    if (u->q.nmsgs && snd.len) {
        *from = snd.buf;
        u->from_bytes = (uint32_t)snd.len;
    }
    return 0; /* (u->q.peek_off: the program's, read under the peek's lock) */
}

/* Is descriptor f an AF_UNIX socket that is not one end of a connected pair?
 * 1 (and *d filled), 0, or -1 with ck->err. */
static int classify(struct rt_ckpt *ck, const struct lz_fd *f, long *nl, struct diag *d)
{
    int dom = 0;
    if (getopt_int(f->fd, SO_DOMAIN, &dom) < 0 || dom != AF_UNIX) return 0; /* rt_pipes.c names it */
    if (*nl < 0) {
        *nl = lz_sc3(SYS_socket, AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
        if (*nl < 0) return refuse_err(ck, f, "cannot ask the kernel about the local socket (sock_diag)", *nl);
    }
    long e = diag(*nl, (uint32_t)f->ino, d);
    if (e < 0) return refuse_err(ck, f, "cannot ask the kernel about the local socket (sock_diag)", e);
    if (d->type != SOCK_STREAM && d->type != SOCK_DGRAM && d->type != SOCK_SEQPACKET) return 0;
    if (d->has_peer && !d->peer && d->type != SOCK_DGRAM && (d->shutdown & 3) != 3)
        /* connected to a socket with no file: one waiting in a listening socket's queue */
        return refuse(ck, f, "a local socket connected to a listening socket that has not accepted the connection yet; "
                             "the checkpoint can be taken once it is accepted");
    if (d->state == TCP_LISTEN || !d->peer) return 1;
    if (d->type != SOCK_DGRAM) return 0; /* connected stream or seqpacket: a pair */
    struct diag p;
    e = diag(*nl, d->peer, &p);
    return e == 0 && p.peer == (uint32_t)f->ino ? 0 : 1; /* connected back: a pair */
}

int rt_capture_usocks(struct rt_ckpt *ck)
{
    size_t n = 0;
    for (size_t i = 0; i < ck->nfds; i++) n += ck->fds[i].kind == LZ_FD_SOCKET && ck->fds[i].dup_of < 0;
    if (n == 0) return 0;
    ck->usocks = arena_alloc(&ck->arena, n * sizeof *ck->usocks);
    ck->usock_data = arena_alloc(&ck->arena, n * sizeof *ck->usock_data);
    ck->usock_from = arena_alloc(&ck->arena, n * sizeof *ck->usock_from);
    if (!ck->usocks || !ck->usock_data || !ck->usock_from) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    long nl = -1;
    int rc = 0;
    for (size_t i = 0; i < ck->nfds && rc == 0; i++) {
        struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_SOCKET || f->dup_of >= 0) continue;
        struct diag d;
        int r = classify(ck, f, &nl, &d);
        if (r <= 0) { rc = r; continue; }
        if (usock_slot(ck, n) < 0) { rc = -1; break; }
        rc = capture_one(ck, f, &d, &ck->usocks[ck->nusocks], &ck->usock_data[ck->nusocks], &ck->usock_from[ck->nusocks]);
        if (rc) break;
        struct lz_usock *u = &ck->usocks[ck->nusocks++];
        f->kind = LZ_FD_USOCK;
        if (u->q.bytes) {
            char name[48];
            rt_fmt(name, sizeof name, "usock.%llu", (unsigned long long)u->q.ino);
            u->q.path = strings_add(&ck->strings, name);
        }
        if (u->from_bytes) {
            char name[48];
            rt_fmt(name, sizeof name, "usock.%llu.from", (unsigned long long)u->q.ino);
            u->from_path = strings_add(&ck->strings, name);
        }
    }
    if (nl >= 0) lz_sc1(SYS_close, nl);
    return rc;
}

/* The writer: each queue in its file of the checkpoint directory. */
int rt_store_usocks(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 160];
    for (size_t k = 0; k < ck->nusocks; k++) {
        struct lz_usock *u = &ck->usocks[k];
        if (!u->q.bytes) continue;
        u->q.xxh3 = lz_hash(ck->usock_data[k], u->q.bytes);
        rt_fmt(path, sizeof path, "%s/%s", ck->tmpdir, ck->strings.buf + u->q.path);
        long e = rt_write_file(path, ck->usock_data[k], u->q.bytes);
        if (e == 0 && u->from_bytes) {
            u->from_xxh3 = lz_hash(ck->usock_from[k], u->from_bytes);
            rt_fmt(path, sizeof path, "%s/%s", ck->tmpdir, ck->strings.buf + u->from_path);
            e = rt_write_file(path, ck->usock_from[k], u->from_bytes);
        }
        if (e < 0) return rt_fail(ck, "cannot keep the data queued on a local socket", e);
    }
    return 0;
}
