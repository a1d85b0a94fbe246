/* Rolling files back: applying the journals (rollback.h), and emptying a
 * checkpoint's journal once the files are at N again. */
#include "redo_log.h"
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

/* ------------------------------------------------------------------ file-system steps */

static int delay;
static void step_done(void)
{
    if (delay > 0) { struct timespec t = {delay / 1000, (delay % 1000) * 1000000L}; nanosleep(&t, NULL); }
}

static int64_t btime_at(int dfd, const char *path)
{
    struct statx sx;
    if (statx(dfd, path, AT_SYMLINK_NOFOLLOW, STATX_BTIME, &sx) < 0 || !(sx.stx_mask & STATX_BTIME)) return 0;
    return (int64_t)sx.stx_btime.tv_sec * 1000000000ll + sx.stx_btime.tv_nsec;
}

/* A directory is the one of N if inode and birth time agree (inode numbers
 * of removed directories are given to new ones). */
static int is_dir_of(int dfd, const char *path, const struct stat *st, const struct fj_name *n)
{
    if (!S_ISDIR(st->st_mode) || st->st_dev != n->dev || st->st_ino != n->ino) return 0;
    return !n->btime_ns || btime_at(dfd, path) == n->btime_ns;
}

/* Directories of N that must survive a removal around them (moved into a
 * directory made after N): they are moved back afterwards. */
static const struct fj_name **spare;
static size_t nspare;

static int spared(int dfd, const char *path, const struct stat *st)
{
    for (size_t i = 0; i < nspare; i++) if (is_dir_of(dfd, path, st, spare[i])) return 1;
    return 0;
}

/* Removes what a directory holds, but spared directories (and what holds them). */
static void empty_dir_at(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    DIR *d = fdopendir(fd);
    struct dirent *e;
    struct stat st;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
        if (!S_ISDIR(st.st_mode)) unlinkat(fd, e->d_name, 0);
        else if (!spared(fd, e->d_name, &st)) {
            empty_dir_at(fd, e->d_name);
            unlinkat(fd, e->d_name, AT_REMOVEDIR); /* fails, and stays, if a spared one is inside */
        }
    }
    if (d) closedir(d); else close(fd);
}

/* 0: gone; 1: kept because a spared directory is inside; -1: error */
static int remove_any(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(st.st_mode)) return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
    if (spared(AT_FDCWD, path, &st)) return 1;
    empty_dir_at(AT_FDCWD, path);
    rmdir(path);
    return lstat(path, &st) == 0 ? (nspare ? 1 : -1) : 0;
}

static void parent_of(const char *path, char *out)
{
    snprintf(out, LZ_PATH_MAX, "%s", path);
    char *s = strrchr(out, '/');
    if (s == out) s[1] = 0;
    else if (s) *s = 0;
}

