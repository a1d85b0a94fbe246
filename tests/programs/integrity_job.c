/* A job whose store has every kind of file, for tests/test_store_integrity.py.
 *
 *   integrity_job WORKDIR CTLDIR TOKEN
 *
 * Runs in WORKDIR and changes files there in three steps, every byte it
 * writes derived from TOKEN (two jobs with different tokens write different
 * bytes, and hold different memory).  After step K it prints
 *
 *   ready K pid P token TOKEN digest D
 *
 * (D: a digest of its heap block, of the bytes of its open file without a
 * name and of the bytes in flight in its pipe) and waits, checking every 10 ms, until
 * CTLDIR/go.K exists; while it waits, the first time it sees CTLDIR/ping it
 * prints
 *
 *   pong K pid P token TOKEN digest D
 *
 * and nothing else changes (after a restart its memory says it has not
 * answered yet, so a restarted program answers once more).  It only tests
 * CTLDIR's names (access), so nothing there is journaled.  After step 3 it
 * waits for go.3, which never comes: it is killed there.
 *
 * step 1 (before the first checkpoint: nothing journaled): files a.txt b.bin
 *   c.txt sub/d.txt e.log doomed.txt f.dat (0640) h.txt, a symlink link ->
 *   a.txt, an open file without a name (ghost: its content travels in the
 *   checkpoint), a pipe with bytes in flight, a 1 MiB heap block filled.
 * step 2 (journal of checkpoint 1): append, overwrite in the middle,
 *   truncate, rename into a subdirectory, unlink, create, mkdir + file,
 *   chmod + overwrite, rename out of a subdirectory, symlink replaced;
 *   a forked child overwrites, appends and creates (its own journal,
 *   proc.<pid>/); more bytes into the pipe; the heap block changed.
 * step 3 (journal of checkpoint 2): append, overwrite, unlink, rename,
 *   unlink + rmdir (the directory goes to files.keep/), O_TRUNC, create,
 *   overwrite a renamed file, rename a symlink; a forked child overwrites,
 *   unlinks, makes a directory and a file; the heap block changed.
 * Any failure prints "FAIL ..." and exits 1. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *ctl, *token;
static uint64_t tok;
static unsigned char *heap;
#define HEAP (1u << 20)
static int pipefd[2] = {-1, -1};
static int ghost = -1;
static int step;

static void fail(const char *what, const char *arg)
{
    printf("FAIL %s %s: %s\n", what, arg, strerror(errno));
    fflush(stdout);
    _exit(1);
}

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* n bytes of text-like content, a function of the token, a name and a salt */
static char *content(const char *name, int salt, size_t n)
{
    char *b = malloc(n ? n : 1);
    if (!b) fail("malloc", name);
    uint64_t s = mix(tok ^ hash_str(name) ^ ((uint64_t)salt << 40));
    for (size_t i = 0; i < n; i++) {
        if (i % 8 == 0) s = mix(s + i);
        unsigned v = (unsigned)(s >> (8 * (i % 8))) & 0xff;
        b[i] = (i % 64 == 63) ? '\n' : (char)('!' + v % 90);
    }
    return b;
}

static void write_all(int fd, const char *b, size_t n, const char *what)
{
    while (n) {
        ssize_t w = write(fd, b, n);
        if (w < 0) { if (errno == EINTR) continue; fail("write", what); }
        b += w; n -= (size_t)w;
    }
}

static void create(const char *path, size_t n, int salt)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) fail("create", path);
    char *b = content(path, salt, n);
    write_all(fd, b, n, path);
    free(b);
    close(fd);
}

static void append(const char *path, size_t n, int salt)
{
    int fd = open(path, O_WRONLY | O_APPEND);
    if (fd < 0) fail("append", path);
    char *b = content(path, salt, n);
    write_all(fd, b, n, path);
    free(b);
    close(fd);
}

static void overwrite(const char *path, off_t off, size_t n, int salt)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0) fail("overwrite", path);
    char *b = content(path, salt, n);
    size_t done = 0;
    while (done < n) {
        ssize_t w = pwrite(fd, b + done, n - done, off + (off_t)done);
        if (w < 0) { if (errno == EINTR) continue; fail("pwrite", path); }
        done += (size_t)w;
    }
    free(b);
    close(fd);
}

static void must(int rc, const char *what, const char *arg)
{
    if (rc != 0) fail(what, arg);
}

static void fill_heap(int salt)
{
    uint64_t s = mix(tok ^ (uint64_t)salt);
    /* change every other 4 KiB page, so the next checkpoint stores pages */
    for (size_t pg = (size_t)salt % 2; pg < HEAP / 4096; pg += 2) {
        uint64_t *p = (uint64_t *)(heap + pg * 4096);
        for (size_t i = 0; i < 4096 / 8; i++) p[i] = s = mix(s + i);
    }
}

/* The heap block, the ghost file's bytes and the bytes in flight in the
 * pipe (read and written back: the pipe ends as it was). */
static uint64_t digest(void)
{
    uint64_t h = tok ^ (uint64_t)step;
    const uint64_t *p = (const uint64_t *)heap;
    for (size_t i = 0; i < HEAP / 8; i++) h = mix(h ^ p[i]) + i;
    static char buf[65536];
    ssize_t n = pread(ghost, buf, sizeof buf, 0);
    if (n < 0) fail("pread", "ghost");
    h = mix(h ^ (uint64_t)n);
    for (ssize_t i = 0; i < n; i++) h = mix(h ^ (unsigned char)buf[i]) + (uint64_t)i;
    int avail = 0;
    if (ioctl(pipefd[0], FIONREAD, &avail) != 0) fail("FIONREAD", "pipe");
    ssize_t got = 0;
    while (got < avail) {
        ssize_t r = read(pipefd[0], buf + got, (size_t)(avail - got));
        if (r < 0) { if (errno == EINTR) continue; fail("read", "pipe"); }
        if (r == 0) break;
        got += r;
    }
    write_all(pipefd[1], buf, (size_t)got, "pipe");
    h = mix(h ^ (uint64_t)got);
    for (ssize_t i = 0; i < got; i++) h = mix(h ^ (unsigned char)buf[i]) + (uint64_t)i;
    return h;
}

