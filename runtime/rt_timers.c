/* POSIX timers (timer_create): what the kernel does not say about them, and
 * SIGEV_THREAD timers that a checkpoint can stop.
 *
 * The kernel lists a process's timers in /proc/self/timers (id, signal and
 * sigev_value, notify kind and target, clock) and timer_gettime gives the time
 * left and the interval; not whether a timer was armed with TIMER_ABSTIME,
 * nor, inside a PID namespace whose /proc is the host's, the target thread's
 * id as the program knows it.  The wrappers below keep those per timer id.
 *
 * glibc makes a SIGEV_THREAD timer a SIGEV_THREAD_ID timer aimed at a helper
 * thread that blocks every signal: the checkpoint signal could never stop it.
 * timer_create here makes such a timer itself, aimed at a helper thread of the
 * runtime that blocks the timer signal (waits for it with sigtimedwait) but
 * not the checkpoint's, and starts the program's function in a new detached
 * thread at each expiry as glibc does.  The program gets the kernel's id as
 * its timer_t (glibc's other timer calls take a kernel id as it is), so ids
 * of every kind are the kernel's, which a restart gives back
 * (restorer/restore_timers.c).  The helper is a thread like any other: a
 * checkpoint stores it and a restart recreates it with its TID, where the
 * restored timers aim.  A forked child has no timers (POSIX) and no helper. */
#include "rt.h"
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define RT_TIMERS_MAX 512 /* timers the wrappers describe; more still work, as their kernel state says */
#define RT_TIMER_SIG 32   /* glibc's own SIGTIMER (SIGCANCEL): no program can use it */
#define SIGSETXID_SIG 33  /* glibc's set*id broadcast: every thread must take it */

struct rt_timer {
    int used, id;       /* id: -1 until the kernel gave it */
    int tid;            /* SIGEV_THREAD_ID: the target as this process sees it */
    int abs;            /* last armed with TIMER_ABSTIME */
    int thread;         /* SIGEV_THREAD: fn(value) in a new thread at each expiry */
    void (*fn)(union sigval);
    union sigval value;
    size_t stacksize, guardsize; /* from sigev_notify_attributes, 0 = the default */
};

