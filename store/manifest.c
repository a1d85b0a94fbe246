#include "manifest.h"
#include "place.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *lz_trigger_name(uint32_t t)
{
    switch (t) {
    case LZ_TRIG_INTERVAL: return "interval";
    case LZ_TRIG_REQUEST: return "request";
    case LZ_TRIG_API: return "api";
    default: return "unknown";
    }
}

#define FAIL(...) do { snprintf(why, whylen, __VA_ARGS__); return -1; } while (0)

static int str_ok(const struct lz_image *img, uint32_t off)
{
    if (off == 0) return 1;
    return off < img->strings_len && memchr(img->strings + off, 0, img->strings_len - off) != NULL;
}

static int codec_ok(uint32_t c)
{
    return c == LZ_CODEC_NONE || c == LZ_CODEC_LZ4 || c == LZ_CODEC_ZSTD;
}

/* A file name inside the checkpoint directory: no directory part. */
static int plain_name(const struct lz_image *img, uint32_t off)
{
    const char *s = lz_str(img, off);
    return off && str_ok(img, off) && *s && strcmp(s, ".") && strcmp(s, "..") && !strchr(s, '/');
}

static const struct lz_chan *find_chan(const struct lz_image *img, uint64_t ino)
{
    for (size_t i = 0; i < img->nchans; i++)
        if (img->chans[i].ino == ino) return &img->chans[i];
    return NULL;
}

static const struct lz_fd *find_fd(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].fd == fd) return &img->fds[i];
    return NULL;
}

/* The object record (not a watch) of descriptor fd, or NULL. */
static const struct lz_event *find_event(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].fd == fd && img->events[i].kind != LZ_EV_WATCH) return &img->events[i];
    return NULL;
}

/* Event-loop objects: exactly one object record per LZ_FD_EVENT descriptor;
 * every watch on an epoll of the table, naming a descriptor of the table once. */
