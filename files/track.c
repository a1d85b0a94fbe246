/* Recording side of the file engine (track.h, journal.h). */
#include "track.h"
#include "journal.h"
#include "format.h"
#include "hash.h"
#include "lzsys.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <signal.h>
#include <time.h>

struct fj_global fj;

#define ARENA_BYTES (1ull << 30) /* reserved per interval, committed as used */
#define FDT_BYTES ((((size_t)FJ_MAXFD * sizeof(struct fj_fdent) + FJ_DATA_MAX) + 4095) & ~(size_t)4095)
/* With process durability records are written through a shared mapping of
 * files.log, a window of LOG_WIN bytes per interval: a store into it is in
 * the page cache at once, as a write() would be, without the system call.
 * (Saved bytes go with pwrite: filling files.data through a mapping costs a
 * page fault and page_mkwrite per page, more than the write.) */
#define LOG_WIN (8ull << 20)
#define LOG_WIN_MIN (64ull << 10) /* first window of a journal not the program's: doubled as it fills */
#define ENGINE_BYTES (2 * ARENA_BYTES + FDT_BYTES + 2 * LOG_WIN)
#define OWN_FD_BASE 960          /* the engine's descriptors live up here */
#define MAX_EXCL 64
#define MAX_INOS (1u << 20)      /* inodes changed in one interval */

struct fj_ino {
    uint64_t dev, ino;
    uint64_t orig;     /* size at the start of the interval */
    uint64_t *bits;    /* blocks below `orig` whose content is saved */
    int32_t rfd;       /* a read-only handle, or -1 */
    uint8_t born, used;
};

/* What one interval knows; two of them alternate so a checkpoint can prepare
 * the next while the current one stays valid until the commit. */
struct interval {
    char *arena; size_t used;
    struct fj_ino *inos; uint32_t ino_n;        /* stable: descriptors hold indices */
    uint32_t *ihash; uint32_t ihash_cap;         /* index + 1, open addressing */
    uint64_t *paths; uint32_t path_cap, path_n; /* XXH3 of paths already recorded */
    int dir_fd;                      /* the journal's directory (renamed at will: never by path) */
    int log_fd, keep_fd, data_fd;
    uint64_t log_off, data_off;     /* where the next record / saved bytes go */
    uint64_t index;                  /* the interval's checkpoint N (its BEGIN record) */
    uint64_t nrec;                   /* records in the log (its END record counts them) */
    char *lwin;                      /* the log window (NULL: records go with pwritev) */
    uint64_t lbase, wlen;            /* file offset of its first byte, its length */
    int touched;       /* anything recorded (for machine durability) */
    /* directories moved or made this interval: a path below `cur` was
     * `orig` + the rest at N (NULL: nothing there existed at N) */
    struct moved { char *cur, *orig; uint64_t dev, ino; } *mv;
    uint32_t nmv, capmv;
};

static struct {
    char store[LZ_PATH_MAX];
    size_t store_len;
    int machine;
    char excl[MAX_EXCL][LZ_PATH_MAX / 8];
    int nexcl;
    struct interval iv[2];
    int cur;           /* iv[cur] is live; iv[!cur] is being prepared */
    volatile int lock;
    int warned;
    int main;          /* the job's program: its journal is the directory's top one, files.data may be a spare */
    int pid;           /* the process whose journal iv[] holds (a vfork child shares this memory) */
    int ppid, pfd;     /* a forked child's parent (its pid, its journal directory's descriptor), or 0 */
    uint64_t job[2];   /* the job's identity, in every BEGIN record */
} E;

static char *databuf; /* FJ_DATA_MAX bytes, for copying saved content */
static int path_at_n(struct interval *v, const char *abs, char *out);
static int path_seen(struct interval *v, uint64_t h, int add);

/* ---------------------------------------------------------------- helpers */

static void lock(void) { while (__atomic_exchange_n(&E.lock, 1, __ATOMIC_ACQUIRE)) lz_sc0(SYS_sched_yield); }
static void unlock(void) { __atomic_store_n(&E.lock, 0, __ATOMIC_RELEASE); }

/* For the entries not called inside the runtime's guard (rt_enter: a file
 * call interposed): exit, exec.  A checkpoint signal taken while the lock
 * is held would wait for it forever in fj_prepare: signals wait instead. */
static void signals_wait(uint64_t *saved)
{
    uint64_t all = ~0ull;
    lz_sc4(SYS_rt_sigprocmask, SIG_BLOCK, &all, saved, LZ_KSIGSET_SIZE);
}

static void signals_back(const uint64_t *saved) { lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, saved, NULL, LZ_KSIGSET_SIZE); }

static void lock_quiet(uint64_t *saved)
{
    signals_wait(saved);
    lock();
}

static void unlock_quiet(const uint64_t *saved)
{
    unlock();
    signals_back(saved);
}

static size_t slen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }

static void *iv_alloc(struct interval *v, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > ARENA_BYTES - v->used) return NULL;
    void *p = v->arena + v->used;
    v->used += n;
    return p;
}

static int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec; }

static long own_fd(long fd)
{
    if (fd < 0) return fd;
    long n = lz_sc3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, OWN_FD_BASE);
    lz_sc1(SYS_close, fd);
    return n;
}

int fj_is_own_fd(int fd)
{
    for (int i = 0; i < 2; i++) {
        if (E.iv[i].log_fd == fd || E.iv[i].keep_fd == fd || E.iv[i].data_fd == fd || E.iv[i].dir_fd == fd) return 1;
        for (uint32_t s = 0; s < E.iv[i].ino_n; s++)
            if (E.iv[i].inos[s].rfd == fd) return 1;
    }
    return 0;
}

static void fdpath(int fd, char *lp)
{
    static const char dir[] = "/proc/self/fd/";
    memcpy(lp, dir, sizeof dir - 1);
    char tmp[12]; int k = 0, i = sizeof dir - 1;
    do tmp[k++] = (char)('0' + fd % 10); while ((fd /= 10));
    while (k) lp[i++] = tmp[--k];
    lp[i] = 0;
}

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
            fdpath(dirfd, lp);
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

static int excluded(const char *abs)
{
    static const char *const sys[] = {"/proc", "/sys", "/dev"};
    for (int i = 0; i < 3; i++) if (under(abs, sys[i], slen(sys[i]))) return 1;
    if (under(abs, E.store, E.store_len)) return 1;
    for (int i = 0; i < E.nexcl; i++) if (under(abs, E.excl[i], slen(E.excl[i]))) return 1;
    return 0;
}


/* ---------------------------------------------------------------- windows */

static char *engine_mem; /* [arena 0 | arena 1 | descriptor table + data buffer | log windows], one mapping */

static char *win_area(struct interval *v) { return engine_mem + 2 * ARENA_BYTES + FDT_BYTES + (size_t)(v - E.iv) * LOG_WIN; }

