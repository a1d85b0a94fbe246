/* files.data through a shared mapping (process durability): the old bytes of
 * a block are read straight into the page of files.data that keeps them
 * (one pread, no copy through a buffer and no pwrite), and those pages are
 * made writable ahead of use, a chunk at a time (MADV_POPULATE_WRITE), so
 * saving a block costs no page fault of its own (track_internal.h).
 *
 * A store into a shared mapping of a file is in the page cache at once, as
 * a write() would be: it survives the loss of the process exactly as the
 * pwrite did.  The record that points at the bytes is written after they
 * are in place (track_fds.c), so a record never names bytes not yet there.
 * With machine durability files.data is written with pwrite and synced
 * (no window): nothing changes there.
 *
 * The window's blocks are allocated (fallocate) before it is mapped, so a
 * full disk is an error from fallocate, never a SIGBUS; making a page
 * writable fails with an error too, never a signal; the saved bytes reach
 * the window only through pread (the kernel's copy: an error, never a
 * signal).  Whatever fails, the block is saved with pwrite as before. */
#include "track_internal.h"
#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>

char *trk_data_area(struct interval *v)
{
    return trk_engine_mem + 2 * ARENA_BYTES + FDT_BYTES + 2 * LOG_WIN + 2 * SM_BYTES + (size_t)(v - trk_E.iv) * DATA_WIN;
}

void trk_data_drop(struct interval *v)
{
    if (v->dwin) trk_win_drop(v->dwin, DATA_WIN);
    v->dwin = NULL;
    v->dlen = v->dbase = v->dpop = 0;
}

/* Maps [base, base + len) of files.data, allocated first (the file grows to
 * its end: a page of a shared mapping past the end of its file is a SIGBUS). */
static long map_window(struct interval *v, uint64_t base, uint64_t len)
{
    trk_data_drop(v);
    long r = lz_sc4(SYS_fallocate, v->data_fd, 0, base, len);
    if (r < 0) return r;
    if (base + len > v->dgrown) v->dgrown = base + len;
    char *at = trk_data_area(v);
    long a = lz_sc6(SYS_mmap, (long)at, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->data_fd, base);
    if (a < 0 && a >= -LZ_MAX_ERRNO) { trk_win_drop(at, DATA_WIN); return a; }
    v->dwin = at;
    v->dbase = v->dpop = base;
    v->dlen = len;
    return 0;
}

/* Where the n bytes at v->data_off go in the window (mapped, and made
 * writable up to DATA_AHEAD past them), or NULL: then with pwrite. */
char *trk_data_at(struct interval *v, uint64_t n)
{
    if (trk_E.machine || v->dfail || n > DATA_WIN) return NULL;
    uint64_t o = v->data_off;
    if (!v->dwin || o < v->dbase || o + n > v->dbase + v->dlen) {
        /* a window starts small and doubles, up to DATA_WIN: a process that
         * saves a block or two does not allocate megabytes for it */
        uint64_t len = v->dwin ? v->dlen * 2 : DATA_WIN_MIN;
        if (len > DATA_WIN) len = DATA_WIN;
        while (len < n) len *= 2;
        long r = map_window(v, o, len);
        if (r < 0) {
            if (r != -ENOSPC && r != -EDQUOT && r != -EINTR) v->dfail = 1; /* no window here: not tried again */
            return NULL;
        }
    }
    if (o + n > v->dpop) {
        uint64_t from = o > v->dpop ? o : v->dpop, to = o + n + DATA_AHEAD, end = v->dbase + v->dlen;
        if (to > end) to = end;
        long r = lz_sc3(SYS_madvise, (long)(v->dwin + (from - v->dbase)), to - from, MADV_POPULATE_WRITE);
        /* (EINTR, EAGAIN: the pread makes its pages writable itself) */
        if (r < 0 && r != -EINTR && r != -EAGAIN) {
            if (r == -EINVAL) v->dfail = 1; /* a kernel before 5.14 */
            trk_data_drop(v);
            return NULL;
        }
        if (r == 0) v->dpop = to;
    }
    return v->dwin + (o - v->dbase);
}

/* The log is let go: files.data loses what its windows allocated past the
 * bytes its records use (a spare keeps the size it came with). */
void trk_data_trim(struct interval *v)
{
    trk_data_drop(v);
    if (v->data_fd < 0 || v->dgrown <= v->dsize0) return;
    uint64_t keep = v->data_off > v->dsize0 ? v->data_off : v->dsize0;
    if (keep < v->dgrown) lz_sc2(SYS_ftruncate, v->data_fd, keep);
    v->dgrown = 0;
}
