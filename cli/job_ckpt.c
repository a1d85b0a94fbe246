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
 * checkpoint: ABORT to all, and once every writer is gone the parts' file
 * journals are kept as jrnl.N (lz_store_cleanup_tmp). */
#include "sv.h"
#include "store_admin.h"
#include "tree.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/kcmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LZ_SIGCKPT SIGURG
#define BEGIN_TIMEOUT_NS (10ull * 1000000000ull)
#define RESIGNAL_NS (100ull * 1000000ull)
#define NORUNTIME_GRACE_NS (200ull * 1000000ull)

/* LAZARUS_TRACE=1: the coordination's steps as the supervisor sees them, on
 * stderr, in ms since it began signalling the job (the runtime prints each
 * process's own steps as "lazarus: checkpoint"). */
static uint64_t trace_t0;

static void sv_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sv_trace(const char *fmt, ...)
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

static size_t count_parts(struct sv_state *st, int what)
{
    size_t n = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (!p->zombie) n += what == 0 ? p->stopped != 0 : what == 1 ? p->captured != 0 : 1;
    }
    return n;
}

static struct part *part_of(struct sv_state *st, pid_t pid)
{
    for (size_t i = 0; i < st->nparts; i++) if (st->parts[i].pid == pid) return &st->parts[i];
    return NULL;
}

static void read_comm(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    snprintf(out, len, "%s", b ? b : "?");
    free(b);
    out[strcspn(out, "\n")] = 0;
}

/* 'Z' for a zombie, 0 if gone.  (A process whose main thread has exited
 * shows 'Z' while its other threads run: that one is alive.) */
static char proc_state(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    if (!b) return 0;
    char *p = strrchr(b, ')');
    char c = p && p[1] == ' ' ? p[2] : '?';
    free(b);
    if (c == 'Z') {
        snprintf(path, sizeof path, "/proc/%d/status", pid);
        b = lz_read_file(path, &n);
        const char *t = b ? strstr(b, "\nThreads:") : NULL;
        if (t && atoi(t + 10) > 1) c = 'S';
        free(b);
    }
    return c;
}

static struct part *add_part(struct sv_state *st, pid_t pid)
{
    if (st->nparts == st->parts_cap) {
        size_t cap = st->parts_cap ? st->parts_cap * 2 : 16;
        struct part *np = realloc(st->parts, cap * sizeof *np);
        if (!np) return NULL;
        st->parts = np;
        st->parts_cap = cap;
    }
    struct part *p = &st->parts[st->nparts++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->writer_fd = -1;
    p->zombie = proc_state(pid) == 'Z';
    read_comm(pid, p->comm, sizeof p->comm);
    return p;
}

/* Adds pid's descendants not yet listed (parents first); returns how many. */
static size_t add_descendants(struct sv_state *st, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    size_t added = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char cp[320];
        snprintf(cp, sizeof cp, "/proc/%d/task/%s/children", pid, e->d_name);
        size_t n;
        char *b = lz_read_file(cp, &n);
        if (!b) continue;
        for (char *q = b; *q;) {
            char *end;
            long c = strtol(q, &end, 10);
            if (end == q) break;
            q = end;
            if (c > 0 && !part_of(st, (pid_t)c)) {
                if (!add_part(st, (pid_t)c)) break;
                added++;
                added += add_descendants(st, (pid_t)c);
            }
        }
        free(b);
    }
    closedir(d);
    return added;
}

/* The runtime is mapped in it (a process that has not answered may be between exec and its start). */
static int runs_runtime(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    int yes = b && memmem(b, n, "liblazarus-rt.so", 16) != NULL;
    free(b);
    return yes;
}

static void signal_part(struct sv_state *st, struct part *p)
{
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)((st->index << 2) | st->trigger);
    sigqueue(p->pid, LZ_SIGCKPT, v);
}

static int is_main(struct sv_state *st, const struct part *p) { return p->pid == st->s->prog; }

