/* lazarus verify [-d DIR] [--at N] [--json]: re-reads every byte a restart
 * would trust and checks it — the job file, every checkpoint's tree and
 * manifests, every frame they reference, pipe and socket data, and every file
 * journal (records, saved bytes, where each belongs); changes nothing. */
#include "cli.h"
#include "exit_codes.h"
#include "journal_read.h"
#include "redo_log.h"
#include "json_out.h"
#include "place.h"
#include "store.h"
#include "util.h"
#include "remote_store.h"
#include <fcntl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus verify [-d DIR|s3://BUCKET/PREFIX] [--at N] [--json]\n"
    "Re-read everything a restart trusts and check every checksum: the job file,\n"
    "every retained checkpoint (or only N) with its memory, pipes and sockets, and\n"
    "the file journals a rollback to it applies.  Changes nothing.\n"
    "Exit 0 only if all is intact; one line per damaged piece on stderr.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    verify only checkpoint N (and the journals a rollback to N applies)\n"
    "  --json    a JSON array, one object per piece: {\"index\", \"piece\", \"intact\", \"error\"}\n"
    "-d s3://BUCKET/PREFIX: checkpoint N (default the newest) of that remote store, fetched\n"
    "into a scratch directory in $TMPDIR (removed after), each object checked against its\n"
    "commit, then all of the above (options --endpoint, --ca-file, --insecure, --addressing;\n"
    "--encrypt-key FILE for a job run with it: each object is authenticated as it comes)\n";

static int json_first = 1;

/* One piece's result, as a line or a JSON object.  index < 0: the store's. */
static void report(int json, int64_t index, const char *piece, const char *error)
{
    if (json) {
        printf("%s{" JW_VERSION_MEMBER ", \"index\": ", json_first ? "" : ", ");
        json_first = 0;
        if (index < 0) printf("null"); else printf("%" PRId64, index);
        printf(", \"piece\": ");
        json_put_str(stdout, piece);
        printf(", \"intact\": %s, \"error\": ", error ? "false" : "true");
        if (error) json_put_str(stdout, error); else printf("null");
        printf("}");
    } else if (error) {
        lz_err("%s", error);
    } else if (index >= 0) {
        printf("checkpoint %" PRId64 ": %s intact\n", index, piece);
    }
}

static int verify_dir(struct cli_opts *o);

/* -d s3://...: the checkpoint (--at N, or the newest) fetched into a
 * scratch store, every object checked against its commit, then verified as
 * any store; the scratch store is removed.  The journals are not remote
 * (ARCHITECTURE.md, "Remote store"): the scratch store has empty ones. */
static int verify_fetched(const char *dir, uint64_t index, void *arg)
{
    struct cli_opts *o = arg;
    o->dir = dir;
    o->have_at = 1;
    o->at = index;
    return verify_dir(o);
}

static int verify_remote(struct cli_opts *o)
{
    struct remote_opts ro = {o->endpoint, o->ca_file, o->addressing, NULL, o->insecure, 1, 1};
    return remote_in_scratch(o->dir, ro, o->have_at, o->at, "verify", verify_fetched, o);
}

int cmd_verify(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "verify", "dajEAIPY", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("verify: unexpected argument '%s'", argv[first]); return 2; }
    if (s3_is_url(o.dir)) return verify_remote(&o);
    struct lz_job j;
    char *dir = abs_dir(o.dir);
    int spool = lz_job_read(dir, &j) == 0 && j.stream;
    free(dir);
    if (spool) { /* its published packs left the machine: the remote store holds the checkpoints whole */
        lz_err("%s is the spool of a job streamed to %s: verify its checkpoints there (`lazarus verify -d %s`)", o.dir, j.remote, j.remote);
        return 1;
    }
    return verify_dir(&o);
}

static int verify_dir(struct cli_opts *o_)
{
    struct cli_opts o = *o_;
    char *dir = abs_dir(o.dir);
    char why[LZ_PATH_MAX + 1400];
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    int bad = 0;
    if (o.json) printf("[");
    /* the job file first: every piece is checked against the identity it holds */
    uint64_t job[2] = {0, 0};
    int have_job = lz_place_job(dir, job, why, sizeof why) == 0;
    if (!have_job) { report(o.json, -1, "job", why); bad = 1; }
    int64_t stop = have_job ? rollback_stop_ns(dir) : INT64_MAX;
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n <= 0) {
        if (o.json) printf("]\n");
        lz_err("no checkpoint in %s", o.dir);
        return LZ_EXIT_NOT_FOUND;
    }
    uint64_t lowest = v[0];
    if (o.have_at) {
        uint64_t idx;
        if (lz_store_pick(dir, 1, o.at, &idx, why, sizeof why) < 0) { if (o.json) printf("]\n"); lz_err("%s", why); return LZ_EXIT_NOT_FOUND; }
        v[0] = idx;
        n = 1;
        lowest = idx;
    }
    for (int i = 0; i < n; i++) {
        if (lz_verify_ckpt(dir, v[i], why, sizeof why) < 0) { report(o.json, (int64_t)v[i], "memory", why); bad = 1; }
        else report(o.json, (int64_t)v[i], "memory", NULL);
    }
    free(v);
    /* the file journals a rollback to any of them applies (of failed checkpoints too) */
    int *jr;
    int nj = lz_store_list_journals(dir, &v, &jr);
    if (nj < 0) { snprintf(why, sizeof why, "cannot list the journals of %s: %s", o.dir, strerror(errno)); report(o.json, -1, "journals", why); bad = 1; nj = 0; }
    for (int i = 0; i < nj; i++) {
        if (v[i] < lowest) continue;
        struct seg s;
        memset(&s, 0, sizeof s);
        s.index = v[i];
        lz_journal_path(s.ckdir, sizeof s.ckdir, dir, v[i], jr[i]); /* DIR, or its --journal-dir */
        char inner[LZ_PATH_MAX + 600];
        const char *piece = jr[i] ? "file journal (failed checkpoint)" : "file journal";
        if (fj_load_seg(&s, have_job ? job : NULL, inner, sizeof inner) < 0 || fj_seg_check_keeps(&s, stop, inner, sizeof inner) < 0) {
            snprintf(why, sizeof why, "%scheckpoint %" PRIu64 "'s file journal is damaged: %s; restarts to checkpoint %" PRIu64
                     " or earlier are refused", jr[i] ? "failed " : "", v[i], inner, v[i]);
            report(o.json, (int64_t)v[i], piece, why);
            bad = 1;
        } else {
            report(o.json, (int64_t)v[i], piece, NULL);
        }
        /* buffer mode: what checkpoint N committed and a restart to it writes (whole, with its FIN) */
        int nlogs = 0;
        if (!jr[i] && fr_check_checkpoint(s.ckdir, &nlogs, inner, sizeof inner) < 0) {
            snprintf(why, sizeof why, "checkpoint %" PRIu64 "'s redo log (buffer mode) is damaged: %s; restarts to checkpoint %" PRIu64
                     " are refused", v[i], inner, v[i]);
            report(o.json, (int64_t)v[i], "redo log", why);
            bad = 1;
        } else if (nlogs) {
            report(o.json, (int64_t)v[i], "redo log", NULL);
        }
        fj_seg_free(&s);
    }
    if (nj > 0) { free(v); free(jr); }
    if (o.json) printf("]\n");
    return bad ? LZ_EXIT_DAMAGED : 0;
}
