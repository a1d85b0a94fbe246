/* Phase 1 of a restart: every path the restorer will open again — the
 * working directory, files and directories held open — will be there once
 * the files are rolled back.  A restorer that finds one missing fails after
 * the rollback, when the files can no longer be left as they were; so it is
 * found here, before anything changes. */
#include "cli.h"
#include "journal_read.h"
#include "rollback.h"
#include "util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
    free(w);
    return rc;
}
