/* Names: absolute paths and what is never tracked, the name a path had at
 * N through the directories moved or made since, NAME records, and the
 * hooks of unlink, link, mkdir, rmdir, rename, open and attribute changes
 * (track_internal.h). */
#include "track_internal.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- paths */

/* Lexical absolute path of (dirfd, path). */
static int abspath(int dirfd, const char *path, char *out)
{
    char base[LZ_PATH_MAX];
    size_t bl = 0;
    if (path[0] != '/') {
        long n;
        if (dirfd == AT_FDCWD) {
            n = lz_sc2(SYS_getcwd, base, sizeof base);
            if (n < 0) return (int)n;
            bl = slen(base);
        } else {
            char lp[40];
            trk_fdpath(dirfd, lp);
            n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, base, sizeof base - 1);
            if (n < 0) return (int)n;
            base[n] = 0;
            bl = (size_t)n;
        }
    }
    size_t pl = slen(path);
    if (bl + pl + 2 >= LZ_PATH_MAX) return -ENAMETOOLONG;
    char raw[LZ_PATH_MAX];
    memcpy(raw, base, bl);
    raw[bl] = '/';
    memcpy(raw + bl + 1, path, pl + 1);
    /* collapse //, /./ and /../ */
    size_t o = 0;
    const char *p = raw;
    while (*p) {
        while (*p == '/') p++;
        if (!*p) break;
        const char *q = p;
        while (*q && *q != '/') q++;
        size_t cl = (size_t)(q - p);
        if (cl == 1 && p[0] == '.') { p = q; continue; }
        if (cl == 2 && p[0] == '.' && p[1] == '.') {
            while (o > 0 && out[o - 1] != '/') o--;
            if (o > 0) o--;
            p = q;
            continue;
        }
        out[o++] = '/';
        memcpy(out + o, p, cl);
        o += cl;
        p = q;
    }
    if (o == 0) out[o++] = '/';
    out[o] = 0;
    return 0;
}

static int under(const char *path, const char *dir, size_t dl)
{
    return !strncmp(path, dir, dl) && (path[dl] == '/' || path[dl] == 0 || (dl == 1 && dir[0] == '/'));
}

/* A path under fj_limit's directory, as the system calls take it: below its
 * descriptor (/proc/self/fd/N/...), not through what is mounted over it.
 * The file system front end serves that mount: a lookup through it from
 * inside one of its operations would wait for itself (the kernel holds the
 * directory's lock while it asks).  Records keep the path itself. */
static const char *via(const char *abs, char *buf)
{
    if (!trk_E.only_len || !under(abs, trk_E.only, trk_E.only_len)) return abs;
    static const char pre[] = "/proc/self/fd/";
    size_t i = sizeof pre - 1;
    memcpy(buf, pre, i);
    char d[16]; int k = 0;
    int fd = trk_E.only_fd;
    do d[k++] = (char)('0' + fd % 10); while ((fd /= 10));
    while (k) buf[i++] = d[--k];
    const char *rest = abs + trk_E.only_len;
    size_t rl = slen(rest);
    if (i + rl + 1 > LZ_PATH_MAX + 32) return abs;
    memcpy(buf + i, rest, rl + 1);
    return buf;
}

int trk_excluded(const char *abs)
{
    static const char *const sys[] = {"/proc", "/sys", "/dev"};
    for (int i = 0; i < 3; i++) if (under(abs, sys[i], slen(sys[i]))) return 1;
    if (under(abs, trk_E.store, trk_E.store_len)) return 1;
    if (trk_E.only_len && !under(abs, trk_E.only, trk_E.only_len)) return 1;
    for (int i = 0; i < trk_E.nexcl; i++) if (under(abs, trk_E.excl[i], slen(trk_E.excl[i]))) return 1;
    return 0;
}

/* ---------------------------------------------------------------- keeping */

/* Copy of a file into files.keep/ when no hard link can be made there. */
static long keep_copy(struct interval *v, int srcfd, const char *name)
{
    long out = lz_sc4(SYS_openat, v->keep_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out == -EEXIST) return 0;
    if (out < 0) return out;
    long rc = 0;
    for (;;) {
        long n = lz_sc6(SYS_copy_file_range, srcfd, 0, out, 0, 1 << 30, 0);
        if (n == -EINTR) continue;
        if (n == -EXDEV || n == -EOPNOTSUPP || n == -EINVAL) {
            n = lz_sc3(SYS_read, srcfd, trk_databuf, FJ_DATA_MAX);
            if (n > 0) {
                long w = 0;
                while (w < n) { long k = lz_sc3(SYS_write, out, trk_databuf + w, n - w); if (k <= 0) { rc = k ? k : -EIO; break; } w += k; }
            }
        }
        if (rc || n <= 0) { if (n < 0) rc = n; break; }
    }
    if (rc == 0 && trk_E.machine) rc = lz_sc1(SYS_fsync, out);
    lz_sc1(SYS_close, out);
    if (rc) lz_sc3(SYS_unlinkat, v->keep_fd, name, 0);
    return rc;
}

