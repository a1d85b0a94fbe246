/* `lazarus show`: the sections read from the processes' manifests (show.h):
 * the process tree, memory regions, descriptors, pipes and sockets. */
#include "show.h"
#include "cli.h"
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/mman.h>
#include <sys/socket.h>

static const char *region_kind(uint32_t k)
{
    switch (k) {
    case LZ_R_ANON: return "anon";
    case LZ_R_FILE_PRIVATE: return "file-private";
    case LZ_R_FILE_SHARED: return "file-shared";
    case LZ_R_SHARED_ANON: return "shared-anon";
    case LZ_R_VDSO: return "vdso";
    }
    return "unknown";
}

static const struct { uint32_t bit; const char *name; } region_flags[] = {
    {LZ_RF_HEAP, "heap"}, {LZ_RF_STACK, "stack"}, {LZ_RF_GROWSDOWN, "growsdown"}, {LZ_RF_HUGEPAGE, "hugepage"},
    {LZ_RF_NOHUGEPAGE, "nohugepage"}, {LZ_RF_DONTDUMP, "dontdump"}, {LZ_RF_DONTFORK, "dontfork"},
    {LZ_RF_WIPEONFORK, "wipeonfork"}, {LZ_RF_LOCKED, "locked"}, {LZ_RF_DROPPABLE, "droppable"},
    {LZ_RF_NORESERVE, "noreserve"}, {LZ_RF_MERGEABLE, "mergeable"}, {LZ_RF_SEQREAD, "seqread"},
    {LZ_RF_RANDREAD, "randread"}, {LZ_RF_SYSV, "sysv"},
};
#define NFLAGS (sizeof region_flags / sizeof *region_flags)

static const char *fd_kind(uint32_t k)
{
    switch (k) {
    case LZ_FD_FILE: return "file";
    case LZ_FD_DIR: return "dir";
    case LZ_FD_DEV: return "device";
    case LZ_FD_STDIO: return "stdio";
    case LZ_FD_DUP: return "dup";
    case LZ_FD_CTL: return "control";
    case LZ_FD_GHOST: return "deleted-file";
    case LZ_FD_PIPE: return "pipe";
    case LZ_FD_SOCKET: return "socketpair";
    case LZ_FD_EVENT: return "event";
    case LZ_FD_FIFO: return "fifo";
    case LZ_FD_USOCK: return "unix-socket";
    case LZ_FD_INET: return "inet";
    case LZ_FD_PTY: return "pty";
    case LZ_FD_MQUEUE: return "mqueue";
    }
    return "unknown";
}

static const char *chan_kind(uint32_t k)
{
    switch (k) {
    case LZ_CH_PIPE: return "pipe";
    case LZ_CH_STREAM: return "stream";
    case LZ_CH_DGRAM: return "dgram";
    case LZ_CH_SEQPACKET: return "seqpacket";
    case LZ_CH_FIFO: return "fifo";
    }
    return "unknown";
}

const char *show_prot(uint32_t prot, uint32_t kind, char buf[8])
{
    snprintf(buf, 8, "%c%c%c%c", prot & PROT_READ ? 'r' : '-', prot & PROT_WRITE ? 'w' : '-', prot & PROT_EXEC ? 'x' : '-',
             kind == LZ_R_FILE_SHARED || kind == LZ_R_SHARED_ANON ? 's' : 'p');
    return buf;
}

static const char *access_of(uint32_t flags)
{
    switch (flags & O_ACCMODE) {
    case O_RDONLY: return "r";
    case O_WRONLY: return "w";
    case O_RDWR: return "rw";
    }
    return "?";
}

void show_heading(struct show *s, const char *title)
{
    if (!s->json) printf("\n%s\n", title);
}

