/* lazarus-restore: a static program, started without address randomization
 * (so it sits just below the top of the address space), that turns the process it runs in into the checkpointed
 * program: it maps the program's regions around itself, fills them from the
 * packs (checking every checksum), reopens descriptors, re-creates the
 * kernel-side state, moves the vDSO, and jumps back into the runtime's
 * checkpoint handler, which unmaps the restorer. */
#ifndef LZ_RESTORER_H
#define LZ_RESTORER_H
#include "manifest.h"
#include <stdint.h>

struct own_range { uint64_t start, end; };

struct restore_ctx {
    const char *ckpt_dir;   /* DIR/ckpt.N */
    const char *store_dir;
    uint64_t index;
    int ctl_fd;
    struct lz_image img;
    struct own_range own[8]; /* the restorer's mappings (not the vDSO) */
    int nown;
    int launcher_ref[LZ_LAUNCHER_FDS]; /* restore_descriptors: for lz_resume */
    uint64_t *mapped_lo;     /* per region: where restore_map_regions mapped it from (0: not yet) */
    uint8_t *inherited;      /* per region: kept from the parent restorer's memory (restore_inherit.c) */
    uint8_t *lazy;           /* per region: left to the lazy fill's server (restore_lazy.c), NULL: none */
};

void restore_trace(const char *step);
_Noreturn void restore_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

int restore_check_layout(struct restore_ctx *rc, char *why, size_t whylen);
void restore_park_vdso(struct restore_ctx *rc);
/* The two stages of the memory (restore_memory.c): the anonymous regions
 * before the file rollback, the regions that map files after it. */
enum { RESTORE_ANON, RESTORE_FILES };
/* A region that maps a file is mapped in the second stage, after the file
 * rollback: the file may be one the job changed since the checkpoint. */
static inline int restore_region_stage(const struct lz_region *r)
{
    /* a System V segment: after `lazarus restart` made it (cli/restart_ipc.c) */
    return r->kind == LZ_R_FILE_PRIVATE || r->kind == LZ_R_FILE_SHARED || (r->flags & LZ_RF_SYSV) ? RESTORE_FILES : RESTORE_ANON;
}
void restore_map_regions(struct restore_ctx *rc, int stage);
/* A child going on in a copy of its parent's restorer (restore_inherit.c):
 * 0 if the restorer's own mappings, where they are, leave room for the
 * child's regions (else it runs a fresh restorer); then the parent's
 * regions it keeps (the same private anonymous region) kept, the others
 * unmapped, the vDSO moved out of the child's way. */
int restore_check_layout_inherited(struct restore_ctx *rc, const struct restore_ctx *parent);
void restore_inherit(struct restore_ctx *rc, const struct restore_ctx *parent);
/* Would the child whose part is loaded in `child` share enough of the
 * parent's memory (estimated from a few pages) to be made after its fill? */
int restore_inherit_worth(const struct restore_ctx *parent, const struct restore_ctx *child);
void restore_inherit_init(void); /* LAZARUS_INHERIT_MIN_KIB, read while the environment is there */
void restore_forget_views(void); /* restore_memory.c: the parent's memfds of several views */
/* restore_main.c: the child of the plan whose part is in ckpt_dir goes on
 * from here, in this copy of its parent's restorer; returns only if it
 * cannot (then it runs a fresh one). */
void restore_continue_child(const char *ckpt_dir, const struct lz_image *img);
/* restore_main.c, for the plan: the part in ckpt_dir loaded (into *img),
 * and whether that child should go on from this restorer after its fill. */
int restore_child_shares(const char *ckpt_dir, struct lz_image *img);
void restore_advise(const struct lz_region *r);
/* restore_sysv.c: a System V attachment, made again with shmat */
void restore_sysv_attach(struct restore_ctx *rc, const struct lz_region *r);
/* restore_exe.c: the restorer's own file mappings made anonymous copies (0, or -1) */
int restore_leave_exe(void);
/* restore_lazy.c: the private anonymous regions registered with a
 * userfaultfd, which goes to the supervisor's fault server (`restart --lazy`) */
