/* lazarus list [-d DIR] [--json] */
#include "cli.h"
#include "exit_codes.h"
#include "tree.h"
#include "codec.h"
#include "util.h"
#include "rollback.h"
#include "remote_store.h"
#include "json_out.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus list [-d DIR|s3://BUCKET/PREFIX] [--json]\n"
    "One row per checkpoint: index, time, trigger; THREADS the threads it holds;\n"
    "MEMORY the address space captured,\n"
    "CHANGED the memory written since the checkpoint before, STORED the bytes it\n"
    "added to the packs (after reuse and compression); PAUSE how long the program was\n"
    "stopped, DURABLE how long until the checkpoint was on disk; FILES the paths\n"
    "changed since it and UNDO the bytes kept to roll them back.  A checkpoint that\n"
    "failed after the newest one is named below the table.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --json    a JSON array of objects instead of a table\n"
    "A job run with --remote has a column WHERE: local, or local+remote once the\n"
    "checkpoint was flushed.  -d s3://BUCKET/PREFIX lists the checkpoints published\n"
    "there (options --endpoint, --ca-file, --insecure, --addressing as for run;\n"
    "--encrypt-key FILE is not needed, and refused if the checkpoints have another key),\n"
    "then those of a job streamed there (run -d s3://) that only this machine's\n"
    "fallback holds (--fallback DIR if it was given one).  The spool of such a job\n"
    "(-d SPOOL) says remote (published: its packs left the machine) or fallback.\n";

/* "1/4": processes / threads */
static const char *procs_threads(size_t p, size_t t)
{
    static char buf[48];
    snprintf(buf, sizeof buf, "%zu/%zu", p, t);
    return buf;
}

/* Bytes the main program had excluded (lazarus_exclude) of one kind. */
static uint64_t excluded(const struct lz_image *img, uint32_t kind)
{
    uint64_t n = 0;
    for (size_t i = 0; i < img->nexcl; i++)
        if (img->excl[i].kind == kind && img->excl[i].end > img->excl[i].start) n += img->excl[i].end - img->excl[i].start;
    return n;
}

