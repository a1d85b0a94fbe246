/* What `run` and `restart` share before supervising: the store, its lock,
 * the control sockets. */
#include "cli.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* A socket path through /proc/self/fd/N keeps within sun_path whatever DIR is. */
static int ctl_addr(const char *dir, struct sockaddr_un *a, int *dfd)
{
    *dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (*dfd < 0) return -1;
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    snprintf(a->sun_path, sizeof a->sun_path, "/proc/self/fd/%d/%s", *dfd, LZ_CTLSOCK);
    return 0;
}

int ctl_connect(const char *dir)
{
    struct sockaddr_un a;
    int dfd;
    if (ctl_addr(dir, &a, &dfd) < 0) return -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int rc = connect(s, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    close(dfd);
    if (rc < 0) { close(s); errno = e; return -1; }
    return s;
}

int ctl_listen(const char *dir)
{
    struct sockaddr_un a;
    int dfd;
    if (ctl_addr(dir, &a, &dfd) < 0) return -1;
    unlinkat(dfd, LZ_CTLSOCK, 0);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    mode_t old = umask(0077);
    int rc = bind(s, (struct sockaddr *)&a, sizeof a);
    umask(old);
    if (rc == 0) rc = listen(s, 16);
    int e = errno;
    close(dfd);
    if (rc < 0) { close(s); errno = e; return -1; }
    return s;
}

int supervisor_prepare(struct supervisor *s, const char *dir, const char *shown, int lock, const struct lz_job *job,
                       uint64_t next_index)
{
    memset(s, 0, sizeof *s);
    s->dir = dir;
    s->lock_fd = lock;
    s->status_fd = -1;
    s->plan_fd = s->go_fd = -1;
    s->rolled_fd = s->rolled_read = -1;
    s->lazy_fd = s->lazy_hup = -1;
    s->interval = job->interval;
    s->keep = job->keep ? job->keep : 3;
    s->durability = job->durability;
    snprintf(s->excludes, sizeof s->excludes, "%s", job->excludes);
    snprintf(s->compress, sizeof s->compress, "%s", job->compress);
    s->job_stdio = job->job_stdio;
    s->tcp_refuse = job->tcp_refuse;
    s->job_id[0] = job->id[0];
    s->job_id[1] = job->id[1];
    s->next_index = next_index;
    s->first_index = next_index;
    lz_journal_home(s->jhome, sizeof s->jhome, dir);
    s->listen_fd = ctl_listen(dir);
    if (s->listen_fd < 0) { lz_err("cannot create the control socket in %s: %s", shown, strerror(errno)); return -1; }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) { lz_err("socketpair: %s", strerror(errno)); return -1; }
    /* the program's end: inherited across exec, at a number programs rarely use */
    int child_ctl = fcntl(sp[1], F_DUPFD, LZ_CHAN_FD_BASE);
    if (child_ctl < 0) child_ctl = dup(sp[1]);
    close(sp[1]);
    s->ctl_fd = sp[0];
    /* orphans of the job come to us to be reaped */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    return child_ctl;
}
