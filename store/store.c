#include "store.h"
#include "tree.h"
#include "store_admin.h"
#include "codec.h"
#include "hash.h"
#include "util.h"
#include "journal_layout.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <sys/stat.h>
#include <unistd.h>

int lz_store_prepare(const char *dir, char *why, size_t whylen)
{
    struct stat st;
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(why, whylen, "cannot create checkpoint directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, whylen, "%s is not a directory", dir);
        return -1;
    }
    if ((st.st_mode & 077) && chmod(dir, 0700) < 0) {
        snprintf(why, whylen, "cannot make %s private (chmod 0700): %s", dir, strerror(errno));
        return -1;
    }
    if (access(dir, W_OK | X_OK) < 0) {
        snprintf(why, whylen, "checkpoint directory %s is not writable: %s", dir, strerror(errno));
        return -1;
    }
    char packs[LZ_PATH_MAX + 16];
    snprintf(packs, sizeof packs, "%s/" LZ_PACKS_DIR, dir);
    if (mkdir(packs, 0700) < 0 && errno != EEXIST) {
        snprintf(why, whylen, "cannot create %s: %s", packs, strerror(errno));
        return -1;
    }
    return 0;
}

void lz_ckpt_path(char *buf, size_t len, const char *dir, uint64_t index)
{
    snprintf(buf, len, "%s/" LZ_CKPT_PREFIX "%06" PRIu64, dir, index);
}

void lz_journal_home(char *out, size_t len, const char *dir)
{
    struct lz_job job;
    char id[33];
    if (lz_job_read(dir, &job) == 0 && *job.journal_dir) {
        lz_job_id_text(id, job.id);
        snprintf(out, len, "%s/%s", job.journal_dir, id);
    } else {
        snprintf(out, len, "%s", dir);
    }
}

void lz_jrnl_path(char *buf, size_t len, const char *dir, uint64_t index)
{
    char home[LZ_PATH_MAX];
    lz_journal_home(home, sizeof home, dir);
    snprintf(buf, len, "%s/" LZ_JRNL_PREFIX "%06" PRIu64, home, index);
}

void lz_journal_path(char *buf, size_t len, const char *dir, uint64_t index, int is_jrnl)
{
    char home[LZ_PATH_MAX];
    lz_journal_home(home, sizeof home, dir);
    snprintf(buf, len, "%s/%s%06" PRIu64, home, is_jrnl ? LZ_JRNL_PREFIX : LZ_CKPT_PREFIX, index);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* N of a name "<prefix>N" (N > 0, decimal digits only), 0 otherwise. */
static uint64_t index_of(const char *name, const char *prefix)
{
    size_t l = strlen(prefix);
    if (strncmp(name, prefix, l) || !name[l] || strspn(name + l, "0123456789") != strlen(name + l)) return 0;
    uint64_t idx;
    return lz_parse_u64(name + l, &idx) < 0 ? 0 : idx;
}

/* Indices of the ckpt.* (and, with is_jrnl, jrnl.*) entries of dir, ascending. */
static int list_entries(const char *dir, uint64_t **out, int **is_jrnl)
{
    DIR *d = opendir(dir);
    *out = NULL;
    if (is_jrnl) *is_jrnl = NULL;
    if (!d) return -1;
    size_t n = 0, cap = 16;
    uint64_t *v = malloc(cap * sizeof *v); /* index << 1 | is_jrnl: sorts by index */
    struct dirent *e;
    while (v && (e = readdir(d))) {
        uint64_t idx = index_of(e->d_name, LZ_CKPT_PREFIX), j = 0;
        if (!idx && is_jrnl) j = (idx = index_of(e->d_name, LZ_JRNL_PREFIX)) != 0;
        if (!idx || idx >> 62) continue;
        if (n == cap) {
            uint64_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) { free(v); v = NULL; break; }
            v = nv;
        }
        v[n++] = idx << 1 | j;
    }
    closedir(d);
    int *jr = is_jrnl && v ? malloc((n ? n : 1) * sizeof *jr) : NULL;
    if (!v || (is_jrnl && !jr)) { free(v); errno = ENOMEM; return -1; }
    qsort(v, n, sizeof *v, cmp_u64);
    for (size_t i = 0; i < n; i++) {
        if (jr) jr[i] = (int)(v[i] & 1);
        v[i] >>= 1;
    }
    *out = v;
    if (is_jrnl) *is_jrnl = jr;
    return (int)n;
}

