/* Recording side of the file engine, linked into the runtime: called by the
 * interposed libc functions *before* each change to the file system, it
 * writes what rolling back needs into the current interval's undo journal
 * (journal.h).  Raw system calls only: it runs inside the program's calls and
 * inside the checkpoint signal handler.
 *
 * An interval starts when checkpoint N commits (or a restart from N resumes);
 * before the first checkpoint nothing is recorded (there is nothing to go
 * back to).  Every hook returns 0 to let the change go ahead, or -errno to
 * refuse it because its undo could not be recorded (a full store, say):
 * a change that cannot be undone never happens behind the user's back. */
#ifndef LZ_FILES_TRACK_H
#define LZ_FILES_TRACK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#define FJ_MAXFD 65536

/* Per descriptor, for the write() fast path. */
struct fj_fdent {
    uint32_t gen;   /* interval this entry belongs to (stale otherwise) */
    uint8_t pass;   /* writes at the descriptor's position need no undo */
    uint8_t all;    /* no write through it needs undo (untracked, appended, born) */
    uint8_t rd;     /* open for reading: undo can be read through it */
    uint8_t pad;
    int32_t slot;   /* inode table slot, -1 untracked */
};

struct fj_global {
    int live;                 /* an interval is open: record */
    uint32_t gen;
    struct fj_fdent *fdt;
    int maps;                 /* shared file mappings registered (track_maps.c) */
};
extern struct fj_global fj;

/* Settings: the store (never tracked), durability, excluded directories
 * (a list of absolute paths separated by '\n'); main_process: this is the
 * job's program (its journal is the top one of a checkpoint directory and
 * may recycle the store's spares), not another process of the job. */
int fj_setup(const char *store, int machine, const char *excludes, int main_process, const uint64_t job[2]);

/* Records nothing outside root (the file system front end, fs/: the
 * directory it serves; its own streams and descriptors are not the job's),
 * and reaches what is under it through root_fd, its real directory opened
 * before the mount over it (never through the mount). */
int fj_limit(const char *root, int root_fd);

/* Set by the runtime: 1 when fd (a regular file of that identity) is one of
 * the launcher's descriptors (the job's stdout redirected to a file):
 * nothing written through it is ever recorded. */
extern int (*fj_launchers)(int fd, uint64_t dev, uint64_t ino, uint32_t mode);

/* Fast test for write(): nothing to record for this descriptor. */
static inline int fj_pass_write(int fd)
{
    if (!fj.live) return 1;
    if ((unsigned)fd >= FJ_MAXFD) return 0;
    const struct fj_fdent *e = &fj.fdt[fd];
    return e->gen == fj.gen && (e->all || e->pass);
}
/* Not a tracked file at all (pipe, socket, terminal, excluded): such calls
 * may block for long, and need no undo, so they skip even the bookkeeping
 * that keeps a checkpoint out of the middle of a call. */
static inline int fj_untracked(int fd)
{
    if (!fj.live) return 1;
    if ((unsigned)fd >= FJ_MAXFD) return 0;
    const struct fj_fdent *e = &fj.fdt[fd];
    return e->gen == fj.gen && e->slot < 0;
}
static inline int fj_pass_pwrite(int fd)
{
    if (!fj.live) return 1;
    if ((unsigned)fd >= FJ_MAXFD) return 0;
    const struct fj_fdent *e = &fj.fdt[fd];
    return e->gen == fj.gen && e->all;
}

/* Data. off < 0: at the descriptor's position. */
int fj_before_write(int fd, int64_t off, uint64_t len);
int fj_before_truncate_fd(int fd, int64_t size);
int fj_before_truncate_path(int dirfd, const char *path, int64_t size);
int fj_before_fallocate(int fd, int mode, int64_t off, int64_t len);
int fj_before_clone(int fd, int64_t off, uint64_t len); /* len 0: to the end */
void fj_position_moved(int fd);      /* lseek: the position may go back */
void fj_fd_changed(int fd);          /* closed, replaced by dup2 */

/* open/openat/creat and fopen: `created` is set when the path was absent
 * (the descriptor that results belongs to a file born in this interval). */
int fj_before_open(int dirfd, const char *path, int flags, int *created);
void fj_after_open(int fd, int created);

/* Names and attributes. */
int fj_before_unlink(int dirfd, const char *path);
int fj_before_rename(int odirfd, const char *oldp, int ndirfd, const char *newp, unsigned flags);
void fj_after_rename(int ok);
int fj_before_create(int dirfd, const char *path);   /* mkdir, link, symlink, mknod */
void fj_after_mkdir(int dirfd, const char *path);    /* nothing below it existed at N */
int fj_rmdir(int dirfd, const char *path);           /* 1 done (kept), 0 do it, -errno */
int fj_before_attr_path(int dirfd, const char *path, int nofollow);
int fj_before_attr_fd(int fd);

