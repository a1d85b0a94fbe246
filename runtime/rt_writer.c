/* Writing a checkpoint: page data goes straight from the program's memory to
 * the pack with writev() calls of >= 8 MiB (no intermediate copy, no small
 * writes), writeback is started as we go so the final fsync waits little;
 * then the manifest, fsync, and the rename that commits (format.h). */
#include "rt.h"
#include "journal.h"
#include "track.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>

#define FLUSH_BYTES (8u << 20)
#define MAX_IOV 1024

struct pack_writer {
    long fd;
    uint64_t off;       /* bytes written */
    uint64_t queued;    /* bytes in iov not yet written */
    uint64_t synced;    /* writeback started up to here */
    struct iovec iov[MAX_IOV];
    int niov;
    long err;
};

static int pw_flush(struct pack_writer *w)
{
    int first = 0;
    while (first < w->niov) {
        long n = lz_sc3(SYS_writev, w->fd, &w->iov[first], w->niov - first);
        if (n == -EINTR) continue;
        if (n <= 0) { w->err = n ? n : -EIO; return -1; }
        w->off += (uint64_t)n;
        while (n > 0 && first < w->niov) {
            if ((size_t)n >= w->iov[first].iov_len) { n -= (long)w->iov[first].iov_len; first++; }
            else { w->iov[first].iov_base = (char *)w->iov[first].iov_base + n; w->iov[first].iov_len -= (size_t)n; n = 0; }
        }
    }
    w->niov = 0;
    w->queued = 0;
    /* start writeback now: the disk works while we hash and queue the next batch */
    lz_sc4(SYS_sync_file_range, w->fd, w->synced, w->off - w->synced, 2 /* SYNC_FILE_RANGE_WRITE */);
    w->synced = w->off;
    return 0;
}

static int pw_add(struct pack_writer *w, void *p, size_t len)
{
    w->iov[w->niov].iov_base = p;
    w->iov[w->niov].iov_len = len;
    w->niov++;
    w->queued += len;
    if (w->queued >= FLUSH_BYTES || w->niov == MAX_IOV) return pw_flush(w);
    return 0;
}

static long write_file(const char *path, const void *buf, size_t len)
{
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return fd;
    const char *p = buf;
    long rc = 0;
    while (len) {
        long n = lz_sc3(SYS_write, fd, p, len);
        if (n == -EINTR) continue;
        if (n <= 0) { rc = n ? n : -EIO; break; }
        p += n; len -= (size_t)n;
    }
    if (rc == 0) rc = lz_sc1(SYS_fsync, fd);
    lz_sc1(SYS_close, fd);
    return rc;
}

static long fsync_path(const char *path)
{
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (fd < 0) return fd;
    long rc = lz_sc1(SYS_fsync, fd);
    lz_sc1(SYS_close, fd);
    return rc;
}

/* Removes a checkpoint being written: its files, ghosts, and the journal's
 * keep directory (one level of subdirectory). */
static void remove_dir_entries(const char *dir, int depth)
{
    long dfd = lz_sc4(SYS_openat, AT_FDCWD, dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0) return;
    char buf[4096];
    long n;
    while ((n = lz_sc3(SYS_getdents64, dfd, buf, sizeof buf)) > 0)
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d = (void *)(buf + off);
            off += d->reclen;
            if (d->name[0] == '.' && (!d->name[1] || (d->name[1] == '.' && !d->name[2]))) continue;
            if (lz_sc3(SYS_unlinkat, dfd, d->name, 0) == -EISDIR && depth > 0) {
                char sub[LZ_PATH_MAX + 300];
                rt_fmt(sub, sizeof sub, "%s/%s", dir, d->name);
                remove_dir_entries(sub, depth - 1);
                lz_sc3(SYS_unlinkat, dfd, d->name, AT_REMOVEDIR);
            }
        }
    lz_sc1(SYS_close, dfd);
}

static void remove_tmp(const char *tmpdir)
{
    remove_dir_entries(tmpdir, 1);
    lz_sc3(SYS_unlinkat, AT_FDCWD, tmpdir, AT_REMOVEDIR);
}

