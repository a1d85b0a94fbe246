/* Writable shared file mappings (MAP_SHARED with PROT_WRITE): a store into
 * one changes the file without a call the runtime sees.  While an interval
 * is open each is write-protected (mprotect, read-only): the first store
 * into a page faults, the runtime's SIGSEGV handler (runtime/rt_shmaps.c)
 * calls fj_map_fault, which saves the page's content at N like a write()
 * would (DATA record, track_fds.c) and opens the page again; the store then
 * goes ahead.  So the old bytes are in the journal before the new ones exist
 * anywhere: the kernel's writeback of the page cannot overtake them.
 *
 * At each checkpoint (in the pause, before the regions are read) the pages
 * opened during the interval are protected again: one mprotect per opened
 * run, or one per mapping when it has many (a walk of its page table, about
 * 5 ms per GiB).  Nothing is copied in the pause.
 *
 * Why mprotect: userfaultfd's synchronous write-protect would not split the
 * mapping, but the kernel refuses it on files other than shmem and hugetlbfs
 * (EINVAL on 6.18), and its asynchronous mode tells only after the store.
 * The price: each opened page is a mapping of its own until the next
 * checkpoint; past OPEN_BUDGET pages in an interval, whole chunks are opened
 * (and saved), so that the process stays far from vm.max_map_count.  The
 * kernel's own writes into a protected page would fail with EFAULT: the
 * runtime opens the target of read() and its kin first (fj_map_before_fill).
 *
 * The registry below knows every writable shared file mapping of the process
 * (made through mmap, or found in /proc/self/maps at a checkpoint or a
 * restart), what protection the program asked for, and a read-only
 * descriptor of the file.  Mapping calls keep it exact (the runtime calls
 * fj_map_added/removed/moved/protect); each checkpoint checks it against
 * /proc/self/maps before protecting anything.  Raw system calls only: this
 * runs in the SIGSEGV and the checkpoint handler (track_internal.h). */
#include "track_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define MAPS_MAX 256            /* mappings registered; more are saved whole per interval (as before) */
#define RUNS_MAX 4096           /* opened runs remembered by a checkpoint's sync */
#define OPEN_BUDGET 8192        /* pages opened one by one per interval; then by chunks */
#define PAGE 4096ull

struct shmap {
    uint64_t start, end; /* page-aligned */
    uint64_t off;        /* the file offset at start */
    uint64_t dev, ino;
    int32_t fd;          /* ours, read-only (shared by the mappings of one inode) */
    int32_t prot;        /* what the program asked for (without PROT_WRITE: kept in case it asks again) */
    uint8_t armed;       /* some pages may be protected by us: a store there faults */
    uint8_t whole;       /* at the next sync: one mprotect for all of it */
    uint8_t dirty;       /* pages opened since it was protected */
};

static struct shmap reg[MAPS_MAX], nreg[MAPS_MAX];
static uint32_t nr, nn; /* (nn: nreg's while a sync builds it) */
static uint32_t opened; /* pages opened this interval */
/* The ranges opened since the last protection, for the pause to protect one
 * by one (nlog > LOG_MAX: too many, the mappings they are in as a whole). */
#define LOG_MAX 256
static struct { uint64_t a, b; } olog[LOG_MAX];
static uint32_t nlog;

/* What a protected page of a mapping the program made `prot` gets. */
static int ro(int prot) { return prot & PROT_WRITE ? (prot & ~PROT_WRITE) | PROT_READ : prot; }
static int writable(const struct shmap *e) { return e->armed && (e->prot & PROT_WRITE); }

/* The fast test of the runtime's hooks (fj_maps_any). */
static void publish(void) { __atomic_store_n(&fj.maps, (int)nr, __ATOMIC_RELEASE); }

/* Our read-only descriptors, one per inode, kept after its mappings are
 * gone: closing any descriptor of a file drops the process's fcntl record
 * locks on it (sqlite's, LMDB's), so one is closed only to make room. */
