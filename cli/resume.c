/* lazarus run --resume: one command line for the first run and every rerun
 * of a job (a batch script requeued after its time limit, a preemption or a
 * node failure runs the same line again).  What DIR holds decides:
 *   - nothing (new or empty DIR), or a job killed before its first
 *     checkpoint: the program starts, as `run` starts it;
 *   - a restartable checkpoint of this job: exactly `lazarus restart -d DIR`
 *     (files rolled back to the newest checkpoint, the program resumed);
 *   - a job that finished: its recorded exit status, nothing started;
 *   - a job still running elsewhere (DIR/lock held here, or its heartbeat on
 *     DIR/lock still advancing: a supervisor on another machine of a shared
 *     file system whose locks do not reach us): refused.
 * DIR holding another program's job is refused naming both (see
 * resume_decide): the store is the job's, and a different command line
 * pointed at it is far more likely a copied script with a forgotten -d than
 * a wish to continue that job with other arguments. */
#include "cli.h"
#include "resume.h"
#include "exit_codes.h"
#include "log_out.h"
#include "hash.h"
#include "store_admin.h"
#include "util.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A heartbeat older than this (by our clock; clocks of a cluster agree to
 * well under it) is a dead supervisor's; a younger one is watched for this
 * long: a live supervisor dates DIR/lock every 250 ms (sv_life.c), a dying
 * job's processes once each as they end, and NFS may show a change only
 * after its attribute cache's 3 s (acregmin).  A requeued batch job starts
 * 30 s or more after its last run ended: it does not wait. */
#define STALE_NS (20ull * 1000000000ull)
#define WATCH_NS (4000ull * 1000000ull)
#define LIVE_BEATS 3

void resume_command(char **argv, char *text, size_t len, uint64_t *hash)
{
    /* words escaped so that the text is one line and says where words end */
    size_t n = 0, total = 0;
    char *joined = NULL;
    for (char **a = argv; *a; a++) total += strlen(*a) + 1;
    joined = lz_xmalloc(total + 1);
    size_t j = 0;
    for (char **a = argv; *a; a++) {
        size_t l = strlen(*a) + 1;
        memcpy(joined + j, *a, l); /* with its NUL: ("a b") differs from ("a", "b") */
        j += l;
        for (const unsigned char *c = (const unsigned char *)*a; *c && n + 8 < len; c++)
            n += (size_t)(*c <= ' ' || *c == '\\' || *c == 0x7f ? snprintf(text + n, len - n, "\\x%02x", *c)
                                                                 : snprintf(text + n, len - n, "%c", *c));
        if (a[1] && n + 2 < len) text[n++] = ' ';
    }
    if (len) text[n < len ? n : len - 1] = 0;
    *hash = lz_hash(joined, j);
    if (!*hash) *hash = 1; /* 0 means "not recorded" */
    free(joined);
}

static int64_t lock_mtime(const char *dir)
{
    char path[LZ_PATH_MAX + 32];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, LZ_LOCKFILE);
    if (stat(path, &st) < 0) return -1;
    return (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
}

/* DIR/lock is ours (flock), yet the job file says running: its supervisor
 * died (SIGKILL, node lost), or lives on another machine whose locks the file
 * system does not share.  Only the second keeps dating DIR/lock. */
static int heartbeat_alive(const char *dir)
{
    int64_t m = lock_mtime(dir), now = (int64_t)lz_now_ns(CLOCK_REALTIME);
    if (m < 0 || now - m > (int64_t)STALE_NS) return 0;
    int beats = 0;
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    while (lz_now_ns(CLOCK_MONOTONIC) - t0 < WATCH_NS && beats < LIVE_BEATS) {
        struct timespec ts = {0, 100 * 1000000};
        nanosleep(&ts, NULL);
        int64_t m2 = lock_mtime(dir);
        if (m2 != m) { beats++; m = m2; }
    }
    return beats >= LIVE_BEATS;
}

enum resume_what resume_decide(const char *dir, const char *shown, char **argv, int *exit_status, int64_t *at)
{
    *at = -1;
    *exit_status = LZ_EXIT_FAIL;
    struct lz_job job;
    int jr = lz_job_read(dir, &job);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { lz_err("run --resume: cannot read %s: %s", shown, strerror(errno)); return RESUME_REFUSE; }
    uint64_t newest = n > 0 ? v[n - 1] : 0;
    free(v);
    char cmd[sizeof job.command];
    uint64_t hash;
    resume_command(argv, cmd, sizeof cmd, &hash);
    if (jr == LZ_JOB_DAMAGED && n > 0) {
        lz_err("run --resume: the job file of %s is damaged and it holds checkpoints: check them with `lazarus verify -d %s`; "
               "nothing was started", shown, shown);
        *exit_status = LZ_EXIT_DAMAGED;
        return RESUME_REFUSE;
    }
    if (jr != 0) { /* a new DIR (or one whose job file never got written: no checkpoint either) */
        log_info("resume: no job in %s yet: starting %s", shown, cmd);
        return RESUME_START;
    }
    if (job.command_hash && job.command_hash != hash) {
        lz_err("run --resume: %s holds the job of another program (%s), not of %s: nothing was started; give this "
               "program another directory (-d DIR), or resume that job with `lazarus restart -d %s`",
               shown, job.command, cmd, shown);
        return RESUME_REFUSE;
    }
    if (!job.command_hash)
        log_info("resume: %s was made by an older Lazarus that did not record its program: taken to be %s", shown, cmd);
    if (!strcmp(job.state, "finished")) {
        log_info("resume: the job in %s finished (exit status %d): nothing to do", shown, job.exit_status);
        *exit_status = job.exit_status;
        return RESUME_FINISHED;
    }
    if (!strcmp(job.state, "running") && heartbeat_alive(dir)) {
        lz_err("run --resume: the job in %s is still running elsewhere (its heartbeat on %s/%s advances, though its "
               "lock is not held here: another machine?); nothing was started", shown, shown, LZ_LOCKFILE);
        *exit_status = LZ_EXIT_RUNNING;
        return RESUME_REFUSE;
    }
    if (n == 0) {
        log_info("resume: the job in %s stopped before its first checkpoint: starting %s again", shown, cmd);
        return RESUME_START;
    }
    /* an interrupted rollback is finished first (restart refuses any other target) */
    if (job.rolling_to >= 0) *at = job.rolling_to;
    log_info("resume: restarting the job in %s from checkpoint %" PRIu64, shown, *at >= 0 ? (uint64_t)*at : newest);
    return RESUME_RESTART;
}

int resume_restart(const char *shown, int64_t at, const char *compress, int ckpt_signal)
{
    char atbuf[32], sigbuf[16];
    char *av[12];
    int ac = 0;
    av[ac++] = "restart";
    av[ac++] = "-d";
    av[ac++] = (char *)shown;
    if (at >= 0) {
        snprintf(atbuf, sizeof atbuf, "%" PRId64, at);
        av[ac++] = "--at";
        av[ac++] = atbuf;
    }
    if (*compress) {
        av[ac++] = "--compress";
        av[ac++] = (char *)compress;
    }
    if (ckpt_signal) {
        snprintf(sigbuf, sizeof sigbuf, "%d", ckpt_signal);
        av[ac++] = "--checkpoint-signal";
        av[ac++] = sigbuf;
    }
    av[ac] = NULL;
    return cmd_restart(ac, av);
}
