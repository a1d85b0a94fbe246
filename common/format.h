/* On-disk format of a Lazarus checkpoint (version 6).  Shared by the runtime
 * (writer), the restorer and the CLI (readers).  Every structure has a fixed
 * size checked at compile time so that an image written by one build is read
 * the same way by another.  The specification is docs/format.md. */
#ifndef LZ_FORMAT_H
#define LZ_FORMAT_H

#include <stdint.h>

#define LZ_MAGIC "LZRSCKPT"
#define LZ_VERSION 6u /* 3: threads (THREADS section), pending signals by thread; pipes and
                         * local socket pairs (CHANS section, LZ_FD_PIPE, LZ_FD_SOCKET).
                         * 4: process trees (the `tree` file, proc.PID/ parts, pack.N.PID).
                         * 5: every piece bound to its job and place (job identity in the
                         * manifest, the tree and the journals' BEGIN records), ids and
                         * capabilities in lz_proc, checksummed journal data, sealed journals.
                         * 6: every section names its record size and may be flagged "must
                         * understand"; the header records machine, page size and byte order
                         * (160 bytes); the journal's BEGIN record carries FJ_VERSION */
#define LZ_VERSION_MIN 5u /* the oldest version this build reads: 1-4 lack the job identity, process
                           * credentials and checksummed journals a restart relies on */
/* What the header records of the machine that wrote it (x86_64 only, so far). */
#define LZ_MACHINE_X86_64 62u       /* ELF e_machine EM_X86_64 */
#define LZ_BYTE_ORDER 0x01020304u   /* written natively: 04 03 02 01 on disk when little-endian */
#define LZ_PAGE_SIZE 4096u          /* the page size this build writes and restores */

/* Names inside the store directory. */
#define LZ_CKPT_PREFIX "ckpt."  /* committed: ckpt.%06llu/            */
#define LZ_TMP_PREFIX "tmp."    /* being written: tmp.%06llu.%d/       */
#define LZ_MANIFEST "manifest"  /* inside a checkpoint directory       */
#define LZ_TREE "tree"          /* inside a checkpoint directory: the job's processes (struct lz_tree) */
#define LZ_PROC_PREFIX "proc."  /* ckpt.N/proc.PID/: the part of a process other than the job's
                                 * main program (whose part is ckpt.N/ itself) */
#define LZ_PACKS_DIR "packs"    /* DIR/packs/pack.%06llu: page data, shared by checkpoints */
#define LZ_PACK_PREFIX "pack."  /* pack.N is written by checkpoint N (indices are never reused) for
                                 * the main program, pack.N.PID for process PID of the job */
#define LZ_JRNL_PREFIX "jrnl."  /* jrnl.N: the file journal of an interval whose checkpoint N never
                                 * committed (a failed or torn write); rolled back like ckpt.N's */
#define LZ_GC_LOCK "gc.lock"    /* flock()ed by whoever deletes packs */
#define LZ_JOBFILE "job"        /* job settings and state (text)       */
#define LZ_LOCKFILE "lock"      /* flock()ed by the job's supervisor   */
#define LZ_CTLSOCK "ctl.sock"   /* supervisor's socket for `checkpoint` */
#define LZ_FILES_ONLY "files-only" /* ckpt.N/files-only: a commit of a files-only job (run --files-only):
                                    * no process image, only the file journals; "<created_ns>\n" */
/* inside a checkpoint or jrnl.N: the file journal (files.log, files.data, ...): journal_layout.h */
/* A dropped checkpoint's files.data, overwritten by a later interval instead
 * of a new file: no page cache to allocate, zero and free per saved page. */
#define LZ_SPARE_PREFIX "spare."
#define LZ_SPARE LZ_SPARE_PREFIX "%d"
#define LZ_SPARES 2 /* at most 10: one digit */
#define LZ_SPARE_MIN (1u << 20) /* smaller ones are not worth keeping */

#define LZ_EXTENT_MAX (8u << 20) /* bytes of memory one extent covers at most */
#define LZ_FRAME_MAX (1u << 20)  /* raw bytes of one frame at most */
#define LZ_FRAME_ZERO 0xffffffffu /* extent.frame of all-zero pages (nothing stored) */
#define LZ_PATH_MAX 4096

/* What asked for a checkpoint.  The runtime is told only 1-3 (two bits of the
 * request's sigval: a batch system's triggers reach it as REQUEST), and a
 * manifest records what the runtime was told; the job's real trigger is in
 * its tree (lz_tree_header.trigger, 0 in trees of older builds). */
enum lz_trigger {
    LZ_TRIG_INTERVAL = 1, LZ_TRIG_REQUEST = 2, LZ_TRIG_API = 3,
    LZ_TRIG_SIGNAL = 4,   /* the batch system's warning signal (Slurm --signal, run --checkpoint-signal) */
    LZ_TRIG_WALLTIME = 5, /* the job's end time is near (read from Slurm) */
    LZ_TRIG_PREEMPT = 6,  /* SIGTERM of a preemption, within its grace time */
    LZ_TRIG_TERM = 7,     /* SIGTERM otherwise (time limit reached, scancel), within the grace time */
};

/* Section types. A manifest is: header, sections (each 8-aligned), trailer.
 * LZ_SEC_MUST in a section's type: a reader that does not know the type must
 * refuse the manifest instead of skipping the section. */
#define LZ_SEC_MUST 0x80000000u
enum lz_section_type {
    LZ_SEC_PROC = 1,    /* struct lz_proc, exactly one            */
    LZ_SEC_REGIONS = 2, /* struct lz_region[]                     */
    LZ_SEC_EXTENTS = 3, /* struct lz_extent[]                     */
    LZ_SEC_FDS = 4,     /* struct lz_fd[]                         */
    LZ_SEC_STRINGS = 5, /* NUL-terminated strings, referenced by offset */
    LZ_SEC_PACKS = 6,   /* struct lz_pack[]                       */
    LZ_SEC_AUXV = 7,    /* the process' auxiliary vector (raw)     */
    LZ_SEC_FRAMES = 8,  /* struct lz_frame[]                      */
    LZ_SEC_THREADS = 9, /* struct lz_thread[], every thread, at least one */
    LZ_SEC_CHANS = 10,  /* struct lz_chan[]: pipes and local socket pairs the program made */
    LZ_SEC_GROUPS = 11, /* uint32_t[]: the supplementary groups (getgroups order), lz_proc.ngroups of them */
    LZ_SEC_EVENTS = 12, /* struct lz_event[]: eventfd, timerfd, signalfd, epoll objects and epoll watches */
    LZ_SEC_PTYS = 15,   /* u64 count, struct lz_pty[count], then their queued bytes (added in version 5
                         * without a bump) */
    LZ_SEC_USOCKS = 13, /* struct lz_usock[]: local sockets that are not one end of a connected pair */
    LZ_SEC_INET = 14,   /* struct lz_inet[]: TCP and UDP sockets (AF_INET, AF_INET6) */
    LZ_SEC_TIMERS = 17, /* struct lz_timer[]: the process's POSIX timers (added in version 5 without a bump) */
    LZ_SEC_IPC = 16,    /* u64 count, struct lz_ipc[count], then their bytes: the System V objects
                         * the process made or attached, the POSIX message queues it holds */
    LZ_SEC_SIGQUEUE = 18, /* struct lz_siginfo_rec[]: pending signals past lz_proc.pending's LZ_MAX_PENDING, in
                           * the order taken (added in version 5 without a bump: an older build would skip it,
                           * so a manifest has it only when lz_proc.pending is full) */
    LZ_SEC_EXCLUDE = 19,  /* struct lz_exclusion[]: the memory the program excluded (lazarus_exclude, libckpt's
                           * exclude_bytes), sorted by address (added in version 5 without a bump: an older
                           * build skips it; a manifest has it only when the program excluded something) */
};

struct lz_header {
    char magic[8];
    uint32_t version;
    uint32_t header_size;
    uint64_t manifest_size; /* whole manifest including the trailer */
    uint64_t index;
    uint64_t parent;        /* checkpoint this run was restarted from, 0 = none */
    uint64_t created_ns;    /* CLOCK_REALTIME */
    uint32_t trigger;       /* enum lz_trigger */
    uint32_t nsections;
    uint64_t mem_bytes;     /* bytes of address space captured (regions) */
    uint64_t data_bytes;    /* bytes of memory holding data (all extents) */
    uint64_t stored_bytes;  /* bytes this checkpoint added to packs (after dedup and compression) */
    uint64_t pause_ns;      /* how long the program was stopped */
    uint64_t changed_bytes; /* bytes of memory written since the previous checkpoint (what had
                             * to be looked at again: dirty pages, or all when not tracked) */
    uint64_t durable_ns;    /* from the pause until the page data and manifest were on disk */
    uint32_t codec;         /* enum lz_codec new frames were compressed with */
    uint32_t pad;
    uint64_t job[2];        /* the job's identity (DIR/job `id`): a manifest of another job is refused */
    /* version 6 (a version-5 header ends here, header_size 128: written on x86_64, 4 KiB pages) */
    uint32_t machine;       /* LZ_MACHINE_* (ELF e_machine) */
    uint32_t page_size;     /* bytes */
    uint32_t byte_order;    /* LZ_BYTE_ORDER as the writer stores a u32 */
    uint32_t pad2;
    uint64_t reserved[2];
};
#define LZ_HEADER_V5_SIZE 128u

struct lz_section {
    uint32_t type;        /* enum lz_section_type, | LZ_SEC_MUST */
    uint32_t record_size; /* bytes per record of an array section (a newer build's records may be
                           * longer: readers use the prefix they know); 0: not an array
                           * (version 5: always 0, the sizes below) */
    uint64_t length;      /* payload bytes, the payload is padded to 8 */
};

/* Trailer: XXH3-64 of every byte before it. */
struct lz_trailer {
    uint64_t xxh3;
};

/* Registers the restorer loads before jumping back into the runtime: the
 * callee-saved set captured by lz_save_context().  Everything else (all
 * general registers, FPU/SSE/AVX, the signal mask) lives in the signal frame
 * on the program's stack and is restored by rt_sigreturn. */
struct lz_jmpctx {
    uint64_t rbx, rbp, r12, r13, r14, r15, rsp, rip;
    uint32_t mxcsr;
    uint16_t fpucw;
    uint16_t pad;
};

struct lz_ksigaction { /* the kernel's layout for rt_sigaction */
    uint64_t handler;
    uint64_t flags;
    uint64_t restorer;
    uint64_t mask;
};

struct lz_siginfo_rec {
    int32_t signo;
    int32_t tid;       /* pending for this thread only; 0 = for the process (any thread) */
    uint8_t info[128]; /* siginfo_t as dequeued */
};

#define LZ_MAX_PENDING 64
#define LZ_MAX_SIGQUEUE 65536 /* pending signals a checkpoint holds in all (LZ_SEC_SIGQUEUE beyond the first 64) */
#define LZ_MAX_THREADS 4096
#define LZ_NRLIMITS 16
#define LZ_NSIG 64 /* the kernel's signals, 1..64 (glibc's _NSIG counts 0 too) */

struct lz_proc {
    int32_t pid, ppid, pgid, sid;
    uint32_t uid, gid, umask, personality;
    char comm[16];
    uint32_t cwd;       /* string offset */
    uint32_t exe;       /* string offset */
    uint64_t xcr0;      /* enabled xsave features: restart refuses a machine without them */
    /* mm fields for prctl(PR_SET_MM_MAP) */
    uint64_t start_code, end_code, start_data, end_data;
    uint64_t start_brk, brk, start_stack;
    uint64_t arg_start, arg_end, env_start, env_end;
    struct lz_ksigaction sigactions[LZ_NSIG]; /* index = signal - 1 */
    uint32_t npending, pad1;
    struct lz_siginfo_rec pending[LZ_MAX_PENDING]; /* of the process and of each thread */
    struct { int64_t interval_us, value_us; } itimers[3];
    struct { uint64_t cur, max; } rlimits[LZ_NRLIMITS];
    /* where the runtime wants the restorer to write struct lz_resume */
    uint64_t resume_addr;
    uint64_t vdso_hash;          /* XXH3 of the [vdso] contents */
    uint64_t vdso_block_start;   /* [vvar]..[vdso] block, moved as one */
    uint64_t vdso_block_end;
    uint64_t vdso_offset;        /* offset of [vdso] inside the block */
    /* who the process was: a restart gives exactly these, and only what the
     * restarting user could give (uid/gid above are the real ones) */
    uint32_t euid, suid, egid, sgid;
    uint32_t ngroups, pad2;
    uint64_t groups_xxh3;        /* XXH3-64 of the supplementary groups (getgroups order) */
    uint64_t cap_eff, cap_prm, cap_inh;
    uint64_t reserved[1];
};

/* One thread: what the kernel keeps for it outside its registers, and where
 * it resumes.  Each thread is stopped inside the runtime's checkpoint signal
 * handler; its general, FPU/SSE/AVX registers and the program's signal mask
 * are in the kernel's signal frame on its stack (part of the image, at
 * `ucontext`), restored by rt_sigreturn when the handler returns after a
 * restart. */
struct lz_thread {
    int32_t tid;
    uint32_t flags;              /* LZ_TH_* */
    char comm[16];
    uint64_t fs_base, gs_base;
    uint64_t rseq_addr;  uint32_t rseq_len, rseq_sig;
    uint64_t robust_list, robust_len;
    uint64_t tid_address;        /* clear_child_tid (set_tid_address) */
    uint64_t altstack_sp, altstack_size; int32_t altstack_flags, pad0;
    uint64_t handler_sigmask;    /* mask in force inside the handler */
    struct lz_jmpctx ctx;        /* lz_save_context() inside the handler */
    uint64_t ucontext;           /* where the kernel's signal frame (ucontext_t: the program's
                                  * registers and signal mask at the interruption) is in the image:
                                  * the `uc` the handler got, on the thread's stack or alternate
                                  * signal stack; 0 = not recorded (older images: was reserved) */
    uint64_t reserved[3];
};
#define LZ_TH_CKPT 0x1u /* the thread that ran the checkpoint (resumes the runtime) */

/* Region kinds */
enum lz_region_kind {
    LZ_R_ANON = 1,        /* private anonymous (incl. [heap], [stack]) */
    LZ_R_FILE_PRIVATE = 2,/* private file mapping: file + stored COW pages */
    LZ_R_FILE_SHARED = 3, /* shared file mapping: remapped, contents are the file's */
    LZ_R_SHARED_ANON = 4, /* shared memory kept by content: MAP_SHARED|MAP_ANONYMOUS, SysV,
                           * memfd, a deleted file; file_dev/file_ino name the object (0:
                           * unknown) so processes sharing it share it again after a restart,
                           * file_offset is where in it the mapping starts */
    LZ_R_VDSO = 5,        /* [vvar], [vvar_vclock], [vdso]: moved, never stored */
};

/* madvise-like VmFlags worth recreating */
#define LZ_RF_GROWSDOWN 0x1u
#define LZ_RF_HUGEPAGE 0x2u
#define LZ_RF_NOHUGEPAGE 0x4u
#define LZ_RF_DONTDUMP 0x8u
#define LZ_RF_DONTFORK 0x10u
#define LZ_RF_WIPEONFORK 0x20u
#define LZ_RF_HEAP 0x40u
#define LZ_RF_STACK 0x80u
#define LZ_RF_LOCKED 0x100u
#define LZ_RF_DROPPABLE 0x200u /* MAP_DROPPABLE (glibc's getrandom state): the kernel may drop it, a
                                * fork child gets it empty; restored as plain anonymous memory */
#define LZ_RF_NORESERVE 0x400u  /* MAP_NORESERVE (VmFlags nr): mapped back without a commit charge */
#define LZ_RF_MERGEABLE 0x800u  /* MADV_MERGEABLE (KSM) */
#define LZ_RF_SEQREAD 0x1000u   /* MADV_SEQUENTIAL */
#define LZ_RF_RANDREAD 0x2000u  /* MADV_RANDOM */
#define LZ_RF_SYSV 0x4000u      /* LZ_R_SHARED_ANON: a System V segment (file_ino its id), attached
                                 * again with shmat (restorer/restore_sysv.c) */

struct lz_region {
    uint64_t start, end;
    uint32_t prot;       /* PROT_* */
    uint32_t kind;       /* enum lz_region_kind */
    uint32_t flags;      /* LZ_RF_* */
    uint32_t path;       /* string offset, 0 = none */
    uint64_t file_offset;
    uint64_t file_size;  /* identity of the mapped file ... */
    uint64_t file_ino, file_dev;
    int64_t file_mtime_ns;
    uint64_t file_hash;  /* XXH3 of the mapped range of the file (private mappings) */
    uint32_t first_extent, nextents; /* extents covering stored pages */
    uint64_t reserved[2];
};

/* How a frame's bytes are stored (common/codec.h compresses and expands).
 * The ids are on-disk values: never renumber. */
enum lz_codec {
    LZ_CODEC_NONE = 0, /* raw */
    LZ_CODEC_ZERO = 1, /* all-zero data: nothing stored (used by the codec API only) */
    LZ_CODEC_LZ4 = 2,  /* one LZ4 block (no frame), expands to exactly `raw` bytes */
    LZ_CODEC_ZSTD = 3, /* one zstd frame with its content size, no checksum */
};

/* Page data is stored in frames: up to LZ_FRAME_MAX bytes of pages (not
 * necessarily adjacent in memory) compressed as one block into a pack.
 * A frame is written once and referenced by any later checkpoint whose pages
 * still hold that data, so an incremental checkpoint stores only what
 * changed and is still restorable on its own. */
struct lz_frame {
    uint32_t pack;   /* index into the PACKS section */
    uint32_t codec;  /* enum lz_codec */
    uint64_t offset; /* of the stored bytes in the pack */
    uint32_t stored; /* bytes in the pack */
    uint32_t raw;    /* bytes once expanded, a multiple of 4096 */
    uint64_t xxh3;   /* XXH3-64 of the raw bytes: checked after expanding */
    uint64_t sxxh3;  /* XXH3-64 of the stored bytes, as in the pack (compressed or not): checked
                      * before a restart changes anything (store/frames_check.c) */
};

/* Memory [addr, addr+length) holds the frame's raw bytes [skip, skip+length),
 * or zeros when frame is LZ_FRAME_ZERO (in private file mappings, where a page
 * not listed reads as the file).  Sorted by addr, page-aligned. */
struct lz_extent {
    uint64_t addr;
    uint32_t length;
    uint32_t frame;  /* index into the FRAMES section, or LZ_FRAME_ZERO */
    uint32_t skip;
    uint32_t pad;
};

struct lz_pack {
    uint32_t path; /* string offset, relative to the checkpoint directory: ../packs/pack.N */
    uint32_t pad;
    uint64_t size; /* bytes of the pack file (it never changes once committed; gc may punch
                    * holes where no kept checkpoint has frames) */
    uint64_t id;   /* N of pack.N */
};

enum lz_fd_kind {
    LZ_FD_FILE = 1,   /* regular file by path */
    LZ_FD_DIR = 2,    /* directory by path */
    LZ_FD_DEV = 3,    /* /dev/null, /dev/zero, /dev/urandom, /dev/random */
    LZ_FD_STDIO = 4,  /* the launcher's (0/1/2 terminal, pipe or regular file, a jobserver
                       * pipe...): re-attached to the restarter's descriptor `launcher` names */
    LZ_FD_DUP = 5,    /* same open file description as fd `dup_of` */
    LZ_FD_CTL = 6,    /* the runtime's control socket */
    LZ_FD_GHOST = 7,  /* a deleted (or O_TMPFILE) regular file still open: its content is
                       * the file `path` inside the checkpoint directory */
    LZ_FD_PIPE = 8,   /* an end of a pipe the program made: `ino` is the pipe's (its lz_chan),
                       * `flags` its access mode and O_NONBLOCK */
    LZ_FD_SOCKET = 9, /* an end of an AF_UNIX socket pair the program made (both ends in the
                       * table): `ino` is this end's socket inode (its lz_chan) */
    LZ_FD_EVENT = 10, /* an eventfd, timerfd, signalfd or epoll descriptor: made anew with the state
                       * its lz_event (same fd) records; `flags` gives O_NONBLOCK.  (Added in
                       * version 5 without a bump: an older build refuses it as an unknown kind.) */
    LZ_FD_PTY = 14,   /* an end of a pseudo-terminal the job made: `ino` is its index at the checkpoint
                       * (N of /dev/pts/N; its lz_pty), `size` 1 for the master (/dev/ptmx), 0 for
                       * the terminal end; `flags` its access mode and O_NONBLOCK.  (Added in version
                       * 5 without a bump.) */
    LZ_FD_FIFO = 11,  /* a named pipe opened by `path`: `ino`/`dev` are the FIFO's (its lz_chan, kind
                       * LZ_CH_FIFO, holds the bytes in flight); `flags` its access mode and O_NONBLOCK */
    LZ_FD_USOCK = 12, /* an AF_UNIX socket that is not one end of a connected pair (listening, bound,
                       * unconnected, connected to a name, or whose peer is gone): its lz_usock (same
                       * fd) says how it is made again.  (Both added in version 5 without a bump.) */
    LZ_FD_INET = 13,  /* a TCP or UDP socket (AF_INET, AF_INET6): made anew as its lz_inet (same
                       * fd) records; `flags` gives O_NONBLOCK.  (Added in version 5 without a bump.) */
    LZ_FD_MQUEUE = 15, /* a POSIX message queue: `path` its name ("/q"), `flags` its access mode and
                        * O_NONBLOCK; the queue (attributes, messages) is the LZ_IPC_MQ record of
                        * the same name.  (Added in version 5 without a bump, as LZ_FD_EVENT.) */
};

struct lz_fd {
    int32_t fd;
    uint32_t kind;
    int32_t dup_of;
    uint32_t path;    /* string offset */
    uint32_t flags;   /* open flags (F_GETFL) */
    uint32_t fdflags; /* FD_CLOEXEC */
    int64_t offset;
    uint64_t ino, dev, size;
    int64_t mtime_ns;
    uint32_t mode;
    uint32_t launcher; /* STDIO: 1 + the launcher's descriptor this is (a program may dup its
                        * stdout elsewhere), at most LZ_LAUNCHER_FDS; 0: its own number */
    uint64_t xxh3;    /* GHOST: XXH3-64 of its content file, checked before it is used */
};
/* The state of an event-loop object (LZ_FD_EVENT), read from /proc/self/fdinfo
 * in the pause, and each watch of an epoll descriptor.  The restorer makes
 * every object when it places its descriptor, and once every descriptor is
 * in place registers the watches and arms the timers (restorer/restore_events.c). */
enum lz_event_kind {
    LZ_EV_EVENTFD = 1,  /* count: the counter; flags: LZ_EVF_SEMAPHORE */
    LZ_EV_TIMERFD = 2,  /* clockid; flags: the settime flags (TFD_TIMER_ABSTIME, ..._CANCEL_ON_SET);
                         * value_ns: 0 = disarmed, else the time left (relative timer) or the
                         * clock's absolute expiry (TFD_TIMER_ABSTIME); interval_ns; count: the
                         * expirations not yet read */
    LZ_EV_SIGNALFD = 3, /* mask: the signals it reads (bit n-1 = signal n) */
    LZ_EV_EPOLL = 4,    /* the epoll object itself; its watches follow as LZ_EV_WATCH records */
    LZ_EV_WATCH = 5,    /* fd: the epoll descriptor; target: the descriptor it watches, mask: the
                         * events (EPOLLIN..., EPOLLET, EPOLLONESHOT...), data: epoll_data */
    LZ_EV_INOTIFY = 6,  /* an inotify object; count: the watch descriptor the kernel gives next;
                         * its watches follow as LZ_EV_INWATCH records (added in version 5 without a bump) */
    LZ_EV_INWATCH = 7,  /* fd: the inotify descriptor; target: the watch descriptor (wd), mask: the
                         * mask inotify_add_watch was given (IN_MODIFY..., IN_ONLYDIR, IN_DONT_FOLLOW...),
                         * data: string offset of the watched path (absolute); count, value_ns: its
                         * inode and device at the checkpoint (st_ino, st_dev) */
};
#define LZ_EVF_SEMAPHORE 0x1u
struct lz_event {
    int32_t fd;         /* its descriptor (kind LZ_FD_EVENT, not a dup) */
    uint32_t kind;      /* enum lz_event_kind */
    uint32_t flags;
    int32_t clockid;    /* TIMERFD */
    uint64_t count;
    uint64_t mask;
    int64_t value_ns, interval_ns;
    int32_t target;     /* WATCH */
    uint32_t pad;
    uint64_t data;      /* WATCH */
};

/* A pseudo-terminal the job made (LZ_FD_PTY descriptors name it by index),
 * recorded by the process holding its master (runtime/rt_pty.c): the
 * terminal's settings and size, the master's modes, and what each side would
 * read next.  The terminal end's queue is kept as its line discipline holds
 * it (canonical lines already edited; restored with ICANON as it was and
 * every special character off, so lines stay lines and nothing is echoed). */
#define LZ_PTYF_PACKET 0x1u   /* the master is in packet mode (TIOCPKT) */
#define LZ_PTYF_LOCKED 0x2u   /* the terminal end is locked (TIOCSPTLCK, before unlockpt) */
#define LZ_PTYF_UNOPENED 0x8u /* its terminal end was never opened (no process holds it, and its master
                               * reads no hang-up): nothing queued is kept, none is opened at a restart */
