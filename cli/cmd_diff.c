/* lazarus diff [-d DIR] [--at N]: what `restart --at N` would do to files. */
#include "cli.h"
#include "rollback.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus diff [-d DIR] [--at N]\n"
    "List the changes to files that `lazarus restart --at N` would undo, one line\n"
    "per path, without changing anything:\n"
    "  modified PATH   its content, size, permissions or times go back to N\n"
    "  removed  PATH   it did not exist at N and is deleted\n"
    "  restored PATH   it existed at N (deleted, renamed or replaced since) and comes back\n"
    "  lost     PATH   its content at N is gone (deleted or replaced after the job stopped,\n"
    "                  and the journal holds only part of it): a restart refuses\n"
    "A damaged store is said in one line, and diff exits 1.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint (default: the newest)\n";

int cmd_diff(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "diff", "da", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("diff: unexpected argument '%s'", argv[first]); return 2; }
    char *dir = abs_dir(o.dir);
    char why[LZ_PATH_MAX + 512];
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return 1; }
    uint64_t index;
    if (lz_store_pick(dir, o.have_at, o.at, &index, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    /* when the job stopped: what is gone since was deleted or replaced by
     * someone else (a rollback under way: nothing is told apart) */
    struct lz_job job;
    int64_t stop = lz_job_read(dir, &job) == 0 && job.rolling_to < 0 ? lz_job_stop_ns(dir, &job) : INT64_MAX;
    struct fj_plan *plan = rollback_plan_load(dir, index, stop, why, sizeof why);
    if (!plan) { lz_err("%s", why); return 1; }
    if (fj_plan_diff(plan, stop, stdout) == 0) printf("no file changes since checkpoint %" PRIu64 "\n", index);
    fj_plan_free(plan);
    free(dir);
    return 0;
}
