/* The address space: /proc/self/smaps gives the mappings and their flags.
 * Which pages hold data is the writer's business (rt_plan.c): every present
 * or swapped page of anonymous memory, and the copied-on-write pages of
 * private file mappings; the rest of a file mapping is identified by a hash
 * of the file range it maps, checked again at restart. */
#include "rt.h"
#include "track.h"
#include "rt_map.h"
#include "rt_dirty.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>


/* Hashes of mapped file ranges, kept between checkpoints (libraries don't change). */
struct hash_cache_ent { uint64_t dev, ino, size, off, len; int64_t mtime; uint64_t hash; };
static struct hash_cache_ent hash_cache[256];
static unsigned hash_cache_n;

static uint64_t parse_hex(const char **s)
{
    uint64_t v = 0;
    for (;; (*s)++) {
        char c = **s;
        if (c >= '0' && c <= '9') v = v * 16 + (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (uint64_t)(c - 'a' + 10);
        else break;
    }
    return v;
}

static uint64_t parse_dec(const char **s)
{
    uint64_t v = 0;
    while (**s >= '0' && **s <= '9') v = v * 10 + (uint64_t)(*(*s)++ - '0');
    return v;
}

static int is_header(const char *l)
{
    const char *s = l;
    while ((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')) s++;
    return s != l && *s == '-';
}

static uint32_t vmflags(const char *s)
{
    uint32_t f = 0;
    while (*s && *s != '\n') {
        while (*s == ' ') s++;
        char a = s[0], b = s[1];
        if (a == 'g' && b == 'd') f |= LZ_RF_GROWSDOWN;
        if (a == 'h' && b == 'g') f |= LZ_RF_HUGEPAGE;
        if (a == 'n' && b == 'h') f |= LZ_RF_NOHUGEPAGE;
        if (a == 'd' && b == 'd') f |= LZ_RF_DONTDUMP;
        if (a == 'd' && b == 'c') f |= LZ_RF_DONTFORK;
        if (a == 'w' && b == 'f') f |= LZ_RF_WIPEONFORK;
        if (a == 'l' && b == 'o') f |= LZ_RF_LOCKED;
        if (a == 'd' && b == 'p') f |= LZ_RF_DROPPABLE;
        if (a == 'n' && b == 'r') f |= LZ_RF_NORESERVE;
        if (a == 'm' && b == 'g') f |= LZ_RF_MERGEABLE;
        if (a == 's' && b == 'r') f |= LZ_RF_SEQREAD;
        if (a == 'r' && b == 'r') f |= LZ_RF_RANDREAD;
        while (*s && *s != ' ' && *s != '\n') s++;
    }
    return f;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = rt_strlen(s), b = rt_strlen(suffix);
    return a >= b && memcmp(s + a - b, suffix, b) == 0;
}

static int file_range_hash(struct rt_ckpt *ck, struct lz_region *r, const char *path, uint64_t *out)
{
    for (unsigned i = 0; i < hash_cache_n; i++) {
        struct hash_cache_ent *e = &hash_cache[i];
        if (e->dev == r->file_dev && e->ino == r->file_ino && e->size == r->file_size &&
            e->mtime == r->file_mtime_ns && e->off == r->file_offset && e->len == r->end - r->start) {
            *out = e->hash;
            return 0;
        }
    }
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    size_t bufsz = 1 << 20;
    char *buf = arena_alloc(&ck->arena, bufsz);
    uint64_t off = r->file_offset, end = r->file_offset + (r->end - r->start);
    if (end > r->file_size) end = r->file_size;
    int rc = buf ? 0 : -1;
    while (rc == 0 && off < end) {
        size_t want = end - off < bufsz ? end - off : bufsz;
        long got = lz_sc4(SYS_pread64, fd, buf, want, off);
        if (got == -EINTR) continue;
        if (got <= 0) { rc = -1; break; }
        XXH3_64bits_update(&st, buf, (size_t)got);
        off += (uint64_t)got;
    }
    lz_sc1(SYS_close, fd);
    if (rc) return rc;
    *out = XXH3_64bits_digest(&st);
    struct hash_cache_ent *e = &hash_cache[hash_cache_n++ % 256];
    if (hash_cache_n > 256) hash_cache_n = 256;
    *e = (struct hash_cache_ent){r->file_dev, r->file_ino, r->file_size, r->file_offset, r->end - r->start,
                                 r->file_mtime_ns, *out};
    return 0;
}

/* VmFlags of each mapping, by its bounds.  /proc/self/smaps walks every page
 * of every mapping (14 ms per GiB) while /proc/self/maps does not, so the
 * pause reads only maps: a mapping with bounds not seen before has its
 * flags read by the writer (rt_settle_flags), from the snapshot, and handed
 * back through the shared map for the next pause.  The pause must know
 * which memory a fork would not copy (MADV_DONTFORK) or would zero
 * (MADV_WIPEONFORK), so it reads smaps itself after the program asked for
 * either (the madvise interposer), when a mapping with either flag is gone
 * from maps (moved, split: its pieces have new bounds), and after a restart;
 * also when it writes the checkpoint itself, when memory is locked (a fork
 * child does not inherit VM_LOCKED), or when the log overflowed.  Huge-page,
 * dump, KSM and read-ahead advice is only logged and applied to the mappings it covers
 * (those flags only go into the image). */
struct vmf { uint64_t start, end; uint32_t flags; };
#define VMF_MAX 4096
static struct vmf vmf_cache[VMF_MAX];
static size_t vmf_n;
static volatile int flags_stale;

#define ADVICE_MAX 64
static struct { uint64_t start, end; uint32_t set, clear; } advice_log[ADVICE_MAX];
static size_t nadvice;

/* after a restart: the restorer set every mapping's flags anew, some of
 * which a fork must know (the first pause reads smaps) */
void rt_regions_forget(void) { vmf_n = 0; nadvice = 0; flags_stale = 1; }

/* The program's madvise: DONTFORK, WIPEONFORK, HUGEPAGE, DONTDUMP and their
 * opposites change flags a checkpoint needs; MADV_FREE lets the kernel drop
 * a page without the write tracker hearing of it (rt_plan.c).  (A raw madvise system call is
 * not seen: the writer then finds memory missing from its snapshot and fails
 * that checkpoint, see rt_settle_flags.) */
RT_API int madvise(void *addr, size_t len, int advice)
{
    uint32_t set = 0, clear = 0;
    int fork = 0; /* what a fork copies: known from smaps only, never guessed from the log */
    switch (advice) {
    case MADV_DONTFORK: case MADV_DOFORK: case MADV_WIPEONFORK: case MADV_KEEPONFORK: fork = 1; break;
    case MADV_HUGEPAGE: set = LZ_RF_HUGEPAGE; clear = LZ_RF_NOHUGEPAGE; break;
    case MADV_NOHUGEPAGE: set = LZ_RF_NOHUGEPAGE; clear = LZ_RF_HUGEPAGE; break;
    case MADV_DONTDUMP: set = LZ_RF_DONTDUMP; break;
    case MADV_DODUMP: clear = LZ_RF_DONTDUMP; break;
    case MADV_MERGEABLE: set = LZ_RF_MERGEABLE; break;
    case MADV_UNMERGEABLE: clear = LZ_RF_MERGEABLE; break;
    case MADV_SEQUENTIAL: set = LZ_RF_SEQREAD; clear = LZ_RF_RANDREAD; break;
    case MADV_RANDOM: set = LZ_RF_RANDREAD; clear = LZ_RF_SEQREAD; break;
    case MADV_NORMAL: clear = LZ_RF_SEQREAD | LZ_RF_RANDREAD; break;
    }
    if (advice == MADV_FREE) rt.lazyfree = 1; /* before: a checkpoint may come right after the call */
    rt_enter(); /* no checkpoint between the call and its log entry */
    long r = 0;
    /* a hole punched through a shared file mapping: the kernel's write */
    if (advice == MADV_REMOVE && fj_map_before_fill(addr, len) < 0) r = -EIO;
    if (r == 0) r = lz_sc3(SYS_madvise, addr, len, advice);
    if (fork) flags_stale = 1;
    if (r == 0 && (set | clear)) {
        uint64_t a = (uint64_t)addr & ~4095ull, b = ((uint64_t)addr + len + 4095) & ~4095ull;
        size_t k = __atomic_fetch_add(&nadvice, 1, __ATOMIC_RELAXED); /* threads advise at once */
        if (k < ADVICE_MAX) advice_log[k] = (__typeof__(advice_log[0])){a, b, set, clear};
        else flags_stale = 1;
    }
    rt_leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}

static uint32_t advised(uint64_t start, uint64_t end, uint32_t flags)
{
    for (size_t k = 0; k < nadvice && k < ADVICE_MAX; k++)
        if (advice_log[k].start < end && advice_log[k].end > start)
            flags = (flags | advice_log[k].set) & ~advice_log[k].clear;
    return flags;
}

/* Memory locked with mlock: VmLck of /proc/self/status, in kB. */
static uint64_t locked_kb(void)
{
    char buf[4096];
    long n = rt_read_file("/proc/self/status", buf, sizeof buf - 1);
    if (n <= 0) return 1; /* cannot tell: read smaps */
    buf[n] = 0;
    for (const char *s = buf; *s; s++)
        if ((s == buf || s[-1] == '\n') && !memcmp(s, "VmLck:", 6)) {
            s += 6;
            while (*s == ' ' || *s == '\t') s++;
            return parse_dec(&s);
        }
    return 0;
}

static struct vmf *vmf_find(uint64_t start, uint64_t end)
{
    size_t lo = 0, hi = vmf_n;
    while (lo < hi) { size_t m = (lo + hi) / 2; if (vmf_cache[m].start < start) lo = m + 1; else hi = m; }
    return lo < vmf_n && vmf_cache[lo].start == start && vmf_cache[lo].end == end ? &vmf_cache[lo] : NULL;
}

static int skipped(struct rt_ckpt *ck, uint64_t start, uint64_t end, const char *name)
{
    uint64_t arena_lo = (uint64_t)ck->arena.base, arena_hi = arena_lo + ck->arena.cap;
    return (start >= arena_lo && end <= arena_hi) || fj_owns(start, end) || rt_map_owns(start, end) ||
           (name[0] == '[' && name[1] == 'v');
}

/* 1 when every mapping listed in maps text has cached flags */
static int cache_covers(struct rt_ckpt *ck, const char *s)
{
    while (*s) {
        const char *q = s;
        uint64_t start = parse_hex(&q); q++;
        uint64_t end = parse_hex(&q);
        const char *name = q;
        while (*name && *name != '\n' && *name != '[' && *name != '/') name++;
        if (!skipped(ck, start, end, *name == '[' ? name : "") && !vmf_find(start, end)) return 0;
        while (*s && *s != '\n') s++;
        if (*s) s++;
    }
    return 1;
}

/* Keeps the cached flags of mappings still there (bounds in the maps text)
 * and takes those the last writer learned. */
static void cache_refresh(struct rt_ckpt *ck, const char *s)
{
    const struct rt_map_flags *lv;
    size_t nl = rt_map_ready() ? rt_map_learned(&lv) : 0;
    struct vmf *keep = arena_alloc(&ck->arena, sizeof vmf_cache);
    size_t nk = 0;
    int lost = 0;
    if (!keep) { flags_stale = 1; if (nl) rt_map_learned_clear(); return; }
    while (*s && nk < VMF_MAX) {
        const char *q = s;
        uint64_t start = parse_hex(&q); q++;
        uint64_t end = parse_hex(&q);
        /* what the writer learned is newer than the cache */
        size_t lo = 0, hi = nl; /* in address order */
        while (lo < hi) { size_t m = (lo + hi) / 2; if (lv[m].start < start) lo = m + 1; else hi = m; }
        const struct vmf *f = vmf_find(start, end);
        if (lo < nl && lv[lo].start == start && lv[lo].end == end) keep[nk++] = (struct vmf){start, end, lv[lo].flags};
        else if (f) keep[nk++] = *f;
        else lost = 1;
        while (*s && *s != '\n') s++;
        if (*s) s++;
    }
    /* a mapping a fork treats specially, gone (moved, split): which pieces
     * keep the flag only smaps can tell */
    for (size_t i = 0, k = 0; lost && i < vmf_n; i++) {
        while (k < nk && keep[k].start < vmf_cache[i].start) k++;
        int kept = k < nk && keep[k].start == vmf_cache[i].start && keep[k].end == vmf_cache[i].end;
        if (!kept && (vmf_cache[i].flags & (LZ_RF_DONTFORK | LZ_RF_WIPEONFORK))) flags_stale = 1;
    }
    memcpy(vmf_cache, keep, nk * sizeof *keep);
    vmf_n = nk;
    if (nl) rt_map_learned_clear();
}

int rt_capture_regions(struct rt_ckpt *ck)
{
    /* writable shared file mappings protected again for the next interval
     * (files/track_maps.c): the pages opened in this one made a mapping
     * each, which this merges back before maps is read */
    fj_maps_arm();
    size_t cap = 64u << 20;
    char *text = arena_alloc(&ck->arena, cap);
    if (!text) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    long n = rt_read_file("/proc/self/maps", text, cap - 1);
    if (n <= 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/maps"); return -1; }
    text[n] = 0;
    cache_refresh(ck, text);
    int have_flags = flags_stale ||
                     (!cache_covers(ck, text) && (ck->trigger == LZ_TRIG_API || rt.nofork || locked_kb()));
    if (have_flags) {
        flags_stale = 0;
        nadvice = 0;
        n = rt_read_file("/proc/self/smaps", text, cap - 1);
        if (n <= 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/smaps"); return -1; }
        text[n] = 0;
        vmf_n = 0;
    }
    size_t maxr = 1;
    for (const char *s = text; *s; s++) if (*s == '\n' && is_header(s + 1)) maxr++;
    ck->regions = arena_alloc(&ck->arena, maxr * sizeof *ck->regions);
    ck->rdirty = arena_alloc(&ck->arena, maxr * sizeof *ck->rdirty);
    if (!ck->regions || !ck->rdirty) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    struct lz_proc *p = ck->proc;
    uint64_t vd_lo = ~0ull, vd_hi = 0;
    int rc = 0;
    const char *s = text;
    while (*s && rc == 0) {
        const char *line = s;
        while (*s && *s != '\n') s++;
        if (*s) s++;
        if (!is_header(line)) continue;
        const char *q = line;
        uint64_t start = parse_hex(&q); q++;
        uint64_t end = parse_hex(&q); q++;
        char perm[4] = {q[0], q[1], q[2], q[3]}; q += 5;
        uint64_t off = parse_hex(&q); q++;
        uint64_t maj = parse_hex(&q); q++;
        uint64_t min = parse_hex(&q); q++;
        uint64_t ino = parse_dec(&q);
        while (*q == ' ') q++;
        char path[LZ_PATH_MAX];
        size_t pl = 0;
        while (q[pl] && q[pl] != '\n' && pl < sizeof path - 1) { path[pl] = q[pl]; pl++; }
        path[pl] = 0;
        uint32_t flags = 0;
        int unknown = 0;
        if (have_flags) {
            for (const char *t = s; *t && !is_header(t);) {
                if (!memcmp(t, "VmFlags:", 8)) flags = vmflags(t + 8);
                while (*t && *t != '\n') t++;
                if (*t) t++;
            }
            if (vmf_n < sizeof vmf_cache / sizeof vmf_cache[0]) vmf_cache[vmf_n++] = (struct vmf){start, end, flags};
        } else {
            struct vmf *f = vmf_find(start, end);
            flags = advised(start, end, f ? f->flags : 0);
            if (f) f->flags = flags;
            unknown = !f;
        }
        if (skipped(ck, start, end, "")) continue;
        if (!strcmp(path, "[vsyscall]")) continue;
        if (!strcmp(path, "[vvar]") || !strcmp(path, "[vvar_vclock]") || !strcmp(path, "[vdso]")) {
            if (start < vd_lo) vd_lo = start;
            if (end > vd_hi) vd_hi = end;
            if (!strcmp(path, "[vdso]")) { p->vdso_offset = start; p->vdso_hash = lz_hash((void *)start, end - start); }
            continue;
        }
        memset(&ck->rdirty[ck->nregions], 0, sizeof ck->rdirty[0]);
        ck->rdirty[ck->nregions].flags_unknown = (uint8_t)unknown;
        struct lz_region *r = &ck->regions[ck->nregions++];
        memset(r, 0, sizeof *r);
        r->start = start; r->end = end;
        r->prot = (perm[0] == 'r' ? PROT_READ : 0) | (perm[1] == 'w' ? PROT_WRITE : 0) | (perm[2] == 'x' ? PROT_EXEC : 0);
        r->flags = flags;
        int shared = perm[3] == 's';
        ck->mem_bytes += end - start;
        if (!strcmp(path, "[heap]")) r->flags |= LZ_RF_HEAP;
        if (!strcmp(path, "[stack]")) r->flags |= LZ_RF_STACK;
        struct stat st;
        int gone = ends_with(path, " (deleted)");
        long sr = gone || path[0] != '/' ? -1 : lz_sc4(SYS_newfstatat, AT_FDCWD, path, &st, 0);
        int same = sr == 0 && st.st_ino == ino && (uint64_t)major(st.st_dev) == maj && (uint64_t)minor(st.st_dev) == min;
        if (ino == 0 || path[0] != '/' || !strncmp(path, "/dev/zero", 9) || !strncmp(path, "/SYSV", 5) || (shared && !same)) {
            /* anonymous memory; or shared memory no file name leads to
             * (MAP_SHARED|MAP_ANONYMOUS shows as /dev/zero, memfd, a deleted
             * /dev/shm file): kept by content, named by its inode so that
             * processes that share it share it again after a restart */
            r->kind = shared ? LZ_R_SHARED_ANON : LZ_R_ANON;
            if (shared && !strncmp(path, "/SYSV", 5)) r->flags |= LZ_RF_SYSV; /* the inode is its id (rt_sysv.c) */
            if (shared) {
                r->file_dev = makedev(maj, min);
                r->file_ino = ino;
                r->file_offset = off;
            }
            continue;
        }
        /* a file mapping */
        r->file_offset = off;
        if (shared) {
            int asked = fj_map_prot(start, end); /* not our write protection */
            if (asked >= 0) r->prot = (uint32_t)asked;
            r->kind = LZ_R_FILE_SHARED;
            r->path = strings_add(&ck->strings, path);
            r->file_dev = st.st_dev; r->file_ino = st.st_ino; r->file_size = (uint64_t)st.st_size;
            r->file_mtime_ns = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
            continue;
        }
        if (same) {
            r->kind = LZ_R_FILE_PRIVATE;
            r->path = strings_add(&ck->strings, path);
            r->file_dev = st.st_dev; r->file_ino = st.st_ino; r->file_size = (uint64_t)st.st_size;
            r->file_mtime_ns = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
            if (file_range_hash(ck, r, path, &r->file_hash) == 0) continue;
        }
        /* The mapped file is gone or changed on disk: keep the mapping by content. */
        r->kind = LZ_R_ANON;
        r->path = 0;
        ck->rdirty[ck->nregions - 1].from_content = 1;
    }
    if (rc == 0) nadvice = 0; /* the log is in the flags now */
    if (rc == 0 && vd_hi) {
        p->vdso_block_start = vd_lo;
        p->vdso_block_end = vd_hi;
        p->vdso_offset -= vd_lo;
    }
    return rc;
}

int rt_flags_needed(const struct rt_ckpt *ck)
{
    /* a forked writer always: only smaps' VmFlags show a mapping the program
     * made wipe-on-fork with a raw system call (zeros in the snapshot) */
    if (ck->in_child && !ck->planned) return 1;
    for (size_t i = 0; i < ck->nregions; i++) if (ck->rdirty[i].flags_unknown) return 1;
    return 0;
}

#define SMAPS_CAP (64u << 20)

int rt_flags_prepare(struct rt_ckpt *ck)
{
    if (!rt_flags_needed(ck)) return 0;
    ck->smaps = arena_alloc(&ck->arena, SMAPS_CAP);
    return ck->smaps ? 1 : 0;
}

void rt_flags_read(struct rt_ckpt *ck)
{
    if (!ck->smaps) return;
    ck->smaps_len = rt_read_file("/proc/self/smaps", ck->smaps, SMAPS_CAP - 1);
    if (ck->smaps_len > 0) ck->smaps[ck->smaps_len] = 0;
}

int rt_settle_flags(struct rt_ckpt *ck)
{
    int snapshot = ck->in_child && !ck->planned; /* a forked writer: its mappings are the snapshot */
    if (!rt_flags_needed(ck)) return 0;
    if (!ck->smaps && !(ck->smaps = arena_alloc(&ck->arena, SMAPS_CAP))) return rt_fail(ck, "out of checkpoint scratch memory", 0);
    if (!ck->smaps_len) rt_flags_read(ck); /* not read beside the writing: now */
    if (ck->smaps_len <= 0) return rt_fail(ck, "cannot read /proc/self/smaps", ck->smaps_len);
    if (ck->smaps_len >= (long)SMAPS_CAP - 1) return rt_fail(ck, "the program has too many mappings (/proc/self/smaps over 64 MiB)", 0);
    const char *s = ck->smaps;
    for (size_t i = 0; i < ck->nregions; i++) {
        struct lz_region *r = &ck->regions[i];
        /* both lists are in address order; the mapping holding the region
         * (the writer's own mprotect of a PROT_NONE region may merge it) */
        uint64_t start = 0, end = 0;
        uint32_t flags = 0;
        while (*s) {
            const char *q = s;
            start = parse_hex(&q); q++;
            end = parse_hex(&q);
            if (end > r->start) break;
            do { while (*s && *s != '\n') s++; if (*s) s++; } while (*s && !is_header(s));
        }
        int found = *s && start <= r->start && end >= r->end;
        int overlaps = *s && start < r->end; /* part of it is there: not a fork's doing */
        if (found)
            for (const char *t = s + 1; *t;) {
                while (*t && *t != '\n') t++;
                if (*t) t++;
                if (!*t || is_header(t)) break;
                if (!memcmp(t, "VmFlags:", 8)) flags = vmflags(t + 8);
            }
        int stored = r->kind == LZ_R_ANON || r->kind == LZ_R_FILE_PRIVATE;
        if (snapshot && stored && (!found || (flags & (LZ_RF_WIPEONFORK | LZ_RF_DROPPABLE)) == LZ_RF_WIPEONFORK)) {
            /* the pause did not know: the snapshot lacks this memory */
            if (found || !overlaps) rt_map_learn(r->start, r->end, found ? flags : (r->flags & ~(LZ_RF_HEAP | LZ_RF_STACK | LZ_RF_SYSV)) | LZ_RF_DONTFORK);
            rt_fmt(ck->err, sizeof ck->err,
                   "memory at %llx-%llx was excluded from fork (%s) after the previous checkpoint: the next checkpoint includes it",
                   (unsigned long long)r->start, (unsigned long long)r->end, found ? "MADV_WIPEONFORK" : "MADV_DONTFORK");
            return -1;
        }
        if (ck->rdirty[i].flags_unknown && found) {
            /* what the pause knew from the madvise log: a forked writer sees those undone */
            uint32_t fork = r->flags & (LZ_RF_DONTFORK | LZ_RF_WIPEONFORK);
            r->flags = (r->flags & (LZ_RF_HEAP | LZ_RF_STACK | LZ_RF_SYSV)) | flags | fork;
            rt_map_learn(r->start, r->end, flags | fork);
        }
    }
    return 0;
}

int rt_track_all(void)
{
    char err[200];
    if (rt.nodirty || (!rt_dirty_active() && rt_dirty_init(RT_DIRTY_FD_BASE, err, sizeof err) < 0)) return 0;
    static char maps[1 << 18];
    long n = rt_read_file("/proc/self/maps", maps, sizeof maps - 1);
    if (n <= 0) return 0;
    maps[n] = 0;
    for (const char *l = maps; *l;) {
        const char *q = l;
        uint64_t start = parse_hex(&q); q++;
        uint64_t end = parse_hex(&q);
        int priv = q[0] == ' ' && q[4] == 'p';
        const char *eol = q;
        while (*eol && *eol != '\n') eol++;
        int special = 0; /* [vvar] [vdso] [vsyscall] */
        for (const char *c = q; c < eol; c++) if (*c == '[' && c[1] == 'v') special = 1;
        /* memory in huge pages (restored so, say) stays untracked: tracking would split it */
        if (priv && !special && !fj_owns(start, end) && !rt_map_owns(start, end) && !rt_pages_keep_whole(start, end))
            rt_dirty_track(start, end);
        l = *eol ? eol + 1 : eol;
    }
    return 1;
}
