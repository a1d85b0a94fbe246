/* The end of the job's checkpoint: every part written, the parts gathered
 * into the main program's (tmp.N.PID -> tmp.N.MAIN/proc.PID), the tree
 * written, one rename; or, failed, the parts cleaned up.  The clients waiting
 * are told either way. */
#include "job_ckpt.h"
#include "fs_job.h"
#include "log_out.h"
#include "remote_store.h"
#include "store_admin.h"
#include "tree.h"
#include "util.h"
#include "batch.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* Every part is written: one checkpoint directory, one rename. */
static int commit(struct sv_state *st, char *why, size_t whylen)
{
    const char *dir = st->s->dir;
    struct lz_tree t = st->tree;
    t.job[0] = st->s->job_id[0];
    t.job[1] = st->s->job_id[1];
    t.trigger = st->trigger;
    char root[LZ_PATH_MAX + 64], from[LZ_PATH_MAX + 64], to[LZ_PATH_MAX + 96], ck[LZ_PATH_MAX + 64];
    snprintf(root, sizeof root, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", dir, st->index, t.procs[0].pid);
    int rc = 0;
    for (size_t i = 1; i < t.nprocs && rc == 0; i++) {
        if (t.procs[i].state != LZ_TP_LIVE) continue;
        snprintf(from, sizeof from, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", dir, st->index, t.procs[i].pid);
        snprintf(to, sizeof to, "%s/%s", root, t.procs[i].dir);
        if (rename(from, to) < 0) { snprintf(why, whylen, "cannot gather process %d's part: %s", t.procs[i].pid, strerror(errno)); rc = -1; }
    }
    if (rc == 0) rc = lz_tree_write(root, &t, why, whylen);
    if (rc == 0 && lz_fsync_dir(root) < 0) { snprintf(why, whylen, "cannot make the checkpoint durable: %s", strerror(errno)); rc = -1; }
    /* journals in a home of their own (run --journal-dir): gathered the same way
     * and renamed first; a journal there whose checkpoint did not commit here is
     * a failed checkpoint's (lz_store_cleanup_tmp) */
    char jroot[LZ_PATH_MAX + 64], jck[LZ_PATH_MAX + 64];
    int own_home = strcmp(st->s->jhome, dir) != 0;
    if (own_home) {
        const char *jh = st->s->jhome;
        snprintf(jroot, sizeof jroot, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", jh, st->index, t.procs[0].pid);
        for (size_t i = 1; i < t.nprocs && rc == 0; i++) {
            if (t.procs[i].state != LZ_TP_LIVE) continue;
            snprintf(from, sizeof from, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", jh, st->index, t.procs[i].pid);
            snprintf(to, sizeof to, "%s/%s", jroot, t.procs[i].dir);
            if (rename(from, to) < 0 && errno != ENOENT) {
                snprintf(why, whylen, "cannot gather process %d's journal: %s", t.procs[i].pid, strerror(errno));
                rc = -1;
            }
        }
        lz_ckpt_path(jck, sizeof jck, jh, st->index);
        if (rc == 0 && (lz_fsync_dir(jroot) < 0 || renameat2(AT_FDCWD, jroot, AT_FDCWD, jck, RENAME_NOREPLACE) < 0 || lz_fsync_dir(jh) < 0)) {
            snprintf(why, whylen, "cannot commit the checkpoint's journal in %.400s: %s", jh, strerror(errno));
            rc = -1;
        }
    }
    lz_ckpt_path(ck, sizeof ck, dir, st->index);
    /* the file systems (run --fs) closed the interval while every process
     * was stopped: their journals of the next one join the checkpoint */
    if (rc == 0 && !own_home) rc = fs_gather_all(st->s, st->index, root, why, whylen);
    /* commit: the rename is the instant the checkpoint starts to exist */
    if (rc == 0 && renameat2(AT_FDCWD, root, AT_FDCWD, ck, RENAME_NOREPLACE) < 0) {
        snprintf(why, whylen, "cannot commit the checkpoint: %s", strerror(errno));
        if (own_home) rename(jck, jroot); /* a failed checkpoint's journal */
        rc = -1;
    }
    if (rc == 0 && lz_fsync_dir(dir) < 0) { snprintf(why, whylen, "cannot make the checkpoint durable (fsync of the store): %s", strerror(errno)); rc = -1; }
    return rc;
}


void jc_finish_failed(struct sv_state *st)
{
    struct supervisor *s = st->s;
    char out[1200];
    st->in_progress = 0;
    int begun = 0;
    for (size_t i = 0; i < st->nparts; i++) begun |= st->parts[i].begun;
    /* Its index is never given again, even if no process said BEGIN: that
     * message may still be unread when the program ended or the request timed
     * out, and a late process may yet write packs/pack.N (gc removes them once
     * the job is over, as it knows N was given out). */
    lz_store_cleanup_tmp(s->dir); /* its file journals are kept as jrnl.N */
    if (begun) {
        struct lz_job job;
        if (lz_job_read(s->dir, &job) == 0) {
            job.failed_index = st->index;
            job.failed_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
            snprintf(job.failed_why, sizeof job.failed_why, "%.511s", st->fail_why);
            lz_job_write(s->dir, &job);
        }
        struct log_kv kv[] = {LOG_NUM("index", st->index), LOG_STR("reason", st->fail_why)};
        log_event(LOG_ERROR, "checkpoint_failed", kv, 2, "checkpoint %" PRIu64 " failed: %s; the program keeps running",
                  st->index, st->fail_why);
        snprintf(out, sizeof out, "ERR checkpoint %" PRIu64 " failed: %s", st->index, st->fail_why);
    } else {
        struct log_kv kv[] = {LOG_NUM("index", st->index), LOG_STR("reason", st->fail_why)};
        log_event(LOG_EVENT, "checkpoint_failed", kv, 2, "checkpoint %" PRIu64 " not taken: %s", st->index, st->fail_why);
        snprintf(out, sizeof out, "ERR %s", st->fail_why);
    }
    sv_finish_clients(st, out);
    batch_checkpoint_done(st, st->index, 0, 0);
}

void jc_finish_ok(struct sv_state *st)
{
    struct supervisor *s = st->s;
    char why[600], out[300];
    if (commit(st, why, sizeof why) < 0) {
        jc_fail(st, NULL, "%s", why);
        if (st->resumed) { jc_finish_failed(st); return; }
        return; /* the API's caller is told by the ABORT */
    }
    /* buffer mode: what the file systems held for it reaches the files now */
    fs_apply_all(s, st->index);
    if (!st->resumed) { /* the C API: the caller learns the checkpoint is committed */
        for (size_t i = 0; i < st->nparts; i++)
            if (!st->parts[i].zombie) sv_tell(st, st->parts[i].pid, "RESUME %" PRIu64 " 1", st->index);
        st->resumed = 1;
    }
    st->in_progress = 0;
    jc_trace("committed");
    batch_checkpoint_done(st, st->index, lz_now_ns(CLOCK_MONOTONIC) - st->requested_ns, 1);
    /* off the machine, by the flusher's thread; what it flushes is not dropped here */
    flusher_enqueue(s->flusher, st->index);
    uint64_t protect[3];
    size_t np = flusher_protected(s->flusher, protect);
    lz_store_retain_but(s->dir, s->keep, st->index, s->first_index, protect, np);
    s->taken++;
    uint64_t pause = 0, stored = 0, threads = 0, nproc = 0;
    for (size_t i = 0; i < st->nparts; i++) {
        const struct part *p = &st->parts[i];
        if (p->pause > pause) pause = p->pause;
        stored += p->stored;
        threads += p->threads;
        nproc += !p->zombie;
    }
    struct log_kv kv[] = {LOG_NUM("index", st->index), LOG_NUM("pause_ns", pause), LOG_NUM("bytes", stored),
                          LOG_NUM("processes", nproc), LOG_NUM("threads", threads)};
    log_event(LOG_EVENT, "checkpoint", kv, 5, "checkpoint %" PRIu64 " taken: %" PRIu64 " process%s, %" PRIu64 " thread%s, "
              "paused %.1f ms, %" PRIu64 " bytes stored", st->index, nproc, nproc == 1 ? "" : "es", threads,
              threads == 1 ? "" : "s", (double)pause / 1e6, stored);
    snprintf(out, sizeof out, "OK %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, st->index, pause, stored, nproc, threads);
    sv_finish_clients(st, out);
}
