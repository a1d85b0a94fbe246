/* System V IPC objects of the job: the shared memory segments, semaphore
 * sets and message queues a process of the job made (shmget, semget, msgget
 * with IPC_PRIVATE, or IPC_CREAT when it made the object) are remembered by
 * id (a forked child inherits the list), and each checkpoint records their
 * state in the IPC section (format.h: struct lz_ipc): a segment's content,
 * read through an attachment of its own; a set's values; a queue's messages
 * with their types, in order, read without taking them (msgrcv MSG_COPY).
 * A segment of outside the job that the process has attached is recorded
 * too, to be attached again, its content left alone.  `lazarus restart`
 * makes each object again with its id, or takes over the one the killed
 * job left, and gives it this state (cli/restart_ipc.c); the restorer
 * attaches the segments where they were (restorer/restore_sysv.c). */
#include "rt.h"
#include <errno.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <mqueue.h>

#ifndef MSG_COPY
#define MSG_COPY 040000
#endif
#define SYSV_MAX 256

static struct { uint32_t kind; int32_t id, key; } made[SYSV_MAX];
static int nmade, overflow;

static void remember(uint32_t kind, long id, int key)
{
    int k = __atomic_fetch_add(&nmade, 1, __ATOMIC_RELAXED);
    if (k >= SYSV_MAX) { overflow = 1; __atomic_fetch_sub(&nmade, 1, __ATOMIC_RELAXED); return; }
    made[k].kind = kind;
    made[k].id = (int32_t)id;
    made[k].key = key;
}

/* The call as the program made it; whether it made the object is known by
 * asking first with IPC_EXCL (an object of that key that exists already is
 * then returned by the call as asked). */
static long make(long nr, uint32_t kind, key_t key, long arg, int flg)
{
    rt_enter(); /* no checkpoint between the object's birth and its record */
    long r;
    int exclusive = key == IPC_PRIVATE || (flg & (IPC_CREAT | IPC_EXCL)) == (IPC_CREAT | IPC_EXCL);
    if (!exclusive && (flg & IPC_CREAT)) {
        r = nr == SYS_msgget ? lz_sc2(nr, key, flg | IPC_EXCL) : lz_sc3(nr, key, arg, flg | IPC_EXCL);
        if (r >= 0) remember(kind, r, key);
        if (r != -EEXIST) goto out;
    }
    r = nr == SYS_msgget ? lz_sc2(nr, key, flg) : lz_sc3(nr, key, arg, flg);
    if (r >= 0 && exclusive) remember(kind, r, key);
out:
    rt_leave();
    if (r < 0) { errno = (int)-r; return -1; }
    return r;
}

RT_API int shmget(key_t key, size_t size, int flg) { return (int)make(SYS_shmget, LZ_IPC_SHM, key, (long)size, flg); }
RT_API int semget(key_t key, int nsems, int flg) { return (int)make(SYS_semget, LZ_IPC_SEM, key, nsems, flg); }
RT_API int msgget(key_t key, int flg) { return (int)make(SYS_msgget, LZ_IPC_MSG, key, 0, flg); }

/* The section under construction. */
static struct lz_ipc *rec(struct rt_ckpt *ck)
{
    if (ck->nipc == ck->ipc_cap) return NULL;
    struct lz_ipc *r = &ck->ipc[ck->nipc++];
    memset(r, 0, sizeof *r);
    r->data = ck->ipc_len;
    return r;
}

void *rt_ipc_bytes(struct rt_ckpt *ck, size_t n)
{
    size_t pad = (n + 7) & ~(size_t)7;
    if (ck->ipc_len + pad > ck->ipc_bytes_cap) return NULL;
    void *p = ck->ipc_bytes + ck->ipc_len;
    ck->ipc_len += pad;
    return p;
}

static int full(struct rt_ckpt *ck, const char *what, int id)
{
    rt_fmt(ck->err, sizeof ck->err, "System V %s %d: the process's IPC objects hold more than a checkpoint keeps (%llu MiB), "
           "or more than a moment before (a process outside the job adds to them)", what, id, (unsigned long long)(LZ_IPC_MAX_BYTES >> 20));
    return -1;
}

