/* Local sockets that are not one end of a connected pair (struct lz_usock,
 * runtime/rt_usock.c), made again:
 *   - bound to its path or abstract name again; a socket file left at the
 *     path by the killed job is replaced, only if it is a socket nobody
 *     listens on (a connect is refused); anything else there fails the
 *     restart with one line.  A relative path is the program's working
 *     directory's.  The file gets its mode (and owner, where allowed) back;
 *     a socket whose path was unlinked is bound, then unlinked again;
 *   - listening with its backlog;
 *   - a datagram server's queue refilled by sending each datagram to its
 *     name from a scratch socket (the sender's address is not kept);
 *   - a socket whose peer is gone: one end of a new pair, refilled from the
 *     other end, which is then closed (reads give the queue, then end of
 *     file; writes fail with EPIPE, or ECONNREFUSED for datagrams);
 *   - a datagram socket connected to a name: connected again once every
 *     descriptor is in place (its peer may be another process's, restored
 *     meanwhile: waited for up to 10 s);
 * then buffer sizes, SO_PASSCRED, SO_PEEK_OFF, timeouts and shutdown. */
#include "restorer.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC by a raw system call: the vDSO is moving meanwhile */
static uint64_t now_ns(void)
{
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int sock_type(const struct lz_chan *c)
{
    return c->kind == LZ_CH_STREAM ? SOCK_STREAM : c->kind == LZ_CH_DGRAM ? SOCK_DGRAM : SOCK_SEQPACKET;
}

static socklen_t make_addr(struct sockaddr_un *sa, const char *name, uint32_t len)
{
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] ? 1 : 0));
}

/* A printable form of a name, for messages: "@..." for an abstract one. */
static const char *shown(const char *name, uint32_t len, char out[120])
{
    size_t n = 0;
    if (len && !name[0]) out[n++] = '@';
    for (uint32_t i = name[0] ? 0 : 1; i < len && n < 118; i++) out[n++] = name[i] >= 32 && name[i] < 127 ? name[i] : '?';
    out[n] = 0;
    return out;
}

/* The program's working directory, for a relative path; the caller goes back to `back`. */
static int enter_cwd(const char *cwd)
{
    int back = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*cwd && chdir(cwd) < 0) restore_fail("cannot enter the program's working directory %s: %s", cwd, strerror(errno));
    return back;
}

static void leave_cwd(int back)
{
    if (back >= 0) {
        if (fchdir(back) < 0) {} /* the restorer's own directory: nothing depends on it */
        close(back);
    }
}

/* The path of u is free to bind: nothing there, or a socket file nobody is
 * bound to any more (the killed job's), which is removed. */
