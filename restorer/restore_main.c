/* lazarus-restore CKPT_DIR STORE_DIR INDEX CTL_FD
 * Started by `lazarus restart` in the process that becomes the program (it
 * already has the program's PID).  Any failure before the final jump prints
 * one line and exits 1; the image and the user's files are never written. */
#include "restorer.h"
#include "restart_plan.h"
#include "lzsys.h"
#include "util.h"
#include "codec.h"
#include "lazy.h"
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/rseq.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char restorer_stack[1 << 20] __attribute__((aligned(64)));
static struct restore_ctx ctx;
/* A child of the plan going on in a copy of its parent's restorer: the
 * parent's context (its image and where it mapped each region). */
static struct restore_ctx parent_ctx;
static int inheriting;
static int tracing;
static int compress_codec = -1, compress_level; /* read before the initial stack (environment) goes */
static int drop_caps;
static int lazy; /* LZ_LAZY_ENV: `restart --lazy` */
static int rolled_fd = -1; /* LZ_ROLLED_ENV */
static uint64_t trace_t0;

/* LAZARUS_TRACE=1: time of each step on stderr (raw clock: the vDSO moves) */
void restore_trace(const char *step)
{
    if (!tracing) return;
    struct timespec ts;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    uint64_t now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    if (!trace_t0) trace_t0 = now;
    char buf[128];
    int n = snprintf(buf, sizeof buf, "lazarus-restore: %8.3f ms %s\n", (double)(now - trace_t0) / 1e6, step);
    if (write(2, buf, (size_t)n) < 0) return;
}

