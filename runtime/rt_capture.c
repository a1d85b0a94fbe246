/* Process-wide state outside the address space: identity, mm fields, thread
 * registers the kernel keeps (fs base, rseq, robust list), signal state,
 * timers, rlimits, cwd, umask. */
#include "rt.h"
#include "hash.h"
#include <asm/prctl.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/rseq.h>
#include <sys/time.h>
#include <ucontext.h>

#define RSEQ_SIG_X86 0x53053053

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

static void capture_pending(struct lz_proc *p)
{
    /* Pending signals are dequeued to learn their siginfo and queued again
     * at once, so the running program sees no difference. */
    uint64_t pend = 0;
    lz_sc2(SYS_rt_sigpending, &pend, 8);
    pend &= ~(1ull << (LZ_SIGCKPT - 1));
    for (int sig = 1; sig <= 64 && pend && p->npending < LZ_MAX_PENDING; sig++) {
        if (!(pend & (1ull << (sig - 1)))) continue;
        for (;;) {
            uint64_t one = 1ull << (sig - 1);
            struct timespec zero = {0, 0};
            struct lz_siginfo_rec *r = &p->pending[p->npending];
            long got = lz_sc4(SYS_rt_sigtimedwait, &one, r->info, &zero, 8);
            if (got != sig) break;
            r->signo = sig;
            p->npending++;
            if (sig < 32 || p->npending >= LZ_MAX_PENDING) break; /* standard signals don't queue */
        }
    }
    long pid = lz_sc0(SYS_getpid), tid = lz_sc0(SYS_gettid);
    for (uint32_t i = 0; i < p->npending; i++)
        lz_sc4(SYS_rt_tgsigqueueinfo, pid, tid, p->pending[i].signo, p->pending[i].info);
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
    lz_sc2(SYS_prctl, PR_GET_NAME, p->comm);
    long n = lz_sc2(SYS_getcwd, buf, sizeof buf);
    if (n < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read the working directory (errno %ld)", -n); return -1; }
    p->cwd = strings_add(&ck->strings, buf);
    n = lz_sc4(SYS_readlinkat, AT_FDCWD, "/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) { buf[n] = 0; p->exe = strings_add(&ck->strings, buf); }
    p->xcr0 = xgetbv0();
    if (read_mm_fields(p) < 0) { rt_fmt(ck->err, sizeof ck->err, "cannot read /proc/self/stat"); return -1; }
    p->brk = (uint64_t)lz_sc1(SYS_brk, 0);
    lz_sc2(SYS_arch_prctl, ARCH_GET_FS, &p->fs_base);
    lz_sc2(SYS_arch_prctl, ARCH_GET_GS, &p->gs_base);
    if (__rseq_size > 0) {
        p->rseq_addr = p->fs_base + (uint64_t)__rseq_offset;
        p->rseq_sig = RSEQ_SIG_X86;
        /* Registering again tells us the registered length: -EBUSY = same. */
        uint32_t lens[2] = {32, __rseq_size};
        p->rseq_len = 0;
        for (int i = 0; i < 2 && !p->rseq_len; i++)
            if (lz_sc4(SYS_rseq, p->rseq_addr, lens[i], 0, RSEQ_SIG_X86) == -EBUSY) p->rseq_len = lens[i];
        if (!p->rseq_len) p->rseq_addr = 0; /* not registered (e.g. glibc.pthread.rseq=0) */
    }
    lz_sc3(SYS_get_robust_list, 0, &p->robust_list, &p->robust_len);
    lz_sc2(SYS_prctl, PR_GET_TID_ADDRESS, &p->tid_address);
    stack_t ss;
    lz_sc2(SYS_sigaltstack, NULL, &ss);
    p->altstack_sp = (uint64_t)ss.ss_sp; p->altstack_size = ss.ss_size; p->altstack_flags = ss.ss_flags & ~SS_ONSTACK;
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == SIGKILL || sig == SIGSTOP) continue;
        lz_sc4(SYS_rt_sigaction, sig, NULL, &p->sigactions[sig - 1], 8);
    }
    lz_sc4(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &p->handler_sigmask, 8);
    capture_pending(p);
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
