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

void lz_jrnl_path(char *buf, size_t len, const char *dir, uint64_t index)
{
    snprintf(buf, len, "%s/" LZ_JRNL_PREFIX "%06" PRIu64, dir, index);
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
    return list_entries(dir, idx, is_jrnl);
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

void lz_store_cleanup_tmp(const char *dir)
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

void lz_store_drop_spares(const char *dir)
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
    char from[64], to[64];
    snprintf(from, sizeof from, LZ_CKPT_PREFIX "%06" PRIu64, index);
    snprintf(to, sizeof to, LZ_TMP_PREFIX "%06" PRIu64 ".removing", index);
    return remove_entry(dir, from, to);
}

int lz_jrnl_remove(const char *dir, uint64_t index)
{
    char from[64], to[64];
    snprintf(from, sizeof from, LZ_JRNL_PREFIX "%06" PRIu64, index);
    snprintf(to, sizeof to, LZ_TMP_PREFIX "%06" PRIu64 ".jrnl.removing", index);
    return remove_entry(dir, from, to);
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
    for (int i = 0; i < n && live > keep && keep > 0; i++)
        if (v[i] && v[i] != newest) { remove_ckpt(dir, v[i]); v[i] = 0; live--; }
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

void lz_job_new_id(uint64_t id[2])
{
    if (getrandom(id, 2 * sizeof *id, 0) != 2 * (ssize_t)sizeof *id) {
        /* no entropy source: time, pid and address still make it unique here */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        id[0] = (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
        id[1] = ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)id;
    }
    if (!id[0] && !id[1]) id[1] = 1; /* 0 means "none" */
}

int64_t lz_job_stop_ns(const char *dir, const struct lz_job *job)
{
    char lock[LZ_PATH_MAX + 32];
    struct stat st;
    snprintf(lock, sizeof lock, "%s/%s", dir, LZ_LOCKFILE);
    int64_t beat = stat(lock, &st) == 0 ? (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec : -1;
    /* the supervisor's own record, exact, unless a process of the job (or a
     * later supervisor of it that died) dated the lock after it */
    if (strcmp(job->state, "running") && job->stopped_ns && beat <= job->stopped_ns) return job->stopped_ns;
    return beat >= 0 ? beat + 1000000000ll : INT64_MAX;
}

/* The job file ends with "check=<XXH3-64 of every byte before this line>". */
#define JOB_CHECK "check="

int lz_job_read(const char *dir, struct lz_job *job)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_JOBFILE);
    memset(job, 0, sizeof *job);
    job->interval = 600;
    job->keep = 3;
    job->rolling_to = -1;
    size_t len;
    char *buf = lz_read_file(path, &len);
    if (!buf) return -1;
    char *nb = realloc(buf, len + 1); /* room for the terminating NUL */
    if (!nb) { free(buf); errno = ENOMEM; return -1; }
    buf = nb;
    buf[len] = 0;
    /* the checksum first: a damaged job file must not be read as settings */
    char *ck = len > 1 ? memrchr(buf, '\n', len - 1) : NULL;
    ck = ck ? ck + 1 : buf;
    char want[32];
    snprintf(want, sizeof want, JOB_CHECK "%016" PRIx64 "\n", lz_hash(buf, (size_t)(ck - buf)));
    if (strlen(want) != len - (size_t)(ck - buf) || memcmp(ck, want, strlen(want)) || strlen(buf) != len) {
        free(buf);
        errno = EBADMSG;
        return LZ_JOB_DAMAGED;
    }
    *ck = 0;
    int have_id = 0;
    char *save, *line = strtok_r(buf, "\n", &save);
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq++ = 0;
        if (!strcmp(line, "id")) have_id = lz_job_id_parse(eq, job->id) == 0;
        else if (!strcmp(line, "interval")) lz_parse_u64(eq, &job->interval);
        else if (!strcmp(line, "keep")) lz_parse_u64(eq, &job->keep);
        else if (!strcmp(line, "state")) snprintf(job->state, sizeof job->state, "%s", eq);
        else if (!strcmp(line, "exit")) job->exit_status = atoi(eq);
        else if (!strcmp(line, "durability")) job->durability = !strcmp(eq, "machine");
        else if (!strcmp(line, "stopped_ns")) job->stopped_ns = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "rolling_to")) job->rolling_to = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "next_index")) lz_parse_u64(eq, &job->next_index);
        else if (!strcmp(line, "compress")) snprintf(job->compress, sizeof job->compress, "%s", eq);
        else if (!strcmp(line, "stdio")) job->job_stdio = !strcmp(eq, "job");
        else if (!strcmp(line, "failed_index")) lz_parse_u64(eq, &job->failed_index);
        else if (!strcmp(line, "failed_ns")) job->failed_ns = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "failed_why")) snprintf(job->failed_why, sizeof job->failed_why, "%s", eq);
        else if (!strcmp(line, "exclude")) {
            size_t have = strlen(job->excludes);
            if (have + strlen(eq) + 2 < sizeof job->excludes)
                sprintf(job->excludes + have, "%s%s", have ? "\n" : "", eq);
        }
    }
    free(buf);
    if (!have_id) { errno = EBADMSG; return LZ_JOB_DAMAGED; }
    return 0;
}

