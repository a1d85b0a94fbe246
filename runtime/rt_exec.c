/* Every program the job execs belongs to the job.  The runtime reaches a new
 * program only through LD_PRELOAD, which an exec with a cleaned environment
 * (env -i, a subprocess given its own env) would drop: every exec and
 * posix_spawn is interposed and gets the job's variables back (LD_PRELOAD
 * and LAZARUS_*, as the runtime started with them).  A statically linked
 * program (Go, musl-static, busybox...) never reads LD_PRELOAD: it is named on
 * stderr before it starts; if it replaces the job's main program the
 * supervisor hears of it and refuses checkpoints with that reason, and any
 * other process of the job without the runtime is found and named by the
 * supervisor when a checkpoint is asked for (a process without the runtime
 * cannot answer one). */
#include "rt.h"
#include "track.h"
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define RUNTIME_NAME "liblazarus-rt.so"

/* 1: an ELF executable without a program interpreter (statically linked).
 * A script counts as its interpreter (one level, like the kernel's usual case). */
static int is_static(const char *path, int depth)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0; /* the exec fails the same way */
    unsigned char buf[4096];
    ssize_t n = pread(fd, buf, sizeof buf, 0);
    close(fd);
    if (n >= 4 && buf[0] == '#' && buf[1] == '!' && depth == 0) {
        char interp[256];
        size_t i = 2, k = 0;
        while (i < (size_t)n && (buf[i] == ' ' || buf[i] == '\t')) i++;
        while (i < (size_t)n && k + 1 < sizeof interp && buf[i] != ' ' && buf[i] != '\t' && buf[i] != '\n') interp[k++] = (char)buf[i++];
        interp[k] = 0;
        return k ? is_static(interp, 1) : 0;
    }
    if (n < (ssize_t)sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) || buf[EI_CLASS] != ELFCLASS64) return 0;
    const Elf64_Ehdr *eh = (const void *)buf;
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > (uint64_t)n ||
        (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > (uint64_t)n - eh->e_phoff)
        return 0; /* program headers beyond the first page: not worth a second read */
    const Elf64_Phdr *ph = (const void *)(buf + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_INTERP) return 0;
    return 1;
}

/* execvp's search of PATH, for the file it will run. */
static const char *resolve(const char *file, char *out, size_t len)
{
    if (strchr(file, '/')) return file;
    const char *path = getenv("PATH");
    if (!path) path = "/bin:/usr/bin";
    for (const char *p = path;; p++) {
        const char *e = strchr(p, ':');
        size_t dl = e ? (size_t)(e - p) : strlen(p);
        if (snprintf(out, len, "%.*s%s%s", (int)dl, p, dl ? "/" : "", file) < (int)len && access(out, X_OK) == 0) return out;
        if (!e) return file;
        p = e;
    }
}

/* The job's variables as this process started with them ("NAME=value"). */
static const char *const job_names[] = {"LAZARUS_DIR", "LAZARUS_CTL_FD", "LAZARUS_PID", "LAZARUS_DURABILITY",
                                        "LAZARUS_EXCLUDE", "LAZARUS_COMPRESS", "LAZARUS_TCP", "LAZARUS_COMPACT", "LAZARUS_SPOOL", "LAZARUS_JOB", "LAZARUS_INHERITED", "LAZARUS_TRACE", "LAZARUS_JOURNAL_DIR",
                                        "LAZARUS_NO_FORK", "LAZARUS_TEST_NO_DIRTY", "LAZARUS_HOLD_TERM", "LAZARUS_CLONE_MIN",
                                        "LAZARUS_NO_INCREMENTAL", "LAZARUS_MINTIME_MS", "LAZARUS_CHECK_EXCLUSIONS",
                                        "LAZARUS_TEST_JOIN_DELAY_MS" /* tests (rt_init.c) */, "LD_PRELOAD"};
#define NJOB (sizeof job_names / sizeof job_names[0])
static char *job_vars[NJOB];

