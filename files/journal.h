/* The file undo journal: how the files get back to checkpoint N.
 *
 * Every checkpoint directory ckpt.N/ holds the undo journal of the interval
 * that starts when N commits: `files.log` (records below), `files.data` (the
 * old bytes DATA records point at) and `files.keep/` (hard links to inodes
 * whose names the job changed — renamed away, unlinked, replaced, or reached
 * through a name made since N — and directories it removed, named
 * <dev>.<ino> in hex).  Records are written *before* the change
 * they undo (write-ahead), each checksummed (DATA records also the bytes
 * they point at).
 *
 * A log proves its own extent, so that damage is never mistaken for the end:
 * - it begins with a BEGIN record naming the job, the interval (N) and the
 *   process, so a log of another job, interval or process is refused; a new
 *   log is written as files.log.new with its BEGIN and renamed, so a
 *   files.log is never seen without it;
 * - a record is committed by its magic, stored last (header and payload go
 *   first with magic 0): a record torn by SIGKILL has magic 0, and a record
 *   with the magic and a wrong checksum is damage, never a torn write;
 * - a log that is let go (the interval ends at the next checkpoint, or the
 *   process exits) ends with an END record counting the records before it,
 *   and is cut there;
 * - a log still open when the job was killed ends in zeros (its window is
 *   allocated ahead of the records, and a record never fills it to the last
 *   byte): after the last record comes at most one torn record (magic 0),
 *   then zeros to the end of the file.
 * Anything else — bytes after END, a record with a bad checksum, a valid
 * record after the zeros, a log cut at a record boundary — is damage, and
 * the rollback refuses it by name before it changes anything.
 *
 * Every record states an absolute fact about checkpoint N ("path P was
 * absent", "bytes [o, o+n) of inode I were ...", "inode I was S bytes long"),
 * never a relative step.  Rolling back to N applies the journals of N' >= N
 * newest first; applying any suffix again gives the same files, so a crash
 * during a rollback is repaired by rolling back again (ftIO's idempotent
 * commit, without its FIN bit: the checkpoints > N disappearing is the end).
 *
 * Every process of the job keeps its own journal of the interval: the
 * directory's top-level files belong to the process that made it (the job's
 * program for ckpt.N/), the journal of any other process is in a
 * subdirectory proc.<pid>/ with the same three entries, nested as the
 * processes are (ckpt.N/proc.120/proc.135/: 135 was forked by 120).  The
 * journals of an interval are jdir's and every proc.* one's, recursively.
 * Each record carries a stamp (CLOCK_MONOTONIC, taken after the old state
 * was read and before the change): rolling back applies the records of all
 * of them as if merged in stamp order, so "the first record wins" holds
 * across processes. */
#ifndef LZ_JOURNAL_H
#define LZ_JOURNAL_H
#include "format.h"
#include "journal_layout.h" /* the names: FJ_LOG, FJ_DATAFILE, FJ_KEEP, FJ_PROC_PREFIX, ... */
#include <stdint.h>

#define FJ_REC_MAGIC 0x4a465a4cu /* "LZFJ" */
#define FJ_BLOCK 4096u           /* granule of saved data: each block at most once per interval */
#define FJ_DATA_MAX (1u << 20)   /* data bytes per DATA record */

enum fj_type {
    FJ_INODE = 1, /* struct fj_inode + path: an inode's size, mode, times at N */
    FJ_DATA = 2,  /* struct fj_data: its content at N in [offset, offset+length), kept in files.data */
    FJ_NAME = 3,  /* struct fj_name + path + target: what a path was at N */
    FJ_MOVED = 4, /* struct fj_moved + path: a directory of N was moved there */
    FJ_DIRTIME = 5, /* struct fj_dirtime + path: a directory's times at N */
    FJ_BEGIN = 6, /* struct fj_begin: the first record of every log */
    FJ_END = 7,   /* struct fj_end: the last record of a log that was let go */
};
#define FJ_TYPE_MAX FJ_END

