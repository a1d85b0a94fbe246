/* A files-only job (run --files-only --fs PATH): no runtime in the program,
 * no memory checkpoints.  A checkpoint is a commit of the files under PATH:
 * the daemons close their interval into ckpt.N (whose own journal is an
 * empty sealed log: no process of the job records), and nothing else is in
 * it.  Commit 1 is taken before the program starts, so everything it does
 * can be undone.  A restart rolls the files back to a commit and runs the
 * program again from its beginning, with the argv, environment and
 * directory `run` recorded in DIR/files-only.cmd. */
#include "fs_job.h"
#include "exit_codes.h"
#include "jobid.h"
#include "log_out.h"
#include "rollback.h"
#include "store_admin.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FO_CMD "files-only.cmd"
extern char **environ;

/* ---------------------------------------------------------------- the program's command */

/* cwd, then argc words, then the environment: NUL-terminated strings after
 * a line "LZFO1 <argc> <envc>\n" */
static int save_command(const char *dir, char **argv)
{
    char path[LZ_PATH_MAX + 32], tmp[LZ_PATH_MAX + 40], cwd[LZ_PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    int argc = 0, envc = 0;
    while (argv[argc]) argc++;
    while (environ[envc]) envc++;
    snprintf(path, sizeof path, "%s/" FO_CMD, dir);
    snprintf(tmp, sizeof tmp, "%s/" FO_CMD ".new", dir);
    FILE *f = fopen(tmp, "we");
    if (!f) return -1;
    fprintf(f, "LZFO1 %d %d\n", argc, envc);
    fwrite(cwd, 1, strlen(cwd) + 1, f);
    for (int i = 0; i < argc; i++) fwrite(argv[i], 1, strlen(argv[i]) + 1, f);
    for (int i = 0; i < envc; i++) fwrite(environ[i], 1, strlen(environ[i]) + 1, f);
    int bad = ferror(f) | (fflush(f) != 0) | (fsync(fileno(f)) != 0);
    if (fclose(f) != 0 || bad || rename(tmp, path) < 0) { unlink(tmp); return -1; }
    return 0;
}

struct fo_cmd {
    char *buf;
    char *cwd;
    char **argv, **envp;
};

static int load_command(const char *dir, struct fo_cmd *c)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" FO_CMD, dir);
    size_t len;
    c->buf = lz_read_file(path, &len);
    if (!c->buf) return -1;
    int argc, envc, hl;
    if (sscanf(c->buf, "LZFO1 %d %d\n%n", &argc, &envc, &hl) != 2 || argc < 1 || envc < 0) { errno = EBADMSG; return -1; }
    c->argv = calloc((size_t)argc + 1, sizeof *c->argv);
    c->envp = calloc((size_t)envc + 1, sizeof *c->envp);
    char *p = c->buf + hl, *end = c->buf + len;
    int need = 1 + argc + envc;
    for (int i = 0; i < need; i++) {
        char *z = p < end ? memchr(p, 0, (size_t)(end - p)) : NULL;
        if (!z) { errno = EBADMSG; return -1; }
        if (i == 0) c->cwd = p;
        else if (i <= argc) c->argv[i - 1] = p;
        else c->envp[i - 1 - argc] = p;
        p = z + 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- a commit */

static int commit(struct supervisor *s, char *why, size_t whylen)
{
    uint64_t index = s->next_index;
    char root[LZ_PATH_MAX + 64], ck[LZ_PATH_MAX + 64];
    snprintf(root, sizeof root, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", s->dir, index, (int)getpid());
    if (mkdir(root, 0700) < 0 || fj_write_empty_log(root, s->job_id, index, (int32_t)getpid()) < 0) {
        snprintf(why, whylen, "cannot make %s: %s", root, strerror(errno));
        lz_store_cleanup_tmp(s->dir);
        return -1;
    }
    s->next_index++; /* never given again, even if this one fails */
    char mark[LZ_PATH_MAX + 96], t[32];
    snprintf(mark, sizeof mark, "%s/" LZ_FILES_ONLY, root);
    int tl = snprintf(t, sizeof t, "%" PRIu64 "\n", lz_now_ns(CLOCK_REALTIME));
    int mfd = open(mark, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (mfd < 0 || lz_write_all(mfd, t, (size_t)tl) < 0 || fsync(mfd) < 0) {
        snprintf(why, whylen, "cannot write %s: %s", mark, strerror(errno));
        if (mfd >= 0) close(mfd);
        lz_store_cleanup_tmp(s->dir);
        return -1;
    }
    close(mfd);
    int rc = fs_close_all(s, index, why, whylen);
    if (rc == 0) rc = fs_gather_all(s, index, root, why, whylen);
    lz_ckpt_path(ck, sizeof ck, s->dir, index);
    if (rc == 0 && (lz_fsync_dir(root) < 0 || renameat2(AT_FDCWD, root, AT_FDCWD, ck, RENAME_NOREPLACE) < 0)) {
        snprintf(why, whylen, "cannot commit checkpoint %" PRIu64 ": %s", index, strerror(errno));
        rc = -1;
    }
    if (rc < 0) { lz_store_cleanup_tmp(s->dir); return -1; }
    lz_fsync_dir(s->dir);
    fs_apply_all(s, index); /* buffer mode: the held data reaches the files */
    struct lz_job job;
    if (lz_job_read(s->dir, &job) == 0) {
        job.next_index = s->next_index;
        lz_job_write(s->dir, &job);
    }
    lz_store_retain_but(s->dir, s->keep, index, s->first_index, NULL, 0);
    struct log_kv kv[] = {LOG_NUM("index", index)};
    log_event(LOG_EVENT, "checkpoint", kv, 1, "checkpoint %" PRIu64 " taken: the files committed", index);
    return (int)index;
}

/* ---------------------------------------------------------------- the loop */

static pid_t spawn(struct supervisor *s, char **argv, char **envp, const char *cwd)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() == 1) _exit(137);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (envp) environ = envp;
    if (cwd && chdir(cwd) < 0) { lz_err("cannot go to %s: %s", cwd, strerror(errno)); _exit(127); }
    char id[33];
    lz_job_id_text(id, s->job_id);
    setenv("LAZARUS_DIR", s->dir, 1);
    setenv("LAZARUS_JOB", id, 1);
    execvp(argv[0], argv);
    lz_err("cannot run %s: %s", argv[0], strerror(errno));
    _exit(127);
}

static int loop(struct supervisor *s, char **argv, char **envp, const char *cwd)
{
    sigset_t mask;
    sigemptyset(&mask);
    int fwd[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGPIPE);
    for (size_t i = 0; i < sizeof fwd / sizeof fwd[0]; i++) sigaddset(&mask, fwd[i]);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    int tfd = -1;
    if (s->interval) {
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec its = {{(time_t)s->interval, 0}, {(time_t)s->interval, 0}};
        timerfd_settime(tfd, 0, &its, NULL);
    }
    char why[4400];
    /* commit 1 (or the restart's next): the state the program starts from */
    if (commit(s, why, sizeof why) < 0) {
        lz_err("cannot commit the files before the program starts: %s; nothing was started", why);
        fs_stop_all(s);
        return 1;
    }
    s->child = s->prog = spawn(s, argv, envp, cwd);
    if (s->child < 0) { lz_err("fork: %s", strerror(errno)); fs_stop_all(s); return 1; }
    struct log_kv kv[] = {LOG_NUM("pid", s->child), LOG_STR("dir", s->dir)};
    log_event(LOG_EVENT, "started", kv, 2, "started %s (pid %d), files-only, commits in %s", argv[0], (int)s->child, s->dir);
    sv_beat_start(s->lock_fd);
    int status = 0, done = 0;
    while (!done) {
        struct pollfd pf[3] = {{sfd, POLLIN, 0}, {s->listen_fd, POLLIN, 0}, {tfd, POLLIN, 0}};
        int r = poll(pf, 3, 500);
        if (r < 0 && errno != EINTR) break;
        struct signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) == sizeof si)
            if (si.ssi_signo != SIGCHLD && si.ssi_signo != SIGPIPE && s->child > 0) kill(s->child, (int)si.ssi_signo);
        for (;;) {
            int st;
            pid_t w = waitpid(-1, &st, WNOHANG);
            if (w <= 0) break;
            if (w == s->child) { status = st; done = 1; }
            else fs_reaped(s, w, st);
        }
        if (done) break;
        int want = tfd >= 0 && (pf[2].revents & POLLIN);
        if (want) { uint64_t t; if (read(tfd, &t, sizeof t) < 0) want = 0; }
        int client = -1;
        if (pf[1].revents & POLLIN) {
            client = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            char req[64];
            struct pollfd cp = {client, POLLIN, 0};
            ssize_t m = client >= 0 && poll(&cp, 1, 1000) > 0 ? recv(client, req, sizeof req - 1, 0) : -1;
            if (m > 0 && !strncmp(req, "CHECKPOINT", 10)) want = 1;
            else if (m > 0 && !strncmp(req, "ABORT", 5)) { /* lazarus_tx_abort */
                sv_reply(client, "ERR abort of a files-only job is not done yet: the files stay as they are until the "
                                 "next commit, and a restart brings back the last one");
                close(client);
                client = -1;
            } else if (client >= 0) { close(client); client = -1; }
        }
        if (!want) continue;
        int gone = s->fs_failed;
        int idx = gone ? -1 : commit(s, why, sizeof why);
        if (gone) snprintf(why, sizeof why, "the job's file system is gone");
        char out[4500];
        if (idx < 0 && s->fs_failed) {
            snprintf(out, sizeof out, "ERR %s", why); /* said once already: the job ends */
        } else if (idx < 0) {
            struct log_kv k2[] = {LOG_STR("reason", why)};
            log_event(LOG_ERROR, "checkpoint_failed", k2, 1, "checkpoint failed: %s", why);
            snprintf(out, sizeof out, "ERR %s", why);
        } else {
            snprintf(out, sizeof out, "OK %d 0 0 0 0", idx);
        }
        if (client >= 0) { sv_reply(client, out); close(client); }
    }
    /* buffer mode: a program that ended by itself committed its last writes */
    if (done && WIFEXITED(status) && !s->fs_failed) fs_finish_all(s);
    /* the mounts go with the program (what the kernel still caches reaches the files first) */
    fs_stop_all(s);
    sv_beat_stop();
    lz_store_drop_spares(s->dir); /* the maps of saved blocks (files.saved.N) */
    char sock[LZ_PATH_MAX + 16];
    snprintf(sock, sizeof sock, "%s/%s", s->dir, LZ_CTLSOCK);
    unlink(sock);
    struct lz_job job;
    if (lz_job_read(s->dir, &job) < 0) { lz_err("cannot read %s/%s", s->dir, LZ_JOBFILE); return 1; }
    job.stopped_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
    while ((int64_t)lz_now_ns(CLOCK_REALTIME_COARSE) <= job.stopped_ns) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (s->fs_failed && code == 0) code = LZ_EXIT_FAIL;
    if (WIFSIGNALED(status) && !s->fs_failed) lz_err("the program was killed by signal %d", WTERMSIG(status));
    snprintf(job.state, sizeof job.state, "%s", WIFEXITED(status) && !s->fs_failed ? "finished" : "stopped");
    job.exit_status = code;
    job.next_index = s->next_index;
    job.rolling_to = -1;
    lz_job_write(s->dir, &job);
    return code;
}

