/* Dirty-page tracking with userfaultfd asynchronous write-protect and the
 * PAGEMAP_SCAN ioctl (Linux >= 6.7).  See rt_dirty.h for the API.
 *
 * Facts this relies on (checked on 6.18 by tests/test_dirty_tracking.py,
 * which runs tests/programs/dirty_probe.c as root and as nobody):
 *  - An ordinary user gets a userfaultfd only with UFFD_USER_MODE_ONLY when
 *    vm.unprivileged_userfaultfd is 0 (the default).  With WP_ASYNC the
 *    kernel resolves protection faults itself, so kernel-mode writes (read()
 *    into a protected buffer) succeed even with USER_MODE_ONLY, and are
 *    reported.
 *  - WP_ASYNC registration in WP-only mode accepts every memory type:
 *    private/shared anonymous, heap, stack, private and MAP_SHARED files,
 *    memfd.  WP_UNPOPULATED puts markers in empty page-table entries, so a
 *    first write to a never-touched page is reported too; reads are not.
 *  - The scan asks for category_mask = return_mask = PAGE_IS_WRITTEN (the
 *    kernel's fast path).  Anonymous pages dropped with MADV_DONTNEED (single
 *    pages or a whole 2 MiB page table) are reported as written: right for a
 *    checkpoint, they read as zeros now.
 *  - NOT reported: a copied-on-write page of a PRIVATE FILE mapping dropped
 *    with MADV_DONTNEED (it reads as the file again; the kernel leaves a
 *    write-protect marker in file VMAs).  The caller must notice it from
 *    /proc/self/pagemap: the page is no longer anonymous (PM_FILE set).
 *    MADV_REMOVE of a memfd/shmem page (zeroed) is not reported either.
 *  - A VMA that is not registered (mapped, moved by mremap or replaced with
 *    MAP_FIXED after tracking started) makes the scan fail with -EPERM
 *    because of PM_SCAN_CHECK_WPASYNC (without it, WP_MATCHING would skip the
 *    VMA silently and report nothing).  mprotect keeps the registration.
 *  - Writes that do not go through this process's page tables are NOT
 *    reported: write()/pwrite() to a file this process has MAP_SHARED, a
 *    second mapping of the same memfd/file, another process (a fork child)
 *    writing shared memory.  Shared mappings' contents belong to the file or
 *    to the shared object anyway.
 *  - fork: the child's VMAs are not registered (no UFFD_FEATURE_EVENT_FORK)
 *    and its inherited userfaultfd and pagemap descriptors still refer to the
 *    parent's address space; the child must reset and init its own.  The
 *    parent's tracking is unaffected, including its copy-on-write faults. */
#include "rt_dirty.h"
#include "lzsys.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

/* Missing from Debian 12's 6.1 headers; values from the kernel's uapi
 * linux/fs.h (PAGEMAP_SCAN, 6.7) and linux/userfaultfd.h. */
#ifndef PAGEMAP_SCAN
struct page_region {
    uint64_t start, end, categories;
};
struct pm_scan_arg {
    uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages;
    uint64_t category_inverted, category_mask, category_anyof_mask, return_mask;
};
#define PAGEMAP_SCAN _IOWR('f', 16, struct pm_scan_arg)
#define PAGE_IS_WPALLOWED (1 << 0)
#define PAGE_IS_WRITTEN (1 << 1)
#define PAGE_IS_FILE (1 << 2)
#define PAGE_IS_PRESENT (1 << 3)
#define PAGE_IS_SWAPPED (1 << 4)
#define PAGE_IS_PFNZERO (1 << 5)
#define PM_SCAN_WP_MATCHING (1 << 0)
#define PM_SCAN_CHECK_WPASYNC (1 << 1)
#endif
#ifndef PAGE_IS_HUGE
#define PAGE_IS_HUGE (1 << 6)
#endif
#ifndef UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif
#ifndef UFFD_FEATURE_WP_UNPOPULATED
#define UFFD_FEATURE_WP_UNPOPULATED (1 << 13)
#endif
#ifndef UFFD_FEATURE_WP_ASYNC
#define UFFD_FEATURE_WP_ASYNC (1 << 15)
#endif