void show_tree(struct show *s)
{
    show_heading(s, "PROCESSES");
    if (s->json) jw_arr(&s->w, "tree");
    else printf("%7s %7s %7s %7s  %-6s %7s %10s  %s\n", "PID", "PPID", "PGID", "SID", "STATE", "THREADS", "MEMORY", "COMMAND");
    for (size_t k = 0; k < s->tree.nprocs; k++) {
        const struct lz_tree_proc *p = &s->tree.procs[k];
        int live = p->state == LZ_TP_LIVE;
        const struct lz_image *img = &s->imgs[k];
        char comm[17], mem[32];
        snprintf(comm, sizeof comm, "%.16s", p->comm);
        if (s->json) {
            jw_obj(&s->w, NULL);
            jw_i64(&s->w, "pid", p->pid);
            jw_i64(&s->w, "ppid", p->ppid);
            jw_i64(&s->w, "pgid", p->pgid);
            jw_i64(&s->w, "sid", p->sid);
            jw_str(&s->w, "comm", comm);
            jw_str(&s->w, "state", live ? "live" : "zombie");
            if (live) jw_null(&s->w, "exit_status"); else jw_i64(&s->w, "exit_status", p->status);
            jw_str(&s->w, "part", live ? (*p->dir ? p->dir : ".") : NULL);
            jw_u64(&s->w, "threads", live ? img->nthreads : 0);
            jw_u64(&s->w, "memory_bytes", live ? img->hdr->mem_bytes : 0);
            jw_str(&s->w, "exe", live ? lz_str(img, img->proc->exe) : NULL);
            jw_str(&s->w, "cwd", live ? lz_str(img, img->proc->cwd) : NULL);
            jw_end_obj(&s->w);
        } else {
            human_bytes(mem, sizeof mem, live ? img->hdr->mem_bytes : 0);
            printf("%7d %7d %7d %7d  %-6s %7zu %10s  %s%s\n", p->pid, p->ppid, p->pgid, p->sid, live ? "live" : "zombie",
                   live ? img->nthreads : 0, live ? mem : "-", comm, live ? "" : " (exited, not yet waited for)");
        }
    }
    if (s->json) jw_end_arr(&s->w);
}

/* Bytes of the region the checkpoint holds data for (its extents). */
static uint64_t region_data(const struct lz_image *img, const struct lz_region *r)
{
    uint64_t n = 0;
    for (uint32_t e = 0; e < r->nextents && r->first_extent + e < img->nextents; e++)
        if (img->extents[r->first_extent + e].frame != LZ_FRAME_ZERO) n += img->extents[r->first_extent + e].length;
    return n;
}

void show_regions(struct show *s)
{
    show_heading(s, "MEMORY REGIONS");
    if (s->json) jw_arr(&s->w, "regions");
    else printf("%7s  %-12s %-12s %10s %-4s  %-12s %10s  %s\n", "PID", "START", "END", "SIZE", "PROT", "KIND", "STORED", "PATH (FLAGS)");
    EACH_LIVE(s, k, img) {
        for (size_t i = 0; i < img->nregions; i++) {
            const struct lz_region *r = &img->regions[i];
            char prot[8], size[32], data[32], flags[160] = "";
            const char *path = lz_str(img, r->path);
            uint64_t stored = region_data(img, r);
            show_prot(r->prot, r->kind, prot);
            if (s->json) {
                jw_obj(&s->w, NULL);
                jw_i64(&s->w, "pid", img->proc->pid);
                jw_u64(&s->w, "start", r->start);
                jw_u64(&s->w, "end", r->end);
                jw_u64(&s->w, "size", r->end - r->start);
                jw_str(&s->w, "prot", prot);
                jw_str(&s->w, "kind", region_kind(r->kind));
                jw_arr(&s->w, "flags");
                for (size_t f = 0; f < NFLAGS; f++) if (r->flags & region_flags[f].bit) jw_str(&s->w, NULL, region_flags[f].name);
                jw_end_arr(&s->w);
                jw_str(&s->w, "path", *path ? path : NULL);
                jw_u64(&s->w, "offset", r->file_offset);
                jw_u64(&s->w, "stored_bytes", stored);
                jw_end_obj(&s->w);
            } else {
                size_t l = 0;
                for (size_t f = 0; f < NFLAGS && l < sizeof flags - 16; f++)
                    if (r->flags & region_flags[f].bit) l += (size_t)snprintf(flags + l, sizeof flags - l, "%s%s", l ? "," : "(", region_flags[f].name);
                if (l) snprintf(flags + l, sizeof flags - l, ")");
                human_bytes(size, sizeof size, r->end - r->start);
                human_bytes(data, sizeof data, stored);
                printf("%7d  %012" PRIx64 " %012" PRIx64 " %10s %-4s  %-12s %10s  %s%s%s\n", img->proc->pid, r->start, r->end, size, prot,
                       region_kind(r->kind), data, path, *path && *flags ? " " : "", flags);
            }
        }
    }
    if (s->json) jw_end_arr(&s->w);
}

/* What a descriptor names, for the text table. */
static void fd_object(const struct lz_image *img, const struct lz_fd *f, char *buf, size_t len)
{
    const char *path = lz_str(img, f->path);
    switch (f->kind) {
    case LZ_FD_DUP: snprintf(buf, len, "same open file as %d", f->dup_of); break;
    case LZ_FD_STDIO:
        if (f->launcher) snprintf(buf, len, "the launcher's %u", f->launcher - 1);
        else snprintf(buf, len, "the launcher's");
        break;
    case LZ_FD_PIPE: snprintf(buf, len, "pipe:[%" PRIu64 "]", f->ino); break;
    case LZ_FD_SOCKET: case LZ_FD_USOCK: case LZ_FD_INET: snprintf(buf, len, "socket:[%" PRIu64 "]%s%s", f->ino, *path ? " " : "", path); break;
    case LZ_FD_PTY: snprintf(buf, len, "%s%" PRIu64, f->size ? "master of /dev/pts/" : "/dev/pts/", f->ino); break;
    default: snprintf(buf, len, "%s", path);
    }
}

