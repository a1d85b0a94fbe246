/* The supervisor inside a Slurm job (SLURM_JOB_ID set): what the batch
 * system's signals and time limit mean for the job.
 *
 *   - the warning signal (USR1, or run/restart --checkpoint-signal SIG; sent
 *     by `#SBATCH --signal=B:USR1@SECONDS`, and at a preemption with
 *     `SlurmctldParameters=preempt_send_user_signal`): checkpoint now, wait
 *     until it is durable, stop the program (SIGKILL: the job stays
 *     restartable), then `scontrol requeue $SLURM_JOB_ID` and exit non-zero.
 *     Requeued by us, not by an exit status: Slurm requeues a job that exits
 *     non-zero only where the site set RequeueExit, and a job killed at its
 *     time limit ends TIMEOUT, never requeued;
 *   - no --signal at all: the job's end time, read from `squeue -o %L` (time
 *     left, so no time zone is involved) at the start and every 30 s (an
 *     administrator's `scontrol update timelimit=` is seen), does the same
 *     before it, leaving a margin of 3x the longest checkpoint measured so
 *     far plus 10 s;
 *   - SIGTERM (preemption, time limit, scancel: Slurm sends it to every
 *     process of the job, the program too): a checkpoint if the grace time
 *     (the partition's GraceTime, else KillWait) allows one by the longest
 *     checkpoint measured, then the program is stopped.  A preempted job is
 *     requeued by Slurm (PreemptMode=REQUEUE); a job past its time limit is
 *     requeued here; a cancelled one is left cancelled.  The program does not
 *     die of that SIGTERM first: `run` sets LAZARUS_HOLD_TERM=1 and where a
 *     process of the job leaves SIGTERM at its default the runtime holds it
 *     and says so ("TERM SENDER", runtime/rt_term.c).  A SIGTERM sent from
 *     inside the job (a parent ending its worker) is released at once; one
 *     from outside is taken as the batch system's, and once the program is to
 *     stop it is released (sigqueue, LZ_TERM_RELEASE): the program ends
 *     killed by SIGTERM, as it would have, a checkpoint later.
 * Every decision is one line on stderr (the job's output file).  Outside
 * Slurm only an explicit --checkpoint-signal does anything: checkpoint, stop. */
#include "batch.h"
#include "sv.h"
#include "store.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define SEC UINT64_C(1000000000)
#define REFRESH_NS (30 * SEC)
#define MARGIN_MIN_NS (10 * SEC)
/* a checkpoint's time before any was measured in this run */
#define CKPT_GUESS_NS (5 * SEC)

static struct {
    int slurm;            /* inside a Slurm job */
    int sig;              /* the warning signal (0: none) */
    char jobid[32];
    long restarts;        /* SLURM_RESTART_COUNT */
    uint64_t end_mono;    /* the job's end (CLOCK_MONOTONIC), 0: unknown or none */
    uint64_t next_refresh;
    uint64_t grace_ns;    /* GraceTime of the partition, else KillWait */
    uint64_t ckpt_ns;     /* the longest checkpoint measured (request to durable) */
    uint64_t last_index;  /* the newest durable checkpoint of this run */
    int stopping;         /* a trigger fired: checkpoint (maybe), then stop */
    uint32_t trigger;
    int asked;            /* the checkpoint for the stop was requested */
    uint64_t ckpt_index;  /* its index */
    uint64_t deadline;    /* stop at this instant whatever happens (0: none) */
    int stopped;          /* SIGKILL (or the release of its held SIGTERM) sent to the program */
    int main_held;        /* the program holds a SIGTERM from outside the job (runtime/rt_term.c) */
    uint64_t kill_at;     /* SIGKILL if a released program has not ended by then (0: none) */
    int requeue;          /* scontrol requeue once the job file says stopped */
    uint64_t fired_ns;    /* when the trigger fired (CLOCK_REALTIME), for bench/slurm.py */
} B;

