/* Rolling files back (rollback.h, journal.h). */
#include "rollback.h"
#include "journal.h"
#include "format.h"
#include "hash.h"
#include "store.h"
#include "store_admin.h"
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
};

/* Copies made by rollbacks (files kept as copies across file systems) stand
 * for the inode of N they replaced, also in later rollbacks: DIR/files.alias,
 * one "dev ino copy-dev copy-ino" line each. */
#define FJ_ALIAS "files.alias"
/* Left in a journal directory while fj_journal_reset empties it: its journals
 * count as empty (a part of them alone would not say what N was). */
#define FJ_RESET "files.reset"

/* ------------------------------------------------------------------ loading */

static size_t seg_cap;

/* The records of dir's journal, then of its proc.* journals (recursively). */
static int load_jnl(struct seg *s, const char *dir)
{
    char path[LZ_PATH_MAX + 96];
    s->j = realloc(s->j, (s->nj + 1) * sizeof *s->j);
    uint32_t src = (uint32_t)s->nj;
    struct jnl *jn = &s->j[s->nj++];
    memset(jn, 0, sizeof *jn);
    snprintf(jn->dir, sizeof jn->dir, "%s", dir);
    jn->data_fd = -1;
    snprintf(path, sizeof path, "%s/" FJ_LOG, dir);
    jn->log_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (jn->log_fd < 0 && errno != ENOENT) return -1;
    if (jn->log_fd >= 0) {
        snprintf(path, sizeof path, "%s/" FJ_DATAFILE, dir);
        jn->data_fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat ds;
        uint64_t data_size = jn->data_fd >= 0 && fstat(jn->data_fd, &ds) == 0 ? (uint64_t)ds.st_size : 0;
        uint64_t off = 0, seq = 0;
        char *buf = malloc(FJ_DATA_MAX + 65536);
        for (;;) {
            struct fj_rec h;
            if (lz_pread_all(jn->log_fd, &h, sizeof h, (off_t)off) < 0) break;
            if (h.magic != FJ_REC_MAGIC || h.len > FJ_DATA_MAX + 65536 || h.type < FJ_INODE || h.type > FJ_DIRTIME) break;
            if (lz_pread_all(jn->log_fd, buf, h.len, (off_t)(off + sizeof h)) < 0) break;
            uint32_t check = h.check;
            h.check = 0;
            XXH3_state_t st;
            XXH3_64bits_reset(&st);
            XXH3_64bits_update(&st, &h, sizeof h);
            XXH3_64bits_update(&st, buf, h.len);
            if ((uint32_t)XXH3_64bits_digest(&st) != check) break; /* torn: its change never happened */
            size_t fixed = h.type == FJ_INODE ? sizeof(struct fj_inode) : h.type == FJ_DATA ? sizeof(struct fj_data)
                         : h.type == FJ_NAME ? sizeof(struct fj_name) : h.type == FJ_MOVED ? sizeof(struct fj_moved)
                         : sizeof(struct fj_dirtime);
            if (h.len < fixed || (h.type != FJ_DATA && buf[h.len - 1] != 0)) break;
            if (h.type == FJ_DATA) {
                const struct fj_data *dd = (const void *)buf;
                if (dd->length > FJ_DATA_MAX || dd->data_off + dd->length > data_size) break; /* cannot be: bytes go first */
                uint64_t end = dd->data_off + ((dd->length + 4095) & ~4095ull);
                if (end > jn->data_end) jn->data_end = end;
            }
            if (s->n == seg_cap) { seg_cap = seg_cap ? seg_cap * 2 : 256; s->r = realloc(s->r, seg_cap * sizeof *s->r); }
            struct rec *r = &s->r[s->n++];
            r->type = h.type;
            r->flags = h.flags;
            r->len = h.len;
            r->src = src;
            r->stamp = h.stamp;
            r->seq = seq++;
            r->data_off = off + sizeof h + fixed;
            size_t keep = h.type == FJ_DATA ? fixed : h.len;
            r->p = malloc(keep);
            memcpy(r->p, buf, keep);
            off += sizeof h + h.len;
        }
        jn->log_end = off;
        free(buf);
    }
    /* the journals of the other processes of the interval */
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    char (*subs)[256] = NULL;
    size_t ns = 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX - 1) && e->d_type != DT_REG) {
            subs = realloc(subs, (ns + 1) * sizeof *subs);
            snprintf(subs[ns++], sizeof *subs, "%s", e->d_name);
        }
    closedir(d);
    int rc = 0;
    for (size_t i = 0; i < ns && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
        struct stat st;
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode)) rc = load_jnl(s, path);
    }
    free(subs);
    return rc;
}

