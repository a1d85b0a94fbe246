/* Phase 1 of a restart, for the job's TCP and UDP sockets (format.h,
 * lz_inet): every port a socket was bound to can be bound again (a probe
 * socket with the options the restorer binds with: SO_REUSEADDR, so that the
 * killed job's connections lingering in TIME_WAIT do not stand in the way
 * when they allow it); the data queued on each connection is checked with
 * the pipes' (store/inet_data.c).
 * Another program that took a port, or a port shared by two processes'
 * records, stops the restart here, before anything changes.  Once phase 1
 * is through, one line per TCP connection that comes back reset. */
#include "cli.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static void addr_text(char *out, size_t len, uint32_t family, const uint8_t *a, uint16_t port)
{
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop((int)family, a, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
    snprintf(out, len, family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, port);
}

/* Can a socket like s bind its address again?  0, or -errno. */
static int probe_bind(const struct lz_inet *s)
{
    int fd = socket((int)s->family, (int)s->type | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) return -errno;
    if (s->family == AF_INET6) {
        int v6 = !!(s->opts & LZ_INO_V6ONLY);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof v6);
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (s->opts & LZ_INO_REUSEPORT) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    if (s->family == AF_INET) {
        struct sockaddr_in *a = (void *)&ss;
        a->sin_family = AF_INET;
        memcpy(&a->sin_addr, s->local, 4);
        a->sin_port = htons(s->lport);
        len = sizeof *a;
    } else {
        struct sockaddr_in6 *a = (void *)&ss;
        a->sin6_family = AF_INET6;
        memcpy(&a->sin6_addr, s->local, 16);
        a->sin6_port = htons(s->lport);
        a->sin6_scope_id = s->scope;
        len = sizeof *a;
    }
    int rc = bind(fd, (struct sockaddr *)&ss, len) < 0 ? -errno : 0;
    /* a listener's port: listen checks the port's other users again */
    if (rc == 0 && s->type == SOCK_STREAM && listen(fd, 1) < 0) rc = -errno;
    close(fd);
    return rc;
}

/* The ports the restorer will bind for the job's processes (pid: as shown). */
int restart_inet_check(const struct lz_image *img, int pid, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        char a[80];
        addr_text(a, sizeof a, s->family, s->local, s->lport);
        const char *proto = s->type == SOCK_STREAM ? "TCP" : "UDP";
        /* bound ports; a connection's end on a port of its own gets a fresh one if need be */
        if (!s->lport || s->state == LZ_IN_UNBOUND || s->state == LZ_IN_RESET) continue;
        if (s->state == LZ_IN_CONNECTED && s->type == SOCK_STREAM) {
            int shared = 0; /* the accepting end of a connection: on a listener's port */
            for (size_t j = 0; j < img->ninets; j++)
                shared |= img->inets[j].state == LZ_IN_LISTEN && img->inets[j].lport == s->lport;
            if (!shared) continue;
        }
        int e = probe_bind(s);
        if (e == -EADDRINUSE || e == -EACCES) {
            snprintf(why, whylen, "%s port %u (%s, descriptor %d of process %d) is %s: stop the program that holds it "
                     "(`ss -%canp sport = :%u`), or wait up to 60 s if it is the killed job's own connections in TIME_WAIT",
                     proto, s->lport, a, s->fd, pid, e == -EACCES ? "not allowed to this user" : "in use",
                     s->type == SOCK_STREAM ? 't' : 'u', s->lport);
            return -1;
        }
        if (e < 0) {
            snprintf(why, whylen, "cannot bind %s %s again (descriptor %d of process %d): %s", proto, a, s->fd, pid, strerror(-e));
            return -1;
        }
    }
    return 0;
}

/* The socket whose descriptor's inode is ino, in any of the images. */
static const struct lz_inet *by_ino(const struct lz_image *imgs, size_t n, uint64_t ino, uint64_t *own)
{
    for (size_t k = 0; k < n; k++)
        for (size_t i = 0; i < imgs[k].ninets; i++)
            for (size_t j = 0; j < imgs[k].nfds; j++)
                if (imgs[k].fds[j].fd == imgs[k].inets[i].fd && imgs[k].fds[j].ino == ino) {
                    *own = ino;
                    return &imgs[k].inets[i];
                }
    return NULL;
}

void restart_inet_report(const struct lz_image *imgs, size_t nimgs, size_t k, int pid)
{
    const struct lz_image *img = &imgs[k];
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        if (s->state != LZ_IN_RESET) continue;
        uint64_t mine = 0, theirs = 0;
        for (size_t j = 0; j < img->nfds; j++) if (img->fds[j].fd == s->fd) mine = img->fds[j].ino;
        const struct lz_inet *o = s->peer_ino ? by_ino(imgs, nimgs, s->peer_ino, &theirs) : NULL;
        if (o && o->peer_ino == mine && mine) continue; /* the other end is another process's: connected again */
        char l[80], p[80];
        addr_text(l, sizeof l, s->family, s->local, s->lport);
        addr_text(p, sizeof p, s->family, s->peer, s->pport);
        fprintf(stderr, "lazarus: process %d, descriptor %d: TCP connection %s -> %s restored reset (--tcp=reset)\n", pid,
                s->fd, l, p);
    }
}
