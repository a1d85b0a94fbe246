/* The recording side of the file engine, private to its files (track.h is
 * its interface to the runtime).  Who owns what:
 *   track_log.c       the log window, writing records (jwrite), sealing a
 *                     log, scanning one taken over
 *   track_tables.c    the per-interval hash tables: paths recorded, inodes
 *   track_fds.c       the engine's own descriptors, classifying a
 *                     descriptor, saving old bytes, the write and truncate
 *                     hooks
 *   track_names.c     absolute paths, exclusions, names at N and moved
 *                     directories, NAME records, the rename, unlink,
 *                     mkdir, rmdir, open and attribute hooks
 *   track_streams.c   glibc stdio internals, what streams and shared file
 *                     mappings could change unseen (save_blind)
 *   track_maps.c      writable shared file mappings: the registry, their
 *                     write protection, saving a page at its first store
 *                     (track_maps.h); track_maps_arm.c protects them again
 *                     at each checkpoint
 *   track_open.c      opening a journal, and making its pieces when first
 *                     needed
 *   track_data.c      files.data written through a shared mapping, its
 *                     pages made writable ahead of the saved bytes
 *   track_shared.c    the job's map of the blocks saved this interval, shared
 *                     by its processes
 *   track_interval.c  settings and the engine's memory, the interval's life
 *                     cycle: prepare, commit, abort, fork, exec, adopt,
 *                     exit, restart; the messages
 * Raw system calls only (lzsys.h): this runs inside the program's calls and
 * inside the checkpoint signal handler.  Everything here is hidden in the
 * runtime (-fvisibility=hidden). */
#ifndef LZ_FILES_TRACK_INTERNAL_H
#define LZ_FILES_TRACK_INTERNAL_H
#include "track.h"
#include "journal.h"
#include "format.h"
#include "lzsys.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#define ARENA_BYTES (1ull << 30) /* reserved per interval, committed as used */
#define FDT_BYTES ((((size_t)FJ_MAXFD * sizeof(struct fj_fdent) + FJ_DATA_MAX) + 4095) & ~(size_t)4095)
/* With process durability records are written through a shared mapping of
 * files.log, a window of LOG_WIN bytes per interval: a store into it is in
 * the page cache at once, as a write() would be, without the system call.
 * (Saved bytes go with pwrite: filling files.data through a mapping costs a
 * page fault and page_mkwrite per page, more than the write.) */
#define LOG_WIN (8ull << 20)
#define LOG_WIN_MIN (64ull << 10) /* first window of a journal not the program's: doubled as it fills */
/* The blocks saved this interval by any process of the job (track_shared.c):
 * a sparse shared file per interval, mapped here. */
#define SM_BYTES (128ull << 20)
#define SM_SLOTS (1u << 16)      /* inodes in it (more: each process saves what its own tables say) */
/* files.data is filled through a shared mapping of it with process
 * durability (track_data.c): a window of up to DATA_WIN bytes per interval
 * (the first DATA_WIN_MIN, doubled as it fills), its pages made writable
 * DATA_AHEAD bytes ahead of the saved bytes. */
#define DATA_WIN (32ull << 20)
#define DATA_WIN_MIN (64ull << 10)
#define DATA_AHEAD (1ull << 20)
#define ENGINE_BYTES (2 * ARENA_BYTES + FDT_BYTES + 2 * LOG_WIN + 2 * SM_BYTES + 2 * DATA_WIN)
#define OWN_FD_BASE 960          /* the engine's descriptors live up here */
#define MAX_EXCL 64
#define MAX_INOS (1u << 20)      /* inodes changed in one interval */

struct sm_ent; /* track_shared.c */

struct fj_ino {
    uint64_t dev, ino;
    uint64_t orig;     /* size at this process's first change of it in the interval */
    uint64_t *bits;    /* blocks below `orig` whose content is saved */
    struct sm_ent *sm; /* its entry in the job's map of saved blocks, or NULL */
    int32_t rfd;       /* a read-only handle, or -1 */
    uint8_t born, used;
    uint8_t sm_tried;  /* sm looked for */
    uint8_t noclone;   /* a reflink of it failed: copy */
};

/* What one interval knows; two of them alternate so a checkpoint can prepare
 * the next while the current one stays valid until the commit. */
struct interval {
    char *arena; size_t used;
    struct fj_ino *inos; uint32_t ino_n;        /* stable: descriptors hold indices */
    uint32_t *ihash; uint32_t ihash_cap;         /* index + 1, open addressing */
    uint64_t *paths; uint32_t path_cap, path_n; /* XXH3 of paths already recorded */
    int dir_fd;                      /* the journal's directory (renamed at will: never by path) */
    int log_fd, keep_fd, data_fd;
    uint64_t log_off, data_off;     /* where the next record / saved bytes go */
    uint64_t index;                  /* the interval's checkpoint N (its BEGIN record) */
    uint64_t nrec;                   /* records in the log (its END record counts them) */
    char *lwin;                      /* the log window (NULL: records go with pwritev) */
    uint64_t lbase, wlen;            /* file offset of its first byte, its length */
    char *dwin;                      /* the window of files.data (track_data.c), or NULL */
    uint64_t dbase, dlen, dpop;      /* its first byte's file offset, its length, the end of its writable pages */
    uint64_t dsize0, dgrown;         /* files.data's size when opened; the end the windows allocated to */
    int dfail;                       /* no window to be had this interval: pwrite */
    int touched;       /* anything recorded (for machine durability) */
    char *sm;          /* the job's map of saved blocks of this interval (track_shared.c), or NULL */
    int sm_state;      /* 0 not tried, 1 mapped, -1 not to be had */
    int sm_fd;
    int pend_fd;       /* no journal yet (dir_fd < 0): the directory its proc.<pid>/ goes in */
    /* directories moved or made this interval: a path below `cur` was
     * `orig` + the rest at N (NULL: nothing there existed at N) */
    struct moved { char *cur, *orig; uint64_t dev, ino; } *mv;
    uint32_t nmv, capmv;
};