/* Runs argv with an empty signal mask (the supervisor blocks the ones its
 * signalfd reads); its stdout into out (NUL-terminated) if given, else
 * /dev/null; its stderr is ours.  The exit status, or -1. */
static int run_cmd(char *const argv[], char *out, size_t len)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK);
    if (out) posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    else posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    int rc = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(p[1]);
    if (rc != 0) { close(p[0]); errno = rc; return -1; }
    size_t n = 0;
    ssize_t r;
    while (out && n + 1 < len && ((r = read(p[0], out + n, len - 1 - n)) > 0 || (r < 0 && errno == EINTR)))
        if (r > 0) n += (size_t)r;
    if (out) out[n] = 0;
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* "[DD-][HH:]MM:SS" as squeue's %L prints it: seconds, or -1 (UNLIMITED, NOT_SET, INVALID). */
static int64_t parse_left(const char *s)
{
    long d = 0, f[3] = {0, 0, 0};
    int nf = 0;
    const char *dash = strchr(s, '-');
    if (dash) { d = atol(s); s = dash + 1; }
    while (nf < 3) {
        char *e;
        long v = strtol(s, &e, 10);
        if (e == s) return -1;
        f[nf++] = v;
        if (*e != ':') break;
        s = e + 1;
    }
    if (nf < 2) return -1;
    long h = nf == 3 ? f[0] : 0, m = f[nf - 2], sec = f[nf - 1];
    return ((d * 24 + h) * 60 + m) * 60 + sec;
}

static void refresh_end(uint64_t now)
{
    B.next_refresh = now + REFRESH_NS;
    char out[128];
    char *argv[] = {"squeue", "-h", "-o", "%L", "-j", B.jobid, NULL};
    if (run_cmd(argv, out, sizeof out) != 0) return; /* slurmctld busy: the next look */
    int64_t left = parse_left(out);
    B.end_mono = left >= 0 ? lz_now_ns(CLOCK_MONOTONIC) + (uint64_t)left * SEC : 0;
}

/* GraceTime of the job's partition (preemption), else KillWait (time limit,
 * scancel): seconds between Slurm's SIGTERM and its SIGKILL. */
static uint64_t grace_seconds(void)
{
    static char out[1 << 17]; /* `scontrol show config` is some 10 KiB */
    const char *part = getenv("SLURM_JOB_PARTITION");
    if (part && *part) {
        char *argv[] = {"scontrol", "-o", "show", "partition", (char *)part, NULL};
        const char *g = run_cmd(argv, out, sizeof out) == 0 ? strstr(out, "GraceTime=") : NULL;
        if (g && atol(g + 10) > 0) return (uint64_t)atol(g + 10);
    }
    char *argv[] = {"scontrol", "show", "config", NULL};
    const char *k = run_cmd(argv, out, sizeof out) == 0 ? strstr(out, "KillWait") : NULL;
    if (k && (k = strchr(k, '='))) return (uint64_t)atol(k + 1);
    return 30; /* Slurm's default KillWait */
}

static uint64_t margin_ns(void)
{
    uint64_t m = 3 * (B.ckpt_ns ? B.ckpt_ns : CKPT_GUESS_NS) + MARGIN_MIN_NS;
    return m;
}

/* what its lines begin with: Slurm's, or a plain --checkpoint-signal's */
static const char *pfx(void) { return B.slurm ? "slurm" : "checkpoint-signal"; }

int batch_setup(int ckpt_signal, const char *cmd)
{
    const char *id = getenv("SLURM_JOB_ID");
    memset(&B, 0, sizeof B);
    B.sig = ckpt_signal;
    if (!id || !*id) return 0;
    long nodes = getenv("SLURM_NNODES") ? atol(getenv("SLURM_NNODES")) : 1;
    long tasks = getenv("SLURM_NTASKS") ? atol(getenv("SLURM_NTASKS")) : 1;
    if (nodes > 1 || tasks > 1) {
        lz_err("%s: Slurm job %s has %ld node(s) and %ld task(s): multi-node and MPI jobs are out of scope (a checkpoint "
               "would hold only this node's processes, not the other tasks); run Lazarus in a job of one task on one node",
               cmd, id, nodes, tasks);
        return -1;
    }
    B.slurm = 1;
    if (!B.sig) B.sig = SIGUSR1;
    snprintf(B.jobid, sizeof B.jobid, "%s", id);
    B.restarts = getenv("SLURM_RESTART_COUNT") ? atol(getenv("SLURM_RESTART_COUNT")) : 0;
    return 0;
}

