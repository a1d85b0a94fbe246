/* lazarus run [-d DIR|s3://BUCKET/PREFIX [--fallback DIR]] [-i SECONDS] [-k N] [--compress SPEC] [--job-stdio] [--tcp=reset|refuse] [--compact] [--resume]
 * [--checkpoint-signal SIG] [--remote s3://BUCKET/PREFIX [--keep-remote N] ...] [--mintime S] [--no-incremental] [--no-fork]
 * [--check-exclusions] [--] PROGRAM [ARG...] */
#include "cli.h"
#include "fs_job.h"
#include "store_admin.h"
#include "remote_store.h"
#include "remote_key.h"
#include "util.h"
#include "resume.h"
#include "batch.h"
#include "ckptrc.h"
#include "exit_codes.h"
#include "log_out.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus run [-d DIR|s3://BUCKET/PREFIX [--fallback DIR]] [-i SECONDS] [-k N] [--compress SPEC] [--job-stdio] [--tcp=reset|refuse] [--compact] [--resume]\n"
    "                   [--checkpoint-signal SIG] [--remote s3://BUCKET/PREFIX [--keep-remote N] [--endpoint URL] [--ca-file FILE] [--insecure]]\n"
    "                   [--mintime S] [--no-incremental] [--no-fork] [--check-exclusions] [--quiet] [--log FILE] [--json]\n"
    "                   [--] PROGRAM [ARG...]\n"
    "Run PROGRAM (an unmodified, dynamically linked program) under Lazarus and stay\n"
    "in the foreground as its supervisor; exit with its status (128+signal if killed).\n"
    "If PROGRAM never started, exit with Lazarus' own code (2 usage, 242 a job runs\n"
    "with DIR, 244 DIR damaged, 246 the remote store refused; man lazarus).\n\n"
    "  -d DIR      checkpoint store (default ./lazarus.ckpt); refused if it holds an\n"
    "              unfinished job (resume that with `lazarus restart -d DIR`)\n"
    "  -d s3://BUCKET/PREFIX\n"
    "              stream: each checkpoint is published to that object store at once\n"
    "              and leaves the machine (-k N: the remote keeps the N newest); one the\n"
    "              store cannot take (down, 5xx, throttled) stays in the fallback and is\n"
    "              published when it answers; the program never waits for it\n"
    "  --fallback DIR  the spool and fallback of -d s3:// (default\n"
    "              $TMPDIR/lazarus-spool-<hash of the URL>)\n"
    "  --quiet     no informational line of Lazarus' own (errors still print)\n"
    "  --log FILE  Lazarus' own lines appended to FILE, one per event with its time\n"
    "              (started, checkpoint N taken or failed, exited), not on stderr\n"
    "  --json      those lines as JSON objects, one per line (docs/json.md)\n"
    "  -i SECONDS  checkpoint every SECONDS (default 600, 0 = only on request)\n"
    "  -k N        keep the N newest checkpoints (default 3)\n"
    "  --compress SPEC\n"
    "              how page data is compressed: none, lz4, zstd or zstd:LEVEL (1..19,\n"
    "              or -7..-1 for faster); a later `restart --compress` changes it\n"
    "  --durability process|machine\n"
    "              process (default): files roll back after the loss of the program\n"
    "              (SIGKILL, OOM killer, time limit); machine: also after the loss of\n"
    "              the machine (the undo reaches the disk before each change)\n"
    "  --exclude DIR  changes under DIR are not tracked nor rolled back (repeatable;\n"
    "              /proc, /sys, /dev and the store itself never are)\n"
    "  --fs PATH   the files under directory PATH through Lazarus' file system (a FUSE\n"
    "              daemon mounted over PATH for the job): every change there, by any\n"
    "              program (static, Go, raw system calls), is undone at a restart\n"
    "              (repeatable)\n"
    "  --fs-mode undo|buffer\n"
    "              how --fs keeps the files: undo (default: writes reach the files at\n"
    "              once, undone at a restart) or buffer (the job's writes are held until\n"
    "              its next checkpoint commits; others see only committed data; shadow\n"
    "              is not implemented yet)\n"
    "  --fs-buffer-max MiB\n"
    "              buffer mode: held data kept in memory up to this (default 256), then\n"
    "              moved to a backing file in the store\n"
    "  --fs-buffer-low MiB\n"
    "              ... down to this (default half of --fs-buffer-max)\n"
    "  --files-only  with --fs: no memory checkpoints; a checkpoint commits the files,\n"
    "              a restart puts them back and runs the program again from its start\n"
    "  --job-stdio the regular files given as stdin, stdout and stderr (`> out 2> err`)\n"
    "              are the job's: rolled back with it, and a restart writes on in them.\n"
    "              Default: they are the launcher's, like a terminal: never rolled back\n"
    "              (Lazarus' own lines stay; what the program wrote after the newest\n"
    "              checkpoint is written again after a restart, so it can appear twice),\n"
    "              and a restarted program writes to what `lazarus restart` was given\n"
    "  --tcp=reset|refuse\n"
    "              a TCP connection to outside the job (another host, a process not of\n"
    "              the job): reset (default) restores it as a connection the program\n"
    "              finds reset (ECONNRESET), and `restart` says so; refuse makes the\n"
    "              checkpoint fail, naming it.  Listening and UDP sockets, and\n"
    "              connections inside one process, are restored either way\n"
    "  --compact   restarts from incremental checkpoints as fast as from a full one: a\n"
    "              checkpoint also stores again the pages of old frames once the pages\n"
    "              they hold in vain pass 1/16 of the program's data, so that a restart\n"
    "              reads at most ~1.07x the data; an incremental checkpoint then writes\n"
    "              several times what changed (default: only what changed)\n"
    "  --resume    the same line for the first run and every rerun (a batch job\n"
    "              requeued): DIR holds a checkpoint of this job: restart from the\n"
    "              newest (as `lazarus restart -d DIR`, which keeps the job's settings);\n"
    "              none: start PROGRAM; the job finished: exit with its status, start\n"
    "              nothing.  Refused if the job runs elsewhere or DIR is another\n"
    "              program's\n"
    "  --checkpoint-signal SIG\n"
    "              this signal to `lazarus` means: checkpoint now, then stop the program\n"
    "              (restartable).  Inside a Slurm job (SLURM_JOB_ID set) USR1 by default,\n"
    "              and the job is requeued (`scontrol requeue`); see README.md \"Slurm\"\n"
    "  --remote s3://BUCKET/PREFIX\n"
    "              also copy each checkpoint, once committed here, to this S3-compatible\n"
    "              object store (a thread of the supervisor, never in the program's pause);\n"
    "              `lazarus restart -d s3://BUCKET/PREFIX` resumes the job on any machine.\n"
    "              Endpoint, region and credentials as every AWS tool finds them:\n"
    "              AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/\n"
    "              AWS_SESSION_TOKEN, or AWS_SHARED_CREDENTIALS_FILE / ~/.aws/credentials\n"
    "              with AWS_PROFILE (no secret is ever written to DIR/job)\n"
    "  --keep-remote N  keep the N newest checkpoints in the remote store (default all)\n"
    "  --encrypt-key FILE  encrypt every object sent to the remote store (AES-256-GCM, on\n"
    "              this machine; FILE: 32 bytes, or 64 hex digits); the key never leaves\n"
    "              this process, only its fingerprint is recorded: restart, verify and\n"
    "              list need --encrypt-key FILE again\n"
    "  --journal-dir DIR  keep the file journals (what rolls the job's files back) in\n"
    "              DIR/JOB instead of the store: on the file system of the job's files\n"
    "              (shared by the machines), they survive the machine with the files,\n"
    "              and `restart -d s3://...` on another machine rolls the files back\n"
    "  --endpoint URL   the S3 endpoint (default AWS_ENDPOINT_URL, else AWS's)\n"
    "  --ca-file FILE   trust this CA for an https:// endpoint (default the system's)\n"
    "  --insecure       do not verify the endpoint's certificate\n"
    "  --addressing path|virtual  bucket in the path, or in the host name (default:\n"
    "              path for an endpoint given, virtual for AWS)\n"
    "  --mintime S lazarus_checkpoint_here() (libckpt's checkpoint_here) takes a checkpoint\n"
    "              only when S seconds (\"0.5\" allowed) passed since the last (default 0)\n"
    "  --no-incremental\n"
    "              every checkpoint stores all the program's memory anew: no dirty\n"
    "              tracking, no reference to earlier checkpoints' pages (except memory\n"
    "              the program declared read-only); for comparisons\n"
    "  --no-fork   the program waits while its checkpoint is written (no writer process)\n"
    "  --check-exclusions\n"
    "              a write into memory the program declared read-only (lazarus_exclude,\n"
    "              exclude_bytes) is named on stderr and its pages stored after all\n"
    "A .ckptrc in the current directory (libckpt's keywords) is read first; options win.\n";