/* Puts anonymous memory back where a window was (the file is let go). */
static void win_drop(char *at, uint64_t len)
{
    lz_sc6(SYS_mmap, (long)at, (long)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* Maps the log window at the page of the next record, its blocks allocated
 * first: a store into it can then not meet a full disk (which would be a
 * SIGBUS in the program); if allocating fails, records go with pwritev and
 * report the error themselves. */
static long log_window(struct interval *v)
{
    uint64_t base = v->log_off & ~4095ull;
    long r = lz_sc4(SYS_fallocate, v->log_fd, 0, base, v->wlen);
    if (r == 0) {
        long a = lz_sc6(SYS_mmap, (long)v->lwin, v->wlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->log_fd, base);
        r = a < 0 && a >= -LZ_MAX_ERRNO ? a : 0;
    }
    if (r < 0) { win_drop(v->lwin, LOG_WIN); v->lwin = NULL; return r; }
    v->lbase = base;
    return 0;
}

/* ---------------------------------------------------------------- journal */

/* The record's stamp: the old state it holds has been read, the change has
 * not happened yet (clock_gettime of CLOCK_MONOTONIC is the vDSO's: no
 * system call, one clock for every process of the machine). */
static uint64_t stamp_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static long pwrite_allv(int fd, struct iovec *iov, int n, uint64_t off)
{
    int first = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].iov_len;
    while (total) {
        long k = lz_sc4(SYS_pwritev, fd, &iov[first], n - first, off);
        if (k == -EINTR) continue;
        if (k <= 0) return k ? k : -EIO;
        total -= (size_t)k;
        off += (uint64_t)k;
        while (k > 0) {
            if ((size_t)k >= iov[first].iov_len) { k -= (long)iov[first].iov_len; iov[first].iov_len = 0; first++; }
            else { iov[first].iov_base = (char *)iov[first].iov_base + k; iov[first].iov_len -= (size_t)k; k = 0; }
        }
        while (first < n && iov[first].iov_len == 0) first++;
    }
    return 0;
}

static long jwrite(struct interval *v, uint16_t type, uint16_t flags, const void *fixed, size_t flen,
                   const char *s1, const char *s2, const void *data, size_t dlen)
{
    static const uint32_t magic = FJ_REC_MAGIC;
    static const char zeros[sizeof(struct fj_rec)];
    struct fj_rec h = {FJ_REC_MAGIC, type, flags, 0, 0, stamp_now()};
    size_t l1 = s1 ? slen(s1) + 1 : 0, l2 = s2 ? slen(s2) + 1 : 0;
    h.len = (uint32_t)(flen + l1 + l2 + dlen);
    struct iovec iov[6] = {{&h, sizeof h}, {(void *)fixed, flen}, {(void *)s1, l1}, {(void *)s2, l2}, {(void *)data, dlen},
                           {(void *)zeros, sizeof zeros}};
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < 5; i++) if (iov[i].iov_len) XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
    h.check = (uint32_t)XXH3_64bits_digest(&st);
    /* the magic commits the record (journal.h): everything else goes first,
     * so a SIGKILL in between leaves magic 0 (torn), never a bad checksum */
    h.magic = 0;
    size_t total = sizeof h + h.len;
    /* >=: a zero byte always follows the records of an open log */
    if (v->lwin && v->log_off + total >= v->lbase + v->wlen) {
        if (v->wlen < LOG_WIN) v->wlen *= 2; /* a small journal stays small on disk (the window is allocated) */
        log_window(v); /* or records go with pwritev from now on */
    }
    if (v->lwin) {
        char *rec = v->lwin + (v->log_off - v->lbase), *at = rec;
        for (int i = 0; i < 5; i++)
            if (iov[i].iov_len) { memcpy(at, iov[i].iov_base, iov[i].iov_len); at += iov[i].iov_len; }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        memcpy(rec, &magic, sizeof magic);
    } else {
        /* the record and a zero header after it (an open log ends in zeros), then its magic */
        long r = pwrite_allv(v->log_fd, iov, 6, v->log_off);
        if (r == 0) {
            struct iovec m = {(void *)&magic, sizeof magic};
            r = pwrite_allv(v->log_fd, &m, 1, v->log_off);
        }
        if (r < 0) return r;
    }
    v->log_off += total;
    v->nrec++;
    v->touched = 1;
    return 0;
}

/* With --durability machine the undo reaches the disk before the change. */
static long jsync(struct interval *v)
{
    if (!E.machine) return 0;
    long r = lz_sc1(SYS_fdatasync, v->log_fd);
    if (r == 0) r = lz_sc1(SYS_fsync, v->keep_fd);
    return r;
}

/* ---------------------------------------------------------------- tables */

static uint64_t mix(uint64_t a, uint64_t b) { uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull); x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; return x ^ (x >> 32); }

static int path_seen(struct interval *v, uint64_t h, int add)
{
    if (add && (v->path_n + 1) * 2 > v->path_cap) {
        uint32_t nc = v->path_cap ? v->path_cap * 2 : 4096;
        uint64_t *np = iv_alloc(v, nc * sizeof *np);
        if (!np) return 0;
        memset(np, 0, nc * sizeof *np);
        for (uint32_t i = 0; i < v->path_cap; i++)
            if (v->paths[i]) { uint32_t s = (uint32_t)(v->paths[i] & (nc - 1)); while (np[s]) s = (s + 1) & (nc - 1); np[s] = v->paths[i]; }
        v->paths = np;
        v->path_cap = nc;
    }
    if (!v->path_cap) return 0;
    if (!h) h = 1;
    uint32_t s = (uint32_t)(h & (v->path_cap - 1));
    while (v->paths[s]) {
        if (v->paths[s] == h) return 1;
        s = (s + 1) & (v->path_cap - 1);
    }
    if (add) { v->paths[s] = h; v->path_n++; }
    return 0;
}

static struct fj_ino *ino_find(struct interval *v, uint64_t dev, uint64_t ino, int add)
{
    if (!v->inos) {
        if (!add) return NULL;
        v->inos = iv_alloc(v, (size_t)MAX_INOS * sizeof *v->inos);
        if (!v->inos) return NULL;
    }
    if (add && (v->ino_n + 1) * 2 > v->ihash_cap) {
        uint32_t nc = v->ihash_cap ? v->ihash_cap * 2 : 1024;
        uint32_t *nh = iv_alloc(v, nc * sizeof *nh);
        if (!nh) return NULL;
        memset(nh, 0, nc * sizeof *nh);
        for (uint32_t i = 0; i < v->ino_n; i++) {
            uint32_t s = (uint32_t)(mix(v->inos[i].dev, v->inos[i].ino) & (nc - 1));
            while (nh[s]) s = (s + 1) & (nc - 1);
            nh[s] = i + 1;
        }
        v->ihash = nh;
        v->ihash_cap = nc;
    }
    if (!v->ihash_cap) return NULL;
    uint32_t s = (uint32_t)(mix(dev, ino) & (v->ihash_cap - 1));
    while (v->ihash[s]) {
        struct fj_ino *e = &v->inos[v->ihash[s] - 1];
        if (e->dev == dev && e->ino == ino) return e;
        s = (s + 1) & (v->ihash_cap - 1);
    }
    if (!add || v->ino_n >= MAX_INOS) return NULL;
    struct fj_ino *e = &v->inos[v->ino_n];
    memset(e, 0, sizeof *e);
    e->used = 1; e->dev = dev; e->ino = ino; e->rfd = -1;
    v->ihash[s] = ++v->ino_n;
    return e;
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
            n = lz_sc3(SYS_read, srcfd, databuf, FJ_DATA_MAX);
            if (n > 0) {
                long w = 0;
                while (w < n) { long k = lz_sc3(SYS_write, out, databuf + w, n - w); if (k <= 0) { rc = k ? k : -EIO; break; } w += k; }
            }
        }
        if (rc || n <= 0) { if (n < 0) rc = n; break; }
    }
    if (rc == 0 && E.machine) rc = lz_sc1(SYS_fsync, out);
    lz_sc1(SYS_close, out);
    if (rc) lz_sc3(SYS_unlinkat, v->keep_fd, name, 0);
    return rc;
}

