/* The job's supervisor: `lazarus run` and `lazarus restart` stay in the
 * foreground as this loop.  It triggers checkpoints (interval, `lazarus
 * checkpoint`, the C API) by sigqueue()ing the runtime's signal with the
 * index, hears back on the control socket, applies retention once a
 * checkpoint is durable, forwards signals, and exits as the program did. */
#include "sv.h"
#include "fs_job.h"
#include "remote_store.h"
#include "lazy.h"
#include <sys/stat.h>
#include <stdarg.h>
#include "util.h"
#include "batch.h"
#include "store_admin.h"
#include "exit_codes.h"
#include "log_out.h"
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

#define MAX_MEMBERS LZ_MAX_PROCS
/* The loop wakes at least this often: often while a checkpoint is under way
 * (its phases, signals again), rarely otherwise. */
#define TICK_BUSY_MS 20
#define TICK_IDLE_MS 250
/* How long a restore runs before a person at the terminal is told about it. */
#define RESTORE_MSG_NS 1000000000ull
/* ABORT on DIR/ctl.sock (lazarus_tx_abort): the files back to the last
 * commit while the program runs on.  The runtime's journal undoes an
 * interval only with the program's memory (a restart); a files-only job
 * under Lazarus' file system (`run --files-only --fs`) is what can do it. */
#define SV_ABORT_REFUSED "abort needs a files-only job with --fs (lazarus run --files-only --fs PATH): " \
                         "this job's files go back to a commit only with a restart (lazarus restart)"

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGALRM};

void sv_reply(int fd, const char *msg)
{
    send(fd, msg, strlen(msg), MSG_NOSIGNAL);
    close(fd);
}

void sv_finish_clients(struct sv_state *st, const char *msg)
{
    for (int i = 0; i < st->nclients; i++) sv_reply(st->clients[i], msg);
    st->nclients = 0;
}

void sv_tell(struct sv_state *st, pid_t pid, const char *fmt, ...)
{
    char msg[1024]; /* an ABORT carries the reason, for the C API's lazarus_strerror() */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof msg) n = sizeof msg - 1;
    int chan = pid == sv_find_program(st->s) ? st->s->ctl_fd : -1;
    for (size_t i = 0; i < st->nmembers && chan < 0; i++)
        if (st->members[i].pid == pid) chan = st->members[i].chan;
    if (chan >= 0) send(chan, msg, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* A process of the job and its channel (the main program's is the one we made). */
static void add_member(struct sv_state *st, pid_t pid, int chan)
{
    for (size_t i = 0; i < st->nmembers; i++)
        if (st->members[i].pid == pid) { /* it exec'd and joined again, or a PID reused */
            if (st->members[i].chan != st->s->ctl_fd) close(st->members[i].chan);
            st->members[i].chan = chan;
            return;
        }
    if (st->nmembers == MAX_MEMBERS) { close(chan); return; }
    if (st->nmembers == st->members_cap) {
        size_t cap = st->members_cap ? st->members_cap * 2 : 16;
        struct member *nm = realloc(st->members, cap * sizeof *nm);
        if (!nm) { close(chan); return; }
        st->members = nm;
        st->members_cap = cap;
    }
    st->members[st->nmembers++] = (struct member){pid, chan};
}

static void drop_member(struct sv_state *st, size_t i)
{
    if (st->members[i].chan != st->s->ctl_fd) close(st->members[i].chan);
    st->members[i] = st->members[--st->nmembers];
}

pid_t sv_find_program(struct supervisor *s)
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
        else if (client >= 0) sv_reply(client, "ERR too many waiting clients");
        if (trigger == LZ_TRIG_API) st->api_queued = 1;
        return;
    }
    if ((s->restoring || s->lazy_pid > 0) && !st->child_gone) {
        /* (restart --lazy: taken once every page is in, lazy_ended) */
        if (trigger == LZ_TRIG_INTERVAL) return; /* the next tick will do */
        /* taken as soon as the restored program is back */
        if (client >= 0 && st->nclients < MAX_CLIENTS) st->clients[st->nclients++] = client;
        else if (client >= 0) sv_reply(client, "ERR too many waiting clients");
        /* a restored child may ask through the C API before the main program
         * says RESTORED: its caller waits for a checkpoint of that trigger */
        st->deferred = trigger == LZ_TRIG_API || st->deferred == 2 ? 2 : 1;
        return;
    }
    if (st->unckpt[0] && !st->child_gone) {
        if (client >= 0) {
            char msg[700];
            snprintf(msg, sizeof msg, "ERR the program now runs %s: it cannot be checkpointed", st->unckpt);
            sv_reply(client, msg);
        }
        return;
    }
    if (!st->runtime_ready || st->child_gone) {
        if (client >= 0)
            sv_reply(client, "ERR the program is not running under the Lazarus runtime (is it statically linked, or did it exec a program that is?)");
        return;
    }
    char why[300], msg[320];
    if (job_ckpt_start(st, trigger, why, sizeof why) < 0) {
        snprintf(msg, sizeof msg, "ERR %s", why);
        if (client >= 0) sv_reply(client, msg);
        return;
    }
    if (client >= 0) st->clients[st->nclients++] = client;
}

