/* A process of the job does not outlive its supervisor.
 *
 * When the supervisor dies (SIGKILL, the OOM killer, a node going down, its
 * processes a moment later), nothing can checkpoint the job any more, the
 * next `lazarus restart` undoes whatever the job does from then on, and a
 * process still running would change the job's files beside the restarted
 * job -- after its supervisor's last sign of life, when a restart takes
 * every change for someone else's.  So each process ends itself as soon as
 * it finds its channel to the supervisor closed, having first dated that
 * instant on DIR/lock (the file the supervisor's heartbeat dates while it
 * lives): a restart takes a change as someone else's only after the last
 * instant a process of the job was alive to make it (store/store.c,
 * lz_job_stop_ns).  The supervisor ends a job whose main program was killed
 * the same way (it shuts every channel: cli/sv_life.c).  A job that
 * finished says so in DIR/job before its supervisor exits: a process of it
 * that is still running goes on, no longer a member.
 *
 * The channel is armed (O_ASYNC, F_SETSIG) to raise the checkpoint signal
 * with si_code POLL_* when anything arrives or its other end closes; the
 * handler (rt_checkpoint.c) passes those here.  A message for a checkpoint
 * is left where it is (rt_job_wait reads it); only an end of file counts.
 * The kernel raises the signal in the supervisor's exit, and a process takes
 * it before it runs another instruction of the program. */
#include "rt.h"
#include <fcntl.h>
#include <poll.h>
#include <string.h>

static volatile int detached; /* the job finished; nothing to watch */

void rt_watch_arm(void)
{
    if (!rt.active || rt.ctl_fd < 0 || detached) return;
    struct f_owner_ex o = {F_OWNER_PID, (pid_t)lz_sc0(SYS_getpid)};
    if (lz_sc3(SYS_fcntl, rt.ctl_fd, F_SETOWN_EX, &o) < 0 || lz_sc3(SYS_fcntl, rt.ctl_fd, F_SETSIG, LZ_SIGCKPT) < 0) return;
    long fl = lz_sc2(SYS_fcntl, rt.ctl_fd, F_GETFL);
    if (fl < 0) return;
    /* off, then on: the kernel's note of the descriptor's number follows it
     * (it was moved, or this is a child's new channel) */
    lz_sc3(SYS_fcntl, rt.ctl_fd, F_SETFL, fl & ~O_ASYNC);
    lz_sc3(SYS_fcntl, rt.ctl_fd, F_SETFL, fl | O_ASYNC);
    rt_watch_check(); /* it may have closed before */
}

int rt_watch_is_ours(const siginfo_t *si)
{
    return rt.active && si->si_code >= POLL_IN && si->si_code <= POLL_HUP && si->si_fd == rt.ctl_fd;
}

/* DIR/job says the job finished (written, renamed into place, before its
 * supervisor exits). */
static int job_finished(void)
{
    char path[LZ_PATH_MAX + 16], buf[4096];
    rt_fmt(path, sizeof path, "%s/" LZ_JOBFILE, rt.dir);
    long n = rt_read_file(path, buf, sizeof buf - 1);
    if (n <= 0) return 0;
    buf[n] = 0;
    return strstr(buf, "\nstate=finished\n") != NULL;
}

int rt_watch_detached(void) { return detached; }

static void gone(void)
{
    if (job_finished()) {
        detached = 1;
        long fl = lz_sc2(SYS_fcntl, rt.ctl_fd, F_GETFL);
        if (fl >= 0) lz_sc3(SYS_fcntl, rt.ctl_fd, F_SETFL, fl & ~O_ASYNC);
        if (rt_term_held()) rt_term_end(); /* a SIGTERM sent to it was only held (rt_term.c) */
        return;
    }
    char lock[LZ_PATH_MAX + 16];
    rt_fmt(lock, sizeof lock, "%s/" LZ_LOCKFILE, rt.dir);
    lz_sc4(SYS_utimensat, AT_FDCWD, lock, 0, 0);
    if (rt_term_held()) rt_term_end(); /* ends as the SIGTERM it held would have */
    lz_sc2(SYS_kill, lz_sc0(SYS_getpid), SIGKILL);
    for (;;) lz_sc0(SYS_pause);
}

void rt_watch_check(void)
{
    if (!rt.active || rt.ctl_fd < 0 || detached) return;
    struct pollfd p = {rt.ctl_fd, POLLIN | POLLRDHUP, 0};
    struct timespec zero = {0, 0};
    if (lz_sc5(SYS_ppoll, &p, 1, &zero, 0, LZ_KSIGSET_SIZE) <= 0) return;
    if (p.revents & POLLNVAL) return; /* not a descriptor any more (a raw close) */
    if (p.revents & (POLLHUP | POLLRDHUP | POLLERR)) gone();
}
