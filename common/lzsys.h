/* Raw x86-64 system calls returning -errno, for code that runs where libc
 * must not: the runtime's checkpoint signal handler (the program may hold any
 * libc lock) and the restorer's last steps (libc's TLS is being replaced). */
#ifndef LZ_SYS_H
#define LZ_SYS_H
#include <stdint.h>
#include <sys/syscall.h>

static inline long lz_sc6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define lz_sc0(n) lz_sc6((n), 0, 0, 0, 0, 0, 0)
#define lz_sc1(n, a) lz_sc6((n), (long)(a), 0, 0, 0, 0, 0)
#define lz_sc2(n, a, b) lz_sc6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define lz_sc3(n, a, b, c) lz_sc6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define lz_sc4(n, a, b, c, d) lz_sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define lz_sc5(n, a, b, c, d, e) lz_sc6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* The kernel's signal set (not glibc's sigset_t, 128 bytes): its 64
 * signals (LZ_NSIG, format.h), one bit each; the rt_sig* system calls are
 * passed its size. */
#define LZ_KSIGSET_SIZE 8
/* The kernel's first real-time signal (glibc's SIGRTMIN is a function, 34:
 * it keeps two); the standard signals below it do not queue. */
#define LZ_KSIGRTMIN 32
/* rseq(2): the length of the original struct rseq, the one glibc registers
 * (the kernel's ORIG_RSEQ_SIZE, not in its uapi headers); unregistering
 * must name the length registered. */
#define LZ_RSEQ_ORIG_LEN 32
/* personality(2) with this persona changes nothing and returns the current
 * one (no name in the headers). */
#define LZ_PERSONALITY_QUERY 0xffffffffu
/* A raw call's result in [-LZ_MAX_ERRNO, -1] is -errno (the kernel's
 * MAX_ERRNO); any other value, even negative as a long, is a result (an
 * address from mmap). */
#define LZ_MAX_ERRNO 4095
/* What readlink of /proc/PID/fd/N adds to the path of a file whose name is gone. */
#define LZ_DELETED_SUFFIX " (deleted)"
#define LZ_DELETED_LEN ((long)sizeof LZ_DELETED_SUFFIX - 1)
#endif
