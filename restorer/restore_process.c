/* Process state outside memory and descriptors. */
#include "restorer.h"
#include "lzsys.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

void restore_process_state(struct restore_ctx *rc)
{
    const struct lz_proc *p = rc->img.proc;
    const char *cwd = lz_str(&rc->img, p->cwd);
    if (chdir(cwd) < 0) restore_fail("cannot enter the program's working directory %s: %s", cwd, strerror(errno));
    umask(p->umask);
    for (int r = 0; r < LZ_NRLIMITS && r < RLIM_NLIMITS; r++) {
        struct rlimit rl = {p->rlimits[r].cur, p->rlimits[r].max}, now;
        getrlimit(r, &now);
        if (rl.rlim_cur == now.rlim_cur && rl.rlim_max == now.rlim_max) continue;
        if (setrlimit(r, &rl) < 0) {
            /* an ordinary user cannot raise a hard limit: keep ours, lower the soft one */
            rl.rlim_max = now.rlim_max;
            if (rl.rlim_cur > rl.rlim_max) rl.rlim_cur = rl.rlim_max;
            if (setrlimit(r, &rl) < 0) lz_warn("could not restore resource limit %d", r);
        }
    }
    if (personality(p->personality) < 0) lz_warn("could not restore the personality flags");
    for (int sig = 1; sig <= LZ_NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        long e = lz_sc4(SYS_rt_sigaction, sig, &p->sigactions[sig - 1], NULL, LZ_KSIGSET_SIZE);
        if (e < 0 && sig < LZ_KSIGRTMIN) restore_fail("cannot restore the action of signal %d: %s", sig, strerror((int)-e));
    }
    prctl(PR_SET_NAME, p->comm);
}

void restore_mm(struct restore_ctx *rc)
{
    const struct lz_proc *p = rc->img.proc;
    struct prctl_mm_map m;
    memset(&m, 0, sizeof m);
    m.start_code = p->start_code; m.end_code = p->end_code;
    m.start_data = p->start_data; m.end_data = p->end_data;
    m.start_brk = p->start_brk; m.brk = p->brk;
    m.start_stack = p->start_stack;
    m.arg_start = p->arg_start; m.arg_end = p->arg_end;
    m.env_start = p->env_start; m.env_end = p->env_end;
    m.auxv = (void *)rc->img.auxv;
    m.auxv_size = (uint32_t)rc->img.auxv_len;
    /* /proc/PID/exe the program's again, once no mapping of the restorer's file is left
     * (restore_exe.c); if the kernel refuses, the runtime tries again when the restorer is gone */
    const char *path = lz_str(&rc->img, p->exe);
    int exe = path[0] && restore_leave_exe() == 0 ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    m.exe_fd = exe >= 0 ? (uint32_t)exe : (uint32_t)-1;
    int r = prctl(PR_SET_MM, PR_SET_MM_MAP, &m, sizeof m, 0);
    if (r < 0 && exe >= 0) { /* the exe refused (changes nothing else): the layout without it */
        m.exe_fd = (uint32_t)-1;
        r = prctl(PR_SET_MM, PR_SET_MM_MAP, &m, sizeof m, 0);
    }
    if (exe >= 0) close(exe);
    if (r < 0) restore_fail("cannot restore the program's memory layout (prctl PR_SET_MM_MAP): %s", strerror(errno));
}

/* A descriptor of the program's executable above all of the program's own,
 * for the runtime's PR_SET_MM_EXE_FILE. */
int restore_exe_fd(struct restore_ctx *rc)
{
    const char *exe = lz_str(&rc->img, rc->img.proc->exe);
    int fd = exe[0] ? open(exe, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0) return -1;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, image_max_fd(&rc->img) + 1);
    close(fd);
    return high;
}