static int mkdir_p(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0) return S_ISDIR(st.st_mode) ? 0 : -1;
    char par[LZ_PATH_MAX];
    parent_of(path, par);
    if (strcmp(par, path) && mkdir_p(par) < 0) return -1;
    return mkdir(path, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

static void set_times(const char *path, int64_t at, int64_t mt)
{
    struct timespec ts[2] = {{at / 1000000000, at % 1000000000}, {mt / 1000000000, mt % 1000000000}};
    utimensat(AT_FDCWD, path, ts, AT_SYMLINK_NOFOLLOW);
}

static int copy_fd(int in, int out)
{
    char *buf = lz_xmalloc(1 << 20);
    ssize_t n;
    off_t off = 0;
    while ((n = pread(in, buf, 1 << 20, off)) > 0) {
        if (lz_write_all(out, buf, (size_t)n) < 0) { free(buf); return -1; }
        off += n;
    }
    free(buf);
    return n < 0 ? -1 : 0;
}

/* Copies that stand for an inode of N (its content is rolled back into the
 * copy): kept copies brought back, and files rebuilt from the journal, by
 * this rollback and earlier ones (DIR/files.alias). */
static struct copy_alias { uint64_t dev, ino, cdev, cino; } *aliases;
static size_t naliases;
static const char *alias_dir;

void fj_aliases_load(const char *dir)
{
    char ap[LZ_PATH_MAX + 32];
    naliases = 0;
    snprintf(ap, sizeof ap, "%s/" FJ_ALIAS, dir);
    FILE *f = fopen(ap, "r");
    struct copy_alias a;
    while (f && fscanf(f, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &a.dev, &a.ino, &a.cdev, &a.cino) == 4) {
        aliases = lz_xrealloc(aliases, (naliases + 1) * sizeof *aliases);
        aliases[naliases++] = a;
    }
    if (f) fclose(f);
}

/* The file at st stands for (dev, ino) from now on, in this rollback and later ones. */
static void alias_add(uint64_t dev, uint64_t ino, const struct stat *st)
{
    aliases = lz_xrealloc(aliases, (naliases + 1) * sizeof *aliases);
    aliases[naliases++] = (struct copy_alias){dev, ino, st->st_dev, st->st_ino};
    char ap[LZ_PATH_MAX + 32];
    snprintf(ap, sizeof ap, "%s/" FJ_ALIAS, alias_dir);
    FILE *f = fopen(ap, "a");
    if (f) {
        fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", dev, ino, (uint64_t)st->st_dev, (uint64_t)st->st_ino);
        fflush(f);
        fsync(fileno(f));
        fclose(f);
    }
}

/* st is a copy of (dev, ino), or a copy of a copy (each rollback copies anew) */
int fj_is_copy_of(const struct stat *st, uint64_t dev, uint64_t ino)
{
    for (int depth = 0; depth < 64; depth++) {
        size_t i;
        for (i = naliases; i-- > 0;)
            if (aliases[i].dev == dev && aliases[i].ino == ino) break;
        if (i == (size_t)-1) return 0;
        if (aliases[i].cdev == st->st_dev && aliases[i].cino == st->st_ino) return 1;
        dev = aliases[i].cdev;
        ino = aliases[i].cino;
    }
    return 0;
}

/* Puts the kept inode (or its copy) at `path`, replacing what is there. */
static int restore_file(const struct seg *s, const struct rec *r, char *why, size_t wl)
{
    const struct fj_name *n = NAME(r);
    const char *path = name_path(r);
    char keep[LZ_PATH_MAX + 160], name[40], par[LZ_PATH_MAX], tmp[LZ_PATH_MAX + 64];
    fj_keep_name(name, n->dev, n->ino);
    fj_keep_path(keep, sizeof keep, s, r->src, n->dev, n->ino);
    struct stat st;
    if (lstat(path, &st) == 0 && (same_ino(&st, n->dev, n->ino) || fj_is_copy_of(&st, n->dev, n->ino))) return 0;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && remove_any(path) < 0)
        return fj_fail(why, wl, "cannot remove the directory %s that replaced a file: %s", path, strerror(errno));
    parent_of(path, par);
    if (mkdir_p(par) < 0) return fj_fail(why, wl, "cannot recreate the directory %s: %s", par, strerror(errno));
    snprintf(tmp, sizeof tmp, "%s/.lazarus-rb.%s", par, name);
    unlink(tmp);
    if (r->flags & FJ_NAME_COPIED) {
        int in = open(keep, O_RDONLY | O_CLOEXEC);
        int out = in < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, n->mode & 07777);
        int ok = in >= 0 && out >= 0 && copy_fd(in, out) == 0;
        if (out >= 0) {
            struct timespec ts[2] = {{n->atime_ns / 1000000000, n->atime_ns % 1000000000}, {n->mtime_ns / 1000000000, n->mtime_ns % 1000000000}};
            fchmod(out, n->mode & 07777);
            futimens(out, ts);
            close(out);
        }
        if (in >= 0) close(in);
        if (!ok) { unlink(tmp); return fj_fail(why, wl, "cannot bring back %s from its kept copy: %s", path, strerror(errno)); }
    } else if (link(keep, tmp) < 0) {
        return fj_fail(why, wl, "cannot bring back %s (kept as %s): %s", path, keep, strerror(errno));
    }
    if (rename(tmp, path) < 0) { int e = errno; unlink(tmp); return fj_fail(why, wl, "cannot bring back %s: %s", path, strerror(e)); }
    if ((r->flags & FJ_NAME_COPIED) && lstat(path, &st) == 0) alias_add(n->dev, n->ino, &st);
    return 0;
}

/* ------------------------------------------------------------------ one journal */

/* Whether the inode is one to rebuild (fj_rebuild_list, DIR/files.rebuild). */
static struct fj_inode_id *rebuild;
static size_t nrebuild;
static int to_rebuild(uint64_t dev, uint64_t ino)
{
    for (size_t i = 0; i < nrebuild; i++) if (rebuild[i].dev == dev && rebuild[i].ino == ino) return 1;
    return 0;
}

