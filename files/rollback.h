/* Rolling files back to checkpoint N (journal.h): plan, check, show, apply.
 * Used by `lazarus restart`, `diff` and `list`. */
#ifndef LZ_FILES_ROLLBACK_H
#define LZ_FILES_ROLLBACK_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct fj_plan;

/* A journal directory of the store, as the caller (the CLI) lists it from
 * the store: ckpt.N/, or jrnl.N/ of a checkpoint N that failed. */
struct fj_journal_dir {
    uint64_t index;  /* N */
    int failed;      /* jrnl.N: checkpoint N never committed */
    const char *dir; /* its path */
};

/* Reads and proves the journals of every checkpoint >= target, and those of
 * failed checkpoints >= target, newest first (journal_read.c, journal.h):
 * NULL with why naming the damaged piece.
 * dir: the store (DIR/files.alias, DIR/files.rebuild); job: its identity
 * (every journal's BEGIN record names it); v[0..n): every journal directory
 * of the store, ascending by index (those below target are not applied, but
 * an inode of a later interval may be kept in one of them).
 * stop_ns: when the job stopped (CLOCK_REALTIME); an inode only the store
 * keeps (files.keep/) changed after it is damage.  INT64_MAX: not checked. */
struct fj_plan *fj_plan_load(const char *dir, const uint64_t job[2], const struct fj_journal_dir *v, size_t n,
                             uint64_t target, int64_t stop_ns, char *why, size_t whylen);
void fj_plan_free(struct fj_plan *p);
/* Whether the journals hold anything at all to undo. */
int fj_plan_empty(const struct fj_plan *p);

/* What someone changed, after the job stopped (`stop_ns`, CLOCK_REALTIME), in
 * the files the rollback touches: one path each, and what happened to it
 * ("deleted or moved away", "replaced by a symbolic link", "written", ...). */
struct fj_change {
    char *path;
    char what[64];
};
struct fj_outside {
    struct fj_change *changed; /* `restart --force` rolls these back all the same */
    size_t nchanged;
    struct fj_change *lost;    /* these not even with --force: a file the job overwrote in place or
                                * appended to, deleted or replaced: the journal holds only the bytes
                                * it overwrote, not what the rest of the file was at N */
    size_t nlost;
    size_t nrolled;            /* the paths the rollback changes, as `diff` lists them (its walk, counted here) */
};
/* Fills *out (fj_outside_free frees it); only reads (lstat, readlink, the
 * journals in memory), never writes. */
void fj_plan_outside_changes(const struct fj_plan *p, int64_t stop_ns, struct fj_outside *out);
void fj_outside_free(struct fj_outside *o);
/* "P: what, P2: what" for the first `max` of v, and ", ..." if there are more
 * (malloc'ed).  sep: between path and what (": ", " was "). */
char *fj_change_list(const struct fj_change *v, size_t n, size_t max, const char *sep, const char *suffix);

/* One line per path a rollback would change: "modified P", "removed P",
 * "restored P" (it comes back: it was deleted or replaced, by the job or
 * after it stopped), "lost P" (it cannot come back: its content at N is gone,
 * a restart refuses).  stop_ns: when the job stopped (CLOCK_REALTIME), what
 * is gone since was deleted or replaced by someone else; INT64_MAX (a
 * rollback under way, or not known): nothing is told apart.  Returns how
 * many lines. */
size_t fj_plan_diff(const struct fj_plan *p, int64_t stop_ns, FILE *out);
/* The same, one call of each(kind, path, arg) per line, sorted by path
 * (kind: "modified", "removed", "restored", "lost"): `show`'s journal. */
size_t fj_plan_changes(const struct fj_plan *p, int64_t stop_ns, void (*each)(const char *kind, const char *path, void *arg),
                       void *arg);

/* Applies the journals newest first; idempotent, so after a crash it is
 * simply run again.  delay_ms > 0 sleeps after each step (tests kill there). */
int fj_plan_apply(const struct fj_plan *p, int delay_ms, char *why, size_t whylen);

/* Empties checkpoint N's journal once the files are at N again. */
int fj_journal_reset(const char *ckdir, const uint64_t job[2], uint64_t index);
/* Writes jdir/files.log as an empty, sealed log of `index` (BEGIN, END). */
int fj_write_empty_log(const char *jdir, const uint64_t job[2], uint64_t index, int32_t pid);

/* For `lazarus list`, per checkpoint idx[i] (ascending): how many paths
 * changed since it, and the bytes kept to roll back to it (the journals of
 * later checkpoints, failed ones included). */
void fj_store_stats(const char *dir, const uint64_t *idx, int n, uint64_t *files, uint64_t *bytes);

/* ---- shared by apply.c, outside.c and diff.c (not for the CLI) */
struct stat;
struct rec;
struct seg;
struct want;

/* Copies that stand for an inode of N (DIR/files.alias, journal_read.h):
 * loaded once per plan (apply.c). */
void fj_aliases_load(const char *dir);
int fj_is_copy_of(const struct stat *st, uint64_t dev, uint64_t ino);

/* Where the inode of the INODE record r (of p->s[si]) is now: a keep link of
 * that very inode in any journal of the plan (FJ_AT_KEEP), a kept copy of it
 * in its own interval's journals (FJ_AT_KEEPCOPY: it is gone, the copy stands
 * for it once names are back), or its path at N, or that path below where a
 * directory of the job was moved (FJ_AT_PATH: the inode, or a copy an earlier
 * rollback made for it).  0 if it is nowhere: deleted or replaced by someone
 * else (the job changes a name of an inode only after linking it into
 * files.keep).  where/st: the place and its lstat. */
enum { FJ_AT_NONE = 0, FJ_AT_KEEP = 1, FJ_AT_KEEPCOPY = 2, FJ_AT_PATH = 3 };
void fj_locate_reset(void); /* a new plan: what it caches of the store is read again */
int fj_locate_inode(const struct fj_plan *p, size_t si, const struct rec *r, char *where, size_t wl, struct stat *st);
/* Whether the inode of r, nowhere (FJ_AT_NONE), was deleted or replaced after
 * the job stopped: its name, or the directory it was in, changed since.  what:
 * "deleted or moved away", "replaced", "replaced by a symbolic link", ... */
int fj_inode_gone_after(const struct fj_plan *p, size_t si, const struct rec *r, int64_t stop_ns, char *what, size_t wl);
/* Whether the files at the target keep the inode of r at its path: that path
 * (and every directory above it) is at the target what it was when r was
 * written, as far as the final names (fj_final_names, sorted by path) tell. */
int fj_inode_needed(const struct want *w, size_t nw, const struct rec *r);
/* Whether the DATA records of every interval of the plan together hold every
 * byte the inode had at the target (the size of its oldest INODE record), so
 * that it can be rebuilt without the inode itself. */
int fj_inode_rebuildable(const struct fj_plan *p, uint64_t dev, uint64_t ino);
/* The inodes fj_plan_outside_changes found deleted or replaced after the
 * stop, that the target needs and the journals rebuild (at their name at the
 * target, as a new file standing for them: files.alias).  The apply keeps the
 * list in DIR/files.rebuild while it runs, for a rollback finished again. */
struct fj_inode_id { uint64_t dev, ino; };
size_t fj_rebuild_list(const struct fj_plan *p, const struct fj_inode_id **v);
#endif
