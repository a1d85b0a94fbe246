/* The job's process tree of a checkpoint (tree.h). */
#include "tree.h"
#include "hash.h"
#include "place.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int lz_tree_write(const char *dir, const struct lz_tree *t, char *why, size_t whylen)
{
    size_t len = sizeof(struct lz_tree_header) + t->nprocs * sizeof *t->procs + t->nshared * sizeof *t->shared + sizeof(struct lz_trailer);
    char *buf = calloc(1, len);
    if (!buf) { snprintf(why, whylen, "out of memory"); return -1; }
    struct lz_tree_header *h = (struct lz_tree_header *)buf;
    memcpy(h->magic, LZ_TREE_MAGIC, sizeof h->magic);
    h->version = LZ_VERSION;
    h->nprocs = (uint32_t)t->nprocs;
    h->nshared = (uint32_t)t->nshared;
    h->index = t->index;
    h->trigger = t->trigger;
    h->job[0] = t->job[0];
    h->job[1] = t->job[1];
    char *p = buf + sizeof *h;
    memcpy(p, t->procs, t->nprocs * sizeof *t->procs);
    p += t->nprocs * sizeof *t->procs;
    if (t->nshared) memcpy(p, t->shared, t->nshared * sizeof *t->shared);
    p += t->nshared * sizeof *t->shared;
    struct lz_trailer tr = {lz_hash(buf, (size_t)(p - buf))};
    memcpy(p, &tr, sizeof tr);
    char path[LZ_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/" LZ_TREE, dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int rc = fd < 0 || lz_write_all(fd, buf, len) < 0 || fsync(fd) < 0 ? -1 : 0;
    if (rc < 0) snprintf(why, whylen, "cannot write the checkpoint's process tree: %s", strerror(errno));
    if (fd >= 0) close(fd);
    free(buf);
    return rc;
}

#define FAIL(...) do { snprintf(why, whylen, __VA_ARGS__); free(buf); lz_tree_free(t); return -1; } while (0)

int lz_tree_load(const char *ckpt_dir, struct lz_tree *t, char *why, size_t whylen)
{
    memset(t, 0, sizeof *t);
    char path[LZ_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/" LZ_TREE, ckpt_dir);
    size_t len;
    char *buf = lz_read_file(path, &len);
    if (!buf) { snprintf(why, whylen, "cannot read its process tree (%s): %s", LZ_TREE, strerror(errno)); return -1; }
    const struct lz_tree_header *h = (const void *)buf;
    if (len < sizeof *h + sizeof(struct lz_trailer) || memcmp(h->magic, LZ_TREE_MAGIC, 8)) FAIL("its process tree is not a Lazarus tree file");
    /* the tree's layout is version 5's in version 6 too */
    if (h->version < LZ_VERSION_MIN || h->version > LZ_VERSION)
        FAIL("its process tree has format version %u (this build reads versions %u to %u)", h->version, LZ_VERSION_MIN, LZ_VERSION);
    if (h->nprocs == 0 || h->nprocs > LZ_MAX_PROCS || h->nshared > 64u * LZ_MAX_PROCS ||
        len != sizeof *h + h->nprocs * sizeof(struct lz_tree_proc) + h->nshared * sizeof(struct lz_tree_shared) + sizeof(struct lz_trailer))
        FAIL("its process tree is truncated or has impossible counts");
    struct lz_trailer tr;
    memcpy(&tr, buf + len - sizeof tr, sizeof tr);
    if (tr.xxh3 != lz_hash(buf, len - sizeof tr)) FAIL("its process tree fails its checksum (damaged)");
    if (lz_place_check(ckpt_dir, "its process tree", h->job, h->index, -1, why, whylen) < 0) {
        char inner[600];
        snprintf(inner, sizeof inner, "%s", why);
        FAIL("%s", inner);
    }
    t->index = h->index;
    t->trigger = h->trigger;
    t->job[0] = h->job[0];
    t->job[1] = h->job[1];
    t->nprocs = h->nprocs;
    t->nshared = h->nshared;
    t->procs = malloc(t->nprocs * sizeof *t->procs);
    t->shared = malloc((t->nshared ? t->nshared : 1) * sizeof *t->shared);
    if (!t->procs || !t->shared) FAIL("out of memory");
    memcpy(t->procs, buf + sizeof *h, t->nprocs * sizeof *t->procs);
    memcpy(t->shared, buf + sizeof *h + t->nprocs * sizeof *t->procs, t->nshared * sizeof *t->shared);
    /* the main program first, parents before children, each PID once, parts where they belong */
    for (size_t i = 0; i < t->nprocs; i++) {
        struct lz_tree_proc *p = &t->procs[i];
        p->comm[sizeof p->comm - 1] = 0;
        p->dir[sizeof p->dir - 1] = 0;
        if (p->pid <= 0 || (p->state != LZ_TP_LIVE && p->state != LZ_TP_ZOMBIE)) FAIL("its process tree has a bad entry %zu", i);
        if ((i == 0) != (p->ppid == 0) || (i == 0 && (p->state != LZ_TP_LIVE || p->dir[0])))
            FAIL("its process tree does not start with the main program");
        char want[32] = "";
        if (i > 0 && p->state == LZ_TP_LIVE) snprintf(want, sizeof want, LZ_PROC_PREFIX "%d", p->pid);
        if (strcmp(p->dir, want)) FAIL("its process tree names a bad directory for process %d", p->pid);
        int parent = i == 0;
        for (size_t k = 0; k < i; k++) {
            if (t->procs[k].pid == p->pid) FAIL("its process tree lists process %d twice", p->pid);
            if (t->procs[k].pid == p->ppid && t->procs[k].state == LZ_TP_LIVE) parent = 1;
        }
        if (!parent) FAIL("its process tree lists process %d before its parent %d", p->pid, p->ppid);
    }
    for (size_t i = 0; i < t->nshared; i++) {
        int found = 0;
        for (size_t k = 0; k < t->nprocs; k++) found |= t->procs[k].pid == t->shared[i].pid && t->procs[k].state == LZ_TP_LIVE;
        if (!found || t->shared[i].fd < 0) FAIL("its process tree shares a descriptor of an unknown process");
    }
    free(buf);
    return 0;
}

void lz_tree_free(struct lz_tree *t)
{
    free(t->procs);
    free(t->shared);
    t->procs = NULL;
    t->shared = NULL;
    t->nprocs = t->nshared = 0;
}

void lz_tree_part_dir(char *out, size_t len, const char *ckpt_dir, const struct lz_tree_proc *p)
{
    if (p->dir[0]) snprintf(out, len, "%s/%s", ckpt_dir, p->dir);
    else snprintf(out, len, "%s", ckpt_dir);
}
