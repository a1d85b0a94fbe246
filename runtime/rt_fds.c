/* The descriptor table: regular files and directories by path, identity,
 * offset and flags; the launcher's descriptors (rt_launcher.c) and 0/1/2
 * terminals are re-attached to the restarter's; a few character devices are
 * reopened; pipes and socket pairs the program made are rt_pipes.c's, TCP and UDP
 * sockets rt_inet.c's, eventfd, timerfd, signalfd and epoll descriptors rt_events.c's,
 * pseudo-terminals rt_pty.c's, POSIX message queues rt_mqueue.c's.  Anything else makes the checkpoint
 * fail with a message naming the descriptor. */
#include "rt.h"
#include "rt_dirty.h"
#include "track.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

static const char *const reopenable_devs[] = {"/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full", NULL};

static int describe(struct rt_ckpt *ck, int fd, struct lz_fd *out)
{
    char lp[64], path[LZ_PATH_MAX];
    struct stat st;
    rt_fmt(lp, sizeof lp, "/proc/self/fd/%d", fd);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, path, sizeof path - 1);
    if (n < 0 || lz_sc2(SYS_fstat, fd, &st) < 0) return 1; /* closed meanwhile */
    path[n] = 0;
    memset(out, 0, sizeof *out);
    out->fd = fd;
    out->dup_of = -1;
    out->flags = (uint32_t)lz_sc2(SYS_fcntl, fd, F_GETFL);
    out->fdflags = (uint32_t)lz_sc2(SYS_fcntl, fd, F_GETFD);
    out->mode = st.st_mode;
    out->ino = st.st_ino; out->dev = st.st_dev; out->size = (uint64_t)st.st_size;
    out->mtime_ns = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
    if (fd == rt.ctl_fd) { out->kind = LZ_FD_CTL; return 0; }
    if (fj_is_own_fd(fd)) return 1; /* the file journal's: reopened by the runtime */
    if (rt_dirty_owns_fd(fd)) return 1; /* the dirty tracker's: opened anew after a restart */
    if (rt_launcher_is_ref(fd)) return 1; /* the runtime's copy of a launcher's file: made anew after a restart */
    int deleted = n > LZ_DELETED_LEN && !strcmp(path + n - LZ_DELETED_LEN, LZ_DELETED_SUFFIX);
    int from = rt_launcher_of(fd, st.st_dev, st.st_ino, st.st_mode);
    if (from >= 0 && S_ISREG(st.st_mode)) {
        /* the launcher's stdout (`> run.out`), here or dup'ed: the restarter's after a restart */
        out->kind = LZ_FD_STDIO;
        out->launcher = from != fd ? (uint32_t)from + 1 : 0;
        return 0;
    }
    if (S_ISREG(st.st_mode) && rt_is_mqueue(fd)) {
        /* a POSIX message queue, by name; the queue itself is rt_mqueue.c's */
        if (deleted) { rt_fmt(ck->err, sizeof ck->err, "descriptor %d (POSIX message queue %s) was unlinked: Lazarus restores queues by name", fd, path); return -1; }
        out->kind = LZ_FD_MQUEUE;
        out->path = strings_add(&ck->strings, path);
        return 0;
    }
    if (path[0] == '/' && !deleted && (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))) {
        out->kind = S_ISREG(st.st_mode) ? LZ_FD_FILE : LZ_FD_DIR;
        out->path = strings_add(&ck->strings, path);
        out->offset = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
        if (out->offset < 0) out->offset = 0;
        return 0;
    }
    if (S_ISCHR(st.st_mode))
        for (int i = 0; reopenable_devs[i]; i++)
            if (!strcmp(path, reopenable_devs[i])) {
                out->kind = LZ_FD_DEV;
                out->path = strings_add(&ck->strings, path);
                return 0;
            }
    if (from >= 0) {
        out->kind = LZ_FD_STDIO; /* the launcher's, here or dup'ed: re-attached to the restarter's */
        out->launcher = from != fd ? (uint32_t)from + 1 : 0;
        return 0;
    }
    /* the launcher's terminal on 0/1/2 at another of those numbers is still the restarter's */
    int launcher_tty = 0;
    for (int i = 0; i < rt.ninherited && fd <= 2 && S_ISCHR(st.st_mode); i++)
        launcher_tty |= rt.inherited[i].dev == (uint64_t)st.st_dev && rt.inherited[i].ino == (uint64_t)st.st_ino;
    /* a pseudo-terminal the job made (rt_pty.c) */
    if (S_ISCHR(st.st_mode) && !launcher_tty && rt_pty_kind(path, st.st_rdev, &out->ino, &out->size, fd)) {
        out->kind = LZ_FD_PTY;
        out->dev = 0;
        return 0;
    }
    /* a terminal is the restarter's too; a pipe on 0/1/2 that is not the
     * launcher's is the job's own (`a | b`) */
    if (fd <= 2 && S_ISCHR(st.st_mode)) {
        out->kind = LZ_FD_STDIO;
        return 0;
    }
    if (deleted && S_ISREG(st.st_mode)) {
        /* open but unlinked (tmpfile, a file removed while in use): kept by content */
        char name[32];
        rt_fmt(name, sizeof name, "ghost.%d", fd);
        out->kind = LZ_FD_GHOST;
        out->path = strings_add(&ck->strings, name);
        out->offset = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
        if (out->offset < 0) out->offset = 0;
        return 0;
    }
    /* made by the program: known to be restorable once the dups are known (rt_pipes.c) */
    if (S_ISFIFO(st.st_mode) && !strncmp(path, "pipe:[", 6)) { out->kind = LZ_FD_PIPE; return 0; }
    if (S_ISFIFO(st.st_mode) && path[0] == '/' && !deleted) { /* a named pipe: by path, its data as a pipe's */
        out->kind = LZ_FD_FIFO;
        out->path = strings_add(&ck->strings, path);
        return 0;
    }
    if (S_ISSOCK(st.st_mode) && !strncmp(path, "socket:[", 8)) {
        int dom = 0, dlen = sizeof dom; /* TCP and UDP are rt_inet.c's */
        lz_sc5(SYS_getsockopt, fd, SOL_SOCKET, SO_DOMAIN, &dom, &dlen);
        out->kind = dom == AF_INET || dom == AF_INET6 ? LZ_FD_INET : LZ_FD_SOCKET;
        return 0;
    }
    /* event-loop objects: their state is rt_events.c's */
    static const char *const events[] = {"anon_inode:[eventfd]", "anon_inode:[timerfd]", "anon_inode:[signalfd]",
                                         "anon_inode:[eventpoll]", "anon_inode:inotify", NULL};
    for (int i = 0; events[i]; i++)
        if (!strcmp(path, events[i])) {
            out->kind = LZ_FD_EVENT;
            out->path = strings_add(&ck->strings, path);
            return 0;
        }
    const char *what = deleted ? "a deleted file" : S_ISSOCK(st.st_mode) ? "a socket" : S_ISFIFO(st.st_mode) ? (deleted ? "a named pipe whose name was removed" : "a pipe")
                     : S_ISCHR(st.st_mode) ? "a character device" : "of a kind Lazarus cannot restore yet";
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (%s) is %s", fd, path, what);
    return -1;
}

