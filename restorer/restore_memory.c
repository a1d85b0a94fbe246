/* The program's address space: regions mapped at their addresses around the
 * restorer (filled by restore_fill.c), then protections, then the vDSO block
 * moved to where the program expects it.  In two stages, around the file
 * rollback (restore_main.c): the anonymous regions first, the regions that
 * map files after the rollback (the job may have written, replaced or
 * deleted them since the checkpoint). */
#include "restorer.h"
#include "hash.h"
#include "codec.h"
#include "lzsys.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

struct vdso_vma { uint64_t start, end; };
static struct vdso_vma own_vdso[4];
static int own_nvdso;
static uint64_t own_block_start, own_block_end, own_vdso_start;

/* Our own mappings: the vDSO block to move, everything else to keep clear of. */
static void read_own_layout(struct restore_ctx *rc)
{
    size_t len;
    char *maps = lz_read_file("/proc/self/maps", &len);
    if (!maps) restore_fail("cannot read /proc/self/maps");
    maps[len - 1] = 0;
    own_block_start = ~0ull;
    for (char *l = maps; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = 0;
        unsigned long a, b;
        /* the kernel-made stack is left for one of ours before anything is mapped */
        if (sscanf(l, "%lx-%lx", &a, &b) == 2 && !strstr(l, "[vsyscall]") && !strstr(l, "[stack]")) {
            if (strstr(l, "[vvar]") || strstr(l, "[vvar_vclock]") || strstr(l, "[vdso]")) {
                if (own_nvdso < 4) own_vdso[own_nvdso++] = (struct vdso_vma){a, b};
                if (a < own_block_start) own_block_start = a;
                if (b > own_block_end) own_block_end = b;
                if (strstr(l, "[vdso]")) own_vdso_start = a;
            } else if (rc->nown > 0 && rc->own[rc->nown - 1].end == a) {
                rc->own[rc->nown - 1].end = b;
            } else if (rc->nown < 8) {
                rc->own[rc->nown++] = (struct own_range){a, b};
            } else {
                restore_fail("the restorer's address space is unexpectedly fragmented");
            }
        }
        l = nl ? nl + 1 : NULL;
    }
    free(maps);
}

static int overlaps_program(const struct restore_ctx *rc, uint64_t a, uint64_t b)
{
    for (size_t i = 0; i < rc->img.nregions; i++)
        if (rc->img.regions[i].start < b && rc->img.regions[i].end > a) return 1;
    return 0;
}

/* Returns 0 if the restorer can work here, -1 if one of its mappings (or the
 * room its heap needs) lies where the program had memory. */
int restore_check_layout(struct restore_ctx *rc, char *why, size_t whylen)
{
    const struct lz_proc *p = rc->img.proc;
    read_own_layout(rc);
    for (int i = 0; i < rc->nown; i++) {
        uint64_t a = rc->own[i].start, b = rc->own[i].end + (64ull << 20);
        if (overlaps_program(rc, a, b)) {
            snprintf(why, whylen, "the program had memory at 0x%llx-0x%llx, where the restorer runs",
                     (unsigned long long)a, (unsigned long long)b);
            return -1;
        }
    }
    if (p->vdso_block_end < p->vdso_block_start || overlaps_program(rc, p->vdso_block_start, p->vdso_block_end))
        restore_fail("the image's vDSO placement is inconsistent");
    if (!own_nvdso) restore_fail("this system has no vDSO");
    uint64_t own_len = own_block_end - own_block_start, len = p->vdso_block_end - p->vdso_block_start;
    uint64_t vd_len = 0;
    for (int i = 0; i < own_nvdso; i++) if (own_vdso[i].start == own_vdso_start) vd_len = own_vdso[i].end - own_vdso[i].start;
    if (own_len != len || own_vdso_start - own_block_start != p->vdso_offset ||
        lz_hash((void *)own_vdso_start, vd_len) != p->vdso_hash)
        restore_fail("this kernel's vDSO differs from the one the program was checkpointed with (another kernel build); restart on the same kernel");
    return 0;
}