#define FILES_MAX 64
static struct { uint64_t dev, ino; int32_t fd; uint32_t used; } files[FILES_MAX];
static uint32_t nfiles, ticks;

int trk_maps_fd(int fd)
{
    for (uint32_t i = 0; i < nfiles; i++) if (files[i].fd == fd) return 1;
    return 0;
}

static int holds(const struct shmap *t, uint32_t n, int fd)
{
    for (uint32_t i = 0; i < n; i++) if (t[i].fd == fd) return 1;
    return 0;
}

/* nreg[0, n) becomes the registry. */
static void commit(uint32_t n)
{
    memcpy(reg, nreg, n * sizeof *reg);
    nr = n;
    publish();
}

/* A file the journal covers (a regular file with a name, outside the store
 * and the excluded directories): 1 (its identity in st), else 0. */
static int tracked(int fd, struct stat *st)
{
    if (lz_sc2(SYS_fstat, fd, st) < 0 || !S_ISREG(st->st_mode)) return 0;
    char lp[40], path[LZ_PATH_MAX];
    trk_fdpath(fd, lp);
    long n = lz_sc4(SYS_readlinkat, AT_FDCWD, lp, path, sizeof path - 1);
    if (n <= 0 || path[0] != '/') return 0;
    path[n] = 0;
    if (n > LZ_DELETED_LEN && !strcmp(path + n - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) return 0; /* nameless: by content */
    return !trk_excluded(path);
}

/* The interval a sync opens (trk_maps_arm's v): what cannot be protected is
 * saved whole into it. */
static struct interval *sync_v;

/* Saves the content at N of [s, t) of mapping e: its pages not saved yet in
 * this interval through any descriptor of the inode. */
static long save(const struct shmap *e, uint64_t s, uint64_t t)
{
    /* (before the first checkpoint: nothing to go back to) */
    struct interval *v = sync_v ? sync_v : fj.live ? &trk_E.iv[trk_E.cur] : NULL;
    if (!v || s >= t) return 0;
    struct fj_fdent tmp = {0}, *ent = (unsigned)e->fd < FJ_MAXFD ? &fj.fdt[e->fd] : &tmp;
    struct fj_ino *ino;
    long r = trk_classify(v, e->fd, ent, &ino);
    /* stores overwrite whatever the descriptor's O_APPEND says: born decides */
    if (r == 0 && ino && !ino->born) r = trk_save_range(v, ino, e->fd, 1, e->off + (s - e->start), t - s);
    return r;
}

/* Our descriptor of inode (dev, ino), opened if need be through `via` (a
 * descriptor of it: a description of our own, without the program's
 * O_DIRECT or O_APPEND, else a duplicate) or `path` (checked to be it, and
 * tracked): -1 if none. */
static int file_fd(uint64_t dev, uint64_t ino, int via, const char *path)
{
    for (uint32_t i = 0; i < nfiles; i++)
        if (files[i].dev == dev && files[i].ino == ino) { files[i].used = ++ticks; return files[i].fd; }
    long fd;
    if (via >= 0) {
        char lp[40];
        trk_fdpath(via, lp);
        fd = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC, 0);
        fd = fd >= 0 ? trk_own_fd(fd) : lz_sc3(SYS_fcntl, via, F_DUPFD_CLOEXEC, OWN_FD_BASE);
    } else {
        fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW, 0);
        if (fd >= 0) fd = trk_own_fd(fd);
        struct stat st;
        if (fd >= 0 && (!tracked((int)fd, &st) || st.st_dev != dev || st.st_ino != ino)) { /* untracked, or another file now */
            lz_sc1(SYS_close, fd);
            fd = -1;
        }
    }
    if (fd < 0) return -1;
    uint32_t at = nfiles;
    if (nfiles == FILES_MAX) { /* room: the least recently used that no mapping needs */
        for (uint32_t i = 0; i < nfiles; i++)
            if (!holds(reg, nr, files[i].fd) && !holds(nreg, nn, files[i].fd) && (at == nfiles || files[i].used < files[at].used)) at = i;
        if (at == nfiles) { lz_sc1(SYS_close, fd); return -1; }
        fj_fd_changed(files[at].fd);
        lz_sc1(SYS_close, files[at].fd);
    } else {
        nfiles++;
    }
    files[at].dev = dev;
    files[at].ino = ino;
    files[at].fd = (int32_t)fd;
    files[at].used = ++ticks;
    return (int)fd;
}

