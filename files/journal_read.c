/* Reading the journals of a rollback (journal_read.h, journal.h). */
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

/* ------------------------------------------------------------------ loading */

static size_t seg_cap;

int fj_fail(char *why, size_t wl, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, wl, fmt, ap);
    va_end(ap);
    return -1;
}

/* The journal's path as a user finds it in the store: "ckpt.000007/proc.812/files.log" */
static const char *shown(const struct seg *s, const char *path)
{
    const char *p = path + strlen(s->ckdir);
    const char *base = s->ckdir + strlen(s->ckdir);
    while (base > s->ckdir && base[-1] != '/') base--;
    static char out[LZ_PATH_MAX + 128];
    snprintf(out, sizeof out, "%s%s", base, p);
    return out;
}

static int all_zero(const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) if (b[i]) return 0;
    return 1;
}

/* After the end of an open log (a zero header, or a torn record with magic
 * 0) nothing but the rest of a torn record and zeros: a valid record there
 * means bytes in the middle of the log were damaged, not a torn write. */
static int record_after(int fd, uint64_t from, uint64_t size)
{
    const size_t chunk = 1 << 20;
    char *b = lz_xmalloc(chunk + sizeof(struct fj_rec) + FJ_DATA_MAX + 65536);
    int found = 0;
    for (uint64_t off = from; off < size && !found; off += chunk) {
        size_t n = size - off < chunk ? (size_t)(size - off) : chunk;
        if (lz_pread_all(fd, b, n, (off_t)off) < 0) break;
        for (const char *p = b; (p = memmem(p, (size_t)(b + n - p), "LZFJ", 4)); p++) {
            struct fj_rec h;
            uint64_t at = off + (uint64_t)(p - b);
            if (lz_pread_all(fd, &h, sizeof h, (off_t)at) < 0 || h.magic != FJ_REC_MAGIC || h.len > FJ_DATA_MAX + 65536) continue;
            char *pl = b + chunk + sizeof(struct fj_rec);
            if (lz_pread_all(fd, pl, h.len, (off_t)(at + sizeof h)) < 0) continue;
            uint32_t check = h.check;
            h.check = 0;
            XXH3_state_t st;
            XXH3_64bits_reset(&st);
            XXH3_64bits_update(&st, &h, sizeof h);
            XXH3_64bits_update(&st, pl, h.len);
            if ((uint32_t)XXH3_64bits_digest(&st) == check) { found = 1; break; }
        }
    }
    free(b);
    return found;
}

static size_t fixed_size(unsigned type)
{
    switch (type) {
    case FJ_INODE: return sizeof(struct fj_inode);
    case FJ_DATA: return sizeof(struct fj_data);
    case FJ_NAME: return sizeof(struct fj_name);
    case FJ_MOVED: return sizeof(struct fj_moved);
    case FJ_DIRTIME: return sizeof(struct fj_dirtime);
    case FJ_BEGIN: return sizeof(struct fj_begin);
    case FJ_END: return sizeof(struct fj_end);
    }
    return 0;
}

/* Reads one log (journal.h): every record proven, or -1 with why.  pid > 0:
 * the process whose journal it must be; job: the store's (NULL: not checked). */
