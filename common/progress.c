/* Waits that adapt to load (progress.h). */
#include "progress.h"
#include "lzsys.h"
#include <fcntl.h>
#include <stddef.h>

static void put(char **o, char *end, const char *s)
{
    while (*s && *o < end - 1) *(*o)++ = *s++;
    **o = 0;
}

static void put_num(char **o, char *end, uint64_t v)
{
    char d[24];
    int n = 0;
    do d[n++] = (char)('0' + v % 10); while ((v /= 10) && n < 23);
    while (n && *o < end - 1) *(*o)++ = d[--n];
    **o = 0;
}

/* /proc/PID[/task/TID]/NAME into buf (NUL-terminated): its length, or -1. */
static long read_proc(int pid, int tid, const char *name, char *buf, long cap)
{
    char path[96], *o = path, *end = path + sizeof path;
    put(&o, end, "/proc/");
    if (pid) put_num(&o, end, (uint64_t)pid);
    else put(&o, end, "self");
    if (tid) { put(&o, end, "/task/"); put_num(&o, end, (uint64_t)tid); }
    put(&o, end, "/");
    put(&o, end, name);
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return -1;
    long n = 0, r;
    while (n < cap - 1 && (r = lz_sc3(SYS_read, fd, buf + n, cap - 1 - n)) > 0) n += r;
    lz_sc1(SYS_close, fd);
    buf[n] = 0;
    return n > 0 ? n : -1;
}

int lz_task_look(int pid, int tid, char *state, uint64_t *cpu)
{
    char buf[1024];
    if (read_proc(pid, tid, "stat", buf, sizeof buf) < 0) return -1;
    /* after the name's last ')': state, then fields 4..; utime and stime are 14 and 15 */
    char *s = NULL;
    for (char *c = buf; *c; c++) if (*c == ')') s = c;
    if (!s || !s[1] || !s[2]) return -1;
    *state = s[2];
    uint64_t f[16] = {0};
    int k = 3;
    for (char *c = s + 3; *c && k < 16; k++) {
        while (*c == ' ') c++;
        uint64_t v = 0;
        while (*c >= '0' && *c <= '9') v = v * 10 + (uint64_t)(*c++ - '0');
        f[k] = v;
        while (*c && *c != ' ') c++;
    }
    *cpu = f[14] + f[15];
    return 0;
}

int lz_task_blocks(int pid, int tid, int sig)
{
    char buf[4096];
    if (read_proc(pid, tid, "status", buf, sizeof buf) < 0) return 0;
    for (char *l = buf; *l;) {
        if (l[0] == 'S' && l[1] == 'i' && l[2] == 'g' && l[3] == 'B' && l[4] == 'l' && l[5] == 'k' && l[6] == ':') {
            char *c = l + 7;
            while (*c == ' ' || *c == '\t') c++;
            uint64_t v = 0;
            for (;; c++) {
                int d = *c >= '0' && *c <= '9' ? *c - '0' : *c >= 'a' && *c <= 'f' ? *c - 'a' + 10 : -1;
                if (d < 0) break;
                v = v << 4 | (uint64_t)d;
            }
            return (int)(v >> (sig - 1) & 1);
        }
        while (*l && *l != '\n') l++;
        if (*l) l++;
    }
    return 0;
}

/* The task's time on a CPU in ns (schedstat's first field), or 0: stat's
 * utime and stime move in 10 ms ticks, which a thread that runs a
 * millisecond at a time passes only now and then. */
static uint64_t run_ns(int pid, int tid)
{
    char buf[128];
    if (read_proc(pid, tid, "schedstat", buf, sizeof buf) < 0) return 0;
    uint64_t v = 0;
    for (const char *c = buf; *c >= '0' && *c <= '9'; c++) v = v * 10 + (uint64_t)(*c - '0');
    return v;
}

void lz_patience_start(struct lz_patience *p, uint64_t now, uint64_t base, uint64_t cap)
{
    *p = (struct lz_patience){.t0 = now, .base = base, .cap = cap < base ? base : cap, .last_progress = now,
                              .quiet = base < LZ_PATIENCE_QUIET_NS ? base : LZ_PATIENCE_QUIET_NS};
}

int lz_patience_more(struct lz_patience *p, uint64_t now, int pid, int tid, int stuck)
{
    if (now - p->t0 >= p->cap) return 0;
    if (!p->looked || now - p->last_look >= LZ_PATIENCE_LOOK_NS) {
        char st = 0;
        uint64_t cpu = 0;
        if (lz_task_look(pid, tid, &st, &cpu) < 0) st = 0;
        uint64_t ran = st ? run_ns(pid, tid) : 0;
        int moved = st == 'R' || st == 'D' || (p->looked && st && (cpu != p->cpu || ran != p->run_ns));
        if (moved && !stuck) p->last_progress = now;
        p->state = st;
        p->cpu = cpu;
        p->run_ns = ran;
        p->looked = 1;
        p->last_look = now;
    }
    if (now - p->t0 < p->base) return 1;
    return p->state && !stuck && now - p->last_progress < p->quiet;
}

void lz_patience_why(const struct lz_patience *p, uint64_t now, char *out, unsigned long len)
{
    char *o = out, *end = out + len;
    *o = 0;
    if (now - p->t0 >= p->cap) { put(&o, end, "the longest wait, though it was still making progress"); return; }
    const char *what = !p->state ? "it is gone" : p->state == 'S' ? "it was sleeping" : p->state == 'T' || p->state == 't' ? "it was stopped"
                     : p->state == 'Z' ? "it has exited" : "";
    put(&o, end, "no progress for ");
    put_num(&o, end, (now - p->last_progress) / 1000000);
    put(&o, end, " ms");
    if (*what) { put(&o, end, ": "); put(&o, end, what); }
}