/* first by stamp; a tie (two processes in the same nanosecond) by journal, then order */
static int rec_order(const void *a, const void *b)
{
    const struct rec *x = a, *y = b;
    if (x->stamp != y->stamp) return x->stamp < y->stamp ? -1 : 1;
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int load_seg(struct seg *s)
{
    char path[LZ_PATH_MAX + 96];
    struct stat st;
    seg_cap = 0;
    snprintf(path, sizeof path, "%s/" FJ_RESET, s->ckdir);
    if (lstat(path, &st) == 0) return 0; /* being emptied: empty */
    if (load_jnl(s, s->ckdir) < 0) return -1;
    qsort(s->r, s->n, sizeof *s->r, rec_order);
    return 0;
}

static void seg_free(struct seg *s)
{
    for (size_t j = 0; j < s->n; j++) free(s->r[j].p);
    free(s->r);
    for (size_t j = 0; j < s->nj; j++) {
        if (s->j[j].log_fd >= 0) close(s->j[j].log_fd);
        if (s->j[j].data_fd >= 0) close(s->j[j].data_fd);
    }
    free(s->j);
}

struct fj_plan *fj_plan_load(const char *dir, uint64_t target, char *why, size_t whylen)
{
    uint64_t *v;
    int *jr;
    int n = lz_store_list_journals(dir, &v, &jr);
    if (n < 0) { snprintf(why, whylen, "cannot list the checkpoints: %s", strerror(errno)); return NULL; }
    struct fj_plan *p = calloc(1, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    p->s = calloc((size_t)n + 1, sizeof *p->s);
    /* a failed checkpoint's journal (jrnl.N) undoes its interval like ckpt.N's */
    for (int i = n - 1; i >= 0; i--) {
        if (v[i] < target) continue;
        struct seg *s = &p->s[p->n++];
        s->index = v[i];
        if (jr[i]) lz_jrnl_path(s->ckdir, sizeof s->ckdir, dir, v[i]);
        else lz_ckpt_path(s->ckdir, sizeof s->ckdir, dir, v[i]);
        if (load_seg(s) < 0) {
            snprintf(why, whylen, "cannot read the file journal of %scheckpoint %" PRIu64 ": %s", jr[i] ? "failed " : "",
                     v[i], strerror(errno));
            free(v);
            free(jr);
            fj_plan_free(p);
            return NULL;
        }
    }
    free(v);
    free(jr);
    return p;
}

void fj_plan_free(struct fj_plan *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) seg_free(&p->s[i]);
    free(p->s);
    free(p);
}

int fj_plan_empty(const struct fj_plan *p)
{
    for (size_t i = 0; i < p->n; i++) if (p->s[i].n) return 0;
    return 1;
}

/* ------------------------------------------------------------------ records */

static const struct fj_name *NAME(const struct rec *r) { return (const struct fj_name *)r->p; }
static const char *name_path(const struct rec *r) { return r->p + sizeof(struct fj_name); }
static const char *name_target(const struct rec *r) { const char *p = name_path(r); return p + strlen(p) + 1; }
static const struct fj_inode *INODE(const struct rec *r) { return (const struct fj_inode *)r->p; }
static const char *inode_path(const struct rec *r) { return r->p + sizeof(struct fj_inode); }

static int depth(const char *p) { int d = 0; for (; *p; p++) d += *p == '/'; return d; }

/* The first record per path in one journal (the state at its checkpoint). */
struct nm { const struct rec *r; const char *path; int depth; size_t order; };

static int nm_by_path(const void *a, const void *b)
{
    const struct nm *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->order < y->order ? -1 : x->order > y->order);
}
static int nm_shallow(const void *a, const void *b)
{
    const struct nm *x = a, *y = b;
    return x->depth != y->depth ? x->depth - y->depth : strcmp(x->path, y->path);
}
static int nm_deep(const void *a, const void *b) { return nm_shallow(b, a); }

