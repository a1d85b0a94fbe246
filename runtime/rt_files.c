/* The libc functions that change files, interposed: each asks the file engine
 * (files/track.h) to record the undo first, then does the real call.  Reads
 * matter only to shared file mappings (rt_shmaps.c).  While a call is
 * between "recorded" and "done", a checkpoint waits (rt.fs_busy): the change
 * and its undo must land in the same interval. */
#include "rt.h"
#include "track.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <linux/fs.h>
#include <unistd.h>
#include <utime.h>

#define enter rt_enter
#define leave rt_leave

/* A refused change: report once, fail the call like the file system would. */
static long refuse(const char *what, const char *path, int r)
{
    fj_report(what, path, r);
    leave();
    errno = -r;
    return -1;
}
#define CHECK(call, what, path) do { int r_ = (call); if (r_ < 0) return refuse(what, path, r_); } while (0)

static size_t iov_total(const struct iovec *iov, int n)
{
    size_t t = 0;
    for (int i = 0; i < n; i++) t += iov[i].iov_len;
    return t;
}

/* ------------------------------------------------------------------ data */

RT_API ssize_t write(int fd, const void *buf, size_t n)
{
    REAL(ssize_t, write, int, const void *, size_t);
    if (fj_untracked(fd)) return real_write(fd, buf, n);
    enter();
    if (!fj_pass_write(fd)) CHECK(fj_before_write(fd, -1, n), "write", NULL);
    if (fj_untracked(fd)) { leave(); return real_write(fd, buf, n); } /* a pipe may block */
    ssize_t r = real_write(fd, buf, n);
    leave();
    return r;
}

RT_API ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pwrite64, int, const void *, size_t, off_t);
    enter();
    if (!fj_pass_pwrite(fd)) CHECK(fj_before_write(fd, off, n), "pwrite", NULL);
    ssize_t r = real_pwrite64(fd, buf, n, off);
    leave();
    return r;
}
RT_API ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return pwrite64(fd, buf, n, off); }

RT_API ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, writev, int, const struct iovec *, int);
    if (fj_untracked(fd)) return real_writev(fd, iov, cnt);
    enter();
    if (!fj_pass_write(fd)) CHECK(fj_before_write(fd, -1, iov_total(iov, cnt)), "writev", NULL);
    if (fj_untracked(fd)) { leave(); return real_writev(fd, iov, cnt); }
    ssize_t r = real_writev(fd, iov, cnt);
    leave();
    return r;
}

RT_API ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, pwritev64, int, const struct iovec *, int, off_t);
    enter();
    if (!fj_pass_pwrite(fd)) CHECK(fj_before_write(fd, off, iov_total(iov, cnt)), "pwritev", NULL);
    ssize_t r = real_pwritev64(fd, iov, cnt, off);
    leave();
    return r;
}
RT_API ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return pwritev64(fd, iov, cnt, off); }

RT_API ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    REAL(ssize_t, pwritev64v2, int, const struct iovec *, int, off_t, int);
    enter();
    if (!(flags & RWF_APPEND) && !(off < 0 ? fj_pass_write(fd) : fj_pass_pwrite(fd)))
        CHECK(fj_before_write(fd, off < 0 ? -1 : off, iov_total(iov, cnt)), "pwritev2", NULL);
    ssize_t r = real_pwritev64v2(fd, iov, cnt, off, flags);
    leave();
    return r;
}
RT_API ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) { return pwritev64v2(fd, iov, cnt, off, flags); }

RT_API ssize_t copy_file_range(int in, off64_t *inoff, int out, off64_t *outoff, size_t len, unsigned flags)
{
    REAL(ssize_t, copy_file_range, int, off64_t *, int, off64_t *, size_t, unsigned);
    enter();
    CHECK(fj_before_write(out, outoff ? *outoff : -1, len), "copy_file_range", NULL);
    ssize_t r = real_copy_file_range(in, inoff, out, outoff, len, flags);
    leave();
    return r;
}

