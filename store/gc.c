/* Garbage collection of a store (store.h: lz_store_gc).  What the retained
 * checkpoints reference is read from their manifests alone: a pack nobody
 * references is deleted, a referenced one gets holes punched where no kept
 * frame lies (its size stays: manifests record it). */
#include "store.h"
#include "store_admin.h"
#include "util.h"
#include "tree.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Bytes [start, end) of pack.<pack> hold a referenced frame. */
struct range { uint64_t pack, start, end; };
struct refs { struct range *r; size_t n, cap; };

static int add_range(struct refs *rs, uint64_t pack, uint64_t start, uint64_t end)
{
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? rs->cap * 2 : 1024;
        struct range *nr = realloc(rs->r, cap * sizeof *nr);
        if (!nr) return -1;
        rs->r = nr;
        rs->cap = cap;
    }
    rs->r[rs->n++] = (struct range){pack, start, end};
    return 0;
}

static int range_cmp(const void *a, const void *b)
{
    const struct range *x = a, *y = b;
    if (x->pack != y->pack) return x->pack < y->pack ? -1 : 1;
    return (x->start > y->start) - (x->start < y->start);
}

/* Sorts by pack then offset and merges overlapping or touching ranges. */
static void merge_ranges(struct refs *rs)
{
    if (!rs->n) return;
    qsort(rs->r, rs->n, sizeof *rs->r, range_cmp);
    size_t m = 0;
    for (size_t i = 1; i < rs->n; i++) {
        struct range *last = &rs->r[m];
        if (rs->r[i].pack == last->pack && rs->r[i].start <= last->end) {
            if (rs->r[i].end > last->end) last->end = rs->r[i].end;
        } else {
            rs->r[++m] = rs->r[i];
        }
    }
    rs->n = m + 1;
}

/* A pack's key: N << 22 for the main program's "pack.N", N << 22 | PID for
 * "pack.N.PID" (PIDs are below 2^22); 0 if the name is neither. */
#define PID_BITS 22
static uint64_t pack_id(const char *name)
{
    size_t l = strlen(LZ_PACK_PREFIX);
    uint64_t id, pid = 0;
    if (strncmp(name, LZ_PACK_PREFIX, l) || !name[l]) return 0;
    char num[24];
    const char *dot = strchr(name + l, '.');
    size_t nl = dot ? (size_t)(dot - name - l) : strlen(name + l);
    if (!nl || nl >= sizeof num || strspn(name + l, "0123456789") != nl) return 0;
    memcpy(num, name + l, nl);
    num[nl] = 0;
    if (lz_parse_u64(num, &id) < 0 || id >= (1ull << (64 - PID_BITS))) return 0;
    if (dot && (!dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1) || lz_parse_u64(dot + 1, &pid) < 0 || !pid ||
                pid >= (1ull << PID_BITS)))
        return 0;
    return id << PID_BITS | pid;
}

/* Every frame of every listed checkpoint.  A frame counts for the pack its
 * entry's id names and for the pack its path names, should they differ:
 * keeping too much is harmless, deleting a frame in use is not. */
static int load_part_refs(const char *part, uint64_t index, struct refs *rs, char *why, size_t whylen)
{
    char inner[LZ_PATH_MAX + 600];
    struct lz_image img;
    if (lz_manifest_load(part, &img, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "cannot tell what checkpoint %" PRIu64 " uses (%s); nothing was deleted", index, inner);
        return -1;
    }
    for (size_t f = 0; f < img.nframes; f++) {
        const struct lz_frame *fr = &img.frames[f];
        const struct lz_pack *p = &img.packs[fr->pack];
        const char *path = lz_str(&img, p->path), *base = strrchr(path, '/');
        uint64_t by_path = pack_id(base ? base + 1 : path), by_id = p->id << PID_BITS;
        /* another process's pack: its name alone says which (its id is N, like the main program's) */
        if (by_path & ((1ull << PID_BITS) - 1)) by_id = by_path;
        if (add_range(rs, by_id, fr->offset, fr->offset + fr->stored) < 0 ||
            (by_path && by_path != by_id && add_range(rs, by_path, fr->offset, fr->offset + fr->stored) < 0)) {
            lz_image_free(&img);
            snprintf(why, whylen, "out of memory; nothing was deleted");
            return -1;
        }
    }
    lz_image_free(&img);
    return 0;
}

/* Every frame of every process of every listed checkpoint.  A frame counts
 * for the pack its entry's id names and for the pack its path names, should
 * they differ: keeping too much is harmless, deleting a frame in use is not. */
