/* The interval's life cycle: settings and the engine's memory, opening a
 * journal, checkpoint N's prepare, commit and abort, fork, exec and the new
 * image's adopting the journal, exit, restart; the engine's messages
 * (track_internal.h). */
#include "track_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct fj_global fj;
struct trk_engine trk_E; /* track_internal.h */

char *trk_databuf; /* FJ_DATA_MAX bytes, for copying saved content */

char *trk_engine_mem; /* track_internal.h */

/* ---------------------------------------------------------------- signals held off */

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

/* ---------------------------------------------------------------- setup */

/* The engine's memory is left out of checkpoints (a restart starts a fresh
 * interval) and mapped anew after one. */

/* A page of shared anonymous memory at each end: a mapping made next to the
 * engine's (the checkpoint's scratch arena, say) can then never merge with
 * one of its private parts into a mapping that is neither the engine's nor
 * the program's (captured as the program's, then split when a window or
 * the map of saved blocks is mapped anew in the pause). */
#define GUARD 4096ul
static char *engine_base;

static int map_memory(void)
{
    long a = lz_sc6(SYS_mmap, 0, ENGINE_BYTES + 2 * GUARD, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a < 0 && a >= -LZ_MAX_ERRNO) return -1;
    engine_base = (char *)a;
    lz_sc6(SYS_mmap, a, GUARD, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    lz_sc6(SYS_mmap, a + GUARD + (long)ENGINE_BYTES, GUARD, PROT_NONE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    trk_engine_mem = (char *)a + GUARD;
    for (int i = 0; i < 2; i++) {
        trk_E.iv[i].arena = trk_engine_mem + (size_t)i * ARENA_BYTES;
        trk_E.iv[i].used = 0;
        trk_E.iv[i].inos = NULL; trk_E.iv[i].ino_n = 0; trk_E.iv[i].ihash = NULL; trk_E.iv[i].ihash_cap = 0;
        trk_E.iv[i].paths = NULL; trk_E.iv[i].path_cap = trk_E.iv[i].path_n = 0;
        trk_E.iv[i].log_fd = trk_E.iv[i].keep_fd = trk_E.iv[i].data_fd = trk_E.iv[i].dir_fd = -1;
        trk_E.iv[i].log_off = trk_E.iv[i].data_off = 0;
        trk_E.iv[i].lwin = NULL;
        trk_E.iv[i].dwin = NULL;
        trk_E.iv[i].dbase = trk_E.iv[i].dlen = trk_E.iv[i].dpop = trk_E.iv[i].dsize0 = trk_E.iv[i].dgrown = 0;
        trk_E.iv[i].dfail = 0;
        trk_E.iv[i].wlen = LOG_WIN;
        trk_E.iv[i].touched = 0;
        trk_E.iv[i].mv = NULL; trk_E.iv[i].nmv = trk_E.iv[i].capmv = 0;
        trk_E.iv[i].sm = NULL; trk_E.iv[i].sm_state = 0; trk_E.iv[i].sm_fd = -1;
        trk_E.iv[i].pend_fd = -1;
    }
    fj.fdt = (struct fj_fdent *)(trk_engine_mem + 2 * ARENA_BYTES);
    trk_databuf = (char *)fj.fdt + (size_t)FJ_MAXFD * sizeof(struct fj_fdent);
    return 0;
}

int fj_owns(uint64_t start, uint64_t end)
{
    return engine_base && start >= (uint64_t)engine_base && end <= (uint64_t)engine_base + ENGINE_BYTES + 2 * GUARD;
}

/* Runs of saved blocks at least this long are reflinked where the file
 * system can (track_fds.c): a clone of a clean range costs 15-40 us here
 * whatever its length, against 0.3 ms to copy 1 MiB, but a clone of a
 * 4 KiB block costs more than its copy (and a clone of pages not yet
 * written back waits for their writeback: bench/README.md).  Benchmarks
 * set LAZARUS_CLONE_MIN (bytes, 0: never). */
#define CLONE_MIN_DEFAULT FJ_DATA_MAX
extern char **environ;
static uint64_t clone_min_setting(void)
{
    static const char name[] = "LAZARUS_CLONE_MIN=";
    for (char **e = environ; e && *e; e++) {
        const char *s = *e;
        size_t i = 0;
        while (name[i] && s[i] == name[i]) i++;
        if (name[i]) continue;
        uint64_t x = 0;
        for (s += i; *s >= '0' && *s <= '9'; s++) x = x * 10 + (uint64_t)(*s - '0');
        return x;
    }
    return CLONE_MIN_DEFAULT;
}

int fj_setup(const char *store, int machine, const char *excludes, int main_process, const uint64_t job[2])
{
    trk_E.job[0] = job[0];
    trk_E.job[1] = job[1];
    trk_E.main = main_process;
    trk_E.pid = (int)lz_sc0(SYS_getpid);
    size_t sl = slen(store);
    if (sl >= sizeof trk_E.store) return -1;
    memcpy(trk_E.store, store, sl + 1);
    trk_E.store_len = sl;
    trk_E.machine = machine;
    trk_E.nexcl = 0;
    for (const char *p = excludes; p && *p && trk_E.nexcl < MAX_EXCL;) {
        const char *q = p;
        while (*q && *q != '\n') q++;
        size_t l = (size_t)(q - p);
        if (l && l < sizeof trk_E.excl[0]) { memcpy(trk_E.excl[trk_E.nexcl], p, l); trk_E.excl[trk_E.nexcl][l] = 0; trk_E.nexcl++; }
        p = *q ? q + 1 : q;
    }
    trk_E.clone_min = clone_min_setting();
    if (map_memory() < 0) return -1;
    fj.gen = 1;
    return 0;
}

int fj_limit(const char *root, int root_fd)
{
    size_t l = slen(root);
    if (l >= sizeof trk_E.only) return -1;
    memcpy(trk_E.only, root, l + 1);
    trk_E.only_len = l;
    trk_E.only_fd = root_fd;
    return 0;
}

/* Lets an interval go: trim says the log is ours to cut to its records (a
 * fork child's copy of its parent's interval is not). */
static void iv_close(struct interval *v, int trim)
{
    if (trim) { trk_seal_log(v); trk_data_trim(v); }
    trk_data_drop(v);
    v->dsize0 = v->dgrown = 0;
    v->dfail = 0;
    if (v->lwin) trk_win_drop(v->lwin, LOG_WIN);
    v->lwin = NULL;
    if (v->log_fd >= 0) lz_sc1(SYS_close, v->log_fd);
    if (v->keep_fd >= 0) lz_sc1(SYS_close, v->keep_fd);
    if (v->data_fd >= 0) lz_sc1(SYS_close, v->data_fd);
    if (v->dir_fd >= 0) lz_sc1(SYS_close, v->dir_fd);
    if (v->pend_fd >= 0) lz_sc1(SYS_close, v->pend_fd);
    v->pend_fd = -1;
    trk_sm_detach(v);
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

/* ---------------------------------------------------------------- intervals */

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
    struct interval *old = &trk_E.iv[trk_E.cur], *v = &trk_E.iv[!trk_E.cur];
    iv_reset(v);
    /* --durability machine: the state of N itself must be on disk */
    if (trk_E.machine && old->touched) lz_sc0(SYS_sync);
    /* ".../tmp.N.PID": the interval after checkpoint N */
    const char *base = tmpdir;
    for (const char *q = tmpdir; *q; q++) if (*q == '/') base = q + 1;
    uint64_t index = 0;
    if (base[0] == 't' && base[1] == 'm' && base[2] == 'p' && base[3] == '.')
        for (const char *q = base + 4; *q >= '0' && *q <= '9'; q++) index = index * 10 + (uint64_t)(*q - '0');
    long r = trk_open_interval_at(v, trk_open_dir_at(AT_FDCWD, tmpdir), trk_E.main, 0, 0, 0, 0, index);
    if (r < 0) { set_err(err, errlen, "cannot create the file journal", r); iv_reset(v); unlock(); return -1; }
    /* save_blind classifies with the new interval's numbers */
    uint32_t oldgen = fj.gen;
    int oldcur = trk_E.cur;
    trk_E.cur = !trk_E.cur;
    fj.gen = oldgen + 1;
    r = trk_save_blind(v);
    trk_E.cur = oldcur;
    fj.gen = oldgen;
    if (r == 0 && trk_E.machine) r = lz_sc1(SYS_fsync, v->log_fd);
    if (r < 0) { set_err(err, errlen, "cannot save files written through streams or shared mappings", r); iv_reset(v); unlock(); return -1; }
    unlock();
    return 0;
}

void fj_commit(void)
{
    if (!fj.fdt) return;
    lock();
    trk_E.cur = !trk_E.cur;
    fj.gen++;
    iv_reset(&trk_E.iv[!trk_E.cur]);
    fj.live = 1;
    unlock();
}

void fj_abort(void)
{
    if (!fj.fdt) return;
    lock();
    iv_reset(&trk_E.iv[!trk_E.cur]);
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
    int torn = trk_E.lock; /* another thread of the parent was inside the engine: its tables may be half done */
    trk_E.lock = 0;
    trk_E.main = 0;
    trk_E.ppid = trk_E.pid;
    trk_E.pfd = trk_E.iv[trk_E.cur].dir_fd;
    trk_E.pid = (int)lz_sc0(SYS_getpid);
    struct interval *v = &trk_E.iv[trk_E.cur];
    iv_close(&trk_E.iv[!trk_E.cur], 0);
    if (!fj.live) { iv_close(v, 0); return; }
    /* its journal will be proc.<pid>/ in the parent's journal directory (or
     * where the parent's own would be, if it has none yet) */
    long pdir = v->dir_fd >= 0 ? v->dir_fd : v->pend_fd;
    if (v->dir_fd >= 0) trk_E.pend_owner = trk_E.ppid;
    trk_E.pfd = (int)pdir;
    /* the parent's files are never written by the child: the window of its
     * log goes (it is a shared mapping), so do the child's copies of its fds */
    if (v->lwin) trk_win_drop(v->lwin, LOG_WIN);
    v->lwin = NULL;
    trk_data_drop(v);
    v->dsize0 = v->dgrown = 0;
    if (v->log_fd >= 0) lz_sc1(SYS_close, v->log_fd);
    if (v->keep_fd >= 0) lz_sc1(SYS_close, v->keep_fd);
    if (v->data_fd >= 0) lz_sc1(SYS_close, v->data_fd);
    v->log_off = v->data_off = 0;
    v->log_fd = v->keep_fd = v->data_fd = v->dir_fd = -1;
    v->touched = 0;
    v->nrec = 0;
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
    /* made at its first record (trk_journal): a child that changes nothing
     * (most of a shell's) costs no directory and no log */
    v->pend_fd = (int)pdir;
    if (pdir < 0) {
        warn_line("cannot start its file journal: bad file descriptor", trk_E.pid, "; its file changes will not be rolled back\n");
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
    /* a vfork child shares this memory: the journal is its parent's (trk_E.pid),
     * and nothing here may change */
    uint64_t saved;
    lock_quiet(&saved);
    struct interval *v = &trk_E.iv[trk_E.cur];
    /* no journal of its own yet: the new image makes it where this one would */
    int own = v->dir_fd >= 0;
    int fd = own ? v->dir_fd : v->pend_fd, owner = own ? trk_E.pid : trk_E.pend_owner;
    uint64_t lo = v->log_off, dof = v->data_off, nrec = v->nrec, index = v->index;
    unlock_quiet(&saved);
    if (fd < 0) return -EBADF;
    long r = lz_sc3(SYS_fcntl, fd, F_SETFD, 0);
    if (r == -EBADF) {
        /* the program closed it (close_range before exec: Python's
         * subprocess): the same directory again, through the descriptor of
         * the process that still has it open, at the same number */
        char lp[96], *q = lp, *e = lp + sizeof lp - 1;
        long self = lz_sc0(SYS_getpid), at = self == owner ? trk_E.ppid : owner, afd = self == owner ? trk_E.pfd : fd;
        if (at > 0 && afd >= 0) {
            memcpy(q, "/proc/", 6);
            q += 6;
            put_u64(&q, e, (uint64_t)at);
            memcpy(q, "/fd/", 4);
            q += 4;
            put_u64(&q, e, (uint64_t)afd);
            if (self == owner) { /* its own journal: proc.<pid> in its parent's */
                *q++ = '/';
                trk_proc_name(q, self);
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
        if (!trk_E.warned++) warn_line("closed the file journal's descriptor before exec", self_pid(),
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
    int fd = trk_E.iv[trk_E.cur].dir_fd >= 0 ? trk_E.iv[trk_E.cur].dir_fd : trk_E.iv[trk_E.cur].pend_fd;
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
    trk_E.cur = 0;
    trk_E.pid = (int)self;
    struct interval *v = &trk_E.iv[0];
    long r;
    if ((uint64_t)self == owner) {
        /* exec: the same process, its journal goes on after its last record */
        r = trk_open_interval_at(v, trk_own_fd((long)fd), 0, 1, lo, dof, nrec, index);
    } else {
        /* a vfork or posix_spawn child (or a child that recorded nothing
         * before its exec): a journal of its own inside that directory, made
         * at its first record; the descriptor keeps its number (it is the
         * owner's, for /proc/<owner>/fd/<n> after a close_range) */
        v->index = index;
        v->pend_fd = (int)fd;
        trk_E.pend_owner = (int)owner;
        trk_E.ppid = (int)owner;
        trk_E.pfd = (int)fd;
        r = lz_sc3(SYS_fcntl, fd, F_SETFD, FD_CLOEXEC);
    }
    if (r == 0) r = trk_save_blind(v);
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
    if (!fj.fdt || !fj.live || self_pid() != trk_E.pid) return;
    uint64_t saved;
    signals_wait(&saved);
    if (!__atomic_exchange_n(&trk_E.lock, 1, __ATOMIC_ACQUIRE)) { /* (never wait for a lock at exit) */
        struct interval *v = &trk_E.iv[trk_E.cur];
        trk_seal_log(v);
        trk_data_trim(v);
        if (v->lwin) {
            trk_win_drop(v->lwin, LOG_WIN);
            v->lwin = NULL; /* records of threads still running go with pwritev */
        }
        unlock();
    }
    signals_back(&saved);
}

int fj_restarted(const char *store, uint64_t index, int main_process, char *err, size_t errlen)
{
    if (!fj.fdt) return 0;
    /* the store the restart was made from (a restart elsewhere: another directory) */
    size_t sl = slen(store);
    if (sl < sizeof trk_E.store) {
        memcpy(trk_E.store, store, sl + 1);
        trk_E.store_len = sl;
    }
    /* none of the engine's memory or descriptors came back with the program */
    trk_E.lock = 0;
    trk_E.cur = 0;
    trk_E.main = main_process;
    trk_E.pid = (int)lz_sc0(SYS_getpid);
    fj.live = 0;
    trk_maps_forget();
    if (map_memory() < 0) { set_err(err, errlen, "cannot map the file engine's memory", -ENOMEM); return -1; }
    fj.gen = 1;
    uint64_t at_index = index;
    char ck[LZ_PATH_MAX + 64];
    size_t l = trk_E.store_len;
    memcpy(ck, trk_E.store, l);
    memcpy(ck + l, "/" LZ_CKPT_PREFIX, sizeof("/" LZ_CKPT_PREFIX));
    l += sizeof("/" LZ_CKPT_PREFIX) - 1;
    char digits[24]; int k = 0;
    do digits[k++] = (char)('0' + index % 10); while ((index /= 10));
    while (k < 6) digits[k++] = '0';
    while (k) ck[l++] = digits[--k];
    ck[l] = 0;
    /* the program's journal is the directory's own, any other process's proc.<pid>/ */
    long d = trk_open_dir_at(AT_FDCWD, ck);
    if (!main_process && d >= 0) {
        long pd = trk_open_proc_dir(d, trk_E.pid);
        lz_sc1(SYS_close, d);
        d = pd;
    }
    long r = trk_open_interval_at(&trk_E.iv[0], d, 0, 0, 0, 0, 0, at_index);
    if (r == 0) r = trk_save_blind(&trk_E.iv[0]);
    if (r < 0) { set_err(err, errlen, "cannot reopen the file journal", r); iv_close(&trk_E.iv[0], 0); fj.live = 0; return -1; }
    fj.live = 1;
    return 0;
}

void fj_report(const char *what, const char *path, long err)
{
    if (trk_E.warned++ > 8) return;
    char msg[LZ_PATH_MAX + 256];
    set_err(msg, sizeof msg, "lazarus: cannot record how to undo", err);
    size_t i = slen(msg);
    const char *parts[] = {" (", what, path && *path ? " " : "", path ? path : "",
                           "); the change was refused so that no checkpoint is damaged\n"};
    for (int k = 0; k < 5; k++)
        for (const char *s = parts[k]; *s && i + 1 < sizeof msg; s++) msg[i++] = *s;
    lz_sc3(SYS_write, 2, msg, i);
}
