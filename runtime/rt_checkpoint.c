/* The checkpoint signal handler: capture, save the resume point, write,
 * commit, report.  A restart comes back out of lz_save_context() here. */
#include "rt.h"
#include "rt_api.h"
#include "rt_exclude.h"
#include "rt_map.h"
#include <errno.h>
#include <linux/kcmp.h>
#include <string.h>
#include <sys/mman.h>

#define ARENA_BYTES (1ull << 30) /* reserved, not committed */

void rt_chain_program_signal(int sig, siginfo_t *si, void *uc);

/* LAZARUS_TRACE=1: the steps of the pause ("checkpoint") and of the writer
 * ("writer") on stderr, in ms since the pause began */
void rt_trace(uint64_t t0, const char *who, const char *step)
{
    if (!rt.tracing) return;
    char buf[128];
    int n = rt_fmt(buf, sizeof buf, "lazarus: %s %8.3f ms %s\n", who, (double)(rt_now_ns(CLOCK_MONOTONIC) - t0) / 1e6, step);
    lz_sc3(SYS_write, 2, buf, n);
}

static void trace(uint64_t t0, const char *step) { rt_trace(t0, "checkpoint", step); }

/* A failure before the copy, or an abort: nothing of N is left but what
 * rt_begin_checkpoint started (the journal, which the supervisor keeps). */
static void do_checkpoint(uint64_t index, uint32_t trigger, void *uc)
{
    /* A vfork child between vfork and exec runs on its parent's memory
     * (make, gcc's driver): it must touch nothing; the program it execs
     * answers the supervisor's next request. */
    long self = lz_sc0(SYS_getpid);
    if (self != rt.pid && lz_sc5(SYS_kcmp, self, rt.pid, KCMP_VM, 0, 0) == 0) return;
    if (index <= rt.last_index) return; /* asked again while we took part already */
    rt.last_index = index;
    rt.pid = (int)lz_sc0(SYS_getpid); /* (a child made without fork() has its parent's) */
    uint64_t t0 = rt_now_ns(CLOCK_MONOTONIC);
    rt_own_channel();
    rt_notify("BEGIN %llu", (unsigned long long)index);
    long a = lz_sc6(SYS_mmap, 0, ARENA_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if ((a < 0 && a >= -LZ_MAX_ERRNO) || rt_map_init() < 0) {
        rt_notify("ERR %llu cannot reserve scratch memory for the checkpoint", (unsigned long long)index);
        if (!(a < 0 && a >= -LZ_MAX_ERRNO)) lz_sc2(SYS_munmap, a, ARENA_BYTES);
        return;
    }
    /* flags of its own, so the kernel never merges it with a neighbour of the program's
     * (a thread's malloc heap above it): the capture skips it by its bounds (rt_regions.c) */
    lz_sc3(SYS_madvise, a, ARENA_BYTES, MADV_NOHUGEPAGE);
    rt_map_settle(rt.dir); /* learn how the previous write ended */
    /* in the arena: a writer sharing our memory reads it after we return */
    struct rt_arena arena = {(char *)a, ARENA_BYTES, 0};
    struct rt_ckpt *ck = arena_alloc(&arena, sizeof *ck);
    memset(ck, 0, sizeof *ck);
    ck->arena = arena;
    ck->index = index;
    ck->trigger = trigger;
    rt.last_ckpt_ns = t0; /* lazarus_checkpoint_here()'s mintime counts from here, whatever the trigger */
    ck->t0 = t0;
    ck->codec = rt.codec;
    ck->level = rt.level;
    ck->proc = arena_alloc(&ck->arena, sizeof *ck->proc);
    ck->strings.cap = 1u << 20;
    ck->strings.buf = arena_alloc(&ck->arena, ck->strings.cap);
    ck->strings.buf[0] = 0;
    ck->strings.len = 1;
    /* no thread stops while one is in a lazarus_disable() section (rt_disable.c);
     * the pause begins once none is */
    int rc = rt_disable_wait(ck), aborted = 0;
    if (rc > 0) ck->t0 = rt.last_ckpt_ns = t0 = rt_now_ns(CLOCK_MONOTONIC);
    if (rc >= 0) rc = rt_threads_stop(ck);
    /* where the program's own registers are: the signal frame this handler got */
    if (rc == 0) ck->ckpt_thread->ucontext = (uint64_t)(uintptr_t)uc;
    trace(t0, "threads stopped");
    /* every process of the job stops before any is captured (rt_job.c) */
    if (rc == 0) {
        rt_notify("STOPPED %llu %d", (unsigned long long)index, (int)lz_sc0(SYS_getpid));
        aborted = !rt_job_wait(index, "GO", NULL);
        trace(t0, "the job is stopped");
    }
    if (rc == 0 && !aborted) rc = rt_capture_proc(ck, uc);
    if (rc == 0 && !aborted) rc = rt_capture_fds(ck);
    trace(t0, "process and descriptors");
    if (rc == 0 && !aborted) rc = rt_capture_regions(ck);
    trace(t0, "regions");
    if (rc == 0 && !aborted) rc = rt_capture_ipc(ck);
    if (rc == 0 && !aborted && ck->strings.overflow) {
        rt_fmt(ck->err, sizeof ck->err, "the program's paths (files, mappings) exceed the checkpoint's string table");
        rc = -1;
    }
    if (rc == 0 && !aborted) rc = rt_begin_checkpoint(ck);
    trace(t0, "directory and file journal");
    int forked = 0;
    /* the C API's caller waits for the result anyway: written in the pause;
     * lazarus_checkpoint_here()'s goes on once taken (rt_here.c) */
    int here = trigger == LZ_TRIG_API && rt.api_waiting && rt.api_here;
    int may_fork = trigger != LZ_TRIG_API || here;
    if (rc == 0 && !aborted) {
        if (lz_save_context(&ck->ckpt_thread->ctx) != 0) {
            /* We are the restored program: `ck` and the arena are gone. */
            rt_resume(NULL);
            return;
        }
        /* last, so that nothing the program wrote before the copy is missed */
        rc = rt_scan_dirty(ck);
        if (rc == 0) rt_excl_pause(ck);
        trace(t0, "dirty pages");
        /* little changed: copy it rather than fork (C API checkpoints write in the pause anyway) */
        if (rc == 0 && may_fork && !rt.nofork && rt_plan_copy(ck) < 0) rc = -1;
        if (ck->planned) trace(t0, "changed pages copied");
        if (rc != 0) rt_map_untrack();
        if (rc == 0) {
            rt_map_started(index);
            /* a C API checkpoint is written in the pause (but lazarus_checkpoint_here's) */
            forked = may_fork && rt_fork_writer(ck);
            rt_track_late(ck, forked && !ck->planned);
            if (!forked) rc = rt_finish_checkpoint(ck);
        }
    }
    if (!aborted && !forked) { /* else the writer reports */
        char msg[700];
        rt_result(ck, rc, msg, sizeof msg);
        rt_notify("%s", msg);
    }
    /* the job runs again once every process is captured (for the C API: once
     * the checkpoint is committed, which RESUME's argument says) */
    long committed = 0;
    if (rc == 0 && !aborted && !rt_job_wait(index, "RESUME", &committed)) rc = -1;
    ck->pause_ns = rt_now_ns(CLOCK_MONOTONIC) - t0;
    if (forked) rt_map_set_pause(ck->pause_ns);
    rt_threads_release(); /* the snapshot is taken (or failed) */
    trace(t0, forked ? "forked" : aborted ? "aborted" : "written");
    rt_api_taken(index, rc == 0 && !aborted, aborted ? "" : ck->err);
    rt_hooks_after(index); /* before a C API caller may look (rt_api_checkpoint) */
    if (trigger == LZ_TRIG_API) {
        rt.api_index = index;
        rt.api_result = rc == 0 && !aborted && (committed || here) ? 1 : -1; /* HERE: taken, being written */
        rt.api_done = 1;
        rt_futex_wake_all((volatile uint32_t *)&rt.api_done); /* its caller, if another thread */
    }
    if (forked && ck->planned) rt_map_keep_arena(ck->arena.base, ck->arena.cap);
    else lz_sc2(SYS_munmap, ck->arena.base, ck->arena.cap);
}

/* The checkpoint signal with value v queued to this thread, as the
 * supervisor's request comes (SI_QUEUE). */
void rt_requeue_to_self(uint64_t v)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = LZ_SIGCKPT;
    si.si_code = SI_QUEUE;
    si.si_pid = (pid_t)lz_sc0(SYS_getpid);
    si.si_uid = (uid_t)lz_sc0(SYS_getuid);
    si.si_value.sival_ptr = (void *)v;
    lz_sc4(SYS_rt_tgsigqueueinfo, si.si_pid, lz_sc0(SYS_gettid), LZ_SIGCKPT, &si);
}