static int load_refs(const char *dir, const uint64_t *v, int n, struct refs *rs, char *why, size_t whylen)
{
    for (int i = 0; i < n; i++) {
        char ck[LZ_PATH_MAX + 64], inner[LZ_PATH_MAX + 600], part[LZ_PATH_MAX + 128];
        struct stat st;
        struct lz_tree t;
        lz_ckpt_path(ck, sizeof ck, dir, v[i]);
        uint64_t when;
        if (lz_ckpt_files_only(ck, &when)) continue; /* a files-only commit: no pack */
        if (lz_tree_load(ck, &t, inner, sizeof inner) < 0) {
            if (stat(ck, &st) < 0 && errno == ENOENT) continue; /* removed meanwhile: references nothing */
            snprintf(why, whylen, "cannot tell what checkpoint %" PRIu64 " uses (%s); nothing was deleted", v[i], inner);
            return -1;
        }
        int rc = 0;
        for (size_t k = 0; k < t.nprocs && rc == 0; k++) {
            if (t.procs[k].state != LZ_TP_LIVE) continue;
            lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
            rc = load_part_refs(part, v[i], rs, why, whylen);
        }
        lz_tree_free(&t);
        if (rc < 0) {
            if (stat(ck, &st) < 0 && errno == ENOENT) continue;
            return -1;
        }
    }
    return 0;
}

/* Punches [a, b) rounded inward to whole blocks; -1 when the file system
 * cannot (nothing more to try on this pack). */
static int punch(int fd, uint64_t a, uint64_t b)
{
    a = (a + 4095) & ~4095ull;
    b &= ~4095ull;
    if (b <= a) return 0;
    return fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a, (off_t)(b - a));
}

/* Holes over every gap between the referenced ranges r[0..n) of one pack;
 * returns the bytes that were allocated there. */
static uint64_t punch_gaps(int pfd, const char *name, const struct range *r, size_t n)
{
    int fd = openat(pfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    struct stat before, after;
    if (fd < 0) return 0;
    if (fstat(fd, &before) < 0 || !S_ISREG(before.st_mode)) { close(fd); return 0; }
    uint64_t pos = 0, size = (uint64_t)before.st_size;
    int ok = 0;
    for (size_t i = 0; i < n && ok == 0; i++) {
        ok = punch(fd, pos, r[i].start < size ? r[i].start : size);
        if (r[i].end > pos) pos = r[i].end;
    }
    if (ok == 0 && pos < size) punch(fd, pos, size);
    uint64_t freed = fstat(fd, &after) == 0 && after.st_blocks < before.st_blocks
                         ? (uint64_t)(before.st_blocks - after.st_blocks) * LZ_ST_BLOCK_BYTES : 0;
    close(fd);
    return freed;
}

struct pack_entry { uint64_t id; char name[64]; };

/* packs/pack.N with N <= limit; -1 on an error other than "no packs/". */
static int list_packs(int pfd, uint64_t limit, struct pack_entry **out, size_t *count)
{
    *out = NULL;
    *count = 0;
    if (pfd < 0) return 0;
    int dup_fd = dup(pfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d) { if (dup_fd >= 0) close(dup_fd); return -1; }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        uint64_t id = pack_id(e->d_name);
        if (!id || (id >> PID_BITS) > limit || strlen(e->d_name) >= sizeof (*out)->name) continue;
        if (*count == cap) {
            cap = cap ? cap * 2 : 64;
            struct pack_entry *np = realloc(*out, cap * sizeof *np);
            if (!np) { closedir(d); free(*out); *out = NULL; errno = ENOMEM; return -1; }
            *out = np;
        }
        (*out)[*count].id = id;
        memcpy((*out)[*count].name, e->d_name, strlen(e->d_name) + 1); /* fits: checked above */
        (*count)++;
    }
    closedir(d);
    return 0;
}

