/* `lazarus diff`: what a rollback would change (rollback.h). */
#include "rollback.h"
#include "journal.h"
#include "journal_read.h"
#include "format.h"
#include "hash.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct line { const char *kind; char *path; };
static int line_cmp(const void *a, const void *b)
{
    return strcmp(((const struct line *)a)->path, ((const struct line *)b)->path);
}

static void print_line(const char *kind, const char *path, void *arg)
{
    fprintf(arg, "%-8s %s\n", kind, path);
}

size_t fj_plan_diff(const struct fj_plan *p, int64_t stop, FILE *out)
{
    return fj_plan_changes(p, stop, print_line, out);
}

const char *fj_name_change(const struct want *w, const struct stat *st)
{
    const struct fj_name *nm = NAME(w->r);
    switch (nm->was) {
    case FJ_WAS_ABSENT: return st ? "removed" : NULL;
    case FJ_WAS_FILE:
        return !st || !(same_ino(st, nm->dev, nm->ino) || fj_is_copy_of(st, nm->dev, nm->ino)) ? "restored" : NULL;
    case FJ_WAS_DIR: return !st || !S_ISDIR(st->st_mode) ? "restored" : NULL;
    case FJ_WAS_SYMLINK: {
        char cur[LZ_PATH_MAX];
        ssize_t l = st && S_ISLNK(st->st_mode) ? readlink(w->path, cur, sizeof cur - 1) : -1;
        if (l < 0) return "restored";
        cur[l] = 0;
        return strcmp(cur, name_target(w->r)) ? "restored" : NULL;
    }
    default: return st ? NULL : "restored";
    }
}

int fj_inode_modified(const struct fj_inode *in, const struct stat *st)
{
    int64_t mt = (int64_t)st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
    return (uint64_t)st->st_size != in->size || mt != in->mtime_ns || (st->st_mode & 07777) != (in->mode & 07777);
}

size_t fj_plan_changes(const struct fj_plan *p, int64_t stop, void (*each)(const char *kind, const char *path, void *arg),
                       void *arg)
{
    size_t n, nl = 0, cap = 64;
    struct line *lines = lz_xmalloc(cap * sizeof *lines);
    struct want *w = fj_final_names(p, &n);
    struct stat st;
    size_t nseen = 0, capseen = n + 16;
    char **seen = lz_xcalloc(capseen, sizeof *seen);
    char where[LZ_PATH_MAX * 2], what[64];
    fj_locate_reset();
    fj_aliases_load(p->dir);
#define ADD(k_, p_) do { if (nl == cap) { cap *= 2; lines = lz_xrealloc(lines, cap * sizeof *lines); } \
        lines[nl].kind = k_; lines[nl++].path = lz_xstrdup(p_); } while (0)
    for (size_t i = 0; i < n; i++) {
        const char *kind = fj_name_change(&w[i], lstat(w[i].path, &st) == 0 ? &st : NULL);
        if (kind) { ADD(kind, w[i].path); seen[nseen++] = (char *)w[i].path; }
    }
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_INODE) continue;
            const char *path = inode_path(r);
            int dup = 0;
            for (size_t k = 0; k < nseen && !dup; k++) dup = !strcmp(seen[k], path);
            for (size_t k = 0; k < nl && !dup; k++) dup = !strcmp(lines[k].path, path);
            if (dup) continue;
            /* something to undo if the content was saved, or size/mode/time moved */
            const struct fj_inode *in = INODE(r);
            int at = fj_locate_inode(p, i, r, where, sizeof where, &st);
            if (at == FJ_AT_NONE) {
                /* deleted or replaced after the job stopped: it comes back at
                 * its name if the target has it there and the journals hold
                 * all of it; a restart refuses it otherwise (outside.c).
                 * Gone with no sign of that: the rollback leaves it */
                if (fj_inode_gone_after(p, i, r, stop, what, sizeof what) && fj_inode_needed(w, n, r))
                    ADD(fj_inode_rebuildable(p, in->dev, in->ino) ? "restored" : "lost", path);
                else {
                    if (nseen == capseen) { capseen *= 2; seen = lz_xrealloc(seen, capseen * sizeof *seen); }
                    seen[nseen++] = (char *)path; /* removed with its directory, or not there at N */
                }
                continue;
            }
            if (fj_inode_modified(in, &st)) ADD("modified", path);
        }
    qsort(lines, nl, sizeof *lines, line_cmp);
    for (size_t i = 0; i < nl; i++) { each(lines[i].kind, lines[i].path, arg); free(lines[i].path); }
    free(lines);
    free(seen);
    free(w);
    return nl;
}

/* Paths a journal changes (NAME paths and INODE paths), and the bytes it keeps. */

/* ------------------------------------------------------------------ the restart's count */

void fj_tally_name(struct fj_tally *t, const char *path)
{
    if (t->nnames == t->capnames) t->names = lz_xrealloc(t->names, (t->capnames = t->capnames * 2 + 16) * sizeof *t->names);
    t->names[t->nnames++] = path;
}

void fj_tally_inode(struct fj_tally *t, const char *path, int verdict)
{
    if (t->nrecs == t->caprecs) t->recs = lz_xrealloc(t->recs, (t->caprecs = t->caprecs * 2 + 16) * sizeof *t->recs);
    t->recs[t->nrecs] = (struct fj_tally_rec){path, t->nrecs, verdict};
    t->nrecs++;
}

static int str_cmp(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static int tally_rec_cmp(const void *a, const void *b)
{
    const struct fj_tally_rec *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : x->order < y->order ? -1 : x->order > y->order;
}

size_t fj_tally_count(struct fj_tally *t)
{
    size_t n = t->nnames;
    if (t->nnames) qsort(t->names, t->nnames, sizeof *t->names, str_cmp);
    if (t->nrecs) qsort(t->recs, t->nrecs, sizeof *t->recs, tally_rec_cmp);
    for (size_t i = 0; i < t->nrecs;) {
        size_t e = i;
        int verdict = FJ_TALLY_SAME;
        for (; e < t->nrecs && !strcmp(t->recs[e].path, t->recs[i].path); e++)
            if (verdict == FJ_TALLY_SAME) verdict = t->recs[e].verdict;
        const char *key = t->recs[i].path;
        if (verdict == FJ_TALLY_CHANGED && !(t->nnames && bsearch(&key, t->names, t->nnames, sizeof *t->names, str_cmp))) n++;
        i = e;
    }
    free(t->names);
    free(t->recs);
    memset(t, 0, sizeof *t);
    return n;
}
