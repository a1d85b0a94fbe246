/* The job's supervisor: `lazarus run` and `lazarus restart` stay in the
 * foreground as this loop.  It triggers checkpoints (interval, `lazarus
 * checkpoint`, the C API) by sigqueue()ing the runtime's signal with the
 * index, hears back on the control socket, applies retention once a
 * checkpoint is durable, forwards signals, and exits as the program did. */
#include "cli.h"
#include <sys/stat.h>
#include "util.h"
#include "store_admin.h"
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#define LZ_SIGCKPT SIGURG
#define MAX_CLIENTS 32
#define BEGIN_TIMEOUT_NS (10ull * 1000000000ull)

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGALRM};

struct sv_state {
    struct supervisor *s;
    int runtime_ready;
    int in_progress;
    uint64_t index;
    uint32_t trigger;
    int begun;
    uint64_t requested_ns;
    int clients[MAX_CLIENTS]; /* waiting for the checkpoint in progress */
    int nclients;
    int pending[MAX_CLIENTS]; /* connected, request not read yet */
    int npending;
    int api_queued;
    int deferred; /* a checkpoint was asked for while the restart was restoring */
    int have_status, status;
    int child_gone, child_status;
    uint64_t restore_started_ns;
    int restore_msg_shown;
    uint64_t beat_ns;
    int writer_fd;        /* the forked writer's report pipe, -1 = none */
    char unckpt[600];     /* the program exec'd one Lazarus cannot checkpoint: why ("" = none) */
    char writer_msg[1200];
    size_t writer_len;
};

static void reply(int fd, const char *msg)
{
    send(fd, msg, strlen(msg), MSG_NOSIGNAL);
    close(fd);
}

static void finish_clients(struct sv_state *st, const char *msg)
{
    for (int i = 0; i < st->nclients; i++) reply(st->clients[i], msg);
    st->nclients = 0;
}

static pid_t find_program(struct supervisor *s)
{
    if (s->prog) return s->prog;
    /* In a PID namespace the program is the init's child. */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", s->child, s->child);
    size_t len;
    char *buf = lz_read_file(path, &len);
    if (buf) {
        buf[len ? len - 1 : 0] = 0;
        int pid = atoi(buf);
        free(buf);
        if (pid > 0) s->prog = pid;
    }
    return s->prog;
}

static void request(struct sv_state *st, uint32_t trigger, int client)
{
    struct supervisor *s = st->s;
    if (st->in_progress) { /* never two at once: join the one under way */
        if (client >= 0 && st->nclients < MAX_CLIENTS) st->clients[st->nclients++] = client;
        else if (client >= 0) reply(client, "ERR too many waiting clients");
        if (trigger == LZ_TRIG_API) st->api_queued = 1;
        return;
    }
    if (s->restoring && !st->child_gone) {
        if (trigger == LZ_TRIG_INTERVAL) return; /* the next tick will do */
        /* taken as soon as the restored program is back */
        if (client >= 0 && st->nclients < MAX_CLIENTS) st->clients[st->nclients++] = client;
        else if (client >= 0) reply(client, "ERR too many waiting clients");
        st->deferred = 1;
        return;
    }
    if (st->unckpt[0] && !st->child_gone) {
        if (client >= 0) {
            char msg[700];
            snprintf(msg, sizeof msg, "ERR the program now runs %s: it cannot be checkpointed", st->unckpt);
            reply(client, msg);
        }
        return;
    }
    if (!st->runtime_ready || st->child_gone) {
        if (client >= 0)
            reply(client, "ERR the program is not running under the Lazarus runtime (is it statically linked, or did it exec a program that is?)");
        return;
    }
    pid_t prog = find_program(s);
    union sigval v;
    v.sival_ptr = (void *)(uintptr_t)((s->next_index << 2) | trigger);
    if (prog <= 0 || sigqueue(prog, LZ_SIGCKPT, v) < 0) {
        if (client >= 0) reply(client, "ERR cannot signal the program");
        return;
    }
    st->in_progress = 1;
    st->begun = 0;
    st->index = s->next_index++;
    st->trigger = trigger;
    st->requested_ns = lz_now_ns(CLOCK_MONOTONIC);
    if (client >= 0) st->clients[st->nclients++] = client;
}