static int read_log(struct seg *s, struct jnl *jn, uint32_t src, int32_t pid, const uint64_t *job, char *why, size_t wl)
{
    char path[LZ_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/" FJ_LOG, jn->dir);
    struct stat ls, ds;
    if (fstat(jn->log_fd, &ls) < 0) return fj_fail(why, wl, "cannot read %s: %s", shown(s, path), strerror(errno));
    uint64_t size = (uint64_t)ls.st_size;
    snprintf(path, sizeof path, "%s/" FJ_DATAFILE, jn->dir);
    jn->data_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (jn->data_fd < 0 && errno != ENOENT) return fj_fail(why, wl, "cannot read %s: %s", shown(s, path), strerror(errno));
    uint64_t data_size = jn->data_fd >= 0 && fstat(jn->data_fd, &ds) == 0 ? (uint64_t)ds.st_size : 0;
    snprintf(path, sizeof path, "%s/" FJ_LOG, jn->dir);
    const char *name = shown(s, path);
    char shown_log[LZ_PATH_MAX + 128];
    snprintf(shown_log, sizeof shown_log, "%s", name);
    char *buf = lz_xmalloc(FJ_DATA_MAX + 65536), *data = lz_xmalloc(FJ_DATA_MAX);
    uint64_t off = 0, seq = 0;
    int rc = 0, sealed = 0;
    while (rc == 0) {
        struct fj_rec h;
        size_t have = size - off < sizeof h ? (size_t)(size - off) : sizeof h;
        memset(&h, 0, sizeof h);
        if (have && lz_pread_all(jn->log_fd, &h, have, (off_t)off) < 0) { rc = fj_fail(why, wl, "cannot read %s: %s", shown_log, strerror(errno)); break; }
        if (have < sizeof h) {
            /* the end of the file: an open log ends in zeros, a sealed one at its END */
            if (have == 0 || !all_zero((const char *)&h, have))
                rc = fj_fail(why, wl, "%s is truncated (it ends after %" PRIu64 " records, without its END record)", shown_log, seq);
            break;
        }
        if (h.magic == 0) {
            /* the end of an open log: a torn record at most, then zeros (a
             * log is made with its BEGIN in it: never at its start) */
            if (seq == 0) rc = fj_fail(why, wl, "%s is damaged: it does not begin with its BEGIN record", shown_log);
            else if (record_after(jn->log_fd, off + 4, size))
                rc = fj_fail(why, wl, "%s is damaged at offset %" PRIu64 " (record %" PRIu64 " is zeroed, later records follow)", shown_log, off, seq + 1);
            break;
        }
        if (h.magic != FJ_REC_MAGIC || h.type < FJ_INODE || h.type > FJ_TYPE_MAX || h.len > FJ_DATA_MAX + 65536 ||
            h.len < fixed_size(h.type)) {
            rc = fj_fail(why, wl, "%s is damaged at offset %" PRIu64 " (record %" PRIu64 ")", shown_log, off, seq + 1);
            break;
        }
        if (off + sizeof h + h.len > size) { rc = fj_fail(why, wl, "%s is truncated inside record %" PRIu64, shown_log, seq + 1); break; }
        if (lz_pread_all(jn->log_fd, buf, h.len, (off_t)(off + sizeof h)) < 0) { rc = fj_fail(why, wl, "cannot read %s: %s", shown_log, strerror(errno)); break; }
        uint32_t check = h.check;
        h.check = 0;
        XXH3_state_t st;
        XXH3_64bits_reset(&st);
        XXH3_64bits_update(&st, &h, sizeof h);
        XXH3_64bits_update(&st, buf, h.len);
        if ((uint32_t)XXH3_64bits_digest(&st) != check) {
            rc = fj_fail(why, wl, "%s is damaged: record %" PRIu64 " at offset %" PRIu64 " fails its checksum", shown_log, seq + 1, off);
            break;
        }
        int strings = h.type == FJ_INODE || h.type == FJ_NAME || h.type == FJ_MOVED || h.type == FJ_DIRTIME;
        if (strings && buf[h.len - 1] != 0) { rc = fj_fail(why, wl, "%s is damaged: record %" PRIu64 " is malformed", shown_log, seq + 1); break; }
        if ((seq == 0) != (h.type == FJ_BEGIN)) {
            rc = fj_fail(why, wl, "%s is damaged: %s", shown_log, seq == 0 ? "it does not begin with its BEGIN record" : "a second BEGIN record");
            break;
        }
        if (h.type == FJ_BEGIN) {
            const struct fj_begin *b = (const void *)buf;
            if (b->version > FJ_VERSION)
                rc = fj_fail(why, wl, "%s was written by a newer Lazarus (journal version %u; this build reads up to %u)", shown_log,
                             b->version, FJ_VERSION);
            else if (job && (b->job[0] != job[0] || b->job[1] != job[1])) rc = fj_fail(why, wl, "%s belongs to another job", shown_log);
            else if (b->index != s->index)
                rc = fj_fail(why, wl, "%s is the journal of checkpoint %" PRIu64 ", not of checkpoint %" PRIu64 " (moved or swapped)", shown_log, b->index, s->index);
            else if (pid > 0 && b->pid != pid)
                rc = fj_fail(why, wl, "%s is the journal of process %d, not of process %d (moved or swapped)", shown_log, b->pid, pid);
            off += sizeof h + h.len;
            seq++;
            continue;
        }
        if (h.type == FJ_END) {
            const struct fj_end *e = (const void *)buf;
            off += sizeof h + h.len;
            if (e->records != seq) rc = fj_fail(why, wl, "%s is damaged: its END record counts %" PRIu64 " records, it has %" PRIu64, shown_log, e->records, seq);
            else if (off < size) {
                /* killed between the END and the cut: zeros may follow, nothing else */
                uint64_t rest = size - off;
                char *z = lz_xmalloc(65536);
                for (uint64_t o = 0; rc == 0 && o < rest; o += 65536) {
                    size_t n = rest - o < 65536 ? (size_t)(rest - o) : 65536;
                    if (lz_pread_all(jn->log_fd, z, n, (off_t)(off + o)) < 0 || !all_zero(z, n))
                        rc = fj_fail(why, wl, "%s is damaged: bytes follow its END record", shown_log);
                }
                free(z);
            }
            sealed = 1;
            break;
        }
        if (h.type == FJ_DATA) {
            const struct fj_data *dd = (const void *)buf;
            if (dd->length > FJ_DATA_MAX || dd->data_off % 4096 || dd->data_off + dd->length > data_size) {
                rc = fj_fail(why, wl, "%s/" FJ_DATAFILE " is truncated or missing (record %" PRIu64 " of %s needs bytes up to %" PRIu64 ")",
                         shown(s, jn->dir), seq + 1, shown_log, dd->data_off + dd->length);
                break;
            }
            if (lz_pread_all(jn->data_fd, data, dd->length, (off_t)dd->data_off) < 0 || XXH3_64bits(data, dd->length) != dd->xxh3) {
                rc = fj_fail(why, wl, "%s/" FJ_DATAFILE " is damaged: the %" PRIu64 " bytes saved at offset %" PRIu64 " fail their checksum",
                         shown(s, jn->dir), dd->length, dd->data_off);
                break;
            }
            uint64_t end = dd->data_off + ((dd->length + 4095) & ~4095ull);
            if (end > jn->data_end) jn->data_end = end;
        }
        size_t fixed = fixed_size(h.type);
        if (s->n == seg_cap) { seg_cap = seg_cap ? seg_cap * 2 : 256; s->r = lz_xrealloc(s->r, seg_cap * sizeof *s->r); }
        struct rec *r = &s->r[s->n++];
        jn->nundo++;
        r->type = h.type;
        r->flags = h.flags;
        r->len = h.len;
        r->src = src;
        r->stamp = h.stamp;
        r->seq = seq++;
        r->data_off = off + sizeof h + fixed;
        size_t keep = h.type == FJ_DATA ? fixed : h.len;
        r->p = lz_xmalloc(keep);
        memcpy(r->p, buf, keep);
        off += sizeof h + h.len;
    }
    (void)sealed;
    jn->log_end = off;
    free(buf);
    free(data);
    return rc;
}

/* Whether a journal directory holds nothing: a process killed while it made
 * its journal (the directory, files.keep/ and files.data come before the log). */
static int journal_unstarted(const char *dir)
{
    char path[LZ_PATH_MAX + 96];
    struct stat st;
    snprintf(path, sizeof path, "%s/" FJ_DATAFILE, dir);
    if (lstat(path, &st) == 0 && st.st_size != 0) return 0;
    snprintf(path, sizeof path, "%s/" FJ_KEEP, dir);
    DIR *d = opendir(path);
    struct dirent *e;
    int empty = 1;
    while (d && empty && (e = readdir(d))) empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    if (d) closedir(d);
    return empty;
}

/* The records of dir's journal, then of its proc.* journals (recursively).
 * pid: the process named by dir (proc.<pid>), 0 for the top one. */
static int load_jnl(struct seg *s, const char *dir, int32_t pid, const uint64_t *job, char *why, size_t wl)
{
    char path[LZ_PATH_MAX + 96];
    s->j = lz_xrealloc(s->j, (s->nj + 1) * sizeof *s->j);
    uint32_t src = (uint32_t)s->nj;
    struct jnl *jn = &s->j[s->nj++];
    memset(jn, 0, sizeof *jn);
    snprintf(jn->dir, sizeof jn->dir, "%s", dir);
    jn->data_fd = -1;
    snprintf(path, sizeof path, "%s/" FJ_LOG, dir);
    jn->log_fd = open(path, O_RDONLY | O_CLOEXEC);
    if (jn->log_fd < 0 && errno != ENOENT) return fj_fail(why, wl, "cannot read %s: %s", shown(s, path), strerror(errno));
    /* a process killed while it made its journal: files.log.new, or (in a
     * proc.<pid>/ directory) nothing yet; else a missing log is damage */
    char fresh[LZ_PATH_MAX + 96];
    struct stat fst;
    snprintf(fresh, sizeof fresh, "%s/" FJ_LOG ".new", dir);
    int unstarted = lstat(fresh, &fst) == 0 || (pid > 0 && journal_unstarted(dir));
    if (jn->log_fd < 0 && !unstarted) return fj_fail(why, wl, "%s is missing", shown(s, path));
    if (jn->log_fd >= 0 && read_log(s, jn, src, pid, job, why, wl) < 0) return -1;
    /* the journals of the other processes of the interval */
    DIR *d = opendir(dir);
    if (!d) return fj_fail(why, wl, "cannot read %s: %s", shown(s, dir), strerror(errno));
    struct dirent *e;
    char (*subs)[256] = NULL;
    size_t ns = 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, FJ_PROC_PREFIX, sizeof FJ_PROC_PREFIX - 1) && e->d_type != DT_REG) {
            subs = lz_xrealloc(subs, (ns + 1) * sizeof *subs);
            snprintf(subs[ns++], sizeof *subs, "%s", e->d_name);
        }
    closedir(d);
    int rc = 0;
    for (size_t i = 0; i < ns && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, subs[i]);
        struct stat st;
        uint64_t sub_pid = 0;
        const char *num = subs[i] + sizeof FJ_PROC_PREFIX - 1;
        if (lstat(path, &st) < 0 || !S_ISDIR(st.st_mode)) continue;
        if (strspn(num, "0123456789") != strlen(num) || lz_parse_u64(num, &sub_pid) < 0 || sub_pid == 0 || sub_pid > INT32_MAX)
            continue; /* not a journal of the job's (a process's own checkpoint part is proc.<pid> too) */
        rc = load_jnl(s, path, (int32_t)sub_pid, job, why, wl);
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

