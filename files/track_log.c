/* The journal's log (journal.h): the window it is written through, its
 * records, sealing it, and finding where a log taken over goes on
 * (track_internal.h). */
#include "track_internal.h"
#include "hash.h"
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

/* ---------------------------------------------------------------- windows */

char *trk_win_area(struct interval *v) { return trk_engine_mem + 2 * ARENA_BYTES + FDT_BYTES + (size_t)(v - trk_E.iv) * LOG_WIN; }

/* Puts anonymous memory back where a window was (the file is let go). */
void trk_win_drop(char *at, uint64_t len)
{
    lz_sc6(SYS_mmap, (long)at, (long)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

/* Maps the log window at the page of the next record, its blocks allocated
 * first: a store into it can then not meet a full disk (which would be a
 * SIGBUS in the program); if allocating fails, records go with pwritev and
 * report the error themselves. */
long trk_log_window(struct interval *v)
{
    uint64_t base = v->log_off & ~4095ull;
    long r = lz_sc4(SYS_fallocate, v->log_fd, 0, base, v->wlen);
    if (r == 0) {
        long a = lz_sc6(SYS_mmap, (long)v->lwin, v->wlen, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, v->log_fd, base);
        r = a < 0 && a >= -LZ_MAX_ERRNO ? a : 0;
    }
    if (r < 0) { trk_win_drop(v->lwin, LOG_WIN); v->lwin = NULL; return r; }
    v->lbase = base;
    return 0;
}

/* ---------------------------------------------------------------- journal */

/* The record's stamp: the old state it holds has been read, the change has
 * not happened yet (clock_gettime of CLOCK_MONOTONIC is the vDSO's: no
 * system call, one clock for every process of the machine). */
static uint64_t stamp_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static long pwrite_allv(int fd, struct iovec *iov, int n, uint64_t off)
{
    int first = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += iov[i].iov_len;
    while (total) {
        long k = lz_sc4(SYS_pwritev, fd, &iov[first], n - first, off);
        if (k == -EINTR) continue;
        if (k <= 0) return k ? k : -EIO;
        total -= (size_t)k;
        off += (uint64_t)k;
        while (k > 0) {
            if ((size_t)k >= iov[first].iov_len) { k -= (long)iov[first].iov_len; iov[first].iov_len = 0; first++; }
            else { iov[first].iov_base = (char *)iov[first].iov_base + k; iov[first].iov_len -= (size_t)k; k = 0; }
        }
        while (first < n && iov[first].iov_len == 0) first++;
    }
    return 0;
}

long trk_jwrite(struct interval *v, uint16_t type, uint16_t flags, const void *fixed, size_t flen,
                const char *s1, const char *s2, const void *data, size_t dlen)
{
    static const uint32_t magic = FJ_REC_MAGIC;
    static const char zeros[sizeof(struct fj_rec)];
    if (v->log_fd < 0) { /* a child's first record: its journal now */
        long r = trk_journal(v);
        if (r < 0) return r;
    }
    struct fj_rec h = {FJ_REC_MAGIC, type, flags, 0, 0, stamp_now()};
    size_t l1 = s1 ? slen(s1) + 1 : 0, l2 = s2 ? slen(s2) + 1 : 0;
    h.len = (uint32_t)(flen + l1 + l2 + dlen);
    struct iovec iov[6] = {{&h, sizeof h}, {(void *)fixed, flen}, {(void *)s1, l1}, {(void *)s2, l2}, {(void *)data, dlen},
                           {(void *)zeros, sizeof zeros}};
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (int i = 0; i < 5; i++) if (iov[i].iov_len) XXH3_64bits_update(&st, iov[i].iov_base, iov[i].iov_len);
    h.check = (uint32_t)XXH3_64bits_digest(&st);
    /* the magic commits the record (journal.h): everything else goes first,
     * so a SIGKILL in between leaves magic 0 (torn), never a bad checksum */
    h.magic = 0;
    size_t total = sizeof h + h.len;
    /* >=: a zero byte always follows the records of an open log */
    if (v->lwin && v->log_off + total >= v->lbase + v->wlen) {
        if (v->wlen < LOG_WIN) v->wlen *= 2; /* a small journal stays small on disk (the window is allocated) */
        trk_log_window(v); /* or records go with pwritev from now on */
    }
    if (v->lwin) {
        char *rec = v->lwin + (v->log_off - v->lbase), *at = rec;
        for (int i = 0; i < 5; i++)
            if (iov[i].iov_len) { memcpy(at, iov[i].iov_base, iov[i].iov_len); at += iov[i].iov_len; }
        __atomic_signal_fence(__ATOMIC_SEQ_CST);
        memcpy(rec, &magic, sizeof magic);
    } else {
        /* the record and a zero header after it (an open log ends in zeros), then its magic */
        long r = pwrite_allv(v->log_fd, iov, 6, v->log_off);
        if (r == 0) {
            struct iovec m = {(void *)&magic, sizeof magic};
            r = pwrite_allv(v->log_fd, &m, 1, v->log_off);
        }
        if (r < 0) return r;
    }
    v->log_off += total;
    v->nrec++;
    v->touched = 1;
    return 0;
}

/* With --durability machine the undo reaches the disk before the change. */
long trk_jsync(struct interval *v)
{
    if (!trk_E.machine) return 0;
    long r = lz_sc1(SYS_fdatasync, v->log_fd);
    if (r == 0 && v->keep_fd >= 0) r = lz_sc1(SYS_fsync, v->keep_fd);
    return r;
}

/* The log is let go: an END record counting the records before it, and the
 * file cut right after it (journal.h: a sealed log proves its extent). */
void trk_seal_log(struct interval *v)
{
    if (v->log_fd < 0 || v->nrec == 0) return;
    struct fj_end e = {v->nrec};
    if (trk_jwrite(v, FJ_END, 0, &e, sizeof e, NULL, NULL, NULL, 0) == 0) lz_sc2(SYS_ftruncate, v->log_fd, v->log_off);
    else v->nrec = 0;
}

static long pread_full(int fd, void *buf, uint64_t n, uint64_t off)
{
    uint64_t got = 0;
    while (got < n) {
        long k = lz_sc4(SYS_pread64, fd, (char *)buf + got, n - got, off + got);
        if (k == -EINTR) continue;
        if (k <= 0) return k < 0 ? k : -EIO;
        got += (uint64_t)k;
    }
    return 0;
}

/* The end of the valid records of a log from `off` (a record boundary) on,
 * and in *data_end the end of the bytes of files.data its DATA records use:
 * where a journal taken over (after an exec, or a reused pid) goes on. */
uint64_t trk_scan_log(struct interval *v, int fd, uint64_t off, uint64_t *data_end)
{
    for (;;) {
        struct fj_rec h;
        if (pread_full(fd, &h, sizeof h, off) < 0) break;
        if (h.magic != FJ_REC_MAGIC || h.len > FJ_DATA_MAX || h.type < FJ_INODE || h.type > FJ_TYPE_MAX) break;
        if (pread_full(fd, trk_databuf, h.len, off + sizeof h) < 0) break;
        uint32_t check = h.check;
        h.check = 0;
        XXH3_state_t st;
        XXH3_64bits_reset(&st);
        XXH3_64bits_update(&st, &h, sizeof h);
        if (h.len) XXH3_64bits_update(&st, trk_databuf, h.len);
        if ((uint32_t)XXH3_64bits_digest(&st) != check) break; /* torn: its change never happened */
        if (h.type == FJ_END) break; /* the log goes on here: its END is written again when it is let go */
        if (h.type == FJ_BEGIN && h.len >= sizeof(struct fj_begin)) {
            struct fj_begin b;
            memcpy(&b, trk_databuf, sizeof b);
            v->index = b.index;
        }
        v->nrec++;
        if (h.type == FJ_DATA && h.len >= sizeof(struct fj_data)) {
            struct fj_data d;
            memcpy(&d, trk_databuf, sizeof d);
            uint64_t e = d.data_off + ((d.length + 4095) & ~4095ull);
            if (e > *data_end) *data_end = e;
        }
        off += sizeof h + h.len;
    }
    return off;
}