void rt_exec_remember_env(void)
{
    for (size_t i = 0; i < NJOB; i++) {
        if (!strcmp(job_names[i], "LAZARUS_INHERITED")) continue; /* made at each exec (rt_launcher_env) */
        const char *v = rt_env(job_names[i]);
        if (!v) continue;
        size_t n = strlen(job_names[i]), m = strlen(v);
        job_vars[i] = malloc(n + m + 2);
        if (job_vars[i]) { memcpy(job_vars[i], job_names[i], n); job_vars[i][n] = '='; memcpy(job_vars[i] + n + 1, v, m + 1); }
    }
}

void rt_exec_restarted_dir(const char *dir)
{
    static char var[LZ_PATH_MAX + 16];
    if (!job_vars[0]) return;
    size_t n = strlen(dir);
    if (n + sizeof "LAZARUS_DIR=" > sizeof var) return;
    memcpy(var, "LAZARUS_DIR=", sizeof "LAZARUS_DIR=" - 1);
    memcpy(var + sizeof "LAZARUS_DIR=" - 1, dir, n + 1);
    job_vars[0] = var; /* the old string is leaked: it may be the one in use */
}

static const char preload_eq[] = "LD_PRELOAD=";
#define PRELOAD_EQ_LEN (sizeof preload_eq - 1)

static int is_job_var(const char *e)
{
    if (!strncmp(e, "LAZARUS_", 8)) return 1;
    return !strncmp(e, preload_eq, PRELOAD_EQ_LEN);
}

/* The environment a program of the job starts with: the caller's, with the
 * job's variables put back (LD_PRELOAD: the runtime first, then whatever
 * else the caller preloads).  In `out` (cap entries) and `buf`; envp itself
 * when not in a job or when it does not fit (the exec still happens). */
#define ENV_MAX 4096
struct job_env { char *v[ENV_MAX]; char chan[48], parent[48], preload[LZ_PATH_MAX], inherited[RT_MAX_INHERITED * 48 + 32]; };

static char *const *with_job(char *const envp[], struct job_env *je)
{
    if (!rt.active || !job_vars[0]) return envp;
    size_t n = 0;
    const char *their_preload = NULL;
    for (size_t i = 0; envp && envp[i]; i++) {
        if (is_job_var(envp[i])) {
            if (!strncmp(envp[i], preload_eq, PRELOAD_EQ_LEN)) their_preload = envp[i] + PRELOAD_EQ_LEN;
            continue;
        }
        if (n + NJOB + 4 >= ENV_MAX) return envp;
        je->v[n++] = envp[i];
    }
    for (size_t i = 0; i < NJOB; i++) {
        if (!job_vars[i]) continue;
        if (!strcmp(job_names[i], "LD_PRELOAD") && their_preload && *their_preload && !strstr(their_preload, RUNTIME_NAME)) {
            /* ours, then theirs */
            snprintf(je->preload, sizeof je->preload, "%s %s", job_vars[i], their_preload);
            je->v[n++] = je->preload;
        } else {
            je->v[n++] = job_vars[i];
        }
    }
    /* the launcher's descriptors it has (always set: without it a program takes its own 0/1/2 for them) */
    rt_launcher_env(je->inherited, sizeof je->inherited);
    je->v[n++] = je->inherited;
    /* whose channel the new program inherits: a child makes its own (rt_job.c) */
    snprintf(je->chan, sizeof je->chan, "LAZARUS_CHAN_PID=%d", rt.chan_pid);
    je->v[n++] = je->chan;
    if (rt.parent) {
        snprintf(je->parent, sizeof je->parent, "LAZARUS_PARENT=%llu", (unsigned long long)rt.parent);
        je->v[n++] = je->parent;
    }
    je->v[n] = NULL;
    return je->v;
}