RT_API ssize_t sendfile64(int out, int in, off_t *off, size_t count)
{
    REAL(ssize_t, sendfile64, int, int, off_t *, size_t);
    if (fj_untracked(out)) return real_sendfile64(out, in, off, count);
    enter();
    if (!fj_pass_write(out)) CHECK(fj_before_write(out, -1, count), "sendfile", NULL);
    ssize_t r = real_sendfile64(out, in, off, count);
    leave();
    return r;
}
RT_API ssize_t sendfile(int out, int in, off_t *off, size_t count) { return sendfile64(out, in, off, count); }

RT_API ssize_t splice(int in, loff_t *inoff, int out, loff_t *outoff, size_t len, unsigned flags)
{
    REAL(ssize_t, splice, int, loff_t *, int, loff_t *, size_t, unsigned);
    if (fj_untracked(out)) return real_splice(in, inoff, out, outoff, len, flags);
    enter();
    if (!(outoff ? fj_pass_pwrite(out) : fj_pass_write(out)))
        CHECK(fj_before_write(out, outoff ? *outoff : -1, len), "splice", NULL);
    ssize_t r = real_splice(in, inoff, out, outoff, len, flags);
    leave();
    return r;
}

RT_API int ftruncate64(int fd, off_t size)
{
    REAL(int, ftruncate64, int, off_t);
    enter();
    CHECK(fj_before_truncate_fd(fd, size), "ftruncate", NULL);
    int r = real_ftruncate64(fd, size);
    leave();
    return r;
}
RT_API int ftruncate(int fd, off_t size) { return ftruncate64(fd, size); }

RT_API int truncate64(const char *path, off_t size)
{
    REAL(int, truncate64, const char *, off_t);
    enter();
    CHECK(fj_before_truncate_path(AT_FDCWD, path, size), "truncate", path);
    int r = real_truncate64(path, size);
    leave();
    return r;
}
RT_API int truncate(const char *path, off_t size) { return truncate64(path, size); }

RT_API int fallocate64(int fd, int mode, off_t off, off_t len)
{
    REAL(int, fallocate64, int, int, off_t, off_t);
    enter();
    CHECK(fj_before_fallocate(fd, mode, off, len), "fallocate", NULL);
    int r = real_fallocate64(fd, mode, off, len);
    leave();
    return r;
}
RT_API int fallocate(int fd, int mode, off_t off, off_t len) { return fallocate64(fd, mode, off, len); }

RT_API int posix_fallocate64(int fd, off_t off, off_t len)
{
    REAL(int, posix_fallocate64, int, off_t, off_t);
    enter();
    int c = fj_before_fallocate(fd, 0, off, len);
    if (c < 0) { fj_report("posix_fallocate", NULL, c); leave(); return -c; }
    int r = real_posix_fallocate64(fd, off, len);
    leave();
    return r;
}
RT_API int posix_fallocate(int fd, off_t off, off_t len) { return posix_fallocate64(fd, off, len); }

RT_API off_t lseek64(int fd, off_t off, int whence)
{
    REAL(off_t, lseek64, int, off_t, int);
    fj_position_moved(fd);
    return real_lseek64(fd, off, whence);
}
RT_API off_t lseek(int fd, off_t off, int whence) { return lseek64(fd, off, whence); }

RT_API int ioctl(int fd, unsigned long req, ...)
{
    REAL(int, ioctl, int, unsigned long, void *);
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    if (req != FICLONE && req != FICLONERANGE) return real_ioctl(fd, req, arg);
    enter();
    if (req == FICLONE) CHECK(fj_before_clone(fd, 0, 0), "clone", NULL);
    else {
        const struct file_clone_range *c = arg;
        CHECK(fj_before_clone(fd, (int64_t)c->dest_offset, c->src_length), "clone", NULL);
    }
    int r = real_ioctl(fd, req, arg);
    leave();
    return r;
}

/* A shared mapping of a file open for writing is registered with the file
 * engine (files/track_maps.c): while an interval is open its pages are
 * write-protected and saved at their first store.  Anything mapped with
 * MAP_FIXED over a registered one ends it. */