void show_fds(struct show *s)
{
    show_heading(s, "DESCRIPTORS");
    if (s->json) jw_arr(&s->w, "fds");
    else printf("%7s %5s  %-12s %-3s %-14s %12s  %s\n", "PID", "FD", "KIND", "RW", "FLAGS", "OFFSET", "OBJECT");
    EACH_LIVE(s, k, img) {
        for (size_t i = 0; i < img->nfds; i++) {
            const struct lz_fd *f = &img->fds[i];
            const char *path = lz_str(img, f->path);
            int cloexec = !!(f->fdflags & FD_CLOEXEC), nonblock = !!(f->flags & O_NONBLOCK), append = !!(f->flags & O_APPEND);
            if (s->json) {
                jw_obj(&s->w, NULL);
                jw_i64(&s->w, "pid", img->proc->pid);
                jw_i64(&s->w, "fd", f->fd);
                jw_str(&s->w, "kind", fd_kind(f->kind));
                jw_str(&s->w, "path", *path ? path : NULL);
                jw_str(&s->w, "access", access_of(f->flags));
                jw_bool(&s->w, "nonblock", nonblock);
                jw_bool(&s->w, "append", append);
                jw_bool(&s->w, "cloexec", cloexec);
                jw_i64(&s->w, "offset", f->offset);
                if (f->kind == LZ_FD_DUP) jw_i64(&s->w, "dup_of", f->dup_of); else jw_null(&s->w, "dup_of");
                jw_u64(&s->w, "ino", f->ino);
                jw_end_obj(&s->w);
            } else {
                char obj[LZ_PATH_MAX + 64], fl[32];
                snprintf(fl, sizeof fl, "%s%s%s", cloexec ? "cloexec " : "", nonblock ? "nonblock " : "", append ? "append" : "");
                fd_object(img, f, obj, sizeof obj);
                printf("%7d %5d  %-12s %-3s %-14s %12" PRId64 "  %s\n", img->proc->pid, f->fd, fd_kind(f->kind), access_of(f->flags), fl,
                       f->offset, obj);
            }
        }
    }
    if (s->json) jw_end_arr(&s->w);
}

/* One pipe or socket queue (c), with the descriptors of img that name it. */
static void chan_row(struct show *s, const struct lz_image *img, const struct lz_chan *c, const char *what, int32_t usock_fd,
                     const char *name)
{
    int fds[64], nf = 0;
    for (size_t i = 0; i < img->nfds && nf < 64; i++) {
        const struct lz_fd *f = &img->fds[i];
        int same = usock_fd >= 0 ? f->fd == usock_fd
                   : (f->kind == LZ_FD_PIPE || f->kind == LZ_FD_SOCKET) ? f->ino == c->ino
                   : f->kind == LZ_FD_FIFO && lz_fifo_chan(img, f) == c;
        if (same) fds[nf++] = f->fd;
    }
    if (s->json) {
        jw_obj(&s->w, NULL);
        jw_i64(&s->w, "pid", img->proc->pid);
        jw_str(&s->w, "object", what);
        jw_str(&s->w, "kind", chan_kind(c->kind));
        jw_u64(&s->w, "ino", c->ino);
        if (c->peer) jw_u64(&s->w, "peer", c->peer); else jw_null(&s->w, "peer");
        jw_u64(&s->w, "queued_bytes", c->bytes);
        jw_u64(&s->w, "messages", c->nmsgs);
        jw_u64(&s->w, "capacity", c->capacity);
        jw_str(&s->w, "name", name && *name ? name : NULL);
        jw_arr(&s->w, "fds");
        for (int i = 0; i < nf; i++) jw_i64(&s->w, NULL, fds[i]);
        jw_end_arr(&s->w);
        jw_end_obj(&s->w);
        return;
    }
    char q[32], cap[32], fl[160] = "", peer[32] = "-";
    size_t l = 0;
    for (int i = 0; i < nf && l < sizeof fl - 16; i++) l += (size_t)snprintf(fl + l, sizeof fl - l, "%s%d", i ? "," : "", fds[i]);
    human_bytes(q, sizeof q, c->bytes);
    human_bytes(cap, sizeof cap, c->capacity);
    if (c->peer) snprintf(peer, sizeof peer, "%" PRIu64, c->peer);
    printf("%7d  %-11s %-9s %10" PRIu64 " %10s %6u %10s %10s  %-10s %s\n", img->proc->pid, what, chan_kind(c->kind), c->ino, q, c->nmsgs, cap,
           peer, *fl ? fl : "-", name ? name : "");
}

