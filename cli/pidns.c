/* Starting the restorer in a process that has the checkpointed PID: as root
 * by clone3(set_tid) where the PID and the thread IDs are free; otherwise
 * inside a private PID namespace (with a user namespace mapping only the
 * caller's own uid and gid, for ordinary users), where a small init is PID 1
 * and the program gets its old number.  The init reports the program's wait
 * status on a pipe. */
#include "cli.h"
#include "util.h"
#include "restart_plan.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static pid_t clone3_pid(uint64_t flags, pid_t want)
{
    struct clone_args a;
    memset(&a, 0, sizeof a);
    a.flags = flags;
    a.exit_signal = SIGCHLD;
    pid_t tid = want;
    if (want > 0) {
        a.set_tid = (uint64_t)(uintptr_t)&tid;
        a.set_tid_size = 1;
    }
    return (pid_t)syscall(SYS_clone3, &a, sizeof a);
}

/* In a user namespace of its own, an ordinary user's process has every
 * capability there until it execs the restorer (its uid is not 0 there, so
 * exec drops them); the restorer needs CAP_SYS_ADMIN over the PID namespace
 * to give each thread its TID (clone3 set_tid).  It is kept as an ambient
 * capability across the exec, and the restorer drops every capability before
 * the program runs again (LAZARUS_DROP_CAPS). */
static int keep_sys_admin(void)
{
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (syscall(SYS_capget, &h, d) < 0) return -1;
    d[CAP_SYS_ADMIN / 32].inheritable |= 1u << (CAP_SYS_ADMIN % 32);
    if (syscall(SYS_capset, &h, d) < 0) return -1;
    return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SYS_ADMIN, 0, 0);
}

static _Noreturn void exec_restorer(struct supervisor *s, int ctl, const char *ckpt_dir, uint64_t index, int in_userns)
{
    const char *store = s->dir, *compress = s->compress;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char idx[32], fd[16];
    snprintf(idx, sizeof idx, "%llu", (unsigned long long)index);
    snprintf(fd, sizeof fd, "%d", ctl);
    fcntl(ctl, F_SETFD, 0);
    const char *bin = install_path("bin/lazarus-restore");
    char *args[] = {(char *)bin, (char *)ckpt_dir, (char *)store, idx, fd, NULL};
    /* rseq off in the restorer: the program's registration is installed at the end */
    char cz[64];
    snprintf(cz, sizeof cz, "LAZARUS_COMPRESS=%s", compress);
    char plan[48];
    snprintf(plan, sizeof plan, LZ_PLAN_ENV "=%d", s->plan_fd);
    char rolled[48];
    snprintf(rolled, sizeof rolled, LZ_ROLLED_ENV "=%d", s->rolled_read);
    char inherit[64];
    char *env[] = {"GLIBC_TUNABLES=glibc.pthread.rseq=0", cz, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int ne = 2;
    if (s->plan_fd >= 0) env[ne++] = plan; /* a job of several processes: the restorers follow the plan */
    if (s->rolled_read >= 0) { fcntl(s->rolled_read, F_SETFD, 0); env[ne++] = rolled; } /* one: it waits for the rollback */
    if (in_userns && keep_sys_admin() == 0) env[ne++] = "LAZARUS_DROP_CAPS=1";
    if (getenv("LAZARUS_TRACE")) env[ne++] = "LAZARUS_TRACE=1";
    if (s->lazy) env[ne++] = "LAZARUS_LAZY=1"; /* restart --lazy (restorer/restore_lazy.c) */
    if (getenv("LAZARUS_TEST_NO_TIMER_IDS")) env[ne++] = "LAZARUS_TEST_NO_TIMER_IDS=1"; /* tests (restore_timers.c) */
    const char *im = getenv("LAZARUS_INHERIT_MIN_KIB"); /* tests, measurements (restorer/restore_inherit.c) */
    if (im && strlen(im) < 32) {
        snprintf(inherit, sizeof inherit, "LAZARUS_INHERIT_MIN_KIB=%s", im);
        env[ne++] = inherit;
    }
    /* no randomization: the restorer then sits just below the stack top */
    personality(ADDR_NO_RANDOMIZE);
    execve(bin, args, env);
    lz_err("cannot run %s: %s", bin, strerror(errno));
    _exit(1);
}

static int write_file(pid_t pid, const char *name, const char *text)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, name);
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = lz_write_all(fd, text, strlen(text));
    close(fd);
    return rc;
}

pid_t spawn_restorer(struct supervisor *s, int child_ctl, pid_t want, int ids_free, const char *ckpt_dir, uint64_t index)
{
    if (geteuid() == 0 && ids_free) {
        pid_t p = clone3_pid(0, want);
        if (p == 0) exec_restorer(s, child_ctl, ckpt_dir, index, 0);
        if (p > 0) { s->prog = p; return p; }
    }
    int sync[2], status[2];
    if (pipe2(sync, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0) return -1;
    uint64_t flags = CLONE_NEWPID | (geteuid() != 0 ? CLONE_NEWUSER : 0);
    pid_t init = clone3_pid(flags, 0);
    if (init < 0) {
        lz_warn("cannot create a PID namespace (%s): the program gets a new PID, not %d", strerror(errno), want);
        close(sync[0]); close(sync[1]); close(status[0]); close(status[1]);
        pid_t p = fork();
        if (p == 0) exec_restorer(s, child_ctl, ckpt_dir, index, 0);
        s->prog = p;
        return p;
    }
    if (init == 0) {
        /* PID 1 of the new namespace */
        close(sync[1]);
        close(status[0]);
        if (s->go_fd >= 0) close(s->go_fd); /* only the supervisor says go */
        if (s->rolled_fd >= 0) close(s->rolled_fd); /* and that the files are rolled back */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char c;
        if (read(sync[0], &c, 1) != 1) _exit(1);
        close(sync[0]);
        pid_t p = clone3_pid(0, want);
        if (p < 0) {
            lz_warn("cannot restore PID %d (%s): the program gets a new one", want, strerror(errno));
            p = fork();
        }
        if (p == 0) { close(status[1]); exec_restorer(s, child_ctl, ckpt_dir, index, (flags & CLONE_NEWUSER) != 0); }
        close(child_ctl);
        if (s->plan_fd >= 0) { close(s->plan_fd); close(s->plan_fd + 1); } /* the plan and the go pipe's read end */
        for (;;) {
            int st;
            pid_t w = wait(&st);
            if (w < 0 && errno == ECHILD) _exit(0);
            if (w == p) {
                if (lz_write_all(status[1], &st, sizeof st) < 0) _exit(1);
                _exit(0);
            }
        }
    }
    close(sync[0]);
    close(status[1]);
    if (flags & CLONE_NEWUSER) {
        char map[64];
        write_file(init, "setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", geteuid(), geteuid());
        int rc = write_file(init, "uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", getegid(), getegid());
        rc |= write_file(init, "gid_map", map);
        if (rc < 0) lz_warn("cannot map the user into the restart namespace: %s", strerror(errno));
    }
    if (write(sync[1], "g", 1) != 1) lz_warn("cannot start the restart namespace");
    close(sync[1]);
    s->status_fd = status[0];
    s->prog = 0;
    return init;
}
