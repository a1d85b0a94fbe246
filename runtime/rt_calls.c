/* Calls a checkpoint must not interrupt.  The checkpoint signal reaches
 * every thread through a handler, and whenever a handler runs the kernel
 * turns the calls that cannot restart by themselves (poll, select,
 * epoll_wait, nanosleep, msgrcv, semop, sigtimedwait, pause, sigsuspend...:
 * ERESTARTNOHAND and ERESTART_RESTARTBLOCK) into EINTR, SA_RESTART or not.
 * A restored thread comes back inside the runtime's handler the same way and
 * returns EINTR from the call it was in.
 *
 * So each such call is wrapped: it notes how often this thread ran the
 * runtime's handler and the program's own (rt_handlers.c), and when the call
 * fails with EINTR and only the runtime's ran in the meantime, it is made
 * again.  A program's own handler, or none (a stop and continue, after which
 * some calls fail with EINTR natively), leaves the EINTR to the program.
 * A relative timeout goes on with what was left when the call was
 * interrupted: the time spent in the runtime's handler does not count, nor,
 * after a restart, the downtime (the handler is left on the new run; see
 * rt_self.hidden_ns); an absolute deadline is kept.  nanosleep and
 * clock_nanosleep go on with the remainder the kernel wrote; glibc's sleep,
 * usleep and thrd_sleep call its nanosleep inside libc, so they are made
 * here over the wrapped ones.  A mask given to ppoll, pselect, epoll_pwait or sigsuspend
 * never blocks the checkpoint signal (like sigprocmask's, rt_signals.c).
 *
 * Calls the kernel restarts by itself under SA_RESTART (read, write, wait,
 * accept, futex waits without a timeout, POSIX message queues, flock...) need
 * nothing: a restored thread re-executes the system call instruction. */
#include "rt.h"
#include <errno.h>
#include <poll.h>
#include <semaphore.h>
#include <sys/epoll.h>
#include <sys/msg.h>
#include <sys/select.h>
#include <sys/sem.h>
#include <time.h>
#include <unistd.h>

struct mark {
    uint32_t rt, prog;  /* rt_self's counts when the call began */
    int err;            /* errno then */
    uint64_t t0, hidden; /* for a relative timeout: CLOCK_MONOTONIC, rt_self.hidden_ns then */
};

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void mark_begin(struct mark *m, int timed)
{
    m->rt = rt_self.rt_runs;
    m->prog = rt_self.prog_runs;
    m->err = errno;
    if (timed) {
        m->t0 = mono_ns();
        m->hidden = rt_self.hidden_ns;
    }
}

/* failed == the call failed with EINTR: 1 if only the runtime's handler
 * ran since the mark (the call is made again, errno as it was before). */
static inline int only_ours(struct mark *m, int failed)
{
    if (!failed || rt_self.prog_runs != m->prog || rt_self.rt_runs == m->rt) return 0;
    m->rt = rt_self.rt_runs;
    errno = m->err;
    return 1;
}

/* ns left of a relative timeout of `total` ns, the runtime's pauses (and
 * downtimes) not counted; unsigned arithmetic: a clock that jumped between
 * runs (another boot) cancels out of the two differences */
static int64_t left_ns(const struct mark *m, int64_t total)
{
    uint64_t used = (mono_ns() - m->t0) - (rt_self.hidden_ns - m->hidden);
    return total - (int64_t)used;
}

static int left_ms(const struct mark *m, int total_ms)
{
    int64_t l = left_ns(m, (int64_t)total_ms * 1000000);
    return l <= 0 ? 0 : (int)((l + 999999) / 1000000);
}

static struct timespec left_ts(const struct mark *m, const struct timespec *total)
{
    int64_t l = left_ns(m, (int64_t)total->tv_sec * 1000000000 + total->tv_nsec);
    if (l < 0) l = 0;
    return (struct timespec){(time_t)(l / 1000000000), (long)(l % 1000000000)};
}

/* A mask for the duration of a call: without the checkpoint signal. */
static const sigset_t *open_mask(const sigset_t *mask, sigset_t *buf)
{
    if (!mask || !sigismember(mask, LZ_SIGCKPT)) return mask;
    *buf = *mask;
    sigdelset(buf, LZ_SIGCKPT);
    return buf;
}

#define EINTR_FAILED(r) ((r) < 0 && errno == EINTR)

extern void __chk_fail(void) __attribute__((noreturn)); /* glibc: "buffer overflow detected" */

RT_API int poll(struct pollfd *fds, nfds_t n, int timeout)
{
    REAL(int, poll, struct pollfd *, nfds_t, int);
    struct mark m;
    mark_begin(&m, timeout > 0);
    int r = real_poll(fds, n, timeout);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_poll(fds, n, timeout > 0 ? left_ms(&m, timeout) : timeout);
    return r;
}

