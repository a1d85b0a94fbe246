/* Writing a checkpoint.  In the pause (rt_begin_checkpoint): its directory
 * tmp.N.<pid>, the content of open deleted files, and the file journal of
 * the next interval, which starts at the pause whatever becomes of N.  In
 * the writer (rt_finish_checkpoint, normally a forked child): the page data
 * (rt_frames.c), the manifest and fsync; the supervisor commits the job's
 * checkpoint (one rename) once every process's part is written.  A write
 * that fails leaves tmp.N.<pid> for the supervisor, which keeps its journal
 * as jrnl.N (store.h). */
#include "rt.h"
#include "rt_exclude.h"
#include "rt_map.h"
#include "journal.h"
#include "track.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>

/* A manifest holds one section of each type (enum lz_section_type); its
 * size counts one more, each with up to 8 bytes of padding. */
/* How many sections write_manifest() puts, one of each type (a branch that adds one counts it here). */
#define RT_NSECTIONS 18

long rt_write_file(const char *path, const void *buf, size_t len)
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
    int64_t off_in = 0, size = lz_sc3(SYS_lseek, in, 0, SEEK_END);
    if (size < 0) rc = size;
    while (rc == 0) {
        /* its holes stay holes (SEEK_DATA: the next data at or after off_in) */
        int64_t data = off_in < size ? lz_sc3(SYS_lseek, in, off_in, SEEK_DATA) : size;
        if (data > off_in || data == -ENXIO) off_in = data < 0 ? size : data;
        if (off_in >= size) { rc = lz_sc2(SYS_ftruncate, out, size); break; }
        int64_t hole = lz_sc3(SYS_lseek, in, off_in, SEEK_HOLE);
        int64_t off_out = off_in;
        long want = hole > off_in && hole - off_in < (1 << 30) ? (long)(hole - off_in) : 1 << 30;
        long n = lz_sc6(SYS_copy_file_range, in, (long)&off_in, out, (long)&off_out, want, 0);
        if (n == -EINTR) continue;
        if (n == -EXDEV || n == -EINVAL || n == -EOPNOTSUPP) {
            char buf[16384]; /* another file system type: the slow way */
            n = lz_sc4(SYS_pread64, in, buf, sizeof buf < (size_t)want ? sizeof buf : (size_t)want, off_in);
            if (n > 0) {
                for (long w = 0, k; w < n; w += k)
                    if ((k = lz_sc4(SYS_pwrite64, out, buf + w, n - w, off_in + w)) <= 0) { n = k ? k : -EIO; break; }
                if (n > 0) off_in += n;
            }
        }
        if (n == 0) { rc = lz_sc2(SYS_ftruncate, out, off_in); break; } /* (it shrank meanwhile: never in the pause) */
        if (n < 0) { rc = n; break; }
    }
    if (rc == 0) rc = lz_sc1(SYS_fsync, out);
    lz_sc1(SYS_close, in);
    lz_sc1(SYS_close, out);
    return rc;
}

/* The content of each open deleted file (copied in the pause) gets its
 * checksum, so a restart refuses a damaged copy before it changes anything. */
static int hash_ghosts(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 96];
    char *buf = NULL;
    for (size_t i = 0; i < ck->nfds; i++) {
        struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_GHOST) continue;
        if (!buf && !(buf = arena_alloc(&ck->arena, 65536))) return rt_fail(ck, "out of checkpoint scratch memory", 0);
        rt_fmt(path, sizeof path, "%s/ghost.%d", ck->tmpdir, f->fd);
        long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
        if (fd < 0) return rt_fail(ck, "cannot read back the content of an open deleted file", fd);
        XXH3_state_t st;
        XXH3_64bits_reset(&st);
        long n;
        while ((n = lz_sc3(SYS_read, fd, buf, 65536)) > 0 || n == -EINTR)
            if (n > 0) XXH3_64bits_update(&st, buf, (size_t)n);
        lz_sc1(SYS_close, fd);
        if (n < 0) return rt_fail(ck, "cannot read back the content of an open deleted file", n);
        f->xxh3 = XXH3_64bits_digest(&st);
    }
    return 0;
}

/* rec: bytes per record of an array section, 0 for the others.  Every
 * section of this version is LZ_SEC_MUST but EXCLUDE (a record for `list`):
 * a reader that skipped one would restore the process wrong. */