pid_t spawn_program(struct supervisor *s, int child_ctl, char **argv)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(137);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    const char *rt = install_path("lib/" LZ_RUNTIME_LIB);
    const char *old = getenv("LD_PRELOAD");
    char *pre = malloc(strlen(rt) + (old ? strlen(old) : 0) + 2);
    if (!pre) _exit(127);
    sprintf(pre, "%s%s%s", rt, old && *old ? ":" : "", old && *old ? old : "");
    char num[32];
    setenv("LD_PRELOAD", pre, 1);
    setenv("LAZARUS_DIR", s->dir, 1);
    if (strcmp(s->jhome, s->dir)) setenv("LAZARUS_JOURNAL_DIR", s->jhome, 1);
    else unsetenv("LAZARUS_JOURNAL_DIR");
    snprintf(num, sizeof num, "%d", child_ctl);
    setenv("LAZARUS_CTL_FD", num, 1);
    snprintf(num, sizeof num, "%d", getpid());
    setenv("LAZARUS_PID", num, 1);
    unsetenv("LAZARUS_PARENT");
    unsetenv("LAZARUS_FJ"); /* an outer job's file journal is not this one's */
    setenv("LAZARUS_DURABILITY", s->durability ? "machine" : "process", 1);
    setenv("LAZARUS_EXCLUDE", s->excludes, 1);
    setenv("LAZARUS_COMPRESS", s->compress, 1);
    setenv("LAZARUS_TCP", s->tcp_refuse ? "refuse" : "reset", 1);
    if (batch_holds_term()) setenv("LAZARUS_HOLD_TERM", "1", 1); /* Slurm's SIGTERM waits for us (batch_slurm.c) */
    else unsetenv("LAZARUS_HOLD_TERM");
    if (s->job_stdio) setenv("LAZARUS_JOB_STDIO", "1", 1);
    else unsetenv("LAZARUS_JOB_STDIO");
    char id[33];
    lz_job_id_text(id, s->job_id);
    setenv("LAZARUS_JOB", id, 1);
    execvp(argv[0], argv);
    lz_err("cannot run %s: %s", argv[0], strerror(errno));
    _exit(127);
}

