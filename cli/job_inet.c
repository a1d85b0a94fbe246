/* A TCP or UDP socket held by two processes of the job (inherited over
 * fork: a pre-forking server's listener, a child that kept its parent's
 * connection) is one socket: each process's part would make its own, and the
 * second could not bind the port again.  Refused at checkpoint time, naming
 * both, until that is restored (runtime/rt_inet.c restores a process's own). */
#include "job_ckpt.h"
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The inodes of pid's network namespace's TCP and UDP sockets, sorted. */
static size_t inet_inodes(pid_t pid, uint64_t **out)
{
    static const char *const tables[] = {"tcp", "tcp6", "udp", "udp6"};
    uint64_t *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        char path[64], line[512];
        snprintf(path, sizeof path, "/proc/%d/net/%s", pid, tables[t]);
        FILE *f = fopen(path, "re");
        if (!f) continue;
        while (fgets(line, sizeof line, f)) {
            unsigned long long ino;
            /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
            if (sscanf(line, " %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu", &ino) != 1 || !ino) continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                uint64_t *nv = realloc(v, cap * sizeof *nv);
                if (!nv) break;
                v = nv;
            }
            v[n++] = ino;
        }
        fclose(f);
    }
    *out = v;
    return n;
}

struct holder { uint64_t ino; pid_t inner; int fd; };

static int holder_cmp(const void *a, const void *b)
{
    const struct holder *x = a, *y = b;
    return (x->ino > y->ino) - (x->ino < y->ino);
}

int jc_check_inet_shared(struct sv_state *st, char *why, size_t whylen)
{
    uint64_t *inet = NULL;
    size_t ninet = 0;
    struct holder *h = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        if (!inet) ninet = inet_inodes(p->pid, &inet);
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
            for (size_t k = 0; k < ninet && !is_inet; k++) is_inet = inet[k] == (uint64_t)sb.st_ino;
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
    free(h);
    free(inet);
    return rc;
}