static int check_events(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nevents; i++) {
        const struct lz_event *e = &img->events[i];
        const struct lz_fd *f = find_fd(img, e->fd);
        int ok = f && f->kind == LZ_FD_EVENT && !e->pad;
        switch (ok ? e->kind : 0) {
        case LZ_EV_EVENTFD: ok = !(e->flags & ~LZ_EVF_SEMAPHORE) && e->count < UINT64_MAX; break;
        case LZ_EV_TIMERFD:
            ok = e->clockid >= 0 && e->clockid < 16 && !(e->flags & ~3u) && e->value_ns >= 0 && e->interval_ns >= 0;
            break;
        case LZ_EV_SIGNALFD: case LZ_EV_EPOLL: break;
        case LZ_EV_WATCH: {
            const struct lz_fd *t = find_fd(img, e->target);
            const struct lz_event *ep = find_event(img, e->fd);
            ok = t && t->kind != LZ_FD_CTL && ep && ep->kind == LZ_EV_EPOLL;
            for (size_t j = 0; ok && j < i; j++)
                ok = !(img->events[j].kind == LZ_EV_WATCH && img->events[j].fd == e->fd && img->events[j].target == e->target);
            break;
        }
        default: ok = 0;
        }
        if (ok && e->kind != LZ_EV_WATCH) ok = find_event(img, e->fd) == e; /* one object per descriptor */
        if (!ok) FAIL("manifest event descriptor record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].kind == LZ_FD_EVENT && !find_event(img, img->fds[i].fd))
            FAIL("manifest descriptor %d is malformed", img->fds[i].fd);
    return 0;
}

/* The descriptor table, and the pipes and socket pairs its descriptors
 * name: every record the restorer follows (dup_of, ino, peer) exists. */
static int check_fds(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nchans; i++) {
        const struct lz_chan *c = &img->chans[i];
        int sock = c->kind == LZ_CH_STREAM || c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET;
        int msgs = c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET;
        if ((c->kind != LZ_CH_PIPE && !sock) || c->ino == 0 || c->bytes > LZ_CHAN_MAX_BYTES ||
            (c->bytes ? !plain_name(img, c->path) : c->path != 0) || (msgs ? c->bytes < 4ull * c->nmsgs : c->nmsgs != 0) ||
            c->capacity == 0 || (c->kind == LZ_CH_PIPE && (c->bytes > c->capacity || c->peer || c->sndbuf || c->shutdown)) ||
            (sock && (c->sndbuf == 0 || c->shutdown > 3 || c->peek_off < -1)) || c->sockflags & ~(LZ_CHS_PASSCRED | LZ_CHS_REMOTE) ||
            (!sock && c->sockflags))
            FAIL("manifest pipe or socket record %zu is malformed", i);
        if (find_chan(img, c->ino) != c) FAIL("manifest pipe or socket record %zu is malformed", i);
        if (sock && !(c->sockflags & LZ_CHS_REMOTE)) { /* both ends, each the other's peer, of one type */
            const struct lz_chan *p = c->peer != c->ino ? find_chan(img, c->peer) : NULL;
            if (!p || p->peer != c->ino || p->kind != c->kind) FAIL("manifest pipe or socket record %zu is malformed", i);
        }
        for (size_t j = 0; j < i; j++)
            if (c->path && img->chans[j].path && !strcmp(lz_str(img, c->path), lz_str(img, img->chans[j].path)))
                FAIL("manifest pipe or socket record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (!str_ok(img, f->path) || f->fd < 0 || find_fd(img, f->fd) != f ||
            (f->launcher && (f->kind != LZ_FD_STDIO || f->launcher > LZ_LAUNCHER_FDS)))
            FAIL("manifest descriptor table is malformed");
        if (f->kind == LZ_FD_DUP) {
            const struct lz_fd *o = find_fd(img, f->dup_of);
            if (!o || o->kind == LZ_FD_DUP) FAIL("manifest descriptor table is malformed");
        }
        if (f->kind == LZ_FD_PIPE || f->kind == LZ_FD_SOCKET) {
            const struct lz_chan *c = find_chan(img, f->ino);
            if (!c || (c->kind == LZ_CH_PIPE) != (f->kind == LZ_FD_PIPE) || (f->flags & O_ACCMODE) == 3)
                FAIL("manifest descriptor %d is malformed", f->fd);
        }
    }
    if (check_events(img, why, whylen) < 0) return -1;
    /* a socket is one open file: exactly one descriptor opens it (others are dups) */
    for (size_t i = 0; i < img->nchans; i++) {
        const struct lz_chan *c = &img->chans[i];
        int n = 0;
        for (size_t j = 0; j < img->nfds; j++)
            n += (img->fds[j].kind == LZ_FD_PIPE || img->fds[j].kind == LZ_FD_SOCKET) && img->fds[j].ino == c->ino;
        if (n == 0 || (c->kind != LZ_CH_PIPE && n != 1)) FAIL("manifest pipe or socket record %zu is malformed", i);
    }
    return 0;
}

