/* `lazarus list`: per checkpoint, the paths a rollback to it would change
 * and the bytes kept for it (rollback.h). */
#include "rollback.h"
#include "journal.h"
#include "journal_read.h"
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

static void journal_paths(const char *ckdir, uint64_t index, uint64_t **hashes, size_t *n, size_t *cap, uint64_t *bytes)
{
    struct seg s;
    memset(&s, 0, sizeof s);
    snprintf(s.ckdir, sizeof s.ckdir, "%s", ckdir);
    s.index = index;
    *bytes = 0;
    char why[LZ_PATH_MAX + 512];
    if (fj_load_seg(&s, NULL, why, sizeof why) < 0) { fj_seg_free(&s); return; }
    struct stat st;
    for (size_t j = 0; j < s.nj; j++) *bytes += (s.j[j].nundo ? s.j[j].log_end : 0) + s.j[j].data_end; /* an empty log's BEGIN/END keep nothing */
    for (size_t i = 0; i < s.n; i++) {
        const char *path = s.r[i].type == FJ_NAME ? name_path(&s.r[i]) : s.r[i].type == FJ_INODE ? inode_path(&s.r[i]) : NULL;
        if (!path) continue;
        if (*n == *cap) { *cap = *cap ? *cap * 2 : 256; *hashes = lz_xrealloc(*hashes, *cap * sizeof **hashes); }
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
                *bytes += (uint64_t)st.st_blocks * LZ_ST_BLOCK_BYTES;
        if (d) closedir(d);
    }
    fj_seg_free(&s);
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
            lz_journal_path(ck, sizeof ck, dir, v[j], jr[j]);
            journal_paths(ck, v[j], &h, &nh, &cap, &b);
            total += b;
        }
        if (nh) qsort(h, nh, sizeof *h, u64cmp);
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

