/* The checkpoint store: a directory (mode 0700) holding the job's settings,
 * its lock, one directory per committed checkpoint (manifest and the file
 * journal of the interval after it) and packs/ with the page data all
 * checkpoints share.  A checkpoint exists only once its directory has been
 * renamed from tmp.* to ckpt.* (the commit point, ftIO's FIN bit).  A tmp.N.*
 * left by a failed or torn write still holds the file journal of the
 * interval that began at its pause: it becomes jrnl.N (rolled back like a
 * checkpoint's journal); the rest of it, and tmp.*.removing, is garbage. */
#ifndef LZ_STORE_H
#define LZ_STORE_H
#include "manifest.h"
#include "jobid.h"
#include <stddef.h>
#include <stdint.h>

struct lz_job {
    uint64_t id[2];      /* the job's identity, random, made by `run`: every manifest, tree and
                          * journal of the store names it */
    uint64_t interval;   /* seconds, 0 = off */
    uint64_t keep;       /* checkpoints retained */
    char state[16];      /* "running", "finished", "stopped" */
    int exit_status;     /* for finished/stopped: as `lazarus run` exits */
    int durability;      /* 0 process (default), 1 machine */
    char excludes[4096]; /* directories not tracked, '\n'-separated, absolute */
    int64_t stopped_ns;  /* CLOCK_REALTIME when the program was seen gone, 0 = not seen */
    int64_t rolling_to;  /* a file rollback to this checkpoint is under way, -1 = none */
    uint64_t next_index; /* no checkpoint index below it may be given again */
    char compress[32];   /* --compress: "none", "lz4", "zstd", "zstd:LEVEL" ("" = default) */
    int job_stdio;       /* `stdio=job` (run --job-stdio): regular files on the main program's
                          * 0/1/2 are the job's; `stdio=launcher` (default): the launcher's */
    int tcp_refuse;      /* `tcp=refuse` (run --tcp=refuse): a TCP connection to outside fails the
                          * checkpoint; `tcp=reset` (default): it comes back reset */
    /* the remote store each checkpoint is flushed to (run --remote; ARCHITECTURE.md,
     * "Remote store"): its URL and how to reach it, never a secret */
    char remote[512];        /* "s3://BUCKET/PREFIX", "" = none */
    char remote_endpoint[512]; /* --endpoint ("" = AWS_ENDPOINT_URL or AWS's) */
    char remote_ca[512];     /* --ca-file */
    char remote_addressing[16]; /* "path", "virtual", "" = by the endpoint */
    int remote_insecure;     /* --insecure */
    uint64_t keep_remote;    /* --keep-remote N, 0 = all */
    char encrypt_fp[17];     /* run --encrypt-key: the key's fingerprint (never the key nor its
                              * file: a restart gives --encrypt-key again), "" = not encrypted */
    int stream;              /* run -d s3://: this store is the job's spool (fallback): what is
                              * published leaves it (cli/remote_spool.c) */
    /* run --journal-dir: where the file journals live (the JOB subdirectory of it), so that
     * they survive the machine when it is on the file system of the job's files; "" = in DIR */
    char journal_dir[512];
    /* the last checkpoint that failed (shown by `list` while no later one succeeded) */
    uint64_t failed_index;
    int64_t failed_ns;   /* CLOCK_REALTIME */
    char failed_why[512];
    /* the program `run` started (`command=`, its words escaped, shown by `run --resume`), and the
     * XXH3-64 of its exact argv (`command_hash=`, 0: an older store without it) */
    char command[2048];
    uint64_t command_hash;
    /* run --fs PATH [--fs-mode MODE]: directories served by lazarus-fsd (fs/), one
     * "MODE PATH" per line (`fs=MODE PATH`); files_only: run --files-only (no memory
     * checkpoints: a checkpoint is a commit of the files, a restart runs the program anew) */
    char fs[4096];
    int files_only;
};

/* DIR/job: 0; -1 (errno) if it cannot be read; LZ_JOB_DAMAGED if its
 * checksum line is missing or wrong, or it names no job (`id`). */
#define LZ_JOB_DAMAGED (-2)
int lz_job_read(const char *dir, struct lz_job *job);
/* Writes DIR/job atomically (a new file renamed over it), with its checksum. */
int lz_job_write(const char *dir, const struct lz_job *job);
/* The last instant the job could have changed its files (CLOCK_REALTIME
 * ns): when the supervisor recorded that it stopped; or, if it died first,
 * the lock file's mtime -- its last heartbeat (every 250 ms), or when the
 * last of the job's processes found it gone and ended itself
 * (runtime/rt_watch.c), whichever is later -- plus a second for the
 * scheduling between a change and that date; INT64_MAX if not known. */
