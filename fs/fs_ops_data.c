/* Open, read, write, truncate, fallocate, sync.  A FUSE file handle is a
 * descriptor of the real file; the engine classifies it as it would a
 * program's (track_fds.c), so writes that need no undo (appends, a file
 * born this interval) cost one table lookup.  Every handle is opened for
 * reading and writing where the file allows (the engine reads the old bytes
 * through it) and without O_APPEND (the kernel gives the offsets).
 * Buffer mode (fs_buffer.c): every handle is direct_io (no page cache shared
 * by the job and the others); the job's writes and truncations are held,
 * its reads merge them over the file; a process outside the job reads the
 * committed file and may not write (EROFS: its writes would be neither the
 * job's nor committed). */
#include "fsd.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int real_flags(int flags)
{
    if ((flags & O_ACCMODE) == O_WRONLY) flags = (flags & ~O_ACCMODE) | O_RDWR;
    return (flags & ~(O_APPEND | O_NOFOLLOW)) | O_CLOEXEC;
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_inode *n = fs_inode(ino);
    char p[64];
    fs_fdpath(p, sizeof p, n->fd);
    int flags = real_flags(fi->flags);
    int fd = open(p, flags & ~(O_CREAT | O_EXCL | O_TRUNC));
    if (fd < 0 && errno == EACCES && (flags & O_ACCMODE) == O_RDWR && (fi->flags & O_ACCMODE) == O_RDONLY)
        fd = open(p, (flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC)) | O_RDONLY);
    if (fd < 0 && errno == EACCES && (fi->flags & O_ACCMODE) == O_WRONLY)
        fd = open(p, (flags & ~(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC)) | O_WRONLY); /* a write-only file: no cache reads */
    if (fd < 0) { fuse_reply_err(req, errno); return; }
    int job = fs_req_is_job(req);
    if (fsd.buffer && !job && (fi->flags & O_ACCMODE) != O_RDONLY) { close(fd); fuse_reply_err(req, EROFS); return; }
    fj_after_open(fd, 0);
    fi->fh = FH_MAKE(fd, job, fsd.buffer && (fi->flags & O_APPEND));
    if (fsd.buffer) fi->direct_io = 1;
    fuse_reply_open(req, fi);
}