/* ---------------------------------------------------------------- the registry */

static uint32_t find(uint64_t a) /* the first mapping ending after a */
{
    uint32_t lo = 0, hi = nr;
    while (lo < hi) { uint32_t m = (lo + hi) / 2; if (reg[m].end <= a) lo = m + 1; else hi = m; }
    return lo;
}

/* A registered piece that cannot stay (no room left to split into): open
 * again, saved whole, so that no page stays protected with no one to open it. */
static void drop(const struct shmap *e)
{
    if (!e->armed || !(e->prot & PROT_WRITE)) return;
    save(e, e->start, e->end);
    lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
}

static void push(uint32_t *n, const struct shmap *e)
{
    if (*n < MAPS_MAX) nreg[(*n)++] = *e;
    else drop(e);
}

/* Forgets [a, b) (the mappings it cuts keep their other parts), then adds
 * `add` if given: its index, or -1 (no room). */
static int cut_add(uint64_t a, uint64_t b, const struct shmap *add)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < nr; i++) {
        struct shmap e = reg[i];
        if (e.end <= a || e.start >= b) { push(&n, &e); continue; }
        struct shmap l = e, r = e;
        l.end = a;
        r.off += b - e.start;
        r.start = b;
        if (e.start < a) push(&n, &l);
        if (e.end > b) push(&n, &r);
    }
    int at = -1;
    if (add && n < MAPS_MAX) {
        at = (int)n;
        while (at > 0 && nreg[at - 1].start >= add->start) at--;
        memmove(&nreg[at + 1], &nreg[at], (n - (uint32_t)at) * sizeof *nreg);
        nreg[at] = *add;
        n++;
    }
    commit(n);
    return at;
}

/* A mapping made through mmap (MAP_SHARED, on a descriptor open for
 * writing): registered, and protected if an interval is open. */
int fj_map_added(int fd, void *addr, size_t len, int prot, int64_t off)
{
    if (!fj.fdt) return 0;
    uint64_t a = (uint64_t)addr, b = (a + len + PAGE - 1) & ~(PAGE - 1);
    struct stat st;
    lock();
    long r = 0;
    if (!tracked(fd, &st)) {
        cut_add(a, b, NULL); /* MAP_FIXED over what was there */
    } else {
        int own = file_fd(st.st_dev, st.st_ino, fd, NULL);
        struct shmap e = {a, b, (uint64_t)off, st.st_dev, st.st_ino, own, prot, 0, 0, 0};
        int at = own >= 0 ? cut_add(a, b, &e) : -1;
        if (at < 0) {
            /* no room, no descriptor: saved whole, now and at every checkpoint */
            cut_add(a, b, NULL);
            e.fd = fd;
            if (prot & PROT_WRITE) r = save(&e, a, b);
        } else if (fj.live && (prot & PROT_WRITE)) {
            r = lz_sc3(SYS_mprotect, a, b - a, ro(prot));
            if (r == 0) reg[at].armed = 1;
            else r = save(&reg[at], a, b);
        }
    }
    unlock();
    return (int)r;
}

void fj_map_removed(void *addr, size_t len)
{
    if (!nr) return;
    uint64_t a = (uint64_t)addr & ~(PAGE - 1), b = ((uint64_t)addr + len + PAGE - 1) & ~(PAGE - 1);
    lock();
    cut_add(a, b, NULL);
    unlock();
}