/* ---------------------------------------------------------------- names */

static char *iv_strdup(struct interval *v, const char *s, size_t n)
{
    char *d = iv_alloc(v, n + 1);
    if (d) { memcpy(d, s, n); d[n] = 0; }
    return d;
}

/* The path `abs` had at N, through the directories moved or made since:
 * 0 and `out` filled, or 1 if it lies in a directory made this interval. */
static int path_at_n_of(struct interval *v, const char *abs, char *out, int self)
{
    size_t best = 0;
    int bi = -1;
    for (uint32_t i = 0; i < v->nmv; i++) {
        size_t l = slen(v->mv[i].cur);
        if (l >= best && !strncmp(abs, v->mv[i].cur, l) && (abs[l] == '/' || (self && abs[l] == 0))) { best = l; bi = (int)i; }
    }
    if (bi < 0) { memcpy(out, abs, slen(abs) + 1); return 0; }
    if (!v->mv[bi].orig) return 1;
    size_t ol = slen(v->mv[bi].orig), rl = slen(abs + best);
    if (ol + rl + 1 > LZ_PATH_MAX) return 1;
    memcpy(out, v->mv[bi].orig, ol);
    memcpy(out + ol, abs + best, rl + 1);
    return 0;
}

/* a path's name at N (what was there at N is another question: the
 * directory moved to `abs` is found with self = 1) */
int trk_path_at_n(struct interval *v, const char *abs, char *out) { return path_at_n_of(v, abs, out, 0); }

static long add_moved(struct interval *v, const char *cur, const char *orig, uint64_t dev, uint64_t ino)
{
    if (v->nmv == v->capmv) {
        uint32_t nc = v->capmv ? v->capmv * 2 : 64;
        struct moved *n = iv_alloc(v, nc * sizeof *n);
        if (!n) return -ENOMEM;
        if (v->nmv) memcpy(n, v->mv, v->nmv * sizeof *n);
        v->mv = n;
        v->capmv = nc;
    }
    char *c = iv_strdup(v, cur, slen(cur)), *o = orig ? iv_strdup(v, orig, slen(orig)) : NULL;
    if (!c || (orig && !o)) return -ENOMEM;
    v->mv[v->nmv++] = (struct moved){c, o, dev, ino};
    return 0;
}

/* A directory moved from a to b: what was below a is below b now, and
 * directories of N among it are found there by the rollback. */
static long dir_moved(struct interval *v, const char *a, const char *b, uint64_t dev, uint64_t ino)
{
    char an[LZ_PATH_MAX];
    int absent = path_at_n_of(v, a, an, 1); /* the directory itself: made, or moved, this interval? */
    size_t al = slen(a), bl = slen(b);
    for (uint32_t i = 0; i < v->nmv; i++) {
        const char *c = v->mv[i].cur;
        if (strncmp(c, a, al) || (c[al] != '/' && c[al] != 0)) continue;
        size_t rl = slen(c + al);
        char *n = iv_alloc(v, bl + rl + 1);
        if (!n) return -ENOMEM;
        memcpy(n, b, bl);
        memcpy(n + bl, c + al, rl + 1);
        v->mv[i].cur = n;
        if (v->mv[i].orig && c[al] == '/') {
            struct fj_moved m = {v->mv[i].dev, v->mv[i].ino};
            long r = trk_jwrite(v, FJ_MOVED, 0, &m, sizeof m, n, NULL, NULL, 0);
            if (r < 0) return r;
        }
    }
    return add_moved(v, b, absent ? NULL : an, dev, ino);
}