RT_API void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    REAL(void *, mmap64, void *, size_t, int, int, int, off_t);
    int shared = fd >= 0 && ((flags & MAP_SHARED_VALIDATE) == MAP_SHARED || (flags & MAP_SHARED_VALIDATE) == MAP_SHARED_VALIDATE);
    if (shared) {
        long fl = lz_sc2(SYS_fcntl, fd, F_GETFL);
        shared = fl >= 0 && (fl & O_ACCMODE) == O_RDWR; /* (only such a mapping can ever be written) */
    }
    if (!shared && !((flags & MAP_FIXED) && fj_maps_any())) return real_mmap64(addr, len, prot, flags, fd, off);
    enter();
    void *r = real_mmap64(addr, len, prot, flags, fd, off);
    if (r != MAP_FAILED && !shared) fj_map_removed(r, len);
    if (r != MAP_FAILED && shared) {
        int c = fj_map_added(fd, r, len, prot, off);
        if (c < 0) {
            lz_sc2(SYS_munmap, r, len);
            fj_map_removed(r, len);
            return (void *)refuse("mmap", NULL, c);
        }
    }
    leave();
    return r;
}
RT_API void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) { return mmap64(addr, len, prot, flags, fd, off); }

/* ------------------------------------------------------------------ descriptors */

RT_API int dup(int fd)
{
    REAL(int, dup, int);
    int r = real_dup(fd);
    if (r >= 0) fj_fd_changed(r);
    return r;
}

static int fcntl_common(int (*real)(int, int, ...), int fd, int cmd, void *arg)
{
    int r = real(fd, cmd, arg);
    if (r >= 0 && (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)) fj_fd_changed(r);
    if (cmd == F_SETFL) fj_fd_changed(fd);
    return r;
}
RT_API int fcntl64(int fd, int cmd, ...)
{
    REAL(int, fcntl64, int, int, ...);
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(real_fcntl64, fd, cmd, arg);
}
RT_API int fcntl(int fd, int cmd, ...)
{
    REAL(int, fcntl, int, int, ...);
    va_list ap;
    va_start(ap, cmd);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return fcntl_common(real_fcntl, fd, cmd, arg);
}

/* ------------------------------------------------------------------ opening */

static int open_common(int dirfd, const char *path, int flags, mode_t mode)
{
    enter();
    int created;
    CHECK(fj_before_open(dirfd, path, flags, &created), "open", path);
    int fd = (int)lz_sc4(SYS_openat, dirfd, path, flags, mode);
    if (fd < 0) { leave(); errno = -fd; return -1; }
    fj_after_open(fd, created);
    leave();
    return fd;
}

static mode_t mode_arg(int flags, va_list ap)
{
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? (mode_t)va_arg(ap, int) : 0;
}

RT_API int open(const char *path, int flags, ...)
{
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    return open_common(AT_FDCWD, path, flags, m);
}
RT_API int open64(const char *path, int flags, ...)
{
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    return open_common(AT_FDCWD, path, flags | O_LARGEFILE, m);
}
RT_API int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    return open_common(dirfd, path, flags, m);
}
RT_API int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap; va_start(ap, flags); mode_t m = mode_arg(flags, ap); va_end(ap);
    return open_common(dirfd, path, flags | O_LARGEFILE, m);
}
RT_API int __open_2(const char *path, int flags) { return open_common(AT_FDCWD, path, flags, 0); }
RT_API int __open64_2(const char *path, int flags) { return open_common(AT_FDCWD, path, flags | O_LARGEFILE, 0); }
RT_API int __openat_2(int dirfd, const char *path, int flags) { return open_common(dirfd, path, flags, 0); }
RT_API int __openat64_2(int dirfd, const char *path, int flags) { return open_common(dirfd, path, flags | O_LARGEFILE, 0); }
RT_API int creat(const char *path, mode_t mode) { return open_common(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC, mode); }
RT_API int creat64(const char *path, mode_t mode) { return open_common(AT_FDCWD, path, O_WRONLY | O_CREAT | O_TRUNC | O_LARGEFILE, mode); }

/* fopen's mode string as open flags (glibc's own fopen opens internally,
 * out of our sight). */
