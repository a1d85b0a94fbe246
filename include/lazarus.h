/* Lazarus C API.  Link with -llazarus.  Every call is a harmless no-op when
 * the program runs without Lazarus. */
#ifndef LAZARUS_H
#define LAZARUS_H
#ifdef __cplusplus
extern "C" {
#endif

enum {
    LAZARUS_ERROR = -1,    /* the checkpoint failed; the program continues */
    LAZARUS_INACTIVE = 0,  /* not running under Lazarus: nothing was done */
    LAZARUS_CONTINUED = 1, /* a checkpoint was taken and is durable; carry on */
    LAZARUS_RESTARTED = 2, /* the program was restarted from this checkpoint */
};

/* Takes a checkpoint now and returns once it is durable (LAZARUS_CONTINUED),
 * or, after `lazarus restart` from that checkpoint, returns again
 * LAZARUS_RESTARTED.  *index (if not NULL) gets the checkpoint's index. */
int lazarus_checkpoint(unsigned long long *index);

#ifdef __cplusplus
}
#endif
#endif
