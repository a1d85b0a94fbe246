/* Pseudo-terminals made anew (format.h, lz_pty; runtime/rt_pty.c records
 * them): a new master from /dev/ptmx -- its /dev/pts/M may differ from the
 * checkpoint's N, and ptsname() gives the new one --, the window size, the
 * queued bytes written back as the checkpoint wrote them back (the terminal
 * end's through the master with ICANON as it was and nothing echoed,
 * translated or special; the master's through the terminal end with OPOST
 * off), then the termios, packet mode and lock.  Every descriptor record
 * takes the master, or a terminal end opened through it (TIOCGPTPEER, one
 * open file per record, as the program opened it). */
#include "restorer.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

struct k_termios2 {
    uint32_t iflag, oflag, cflag, lflag;
    uint8_t line, cc[19];
    uint32_t ispeed, ospeed;
};
#define K_TCSETS2 _IOW('T', 0x2B, struct k_termios2)
#ifndef TIOCGPTPEER
#define TIOCGPTPEER _IO('T', 0x41)
#endif

static void write_all(int fd, const char *p, size_t len, const struct lz_pty *t, const char *side)
{
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
            restore_fail("cannot write back the bytes queued for the %s of pseudo-terminal %u: %s", side, t->index,
                         strerror(n < 0 ? errno : EIO));
        p += n;
        len -= (size_t)n;
    }
}

/* Until the terminal end's line discipline took what the master wrote (its
 * queue is worked asynchronously; see rt_pty_settle in the runtime). */
static void settle(int peer, const char *data, size_t len, int canon)
{
    size_t want = len;
    if (canon) while (want && data[want - 1] != '\n') want--;
    for (int i = 0; i < 2000; i++) {
        int n = 0;
        if (ioctl(peer, FIONREAD, &n) < 0 || (size_t)n >= want) break;
        struct timespec ms = {0, 500000};
        nanosleep(&ms, NULL);
    }
    struct pollfd p = {peer, POLLIN, 0};
    if (want < len) poll(&p, 1, 0);
}

static int peer_of(int m, uint32_t flags, const struct lz_pty *t, int fd)
{
    int p = ioctl(m, TIOCGPTPEER, (int)(flags & (O_ACCMODE | O_NONBLOCK)) | O_NOCTTY | O_CLOEXEC);
    if (p < 0) restore_fail("cannot open the terminal end of pseudo-terminal %u for descriptor %d: %s", t->index, fd, strerror(errno));
    return p;
}

/* Pseudo-terminal t made anew: its master (close-on-exec). */
static int make_pty(const struct lz_image *img, const struct lz_pty *t)
{
    int m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    int zero = 0, one = 1;
    if (m < 0 || ioctl(m, TIOCSPTLCK, &zero) < 0)
        restore_fail("cannot make pseudo-terminal %u again: %s", t->index, strerror(errno));
    if (t->flags & LZ_PTYF_UNOPENED) { /* its terminal end stays unopened: a master read blocks, not EIO */
        struct winsize ws = {t->rows, t->cols, t->xpixel, t->ypixel};
        struct k_termios2 k = {t->iflag, t->oflag, t->cflag, t->lflag, t->line, {0}, t->ispeed, t->ospeed};
        memcpy(k.cc, t->cc, sizeof k.cc);
        if (ioctl(m, TIOCSWINSZ, &ws) < 0 || ioctl(m, K_TCSETS2, &k) < 0 || ((t->flags & LZ_PTYF_PACKET) && ioctl(m, TIOCPKT, &one) < 0))
            restore_fail("cannot set pseudo-terminal %u up: %s", t->index, strerror(errno));
        return m;
    }
    int peer = peer_of(m, O_RDWR, t, -1);
    struct winsize ws = {t->rows, t->cols, t->xpixel, t->ypixel};
    struct k_termios2 k = {t->iflag, t->oflag, t->cflag, t->lflag, t->line, {0}, t->ispeed, t->ospeed}, r;
    memcpy(k.cc, t->cc, sizeof k.cc);
    r = k;
    r.iflag = 0;
    r.oflag = 0;
    r.lflag &= ICANON;
    memset(r.cc, 0, sizeof r.cc);
    r.cc[VMIN] = 1;
    if (ioctl(m, TIOCSWINSZ, &ws) < 0 || ioctl(m, K_TCSETS2, &r) < 0)
        restore_fail("cannot set pseudo-terminal %u up: %s", t->index, strerror(errno));
    const char *to_slave = img->pty_data + t->data, *to_master = to_slave + t->to_slave;
    if (t->to_slave) {
        write_all(m, to_slave, t->to_slave, t, "terminal end");
        settle(peer, to_slave, t->to_slave, (t->lflag & ICANON) != 0);
    }
    if (t->to_master) write_all(peer, to_master, t->to_master, t, "master");
    if (ioctl(m, K_TCSETS2, &k) < 0) restore_fail("cannot restore the settings of pseudo-terminal %u: %s", t->index, strerror(errno));
    if ((t->flags & LZ_PTYF_PACKET) && ioctl(m, TIOCPKT, &one) < 0)
        restore_fail("cannot put pseudo-terminal %u in packet mode: %s", t->index, strerror(errno));
    close(peer);
    return m;
}

