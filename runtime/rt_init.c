/* Runtime start-up, shared helpers and the C API entry point. */
#include "rt.h"
#include "rt_api.h"
#include "track.h"
#include "jobid.h"
#include "codec.h"
#include "rt_dirty.h"
#include "rt_map.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rt_state rt = { .ctl_fd = -1 };
struct lz_resume rt_resume_block;

void *arena_alloc(struct rt_arena *a, size_t n)
{
    n = (n + 63) & ~(size_t)63;
    if (n > a->cap - a->used) return NULL;
    void *p = a->base + a->used;
    a->used += n;
    return p;
}

uint32_t strings_add(struct rt_strings *s, const char *str)
{
    if (!str || !*str) return 0;
    size_t n = rt_strlen(str) + 1;
    if (n > s->cap - s->len) { s->overflow = 1; return 0; }
    memcpy(s->buf + s->len, str, n);
    uint32_t off = (uint32_t)s->len;
    s->len += n;
    return off;
}

size_t rt_strlen(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/* vsnprintf of glibc takes no locks for plain %d/%s/%x conversions into a
 * string, which is all the runtime uses it for. */
int rt_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return n;
}

uint64_t rt_now_ns(int clock)
{
    struct timespec ts;
    lz_sc2(SYS_clock_gettime, clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

long rt_read_file(const char *path, char *buf, size_t cap)
{
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return fd;
    size_t n = 0;
    while (n < cap) {
        long r = lz_sc3(SYS_read, fd, buf + n, cap - n);
        if (r == -EINTR) continue;
        if (r <= 0) { if (r < 0) n = 0; break; }
        n += (size_t)r;
    }
    lz_sc1(SYS_close, fd);
    return (long)n;
}

void rt_notify(const char *fmt, ...)
{
    if (rt.ctl_fd < 0) return;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    long r;
    do r = lz_sc6(SYS_sendto, rt.ctl_fd, (long)buf, n, MSG_NOSIGNAL, 0, 0);
    while (r == -EINTR);
}

/* A forked child belongs to the job too.  It shares nothing with its
 * parent's checkpoints: the parent's map of its last checkpoint (shared
 * memory), its write tracker (a userfaultfd and pagemap of the parent's
 * memory) and its channel to the supervisor are let go, and its first
 * checkpoint stores all of it. */
/* The checkpoint signal waits while fork is under way: a child must not
 * take one before this handler has made it a process of its own (a parent's
 * one sent meanwhile is taken after). */
static __thread uint64_t fork_saved_mask;

static void rt_atfork_prepare(void)
{
    uint64_t urg = 1ull << (SIGURG - 1);
    lz_sc4(SYS_rt_sigprocmask, SIG_BLOCK, &urg, &fork_saved_mask, LZ_KSIGSET_SIZE);
}

static void rt_atfork_parent(void) { lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &fork_saved_mask, NULL, LZ_KSIGSET_SIZE); }

static void rt_atfork_child_body(void);

static void rt_atfork_child(void)
{
    rt_atfork_child_body();
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &fork_saved_mask, NULL, LZ_KSIGSET_SIZE);
}

static void rt_atfork_child_body(void)
{
    fj_after_fork(); /* its file changes go to a journal of its own (files/journal.h) */
    rt_timers_forked();
    if (!rt.active) return;
    rt_term_forget(); /* its parent's held SIGTERM is not its own */
    rt.pid = (int)lz_sc0(SYS_getpid);
    rt_disable_forked(); /* the C API's sections and hooks (rt_api.h) */
    rt_hooks_forked();
    rt_map_fork_child();
    rt_dirty_reset();
    rt_regions_forget();
    rt_pages_forget();
    if (!rt.nodirty) rt_track_all();
    rt_own_channel();
}

/* The runtime's fork handlers come before every other: glibc runs child
 * handlers in the order they were registered, and a library whose
 * constructor ran before ours (one the program links: initialised before a
 * preloaded one) would otherwise run its child handler while the child still
 * blocks the checkpoint signal and is not yet a process of the job of its own
 * -- a thread it makes there (tclsh does) inherits that mask and can never
 * stop for a checkpoint.  Every registration (pthread_atfork calls
 * __register_atfork) registers ours first; our prepare handler then runs
 * last, next to the fork. */
extern void *__dso_handle;
typedef int (*register_atfork_fn)(void (*)(void), void (*)(void), void (*)(void), void *);

static register_atfork_fn real_register_atfork(void)
{
    static register_atfork_fn f;
    if (!f) f = (register_atfork_fn)dlsym(RTLD_NEXT, "__register_atfork");
    return f;
}

