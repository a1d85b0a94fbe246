#include "store.h"
#include "hash.h"
#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
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
    return 0;
}

void lz_ckpt_path(char *buf, size_t len, const char *dir, uint64_t index)
{
    snprintf(buf, len, "%s/" LZ_CKPT_PREFIX "%06" PRIu64, dir, index);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int lz_store_list(const char *dir, uint64_t **out)
{
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return -1;
    size_t n = 0, cap = 16;
    uint64_t *v = malloc(cap * sizeof *v);
    struct dirent *e;
    while (v && (e = readdir(d))) {
        if (strncmp(e->d_name, LZ_CKPT_PREFIX, strlen(LZ_CKPT_PREFIX))) continue;
        uint64_t idx;
        if (lz_parse_u64(e->d_name + strlen(LZ_CKPT_PREFIX), &idx) < 0 || idx == 0) continue;
        if (n == cap) {
            uint64_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) { free(v); v = NULL; break; }
            v = nv;
        }
        v[n++] = idx;
    }
    closedir(d);
    if (!v) { errno = ENOMEM; return -1; }
    qsort(v, n, sizeof *v, cmp_u64);
    *out = v;
    return (int)n;
}

static void remove_tree(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                if (unlinkat(fd, e->d_name, 0) < 0 && errno == EISDIR) remove_tree(fd, e->d_name);
        if (d) closedir(d); else close(fd);
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

void lz_store_cleanup_tmp(const char *dir)
{
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    DIR *d = fdopendir(dup(dfd));
    struct dirent *e;
    char names[64][256];
    int n = 0;
    while (d && (e = readdir(d)) && n < 64)
        if (!strncmp(e->d_name, LZ_TMP_PREFIX, strlen(LZ_TMP_PREFIX)))
            snprintf(names[n++], sizeof names[0], "%s", e->d_name);
    if (d) closedir(d);
    for (int i = 0; i < n; i++) remove_tree(dfd, names[i]);
    close(dfd);
}

/* Hands the saved-bytes file of a checkpoint being removed to the next
 * interval (LZ_SPARE), if a slot is free and it is worth it. */
static void recycle_data(int dfd, const char *ckname)
{
    char from[300], to[32];
    struct stat st;
    snprintf(from, sizeof from, "%s/" LZ_FILES_DATA, ckname);
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
    close(dfd);
}

int lz_store_remove(const char *dir, uint64_t index)
{
    char from[LZ_PATH_MAX + 64], to[LZ_PATH_MAX + 64];
    lz_ckpt_path(from, sizeof from, dir, index);
    snprintf(to, sizeof to, "%s/" LZ_TMP_PREFIX "%06" PRIu64 ".removing", dir, index);
    if (rename(from, to) < 0) return -1;
    lz_fsync_dir(dir);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        recycle_data(dfd, strrchr(to, '/') + 1);
        remove_tree(dfd, strrchr(to, '/') + 1);
        close(dfd);
    }
    return 0;
}

void lz_store_retain(const char *dir, uint64_t keep, uint64_t newest, uint64_t run_first)
{
    char path[LZ_PATH_MAX + 64], why[256];
    struct lz_image img;
    uint64_t parent = 0;
    lz_ckpt_path(path, sizeof path, dir, newest);
    if (lz_manifest_load(path, &img, why, sizeof why) == 0) {
        parent = img.hdr->parent;
        lz_image_free(&img);
    }
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n < 0) return;
    /* an abandoned branch: checkpoints taken after the one we restarted from,
     * before this run began */
    if (parent)
        for (int i = 0; i < n; i++)
            if (v[i] > parent && v[i] < run_first) { lz_store_remove(dir, v[i]); v[i] = 0; }
    size_t live = 0;
    for (int i = 0; i < n; i++) live += v[i] != 0;
    for (int i = 0; i < n && live > keep && keep > 0; i++)
        if (v[i] && v[i] != newest) { lz_store_remove(dir, v[i]); live--; }
    free(v);
}

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
    char *save, *line = strtok_r(buf, "\n", &save);
    for (; line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq++ = 0;
        if (!strcmp(line, "interval")) lz_parse_u64(eq, &job->interval);
        else if (!strcmp(line, "keep")) lz_parse_u64(eq, &job->keep);
        else if (!strcmp(line, "state")) snprintf(job->state, sizeof job->state, "%s", eq);
        else if (!strcmp(line, "exit")) job->exit_status = atoi(eq);
        else if (!strcmp(line, "durability")) job->durability = !strcmp(eq, "machine");
        else if (!strcmp(line, "stopped_ns")) job->stopped_ns = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "rolling_to")) job->rolling_to = strtoll(eq, NULL, 10);
        else if (!strcmp(line, "next_index")) lz_parse_u64(eq, &job->next_index);
        else if (!strcmp(line, "exclude")) {
            size_t have = strlen(job->excludes);
            if (have + strlen(eq) + 2 < sizeof job->excludes)
                sprintf(job->excludes + have, "%s%s", have ? "\n" : "", eq);
        }
    }
    free(buf);
    return 0;
}

