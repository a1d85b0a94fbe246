/* inotify: the path of every watch, which the kernel does not say.
 *
 * fdinfo lists an inotify descriptor's watches by number (wd), inode,
 * device and mask; a restart needs paths to add them again.  The wrappers
 * below keep, per descriptor and wd, the path inotify_add_watch was given
 * (made absolute), its mask and the inode it named; the checkpoint takes a
 * watch's path only if that path still names the watched inode, and fails,
 * naming the descriptor and the watch, otherwise (renamed or added before
 * the runtime ran).  It also keeps the wd the kernel gave last per
 * descriptor: the kernel gives them in a cycle (idr_alloc_cyclic from 1),
 * so the next one is that plus one, which a restart keeps
 * (restorer/restore_events.c).  Events still queued at the checkpoint and
 * those of the downtime are lost (LIMITS.md). */
#include "rt.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

struct rt_inwatch { int fd, wd; uint32_t mask; uint64_t dev, ino; char *path; };
struct rt_ingroup { int fd, last_wd; };

static struct rt_inwatch *watches;
static size_t nwatches, capwatches;
static struct rt_ingroup groups[256];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct rt_ingroup *group_of(int fd, int make)
{
    struct rt_ingroup *free_slot = NULL;
    for (size_t i = 0; i < sizeof groups / sizeof *groups; i++) {
        if (groups[i].fd == fd + 1) return &groups[i];
        if (!groups[i].fd && !free_slot) free_slot = &groups[i];
    }
    if (make && free_slot) { free_slot->fd = fd + 1; free_slot->last_wd = 0; }
    return make ? free_slot : NULL;
}

/* Frees the entries of descriptors made anew (fd -1), with the lock held, not
 * busy: a thread stopped half-way leaves at worst an entry twice. */
static void compact(void)
{
    for (size_t i = nwatches; i-- > 0;)
        if (watches[i].fd < 0) {
            free(watches[i].path);
            watches[i] = watches[nwatches - 1];
            nwatches--;
        }
}

/* Each wrapper takes the lock, then is busy (rt_enter) around the system
 * call and the table's update only, with no other lock or allocation: a
 * checkpoint never sees a watch the table does not know yet, and a busy
 * thread never waits for a lock a stopped thread may hold. */

/* A new inotify object at fd: whatever was known of an older one there goes. */
static int made(int fd)
{
    if (fd < 0) return fd;
    pthread_mutex_lock(&lock);
    compact();
    rt_enter();
    for (size_t i = 0; i < nwatches; i++)
        if (watches[i].fd == fd) watches[i].fd = -1;
    struct rt_ingroup *g = group_of(fd, 1);
    if (g) g->last_wd = 0;
    rt_leave();
    pthread_mutex_unlock(&lock);
    return fd;
}

RT_API int inotify_init(void)
{
    REAL(int, inotify_init, void);
    return made(real_inotify_init());
}

RT_API int inotify_init1(int flags)
{
    REAL(int, inotify_init1, int);
    return made(real_inotify_init1(flags));
}

