/* lazarus diff [-d DIR|s3://...] [--at N] [--json]: what `restart --at N` would do to files. */
#include "cli.h"
#include "exit_codes.h"
#include "remote_store.h"
#include "rollback.h"
#include "redo_log.h"
#include "s3.h"
#include "util.h"
#include "json_out.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus diff [-d DIR|s3://BUCKET/PREFIX] [--at N] [--json]\n"
    "List the changes to files that `lazarus restart --at N` would undo, one line\n"
    "per path, without changing anything:\n"
    "  modified PATH   its content, size, permissions or times go back to N\n"
    "  removed  PATH   it did not exist at N and is deleted\n"
    "  restored PATH   it existed at N (deleted, renamed or replaced since) and comes back\n"
    "  lost     PATH   its content at N is gone (deleted or replaced after the job stopped,\n"
    "                  and the journal holds only part of it): a restart refuses\n"
    "Buffer mode (run --fs-mode buffer): a commit whose data its daemon did not write to\n"
    "the files yet (it was killed) is said in one line; a restart or rollback writes it.\n"
    "A damaged store is said in one line, and diff exits 1.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint (default: the newest)\n"
    "  --json    one JSON object: {\"index\", \"changes\": [{\"kind\", \"path\"}...]}\n"
    "            (kind as above; docs/json.md), and \"redo_pending\" (the count of\n"
    "            such commits' redo logs) when not 0\n"
    "-d s3://BUCKET/PREFIX: checkpoint N of that remote store, fetched into a scratch\n"
    "directory of $TMPDIR (removed after), its journals read where the job kept them\n"
    "(run --journal-dir); --endpoint, --ca-file, --insecure, --addressing and\n"
    "--encrypt-key as for restart.\n";

static int diff_dir(const char *d, int have_at, uint64_t at, int json);

static int diff_fetched(const char *dir, uint64_t index, void *arg)
{
    return diff_dir(dir, 1, index, *(const int *)arg);
}

/* -d s3://...: the checkpoint fetched as `restart` would (its journals must be
 * in the job's journal directory), diffed, and the scratch store removed. */
static int diff_remote(const struct cli_opts *o)
{
    struct remote_opts ro = {o->endpoint, o->ca_file, o->addressing, NULL, o->insecure, 0, 1};
    return remote_in_scratch(o->dir, ro, o->have_at, o->at, "diff", diff_fetched, (void *)&o->json);
}

int cmd_diff(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "diff", "daEAIPYj", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("diff: unexpected argument '%s'", argv[first]); return 2; }
    if (s3_is_url(o.dir)) return diff_remote(&o);
    if (o.endpoint || o.ca_file || o.insecure || o.addressing) {
        lz_err("diff: --endpoint, --ca-file, --insecure and --addressing go with -d s3://BUCKET/PREFIX");
        return 2;
    }
    if (access(o.dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    return diff_dir(o.dir, o.have_at, o.at, o.json);
}

/* --json: one member of "changes" */
static void json_change(const char *kind, const char *path, void *arg)
{
    struct jw *w = arg;
    jw_obj(w, NULL);
    jw_str(w, "kind", kind);
    jw_str(w, "path", path);
    jw_end_obj(w);
}

static int diff_dir(const char *d, int have_at, uint64_t at, int json)
{
    char *dir = abs_dir(d);
    char why[LZ_PATH_MAX + 512];
    uint64_t index;
    if (lz_store_pick(dir, have_at, at, &index, why, sizeof why) < 0) { lz_err("%s", why); free(dir); return LZ_EXIT_NOT_FOUND; }
    /* when the job stopped: what is gone since was deleted or replaced by
     * someone else (a rollback under way: nothing is told apart) */
    int64_t stop = rollback_stop_ns(dir);
    int damaged;
    struct fj_plan *plan = rollback_plan_load(dir, index, stop, &damaged, why, sizeof why);
    if (!plan) { lz_err("%s", why); free(dir); return damaged ? LZ_EXIT_DAMAGED : 1; }
    /* buffer mode: a commit whose held data a killed daemon did not write yet */
    char ck[LZ_PATH_MAX + 64];
    lz_ckpt_path(ck, sizeof ck, dir, index);
    int pending = fr_pending_checkpoint(ck);
    if (json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_obj(&w, NULL);
        jw_version(&w);
        jw_u64(&w, "index", index);
        if (pending) jw_u64(&w, "redo_pending", (uint64_t)pending); /* buffer mode only */
        jw_arr(&w, "changes");
        fj_plan_changes(plan, stop, json_change, &w);
        jw_end_arr(&w);
        jw_end_obj(&w);
        putchar('\n');
    } else {
        size_t n = fj_plan_diff(plan, stop, stdout);
        if (pending)
            printf("checkpoint %" PRIu64 " committed data not written to the files yet (%d redo log%s, buffer mode): "
                   "a restart or rollback to it writes it\n", index, pending, pending == 1 ? "" : "s");
        else if (n == 0) printf("no file changes since checkpoint %" PRIu64 "\n", index);
    }
    fj_plan_free(plan);
    free(dir);
    return 0;
}
