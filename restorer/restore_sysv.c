/* System V shared memory attached again where the program had it: a real
 * attachment (shmat at its address), so that shmdt works and the segment's
 * count of attachments is right.  `lazarus restart` made or took over the
 * segment with its id and content before this runs (cli/restart_ipc.c: the
 * regions that attach one are mapped in the second stage, after it); the
 * content is the segment's, never filled from frames.  A segment the program
 * had removed (IPC_RMID) while attached is removed again once attached. */
#include "restorer.h"
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>

static const struct lz_ipc *segment(const struct lz_image *img, uint64_t id)
{
    for (size_t k = 0; k < img->nipc; k++)
        if (img->ipc[k].kind == LZ_IPC_SHM && (uint64_t)img->ipc[k].id == id) return &img->ipc[k];
    return NULL;
}

/* r is the first piece (offset 0) of an attachment; the pieces after it
 * (split by mprotect) are attached with it and get their own protections. */
void restore_sysv_attach(struct restore_ctx *rc, const struct lz_region *r)
{
    const struct lz_image *img = &rc->img;
    if (r->file_offset != 0) return; /* a later piece of an attachment */
    const struct lz_ipc *s = segment(img, r->file_ino);
    if (!s) restore_fail("the image names System V shared memory %llu it has no record of", (unsigned long long)r->file_ino);
    uint64_t whole = (s->size + 4095) & ~4095ull;
    size_t first = (size_t)(r - img->regions), last = first;
    int wr = 0, ex = 0;
    for (uint64_t off = 0; last < img->nregions; last++) {
        const struct lz_region *q = &img->regions[last];
        if (!(q->flags & LZ_RF_SYSV) || q->file_ino != r->file_ino || q->file_offset != off) break;
        wr |= (q->prot & PROT_WRITE) != 0;
        ex |= (q->prot & PROT_EXEC) != 0;
        off += q->end - q->start;
        if (off == whole) { last++; break; }
    }
    int id = s->id, fill = 0;
    struct shmid_ds ds;
    if ((s->flags & (LZ_IPCF_REMOVED | LZ_IPCF_CREATED)) == (LZ_IPCF_REMOVED | LZ_IPCF_CREATED) && shmctl(id, IPC_STAT, &ds) < 0) {
        /* removed while attached, gone with the killed job, and its id could not
         * be had (`lazarus restart` left it to this process, its only holder):
         * made anew with another id, filled from the image */
        id = shmget(IPC_PRIVATE, s->size, IPC_CREAT | 0600 | (int)s->mode);
        if (id < 0) restore_fail("cannot make System V shared memory %d again: %s", s->id, strerror(errno));
        fill = 1;
    }
    void *a = shmat(id, (void *)r->start, (wr || fill ? 0 : SHM_RDONLY) | (ex ? SHM_EXEC : 0));
    if (a == (void *)-1 || (uint64_t)a != r->start)
        restore_fail("cannot attach System V shared memory %d at 0x%llx again: %s", s->id, (unsigned long long)r->start,
                     a == (void *)-1 ? strerror(errno) : "attached elsewhere");
    if (fill) memcpy(a, img->ipc_bytes + s->data, s->size);
    for (size_t i = first; i < last; i++) {
        const struct lz_region *q = &img->regions[i];
        int full = (wr || fill ? PROT_READ | PROT_WRITE : PROT_READ) | (ex ? PROT_EXEC : 0);
        if ((int)q->prot != full && mprotect((void *)q->start, q->end - q->start, (int)q->prot) < 0)
            restore_fail("cannot set protections at 0x%llx: %s", (unsigned long long)q->start, strerror(errno));
        restore_advise(q);
    }
    if ((s->flags & LZ_IPCF_REMOVED) && shmctl(id, IPC_RMID, NULL) < 0 && errno != EINVAL && errno != EIDRM)
        restore_fail("cannot remove System V shared memory %d again (the program had removed it): %s", s->id, strerror(errno));
}
