/* POSIX message queues the process holds a descriptor of (LZ_FD_MQUEUE):
 * each queue's attributes, owner, mode and messages with their priorities
 * go into the IPC section once per name (format.h: struct lz_ipc, MQ).
 * The kernel has no way to read a message without taking it, so the pause
 * takes every message through a descriptor of its own and sends them back
 * at once, in the order they came (highest priority first, in order of
 * arrival within one): the queue is as it was.  A queue with an mq_notify
 * registration is refused (sending into an empty queue would fire it), as is
 * one the process cannot open for reading and writing, and one unlinked.
 * Processes of the job sharing a queue are captured at the same time: each
 * takes and gives back the messages under a lock of the queue (flock), so
 * each sees all of them. */
#include "rt.h"
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>

#define MQUEUE_MAGIC 0x19800202

int rt_is_mqueue(int fd)
{
    struct { long type; char rest[112]; } sf;
    return lz_sc2(SYS_fstatfs, fd, &sf) == 0 && sf.type == MQUEUE_MAGIC;
}

static int refuse(struct rt_ckpt *ck, const struct lz_fd *f, const char *name, const char *why)
{
    rt_fmt(ck->err, sizeof ck->err, "descriptor %d (POSIX message queue %s) %s", f->fd, name, why);
    return -1;
}

static int one(struct rt_ckpt *ck, const struct lz_fd *f, const char *name)
{
    long q = lz_sc4(SYS_mq_open, name + 1, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0, 0);
    if (q < 0) return refuse(ck, f, name, q == -ENOENT ? "was unlinked: Lazarus restores queues by name"
                                          : "cannot be opened for reading and writing, which its checkpoint needs");
    /* processes of the job holding the queue are captured at once: one at a time
     * takes and gives back its messages (flock of the queue, released by the close) */
    lz_sc2(SYS_flock, q, LOCK_EX);
    int rc = -1;
    char info[160];
    long n = lz_sc3(SYS_read, q, info, sizeof info - 1);
    info[n > 0 ? n : 0] = 0;
    const char *np = strstr(info, "NOTIFY_PID:");
    struct mq_attr a;
    struct stat st;
    if (np && np[11 + strspn(np + 11, " ")] != '0') {
        refuse(ck, f, name, "has an mq_notify registration, which Lazarus cannot keep");
    } else if (lz_sc3(SYS_mq_getsetattr, q, 0, &a) < 0 || lz_sc2(SYS_fstat, q, &st) < 0) {
        refuse(ck, f, name, "cannot be read");
    } else {
        struct lz_ipc *r = &ck->ipc[ck->nipc];
        memset(r, 0, sizeof *r);
        r->kind = LZ_IPC_MQ;
        r->name = strings_add(&ck->strings, name);
        r->mode = st.st_mode & 0777;
        r->uid = st.st_uid; r->gid = st.st_gid;
        r->size = (uint64_t)a.mq_maxmsg;
        r->msgsize = (uint64_t)a.mq_msgsize;
        r->data = ck->ipc_len;
        /* take them all, then give them back in the same order */
        rc = 0;
        for (long k = 0; k < a.mq_curmsgs; k++) {
            uint32_t *h = rt_ipc_bytes(ck, 8 + (size_t)a.mq_msgsize);
            if (!h) { rc = refuse(ck, f, name, "holds more than a checkpoint keeps"); break; }
            unsigned prio = 0;
            long got = lz_sc5(SYS_mq_timedreceive, q, h + 2, a.mq_msgsize, &prio, 0);
            if (got < 0) { ck->ipc_len -= (8 + (size_t)a.mq_msgsize + 7) & ~(size_t)7; break; } /* taken by someone else */
            h[0] = prio;
            h[1] = (uint32_t)got;
            ck->ipc_len -= ((8 + (size_t)a.mq_msgsize + 7) & ~(size_t)7) - ((8 + (size_t)got + 7) & ~(size_t)7);
            r->count++;
        }
        for (uint64_t at = r->data, k = 0; k < r->count; k++) {
            uint32_t *h = (uint32_t *)(ck->ipc_bytes + at);
            long e = lz_sc5(SYS_mq_timedsend, q, h + 2, h[1], h[0], 0);
            if (e < 0 && rc == 0) rc = refuse(ck, f, name, "could not be given its messages back (filled from outside the job meanwhile)");
            at += (8 + h[1] + 7) & ~7ull;
        }
        r->length = ck->ipc_len - r->data;
        if (rc == 0) ck->nipc++;
    }
    lz_sc1(SYS_close, q);
    return rc;
}

int rt_capture_mqueues(struct rt_ckpt *ck)
{
    for (size_t i = 0; i < ck->nfds; i++) {
        const struct lz_fd *f = &ck->fds[i];
        if (f->kind != LZ_FD_MQUEUE) continue;
        const char *name = ck->strings.buf + f->path;
        int seen = 0;
        for (size_t k = 0; k < ck->nipc && !seen; k++)
            seen = ck->ipc[k].kind == LZ_IPC_MQ && !strcmp(ck->strings.buf + ck->ipc[k].name, name);
        if (seen) continue;
        if (ck->nipc == ck->ipc_cap) return refuse(ck, f, name, "is one too many IPC objects");
        if (one(ck, f, name) < 0) return -1;
    }
    return 0;
}
