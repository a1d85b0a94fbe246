/* A libuv-style event loop checked from inside after each restart
 * (tests/test_timers.py): one epoll waits on a periodic timerfd, a signalfd,
 * an eventfd and an inotify descriptor that watches the job's work
 * directory (where the loop makes and deletes files), a file in it (which
 * the loop appends to), and the directory where the test drops its
 * triggers; a watch between them was removed, so the watch numbers have a
 * gap.
 *   inotify_loop CYCLES WORKDIR TRIGDIR
 * Each 50 ms tick: a new file in WORKDIR, the one two ticks older deleted, a
 * line appended to WORKDIR/file0, 1 written to the eventfd, SIGUSR1 raised.
 * For each cycle c: after 10 ticks prints `ready c`; when inotify reports
 * TRIGDIR/trig.c made (after the restart: the watch works), it forgets what
 * the downtime lost (events queued at the checkpoint), adds a watch (its
 * number must be the next one), runs 12 ticks and 4 quiet ones and checks
 * that every file it made was reported on the directory's watch, the appends
 * on the file's, that the eventfd's counts add up and the signal and timer
 * came: `check c ok`, or `FAIL ...`.  Then `done`. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL " __VA_ARGS__); printf("\n"); fflush(stdout); exit(1); } while (0)
#define MAXF 4096

static int ep, tfd, sfd, efd, ifd;
static int wd_work, wd_gap, wd_trig, wd_file0, wd_next;
static const char *work, *trigdir;
static long ticks, timer_exp, made, mods_done, mods_seen, ev_written, ev_read, sigs_seen;
static char pending[MAXF];   /* file i made, its IN_CREATE not seen yet */
static int triggered;        /* the cycle whose trigger was seen */
static int acting = 1;       /* ticks make files, write, signal */

static void tick(void)
{
    ticks++;
    if (!acting) return;
    char p[4096];
    long i = made++ % MAXF;
    snprintf(p, sizeof p, "%s/f%ld", work, i);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "x", 1) != 1 || close(fd) < 0) FAIL("cannot make %s: %m", p);
    pending[i] = 1;
    if (made > 2) {
        snprintf(p, sizeof p, "%s/f%ld", work, (made - 3) % MAXF);
        if (unlink(p) < 0) FAIL("cannot delete %s: %m", p);
    }
    snprintf(p, sizeof p, "%s/file0", work);
    fd = open(p, O_WRONLY | O_APPEND);
    if (fd < 0 || write(fd, "line\n", 5) != 5 || close(fd) < 0) FAIL("cannot append to %s: %m", p);
    mods_done++;
    uint64_t one = 1;
    if (write(efd, &one, 8) != 8) FAIL("eventfd write: %m");
    ev_written++;
    raise(SIGUSR1);
}

static void inotify_events(void)
{
    char buf[8192] __attribute__((aligned(8)));
    ssize_t n;
    while ((n = read(ifd, buf, sizeof buf)) > 0) {
        for (char *p = buf; p < buf + n;) {
            struct inotify_event *e = (struct inotify_event *)p;
            p += sizeof *e + e->len;
            if (e->wd == wd_work) {
                long i;
                if ((e->mask & IN_CREATE) && sscanf(e->name, "f%ld", &i) == 1 && i >= 0 && i < MAXF) pending[i] = 0;
            } else if (e->wd == wd_file0) {
                if (e->mask & IN_MODIFY) mods_seen++;
            } else if (e->wd == wd_trig) {
                int c;
                if ((e->mask & IN_CREATE) && sscanf(e->name, "trig.%d", &c) == 1) triggered = c;
            } else if (e->wd == wd_gap || (wd_next && e->wd == wd_next)) {
                /* the removed watch's IN_IGNORED; the new directory's events */
            } else {
                FAIL("an inotify event (mask %#x, name %s) for watch %d, which the program never had", e->mask,
                     e->len ? e->name : "", e->wd);
            }
        }
    }
    if (n < 0 && errno != EAGAIN) FAIL("inotify read: %m");
}

static void loop_once(void)
{
    struct epoll_event evs[8];
    int n = epoll_wait(ep, evs, 8, 1000);
    if (n < 0 && errno != EINTR) FAIL("epoll_wait: %m");
    for (int k = 0; k < n; k++) {
        switch (evs[k].data.u32) {
        case 'T': {
            uint64_t exp;
            if (read(tfd, &exp, 8) == 8) { timer_exp += (long)exp; tick(); }
            break;
        }
        case 'S': {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si)
                if (si.ssi_signo == SIGUSR1) sigs_seen++;
            break;
        }
        case 'E': {
            uint64_t v;
            if (read(efd, &v, 8) == 8) ev_read += (long)v;
            break;
        }
        case 'I': inotify_events(); break;
        default: FAIL("epoll reported data %#x", evs[k].data.u32);
        }
    }
}

