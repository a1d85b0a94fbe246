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
#endif
