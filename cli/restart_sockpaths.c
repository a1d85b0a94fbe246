/* Phase 1 of a restart, for what the restorer binds or opens by name
 * besides files: the path of a listening or bound local socket must be free
 * or hold a socket file nobody is bound to any more (the killed job's, which
 * the restorer replaces), and a named pipe's path must be a named pipe or
 * nothing (the restorer makes it).  Anything else is refused here, with one
 * line, before any file changes. */
#include "cli.h"
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int sock_path_check(const struct lz_image *img, const struct lz_usock *u, char *why, size_t whylen)
{
    if (!u->addr_len || !u->addr[0] || (u->flags & (LZ_US_UNLINKED | LZ_US_ORPHAN))) return 0;
    char name[112], path[LZ_PATH_MAX + 120];
    memcpy(name, u->addr, u->addr_len);
    name[u->addr_len] = 0;
    const char *cwd = lz_str(img, img->proc->cwd);
    if (name[0] == '/') snprintf(path, sizeof path, "%s", name);
    else snprintf(path, sizeof path, "%s/%s", cwd, name);
    struct stat st;
    if (lstat(path, &st) < 0) return 0;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(why, whylen, "%s, the name of the socket of descriptor %d, is a file that is not a socket now; move it away "
                 "and restart", path, u->fd);
        return -1;
    }
    if (strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) return 0; /* the restorer looks, from its directory */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    memcpy(sa.sun_path, path, strlen(path));
    int t = socket(AF_UNIX, (u->q.kind == LZ_CH_STREAM ? SOCK_STREAM : u->q.kind == LZ_CH_DGRAM ? SOCK_DGRAM : SOCK_SEQPACKET) |
                                SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int r = t < 0 ? -1 : connect(t, (struct sockaddr *)&sa, sizeof sa), e = errno;
    if (t >= 0) close(t);
    if (r == 0 || (e != ECONNREFUSED && e != ENOENT)) {
        snprintf(why, whylen, "%s, the name of the socket of descriptor %d, is bound by another socket now (%s); stop what "
                 "uses it and restart", path, u->fd, r == 0 ? "it accepts connections" : strerror(e));
        return -1;
    }
    return 0;
}

int restart_named_objects_check(const struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nusocks; i++)
        if (sock_path_check(img, &img->usocks[i], why, whylen) < 0) return -1;
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        struct stat st;
        if (f->kind == LZ_FD_FIFO && lstat(lz_str(img, f->path), &st) == 0 && !S_ISFIFO(st.st_mode)) {
            snprintf(why, whylen, "%s, the named pipe of descriptor %d, is not a named pipe now; move it away and restart",
                     lz_str(img, f->path), f->fd);
            return -1;
        }
    }
    return 0;
}
