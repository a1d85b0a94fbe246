/* Local sockets that are not one end of a connected pair (format.h, struct
 * lz_usock): the checks a manifest's records pass before a restorer follows
 * them (restorer/restore_usock.c). */
#include "manifest.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...) do { snprintf(why, whylen, __VA_ARGS__); return -1; } while (0)

const struct lz_usock *lz_usock_of(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->nusocks; i++)
        if (img->usocks[i].fd == fd) return &img->usocks[i];
    return NULL;
}

int lz_usocks_valid(const struct lz_image *img, char *why, size_t whylen)
{
    const uint32_t known = LZ_US_LISTEN | LZ_US_UNLINKED | LZ_US_ORPHAN | LZ_US_CONNECT | LZ_US_MODE;
    for (size_t i = 0; i < img->nusocks; i++) {
        const struct lz_usock *u = &img->usocks[i];
        const struct lz_chan *c = &u->q;
        const struct lz_fd *f = NULL;
        for (size_t j = 0; j < img->nfds; j++)
            if (img->fds[j].fd == u->fd) f = &img->fds[j];
        const char *name = lz_str(img, c->path);
        int msgs = c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET;
        int ok = f && f->kind == LZ_FD_USOCK && f->ino == c->ino && lz_usock_of(img, u->fd) == u &&
                 (c->kind == LZ_CH_STREAM || msgs) && !(u->flags & ~known) && u->addr_len <= sizeof u->addr &&
                 u->peer_len <= sizeof u->peer_addr && c->bytes <= LZ_CHAN_MAX_BYTES && c->capacity && c->sndbuf &&
                 c->shutdown <= 3 && c->peek_off >= -1 && !(c->sockflags & ~LZ_CHS_PASSCRED) &&
                 (msgs ? c->bytes >= 4ull * c->nmsgs : c->nmsgs == 0) && u->rcvtimeo_us >= 0 && u->sndtimeo_us >= 0;
        /* its data file: a plain name in the checkpoint directory */
        if (ok && c->bytes)
            ok = c->path && c->path < img->strings_len && memchr(img->strings + c->path, 0, img->strings_len - c->path) &&
                 *name && strcmp(name, ".") && strcmp(name, "..") && !strchr(name, '/');
        if (ok && !c->bytes) ok = c->path == 0;
        if (ok && (u->flags & LZ_US_LISTEN)) ok = c->kind != LZ_CH_DGRAM && !c->bytes && !(u->flags & (LZ_US_ORPHAN | LZ_US_CONNECT));
        if (ok && (u->flags & LZ_US_CONNECT)) ok = c->kind == LZ_CH_DGRAM && u->peer_len > 0 && !c->bytes && !(u->flags & LZ_US_ORPHAN);
        if (ok && (u->flags & (LZ_US_UNLINKED | LZ_US_MODE))) ok = u->addr_len > 0 && u->addr[0];
        if (ok && u->from_bytes) { /* the senders' file: beside a datagram queue, a plain name */
            const char *fn = u->from_path < img->strings_len ? img->strings + u->from_path : "";
            ok = c->kind == LZ_CH_DGRAM && c->nmsgs && u->from_bytes <= (4ull + sizeof u->addr) * c->nmsgs && u->from_path &&
                 memchr(fn, 0, img->strings_len - u->from_path) && *fn && strcmp(fn, ".") && strcmp(fn, "..") && !strchr(fn, '/');
        }
        if (ok && !u->from_bytes) ok = u->from_path == 0 && u->from_xxh3 == 0;
        if (!ok) FAIL("manifest local socket record %zu is malformed", i);
    }
    for (size_t j = 0; j < img->nfds; j++)
        if (img->fds[j].kind == LZ_FD_USOCK && !lz_usock_of(img, img->fds[j].fd))
            FAIL("manifest descriptor %d is malformed", img->fds[j].fd);
    return 0;
}

int lz_usock_senders(const char *ckpt_dir, const struct lz_image *img, const struct lz_usock *u, void **data, char *why,
                     size_t whylen)
{
    *data = NULL;
    if (!u->from_bytes) return 0;
    struct lz_chan c;
    memset(&c, 0, sizeof c);
    c.ino = u->q.ino;
    c.kind = LZ_CH_STREAM; /* (checked as bytes; the entries below) */
    c.path = u->from_path;
    c.bytes = u->from_bytes;
    c.xxh3 = u->from_xxh3;
    if (lz_chan_data(ckpt_dir, img, &c, data, why, whylen) < 0) return -1;
    const char *b = *data;
    uint64_t off = 0;
    uint32_t n = 0;
    for (; off + 4 <= u->from_bytes; n++) {
        uint32_t l;
        memcpy(&l, b + off, 4);
        off += 4 + (uint64_t)l;
        if (l > sizeof u->addr) break;
    }
    if (off != u->from_bytes || n != u->q.nmsgs) {
        snprintf(why, whylen, "%s, the senders of the datagrams of socket:[%llu], does not name %u senders", lz_str(img, u->from_path),
                 (unsigned long long)u->q.ino, u->q.nmsgs);
        free(*data);
        *data = NULL;
        return -1;
    }
    return 0;
}