/* The content, size, mode and times at N of the inode of the INODE record r
 * (the first of its inode in p->s[si]), once the names of that interval are
 * back: in the inode itself (kept, or at its name at N), or in the copy that
 * stands for it.  An inode deleted or replaced after the job stopped that the
 * target needs is rebuilt at its name from the journal alone (the check made
 * sure the journals hold every byte it had at the target): a new file, named
 * in files.alias as standing for it, into which older intervals roll back. */
static int restore_inode(const struct fj_plan *p, size_t si, const struct rec *r, char *buf, char *why, size_t wl)
{
    const struct seg *s = &p->s[si];
    const struct fj_inode *in = INODE(r);
    const char *path = inode_path(r);
    char at[LZ_PATH_MAX * 2], tmp[LZ_PATH_MAX + 64];
    struct stat fs;
    int loc = fj_locate_inode(p, si, r, at, sizeof at, &fs), fd = -1, made = 0;
    if (loc == FJ_AT_KEEP || loc == FJ_AT_PATH) {
        fd = open(at, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0 && errno == EACCES && chmod(at, (in->mode & 07777) | 0200) == 0)
            fd = open(at, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* made read-only since: its mode comes back below */
        /* the inode of N, or the copy that stands for it */
        if (fd >= 0 && (fstat(fd, &fs) < 0 || !S_ISREG(fs.st_mode) ||
                        !(same_ino(&fs, in->dev, in->ino) || fj_is_copy_of(&fs, in->dev, in->ino)))) {
            close(fd);
            fd = -1;
        }
    } else if (loc == FJ_AT_NONE && to_rebuild(in->dev, in->ino)) {
        char par[LZ_PATH_MAX], name[40];
        parent_of(path, par);
        fj_keep_name(name, in->dev, in->ino);
        snprintf(tmp, sizeof tmp, "%s/.lazarus-rb.%s", par, name);
        if (mkdir_p(par) < 0) return fj_fail(why, wl, "cannot recreate the directory %s: %s", par, strerror(errno));
        unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 || fstat(fd, &fs) < 0) return fj_fail(why, wl, "cannot rebuild %s: %s", path, strerror(errno));
        made = 1;
    }
    /* else not reachable: kept as a copy (its name brings the copy back), or
     * without a name at N (a file unlinked while open travels by content) */
    if (fd < 0) return 0;
    int rc = 0;
    if (ftruncate(fd, (off_t)in->size) < 0) rc = fj_fail(why, wl, "cannot restore the size of %s: %s", path, strerror(errno));
    /* later records first: the first one saved is the content at N */
    for (size_t j = s->n, first = (size_t)(r - s->r); j-- > first && rc == 0;) {
        const struct rec *d = &s->r[j];
        if (d->type != FJ_DATA) continue;
        const struct fj_data *dd = (const void *)d->p;
        if (dd->dev != in->dev || dd->ino != in->ino) continue;
        /* only bytes that existed at N: another process may have saved a
         * block after this inode grew (its record has a later stamp) */
        if (dd->offset >= in->size) continue;
        size_t len = dd->length > in->size - dd->offset ? (size_t)(in->size - dd->offset) : dd->length;
        if (lz_pread_all(s->j[d->src].data_fd, buf, len, (off_t)dd->data_off) < 0 || pwrite(fd, buf, len, (off_t)dd->offset) != (ssize_t)len)
            rc = fj_fail(why, wl, "cannot restore the content of %s: %s", path, strerror(errno ? errno : EIO));
    }
    if (rc == 0) {
        fchmod(fd, in->mode & 07777);
        if (geteuid() == 0 && (fs.st_uid != in->uid || fs.st_gid != in->gid)) { if (fchown(fd, in->uid, in->gid)) {} }
        struct timespec ts[2] = {{in->atime_ns / 1000000000, in->atime_ns % 1000000000},
                                 {in->mtime_ns / 1000000000, in->mtime_ns % 1000000000}};
        futimens(fd, ts);
    }
    if (made && rc == 0) {
        /* in place of whatever is at its name now (with --force) */
        struct stat ps;
        if (lstat(path, &ps) == 0 && S_ISDIR(ps.st_mode) && remove_any(path) < 0)
            rc = fj_fail(why, wl, "cannot remove the directory %s that replaced a file: %s", path, strerror(errno));
        else if (rename(tmp, path) < 0)
            rc = fj_fail(why, wl, "cannot bring back %s: %s", path, strerror(errno));
        else
            alias_add(in->dev, in->ino, &fs);
        if (rc) unlink(tmp);
    }
    close(fd);
    return rc;
}

