/* lazarus list [-d DIR] [--json] */
#include "cli.h"
#include "util.h"
#include "rollback.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char help[] =
    "usage: lazarus list [-d DIR] [--json]\n"
    "One row per checkpoint: index, time, trigger, memory size, bytes stored, pause,\n"
    "and the files changed since it with the bytes kept to roll them back.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --json    a JSON array of objects instead of a table\n";

static void human(char *buf, size_t len, uint64_t b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; i++; }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

int cmd_list(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "list", "dj", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("list: unexpected argument '%s'", argv[first]); return 2; }
    char *dir = abs_dir(o.dir);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { lz_err("no checkpoint store at %s", o.dir); return 1; }
    uint64_t *fstat_files = calloc((size_t)n + 1, sizeof *fstat_files), *fstat_bytes = calloc((size_t)n + 1, sizeof *fstat_bytes);
    fj_store_stats(dir, v, n, fstat_files, fstat_bytes);
    if (o.json) printf("[");
    else printf("%6s  %-20s  %-9s  %10s  %10s  %9s  %6s  %10s\n", "INDEX", "TIME (UTC)", "TRIGGER", "MEMORY", "STORED", "PAUSE",
                "FILES", "UNDO");
    int bad = 0, shown = 0;
    for (int i = 0; i < n; i++) {
        char ck[LZ_PATH_MAX + 64], why[1024], when[32], mem[32], stored[32];
        lz_ckpt_path(ck, sizeof ck, dir, v[i]);
        struct lz_image img;
        if (lz_manifest_load(ck, &img, why, sizeof why) < 0) {
            if (!o.json) printf("%6" PRIu64 "  damaged: %s\n", v[i], why);
            bad = 1;
            continue;
        }
        const struct lz_header *h = img.hdr;
        time_t t = (time_t)(h->created_ns / 1000000000ull);
        struct tm tm;
        gmtime_r(&t, &tm);
        uint64_t files = fstat_files[i], undo = fstat_bytes[i];
        strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
        if (o.json) {
            printf("%s\n  {\"index\": %" PRIu64 ", \"time\": \"%s\", \"created_ns\": %" PRIu64 ", \"trigger\": \"%s\", "
                   "\"memory_bytes\": %" PRIu64 ", \"data_bytes\": %" PRIu64 ", \"stored_bytes\": %" PRIu64
                   ", \"pause_ms\": %.3f, \"parent\": %" PRIu64 ", \"pid\": %d, \"files\": %" PRIu64
                   ", \"undo_bytes\": %" PRIu64 "}",
                   shown ? "," : "", h->index, when, h->created_ns, lz_trigger_name(h->trigger), h->mem_bytes,
                   h->data_bytes, h->stored_bytes, (double)h->pause_ns / 1e6, h->parent, img.proc->pid, files, undo);
        } else {
            human(mem, sizeof mem, h->mem_bytes);
            human(stored, sizeof stored, h->stored_bytes);
            char ub[32];
            human(ub, sizeof ub, undo);
            printf("%6" PRIu64 "  %-20s  %-9s  %10s  %10s  %7.1fms  %6" PRIu64 "  %10s\n", h->index, when,
                   lz_trigger_name(h->trigger), mem, stored, (double)h->pause_ns / 1e6, files, ub);
        }
        shown++;
        lz_image_free(&img);
    }
    if (o.json) printf("%s]\n", shown ? "\n" : "");
    free(v);
    free(fstat_files);
    free(fstat_bytes);
    return bad;
}
