/* Opening a journal (journal.h): its directory's files.log, continued after
 * its last valid record or made with its BEGIN; files.keep/ and files.data
 * when first needed; the journal of a child that has recorded nothing yet,
 * at its first record (track_internal.h). */
#include "track_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>

/* A spare left by a dropped checkpoint becomes this interval's files.data:
 * overwriting its pages costs what a native overwrite does, while a new file
 * costs a fresh page per saved page (and the supervisor freeing them later). */
static int adopt_spare(int dfd)
{
    char sp[LZ_PATH_MAX + 32];
    size_t l = trk_E.store_len;
    memcpy(sp, trk_E.store, l);
    for (int i = 0; i < LZ_SPARES; i++) {
        const size_t pl = sizeof("/" LZ_SPARE_PREFIX) - 1;
        memcpy(sp + l, "/" LZ_SPARE_PREFIX, pl);
        sp[l + pl] = (char)('0' + i);
        sp[l + pl + 1] = 0;
        if (lz_sc5(SYS_renameat2, AT_FDCWD, sp, dfd, FJ_DATAFILE, RENAME_NOREPLACE) == 0) return 1;
    }
    return 0;
}

/* Opens the journal in the directory dfd (taken over: closed with the
 * interval).  spare: files.data may be a spare of the store (the program's
 * own top-level journal only).  An existing log is continued after its last
 * valid record (from log_hint on); adopt: the journal of this process before
 * an exec, whose files.data may be a spare: continued after the bytes its
 * records use (at least data_hint), else after its end. */
/* A new log appears with its BEGIN record in it (written to files.log.new,
 * then renamed): whenever the process is killed, a files.log says whose it
 * is, and a log without its BEGIN is damage (journal_read.c). */
