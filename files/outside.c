/* What changed after the job stopped (rollback.h): files the rollback would
 * touch that someone outside the job changed, and those whose content at the
 * target is gone with them.  Also where an inode of an INODE record is now,
 * whether the target needs it, and whether the journals alone rebuild it
 * (used by apply.c and diff.c too).  Everything here only reads.
 *
 * Only the job changes the job's files while it runs, and it records every
 * change first: so a change found after the stop (ctime, or birth time, past
 * the last instant the job could have made it, however it died: the instant
 * DIR/job says it stopped -- the supervisor waits for the coarse clock to
 * pass it -- or DIR/lock's date plus a second, its last sign of life when
 * its supervisor died first: lz_job_stop_ns) is someone else's.  What cannot be seen that way is a
 * file that is not there any more: the job never makes an inode it recorded
 * unreachable without linking it into files.keep first (a rename away, an
 * unlink, a replacement), so an inode of an INODE record that is neither
 * kept (by any journal of the store) nor at its name (nor below where a
 * directory of the job was moved) was deleted or replaced by someone else --
 * after the stop if the thing at its name, or the directory it was in,
 * changed after it.  (With no such sign it had no name at its checkpoint, a
 * file unlinked while open whose journal was dropped since, or a process of
 * the job that does not record removed it: left alone, as always.)
 *
 * What a rollback does with each (apply.c), and what this check says:
 * - the inode is still somewhere (kept, at its name): it is rolled back in
 *   place; changed after the stop -> refused unless --force;
 * - it is gone, and the target does not have it there (its name did not
 *   exist then): refused unless --force, which has nothing to bring back;
 * - it is gone and the target has it: its content at the target is rebuilt
 *   at its name, in a new file (files.alias: it stands for the inode from
 *   then on), if the DATA records of the intervals together hold every byte
 *   it had then -- a file the job truncated, or rewrote with O_TRUNC; refused
 *   unless --force.  Otherwise -- a file the job overwrote only in part,
 *   appended to, or only chmod'ed -- the journal holds only the bytes the job
 *   overwrote, and whatever is at its name now (a copy of it, the user's own
 *   file) is not the inode those bytes belong in: writing them into it would
 *   make a mixture of the two.  Its content at the target is gone: refused
 *   even with --force (the `lost` list), naming it.
 * Copies in place (new inodes, same content) are such replacements: nothing
 * tells a faithful copy from another file, so they are rebuilt when the
 * journal holds every byte and refused otherwise -- never skipped, never
 * mixed.  A directory of the job replaced by another one is refused unless
 * --force; with it the new one stands in for it, as it is (apply.c). */
#include "rollback.h"
#include "journal.h"
#include "journal_read.h"
#include "format.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int64_t ns_of(const struct timespec *t) { return (int64_t)t->tv_sec * 1000000000ll + t->tv_nsec; }

static int newer(const struct stat *st, int64_t t) { return ns_of(&st->st_ctim) > t; }

static int64_t btime_at(const char *path)
{
    struct statx sx;
    if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) < 0 || !(sx.stx_mask & STATX_BTIME)) return 0;
    return (int64_t)sx.stx_btime.tv_sec * 1000000000ll + sx.stx_btime.tv_nsec;
}

/* Something below path (not a directory: their ctime moves when entries are
 * removed, which loses nothing) changed after t. */
static int tree_newer(const char *path, int64_t t)
{
    struct stat st;
    if (lstat(path, &st) < 0) return 0;
    if (newer(&st, t) && !S_ISDIR(st.st_mode)) return 1;
    if (!S_ISDIR(st.st_mode)) return 0;
    DIR *d = opendir(path);
    struct dirent *e;
    int found = 0;
    while (d && !found && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char sub[LZ_PATH_MAX * 2];
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        found = tree_newer(sub, t);
    }
    if (d) closedir(d);
    return found;
}

/* The nearest directory above path that exists changed after t: an entry in
 * it was removed or added (path itself, or one of its parents, deleted). */
