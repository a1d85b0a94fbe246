/* Keeps the checkpoint signal working whatever the program does with its
 * signals: sigaction() on it records the program's wish (the real handler
 * stays ours and chains to the program's), and masks never block it. */
#include "rt.h"
#include "track.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef int (*sigmask_fn)(int, const sigset_t *, sigset_t *);

static sigaction_fn real_sigaction_fn(void)
{
    static sigaction_fn f;
    if (!f) f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    return f;
}

void rt_install_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = rt_checkpoint_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigfillset(&sa.sa_mask); /* the program's handlers never run mid-checkpoint */
    sigdelset(&sa.sa_mask, SIGSEGV); /* (a program's SIGURG handler may store into a protected page) */
    real_sigaction_fn()(LZ_SIGCKPT, &sa, &rt.prog_urg);
    if ((void *)rt.prog_urg.sa_sigaction == (void *)rt_checkpoint_handler) {
        memset(&rt.prog_urg, 0, sizeof rt.prog_urg);
        rt.prog_urg.sa_handler = SIG_DFL;
    }
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, LZ_SIGCKPT);
    sigprocmask(SIG_UNBLOCK, &un, NULL);
}

/* A SIGURG that is not ours goes to the program's own disposition. */
void rt_chain_program_signal(int sig, siginfo_t *si, void *uc)
{
    struct sigaction *p = &rt.prog_urg;
    if (p->sa_flags & SA_SIGINFO) {
        if (p->sa_sigaction) { rt_self.prog_runs++; p->sa_sigaction(sig, si, uc); }
    } else if (p->sa_handler != SIG_DFL && p->sa_handler != SIG_IGN && p->sa_handler) {
        rt_self.prog_runs++; /* a call it interrupts returns EINTR as natively (rt_calls.c) */
        p->sa_handler(sig);
    }
}

RT_API int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig == SIGSEGV && rt_segv_sigaction(act, old)) return 0;
    if (act && rt_segv_taken() && sigismember(&act->sa_mask, SIGSEGV)) {
        /* a store into a protected page must never meet a blocked SIGSEGV
         * (the kernel would end the program) */
        struct sigaction a = *act;
        sigdelset(&a.sa_mask, SIGSEGV);
        return sigaction(sig, &a, old);
    }
    if (!rt.active || sig != LZ_SIGCKPT) return rt_handlers_sigaction(real_sigaction_fn(), sig, act, old);
    if (old) *old = rt.prog_urg;
    if (act) rt.prog_urg = *act;
    return 0;
}

RT_API sighandler_t signal(int sig, sighandler_t h)
{
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESTART;
    if (sigaction(sig, &sa, &old) < 0) return SIG_ERR;
    return old.sa_handler;
}

static int filtered_mask(sigmask_fn real, int how, const sigset_t *set, sigset_t *old)
{
    int urg = rt.active && set && sigismember(set, LZ_SIGCKPT), segv = rt_segv_taken() && set && sigismember(set, SIGSEGV);
    if (!set || how == SIG_UNBLOCK || !(urg || segv)) return real(how, set, old);
    sigset_t s = *set;
    if (urg) sigdelset(&s, LZ_SIGCKPT);
    if (segv) sigdelset(&s, SIGSEGV); /* (see sigaction) */
    return real(how, &s, old);
}

RT_API int sigprocmask(int how, const sigset_t *set, sigset_t *old)
{
    static sigmask_fn real;
    if (!real) real = (sigmask_fn)dlsym(RTLD_NEXT, "sigprocmask");
    return filtered_mask(real, how, set, old);
}

RT_API int pthread_sigmask(int how, const sigset_t *set, sigset_t *old)
{
    static sigmask_fn real;
    if (!real) real = (sigmask_fn)dlsym(RTLD_NEXT, "pthread_sigmask");
    return filtered_mask(real, how, set, old);
}

/* The control socket is the runtime's: a program closing "all" descriptors
 * or dup2()ing over it must not cut the job from its supervisor. */
RT_API int close(int fd)
{
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
    if (rt.active && fd == rt.ctl_fd) return 0;
    fj_fd_changed(fd);
    return real(fd);
}

/* close_range (Python's subprocess closes every descriptor before exec
 * with it): the control socket is skipped like close() skips it, so the
 * program the child execs is still a member of the job. */
RT_API int close_range(unsigned first, unsigned last, int flags)
{
    static int (*real)(unsigned, unsigned, int);
    if (!real) real = (int (*)(unsigned, unsigned, int))dlsym(RTLD_NEXT, "close_range");
    unsigned ctl = (unsigned)rt.ctl_fd;
    if (!rt.active || rt.ctl_fd < 0 || ctl < first || ctl > last) return real(first, last, flags);
    int r = 0;
    if (ctl > first) r = real(first, ctl - 1, flags);
    if (r == 0 && ctl < last) r = real(ctl + 1, last, flags);
    return r;
}

static void move_ctl_away(int target)
{
    if (!rt.active || target != rt.ctl_fd) return;
    long nfd = lz_sc3(SYS_fcntl, rt.ctl_fd, F_DUPFD, RT_HIGH_FD);
    if (nfd < 0) return;
    lz_sc1(SYS_close, rt.ctl_fd);
    rt.ctl_fd = (int)nfd;
    rt_watch_arm();
}

RT_API int dup2(int oldfd, int newfd)
{
    static int (*real)(int, int);
    if (!real) real = (int (*)(int, int))dlsym(RTLD_NEXT, "dup2");
    move_ctl_away(newfd);
    rt_enter();
    fj_fd_changed(newfd);
    int r = real(oldfd, newfd);
    if (r >= 0) fj_fd_reused(newfd);
    rt_leave();
    return r;
}

RT_API int dup3(int oldfd, int newfd, int flags)
{
    static int (*real)(int, int, int);
    if (!real) real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "dup3");
    move_ctl_away(newfd);
    rt_enter();
    fj_fd_changed(newfd);
    int r = real(oldfd, newfd, flags);
    if (r >= 0) fj_fd_reused(newfd);
    rt_leave();
    return r;
}