int cmd_list(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "list", "djEAIPYB", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("list: unexpected argument '%s'", argv[first]); return 2; }
    if (s3_is_url(o.dir)) {
        struct remote_opts ro = {o.endpoint, o.ca_file, o.addressing, NULL, o.insecure, 0, 0};
        int rc = remote_list(o.dir, &ro, o.json);
        if (!o.json) spool_list(o.dir, o.fallback); /* what only this machine's fallback holds */
        return rc;
    }
    if (o.fallback) { lz_err("list: --fallback goes with -d s3://BUCKET/PREFIX"); return 2; }
    char *dir = abs_dir(o.dir);
    /* a job flushed to a remote store: where each checkpoint is */
    struct lz_job rj;
    struct rs_state rs;
    int remote = lz_job_read(dir, &rj) == 0 && *rj.remote;
    rs_load(dir, &rs);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    uint64_t *fstat_files = lz_xcalloc((size_t)n + 1, sizeof *fstat_files), *fstat_bytes = lz_xcalloc((size_t)n + 1, sizeof *fstat_bytes);
    fj_store_stats(dir, v, n, fstat_files, fstat_bytes);
    struct jw w; /* --json: the array, one object per checkpoint */
    jw_init(&w, stdout);
    if (o.json) jw_arr(&w, NULL);
    else printf("%6s  %-20s  %-9s  %9s  %10s  %10s  %10s  %9s  %9s  %6s  %10s%s\n", "INDEX", "TIME (UTC)", "TRIGGER", "PROC/THR", "MEMORY",
                "CHANGED", "STORED", "PAUSE", "DURABLE", "FILES", "UNDO", remote ? "  WHERE" : "");
    int bad = 0;
    for (int i = 0; i < n; i++) {
        char ck[LZ_PATH_MAX + 64], why[1024], when[32], mem[32], changed[32], stored[32], ub[32];
        lz_ckpt_path(ck, sizeof ck, dir, v[i]);
        struct lz_image img;
        uint64_t fo_ns;
        if (lz_ckpt_files_only(ck, &fo_ns)) { /* run --files-only: a commit of the files, no process */
            utc_text(when, sizeof when, fo_ns);
            human_bytes(ub, sizeof ub, fstat_bytes[i]);
            if (o.json) {
                jw_obj(&w, NULL);
                jw_u64(&w, "index", v[i]);
                jw_str(&w, "time", when);
                jw_u64(&w, "created_ns", fo_ns);
                jw_str(&w, "trigger", "files");
                jw_u64(&w, "processes", 0);
                jw_u64(&w, "threads", 0);
                jw_u64(&w, "files", fstat_files[i]);
                jw_u64(&w, "undo_bytes", fstat_bytes[i]);
                jw_bool(&w, "local", 1);
                jw_bool(&w, "remote", 0);
                jw_end_obj(&w);
            } else {
                printf("%6" PRIu64 "  %-20s  %-9s  %9s  %10s  %10s  %10s  %9s  %9s  %6" PRIu64 "  %10s%s\n", v[i], when, "files",
                       "-", "-", "-", "-", "-", "-", fstat_files[i], ub, remote ? "  local" : "");
            }
            continue;
        }
        int mrc = lz_manifest_load(ck, &img, why, sizeof why);
        if (mrc < 0) {
            if (access(ck, F_OK) < 0 && errno == ENOENT) continue; /* removed by retention meanwhile */
            if (!o.json) printf("%6" PRIu64 "  %s: %s\n", v[i], mrc == LZ_UNREADABLE ? "unreadable" : "damaged", why);
            bad = 1;
            continue;
        }
        /* the job: every process's part added up (the pause is one for all) */
        struct lz_header tot = *img.hdr;
        const struct lz_header *h = &tot;
        size_t nthreads = img.nthreads, nprocs = 1;
        struct lz_tree t;
        if (lz_tree_load(ck, &t, why, sizeof why) < 0) {
            /* removed by retention between the manifest and the tree */
            if (access(ck, F_OK) < 0 && errno == ENOENT) { lz_image_free(&img); continue; }
            if (!o.json) printf("%6" PRIu64 "  damaged: %s\n", v[i], why);
            bad = 1;
            lz_image_free(&img);
            continue;
        }
        for (size_t k = 1; k < t.nprocs; k++) {
            char part[LZ_PATH_MAX + 128];
            struct lz_image pi;
            if (t.procs[k].state != LZ_TP_LIVE) continue;
            lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
            if (lz_manifest_load(part, &pi, why, sizeof why) < 0) continue; /* verify names it */
            tot.mem_bytes += pi.hdr->mem_bytes;
            tot.data_bytes += pi.hdr->data_bytes;
            tot.changed_bytes += pi.hdr->changed_bytes;
            tot.stored_bytes += pi.hdr->stored_bytes;
            if (pi.hdr->pause_ns > tot.pause_ns) tot.pause_ns = pi.hdr->pause_ns;
            if (pi.hdr->durable_ns > tot.durable_ns) tot.durable_ns = pi.hdr->durable_ns;
            nthreads += pi.nthreads;
            nprocs++;
            lz_image_free(&pi);
        }
        if (t.trigger) tot.trigger = t.trigger; /* the job's own (a batch system's), not the runtime's view */
        lz_tree_free(&t);
        uint64_t files = fstat_files[i], undo = fstat_bytes[i];
        utc_text(when, sizeof when, h->created_ns);
        if (o.json) {
            jw_obj(&w, NULL);
            jw_version(&w); /* the document is an array: each object says it */
            jw_u64(&w, "index", h->index);
            jw_str(&w, "time", when);
            jw_u64(&w, "created_ns", h->created_ns);
            jw_str(&w, "trigger", lz_trigger_name(h->trigger));
            jw_u64(&w, "memory_bytes", h->mem_bytes);
            jw_u64(&w, "data_bytes", h->data_bytes);
            jw_u64(&w, "changed_bytes", h->changed_bytes);
            jw_u64(&w, "stored_bytes", h->stored_bytes);
            jw_str(&w, "codec", lz_codec_name((int)h->codec));
            jw_fixed(&w, "pause_ms", (double)h->pause_ns / 1e6, 3);
            jw_fixed(&w, "durable_ms", (double)h->durable_ns / 1e6, 3);
            jw_u64(&w, "parent", h->parent);
            jw_i64(&w, "pid", img.proc->pid);
            jw_u64(&w, "processes", nprocs);
            jw_u64(&w, "threads", nthreads);
            jw_u64(&w, "files", files);
            jw_u64(&w, "undo_bytes", undo);
            jw_bool(&w, "local", 1);
            jw_bool(&w, "remote", rs_is_published(&rs, h->index));
            jw_u64(&w, "excluded_dead_bytes", excluded(&img, LZ_EXCL_DEAD));
            jw_u64(&w, "excluded_readonly_bytes", excluded(&img, LZ_EXCL_READONLY));
            jw_end_obj(&w);
        } else {
            human_bytes(mem, sizeof mem, h->mem_bytes);
            human_bytes(changed, sizeof changed, h->changed_bytes);
            human_bytes(stored, sizeof stored, h->stored_bytes);
            human_bytes(ub, sizeof ub, undo);
            printf("%6" PRIu64 "  %-20s  %-9s  %9s  %10s  %10s  %10s  %7.1fms  %7.1fms  %6" PRIu64 "  %10s%s\n", h->index, when,
                   lz_trigger_name(h->trigger), procs_threads(nprocs, nthreads), mem, changed, stored, (double)h->pause_ns / 1e6,
                   (double)h->durable_ns / 1e6, files, ub,
                   !remote ? "" : rs_is_published(&rs, h->index) ? (rj.stream ? "  remote" : "  local+remote")
                   : rj.stream ? "  fallback" : "  local");
        }
        lz_image_free(&img);
    }
    if (o.json) { jw_end_arr(&w); putchar('\n'); }
    /* a failure is news only while no later checkpoint succeeded */
    struct lz_job job;
    if (!o.json && lz_job_read(dir, &job) == 0 && job.failed_index > (n > 0 ? v[n - 1] : 0)) {
        char when[32];
        utc_text(when, sizeof when, (uint64_t)job.failed_ns);
        printf("checkpoint %" PRIu64 " failed at %s: %s\n", job.failed_index, when,
               *job.failed_why ? job.failed_why : "no reason recorded");
    }
    /* published and dropped here since: remote only */
    for (size_t i = 0; remote && !o.json && i < rs.npub; i++) {
        int local = 0;
        for (int k = 0; k < n; k++) local |= v[k] == rs.published[i];
        if (!local) printf("%6" PRIu64 "  (remote only: `lazarus list -d %s`)\n", rs.published[i], rj.remote);
    }
    rs_free(&rs);
    free(v);
    free(fstat_files);
    free(fstat_bytes);
    free(dir);
    return bad ? LZ_EXIT_DAMAGED : 0;
}
