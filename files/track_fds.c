/* Descriptors: the engine's own, what writes through the program's need
 * (classified once per interval), saving the bytes of N they would
 * overwrite, and the hooks of write, truncate and fallocate
 * (track_internal.h). */
#include "track_internal.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <string.h>
#include <sys/stat.h>

/* ---------------------------------------------------------------- the engine's descriptors */

long trk_own_fd(long fd)
{
    if (fd < 0) return fd;
    long n = lz_sc3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, OWN_FD_BASE);
    lz_sc1(SYS_close, fd);
    return n;
}

int trk_engine_fd(int fd)
{
    for (int i = 0; i < 2; i++) {
        if (trk_E.iv[i].log_fd == fd || trk_E.iv[i].keep_fd == fd || trk_E.iv[i].data_fd == fd || trk_E.iv[i].dir_fd == fd ||
            trk_E.iv[i].sm_fd == fd || trk_E.iv[i].pend_fd == fd)
            return 1;
        for (uint32_t s = 0; s < trk_E.iv[i].ino_n; s++)
            if (trk_E.iv[i].inos[s].rfd == fd) return 1;
    }
    return 0;
}

/* (the mappings' descriptors are the engine's too, but name files it tracks) */
int fj_is_own_fd(int fd) { return trk_engine_fd(fd) || trk_maps_fd(fd); }

void trk_fdpath(int fd, char *lp)
{
    static const char dir[] = "/proc/self/fd/";
    memcpy(lp, dir, sizeof dir - 1);
    char tmp[12]; int k = 0, i = sizeof dir - 1;
    do tmp[k++] = (char)('0' + fd % 10); while ((fd /= 10));
    while (k) lp[i++] = tmp[--k];
    lp[i] = 0;
}

/* ---------------------------------------------------------------- keeping */

/* The first change of a pre-existing inode in this interval: its size, mode
 * and times at N, and its name at N.  No link is made (the program would see
 * its link count grow: gzip, for one, then refuses the file): a change of its
 * names links it into files.keep then, and the rollback finds it there or,
 * names restored, at its name. */
long trk_first_touch(struct interval *v, int fd, const struct stat *st, struct fj_ino **out)
{
    struct fj_ino *e = trk_ino_find(v, st->st_dev, st->st_ino, 1);
    if (!e) return -ENOMEM;
    *out = e;
    if (e->born || e->bits) return 0; /* known this interval */
    char lp[40], path[LZ_PATH_MAX], atn[LZ_PATH_MAX];
    trk_fdpath(fd, lp);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    if (n > LZ_DELETED_LEN && !strcmp(path + n - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) path[n - LZ_DELETED_LEN] = 0;
    long r;
    uint16_t flags = 0;
    if (path[0] == '/') {
        /* reached through a name that changed this interval (a link made
         * since N, say): that name may not be its name at N, so keep it */
        int absent = trk_path_at_n(v, path, atn);
        if (absent || trk_path_seen(v, lz_hash(atn, slen(atn)), 0)) {
            char name[40];
            fj_keep_name(name, st->st_dev, st->st_ino);
            r = trk_keep_fd(v);
            if (r >= 0) r = lz_sc5(SYS_linkat, AT_FDCWD, lp, v->keep_fd, name, AT_SYMLINK_FOLLOW);
            /* no link possible: found by name, as best it can; a link made is
             * said in the record, so that its loss is found (journal_read.c) */
            if (r == 0 || r == -EEXIST) flags = FJ_INODE_KEPT;
        }
        if (!absent) memcpy(path, atn, slen(atn) + 1);
    }
    /* the size every process of the job measures its undo against (track_shared.c) */
    e->orig = (uint64_t)st->st_size;
    struct sm_ent *sm = trk_sm_entry(v, e);
    if (flags || !sm || !trk_sm_inode_done(sm)) {
        struct fj_inode rec = {st->st_dev, st->st_ino, (uint64_t)st->st_size, st->st_mode, st->st_uid, st->st_gid, 0,
                               ts_ns(&st->st_atim), ts_ns(&st->st_mtim)};
        r = trk_jwrite(v, FJ_INODE, flags, &rec, sizeof rec, path, NULL, NULL, 0);
        if (r == 0) r = trk_jsync(v);
        if (r < 0) return r;
        if (sm) trk_sm_inode_mark(sm);
    }
    uint64_t nb = (e->orig + FJ_BLOCK - 1) / FJ_BLOCK;
    e->bits = iv_alloc(v, ((nb + 63) / 64 + 1) * 8);
    if (!e->bits) return -ENOMEM;
    memset(e->bits, 0, ((nb + 63) / 64 + 1) * 8);
    return 0;
}

/* A descriptor to read the old bytes through: the program's own if it is
 * open for reading, else one of ours, opened once per inode and interval. */
static long read_handle(struct fj_ino *e, int fd, int readable)
{
    if (readable) return fd;
    if (e->rfd >= 0) return e->rfd;
    char lp[40];
    trk_fdpath(fd, lp);
    long r = trk_own_fd(lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC, 0));
    if (r >= 0) e->rfd = (int32_t)r;
    return r;
}