/* A value on one line of the job file: line breaks become spaces. */
static void one_line(char *out, size_t len, const char *s)
{
    snprintf(out, len, "%s", s);
    for (char *p = out; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
}

int lz_job_write(const char *dir, const struct lz_job *job)
{
    char path[LZ_PATH_MAX + 32], tmp[LZ_PATH_MAX + 48], buf[16384];
    char compress[sizeof job->compress], failed[sizeof job->failed_why];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_JOBFILE);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, LZ_JOBFILE);
    one_line(compress, sizeof compress, job->compress);
    one_line(failed, sizeof failed, job->failed_why);
    char id[33];
    lz_job_id_text(id, job->id);
    int n = snprintf(buf, sizeof buf, "version=%u\nid=%s\ninterval=%" PRIu64 "\nkeep=%" PRIu64 "\nstate=%s\nexit=%d\n"
                     "durability=%s\nstopped_ns=%" PRId64 "\nrolling_to=%" PRId64 "\nnext_index=%" PRIu64 "\n"
                     "compress=%s\nstdio=%s\n",
                     LZ_VERSION, id, job->interval, job->keep, job->state, job->exit_status,
                     job->durability ? "machine" : "process", job->stopped_ns, job->rolling_to, job->next_index,
                     compress, job->job_stdio ? "job" : "launcher");
    if (job->failed_index)
        n += snprintf(buf + n, sizeof buf - (size_t)n, "failed_index=%" PRIu64 "\nfailed_ns=%" PRId64 "\nfailed_why=%s\n",
                      job->failed_index, job->failed_ns, failed);
    for (const char *p = job->excludes; *p && n < (int)sizeof buf - 1;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "exclude=%.*s\n", (int)l, p);
        p += l + (q ? 1 : 0);
    }
    if (n >= (int)sizeof buf - 40) { errno = ENAMETOOLONG; return -1; }
    n += snprintf(buf + n, sizeof buf - (size_t)n, JOB_CHECK "%016" PRIx64 "\n", lz_hash(buf, (size_t)n));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (lz_write_all(fd, buf, (size_t)n) < 0 || fsync(fd) < 0) { close(fd); unlink(tmp); return -1; }
    close(fd);
    if (rename(tmp, path) < 0) { unlink(tmp); return -1; }
    return lz_fsync_dir(dir);
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

/* A pack as the user knows it, DIR/packs/pack.N, rather than ckpt.M/../packs/pack.N. */
static void pack_shown(char *buf, size_t len, const char *dir, const char *ck, const char *rel)
{
    if (!strncmp(rel, "../", 3) && !strstr(rel + 3, "../")) snprintf(buf, len, "%s/%s", dir, rel + 3);
    else if (!strncmp(rel, "../../", 6) && !strstr(rel + 6, "../")) snprintf(buf, len, "%s/%s", dir, rel + 6); /* proc.PID/ */
    else snprintf(buf, len, "%s/%s", ck, rel);
}

static int frame_cmp(const void *a, const void *b, void *frames)
{
    const struct lz_frame *x = (const struct lz_frame *)frames + *(const uint32_t *)a;
    const struct lz_frame *y = (const struct lz_frame *)frames + *(const uint32_t *)b;
    if (x->pack != y->pack) return x->pack < y->pack ? -1 : 1;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    if (x->stored != y->stored) return x->stored < y->stored ? -1 : 1;
    return x->codec != y->codec ? (x->codec < y->codec ? -1 : 1) : (x->xxh3 > y->xxh3) - (x->xxh3 < y->xxh3);
}

static int same_frame(const struct lz_frame *x, const struct lz_frame *y)
{
    return x->pack == y->pack && x->offset == y->offset && x->stored == y->stored && x->codec == y->codec &&
           x->raw == y->raw && x->xxh3 == y->xxh3;
}

static int verify_part(const char *dir, uint64_t index, const char *ck, char *why, size_t whylen);

