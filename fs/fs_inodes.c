/* The inode table: a FUSE node id is the address of a struct fs_inode,
 * which holds an O_PATH descriptor of the real object (under the mount, so
 * no path is ever resolved through the mount itself).  Looked up by device
 * and inode number, so two names of one file are one node. */
#include "fsd.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NBUCKETS 65536
static struct fs_inode *table[NBUCKETS];
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t bucket(dev_t dev, ino_t ino) { return (size_t)((ino * 0x9E3779B97F4A7C15ull) ^ dev) % NBUCKETS; }

struct fs_inode *fs_inode(fuse_ino_t ino)
{
    if (ino == FUSE_ROOT_ID) return &fsd.root;
    return (struct fs_inode *)(uintptr_t)ino;
}

void fs_fdpath(char *buf, size_t len, int fd) { snprintf(buf, len, "/proc/self/fd/%d", fd); }

int fs_lookup_entry(struct fs_inode *parent, const char *name, struct fuse_entry_param *e)
{
    memset(e, 0, sizeof *e);
    e->attr_timeout = fsd.buffer ? 0 : 1.0; /* buffer mode: the size depends on who asks */
    e->entry_timeout = 1.0;
    int fd = openat(parent->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -errno;
    if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) { int r = -errno; close(fd); return r; }
    pthread_mutex_lock(&table_lock);
    size_t b = bucket(e->attr.st_dev, e->attr.st_ino);
    struct fs_inode *n = table[b];
    while (n && !(n->dev == e->attr.st_dev && n->ino == e->attr.st_ino)) n = n->next;
    if (n) {
        n->nlookup++;
        close(fd);
    } else if (e->attr.st_dev == fsd.root.dev && e->attr.st_ino == fsd.root.ino) {
        n = &fsd.root; /* ".." of a top entry */
        close(fd);
    } else {
        n = calloc(1, sizeof *n);
        if (!n) { pthread_mutex_unlock(&table_lock); close(fd); return -ENOMEM; }
        n->fd = fd;
        pthread_mutex_init(&n->times, NULL);
        n->dev = e->attr.st_dev;
        n->ino = e->attr.st_ino;
        n->nlookup = 1;
        n->next = table[b];
        table[b] = n;
    }
    pthread_mutex_unlock(&table_lock);
    e->ino = n == &fsd.root ? FUSE_ROOT_ID : (fuse_ino_t)(uintptr_t)n;
    return 0;
}

void fs_forget_one(fuse_ino_t ino, uint64_t count)
{
    struct fs_inode *n = fs_inode(ino);
    if (n == &fsd.root) return;
    pthread_mutex_lock(&table_lock);
    if (count > n->nlookup) count = n->nlookup;
    n->nlookup -= count;
    if (!n->nlookup) {
        struct fs_inode **p = &table[bucket(n->dev, n->ino)];
        while (*p && *p != n) p = &(*p)->next;
        if (*p) *p = n->next;
        close(n->fd);
        pthread_mutex_destroy(&n->times);
        free(n);
    }
    pthread_mutex_unlock(&table_lock);
}
