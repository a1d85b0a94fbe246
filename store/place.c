/* Where a piece of a checkpoint belongs (place.h). */
#include "place.h"
#include "store.h"
#include "util.h"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "<prefix>N" with N all digits, at the start of `name` up to '/' or NUL */
static int numbered(const char *name, size_t len, const char *prefix, uint64_t *n)
{
    size_t pl = strlen(prefix);
    if (len <= pl || strncmp(name, prefix, pl)) return 0;
    char digits[32];
    if (len - pl >= sizeof digits) return 0;
    memcpy(digits, name + pl, len - pl);
    digits[len - pl] = 0;
    if (strspn(digits, "0123456789") != len - pl) return 0;
    return lz_parse_u64(digits, n) == 0;
}

void lz_place_parse(const char *part_dir, struct lz_place *pl)
{
    memset(pl, 0, sizeof *pl);
    char path[LZ_PATH_MAX];
    snprintf(path, sizeof path, "%s", part_dir);
    size_t l = strlen(path);
    while (l > 1 && path[l - 1] == '/') path[--l] = 0;
    char *last = strrchr(path, '/');
    if (!last) return;
    uint64_t pid;
    if (numbered(last + 1, strlen(last + 1), LZ_PROC_PREFIX, &pid)) {
        if (pid == 0 || pid > INT32_MAX) return;
        pl->pid = (int32_t)pid;
        *last = 0;
        last = strrchr(path, '/');
        if (!last) return;
    }
    if (!numbered(last + 1, strlen(last + 1), LZ_CKPT_PREFIX, &pl->index) &&
        !numbered(last + 1, strlen(last + 1), LZ_JRNL_PREFIX, &pl->index))
        return;
    *last = 0;
    snprintf(pl->store, sizeof pl->store, "%s", last == path ? "/" : path);
    pl->known = 1;
}

int lz_place_job(const char *store, uint64_t job[2], char *why, size_t whylen)
{
    struct lz_job j;
    int r = lz_job_read(store, &j);
    if (r == LZ_JOB_DAMAGED) { snprintf(why, whylen, "the store's job file is damaged (%s/%s)", store, LZ_JOBFILE); return -1; }
    if (r < 0) { snprintf(why, whylen, "cannot read the store's job file %s/%s: %s", store, LZ_JOBFILE, strerror(errno)); return -1; }
    job[0] = j.id[0];
    job[1] = j.id[1];
    return 0;
}

int lz_place_check(const char *part_dir, const char *what, const uint64_t job[2], uint64_t index, int32_t pid,
                   char *why, size_t whylen)
{
    struct lz_place pl;
    lz_place_parse(part_dir, &pl);
    if (!pl.known) return 0; /* a copy outside a store (tests, tools): nothing to compare with */
    uint64_t mine[2];
    if (lz_place_job(pl.store, mine, why, whylen) < 0) return -1;
    if (job[0] != mine[0] || job[1] != mine[1]) {
        snprintf(why, whylen, "%s belongs to another job (not the one of %s)", what, pl.store);
        return -1;
    }
    if (index != pl.index) {
        snprintf(why, whylen, "%s is checkpoint %" PRIu64 "'s, not checkpoint %" PRIu64 "'s (moved or swapped)", what,
                 index, pl.index);
        return -1;
    }
    if (pid >= 0 && pl.pid && pid != pl.pid) {
        snprintf(why, whylen, "%s is process %d's, not process %d's (moved or swapped)", what, pid, pl.pid);
        return -1;
    }
    return 0;
}
