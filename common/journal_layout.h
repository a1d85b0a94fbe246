/* The file journal's layout on disk: the names of its pieces, the one home
 * of what both its writer and reader (files/: journal.h has the records)
 * and the store (store/: it keeps a journal directory's entries, renames a
 * torn write's journal to jrnl.N, recycles files.data) must agree on.
 *
 * A journal directory (ckpt.N/, jrnl.N/, or a process's proc.<pid>/ below
 * either) holds FJ_LOG, FJ_DATAFILE, FJ_KEEP/, while it is being emptied
 * FJ_RESET, and the journals of the job's other processes in
 * FJ_PROC_PREFIX<pid>/; the store directory itself holds FJ_ALIAS, while
 * a rollback runs FJ_REBUILD, and while a job runs FJ_SAVED<N>. */
#ifndef LZ_JOURNAL_LAYOUT_H
#define LZ_JOURNAL_LAYOUT_H
#include "format.h"

#define FJ_LOG "files.log"        /* the records (files/journal.h) */
#define FJ_DATAFILE "files.data"  /* saved bytes, in whole 4 KiB pages at aligned offsets; may be a
                                   * recycled spare (LZ_SPARE), or hold a window allocated ahead by a
                                   * process killed (files/track_data.c): bytes past the last DATA
                                   * record mean nothing */
#define FJ_KEEP "files.keep"      /* hard links to inodes whose names the job changed, <dev>.<ino> */
#define FJ_PROC_PREFIX LZ_PROC_PREFIX /* proc.<pid>/: the journal of another process of the job, in
                                       * that process's part of the checkpoint */
/* Left in a journal directory while the rollback empties it: its journals
 * count as empty (a part of them alone would not say what N was). */
#define FJ_RESET "files.reset"
/* Copies made by rollbacks (files kept as copies across file systems) stand
 * for the inode of N they replaced, also in later rollbacks: DIR/files.alias,
 * one "dev ino copy-dev copy-ino" line each. */
#define FJ_ALIAS "files.alias"
/* The inodes a rollback rebuilds from the journals, kept while it runs so
 * that a rollback finished again rebuilds the same ones: DIR/files.rebuild. */
#define FJ_REBUILD "files.rebuild"
/* The blocks saved in interval N by any process of the job, DIR/files.saved.N:
 * a cache the running job's processes share (files/track_shared.c), never
 * read by a rollback; removed when a job starts, restarts or ends. */
#define FJ_SAVED "files.saved."
#endif