/* Before an exec: name the program if it will run without the runtime. */
static void check_exec(const char *file, int search, int replaces)
{
    if (!rt.active) return; /* not in a job */
    char buf[LZ_PATH_MAX];
    const char *path = search ? resolve(file, buf, sizeof buf) : file;
    if (!is_static(path, 0)) return;
    fprintf(stderr, "lazarus: process %d starts %s, which is statically linked: Lazarus cannot checkpoint it; "
                    "checkpoints are refused while it runs\n", getpid(), path);
    /* the job's main program itself is being replaced (not a vfork child sharing its memory) */
    if (replaces && lz_sc0(SYS_getpid) == rt.pid && rt_is_main()) rt_notify("UNCHECKPOINTABLE %s, which is statically linked", path);
}

/* The exec failed: the program (with the runtime) runs on. */
static int exec_failed(void)
{
    int e = errno;
    if (rt.active && lz_sc0(SYS_getpid) == rt.pid && rt_is_main()) rt_notify("CHECKPOINTABLE");
    errno = e;
    return -1;
}

extern char **environ;

/* The new image's environment carries the file journal over (files/track.h:
 * the same process goes on with its journal, a vfork or posix_spawn child
 * starts its own inside it): envp with LAZARUS_FJ set, or without it when no
 * interval is open.  The vector is on the stack (a vfork child must not
 * malloc, and a mapping it made would stay in its parent). */
struct exec_call {
    int (*fn)(struct exec_call *c, char *const envp[]);
    const char *path;
    char *const *argv;
    int fd;
    pid_t *pid;
    const posix_spawn_file_actions_t *fa;
    const posix_spawnattr_t *at;
};

static int is_fj(const char *e) { return !strncmp(e, FJ_ENV "=", sizeof FJ_ENV); }

/* exec: -1 with errno (only if it failed); posix_spawn: its result */
static int with_journal(struct exec_call *c, char *const envp[], int spawn)
{
    char var[192];
    int r = fj_exec_prepare(var, sizeof var);
    if (r < 0) {
        fj_report(spawn ? "posix_spawn" : "exec", c->path, r); /* the new image could not record: refused */
        if (spawn) return -r;
        errno = -r;
        return -1;
    }
    size_t n = 0, old = 0;
    for (; envp && envp[n]; n++) old += is_fj(envp[n]) != 0;
    if (!r && !old) return c->fn(c, envp);
    size_t bytes = 0;
    char *small[n < 4096 ? n + 2 : 1], **env = small;
    if (n >= 4096) {
        bytes = (n + 2) * sizeof *env;
        long a = lz_sc6(SYS_mmap, 0, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (a < 0 && a >= -LZ_MAX_ERRNO) {
            if (r) fj_exec_failed();
            if (spawn) return ENOMEM;
            errno = ENOMEM;
            return -1;
        }
        env = (char **)a;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!is_fj(envp[i])) env[k++] = envp[i];
    if (r) env[k++] = var;
    env[k] = NULL;
    int rc = c->fn(c, env);
    int e = errno;
    if (r) fj_exec_failed(); /* the exec failed, or the spawned child has exec'd */
    if (bytes) lz_sc2(SYS_munmap, env, bytes);
    errno = e;
    return rc;
}

static int do_execve(struct exec_call *c, char *const envp[])
{
    REAL(int, execve, const char *, char *const[], char *const[]);
    return real_execve(c->path, c->argv, envp);
}

static int do_execvpe(struct exec_call *c, char *const envp[])
{
    REAL(int, execvpe, const char *, char *const[], char *const[]);
    return real_execvpe(c->path, c->argv, envp);
}

static int do_fexecve(struct exec_call *c, char *const envp[])
{
    REAL(int, fexecve, int, char *const[], char *const[]);
    return real_fexecve(c->fd, c->argv, envp);
}

static int do_spawn(struct exec_call *c, char *const envp[])
{
    REAL(int, posix_spawn, pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
         char *const[], char *const[]);
    return real_posix_spawn(c->pid, c->path, c->fa, c->at, c->argv, envp);
}

static int do_spawnp(struct exec_call *c, char *const envp[])
{
    REAL(int, posix_spawnp, pid_t *, const char *, const posix_spawn_file_actions_t *, const posix_spawnattr_t *,
         char *const[], char *const[]);
    return real_posix_spawnp(c->pid, c->path, c->fa, c->at, c->argv, envp);
}

RT_API int execve(const char *path, char *const argv[], char *const envp[])
{
    check_exec(path, 0, 1);
    struct exec_call c = {.fn = do_execve, .path = path, .argv = argv};
    struct job_env je;
    with_journal(&c, with_job(envp, &je), 0);
    return exec_failed();
}

RT_API int execv(const char *path, char *const argv[]) { return execve(path, argv, environ); }

RT_API int execvpe(const char *file, char *const argv[], char *const envp[])
{
    check_exec(file, 1, 1);
    struct exec_call c = {.fn = do_execvpe, .path = file, .argv = argv};
    struct job_env je;
    with_journal(&c, with_job(envp, &je), 0);
    return exec_failed();
}

RT_API int execvp(const char *file, char *const argv[]) { return execvpe(file, argv, environ); }

RT_API int fexecve(int fd, char *const argv[], char *const envp[])
{
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    check_exec(path, 0, 1);
    struct exec_call c = {.fn = do_fexecve, .path = path, .argv = argv, .fd = fd};
    struct job_env je;
    with_journal(&c, with_job(envp, &je), 0);
    return exec_failed();
}

/* execl, execlp, execle: glibc's call execve/execvpe inside libc, out of
 * our reach, so they are rebuilt on the vector forms. */
#define MAX_ARGS 4096
#define COLLECT(first, ap, argv)                                              \
    do {                                                                      \
        int n_ = 0;                                                           \
        argv[n_++] = (char *)(first);                                         \
        while (argv[n_ - 1] && n_ < MAX_ARGS) argv[n_++] = va_arg(ap, char *); \
        if (argv[n_ - 1]) { errno = E2BIG; va_end(ap); return -1; }           \
    } while (0)

RT_API int execl(const char *path, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv);
    va_end(ap);
    return execve(path, argv, environ);
}

