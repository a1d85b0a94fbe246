/* The job's life as a restart sees it: when it was last alive, and how it
 * ends.
 *
 * A restart takes a change to the job's files for someone else's if it
 * came after the job could no longer have made it (files/outside.c).  That
 * instant is in DIR/job when the supervisor lived to write it (stopped_ns);
 * otherwise DIR/lock's modification time dates the job's last sign of life
 * (store/store.c, lz_job_stop_ns):
 * - the supervisor sets it every 250 ms from a thread of its own, so that a
 *   loop busy for seconds (a commit's fsync on a loaded disk, a gc) does not
 *   leave it stale;
 * - a process of the job that finds its supervisor gone sets it before it
 *   ends itself (runtime/rt_watch.c): the job's processes never outlive
 *   their supervisor by more than the moment they need to notice.
 * When the main program ends, the job ends:
 * - it exited: the job finished; a process of it still running goes on, no
 *   longer a member (nothing will checkpoint it): its runtime finds the job
 *   finished in DIR/job, written before the supervisor exits;
 * - it was killed: the job is stopped, to be restarted from a checkpoint
 *   with all its processes; the others end too.  Each one's channel is shut
 *   (its runtime ends the process, as when the supervisor dies), and the
 *   supervisor waits until each channel is closed before it writes the
 *   instant the job stopped: a change after it is no one's in the job. */
#include "sv.h"
#include "util.h"
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BEAT_NS (250ull * 1000000ull)
/* How long the processes of a killed job get to end (they need only to be
 * scheduled once); one that has not by then dates its own end on DIR/lock. */
#define END_WAIT_NS (5ull * 1000000000ull)

static struct {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fd, running, stop;
} beat = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .fd = -1};

static void *beat_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&beat.mu);
    while (!beat.stop) {
        futimens(beat.fd, NULL);
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        uint64_t ns = (uint64_t)t.tv_nsec + BEAT_NS;
        t.tv_sec += (time_t)(ns / 1000000000ull);
        t.tv_nsec = (long)(ns % 1000000000ull);
        while (!beat.stop && pthread_cond_timedwait(&beat.cv, &beat.mu, &t) != ETIMEDOUT) {}
    }
    pthread_mutex_unlock(&beat.mu);
    return NULL;
}

void sv_beat_start(int lock_fd)
{
    if (beat.running || lock_fd < 0) return;
    beat.fd = lock_fd;
    beat.stop = 0;
    /* without it (no thread), the last beat is the supervisor's start: a
     * restart then refuses what the job changed since, never the reverse */
    if (pthread_create(&beat.thread, NULL, beat_main, NULL) == 0) beat.running = 1;
    else lz_warn("cannot start the heartbeat thread: %s", strerror(errno));
}

void sv_beat_stop(void)
{
    if (!beat.running) return;
    pthread_mutex_lock(&beat.mu);
    beat.stop = 1;
    pthread_cond_signal(&beat.cv);
    pthread_mutex_unlock(&beat.mu);
    pthread_join(beat.thread, NULL);
    beat.running = 0;
}

/* One message on a channel, for nothing but its descriptor (a JOIN's new
 * channel, a writer's pipe): its size (0: end of file), -1 when none waits. */
static ssize_t take(int chan, int *fd)
{
    char msg[1200];
    ssize_t m = sv_recv_message(chan, msg, sizeof msg, fd);
    if (m > 0 && *fd >= 0 && strncmp(msg, "JOIN ", 5)) { close(*fd); *fd = -1; }
    return m;
}

void sv_end_members(struct sv_state *st, int finished)
{
    if (finished) return;
    /* the channels to wait for: ours are closed with the table later; a
     * process that joins meanwhile brings one more, which is ours to close */
    size_t n = st->nmembers, cap = n + 16;
    struct pollfd *pf = malloc(cap * sizeof *pf);
    char *mine = calloc(cap, 1);
    if (!pf || !mine) { free(pf); free(mine); return; }
    for (size_t i = 0; i < n; i++) {
        pf[i] = (struct pollfd){st->members[i].chan, POLLIN, 0};
        shutdown(pf[i].fd, SHUT_WR);
    }
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    size_t open = n;
    while (open && lz_now_ns(CLOCK_MONOTONIC) - t0 < END_WAIT_NS) {
        if (poll(pf, (nfds_t)n, 20) <= 0) continue;
        for (size_t i = 0; i < n; i++) {
            if (pf[i].fd < 0 || !pf[i].revents) continue;
            int fd;
            ssize_t m;
            while ((m = take(pf[i].fd, &fd)) > 0) {
                if (fd < 0) continue;
                shutdown(fd, SHUT_WR);
                if (n == cap) { close(fd); continue; } /* it ends all the same: it was told */
                pf[n] = (struct pollfd){fd, POLLIN, 0};
                mine[n++] = 1;
                open++;
            }
            if (m == 0 || (m < 0 && errno != EAGAIN && errno != EINTR)) {
                if (mine[i]) close(pf[i].fd);
                pf[i].fd = -1; /* the process is gone (and any that held its channel) */
                open--;
            }
        }
    }
    for (size_t i = 0; i < n; i++) if (mine[i] && pf[i].fd >= 0) close(pf[i].fd);
    if (open) lz_warn("%zu process(es) of the job had not ended %.0f s after its main program was killed",
                      open, END_WAIT_NS / 1e9);
    free(pf);
    free(mine);
}
