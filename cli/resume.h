/* lazarus run --resume (resume.c): what a rerun of the same command line does. */
#ifndef LZ_RESUME_H
#define LZ_RESUME_H
#include <stddef.h>
#include <stdint.h>

enum resume_what {
    RESUME_START,    /* nothing to resume: start the program */
    RESUME_RESTART,  /* restart from the newest checkpoint (or *at, an interrupted rollback's) */
    RESUME_FINISHED, /* the job finished: exit with *exit_status */
    RESUME_REFUSE,   /* said why on stderr: exit with *exit_status (exit_codes.h) */
};
/* Called with DIR/lock held (flock): decides from the job file, the
 * checkpoints and the heartbeat, and says its decision in one line. */
enum resume_what resume_decide(const char *dir, const char *shown, char **argv, int *exit_status, int64_t *at);
/* argv as one line for the job file (`command=`, words escaped) and the
 * XXH3-64 of its exact bytes (never 0). */
void resume_command(char **argv, char *text, size_t len, uint64_t *hash);
/* `lazarus restart -d DIR [--at N] [--compress SPEC]`, exactly (DIR/lock released first). */
int resume_restart(const char *shown, int64_t at, const char *compress, int ckpt_signal);
#endif