static struct nm *first_names(const struct seg *s, uint16_t type, size_t *count)
{
    struct nm *v = malloc((s->n + 1) * sizeof *v);
    size_t n = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i].type == type) {
            const char *path = type == FJ_NAME ? name_path(&s->r[i]) : s->r[i].p + sizeof(struct fj_dirtime);
            v[n++] = (struct nm){&s->r[i], path, depth(path), i};
        }
    qsort(v, n, sizeof *v, nm_by_path);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || strcmp(v[m - 1].path, v[i].path)) v[m++] = v[i];
    *count = m;
    return v;
}

/* ------------------------------------------------------------------ file-system steps */

static int delay;
static void step_done(void)
{
    if (delay > 0) { struct timespec t = {delay / 1000, (delay % 1000) * 1000000L}; nanosleep(&t, NULL); }
}

static int fail(char *why, size_t wl, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t wl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wl, fmt, ap);
    va_end(ap);
    return -1;
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

static int same_ino(const struct stat *st, uint64_t dev, uint64_t ino) { return st->st_dev == dev && st->st_ino == ino; }

/* files.keep/<dev>.<ino> of an interval: in the journal `first` (the one
 * whose record asks), else in whichever of its journals holds it (a process
 * may have linked an inode another one recorded); if none, first's. */
static void keep_path(char *out, size_t len, const struct seg *s, uint32_t first, uint64_t dev, uint64_t ino)
{
    char name[40];
    struct stat st;
    fj_keep_name(name, dev, ino);
    for (size_t k = 0; k <= s->nj; k++) {
        size_t j = k == 0 ? first : k - 1;
        if (j >= s->nj || (k && j == first)) continue;
        snprintf(out, len, "%s/" FJ_KEEP "/%s", s->j[j].dir, name);
        if (lstat(out, &st) == 0) return;
    }
    snprintf(out, len, "%s/" FJ_KEEP "/%s", first < s->nj ? s->j[first].dir : s->ckdir, name);
}

static int copy_fd(int in, int out)
{
    char *buf = malloc(1 << 20);
    ssize_t n;
    off_t off = 0;
    while ((n = pread(in, buf, 1 << 20, off)) > 0) {
        if (lz_write_all(out, buf, (size_t)n) < 0) { free(buf); return -1; }
        off += n;
    }
    free(buf);
    return n < 0 ? -1 : 0;
}

/* Copies brought back for kept copies in this rollback: the inode of N they
 * stand for (its content is rolled back into the copy). */
static struct copy_alias { uint64_t dev, ino, cdev, cino; } *aliases;
static size_t naliases;
static const char *alias_dir;

static void load_aliases(const char *dir)
{
    char ap[LZ_PATH_MAX + 32];
    snprintf(ap, sizeof ap, "%s/" FJ_ALIAS, dir);
    FILE *f = fopen(ap, "r");
    struct copy_alias a;
    while (f && fscanf(f, "%" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &a.dev, &a.ino, &a.cdev, &a.cino) == 4) {
        aliases = realloc(aliases, (naliases + 1) * sizeof *aliases);
        aliases[naliases++] = a;
    }
    if (f) fclose(f);
}

