#include "manifest.h"
#include "place.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <unistd.h>

const char *lz_trigger_name(uint32_t t)
{
    switch (t) {
    case LZ_TRIG_INTERVAL: return "interval";
    case LZ_TRIG_REQUEST: return "request";
    case LZ_TRIG_API: return "api";
    case LZ_TRIG_SIGNAL: return "signal";
    case LZ_TRIG_WALLTIME: return "walltime";
    case LZ_TRIG_PREEMPT: return "preempt";
    case LZ_TRIG_TERM: return "sigterm";
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
        if (img->chans[i].ino == ino && img->chans[i].kind != LZ_CH_FIFO) return &img->chans[i];
    return NULL;
}

const struct lz_chan *lz_fifo_chan(const struct lz_image *img, const struct lz_fd *f)
{
    for (size_t i = 0; i < img->nchans; i++)
        if (img->chans[i].ino == f->ino && img->chans[i].kind == LZ_CH_FIFO) return &img->chans[i];
    return NULL;
}

static const struct lz_fd *find_fd(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].fd == fd) return &img->fds[i];
    return NULL;
}

static int is_watch(uint32_t kind) { return kind == LZ_EV_WATCH || kind == LZ_EV_INWATCH; }

/* The object record (not a watch) of descriptor fd, or NULL. */
static const struct lz_event *find_event(const struct lz_image *img, int32_t fd)
{
    for (size_t i = 0; i < img->nevents; i++)
        if (img->events[i].fd == fd && !is_watch(img->events[i].kind)) return &img->events[i];
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
        case LZ_EV_INOTIFY: ok = e->count >= 1 && e->count <= INT32_MAX; break;
        case LZ_EV_INWATCH: {
            const struct lz_event *in = find_event(img, e->fd);
            ok = in && in->kind == LZ_EV_INOTIFY && e->target > 0 && e->data < UINT32_MAX && str_ok(img, (uint32_t)e->data) &&
                 lz_str(img, (uint32_t)e->data)[0] == '/' && (uint64_t)e->target < in->count;
            for (size_t j = 0; ok && j < i; j++)
                ok = !(img->events[j].kind == LZ_EV_INWATCH && img->events[j].fd == e->fd && img->events[j].target == e->target);
            break;
        }
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
        if (ok && !is_watch(e->kind)) ok = find_event(img, e->fd) == e; /* one object per descriptor */
        if (!ok) FAIL("manifest event descriptor record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++)
        if (img->fds[i].kind == LZ_FD_EVENT && !find_event(img, img->fds[i].fd))
            FAIL("manifest descriptor %d is malformed", img->fds[i].fd);
    return 0;
}

/* Pseudo-terminals: every record's bytes inside the section, one record per
 * index, each naming the one master descriptor of the table. */
static int check_ptys(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nptys; i++) {
        const struct lz_pty *p = &img->ptys[i];
        int masters = 0, launcher = (p->flags & LZ_PTYF_LAUNCHER) != 0;
        for (size_t j = 0; j < img->nfds && !launcher; j++)
            masters += img->fds[j].kind == LZ_FD_PTY && img->fds[j].size == 1 && img->fds[j].ino == p->index;
        if (launcher ? p->flags != LZ_PTYF_LAUNCHER || p->index || p->to_slave || p->to_master : masters != 1)
            FAIL("manifest pseudo-terminal record %zu is malformed", i);
        if ((p->flags & ~(LZ_PTYF_PACKET | LZ_PTYF_LOCKED | LZ_PTYF_LAUNCHER | LZ_PTYF_UNOPENED)) || p->pad ||
            ((p->flags & LZ_PTYF_UNOPENED) && (p->to_slave || p->to_master)) || p->to_slave > LZ_PTY_MAX_BYTES ||
            p->to_master > LZ_PTY_MAX_BYTES || p->data > img->pty_data_len ||
            (uint64_t)p->to_slave + p->to_master > img->pty_data_len - p->data || p->sid < 0 || p->fg_pgrp < 0)
            FAIL("manifest pseudo-terminal record %zu is malformed", i);
        for (size_t j = 0; j < i; j++) /* one per pty, one for the launcher's terminal */
            if (img->ptys[j].index == p->index && (img->ptys[j].flags & LZ_PTYF_LAUNCHER) == (p->flags & LZ_PTYF_LAUNCHER))
                FAIL("manifest pseudo-terminal record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_PTY) continue;
        int found = 0; /* a master's record is here; a terminal end's may be another process's */
        for (size_t j = 0; j < img->nptys && !found; j++)
            found = img->ptys[j].index == f->ino && !(img->ptys[j].flags & LZ_PTYF_LAUNCHER);
        if (f->size > 1 || (f->size == 1 && !found) || f->ino > UINT32_MAX || (f->flags & O_ACCMODE) == 3)
            FAIL("manifest descriptor %d is malformed", f->fd);
    }
    return 0;
}

/* TCP and UDP sockets: one record per LZ_FD_INET descriptor and none other;
 * a connection's two ends name each other; data only on a connection. */
static int check_inet(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->ninets; i++) {
        const struct lz_inet *s = &img->inets[i];
        const struct lz_fd *f = find_fd(img, s->fd);
        int ok = f && f->kind == LZ_FD_INET && (s->family == AF_INET || s->family == AF_INET6) &&
                 (s->type == SOCK_STREAM || s->type == SOCK_DGRAM) && s->state >= LZ_IN_UNBOUND &&
                 s->state <= LZ_IN_RESET && !(s->opts & ~LZ_INO_ALL) && s->bytes <= LZ_CHAN_MAX_BYTES &&
                 (s->bytes ? plain_name(img, s->path) : s->path == 0) &&
                 (s->type == SOCK_STREAM || (s->state != LZ_IN_LISTEN && s->state != LZ_IN_RESET));
        int pair = ok && s->type == SOCK_STREAM && s->state == LZ_IN_CONNECTED;
        if (ok && !pair) ok = s->peer_fd == -1 && (s->bytes == 0 || s->state == LZ_IN_RESET);
        if (ok && s->peer_ino) ok = s->state == LZ_IN_RESET;
        for (size_t j = 0; ok && j < img->ninets; j++) {
            const struct lz_inet *o = &img->inets[j];
            if (j != i && o->fd == s->fd) ok = 0;
            if (pair && o->fd == s->peer_fd)
                pair = 2 * (o->peer_fd == s->fd && o->state == LZ_IN_CONNECTED && o->type == SOCK_STREAM && j != i &&
                            o->type == s->type);
            if (ok && j != i && s->bytes && o->path && !strcmp(lz_str(img, s->path), lz_str(img, o->path))) ok = 0;
        }
        if (!ok || pair == 1) FAIL("manifest network socket record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        size_t k = 0;
        while (k < img->ninets && img->inets[k].fd != img->fds[i].fd) k++;
        if (img->fds[i].kind == LZ_FD_INET && k == img->ninets) FAIL("manifest descriptor %d is malformed", img->fds[i].fd);
    }
    return 0;
}

/* POSIX timers: each id once, a known notification, a thread of the image
 * for SIGEV_THREAD_ID, at most one LZ_TM_NEXT. */
static int check_timers(struct lz_image *img, char *why, size_t whylen)
{
    int nexts = 0;
    for (size_t i = 0; i < img->ntimers; i++) {
        const struct lz_timer *t = &img->timers[i];
        int ok = t->id >= 0;
        if (t->kind == LZ_TM_NEXT) {
            ok = ok && ++nexts == 1;
        } else if (t->kind == LZ_TM_TIMER) {
            /* the clocks timer_create takes (a CPU clock is negative); a signal unless SIGEV_NONE */
            int c = t->clockid;
            ok = ok && (t->notify == 0 /* SIGEV_SIGNAL */ || t->notify == 1 /* SIGEV_NONE */ || t->notify == 4) &&
                 t->signo >= (t->notify == 1 ? 0 : 1) && t->signo <= LZ_NSIG && !(t->flags & ~LZ_TMF_ABSTIME) &&
                 t->value_ns >= 0 && t->interval_ns >= 0 && (c < 0 || (c <= 11 && c != 4 && c != 5 && c != 6 && c != 10));
            int thread = 0;
            for (size_t j = 0; j < img->nthreads; j++) thread |= img->threads[j].tid == t->tid;
            if (t->notify == 4) ok = ok && thread && t->signo > 0;
            for (size_t j = 0; ok && j < i; j++) ok = !(img->timers[j].kind == LZ_TM_TIMER && img->timers[j].id == t->id);
        } else {
            ok = 0;
        }
        if (!ok) FAIL("manifest POSIX timer record %zu is malformed", i);
    }
    return 0;
}

/* The IPC section: each record's bytes inside the section and what its kind
 * says they hold, a queue's name a plain "/name" given once; every message
 * queue descriptor names a queue of the section. */
static int check_ipc(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nipc; i++) {
        const struct lz_ipc *r = &img->ipc[i];
        int ok = r->data <= img->ipc_len && r->length <= img->ipc_len - r->data && !(r->data & 7) &&
                 !(r->flags & ~(LZ_IPCF_CREATED | LZ_IPCF_REMOVED)) && !(r->mode & ~0777u);
        const char *p = ok ? img->ipc_bytes + r->data : NULL;
        uint64_t at = 0;
        switch (ok ? r->kind : 0) {
        case LZ_IPC_SHM:
            ok = r->id >= 0 && r->size > 0 && r->name == 0 && r->length == ((r->flags & LZ_IPCF_CREATED) ? r->size : 0);
            break;
        case LZ_IPC_SEM:
            ok = r->id >= 0 && r->name == 0 && r->count > 0 && r->length == 2ull * r->count && r->flags == LZ_IPCF_CREATED;
            break;
        case LZ_IPC_MSG: case LZ_IPC_MQ: {
            int mq = r->kind == LZ_IPC_MQ;
            ok = mq ? r->flags == 0 && str_ok(img, r->name) && r->name && lz_str(img, r->name)[0] == '/' &&
                          !strchr(lz_str(img, r->name) + 1, '/') && lz_str(img, r->name)[1] && r->msgsize > 0 &&
                          r->count <= r->size
                    : r->id >= 0 && r->name == 0 && r->flags == LZ_IPCF_CREATED;
            for (uint32_t k = 0; ok && k < r->count; k++) {
                uint64_t len = 0;
                ok = r->length - at >= (mq ? 8u : 16u);
                if (ok && mq) { uint32_t l; memcpy(&l, p + at + 4, 4); len = l; ok = len <= r->msgsize; at += 8; }
                if (ok && !mq) { int64_t t; memcpy(&t, p + at, 8); memcpy(&len, p + at + 8, 8); ok = t > 0; at += 16; }
                ok = ok && len <= r->length - at;
                at += (len + 7) & ~7ull;
                ok = ok && at <= r->length;
            }
            ok = ok && at == r->length;
            break;
        }
        default: ok = 0;
        }
        for (size_t j = 0; ok && j < i; j++) {
            const struct lz_ipc *o = &img->ipc[j];
            ok = o->kind != r->kind || (r->kind == LZ_IPC_MQ ? strcmp(lz_str(img, o->name), lz_str(img, r->name)) != 0 : o->id != r->id);
        }
        if (!ok) FAIL("manifest IPC record %zu is malformed", i);
    }
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        int found = f->kind != LZ_FD_MQUEUE;
        for (size_t k = 0; !found && k < img->nipc; k++)
            found = img->ipc[k].kind == LZ_IPC_MQ && !strcmp(lz_str(img, img->ipc[k].name), lz_str(img, f->path));
        if (!found || (f->kind == LZ_FD_MQUEUE && (f->flags & O_ACCMODE) == 3)) FAIL("manifest descriptor %d is malformed", f->fd);
    }
    /* every System V region names a segment of the section */
    for (size_t i = 0; i < img->nregions; i++) {
        const struct lz_region *g = &img->regions[i];
        int found = !(g->flags & LZ_RF_SYSV);
        if (!found && g->kind != LZ_R_SHARED_ANON) FAIL("manifest region %zu is malformed", i);
        for (size_t k = 0; !found && k < img->nipc; k++)
            found = img->ipc[k].kind == LZ_IPC_SHM && (uint64_t)img->ipc[k].id == g->file_ino;
        if (!found) FAIL("manifest region %zu is malformed", i);
    }
    return 0;
}

