/* DIR/remote.state: what of this local store is in the remote store, so
 * that nothing is uploaded twice and `list` can say where each checkpoint
 * is.  Lines appended (and fsync'ed) by the flusher, read whole:
 *   object PATH SIZE MD5 KEY   the local file PATH is the remote object KEY
 *   published N KEY            checkpoint N's commit object is KEY
 *   dropped N                  remote retention removed checkpoint N */
#include "remote_store.h"
#include "util.h"
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void rs_load(const char *dir, struct rs_state *st)
{
    memset(st, 0, sizeof *st);
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/" RS_STATE, dir);
    FILE *f = fopen(path, "re");
    if (!f) return;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        struct rc_object o;
        uint64_t n;
        memset(&o, 0, sizeof o);
        if (sscanf(line, "object %511s %" SCNu64 " %32s %1023s", o.path, &o.size, o.md5, o.key) == 4) {
            if (st->nobjs == st->cap) {
                st->cap = st->cap ? st->cap * 2 : 64;
                st->objs = lz_xrealloc(st->objs, st->cap * sizeof *st->objs);
            }
            st->objs[st->nobjs++] = o; /* a later line of the same path wins (rs_find looks from the end) */
        } else if (sscanf(line, "published %" SCNu64, &n) == 1) {
            st->published = lz_xrealloc(st->published, (st->npub + 1) * sizeof *st->published);
            st->published[st->npub++] = n;
        } else if (sscanf(line, "dropped %" SCNu64, &n) == 1) {
            for (size_t i = 0; i < st->npub; i++)
                if (st->published[i] == n) st->published[i--] = st->published[--st->npub];
        }
    }
    fclose(f);
}

const struct rc_object *rs_find(const struct rs_state *st, const char *path)
{
    for (size_t i = st->nobjs; i-- > 0;)
        if (!strcmp(st->objs[i].path, path)) return &st->objs[i];
    return NULL;
}

int rs_is_published(const struct rs_state *st, uint64_t index)
{
    for (size_t i = 0; i < st->npub; i++) if (st->published[i] == index) return 1;
    return 0;
}

void rs_free(struct rs_state *st)
{
    free(st->objs);
    free(st->published);
    memset(st, 0, sizeof *st);
}

int rs_append(const char *dir, const char *fmt, ...)
{
    char path[LZ_PATH_MAX + 32], line[2200];
    snprintf(path, sizeof path, "%s/" RS_STATE, dir);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) return -1;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    int rc = lz_write_all(fd, line, (size_t)n) < 0 || fdatasync(fd) < 0 ? -1 : 0;
    close(fd);
    return rc;
}