static char *put_section(char *p, uint32_t type, uint32_t rec, const void *data, size_t len)
{
    struct lz_section s = {type == LZ_SEC_EXCLUDE ? type : type | LZ_SEC_MUST, rec, len};
    memcpy(p, &s, sizeof s);
    p += sizeof s;
    if (len) memcpy(p, data, len);
    size_t pad = ((len + 7) & ~(size_t)7) - len;
    memset(p + len, 0, pad);
    return p + len + pad;
}

/* PTYS: the count, the records, their queued bytes. */
static char *put_ptys(char *p, const struct rt_ckpt *ck)
{
    uint64_t n = ck->nptys;
    size_t len = sizeof n + ck->nptys * sizeof(struct lz_pty) + ck->pty_bytes;
    struct lz_section s = {LZ_SEC_PTYS | LZ_SEC_MUST, sizeof(struct lz_pty), len};
    memcpy(p, &s, sizeof s);
    p += sizeof s;
    memcpy(p, &n, sizeof n);
    if (n) memcpy(p + sizeof n, ck->ptys, n * sizeof(struct lz_pty));
    if (ck->pty_bytes) memcpy(p + sizeof n + n * sizeof(struct lz_pty), ck->pty_data, ck->pty_bytes);
    size_t pad = ((len + 7) & ~(size_t)7) - len;
    memset(p + len, 0, pad);
    return p + len + pad;
}

/* The IPC section: u64 count, the records, their bytes (padded to 8 each). */
static char *put_ipc(char *p, const struct rt_ckpt *ck)
{
    uint64_t n = ck->nipc;
    struct lz_section s = {LZ_SEC_IPC | LZ_SEC_MUST, sizeof(struct lz_ipc), 8 + n * sizeof(struct lz_ipc) + ck->ipc_len};
    memcpy(p, &s, sizeof s);
    p += sizeof s;
    memcpy(p, &n, 8);
    if (n) memcpy(p + 8, ck->ipc, n * sizeof(struct lz_ipc));
    p += 8 + n * sizeof(struct lz_ipc);
    if (ck->ipc_len) memcpy(p, ck->ipc_bytes, ck->ipc_len);
    return p + ck->ipc_len;
}

int rt_fail(struct rt_ckpt *ck, const char *what, long err)
{
    const char *why = err == -ENOSPC ? "no space left on device" : err == -EDQUOT ? "disk quota exceeded"
                    : err == -EIO ? "I/O error" : err == -EACCES ? "permission denied" : err == -EROFS ? "read-only file system" : NULL;
    if (why) rt_fmt(ck->err, sizeof ck->err, "%s: %s", what, why);
    else if (err) rt_fmt(ck->err, sizeof ck->err, "%s: errno %ld", what, -err);
    else rt_fmt(ck->err, sizeof ck->err, "%s", what);
    return -1;
}

int rt_begin_checkpoint(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 96];
    rt_fmt(ck->tmpdir, sizeof ck->tmpdir, "%s/" LZ_TMP_PREFIX "%06llu.%d", rt.dir, (unsigned long long)ck->index, lz_sc0(SYS_getpid));
    long e = lz_sc3(SYS_mkdirat, AT_FDCWD, ck->tmpdir, 0700);
    if (e < 0) return rt_fail(ck, "cannot create the checkpoint in the store", e);
    /* open files that have no name any more travel by content */
    for (size_t i = 0; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_GHOST) continue;
        rt_fmt(path, sizeof path, "%s/ghost.%d", ck->tmpdir, f->fd);
        e = copy_ghost(f->fd, path);
        if (e < 0) { remove_tmp(ck->tmpdir); return rt_fail(ck, "cannot keep the content of an open deleted file", e); }
    }
    /* the journal of the interval after N: in the part, or in the journals' own home */
    char jtmp[LZ_PATH_MAX + 96];
    const char *jat = ck->tmpdir;
    if (strcmp(rt.jdir, rt.dir)) {
        rt_fmt(jtmp, sizeof jtmp, "%s/" LZ_TMP_PREFIX "%06llu.%d", rt.jdir, (unsigned long long)ck->index, lz_sc0(SYS_getpid));
        e = lz_sc3(SYS_mkdirat, AT_FDCWD, jtmp, 0700);
        if (e < 0) { remove_tmp(ck->tmpdir); return rt_fail(ck, "cannot create the file journal in the journal directory", e); }
        jat = jtmp;
    }
    if (fj_prepare(jat, ck->err, sizeof ck->err) < 0) {
        remove_tmp(ck->tmpdir);
        if (jat != ck->tmpdir) remove_tmp(jat);
        return -1;
    }
    fj_commit();
    return 0;
}

