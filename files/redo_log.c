/* The redo log of buffer mode (redo_log.h): written by lazarus-fsd at a
 * commit, checked by verify, applied by restart and rollback. */
#include "redo_log.h"
#include "hash.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define FR_MAGIC "LZREDO1"
enum { FR_FILE = 1, FR_EXT = 2, FR_FIN = 3 };

struct fr_head {
    char magic[8];
    uint64_t job[2];
    uint64_t index;
    uint64_t check; /* XXH3-64 of the header with check = 0 */
};

struct fr_rec {
    uint32_t type;
    uint32_t pad;
    uint64_t a, b, c, d;
    uint64_t len;   /* payload bytes after the record */
    uint64_t check; /* XXH3-64 of the record with check = 0, then the payload */
};

static uint64_t rec_sum(const struct fr_rec *r, const void *payload)
{
    struct fr_rec h = *r;
    h.check = 0;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &h, sizeof h);
    if (r->len) XXH3_64bits_update(&st, payload, (size_t)r->len);
    return XXH3_64bits_digest(&st);
}

static int write_full(int fd, struct iovec *v, int n)
{
    while (n > 0) {
        ssize_t w = writev(fd, v, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -errno;
        while (n > 0 && (size_t)w >= v->iov_len) { w -= (ssize_t)v->iov_len; v++; n--; }
        if (n > 0) { v->iov_base = (char *)v->iov_base + w; v->iov_len -= (size_t)w; }
    }
    return 0;
}

static int put(int fd, uint32_t type, uint64_t a, uint64_t b, uint64_t c, uint64_t d, const void *p, uint64_t len)
{
    struct fr_rec r = {.type = type, .a = a, .b = b, .c = c, .d = d, .len = len};
    r.check = rec_sum(&r, p);
    struct iovec v[2] = {{&r, sizeof r}, {(void *)p, (size_t)len}};
    return write_full(fd, v, len ? 2 : 1);
}

int fr_create(const char *dir, const uint64_t job[2], uint64_t index)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/" FR_NAME, dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -errno;
    struct fr_head h = {.magic = FR_MAGIC, .job = {job[0], job[1]}, .index = index};
    h.check = XXH3_64bits(&h, sizeof h);
    struct iovec v = {&h, sizeof h};
    int r = write_full(fd, &v, 1);
    if (r < 0) { close(fd); return r; }
    return fd;
}

int fr_file(int fd, const char *path, uint64_t dev, uint64_t ino, uint64_t cut, uint64_t size)
{
    return put(fd, FR_FILE, dev, ino, cut, size, path, strlen(path));
}

int fr_ext(int fd, uint64_t off, const void *data, uint64_t len) { return put(fd, FR_EXT, off, 0, 0, 0, data, len); }

int fr_fin(int fd, const char *dir, uint64_t files, uint64_t exts, uint64_t bytes)
{
    /* the extents first, then FIN: a FIN on the disk vouches for what is before it */
    if (fdatasync(fd) < 0) return -errno;
    int r = put(fd, FR_FIN, files, exts, bytes, 0, NULL, 0);
    if (r < 0) return r;
    if (fdatasync(fd) < 0) return -errno;
    int d = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return -errno;
    r = fsync(d) < 0 ? -errno : 0;
    close(d);
    return r;
}

/* One pass over the log: check only (apply 0), or apply (1). */
struct walk {
    int fd;          /* the log */
    int apply;
    int out;         /* the file being applied, -1 */
    uint64_t files, exts, bytes;
};

static int read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        got += (size_t)n;
    }
    return 0;
}

