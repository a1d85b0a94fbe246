/* Process-wide state outside the address space: identity, mm fields, signal
 * actions, timers, rlimits, cwd, umask.  (Each thread's own state:
 * rt_threads.c.) */
#include "rt.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <ucontext.h>

static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

/* /proc/self/stat fields 26-28 and 45-51 (man 5 proc). */
static int read_mm_fields(struct lz_proc *p)
{
    char buf[2048];
    long n = rt_read_file("/proc/self/stat", buf, sizeof buf - 1);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *s = buf + n;
    while (s > buf && *s != ')') s--; /* comm may contain spaces */
    if (*s != ')') return -1;
    s += 2;
    uint64_t f[64] = {0};
    int field = 3;
    while (*s && field < 64) {
        if (*s == ' ') { s++; continue; }
        uint64_t v = 0;
        int neg = *s == '-';
        if (neg) s++;
        while (*s >= '0' && *s <= '9') v = v * 10 + (uint64_t)(*s++ - '0');
        while (*s && *s != ' ') s++;
        f[field++] = neg ? (uint64_t)-(int64_t)v : v;
    }
    if (field < 52) return -1;
    p->start_code = f[26]; p->end_code = f[27]; p->start_stack = f[28];
    p->start_data = f[45]; p->end_data = f[46]; p->start_brk = f[47];
    p->arg_start = f[48]; p->arg_end = f[49]; p->env_start = f[50]; p->env_end = f[51];
    return 0;
}

/* /proc/self/exe made the program's again after a restart, once the
 * restorer (the exe until now) is unmapped: the kernel refuses while the old
 * exe is mapped.  PR_SET_MM_MAP with the layout as it is now (the restorer
 * set it; auxv left as it is) needs CAP_CHECKPOINT_RESTORE (or
 * CAP_SYS_ADMIN), PR_SET_MM_EXE_FILE CAP_SYS_RESOURCE: a restart as root
 * has one or the other; an ordinary user's restorer dropped every
 * capability before the program runs, so its exe stays the restorer. */
void rt_set_exe(int fd)
{
    struct lz_proc p;
    struct prctl_mm_map m;
    memset(&m, 0, sizeof m);
    if (read_mm_fields(&p) == 0) {
        m.start_code = p.start_code; m.end_code = p.end_code;
        m.start_data = p.start_data; m.end_data = p.end_data;
        m.start_brk = p.start_brk; m.brk = (uint64_t)lz_sc1(SYS_brk, 0);
        m.start_stack = p.start_stack;
        m.arg_start = p.arg_start; m.arg_end = p.arg_end;
        m.env_start = p.env_start; m.env_end = p.env_end;
        m.exe_fd = (uint32_t)fd;
        if (lz_sc5(SYS_prctl, PR_SET_MM, PR_SET_MM_MAP, &m, sizeof m, 0) == 0) return;
    }
    lz_sc3(SYS_prctl, PR_SET_MM, PR_SET_MM_EXE_FILE, fd);
}

/* Who the process is (the checkpointing thread's credentials; the threads of
 * a process share them through libc): real, effective and saved ids, the
 * supplementary groups as a count and the XXH3-64 of the gid_t array in the
 * kernel's order (getgroups: sorted), and the capability sets.  A restart
 * gives exactly these or refuses (cli/privilege.c).  The whole group list is
 * hashed: it goes to the scratch arena (up to NGROUPS_MAX = 65536 ids, 256
 * KiB), not to the stack, which may be a small alternate signal stack. */