/* st is a copy of (dev, ino), or a copy of a copy (each rollback copies anew) */
static int is_copy_of(const struct stat *st, uint64_t dev, uint64_t ino)
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
    keep_path(keep, sizeof keep, s, r->src, n->dev, n->ino);
    struct stat st;
    if (lstat(path, &st) == 0 && (same_ino(&st, n->dev, n->ino) || is_copy_of(&st, n->dev, n->ino))) return 0;
    if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && remove_any(path) < 0)
        return fail(why, wl, "cannot remove the directory %s that replaced a file: %s", path, strerror(errno));
    parent_of(path, par);
    if (mkdir_p(par) < 0) return fail(why, wl, "cannot recreate the directory %s: %s", par, strerror(errno));
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
        if (!ok) { unlink(tmp); return fail(why, wl, "cannot bring back %s from its kept copy: %s", path, strerror(errno)); }
    } else if (link(keep, tmp) < 0) {
        return fail(why, wl, "cannot bring back %s (kept as %s): %s", path, keep, strerror(errno));
    }
    if (rename(tmp, path) < 0) { int e = errno; unlink(tmp); return fail(why, wl, "cannot bring back %s: %s", path, strerror(e)); }
    if ((r->flags & FJ_NAME_COPIED) && lstat(path, &st) == 0) {
        aliases = realloc(aliases, (naliases + 1) * sizeof *aliases);
        aliases[naliases++] = (struct copy_alias){n->dev, n->ino, st.st_dev, st.st_ino};
        char ap[LZ_PATH_MAX + 32];
        snprintf(ap, sizeof ap, "%s/" FJ_ALIAS, alias_dir);
        FILE *f = fopen(ap, "a");
        if (f) {
            fprintf(f, "%" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 "\n", n->dev, n->ino, (uint64_t)st.st_dev, (uint64_t)st.st_ino);
            fflush(f);
            fsync(fileno(f));
            fclose(f);
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ one journal */

static int apply_seg(const struct seg *s, char *why, size_t wl)
{
    size_t nn, nd;
    struct nm *names = first_names(s, FJ_NAME, &nn);
    struct nm *dts = first_names(s, FJ_DIRTIME, &nd);
    int rc = 0;
    struct stat st;

    /* which directories of N exist somewhere: removals spare them */
    const struct fj_name **keepdirs = calloc(nn + 1, sizeof *keepdirs);
    size_t nk = 0;
    for (size_t i = 0; i < nn; i++)
        if (NAME(names[i].r)->was == FJ_WAS_DIR) keepdirs[nk++] = NAME(names[i].r);
    spare = keepdirs;
    nspare = nk;
    /* B: what did not exist at N goes (deepest first), sparing directories of
     * N inside; once those are back in place (A), again for what held them */
    for (int round = 0; round < 2 && rc == 0; round++) {
        qsort(names, nn, sizeof *names, nm_deep);
        for (size_t i = 0; i < nn && rc == 0; i++) {
            if (NAME(names[i].r)->was != FJ_WAS_ABSENT || lstat(names[i].path, &st) < 0) continue;
            if (remove_any(names[i].path) < 0) rc = fail(why, wl, "cannot remove %s: %s", names[i].path, strerror(errno));
            step_done();
        }
        if (round == 1) break;
        /* A: directories of N that were moved go back (shallowest first);
         * what moves with them is then found below where they went */
        qsort(names, nn, sizeof *names, nm_shallow);
        char **mfrom = calloc(nn + 1, sizeof *mfrom), **mto = calloc(nn + 1, sizeof *mto);
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
                keep_path(where, sizeof where, s, names[i].r->src, n->dev, n->ino);
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
                rc = fail(why, wl, "cannot move the directory %s back to %s: %s", where, names[i].path, strerror(errno));
            mfrom[nm] = strdup(where);
            mto[nm++] = strdup(names[i].path);
            step_done();
            break;
        }
        }
        for (size_t k = 0; k < nm; k++) { free(mfrom[k]); free(mto[k]); }
        free(mfrom);
        free(mto);
    }
    /* C: what existed at N comes back (shallowest first) */
    qsort(names, nn, sizeof *names, nm_shallow);
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
                /* the directory of N is gone (it was empty then): one made since
                 * stands in, emptied but for directories of N moved back into it */
                empty_dir_at(AT_FDCWD, path);
                break;
            }
            if ((have && remove_any(path) != 0) || mkdir(path, n->mode & 07777) < 0)
                rc = fail(why, wl, "cannot recreate the directory %s: %s", path, strerror(errno));
            break;
        case FJ_WAS_SYMLINK: {
            char cur[LZ_PATH_MAX];
            ssize_t l = have && S_ISLNK(st.st_mode) ? readlink(path, cur, sizeof cur - 1) : -1;
            if (l >= 0) { cur[l] = 0; if (!strcmp(cur, name_target(names[i].r))) break; }
            if ((have && remove_any(path) < 0) || symlink(name_target(names[i].r), path) < 0)
                rc = fail(why, wl, "cannot recreate the symbolic link %s: %s", path, strerror(errno));
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
    char *buf = malloc(FJ_DATA_MAX);
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        const struct rec *r = &s->r[i];
        if (r->type != FJ_INODE) continue;
        const struct fj_inode *in = INODE(r);
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = s->r[j].type == FJ_INODE && INODE(&s->r[j])->dev == in->dev && INODE(&s->r[j])->ino == in->ino;
        if (dup) continue;
        char keep[LZ_PATH_MAX + 160];
        keep_path(keep, sizeof keep, s, r->src, in->dev, in->ino);
        struct stat fs;
        const char *at = lstat(keep, &fs) == 0 ? keep : inode_path(r);
        int fd = open(at, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0 && errno == EACCES && chmod(at, (in->mode & 07777) | 0200) == 0)
            fd = open(at, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK); /* made read-only since: its mode comes back below */
        /* the inode of N, or the copy that stands for it (kept across file systems) */
        if (fd < 0 || fstat(fd, &fs) < 0 || !S_ISREG(fs.st_mode) ||
            !(same_ino(&fs, in->dev, in->ino) || is_copy_of(&fs, in->dev, in->ino))) {
            if (fd >= 0) close(fd);
            continue; /* not reachable by a name at N: no one sees it but through a descriptor (kept by content) */
        }
        if (ftruncate(fd, (off_t)in->size) < 0) rc = fail(why, wl, "cannot restore the size of %s: %s", inode_path(r), strerror(errno));
        /* later records first: the first one saved is the content at N */
        for (size_t j = s->n; j-- > i && rc == 0;) {
            const struct rec *d = &s->r[j];
            if (d->type != FJ_DATA) continue;
            const struct fj_data *dd = (const void *)d->p;
            if (dd->dev != in->dev || dd->ino != in->ino) continue;
            /* only bytes that existed at N: another process may have saved a
             * block after this inode grew (its record has a later stamp) */
            if (dd->offset >= in->size) continue;
            size_t len = dd->length > in->size - dd->offset ? (size_t)(in->size - dd->offset) : dd->length;
            if (lz_pread_all(s->j[d->src].data_fd, buf, len, (off_t)dd->data_off) < 0 || pwrite(fd, buf, len, (off_t)dd->offset) != (ssize_t)len)
                rc = fail(why, wl, "cannot restore the content of %s: %s", inode_path(r), strerror(errno ? errno : EIO));
        }
        if (rc == 0) {
            fchmod(fd, in->mode & 07777);
            if (geteuid() == 0 && (fs.st_uid != in->uid || fs.st_gid != in->gid)) { if (fchown(fd, in->uid, in->gid)) {} }
            struct timespec ts[2] = {{in->atime_ns / 1000000000, in->atime_ns % 1000000000},
                                     {in->mtime_ns / 1000000000, in->mtime_ns % 1000000000}};
            futimens(fd, ts);
        }
        close(fd);
        step_done();
    }
    free(buf);
    /* E: directories' modes and times, deepest first (creating entries changed them) */
    qsort(names, nn, sizeof *names, nm_deep);
    for (size_t i = 0; i < nn && rc == 0; i++) {
        const struct fj_name *n = NAME(names[i].r);
        if (n->was != FJ_WAS_DIR) continue;
        chmod(names[i].path, n->mode & 07777);
        set_times(names[i].path, n->atime_ns, n->mtime_ns);
    }
    qsort(dts, nd, sizeof *dts, nm_deep);
    for (size_t i = 0; i < nd && rc == 0; i++) {
        const struct fj_dirtime *t = (const void *)dts[i].r->p;
        set_times(dts[i].path, t->atime_ns, t->mtime_ns);
    }
    free(names);
    free(dts);
    return rc;
}

