/* lazarus show [-d DIR|s3://...] [--at N] [--json] [WHAT]: what a checkpoint
 * holds, read through the readers restart uses (the tree, each process's
 * manifest, the journals, the packs) and never written to: no lock is
 * taken, so a running job's store can be shown. */
#include "cli.h"
#include "exit_codes.h"
#include "show.h"
#include "remote_store.h"
#include "s3.h"
#include "util.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus show [-d DIR|s3://BUCKET/PREFIX] [--at N] [--json] [WHAT]\n"
    "What checkpoint N (default: the newest, as restart picks) holds; changes nothing.\n"
    "WHAT is one of:\n"
    "  tree     the job's processes (PID, parent, group, session, state, command)\n"
    "  threads  every thread: TID, name, where it resumes in the runtime's checkpoint\n"
    "           handler, and the program's own registers (from its signal frame)\n"
    "  regions  memory regions: range, size, protection, kind, bytes stored, path\n"
    "  fds      descriptors: number, kind, access, flags, offset, what they open\n"
    "  chans    pipes and local sockets, with the bytes queued in them\n"
    "  journal  the files a rollback to N would change, per file, and the journals it applies\n"
    "  packs    the store's page data files, with the part retained checkpoints still use\n"
    "Without WHAT, all of them.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint (default: the newest)\n"
    "  --json    one JSON document (its schema: ARCHITECTURE.md, \"Inspecting a checkpoint\")\n"
    "-d s3://BUCKET/PREFIX: checkpoint N of that remote store, fetched into a scratch\n"
    "directory of $TMPDIR (removed after); the journal only when asked for (`journal`:\n"
    "read where the job kept it, run --journal-dir); --endpoint, --ca-file, --insecure,\n"
    "--addressing and --encrypt-key as for restart.  Exit 240 if there is no such store or checkpoint,\n"
    "244 if it is damaged (one line on stderr), 2 on a usage error.\n";

static const char *const whats[] = {"tree", "threads", "regions", "fds", "chans", "journal", "packs"};
#define NWHATS (sizeof whats / sizeof *whats)

/* no_journal: a remote checkpoint fetched without the journals (they are
 * where the job kept them, only `show -d s3://... journal` asks for them) */
struct show_args { const char *what; int json, no_journal; };

/* The checkpoint's tree and the manifest of each live process, every one
 * checked as restart checks it: 0, or -1 having said why (-2: a files-only
 * commit, which has no process to show). */
static int show_load(struct show *s)
{
    char why[LZ_PATH_MAX + 1024];
    lz_ckpt_path(s->ckpt, sizeof s->ckpt, s->dir, s->index);
    uint64_t when;
    if (lz_ckpt_files_only(s->ckpt, &when)) {
        lz_err("checkpoint %" PRIu64 " is a commit of a files-only job: it holds no process (`lazarus diff --at %" PRIu64
               "` shows what a restart would change)", s->index, s->index);
        return -2;
    }
    if (lz_tree_load(s->ckpt, &s->tree, why, sizeof why) < 0) {
        lz_err("checkpoint %" PRIu64 " is damaged: %s", s->index, why);
        return -1;
    }
    s->imgs = lz_xcalloc(s->tree.nprocs + 1, sizeof *s->imgs);
    size_t live = 0;
    for (size_t k = 0; k < s->tree.nprocs; k++) live += s->tree.procs[k].state == LZ_TP_LIVE;
    if (!live) { lz_err("checkpoint %" PRIu64 " is damaged: its tree has no live process", s->index); return -1; }
    for (size_t k = 0; k < s->tree.nprocs; k++) {
        char part[LZ_PATH_MAX + 128];
        if (s->tree.procs[k].state != LZ_TP_LIVE) continue;
        lz_tree_part_dir(part, sizeof part, s->ckpt, &s->tree.procs[k]);
        if (lz_manifest_load(part, &s->imgs[k], why, sizeof why) < 0) {
            lz_err("checkpoint %" PRIu64 " is damaged: %s", s->index, why);
            return -1;
        }
    }
    return 0;
}

static void show_free(struct show *s)
{
    for (size_t k = 0; s->imgs && k < s->tree.nprocs; k++) if (s->imgs[k].buf) lz_image_free(&s->imgs[k]);
    free(s->imgs);
    lz_tree_free(&s->tree);
}

