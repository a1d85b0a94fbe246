/* Sessions and process groups given back exactly, in a restart of several
 * processes (restore_tree.c makes the children; the plan says each one's
 * session and group at the checkpoint, lz_plan_proc.sid and .pgid).
 *
 * A process starts in its creator's session and group, and can only make a
 * session of its own (setsid) or join a group of its session.  So:
 *   - a session leader that had forked children before its setsid (they
 *     stayed in the old session) makes those children first, then its
 *     session (restore_sessions_defer);
 *   - a child whose session or group has no leader any more (it exited) is
 *     made through helper processes that hold the dead leader's PID for a
 *     moment: the first, made by the parent, calls setsid (or setpgid for a
 *     group); a second, for a group of that session whose leader is gone
 *     too, is made by the first with CLONE_PARENT and calls setpgid; the
 *     last helper makes the child with CLONE_PARENT, so its parent is the
 *     right one, and the helpers exit (the parent reaps them).  CRIU's
 *     method, without its task list.
 * A session whose leader lives in another branch of the tree, or a dead
 * leader's PID taken by another process, cannot be made: the child then gets
 * its creator's, with a warning naming it. */
#include "restorer.h"
#include "restart_plan.h"
#include "util.h"
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static const struct lz_plan_proc *procs;
static uint32_t nprocs;

void restore_sessions_init(const struct lz_plan_proc *p, uint32_t n)
{
    procs = p;
    nprocs = n;
}

static const struct lz_plan_proc *find(int32_t pid)
{
    for (uint32_t k = 0; k < nprocs; k++)
        if (procs[k].pid == pid) return &procs[k];
    return NULL;
}

/* A session or group id as the plan names it: a process of the job's PID,
 * or 0 (the launcher's, now the restarter's: the main program's). */
static int32_t term(pid_t id)
{
    return id > 0 && find(id) ? id : 0;
}

int32_t restore_sessions_cur_sid(void) { return term(getsid(0)); }

/* Does a process of the plan lead session or group `id` (it is made)? */
static int led(int32_t id)
{
    return id == 0 || find(id) != NULL;
}

static long clone_at(pid_t tid, uint64_t flags)
{
    struct clone_args a;
    memset(&a, 0, sizeof a);
    a.flags = flags;
    a.exit_signal = flags & CLONE_PARENT ? 0 : SIGCHLD;
    a.set_tid = (uint64_t)(uintptr_t)&tid;
    a.set_tid_size = 1;
    return syscall(SYS_clone3, &a, sizeof a);
}

int restore_sessions_defer(const struct lz_plan_proc *me)
{
    if (me->sid != me->pid) return 0;
    int32_t cur = term(getsid(0));
    for (uint32_t k = 0; k < nprocs; k++)
        if (procs[k].ppid == me->pid && procs[k].sid == cur && procs[k].sid != me->pid) return 1;
    return 0;
}

int restore_sessions_clone(const struct lz_plan_proc *q)
{
    int32_t cur_sid = term(getsid(0)), cur_pg = term(getpgrp());
    int need_sid = q->sid != q->pid && q->sid != cur_sid && !led(q->sid);
    int need_pg = q->pgid != q->pid && q->pgid != (need_sid ? q->sid : cur_pg) && !led(q->pgid);
    if (q->sid != q->pid && q->sid != cur_sid && led(q->sid))
        lz_warn("process %d: its session (%s %d) cannot be made where its parent is: it gets its parent's",
                q->pid, q->sid ? "led by process" : "the launcher's, now the restarter's", q->sid);
    if (!need_sid && !need_pg) return (pid_t)clone_at(q->pid, 0);
    /* the helpers: their pids are the dead leaders', free now */
    pid_t made[2] = {-1, -1};
    long h = clone_at(need_sid ? q->sid : q->pgid, 0);
    if (h < 0) {
        lz_warn("process %d: cannot make its %s %d again (its PID is taken: %s): it gets its parent's", q->pid,
                need_sid ? "session" : "process group", need_sid ? q->sid : q->pgid, strerror(errno));
        return (pid_t)clone_at(q->pid, 0);
    }
    if (h == 0) {
        if (need_sid ? setsid() < 0 : setpgid(0, 0) < 0) _exit(1);
        if (need_sid && need_pg) { /* the group's helper, a child of the parent's too */
            long h2 = clone_at(q->pgid, CLONE_PARENT);
            if (h2 != 0) _exit(h2 < 0);
            if (setpgid(0, 0) < 0) _exit(1);
        }
        long c = clone_at(q->pid, CLONE_PARENT);
        if (c == 0) return 0;
        _exit(c < 0);
    }
    made[0] = (pid_t)h;
    int st = 0;
    if (waitpid(made[0], &st, __WALL) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
        restore_fail("process %d: cannot make its %s %d again", q->pid, need_sid ? "session" : "process group",
                     need_sid ? q->sid : q->pgid);
    if (need_sid && need_pg) {
        made[1] = q->pgid;
        if (waitpid(made[1], &st, __WALL) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            restore_fail("process %d: cannot make its process group %d again", q->pid, q->pgid);
    }
    return q->pid;
}
