/* What changes files without a call the runtime sees: glibc stdio streams
 * (their buffers, read through glibc's FILE internals), and at the start of
 * an interval writable shared file mappings (track_maps.c) (track_internal.h). */
#include "track_internal.h"
#include <fcntl.h>

/* ---------------------------------------------------------------- streams */

/* The lowest position a stream's buffered or future writes can land at. */
static int64_t stream_low(FILE *f, int fd)
{
    int64_t pos = lz_sc3(SYS_lseek, fd, 0, SEEK_CUR);
    if (pos < 0) return -1;
    if (f->_IO_read_end > f->_IO_read_ptr) pos -= f->_IO_read_end - f->_IO_read_ptr;
    return pos < 0 ? 0 : pos;
}

static int stream_writes(FILE *f)
{
    return f->_fileno >= 0 && !(f->_flags & 0x0008 /* _IO_NO_WRITES */);
}
static int stream_appends(FILE *f) { return (f->_flags & 0x1000 /* _IO_IS_APPENDING */) != 0; }

int fj_stream_opened(FILE *f)
{
    if (!fj.live || !f || !stream_writes(f)) return 0;
    /* appending: only the size at N is needed (recorded on first touch) */
    int64_t low = stream_appends(f) ? 0 : stream_low(f, f->_fileno);
    return low < 0 ? 0 : fj_before_write(f->_fileno, low, stream_appends(f) ? 0 : ~0ull >> 1);
}

int fj_stream_moved(FILE *f)
{
    return fj_stream_opened(f);
}

int fj_fd_reused(int fd)
{
    extern FILE *_IO_list_all;
    extern void _IO_list_lock(void), _IO_list_unlock(void);
    /* not in a vfork child: the tables are its parent's */
    if (!fj.live || lz_sc0(SYS_getpid) != trk_E.pid) return 0;
    int r = 0;
    _IO_list_lock(); /* another thread's fclose frees streams from the list */
    for (FILE *f = _IO_list_all; f && r == 0; f = f->_chain)
        if (f->_fileno == fd) r = fj_stream_opened(f);
    _IO_list_unlock();
    return r;
}

/* At the start of an interval: what streams could change without a call we
 * see, saved now; shared mappings protected. */
long trk_save_blind(struct interval *v)
{
    extern FILE *_IO_list_all;
    long r = 0;
    for (FILE *f = _IO_list_all; f && r == 0; f = f->_chain) {
        if (!stream_writes(f)) continue;
        struct fj_ino *ino;
        struct fj_fdent tmp = {0};
        r = trk_classify(v, f->_fileno, &tmp, &ino); /* records its size at N, appending or not */
        int64_t low = stream_low(f, f->_fileno);
        if (r == 0 && ino && !tmp.all && low >= 0) r = trk_save_range(v, ino, f->_fileno, tmp.rd, (uint64_t)low, ~0ull >> 1);
    }
    /* writable shared file mappings: protected, saved page by page at their
     * first store (track_maps.c) */
    if (r == 0) r = trk_maps_arm(v);
    return r;
}