int fj_map_before_move(void *addr, size_t len)
{
    /* mremap takes one mapping, and the pages opened since the checkpoint
     * made several of it: they are closed again first (their saves stand) */
    if (!nr) return 0;
    uint64_t a = (uint64_t)addr & ~(PAGE - 1), b = ((uint64_t)addr + len + PAGE - 1) & ~(PAGE - 1);
    long r = 0;
    lock();
    for (uint32_t i = find(a); i < nr && reg[i].start < b && r == 0; i++)
        if (reg[i].armed) r = lz_sc3(SYS_mprotect, reg[i].start, reg[i].end - reg[i].start, ro(reg[i].prot));
    unlock();
    return (int)r;
}

/* Protects [a, b) of the registered mapping at, or, if that fails, saves
 * it whole and leaves it open (under the lock). */
static long arm_or_save(int at, uint64_t a, uint64_t b)
{
    struct shmap *e = &reg[at];
    if (!(e->prot & PROT_WRITE)) return 0;
    if (lz_sc3(SYS_mprotect, a, b - a, ro(e->prot)) == 0) { e->armed = 1; return 0; }
    long r = save(e, e->start, e->end);
    if (r == 0) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
    if (r == 0) e->armed = 0;
    return r;
}

int fj_map_moved(void *from, size_t oldlen, void *to, size_t newlen, int keep_old)
{
    if (!nr) return 0;
    uint64_t a = (uint64_t)from & ~(PAGE - 1), b = ((uint64_t)from + oldlen + PAGE - 1) & ~(PAGE - 1);
    uint64_t na = (uint64_t)to, nb = (na + newlen + PAGE - 1) & ~(PAGE - 1);
    long r = 0;
    lock();
    uint32_t i = find(a);
    if (i < nr && reg[i].start <= a) {
        struct shmap e = reg[i];
        e.off += a - e.start;
        e.start = na;
        e.end = nb;
        if (!keep_old) cut_add(a, b, NULL);
        int at = cut_add(na, nb, &e);
        if (at >= 0 && e.armed) r = arm_or_save(at, na, nb); /* the part it grew by */
        else if (at >= 0 && (e.prot & PROT_WRITE)) r = save(&reg[at], na, nb); /* open: saved whole */
    } else {
        cut_add(na, nb, NULL);
    }
    unlock();
    return (int)r;
}

/* The program's mprotect of [addr, addr+len): registered parts keep our
 * protection while armed (and remember what the program asked for), the
 * rest gets `prot` as asked.  0 or -errno, like mprotect. */
int fj_map_protect(void *addr, size_t len, int prot)
{
    uint64_t a = (uint64_t)addr, b = (a + len + PAGE - 1) & ~(PAGE - 1), cur = a;
    long r = 0;
    lock();
    for (uint32_t i = find(a); i < nr && reg[i].start < b && r == 0; i++) {
        uint64_t s = reg[i].start > a ? reg[i].start : a, t = reg[i].end < b ? reg[i].end : b;
        if (cur < s) r = lz_sc3(SYS_mprotect, cur, s - cur, prot);
        if (r < 0) break;
        struct shmap e = reg[i];
        e.off += s - e.start;
        e.start = s;
        e.end = t;
        e.prot = prot;
        int at = cut_add(s, t, &e);
        if (at < 0) { r = -ENOMEM; break; }
        i = (uint32_t)at;
        int arm = reg[at].armed || (fj.live && (prot & PROT_WRITE)); /* writable again: protected */
        r = lz_sc3(SYS_mprotect, s, t - s, arm ? ro(prot) : prot);
        if (r == 0) reg[at].armed = (uint8_t)arm;
        cur = t;
    }
    if (r == 0 && cur < b) r = lz_sc3(SYS_mprotect, cur, b - cur, prot);
    unlock();
    return (int)r;
}

/* The program's msync.  MS_SYNC syncs the file once per mapping in the
 * range, and the pages opened since the checkpoint split a mapping into
 * hundreds (a cache flush each: 12 s instead of 0.7 for test_shared_maps'
 * 143 msyncs): our parts of the range are synced once per file instead
 * (fdatasync, which writes the file's other dirty pages too: never less
 * durable), the rest as asked. */