/* The first change of a pre-existing inode in this interval: its size, mode
 * and times at N, and its name at N.  No link is made (the program would see
 * its link count grow: gzip, for one, then refuses the file): a change of its
 * names links it into files.keep then, and the rollback finds it there or,
 * names restored, at its name. */
static long first_touch(struct interval *v, int fd, const struct stat *st, struct fj_ino **out)
{
    struct fj_ino *e = ino_find(v, st->st_dev, st->st_ino, 1);
    if (!e) return -ENOMEM;
    *out = e;
    if (e->born || e->bits) return 0; /* known this interval */
    char lp[40], path[LZ_PATH_MAX], atn[LZ_PATH_MAX];
    fdpath(fd, lp);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, path, sizeof path - 1);
    path[n > 0 ? n : 0] = 0;
    if (n > LZ_DELETED_LEN && !strcmp(path + n - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) path[n - LZ_DELETED_LEN] = 0;
    long r;
    if (path[0] == '/') {
        /* reached through a name that changed this interval (a link made
         * since N, say): that name may not be its name at N, so keep it */
        int absent = path_at_n(v, path, atn);
        if (absent || path_seen(v, lz_hash(atn, slen(atn)), 0)) {
            char name[40];
            fj_keep_name(name, st->st_dev, st->st_ino);
            r = lz_sc5(SYS_linkat, AT_FDCWD, lp, v->keep_fd, name, AT_SYMLINK_FOLLOW);
            (void)r; /* no link possible: found by name, as best it can */
        }
        if (!absent) memcpy(path, atn, slen(atn) + 1);
    }
    uint16_t flags = 0;
    struct fj_inode rec = {st->st_dev, st->st_ino, (uint64_t)st->st_size, st->st_mode, st->st_uid, st->st_gid, 0,
                           ts_ns(&st->st_atim), ts_ns(&st->st_mtim)};
    r = jwrite(v, FJ_INODE, flags, &rec, sizeof rec, path, NULL, NULL, 0);
    if (r == 0) r = jsync(v);
    if (r < 0) return r;
    e->orig = (uint64_t)st->st_size;
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
    fdpath(fd, lp);
    long r = own_fd(lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC, 0));
    if (r >= 0) e->rfd = (int32_t)r;
    return r;
}

/* Saves the content at N of [off, off+len) not saved yet this interval. */
static long save_range(struct interval *v, struct fj_ino *e, int fd, int readable, uint64_t off, uint64_t len)
{
    if (e->born || off >= e->orig) return 0;
    uint64_t end = len > e->orig - off ? e->orig : off + len;
    uint64_t b = off / FJ_BLOCK, bend = (end + FJ_BLOCK - 1) / FJ_BLOCK;
    long rfd = -1, r = 0;
    int wrote = 0;
    while (b < bend) {
        if (e->bits[b / 64] & (1ull << (b % 64))) { b++; continue; }
        uint64_t run = b;
        while (run < bend && !(e->bits[run / 64] & (1ull << (run % 64))) && (run - b + 1) * FJ_BLOCK <= FJ_DATA_MAX) run++;
        uint64_t o = b * FJ_BLOCK, n = run * FJ_BLOCK > e->orig ? e->orig - o : (run - b) * FJ_BLOCK;
        if (rfd < 0) { rfd = read_handle(e, fd, readable); if (rfd < 0) return rfd; }
        uint64_t got = 0;
        while (got < n) {
            long k = lz_sc4(SYS_pread64, rfd, databuf + got, n - got, o + got);
            if (k == -EINTR) continue;
            if (k < 0) return k;
            if (k == 0) { memset(databuf + got, 0, n - got); got = n; break; } /* shrunk meanwhile */
            got += (uint64_t)k;
        }
        /* the bytes first, whole pages, then the record that points at them */
        uint64_t padded = (n + 4095) & ~4095ull;
        if (padded > n) memset(databuf + n, 0, padded - n);
        for (uint64_t w = 0; w < padded;) {
            long k = lz_sc4(SYS_pwrite64, v->data_fd, databuf + w, padded - w, v->data_off + w);
            if (k == -EINTR) continue;
            if (k <= 0) return k ? k : -EIO;
            w += (uint64_t)k;
        }
        if (E.machine && (r = lz_sc1(SYS_fdatasync, v->data_fd)) < 0) return r;
        struct fj_data d = {e->dev, e->ino, o, v->data_off, n, XXH3_64bits(databuf, n)};
        v->data_off += padded;
        r = jwrite(v, FJ_DATA, 0, &d, sizeof d, NULL, NULL, NULL, 0);
        if (r < 0) return r;
        wrote = 1;
        for (uint64_t i = b; i < run; i++) e->bits[i / 64] |= 1ull << (i % 64);
        b = run;
    }
    return wrote ? jsync(v) : 0;
}

/* ---------------------------------------------------------------- setup */

/* The engine's memory is left out of checkpoints (a restart starts a fresh
 * interval) and mapped anew after one. */

static int map_memory(void)
{
    long a = lz_sc6(SYS_mmap, 0, ENGINE_BYTES, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a < 0 && a >= -LZ_MAX_ERRNO) return -1;
    engine_mem = (char *)a;
    for (int i = 0; i < 2; i++) {
        E.iv[i].arena = engine_mem + (size_t)i * ARENA_BYTES;
        E.iv[i].used = 0;
        E.iv[i].inos = NULL; E.iv[i].ino_n = 0; E.iv[i].ihash = NULL; E.iv[i].ihash_cap = 0;
        E.iv[i].paths = NULL; E.iv[i].path_cap = E.iv[i].path_n = 0;
        E.iv[i].log_fd = E.iv[i].keep_fd = E.iv[i].data_fd = E.iv[i].dir_fd = -1;
        E.iv[i].log_off = E.iv[i].data_off = 0;
        E.iv[i].lwin = NULL;
        E.iv[i].wlen = LOG_WIN;
        E.iv[i].touched = 0;
        E.iv[i].mv = NULL; E.iv[i].nmv = E.iv[i].capmv = 0;
    }
    fj.fdt = (struct fj_fdent *)(engine_mem + 2 * ARENA_BYTES);
    databuf = (char *)fj.fdt + (size_t)FJ_MAXFD * sizeof(struct fj_fdent);
    return 0;
}

int fj_owns(uint64_t start, uint64_t end)
{
    return engine_mem && start >= (uint64_t)engine_mem && end <= (uint64_t)engine_mem + ENGINE_BYTES;
}

int fj_setup(const char *store, int machine, const char *excludes, int main_process, const uint64_t job[2])
{
    E.job[0] = job[0];
    E.job[1] = job[1];
    E.main = main_process;
    E.pid = (int)lz_sc0(SYS_getpid);
    size_t sl = slen(store);
    if (sl >= sizeof E.store) return -1;
    memcpy(E.store, store, sl + 1);
    E.store_len = sl;
    E.machine = machine;
    E.nexcl = 0;
    for (const char *p = excludes; p && *p && E.nexcl < MAX_EXCL;) {
        const char *q = p;
        while (*q && *q != '\n') q++;
        size_t l = (size_t)(q - p);
        if (l && l < sizeof E.excl[0]) { memcpy(E.excl[E.nexcl], p, l); E.excl[E.nexcl][l] = 0; E.nexcl++; }
        p = *q ? q + 1 : q;
    }
    if (map_memory() < 0) return -1;
    fj.gen = 1;
    return 0;
}

