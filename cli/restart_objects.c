/* What the processes of a job being restarted share, planned before any file
 * changes: pipes, socket pairs and connections, open file descriptions, open
 * deleted files, shared memory, event-loop objects, pseudo-terminals, TCP
 * connections between processes -- each made once, by the nearest common
 * ancestor of its holders, before that process makes its children
 * (store/restart_plan.h's objects; restorer/restore_tree.c makes them). */
#include "cli.h"
#include "restart_plan.h"
#include "store.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int depth_of(const struct lz_tree *t, int32_t pid)
{
    int d = 0;
    for (ssize_t k = restart_tree_proc_index(t, pid); k > 0 && d <= (int)t->nprocs; k = restart_tree_proc_index(t, t->procs[k].ppid)) d++;
    return d;
}

/* The nearest process of which both a and b are (or are) descendants. */
static int32_t common_ancestor(const struct lz_tree *t, int32_t a, int32_t b)
{
    int da = depth_of(t, a), db = depth_of(t, b);
    for (; da > db; da--) a = t->procs[restart_tree_proc_index(t, a)].ppid;
    for (; db > da; db--) b = t->procs[restart_tree_proc_index(t, b)].ppid;
    while (a != b) {
        a = t->procs[restart_tree_proc_index(t, a)].ppid;
        b = t->procs[restart_tree_proc_index(t, b)].ppid;
    }
    return a;
}

struct objs {
    struct lz_plan_obj *v;
    size_t n;
    struct lz_plan_hold *h;
    size_t nh;
};

static struct lz_plan_obj *new_obj(struct objs *o)
{
    struct lz_plan_obj *nv = realloc(o->v, (o->n + 1) * sizeof *nv);
    if (!nv) return NULL;
    o->v = nv;
    memset(&o->v[o->n], 0, sizeof *o->v);
    return &o->v[o->n++];
}

/* The absolute path of record c's data file in process p's part ("" if none). */
static int data_path(char *out, size_t len, const char *ckpt, const struct lz_tree_proc *p, const struct lz_image *img,
                     const struct lz_chan *c)
{
    out[0] = 0;
    if (!c->bytes) return 0;
    char part[LZ_PATH_MAX];
    lz_tree_part_dir(part, sizeof part, ckpt, p);
    const char *name = lz_str(img, c->path);
    size_t pl = strlen(part), nl = strlen(name);
    if (pl + 1 + nl >= len) return -1;
    memcpy(out, part, pl);
    out[pl] = '/';
    memcpy(out + pl + 1, name, nl + 1);
    return 0;
}

/* Pipes held by more than one process of the job (an inode seen in two parts). */
static int plan_pipes(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_image *img = &rt->imgs[k];
        for (size_t i = 0; i < img->nfds; i++) {
            const struct lz_fd *f = &img->fds[i];
            if (f->kind != LZ_FD_PIPE && f->kind != LZ_FD_FIFO) continue; /* (a named pipe is shared as a pipe) */
            uint32_t ck = f->kind == LZ_FD_FIFO ? LZ_CH_FIFO : LZ_CH_PIPE;
            struct lz_plan_obj *known = NULL;
            for (size_t j = 0; j < o->n && !known; j++)
                if (o->v[j].kind == LZ_PO_PIPE && o->v[j].chan.ino == f->ino && o->v[j].chan.kind == ck) known = &o->v[j];
            if (known) {
                known->creator = common_ancestor(t, known->creator, t->procs[k].pid);
                continue;
            }
            int elsewhere = 0;
            for (size_t q = k + 1; q < t->nprocs && !elsewhere; q++)
                for (size_t m = 0; m < rt->imgs[q].nfds && !elsewhere; m++)
                    elsewhere = rt->imgs[q].fds[m].kind == f->kind && rt->imgs[q].fds[m].ino == f->ino;
            if (!elsewhere) continue; /* its own: the restorer makes it (restore_pipes.c) */
            const struct lz_chan *c = NULL;
            for (size_t m = 0; m < img->nchans; m++) if (img->chans[m].ino == f->ino && img->chans[m].kind == ck) c = &img->chans[m];
            if (!c) {
                snprintf(why, whylen, "process %d: descriptor %d names pipe:[%llu], which its manifest does not describe",
                         t->procs[k].pid, f->fd, (unsigned long long)f->ino);
                return -1;
            }
            struct lz_plan_obj *ob = new_obj(o);
            if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
            ob->kind = LZ_PO_PIPE;
            ob->creator = t->procs[k].pid;
            ob->chan = *c;
            if (ck == LZ_CH_FIFO) snprintf(ob->path2, sizeof ob->path2, "%s", lz_str(img, f->path)); /* where it is opened */
            if (data_path(ob->path, sizeof ob->path, ckpt, &t->procs[k], img, c) < 0) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
        }
    }
    return 0;
}

