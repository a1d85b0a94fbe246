/* The job's System V objects and POSIX message queues, given back their
 * state at the checkpoint once for the whole job (each process's part
 * records those it made, inherited or holds: the same object in several
 * parts is one).  Phase 1 decides, changing nothing, what becomes of each:
 * - an object the killed job left (IPC objects outlive their processes)
 *   that is still the job's -- same id, key, creator and size -- is taken
 *   over and given the checkpoint's state;
 * - one that is gone is made again with its id: the kernel gives the id
 *   written to kernel.{shm,sem,msg}_next_id to the next object made, which
 *   only root may write (CAP_CHECKPOINT_RESTORE over the IPC namespace); an
 *   ordinary user's restart then is refused, since the program holds the id
 *   (but a segment removed while attached, which one process holds: that
 *   process's restorer makes it anew with another id, restorer/restore_sysv.c,
 *   since the program has no use for the id of a removed segment);
 * - an id or key another object holds now refuses the restart, naming it;
 * - a segment from outside the job the program had attached must still be
 *   there (it is attached again, its content left alone);
 * - a POSIX message queue is made again by name, or taken over, with its
 *   attributes and mode; one of that name with other attributes is made anew.
 * Phase 2, after the files are rolled back, does it: a segment's content, a
 * set's values, a queue's messages (with their types or priorities, in
 * order).  The restorers then attach the segments (restorer/restore_sysv.c)
 * and open the queues' descriptors.  Semaphore undo values (SEM_UNDO) are not
 * kept. */
#include "cli.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <unistd.h>

struct ipc_obj {
    struct lz_ipc r;
    char name[256];  /* MQ */
    char *bytes;     /* r.length of them */
    int exists;      /* phase 1: there now, to be taken over */
    int local;       /* a removed segment gone, whose id cannot be had: its one process's
                      * restorer makes it anew (restorer/restore_sysv.c) */
    int holders;     /* processes that have it attached */
};

static struct {
    struct ipc_obj *v;
    size_t n;
} objs;

static const char *what(uint32_t kind)
{
    return kind == LZ_IPC_SHM ? "shared memory segment" : kind == LZ_IPC_SEM ? "semaphore set"
         : kind == LZ_IPC_MSG ? "message queue" : "POSIX message queue";
}

static char ipcrm_flag(uint32_t kind) { return kind == LZ_IPC_SHM ? 'm' : kind == LZ_IPC_SEM ? 's' : 'q'; }

/* The object's owner and creator, key and size as the kernel has them now:
 * 0, or -errno (gone: -EINVAL / -EIDRM). */
static int stat_sysv(uint32_t kind, int id, struct ipc_perm *perm, uint64_t *size)
{
    int r;
    if (kind == LZ_IPC_SHM) {
        struct shmid_ds ds;
        r = shmctl(id, IPC_STAT, &ds);
        if (r == 0) { *perm = ds.shm_perm; *size = ds.shm_segsz; }
    } else if (kind == LZ_IPC_SEM) {
        struct semid_ds ds;
        r = semctl(id, 0, IPC_STAT, &ds);
        if (r == 0) { *perm = ds.sem_perm; *size = ds.sem_nsems; }
    } else {
        struct msqid_ds ds;
        r = msgctl(id, IPC_STAT, &ds);
        if (r == 0) { *perm = ds.msg_perm; *size = 0; }
    }
    return r == 0 ? 0 : -errno;
}

static int add(const struct lz_image *img, const struct lz_ipc *r, char *why, size_t whylen)
{
    struct ipc_obj *o = NULL;
    for (size_t k = 0; k < objs.n && !o; k++) {
        struct ipc_obj *p = &objs.v[k];
        if (p->r.kind != r->kind) continue;
        if (r->kind == LZ_IPC_MQ ? strcmp(p->name, lz_str(img, r->name)) != 0 : p->r.id != r->id) continue;
        /* known from another process (all were captured at one instant): one
         * that made or inherited it has its content, one that only attached
         * it has not */
        if (!(r->flags & LZ_IPCF_CREATED) || (p->r.flags & LZ_IPCF_CREATED)) return 0;
        o = p;
        free(o->bytes);
    }
    if (!o) {
        struct ipc_obj *v = realloc(objs.v, (objs.n + 1) * sizeof *v);
        if (!v) { snprintf(why, whylen, "out of memory"); return -1; }
        objs.v = v;
        o = &v[objs.n++];
    }
    memset(o, 0, sizeof *o);
    o->r = *r;
    snprintf(o->name, sizeof o->name, "%s", lz_str(img, r->name));
    if (r->length && !(o->bytes = malloc(r->length))) { snprintf(why, whylen, "out of memory"); return -1; }
    if (r->length) memcpy(o->bytes, img->ipc_bytes + r->data, r->length);
    o->r.data = 0;
    return 0;
}