int lz_job_write(const char *dir, const struct lz_job *job)
{
    char path[LZ_PATH_MAX + 32], tmp[LZ_PATH_MAX + 48], buf[8192];
    snprintf(path, sizeof path, "%s/%s", dir, LZ_JOBFILE);
    snprintf(tmp, sizeof tmp, "%s/%s.tmp", dir, LZ_JOBFILE);
    int n = snprintf(buf, sizeof buf, "version=%u\ninterval=%" PRIu64 "\nkeep=%" PRIu64 "\nstate=%s\nexit=%d\n"
                     "durability=%s\nstopped_ns=%" PRId64 "\nrolling_to=%" PRId64 "\nnext_index=%" PRIu64 "\n",
                     LZ_VERSION, job->interval, job->keep, job->state, job->exit_status,
                     job->durability ? "machine" : "process", job->stopped_ns, job->rolling_to, job->next_index);
    for (const char *p = job->excludes; *p && n < (int)sizeof buf - 1;) {
        const char *q = strchr(p, '\n');
        size_t l = q ? (size_t)(q - p) : strlen(p);
        n += snprintf(buf + n, sizeof buf - (size_t)n, "exclude=%.*s\n", (int)l, p);
        p += l + (q ? 1 : 0);
    }
    if (n >= (int)sizeof buf) n = (int)sizeof buf - 1;
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

int lz_verify_ckpt(const char *dir, uint64_t index, char *why, size_t whylen)
{
    char ck[LZ_PATH_MAX + 64], path[LZ_PATH_MAX + 600], inner[1024];
    struct lz_image img;
    lz_ckpt_path(ck, sizeof ck, dir, index);
    if (lz_manifest_load(ck, &img, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s", index, inner);
        return -1;
    }
    int rc = 0;
    int *fds = calloc(img.npacks ? img.npacks : 1, sizeof *fds);
    for (size_t i = 0; i < img.npacks && rc == 0; i++) {
        snprintf(path, sizeof path, "%s/%s", ck, lz_str(&img, img.packs[i].path));
        struct stat st;
        fds[i] = open(path, O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: cannot open %s: %s", index, path, strerror(errno));
            rc = -1;
        } else if (fstat(fds[i], &st) == 0 && (uint64_t)st.st_size != img.packs[i].size) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: %s has %lld bytes, expected %" PRIu64, index,
                     path, (long long)st.st_size, img.packs[i].size);
            rc = -1;
        }
    }
    char *buf = rc == 0 ? malloc(LZ_EXTENT_MAX) : NULL;
    if (rc == 0 && !buf) { snprintf(why, whylen, "out of memory"); rc = -1; }
    for (size_t e = 0; rc == 0 && e < img.nextents; e++) {
        const struct lz_extent *x = &img.extents[e];
        if (lz_pread_all(fds[x->pack], buf, x->stored_length, (off_t)x->pack_offset) < 0 ||
            lz_hash(buf, x->length) != x->xxh3) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: page data at 0x%" PRIx64 " fails its checksum (%s/%s)",
                     index, x->addr, ck, lz_str(&img, img.packs[x->pack].path));
            rc = -1;
        }
    }
    free(buf);
    for (size_t i = 0; i < img.npacks; i++) if (fds[i] > 0) close(fds[i]);
    free(fds);
    lz_image_free(&img);
    return rc;
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
