/* The restart of a job of several processes, on the supervisor's side:
 * every part is loaded and checked before anything changes (its manifest,
 * its mapped files, its pipes' data), then the plan the restorers follow is
 * made (store/restart_plan.h): who makes which child, process groups and
 * sessions, zombies; the objects processes share are restart_objects.c's. */
#include "cli.h"
#include "frames_check.h"
#include "restart_plan.h"
#include "store.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

static int max_fd(const struct lz_image *img)
{
    int m = 2;
    for (size_t i = 0; i < img->nfds; i++) if (img->fds[i].fd > m) m = img->fds[i].fd;
    return m;
}

/* The highest descriptor number any process of the job used, or at least. */
static int job_max_fd(const struct restart_tree *rt, int at_least)
{
    int m = at_least > 2 ? at_least : 2;
    for (size_t k = 0; k < rt->tree.nprocs; k++) {
        int f = rt->tree.procs[k].state == LZ_TP_LIVE ? max_fd(&rt->imgs[k]) : 0;
        if (f > m) m = f;
    }
    return m;
}

ssize_t restart_tree_proc_index(const struct lz_tree *t, int32_t pid)
{
    for (size_t k = 0; k < t->nprocs; k++)
        if (t->procs[k].pid == pid) return (ssize_t)k;
    return -1;
}


/* What each process does about its process group and session: a group or
 * session it led is made again; a group led by another process of the job
 * is joined; one outside the job (the launcher's) is inherited. */
static void plan_procs(const struct lz_tree *t, struct lz_plan_proc *pp)
{
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_tree_proc *p = &t->procs[k];
        memset(&pp[k], 0, sizeof pp[k]);
        pp[k].pid = p->pid;
        pp[k].ppid = p->ppid;
        if (p->sid == p->pid) pp[k].flags |= LZ_PP_SETSID;
        else if (p->pgid == p->pid) pp[k].flags |= LZ_PP_GROUP;
        else if (p->pgid > 0 && restart_tree_proc_index(t, p->pgid) >= 0) pp[k].join_pgid = p->pgid;
        if (p->state == LZ_TP_ZOMBIE) { pp[k].flags |= LZ_PP_ZOMBIE; pp[k].status = p->status; }
        /* exactly (restorer/restore_sessions.c); the launcher's session and group are 0 */
        const struct lz_tree_proc *m = &t->procs[0];
        pp[k].sid = p->sid == m->sid && m->sid != m->pid ? 0 : p->sid;
        pp[k].pgid = p->pgid == m->pgid && m->pgid != m->pid ? 0 : p->pgid;
        memcpy(pp[k].dir, p->dir, sizeof pp[k].dir);
    }
}

/* A descriptor at exactly `at`, not close-on-exec (the restorers inherit it). */
static int place(int fd, int at)
{
    if (fd < 0 || fd == at) return fd;
    int r = dup2(fd, at);
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

int restart_tree_load(struct restart_tree *rt, const char *ckpt, uint64_t index, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    rt->imgs = calloc(t->nprocs, sizeof *rt->imgs);
    if (!rt->imgs) { snprintf(why, whylen, "out of memory"); return -1; }
    rt->nlive = 0;
    for (size_t k = 0; k < t->nprocs; k++) {
        const struct lz_tree_proc *p = &t->procs[k];
        if (p->state != LZ_TP_LIVE) continue;
        rt->nlive++;
        char part[LZ_PATH_MAX], inner[1024], idwhy[1200];
        lz_tree_part_dir(part, sizeof part, ckpt, p);
        int mrc = lz_manifest_load(part, &rt->imgs[k], inner, sizeof inner);
        if (mrc == LZ_UNREADABLE) { /* a version this build cannot read: not damage */
            snprintf(why, whylen, "cannot restart from checkpoint %llu: process %d (%s): %s", (unsigned long long)index,
                     p->pid, p->comm, inner);
            return -1;
        }
        if (mrc < 0) {
            snprintf(why, whylen, "checkpoint %llu is damaged: process %d (%s): %s", (unsigned long long)index, p->pid,
                     p->comm, inner);
            return -2;
        }
        if (rt->imgs[k].proc->pid != p->pid) {
            snprintf(why, whylen, "checkpoint %llu is damaged: the part of process %d holds process %d",
                     (unsigned long long)index, p->pid, rt->imgs[k].proc->pid);
            return -2;
        }
        if (check_identity(&rt->imgs[k], idwhy, sizeof idwhy) < 0) {
            snprintf(why, whylen, "cannot restart from checkpoint %llu: process %d (%s): %s", (unsigned long long)index,
                     p->pid, p->comm, idwhy);
            return -1;
        }
        if (lz_check_chans(part, &rt->imgs[k], index, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "cannot restart: process %d (%s): %s", p->pid, p->comm, inner);
            return -1;
        }
        if (lz_check_frames(part, &rt->imgs[k], inner, sizeof inner) < 0) {
            snprintf(why, whylen, "cannot restart: checkpoint %llu is damaged: process %d (%s): %s; nothing was changed",
                     (unsigned long long)index, p->pid, p->comm, inner);
            return -2;
        }
    }
    /* the objects, and whether their descriptors fit: all before any file changes */
    if (restart_tree_objects(rt, ckpt, why, whylen) < 0) return -1;
    int need = job_max_fd(rt, 1024) + 8 + 2 + 2 * (int)rt->nobjs + 64; /* the control socket goes at LZ_CHAN_FD_BASE or above */
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_max < (rlim_t)need) {
        snprintf(why, whylen, "cannot restart: the job needs %d descriptors, above this user's limit of %llu", need,
                 (unsigned long long)rl.rlim_max);
        return -1;
    }
    return 0;
}

