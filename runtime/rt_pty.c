/* Pseudo-terminals the job made (/dev/ptmx and its /dev/pts/N), recorded in
 * the pause by the process that holds the master: the terminal's termios
 * (its settings live on the terminal end; the master's ioctls reach them),
 * window size, packet mode and lock, and the bytes queued each way.
 *
 * A tty queue cannot be peeked: it is drained and written back at once, the
 * program goes on after the checkpoint.  The terminal end's queue (what the
 * master wrote, already through the line discipline) is read with ICANON off
 * (every byte becomes readable) through a descriptor of our own
 * (TIOCGPTPEER), and written back through the master with the settings the
 * restorer uses too (restore_pty_settings_for_refill: ICANON as it was, so
 * partial lines stay partial, no echo, no signals, no input translation,
 * every special character off); the master's queue (the terminal end's
 * output, already through OPOST) is read through the master with packet mode
 * off and written back through our terminal descriptor with OPOST off.  Then
 * the termios, packet mode and lock are put back.
 *
 * A terminal end whose master another process holds is said to the
 * supervisor (PEER), which fails the checkpoint unless exactly one process
 * of the job holds that master (cli/job_ptys.c). */
#include "rt.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>

/* The kernel's struct termios2 (asm/termbits.h clashes with glibc's termios.h). */
struct k_termios2 {
    uint32_t iflag, oflag, cflag, lflag;
    uint8_t line, cc[19];
    uint32_t ispeed, ospeed;
};
#define K_TCGETS2 _IOR('T', 0x2A, struct k_termios2)
#define K_TCSETS2 _IOW('T', 0x2B, struct k_termios2)
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif
#define PTY_SLAVE_MAJOR 136
#define PTY_BUF (LZ_PTY_MAX_BYTES + 4096)

int rt_pty_kind(const char *path, unsigned long rdev, uint64_t *index, uint64_t *master, int fd)
{
    if (major(rdev) == 5 && minor(rdev) == 2) { /* /dev/ptmx */
        uint32_t n = 0;
        if (lz_sc3(SYS_ioctl, fd, TIOCGPTN, &n) < 0) return 0;
        *index = n;
        *master = 1;
        return 1;
    }
    if (major(rdev) == PTY_SLAVE_MAJOR && !strncmp(path, "/dev/pts/", 9)) {
        *index = minor(rdev);
        *master = 0;
        return 1;
    }
    return 0;
}

/* ICANON as it was; nothing echoed, translated or special. */
static void refill_settings(const struct k_termios2 *t, struct k_termios2 *r)
{
    *r = *t;
    r->iflag = 0;
    r->oflag = 0;
    r->lflag &= ICANON;
    memset(r->cc, 0, sizeof r->cc); /* _POSIX_VDISABLE */
    r->cc[VMIN] = 1;
}

/* Every byte a non-blocking read gives (an empty read flushes the queue's
 * pending input first, so nothing still on its way is missed), up to cap:
 * a queue is at most the line discipline's 4 KiB and the pty's 64 KiB of
 * pending input, far below it. */
static long drain(long fd, char *buf, size_t cap)
{
    size_t got = 0;
    for (;;) {
        if (got == cap) return (long)got;
        long n = lz_sc3(SYS_read, fd, buf + got, cap - got);
        if (n == -EINTR) continue;
        if (n == -EAGAIN || n == -EIO || n == 0) return (long)got; /* EIO: the other side is closed */
        if (n < 0) return n;
        got += (size_t)n;
    }
}

static long write_all(long fd, const char *p, size_t len)
{
    while (len) {
        long n = lz_sc3(SYS_write, fd, p, len);
        if (n == -EINTR) continue;
        if (n <= 0) return n ? n : -EIO;
        p += n; len -= (size_t)n;
    }
    return 0;
}

/* Wait until the line discipline of terminal end `peer` took `len` bytes
 * written into the master (the pty's queue is worked asynchronously): in
 * canonical mode it counts complete lines only, and a poll with nothing
 * complete to read works the pending input at once. */