static int ancestor_newer(const char *path, int64_t t)
{
    char p[LZ_PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s", path);
    for (char *s; (s = strrchr(p, '/'));) {
        if (s == p) s[1] = 0;
        else *s = 0;
        if (lstat(p, &st) == 0) return newer(&st, t);
        if (s == p) break;
    }
    return 0;
}

static const char *kind_of(mode_t m)
{
    switch (m & S_IFMT) {
    case S_IFREG: return "file";
    case S_IFDIR: return "directory";
    case S_IFLNK: return "symbolic link";
    case S_IFIFO: return "FIFO";
    case S_IFSOCK: return "socket";
    default: return "device";
    }
}

/* What happened to a thing the rollback keeps (only its content, mode or
 * times go back) that changed after t. */
static void what_changed(char *out, size_t len, const struct stat *st, int64_t t)
{
    snprintf(out, len, "%s", S_ISREG(st->st_mode) && ns_of(&st->st_mtim) > t ? "written" : "mode, owner or links changed");
}

/* What is at a path now, instead of a file (or a thing of type `was_type`). */
static void what_replaced(char *out, size_t len, const char *path, const struct stat *st, mode_t was_type, int64_t t)
{
    if ((st->st_mode & S_IFMT) != was_type) snprintf(out, len, "replaced by a %s", kind_of(st->st_mode));
    else if (S_ISDIR(st->st_mode)) snprintf(out, len, "replaced by another directory");
    else if (S_ISREG(st->st_mode) && btime_at(path) <= t && ns_of(&st->st_mtim) > t) snprintf(out, len, "written");
    else snprintf(out, len, "replaced");
}

/* ------------------------------------------------------------------ the lists */

static int listed(const struct fj_outside *o, const char *path)
{
    for (size_t i = 0; i < o->nchanged; i++) if (!strcmp(o->changed[i].path, path)) return 1;
    for (size_t i = 0; i < o->nlost; i++) if (!strcmp(o->lost[i].path, path)) return 1;
    return 0;
}

static void add(struct fj_outside *o, int lost, const char *path, const char *what)
{
    if (listed(o, path)) return;
    struct fj_change **v = lost ? &o->lost : &o->changed;
    size_t *n = lost ? &o->nlost : &o->nchanged;
    *v = lz_xrealloc(*v, (*n + 1) * sizeof **v);
    (*v)[*n].path = lz_xstrdup(path);
    snprintf((*v)[*n].what, sizeof (*v)[*n].what, "%s", what);
    (*n)++;
}

void fj_outside_free(struct fj_outside *o)
{
    for (size_t i = 0; i < o->nchanged; i++) free(o->changed[i].path);
    for (size_t i = 0; i < o->nlost; i++) free(o->lost[i].path);
    free(o->changed);
    free(o->lost);
    memset(o, 0, sizeof *o);
}

char *fj_change_list(const struct fj_change *v, size_t n, size_t max, const char *sep, const char *suffix)
{
    size_t len = 16;
    for (size_t i = 0; i < n && i < max; i++) len += strlen(v[i].path) + strlen(sep) + strlen(v[i].what) + strlen(suffix) + 2;
    char *s = lz_xmalloc(len), *e = s;
    *s = 0;
    for (size_t i = 0; i < n && i < max; i++)
        e += sprintf(e, "%s%s%s%s%s", i ? ", " : "", v[i].path, sep, v[i].what, suffix);
    if (n > max) strcpy(e, ", ...");
    return s;
}

/* ------------------------------------------------------------------ where things are */

/* A directory is the one of N if inode and birth time agree (inode numbers
 * of removed directories are given to new ones). */
static int is_dir_of(const char *path, const struct stat *st, const struct fj_name *n)
{
    if (!S_ISDIR(st->st_mode) || st->st_dev != n->dev || st->st_ino != n->ino) return 0;
    return !n->btime_ns || btime_at(path) == n->btime_ns;
}

/* Where the directory of a NAME record is now, if the job moved it (MOVED
 * records of the intervals up to `upto`, newest first) or removed it (kept in
 * files.keep): 1 and *where, or 0. */
static int dir_moved(const struct fj_plan *p, size_t upto, const struct fj_name *n, char *where, size_t wl)
{
    struct stat st;
    char name[40];
    fj_keep_name(name, n->dev, n->ino);
    for (size_t i = 0; i <= upto && i < p->n; i++) {
        const struct seg *s = &p->s[i];
        for (size_t j = s->n; j-- > 0;) {
            const struct rec *m = &s->r[j];
            if (m->type != FJ_MOVED) continue;
            const struct fj_moved *mv = (const void *)m->p;
            if (mv->dev != n->dev || mv->ino != n->ino) continue;
            snprintf(where, wl, "%s", m->p + sizeof *mv);
            if (lstat(where, &st) == 0 && is_dir_of(where, &st, n)) return 1;
        }
        for (size_t j = 0; j < s->nj; j++) {
            snprintf(where, wl, "%s/" FJ_KEEP "/%s", s->j[j].dir, name);
            if (lstat(where, &st) == 0 && is_dir_of(where, &st, n)) return 1;
        }
    }
    return 0;
}

/* path, below where the job moved a directory above it (the deepest one whose
 * NAME record in the intervals up to `upto` finds it elsewhere): 1 and *out. */
static int moved_path(const struct fj_plan *p, size_t upto, const char *path, char *out, size_t ol)
{
    char d[LZ_PATH_MAX], where[LZ_PATH_MAX * 2];
    snprintf(d, sizeof d, "%s", path);
    for (char *s; (s = strrchr(d, '/')) && s != d;) {
        *s = 0;
        for (size_t i = 0; i <= upto && i < p->n; i++)
            for (size_t j = 0; j < p->s[i].n; j++) {
                const struct rec *r = &p->s[i].r[j];
                if (r->type != FJ_NAME || NAME(r)->was != FJ_WAS_DIR || strcmp(name_path(r), d)) continue;
                if (!dir_moved(p, upto, NAME(r), where, sizeof where) || !strcmp(where, d)) continue;
                snprintf(out, ol, "%s%s", where, path + strlen(d));
                return 1;
            }
    }
    return 0;
}

/* The files.keep directories of the store's other journals (of checkpoints
 * older than the target): an inode the job unlinked in an older interval
 * lives on there, and an INODE record of a later interval may name it by its
 * old path (it was written through a descriptor, nameless).  Read once per plan. */
static const struct fj_plan *older_plan;
static char **older;
static size_t nolder;

static void older_add(const char *dir, int depth)
{
    char path[LZ_PATH_MAX * 2];
    struct stat st;
    snprintf(path, sizeof path, "%s/" FJ_KEEP, dir);
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        older = lz_xrealloc(older, (nolder + 1) * sizeof *older);
        older[nolder++] = lz_xstrdup(path);
    }
    DIR *d = depth < 16 ? opendir(dir) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX - 1)) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) older_add(path, depth + 1);
        }
    if (d) closedir(d);
}