int fj_map_sync(void *addr, size_t len, int flags)
{
    uint64_t a = (uint64_t)addr, b = (a + len + PAGE - 1) & ~(PAGE - 1), cur = a;
    if (!(flags & MS_SYNC)) return (int)lz_sc3(SYS_msync, addr, len, flags);
    long r = lz_sc3(SYS_msync, addr, len, (flags & ~MS_SYNC) | MS_ASYNC); /* its checks, MS_INVALIDATE */
    if (r < 0) return (int)r;
    int done[16], nd = 0;
    lock(); /* (held: our descriptors stay ours) */
    for (uint32_t i = find(a); i < nr && reg[i].start < b && r == 0; i++) {
        uint64_t s = reg[i].start > a ? reg[i].start : a;
        if (cur < s) r = lz_sc3(SYS_msync, cur, s - cur, flags);
        cur = reg[i].end < b ? reg[i].end : b;
        int seen = 0;
        for (int k = 0; k < nd; k++) seen |= done[k] == reg[i].fd;
        if (seen || r < 0) continue;
        r = lz_sc1(SYS_fdatasync, reg[i].fd);
        if (nd < 16) done[nd++] = reg[i].fd;
    }
    if (r == 0 && cur < b) r = lz_sc3(SYS_msync, cur, b - cur, flags);
    unlock();
    return (int)r;
}

/* ---------------------------------------------------------------- opening pages */

/* Saves and opens [a, b) of the armed mapping i (under the lock). */
static long open_pages(uint32_t i, uint64_t a, uint64_t b)
{
    struct shmap *e = &reg[i];
    if (opened > OPEN_BUDGET) {
        /* many scattered stores: whole chunks, fewer mappings */
        uint64_t size = e->end - e->start, chunk = 64 * PAGE;
        while (size / chunk > 4096) chunk *= 2;
        a = e->start + ((a - e->start) & ~(chunk - 1));
        b = e->start + ((b - e->start + chunk - 1) & ~(chunk - 1));
        if (b > e->end) b = e->end;
    }
    long r = save(e, a, b);
    if (r < 0) return r;
    r = lz_sc3(SYS_mprotect, a, b - a, e->prot);
    if (r == -ENOMEM) {
        /* out of mappings (vm.max_map_count): all of it, one mapping again */
        r = save(e, e->start, e->end);
        if (r == 0) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
        if (r == 0) { e->armed = 0; e->whole = 1; }
    }
    if (r == 0) {
        opened += (uint32_t)((b - a) / PAGE);
        e->dirty = 1;
        if (nlog < LOG_MAX) { olog[nlog].a = a; olog[nlog].b = b; }
        nlog++;
    }
    return r;
}

/* The fault handler may run on a small alternate signal stack, and saving
 * the first page of a file in an interval takes several path buffers: it
 * runs on a stack of its own (one is enough: the lock is held). */
static char fault_stack[64 << 10] __attribute__((aligned(64)));
struct fault { uint64_t a; long r; };

static void fault_body(struct fault *f)
{
    long e = 0;
    uint32_t i = find(f->a);
    f->r = i < nr && reg[i].start <= f->a && writable(&reg[i]);
    /* (a page another thread opened meanwhile is saved already: no harm) */
    if (f->r && (e = open_pages(i, f->a, f->a + PAGE)) < 0) f->r = e;
    if (f->r < 0) fj_report("a store into a shared mapping", NULL, f->r);
}

