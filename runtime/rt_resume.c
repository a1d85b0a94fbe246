/* First steps of a restored program, still inside the checkpoint handler.
 * The restorer has already rebuilt memory, descriptors, every thread and its
 * kernel state; what is left is to drop the restorer (once every thread has
 * left its code), rejoin the new supervisor and let the other threads run.  Returning from the handler then restores every register and
 * the signal mask from the signal frame (rt_sigreturn). */
#include "rt.h"
#include "rt_api.h"
#include "track.h"
#include "rt_dirty.h"
#include "rt_map.h"
#include <string.h>
#include <sys/prctl.h>

void rt_resume(struct rt_ckpt *unused)
{
    (void)unused;
    struct lz_resume *r = &rt_resume_block;
    if (r->magic != LZ_RESUME_MAGIC) lz_sc1(SYS_exit_group, 125); /* cannot happen: restorer bug */
    rt_threads_landed(); /* every thread is out of the restorer's code before it goes */
    for (int i = 0; i < 4; i++)
        if (r->unmap[i].end > r->unmap[i].start) lz_sc2(SYS_munmap, r->unmap[i].start, r->unmap[i].end - r->unmap[i].start);
    if (r->exe_fd >= 0) {
        rt_set_exe(r->exe_fd);
        lz_sc1(SYS_close, r->exe_fd);
    }
    size_t n = rt_strlen(r->dir);
    /* the journals lived in the store: they do where the store is now (a journal
     * directory of the job's own stays where it was: on the files' file system) */
    int own = !rt.jdir[0] || !strcmp(rt.jdir, rt.dir);
    memcpy(rt.dir, r->dir, n + 1);
    if (own) memcpy(rt.jdir, rt.dir, n + 1);
    rt_exec_restarted_dir(rt.dir);
    rt.ctl_fd = r->ctl_fd;
    rt.parent = r->index;
    rt.active = 1;
    rt.pid = (int)lz_sc0(SYS_getpid);
    rt.main_pid = r->main_pid;
    rt.chan_pid = r->main_pid; /* every process got the restarter's channel: the others make their own */
    rt_term_forget(); /* a SIGTERM held when the checkpoint was taken ended that run */
    rt_own_channel();
    rt_launcher_restarted(r); /* the launcher's descriptors are the restarter's now */
    if (r->codec >= 0) { rt.codec = r->codec; rt.level = r->level; }
    if (rt.api_waiting) {
        rt.api_index = r->index;
        rt.api_result = 2;
        rt.api_done = 1;
    }
    r->magic = 0;
    /* the next checkpoint stores only what changes from here on */
    rt_dirty_forget();
    rt_regions_forget();
    rt_pages_forget();
    rt_map_seed(rt.dir, r->index, rt_track_all());
    rt.last_ckpt_ns = rt_now_ns(CLOCK_MONOTONIC); /* another boot's clock, maybe */
    char err[256];
    if (fj_restarted(rt.jdir, r->index, rt_is_main(), err, sizeof err) < 0) {
        char msg[320];
        int n = rt_fmt(msg, sizeof msg, "lazarus: %s; file changes from now on will not be rolled back\n", err);
        lz_sc3(SYS_write, 2, msg, n);
    }
    rt_notify("RESTORED %llu %ld", (unsigned long long)r->index, lz_sc0(SYS_getpid));
    /* the C API's state (rt_api.h), before any thread runs: a C API caller
     * returning RESTARTED finds its after-restart hooks due */
    rt_disable_release();
    rt_api_restarted();
    rt_hooks_restarted();
    rt_threads_go();
    rt_hooks_gate_wait(); /* this thread, too, goes on once the after-restart hooks ran */
}
