/* Stores into writable shared file mappings, seen through write protection
 * (files/track_maps.c keeps the mappings and saves a page before its first
 * store of an interval): the SIGSEGV handler that lets a protected page's
 * first store go on once its old content is saved, the memory calls that
 * change what is mapped where (mmap is in rt_files.c), msync, and the calls in
 * which the kernel itself writes into the program's memory: a kernel write
 * into a protected page fails with EFAULT instead of faulting, so their
 * target is opened first.  Every entry costs one load when the program has
 * no such mapping (fj_maps_any). */
#include "rt.h"
#include "track.h"
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

/* ------------------------------------------------------------------ SIGSEGV */

static int segv_ours;               /* our handler is installed */
static struct sigaction prog_segv;  /* the program's own SIGSEGV disposition */

static int real_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
    static int (*f)(int, const struct sigaction *, struct sigaction *);
    if (!f) f = (int (*)(int, const struct sigaction *, struct sigaction *))dlsym(RTLD_NEXT, "sigaction");
    return f(sig, act, old);
}

/* Not a store into a protected page: what the program asked for SIGSEGV. */
static void chain(int sig, siginfo_t *si, void *uc)
{
    struct sigaction p = prog_segv;
    int fault = si->si_code > 0; /* raised by the kernel: the instruction faults again on return */
    if (p.sa_handler == SIG_DFL || (p.sa_handler == SIG_IGN && fault)) {
        struct sigaction d;
        memset(&d, 0, sizeof d);
        d.sa_handler = SIG_DFL;
        real_sigaction(SIGSEGV, &d, NULL); /* the program ends as it would have */
        segv_ours = 0;
        if (!fault) lz_sc3(SYS_tgkill, lz_sc0(SYS_getpid), lz_sc0(SYS_gettid), SIGSEGV);
        return;
    }
    if (p.sa_handler == SIG_IGN) return;
    if (p.sa_flags & SA_RESETHAND) { prog_segv.sa_handler = SIG_DFL; prog_segv.sa_flags &= ~SA_SIGINFO; }
    /* the program's handler runs with the mask it asked for */
    uint64_t mask = ((ucontext_t *)uc)->uc_sigmask.__val[0], add;
    memcpy(&add, &p.sa_mask, sizeof add);
    mask = (mask | add) & ~(1ull << (SIGSEGV - 1)) & ~(1ull << (LZ_SIGCKPT - 1));
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &mask, NULL, LZ_KSIGSET_SIZE);
    if (p.sa_flags & SA_SIGINFO) p.sa_sigaction(sig, si, uc);
    else p.sa_handler(sig);
}

/* A fault inside the save itself (a bug) is not ours: the lock is held. */
static __thread int in_fault __attribute__((tls_model("initial-exec")));

static void segv_handler(int sig, siginfo_t *si, void *uc)
{
    int saved = errno;
    if (si->si_code == SEGV_ACCERR && !in_fault) {
        in_fault = 1;
        int r = fj_map_fault(si->si_addr); /* (runs on a stack of its own: this may be a small alternate one) */
        in_fault = 0;
        if (r > 0) { errno = saved; return; }
        if (r < 0) {
            /* its undo cannot be recorded (said): the store must not happen,
             * as when the kernel cannot allocate a page for it */
            lz_sc3(SYS_tgkill, lz_sc0(SYS_getpid), lz_sc0(SYS_gettid), SIGBUS);
            errno = saved;
            return;
        }
    }
    chain(sig, si, uc);
    errno = saved;
}

void rt_shmaps_start(void)
{
    if (segv_ours) return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = segv_handler;
    /* SA_ONSTACK: a stack overflow still reaches the program's handler on its
     * alternate stack; SA_NODEFER: a fault inside the program's handler,
     * called from ours, is taken like any */
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER | SA_RESTART;
    sigfillset(&sa.sa_mask);
    sigdelset(&sa.sa_mask, SIGSEGV);
    if (real_sigaction(SIGSEGV, &sa, &prog_segv) < 0) return;
    if ((void *)prog_segv.sa_sigaction == (void *)segv_handler) {
        memset(&prog_segv, 0, sizeof prog_segv);
        prog_segv.sa_handler = SIG_DFL;
    }
    segv_ours = 1;
}

