/* The supervisor in a batch job (batch_slurm.c): the warning signal, the
 * job's end time, SIGTERM within the grace time, the requeue. */
#ifndef LZ_BATCH_H
#define LZ_BATCH_H
#include <stdint.h>
#include <sys/types.h>

struct supervisor;
struct sv_state;
/* From `run`/`restart` before anything changes: reads the Slurm environment;
 * ckpt_signal: --checkpoint-signal (0: not given).  -1 after one line (a
 * multi-node or multi-task job). */
int batch_setup(int ckpt_signal, const char *cmd);
/* The warning signal the supervisor must catch (0: none). */
int batch_signal_number(void);
/* Inside Slurm: the runtime holds a default SIGTERM for the supervisor
 * (LAZARUS_HOLD_TERM=1 in the program's environment). */
int batch_holds_term(void);
/* Member pid holds a SIGTERM ("TERM SENDER" from runtime/rt_term.c):
 * released at once, or the batch system's SIGTERM. */
void batch_term_held(struct sv_state *st, pid_t pid, long sender);
/* At the supervisor's start: the job's end time and grace, one line. */
void batch_start(const struct supervisor *s);
/* A signal sent to the supervisor: 1 if it was the batch system's (not forwarded). */
int batch_signal(struct sv_state *st, int sig);
/* Every round of the supervisor's loop. */
void batch_tick(struct sv_state *st);
/* A checkpoint committed (ok) or failed; took_ns from request to durable. */
void batch_checkpoint_done(struct sv_state *st, uint64_t index, uint64_t took_ns, int ok);
/* At the end, once the job file says how the job ended (stopped: killed,
 * restartable): requeue if a trigger asked for it.  What `lazarus` exits with. */
int batch_end(int code, int stopped);
/* --checkpoint-signal's value: a signal number, or -1 after one line. */
int batch_parse_signal(const char *name, const char *cmd);
#endif