static long copy_ghost(int fd, const char *to)
{
    char lp[40];
    rt_fmt(lp, sizeof lp, "/proc/self/fd/%d", fd);
    long in = lz_sc4(SYS_openat, AT_FDCWD, lp, O_RDONLY | O_CLOEXEC, 0);
    if (in < 0) return in;
    long out = lz_sc4(SYS_openat, AT_FDCWD, to, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (out < 0) { lz_sc1(SYS_close, in); return out; }
    long rc = 0;
    int64_t off_in = 0;
    for (;;) {
        long n = lz_sc6(SYS_copy_file_range, in, (long)&off_in, out, 0, 1 << 30, 0);
        if (n == -EINTR) continue;
        if (n == -EXDEV || n == -EINVAL || n == -EOPNOTSUPP) {
            char buf[16384]; /* another file system type: the slow way */
            n = lz_sc4(SYS_pread64, in, buf, sizeof buf, off_in);
            if (n > 0) {
                for (long w = 0, k; w < n; w += k)
                    if ((k = lz_sc3(SYS_write, out, buf + w, n - w)) <= 0) { n = k ? k : -EIO; break; }
                if (n > 0) off_in += n;
            }
        }
        if (n <= 0) { rc = n; break; }
    }
    if (rc == 0) rc = lz_sc1(SYS_fsync, out);
    lz_sc1(SYS_close, in);
    lz_sc1(SYS_close, out);
    return rc;
}

static char *put_section(char *p, uint32_t type, const void *data, size_t len)
{
    struct lz_section s = {type, 0, len};
    memcpy(p, &s, sizeof s);
    p += sizeof s;
    if (len) memcpy(p, data, len);
    size_t pad = ((len + 7) & ~(size_t)7) - len;
    memset(p + len, 0, pad);
    return p + len + pad;
}

static int fail(struct rt_ckpt *ck, const char *what, long err)
{
    const char *why = err == -ENOSPC ? "no space left on device" : err == -EDQUOT ? "disk quota exceeded"
                    : err == -EIO ? "I/O error" : err == -EACCES ? "permission denied" : err == -EROFS ? "read-only file system" : NULL;
    if (why) rt_fmt(ck->err, sizeof ck->err, "%s: %s", what, why);
    else rt_fmt(ck->err, sizeof ck->err, "%s: errno %ld", what, -err);
    return -1;
}

int rt_write_checkpoint(struct rt_ckpt *ck, uint64_t pause_start)
{
    char tmpdir[LZ_PATH_MAX + 64], path[LZ_PATH_MAX + 96], final[LZ_PATH_MAX + 64];
    rt_fmt(tmpdir, sizeof tmpdir, "%s/" LZ_TMP_PREFIX "%06llu.%ld", rt.dir, (unsigned long long)ck->index, lz_sc0(SYS_getpid));
    rt_fmt(final, sizeof final, "%s/" LZ_CKPT_PREFIX "%06llu", rt.dir, (unsigned long long)ck->index);
    long e = lz_sc3(SYS_mkdirat, AT_FDCWD, tmpdir, 0700);
    if (e < 0) return fail(ck, "cannot create the checkpoint in the store", e);
    rt_fmt(path, sizeof path, "%s/" LZ_PAGES, tmpdir);
    struct pack_writer *w = arena_alloc(&ck->arena, sizeof *w);
    if (!w) { remove_tmp(tmpdir); rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    memset(w, 0, sizeof *w);
    w->fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (w->fd < 0) { remove_tmp(tmpdir); return fail(ck, "cannot create the page file", w->fd); }

    /* Unreadable regions with data (PROT_NONE after use, say) become readable
     * while we copy them out. */
    for (size_t i = 0; i < ck->nregions; i++) {
        struct lz_region *r = &ck->regions[i];
        if (r->nextents && !(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot | PROT_READ);
    }
    int rc = 0;
    /* The handler runs on the program's stack, and writing changes what lies
     * below the resume point: write a snapshot of the extents around it, so
     * data and checksum agree (what is below the resume point is dead). */
    char here;
    uint64_t sp = (uint64_t)&here, live_lo = sp - (1u << 20), live_hi = sp + (64u << 10);
    for (size_t i = 0; i < ck->nextents && rc == 0; i++) {
        struct lz_extent *x = &ck->extents[i];
        void *src = (void *)x->addr;
        if (x->addr < live_hi && x->addr + x->length > live_lo) {
            void *copy = arena_alloc(&ck->arena, x->length);
            if (!copy) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); rc = -1; break; }
            memcpy(copy, src, x->length);
            src = copy;
        }
        x->xxh3 = lz_hash(src, x->length);
        x->pack_offset = w->off + w->queued;
        x->pack = 0;
        rc = pw_add(w, src, x->length);
    }
    if (rc == 0 && w->niov) rc = pw_flush(w);
    for (size_t i = 0; i < ck->nregions; i++) {
        struct lz_region *r = &ck->regions[i];
        if (r->nextents && !(r->prot & PROT_READ)) lz_sc3(SYS_mprotect, r->start, r->end - r->start, r->prot);
    }
    if (rc == 0) { long f = lz_sc1(SYS_fsync, w->fd); if (f < 0) { w->err = f; rc = -1; } }
    lz_sc1(SYS_close, w->fd);
    if (rc && !w->err) { remove_tmp(tmpdir); return -1; }
    if (rc) { remove_tmp(tmpdir); return fail(ck, "cannot write the checkpoint's page data", w->err); }

    /* open files that have no name any more travel by content */
    for (size_t i = 0; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_GHOST) continue;
        rt_fmt(path, sizeof path, "%s/ghost.%d", tmpdir, f->fd);
        e = copy_ghost(f->fd, path);
        if (e < 0) { remove_tmp(tmpdir); return fail(ck, "cannot keep the content of an open deleted file", e); }
    }
    /* the next interval's file journal starts inside this checkpoint */
    if (fj_prepare(tmpdir, ck->err, sizeof ck->err) < 0) { remove_tmp(tmpdir); return -1; }

    /* the manifest */
    struct lz_pack pack = {0};
    pack.path = ck->pack_name;
    pack.size = w->off;
    size_t size = sizeof(struct lz_header) + 8 * (sizeof(struct lz_section) + 8) + sizeof(struct lz_proc) +
                  ck->nregions * sizeof(struct lz_region) + ck->nextents * sizeof(struct lz_extent) +
                  ck->nfds * sizeof(struct lz_fd) + sizeof pack + ck->strings.len + ck->auxv_len + sizeof(struct lz_trailer);
    char *m = arena_alloc(&ck->arena, size);
    if (!m) { remove_tmp(tmpdir); rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    struct lz_header *h = (struct lz_header *)m;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, LZ_MAGIC, 8);
    h->version = LZ_VERSION;
    h->header_size = sizeof *h;
    h->index = ck->index;
    h->parent = rt.parent;
    h->created_ns = rt_now_ns(0 /* CLOCK_REALTIME */);
    h->trigger = ck->trigger;
    h->nsections = 7;
    h->mem_bytes = ck->mem_bytes;
    h->data_bytes = ck->data_bytes;
    h->stored_bytes = w->off;
    char *p = m + sizeof *h;
    p = put_section(p, LZ_SEC_PROC, ck->proc, sizeof *ck->proc);
    p = put_section(p, LZ_SEC_REGIONS, ck->regions, ck->nregions * sizeof *ck->regions);
    p = put_section(p, LZ_SEC_EXTENTS, ck->extents, ck->nextents * sizeof *ck->extents);
    p = put_section(p, LZ_SEC_FDS, ck->fds, ck->nfds * sizeof *ck->fds);
    p = put_section(p, LZ_SEC_PACKS, &pack, sizeof pack);
    p = put_section(p, LZ_SEC_STRINGS, ck->strings.buf, ck->strings.len);
    p = put_section(p, LZ_SEC_AUXV, ck->auxv, ck->auxv_len);
    h->pause_ns = rt_now_ns(1 /* CLOCK_MONOTONIC */) - pause_start;
    h->manifest_size = (uint64_t)(p - m) + sizeof(struct lz_trailer);
    struct lz_trailer t = {lz_hash(m, (size_t)(p - m))};
    memcpy(p, &t, sizeof t);
    rt_fmt(path, sizeof path, "%s/" LZ_MANIFEST, tmpdir);
    e = write_file(path, m, h->manifest_size);
    if (e == 0) e = fsync_path(tmpdir);
    if (e < 0) { fj_abort(); remove_tmp(tmpdir); return fail(ck, "cannot write the checkpoint's manifest", e); }
    /* commit: the rename is the instant the checkpoint starts to exist */
    e = lz_sc5(SYS_renameat2, AT_FDCWD, tmpdir, AT_FDCWD, final, 1 /* RENAME_NOREPLACE */);
    if (e < 0) { fj_abort(); remove_tmp(tmpdir); return fail(ck, "cannot commit the checkpoint", e); }
    fj_commit();
    e = fsync_path(rt.dir);
    if (e < 0) return fail(ck, "cannot make the checkpoint durable (fsync of the store)", e);
    ck->stored_bytes = w->off;
    return 0;
}