/* restart --lazy: the fault server ended.  Done (0): every page is in, our
 * copy of the userfaultfd goes, and a checkpoint asked for meanwhile is
 * taken.  Otherwise it failed (it said why) or was killed: the job cannot
 * run on without its memory, and is killed before our copy goes (so that no
 * page it misses ever reads as zeros; the store was only read). */
static void lazy_ended(struct sv_state *st, int status)
{
    struct supervisor *s = st->s;
    s->lazy_pid = 0;
    if (s->lazy_hup >= 0) { close(s->lazy_hup); s->lazy_hup = -1; }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        if (s->lazy_fd >= 0) { close(s->lazy_fd); s->lazy_fd = -1; }
        if (st->deferred && !s->restoring) {
            uint32_t trigger = st->deferred == 2 ? LZ_TRIG_API : LZ_TRIG_REQUEST;
            st->deferred = 0;
            request(st, trigger, -1);
        }
        return;
    }
    if (!st->child_gone) {
        if (!WIFEXITED(status))
            lz_err("the lazy restart's fault server was killed (signal %d) before every page of checkpoint %" PRIu64
                   " was in; the job was stopped", WTERMSIG(status), s->restore_index);
        kill(s->child, SIGKILL);
    }
    st->lazy_failed = 1;
    /* our copy of the userfaultfd stays until the job is gone */
}

/* What a restart did, in one line whether or not a person watches. */
static void restarted_line(const struct supervisor *s, pid_t pid)
{
    char taken[40];
    utc_text(taken, sizeof taken, s->restore_taken_ns);
    struct log_kv kv[] = {LOG_NUM("index", s->restore_index), LOG_STR("taken", taken),
                          LOG_NUM("files_rolled_back", s->restore_files), LOG_NUM("pid", pid)};
    log_event(LOG_INFO, "restarted", kv, 4, "restarted from checkpoint %" PRIu64 " taken at %s: %" PRIu64 " file%s rolled back, "
              "program resumed", s->restore_index, taken, s->restore_files, s->restore_files == 1 ? "" : "s");
}

/* How the program ended: on a plain stderr too after a `run` (with the
 * checkpoints it took), for the log only after a restart (whose own line said
 * what it did). */
static void exited_line(const struct supervisor *s, int status)
{
    enum log_level lvl = s->restore_index ? LOG_EVENT : LOG_INFO;
    const char *pl = s->taken == 1 ? "" : "s";
    if (WIFSIGNALED(status)) {
        struct log_kv kv[] = {LOG_NUM("status", 128 + WTERMSIG(status)), LOG_NUM("signal", WTERMSIG(status)),
                              LOG_NUM("checkpoints", s->taken)};
        log_event(lvl, "exited", kv, 3, "program killed by signal %d (exit status %d) after %" PRIu64 " checkpoint%s",
                  WTERMSIG(status), 128 + WTERMSIG(status), s->taken, pl);
    } else {
        struct log_kv kv[] = {LOG_NUM("status", WEXITSTATUS(status)), LOG_NUM("checkpoints", s->taken)};
        log_event(lvl, "exited", kv, 2, "program exited with status %d after %" PRIu64 " checkpoint%s",
                  WEXITSTATUS(status), s->taken, pl);
    }
}

