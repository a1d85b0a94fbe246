/* lazarus-fsd, the file system front end (CprFS): a FUSE daemon mounted in
 * place over a directory PATH of the job.  Every operation goes to PATH's
 * real directory through a descriptor opened before the mount; before it
 * changes a file or a name it has the file engine (files/track.h) record
 * what undoes it, as one more journal writer of the interval.  Who owns what:
 *   fs_main.c      arguments, the mount, the session and its threads, the end
 *   fs_inodes.c    the inode table (FUSE node id <-> an O_PATH descriptor)
 *   fs_ops_names.c lookup, attributes, directories, names
 *   fs_ops_data.c  open, read, write, truncate, fallocate, sync
 *   fs_journal.c   the recording: the gate that keeps operations out of a
 *                  commit, and the engine's hooks
 *   fs_commit.c    the commit protocol with the supervisor (its channel)
 *   fs_buffer.c    buffer mode: the job's writes held until their commit
 *   fs_member.c    buffer mode: which requests are the job's */
#ifndef LZ_FS_FSD_H
#define LZ_FS_FSD_H
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

/* One file or directory the kernel knows (passthrough: its real inode). */
struct fs_inode {
    int fd;               /* O_PATH to the real object */
    dev_t dev;
    ino_t ino;
    uint64_t nlookup;     /* the kernel's references; freed at 0 */
    pthread_mutex_t times; /* writeback cache: a write and a setting of the times, one at a time */
    struct fs_inode *next; /* hash chain */
};

struct fs_daemon {
    const char *path;     /* the directory mounted over (absolute) */
    int root_fd;          /* its real directory, opened before the mount */
    struct fs_inode root;
    struct fuse_session *se;
    int ctl;              /* the channel to the supervisor */
    const char *store;    /* DIR */
    uint64_t job[2];
    int buffer;           /* --fs-mode buffer */
    pid_t self, sup;      /* this daemon, the supervisor (our parent) */
    int writeback;        /* the kernel's writeback cache is on (test-only switch) */
};
extern struct fs_daemon fsd;

/* fs_inodes.c */
struct fs_inode *fs_inode(fuse_ino_t ino);
/* The inode of name in parent (its real object now), counted once more:
 * fills e, 0 or -errno. */
int fs_lookup_entry(struct fs_inode *parent, const char *name, struct fuse_entry_param *e);
void fs_forget_one(fuse_ino_t ino, uint64_t n);
/* "/proc/self/fd/N": the real object through a path open() accepts */
void fs_fdpath(char *buf, size_t len, int fd);

/* fs_journal.c: every operation that changes something runs between
 * fs_change_begin and fs_change_end, so that a commit finds none half done. */
void fs_change_begin(void);
void fs_change_end(void);
/* Held by a commit: no change runs until fs_gate_open. */
void fs_gate_close(void);
void fs_gate_open(void);

/* fs_commit.c: serves the supervisor's channel (a thread). */
void *fs_commit_thread(void *arg);
extern int fs_ending; /* set once it unmounts (the job's end) */

/* fs_member.c: whether a request's process is the job's (always, in undo mode) */
int fs_is_job(pid_t pid);
int fs_req_is_job(fuse_req_t req);

/* fs_buffer.c (buffer mode): thresholds in bytes; fb_* 0 or -errno */
extern uint64_t fb_max, fb_low, fb_spilled_total;
int fb_write(int fd, int append, uint64_t off, const char *data, uint64_t len);
int fb_truncate(int fd, uint64_t size);
int fb_read(int fd, uint64_t off, uint64_t len, char *buf, uint64_t *got);
int fb_size(dev_t dev, ino_t ino, uint64_t *size);
int fb_close(const char *dir, const uint64_t job[2], uint64_t index, char *why, size_t whylen);
int fb_apply(const char *who);
int fb_finish(char *why, size_t whylen);
/* the handle: a descriptor of the real file, and whether the job opened it */
#define FH_FD(fi) ((int)((fi)->fh & 0xffffffffu))
#define FH_JOB(fi) ((int)(((fi)->fh >> 32) & 1))
#define FH_APPEND(fi) ((int)(((fi)->fh >> 33) & 1))
#define FH_MAKE(fd, job, app) ((uint64_t)(uint32_t)(fd) | (uint64_t)(job) << 32 | (uint64_t)(app) << 33)

/* fs_ops_names.c, fs_ops_data.c */
void fs_ops_names(struct fuse_lowlevel_ops *ops);
void fs_ops_data(struct fuse_lowlevel_ops *ops);
#endif
