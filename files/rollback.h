/* Rolling files back to checkpoint N (journal.h): plan, check, show, apply.
 * Used by `lazarus restart`, `diff` and `list`. */
#ifndef LZ_FILES_ROLLBACK_H
#define LZ_FILES_ROLLBACK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct fj_plan;

/* Reads the journals of every checkpoint >= target in DIR, and those of failed
 * checkpoints >= target (jrnl.N), newest first.  A damaged record ends its
 * journal (it is one whose change never happened). */
struct fj_plan *fj_plan_load(const char *dir, uint64_t target, char *why, size_t whylen);
void fj_plan_free(struct fj_plan *p);
/* Whether the journals hold anything at all to undo. */
int fj_plan_empty(const struct fj_plan *p);

/* Paths the rollback would touch that changed after `stop_ns` (CLOCK_REALTIME)
 * — by someone else, since the job was gone.  Returns how many, and a
 * malloc'ed, comma-separated list of the first few in *list. */
size_t fj_plan_outside_changes(const struct fj_plan *p, int64_t stop_ns, char **list);

/* One line per path a rollback would change: "modified P", "removed P",
 * "restored P".  Returns how many lines. */
size_t fj_plan_diff(const struct fj_plan *p, FILE *out);

/* Applies the journals newest first; idempotent, so after a crash it is
 * simply run again.  delay_ms > 0 sleeps after each step (tests kill there). */
int fj_plan_apply(const struct fj_plan *p, int delay_ms, char *why, size_t whylen);

/* Empties checkpoint N's journal once the files are at N again. */
int fj_journal_reset(const char *ckdir);

/* For `lazarus list`, per checkpoint idx[i] (ascending): how many paths
 * changed since it, and the bytes kept to roll back to it (the journals of
 * later checkpoints, failed ones included). */
void fj_store_stats(const char *dir, const uint64_t *idx, int n, uint64_t *files, uint64_t *bytes);
#endif
