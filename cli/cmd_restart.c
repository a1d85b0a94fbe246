/* lazarus restart [-d DIR] [--at N] [--force] [--lazy] [--compress SPEC] [--checkpoint-signal SIG] */
#include "cli.h"
#include "tree.h"
#include "store_admin.h"
#include "util.h"
#include "rollback.h"
#include "rollback_files.h"
#include "fs_job.h"
#include "privilege.h"
#include "frames_check.h"
#include "batch.h"
#include "remote_store.h"
#include "remote_key.h"
#include "lazy.h"
#include "exit_codes.h"
#include "log_out.h"
#include <sys/stat.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus restart [-d DIR|s3://BUCKET/PREFIX] [--at N] [--force] [--lazy] [--compress SPEC] [--checkpoint-signal SIG]\n"
    "                       [--quiet] [--log FILE] [--json]\n"
    "Resume the job in DIR from checkpoint N (default: the newest) and stay in the\n"
    "foreground as its supervisor, with the settings it was started with.  First\n"
    "every change the job made to files since N is undone (`lazarus diff` shows\n"
    "them); checkpoints after N are then gone.\n"
    "Says in one line what it did (restarted from checkpoint N taken at T, K files\n"
    "rolled back, program resumed).  Exits with the program's status (128+signal if\n"
    "it was killed); if it never resumed, with Lazarus' own code (240 no such store\n"
    "or checkpoint, 242 the job runs, 244 damaged, 245 files changed outside the job;\n"
    "man lazarus).\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint to resume from (see `lazarus list`)\n"
    "  --quiet   no informational line of Lazarus' own (errors still print)\n"
    "  --log FILE  Lazarus' own lines appended to FILE, one per event with its time\n"
    "  --json    those lines as JSON objects, one per line (docs/json.md)\n"
    "  --force   roll back files even if something outside the job changed them\n"
    "            after it stopped (refused otherwise, naming them); restart a job\n"
    "            that finished (refused otherwise: it would undo its results)\n"
    "  --lazy    the program runs again before its memory is read: each page is\n"
    "            read (and checked) when first touched, the rest behind it (one\n"
    "            process; needs a userfaultfd that handles the kernel's accesses:\n"
    "            root, access to /dev/userfaultfd, or vm.unprivileged_userfaultfd=1)\n"
    "  --compress SPEC\n"
    "            compression of the checkpoints from now on: none, lz4, zstd or\n"
    "            zstd:LEVEL (default: what the job had)\n"
    "  --checkpoint-signal SIG\n"
    "            as for `lazarus run` (in a Slurm job USR1 by default)\n"
    "With -d s3://BUCKET/PREFIX (a job run with --remote or -d s3://), on any machine:\n"
    "the checkpoint is fetched from the remote store, every object checked, into a\n"
    "local store (--cache DIR, default the URL's spool $TMPDIR/lazarus-spool-HASH or\n"
    "--fallback DIR), and the job goes on flushing (or streaming) to the same remote\n"
    "store.  Checkpoints only this machine's spool holds (the remote did not answer)\n"
    "are published first; if they cannot be, nothing is done.  The journals of the job's changes to its\n"
    "files are never remote: they are read from the job's `run --journal-dir`\n"
    "(on the file system of its files); a job run without one is refused unless\n"
    "--files-as-they-are.  Options then: --endpoint URL, --ca-file FILE, --insecure,\n"
    "--addressing path|virtual (see `lazarus run --help`), --cache DIR,\n"
    "  --files-as-they-are  resume without rolling the job's files back\n"
    "  --encrypt-key FILE  the key of a job run with it (-d s3://... or -d DIR: only\n"
    "            its fingerprint is recorded, the key is given again)\n";

/* LAZARUS_TRACE=1: the time of each step of phase 1 on stderr (the
 * restorer traces its own). */
static uint64_t trace_t0;
static void trace(const char *step)
{
    if (!getenv("LAZARUS_TRACE")) return;
    fprintf(stderr, "lazarus: restart %8.3f ms %s\n", (double)(lz_now_ns(CLOCK_MONOTONIC) - trace_t0) / 1e6, step);
}

