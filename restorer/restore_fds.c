/* Descriptors at their old numbers: files and directories reopened by path
 * at their offsets, the launcher's (0/1/2 terminals, pipes and files...)
 * taken from `lazarus restart`,
 * pipes and socket pairs the program made rebuilt with their data
 * (restore_pipes.c), TCP and UDP sockets bound, listening and connected
 * again (restore_inet.c), event-loop objects made anew with their state, epolls
 * re-filled last (restore_events.c), pseudo-terminals made anew with their
 * settings and queues (restore_pty.c), shared descriptions re-shared with dup,
 * the control socket re-attached. */
#include "restorer.h"
#include "hash.h"
#include "util.h"
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <errno.h>
#include <mqueue.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The highest descriptor number the program used (at least 2). */
int image_max_fd(const struct lz_image *img)
{
    int maxfd = 2;
    for (size_t i = 0; i < img->nfds; i++) if (img->fds[i].fd > maxfd) maxfd = img->fds[i].fd;
    return maxfd;
}

/* The launcher's descriptor a LZ_FD_STDIO record takes the restarter's of. */
static int launcher_fd(const struct lz_fd *f)
{
    return f->launcher ? (int)f->launcher - 1 : f->fd;
}

void restore_descriptors(struct restore_ctx *rc)
{
    const struct lz_image *img = &rc->img;
    int maxfd = image_max_fd(img);
    /* park what we hold above every number the program uses */
    int base = maxfd + 16;
    /* what `lazarus restart` hands us for descriptors taken from the launcher,
     * by the launcher's number (the program may hold its stdout at another) */
    int *stdio = calloc((size_t)maxfd + 1, sizeof *stdio);
    if (!stdio) restore_fail("out of memory");
    for (int i = 0; i <= maxfd; i++) stdio[i] = -1;
    for (size_t i = 0; i < img->nfds; i++) {
        int from = launcher_fd(&img->fds[i]);
        if (img->fds[i].kind == LZ_FD_STDIO && stdio[from] < 0) stdio[from] = fcntl(from, F_DUPFD_CLOEXEC, base);
    }
    int ctl = fcntl(rc->ctl_fd, F_DUPFD_CLOEXEC, base);
    if (ctl < 0) restore_fail("lost the control socket: %s", strerror(errno));
    if (rc->ctl_fd != ctl) close(rc->ctl_fd);
    restore_report_fd = ctl;
    int *chan = restore_chans(rc, base);
    int *inet = restore_inet(rc, base);
    int *shared = restore_tree_fds(img, base); /* made once for the job (restore_tree.c) */
    int *pty = restore_ptys(rc, base);
    restore_ghosts_seed(img, shared, base);
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < img->nfds; i++) {
            const struct lz_fd *f = &img->fds[i];
            int cloexec = (f->fdflags & FD_CLOEXEC) ? O_CLOEXEC : 0;
            int is_dup = f->kind == LZ_FD_DUP;
            if (pass != is_dup) continue;
            int src = -1, opened = 0;
            const char *path = lz_str(img, f->path);
            if (shared[i] >= 0) {
                src = shared[i];
                opened = 1;
            } else switch (f->kind) {
            case LZ_FD_FILE:
            case LZ_FD_DIR:
            case LZ_FD_DEV:
                src = open(path, (int)(f->flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC)) | O_CLOEXEC);
                if (src < 0) restore_fail("cannot reopen descriptor %d (%s): %s", f->fd, path, strerror(errno));
                opened = 1;
                break;
            case LZ_FD_STDIO:
                src = stdio[launcher_fd(f)];
                if (src < 0) { src = open("/dev/null", O_RDWR | O_CLOEXEC); opened = 1; }
                break;
            case LZ_FD_GHOST:
                src = restore_ghost_open(rc, f, path);
                opened = 1;
                break;
            case LZ_FD_PIPE:
            case LZ_FD_FIFO:
            case LZ_FD_SOCKET:
                src = chan[i];
                opened = 1;
                break;
            case LZ_FD_PTY:
                src = pty[i];
                opened = 1;
                break;
            case LZ_FD_USOCK:
                src = restore_usock_open(rc, f);
                opened = 1;
                break;
            case LZ_FD_INET:
                src = inet[i];
                opened = 1;
                break;
            case LZ_FD_EVENT:
                src = restore_event_open(img, f);
                opened = 1;
                break;
            case LZ_FD_MQUEUE:
                /* the queue is `lazarus restart`'s (cli/restart_ipc.c): its descriptor only */
                src = mq_open(path, (int)(f->flags & (O_ACCMODE | O_NONBLOCK)) | O_CLOEXEC);
                if (src < 0) restore_fail("cannot reopen descriptor %d (POSIX message queue %s): %s", f->fd, path, strerror(errno));
                opened = 1;
                break;
            case LZ_FD_DUP: src = f->dup_of; break;
            case LZ_FD_CTL: src = ctl; break;
            default: restore_fail("descriptor %d has an unknown kind in the image", f->fd);
            }
            if (src != f->fd && dup3(src, f->fd, cloexec) < 0)
                restore_fail("cannot restore descriptor %d: %s", f->fd, strerror(errno));
            if (src == f->fd) fcntl(f->fd, F_SETFD, cloexec ? FD_CLOEXEC : 0);
            if (f->kind == LZ_FD_CTL) restore_report_fd = f->fd;
            if (opened && src != f->fd) close(src);
            if ((f->kind == LZ_FD_FILE || f->kind == LZ_FD_GHOST) && lseek(f->fd, f->offset, SEEK_SET) < 0)
                restore_fail("cannot restore the offset of descriptor %d (%s): %s", f->fd, path, strerror(errno));
        }
    free(chan);
    free(inet);
    free(shared);
    free(pty);
    restore_ghosts_done();
    restore_events_finish(img); /* epoll watches and timers, now that every descriptor is in place */
    restore_pty_foreground(img);
    restore_usocks_finish(rc);  /* datagram sockets connected to a name */
    /* Close every descriptor the program did not have. */
    char *keep = calloc((size_t)base + 64, 1);
    if (!keep) restore_fail("out of memory");
    for (size_t i = 0; i < img->nfds; i++) keep[img->fds[i].fd] = 1;
    /* but for the runtime's copy of each of the restarter's regular files the
     * program has now (rt_launcher.c): it tells that description from the same
     * file opened anew */
    for (int k = 0; k < LZ_LAUNCHER_FDS; k++) {
        struct stat st;
        int ref = stdio[k];
        rc->launcher_ref[k] = -1;
        if (ref >= 0 && ref < base + 64 && fstat(ref, &st) == 0 && S_ISREG(st.st_mode)) {
            keep[ref] = 1;
            rc->launcher_ref[k] = ref;
        }
    }
    free(stdio);
    /* in rounds: a job's restorers may inherit many objects (restore_tree.c) */
    for (int full = 1; full;) {
        DIR *d = opendir("/proc/self/fd");
        int dfd = d ? dirfd(d) : -1;
        enum { CLOSE_BATCH = 1024 }; /* closed after each pass over /proc/self/fd, not during it */
        int closeme[CLOSE_BATCH], n = 0;
        struct dirent *e;
        while (d && (e = readdir(d)) && n < CLOSE_BATCH) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
            int fd = atoi(e->d_name);
            if (fd != dfd && fd != restore_tree_go_fd() && (fd >= base + 64 || !keep[fd])) closeme[n++] = fd;
        }
        if (d) closedir(d);
        for (int i = 0; i < n; i++) close(closeme[i]);
        full = n == CLOSE_BATCH;
    }
    free(keep);
}