#define LZ_PTYF_LAUNCHER 0x4u /* not a pty the job made: the launcher's terminal, the process's
                               * controlling terminal on a LZ_FD_STDIO descriptor; only fg_pgrp
                               * (its foreground group, as the job sees it) and sid are meaningful,
                               * index and sizes 0.  The process in that group makes it the
                               * foreground of the restarter's terminal (a job control shell's
                               * foreground job stays in the foreground) */
#define LZ_PTY_MAX_BYTES (1u << 20) /* per direction */
/* PEER messages about ptys (runtime -> supervisor, in the pause): the
 * inode field is LZ_PTY_PEER | index, | LZ_PTY_PEER_MASTER for the master:
 * every terminal end's master must be held by exactly one process of the job. */
#define LZ_PTY_PEER (1ull << 63)
#define LZ_PTY_PEER_MASTER (1ull << 62)
struct lz_pty {
    uint32_t index;       /* N of /dev/pts/N at the checkpoint */
    uint32_t flags;       /* LZ_PTYF_* */
    uint32_t iflag, oflag, cflag, lflag; /* the terminal's termios (struct termios2) */
    uint8_t line, cc[19];
    uint32_t ispeed, ospeed;
    uint16_t rows, cols, xpixel, ypixel; /* TIOCGWINSZ */
    uint32_t to_slave;    /* bytes queued for the terminal end to read (written into the master) */
    uint32_t to_master;   /* bytes queued for the master to read (the terminal end's output) */
    int32_t sid;          /* the session it is the controlling terminal of (as the job sees it), 0: none */
    int32_t fg_pgrp;      /* that session's foreground process group, 0: none */
    uint32_t pad;
    uint64_t data;        /* offset of its to_slave then to_master bytes after the records */
};

