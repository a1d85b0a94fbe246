/* The data queued on the TCP connections of a checkpoint (lz_inet records
 * with bytes: runtime/rt_inet.c), each file checked against its checksum:
 * by `verify`, and by `restart` before anything changes. */
#include "store.h"
#include "hash.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lz_check_inet_data(const char *ckpt_dir, const struct lz_image *img, uint64_t index, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        if (!s->bytes) continue;
        char path[LZ_PATH_MAX + 128];
        snprintf(path, sizeof path, "%s/%s", ckpt_dir, lz_str(img, s->path));
        size_t len = 0;
        char *buf = lz_read_file(path, &len);
        int ok = buf && len == s->bytes && lz_hash(buf, len) == s->xxh3;
        free(buf);
        if (!ok) {
            snprintf(why, whylen, "checkpoint %" PRIu64 " is damaged: the data queued on socket descriptor %d is missing or "
                     "damaged (%s)", index, s->fd, path);
            return -1;
        }
    }
    return 0;
}