static const char *inet_state(uint32_t st)
{
    switch (st) {
    case LZ_IN_UNBOUND: return "unbound";
    case LZ_IN_BOUND: return "bound";
    case LZ_IN_LISTEN: return "listen";
    case LZ_IN_CONNECTED: return "connected";
    case LZ_IN_RESET: return "reset";
    }
    return "unknown";
}

/* A TCP or UDP socket: its addresses, state, and the bytes queued to be read
 * in it (a connection inside the job; one to outside comes back reset). */
static void inet_row(struct show *s, const struct lz_image *img, const struct lz_inet *r)
{
    char la[INET6_ADDRSTRLEN] = "?", pa[INET6_ADDRSTRLEN] = "?";
    int af = r->family == AF_INET6 ? AF_INET6 : AF_INET;
    inet_ntop(af, r->local, la, sizeof la);
    inet_ntop(af, r->peer, pa, sizeof pa);
    const char *kind = r->type == SOCK_STREAM ? "tcp" : "udp";
    int has_peer = r->state == LZ_IN_CONNECTED || r->state == LZ_IN_RESET;
    if (s->json) {
        jw_obj(&s->w, NULL);
        jw_i64(&s->w, "pid", img->proc->pid);
        jw_str(&s->w, "object", "inet");
        jw_str(&s->w, "kind", kind);
        jw_u64(&s->w, "ino", 0);
        jw_null(&s->w, "peer");
        jw_u64(&s->w, "queued_bytes", r->bytes);
        jw_u64(&s->w, "messages", 0);
        jw_u64(&s->w, "capacity", r->rcvbuf);
        jw_null(&s->w, "name");
        jw_arr(&s->w, "fds");
        jw_i64(&s->w, NULL, r->fd);
        jw_end_arr(&s->w);
        jw_str(&s->w, "state", inet_state(r->state));
        jw_str(&s->w, "family", af == AF_INET6 ? "ipv6" : "ipv4");
        jw_str(&s->w, "local", la);
        jw_u64(&s->w, "local_port", r->lport);
        jw_str(&s->w, "remote", has_peer ? pa : NULL);
        jw_u64(&s->w, "remote_port", r->pport);
        if (r->peer_fd >= 0) jw_i64(&s->w, "peer_fd", r->peer_fd); else jw_null(&s->w, "peer_fd");
        jw_end_obj(&s->w);
        return;
    }
    char q[32], cap[32], fd[16], name[2 * INET6_ADDRSTRLEN + 64];
    human_bytes(q, sizeof q, r->bytes);
    human_bytes(cap, sizeof cap, r->rcvbuf);
    snprintf(fd, sizeof fd, "%d", r->fd);
    if (has_peer) snprintf(name, sizeof name, "%s %s:%u -> %s:%u", inet_state(r->state), la, r->lport, pa, r->pport);
    else snprintf(name, sizeof name, "%s %s:%u", inet_state(r->state), la, r->lport);
    printf("%7d  %-11s %-9s %10s %10s %6u %10s %10s  %-10s %s\n", img->proc->pid, "inet", kind, "-", q, 0u, cap, "-", fd, name);
}

void show_chans(struct show *s)
{
    show_heading(s, "PIPES AND SOCKETS (QUEUED: bytes in flight the restart puts back)");
    if (s->json) jw_arr(&s->w, "chans");
    else printf("%7s  %-11s %-9s %10s %10s %6s %10s %10s  %-10s %s\n", "PID", "OBJECT", "KIND", "INODE", "QUEUED", "MSGS", "CAPACITY", "PEER", "FDS", "NAME");
    EACH_LIVE(s, k, img) {
        for (size_t i = 0; i < img->nchans; i++) {
            const struct lz_chan *c = &img->chans[i];
            const char *what = c->kind == LZ_CH_PIPE ? "pipe" : c->kind == LZ_CH_FIFO ? "named-pipe" : "socketpair";
            chan_row(s, img, c, what, -1, NULL);
        }
        for (size_t i = 0; i < img->nusocks; i++) {
            const struct lz_usock *u = &img->usocks[i];
            char name[sizeof u->addr + 2] = "";
            if (u->addr_len) { /* an abstract name begins with 0: shown with '@' as ss(8) does */
                size_t n = u->addr_len < sizeof u->addr ? u->addr_len : sizeof u->addr;
                memcpy(name, u->addr, n);
                name[n] = 0;
                if (!u->addr[0] && n > 0) { name[0] = '@'; }
            }
            chan_row(s, img, &u->q, u->flags & LZ_US_LISTEN ? "listener" : "unix-socket", u->fd, name);
        }
        for (size_t i = 0; i < img->ninets; i++) inet_row(s, img, &img->inets[i]);
    }
    if (s->json) jw_end_arr(&s->w);
}
