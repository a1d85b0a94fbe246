/* The plan of a restart of several processes: `lazarus restart` makes it
 * from the checkpoint's tree and every part's manifest (cli/restart_tree.c),
 * each restorer follows its own lines of it (restorer/restore_tree.c).  It
 * is never stored: a memfd inherited by every restorer at LAZARUS_PLAN_FD.
 *
 * Layout: header, nprocs lz_plan_proc (the tree's order: parents before
 * children, the main program first), nobjs lz_plan_obj, nholds lz_plan_hold.
 *
 * Objects are what several processes share and so must be made once, by the
 * nearest common ancestor of those that hold them, before it makes its
 * children: a pipe (with the bytes in flight), an open file description
 * (a file's offset and flags, shared after a fork), an event-loop object
 * (an eventfd, timerfd, signalfd, epoll or inotify inherited over fork) or
 * shared memory.  Each sits at a fixed
 * descriptor number above every number any process of the job used, not
 * close-on-exec, so every process made after it inherits it; a restorer
 * takes the ones it holds into place and closes the rest. */
#ifndef LZ_RESTART_PLAN_H
#define LZ_RESTART_PLAN_H
#include "format.h"
#include <stdint.h>

#define LZ_PLAN_MAGIC 0x4e4c504cu /* "LPLN" */
#define LZ_PLAN_ENV "LAZARUS_PLAN_FD"
/* A restart of one process: the restorer fills the anonymous memory while
 * `lazarus restart` has changed nothing, says LOADED, and waits until a
 * byte on this descriptor says the files are rolled back (end of file: the
 * restart was refused or failed; it exits without a word). */
#define LZ_ROLLED_ENV "LAZARUS_ROLLED_FD"

enum lz_plan_flags {
    LZ_PP_SETSID = 1, /* led its own session */
    LZ_PP_GROUP = 2,  /* led its own process group */
    LZ_PP_ZOMBIE = 4, /* exited, not waited for: made, then exits with `status` */
};

struct lz_plan_header {
    uint32_t magic;
    uint32_t nprocs, nobjs, nholds;
    int32_t go_fd;   /* read end of the supervisor's go pipe: one byte per live process
                      * once every one said READY; end of file: the supervisor is gone */
    int32_t pad;
};

struct lz_plan_proc {
    int32_t pid, ppid; /* ppid 0: the main program */
    int32_t join_pgid; /* a process group of another process of the job to join, or 0 */
    uint32_t flags;    /* enum lz_plan_flags */
    int32_t status;    /* zombie: the wait status its parent will see */
    int32_t pad;
    int32_t sid, pgid; /* its session and group at the checkpoint; 0: the main program's, when
                        * no process of the job led it (the launcher's; at a restart, the
                        * restarter's) */
    char dir[32];      /* its part: "" (the checkpoint directory) or "proc.PID" */
};

enum lz_plan_kind {
    LZ_PO_PIPE = 1,
    LZ_PO_FILE = 2,
    LZ_PO_SOCK = 4, /* a socket pair whose ends different processes hold: fd is end `chan`,
                     * fd2 end `chan2`, each refilled from its own record's data */
    LZ_PO_PTY = 8, /* a pseudo-terminal whose ends, or whose session, several processes have:
                    * its master at fd; `offset` its index, `path` the part directory of the
                    * process that recorded it (its lz_pty, and queued bytes, are there);
                    * pty_sid and pty_fg its session and foreground group (0: none) */
    LZ_PO_USOCK = 5, /* a local socket (LZ_FD_USOCK: a listener a parent shares with the children it
                      * forked, say) whose open file description several processes share: made
                      * from `usock` (data file `path`, a relative name in the directory `path2`) */
    LZ_PO_GHOST = 6, /* an open deleted file whose description several processes share (a forked
                      * child's inherited tmpfile): made from `ghost` and its content file `path` */
    LZ_PO_GHOSTINO = 7, /* the inode of an open deleted file several processes hold through
                         * descriptions of their own: made from `ghost` and `path` (read-write);
                         * every description of it in the job is opened through it */
    LZ_PO_TCP = 9, /* a TCP connection whose ends two processes hold: fd is end `inet` (the
                    * accepting one; chan.ino its socket's inode), fd2 end `inet2` (chan2.ino),
                    * each with the data it had queued to read (path, path2) */
    LZ_PO_EVENT = 10, /* an eventfd, timerfd, signalfd, epoll or inotify whose description several
                       * processes share (inherited over fork: a prefork pool's): made by `creator`
                       * from `event` (the first holder's record; open flags in `flags`), each
                       * holder taking it (the holds); `leader`, that first holder, alone gives
                       * it what needs descriptor numbers or must happen once after every
                       * descriptor is in place: an epoll's watches (all holders' tables name the
                       * same files at those numbers: runtime/rt_events.c checks each with kcmp),
                       * an inotify's watches, a timer's arming */
    LZ_PO_SHM = 3, /* shared memory (LZ_R_SHARED_ANON regions with one object's dev/ino in
                    * several processes): a memfd of `offset` bytes; each process maps its
                    * part of it and fills it from its own image (the same bytes) */
};

struct lz_plan_obj {
    uint32_t kind;       /* enum lz_plan_kind */
    int32_t creator;     /* the process that makes it */
    int32_t fd, fd2;     /* where it sits: a file's description; a pipe's read and write ends */
    uint32_t flags;      /* file: open flags */
    uint32_t pad;
    int64_t offset;      /* file: the shared offset */
    struct lz_chan chan; /* pipe: its record (ino, capacity, bytes, checksum); shm: ino and
                          * peer = the object's dev and ino */
    char path[LZ_PATH_MAX]; /* file: its path; pipe, socket pair: chan's data file (absolute), "" if empty */
    struct lz_chan chan2;   /* socket pair: the other end */
    char path2[LZ_PATH_MAX];
    int32_t pty_sid, pty_fg; /* pty */
    struct lz_usock usock; /* LZ_PO_USOCK: its record */
    struct lz_fd ghost;    /* LZ_PO_GHOST: the first holder's record (mode, mtime, checksum, flags, offset) */
    struct lz_inet inet, inet2; /* TCP connection: its two ends' records */
    struct lz_event event;      /* LZ_PO_EVENT: the first holder's record of the object */
    int32_t leader, pad2;       /* LZ_PO_EVENT: that holder's PID */
};

/* Process pid's descriptor fd is file object obj (pipes are matched by inode). */
struct lz_plan_hold {
    int32_t pid, fd;
    uint32_t obj, pad;
};
#endif
