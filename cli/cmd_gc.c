/* lazarus gc [-d DIR] [--json]: frees the page data and file journals that no retained
 * checkpoint needs (retention does it after each checkpoint; this is for a
 * store left as it was by a crash, or to see what it frees). */
#include "cli.h"
#include "exit_codes.h"
#include "util.h"
#include "json_out.h"
#include "remote_store.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char help[] =
    "usage: lazarus gc [-d DIR|s3://BUCKET/PREFIX [--older-than SECONDS]] [--json]\n"
    "Delete the packs no retained checkpoint references, punch holes where a kept\n"
    "pack holds only data no retained checkpoint uses, and delete the file journals\n"
    "of failed checkpoints that no rollback can need.  Safe while the job runs.\n"
    "Prints what was freed on one line.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --json    one JSON object instead: {\"packs_removed\", \"bytes_removed\",\n"
    "            \"bytes_punched\", \"journals_removed\"} (-d s3://: {\"objects_removed\",\n"
    "            \"bytes_removed\", \"uploads_aborted\", \"left_newer\", \"older_than\"}; docs/json.md)\n"
    "-d s3://BUCKET/PREFIX: delete every object there that no published checkpoint\n"
    "needs (flushes cut or failed, what remote retention left) and abort the multipart\n"
    "uploads of killed flushes, if older than --older-than SECONDS (default 3600: a\n"
    "flush under way has objects no commit lists yet); options --endpoint, --ca-file,\n"
    "--insecure, --addressing as for run\n";

int cmd_gc(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "gc", "dEAIPOj", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("gc: unexpected argument '%s'", argv[first]); return 2; }
    if (s3_is_url(o.dir)) {
        struct remote_opts ro = {o.endpoint, o.ca_file, o.addressing, NULL, o.insecure, 0, 0};
        return remote_gc(o.dir, &ro, o.have_older_than ? o.older_than : 3600, o.json);
    }
    if (o.have_older_than) { lz_err("gc: --older-than goes with -d s3://BUCKET/PREFIX"); return 2; }
    char *dir = abs_dir(o.dir);
    struct stat st;
    char job[LZ_PATH_MAX + 32];
    snprintf(job, sizeof job, "%s/%s", dir, LZ_JOBFILE);
    /* never take an arbitrary directory for a store: gc deletes */
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || stat(job, &st) < 0) {
        lz_err("no checkpoint store at %s", o.dir);
        free(dir);
        return LZ_EXIT_NOT_FOUND;
    }
    struct lz_gc_stats gs;
    char why[LZ_PATH_MAX + 1200];
    if (lz_store_gc(dir, &gs, why, sizeof why) < 0) {
        lz_err("gc: %s", why);
        free(dir);
        return 1;
    }
    if (o.json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_obj(&w, NULL);
        jw_version(&w);
        jw_u64(&w, "packs_removed", gs.packs_removed);
        jw_u64(&w, "bytes_removed", gs.bytes_removed);
        jw_u64(&w, "bytes_punched", gs.bytes_punched);
        jw_u64(&w, "journals_removed", gs.journals_removed);
        jw_end_obj(&w);
        putchar('\n');
        free(dir);
        return 0;
    }
    char removed[32], punched[32];
    human_bytes(removed, sizeof removed, gs.bytes_removed);
    human_bytes(punched, sizeof punched, gs.bytes_punched);
    printf("gc: removed %" PRIu64 " pack%s (%s) and %" PRIu64 " journal%s, punched %s of holes\n", gs.packs_removed,
           gs.packs_removed == 1 ? "" : "s", removed, gs.journals_removed, gs.journals_removed == 1 ? "" : "s", punched);
    free(dir);
    return 0;
}
