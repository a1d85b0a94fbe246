/* What the file rollback (files/rollback.h) needs of the store, which the
 * file engine does not read itself: the job's identity and the journal
 * directories, ckpt.N/ and jrnl.N/ (store.h). */
#include "cli.h"
#include "place.h"
#include "rollback.h"
#include "util.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t rollback_stop_ns(const char *dir)
{
    struct lz_job job;
    return lz_job_read(dir, &job) == 0 && job.rolling_to < 0 ? lz_job_stop_ns(dir, &job) : INT64_MAX;
}

struct fj_plan *rollback_plan_load(const char *dir, uint64_t target, int64_t stop_ns, int *damaged, char *why, size_t whylen)
{
    if (damaged) *damaged = 0;
    uint64_t job[2];
    if (lz_place_job(dir, job, why, whylen) < 0) return NULL;
    uint64_t *v;
    int *jr;
    int n = lz_store_list_journals(dir, &v, &jr);
    if (n < 0) { snprintf(why, whylen, "cannot list the checkpoints: %s", strerror(errno)); return NULL; }
    struct fj_journal_dir *jd = calloc((size_t)n + 1, sizeof *jd);
    char (*paths)[LZ_PATH_MAX + 64] = calloc((size_t)n + 1, sizeof *paths);
    struct fj_plan *p = NULL;
    if (!jd || !paths) {
        snprintf(why, whylen, "cannot list the checkpoints: %s", strerror(ENOMEM));
    } else {
        for (int i = 0; i < n; i++) {
            lz_journal_path(paths[i], sizeof paths[i], dir, v[i], jr[i]); /* DIR, or its --journal-dir */
            jd[i] = (struct fj_journal_dir){.index = v[i], .failed = jr[i], .dir = paths[i]};
        }
        /* the rollback's own files (aliases, what it rebuilds) live with the journals */
        char home[LZ_PATH_MAX];
        lz_journal_home(home, sizeof home, dir);
        p = fj_plan_load(home, job, jd, (size_t)n, target, stop_ns, why, whylen);
        if (!p && damaged) *damaged = 1; /* a journal that cannot be read or proven: damage, whatever the cause */
    }
    free(paths);
    free(jd);
    free(v);
    free(jr);
    return p;
}
