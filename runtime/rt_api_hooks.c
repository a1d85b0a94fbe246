/* lazarus_on(): the program's hooks, run before a checkpoint, after it, and
 * after a restart -- the place to close and reopen network connections.
 *
 * The checkpoint itself runs in a signal handler, with raw system calls and
 * every thread stopped: no hook can run there.  So the hooks run on a thread
 * of the runtime's own ("lazarus-hooks", made by the first lazarus_on()), as
 * normal functions that may call anything (malloc, connect, locks):
 *  - before: a checkpoint request reaching the process is held
 *    (rt_hooks_hold: nothing begins) while the hooks thread runs the
 *    before-hooks, the program's other threads running on; then the hooks
 *    thread sends the request to itself and takes the checkpoint;
 *  - after: once the checkpoint is over (taken or failed: what a before-hook
 *    closed is reopened either way) and every thread runs again;
 *  - after a restart: before the program's other threads go on -- they
 *    wait at a gate (rt_hooks_gate_wait, a futex) that the hooks thread
 *    opens once the after-restart hooks ran, so that a connection they
 *    reopen is there at the threads' first step.  A thread may have been
 *    stopped holding a lock a hook needs (malloc's, stdio's): the gate opens
 *    by itself after GATE_NS, said in one line, and the hooks then run
 *    beside the threads as they did before the gate.
 * A C API caller (lazarus_checkpoint) returns only once the hooks of its
 * checkpoint have run.  The hooks thread is an ordinary thread of the
 * program: it is stopped, saved and restored with the others.  A forked
 * child has no hooks thread: its hooks are forgotten (it registers its own). */
#include "rt.h"
#include "rt_api.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

#define MAX_HOOKS 64

typedef void (*hook_fn)(int, void *);
static struct { int event; hook_fn fn; void *arg; } hooks[MAX_HOOKS];
static int nhooks, nbefore;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static volatile int owner_pid;      /* the process whose hooks thread runs (0: none) */
static volatile int helper_tid;
static volatile uint32_t bell;      /* futex: bumped whenever there is work */
static volatile uint32_t idle;      /* futex: bumped whenever the due hooks have run */
static volatile uint64_t want_before, want_value, before_done;
static volatile uint64_t want_after, after_done;
static volatile uint32_t want_restart, restart_done;
static volatile int running;        /* the hooks thread is running hooks */
static volatile int nrestart;       /* after-restart hooks registered */
static volatile uint32_t gate;      /* futex: 1 from a restart until its after-restart hooks ran */
static volatile int gate_late;      /* the gate opened by its timeout once: said */
#define GATE_NS (10ull * 1000000000ull)

static void ring(void)
{
    __atomic_add_fetch(&bell, 1, __ATOMIC_RELEASE);
    rt_futex_wake_all(&bell);
}

int rt_hooks_self(void) { return helper_tid && helper_tid == (int)lz_sc0(SYS_gettid); }

int rt_hooks_hold(uint64_t v)
{
    if (!__atomic_load_n(&nbefore, __ATOMIC_ACQUIRE) || owner_pid != (int)lz_sc0(SYS_getpid)) return 0;
    uint64_t idx = v >> 2;
    if (idx <= rt.last_index || __atomic_load_n(&before_done, __ATOMIC_ACQUIRE) >= idx) return 0;
    if (__atomic_load_n(&want_before, __ATOMIC_ACQUIRE) != idx) {
        want_value = v;
        __atomic_store_n(&want_before, idx, __ATOMIC_RELEASE);
        rt_notify("HELD %llu hooks", (unsigned long long)idx);
        ring();
    }
    return 1;
}

void rt_hooks_after(uint64_t index)
{
    if (!__atomic_load_n(&nhooks, __ATOMIC_ACQUIRE) || owner_pid != (int)lz_sc0(SYS_getpid)) return;
    if (index <= __atomic_load_n(&want_after, __ATOMIC_ACQUIRE)) return; /* asked again: ran once */
    __atomic_store_n(&want_after, index, __ATOMIC_RELEASE);
    ring();
}

void rt_hooks_restarted(void)
{
    if (!__atomic_load_n(&nhooks, __ATOMIC_ACQUIRE) || owner_pid != (int)lz_sc0(SYS_getpid)) return;
    /* the checkpoint restarted from took its before-hooks, not the after ones */
    __atomic_store_n(&after_done, __atomic_load_n(&want_after, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
    if (__atomic_load_n(&nrestart, __ATOMIC_ACQUIRE)) __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&want_restart, 1, __ATOMIC_RELEASE);
    ring();
}

static void open_gate(void)
{
    __atomic_store_n(&gate, 0, __ATOMIC_RELEASE);
    rt_futex_wake_all(&gate);
}

void rt_hooks_gate_wait(void)
{
    if (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE) || rt_hooks_self()) return;
    uint64_t end = rt_now_ns(CLOCK_MONOTONIC) + GATE_NS;
    while (__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) {
        uint64_t now = rt_now_ns(CLOCK_MONOTONIC);
        if (now >= end) {
            if (!__atomic_exchange_n(&gate_late, 1, __ATOMIC_ACQ_REL)) {
                static const char msg[] = "lazarus: warning: the after-restart hooks did not finish within 10 s (one may need a "
                                          "lock another thread held at the checkpoint); the program's threads go on beside them\n";
                lz_sc3(SYS_write, 2, msg, sizeof msg - 1);
            }
            open_gate();
            return;
        }
        rt_futex_wait_ns(&gate, 1, end - now);
    }
}

