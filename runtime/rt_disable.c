/* lazarus_disable() / lazarus_enable(): a critical section in which no
 * checkpoint is taken.  The sections nest, counted per thread (its depth)
 * and per process (open sections of all threads), as DMTCP's are per
 * process: a checkpoint waits until no thread of the process is in one.
 *
 * Two guards, so that no snapshot ever falls inside a section:
 *  - the section is a long rt_enter() (rt.h): a request to run a checkpoint
 *    or to stop for one that reaches the thread in it waits until the
 *    section ends, as it does for the runtime's own calls;
 *  - the checkpointing thread, before it asks any thread to stop, waits for
 *    the process's count to be 0 (rt_disable_wait), the other threads still
 *    running: a section that needs another thread (a lock, an MPI progress
 *    thread) can end.  A thread opening a section while a checkpoint waits
 *    to begin lets the checkpoint go first (`wanting`; each side stores its
 *    flag, then reads the other's, sequentially consistent: one sees the
 *    other).
 * The wait is bounded like a thread's stop (rt_threads.c): 10 s, or up to 2
 * minutes while the process makes progress; then the checkpoint fails with a
 * line naming the process and its section. */
#include "rt.h"
#include "rt_api.h"
#include "progress.h"
#include <errno.h>

#define WAIT_BASE_NS (10ull * 1000000000ull)
#define WAIT_CAP_NS (120ull * 1000000000ull)

static volatile uint32_t sections; /* futex: the process's open sections */
static volatile uint32_t wanting;  /* futex: a checkpoint waits for them to end */
static __thread int depth __attribute__((tls_model("initial-exec")));
static __thread uint64_t held_told __attribute__((tls_model("initial-exec")));

int rt_disable_depth(void) { return depth; }

RT_API int lazarus_rt_disable(void)
{
    if (!rt.active) return 0;
    if (depth++ > 0) { rt_enter(); return depth; } /* nested: the outer one holds */
    for (;;) {
        rt_enter();
        __atomic_add_fetch(&sections, 1, __ATOMIC_SEQ_CST);
        if (!__atomic_load_n(&wanting, __ATOMIC_SEQ_CST)) return depth;
        /* a checkpoint is about to stop the threads: it goes first */
        if (__atomic_sub_fetch(&sections, 1, __ATOMIC_SEQ_CST) == 0) rt_futex_wake_all(&sections);
        rt_leave(); /* a request deferred meanwhile is taken now */
        while (__atomic_load_n(&wanting, __ATOMIC_ACQUIRE)) rt_futex_wait_ns(&wanting, 1, 10000000ull);
    }
}

RT_API int lazarus_rt_enable(void)
{
    if (!rt.active) return 0;
    if (depth == 0) { errno = EPERM; return -1; }
    if (--depth == 0 && __atomic_sub_fetch(&sections, 1, __ATOMIC_SEQ_CST) == 0) rt_futex_wake_all(&sections);
    rt_leave(); /* last: a checkpoint deferred by the section runs here */
    return depth;
}

void rt_disable_held(uint64_t index)
{
    if (!depth || held_told == index) return;
    held_told = index;
    rt_notify("HELD %llu disabled", (unsigned long long)index);
}

/* The CPU time (ticks) of the process's other threads: the waiting one's own
 * looks are not progress (progress.h's look at the whole process would count them). */
static uint64_t others_cpu(void)
{
    char state;
    uint64_t all = 0, mine = 0;
    lz_task_look(0, 0, &state, &all);
    lz_task_look(0, (int)lz_sc0(SYS_gettid), &state, &mine);
    return all - mine;
}

int rt_disable_wait(struct rt_ckpt *ck)
{
    __atomic_store_n(&wanting, 1, __ATOMIC_SEQ_CST);
    uint32_t n = __atomic_load_n(&sections, __ATOMIC_SEQ_CST);
    if (!n) return 0;
    rt_notify("HELD %llu disabled", (unsigned long long)ck->index);
    uint64_t t0 = rt_now_ns(CLOCK_MONOTONIC), progress = t0, cpu = others_cpu();
    while ((n = __atomic_load_n(&sections, __ATOMIC_ACQUIRE)) != 0) {
        rt_futex_wait_ns(&sections, n, 100000000ull);
        uint64_t now = rt_now_ns(CLOCK_MONOTONIC), c = others_cpu();
        if (c != cpu) { cpu = c; progress = now; }
        /* as a thread's stop (rt_threads.c): 10 s, more while the others run, up to 2 minutes */
        int late = now - t0 >= WAIT_CAP_NS || (now - t0 >= WAIT_BASE_NS && now - progress >= LZ_PATIENCE_QUIET_NS);
        if (__atomic_load_n(&sections, __ATOMIC_ACQUIRE) && late) {
            char comm[32] = "?";
            long k = rt_read_file("/proc/self/comm", comm, sizeof comm - 1);
            if (k > 0) comm[k - (comm[k - 1] == '\n')] = 0;
            rt_fmt(ck->err, sizeof ck->err, "process %d (%s) is in a lazarus_disable() section: waited %llu ms for it to end (%s)",
                   (int)lz_sc0(SYS_getpid), comm, (unsigned long long)((now - t0) / 1000000),
                   now - t0 >= WAIT_CAP_NS ? "the longest wait" : "no progress");
            rt_disable_release();
            return -1;
        }
    }
    return 1;
}

void rt_disable_release(void)
{
    if (!__atomic_load_n(&wanting, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&wanting, 0, __ATOMIC_SEQ_CST);
    rt_futex_wake_all(&wanting);
}

/* A forked child: only this thread's sections are its own. */
void rt_disable_forked(void)
{
    sections = (uint32_t)depth;
    wanting = 0;
}
