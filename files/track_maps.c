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
 * The registry below knows every shared mapping of a file open read-write
 * in the process (made through mmap, or found in /proc/self/maps at a
 * checkpoint or a restart), what protection the program asked for, and a
 * read-only descriptor of the file.  Mapping calls keep it exact (the
 * runtime calls fj_map_added/removed/moved/protect); each checkpoint checks
 * it against the kernel's list before protecting anything
 * (track_maps_arm.c).  Raw system calls only: this runs in the SIGSEGV and
 * the checkpoint handler (track_internal.h, track_maps.h). */
#include "track_maps.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

struct shmap shm_reg[MAPS_MAX], shm_nreg[MAPS_MAX];
uint32_t shm_nr, shm_nn, shm_opened, shm_nlog;
struct shm_range shm_olog[LOG_MAX];
struct interval *shm_sync_v;

static int writable(const struct shmap *e) { return e->armed && (e->prot & PROT_WRITE); }

/* The fast test of the runtime's hooks (fj_maps_any). */
static void publish(void) { __atomic_store_n(&fj.maps, (int)shm_nr, __ATOMIC_RELEASE); }

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

void shm_commit(uint32_t n)
{
    memcpy(shm_reg, shm_nreg, n * sizeof *shm_reg);
    shm_nr = n;
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

/* Saves the content at N of [s, t) of mapping e: its pages not saved yet in
 * this interval through any descriptor of the inode. */
long shm_save(const struct shmap *e, uint64_t s, uint64_t t)
{
    /* (before the first checkpoint: nothing to go back to) */
    struct interval *v = shm_sync_v ? shm_sync_v : fj.live ? &trk_E.iv[trk_E.cur] : NULL;
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
int shm_file_fd(uint64_t dev, uint64_t ino, int via, const char *path)
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
            if (!holds(shm_reg, shm_nr, files[i].fd) && !holds(shm_nreg, shm_nn, files[i].fd) && (at == nfiles || files[i].used < files[at].used)) at = i;
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

uint32_t shm_find(uint64_t a)
{
    uint32_t lo = 0, hi = shm_nr;
    while (lo < hi) { uint32_t m = (lo + hi) / 2; if (shm_reg[m].end <= a) lo = m + 1; else hi = m; }
    return lo;
}

/* A registered piece that cannot stay (no room left to split into): open
 * again, saved whole, so that no page stays protected with no one to open it. */
static void drop(const struct shmap *e)
{
    if (!e->armed || !(e->prot & PROT_WRITE)) return;
    shm_save(e, e->start, e->end);
    lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
}

static void push(uint32_t *n, const struct shmap *e)
{
    if (*n < MAPS_MAX) shm_nreg[(*n)++] = *e;
    else drop(e);
}

/* Forgets [a, b) (the mappings it cuts keep their other parts), then adds
 * `add` if given: its index, or -1 (no room). */
static int cut_add(uint64_t a, uint64_t b, const struct shmap *add)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < shm_nr; i++) {
        struct shmap e = shm_reg[i];
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
        while (at > 0 && shm_nreg[at - 1].start >= add->start) at--;
        memmove(&shm_nreg[at + 1], &shm_nreg[at], (n - (uint32_t)at) * sizeof *shm_nreg);
        shm_nreg[at] = *add;
        n++;
    }
    shm_commit(n);
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
        int own = shm_file_fd(st.st_dev, st.st_ino, fd, NULL);
        struct shmap e = {a, b, (uint64_t)off, st.st_dev, st.st_ino, own, prot, 0, 0, 0};
        int at = own >= 0 ? cut_add(a, b, &e) : -1;
        if (at < 0) {
            /* no room, no descriptor: saved whole, now and at every checkpoint */
            cut_add(a, b, NULL);
            e.fd = fd;
            if (prot & PROT_WRITE) r = shm_save(&e, a, b);
        } else if (fj.live && (prot & PROT_WRITE)) {
            r = lz_sc3(SYS_mprotect, a, b - a, shm_ro(prot));
            if (r == 0) shm_reg[at].armed = 1;
            else r = shm_save(&shm_reg[at], a, b);
        }
    }
    unlock();
    return (int)r;
}

void fj_map_removed(void *addr, size_t len)
{
    if (!shm_nr) return;
    uint64_t a = (uint64_t)addr & ~(PAGE - 1), b = ((uint64_t)addr + len + PAGE - 1) & ~(PAGE - 1);
    lock();
    cut_add(a, b, NULL);
    unlock();
}

int fj_map_before_move(void *addr, size_t len)
{
    /* mremap takes one mapping, and the pages opened since the checkpoint
     * made several of it: they are closed again first (their saves stand) */
    if (!shm_nr) return 0;
    uint64_t a = (uint64_t)addr & ~(PAGE - 1), b = ((uint64_t)addr + len + PAGE - 1) & ~(PAGE - 1);
    long r = 0;
    lock();
    for (uint32_t i = shm_find(a); i < shm_nr && shm_reg[i].start < b && r == 0; i++)
        if (shm_reg[i].armed) r = lz_sc3(SYS_mprotect, shm_reg[i].start, shm_reg[i].end - shm_reg[i].start, shm_ro(shm_reg[i].prot));
    unlock();
    return (int)r;
}

/* Protects [a, b) of the registered mapping at, or, if that fails, saves
 * it whole and leaves it open (under the lock). */
static long arm_or_save(int at, uint64_t a, uint64_t b)
{
    struct shmap *e = &shm_reg[at];
    if (!(e->prot & PROT_WRITE)) return 0;
    if (lz_sc3(SYS_mprotect, a, b - a, shm_ro(e->prot)) == 0) { e->armed = 1; return 0; }
    long r = shm_save(e, e->start, e->end);
    if (r == 0) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
    if (r == 0) e->armed = 0;
    return r;
}