int lz_verify_ckpt(const char *dir, uint64_t index, char *why, size_t whylen)
{
    char ck[LZ_PATH_MAX + 64], part[LZ_PATH_MAX + 128], inner[1024];
    lz_ckpt_path(ck, sizeof ck, dir, index);
    struct lz_tree t;
    if (lz_tree_load(ck, &t, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
        return -1;
    }
    int rc = 0;
    for (size_t k = 0; k < t.nprocs && rc == 0; k++) {
        if (t.procs[k].state != LZ_TP_LIVE) continue;
        lz_tree_part_dir(part, sizeof part, ck, &t.procs[k]);
        rc = verify_part(dir, index, part, why, whylen);
        if (rc < 0 && k > 0) { /* name the process */
            char w[1200];
            snprintf(w, sizeof w, "%s", why);
            const char *d = strstr(w, " is damaged: ");
            if (d) snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: process %d (%s): %s", index, t.procs[k].pid, t.procs[k].comm, d + 13);
        }
    }
    lz_tree_free(&t);
    return rc;
}

/* One process's part of checkpoint `index`: its manifest, every frame it
 * references, the data of its pipes and sockets. */
static int verify_part(const char *dir, uint64_t index, const char *ck, char *why, size_t whylen)
{
    char path[LZ_PATH_MAX + 600], shown[LZ_PATH_MAX + 600], inner[1024];
    struct lz_image img;
    if (lz_manifest_load(ck, &img, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
        return -1;
    }
    int rc = 0;
    int *fds = malloc((img.npacks ? img.npacks : 1) * sizeof *fds);
    uint32_t *order = malloc((img.nframes ? img.nframes : 1) * sizeof *order);
    size_t wsize = lz_dctx_size(), cap = 0;
    char *work = malloc(wsize), *raw = malloc(LZ_FRAME_MAX), *buf = NULL;
    if (!fds || !order || !work || !raw) { snprintf(why, whylen, "out of memory"); rc = -1; }
    for (size_t i = 0; fds && i < img.npacks; i++) fds[i] = -1;
    for (size_t i = 0; i < img.npacks && rc == 0; i++) {
        const char *rel = lz_str(&img, img.packs[i].path);
        snprintf(path, sizeof path, "%s/%s", ck, rel);
        pack_shown(shown, sizeof shown, dir, ck, rel);
        struct stat st;
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: cannot open %s: %s", index, shown, strerror(errno));
            rc = -1;
        } else if (fstat(fds[i], &st) == 0 && (uint64_t)st.st_size != img.packs[i].size) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s has %lld bytes, expected %" PRIu64, index,
                     shown, (long long)st.st_size, img.packs[i].size);
            rc = -1;
        }
    }
    /* each frame once (later checkpoints share them), in pack order: the disk reads ahead */
    for (size_t i = 0; rc == 0 && i < img.nframes; i++) order[i] = (uint32_t)i;
    if (rc == 0) qsort_r(order, img.nframes, sizeof *order, frame_cmp, (void *)img.frames);
    for (size_t k = 0; rc == 0 && k < img.nframes; k++) {
        const struct lz_frame *f = &img.frames[order[k]];
        if (k && same_frame(f, &img.frames[order[k - 1]])) continue;
        if (f->stored > cap) {
            char *nb = realloc(buf, f->stored);
            if (!nb) { snprintf(why, whylen, "out of memory"); rc = -1; break; }
            buf = nb;
            cap = f->stored;
        }
        const char *what = NULL;
        int err = 0;
        if (lz_pread_all(fds[f->pack], buf, f->stored, (off_t)f->offset) < 0) {
            what = "cannot be read";
            err = errno;
        } else if (f->codec != LZ_CODEC_NONE && lz_decompress((int)f->codec, buf, f->stored, raw, f->raw, work, wsize) < 0) {
            what = "does not expand";
        } else if (lz_hash(f->codec == LZ_CODEC_NONE ? buf : raw, f->raw) != f->xxh3) {
            what = "fails its checksum";
        }
        if (!what) continue;
        /* name memory that holds it, as the user sees a checkpoint */
        uint64_t addr = 0;
        for (size_t e = 0; e < img.nextents && !addr; e++)
            if (img.extents[e].frame == order[k]) addr = img.extents[e].addr;
        char at[64] = "";
        if (addr) snprintf(at, sizeof at, " at 0x%" PRIx64, addr);
        pack_shown(shown, sizeof shown, dir, ck, lz_str(&img, img.packs[f->pack].path));
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: page data%s %s%s%s (%u bytes, %s, at offset %" PRIu64 " of %s)",
                 index, at, what, err ? ": " : "", err ? (err == ENODATA ? "the pack is shorter" : strerror(err)) : "",
                 f->stored, lz_codec_name((int)f->codec), f->offset, shown);
        rc = -1;
    }
    if (rc == 0) rc = lz_check_chans(ck, &img, index, why, whylen);
    free(buf);
    free(raw);
    free(work);
    free(order);
    for (size_t i = 0; fds && i < img.npacks; i++) if (fds[i] >= 0) close(fds[i]);
    free(fds);
    lz_image_free(&img);
    return rc;
}

int lz_check_chans(const char *ckpt_dir, const struct lz_image *img, uint64_t index, char *why, size_t whylen)
{
    char inner[LZ_PATH_MAX + 512];
    for (size_t i = 0; i < img->nchans; i++) {
        void *data;
        if (lz_chan_data(ckpt_dir, img, &img->chans[i], &data, inner, sizeof inner) < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
            return -1;
        }
        free(data);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_GHOST) continue;
        const char *name = lz_str(img, f->path);
        char path[LZ_PATH_MAX + 600];
        snprintf(path, sizeof path, "%s/%s", ckpt_dir, name);
        size_t len;
        void *data = strchr(name, '/') ? NULL : lz_read_file(path, &len);
        if (!data) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: the content of descriptor %d (%s) cannot be read: %s",
                     index, f->fd, name, strerror(errno));
            return -1;
        }
        uint64_t h = lz_hash(data, len);
        free(data);
        if (h != f->xxh3) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: the content of descriptor %d (%s) fails its checksum",
                     index, f->fd, name);
            return -1;
        }
    }
    return 0;
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