static const struct lz_fd *fd_record(const struct lz_image *img, int fd)
{
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].fd == fd) return &img->fds[i];
    return NULL;
}

/* The record of event-loop object descriptor fd (not a watch). */
static const struct lz_event *event_record(const struct lz_image *img, int fd)
{
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].fd == fd && img->events[i].kind != LZ_EV_WATCH && img->events[i].kind != LZ_EV_INWATCH)
            return &img->events[i];
    return NULL;
}

/* Open deleted files whose inode processes hold through descriptions of
 * their own (each opened it before it was deleted): one inode, made by the
 * nearest common ancestor of its holders, every description opened through
 * it (restorer/restore_ghost.c).  Before plan_files: a shared description
 * of it is opened from this object. */
static int plan_ghost_inodes(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++) {
        if (t->procs[k].state != LZ_TP_LIVE) continue;
        const struct lz_image *img = &rt->imgs[k];
        for (size_t i = 0; i < img->nfds; i++) {
            const struct lz_fd *f = &img->fds[i];
            if (f->kind != LZ_FD_GHOST) continue;
            int seen = 0;
            for (size_t j = 0; j < o->n && !seen; j++)
                seen = o->v[j].kind == LZ_PO_GHOSTINO && o->v[j].ghost.dev == f->dev && o->v[j].ghost.ino == f->ino;
            if (seen) continue;
            int32_t creator = t->procs[k].pid;
            size_t holders = 1;
            for (size_t q = k + 1; q < t->nprocs; q++) {
                int holds = 0;
                for (size_t m = 0; t->procs[q].state == LZ_TP_LIVE && m < rt->imgs[q].nfds && !holds; m++)
                    holds = rt->imgs[q].fds[m].kind == LZ_FD_GHOST && rt->imgs[q].fds[m].dev == f->dev &&
                            rt->imgs[q].fds[m].ino == f->ino;
                if (holds) { holders++; creator = common_ancestor(t, creator, t->procs[q].pid); }
            }
            if (holders < 2) continue; /* one process's: its restorer makes it */
            char part[LZ_PATH_MAX];
            lz_tree_part_dir(part, sizeof part, ckpt, &t->procs[k]);
            struct lz_plan_obj *ob = new_obj(o);
            if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
            ob->kind = LZ_PO_GHOSTINO;
            ob->creator = creator;
            ob->ghost = *f;
            if ((size_t)snprintf(ob->path, sizeof ob->path, "%s/%s", part, lz_str(img, f->path)) >= sizeof ob->path) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
        }
    }
    return 0;
}

/* Open file descriptions of regular files, directories, devices, local
 * sockets and event-loop objects that several processes share (the tree's
 * groups).  A dup inside one process
 * follows its original; stdio from the launcher and deleted files are made
 * per process, as before. */