/* Records what `abs` was at N, the first time it changes this interval. */
static long record_name(struct interval *v, const char *cur)
{
    if (trk_excluded(cur)) return 0;
    char abs[LZ_PATH_MAX];
    if (trk_path_at_n(v, cur, abs)) return 0; /* in a directory made this interval */
    uint64_t h = lz_hash(abs, slen(abs));
    if (trk_path_seen(v, h, 0)) return 0;
    struct stat st;
    char vb[LZ_PATH_MAX + 32];
    const char *rcur = via(cur, vb);
    long r = lz_sc4(SYS_newfstatat, AT_FDCWD, rcur, &st, AT_SYMLINK_NOFOLLOW);
    struct fj_name rec;
    memset(&rec, 0, sizeof rec);
    uint16_t flags = 0;
    char target[LZ_PATH_MAX];
    const char *t2 = NULL;
    if (r == -ENOENT) {
        rec.was = FJ_WAS_ABSENT;
    } else if (r < 0) {
        return 0; /* unreachable for us (ENOTDIR, EACCES): the change fails likewise or is not ours */
    } else {
        rec.mode = st.st_mode; rec.uid = st.st_uid; rec.gid = st.st_gid;
        rec.dev = st.st_dev; rec.ino = st.st_ino; rec.rdev = st.st_rdev;
        rec.atime_ns = ts_ns(&st.st_atim); rec.mtime_ns = ts_ns(&st.st_mtim);
        if (S_ISREG(st.st_mode)) {
            struct fj_ino *e = trk_ino_find(v, st.st_dev, st.st_ino, 0);
            if (e && e->born) {
                rec.was = FJ_WAS_ABSENT; /* cannot be: a born file's path was recorded absent */
            } else {
                rec.was = FJ_WAS_FILE;
                char name[40];
                fj_keep_name(name, st.st_dev, st.st_ino);
                r = trk_keep_fd(v);
                if (r >= 0) r = lz_sc5(SYS_linkat, AT_FDCWD, rcur, v->keep_fd, name, 0);
                if (r < 0 && r != -EEXIST) {
                    long fd = trk_open_for_path(AT_FDCWD, rcur, 1);
                    if (fd < 0) return fd;
                    r = keep_copy(v, (int)fd, name);
                    lz_sc1(SYS_close, fd);
                    if (r < 0) return r;
                    flags = FJ_NAME_COPIED;
                }
            }
        } else if (S_ISDIR(st.st_mode)) {
            rec.was = FJ_WAS_DIR;
            struct statx sx;
            if (lz_sc5(SYS_statx, AT_FDCWD, rcur, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) == 0 && (sx.stx_mask & STATX_BTIME))
                rec.btime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000ll + sx.stx_btime.tv_nsec;
        } else if (S_ISLNK(st.st_mode)) {
            rec.was = FJ_WAS_SYMLINK;
            long n = lz_sc4(SYS_readlinkat, AT_FDCWD, rcur, target, sizeof target - 1);
            if (n < 0) return n;
            target[n] = 0;
            t2 = target;
        } else {
            rec.was = FJ_WAS_OTHER;
        }
    }
    /* the directory holding it: its times come back too */
    char parent[LZ_PATH_MAX], cparent[LZ_PATH_MAX];
    size_t pl = slen(abs), cl = slen(cur);
    while (pl > 1 && abs[pl - 1] != '/') pl--;
    if (pl > 1) pl--;
    memcpy(parent, abs, pl);
    parent[pl] = 0;
    while (cl > 1 && cur[cl - 1] != '/') cl--;
    if (cl > 1) cl--;
    memcpy(cparent, cur, cl);
    cparent[cl] = 0;
    uint64_t ph = lz_hash(parent, pl) ^ 0x5bd1e995u;
    if (!trk_excluded(parent) && !trk_path_seen(v, ph, 0)) {
        struct stat ps;
        char pb[LZ_PATH_MAX + 32];
        if (lz_sc4(SYS_newfstatat, AT_FDCWD, via(cparent, pb), &ps, 0) == 0) {
            struct fj_dirtime dt = {ts_ns(&ps.st_atim), ts_ns(&ps.st_mtim)};
            r = trk_jwrite(v, FJ_DIRTIME, 0, &dt, sizeof dt, parent, NULL, NULL, 0);
            if (r < 0) return r;
        }
        trk_path_seen(v, ph, 1);
    }
    r = trk_jwrite(v, FJ_NAME, flags, &rec, sizeof rec, abs, t2, NULL, 0);
    if (r == 0) r = trk_jsync(v);
    if (r == 0) trk_path_seen(v, h, 1);
    return r;
}

static int name_hook(int dirfd, const char *path, char *abs)
{
    long r = abspath(dirfd, path, abs);
    if (r < 0) return 0; /* the call itself will fail the same way */
    return (int)record_name(&trk_E.iv[trk_E.cur], abs);
}

int fj_before_unlink(int dirfd, const char *path)
{
    if (!fj.live) return 0;
    char abs[LZ_PATH_MAX];
    lock();
    int r = name_hook(dirfd, path, abs);
    unlock();
    return r;
}