int restore_pty_end(int master, const struct lz_fd *f, int base)
{
    struct lz_pty t = {.index = (uint32_t)f->ino};
    int fd = f->size == 1 ? fcntl(master, F_DUPFD_CLOEXEC, base) : peer_of(master, f->flags, &t, f->fd);
    if (fd < 0) restore_fail("cannot place descriptor %d: %s", f->fd, strerror(errno));
    if (fd < base) { /* a new terminal end: parked with the others */
        int up = fcntl(fd, F_DUPFD_CLOEXEC, base);
        if (up < 0) restore_fail("cannot place descriptor %d: %s", f->fd, strerror(errno));
        close(fd);
        fd = up;
    }
    if (f->size == 1) restore_set_flags(fd, f->flags, f->fd);
    return fd;
}

static void lock_again(int m, const struct lz_pty *t)
{
    int one = 1;
    if ((t->flags & LZ_PTYF_LOCKED) && ioctl(m, TIOCSPTLCK, &one) < 0)
        restore_fail("cannot lock pseudo-terminal %u again: %s", t->index, strerror(errno));
}

int restore_pty_object(const char *part_dir, uint32_t index)
{
    struct lz_image img;
    char why[1024];
    if (lz_manifest_load(part_dir, &img, why, sizeof why) < 0) restore_fail("%s", why);
    const struct lz_pty *t = NULL;
    for (size_t j = 0; j < img.nptys && !t; j++)
        if (img.ptys[j].index == index && !(img.ptys[j].flags & LZ_PTYF_LAUNCHER)) t = &img.ptys[j];
    if (!t) restore_fail("pseudo-terminal %u is not in %s", index, part_dir);
    int m = make_pty(&img, t);
    lock_again(m, t);
    lz_image_free(&img);
    return m;
}

int *restore_ptys(struct restore_ctx *rc, int base)
{
    const struct lz_image *img = &rc->img;
    int *src = malloc((img->nfds + 1) * sizeof *src);
    if (!src) restore_fail("out of memory");
    for (size_t i = 0; i < img->nfds; i++) src[i] = -1;
    for (size_t j = 0; j < img->nptys; j++) {
        const struct lz_pty *t = &img->ptys[j];
        if ((t->flags & LZ_PTYF_LAUNCHER) || restore_tree_shared_pty(t->index)) continue; /* the restarter's; made for several processes (restore_tree.c) */
        int m = make_pty(img, t);
        for (size_t i = 0; i < img->nfds; i++)
            if (img->fds[i].kind == LZ_FD_PTY && img->fds[i].ino == t->index) src[i] = restore_pty_end(m, &img->fds[i], base);
        lock_again(m, t);
        close(m);
    }
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].kind == LZ_FD_PTY && src[i] < 0 && !restore_tree_shared_pty(img->fds[i].ino))
            restore_fail("descriptor %d is the terminal end of pseudo-terminal %llu, whose master is not in the checkpoint",
                         img->fds[i].fd, (unsigned long long)img->fds[i].ino);
    return src;
}

void restore_pty_foreground(const struct lz_image *img)
{
    for (size_t j = 0; j < img->nptys; j++) {
        const struct lz_pty *t = &img->ptys[j];
        if (!(t->flags & LZ_PTYF_LAUNCHER) || !t->fg_pgrp || t->fg_pgrp != getpgrp()) continue;
        for (size_t i = 0; i < img->nfds; i++) /* signals are blocked here: no SIGTTOU */
            if (img->fds[i].kind == LZ_FD_STDIO && isatty(img->fds[i].fd) && tcsetpgrp(img->fds[i].fd, getpgrp()) == 0) break;
    }
}
