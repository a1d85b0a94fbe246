/* Every thread of the program in one checkpoint.  The thread that takes the
 * checkpoint signal (the "checkpointing thread") asks each other thread, by a
 * thread-directed SIGURG, to stop inside the same handler.  There a thread
 * records its own kernel-side state (struct lz_thread) and its resume point,
 * counts itself in and waits on a futex; its registers and the program's
 * signal mask are in the signal frame on its stack, part of the image.  The
 * snapshot is taken once all have stopped, and they are let go after it.
 *
 * A thread inside a call that must not be cut in two (rt_enter) stops when
 * the call is done.  A thread that does not stop in time fails that
 * checkpoint with its name, never a partial one: in time is 10 s, or, for a
 * thread still making progress (runnable on a busy machine, in a long call:
 * common/progress.h), up to 2 minutes; one that blocks SIGURG with a raw
 * system call, or sleeps in a file call that does not return, gets 10 s.
 *
 * After a restart the restorer recreates every thread with its TID and jumps
 * into lz_save_context()'s second return; each waits there until the
 * checkpointing thread has unmapped the restorer and rejoined the supervisor
 * (rt_threads_landed, rt_threads_go). */
#include "rt.h"
#include "rt_api.h"
#include "progress.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/rseq.h>
#include <asm/prctl.h>

__thread struct rt_self rt_self __attribute__((tls_model("initial-exec")));

#define STOP_BASE_NS (10ull * 1000000000ull)
#define STOP_CAP_NS (120ull * 1000000000ull)
/* A thread seen blocking SIGURG, and not running nor waiting for a CPU, at every look for
 * this long cannot stop: it is named at once.  libc blocks every signal for moments of its
 * own (a thread's creation, fork, posix_spawn until the child execs), which this outlasts;
 * a new thread not yet scheduled on a busy machine is runnable, and one computing with
 * SIGURG blocked gets the patience of the others. */
#define BLOCKED_NS (500ull * 1000000ull)

static struct {
    volatile uint32_t stopping;  /* a round is under way: threads asked to stop join it */
    volatile uint32_t round;     /* number of the round */
    volatile uint32_t released;  /* futex: the last round whose threads may go */
    volatile uint32_t arrived;   /* futex: threads stopped in this round */
    volatile uint32_t expect;    /* the count the checkpointing thread waits for: woken only then */
    volatile uint32_t nslots;    /* records handed out in ck->threads */
    struct rt_ckpt *volatile ck;
    /* after a restart: */
    volatile uint32_t landed;    /* futex: restored threads back in the runtime's code */
    uint32_t nstopped;           /* threads that were stopped when the snapshot was taken */
    volatile uint32_t go;        /* futex: bumped when a restarted runtime lets its threads run */
} T;

/* "SigPnd:" and "ShdPnd:" of /proc/thread-self/status: this thread's own
 * pending signals and the process's. */
static void read_pending(uint64_t *own, uint64_t *shared)
{
    char buf[4096];
    long n = rt_read_file("/proc/thread-self/status", buf, sizeof buf - 1);
    *own = *shared = 0;
    if (n <= 0) return;
    buf[n] = 0;
    for (char *l = buf; *l;) {
        uint64_t *dst = !memcmp(l, "SigPnd:", 7) ? own : !memcmp(l, "ShdPnd:", 7) ? shared : NULL;
        if (dst) {
            char *s = l + 7;
            while (*s == ' ' || *s == '\t') s++;
            uint64_t v = 0;
            for (;; s++) {
                int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;
                if (d < 0) break;
                v = v << 4 | (uint64_t)d;
            }
            *dst = v;
        }
        while (*l && *l != '\n') l++;
        if (*l) l++;
    }
}

/* Dequeues the signals in `set` (own ones first: the kernel takes a thread's
 * own queue before the process's) to learn their siginfo; `shared` chooses
 * which queue the records describe.  Queued again by the caller. */