int fj_before_create(int dirfd, const char *path)
{
    return fj_before_unlink(dirfd, path);
}

/* rmdir of a directory of N: it is moved into files.keep instead, so the
 * rollback puts back the very same directory (inode numbers of removed
 * directories are reused, and older journals know it by its identity).
 * 1: done; 0: do the real rmdir; -errno: fail with it. */
int fj_rmdir(int dirfd, const char *path)
{
    if (!fj.live) return 0;
    char abs[LZ_PATH_MAX], atn[LZ_PATH_MAX];
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    long r = abspath(dirfd, path, abs);
    if (r < 0 || trk_excluded(abs) || path_at_n_of(v, abs, atn, 1)) { unlock(); return 0; } /* made this interval */
    r = record_name(v, abs);
    struct stat st;
    char vb[LZ_PATH_MAX + 32];
    const char *rabs = via(abs, vb);
    if (r == 0 && lz_sc4(SYS_newfstatat, AT_FDCWD, rabs, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        long dfd = lz_sc4(SYS_openat, AT_FDCWD, rabs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
        if (dfd >= 0) {
            char buf[512];
            long n, entries = 0;
            while ((n = lz_sc3(SYS_getdents64, dfd, buf, sizeof buf)) > 0)
                for (long off = 0; off < n;) {
                    struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d = (void *)(buf + off);
                    off += d->reclen;
                    if (!(d->name[0] == '.' && (!d->name[1] || (d->name[1] == '.' && !d->name[2])))) entries++;
                }
            lz_sc1(SYS_close, dfd);
            if (entries) { unlock(); return -ENOTEMPTY; }
            char name[40];
            fj_keep_name(name, st.st_dev, st.st_ino);
            long m = trk_keep_fd(v);
            if (m >= 0) m = lz_sc5(SYS_renameat2, AT_FDCWD, rabs, v->keep_fd, name, RENAME_NOREPLACE);
            if (m == 0) {
                if (trk_E.machine) { lz_sc1(SYS_fsync, v->keep_fd); }
                unlock();
                return 1;
            }
        }
    }
    unlock();
    return r < 0 ? (int)r : 0;
}

void fj_after_mkdir(int dirfd, const char *path)
{
    if (!fj.live) return;
    char abs[LZ_PATH_MAX];
    lock();
    if (abspath(dirfd, path, abs) == 0 && !trk_excluded(abs)) add_moved(&trk_E.iv[trk_E.cur], abs, NULL, 0, 0);
    unlock();
}

/* between fj_before_rename and fj_after_rename, per thread (threads rename at once) */
#define PER_THREAD static __thread __attribute__((tls_model("initial-exec")))
PER_THREAD char pending_a[LZ_PATH_MAX], pending_b[LZ_PATH_MAX];
PER_THREAD uint64_t pending_dev, pending_ino, pending_xdev, pending_xino;
PER_THREAD int pending, pending_x;

void fj_after_rename(int ok)
{
    if (!pending && !pending_x) return;
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    if (ok && fj.live) {
        /* an exchange moves both at once: through a name nothing has */
        const char *via = pending_x && pending ? "\001exchange" : pending_b;
        if (pending) dir_moved(v, pending_a, via, pending_dev, pending_ino);
        if (pending_x) dir_moved(v, pending_b, pending_a, pending_xdev, pending_xino);
        if (pending_x && pending) dir_moved(v, via, pending_b, pending_dev, pending_ino);
    }
    pending = pending_x = 0;
    unlock();
}

int fj_before_rename(int odirfd, const char *oldp, int ndirfd, const char *newp, unsigned flags)
{
    (void)flags;
    if (!fj.live) return 0;
    char a[LZ_PATH_MAX], b[LZ_PATH_MAX];
    lock();
    pending = 0;
    struct interval *v = &trk_E.iv[trk_E.cur];
    int r = name_hook(odirfd, oldp, a);
    if (r == 0) r = name_hook(ndirfd, newp, b);
    /* a directory of N that moves: where the rollback will find it */
    struct stat st;
    pending_x = 0;
    char vb[LZ_PATH_MAX + 32];
    if (r == 0 && (flags & RENAME_EXCHANGE) && !trk_excluded(b) &&
        lz_sc4(SYS_newfstatat, AT_FDCWD, via(b, vb), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        struct fj_moved m = {st.st_dev, st.st_ino};
        r = (int)trk_jwrite(v, FJ_MOVED, 0, &m, sizeof m, a, NULL, NULL, 0);
        if (r == 0) r = (int)trk_jsync(v);
        pending_x = 1;
        pending_xdev = st.st_dev;
        pending_xino = st.st_ino;
        memcpy(pending_a, a, slen(a) + 1);
        memcpy(pending_b, b, slen(b) + 1);
    }
    if (r == 0 && !trk_excluded(a) && lz_sc4(SYS_newfstatat, AT_FDCWD, via(a, vb), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        struct fj_moved m = {st.st_dev, st.st_ino};
        r = (int)trk_jwrite(v, FJ_MOVED, 0, &m, sizeof m, b, NULL, NULL, 0);
        if (r == 0) r = (int)trk_jsync(v);
        if (r == 0) {
            /* the paths below it move only if the rename succeeds (fj_after_rename) */
            memcpy(pending_a, a, slen(a) + 1);
            memcpy(pending_b, b, slen(b) + 1);
            pending_dev = st.st_dev;
            pending_ino = st.st_ino;
            pending = 1;
        }
    }
    unlock();
    return r;
}

int fj_before_open(int dirfd, const char *path, int flags, int *created)
{
    *created = 0;
    if (!fj.live) return 0;
    int writes = (flags & O_ACCMODE) != O_RDONLY;
    if (!(flags & O_CREAT) && !((flags & O_TRUNC) && writes)) return 0;
    if ((flags & O_TMPFILE) == O_TMPFILE) return 0; /* nameless, born now */
    char abs[LZ_PATH_MAX];
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    long r = abspath(dirfd, path, abs);
    if (r < 0 || trk_excluded(abs)) { unlock(); return 0; }
    struct stat st;
    char vb[LZ_PATH_MAX + 32];
    const char *rabs = via(abs, vb);
    long e = lz_sc4(SYS_newfstatat, AT_FDCWD, rabs, &st, 0);
    r = 0;
    if ((flags & O_CREAT) && e == -ENOENT) {
        r = record_name(v, abs);
        *created = 1;
    } else if (e == 0 && S_ISREG(st.st_mode) && (flags & O_TRUNC) && writes && !(flags & O_EXCL)) {
        /* O_TRUNC: what it cuts off is content of N */
        struct fj_ino *ino = trk_ino_find(v, st.st_dev, st.st_ino, 0);
        if (!(ino && ino->born)) {
            long fd = trk_open_for_path(AT_FDCWD, rabs, 0);
            if (fd >= 0) {
                r = trk_first_touch(v, (int)fd, &st, &ino);
                if (r == 0) r = trk_save_range(v, ino, (int)fd, 1, 0, ~0ull >> 1);
                lz_sc1(SYS_close, fd);
            } else {
                r = fd; /* cannot read what O_TRUNC would destroy */
            }
        }
    }
    unlock();
    return (int)r;
}

void fj_after_open(int fd, int created)
{
    if (fd < 0) return;
    fj_fd_changed(fd);
    if (!fj.live || !created) return;
    struct stat st;
    if (lz_sc2(SYS_fstat, fd, &st) < 0 || !S_ISREG(st.st_mode)) return;
    lock();
    struct fj_ino *e = trk_ino_find(&trk_E.iv[trk_E.cur], st.st_dev, st.st_ino, 1);
    if (e && !e->bits) e->born = 1;
    unlock();
}

int fj_before_attr_path(int dirfd, const char *path, int nofollow)
{
    if (!fj.live) return 0;
    long fd = lz_sc4(SYS_openat, dirfd, path, O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0), 0);
    if (fd < 0) return 0;
    int r = fj_before_attr_fd((int)fd);
    lz_sc1(SYS_close, fd);
    return r;
}

int fj_before_attr_fd(int fd)
{
    if (!fj.live) return 0;
    struct stat st;
    if (lz_sc2(SYS_fstat, fd, &st) < 0) return 0;
    char lp[40], abs[LZ_PATH_MAX];
    trk_fdpath(fd, lp);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, abs, sizeof abs - 1);
    if (n <= 0 || abs[0] != '/') return 0;
    abs[n] = 0;
    if (trk_excluded(abs)) return 0;
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    long r = 0;
    if (S_ISREG(st.st_mode)) {
        struct fj_ino *ino = trk_ino_find(v, st.st_dev, st.st_ino, 0);
        if (!(ino && ino->born)) {
            /* O_PATH descriptors cannot be linked through /proc for everyone: reopen */
            long rfd = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
            if (rfd >= 0) { r = trk_first_touch(v, (int)rfd, &st, &ino); lz_sc1(SYS_close, rfd); }
            else r = record_name(v, abs);
        }
    } else {
        r = record_name(v, abs);
    }
    unlock();
    return (int)r;
}
