/* POSIX timers made again with their ids (format.h, lz_timer), once every
 * thread exists (a SIGEV_THREAD_ID timer names one: the program's, or the
 * runtime's helper thread of a SIGEV_THREAD timer, runtime/rt_timers.c) and
 * before any runs: every thread still blocks every signal.
 *
 * Ids: Linux 6.17's PR_TIMER_CREATE_RESTORE_IDS makes timer_create take the
 * id wanted from *timerid; the next id the kernel gives is then the last one
 * made plus one, so the timers are made in increasing order with the one just
 * before the recorded next id last (a placeholder is made and deleted if no
 * timer has that id).  Without it the kernel gives ids in increasing order
 * from 0 in a new process: timers are made in order and the ids between
 * deleted, which keeps every id as long as the ids did not wrap.
 *
 * Time, as for timerfd (restore_events.c): a relative timer keeps the time it
 * had left (the downtime is not counted); an absolute one (TIMER_ABSTIME)
 * keeps its expiry on its clock: if that passed while the job was down, the
 * kernel fires it at once and, for a periodic one, counts the intervals missed
 * as its overrun, as it would have.  The overrun of the last expiry before the
 * checkpoint is not restored (LIMITS.md).
 *
 * Raw system calls only: this runs after the program's memory is in place. */
#include "restorer.h"
#include "lzsys.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>

#ifndef PR_TIMER_CREATE_RESTORE_IDS
#define PR_TIMER_CREATE_RESTORE_IDS 77
#define PR_TIMER_CREATE_RESTORE_IDS_OFF 0
#define PR_TIMER_CREATE_RESTORE_IDS_ON 1
#endif
#define MAX_PLACEHOLDERS (1 << 20)

int restore_timer_ids_off;

static struct sigevent sigevent_of(const struct lz_timer *t)
{
    struct sigevent k;
    memset(&k, 0, sizeof k);
    k.sigev_notify = t->notify;
    k.sigev_signo = t->signo;
    k.sigev_value.sival_ptr = (void *)(uintptr_t)t->value;
    k._sigev_un._tid = t->tid;
    return k;
}

static void make(const struct lz_timer *t, int with_ids)
{
    struct sigevent k = sigevent_of(t);
    int id = t->id;
    long r = lz_sc3(SYS_timer_create, t->clockid, &k, &id);
    for (int n = 0; r == 0 && !with_ids && id < t->id && n < MAX_PLACEHOLDERS; n++) {
        lz_sc1(SYS_timer_delete, id); /* an id between: the next one the kernel gives is higher */
        r = lz_sc3(SYS_timer_create, t->clockid, &k, &id);
    }
    if (r < 0)
        restore_fail("cannot make POSIX timer %d again (clock %d, signal %d%s): %s", t->id, t->clockid, t->signo,
                     t->notify == 4 ? ", aimed at a thread" : "", strerror((int)-r));
    if (id != t->id)
        restore_fail("cannot give POSIX timer %d its id back (the kernel gave %d): Linux 6.17's "
                     "PR_TIMER_CREATE_RESTORE_IDS is needed for it", t->id, id);
}

static struct timespec ts_of(int64_t ns) { return (struct timespec){(time_t)(ns / 1000000000ll), (long)(ns % 1000000000ll)}; }

void restore_timers(const struct lz_image *img)
{
    int next = -1;
    size_t n = 0;
    for (size_t i = 0; i < img->ntimers; i++) {
        if (img->timers[i].kind == LZ_TM_NEXT) next = img->timers[i].id;
        else n++;
    }
    if (!n && next <= 0) return;
    int with_ids = !restore_timer_ids_off &&
                   lz_sc5(SYS_prctl, PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_ON, 0, 0, 0) == 0;
    /* in increasing id order (selection: a few timers), the one before `next` last */
    const struct lz_timer *last = NULL;
    int prev = -1;
    for (size_t made = 0; made < n; made++) {
        const struct lz_timer *lo = NULL;
        for (size_t i = 0; i < img->ntimers; i++) {
            const struct lz_timer *t = &img->timers[i];
            if (t->kind == LZ_TM_TIMER && t->id > prev && (!lo || t->id < lo->id)) lo = t;
        }
        prev = lo->id;
        if (with_ids && lo->id == next - 1) { last = lo; continue; }
        make(lo, with_ids);
    }
    if (last) {
        make(last, with_ids);
    } else if (with_ids && next > 0) {
        struct lz_timer hold = {.kind = LZ_TM_TIMER, .id = next - 1, .clockid = CLOCK_MONOTONIC, .notify = SIGEV_NONE};
        make(&hold, 1);
        lz_sc1(SYS_timer_delete, hold.id);
    }
    if (with_ids) lz_sc5(SYS_prctl, PR_TIMER_CREATE_RESTORE_IDS, PR_TIMER_CREATE_RESTORE_IDS_OFF, 0, 0, 0);
    for (size_t i = 0; i < img->ntimers; i++) {
        const struct lz_timer *t = &img->timers[i];
        if (t->kind != LZ_TM_TIMER || !t->value_ns) continue;
        struct itimerspec its = {ts_of(t->interval_ns), ts_of(t->value_ns)};
        long r = lz_sc4(SYS_timer_settime, t->id, (t->flags & LZ_TMF_ABSTIME) ? TIMER_ABSTIME : 0, &its, NULL);
        if (r < 0) restore_fail("cannot arm POSIX timer %d: %s", t->id, strerror((int)-r));
    }
}
