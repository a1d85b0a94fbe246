/* The address space: /proc/self/smaps gives the mappings and their flags.
 * Which pages hold data is the writer's business (rt_pages.c): every present
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

/* VmFlags of each mapping as of the last read of /proc/self/smaps, which
 * walks every page of every mapping (14 ms per GiB, in the pause) while
 * /proc/self/maps does not.  The flags change only through madvise, which
 * nearly always splits or merges the mapping: smaps is read again whenever
 * a mapping's bounds are not in the cache. */
struct vmf { uint64_t start, end; uint32_t flags; };
static struct vmf vmf_cache[4096];
static size_t vmf_n;

void rt_regions_forget(void) { vmf_n = 0; }

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

int rt_capture_regions(struct rt_ckpt *ck)
{
    size_t cap = 64u << 20;
    char *text = arena_alloc(&ck->arena, cap);
    if (!text) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    long n = rt_read_file("/proc/self/maps", text, cap - 1);
    if (n <= 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/maps"); return -1; }
    text[n] = 0;
    int have_flags = !cache_covers(ck, text);
    if (have_flags) {
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
        if (have_flags) {
            for (const char *t = s; *t && !is_header(t);) {
                if (!memcmp(t, "VmFlags:", 8)) flags = vmflags(t + 8);
                while (*t && *t != '\n') t++;
                if (*t) t++;
            }
            if (vmf_n < sizeof vmf_cache / sizeof vmf_cache[0]) vmf_cache[vmf_n++] = (struct vmf){start, end, flags};
        } else {
            const struct vmf *f = vmf_find(start, end);
            flags = f ? f->flags : 0;
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
        struct lz_region *r = &ck->regions[ck->nregions++];
        memset(r, 0, sizeof *r);
        r->start = start; r->end = end;
        r->prot = (perm[0] == 'r' ? PROT_READ : 0) | (perm[1] == 'w' ? PROT_WRITE : 0) | (perm[2] == 'x' ? PROT_EXEC : 0);
        r->flags = flags;
        int shared = perm[3] == 's';
        ck->mem_bytes += end - start;
        if (!strcmp(path, "[heap]")) r->flags |= LZ_RF_HEAP;
        if (!strcmp(path, "[stack]")) r->flags |= LZ_RF_STACK;
        if (ino == 0 || path[0] != '/' || !strncmp(path, "/dev/zero", 9) || !strncmp(path, "/SYSV", 5)) {
            /* anonymous memory, shared (MAP_SHARED|MAP_ANONYMOUS shows as /dev/zero) or not */
            r->kind = shared ? LZ_R_SHARED_ANON : LZ_R_ANON;
            continue;
        }
        /* a file mapping */
        struct stat st;
        int gone = ends_with(path, " (deleted)");
        long sr = gone ? -1 : lz_sc4(SYS_newfstatat, AT_FDCWD, path, &st, 0);
        int same = sr == 0 && st.st_ino == ino && (uint64_t)major(st.st_dev) == maj && (uint64_t)minor(st.st_dev) == min;
        r->file_offset = off;
        if (shared) {
            if (!same) {
                rt_fmt(ck->err, sizeof ck->err, "a shared mapping of %s cannot be checkpointed: the file was deleted or replaced", path);
                rc = -1;
                break;
            }
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
    if (rc == 0 && vd_hi) {
        p->vdso_block_start = vd_lo;
        p->vdso_block_end = vd_hi;
        p->vdso_offset -= vd_lo;
    }
    return rc;
}

int rt_track_all(void)
{
    char err[200];
    if (rt.nodirty || (!rt_dirty_active() && rt_dirty_init(980, err, sizeof err) < 0)) return 0;
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
        if (priv && !special && !fj_owns(start, end) && !rt_map_owns(start, end)) rt_dirty_track(start, end);
        l = *eol ? eol + 1 : eol;
    }
    return 1;
}