static void fail(struct sv_state *st, const struct part *p, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(struct sv_state *st, const struct part *p, const char *fmt, ...)
{
    if (st->failed) return;
    char why[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    /* the main program speaks for the job when it is alone */
    if (p && !(is_main(st, p) && st->nparts == 1))
        snprintf(st->fail_why, sizeof st->fail_why, "process %d (%s): %s", p->inner ? p->inner : p->pid, p->comm, why);
    else
        snprintf(st->fail_why, sizeof st->fail_why, "%s", why);
    st->failed = 1;
    for (size_t i = 0; i < st->nparts; i++)
        if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "ABORT %" PRIu64, st->index);
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
    struct part *m = add_part(st, prog);
    if (!m) { snprintf(why, whylen, "out of memory"); return -1; }
    add_descendants(st, prog);
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)((st->index << 2) | trigger);
    if (sigqueue(prog, LZ_SIGCKPT, v) < 0) { snprintf(why, whylen, "cannot signal the program"); return -1; }
    for (size_t i = 1; i < st->nparts; i++) if (!st->parts[i].zombie) signal_part(st, &st->parts[i]);
    sv_trace("checkpoint %" PRIu64 ": signalled %zu process(es)", st->index, count_parts(st, 2));
    s->next_index++;
    st->in_progress = 1;
    st->go_sent = st->resumed = st->failed = 0;
    st->fail_why[0] = 0;
    st->requested_ns = st->last_signal_ns = lz_now_ns(CLOCK_MONOTONIC);
    st->noruntime_ns = 0;
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
    struct part *p = part_of(st, pid);
    uint64_t idx = strtoull(strchr(msg, ' ') ? strchr(msg, ' ') + 1 : "0", NULL, 10);
    if (!st->in_progress || !p || idx != st->index) { if (fd >= 0) close(fd); return; }
    if (!strncmp(msg, "BEGIN ", 6)) {
        p->begun = 1;
    } else if (!strncmp(msg, "STOPPED ", 8)) {
        const char *q = strchr(msg + 8, ' ');
        p->inner = q ? atoi(q + 1) : p->pid;
        p->begun = p->stopped = 1;
        sv_trace("stopped %d (%zu/%zu)", p->pid, count_parts(st, 0), count_parts(st, 2));
    } else if (!strncmp(msg, "FORKED ", 7)) {
        p->captured = 1;
        if (fd >= 0 && p->writer_fd < 0) { p->writer_fd = fd; p->wlen = 0; fcntl(fd, F_SETFL, O_NONBLOCK); fd = -1; }
        sv_trace("captured %d (%zu/%zu)", p->pid, count_parts(st, 1), count_parts(st, 2));
    } else if (!strncmp(msg, "PEER ", 5)) {
        int fdn = 0;
        unsigned long long ino = 0;
        if (sscanf(msg + 5, "%*u %d %llu", &fdn, &ino) != 2) return;
        if (p->npeers == (int)(sizeof p->peers / sizeof p->peers[0])) {
            fail(st, p, "holds too many socket pairs shared with other processes of the job");
            return;
        }
        p->peers[p->npeers].fd = fdn;
        p->peers[p->npeers++].ino = ino;
    } else if (!strncmp(msg, "OK ", 3)) {
        stats_from(p, msg);
    } else if (!strncmp(msg, "ERR ", 4)) {
        const char *q = strchr(msg + 4, ' ');
        p->begun = 1;
        fail(st, p, "%s", q ? q + 1 : "failed");
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
    else if (!strncmp(p->wmsg, "ERR ", 4)) { const char *q = strchr(p->wmsg + 4, ' '); fail(st, p, "%s", q ? q + 1 : "failed"); }
    else fail(st, p, "the checkpoint writer ended before the checkpoint was durable (killed?)");
}

/* Open file descriptions two processes share (a log both append to, the
 * file a shell redirected for its children): kcmp tells, among descriptors of
 * the same file in different processes, which are one description. */
struct fdent { pid_t pid; int inner, fd; uint64_t dev, ino; int group; };

static int same_description(const struct fdent *a, const struct fdent *b)
{
    return syscall(SYS_kcmp, a->pid, b->pid, KCMP_FILE, a->fd, b->fd) == 0;
}

static int fdent_cmp(const void *a, const void *b)
{
    const struct fdent *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static void find_shared(struct sv_state *st, struct lz_tree *t)
{
    struct fdent *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", p->pid);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            int fd = atoi(e->d_name);
            char fp[96];
            struct stat sb;
            snprintf(fp, sizeof fp, "/proc/%d/fd/%d", p->pid, fd);
            if (stat(fp, &sb) < 0 || !(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode) || S_ISCHR(sb.st_mode))) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                struct fdent *nv = realloc(v, cap * sizeof *nv);
                if (!nv) break;
                v = nv;
            }
            v[n++] = (struct fdent){p->pid, p->inner, fd, sb.st_dev, sb.st_ino, -1};
        }
        if (d) closedir(d);
    }
    if (n) qsort(v, n, sizeof *v, fdent_cmp);
    int groups = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && v[b].dev == v[a].dev && v[b].ino == v[a].ino) b++;
        for (size_t i = a; i < b; i++) {
            if (v[i].group >= 0) continue;
            int g = -1;
            for (size_t k = i + 1; k < b; k++) {
                if (v[k].group >= 0 || v[k].pid == v[i].pid) continue;
                if (!same_description(&v[i], &v[k])) continue;
                if (g < 0) { g = groups++; v[i].group = g; }
                v[k].group = g;
            }
            /* a process's other descriptors of that description: its dups */
            if (g >= 0)
                for (size_t k = a; k < b; k++)
                    if (v[k].group < 0 && same_description(&v[i], &v[k])) v[k].group = g;
        }
        a = b;
    }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) ns += v[i].group >= 0;
    t->shared = calloc(ns ? ns : 1, sizeof *t->shared);
    t->nshared = 0;
    for (size_t i = 0; t->shared && i < n; i++)
        if (v[i].group >= 0) t->shared[t->nshared++] = (struct lz_tree_shared){v[i].group, v[i].inner, v[i].fd, 0};
    free(v);
}

