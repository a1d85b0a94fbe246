/* CprFS's transaction interface (Xue, Chen and Zheng, "CprFS: a user-level
 * file system to support consistent file states for checkpoint and restart",
 * ICS'08, section 3.2) on Lazarus' (lazarus.h): a program written for it
 * builds unchanged.  Link with -llazarus (or liblazarus.a for a static
 * program).  The paper names the calls and not their arguments; none is
 * needed here, so each takes none.
 *
 * cprfs_commit_tran() and cprfs_abort_tran() return 0 when done, 1 when
 * there was nothing to do (not in a Lazarus job: LAZARUS_INACTIVE), -1 when
 * they failed (lazarus_strerror() says why in both cases).
 * cprfs_commit_tran() after `lazarus restart` from that commit returns 0
 * again in a program the runtime restored (a statically linked program starts
 * again from its beginning instead). */
#ifndef LAZARUS_CPRFS_H
#define LAZARUS_CPRFS_H
#include <lazarus.h>
#ifdef __cplusplus
extern "C" {
#endif

/* Marks the start of a transaction (the work since the last commit is one
 * already): always 0, as lazarus_tx_begin(). */
static inline int cprfs_begin_tran(void)
{
    return lazarus_tx_begin();
}

/* Commits the job's files as they are (a checkpoint: lazarus_tx_commit). */
static inline int cprfs_commit_tran(void)
{
    int r = lazarus_tx_commit(0);
    return r < 0 ? -1 : r == LAZARUS_INACTIVE;
}

/* Rolls the files back to the last commit, the program going on: a
 * files-only job with --fs only (lazarus_tx_abort); -1 in any other job. */
static inline int cprfs_abort_tran(void)
{
    int r = lazarus_tx_abort();
    return r < 0 ? -1 : r == LAZARUS_INACTIVE;
}

#ifdef __cplusplus
}
#endif
#endif