/* At most how many bytes the objects' state takes now (all of the job is
 * stopped): the scratch memory reserved for it, out of the arena shared memory
 * copies need too. */
static uint64_t bound(struct rt_ckpt *ck)
{
    uint64_t n = 0;
    for (int k = 0; k < nmade; k++) {
        struct shmid_ds s; struct semid_ds m; struct msqid_ds q;
        if (made[k].kind == LZ_IPC_SHM && lz_sc3(SYS_shmctl, made[k].id, IPC_STAT, &s) == 0) n += s.shm_segsz + 8;
        if (made[k].kind == LZ_IPC_SEM && lz_sc4(SYS_semctl, made[k].id, 0, IPC_STAT, &m) == 0) n += m.sem_nsems * 2 + 8;
        if (made[k].kind == LZ_IPC_MSG && lz_sc3(SYS_msgctl, made[k].id, IPC_STAT, &q) == 0) n += q.__msg_cbytes + q.msg_qnum * 24;
    }
    for (size_t i = 0; i < ck->nregions; i++) { /* an attachment of a segment not on the list */
        struct shmid_ds s;
        const struct lz_region *g = &ck->regions[i];
        if ((g->flags & LZ_RF_SYSV) && g->file_offset == 0 && lz_sc3(SYS_shmctl, g->file_ino, IPC_STAT, &s) == 0) n += s.shm_segsz + 8;
    }
    for (size_t i = 0; i < ck->nfds; i++) {
        struct mq_attr a;
        if (ck->fds[i].kind == LZ_FD_MQUEUE && lz_sc3(SYS_mq_getsetattr, ck->fds[i].fd, 0, &a) == 0)
            n += (uint64_t)a.mq_curmsgs * ((uint64_t)a.mq_msgsize + 16);
    }
    return n < LZ_IPC_MAX_BYTES ? n : LZ_IPC_MAX_BYTES;
}

/* An attachment of segment id in this process, readable over its whole
 * size: its content is read from there (a fresh attachment of its own would
 * cost the page faults of mapping it). */
static const char *attached(const struct rt_ckpt *ck, int id, uint64_t size)
{
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        if (!(r->flags & LZ_RF_SYSV) || r->file_ino != (uint64_t)id || r->file_offset != 0) continue;
        uint64_t off = 0;
        for (size_t j = i; j < ck->nregions && off < size; j++) {
            const struct lz_region *q = &ck->regions[j];
            if (!(q->flags & LZ_RF_SYSV) || q->file_ino != (uint64_t)id || q->file_offset != off || !(q->prot & PROT_READ) ||
                (j > i && q->start != ck->regions[j - 1].end))
                break;
            off += q->end - q->start;
        }
        if (off >= size) return (const char *)r->start;
    }
    return NULL;
}

static int shm_record(struct rt_ckpt *ck, int id, int created)
{
    struct shmid_ds ds;
    long e = lz_sc3(SYS_shmctl, id, IPC_STAT, &ds);
    if (e < 0) {
        if (created) return 1; /* removed since: no longer the job's */
        rt_fmt(ck->err, sizeof ck->err, "System V shared memory %d, attached by the process, cannot be read (%s)", id,
               e == -EACCES ? "no read permission" : "gone");
        return -1;
    }
    /* a segment attached here and removed since, the process's user's: the job's
     * (only its holders can reach it; one a restart made anew has a new id) */
    if (created < 0) created = (ds.shm_perm.mode & SHM_DEST) && ds.shm_perm.cuid == (uint32_t)lz_sc0(SYS_geteuid);
    struct lz_ipc *r = rec(ck);
    if (!r) { rt_fmt(ck->err, sizeof ck->err, "more than %d System V objects", SYSV_MAX * 2); return -1; }
    r->kind = LZ_IPC_SHM;
    r->flags = (created ? LZ_IPCF_CREATED : 0) | ((ds.shm_perm.mode & SHM_DEST) ? LZ_IPCF_REMOVED : 0);
    r->id = id;
    r->key = ds.shm_perm.__key;
    r->mode = ds.shm_perm.mode & 0777;
    r->uid = ds.shm_perm.uid; r->gid = ds.shm_perm.gid; r->cuid = ds.shm_perm.cuid;
    r->size = ds.shm_segsz;
    if (!created) return 0;
    char *to = rt_ipc_bytes(ck, ds.shm_segsz);
    if (!to) return full(ck, "shared memory", id);
    const char *from = attached(ck, id, ds.shm_segsz);
    if (from) {
        memcpy(to, from, ds.shm_segsz);
    } else {
        long a = lz_sc3(SYS_shmat, id, 0, SHM_RDONLY);
        if (a < 0 && a >= -4095) {
            rt_fmt(ck->err, sizeof ck->err, "System V shared memory %d cannot be read: %s", id, a == -EACCES ? "no read permission" : "shmat failed");
            return -1;
        }
        memcpy(to, (void *)a, ds.shm_segsz);
        lz_sc1(SYS_shmdt, a);
    }
    r->length = ds.shm_segsz;
    return 0;
}

