/* Lookup, attributes, directories and names.  Each change asks the file
 * engine first (track.h: what undoes it is recorded, or the change is
 * refused with the engine's error), then acts on the real directory
 * through the parent's descriptor. */
#include "fsd.h"
#include "track.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* buffer mode: what the job sees of a file's size is its own (nothing is
 * cached: the answer depends on who asks) */
static void job_view(fuse_req_t req, struct stat *st, double *timeout)
{
    if (!fsd.buffer) return;
    *timeout = 0;
    uint64_t size;
    if (S_ISREG(st->st_mode) && fs_req_is_job(req) && fb_size(st->st_dev, st->st_ino, &size)) {
        st->st_size = (off_t)size;
        st->st_blocks = (blkcnt_t)((size + 511) / 512);
    }
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fuse_entry_param e;
    int r = fs_lookup_entry(fs_inode(parent), name, &e);
    if (r == 0) job_view(req, &e.attr, &e.attr_timeout);
    if (r == -ENOENT) { /* a negative entry, cached as briefly as the others */
        memset(&e, 0, sizeof e);
        e.entry_timeout = 1.0;
        fuse_reply_entry(req, &e);
        return;
    }
    if (r < 0) fuse_reply_err(req, -r);
    else fuse_reply_entry(req, &e);
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
    fs_forget_one(ino, n);
    fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *v)
{
    for (size_t i = 0; i < count; i++) fs_forget_one(v[i].ino, v[i].nlookup);
    fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)fi;
    struct stat st;
    if (fstatat(fs_inode(ino)->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) { fuse_reply_err(req, errno); return; }
    double t = 1.0;
    job_view(req, &st, &t);
    fuse_reply_attr(req, &st, t);
}

static void fs_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int valid, struct fuse_file_info *fi)
{
    struct fs_inode *n = fs_inode(ino);
    char p[64];
    fs_fdpath(p, sizeof p, n->fd);
    int r = 0;
    if (fsd.buffer && (valid & FUSE_SET_ATTR_SIZE) && !fs_req_is_job(req)) { fuse_reply_err(req, EROFS); return; }
    if (fsd.writeback) pthread_mutex_lock(&n->times); /* fs_write_buf keeps what we set */
    fs_change_begin();
    if (valid & (FUSE_SET_ATTR_MODE | FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
        r = fj_before_attr_fd(n->fd);
    if (!r && (valid & FUSE_SET_ATTR_MODE) && chmod(p, a->st_mode) < 0) r = -errno;
    if (!r && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
        uid_t u = (valid & FUSE_SET_ATTR_UID) ? a->st_uid : (uid_t)-1;
        gid_t g = (valid & FUSE_SET_ATTR_GID) ? a->st_gid : (gid_t)-1;
        if (fchownat(n->fd, "", u, g, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) r = -errno;
    }
    if (!r && (valid & FUSE_SET_ATTR_SIZE)) {
        int fd = fi ? FH_FD(fi) : open(p, O_WRONLY | O_CLOEXEC);
        if (fd < 0) r = -errno;
        else if (fsd.buffer) { /* held until the commit */
            r = fb_truncate(fd, (uint64_t)a->st_size);
            if (!fi) close(fd);
        } else {
            r = fj_before_truncate_fd(fd, (int64_t)a->st_size);
            if (!r && ftruncate(fd, a->st_size) < 0) r = -errno;
            if (!fi) { fj_fd_changed(fd); close(fd); }
        }
    }
    if (!r && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
        struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
        if (valid & FUSE_SET_ATTR_ATIME_NOW) tv[0].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_ATIME) tv[0] = a->st_atim;
        if (valid & FUSE_SET_ATTR_MTIME_NOW) tv[1].tv_nsec = UTIME_NOW;
        else if (valid & FUSE_SET_ATTR_MTIME) tv[1] = a->st_mtim;
        if (utimensat(AT_FDCWD, p, tv, 0) < 0) r = -errno;
    }
    fs_change_end();
    if (fsd.writeback) pthread_mutex_unlock(&n->times);
    if (r) { fuse_reply_err(req, -r); return; }
    fs_getattr(req, ino, fi);
}

static void fs_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char buf[PATH_MAX + 1];
    ssize_t n = readlinkat(fs_inode(ino)->fd, "", buf, sizeof buf - 1);
    if (n < 0) { fuse_reply_err(req, errno); return; }
    buf[n] = 0;
    fuse_reply_readlink(req, buf);
}

/* mknod, mkdir, symlink: the name recorded absent first */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev, const char *link)
{
    struct fs_inode *d = fs_inode(parent);
    const struct fuse_ctx *c = fuse_req_ctx(req);
    fs_change_begin();
    int r = fj_before_create(d->fd, name);
    if (!r) {
        int rc = link ? symlinkat(link, d->fd, name) : S_ISDIR(mode) ? mkdirat(d->fd, name, mode & ~c->umask)
                                                                     : mknodat(d->fd, name, mode & ~c->umask, rdev);
        if (rc < 0) r = -errno;
        else if (S_ISDIR(mode)) fj_after_mkdir(d->fd, name);
    }
    fs_change_end();
    if (r) { fuse_reply_err(req, -r); return; }
    struct fuse_entry_param e;
    r = fs_lookup_entry(d, name, &e);
    if (r) fuse_reply_err(req, -r);
    else fuse_reply_entry(req, &e);
}

