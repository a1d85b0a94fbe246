/* Forked checkpoints: the program pauses only to capture its state and
 * fork; a copy-on-write child writes the checkpoint while the program runs.
 *
 * The child is made with CLONE_PARENT: it is the supervisor's child (or the
 * PID-namespace init's), never the program's, so the program's wait() never
 * sees it.  It reports on a pipe whose read end the program hands to the
 * supervisor (SCM_RIGHTS): one line "OK ..." or "ERR ...", and end-of-file
 * when it is gone, so a writer killed half-way is noticed at once.  The
 * supervisor starts no other checkpoint until then. */
#include "rt.h"
#include "rt_dirty.h"
#include "rt_map.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>

#ifndef MADV_KEEPONFORK /* Linux 4.14; glibc's headers before 2.27 lack it */
#define MADV_KEEPONFORK 19
#endif

/* The program sets its pause in the map once the job runs again (after
 * RESUME or ABORT).  The writer waits for that as long as the program lives
 * (the supervisor decides when the job goes on, with timeouts of its own: a
 * job of many processes on a loaded machine may take long), at most the
 * first; without a pidfd to see it end, at most the second. */
#define RESUME_CAP_NS (120ull * 1000000000ull)
#define RESUME_BASE_NS (10ull * 1000000000ull)

/* In the writer: 1 once the program runs again, 0 if it ended or the wait
 * was too long (the writer goes on: only its pause is then unknown). */
static int wait_resumed(long step_ns)
{
    long pfd = lz_sc2(SYS_pidfd_open, rt.pid, 0);
    uint64_t t0 = rt_now_ns(CLOCK_MONOTONIC), cap = pfd >= 0 ? RESUME_CAP_NS : RESUME_BASE_NS;
    int resumed;
    while (!(resumed = rt_map_pause() != 0) && rt_now_ns(CLOCK_MONOTONIC) - t0 < cap) {
        struct timespec w = {0, step_ns};
        struct pollfd p = {(int)pfd, POLLIN, 0};
        if (pfd < 0) lz_sc2(SYS_nanosleep, &w, 0);
        else if (lz_sc5(SYS_ppoll, &p, 1, &w, 0, LZ_KSIGSET_SIZE) > 0) break; /* it ended */
    }
    if (pfd >= 0) lz_sc1(SYS_close, pfd);
    return resumed;
}

int rt_result(struct rt_ckpt *ck, int rc, char *msg, size_t len)
{
    int n = rc == 0 ? rt_fmt(msg, len, "OK %llu %llu %llu %llu %llu %llu %llu", (unsigned long long)ck->index,
                             (unsigned long long)rt_pause_ns(ck), (unsigned long long)ck->mem_bytes,
                             (unsigned long long)ck->changed_bytes, (unsigned long long)ck->stored_bytes,
                             (unsigned long long)ck->durable_ns, (unsigned long long)ck->nthreads)
                    : rt_fmt(msg, len, "ERR %llu %s", (unsigned long long)ck->index, ck->err);
    return n > (int)len - 1 ? (int)len - 1 : n;
}

uint64_t rt_pause_ns(struct rt_ckpt *ck)
{
    if (!ck->in_child) return rt_now_ns(CLOCK_MONOTONIC) - ck->t0; /* written in the pause: all of it is pause */
    /* the program tells its pause once the job runs again */
    return wait_resumed(1000000) ? rt_map_pause() : 0;
}

/* Memory the child would not get (MADV_DONTFORK) or would see as zeros
 * (MADV_WIPEONFORK) is inherited normally for the duration of the fork. */
static void fork_advice(struct rt_ckpt *ck, int before)
{
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        uint64_t len = r->end - r->start;
        if (r->flags & LZ_RF_DONTFORK) lz_sc3(SYS_madvise, r->start, len, before ? MADV_DOFORK : MADV_DONTFORK);
        if ((r->flags & (LZ_RF_WIPEONFORK | LZ_RF_DROPPABLE)) == LZ_RF_WIPEONFORK) lz_sc3(SYS_madvise, r->start, len, before ? MADV_KEEPONFORK : MADV_WIPEONFORK);
    }
}

