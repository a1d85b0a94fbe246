/* lazarus-fsd PATH STORE JOB DURABILITY CTLFD [INDEX [MODE]]
 * Started by the supervisor (cli/fs_mount.c), never by hand.  PATH's real
 * directory is opened before the mount, which then goes in place over PATH;
 * "READY" (or "ERR why") on the channel CTLFD says how that went.  INDEX:
 * a restarted job's checkpoint, whose emptied journal this daemon goes on
 * in; without it nothing is recorded until the first commit (there is
 * nothing before it to go back to).  Several threads serve the kernel; one
 * more serves the supervisor (fs_commit.c).  INDEX 0: not restarted.  MODE:
 * undo, or buffer:MAX:LOW (the thresholds in MiB; fs_buffer.c). */
#include "fsd.h"
#include "track.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

struct fs_daemon fsd;

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
    (void)userdata;
    /* No writeback cache in undo mode: with it the kernel keeps a file's
     * mtime itself and sends it in a setattr at a close or a sync, which can
     * reach us before the pages written back with it, so the file's real
     * mtime would be the daemon's later write, not what the program saw at
     * the commit, and a rollback would bring back the wrong one (measured:
     * 40 files of 40 after a sync).  LAZARUS_TEST_FSD_WRITEBACK=1 (test-only:
     * bench/fs_io.py measures what it gives, test_fs.py checks the mtimes)
     * turns it on, and then our writes keep the file's mtime (fs_write_buf).
     * The supervisor syncs the mount before each commit either way. */
    conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
    if (!fsd.buffer && getenv("LAZARUS_TEST_FSD_WRITEBACK") && (conn->capable & FUSE_CAP_WRITEBACK_CACHE))
        conn->want |= FUSE_CAP_WRITEBACK_CACHE;
    fsd.writeback = !!(conn->want & FUSE_CAP_WRITEBACK_CACHE);
    /* O_TRUNC comes as a truncation (setattr), which the engine records */
    conn->want &= ~(unsigned)FUSE_CAP_ATOMIC_O_TRUNC;
    /* buffer mode: no page cache either (every handle is direct_io, fs_ops_data.c):
     * the kernel's cache of a file is one for every process, the job's data
     * and the committed data are not */
    if (conn->capable & FUSE_CAP_SPLICE_READ) conn->want |= FUSE_CAP_SPLICE_READ;
}

static int parse_job(const char *s, uint64_t job[2])
{
    if (strlen(s) != 32) return -1;
    for (int k = 0; k < 2; k++) {
        job[k] = 0;
        for (int i = 0; i < 16; i++) {
            char c = s[k * 16 + i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) return -1;
            job[k] = job[k] << 4 | (uint64_t)d;
        }
    }
    return 0;
}

static void say(const char *fmt, const char *a, const char *b)
{
    char m[4300];
    snprintf(m, sizeof m, fmt, a, b);
    send(fsd.ctl, m, strlen(m), MSG_NOSIGNAL);
}

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "lazarus-fsd: started by `lazarus run --fs PATH`, not by hand\n");
        return 2;
    }
    uint64_t job[2];
    fsd.path = argv[1];
    fsd.ctl = atoi(argv[5]);
    if (parse_job(argv[3], job) < 0) { say("ERR bad job identity %s%s", argv[3], ""); return 2; }
    fsd.store = argv[2];
    fsd.job[0] = job[0];
    fsd.job[1] = job[1];
    fsd.self = getpid();
    fsd.sup = getppid();
    if (argc == 8 && !strncmp(argv[7], "buffer", 6)) {
        unsigned long long mx = 256, lo = 128;
        if (argv[7][6] == ':' && sscanf(argv[7] + 7, "%llu:%llu", &mx, &lo) != 2) { say("ERR bad mode %s%s", argv[7], ""); return 2; }
        fsd.buffer = 1;
        fb_max = (uint64_t)mx << 20;
        fb_low = (uint64_t)lo << 20;
    }
    /* terminal signals are the program's, not ours (the supervisor ends us) */
    signal(SIGINT, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    fsd.root_fd = open(fsd.path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    struct stat st;
    if (fsd.root_fd < 0 || fstat(fsd.root_fd, &st) < 0) { say("ERR %s: %s", fsd.path, strerror(errno)); return 1; }
    fsd.root.fd = fsd.root_fd;
    fsd.root.dev = st.st_dev;
    fsd.root.ino = st.st_ino;
    fsd.root.nlookup = 2;
    pthread_mutex_init(&fsd.root.times, NULL);
    if (fj_setup(argv[2], !strcmp(argv[4], "machine"), NULL, 0, job) < 0) { say("ERR cannot set up the file engine%s%s", "", ""); return 1; }
    fj_limit(fsd.path, fsd.root_fd);
    if (argc >= 7 && strtoull(argv[6], NULL, 10) > 0) {
        char why[300];
        if (fj_restarted(argv[2], strtoull(argv[6], NULL, 10), 0, why, sizeof why) < 0) { say("ERR %s%s", why, ""); return 1; }
    }
    struct fuse_lowlevel_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.init = fs_init;
    fs_ops_names(&ops);
    fs_ops_data(&ops);
    /* auto_unmount: fusermount3 stays beside us and unmounts if we die */
    char *fargv[] = {argv[0], "-o", "default_permissions,fsname=lazarus,subtype=lazarus,auto_unmount", NULL};
    struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
    /* libfuse and fusermount3 say their own lines: the supervisor says one */
    int err = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (null >= 0) dup2(null, 2);
    fsd.se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    int mounted = fsd.se && fuse_session_mount(fsd.se, fsd.path) == 0;
    if (err >= 0) { dup2(err, 2); close(err); }
    if (null >= 0) close(null);
    if (!fsd.se) { say("ERR cannot start a FUSE session for %s%s", fsd.path, ""); return 1; }
    if (!mounted) {
        const char *why = access("/dev/fuse", R_OK | W_OK) < 0 ? " (/dev/fuse: permission denied; a desktop's udev rule "
                                                                  "makes it 0666)" : "";
        say("ERR cannot mount a file system over %s%s", fsd.path, why);
        fuse_session_destroy(fsd.se);
        return 1;
    }
    send(fsd.ctl, "READY", 5, MSG_NOSIGNAL);
    pthread_t t;
    if (pthread_create(&t, NULL, fs_commit_thread, NULL) != 0) {
        fuse_session_unmount(fsd.se);
        return 1;
    }
    struct fuse_loop_config *cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_max_threads(cfg, 8);
    fuse_loop_cfg_set_idle_threads(cfg, 4);
    int r = fuse_session_loop_mt(fsd.se, cfg);
    fuse_loop_cfg_destroy(cfg);
    /* the loop ends when the commit thread unmounted (the job's end), or the
     * mount was taken away: either way the supervisor learns it from our exit */
    if (__atomic_load_n(&fs_ending, __ATOMIC_ACQUIRE)) pthread_join(t, NULL);
    else fuse_session_unmount(fsd.se);
    _exit(r < 0 ? 1 : 0);
}
