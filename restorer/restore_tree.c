/* A restart of a job of several processes, in each restorer: the plan
 * (store/restart_plan.h, made by `lazarus restart`) says which children this
 * process makes, with which PIDs, process groups and sessions, which of
 * them are zombies, and which objects (pipes, socket pairs, open file
 * descriptions, event-loop objects, shared memory, pseudo-terminals) it makes for its descendants to inherit.  Before its jump back every restorer says
 * READY and waits until the supervisor lets all go at once: a job whose
 * restore failed in any process never runs. */
#include "restorer.h"
#include "restart_plan.h"
#include "lzsys.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <termios.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Joining a process group fails (EPERM) until its leader has made it: tried
 * again every millisecond, for 2 s, and on while the restart makes progress
 * towards it -- more of the job's processes appear (each restorer makes its
 * children, slowly on a loaded machine, and may fill its own memory first),
 * the leader exists and has not made its group yet, or the leader is a
 * process of the plan not made yet -- up to a minute.  No progress for a second past the
 * 2 s ends it (the leader is in another session, say). */
#define JOIN_BASE_NS (2ull * 1000000000ull)
#define JOIN_CAP_NS (60ull * 1000000000ull)
#define JOIN_QUIET_NS (1000ull * 1000000ull)

static struct {
    struct lz_plan_header h;
    struct lz_plan_proc *procs;
    struct lz_plan_obj *objs;
    struct lz_plan_hold *holds;
    const struct lz_plan_proc *me;
} plan;

int restore_report_fd = -1;

/* Copies of the restorer's arguments and environment (the kernel-made stack
 * holding them is unmapped before the children are made): a child that
 * cannot continue from this restorer's memory runs a fresh one with them. */
static char *saved_argv[6];
static char **saved_env;

int restore_in_tree(void) { return plan.me != NULL; }

int restore_tree_main_pid(int own) { return plan.me ? plan.procs[0].pid : own; }

extern char **environ;

static void save_args(char **argv)
{
    for (int k = 0; k < 5 && argv[k]; k++) saved_argv[k] = strdup(argv[k]);
    size_t n = 0;
    while (environ[n]) n++;
    saved_env = calloc(n + 1, sizeof *saved_env);
    if (!saved_env) restore_fail("out of memory");
    for (size_t k = 0; k < n; k++)
        if (!(saved_env[k] = strdup(environ[k]))) restore_fail("out of memory");
}

void restore_tree_read(char **argv)
{
    const char *v = getenv(LZ_PLAN_ENV);
    if (!v) return;
    save_args(argv);
    int fd = atoi(v);
    struct stat st;
    if (fstat(fd, &st) < 0 || (size_t)st.st_size < sizeof plan.h) restore_fail("the restart plan is missing");
    char *buf = malloc((size_t)st.st_size);
    if (!buf || lz_pread_all(fd, buf, (size_t)st.st_size, 0) < 0) restore_fail("cannot read the restart plan");
    memcpy(&plan.h, buf, sizeof plan.h);
    size_t want = sizeof plan.h + plan.h.nprocs * sizeof *plan.procs + plan.h.nobjs * sizeof *plan.objs +
                  plan.h.nholds * sizeof *plan.holds;
    if (plan.h.magic != LZ_PLAN_MAGIC || plan.h.nprocs == 0 || plan.h.nprocs > LZ_MAX_PROCS || want != (size_t)st.st_size)
        restore_fail("the restart plan is malformed");
    plan.procs = (void *)(buf + sizeof plan.h);
    plan.objs = (void *)(plan.procs + plan.h.nprocs);
    plan.holds = (void *)(plan.objs + plan.h.nobjs);
    int self = getpid();
    for (uint32_t k = 0; k < plan.h.nprocs; k++)
        if (plan.procs[k].pid == self) plan.me = &plan.procs[k];
    if (!plan.me) restore_fail("process %d is not in the restart plan (its PID could not be given back)", self);
    restore_sessions_init(plan.procs, plan.h.nprocs);
}