static int pwrite_full(int fd, const char *p, uint64_t len, uint64_t off)
{
    while (len) {
        ssize_t n = pwrite(fd, p, (size_t)len, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        p += n; len -= (uint64_t)n; off += (uint64_t)n;
    }
    return 0;
}

/* A file's commit: cut to its cut (its bytes past it are gone), its
 * extents written (by the records that follow), its size last. */
static int open_file(struct walk *w, const struct fr_rec *r, const char *path, char *why, size_t whylen)
{
    w->out = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
    if (w->out < 0 && errno == ENOENT) return 0; /* removed since (a later rollback brings it back from its journal) */
    struct stat st;
    if (w->out < 0 || fstat(w->out, &st) < 0) { snprintf(why, whylen, "cannot open %s: %s", path, strerror(errno)); return -1; }
    if ((uint64_t)st.st_size > r->c && ftruncate(w->out, (off_t)r->c) < 0) {
        snprintf(why, whylen, "cannot truncate %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

static int close_file(struct walk *w, uint64_t size, const char *path, char *why, size_t whylen)
{
    if (w->out < 0) return 0;
    int rc = 0;
    struct stat st;
    if (fstat(w->out, &st) < 0 || ((uint64_t)st.st_size != size && ftruncate(w->out, (off_t)size) < 0) || fsync(w->out) < 0) {
        snprintf(why, whylen, "cannot commit %s: %s", path, strerror(errno));
        rc = -1;
    }
    close(w->out);
    w->out = -1;
    return rc;
}

static int walk(const char *path, struct walk *w, char *why, size_t whylen)
{
    struct fr_head h;
    if (read_full(w->fd, &h, sizeof h) < 0) { snprintf(why, whylen, "%s: no header", path); return -1; }
    uint64_t c = h.check;
    h.check = 0;
    if (memcmp(h.magic, FR_MAGIC, 8) || XXH3_64bits(&h, sizeof h) != c) { snprintf(why, whylen, "%s: bad header", path); return -1; }
    char fpath[4200] = "";
    uint64_t fsize = 0;
    char *buf = NULL;
    size_t cap = 0;
    int rc = -1;
    for (;;) {
        struct fr_rec r;
        if (read_full(w->fd, &r, sizeof r) < 0) { snprintf(why, whylen, "%s: no FIN (it ends after %" PRIu64 " files)", path, w->files); rc = 0; break; }
        if (r.len > (1ull << 32)) { snprintf(why, whylen, "%s: a record of %" PRIu64 " bytes", path, r.len); break; }
        if (r.len + 1 > cap) {
            char *n = realloc(buf, (size_t)r.len + 1);
            if (!n) { snprintf(why, whylen, "%s: out of memory", path); break; }
            buf = n;
            cap = (size_t)r.len + 1;
        }
        if (r.len && read_full(w->fd, buf, (size_t)r.len) < 0) { snprintf(why, whylen, "%s: no FIN (a torn record)", path); rc = 0; break; }
        if (rec_sum(&r, buf) != r.check) { snprintf(why, whylen, "%s: a record's checksum is wrong", path); break; }
        if (r.type == FR_FIN) {
            if (r.a != w->files || r.b != w->exts || r.c != w->bytes) { snprintf(why, whylen, "%s: FIN does not count what precedes it", path); break; }
            if (w->apply && close_file(w, fsize, fpath, why, whylen) < 0) break;
            rc = 1;
            break;
        }
        if (r.type == FR_FILE) {
            if (w->apply && close_file(w, fsize, fpath, why, whylen) < 0) break;
            buf[r.len] = 0;
            snprintf(fpath, sizeof fpath, "%s", buf);
            fsize = r.d;
            w->files++;
            if (w->apply && open_file(w, &r, fpath, why, whylen) < 0) break;
        } else if (r.type == FR_EXT && w->files) {
            w->exts++;
            w->bytes += r.len;
            if (w->apply && w->out >= 0 && pwrite_full(w->out, buf, r.len, r.a) < 0) {
                snprintf(why, whylen, "cannot write %s: %s", fpath, strerror(errno));
                break;
            }
        } else {
            snprintf(why, whylen, "%s: a record of unknown type %u", path, r.type);
            break;
        }
    }
    if (w->out >= 0) { close(w->out); w->out = -1; }
    free(buf);
    return rc;
}

int fr_check(const char *path, uint64_t *files, uint64_t *bytes, char *why, size_t whylen)
{
    struct walk w = {.out = -1};
    w.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (w.fd < 0) { snprintf(why, whylen, "%s: %s", path, strerror(errno)); return -1; }
    int r = walk(path, &w, why, whylen);
    close(w.fd);
    if (files) *files = w.files;
    if (bytes) *bytes = w.bytes;
    return r;
}

int fr_apply(const char *path, char *why, size_t whylen)
{
    int r = fr_check(path, NULL, NULL, why, whylen);
    if (r <= 0) return -1; /* in a committed checkpoint the FIN is there: without it, damage */
    struct walk w = {.out = -1, .apply = 1};
    w.fd = open(path, O_RDONLY | O_CLOEXEC);
    if (w.fd < 0) { snprintf(why, whylen, "%s: %s", path, strerror(errno)); return -1; }
    r = walk(path, &w, why, whylen);
    close(w.fd);
    return r == 1 ? 0 : -1;
}

int fr_mark_applied(const char *procdir)
{
    char a[4400], b[4400];
    snprintf(a, sizeof a, "%s/" FR_NAME, procdir);
    snprintf(b, sizeof b, "%s/" FR_DONE, procdir);
    if (rename(a, b) < 0) return -errno;
    int d = open(procdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d < 0) return -errno;
    int r = fsync(d) < 0 ? -errno : 0;
    close(d);
    return r;
}

enum { EACH_CHECK, EACH_APPLY, EACH_PENDING };

/* the redo logs of the proc.* journals of ck */
static int each_log(const char *ck, int what, int *nlogs, char *why, size_t whylen)
{
    DIR *d = opendir(ck);
    if (!d) return errno == ENOENT ? 0 : (snprintf(why, whylen, "%s: %s", ck, strerror(errno)), -1);
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (strncmp(e->d_name, "proc.", 5)) continue;
        char dir[4300], p[4400];
        snprintf(dir, sizeof dir, "%s/%s", ck, e->d_name);
        snprintf(p, sizeof p, "%s/" FR_NAME, dir);
        int pending = access(p, F_OK) == 0;
        if (!pending && what == EACH_CHECK) snprintf(p, sizeof p, "%s/" FR_DONE, dir);
        if (!pending && (what != EACH_CHECK || access(p, F_OK) < 0)) continue;
        if (nlogs) (*nlogs)++;
        if (what == EACH_APPLY) {
            rc = fr_apply(p, why, whylen);
            int m = rc == 0 ? fr_mark_applied(dir) : 0;
            if (m < 0) { snprintf(why, whylen, "%s: cannot mark it applied: %s", p, strerror(-m)); rc = -1; }
        } else if (what == EACH_CHECK && fr_check(p, NULL, NULL, why, whylen) != 1) {
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int fr_apply_checkpoint(const char *ck, char *why, size_t whylen) { return each_log(ck, EACH_APPLY, NULL, why, whylen); }

int fr_pending_checkpoint(const char *ck)
{
    int n = 0;
    char why[8];
    each_log(ck, EACH_PENDING, &n, why, sizeof why);
    return n;
}

int fr_check_checkpoint(const char *ck, int *nlogs, char *why, size_t whylen)
{
    *nlogs = 0;
    return each_log(ck, EACH_CHECK, nlogs, why, whylen);
}