/* Block b is saved this interval: by this process (its own tables), or by
 * any process of the job (the shared map: its record is committed). */
static int saved(struct interval *v, struct fj_ino *e, uint64_t b)
{
    if (e->bits[b / 64] & (1ull << (b % 64))) return 1;
    if (!e->sm || !trk_sm_saved(v, e->sm, b)) return 0;
    e->bits[b / 64] |= 1ull << (b % 64);
    return 1;
}

static long read_full(long fd, char *buf, uint64_t n, uint64_t off)
{
    uint64_t got = 0;
    while (got < n) {
        long k = lz_sc4(SYS_pread64, fd, buf + got, n - got, off + got);
        if (k == -EINTR) continue;
        if (k < 0) return k;
        if (k == 0) { memset(buf + got, 0, n - got); break; } /* shrunk meanwhile */
        got += (uint64_t)k;
    }
    return 0;
}

/* The n bytes at o as a reflink into files.data (no second copy of them in
 * the page cache or on the disk), read back for their checksum: the bytes
 * the rollback will read are the ones hashed (another process of the job
 * may write the range between a read of the file and the clone; its own
 * record is then the earlier one, and ours must not look damaged).  0, or
 * -errno: then they are copied. */
static long clone_run(struct interval *v, struct fj_ino *e, long rfd, uint64_t o, uint64_t n)
{
    if (!trk_E.clone_min || n < trk_E.clone_min || e->noclone) return -EOPNOTSUPP;
    struct file_clone_range cr = {rfd, o, n, v->data_off};
    long r = lz_sc3(SYS_ioctl, v->data_fd, FICLONERANGE, &cr);
    /* EINVAL: this range is not aligned to the file system's blocks */
    if (r < 0 && r != -EINVAL && r != -EINTR) e->noclone = 1; /* no reflinks there (ext4), another file system... */
    if (r == 0) r = read_full(v->data_fd, trk_databuf, n, v->data_off);
    return r;
}

/* Saves blocks [b, run) of e: the bytes into files.data (a reflink, or a
 * copy), then the record; the other processes skip them from then on (only
 * then: with machine durability, once the record is on the disk). */