void fj_locate_reset(void) { older_plan = NULL; }

static void older_load(const struct fj_plan *p)
{
    if (older_plan == p) return;
    older_plan = p;
    for (size_t i = 0; i < nolder; i++) free(older[i]);
    nolder = 0;
    for (size_t i = 0; i < p->nbelow; i++) older_add(p->below[i], 0);
}

int fj_locate_inode(const struct fj_plan *p, size_t si, const struct rec *r, char *where, size_t wl, struct stat *st)
{
    const struct fj_inode *in = INODE(r);
    char name[40];
    fj_keep_name(name, in->dev, in->ino);
    /* a keep link keeps the inode alive: no other can have its number */
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].nj; j++) {
            snprintf(where, wl, "%s/" FJ_KEEP "/%s", p->s[i].j[j].dir, name);
            if (lstat(where, st) == 0 && S_ISREG(st->st_mode) && same_ino(st, in->dev, in->ino)) return FJ_AT_KEEP;
        }
    const char *path = inode_path(r);
    if (lstat(path, st) == 0 && S_ISREG(st->st_mode) && (same_ino(st, in->dev, in->ino) || fj_is_copy_of(st, in->dev, in->ino))) {
        snprintf(where, wl, "%s", path);
        return FJ_AT_PATH;
    }
    if (moved_path(p, si, path, where, wl) && lstat(where, st) == 0 && S_ISREG(st->st_mode) &&
        (same_ino(st, in->dev, in->ino) || fj_is_copy_of(st, in->dev, in->ino)))
        return FJ_AT_PATH;
    /* kept as a copy (no link possible across file systems): the inode is
     * gone, and the copy comes back at its name (apply.c, restore_file) */
    const struct seg *s = &p->s[si];
    for (size_t j = 0; j < s->nj; j++) {
        snprintf(where, wl, "%s/" FJ_KEEP "/%s", s->j[j].dir, name);
        if (lstat(where, st) == 0 && S_ISREG(st->st_mode)) return FJ_AT_KEEPCOPY;
    }
    /* kept by an older journal: written after the job unlinked it */
    older_load(p);
    for (size_t j = 0; j < nolder; j++) {
        snprintf(where, wl, "%s/%s", older[j], name);
        if (lstat(where, st) == 0 && S_ISREG(st->st_mode) && same_ino(st, in->dev, in->ino)) return FJ_AT_KEEP;
    }
    return FJ_AT_NONE;
}

