/* Private to the job's coordinated checkpoint: job_ckpt.c (its phases, the
 * messages), job_members.c (who is in the job), job_tree.c (the tree read
 * while all are stopped), job_commit.c (the commit, the end).  The
 * supervisor's side is in sv.h. */
#ifndef LZ_JOB_CKPT_H
#define LZ_JOB_CKPT_H
#include "sv.h"
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* job_ckpt.c */
/* LAZARUS_TRACE=1: one step of the coordination on stderr. */
void jc_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fails the checkpoint under way (once): ABORT to every process; p, if any,
 * is named in the reason. */
void jc_fail(struct sv_state *st, const struct part *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* job_members.c: the parts (the processes of the job) and their states */
/* A part's state, as counted and asked of all (zombies never count). */
enum jc_what {
    JC_STOPPED,  /* said STOPPED */
    JC_CAPTURED, /* said FORKED or OK */
    JC_WRITTEN,  /* its part written (OK), its writer if any gone (jc_all only) */
    JC_ANY,      /* every part (jc_count_parts only) */
};
size_t jc_count_parts(struct sv_state *st, enum jc_what what);
/* Every part not a zombie is `what`. */
int jc_all(struct sv_state *st, enum jc_what what);
struct part *jc_part_of(struct sv_state *st, pid_t pid);
/* 'Z' for a zombie, 0 if gone. */
char jc_proc_state(pid_t pid);
struct part *jc_add_part(struct sv_state *st, pid_t pid);
/* Adds pid's descendants not yet listed (parents first); returns how many. */
size_t jc_add_descendants(struct sv_state *st, pid_t pid);
/* The runtime is mapped in it. */
int jc_runs_runtime(pid_t pid);
/* Sends it the checkpoint request (LZ_SIGCKPT with index and trigger). */
void jc_signal_part(struct sv_state *st, struct part *p);
int jc_is_main(struct sv_state *st, const struct part *p);
/* The child that runs on pid's memory between vfork and exec (pid waits in
 * vfork and cannot take a signal until it execs or exits), or 0. */
pid_t jc_vfork_child(pid_t pid);
/* pid as its own (innermost) PID namespace numbers it. */
pid_t jc_inner_pid(pid_t pid);

/* job_tree.c: read while every process is captured and still stopped */
/* The tree (ids, zombies' wait status, shared descriptions): 0, or -1 with why. */
/* -2: a process of the job is gone (why says which); -1: why says why */
int jc_build_tree(struct sv_state *st, struct lz_tree *t, char *why, size_t whylen);
/* job_inet.c: no TCP or UDP socket is held by two processes: 0, or -1 with why. */
int jc_check_inet_shared(struct sv_state *st, char *why, size_t whylen);
/* Every socket pair a process says it shares is held by the job: 0, or fails it and -1. */
int jc_check_peers(struct sv_state *st);
/* Pseudo-terminals' PEER lines: each terminal end's master in the job, held once (job_ptys.c). */
int jc_check_ptys(struct sv_state *st);

/* job_commit.c */
/* Every part written: the commit, the retention, the clients told OK. */
void jc_finish_ok(struct sv_state *st);
/* The failed checkpoint's end: its parts cleaned up, the clients told ERR. */
void jc_finish_failed(struct sv_state *st);
#endif
