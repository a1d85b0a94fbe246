/* lazarus rollback [-d DIR] [--at N] [--force] [--json]: the files of a
 * stopped job back to checkpoint N, nothing started.  Exactly restart's file
 * rollback (rollback_files.c) without the restorer, and the store left as a
 * restart from N needs it. */
#include "cli.h"
#include "exit_codes.h"
#include "json_out.h"
#include "manifest.h"
#include "privilege.h"
#include "rollback.h"
#include "rollback_files.h"
#include "redo_log.h"
#include "fs_job.h"
#include "remote_store.h"
#include "util.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus rollback [-d DIR] [--at N] [--force] [--json]\n"
    "Roll the files of the stopped job in DIR back to checkpoint N (default: the\n"
    "newest), as `lazarus restart --at N` does before it resumes the program, and\n"
    "start nothing.  Checkpoints after N are then gone; `lazarus restart --at N`\n"
    "resumes the program from N with its files as they are.  Files already at N:\n"
    "nothing is done, and it says so.  Says in one line what it did (rolled back K\n"
    "files to checkpoint N taken at T).  Exits 0, or (nothing changed) 240 no such\n"
    "store or checkpoint, 242 the job runs, 244 damaged, 245 files changed outside\n"
    "the job; man lazarus-rollback.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint to roll back to (see `lazarus list`)\n"
    "  --force   roll back files even if something outside the job changed them\n"
    "            after it stopped (refused otherwise, naming them); roll back a\n"
    "            job that finished (refused otherwise: it would undo its results)\n"
    "  --json    one JSON object: {\"index\", \"taken\", \"files_rolled_back\",\n"
    "            \"changed\"} (docs/json.md)\n";

static void said(const struct cli_opts *o, uint64_t index, uint64_t taken_ns, uint64_t files, int changed)
{
    char t[32];
    utc_text(t, sizeof t, taken_ns);
    if (o->json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_obj(&w, NULL);
        jw_version(&w);
        jw_u64(&w, "index", index);
        jw_str(&w, "taken", t);
        jw_u64(&w, "files_rolled_back", files);
        jw_bool(&w, "changed", changed);
        jw_end_obj(&w);
        putchar('\n');
    } else if (changed) {
        printf("rolled back %" PRIu64 " file%s to checkpoint %" PRIu64 " taken at %s\n", files, files == 1 ? "" : "s",
               index, t);
    } else {
        printf("rolled back 0 files to checkpoint %" PRIu64 " taken at %s: the files are at it already, nothing was "
               "changed\n", index, t);
    }
}

/* From now on a change to the job's files is someone else's again: the stop
 * is moved past the rollback's own changes (as the supervisor dates a stop:
 * the coarse clock, which file times come from, has passed it). */
static void stopped_now(struct lz_job *job)
{
    job->stopped_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
    while ((int64_t)lz_now_ns(CLOCK_REALTIME_COARSE) <= job->stopped_ns) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

int cmd_rollback(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "rollback", "dafj", help, &o);
    if (first < 0) return LZ_EXIT_USAGE;
    if (first < argc) { lz_err("rollback: unexpected argument '%s'", argv[first]); return LZ_EXIT_USAGE; }
    if (s3_is_url(o.dir)) {
        lz_err("rollback: -d s3:// is not supported: the files are rolled back where the job ran, from its local store");
        return LZ_EXIT_USAGE;
    }
    char *dir = abs_dir(o.dir);
    char why[1200];
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    /* ---- phase 1, as restart's: read and check everything; change nothing */
    struct lz_job job;
    int lock;
    int oc = rollback_open_store("roll back", "a job is running with %s; stop it before rolling its files back; nothing was changed",
                                 dir, o.dir, o.have_at, o.at, &job, &lock);
    if (oc) return oc;
    uint64_t index;
    if (lz_store_pick(dir, o.have_at, o.at, &index, why, sizeof why) < 0) { lz_err("%s", why); return LZ_EXIT_NOT_FOUND; }
    char ckpt[LZ_PATH_MAX + 64];
    lz_ckpt_path(ckpt, sizeof ckpt, dir, index);
    uint64_t taken;
    if (!lz_ckpt_files_only(ckpt, &taken)) { /* a files-only job's commit has no process image */
        struct lz_image img;
        int mrc = lz_manifest_load(ckpt, &img, why, sizeof why);
        if (mrc == LZ_UNREADABLE) { lz_err("cannot roll back to checkpoint %" PRIu64 ": %s; nothing was changed", index, why); return 1; }
        if (mrc < 0) {
            lz_err("cannot roll back: checkpoint %" PRIu64 " is damaged: %s; nothing was changed", index, why);
            return LZ_EXIT_DAMAGED;
        }
        taken = img.hdr->created_ns;
        lz_image_free(&img);
    }
    fs_unmount_stale(&job); /* a mount a killed supervisor left over the files: they are rolled back beneath it */
    int code;
    uint64_t files;
    struct fj_plan *plan = rollback_files_plan("rollback", dir, index, &job, o.force, &code, &files);
    if (!plan) return code;
    char ck[LZ_PATH_MAX + 64];
    lz_ckpt_path(ck, sizeof ck, dir, index);
    /* a second rollback: nothing to do, nothing touched (but a buffer-mode
     * commit whose data a killed daemon did not write yet is finished) */
    if (fj_plan_empty(plan) && !fr_pending_checkpoint(ck)) {
        fj_plan_free(plan);
        said(&o, index, taken, 0, 0);
        return 0;
    }
    /* a finished job's files are its results: a rollback undoes them */
    if (!strcmp(job.state, "finished") && !o.force) {
        lz_err("cannot roll back: the job in %s finished (exit status %d); a rollback would undo its results "
               "(`lazarus rollback --force` does that); nothing was changed", o.dir, job.exit_status);
        fj_plan_free(plan);
        return 1;
    }
    uint64_t next = rollback_next_index(dir, index, &job);

    /* ---- phase 2: the files back to N, the store as a restart from N needs it */
    lz_store_drop_spares(dir);
    int rb = rollback_files_apply("rollback", dir, index, &job, plan, next);
    fj_plan_free(plan);
    if (rb < 0) return 1;
    job.rolling_to = -1;
    snprintf(job.state, sizeof job.state, "stopped");
    stopped_now(&job);
    if (lz_job_write(dir, &job) < 0) {
        lz_err("the files are at checkpoint %" PRIu64 ", but %s/%s cannot be written: %s; `lazarus rollback --at %" PRIu64
               "` finishes it", index, o.dir, LZ_JOBFILE, strerror(errno), index);
        return 1;
    }
    lz_store_drop_spares(dir);
    said(&o, index, taken, files, 1);
    free(dir);
    close(lock);
    return 0;
}