static int plan_files(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t s = 0; s < t->nshared; s++) {
        int32_t g = t->shared[s].group;
        int seen = 0;
        for (size_t r = 0; r < s && !seen; r++) seen = t->shared[r].group == g;
        if (seen) continue;
        size_t first = o->nh, nprocs = 0;
        int32_t creator = 0, last_pid = 0;
        const struct lz_fd *model = NULL;
        const struct lz_image *mimg = NULL;
        ssize_t mk = -1;
        for (size_t r = s; r < t->nshared; r++) {
            if (t->shared[r].group != g) continue;
            ssize_t k = restart_tree_proc_index(t, t->shared[r].pid);
            if (k < 0 || t->procs[k].state != LZ_TP_LIVE) continue;
            const struct lz_fd *f = fd_record(&rt->imgs[k], t->shared[r].fd);
            if (!f || (f->kind != LZ_FD_FILE && f->kind != LZ_FD_DIR && f->kind != LZ_FD_DEV && f->kind != LZ_FD_USOCK &&
                       f->kind != LZ_FD_GHOST && f->kind != LZ_FD_EVENT)) continue;
            if (!model) model = f, mimg = &rt->imgs[k], creator = t->procs[k].pid, mk = k;
            else creator = common_ancestor(t, creator, t->procs[k].pid);
            if (t->procs[k].pid != last_pid) nprocs++;
            last_pid = t->procs[k].pid;
            struct lz_plan_hold *nh = realloc(o->h, (o->nh + 1) * sizeof *nh);
            if (!nh) { snprintf(why, whylen, "out of memory"); return -1; }
            o->h = nh;
            o->h[o->nh++] = (struct lz_plan_hold){t->procs[k].pid, t->shared[r].fd, (uint32_t)o->n, 0};
        }
        if (nprocs < 2) { o->nh = first; continue; } /* only one process holds it: nothing shared */
        struct lz_plan_obj *ob = new_obj(o);
        if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
        ob->kind = LZ_PO_FILE;
        ob->creator = creator;
        if (model->kind == LZ_FD_GHOST) { /* an open deleted file: one nameless file (restore_ghost.c) */
            char part[LZ_PATH_MAX];
            lz_tree_part_dir(part, sizeof part, ckpt, &t->procs[mk]);
            ob->kind = LZ_PO_GHOST;
            ob->ghost = *model;
            if ((size_t)snprintf(ob->path, sizeof ob->path, "%s/%s", part, lz_str(mimg, model->path)) >= sizeof ob->path) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
            continue;
        }
        if (model->kind == LZ_FD_USOCK) { /* a local socket: made from its record (restore_usock.c) */
            const struct lz_usock *u = lz_usock_of(mimg, model->fd);
            ob->kind = LZ_PO_USOCK;
            ob->usock = *u; /* (the manifest's check: every LZ_FD_USOCK descriptor has its record) */
            snprintf(ob->path2, sizeof ob->path2, "%s", lz_str(mimg, mimg->proc->cwd));
            if (data_path(ob->path, sizeof ob->path, ckpt, &t->procs[mk], mimg, &u->q) < 0) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
            continue;
        }
        if (model->kind == LZ_FD_EVENT) { /* an event-loop object: made from its record (restore_events.c) */
            const struct lz_event *e = event_record(mimg, model->fd);
            if (!e) {
                snprintf(why, whylen, "process %d: descriptor %d has no event record in its manifest", t->procs[mk].pid,
                         model->fd);
                return -1;
            }
            ob->kind = LZ_PO_EVENT;
            ob->event = *e;
            ob->flags = model->flags;
            ob->leader = t->procs[mk].pid;
            continue;
        }
        ob->flags = model->flags;
        ob->offset = model->offset;
        snprintf(ob->path, sizeof ob->path, "%s", lz_str(mimg, model->path));
    }
    return 0;
}


static const struct lz_chan *chan_record(const struct restart_tree *rt, uint64_t ino, size_t *owner)
{
    for (size_t k = 0; k < rt->tree.nprocs; k++)
        for (size_t m = 0; m < rt->imgs[k].nchans; m++)
            if (rt->imgs[k].chans[m].ino == ino) { *owner = k; return &rt->imgs[k].chans[m]; }
    return NULL;
}

/* Socket pairs whose ends more than one process holds (one holds an end the
 * other's peer, LZ_CHS_REMOTE; or a child inherited an end of a pair its
 * parent holds whole): made once by their nearest common ancestor. */
static int plan_socks(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_image *img = &rt->imgs[k];
        for (size_t i = 0; i < img->nchans; i++) {
            const struct lz_chan *c = &img->chans[i];
            if (c->kind == LZ_CH_PIPE) continue;
            uint64_t lo = c->ino < c->peer ? c->ino : c->peer, hi = c->ino ^ c->peer ^ lo;
            int seen = 0;
            for (size_t j = 0; j < o->n && !seen; j++) seen = o->v[j].kind == LZ_PO_SOCK && o->v[j].chan.ino == lo;
            if (seen) continue;
            int32_t creator = 0;
            size_t holders = 0;
            for (size_t q = 0; q < t->nprocs; q++) {
                int holds = 0;
                for (size_t m = 0; m < rt->imgs[q].nfds && !holds; m++)
                    holds = rt->imgs[q].fds[m].kind == LZ_FD_SOCKET && (rt->imgs[q].fds[m].ino == lo || rt->imgs[q].fds[m].ino == hi);
                if (!holds) continue;
                creator = holders++ ? common_ancestor(t, creator, t->procs[q].pid) : t->procs[q].pid;
            }
            if (holders < 2) continue; /* its own: the restorer makes it (restore_pipes.c) */
            size_t ka = 0, kb = 0;
            const struct lz_chan *ca = chan_record(rt, lo, &ka), *cb = chan_record(rt, hi, &kb);
            if (!ca || !cb || ca->kind != cb->kind || ca->peer != hi || cb->peer != lo) {
                snprintf(why, whylen, "process %d: socket:[%llu] has no other end in the checkpoint", t->procs[k].pid,
                         (unsigned long long)c->ino);
                return -1;
            }
            struct lz_plan_obj *ob = new_obj(o);
            if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
            ob->kind = LZ_PO_SOCK;
            ob->creator = creator;
            ob->chan = *ca;
            ob->chan2 = *cb;
            if (data_path(ob->path, sizeof ob->path, ckpt, &t->procs[ka], &rt->imgs[ka], ca) < 0 ||
                data_path(ob->path2, sizeof ob->path2, ckpt, &t->procs[kb], &rt->imgs[kb], cb) < 0) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
        }
    }
    return 0;
}