static int want_path_cmp(const void *key, const void *elt) { return strcmp(key, ((const struct want *)elt)->path); }

int fj_inode_needed(const struct want *w, size_t nw, const struct rec *r)
{
    const struct fj_inode *in = INODE(r);
    char path[LZ_PATH_MAX];
    snprintf(path, sizeof path, "%s", inode_path(r));
    const struct want *x = nw ? bsearch(path, w, nw, sizeof *w, want_path_cmp) : NULL;
    if (x) return NAME(x->r)->was == FJ_WAS_FILE && NAME(x->r)->dev == in->dev && NAME(x->r)->ino == in->ino;
    /* a directory above it that did not exist at the target (or was no directory) */
    for (char *s; (s = strrchr(path, '/')) && s != path;) {
        *s = 0;
        x = nw ? bsearch(path, w, nw, sizeof *w, want_path_cmp) : NULL;
        if (x) return NAME(x->r)->was == FJ_WAS_DIR;
    }
    return 1;
}

struct span { uint64_t a, b; };
static int span_cmp(const void *x, const void *y)
{
    const struct span *a = x, *b = y;
    return a->a < b->a ? -1 : a->a > b->a;
}

/* The size of (dev, ino) at the checkpoint of interval s (its first INODE record), or -1. */
static int64_t size_at(const struct seg *s, uint64_t dev, uint64_t ino)
{
    for (size_t j = 0; j < s->n; j++)
        if (s->r[j].type == FJ_INODE && INODE(&s->r[j])->dev == dev && INODE(&s->r[j])->ino == ino)
            return (int64_t)INODE(&s->r[j])->size;
    return -1;
}

int fj_inode_rebuildable(const struct fj_plan *p, uint64_t dev, uint64_t ino)
{
    /* the size at the target: the oldest interval's INODE record */
    int64_t size = -1;
    for (size_t i = p->n; i-- > 0 && size < 0;) size = size_at(&p->s[i], dev, ino);
    if (size <= 0) return size == 0;
    /* every byte below it, in some interval's DATA (below that interval's
     * size: the apply writes back no more); the oldest interval holding a
     * byte has its value at the target (a byte no older interval saved was
     * not overwritten before, nor cut: a truncation saves what it cuts) */
    struct span *v = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct seg *s = &p->s[i];
        int64_t lim = size_at(s, dev, ino);
        for (size_t j = 0; j < s->n && lim > 0; j++) {
            const struct rec *d = &s->r[j];
            if (d->type != FJ_DATA) continue;
            const struct fj_data *dd = (const void *)d->p;
            if (dd->dev != dev || dd->ino != ino || dd->offset >= (uint64_t)lim) continue;
            if (n == cap) { cap = cap ? cap * 2 : 64; v = lz_xrealloc(v, cap * sizeof *v); }
            uint64_t end = dd->offset + dd->length;
            v[n++] = (struct span){dd->offset, end > (uint64_t)lim ? (uint64_t)lim : end};
        }
    }
    if (n) qsort(v, n, sizeof *v, span_cmp);
    uint64_t to = 0;
    for (size_t i = 0; i < n && v[i].a <= to; i++) if (v[i].b > to) to = v[i].b;
    free(v);
    return to >= (uint64_t)size;
}

/* ------------------------------------------------------------------ the check */

/* The inodes the last check found gone after the stop that the target needs
 * and the journals rebuild: the apply rebuilds these, and only these (an
 * inode that is nowhere with no sign of a change after the stop may have had
 * no name at its checkpoint -- unlinked while open, kept by a journal since
 * dropped -- and must not come back at its old name). */
static const struct fj_plan *rb_plan;
static struct fj_inode_id *rb;
static size_t nrb;

size_t fj_rebuild_list(const struct fj_plan *p, const struct fj_inode_id **v)
{
    *v = rb;
    return rb_plan == p ? nrb : 0;
}

