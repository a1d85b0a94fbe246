/* A lock of an object among the job's processes, while one of them changes
 * the object's state to read it.  A socket's SO_PEEK_OFF (rt_pipes.c,
 * rt_usock.c), TCP repair mode (rt_inet.c) and a pty's settings (rt_pty.c)
 * belong to the object, not to a descriptor, and every process of the job
 * holding it captures it at the same moment: unlocked, two would move one
 * peek offset, or switch repair mode in and out under each other.
 *
 * The lock is the abstract name "\0lazarus-lock.KIND.ID" bound by the holder
 * (a socket's inode, a pty's index: unique while the object lives).  The
 * name goes with the process, so a killed holder leaves no lock behind.  The
 * others wait, in 1 ms steps, up to 10 s. */
#include "rt.h"
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

long rt_obj_lock(const char *kind, uint64_t id)
{
    long s = lz_sc3(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    int n = rt_fmt(a.sun_path + 1, sizeof a.sun_path - 1, "lazarus-lock.%s.%llu", kind, (unsigned long long)id);
    long len = (long)offsetof(struct sockaddr_un, sun_path) + 1 + n;
    uint64_t until = rt_now_ns(CLOCK_MONOTONIC) + 10000000000ull;
    for (;;) {
        long e = lz_sc3(SYS_bind, s, &a, len);
        if (e == 0) return s;
        if (e != -EADDRINUSE) break;
        if (rt_now_ns(CLOCK_MONOTONIC) > until) {
            lz_sc1(SYS_close, s);
            return -2;
        }
        struct timespec ts = {0, 1000000};
        lz_sc2(SYS_nanosleep, &ts, 0);
    }
    lz_sc1(SYS_close, s);
    return -1;
}

void rt_obj_unlock(long lock)
{
    if (lock >= 0) lz_sc1(SYS_close, lock);
}
