/* stdio_lines: numbered lines on stdout and stderr around a checkpoint, for
 * the launcher's output files (test_launcher_stdio.py).
 *
 *   stdio_lines STEPS CKPT FAIL WAIT RELEASE [--fork] [--dup] [--reopen]
 *
 * For step i = 0..STEPS-1 it writes `out i` to its stdout and `err i` to its
 * stderr (write(2): no stdio buffer), then:
 *   i == CKPT: lazarus_checkpoint(); writes `continued` or `restarted` (the
 *              restored program) to stdout;
 *   i == FAIL: lazarus_checkpoint() while a netlink socket is open, which fails:
 *              the supervisor says so on its stderr (Lazarus' own line);
 *   i == WAIT: waits until the file RELEASE exists (the test kills it here).
 * --fork:   a forked child does all this; the parent waits for it, writes
 *           `parent done` to its stdout and exits with the child's status.
 * --dup:    stdout is moved to descriptor 7 first (dup, then close(1)).
 * --reopen: stdout is opened anew by its name (O_APPEND) onto descriptor 1:
 *           the job's own file, no longer the launcher's.
 * Exits 0. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lazarus.h"

static int out = 1;

static void say(int fd, const char *fmt, long i)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, fmt, i);
    if (write(fd, buf, (size_t)n) != n) exit(4);
}

static int work(long steps, long ckpt, long fail, long wait_at, const char *release)
{
    for (long i = 0; i < steps; i++) {
        say(out, "out %ld\n", i);
        say(2, "err %ld\n", i);
        if (i == ckpt) {
            int r = lazarus_checkpoint(NULL);
            say(out, r == LAZARUS_RESTARTED ? "restarted\n" : r == LAZARUS_CONTINUED ? "continued\n" : "ckpt %ld\n", r);
        }
        if (i == fail) {
            int s = socket(AF_NETLINK, SOCK_RAW, 0); /* NETLINK_ROUTE: a kind no checkpoint takes */
            lazarus_checkpoint(NULL);
            close(s);
        }
        if (i == wait_at)
            while (access(release, F_OK) != 0) usleep(10000);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: stdio_lines STEPS CKPT FAIL WAIT RELEASE [--fork] [--dup] [--reopen]\n");
        return 2;
    }
    int fork_it = 0;
    for (int a = 6; a < argc; a++) {
        if (!strcmp(argv[a], "--fork")) {
            fork_it = 1;
        } else if (!strcmp(argv[a], "--dup")) {
            if (dup2(1, 7) != 7 || close(1) < 0) return 3;
            out = 7;
        } else if (!strcmp(argv[a], "--reopen")) {
            char path[4096];
            ssize_t n = readlink("/proc/self/fd/1", path, sizeof path - 1);
            if (n < 0) return 3;
            path[n] = 0;
            int fd = open(path, O_WRONLY | O_APPEND);
            if (fd < 0 || dup2(fd, 1) != 1) return 3;
            close(fd);
        } else {
            return 2;
        }
    }
    long steps = atol(argv[1]), ckpt = atol(argv[2]), fail = atol(argv[3]), wait_at = atol(argv[4]);
    if (!fork_it) return work(steps, ckpt, fail, wait_at, argv[5]);
    pid_t c = fork();
    if (c < 0) return 3;
    if (c == 0) _exit(work(steps, ckpt, fail, wait_at, argv[5]));
    int st;
    if (waitpid(c, &st, 0) != c) return 3;
    say(out, "parent done\n", 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
