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

int rt_capture_proc(struct rt_ckpt *ck, void *ucontext)
{
    (void)ucontext;
    struct lz_proc *p = ck->proc;
    char buf[LZ_PATH_MAX];
    p->pid = (int32_t)lz_sc0(SYS_getpid);
    p->ppid = (int32_t)lz_sc0(SYS_getppid);
    p->pgid = (int32_t)lz_sc1(SYS_getpgid, 0);
    p->sid = (int32_t)lz_sc1(SYS_getsid, 0);
    p->uid = (uint32_t)lz_sc0(SYS_getuid);
    p->gid = (uint32_t)lz_sc0(SYS_getgid);
    long um = lz_sc1(SYS_umask, 0);
    lz_sc1(SYS_umask, um);
    p->umask = (uint32_t)um;
    p->personality = (uint32_t)lz_sc1(SYS_personality, 0xffffffff);
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
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        lz_sc4(SYS_rt_sigaction, sig, NULL, &p->sigactions[sig - 1], 8);
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
    /* POSIX timers live in the kernel and are not restored yet: refuse. */
    char tbuf[64];
    if (rt_read_file("/proc/self/timers", tbuf, sizeof tbuf) > 0) {
        rt_fmt(ck->err, sizeof ck->err, "the program uses POSIX timers (timer_create), which cannot be checkpointed yet");
        return -1;
    }
    ck->auxv = arena_alloc(&ck->arena, 4096);
    long al = ck->auxv ? rt_read_file("/proc/self/auxv", ck->auxv, 4096) : -1;
    ck->auxv_len = al > 0 ? (size_t)al : 0;
    return 0;
}