/* "NSpid:\t12\t3" -> 3 (the innermost namespace's number), or ours. */
static int ns_field(const char *status, const char *name, int dflt)
{
    const char *l = strstr(status, name);
    if (!l) return dflt;
    l += strlen(name);
    int last = dflt;
    while (*l && *l != '\n') {
        char *e;
        long v = strtol(l, &e, 10);
        if (e == l) { l++; continue; }
        last = (int)v;
        l = e;
    }
    return last;
}

/* Does a process of the job hold socket `ino`?  (Read while all are stopped.) */
static int job_holds_socket(struct sv_state *st, uint64_t ino)
{
    char want[48];
    snprintf(want, sizeof want, "socket:[%llu]", (unsigned long long)ino);
    for (size_t i = 0; i < st->nparts; i++) {
        if (st->parts[i].zombie) continue;
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%d/fd", st->parts[i].pid);
        DIR *d = opendir(dir);
        struct dirent *e;
        int found = 0;
        while (d && !found && (e = readdir(d))) {
            char target[64];
            ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = 0;
            found = !strcmp(target, want);
        }
        if (d) closedir(d);
        if (found) return 1;
    }
    return 0;
}

/* Every socket pair a process shares with another: that one is of the job. */
static int check_peers(struct sv_state *st)
{
    for (size_t i = 0; i < st->nparts; i++)
        for (int k = 0; k < st->parts[i].npeers; k++)
            if (!job_holds_socket(st, st->parts[i].peers[k].ino)) {
                fail(st, &st->parts[i], "descriptor %d is one end of a local socket pair whose other end no process of "
                                        "the job holds", st->parts[i].peers[k].fd);
                return -1;
            }
    return 0;
}

static int build_tree(struct sv_state *st, struct lz_tree *t, char *why, size_t whylen)
{
    t->index = st->index;
    t->procs = calloc(st->nparts, sizeof *t->procs);
    if (!t->procs) return -1;
    t->nprocs = st->nparts;
    for (size_t i = 0; i < st->nparts; i++) {
        struct part *p = &st->parts[i];
        struct lz_tree_proc *tp = &t->procs[i];
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/status", p->pid);
        size_t n;
        char *b = lz_read_file(path, &n);
        if (!b) { snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno)); return -1; }
        int inner = ns_field(b, "NSpid:", p->pid);
        if (!p->inner) p->inner = inner;
        tp->pid = p->inner;
        tp->pgid = ns_field(b, "NSpgid:", 0);
        tp->sid = ns_field(b, "NSsid:", 0);
        pid_t ppid = ns_field(b, "PPid:", 0);
        free(b);
        struct part *pp = i ? part_of(st, ppid) : NULL;
        tp->ppid = pp ? (pp->inner ? pp->inner : pp->pid) : 0;
        if (i && !pp) { snprintf(why, whylen, "the parent %d of process %d is not a process of the job", ppid, p->pid); return -1; }
        memcpy(tp->comm, p->comm, sizeof tp->comm);
        if (p->zombie) {
            tp->state = LZ_TP_ZOMBIE;
            snprintf(path, sizeof path, "/proc/%d/stat", p->pid);
            b = lz_read_file(path, &n);
            char *q = b ? strrchr(b, ')') : NULL;
            /* field 52, exit_code: the wait status */
            for (int f = 2; q && f < 52; f++) q = strchr(q + 1, ' ');
            tp->status = q ? atoi(q + 1) : 0;
            free(b);
        } else {
            tp->state = LZ_TP_LIVE;
            if (i) snprintf(tp->dir, sizeof tp->dir, LZ_PROC_PREFIX "%d", tp->pid);
        }
    }
    find_shared(st, t);
    return t->shared ? 0 : -1;
}