int batch_signal_number(void) { return B.sig; }

int batch_holds_term(void) { return B.slurm; }

void batch_start(const struct supervisor *s)
{
    if (!B.slurm) return;
    uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
    refresh_end(now);
    B.grace_ns = grace_seconds() * SEC;
    uint64_t *v;
    int n = lz_store_list(s->dir, &v);
    if (n > 0) B.last_index = v[n - 1];
    if (n >= 0) free(v);
    char end[64] = "no time limit";
    if (B.end_mono) snprintf(end, sizeof end, "%" PRIu64 " s left", (B.end_mono - now) / SEC);
    lz_err("%s: job %s, %s (SLURM_RESTART_COUNT=%ld), %s: checkpoint on SIG%s and %" PRIu64 " s before the end, "
           "then requeue; SIGTERM: checkpoint within the %" PRIu64 " s grace time if one fits",
           pfx(), B.jobid, s->restoring ? "rerun: resuming" : B.restarts ? "rerun with no checkpoint: starting over" : "first run",
           B.restarts, end, sigabbrev_np(B.sig), margin_ns() / SEC, B.grace_ns / SEC);
}

/* The state Slurm gives the job now ("RUNNING", "TIMEOUT", "CANCELLED", ...). */
static void job_state(char *out, size_t len)
{
    char *argv[] = {"squeue", "-h", "-o", "%T", "-j", B.jobid, NULL};
    if (run_cmd(argv, out, len) != 0) *out = 0;
    out[strcspn(out, "\n")] = 0;
}

/* Lets the SIGTERM process pid holds end it (runtime/rt_term.c). */
static void release_term(pid_t pid)
{
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)LZ_TERM_RELEASE;
    sigqueue(pid, SIGTERM, v);
}

/* The program ends killed by the SIGTERM it holds, else by SIGKILL (it is
 * restartable either way); the job's other processes end when their
 * channels shut (cli/sv_life.c), each as its own held SIGTERM would have. */
static void stop_program(struct sv_state *st, const char *why)
{
    if (B.stopped) return;
    B.stopped = 1;
    pid_t prog = sv_find_program(st->s);
    if (why) lz_err("%s: %s", pfx(), why);
    if (prog <= 0) return;
    if (!B.main_held) { kill(prog, SIGKILL); return; }
    release_term(prog);
    B.kill_at = lz_now_ns(CLOCK_MONOTONIC) + 3 * SEC; /* it blocks SIGTERM, say */
}

/* Whether a SIGTERM that member pid holds came from outside the job.
 * sender: its PID as the member saw it (0: outside its PID namespace, -1:
 * the kernel).  A sender no longer there is taken for the job's own (the
 * signal then ends the process at once, as without Lazarus). */
static int from_outside(pid_t pid, long sender)
{
    if (sender <= 0) return sender == 0;
    char path[64];
    struct stat mine, its;
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    if (stat("/proc/self/ns/pid", &mine) == 0 && stat(path, &its) == 0 && mine.st_ino != its.st_ino)
        return 0; /* a restart's PID namespace holds only the job */
    pid_t p = (pid_t)sender;
    for (int depth = 0; depth < 4096; depth++) {
        if (p == getpid()) return 0; /* a descendant: the job's (the supervisor is its subreaper) */
        if (p <= 1) return 1;
        char buf[512];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return 0;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) return 0;
        buf[n] = 0;
        const char *e = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        if (!e || sscanf(e + 1, " %*c %d", &p) != 1) return 0;
    }
    return 0;
}