long rt_clone_call(unsigned long flags, void *stack_top, void (*fn)(void *), void *arg);

/* The writer's side thread (a bare CLONE_THREAD, system calls only): reads
 * smaps while the writer stores pages, then registers the program's large
 * new mappings for tracking (the walk over all their pages). */
struct side { struct rt_ckpt *ck; int uffd; volatile uint32_t done; };

static void track_late_parent(struct rt_ckpt *ck, int uffd)
{
    for (size_t i = 0; i < ck->nregions; i++)
        if (ck->rdirty[i].late) rt_dirty_track_parent(uffd, ck->regions[i].start, ck->regions[i].end);
}

static void side_main(void *arg)
{
    struct side *sd = arg;
    rt_flags_read(sd->ck);
    __atomic_store_n(&sd->ck->side_busy, 0, __ATOMIC_RELEASE);
    rt_futex_wake(&sd->ck->side_busy);
    if (sd->uffd >= 0) track_late_parent(sd->ck, sd->uffd);
    __atomic_store_n(&sd->done, 1, __ATOMIC_RELEASE);
    rt_futex_wake(&sd->done);
}

static void writer_main(struct rt_ckpt *ck, int out)
{
    lz_sc2(SYS_prctl, PR_SET_NAME, "lazarus-writer");
    int late = 0;
    for (size_t i = 0; i < ck->nregions; i++) late |= ck->rdirty[i].late;
    /* keep nothing of the program's open: a pipe it writes must see its
     * reader's end-of-file when the program closes it, not when we are done.
     * Only the program's userfaultfd stays if its large new mappings are to
     * be tracked. */
    int hi = (int)lz_sc3(SYS_fcntl, out, F_DUPFD_CLOEXEC, RT_HIGH_FD); /* (its own descriptor table: a copy) */
    int uffd = late && !ck->planned ? rt_dirty_keep_parent_uffd(hi >= 0 ? hi + 1 : 3) : -1;
    if (hi >= 0) {
        if (rt.tracing) lz_sc3(SYS_close_range, 0, 1, 0); /* LAZARUS_TRACE: stderr stays */
        lz_sc3(SYS_close_range, rt.tracing ? 3 : 0, (unsigned)hi - 1, 0);
        if (uffd > hi + 1) lz_sc3(SYS_close_range, (unsigned)hi + 1, (unsigned)uffd - 1, 0);
        lz_sc3(SYS_close_range, (unsigned)(uffd > hi ? uffd : hi) + 1, ~0u, 0);
        out = hi;
    }
    if (!ck->planned) rt_dirty_forget(); /* its descriptors were the parent's, and are closed (a
                                          * copy-mode writer shares the parent's memory: hands off) */
    ck->in_child = 1;
    /* The job's other processes are still being captured, on the same CPUs:
     * the heavy work (hashing, compressing, writing) starts once the job
     * runs again (the program sets its pause in the map after RESUME, or
     * after ABORT).  A process alone waits only for one round trip. */
    wait_resumed(200000);
    /* smaps and the tracking walk beside the writing, on a thread of our own */
    struct side *sd = arena_alloc(&ck->arena, sizeof *sd);
    char *stack = arena_alloc(&ck->arena, 64u << 10);
    int side = 0;
    if (sd && stack && (rt_flags_prepare(ck) || uffd >= 0)) {
        *sd = (struct side){ck, uffd, 0};
        ck->side_busy = 1;
        side = rt_clone_call(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM,
                             stack + (64u << 10), side_main, sd) > 0;
        if (!side) ck->side_busy = 0; /* read in turn, then */
    }
    char msg[700];
    int n = rt_result(ck, rt_finish_checkpoint(ck), msg, sizeof msg);
    lz_sc3(SYS_write, out, msg, n);
    /* the supervisor starts the next checkpoint only once we are gone: the
     * new mappings are tracked by then */
    if (side) {
        while (!__atomic_load_n(&sd->done, __ATOMIC_ACQUIRE)) rt_futex_wait(&sd->done, 0);
    } else if (uffd >= 0) {
        track_late_parent(ck, uffd);
    }
    rt_trace(ck->t0, "writer", "done");
}