RT_API int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *fds < n) __chk_fail(); /* as glibc's own */
    return poll(fds, n, timeout);
}

RT_API int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask)
{
    REAL(int, ppoll, struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
    struct mark m;
    sigset_t buf;
    mask = open_mask(mask, &buf);
    mark_begin(&m, tmo != NULL);
    int r = real_ppoll(fds, n, tmo, mask);
    while (only_ours(&m, EINTR_FAILED(r))) {
        struct timespec t = tmo ? left_ts(&m, tmo) : (struct timespec){0, 0};
        r = real_ppoll(fds, n, tmo ? &t : NULL, mask);
    }
    return r;
}

RT_API int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask, size_t fdslen)
{
    if (fdslen / sizeof *fds < n) __chk_fail();
    return ppoll(fds, n, tmo, mask);
}

/* The sets are left as they were when the call fails; the kernel writes
 * the time left into *tv, which the next round sets anew. */
RT_API int select(int n, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
    REAL(int, select, int, fd_set *, fd_set *, fd_set *, struct timeval *);
    struct mark m;
    int64_t total = tv ? (int64_t)tv->tv_sec * 1000000000 + (int64_t)tv->tv_usec * 1000 : 0;
    mark_begin(&m, tv != NULL);
    int r = real_select(n, rd, wr, ex, tv);
    while (only_ours(&m, EINTR_FAILED(r))) {
        if (tv) {
            int64_t l = left_ns(&m, total);
            if (l < 0) l = 0;
            tv->tv_sec = (time_t)(l / 1000000000);
            tv->tv_usec = (suseconds_t)(l % 1000000000 / 1000);
        }
        r = real_select(n, rd, wr, ex, tv);
    }
    return r;
}

RT_API int pselect(int n, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *mask)
{
    REAL(int, pselect, int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *);
    struct mark m;
    sigset_t buf;
    mask = open_mask(mask, &buf);
    mark_begin(&m, ts != NULL);
    int r = real_pselect(n, rd, wr, ex, ts, mask);
    while (only_ours(&m, EINTR_FAILED(r))) {
        struct timespec t = ts ? left_ts(&m, ts) : (struct timespec){0, 0};
        r = real_pselect(n, rd, wr, ex, ts ? &t : NULL, mask);
    }
    return r;
}

RT_API int epoll_wait(int ep, struct epoll_event *ev, int max, int timeout)
{
    REAL(int, epoll_wait, int, struct epoll_event *, int, int);
    struct mark m;
    mark_begin(&m, timeout > 0);
    int r = real_epoll_wait(ep, ev, max, timeout);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_epoll_wait(ep, ev, max, timeout > 0 ? left_ms(&m, timeout) : timeout);
    return r;
}

RT_API int epoll_pwait(int ep, struct epoll_event *ev, int max, int timeout, const sigset_t *mask)
{
    REAL(int, epoll_pwait, int, struct epoll_event *, int, int, const sigset_t *);
    struct mark m;
    sigset_t buf;
    mask = open_mask(mask, &buf);
    mark_begin(&m, timeout > 0);
    int r = real_epoll_pwait(ep, ev, max, timeout, mask);
    while (only_ours(&m, EINTR_FAILED(r)))
        r = real_epoll_pwait(ep, ev, max, timeout > 0 ? left_ms(&m, timeout) : timeout, mask);
    return r;
}

RT_API int epoll_pwait2(int ep, struct epoll_event *ev, int max, const struct timespec *tmo, const sigset_t *mask)
{
    REAL(int, epoll_pwait2, int, struct epoll_event *, int, const struct timespec *, const sigset_t *);
    struct mark m;
    sigset_t buf;
    mask = open_mask(mask, &buf);
    mark_begin(&m, tmo != NULL);
    int r = real_epoll_pwait2(ep, ev, max, tmo, mask);
    while (only_ours(&m, EINTR_FAILED(r))) {
        struct timespec t = tmo ? left_ts(&m, tmo) : (struct timespec){0, 0};
        r = real_epoll_pwait2(ep, ev, max, tmo ? &t : NULL, mask);
    }
    return r;
}

/* Sleeps: the kernel wrote what was left into rem when it interrupted them
 * (before the handler ran: neither the pause nor a downtime is in it). */
RT_API int nanosleep(const struct timespec *req, struct timespec *rem)
{
    REAL(int, nanosleep, const struct timespec *, struct timespec *);
    struct mark m;
    struct timespec own, left;
    if (!rem) rem = &own;
    mark_begin(&m, 0);
    int r = real_nanosleep(req, rem);
    while (only_ours(&m, EINTR_FAILED(r))) {
        left = *rem;
        r = real_nanosleep(&left, rem);
    }
    return r;
}