static int finish(struct rt_ckpt *ck);

/* The main program's packs are pack.N, another process's pack.N.PID (each
 * process writes and references only its own). */
void rt_pack_path(char *out, size_t len, uint64_t id)
{
    if (rt_is_main()) rt_fmt(out, len, "%s/" LZ_PACKS_DIR "/" LZ_PACK_PREFIX "%06llu", rt.dir, (unsigned long long)id);
    else rt_fmt(out, len, "%s/" LZ_PACKS_DIR "/" LZ_PACK_PREFIX "%06llu.%d", rt.dir, (unsigned long long)id, rt.pid);
}

int rt_finish_checkpoint(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 96];
    rt_trace(ck->t0, "writer", "started");
    if (rt_store_pages(ck) < 0) return -1;
    /* the mappings' flags go in the manifest; smaps may be read beside us */
    while (ck->side_busy) rt_futex_wait(&ck->side_busy, 1);
    int rc = rt_settle_flags(ck);
    rt_trace(ck->t0, "writer", "mapping flags read");
    if (rc == 0) rc = finish(ck);
    rt_trace(ck->t0, "writer", rc == 0 ? "committed" : "failed");
    if (rc < 0) {
        /* a pack no manifest will reference; the journal in tmpdir stays */
        rt_pack_path(path, sizeof path, ck->index);
        lz_sc1(SYS_unlink, path);
    }
    return rc;
}

