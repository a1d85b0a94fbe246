/* The job's tree, read while every process is captured and still stopped:
 * each process's ids as the job sees them, the exited ones' wait status, the
 * open file descriptions processes share (files, sockets, event-loop
 * objects), the socket pairs between them. */
#include "job_ckpt.h"
#include "tree.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <linux/kcmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Open file descriptions two processes share (a log both append to, the
 * file a shell redirected for its children): kcmp tells, among descriptors of
 * the same file in different processes, which are one description. */
struct fdent { pid_t pid; int inner, fd; uint64_t dev, ino; int group; unsigned mode; };

static int same_description(const struct fdent *a, const struct fdent *b)
{
    return syscall(SYS_kcmp, a->pid, b->pid, KCMP_FILE, a->fd, b->fd) == 0;
}

/* /proc/PID/fd/N names an eventfd, timerfd, signalfd, epoll or inotify (runtime/rt_events.c). */
static int is_event_object(const char *fp)
{
    static const char *const names[] = {"anon_inode:[eventfd]", "anon_inode:[timerfd]", "anon_inode:[signalfd]",
                                        "anon_inode:[eventpoll]", "anon_inode:inotify"};
    char link[64];
    ssize_t n = readlink(fp, link, sizeof link - 1);
    if (n <= 0) return 0;
    link[n] = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(link, names[i])) return 1;
    return 0;
}

static int fdent_cmp(const void *a, const void *b)
{
    const struct fdent *x = a, *y = b;
    if (x->dev != y->dev) return x->dev < y->dev ? -1 : 1;
    if (x->ino != y->ino) return x->ino < y->ino ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

static int find_shared(struct sv_state *st, struct lz_tree *t)
{
    struct fdent *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd", p->pid);
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            int fd = atoi(e->d_name);
            char fp[96];
            struct stat sb;
            snprintf(fp, sizeof fp, "/proc/%d/fd/%d", p->pid, fd);
            /* eventfd, timerfd, signalfd, epoll and inotify objects (anonymous inodes, no
             * file type): one shared between processes is made once (restart_tree.c) */
            if (stat(fp, &sb) < 0) continue;
            if ((sb.st_mode & S_IFMT) == 0 && !is_event_object(fp)) continue;
            /* (sockets: a listener a parent shares with its children is made once, restart_tree.c) */
            if (!(S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode) || S_ISCHR(sb.st_mode) || S_ISSOCK(sb.st_mode) ||
                  (sb.st_mode & S_IFMT) == 0))
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                struct fdent *nv = realloc(v, cap * sizeof *nv);
                if (!nv) break;
                v = nv;
            }
            v[n++] = (struct fdent){p->pid, p->inner, fd, sb.st_dev, sb.st_ino, -1, sb.st_mode};
        }
        if (d) closedir(d);
    }
    if (n) qsort(v, n, sizeof *v, fdent_cmp);
    int groups = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a;
        while (b < n && v[b].dev == v[a].dev && v[b].ino == v[a].ino) b++;
        for (size_t i = a; i < b; i++) {
            if (v[i].group >= 0) continue;
            int g = -1;
            for (size_t k = i + 1; k < b; k++) {
                if (v[k].group >= 0 || v[k].pid == v[i].pid) continue;
                if (!same_description(&v[i], &v[k])) continue;
                if (g < 0) { g = groups++; v[i].group = g; }
                v[k].group = g;
            }
            /* a process's other descriptors of that description: its dups */
            if (g >= 0)
                for (size_t k = a; k < b; k++)
                    if (v[k].group < 0 && same_description(&v[i], &v[k])) v[k].group = g;
        }
        a = b;
    }
    size_t ns = 0;
    for (size_t i = 0; i < n; i++) ns += v[i].group >= 0;
    t->shared = calloc(ns ? ns : 1, sizeof *t->shared);
    t->nshared = 0;
    for (size_t i = 0; t->shared && i < n; i++)
        if (v[i].group >= 0) t->shared[t->nshared++] = (struct lz_tree_shared){v[i].group, v[i].inner, v[i].fd, 0};
    free(v);
    return 0;
}