static int apply_seg(const struct fj_plan *p, size_t si, char *why, size_t wl)
{
    const struct seg *s = &p->s[si];
    size_t nn, nd;
    struct nm *names = fj_first_names(s, FJ_NAME, &nn);
    struct nm *dts = fj_first_names(s, FJ_DIRTIME, &nd);
    int rc = 0;
    struct stat st;

    /* which directories of N exist somewhere: removals spare them */
    const struct fj_name **keepdirs = lz_xcalloc(nn + 1, sizeof *keepdirs);
    size_t nk = 0;
    for (size_t i = 0; i < nn; i++)
        if (NAME(names[i].r)->was == FJ_WAS_DIR) keepdirs[nk++] = NAME(names[i].r);
    spare = keepdirs;
    nspare = nk;
    /* B: what did not exist at N goes (deepest first), sparing directories of
     * N inside; once those are back in place (A), again for what held them */
    for (int round = 0; round < 2 && rc == 0; round++) {
        qsort(names, nn, sizeof *names, fj_nm_deep);
        for (size_t i = 0; i < nn && rc == 0; i++) {
            if (NAME(names[i].r)->was != FJ_WAS_ABSENT || lstat(names[i].path, &st) < 0) continue;
            if (remove_any(names[i].path) < 0) rc = fj_fail(why, wl, "cannot remove %s: %s", names[i].path, strerror(errno));
            step_done();
        }
        if (round == 1) break;
        /* A: directories of N that were moved go back (shallowest first);
         * what moves with them is then found below where they went */
        qsort(names, nn, sizeof *names, fj_nm_shallow);
        char **mfrom = lz_xcalloc(nn + 1, sizeof *mfrom), **mto = lz_xcalloc(nn + 1, sizeof *mto);
        size_t nm = 0;
        for (size_t i = 0; i < nn && rc == 0; i++) {
            const struct fj_name *n = NAME(names[i].r);
            if (n->was != FJ_WAS_DIR) continue;
        if (lstat(names[i].path, &st) == 0 && is_dir_of(AT_FDCWD, names[i].path, &st, n)) continue;
        /* where it went: removed (kept in files.keep), or the places it moved to */
        for (size_t j = s->n + 1; j-- > 0;) {
            const struct rec *m = j < s->n ? &s->r[j] : NULL;
            char where[LZ_PATH_MAX * 2];
            if (!m) {
                fj_keep_path(where, sizeof where, s, names[i].r->src, n->dev, n->ino);
            } else {
                if (m->type != FJ_MOVED) continue;
                const struct fj_moved *mv = (const void *)m->p;
                if (mv->dev != n->dev || mv->ino != n->ino) continue;
                snprintf(where, sizeof where, "%s", m->p + sizeof *mv);
            }
            for (size_t k = 0; k < nm; k++) {
                size_t fl = strlen(mfrom[k]);
                if (!strncmp(where, mfrom[k], fl) && (where[fl] == '/' || !where[fl])) {
                    char t[LZ_PATH_MAX * 2];
                    snprintf(t, sizeof t, "%s%s", mto[k], where + fl);
                    snprintf(where, sizeof where, "%s", t);
                }
            }
            if (lstat(where, &st) < 0 || !is_dir_of(AT_FDCWD, where, &st, n)) continue;
            char par[LZ_PATH_MAX];
            parent_of(names[i].path, par);
            /* whatever took its place was made after N */
            if (remove_any(names[i].path) < 0 || mkdir_p(par) < 0 || rename(where, names[i].path) < 0)
                rc = fj_fail(why, wl, "cannot move the directory %s back to %s: %s", where, names[i].path, strerror(errno));
            mfrom[nm] = lz_xstrdup(where);
            mto[nm++] = lz_xstrdup(names[i].path);
            step_done();
            break;
        }
        }
        for (size_t k = 0; k < nm; k++) { free(mfrom[k]); free(mto[k]); }
        free(mfrom);
        free(mto);
    }
    /* C: what existed at N comes back (shallowest first) */
    qsort(names, nn, sizeof *names, fj_nm_shallow);
    for (size_t i = 0; i < nn && rc == 0; i++) {
        const struct fj_name *n = NAME(names[i].r);
        const char *path = names[i].path;
        int have = lstat(path, &st) == 0;
        switch (n->was) {
        case FJ_WAS_FILE:
            rc = restore_file(s, names[i].r, why, wl);
            break;
        case FJ_WAS_DIR:
            if (have && is_dir_of(AT_FDCWD, path, &st, n)) break;
            if (have && S_ISDIR(st.st_mode)) {
                /* the directory of N is gone.  The job removed it for real only
                 * where it could not keep it (across file systems): it was
                 * empty then, and one the job made since stands in, emptied but
                 * for directories of N moved back into it.  Otherwise someone
                 * else replaced it after the job stopped (`--force`): theirs
                 * stands in as it is -- what it holds that the job's records do
                 * not name is not the job's, like any file the job never
                 * changed; what they name comes back (or goes) by them */
                struct stat ks;
                if (stat(s->j[names[i].r->src].dir, &ks) < 0 || ks.st_dev != n->dev) empty_dir_at(AT_FDCWD, path);
                break;
            }
            if ((have && remove_any(path) != 0) || mkdir(path, n->mode & 07777) < 0)
                rc = fj_fail(why, wl, "cannot recreate the directory %s: %s", path, strerror(errno));
            break;
        case FJ_WAS_SYMLINK: {
            char cur[LZ_PATH_MAX];
            ssize_t l = have && S_ISLNK(st.st_mode) ? readlink(path, cur, sizeof cur - 1) : -1;
            if (l >= 0) { cur[l] = 0; if (!strcmp(cur, name_target(names[i].r))) break; }
            if ((have && remove_any(path) < 0) || symlink(name_target(names[i].r), path) < 0)
                rc = fj_fail(why, wl, "cannot recreate the symbolic link %s: %s", path, strerror(errno));
            else set_times(path, n->atime_ns, n->mtime_ns);
            break;
        }
        case FJ_WAS_OTHER:
            if (have && (st.st_mode & S_IFMT) == (n->mode & S_IFMT)) break;
            if ((have && remove_any(path) < 0) || mknod(path, n->mode, n->rdev) < 0)
                lz_warn("cannot recreate %s: %s", path, strerror(errno)); /* devices need privileges */
            break;
        default:
            break;
        }
        if (n->was != FJ_WAS_ABSENT) step_done();
    }
    spare = NULL;
    nspare = 0;
    free(keepdirs);
    /* D: contents, sizes, modes and times of the inodes changed */
    char *buf = lz_xmalloc(FJ_DATA_MAX);
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        const struct rec *r = &s->r[i];
        if (r->type != FJ_INODE) continue;
        const struct fj_inode *in = INODE(r);
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = s->r[j].type == FJ_INODE && INODE(&s->r[j])->dev == in->dev && INODE(&s->r[j])->ino == in->ino;
        if (dup) continue;
        rc = restore_inode(p, si, r, buf, why, wl);
        step_done();
    }
    free(buf);
    /* E: directories' modes and times, deepest first (creating entries changed them) */
    qsort(names, nn, sizeof *names, fj_nm_deep);
    for (size_t i = 0; i < nn && rc == 0; i++) {
        const struct fj_name *n = NAME(names[i].r);
        if (n->was != FJ_WAS_DIR) continue;
        chmod(names[i].path, n->mode & 07777);
        set_times(names[i].path, n->atime_ns, n->mtime_ns);
    }
    qsort(dts, nd, sizeof *dts, fj_nm_deep);
    for (size_t i = 0; i < nd && rc == 0; i++) {
        const struct fj_dirtime *t = (const void *)dts[i].r->p;
        set_times(dts[i].path, t->atime_ns, t->mtime_ns);
    }
    free(names);
    free(dts);
    return rc;
}