static void fs_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    make_node(req, parent, name, mode, rdev, NULL);
}
static void fs_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    make_node(req, parent, name, S_IFDIR | mode, 0, NULL);
}
static void fs_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
    make_node(req, parent, name, S_IFLNK, 0, link);
}

static void fs_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
    struct fs_inode *n = fs_inode(ino), *d = fs_inode(parent);
    char p[64];
    fs_fdpath(p, sizeof p, n->fd);
    fs_change_begin();
    int r = fj_before_create(d->fd, name);
    if (!r && linkat(AT_FDCWD, p, d->fd, name, AT_SYMLINK_FOLLOW) < 0) r = -errno;
    fs_change_end();
    if (r) { fuse_reply_err(req, -r); return; }
    struct fuse_entry_param e;
    r = fs_lookup_entry(d, name, &e);
    if (r) fuse_reply_err(req, -r);
    else fuse_reply_entry(req, &e);
}

static void fs_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_inode *d = fs_inode(parent);
    fs_change_begin();
    int r = fj_before_unlink(d->fd, name);
    if (!r && unlinkat(d->fd, name, 0) < 0) r = -errno;
    fs_change_end();
    fuse_reply_err(req, -r);
}

static void fs_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    struct fs_inode *d = fs_inode(parent);
    fs_change_begin();
    int r = fj_rmdir(d->fd, name); /* 1: the engine moved it into files.keep/ */
    if (r == 1) r = 0;
    else if (!r && unlinkat(d->fd, name, AT_REMOVEDIR) < 0) r = -errno;
    fs_change_end();
    fuse_reply_err(req, -r);
}

static void fs_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent, const char *newname,
                      unsigned int flags)
{
    struct fs_inode *a = fs_inode(parent), *b = fs_inode(newparent);
    fs_change_begin();
    int r = fj_before_rename(a->fd, name, b->fd, newname, flags);
    if (!r) {
        if (renameat2(a->fd, name, b->fd, newname, flags) < 0) r = -errno;
        fj_after_rename(r == 0);
    }
    fs_change_end();
    fuse_reply_err(req, -r);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
    struct statvfs sv;
    if (fstatvfs(fs_inode(ino)->fd, &sv) < 0) fuse_reply_err(req, errno);
    else fuse_reply_statfs(req, &sv);
}

/* Directories: read through a descriptor of the real one. */
struct fs_dir {
    DIR *dp;
    off_t off;
    struct dirent *entry;
};

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fs_dir *d = calloc(1, sizeof *d);
    if (!d) { fuse_reply_err(req, ENOMEM); return; }
    int fd = openat(fs_inode(ino)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !(d->dp = fdopendir(fd))) {
        int e = errno;
        if (fd >= 0) close(fd);
        free(d);
        fuse_reply_err(req, e);
        return;
    }
    fi->fh = (uint64_t)(uintptr_t)d;
    fuse_reply_open(req, fi);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    struct fs_dir *d = (struct fs_dir *)(uintptr_t)fi->fh;
    char *buf = malloc(size);
    if (!buf) { fuse_reply_err(req, ENOMEM); return; }
    if (off != d->off) {
        seekdir(d->dp, off);
        d->entry = NULL;
        d->off = off;
    }
    size_t used = 0;
    for (;;) {
        if (!d->entry) {
            errno = 0;
            d->entry = readdir(d->dp);
            if (!d->entry) break;
        }
        struct stat st = {.st_ino = d->entry->d_ino, .st_mode = (mode_t)d->entry->d_type << 12};
        size_t need = fuse_add_direntry(req, buf + used, size - used, d->entry->d_name, &st, d->entry->d_off);
        if (need > size - used) break;
        used += need;
        d->off = d->entry->d_off;
        d->entry = NULL;
    }
    fuse_reply_buf(req, buf, used);
    free(buf);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct fs_dir *d = (struct fs_dir *)(uintptr_t)fi->fh;
    closedir(d->dp);
    free(d);
    fuse_reply_err(req, 0);
}

void fs_ops_names(struct fuse_lowlevel_ops *o)
{
    o->lookup = fs_lookup;
    o->forget = fs_forget;
    o->forget_multi = fs_forget_multi;
    o->getattr = fs_getattr;
    o->setattr = fs_setattr;
    o->readlink = fs_readlink;
    o->mknod = fs_mknod;
    o->mkdir = fs_mkdir;
    o->symlink = fs_symlink;
    o->link = fs_link;
    o->unlink = fs_unlink;
    o->rmdir = fs_rmdir;
    o->rename = fs_rename;
    o->statfs = fs_statfs;
    o->opendir = fs_opendir;
    o->readdir = fs_readdir;
    o->releasedir = fs_releasedir;
}
