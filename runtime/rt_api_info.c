/* What a program may ask the runtime about itself through the C API
 * (lazarus.h): whether it runs under Lazarus, its store, how many
 * checkpoints and restarts it has been through, and why the last C API
 * checkpoint failed.
 *
 * The counts live in the program's memory, so a restart brings back those of
 * the checkpoint it restarts from (a checkpoint counts in its own image: it
 * is counted again in the restored program), and they add up across
 * restarts: since the program's start, not since this run. */
#include "rt.h"
#include "rt_api.h"

static volatile uint32_t taken;    /* checkpoints this process took part in (captured) */
static volatile uint32_t restarts; /* restarts it went through */
static char last_reason[700];      /* of the last failed checkpoint (written by the checkpointing thread) */
static char abort_reason[700];     /* the supervisor's, from its ABORT */
/* the reason of this thread's last C API failure, for lazarus_strerror() */
static __thread char thread_error[700] __attribute__((tls_model("initial-exec")));

void rt_api_abort_reason(const char *why) { rt_fmt(abort_reason, sizeof abort_reason, "%s", why); }

void rt_api_taken(uint64_t index, int ok, const char *why)
{
    (void)index;
    if (ok) { __atomic_add_fetch(&taken, 1, __ATOMIC_RELEASE); return; }
    if (why && *why) rt_fmt(last_reason, sizeof last_reason, "%s", why);
    else if (abort_reason[0]) rt_fmt(last_reason, sizeof last_reason, "%s", abort_reason);
    else rt_fmt(last_reason, sizeof last_reason, "the checkpoint of the job failed");
    abort_reason[0] = 0;
}

void rt_api_restarted(void)
{
    __atomic_add_fetch(&taken, 1, __ATOMIC_RELEASE); /* the one restarted from */
    __atomic_add_fetch(&restarts, 1, __ATOMIC_RELEASE);
    abort_reason[0] = 0;
}

const char *rt_api_last_reason(void) { return last_reason; }
void rt_api_set_error(const char *why) { rt_fmt(thread_error, sizeof thread_error, "%s", why); }
uint32_t rt_api_restarts(void) { return __atomic_load_n(&restarts, __ATOMIC_ACQUIRE); }

RT_API int lazarus_rt_is_enabled(void) { return rt.active && rt.ctl_fd >= 0; }

RT_API const char *lazarus_rt_store_dir(void) { return rt.active ? rt.dir : NULL; }

RT_API int lazarus_rt_checkpoints(void) { return rt.active ? (int)__atomic_load_n(&taken, __ATOMIC_ACQUIRE) : 0; }

RT_API int lazarus_rt_restarts(void) { return rt.active ? (int)rt_api_restarts() : 0; }

RT_API const char *lazarus_rt_strerror(void) { return thread_error; }
