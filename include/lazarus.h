/* Lazarus C API.  Link with -llazarus.  Every call is a harmless no-op when
 * the program runs without Lazarus. */
#ifndef LAZARUS_H
#define LAZARUS_H
#include <stddef.h>

/* The version of Lazarus, in this one place: the Makefile reads it from here
 * for the sonames, lazarus.pc and `lazarus --version`. */
#define LAZARUS_VERSION_MAJOR 0
#define LAZARUS_VERSION_MINOR 9
#define LAZARUS_VERSION_PATCH 0
#define LAZARUS_VERSION_STR_(x) #x
#define LAZARUS_VERSION_STR(x) LAZARUS_VERSION_STR_(x)
/* "MAJOR.MINOR.PATCH" */
#define LAZARUS_VERSION LAZARUS_VERSION_STR(LAZARUS_VERSION_MAJOR) "." LAZARUS_VERSION_STR(LAZARUS_VERSION_MINOR) "." LAZARUS_VERSION_STR(LAZARUS_VERSION_PATCH)
#ifdef __cplusplus
extern "C" {
#endif

enum {
    LAZARUS_ERROR = -1,    /* the checkpoint failed; the program continues */
    LAZARUS_INACTIVE = 0,  /* not running under Lazarus: nothing was done */
    LAZARUS_CONTINUED = 1, /* a checkpoint was taken and is durable; carry on */
    LAZARUS_RESTARTED = 2, /* the program was restarted from this checkpoint */
};

/* Takes a checkpoint now and returns once it is durable (LAZARUS_CONTINUED),
 * or, after `lazarus restart` from that checkpoint, returns again
 * LAZARUS_RESTARTED.  *index (if not NULL) gets the checkpoint's index. */
int lazarus_checkpoint(unsigned long long *index);

/* A checkpoint here (libckpt's checkpoint_here), as lazarus_checkpoint(),
 * unless less than `lazarus run --mintime S` seconds passed since the last
 * checkpoint of any kind (or the start): then LAZARUS_INACTIVE at once. */
int lazarus_checkpoint_here(unsigned long long *index);

/* Memory exclusion (libckpt's exclude_bytes/include_bytes): any byte range.
 * LAZARUS_DEAD: the bytes will not be read before they are next written;
 * they are left out of the next checkpoints until included again, and come
 * back as zeros after a restart.  LAZARUS_READONLY: they will not be written
 * until included again; the next checkpoint stores them and later ones refer
 * to that copy.  lazarus_include() undoes either for any range (calls need
 * not match: the latest call wins for each byte).  Exclusions survive a
 * restart.  Safe from any thread.  0, or -1 with errno (EINVAL: a bad `how`
 * or a range that wraps; ENOMEM: too many ranges). */
enum { LAZARUS_DEAD = 1, LAZARUS_READONLY = 2 };
int lazarus_exclude(void *addr, size_t len, int how);
int lazarus_include(void *addr, size_t len);

/* 1 when the program runs under Lazarus (`lazarus run` or `restart`), else 0.
 * Safe from any thread. */
int lazarus_is_enabled(void);

/* A critical section in which no checkpoint is taken: a checkpoint asked for
 * meanwhile (by the interval, `lazarus checkpoint`, another process of the
 * job, or the API) waits until the section ends, then is taken.  Sections
 * nest; they are counted per process (a checkpoint waits until no thread is
 * in one) and each thread closes its own.  A checkpoint waits for them 10 s,
 * or up to 2 minutes while the process makes progress, then fails naming the
 * process and its section.  lazarus_disable() returns this thread's depth
 * after the call (>= 1), lazarus_enable() the depth left (>= 0) or -1 with
 * errno EPERM when the thread is in no section; both 0 without Lazarus.
 * Cheap (a counter), safe from any thread; not from a signal handler.
 * lazarus_checkpoint() inside a section returns LAZARUS_ERROR at once. */
int lazarus_disable(void);
int lazarus_enable(void);

/* Hooks (events for lazarus_on).  They run on a thread of the runtime's own
 * ("lazarus-hooks"), as ordinary functions that may call anything (malloc,
 * close, connect), never inside the checkpoint's signal handler:
 * BEFORE_CHECKPOINT before the process's threads stop (the program's other
 * threads still run; the checkpoint waits for the hooks, up to the time a
 * process has to answer a request: 10 s, or 2 minutes while it progresses);
 * AFTER_CHECKPOINT once the checkpoint is over and every thread runs again
 * (after a failed one too: what a before-hook closed is reopened);
 * AFTER_RESTART once a restarted program's threads run again -- promptly,
 * beside the program's other threads (lazarus_checkpoint() returns
 * LAZARUS_RESTARTED only after them).  Hooks of one event run in the order
 * registered.  A forked child inherits none. */
enum { LAZARUS_BEFORE_CHECKPOINT = 1, LAZARUS_AFTER_CHECKPOINT = 2, LAZARUS_AFTER_RESTART = 3 };
/* Registers fn(event, arg) for `event`: 1; 0 without Lazarus (never
 * called); -1 with errno (EINVAL: unknown event or NULL fn; ENOMEM: more than
 * 64 hooks; or pthread_create's error).  Safe from any thread, and from a
 * hook. */
int lazarus_on(int event, void (*fn)(int event, void *arg), void *arg);

/* The checkpoint store's directory (as `lazarus run -d` names it; after a
 * restart, where the store is now), or NULL without Lazarus.  The string is
 * the runtime's: do not free it. */
const char *lazarus_store_dir(void);

/* Checkpoints this process took part in (captured; one whose write fails
 * afterwards still counts), and restarts it went through, since the
 * program's start: they live in its memory, so after a restart from a
 * checkpoint they are that checkpoint's, the restart added (the checkpoint
 * restarted from counts).  A forked child starts with its parent's.  0
 * without Lazarus.  Safe from any thread. */
int lazarus_checkpoints(void);
int lazarus_restarts(void);

/* Transactions on the job's files.  The work between two commits is a
 * transaction already (every checkpoint is one's end and the next one's
 * begin; a restart rolls the files back to the last commit), so
 * lazarus_tx_begin() only marks the start, for readers and for CprFS's
 * interface (cprfs.h): 0 in a job, LAZARUS_INACTIVE (also 0) outside one.
 *
 * lazarus_tx_commit() commits the files as they are: a checkpoint, as
 * lazarus_checkpoint() (the same results, *index the checkpoint's).  It
 * works without the runtime too, in a statically linked program (link
 * liblazarus.a: no dynamic loader is needed) that `lazarus run` started:
 * the job is found from the environment the supervisor gives its programs
 * (LAZARUS_DIR) and the commit is asked of the supervisor on DIR/ctl.sock,
 * as `lazarus checkpoint` asks it; LAZARUS_CONTINUED once it is durable, or
 * LAZARUS_ERROR and the supervisor's reason (a job whose program the runtime
 * never entered cannot take a memory checkpoint: "the program is not running
 * under the Lazarus runtime ..."; a files-only job, `run --files-only --fs`,
 * commits its files).
 *
 * lazarus_tx_abort() would roll the files back to the last commit while the
 * program runs on.  Only a files-only job whose files are under Lazarus' file
 * system (`--fs`) can do that; every other job's supervisor refuses it, and
 * the call returns LAZARUS_ERROR with the reason ("abort needs a files-only
 * job with --fs ...").  Restarting from the last commit is the other way.
 *
 * Outside any job (no runtime, no LAZARUS_DIR) each is a no-op returning
 * LAZARUS_INACTIVE, and lazarus_strerror() says so.  Safe from any thread
 * (not from a signal handler): each call waits for its own answer. */
int lazarus_tx_begin(void);
int lazarus_tx_commit(unsigned long long *index);
int lazarus_tx_abort(void);

/* Why this thread's last lazarus_checkpoint(), lazarus_checkpoint_here() or
 * lazarus_tx_commit()/lazarus_tx_abort() returned LAZARUS_ERROR: the one-line
 * reason `lazarus checkpoint` would print; why a lazarus_tx_*() call returned
 * LAZARUS_INACTIVE; "" otherwise (always after the other calls without
 * Lazarus).  Per thread: valid until the thread's next call. */
const char *lazarus_strerror(void);

#ifdef __cplusplus
}
#endif
#endif
