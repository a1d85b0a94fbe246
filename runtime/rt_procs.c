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

int rt_check_children(struct rt_ckpt *ck)
{
    char names[300];
    size_t len = 0;
    int count = 0;
    names[0] = 0;
    for (size_t t = 0; t < ck->nthreads; t++) {
        char path[64], buf[4096];
        rt_fmt(path, sizeof path, "/proc/self/task/%d/children", ck->threads[t].tid);
        long n = rt_read_file(path, buf, sizeof buf - 1);
        if (n <= 0) continue;
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
            if (append(names, sizeof names, &len, item) < 0) append(names, sizeof names, &len, ", ...");
            count++;
            p = e;
        }
    }
    if (!count) return 0;
    rt_fmt(ck->err, sizeof ck->err, "the program has %d child process%s (%s): checkpoints of process trees are not supported yet",
           count, count == 1 ? "" : "es", names);
    return -1;
}
