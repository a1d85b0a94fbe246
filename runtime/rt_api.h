/* The runtime's side of the fuller C API (lazarus.h): critical sections
 * (rt_disable.c), hooks (rt_api_hooks.c) and what a program may ask about
 * its checkpoints (rt_api_info.c).  Called from the checkpoint handler:
 * raw system calls and atomics only, unless said otherwise. */
#ifndef RT_API_H
#define RT_API_H
#include <stdint.h>
#include <stddef.h>

struct rt_ckpt;

/* rt_disable.c.  The checkpointing thread waits, before it stops any
 * thread, until no thread of the process is in a lazarus_disable() section
 * (0: none was; 1: it waited), or fails the checkpoint naming the section
 * (-1, ck->err set).  The
 * wait ends with the checkpoint's threads released (rt_disable_release). */
int rt_disable_wait(struct rt_ckpt *ck);
void rt_disable_release(void);
/* This thread's nesting of sections (it defers requests while > 0). */
int rt_disable_depth(void);
/* A checkpoint request this thread defers: tells the supervisor once why
 * ("HELD N disabled"), for the line naming the process if it waits too long. */
void rt_disable_held(uint64_t index);
void rt_disable_forked(void);

/* rt_api_hooks.c.  The events, as lazarus.h numbers them (the runtime does
 * not include it: scripts/check_layers.sh). */
enum { RT_EV_BEFORE = 1, RT_EV_AFTER = 2, RT_EV_RESTART = 3 };
/*  1: the request (si_value v) waits for the process's
 * before-checkpoint hooks, which the hooks thread runs and then sends the
 * request again; 0: go on with it. */
int rt_hooks_hold(uint64_t v);
/* After checkpoint `index` (taken or failed), the process continuing: its
 * after-checkpoint hooks are due. */
void rt_hooks_after(uint64_t index);
/* After a restart, the threads let go: its after-restart hooks are due. */
void rt_hooks_restarted(void);
/* A restored thread, let go (signal handler context): waits until the
 * after-restart hooks ran (at most 10 s); at once on the hooks thread or
 * without such hooks. */
void rt_hooks_gate_wait(void);
/* 1 if this thread is the hooks thread. */
int rt_hooks_self(void);
/* Waits until the hooks due have run (a C API caller: normal context). */
void rt_hooks_wait_idle(void);
void rt_hooks_forked(void);

/* rt_api_info.c.  A checkpoint's end in this process: taken (captured), or
 * not with its reason. */
void rt_api_taken(uint64_t index, int ok, const char *why);
/* In the restored program (before rt_hooks_restarted). */
void rt_api_restarted(void);
/* The reason of the last failed checkpoint (process-wide). */
const char *rt_api_last_reason(void);
/* The reason the supervisor gave in its ABORT (rt_job_wait). */
void rt_api_abort_reason(const char *why);
/* The reason of the C API call's failure, for this thread's lazarus_strerror(). */
void rt_api_set_error(const char *why);
uint32_t rt_api_restarts(void);
#endif