int lz_store_list(const char *dir, uint64_t **out) { return list_entries(dir, out, NULL); }

int lz_store_list_journals(const char *dir, uint64_t **idx, int **is_jrnl)
{
    char home[LZ_PATH_MAX];
    lz_journal_home(home, sizeof home, dir);
    return list_entries(home, idx, is_jrnl);
}

/* N of "tmp.N.PID", the directory a checkpoint's write leaves; 0 for any
 * other tmp.* (a removal: tmp.N.removing, tmp.N.jrnl.removing). */
static uint64_t tmp_write_index(const char *name)
{
    const char *p = name + strlen(LZ_TMP_PREFIX), *dot = strchr(p, '.');
    char num[24];
    size_t l = dot ? (size_t)(dot - p) : 0;
    if (!l || l >= sizeof num || !dot[1] || strspn(dot + 1, "0123456789") != strlen(dot + 1)) return 0;
    memcpy(num, p, l);
    num[l] = 0;
    return index_of(num, "");
}

/* A journal directory keeps only the journal (files.log, files.data,
 * files.keep, the mark of a reset, and the journals of the job's other
 * processes in proc.<pid>/, pruned likewise): a torn write may have left a
 * manifest or ghost files next to it. */
static void prune_journal(int dfd, const char *name)
{
    int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    DIR *d = fdopendir(fd);
    if (!d) { close(fd); return; }
    char (*drop)[256] = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, FJ_LOG) ||
            !strcmp(e->d_name, FJ_DATAFILE) || !strcmp(e->d_name, FJ_KEEP) || !strcmp(e->d_name, FJ_RESET))
            continue;
        if (!strncmp(e->d_name, FJ_PROC_PREFIX, strlen(FJ_PROC_PREFIX)) && (e->d_type == DT_DIR || e->d_type == DT_UNKNOWN)) {
            prune_journal(fd, e->d_name); /* another process's journal (not a directory: nothing done) */
            continue;
        }
        void *nd = realloc(drop, (n + 1) * sizeof *drop);
        if (!nd) break;
        drop = nd;
        snprintf(drop[n++], sizeof *drop, "%s", e->d_name);
    }
    for (size_t i = 0; i < n; i++)
        if (unlinkat(fd, drop[i], 0) < 0 && errno == EISDIR) lz_remove_tree(fd, drop[i]);
    free(drop);
    closedir(d);
}