void rt_pty_settle(long peer, const char *data, size_t len, int canon)
{
    size_t want = len;
    if (canon) while (want && data[want - 1] != '\n') want--;
    for (int i = 0; i < 2000; i++) {
        int n = 0;
        if (lz_sc3(SYS_ioctl, peer, FIONREAD, &n) < 0 || (size_t)n >= want) break;
        struct timespec ms = {0, 500000};
        lz_sc2(SYS_nanosleep, &ms, NULL);
    }
    struct { int fd; short events, revents; } p = {(int)peer, 1 /* POLLIN */, 0};
    struct timespec zero = {0, 0};
    if (want < len) lz_sc5(SYS_ppoll, &p, 1, &zero, NULL, 8);
}

/* The master's terminal end was opened and every opener closed it (a
 * master read says EIO, poll POLLHUP): opening and closing one more end
 * changes nothing visible.  Before it was ever opened it would. */
static int master_hup(long mfd)
{
    struct { int fd; short events, revents; } p = {(int)mfd, 1 /* POLLIN */, 0};
    struct timespec zero = {0, 0};
    return lz_sc5(SYS_ppoll, &p, 1, &zero, NULL, 8) > 0 && (p.revents & 0x10 /* POLLHUP */);
}

/* Does a descendant of this process hold /dev/pts/index (the child of a
 * script-like parent)?  Read while the job is stopped; at most 256 of them. */
static int descendant_holds(struct rt_ckpt *ck, uint64_t index)
{
    enum { MAXP = 256 };
    int *q = arena_alloc(&ck->arena, MAXP * sizeof *q);
    char *buf = arena_alloc(&ck->arena, 8192);
    if (!q || !buf) return 1; /* unknown: taken as held */
    char want[48], path[96], link[64];
    rt_fmt(want, sizeof want, "/dev/pts/%llu", (unsigned long long)index);
    /* PIDs as /proc shows them (a restarted job's PID namespace has the host's /proc):
     * the children of each of our threads, through /proc/self */
    int n = 0, found = 0;
    long td = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    char *tb = arena_alloc(&ck->arena, 8192);
    for (long got; td >= 0 && tb && (got = lz_sc3(SYS_getdents64, td, tb, 8192)) > 0;)
        for (long off = 0; off < got;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *e = (void *)(tb + off);
            off += e->reclen;
            if (e->name[0] < '0' || e->name[0] > '9') continue;
            rt_fmt(path, sizeof path, "/proc/self/task/%s/children", e->name);
            long l = rt_read_file(path, buf, 8191);
            buf[l > 0 ? l : 0] = 0;
            for (char *c = buf; *c && n < MAXP;) {
                int v = 0;
                while (*c == ' ') c++;
                if (*c < '0' || *c > '9') break;
                while (*c >= '0' && *c <= '9') v = v * 10 + (*c++ - '0');
                q[n++] = v;
            }
        }
    if (td >= 0) lz_sc1(SYS_close, td);
    for (int k = 0; k < n && !found; k++) {
        { /* its descriptors */
            rt_fmt(path, sizeof path, "/proc/%d/fd", q[k]);
            long d = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
            for (long got; d >= 0 && !found && (got = lz_sc3(SYS_getdents64, d, buf, 8192)) > 0;)
                for (long off = 0; off < got && !found;) {
                    struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *e = (void *)(buf + off);
                    off += e->reclen;
                    long l = lz_sc4(SYS_readlinkat, d, e->name, link, sizeof link - 1);
                    if (l > 0) { link[l] = 0; found = !strcmp(link, want); }
                }
            if (d >= 0) lz_sc1(SYS_close, d);
        }
        rt_fmt(path, sizeof path, "/proc/%d/task/%d/children", q[k], q[k]);
        long l = rt_read_file(path, buf, 8191);
        if (l < 0) continue;
        buf[l] = 0;
        for (char *c = buf; *c && n < MAXP;) {
            int v = 0;
            while (*c == ' ') c++;
            if (*c < '0' || *c > '9') break;
            while (*c >= '0' && *c <= '9') v = v * 10 + (*c++ - '0');
            q[n++] = v;
        }
    }
    return found;
}

