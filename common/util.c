#include "util.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *lz_prog = "lazarus";

void (*lz_msg_sink)(const char *kind, const char *text);

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    char buf[2048];
    if (lz_msg_sink) {
        vsnprintf(buf, sizeof buf, fmt, ap);
        lz_msg_sink(*kind ? "warning" : "error", buf);
        return;
    }
    int n = snprintf(buf, sizeof buf, "%s: %s", lz_prog, kind);
    if (n < 0 || (size_t)n >= sizeof buf) n = 0;
    int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof buf - 2) len = sizeof buf - 2;
    buf[len++] = '\n';
    (void)lz_write_all(2, buf, len);
}

void lz_err(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("", fmt, ap); va_end(ap); }
void lz_warn(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("warning: ", fmt, ap); va_end(ap); }
void lz_die(const char *fmt, ...) { va_list ap; va_start(ap, fmt); vmsg("", fmt, ap); va_end(ap); exit(1); }

static void *need(void *p)
{
    if (!p) lz_die("out of memory");
    return p;
}
void *lz_xmalloc(size_t n) { return need(malloc(n ? n : 1)); }
void *lz_xcalloc(size_t n, size_t size) { return need(calloc(n ? n : 1, size ? size : 1)); }
void *lz_xrealloc(void *p, size_t n) { return need(realloc(p, n ? n : 1)); }
char *lz_xstrdup(const char *s) { return need(strdup(s)); }

int lz_write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0) { if (errno == EINTR) continue; return -1; }
        if (w == 0) { errno = EIO; return -1; }
        p += w; len -= (size_t)w;
    }
    return 0;
}

int lz_pread_all(int fd, void *buf, size_t len, off_t off)
{
    char *p = buf;
    while (len) {
        ssize_t r = pread(fd, p, len, off);
        if (r < 0) { if (errno == EINTR) continue; return -1; }
        if (r == 0) { errno = ENODATA; return -1; }
        p += r; len -= (size_t)r; off += r;
    }
    return 0;
}

void *lz_read_fd(int fd, size_t *len)
{
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    for (;;) {
        if (n + 1 >= cap) { /* room for the NUL that always follows */
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); return NULL; }
            buf = nb;
        }
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) { if (errno == EINTR) continue; free(buf); return NULL; }
        if (r == 0) break;
        n += (size_t)r;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

void *lz_read_file(const char *path, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    void *p = lz_read_fd(fd, len);
    int e = errno;
    close(fd);
    errno = e;
    return p;
}

int lz_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int r = fsync(fd);
    close(fd);
    return r;
}

void lz_remove_tree(int parent, const char *name)
{
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
        DIR *d = fdopendir(fd);
        struct dirent *e;
        while (d && (e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                if (unlinkat(fd, e->d_name, 0) < 0 && errno == EISDIR) lz_remove_tree(fd, e->d_name);
        if (d) closedir(d); else close(fd);
    }
    unlinkat(parent, name, AT_REMOVEDIR);
}

uint64_t lz_now_ns(int clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int lz_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || *s == '-') return -1;
    *out = v;
    return 0;
}

int lz_parse_seconds_ms(const char *s, uint64_t *ms)
{
    /* "S" or "S.FFF": whole digits, at most three after the point */
    uint64_t v = 0, frac = 0;
    int digits = 0, fdigits = 0;
    const char *p = s;
    for (; p && *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX / 1000 - 9) / 10) return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    if (p && *p == '.')
        for (p++; *p >= '0' && *p <= '9'; p++)
            if (fdigits < 3) { frac = frac * 10 + (uint64_t)(*p - '0'); fdigits++; }
    if (!p || *p || (!digits && !fdigits)) return -1;
    while (fdigits++ < 3) frac *= 10;
    *ms = v * 1000 + frac;
    return 0;
}