static void rt_atfork_register(void)
{
    static int done;
    register_atfork_fn f = real_register_atfork();
    if (!f || __atomic_exchange_n(&done, 1, __ATOMIC_ACQ_REL)) return;
    f(rt_atfork_prepare, rt_atfork_parent, rt_atfork_child, &__dso_handle);
}

RT_API int __register_atfork(void (*prepare)(void), void (*parent)(void), void (*child)(void), void *dso)
{
    rt_atfork_register();
    register_atfork_fn f = real_register_atfork();
    return f ? f(prepare, parent, child, dso) : ENOMEM;
}

/* The environment as the kernel gave it.  getenv and setenv are not used
 * before the program's main: a program may replace them (bash does, and its
 * getenv sees nothing once its setenv has been called before its own set-up). */
extern char **environ;

const char *rt_env(const char *name)
{
    size_t n = strlen(name);
    for (char **e = environ; e && *e; e++)
        if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
    return NULL;
}

static void rt_env_drop(const char *name)
{
    size_t n = strlen(name), k = 0;
    for (size_t i = 0; environ && environ[i]; i++)
        if (strncmp(environ[i], name, n) || environ[i][n] != '=') environ[k++] = environ[i];
    if (environ) environ[k] = NULL;
}

/* File tracking runs in every process of the job, a member or not (one
 * that closed its channel still records): it is set up wherever LAZARUS_DIR
 * is, and an interval is joined where LAZARUS_FJ says (an exec, a vfork or
 * posix_spawn child: files/track.h).  main_process: the job's main program,
 * whose journal is the top one of a checkpoint directory. */
static void rt_files_start(int main_process)
{
    const char *dir = rt_env("LAZARUS_DIR"), *dur = rt_env("LAZARUS_DURABILITY"), *jv = rt_env(FJ_ENV);
    if (!dir || strlen(dir) >= sizeof rt.dir) return;
    const char *job = rt_env("LAZARUS_JOB");
    if (!job || lz_job_id_parse(job, rt.job) < 0) {
        fprintf(stderr, "lazarus: no job identity (LAZARUS_JOB); files will not be rolled back\n");
        return;
    }
    /* the journals may live elsewhere (run --journal-dir: on the file system
     * of the job's files); the store is then excluded like the journals are */
    const char *jd = rt_env("LAZARUS_JOURNAL_DIR"), *ex = rt_env("LAZARUS_EXCLUDE");
    static char excl[LZ_PATH_MAX + 4200];
    if (jd && *jd && strlen(jd) < sizeof rt.jdir) {
        memcpy(rt.jdir, jd, strlen(jd) + 1);
        snprintf(excl, sizeof excl, "%s%s%s", dir, ex && *ex ? "\n" : "", ex ? ex : "");
        ex = excl;
    } else {
        memcpy(rt.jdir, dir, strlen(dir) + 1);
    }
    if (fj_setup(rt.jdir, dur && !strcmp(dur, "machine"), ex, main_process, rt.job) < 0) {
        fprintf(stderr, "lazarus: cannot set up file tracking; files will not be rolled back\n");
        return;
    }
    rt_shmaps_start(); /* stores into shared file mappings are seen through write protection */
    char err[200];
    if (jv && fj_adopt(jv, err, sizeof err) < 0)
        fprintf(stderr, "lazarus: process %d: %s; its file changes will not be rolled back\n", getpid(), err);
    if (jv) rt_env_drop(FJ_ENV); /* its descriptor is this image's now; exec passes a fresh one */
    rt_atfork_register();
}

/* In every process of a job: the supervisor started the main program with
 * LAZARUS_PID (its PID), LAZARUS_DIR and the control socket's number; its
 * children and the programs they exec inherit them (rt_exec.c). */