/* One message from process `pid` of the job; `fd` came with it (or -1). */
static void on_runtime_message(struct sv_state *st, pid_t pid, char *msg, int fd)
{
    struct supervisor *s = st->s;
    int main_prog = pid == sv_find_program(s);
    if (!strncmp(msg, "JOIN ", 5)) {
        /* a child's own channel: its sender is who made the pair */
        struct ucred cr;
        socklen_t cl = sizeof cr;
        if (fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0 && cr.pid > 0) {
            fcntl(fd, F_SETFD, FD_CLOEXEC);
            add_member(st, cr.pid, fd);
        } else if (fd >= 0) {
            close(fd);
        }
        return;
    }
    if (!strncmp(msg, "HELLO", 5)) {
        if (main_prog) {
            st->runtime_ready = 1;
            st->unckpt[0] = 0; /* an exec'd program with the runtime */
        }
    } else if (!strncmp(msg, "UNCHECKPOINTABLE ", sizeof "UNCHECKPOINTABLE " - 1)) {
        if (main_prog) snprintf(st->unckpt, sizeof st->unckpt, "%.599s", msg + sizeof "UNCHECKPOINTABLE " - 1);
    } else if (!strncmp(msg, "CHECKPOINTABLE", 14)) {
        if (main_prog) st->unckpt[0] = 0;
    } else if (!strncmp(msg, "RESTORED", 8)) {
        if (!main_prog) goto out;
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
        restarted_line(s, pid);
        if (st->deferred) {
            uint32_t trigger = st->deferred == 2 ? LZ_TRIG_API : LZ_TRIG_REQUEST;
            st->deferred = 0;
            request(st, trigger, -1); /* for the clients (and C API callers) already waiting */
        }
    } else if (!strncmp(msg, "READY", 5)) {
        /* a restorer of a job of several processes is about to jump back:
         * once all are, all go (restart_tree.c); none goes if one failed */
        if (s->restoring && !st->restore_failed && s->go_fd >= 0 && ++st->nready == s->nlive) {
            char *go = malloc(s->nlive);
            if (go) {
                memset(go, 'g', s->nlive);
                if (lz_write_all(s->go_fd, go, s->nlive) < 0) lz_err("cannot let the restored processes go: %s", strerror(errno));
                free(go);
            }
            close(s->go_fd);
            s->go_fd = -1;
        }
    } else if (!strncmp(msg, "LOADED", 6)) {
        /* the restorer of one process has its anonymous memory in and every
         * frame proven: phase 1 is over, the files are rolled back now */
        if (!main_prog || !s->restoring || st->restore_failed || s->rolled_fd < 0) goto out;
        if (s->rollback(s->rollback_arg) == 0) {
            s->files_rolled = 1;
            if (write(s->rolled_fd, "r", 1) != 1) lz_err("cannot let the restorer go on: %s", strerror(errno));
            s->running(s->rollback_arg);
        } else {
            st->restore_failed = 1; /* the rollback said why */
            if (!st->child_gone) kill(s->child, SIGKILL);
        }
        close(s->rolled_fd);
        s->rolled_fd = -1;
    } else if (!strncmp(msg, "FAILED", 6)) {
        /* a restorer could not restore its process: the others go too, none
         * ran (those waiting for go see its pipe end) */
        if (s->restoring && !st->restore_failed) {
            st->restore_failed = 1;
            st->restore_damaged = msg[6] == ' ' && strstr(msg + 7, " is damaged") != NULL;
            if (msg[6] == ' ') lz_err("%s%s", msg + 7, s->files_rolled ? "" : "; nothing was changed");
            if (!st->child_gone) kill(s->child, SIGKILL);
            if (s->go_fd >= 0) { close(s->go_fd); s->go_fd = -1; }
            if (s->rolled_fd >= 0) { close(s->rolled_fd); s->rolled_fd = -1; }
        }
    } else if (!strncmp(msg, LZ_LAZY_MSG, sizeof LZ_LAZY_MSG - 1) && fd >= 0 && s->lazy && s->lazy_fd < 0 && main_prog) {
        /* restart --lazy: the program's userfaultfd; the server fills it,
         * we keep a copy until it is done (lazy_server.c) */
        s->lazy_pid = lazy_spawn(s, fd, &s->lazy_hup);
        if (s->lazy_pid < 0) {
            lz_err("cannot start the lazy restart's fault server: %s", strerror(errno));
            st->restore_failed = 1;
            if (!st->child_gone) kill(s->child, SIGKILL);
            s->lazy_pid = 0;
        }
        s->lazy_fd = fd;
        fd = -1;
    } else if (!strncmp(msg, "TERM ", 5)) {
        batch_term_held(st, pid, atol(msg + 5)); /* a SIGTERM it holds (runtime/rt_term.c) */
    } else if (!strncmp(msg, "API", 3)) {
        st->api_asked = 1;
        request(st, LZ_TRIG_API, -1);
    } else if (!strncmp(msg, "HERE", 4)) {
        st->here_asked = 1; /* lazarus_checkpoint_here(): the program goes on once captured */
        request(st, LZ_TRIG_API, -1);
    } else {
        job_ckpt_message(st, pid, msg, fd);
        fd = -1;
    }
out:
    if (fd >= 0) close(fd);
    if (!st->in_progress && st->api_queued) {
        st->api_queued = 0;
        request(st, LZ_TRIG_API, -1);
    }
}