static void on_runtime_message(struct sv_state *st, char *msg)
{
    struct supervisor *s = st->s;
    char out[1200];
    if (!strncmp(msg, "HELLO", 5)) {
        st->runtime_ready = 1;
        st->unckpt[0] = 0; /* an exec'd program with the runtime */
    } else if (!strncmp(msg, "UNCHECKPOINTABLE ", 17)) {
        snprintf(st->unckpt, sizeof st->unckpt, "%s", msg + 17);
    } else if (!strncmp(msg, "CHECKPOINTABLE", 14)) {
        st->unckpt[0] = 0;
    } else if (!strncmp(msg, "RESTORED", 8)) {
        /* the program is back from N: what came after N is an abandoned branch
         * (a rollback of files already removed it; with none to roll back it
         * waited for this, so that a failed restart changes nothing) */
        lz_store_drop_branch(s->dir, s->restore_index, s->first_index);
        struct lz_job job;
        if (lz_job_read(s->dir, &job) == 0 && job.next_index < s->first_index) {
            job.next_index = s->first_index; /* indices are never given twice */
            lz_job_write(s->dir, &job);
        }
        st->runtime_ready = 1;
        s->restoring = 0;
        if (st->restore_msg_shown) lz_err("restarted from checkpoint %" PRIu64, s->restore_index);
        if (st->deferred) {
            st->deferred = 0;
            request(st, LZ_TRIG_REQUEST, -1); /* for the clients already waiting */
        }
    } else if (!strncmp(msg, "FORKED", 6)) {
        /* the writer's pipe came with it (recv_message) */
    } else if (!strncmp(msg, "BEGIN", 5)) {
        st->begun = 1;
    } else if (!strncmp(msg, "API", 3)) {
        request(st, LZ_TRIG_API, -1);
    } else if (!strncmp(msg, "OK ", 3)) {
        /* OK index pause memory changed stored durable threads */
        uint64_t f[7] = {0};
        char *p = msg + 3;
        for (int i = 0; i < 7 && *p; i++) f[i] = strtoull(p, &p, 10);
        uint64_t idx = f[0];
        st->in_progress = 0;
        lz_store_retain(s->dir, s->keep, idx, s->first_index);
        snprintf(out, sizeof out, "OK %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, idx, f[1], f[4], (uint64_t)1, f[6]);
        finish_clients(st, out);
    } else if (!strncmp(msg, "ERR ", 4)) {
        char *p = msg + 4;
        uint64_t idx = strtoull(p, &p, 10);
        while (*p == ' ') p++;
        st->in_progress = 0;
        lz_store_cleanup_tmp(s->dir); /* its file journal is kept as jrnl.N */
        struct lz_job job;
        if (lz_job_read(s->dir, &job) == 0) {
            job.failed_index = idx;
            job.failed_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
            snprintf(job.failed_why, sizeof job.failed_why, "%s", p);
            lz_job_write(s->dir, &job);
        }
        lz_err("checkpoint %" PRIu64 " failed: %s; the program keeps running", idx, p);
        snprintf(out, sizeof out, "ERR checkpoint %" PRIu64 " failed: %s", idx, p);
        finish_clients(st, out);
    }
    if (!st->in_progress && st->api_queued) {
        st->api_queued = 0;
        request(st, LZ_TRIG_API, -1);
    }
}

/* One datagram from the runtime; a FORKED one carries the writer's pipe. */
static ssize_t recv_message(struct sv_state *st, char *msg, size_t cap)
{
    struct iovec iov = {msg, cap - 1};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = c.buf;
    mh.msg_controllen = sizeof c.buf;
    ssize_t m = recvmsg(st->s->ctl_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (m <= 0) return m;
    msg[m] = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
        int fd;
        memcpy(&fd, CMSG_DATA(cm), sizeof fd);
        if (!strncmp(msg, "FORKED", 6) && st->writer_fd < 0) {
            st->writer_fd = fd;
            st->writer_len = 0;
            fcntl(fd, F_SETFL, O_NONBLOCK);
        } else {
            close(fd);
        }
    }
    return m;
}

/* The writer said how it ended, or ended without saying (killed): then the
 * checkpoint counts if its rename happened, and is torn otherwise. */
static void on_writer(struct sv_state *st)
{
    for (;;) {
        ssize_t r = read(st->writer_fd, st->writer_msg + st->writer_len, sizeof st->writer_msg - 1 - st->writer_len);
        if (r > 0) { st->writer_len += (size_t)r; continue; }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && errno == EAGAIN) return;
        break; /* end of file: the writer is gone */
    }
    close(st->writer_fd);
    st->writer_fd = -1;
    st->writer_msg[st->writer_len] = 0;
    if (st->writer_len) { on_runtime_message(st, st->writer_msg); return; }
    char ck[LZ_PATH_MAX + 64], msg[200];
    lz_ckpt_path(ck, sizeof ck, st->s->dir, st->index);
    if (access(ck, F_OK) == 0) {
        lz_fsync_dir(st->s->dir);
        snprintf(msg, sizeof msg, "OK %" PRIu64, st->index);
    } else {
        snprintf(msg, sizeof msg, "ERR %" PRIu64 " the checkpoint writer ended before the checkpoint was durable (killed?)", st->index);
    }
    on_runtime_message(st, msg);
}

