/* Phase 1 of a restart: every path the restorer will open again — the
 * working directory, files and directories held open, files mapped — will be
 * there once the files are rolled back, and a file mapped privately (an
 * executable, a library, a data file) will hold what it held at the
 * checkpoint.  A restorer that finds otherwise fails after the rollback, when
 * the files can no longer be left as they were; so it is found here, before
 * anything changes. */
#include "cli.h"
#include "journal_read.h"
#include "rollback.h"
#include "util.h"
#include "hash.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int want_by_path(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const struct want *)elem)->path);
}

/* What `path` will be after the rollback: the deepest of it and its
 * directories that a journal names decides (its state at N); if none does,
 * it stays as it is now. */
static int there_after(const char *path, const struct want *w, size_t n)
{
    char p[LZ_PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (;;) {
        const struct want *hit = n ? bsearch(p, w, n, sizeof *w, want_by_path) : NULL;
        if (hit) return ((const struct fj_name *)hit->r->p)->was != FJ_WAS_ABSENT;
        char *s = strrchr(p, '/');
        if (!s || s == p) break;
        *s = 0;
    }
    struct stat st;
    return lstat(path, &st) == 0;
}

static int hash_range(const char *path, uint64_t off, uint64_t len, uint64_t *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    size_t bufsz = 1 << 20;
    char *buf = lz_xmalloc(bufsz);
    int rc = 0;
    while (len) {
        ssize_t n = pread(fd, buf, len < bufsz ? len : bufsz, (off_t)off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) { rc = -1; break; }
        if (n == 0) break; /* mapping extends past EOF, as at checkpoint time */
        XXH3_64bits_update(&st, buf, (size_t)n);
        off += (uint64_t)n;
        len -= (uint64_t)n;
    }
    free(buf);
    close(fd);
    *out = XXH3_64bits_digest(&st);
    return rc;
}

/* Whether the rollback gives `path` its content at the checkpoint: the job
 * changed it (an INODE record of the plan names it) or its name (a NAME
 * record).  Its journals are proven and outside changes refused already, so
 * its content after the rollback is the checkpoint's. */
static int rolled_back(const struct fj_plan *plan, const char *path, const struct want *w, size_t n)
{
    if (n && bsearch(path, w, n, sizeof *w, want_by_path)) return 1;
    for (size_t i = 0; i < plan->n; i++)
        for (size_t k = 0; k < plan->s[i].n; k++) {
            const struct rec *r = &plan->s[i].r[k];
            if (r->type == FJ_INODE && !strcmp(inode_path(r), path)) return 1;
        }
    return 0;
}

/* The files the program had mapped: there after the rollback, and those
 * mapped privately unchanged (their pages not in the image read as the
 * file), unless the rollback gives them back. */
static int mapped_files_check(const struct lz_image *img, const struct fj_plan *plan, const struct want *w, size_t n,
                              char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *r = &img->regions[i];
        if (r->kind != LZ_R_FILE_PRIVATE && r->kind != LZ_R_FILE_SHARED) continue;
        const char *path = lz_str(img, r->path);
        if (rolled_back(plan, path, w, n)) {
            if (there_after(path, w, n)) continue;
            snprintf(why, whylen, "%s, mapped by the program, is gone, and no journal brings it back", path);
            return -1;
        }
        if (access(path, R_OK) < 0) {
            snprintf(why, whylen, "%s, mapped by the program, is missing or unreadable: %s", path, strerror(errno));
            return -1;
        }
        if (r->kind != LZ_R_FILE_PRIVATE) continue;
        uint64_t h;
        if (hash_range(path, r->file_offset, r->end - r->start, &h) < 0 || h != r->file_hash) {
            snprintf(why, whylen, "%s has changed since the checkpoint; the program cannot resume against a different %s",
                     path, (r->prot & 4) ? "executable or library" : "file");
            return -1;
        }
    }
    return 0;
}

int restart_paths_check(const struct lz_image *img, const struct fj_plan *plan, char *why, size_t whylen)
{
    size_t n;
    struct want *w = fj_final_names(plan, &n); /* sorted by path */
    int rc = 0;
    const char *cwd = lz_str(img, img->proc->cwd);
    if (cwd[0] && !there_after(cwd, w, n)) {
        snprintf(why, whylen, "the program's working directory %s is gone, and no journal brings it back", cwd);
        rc = -1;
    }
    for (size_t i = 0; i < img->nfds && rc == 0; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_FILE && f->kind != LZ_FD_DIR && f->kind != LZ_FD_DEV) continue;
        const char *path = lz_str(img, f->path);
        if (!there_after(path, w, n)) {
            snprintf(why, whylen, "%s, open as descriptor %d, is gone, and no journal brings it back", path, f->fd);
            rc = -1;
        }
    }
    if (rc == 0) rc = mapped_files_check(img, plan, w, n, why, whylen);
    if (rc == 0) rc = restart_named_objects_check(img, why, whylen); /* sockets and named pipes (restart_sockpaths.c) */
    free(w);
    return rc;
}
