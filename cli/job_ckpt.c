/* The coordinated checkpoint of the job (runtime/rt_job.c has the process
 * side).  The job is the main program and every process below it in the
 * process tree.  The supervisor
 *   1. signals each of them (again every 100 ms to one that has not begun:
 *      a process between exec and the runtime's start ignores the signal);
 *   2. once all have stopped, lists the tree again: a process started in the
 *      meantime is signalled too; when the list no longer changes (a stopped
 *      process starts none) it says GO to each;
 *   3. once each has captured itself (FORKED, or OK if it wrote in the
 *      pause), finds the open file descriptions shared between processes
 *      (kcmp) and says RESUME (for the C API only after the commit);
 *   4. once every writer has reported, moves each process's part into the
 *      main program's (tmp.N.PID -> tmp.N.MAIN/proc.PID), writes the tree
 *      and commits with one rename.
 * A process that fails, exits while stopped, or does not answer fails the
 * checkpoint: ABORT to all, and once every writer is gone (and each process
 * told GO has said whether it forked one, for up to 2 s) the parts' file
 * journals are kept as jrnl.N (lz_store_cleanup_tmp).
 * This file runs the phases and reads the messages; who is in the job is in
 * job_members.c, the tree read in step 3 in job_tree.c, step 4 and a failed
 * checkpoint's end in job_commit.c. */
#include "job_ckpt.h"
#include "fs_job.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long a process gets to begin a checkpoint (BEGIN), and a process
 * seen without the runtime to map it (it may be between exec and the
 * runtime's start): the first on an idle machine, up to the second while it
 * makes progress (common/progress.h). */
#define BEGIN_BASE_NS (10ull * 1000000000ull)
/* a process whose every thread blocks the checkpoint signal, none running or waiting for a
 * CPU, this long is named at once (libc blocks every signal for moments of its own: fork,
 * posix_spawn) */
#define BLOCKED_NS (500ull * 1000000ull)
/* After ABORT, how long a process told GO may take to say what it did (FORKED: its writer) */
#define ANSWER_AFTER_ABORT_NS (2000ull * 1000000ull)
#define BEGIN_CAP_NS (120ull * 1000000000ull)
#define NORUNTIME_BASE_NS (200ull * 1000000ull)
#define NORUNTIME_CAP_NS (10ull * 1000000000ull)
/* The dynamic loader maps the runtime within its first milliseconds of CPU
 * time: a process that ran this long (clock ticks) without it has none. */
#define NORUNTIME_CPU_TICKS 5
#define RESIGNAL_NS (100ull * 1000000ull)

/* LAZARUS_TRACE=1: the coordination's steps as the supervisor sees them, on
 * stderr, in ms since it began signalling the job (the runtime prints each
 * process's own steps as "lazarus: checkpoint"). */
static uint64_t trace_t0;

void jc_trace(const char *fmt, ...)
{
    static int tracing = -1;
    if (tracing < 0) tracing = getenv("LAZARUS_TRACE") != NULL;
    if (!tracing) return;
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lazarus: job %8.3f ms %s\n", (double)(lz_now_ns(CLOCK_MONOTONIC) - trace_t0) / 1e6, msg);
}

void jc_fail(struct sv_state *st, const struct part *p, const char *fmt, ...)
{
    if (st->failed) return;
    char why[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the main program speaks for the job when it is alone */
    if (p && !(jc_is_main(st, p) && st->nparts == 1))
        snprintf(st->fail_why, sizeof st->fail_why, "process %d (%s): %s", p->inner ? p->inner : p->pid, p->comm, why);
    else
        snprintf(st->fail_why, sizeof st->fail_why, "%s", why);
    st->failed = 1;
    st->failed_ns = lz_now_ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < st->nparts; i++)
        if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "ABORT %" PRIu64 " %s", st->index, st->fail_why);
}

/* Every thread of pid blocks the checkpoint signal: it cannot answer.  asleep:
 * and none of them runs or waits for a CPU or a disk (else 0). */
