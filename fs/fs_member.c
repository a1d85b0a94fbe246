/* Who is the job (buffer mode's isolation): the process behind a request
 * (fuse_req_ctx: the calling thread's id) belongs to the job when the
 * supervisor is among its ancestors and this daemon is not.  The supervisor
 * is the daemon's parent (it starts us) and a child subreaper: every process
 * the job starts, also one whose parent died, stays below it; a process of
 * the user's elsewhere (a shell, a reader) never is.  Read from
 * /proc/<tid>/stat at each open, lookup and getattr: the kernel's answer,
 * no table that a reused pid could fool. */
#include "fsd.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pid_t parent_of(pid_t pid)
{
    char p[64], buf[512];
    snprintf(p, sizeof p, "/proc/%d/stat", (int)pid);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    char *e = strrchr(buf, ')'); /* the name may hold anything: the fields follow its last ')' */
    if (!e) return -1;
    char state;
    int ppid;
    if (sscanf(e + 1, " %c %d", &state, &ppid) != 2) return -1;
    return ppid;
}

int fs_is_job(pid_t pid)
{
    if (!fsd.buffer) return 1;
    for (int depth = 0; pid > 1 && depth < 256; depth++) {
        if (pid == fsd.self) return 0;
        if (pid == fsd.sup) return 1;
        pid = parent_of(pid);
    }
    return 0;
}

int fs_req_is_job(fuse_req_t req) { return fs_is_job(fuse_req_ctx(req)->pid); }
