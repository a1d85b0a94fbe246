/* Changes files from processes other than the job's program, for
 * tests/test_files_children.py.
 *
 *   fs_children WORKDIR GODIR ACTION...
 *
 * Runs in WORKDIR.  Each ACTION, in order:
 *   ckpt            lazarus_checkpoint(): prints "ckpt K INDEX" (K counts the
 *                   ckpt actions from 0), or after a restart "restored K INDEX";
 *                   then waits until GODIR/go.K exists
 *   own:OPS         the program itself runs OPS
 *   fork:OPS        a forked child runs OPS and exits; waited for
 *   grand:OPS       a forked child forks a grandchild that runs OPS; both waited for
 *   sh:SCRIPT       a forked child execs /bin/sh -c SCRIPT; waited for
 *   vsh:SCRIPT      the same through vfork
 *   grandsh:SCRIPT  a forked child forks a grandchild that execs /bin/sh -c SCRIPT
 *   spawn:ARGV      posix_spawnp of ARGV (split at spaces); waited for
 *   system:SCRIPT   system(SCRIPT)
 *   popen:SCRIPT    popen(SCRIPT, "r"), read to the end, pclose
 * then prints "end" and sleeps until killed.  Any failure prints "FAIL ..."
 * and exits 1.
 *
 * OPS are separated by ';', fields by spaces; TEXT is literal, or S*N for
 * N copies of S:
 *   w FILE OFF TEXT   pwrite at OFF          a FILE TEXT   append (O_APPEND)
 *   c FILE TEXT       create or O_TRUNC      t FILE SIZE   truncate
 *   r OLD NEW         rename                 u FILE        unlink
 *   d DIR             mkdir                  D DIR         rmdir */
#include <lazarus.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void fail(const char *what, const char *arg)
{
    printf("FAIL %s %s: %s\n", what, arg, strerror(errno));
    fflush(stdout);
    _exit(1);
}

static char *text(const char *t, size_t *len)
{
    const char *star = strrchr(t, '*');
    if (!star || !star[1]) { *len = strlen(t); return strdup(t); }
    size_t unit = (size_t)(star - t), n = strtoul(star + 1, NULL, 10);
    char *b = malloc(unit * n + 1);
    for (size_t i = 0; i < n; i++) memcpy(b + i * unit, t, unit);
    *len = unit * n;
    return b;
}

static void op(char *o)
{
    char *f[4] = {0};
    int n = 0;
    for (char *tok = strtok(o, " "); tok && n < 4; tok = strtok(NULL, " ")) f[n++] = tok;
    if (!n) return;
    size_t len;
    char *b;
    int fd;
    switch (f[0][0]) {
    case 'w':
        b = text(f[3], &len);
        if ((fd = open(f[1], O_WRONLY)) < 0 || pwrite(fd, b, len, atol(f[2])) != (ssize_t)len) fail("pwrite", f[1]);
        close(fd);
        free(b);
        break;
    case 'a':
    case 'c':
        b = text(f[2], &len);
        fd = open(f[1], O_WRONLY | O_CREAT | (f[0][0] == 'a' ? O_APPEND : O_TRUNC), 0644);
        if (fd < 0 || write(fd, b, len) != (ssize_t)len) fail("write", f[1]);
        close(fd);
        free(b);
        break;
    case 't': if (truncate(f[1], atol(f[2])) < 0) fail("truncate", f[1]); break;
    case 'r': if (rename(f[1], f[2]) < 0) fail("rename", f[1]); break;
    case 'u': if (unlink(f[1]) < 0) fail("unlink", f[1]); break;
    case 'd': if (mkdir(f[1], 0755) < 0) fail("mkdir", f[1]); break;
    case 'D': if (rmdir(f[1]) < 0) fail("rmdir", f[1]); break;
    default: errno = EINVAL; fail("op", f[0]);
    }
}

static void ops(const char *list)
{
    char *copy = strdup(list), *save = NULL;
    for (char *o = strtok_r(copy, ";", &save); o; o = strtok_r(NULL, ";", &save)) op(o);
    free(copy);
}

static void reap(pid_t p, const char *what)
{
    int st;
    if (p < 0) fail("fork", what);
    if (waitpid(p, &st, 0) != p) fail("waitpid", what);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { errno = 0; printf("FAIL child status %#x of %s\n", st, what); fflush(stdout); _exit(1); }
}

static void sh(const char *script) { execl("/bin/sh", "sh", "-c", script, (char *)0); _exit(127); }

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc < 3 || chdir(argv[1]) < 0) { fprintf(stderr, "usage: fs_children WORKDIR GODIR ACTION...\n"); return 2; }
    int k = 0;
    for (int i = 3; i < argc; i++) {
        char *a = argv[i], *arg = strchr(a, ':');
        arg = arg ? arg + 1 : a + strlen(a);
        pid_t p;
        if (!strcmp(a, "ckpt")) {
            unsigned long long idx = 0;
            int r = lazarus_checkpoint(&idx);
            if (r != LAZARUS_CONTINUED && r != LAZARUS_RESTARTED) { printf("FAIL checkpoint %d\n", r); return 1; }
            printf("%s %d %llu\n", r == LAZARUS_RESTARTED ? "restored" : "ckpt", k, idx);
            char go[4096];
            snprintf(go, sizeof go, "%s/go.%d", argv[2], k++);
            while (access(go, F_OK) != 0) usleep(10000);
        } else if (!strncmp(a, "own:", 4)) {
            ops(arg);
        } else if (!strncmp(a, "fork:", 5)) {
            if ((p = fork()) == 0) { ops(arg); exit(0); }
            reap(p, a);
        } else if (!strncmp(a, "grand:", 6) || !strncmp(a, "grandsh:", 8)) {
            if ((p = fork()) == 0) {
                pid_t g = fork();
                if (g == 0) {
                    if (a[5] == 's') sh(arg);
                    ops(arg);
                    _exit(0);
                }
                reap(g, a);
                _exit(0);
            }
            reap(p, a);
        } else if (!strncmp(a, "sh:", 3)) {
            if ((p = fork()) == 0) sh(arg);
            reap(p, a);
        } else if (!strncmp(a, "vsh:", 4)) {
            if ((p = vfork()) == 0) sh(arg);
            reap(p, a);
        } else if (!strncmp(a, "system:", 7)) {
            int st = system(arg);
            if (st != 0) { printf("FAIL system status %#x of %s\n", st, a); return 1; }
        } else if (!strncmp(a, "popen:", 6)) {
            FILE *f = popen(arg, "r");
            if (!f) fail("popen", arg);
            char buf[4096];
            while (fread(buf, 1, sizeof buf, f) > 0) {}
            int st = pclose(f);
            if (st != 0) { printf("FAIL pclose status %#x of %s\n", st, a); return 1; }
        } else if (!strncmp(a, "spawn:", 6)) {
            char *copy = strdup(arg), *args[64];
            int n = 0;
            for (char *t = strtok(copy, " "); t && n < 63; t = strtok(NULL, " ")) args[n++] = t;
            args[n] = NULL;
            int e = posix_spawnp(&p, args[0], NULL, NULL, args, environ);
            if (e) { errno = e; fail("posix_spawnp", args[0]); }
            reap(p, a);
            free(copy);
        } else {
            errno = EINVAL;
            fail("action", a);
        }
    }
    printf("end\n");
    for (;;) pause();
}