static int blocks_everywhere(pid_t pid, int asleep)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int all = 1, any = 0;
    while (all && (e = readdir(d)))
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') {
            any = 1;
            all = lz_task_blocks(pid, atoi(e->d_name), LZ_SIGCKPT);
            char state = 0;
            uint64_t cpu;
            if (all && asleep && (lz_task_look(pid, atoi(e->d_name), &state, &cpu) < 0 || state == 'R' || state == 'D')) all = 0;
        }
    closedir(d);
    return any && all;
}

int job_ckpt_start(struct sv_state *st, uint32_t trigger, char *why, size_t whylen)
{
    struct supervisor *s = st->s;
    pid_t prog = sv_find_program(s);
    if (prog <= 0) { snprintf(why, whylen, "cannot signal the program"); return -1; }
    trace_t0 = lz_now_ns(CLOCK_MONOTONIC);
    st->nparts = 0;
    st->index = s->next_index;
    st->trigger = trigger;
    st->early_resume = trigger == LZ_TRIG_API && st->here_asked && !st->api_asked;
    if (trigger == LZ_TRIG_API) st->here_asked = st->api_asked = 0;
    struct part *m = jc_add_part(st, prog);
    if (!m) { snprintf(why, whylen, "out of memory"); return -1; }
    jc_add_descendants(st, prog);
    union sigval v;
    /* two bits for the runtime, which only tells the C API apart (format.h) */
    v.sival_ptr = (void *)(uintptr_t)((st->index << 2) | (trigger > LZ_TRIG_API ? LZ_TRIG_REQUEST : trigger));
    if (sigqueue(prog, LZ_SIGCKPT, v) < 0) { snprintf(why, whylen, "cannot signal the program"); return -1; }
    for (size_t i = 1; i < st->nparts; i++) if (!st->parts[i].zombie) jc_signal_part(st, &st->parts[i]);
    jc_trace("checkpoint %" PRIu64 ": signalled %zu process(es)", st->index, jc_count_parts(st, JC_ANY));
    s->next_index++;
    st->in_progress = 1;
    st->go_sent = st->resumed = st->failed = 0;
    st->fail_why[0] = 0;
    st->requested_ns = st->last_signal_ns = lz_now_ns(CLOCK_MONOTONIC);
    lz_tree_free(&st->tree);
    st->have_tree = 0;
    return 0;
}

static void stats_from(struct part *p, const char *ok)
{
    /* OK index pause memory changed stored durable threads */
    uint64_t f[7] = {0};
    const char *q = ok + 3;
    for (int i = 0; i < 7 && *q; i++) { char *e; f[i] = strtoull(q, &e, 10); if (e == q) break; q = e; }
    p->pause = f[1];
    p->stored = f[4];
    p->threads = f[6];
    p->written = p->captured = 1;
}