int rt_segv_sigaction(const struct sigaction *act, struct sigaction *old)
{
    if (!segv_ours) return 0;
    if (old) *old = prog_segv;
    if (act) {
        prog_segv = *act;
        sigdelset(&prog_segv.sa_mask, SIGSEGV);
    }
    return 1;
}

int rt_segv_taken(void) { return segv_ours; }

/* ------------------------------------------------------------------ mapping calls */

RT_API int munmap(void *addr, size_t len)
{
    REAL(int, munmap, void *, size_t);
    if (!fj_maps_any()) return real_munmap(addr, len);
    rt_enter();
    int r = real_munmap(addr, len);
    if (r == 0) fj_map_removed(addr, len);
    rt_leave();
    return r;
}

RT_API void *mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
    REAL(void *, mremap, void *, size_t, size_t, int, ...);
    void *to = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        to = va_arg(ap, void *);
        va_end(ap);
    }
    if (!fj_maps_any()) return real_mremap(old, oldlen, newlen, flags, to);
    rt_enter();
    fj_map_before_move(old, oldlen);
    void *r = real_mremap(old, oldlen, newlen, flags, to);
    if (r != MAP_FAILED) {
        int c = fj_map_moved(old, oldlen, r, newlen, oldlen == 0 || (flags & MREMAP_DONTUNMAP));
        if (c < 0) fj_report("mremap", NULL, c);
    }
    rt_leave();
    return r;
}

RT_API int mprotect(void *addr, size_t len, int prot)
{
    REAL(int, mprotect, void *, size_t, int);
    if (!fj_maps_any()) return real_mprotect(addr, len, prot);
    rt_enter();
    int r = fj_map_protect(addr, len, prot);
    rt_leave();
    if (r < 0) { errno = -r; return -1; }
    return 0;
}

RT_API int msync(void *addr, size_t len, int flags)
{
    REAL(int, msync, void *, size_t, int);
    if (!fj_maps_any()) return real_msync(addr, len, flags);
    int r = fj_map_sync(addr, len, flags);
    if (r < 0) { errno = -r; return -1; }
    return 0;
}

/* ------------------------------------------------------------------ the kernel's writes */

/* Opens what the kernel is about to write into: 1 something was opened (a
 * checkpoint between this and the call protects it again: EFAULT, retried),
 * 0 nothing of ours, -1 with errno (its undo could not be recorded). */
static int fill(const void *buf, size_t n)
{
    int c = fj_map_before_fill(buf, n);
    if (c < 0) { fj_report("read into a shared mapping", NULL, c); errno = -c; return -1; }
    return c;
}

static int fill_iov(const struct iovec *iov, int cnt)
{
    int any = 0;
    for (int i = 0; i < cnt; i++) {
        int c = fill(iov[i].iov_base, iov[i].iov_len);
        if (c < 0) return c;
        any |= c;
    }
    return any;
}

/* The call, after its target is opened; again if it failed with EFAULT and
 * opening finds something of ours there (a checkpoint protected it again
 * between the two, or the lock-free look missed it). */
#define RETRIED(call, filled)                                                              \
    for (int tries_ = 0;; tries_++) {                                                      \
        int c_ = (filled);                                                                 \
        if (c_ < 0) return -1;                                                             \
        ssize_t r_ = (call);                                                               \
        if (r_ < 0 && errno == EFAULT && tries_ < 64) {                                    \
            int again_ = (filled);                                                         \
            if (again_ < 0) return -1;                                                     \
            if (again_ > 0) continue;                                                      \
            errno = EFAULT;                                                                \
        }                                                                                  \
        return r_;                                                                         \
    }

RT_API ssize_t read(int fd, void *buf, size_t n)
{
    REAL(ssize_t, read, int, void *, size_t);
    if (!fj_maps_any()) return real_read(fd, buf, n);
    RETRIED(real_read(fd, buf, n), fill(buf, n));
}

RT_API ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    REAL(ssize_t, __read_chk, int, void *, size_t, size_t);
    if (!fj_maps_any()) return real___read_chk(fd, buf, n, buflen);
    RETRIED(real___read_chk(fd, buf, n, buflen), fill(buf, n));
}

RT_API ssize_t pread64(int fd, void *buf, size_t n, off_t off)
{
    REAL(ssize_t, pread64, int, void *, size_t, off_t);
    if (!fj_maps_any()) return real_pread64(fd, buf, n, off);
    RETRIED(real_pread64(fd, buf, n, off), fill(buf, n));
}
RT_API ssize_t pread(int fd, void *buf, size_t n, off_t off) { return pread64(fd, buf, n, off); }