static long save_run(struct interval *v, struct fj_ino *e, long rfd, uint64_t b, uint64_t run)
{
    uint64_t o = b * FJ_BLOCK, n = run * FJ_BLOCK > e->orig ? e->orig - o : (run - b) * FJ_BLOCK;
    long r;
    if ((r = trk_data_fd(v)) < 0) return r;
    /* the bytes first, whole pages, then the record that points at them */
    uint64_t padded = (n + 4095) & ~4095ull;
    const char *bytes = trk_databuf;
    char *at;
    if (clone_run(v, e, rfd, o, n) == 0) {
    } else if (n == padded && (at = trk_data_at(v, n)) && read_full(rfd, at, n, o) == 0) {
        bytes = at; /* read straight into files.data's page cache (track_data.c) */
    } else {
        if ((r = read_full(rfd, trk_databuf, n, o)) < 0) return r;
        if (padded > n) memset(trk_databuf + n, 0, padded - n);
        for (uint64_t w = 0; w < padded;) {
            long k = lz_sc4(SYS_pwrite64, v->data_fd, trk_databuf + w, padded - w, v->data_off + w);
            if (k == -EINTR) continue;
            if (k <= 0) return k ? k : -EIO;
            w += (uint64_t)k;
        }
    }
    if (trk_E.machine && (r = lz_sc1(SYS_fdatasync, v->data_fd)) < 0) return r;
    struct fj_data d = {e->dev, e->ino, o, v->data_off, n, XXH3_64bits(bytes, n)};
    v->data_off += padded;
    if ((r = trk_jwrite(v, FJ_DATA, 0, &d, sizeof d, NULL, NULL, NULL, 0)) < 0) return r;
    for (uint64_t i = b; i < run; i++) e->bits[i / 64] |= 1ull << (i % 64);
    if (e->sm) {
        if ((r = trk_jsync(v)) < 0) return r;
        trk_sm_mark(v, e->sm, b, run);
    }
    return 0;
}

/* Saves the content at N of [off, off+len) not saved yet this interval, by
 * any process of the job.  First the blocks no other process is saving
 * (claimed run by run), then, for those another one claimed, its records
 * are waited for (or, if it stalls, saved here too). */
long trk_save_range(struct interval *v, struct fj_ino *e, int fd, int readable, uint64_t off, uint64_t len)
{
    if (e->born || off >= e->orig) return 0;
    /* past either size no undo is needed (track_shared.c) */
    struct sm_ent *sm = trk_sm_entry(v, e);
    uint64_t lim = sm && trk_sm_orig(sm) < e->orig ? trk_sm_orig(sm) : e->orig;
    if (off >= lim) return 0;
    uint64_t end = len > lim - off ? lim : off + len;
    uint64_t bend = (end + FJ_BLOCK - 1) / FJ_BLOCK;
    long rfd = -1, r = 0;
    int wrote = 0, pending = 0;
    for (int pass = 0; pass < 2 && (pass == 0 || pending); pass++) {
        for (uint64_t b = off / FJ_BLOCK; b < bend;) {
            if (saved(v, e, b)) { b++; continue; }
            if (pass == 0 && sm && !trk_sm_claim(v, sm, b)) { pending = 1; b++; continue; }
            if (pass == 1 && sm && trk_sm_wait(v, sm, b)) { e->bits[b / 64] |= 1ull << (b % 64); b++; continue; }
            uint64_t run = b + 1;
            while (run < bend && (run - b + 1) * FJ_BLOCK <= FJ_DATA_MAX && !saved(v, e, run) &&
                   (pass == 1 || !sm || trk_sm_claim(v, sm, run)))
                run++;
            if (rfd < 0 && (rfd = read_handle(e, fd, readable)) < 0) r = rfd;
            if (r == 0) r = save_run(v, e, rfd, b, run);
            if (r < 0) {
                if (sm && pass == 0) trk_sm_unclaim(v, sm, b, run);
                return r;
            }
            wrote = 1;
            b = run;
        }
    }
    return wrote && !sm ? trk_jsync(v) : 0;
}

/* ---------------------------------------------------------------- descriptors */

int (*fj_launchers)(int fd, uint64_t dev, uint64_t ino, uint32_t mode);