static int stdio_flags(const char *mode)
{
    int acc = O_RDONLY, extra = 0;
    switch (mode[0]) {
    case 'w': acc = O_WRONLY; extra = O_CREAT | O_TRUNC; break;
    case 'a': acc = O_WRONLY; extra = O_CREAT | O_APPEND; break;
    default: break;
    }
    for (const char *m = mode + 1; *m && *m != ','; m++) {
        if (*m == '+') acc = O_RDWR;
        else if (*m == 'x') extra |= O_EXCL;
    }
    return acc | extra;
}

static FILE *fopen_common(FILE *(*real)(const char *, const char *), const char *path, const char *mode)
{
    enter();
    int created;
    int c = fj_before_open(AT_FDCWD, path, stdio_flags(mode), &created);
    if (c < 0) { refuse("fopen", path, c); return NULL; }
    FILE *f = real(path, mode);
    if (f) {
        fj_after_open(fileno(f), created);
        c = fj_stream_opened(f);
        if (c < 0) { fj_report("fopen", path, c); fclose(f); leave(); errno = -c; return NULL; }
    }
    leave();
    return f;
}
RT_API FILE *fopen(const char *path, const char *mode)
{
    REAL(FILE *, fopen, const char *, const char *);
    return fopen_common(real_fopen, path, mode);
}
RT_API FILE *fopen64(const char *path, const char *mode)
{
    REAL(FILE *, fopen64, const char *, const char *);
    return fopen_common(real_fopen64, path, mode);
}

static FILE *freopen_common(FILE *(*real)(const char *, const char *, FILE *), const char *path, const char *mode, FILE *s)
{
    enter();
    int created = 0;
    if (s) fj_fd_changed(fileno(s));
    if (path) {
        int c = fj_before_open(AT_FDCWD, path, stdio_flags(mode), &created);
        if (c < 0) { refuse("freopen", path, c); return NULL; }
    }
    FILE *f = real(path, mode, s);
    if (f) {
        fj_after_open(fileno(f), created);
        int c = fj_stream_opened(f);
        if (c < 0) { fj_report("freopen", path, c); fclose(f); leave(); errno = -c; return NULL; }
    }
    leave();
    return f;
}
RT_API FILE *freopen(const char *path, const char *mode, FILE *s)
{
    REAL(FILE *, freopen, const char *, const char *, FILE *);
    return freopen_common(real_freopen, path, mode, s);
}
RT_API FILE *freopen64(const char *path, const char *mode, FILE *s)
{
    REAL(FILE *, freopen64, const char *, const char *, FILE *);
    return freopen_common(real_freopen64, path, mode, s);
}

RT_API FILE *fdopen(int fd, const char *mode)
{
    REAL(FILE *, fdopen, int, const char *);
    enter();
    FILE *f = real_fdopen(fd, mode);
    if (f) {
        int c = fj_stream_opened(f);
        if (c < 0) { fj_report("fdopen", NULL, c); leave(); errno = -c; return f; }
    }
    leave();
    return f;
}

RT_API int fclose(FILE *f)
{
    REAL(int, fclose, FILE *);
    if (f) fj_fd_changed(fileno(f));
    return real_fclose(f);
}

