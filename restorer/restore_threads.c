/* Every thread of the program, recreated with its TID (clone3 set_tid): each
 * sets its own kernel-side state (TLS base, rseq, robust list, clear-tid
 * address, name, its own pending signals, mask), then all jump back into the
 * runtime's checkpoint handler at once (the alternate signal stack and the
 * program's mask come back with rt_sigreturn, from the signal frame).  The
 * restorer's own thread becomes the main thread.  From restore_mm() on
 * nothing here may use libc: the threads run without a TLS of their own. */
#include "restorer.h"
#include "lzsys.h"
#include "util.h"
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/time.h>

#define THREAD_STACK (8u << 10) /* raw system calls only; 4096 threads fit the heap room the layout check leaves */

long lz_clone3_call(struct clone_args *args, size_t size, void (*fn)(void *), void *arg);

static const struct lz_proc *proc;
static const struct lz_siginfo_rec *sigq; /* pending signals past proc->pending's */
static size_t nsigq;
static int drop_caps; /* capabilities kept only to set TIDs (cli/pidns.c): none reach the program */
static char *stacks;
static volatile uint32_t ready, go;

void restore_threads_prepare(struct restore_ctx *rc, int caps_to_drop)
{
    proc = rc->img.proc;
    sigq = rc->img.sigq;
    nsigq = rc->img.nsigq;
    drop_caps = caps_to_drop;
    if (rc->img.nthreads > 1) {
        stacks = malloc((rc->img.nthreads - 1) * (size_t)THREAD_STACK);
        if (!stacks) restore_fail("out of memory for %zu threads", rc->img.nthreads);
    }
}

/* Capabilities are per thread: each drops its own. */
static void drop_capabilities(void)
{
    if (!drop_caps) return;
    struct { uint32_t version; int pid; } h = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
    uint32_t d[6] = {0};
    lz_sc2(SYS_capset, &h, d);
}

/* The signals pending for thread `for_tid` (0: for the process) of the
 * image, in the order they were taken (proc->pending, then the SIGQUEUE
 * section's): queued again, to thread tid or to the process. */
static void queue_pending(int32_t for_tid, long pid, long tid)
{
    for (size_t i = 0; i < proc->npending + nsigq; i++) {
        const struct lz_siginfo_rec *r = i < proc->npending ? &proc->pending[i] : &sigq[i - proc->npending];
        if (r->tid != for_tid) continue;
        if (for_tid) lz_sc4(SYS_rt_tgsigqueueinfo, pid, tid, r->signo, r->info);
        else lz_sc3(SYS_rt_sigqueueinfo, pid, r->signo, r->info);
    }
}

static void thread_state(const struct lz_thread *t, long pid, long tid)
{
    drop_capabilities();
    if (t->rseq_addr) lz_sc4(SYS_rseq, t->rseq_addr, t->rseq_len, 0, t->rseq_sig);
    if (t->robust_list) lz_sc2(SYS_set_robust_list, t->robust_list, t->robust_len);
    if (t->tid_address) lz_sc1(SYS_set_tid_address, t->tid_address);
    lz_sc2(SYS_prctl, PR_SET_NAME, t->comm);
    queue_pending(t->tid, pid, tid);
    uint64_t mask = t->handler_sigmask;
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, LZ_KSIGSET_SIZE);
}

static void futex_wait(volatile uint32_t *w, uint32_t seen) { lz_sc4(SYS_futex, w, FUTEX_WAIT_PRIVATE, seen, 0); }
static void futex_wake(volatile uint32_t *w) { lz_sc3(SYS_futex, w, FUTEX_WAKE_PRIVATE, INT_MAX /* every waiter */); }

static _Noreturn void thread_main(void *arg)
{
    const struct lz_thread *t = arg;
    thread_state(t, lz_sc0(SYS_getpid), lz_sc0(SYS_gettid));
    __atomic_fetch_add(&ready, 1, __ATOMIC_RELEASE);
    futex_wake(&ready);
    while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE)) futex_wait(&go, 0);
    lz_final_jump(&t->ctx, t->fs_base);
}

_Noreturn void restore_threads_and_jump(struct restore_ctx *rc)
{
    const struct lz_image *img = &rc->img;
    long pid = lz_sc0(SYS_getpid);
    uint32_t started = 0;
    for (size_t i = 1; i < img->nthreads; i++) {
        const struct lz_thread *t = &img->threads[i];
        struct clone_args a;
        memset(&a, 0, sizeof a);
        a.flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM;
        a.stack = (uint64_t)(uintptr_t)(stacks + (i - 1) * (size_t)THREAD_STACK);
        a.stack_size = THREAD_STACK;
        pid_t want = t->tid;
        a.set_tid = (uint64_t)(uintptr_t)&want;
        a.set_tid_size = 1;
        long r = lz_clone3_call(&a, sizeof a, thread_main, (void *)t);
        if (r == -EEXIST || r == -EPERM || r == -EINVAL) {
            /* like the PID (cli/pidns.c): a warning, and the thread runs on with a new TID */
            lz_warn("cannot restore thread ID %d (%s): the thread gets a new one", t->tid, strerror((int)-r));
            a.set_tid = 0;
            a.set_tid_size = 0;
            r = lz_clone3_call(&a, sizeof a, thread_main, (void *)t);
        }
        if (r < 0) restore_fail("cannot recreate thread %d: %s", t->tid, strerror((int)-r));
        started++;
    }
    while (__atomic_load_n(&ready, __ATOMIC_ACQUIRE) < started) futex_wait(&ready, ready);
    restore_timers(img); /* a timer may signal any of the threads */
    restore_tree_go(); /* a job of several processes: all at once, or none */
    /* the process's own: timers, signals pending for any thread */
    const struct lz_proc *p = proc;
    for (int w = 0; w < 3; w++) {
        struct itimerval it;
        it.it_interval.tv_sec = p->itimers[w].interval_us / 1000000;
        it.it_interval.tv_usec = p->itimers[w].interval_us % 1000000;
        it.it_value.tv_sec = p->itimers[w].value_us / 1000000;
        it.it_value.tv_usec = p->itimers[w].value_us % 1000000;
        if (it.it_value.tv_sec || it.it_value.tv_usec) lz_sc3(SYS_setitimer, w, &it, NULL);
    }
    queue_pending(0, pid, pid);
    const struct lz_thread *main_thread = &img->threads[0];
    thread_state(main_thread, pid, pid);
    struct lz_jmpctx jc = main_thread->ctx;
    uint64_t fs = main_thread->fs_base;
    __atomic_store_n(&go, 1, __ATOMIC_RELEASE);
    futex_wake(&go);
    lz_final_jump(&jc, fs);
}