int rt_capture_fds(struct rt_ckpt *ck)
{
    long dfd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/fd"); return -1; }
    size_t cap = 4096;
    ck->fds = arena_alloc(&ck->arena, cap * sizeof *ck->fds);
    char *dbuf = arena_alloc(&ck->arena, 65536);
    int rc = ck->fds && dbuf ? 0 : -1;
    for (;;) {
        long nread = rc ? 0 : lz_sc3(SYS_getdents64, dfd, dbuf, 65536);
        if (nread <= 0) break;
        for (long off = 0; off < nread;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d = (void *)(dbuf + off);
            off += d->reclen;
            if (d->name[0] < '0' || d->name[0] > '9') continue;
            int fd = 0;
            for (const char *c = d->name; *c; c++) fd = fd * 10 + (*c - '0');
            if (fd == dfd) continue;
            if (ck->nfds == cap) { rt_fmt(ck->err, sizeof ck->err, "too many open descriptors"); rc = -1; break; }
            int r = describe(ck, fd, &ck->fds[ck->nfds]);
            if (r < 0) { rc = -1; break; }
            if (r == 0) ck->nfds++;
        }
        if (rc) break;
    }
    lz_sc1(SYS_close, dfd);
    if (rc) return rc;
    /* Descriptors sharing one open file description (dup, 2>&1) stay shared. */
    long pid = lz_sc0(SYS_getpid);
    for (size_t i = 0; i < ck->nfds; i++)
        for (size_t j = 0; j < i; j++) {
            if (ck->fds[j].dup_of >= 0 || ck->fds[j].kind == LZ_FD_CTL || ck->fds[i].kind == LZ_FD_CTL) continue;
            if (lz_sc5(SYS_kcmp, pid, pid, KCMP_FILE, ck->fds[j].fd, ck->fds[i].fd) == 0) {
                ck->fds[i].dup_of = ck->fds[j].fd;
                if (ck->fds[i].kind != LZ_FD_STDIO || ck->fds[j].kind != LZ_FD_STDIO) ck->fds[i].kind = LZ_FD_DUP;
                break;
            }
        }
    if (rt_capture_usocks(ck) < 0 || rt_capture_chans(ck) < 0 || rt_capture_inet(ck) < 0) return -1;
    if (rt_capture_ptys(ck) < 0) return -1;
    return rt_capture_events(ck);
}
