/* Store maintenance shared by store.c, gc.c and the commands that drop data
 * (`run`, `restart`); the runtime and the restorer need none of it. */
#ifndef LZ_STORE_ADMIN_H
#define LZ_STORE_ADMIN_H
#include "store.h"

/* st_blocks counts 512-byte units, whatever the file system's block size:
 * the bytes a file takes on disk (gc, list). */
#define LZ_ST_BLOCK_BYTES 512

/* Waits for and holds DIR/gc.lock (created 0600).  Whoever deletes a
 * checkpoint or pack data holds it, so a gc never sees a checkpoint vanish
 * between reading what it references and deleting what it does not.
 * Returns the descriptor to close, or -1 (errno). */
int lz_gc_lock(const char *dir);
/* lz_store_gc() for a caller already holding gc.lock. */
int lz_store_gc_locked(const char *dir, struct lz_gc_stats *st, char *why, size_t whylen);
/* Makes jrnl.N invisible at once (renamed to tmp.*), then deletes it: a
 * journal is never seen half deleted by a rollback. */
int lz_jrnl_remove(const char *dir, uint64_t index);
/* Removes ckpt.N and jrnl.N for after < N < before, newest first: the branch
 * a restart from `after` abandoned. */
void lz_store_drop_branch(const char *dir, uint64_t after, uint64_t before);
/* Deletes every pack and every jrnl.* under gc.lock: a new job has no use for
 * a finished one's data. */
void lz_store_clear_data(const char *dir);
/* For `show`: every pack of the store, with the bytes of it the retained
 * checkpoints reference (the rest is what `gc` frees or punched already).
 * Reads only, takes no lock.  0 and *out malloc'ed, or -1 with why. */
struct lz_pack_usage {
    char name[64];        /* pack.N or pack.N.PID */
    uint64_t index;       /* N */
    int32_t pid;          /* PID of a pack.N.PID (another process's part), 0 */
    uint64_t size;        /* st_size */
    uint64_t disk_bytes;  /* st_blocks: holes punched by gc take none */
    uint64_t live_bytes;  /* referenced by a retained checkpoint's frames */
};
int lz_store_pack_usage(const char *dir, struct lz_pack_usage **out, size_t *count, char *why, size_t whylen);
#endif