/* Every part is written: one checkpoint directory, one rename. */
static int commit(struct sv_state *st, char *why, size_t whylen)
{
    const char *dir = st->s->dir;
    struct lz_tree t = st->tree;
    t.job[0] = st->s->job_id[0];
    t.job[1] = st->s->job_id[1];
    char root[LZ_PATH_MAX + 64], from[LZ_PATH_MAX + 64], to[LZ_PATH_MAX + 96], ck[LZ_PATH_MAX + 64];
    snprintf(root, sizeof root, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", dir, st->index, t.procs[0].pid);
    int rc = 0;
    for (size_t i = 1; i < t.nprocs && rc == 0; i++) {
        if (t.procs[i].state != LZ_TP_LIVE) continue;
        snprintf(from, sizeof from, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", dir, st->index, t.procs[i].pid);
        snprintf(to, sizeof to, "%s/%s", root, t.procs[i].dir);
        if (rename(from, to) < 0) { snprintf(why, whylen, "cannot gather process %d's part: %s", t.procs[i].pid, strerror(errno)); rc = -1; }
    }
    if (rc == 0) rc = lz_tree_write(root, &t, why, whylen);
    if (rc == 0 && lz_fsync_dir(root) < 0) { snprintf(why, whylen, "cannot make the checkpoint durable: %s", strerror(errno)); rc = -1; }
    lz_ckpt_path(ck, sizeof ck, dir, st->index);
    /* commit: the rename is the instant the checkpoint starts to exist */
    if (rc == 0 && renameat2(AT_FDCWD, root, AT_FDCWD, ck, RENAME_NOREPLACE) < 0) {
        snprintf(why, whylen, "cannot commit the checkpoint: %s", strerror(errno));
        rc = -1;
    }
    if (rc == 0 && lz_fsync_dir(dir) < 0) { snprintf(why, whylen, "cannot make the checkpoint durable (fsync of the store): %s", strerror(errno)); rc = -1; }
    return rc;
}

static int all(struct sv_state *st, int what)
{
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        if ((what == 0 && !p->stopped) || (what == 1 && !p->captured) || (what == 2 && (!p->written || p->writer_fd >= 0))) return 0;
    }
    return 1;
}

static void finish_failed(struct sv_state *st)
{
    struct supervisor *s = st->s;
    char out[1200];
    st->in_progress = 0;
    int begun = 0;
    for (size_t i = 0; i < st->nparts; i++) begun |= st->parts[i].begun;
    if (!begun && st->index + 1 == s->next_index) s->next_index--; /* nothing of it exists anywhere */
    lz_store_cleanup_tmp(s->dir); /* its file journals are kept as jrnl.N */
    if (begun) {
        struct lz_job job;
        if (lz_job_read(s->dir, &job) == 0) {
            job.failed_index = st->index;
            job.failed_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
            snprintf(job.failed_why, sizeof job.failed_why, "%.511s", st->fail_why);
            lz_job_write(s->dir, &job);
        }
        lz_err("checkpoint %" PRIu64 " failed: %s; the program keeps running", st->index, st->fail_why);
        snprintf(out, sizeof out, "ERR checkpoint %" PRIu64 " failed: %s", st->index, st->fail_why);
    } else {
        snprintf(out, sizeof out, "ERR %s", st->fail_why);
    }
    sv_finish_clients(st, out);
}

static void finish_ok(struct sv_state *st)
{
    struct supervisor *s = st->s;
    char why[600], out[300];
    if (commit(st, why, sizeof why) < 0) {
        fail(st, NULL, "%s", why);
        if (st->resumed) { finish_failed(st); return; }
        return; /* the API's caller is told by the ABORT */
    }
    if (!st->resumed) { /* the C API: the caller learns the checkpoint is committed */
        for (size_t i = 0; i < st->nparts; i++)
            if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "RESUME %" PRIu64 " 1", st->index);
        st->resumed = 1;
    }
    st->in_progress = 0;
    sv_trace("committed");
    lz_store_retain(s->dir, s->keep, st->index, s->first_index);
    uint64_t pause = 0, stored = 0, threads = 0, nproc = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->pause > pause) pause = p->pause;
        stored += p->stored;
        threads += p->threads;
        nproc += !p->zombie;
    }
    snprintf(out, sizeof out, "OK %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, st->index, pause, stored, nproc, threads);
    sv_finish_clients(st, out);
}

