/* The supervisor's side of the file system front end (fs/, lazarus-fsd):
 * one daemon per `run --fs PATH`, mounted in place over PATH, and the
 * commit protocol on its channel (fs/fs_commit.c has the daemon's side). */
#ifndef LZ_CLI_FS_MOUNT_H
#define LZ_CLI_FS_MOUNT_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define FS_MAX 8
struct fs_mount {
    char path[4096];
    pid_t pid;     /* the daemon, 0 once reaped */
    int chan;      /* our end of its channel, -1 closed */
    int mnt_fd;    /* the mount's root (for syncfs), -1 */
    int status;    /* its wait status once reaped */
    uint64_t closed;   /* the checkpoint whose interval it closed last (fsm_close) */
    char jdir[4200];   /* that closing's journal of the next interval, DIR/tmp.N.PID */
    int buffer;        /* --fs-mode buffer: APPLY after each commit, FINISH at the end */
};

/* Checks `--fs PATH` against the store: an existing directory, neither
 * inside DIR nor holding it.  0 with its real path (no symbolic link: the
 * engine compares it with the paths the kernel gives), or -1 with why. */
int fsm_check_path(const char *path, const char *dir, char *real, size_t rlen, char *why, size_t whylen);
/* Starts the daemon and waits for its mount: 0, or -1 with why (nothing
 * mounted).  restarted: the checkpoint a restart went back to (its journal
 * goes on), 0 for a new job. */
int fsm_start(struct fs_mount *m, const char *path, const char *mode, const char *jhome, const uint64_t job[2],
              int machine, uint64_t restarted, char *why, size_t whylen);
/* Buffer mode: checkpoint N is committed, the daemon writes what it held
 * for it to the files (APPLY N); FINISH at the program's own end.  0, or
 * -1 with why (the files are finished by the next restart from the redo
 * log).  Nothing to do in undo mode. */
int fsm_apply(struct fs_mount *m, uint64_t index, char *why, size_t whylen);
int fsm_finish(struct fs_mount *m, char *why, size_t whylen);
/* Checkpoint N, every process of the job stopped (files-only: the
 * commit): the mount synced (what the kernel holds reaches the daemon and is
 * recorded), then the daemon closes interval N and records on in a journal
 * of the next, m->jdir (jhome/tmp.N.PID).  0; -1 with why (its error: the
 * checkpoint fails, the daemon goes on); -2 with why (dead, or no answer
 * in time: the job cannot go on). */
int fsm_close(struct fs_mount *m, const char *jhome, uint64_t index, char *why, size_t whylen);
/* The daemon reaped by the supervisor's loop. */
void fsm_reaped(struct fs_mount *m, int status);
/* The end of the job (or of a failed start): the channel closed, the daemon
 * waited for (killed after 5 s), the mount gone in any case (a lazy unmount
 * as the last resort). */
void fsm_stop(struct fs_mount *m);
/* Whether PATH is a mount of ours now (/proc/self/mountinfo). */
int fsm_mounted(const char *path);
/* "died (signal 9)" */
void fsm_death(int status, char *buf, size_t len);
#endif
