/* Event-loop descriptors (eventfd, timerfd, signalfd, epoll, inotify): their state,
 * read in the pause from /proc/self/fdinfo (man 5 proc) without touching the
 * objects, into struct lz_event records (format.h).  An epoll watch is kept
 * only when the descriptor it names is still the file it watches and is part
 * of the checkpoint; anything else fails the checkpoint, naming both.  An
 * inotify descriptor's watches need paths, which rt_inotify.c knows. */
#include "rt.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <string.h>

/* The value after "name" on its line (base 8, 10 or 16), or -1 if absent. */
static int field(const char *buf, const char *name, int base, uint64_t *out)
{
    const char *s = strstr(buf, name);
    if (!s) return -1;
    s += strlen(name);
    while (*s == ' ' || *s == '\t' || *s == '(' || *s == ':') s++;
    uint64_t v = 0;
    int any = 0;
    for (;; s++, any = 1) {
        int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : 99;
        if (d >= base) break;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    if (!any) return -1;
    *out = v;
    return 0;
}

/* "(sec, nsec)" after name, as nanoseconds. */
static int field_ts(const char *buf, const char *name, int64_t *ns)
{
    uint64_t sec, nsec;
    const char *s = strstr(buf, name);
    if (!s || field(s, name, 10, &sec) < 0) return -1;
    s = strchr(s, ',');
    if (!s || field(s, ",", 10, &nsec) < 0) return -1;
    *ns = (int64_t)(sec * 1000000000ull + nsec);
    return 0;
}

static const struct lz_fd *table_fd(const struct rt_ckpt *ck, int fd)
{
    for (size_t i = 0; i < ck->nfds; i++)
        if (ck->fds[i].fd == fd) return &ck->fds[i];
    return NULL;
}

/* Every "tfd:" line of epoll descriptor f: one LZ_EV_WATCH each. */
static int capture_watches(struct rt_ckpt *ck, const struct lz_fd *f, const char *buf, size_t cap)
{
    long pid = lz_sc0(SYS_getpid);
    for (const char *l = strstr(buf, "tfd:"); l; l = strstr(l + 4, "tfd:")) {
        uint64_t tfd, ev, data;
        if (field(l, "tfd:", 10, &tfd) < 0 || field(l, "events:", 16, &ev) < 0 || field(l, "data:", 16, &data) < 0) {
            rt_fmt(ck->err, sizeof ck->err, "cannot read the watches of epoll descriptor %d", f->fd);
            return -1;
        }
        const struct lz_fd *t = table_fd(ck, (int)tfd);
        struct kcmp_epoll_slot slot = {(uint32_t)f->fd, (uint32_t)tfd, 0};
        if (!t || t->kind == LZ_FD_CTL || lz_sc5(SYS_kcmp, pid, pid, KCMP_EPOLL_TFD, tfd, &slot) != 0) {
            rt_fmt(ck->err, sizeof ck->err, "epoll descriptor %d watches descriptor %d, which the program has since "
                   "closed or replaced (or Lazarus does not restore): close the epoll or remove the watch first",
                   f->fd, (int)tfd);
            return -1;
        }
        if (ck->nevents == cap) { rt_fmt(ck->err, sizeof ck->err, "too many epoll watches"); return -1; }
        ck->events[ck->nevents++] = (struct lz_event){.fd = f->fd, .kind = LZ_EV_WATCH, .target = (int32_t)tfd,
                                                      .mask = ev, .data = data};
    }
    return 0;
}

static int capture_one(struct rt_ckpt *ck, const struct lz_fd *f, char *buf, size_t bufcap, size_t cap)
{
    char p[64];
    rt_fmt(p, sizeof p, "/proc/self/fdinfo/%d", f->fd);
    long n = rt_read_file(p, buf, bufcap - 1);
    if (n <= 0 || (size_t)n >= bufcap - 1) {
        rt_fmt(ck->err, sizeof ck->err, "cannot read %s", p);
        return -1;
    }
    buf[n] = 0;
    if (ck->nevents == cap) { rt_fmt(ck->err, sizeof ck->err, "too many event descriptors"); return -1; }
    struct lz_event *e = &ck->events[ck->nevents];
    memset(e, 0, sizeof *e);
    e->fd = f->fd;
    uint64_t v = 0;
    int bad = 0;
    const char *name = ck->strings.buf + f->path; /* anon_inode:[eventfd]... (rt_fds.c) */
    if (!strcmp(name, "anon_inode:[eventfd]")) {
        e->kind = LZ_EV_EVENTFD;
        bad = field(buf, "eventfd-count:", 16, &e->count) < 0;
        if (field(buf, "eventfd-semaphore:", 10, &v) == 0 && v) e->flags |= LZ_EVF_SEMAPHORE;
    } else if (!strcmp(name, "anon_inode:[timerfd]")) {
        e->kind = LZ_EV_TIMERFD;
        /* A periodic timer that expired is restarted only when next read or
         * queried: a query counts its overruns into the ticks and re-arms it
         * (what any read would see stays the same), so fdinfo shows the time
         * left to its next expiry instead of 0. */
        struct { struct timespec iv, val; } its;
        lz_sc2(SYS_timerfd_gettime, f->fd, &its);
        n = rt_read_file(p, buf, bufcap - 1);
        if (n <= 0 || (size_t)n >= bufcap - 1) { rt_fmt(ck->err, sizeof ck->err, "cannot read %s", p); return -1; }
        buf[n] = 0;
        int64_t left = 0;
        bad = field(buf, "clockid:", 10, &v) < 0 || field(buf, "ticks:", 10, &e->count) < 0;
        e->clockid = (int32_t)v;
        bad = bad || field(buf, "settime flags:", 8, &v) < 0 || field_ts(buf, "it_value:", &left) < 0 ||
              field_ts(buf, "it_interval:", &e->interval_ns) < 0;
        e->flags = (uint32_t)v;
        /* fdinfo shows the time left; an absolute timer keeps its expiry on its clock */
        if (!bad && left > 0 && (e->flags & 1 /* TFD_TIMER_ABSTIME */))
            left += (int64_t)rt_now_ns(e->clockid);
        e->value_ns = left;
    } else if (!strcmp(name, "anon_inode:[signalfd]")) {
        e->kind = LZ_EV_SIGNALFD;
        bad = field(buf, "sigmask:", 16, &e->mask) < 0;
    } else if (!strcmp(name, "anon_inode:inotify")) {
        e->kind = LZ_EV_INOTIFY;
        return rt_capture_inotify(ck, f->fd, buf, ck->nevents++, cap);
    } else {
        /* anon_inode:[eventpoll]: its fdinfo is the generic lines and its watches */
        e->kind = LZ_EV_EPOLL;
        ck->nevents++;
        return capture_watches(ck, f, buf, cap);
    }
    if (bad) { rt_fmt(ck->err, sizeof ck->err, "cannot read the state of descriptor %d from %s", f->fd, p); return -1; }
    ck->nevents++;
    return 0;
}

int rt_capture_events(struct rt_ckpt *ck)
{
    size_t nobj = 0, nep = 0, nin = 0;
    for (size_t i = 0; i < ck->nfds; i++)
        if (ck->fds[i].kind == LZ_FD_EVENT) {
            nobj++;
            nep += strstr(ck->strings.buf + ck->fds[i].path, "[eventpoll]") != NULL;
            nin += !strcmp(ck->strings.buf + ck->fds[i].path, "anon_inode:inotify");
        }
    ck->nevents = 0;
    if (!nobj) return 0;
    /* each epoll watches at most every descriptor of the table once; an
     * inotify descriptor's fdinfo is about 150 bytes a watch */
    size_t cap = nobj + nep * ck->nfds;
    size_t bufcap = 4096 + 128 * ck->nfds + (nin ? (size_t)1 << 20 : 0);
    char *buf = arena_alloc(&ck->arena, bufcap);
    if (!buf) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (size_t i = 0; nin && i < ck->nfds; i++) {
        char p[64];
        if (ck->fds[i].kind != LZ_FD_EVENT || strcmp(ck->strings.buf + ck->fds[i].path, "anon_inode:inotify")) continue;
        rt_fmt(p, sizeof p, "/proc/self/fdinfo/%d", ck->fds[i].fd);
        long n = rt_read_file(p, buf, bufcap - 1);
        if (n <= 0 || (size_t)n >= bufcap - 1) {
            rt_fmt(ck->err, sizeof ck->err, "cannot read %s (too many inotify watches?)", p);
            return -1;
        }
        buf[n] = 0;
        cap += rt_inotify_watches(buf);
    }
    ck->events = arena_alloc(&ck->arena, cap * sizeof *ck->events);
    if (!ck->events) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (size_t i = 0; i < ck->nfds; i++)
        if (ck->fds[i].kind == LZ_FD_EVENT && capture_one(ck, &ck->fds[i], buf, bufcap, cap) < 0) return -1;
    return 0;
}