/* Phase 2's first step: what a restart changes in the store and the files
 * (called by the supervisor once the restorer of one process has loaded its
 * memory, or before the restorers of several start).  0, or -1 having said
 * why. */
struct phase2 {
    const char *dir;
    uint64_t index, next;
    struct lz_job *job;
    struct fj_plan *plan;
    struct supervisor *s; /* its file systems (run --fs) are mounted once the files are back */
};

static int roll_files_back(void *arg)
{
    struct phase2 *p = arg;
    lz_store_drop_spares(p->dir);
    int rb = rollback_files_apply("restart", p->dir, p->index, p->job, p->plan, p->next);
    fj_plan_free(p->plan);
    p->plan = NULL;
    char why[1200];
    if (rb == 0 && restart_ipc_apply(why, sizeof why) < 0) { lz_err("cannot restart: %s", why); return -1; }
    /* the restorer reopens the files under PATH through the mount */
    if (rb == 0 && p->s && *p->job->fs && fs_start_all(p->s, p->job->fs, p->index, why, sizeof why) < 0) {
        lz_err("cannot restart: %s", why);
        return -1;
    }
    return rb;
}

/* Mounts of the job's file systems left by a supervisor killed with its
 * daemon: gone before the files are looked at (they are under the mount). */
void fs_unmount_stale(const struct lz_job *job)
{
    for (const char *p = job->fs; *p;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        const char *sp = memchr(p, ' ', l);
        if (sp) {
            struct fs_mount m;
            memset(&m, 0, sizeof m);
            m.chan = m.mnt_fd = -1;
            snprintf(m.path, sizeof m.path, "%.*s", (int)(l - (size_t)(sp + 1 - p)), sp + 1);
            if (fsm_mounted(m.path)) fsm_stop(&m);
        }
        p += l + (q ? 1 : 0);
    }
}

/* A files-only job (run --files-only): its files back to commit N (or the
 * newest), then, if start, the program run anew from its beginning under a
 * new supervisor (`lazarus rollback` of such a job is its own command's:
 * the same rollback_files.c steps).  What `lazarus` exits with. */
int restart_files_only(const char *dir, int lock, struct lz_job *job, int have_at, uint64_t at, int force, int start)
{
    char why[1200];
    uint64_t index;
    if (lz_store_pick(dir, have_at, at, &index, why, sizeof why) < 0) { lz_err("%s", why); return LZ_EXIT_NOT_FOUND; }
    int refused;
    uint64_t files;
    struct fj_plan *plan = rollback_files_plan(start ? "restart" : "rollback", dir, index, job, force, &refused, &files);
    if (!plan) return refused;
    uint64_t next = rollback_next_index(dir, index, job);
    lz_store_drop_spares(dir);
    int rb = rollback_files_apply(start ? "restart" : "rollback", dir, index, job, plan, next);
    fj_plan_free(plan);
    if (rb < 0) return 1;
    lz_store_drop_branch(dir, index, UINT64_MAX); /* also when nothing was to undo */
    job->next_index = next;
    job->rolling_to = -1;
    snprintf(job->state, sizeof job->state, "%s", start ? "running" : "stopped");
    if (lz_job_write(dir, job) < 0) { lz_err("cannot write %s/%s: %s", dir, LZ_JOBFILE, strerror(errno)); return 1; }
    log_info("the files are back at checkpoint %" PRIu64, index);
    if (!start) return 0;
    struct supervisor s;
    int child_ctl = supervisor_prepare(&s, dir, dir, lock, job, next);
    if (child_ctl < 0) return 1;
    return fs_files_only_restart(&s, child_ctl, job);
}

/* The job file says the job runs (not on the restart's critical path: the
 * restorer goes on meanwhile; a rollback in progress was recorded already). */
static void job_running(void *arg)
{
    struct phase2 *p = arg;
    snprintf(p->job->state, sizeof p->job->state, "running");
    p->job->rolling_to = -1;
    if (lz_job_write(p->dir, p->job) < 0) lz_warn("cannot write %s/%s: %s", p->dir, LZ_JOBFILE, strerror(errno));
}