/* Who the checkpoint is: the document's first members, or the text's first lines. */
static void show_header(struct show *s)
{
    size_t first = 0; /* the main program; a tree whose first process is no more has another live one */
    while (first + 1 < s->tree.nprocs && s->tree.procs[first].state != LZ_TP_LIVE) first++;
    const struct lz_header *h = s->imgs[first].hdr;
    size_t threads = 0, live = 0;
    uint64_t mem = 0, stored = 0;
    for (size_t k = 0; k < s->tree.nprocs; k++) {
        if (s->tree.procs[k].state != LZ_TP_LIVE) continue;
        live++;
        threads += s->imgs[k].nthreads;
        mem += s->imgs[k].hdr->mem_bytes;
        stored += s->imgs[k].hdr->stored_bytes;
    }
    char when[32], job[40];
    utc_text(when, sizeof when, h->created_ns);
    snprintf(job, sizeof job, "%016" PRIx64 "%016" PRIx64, h->job[0], h->job[1]);
    const char *trigger = lz_trigger_name(s->tree.trigger ? s->tree.trigger : h->trigger);
    if (s->json) {
        jw_str(&s->w, "store", s->dir);
        jw_u64(&s->w, "index", s->index);
        jw_str(&s->w, "job", job);
        jw_str(&s->w, "time", when);
        jw_u64(&s->w, "created_ns", h->created_ns);
        jw_str(&s->w, "trigger", trigger);
        jw_u64(&s->w, "parent", h->parent);
        jw_i64(&s->w, "pid", s->imgs[first].proc->pid);
        jw_u64(&s->w, "processes", live);
        jw_u64(&s->w, "threads_total", threads);
        jw_u64(&s->w, "memory_bytes", mem);
        jw_u64(&s->w, "stored_bytes", stored);
        return;
    }
    char m[32], st[32];
    human_bytes(m, sizeof m, mem);
    human_bytes(st, sizeof st, stored);
    printf("checkpoint %" PRIu64 " of %s (job %s)\n", s->index, s->dir, job);
    printf("taken %s (%s)%s, %zu process(es), %zu thread(s), memory %s, stored %s\n", when, trigger,
           h->parent ? ", in a run restarted from an earlier one" : "", live, threads, m, st);
}

static int show_dir(const char *d, int have_at, uint64_t at, const struct show_args *a)
{
    struct show s;
    memset(&s, 0, sizeof s);
    char *dir = abs_dir(d);
    char why[LZ_PATH_MAX + 512];
    s.dir = dir;
    s.json = a->json;
    if (lz_store_pick(dir, have_at, at, &s.index, why, sizeof why) < 0) { lz_err("%s", why); free(dir); return LZ_EXIT_NOT_FOUND; }
    int lr = show_load(&s);
    if (lr < 0) { show_free(&s); free(dir); return lr == -2 ? LZ_EXIT_FAIL : LZ_EXIT_DAMAGED; }
    int rc = 0, r;
    if (s.json) { jw_init(&s.w, stdout); jw_obj(&s.w, NULL); jw_version(&s.w); }
    show_header(&s);
    for (size_t i = 0; i < NWHATS; i++) {
        const char *w = whats[i];
        if (a->what && strcmp(a->what, w)) continue;
        if (a->no_journal && !strcmp(w, "journal")) {
            if (!s.json) printf("\n(the file journal: `lazarus show -d s3://... journal` reads it where the job kept it)\n");
            continue;
        }
        if (!strcmp(w, "tree")) show_tree(&s);
        else if (!strcmp(w, "threads")) show_threads(&s);
        else if (!strcmp(w, "regions")) show_regions(&s);
        else if (!strcmp(w, "fds")) show_fds(&s);
        else if (!strcmp(w, "chans")) show_chans(&s);
        else if ((r = !strcmp(w, "journal") ? show_journal(&s) : show_packs(&s)) < 0) {
            rc = r == -2 ? LZ_EXIT_DAMAGED : 1; /* said on stderr; the document stays whole */
            if (s.json) jw_null(&s.w, w);
        }
    }
    if (s.json) { jw_end_obj(&s.w); putchar('\n'); }
    show_free(&s);
    free(dir);
    if (fflush(stdout) != 0) { lz_err("show: cannot write the output: %s", strerror(errno)); rc = 1; }
    return rc;
}

static int show_fetched(const char *dir, uint64_t index, void *arg)
{
    return show_dir(dir, 1, index, arg);
}

int cmd_show(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "show", "dajEAIPY", help, &o);
    if (first < 0) return 2;
    struct show_args a = {first < argc ? argv[first] : NULL, o.json, 0};
    if (first + 1 < argc) { lz_err("show: unexpected argument '%s'", argv[first + 1]); return 2; }
    int known = !a.what;
    for (size_t i = 0; i < NWHATS && !known; i++) known = !strcmp(a.what, whats[i]);
    if (!known) {
        lz_err("show: '%s' is none of tree, threads, regions, fds, chans, journal, packs (see `lazarus show --help`)", a.what);
        return 2;
    }
    if (s3_is_url(o.dir)) {
        /* fetched as `restart` would; only `journal` needs the job's journals where it kept them
         * (run --journal-dir), which a summary does not insist on */
        a.no_journal = !a.what;
        struct remote_opts ro = {o.endpoint, o.ca_file, o.addressing, NULL, o.insecure, a.what == NULL || strcmp(a.what, "journal") != 0, 1};
        return remote_in_scratch(o.dir, ro, o.have_at, o.at, "show", show_fetched, &a);
    }
    if (o.endpoint || o.ca_file || o.insecure || o.addressing || o.encrypt_key) {
        lz_err("show: --endpoint, --ca-file, --insecure, --addressing and --encrypt-key go with -d s3://BUCKET/PREFIX");
        return 2;
    }
    if (access(o.dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    return show_dir(o.dir, o.have_at, o.at, &a);
}