static void take_pending(uint64_t set, int shared, int32_t tid, struct lz_siginfo_rec *pend, uint32_t *npend, uint32_t max,
                         uint32_t *full)
{
    for (int sig = 1; sig <= LZ_NSIG; sig++) {
        if (!(set & (1ull << (sig - 1)))) continue;
        for (;;) {
            struct lz_siginfo_rec r;
            memset(&r, 0, sizeof r);
            uint64_t one = 1ull << (sig - 1);
            struct timespec zero = {0, 0};
            if (lz_sc4(SYS_rt_sigtimedwait, &one, r.info, &zero, 8) != sig) break;
            r.signo = sig;
            r.tid = shared ? 0 : tid;
            uint32_t k = __atomic_fetch_add(npend, 1, __ATOMIC_RELAXED);
            if (k < max) pend[k] = r;
            else { /* no room: queued again at once, not recorded (the checkpoint fails) */
                __atomic_fetch_sub(npend, 1, __ATOMIC_RELAXED);
                __atomic_store_n(full, 1, __ATOMIC_RELAXED);
                lz_sc4(SYS_rt_tgsigqueueinfo, lz_sc0(SYS_getpid), lz_sc0(SYS_gettid), sig, r.info);
                return;
            }
            if (sig < LZ_KSIGRTMIN) break; /* standard signals do not queue */
            uint64_t own, sh;
            read_pending(&own, &sh);
            if (!((shared ? sh : own) & one)) break;
        }
    }
}

/* One thread's kernel-side state.  Its own pending signals (and, with_shared,
 * the process's) are recorded in ck->sigq and queued again at once. */
static void thread_capture(struct lz_thread *t, struct rt_ckpt *ck, int with_shared)
{
    struct lz_siginfo_rec *pend = ck->sigq;
    uint32_t *npend = &ck->nsigq, max = LZ_MAX_SIGQUEUE;
    memset(t, 0, sizeof *t);
    t->tid = (int32_t)lz_sc0(SYS_gettid);
    lz_sc2(SYS_prctl, PR_GET_NAME, t->comm);
    lz_sc2(SYS_arch_prctl, ARCH_GET_FS, &t->fs_base);
    lz_sc2(SYS_arch_prctl, ARCH_GET_GS, &t->gs_base);
    if (__rseq_size > 0) {
        t->rseq_addr = t->fs_base + (uint64_t)__rseq_offset;
        t->rseq_sig = RSEQ_SIG;
        /* Registering again tells us the registered length: -EBUSY = same. */
        uint32_t lens[2] = {LZ_RSEQ_ORIG_LEN, __rseq_size};
        for (int i = 0; i < 2 && !t->rseq_len; i++)
            if (lz_sc4(SYS_rseq, t->rseq_addr, lens[i], 0, RSEQ_SIG) == -EBUSY) t->rseq_len = lens[i];
        if (!t->rseq_len) t->rseq_addr = 0; /* not registered (e.g. glibc.pthread.rseq=0) */
    }
    lz_sc3(SYS_get_robust_list, 0, &t->robust_list, &t->robust_len);
    lz_sc2(SYS_prctl, PR_GET_TID_ADDRESS, &t->tid_address);
    stack_t ss;
    lz_sc2(SYS_sigaltstack, NULL, &ss);
    t->altstack_sp = (uint64_t)ss.ss_sp;
    t->altstack_size = ss.ss_size;
    t->altstack_flags = ss.ss_flags & ~SS_ONSTACK;
    lz_sc4(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &t->handler_sigmask, LZ_KSIGSET_SIZE);
    /* Pending signals: dequeued for their siginfo and queued again at once
     * (all blocked here), so the running program sees no difference.  The
     * process's are queued again to the process, or, where the kernel refuses
     * (a siginfo of the kernel's or of kill(), from a thread that is not the
     * main one), to this thread: a thread may queue any siginfo to itself. */
    uint64_t pend_now = 0, urg = 1ull << (LZ_SIGCKPT - 1);
    lz_sc2(SYS_rt_sigpending, &pend_now, LZ_KSIGSET_SIZE);
    if (!(pend_now & ~urg)) return;
    uint64_t own, shared;
    read_pending(&own, &shared);
    uint32_t first = *npend < max ? *npend : max;
    take_pending(own & ~urg, 0, t->tid, pend, npend, max, &ck->sigq_full);
    if (with_shared) take_pending(shared & ~urg, 1, t->tid, pend, npend, max, &ck->sigq_full);
    long pid = lz_sc0(SYS_getpid);
    uint32_t last = *npend < max ? *npend : max;
    for (uint32_t i = first; i < last; i++) {
        /* the process's go back to the process where the kernel lets us (any siginfo from the
         * main thread, a queued one from any): a thread that waits for it (sigwait) gets it */
        if (with_shared && pend[i].tid == 0 && lz_sc3(SYS_rt_sigqueueinfo, pid, pend[i].signo, pend[i].info) == 0) continue;
        if (pend[i].tid == t->tid || (with_shared && pend[i].tid == 0)) /* others may be adding theirs */
            lz_sc4(SYS_rt_tgsigqueueinfo, pid, t->tid, pend[i].signo, pend[i].info);
    }
}

