/* libckpt's interface (Plank, Beck, Kingsley, Li 1995) on Lazarus.  Rename
 * the program's main() to ckpt_target() and link with -lckpt (static or
 * shared): started plainly, the program checkpoints itself (every `maxtime`
 * seconds, 600 by default, and at checkpoint_here()); `prog =recover`
 * resumes it from its newest checkpoint.  A .ckptrc in the current directory
 * sets checkpointing on|off, dir, maxtime, mintime, incremental, fork and
 * maxfiles as libckpt's did.  main() returns what ckpt_target returns. */
#ifndef LIBCKPT_H
#define LIBCKPT_H
#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_DEAD 1     /* not read before next written: left out, back as zeros */
#define CKPT_READONLY 2 /* not written until included: stored once, then referred to */

/* A checkpoint here, unless one was taken less than `mintime` seconds ago. */
void checkpoint_here(void);
/* Leave [addr, addr+size) out of the next checkpoints (usage: CKPT_DEAD or
 * CKPT_READONLY) until include_bytes; calls need not match. */
void exclude_bytes(char *addr, int size, int usage);
void include_bytes(char *addr, int size);

#ifdef __cplusplus
}
#endif
#endif