/* The log is let go: an END record counting the records before it, and the
 * file cut right after it (journal.h: a sealed log proves its extent). */
static void seal_log(struct interval *v)
{
    if (v->log_fd < 0 || v->nrec == 0) return;
    struct fj_end e = {v->nrec};
    if (jwrite(v, FJ_END, 0, &e, sizeof e, NULL, NULL, NULL, 0) == 0) lz_sc2(SYS_ftruncate, v->log_fd, v->log_off);
    else v->nrec = 0;
}

/* Lets an interval go: trim says the log is ours to cut to its records (a
 * fork child's copy of its parent's interval is not). */
static void iv_close(struct interval *v, int trim)
{
    if (trim) seal_log(v);
    if (v->lwin) win_drop(v->lwin, LOG_WIN);
    v->lwin = NULL;
    if (v->log_fd >= 0) lz_sc1(SYS_close, v->log_fd);
    if (v->keep_fd >= 0) lz_sc1(SYS_close, v->keep_fd);
    if (v->data_fd >= 0) lz_sc1(SYS_close, v->data_fd);
    if (v->dir_fd >= 0) lz_sc1(SYS_close, v->dir_fd);
    for (uint32_t s = 0; s < v->ino_n; s++)
        if (v->inos[s].rfd >= 0) lz_sc1(SYS_close, v->inos[s].rfd);
    if (v->used) lz_sc3(SYS_madvise, v->arena, (v->used + 4095) & ~4095ull, MADV_DONTNEED);
    v->used = 0;
    v->inos = NULL; v->ino_n = 0;
    v->ihash = NULL; v->ihash_cap = 0;
    v->paths = NULL; v->path_cap = v->path_n = 0;
    v->log_fd = v->keep_fd = v->data_fd = v->dir_fd = -1;
    v->log_off = v->data_off = 0;
    v->wlen = LOG_WIN;
    v->touched = 0;
    v->mv = NULL; v->nmv = v->capmv = 0;
}

static void iv_reset(struct interval *v) { iv_close(v, 1); }

/* ---------------------------------------------------------------- descriptors */