_Static_assert(sizeof(struct pm_scan_arg) == 96, "struct pm_scan_arg layout");
_Static_assert(sizeof(struct page_region) == 24, "struct page_region layout");

#define RT_DIRTY_PAGE 4096ull
#define RT_DIRTY_TAIL 16 /* page_regions on the stack when out has little room left */

static struct {
    int active;
    int uffd, pm_fd;
    long pid;
} st = { 0, -1, -1, 0 };

/* ---- error text without stdio --------------------------------------------- */
struct errbuf { char *p; size_t len, used; };

static void eput(struct errbuf *e, const char *s)
{
    if (!e->p || !e->len) return;
    while (*s && e->used + 1 < e->len) e->p[e->used++] = *s++;
    e->p[e->used] = 0;
}

static void eputnum(struct errbuf *e, long v)
{
    char tmp[24];
    int n = 0;
    if (v < 0) { eput(e, "-"); v = -v; }
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v && n < 23);
    char out[24];
    for (int i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    out[n] = 0;
    eput(e, out);
}

static int fail(struct errbuf *e, const char *what, long rc)
{
    eput(e, what);
    if (rc) { eput(e, ": errno "); eputnum(e, -rc); }
    return -1;
}

/* ---- descriptors ---------------------------------------------------------- */
static void close_fd(int *fd)
{
    if (*fd >= 0) lz_sc1(SYS_close, *fd);
    *fd = -1;
}

/* Moves fd to the lowest free number >= base (close-on-exec kept). */
static long move_high(int fd, int base)
{
    if (fd >= base) return fd;
    long r = lz_sc3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, base);
    lz_sc1(SYS_close, fd);
    return r;
}

static int same_process(void)
{
    return st.active && lz_sc0(SYS_getpid) == st.pid;
}

void rt_dirty_forget(void)
{
    st.active = 0;
    st.uffd = st.pm_fd = -1;
    st.pid = 0;
}

void rt_dirty_reset(void)
{
    close_fd(&st.uffd);
    close_fd(&st.pm_fd);
    rt_dirty_forget();
}

int rt_dirty_active(void)
{
    return same_process();
}

int rt_dirty_owns_fd(int fd)
{
    return st.active && fd >= 0 && (fd == st.uffd || fd == st.pm_fd);
}

