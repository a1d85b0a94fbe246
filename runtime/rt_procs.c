/* Other processes of the job.  Until process trees are checkpointed as one
 * job, a checkpoint of a program that has child processes (running, or
 * exited and not waited for) would hold only part of the job: it is refused,
 * naming them, and the program runs on.  Threads are stopped already, so no
 * new child can appear while this looks. */
#include "rt.h"
#include <string.h>

static int append(char *out, size_t cap, size_t *len, const char *s)
{
    size_t n = rt_strlen(s);
    if (*len + n + 1 >= cap) return -1;
    memcpy(out + *len, s, n + 1);
    *len += n;
    return 0;
}

/* The children of one thread (its name in /proc/self/task), added to names. */
static int add_children(int32_t task, char *names, size_t cap, size_t *len, int count)
{
    char path[64], buf[4096];
    rt_fmt(path, sizeof path, "/proc/self/task/%d/children", task);
    long n = rt_read_file(path, buf, sizeof buf - 1);
    if (n <= 0) return count;
    buf[n] = 0;
    for (char *p = buf; *p;) {
        while (*p == ' ') p++;
        if (!*p) break;
        char *e = p;
        while (*e && *e != ' ') e++;
        char pid[16], comm[32] = "?", item[64];
        size_t k = (size_t)(e - p) < sizeof pid - 1 ? (size_t)(e - p) : sizeof pid - 1;
        memcpy(pid, p, k);
        pid[k] = 0;
        rt_fmt(path, sizeof path, "/proc/%s/comm", pid);
        long c = rt_read_file(path, comm, sizeof comm - 1);
        if (c > 0) comm[c - (comm[c - 1] == '\n')] = 0;
        rt_fmt(item, sizeof item, "%s%s %s", count ? ", " : "", pid, comm);
        if (append(names, cap, len, item) < 0) append(names, cap, len, ", ...");
        count++;
        p = e;
    }
    return count;
}

int rt_check_children(struct rt_ckpt *ck)
{
    char names[300];
    size_t len = 0;
    int count = 0;
    names[0] = 0;
    /* by the threads' /proc names: after an ordinary user's restart /proc is the
     * outer PID namespace's, not the program's */
    for (size_t t = 0; t < ck->ntasks; t++) count = add_children(ck->task_names[t], names, sizeof names, &len, count);
    if (!count) return 0;
    rt_fmt(ck->err, sizeof ck->err, "the program has %d child process%s (%s): checkpoints of process trees are not supported yet",
           count, count == 1 ? "" : "es", names);
    return -1;
}
