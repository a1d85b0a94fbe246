/* The recording side of the daemon.  Operations that change a file or a
 * name call the file engine's hooks (files/track.h) on the real objects
 * before they act, exactly as the runtime does inside a program's calls;
 * the engine writes the undo into this daemon's journal of the interval
 * (proc.<pid>/ of the checkpoint, beside the program's).  The gate keeps a
 * commit from falling between a record and the change it undoes: a change
 * and its undo always belong to the same interval. */
#include "fsd.h"
#include <pthread.h>

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int active;   /* changes under way */
static int closed;   /* a commit holds the gate */

void fs_change_begin(void)
{
    pthread_mutex_lock(&gate_lock);
    while (closed) pthread_cond_wait(&gate_cv, &gate_lock);
    active++;
    pthread_mutex_unlock(&gate_lock);
}

void fs_change_end(void)
{
    pthread_mutex_lock(&gate_lock);
    if (--active == 0) pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
}

void fs_gate_close(void)
{
    pthread_mutex_lock(&gate_lock);
    while (closed) pthread_cond_wait(&gate_cv, &gate_lock);
    closed = 1;
    while (active) pthread_cond_wait(&gate_cv, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

void fs_gate_open(void)
{
    pthread_mutex_lock(&gate_lock);
    closed = 0;
    pthread_cond_broadcast(&gate_cv);
    pthread_mutex_unlock(&gate_lock);
}