/* The engine (track_interval.c). */
struct trk_engine {
    char store[LZ_PATH_MAX];
    size_t store_len;
    int machine;
    char excl[MAX_EXCL][LZ_PATH_MAX / 8];
    int nexcl;
    struct interval iv[2];
    int cur;           /* iv[cur] is live; iv[!cur] is being prepared */
    volatile int lock;
    int warned;
    int main;          /* the job's program: its journal is the directory's top one, files.data may be a spare */
    int pid;           /* the process whose journal iv[] holds (a vfork child shares this memory) */
    int ppid, pfd;     /* a forked child's parent (its pid, its journal directory's descriptor), or 0 */
    int pend_owner;    /* the process whose journal directory pend_fd is */
    uint64_t job[2];   /* the job's identity, in every BEGIN record */
    uint64_t sm_prev;  /* the main program: the interval whose map it used last (removed with the next) */
    uint64_t clone_min; /* save runs of at least this many bytes as a reflink where the file system can (0: never) */
    char only[LZ_PATH_MAX]; /* fj_limit: nothing outside it is recorded ("" = no limit) */
    size_t only_len;
    int only_fd;            /* its real directory (opened before anything was mounted over it) */
};
extern struct trk_engine trk_E;

extern char *trk_databuf;    /* FJ_DATA_MAX bytes, for copying saved content */
extern char *trk_engine_mem; /* [arena 0 | arena 1 | descriptor table + data buffer | log windows | maps of saved
                              * blocks | data windows], one mapping */

/* ---------------------------------------------------------------- helpers */

static inline void lock(void) { while (__atomic_exchange_n(&trk_E.lock, 1, __ATOMIC_ACQUIRE)) lz_sc0(SYS_sched_yield); }
static inline void unlock(void) { __atomic_store_n(&trk_E.lock, 0, __ATOMIC_RELEASE); }

static inline size_t slen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }

static inline void *iv_alloc(struct interval *v, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > ARENA_BYTES - v->used) return NULL;
    void *p = v->arena + v->used;
    v->used += n;
    return p;
}

static inline int64_t ts_ns(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec; }

/* track_log.c */
char *trk_win_area(struct interval *v);
void trk_win_drop(char *at, uint64_t len);
long trk_log_window(struct interval *v);
long trk_jwrite(struct interval *v, uint16_t type, uint16_t flags, const void *fixed, size_t flen,
                const char *s1, const char *s2, const void *data, size_t dlen);
long trk_jsync(struct interval *v);
void trk_seal_log(struct interval *v);
uint64_t trk_scan_log(struct interval *v, int fd, uint64_t off, uint64_t *data_end);

/* track_open.c: opening a journal; its files.keep/ and files.data, and a
 * child's journal, made when first needed */
long trk_open_interval_at(struct interval *v, long dfd, int spare, int adopt, uint64_t log_hint, uint64_t data_hint,
                          uint64_t nrec_hint, uint64_t index);
long trk_open_dir_at(long at, const char *name);
void trk_proc_name(char *out, long pid);
long trk_open_proc_dir(long at, long pid);
long trk_journal(struct interval *v);
long trk_keep_fd(struct interval *v);
long trk_data_fd(struct interval *v);

/* track_data.c */
char *trk_data_area(struct interval *v);
char *trk_data_at(struct interval *v, uint64_t n);
void trk_data_drop(struct interval *v);
void trk_data_trim(struct interval *v);

/* track_tables.c */
int trk_path_seen(struct interval *v, uint64_t h, int add);
struct fj_ino *trk_ino_find(struct interval *v, uint64_t dev, uint64_t ino, int add);

/* track_fds.c */
long trk_own_fd(long fd);
int trk_engine_fd(int fd); /* the journal's own files (never tracked) */
void trk_fdpath(int fd, char *lp);
long trk_first_touch(struct interval *v, int fd, const struct stat *st, struct fj_ino **out);
long trk_save_range(struct interval *v, struct fj_ino *e, int fd, int readable, uint64_t off, uint64_t len);
long trk_classify(struct interval *v, int fd, struct fj_fdent *ent, struct fj_ino **out);
long trk_open_for_path(int dirfd, const char *path, int nofollow);

/* track_names.c */
int trk_excluded(const char *abs);
int trk_path_at_n(struct interval *v, const char *abs, char *out);

/* track_shared.c */
char *trk_sm_area(struct interval *v);
void trk_sm_detach(struct interval *v);
struct sm_ent *trk_sm_entry(struct interval *v, struct fj_ino *e);
uint64_t trk_sm_orig(const struct sm_ent *x);
int trk_sm_saved(struct interval *v, const struct sm_ent *x, uint64_t b);
void trk_sm_mark(struct interval *v, struct sm_ent *x, uint64_t b0, uint64_t b1);
int trk_sm_claim(struct interval *v, struct sm_ent *x, uint64_t b);
void trk_sm_unclaim(struct interval *v, struct sm_ent *x, uint64_t b0, uint64_t b1);
int trk_sm_wait(struct interval *v, struct sm_ent *x, uint64_t b);
int trk_sm_inode_done(const struct sm_ent *x);
void trk_sm_inode_mark(struct sm_ent *x);

/* track_streams.c */
long trk_save_blind(struct interval *v);

/* track_maps.c */
long trk_maps_arm(struct interval *v);
void trk_maps_forget(void);
int trk_maps_fd(int fd);
#endif