int fj_load_seg(struct seg *s, const uint64_t *job, char *why, size_t whylen)
{
    char path[LZ_PATH_MAX + 96];
    struct stat st;
    seg_cap = 0;
    snprintf(path, sizeof path, "%s/" FJ_RESET, s->ckdir);
    if (lstat(path, &st) == 0) return 0; /* being emptied: empty */
    if (load_jnl(s, s->ckdir, 0, job, why, whylen) < 0) return -1;
    if (s->n) qsort(s->r, s->n, sizeof *s->r, rec_order); /* (s->r is NULL without records) */
    return 0;
}

void fj_seg_free(struct seg *s)
{
    for (size_t j = 0; j < s->n; j++) free(s->r[j].p);
    free(s->r);
    for (size_t j = 0; j < s->nj; j++) {
        if (s->j[j].log_fd >= 0) close(s->j[j].log_fd);
        if (s->j[j].data_fd >= 0) close(s->j[j].data_fd);
    }
    free(s->j);
}

/* The inodes a journal keeps in files.keep/ are there and are still the
 * inodes it recorded (a hard link made before the change): a missing or
 * replaced one would be found half-way through the rollback. */
int fj_seg_check_keeps(const struct seg *s, int64_t stop_ns, char *why, size_t whylen)
{
    char keep[LZ_PATH_MAX + 160];
    struct stat st;
    for (size_t i = 0; i < s->n; i++) {
        const struct rec *r = &s->r[i];
        uint64_t dev, ino;
        const char *path;
        int copied = 0;
        if (r->type == FJ_NAME && NAME(r)->was == FJ_WAS_FILE) {
            dev = NAME(r)->dev, ino = NAME(r)->ino, path = name_path(r), copied = (r->flags & FJ_NAME_COPIED) != 0;
        } else if (r->type == FJ_INODE) {
            dev = INODE(r)->dev, ino = INODE(r)->ino, path = inode_path(r);
        } else {
            continue;
        }
        /* a NAME record's link, and an INODE record's that says so, are in
         * its own journal's files.keep/ (made there before the record); other
         * INODE records may find one a process of the interval made */
        int own = r->type == FJ_NAME || (r->flags & FJ_INODE_KEPT);
        if (own) {
            char name[40];
            fj_keep_name(name, dev, ino);
            snprintf(keep, sizeof keep, "%s/" FJ_KEEP "/%s", s->j[r->src].dir, name);
        } else {
            fj_keep_path(keep, sizeof keep, s, r->src, dev, ino);
        }
        const char *base = strrchr(s->ckdir, '/');
        const char *rel = base ? keep + (base - s->ckdir) + 1 : keep; /* as the store shows it: ckpt.N/... */
        if (lstat(keep, &st) == 0) {
            /* a copy when files.keep/ is on another file system than the inode */
            copied |= st.st_dev != dev;
            if (copied ? !S_ISREG(st.st_mode) : !same_ino(&st, dev, ino))
                return fj_fail(why, whylen, "%s is not the file it kept (%s as it was at checkpoint %" PRIu64 "): replaced or damaged",
                           rel, path, s->index);
            /* only the store holds it: its content changed after the job
             * stopped is damage (one with other names is the user's: the
             * outside-change check; ctime alone is no sign: the user removing
             * its last other name moves it, a write moves both) */
            if (st.st_nlink == 1 && (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec > stop_ns &&
                (int64_t)st.st_ctim.tv_sec * 1000000000ll + st.st_ctim.tv_nsec > stop_ns)
                return fj_fail(why, whylen, "%s (%s as it was at checkpoint %" PRIu64 ") was changed after the job stopped",
                           rel, path, s->index);
            continue;
        }
        /* an INODE record whose names never changed needs no link; one made
         * is there (even if the path holds the inode again by now) */
        if (!own) continue;
        return fj_fail(why, whylen, "%s is missing (it keeps %s as it was at checkpoint %" PRIu64 ")", rel, path, s->index);
    }
    return 0;
}

struct fj_plan *fj_plan_load(const char *dir, const uint64_t job[2], const struct fj_journal_dir *v, size_t n,
                             uint64_t target, int64_t stop_ns, char *why, size_t whylen)
{
    struct fj_plan *p = lz_xcalloc(1, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "%s", dir);
    p->s = lz_xcalloc(n + 1, sizeof *p->s);
    p->below = lz_xcalloc(n + 1, sizeof *p->below);
    /* a failed checkpoint's journal (jrnl.N) undoes its interval like ckpt.N's */
    for (size_t i = n; i-- > 0;) {
        if (v[i].index < target) {
            p->below[p->nbelow++] = strdup(v[i].dir);
            continue;
        }
        struct seg *s = &p->s[p->n++];
        s->index = v[i].index;
        snprintf(s->ckdir, sizeof s->ckdir, "%s", v[i].dir);
        char inner[LZ_PATH_MAX + 512];
        if (fj_load_seg(s, job, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "the file journal of %scheckpoint %" PRIu64 " is damaged: %s", v[i].failed ? "failed " : "",
                     v[i].index, inner);
            goto failed;
        }
        if (fj_seg_check_keeps(s, stop_ns, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "the file journal of %scheckpoint %" PRIu64 " is damaged: %s", v[i].failed ? "failed " : "",
                     v[i].index, inner);
        failed:
            fj_plan_free(p);
            return NULL;
        }
    }
    return p;
}

void fj_plan_free(struct fj_plan *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n; i++) fj_seg_free(&p->s[i]);
    free(p->s);
    for (size_t i = 0; i < p->nbelow; i++) free(p->below[i]);
    free(p->below);
    free(p);
}