RT_API int execlp(const char *file, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv);
    va_end(ap);
    return execvpe(file, argv, environ);
}

RT_API int execle(const char *path, const char *arg, ...)
{
    char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, arg);
    COLLECT(arg, ap, argv);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

RT_API int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at,
                       char *const argv[], char *const envp[])
{
    check_exec(path, 0, 0);
    struct exec_call c = {.fn = do_spawn, .path = path, .argv = argv, .pid = pid, .fa = fa, .at = at};
    struct job_env je;
    return with_journal(&c, with_job(envp, &je), 1);
}

RT_API int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *at,
                        char *const argv[], char *const envp[])
{
    check_exec(file, 1, 0);
    struct exec_call c = {.fn = do_spawnp, .path = file, .argv = argv, .pid = pid, .fa = fa, .at = at};
    struct job_env je;
    return with_journal(&c, with_job(envp, &je), 1);
}

/* system() and popen() start /bin/sh with libc's own posix_spawn, out of our
 * reach: the journal goes through the environment they pass, environ, for
 * the length of the call (another thread's getenv meanwhile sees it too). */
static int env_journal(const char *what, const char *cmd)
{
    char var[192];
    int r = fj_exec_prepare(var, sizeof var);
    if (r < 0) { fj_report(what, cmd, r); errno = -r; return -1; }
    if (r > 0 && setenv(FJ_ENV, var + sizeof FJ_ENV, 1) < 0) { fj_exec_failed(); r = 0; }
    return r;
}

static void env_journal_done(int r)
{
    int e = errno;
    if (r > 0) { unsetenv(FJ_ENV); fj_exec_failed(); }
    errno = e;
}

RT_API int system(const char *cmd)
{
    REAL(int, system, const char *);
    if (!cmd) return real_system(cmd);
    int r = env_journal("system", cmd);
    if (r < 0) return -1;
    int rc = real_system(cmd);
    env_journal_done(r);
    return rc;
}

RT_API FILE *popen(const char *cmd, const char *type)
{
    REAL(FILE *, popen, const char *, const char *);
    int r = env_journal("popen", cmd);
    if (r < 0) return NULL;
    FILE *f = real_popen(cmd, type);
    env_journal_done(r);
    return f;
}