static struct rt_timer timers[RT_TIMERS_MAX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int next_id = -1;     /* the id after the last one timer_create returned */
static int helper_tid;       /* 0: no helper (yet, or since a fork) */
static int helper_pid;       /* the process it is a thread of (a child of a raw clone has none) */
static volatile uint32_t helper_ready;

static struct rt_timer *find(int id)
{
    for (int i = 0; i < RT_TIMERS_MAX; i++)
        if (timers[i].used && timers[i].id == id) return &timers[i];
    return NULL;
}

static struct rt_timer *take_slot(void)
{
    for (int i = 0; i < RT_TIMERS_MAX; i++)
        if (!timers[i].used) { memset(&timers[i], 0, sizeof timers[i]); timers[i].used = 1; timers[i].id = -1; return &timers[i]; }
    return NULL;
}

/* Every signal blocked but the checkpoint's, glibc's set*id broadcast and the
 * faults: what glibc's helper and the threads it starts run with, except
 * that a checkpoint can stop them.  Given at creation (no signal of the
 * program's can reach the thread first), and again with the timer's signal,
 * which glibc leaves out of a thread's mask. */
static void helper_sigset(sigset_t *s)
{
    sigfillset(s);
    int open[] = {LZ_SIGCKPT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
    for (size_t i = 0; i < sizeof open / sizeof *open; i++) sigdelset(s, open[i]);
}

static void helper_mask(void)
{
    uint64_t m = ~0ull;
    int open[] = {LZ_SIGCKPT, SIGSETXID_SIG, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP};
    for (size_t i = 0; i < sizeof open / sizeof *open; i++) m &= ~(1ull << (open[i] - 1));
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &m, NULL, LZ_KSIGSET_SIZE);
}

struct start { void (*fn)(union sigval); union sigval value; };

static void *run_function(void *arg)
{
    struct start s = *(struct start *)arg;
    free(arg);
    s.fn(s.value);
    return NULL;
}

static void start_function(int slot, int id)
{
    struct start *s = malloc(sizeof *s);
    if (!s) return; /* as glibc: this expiry is lost */
    pthread_attr_t a;
    sigset_t m;
    helper_sigset(&m);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setsigmask_np(&a, &m);
    pthread_mutex_lock(&lock);
    /* the slot's timer, not one deleted since whose signal was still queued */
    struct rt_timer *t = slot >= 0 && slot < RT_TIMERS_MAX && timers[slot].used && timers[slot].thread &&
                         timers[slot].id == id ? &timers[slot] : NULL;
    if (t) {
        s->fn = t->fn;
        s->value = t->value;
        if (t->stacksize) pthread_attr_setstacksize(&a, t->stacksize);
        if (t->guardsize) pthread_attr_setguardsize(&a, t->guardsize);
    }
    pthread_mutex_unlock(&lock);
    pthread_t th;
    if (!t || pthread_create(&th, &a, run_function, s) != 0) free(s);
    pthread_attr_destroy(&a);
}

static void *helper_main(void *arg)
{
    (void)arg;
    helper_mask();
    __atomic_store_n(&helper_tid, (int)lz_sc0(SYS_gettid), __ATOMIC_RELEASE);
    __atomic_store_n(&helper_ready, 1, __ATOMIC_RELEASE);
    rt_futex_wake_all(&helper_ready);
    uint64_t set = 1ull << (RT_TIMER_SIG - 1);
    for (;;) {
        siginfo_t si;
        /* a checkpoint interrupts it (EINTR): it simply waits again, also after a restart */
        if (lz_sc4(SYS_rt_sigtimedwait, &set, &si, NULL, LZ_KSIGSET_SIZE) != RT_TIMER_SIG || si.si_code != SI_TIMER) continue;
        start_function(si.si_value.sival_int, si.si_timerid);
    }
    return NULL;
}

/* Called with the lock held, not busy (pthread_create takes libc's locks). */
static int start_helper(void)
{
    int pid = (int)lz_sc0(SYS_getpid);
    if (helper_tid && helper_pid == pid) return 0;
    helper_tid = 0;
    helper_ready = 0;
    helper_pid = pid;
    pthread_attr_t a;
    sigset_t m;
    helper_sigset(&m);
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setsigmask_np(&a, &m); /* its stack the default: it may run a checkpoint */
    pthread_t th;
    int e = pthread_create(&th, &a, helper_main, NULL);
    pthread_attr_destroy(&a);
    if (e) return e;
    while (!__atomic_load_n(&helper_ready, __ATOMIC_ACQUIRE)) rt_futex_wait(&helper_ready, 0);
    return 0;
}

/* Each wrapper takes the lock first, then marks the thread busy (rt_enter)
 * around the system call and the table's update only: a checkpoint never sees
 * one without the other, and a busy thread never waits for a lock a stopped
 * thread may hold (the table's, or libc's: starting the helper is done before). */
RT_API int timer_create(clockid_t clock, struct sigevent *sev, timer_t *timerid)
{
    REAL(int, timer_create, clockid_t, struct sigevent *, timer_t *);
    int thread = sev && sev->sigev_notify == SIGEV_THREAD;
    size_t stacksize = 0, guardsize = 0;
    if (thread && sev->sigev_notify_attributes) {
        pthread_attr_getstacksize(sev->sigev_notify_attributes, &stacksize);
        pthread_attr_getguardsize(sev->sigev_notify_attributes, &guardsize);
    }
    pthread_mutex_lock(&lock);
    int id = -1, e = thread ? start_helper() : 0;
    struct rt_timer *t = e ? NULL : take_slot();
    if (thread && !e && !t) e = EAGAIN;
    if (!e) {
        rt_enter();
        if (thread) {
            t->thread = 1;
            t->fn = sev->sigev_notify_function;
            t->value = sev->sigev_value;
            t->stacksize = stacksize;
            t->guardsize = guardsize;
            struct sigevent k;
            memset(&k, 0, sizeof k);
            k.sigev_notify = SIGEV_THREAD_ID;
            k.sigev_signo = RT_TIMER_SIG;
            k.sigev_value.sival_int = (int)(t - timers);
            k._sigev_un._tid = helper_tid;
            t->tid = helper_tid;
            long r = lz_sc3(SYS_timer_create, clock, &k, &id);
            if (r < 0) e = (int)-r;
        } else {
            timer_t got;
            if (real_timer_create(clock, sev, &got) == 0) id = (int)(intptr_t)got;
            else e = errno;
            if (t && sev && (sev->sigev_notify & SIGEV_THREAD_ID)) t->tid = sev->_sigev_un._tid;
        }
        if (e == 0) {
            if (t) t->id = id;
            next_id = id == INT_MAX ? 0 : id + 1;
            *timerid = (timer_t)(intptr_t)id;
        } else if (t) {
            t->used = 0;
        }
        rt_leave();
    }
    pthread_mutex_unlock(&lock);
    if (e) { errno = e; return -1; }
    return 0;
}

RT_API int timer_settime(timer_t timerid, int flags, const struct itimerspec *value, struct itimerspec *old)
{
    REAL(int, timer_settime, timer_t, int, const struct itimerspec *, struct itimerspec *);
    pthread_mutex_lock(&lock);
    rt_enter();
    int r = real_timer_settime(timerid, flags, value, old);
    int e = errno;
    if (r == 0) {
        struct rt_timer *t = find((int)(intptr_t)timerid);
        if (t) t->abs = (flags & TIMER_ABSTIME) != 0;
    }
    rt_leave();
    pthread_mutex_unlock(&lock);
    errno = e;
    return r;
}

RT_API int timer_delete(timer_t timerid)
{
    pthread_mutex_lock(&lock);
    rt_enter();
    /* the kernel's id, whatever kind: glibc's own would free a SIGEV_THREAD timer it did not make */
    long r = lz_sc1(SYS_timer_delete, (int)(intptr_t)timerid);
    if (r == 0) {
        struct rt_timer *t = find((int)(intptr_t)timerid);
        if (t) t->used = 0;
    }
    rt_leave();
    pthread_mutex_unlock(&lock);
    if (r < 0) { errno = (int)-r; return -1; }
    return 0;
}

/* In a forked child (rt_init.c): no timers, no helper thread. */
void rt_timers_forked(void)
{
    pthread_mutex_init(&lock, NULL);
    memset(timers, 0, sizeof timers);
    helper_tid = 0;
    helper_ready = 0;
    next_id = -1;
}

/* ---- in the pause ---- */

/* The number after "name" on the line at s (base 10, or 16), or -1. */
static int num(const char *s, const char *name, int base, long long *out)
{
    const char *p = strstr(s, name);
    if (!p) return -1;
    p += strlen(name);
    while (*p == ' ') p++;
    int neg = *p == '-';
    if (neg) p++;
    long long v = 0;
    int any = 0;
    for (;; p++, any = 1) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : 99;
        if (d >= base) break;
        v = v * base + d;
    }
    if (!any) return -1;
    *out = neg ? -v : v;
    return 0;
}