int fj_plan_apply(const struct fj_plan *p, int delay_ms, char *why, size_t whylen)
{
    delay = delay_ms;
    alias_dir = p->dir;
    naliases = 0;
    load_aliases(p->dir);
    for (size_t i = 0; i < p->n; i++)
        if (apply_seg(&p->s[i], why, whylen) < 0) return -1;
    sync(); /* the files are at N on disk before any journal goes away */
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
            subs = realloc(subs, (ns + 1) * sizeof *subs);
            snprintf(subs[ns++], sizeof *subs, "%s", e->d_name);
        }
    if (d) closedir(d);
    for (size_t i = 0; i < ns; i++) {
        int sfd = openat(dfd, subs[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sfd < 0) continue;
        drop_proc_journals(sfd);
        unlinkat(sfd, FJ_LOG, 0);
        unlinkat(sfd, FJ_DATAFILE, 0);
        lz_remove_tree(sfd, FJ_KEEP);
        close(sfd);
        unlinkat(dfd, subs[i], AT_REMOVEDIR);
    }
    free(subs);
}

int fj_journal_reset(const char *ckdir)
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
    snprintf(path, sizeof path, "%s/" FJ_LOG, ckdir);
    if (truncate(path, 0) < 0 && errno != ENOENT) return -1;
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