/* Looks at a descriptor once per interval: what writes through it need. */
long trk_classify(struct interval *v, int fd, struct fj_fdent *ent, struct fj_ino **out)
{
    *out = NULL;
    if (ent->gen == fj.gen) {
        if (ent->slot >= 0) *out = &v->inos[ent->slot];
        return 0;
    }
    struct fj_fdent e = {fj.gen, 0, 1, 0, 0, -1};
    struct stat st;
    long r = lz_sc2(SYS_fstat, fd, &st);
    char lp[40], path[LZ_PATH_MAX];
    long n = 0;
    if (r == 0 && S_ISREG(st.st_mode) && !trk_engine_fd(fd)) {
        if (fj_launchers && fj_launchers(fd, st.st_dev, st.st_ino, st.st_mode)) { *ent = e; return 0; } /* not the job's */
        trk_fdpath(fd, lp);
        n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, path, sizeof path - 1);
    }
    if (n <= 0 || path[0] != '/') { *ent = e; return 0; }
    path[n] = 0;
    /* unlinked since N but kept by us (or linked elsewhere): still the job's
     * file; with no link left at all it is nameless, and travels by content */
    if (n > LZ_DELETED_LEN && !strcmp(path + n - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) {
        if (st.st_nlink == 0) { *ent = e; return 0; }
        path[n - LZ_DELETED_LEN] = 0;
    }
    if (trk_excluded(path)) { *ent = e; return 0; }
    struct fj_ino *ino = trk_ino_find(v, st.st_dev, st.st_ino, 0);
    if (!(ino && ino->born)) {
        r = trk_first_touch(v, fd, &st, &ino);
        if (r < 0) return r;
    }
    long fl = lz_sc2(SYS_fcntl, fd, F_GETFL);
    e.all = ino->born || (fl >= 0 && (fl & O_APPEND));
    e.rd = fl >= 0 && (fl & O_ACCMODE) != O_WRONLY;
    e.slot = (int32_t)(ino - v->inos);
    *out = ino;
    *ent = e;
    return 0;
}

static struct fj_fdent *entry_of(int fd, struct fj_fdent *tmp)
{
    return (unsigned)fd < FJ_MAXFD ? &fj.fdt[fd] : tmp;
}

int fj_before_write(int fd, int64_t off, uint64_t len)
{
    if (!fj.live) return 0;
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    struct fj_fdent tmp = {0}, *ent = entry_of(fd, &tmp);
    struct fj_ino *ino;
    long r = trk_classify(v, fd, ent, &ino);
    if (r == 0 && ino && !ent->all) {
        int64_t pos = off;
        if (pos < 0) pos = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
        if (pos >= 0) {
            r = trk_save_range(v, ino, fd, ent->rd, (uint64_t)pos, len);
            if (r == 0 && off < 0 && (uint64_t)pos >= ino->orig) ent->pass = 1;
        }
    }
    unlock();
    return (int)r;
}

int fj_before_clone(int fd, int64_t off, uint64_t len)
{
    return fj_before_write(fd, off, len ? len : ~0ull >> 1);
}

int fj_before_truncate_fd(int fd, int64_t size)
{
    if (!fj.live || size < 0) return 0;
    lock();
    struct interval *v = &trk_E.iv[trk_E.cur];
    struct fj_fdent tmp = {0}, *ent = entry_of(fd, &tmp);
    struct fj_ino *ino;
    long r = trk_classify(v, fd, ent, &ino);
    if (r == 0 && ino) r = trk_save_range(v, ino, fd, ent->rd, (uint64_t)size, ~0ull >> 1);
    unlock();
    return (int)r;
}

int fj_before_fallocate(int fd, int mode, int64_t off, int64_t len)
{
    if (!fj.live) return 0;
    if (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE)) return fj_before_write(fd, off, ~0ull >> 1);
    if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) return fj_before_write(fd, off, (uint64_t)len);
    return fj_before_write(fd, off, 0); /* only grows: record the size */
}

long trk_open_for_path(int dirfd, const char *path, int nofollow)
{
    return lz_sc4(SYS_openat, dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0), 0);
}

int fj_before_truncate_path(int dirfd, const char *path, int64_t size)
{
    if (!fj.live) return 0;
    long fd = trk_open_for_path(dirfd, path, 0);
    if (fd < 0) return 0; /* the truncate fails the same way, or is untracked */
    int r = fj_before_truncate_fd((int)fd, size);
    fj_fd_changed((int)fd);
    lz_sc1(SYS_close, fd);
    return r;
}

void fj_position_moved(int fd)
{
    if (fj.fdt && (unsigned)fd < FJ_MAXFD) fj.fdt[fd].pass = 0;
}

void fj_fd_changed(int fd)
{
    if (fj.fdt && (unsigned)fd < FJ_MAXFD) fj.fdt[fd].gen = 0;
}