/* A thread asked to stop: record, count in, wait to be let go.  uc is the
 * signal frame its handler got (the program's registers, for `show`). */
void rt_thread_stopped(uint32_t round, void *uc)
{
    /* late: that round is over (a request deferred by a long file call, say); counting it in
     * another round would let that round go on before a thread it asked has stopped */
    if (!__atomic_load_n(&T.stopping, __ATOMIC_ACQUIRE) || round != T.round) return;
    struct rt_ckpt *ck = T.ck;
    uint32_t k = __atomic_fetch_add(&T.nslots, 1, __ATOMIC_ACQ_REL);
    if (k < LZ_MAX_THREADS) {
        struct lz_thread *t = &ck->threads[k];
        thread_capture(t, ck, 0);
        t->ucontext = (uint64_t)(uintptr_t)uc;
        volatile uint32_t go = T.go;
        if (lz_save_context(&t->ctx) != 0) {
            /* restored: out of the restorer's code now; run once the runtime is back */
            __atomic_fetch_add(&T.landed, 1, __ATOMIC_RELEASE);
            rt_futex_wake_all(&T.landed);
            while (__atomic_load_n(&T.go, __ATOMIC_ACQUIRE) == go) rt_futex_wait_ns(&T.go, go, 1000000000ull);
            rt_hooks_gate_wait(); /* the after-restart hooks first */
            return;
        }
    }
    if (__atomic_add_fetch(&T.arrived, 1, __ATOMIC_SEQ_CST) >= __atomic_load_n(&T.expect, __ATOMIC_SEQ_CST))
        rt_futex_wake_all(&T.arrived); /* the last one: one wake-up, not one per thread */
    while (__atomic_load_n(&T.released, __ATOMIC_ACQUIRE) != round) rt_futex_wait_ns(&T.released, T.released, 1000000000ull);
}

/* The number in the last field of a "Name:\t..." line of a status file. */
static int32_t status_last(const char *buf, const char *name)
{
    size_t nl = rt_strlen(name);
    for (const char *l = buf; *l;) {
        if (!memcmp(l, name, nl)) {
            int32_t v = -1;
            for (const char *s = l + nl; *s && *s != '\n'; s++)
                if (*s >= '0' && *s <= '9') { v = 0; while (*s >= '0' && *s <= '9') v = v * 10 + (*s++ - '0'); s--; }
            return v;
        }
        while (*l && *l != '\n') l++;
        if (*l) l++;
    }
    return -1;
}

/* The program's threads, from /proc/self/task: their ids as the program sees
 * them (tids), and as that /proc names them (hosts).  After a restart in a
 * PID namespace of its own (an ordinary user's), /proc is still the outer
 * namespace's: its names are translated through NSpid. */