int fj_plan_empty(const struct fj_plan *p)
{
    for (size_t i = 0; i < p->n; i++) if (p->s[i].n) return 0;
    return 1;
}

static int depth(const char *p) { int d = 0; for (; *p; p++) d += *p == '/'; return d; }


static int nm_by_path(const void *a, const void *b)
{
    const struct nm *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->order < y->order ? -1 : x->order > y->order);
}
int fj_nm_shallow(const void *a, const void *b)
{
    const struct nm *x = a, *y = b;
    return x->depth != y->depth ? x->depth - y->depth : strcmp(x->path, y->path);
}
int fj_nm_deep(const void *a, const void *b) { return fj_nm_shallow(b, a); }

struct nm *fj_first_names(const struct seg *s, uint16_t type, size_t *count)
{
    struct nm *v = lz_xmalloc((s->n + 1) * sizeof *v);
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


/* files.keep/<dev>.<ino> of an interval: in the journal `first` (the one
 * whose record asks), else in whichever of its journals holds it (a process
 * may have linked an inode another one recorded); if none, first's. */
void fj_keep_path(char *out, size_t len, const struct seg *s, uint32_t first, uint64_t dev, uint64_t ino)
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

/* What the rollback will decide for each path: the record of the oldest
 * journal that has one (it is applied last). */

static int want_cmp(const void *a, const void *b) { return strcmp(((const struct want *)a)->path, ((const struct want *)b)->path); }

struct want *fj_final_names(const struct fj_plan *p, size_t *count)
{
    size_t cap = 0, n = 0;
    struct want *w = NULL;
    for (size_t i = 0; i < p->n; i++) {
        size_t k;
        struct nm *v = fj_first_names(&p->s[i], FJ_NAME, &k);
        for (size_t j = 0; j < k; j++) {
            if (n == cap) { cap = cap ? cap * 2 : 64; w = lz_xrealloc(w, cap * sizeof *w); }
            w[n++] = (struct want){v[j].path, v[j].r, &p->s[i]};
        }
        free(v);
    }
    /* stable: keep the last occurrence (the oldest journal) per path */
    if (n) qsort(w, n, sizeof *w, want_cmp); /* ties broken below by scanning */
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