/* The record of the TCP socket whose inode is ino (its descriptor's), in any process. */
static const struct lz_inet *inet_record(const struct restart_tree *rt, uint64_t ino, size_t *owner)
{
    for (size_t k = 0; k < rt->tree.nprocs; k++)
        for (size_t m = 0; m < rt->imgs[k].ninets; m++) {
            const struct lz_inet *s = &rt->imgs[k].inets[m];
            const struct lz_fd *f = fd_record(&rt->imgs[k], s->fd);
            if (f && f->ino == ino) { *owner = k; return s; }
        }
    return NULL;
}

/* TCP connections between two processes of the job (each end's record names
 * the other's socket, runtime/rt_inet.c): made once, connected, by their
 * nearest common ancestor. */
static int plan_inet(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++)
        for (size_t m = 0; m < rt->imgs[k].ninets; m++) {
            const struct lz_inet *a = &rt->imgs[k].inets[m];
            const struct lz_fd *fa = fd_record(&rt->imgs[k], a->fd);
            size_t kb = 0;
            const struct lz_inet *b = a->peer_ino ? inet_record(rt, a->peer_ino, &kb) : NULL;
            const struct lz_fd *fb = b ? fd_record(&rt->imgs[kb], b->fd) : NULL;
            if (!fa || !b || !fb || kb == k || b->peer_ino != fa->ino || fa->ino > fb->ino) continue; /* once, from the lower */
            int a_accepts = 1; /* the end on a listener's port accepts; else the lower inode */
            for (size_t q = 0; q < t->nprocs; q++)
                for (size_t r = 0; r < rt->imgs[q].ninets; r++) {
                    const struct lz_inet *l = &rt->imgs[q].inets[r];
                    if (l->state == LZ_IN_LISTEN && l->family == a->family && l->lport == b->lport) a_accepts = 0;
                }
            struct lz_plan_obj *ob = new_obj(o);
            if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
            ob->kind = LZ_PO_TCP;
            ob->creator = common_ancestor(t, t->procs[k].pid, t->procs[kb].pid);
            size_t ka = k;
            if (!a_accepts) { const struct lz_inet *x = a; a = b; b = x; const struct lz_fd *y = fa; fa = fb; fb = y; ka = kb; kb = k; }
            ob->inet = *a;
            ob->inet2 = *b;
            ob->chan.ino = fa->ino;
            ob->chan2.ino = fb->ino;
            char pa[LZ_PATH_MAX], pb[LZ_PATH_MAX];
            lz_tree_part_dir(pa, sizeof pa, ckpt, &t->procs[ka]);
            lz_tree_part_dir(pb, sizeof pb, ckpt, &t->procs[kb]);
            if ((a->bytes && snprintf(ob->path, sizeof ob->path, "%s/%s", pa, lz_str(&rt->imgs[ka], a->path)) >= (int)sizeof ob->path) ||
                (b->bytes && snprintf(ob->path2, sizeof ob->path2, "%s/%s", pb, lz_str(&rt->imgs[kb], b->path)) >= (int)sizeof ob->path2)) {
                snprintf(why, whylen, "the store's path is too long");
                return -1;
            }
        }
    return 0;
}

/* Shared memory (LZ_R_SHARED_ANON regions) whose object several processes map. */
static int plan_shm(struct restart_tree *rt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_image *img = &rt->imgs[k];
        for (size_t i = 0; i < img->nregions; i++) {
            const struct lz_region *r = &img->regions[i];
            if (r->kind != LZ_R_SHARED_ANON || !r->file_ino || (r->flags & LZ_RF_SYSV)) continue; /* SysV: restart_ipc.c */
            struct lz_plan_obj *ob = NULL;
            for (size_t j = 0; j < o->n && !ob; j++)
                if (o->v[j].kind == LZ_PO_SHM && o->v[j].chan.ino == r->file_dev && o->v[j].chan.peer == r->file_ino) ob = &o->v[j];
            if (!ob) {
                int elsewhere = 0;
                for (size_t q = k + 1; q < t->nprocs && !elsewhere; q++)
                    for (size_t m = 0; m < rt->imgs[q].nregions && !elsewhere; m++)
                        elsewhere = rt->imgs[q].regions[m].kind == LZ_R_SHARED_ANON &&
                                    rt->imgs[q].regions[m].file_dev == r->file_dev && rt->imgs[q].regions[m].file_ino == r->file_ino;
                if (!elsewhere) continue; /* one process's: mapped anew by its restorer */
                if (!(ob = new_obj(o))) { snprintf(why, whylen, "out of memory"); return -1; }
                ob->kind = LZ_PO_SHM;
                ob->creator = t->procs[k].pid;
                ob->chan.ino = r->file_dev;
                ob->chan.peer = r->file_ino;
            } else {
                ob->creator = common_ancestor(t, ob->creator, t->procs[k].pid);
            }
            int64_t end = (int64_t)(r->file_offset + (r->end - r->start));
            if (end > ob->offset) ob->offset = end;
        }
    }
    return 0;
}