static void put_pipe(size_t n, int salt)
{
    char *b = content("pipe", salt, n);
    write_all(pipefd[1], b, n, "pipe");
    free(b);
}

static void ready(void)
{
    char go[4096], ping[4096];
    snprintf(go, sizeof go, "%s/go.%d", ctl, step);
    snprintf(ping, sizeof ping, "%s/ping", ctl);
    printf("ready %d pid %d token %s digest %016llx\n", step, (int)getpid(), token,
           (unsigned long long)digest());
    fflush(stdout);
    int ponged = 0;
    for (;;) {
        if (access(go, F_OK) == 0) return;
        if (!ponged && access(ping, F_OK) == 0) {
            printf("pong %d pid %d token %s digest %016llx\n", step, (int)getpid(), token,
                   (unsigned long long)digest());
            fflush(stdout);
            ponged = 1;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void child(void (*ops)(void))
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail("fork", "child");
    if (pid == 0) {
        ops();
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) fail("waitpid", "child");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL child status %d\n", st);
        fflush(stdout);
        _exit(1);
    }
}

static void child2(void)
{
    overwrite("h.txt", 2000, 5000, 21);
    append("sub/c2.txt", 1000, 22);
    create("child1.txt", 3000, 23);
}

static void child3(void)
{
    overwrite("h.txt", 9000, 2500, 31);
    must(unlink("child1.txt"), "unlink", "child1.txt");
    must(mkdir("sub3", 0755), "mkdir", "sub3");
    create("sub3/y.txt", 1500, 32);
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: integrity_job WORKDIR CTLDIR TOKEN\n");
        return 2;
    }
    ctl = argv[2];
    token = argv[3];
    tok = hash_str(token);
    if (chdir(argv[1]) != 0) fail("chdir", argv[1]);
    umask(022);
    heap = malloc(HEAP);
    if (!heap) fail("malloc", "heap");

    /* step 1 */
    step = 1;
    must(mkdir("sub", 0755), "mkdir", "sub");
    create("a.txt", 20000, 1);
    create("b.bin", 70000, 1);
    create("c.txt", 5000, 1);
    create("sub/d.txt", 9000, 1);
    create("e.log", 3000, 1);
    create("doomed.txt", 6000, 1);
    create("f.dat", 40000, 1);
    must(chmod("f.dat", 0640), "chmod", "f.dat");
    create("h.txt", 12000, 1);
    must(symlink("a.txt", "link"), "symlink", "link");
    ghost = open("ghost.tmp", O_RDWR | O_CREAT | O_EXCL, 0600);
    if (ghost < 0) fail("open", "ghost.tmp");
    {
        char *b = content("ghost", 1, 10000);
        write_all(ghost, b, 10000, "ghost");
        free(b);
    }
    must(unlink("ghost.tmp"), "unlink", "ghost.tmp");
    if (pipe(pipefd) != 0) fail("pipe", "");
    put_pipe(300, 1);
    memset(heap, 0, HEAP);
    fill_heap(1);
    ready();

    /* step 2: journal of the first checkpoint */
    step = 2;
    append("e.log", 5000, 2);
    overwrite("a.txt", 8000, 3000, 2);
    must(truncate("b.bin", 30000), "truncate", "b.bin");
    must(rename("c.txt", "sub/c2.txt"), "rename", "c.txt");
    must(unlink("doomed.txt"), "unlink", "doomed.txt");
    create("new.txt", 4000, 2);
    must(mkdir("sub2", 0755), "mkdir", "sub2");
    create("sub2/x.txt", 2000, 2);
    must(chmod("f.dat", 0600), "chmod", "f.dat");
    overwrite("f.dat", 10000, 6000, 2);
    must(rename("sub/d.txt", "d_moved.txt"), "rename", "sub/d.txt");
    must(unlink("link"), "unlink", "link");
    must(symlink("sub/c2.txt", "link2"), "symlink", "link2");
    child(child2);
    put_pipe(200, 2);
    fill_heap(2);
    ready();

    /* step 3: journal of the second checkpoint */
    step = 3;
    append("a.txt", 4000, 3);
    overwrite("b.bin", 20000, 7000, 3);
    must(unlink("e.log"), "unlink", "e.log");
    must(rename("new.txt", "renamed.txt"), "rename", "new.txt");
    must(unlink("sub2/x.txt"), "unlink", "sub2/x.txt");
    must(rmdir("sub2"), "rmdir", "sub2");
    {
        int fd = open("f.dat", O_WRONLY | O_TRUNC);
        if (fd < 0) fail("open O_TRUNC", "f.dat");
        char *b = content("f.dat", 3, 1000);
        write_all(fd, b, 1000, "f.dat");
        free(b);
        close(fd);
    }
    create("g.txt", 8000, 3);
    overwrite("d_moved.txt", 1000, 2000, 3);
    must(rename("link2", "link3"), "rename", "link2");
    child(child3);
    put_pipe(100, 3);
    fill_heap(3);
    ready();
    return 0;
}