int fj_inode_gone_after(const struct fj_plan *p, size_t si, const struct rec *r, int64_t stop, char *what, size_t wl)
{
    /* deleted or replaced by someone else (the job keeps what it unnames);
     * after the stop if its name, or the directory it was in, says so */
    const char *path = inode_path(r);
    char moved[LZ_PATH_MAX * 2];
    struct stat ps;
    int after = 0;
    if (lstat(path, &ps) == 0) {
        after = newer(&ps, stop) || (S_ISDIR(ps.st_mode) && tree_newer(path, stop));
        what_replaced(what, wl, path, &ps, S_IFREG, stop);
        if (!strcmp(what, "written")) snprintf(what, wl, "replaced"); /* another inode: written or not */
    } else {
        after = ancestor_newer(path, stop);
        snprintf(what, wl, "deleted or moved away");
    }
    if (!after && moved_path(p, si, path, moved, sizeof moved))
        after = lstat(moved, &ps) == 0 ? newer(&ps, stop) : ancestor_newer(moved, stop);
    /* no sign of it: it had no name at its checkpoint (unlinked while open,
     * kept by a journal since dropped), or a process of the job that does
     * not record removed it; the rollback leaves it, as it always did */
    return after;
}

/* The inodes of INODE records, once each, at their newest interval: still
 * there and changed after the stop, or gone. */
static void check_inodes(const struct fj_plan *p, int64_t stop, const struct want *w, size_t nw, struct fj_outside *o,
                         struct fj_tally *t)
{
    struct id { uint64_t dev, ino; } *gone = NULL;
    size_t ngone = 0;
    char where[LZ_PATH_MAX * 2], what[64];
    struct stat st;
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_INODE) continue;
            const struct fj_inode *in = INODE(r);
            const char *path = inode_path(r);
            int loc = fj_locate_inode(p, i, r, where, sizeof where, &st);
            if (loc != FJ_AT_NONE) fj_tally_inode(t, path, fj_inode_modified(in, &st) ? FJ_TALLY_CHANGED : FJ_TALLY_SAME);
            if (loc == FJ_AT_KEEP || loc == FJ_AT_PATH) {
                if (newer(&st, stop)) {
                    what_changed(what, sizeof what, &st, stop);
                    add(o, 0, path, what);
                }
                continue;
            }
            if (loc == FJ_AT_KEEPCOPY) continue;
            /* per record, as diff decides (a record of the same inode under another name too) */
            int after = fj_inode_gone_after(p, i, r, stop, what, sizeof what), needed = fj_inode_needed(w, nw, r);
            fj_tally_inode(t, path, after && needed ? FJ_TALLY_CHANGED : FJ_TALLY_SETTLED);
            size_t k;
            for (k = 0; k < ngone && !(gone[k].dev == in->dev && gone[k].ino == in->ino); k++) {}
            if (k < ngone) continue;
            gone = lz_xrealloc(gone, (ngone + 1) * sizeof *gone);
            gone[ngone++] = (struct id){in->dev, in->ino};
            if (!after) continue;
            int lost = needed && !fj_inode_rebuildable(p, in->dev, in->ino);
            if (needed && !lost) {
                rb = lz_xrealloc(rb, (nrb + 1) * sizeof *rb);
                rb[nrb++] = (struct fj_inode_id){in->dev, in->ino};
            }
            add(o, lost, path, what);
        }
    free(gone);
}

/* The paths of NAME records: what the rollback would remove or replace there
 * changed after the stop, or what it keeps changed after it, or what it
 * brings back was deleted after it. */
