/* In a Slurm job, a SIGTERM from outside the job waits for the supervisor.
 *
 * Slurm sends SIGTERM (time limit, scancel, preemption) to every process of
 * the job, then SIGKILL after its grace time.  A program that leaves SIGTERM
 * at its default would die at once, before its supervisor could checkpoint
 * it.  So where the supervisor asks for it (LAZARUS_HOLD_TERM=1, set by
 * `run` inside a Slurm job, kept across exec) and the program's disposition
 * for SIGTERM is the default, the kernel holds a handler of the runtime's
 * instead: it records the signal and tells the supervisor ("TERM SENDER"),
 * which decides (cli/batch_slurm.c): a SIGTERM sent from inside the job (a
 * parent ending its worker) is released at once; one from outside is the
 * batch system's: a checkpoint if the grace time allows, then the release.
 * A release (sigqueue of SIGTERM with LZ_TERM_RELEASE) puts the default
 * back and lets the signal end the process as it would have.  If the
 * supervisor is gone the channel's watch ends the process the same way
 * (rt_watch.c), and once the job finished nothing is held any more.
 *
 * The program never learns of this handler: sigaction() shows it SIG_DFL
 * (rt_handlers.c), a handler of its own replaces it, SIG_IGN stays ignored,
 * and setting SIG_DFL again puts it back. */
#include "rt.h"
#include <dlfcn.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn real_sa;
static int holding;        /* LAZARUS_HOLD_TERM=1: default SIGTERMs are held */
static volatile int held;  /* one came and was told to the supervisor */

static void release(void)
{
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sa(SIGTERM, &dfl, NULL);
    uint64_t term = 1ull << (SIGTERM - 1);
    lz_sc2(SYS_kill, lz_sc0(SYS_getpid), SIGTERM);
    lz_sc4(SYS_rt_sigprocmask, SIG_UNBLOCK, &term, NULL, LZ_KSIGSET_SIZE);
    lz_sc2(SYS_kill, lz_sc0(SYS_getpid), SIGKILL); /* not reached: the default action ended it */
}

static void hold(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    if ((si->si_code == SI_QUEUE && si->si_value.sival_ptr == (void *)(uintptr_t)LZ_TERM_RELEASE) || !rt.active ||
        rt.ctl_fd < 0 || rt_watch_detached())
        release();
    if (held) return; /* told already: the supervisor's answer comes */
    held = 1;
    /* the main program dies with its supervisor by SIGKILL (cli/cmd_run.c):
     * now by SIGTERM, which this handler takes, so that the channel's watch
     * ends it as the SIGTERM it holds would have (rt_watch.c) */
    long pd = 0;
    if (lz_sc2(SYS_prctl, PR_GET_PDEATHSIG, &pd) == 0 && pd == SIGKILL) lz_sc2(SYS_prctl, PR_SET_PDEATHSIG, SIGTERM);
    /* the sender as this process sees it: 0 is outside its PID namespace,
     * -1 the kernel */
    rt_notify("TERM %d", si->si_code <= 0 ? (int)si->si_pid : -1);
}

int rt_term_holds(const struct sigaction *k) { return k && k->sa_sigaction == hold; }

const struct sigaction *rt_term_act(int sig, const struct sigaction *act, struct sigaction *buf)
{
    if (!holding || sig != SIGTERM || !act || act->sa_handler != SIG_DFL || rt_watch_detached()) return act;
    memset(buf, 0, sizeof *buf);
    buf->sa_sigaction = hold;
    buf->sa_flags = SA_SIGINFO | SA_RESTART;
    return buf;
}

void rt_term_old(struct sigaction *old)
{
    if (!rt_term_holds(old)) return;
    memset(old, 0, sizeof *old);
    old->sa_handler = SIG_DFL; /* what the program set, or inherited */
}

void rt_term_start(void)
{
    const char *h = rt_env("LAZARUS_HOLD_TERM");
    real_sa = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
    holding = h && *h == '1' && real_sa;
    if (!holding) return;
    struct sigaction now, buf;
    if (real_sa(SIGTERM, NULL, &now) < 0 || now.sa_handler != SIG_DFL) return; /* SIG_IGN kept (exec keeps it) */
    real_sa(SIGTERM, rt_term_act(SIGTERM, &now, &buf), NULL);
}

int rt_term_held(void) { return held; }

void rt_term_end(void) { release(); }

/* A restored process, a forked child: no SIGTERM came to this one yet. */
void rt_term_forget(void) { held = 0; }