/* A stream moved back may overwrite what lies after its new position. */
#define SEEKER(ret, name, params, args)                  \
    RT_API ret name params                               \
    {                                                    \
        REAL(ret, name, FILE *, ...);                    \
        ret r = real_##name args;                        \
        enter();                                         \
        int c = fj_stream_moved(f);                      \
        if (c < 0) fj_report(#name, NULL, c);            \
        leave();                                         \
        return r;                                        \
    }
SEEKER(int, fseek, (FILE *f, long off, int wh), (f, off, wh))
SEEKER(int, fseeko, (FILE *f, off_t off, int wh), (f, off, wh))
SEEKER(int, fseeko64, (FILE *f, off_t off, int wh), (f, off, wh))
SEEKER(int, fsetpos, (FILE *f, const fpos_t *p), (f, p))
SEEKER(int, fsetpos64, (FILE *f, const fpos64_t *p), (f, p))

RT_API void rewind(FILE *f)
{
    REAL(void, rewind, FILE *);
    real_rewind(f);
    enter();
    int c = fj_stream_moved(f);
    if (c < 0) fj_report("rewind", NULL, c);
    leave();
}

/* mkstemp and friends create through glibc's internal open: done here with
 * the same names and guarantees, so the creation is recorded first. */
static int make_temp(char *tmpl, int suffix, int flags)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    size_t len = strlen(tmpl);
    if (suffix < 0 || len < 6 + (size_t)suffix || memcmp(tmpl + len - suffix - 6, "XXXXXX", 6)) { errno = EINVAL; return -1; }
    char *x = tmpl + len - suffix - 6;
    for (int attempt = 0; attempt < 10000; attempt++) {
        unsigned char rnd[6];
        if (getrandom(rnd, sizeof rnd, 0) != sizeof rnd) for (int i = 0; i < 6; i++) rnd[i] = (unsigned char)(rt_now_ns(CLOCK_MONOTONIC) >> (i * 3));
        for (int i = 0; i < 6; i++) x[i] = chars[rnd[i] % 62];
        int fd = open_common(AT_FDCWD, tmpl, (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}
RT_API int mkstemp(char *t) { return make_temp(t, 0, 0); }
RT_API int mkstemp64(char *t) { return make_temp(t, 0, 0); }
RT_API int mkostemp(char *t, int fl) { return make_temp(t, 0, fl); }
RT_API int mkostemp64(char *t, int fl) { return make_temp(t, 0, fl); }
RT_API int mkstemps(char *t, int s) { return make_temp(t, s, 0); }
RT_API int mkstemps64(char *t, int s) { return make_temp(t, s, 0); }
RT_API int mkostemps(char *t, int s, int fl) { return make_temp(t, s, fl); }
RT_API int mkostemps64(char *t, int s, int fl) { return make_temp(t, s, fl); }

/* ------------------------------------------------------------------ names */

#define NAMEOP(ret, name, params, hook, call)  \
    RT_API ret name params                     \
    {                                          \
        enter();                               \
        CHECK(hook, #name, NULL);              \
        long r_ = call;                        \
        leave();                               \
        if (r_ < 0) { errno = (int)-r_; return -1; } \
        return (ret)r_;                        \
    }

NAMEOP(int, unlink, (const char *p), fj_before_unlink(AT_FDCWD, p), lz_sc3(SYS_unlinkat, AT_FDCWD, p, 0))
static int remove_dir(int d, const char *p)
{
    enter();
    int k = fj_rmdir(d, p);
    if (k < 0 && k != -ENOTEMPTY) return (int)refuse("rmdir", p, k);
    long r = k == 1 ? 0 : k < 0 ? k : lz_sc3(SYS_unlinkat, d, p, AT_REMOVEDIR);
    leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}
RT_API int rmdir(const char *p) { return remove_dir(AT_FDCWD, p); }
RT_API int unlinkat(int d, const char *p, int fl)
{
    if (fl & AT_REMOVEDIR) return remove_dir(d, p);
    enter();
    CHECK(fj_before_unlink(d, p), "unlink", p);
    long r = lz_sc3(SYS_unlinkat, d, p, fl);
    leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}
static int do_rename(int da, const char *a, int db, const char *b, unsigned fl)
{
    enter();
    CHECK(fj_before_rename(da, a, db, b, fl), "rename", a);
    long r = lz_sc5(SYS_renameat2, da, a, db, b, fl);
    fj_after_rename(r == 0);
    leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}
RT_API int rename(const char *a, const char *b) { return do_rename(AT_FDCWD, a, AT_FDCWD, b, 0); }
RT_API int renameat(int da, const char *a, int db, const char *b) { return do_rename(da, a, db, b, 0); }
RT_API int renameat2(int da, const char *a, int db, const char *b, unsigned fl) { return do_rename(da, a, db, b, fl); }
NAMEOP(int, link, (const char *a, const char *b), fj_before_create(AT_FDCWD, b), lz_sc5(SYS_linkat, AT_FDCWD, a, AT_FDCWD, b, 0))
NAMEOP(int, linkat, (int da, const char *a, int db, const char *b, int fl), fj_before_create(db, b),
       lz_sc5(SYS_linkat, da, a, db, b, fl))
NAMEOP(int, symlink, (const char *t, const char *p), fj_before_create(AT_FDCWD, p), lz_sc3(SYS_symlinkat, t, AT_FDCWD, p))
NAMEOP(int, symlinkat, (const char *t, int d, const char *p), fj_before_create(d, p), lz_sc3(SYS_symlinkat, t, d, p))
static int make_dir(int d, const char *p, mode_t m)
{
    enter();
    CHECK(fj_before_create(d, p), "mkdir", p);
    long r = lz_sc3(SYS_mkdirat, d, p, m);
    if (r == 0) fj_after_mkdir(d, p);
    leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}
RT_API int mkdir(const char *p, mode_t m) { return make_dir(AT_FDCWD, p, m); }
RT_API int mkdirat(int d, const char *p, mode_t m) { return make_dir(d, p, m); }
NAMEOP(int, mknod, (const char *p, mode_t m, dev_t dv), fj_before_create(AT_FDCWD, p), lz_sc4(SYS_mknodat, AT_FDCWD, p, m, dv))
NAMEOP(int, mknodat, (int d, const char *p, mode_t m, dev_t dv), fj_before_create(d, p), lz_sc4(SYS_mknodat, d, p, m, dv))
NAMEOP(int, mkfifo, (const char *p, mode_t m), fj_before_create(AT_FDCWD, p), lz_sc4(SYS_mknodat, AT_FDCWD, p, m | S_IFIFO, 0))
NAMEOP(int, mkfifoat, (int d, const char *p, mode_t m), fj_before_create(d, p), lz_sc4(SYS_mknodat, d, p, m | S_IFIFO, 0))

RT_API int remove(const char *p)
{
    struct stat st;
    if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) return rmdir(p);
    return unlink(p);
}

/* ------------------------------------------------------------------ attributes */

NAMEOP(int, chmod, (const char *p, mode_t m), fj_before_attr_path(AT_FDCWD, p, 0), lz_sc3(SYS_fchmodat, AT_FDCWD, p, m))
NAMEOP(int, fchmod, (int fd, mode_t m), fj_before_attr_fd(fd), lz_sc2(SYS_fchmod, fd, m))
NAMEOP(int, fchmodat, (int d, const char *p, mode_t m, int fl), fj_before_attr_path(d, p, fl & AT_SYMLINK_NOFOLLOW),
       lz_sc3(SYS_fchmodat, d, p, m))
/* utimensat(fd, NULL, ...) is futimens; glibc declares the path non-null */
static int set_times(int d, const char *p, const struct timespec t[2], int fl)
{
    enter();
    int c = p ? fj_before_attr_path(d, p, fl & AT_SYMLINK_NOFOLLOW) : fj_before_attr_fd(d);
    if (c < 0) return (int)refuse("utimensat", p, c);
    long r = lz_sc4(SYS_utimensat, d, p, t, fl);
    leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}
RT_API int utimensat(int d, const char *p, const struct timespec t[2], int fl)
{
    const char *volatile pv = p;
    return set_times(d, pv, t, fl);
}
RT_API int futimens(int fd, const struct timespec t[2]) { return set_times(fd, NULL, t, 0); }

static int tv_call(int d, const char *p, const struct timeval tv[2], int fl)
{
    if (!tv) return set_times(d, p, NULL, fl);
    struct timespec ts[2] = {{tv[0].tv_sec, tv[0].tv_usec * 1000}, {tv[1].tv_sec, tv[1].tv_usec * 1000}};
    return set_times(d, p, ts, fl);
}
RT_API int utimes(const char *p, const struct timeval tv[2]) { return tv_call(AT_FDCWD, p, tv, 0); }
RT_API int lutimes(const char *p, const struct timeval tv[2]) { return tv_call(AT_FDCWD, p, tv, AT_SYMLINK_NOFOLLOW); }
RT_API int futimes(int fd, const struct timeval tv[2]) { return tv_call(fd, NULL, tv, 0); }
RT_API int futimesat(int d, const char *p, const struct timeval tv[2]) { return tv_call(d, p, tv, 0); }
RT_API int utime(const char *p, const struct utimbuf *b)
{
    if (!b) return set_times(AT_FDCWD, p, NULL, 0);
    struct timespec ts[2] = {{b->actime, 0}, {b->modtime, 0}};
    return set_times(AT_FDCWD, p, ts, 0);
}
