/* Event-loop descriptors made anew with their state (format.h, lz_event):
 * an eventfd with its counter and flags, a signalfd with its mask, a timerfd
 * on its clock, an epoll empty at first, an inotify (its watches, by path,
 * are restore_inotify.c's); one several processes of the job share is made
 * once, from its first holder's record (restore_tree.c).  Once every descriptor is at its
 * number, the epolls get their watches back (each with its events and data)
 * and the timers are armed:
 *   - a relative timer keeps the time it had left (the downtime is not
 *     counted), its unread expirations restored with TFD_IOC_SET_TICKS;
 *   - an absolute timer (TFD_TIMER_ABSTIME) keeps its expiry on its clock; if
 *     that passed while the job was down it fires once at the restart, its
 *     expirations counted as the kernel would have (one, plus one per interval
 *     missed), and goes on from the next expiry due. */
#include "restorer.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#ifndef TFD_IOC_SET_TICKS
#define TFD_IOC_SET_TICKS _IOW('T', 0, uint64_t)
#endif

static const struct lz_event *object_of(const struct lz_image *img, int fd)
{
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].fd == fd && img->events[i].kind != LZ_EV_WATCH && img->events[i].kind != LZ_EV_INWATCH)
            return &img->events[i];
    restore_fail("descriptor %d has no event record in the image", fd);
}

int restore_event_open(const struct lz_image *img, const struct lz_fd *f)
{
    return restore_event_make(object_of(img, f->fd), f->flags);
}

int restore_event_make(const struct lz_event *e, uint32_t open_flags)
{
    const struct lz_event *f = e; /* (its descriptor, for messages) */
    int nb = (open_flags & O_NONBLOCK) ? 1 : 0, fd = -1;
    const char *what = "?";
    switch (e->kind) {
    case LZ_EV_EVENTFD:
        what = "eventfd";
        fd = eventfd(0, EFD_CLOEXEC | (nb ? EFD_NONBLOCK : 0) | ((e->flags & LZ_EVF_SEMAPHORE) ? EFD_SEMAPHORE : 0));
        /* the counter may exceed an initial value's 32 bits: added by a write */
        if (fd >= 0 && e->count && write(fd, &e->count, sizeof e->count) != (ssize_t)sizeof e->count)
            restore_fail("cannot restore the counter of eventfd descriptor %d: %s", f->fd, strerror(errno));
        break;
    case LZ_EV_TIMERFD:
        what = "timerfd";
        fd = timerfd_create(e->clockid, TFD_CLOEXEC | (nb ? TFD_NONBLOCK : 0));
        break;
    case LZ_EV_SIGNALFD: {
        what = "signalfd";
        sigset_t set;
        sigemptyset(&set);
        for (int s = 1; s <= LZ_NSIG; s++)
            if (e->mask & (1ull << (s - 1))) sigaddset(&set, s);
        fd = signalfd(-1, &set, SFD_CLOEXEC | (nb ? SFD_NONBLOCK : 0));
        break;
    }
    case LZ_EV_INOTIFY:
        what = "inotify";
        fd = inotify_init1(IN_CLOEXEC | (nb ? IN_NONBLOCK : 0));
        break;
    case LZ_EV_EPOLL:
        what = "epoll";
        fd = epoll_create1(EPOLL_CLOEXEC);
        if (fd >= 0 && nb) fcntl(fd, F_SETFL, O_NONBLOCK);
        break;
    }
    if (fd < 0) restore_fail("cannot make %s descriptor %d: %s", what, f->fd, strerror(errno));
    return fd;
}

static int64_t now_ns(int clock)
{
    struct timespec ts; /* not through the vDSO: the program's is being put in place */
    if (syscall(SYS_clock_gettime, clock, &ts) < 0) restore_fail("cannot read clock %d: %s", clock, strerror(errno));
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static struct timespec ts_of(int64_t ns)
{
    return (struct timespec){(time_t)(ns / 1000000000ll), (long)(ns % 1000000000ll)};
}

static void arm_timer(const struct lz_event *e)
{
    uint64_t ticks = e->count;
    int64_t value = e->value_ns;
    int abs = (e->flags & TFD_TIMER_ABSTIME) != 0;
    if (value && abs) {
        int64_t now = now_ns(e->clockid);
        if (value <= now) { /* due while the job was down */
            uint64_t missed = 1;
            if (e->interval_ns) {
                missed += (uint64_t)((now - value) / e->interval_ns);
                value += (int64_t)missed * e->interval_ns;
            } else {
                value = 0;
            }
            ticks += missed;
        }
    }
    if (value) {
        struct itimerspec its = {ts_of(e->interval_ns), ts_of(value)};
        if (timerfd_settime(e->fd, abs ? (int)e->flags : 0, &its, NULL) < 0)
            restore_fail("cannot arm timerfd descriptor %d: %s", e->fd, strerror(errno));
    }
    /* after settime, which clears the count */
    if (ticks && ioctl(e->fd, TFD_IOC_SET_TICKS, &ticks) < 0)
        restore_fail("cannot restore the %llu unread expirations of timerfd descriptor %d: %s (the kernel needs "
                     "CONFIG_CHECKPOINT_RESTORE)", (unsigned long long)ticks, e->fd, strerror(errno));
}

void restore_events_finish(const struct lz_image *img)
{
    /* an object shared with other processes of the job gets its watches and
     * its arming once, from its first holder (restore_tree.c) */
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].kind == LZ_EV_INOTIFY && !restore_tree_event_other(img->events[i].fd))
            restore_inotify_watches(img, &img->events[i]);
    for (size_t i = 0; i < img->nevents; i++) {
        const struct lz_event *e = &img->events[i];
        if (e->kind != LZ_EV_WATCH || restore_tree_event_other(e->fd)) continue;
        struct epoll_event ev = {.events = (uint32_t)e->mask, .data.u64 = e->data};
        if (epoll_ctl(e->fd, EPOLL_CTL_ADD, e->target, &ev) == 0) continue;
        if (errno == EPERM) /* the restarter's file in its place (a regular file, /dev/null) */
            restore_fail("epoll descriptor %d watched descriptor %d, which is now a file epoll cannot watch: restart "
                         "with a terminal, pipe or socket there", e->fd, e->target);
        restore_fail("cannot make epoll descriptor %d watch descriptor %d again: %s", e->fd, e->target, strerror(errno));
    }
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].kind == LZ_EV_TIMERFD && !restore_tree_event_other(img->events[i].fd)) arm_timer(&img->events[i]);
}
