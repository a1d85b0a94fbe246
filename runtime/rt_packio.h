/* Appending a checkpoint's page data to its pack file.
 *
 * A forked writer hands full 8 MiB blocks to a thread of its own that writes
 * them with O_DIRECT: the disk works while the writer hashes and compresses
 * the next frames, and the copy into the page cache (on this machine kind as
 * slow as the disk itself) is skipped.  Written in the pause (C API,
 * LAZARUS_NO_FORK) or where O_DIRECT is refused: plain buffered writes,
 * writeback started as each block goes.  Async-signal-safe: raw system
 * calls, memory from the checkpoint's arena. */
#ifndef LZ_RT_PACKIO_H
#define LZ_RT_PACKIO_H
#include <stddef.h>
#include <stdint.h>

struct rt_arena;
struct rt_packio;

/* Creates PATH (O_TRUNC).  threaded: write from a thread with O_DIRECT when
 * the file system takes it.  NULL on failure, *err = -errno. */
struct rt_packio *rt_packio_open(struct rt_arena *arena, const char *path, int threaded, long *err);

/* Appends n bytes (copied).  0, or -errno of an earlier failed write. */
long rt_packio_append(struct rt_packio *io, const void *p, size_t n);

/* Bytes appended so far: the offset the next byte gets in the file. */
uint64_t rt_packio_offset(const struct rt_packio *io);

/* Writes what is left, sets the size, fsyncs and closes.  0 or -errno. */
long rt_packio_finish(struct rt_packio *io);

/* Stops and closes without caring for the data (the caller unlinks). */
void rt_packio_abort(struct rt_packio *io);
#endif