static int sem_record(struct rt_ckpt *ck, int id)
{
    struct semid_ds ds;
    if (lz_sc4(SYS_semctl, id, 0, IPC_STAT, &ds) < 0) return 1; /* removed since */
    struct lz_ipc *r = rec(ck);
    if (!r) { rt_fmt(ck->err, sizeof ck->err, "more than %d System V objects", SYSV_MAX * 2); return -1; }
    r->kind = LZ_IPC_SEM;
    r->flags = LZ_IPCF_CREATED;
    r->id = id;
    r->key = ds.sem_perm.__key;
    r->mode = ds.sem_perm.mode & 0777;
    r->uid = ds.sem_perm.uid; r->gid = ds.sem_perm.gid; r->cuid = ds.sem_perm.cuid;
    r->count = (uint32_t)ds.sem_nsems;
    unsigned short *v = rt_ipc_bytes(ck, ds.sem_nsems * sizeof *v);
    if (!v) return full(ck, "semaphore set", id);
    long e = lz_sc4(SYS_semctl, id, 0, GETALL, v);
    if (e < 0) { rt_fmt(ck->err, sizeof ck->err, "System V semaphore set %d cannot be read (semctl GETALL: error %ld)", id, -e); return -1; }
    r->length = ds.sem_nsems * sizeof *v;
    return 0;
}

static int msg_record(struct rt_ckpt *ck, int id)
{
    struct msqid_ds ds;
    if (lz_sc3(SYS_msgctl, id, IPC_STAT, &ds) < 0) return 1; /* removed since */
    struct lz_ipc *r = rec(ck);
    if (!r) { rt_fmt(ck->err, sizeof ck->err, "more than %d System V objects", SYSV_MAX * 2); return -1; }
    r->kind = LZ_IPC_MSG;
    r->flags = LZ_IPCF_CREATED;
    r->id = id;
    r->key = ds.msg_perm.__key;
    r->mode = ds.msg_perm.mode & 0777;
    r->uid = ds.msg_perm.uid; r->gid = ds.msg_perm.gid; r->cuid = ds.msg_perm.cuid;
    r->size = ds.msg_qbytes;
    /* each message, copied in place by its index (the queue is left as it is) */
    size_t cap = ds.msg_qbytes + sizeof(long);
    char *buf = arena_alloc(&ck->arena, cap);
    if (!buf) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    for (unsigned long k = 0; k < ds.msg_qnum; k++) {
        long n = lz_sc5(SYS_msgrcv, id, buf, cap - sizeof(long), k, IPC_NOWAIT | MSG_COPY);
        if (n < 0) {
            rt_fmt(ck->err, sizeof ck->err, "System V message queue %d: message %lu cannot be read without taking it (%s)", id, k,
                   n == -ENOSYS ? "the kernel lacks MSG_COPY: CONFIG_CHECKPOINT_RESTORE" : "msgrcv MSG_COPY failed");
            return -1;
        }
        int64_t *h = rt_ipc_bytes(ck, 16 + (size_t)n);
        if (!h) return full(ck, "message queue", id);
        memcpy(&h[0], buf, sizeof(long));
        h[1] = n;
        memcpy(h + 2, buf + sizeof(long), (size_t)n);
        r->count++;
    }
    r->length = ck->ipc_len - r->data;
    return 0;
}