static void fs_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
    struct fs_inode *d = fs_inode(parent);
    const struct fuse_ctx *c = fuse_req_ctx(req);
    int flags = real_flags(fi->flags) | O_CREAT, created = 0;
    int job = fs_req_is_job(req);
    if (fsd.buffer && !job) { fuse_reply_err(req, EROFS); return; }
    if (fsd.buffer) flags &= ~O_TRUNC; /* held as a truncation (below) */
    fs_change_begin();
    int r = fj_before_open(d->fd, name, flags, &created);
    int fd = -1;
    if (!r) {
        fd = openat(d->fd, name, flags | O_NOFOLLOW, mode & ~c->umask);
        if (fd < 0) r = -errno;
        else fj_after_open(fd, created);
    }
    fs_change_end();
    if (r) { fuse_reply_err(req, -r); return; }
    struct fuse_entry_param e;
    r = fs_lookup_entry(d, name, &e);
    if (r) { close(fd); fuse_reply_err(req, -r); return; }
    if (fsd.buffer && (fi->flags & O_TRUNC)) { /* an existing file after all (created meanwhile) */
        fs_change_begin();
        fb_truncate(fd, 0);
        fs_change_end();
    }
    fi->fh = FH_MAKE(fd, job, fsd.buffer && (fi->flags & O_APPEND));
    if (fsd.buffer) {
        fi->direct_io = 1;
        e.attr_timeout = 0;
    }
    fuse_reply_create(req, &e, fi);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    if (fsd.buffer && FH_JOB(fi)) { /* the job's own data over the file */
        char *b = malloc(size ? size : 1);
        uint64_t got = 0;
        int r = b ? fb_read(FH_FD(fi), (uint64_t)off, size, b, &got) : -ENOMEM;
        if (r == 1) fuse_reply_buf(req, b, (size_t)got);
        else if (r < 0) fuse_reply_err(req, -r);
        free(b);
        if (r != 0) return;
    }
    struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);
    buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    buf.buf[0].fd = FH_FD(fi);
    buf.buf[0].pos = off;
    fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void fs_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    int fd = FH_FD(fi);
    size_t len = fuse_buf_size(in);
    if (fsd.buffer) { /* held until the commit */
        if (!FH_JOB(fi)) { fuse_reply_err(req, EROFS); return; }
        char *b = malloc(len ? len : 1);
        struct fuse_bufvec mem = FUSE_BUFVEC_INIT(len);
        mem.buf[0].mem = b;
        ssize_t n = b ? fuse_buf_copy(&mem, in, 0) : -ENOMEM;
        fs_change_begin(); /* not into a commit's middle */
        if (n >= 0) {
            int e = fb_write(fd, FH_APPEND(fi), (uint64_t)off, b, (uint64_t)n);
            if (e < 0) n = e;
        }
        fs_change_end();
        free(b);
        if (n < 0) fuse_reply_err(req, (int)-n);
        else fuse_reply_write(req, (size_t)n);
        return;
    }
    struct fuse_bufvec out = FUSE_BUFVEC_INIT(len);
    out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    out.buf[0].fd = fd;
    out.buf[0].pos = off;
    /* With the writeback cache the kernel owns the mtime: it sends it in a
     * setattr (at a close, a sync), possibly before the pages it wrote back
     * reach us; our write keeps the file's mtime so as not to undo it. */
    struct fs_inode *n = fsd.writeback ? fs_inode(ino) : NULL;
    struct stat st;
    if (n) pthread_mutex_lock(&n->times);
    int keep = n && fstat(fd, &st) == 0;
    fs_change_begin();
    ssize_t r = fj_pass_pwrite(fd) ? 0 : fj_before_write(fd, off, len);
    if (!r) r = fuse_buf_copy(&out, in, 0);
    if (keep && r > 0) futimens(fd, (struct timespec[2]){{0, UTIME_OMIT}, st.st_mtim});
    fs_change_end();
    if (n) pthread_mutex_unlock(&n->times);
    if (r < 0) fuse_reply_err(req, (int)-r);
    else fuse_reply_write(req, (size_t)r);
}

static void fs_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    /* a close of the program's: the kernel wrote its dirty pages back already */
    int fd = dup(FH_FD(fi));
    fuse_reply_err(req, fd < 0 ? errno : close(fd) < 0 ? errno : 0);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    fj_fd_changed(FH_FD(fi)); /* the number may name another file next */
    close(FH_FD(fi));
    fuse_reply_err(req, 0);
}

static void fs_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    /* buffer mode: what the job holds is made durable by its commit, not here */
    int r = datasync ? fdatasync(FH_FD(fi)) : fsync(FH_FD(fi));
    fuse_reply_err(req, r < 0 ? errno : 0);
}

static void fs_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    (void)ino;
    int fd = FH_FD(fi);
    if (fsd.buffer) { fuse_reply_err(req, EOPNOTSUPP); return; } /* posix_fallocate writes instead */
    fs_change_begin();
    int r = fj_before_fallocate(fd, mode, off, len);
    if (!r && fallocate(fd, mode, off, len) < 0) r = -errno;
    fs_change_end();
    fuse_reply_err(req, -r);
}

void fs_ops_data(struct fuse_lowlevel_ops *o)
{
    o->open = fs_open;
    o->create = fs_create;
    o->read = fs_read;
    o->write_buf = fs_write_buf;
    o->flush = fs_flush;
    o->release = fs_release;
    o->fsync = fs_fsync;
    o->fallocate = fs_fallocate;
}
