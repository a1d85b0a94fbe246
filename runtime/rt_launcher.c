/* The launcher's descriptors: what the job's main program got from whoever
 * ran `lazarus run` (its stdin, stdout and stderr, a make jobserver pipe) is
 * not the job's.  A checkpoint records them as LZ_FD_STDIO, the file engine
 * never records a change through them (a batch system's `slurm-N.out`, a
 * shell's `> run.out 2> run.err`: Lazarus' own lines there survive a
 * rollback, and another writer's lines are no outside change), and a restart
 * gives the program the restarter's descriptor of the same number instead.
 *
 * Terminals, pipes and sockets are known by their identity (device, inode
 * and access mode: a pipe's ends share an inode), at their own number or
 * another one (a shell's `exec 10>&1`, or bash saving its stdout on 10 while
 * a redirected command runs): the restarter's of the launcher's number then
 * takes that place too.  A
 * regular file is known by its open file description: the runtime keeps a
 * close-on-exec copy of it (`ref`, at RT_LAUNCHER_FD_BASE or above) and asks
 * kcmp, so the program's dups of it at other numbers (`exec 3>&1`) are the
 * launcher's too, and the same file opened anew by name (freopen, `>>`) is
 * the job's.  A program that closes the copy (a loop closing every
 * descriptor) falls back to number and identity.  With `run --job-stdio`
 * (LAZARUS_JOB_STDIO=1) regular files are the job's, as any other.
 *
 * Children inherit the list (LAZARUS_INHERITED "fd:dev:ino:acc,...", made at
 * each exec from what the process still holds at those numbers) and make
 * their own copies of the regular files among them. */
#include "rt.h"
#include "track.h"
#include <fcntl.h>
#include <linux/kcmp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The copy still refers to the file it was made of (a program may have
 * closed it, or put something else at its number). */
static int ref_valid(int i)
{
    struct stat st;
    int ref = rt.inherited[i].ref;
    return ref >= 0 && lz_sc2(SYS_fstat, ref, &st) == 0 && S_ISREG(st.st_mode) &&
           (uint64_t)st.st_dev == rt.inherited[i].dev && (uint64_t)st.st_ino == rt.inherited[i].ino;
}

static int same_description(int a, int b)
{
    long self = lz_sc0(SYS_getpid);
    return lz_sc5(SYS_kcmp, self, self, KCMP_FILE, a, b) == 0;
}

static int access_mode(int fd)
{
    long fl = lz_sc2(SYS_fcntl, fd, F_GETFL);
    return fl < 0 ? -1 : (int)(fl & O_ACCMODE);
}

int rt_launcher_is_ref(int fd)
{
    for (int i = 0; i < rt.ninherited; i++)
        if (rt.inherited[i].ref == fd && ref_valid(i)) return 1;
    return 0;
}

int rt_launcher_of(int fd, uint64_t dev, uint64_t ino, uint32_t mode)
{
    int found = -1;
    for (int i = 0; i < rt.ninherited; i++) {
        int k = rt.inherited[i].fd;
        if (S_ISREG(mode) && ref_valid(i)) {
            /* 1 and 2 may be one description (`>out 2>&1`): its own number first */
            if (same_description(fd, rt.inherited[i].ref) && (k == fd || found < 0)) found = k;
            continue;
        }
        if (rt.inherited[i].dev != dev || rt.inherited[i].ino != ino) continue;
        if (k == fd) return k;
        /* a regular file whose copy was closed: by number only */
        if (found < 0 && !S_ISREG(mode) && (rt.inherited[i].acc < 0 || rt.inherited[i].acc == access_mode(fd))) found = k;
    }
    return found;
}

/* The file engine's question (files/track.h): a write through fd needs no undo. */
static int launchers_hook(int fd, uint64_t dev, uint64_t ino, uint32_t mode)
{
    return rt_launcher_of(fd, dev, ino, mode) >= 0;
}

static void add(int fd, const struct stat *st, int regular, int acc)
{
    if (rt.ninherited >= RT_MAX_INHERITED) return;
    int i = rt.ninherited++;
    rt.inherited[i].fd = fd;
    rt.inherited[i].acc = acc;
    rt.inherited[i].dev = (uint64_t)st->st_dev;
    rt.inherited[i].ino = (uint64_t)st->st_ino;
    long ref = regular ? lz_sc3(SYS_fcntl, fd, F_DUPFD_CLOEXEC, RT_LAUNCHER_FD_BASE) : -1;
    rt.inherited[i].ref = ref >= 0 ? (int)ref : -1;
}