/* A .ckptrc in the current directory (libckpt's settings): what the command
 * line did not say.  Where Lazarus does better whatever it says (incremental,
 * fork, maxfiles), it is accepted and said once. */
static int run_ckptrc(struct cli_opts *o)
{
    static char store[4096 + 32];
    struct lz_ckptrc rc;
    char why[600];
    int got = lz_ckptrc_read(".ckptrc", &rc, why, sizeof why);
    if (got < 0) { lz_err("run: %s", why); return -1; }
    if (!got) return 0;
    if (rc.have_dir && !o->have_dir) {
        snprintf(store, sizeof store, "%s/lazarus.ckpt", rc.dir);
        o->dir = store;
    }
    if (rc.have_maxtime && !o->have_interval) { o->have_interval = 1; o->interval = rc.maxtime_s; }
    if (rc.have_mintime && !o->have_mintime) { o->have_mintime = 1; o->mintime_ms = rc.mintime_ms; }
    if (rc.have_checkpointing && !rc.checkpointing) {
        /* the program runs as without checkpoints: no interval, no checkpoint_here() */
        o->have_interval = 1; o->interval = 0;
        o->have_mintime = 1; o->mintime_ms = UINT64_MAX / 2000000;
        lz_err("run: .ckptrc says checkpointing off: only `lazarus checkpoint` takes one");
    }
    if (rc.have_incremental && !rc.incremental)
        lz_err("run: .ckptrc: incremental off accepted; Lazarus stores only what changed anyway (run --no-incremental to store all)");
    if (rc.have_fork && !rc.fork)
        lz_err("run: .ckptrc: fork off accepted; Lazarus lets the program run while it writes anyway (run --no-fork to wait)");
    if (rc.have_maxfiles)
        lz_err("run: .ckptrc: maxfiles accepted; Lazarus coalesces old checkpoints' pages itself and keeps the -k newest");
    return 0;
}