static int check_contents(struct lz_image *img, char *why, size_t whylen)
{
    if (!img->proc) FAIL("manifest has no process record");
    if (img->ngroups_listed != img->proc->ngroups ||
        lz_hash(img->groups ? (const void *)img->groups : "", img->ngroups_listed * sizeof(uint32_t)) != img->proc->groups_xxh3)
        FAIL("manifest group list is malformed");
    if (!img->strings || img->strings_len == 0 || img->strings[img->strings_len - 1] != 0)
        FAIL("manifest string table is malformed");
    const struct lz_proc *p = img->proc;
    if (!str_ok(img, p->cwd) || !str_ok(img, p->exe)) FAIL("manifest process record is malformed");
    if (p->npending > LZ_MAX_PENDING) FAIL("manifest process record is malformed");
    if (img->nthreads == 0 || img->nthreads > LZ_MAX_THREADS) FAIL("manifest thread list is malformed");
    int ckpt_threads = 0;
    for (size_t i = 0; i < img->nthreads; i++) {
        const struct lz_thread *t = &img->threads[i];
        if (t->tid <= 0 || (i == 0) != (t->tid == p->pid)) FAIL("manifest thread list is malformed");
        for (size_t j = 0; j < i; j++)
            if (img->threads[j].tid == t->tid) FAIL("manifest thread list is malformed");
        ckpt_threads += (t->flags & LZ_TH_CKPT) != 0;
    }
    if (ckpt_threads != 1) FAIL("manifest thread list is malformed");
    for (uint32_t i = 0; i < p->npending; i++) {
        int found = p->pending[i].tid == 0;
        for (size_t j = 0; j < img->nthreads && !found; j++) found = img->threads[j].tid == p->pending[i].tid;
        if (!found || p->pending[i].signo < 1 || p->pending[i].signo > LZ_NSIG) FAIL("manifest process record is malformed");
    }
    /* more pending signals only after a full lz_proc.pending */
    if (img->nsigq && (p->npending != LZ_MAX_PENDING || img->nsigq > LZ_MAX_SIGQUEUE - LZ_MAX_PENDING))
        FAIL("manifest pending signal list is malformed");
    for (size_t i = 0; i < img->nsigq; i++) {
        int found = img->sigq[i].tid == 0;
        for (size_t j = 0; j < img->nthreads && !found; j++) found = img->threads[j].tid == img->sigq[i].tid;
        if (!found || img->sigq[i].signo < 1 || img->sigq[i].signo > LZ_NSIG) FAIL("manifest pending signal list is malformed");
    }
    for (size_t i = 0; i < img->npacks; i++)
        if (img->packs[i].path == 0 || !str_ok(img, img->packs[i].path) || !*lz_str(img, img->packs[i].path))
            FAIL("manifest pack list is malformed");
    for (size_t i = 0; i < img->nframes; i++) {
        const struct lz_frame *f = &img->frames[i];
        if (f->pack >= img->npacks || !codec_ok(f->codec) || f->raw == 0 || f->raw % 4096 || f->raw > LZ_FRAME_MAX ||
            f->stored == 0 || f->stored > f->raw || (f->codec == LZ_CODEC_NONE && f->stored != f->raw) ||
            f->stored > img->packs[f->pack].size || f->offset > img->packs[f->pack].size - f->stored)
            FAIL("manifest frame %zu is malformed", i);
    }
    uint64_t prev_end = 0;
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *r = &img->regions[i];
        if (r->end <= r->start || (r->start & 4095) || (r->end & 4095) || r->start < prev_end)
            FAIL("manifest region %zu is malformed", i);
        prev_end = r->end;
        if (!str_ok(img, r->path)) FAIL("manifest region %zu is malformed", i);
        if ((uint64_t)r->first_extent + r->nextents > img->nextents) FAIL("manifest region %zu is malformed", i);
        uint64_t at = r->start; /* extents ascend without overlapping */
        for (uint32_t e = r->first_extent; e < r->first_extent + r->nextents; e++) {
            const struct lz_extent *x = &img->extents[e];
            if (x->addr < at || x->addr >= r->end || (x->addr & 4095) || x->length == 0 || (x->length & 4095) ||
                x->length > r->end - x->addr)
                FAIL("manifest extent %u is malformed", e);
            if (x->frame != LZ_FRAME_ZERO &&
                (x->frame >= img->nframes || (x->skip & 4095) || (uint64_t)x->skip + x->length > img->frames[x->frame].raw))
                FAIL("manifest extent %u is malformed", e);
            at = x->addr + x->length;
        }
    }
    return check_fds(img, why, whylen);
}

