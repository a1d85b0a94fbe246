/* lazarus_checkpoint_here() (libckpt's checkpoint_here): a checkpoint at a
 * point the program chose, unless one was taken less than `mintime` ago
 * (run --mintime; any checkpoint counts, whatever asked for it).  Unlike
 * lazarus_checkpoint() it returns once the checkpoint is taken, its writer
 * going on beside the program (as libckpt's forked checkpoint; with
 * --no-fork, once it is durable). */
#include "rt.h"

RT_API int lazarus_rt_checkpoint_here(unsigned long long *index)
{
    if (index) *index = 0;
    if (!rt.active || rt.ctl_fd < 0) return 0; /* LAZARUS_INACTIVE */
    uint64_t now = rt_now_ns(CLOCK_MONOTONIC);
    if (now - rt.last_ckpt_ns < rt.mintime_ns) return 0;
    return rt_api_checkpoint(index, "HERE");
}