static char *absolute(const char *path)
{
    if (path[0] == '/') return strdup(path);
    char cwd[LZ_PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return NULL;
    size_t n = strlen(cwd) + strlen(path) + 2;
    char *p = malloc(n);
    if (p) rt_fmt(p, n, "%s/%s", strcmp(cwd, "/") ? cwd : "", path);
    return p;
}

RT_API int inotify_add_watch(int fd, const char *path, uint32_t mask)
{
    REAL(int, inotify_add_watch, int, const char *, uint32_t);
    char *abs = absolute(path);
    pthread_mutex_lock(&lock);
    if (nwatches == capwatches) { /* room for one more, before the busy part */
        size_t cap = capwatches ? 2 * capwatches : 64;
        struct rt_inwatch *nw = realloc(watches, cap * sizeof *nw);
        if (nw) { watches = nw; capwatches = cap; }
    }
    rt_enter();
    int wd = real_inotify_add_watch(fd, path, mask);
    int e = errno;
    struct stat st;
    long sr = wd >= 0 ? lz_sc4(SYS_newfstatat, AT_FDCWD, path, &st, (mask & IN_DONT_FOLLOW) ? AT_SYMLINK_NOFOLLOW : 0) : -1;
    if (sr == 0 && abs) {
        struct rt_inwatch *w = NULL;
        for (size_t i = 0; i < nwatches && !w; i++)
            if (watches[i].fd == fd && watches[i].wd == wd) w = &watches[i];
        if (!w) {
            struct rt_ingroup *g = group_of(fd, 1);
            if (g) g->last_wd = wd; /* a new wd: the kernel's cycle moved on */
            if (nwatches < capwatches) {
                w = &watches[nwatches++];
                memset(w, 0, sizeof *w);
                w->fd = fd;
                w->wd = wd;
            }
        }
        if (w) {
            uint32_t m = mask & ~(uint32_t)(IN_MASK_ADD | IN_MASK_CREATE);
            w->mask = (mask & IN_MASK_ADD) ? w->mask | m : m;
            w->dev = st.st_dev;
            w->ino = st.st_ino;
            char *old = w->path;
            w->path = abs;
            abs = old; /* freed below, outside the busy part */
        }
    }
    rt_leave();
    pthread_mutex_unlock(&lock);
    free(abs);
    errno = e;
    return wd;
}

RT_API int inotify_rm_watch(int fd, int wd)
{
    REAL(int, inotify_rm_watch, int, int);
    char *gone = NULL;
    pthread_mutex_lock(&lock);
    rt_enter();
    int r = real_inotify_rm_watch(fd, wd);
    int e = errno;
    if (r == 0)
        for (size_t i = 0; i < nwatches; i++)
            if (watches[i].fd == fd && watches[i].wd == wd) {
                gone = watches[i].path;
                watches[i] = watches[--nwatches];
                break;
            }
    rt_leave();
    pthread_mutex_unlock(&lock);
    free(gone);
    errno = e;
    return r;
}

/* ---- in the pause ---- */

static int hexfield(const char *s, const char *name, uint64_t *out)
{
    const char *p = strstr(s, name);
    const char *nl = strchr(s, '\n');
    if (!p || (nl && p > nl)) return -1;
    p += strlen(name);
    uint64_t v = 0;
    int any = 0;
    for (;; p++, any = 1) {
        int d = *p >= '0' && *p <= '9' ? *p - '0' : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10 : 99;
        if (d >= 16) break;
        v = v * 16 + (uint64_t)d;
    }
    if (!any) return -1;
    *out = v;
    return 0;
}

/* The kernel's dev_t (fdinfo's sdev: major << 20 | minor) as stat's st_dev. */
static uint64_t user_dev(uint64_t k)
{
    uint64_t major = k >> 20, minor = k & 0xfffff;
    return ((major & 0xfffff000ull) << 32) | ((major & 0xfffull) << 8) | ((minor & 0xffffff00ull) << 12) | (minor & 0xffull);
}

size_t rt_inotify_watches(const char *fdinfo)
{
    size_t n = 0;
    for (const char *l = strstr(fdinfo, "inotify wd:"); l; l = strstr(l + 11, "inotify wd:")) n++;
    return n;
}

/* The watches of inotify descriptor fd (its fdinfo in buf): one LZ_EV_INWATCH
 * each after the object's record (ck->events[obj]), which gets the next wd. */
int rt_capture_inotify(struct rt_ckpt *ck, int fd, const char *buf, size_t obj, size_t cap)
{
    int maxwd = 0;
    for (const char *l = strstr(buf, "inotify wd:"); l; l = strstr(l + 11, "inotify wd:")) {
        uint64_t wd, ino, sdev, kmask;
        if (hexfield(l, "wd:", &wd) < 0 || hexfield(l, "ino:", &ino) < 0 || hexfield(l, "sdev:", &sdev) < 0 ||
            hexfield(l, "mask:", &kmask) < 0) {
            rt_fmt(ck->err, sizeof ck->err, "cannot read the watches of inotify descriptor %d", fd);
            return -1;
        }
        /* wd is printed in decimal: read again */
        const char *p = strstr(l, "wd:") + 3;
        wd = 0;
        while (*p >= '0' && *p <= '9') wd = wd * 10 + (uint64_t)(*p++ - '0');
        uint64_t dev = user_dev(sdev);
        /* added through this descriptor, or through another of the same object (a dup, since closed):
         * the same wd and inode name the same watch, whose mask is then the kernel's */
        const struct rt_inwatch *w = NULL;
        for (int exact = 1; exact >= 0 && !w; exact--)
            for (size_t i = 0; i < nwatches && !w; i++)
                if ((!exact || watches[i].fd == fd) && watches[i].wd == (int)wd && watches[i].ino == ino &&
                    watches[i].dev == dev)
                    w = &watches[i];
        int exact = w && w->fd == fd;
        struct stat st;
        long r = -1;
        if (w && w->path)
            r = lz_sc4(SYS_newfstatat, AT_FDCWD, w->path, &st, (w->mask & IN_DONT_FOLLOW) ? AT_SYMLINK_NOFOLLOW : 0);
        if (r != 0 || st.st_ino != ino || st.st_dev != dev) {
            if (w && w->path)
                rt_fmt(ck->err, sizeof ck->err, "inotify descriptor %d watches (wd %d) %s as it was when the watch was "
                       "added, which has since been renamed or deleted: remove the watch and add it again by its "
                       "present name", fd, (int)wd, w->path);
            else
                rt_fmt(ck->err, sizeof ck->err, "inotify descriptor %d watches (wd %d) inode %llu, whose path Lazarus "
                       "does not know (added by a raw system call or before the runtime ran): remove the watch first",
                       fd, (int)wd, (unsigned long long)ino);
            return -1;
        }
        if (ck->nevents == cap) { rt_fmt(ck->err, sizeof ck->err, "too many inotify watches"); return -1; }
        ck->events[ck->nevents++] = (struct lz_event){.fd = fd, .kind = LZ_EV_INWATCH, .target = (int32_t)wd,
                                                      .mask = exact && w->mask ? w->mask : kmask,
                                                      .data = strings_add(&ck->strings, w->path),
                                                      .count = ino, .value_ns = (int64_t)dev};
        if ((int)wd > maxwd) maxwd = (int)wd;
    }
    struct rt_ingroup *g = group_of(fd, 0);
    ck->events[obj].count = (uint64_t)((g && g->last_wd >= maxwd ? g->last_wd : maxwd) + 1);
    return 0;
}
