/* The runtime's memory of the newest committed checkpoint (rt_map.h). */
#include "rt_map.h"
#include "rt.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define EXTENTS_CAP (4ull << 20)  /* 96 MiB of address space per slot, touched as used */
#define FRAMES_CAP (1ull << 20)
#define PACKS_CAP (64ull << 10)
#define DEDUP_SLOTS (2ull << 20)  /* 8 GiB of distinct pages */
#define LEARNED_MAX 1024

struct shared {
    uint64_t pending; /* index a writer was started for, 0 = none */
    uint64_t filled;  /* index the next slot describes (set by the writer before its commit) */
    uint32_t cur;     /* slot of the current map */
    uint32_t pad;
    uint64_t pause_ns; /* the program's pause for the checkpoint being written, once known */
    uint64_t arena, arena_len; /* a copy-mode writer's scratch memory, freed once it is done */
    uint64_t nlearned;
    struct rt_map_flags learned[LEARNED_MAX];
    struct rt_map slot[2];
};

static char *mem;
static uint64_t mem_len;
static struct shared *sh;
static struct rt_dedup_ent *dedup;

static uint64_t round_page(uint64_t n) { return (n + 4095) & ~4095ull; }

int rt_map_init(void)
{
    if (mem) return 0;
    uint64_t slot_bytes = round_page(EXTENTS_CAP * sizeof(struct lz_extent)) + round_page(FRAMES_CAP * sizeof(struct lz_frame)) +
                          round_page(PACKS_CAP * sizeof(struct rt_map_pack));
    uint64_t len = round_page(sizeof(struct shared)) + 2 * slot_bytes + round_page(DEDUP_SLOTS * sizeof(struct rt_dedup_ent));
    long a = lz_sc6(SYS_mmap, 0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (a < 0 && a >= -LZ_MAX_ERRNO) return -1;
    mem = (char *)a;
    mem_len = len;
    sh = (struct shared *)mem;
    char *p = mem + round_page(sizeof(struct shared));
    for (int s = 0; s < 2; s++) {
        struct rt_map *m = &sh->slot[s];
        m->extents = (struct lz_extent *)p; m->extents_cap = EXTENTS_CAP; p += round_page(EXTENTS_CAP * sizeof(struct lz_extent));
        m->frames = (struct lz_frame *)p; m->frames_cap = FRAMES_CAP; p += round_page(FRAMES_CAP * sizeof(struct lz_frame));
        m->packs = (struct rt_map_pack *)p; m->packs_cap = PACKS_CAP; p += round_page(PACKS_CAP * sizeof(struct rt_map_pack));
    }
    dedup = (struct rt_dedup_ent *)p;
    return 0;
}

int rt_map_ready(void) { return mem != NULL; }

void rt_map_fork_child(void)
{
    if (mem) lz_sc2(SYS_munmap, mem, mem_len); /* the parent's: not ours to write */
    mem = NULL;
    sh = NULL;
    dedup = NULL;
    mem_len = 0;
}

int rt_map_owns(uint64_t start, uint64_t end)
{
    return mem && start >= (uint64_t)mem && end <= (uint64_t)mem + mem_len;
}

struct rt_map *rt_map_current(void) { return &sh->slot[sh->cur]; }
struct rt_map *rt_map_next(void) { return &sh->slot[!sh->cur]; }

struct rt_dedup_ent *rt_map_dedup(uint64_t *nslots)
{
    *nslots = DEDUP_SLOTS;
    return dedup;
}

uint64_t rt_dedup_check(const struct rt_dedup_ent *e)
{
    uint64_t x = e->d0 ^ (e->d1 * 0x9e3779b97f4a7c15ull) ^ (e->offset * 0xbf58476d1ce4e5b9ull) ^
                 ((uint64_t)e->pack << 32 | e->skip);
    x ^= x >> 31;
    return x * 0x94d049bb133111ebull + 1;
}

static int ckpt_exists(const char *dir, uint64_t index)
{
    char p[LZ_PATH_MAX + 64];
    rt_fmt(p, sizeof p, "%s/" LZ_CKPT_PREFIX "%06llu", dir, (unsigned long long)index);
    struct stat st;
    return lz_sc4(SYS_newfstatat, AT_FDCWD, p, &st, 0) == 0;
}

void rt_map_keep_arena(void *base, uint64_t len) { sh->arena = (uint64_t)base; sh->arena_len = len; }

void rt_map_settle(const char *dir)
{
    if (sh->arena) lz_sc2(SYS_munmap, sh->arena, sh->arena_len);
    sh->arena = 0;
    if (!sh->pending) return;
    if (sh->filled == sh->pending && ckpt_exists(dir, sh->filled)) {
        sh->cur = !sh->cur;
    } else {
        /* the dirty pages of the failed interval were reported to it and are
         * lost: compare every page by digest next time */
        sh->slot[sh->cur].tracked = 0;
    }
    sh->pending = sh->filled = 0;
}

void rt_map_learn(uint64_t start, uint64_t end, uint32_t flags)
{
    uint64_t n = sh->nlearned;
    if (n == LEARNED_MAX) return; /* those stay unknown: the next writer reads them again */
    sh->learned[n] = (struct rt_map_flags){start, end, flags, 0};
    __atomic_store_n(&sh->nlearned, n + 1, __ATOMIC_RELEASE); /* after the entry: a killed writer tears none */
}

size_t rt_map_learned(const struct rt_map_flags **v)
{
    *v = sh->learned;
    return (size_t)__atomic_load_n(&sh->nlearned, __ATOMIC_ACQUIRE);
}

void rt_map_learned_clear(void) { sh->nlearned = 0; }

void rt_map_untrack(void) { if (sh) sh->slot[sh->cur].tracked = 0; }

void rt_map_started(uint64_t index) { sh->pending = index; sh->filled = 0; sh->pause_ns = 0; }

void rt_map_set_pause(uint64_t ns) { __atomic_store_n(&sh->pause_ns, ns, __ATOMIC_RELEASE); }
uint64_t rt_map_pause(void) { return __atomic_load_n(&sh->pause_ns, __ATOMIC_ACQUIRE); }

void rt_map_filled(uint64_t index)
{
    __atomic_store_n(&sh->filled, index, __ATOMIC_RELEASE);
}

/* Reads the sections the map needs from a manifest the restorer has already
 * verified; on any surprise the map stays empty (the next checkpoint is full). */
void rt_map_seed(const char *dir, uint64_t index, int tracked)
{
    mem = NULL;
    sh = NULL;
    if (rt_map_init() < 0) return;
    struct rt_map *m = &sh->slot[0];
    char path[LZ_PATH_MAX + 64];
    if (rt_is_main()) rt_fmt(path, sizeof path, "%s/" LZ_CKPT_PREFIX "%06llu/" LZ_MANIFEST, dir, (unsigned long long)index);
    else rt_fmt(path, sizeof path, "%s/" LZ_CKPT_PREFIX "%06llu/" LZ_PROC_PREFIX "%d/" LZ_MANIFEST, dir, (unsigned long long)index, rt.pid);
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    long size = lz_sc3(SYS_lseek, fd, 0, SEEK_END);
    long a = size > 0 ? lz_sc6(SYS_mmap, 0, size, PROT_READ, MAP_PRIVATE, fd, 0) : -EINVAL;
    lz_sc1(SYS_close, fd);
    if (a < 0 && a >= -LZ_MAX_ERRNO) return;
    const char *buf = (const char *)a;
    const struct lz_header *h = (const void *)buf;
    const struct lz_extent *ext = NULL;
    const struct lz_frame *fr = NULL;
    const struct lz_pack *pk = NULL;
    uint64_t ne = 0, nf = 0, np = 0;
    /* a manifest of this version or an older one it reads (store/manifest.c
     * checked it before the restart); records of another size: not used, the
     * next checkpoint is a full one */
    if ((uint64_t)size >= LZ_HEADER_V5_SIZE + 8 && !memcmp(h->magic, LZ_MAGIC, 8) && h->version >= LZ_VERSION_MIN &&
        h->version <= LZ_VERSION && h->header_size >= LZ_HEADER_V5_SIZE && h->header_size < (uint64_t)size &&
        h->manifest_size == (uint64_t)size && lz_hash(buf, (size_t)size - 8) == *(const uint64_t *)(buf + size - 8)) {
        uint64_t off = h->header_size, end = (uint64_t)size - 8;
        for (uint32_t s = 0; s < h->nsections && off + sizeof(struct lz_section) <= end; s++) {
            const struct lz_section *sec = (const void *)(buf + off);
            off += sizeof *sec;
            if (sec->length > end - off) break;
            const void *p = buf + off;
            uint32_t type = sec->type & ~LZ_SEC_MUST, rs = sec->record_size;
            if (type == LZ_SEC_EXTENTS && (!rs || rs == sizeof *ext)) { ext = p; ne = sec->length / sizeof *ext; }
            if (type == LZ_SEC_FRAMES && (!rs || rs == sizeof *fr)) { fr = p; nf = sec->length / sizeof *fr; }
            if (type == LZ_SEC_PACKS && (!rs || rs == sizeof *pk)) { pk = p; np = sec->length / sizeof *pk; }
            off += (sec->length + 7) & ~7ull;
        }
    }
    if (ext && fr && pk && ne <= m->extents_cap && nf <= m->frames_cap && np <= m->packs_cap) {
        memcpy(m->extents, ext, ne * sizeof *ext);
        memcpy(m->frames, fr, nf * sizeof *fr);
        for (uint64_t i = 0; i < np; i++) m->packs[i] = (struct rt_map_pack){pk[i].id, pk[i].size};
        m->nextents = ne; m->nframes = nf; m->npacks = np;
        m->index = index;
        m->tracked = (uint32_t)tracked;
    }
    lz_sc2(SYS_munmap, a, size);
}
