/* Lazy (post-copy) restart (issue 20): what the restorer (restorer/restore_lazy.c)
 * and the fault server (cli/lazy_server.c) agree on. */
#ifndef LZ_LAZY_H
#define LZ_LAZY_H
#include "format.h"
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LZ_LAZY_ENV "LAZARUS_LAZY"
/* The restorer's message to the supervisor, with the userfaultfd attached. */
#define LZ_LAZY_MSG "LAZY"

/* The regions registered with userfaultfd, whose pages the server places:
 * private anonymous memory with pages stored.  Everything else (shared
 * memory, file mappings) is filled eagerly, as before. */
static inline int lz_lazy_region(const struct lz_region *r)
{
    return r->kind == LZ_R_ANON && r->nextents > 0;
}

/* The events the server follows, so that a page the program unmaps, moves,
 * discards or forks is never filled wrongly (see cli/lazy_server.c). */
#define LZ_LAZY_FEATURES (UFFD_FEATURE_EVENT_FORK | UFFD_FEATURE_EVENT_REMAP | UFFD_FEATURE_EVENT_REMOVE | UFFD_FEATURE_EVENT_UNMAP)

/* A userfaultfd that also handles the kernel's own accesses (a read() into a
 * page not yet in blocks until it is in, like the program's): from
 * /dev/userfaultfd where we may open it, else the system call (root, or
 * vm.unprivileged_userfaultfd=1).  With the API handshake done; -1 if
 * only a user-mode-only one can be had (or none). */
static inline int lz_lazy_uffd(void)
{
    int fd = -1;
    int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
        fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
        close(dev);
    }
    if (fd < 0) fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    struct uffdio_api api = {.api = UFFD_API, .features = LZ_LAZY_FEATURES};
    if (ioctl(fd, UFFDIO_API, &api) < 0) { close(fd); return -1; }
    return fd;
}
#endif
