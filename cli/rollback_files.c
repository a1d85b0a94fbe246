/* The file rollback `restart` and `rollback` share: phase 1 proves the
 * journals and looks for outside changes (changes nothing), phase 2 applies
 * them and leaves the store as a restart from the target needs it. */
#include "cli.h"
#include "rollback_files.h"
#include "exit_codes.h"
#include "store_admin.h"
#include "rollback.h"
#include "privilege.h"
#include "redo_log.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "restart from checkpoint N" / "roll the files back to checkpoint N" */
static void act(char *buf, size_t len, const char *cmd, uint64_t index)
{
    if (!strcmp(cmd, "restart")) snprintf(buf, len, "restart from checkpoint %" PRIu64, index);
    else snprintf(buf, len, "roll the files back to checkpoint %" PRIu64, index);
}

static void count_file(const char *kind, const char *path, void *arg) { (void)kind; (void)path; (void)arg; }

struct fj_plan *rollback_files_plan(const char *cmd, const char *dir, uint64_t index, const struct lz_job *job, int force,
                                    int *code, uint64_t *files)
{
    *code = LZ_EXIT_FAIL;
    *files = 0;
    char why[LZ_PATH_MAX + 512], what[96];
    const char *verb = strcmp(cmd, "restart") ? "roll back" : "restart";
    act(what, sizeof what, cmd, index);
    if (job->rolling_to >= 0 && index > (uint64_t)job->rolling_to) {
        lz_err("cannot %s: a rollback of the files to checkpoint %" PRId64 " was interrupted; finish it with "
               "`lazarus %s --at %" PRId64 "`", what, job->rolling_to, cmd, job->rolling_to);
        return NULL;
    }
    /* buffer mode: the redo log of N, written at the end, is proved first (phase 1 changes nothing) */
    char ck[LZ_PATH_MAX + 64];
    int nlogs;
    lz_ckpt_path(ck, sizeof ck, dir, index);
    if (fr_check_checkpoint(ck, &nlogs, why, sizeof why) < 0) {
        lz_err("cannot %s: checkpoint %" PRIu64 "'s redo log (buffer mode) is damaged: %s; nothing was changed", verb, index, why);
        *code = LZ_EXIT_DAMAGED;
        return NULL;
    }
    /* finishing an interrupted rollback: it linked kept inodes back already */
    int64_t stop = job->rolling_to >= 0 ? INT64_MAX : lz_job_stop_ns(dir, job);
    int damaged;
    struct fj_plan *plan = rollback_plan_load(dir, index, stop, &damaged, why, sizeof why);
    if (!plan) {
        lz_err("cannot %s: %s; nothing was changed", verb, why);
        if (damaged) *code = LZ_EXIT_DAMAGED;
        return NULL;
    }
    /* finishing an interrupted rollback: what it changed already is newer
     * than the stop, and its check was made */
    if (fj_plan_empty(plan)) return plan;
    if (job->rolling_to >= 0) { /* no check: what the line counts is the only walk */
        *files = fj_plan_changes(plan, INT64_MAX, count_file, NULL);
        return plan;
    }
    /* also with --force: what is gone cannot be rolled back by any means */
    struct fj_outside out;
    fj_plan_outside_changes(plan, stop, &out);
    *files = out.nrolled; /* "K files rolled back", counted in the same walk */
    int refuse = 1;
    if (out.nlost == 1) {
        lz_err("cannot %s: the content of %s at checkpoint %" PRIu64 " is gone: it was %s "
               "after the job stopped, and the journal holds only the bytes the job overwrote, not the whole file; "
               "nothing was changed, and --force cannot roll it back", what, out.lost[0].path, index, out.lost[0].what);
    } else if (out.nlost) {
        char *list = fj_change_list(out.lost, out.nlost, 5, " was ", " after the job stopped");
        lz_err("cannot %s: the content of %zu files at checkpoint %" PRIu64 " is gone (%s), "
               "and the journal holds only the bytes the job overwrote, not whole files; nothing was changed, and --force "
               "cannot roll them back", what, out.nlost, index, list);
        free(list);
    } else if (out.nchanged && !force) {
        size_t k = out.nchanged;
        char *list = fj_change_list(out.changed, k, 5, ": ", "");
        lz_err("cannot %s: %zu file%s changed outside the job after it stopped (%s); nothing was changed; "
               "`lazarus %s --force` rolls %s back anyway", verb, k, k == 1 ? "" : "s", list, cmd, k == 1 ? "it" : "them");
        free(list);
    } else {
        refuse = 0;
    }
    fj_outside_free(&out);
    if (refuse) {
        *code = LZ_EXIT_OUTSIDE;
        fj_plan_free(plan);
        return NULL;
    }
    return plan;
}