/* The same for a child going on in its parent's restorer: our mappings are
 * where the parent found them (the heap grown since), the vDSO the same
 * kernel's; -1 sends the child to a fresh restorer, which says what is wrong. */
int restore_check_layout_inherited(struct restore_ctx *rc, const struct restore_ctx *parent)
{
    const struct lz_proc *p = rc->img.proc, *pp = parent->img.proc;
    memcpy(rc->own, parent->own, sizeof rc->own);
    rc->nown = parent->nown;
    uint64_t brk_end = ((uint64_t)sbrk(0) + 4095) & ~4095ull;
    int heap = -1;
    for (int i = 0; i < rc->nown; i++) if (rc->own[i].start < brk_end) heap = i;
    for (int i = 0; i < rc->nown; i++) {
        uint64_t a = rc->own[i].start, b = i == heap && brk_end > rc->own[i].end ? brk_end : rc->own[i].end;
        if (overlaps_program(rc, a, b + (64ull << 20))) return -1;
    }
    if (p->vdso_block_end < p->vdso_block_start || overlaps_program(rc, p->vdso_block_start, p->vdso_block_end) ||
        p->vdso_block_end - p->vdso_block_start != pp->vdso_block_end - pp->vdso_block_start ||
        p->vdso_offset != pp->vdso_offset || p->vdso_hash != pp->vdso_hash)
        return -1;
    return 0;
}

static void move_block(uint64_t to)
{
    /* Each VMA of the block moves to the same offset from `to`. */
    for (int i = 0; i < own_nvdso; i++) {
        uint64_t len = own_vdso[i].end - own_vdso[i].start, dst = to + (own_vdso[i].start - own_block_start);
        if (dst == own_vdso[i].start) continue;
        void *r = mremap((void *)own_vdso[i].start, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)dst);
        if (r == MAP_FAILED) restore_fail("cannot move the vDSO: %s", strerror(errno));
    }
    for (int i = 0; i < own_nvdso; i++) {
        uint64_t off = own_vdso[i].start - own_block_start;
        own_vdso[i].end = to + off + (own_vdso[i].end - own_vdso[i].start);
        own_vdso[i].start = to + off;
    }
    own_block_end = to + (own_block_end - own_block_start);
    own_block_start = to;
}

/* Out of the way while the program's regions are mapped.  After this the
 * restorer must not call libc's vDSO-backed time functions. */
void restore_park_vdso(struct restore_ctx *rc)
{
    uint64_t len = own_block_end - own_block_start;
    static const uint64_t spots[] = {0x100000000ull, 0x10000000000ull, 0x300000000000ull, 0x600000000000ull, 0x7e0000000000ull};
    for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
        uint64_t a = spots[i], b = a + len;
        int clash = overlaps_program(rc, a, b) || (a < rc->img.proc->vdso_block_end && b > rc->img.proc->vdso_block_start);
        for (int k = 0; k < rc->nown; k++) clash |= rc->own[k].start < b && rc->own[k].end > a;
        if (!clash) { move_block(a); return; }
    }
    restore_fail("found no free place to move the vDSO out of the program's way");
}

void restore_move_vdso(struct restore_ctx *rc)
{
    move_block(rc->img.proc->vdso_block_start);
}

static int region_needs_write(const struct lz_region *r) { return r->nextents > 0; }

/* How far below its start the main thread's stack is mapped ahead.  The
 * kernel keeps room below a stack for it to grow (its mmap base sits a stack
 * limit below it), but a restarted program's mmap base is the restorer's,
 * near the top of the address space: its new mappings would come down to
 * just above the guard gap below the stack and stop it from growing (gcc's
 * cc1 recursing deeper after a restart).  So the room is mapped as part of
 * the stack (untouched pages cost nothing), up to the program's stack limit
 * and at most 64 MiB, as far as the image's other regions (a guard gap
 * away) and the restorer's own leave free. */