/* Every thread ID but the PID is free here (the restorer makes the threads). */
static int thread_ids_free(const struct lz_image *img)
{
    if (kill(img->proc->pid, 0) == 0 || errno != ESRCH) return 0;
    for (size_t i = 1; i < img->nthreads; i++)
        if (kill(img->threads[i].tid, 0) == 0 || errno != ESRCH) return 0;
    return 1;
}

/* restart --lazy where it cannot be done: one line, nothing changed. */
static int lazy_refused(int several, uint64_t index)
{
    if (several) {
        lz_err("cannot restart checkpoint %" PRIu64 " with --lazy: it holds several processes, which a lazy restart does "
               "not handle yet; restart without --lazy; nothing was changed", index);
        return -1;
    }
    int fd = lz_lazy_uffd();
    if (fd < 0) {
        lz_err("cannot restart with --lazy: this user can only have a user-mode-only userfaultfd, with which a system call "
               "reading into a page not yet in (read() into a buffer) would fail with EFAULT; it needs root, access to "
               "/dev/userfaultfd or vm.unprivileged_userfaultfd=1; restart without --lazy; nothing was changed");
        return -1;
    }
    close(fd);
    return 0;
}

/* A restart proves everything before it changes anything (phase 1), then
 * rolls the files back and restores (phase 2).  A refusal in phase 1 leaves
 * the store and the user's files as they were. */