/* Highest N of DIR/packs/pack.N, 0 if none. */
static uint64_t newest_pack(const char *dir)
{
    char path[LZ_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/" LZ_PACKS_DIR, dir);
    DIR *d = opendir(path);
    struct dirent *e;
    uint64_t max = 0, id;
    size_t l = strlen(LZ_PACK_PREFIX);
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, LZ_PACK_PREFIX, l) && e->d_name[l] &&
            strspn(e->d_name + l, "0123456789") == strlen(e->d_name + l) && lz_parse_u64(e->d_name + l, &id) == 0 &&
            id > max)
            max = id;
    if (d) closedir(d);
    return max;
}

uint64_t rollback_next_index(const char *dir, uint64_t index, const struct lz_job *job)
{
    /* indices are never reused, also of checkpoints the rollback drops and of
     * failed ones (their jrnl.N and packs/pack.N may remain) */
    uint64_t *v;
    int *jrn;
    int n = lz_store_list_journals(dir, &v, &jrn);
    uint64_t next = (n > 0 && v[n - 1] > index ? v[n - 1] : index) + 1;
    if (n >= 0) { free(v); free(jrn); }
    if (job->failed_index >= next) next = job->failed_index + 1;
    uint64_t pack = newest_pack(dir);
    if (pack >= next) next = pack + 1;
    if (job->next_index > next) next = job->next_index;
    return next;
}

/* Buffer mode (run --fs-mode buffer): checkpoint N's redo logs (ftIO's FIN
 * rule: a committed checkpoint's log is whole) applied to the files: a
 * daemon killed between the commit and its writing of the files, or in the
 * middle of it, is finished here.  Applying one again changes nothing. */
static int redo(const char *cmd, const char *ck, uint64_t index)
{
    char why[LZ_PATH_MAX + 512];
    if (fr_apply_checkpoint(ck, why, sizeof why) == 0) return 0;
    lz_err("cannot write what checkpoint %" PRIu64 " committed to the files (buffer mode): %s; run `lazarus %s --at %" PRIu64
           "` again once that is fixed", index, why, cmd, index);
    return -1;
}

int rollback_files_apply(const char *cmd, const char *dir, uint64_t index, struct lz_job *job, struct fj_plan *plan,
                         uint64_t next)
{
    char why[LZ_PATH_MAX + 512];
    char ck[LZ_PATH_MAX + 64];
    lz_ckpt_path(ck, sizeof ck, dir, index);
    /* no file to roll back: the checkpoints after N go once the program is
     * back (the supervisor), so that a failed restart changes nothing; what
     * buffer mode held for N (its redo log) reaches the files all the same */
    if (fj_plan_empty(plan)) return redo(cmd, ck, index);
    job->rolling_to = (int64_t)index;
    job->next_index = next; /* the checkpoints after N go: their indices stay used */
    if (lz_job_write(dir, job) < 0) { lz_err("cannot write %s/%s: %s", dir, LZ_JOBFILE, strerror(errno)); return -1; }
    const char *d = getenv("LAZARUS_TEST_ROLLBACK_DELAY_MS");
    if (fj_plan_apply(plan, d ? atoi(d) : 0, why, sizeof why) < 0) {
        lz_err("cannot roll the files back to checkpoint %" PRIu64 ": %s; run `lazarus %s --at %" PRIu64
               "` again once that is fixed", index, why, cmd, index);
        return -1;
    }
    /* the names are at N: what buffer mode committed at N is written now
     * (again, if it was: every record is absolute), before the journal that
     * holds its log is emptied */
    if (redo(cmd, ck, index) < 0) return -1;
    /* the files are at N: later checkpoints describe files that are gone, and
     * later journals (of failed checkpoints too) were just applied */
    lz_store_drop_branch(dir, index, UINT64_MAX);
    lz_journal_path(ck, sizeof ck, dir, index, 0);
    fj_journal_reset(ck, job->id, index);
    return 0;
}

int rollback_open_store(const char *verb, const char *busy, const char *dir, const char *shown, int have_at, uint64_t at,
                        struct lz_job *job, int *lock)
{
    char why[1200];
    /* root acting on an ordinary user's job is that user from here on */
    if (privilege_become_store_owner(dir, have_at, at, why, sizeof why) < 0) { lz_err("cannot %s: %s", verb, why); return 1; }
    *lock = lz_store_lock(dir);
    if (*lock < 0) {
        int running = errno == EWOULDBLOCK;
        if (running) lz_err(busy, shown);
        else lz_err("cannot lock the checkpoint store %s", shown);
        return running ? LZ_EXIT_RUNNING : LZ_EXIT_FAIL;
    }
    /* a checkpoint torn by a crash: its part becomes the journal it is */
    lz_store_cleanup_tmp(dir);
    int jr = lz_job_read(dir, job);
    if (jr == LZ_JOB_DAMAGED) {
        lz_err("cannot %s: the store's job file is damaged (%s/%s); nothing was changed", verb, shown, LZ_JOBFILE);
        return LZ_EXIT_DAMAGED;
    }
    if (jr < 0) { lz_err("cannot %s: cannot read %s/%s: %s", verb, shown, LZ_JOBFILE, strerror(errno)); return 1; }
    return 0;
}