/* What the rollback will decide for each path: the record of the oldest
 * journal that has one (it is applied last). */
struct want { const char *path; const struct rec *r; const struct seg *s; };

static int want_cmp(const void *a, const void *b) { return strcmp(((const struct want *)a)->path, ((const struct want *)b)->path); }

static struct want *final_names(const struct fj_plan *p, size_t *count)
{
    size_t cap = 0, n = 0;
    struct want *w = NULL;
    for (size_t i = 0; i < p->n; i++) {
        size_t k;
        struct nm *v = first_names(&p->s[i], FJ_NAME, &k);
        for (size_t j = 0; j < k; j++) {
            if (n == cap) { cap = cap ? cap * 2 : 64; w = realloc(w, cap * sizeof *w); }
            w[n++] = (struct want){v[j].path, v[j].r, &p->s[i]};
        }
        free(v);
    }
    /* stable: keep the last occurrence (the oldest journal) per path */
    qsort(w, n, sizeof *w, want_cmp); /* ties broken below by scanning */
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        if (m && !strcmp(w[m - 1].path, w[i].path)) {
            if (w[i].s->index < w[m - 1].s->index) w[m - 1] = w[i];
        } else {
            w[m++] = w[i];
        }
    }
    *count = m;
    return w;
}

static int newer(const struct stat *st, int64_t t)
{
    return (int64_t)st->st_ctim.tv_sec * 1000000000ll + st->st_ctim.tv_nsec > t;
}

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

static void add_list(char **list, size_t *count, const char *path)
{
    (*count)++;
    if (*count > 5) return;
    size_t have = *list ? strlen(*list) : 0;
    *list = realloc(*list, have + strlen(path) + 3);
    sprintf(*list + have, "%s%s", have ? ", " : "", path);
}