int restart_tree_plan(struct restart_tree *rt, int ctl_fd, char *why, size_t whylen)
{
    const struct lz_tree *t = &rt->tree;
    struct { struct lz_plan_obj *v; size_t n; struct lz_plan_hold *h; size_t nh; } o = {rt->objs, rt->nobjs, rt->holds, rt->nholds};
    /* above every descriptor number of every process: the plan, the go pipe, the objects */
    int hi = job_max_fd(rt, ctl_fd) + 8, next = hi + 2;
    for (size_t j = 0; j < o.n; j++) {
        o.v[j].fd = next++;
        o.v[j].fd2 = o.v[j].kind == LZ_PO_PIPE || o.v[j].kind == LZ_PO_SOCK || o.v[j].kind == LZ_PO_TCP ? next++ : -1;
    }
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    if (rl.rlim_cur < (rlim_t)next + 64) { /* the restorers put the program's own limit back */
        rl.rlim_cur = (rlim_t)next + 64;
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
            snprintf(why, whylen, "cannot restart: cannot raise the descriptor limit to %d: %s", next + 64, strerror(errno));
            return -1;
        }
    }
    for (int fd = hi; fd < next; fd++)
        if (fcntl(fd, F_GETFD) >= 0) {
            snprintf(why, whylen, "cannot restart: descriptor %d of `lazarus restart` is in the way", fd);
            return -1;
        }
    struct lz_plan_header h = {LZ_PLAN_MAGIC, (uint32_t)t->nprocs, (uint32_t)o.n, (uint32_t)o.nh, hi + 1, 0};
    struct lz_plan_proc *pp = calloc(t->nprocs, sizeof *pp);
    int mfd = memfd_create("lazarus-restart-plan", MFD_CLOEXEC), go[2] = {-1, -1};
    int rc = -1;
    if (pp && mfd >= 0 && pipe2(go, O_CLOEXEC) == 0) {
        plan_procs(t, pp);
        if (lz_write_all(mfd, &h, sizeof h) == 0 && lz_write_all(mfd, pp, t->nprocs * sizeof *pp) == 0 &&
            lz_write_all(mfd, o.v, o.n * sizeof *o.v) == 0 && lz_write_all(mfd, o.h, o.nh * sizeof *o.h) == 0 &&
            place(mfd, hi) == hi && place(go[0], hi + 1) == hi + 1) {
            mfd = go[0] = -1;
            rt->plan_fd = hi;
            rt->go_read = hi + 1;
            rt->go_write = go[1];
            go[1] = -1;
            rc = 0;
        }
    }
    if (rc < 0) snprintf(why, whylen, "cannot prepare the restart: %s", strerror(errno));
    if (mfd >= 0) close(mfd);
    if (go[0] >= 0) close(go[0]);
    if (go[1] >= 0) close(go[1]);
    free(pp);
    return rc;
}

int restart_tree_ids_free(const struct restart_tree *rt)
{
    const struct lz_tree *t = &rt->tree;
    const struct lz_tree_proc *m = &t->procs[0];
    for (size_t k = 0; k < t->nprocs; k++) {
        if (kill(t->procs[k].pid, 0) == 0 || errno != ESRCH) return 0;
        /* a session or group whose leader is gone is made by a helper with the leader's PID
         * (restorer/restore_sessions.c); the launcher's are the restarter's */
        int32_t ids[2] = {t->procs[k].sid, t->procs[k].pgid};
        for (int i = 0; i < 2; i++)
            if (ids[i] > 0 && ids[i] != (i ? m->pgid : m->sid) && restart_tree_proc_index(t, ids[i]) < 0 &&
                (kill(ids[i], 0) == 0 || errno != ESRCH || kill(-ids[i], 0) == 0 || errno != ESRCH))
                return 0;
        for (size_t i = 1; t->procs[k].state == LZ_TP_LIVE && i < rt->imgs[k].nthreads; i++)
            if (kill(rt->imgs[k].threads[i].tid, 0) == 0 || errno != ESRCH) return 0;
    }
    return 1;
}

void restart_tree_free(struct restart_tree *rt)
{
    for (size_t k = 0; rt->imgs && k < rt->tree.nprocs; k++)
        if (rt->tree.procs[k].state == LZ_TP_LIVE) lz_image_free(&rt->imgs[k]);
    free(rt->imgs);
    rt->imgs = NULL;
    lz_tree_free(&rt->tree);
    free(rt->objs);
    free(rt->holds);
    rt->objs = NULL;
    rt->holds = NULL;
}