/* The descriptor table, and the pipes and socket pairs its descriptors
 * name: every record the restorer follows (dup_of, ino, peer) exists. */
static int check_fds(struct lz_image *img, char *why, size_t whylen)
{
    for (size_t i = 0; i < img->nchans; i++) {
        const struct lz_chan *c = &img->chans[i];
        int sock = c->kind == LZ_CH_STREAM || c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET;
        int pipe = c->kind == LZ_CH_PIPE || c->kind == LZ_CH_FIFO; /* (a named pipe's data is a pipe's) */
        int msgs = c->kind == LZ_CH_DGRAM || c->kind == LZ_CH_SEQPACKET;
        if ((!pipe && !sock) || c->ino == 0 || c->bytes > LZ_CHAN_MAX_BYTES ||
            (c->bytes ? !plain_name(img, c->path) : c->path != 0) || (msgs ? c->bytes < 4ull * c->nmsgs : c->nmsgs != 0) ||
            c->capacity == 0 || (pipe && (c->bytes > c->capacity || c->peer || c->sndbuf || c->shutdown)) ||
            (sock && (c->sndbuf == 0 || c->shutdown > 3 || c->peek_off < -1)) || c->sockflags & ~(LZ_CHS_PASSCRED | LZ_CHS_REMOTE) ||
            (!sock && c->sockflags))
            FAIL("manifest pipe or socket record %zu is malformed", i);
        for (size_t j = 0; j < i; j++)
            if (img->chans[j].ino == c->ino && (img->chans[j].kind == LZ_CH_FIFO) == (c->kind == LZ_CH_FIFO))
                FAIL("manifest pipe or socket record %zu is malformed", i);
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
        if (f->kind == LZ_FD_FIFO && (!lz_fifo_chan(img, f) || (f->flags & O_ACCMODE) == 3 || lz_str(img, f->path)[0] != '/'))
            FAIL("manifest descriptor %d is malformed", f->fd);
    }
    if (check_events(img, why, whylen) < 0 || lz_usocks_valid(img, why, whylen) < 0) return -1;
    if (check_ptys(img, why, whylen) < 0 || check_inet(img, why, whylen) < 0) return -1;
    if (check_timers(img, why, whylen) < 0) return -1;
    if (check_ipc(img, why, whylen) < 0) return -1;
    /* a socket is one open file: exactly one descriptor opens it (others are dups) */
    for (size_t i = 0; i < img->nchans; i++) {
        const struct lz_chan *c = &img->chans[i];
        int n = 0;
        for (size_t j = 0; j < img->nfds; j++)
            n += c->kind == LZ_CH_FIFO ? img->fds[j].kind == LZ_FD_FIFO && img->fds[j].ino == c->ino
                                       : (img->fds[j].kind == LZ_FD_PIPE || img->fds[j].kind == LZ_FD_SOCKET) && img->fds[j].ino == c->ino;
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

/* How each known section is read into struct lz_image (docs/format.md). */
enum shape {
    SH_ONE,     /* exactly one record */
    SH_ARRAY,   /* records back to back */
    SH_COUNTED, /* u64 count, the records, then bytes they point into */
    SH_BYTES,   /* bytes, no records (record size 0) */
};
struct sec_kind {
    uint32_t type;
    uint8_t shape;
    uint32_t size;     /* this build's record size */
    size_t at, count;  /* offsetof(struct lz_image, ...) of the records and their count (SH_BYTES: bytes, length) */
    size_t bytes, len; /* SH_COUNTED: of the bytes after the records and their length */
    const char *bad;   /* "manifest <bad> malformed" */
};
#define IMG(f) offsetof(struct lz_image, f)
static const struct sec_kind kinds[] = {
    {LZ_SEC_PROC, SH_ONE, sizeof(struct lz_proc), IMG(proc), 0, 0, 0, "process record is"},
    {LZ_SEC_REGIONS, SH_ARRAY, sizeof(struct lz_region), IMG(regions), IMG(nregions), 0, 0, "regions are"},
    {LZ_SEC_EXTENTS, SH_ARRAY, sizeof(struct lz_extent), IMG(extents), IMG(nextents), 0, 0, "extents are"},
    {LZ_SEC_FRAMES, SH_ARRAY, sizeof(struct lz_frame), IMG(frames), IMG(nframes), 0, 0, "frames are"},
    {LZ_SEC_FDS, SH_ARRAY, sizeof(struct lz_fd), IMG(fds), IMG(nfds), 0, 0, "descriptors are"},
    {LZ_SEC_PACKS, SH_ARRAY, sizeof(struct lz_pack), IMG(packs), IMG(npacks), 0, 0, "pack list is"},
    {LZ_SEC_STRINGS, SH_BYTES, 0, IMG(strings), IMG(strings_len), 0, 0, "string table is"},
    {LZ_SEC_AUXV, SH_BYTES, 0, IMG(auxv), IMG(auxv_len), 0, 0, "auxiliary vector is"},
    {LZ_SEC_GROUPS, SH_ARRAY, sizeof(uint32_t), IMG(groups), IMG(ngroups_listed), 0, 0, "group list is"},
    {LZ_SEC_CHANS, SH_ARRAY, sizeof(struct lz_chan), IMG(chans), IMG(nchans), 0, 0, "pipe and socket list is"},
    {LZ_SEC_EVENTS, SH_ARRAY, sizeof(struct lz_event), IMG(events), IMG(nevents), 0, 0, "event descriptor list is"},
    {LZ_SEC_PTYS, SH_COUNTED, sizeof(struct lz_pty), IMG(ptys), IMG(nptys), IMG(pty_data), IMG(pty_data_len),
     "pseudo-terminal list is"},
    {LZ_SEC_USOCKS, SH_ARRAY, sizeof(struct lz_usock), IMG(usocks), IMG(nusocks), 0, 0, "local socket list is"},
    {LZ_SEC_INET, SH_ARRAY, sizeof(struct lz_inet), IMG(inets), IMG(ninets), 0, 0, "network socket list is"},
    {LZ_SEC_TIMERS, SH_ARRAY, sizeof(struct lz_timer), IMG(timers), IMG(ntimers), 0, 0, "POSIX timer list is"},
    {LZ_SEC_IPC, SH_COUNTED, sizeof(struct lz_ipc), IMG(ipc), IMG(nipc), IMG(ipc_bytes), IMG(ipc_len), "IPC section is"},
    {LZ_SEC_SIGQUEUE, SH_ARRAY, sizeof(struct lz_siginfo_rec), IMG(sigq), IMG(nsigq), 0, 0, "pending signal list is"},
    {LZ_SEC_EXCLUDE, SH_ARRAY, sizeof(struct lz_exclusion), IMG(excl), IMG(nexcl), 0, 0, "exclusion list is"},
    {LZ_SEC_THREADS, SH_ARRAY, sizeof(struct lz_thread), IMG(threads), IMG(nthreads), 0, 0, "thread list is"},
};
#define LZ_RECORD_MAX (1u << 20) /* a record size beyond any sane layout: damage */

static void set_ptr(struct lz_image *img, size_t at, const void *p) { memcpy((char *)img + at, &p, sizeof p); }
static void set_size(struct lz_image *img, size_t at, size_t n) { memcpy((char *)img + at, &n, sizeof n); }

/* n records of rs bytes at p, as records of this build's size: the same
 * bytes when the sizes agree, else a copy of each record's known prefix
 * (owned by img).  NULL when out of memory. */
static const void *records(struct lz_image *img, const void *p, size_t n, uint32_t rs, uint32_t known)
{
    if (rs == known) return p;
    if (img->nowned == sizeof img->owned / sizeof img->owned[0]) return NULL;
    char *out = malloc(n ? n * known : 1);
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) memcpy(out + i * known, (const char *)p + i * rs, known);
    img->owned[img->nowned++] = out;
    return out;
}

#define REFUSE(...) do { snprintf(why, whylen, __VA_ARGS__); return LZ_UNREADABLE; } while (0)

/* The header: this build's version or an older one it reads, of this byte
 * order; img->hdr is it, a version-5 header completed with what every
 * version-5 build was (x86_64, 4 KiB pages, little-endian). */
static int read_header(const void *buf, size_t size, struct lz_image *img, char *why, size_t whylen)
{
    const struct lz_header *h = buf;
    uint32_t v = h->version;
    struct lz_trailer t;
    memcpy(&t, (const char *)buf + size - sizeof t, sizeof t);
    /* a version this build does not read is said as such only of an intact
     * file: a flipped bit in the version field is damage */
    if (v < LZ_VERSION_MIN || v > LZ_VERSION) {
        uint64_t hv = lz_hash(buf, size - sizeof t);
        if (hv == __builtin_bswap64(t.xxh3) && __builtin_bswap32(v) <= LZ_VERSION)
            REFUSE("the checkpoint was written on a machine of the other byte order (this one is little-endian)");
        if (hv != t.xxh3)
            FAIL("manifest checksum mismatch (its version field reads %u; this build reads versions %u to %u)", v,
                 LZ_VERSION_MIN, LZ_VERSION);
    }
    if (v > LZ_VERSION)
        REFUSE("checkpoint format version %u was written by a newer Lazarus (this build reads versions %u to %u)", v,
               LZ_VERSION_MIN, LZ_VERSION);
    if (v < LZ_VERSION_MIN)
        REFUSE("checkpoint format version %u is too old for this build (it reads versions %u to %u): restart it with "
               "the Lazarus that wrote it", v, LZ_VERSION_MIN, LZ_VERSION);
    size_t hs = h->header_size;
    if (v == 5 ? hs != LZ_HEADER_V5_SIZE : hs < sizeof *h || hs % 8 || hs > size - sizeof(struct lz_trailer))
        FAIL("manifest header is malformed");
    struct lz_header *c = NULL; /* a copy, when the header is not this build's size */
    if (hs == sizeof *h) {
        img->hdr = h;
    } else { /* version 5's shorter header, or a newer longer one: the part this build knows */
        c = calloc(1, sizeof *c);
        if (!c) FAIL("out of memory reading the manifest");
        memcpy(c, buf, hs < sizeof *c ? hs : sizeof *c);
        img->owned[img->nowned++] = c;
        img->hdr = c;
    }
    if (v == 5) { /* (shorter: always a copy) */
        c->machine = LZ_MACHINE_X86_64;
        c->page_size = LZ_PAGE_SIZE;
        c->byte_order = LZ_BYTE_ORDER;
    } else if (img->hdr->byte_order == __builtin_bswap32(LZ_BYTE_ORDER)) {
        REFUSE("the checkpoint was written on a machine of the other byte order (this one is little-endian)");
    } else if (img->hdr->byte_order != LZ_BYTE_ORDER || img->hdr->page_size == 0) {
        FAIL("manifest header is malformed");
    }
    return 0;
}

/* One section of a known kind: where its records are, how many; 0, -1 (damage) or LZ_UNREADABLE. */
static int read_section(struct lz_image *img, const struct sec_kind *k, const struct lz_section *sec, const char *p,
                        char *why, size_t whylen)
{
    size_t n = sec->length;
    uint32_t rs = img->hdr->version == 5 ? k->size : sec->record_size; /* version 5: always this build's sizes */
    if (k->shape == SH_BYTES) {
        if (rs != 0) FAIL("manifest %s malformed", k->bad);
        set_ptr(img, k->at, p);
        set_size(img, k->count, n);
        return 0;
    }
    if (rs == 0 || rs > LZ_RECORD_MAX) FAIL("manifest %s malformed", k->bad);
    if (rs < k->size)
        FAIL("manifest %s malformed (records of %u bytes, shorter than the %u of this version)", k->bad, rs, k->size);
    size_t cnt;
    const char *rec = p;
    if (k->shape == SH_COUNTED) {
        uint64_t c;
        if (n < sizeof c) FAIL("manifest %s malformed", k->bad);
        memcpy(&c, p, sizeof c);
        if (c > (n - sizeof c) / rs) FAIL("manifest %s malformed", k->bad);
        cnt = (size_t)c;
        rec = p + sizeof c;
        set_ptr(img, k->bytes, rec + cnt * rs);
        set_size(img, k->len, n - sizeof c - cnt * rs);
    } else {
        if (n % rs || (k->shape == SH_ONE && n != rs)) FAIL("manifest %s malformed", k->bad);
        cnt = n / rs;
    }
    const void *r = records(img, rec, cnt, rs, k->size);
    if (!r) FAIL("out of memory reading the manifest");
    set_ptr(img, k->at, r);
    if (k->shape != SH_ONE) set_size(img, k->count, cnt);
    return 0;
}

int lz_manifest_parse(void *buf, size_t size, struct lz_image *img, char *why, size_t whylen)
{
    memset(img, 0, sizeof *img);
    img->buf = buf;
    img->size = size;
    if (size == 0) FAIL("manifest is empty");
    if (size < 8 || memcmp(buf, LZ_MAGIC, 8) != 0) FAIL("not a Lazarus checkpoint (bad magic)");
    if (size < LZ_HEADER_V5_SIZE + sizeof(struct lz_trailer)) FAIL("manifest is truncated");
    int rc = read_header(buf, size, img, why, whylen);
    if (rc < 0) return rc;
    const struct lz_header *h = img->hdr;
    if (h->manifest_size != size)
        FAIL("manifest is truncated or has trailing data (%zu bytes, expected %llu)", size,
             (unsigned long long)h->manifest_size);
    struct lz_trailer t;
    memcpy(&t, (char *)buf + size - sizeof t, sizeof t);
    if (lz_hash(buf, size - sizeof t) != t.xxh3) FAIL("manifest checksum mismatch");
    size_t off = h->header_size, end = size - sizeof t;
    for (uint32_t s = 0; s < h->nsections; s++) {
        if (end - off < sizeof(struct lz_section)) FAIL("manifest section table is malformed");
        const struct lz_section *sec = (const void *)((char *)buf + off);
        off += sizeof *sec;
        if (sec->length > end - off) FAIL("manifest section table is malformed");
        uint32_t type = sec->type & ~LZ_SEC_MUST;
        const struct sec_kind *k = NULL;
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0] && !k; i++)
            if (kinds[i].type == type) k = &kinds[i];
        if (k) {
            if ((rc = read_section(img, k, sec, (char *)buf + off, why, whylen)) < 0) return rc;
        } else if (sec->type & LZ_SEC_MUST) {
            REFUSE("the checkpoint was written by a newer Lazarus: section %u it must understand", type);
        } /* else: a section of a newer build an older reader may skip */
        off += (sec->length + 7) & ~(size_t)7;
        if (off > end) FAIL("manifest section table is malformed");
    }
    for (size_t i = 0; i < img->nexcl; i++) { /* sorted, disjoint, of a known kind */
        const struct lz_exclusion *e = &img->excl[i];
        if (e->start >= e->end || (e->kind != LZ_EXCL_DEAD && e->kind != LZ_EXCL_READONLY) ||
            (i && e->start < img->excl[i - 1].end))
            FAIL("manifest exclusion list is malformed (record %zu)", i);
    }
    return check_contents(img, why, whylen);
}

/* The machine the checkpoint was taken on is this one's kind: 0, or
 * LZ_UNREADABLE and a line naming what differs. */
int lz_image_fits_host(const struct lz_image *img, char *why, size_t whylen)
{
    const struct lz_header *h = img->hdr;
    long page = sysconf(_SC_PAGESIZE);
    if (h->machine != LZ_MACHINE_X86_64)
        REFUSE("the checkpoint was taken on another architecture (ELF machine %u; this one is x86_64, 62)", h->machine);
    if ((long)h->page_size != page)
        REFUSE("the checkpoint was taken with a page size of %u bytes (this machine's: %ld)", h->page_size, page);
    return 0;
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
    int rc = lz_manifest_parse(buf, len, img, inner, sizeof inner);
    if (rc < 0) {
        snprintf(why, whylen, "%s: %s", path, inner);
        lz_image_free(img);
        return rc;
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
    for (size_t i = 0; i < img->nowned; i++) free(img->owned[i]);
    memset(img, 0, sizeof *img);
}
