/* The file rollback of `restart` and `rollback` (rollback_files.c). */
#ifndef LZ_CLI_ROLLBACK_FILES_H
#define LZ_CLI_ROLLBACK_FILES_H
#include "store.h"
#include <stdint.h>

struct fj_plan;
/* Phase 1: the journals of every interval since `index` are read and proven
 * (journal_read.c), nothing outside the job changed what they would touch
 * since it stopped (or `force`), and nothing they need is gone (not even
 * with `force`: outside.c).  Changes nothing.  NULL with a message said and
 * *code the exit status (244: a damaged journal, 245: outside changes);
 * *files the number of files it rolls back (counted in the outside-changes
 * walk).  cmd: "restart" or "rollback", for the messages. */
struct fj_plan *rollback_files_plan(const char *cmd, const char *dir, uint64_t index, const struct lz_job *job, int force,
                                    int *code, uint64_t *files);
/* The first checkpoint index a job rolled back to `index` may give. */
uint64_t rollback_next_index(const char *dir, uint64_t index, const struct lz_job *job);
/* Phase 2: undoes every change to files since `index` (nothing if the plan
 * is empty), drops the checkpoints after it and empties its journal, as a
 * restart from it needs.  DIR/job says rolling_to meanwhile, so that a crash
 * is finished by the next restart or rollback.  0, or -1 having said why. */
int rollback_files_apply(const char *cmd, const char *dir, uint64_t index, struct lz_job *job, struct fj_plan *plan,
                         uint64_t next);
/* What restart and rollback do first, in this order: become the store's
 * owner (root acting for an ordinary user), lock the store (busy: the line
 * when a job runs, with %s the store as given), finish a torn checkpoint,
 * read the job file.  0, or the exit status having said why ("cannot VERB:
 * ..."). */
int rollback_open_store(const char *verb, const char *busy, const char *dir, const char *shown, int have_at, uint64_t at,
                        struct lz_job *job, int *lock);
#endif