int fs_files_only_run(struct supervisor *s, int child_ctl, char **argv, const struct lz_job *job)
{
    (void)job;
    close(child_ctl); /* no runtime: nothing on the other end */
    s->files_only = 1;
    if (save_command(s->dir, argv) < 0) {
        lz_err("cannot record the program's command in %s: %s; nothing was started", s->dir, strerror(errno));
        fs_stop_all(s);
        return 1;
    }
    return loop(s, argv, NULL, NULL);
}

int fs_files_only_restart(struct supervisor *s, int child_ctl, const struct lz_job *job)
{
    close(child_ctl);
    struct fo_cmd c;
    memset(&c, 0, sizeof c);
    if (load_command(s->dir, &c) < 0) {
        lz_err("cannot restart: cannot read %s/" FO_CMD ": %s", s->dir, strerror(errno));
        return 1;
    }
    s->files_only = 1;
    char why[4400];
    /* a new interval from a new commit (the files are at N: it holds N's state) */
    if (fs_start_all(s, job->fs, 0, why, sizeof why) < 0) { lz_err("cannot restart: %s", why); return 1; }
    return loop(s, c.argv, c.envp, c.cwd);
}

void fs_exclude(struct supervisor *s)
{
    for (int i = 0; i < s->nfs; i++) {
        size_t have = strlen(s->excludes);
        snprintf(s->excludes + have, sizeof s->excludes - have, "%s%s", have ? "\n" : "", s->fs[i].path);
    }
}
