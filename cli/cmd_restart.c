/* lazarus restart [-d DIR] [--at N] */
#include "cli.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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

    struct supervisor s;
    memset(&s, 0, sizeof s);
    s.dir = dir;
    s.lock_fd = lock;
    s.status_fd = -1;
    s.interval = job.interval;
    s.keep = job.keep ? job.keep : 3;
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    s.next_index = (n > 0 ? v[n - 1] : index) + 1;
    free(v);
    s.restoring = 1;
    s.restore_index = index;
    s.listen_fd = ctl_listen(dir);
    if (s.listen_fd < 0) { lz_err("cannot create the control socket in %s: %s", o.dir, strerror(errno)); return 1; }
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) { lz_err("socketpair: %s", strerror(errno)); return 1; }
    s.ctl_fd = sp[0];
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    s.child = spawn_restorer(&s, sp[1], &img, ckpt, index);
    close(sp[1]);
    if (s.child < 0) { lz_err("cannot start the restorer: %s", strerror(errno)); return 1; }
    lz_image_free(&img);
    return supervise(&s);
}
