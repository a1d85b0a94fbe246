/* A TCP or UDP socket held by two processes of the job (inherited over
 * fork: a pre-forking server's listener, a child that kept its parent's
 * connection) is one socket: each process's part would make its own, and the
 * second could not bind the port again.  Refused at checkpoint time, naming
 * both, until that is restored (runtime/rt_inet.c restores a process's own). */
#include "job_ckpt.h"
#include "sv.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A TCP or UDP socket of pid's network namespace (/proc/PID/net/tcp...). */
struct netsock { uint64_t ino; char local[40], rem[40]; unsigned state; int tcp; };

static size_t inet_sockets(pid_t pid, struct netsock **out)
{
    static const char *const tables[] = {"tcp", "tcp6", "udp", "udp6"};
    struct netsock *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/net/%s", pid, tables[t]);
        FILE *f = fopen(path, "re");
        if (!f) continue;
        while (fgets(line, sizeof line, f)) {
            struct netsock s = {0, "", "", 0, t < 2};
            unsigned long long ino;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %39s %39s %x %*s %*s %*s %*s %*s %llu", s.local, s.rem, &s.state, &ino) != 4 || !ino)
                continue;
            s.ino = ino;
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                struct netsock *nv = realloc(v, cap * sizeof *nv);
                if (!nv) break;
                v = nv;
            }
            v[n++] = s;
        }
        fclose(f);
    }
    *out = v;
    return n;
}

/* "0100007F:1F90" -> "127.0.0.1:8080" (the kernel prints each 32-bit word in host order) */
static void addr_of(const char *hex, char *out, size_t len)
{
    unsigned w[4] = {0, 0, 0, 0}, port = 0;
    size_t nw = strchr(hex, ':') ? (size_t)(strchr(hex, ':') - hex) / 8 : 0;
    for (size_t i = 0; i < nw && i < 4; i++) sscanf(hex + 8 * i, "%8x", &w[i]);
    if (nw == 0 || sscanf(strchr(hex, ':') + 1, "%x", &port) != 1) { snprintf(out, len, "%s", hex); return; }
    char ip[INET6_ADDRSTRLEN];
    if (!inet_ntop(nw == 1 ? AF_INET : AF_INET6, w, ip, sizeof ip)) snprintf(ip, sizeof ip, "?");
    snprintf(out, len, nw == 1 ? "%s:%u" : "[%s]:%u", ip, port);
}

struct holder { uint64_t ino; pid_t inner; int fd; };

static int holder_cmp(const void *a, const void *b)
{
    const struct holder *x = a, *y = b;
    return (x->ino > y->ino) - (x->ino < y->ino);
}

int jc_check_inet_shared(struct sv_state *st, char *why, size_t whylen)
{
    struct netsock *inet = NULL;
    size_t ninet = 0;
    struct holder *h = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        if (!inet) ninet = inet_sockets(p->pid, &inet);
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", p->pid);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char fp[96];
            struct stat sb;
            snprintf(fp, sizeof fp, "/proc/%d/fd/%d", p->pid, atoi(e->d_name));
            if (stat(fp, &sb) < 0 || !S_ISSOCK(sb.st_mode)) continue;
            int is_inet = 0;
            for (size_t k = 0; k < ninet && !is_inet; k++) is_inet = inet[k].ino == (uint64_t)sb.st_ino;
            if (!is_inet) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                struct holder *nh = realloc(h, cap * sizeof *nh);
                if (!nh) break;
                h = nh;
            }
            h[n++] = (struct holder){sb.st_ino, p->inner, atoi(e->d_name)};
        }
        if (d) closedir(d);
    }
    if (n) qsort(h, n, sizeof *h, holder_cmp);
    for (size_t i = 0; i + 1 < n && !rc; i++)
        for (size_t k = i + 1; k < n && h[k].ino == h[i].ino && !rc; k++)
            if (h[k].inner != h[i].inner) {
                snprintf(why, whylen, "descriptor %d of process %d (a TCP or UDP socket) is shared with process %d of the "
                         "job (descriptor %d): a network socket shared between processes cannot be restored yet; close it "
                         "in one of them (or open it with SOCK_CLOEXEC before an exec)", h[i].fd, h[i].inner, h[k].inner,
                         h[k].fd);
                rc = -1;
            }
    /* --tcp=refuse: a connection to a process of this host outside the job
     * (one to another host the runtime refuses itself) */
    for (size_t i = 0; i < n && !rc && st->s->tcp_refuse; i++) {
        const struct netsock *me = NULL, *peer = NULL;
        for (size_t k = 0; k < ninet && !me; k++) if (inet[k].tcp && inet[k].ino == h[i].ino) me = &inet[k];
        if (!me || (me->state != 1 && me->state != 5 && me->state != 8)) continue; /* ESTABLISHED, FIN_WAIT2, CLOSE_WAIT */
        for (size_t k = 0; k < ninet && !peer; k++)
            if (inet[k].tcp && !strcmp(inet[k].local, me->rem) && !strcmp(inet[k].rem, me->local)) peer = &inet[k];
        int held = 0;
        for (size_t k = 0; k < n && peer && !held; k++) held = h[k].ino == peer->ino;
        if (peer && !held) {
            char l[64], r[64];
            addr_of(me->local, l, sizeof l);
            addr_of(me->rem, r, sizeof r);
            snprintf(why, whylen, "descriptor %d of process %d (TCP %s -> %s) is a TCP connection to a process outside the "
                     "job, and the job was started with --tcp=refuse (`lazarus run --tcp=reset` restores it as a connection "
                     "the program sees reset)", h[i].fd, h[i].inner, l, r);
            rc = -1;
        }
    }
    free(h);
    free(inet);
    return rc;
}