void batch_term_held(struct sv_state *st, pid_t pid, long sender)
{
    if (!B.slurm || !from_outside(pid, sender)) {
        release_term(pid); /* the job's own, or outside Slurm (a job restored there): as natively */
        return;
    }
    if (pid == sv_find_program(st->s)) B.main_held = 1;
    if (B.stopped) { release_term(pid); return; }
    if (!B.stopping) batch_signal(st, SIGTERM); /* the batch system's: it reached the program first */
}

/* A trigger fired: checkpoint (if there is time) and stop. */
static void fire(struct sv_state *st, uint32_t trigger, uint64_t deadline, int requeue, const char *what)
{
    if (B.stopping) return;
    B.stopping = 1;
    B.trigger = trigger;
    B.deadline = deadline;
    B.requeue = requeue && B.slurm;
    B.fired_ns = lz_now_ns(CLOCK_REALTIME);
    lz_err("%s: %s: checkpoint now, then stop the program%s", pfx(), what,
           B.requeue ? " and requeue the job" : "");
    batch_tick(st);
}

int batch_signal(struct sv_state *st, int sig)
{
    if (B.sig && sig == B.sig) {
        char what[96];
        snprintf(what, sizeof what, "SIG%s (the warning signal)", sigabbrev_np(sig));
        uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
        fire(st, LZ_TRIG_SIGNAL, B.end_mono > now + 5 * SEC ? B.end_mono - 5 * SEC : 0, 1, what);
        return 1;
    }
    if (sig != SIGTERM || !B.slurm) return 0;
    if (B.stopping) return 1; /* ours already: Slurm's answer to our requeue, say */
    char state[64];
    job_state(state, sizeof state);
    int timeout = !strncmp(state, "TIMEOUT", 7);
    /* a scancel'led job shows COMPLETING while its processes get SIGTERM */
    int cancelled = !strncmp(state, "CANCELLED", 9) || !strncmp(state, "COMPLETING", 10);
    /* requeued already: a node failure, `scontrol requeue`, or a preemption that requeues at once */
    int requeued = !strncmp(state, "PENDING", 7) || !strncmp(state, "REQUEUE", 7);
    uint64_t now = lz_now_ns(CLOCK_MONOTONIC), need = B.ckpt_ns ? B.ckpt_ns : CKPT_GUESS_NS;
    char what[200];
    snprintf(what, sizeof what, "SIGTERM (job %s: %s)", *state ? state : "state unknown",
             timeout ? "time limit" : cancelled ? "cancelled or ending" : requeued ? "requeued by Slurm" : "preemption");
    /* the checkpoint must be durable before Slurm's SIGKILL, with a second to spare */
    if (need + SEC > B.grace_ns) {
        char why[400];
        B.stopping = 1;
        B.requeue = timeout;
        snprintf(why, sizeof why, "%s: no time for a checkpoint (grace %" PRIu64 " s, one takes %.1f s): stopping; "
                 "the job resumes from its last checkpoint", what, B.grace_ns / SEC, (double)need / 1e9);
        stop_program(st, why);
        return 1;
    }
    fire(st, cancelled || timeout || requeued ? LZ_TRIG_TERM : LZ_TRIG_PREEMPT, now + B.grace_ns - SEC, timeout, what);
    return 1;
}

