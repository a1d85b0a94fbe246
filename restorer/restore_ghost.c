/* Open files that had no name any more (LZ_FD_GHOST: deleted, or O_TMPFILE):
 * a fresh nameless file (O_TMPFILE in the store) with the kept content
 * (ghost.<fd>, its checksum checked as it is read), its holes where the
 * copy has holes (the checkpoint keeps the original's: SEEK_DATA/SEEK_HOLE),
 * its permission bits and modification time.  Descriptors of one inode --
 * opened separately before it was deleted -- get one inode again, each its
 * own open file description with its flags (opened through /proc/self/fd),
 * in a process and, where processes share a description, in the job
 * (restore_tree.c makes it once). */
#include "restorer.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The inodes made in this process, by the original's device and inode. */
static struct { uint64_t dev, ino; int fd; } made[64];
static int nmade;

int restore_ghost_file(const char *content, const char *tmpdir, const struct lz_fd *f)
{
    char gp[LZ_PATH_MAX + 128];
    int in = open(content, O_RDONLY | O_CLOEXEC);
    if (in < 0) restore_fail("cannot read the kept content of descriptor %d: %s", f->fd, strerror(errno));
    int t = open(tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (t < 0) {
        snprintf(gp, sizeof gp, "%s/ghost-restore.%d.%d", tmpdir, f->fd, (int)getpid());
        t = open(gp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (t >= 0) unlink(gp);
    }
    if (t < 0) restore_fail("cannot create a nameless file for descriptor %d: %s", f->fd, strerror(errno));
    static char buf[65536], zero[65536];
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    off_t size = lseek(in, 0, SEEK_END), off = 0;
    if (size < 0) restore_fail("cannot read the kept content of descriptor %d: %s", f->fd, strerror(errno));
    while (off < size) {
        /* a hole of the copy: zeros to the checksum, a hole in the file */
        off_t data = lseek(in, off, SEEK_DATA);
        if (data < 0) data = errno == ENXIO ? size : off;
        for (; off < data; off += (off_t)(data - off < (off_t)sizeof zero ? data - off : (off_t)sizeof zero))
            XXH3_64bits_update(&st, zero, (size_t)(data - off < (off_t)sizeof zero ? data - off : (off_t)sizeof zero));
        if (off >= size) break;
        off_t hole = lseek(in, off, SEEK_HOLE);
        if (hole <= off) hole = size;
        while (off < hole) {
            ssize_t n = pread(in, buf, (size_t)(hole - off < (off_t)sizeof buf ? hole - off : (off_t)sizeof buf), off);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) restore_fail("cannot read the kept content of descriptor %d: %s", f->fd, n ? strerror(errno) : "it is short");
            XXH3_64bits_update(&st, buf, (size_t)n);
            for (ssize_t w = 0, k; w < n; w += k)
                if ((k = pwrite(t, buf + w, (size_t)(n - w), off + w)) <= 0)
                    restore_fail("cannot refill descriptor %d: %s", f->fd, k ? strerror(errno) : "short write");
            off += n;
        }
    }
    if (ftruncate(t, size) < 0) restore_fail("cannot refill descriptor %d: %s", f->fd, strerror(errno));
    if (XXH3_64bits_digest(&st) != f->xxh3) restore_fail("the kept content of descriptor %d fails its checksum", f->fd);
    close(in);
    fchmod(t, f->mode & 07777);
    struct timespec times[2] = {{0, UTIME_OMIT}, {(time_t)(f->mtime_ns / 1000000000), (long)(f->mtime_ns % 1000000000)}};
    futimens(t, times);
    return t;
}

/* A description of inode t with f's flags. */
int restore_ghost_reopen(int t, const struct lz_fd *f)
{
    char lp[64];
    snprintf(lp, sizeof lp, "/proc/self/fd/%d", t);
    int src = open(lp, (int)(f->flags & ~(uint32_t)(O_CREAT | O_EXCL | O_TRUNC | O_TMPFILE | O_DIRECTORY | O_NOFOLLOW)) | O_CLOEXEC);
    if (src < 0) restore_fail("cannot reopen descriptor %d: %s", f->fd, strerror(errno));
    return src;
}

int restore_ghost_open(struct restore_ctx *rc, const struct lz_fd *f, const char *name)
{
    int t = -1, kept = 1;
    for (int i = 0; i < nmade && t < 0; i++)
        if (made[i].dev == f->dev && made[i].ino == f->ino) t = made[i].fd;
    if (t < 0) {
        char gp[LZ_PATH_MAX + 128];
        snprintf(gp, sizeof gp, "%s/%s", rc->ckpt_dir, name);
        int ino = restore_tree_ghost_fd(f->dev, f->ino); /* the job's, made by an ancestor */
        t = ino >= 0 ? fcntl(ino, F_DUPFD_CLOEXEC, 3) : restore_ghost_file(gp, rc->ckpt_dir, f);
        if (t < 0) restore_fail("cannot reopen descriptor %d: %s", f->fd, strerror(errno));
        int p = fcntl(t, F_DUPFD_CLOEXEC, image_max_fd(&rc->img) + 16); /* above the program's numbers */
        if (p < 0) restore_fail("cannot reopen descriptor %d: %s", f->fd, strerror(errno));
        close(t);
        t = p;
        kept = nmade < (int)(sizeof made / sizeof made[0]);
        if (kept) made[nmade++] = (typeof(made[0])){f->dev, f->ino, t};
    }
    int src = restore_ghost_reopen(t, f);
    if (!kept) close(t);
    return src;
}

void restore_ghosts_seed(const struct lz_image *img, const int *shared, int base)
{
    for (size_t i = 0; i < img->nfds && nmade < (int)(sizeof made / sizeof made[0]); i++) {
        const struct lz_fd *f = &img->fds[i];
        if (f->kind != LZ_FD_GHOST || shared[i] < 0) continue;
        int seen = 0;
        for (int k = 0; k < nmade; k++) seen |= made[k].dev == f->dev && made[k].ino == f->ino;
        int t = seen ? -1 : fcntl(shared[i], F_DUPFD_CLOEXEC, base);
        if (t >= 0) made[nmade++] = (typeof(made[0])){f->dev, f->ino, t};
    }
}

void restore_ghosts_done(void)
{
    for (int i = 0; i < nmade; i++) close(made[i].fd);
    nmade = 0;
}
