/* The redo log of buffer mode (run --fs PATH --fs-mode buffer): what the
 * file system daemon held back during an interval, written at the commit of
 * checkpoint N into its journal directory of N (ckpt.N/proc.<pid>/fsbuf.redo)
 * and ended by a FIN record (ftIO's FIN bit).  Every record is absolute (a
 * file's cut and final size, whole extents at absolute offsets), so applying
 * a log again, or after half of it was applied, gives the same files.
 *
 *   header   magic, job identity, checkpoint index, checksum
 *   FILE     the file's path (its real one), device, inode, cut, size
 *   EXT      offset, then the bytes (as many as the record says)
 *   FIN      counts of files, extents and bytes: the log is whole
 *
 * A log without its FIN is the commit of a checkpoint that never happened:
 * nothing of it ever reached the files, and nothing applies it.  In a
 * committed checkpoint, the FIN is there (the daemon answered the commit
 * only after it was on the disk); one missing there is damage. */
#ifndef LZ_FILES_REDO_LOG_H
#define LZ_FILES_REDO_LOG_H
#include <stddef.h>
#include <stdint.h>

#define FR_NAME "fsbuf.redo"
#define FR_DONE "fsbuf.applied" /* the same log once its data is in the files */

/* Writing (the daemon): fr_create makes dir/fsbuf.redo (replacing one a
 * failed commit left), fr_file/fr_ext append, fr_fin appends FIN and makes
 * the log and its directory durable.  0 or -errno. */
int fr_create(const char *dir, const uint64_t job[2], uint64_t index);
int fr_file(int fd, const char *path, uint64_t dev, uint64_t ino, uint64_t cut, uint64_t size);
int fr_ext(int fd, uint64_t off, const void *data, uint64_t len);
int fr_fin(int fd, const char *dir, uint64_t files, uint64_t exts, uint64_t bytes);

/* Reading (verify, restart, rollback).  fr_check: 1 whole (FIN found, every
 * checksum right), 0 no FIN (why says where it stops), -1 damaged (why).
 * fr_apply: applies a whole log to the files (idempotent): 0, or -1 with
 * why (nothing is applied from a log that is not whole).
 * fr_apply_checkpoint: every proc.* journal of checkpoint directory ck
 * that holds a log not applied yet: each applied, then marked applied
 * (a crash in between applies it once more: no harm); 0 (also: none), -1
 * with why. */
int fr_check(const char *path, uint64_t *files, uint64_t *bytes, char *why, size_t whylen);
int fr_apply(const char *path, char *why, size_t whylen);
int fr_apply_checkpoint(const char *ck, char *why, size_t whylen);
/* Marks a log applied (renamed FR_NAME -> FR_DONE, durable): 0 or -errno. */
int fr_mark_applied(const char *procdir);
/* How many logs of ck are not applied yet. */
int fr_pending_checkpoint(const char *ck);
/* For verify: the logs of ck checked (applied ones too); 0 all whole (or none), -1 the first
 * that is not (why). *nlogs counts them. */
int fr_check_checkpoint(const char *ck, int *nlogs, char *why, size_t whylen);
#endif