/* A TCP or UDP socket (LZ_FD_INET), read in the pause (runtime/rt_inet.c) and
 * made anew by the restorer (restorer/restore_inet.c): bound to its address,
 * listening, connected to its peer (a TCP connection only when this process
 * holds both ends), or, for a TCP connection to outside the process, restored
 * reset (`run --tcp=reset`). */
enum lz_inet_state {
    LZ_IN_UNBOUND = 1,   /* made, not bound */
    LZ_IN_BOUND = 2,     /* bound: TCP neither listening nor connected, UDP not connected */
    LZ_IN_LISTEN = 3,    /* TCP, listening (backlog) */
    LZ_IN_CONNECTED = 4, /* UDP: connected to peer; TCP: one end of a connection whose other end
                          * is descriptor peer_fd of this process, with `bytes` of data queued
                          * to be read here (file `path`) */
    LZ_IN_RESET = 5,     /* TCP connection to outside the process: comes back reset (ECONNRESET),
                          * unless peer_ino names a socket of another process of the job whose
                          * record names this one back: then the two are connected again, each
                          * with the `bytes` it had queued to read */
};
#define LZ_INO_REUSEADDR 0x1u
#define LZ_INO_REUSEPORT 0x2u
#define LZ_INO_NODELAY 0x4u
#define LZ_INO_KEEPALIVE 0x8u
#define LZ_INO_BROADCAST 0x10u
#define LZ_INO_V6ONLY 0x20u
#define LZ_INO_LINGER 0x40u     /* SO_LINGER on, `linger` seconds */
#define LZ_INO_SHUT_WR 0x80u    /* TCP: this end has sent its FIN (shutdown SHUT_WR) */
#define LZ_INO_ALL 0xffu
struct lz_inet {
    int32_t fd;          /* its descriptor (kind LZ_FD_INET, not a dup) */
    uint32_t family;     /* AF_INET, AF_INET6 */
    uint32_t type;       /* SOCK_STREAM (TCP), SOCK_DGRAM (UDP) */
    uint32_t state;      /* enum lz_inet_state */
    uint8_t local[16], peer[16]; /* addresses, network order (AF_INET: the first 4 bytes) */
    uint16_t lport, pport;       /* ports, host order */
    uint32_t scope;      /* AF_INET6: the local address's scope id */
    int32_t peer_fd;     /* CONNECTED TCP: the other end's descriptor; else -1 */
    uint32_t opts;       /* LZ_INO_* */
    int32_t keepidle, keepintvl, keepcnt, linger;
    uint32_t rcvbuf, sndbuf; /* SO_RCVBUF/SO_SNDBUF as getsockopt shows them; 0 = the default */
    int64_t rcvtimeo_us, sndtimeo_us;
    uint32_t backlog;    /* LISTEN */
    uint32_t path;       /* string: the data file in the checkpoint directory (bytes > 0) */
    uint64_t bytes;      /* CONNECTED TCP: bytes queued to be read here */
    uint64_t xxh3;       /* XXH3-64 of the data file */
    uint64_t peer_ino;   /* RESET: the inode of the socket at the other end on this host, 0 = none */
};

