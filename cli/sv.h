/* The supervisor's state, shared by its loop (supervisor.c) and the job's
 * coordinated checkpoint (job_ckpt.c, job_members.c, job_tree.c,
 * job_commit.c; their private header is job_ckpt.h). */
#ifndef LZ_SV_H
#define LZ_SV_H
#include "cli.h"
#include "tree.h"
#include "progress.h"
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#define MAX_CLIENTS 32
/* The checkpoint request (runtime/rt.h has the process side). */
#define LZ_SIGCKPT SIGURG
/* The si_value of the SIGTERM that lets a process's held SIGTERM end it
 * (runtime/rt_term.c; the same in runtime/rt.h). */
#define LZ_TERM_RELEASE 0x4c5a5445u

/* A process of the job that runs the runtime, with its own channel. */
struct member {
    pid_t pid;  /* as we see it (outside a restart's PID namespace) */
    int chan;   /* our end of its channel */
};

/* One process's part in the checkpoint under way. */
struct part {
    pid_t pid;          /* ours */
    int inner;          /* its own (from its STOPPED) */
    int zombie;         /* exited, not waited for: nothing to capture */
    int begun, stopped, captured, written;
    int answered;       /* said FORKED, OK or ERR after GO: a writer it forked is known */
    int writer_fd;      /* its writer's report pipe, -1 = none (yet, or any more) */
    char wmsg[1200];
    size_t wlen;
    uint64_t pause, stored, threads;
    char comm[16];
    /* waits for it that adapt to load (job_ckpt.c): for its BEGIN, and for
     * the runtime to appear in a process that runs without it */
    struct lz_patience begin_wait, runtime_wait;
    uint64_t runtime_cpu0; /* its CPU time when first seen without the runtime */
    uint64_t blocked_since; /* first seen with every thread blocking the checkpoint signal (0: not) */
    uint64_t vfork_since;   /* first seen waiting in vfork for a child that runs on its memory (0: not) */
    int held;               /* its request waits (HELD): 1 a lazarus_disable() section, 2 its before-hooks */
    /* sockets whose other end it says another process holds (PEER): checked
     * against every process's descriptors while all are stopped */
    struct { int fd; uint64_t ino; } peers[32];
    int npeers;
};

struct sv_state {
    struct supervisor *s;
    int runtime_ready;
    struct member *members;
    size_t nmembers, members_cap;
    /* the checkpoint under way */
    int in_progress;
    int go_sent;          /* GO sent: every process stopped */
    int resumed;          /* RESUME sent */
    struct lz_tree tree;  /* the processes and the descriptions they share, read while all are stopped */
    int have_tree;
    int failed;           /* ABORT sent: waiting for the writers to end */
    uint64_t failed_ns;   /* when */
    char fail_why[1024];
    uint64_t index;
    uint32_t trigger;
    uint64_t requested_ns, last_signal_ns;
    struct part *parts;
    size_t nparts, parts_cap;
    int clients[MAX_CLIENTS]; /* waiting for the checkpoint in progress */
    int nclients;
    int pending[MAX_CLIENTS]; /* connected, request not read yet */
    int npending;
    int api_queued;
    /* lazarus_checkpoint_here() asked (HERE) and no lazarus_checkpoint() (API)
     * since the last C API checkpoint began: its processes go on once
     * captured, not after the commit (early_resume, of the one under way) */
    int here_asked, api_asked, early_resume;
    int deferred; /* a checkpoint was asked for while the restart was restoring (2: through the C API) */
    int have_status, status;
    int child_gone, child_status;
    uint64_t restore_started_ns;
    int restore_msg_shown;
    size_t nready;      /* restart of several processes: restorers that said READY */
    int restore_failed; /* one said FAILED: all were killed */
    int restore_damaged; /* ... because the checkpoint is damaged (exit_codes.h) */
    int lazy_failed;    /* restart --lazy: the fault server failed or was killed, the job with it */
    char unckpt[600];     /* the main program exec'd one Lazarus cannot checkpoint: why ("" = none) */
};

pid_t sv_find_program(struct supervisor *s);
/* One datagram on a channel (NUL-terminated in msg), with the descriptor it
 * may carry in *fd (else -1): its size, 0 at end of file, -1 when none waits. */
ssize_t sv_recv_message(int chan, char *msg, size_t cap, int *fd);
void sv_reply(int fd, const char *msg);
void sv_finish_clients(struct sv_state *st, const char *msg);
/* Sends one message on a member's channel (GO, RESUME, ABORT). */
void sv_tell(struct sv_state *st, pid_t pid, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* job_ckpt.c: the coordinated checkpoint of every process of the job (its
 * phases; the rest in job_members.c, job_tree.c, job_commit.c). */
/* Starts checkpoint s->next_index: 0, or -1 with why. */
int job_ckpt_start(struct sv_state *st, uint32_t trigger, char *why, size_t whylen);
/* A message about it from process `pid` (ours) on its channel; `fd` a descriptor
 * that came with it (FORKED: the writer's pipe) or -1. */
void job_ckpt_message(struct sv_state *st, pid_t pid, const char *msg, int fd);
/* A writer's report pipe is readable (or closed). */
void job_ckpt_writer(struct sv_state *st, struct part *p);
/* Every poll round: timeouts, signals again to processes that have not begun,
 * the next phase. */
void job_ckpt_tick(struct sv_state *st);
/* The program ended with a checkpoint under way: its writers still finish. */
void job_ckpt_end(struct sv_state *st);

/* sv_life.c: the heartbeat on DIR/lock (every 250 ms, from a thread), and
 * the end of the job's other processes when its main program was killed:
 * ended, and waited for (if it finished, they go on, outside the job). */
void sv_beat_start(int lock_fd);
void sv_beat_stop(void);
void sv_end_members(struct sv_state *st, int finished);
#endif
