/* `lazarus gc -d s3://BUCKET/PREFIX`: what no commit object lists goes --
 * the objects of flushes that failed or were cut (never published), of
 * commits retention removed, and multipart uploads a killed flusher left.
 * A flush under way has objects no commit lists yet: only what is older
 * than --older-than SECONDS (default an hour) is removed, and a flusher
 * checks every object it reuses before its commit lists it
 * (remote_flush.c). */
#include "cli.h"
#include "remote_store.h"
#include "json_out.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include "exit_codes.h"
#include <string.h>
#include <time.h>

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int remote_gc(const char *url, const struct remote_opts *ro, uint64_t older_than_s, int json)
{
    struct s3_conf c;
    char why[4096];
    if (s3_conf_load(&c, url, ro->endpoint, ro->addressing, ro->ca_file, ro->insecure, why, sizeof why) < 0) { lz_err("gc: %s", why); return 1; }
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s%s", c.prefix, *c.prefix ? "/" : "");
    /* everything listed first, then the commits: an object published meanwhile is in one */
    struct s3_object *objs;
    ssize_t no = s3_list(&c, prefix, &objs, why, sizeof why);
    if (no < 0) { lz_err("gc: %s", why); return LZ_EXIT_REMOTE; }
    struct rc_ref *refs;
    ssize_t nr = rc_list_commits(&c, &refs, why, sizeof why);
    if (nr < 0) { lz_err("gc: %s", why); free(objs); return LZ_EXIT_REMOTE; }
    int code = 1; /* the store answered, but not as it must (a damaged commit) */
    char **keys = NULL;
    size_t nkeys = 0;
    for (ssize_t i = 0; i < nr; i++) {
        struct rc_commit cm;
        int g = rc_fetch_commit(&c, &refs[i], &cm, why, sizeof why);
        if (g > 0) continue; /* removed by a flusher's retention since the listing: what it listed that another
                              * commit needs, that commit lists too */
        if (g < 0) {
            /* a damaged commit: what it lists cannot be known, so nothing goes */
            lz_err("gc: %s; nothing was removed", why);
            goto fail;
        }
        keys = lz_xrealloc(keys, (nkeys + cm.nobjs + 1) * sizeof *keys);
        keys[nkeys++] = lz_xstrdup(refs[i].key);
        for (size_t k = 0; k < cm.nobjs; k++) keys[nkeys++] = lz_xstrdup(cm.objs[k].key);
        rc_commit_free(&cm);
    }
    qsort(keys, nkeys, sizeof *keys, cmp_str);
    int64_t now = (int64_t)time(NULL), limit = now - (int64_t)older_than_s;
    uint64_t removed = 0, bytes = 0, young = 0, aborted = 0;
    for (ssize_t i = 0; i < no; i++) {
        const char *k = objs[i].key;
        if (bsearch(&k, keys, nkeys, sizeof *keys, cmp_str)) continue;
        if (strstr(k, "/commit/")) continue; /* a commit of another version or a damaged name: a person's call */
        if (objs[i].mtime > limit) { young++; continue; }
        if (s3_delete(&c, k, why, sizeof why) < 0) { lz_err("gc: %s", why); code = LZ_EXIT_REMOTE; goto fail; }
        removed++;
        bytes += objs[i].size;
    }
    struct s3_upload *ups;
    ssize_t nu = s3_list_uploads(&c, prefix, &ups, why, sizeof why);
    if (nu < 0) { lz_err("gc: %s", why); code = LZ_EXIT_REMOTE; goto fail; }
    for (ssize_t i = 0; i < nu; i++) {
        if (ups[i].initiated > limit) { young++; continue; }
        if (s3_abort_upload(&c, ups[i].key, ups[i].id, why, sizeof why) < 0) { lz_err("gc: %s", why); free(ups); code = LZ_EXIT_REMOTE; goto fail; }
        aborted++;
    }
    free(ups);
    if (json) {
        struct jw w;
        jw_init(&w, stdout);
        jw_obj(&w, NULL);
        jw_version(&w);
        jw_u64(&w, "objects_removed", removed);
        jw_u64(&w, "bytes_removed", bytes);
        jw_u64(&w, "uploads_aborted", aborted);
        jw_u64(&w, "left_newer", young);
        jw_u64(&w, "older_than", older_than_s);
        jw_end_obj(&w);
        putchar('\n');
        goto done;
    }
    char hb[32];
    human_bytes(hb, sizeof hb, bytes);
    printf("removed %" PRIu64 " objects (%s) no checkpoint needs, aborted %" PRIu64 " uploads; %" PRIu64
           " newer than %" PRIu64 " s left\n", removed, hb, aborted, young, older_than_s);
done:
    for (size_t k = 0; k < nkeys; k++) free(keys[k]);
    free(keys);
    free(refs);
    free(objs);
    return 0;
fail:
    for (size_t k = 0; k < nkeys; k++) free(keys[k]);
    free(keys);
    free(refs);
    free(objs);
    return code;
}
