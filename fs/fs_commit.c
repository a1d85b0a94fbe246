/* The commit protocol, daemon side: the supervisor's channel (a socketpair,
 * one message a datagram).  At checkpoint N the supervisor has synced the
 * mount (the kernel's dirty pages reached us and were recorded), then:
 *   PREPARE <DIR/tmp.N.PID>  no change runs from now on (the gate); the next
 *                            interval's journal is made there   -> OK | ERR why
 *   COMMIT                   checkpoint N is committed: record into the new
 *                            journal, changes go on              -> OK
 *   ABORT                    it failed: the old journal goes on  -> OK
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
    int held = 0;
    for (;;) {
        ssize_t n = recv(fsd.ctl, msg, sizeof msg - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        msg[n] = 0;
        if (!strncmp(msg, "PREPARE ", 8)) {
            char why[300];
            if (!held) fs_gate_close();
            held = 1;
            /* the journal's directory is ours to make, as a process's part of a checkpoint is */
            if (mkdir(msg + 8, 0700) < 0 && errno != EEXIST) snprintf(why, sizeof why, "cannot make its journal: %s", strerror(errno));
            else why[0] = 0;
            if (why[0] || fj_prepare(msg + 8, why, sizeof why) < 0) {
                fs_gate_open();
                held = 0;
                char out[400];
                snprintf(out, sizeof out, "ERR %s", why);
                answer(out);
            } else {
                const char *d = getenv("LAZARUS_TEST_FSD_COMMIT_DELAY_MS"); /* tests kill us here */
                if (d) usleep((useconds_t)atoi(d) * 1000);
                answer("OK");
            }
        } else if (!strcmp(msg, "COMMIT") || !strcmp(msg, "ABORT")) {
            if (held) {
                if (msg[0] == 'C') fj_commit();
                else fj_abort();
                fs_gate_open();
                held = 0;
            }
            answer("OK");
        } else {
            answer("ERR unknown request");
        }
    }
    /* the end of the job: nothing more is recorded; the mount goes */
    if (held) { fj_abort(); fs_gate_open(); }
    __atomic_store_n(&fs_ending, 1, __ATOMIC_RELEASE);
    fuse_session_exit(fsd.se);
    fuse_session_unmount(fsd.se);
    return NULL;
}
