/* Local sockets that are not one end of a connected pair (format.h, struct
 * lz_usock): the checks a manifest's records pass before a restorer follows
 * them (restorer/restore_usock.c). */
#include "manifest.h"
#include <stdio.h>
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
        if (!ok) FAIL("manifest local socket record %zu is malformed", i);
    }
    for (size_t j = 0; j < img->nfds; j++)
        if (img->fds[j].kind == LZ_FD_USOCK && !lz_usock_of(img, img->fds[j].fd))
            FAIL("manifest descriptor %d is malformed", img->fds[j].fd);
    return 0;
}
