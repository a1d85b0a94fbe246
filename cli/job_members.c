/* Who is in the job: the parts of the checkpoint under way (the main program
 * and every process below it, found through /proc/PID/task/TID/children), their
 * states, and the request each is sent (job_ckpt.c runs the phases). */
#include "job_ckpt.h"
#include "util.h"
#include <dirent.h>
#include <linux/kcmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

size_t jc_count_parts(struct sv_state *st, enum jc_what what)
{
    size_t n = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (!p->zombie) n += what == JC_STOPPED ? p->stopped != 0 : what == JC_CAPTURED ? p->captured != 0 : 1;
    }
    return n;
}

int jc_all(struct sv_state *st, enum jc_what what)
{
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->zombie) continue;
        if ((what == JC_STOPPED && !p->stopped) || (what == JC_CAPTURED && !p->captured) ||
            (what == JC_WRITTEN && (!p->written || p->writer_fd >= 0)))
            return 0;
    }
    return 1;
}

struct part *jc_part_of(struct sv_state *st, pid_t pid)
{
    for (size_t i = 0; i < st->nparts; i++) if (st->parts[i].pid == pid) return &st->parts[i];
    return NULL;
}

static void read_comm(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/comm", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    snprintf(out, len, "%s", b ? b : "?");
    free(b);
    out[strcspn(out, "\n")] = 0;
}

/* 'Z' for a zombie, 0 if gone.  (A process whose main thread has exited
 * shows 'Z' while its other threads run: that one is alive.) */
char jc_proc_state(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    if (!b) return 0;
    char *p = strrchr(b, ')');
    char c = p && p[1] == ' ' ? p[2] : '?';
    free(b);
    if (c == 'Z') {
        snprintf(path, sizeof path, "/proc/%d/status", pid);
        b = lz_read_file(path, &n);
        const char *t = b ? strstr(b, "\nThreads:") : NULL;
        if (t && atoi(t + sizeof "\nThreads:" - 1) > 1) c = 'S';
        free(b);
    }
    return c;
}

struct part *jc_add_part(struct sv_state *st, pid_t pid)
{
    if (st->nparts == st->parts_cap) {
        size_t cap = st->parts_cap ? st->parts_cap * 2 : 16;
        struct part *np = realloc(st->parts, cap * sizeof *np);
        if (!np) return NULL;
        st->parts = np;
        st->parts_cap = cap;
    }
    struct part *p = &st->parts[st->nparts++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    p->writer_fd = -1;
    p->zombie = jc_proc_state(pid) == 'Z';
    read_comm(pid, p->comm, sizeof p->comm);
    return p;
}

/* Adds pid's descendants not yet listed (parents first); returns how many. */
size_t jc_add_descendants(struct sv_state *st, pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return 0;
    size_t added = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char cp[320];
        snprintf(cp, sizeof cp, "/proc/%d/task/%s/children", pid, e->d_name);
        size_t n;
        char *b = lz_read_file(cp, &n);
        if (!b) continue;
        for (char *q = b; *q;) {
            char *end;
            long c = strtol(q, &end, 10);
            if (end == q) break;
            q = end;
            if (c > 0 && !jc_part_of(st, (pid_t)c)) {
                if (!jc_add_part(st, (pid_t)c)) break;
                added++;
                added += jc_add_descendants(st, (pid_t)c);
            }
        }
        free(b);
    }
    closedir(d);
    return added;
}

/* The runtime is mapped in it (a process that has not answered may be between exec and its start). */
int jc_runs_runtime(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/maps", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    int yes = b && memmem(b, n, LZ_RUNTIME_LIB, sizeof LZ_RUNTIME_LIB - 1) != NULL;
    free(b);
    return yes;
}

void jc_signal_part(struct sv_state *st, struct part *p)
{
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)((st->index << 2) | st->trigger);
    sigqueue(p->pid, LZ_SIGCKPT, v);
}

int jc_is_main(struct sv_state *st, const struct part *p) { return p->pid == st->s->prog; }

pid_t jc_vfork_child(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    struct dirent *e;
    pid_t found = 0;
    while (d && !found && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char cp[300];
        snprintf(cp, sizeof cp, "/proc/%d/task/%s/children", pid, e->d_name);
        size_t n;
        char *b = lz_read_file(cp, &n);
        for (char *q = b; q && *q && !found;) {
            char *end;
            long c = strtol(q, &end, 10);
            if (end == q) break;
            q = end;
            /* a process (not a thread) sharing its address space: CLONE_VM without CLONE_THREAD */
            if (c > 0 && syscall(SYS_kcmp, pid, (pid_t)c, KCMP_VM, 0, 0) == 0) found = (pid_t)c;
        }
        free(b);
    }
    if (d) closedir(d);
    return found;
}

pid_t jc_inner_pid(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    size_t n;
    char *b = lz_read_file(path, &n);
    const char *l = b ? strstr(b, "NSpid:") : NULL;
    pid_t inner = pid;
    for (l = l ? l + 6 : NULL; l && *l && *l != '\n';) {
        char *end;
        long v = strtol(l, &end, 10);
        if (end == l) break;
        inner = (pid_t)v;
        l = end;
    }
    free(b);
    return inner;
}
