/* The commit protocol, daemon side: the supervisor's channel (a socketpair,
 * one message a datagram).  At checkpoint N, while every process of the
 * job is stopped (or, files-only, at the commit) and once the supervisor has
 * synced the mount (what the kernel held reached us and was recorded):
 *   CLOSE <DIR/tmp.N.PID>   interval N closes: no change runs (the gate; those
 *                           under way finish), the next interval's journal is
 *                           made there and recording goes on in it   -> OK | ERR why
 * The supervisor moves that journal into checkpoint N as proc.<our pid>/
 * when N commits; if N fails, it is the failed checkpoint's journal (jrnl.N),
 * which a rollback applies too, as it does a process's.  This is what the
 * runtime does in a process's pause (runtime/rt_writer.c).
 * Buffer mode (fs_buffer.c) adds to CLOSE, before the switch: the undo of
 * what the interval held back (recorded in the journal of the interval that
 * ends: rolling back to an earlier checkpoint undoes it), then the redo log
 * DIR/tmp.N.PID/fsbuf.redo, on the disk with its FIN before OK.  And:
 *   APPLY N                 checkpoint N is committed (renamed, synced):
 *                           its held data is written to the files -> OK | ERR
 *   FINISH                  the program ended by itself: what it wrote since
 *                           is written too (its end is its last commit) -> OK
 * A failed checkpoint gets no APPLY: its data stays held and goes into the
 * next CLOSE's log with what follows it.
 * End of file (the supervisor is gone, or the job ended): unmount and exit;
 * what is held and not committed is dropped (a restart goes back to the
 * last commit, whose files never saw it). */
#include "fsd.h"
#include "track.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int fs_ending;

static void answer(const char *msg) { send(fsd.ctl, msg, strlen(msg), MSG_NOSIGNAL); }

void *fs_commit_thread(void *arg)
{
    (void)arg;
    char msg[4200];
    for (;;) {
        ssize_t n = recv(fsd.ctl, msg, sizeof msg - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        msg[n] = 0;
        char why[300] = "";
        if (!strncmp(msg, "APPLY ", 6) || !strcmp(msg, "FINISH")) {
            int r = msg[0] == 'A' ? fb_apply(msg + 6) : fb_finish(why, sizeof why);
            if (r < 0 && !why[0]) snprintf(why, sizeof why, "cannot write the held data to the files: %s", strerror(-r));
            char out[400];
            snprintf(out, sizeof out, "ERR %s", why);
            answer(r < 0 ? out : "OK");
            continue;
        }
        if (strncmp(msg, "CLOSE ", 6)) { answer("ERR unknown request"); continue; }
        fs_gate_close();
        /* the journal's directory is ours to make, as a process's part of a checkpoint is */
        if (mkdir(msg + 6, 0700) < 0 && errno != EEXIST) snprintf(why, sizeof why, "cannot make its journal: %s", strerror(errno));
        /* buffer mode: the checkpoint's index is in the directory's name (tmp.N.PID) */
        const char *base = strrchr(msg + 6, '/');
        uint64_t index = base && !strncmp(base + 1, "tmp.", 4) ? strtoull(base + 5, NULL, 10) : 0;
        if (!why[0] && fsd.buffer && fb_close(msg + 6, fsd.job, index, why, sizeof why) < 0 && !why[0])
            snprintf(why, sizeof why, "cannot write the redo log");
        if (!why[0] && fj_prepare(msg + 6, why, sizeof why) == 0) {
            const char *d = getenv("LAZARUS_TEST_FSD_COMMIT_DELAY_MS"); /* tests kill us here */
            if (d) usleep((useconds_t)atoi(d) * 1000);
            fj_commit();
        } else if (!why[0]) {
            snprintf(why, sizeof why, "cannot make its journal");
        }
        fs_gate_open();
        if (why[0]) {
            char out[400];
            snprintf(out, sizeof out, "ERR %s", why);
            answer(out);
        } else {
            answer("OK");
        }
    }
    /* the end of the job: nothing more is recorded; the mount goes */
    __atomic_store_n(&fs_ending, 1, __ATOMIC_RELEASE);
    fuse_session_exit(fsd.se);
    fuse_session_unmount(fsd.se);
    return NULL;
}