/* A POSIX timer (timer_create) of the process, read in the pause from
 * /proc/self/timers and timer_gettime, made again by the restorer with its id
 * (restorer/restore_timers.c).  A SIGEV_THREAD timer is, in the kernel, a
 * SIGEV_THREAD_ID timer aimed at the runtime's helper thread (rt_timers.c),
 * restored like any other; the helper comes back as a thread of the image. */
enum lz_timer_kind {
    LZ_TM_TIMER = 1, /* a timer */
    LZ_TM_NEXT = 2,  /* id: the id the kernel gives the next timer_create (only this field) */
};
#define LZ_TMF_ABSTIME 0x1u /* armed with TIMER_ABSTIME: value_ns is the clock's expiry */
struct lz_timer {
    uint32_t kind;      /* enum lz_timer_kind */
    int32_t id;         /* the kernel's timer id, which the program holds */
    int32_t clockid;
    int32_t notify;     /* sigev_notify: SIGEV_SIGNAL, SIGEV_NONE or SIGEV_SIGNAL|SIGEV_THREAD_ID */
    int32_t signo;
    int32_t tid;        /* SIGEV_THREAD_ID: the thread it signals */
    uint32_t flags;     /* LZ_TMF_* */
    int32_t overrun;    /* timer_getoverrun at the checkpoint (not restored: see LIMITS.md) */
    uint64_t value;     /* sigev_value */
    int64_t value_ns;   /* 0 = disarmed; else the time left, or the expiry (LZ_TMF_ABSTIME) */
    int64_t interval_ns;
};
/* System V objects and POSIX message queues (LZ_SEC_IPC), restored by
 * `lazarus restart` once for the job (cli/restart_ipc.c) before the
 * restorers attach the segments (restorer/restore_sysv.c).  Each record's
 * bytes are [data, data + length) of the bytes after the records:
 * SHM its content (size bytes), SEM count u16 values, MSG count messages
 * {i64 type, u64 length, bytes padded to 8}, MQ count messages {u32 priority,
 * u32 length, bytes padded to 8}, in the order a receive takes them. */