void restore_lazy_register(struct restore_ctx *rc);
/* restore_fill.c */
void restore_fill_memory(struct restore_ctx *rc, int stage);
void restore_finish_protections(struct restore_ctx *rc);
void restore_move_vdso(struct restore_ctx *rc);
int image_max_fd(const struct lz_image *img);
void restore_descriptors(struct restore_ctx *rc);
/* Pipes and socket pairs made anew with their data (restore_pipes.c): per
 * descriptor record of a pipe or socket, an open file parked at >= base to
 * be moved to its number (-1 for the other records); malloc'ed. */
int *restore_chans(struct restore_ctx *rc, int base);
/* TCP and UDP sockets made anew (restore_inet.c): per descriptor record, the
 * socket parked at >= base (-1 for the other records); malloc'ed. */
int *restore_inet(struct restore_ctx *rc, int base);
/* A TCP connection between two processes of the job (restore_tree.c): a (the
 * accepting end) and b connected again with their data (files pa, pb) and
 * options; close-on-exec, not yet at their numbers. */
void restore_inet_pair(const struct lz_inet *a, const char *pa, const struct lz_inet *b, const char *pb, int sv[2]);
/* eventfd, timerfd, signalfd, epoll (restore_events.c): the object of
 * LZ_FD_EVENT descriptor f, made anew (close-on-exec; the caller places it);
 * then, with every descriptor in place, the epoll watches and the timers. */
int restore_event_open(const struct lz_image *img, const struct lz_fd *f);
int restore_event_make(const struct lz_event *e, uint32_t open_flags);
void restore_events_finish(const struct lz_image *img);
/* Pseudo-terminals (restore_pty.c): per descriptor record of one, an open
 * file parked at >= base (-1 for the other records); malloc'ed. */
int *restore_ptys(struct restore_ctx *rc, int base);
/* For the plan (restore_tree.c): the pty `index` part_dir's manifest
 * recorded, made anew (its master, close-on-exec); a descriptor record's end
 * of a pty whose master is `master`, parked at >= base. */
int restore_pty_object(const char *part_dir, uint32_t index);
int restore_pty_end(int master, const struct lz_fd *f, int base);
/* The process in the foreground group of the launcher's terminal at the
 * checkpoint makes its group the foreground of the restarter's (no terminal:
 * nothing). */
void restore_pty_foreground(const struct lz_image *img);
/* The watches of inotify object e, by path, each with its wd (restore_inotify.c). */
void restore_inotify_watches(const struct lz_image *img, const struct lz_event *e);
/* POSIX timers with their ids and state (restore_timers.c), once every thread
 * exists and before any runs; raw system calls only. */
void restore_timers(const struct lz_image *img);
extern int restore_timer_ids_off; /* LAZARUS_TEST_NO_TIMER_IDS: as without PR_TIMER_CREATE_RESTORE_IDS */
/* A pipe like c, holding data (freed), its ends parked at >= base in ends;
 * `what` names it in messages.  Then the process's descriptor records of
 * pipe ino take its ends r and w (closed if none does) or reopen them, each
 * with its record's flags. */
void restore_new_pipe(const struct lz_chan *c, char *data, int base, const char *what, int ends[2]);
void restore_pipe_ends(const struct lz_image *img, uint64_t ino, int r, int w, int base, int *src);
void restore_set_flags(int fd, uint32_t flags, int prog_fd);
/* A named pipe (restore_fifo.c): opened (or made) again at `path` with c's
 * capacity and data (freed), as a read-write keeper parked at >= base; then
 * the process's descriptor records of it opened through the keeper (closed). */
int restore_new_fifo(const struct lz_chan *c, char *data, const char *path, int base);
void restore_fifo_ends(const struct lz_image *img, uint64_t ino, int keeper, int base, int *src);
/* A socket buffer size as getsockopt reported it (FORCE beyond the system's maximum). */
void restore_set_buf(int s, int opt, int force, uint32_t want);
/* Queues c's data (freed) on the peer of `from` by sending it from `from`
 * (whose record, for its send buffer, is `sender`); to_fd names it in messages. */
