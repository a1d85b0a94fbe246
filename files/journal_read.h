/* The journals of a rollback, read into memory (journal.h is their format).
 * Shared by the parts of the file engine that run in the CLI: the apply step
 * (apply.c), the outside-change check (outside.c), `diff` (diff.c) and
 * `list`'s statistics.  journal_read.c reads and checks them. */
#ifndef LZ_FILES_JOURNAL_READ_H
#define LZ_FILES_JOURNAL_READ_H
#include "journal.h"
#include "format.h"
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

struct rec {
    uint16_t type, flags;
    uint32_t len;       /* payload bytes */
    uint32_t src;       /* the journal it comes from (seg.j[src]) */
    uint64_t stamp;     /* when its old state was read (journal.h) */
    uint64_t seq;       /* its place in that journal */
    uint64_t data_off;  /* DATA: where the bytes are in the log */
    char *p;            /* payload (DATA: only its fixed part) */
};

/* One journal of an interval: its directory's own, or a proc.<pid>/ one. */
struct jnl {
    char dir[LZ_PATH_MAX + 64];
    int log_fd, data_fd;
    uint64_t log_end;  /* end of the valid records (a killed run leaves zeros after them) */
    uint64_t data_end; /* end of the bytes DATA records use (files.data may be a longer spare) */
    uint64_t nundo;    /* records that undo something (not BEGIN or END) */
};

/* An interval: every journal of it, their records merged in stamp order, so
 * that "the first record wins" holds across the processes of the job. */
struct seg {
    uint64_t index;
    char ckdir[LZ_PATH_MAX + 64];
    struct jnl *j; /* j[0]: the directory's own */
    size_t nj;
    struct rec *r;
    size_t n;
};

struct fj_plan {
    struct seg *s; /* newest first */
    size_t n;
    char dir[LZ_PATH_MAX];
    char **below;  /* the store's other journal directories (of checkpoints older than the target):
                    * their files.keep/ may hold an inode a later interval names (outside.c) */
    size_t nbelow;
};

/* ------------------------------------------------------------------ records */

static inline const struct fj_name *NAME(const struct rec *r) { return (const struct fj_name *)r->p; }
static inline const char *name_path(const struct rec *r) { return r->p + sizeof(struct fj_name); }
static inline const char *name_target(const struct rec *r) { const char *p = name_path(r); return p + strlen(p) + 1; }
static inline const struct fj_inode *INODE(const struct rec *r) { return (const struct fj_inode *)r->p; }
static inline const char *inode_path(const struct rec *r) { return r->p + sizeof(struct fj_inode); }
static inline int same_ino(const struct stat *st, uint64_t dev, uint64_t ino) { return st->st_dev == dev && st->st_ino == ino; }

/* Reads and proves one interval's journals (s->ckdir, s->index set; job: the
 * store's identity, NULL not to check it) and merges their records in stamp
 * order: 0, or -1 with why naming the damaged piece. */
int fj_load_seg(struct seg *s, const uint64_t *job, char *why, size_t whylen);
void fj_seg_free(struct seg *s);
/* Formats the reason into why and returns -1: every failure of the CLI's
 * side of the file engine is said this way. */
int fj_fail(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The inodes its records keep in files.keep/ are there, still the ones
 * recorded, and (those only the store holds) unchanged since stop_ns: 0, or
 * -1 with why. */
int fj_seg_check_keeps(const struct seg *s, int64_t stop_ns, char *why, size_t whylen);

/* The first record per path in one journal (the state at its checkpoint). */
struct nm { const struct rec *r; const char *path; int depth; size_t order; };
int fj_nm_shallow(const void *a, const void *b);
int fj_nm_deep(const void *a, const void *b);
/* malloc'ed, sorted by path, one per path */
struct nm *fj_first_names(const struct seg *s, uint16_t type, size_t *count);

/* files.keep/<dev>.<ino> of an interval: in the journal `first` (the one
 * whose record asks), else in whichever of its journals holds it (a process
 * may have linked an inode another one recorded); if none, first's. */
void fj_keep_path(char *out, size_t len, const struct seg *s, uint32_t first, uint64_t dev, uint64_t ino);

/* What the rollback will decide for each path: the record of the oldest
 * journal that has one (it is applied last). */
struct want { const char *path; const struct rec *r; const struct seg *s; };
struct want *fj_final_names(const struct fj_plan *p, size_t *count);

/* diff.c: how the rollback changes the path of a final name, given what is
 * there now (st; NULL: nothing): "removed", "restored" or NULL (it keeps
 * it); and whether an inode found at st differs from its INODE record (size,
 * mtime, mode: "modified").  `diff` and the restart's count (outside.c) share
 * them. */
const char *fj_name_change(const struct want *w, const struct stat *st);
int fj_inode_modified(const struct fj_inode *in, const struct stat *st);

/* The paths `diff` would list, counted from the walk that looks for outside
 * changes (outside.c) instead of a second one: each final name the rollback
 * changes, and each INODE record's verdict in the order diff meets them (a
 * path's first record that is not FJ_TALLY_SAME decides it; a name decides
 * before any record). */
enum { FJ_TALLY_SAME, FJ_TALLY_CHANGED, FJ_TALLY_SETTLED }; /* unchanged; "modified"/"restored"/"lost"; gone
                                                            * with no sign of it after the stop: left */
struct fj_tally {
    const char **names;
    size_t nnames, capnames;
    struct fj_tally_rec { const char *path; size_t order; int verdict; } *recs;
    size_t nrecs, caprecs;
};
void fj_tally_name(struct fj_tally *t, const char *path);
void fj_tally_inode(struct fj_tally *t, const char *path, int verdict);
size_t fj_tally_count(struct fj_tally *t); /* and frees what t holds */

#endif