enum lz_ipc_kind { LZ_IPC_SHM = 1, LZ_IPC_SEM = 2, LZ_IPC_MSG = 3, LZ_IPC_MQ = 4 };
#define LZ_IPCF_CREATED 0x1u /* SysV: made by the job (shmget/semget/msgget with IPC_CREAT or
                              * IPC_PRIVATE that made it): its state is the checkpoint's again.
                              * Without: a segment from outside the job it had attached: attached
                              * again, its content left alone */
#define LZ_IPCF_REMOVED 0x2u /* SHM: removed (IPC_RMID) while still attached: removed again once
                              * attached */
struct lz_ipc {
    uint32_t kind, flags;
    int32_t id, key;          /* SysV: id and key (0: IPC_PRIVATE) */
    uint32_t mode;            /* permission bits */
    uint32_t uid, gid, cuid;  /* owner, and SysV creator */
    uint32_t name;            /* MQ: string offset of its name ("/q") */
    uint32_t count;           /* SEM: semaphores; MSG, MQ: messages */
    uint64_t size;            /* SHM: bytes; MSG: msg_qbytes; MQ: mq_maxmsg */
    uint64_t msgsize;         /* MQ: mq_msgsize */
    uint64_t data, length;    /* its bytes */
    uint64_t reserved[2];
};
#define LZ_IPC_MAX_BYTES (256ull << 20) /* bytes of one process's IPC section */