int fj_map_fault(void *addr)
{
    if (!fj.maps) return 0;
    struct fault f = {(uint64_t)addr & ~(PAGE - 1), 0};
    lock();
    register void (*fn)(struct fault *) __asm__("r13") = fault_body;
    register char *top __asm__("r14") = fault_stack + sizeof fault_stack;
    struct fault *arg = &f;
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "mov %[top], %%rsp\n\t"
                     "call *%[fn]\n\t"
                     "mov %%r12, %%rsp"
                     : "+D"(arg)
                     : [fn] "r"(fn), [top] "r"(top)
                     : "r12", "rax", "rcx", "rdx", "rsi", "r8", "r9", "r10", "r11", "memory", "cc",
                       "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                       "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
    unlock();
    return (int)f.r;
}

/* Whether [a, b) may touch a registered mapping, without the lock: reads
 * call this (a signal handler's read must not wait for a lock its own
 * thread may hold); a registry changing meanwhile may be misread, and the
 * caller retries a read that failed with EFAULT. */
static int maybe(uint64_t a, uint64_t b)
{
    uint32_t n = __atomic_load_n(&nr, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < MAPS_MAX; i++)
        if (__atomic_load_n(&reg[i].start, __ATOMIC_RELAXED) < b && __atomic_load_n(&reg[i].end, __ATOMIC_RELAXED) > a) return 1;
    return 0;
}

int fj_map_before_fill(const void *buf, size_t len)
{
    if (!fj.maps || !len) return 0;
    uint64_t a = (uint64_t)buf & ~(PAGE - 1), b = ((uint64_t)buf + len + PAGE - 1) & ~(PAGE - 1);
    if (!maybe(a, b)) return 0;
    long r = 0;
    int hit = 0;
    lock();
    for (uint32_t i = find(a); i < nr && reg[i].start < b && r == 0; i++) {
        if (!writable(&reg[i])) continue;
        hit = 1;
        r = open_pages(i, reg[i].start > a ? reg[i].start : a, reg[i].end < b ? reg[i].end : b);
    }
    unlock();
    return r < 0 ? (int)r : hit;
}

int fj_map_prot(uint64_t start, uint64_t end)
{
    uint32_t i = find(start);
    return i < nr && reg[i].start <= start && reg[i].end >= end ? reg[i].prot : -1;
}

/* ---------------------------------------------------------------- checkpoints */

/* One line of /proc/self/maps. */
struct vma { uint64_t start, end, off, dev, ino; int prot, shared; const char *path; };

