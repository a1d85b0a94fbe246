/* The LD_PRELOAD runtime: state shared by its parts.  The runtime is loaded
 * into the job's program; it checkpoints from a signal handler when the
 * supervisor asks (sigqueue of LZ_SIGCKPT carrying the index), so everything
 * reachable from the handler uses raw system calls and no libc locks. */
#ifndef LZ_RT_H
#define LZ_RT_H
#include "format.h"
#include "lzsys.h"
#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* SIGURG: its default action is "ignore", so a request reaching a process
 * without the runtime (after an exec of a static binary, say) is harmless.
 * A program's own SIGURG handler is chained (rt_signals.c). */
#define LZ_SIGCKPT SIGURG
/* Its si_value: index << 2 | trigger for a checkpoint (from the supervisor),
 * RT_STOP_VALUE | round for a thread asked to stop by the checkpointing thread
 * (the round tells a request still pending from an abandoned round). */
#define RT_STOP_VALUE (1ull << 63)
/* A SIGTERM's si_value from the supervisor: end as SIGTERM would (rt_term.c;
 * the same in cli/sv.h). */
#define LZ_TERM_RELEASE 0x4c5a5445u

/* Descriptor numbers programs rarely use, where the runtime keeps its own
 * (the supervisor gives the channel 900 or above, the file engine takes 960
 * and above, files/track.c): the write tracker's (userfaultfd, pagemap) at
 * RT_DIRTY_FD_BASE or above; the channel when the program dup2()s onto it,
 * and the writer's report pipe in the writer, at RT_HIGH_FD or above. */
#define RT_DIRTY_FD_BASE 980
#define RT_LAUNCHER_FD_BASE 990 /* references to the launcher's regular files (rt_launcher.c) */
#define RT_HIGH_FD 1000
/* Descriptors inherited from the launcher (rt_state.inherited) kept at most. */
#define RT_MAX_INHERITED 64

