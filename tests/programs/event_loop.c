/* A libuv-style event loop's descriptors, checked from inside after every
 * restart: an eventfd with a counter above 32 bits, a semaphore eventfd
 * (non-blocking) with 3, a signalfd for SIGUSR1/SIGUSR2, a relative
 * CLOCK_MONOTONIC timer (3 s, must keep its time left over a restart), an
 * absolute periodic CLOCK_REALTIME timer (every expiry since its start is
 * counted, downtime included), an absolute one-shot CLOCK_REALTIME timer
 * (fires once, also when due while the job was down), a relative periodic
 * CLOCK_MONOTONIC timer never read (its expirations counted), a one-shot timer that
 * expired unread (its tick kept), an epoll watching them and one end of a
 * socket pair, each with its own data, and an epoll watching that epoll.  argv: CYCLES FILE_PREFIX; before check N it prints
 * "ready N" and waits for FILE_PREFIX.N.  Prints FAIL and exits 1 on a
 * mismatch, "done" at the end. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define BIG 123456789012ull
enum { D_A = 0xA1, D_B = 0xB2, D_SIG = 0x51, D_T1 = 0x71, D_SOCK = 0x50C, D_EP = 0xE2 };

static int efa, efb, sfd, t1, t2, t3, t4, t5, ep, ep2, sp[2];
static int64_t t2_start; /* CLOCK_REALTIME ns of t2's first expiry */
static int64_t t4_at;    /* CLOCK_REALTIME ns of t4's only expiry */
static int t4_seen;
static uint64_t t2_read; /* its expirations read so far */

#define FAIL(...) do { printf("FAIL " __VA_ARGS__); printf("\n"); fflush(stdout); exit(1); } while (0)

static int64_t now(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static void arm_every(int t, double sec, double every)
{
    struct itimerspec its = {{(time_t)every, (long)((every - (time_t)every) * 1e9)},
                             {(time_t)sec, (long)((sec - (time_t)sec) * 1e9)}};
    if (timerfd_settime(t, 0, &its, NULL) < 0) FAIL("settime: %s", strerror(errno));
}

static void arm_rel(int t, double sec)
{
    arm_every(t, sec, 0);
}

static int readable(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1;
}

static uint64_t rd64(int fd)
{
    uint64_t v = 0;
    if (read(fd, &v, 8) != 8) FAIL("read of descriptor %d: %s", fd, strerror(errno));
    return v;
}

static void wr64(int fd, uint64_t v)
{
    if (write(fd, &v, 8) != 8) FAIL("write: %s", strerror(errno));
}

static void setup(void)
{
    efa = eventfd(0, 0);
    wr64(efa, BIG);
    efb = eventfd(3, EFD_SEMAPHORE | EFD_NONBLOCK);
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    sigaddset(&m, SIGUSR2);
    sigprocmask(SIG_BLOCK, &m, NULL);
    sfd = signalfd(-1, &m, 0);
    t1 = timerfd_create(CLOCK_MONOTONIC, 0);
    arm_rel(t1, 3.0);
    t2 = timerfd_create(CLOCK_REALTIME, 0);
    t2_start = (now(CLOCK_REALTIME) / 1000000000ll + 2) * 1000000000ll;
    struct itimerspec its = {{1, 0}, {t2_start / 1000000000ll, 0}};
    if (timerfd_settime(t2, TFD_TIMER_ABSTIME, &its, NULL) < 0) FAIL("settime t2: %s", strerror(errno));
    t4 = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK);
    t4_at = t2_start + 500000000ll;
    struct itimerspec once = {{0, 0}, {t4_at / 1000000000ll, t4_at % 1000000000ll}};
    if (timerfd_settime(t4, TFD_TIMER_ABSTIME, &once, NULL) < 0) FAIL("settime t4: %s", strerror(errno));
    t3 = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    arm_rel(t3, 0.01);
    t5 = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    arm_every(t5, 0.2, 0.2);
    socketpair(AF_UNIX, SOCK_STREAM, 0, sp);
    if (write(sp[1], "x", 1) != 1) FAIL("socket write");
    ep = epoll_create1(0);
    struct { int fd; uint32_t ev; uint64_t data; } w[] = {
        {efa, EPOLLIN, D_A}, {efb, EPOLLIN | EPOLLET, D_B}, {sfd, EPOLLIN, D_SIG}, {t1, EPOLLIN, D_T1}, {sp[0], EPOLLIN, D_SOCK}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++) {
        struct epoll_event e = {.events = w[i].ev, .data.u64 = w[i].data};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, w[i].fd, &e) < 0) FAIL("epoll_ctl: %s", strerror(errno));
    }
    ep2 = epoll_create1(0); /* an epoll watching the epoll */
    struct epoll_event e2 = {.events = EPOLLIN, .data.u64 = D_EP};
    if (epoll_ctl(ep2, EPOLL_CTL_ADD, ep, &e2) < 0) FAIL("epoll_ctl ep2: %s", strerror(errno));
    while (!readable(t3)) usleep(1000); /* expired, left unread */
}