int lz_store_gc_locked(const char *dir, struct lz_gc_stats *st, char *why, size_t whylen)
{
    memset(st, 0, sizeof *st);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { snprintf(why, whylen, "cannot read %s: %s", dir, strerror(errno)); return -1; }
    struct lz_job job;
    int running = lz_job_read(dir, &job) < 0 || !strcmp(job.state, "running");
    /* packs newer than the newest checkpoint may be being written while the job
     * runs; once it is not running, those of every index it gave out are garbage
     * unless referenced (a checkpoint torn by the last kill left one) */
    uint64_t newest = n > 0 ? v[n - 1] : 0;
    uint64_t limit = !running && job.next_index && job.next_index - 1 > newest ? job.next_index - 1 : newest;
    struct refs rs = {0};
    if (load_refs(dir, v, n, &rs, why, whylen) < 0) { free(v); free(rs.r); return -1; }
    merge_ranges(&rs);

    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int pfd = dfd >= 0 ? openat(dfd, LZ_PACKS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct pack_entry *packs;
    size_t np;
    if (dfd < 0 || (pfd < 0 && errno != ENOENT) || list_packs(pfd, limit, &packs, &np) < 0) {
        snprintf(why, whylen, "cannot read %s/%s: %s; nothing was deleted", dir, LZ_PACKS_DIR, strerror(errno));
        if (pfd >= 0) close(pfd);
        if (dfd >= 0) close(dfd);
        free(v);
        free(rs.r);
        return -1;
    }
    for (size_t i = 0; i < np; i++) {
        /* the referenced ranges of this pack: a binary search for the first */
        size_t lo = 0, hi = rs.n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (rs.r[mid].pack < packs[i].id) lo = mid + 1; else hi = mid;
        }
        size_t end = lo;
        while (end < rs.n && rs.r[end].pack == packs[i].id) end++;
        if (end > lo) {
            st->bytes_punched += punch_gaps(pfd, packs[i].name, rs.r + lo, end - lo);
            continue;
        }
        struct stat ps;
        int have = fstatat(pfd, packs[i].name, &ps, AT_SYMLINK_NOFOLLOW) == 0;
        if (unlinkat(pfd, packs[i].name, 0) == 0) {
            st->packs_removed++;
            if (have) st->bytes_removed += (uint64_t)ps.st_blocks * LZ_ST_BLOCK_BYTES;
        }
    }
    free(packs);
    free(rs.r);
    if (pfd >= 0) close(pfd);
    if (dfd >= 0) close(dfd);

    /* jrnl.N only serves rollbacks to a checkpoint before N.  One after the
     * newest checkpoint of a running job may still be written to. */
    uint64_t oldest = n > 0 ? v[0] : 0;
    free(v);
    int *jr;
    int nj = lz_store_list_journals(dir, &v, &jr);
    for (int i = 0; i < nj; i++)
        if (jr[i] && (!oldest || oldest > v[i]) && (newest > v[i] || !running) && lz_jrnl_remove(dir, v[i]) == 0)
            st->journals_removed++;
    if (nj >= 0) { free(v); free(jr); }
    return 0;
}

int lz_store_gc(const char *dir, struct lz_gc_stats *st, char *why, size_t whylen)
{
    memset(st, 0, sizeof *st);
    int lk = lz_gc_lock(dir);
    if (lk < 0) {
        snprintf(why, whylen, "cannot lock %s/%s: %s", dir, LZ_GC_LOCK, strerror(errno));
        return -1;
    }
    int rc = lz_store_gc_locked(dir, st, why, whylen);
    close(lk);
    return rc;
}

static int usage_cmp(const void *a, const void *b)
{
    const struct lz_pack_usage *x = a, *y = b;
    if (x->index != y->index) return x->index < y->index ? -1 : 1;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

/* Read only, no lock: a checkpoint removed meanwhile references nothing
 * (load_refs), a pack removed meanwhile is left out. */
int lz_store_pack_usage(const char *dir, struct lz_pack_usage **out, size_t *count, char *why, size_t whylen)
{
    *out = NULL;
    *count = 0;
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { snprintf(why, whylen, "cannot read %s: %s", dir, strerror(errno)); return -1; }
    struct refs rs = {0};
    int rc = load_refs(dir, v, n, &rs, why, whylen);
    free(v);
    if (rc < 0) { free(rs.r); return -1; }
    merge_ranges(&rs);
    int pfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), dfd = pfd;
    pfd = dfd >= 0 ? openat(dfd, LZ_PACKS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct pack_entry *packs = NULL;
    size_t np = 0;
    if (dfd < 0 || (pfd < 0 && errno != ENOENT) || list_packs(pfd, UINT64_MAX >> PID_BITS, &packs, &np) < 0) {
        snprintf(why, whylen, "cannot read %s/%s: %s", dir, LZ_PACKS_DIR, strerror(errno));
        if (pfd >= 0) close(pfd);
        if (dfd >= 0) close(dfd);
        free(rs.r);
        return -1;
    }
    struct lz_pack_usage *u = lz_xcalloc(np + 1, sizeof *u);
    size_t m = 0;
    for (size_t i = 0; i < np; i++) {
        struct stat ps;
        if (fstatat(pfd, packs[i].name, &ps, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(ps.st_mode)) continue;
        struct lz_pack_usage *p = &u[m++];
        snprintf(p->name, sizeof p->name, "%s", packs[i].name);
        p->index = packs[i].id >> PID_BITS;
        p->pid = (int32_t)(packs[i].id & ((1ull << PID_BITS) - 1));
        p->size = (uint64_t)ps.st_size;
        p->disk_bytes = (uint64_t)ps.st_blocks * LZ_ST_BLOCK_BYTES;
        for (size_t k = 0; k < rs.n; k++)
            if (rs.r[k].pack == packs[i].id) p->live_bytes += (rs.r[k].end < p->size ? rs.r[k].end : p->size) - (rs.r[k].start < p->size ? rs.r[k].start : p->size);
    }
    free(packs);
    free(rs.r);
    if (pfd >= 0) close(pfd);
    close(dfd);
    qsort(u, m, sizeof *u, usage_cmp); /* by N, the main program's pack first */
    *out = u;
    *count = m;
    return 0;
}