/* The next "ID:" at the start of a line, from s on. */
static const char *next_block(const char *s, const char *buf)
{
    for (s = strstr(s, "ID:"); s && s != buf && s[-1] != '\n'; s = strstr(s + 3, "ID:")) {}
    return s;
}

static int is_thread(const struct rt_ckpt *ck, int tid)
{
    for (size_t i = 0; i < ck->nthreads; i++)
        if (ck->threads[i].tid == tid) return 1;
    return 0;
}

int rt_capture_timers(struct rt_ckpt *ck)
{
    ck->ntimers = 0;
    size_t cap = 64 << 10;
    char *buf = arena_alloc(&ck->arena, cap);
    if (!buf) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    long n = rt_read_file("/proc/self/timers", buf, cap - 1);
    if (n < 0) { /* a kernel without CONFIG_CHECKPOINT_RESTORE cannot list them */
        int any = 0;
        for (int i = 0; i < RT_TIMERS_MAX && !any; i++) any = timers[i].used;
        if (any) {
            rt_fmt(ck->err, sizeof ck->err, "the program has POSIX timers, which this kernel cannot list "
                   "(/proc/self/timers needs CONFIG_CHECKPOINT_RESTORE)");
            return -1;
        }
        n = 0;
    }
    if ((size_t)n >= cap - 1) { rt_fmt(ck->err, sizeof ck->err, "the process has too many POSIX timers to checkpoint"); return -1; }
    buf[n] = 0;
    size_t count = 1;
    for (const char *l = next_block(buf, buf); l; l = next_block(l + 3, buf)) count++;
    ck->timers = arena_alloc(&ck->arena, count * sizeof *ck->timers);
    if (!ck->timers) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    int maxid = -1;
    for (const char *l = next_block(buf, buf); l; l = next_block(l + 3, buf)) {
        struct lz_timer *t = &ck->timers[ck->ntimers];
        memset(t, 0, sizeof *t);
        long long id, sig, val, target, clock;
        const char *nt = strstr(l, "notify:"), *slash = strchr(l, '/');
        if (num(l, "ID:", 10, &id) < 0 || num(l, "signal:", 10, &sig) < 0 || !slash || num(slash, "/", 16, &val) < 0 ||
            !nt || num(nt, ".", 10, &target) < 0 || num(l, "ClockID:", 10, &clock) < 0) {
            rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/timers");
            return -1;
        }
        t->kind = LZ_TM_TIMER;
        t->id = (int32_t)id;
        t->clockid = (int32_t)clock;
        t->signo = (int32_t)sig;
        t->value = (uint64_t)val;
        nt += strlen("notify:");
        while (*nt == ' ') nt++;
        t->notify = !strncmp(nt, "none", 4) ? SIGEV_NONE : SIGEV_SIGNAL;
        struct rt_timer *rt_t = find(t->id);
        if (strstr(nt, "/tid.") && strstr(nt, "/tid.") < strchr(nt, '\n')) {
            t->notify = SIGEV_SIGNAL | SIGEV_THREAD_ID;
            t->tid = rt_t && rt_t->tid ? rt_t->tid : (int32_t)target; /* as this process sees it */
            if (!is_thread(ck, t->tid)) {
                rt_fmt(ck->err, sizeof ck->err, "POSIX timer %d signals thread %d, which is not a thread of this process "
                       "as it sees it (made by a raw timer_create system call inside a PID namespace?): delete the "
                       "timer first", t->id, t->tid);
                return -1;
            }
        }
        if (rt_t && rt_t->abs) t->flags |= LZ_TMF_ABSTIME;
        struct itimerspec its;
        long r = lz_sc2(SYS_timer_gettime, t->id, &its);
        if (r < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read POSIX timer %d (errno %ld)", t->id, -r); return -1; }
        int64_t left = its.it_value.tv_sec * 1000000000ll + its.it_value.tv_nsec;
        t->interval_ns = its.it_interval.tv_sec * 1000000000ll + its.it_interval.tv_nsec;
        /* an absolute timer keeps its expiry on its clock */
        t->value_ns = left && (t->flags & LZ_TMF_ABSTIME) ? left + (int64_t)rt_now_ns(t->clockid) : left;
        r = lz_sc1(SYS_timer_getoverrun, t->id);
        t->overrun = r > 0 ? (int32_t)r : 0;
        if (t->id > maxid) maxid = t->id;
        ck->ntimers++;
    }
    if (ck->ntimers || next_id >= 0) {
        struct lz_timer *t = &ck->timers[ck->ntimers++];
        memset(t, 0, sizeof *t);
        t->kind = LZ_TM_NEXT;
        t->id = next_id >= 0 ? next_id : maxid + 1;
    }
    return 0;
}