static int check_sysv(struct ipc_obj *o, char *why, size_t whylen)
{
    const struct lz_ipc *r = &o->r;
    struct ipc_perm perm;
    memset(&perm, 0, sizeof perm);
    uint64_t size = 0;
    int e = stat_sysv(r->kind, r->id, &perm, &size);
    uint64_t want = r->kind == LZ_IPC_SHM ? r->size : r->kind == LZ_IPC_SEM ? r->count : 0;
    if (e == 0) {
        /* still the job's (a removed segment's key reads 0); another program's segment is
         * known by key and size only: a checkpoint inside an ordinary user's restart (a user
         * namespace) sees its creator as the overflow id */
        int same = (perm.cuid == r->cuid || !(r->flags & LZ_IPCF_CREATED)) && size == want &&
                   (perm.__key == r->key || (r->flags & LZ_IPCF_REMOVED));
        if (same) { o->exists = 1; return 0; }
    }
    if (e == 0 || e == -EACCES) {
        snprintf(why, whylen, "System V %s %d (key 0x%x) of the job is now another object's: remove it (ipcrm -%c %d) or "
                 "restart where it is free", what(r->kind), r->id, (unsigned)r->key, ipcrm_flag(r->kind), r->id);
        return -1;
    }
    if (!(r->flags & LZ_IPCF_CREATED)) {
        snprintf(why, whylen, "System V %s %d (key 0x%x), which the program had attached and which is not the job's own, is gone",
                 what(r->kind), r->id, (unsigned)r->key);
        return -1;
    }
    if (r->key != IPC_PRIVATE && !(r->flags & LZ_IPCF_REMOVED)) {
        int other = r->kind == LZ_IPC_SHM ? shmget(r->key, 0, 0) : r->kind == LZ_IPC_SEM ? semget(r->key, 0, 0) : msgget(r->key, 0);
        if (other >= 0 || errno != ENOENT) {
            snprintf(why, whylen, "the key 0x%x of the job's System V %s %d is now another object's (%d): remove it (ipcrm -%c %d)",
                     (unsigned)r->key, what(r->kind), r->id, other, ipcrm_flag(r->kind), other);
            return -1;
        }
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s_next_id", r->kind == LZ_IPC_SHM ? "shm" : r->kind == LZ_IPC_SEM ? "sem" : "msg");
    if (access(path, W_OK) < 0 && (r->flags & LZ_IPCF_REMOVED) && o->holders == 1) {
        /* removed while attached (the usual way to have a segment go with its
         * last user): the program has no use for its id, only for its memory */
        o->local = 1;
        return 0;
    }
    if (access(path, W_OK) < 0 && (r->flags & LZ_IPCF_REMOVED)) {
        snprintf(why, whylen, "the job's System V shared memory %d, removed while %d processes had it attached, is gone, and only "
                 "root can make one again with the same id (%s), which they must share", r->id, o->holders, path);
        return -1;
    }
    if (access(path, W_OK) < 0) {
        snprintf(why, whylen, "the job's System V %s %d (key 0x%x) is gone, and only root can make one again with the same id "
                 "(%s), which the program holds", what(r->kind), r->id, (unsigned)r->key, path);
        return -1;
    }
    return 0;
}

static int check_mq(struct ipc_obj *o, char *why, size_t whylen)
{
    mqd_t q = mq_open(o->name, O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (q != (mqd_t)-1) { mq_close(q); o->exists = 1; return 0; }
    if (errno == ENOENT) return 0;
    snprintf(why, whylen, "the job's POSIX message queue %s cannot be opened to give it its messages back: %s", o->name, strerror(errno));
    return -1;
}

int restart_ipc_check(const struct lz_image *imgs, size_t nimgs, char *why, size_t whylen)
{
    for (size_t i = 0; i < nimgs; i++)
        for (size_t k = 0; k < imgs[i].nipc; k++)
            if (add(&imgs[i], &imgs[i].ipc[k], why, whylen) < 0) return -1;
    for (size_t k = 0; k < objs.n; k++) {
        struct ipc_obj *o = &objs.v[k];
        for (size_t i = 0; o->r.kind == LZ_IPC_SHM && i < nimgs; i++) {
            int has = 0;
            for (size_t g = 0; g < imgs[i].nregions && !has; g++)
                has = (imgs[i].regions[g].flags & LZ_RF_SYSV) && imgs[i].regions[g].file_ino == (uint64_t)o->r.id;
            o->holders += has;
        }
        if ((o->r.kind == LZ_IPC_MQ ? check_mq(o, why, whylen) : check_sysv(o, why, whylen)) < 0) return -1;
    }
    return 0;
}

/* A new object with the id it had: the kernel's next id set first. */
static int make_sysv(struct ipc_obj *o, char *why, size_t whylen)
{
    const struct lz_ipc *r = &o->r;
    char path[64], num[16];
    snprintf(path, sizeof path, "/proc/sys/kernel/%s_next_id", r->kind == LZ_IPC_SHM ? "shm" : r->kind == LZ_IPC_SEM ? "sem" : "msg");
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    int n = snprintf(num, sizeof num, "%d", r->id);
    if (fd < 0 || write(fd, num, (size_t)n) != n) {
        snprintf(why, whylen, "cannot set %s to make System V %s %d again: %s", path, what(r->kind), r->id, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    key_t key = (r->flags & LZ_IPCF_REMOVED) ? IPC_PRIVATE : r->key;
    int flg = IPC_CREAT | IPC_EXCL | (int)r->mode;
    int id = r->kind == LZ_IPC_SHM ? shmget(key, r->size, flg) : r->kind == LZ_IPC_SEM ? semget(key, (int)r->count, flg) : msgget(key, flg);
    if (id < 0 || id != r->id) {
        snprintf(why, whylen, "cannot make System V %s %d again: %s", what(r->kind), r->id, id < 0 ? strerror(errno) : "the kernel gave another id");
        if (id >= 0) (void)(r->kind == LZ_IPC_SHM ? shmctl(id, IPC_RMID, NULL) : r->kind == LZ_IPC_SEM ? semctl(id, 0, IPC_RMID) : msgctl(id, IPC_RMID, NULL));
        return -1;
    }
    return 0;
}

/* A taken-over object's permission bits as at the checkpoint (its owner is
 * the job's: check_sysv made sure of its creator). */
static int set_mode(const struct lz_ipc *r)
{
    if (r->kind == LZ_IPC_SHM) {
        struct shmid_ds ds;
        if (shmctl(r->id, IPC_STAT, &ds) < 0) return -1;
        if ((ds.shm_perm.mode & 0777) == r->mode) return 0;
        ds.shm_perm.mode = (ds.shm_perm.mode & ~0777u) | r->mode;
        return shmctl(r->id, IPC_SET, &ds);
    }
    if (r->kind == LZ_IPC_SEM) {
        struct semid_ds ds;
        if (semctl(r->id, 0, IPC_STAT, &ds) < 0) return -1;
        if ((ds.sem_perm.mode & 0777) == r->mode) return 0;
        ds.sem_perm.mode = (ds.sem_perm.mode & ~0777u) | r->mode;
        return semctl(r->id, 0, IPC_SET, &ds);
    }
    struct msqid_ds ds;
    if (msgctl(r->id, IPC_STAT, &ds) < 0) return -1;
    if ((ds.msg_perm.mode & 0777) == r->mode) return 0;
    ds.msg_perm.mode = (ds.msg_perm.mode & ~0777u) | r->mode;
    return msgctl(r->id, IPC_SET, &ds);
}

static int fill_sysv(struct ipc_obj *o, char *why, size_t whylen)
{
    const struct lz_ipc *r = &o->r;
    if (!(r->flags & LZ_IPCF_CREATED) || o->local) return 0; /* not the job's: left alone; or its restorer's */
    if (!o->exists && make_sysv(o, why, whylen) < 0) return -1;
    if (o->exists && set_mode(r) < 0) {
        snprintf(why, whylen, "cannot give System V %s %d its mode %o back: %s", what(r->kind), r->id, r->mode, strerror(errno));
        return -1;
    }
    if (r->kind == LZ_IPC_SHM) {
        void *a = shmat(r->id, NULL, 0);
        if (a == (void *)-1) { snprintf(why, whylen, "cannot attach System V shared memory %d to give it its content: %s", r->id, strerror(errno)); return -1; }
        memcpy(a, o->bytes, r->size);
        shmdt(a);
    } else if (r->kind == LZ_IPC_SEM) {
        if (semctl(r->id, 0, SETALL, (unsigned short *)o->bytes) < 0) {
            snprintf(why, whylen, "cannot set the values of System V semaphore set %d: %s", r->id, strerror(errno));
            return -1;
        }
    } else {
        /* what the killed job left in the queue goes; the checkpoint's come back in order */
        struct msqid_ds ds;
        if (msgctl(r->id, IPC_STAT, &ds) == 0 && ds.msg_qbytes != r->size) {
            ds.msg_qbytes = r->size;
            msgctl(r->id, IPC_SET, &ds); /* above msgmnb only for root: the messages fit anyway */
        }
        char *buf = malloc(sizeof(long) + 65536);
        if (!buf) { snprintf(why, whylen, "out of memory"); return -1; }
        while (msgrcv(r->id, buf, 65536, 0, IPC_NOWAIT | MSG_NOERROR) >= 0) {}
        free(buf);
        for (uint64_t at = 0, k = 0; k < r->count; k++) {
            int64_t t; uint64_t len;
            memcpy(&t, o->bytes + at, 8);
            memcpy(&len, o->bytes + at + 8, 8);
            char *m = malloc(sizeof(long) + len + 1);
            if (!m) { snprintf(why, whylen, "out of memory"); return -1; }
            long lt = (long)t;
            memcpy(m, &lt, sizeof lt);
            memcpy(m + sizeof(long), o->bytes + at + 16, len);
            int e = msgsnd(r->id, m, len, IPC_NOWAIT);
            free(m);
            if (e < 0) { snprintf(why, whylen, "cannot give System V message queue %d its messages back: %s", r->id, strerror(errno)); return -1; }
            at += 16 + ((len + 7) & ~7ull);
        }
    }
    return 0;
}

static int fill_mq(struct ipc_obj *o, char *why, size_t whylen)
{
    const struct lz_ipc *r = &o->r;
    struct mq_attr a = {.mq_maxmsg = (long)r->size, .mq_msgsize = (long)r->msgsize};
    mode_t um = umask(0);
    mqd_t q = mq_open(o->name, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_CREAT, (mode_t)r->mode, &a);
    struct mq_attr now;
    if (q != (mqd_t)-1 && mq_getattr(q, &now) == 0 && (now.mq_maxmsg != a.mq_maxmsg || now.mq_msgsize != a.mq_msgsize)) {
        /* another queue of that name: made anew as it was */
        mq_close(q);
        mq_unlink(o->name);
        q = mq_open(o->name, O_RDWR | O_NONBLOCK | O_CLOEXEC | O_CREAT | O_EXCL, (mode_t)r->mode, &a);
    }
    umask(um);
    if (q == (mqd_t)-1) { snprintf(why, whylen, "cannot make POSIX message queue %s again: %s", o->name, strerror(errno)); return -1; }
    char *buf = malloc((size_t)r->msgsize);
    int rc = buf ? 0 : -1;
    if (!buf) snprintf(why, whylen, "out of memory");
    while (buf && mq_receive(q, buf, (size_t)r->msgsize, NULL) >= 0) {}
    free(buf);
    for (uint64_t at = 0, k = 0; rc == 0 && k < r->count; k++) {
        uint32_t prio, len;
        memcpy(&prio, o->bytes + at, 4);
        memcpy(&len, o->bytes + at + 4, 4);
        if (mq_send(q, o->bytes + at + 8, len, prio) < 0) {
            snprintf(why, whylen, "cannot give POSIX message queue %s its messages back: %s", o->name, strerror(errno));
            rc = -1;
        }
        at += 8 + ((len + 7) & ~7ull);
    }
    mq_close(q);
    return rc;
}

int restart_ipc_apply(char *why, size_t whylen)
{
    for (size_t k = 0; k < objs.n; k++) {
        struct ipc_obj *o = &objs.v[k];
        if ((o->r.kind == LZ_IPC_MQ ? fill_mq(o, why, whylen) : fill_sysv(o, why, whylen)) < 0) return -1;
    }
    return 0;
}
