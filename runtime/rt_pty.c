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
 * pending input first, so nothing still on its way is missed). */
static long drain(long fd, char *buf, size_t cap)
{
    size_t got = 0;
    for (;;) {
        if (got == cap) return -ENOSPC;
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

    /* a terminal end of our own, through which its queue is read */
    int zero = 0, one = 1;
    if (lck) lz_sc3(SYS_ioctl, mfd, TIOCSPTLCK, &zero);
    long peer = lz_sc3(SYS_ioctl, mfd, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (lck) lz_sc3(SYS_ioctl, mfd, TIOCSPTLCK, &one);
    if (peer < 0) return fail(ck, m, "cannot open its terminal end", peer);
    long mflags = lz_sc2(SYS_fcntl, mfd, F_GETFL);
    int rc = -1;
    char *to_slave = data + *used, *to_master;
    long n;
    r = t;
    r.lflag &= ~(tcflag_t)(ICANON | ECHO | ECHONL | ISIG | IEXTEN);
    r.cc[VMIN] = 0; r.cc[VTIME] = 0;
    if ((e = lz_sc3(SYS_ioctl, mfd, K_TCSETS2, &r)) < 0) { fail(ck, m, "cannot set it raw", e); goto out; }
    if ((n = drain(peer, to_slave, PTY_BUF)) < 0 || n > LZ_PTY_MAX_BYTES) {
        rt_fmt(ck->err, sizeof ck->err, "descriptor %d (pseudo-terminal %llu): more than %u bytes are queued for its "
               "terminal end", m->fd, (unsigned long long)m->ino, LZ_PTY_MAX_BYTES);
        goto out;
    }
    p->to_slave = (uint32_t)n;
    to_master = to_slave + n;
    if (pkt) lz_sc3(SYS_ioctl, mfd, TIOCPKT, &zero);
    lz_sc3(SYS_fcntl, mfd, F_SETFL, mflags | O_NONBLOCK);
    n = drain(mfd, to_master, PTY_BUF);
    if (n < 0 || n > LZ_PTY_MAX_BYTES) {
        rt_fmt(ck->err, sizeof ck->err, "descriptor %d (pseudo-terminal %llu): more than %u bytes are queued for its "
               "master", m->fd, (unsigned long long)m->ino, LZ_PTY_MAX_BYTES);
        n = 0; /* nothing to write back but what was read */
    }
    p->to_master = (uint32_t)n;
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