/* The data epoll reports now (0 timeout), as a bit set of the tags. */
static unsigned ready_set(int timeout_ms)
{
    struct epoll_event ev[16];
    int n = epoll_wait(ep, ev, 16, timeout_ms);
    unsigned set = 0;
    for (int i = 0; i < n; i++) {
        switch (ev[i].data.u64) {
        case D_A: set |= 1; break;
        case D_B: set |= 2; break;
        case D_SIG: set |= 4; break;
        case D_T1: set |= 8; break;
        case D_SOCK: set |= 16; break;
        default: FAIL("epoll reported unknown data %llx", (unsigned long long)ev[i].data.u64);
        }
    }
    return set;
}

static void check(int cycle)
{
    /* t5, every 0.2 s and never read: its expirations so far (the test
     * compares them with the time the job was up), then it goes on */
    uint64_t n5 = readable(t5) ? rd64(t5) : 0;
    printf("t5 ticks %llu\n", (unsigned long long)n5);
    if (n5 == 0) FAIL("t5 never fired");
    /* the timer of 3 s has time left: the downtime was not counted */
    struct itimerspec its;
    timerfd_gettime(t1, &its);
    double left = its.it_value.tv_sec + its.it_value.tv_nsec / 1e9;
    if (readable(t1) || left <= 0 || left > 3.0) FAIL("t1 fired or lost its time (left %.3f)", left);
    printf("t1 left %.3f\n", left);
    unsigned set = ready_set(0);
    if (set != (1 | 2 | 16)) FAIL("epoll ready set %#x, want 0x13", set);
    struct epoll_event outer[4];
    int no = epoll_wait(ep2, outer, 4, 0);
    if (no != 1 || outer[0].data.u64 != D_EP) FAIL("the outer epoll reported %d events", no);
    uint64_t a = rd64(efa);
    if (a != BIG) FAIL("eventfd count %llu", (unsigned long long)a);
    int fl = fcntl(efb, F_GETFL);
    if (!(fl & O_NONBLOCK)) FAIL("eventfd lost O_NONBLOCK");
    for (int i = 0; i < 3; i++)
        if (rd64(efb) != 1) FAIL("semaphore eventfd read is not 1");
    uint64_t v;
    if (read(efb, &v, 8) != -1 || errno != EAGAIN) FAIL("semaphore eventfd had more than 3");
    /* t3 expired before the checkpoint and was not read: its one tick */
    if (!readable(t3) || rd64(t3) != 1) FAIL("the unread expiration of t3 is lost");
    /* t2: every expiry since its start, the downtime's included */
    int64_t n0 = now(CLOCK_REALTIME);
    if (readable(t2)) t2_read += rd64(t2);
    int64_t n1 = now(CLOCK_REALTIME);
    int64_t lo = n0 < t2_start ? 0 : (n0 - t2_start) / 1000000000ll + 1;
    int64_t hi = n1 < t2_start ? 0 : (n1 - t2_start) / 1000000000ll + 1;
    if ((int64_t)t2_read < lo - 1 || (int64_t)t2_read > hi) FAIL("t2 counted %llu expirations, want %lld..%lld",
                                                                (unsigned long long)t2_read, (long long)lo, (long long)hi);
    printf("t2 ticks %llu\n", (unsigned long long)t2_read);
    /* t4, one-shot at an absolute time: fires once, even if that was while the job was down */
    int64_t n2 = now(CLOCK_REALTIME);
    int r4 = readable(t4);
    if (!t4_seen && n2 >= t4_at + 50000000ll) {
        if (!r4 || rd64(t4) != 1) FAIL("t4 did not fire once");
        t4_seen = 1;
        printf("t4 fired\n");
    } else if ((t4_seen || n2 < t4_at - 50000000ll) && r4) {
        FAIL("t4 fired %s", t4_seen ? "twice" : "early");
    }
    /* a signal sent now reaches the signalfd */
    kill(getpid(), SIGUSR2);
    set = ready_set(1000);
    if (!(set & 4)) FAIL("signalfd not ready after SIGUSR2 (set %#x)", set);
    struct signalfd_siginfo si;
    if (read(sfd, &si, sizeof si) != sizeof si || si.ssi_signo != SIGUSR2) FAIL("signalfd read");
    /* t1 fires when its time left says, reported with its data */
    int64_t t = now(CLOCK_MONOTONIC);
    while (!((set = ready_set(5000)) & 8))
        if (now(CLOCK_MONOTONIC) - t > 5000000000ll) FAIL("t1 did not fire");
    double took = (now(CLOCK_MONOTONIC) - t) / 1e9;
    if (took > left + 0.5) FAIL("t1 fired after %.3f s, had %.3f left", took, left);
    if (rd64(t1) != 1) FAIL("t1 ticks");
    if (!readable(t5)) FAIL("t5 stopped");
    printf("check %d ok\n", cycle);
    /* the same state again for the next cycle */
    wr64(efa, BIG);
    wr64(efb, 3);
    arm_rel(t1, 3.0);
    arm_rel(t3, 0.01);
    arm_every(t5, 0.2, 0.2);
    while (!readable(t3)) usleep(1000);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: event_loop CYCLES FILE_PREFIX\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int cycles = atoi(argv[1]);
    setup();
    for (int c = 1; c <= cycles; c++) {
        char f[4096];
        snprintf(f, sizeof f, "%s.%d", argv[2], c);
        printf("ready %d\n", c);
        while (access(f, F_OK) != 0) usleep(20000);
        check(c);
    }
    printf("done\n");
    return 0;
}