int lz_manifest_parse(void *buf, size_t size, struct lz_image *img, char *why, size_t whylen)
{
    memset(img, 0, sizeof *img);
    img->buf = buf;
    img->size = size;
    if (size == 0) FAIL("manifest is empty");
    if (size < 8 || memcmp(buf, LZ_MAGIC, 8) != 0) FAIL("not a Lazarus checkpoint (bad magic)");
    if (size < sizeof(struct lz_header) + sizeof(struct lz_trailer)) FAIL("manifest is truncated");
    const struct lz_header *h = buf;
    if (h->version != LZ_VERSION)
        FAIL("checkpoint format version %u is not supported (this build reads version %u)", h->version, LZ_VERSION);
    if (h->header_size != sizeof *h) FAIL("manifest header is malformed");
    if (h->manifest_size != size)
        FAIL("manifest is truncated or has trailing data (%zu bytes, expected %llu)", size,
             (unsigned long long)h->manifest_size);
    struct lz_trailer t;
    memcpy(&t, (char *)buf + size - sizeof t, sizeof t);
    if (lz_hash(buf, size - sizeof t) != t.xxh3) FAIL("manifest checksum mismatch");
    img->hdr = h;
    size_t off = sizeof *h, end = size - sizeof t;
    for (uint32_t s = 0; s < h->nsections; s++) {
        if (end - off < sizeof(struct lz_section)) FAIL("manifest section table is malformed");
        const struct lz_section *sec = (const void *)((char *)buf + off);
        off += sizeof *sec;
        if (sec->length > end - off) FAIL("manifest section table is malformed");
        const void *p = (char *)buf + off;
        size_t n = sec->length;
        switch (sec->type) {
        case LZ_SEC_PROC:
            if (n != sizeof(struct lz_proc)) FAIL("manifest process record is malformed");
            img->proc = p; break;
        case LZ_SEC_REGIONS:
            if (n % sizeof(struct lz_region)) FAIL("manifest regions are malformed");
            img->regions = p; img->nregions = n / sizeof(struct lz_region); break;
        case LZ_SEC_EXTENTS:
            if (n % sizeof(struct lz_extent)) FAIL("manifest extents are malformed");
            img->extents = p; img->nextents = n / sizeof(struct lz_extent); break;
        case LZ_SEC_FRAMES:
            if (n % sizeof(struct lz_frame)) FAIL("manifest frames are malformed");
            img->frames = p; img->nframes = n / sizeof(struct lz_frame); break;
        case LZ_SEC_FDS:
            if (n % sizeof(struct lz_fd)) FAIL("manifest descriptors are malformed");
            img->fds = p; img->nfds = n / sizeof(struct lz_fd); break;
        case LZ_SEC_PACKS:
            if (n % sizeof(struct lz_pack)) FAIL("manifest pack list is malformed");
            img->packs = p; img->npacks = n / sizeof(struct lz_pack); break;
        case LZ_SEC_STRINGS: img->strings = p; img->strings_len = n; break;
        case LZ_SEC_AUXV: img->auxv = p; img->auxv_len = n; break;
        case LZ_SEC_GROUPS:
            if (n % sizeof(uint32_t)) FAIL("manifest group list is malformed");
            img->groups = p; img->ngroups_listed = n / sizeof(uint32_t); break;
        case LZ_SEC_CHANS:
            if (n % sizeof(struct lz_chan)) FAIL("manifest pipe and socket list is malformed");
            img->chans = p; img->nchans = n / sizeof(struct lz_chan); break;
        case LZ_SEC_EVENTS:
            if (n % sizeof(struct lz_event)) FAIL("manifest event descriptor list is malformed");
            img->events = p; img->nevents = n / sizeof(struct lz_event); break;
        case LZ_SEC_SIGQUEUE:
            if (n % sizeof(struct lz_siginfo_rec)) FAIL("manifest pending signal list is malformed");
            img->sigq = p; img->nsigq = n / sizeof(struct lz_siginfo_rec); break;
        case LZ_SEC_THREADS:
            if (n % sizeof(struct lz_thread)) FAIL("manifest thread list is malformed");
            img->threads = p; img->nthreads = n / sizeof(struct lz_thread); break;
        default: break; /* unknown sections of the same version are skipped */
        }
        off += (n + 7) & ~(size_t)7;
        if (off > end) FAIL("manifest section table is malformed");
    }
    return check_contents(img, why, whylen);
}

int lz_manifest_load(const char *ckpt_dir, struct lz_image *img, char *why, size_t whylen)
{
    char path[LZ_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", ckpt_dir, LZ_MANIFEST);
    size_t len;
    void *buf = lz_read_file(path, &len);
    memset(img, 0, sizeof *img);
    if (!buf) { snprintf(why, whylen, "cannot read %s: %s", path, strerror(errno)); return -1; }
    char inner[512];
    if (lz_manifest_parse(buf, len, img, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "%s: %s", path, inner);
        lz_image_free(img);
        return -1;
    }
    /* intact, but is it this checkpoint's, of this process, of this job? */
    if (lz_place_check(ckpt_dir, "its manifest", img->hdr->job, img->hdr->index, img->proc->pid, inner, sizeof inner) < 0) {
        snprintf(why, whylen, "%s: %s", path, inner);
        lz_image_free(img);
        return -1;
    }
    return 0;
}

void lz_image_free(struct lz_image *img)
{
    free(img->buf);
    memset(img, 0, sizeof *img);
}