void batch_tick(struct sv_state *st)
{
    uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
    if (B.slurm && !B.stopping) {
        if (now >= B.next_refresh) refresh_end(now);
        if (B.end_mono && now + margin_ns() >= B.end_mono) {
            char what[120];
            snprintf(what, sizeof what, "the time limit is %.0f s away (no warning signal came)",
                     (double)(B.end_mono > now ? B.end_mono - now : 0) / 1e9);
            fire(st, LZ_TRIG_WALLTIME, B.end_mono > now + 2 * SEC ? B.end_mono - 2 * SEC : now, 1, what);
        }
        return;
    }
    if (B.stopped && B.kill_at && now >= B.kill_at) {
        pid_t prog = sv_find_program(st->s);
        B.kill_at = 0;
        if (prog > 0 && !st->child_gone) {
            lz_err("%s: the program did not end on its SIGTERM: SIGKILL", pfx());
            kill(prog, SIGKILL);
        }
    }
    if (!B.stopping || B.stopped) return;
    if (B.deadline && now >= B.deadline) {
        stop_program(st, "no durable checkpoint before the deadline: stopping; the job resumes from its last checkpoint");
        return;
    }
    if (B.asked || (st->s->restoring && !st->child_gone)) return; /* a restore first: then ours */
    B.asked = 1;
    if (st->in_progress) { /* one under way, seconds old at most: that one will do */
        B.ckpt_index = st->index;
        return;
    }
    char why[300];
    if (!st->runtime_ready || st->child_gone || st->unckpt[0] || job_ckpt_start(st, B.trigger, why, sizeof why) < 0) {
        char line[900];
        snprintf(line, sizeof line, "cannot checkpoint now (%s): stopping; the job resumes from its last checkpoint",
                 st->unckpt[0] ? st->unckpt : st->child_gone ? "the program ended" : !st->runtime_ready ? "the program is not ready" : why);
        stop_program(st, line);
        return;
    }
    B.ckpt_index = st->index;
}

void batch_checkpoint_done(struct sv_state *st, uint64_t index, uint64_t took_ns, int ok)
{
    if (ok) {
        if (took_ns > B.ckpt_ns) B.ckpt_ns = took_ns;
        B.last_index = index;
    }
    if (!B.stopping || B.stopped || !B.asked || index != B.ckpt_index) return;
    char line[200];
    if (ok) snprintf(line, sizeof line, "checkpoint %" PRIu64 " is durable (%.2f s after it was asked): stopping the program", index, (double)took_ns / 1e9);
    else snprintf(line, sizeof line, "checkpoint %" PRIu64 " failed: stopping; the job resumes from its last checkpoint", index);
    stop_program(st, line);
}

int batch_end(int code, int stopped)
{
    if (!B.stopping) return code;
    if (!B.requeue) return code ? code : 1;
    if (!stopped) {
        lz_err("%s: the program finished before it was stopped: job %s is not requeued", pfx(), B.jobid);
        return code;
    }
    char *argv[] = {"scontrol", "requeue", B.jobid, NULL};
    int rc = run_cmd(argv, NULL, 0);
    if (rc == 0)
        lz_err("%s: job %s requeued %.2f s after the trigger: it resumes from checkpoint %" PRIu64 " when it runs again",
               pfx(), B.jobid, (double)(lz_now_ns(CLOCK_REALTIME) - B.fired_ns) / 1e9, B.last_index);
    else
        lz_err("%s: `scontrol requeue %s` failed (exit %d; is the job --no-requeue, or JobRequeue=0?): resubmit the "
               "same script to resume from checkpoint %" PRIu64, pfx(), B.jobid, rc, B.last_index);
    /* never 0: a job that ends COMPLETED is never requeued */
    return code ? code : 1;
}

int batch_parse_signal(const char *name, const char *cmd)
{
    const char *n = strncasecmp(name, "SIG", 3) ? name : name + 3;
    int sig = 0;
    char *e;
    long v = strtol(n, &e, 10);
    if (*n && !*e) sig = (int)v;
    for (int i = 1; i < NSIG && !sig; i++)
        if (sigabbrev_np(i) && !strcasecmp(sigabbrev_np(i), n)) sig = i;
    if (sig <= 0 || sig >= NSIG || sig == SIGKILL || sig == SIGSTOP || sig == SIGURG || sig == SIGCHLD || sig == SIGPIPE) {
        lz_err("%s: --checkpoint-signal takes a signal the supervisor can catch (USR1, USR2, a number...), not '%s'%s", cmd,
               name, sig == SIGURG ? " (SIGURG is Lazarus' own)" : "");
        return -1;
    }
    return sig;
}