static int finish(struct rt_ckpt *ck)
{
    char path[LZ_PATH_MAX + 96];
    struct rt_map *nm = rt_map_next();
    struct lz_pack *packs = arena_alloc(&ck->arena, (nm->npacks + 1) * sizeof *packs);
    if (!packs) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (size_t i = 0; i < nm->npacks; i++) {
        char rel[80];
        /* relative to where the part ends up: ckpt.N/, or ckpt.N/proc.PID/ */
        if (rt_is_main()) rt_fmt(rel, sizeof rel, "../" LZ_PACKS_DIR "/" LZ_PACK_PREFIX "%06llu", (unsigned long long)nm->packs[i].id);
        else rt_fmt(rel, sizeof rel, "../../" LZ_PACKS_DIR "/" LZ_PACK_PREFIX "%06llu.%d", (unsigned long long)nm->packs[i].id, rt.pid);
        packs[i] = (struct lz_pack){strings_add(&ck->strings, rel), 0, nm->packs[i].size, nm->packs[i].id};
    }
    if (ck->strings.overflow) { rt_fmt(ck->err, sizeof ck->err, "the checkpoint's string table is full"); return -1; }
    if (rt_store_chans(ck) < 0 || rt_store_usocks(ck) < 0 || rt_store_inet(ck) < 0) return -1;
    if (hash_ghosts(ck) < 0) return -1;

    const struct lz_exclusion *excl;
    size_t nexcl = rt_excl_table(&excl);
    size_t size = sizeof(struct lz_header) + (RT_NSECTIONS + 1) * (sizeof(struct lz_section) + 8) + sizeof(struct lz_proc) +
                  ck->proc->ngroups * sizeof(uint32_t) +
                  ck->nchans * sizeof(struct lz_chan) + ck->nevents * sizeof(struct lz_event) +
                  8 + ck->nptys * sizeof(struct lz_pty) + ck->pty_bytes +
                  ck->nusocks * sizeof(struct lz_usock) +
                  ck->ninets * sizeof(struct lz_inet) +
                  ck->ntimers * sizeof(struct lz_timer) +
                  8 + ck->nipc * sizeof(struct lz_ipc) + ck->ipc_len +
                  ck->nthreads * sizeof(struct lz_thread) +
                  ck->nthreads * sizeof(struct lz_thread) + rt_sigq_extra(ck) * sizeof(struct lz_siginfo_rec) +
                  ck->nregions * sizeof(struct lz_region) + nm->nextents * sizeof(struct lz_extent) +
                  nm->nframes * sizeof(struct lz_frame) + ck->nfds * sizeof(struct lz_fd) +
                  nm->npacks * sizeof(struct lz_pack) + ck->strings.len + ck->auxv_len + sizeof(struct lz_trailer) +
                  sizeof(struct lz_section) + nexcl * sizeof *excl;
    char *m = arena_alloc(&ck->arena, size);
    if (!m) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    struct lz_header *h = (struct lz_header *)m;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, LZ_MAGIC, sizeof h->magic);
    h->version = LZ_VERSION;
    h->header_size = sizeof *h;
    h->index = ck->index;
    h->job[0] = rt.job[0];
    h->job[1] = rt.job[1];
    h->parent = rt.parent;
    h->created_ns = rt_now_ns(CLOCK_REALTIME);
    h->trigger = ck->trigger;
    h->nsections = RT_NSECTIONS + (nexcl > 0);
    h->mem_bytes = ck->mem_bytes;
    h->data_bytes = ck->data_bytes;
    h->stored_bytes = ck->stored_bytes;
    h->changed_bytes = ck->changed_bytes;
    h->codec = (uint32_t)ck->codec;
    h->machine = LZ_MACHINE_X86_64;
    h->page_size = LZ_PAGE_SIZE;
    h->byte_order = LZ_BYTE_ORDER;
    char *p = m + sizeof *h;
    p = put_section(p, LZ_SEC_PROC, sizeof(struct lz_proc), ck->proc, sizeof *ck->proc);
    p = put_section(p, LZ_SEC_THREADS, sizeof(struct lz_thread), ck->threads, ck->nthreads * sizeof *ck->threads);
    p = put_section(p, LZ_SEC_REGIONS, sizeof(struct lz_region), ck->regions, ck->nregions * sizeof *ck->regions);
    p = put_section(p, LZ_SEC_EXTENTS, sizeof(struct lz_extent), nm->extents, nm->nextents * sizeof *nm->extents);
    p = put_section(p, LZ_SEC_FRAMES, sizeof(struct lz_frame), nm->frames, nm->nframes * sizeof *nm->frames);
    p = put_section(p, LZ_SEC_FDS, sizeof(struct lz_fd), ck->fds, ck->nfds * sizeof *ck->fds);
    p = put_section(p, LZ_SEC_CHANS, sizeof(struct lz_chan), ck->chans, ck->nchans * sizeof *ck->chans);
    p = put_section(p, LZ_SEC_PACKS, sizeof(struct lz_pack), packs, nm->npacks * sizeof *packs);
    p = put_section(p, LZ_SEC_STRINGS, 0, ck->strings.buf, ck->strings.len);
    p = put_section(p, LZ_SEC_AUXV, 0, ck->auxv, ck->auxv_len);
    p = put_section(p, LZ_SEC_GROUPS, sizeof(uint32_t), ck->groups, ck->proc->ngroups * sizeof(uint32_t));
    p = put_section(p, LZ_SEC_EVENTS, sizeof(struct lz_event), ck->events, ck->nevents * sizeof *ck->events);
    p = put_ptys(p, ck);
    p = put_section(p, LZ_SEC_USOCKS, sizeof(struct lz_usock), ck->usocks, ck->nusocks * sizeof *ck->usocks);
    p = put_section(p, LZ_SEC_INET, sizeof(struct lz_inet), ck->inets, ck->ninets * sizeof *ck->inets);
    p = put_section(p, LZ_SEC_TIMERS, sizeof(struct lz_timer), ck->timers, ck->ntimers * sizeof *ck->timers);
    p = put_ipc(p, ck);
    p = put_section(p, LZ_SEC_SIGQUEUE, sizeof(struct lz_siginfo_rec), ck->sigq + LZ_MAX_PENDING, rt_sigq_extra(ck) * sizeof *ck->sigq);
    if (nexcl) p = put_section(p, LZ_SEC_EXCLUDE, sizeof(struct lz_exclusion), excl, nexcl * sizeof *excl); /* only then: older builds read the rest */
    h->pause_ns = rt_pause_ns(ck);
    h->durable_ns = rt_now_ns(CLOCK_MONOTONIC) - ck->t0; /* the pack is on disk, the manifest follows */
    ck->durable_ns = h->durable_ns;
    h->manifest_size = (uint64_t)(p - m) + sizeof(struct lz_trailer);
    struct lz_trailer t = {lz_hash(m, (size_t)(p - m))};
    memcpy(p, &t, sizeof t);
    rt_fmt(path, sizeof path, "%s/" LZ_MANIFEST, ck->tmpdir);
    long e = rt_write_file(path, m, h->manifest_size);
    if (e == 0) e = fsync_path(ck->tmpdir);
    if (e < 0) return rt_fail(ck, "cannot write the checkpoint's manifest", e);
    rt_map_filled(ck->index);
    /* the supervisor commits the job's checkpoint once every part is written */
    ck->durable_ns = rt_now_ns(CLOCK_MONOTONIC) - ck->t0;
    return 0;
}
