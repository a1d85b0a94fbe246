/* Dirty-page tracking for incremental memory checkpoints: userfaultfd
 * asynchronous write-protect (the kernel clears a page's protection itself at
 * its first write, no fault message, no handler thread) read back and re-armed
 * with the PAGEMAP_SCAN ioctl of /proc/self/pagemap.  Soft-dirty bits are not
 * available on this kernel (CONFIG_MEM_SOFT_DIRTY off).
 *
 * Everything here is async-signal-safe: raw system calls (lzsys.h), no libc
 * locks, no allocation.  The module state is a few static words; scans use
 * only the caller's buffer and a small stack array, so concurrent scans of
 * different ranges are fine, but init/reset must not race with anything.
 *
 * Usage at each checkpoint: for every writable mapping read from
 * /proc/self/maps, scan it (one VMA, or one range that was tracked as a
 * whole, per call); on any error treat that whole range as dirty and
 * rt_dirty_track() it again (a mapping created or moved since the last
 * checkpoint is not registered: the scan fails with -EPERM).
 *
 * Additions to the brief's API, and why:
 *  - rt_dirty_forget(): like rt_dirty_reset() without closing anything.  After
 *    a restart the static state holds descriptor numbers that were never
 *    restored (the checkpoint skips them); closing "our" numbers there would
 *    be wrong if the restored program reuses them.  After fork, use
 *    rt_dirty_reset() (the child holds inherited copies that must go).
 *  - track/scan check the pid recorded at init and fail with -ECHILD in a
 *    fork child that did not reset: its inherited descriptors still act on
 *    the PARENT's address space (a userfaultfd and an open pagemap file are
 *    bound to the mm they were opened in), so using them would register or
 *    re-protect pages of the parent.
 *  - descriptors are moved with fcntl(F_DUPFD_CLOEXEC, fd_base) rather than
 *    dup3: it takes the lowest FREE number >= fd_base and never closes a
 *    descriptor the program already has there. */
#ifndef LZ_RT_DIRTY_H
#define LZ_RT_DIRTY_H
#include <stddef.h>
#include <stdint.h>

struct rt_dirty_range { uint64_t start, end; }; /* page-aligned, end exclusive */

/* Opens the userfaultfd (UFFD_USER_MODE_ONLY, O_CLOEXEC|O_NONBLOCK), enables
 * UFFD_FEATURE_WP_ASYNC|UFFD_FEATURE_WP_UNPOPULATED, opens
 * /proc/self/pagemap, and moves both descriptors to numbers >= fd_base.
 * 0 (also when already initialized in this process), or -1 with a one-line
 * reason in err (the caller then falls back to hashing pages).  Called in a
 * fork child that did not reset, it resets first. */
int rt_dirty_init(int fd_base, char *err, size_t errlen);

/* 1 when initialized in this very process (not an inherited state). */
int rt_dirty_active(void);

/* 1 when fd is one of the module's descriptors (the checkpoint skips them). */
int rt_dirty_owns_fd(int fd);

/* Starts tracking [start,end) (page-aligned; a whole VMA or a part, possibly
 * several adjacent VMAs but no holes): UFFDIO_REGISTER in WP mode then
 * UFFDIO_WRITEPROTECT.  Afterwards only pages written later are reported.
 * Tracking an already tracked range again is allowed (re-arms it).
 * 0 or -errno: -EINVAL (unaligned, hole in the range, unsupported VMA such
 * as VM_PFNMAP/VM_DROPPABLE), -EPERM (a MAP_SHARED mapping of a file opened
 * read-only: it cannot be written through this mapping anyway), -ENODEV (not
 * initialized), -ECHILD (state inherited over fork). */
long rt_dirty_track(uint64_t start, uint64_t end);

/* In a fork child: a copy of the inherited userfaultfd at a number >=
 * fd_base, for rt_dirty_track_parent (the caller closes everything else and
 * forgets the module's state); its number, or -1. */
int rt_dirty_keep_parent_uffd(int fd_base);

/* Starts tracking [start,end) of the PARENT's address space through that
 * copy (a userfaultfd acts on the memory of the process that made it), so
 * that the walk that write-protects a large new mapping costs the parent no
 * pause.  Pages the parent wrote between the fork and this call are not
 * reported: the caller must find them some other way (rt_plan.c compares
 * them by digest).  0 or -errno. */
long rt_dirty_track_parent(int uffd, uint64_t start, uint64_t end);

/* Pages in [start,end) written since tracking started or since the last scan,
 * merged into ranges, written to out[0..cap); each reported page is
 * write-protected again in the same call (PM_SCAN_WP_MATCHING|
 * PM_SCAN_CHECK_WPASYNC).  Returns the number of ranges; if out fills before
 * end, *resume is set to where to continue (else to end).  cap must be >= 1.
 * -errno on failure, notably -EPERM when the range contains a mapping that is
 * not registered (created, moved by mremap or replaced by MAP_FIXED after
 * tracking started).  On failure pages of the range may already have been
 * re-protected and their report lost: the caller must treat the WHOLE range
 * as dirty (and track it again). */
long rt_dirty_scan(uint64_t start, uint64_t end, struct rt_dirty_range *out, size_t cap,
                   uint64_t *resume);

/* Pages in [start,end) that hold data: present (not the shared zero page)
 * or swapped out (swap: 0 when no swap is in use, since a write-protect
 * marker in an empty entry counts as swapped); merged ranges into out, their number, or -errno (-ENOSPC
 * when out is too small).  Changes nothing.  A page reclaimed after
 * MADV_FREE reads as zeros without being reported written: this tells. */
long rt_dirty_holding(uint64_t start, uint64_t end, struct rt_dirty_range *out, size_t cap, int swap);

/* Bytes of [start,end) present in memory, and of those the bytes in
 * transparent huge pages.  Changes nothing.  0 or -errno. */
long rt_dirty_huge(uint64_t start, uint64_t end, uint64_t *present, uint64_t *huge);

/* Forgets everything and closes the descriptors (after fork, in the child:
 * registrations are not inherited).  Registrations of this process end with
 * the userfaultfd's closing. */
void rt_dirty_reset(void);

/* Forgets everything WITHOUT closing (after a restart: the descriptors were
 * not restored and their numbers may now be the program's). */
void rt_dirty_forget(void);

#endif
