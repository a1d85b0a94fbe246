/* Pipes and AF_UNIX socket pairs the program made (struct lz_chan), made
 * anew and refilled with the data that was in flight: a pipe of the same
 * capacity holding the same bytes, a socket pair of the same type whose
 * queues hold the same bytes (the same messages, for datagrams), written
 * from the other end.  Each descriptor record gets its own open file: the
 * pipe's two ends, further descriptions of it opened through /proc, the two
 * sockets.  All of it is parked above the program's descriptor numbers
 * until restore_descriptors moves it into place. */
#include "restorer.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int park(int fd, int base)
{
    if (fd < 0) return fd;
    int p = fcntl(fd, F_DUPFD_CLOEXEC, base);
    close(fd);
    return p;
}

/* The open-file flags a descriptor can change (F_SETFL): O_NONBLOCK matters. */
void restore_set_flags(int fd, uint32_t flags, int prog_fd)
{
    int cur = fcntl(fd, F_GETFL);
    if (cur < 0 || fcntl(fd, F_SETFL, (cur & ~(O_NONBLOCK | O_APPEND)) | (int)(flags & (O_NONBLOCK | O_APPEND))) < 0)
        restore_fail("cannot set the flags of descriptor %d: %s", prog_fd, strerror(errno));
}

static void *load(struct restore_ctx *rc, const struct lz_chan *c)
{
    char why[LZ_PATH_MAX + 512];
    void *data;
    if (lz_chan_data(rc->ckpt_dir, &rc->img, c, &data, why, sizeof why) < 0)
        restore_fail("checkpoint %llu is damaged: %s", (unsigned long long)rc->index, why);
    return data;
}

/* Any descriptor of the object, for messages. */
static int some_fd(const struct lz_image *img, uint64_t ino)
{
    for (size_t i = 0; i < img->nfds; i++)
        if ((img->fds[i].kind == LZ_FD_PIPE || img->fds[i].kind == LZ_FD_SOCKET) && img->fds[i].ino == ino) return img->fds[i].fd;
    return -1;
}

void restore_new_pipe(const struct lz_chan *c, char *data, int base, const char *what, int ends[2])
{
    int p[2];
    if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) restore_fail("cannot make %s: %s", what, strerror(errno));
    int r = park(p[0], base), w = park(p[1], base);
    if (r < 0 || w < 0) restore_fail("cannot make %s: %s", what, strerror(errno));
    int cap = fcntl(w, F_GETPIPE_SZ);
    if (cap != (int)c->capacity && (fcntl(w, F_SETPIPE_SZ, (int)c->capacity) < 0 || fcntl(w, F_GETPIPE_SZ) < (int)c->capacity))
        restore_fail("cannot give %s its size of %u bytes: %s", what, c->capacity,
                     errno == EPERM ? "above this user's limit (/proc/sys/fs/pipe-max-size)" : strerror(errno));
    for (uint64_t off = 0; off < c->bytes;) {
        ssize_t n = write(w, data + off, c->bytes - off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) restore_fail("cannot put back the %llu bytes in flight in %s: %s", (unsigned long long)c->bytes, what,
                                 n < 0 ? strerror(errno) : "short write");
        off += (uint64_t)n;
    }
    free(data);
    ends[0] = r;
    ends[1] = w;
}

void restore_pipe_ends(const struct lz_image *img, uint64_t ino, int r, int w, int base, int *src)
{
    /* the two ends go to the first reading and the first writing description;
     * any other description of the pipe is opened anew, as the program did */
    int r_used = 0, w_used = 0;
    for (size_t i = 0; i < img->nfds; i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_PIPE || f->ino != ino) continue;
        int acc = (int)(f->flags & O_ACCMODE);
        if (acc == O_RDONLY && !r_used) { src[i] = r; r_used = 1; }
        else if (acc == O_WRONLY && !w_used) { src[i] = w; w_used = 1; }
        else {
            char lp[64];
            snprintf(lp, sizeof lp, "/proc/self/fd/%d", acc == O_WRONLY ? w : r);
            src[i] = park(open(lp, acc | O_CLOEXEC | O_NONBLOCK), base);
            if (src[i] < 0) restore_fail("cannot reopen the pipe of descriptor %d: %s", f->fd, strerror(errno));
        }
        restore_set_flags(src[i], f->flags, f->fd);
    }
    if (!r_used) close(r); /* an end this process had closed */
    if (!w_used) close(w);
}

