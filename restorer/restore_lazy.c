/* Lazy restart (`lazarus restart --lazy`, issue 20): the private anonymous
 * regions are mapped empty and registered with a userfaultfd in missing-page
 * mode; the userfaultfd goes to the supervisor, whose fault server
 * (cli/lazy_server.c) places each page the program touches, checked frame by
 * frame, and prefetches the rest.  The restorer itself then goes on without
 * filling them: the program runs again as soon as its descriptors and
 * threads are back.
 *
 * The userfaultfd is a full one (root, /dev/userfaultfd, or the sysctl):
 * the kernel's own accesses to a page not yet in (a read() into a buffer,
 * the signal frame rt_sigreturn reads) wait for the server like the
 * program's do.  `lazarus restart` refuses --lazy where only a
 * user-mode-only one can be had (those accesses would fail with EFAULT). */
#include "restorer.h"
#include "lazy.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

void restore_lazy_register(struct restore_ctx *rc)
{
    int fd = lz_lazy_uffd();
    if (fd < 0) restore_fail("--lazy: cannot make a userfaultfd that handles the kernel's accesses too: %s", strerror(errno));
    if (!(rc->lazy = calloc(rc->img.nregions + 1, 1))) restore_fail("out of memory");
    size_t n = 0;
    for (size_t i = 0; i < rc->img.nregions; i++) {
        const struct lz_region *r = &rc->img.regions[i];
        if (!lz_lazy_region(r) || (rc->inherited && rc->inherited[i])) continue;
        struct uffdio_register reg = {.range = {r->start, r->end - r->start}, .mode = UFFDIO_REGISTER_MODE_MISSING};
        if (ioctl(fd, UFFDIO_REGISTER, &reg) < 0)
            restore_fail("--lazy: cannot register the memory at 0x%llx-0x%llx with userfaultfd: %s",
                         (unsigned long long)r->start, (unsigned long long)r->end, strerror(errno));
        rc->lazy[i] = 1;
        n++;
    }
    /* to the supervisor, which starts the server; ours is closed (the
     * program keeps nothing of it) */
    char msg[] = LZ_LAZY_MSG;
    struct iovec iov = {msg, sizeof msg - 1};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
    memset(&c, 0, sizeof c);
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof c.buf};
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    if (sendmsg(rc->ctl_fd, &mh, MSG_NOSIGNAL) < 0) restore_fail("--lazy: cannot hand the userfaultfd to the supervisor: %s", strerror(errno));
    close(fd);
    char step[64];
    snprintf(step, sizeof step, "%zu regions registered for the lazy fill", n);
    restore_trace(step);
}