/* The launcher's descriptors that may be regular files (0, 1, 2): a process
 * can have them at other numbers, and keeps a reference to each (lz_resume). */
#define LZ_LAUNCHER_FDS 3

/* A pipe, or one socket of a local pair, with what is in flight in it: the
 * bytes a read would return next, read at the checkpoint without consuming
 * them, kept in the file `path` of the checkpoint directory.  Keyed by inode,
 * the kernel's name for the object, so that the ends of one pipe held by
 * several processes can be matched (process trees). */
enum lz_chan_kind {
    LZ_CH_PIPE = 1,      /* data: the bytes, in order */
    LZ_CH_STREAM = 2,    /* AF_UNIX SOCK_STREAM; data: the bytes this socket would receive */
    LZ_CH_DGRAM = 3,     /* AF_UNIX SOCK_DGRAM; data: each message as u32 length + bytes */
    LZ_CH_SEQPACKET = 4, /* AF_UNIX SOCK_SEQPACKET; data as for DGRAM */
    LZ_CH_FIFO = 5,      /* a named pipe: as a pipe; reserved[0] is the FIFO's device */
};
#define LZ_CHAN_MAX_BYTES (1u << 30) /* data of one object at most (buffers are far smaller) */
#define LZ_CHS_PASSCRED 0x1u         /* SO_PASSCRED was on */
#define LZ_CHS_REMOTE 0x2u           /* its peer is held by another process of the job (whose part
                                      * has the peer's record): the pair is made by the restart's
                                      * plan (store/restart_plan.h) */