static void free_path(const struct lz_usock *u, const char *path, int prog_fd)
{
    struct stat st;
    char nm[120];
    if (lstat(path, &st) < 0) {
        if (errno == ENOENT) return;
        restore_fail("cannot bind descriptor %d to %s again: %s", prog_fd, path, strerror(errno));
    }
    if (!S_ISSOCK(st.st_mode))
        restore_fail("cannot bind descriptor %d to %s again: something that is not a socket is there; move it away and "
                     "restart", prog_fd, shown(u->addr, u->addr_len, nm));
    struct sockaddr_un sa;
    socklen_t l = make_addr(&sa, u->addr, u->addr_len);
    int t = socket(AF_UNIX, sock_type(&u->q) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int r = t < 0 ? -1 : connect(t, (struct sockaddr *)&sa, l), e = errno;
    if (t >= 0) close(t);
    if (r == 0 || (e != ECONNREFUSED && e != ENOENT))
        restore_fail("cannot bind descriptor %d to %s again: another socket is bound there (%s); stop what uses it and "
                     "restart", prog_fd, path, r == 0 ? "it accepts connections" : strerror(e));
    if (unlink(path) < 0 && errno != ENOENT)
        restore_fail("cannot remove the old socket file %s of descriptor %d: %s", path, prog_fd, strerror(errno));
}

/* Binds s to u's name (path or abstract); 0, or -1 when an unlinked path
 * is taken by another file now (the socket is left unnamed). */
static void refill_by_name(const struct lz_usock *u, char *data, const char *from, const struct lz_image *img, int prog_fd);

static int bind_name(const struct lz_usock *u, int s, int prog_fd, char **data)
{
    char path[112], nm[120];
    struct sockaddr_un sa;
    socklen_t l = make_addr(&sa, u->addr, u->addr_len);
    int is_path = u->addr[0] != 0;
    if (is_path) {
        memcpy(path, u->addr, u->addr_len);
        path[u->addr_len] = 0;
        if (u->flags & LZ_US_UNLINKED) {
            struct stat st;
            if (lstat(path, &st) == 0) {
                lz_warn("descriptor %d: its socket file %s was removed, and that name is another file's now: the socket "
                        "comes back without a name", prog_fd, path);
                return -1;
            }
        } else {
            free_path(u, path, prog_fd);
        }
    }
    if (bind(s, (struct sockaddr *)&sa, l) < 0)
        restore_fail("cannot bind descriptor %d to %s again: %s%s", prog_fd, shown(u->addr, u->addr_len, nm), strerror(errno),
                     errno == EADDRINUSE ? " (another socket is bound to that name: stop what uses it and restart)" : "");
    if (!is_path) return 0;
    if (u->flags & LZ_US_UNLINKED) {
        refill_by_name(u, *data, NULL, NULL, prog_fd); /* while its name still leads to it */
        *data = NULL;
        unlink(path);
        return 0;
    }
    if (u->flags & LZ_US_MODE) {
        if (chmod(path, u->mode) < 0)
            restore_fail("cannot give the socket file %s of descriptor %d its mode: %s", path, prog_fd, strerror(errno));
        struct stat st;
        if (lstat(path, &st) == 0 && (st.st_uid != u->uid || st.st_gid != u->gid) &&
            fchownat(AT_FDCWD, path, u->uid, u->gid, AT_SYMLINK_NOFOLLOW) < 0)
            lz_warn("descriptor %d: the socket file %s keeps owner %u:%u (was %u:%u): %s", prog_fd, path, st.st_uid, st.st_gid,
                    u->uid, u->gid, strerror(errno));
    }
    return 0;
}

/* The socket of this process bound to `name` (that process's descriptor number), or -1. */
static int bound_to(const struct lz_image *img, const char *name, uint32_t len)
{
    for (size_t i = 0; img && len && i < img->nusocks; i++) {
        const struct lz_usock *o = &img->usocks[i];
        if (o->addr_len == len && !memcmp(o->addr, name, len) && !(o->flags & (LZ_US_ORPHAN | LZ_US_UNLINKED))) return o->fd;
    }
    return -1;
}

/* The datagrams queued on s, sent to its name one by one: from their
 * sender when it is a socket of this process (img, with every descriptor in
 * place), so the sender's name is there to reply to; else from a scratch
 * socket (unnamed). */
static void refill_by_name(const struct lz_usock *u, char *data, const char *from, const struct lz_image *img, int prog_fd)
{
    if (!data) return;
    int t = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (t < 0) restore_fail("cannot put back the datagrams queued on descriptor %d: %s", prog_fd, strerror(errno));
    restore_set_buf(t, SO_SNDBUF, SO_SNDBUFFORCE, (uint32_t)(2 * u->q.bytes + 1024ull * u->q.nmsgs + 65536));
    struct sockaddr_un sa;
    socklen_t l = make_addr(&sa, u->addr, u->addr_len);
    uint64_t at = 0;
    for (uint64_t off = 0; off < u->q.bytes;) {
        uint32_t len, fl = 0;
        memcpy(&len, data + off, 4);
        off += 4;
        int s = t;
        if (from) {
            memcpy(&fl, from + at, 4);
            int own = bound_to(img, from + at + 4, fl);
            if (own >= 0) s = own;
            at += 4 + fl;
        }
        ssize_t n;
        do n = sendto(s, data + off, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, l);
        while (n < 0 && errno == EINTR);
        if (n < 0 && s != t) /* its sender cannot send (shut, full): unnamed then */
            do n = sendto(t, data + off, len, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&sa, l);
            while (n < 0 && errno == EINTR);
        if (n != (ssize_t)len)
            restore_fail("cannot put back the %u datagrams queued on descriptor %d: %s", u->q.nmsgs, prog_fd,
                         n < 0 ? strerror(errno) : "short write");
        off += len;
    }
    close(t);
    free(data);
}

static void set_timeo(int s, int opt, int64_t us)
{
    if (!us) return;
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    setsockopt(s, SOL_SOCKET, opt, &tv, sizeof tv);
}

static void set_options(const struct lz_usock *u, int s)
{
    const struct lz_chan *c = &u->q;
    int one = 1;
    restore_set_buf(s, SO_SNDBUF, SO_SNDBUFFORCE, c->sndbuf);
    restore_set_buf(s, SO_RCVBUF, SO_RCVBUFFORCE, c->capacity);
    if (c->peek_off >= 0) setsockopt(s, SOL_SOCKET, SO_PEEK_OFF, &c->peek_off, sizeof c->peek_off);
    if (c->sockflags & LZ_CHS_PASSCRED) setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
    set_timeo(s, SO_RCVTIMEO, u->rcvtimeo_us);
    set_timeo(s, SO_SNDTIMEO, u->sndtimeo_us);
    if (!(u->flags & LZ_US_ORPHAN)) { /* (an orphan's sides are shut by its peer's close) */
        if (c->shutdown & 1) shutdown(s, SHUT_RD);
        if (c->shutdown & 2) shutdown(s, SHUT_WR);
    }
}

/* A socket whose peer is gone: one end of a pair whose other end is closed
 * once it has put the queue back. */
static int make_orphan(const struct lz_usock *u, char *data, int prog_fd)
{
    int sv[2];
    if (socketpair(AF_UNIX, sock_type(&u->q) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        restore_fail("cannot make the socket of descriptor %d again: %s", prog_fd, strerror(errno));
    restore_refill_socket(&u->q, data, &u->q, sv[1], prog_fd);
    close(sv[1]);
    return sv[0];
}

/* Datagram queues refilled once every descriptor is in place (their senders may be among them). */
static int deferred[256];
static int ndeferred;

int restore_usock_make(const struct lz_usock *u, void *data, const char *cwd)
{
    int s;
    if (u->flags & LZ_US_ORPHAN) {
        s = make_orphan(u, data, u->fd); /* (a connection comes back without a name) */
    } else {
        s = socket(AF_UNIX, sock_type(&u->q) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) restore_fail("cannot make the socket of descriptor %d again: %s", u->fd, strerror(errno));
        int back = u->addr_len ? enter_cwd(cwd) : -1;
        int named = u->addr_len && bind_name(u, s, u->fd, (char **)&data) == 0;
        if ((u->flags & LZ_US_LISTEN) && listen(s, (int)u->backlog) < 0)
            restore_fail("descriptor %d cannot listen again: %s", u->fd, strerror(errno));
        if (data && (!named || u->q.kind != LZ_CH_DGRAM))
            restore_fail("descriptor %d holds data that only a named datagram socket can", u->fd);
        refill_by_name(u, data, NULL, NULL, u->fd);
        leave_cwd(back);
    }
    set_options(u, s);
    return s;
}

int restore_usock_open(struct restore_ctx *rc, const struct lz_fd *f)
{
    const struct lz_usock *u = lz_usock_of(&rc->img, f->fd);
    if (!u) restore_fail("descriptor %d has no local socket record in the image", f->fd);
    char why[LZ_PATH_MAX + 512];
    void *data;
    if (lz_chan_data(rc->ckpt_dir, &rc->img, &u->q, &data, why, sizeof why) < 0)
        restore_fail("checkpoint %llu is damaged: %s", (unsigned long long)rc->index, why);
    if (data && u->q.kind == LZ_CH_DGRAM && !(u->flags & (LZ_US_ORPHAN | LZ_US_UNLINKED)) && ndeferred < (int)(sizeof deferred / sizeof *deferred)) {
        free(data); /* read again, with its senders, by restore_usocks_finish */
        data = NULL;
        deferred[ndeferred++] = u->fd;
    }
    int s = restore_usock_make(u, data, lz_str(&rc->img, rc->img.proc->cwd));
    restore_set_flags(s, f->flags, f->fd);
    return s;
}

void restore_usocks_finish(struct restore_ctx *rc)
{
    const struct lz_image *img = &rc->img;
    int back = -1;
    for (int k = 0; k < ndeferred; k++) { /* before the clients connect: their sends go to the server's name */
        const struct lz_usock *u = lz_usock_of(img, deferred[k]);
        char why[LZ_PATH_MAX + 512];
        void *data, *from;
        if (lz_chan_data(rc->ckpt_dir, img, &u->q, &data, why, sizeof why) < 0 ||
            lz_usock_senders(rc->ckpt_dir, img, u, &from, why, sizeof why) < 0)
            restore_fail("checkpoint %llu is damaged: %s", (unsigned long long)rc->index, why);
        if (back < 0) back = enter_cwd(lz_str(img, img->proc->cwd));
        refill_by_name(u, data, from, img, u->fd);
        free(from);
    }
    ndeferred = 0;
    for (size_t i = 0; i < img->nusocks; i++) {
        const struct lz_usock *u = &img->usocks[i];
        if (!(u->flags & LZ_US_CONNECT)) continue;
        if (back < 0) back = enter_cwd(lz_str(img, img->proc->cwd));
        struct sockaddr_un sa;
        socklen_t l = make_addr(&sa, u->peer_addr, u->peer_len);
        uint64_t t0 = now_ns();
        int r, e;
        /* a peer of the job may be another restorer's, made a moment later */
        while ((r = connect(u->fd, (struct sockaddr *)&sa, l)) < 0 && ((e = errno) == ENOENT || e == ECONNREFUSED || e == EINTR) &&
               now_ns() - t0 < 10000000000ull) {
            struct timespec ms = {0, 2000000};
            nanosleep(&ms, NULL);
        }
        if (r < 0) {
            char nm[120];
            e = errno;
            if (e != ENOENT && e != ECONNREFUSED)
                restore_fail("cannot connect descriptor %d to %s again: %s", u->fd, shown(u->peer_addr, u->peer_len, nm), strerror(e));
            /* nobody is bound there: as natively once its peer went away, sends are refused */
            lz_warn("descriptor %d: nothing is bound to %s any more; the socket comes back connected to a closed peer",
                    u->fd, shown(u->peer_addr, u->peer_len, nm));
            int fl = fcntl(u->fd, F_GETFL), fdfl = fcntl(u->fd, F_GETFD);
            int s = make_orphan(u, NULL, u->fd);
            set_options(u, s);
            if (dup3(s, u->fd, (fdfl & FD_CLOEXEC) ? O_CLOEXEC : 0) < 0 || fcntl(u->fd, F_SETFL, fl) < 0)
                restore_fail("cannot restore descriptor %d: %s", u->fd, strerror(errno));
            close(s);
        }
    }
    leave_cwd(back);
}