void rt_launcher_start(int cfd)
{
    fj_launchers = launchers_hook;
    const char *inh = rt_env("LAZARUS_INHERITED");
    if (inh) {
        for (const char *p = inh; *p;) {
            char *e;
            long fd = strtol(p, &e, 10);
            if (*e != ':') break;
            unsigned long long dev = strtoull(e + 1, &e, 10);
            if (*e != ':') break;
            unsigned long long ino = strtoull(e + 1, &e, 10);
            int acc = -1; /* the launcher's access mode: this process may hold another file at fd */
            if (*e == ':') acc = (int)strtol(e + 1, &e, 10);
            struct stat st;
            /* one it does not have (closed before the exec) it cannot get back;
             * a regular file is the launcher's only if it is still that file
             * (the parent checked the description) */
            int have = fd >= 0 && lz_sc2(SYS_fstat, fd, &st) == 0;
            int regular = have && S_ISREG(st.st_mode);
            if (have && (!regular || ((uint64_t)st.st_dev == dev && (uint64_t)st.st_ino == ino))) {
                st.st_dev = (dev_t)dev;
                st.st_ino = (ino_t)ino;
                add((int)fd, &st, regular && fd < LZ_LAUNCHER_FDS, regular ? access_mode((int)fd) : acc);
            }
            p = *e == ',' ? e + 1 : e;
        }
        return;
    }
    const char *js = rt_env("LAZARUS_JOB_STDIO");
    int job_files = js && *js == '1';
    for (int fd = 0; fd < LZ_STDIO_FDS; fd++) {
        struct stat st;
        if (fd == cfd || fstat(fd, &st) < 0 || S_ISDIR(st.st_mode)) continue;
        int regular = S_ISREG(st.st_mode);
        if (regular && (job_files || fd >= LZ_LAUNCHER_FDS)) continue;
        add(fd, &st, regular, access_mode(fd));
    }
}

void rt_launcher_env(char *buf, size_t len)
{
    size_t n = (size_t)rt_fmt(buf, len, "LAZARUS_INHERITED=");
    int first = 1;
    for (int i = 0; i < rt.ninherited && n < len; i++) {
        int k = rt.inherited[i].fd;
        /* a regular file put elsewhere (`cmd >> same.out`) is not the launcher's there */
        if (ref_valid(i) && !same_description(k, rt.inherited[i].ref)) continue;
        n += (size_t)rt_fmt(buf + n, len - n, "%s%d:%llu:%llu:%d", first ? "" : ",", k,
                            (unsigned long long)rt.inherited[i].dev, (unsigned long long)rt.inherited[i].ino,
                            rt.inherited[i].acc);
        first = 0;
    }
}

void rt_launcher_restarted(const struct lz_resume *r)
{
    /* a terminal the program put on 0/1/2 itself was the restarter's too */
    for (int k = 0; k < LZ_LAUNCHER_FDS; k++) {
        int known = 0;
        for (int i = 0; i < rt.ninherited; i++) known |= rt.inherited[i].fd == k;
        if (!known && r->launcher_ref[k] >= 0 && rt.ninherited < RT_MAX_INHERITED) {
            rt.inherited[rt.ninherited].acc = -1;
            rt.inherited[rt.ninherited++].fd = k;
        }
    }
    for (int i = 0; i < rt.ninherited; i++) {
        struct stat st;
        int k = rt.inherited[i].fd;
        rt.inherited[i].ref = -1; /* the restorer closed the old copy */
        int ref = k >= 0 && k < LZ_LAUNCHER_FDS ? r->launcher_ref[k] : -1;
        /* a copy of the restarter's regular file; else where the restorer put
         * the restarter's (this process may have put its own pipe on 0/1/2
         * since it started) */
        int at = ref >= 0 ? ref : k >= 0 && k < LZ_STDIO_FDS && (r->stdio[k / 8] & (1u << (k % 8))) ? k : -1;
        if (at >= 0 && lz_sc2(SYS_fstat, at, &st) == 0) {
            rt.inherited[i].dev = (uint64_t)st.st_dev;
            rt.inherited[i].ino = (uint64_t)st.st_ino;
            rt.inherited[i].ref = ref;
            rt.inherited[i].acc = access_mode(at);
        }
    }
}