/* The inodes to rebuild: the check's (kept in DIR/files.rebuild until the
 * files are at N), and those of an interrupted rollback's check. */
static int rebuild_load(const struct fj_plan *p, char *why, size_t wl)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" FJ_REBUILD, p->dir);
    nrebuild = 0;
    FILE *f = fopen(path, "r");
    struct fj_inode_id id;
    while (f && fscanf(f, "%" SCNu64 " %" SCNu64, &id.dev, &id.ino) == 2) {
        rebuild = lz_xrealloc(rebuild, (nrebuild + 1) * sizeof *rebuild);
        rebuild[nrebuild++] = id;
    }
    if (f) fclose(f);
    const struct fj_inode_id *v;
    size_t n = fj_rebuild_list(p, &v), had = nrebuild;
    for (size_t i = 0; i < n; i++)
        if (!to_rebuild(v[i].dev, v[i].ino)) {
            rebuild = lz_xrealloc(rebuild, (nrebuild + 1) * sizeof *rebuild);
            rebuild[nrebuild++] = v[i];
        }
    if (nrebuild == had) return 0;
    f = fopen(path, "w");
    int ok = f != NULL;
    for (size_t i = 0; ok && i < nrebuild; i++) ok = fprintf(f, "%" PRIu64 " %" PRIu64 "\n", rebuild[i].dev, rebuild[i].ino) > 0;
    if (f && (fflush(f) != 0 || fsync(fileno(f)) < 0)) ok = 0;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok || lz_fsync_dir(p->dir) < 0) return fj_fail(why, wl, "cannot write %s: %s", path, strerror(errno));
    return 0;
}