static uint64_t stack_room(const struct restore_ctx *rc, const struct lz_region *r)
{
    const uint64_t gap = 1ull << 20, cap = 64ull << 20;
    uint64_t limit = rc->img.proc->rlimits[RLIMIT_STACK].cur, size = r->end - r->start;
    if (limit > cap) limit = cap;
    if (limit <= size) return 0;
    uint64_t lo = r->start - (limit - size);
    if (lo > r->start) return 0;
    for (size_t i = 0; i < rc->img.nregions; i++) {
        const struct lz_region *o = &rc->img.regions[i];
        if (o->end <= r->start && o->end + gap > lo) lo = o->end + gap;
    }
    for (int k = 0; k < rc->nown; k++)
        if (rc->own[k].end <= r->start && rc->own[k].end + gap > lo) lo = rc->own[k].end + gap;
    lo = (lo + 4095) & ~4095ull; /* within the limit */
    return lo < r->start ? r->start - lo : 0;
}

/* One shared memory object this process maps at several addresses (a ring
 * buffer's two views of a memfd, a second view made by mremap) and no other
 * process of the job maps: a memfd of its own, so the views are one object
 * again.  Made at the first view, as large as the furthest view reaches. */
static struct { uint64_t dev, ino; int fd; } views[64];
static int nviews;

static int views_fd(const struct restore_ctx *rc, const struct lz_region *r)
{
    if (!r->file_ino) return -1;
    for (int k = 0; k < nviews; k++)
        if (views[k].dev == r->file_dev && views[k].ino == r->file_ino) return views[k].fd;
    uint64_t size = 0;
    int n = 0;
    for (size_t i = 0; i < rc->img.nregions; i++) {
        const struct lz_region *o = &rc->img.regions[i];
        if (o->kind != LZ_R_SHARED_ANON || o->file_dev != r->file_dev || o->file_ino != r->file_ino) continue;
        n++;
        if (o->file_offset + (o->end - o->start) > size) size = o->file_offset + (o->end - o->start);
    }
    if (n < 2) return -1; /* one view: plain shared anonymous memory, as before */
    if (nviews == (int)(sizeof views / sizeof views[0])) restore_fail("the program maps more than 64 shared objects at several addresses");
    int fd = memfd_create("lazarus-shared", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)size) < 0) restore_fail("cannot make the memory mapped at several addresses: %s", strerror(errno));
    views[nviews].dev = r->file_dev;
    views[nviews].ino = r->file_ino;
    views[nviews++].fd = fd;
    return fd;
}

void restore_forget_views(void)
{
    for (int k = 0; k < nviews; k++) close(views[k].fd);
    nviews = 0;
}

