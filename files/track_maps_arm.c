/* Writable shared file mappings at checkpoints (track_maps.h): what was
 * opened during the interval is protected again in the pause, and the
 * registry is checked against the kernel's list of mappings: in the pause
 * mapping by mapping (PROCMAP_QUERY), when the next interval opens against
 * all of /proc/self/maps (new mappings registered, gone ones dropped). */
#include "track_maps.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

/* One line of /proc/self/maps. */
struct vma { uint64_t start, end, off, dev, ino; int prot, shared; const char *path; };

static uint64_t hex(const char **s)
{
    uint64_t v = 0;
    for (;; (*s)++) {
        char c = **s;
        if (c >= '0' && c <= '9') v = v * 16 + (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (uint64_t)(c - 'a' + 10);
        else return v;
    }
}

static int parse(const char *p, struct vma *m)
{
    m->start = hex(&p); if (*p++ != '-') return -1;
    m->end = hex(&p); if (*p++ != ' ') return -1;
    if (!p[0] || !p[1] || !p[2] || !p[3]) return -1;
    m->prot = (p[0] == 'r' ? PROT_READ : 0) | (p[1] == 'w' ? PROT_WRITE : 0) | (p[2] == 'x' ? PROT_EXEC : 0);
    m->shared = p[3] == 's';
    p += 5;
    m->off = hex(&p); p++;
    uint64_t maj = hex(&p); p++;
    uint64_t min = hex(&p); p++;
    m->dev = makedev(maj, min);
    m->ino = 0;
    while (*p >= '0' && *p <= '9') m->ino = m->ino * 10 + (uint64_t)(*p++ - '0');
    while (*p == ' ') p++;
    m->path = p;
    return 0;
}

/* What a sync builds (static: it runs in signal handlers, under the lock). */
static struct { uint64_t start, end; } runs[RUNS_MAX];
static uint32_t nruns;
static long sync_err;

/* Adds [s, t) of a VMA to the new registry, merged with the previous
 * piece when it continues it; o: the old registry's mapping there. */
static void piece(const struct vma *m, uint64_t s, uint64_t t, const struct shmap *o)
{
    /* what the program asked for: the registry's, unless it made the mapping
     * writable by a raw system call (our protection never adds PROT_WRITE) */
    int prot = o && !((m->prot & PROT_WRITE) && !(o->prot & PROT_WRITE)) ? o->prot : m->prot;
    struct shmap e = {s, t, m->off + (s - m->start), m->dev, m->ino, o ? o->fd : -1, prot, o ? o->armed : 0, 0, 0};
    if (o && o->armed && (m->prot & PROT_WRITE)) { /* opened this interval */
        if (nruns < RUNS_MAX) { runs[nruns].start = s; runs[nruns].end = t; nruns++; }
        else e.whole = 1;
    }
    struct shmap *last = shm_nn ? &shm_nreg[shm_nn - 1] : NULL;
    if (last && last->dev == e.dev && last->ino == e.ino && last->end == e.start && last->prot == e.prot &&
        last->off + (last->end - last->start) == e.off && (last->fd == e.fd || e.fd < 0)) {
        last->end = e.end;
        last->whole |= e.whole | (last->armed != e.armed);
        last->armed &= e.armed;
        return;
    }
    if (e.fd < 0) e.fd = shm_file_fd(e.dev, e.ino, -1, m->path); /* mapped by a raw system call, or restored */
    if (e.fd < 0) return; /* untracked (or unreadable: as before) */
    if (shm_nn < MAPS_MAX) { shm_nreg[shm_nn++] = e; return; }
    /* no room: saved whole into the interval being opened */
    if (shm_sync_v && sync_err == 0 && (e.prot & PROT_WRITE)) sync_err = shm_save(&e, e.start, e.end);
}

static void take(const struct vma *m)
{
    if (!m->shared || !m->ino || m->path[0] != '/' || fj_owns(m->start, m->end)) return;
    size_t pl = slen(m->path);
    if (pl > (size_t)LZ_DELETED_LEN && !strcmp(m->path + pl - LZ_DELETED_LEN, LZ_DELETED_SUFFIX)) return;
    /* cut by the old registry's mappings (our protection may have merged
     * pieces the program gave different protections) */
    uint64_t cur = m->start;
    for (uint32_t i = shm_find(m->start); i < shm_nr && shm_reg[i].start < m->end; i++) {
        const struct shmap *o = &shm_reg[i];
        uint64_t s = o->start > cur ? o->start : cur, t = o->end < m->end ? o->end : m->end;
        int same = o->dev == m->dev && o->ino == m->ino && o->off + (s - o->start) == m->off + (s - m->start);
        if (!same) continue;
        if (cur < s && (m->prot & PROT_WRITE)) piece(m, cur, s, NULL);
        piece(m, s, t, o);
        cur = t;
    }
    if (cur < m->end && (m->prot & PROT_WRITE)) piece(m, cur, m->end, NULL);
}

/* Reads /proc/self/maps line by line (opened pages may make it long). */
static long read_maps(void)
{
    static char buf[1 << 16];
    long fd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return fd;
    size_t have = 0;
    long r = 0;
    for (;;) {
        long k = lz_sc3(SYS_read, fd, buf + have, sizeof buf - 1 - have);
        if (k == -EINTR) continue;
        if (k < 0) { r = k; break; }
        have += (size_t)k;
        char *line = buf, *eol;
        while ((eol = memchr(line, '\n', have - (size_t)(line - buf)))) {
            *eol = 0;
            struct vma m;
            if (parse(line, &m) == 0) take(&m);
            line = eol + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (k == 0 || have == sizeof buf - 1) break;
    }
    lz_sc1(SYS_close, fd);
    return r;
}

/* At a checkpoint (v NULL: in the pause, before the regions are read) and
 * when an interval opens (v: its journal): the registry checked against
 * /proc/self/maps, and every writable page of it protected.  A mapping
 * that cannot be registered or protected is saved whole into v. */
long trk_maps_arm(struct interval *v)
{
    shm_nn = nruns = 0;
    shm_sync_v = v;
    sync_err = 0;
    long r = read_maps();
    if (r < 0) { shm_sync_v = NULL; return r; } /* nothing changed: the old registry stands */
    shm_commit(shm_nn);
    uint32_t k = 0;
    for (uint32_t i = 0; i < shm_nr; i++) {
        struct shmap *e = &shm_reg[i];
        if (!(e->prot & PROT_WRITE)) { e->armed = 0; continue; }
        uint32_t k0 = k, n = 0;
        while (k0 < nruns && runs[k0].start < e->start) k0++;
        for (k = k0; k < nruns && runs[k].start < e->end; k++) n++;
        long p = 0;
        /* one mprotect per opened run costs ~8 us (the mapping is merged
         * again); one for all walks its page table, ~5 us per MiB */
        if (!e->armed || e->whole || (uint64_t)n * 8 > ((e->end - e->start) >> 20) * 5 + 8)
            p = lz_sc3(SYS_mprotect, e->start, e->end - e->start, shm_ro(e->prot));
        else
            for (uint32_t j = k0; j < k && p == 0; j++) p = lz_sc3(SYS_mprotect, runs[j].start, runs[j].end - runs[j].start, shm_ro(e->prot));
        e->whole = e->dirty = 0;
        e->armed = 1;
        if (p < 0) { /* cannot be protected: open, and saved whole */
            if (v && sync_err == 0) sync_err = shm_save(e, e->start, e->end);
            if (lz_sc3(SYS_mprotect, e->start, e->end - e->start, e->prot) == 0) e->armed = 0;
        }
    }
    shm_opened = shm_nlog = 0;
    shm_sync_v = NULL;
    return sync_err;
}

/* PROCMAP_QUERY (Linux 6.11): the VMA at an address, without the text of
 * every mapping (/proc/self/maps of a 1 GiB mapping with 1 % of its pages
 * opened is 5000 lines: 4.7 ms to read).  Not in Debian 12's headers. */
struct procmap_query {
    uint64_t size, query_flags, query_addr, vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define PROCMAP_QUERY_IOCTL _IOWR('f', 17, struct procmap_query)
#define PROCMAP_SHARED 0x08

/* 1 when the VMA at addr maps e's file at the offset e says. */
static int still(long mfd, const struct shmap *e, uint64_t addr)
{
    struct procmap_query q;
    memset(&q, 0, sizeof q);
    q.size = sizeof q;
    q.query_addr = addr;
    if (lz_sc3(SYS_ioctl, mfd, PROCMAP_QUERY_IOCTL, &q) < 0) return 0;
    return q.vma_start <= addr && (q.vma_flags & PROCMAP_SHARED) && q.inode == e->ino &&
           makedev(q.dev_major, q.dev_minor) == e->dev && q.vma_offset + (addr - q.vma_start) == e->off + (addr - e->start);
}

/* The pause's protection, before the regions are read: what was opened
 * since the last one, from the log, the registry checked mapping by mapping
 * (its first and last page) rather than by reading every line of maps; the
 * full sync (trk_maps_arm) when that cannot be done.  It runs again when
 * the interval opens, on a maps text merged back to a few lines. */
static long quick_arm(void)
{
    long mfd = lz_sc4(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
    if (mfd < 0) return mfd;
    long r = 0;
    for (uint32_t i = 0; i < shm_nr && r == 0; i++)
        if (!still(mfd, &shm_reg[i], shm_reg[i].start) || !still(mfd, &shm_reg[i], shm_reg[i].end - PAGE)) r = -ESTALE;
    lz_sc1(SYS_close, mfd);
    if (r < 0) return r;
    for (uint32_t i = 0; i < shm_nr && r == 0; i++) {
        struct shmap *e = &shm_reg[i];
        if (!(e->prot & PROT_WRITE)) continue;
        if (!e->armed || e->whole || (e->dirty && shm_nlog > LOG_MAX)) r = lz_sc3(SYS_mprotect, e->start, e->end - e->start, shm_ro(e->prot));
        else if (e->dirty)
            for (uint32_t k = 0; k < shm_nlog && r == 0; k++) {
                uint64_t a = shm_olog[k].a > e->start ? shm_olog[k].a : e->start, b = shm_olog[k].b < e->end ? shm_olog[k].b : e->end;
                if (a < b) r = lz_sc3(SYS_mprotect, a, b - a, shm_ro(e->prot));
            }
        if (r == 0) { e->armed = 1; e->whole = e->dirty = 0; }
    }
    if (r == 0) shm_opened = shm_nlog = 0;
    return r;
}

void fj_maps_arm(void)
{
    if (!fj.fdt) return;
    lock();
    if (quick_arm() < 0) trk_maps_arm(NULL);
    unlock();
}
