/* The data in flight of pipes and socket pairs (format.h, struct lz_chan):
 * one file per object in the checkpoint directory, read back and checked
 * against the size and checksum the manifest gives before it is used. */
#include "manifest.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int lz_chan_data(const char *ckpt_dir, const struct lz_image *img, const struct lz_chan *c, void **data,
                 char *why, size_t whylen)
{
    *data = NULL;
    if (c->bytes == 0) return 0;
    char path[LZ_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%s", ckpt_dir, lz_str(img, c->path));
    return lz_chan_data_path(path, c, data, why, whylen);
}

int lz_chan_data_path(const char *path, const struct lz_chan *c, void **data, char *why, size_t whylen)
{
    *data = NULL;
    const char *what = c->kind == LZ_CH_PIPE ? "pipe" : c->kind == LZ_CH_FIFO ? "fifo" : "socket";
    if (c->bytes == 0) return 0;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        snprintf(why, whylen, "cannot read %s, the data in flight of %s:[%llu]: %s", name, what,
                 (unsigned long long)c->ino, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if ((uint64_t)st.st_size != c->bytes) {
        snprintf(why, whylen, "%s, the data in flight of %s:[%llu], has %lld bytes, expected %llu", name, what,
                 (unsigned long long)c->ino, (long long)st.st_size, (unsigned long long)c->bytes);
        close(fd);
        return -1;
    }
    char *buf = malloc(c->bytes);
    if (!buf) { snprintf(why, whylen, "out of memory"); close(fd); return -1; }
    int rc = lz_pread_all(fd, buf, c->bytes, 0);
    int err = errno;
    close(fd);
    if (rc < 0) {
        snprintf(why, whylen, "cannot read %s, the data in flight of %s:[%llu]: %s", name, what,
                 (unsigned long long)c->ino, strerror(err));
        free(buf);
        return -1;
    }
    if (lz_hash(buf, c->bytes) != c->xxh3) {
        snprintf(why, whylen, "%s, the data in flight of %s:[%llu], fails its checksum", name, what,
                 (unsigned long long)c->ino);
        free(buf);
        return -1;
    }
    if (c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET) { /* messages fill the file exactly */
        uint64_t off = 0;
        uint32_t m = 0;
        for (; off + 4 <= c->bytes; m++) {
            uint32_t len;
            memcpy(&len, buf + off, 4);
            off += 4;
            if (len > c->bytes - off) { off = c->bytes + 1; break; }
            off += len;
        }
        if (off != c->bytes || m != c->nmsgs) {
            snprintf(why, whylen, "%s, the data in flight of %s:[%llu], does not hold %u messages", name, what,
                     (unsigned long long)c->ino, c->nmsgs);
            free(buf);
            return -1;
        }
    }
    *data = buf;
    return 0;
}