void restore_map_regions(struct restore_ctx *rc, int stage)
{
    if (!rc->mapped_lo && !(rc->mapped_lo = calloc(rc->img.nregions + 1, sizeof *rc->mapped_lo))) restore_fail("out of memory");
    for (size_t i = 0; i < rc->img.nregions; i++) {
        const struct lz_region *r = &rc->img.regions[i];
        if (restore_region_stage(r) != stage) continue;
        if (rc->inherited && rc->inherited[i]) { rc->mapped_lo[i] = r->start; continue; } /* the parent's, kept */
        uint64_t len = r->end - r->start;
        int prot = (int)r->prot | (region_needs_write(r) ? PROT_READ | PROT_WRITE : 0);
        int flags = MAP_FIXED_NOREPLACE;
        int fd = -1, shm = -1;
        const char *path = lz_str(&rc->img, r->path);
        switch (r->kind) {
        case LZ_R_ANON:
            flags |= MAP_PRIVATE | MAP_ANONYMOUS | ((r->flags & LZ_RF_GROWSDOWN) ? MAP_GROWSDOWN : 0) |
                     ((r->flags & LZ_RF_NORESERVE) ? MAP_NORESERVE : 0);
            break;
        case LZ_R_SHARED_ANON:
            /* shared with other processes of the job: the object made once (restore_tree.c) */
            if (r->flags & LZ_RF_SYSV) { restore_sysv_attach(rc, r); continue; }
            shm = restore_tree_shm_fd(r->file_dev, r->file_ino);
            if (shm < 0) shm = views_fd(rc, r);
            flags |= MAP_SHARED | (shm < 0 ? MAP_ANONYMOUS : 0);
            break;
        case LZ_R_FILE_PRIVATE:
        case LZ_R_FILE_SHARED:
            fd = open(path, ((r->kind == LZ_R_FILE_SHARED && (r->prot & PROT_WRITE)) ? O_RDWR : O_RDONLY) | O_CLOEXEC);
            if (fd < 0) restore_fail("cannot open %s, mapped by the program: %s", path, strerror(errno));
            flags |= (r->kind == LZ_R_FILE_SHARED ? MAP_SHARED : MAP_PRIVATE) | ((r->flags & LZ_RF_NORESERVE) ? MAP_NORESERVE : 0);
            break;
        default:
            restore_fail("unknown region kind %u in the image", r->kind);
        }
        uint64_t room = r->kind == LZ_R_ANON && (r->flags & LZ_RF_STACK) && (r->flags & LZ_RF_GROWSDOWN) ? stack_room(rc, r) : 0;
        void *m = MAP_FAILED;
        uint64_t lo = r->start;
        if (room) { /* something of ours may sit there after all (the parked vDSO): then without */
            m = mmap((void *)(r->start - room), len + room, prot, flags, -1, 0);
            if (m != MAP_FAILED) { m = (char *)m + room; lo -= room; }
        }
        if (m == MAP_FAILED)
            m = shm >= 0 ? mmap((void *)r->start, len, prot, flags, shm, (off_t)r->file_offset)
                         : mmap((void *)r->start, len, prot, flags, fd, fd >= 0 ? (off_t)r->file_offset : 0);
        int e = errno;
        if (fd >= 0) close(fd);
        if (m == MAP_FAILED || (uint64_t)m != r->start)
            restore_fail("cannot map the program's memory at 0x%llx-0x%llx: %s", (unsigned long long)r->start,
                         (unsigned long long)r->end, m == MAP_FAILED ? strerror(e) : "placed elsewhere");
        rc->mapped_lo[i] = lo;
        restore_advise(r);
    }
}

/* The flags a process sets with madvise (and mlock), set again; advice the
 * kernel refuses here (KSM not built in, say) is left, as a fresh process
 * would be refused it too. */
void restore_advise(const struct lz_region *r)
{
    static const int adv[] = {LZ_RF_HUGEPAGE, MADV_HUGEPAGE, LZ_RF_NOHUGEPAGE, MADV_NOHUGEPAGE, LZ_RF_DONTDUMP, MADV_DONTDUMP,
                              LZ_RF_DONTFORK, MADV_DONTFORK, LZ_RF_WIPEONFORK, MADV_WIPEONFORK, LZ_RF_MERGEABLE, MADV_MERGEABLE,
                              LZ_RF_SEQREAD, MADV_SEQUENTIAL, LZ_RF_RANDREAD, MADV_RANDOM};
    for (size_t k = 0; k < sizeof adv / sizeof adv[0]; k += 2)
        if (r->flags & (uint32_t)adv[k]) madvise((void *)r->start, r->end - r->start, adv[k + 1]);
}

void restore_finish_protections(struct restore_ctx *rc)
{
    for (size_t i = 0; i < rc->img.nregions; i++) {
        const struct lz_region *r = &rc->img.regions[i];
        if (region_needs_write(r) && mprotect((void *)r->start, r->end - r->start, (int)r->prot) < 0)
            restore_fail("cannot set protections at 0x%llx: %s", (unsigned long long)r->start, strerror(errno));
    }
}