/* CLOCK_MONOTONIC by a system call: the vDSO is parked by now (restore_memory.c) */
static uint64_t mono_ns(void)
{
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int planned(int32_t pid)
{
    for (uint32_t k = 0; k < plan.h.nprocs; k++)
        if (plan.procs[k].pid == pid) return 1;
    return 0;
}

/* Its session and process group, as at the checkpoint; the process group
 * of another process of the job is joined once it exists (its leader may be
 * made a moment later, elsewhere in the tree). */
static void group_setup(const struct lz_plan_proc *p)
{
    /* (a leader that had forked children before its setsid makes them first: restore_tree_start) */
    if ((p->flags & LZ_PP_SETSID) && !restore_sessions_defer(p) && setsid() < 0)
        lz_warn("process %d: cannot make its session again: %s", p->pid, strerror(errno));
    if ((p->flags & LZ_PP_GROUP) && setpgid(0, 0) < 0)
        lz_warn("process %d: cannot make its process group again: %s", p->pid, strerror(errno));
    if (!p->join_pgid) return;
    uint64_t t0 = mono_ns(), moved = t0, now = t0, looked = 0;
    uint32_t made = 0;
    int e;
    for (;;) {
        if (setpgid(0, p->join_pgid) == 0) return;
        if ((e = errno) != EPERM) break;
        now = mono_ns();
        if (now - looked >= 50000000ull) { /* (PIDs as this namespace sees them: no /proc here) */
            looked = now;
            uint32_t n = 0;
            for (uint32_t k = 0; k < plan.h.nprocs; k++) n += kill(plan.procs[k].pid, 0) == 0 || errno == EPERM;
            pid_t g = getpgid(p->join_pgid);
            /* a leader of the plan not made yet is on its way: its creator
             * may be filling its memory first (restore_continue_child) */
            int coming = g < 0 && errno == ESRCH && planned(p->join_pgid);
            if (n != made || (g >= 0 && g != p->join_pgid) || coming) moved = now;
            made = n;
        }
        if (now - t0 >= JOIN_CAP_NS || (now - t0 >= JOIN_BASE_NS && now - moved >= JOIN_QUIET_NS)) break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    lz_warn("process %d: cannot join process group %d again: %s (waited %.1f s for its leader to make it; "
            "%u of the job's %u processes made, %s)", p->pid, p->join_pgid, strerror(e), (double)(now - t0) / 1e9, made,
            plan.h.nprocs, now - t0 >= JOIN_CAP_NS ? "the longest wait" : "no progress for a second");
}

/* At exactly `at`, inheritable. */
static void place(int fd, int at, const char *what)
{
    if (fd < 0 || (fd != at && dup2(fd, at) < 0)) restore_fail("cannot make %s: %s", what, strerror(errno));
    if (fd != at) close(fd);
}

static void make_objects(void)
{
    for (uint32_t j = 0; j < plan.h.nobjs; j++) {
        const struct lz_plan_obj *o = &plan.objs[j];
        if (o->creator != plan.me->pid) continue;
        char what[LZ_PATH_MAX + 64];
        if (o->kind == LZ_PO_FILE) {
            snprintf(what, sizeof what, "the shared open file %s", o->path);
            int fd = open(o->path, (int)(o->flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC | O_CLOEXEC)));
            if (fd < 0) restore_fail("cannot reopen %s, shared by processes of the job: %s", o->path, strerror(errno));
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && lseek(fd, o->offset, SEEK_SET) < 0)
                restore_fail("cannot restore the offset of %s: %s", o->path, strerror(errno));
            place(fd, o->fd, what);
            continue;
        }
        if (o->kind == LZ_PO_SOCK) {
            int sv[2];
            restore_socket_pair(&o->chan, o->path, &o->chan2, o->path2, 3, sv);
            snprintf(what, sizeof what, "the socket pair shared by processes of the job");
            place(sv[0], o->fd, what);
            place(sv[1], o->fd2, what);
            continue;
        }
        if (o->kind == LZ_PO_PTY) {
            snprintf(what, sizeof what, "pseudo-terminal %lld, shared by processes of the job", (long long)o->offset);
            place(restore_pty_object(o->path, (uint32_t)o->offset), o->fd, what);
            continue;
        }
        if (o->kind == LZ_PO_GHOST || o->kind == LZ_PO_GHOSTINO) {
            /* the inode: made here, or inherited from the inode object (made before, by an ancestor) */
            int ino = o->kind == LZ_PO_GHOST ? restore_tree_ghost_fd(o->ghost.dev, o->ghost.ino) : -1, t;
            if (ino >= 0) {
                t = fcntl(ino, F_DUPFD_CLOEXEC, 3);
            } else {
                char dir[LZ_PATH_MAX];
                snprintf(dir, sizeof dir, "%s", o->path);
                char *slash = strrchr(dir, '/');
                if (slash) *slash = 0;
                t = restore_ghost_file(o->path, dir, &o->ghost);
            }
            if (t < 0) restore_fail("cannot reopen descriptor %d: %s", o->ghost.fd, strerror(errno));
            if (o->kind == LZ_PO_GHOSTINO) {
                place(t, o->fd, "an open deleted file held by processes of the job");
                continue;
            }
            int fd = restore_ghost_reopen(t, &o->ghost);
            close(t);
            if (lseek(fd, o->ghost.offset, SEEK_SET) < 0)
                restore_fail("cannot restore the offset of descriptor %d: %s", o->ghost.fd, strerror(errno));
            place(fd, o->fd, "an open deleted file shared by processes of the job");
            continue;
        }
        if (o->kind == LZ_PO_USOCK) {
            char why[LZ_PATH_MAX + 512];
            void *data;
            if (lz_chan_data_path(o->path, &o->usock.q, &data, why, sizeof why) < 0) restore_fail("%s", why);
            snprintf(what, sizeof what, "the local socket shared by processes of the job");
            place(restore_usock_make(&o->usock, data, o->path2), o->fd, what);
            continue;
        }
        if (o->kind == LZ_PO_TCP) {
            int sv[2];
            restore_inet_pair(&o->inet, o->path, &o->inet2, o->path2, sv);
            snprintf(what, sizeof what, "the TCP connection between processes of the job");
            place(sv[0], o->fd, what);
            place(sv[1], o->fd2, what);
            continue;
        }
        if (o->kind == LZ_PO_EVENT) { /* empty or unarmed: its leader adds watches and arms it */
            snprintf(what, sizeof what, "event-loop descriptor %d, shared by processes of the job", o->event.fd);
            place(restore_event_make(&o->event, o->flags), o->fd, what);
            continue;
        }
        if (o->kind == LZ_PO_SHM) {
            snprintf(what, sizeof what, "the memory shared by processes of the job");
            int fd = memfd_create("lazarus-shared", 0);
            if (fd < 0 || ftruncate(fd, o->offset) < 0) restore_fail("cannot make %s: %s", what, strerror(errno));
            place(fd, o->fd, what);
            continue;
        }
        snprintf(what, sizeof what, "pipe:[%llu], shared by processes of the job", (unsigned long long)o->chan.ino);
        char why[LZ_PATH_MAX + 512];
        void *data;
        if (lz_chan_data_path(o->path, &o->chan, &data, why, sizeof why) < 0) restore_fail("%s", why);
        if (o->chan.kind == LZ_CH_FIFO) { /* a named pipe: its keeper, twice (each holder takes one) */
            int k = restore_new_fifo(&o->chan, data, o->path2, 3);
            place(fcntl(k, F_DUPFD_CLOEXEC, 3), o->fd2, what);
            place(k, o->fd, what);
            continue;
        }
        int ends[2];
        restore_new_pipe(&o->chan, data, 3, what, ends);
        place(ends[0], o->fd, what);
        place(ends[1], o->fd2, what);
    }
}