struct lz_chan {
    uint64_t ino;       /* the pipe's inode; a socket's own inode (its receive queue) */
    uint64_t peer;      /* socket: the other end's inode (its own lz_chan); pipe: 0 */
    uint32_t kind;      /* enum lz_chan_kind */
    uint32_t path;      /* string offset: the data file in the checkpoint directory (a plain
                         * name), 0 when nothing is in flight */
    uint64_t bytes;     /* size of the data file (message lengths included) */
    uint64_t xxh3;      /* XXH3-64 of the data file, checked before the data is used */
    uint32_t nmsgs;     /* DGRAM/SEQPACKET: messages in the file; else 0 */
    uint32_t capacity;  /* pipe: F_GETPIPE_SZ; socket: SO_RCVBUF as getsockopt returns it */
    uint32_t sndbuf;    /* socket: SO_SNDBUF as getsockopt returns it; pipe: 0 */
    uint32_t shutdown;  /* socket: 1 receive side shut down, 2 send side (sock_diag's mask) */
    int32_t peek_off;   /* socket: the program's SO_PEEK_OFF (-1: off) */
    uint32_t sockflags; /* LZ_CHS_* */
    uint64_t reserved[2]; /* socket: SO_RCVTIMEO, SO_SNDTIMEO in microseconds (0: none);
                           * named pipe: its device and mode (LZ_CH_FIFO) */
};

/* A local socket that is not one end of a connected pair (LZ_FD_USOCK; the
 * record of descriptor `fd`).  `q` is its receive queue as for a socket of a
 * pair (kind, data file, buffers, shutdown, SO_PEEK_OFF, SO_PASSCRED), and
 * each datagram's sender in a second file.  Made again by restorer/restore_usock.c. */
enum lz_usock_flags {
    LZ_US_LISTEN = 0x1,   /* listening, with `backlog` */
    LZ_US_UNLINKED = 0x2, /* bound to a path that no longer names it: bound, then unlinked */
    LZ_US_ORPHAN = 0x4,   /* connected, its peer closed: reads give the queue, then end of file */
    LZ_US_CONNECT = 0x8,  /* a datagram socket connected to the named socket `peer_addr` */
    LZ_US_MODE = 0x10,    /* `mode`, `uid`, `gid` of the socket file are known */
};
struct lz_usock {
    struct lz_chan q;      /* ino: this socket's inode */
    int32_t fd;
    uint32_t flags;        /* LZ_US_* */
    uint32_t backlog;      /* LISTEN: the backlog listen() was given (as sock_diag reports it) */
    uint32_t addr_len;     /* bytes of `addr` used (sun_path; abstract names begin with 0); 0: unnamed */
    uint32_t peer_len;     /* bytes of `peer_addr` used */
    uint32_t mode, uid, gid; /* the socket file, LZ_US_MODE */
    int64_t rcvtimeo_us, sndtimeo_us; /* SO_RCVTIMEO, SO_SNDTIMEO (0: none) */
    char addr[108];        /* getsockname's sun_path; a relative path is the working directory's */
    char peer_addr[108];   /* CONNECT: getpeername's sun_path */
    uint32_t from_path;    /* a datagram socket's queue: string offset of the file of its senders,
                            * per datagram u32 length + sun_path (0: unnamed); 0: none */
    uint32_t from_bytes;   /* its size */
    uint64_t from_xxh3;    /* XXH3-64 of it */
};

/* ckpt.N/tree: the processes of the job at checkpoint N, written by the
 * supervisor when every process's part is written, just before the commit.
 * Header, then nprocs struct lz_tree_proc (parents before their children,
 * the main program first), then nshared struct lz_tree_shared, then the
 * trailer (XXH3-64 of every byte before it).  PIDs are the job's own (as the
 * processes see them, inside a restart's PID namespace). */