static int pending(void)
{
    return __atomic_load_n(&want_before, __ATOMIC_ACQUIRE) > __atomic_load_n(&before_done, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&want_restart, __ATOMIC_ACQUIRE) != __atomic_load_n(&restart_done, __ATOMIC_ACQUIRE) ||
           __atomic_load_n(&want_after, __ATOMIC_ACQUIRE) > __atomic_load_n(&after_done, __ATOMIC_ACQUIRE);
}

void rt_hooks_wait_idle(void)
{
    if (!__atomic_load_n(&nhooks, __ATOMIC_ACQUIRE) || owner_pid != (int)lz_sc0(SYS_getpid) || rt_hooks_self()) return;
    for (;;) {
        uint32_t seen = __atomic_load_n(&idle, __ATOMIC_ACQUIRE);
        if (!pending() && !__atomic_load_n(&running, __ATOMIC_ACQUIRE)) return;
        rt_futex_wait_ns(&idle, seen, 100000000ull);
    }
}

/* Runs the hooks of `event`, in the order registered, without the lock (a
 * hook may register another). */
static void run(int event)
{
    struct { hook_fn fn; void *arg; } now[MAX_HOOKS];
    int n = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nhooks; i++)
        if (hooks[i].event == event) { now[n].fn = hooks[i].fn; now[n++].arg = hooks[i].arg; }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) now[i].fn(event, now[i].arg);
}

static void *hooks_thread(void *unused)
{
    (void)unused;
    prctl(PR_SET_NAME, "lazarus-hooks");
    helper_tid = (int)lz_sc0(SYS_gettid);
    for (;;) {
        uint32_t seen = __atomic_load_n(&bell, __ATOMIC_ACQUIRE);
        __atomic_store_n(&running, 1, __ATOMIC_RELEASE);
        uint64_t b = __atomic_load_n(&want_before, __ATOMIC_ACQUIRE);
        uint32_t r = __atomic_load_n(&want_restart, __ATOMIC_ACQUIRE);
        uint64_t a = __atomic_load_n(&want_after, __ATOMIC_ACQUIRE);
        if (b > before_done) {
            uint64_t v = want_value;
            run(RT_EV_BEFORE);
            __atomic_store_n(&before_done, b, __ATOMIC_RELEASE);
            /* the request again, to this thread: the checkpoint runs here, at a point where
             * nothing of the program's is half done */
            rt_requeue_to_self(v);
            continue;
        }
        if (r != restart_done) {
            run(RT_EV_RESTART);
            __atomic_store_n(&restart_done, r, __ATOMIC_RELEASE);
            if (r == __atomic_load_n(&want_restart, __ATOMIC_ACQUIRE)) open_gate(); /* the program's threads go on */
            continue;
        }
        if (a > after_done) {
            run(RT_EV_AFTER);
            __atomic_store_n(&after_done, a, __ATOMIC_RELEASE);
            continue;
        }
        __atomic_store_n(&running, 0, __ATOMIC_RELEASE);
        __atomic_add_fetch(&idle, 1, __ATOMIC_RELEASE);
        rt_futex_wake_all(&idle);
        if (!pending()) rt_futex_wait_ns(&bell, seen, 10000000000ull); /* (rung: no wake-up is lost) */
    }
    return NULL;
}

/* Makes the hooks thread (lock held): it takes no signal of the program's,
 * only the runtime's. */
static int start_thread(void)
{
    if (owner_pid == (int)lz_sc0(SYS_getpid)) return 0;
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, LZ_SIGCKPT);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int e = pthread_create(&t, &at, hooks_thread, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
    if (e) { errno = e; return -1; }
    owner_pid = (int)lz_sc0(SYS_getpid);
    return 0;
}

RT_API int lazarus_rt_on(int event, hook_fn fn, void *arg)
{
    if (!rt.active) return 0;
    if (!fn || (event != RT_EV_BEFORE && event != RT_EV_AFTER && event != RT_EV_RESTART)) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&lock);
    int rc = -1;
    if (nhooks == MAX_HOOKS) errno = ENOMEM;
    else if (start_thread() == 0) {
        hooks[nhooks].event = event;
        hooks[nhooks].fn = fn;
        hooks[nhooks].arg = arg;
        __atomic_store_n(&nhooks, nhooks + 1, __ATOMIC_RELEASE);
        if (event == RT_EV_BEFORE) __atomic_add_fetch(&nbefore, 1, __ATOMIC_RELEASE);
        if (event == RT_EV_RESTART) __atomic_add_fetch(&nrestart, 1, __ATOMIC_RELEASE);
        rc = 1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A forked child: no hooks thread, no hooks. */
void rt_hooks_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    nhooks = nbefore = nrestart = 0;
    gate = 0;
    owner_pid = helper_tid = 0;
    want_before = before_done = want_after = after_done = 0;
    want_restart = restart_done = 0;
    running = 0;
}