int cmd_restart(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "restart", "dafcGEAIPZFLYBjql", help, &o);
    if (first < 0) return 2;
    if (log_setup("restart", o.log, o.json, o.quiet) < 0) return 2;
    if (batch_setup(o.ckpt_signal, "restart") < 0) return 1;
    if (first < argc) { lz_err("restart: unexpected argument '%s'", argv[first]); return 2; }
    char why[1200], cache[LZ_PATH_MAX];
    if (s3_is_url(o.dir)) {
        /* on any machine: a local store made from the remote checkpoint, then as usual */
        struct remote_opts ro = {o.endpoint, o.ca_file, o.addressing, o.cache, o.insecure, o.files_as_they_are, 0};
        uint64_t at;
        /* this machine's spool of the URL: what only it holds is published first,
         * and it is the local store of the job from here on (`checkpoint -d URL` finds it) */
        char spool[LZ_PATH_MAX];
        spool_path(spool, sizeof spool, o.dir, o.fallback);
        int r = spool_publish_before_restart(spool, o.dir);
        if (r < 0) return r == -1 ? LZ_EXIT_FAIL : -r;
        if (!ro.cache) ro.cache = spool;
        r = remote_fetch_store(o.dir, &ro, o.have_at, o.at, cache, sizeof cache, &at);
        if (r < 0) return r == -1 ? LZ_EXIT_FAIL : -r;
        o.dir = cache;
        o.have_at = 1;
        o.at = at;
    } else if (o.endpoint || o.ca_file || o.insecure || o.addressing || o.cache || o.files_as_they_are || o.fallback) {
        lz_err("restart: --endpoint, --ca-file, --insecure, --addressing, --cache, --fallback and --files-as-they-are go with -d s3://BUCKET/PREFIX");
        return 2;
    }
    char *dir = abs_dir(o.dir);
    trace_t0 = lz_now_ns(CLOCK_MONOTONIC);
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return LZ_EXIT_NOT_FOUND; }
    struct lz_job sj;
    if (o.dir != cache && lz_job_read(dir, &sj) == 0 && sj.stream) {
        /* a spool has let its published packs go: the remote store is the whole of it */
        lz_err("cannot restart: %s is the spool of a job streamed to %s; restart it with `lazarus restart -d %s` "
               "(which publishes what only the spool holds first); nothing was changed", o.dir, sj.remote, sj.remote);
        return 1;
    }
    /* ---- phase 1: read and check everything; change nothing */
    struct lz_job job;
    int lock;
    int oc = rollback_open_store("restart", "a job is already running with %s; it cannot be restarted twice", dir, o.dir,
                                 o.have_at, o.at, &job, &lock);
    if (oc) return oc;
    /* a job that encrypts what it flushes goes on only with its key (given again: it is recorded nowhere) */
    if (*job.remote && remote_key_fits(job.encrypt_fp, o.dir, why, sizeof why) < 0) {
        lz_err("cannot restart: %s; nothing was changed", why);
        free(dir);
        return 1;
    }
    if (!*job.remote && remote_key()) {
        lz_err("cannot restart: --encrypt-key is for a job that flushes to a remote store, and the job in %s does not; "
               "nothing was changed", o.dir);
        free(dir);
        return 1;
    }
    fs_unmount_stale(&job);
    if (job.files_only && (strcmp(job.state, "finished") || o.force)) return restart_files_only(dir, lock, &job, o.have_at, o.at, o.force, 1);
    uint64_t index;
    if (lz_store_pick(dir, o.have_at, o.at, &index, why, sizeof why) < 0) { lz_err("%s", why); return LZ_EXIT_NOT_FOUND; }
    /* a finished job's files are its results: a restart would undo them */
    if (!strcmp(job.state, "finished") && !o.force) {
        lz_err("cannot restart: the job in %s finished (exit status %d); a restart would undo its results and run it again "
               "from checkpoint %" PRIu64 " (`lazarus restart --force` does that); nothing was changed", o.dir, job.exit_status, index);
        return 1;
    }
    char ckpt[LZ_PATH_MAX + 64];
    lz_ckpt_path(ckpt, sizeof ckpt, dir, index);
    struct lz_image img;
    char inner[1024];
    int mrc = lz_manifest_load(ckpt, &img, inner, sizeof inner);
    if (mrc == LZ_UNREADABLE || (mrc == 0 && lz_image_fits_host(&img, inner, sizeof inner) < 0)) {
        lz_err("cannot restart from checkpoint %" PRIu64 ": %s; nothing was changed", index, inner);
        return 1;
    }
    if (mrc < 0) {
        lz_err("cannot restart: checkpoint %" PRIu64 " is damaged: %s; nothing was changed", index, inner);
        return LZ_EXIT_DAMAGED;
    }
    struct restart_tree rt;
    memset(&rt, 0, sizeof rt);
    if (lz_tree_load(ckpt, &rt.tree, inner, sizeof inner) < 0) {
        lz_err("cannot restart: checkpoint %" PRIu64 " is damaged: %s; nothing was changed", index, inner);
        return LZ_EXIT_DAMAGED;
    }
    int several = rt.tree.nprocs > 1;
    trace("job file, manifest and tree read");
    if (o.lazy && lazy_refused(several, index) < 0) return 1;
    if (several) {
        /* every part is checked before any file is rolled back */
        int tl = restart_tree_load(&rt, ckpt, index, why, sizeof why);
        if (tl < 0) { lz_err("%s", why); return tl == -2 ? LZ_EXIT_DAMAGED : 1; }
    } else {
        if (check_identity(&img, why, sizeof why) < 0) { lz_err("cannot restart from checkpoint %" PRIu64 ": %s", index, why); return 1; }
        /* small (pipe and socket buffers) */
        if (lz_check_chans(ckpt, &img, index, why, sizeof why) < 0) { lz_err("cannot restart: %s", why); return 1; }
        /* every frame: proven by the restorer itself before the rollback,
         * while it fills the anonymous memory (wait_for_rollback), so that the
         * data is read once, overlapped with expanding it */
    }
    trace("identity and channels checked");
    int refused;
    uint64_t files;
    struct fj_plan *plan = rollback_files_plan("restart", dir, index, &job, o.force, &refused, &files);
    if (!plan) return refused;
    trace("journals proven, outside changes looked for");
    for (size_t k = 0; k < (several ? rt.tree.nprocs : 1); k++) {
        const struct lz_image *im = several ? &rt.imgs[k] : &img;
        if (several && rt.tree.procs[k].state != LZ_TP_LIVE) continue;
        if (restart_paths_check(im, plan, why, sizeof why) < 0 ||
            restart_inet_check(im, several ? rt.tree.procs[k].pid : im->proc->pid, why, sizeof why) < 0) {
            lz_err("cannot restart from checkpoint %" PRIu64 ": %s; nothing was changed", index, why);
            fj_plan_free(plan);
            return 1;
        }
    }
    if (restart_ipc_check(several ? rt.imgs : &img, several ? rt.tree.nprocs : 1, why, sizeof why) < 0) {
        lz_err("cannot restart from checkpoint %" PRIu64 ": %s; nothing was changed", index, why);
        fj_plan_free(plan);
        return 1;
    }
    for (size_t k = 0; k < (several ? rt.tree.nprocs : 1); k++) /* the TCP connections that come back reset */
        if (!several || rt.tree.procs[k].state == LZ_TP_LIVE)
            restart_inet_report(several ? rt.imgs : &img, several ? rt.tree.nprocs : 1, k,
                                several ? rt.tree.procs[k].pid : img.proc->pid);

    uint64_t next = rollback_next_index(dir, index, &job);
    if (*o.compress) snprintf(job.compress, sizeof job.compress, "%s", o.compress);
    trace("paths checked");
    struct phase2 p2 = {dir, index, next, &job, plan, NULL};

    /* ---- phase 2: roll the files back, then restore.  Several processes:
     * their restorers reopen the files they share before they make their
     * children, so they start after the rollback (their frames were checked
     * by restart_tree_load).  One: its restorer starts now, fills the
     * anonymous memory and proves every frame, and the supervisor rolls the
     * files back when it says LOADED. */
    if (several) {
        if (roll_files_back(&p2) < 0) return 1;
        job_running(&p2);
    }
    /* the job goes on flushing to its remote store, if it answers */
    struct flusher *fl = flusher_start(dir, &job, why, sizeof why);
    if (!fl && *why) lz_warn("the remote store %s: %s; checkpoints stay here until a restart reaches it", job.remote, why);
    struct supervisor s;
    int child_ctl = supervisor_prepare(&s, dir, o.dir, lock, &job, next);
    if (child_ctl < 0) { fj_plan_free(p2.plan); return 1; }
    s.flusher = fl;
    p2.s = &s;
    if (several && *job.fs && fs_start_all(&s, job.fs, index, why, sizeof why) < 0) { lz_err("cannot restart: %s", why); return 1; }
    s.restoring = 1;
    s.restore_index = index;
    s.restore_taken_ns = img.hdr->created_ns;
    s.restore_files = files;
    s.lazy = o.lazy;
    s.files_rolled = several;
    int ids_free;
    if (!several) {
        int rolled[2];
        if (pipe2(rolled, O_CLOEXEC) < 0) { lz_err("cannot restart: pipe: %s; nothing was changed", strerror(errno)); return 1; }
        s.rolled_read = rolled[0];
        s.rolled_fd = rolled[1];
        s.rollback = roll_files_back;
        s.running = job_running;
        s.rollback_arg = &p2;
    }
    if (several) {
        if (restart_tree_plan(&rt, child_ctl, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
        s.plan_fd = rt.plan_fd;
        s.go_fd = rt.go_write;
        s.nlive = rt.nlive;
        ids_free = restart_tree_ids_free(&rt);
    } else {
        ids_free = thread_ids_free(&img);
    }
    trace("starting the restorer");
    s.child = spawn_restorer(&s, child_ctl, img.proc->pid, ids_free, ckpt, index);
    close(child_ctl);
    if (s.rolled_read >= 0) { close(s.rolled_read); s.rolled_read = -1; } /* the restorer's */
    if (several) {
        /* the restorers have them now */
        close(rt.plan_fd);
        close(rt.go_read);
        s.plan_fd = -1;
    }
    restart_tree_free(&rt);
    if (s.child < 0) {
        lz_err("cannot start the restorer: %s%s", strerror(errno), s.files_rolled ? "" : "; nothing was changed");
        return 1;
    }
    lz_image_free(&img);
    int code = supervise(&s);
    fj_plan_free(p2.plan); /* not rolled back: the restorer failed or was killed first */
    return code;
}