static void run_ticks(long n)
{
    long end = ticks + n;
    while (ticks < end) loop_once();
}

static int watch(const char *dir, const char *name, uint32_t mask)
{
    char p[4096];
    snprintf(p, sizeof p, "%s%s%s", dir, name ? "/" : "", name ? name : "");
    int wd = inotify_add_watch(ifd, p, mask);
    if (wd < 0) FAIL("inotify_add_watch %s: %m", p);
    return wd;
}

static void check(int c)
{
    /* what the downtime lost: the events queued at the checkpoint; and what
     * the last ticks before the trigger made, read first */
    inotify_events();
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof si) == sizeof si) {}
    memset(pending, 0, sizeof pending);
    mods_seen = mods_done = 0;
    ev_read = ev_written = 0;
    sigs_seen = 0;
    long exp0 = timer_exp;
    uint64_t v;
    if (read(efd, &v, 8) == 8) {} /* the count written before the checkpoint */
    char d[64];
    snprintf(d, sizeof d, "dir%d", c);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", work, d);
    if (mkdir(p, 0755) < 0) FAIL("mkdir %s: %m", p);
    int want = wd_next ? wd_next + 1 : wd_file0 + 1;
    wd_next = watch(work, d, IN_CREATE);
    if (wd_next != want) FAIL("a new watch got wd %d, not %d", wd_next, want);
    run_ticks(12);
    acting = 0;
    run_ticks(4);
    acting = 1;
    for (int i = 0; i < MAXF; i++)
        if (pending[i]) FAIL("no IN_CREATE for f%d on watch %d", i, wd_work);
    if (mods_seen < 1 || mods_seen > mods_done) FAIL("%ld IN_MODIFY for %ld appends", mods_seen, mods_done);
    if (ev_read != ev_written) FAIL("the eventfd gave %ld for %ld written", ev_read, ev_written);
    if (sigs_seen < 1) FAIL("no SIGUSR1 through the signalfd");
    if (timer_exp - exp0 < 16) FAIL("the timerfd expired %ld times in 16 ticks", timer_exp - exp0);
    printf("check %d ok\n", c);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: inotify_loop CYCLES WORKDIR TRIGDIR\n"); return 2; }
    int cycles = atoi(argv[1]);
    work = argv[2];
    trigdir = argv[3];
    char p[4096];
    snprintf(p, sizeof p, "%s/sub", work);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/file0", work);
    int f0 = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f0 < 0) FAIL("cannot make %s: %m", p);
    close(f0);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR1);
    sigprocmask(SIG_BLOCK, &s, NULL);
    ep = epoll_create1(EPOLL_CLOEXEC);
    sfd = signalfd(-1, &s, SFD_NONBLOCK | SFD_CLOEXEC);
    tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ep < 0 || sfd < 0 || tfd < 0 || efd < 0 || ifd < 0) FAIL("cannot make the loop's descriptors: %m");
    wd_work = watch(work, NULL, IN_CREATE | IN_DELETE | IN_CLOSE_WRITE);
    wd_gap = watch(work, "sub", IN_CREATE);
    if (inotify_rm_watch(ifd, wd_gap) < 0) FAIL("inotify_rm_watch: %m");
    wd_trig = watch(trigdir, NULL, IN_CREATE);
    wd_file0 = watch(work, "file0", IN_MODIFY);
    struct { int fd; uint32_t tag; } w[] = {{tfd, 'T'}, {sfd, 'S'}, {efd, 'E'}, {ifd, 'I'}};
    for (int i = 0; i < 4; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.u32 = w[i].tag};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, w[i].fd, &ev) < 0) FAIL("epoll_ctl: %m");
    }
    struct itimerspec its = {{0, 50 * 1000 * 1000}, {0, 50 * 1000 * 1000}};
    timerfd_settime(tfd, 0, &its, NULL);
    printf("wds %d %d %d %d\n", wd_work, wd_gap, wd_trig, wd_file0);
    fflush(stdout);
    for (int c = 1; c <= cycles; c++) {
        run_ticks(10);
        printf("ready %d\n", c);
        fflush(stdout);
        while (triggered < c) loop_once();
        check(c);
    }
    printf("done\n");
    return 0;
}