void job_ckpt_message(struct sv_state *st, pid_t pid, const char *msg, int fd)
{
    struct part *p = jc_part_of(st, pid);
    uint64_t idx = strtoull(strchr(msg, ' ') ? strchr(msg, ' ') + 1 : "0", NULL, 10);
    if (!st->in_progress || !p || idx != st->index) { if (fd >= 0) close(fd); return; }
    if (!strncmp(msg, "HELD ", 5)) { /* its request waits: a lazarus_disable() section, or lazarus_on() hooks */
        p->held = strstr(msg, " hooks") ? 2 : 1;
    } else if (!strncmp(msg, "BEGIN ", 6)) {
        p->begun = 1;
    } else if (!strncmp(msg, "STOPPED ", 8)) {
        const char *q = strchr(msg + 8, ' ');
        p->inner = q ? atoi(q + 1) : p->pid;
        p->begun = p->stopped = 1;
        jc_trace("stopped %d (%zu/%zu)", p->pid, jc_count_parts(st, JC_STOPPED), jc_count_parts(st, JC_ANY));
    } else if (!strncmp(msg, "FORKED ", 7)) {
        p->captured = p->answered = 1;
        if (fd >= 0 && p->writer_fd < 0) { p->writer_fd = fd; p->wlen = 0; fcntl(fd, F_SETFL, O_NONBLOCK); fd = -1; }
        jc_trace("captured %d (%zu/%zu)", p->pid, jc_count_parts(st, JC_CAPTURED), jc_count_parts(st, JC_ANY));
    } else if (!strncmp(msg, "PEER ", 5)) {
        int fdn = 0;
        unsigned long long ino = 0;
        if (sscanf(msg + 5, "%*u %d %llu", &fdn, &ino) != 2) return;
        if (p->npeers == (int)(sizeof p->peers / sizeof p->peers[0])) {
            jc_fail(st, p, "holds too many socket pairs shared with other processes of the job");
            return;
        }
        p->peers[p->npeers].fd = fdn;
        p->peers[p->npeers++].ino = ino;
    } else if (!strncmp(msg, "OK ", 3)) {
        stats_from(p, msg);
        p->answered = 1;
    } else if (!strncmp(msg, "ERR ", 4)) {
        const char *q = strchr(msg + 4, ' ');
        p->begun = p->answered = 1;
        jc_fail(st, p, "%s", q ? q + 1 : "failed");
    }
    if (fd >= 0) close(fd);
}

