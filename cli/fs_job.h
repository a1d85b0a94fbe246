/* A job's file systems (run --fs PATH; fs_job.c). */
#ifndef LZ_CLI_FS_JOB_H
#define LZ_CLI_FS_JOB_H
#include "cli.h"
#include "sv.h"

/* paths: "MODE PATH" lines (the job file's fs=); restarted: the checkpoint a
 * restart went back to, 0 for a new job.  0, or -1 with why and nothing mounted. */
int fs_start_all(struct supervisor *s, const char *paths, uint64_t restarted, char *why, size_t whylen);
void fs_stop_all(struct supervisor *s);
/* The loop reaped pid: 1 if it was a daemon (the job ends, said in one line). */
int fs_reaped(struct supervisor *s, pid_t pid, int status);
/* Checkpoint `index`, every process stopped (files-only: the commit): each
 * daemon closes the interval (fs_mount.h, fsm_close).  0, or -1 with why
 * (the checkpoint fails; a daemon dead or silent also ends the job). */
int fs_close_all(struct supervisor *s, uint64_t index, char *why, size_t whylen);
/* Before checkpoint `index` commits (its parts in root): each daemon's
 * journal of the next interval moved in as root/proc.<pid>.  0, or -1 with why. */
int fs_gather_all(struct supervisor *s, uint64_t index, const char *root, char *why, size_t whylen);
/* Buffer mode: checkpoint index is committed (renamed and synced): each
 * daemon writes what it held for it into the files.  A daemon that fails
 * ends the job (the restart finishes the writing from the redo log): -1. */
int fs_apply_all(struct supervisor *s, uint64_t index);
/* Buffer mode: the program ended by itself; its last writes reach the files. */
void fs_finish_all(struct supervisor *s);

/* fs_files_only.c: run --files-only (its loop instead of supervise()), and
 * the restart of such a job once its files are back at a commit: the
 * program run anew.  What `lazarus` exits with. */
int fs_files_only_run(struct supervisor *s, int child_ctl, char **argv, const struct lz_job *job);
int fs_files_only_restart(struct supervisor *s, int child_ctl, const struct lz_job *job);
/* cmd_restart.c: a files-only job's files back to commit `at` (have_at) or
 * the newest; then, if start, the program again from its beginning. */
/* Mounts of the job's file systems a supervisor killed with its daemon left:
 * gone before the files under them are looked at. */
void fs_unmount_stale(const struct lz_job *job);
int restart_files_only(const char *dir, int lock, struct lz_job *job, int have_at, uint64_t at, int force, int start);
/* The runtime leaves what the file systems record to them (LAZARUS_EXCLUDE). */
void fs_exclude(struct supervisor *s);
#endif
