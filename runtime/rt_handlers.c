/* The program's own signal handlers run through one trampoline of the
 * runtime that counts them per thread (rt_self.prog_runs) before it calls
 * them.  So a blocking call that fails with EINTR tells whether a handler of
 * the program ran (the program must see the EINTR, as natively) or only the
 * runtime's checkpoint handler did (the call goes on: rt_calls.c).
 *
 * The kernel holds the trampoline with the program's flags and mask
 * (SA_SIGINFO added: the trampoline passes the handler what the kernel gives
 * any handler); sigaction() still shows the program its own handler and
 * flags.  sigset, bsd_signal and sysv_signal are libc functions that call
 * sigaction inside libc, out of the runtime's reach: they are made here over
 * the interposed one.  A handler installed with a raw rt_sigaction system
 * call is not counted (LIMITS.md). */
#include "rt.h"
#include <errno.h>
#include <signal.h>
#include <string.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*handler_fn)(int, siginfo_t *, void *);

/* Per signal, the program's handler and flags (fn NULL: the kernel holds
 * the program's own disposition, default or ignore) */
static struct { handler_fn fn; int flags; } prog[LZ_NSIG + 1];

static void trampoline(int sig, siginfo_t *si, void *uc)
{
    rt_self.prog_runs++;
    handler_fn fn = __atomic_load_n(&prog[sig].fn, __ATOMIC_ACQUIRE);
    if (fn) fn(sig, si, uc);
}

static int is_handler(const struct sigaction *a)
{
    return a->sa_handler != SIG_DFL && a->sa_handler != SIG_IGN && a->sa_handler != SIG_ERR;
}

int rt_handlers_sigaction(sigaction_fn real, int sig, const struct sigaction *act, struct sigaction *old)
{
    if (sig < 1 || sig > LZ_NSIG) return real(sig, act, old);
    handler_fn was_fn = prog[sig].fn;
    int was_flags = prog[sig].flags, r;
    if (act && is_handler(act)) {
        struct sigaction k = *act;
        k.sa_sigaction = trampoline;
        k.sa_flags |= SA_SIGINFO;
        prog[sig].flags = act->sa_flags;
        __atomic_store_n(&prog[sig].fn, (handler_fn)act->sa_sigaction, __ATOMIC_RELEASE);
        r = real(sig, &k, old);
    } else {
        struct sigaction held; /* SIG_DFL of SIGTERM in a Slurm job: held (rt_term.c) */
        r = real(sig, rt_term_act(sig, act, &held), old);
    }
    if (r != 0) { /* nothing changed */
        prog[sig].flags = was_flags;
        __atomic_store_n(&prog[sig].fn, was_fn, __ATOMIC_RELEASE);
        return r;
    }
    if (act && !is_handler(act)) __atomic_store_n(&prog[sig].fn, (handler_fn)0, __ATOMIC_RELEASE);
    if (old && old->sa_sigaction == trampoline) {
        old->sa_sigaction = was_fn;
        old->sa_flags = (old->sa_flags & ~SA_SIGINFO) | (was_flags & SA_SIGINFO);
    }
    if (old && sig == SIGTERM) rt_term_old(old);
    return 0;
}

RT_API sighandler_t bsd_signal(int sig, sighandler_t h) { return signal(sig, h); }

RT_API sighandler_t sysv_signal(int sig, sighandler_t h)
{
    struct sigaction sa, old;
    if (h == SIG_ERR) { errno = EINVAL; return SIG_ERR; }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sa.sa_flags = SA_RESETHAND | SA_NODEFER; /* System V: one-shot, not blocked while it runs */
    if (sigaction(sig, &sa, &old) < 0) return SIG_ERR;
    return old.sa_handler;
}

RT_API sighandler_t sigset(int sig, sighandler_t disp)
{
    sigset_t set, oset;
    struct sigaction sa, old;
    sigemptyset(&set);
    if (sigaddset(&set, sig) < 0) return SIG_ERR;
    if (disp == SIG_HOLD) {
        if (sigprocmask(SIG_BLOCK, &set, &oset) < 0) return SIG_ERR;
        if (sigismember(&oset, sig)) return SIG_HOLD;
        if (sigaction(sig, NULL, &old) < 0) return SIG_ERR;
        return old.sa_handler;
    }
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = disp;
    if (sigaction(sig, &sa, &old) < 0) return SIG_ERR;
    if (sigprocmask(SIG_UNBLOCK, &set, &oset) < 0) return SIG_ERR;
    return sigismember(&oset, sig) ? SIG_HOLD : old.sa_handler;
}