void job_ckpt_writer(struct sv_state *st, struct part *p)
{
    for (;;) {
        ssize_t r = read(p->writer_fd, p->wmsg + p->wlen, sizeof p->wmsg - 1 - p->wlen);
        if (r > 0) { p->wlen += (size_t)r; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        break; /* end of file: the writer is gone */
    }
    close(p->writer_fd);
    p->writer_fd = -1;
    p->wmsg[p->wlen] = 0;
    if (!strncmp(p->wmsg, "OK ", 3)) stats_from(p, p->wmsg);
    else if (!strncmp(p->wmsg, "ERR ", 4)) { const char *q = strchr(p->wmsg + 4, ' '); jc_fail(st, p, "%s", q ? q + 1 : "failed"); }
    else jc_fail(st, p, "the checkpoint writer ended before the checkpoint was durable (killed?)");
}

void job_ckpt_tick(struct sv_state *st)
{
    if (!st->in_progress) return;
    uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
    if (st->failed) {
        for (size_t i = 0; i < st->nparts; i++) if (st->parts[i].writer_fd >= 0) return; /* still writing */
        /* a process told GO that has not answered yet may be forking its writer (its FORKED on the
         * way): waited for, a moment, so that the part that writer makes is cleaned up too */
        for (size_t i = 0; st->go_sent && i < st->nparts && now - st->failed_ns < ANSWER_AFTER_ABORT_NS; i++) {
            const struct part *p = &st->parts[i];
            if (!p->zombie && p->stopped && !p->answered && jc_proc_state(p->pid) && jc_proc_state(p->pid) != 'Z') return;
        }
        jc_finish_failed(st);
        return;
    }
    if (!st->go_sent) {
        int waiting = 0;
        for (size_t i = 0; i < st->nparts; i++) {
            struct part *p = &st->parts[i];
            if (p->zombie || p->stopped) continue;
            char state = jc_proc_state(p->pid);
            if (!state && !p->begun) { /* gone before it heard */
                memmove(p, p + 1, (st->nparts - i - 1) * sizeof *p);
                st->nparts--;
                i--;
                continue;
            }
            if (!state) { jc_fail(st, p, "exited during the checkpoint"); return; }
            if (state == 'Z') { p->zombie = 1; continue; }
            waiting = 1;
            if (p->begun) continue;
            if (!p->begin_wait.t0) lz_patience_start(&p->begin_wait, now, BEGIN_BASE_NS, BEGIN_CAP_NS);
            /* every thread blocking the signal at every look for BLOCKED_NS: it cannot answer */
            int blocks = blocks_everywhere(p->pid, 0), asleep = blocks && blocks_everywhere(p->pid, 1);
            if (!asleep) p->blocked_since = 0;
            else if (!p->blocked_since) p->blocked_since = now;
            if (asleep && now - p->blocked_since >= BLOCKED_NS) {
                jc_fail(st, NULL, "process %d (%s): every thread of it blocks SIGURG, the checkpoint signal (SigBlk in "
                                  "/proc/%d/task/*/status; main thread %d): it cannot answer the checkpoint request",
                        p->inner ? p->inner : p->pid, p->comm, p->pid, p->pid);
                return;
            }
            /* in vfork for BLOCKED_NS: it answers only once its child has exec'd or exited */
            pid_t vc = jc_vfork_child(p->pid);
            if (!vc) p->vfork_since = 0;
            else if (!p->vfork_since) p->vfork_since = now;
            if (vc && now - p->vfork_since >= BLOCKED_NS) {
                char comm[64] = "";
                snprintf(comm, sizeof comm, "/proc/%d/comm", vc);
                size_t cn;
                char *cb = lz_read_file(comm, &cn);
                snprintf(comm, sizeof comm, "%.*s", cb ? (int)strcspn(cb, "\n") : 1, cb ? cb : "?");
                free(cb);
                jc_fail(st, p, "is waiting in vfork: its child %d (%s) has run on its memory without exec or exit for at least "
                        "%.1f s, and until it does the process cannot answer the checkpoint request; checkpoint again "
                        "once it has",
                        jc_inner_pid(vc), comm, (double)(now - p->vfork_since) / 1e9);
                return;
            }
            if (!lz_patience_more(&p->begin_wait, now, p->pid, 0, blocks && now - p->begin_wait.t0 >= BEGIN_BASE_NS)) {
                char how[100];
                if (blocks) snprintf(how, sizeof how, "it blocks the signal");
                else lz_patience_why(&p->begin_wait, now, how, sizeof how);
                double waited = (double)(now - p->begin_wait.t0) / 1e9;
                if (p->held) { /* (not signalled again: the request waits in it, and only its own work counts) */
                    jc_fail(st, NULL, "process %d (%s) %s: waited %.1f s for it (%s)", p->inner ? p->inner : jc_inner_pid(p->pid), p->comm,
                            p->held == 1 ? "is in a lazarus_disable() section" : "is running its lazarus_on() before-checkpoint hooks",
                            waited, how);
                } else if (jc_is_main(st, p) && st->nparts == 1) {
                    st->fail_why[0] = 0;
                    jc_fail(st, NULL, "the program did not answer the checkpoint request: waited %.1f s for it to begin (%s; "
                                   "does it run without the Lazarus runtime?)", waited, how);
                } else {
                    jc_fail(st, p, "did not answer the checkpoint request: waited %.1f s for it to begin (%s)", waited, how);
                }
                return;
            }
            if (!jc_runs_runtime(p->pid)) {
                /* grace: it may be between exec and the runtime's start */
                char state;
                uint64_t cpu = 0;
                int looked = lz_task_look(p->pid, 0, &state, &cpu) == 0;
                if (!p->runtime_wait.t0) {
                    lz_patience_start(&p->runtime_wait, now, NORUNTIME_BASE_NS, NORUNTIME_CAP_NS);
                    p->runtime_cpu0 = cpu;
                }
                int ran = looked && cpu - p->runtime_cpu0 >= NORUNTIME_CPU_TICKS;
                if (!lz_patience_more(&p->runtime_wait, now, p->pid, 0, ran)) {
                    char exe[LZ_PATH_MAX], lp[64];
                    snprintf(lp, sizeof lp, "/proc/%d/exe", p->pid);
                    ssize_t k = readlink(lp, exe, sizeof exe - 1);
                    exe[k > 0 ? k : 0] = 0;
                    jc_fail(st, p, "runs %s without the Lazarus runtime (statically linked, or started without LD_PRELOAD): "
                                "a checkpoint cannot include it", k > 0 ? exe : "a program");
                    return;
                }
            }
        }
        if (waiting) {
            if (now - st->last_signal_ns > RESIGNAL_NS) {
                for (size_t i = 0; i < st->nparts; i++)
                    if (!st->parts[i].zombie && !st->parts[i].begun && !st->parts[i].held) jc_signal_part(st, &st->parts[i]);
                st->last_signal_ns = now;
                jc_trace("signalled again the processes that have not begun");
            }
            return;
        }
        /* all stopped: a zombie its parent reaped before it stopped is gone */
        for (size_t i = 1; i < st->nparts; i++)
            if (st->parts[i].zombie && jc_proc_state(st->parts[i].pid) != 'Z') {
                memmove(&st->parts[i], &st->parts[i + 1], (st->nparts - i - 1) * sizeof st->parts[i]);
                st->nparts--;
                i--;
            }
        /* did one start a process before it stopped? */
        size_t before = st->nparts;
        for (size_t i = 0; i < before; i++) jc_add_descendants(st, st->parts[i].pid);
        if (st->nparts > before) {
            for (size_t i = before; i < st->nparts; i++) if (!st->parts[i].zombie) jc_signal_part(st, &st->parts[i]);
            st->last_signal_ns = now;
            return;
        }
        /* every process stopped: the file systems (run --fs) close the interval
         * now, as each process's runtime does in its pause */
        char fwhy[4400];
        if (fs_close_all(st->s, st->index, fwhy, sizeof fwhy) < 0) {
            jc_fail(st, NULL, "%s", fwhy);
            return;
        }
        for (size_t i = 0; i < st->nparts; i++)
            if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "GO %" PRIu64, st->index);
        st->go_sent = 1;
        jc_trace("GO sent to %zu process(es)", jc_count_parts(st, JC_ANY));
        return;
    }
    if (!st->resumed && jc_all(st, JC_CAPTURED)) {
        /* every process is captured and still stopped: the tree as it is now */
        if (!st->have_tree) {
            char why[600] = "out of memory";
            if (jc_check_inet_shared(st, why, sizeof why) < 0) { /* cli/job_inet.c */
                jc_fail(st, NULL, "%s", why);
                return;
            }
            int tr = jc_build_tree(st, &st->tree, why, sizeof why);
            if (tr < 0) {
                lz_tree_free(&st->tree);
                /* a process ended (the program: a zombie the supervisor reaped meanwhile): said as such */
                if (tr == -2) jc_fail(st, NULL, "%s", why);
                else jc_fail(st, NULL, "cannot read the job's process tree (%s)", why);
                return;
            }
            st->have_tree = 1;
            if (jc_check_peers(st) < 0) return;
            jc_trace("tree read");
        }
        if (st->trigger != LZ_TRIG_API || st->early_resume) {
            for (size_t i = 0; i < st->nparts; i++)
                if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "RESUME %" PRIu64 " 0", st->index);
            st->resumed = 1;
            jc_trace("RESUME sent");
        }
    }
    if (st->have_tree && jc_all(st, JC_CAPTURED) && jc_all(st, JC_WRITTEN)) jc_finish_ok(st);
}

void job_ckpt_end(struct sv_state *st)
{
    if (!st->in_progress) return;
    for (size_t i = 0; i < st->nparts; i++) {
        struct part *p = &st->parts[i];
        if (p->writer_fd < 0) continue;
        fcntl(p->writer_fd, F_SETFL, 0);
        job_ckpt_writer(st, p);
    }
    if (!st->failed && st->have_tree && jc_all(st, JC_CAPTURED) && jc_all(st, JC_WRITTEN)) {
        jc_finish_ok(st);
        if (!st->in_progress) return;
    }
    if (!st->failed) jc_fail(st, NULL, "the program ended before the checkpoint was complete");
    jc_finish_failed(st);
}