/* Where an inode of an INODE record is now, before any rollback: its keep
 * link if its names changed, else its name at N (if that is still it). */
static int inode_now(const struct seg *s, const struct rec *r, struct stat *st)
{
    char keep[LZ_PATH_MAX + 160];
    keep_path(keep, sizeof keep, s, r->src, INODE(r)->dev, INODE(r)->ino);
    if (lstat(keep, st) == 0) return 0;
    if (lstat(inode_path(r), st) == 0 && same_ino(st, INODE(r)->dev, INODE(r)->ino)) return 0;
    return -1;
}

size_t fj_plan_outside_changes(const struct fj_plan *p, int64_t stop_ns, char **list)
{
    size_t count = 0, n;
    *list = NULL;
    struct want *w = final_names(p, &n);
    struct stat st;
    for (size_t i = 0; i < n; i++) {
        const struct fj_name *nm = NAME(w[i].r);
        if (lstat(w[i].path, &st) < 0) continue;
        if (S_ISDIR(st.st_mode) ? (nm->was == FJ_WAS_ABSENT && tree_newer(w[i].path, stop_ns)) : newer(&st, stop_ns))
            add_list(list, &count, w[i].path);
    }
    free(w);
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_INODE) continue;
            if (inode_now(&p->s[i], r, &st) == 0 && newer(&st, stop_ns)) {
                int listed = 0;
                if (*list) listed = strstr(*list, inode_path(r)) != NULL;
                if (!listed) add_list(list, &count, inode_path(r));
            }
        }
    return count;
}

struct line { char *text; };
static int line_cmp(const void *a, const void *b)
{
    return strcmp(((const struct line *)a)->text + 9, ((const struct line *)b)->text + 9);
}

size_t fj_plan_diff(const struct fj_plan *p, FILE *out)
{
    size_t n, nl = 0, cap = 64;
    struct line *lines = malloc(cap * sizeof *lines);
    struct want *w = final_names(p, &n);
    struct stat st;
    char **seen = calloc(n + 1, sizeof *seen);
    size_t nseen = 0;
#define ADD(kind, path) do { if (nl == cap) { cap *= 2; lines = realloc(lines, cap * sizeof *lines); } \
        if (asprintf(&lines[nl].text, "%-8s %s", kind, path) > 0) nl++; } while (0)
    for (size_t i = 0; i < n; i++) {
        const struct fj_name *nm = NAME(w[i].r);
        int have = lstat(w[i].path, &st) == 0;
        const char *kind = NULL;
        switch (nm->was) {
        case FJ_WAS_ABSENT: if (have) kind = "removed"; break;
        case FJ_WAS_FILE: if (!have || !same_ino(&st, nm->dev, nm->ino)) kind = "restored"; break;
        case FJ_WAS_DIR: if (!have || !S_ISDIR(st.st_mode)) kind = "restored"; break;
        case FJ_WAS_SYMLINK: {
            char cur[LZ_PATH_MAX];
            ssize_t l = have && S_ISLNK(st.st_mode) ? readlink(w[i].path, cur, sizeof cur - 1) : -1;
            if (l < 0) kind = "restored";
            else { cur[l] = 0; if (strcmp(cur, name_target(w[i].r))) kind = "restored"; }
            break;
        }
        default: if (!have) kind = "restored"; break;
        }
        if (kind) { ADD(kind, w[i].path); seen[nseen++] = (char *)w[i].path; }
    }
    for (size_t i = 0; i < p->n; i++)
        for (size_t j = 0; j < p->s[i].n; j++) {
            const struct rec *r = &p->s[i].r[j];
            if (r->type != FJ_INODE) continue;
            const char *path = inode_path(r);
            int dup = 0;
            for (size_t k = 0; k < nseen && !dup; k++) dup = !strcmp(seen[k], path);
            for (size_t k = 0; k < nl && !dup; k++) dup = !strcmp(lines[k].text + 9, path);
            if (dup) continue;
            /* something to undo if the content was saved, or size/mode/time moved */
            const struct fj_inode *in = INODE(r);
            int changed = 1;
            if (inode_now(&p->s[i], r, &st) == 0) {
                int64_t mt = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
                changed = (uint64_t)st.st_size != in->size || mt != in->mtime_ns || (st.st_mode & 07777) != (in->mode & 07777);
            }
            if (changed) ADD("modified", path);
        }
    qsort(lines, nl, sizeof *lines, line_cmp);
    for (size_t i = 0; i < nl; i++) { fprintf(out, "%s\n", lines[i].text); free(lines[i].text); }
    free(lines);
    free(seen);
    free(w);
    return nl;
}