#define RT_API __attribute__((visibility("default")))
/* In an interposed libc function: real_NAME, the next definition of NAME (libc's). */
#define REAL(ret, name, ...)                                                  \
    static ret (*real_##name)(__VA_ARGS__);                                   \
    if (!real_##name) real_##name = (ret(*)(__VA_ARGS__))dlsym(RTLD_NEXT, #name)

struct rt_state {
    int active;            /* this process belongs to a job (rt_job.c) */
    int pid;               /* its PID */
    int main_pid;          /* the job's main program: its part of a checkpoint is ckpt.N/ itself,
                            * any other process's is ckpt.N/proc.PID/ */
    int ctl_fd;            /* SOCK_SEQPACKET to the supervisor */
    int chan_pid;          /* the process ctl_fd is the channel of (a child's is its parent's
                            * until rt_own_channel) */
    uint64_t last_index;   /* the newest checkpoint this process took part in: a request
                            * repeated by the supervisor is ignored */
    uint64_t parent;       /* checkpoint this run was restarted from */
    char dir[LZ_PATH_MAX]; /* the store, absolute */
    char jdir[LZ_PATH_MAX]; /* the file journals' home: LAZARUS_JOURNAL_DIR (run --journal-dir), else dir */
    uint64_t job[2];       /* the job's identity (LAZARUS_JOB): in every manifest and journal */
    struct sigaction prog_urg; /* the program's own SIGURG disposition */
    /* lazarus_checkpoint() from the C API */
    volatile int api_done, api_result, api_waiting;
    volatile int api_here; /* the C API call waiting is lazarus_checkpoint_here(): forked, returns once taken */
    volatile uint64_t api_index;
    /* descriptors the program inherited from its launcher (its stdin, stdout
     * and stderr, a jobserver pipe): re-attached at restart to the
     * restarter's (rt_launcher.c).  ref: for a regular file, a close-on-exec
     * copy of it, which tells its open file description (kcmp) from the same
     * file opened anew by name; -1 otherwise.  acc: its O_ACCMODE (a pipe's
     * two ends share an inode), -1 unknown */
    struct { int fd, ref, acc; uint64_t dev, ino; } inherited[RT_MAX_INHERITED];
    int ninherited;
    int codec, level;      /* compression of new frames (--compress) */
    int nofork;            /* LAZARUS_NO_FORK=1: write checkpoints in the pause (benchmarks) */
    int spool;             /* LAZARUS_SPOOL=1 (run -d s3://): the store is a spool whose published
                            * packs are gone, so no writer reads an old pack (no copy mode) */
    int compact;           /* LAZARUS_COMPACT=1 (run --compact): stale bytes bounded (rt_frames.c) */
    int tracing;           /* LAZARUS_TRACE=1 */
    int nodirty;           /* LAZARUS_TEST_NO_DIRTY=1: no dirty tracking, pages compared by digest (tests) */
    int lazyfree;          /* the program called madvise(MADV_FREE) once: clean pages may vanish */
    int noincr;            /* LAZARUS_NO_INCREMENTAL=1 (run --no-incremental): every page stored anew */
    uint64_t mintime_ns;   /* LAZARUS_MINTIME_MS (run --mintime): lazarus_checkpoint_here()'s minimum gap */
    uint64_t last_ckpt_ns; /* CLOCK_MONOTONIC of the last checkpoint's pause (or start, or restart) */
};
extern struct rt_state rt;

/* Per thread (initial-exec TLS: no allocation, safe in a signal handler).  A
 * thread inside a call the checkpoint must not cut in two (a file call
 * between recording its undo and making its change, madvise and its log
 * entry) is `busy`: a checkpoint it is asked to run, or a request to stop for
 * another thread's checkpoint, waits until the call is done (rt_leave). */
struct rt_self {
    int busy;
    int ckpt_deferred, stop_deferred;
    uint64_t ckpt_value, stop_value;
    /* What interrupted a blocking call (rt_calls.c): runs of the runtime's
     * SIGURG handler and of the program's own handlers (rt_handlers.c) in
     * this thread, and the CLOCK_MONOTONIC time spent in the runtime's
     * handler (a restart's downtime included: it resumes in it) */
    uint32_t rt_runs, prog_runs;
    uint64_t hidden_ns, hidden_in;
};
extern __thread struct rt_self rt_self __attribute__((tls_model("initial-exec")));
extern struct lz_resume rt_resume_block; /* written by the restorer */

/* Bump allocator over a private mapping that exists only during a checkpoint
 * and is left out of the image. */
struct rt_arena { char *base; size_t cap, used; };
void *arena_alloc(struct rt_arena *a, size_t n);

/* String table under construction (offset 0 is ""). */
struct rt_strings { char *buf; size_t len, cap; int overflow; };
uint32_t strings_add(struct rt_strings *s, const char *str);

/* Per region of a checkpoint, beside struct lz_region (not on disk). */
struct rt_region_dirty {
    uint32_t first, n;    /* its dirty ranges in rt_ckpt.dirty */
    uint8_t all;          /* not tracked: every page is looked at */
    uint8_t from_content; /* a mapped file that is gone, or shared memory: every page is looked at */
    uint8_t digest;       /* in huge pages, not tracked (write-protect would split them): a page
                           * counts as changed only if no previous frame holds its content */
    uint8_t late;         /* new and large: tracked from after the pause (rt_track_late) */
    uint8_t flags_unknown; /* new bounds: its VmFlags are read by the writer (rt_settle_flags) */
    uint8_t pad[3];
    int64_t delta;        /* the writer reads the region's pages at address + delta (a copy of
                           * shared memory taken in the pause: a fork child shares it live) */
};

struct rt_item;

/* A checkpoint being captured. */
struct rt_ckpt {
    struct rt_arena arena;
    uint64_t index;
    uint32_t trigger;
    struct lz_proc *proc;
    struct lz_thread *threads; size_t nthreads; /* [0] the main thread (tid = pid) */
    struct lz_thread *ckpt_thread;   /* the one running this checkpoint */
    /* every pending signal, in the order taken (rt_threads.c): the first LZ_MAX_PENDING go
     * into proc->pending, the rest into the SIGQUEUE section */
    struct lz_siginfo_rec *sigq; uint32_t nsigq, sigq_full;
    struct lz_region *regions; size_t nregions;
    struct lz_extent *extents; size_t nextents, extents_cap;
    struct lz_fd *fds; size_t nfds;
    struct lz_chan *chans; size_t nchans; /* pipes and socket pairs (rt_pipes.c) */
    char **chan_data;                /* per chan, its data in flight (chans[k].bytes) */
    struct lz_event *events; size_t nevents; /* event-loop objects and epoll watches (rt_events.c) */
    struct lz_pty *ptys; size_t nptys; /* pseudo-terminals whose master this process holds (rt_pty.c) */
    char *pty_data; size_t pty_bytes; /* their queued bytes, lz_pty.data indexes them */
    struct lz_usock *usocks; size_t nusocks; /* local sockets that are not pair ends (rt_usock.c) */
    char **usock_data;               /* per usock, its queued data (usocks[k].q.bytes) */
    char **usock_from;               /* per usock, its datagrams' senders (usocks[k].from_bytes) */
    struct lz_inet *inets; size_t ninets; /* TCP and UDP sockets (rt_inet.c) */
    char **inet_data;                /* per inet, the bytes queued to be read (inets[k].bytes) */
    struct lz_timer *timers; size_t ntimers; /* POSIX timers (rt_timers.c) */
    struct lz_ipc *ipc; size_t nipc, ipc_cap; /* System V objects, message queues (rt_sysv.c, rt_mqueue.c) */
    char *ipc_bytes; size_t ipc_len, ipc_bytes_cap; /* their bytes */
    struct rt_strings strings;
    struct rt_region_dirty *rdirty;  /* one per region */
    void *dirty; size_t ndirty;      /* struct rt_dirty_range[] */
    int tracking;                    /* the dirty tracker works in this process */
    int swap_active;                 /* swap in use: pagemap's "swapped" may be real */
    struct rt_item *items; size_t nitems; /* runs of pages and what becomes of them (rt_pages.h) */
    uint32_t *ritems;                /* per region, its first run */
    int planned;                     /* items made in the pause (copy mode) */
    int codec, level;                /* for new frames */
    char *auxv; size_t auxv_len;
    uint32_t *groups;                /* the supplementary groups (proc->ngroups) */
    char tmpdir[LZ_PATH_MAX + 64];
    uint64_t t0, pause_ns;
    int in_child;                    /* this is the forked writer */
    int writer_fd;                   /* copy mode: the writer's end of its report pipe */
    char *smaps; long smaps_len;     /* the writer's /proc/self/smaps (rt_flags_read), or NULL */
    volatile uint32_t side_busy;     /* the writer's side thread runs (rt_fork.c): wait before the flags */
    uint64_t mem_bytes, data_bytes, stored_bytes, changed_bytes, durable_ns;
    char err[512];          /* why the checkpoint failed */
};

int lz_save_context(struct lz_jmpctx *c) __attribute__((returns_twice));

/* Threads (rt_threads.c).  The thread that runs a checkpoint stops every
 * other thread of the program inside the checkpoint signal handler first,
 * each having recorded its own struct lz_thread, and lets them go once the
 * snapshot is taken.  0, or -1 with ck->err (none is left stopped). */
int rt_threads_stop(struct rt_ckpt *ck);
void rt_threads_release(void);
/* Pending signals past the first LZ_MAX_PENDING (the SIGQUEUE section's records). */
static inline size_t rt_sigq_extra(const struct rt_ckpt *ck) { return ck->nsigq > LZ_MAX_PENDING ? ck->nsigq - LZ_MAX_PENDING : 0; }
/* In the handler, a request to stop from the checkpointing thread. */
void rt_thread_stopped(uint32_t round, void *uc);
/* After a restart: wait until every restored thread has left the restorer's
 * code (before unmapping it), then let them run (after the runtime is ready). */
void rt_threads_landed(void);
void rt_threads_go(void);

int rt_capture_proc(struct rt_ckpt *ck, void *ucontext);
void rt_set_exe(int fd); /* after a restart: /proc/self/exe is fd's file again (rt_capture.c) */
int rt_capture_fds(struct rt_ckpt *ck);
/* Pipes and AF_UNIX socket pairs among the descriptors (after the dups are
 * known): their records and data in flight, read without consuming it; the
 * writer stores the data beside the manifest.  0 or -1 (ck->err). */
int rt_capture_chans(struct rt_ckpt *ck);
int rt_store_chans(struct rt_ckpt *ck);
/* The receive queue of socket f (of `type`, `shutdown` as sock_diag says)
 * into *data (from the arena, at most cap bytes), without consuming it;
 * c->bytes and c->nmsgs set; with `from`, each datagram's sender appended
 * there.  0 or -1 (ck->err). */
struct rt_senders { char *buf; size_t len, cap; }; /* per datagram: u32 length + sun_path of its sender */
/* sock_diag's answer about a local socket (rt_pipes.c): see there. */
#define RT_DIAG_BUF 4096
struct unix_diag_msg;
long rt_unix_diag(long nl, uint32_t ino, uint32_t show, void *buf, const struct unix_diag_msg **m);
/* A lock of object KIND ("sock", "pty") ID among the job's processes while
 * one changes its state to read it (rt_obj_lock.c): its descriptor, -1 if
 * none could be had (names cannot be bound here: go on unlocked; a peek's
 * byte count still catches a queue it could not see whole), -2 when another
 * held it for 10 s.  rt_obj_unlock takes any of these. */
long rt_obj_lock(const char *kind, uint64_t id);
void rt_obj_unlock(long lock);
int rt_peek_socket(struct rt_ckpt *ck, const struct lz_fd *f, int type, uint32_t shutdown, struct lz_chan *c, char **data,
                   size_t cap, struct rt_senders *from);
/* Local sockets that are not one end of a connected pair (rt_usock.c):
 * before rt_capture_chans, they become LZ_FD_USOCK with their lz_usock. */
int rt_capture_usocks(struct rt_ckpt *ck);
int rt_store_usocks(struct rt_ckpt *ck);
/* The state of the eventfd, timerfd, signalfd and epoll descriptors (after
 * the dups are known), from /proc/self/fdinfo.  0 or -1 (ck->err). */
int rt_capture_events(struct rt_ckpt *ck);
/* Pseudo-terminals (rt_pty.c): is the character device at `path` (rdev) an
 * end of one -- its index, and 1 for the master -- and, after the dups are
 * known, each one's record and queues.  0 or -1 (ck->err). */
int rt_pty_kind(const char *path, unsigned long rdev, uint64_t *index, uint64_t *master, int fd);
int rt_capture_ptys(struct rt_ckpt *ck);
/* TCP and UDP sockets (rt_inet.c): their state in the pause, then their
 * queued data beside the manifest.  0 or -1 (ck->err). */
int rt_capture_inet(struct rt_ckpt *ck);
int rt_store_inet(struct rt_ckpt *ck);
/* The process's POSIX timers, from /proc/self/timers, timer_gettime and what
 * the timer_* wrappers know (after the threads are known).  0 or -1 (ck->err). */
int rt_capture_timers(struct rt_ckpt *ck);
void rt_timers_forked(void); /* a forked child: no timers, no helper thread */
/* inotify (rt_inotify.c): the watches in an inotify descriptor's fdinfo; its
 * watches as LZ_EV_INWATCH records with their paths, after object record obj
 * of ck->events (cap records at most).  0 or -1 (ck->err). */
size_t rt_inotify_watches(const char *fdinfo);
int rt_capture_inotify(struct rt_ckpt *ck, int fd, const char *fdinfo, size_t obj, size_t cap);
/* System V objects the job made or the process attached, and the POSIX
 * message queues it holds (after the regions): their state into the IPC
 * section.  0 or -1 (ck->err). */
int rt_capture_ipc(struct rt_ckpt *ck);
int rt_capture_mqueues(struct rt_ckpt *ck);
int rt_is_mqueue(int fd);
void *rt_ipc_bytes(struct rt_ckpt *ck, size_t n); /* n more bytes of the section (padded to 8), or NULL */
/* A new file of the checkpoint (O_EXCL, 0600), written and fsynced: 0 or -errno. */
long rt_write_file(const char *path, const void *buf, size_t len);
int rt_capture_regions(struct rt_ckpt *ck);
void rt_regions_forget(void); /* after a restart: the mappings' flags are read anew */
/* The writer's part of capturing regions: the flags of mappings that were new
 * at the pause, from /proc/self/smaps (of the snapshot, when forked), and
 * the check that the snapshot holds every mapping.  0 or -1 (ck->err). */
int rt_settle_flags(struct rt_ckpt *ck);
/* DIR/packs/pack.ID, the page data checkpoint ID wrote. */
void rt_pack_path(char *out, size_t len, uint64_t id);
/* Its first half, which may run beside the writing: reads smaps into
 * ck->smaps if rt_settle_flags will need it (ck->smaps preallocated). */
void rt_flags_read(struct rt_ckpt *ck);
int rt_flags_prepare(struct rt_ckpt *ck); /* 1 when ck->smaps is to be read (allocated) */
int rt_flags_needed(const struct rt_ckpt *ck);

/* Futexes between threads of one address space (the writer's; the program's
 * during a checkpoint): private. */
static inline void rt_futex_wait(volatile uint32_t *w, uint32_t seen) { lz_sc4(SYS_futex, w, FUTEX_WAIT_PRIVATE, seen, 0); }
static inline void rt_futex_wake(volatile uint32_t *w) { lz_sc3(SYS_futex, w, FUTEX_WAKE_PRIVATE, 1); }
static inline void rt_futex_wait_ns(volatile uint32_t *w, uint32_t seen, uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    lz_sc4(SYS_futex, w, FUTEX_WAIT_PRIVATE, seen, &ts);
}
static inline void rt_futex_wake_all(volatile uint32_t *w) { lz_sc3(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX /* every waiter */); }
void rt_pages_forget(void);   /* after a restart: what is tracked is decided again */
/* A mapping mostly in transparent huge pages is left untracked (compared by
 * digest): 1 if [start,end) is one, now remembered as such. */
int rt_pages_keep_whole(uint64_t start, uint64_t end);
/* The large new mappings of this checkpoint start being tracked: by the forked
 * writer when by_writer (rt_plan.c), else now. */
void rt_track_late(struct rt_ckpt *ck, int by_writer);
/* In the pause: the checkpoint's directory, open deleted files, the file
 * journal of the next interval (which starts now). */
int rt_begin_checkpoint(struct rt_ckpt *ck);
/* Sets ck->err to "WHAT: reason" (err a -errno, 0 for none); returns -1. */
int rt_fail(struct rt_ckpt *ck, const char *what, long err);
int rt_scan_dirty(struct rt_ckpt *ck);
int rt_plan_copy(struct rt_ckpt *ck);
/* The writer: page data, manifest, commit. */
int rt_store_pages(struct rt_ckpt *ck);
int rt_finish_checkpoint(struct rt_ckpt *ck);
/* Starts rt_finish_checkpoint in a copy-on-write child; 1 if started (the
 * child reports to the supervisor), 0 if the caller must write itself. */
int rt_fork_writer(struct rt_ckpt *ck);
/* Tracks every private mapping (at start and after a restart); 1 if tracking works. */
int rt_track_all(void);
uint64_t rt_pause_ns(struct rt_ckpt *ck);
/* The report of a written checkpoint: "OK N pause memory changed stored durable" or "ERR N why". */
int rt_result(struct rt_ckpt *ck, int rc, char *msg, size_t len);
void rt_resume(struct rt_ckpt *ck);
void rt_checkpoint_handler(int sig, siginfo_t *si, void *uc);
void rt_install_handler(void);
/* The program's signal handlers run through a trampoline that counts them
 * (rt_handlers.c): sigaction() with libc's `real` for any signal but the
 * checkpoint signal. */
int rt_handlers_sigaction(int (*real)(int, const struct sigaction *, struct sigaction *), int sig,
                          const struct sigaction *act, struct sigaction *old);
/* Writable shared file mappings (rt_shmaps.c): the SIGSEGV handler that
 * opens a write-protected page once its undo is saved; the program's own
 * SIGSEGV disposition (1: handled here). */
void rt_shmaps_start(void);
int rt_segv_sigaction(const struct sigaction *act, struct sigaction *old);
int rt_segv_taken(void);
void rt_requeue_to_self(uint64_t v); /* the checkpoint signal, value v, to this thread */
void rt_redeliver_checkpoint(void);
void rt_trace(uint64_t t0, const char *who, const char *step); /* LAZARUS_TRACE */
/* A checkpoint asked through the C API ("API" or "HERE"): its result (lazarus.h). */
int rt_api_checkpoint(unsigned long long *index, const char *what);

/* Around a call the checkpoint must not interrupt half-way (file calls,
 * madvise): a checkpoint asked for meanwhile runs when it is done. */
static inline void rt_enter(void) { rt_self.busy++; __asm__ volatile("" ::: "memory"); }
static inline void rt_leave(void)
{
    __asm__ volatile("" ::: "memory");
    if (--rt_self.busy == 0 && (rt_self.ckpt_deferred | rt_self.stop_deferred)) rt_redeliver_checkpoint();
}

/* The job (rt_job.c).  Makes ctl_fd this process's own channel (a child
 * inherits its parent's): 0, or -1 if it cannot. */
int rt_own_channel(void);
/* Waits for the supervisor's "WORD N [arg]" on checkpoint N: 1, or 0 on ABORT
 * or when the supervisor is gone. */
int rt_job_wait(uint64_t index, const char *word, long *arg);
long rt_send_fd(int sock, int fd, const char *msg, size_t len);
/* The supervisor's end of the channel closing ends this process (rt_watch.c):
 * arms the channel (after it is made or moved), checks it now. */
void rt_watch_arm(void);
void rt_watch_check(void);
/* The checkpoint signal came from the channel (a message, or its end). */
int rt_watch_is_ours(const siginfo_t *si);
/* The job finished: this process is no member any more. */
int rt_watch_detached(void);
/* A SIGTERM from outside the job, held for the supervisor in a Slurm job
 * (rt_term.c): set up at start; the kernel's action for the program's
 * (rt_handlers.c), the program's view of the kernel's old one; whether one
 * is held; end the process as the held SIGTERM would; forget one held. */
void rt_term_start(void);
const struct sigaction *rt_term_act(int sig, const struct sigaction *act, struct sigaction *buf);
void rt_term_old(struct sigaction *old);
int rt_term_held(void);
void rt_term_end(void);
void rt_term_forget(void);
static inline int rt_is_main(void) { return rt.main_pid == rt.pid; } /* in its writer too */

/* Saves the job's variables for the programs it execs (rt_exec.c). */
void rt_exec_remember_env(void);
/* After a restart: LAZARUS_DIR of the programs the job execs is the store it
 * was restarted from (a restart elsewhere: another directory).  No malloc. */
void rt_exec_restarted_dir(const char *dir);

/* The launcher's descriptors (rt_launcher.c).  At the runtime's start: the
 * main program's from its own descriptors (LAZARUS_JOB_STDIO=1: regular files
 * are the job's), any other program's from LAZARUS_INHERITED. */
void rt_launcher_start(int ctl_fd);
/* The launcher's descriptor number that fd (of that identity and st_mode)
 * is, or -1: the job's own. */
int rt_launcher_of(int fd, uint64_t dev, uint64_t ino, uint32_t mode);
/* 1: one of the runtime's references (never the program's). */
int rt_launcher_is_ref(int fd);
/* "LAZARUS_INHERITED=fd:dev:ino:acc,..." for a program this process starts now
 * (those it still holds at their numbers) into buf. */
void rt_launcher_env(char *buf, size_t len);
/* After a restart: the restarter's descriptors are the launcher's now. */
void rt_launcher_restarted(const struct lz_resume *r);
/* A variable of the environment the process started with (rt_init.c). */
const char *rt_env(const char *name);

/* Messages to the supervisor: one datagram, text. */
void rt_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Tiny async-signal-safe formatting and string helpers. */
int rt_fmt(char *buf, size_t len, const char *fmt, ...);
size_t rt_strlen(const char *s);
uint64_t rt_now_ns(int clock);
long rt_read_file(const char *path, char *buf, size_t cap);
#endif