/* One datagram on a member's channel, with the descriptor it may carry
 * (JOIN: the member's new channel; FORKED: its writer's report pipe). */
ssize_t sv_recv_message(int chan, char *msg, size_t cap, int *fd)
{
    struct iovec iov = {msg, cap - 1};
    union { struct cmsghdr h; char buf[CMSG_SPACE(sizeof(int))]; } c;
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = c.buf;
    mh.msg_controllen = sizeof c.buf;
    *fd = -1;
    ssize_t m = recvmsg(chan, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (m < 0) return m;
    msg[m] = 0;
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(cm), sizeof *fd);
    return m;
}

/* Everything waiting on member i's channel; 0 when it is closed (the process is gone). */
static int drain_member(struct sv_state *st, size_t i)
{
    char msg[1200];
    int fd;
    for (;;) {
        int chan = st->members[i].chan;
        ssize_t m = sv_recv_message(chan, msg, sizeof msg, &fd);
        if (m == 0) return 0;
        if (m < 0) return errno == EAGAIN || errno == EINTR;
        pid_t pid = st->members[i].pid ? st->members[i].pid : sv_find_program(st->s);
        on_runtime_message(st, pid, msg, fd);
        if (i >= st->nmembers || st->members[i].chan != chan) return 1; /* the table changed */
    }
}

static int exit_code_of(int status)
{
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

void supervisor_block_signals(sigset_t *mask)
{
    sigemptyset(mask);
    sigaddset(mask, SIGCHLD);
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++) sigaddset(mask, forwarded[i]);
    sigaddset(mask, SIGPIPE);
    if (batch_signal_number() > 0) sigaddset(mask, batch_signal_number());
    sigprocmask(SIG_BLOCK, mask, NULL);
}