static uint64_t hex(const char **s)
{
    uint64_t v = 0;
    for (;; (*s)++) {
        char c = **s;
        if (c >= '0' && c <= '9') v = v * 16 + (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (uint64_t)(c - 'a' + 10);
        else return v;
    }
}

static int parse(const char *p, struct vma *m)
{
    m->start = hex(&p); if (*p++ != '-') return -1;
    m->end = hex(&p); if (*p++ != ' ') return -1;
    if (!p[0] || !p[1] || !p[2] || !p[3]) return -1;
    m->prot = (p[0] == 'r' ? PROT_READ : 0) | (p[1] == 'w' ? PROT_WRITE : 0) | (p[2] == 'x' ? PROT_EXEC : 0);
    m->shared = p[3] == 's';
    p += 5;
    m->off = hex(&p); p++;
    uint64_t maj = hex(&p); p++;
    uint64_t min = hex(&p); p++;
    m->dev = makedev(maj, min);
    m->ino = 0;
    while (*p >= '0' && *p <= '9') m->ino = m->ino * 10 + (uint64_t)(*p++ - '0');
    while (*p == ' ') p++;
    m->path = p;
    return 0;
}

/* What a sync builds (static: it runs in signal handlers, under the lock). */
static struct { uint64_t start, end; } runs[RUNS_MAX];
static uint32_t nruns;
static long sync_err;

/* Adds [s, t) of a VMA to the new registry, merged with the previous
 * piece when it continues it; o: the old registry's mapping there. */
static void piece(const struct vma *m, uint64_t s, uint64_t t, const struct shmap *o)
{
    struct shmap e = {s, t, m->off + (s - m->start), m->dev, m->ino, o ? o->fd : -1, o ? o->prot : m->prot, o ? o->armed : 0, 0, 0};
    if (o && o->armed && (m->prot & PROT_WRITE)) { /* opened this interval */
        if (nruns < RUNS_MAX) { runs[nruns].start = s; runs[nruns].end = t; nruns++; }
        else e.whole = 1;
    }
    struct shmap *last = nn ? &nreg[nn - 1] : NULL;
    if (last && last->dev == e.dev && last->ino == e.ino && last->end == e.start && last->prot == e.prot &&
        last->off + (last->end - last->start) == e.off && (last->fd == e.fd || e.fd < 0)) {
        last->end = e.end;
        last->whole |= e.whole | (last->armed != e.armed);
        last->armed &= e.armed;
        return;
    }
    if (e.fd < 0) e.fd = file_fd(e.dev, e.ino, -1, m->path); /* mapped by a raw system call, or restored */
    if (e.fd < 0) return; /* untracked (or unreadable: as before) */
    if (nn < MAPS_MAX) { nreg[nn++] = e; return; }
    /* no room: saved whole into the interval being opened */
    if (sync_v && sync_err == 0 && (e.prot & PROT_WRITE)) sync_err = save(&e, e.start, e.end);
}

static void take(const struct vma *m)
{
    if (!m->shared || !m->ino || m->path[0] != '/' || fj_owns(m->start, m->end)) return;
    size_t pl = slen(m->path);
    if (pl > (size_t)LZ_DELETED_LEN && !strcmp(m->path + pl - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) return;
    /* cut by the old registry's mappings (our protection may have merged
     * pieces the program gave different protections) */
    uint64_t cur = m->start;
    for (uint32_t i = find(m->start); i < nr && reg[i].start < m->end; i++) {
        const struct shmap *o = &reg[i];
        uint64_t s = o->start > cur ? o->start : cur, t = o->end < m->end ? o->end : m->end;
        int same = o->dev == m->dev && o->ino == m->ino && o->off + (s - o->start) == m->off + (s - m->start);
        if (!same) continue;
        if (cur < s && (m->prot & PROT_WRITE)) piece(m, cur, s, NULL);
        piece(m, s, t, o);
        cur = t;
    }
    if (cur < m->end && (m->prot & PROT_WRITE)) piece(m, cur, m->end, NULL);
}

/* Reads /proc/self/maps line by line (opened pages may make it long). */
static long read_maps(void)
{
    static char buf[1 << 16];
    long fd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return fd;
    size_t have = 0;
    long r = 0;
    for (;;) {
        long k = lz_sc3(SYS_read, fd, buf + have, sizeof buf - 1 - have);
        if (k == -EINTR) continue;
        if (k < 0) { r = k; break; }
        have += (size_t)k;
        char *line = buf, *eol;
        while ((eol = memchr(line, '\n', have - (size_t)(line - buf)))) {
            *eol = 0;
            struct vma m;
            if (parse(line, &m) == 0) take(&m);
            line = eol + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (k == 0 || have == sizeof buf - 1) break;
    }
    lz_sc1(SYS_close, fd);
    return r;
}

/* At a checkpoint (v NULL: in the pause, before the regions are read) and
 * when an interval opens (v: its journal): the registry checked against
 * /proc/self/maps, and every writable page of it protected.  A mapping
 * that cannot be registered or protected is saved whole into v. */
long trk_maps_arm(struct interval *v)
{
    nn = nruns = 0;
    sync_v = v;
    sync_err = 0;
    long r = read_maps();
    if (r < 0) { sync_v = NULL; return r; } /* nothing changed: the old registry stands */
    commit(nn);
    uint32_t k = 0;
    for (uint32_t i = 0; i < nr; i++) {
        struct shmap *e = &reg[i];
        if (!(e->prot & PROT_WRITE)) { e->armed = 0; continue; }
        uint32_t k0 = k, n = 0;
        while (k0 < nruns && runs[k0].start < e->start) k0++;
        for (k = k0; k < nruns && runs[k].start < e->end; k++) n++;
        long p = 0;
        /* one mprotect per opened run costs ~8 us (the mapping is merged
         * again); one for all walks its page table, ~5 us per MiB */
        if (!e->armed || e->whole || (uint64_t)n * 8 > ((e->end - e->start) >> 20) * 5 + 8)
            p = lz_sc3(SYS_mprotect, e->start, e->end - e->start, ro(e->prot));
        else
            for (uint32_t j = k0; j < k && p == 0; j++) p = lz_sc3(SYS_mprotect, runs[j].start, runs[j].end - runs[j].start, ro(e->prot));
        e->whole = e->dirty = 0;
        e->armed = 1;
        if (p < 0) { /* cannot be protected: open, and saved whole */
            if (v && sync_err == 0) sync_err = save(e, e->start, e->end);
            if (lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot) == 0) e->armed = 0;
        }
    }
    opened = nlog = 0;
    sync_v = NULL;
    return sync_err;
}

/* PROCMAP_QUERY (Linux 6.11): the VMA at an address, without the text of
 * every mapping (/proc/self/maps of a 1 GiB mapping with 1 % of its pages
 * opened is 5000 lines: 4.7 ms to read).  Not in Debian 12's headers. */
struct procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY_IOCTL _IOWR('f', 17, struct procmap_query)
#define PROCMAP_SHARED 0x08

/* 1 when the VMA at addr maps e's file at the offset e says. */
static int still(long mfd, const struct shmap *e, uint64_t addr)
{
    struct procmap_query q;
    memset(&q, 0, sizeof q);
    q.size = sizeof q;
    q.query_addr = addr;
    if (lz_sc3(SYS_ioctl, mfd, PROCMAP_QUERY_IOCTL, &q) < 0) return 0;
    return q.vma_start <= addr && (q.vma_flags & PROCMAP_SHARED) && q.inode == e->ino &&
           makedev(q.dev_major, q.dev_minor) == e->dev && q.vma_offset + (addr - q.vma_start) == e->off + (addr - e->start);
}

/* The pause's protection, before the regions are read: what was opened
 * since the last one, from the log, the registry checked mapping by mapping
 * (its first and last page) rather than by reading every line of maps; the
 * full sync (trk_maps_arm) when that cannot be done.  It runs again when
 * the interval opens, on a maps text merged back to a few lines. */
static long quick_arm(void)
{
    long mfd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (mfd < 0) return mfd;
    long r = 0;
    for (uint32_t i = 0; i < nr && r == 0; i++)
        if (!still(mfd, &reg[i], reg[i].start) || !still(mfd, &reg[i], reg[i].end - PAGE)) r = -ESTALE;
    lz_sc1(SYS_close, mfd);
    if (r < 0) return r;
    for (uint32_t i = 0; i < nr && r == 0; i++) {
        struct shmap *e = &reg[i];
        if (!(e->prot & PROT_WRITE)) continue;
        if (!e->armed || e->whole || (e->dirty && nlog > LOG_MAX)) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, ro(e->prot));
        else if (e->dirty)
            for (uint32_t k = 0; k < nlog && r == 0; k++) {
                uint64_t a = olog[k].a > e->start ? olog[k].a : e->start, b = olog[k].b < e->end ? olog[k].b : e->end;
                if (a < b) r = lz_sc3(SYS_mprotect, a, b - a, ro(e->prot));
            }
        if (r == 0) { e->armed = 1; e->whole = e->dirty = 0; }
    }
    if (r == 0) opened = nlog = 0;
    return r;
}

void fj_maps_arm(void)
{
    if (!fj.fdt) return;
    lock();
    if (quick_arm() < 0) trk_maps_arm(NULL);
    unlock();
}

void trk_maps_forget(void)
{
    /* after a restart: the descriptors were not restored (their numbers may
     * be the program's now); the mappings are found again in maps */
    nr = nfiles = 0;
    opened = nlog = 0;
    fj.maps = 0;
}