/* Paths a journal changes (NAME paths and INODE paths), and the bytes it keeps. */
static void journal_paths(const char *ckdir, uint64_t **hashes, size_t *n, size_t *cap, uint64_t *bytes)
{
    struct seg s;
    memset(&s, 0, sizeof s);
    snprintf(s.ckdir, sizeof s.ckdir, "%s", ckdir);
    *bytes = 0;
    if (load_seg(&s) < 0) { seg_free(&s); return; }
    struct stat st;
    for (size_t j = 0; j < s.nj; j++) *bytes += s.j[j].log_end + s.j[j].data_end;
    for (size_t i = 0; i < s.n; i++) {
        const char *path = s.r[i].type == FJ_NAME ? name_path(&s.r[i]) : s.r[i].type == FJ_INODE ? inode_path(&s.r[i]) : NULL;
        if (!path) continue;
        if (*n == *cap) { *cap = *cap ? *cap * 2 : 256; *hashes = realloc(*hashes, *cap * sizeof **hashes); }
        (*hashes)[(*n)++] = lz_hash(path, strlen(path));
    }
    /* kept files only cost space once nothing else links them */
    for (size_t j = 0; j < s.nj; j++) {
        char keep[LZ_PATH_MAX + 96];
        snprintf(keep, sizeof keep, "%s/" FJ_KEEP, s.j[j].dir);
        DIR *d = opendir(keep);
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_nlink == 1 &&
                S_ISREG(st.st_mode))
                *bytes += (uint64_t)st.st_blocks * 512;
        if (d) closedir(d);
    }
    seg_free(&s);
}

static int u64cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void fj_store_stats(const char *dir, const uint64_t *idx, int n, uint64_t *files, uint64_t *bytes)
{
    /* rolling back to idx[i] also undoes the intervals of failed checkpoints
     * after it (jrnl.*): their journals count too */
    uint64_t *v;
    int *jr;
    int nj = lz_store_list_journals(dir, &v, &jr);
    if (nj < 0) { /* then the checkpoints' own journals at least */
        v = malloc(((size_t)n + 1) * sizeof *v);
        jr = calloc((size_t)n + 1, sizeof *jr);
        nj = v && jr ? n : 0;
        if (nj) memcpy(v, idx, (size_t)n * sizeof *v);
    }
    uint64_t *h = NULL, total = 0;
    size_t nh = 0, cap = 0;
    int j = nj - 1;
    for (int i = n - 1; i >= 0; i--) {
        for (; j >= 0 && v[j] >= idx[i]; j--) {
            char ck[LZ_PATH_MAX + 64];
            uint64_t b;
            if (jr[j]) lz_jrnl_path(ck, sizeof ck, dir, v[j]);
            else lz_ckpt_path(ck, sizeof ck, dir, v[j]);
            journal_paths(ck, &h, &nh, &cap, &b);
            total += b;
        }
        qsort(h, nh, sizeof *h, u64cmp);
        size_t m = 0;
        for (size_t k = 0; k < nh; k++) if (m == 0 || h[m - 1] != h[k]) h[m++] = h[k];
        nh = m;
        files[i] = nh;
        bytes[i] = total;
    }
    free(h);
    free(v);
    free(jr);
}