/* Pseudo-terminals: the process holding the master recorded it (lz_pty).
 * One whose ends, or whose session's processes, are in several processes
 * is made by their nearest common ancestor (a script(1)-like parent and
 * child); a terminal end with no master anywhere is refused. */
static int plan_ptys(struct restart_tree *rt, const char *ckpt, struct objs *o, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_image *img = &rt->imgs[k];
        if (t->procs[k].state != LZ_TP_LIVE) continue;
        for (size_t i = 0; i < img->nfds; i++) { /* every terminal end has its master somewhere */
            const struct lz_fd *f = &img->fds[i];
            int found = 0;
            for (size_t q = 0; q < t->nprocs && !found && f->kind == LZ_FD_PTY; q++)
                for (size_t m = 0; t->procs[q].state == LZ_TP_LIVE && m < rt->imgs[q].nptys && !found; m++)
                    found = rt->imgs[q].ptys[m].index == f->ino && !(rt->imgs[q].ptys[m].flags & LZ_PTYF_LAUNCHER);
            if (f->kind == LZ_FD_PTY && !found) {
                snprintf(why, whylen, "process %d: descriptor %d is the terminal end of pseudo-terminal %llu, whose master "
                         "no process of the checkpoint recorded", t->procs[k].pid, f->fd, (unsigned long long)f->ino);
                return -1;
            }
        }
        for (size_t j = 0; j < img->nptys; j++) {
            const struct lz_pty *y = &img->ptys[j];
            if (y->flags & LZ_PTYF_LAUNCHER) continue; /* the restarter's (restore_pty.c) */
            int32_t creator = t->procs[k].pid;
            size_t holders = 1;
            for (size_t q = 0; q < t->nprocs; q++) {
                if (q == k || t->procs[q].state != LZ_TP_LIVE) continue;
                int holds = y->sid && t->procs[q].sid == y->sid;
                for (size_t m = 0; m < rt->imgs[q].nfds && !holds; m++)
                    holds = rt->imgs[q].fds[m].kind == LZ_FD_PTY && rt->imgs[q].fds[m].ino == y->index;
                if (!holds) continue;
                holders++;
                creator = common_ancestor(t, creator, t->procs[q].pid);
            }
            if (holders < 2 && !(y->sid && t->procs[k].sid == y->sid)) continue; /* its own (restore_pty.c) */
            struct lz_plan_obj *ob = new_obj(o);
            if (!ob) { snprintf(why, whylen, "out of memory"); return -1; }
            ob->kind = LZ_PO_PTY;
            ob->creator = creator;
            ob->offset = y->index;
            ob->pty_sid = y->sid;
            ob->pty_fg = y->fg_pgrp;
            lz_tree_part_dir(ob->path, sizeof ob->path, ckpt, &t->procs[k]);
        }
    }
    return 0;
}

int restart_tree_objects(struct restart_tree *rt, const char *ckpt, char *why, size_t whylen)
{
    struct objs o = {0};
    if (plan_pipes(rt, ckpt, &o, why, whylen) < 0 || plan_ghost_inodes(rt, ckpt, &o, why, whylen) < 0 ||
        plan_files(rt, ckpt, &o, why, whylen) < 0 ||
        plan_shm(rt, &o, why, whylen) < 0 || plan_socks(rt, ckpt, &o, why, whylen) < 0 ||
        plan_ptys(rt, ckpt, &o, why, whylen) < 0 ||
        plan_inet(rt, ckpt, &o, why, whylen) < 0) {
        free(o.v); free(o.h);
        return -1;
    }
    rt->objs = o.v;
    rt->nobjs = o.n;
    rt->holds = o.h;
    rt->nholds = o.nh;
    return 0;
}