int rt_dirty_init(int fd_base, char *err, size_t errlen)
{
    struct errbuf e = { err, errlen, 0 };
    eput(&e, "");
    if (same_process()) return 0;
    if (st.active) rt_dirty_reset(); /* inherited over fork: these are copies */
    if (fd_base < 0) fd_base = 0;

    long uffd = lz_sc1(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (uffd == -EINVAL) /* a kernel older than 5.11: no user-mode-only flag */
        uffd = lz_sc1(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (uffd < 0) return fail(&e, "userfaultfd()", uffd);

    struct uffdio_api api = { .api = UFFD_API,
                              .features = UFFD_FEATURE_WP_ASYNC | UFFD_FEATURE_WP_UNPOPULATED };
    long r = lz_sc3(SYS_ioctl, uffd, UFFDIO_API, &api);
    if (r < 0) {
        lz_sc1(SYS_close, uffd);
        return fail(&e, "UFFDIO_API with WP_ASYNC|WP_UNPOPULATED (kernel < 6.7?)", r);
    }
    if (!(api.features & UFFD_FEATURE_WP_ASYNC) || !(api.features & UFFD_FEATURE_WP_UNPOPULATED) ||
        !(api.ioctls & (1ull << _UFFDIO_REGISTER))) {
        lz_sc1(SYS_close, uffd);
        return fail(&e, "userfaultfd lacks asynchronous write-protect", 0);
    }
    uffd = move_high((int)uffd, fd_base);
    if (uffd < 0) return fail(&e, "moving the userfaultfd above the descriptor base (RLIMIT_NOFILE?)", uffd);

    long pm = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
    if (pm < 0) {
        lz_sc1(SYS_close, uffd);
        return fail(&e, "open /proc/self/pagemap", pm);
    }
    pm = move_high((int)pm, fd_base);
    if (pm < 0) {
        lz_sc1(SYS_close, uffd);
        return fail(&e, "moving the pagemap descriptor above the descriptor base (RLIMIT_NOFILE?)", pm);
    }

    /* PAGEMAP_SCAN present?  An empty range is accepted and returns 0. */
    struct pm_scan_arg a = { .size = sizeof a, .return_mask = PAGE_IS_WRITTEN };
    r = lz_sc3(SYS_ioctl, pm, PAGEMAP_SCAN, &a);
    if (r < 0) {
        lz_sc1(SYS_close, uffd);
        lz_sc1(SYS_close, pm);
        return fail(&e, "PAGEMAP_SCAN ioctl unsupported (kernel < 6.7?)", r);
    }

    st.uffd = (int)uffd;
    st.pm_fd = (int)pm;
    st.pid = lz_sc0(SYS_getpid);
    st.active = 1;
    return 0;
}

static long check_range(uint64_t start, uint64_t end)
{
    if (!st.active) return -ENODEV;
    if (lz_sc0(SYS_getpid) != st.pid) return -ECHILD;
    if ((start | end) & (RT_DIRTY_PAGE - 1) || end < start) return -EINVAL;
    return 0;
}

static long track_range(int uffd, uint64_t start, uint64_t end)
{
    long r;
    struct uffdio_register reg = { .range = { .start = start, .len = end - start },
                                   .mode = UFFDIO_REGISTER_MODE_WP };
    r = lz_sc3(SYS_ioctl, uffd, UFFDIO_REGISTER, &reg);
    if (r < 0) return r;

    struct uffdio_writeprotect wp = { .range = { .start = start, .len = end - start },
                                      .mode = UFFDIO_WRITEPROTECT_MODE_WP };
    for (int tries = 0; tries < 100; tries++) {
        r = lz_sc3(SYS_ioctl, uffd, UFFDIO_WRITEPROTECT, &wp);
        if (r != -EAGAIN) break; /* the address space is changing: retry */
    }
    if (r < 0) {
        struct uffdio_range un = { .start = start, .len = end - start };
        lz_sc3(SYS_ioctl, uffd, UFFDIO_UNREGISTER, &un);
    }
    return r;
}

long rt_dirty_track(uint64_t start, uint64_t end)
{
    long r = check_range(start, end);
    if (r < 0 || start == end) return r;
    return track_range(st.uffd, start, end);
}

long rt_dirty_track_parent(int uffd, uint64_t start, uint64_t end)
{
    if (uffd < 0) return -EBADF;
    if ((start | end) & (RT_DIRTY_PAGE - 1) || end < start) return -EINVAL;
    return start == end ? 0 : track_range(uffd, start, end);
}

long rt_dirty_scan(uint64_t start, uint64_t end, struct rt_dirty_range *out, size_t cap,
                   uint64_t *resume)
{
    if (resume) *resume = start;
    long r = check_range(start, end);
    if (r < 0) return r;
    if (!out || !cap) return -EINVAL;

    struct page_region tail[RT_DIRTY_TAIL];
    size_t n = 0;
    uint64_t addr = start;
    while (addr < end && n < cap) {
        /* The kernel's page_region is 24 bytes, ours 16: the kernel fills the
         * free part of out with at most room*2/3 entries, compacted forward in
         * place below (entry i is read before any write can reach its bytes).
         * It never gets more entries than out can take, since every entry it
         * returns has already been write-protected again. */
        size_t room = cap - n;
        size_t inplace = room * sizeof(struct rt_dirty_range) / sizeof(struct page_region);
        char *vec;
        size_t vlen;
        if (inplace >= RT_DIRTY_TAIL) {
            vec = (char *)(out + n);
            vlen = inplace;
        } else {
            vec = (char *)tail;
            vlen = room < RT_DIRTY_TAIL ? room : RT_DIRTY_TAIL;
        }
        struct pm_scan_arg a = {
            .size = sizeof a,
            .flags = PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            .start = addr,
            .end = end,
            .vec = (uint64_t)(uintptr_t)vec,
            .vec_len = vlen,
            .category_mask = PAGE_IS_WRITTEN,
            .return_mask = PAGE_IS_WRITTEN,
        };
        r = lz_sc3(SYS_ioctl, st.pm_fd, PAGEMAP_SCAN, &a);
        if (r < 0) return r;
        if ((size_t)r > vlen) return -EIO;
        for (long i = 0; i < r; i++) {
            struct page_region pr;
            __builtin_memcpy(&pr, vec + (size_t)i * sizeof pr, sizeof pr);
            if (n && out[n - 1].end == pr.start) {
                out[n - 1].end = pr.end;
            } else {
                out[n].start = pr.start;
                out[n].end = pr.end;
                n++;
            }
        }
        uint64_t next = a.walk_end;
        if (next <= addr || next > end) {
            /* no progress reported: a short answer means the walk finished */
            if ((size_t)r < vlen) next = end;
            else return -EIO;
        }
        addr = next;
    }
    if (resume) *resume = addr < end ? addr : end;
    return (long)n;
}

/* One PAGEMAP_SCAN of [*addr,end) asking q's categories, into vec[64]:
 * the number of regions found, *addr moved to where the walk stopped; or
 * -errno (-EIO when the walk made no progress). */
#define SCAN_VEC 64
static long scan_step(struct pm_scan_arg q, uint64_t *addr, uint64_t end, struct page_region *vec)
{
    q.size = sizeof q;
    q.start = *addr;
    q.end = end;
    q.vec = (uint64_t)(uintptr_t)vec;
    q.vec_len = SCAN_VEC;
    long r = lz_sc3(SYS_ioctl, st.pm_fd, PAGEMAP_SCAN, &q);
    if (r < 0) return r;
    if (q.walk_end <= *addr) return -EIO;
    *addr = q.walk_end;
    return r;
}

long rt_dirty_holding(uint64_t start, uint64_t end, struct rt_dirty_range *out, size_t cap, int swap)
{
    long r = check_range(start, end);
    if (r < 0) return r;
    /* present but not the shared zero page, or swapped out */
    struct pm_scan_arg q = {
        .category_inverted = PAGE_IS_PFNZERO,
        .category_mask = PAGE_IS_PFNZERO,
        .category_anyof_mask = PAGE_IS_PRESENT | (swap ? PAGE_IS_SWAPPED : 0),
        .return_mask = PAGE_IS_PRESENT | (swap ? PAGE_IS_SWAPPED : 0),
    };
    struct page_region vec[SCAN_VEC];
    size_t n = 0;
    for (uint64_t addr = start; addr < end;) {
        if ((r = scan_step(q, &addr, end, vec)) < 0) return r;
        for (long i = 0; i < r; i++) {
            if (n && out[n - 1].end == vec[i].start) { out[n - 1].end = vec[i].end; continue; }
            if (n == cap) return -ENOSPC;
            out[n++] = (struct rt_dirty_range){vec[i].start, vec[i].end};
        }
    }
    return (long)n;
}

long rt_dirty_huge(uint64_t start, uint64_t end, uint64_t *present, uint64_t *huge)
{
    *present = *huge = 0;
    long r = check_range(start, end);
    if (r < 0) return r;
    struct pm_scan_arg q = { .category_anyof_mask = PAGE_IS_PRESENT, .return_mask = PAGE_IS_PRESENT | PAGE_IS_HUGE };
    struct page_region vec[SCAN_VEC];
    for (uint64_t addr = start; addr < end;) {
        if ((r = scan_step(q, &addr, end, vec)) < 0) return r;
        for (long i = 0; i < r; i++) {
            *present += vec[i].end - vec[i].start;
            if (vec[i].categories & PAGE_IS_HUGE) *huge += vec[i].end - vec[i].start;
        }
    }
    return 0;
}

int rt_dirty_keep_parent_uffd(int fd_base)
{
    if (!st.active || st.uffd < 0 || lz_sc0(SYS_getpid) == st.pid) return -1;
    long fd = lz_sc3(SYS_fcntl, st.uffd, F_DUPFD_CLOEXEC, fd_base);
    return fd < 0 ? -1 : (int)fd;
}
