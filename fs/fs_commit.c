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
 * End of file (the supervisor is gone, or the job ended): unmount and exit. */
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
        if (strncmp(msg, "CLOSE ", 6)) { answer("ERR unknown request"); continue; }
        char why[300] = "";
        fs_gate_close();
        /* the journal's directory is ours to make, as a process's part of a checkpoint is */
        if (mkdir(msg + 6, 0700) < 0 && errno != EEXIST) snprintf(why, sizeof why, "cannot make its journal: %s", strerror(errno));
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