#define LZ_TREE_MAGIC "LZRSTREE"
#define LZ_MAX_PROCS 1024
enum lz_tree_state {
    LZ_TP_LIVE = 1,   /* its part (manifest, data, journal) is `dir` */
    LZ_TP_ZOMBIE = 2, /* exited, not yet waited for by its parent: `status` is its wait status */
};
struct lz_tree_header {
    char magic[8];
    uint32_t version;   /* LZ_VERSION */
    uint32_t nprocs;
    uint32_t nshared;
    uint32_t trigger;   /* enum lz_trigger of the job's checkpoint (added in version 5 without a bump:
                         * 0 in older trees, whose manifest's trigger holds; older builds ignore it) */
    uint64_t index;
    uint64_t job[2];    /* the job's identity, as in every manifest */
};
struct lz_tree_proc {
    int32_t pid, ppid;  /* ppid 0: the main program (its parent is the supervisor's side) */
    int32_t pgid, sid;
    uint32_t state;     /* enum lz_tree_state */
    int32_t status;     /* zombie: wait status */
    char comm[16];
    char dir[32];       /* live: "" (the checkpoint directory: the main program) or "proc.PID" */
};
/* An open file description (regular file, directory, device) that several
 * processes hold: every (pid, fd) with the same group is one description,
 * made once at restart and inherited.  Pipes are matched by inode instead. */
struct lz_tree_shared {
    int32_t group, pid, fd, pad;
};

/* Written by the restorer into the restored runtime (at lz_proc.resume_addr)
 * just before it jumps back: what the resumed process needs to know about the
 * restart that brought it back. */
#define LZ_STDIO_FDS 1024 /* descriptors a job inherits that a restart gives the restarter's */
struct lz_resume {
    uint64_t magic;            /* LZ_RESUME_MAGIC */
    uint64_t index;            /* checkpoint restored from */
    struct { uint64_t start, end; } unmap[4]; /* the restorer's own mappings */
    int32_t ctl_fd;            /* control socket to the new supervisor */
    int32_t exe_fd;            /* the program's executable: the runtime makes it
                                  /proc/PID/exe once the restorer is unmapped */
    int32_t codec, level;      /* `restart --compress`, codec -1 = keep the program's */
    int32_t main_pid;          /* the job's main program (this one if equal to its PID) */
    int32_t launcher_ref[LZ_LAUNCHER_FDS]; /* a close-on-exec copy of the restarter's 0/1/2 where
                                  it is a regular file the program now has, else -1: how the
                                  runtime tells that description from the same file opened anew */
    uint8_t stdio[LZ_STDIO_FDS / 8]; /* bitmap of descriptors 0..LZ_STDIO_FDS-1 that are the restarter's now
                                  (LZ_FD_STDIO records): the launcher's, for the runtime */
    char dir[LZ_PATH_MAX];     /* store directory (absolute) */
};
#define LZ_RESUME_MAGIC 0x454d555345525a4cull /* "LZRESUME" */

/* A byte range the program excluded from its checkpoints (LZ_SEC_EXCLUDE).
 * The runtime's own copy (in its memory, restored with it) is what the next
 * checkpoint obeys; the manifest's is the record for `lazarus list`. */
enum { LZ_EXCL_DEAD = 1, LZ_EXCL_READONLY = 2 };
struct lz_exclusion {
    uint64_t start, end; /* bytes [start, end): any alignment */
    uint32_t kind;       /* LZ_EXCL_* */
    uint32_t pad;
    uint64_t stored_at;  /* read-only: the checkpoint that stores it (later ones reference that copy); 0 = the next */
};

#define LZ_STATIC_ASSERT(c, m) _Static_assert(c, m)
LZ_STATIC_ASSERT(sizeof(struct lz_header) == 160, "lz_header size");
LZ_STATIC_ASSERT(sizeof(struct lz_region) == 104, "lz_region size");
LZ_STATIC_ASSERT(sizeof(struct lz_extent) == 24, "lz_extent size");
LZ_STATIC_ASSERT(sizeof(struct lz_frame) == 40, "lz_frame size");
LZ_STATIC_ASSERT(sizeof(struct lz_pack) == 24, "lz_pack size");
LZ_STATIC_ASSERT(sizeof(struct lz_fd) == 80, "lz_fd size");
LZ_STATIC_ASSERT(sizeof(struct lz_thread) == 216, "lz_thread size");
LZ_STATIC_ASSERT(sizeof(struct lz_chan) == 80, "lz_chan size");
LZ_STATIC_ASSERT(sizeof(struct lz_event) == 64, "lz_event size");
LZ_STATIC_ASSERT(sizeof(struct lz_pty) == 88, "lz_pty size");
LZ_STATIC_ASSERT(sizeof(struct lz_usock) == 360, "lz_usock size");
LZ_STATIC_ASSERT(sizeof(struct lz_inet) == 136, "lz_inet size");
LZ_STATIC_ASSERT(sizeof(struct lz_timer) == 56, "lz_timer size");
LZ_STATIC_ASSERT(sizeof(struct lz_ipc) == 88, "lz_ipc size");
LZ_STATIC_ASSERT(sizeof(struct lz_tree_header) == 48, "lz_tree_header size");
LZ_STATIC_ASSERT(sizeof(struct lz_tree_proc) == 72, "lz_tree_proc size");
LZ_STATIC_ASSERT(sizeof(struct lz_tree_shared) == 16, "lz_tree_shared size");
LZ_STATIC_ASSERT(sizeof(struct lz_exclusion) == 32, "lz_exclusion size");

#endif