static void cleanup_tmp(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    int dup_fd = dup(dfd);
    DIR *d = dup_fd >= 0 ? fdopendir(dup_fd) : NULL;
    if (!d && dup_fd >= 0) close(dup_fd);
    char (*names)[256] = NULL;
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, LZ_TMP_PREFIX, strlen(LZ_TMP_PREFIX)) &&
            !index_of(e->d_name, LZ_JRNL_PREFIX))
            continue;
        void *nn = realloc(names, (n + 1) * sizeof *names);
        if (!nn) break;
        names = nn;
        snprintf(names[n++], sizeof *names, "%s", e->d_name);
    }
    if (d) closedir(d);
    int renamed = 0;
    for (size_t i = 0; i < n; i++) {
        if (index_of(names[i], LZ_JRNL_PREFIX)) { prune_journal(dfd, names[i]); continue; } /* a rename then a crash */
        uint64_t idx = tmp_write_index(names[i]);
        char log[300], jrnl[64], ck[64];
        struct stat st;
        snprintf(log, sizeof log, "%s/" FJ_LOG, names[i]);
        snprintf(jrnl, sizeof jrnl, LZ_JRNL_PREFIX "%06" PRIu64, idx);
        snprintf(ck, sizeof ck, LZ_CKPT_PREFIX "%06" PRIu64, idx);
        /* the journal of the interval begun at N's pause is needed to roll
         * back to a checkpoint before N, whether or not N committed (if it
         * did, ckpt.N holds it and this is a stray) */
        if (!idx || fstatat(dfd, log, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            fstatat(dfd, ck, &st, AT_SYMLINK_NOFOLLOW) == 0) {
            lz_remove_tree(dfd, names[i]);
            continue;
        }
        int rc = renameat2(dfd, names[i], dfd, jrnl, RENAME_NOREPLACE);
        if (rc < 0 && (errno == EINVAL || errno == ENOSYS)) /* a file system without NOREPLACE */
            rc = fstatat(dfd, jrnl, &st, AT_SYMLINK_NOFOLLOW) == 0 ? (errno = EEXIST, -1)
                                                                 : renameat(dfd, names[i], dfd, jrnl);
        if (rc == 0) {
            renamed = 1;
            prune_journal(dfd, jrnl);
        } else if (errno == EEXIST) {
            /* jrnl.N holds that interval's journal: this is another process's part of it
             * (a job's checkpoint; tmp.N.PID names the process), or a stray */
            char part[300];
            const char *pid = strrchr(names[i], '.');
            snprintf(part, sizeof part, "%s/" FJ_PROC_PREFIX "%s", jrnl, pid ? pid + 1 : "0");
            if (renameat2(dfd, names[i], dfd, part, RENAME_NOREPLACE) == 0) { renamed = 1; prune_journal(dfd, part); }
            else lz_remove_tree(dfd, names[i]);
        } /* else left for the next cleanup: a journal is never deleted on a whim */
    }
    free(names);
    if (renamed) fsync(dfd);
    close(dfd);
}

/* With a journal home of its own: a checkpoint's journal there whose
 * checkpoint never committed in DIR (the commit renames the journal first)
 * is the journal of a failed checkpoint, jrnl.N. */
static void reconcile_journals(const char *dir, const char *home)
{
    uint64_t *v;
    int *jr;
    int n = list_entries(home, &v, &jr);
    for (int i = 0; i < n; i++) {
        char ck[LZ_PATH_MAX + 64], from[LZ_PATH_MAX + 64], to[LZ_PATH_MAX + 64];
        struct stat st;
        lz_ckpt_path(ck, sizeof ck, dir, v[i]);
        if (jr[i] || stat(ck, &st) == 0) continue;
        lz_ckpt_path(from, sizeof from, home, v[i]);
        snprintf(to, sizeof to, "%s/" LZ_JRNL_PREFIX "%06" PRIu64, home, v[i]);
        if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0) lz_fsync_dir(home);
    }
    if (n >= 0) { free(v); free(jr); }
}

void lz_store_cleanup_tmp(const char *dir)
{
    cleanup_tmp(dir);
    char home[LZ_PATH_MAX];
    lz_journal_home(home, sizeof home, dir);
    if (strcmp(home, dir)) {
        cleanup_tmp(home);
        reconcile_journals(dir, home);
    }
}

/* Hands the saved-bytes file of a checkpoint or journal being removed to the next
 * interval (LZ_SPARE), if a slot is free and it is worth it. */
static void recycle_data(int dfd, const char *ckname)
{
    char from[300], to[32];
    struct stat st;
    snprintf(from, sizeof from, "%s/" FJ_DATAFILE, ckname);
    if (fstatat(dfd, from, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) || st.st_size < LZ_SPARE_MIN) return;
    for (int i = 0; i < LZ_SPARES; i++) {
        snprintf(to, sizeof to, LZ_SPARE, i);
        if (renameat2(dfd, from, dfd, to, RENAME_NOREPLACE) == 0 || errno != EEXIST) return;
    }
}

static void drop_spares(const char *dir);
void lz_store_drop_spares(const char *dir)
{
    drop_spares(dir);
    char home[LZ_PATH_MAX];
    lz_journal_home(home, sizeof home, dir);
    if (strcmp(home, dir)) drop_spares(home);
}