static void make_pipe(struct restore_ctx *rc, const struct lz_chan *c, int base, int *src)
{
    char what[64];
    snprintf(what, sizeof what, "the pipe of descriptor %d", some_fd(&rc->img, c->ino));
    int ends[2];
    restore_new_pipe(c, load(rc, c), base, what, ends);
    restore_pipe_ends(&rc->img, c->ino, ends[0], ends[1], base, src);
}

static int getint(int s, int opt)
{
    int v = 0;
    socklen_t l = sizeof v;
    return getsockopt(s, SOL_SOCKET, opt, &v, &l) < 0 ? -1 : v;
}

/* A buffer size as getsockopt reported it (the kernel doubles what is set);
 * beyond the system's maximum only with CAP_NET_ADMIN (the FORCE option). */
void restore_set_buf(int s, int opt, int force, uint32_t want)
{
    if (getint(s, opt) == (int)want) return;
    int half = (int)(want / 2);
    setsockopt(s, SOL_SOCKET, opt, &half, sizeof half);
    if (getint(s, opt) < (int)want) setsockopt(s, SOL_SOCKET, force, &half, sizeof half);
}

/* Queues c's data on socket `to` by sending it from `from`, its peer (whose
 * record is `sender`); data is freed. */
void restore_refill_socket(const struct lz_chan *c, char *data, const struct lz_chan *sender, int from, int to_fd)
{
    if (!data) return;
    /* the data was charged to the sender's buffer, each message with its
     * overhead: room for all of it meanwhile (set to the recorded size after) */
    uint64_t room = 2 * c->bytes + 1024ull * c->nmsgs + 65536;
    if (room < sender->sndbuf) room = sender->sndbuf;
    if (room > (uint64_t)getint(from, SO_SNDBUF)) restore_set_buf(from, SO_SNDBUF, SO_SNDBUFFORCE, room > (1u << 30) ? 1u << 30 : (uint32_t)room);
    int msgs = c->kind != LZ_CH_STREAM;
    for (uint64_t off = 0; off < c->bytes;) {
        uint32_t len = c->bytes - off > (1u << 30) ? 1u << 30 : (uint32_t)(c->bytes - off);
        if (msgs) { memcpy(&len, data + off, 4); off += 4; } /* one message per send */
        ssize_t n;
        do n = send(from, data + off, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0 || (msgs && (size_t)n != len) || (n == 0 && len))
            restore_fail("cannot put back the %llu bytes in flight to descriptor %d: %s", (unsigned long long)c->bytes,
                         to_fd, n < 0 ? strerror(errno) : "short write");
        off += (uint64_t)n;
    }
    free(data);
}

/* A socket pair like a and b, each queue refilled with its data (freed),
 * sv[0] a's end and sv[1] b's, parked at >= base; fa, fb name them in messages. */