RT_API int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem)
{
    REAL(int, clock_nanosleep, clockid_t, int, const struct timespec *, struct timespec *);
    struct mark m;
    struct timespec own, left;
    if (!rem) rem = &own;
    mark_begin(&m, 0);
    int r = real_clock_nanosleep(clk, flags, req, rem); /* an error number, errno untouched */
    while (only_ours(&m, r == EINTR)) {
        left = *rem;
        r = real_clock_nanosleep(clk, flags, (flags & TIMER_ABSTIME) ? req : &left, rem);
    }
    return r;
}

/* glibc's: whole seconds not slept when interrupted, errno kept otherwise */
RT_API unsigned int sleep(unsigned int seconds)
{
    int e = errno;
    struct timespec ts = {(time_t)seconds, 0};
    if (nanosleep(&ts, &ts) < 0) return (unsigned int)ts.tv_sec;
    errno = e;
    return 0;
}

RT_API int usleep(useconds_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    return nanosleep(&ts, NULL);
}

/* C11's, over clock_nanosleep on CLOCK_REALTIME like glibc's: 0, -1 when
 * interrupted, -2 on an error */
RT_API int thrd_sleep(const struct timespec *req, struct timespec *rem)
{
    int r = clock_nanosleep(CLOCK_REALTIME, 0, req, rem);
    return r == 0 ? 0 : r == EINTR ? -1 : -2;
}

/* System V IPC */
RT_API ssize_t msgrcv(int id, void *msg, size_t size, long type, int flags)
{
    REAL(ssize_t, msgrcv, int, void *, size_t, long, int);
    struct mark m;
    mark_begin(&m, 0);
    ssize_t r = real_msgrcv(id, msg, size, type, flags);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_msgrcv(id, msg, size, type, flags);
    return r;
}

RT_API int msgsnd(int id, const void *msg, size_t size, int flags)
{
    REAL(int, msgsnd, int, const void *, size_t, int);
    struct mark m;
    mark_begin(&m, 0);
    int r = real_msgsnd(id, msg, size, flags);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_msgsnd(id, msg, size, flags);
    return r;
}

RT_API int semop(int id, struct sembuf *ops, size_t n)
{
    REAL(int, semop, int, struct sembuf *, size_t);
    struct mark m;
    mark_begin(&m, 0);
    int r = real_semop(id, ops, n);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_semop(id, ops, n);
    return r;
}

RT_API int semtimedop(int id, struct sembuf *ops, size_t n, const struct timespec *tmo)
{
    REAL(int, semtimedop, int, struct sembuf *, size_t, const struct timespec *);
    struct mark m;
    mark_begin(&m, tmo != NULL);
    int r = real_semtimedop(id, ops, n, tmo);
    while (only_ours(&m, EINTR_FAILED(r))) {
        struct timespec t = tmo ? left_ts(&m, tmo) : (struct timespec){0, 0};
        r = real_semtimedop(id, ops, n, tmo ? &t : NULL);
    }
    return r;
}

/* POSIX semaphores: absolute deadlines */
RT_API int sem_timedwait(sem_t *s, const struct timespec *abstime)
{
    REAL(int, sem_timedwait, sem_t *, const struct timespec *);
    struct mark m;
    mark_begin(&m, 0);
    int r = real_sem_timedwait(s, abstime);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_sem_timedwait(s, abstime);
    return r;
}

RT_API int sem_clockwait(sem_t *s, clockid_t clk, const struct timespec *abstime)
{
    REAL(int, sem_clockwait, sem_t *, clockid_t, const struct timespec *);
    struct mark m;
    mark_begin(&m, 0);
    int r = real_sem_clockwait(s, clk, abstime);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_sem_clockwait(s, clk, abstime);
    return r;
}

/* Waits for signals */
RT_API int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *tmo)
{
    REAL(int, sigtimedwait, const sigset_t *, siginfo_t *, const struct timespec *);
    struct mark m;
    mark_begin(&m, tmo != NULL);
    int r = real_sigtimedwait(set, info, tmo);
    while (only_ours(&m, EINTR_FAILED(r))) {
        struct timespec t = tmo ? left_ts(&m, tmo) : (struct timespec){0, 0};
        r = real_sigtimedwait(set, info, tmo ? &t : NULL);
    }
    return r;
}

RT_API int sigwaitinfo(const sigset_t *set, siginfo_t *info) { return sigtimedwait(set, info, NULL); }

RT_API int pause(void)
{
    REAL(int, pause, void);
    struct mark m;
    mark_begin(&m, 0);
    int r = real_pause();
    while (only_ours(&m, EINTR_FAILED(r))) r = real_pause();
    return r;
}

RT_API int sigsuspend(const sigset_t *mask)
{
    REAL(int, sigsuspend, const sigset_t *);
    struct mark m;
    sigset_t buf;
    mask = open_mask(mask, &buf);
    mark_begin(&m, 0);
    int r = real_sigsuspend(mask);
    while (only_ours(&m, EINTR_FAILED(r))) r = real_sigsuspend(mask);
    return r;
}