/* The copy-mode writer shares the program's memory: it reads only what the
 * pause copied into the arena, and the shared map. */
static void shared_writer(void *arg)
{
    struct rt_ckpt *ck = arg;
    writer_main(ck, ck->writer_fd);
}

/* A writer for a process other than the job's main program cannot be its
 * parent's child (CLONE_PARENT): that parent is part of the job and would
 * wait() for it.  A short-lived middle child sharing our memory starts it
 * and exits at once, so the writer is orphaned to the supervisor (a child
 * subreaper) or to the restart's PID-namespace init; the middle child has no
 * exit signal and is reaped here, unseen by the program. */
struct middle { struct rt_ckpt *ck; int out; long pid; };

static long start_writer(struct rt_ckpt *ck, int out, unsigned long parent_flag)
{
    if (ck->planned) {
        char *stack = arena_alloc(&ck->arena, 256u << 10);
        ck->writer_fd = out;
        return stack ? rt_clone_call(CLONE_VM | parent_flag | SIGCHLD, stack + (256u << 10), shared_writer, ck) : -ENOMEM;
    }
    long pid = lz_sc5(SYS_clone, parent_flag | SIGCHLD, 0, 0, 0, 0);
    if (pid == 0) {
        writer_main(ck, out);
        lz_sc1(SYS_exit_group, 0);
    }
    return pid;
}

static void middle_main(void *arg)
{
    struct middle *m = arg;
    m->pid = start_writer(m->ck, m->out, 0);
}

int rt_fork_writer(struct rt_ckpt *ck)
{
    if (rt.nofork) return 0;
    int p[2];
    if (lz_sc2(SYS_pipe2, p, O_CLOEXEC) < 0) return 0;
    /* the writer starts with every signal blocked: it runs none of the program's handlers */
    uint64_t all = ~0ull, old;
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &all, &old, LZ_KSIGSET_SIZE);
    if (!ck->planned) fork_advice(ck, 1);
    long pid;
    if (rt_is_main()) {
        pid = start_writer(ck, p[1], CLONE_PARENT);
    } else {
        struct middle *m = arena_alloc(&ck->arena, sizeof *m);
        char *stack = arena_alloc(&ck->arena, 64u << 10);
        pid = -ENOMEM;
        if (m && stack) {
            *m = (struct middle){ck, p[1], -ECHILD};
            long mid = rt_clone_call(CLONE_VM | CLONE_VFORK, stack + (64u << 10), middle_main, m);
            if (mid > 0) {
                long r;
                do r = lz_sc4(SYS_wait4, mid, 0, __WALL, 0);
                while (r == -EINTR);
                pid = m->pid;
            } else {
                pid = mid;
            }
        }
    }
    if (!ck->planned) fork_advice(ck, 0);
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, LZ_KSIGSET_SIZE);
    lz_sc1(SYS_close, p[1]);
    if (pid < 0) { lz_sc1(SYS_close, p[0]); return 0; }
    char msg[64];
    int n = rt_fmt(msg, sizeof msg, "FORKED %llu %llu", (unsigned long long)ck->index, (unsigned long long)(rt_now_ns(CLOCK_MONOTONIC) - ck->t0));
    if (rt_send_fd(rt.ctl_fd, p[0], msg, (size_t)n) < 0) {
        /* the supervisor will not hear from the writer: wait for it here */
        char buf[700];
        long r;
        do r = lz_sc3(SYS_read, p[0], buf, sizeof buf - 1);
        while (r == -EINTR);
        if (r > 0) { buf[r] = 0; rt_notify("%s", buf); }
    }
    lz_sc1(SYS_close, p[0]);
    return 1;
}