int fj_plan_apply(const struct fj_plan *p, int delay_ms, char *why, size_t whylen)
{
    delay = delay_ms;
    alias_dir = p->dir;
    fj_locate_reset();
    fj_aliases_load(p->dir);
    if (rebuild_load(p, why, whylen) < 0) return -1;
    for (size_t i = 0; i < p->n; i++)
        if (apply_seg(p, i, why, whylen) < 0) return -1;
    sync(); /* the files are at N on disk before any journal goes away */
    if (nrebuild) {
        char path[LZ_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/" FJ_REBUILD, p->dir);
        unlink(path); /* rebuilt: files.alias names them */
    }
    return 0;
}

/* The journals of the other processes (proc.*), recursively: gone; a
 * directory that holds anything else (a process's own checkpoint) stays. */
static void drop_proc_journals(int dfd)
{
    DIR *d = fdopendir(dup(dfd));
    struct dirent *e;
    char (*subs)[256] = NULL;
    size_t ns = 0;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX - 1)) {
            subs = lz_xrealloc(subs, (ns + 1) * sizeof *subs);
            snprintf(subs[ns++], sizeof *subs, "%s", e->d_name);
        }
    if (d) closedir(d);
    for (size_t i = 0; i < ns; i++) {
        int sfd = openat(dfd, subs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) continue;
        drop_proc_journals(sfd);
        unlinkat(sfd, FJ_LOG, 0);
        unlinkat(sfd, FJ_DATAFILE, 0);
        unlinkat(sfd, FR_NAME, 0); /* buffer mode's redo log: applied before (rollback_files.c) */
        unlinkat(sfd, FR_DONE, 0);
        lz_remove_tree(sfd, FJ_KEEP);
        close(sfd);
        unlinkat(dfd, subs[i], AT_REMOVEDIR);
    }
    free(subs);
}

int fj_journal_reset(const char *ckdir, const uint64_t job[2], uint64_t index)
{
    /* the journals of the interval go one by one: what is left of them
     * meanwhile would not say what N was (the first record of a block may be
     * gone, a later one not), so a mark says they are empty until all are */
    char path[LZ_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/" FJ_RESET, ckdir);
    int mfd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (mfd < 0) return -1;
    fsync(mfd);
    close(mfd);
    if (lz_fsync_dir(ckdir) < 0) return -1;
    if (fj_write_empty_log(ckdir, job, index, 0) < 0) return -1;
    snprintf(path, sizeof path, "%s/" FJ_DATAFILE, ckdir);
    if (truncate(path, 0) < 0 && errno != ENOENT) return -1;
    snprintf(path, sizeof path, "%s/" FJ_KEEP, ckdir);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno == EISDIR)
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR); /* a removed directory kept (it is empty) */
    if (d) closedir(d);
    int dfd = open(ckdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return -1;
    drop_proc_journals(dfd);
    syncfs(dfd);
    close(dfd);
    snprintf(path, sizeof path, "%s/" FJ_RESET, ckdir);
    if (unlink(path) < 0) return -1;
    return lz_fsync_dir(ckdir);
}

/* ------------------------------------------------------------------ checks and views */