static long list_tasks(int32_t *tids, int32_t *hosts, long cap)
{
    char self[32];
    long sl = lz_sc4(SYS_readlinkat, AT_FDCWD, "/proc/self", self, sizeof self - 1);
    int32_t self_pid = 0;
    for (long i = 0; i < sl && self[i] >= '0' && self[i] <= '9'; i++) self_pid = self_pid * 10 + (self[i] - '0');
    int outer = self_pid != (int32_t)lz_sc0(SYS_getpid);
    long dfd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dfd < 0) return dfd;
    char buf[8192];
    long n, count = 0;
    while ((n = lz_sc3(SYS_getdents64, dfd, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; uint16_t reclen; uint8_t type; char name[]; } *d = (void *)(buf + off);
            off += d->reclen;
            int32_t v = 0;
            const char *s = d->name;
            if (*s < '0' || *s > '9') continue;
            while (*s >= '0' && *s <= '9') v = v * 10 + (*s++ - '0');
            int32_t tid = v;
            if (outer) {
                char path[64], st[2048];
                rt_fmt(path, sizeof path, "/proc/self/task/%d/status", v);
                long k = rt_read_file(path, st, sizeof st - 1);
                if (k <= 0) continue; /* gone */
                st[k] = 0;
                tid = status_last(st, "NSpid:");
                if (tid <= 0) continue;
            }
            if (count < cap) { tids[count] = tid; hosts[count] = v; }
            count++;
        }
    }
    lz_sc1(SYS_close, dfd);
    return n < 0 ? n : count;
}

static int stopped_already(const struct rt_ckpt *ck, int32_t tid)
{
    uint32_t n = __atomic_load_n(&T.nslots, __ATOMIC_ACQUIRE);
    for (uint32_t i = 0; i < n && i < LZ_MAX_THREADS; i++)
        if (ck->threads[i].tid == tid) return 1;
    return 0;
}

/* A thread that will never answer: gone, or a zombie (the main thread after
 * pthread_exit).  By its /proc name (list_tasks). */
static int task_state(int32_t tid)
{
    char path[64], buf[512];
    rt_fmt(path, sizeof path, "/proc/self/task/%d/stat", tid);
    long n = rt_read_file(path, buf, sizeof buf - 1);
    if (n <= 0) return 'X';
    buf[n] = 0;
    char *s = buf + n;
    while (s > buf && *s != ')') s--;
    return s[0] == ')' && s[1] == ' ' ? s[2] : '?';
}

static int fail_stop(struct rt_ckpt *ck, int32_t tid, int32_t host, const char *why)
{
    char path[64], comm[32] = "?";
    rt_fmt(path, sizeof path, "/proc/self/task/%d/comm", host);
    long n = rt_read_file(path, comm, sizeof comm - 1);
    if (n > 0) comm[n - (comm[n - 1] == '\n')] = 0;
    rt_fmt(ck->err, sizeof ck->err, "thread %d (%s) %s", tid, comm, why);
    rt_threads_release();
    return -1;
}

/* ck->err is set: let every stopped thread go. */
static int give_up(void)
{
    rt_threads_release();
    return -1;
}

