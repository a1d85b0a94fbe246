/* Named pipes (LZ_FD_FIFO, struct lz_chan of kind LZ_CH_FIFO): the FIFO is
 * opened again by its path -- made again with its mode if it is gone (the
 * file rollback leaves a FIFO node the job did not make alone) -- through a
 * read-write "keeper" description, which never blocks and lets the other
 * ends be opened without waiting for a partner; the pipe gets its capacity
 * and the bytes that were in flight, each descriptor record its own
 * description opened through /proc/self/fd with its access mode and flags,
 * and the keeper is closed.  A path that names something else now fails
 * the restart with one line. */
#include "restorer.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int restore_new_fifo(const struct lz_chan *c, char *data, const char *path, int base)
{
    int k = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (k < 0 && errno == ENOENT) {
        if (mkfifo(path, (mode_t)(c->reserved[1] & 07777)) < 0 && errno != EEXIST)
            restore_fail("cannot make the named pipe %s again: %s", path, strerror(errno));
        chmod(path, (mode_t)(c->reserved[1] & 07777)); /* (mkfifo applies the umask) */
        k = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    }
    if (k < 0) restore_fail("cannot open the named pipe %s again: %s", path, strerror(errno));
    struct stat st;
    if (fstat(k, &st) < 0 || !S_ISFIFO(st.st_mode))
        restore_fail("cannot open the named pipe %s again: it is not a named pipe any more; move it away and restart", path);
    int p = fcntl(k, F_DUPFD_CLOEXEC, base);
    close(k);
    if (p < 0) restore_fail("cannot open the named pipe %s again: %s", path, strerror(errno));
    int cap = fcntl(p, F_GETPIPE_SZ);
    if (cap != (int)c->capacity && (fcntl(p, F_SETPIPE_SZ, (int)c->capacity) < 0 || fcntl(p, F_GETPIPE_SZ) < (int)c->capacity))
        restore_fail("cannot give the named pipe %s its size of %u bytes: %s", path, c->capacity,
                     errno == EPERM ? "above this user's limit (/proc/sys/fs/pipe-max-size)" : strerror(errno));
    for (uint64_t off = 0; off < c->bytes;) {
        ssize_t n = write(p, data + off, c->bytes - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) restore_fail("cannot put back the %llu bytes in flight in the named pipe %s: %s", (unsigned long long)c->bytes,
                                 path, n < 0 ? strerror(errno) : "short write");
        off += (uint64_t)n;
    }
    free(data);
    return p;
}

void restore_fifo_ends(const struct lz_image *img, uint64_t ino, int keeper, int base, int *src)
{
    char lp[64];
    snprintf(lp, sizeof lp, "/proc/self/fd/%d", keeper);
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_FIFO || f->ino != ino) continue;
        int fd = open(lp, (int)(f->flags & O_ACCMODE) | O_CLOEXEC | O_NONBLOCK);
        src[i] = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, base);
        if (fd >= 0) close(fd);
        if (src[i] < 0) restore_fail("cannot open the named pipe of descriptor %d again: %s", f->fd, strerror(errno));
        restore_set_flags(src[i], f->flags, f->fd);
    }
    close(keeper);
}