struct fj_rec {
    uint32_t magic;
    uint16_t type;
    uint16_t flags;
    uint32_t len;   /* payload bytes after this header */
    uint32_t check; /* low 32 bits of XXH3-64 of header (check = 0) and payload */
    uint64_t stamp; /* CLOCK_MONOTONIC ns, after the old state was read, before the change:
                     * across the journals of one interval, the smallest stamp is the state at N */
};

/* An INODE is found as files.keep/<dev>.<ino> if its names changed in the
 * interval, else at its path (its name at N once names are restored). */

struct fj_inode {
    uint64_t dev, ino;
    uint64_t size;
    uint32_t mode, uid, gid, pad;
    int64_t atime_ns, mtime_ns;
    /* then the path it had when first changed, NUL-terminated */
};

/* The bytes go to files.data first, whole pages at page-aligned offsets
 * (a partial page written at the end of a file is zeroed around by the file
 * system, which cost more than the copy itself), then this record. */
struct fj_data {
    uint64_t dev, ino;
    uint64_t offset;   /* in the file */
    uint64_t data_off; /* in files.data, a multiple of 4096 */
    uint64_t length;
    uint64_t xxh3;     /* XXH3-64 of the `length` bytes saved */
};

/* The log's header: its first record, magic "LZFJ" at offset 0, type BEGIN. */
struct fj_begin {
    uint64_t job[2];  /* the job's identity (DIR/job `id`) */
    uint64_t index;   /* the interval: the one after checkpoint `index` (ckpt.N/ or jrnl.N/) */
    int32_t pid;      /* the process whose journal this is (as the job sees it) */
    uint32_t version; /* FJ_VERSION; 0 in logs of checkpoint format 5 (the same records) */
};
#define FJ_VERSION 1u /* a reader refuses a log of a newer version by name */

struct fj_end {
    uint64_t records; /* records before this one, BEGIN included */
};

enum fj_was { FJ_WAS_ABSENT = 0, FJ_WAS_FILE = 1, FJ_WAS_DIR = 2, FJ_WAS_SYMLINK = 3, FJ_WAS_OTHER = 4 };
#define FJ_NAME_COPIED 1u /* FILE kept as a copy files.keep/<dev>.<ino> (no link possible) */
#define FJ_INODE_KEPT 1u  /* INODE: linked into this journal's files.keep/ before the record */

struct fj_name {
    uint32_t was;   /* enum fj_was */
    uint32_t mode, uid, gid;
    uint64_t dev, ino, rdev;
    int64_t atime_ns, mtime_ns;
    int64_t btime_ns; /* a directory's birth time: inode numbers are reused, identities are not */
    /* then the path, NUL, and for a symlink its target, NUL */
};

struct fj_moved {
    uint64_t dev, ino;
    /* then the path the directory was moved to, NUL-terminated */
};

struct fj_dirtime {
    int64_t atime_ns, mtime_ns;
    /* then the directory's path, NUL-terminated */
};

_Static_assert(sizeof(struct fj_rec) == 24, "fj_rec");
_Static_assert(sizeof(struct fj_inode) == 56, "fj_inode");
_Static_assert(sizeof(struct fj_data) == 48, "fj_data");
_Static_assert(sizeof(struct fj_begin) == 32, "fj_begin");
_Static_assert(sizeof(struct fj_end) == 8, "fj_end");
_Static_assert(sizeof(struct fj_name) == 64, "fj_name");

/* Name of the keep link of an inode, "<dev>.<ino>" in hex. */
static inline void fj_keep_name(char out[40], uint64_t dev, uint64_t ino)
{
    static const char hx[] = "0123456789abcdef";
    char *p = out;
    for (int s = 60; s >= 0; s -= 4) if ((dev >> s) || s == 0) *p++ = hx[(dev >> s) & 15];
    *p++ = '.';
    int started = 0;
    for (int s = 60; s >= 0; s -= 4) {
        unsigned d = (ino >> s) & 15;
        if (d || started || s == 0) { *p++ = hx[d]; started = 1; }
    }
    *p = 0;
}
#endif