int rt_threads_stop(struct rt_ckpt *ck)
{
    ck->threads = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *ck->threads);
    int32_t *asked = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *asked);
    int32_t *tids = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *tids);
    int32_t *hosts = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *hosts);
    int32_t *asked_host = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *asked_host);
    struct lz_patience *wait = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *wait);
    uint64_t *blocked_since = arena_alloc(&ck->arena, LZ_MAX_THREADS * sizeof *blocked_since); /* 0: not blocking */
    ck->sigq = arena_alloc(&ck->arena, LZ_MAX_SIGQUEUE * sizeof *ck->sigq); /* reserved: pages touched as used */
    ck->nsigq = ck->sigq_full = 0;
    if (!ck->sigq || !ck->threads || !asked || !tids || !hosts || !asked_host || !wait || !blocked_since) { rt_fmt(ck->err, sizeof ck->err, "out of scratch memory"); return -1; }
    long pid = lz_sc0(SYS_getpid), self = lz_sc0(SYS_gettid);
    T.ck = ck;
    T.nslots = 1; /* slot 0: this thread, filled last (with the process's pending signals) */
    T.arrived = 0;
    T.expect = 1; /* until the count is known, every arrival wakes us */
    T.round++;
    __atomic_store_n(&T.stopping, 1, __ATOMIC_RELEASE);
    long nasked = 0, gone = 0, n;
    for (;;) {
        n = list_tasks(tids, hosts, LZ_MAX_THREADS);
        if (n < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot list the program's threads (errno %ld)", -n); return give_up(); }
        if (n > LZ_MAX_THREADS) { rt_fmt(ck->err, sizeof ck->err, "the program has %ld threads; a checkpoint holds at most %d", n, LZ_MAX_THREADS); return give_up(); }
        long before = nasked;
        for (long i = 0; i < n; i++) {
            if (tids[i] == self) continue;
            int seen = 0;
            for (long j = 0; j < nasked && !seen; j++) seen = asked[j] == tids[i];
            if (seen) continue;
            siginfo_t si;
            memset(&si, 0, sizeof si);
            si.si_signo = LZ_SIGCKPT;
            si.si_code = SI_QUEUE;
            si.si_pid = (pid_t)pid;
            si.si_uid = (uid_t)lz_sc0(SYS_getuid);
            si.si_value.sival_ptr = (void *)(RT_STOP_VALUE | T.round);
            long r = lz_sc4(SYS_rt_tgsigqueueinfo, pid, tids[i], LZ_SIGCKPT, &si);
            if (r == -ESRCH) continue; /* it just exited */
            if (r < 0) return fail_stop(ck, tids[i], hosts[i], "cannot be asked to stop for the checkpoint");
            lz_patience_start(&wait[nasked], rt_now_ns(CLOCK_MONOTONIC), STOP_BASE_NS, STOP_CAP_NS);
            asked_host[nasked] = hosts[i];
            blocked_since[nasked] = 0;
            asked[nasked++] = tids[i];
        }
        if (nasked == before && __atomic_load_n(&T.arrived, __ATOMIC_ACQUIRE) + gone >= (uint32_t)nasked) break;
        /* wait for all asked to stop; those that exit meanwhile are not waited for */
        while (__atomic_load_n(&T.arrived, __ATOMIC_ACQUIRE) + gone < (uint32_t)nasked) {
            /* the arriving thread adds, then reads `expect`; we store `expect`, then read the
             * count: one of the two sees the other (sequentially consistent), so the last
             * arrival is never missed */
            __atomic_store_n(&T.expect, (uint32_t)(nasked - gone), __ATOMIC_SEQ_CST);
            uint32_t seen = __atomic_load_n(&T.arrived, __ATOMIC_SEQ_CST);
            if (seen + gone >= (uint32_t)nasked) break;
            rt_futex_wait_ns(&T.arrived, seen, 20000000ull);
            if (__atomic_load_n(&T.arrived, __ATOMIC_ACQUIRE) + gone >= (uint32_t)nasked) break;
            gone = 0;
            for (long j = 0; j < nasked; j++) {
                if (stopped_already(ck, asked[j])) continue;
                int st = task_state(asked_host[j]);
                if (st == 'Z' && asked[j] == pid)
                    return fail_stop(ck, asked[j], asked_host[j], "(the main thread) has exited while other threads run on; such a program cannot be checkpointed yet");
                if (st == 'X' || st == 'Z') gone++;
            }
            /* in time: while any thread not stopped yet makes progress */
            uint64_t now = rt_now_ns(CLOCK_MONOTONIC);
            long late = -1;
            int more = 0;
            for (long j = 0; j < nasked; j++) {
                if (stopped_already(ck, asked[j]) || task_state(asked_host[j]) == 'X') continue;
                int blocks = lz_task_blocks(0, asked_host[j], LZ_SIGCKPT), st = task_state(asked_host[j]);
                if (!blocks || st == 'R' || st == 'D') blocked_since[j] = 0;
                else if (!blocked_since[j]) blocked_since[j] = now;
                else if (now - blocked_since[j] >= BLOCKED_NS && !stopped_already(ck, asked[j]))
                {
                    char why[200], pcomm[32] = "?";
                    long k = rt_read_file("/proc/self/comm", pcomm, sizeof pcomm - 1);
                    if (k > 0) pcomm[k - (pcomm[k - 1] == '\n')] = 0;
                    rt_fmt(why, sizeof why, "of process %d (%s) blocks SIGURG, the checkpoint signal (SigBlk in its "
                           "/proc status: a raw rt_sigprocmask the runtime cannot see), so it cannot stop for the checkpoint",
                           (int)pid, pcomm);
                    return fail_stop(ck, asked[j], asked_host[j], why);
                }
                if (lz_patience_more(&wait[j], now, 0, asked_host[j], blocks)) more = 1;
                else if (late < 0) late = j;
            }
            if (late >= 0 && !more) {
                char why[200], how[80];
                if (lz_task_blocks(0, asked_host[late], LZ_SIGCKPT)) rt_fmt(how, sizeof how, "it blocks SIGURG");
                else lz_patience_why(&wait[late], now, how, sizeof how);
                rt_fmt(why, sizeof why, "did not stop for the checkpoint: waited %llu ms for it (%s)",
                       (unsigned long long)((now - wait[late].t0) / 1000000), how);
                return fail_stop(ck, asked[late], asked_host[late], why);
            }
        }
    }
    uint32_t nrec = __atomic_load_n(&T.nslots, __ATOMIC_ACQUIRE);
    if (nrec > LZ_MAX_THREADS) { rt_fmt(ck->err, sizeof ck->err, "the program has more than %d threads", LZ_MAX_THREADS); return give_up(); }
    /* this thread, with the process's pending signals */
    thread_capture(&ck->threads[0], ck, 1);
    if (ck->sigq_full) {
        rt_fmt(ck->err, sizeof ck->err, "more than %d signals are pending in the program (queued real-time signals): "
               "a checkpoint holds at most that many", LZ_MAX_SIGQUEUE);
        return give_up();
    }
    ck->proc->npending = ck->nsigq < LZ_MAX_PENDING ? ck->nsigq : LZ_MAX_PENDING;
    memcpy(ck->proc->pending, ck->sigq, ck->proc->npending * sizeof *ck->sigq);
    ck->threads[0].flags = LZ_TH_CKPT;
    /* the main thread first: the restorer's own thread becomes it */
    for (uint32_t i = 1; i < nrec; i++)
        if (ck->threads[i].tid == pid) {
            struct lz_thread tmp = ck->threads[0];
            ck->threads[0] = ck->threads[i];
            ck->threads[i] = tmp;
        }
    if (ck->threads[0].tid != pid) { rt_fmt(ck->err, sizeof ck->err, "the program's main thread did not stop for the checkpoint"); return give_up(); }
    for (uint32_t i = 0; i < nrec; i++)
        if (ck->threads[i].flags & LZ_TH_CKPT) ck->ckpt_thread = &ck->threads[i];
    ck->nthreads = nrec;
    /* what a restored runtime finds in its memory */
    T.landed = 0;
    T.nstopped = nrec - 1;
    return 0;
}

void rt_threads_release(void)
{
    rt_disable_release();
    if (!__atomic_load_n(&T.stopping, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&T.stopping, 0, __ATOMIC_RELEASE);
    __atomic_store_n(&T.released, T.round, __ATOMIC_RELEASE);
    rt_futex_wake_all(&T.released);
}

void rt_threads_landed(void)
{
    /* the restorer is unmapped next: every thread must be out of its code */
    while (__atomic_load_n(&T.landed, __ATOMIC_ACQUIRE) < T.nstopped)
        rt_futex_wait_ns(&T.landed, T.landed, 100000000ull);
    __atomic_store_n(&T.stopping, 0, __ATOMIC_RELEASE);
}

void rt_threads_go(void)
{
    __atomic_fetch_add(&T.go, 1, __ATOMIC_RELEASE);
    rt_futex_wake_all(&T.go);
}