void job_ckpt_tick(struct sv_state *st)
{
    if (!st->in_progress) return;
    uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
    if (st->failed) {
        for (size_t i = 0; i < st->nparts; i++) if (st->parts[i].writer_fd >= 0) return; /* still writing */
        finish_failed(st);
        return;
    }
    if (!st->go_sent) {
        int waiting = 0;
        for (size_t i = 0; i < st->nparts; i++) {
            struct part *p = &st->parts[i];
            if (p->zombie || p->stopped) continue;
            char state = proc_state(p->pid);
            if (!state && !p->begun) { /* gone before it heard */
                memmove(p, p + 1, (st->nparts - i - 1) * sizeof *p);
                st->nparts--;
                i--;
                continue;
            }
            if (!state) { fail(st, p, "exited during the checkpoint"); return; }
            if (state == 'Z') { p->zombie = 1; continue; }
            waiting = 1;
            if (p->begun) continue;
            if (now - st->requested_ns > BEGIN_TIMEOUT_NS) {
                if (is_main(st, p) && st->nparts == 1) {
                    st->fail_why[0] = 0;
                    fail(st, NULL, "the program did not respond to the checkpoint request within 10 s "
                                   "(it may block the signal, or run without the Lazarus runtime)");
                } else {
                    fail(st, p, "did not respond to the checkpoint request within 10 s (it may block the signal)");
                }
                return;
            }
            if (!runs_runtime(p->pid)) {
                /* a moment's grace: it may be between exec and the runtime's start */
                if (!st->noruntime_ns) st->noruntime_ns = now;
                else if (now - st->noruntime_ns > NORUNTIME_GRACE_NS) {
                    char exe[LZ_PATH_MAX], lp[64];
                    snprintf(lp, sizeof lp, "/proc/%d/exe", p->pid);
                    ssize_t k = readlink(lp, exe, sizeof exe - 1);
                    exe[k > 0 ? k : 0] = 0;
                    fail(st, p, "runs %s without the Lazarus runtime (statically linked, or started without LD_PRELOAD): "
                                "a checkpoint cannot include it", k > 0 ? exe : "a program");
                    return;
                }
            }
        }
        if (waiting) {
            if (now - st->last_signal_ns > RESIGNAL_NS) {
                for (size_t i = 0; i < st->nparts; i++)
                    if (!st->parts[i].zombie && !st->parts[i].begun) signal_part(st, &st->parts[i]);
                st->last_signal_ns = now;
                sv_trace("signalled again the processes that have not begun");
            }
            return;
        }
        /* all stopped: a zombie its parent reaped before it stopped is gone */
        for (size_t i = 1; i < st->nparts; i++)
            if (st->parts[i].zombie && proc_state(st->parts[i].pid) != 'Z') {
                memmove(&st->parts[i], &st->parts[i + 1], (st->nparts - i - 1) * sizeof st->parts[i]);
                st->nparts--;
                i--;
            }
        /* did one start a process before it stopped? */
        size_t before = st->nparts;
        for (size_t i = 0; i < before; i++) add_descendants(st, st->parts[i].pid);
        if (st->nparts > before) {
            for (size_t i = before; i < st->nparts; i++) if (!st->parts[i].zombie) signal_part(st, &st->parts[i]);
            st->last_signal_ns = now;
            return;
        }
        for (size_t i = 0; i < st->nparts; i++)
            if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "GO %" PRIu64, st->index);
        st->go_sent = 1;
        sv_trace("GO sent to %zu process(es)", count_parts(st, 2));
        return;
    }
    if (!st->resumed && all(st, 1)) {
        /* every process is captured and still stopped: the tree as it is now */
        if (!st->have_tree) {
            char why[160] = "out of memory";
            if (build_tree(st, &st->tree, why, sizeof why) < 0) {
                lz_tree_free(&st->tree);
                fail(st, NULL, "cannot read the job's process tree (%s)", why);
                return;
            }
            st->have_tree = 1;
            if (check_peers(st) < 0) return;
            sv_trace("tree read");
        }
        if (st->trigger != LZ_TRIG_API) {
            for (size_t i = 0; i < st->nparts; i++)
                if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "RESUME %" PRIu64 " 0", st->index);
            st->resumed = 1;
            sv_trace("RESUME sent");
        }
    }
    if (st->have_tree && all(st, 1) && all(st, 2)) finish_ok(st);
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
    if (!st->failed && st->have_tree && all(st, 1) && all(st, 2)) {
        finish_ok(st);
        if (!st->in_progress) return;
    }
    if (!st->failed) fail(st, NULL, "the program ended before the checkpoint was complete");
    finish_failed(st);
}