/* Whole attachments only: a segment's regions here run from offset 0 to its
 * end, piece after piece (mprotect splits an attachment; munmap of a part
 * leaves what shmat cannot make again). */
static int check_attachments(struct rt_ckpt *ck)
{
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *r = &ck->regions[i];
        if (!(r->flags & LZ_RF_SYSV)) continue;
        const struct lz_ipc *s = NULL;
        for (size_t k = 0; k < ck->nipc && !s; k++)
            if (ck->ipc[k].kind == LZ_IPC_SHM && ck->ipc[k].id == (int32_t)r->file_ino) s = &ck->ipc[k];
        uint64_t whole = s ? (s->size + 4095) & ~4095ull : 0, off = 0;
        size_t j = i;
        while (s && r->file_offset == 0 && j < ck->nregions) {
            const struct lz_region *q = &ck->regions[j];
            if (!(q->flags & LZ_RF_SYSV) || q->file_ino != r->file_ino || q->file_offset != off ||
                (j > i && q->start != ck->regions[j - 1].end))
                break;
            off += q->end - q->start;
            j++;
            if (off == whole) break;
        }
        if (!s || off != whole) {
            rt_fmt(ck->err, sizeof ck->err, "System V shared memory %d is attached in part at 0x%llx (a part of the attachment was "
                   "unmapped): Lazarus restores whole attachments only", (int)r->file_ino, (unsigned long long)r->start);
            return -1;
        }
        i = j - 1;
    }
    return 0;
}

int rt_capture_ipc(struct rt_ckpt *ck)
{
    ck->ipc_cap = SYSV_MAX * 2 + ck->nfds;
    ck->ipc = arena_alloc(&ck->arena, ck->ipc_cap * sizeof *ck->ipc);
    ck->ipc_bytes_cap = bound(ck);
    ck->ipc_bytes = arena_alloc(&ck->arena, ck->ipc_bytes_cap + 8);
    ck->nipc = ck->ipc_len = 0;
    if (!ck->ipc || !ck->ipc_bytes) { rt_fmt(ck->err, sizeof ck->err, "out of checkpoint scratch memory"); return -1; }
    if (overflow) { rt_fmt(ck->err, sizeof ck->err, "the process made more than %d System V objects", SYSV_MAX); return -1; }
    /* the job's objects; one removed since is forgotten */
    int kept = 0;
    for (int k = 0; k < nmade; k++) {
        int r = made[k].kind == LZ_IPC_SHM ? shm_record(ck, made[k].id, 1)
              : made[k].kind == LZ_IPC_SEM ? sem_record(ck, made[k].id) : msg_record(ck, made[k].id);
        if (r < 0) return -1;
        if (r == 0) {
            /* the id names another object now (a removed segment still attached has key 0) */
            const struct lz_ipc *got = &ck->ipc[ck->nipc - 1];
            if ((got->key != made[k].key && !(got->flags & LZ_IPCF_REMOVED)) || got->cuid != (uint32_t)lz_sc0(SYS_geteuid)) {
                ck->ipc_len = got->data;
                ck->nipc--;
                r = 1;
            }
        }
        if (r == 0) made[kept++] = made[k];
    }
    nmade = kept;
    /* segments attached here that the job did not make */
    for (size_t i = 0; i < ck->nregions; i++) {
        const struct lz_region *g = &ck->regions[i];
        if (!(g->flags & LZ_RF_SYSV)) continue;
        int known = 0;
        for (size_t k = 0; k < ck->nipc && !known; k++) known = ck->ipc[k].kind == LZ_IPC_SHM && ck->ipc[k].id == (int32_t)g->file_ino;
        if (!known && shm_record(ck, (int)g->file_ino, -1) < 0) return -1;
    }
    if (check_attachments(ck) < 0) return -1;
    return rt_capture_mqueues(ck);
}