static void fill_pair(const struct lz_chan *a, char *da, const struct lz_chan *b, char *db, int base, int fa, int fb, int sv[2])
{
    int type = a->kind == LZ_CH_STREAM ? SOCK_STREAM : a->kind == LZ_CH_DGRAM ? SOCK_DGRAM : SOCK_SEQPACKET;
    if (socketpair(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        restore_fail("cannot make the socket pair of descriptors %d and %d: %s", fa, fb, strerror(errno));
    sv[0] = park(sv[0], base);
    sv[1] = park(sv[1], base);
    if (sv[0] < 0 || sv[1] < 0) restore_fail("cannot make the socket pair of descriptors %d and %d: %s", fa, fb, strerror(errno));
    restore_refill_socket(a, da, b, sv[1], fa);
    restore_refill_socket(b, db, a, sv[0], fb);
    const struct lz_chan *cs[2] = {a, b};
    for (int k = 0; k < 2; k++) {
        const struct lz_chan *c = cs[k];
        int s = sv[k], one = 1;
        restore_set_buf(s, SO_SNDBUF, SO_SNDBUFFORCE, c->sndbuf);
        restore_set_buf(s, SO_RCVBUF, SO_RCVBUFFORCE, c->capacity);
        if (c->peek_off >= 0) setsockopt(s, SOL_SOCKET, SO_PEEK_OFF, &c->peek_off, sizeof c->peek_off);
        if (c->sockflags & LZ_CHS_PASSCRED) setsockopt(s, SOL_SOCKET, SO_PASSCRED, &one, sizeof one);
        for (int t = 0; t < 2; t++)
            if (c->reserved[t] && c->reserved[t] < (1ull << 62)) {
                struct timeval tv = {(time_t)(c->reserved[t] / 1000000), (suseconds_t)(c->reserved[t] % 1000000)};
                setsockopt(s, SOL_SOCKET, t ? SO_SNDTIMEO : SO_RCVTIMEO, &tv, sizeof tv);
            }
        /* after the refill: a shut send side refuses it */
        if (c->shutdown & 1) shutdown(s, SHUT_RD);
        if (c->shutdown & 2) shutdown(s, SHUT_WR);
    }
}

static void make_socketpair(struct restore_ctx *rc, const struct lz_chan *a, const struct lz_chan *b, int base, int *src)
{
    const struct lz_image *img = &rc->img;
    int sv[2];
    fill_pair(a, load(rc, a), b, load(rc, b), base, some_fd(img, a->ino), some_fd(img, b->ino), sv);
    const struct lz_chan *cs[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < img->nfds; i++)
            if (img->fds[i].kind == LZ_FD_SOCKET && img->fds[i].ino == cs[k]->ino) {
                src[i] = sv[k];
                restore_set_flags(sv[k], img->fds[i].flags, img->fds[i].fd);
            }
}

void restore_socket_pair(const struct lz_chan *a, const char *path_a, const struct lz_chan *b, const char *path_b, int base,
                         int sv[2])
{
    char why[LZ_PATH_MAX + 512];
    void *da, *db;
    if (lz_chan_data_path(path_a, a, &da, why, sizeof why) < 0 || lz_chan_data_path(path_b, b, &db, why, sizeof why) < 0)
        restore_fail("%s", why);
    fill_pair(a, da, b, db, base, -1, -1, sv);
}

int *restore_chans(struct restore_ctx *rc, int base)
{
    const struct lz_image *img = &rc->img;
    int *src = malloc((img->nfds + 1) * sizeof *src);
    if (!src) restore_fail("out of memory");
    for (size_t i = 0; i < img->nfds; i++) src[i] = -1;
    for (size_t k = 0; k < img->nchans; k++) {
        const struct lz_chan *c = &img->chans[k];
        if (c->kind == LZ_CH_PIPE) {
            if (!restore_tree_shared_chan(c->ino)) make_pipe(rc, c, base, src); /* else made once for the job */
            continue;
        }
        if (c->kind == LZ_CH_FIFO) {
            const char *path = NULL;
            for (size_t i = 0; i < img->nfds && !path; i++)
                if (img->fds[i].kind == LZ_FD_FIFO && img->fds[i].ino == c->ino) path = lz_str(img, img->fds[i].path);
            if (path && !restore_tree_shared_chan(c->ino)) restore_fifo_ends(img, c->ino, restore_new_fifo(c, load(rc, c), path, base), base, src);
            continue;
        }
        if (c->ino > c->peer || restore_tree_shared_chan(c->ino)) continue; /* made with its peer; or for the job */
        for (size_t j = 0; j < img->nchans; j++)
            if (img->chans[j].ino == c->peer) make_socketpair(rc, c, &img->chans[j], base, src);
    }
    return src;
}