static long new_log(struct interval *v, long dfd)
{
    static const char tmp[] = FJ_LOG ".new";
    long fd = trk_own_fd(lz_sc4(SYS_openat, dfd, tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (fd < 0) return fd;
    v->log_fd = (int)fd;
    v->lwin = NULL; /* the record and a zero header after it, with pwritev */
    v->log_off = 0;
    struct fj_begin b = {{trk_E.job[0], trk_E.job[1]}, v->index, trk_E.pid, FJ_VERSION};
    long r = trk_jwrite(v, FJ_BEGIN, 0, &b, sizeof b, NULL, NULL, NULL, 0);
    if (r == 0 && trk_E.machine) r = lz_sc1(SYS_fsync, fd);
    if (r == 0) r = lz_sc4(SYS_renameat, dfd, tmp, dfd, FJ_LOG);
    return r;
}

long trk_open_interval_at(struct interval *v, long dfd, int spare, int adopt, uint64_t log_hint, uint64_t data_hint,
                             uint64_t nrec_hint, uint64_t index)
{
    if (dfd < 0) return dfd;
    v->index = index;
    v->nrec = 0;
    v->dir_fd = (int)dfd;
    long r;
    /* files.keep/ and files.data are made when first needed (track_fds.c):
     * most processes of a job record a few INODE and NAME records at most,
     * and each inode made costs (ext4 looks for a free one) */
    v->keep_fd = (int)trk_own_fd(lz_sc4(SYS_openat, dfd, FJ_KEEP, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
    if (v->keep_fd < 0 && v->keep_fd != -ENOENT) return v->keep_fd;
    /* a spare keeps its size (cutting it would stall the program while the
     * kernel drops the pages): only what DATA records point at counts */
    int recycled = spare && adopt_spare((int)dfd);
    /* read too: what a reflink put there is read back for its checksum */
    v->data_fd = (int)trk_own_fd(lz_sc4(SYS_openat, dfd, FJ_DATAFILE, O_RDWR | O_CLOEXEC, 0));
    if (v->data_fd < 0 && v->data_fd != -ENOENT) return v->data_fd;
    v->log_fd = (int)trk_own_fd(lz_sc4(SYS_openat, dfd, FJ_LOG, O_RDWR | O_CLOEXEC, 0));
    if (v->log_fd == -ENOENT && (r = new_log(v, dfd)) < 0) return r;
    if (v->log_fd < 0) return v->log_fd;
    uint64_t data_end = 0;
    /* records before log_hint were counted by the image before an exec (nrec_hint) */
    v->nrec = nrec_hint;
    v->log_off = trk_scan_log(v, v->log_fd, log_hint, &data_end);
    struct stat ds;
    if (v->data_fd < 0 || lz_sc2(SYS_fstat, v->data_fd, &ds) < 0) ds.st_size = 0;
    if (recycled) v->data_off = data_end;
    else if (adopt) v->data_off = data_end > data_hint ? data_end : data_hint;
    else v->data_off = ((uint64_t)ds.st_size + 4095) & ~4095ull;
    /* what the data windows may grow it past and cut it back to (track_data.c):
     * its size, but after an exec of a process other than the program (whose
     * files.data may be a spare), the bytes its records use: the rest is the
     * window the image before allocated ahead */
    v->dsize0 = (uint64_t)ds.st_size;
    v->dgrown = 0;
    if (adopt && !trk_E.main && v->data_off < v->dsize0) {
        v->dgrown = v->dsize0;
        v->dsize0 = v->data_off;
    }
    v->wlen = trk_E.main ? LOG_WIN : LOG_WIN_MIN;
    if (trk_E.machine && (r = lz_sc1(SYS_fsync, dfd)) < 0) return r; /* its entries, before any record counts */
    if (!trk_E.machine) {
        /* machine durability syncs each record: no window */
        v->lwin = trk_win_area(v);
        trk_log_window(v);
    }
    return 0;
}

/* files.keep/ and files.data of the interval's journal, made the first
 * time a record needs them (with machine durability, its entry synced
 * before that record): the descriptor, or -errno. */
long trk_keep_fd(struct interval *v)
{
    if (v->keep_fd >= 0) return v->keep_fd;
    long r = trk_journal(v);
    if (r < 0) return r;
    r = lz_sc3(SYS_mkdirat, v->dir_fd, FJ_KEEP, 0700);
    if (r < 0 && r != -EEXIST) return r;
    if (r == 0 && trk_E.machine && (r = lz_sc1(SYS_fsync, v->dir_fd)) < 0) return r;
    r = trk_own_fd(lz_sc4(SYS_openat, v->dir_fd, FJ_KEEP, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
    if (r >= 0) v->keep_fd = (int)r;
    return r;
}

long trk_data_fd(struct interval *v)
{
    if (v->data_fd >= 0) return v->data_fd;
    long r = trk_journal(v);
    if (r < 0) return r;
    r = trk_own_fd(lz_sc4(SYS_openat, v->dir_fd, FJ_DATAFILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (r < 0) return r;
    v->data_fd = (int)r;
    if (trk_E.machine && (r = lz_sc1(SYS_fsync, v->dir_fd)) < 0) return r;
    return v->data_fd;
}

long trk_open_dir_at(long at, const char *name)
{
    return trk_own_fd(lz_sc4(SYS_openat, at, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0));
}

/* "proc.<pid>" */
void trk_proc_name(char *out, long pid)
{
    memcpy(out, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX);
    size_t i = sizeof FJ_PROC_PREFIX - 1;
    char tmp[24]; int k = 0;
    do tmp[k++] = (char)('0' + pid % 10); while ((pid /= 10));
    while (k) out[i++] = tmp[--k];
    out[i] = 0;
}

/* The directory proc.<pid> inside the journal directory at (made if need be). */
long trk_open_proc_dir(long at, long pid)
{
    char name[48];
    trk_proc_name(name, pid);
    long r = lz_sc3(SYS_mkdirat, at, name, 0700);
    if (r < 0 && r != -EEXIST) return r;
    if (trk_E.machine && r == 0 && (r = lz_sc1(SYS_fsync, at)) < 0) return r; /* the journal is found after a crash */
    return trk_open_dir_at(at, name);
}

/* The journal of a process that has recorded nothing yet, made now:
 * proc.<pid>/ in the directory pend_fd (its parent's journal's).  0, or
 * -errno (the change that needed it is refused; the next one tries again). */
long trk_journal(struct interval *v)
{
    if (v->log_fd >= 0) return 0;
    if (v->pend_fd < 0 || v->dir_fd >= 0) return -EBADF;
    long r = trk_open_interval_at(v, trk_open_proc_dir(v->pend_fd, trk_E.pid), 0, 0, 0, 0, 0, v->index);
    if (r < 0) {
        int fds[4] = {v->log_fd, v->keep_fd, v->data_fd, v->dir_fd};
        for (int i = 0; i < 4; i++) if (fds[i] >= 0) lz_sc1(SYS_close, fds[i]);
        trk_data_drop(v);
        if (v->lwin) trk_win_drop(v->lwin, LOG_WIN);
        v->lwin = NULL;
        v->log_fd = v->keep_fd = v->data_fd = v->dir_fd = -1;
        v->log_off = v->data_off = 0;
        v->nrec = 0;
        return r;
    }
    lz_sc1(SYS_close, v->pend_fd);
    v->pend_fd = -1;
    return 0;
}