RT_API ssize_t __pread64_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    REAL(ssize_t, __pread64_chk, int, void *, size_t, off_t, size_t);
    if (!fj_maps_any()) return real___pread64_chk(fd, buf, n, off, buflen);
    RETRIED(real___pread64_chk(fd, buf, n, off, buflen), fill(buf, n));
}

RT_API ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    REAL(ssize_t, readv, int, const struct iovec *, int);
    if (!fj_maps_any()) return real_readv(fd, iov, cnt);
    RETRIED(real_readv(fd, iov, cnt), fill_iov(iov, cnt));
}

RT_API ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off_t off)
{
    REAL(ssize_t, preadv64, int, const struct iovec *, int, off_t);
    if (!fj_maps_any()) return real_preadv64(fd, iov, cnt, off);
    RETRIED(real_preadv64(fd, iov, cnt, off), fill_iov(iov, cnt));
}
RT_API ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) { return preadv64(fd, iov, cnt, off); }

RT_API ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    REAL(ssize_t, preadv64v2, int, const struct iovec *, int, off_t, int);
    if (!fj_maps_any()) return real_preadv64v2(fd, iov, cnt, off, flags);
    RETRIED(real_preadv64v2(fd, iov, cnt, off, flags), fill_iov(iov, cnt));
}
RT_API ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags) { return preadv64v2(fd, iov, cnt, off, flags); }

RT_API ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    REAL(ssize_t, recv, int, void *, size_t, int);
    if (!fj_maps_any()) return real_recv(fd, buf, n, flags);
    RETRIED(real_recv(fd, buf, n, flags), fill(buf, n));
}

RT_API ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    REAL(ssize_t, __recv_chk, int, void *, size_t, size_t, int);
    if (!fj_maps_any()) return real___recv_chk(fd, buf, n, buflen, flags);
    RETRIED(real___recv_chk(fd, buf, n, buflen, flags), fill(buf, n));
}

RT_API ssize_t recvfrom(int fd, void *buf, size_t n, int flags, struct sockaddr *from, socklen_t *fromlen)
{
    REAL(ssize_t, recvfrom, int, void *, size_t, int, struct sockaddr *, socklen_t *);
    if (!fj_maps_any()) return real_recvfrom(fd, buf, n, flags, from, fromlen);
    RETRIED(real_recvfrom(fd, buf, n, flags, from, fromlen), fill(buf, n));
}

RT_API ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
    REAL(ssize_t, recvmsg, int, struct msghdr *, int);
    if (!fj_maps_any()) return real_recvmsg(fd, msg, flags);
    RETRIED(real_recvmsg(fd, msg, flags), fill_iov(msg->msg_iov, (int)msg->msg_iovlen));
}

/* stdio reads large requests straight into the caller's buffer with an
 * internal read(): no retry possible there, so no checkpoint in between. */
RT_API size_t fread(void *ptr, size_t size, size_t n, FILE *f)
{
    REAL(size_t, fread, void *, size_t, size_t, FILE *);
    if (!fj_maps_any()) return real_fread(ptr, size, n, f);
    rt_enter();
    size_t r = fill(ptr, size * n) < 0 ? 0 : real_fread(ptr, size, n, f);
    rt_leave();
    return r;
}

RT_API size_t __fread_chk(void *ptr, size_t ptrlen, size_t size, size_t n, FILE *f)
{
    REAL(size_t, __fread_chk, void *, size_t, size_t, size_t, FILE *);
    if (!fj_maps_any()) return real___fread_chk(ptr, ptrlen, size, n, f);
    rt_enter();
    size_t r = fill(ptr, size * n) < 0 ? 0 : real___fread_chk(ptr, ptrlen, size, n, f);
    rt_leave();
    return r;
}

#undef fread_unlocked
RT_API size_t fread_unlocked(void *ptr, size_t size, size_t n, FILE *f)
{
    REAL(size_t, fread_unlocked, void *, size_t, size_t, FILE *);
    if (!fj_maps_any()) return real_fread_unlocked(ptr, size, n, f);
    rt_enter();
    size_t r = fill(ptr, size * n) < 0 ? 0 : real_fread_unlocked(ptr, size, n, f);
    rt_leave();
    return r;
}