/* Looks at a descriptor once per interval: what writes through it need. */
static long classify(struct interval *v, int fd, struct fj_fdent *ent, struct fj_ino **out)
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
    if (r == 0 && S_ISREG(st.st_mode) && !fj_is_own_fd(fd)) {
        fdpath(fd, lp);
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
    if (excluded(path)) { *ent = e; return 0; }
    struct fj_ino *ino = ino_find(v, st.st_dev, st.st_ino, 0);
    if (!(ino && ino->born)) {
        r = first_touch(v, fd, &st, &ino);
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
    struct interval *v = &E.iv[E.cur];
    struct fj_fdent tmp = {0}, *ent = entry_of(fd, &tmp);
    struct fj_ino *ino;
    long r = classify(v, fd, ent, &ino);
    if (r == 0 && ino && !ent->all) {
        int64_t pos = off;
        if (pos < 0) pos = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
        if (pos >= 0) {
            r = save_range(v, ino, fd, ent->rd, (uint64_t)pos, len);
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
    struct interval *v = &E.iv[E.cur];
    struct fj_fdent tmp = {0}, *ent = entry_of(fd, &tmp);
    struct fj_ino *ino;
    long r = classify(v, fd, ent, &ino);
    if (r == 0 && ino) r = save_range(v, ino, fd, ent->rd, (uint64_t)size, ~0ull >> 1);
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

static long open_for_path(int dirfd, const char *path, int nofollow)
{
    return lz_sc4(SYS_openat, dirfd, path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY | (nofollow ? O_NOFOLLOW : 0), 0);
}

int fj_before_truncate_path(int dirfd, const char *path, int64_t size)
{
    if (!fj.live) return 0;
    long fd = open_for_path(dirfd, path, 0);
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

/* ---------------------------------------------------------------- names */

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
static int path_at_n(struct interval *v, const char *abs, char *out) { return path_at_n_of(v, abs, out, 0); }

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
            long r = jwrite(v, FJ_MOVED, 0, &m, sizeof m, n, NULL, NULL, 0);
            if (r < 0) return r;
        }
    }
    return add_moved(v, b, absent ? NULL : an, dev, ino);
}

/* Records what `abs` was at N, the first time it changes this interval. */
static long record_name(struct interval *v, const char *cur)
{
    if (excluded(cur)) return 0;
    char abs[LZ_PATH_MAX];
    if (path_at_n(v, cur, abs)) return 0; /* in a directory made this interval */
    uint64_t h = lz_hash(abs, slen(abs));
    if (path_seen(v, h, 0)) return 0;
    struct stat st;
    long r = lz_sc4(SYS_newfstatat, AT_FDCWD, cur, &st, AT_SYMLINK_NOFOLLOW);
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
            struct fj_ino *e = ino_find(v, st.st_dev, st.st_ino, 0);
            if (e && e->born) {
                rec.was = FJ_WAS_ABSENT; /* cannot be: a born file's path was recorded absent */
            } else {
                rec.was = FJ_WAS_FILE;
                char name[40];
                fj_keep_name(name, st.st_dev, st.st_ino);
                r = lz_sc5(SYS_linkat, AT_FDCWD, cur, v->keep_fd, name, 0);
                if (r < 0 && r != -EEXIST) {
                    long fd = open_for_path(AT_FDCWD, cur, 1);
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
            if (lz_sc5(SYS_statx, AT_FDCWD, cur, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) == 0 && (sx.stx_mask & STATX_BTIME))
                rec.btime_ns = (int64_t)sx.stx_btime.tv_sec * 1000000000ll + sx.stx_btime.tv_nsec;
        } else if (S_ISLNK(st.st_mode)) {
            rec.was = FJ_WAS_SYMLINK;
            long n = lz_sc4(SYS_readlinkat, AT_FDCWD, cur, target, sizeof target - 1);
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
    if (!excluded(parent) && !path_seen(v, ph, 0)) {
        struct stat ps;
        if (lz_sc4(SYS_newfstatat, AT_FDCWD, cparent, &ps, 0) == 0) {
            struct fj_dirtime dt = {ts_ns(&ps.st_atim), ts_ns(&ps.st_mtim)};
            r = jwrite(v, FJ_DIRTIME, 0, &dt, sizeof dt, parent, NULL, NULL, 0);
            if (r < 0) return r;
        }
        path_seen(v, ph, 1);
    }
    r = jwrite(v, FJ_NAME, flags, &rec, sizeof rec, abs, t2, NULL, 0);
    if (r == 0) r = jsync(v);
    if (r == 0) path_seen(v, h, 1);
    return r;
}

static int name_hook(int dirfd, const char *path, char *abs)
{
    long r = abspath(dirfd, path, abs);
    if (r < 0) return 0; /* the call itself will fail the same way */
    return (int)record_name(&E.iv[E.cur], abs);
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
    struct interval *v = &E.iv[E.cur];
    long r = abspath(dirfd, path, abs);
    if (r < 0 || excluded(abs) || path_at_n_of(v, abs, atn, 1)) { unlock(); return 0; } /* made this interval */
    r = record_name(v, abs);
    struct stat st;
    if (r == 0 && lz_sc4(SYS_newfstatat, AT_FDCWD, abs, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        long dfd = lz_sc4(SYS_openat, AT_FDCWD, abs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
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
            long m = lz_sc5(SYS_renameat2, AT_FDCWD, abs, v->keep_fd, name, RENAME_NOREPLACE);
            if (m == 0) {
                if (E.machine) { lz_sc1(SYS_fsync, v->keep_fd); }
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
    if (abspath(dirfd, path, abs) == 0 && !excluded(abs)) add_moved(&E.iv[E.cur], abs, NULL, 0, 0);
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
    struct interval *v = &E.iv[E.cur];
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
    struct interval *v = &E.iv[E.cur];
    int r = name_hook(odirfd, oldp, a);
    if (r == 0) r = name_hook(ndirfd, newp, b);
    /* a directory of N that moves: where the rollback will find it */
    struct stat st;
    pending_x = 0;
    if (r == 0 && (flags & RENAME_EXCHANGE) && !excluded(b) &&
        lz_sc4(SYS_newfstatat, AT_FDCWD, b, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        struct fj_moved m = {st.st_dev, st.st_ino};
        r = (int)jwrite(v, FJ_MOVED, 0, &m, sizeof m, a, NULL, NULL, 0);
        if (r == 0) r = (int)jsync(v);
        pending_x = 1;
        pending_xdev = st.st_dev;
        pending_xino = st.st_ino;
        memcpy(pending_a, a, slen(a) + 1);
        memcpy(pending_b, b, slen(b) + 1);
    }
    if (r == 0 && !excluded(a) && lz_sc4(SYS_newfstatat, AT_FDCWD, a, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
        struct fj_moved m = {st.st_dev, st.st_ino};
        r = (int)jwrite(v, FJ_MOVED, 0, &m, sizeof m, b, NULL, NULL, 0);
        if (r == 0) r = (int)jsync(v);
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
    struct interval *v = &E.iv[E.cur];
    long r = abspath(dirfd, path, abs);
    if (r < 0 || excluded(abs)) { unlock(); return 0; }
    struct stat st;
    long e = lz_sc4(SYS_newfstatat, AT_FDCWD, abs, &st, 0);
    r = 0;
    if ((flags & O_CREAT) && e == -ENOENT) {
        r = record_name(v, abs);
        *created = 1;
    } else if (e == 0 && S_ISREG(st.st_mode) && (flags & O_TRUNC) && writes && !(flags & O_EXCL)) {
        /* O_TRUNC: what it cuts off is content of N */
        struct fj_ino *ino = ino_find(v, st.st_dev, st.st_ino, 0);
        if (!(ino && ino->born)) {
            long fd = open_for_path(AT_FDCWD, abs, 0);
            if (fd >= 0) {
                r = first_touch(v, (int)fd, &st, &ino);
                if (r == 0) r = save_range(v, ino, (int)fd, 1, 0, ~0ull >> 1);
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
    struct fj_ino *e = ino_find(&E.iv[E.cur], st.st_dev, st.st_ino, 1);
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
    fdpath(fd, lp);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, abs, sizeof abs - 1);
    if (n <= 0 || abs[0] != '/') return 0;
    abs[n] = 0;
    if (excluded(abs)) return 0;
    lock();
    struct interval *v = &E.iv[E.cur];
    long r = 0;
    if (S_ISREG(st.st_mode)) {
        struct fj_ino *ino = ino_find(v, st.st_dev, st.st_ino, 0);
        if (!(ino && ino->born)) {
            /* O_PATH descriptors cannot be linked through /proc for everyone: reopen */
            long rfd = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC | O_NONBLOCK, 0);
            if (rfd >= 0) { r = first_touch(v, (int)rfd, &st, &ino); lz_sc1(SYS_close, rfd); }
            else r = record_name(v, abs);
        }
    } else {
        r = record_name(v, abs);
    }
    unlock();
    return (int)r;
}

/* ---------------------------------------------------------------- streams, maps */

/* The lowest position a stream's buffered or future writes can land at. */
static int64_t stream_low(FILE *f, int fd)
{
    int64_t pos = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
    if (pos < 0) return -1;
    if (f->_IO_read_end > f->_IO_read_ptr) pos -= f->_IO_read_end - f->_IO_read_ptr;
    return pos < 0 ? 0 : pos;
}

static int stream_writes(FILE *f)
{
    return f->_fileno >= 0 && !(f->_flags & 0x0008 /* _IO_NO_WRITES */);
}
static int stream_appends(FILE *f) { return (f->_flags & 0x1000 /* _IO_IS_APPENDING */) != 0; }

int fj_stream_opened(FILE *f)
{
    if (!fj.live || !f || !stream_writes(f)) return 0;
    /* appending: only the size at N is needed (recorded on first touch) */
    int64_t low = stream_appends(f) ? 0 : stream_low(f, f->_fileno);
    return low < 0 ? 0 : fj_before_write(f->_fileno, low, stream_appends(f) ? 0 : ~0ull >> 1);
}

int fj_stream_moved(FILE *f)
{
    return fj_stream_opened(f);
}

int fj_fd_reused(int fd)
{
    extern FILE *_IO_list_all;
    extern void _IO_list_lock(void), _IO_list_unlock(void);
    /* not in a vfork child: the tables are its parent's */
    if (!fj.live || lz_sc0(SYS_getpid) != E.pid) return 0;
    int r = 0;
    _IO_list_lock(); /* another thread's fclose frees streams from the list */
    for (FILE *f = _IO_list_all; f && r == 0; f = f->_chain)
        if (f->_fileno == fd) r = fj_stream_opened(f);
    _IO_list_unlock();
    return r;
}

int fj_before_shared_map(int fd, int64_t off, uint64_t len)
{
    return fj_before_write(fd, off, len);
}

/* At the start of an interval: what streams and shared mappings could
 * change without a call we see, saved now. */
static long save_blind(struct interval *v)
{
    extern FILE *_IO_list_all;
    long r = 0;
    for (FILE *f = _IO_list_all; f && r == 0; f = f->_chain) {
        if (!stream_writes(f)) continue;
        struct fj_ino *ino;
        struct fj_fdent tmp = {0};
        r = classify(v, f->_fileno, &tmp, &ino); /* records its size at N, appending or not */
        int64_t low = stream_low(f, f->_fileno);
        if (r == 0 && ino && !tmp.all && low >= 0) r = save_range(v, ino, f->_fileno, tmp.rd, (uint64_t)low, ~0ull >> 1);
    }
    /* writable shared file mappings, from /proc/self/maps */
    static char maps[1 << 18];
    long n = 0, fd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd >= 0) {
        long k;
        while (n < (long)sizeof maps - 1 && (k = lz_sc3(SYS_read, fd, maps + n, sizeof maps - 1 - n)) > 0) n += k;
        lz_sc1(SYS_close, fd);
    }
    maps[n > 0 ? n : 0] = 0;
    for (char *line = maps; *line && r == 0;) {
        char *eol = line;
        while (*eol && *eol != '\n') eol++;
        char save = *eol;
        *eol = 0;
        /* start-end perms offset dev inode path */
        uint64_t s = 0, e = 0, off = 0;
        char *p = line;
        while (*p && *p != '-') { s = s * 16 + (uint64_t)(*p <= '9' ? *p - '0' : (*p | 32) - 'a' + 10); p++; }
        if (*p) p++;
        while (*p && *p != ' ') { e = e * 16 + (uint64_t)(*p <= '9' ? *p - '0' : (*p | 32) - 'a' + 10); p++; }
        if (*p) p++;
        int shared_w = p[1] == 'w' && p[3] == 's';
        p += 5;
        while (*p && *p != ' ') { off = off * 16 + (uint64_t)(*p <= '9' ? *p - '0' : (*p | 32) - 'a' + 10); p++; }
        char *path = p;
        while (*path && *path != '/') path++;
        if (shared_w && *path == '/' && !fj_owns(s, e)) { /* not our own log window */
            long mfd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
            if (mfd >= 0) {
                struct fj_ino *ino;
                struct fj_fdent tmp = {0};
                r = classify(v, (int)mfd, &tmp, &ino);
                if (r == 0 && ino && !ino->born) r = save_range(v, ino, (int)mfd, 1, off, e - s);
                lz_sc1(SYS_close, mfd);
            }
        }
        *eol = save;
        line = *eol ? eol + 1 : eol;
    }
    return r;
}

/* ---------------------------------------------------------------- intervals */

/* A spare left by a dropped checkpoint becomes this interval's files.data:
 * overwriting its pages costs what a native overwrite does, while a new file
 * costs a fresh page per saved page (and the supervisor freeing them later). */
static int adopt_spare(int dfd)
{
    char sp[LZ_PATH_MAX + 32];
    size_t l = E.store_len;
    memcpy(sp, E.store, l);
    for (int i = 0; i < LZ_SPARES; i++) {
        const size_t pl = sizeof("/" LZ_SPARE_PREFIX) - 1;
        memcpy(sp + l, "/" LZ_SPARE_PREFIX, pl);
        sp[l + pl] = (char)('0' + i);
        sp[l + pl + 1] = 0;
        if (lz_sc5(SYS_renameat2, AT_FDCWD, sp, dfd, FJ_DATAFILE, RENAME_NOREPLACE) == 0) return 1;
    }
    return 0;
}

static long pread_full(int fd, void *buf, uint64_t n, uint64_t off)
{
    uint64_t got = 0;
    while (got < n) {
        long k = lz_sc4(SYS_pread64, fd, (char *)buf + got, n - got, off + got);
        if (k == -EINTR) continue;
        if (k <= 0) return k < 0 ? k : -EIO;
        got += (uint64_t)k;
    }
    return 0;
}

/* The end of the valid records of a log from `off` (a record boundary) on,
 * and in *data_end the end of the bytes of files.data its DATA records use:
 * where a journal taken over (after an exec, or a reused pid) goes on. */
static uint64_t scan_log(struct interval *v, int fd, uint64_t off, uint64_t *data_end)
{
    for (;;) {
        struct fj_rec h;
        if (pread_full(fd, &h, sizeof h, off) < 0) break;
        if (h.magic != FJ_REC_MAGIC || h.len > FJ_DATA_MAX || h.type < FJ_INODE || h.type > FJ_TYPE_MAX) break;
        if (pread_full(fd, databuf, h.len, off + sizeof h) < 0) break;
        uint32_t check = h.check;
        h.check = 0;
        XXH3_state_t st;
        XXH3_64bits_reset(&st);
        XXH3_64bits_update(&st, &h, sizeof h);
        if (h.len) XXH3_64bits_update(&st, databuf, h.len);
        if ((uint32_t)XXH3_64bits_digest(&st) != check) break; /* torn: its change never happened */
        if (h.type == FJ_END) break; /* the log goes on here: its END is written again when it is let go */
        if (h.type == FJ_BEGIN && h.len >= sizeof(struct fj_begin)) {
            struct fj_begin b;
            memcpy(&b, databuf, sizeof b);
            v->index = b.index;
        }
        v->nrec++;
        if (h.type == FJ_DATA && h.len >= sizeof(struct fj_data)) {
            struct fj_data d;
            memcpy(&d, databuf, sizeof d);
            uint64_t e = d.data_off + ((d.length + 4095) & ~4095ull);
            if (e > *data_end) *data_end = e;
        }
        off += sizeof h + h.len;
    }
    return off;
}

/* Opens the journal in the directory dfd (taken over: closed with the
 * interval).  spare: files.data may be a spare of the store (the program's
 * own top-level journal only).  An existing log is continued after its last
 * valid record (from log_hint on); adopt: the journal of this process before
 * an exec, whose files.data may be a spare: continued after the bytes its
 * records use (at least data_hint), else after its end. */
static long open_interval_at(struct interval *v, long dfd, int spare, int adopt, uint64_t log_hint, uint64_t data_hint,
                             uint64_t nrec_hint, uint64_t index)
{
    if (dfd < 0) return dfd;
    v->index = index;
    v->nrec = 0;
    v->dir_fd = (int)dfd;
    long r = lz_sc3(SYS_mkdirat, dfd, FJ_KEEP, 0700);
    if (r < 0 && r != -EEXIST) return r;
    v->keep_fd = (int)own_fd(lz_sc4(SYS_openat, dfd, FJ_KEEP, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
    if (v->keep_fd < 0) return v->keep_fd;
    /* a spare keeps its size (cutting it would stall the program while the
     * kernel drops the pages): only what DATA records point at counts */
    int recycled = spare && adopt_spare((int)dfd);
    v->data_fd = (int)own_fd(lz_sc4(SYS_openat, dfd, FJ_DATAFILE, O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    if (v->data_fd < 0) return v->data_fd;
    v->log_fd = (int)own_fd(lz_sc4(SYS_openat, dfd, FJ_LOG, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (v->log_fd < 0) return v->log_fd;
    uint64_t data_end = 0;
    /* records before log_hint were counted by the image before an exec (nrec_hint) */
    v->nrec = nrec_hint;
    v->log_off = scan_log(v, v->log_fd, log_hint, &data_end);
    struct stat ds;
    if (lz_sc2(SYS_fstat, v->data_fd, &ds) < 0) ds.st_size = 0;
    if (recycled) v->data_off = data_end;
    else if (adopt) v->data_off = data_end > data_hint ? data_end : data_hint;
    else v->data_off = ((uint64_t)ds.st_size + 4095) & ~4095ull;
    v->wlen = E.main ? LOG_WIN : LOG_WIN_MIN;
    if (E.machine && (r = lz_sc1(SYS_fsync, dfd)) < 0) return r; /* its entries, before any record counts */
    if (!E.machine) {
        /* machine durability syncs each record: no window */
        v->lwin = win_area(v);
        log_window(v);
    }
    if (v->log_off == 0) {
        /* a new log says whose it is: the job, the interval, the process */
        struct fj_begin b = {{E.job[0], E.job[1]}, v->index, E.pid, 0};
        r = jwrite(v, FJ_BEGIN, 0, &b, sizeof b, NULL, NULL, NULL, 0);
        if (r == 0) r = jsync(v);
        if (r < 0) return r;
    }
    return 0;
}

static long open_dir_at(long at, const char *name)
{
    return own_fd(lz_sc4(SYS_openat, at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
}

/* "proc.<pid>" */
static void proc_name(char *out, long pid)
{
    memcpy(out, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX);
    size_t i = sizeof FJ_PROC_PREFIX - 1;
    char tmp[24]; int k = 0;
    do tmp[k++] = (char)('0' + pid % 10); while ((pid /= 10));
    while (k) out[i++] = tmp[--k];
    out[i] = 0;
}

/* The directory proc.<pid> inside the journal directory at (made if need be). */
static long open_proc_dir(long at, long pid)
{
    char name[48];
    proc_name(name, pid);
    long r = lz_sc3(SYS_mkdirat, at, name, 0700);
    if (r < 0 && r != -EEXIST) return r;
    if (E.machine && r == 0 && (r = lz_sc1(SYS_fsync, at)) < 0) return r; /* the journal is found after a crash */
    return open_dir_at(at, name);
}

static void set_err(char *err, size_t errlen, const char *what, long e)
{
    const char *why = e == -ENOSPC ? "no space left on device" : e == -EDQUOT ? "disk quota exceeded"
                    : e == -EIO ? "I/O error" : e == -ENOMEM ? "out of memory" : e == -EACCES ? "permission denied"
                    : e == -EBADF ? "bad file descriptor" : e == -ENOTDIR ? "not a directory" : "error";
    size_t i = 0;
    for (const char *s = what; *s && i + 1 < errlen; s++) err[i++] = *s;
    for (const char *s = ": "; *s && i + 1 < errlen; s++) err[i++] = *s;
    for (const char *s = why; *s && i + 1 < errlen; s++) err[i++] = *s;
    if (errlen) err[i] = 0;
}

int fj_prepare(const char *tmpdir, char *err, size_t errlen)
{
    if (!fj.fdt) return 0;
    lock();
    struct interval *old = &E.iv[E.cur], *v = &E.iv[!E.cur];
    iv_reset(v);
    /* --durability machine: the state of N itself must be on disk */
    if (E.machine && old->touched) lz_sc0(SYS_sync);
    /* ".../tmp.N.PID": the interval after checkpoint N */
    const char *base = tmpdir;
    for (const char *q = tmpdir; *q; q++) if (*q == '/') base = q + 1;
    uint64_t index = 0;
    if (base[0] == 't' && base[1] == 'm' && base[2] == 'p' && base[3] == '.')
        for (const char *q = base + 4; *q >= '0' && *q <= '9'; q++) index = index * 10 + (uint64_t)(*q - '0');
    long r = open_interval_at(v, open_dir_at(AT_FDCWD, tmpdir), E.main, 0, 0, 0, 0, index);
    if (r < 0) { set_err(err, errlen, "cannot create the file journal", r); iv_reset(v); unlock(); return -1; }
    /* save_blind classifies with the new interval's numbers */
    uint32_t oldgen = fj.gen;
    int oldcur = E.cur;
    E.cur = !E.cur;
    fj.gen = oldgen + 1;
    r = save_blind(v);
    E.cur = oldcur;
    fj.gen = oldgen;
    if (r == 0 && E.machine) r = lz_sc1(SYS_fsync, v->log_fd);
    if (r < 0) { set_err(err, errlen, "cannot save files written through streams or shared mappings", r); iv_reset(v); unlock(); return -1; }
    unlock();
    return 0;
}

void fj_commit(void)
{
    if (!fj.fdt) return;
    lock();
    E.cur = !E.cur;
    fj.gen++;
    iv_reset(&E.iv[!E.cur]);
    fj.live = 1;
    unlock();
}

void fj_abort(void)
{
    if (!fj.fdt) return;
    lock();
    iv_reset(&E.iv[!E.cur]);
    fj.gen += 2; /* descriptors classified for the abandoned interval look again */
    unlock();
}

static void warn_line(const char *a, long pid, const char *b)
{
    char msg[600], num[24];
    size_t i = 0;
    int k = 0;
    do num[k++] = (char)('0' + pid % 10); while ((pid /= 10));
    const char *parts[] = {"lazarus: process ", "", ": ", a, b};
    for (int p = 0; p < 5; p++) {
        if (p == 1) { while (k && i + 1 < sizeof msg) msg[i++] = num[--k]; continue; }
        for (const char *s = parts[p]; *s && i + 1 < sizeof msg; s++) msg[i++] = *s;
    }
    lz_sc3(SYS_write, 2, msg, i);
}

/* A forked child: the parent's interval goes on in a journal of its own,
 * proc.<pid>/ in the parent's journal directory.  What the parent's tables
 * know (blocks and names recorded, directories moved) is true for the child
 * too: the parent's records are older than anything the child records. */
void fj_after_fork(void)
{
    if (!fj.fdt) return;
    int torn = E.lock; /* another thread of the parent was inside the engine: its tables may be half done */
    E.lock = 0;
    E.main = 0;
    E.ppid = E.pid;
    E.pfd = E.iv[E.cur].dir_fd;
    E.pid = (int)lz_sc0(SYS_getpid);
    struct interval *v = &E.iv[E.cur];
    iv_close(&E.iv[!E.cur], 0);
    if (!fj.live) { iv_close(v, 0); return; }
    long pdir = v->dir_fd;
    /* the parent's files are never written by the child: the window of its
     * log goes (it is a shared mapping), so do the child's copies of its fds */
    if (v->lwin) win_drop(v->lwin, LOG_WIN);
    v->lwin = NULL;
    if (v->log_fd >= 0) lz_sc1(SYS_close, v->log_fd);
    if (v->keep_fd >= 0) lz_sc1(SYS_close, v->keep_fd);
    if (v->data_fd >= 0) lz_sc1(SYS_close, v->data_fd);
    v->log_fd = v->keep_fd = v->data_fd = v->dir_fd = -1;
    v->log_off = v->data_off = 0;
    v->touched = 0;
    if (torn) {
        /* start from nothing: records again what the parent may have recorded */
        for (uint32_t i = 0; i < v->ino_n; i++)
            if (v->inos[i].rfd >= 0) lz_sc1(SYS_close, v->inos[i].rfd);
        v->used = 0;
        v->inos = NULL; v->ino_n = 0; v->ihash = NULL; v->ihash_cap = 0;
        v->paths = NULL; v->path_cap = v->path_n = 0;
        v->mv = NULL; v->nmv = v->capmv = 0;
        fj.gen += 2;
    }
    long r = pdir >= 0 ? open_proc_dir(pdir, E.pid) : -EBADF;
    if (pdir >= 0) lz_sc1(SYS_close, pdir);
    r = open_interval_at(v, r, 0, 0, 0, 0, 0, v->index);
    if (r < 0) {
        char why[128];
        set_err(why, sizeof why, "cannot start its file journal", r);
        warn_line(why, E.pid, "; its file changes will not be rolled back\n");
        iv_close(v, 0);
        fj.live = 0;
    }
}

static long self_pid(void) { return lz_sc0(SYS_getpid); }

static void put_u64(char **p, char *end, uint64_t x)
{
    char tmp[24]; int k = 0;
    do tmp[k++] = (char)('0' + x % 10); while ((x /= 10));
    while (k && *p < end) *(*p)++ = tmp[--k];
}

/* FJ_ENV=owner.fd.log_off.data_off.nrec.index: six numbers of at most 20
 * digits, each followed by a '.' or the NUL */
#define FJ_ENV_LEN (sizeof FJ_ENV "=" - 1 + 6 * (20 + 1))

int fj_exec_prepare(char *envstr, size_t len)
{
    if (!fj.fdt || !fj.live || len < FJ_ENV_LEN) return 0;
    /* a vfork child shares this memory: the journal is its parent's (E.pid),
     * and nothing here may change */
    uint64_t saved;
    lock_quiet(&saved);
    struct interval *v = &E.iv[E.cur];
    int fd = v->dir_fd, owner = E.pid;
    uint64_t lo = v->log_off, dof = v->data_off, nrec = v->nrec, index = v->index;
    unlock_quiet(&saved);
    if (fd < 0) return -EBADF;
    long r = lz_sc3(SYS_fcntl, fd, F_SETFD, 0);
    if (r == -EBADF) {
        /* the program closed it (close_range before exec: Python's
         * subprocess): the same directory again, through the descriptor of
         * the process that still has it open, at the same number */
        char lp[96], *q = lp, *e = lp + sizeof lp - 1;
        long self = lz_sc0(SYS_getpid), at = self == owner ? E.ppid : owner, afd = self == owner ? E.pfd : fd;
        if (at > 0 && afd >= 0) {
            memcpy(q, "/proc/", 6);
            q += 6;
            put_u64(&q, e, (uint64_t)at);
            memcpy(q, "/fd/", 4);
            q += 4;
            put_u64(&q, e, (uint64_t)afd);
            if (self == owner) { /* its own journal: proc.<pid> in its parent's */
                *q++ = '/';
                proc_name(q, self);
            } else {
                *q = 0;
            }
            long n = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
            if (n >= 0) {
                r = lz_sc3(SYS_dup3, n, fd, 0);
                lz_sc1(SYS_close, n);
                if (r >= 0) r = 0;
            }
        }
    }
    if (r < 0) {
        /* refusing the exec would break the program: said once, on stderr */
        if (!E.warned++) warn_line("closed the file journal's descriptor before exec", self_pid(),
                                   ": what it runs now will not have its file changes rolled back\n");
        return 0;
    }
    static const char name[] = FJ_ENV "=";
    char *p = envstr, *end = envstr + len - 1;
    memcpy(p, name, sizeof name - 1);
    p += sizeof name - 1;
    put_u64(&p, end, (uint64_t)owner);
    *p++ = '.';
    put_u64(&p, end, (uint64_t)fd);
    *p++ = '.';
    put_u64(&p, end, lo);
    *p++ = '.';
    put_u64(&p, end, dof);
    *p++ = '.';
    put_u64(&p, end, nrec);
    *p++ = '.';
    put_u64(&p, end, index);
    *p = 0;
    return 1;
}

void fj_exec_failed(void)
{
    if (!fj.fdt || !fj.live) return;
    int fd = E.iv[E.cur].dir_fd;
    if (fd >= 0) lz_sc3(SYS_fcntl, fd, F_SETFD, FD_CLOEXEC);
}

static int get_u64(const char **p, uint64_t *out)
{
    const char *s = *p;
    uint64_t x = 0;
    if (*s < '0' || *s > '9') return -1;
    while (*s >= '0' && *s <= '9') x = x * 10 + (uint64_t)(*s++ - '0');
    *out = x;
    *p = s;
    return 0;
}

int fj_adopt(const char *val, char *err, size_t errlen)
{
    if (!fj.fdt) return 0;
    uint64_t owner, fd, lo, dof, nrec, index;
    const char *p = val;
    if (get_u64(&p, &owner) < 0 || *p++ != '.' || get_u64(&p, &fd) < 0 || *p++ != '.' || get_u64(&p, &lo) < 0 ||
        *p++ != '.' || get_u64(&p, &dof) < 0 || *p++ != '.' || get_u64(&p, &nrec) < 0 || *p++ != '.' ||
        get_u64(&p, &index) < 0 || *p || fd > 0x7fffffff) {
        set_err(err, errlen, "malformed " FJ_ENV, -EINVAL);
        return -1;
    }
    /* the descriptor must still be the journal's directory (a program may
     * close descriptors before it execs) */
    struct stat st;
    if (lz_sc2(SYS_fstat, fd, &st) < 0 || !S_ISDIR(st.st_mode) || lz_sc4(SYS_faccessat, fd, FJ_LOG, F_OK, 0) < 0) {
        set_err(err, errlen, "the file journal's descriptor was closed before exec", -EBADF);
        return -1;
    }
    long self = lz_sc0(SYS_getpid);
    lock();
    E.cur = 0;
    E.pid = (int)self;
    struct interval *v = &E.iv[0];
    long r;
    if ((uint64_t)self == owner) {
        /* exec: the same process, its journal goes on after its last record */
        r = open_interval_at(v, own_fd((long)fd), 0, 1, lo, dof, nrec, index);
    } else {
        /* a vfork or posix_spawn child: a journal of its own, inside its parent's */
        long d = open_proc_dir((long)fd, self);
        lz_sc1(SYS_close, fd);
        r = open_interval_at(v, d, 0, 0, 0, 0, 0, index);
    }
    if (r == 0) r = save_blind(v);
    if (r < 0) {
        set_err(err, errlen, "cannot take over the file journal", r);
        iv_close(v, 0);
        unlock();
        return -1;
    }
    fj.live = 1;
    unlock();
    return 0;
}

/* At exit the log is cut to its records (its window is allocated ahead of
 * them: 64 KiB or more per process otherwise).  Not in a process that
 * shares this memory without being its owner (raw clone), and not if the
 * engine is busy (exit from a signal handler). */
__attribute__((destructor)) static void fj_exit(void)
{
    if (!fj.fdt || !fj.live || self_pid() != E.pid) return;
    uint64_t saved;
    signals_wait(&saved);
    if (!__atomic_exchange_n(&E.lock, 1, __ATOMIC_ACQUIRE)) { /* (never wait for a lock at exit) */
        struct interval *v = &E.iv[E.cur];
        seal_log(v);
        if (v->lwin) {
            win_drop(v->lwin, LOG_WIN);
            v->lwin = NULL; /* records of threads still running go with pwritev */
        }
        unlock();
    }
    signals_back(&saved);
}

int fj_restarted(uint64_t index, int main_process, char *err, size_t errlen)
{
    if (!fj.fdt) return 0;
    /* none of the engine's memory or descriptors came back with the program */
    E.lock = 0;
    E.cur = 0;
    E.main = main_process;
    E.pid = (int)lz_sc0(SYS_getpid);
    fj.live = 0;
    if (map_memory() < 0) { set_err(err, errlen, "cannot map the file engine's memory", -ENOMEM); return -1; }
    fj.gen = 1;
    uint64_t at_index = index;
    char ck[LZ_PATH_MAX + 64];
    size_t l = E.store_len;
    memcpy(ck, E.store, l);
    memcpy(ck + l, "/" LZ_CKPT_PREFIX, sizeof("/" LZ_CKPT_PREFIX));
    l += sizeof("/" LZ_CKPT_PREFIX) - 1;
    char digits[24]; int k = 0;
    do digits[k++] = (char)('0' + index % 10); while ((index /= 10));
    while (k < 6) digits[k++] = '0';
    while (k) ck[l++] = digits[--k];
    ck[l] = 0;
    /* the program's journal is the directory's own, any other process's proc.<pid>/ */
    long d = open_dir_at(AT_FDCWD, ck);
    if (!main_process && d >= 0) {
        long pd = open_proc_dir(d, E.pid);
        lz_sc1(SYS_close, d);
        d = pd;
    }
    long r = open_interval_at(&E.iv[0], d, 0, 0, 0, 0, 0, at_index);
    if (r == 0) r = save_blind(&E.iv[0]);
    if (r < 0) { set_err(err, errlen, "cannot reopen the file journal", r); iv_close(&E.iv[0], 0); fj.live = 0; return -1; }
    fj.live = 1;
    return 0;
}

void fj_report(const char *what, const char *path, long err)
{
    if (E.warned++ > 8) return;
    char msg[LZ_PATH_MAX + 256];
    set_err(msg, sizeof msg, "lazarus: cannot record how to undo", err);
    size_t i = slen(msg);
    const char *parts[] = {" (", what, path && *path ? " " : "", path ? path : "",
                           "); the change was refused so that no checkpoint is damaged\n"};
    for (int k = 0; k < 5; k++)
        for (const char *s = parts[k]; *s && i + 1 < sizeof msg; s++) msg[i++] = *s;
    lz_sc3(SYS_write, 2, msg, i);
}
