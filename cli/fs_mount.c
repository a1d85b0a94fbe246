/* Starting, talking to and ending lazarus-fsd (fs_mount.h).  The daemon is
 * a separate program so that the supervisor stays single-threaded (libfuse
 * serves the kernel with threads) and a test can SIGKILL it alone. */
#include "fs_mount.h"
#include "cli.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ANSWER_MS 10000 /* a commit waits this long for the daemon (it syncs nothing itself) */

static int under(const char *a, const char *b) /* a is b or below it */
{
    size_t l = strlen(b);
    if (l == 1 && b[0] == '/') return 1;
    return !strncmp(a, b, l) && (a[l] == '/' || a[l] == 0);
}

int fsm_check_path(const char *path, const char *dir, char *real, size_t rlen, char *why, size_t whylen)
{
    struct stat st;
    if (stat(path, &st) < 0) { snprintf(why, whylen, "--fs %s: %s", path, strerror(errno)); return -1; }
    if (!S_ISDIR(st.st_mode)) { snprintf(why, whylen, "--fs %s: not a directory", path); return -1; }
    char *rp = realpath(path, NULL), *rd = realpath(dir, NULL);
    int rc = 0;
    if (!rp) { snprintf(why, whylen, "--fs %s: %s", path, strerror(errno)); rc = -1; }
    else if (rd && (under(rp, rd) || under(rd, rp))) {
        snprintf(why, whylen, "--fs %s: %s", path, under(rp, rd) ? "inside the store (-d DIR)" : "holds the store (-d DIR)");
        rc = -1;
    }
    if (rp) snprintf(real, rlen, "%s", rp);
    free(rp);
    free(rd);
    return rc;
}

/* one answer from the daemon within ms: its length, 0 closed, -1 no answer */
static ssize_t answer(struct fs_mount *m, char *buf, size_t cap, int ms)
{
    struct pollfd p = {m->chan, POLLIN, 0};
    int r;
    do r = poll(&p, 1, ms); while (r < 0 && errno == EINTR);
    if (r <= 0) return -1;
    ssize_t n = recv(m->chan, buf, cap - 1, MSG_DONTWAIT);
    if (n < 0) return 0;
    buf[n] = 0;
    return n;
}

int fsm_start(struct fs_mount *m, const char *path, const char *mode, const char *jhome, const uint64_t job[2],
              int machine, uint64_t restarted, char *why, size_t whylen)
{
    memset(m, 0, sizeof *m);
    m->buffer = !strncmp(mode, "buffer", 6);
    m->chan = m->mnt_fd = -1;
    snprintf(m->path, sizeof m->path, "%s", path);
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
        snprintf(why, whylen, "--fs %s: socketpair: %s", path, strerror(errno));
        return -1;
    }
    char id[33], fdnum[16], idx[24];
    snprintf(id, sizeof id, "%016" PRIx64 "%016" PRIx64, job[0], job[1]);
    snprintf(fdnum, sizeof fdnum, "%d", 3);
    snprintf(idx, sizeof idx, "%" PRIu64, restarted);
    const char *exe = install_path("bin/lazarus-fsd");
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, whylen, "--fs %s: fork: %s", path, strerror(errno));
        close(sp[0]); close(sp[1]);
        return -1;
    }
    if (pid == 0) {
        setsid(); /* the terminal's signals are the program's */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) { dup2(null, 0); if (null > 2) close(null); }
        /* nothing of ours but the channel (the program's channel end would
         * keep the job's end unseen) */
        if (dup2(sp[1], 3) < 0) _exit(127);
        close_range(4, ~0u, 0);
        char *av[] = {(char *)exe, (char *)path, (char *)jhome, id, machine ? "machine" : "process", fdnum, idx,
                      (char *)mode, NULL};
        execv(exe, av);
        char m2[600];
        int n = snprintf(m2, sizeof m2, "ERR cannot run %s: %s", exe, strerror(errno));
        send(3, m2, (size_t)n, MSG_NOSIGNAL);
        _exit(127);
    }
    close(sp[1]);
    m->chan = sp[0];
    m->pid = pid;
    char buf[4400];
    ssize_t n = answer(m, buf, sizeof buf, ANSWER_MS);
    if (n > 0 && !strcmp(buf, "READY")) {
        m->mnt_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return 0;
    }
    if (n > 4 && !strncmp(buf, "ERR ", 4)) snprintf(why, whylen, "--fs %s: %s", path, buf + 4);
    else snprintf(why, whylen, "--fs %s: the file system daemon %s", path, n < 0 ? "did not answer in 10 s" : "ended at its start");
    fsm_stop(m);
    return -1;
}