static int capture_creds(struct rt_ckpt *ck, struct lz_proc *p)
{
    uint32_t r = 0, e = 0, s = 0;
    long rc = lz_sc3(SYS_getresuid, &r, &e, &s);
    if (rc < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read the user ids (errno %ld)", -rc); return -1; }
    p->uid = r; p->euid = e; p->suid = s;
    rc = lz_sc3(SYS_getresgid, &r, &e, &s);
    if (rc < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read the group ids (errno %ld)", -rc); return -1; }
    p->gid = r; p->egid = e; p->sgid = s;
    long n = lz_sc2(SYS_getgroups, 0, NULL);
    uint32_t *groups = n > 0 ? arena_alloc(&ck->arena, (size_t)n * sizeof *groups) : NULL;
    if (n > 0 && groups) n = lz_sc2(SYS_getgroups, n, groups);
    if (n < 0 || (n > 0 && !groups)) {
        rt_fmt(ck->err, sizeof ck->err, "cannot read the supplementary groups (errno %ld)", n < 0 ? -n : (long)ENOMEM);
        return -1;
    }
    uint32_t none = 0;
    p->ngroups = (uint32_t)n;
    ck->groups = groups;
    p->groups_xxh3 = XXH3_64bits(n > 0 ? (const void *)groups : &none, (size_t)n * sizeof *groups);
    struct { uint32_t version; int pid; } h = {0x20080522 /* _LINUX_CAPABILITY_VERSION_3 */, 0};
    struct { uint32_t eff, prm, inh; } d[2] = {{0, 0, 0}, {0, 0, 0}};
    rc = lz_sc2(SYS_capget, &h, d);
    if (rc < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read the capabilities (errno %ld)", -rc); return -1; }
    p->cap_eff = (uint64_t)d[1].eff << 32 | d[0].eff;
    p->cap_prm = (uint64_t)d[1].prm << 32 | d[0].prm;
    p->cap_inh = (uint64_t)d[1].inh << 32 | d[0].inh;
    return 0;
}

int rt_capture_proc(struct rt_ckpt *ck, void *ucontext)
{
    (void)ucontext;
    struct lz_proc *p = ck->proc;
    char buf[LZ_PATH_MAX];
    p->pid = (int32_t)lz_sc0(SYS_getpid);
    p->ppid = (int32_t)lz_sc0(SYS_getppid);
    p->pgid = (int32_t)lz_sc1(SYS_getpgid, 0);
    p->sid = (int32_t)lz_sc1(SYS_getsid, 0);
    if (capture_creds(ck, p) < 0) return -1;
    long um = lz_sc1(SYS_umask, 0);
    lz_sc1(SYS_umask, um);
    p->umask = (uint32_t)um;
    p->personality = (uint32_t)lz_sc1(SYS_personality, LZ_PERSONALITY_QUERY);
    long cn = rt_read_file("/proc/self/comm", p->comm, sizeof p->comm); /* the main thread's name */
    if (cn > 0) p->comm[cn - 1] = 0;
    long n = lz_sc2(SYS_getcwd, buf, sizeof buf);
    if (n < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read the working directory (errno %ld)", -n); return -1; }
    p->cwd = strings_add(&ck->strings, buf);
    n = lz_sc4(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) { buf[n] = 0; p->exe = strings_add(&ck->strings, buf); }
    p->xcr0 = xgetbv0();
    if (read_mm_fields(p) < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/stat"); return -1; }
    p->brk = (uint64_t)lz_sc1(SYS_brk, 0);
    for (int sig = 1; sig <= LZ_NSIG; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        lz_sc4(SYS_rt_sigaction, sig, NULL, &p->sigactions[sig - 1], LZ_KSIGSET_SIZE);
    }
    for (int w = 0; w < 3; w++) {
        struct itimerval it;
        lz_sc2(SYS_getitimer, w, &it);
        p->itimers[w].interval_us = it.it_interval.tv_sec * 1000000 + it.it_interval.tv_usec;
        p->itimers[w].value_us = it.it_value.tv_sec * 1000000 + it.it_value.tv_usec;
    }
    for (int r = 0; r < LZ_NRLIMITS && r < RLIM_NLIMITS; r++) {
        struct rlimit rl;
        lz_sc4(SYS_prlimit64, 0, r, NULL, &rl);
        p->rlimits[r].cur = rl.rlim_cur; p->rlimits[r].max = rl.rlim_max;
    }
    p->resume_addr = (uint64_t)&rt_resume_block;
    if (rt_capture_timers(ck) < 0) return -1;
    ck->auxv = arena_alloc(&ck->arena, 4096);
    long al = ck->auxv ? rt_read_file("/proc/self/auxv", ck->auxv, 4096) : -1;
    ck->auxv_len = al > 0 ? (size_t)al : 0;
    return 0;
}