/* Streams (stdio writes are invisible to write()): save what a stream could
 * overwrite from its lowest possible position on. */
int fj_stream_opened(FILE *f);
/* dup2/dup3 made fd another file: a stream on fd (stdout under a shell's
 * `>> log`) now writes there unseen, so it is covered like a new stream. */
int fj_fd_reused(int fd);
int fj_stream_moved(FILE *f);

/* Writable shared file mappings (track_maps.c): stores into them are seen
 * through write protection.  fj_map_added after an mmap(MAP_SHARED) of fd
 * (open for reading and writing; prot as the program asked): 0 or -errno (its undo
 * could not be recorded: the caller unmaps it and fails the call).
 * fj_maps_any: the process has such mappings (the hooks' fast test).
 * fj_map_removed after munmap, or an mmap(MAP_FIXED) of something else over
 * it; fj_map_before_move before mremap, fj_map_moved after it succeeded.
 * fj_map_protect does the program's mprotect itself (registered parts stay
 * protected while an interval needs them): 0 or -errno.
 * fj_map_fault from the SIGSEGV handler (a write-protection fault at addr):
 * 1 the page is open now (the store may go on), 0 not ours, -errno its undo
 * could not be recorded (said on stderr).  fj_map_before_fill before a call in which the
 * kernel writes into [buf, buf+len) (read(), madvise(MADV_REMOVE)): 1 pages
 * were opened, 0 none of ours, -errno.  fj_maps_arm in the checkpoint's
 * pause, before the regions are read: every writable page protected again;
 * fj_map_prot then says what the program asked for a VMA (or -1). */
int fj_map_added(int fd, void *addr, size_t len, int prot, int64_t off);
void fj_map_removed(void *addr, size_t len);
int fj_map_before_move(void *addr, size_t len);
int fj_map_moved(void *from, size_t oldlen, void *to, size_t newlen, int keep_old);
int fj_map_protect(void *addr, size_t len, int prot);
int fj_map_sync(void *addr, size_t len, int flags); /* the program's msync: 0 or -errno */
int fj_map_fault(void *addr);
int fj_map_before_fill(const void *buf, size_t len);
void fj_maps_arm(void);
int fj_map_prot(uint64_t start, uint64_t end);
static inline int fj_maps_any(void) { return __atomic_load_n(&fj.maps, __ATOMIC_ACQUIRE) != 0; }

/* Checkpoint N: prepare the next interval's journal inside the checkpoint
 * being written (tmpdir), commit or abandon it with the checkpoint; resume
 * from N after a restart (its journal was emptied by the rollback): the
 * job's program (main_process) at ckpt.N/, any other process at
 * ckpt.N/proc.<pid>/. */
int fj_prepare(const char *tmpdir, char *err, size_t errlen);
void fj_commit(void);
void fj_abort(void);
int fj_restarted(const char *store, uint64_t index, int main_process, char *err, size_t errlen);

/* Every process of the job records (journal.h: proc.<pid>/ journals).
 * fj_after_fork: in a forked child (single-threaded there), the interval
 * goes on in a journal of the child's own, proc.<pid>/ inside its parent's
 * journal directory.
 * fj_exec_prepare: before an exec (or posix_spawn), lets the journal's
 * directory descriptor survive it and fills envstr (len >= 96) with the
 * FJ_ENV=... assignment the new image needs: 1 filled, 0 nothing to pass
 * (no interval open), -errno.  fj_exec_failed puts close-on-exec back (the
 * exec failed, or posix_spawn returned).
 * fj_adopt: in a new image, the value of FJ_ENV: the same process goes on
 * with its journal after its last valid record; a vfork or posix_spawn
 * child (another pid than the one that prepared it) starts proc.<pid>/ in
 * that journal's directory.  0, or -1 with err set. */
#define FJ_ENV "LAZARUS_FJ"
void fj_after_fork(void);
int fj_exec_prepare(char *envstr, size_t len);
void fj_exec_failed(void);
int fj_adopt(const char *val, char *err, size_t errlen);
int fj_is_own_fd(int fd);
int fj_owns(uint64_t start, uint64_t end); /* memory left out of checkpoints */
/* Tell the user once why a change was refused. */
void fj_report(const char *what, const char *path, long err);
#endif