/* A zombie child: exits as the checkpoint saw it exit (a core-dump flag
 * is not made again: no core file is written). */
static _Noreturn void become_zombie(int status)
{
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        struct rlimit none = {0, 0};
        setrlimit(RLIMIT_CORE, &none);
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        kill(getpid(), sig);
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

static _Noreturn void exec_child(const struct lz_plan_proc *q, const char *root)
{
    char dir[LZ_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s/%s", root, q->dir);
    char *args[] = {saved_argv[0], dir, saved_argv[2], saved_argv[3], saved_argv[4], NULL};
    /* its own placement attempts start again, at the usual place; everything else is ours */
    static const char attempt[] = "LAZARUS_RESTORE_ATTEMPT=";
    char *env[16];
    int n = 0;
    for (char **e = saved_env; *e && n < (int)(sizeof env / sizeof *env) - 1; e++)
        if (strncmp(*e, attempt, sizeof attempt - 1)) env[n++] = *e;
    env[n] = NULL;
    personality((unsigned long)personality(LZ_PERSONALITY_QUERY) | ADDR_NO_RANDOMIZE);
    execve("/proc/self/exe", args, env);
    restore_fail("process %d: cannot run the restorer: %s", q->pid, strerror(errno));
}

/* A pseudo-terminal of the plan that was its session's controlling
 * terminal is again: taken by the session's leader (before it makes the
 * session's other processes), its foreground group set by a process of that
 * group once the group exists. */
static void tty_setup(void)
{
    pid_t sid = getsid(0), pgrp = getpgrp();
    for (uint32_t j = 0; j < plan.h.nobjs; j++) {
        const struct lz_plan_obj *o = &plan.objs[j];
        if (o->kind != LZ_PO_PTY || !o->pty_sid || o->pty_sid != sid) continue;
        if (o->pty_sid != plan.me->pid && o->pty_fg != pgrp) continue;
        if (fcntl(o->fd, F_GETFD) < 0) continue; /* not made where this process descends from */
        int t = ioctl(o->fd, TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC);
        if (t < 0) restore_fail("process %d: cannot open pseudo-terminal %lld: %s", plan.me->pid, (long long)o->offset, strerror(errno));
        if (o->pty_sid == plan.me->pid && ioctl(t, TIOCSCTTY, 0) < 0)
            restore_fail("process %d: cannot make pseudo-terminal %lld its session's controlling terminal again: %s",
                         plan.me->pid, (long long)o->offset, strerror(errno));
        if (o->pty_fg == pgrp && tcsetpgrp(t, pgrp) < 0)
            lz_warn("process %d: cannot make process group %d the foreground of pseudo-terminal %lld again: %s",
                    plan.me->pid, pgrp, (long long)o->offset, strerror(errno));
        close(t);
    }
}

/* Per process of the plan: made yet; a child to make after this restorer's
 * fill, going on from it (it would share enough of this memory), with its
 * part loaded to judge that. */
static uint8_t *made, *late_child;
static struct lz_image *child_img;
static int tty_done;

/* This process's children in the plan (only == 1: those of the session
 * it is in now, before its own setsid; late == 0: only those made before
 * its fill), each once.  A late child goes on in a copy of this restorer
 * (restore_continue_child), the others run a fresh restorer for their part. */
static void make_children(const char *root, int only, int late)
{
    int32_t cur = restore_sessions_cur_sid();
    for (uint32_t k = 0; k < plan.h.nprocs; k++) {
        const struct lz_plan_proc *q = &plan.procs[k];
        if (q->ppid != plan.me->pid || made[k] || (only && (q->sid != cur || q->sid == q->pid))) continue;
        if (!late && late_child[k]) continue;
        made[k] = 1;
        pid_t r = restore_sessions_clone(q);
        if (r < 0) restore_fail("cannot make process %d again with its PID: %s", q->pid, strerror(errno));
        if (r == 0) {
            /* dies with the restorer that made it until all go */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            group_setup(q);
            if (q->flags & LZ_PP_ZOMBIE) become_zombie(q->status);
            plan.me = q;
            char dir[LZ_PATH_MAX + 64];
            snprintf(dir, sizeof dir, "%s/%s", root, q->dir);
            const struct lz_image *img = late_child[k] ? &child_img[k] : NULL;
            made = late_child = NULL; /* the parent's: this process's children are its own */
            child_img = NULL;
            tty_done = 0;
            if (img) restore_continue_child(dir, img); /* returns only where it cannot */
            exec_child(q, root);
        }
    }
}

/* Children of the session it is in now (before its own setsid) not made yet. */
static int left_in_session(void)
{
    int32_t cur = restore_sessions_cur_sid();
    for (uint32_t k = 0; k < plan.h.nprocs; k++) {
        const struct lz_plan_proc *q = &plan.procs[k];
        if (q->ppid == plan.me->pid && !made[k] && q->sid == cur && q->sid != q->pid) return 1;
    }
    return 0;
}

void restore_tree_objects(void)
{
    if (!plan.me) return;
    if (plan.me->ppid == 0) group_setup(plan.me); /* the others did it when they were made */
    make_objects();
}

void restore_tree_children(const char *ckpt_dir, int late)
{
    if (!plan.me) return;
    /* the checkpoint directory the parts are in */
    char root[LZ_PATH_MAX];
    snprintf(root, sizeof root, "%s", ckpt_dir);
    if (plan.me->dir[0]) {
        char *slash = strrchr(root, '/');
        if (slash) *slash = 0;
    }
    if (!made) { /* which children to make after the fill (restore_inherit_worth) */
        int nlate = 0, nkids = 0;
        made = calloc(plan.h.nprocs, 1);
        late_child = calloc(plan.h.nprocs, 1);
        child_img = calloc(plan.h.nprocs, sizeof *child_img);
        if (!made || !late_child || !child_img) restore_fail("out of memory");
        for (uint32_t k = 0; k < plan.h.nprocs; k++) {
            const struct lz_plan_proc *q = &plan.procs[k];
            if (q->ppid != plan.me->pid || (q->flags & LZ_PP_ZOMBIE)) continue;
            char dir[LZ_PATH_MAX + 64];
            snprintf(dir, sizeof dir, "%s/%s", root, q->dir);
            late_child[k] = (uint8_t)restore_child_shares(dir, &child_img[k]);
            if (!late_child[k]) lz_image_free(&child_img[k]);
            nlate += late_child[k];
            nkids++;
        }
        char step[96];
        snprintf(step, sizeof step, "%d of its %d children to make after its fill", nlate, nkids);
        restore_trace(step);
    }
    if ((plan.me->flags & LZ_PP_SETSID) && getsid(0) != plan.me->pid) { /* deferred (restore_sessions_defer) */
        make_children(root, 1, late);
        if (left_in_session()) return; /* made after the fill: the setsid after them */
        if (setsid() < 0) lz_warn("process %d: cannot make its session again: %s", plan.me->pid, strerror(errno));
    }
    if (!tty_done) {
        tty_setup();
        tty_done = 1;
    }
    make_children(root, 0, late);
}

/* A copy of object descriptor `from` parked at >= base (prog_fd: the
 * program's descriptor it is for, in messages; -1: a pipe's end). */
static int take(int from, int base, int prog_fd)
{
    int fd = fcntl(from, F_DUPFD_CLOEXEC, base);
    if (fd < 0 && prog_fd >= 0) restore_fail("cannot take descriptor %d, shared with other processes of the job: %s", prog_fd, strerror(errno));
    if (fd < 0) restore_fail("cannot take a pipe shared with other processes of the job: %s", strerror(errno));
    return fd;
}

/* The descriptor records of this process that use an object of the plan:
 * per record, an open file parked at >= base (closed once in place), or -1. */
int *restore_tree_fds(const struct lz_image *img, int base)
{
    int *src = malloc((img->nfds + 1) * sizeof *src);
    if (!src) restore_fail("out of memory");
    for (size_t i = 0; i < img->nfds; i++) src[i] = -1;
    if (!plan.me) return src;
    for (uint32_t j = 0; j < plan.h.nobjs; j++) {
        const struct lz_plan_obj *o = &plan.objs[j];
        if (o->kind == LZ_PO_PIPE) {
            /* its ends as make_pipe gives them, where this process holds the pipe
             * (it inherited the object only if it descends from its maker) */
            int holds = 0;
            int fk = o->chan.kind == LZ_CH_FIFO ? LZ_FD_FIFO : LZ_FD_PIPE;
            for (size_t i = 0; i < img->nfds && !holds; i++) holds = (int)img->fds[i].kind == fk && img->fds[i].ino == o->chan.ino;
            if (holds && fk == LZ_FD_FIFO) restore_fifo_ends(img, o->chan.ino, take(o->fd, base, -1), base, src);
            else if (holds) restore_pipe_ends(img, o->chan.ino, take(o->fd, base, -1), take(o->fd2, base, -1), base, src);
            continue;
        }
        for (size_t i = 0; i < img->nfds; i++) {
            const struct lz_fd *f = &img->fds[i];
            if (o->kind == LZ_PO_PTY && f->kind == LZ_FD_PTY && f->ino == (uint64_t)o->offset) {
                src[i] = restore_pty_end(o->fd, f, base);
                continue;
            }
            if ((o->kind == LZ_PO_SOCK && f->kind == LZ_FD_SOCKET && (f->ino == o->chan.ino || f->ino == o->chan2.ino)) ||
                (o->kind == LZ_PO_TCP && f->kind == LZ_FD_INET && (f->ino == o->chan.ino || f->ino == o->chan2.ino))) {
                src[i] = take(f->ino == o->chan.ino ? o->fd : o->fd2, base, f->fd);
                restore_set_flags(src[i], f->flags, f->fd); /* O_NONBLOCK belongs to the description */
            } else if (o->kind == LZ_PO_FILE || o->kind == LZ_PO_USOCK || o->kind == LZ_PO_GHOST || o->kind == LZ_PO_EVENT) {
                for (uint32_t k = 0; k < plan.h.nholds; k++)
                    if (plan.holds[k].obj == j && plan.holds[k].pid == plan.me->pid && plan.holds[k].fd == f->fd) {
                        src[i] = take(o->fd, base, f->fd);
                        if (o->kind == LZ_PO_USOCK) restore_set_flags(src[i], f->flags, f->fd);
                    }
            }
        }
    }
    return src;
}

int restore_tree_shared_chan(uint64_t ino)
{
    for (uint32_t j = 0; plan.me && j < plan.h.nobjs; j++) {
        const struct lz_plan_obj *o = &plan.objs[j];
        if ((o->kind == LZ_PO_PIPE && o->chan.ino == ino) ||
            ((o->kind == LZ_PO_SOCK || o->kind == LZ_PO_TCP) && (o->chan.ino == ino || o->chan2.ino == ino)))
            return 1;
    }
    return 0;
}

int restore_tree_shared_pty(uint64_t index)
{
    for (uint32_t j = 0; plan.me && j < plan.h.nobjs; j++)
        if (plan.objs[j].kind == LZ_PO_PTY && (uint64_t)plan.objs[j].offset == index) return 1;
    return 0;
}

int restore_tree_event_other(int fd)
{
    for (uint32_t k = 0; plan.me && k < plan.h.nholds; k++) {
        const struct lz_plan_hold *h = &plan.holds[k];
        if (h->pid == plan.me->pid && h->fd == fd && h->obj < plan.h.nobjs && plan.objs[h->obj].kind == LZ_PO_EVENT)
            return plan.objs[h->obj].leader != plan.me->pid;
    }
    return 0;
}

int restore_tree_ghost_fd(uint64_t dev, uint64_t ino)
{
    for (uint32_t j = 0; plan.me && j < plan.h.nobjs; j++)
        if (plan.objs[j].kind == LZ_PO_GHOSTINO && plan.objs[j].ghost.dev == dev && plan.objs[j].ghost.ino == ino &&
            fcntl(plan.objs[j].fd, F_GETFD) >= 0)
            return plan.objs[j].fd;
    return -1;
}

int restore_tree_shm_fd(uint64_t dev, uint64_t ino)
{
    for (uint32_t j = 0; plan.me && ino && j < plan.h.nobjs; j++)
        if (plan.objs[j].kind == LZ_PO_SHM && plan.objs[j].chan.ino == dev && plan.objs[j].chan.peer == ino) return plan.objs[j].fd;
    return -1;
}

int restore_tree_go_fd(void) { return plan.me ? plan.h.go_fd : -1; }

/* Everything that can fail has been done: READY, then wait until every
 * process of the job is too.  A child that died meanwhile fails us all. */
void restore_tree_go(void)
{
    if (!plan.me) return;
    /* zombie children have exited, and the SIGCHLDs that made are not the
     * program's: all before READY (no live child runs before go) */
    for (uint32_t k = 0; k < plan.h.nprocs; k++) {
        const struct lz_plan_proc *q = &plan.procs[k];
        if (q->ppid != plan.me->pid || !(q->flags & LZ_PP_ZOMBIE)) continue;
        siginfo_t si;
        while (waitid(P_PID, (id_t)q->pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR) {}
    }
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    struct timespec zero = {0, 0};
    while (sigtimedwait(&chld, NULL, &zero) == SIGCHLD) {}
    /* from READY on, only a lost supervisor (end of file on go) stops us */
    if (plan.me->ppid) prctl(PR_SET_PDEATHSIG, 0);
    char msg[48];
    int n = snprintf(msg, sizeof msg, "READY %d", plan.me->pid);
    if (send(restore_report_fd, msg, (size_t)n, MSG_NOSIGNAL) < 0) restore_fail("cannot reach the supervisor: %s", strerror(errno));
    for (;;) {
        struct pollfd p = {plan.h.go_fd, POLLIN, 0};
        int r = poll(&p, 1, 500);
        if (r > 0) {
            char c;
            ssize_t m = read(plan.h.go_fd, &c, 1);
            if (m == 1) break;
            if (m == 0) _exit(1); /* the supervisor is gone: nothing may run */
            continue;
        }
        for (uint32_t k = 0; k < plan.h.nprocs; k++) {
            const struct lz_plan_proc *q = &plan.procs[k];
            if (q->ppid != plan.me->pid || (q->flags & LZ_PP_ZOMBIE)) continue;
            siginfo_t si;
            memset(&si, 0, sizeof si);
            if (waitid(P_PID, (id_t)q->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == q->pid)
                restore_fail("process %d of the job could not be restored", q->pid);
        }
    }
    close(plan.h.go_fd);
}