static void check_names(const struct fj_plan *p, int64_t stop, const struct want *w, size_t nw, struct fj_outside *o,
                        struct fj_tally *t)
{
    char what[64], where[LZ_PATH_MAX * 2], target[LZ_PATH_MAX];
    struct stat st, ks;
    for (size_t i = 0; i < nw; i++) {
        const char *path = w[i].path;
        const struct fj_name *n = NAME(w[i].r);
        int have = lstat(path, &st) == 0;
        if (fj_name_change(&w[i], have ? &st : NULL)) fj_tally_name(t, path);
        if (!have) {
            /* gone: the rollback brings back what was there; if the job
             * changed it that way there is nothing to say, and it cannot be
             * told from someone deleting what the job left there, which the
             * rollback would replace all the same.  What can be told: */
            if (n->was == FJ_WAS_FILE) {
                /* the kept file itself was changed after the stop (one of
                 * its names removed, or written through another) */
                fj_keep_path(where, sizeof where, w[i].s, w[i].r->src, n->dev, n->ino);
                if (lstat(where, &ks) == 0 && same_ino(&ks, n->dev, n->ino) && newer(&ks, stop))
                    add(o, 0, path, ancestor_newer(path, stop) ? "deleted or moved away" : "mode, owner or links changed");
            } else if (n->was == FJ_WAS_DIR) {
                /* a directory the job neither moved nor removed (it keeps
                 * removed ones, but across file systems) */
                struct stat js;
                if (!dir_moved(p, p->n - 1, n, where, sizeof where) && stat(w[i].s->ckdir, &js) == 0 &&
                    js.st_dev == n->dev && ancestor_newer(path, stop))
                    add(o, 0, path, "deleted or moved away");
            }
            continue;
        }
        int keeps = 0;
        switch (n->was) {
        case FJ_WAS_FILE:
            keeps = S_ISREG(st.st_mode) && (same_ino(&st, n->dev, n->ino) || fj_is_copy_of(&st, n->dev, n->ino));
            break;
        case FJ_WAS_DIR: keeps = is_dir_of(path, &st, n); break;
        case FJ_WAS_SYMLINK: {
            ssize_t l = S_ISLNK(st.st_mode) ? readlink(path, target, sizeof target - 1) : -1;
            if (l >= 0) { target[l] = 0; keeps = !strcmp(target, name_target(w[i].r)); }
            break;
        }
        case FJ_WAS_OTHER: keeps = (st.st_mode & S_IFMT) == (n->mode & S_IFMT); break;
        default: break;
        }
        if (keeps) {
            /* a directory's entries are their own records' business */
            if (!S_ISDIR(st.st_mode) && newer(&st, stop)) {
                what_changed(what, sizeof what, &st, stop);
                add(o, 0, path, what);
            }
            continue;
        }
        /* the rollback removes or replaces what is there */
        if (S_ISDIR(st.st_mode)) {
            if (n->was == FJ_WAS_DIR) {
                struct stat js;
                int elsewhere = dir_moved(p, p->n - 1, n, where, sizeof where);
                if (!elsewhere && stat(w[i].s->ckdir, &js) == 0 && js.st_dev == n->dev) {
                    /* not the job's: it would have kept or moved the one of
                     * N; with --force this one stands in for it, as it is */
                    if (newer(&st, stop)) add(o, 0, path, "replaced by another directory");
                } else if (tree_newer(path, stop)) {
                    add(o, 0, path, "files in it changed");
                }
            } else if (n->was == FJ_WAS_ABSENT) {
                if (tree_newer(path, stop)) add(o, 0, path, "files in it changed");
            } else if (newer(&st, stop) || tree_newer(path, stop)) {
                add(o, 0, path, "replaced by a directory");
            }
            continue;
        }
        if (!newer(&st, stop)) continue;
        if (n->was == FJ_WAS_ABSENT) {
            snprintf(what, sizeof what, "%s", btime_at(path) > stop ? "created" : S_ISREG(st.st_mode) && ns_of(&st.st_mtim) > stop ? "written" : "changed");
        } else {
            mode_t was_type = n->was == FJ_WAS_FILE ? S_IFREG : n->was == FJ_WAS_DIR ? S_IFDIR : n->was == FJ_WAS_SYMLINK ? S_IFLNK : (n->mode & S_IFMT);
            what_replaced(what, sizeof what, path, &st, was_type, stop);
        }
        add(o, 0, path, what);
    }
}

static int change_cmp(const void *a, const void *b)
{
    return strcmp(((const struct fj_change *)a)->path, ((const struct fj_change *)b)->path);
}

void fj_plan_outside_changes(const struct fj_plan *p, int64_t stop_ns, struct fj_outside *out)
{
    memset(out, 0, sizeof *out);
    rb_plan = p;
    nrb = 0;
    fj_locate_reset();
    fj_aliases_load(p->dir);
    size_t nw;
    struct want *w = fj_final_names(p, &nw);
    struct fj_tally t = {0};
    check_inodes(p, stop_ns, w, nw, out, &t);
    check_names(p, stop_ns, w, nw, out, &t);
    out->nrolled = fj_tally_count(&t);
    free(w);
    if (out->nchanged) qsort(out->changed, out->nchanged, sizeof *out->changed, change_cmp);
    if (out->nlost) qsort(out->lost, out->nlost, sizeof *out->lost, change_cmp);
}