/* "NSpid:\t12\t3" -> 3 (the innermost namespace's number), or ours. */
static int ns_field(const char *status, const char *name, int dflt)
{
    const char *l = strstr(status, name);
    if (!l) return dflt;
    l += strlen(name);
    int last = dflt;
    while (*l && *l != '\n') {
        char *e;
        long v = strtol(l, &e, 10);
        if (e == l) { l++; continue; }
        last = (int)v;
        l = e;
    }
    return last;
}

/* Does a process of the job hold socket `ino`?  (Read while all are stopped.) */
static int job_holds_socket(struct sv_state *st, uint64_t ino)
{
    char want[48];
    snprintf(want, sizeof want, "socket:[%llu]", (unsigned long long)ino);
    for (size_t i = 0; i < st->nparts; i++) {
        if (st->parts[i].zombie) continue;
        char dir[64];
        snprintf(dir, sizeof dir, "/proc/%d/fd", st->parts[i].pid);
        DIR *d = opendir(dir);
        struct dirent *e;
        int found = 0;
        while (d && !found && (e = readdir(d))) {
            char target[64];
            ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
            if (n <= 0) continue;
            target[n] = 0;
            found = !strcmp(target, want);
        }
        if (d) closedir(d);
        if (found) return 1;
    }
    return 0;
}

/* Every socket pair a process shares with another: that one is of the job. */
int jc_check_peers(struct sv_state *st)
{
    for (size_t i = 0; i < st->nparts; i++)
        for (int k = 0; k < st->parts[i].npeers; k++)
            if (!(st->parts[i].peers[k].ino & LZ_PTY_PEER) && !job_holds_socket(st, st->parts[i].peers[k].ino)) {
                jc_fail(st, &st->parts[i], "descriptor %d is one end of a local socket pair whose other end no process of "
                                        "the job holds", st->parts[i].peers[k].fd);
                return -1;
            }
    return jc_check_ptys(st);
}

int jc_build_tree(struct sv_state *st, struct lz_tree *t, char *why, size_t whylen)
{
    t->index = st->index;
    t->procs = calloc(st->nparts, sizeof *t->procs);
    if (!t->procs) return -1;
    t->nprocs = st->nparts;
    for (size_t i = 0; i < st->nparts; i++) {
        struct part *p = &st->parts[i];
        struct lz_tree_proc *tp = &t->procs[i];
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/status", p->pid);
        size_t n;
        char *b = lz_read_file(path, &n);
        if (!b && errno == ENOENT) { /* gone: it ended (and was reaped) while the others were stopped */
            if (i == 0) snprintf(why, whylen, "the program ended before the checkpoint was complete");
            else snprintf(why, whylen, "process %d of the job ended during the checkpoint (the next one goes without it)", p->pid);
            return -2;
        }
        if (!b) { snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno)); return -1; }
        int inner = ns_field(b, "NSpid:", p->pid);
        if (!p->inner) p->inner = inner;
        tp->pid = p->inner;
        tp->pgid = ns_field(b, "NSpgid:", 0);
        tp->sid = ns_field(b, "NSsid:", 0);
        pid_t ppid = ns_field(b, "PPid:", 0);
        free(b);
        struct part *pp = i ? jc_part_of(st, ppid) : NULL;
        tp->ppid = pp ? (pp->inner ? pp->inner : pp->pid) : 0;
        if (i && !pp) { snprintf(why, whylen, "the parent %d of process %d is not a process of the job", ppid, p->pid); return -1; }
        memcpy(tp->comm, p->comm, sizeof tp->comm);
        if (p->zombie) {
            tp->state = LZ_TP_ZOMBIE;
            snprintf(path, sizeof path, "/proc/%d/stat", p->pid);
            b = lz_read_file(path, &n);
            char *q = b ? strrchr(b, ')') : NULL;
            /* field 52, exit_code: the wait status */
            for (int f = 2; q && f < 52; f++) q = strchr(q + 1, ' ');
            tp->status = q ? atoi(q + 1) : 0;
            free(b);
        } else {
            tp->state = LZ_TP_LIVE;
            if (i) snprintf(tp->dir, sizeof tp->dir, LZ_PROC_PREFIX "%d", tp->pid);
        }
    }
    if (find_shared(st, t) < 0) return -1;
    return t->shared ? 0 : -1;
}