void restore_refill_socket(const struct lz_chan *c, char *data, const struct lz_chan *sender, int from, int to_fd);
/* Local sockets that are not pair ends (restore_usock.c): the socket of
 * LZ_FD_USOCK descriptor f made again (bound, listening, refilled; close-on-exec);
 * then, with every descriptor in place, the datagram sockets connected to a name. */
int restore_usock_open(struct restore_ctx *rc, const struct lz_fd *f);
/* The same from a record and its data (freed; the plan's object shared by
 * processes of the job), a relative name taken in `cwd`. */
int restore_usock_make(const struct lz_usock *u, void *data, const char *cwd);
void restore_usocks_finish(struct restore_ctx *rc);
/* A socket pair shared by processes of the job (restore_tree.c): made and
 * refilled from the data files of its two records, parked at >= base. */
void restore_socket_pair(const struct lz_chan *a, const char *path_a, const struct lz_chan *b, const char *path_b, int base,
                         int sv[2]);
/* Open deleted files (restore_ghost.c): a nameless file made from the kept
 * content file (holes, mode, mtime; checksum checked) in tmpdir, read-write;
 * a description of it with f's flags; descriptor f's open file, one inode
 * per original inode in the process (restore_ghosts_done closes them). */
int restore_ghost_file(const char *content, const char *tmpdir, const struct lz_fd *f);
int restore_ghost_reopen(int t, const struct lz_fd *f);
int restore_ghost_open(struct restore_ctx *rc, const struct lz_fd *f, const char *name);
void restore_ghosts_done(void);
/* The inodes of the deleted files the job's plan made (restore_tree_fds's
 * shared[]): this process's other descriptors of them open the same one. */
void restore_ghosts_seed(const struct lz_image *img, const int *shared, int base);
void restore_process_state(struct restore_ctx *rc);
void restore_mm(struct restore_ctx *rc);
int restore_exe_fd(struct restore_ctx *rc);
/* Before restore_mm (it allocates their stacks), then last. */
void restore_threads_prepare(struct restore_ctx *rc, int drop_caps);
_Noreturn void restore_threads_and_jump(struct restore_ctx *rc);

/* A job of several processes (restore_tree.c): no-ops for a single one. */
extern int restore_report_fd; /* the channel to the supervisor: READY, FAILED */
void restore_tree_read(char **argv);
void restore_tree_objects(void);                     /* its session or group (the main program), its objects */
/* Its children: first (late 0, before its fill) those that would share
 * little of its memory, each running a fresh restorer; then (late 1) the
 * others, going on from this one (restore_continue_child). */
void restore_tree_children(const char *ckpt_dir, int late);
int restore_in_tree(void);
int restore_tree_main_pid(int own);
int *restore_tree_fds(const struct lz_image *img, int base);
int restore_tree_shared_chan(uint64_t ino); /* a pipe or socket the plan makes */
int restore_tree_shared_pty(uint64_t index); /* a pseudo-terminal the plan makes */
int restore_tree_event_other(int fd); /* an event object the plan makes whose first holder is another process */
/* Sessions and groups exactly (restore_sessions.c): the plan's processes;
 * does leader `me` make children of its old session before its setsid; the
 * session it is in now as the plan names it; child q made in its session and
 * group, through helpers where their leader is gone (0 in q, else its pid). */
struct lz_plan_proc;
void restore_sessions_init(const struct lz_plan_proc *procs, uint32_t n);
int restore_sessions_defer(const struct lz_plan_proc *me);
int32_t restore_sessions_cur_sid(void);
int restore_sessions_clone(const struct lz_plan_proc *q);
/* The inode of an open deleted file the plan made for several processes (read-write), or -1. */
int restore_tree_ghost_fd(uint64_t dev, uint64_t ino);
int restore_tree_go_fd(void);
/* The memfd of shared memory object dev/ino, made once for the job; -1: map it anew. */
int restore_tree_shm_fd(uint64_t dev, uint64_t ino);
void restore_tree_go(void);

_Noreturn void lz_final_jump(const struct lz_jmpctx *ctx, uint64_t fs_base);
#endif