static int exit_code_of(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

int supervise(struct supervisor *s)
{
    struct sv_state st;
    memset(&st, 0, sizeof st);
    st.s = s;
    st.writer_fd = -1;
    st.restore_started_ns = lz_now_ns(CLOCK_MONOTONIC);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) sigaddset(&mask, forwarded[i]);
    sigaddset(&mask, SIGPIPE);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    int tfd = -1;
    if (s->interval) {
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec its = {{(time_t)s->interval, 0}, {(time_t)s->interval, 0}};
        timerfd_settime(tfd, 0, &its, NULL);
    }
    int program_done = 0, code = 0;
    while (!program_done) {
        struct pollfd pf[6 + MAX_CLIENTS];
        int n = 0;
        pf[n++] = (struct pollfd){sfd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->ctl_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->listen_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){tfd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->status_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){st.writer_fd, POLLIN, 0};
        for (int i = 0; i < st.npending; i++) pf[n++] = (struct pollfd){st.pending[i], POLLIN, 0};
        int r = poll(pf, (nfds_t)n, 250);
        if (r < 0 && errno != EINTR) { lz_err("supervisor: poll: %s", strerror(errno)); break; }
        uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
        /* heartbeat: if we die with the job, `restart` knows from the lock
         * file's time since when changes to its files are someone else's */
        if (now - st.beat_ns > 1000000000ull) { futimens(s->lock_fd, NULL); st.beat_ns = now; }
        if (st.in_progress && !st.begun && now - st.requested_ns > BEGIN_TIMEOUT_NS) {
            st.in_progress = 0;
            s->next_index--;
            finish_clients(&st, "ERR the program did not respond to the checkpoint request within 10 s "
                                "(it may block the signal, or run without the Lazarus runtime)");
        }
        /* progress for a person watching; scripts get only results and errors */
        if (s->restoring && !st.restore_msg_shown && now - st.restore_started_ns > 1000000000ull && isatty(2)) {
            lz_err("restoring checkpoint %" PRIu64 "...", s->restore_index);
            st.restore_msg_shown = 1;
        }
        if (r <= 0) continue;
        if (pf[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD || sig == SIGPIPE) continue;
                /* Terminal-generated signals already reach the program (same process group). */
                if (si.ssi_code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT || sig == SIGWINCH || sig == SIGHUP)) continue;
                pid_t prog = find_program(s);
                if (prog > 0) kill(prog, sig);
            }
        }
        /* reap: we are a subreaper, so orphans of the job come to us too */
        for (;;) {
            int status;
            pid_t w = waitpid(-1, &status, WNOHANG);
            if (w <= 0) break;
            if (w == s->child) {
                st.child_gone = 1;
                st.child_status = status;
            }
        }
        /* In a PID namespace the init reports the program's status, then exits;
         * read the pipe once the init is gone so the report is never missed. */
        if (s->status_fd >= 0 && (st.child_gone || (pf[4].revents & (POLLIN | POLLHUP)))) {
            int status;
            if (read(s->status_fd, &status, sizeof status) == sizeof status) { st.have_status = 1; st.status = status; }
            close(s->status_fd);
            s->status_fd = -1;
        }
        if (st.child_gone && s->status_fd < 0 && !st.have_status) {
            st.have_status = 1;
            st.status = st.child_status;
        }
        if (pf[1].revents & POLLIN) {
            char msg[1200];
            ssize_t m;
            while ((m = recv_message(&st, msg, sizeof msg)) > 0) on_runtime_message(&st, msg);
        }
        if (st.writer_fd >= 0 && (pf[5].revents & (POLLIN | POLLHUP | POLLERR))) on_writer(&st);
        if (tfd >= 0 && (pf[3].revents & POLLIN)) {
            uint64_t ticks;
            if (read(tfd, &ticks, sizeof ticks) > 0 && !st.in_progress) request(&st, LZ_TRIG_INTERVAL, -1);
        }
        if (pf[2].revents & POLLIN) {
            int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
            if (c >= 0 && st.npending < MAX_CLIENTS) st.pending[st.npending++] = c;
            else if (c >= 0) reply(c, "ERR too many clients");
        }
        for (int i = 6; i < n; i++) {
            if (!pf[i].revents) continue;
            int c = pf[i].fd;
            for (int k = 0; k < st.npending; k++) if (st.pending[k] == c) st.pending[k] = st.pending[--st.npending];
            char req[64];
            ssize_t m = recv(c, req, sizeof req - 1, MSG_DONTWAIT);
            if (m > 0 && !strncmp(req, "CHECKPOINT", 10)) request(&st, LZ_TRIG_REQUEST, c);
            else close(c);
        }
        if (st.child_gone && (st.have_status || s->status_fd < 0)) {
            /* drain what the runtime said last (a checkpoint may have committed) */
            char msg[1200];
            ssize_t m;
            while ((m = recv_message(&st, msg, sizeof msg)) > 0) on_runtime_message(&st, msg);
            program_done = 1;
        }
    }
    /* a checkpoint being written when the program ended still commits or not */
    if (st.writer_fd >= 0) {
        fcntl(st.writer_fd, F_SETFL, 0);
        on_writer(&st);
    }
    if (st.in_progress) lz_store_cleanup_tmp(s->dir);
    finish_clients(&st, "ERR the program ended before the checkpoint was complete");
    for (int i = 0; i < st.npending; i++) close(st.pending[i]);
    char sock[LZ_PATH_MAX + 16];
    snprintf(sock, sizeof sock, "%s/%s", s->dir, LZ_CTLSOCK);
    unlink(sock);
    struct lz_job job;
    lz_job_read(s->dir, &job);
    if (s->restoring) {
        /* the restorer failed (it said why) or was killed: nothing changed */
        code = st.have_status && WIFEXITED(st.status) && WEXITSTATUS(st.status) ? WEXITSTATUS(st.status) : 1;
        if (!st.have_status || !WIFEXITED(st.status)) lz_err("restart of checkpoint %" PRIu64 " did not complete", s->restore_index);
        snprintf(job.state, sizeof job.state, "stopped");
        lz_job_write(s->dir, &job);
        lz_store_drop_spares(s->dir);
        return code ? code : 1;
    }
    /* From now on a change to the job's files is someone else's.  File times
     * come from the coarse clock (one tick behind): wait until it has passed
     * this instant, so every later change is dated after it. */
    job.stopped_ns = (int64_t)lz_now_ns(CLOCK_REALTIME);
    while ((int64_t)lz_now_ns(CLOCK_REALTIME_COARSE) <= job.stopped_ns) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    code = st.have_status ? exit_code_of(st.status) : 1;
    snprintf(job.state, sizeof job.state, "%s", st.have_status && WIFEXITED(st.status) ? "finished" : "stopped");
    job.exit_status = code;
    lz_job_write(s->dir, &job);
    lz_store_drop_spares(s->dir);
    return code;
}
