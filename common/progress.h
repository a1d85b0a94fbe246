/* Waits that adapt to load.  Each wait of a checkpoint or a restart for
 * another process (or thread) gives up after `base` on an idle machine; one
 * that is making progress gets more time, up to `cap`: a task that is
 * runnable (a busy machine has not given it a CPU yet), in an
 * uninterruptible wait (a loaded disk), or whose CPU time advanced since the
 * previous look (busy in a long call; read in ns from schedstat too: stat's
 * 10 ms ticks miss a thread that runs a millisecond at a time) has made
 * progress then.  A wait gives
 * up once past `base` with no progress seen for LZ_PATIENCE_QUIET_NS (or
 * `base`, if shorter), or at `cap`.  Raw system calls, no allocation, no locks: used by the runtime in
 * its signal handler and by the static restorer as well as the CLI. */
#ifndef LZ_PROGRESS_H
#define LZ_PROGRESS_H
#include <stdint.h>

#define LZ_PATIENCE_QUIET_NS (1000ull * 1000000ull) /* no progress for this long: stuck */
#define LZ_PATIENCE_LOOK_NS (50ull * 1000000ull)    /* looks at the task at most this often */

struct lz_patience {
    uint64_t t0, base, cap;   /* CLOCK_MONOTONIC ns */
    uint64_t quiet;           /* no progress for this long: stuck */
    uint64_t last_look, last_progress;
    uint64_t cpu;             /* the task's utime + stime (ticks) at the last look */
    uint64_t run_ns;          /* its time on a CPU (ns, schedstat; 0 unknown) then */
    char state;               /* its state then ('R', 'S', 'D', 'T', 'Z'...; 0: gone) */
    int looked;
};

void lz_patience_start(struct lz_patience *p, uint64_t now, uint64_t base, uint64_t cap);
/* Task `tid` of process `pid` (tid 0: the process as a whole; pid 0: this
 * process; as /proc names them): 1 to wait on, 0 to give up.  `stuck`: the caller knows
 * it cannot progress whatever it does (it blocks the signal awaited). */
int lz_patience_more(struct lz_patience *p, uint64_t now, int pid, int tid, int stuck);
/* Why it gave up, for a message: "no progress: sleeping" and the like, or
 * "the longest wait" (at `cap`), into out. */
void lz_patience_why(const struct lz_patience *p, uint64_t now, char *out, unsigned long len);
/* The state and CPU ticks of a task from /proc: 0, or -1 if it is gone. */
int lz_task_look(int pid, int tid, char *state, uint64_t *cpu);
/* 1 if the task blocks signal `sig` (SigBlk of its status), else 0. */
int lz_task_blocks(int pid, int tid, int sig);
#endif
