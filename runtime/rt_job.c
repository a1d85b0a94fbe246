/* The job: every process of the program's tree that runs the runtime is a
 * member, and a checkpoint is one coordinated snapshot of all of them.
 *
 * Each process talks to the supervisor on a channel of its own (a
 * SOCK_SEQPACKET pair): a child inherits its parent's and, before it says
 * anything, makes its own and hands one end to the supervisor over the
 * inherited one ("JOIN", SCM_RIGHTS).  The supervisor learns the sender of
 * every message from the channel it came on, and can speak to one process:
 * GO and RESUME below.
 *
 * A checkpoint of the job (the supervisor signals each process):
 *   1. each process stops all its threads and says STOPPED;
 *   2. once every process of the tree is stopped — none can start another
 *      any more — the supervisor says GO: each captures itself (pipes between
 *      processes are read now, when no process can read or write them),
 *      starts its writer and says FORKED (or writes in the pause and says OK);
 *   3. once every process has, RESUME: all run again.  No process runs
 *      while another is captured, so the images, the data in the pipes and
 *      the file journals (whose intervals begin at step 2) are one instant.
 * The supervisor commits when every writer has reported (cli/supervisor.c). */
#include "rt.h"
#include "rt_api.h"
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>

long rt_send_fd(int sock, int fd, const char *msg, size_t len)
{
    struct iovec iov = {(void *)msg, len};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
    memset(&c, 0, sizeof c);
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = c.buf;
    mh.msg_controllen = sizeof c.buf;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &fd, sizeof fd);
    long r;
    do r = lz_sc3(SYS_sendmsg, sock, &mh, MSG_NOSIGNAL);
    while (r == -EINTR);
    return r;
}

int rt_own_channel(void)
{
    int pid = (int)lz_sc0(SYS_getpid);
    if (rt.ctl_fd < 0) return -1;
    if (rt.chan_pid == pid) { rt_watch_arm(); return 0; }
    int sv[2];
    if (lz_sc4(SYS_socketpair, AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) return -1;
    char msg[48];
    int n = rt_fmt(msg, sizeof msg, "JOIN %d", pid);
    long r = rt_send_fd(rt.ctl_fd, sv[1], msg, (size_t)n);
    lz_sc1(SYS_close, sv[1]);
    /* ours replaces the inherited one at the same number, which survives exec */
    if (r >= 0) r = lz_sc3(SYS_dup3, sv[0], rt.ctl_fd, 0);
    lz_sc1(SYS_close, sv[0]);
    if (r < 0) {
        /* the supervisor may be gone (EPIPE): it died while this process was starting, in an
         * exec say, where the signal of its end closing found no handler yet; then this one
         * ends now, as the watch would have ended it (rt_watch.c), not run on outside the job */
        rt_watch_check();
        return -1;
    }
    rt.chan_pid = pid;
    rt_watch_arm();
    return 0;
}

/* "WORD N ..." from the supervisor about checkpoint `index`: 1 for `word`, 0 for
 * ABORT or when the supervisor is gone; *arg gets the number after N, if any. */
int rt_job_wait(uint64_t index, const char *word, long *arg)
{
    size_t wl = rt_strlen(word);
    for (;;) {
        struct pollfd p = {rt.ctl_fd, POLLIN, 0};
        long r = lz_sc5(SYS_ppoll, &p, 1, 0, 0, LZ_KSIGSET_SIZE);
        if (r == -EINTR) continue;
        if (r < 0) return 0;
        char buf[1024]; /* an ABORT carries the supervisor's reason */
        r = lz_sc6(SYS_recvfrom, rt.ctl_fd, (long)buf, sizeof buf - 1, MSG_DONTWAIT, 0, 0);
        if (r == -EINTR || r == -EAGAIN) continue;
        if (r <= 0) return 0; /* end of file: the supervisor is gone */
        buf[r] = 0;
        const char *q = buf;
        int is_word = !strncmp(q, word, wl) && q[wl] == ' ', is_abort = !strncmp(q, "ABORT ", 6);
        if (!is_word && !is_abort) continue;
        q += is_word ? wl + 1 : 6;
        uint64_t n = 0;
        while (*q >= '0' && *q <= '9') n = n * 10 + (uint64_t)(*q++ - '0');
        if (n != index) continue; /* about an earlier round */
        if (is_abort) {
            while (*q == ' ') q++;
            rt_api_abort_reason(q); /* for the C API's lazarus_strerror() */
            return 0;
        }
        long a = 0;
        while (*q == ' ') q++;
        while (*q >= '0' && *q <= '9') a = a * 10 + (*q++ - '0');
        if (arg) *arg = a;
        return 1;
    }
}
