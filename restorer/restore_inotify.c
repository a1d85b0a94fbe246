/* An inotify descriptor's watches added again by path (after the rollback:
 * the job's files are as they were at the checkpoint), each with the number
 * (wd) the program knows.  The kernel gives wds in a cycle from 1
 * (idr_alloc_cyclic): the watches are added in increasing wd order, and a wd
 * lower than wanted is removed and the path added again until the cycle
 * reaches it; then a placeholder (on "/", if this descriptor does not watch
 * it) moves the cycle to the wd the program would get next.  The IN_IGNORED
 * events those removals queued are read away before the program runs. */
#include "restorer.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/inotify.h>
#include <unistd.h>

#ifndef IN_MASK_CREATE
#define IN_MASK_CREATE 0x10000000
#endif
#define MAX_PLACEHOLDERS (1 << 20)

/* The watch of descriptor fd with the lowest wd above prev, or NULL. */
static const struct lz_event *next_watch(const struct lz_image *img, int fd, int prev)
{
    const struct lz_event *lo = NULL;
    for (size_t i = 0; i < img->nevents; i++) {
        const struct lz_event *w = &img->events[i];
        if (w->kind == LZ_EV_INWATCH && w->fd == fd && w->target > prev && (!lo || w->target < lo->target)) lo = w;
    }
    return lo;
}

/* Adds path until the kernel gives at least want; the wd it gave, or -1. */
static int add_reaching(int fd, const char *path, uint32_t mask, int want, int *removed)
{
    int got = inotify_add_watch(fd, path, mask);
    for (int n = 0; got >= 0 && got < want && n < MAX_PLACEHOLDERS; n++) {
        inotify_rm_watch(fd, got);
        (*removed)++;
        got = inotify_add_watch(fd, path, mask);
    }
    return got;
}

void restore_inotify_watches(const struct lz_image *img, const struct lz_event *e)
{
    int fd = e->fd, last = 0, removed = 0;
    for (const struct lz_event *w = next_watch(img, fd, 0); w; w = next_watch(img, fd, w->target)) {
        const char *path = lz_str(img, (uint32_t)w->data);
        int got = add_reaching(fd, path, (uint32_t)w->mask, w->target, &removed);
        if (got < 0)
            restore_fail("inotify descriptor %d cannot watch %s again: %s", fd, path, strerror(errno));
        if (got != w->target)
            restore_fail("cannot give inotify descriptor %d's watch of %s its number %d back (the kernel gave %d)", fd,
                         path, w->target, got);
        last = got;
    }
    if ((int)e->count > last + 1) {
        int got = add_reaching(fd, "/", IN_DELETE_SELF | IN_MASK_CREATE, (int)e->count - 1, &removed);
        if (got > last) { inotify_rm_watch(fd, got); removed++; }
    }
    if (!removed) return;
    int fl = fcntl(fd, F_GETFL);
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    char buf[4096];
    while (read(fd, buf, sizeof buf) > 0) {}
    fcntl(fd, F_SETFL, fl);
}
