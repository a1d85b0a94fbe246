/* A job with file systems (run --fs PATH): their daemons started before the
 * program and ended after it, their part in each checkpoint's commit, and a
 * daemon's death, which ends the job (fs_job.h).  fs_mount.c talks to one
 * daemon; this file is the job's view of all of them. */
#include "fs_job.h"
#include "log_out.h"
#include "util.h"
#include "redo_log.h"
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

int fs_start_all(struct supervisor *s, const char *paths, uint64_t restarted, char *why, size_t whylen)
{
    s->nfs = 0;
    for (const char *p = paths; p && *p;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        char line[4200];
        snprintf(line, sizeof line, "%.*s", (int)l, p);
        p += l + (q ? 1 : 0);
        char *path = strchr(line, ' '); /* "MODE PATH" */
        if (!path || s->nfs >= FS_MAX) continue;
        *path++ = 0;
        if (fsm_start(&s->fs[s->nfs], path, line, s->jhome, s->job_id, s->durability, restarted, why, whylen) < 0) {
            fs_stop_all(s);
            return -1;
        }
        s->nfs++;
    }
    return 0;
}

void fs_stop_all(struct supervisor *s)
{
    for (int i = 0; i < s->nfs; i++) fsm_stop(&s->fs[i]);
    s->nfs = 0;
}

/* The job cannot go on without its file system: the program is killed (the
 * job is `stopped`, restartable from its last checkpoint). */
static void end_job(struct supervisor *s, const char *why)
{
    if (s->fs_failed) return;
    s->fs_failed = 1;
    lz_err("%s; the job ends (restart it with `lazarus restart -d %s`)", why, s->dir);
    pid_t prog = sv_find_program(s);
    if (prog > 0) kill(prog, SIGKILL);
    else if (s->child > 0) kill(s->child, SIGKILL);
}

int fs_reaped(struct supervisor *s, pid_t pid, int status)
{
    for (int i = 0; i < s->nfs; i++) {
        if (s->fs[i].pid != pid) continue;
        fsm_reaped(&s->fs[i], status);
        char how[64], why[4300];
        fsm_death(status, how, sizeof how);
        snprintf(why, sizeof why, "the file system daemon of %s %s", s->fs[i].path, how);
        end_job(s, why);
        return 1;
    }
    return 0;
}

int fs_close_all(struct supervisor *s, uint64_t index, char *why, size_t whylen)
{
    for (int i = 0; i < s->nfs; i++) {
        int r = fsm_close(&s->fs[i], s->jhome, index, why, whylen);
        if (r == -2) end_job(s, why);
        if (r < 0) return -1;
    }
    return 0;
}

int fs_gather_all(struct supervisor *s, uint64_t index, const char *root, char *why, size_t whylen)
{
    for (int i = 0; i < s->nfs; i++) {
        char to[4300];
        if (s->fs[i].closed != index) {
            snprintf(why, whylen, "the file system over %s did not close interval %" PRIu64, s->fs[i].path, index);
            return -1;
        }
        /* its journal of the next interval is one more process's of the checkpoint */
        snprintf(to, sizeof to, "%s/" LZ_PROC_PREFIX "%d", root, (int)s->fs[i].pid);
        if (rename(s->fs[i].jdir, to) < 0) {
            snprintf(why, whylen, "cannot gather the journal of the file system over %s: %s", s->fs[i].path, strerror(errno));
            return -1;
        }
    }
    return 0;
}

int fs_apply_all(struct supervisor *s, uint64_t index)
{
    int rc = 0;
    for (int i = 0; i < s->nfs; i++) {
        char why[4400];
        if (s->fs[i].closed != index || !s->fs[i].buffer) continue;
        if (fsm_apply(&s->fs[i], index, why, sizeof why) == 0) {
            /* the data is in the files: no restart writes it again */
            char ck[LZ_PATH_MAX + 64], procdir[LZ_PATH_MAX + 96];
            lz_ckpt_path(ck, sizeof ck, s->dir, index);
            snprintf(procdir, sizeof procdir, "%s/" LZ_PROC_PREFIX "%d", ck, (int)s->fs[i].pid);
            fr_mark_applied(procdir);
            continue;
        }
        /* committed all the same: the redo log in checkpoint N finishes it at the next restart */
        lz_err("%s; checkpoint %" PRIu64 " is committed, and the next restart finishes writing it", why, index);
        end_job(s, why);
        rc = -1;
    }
    return rc;
}

void fs_finish_all(struct supervisor *s)
{
    for (int i = 0; i < s->nfs; i++) {
        char why[4400];
        if (fsm_finish(&s->fs[i], why, sizeof why) < 0) lz_err("%s", why);
    }
}
