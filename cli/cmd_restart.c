/* lazarus restart [-d DIR] [--at N] */
#include "cli.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus restart [-d DIR] [--at N]\n"
    "Resume the job in DIR from checkpoint N (default: the newest) and stay in the\n"
    "foreground as its supervisor, with the settings it was started with.\n"
    "Exits with the program's status (128+signal if it was killed).\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    the checkpoint to resume from (see `lazarus list`)\n";

int cmd_restart(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "restart", "da", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("restart: unexpected argument '%s'", argv[first]); return 2; }
    char *dir = abs_dir(o.dir);
    char why[1200];
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return 1; }
    int lock = lz_store_lock(dir);
    if (lock < 0) {
        lz_err(errno == EWOULDBLOCK ? "a job is already running with %s; it cannot be restarted twice"
                                    : "cannot lock the checkpoint store %s", o.dir);
        return 1;
    }
    lz_store_cleanup_tmp(dir);
    uint64_t index;
    if (lz_store_pick(dir, o.have_at, o.at, &index, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    char ckpt[LZ_PATH_MAX + 64];
    lz_ckpt_path(ckpt, sizeof ckpt, dir, index);
    struct lz_image img;
    char inner[1024];
    if (lz_manifest_load(ckpt, &img, inner, sizeof inner) < 0) {
        lz_err("cannot restart: checkpoint %" PRIu64 " is damaged: %s", index, inner);
        return 1;
    }
    if (check_identity(&img, why, sizeof why) < 0) { lz_err("cannot restart from checkpoint %" PRIu64 ": %s", index, why); return 1; }
    struct lz_job job;
    if (lz_job_read(dir, &job) < 0) { job.interval = 600; job.keep = 3; }
    snprintf(job.state, sizeof job.state, "running");
    lz_job_write(dir, &job);

    uint64_t *v;
    int n = lz_store_list(dir, &v);
    uint64_t next = (n > 0 ? v[n - 1] : index) + 1; /* indices are never reused */
    free(v);
    struct supervisor s;
    int child_ctl = supervisor_prepare(&s, dir, o.dir, lock, &job, next);
    if (child_ctl < 0) return 1;
    s.restoring = 1;
    s.restore_index = index;
    s.child = spawn_restorer(&s, child_ctl, &img, ckpt, index);
    close(child_ctl);
    if (s.child < 0) { lz_err("cannot start the restorer: %s", strerror(errno)); return 1; }
    lz_image_free(&img);
    return supervise(&s);
}