static void drop_spares(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    char name[32];
    for (int i = 0; i < LZ_SPARES; i++) {
        snprintf(name, sizeof name, LZ_SPARE, i);
        unlinkat(dfd, name, 0);
    }
    /* the running job's maps of saved blocks: after a restart they would
     * name records the rollback emptied (files/track_shared.c) */
    int d2 = dup(dfd);
    DIR *d = d2 >= 0 ? fdopendir(d2) : NULL;
    if (!d && d2 >= 0) close(d2);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, FJ_SAVED, strlen(FJ_SAVED)) && e->d_name[strlen(FJ_SAVED)] &&
            strspn(e->d_name + strlen(FJ_SAVED), "0123456789") == strlen(e->d_name + strlen(FJ_SAVED)))
            unlinkat(dfd, e->d_name, 0);
    if (d) closedir(d);
    close(dfd);
}

/* Removal is a rename (invisible at once) then the deletion of the tree. */
static int remove_entry(const char *dir, const char *from_name, const char *to_name)
{
    char from[LZ_PATH_MAX + 64], to[LZ_PATH_MAX + 64];
    snprintf(from, sizeof from, "%s/%s", dir, from_name);
    snprintf(to, sizeof to, "%s/%s", dir, to_name);
    if (rename(from, to) < 0) return -1;
    lz_fsync_dir(dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        recycle_data(dfd, to_name);
        lz_remove_tree(dfd, to_name);
        close(dfd);
    }
    return 0;
}

static int remove_ckpt(const char *dir, uint64_t index)
{
    char from[64], to[64], home[LZ_PATH_MAX];
    snprintf(from, sizeof from, LZ_CKPT_PREFIX "%06" PRIu64, index);
    snprintf(to, sizeof to, LZ_TMP_PREFIX "%06" PRIu64 ".removing", index);
    lz_journal_home(home, sizeof home, dir);
    int rc = remove_entry(dir, from, to);
    /* its journal, in a journal home of its own: after the checkpoint (a journal is never needed without it) */
    if (rc == 0 && strcmp(home, dir)) remove_entry(home, from, to);
    return rc;
}

int lz_jrnl_remove(const char *dir, uint64_t index)
{
    char from[64], to[64], home[LZ_PATH_MAX];
    snprintf(from, sizeof from, LZ_JRNL_PREFIX "%06" PRIu64, index);
    snprintf(to, sizeof to, LZ_TMP_PREFIX "%06" PRIu64 ".jrnl.removing", index);
    lz_journal_home(home, sizeof home, dir);
    return remove_entry(home, from, to);
}

int lz_gc_lock(const char *dir)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" LZ_GC_LOCK, dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    while (flock(fd, LOCK_EX) < 0)
        if (errno != EINTR) { int e = errno; close(fd); errno = e; return -1; }
    return fd;
}

int lz_store_remove(const char *dir, uint64_t index)
{
    int lk = lz_gc_lock(dir); /* without it (a read-only lock file?) removing is still right */
    int rc = remove_ckpt(dir, index);
    int e = errno;
    if (lk >= 0) close(lk);
    errno = e;
    return rc;
}

void lz_store_drop_branch(const char *dir, uint64_t after, uint64_t before)
{
    uint64_t *v;
    int *jr;
    int n = lz_store_list_journals(dir, &v, &jr);
    for (int i = n - 1; i >= 0; i--)
        if (v[i] > after && v[i] < before) {
            if (jr[i]) lz_jrnl_remove(dir, v[i]);
            else lz_store_remove(dir, v[i]);
        }
    if (n >= 0) { free(v); free(jr); }
}

void lz_store_clear_data(const char *dir)
{
    int lk = lz_gc_lock(dir);
    uint64_t *v;
    int *jr;
    int n = lz_store_list_journals(dir, &v, &jr);
    for (int i = 0; i < n; i++) if (jr[i]) lz_jrnl_remove(dir, v[i]);
    if (n >= 0) { free(v); free(jr); }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int pfd = dfd >= 0 ? openat(dfd, LZ_PACKS_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    DIR *d = pfd >= 0 ? fdopendir(pfd) : NULL;
    if (!d && pfd >= 0) close(pfd);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && unlinkat(dirfd(d), e->d_name, 0) < 0 && errno == EISDIR)
            lz_remove_tree(dirfd(d), e->d_name);
    if (d) closedir(d);
    if (dfd >= 0) close(dfd);
    if (lk >= 0) close(lk);
}