int fj_map_moved(void *from, size_t oldlen, void *to, size_t newlen, int keep_old)
{
    if (!shm_nr) return 0;
    uint64_t a = (uint64_t)from & ~(PAGE - 1), b = ((uint64_t)from + oldlen + PAGE - 1) & ~(PAGE - 1);
    uint64_t na = (uint64_t)to, nb = (na + newlen + PAGE - 1) & ~(PAGE - 1);
    long r = 0;
    lock();
    uint32_t i = shm_find(a);
    if (i < shm_nr && shm_reg[i].start <= a) {
        struct shmap e = shm_reg[i];
        e.off += a - e.start;
        e.start = na;
        e.end = nb;
        if (!keep_old) cut_add(a, b, NULL);
        int at = cut_add(na, nb, &e);
        if (at >= 0 && e.armed) r = arm_or_save(at, na, nb); /* the part it grew by */
        else if (at >= 0 && (e.prot & PROT_WRITE)) r = shm_save(&shm_reg[at], na, nb); /* open: saved whole */
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
    for (uint32_t i = shm_find(a); i < shm_nr && shm_reg[i].start < b && r == 0; i++) {
        uint64_t s = shm_reg[i].start > a ? shm_reg[i].start : a, t = shm_reg[i].end < b ? shm_reg[i].end : b;
        if (cur < s) r = lz_sc3(SYS_mprotect, cur, s - cur, prot);
        if (r < 0) break;
        struct shmap e = shm_reg[i];
        e.off += s - e.start;
        e.start = s;
        e.end = t;
        e.prot = prot;
        int at = cut_add(s, t, &e);
        if (at < 0) { r = -ENOMEM; break; }
        i = (uint32_t)at;
        int arm = shm_reg[at].armed || (fj.live && (prot & PROT_WRITE)); /* writable again: protected */
        r = lz_sc3(SYS_mprotect, s, t - s, arm ? shm_ro(prot) : prot);
        if (r == 0) shm_reg[at].armed = (uint8_t)arm;
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
    for (uint32_t i = shm_find(a); i < shm_nr && shm_reg[i].start < b && r == 0; i++) {
        uint64_t s = shm_reg[i].start > a ? shm_reg[i].start : a;
        if (cur < s) r = lz_sc3(SYS_msync, cur, s - cur, flags);
        cur = shm_reg[i].end < b ? shm_reg[i].end : b;
        int seen = 0;
        for (int k = 0; k < nd; k++) seen |= done[k] == shm_reg[i].fd;
        if (seen || r < 0) continue;
        r = lz_sc1(SYS_fdatasync, shm_reg[i].fd);
        if (nd < 16) done[nd++] = shm_reg[i].fd;
    }
    if (r == 0 && cur < b) r = lz_sc3(SYS_msync, cur, b - cur, flags);
    unlock();
    return (int)r;
}

/* ---------------------------------------------------------------- opening pages */

/* Saves and opens [a, b) of the armed mapping i (under the lock). */
static long open_pages(uint32_t i, uint64_t a, uint64_t b)
{
    struct shmap *e = &shm_reg[i];
    if (shm_opened > OPEN_BUDGET) {
        /* many scattered stores: whole chunks, fewer mappings */
        uint64_t size = e->end - e->start, chunk = 64 * PAGE;
        while (size / chunk > 4096) chunk *= 2;
        a = e->start + ((a - e->start) & ~(chunk - 1));
        b = e->start + ((b - e->start + chunk - 1) & ~(chunk - 1));
        if (b > e->end) b = e->end;
    }
    long r = shm_save(e, a, b);
    if (r < 0) return r;
    r = lz_sc3(SYS_mprotect, a, b - a, e->prot);
    if (r == -ENOMEM) {
        /* out of mappings (vm.max_map_count): all of it, one mapping again */
        r = shm_save(e, e->start, e->end);
        if (r == 0) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot);
        if (r == 0) { e->armed = 0; e->whole = 1; }
    }
    if (r == 0) {
        shm_opened += (uint32_t)((b - a) / PAGE);
        e->dirty = 1;
        if (shm_nlog < LOG_MAX) { shm_olog[shm_nlog].a = a; shm_olog[shm_nlog].b = b; }
        shm_nlog++;
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
    uint32_t i = shm_find(f->a);
    f->r = i < shm_nr && shm_reg[i].start <= f->a && writable(&shm_reg[i]);
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
    uint32_t n = __atomic_load_n(&shm_nr, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < MAPS_MAX; i++)
        if (__atomic_load_n(&shm_reg[i].start, __ATOMIC_RELAXED) < b && __atomic_load_n(&shm_reg[i].end, __ATOMIC_RELAXED) > a) return 1;
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
    for (uint32_t i = shm_find(a); i < shm_nr && shm_reg[i].start < b && r == 0; i++) {
        if (!writable(&shm_reg[i])) continue;
        hit = 1;
        r = open_pages(i, shm_reg[i].start > a ? shm_reg[i].start : a, shm_reg[i].end < b ? shm_reg[i].end : b);
    }
    unlock();
    return r < 0 ? (int)r : hit;
}

int fj_map_prot(uint64_t start, uint64_t end)
{
    uint32_t i = shm_find(start);
    return i < shm_nr && shm_reg[i].start <= start && shm_reg[i].end >= end ? shm_reg[i].prot : -1;
}

void trk_maps_forget(void)
{
    /* after a restart: the descriptors were not restored (their numbers may
     * be the program's now); the mappings are found again in maps */
    shm_nr = nfiles = 0;
    shm_opened = shm_nlog = 0;
    fj.maps = 0;
}