int fsm_close(struct fs_mount *m, const char *jhome, uint64_t index, char *why, size_t whylen)
{
    if (m->pid <= 0 || m->chan < 0) { snprintf(why, whylen, "the file system daemon of %s is gone", m->path); return -2; }
    /* what the kernel still holds for the mount reaches the daemon, and its
     * journal, before the interval closes */
    if (m->mnt_fd >= 0 && syncfs(m->mnt_fd) < 0) {
        snprintf(why, whylen, "cannot sync the file system over %s: %s", m->path, strerror(errno));
        return -1;
    }
    snprintf(m->jdir, sizeof m->jdir, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".%d", jhome, index, (int)m->pid);
    m->closed = 0;
    char msg[4300], buf[600];
    int l = snprintf(msg, sizeof msg, "CLOSE %s", m->jdir);
    if (send(m->chan, msg, (size_t)l, MSG_NOSIGNAL) < 0) {
        snprintf(why, whylen, "the file system daemon of %s is gone", m->path);
        return -2;
    }
    ssize_t n = answer(m, buf, sizeof buf, ANSWER_MS);
    if (n > 0 && !strcmp(buf, "OK")) { m->closed = index; return 0; }
    if (n > 4 && !strncmp(buf, "ERR ", 4)) { snprintf(why, whylen, "the file system over %s: %s", m->path, buf + 4); return -1; }
    snprintf(why, whylen, "the file system daemon of %s %s", m->path, n < 0 ? "did not answer in 10 s" : "died");
    return -2;
}

static int ask(struct fs_mount *m, const char *msg, const char *what, char *why, size_t whylen)
{
    if (!m->buffer) return 0;
    char buf[600];
    if (m->pid <= 0 || m->chan < 0 || send(m->chan, msg, strlen(msg), MSG_NOSIGNAL) < 0) {
        snprintf(why, whylen, "the file system daemon of %s is gone", m->path);
        return -1;
    }
    /* no time limit of 10 s here: it writes what the interval held (it may be GiB) */
    ssize_t n = answer(m, buf, sizeof buf, -1);
    if (n > 0 && !strcmp(buf, "OK")) return 0;
    if (n > 4 && !strncmp(buf, "ERR ", 4)) snprintf(why, whylen, "the file system over %s: %s: %s", m->path, what, buf + 4);
    else snprintf(why, whylen, "the file system daemon of %s died (%s)", m->path, what);
    return -1;
}

int fsm_apply(struct fs_mount *m, uint64_t index, char *why, size_t whylen)
{
    char msg[64];
    snprintf(msg, sizeof msg, "APPLY %" PRIu64, index);
    return ask(m, msg, "applying the commit", why, whylen);
}

int fsm_finish(struct fs_mount *m, char *why, size_t whylen) { return ask(m, "FINISH", "the program's last writes", why, whylen); }

void fsm_reaped(struct fs_mount *m, int status)
{
    m->pid = 0;
    m->status = status;
}

void fsm_death(int status, char *buf, size_t len)
{
    if (WIFSIGNALED(status)) snprintf(buf, len, "was killed (signal %d)", WTERMSIG(status));
    else snprintf(buf, len, "ended (status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* mountinfo escapes blanks and backslashes as \ooo */
static void unescape(char *s)
{
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] && p[3]) {
            *o++ = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
            p += 3;
        } else {
            *o++ = *p;
        }
    }
    *o = 0;
}

int fsm_mounted(const char *path)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) return 0;
    char line[8192];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        /* id parent major:minor root mountpoint options ... - fstype source ... */
        char *sv, *tok = strtok_r(line, " ", &sv);
        char *mp = NULL;
        for (int i = 0; tok && i < 4; i++) tok = strtok_r(NULL, " ", &sv);
        mp = tok;
        if (!mp) continue;
        char *dash = strstr(sv, " - ");
        if (!dash) continue;
        unescape(mp);
        if (!strcmp(mp, path) && !strncmp(dash + 3, "fuse.lazarus ", 13)) found = 1;
    }
    fclose(f);
    return found;
}

void fsm_stop(struct fs_mount *m)
{
    if (m->mnt_fd >= 0) { close(m->mnt_fd); m->mnt_fd = -1; }
    if (m->chan >= 0) { close(m->chan); m->chan = -1; } /* the daemon unmounts and exits */
    if (m->pid > 0) {
        int status;
        for (int i = 0; i < 500; i++) {
            pid_t w = waitpid(m->pid, &status, WNOHANG);
            if (w == m->pid || (w < 0 && errno == ECHILD)) { m->pid = 0; break; }
            struct timespec t = {0, 10000000};
            nanosleep(&t, NULL);
        }
        if (m->pid > 0) {
            kill(m->pid, SIGKILL);
            waitpid(m->pid, &status, 0);
            m->pid = 0;
        }
    }
    /* a daemon killed leaves its mount (ENOTCONN) unless fusermount3's watch took it: gone in any case */
    for (int i = 0; i < 100 && fsm_mounted(m->path); i++) {
        if (i == 0 && umount2(m->path, MNT_DETACH) == 0) continue;
        if (i == 1) {
            pid_t p = fork();
            if (p == 0) {
                int null = open("/dev/null", O_RDWR);
                if (null >= 0) { dup2(null, 1); dup2(null, 2); }
                execlp("fusermount3", "fusermount3", "-uz", m->path, (char *)NULL);
                _exit(127);
            }
            if (p > 0) waitpid(p, NULL, 0);
            continue;
        }
        struct timespec t = {0, 20000000};
        nanosleep(&t, NULL);
    }
}