void lz_store_retain(const char *dir, uint64_t keep, uint64_t newest, uint64_t run_first)
{
    lz_store_retain_but(dir, keep, newest, run_first, NULL, 0);
}

void lz_store_retain_but(const char *dir, uint64_t keep, uint64_t newest, uint64_t run_first, const uint64_t *protect,
                         size_t nprotect)
{
    char path[LZ_PATH_MAX + 64], why[LZ_PATH_MAX + 600];
    struct lz_image img;
    uint64_t parent = 0;
    lz_ckpt_path(path, sizeof path, dir, newest);
    if (lz_manifest_load(path, &img, why, sizeof why) == 0) {
        parent = img.hdr->parent;
        lz_image_free(&img);
    }
    int lk = lz_gc_lock(dir);
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { if (lk >= 0) close(lk); return; }
    /* an abandoned branch: checkpoints taken after the one we restarted from,
     * before this run began */
    if (parent)
        for (int i = 0; i < n; i++)
            if (v[i] > parent && v[i] < run_first) { remove_ckpt(dir, v[i]); v[i] = 0; }
    size_t live = 0;
    for (int i = 0; i < n; i++) live += v[i] != 0;
    for (int i = 0; i < n && live > keep && keep > 0; i++) {
        int kept = 0;
        for (size_t k = 0; k < nprotect; k++) kept |= protect[k] == v[i];
        if (v[i] && v[i] != newest && !kept) { remove_ckpt(dir, v[i]); v[i] = 0; live--; }
    }
    uint64_t oldest = 0; /* of the checkpoints kept */
    for (int i = 0; i < n && !oldest; i++) oldest = v[i];
    free(v);
    /* jrnl.N only serves rollbacks to a checkpoint before N */
    int *jr;
    n = lz_store_list_journals(dir, &v, &jr);
    for (int i = 0; i < n; i++)
        if (jr[i] && (!oldest || oldest > v[i] || (parent && v[i] > parent && v[i] < run_first)))
            lz_jrnl_remove(dir, v[i]);
    if (n >= 0) { free(v); free(jr); }
    /* free what only the removed checkpoints used (gc reads manifests only: quick) */
    struct lz_gc_stats st;
    lz_store_gc_locked(dir, &st, why, sizeof why);
    if (lk >= 0) close(lk);
}

int lz_store_lock(const char *dir)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_LOCKFILE);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) { int e = errno; close(fd); errno = e; return -1; }
    return fd;
}

int lz_store_pick(const char *dir, int have_at, uint64_t at, uint64_t *index, char *why, size_t whylen)
{
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) { snprintf(why, whylen, "cannot read checkpoint directory %s: %s", dir, strerror(errno)); return -1; }
    if (n == 0) { free(v); snprintf(why, whylen, "no checkpoint in %s", dir); return -1; }
    int rc = -1;
    if (!have_at) { *index = v[n - 1]; rc = 0; }
    for (int i = 0; have_at && i < n; i++) if (v[i] == at) { *index = at; rc = 0; }
    if (rc < 0) {
        char list[200] = "";
        size_t l = 0;
        for (int i = 0; i < n && l < sizeof list - 24; i++) l += (size_t)snprintf(list + l, sizeof list - l, "%s%" PRIu64, i ? ", " : "", v[i]);
        snprintf(why, whylen, "no checkpoint %" PRIu64 " in %s (retained: %s)", at, dir, list);
    }
    free(v);
    return rc;
}

int lz_ckpt_files_only(const char *ck, uint64_t *created_ns)
{
    char path[LZ_PATH_MAX + 96];
    snprintf(path, sizeof path, "%s/" LZ_FILES_ONLY, ck);
    size_t len;
    char *buf = lz_read_file(path, &len);
    if (!buf) return 0;
    *created_ns = strtoull(buf, NULL, 10);
    free(buf);
    return 1;
}