int supervise(struct supervisor *s)
{
    struct sv_state st;
    memset(&st, 0, sizeof st);
    st.s = s;
    st.restore_started_ns = lz_now_ns(CLOCK_MONOTONIC);
    add_member(&st, 0, s->ctl_fd); /* the main program's channel (its PID: sv_find_program) */
    sigset_t mask;
    supervisor_block_signals(&mask);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    int tfd = -1;
    if (s->interval) {
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        struct itimerspec its = {{(time_t)s->interval, 0}, {(time_t)s->interval, 0}};
        timerfd_settime(tfd, 0, &its, NULL);
    }
    int program_done = 0, code = 0, busy = 0;
    /* if we die with the job, `restart` knows from the lock file's time
     * since when changes to its files are someone else's (sv_life.c) */
    sv_beat_start(s->lock_fd);
    batch_start(s);
    struct pollfd *pf = NULL;
    size_t pf_cap = 0;
    while (!program_done) {
        size_t need = 5 + MAX_CLIENTS + st.nmembers + st.nparts;
        if (need > pf_cap) {
            struct pollfd *np = realloc(pf, need * sizeof *pf);
            if (!np) { lz_err("supervisor: out of memory"); break; }
            pf = np;
            pf_cap = need;
        }
        size_t n = 0;
        pf[n++] = (struct pollfd){sfd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->listen_fd, POLLIN, 0};
        pf[n++] = (struct pollfd){tfd, POLLIN, 0};
        pf[n++] = (struct pollfd){s->status_fd, POLLIN, 0};
        size_t first_client = n;
        for (int i = 0; i < st.npending; i++) pf[n++] = (struct pollfd){st.pending[i], POLLIN, 0};
        size_t first_member = n;
        for (size_t i = 0; i < st.nmembers; i++) pf[n++] = (struct pollfd){st.members[i].chan, POLLIN, 0};
        size_t first_writer = n;
        for (size_t i = 0; i < st.nparts && st.in_progress; i++) pf[n++] = (struct pollfd){st.parts[i].writer_fd, POLLIN, 0};
        size_t nwriters = n - first_writer, nmembers = st.nmembers;
        /* a checkpoint under way is looked after often (signals again, phases) */
        int r = poll(pf, (nfds_t)n, st.in_progress ? TICK_BUSY_MS : TICK_IDLE_MS);
        if (r < 0 && errno != EINTR) { lz_err("supervisor: poll: %s", strerror(errno)); break; }
        uint64_t now = lz_now_ns(CLOCK_MONOTONIC);
        /* progress for a person watching; scripts get only results and errors */
        if (s->restoring && !st.restore_msg_shown && now - st.restore_started_ns > RESTORE_MSG_NS && isatty(2)) {
            lz_err("restoring checkpoint %" PRIu64 "...", s->restore_index);
            st.restore_msg_shown = 1;
        }
        if (r > 0 && (pf[0].revents & POLLIN)) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == sizeof si) {
                int sig = (int)si.ssi_signo;
                if (sig == SIGCHLD || sig == SIGPIPE) continue;
                if (batch_signal(&st, sig)) continue; /* a batch system's: checkpoint, stop (batch_slurm.c) */
                /* Terminal-generated signals already reach the program (same process group). */
                if (si.ssi_code == SI_KERNEL && (sig == SIGINT || sig == SIGQUIT || sig == SIGWINCH || sig == SIGHUP)) continue;
                pid_t prog = sv_find_program(s);
                if (prog > 0) kill(prog, sig);
            }
        }
        /* reap: we are a subreaper, so orphans of the job (and the writers of
         * its processes) come to us too */
        for (;;) {
            int status;
            pid_t w = waitpid(-1, &status, WNOHANG);
            if (w <= 0) break;
            if (w == s->child) {
                st.child_gone = 1;
                st.child_status = status;
            }
            if (w == s->lazy_pid) lazy_ended(&st, status);
            else if (w != s->child) fs_reaped(s, w, status); /* a file system daemon died: the job ends */
        }
        /* In a PID namespace the init reports the program's status, then exits;
         * read the pipe once the init is gone so the report is never missed. */
        if (s->status_fd >= 0 && (st.child_gone || (r > 0 && (pf[3].revents & (POLLIN | POLLHUP))))) {
            int status;
            if (read(s->status_fd, &status, sizeof status) == sizeof status) { st.have_status = 1; st.status = status; }
            close(s->status_fd);
            s->status_fd = -1;
        }
        if (st.child_gone && s->status_fd < 0 && !st.have_status) {
            st.have_status = 1;
            st.status = st.child_status;
        }
        if (r > 0) {
            /* members: backwards, as a closed channel leaves the table */
            for (size_t k = nmembers; k-- > 0;) {
                if (!(pf[first_member + k].revents & (POLLIN | POLLHUP | POLLERR)) || k >= st.nmembers) continue;
                if (st.members[k].chan != pf[first_member + k].fd) continue;
                if (!drain_member(&st, k) && st.members[k].chan != s->ctl_fd) drop_member(&st, k);
            }
            for (size_t k = 0; k < nwriters && st.in_progress && k < st.nparts; k++)
                if (st.parts[k].writer_fd >= 0 && st.parts[k].writer_fd == pf[first_writer + k].fd &&
                    (pf[first_writer + k].revents & (POLLIN | POLLHUP | POLLERR)))
                    job_ckpt_writer(&st, &st.parts[k]);
            if (tfd >= 0 && (pf[2].revents & POLLIN)) {
                uint64_t ticks;
                if (read(tfd, &ticks, sizeof ticks) > 0 && !st.in_progress) request(&st, LZ_TRIG_INTERVAL, -1);
            }
            if (pf[1].revents & POLLIN) {
                int c = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (c >= 0 && st.npending < MAX_CLIENTS) st.pending[st.npending++] = c;
                else if (c >= 0) sv_reply(c, "ERR too many clients");
            }
            for (size_t i = first_client; i < first_member; i++) {
                if (!pf[i].revents) continue;
                int c = pf[i].fd;
                for (int k = 0; k < st.npending; k++) if (st.pending[k] == c) st.pending[k] = st.pending[--st.npending];
                char req[64];
                ssize_t m = recv(c, req, sizeof req - 1, MSG_DONTWAIT);
                if (m > 0 && !strncmp(req, "CHECKPOINT", 10)) request(&st, LZ_TRIG_REQUEST, c);
                else if (m > 0 && !strncmp(req, "ABORT", 5)) sv_reply(c, "ERR " SV_ABORT_REFUSED);
                else close(c);
            }
        }
        job_ckpt_tick(&st);
        batch_tick(&st);
        if (!st.in_progress && st.api_queued) {
            st.api_queued = 0;
            request(&st, LZ_TRIG_API, -1);
        }
        /* the interval (libckpt's maxtime) starts again after every
         * checkpoint, whatever asked for it */
        if (tfd >= 0 && busy && !st.in_progress) {
            struct itimerspec its = {{(time_t)s->interval, 0}, {(time_t)s->interval, 0}};
            timerfd_settime(tfd, 0, &its, NULL);
        }
        busy = st.in_progress;
        if (st.child_gone && s->lazy_pid > 0) kill(s->lazy_pid, SIGKILL); /* nothing left to fill */
        if (st.child_gone && s->lazy_fd >= 0) { close(s->lazy_fd); s->lazy_fd = -1; }
        if (st.child_gone && (st.have_status || s->status_fd < 0)) {
            /* drain what the runtime said last (a checkpoint may have committed) */
            for (size_t k = st.nmembers; k-- > 0;) drain_member(&st, k);
            program_done = 1;
        }
    }
    free(pf);
    if (s->lazy_pid > 0) { /* the fault server, ended with the job: what it said counts */
        int status;
        if (waitpid(s->lazy_pid, &status, 0) == s->lazy_pid) lazy_ended(&st, status);
    }
    if (s->lazy_fd >= 0) { close(s->lazy_fd); s->lazy_fd = -1; }
    /* a checkpoint being written when the program ended still commits or not */
    job_ckpt_end(&st);
    /* and the last one committed reaches the remote store before we exit */
    flusher_stop(s->flusher);
    /* the job's other processes go on outside it, or end with it */
    sv_end_members(&st, !s->restoring && st.have_status && WIFEXITED(st.status));
    /* buffer mode: a program that ended by itself committed its last writes */
    if (st.have_status && WIFEXITED(st.status) && !s->fs_failed) fs_finish_all(s);
    /* the mounts go with the job (what the kernel still caches reaches the files first) */
    fs_stop_all(s);
    sv_beat_stop();
    sv_finish_clients(&st, "ERR the program ended before the checkpoint was complete");
    for (int i = 0; i < st.npending; i++) close(st.pending[i]);
    char sock[LZ_PATH_MAX + 16];
    snprintf(sock, sizeof sock, "%s/%s", s->dir, LZ_CTLSOCK);
    unlink(sock);
    struct lz_job job;
    if (lz_job_read(s->dir, &job) < 0) {
        /* damaged or gone meanwhile: written anew from what this supervisor knows */
        lz_err("the store's job file %s/%s was damaged or removed while the job ran; writing it anew", s->dir, LZ_JOBFILE);
        job.interval = s->interval;
        job.keep = s->keep;
        job.durability = s->durability;
        job.next_index = s->next_index;
        snprintf(job.excludes, sizeof job.excludes, "%s", s->excludes);
        snprintf(job.compress, sizeof job.compress, "%s", s->compress);
        job.job_stdio = s->job_stdio;
        job.tcp_refuse = s->tcp_refuse;
    }
    job.id[0] = s->job_id[0];
    job.id[1] = s->job_id[1];
    if (s->restoring) {
        /* the restorer failed (it said why) or was killed: nothing changed */
        code = st.have_status && WIFEXITED(st.status) && WEXITSTATUS(st.status) ? WEXITSTATUS(st.status) : 1;
        if (st.restore_failed) code = st.restore_damaged ? LZ_EXIT_DAMAGED : LZ_EXIT_FAIL;
        else if ((!st.have_status || !WIFEXITED(st.status)) && !st.lazy_failed) /* the server said why */
            lz_err("restart of checkpoint %" PRIu64 " did not complete%s", s->restore_index,
                   s->files_rolled ? "" : "; nothing was changed");
        /* refused in phase 1 (the restorer found damage before the rollback):
         * the store stays as it was, its job file too */
        if (!s->files_rolled) return code ? code : 1;
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
    if (st.have_status) exited_line(s, st.status);
    /* a job whose file system went away is stopped, however its program ended (restartable) */
    if (s->fs_failed && code == 0) code = LZ_EXIT_FAIL;
    snprintf(job.state, sizeof job.state, "%s", st.have_status && WIFEXITED(st.status) && !s->fs_failed ? "finished" : "stopped");
    job.exit_status = code;
    lz_job_write(s->dir, &job);
    lz_store_drop_spares(s->dir);
    return batch_end(code, !strcmp(job.state, "stopped"));
}
