/* The `lazarus` command: one file per subcommand, the supervisor shared by
 * `run` and `restart`. */
#ifndef LZ_CLI_H
#define LZ_CLI_H
#include "store.h"
#include "tree.h"
#include "restart_plan.h"
#include <signal.h>
#include "fs_mount.h"
#include <stdint.h>
#include <sys/types.h>

int cmd_run(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int cmd_checkpoint(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_gc(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_rollback(int argc, char **argv);

/* The program's end of its channel to the supervisor is inherited across
 * exec at this number or above, one programs rarely use (the runtime's own
 * descriptors sit higher: runtime/rt.h). */
#define LZ_CHAN_FD_BASE 900
/* The runtime's file name (in lib/ next to bin/lazarus; in a program's maps). */
#define LZ_RUNTIME_LIB "liblazarus-rt.so"

/* Common option parsing: -d DIR, --at N; returns index of first operand or
 * -1 after printing a usage error.  `help` is printed for --help (exit 0). */
struct cli_opts {
    const char *dir;
    int have_dir;          /* -d given */
    int have_at; uint64_t at;
    int have_interval; uint64_t interval;
    int have_keep; uint64_t keep;
    int json;
    int durability;        /* -1 not given, 0 process, 1 machine */
    char excludes[4096];   /* --exclude DIR..., absolute, '\n'-separated */
    int force;
    char compress[32];     /* --compress SPEC, checked with lz_codec_parse ("" = not given) */
    int job_stdio;         /* run --job-stdio */
    int tcp_refuse;        /* run --tcp=refuse (default reset) */
    int compact;           /* run --compact */
    int resume;            /* run --resume (resume.c) */
    int ckpt_signal;       /* --checkpoint-signal SIG (batch_slurm.c), 0 = not given */
    /* the remote store (run --remote, -d s3://...) */
    const char *remote, *endpoint, *ca_file, *addressing, *cache;
    const char *encrypt_key; /* --encrypt-key FILE (the key itself: remote_key.c) */
    int insecure;
    int have_keep_remote; uint64_t keep_remote;
    int files_as_they_are; /* restart -d s3://...: resume without rolling the files back */
    const char *journal_dir; /* run --journal-dir */
    const char *fallback;  /* --fallback DIR: the spool of run -d s3:// (remote_spool.c) */
    int have_older_than; uint64_t older_than; /* gc -d s3:// --older-than SECONDS */
    int check_excl;        /* run --check-exclusions */
    int no_incremental;    /* run --no-incremental */
    int no_fork;           /* run --no-fork */
    int have_mintime; uint64_t mintime_ms; /* run --mintime S */
    int lazy;              /* restart --lazy */
    int quiet;             /* run, restart --quiet: no informational line (log_out.c) */
    const char *log;       /* run, restart --log FILE: Lazarus' own lines appended there */
    char fs[4096];         /* run --fs PATH...: absolute, '\n'-separated */
    const char *fs_mode;   /* run --fs-mode MODE (NULL: undo) */
    uint64_t fs_buf_max, fs_buf_low; /* run --fs-buffer-max/-low MiB (0: not given) */
    int files_only;        /* run --files-only */
};
int parse_opts(int argc, char **argv, const char *cmd, const char *allowed, const char *help, struct cli_opts *o);
/* "1.2 GiB" */
void human_bytes(char *buf, size_t len, uint64_t bytes);
/* "2026-11-26T14:24:22Z": ns since the epoch, in UTC to the second */
void utc_text(char *buf, size_t len, uint64_t ns);
/* Absolute path of DIR (which may not exist yet). */
char *abs_dir(const char *dir);
/* bin/ and lib/ next to the running `lazarus` */
const char *install_path(const char *rel);

/* Connect to DIR/ctl.sock whatever the length of DIR; -1 if no job listens. */
int ctl_connect(const char *dir);
int ctl_listen(const char *dir);

struct supervisor {
    const char *dir;
    int lock_fd;
    int ctl_fd;          /* our end of the socketpair to the runtime */
    int listen_fd;
    pid_t child;         /* what we wait for: the program, or the PID-namespace init */
    pid_t prog;          /* the program, as seen from here (0 = not known yet) */
    int status_fd;       /* the namespace init reports the program's wait status here */
    int restoring;       /* restart: until the runtime says RESTORED */
    int plan_fd;         /* restart of several processes: the plan (restart_tree.c), or -1 */
    int go_fd;           /* its go pipe's write end: one byte per process once all are READY */
    size_t nlive;        /* the processes that say READY */
    /* restart of one process: the restorer says LOADED once its anonymous
     * memory is in (phase 1 ends); then `rollback` rolls the files back
     * (phase 2) and a byte on rolled_fd lets the restorer go on */
    int rolled_fd;       /* that pipe's write end, or -1 */
    int rolled_read;     /* its read end, for the restorer */
    int (*rollback)(void *arg);
    void (*running)(void *arg); /* then, while the restorer goes on: the job file says so */
    void *rollback_arg;
    int files_rolled;    /* phase 2 began: a failure from now on changed files */
    uint64_t restore_index;
    uint64_t restore_taken_ns; /* when checkpoint restore_index was taken (CLOCK_REALTIME) */
    uint64_t restore_files;    /* the files its rollback changes (as `lazarus diff` lists them) */
    uint64_t interval, keep, next_index;
    uint64_t taken;        /* checkpoints this run or restart committed (its last line says) */
    uint64_t first_index;  /* the first index this run can take */
    int durability;
    char excludes[4096];
    char compress[32];   /* the job's --compress, "" = the runtime's default */
    int job_stdio;       /* run --job-stdio: the launcher's regular files on 0/1/2 are the job's */
    int tcp_refuse;      /* run --tcp=refuse: a TCP connection to outside fails the checkpoint */
    uint64_t job_id[2];  /* DIR/job `id`: written into every tree, passed to the runtime */
    char jhome[4096];    /* where the file journals live: dir, or the job's --journal-dir (store.h) */
    struct flusher *flusher; /* run --remote: copies each committed checkpoint off the machine (NULL: none) */
    /* restart --lazy (lazy_server.c): the fault server, our copy of the
     * program's userfaultfd (kept until the server is done, so that the
     * program never reads zeros if the server dies), the pipe whose end
     * tells the server we are gone */
    int lazy;
    pid_t lazy_pid;
    int lazy_fd, lazy_hup;
    /* run --fs PATH: the file system daemons (fs_mount.c); a death of one ends the job */
    struct fs_mount fs[FS_MAX];
    int nfs;
    int fs_failed;       /* one died or failed a commit: the program was killed */
    int files_only;      /* run --files-only: no runtime, a checkpoint is a commit of the files (fs_job.c) */
};
/* Fills `s` for the job in `dir` (shown to the user as `shown`), opens the
 * control sockets and makes us a subreaper; returns the program's end of the
 * runtime socket, or -1 after saying why. */
int supervisor_prepare(struct supervisor *s, const char *dir, const char *shown, int lock, const struct lz_job *job,
                       uint64_t next_index);
/* restart --lazy: starts the fault server with the program's userfaultfd
 * (lazy_server.c); its pid, and in *hup_keep the pipe end to hold. */
pid_t lazy_spawn(struct supervisor *s, int uffd, int *hup_keep);
int cmd_lazy_serve(int argc, char **argv);
/* Runs until the program ends; returns what `lazarus` exits with. */
int supervise(struct supervisor *s);
/* Blocks the signals supervise() takes through a signalfd (forwarded to the
 * program, SIGCHLD...) into *mask: before the program is forked, so that one
 * sent once it runs waits for supervise() (the child unblocks them). */
void supervisor_block_signals(sigset_t *mask);

/* Starts `argv` (exec) as a child with the runtime preloaded. */
pid_t spawn_program(struct supervisor *s, int child_ctl, char **argv);
/* Starts the restorer in a process that has PID `want` (the checkpointed
 * main program's); ids_free: that PID and every thread ID of the job are
 * free here (else a PID namespace is made).  s->plan_fd >= 0: a job of
 * several processes (restart_tree.c). */
pid_t spawn_restorer(struct supervisor *s, int child_ctl, pid_t want, int ids_free, const char *ckpt_dir, uint64_t index);

/* A restart of several processes (restart_tree.c). */
struct restart_tree {
    struct lz_tree tree;
    struct lz_image *imgs; /* per process of the tree (zeroed for zombies) */
    size_t nlive;          /* processes that come back (not zombies) */
    int plan_fd, go_read;  /* placed for the restorers to inherit */
    int go_write;
    struct lz_plan_obj *objs; /* what processes share (store/restart_plan.h) */
    size_t nobjs;
    struct lz_plan_hold *holds;
    size_t nholds;
};
/* Phase 1 of a restart: the working directory and every file or directory
 * the restorer reopens by path exists once `plan` is applied: 0, or -1 with why. */
struct fj_plan;
int restart_paths_check(const struct lz_image *img, const struct fj_plan *plan, char *why, size_t whylen);
/* The names the restorer binds or opens besides files: local sockets, named pipes (restart_sockpaths.c). */
int restart_named_objects_check(const struct lz_image *img, char *why, size_t whylen);
/* TCP and UDP sockets (restart_inet.c): their ports can be bound again: 0,
 * or -1 with why; then one line on stderr per connection restored reset. */
int restart_inet_check(const struct lz_image *img, int pid, char *why, size_t whylen);
void restart_inet_report(const struct lz_image *imgs, size_t nimgs, size_t k, int pid);
/* The job's System V objects and POSIX message queues (restart_ipc.c): phase 1
 * decides what becomes of each, changing nothing (0, or -1 and why); phase 2
 * gives them their state, after the files are rolled back. */
int restart_ipc_check(const struct lz_image *imgs, size_t nimgs, char *why, size_t whylen);
int restart_ipc_apply(char *why, size_t whylen);
/* When the job of store DIR stopped, for telling what is gone since (deleted
 * or replaced after it) from what the job did: INT64_MAX without a job file
 * or while a rollback is under way (nothing is told apart then). */
int64_t rollback_stop_ns(const char *dir);
/* fj_plan_load (files/rollback.h) of a rollback of the store DIR to checkpoint
 * `target`, with what it needs of the store: the job's identity (DIR/job)
 * and every journal directory (ckpt.N/, jrnl.N/).  NULL with why. */
struct fj_plan *rollback_plan_load(const char *dir, uint64_t target, int64_t stop_ns, int *damaged, char *why, size_t whylen);
/* Loads and checks every part of rt->tree (loaded by the caller) and finds
 * what its processes share: 0, or -1 with why (one line; nothing changed). */
/* -2: a part is damaged (LZ_EXIT_DAMAGED) */
int restart_tree_load(struct restart_tree *rt, const char *ckpt, uint64_t index, char *why, size_t whylen);
/* What processes of the job share, each made once by their nearest common
 * ancestor (restart_objects.c): into rt->objs and rt->holds.  0, or -1 and why. */
int restart_tree_objects(struct restart_tree *rt, const char *ckpt, char *why, size_t whylen);
ssize_t restart_tree_proc_index(const struct lz_tree *t, int32_t pid); /* -1: not in the tree */
/* Makes the plan (store/restart_plan.h) and the go pipe, above every
 * descriptor number of the job and ctl_fd: 0, or -1 with why. */
int restart_tree_plan(struct restart_tree *rt, int ctl_fd, char *why, size_t whylen);
/* Every PID and thread ID of the job is free here. */
int restart_tree_ids_free(const struct restart_tree *rt);
void restart_tree_free(struct restart_tree *rt);

/* Restart refuses an image whose mapped files or kernel differ. */
int check_identity(const struct lz_image *img, char *why, size_t whylen);
#endif
