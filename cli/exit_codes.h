/* What `lazarus` exits with: one table for every command, listed in
 * lazarus(1) EXIT STATUS (man/lazarus.1.scd) and ARCHITECTURE.md "Exit status".
 *
 * 0 and 2 are kept as they always were.  Lazarus' own failures use 1 and the
 * range 240..247, which a program rarely exits with and a signal never gives
 * (128+signal is at most 192): `run` and `restart` exit with one of these only
 * when the program never ran (or the restorer did not complete), and once it
 * ran they exit with its status unchanged (128+signal if it was killed); a
 * program that itself exits 1, 2 or 240..247 cannot be told from them, and
 * the manual says so. */
#ifndef LZ_CLI_EXIT_CODES_H
#define LZ_CLI_EXIT_CODES_H

enum lz_exit {
    LZ_EXIT_OK = 0,
    LZ_EXIT_FAIL = 1,          /* any other failure (I/O, permissions, a restore cut short...) */
    LZ_EXIT_USAGE = 2,         /* bad option, value or argument: nothing was done */
    LZ_EXIT_NOT_FOUND = 240,   /* no checkpoint store at DIR, or no checkpoint N (none at all) */
    LZ_EXIT_NOT_RUNNING = 241, /* checkpoint: no job is running with DIR */
    LZ_EXIT_RUNNING = 242,     /* run, restart, rollback: a job is running with DIR already */
    LZ_EXIT_CKPT_FAILED = 243, /* checkpoint: the job did not take it (it said why) */
    LZ_EXIT_DAMAGED = 244,     /* verify found damage; restart, rollback refuse a damaged checkpoint or job file */
    LZ_EXIT_OUTSIDE = 245,     /* restart, rollback refused: files changed outside the job after it stopped */
    LZ_EXIT_REMOTE = 246,      /* the remote store did not answer or refused (run --remote, -d s3://) */
};
#endif
