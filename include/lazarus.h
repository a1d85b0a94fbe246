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

#ifdef __cplusplus
}
#endif
#endif