static int fail(struct rt_ckpt *ck, const struct lz_fd *f, const char *what, long err)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (pseudo-terminal %llu): %s (errno %ld)", f->fd,
           (unsigned long long)f->ino, what, -err);
    return -1;
}

/* One pty whose master is descriptor m->fd: its record, and its queues
 * drained into `data` (at *used) and written back. */
static int capture_one(struct rt_ckpt *ck, const struct lz_fd *m, struct lz_pty *p, char *data, size_t *used)
{
    int here = 0;
    for (size_t i = 0; i < ck->nfds && !here; i++) here = ck->fds[i].kind == LZ_FD_PTY && !ck->fds[i].size && ck->fds[i].ino == m->ino;
    /* never opened yet (a script-like parent before its child opened it): not opened by us either */
    int unopened = !here && !master_hup(m->fd) && !descendant_holds(ck, m->ino);
    long mfd = m->fd, e;
    struct k_termios2 t, r;
    memset(p, 0, sizeof *p);
    p->index = (uint32_t)m->ino;
    if ((e = lz_sc3(SYS_ioctl, mfd, K_TCGETS2, &t)) < 0) return fail(ck, m, "cannot read its settings", e);
    struct winsize ws = {0, 0, 0, 0};
    lz_sc3(SYS_ioctl, mfd, TIOCGWINSZ, &ws);
    int pkt = 0, lck = 0;
    lz_sc3(SYS_ioctl, mfd, TIOCGPKT, &pkt);
    lz_sc3(SYS_ioctl, mfd, TIOCGPTLCK, &lck);
    p->flags = (pkt ? LZ_PTYF_PACKET : 0) | (lck ? LZ_PTYF_LOCKED : 0);
    p->iflag = t.iflag; p->oflag = t.oflag; p->cflag = t.cflag; p->lflag = t.lflag;
    p->line = t.line;
    memcpy(p->cc, t.cc, sizeof p->cc);
    p->ispeed = t.ispeed; p->ospeed = t.ospeed;
    p->rows = ws.ws_row; p->cols = ws.ws_col; p->xpixel = ws.ws_xpixel; p->ypixel = ws.ws_ypixel;
    int v = 0;
    if (lz_sc3(SYS_ioctl, mfd, TIOCGSID, &v) == 0) p->sid = v;
    if (p->sid && lz_sc3(SYS_ioctl, mfd, TIOCGPGRP, &v) == 0) p->fg_pgrp = v;
    p->data = *used;
    if (unopened) { p->flags |= LZ_PTYF_UNOPENED; return 0; }

    /* a terminal end of our own, through which its queue is read; one
     * holder of the master at a time (a second is refused by the supervisor,
     * but its drain must not interleave with the first's) */
    long lock = rt_obj_lock("pty", m->ino);
    if (lock == -2) return fail(ck, m, "another process kept it to itself for 10 s", -EBUSY);
    int zero = 0, one = 1;
    if (lck) lz_sc3(SYS_ioctl, mfd, TIOCSPTLCK, &zero);
    long peer = lz_sc3(SYS_ioctl, mfd, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (lck) lz_sc3(SYS_ioctl, mfd, TIOCSPTLCK, &one);
    if (peer < 0) {
        rt_obj_unlock(lock);
        return fail(ck, m, "cannot open its terminal end", peer);
    }
    long mflags = lz_sc2(SYS_fcntl, mfd, F_GETFL);
    int rc = -1;
    char *to_slave = data + *used, *to_master;
    long n;
    r = t;
    r.lflag &= ~(tcflag_t)(ICANON | ECHO | ECHONL | ISIG | IEXTEN);
    r.cc[VMIN] = 0; r.cc[VTIME] = 0;
    if ((e = lz_sc3(SYS_ioctl, mfd, K_TCSETS2, &r)) < 0) { fail(ck, m, "cannot set it raw", e); goto out; }
    if ((n = drain(peer, to_slave, PTY_BUF)) < 0) { fail(ck, m, "cannot read its terminal end's queue", n); goto out; }
    p->to_slave = (uint32_t)n;
    to_master = to_slave + n;
    if (pkt) lz_sc3(SYS_ioctl, mfd, TIOCPKT, &zero);
    lz_sc3(SYS_fcntl, mfd, F_SETFL, mflags | O_NONBLOCK);
    n = drain(mfd, to_master, PTY_BUF);
    if (n < 0) { fail(ck, m, "cannot read its master's queue", n); n = 0; }
    p->to_master = (uint32_t)n;
    if (p->to_slave > LZ_PTY_MAX_BYTES || p->to_master > LZ_PTY_MAX_BYTES) /* (what was read goes back all the same) */
        rt_fmt(ck->err, sizeof ck->err, "descriptor %d (pseudo-terminal %llu): more than %u bytes are queued in it",
               m->fd, (unsigned long long)m->ino, LZ_PTY_MAX_BYTES);
    /* back where they were, for the program goes on */
    refill_settings(&t, &r);
    lz_sc3(SYS_ioctl, mfd, K_TCSETS2, &r);
    if (p->to_slave) {
        write_all(mfd, to_slave, p->to_slave);
        rt_pty_settle(peer, to_slave, p->to_slave, (t.lflag & ICANON) != 0);
    }
    if (n) write_all(peer, to_master, (size_t)n);
    lz_sc3(SYS_ioctl, mfd, K_TCSETS2, &t);
    lz_sc3(SYS_fcntl, mfd, F_SETFL, mflags);
    if (pkt) lz_sc3(SYS_ioctl, mfd, TIOCPKT, &one);
    if (ck->err[0] == 0) { *used += p->to_slave + p->to_master; rc = 0; }
out:
    if (rc < 0) lz_sc3(SYS_ioctl, mfd, K_TCSETS2, &t);
    lz_sc1(SYS_close, peer);
    rt_obj_unlock(lock);
    return rc;
}

int rt_capture_ptys(struct rt_ckpt *ck)
{
    size_t nm = 0;
    ck->nptys = 0;
    /* the supervisor checks, while all are stopped, that exactly one process
     * of the job holds each pty's master */
    for (size_t i = 0; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_PTY || f->dup_of >= 0) continue;
        int here = f->size == 1;
        for (size_t j = 0; j < ck->nfds && !here; j++)
            here = ck->fds[j].kind == LZ_FD_PTY && ck->fds[j].size == 1 && ck->fds[j].ino == f->ino;
        nm += f->size == 1;
        if (f->size == 1 || !here)
            rt_notify("PEER %llu %d %llu", (unsigned long long)ck->index, f->fd,
                      (unsigned long long)(LZ_PTY_PEER | (f->size == 1 ? LZ_PTY_PEER_MASTER : 0) | f->ino));
    }
    /* the launcher's terminal, if it is this process's controlling terminal: its foreground group */
    int fg = 0, sid = 0;
    for (size_t i = 0; i < ck->nfds && !fg; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_STDIO || !S_ISCHR(f->mode) || lz_sc3(SYS_ioctl, f->fd, TIOCGPGRP, &fg) < 0) fg = 0;
        else if (lz_sc3(SYS_ioctl, f->fd, TIOCGSID, &sid) < 0) sid = 0;
    }
    if (!nm && !fg) return 0;
    ck->ptys = arena_alloc(&ck->arena, (nm + 1) * sizeof *ck->ptys);
    ck->pty_data = arena_alloc(&ck->arena, nm * 2 * (size_t)PTY_BUF + 8);
    if (!ck->ptys || !ck->pty_data) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    size_t used = 0;
    for (size_t i = 0; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_PTY || f->size != 1 || f->dup_of >= 0) continue;
        if (capture_one(ck, f, &ck->ptys[ck->nptys], ck->pty_data, &used) < 0) return -1;
        ck->nptys++;
    }
    if (fg > 0) {
        memset(&ck->ptys[ck->nptys], 0, sizeof ck->ptys[0]);
        ck->ptys[ck->nptys].flags = LZ_PTYF_LAUNCHER;
        ck->ptys[ck->nptys].fg_pgrp = fg;
        ck->ptys[ck->nptys++].sid = sid > 0 ? sid : 0;
    }
    ck->pty_bytes = used;
    return 0;
}