/* A checkpoint, or a request to stop, that came during a call the checkpoint
 * must not cut in two, now that the call is done. */
void rt_redeliver_checkpoint(void)
{
    uint64_t v = rt_self.ckpt_deferred ? rt_self.ckpt_value : rt_self.stop_value;
    rt_self.ckpt_deferred = rt_self.stop_deferred = 0; /* a thread running a checkpoint stops no more */
    rt_requeue_to_self(v);
}

void rt_checkpoint_handler(int sig, siginfo_t *si, void *uc)
{
    int saved_errno = errno;
    rt_self.hidden_in = rt_now_ns(CLOCK_MONOTONIC);
    uint64_t v = (uint64_t)si->si_value.sival_ptr;
    if (rt_watch_is_ours(si)) {
        rt_watch_check(); /* a message (for rt_job_wait), or the supervisor is gone */
    } else if (!rt.active || si->si_code != SI_QUEUE || v == 0) {
        rt_chain_program_signal(sig, si, uc);
    } else if (v & RT_STOP_VALUE) {
        if (si->si_pid != lz_sc0(SYS_getpid)) rt_chain_program_signal(sig, si, uc);
        else if (rt_self.busy) { rt_self.stop_value = v; rt_self.stop_deferred = 1; }
        else rt_thread_stopped((uint32_t)v, uc);
    } else if (rt_self.busy) {
        rt_self.ckpt_value = v;
        rt_self.ckpt_deferred = 1;
        rt_disable_held(v >> 2); /* in a lazarus_disable() section: the supervisor is told */
    } else if (rt_hooks_hold(v)) {
        /* the program's before-checkpoint hooks run first (rt_api_hooks.c) */
    } else {
        uint32_t restarts = rt_api_restarts();
        do_checkpoint(v >> 2, (uint32_t)(v & 3), uc);
        if (rt_api_restarts() == restarts) rt_hooks_after(v >> 2); /* also when it ended early */
        rt_watch_check(); /* its end may have come while the signal was blocked here */
    }
    /* a call this run interrupted goes on without the time spent here (rt_calls.c); after a
     * restart hidden_in is of the old run: the downtime is taken off as well */
    rt_self.hidden_ns += rt_now_ns(CLOCK_MONOTONIC) - rt_self.hidden_in;
    rt_self.rt_runs++;
    errno = saved_errno;
}