int64_t lz_job_stop_ns(const char *dir, const struct lz_job *job);
/* A new, random job identity. */
void lz_job_new_id(uint64_t id[2]);

/* Creates DIR (0700) if needed; fails with a message if it is not usable. */
int lz_store_prepare(const char *dir, char *why, size_t whylen);
void lz_ckpt_path(char *buf, size_t len, const char *dir, uint64_t index);
/* Sorted ascending; returns count, -1 on error (errno). *out is malloc'ed. */
int lz_store_list(const char *dir, uint64_t **out);
/* tmp.N.<pid> (a write that failed or was torn) -> jrnl.N; other tmp.* deleted.
 * Call only while no checkpoint is being written. */
void lz_store_cleanup_tmp(const char *dir);
/* Indices of ckpt.* and jrnl.* together, ascending, with is_jrnl[i] telling
 * which (both malloc'ed); the file journals a rollback applies.  -1 on error. */
int lz_store_list_journals(const char *dir, uint64_t **idx, int **is_jrnl);
void lz_jrnl_path(char *buf, size_t len, const char *dir, uint64_t index);
/* The journals' home: DIR itself, or JOURNAL_DIR/JOB when the job was run
 * with --journal-dir (DIR/job says so).  There, like in DIR, ckpt.N/ holds
 * the journal of the interval after checkpoint N, jrnl.N/ a failed one's,
 * tmp.N.PID/ one being made; every function here that lists, removes or
 * cleans up journals works there.  The journal directory of index N
 * (ckpt.N or, is_jrnl, jrnl.N) in it: */
void lz_journal_home(char *out, size_t len, const char *dir);
void lz_journal_path(char *buf, size_t len, const char *dir, uint64_t index, int is_jrnl);

/* Deletes what no retained checkpoint references: packs/pack.N (N at most
 * the newest checkpoint's index: newer ones may be being written), holes
 * punched where a kept pack holds no referenced frame, jrnl.N no kept
 * checkpoint older than N needs.  Holds DIR/gc.lock meanwhile.  Returns 0
 * and what it freed, or -1 with a one-line reason (nothing then deleted). */
struct lz_gc_stats { uint64_t packs_removed, bytes_removed, bytes_punched, journals_removed; };
int lz_store_gc(const char *dir, struct lz_gc_stats *st, char *why, size_t whylen);
/* Makes checkpoint `index` invisible at once (rename), then deletes it; its
 * files.data becomes a spare (LZ_SPARE) if a slot is free. */
int lz_store_remove(const char *dir, uint64_t index);
/* Deletes the spares (when the job stops: the space is the user's) and the
 * job's maps of saved blocks (journal_layout.h: FJ_SAVED). */
void lz_store_drop_spares(const char *dir);
/* Newest-first retention: keeps `keep` checkpoints; also drops checkpoints of
 * an abandoned branch (index > parent of `newest`, < run_first, the first
 * index this run of the job could take). */
void lz_store_retain(const char *dir, uint64_t keep, uint64_t newest, uint64_t run_first);
/* The same, never dropping the checkpoints in protect[] (being flushed to the remote store). */
void lz_store_retain_but(const char *dir, uint64_t keep, uint64_t newest, uint64_t run_first, const uint64_t *protect,
                         size_t nprotect);

/* Holds flock on DIR/lock; returns the fd or -1 (errno EWOULDBLOCK if busy). */
int lz_store_lock(const char *dir);

/* Re-reads every extent of checkpoint `index` and checks its checksum.
 * Returns 0 if intact, -1 with a one-line reason. */
int lz_verify_ckpt(const char *dir, uint64_t index, char *why, size_t whylen);
/* Reads the data files of a part — the data in flight of every pipe and
 * socket (lz_chan_data), the content of every open deleted file — and checks
 * them: 0, or -1 with "checkpoint N is damaged: ...". */
int lz_check_chans(const char *ckpt_dir, const struct lz_image *img, uint64_t index, char *why, size_t whylen);
/* The TCP connections' queued data (inet_data.c): 0, or -1 with why. */
int lz_check_inet_data(const char *ckpt_dir, const struct lz_image *img, uint64_t index, char *why, size_t whylen);
/* Resolves --at N / newest; returns 0 and the index or -1 with a reason. */
/* Whether checkpoint directory ck is a files-only commit (LZ_FILES_ONLY):
 * 1 with its time (CLOCK_REALTIME ns), else 0. */
int lz_ckpt_files_only(const char *ck, uint64_t *created_ns);
int lz_store_pick(const char *dir, int have_at, uint64_t at, uint64_t *index, char *why, size_t whylen);
#endif