/* The user-directed settings, for the runtime to read at its start (a
 * restarted process keeps them in its memory). */
static int run_user_env(const struct cli_opts *o)
{
    char num[32];
    if (o->check_excl) setenv("LAZARUS_CHECK_EXCLUSIONS", "1", 1);
    else unsetenv("LAZARUS_CHECK_EXCLUSIONS");
    if (o->no_incremental) setenv("LAZARUS_NO_INCREMENTAL", "1", 1);
    else unsetenv("LAZARUS_NO_INCREMENTAL");
    if (o->no_fork) setenv("LAZARUS_NO_FORK", "1", 1);
    snprintf(num, sizeof num, "%llu", (unsigned long long)(o->have_mintime ? o->mintime_ms : 0));
    setenv("LAZARUS_MINTIME_MS", num, 1);
    return 0;
}

int cmd_run(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "run", "dikDxcSTCRGMKEAIPJUNWXYBjqlVHobu", help, &o);
    if (first < 0) return 2;
    if (log_setup("run", o.log, o.json, o.quiet) < 0) return 2;
    if (run_ckptrc(&o) < 0) return 2;
    if (batch_setup(o.ckpt_signal, "run") < 0) return 1;
    char why[1024];
    /* -d s3://: the store is the URL's spool, flushed as --remote URL is, and emptied as it goes */
    static char spool[LZ_PATH_MAX];
    int stream = s3_is_url(o.dir), spool_made = 0;
    if (stream) {
        char b[256], p[512];
        if (s3_url_parse(o.dir, b, sizeof b, p, sizeof p, why, sizeof why) < 0) { lz_err("run: -d: %s; nothing was started", why); return 2; }
        if (o.remote || o.have_keep_remote) {
            lz_err("run: -d s3://... streams to that store (-k N: the remote keeps N); --remote and --keep-remote go with -d DIR");
            return 2;
        }
        if (o.resume) { lz_err("run: --resume goes with -d DIR (restart a streamed job with `lazarus restart -d %s`)", o.dir); return 2; }
        spool_path(spool, sizeof spool, o.dir, o.fallback);
        o.remote = o.dir;
        o.dir = spool;
        o.have_keep_remote = 1;
        o.keep_remote = o.have_keep ? o.keep : 3;
        spool_made = access(spool, F_OK) < 0;
    } else if (o.fallback) {
        lz_err("run: --fallback goes with -d s3://BUCKET/PREFIX");
        return 2;
    }
    if (!o.remote && o.encrypt_key) {
        /* LIMITS.md: a local DIR is not encrypted yet */
        lz_err("run: --encrypt-key encrypts what goes to a remote store (--remote s3://BUCKET/PREFIX); checkpoints in a "
               "local DIR are not encrypted yet");
        return 2;
    }
    if (!o.remote && (o.have_keep_remote || o.endpoint || o.ca_file || o.insecure || o.addressing)) {
        lz_err("run: --keep-remote, --endpoint, --ca-file, --insecure and --addressing go with --remote s3://BUCKET/PREFIX");
        return 2;
    }
    if (o.remote) {
        char b[256], p[512];
        if (s3_url_parse(o.remote, b, sizeof b, p, sizeof p, why, sizeof why) < 0) { lz_err("run: --remote: %s", why); return 2; }
        if (strlen(o.remote) >= sizeof ((struct lz_job *)0)->remote || (o.ca_file && strlen(o.ca_file) >= 500) ||
            (o.endpoint && strlen(o.endpoint) >= 500)) {
            lz_err("run: --remote, --endpoint or --ca-file is too long");
            return 2;
        }
    }
    if (first >= argc) { lz_err("run: no program given (usage: lazarus run [-d DIR] [-i SECONDS] [-k N] [--compress SPEC] [--] PROGRAM [ARG...])"); return 2; }
    if (o.files_only && !*o.fs) { lz_err("run: --files-only needs --fs PATH (the directory whose files it keeps)"); return 2; }
    if (o.fs_mode && !*o.fs) { lz_err("run: --fs-mode goes with --fs PATH"); return 2; }
    int buffer = o.fs_mode && !strcmp(o.fs_mode, "buffer");
    if ((o.fs_buf_max || o.fs_buf_low) && !buffer) { lz_err("run: --fs-buffer-max and --fs-buffer-low go with --fs-mode buffer"); return 2; }
    /* CprFS's two thresholds: held in memory up to max, then moved to the
     * store's backing file down to low (half of max: a spill is a large
     * sequential write, not one per write) */
    uint64_t bmax = o.fs_buf_max ? o.fs_buf_max : 256, blow = o.fs_buf_low ? o.fs_buf_low : (bmax / 2);
    if (buffer && (blow > bmax || bmax > (1u << 20))) {
        lz_err("run: --fs-buffer-low (%" PRIu64 " MiB) must not be above --fs-buffer-max (%" PRIu64 " MiB, at most 1048576)", blow, bmax);
        return 2;
    }
    char mode[64];
    if (buffer) snprintf(mode, sizeof mode, "buffer:%" PRIu64 ":%" PRIu64, bmax, blow);
    else snprintf(mode, sizeof mode, "undo");
    if (*o.fs && (o.journal_dir || stream)) { lz_err("run: --fs goes with -d DIR, without --journal-dir"); return 2; }
    char *dir = abs_dir(o.dir);
    if (lz_store_prepare(dir, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    free(dir);
    dir = abs_dir(o.dir);
    char fs_lines[4096 + 8 * 8] = "";
    for (const char *p = o.fs; *p;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        char path[4096];
        snprintf(path, sizeof path, "%.*s", (int)l, p);
        p += l + (q ? 1 : 0);
        char real[4096];
        if (fsm_check_path(path, dir, real, sizeof real, why, sizeof why) < 0) { lz_err("run: %s; nothing was started", why); return 2; }
        size_t have = strlen(fs_lines);
        if (snprintf(fs_lines + have, sizeof fs_lines - have, "%s%s %s", have ? "\n" : "", mode, real) >= (int)(sizeof fs_lines - have)) {
            lz_err("run: too many --fs; nothing was started");
            return 2;
        }
    }
    int lock = lz_store_lock(dir);
    int busy = lock < 0 && errno == EWOULDBLOCK;
    if (lock < 0 && o.resume) {
        lz_err("run --resume: the job in %s is running (its supervisor holds %s/%s); nothing was started", o.dir, o.dir, LZ_LOCKFILE);
        return busy ? LZ_EXIT_RUNNING : LZ_EXIT_FAIL;
    }
    if (lock < 0) {
        lz_err("a job is already running with %s: checkpoint it with `lazarus checkpoint -d %s`, resume it with "
               "`lazarus restart -d %s` once it has stopped, or start anew with another directory (-d DIR)", o.dir, o.dir, o.dir);
        return busy ? LZ_EXIT_RUNNING : LZ_EXIT_FAIL;
    }
    if (o.resume) {
        int status;
        int64_t at;
        switch (resume_decide(dir, o.dir, argv + first, &status, &at)) {
        case RESUME_REFUSE: return status;
        case RESUME_FINISHED: return status;
        case RESUME_RESTART: close(lock); return resume_restart(o.dir, at, o.compress, o.ckpt_signal);
        case RESUME_START: break;
        }
    }
    lz_store_cleanup_tmp(dir);
    lz_store_drop_spares(dir);
    struct lz_job job;
    int jr = lz_job_read(dir, &job), have_job = jr == 0;
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n > 0 && jr == LZ_JOB_DAMAGED) {
        lz_err("the store's job file is damaged (%s/%s); %s holds checkpoints: check them with `lazarus verify -d %s`, "
               "or start anew with another directory (-d DIR)", o.dir, LZ_JOBFILE, o.dir, o.dir);
        return LZ_EXIT_DAMAGED;
    }
    if (n > 0 && (!have_job || strcmp(job.state, "finished") != 0)) {
        lz_err("%s holds an unfinished job (newest checkpoint %" PRIu64 "): resume it with `lazarus restart -d %s`, "
               "or start anew with another directory (%s)", o.dir, v[n - 1], stream ? o.remote : o.dir,
               stream ? "--fallback DIR, or another URL" : "-d DIR");
        return 1;
    }
    /* a finished job's checkpoints, packs and journals are of no further use:
     * a new job starts clean */
    for (int i = 0; i < n; i++) lz_store_remove(dir, v[i]);
    free(v);
    lz_store_clear_data(dir);
    char state[LZ_PATH_MAX + 32];
    snprintf(state, sizeof state, "%s/" RS_STATE, dir);
    unlink(state); /* what a finished job had flushed */
    memset(&job, 0, sizeof job);
    job.interval = o.have_interval ? o.interval : 600;
    job.keep = o.have_keep ? o.keep : 3;
    job.durability = o.durability > 0;
    job.rolling_to = -1;
    snprintf(job.excludes, sizeof job.excludes, "%s", o.excludes);
    snprintf(job.compress, sizeof job.compress, "%s", o.compress);
    job.job_stdio = o.job_stdio;
    job.tcp_refuse = o.tcp_refuse;
    snprintf(job.fs, sizeof job.fs, "%s", fs_lines);
    job.files_only = o.files_only;
    snprintf(job.state, sizeof job.state, "running");
    lz_job_new_id(job.id);
    resume_command(argv + first, job.command, sizeof job.command, &job.command_hash);
    if (o.remote) {
        snprintf(job.remote, sizeof job.remote, "%s", o.remote);
        snprintf(job.remote_endpoint, sizeof job.remote_endpoint, "%s", o.endpoint ? o.endpoint : "");
        if (o.ca_file) {
            char *ca = abs_dir(o.ca_file);
            snprintf(job.remote_ca, sizeof job.remote_ca, "%s", ca);
            free(ca);
        }
        snprintf(job.remote_addressing, sizeof job.remote_addressing, "%s", o.addressing ? o.addressing : "");
        job.remote_insecure = o.insecure;
        job.keep_remote = o.have_keep_remote ? o.keep_remote : 0;
        if (remote_key()) snprintf(job.encrypt_fp, sizeof job.encrypt_fp, "%s", remote_key()->fp);
        job.stream = stream;
    }
    if (o.journal_dir) {
        /* the journals beside the job's files: JOURNAL_DIR/JOB, made now */
        char *jd = abs_dir(o.journal_dir), home[LZ_PATH_MAX + 40], id[33];
        lz_job_id_text(id, job.id);
        snprintf(home, sizeof home, "%s/%s", jd, id);
        struct stat jst;
        if (strlen(jd) >= sizeof job.journal_dir || stat(jd, &jst) < 0 || !S_ISDIR(jst.st_mode) || mkdir(home, 0700) < 0) {
            lz_err("run: cannot keep the journals in %s: %s", o.journal_dir, strlen(jd) >= sizeof job.journal_dir ? "the name is too long"
                   : errno ? strerror(errno) : "not a directory");
            free(jd);
            return 1;
        }
        snprintf(job.journal_dir, sizeof job.journal_dir, "%s", jd);
        free(jd);
    }
    /* the remote store answers, the bucket exists and we may list it: before the job starts */
    struct flusher *fl = flusher_start(dir, &job, why, sizeof why);
    if (!fl && *why) {
        lz_err("run: the remote store %s: %s%s", job.remote, why, stream ? "; nothing was started" : "");
        if (spool_made) { /* what this run made of the spool goes too */
            char *parent = lz_xstrdup(dir), *slash = strrchr(parent, '/');
            if (slash && slash != parent) {
                *slash = 0;
                int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (pfd >= 0) { lz_remove_tree(pfd, slash + 1); close(pfd); }
            }
            free(parent);
        }
        return LZ_EXIT_REMOTE;
    }
    if (stream) log_info("checkpoints to %s pass through %s (the fallback: what is published leaves it)", job.remote, o.dir);
    if (fl && !*job.journal_dir)
        lz_warn("the journal of the job's changes to its files stays in %s on this machine: a restart from %s elsewhere cannot "
                "roll them back (--journal-dir DIR on the file system of the job's files keeps it there)", o.dir, o.remote);
    if (lz_job_write(dir, &job) < 0) { lz_err("cannot write %s/%s: %s", o.dir, LZ_JOBFILE, strerror(errno)); return 1; }

    /* read by the runtime at its start; a restarted process keeps it in its memory */
    if (o.compact) setenv("LAZARUS_COMPACT", "1", 1);
    else unsetenv("LAZARUS_COMPACT");
    if (stream) setenv("LAZARUS_SPOOL", "1", 1);
    else unsetenv("LAZARUS_SPOOL");
    if (run_user_env(&o) < 0) return 2;
    struct supervisor s;
    int child_ctl = supervisor_prepare(&s, dir, o.dir, lock, &job, 1);
    if (child_ctl < 0) return 1;
    sigset_t held; /* a signal for the program while the lines below are written waits for supervise() */
    supervisor_block_signals(&held);
    s.flusher = fl;
    /* the file systems first: the program finds its files through them */
    if (*job.fs && fs_start_all(&s, job.fs, 0, why, sizeof why) < 0) {
        lz_err("run: %s; nothing was started", why);
        close(child_ctl);
        char sock[LZ_PATH_MAX + 16];
        snprintf(sock, sizeof sock, "%s/%s", dir, LZ_CTLSOCK);
        unlink(sock);
        return 1;
    }
    fs_exclude(&s);
    if (job.files_only) return fs_files_only_run(&s, child_ctl, argv + first, &job);
    s.child = s.prog = spawn_program(&s, child_ctl, argv + first);
    close(child_ctl);
    if (s.child < 0) { lz_err("fork: %s", strerror(errno)); return 1; }
    /* one line even without a terminal: a batch job's log says where its checkpoints go */
    struct log_kv kv[] = {LOG_NUM("pid", s.child), LOG_STR("command", job.command), LOG_STR("dir", dir),
                          LOG_NUM("interval", job.interval)};
    char every[64] = "on request";
    if (job.interval) snprintf(every, sizeof every, "every %" PRIu64 " s", job.interval);
    log_event(LOG_INFO, "started", kv, 4, "job started (pid %d), checkpoints %s in %s", (int)s.child, every,
              stream ? job.remote : dir);
    return supervise(&s);
}