_Noreturn void restore_fail(const char *fmt, ...)
{
    char buf[1100];
    int n = snprintf(buf, sizeof buf, "FAILED cannot restart: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
    va_end(ap);
    /* The supervisor says why (once descriptors are restored, 2 is the
     * program's stderr: a user's file, or a pipe nobody reads yet) and stops
     * the job's other restorers (restore_tree.c).  Only if it cannot be told,
     * on our stderr. */
    if (restore_report_fd < 0 || send(restore_report_fd, buf, strlen(buf), MSG_NOSIGNAL) < 0) lz_err("%s", buf + 7);
    _exit(1);
}

/* The kernel-made stack (argv, environment) may sit where the program's own
 * stack was: leave it for one inside the restorer, then unmap it. */
static void unmap_initial_stack(void)
{
    size_t len;
    char *maps = lz_read_file("/proc/self/maps", &len);
    if (!maps) restore_fail("cannot read /proc/self/maps");
    maps[len - 1] = 0;
    for (char *l = maps; l && *l;) {
        char *nl = strchr(l, '\n');
        if (nl) *nl = 0;
        if (strstr(l, "[stack]")) {
            unsigned long a, b;
            if (sscanf(l, "%lx-%lx", &a, &b) == 2) munmap((void *)a, b - a);
        }
        l = nl ? nl + 1 : NULL;
    }
    free(maps);
}

/* The end of phase 1 of a restart of one process: the memory that depends
 * on no file is in place and every frame is proven; `lazarus restart` rolls
 * the files back only now, and lets us go on. */
static void wait_for_rollback(void)
{
    if (rolled_fd < 0) return;
    static const char loaded[] = "LOADED";
    if (send(restore_report_fd, loaded, sizeof loaded - 1, MSG_NOSIGNAL) < 0) _exit(1);
    char c;
    ssize_t r;
    while ((r = read(rolled_fd, &c, 1)) < 0 && errno == EINTR) {}
    if (r != 1) _exit(1); /* refused or failed: `lazarus restart` said why */
    close(rolled_fd);
    restore_trace("files rolled back");
}

static _Noreturn void restore_on_own_stack(void *unused)
{
    (void)unused;
    struct restore_ctx *rc = &ctx;
    if (inheriting) {
        restore_inherit(rc, &parent_ctx);
    } else {
        unmap_initial_stack();
        restore_park_vdso(rc);
    }
    restore_tree_objects(); /* what the processes of a job share: before the memory (shared memory's memfds) */
    restore_tree_children(rc->ckpt_dir, 0); /* those that would share little of this memory */
    restore_map_regions(rc, RESTORE_ANON);
    if (lazy && !restore_in_tree()) restore_lazy_register(rc); /* `restart --lazy`: one process */
    restore_fill_memory(rc, RESTORE_ANON);
    restore_trace("anonymous memory filled and verified, every frame checked");
    /* the others only now, so that they share this memory copy-on-write as
     * they did (restore_inherit.c) */
    restore_tree_children(rc->ckpt_dir, 1);
    wait_for_rollback();
    restore_map_regions(rc, RESTORE_FILES);
    restore_fill_memory(rc, RESTORE_FILES);
    restore_trace("file mappings filled and verified");
    restore_finish_protections(rc);
    restore_descriptors(rc);
    restore_process_state(rc);
    restore_trace("descriptors and process state restored");
    restore_threads_prepare(rc, drop_caps); /* their stacks: in the heap measured below */
    /* hand the runtime what it needs to know about this restart */
    struct lz_resume res;
    memset(&res, 0, sizeof res);
    res.magic = LZ_RESUME_MAGIC;
    res.index = rc->index;
    res.ctl_fd = -1;
    res.main_pid = restore_tree_main_pid(rc->img.proc->pid); /* the job's main program */
    for (size_t i = 0; i < rc->img.nfds; i++) {
        const struct lz_fd *f = &rc->img.fds[i];
        if (f->kind == LZ_FD_CTL) res.ctl_fd = f->fd;
        if (f->kind == LZ_FD_STDIO && f->fd >= 0 && f->fd < LZ_STDIO_FDS) res.stdio[f->fd / 8] |= (uint8_t)(1u << (f->fd % 8));
    }
    for (int k = 0; k < LZ_LAUNCHER_FDS; k++) res.launcher_ref[k] = rc->launcher_ref[k];
    snprintf(res.dir, sizeof res.dir, "%s", rc->store_dir);
    res.exe_fd = restore_exe_fd(rc);
    res.codec = compress_codec;
    res.level = compress_level;
    /* Our mappings, the heap as grown since restore_check_layout() looked. */
    uint64_t brk_end = ((uint64_t)sbrk(0) + 4095) & ~4095ull;
    int heap = -1;
    for (int i = 0; i < rc->nown; i++) if (rc->own[i].start < brk_end) heap = i;
    for (int i = 0; i < rc->nown && i < 4; i++) {
        res.unmap[i].start = rc->own[i].start;
        res.unmap[i].end = i == heap && brk_end > rc->own[i].end ? brk_end : rc->own[i].end;
    }
    memcpy((void *)rc->img.proc->resume_addr, &res, sizeof res);
    restore_mm(rc);               /* from here on: no malloc (brk is the program's) */
    restore_move_vdso(rc);        /* from here on: no libc time functions */
    restore_threads_and_jump(rc); /* each thread's state, timers, pending signals */
}

static void switch_to_own_stack(void)
{
    char *top = restorer_stack + sizeof restorer_stack - 64;
    __asm__ volatile("movq %0, %%rsp\n\tcall *%1\n\tud2" : : "r"(top), "r"(restore_on_own_stack), "D"(NULL) : "memory");
    __builtin_unreachable();
}

static void child_ctx(struct restore_ctx *child, const char *ckpt_dir)
{
    memset(child, 0, sizeof *child);
    child->store_dir = ctx.store_dir;
    child->index = ctx.index;
    child->ctl_fd = ctx.ctl_fd;
    if (!(child->ckpt_dir = strdup(ckpt_dir))) restore_fail("out of memory");
}

int restore_child_shares(const char *ckpt_dir, struct lz_image *img)
{
    struct restore_ctx child;
    child_ctx(&child, ckpt_dir);
    char why[1024];
    if (lz_manifest_load(child.ckpt_dir, &child.img, why, sizeof why) < 0) restore_fail("%s", why);
    *img = child.img;
    int worth = restore_inherit_worth(&ctx, &child);
    free((char *)child.ckpt_dir);
    return worth;
}

void restore_continue_child(const char *ckpt_dir, const struct lz_image *img)
{
    struct restore_ctx child;
    child_ctx(&child, ckpt_dir);
    child.img = *img;
    if (restore_check_layout_inherited(&child, &ctx) < 0) return; /* a fresh restorer finds a placement */
    parent_ctx = ctx;
    ctx = child;
    inheriting = 1;
    switch_to_own_stack(); /* the frames above are the parent's, done with */
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        lz_err("lazarus-restore is started by `lazarus restart`, not by hand");
        return 2;
    }
    tracing = getenv("LAZARUS_TRACE") != NULL;
    drop_caps = getenv("LAZARUS_DROP_CAPS") != NULL;
    lazy = getenv(LZ_LAZY_ENV) != NULL;
    restore_timer_ids_off = getenv("LAZARUS_TEST_NO_TIMER_IDS") != NULL; /* tests: a kernel before 6.17 */
    restore_inherit_init();
    const char *cz = getenv("LAZARUS_COMPRESS");
    if (cz && *cz && lz_codec_parse(cz, &compress_codec, &compress_level, NULL, 0) < 0) compress_codec = -1;
    restore_trace("started");
    const char *rolled = getenv(LZ_ROLLED_ENV);
    if (rolled && *rolled) rolled_fd = atoi(rolled);
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    /* Everything the restorer allocates stays in its brk heap, inside its
     * window: never let malloc use mmap (it could land on a program region). */
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_ARENA_MAX, 1);
    ctx.ckpt_dir = strdup(argv[1]);
    ctx.store_dir = strdup(argv[2]);
    uint64_t v;
    if (lz_parse_u64(argv[3], &v) < 0) restore_fail("bad checkpoint index %s", argv[3]);
    ctx.index = v;
    ctx.ctl_fd = atoi(argv[4]);
    restore_report_fd = ctx.ctl_fd;
    restore_tree_read(argv); /* a job of several processes: the plan */
    char why[1024];
    if (lz_manifest_load(ctx.ckpt_dir, &ctx.img, why, sizeof why) < 0) restore_fail("%s", why);
    /* Started without randomization, the restorer sits just below the stack
     * top; a restarted program inherits that mmap base, so its later
     * mappings may be exactly there at the next restart.  Then try random
     * placements (fresh ones each exec) until one is clear. */
    if (restore_check_layout(&ctx, why, sizeof why) < 0) {
        const char *att = getenv("LAZARUS_RESTORE_ATTEMPT");
        int attempt = att ? atoi(att) : 0;
        if (attempt >= 8) restore_fail("%s, in 8 placements; this image cannot be restored by this build", why);
        char next[48];
        snprintf(next, sizeof next, "LAZARUS_RESTORE_ATTEMPT=%d", attempt + 1);
        char cz[64];
        snprintf(cz, sizeof cz, "LAZARUS_COMPRESS=%s", getenv("LAZARUS_COMPRESS") ? getenv("LAZARUS_COMPRESS") : "");
        char plan[48];
        snprintf(plan, sizeof plan, "LAZARUS_PLAN_FD=%s", getenv("LAZARUS_PLAN_FD") ? getenv("LAZARUS_PLAN_FD") : "");
        char rolled[48];
        snprintf(rolled, sizeof rolled, LZ_ROLLED_ENV "=%d", rolled_fd);
        char *env[12] = {"GLIBC_TUNABLES=glibc.pthread.rseq=0", next, cz};
        int ne = 3;
        if (rolled_fd >= 0) env[ne++] = rolled;
        if (restore_in_tree()) env[ne++] = plan;
        if (drop_caps) env[ne++] = "LAZARUS_DROP_CAPS=1";
        if (lazy) env[ne++] = LZ_LAZY_ENV "=1";
        if (restore_timer_ids_off) env[ne++] = "LAZARUS_TEST_NO_TIMER_IDS=1";
        char inherit[64];
        const char *im = getenv("LAZARUS_INHERIT_MIN_KIB");
        if (im && strlen(im) < 32) {
            snprintf(inherit, sizeof inherit, "LAZARUS_INHERIT_MIN_KIB=%s", im);
            env[ne++] = inherit;
        }
        if (tracing) env[ne++] = "LAZARUS_TRACE=1";
        personality((unsigned long)personality(LZ_PERSONALITY_QUERY) & ~(unsigned long)ADDR_NO_RANDOMIZE);
        execve("/proc/self/exe", argv, env);
        restore_fail("%s, and cannot re-run the restorer elsewhere: %s", why, strerror(errno));
    }
    /* Drop glibc's own rseq registration: the program's is installed at the end. */
    if (__builtin_thread_pointer()) {
        if (__rseq_size)
            syscall(SYS_rseq, (char *)__builtin_thread_pointer() + __rseq_offset, LZ_RSEQ_ORIG_LEN, RSEQ_FLAG_UNREGISTER, RSEQ_SIG);
    }
    switch_to_own_stack();
}