__attribute__((constructor)) static void rt_init(void)
{
    const char *pid = rt_env("LAZARUS_PID"), *dir = rt_env("LAZARUS_DIR"), *fd = rt_env("LAZARUS_CTL_FD");
    int self_main = pid && atoi(pid) == getpid();
    if (!pid || !dir || !fd || strlen(dir) >= sizeof rt.dir) { rt_files_start(self_main); return; }
    int cfd = atoi(fd);
    struct stat cst;
    if (cfd < 0 || fstat(cfd, &cst) < 0 || !S_ISSOCK(cst.st_mode)) { rt_files_start(self_main); return; }
    const char *parent = rt_env("LAZARUS_PARENT"), *chan = rt_env("LAZARUS_CHAN_PID");
    rt.parent = parent ? strtoull(parent, NULL, 10) : 0;
    memcpy(rt.dir, dir, strlen(dir) + 1);
    rt.ctl_fd = cfd;
    rt.main_pid = atoi(pid);
    rt.chan_pid = chan ? atoi(chan) : rt.main_pid;
    rt.active = 1;
    rt.pid = getpid();
    rt_launcher_start(cfd);
    rt_exec_remember_env();
    rt_files_start(rt_is_main());
    const char *cz = rt_env("LAZARUS_COMPRESS");
    char cerr[160];
    rt.codec = LZ_CODEC_LZ4; /* nearly zstd's ratio on checkpoint data, and restores several times faster (bench/) */
    if (cz && *cz && lz_codec_parse(cz, &rt.codec, &rt.level, cerr, sizeof cerr) < 0) {
        fprintf(stderr, "lazarus: %s; using lz4\n", cerr);
        rt.codec = LZ_CODEC_LZ4;
    }
    const char *cp = rt_env("LAZARUS_COMPACT");
    rt.compact = cp && *cp == '1';
    const char *nf = rt_env("LAZARUS_NO_FORK");
    rt.nofork = nf && *nf == '1';
    const char *sp = rt_env("LAZARUS_SPOOL");
    rt.spool = sp && *sp == '1';
    rt.tracing = rt_env("LAZARUS_TRACE") != NULL;
    const char *nd = rt_env("LAZARUS_TEST_NO_DIRTY");
    rt.nodirty = nd && *nd == '1';
    const char *ni = rt_env("LAZARUS_NO_INCREMENTAL"), *mt = rt_env("LAZARUS_MINTIME_MS");
    rt.noincr = ni && *ni == '1';
    if (rt.noincr) rt.nodirty = 1; /* no write tracking either: no faults, as libckpt without incremental */
    rt.mintime_ns = mt ? strtoull(mt, NULL, 10) * 1000000ull : 0;
    rt.last_ckpt_ns = rt_now_ns(CLOCK_MONOTONIC);
    rt_track_all(); /* what the program maps later is tracked from its first checkpoint on */
    rt_atfork_register();
    /* tests: a start (an exec) the supervisor's death overtakes before the handler is there */
    const char *jd = rt_env("LAZARUS_TEST_JOIN_DELAY_MS");
    if (jd) {
        long ms = strtol(jd, NULL, 10);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
    }
    rt_install_handler();
    rt_term_start();
    rt_own_channel();
    rt_notify("HELLO %d", getpid());
}

/* lazarus_checkpoint() in liblazarus.so finds this with dlsym.  Asks the
 * supervisor for a checkpoint and waits until the handler has run. */
RT_API int lazarus_rt_checkpoint(unsigned long long *index)
{
    return rt_api_checkpoint(index, "API");
}

/* Asks the supervisor (`what`: API, or HERE for lazarus_checkpoint_here) and
 * waits until the handler has run. */
int rt_api_checkpoint(unsigned long long *index, const char *what)
{
    if (!rt.active || rt.ctl_fd < 0) return 0;
    if (rt_disable_depth() > 0 || rt_hooks_self()) {
        /* the checkpoint would wait for this very call to end */
        rt_api_set_error(rt_hooks_self() ? "a checkpoint cannot be asked for from a lazarus_on() hook"
                                         : "a checkpoint cannot be asked for inside a lazarus_disable() section");
        if (index) *index = 0;
        return -1;
    }
    /* one C API checkpoint at a time: the result is the process's (rt.api_*); a
     * second thread's call waits, then takes a checkpoint of its own */
    static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&one);
    /* the checkpoint may run on any thread: this one waits on api_done (a futex the
     * checkpointing thread wakes), the checkpoint signal open so it can stop */
    uint64_t urg = 1ull << (LZ_SIGCKPT - 1), kold;
    lz_sc4(SYS_rt_sigprocmask, SIG_UNBLOCK, &urg, &kold, LZ_KSIGSET_SIZE);
    rt.api_done = 0;
    rt.api_waiting = 1;
    rt.api_here = what[0] == 'H';
    rt_notify("%s", what);
    while (!rt.api_done) {
        if (fcntl(rt.ctl_fd, F_GETFD) < 0) { rt.api_result = -1; break; }
        rt_futex_wait_ns((volatile uint32_t *)&rt.api_done, 0, 100000000ull);
    }
    rt.api_waiting = 0;
    rt.api_here = 0;
    int result = rt.api_result;
    uint64_t got = rt.api_index;
    lz_sc4(SYS_rt_sigprocmask, SIG_SETMASK, &kold, NULL, LZ_KSIGSET_SIZE);
    if (result < 0) rt_api_set_error(rt.ctl_fd < 0 || fcntl(rt.ctl_fd, F_GETFD) < 0 ? "the Lazarus supervisor is gone" : rt_api_last_reason());
    pthread_mutex_unlock(&one);
    rt_hooks_wait_idle(); /* the hooks of this checkpoint (after it, or after the restart) have run */
    if (index) *index = got;
    return result;
}
