/* thread_probe: per-thread state that a checkpoint must carry over, printed
 * before a checkpoint and after the program resumes.
 *
 *   thread_probe               (normally under `lazarus run -i 0`)
 *
 * Threads, each with its own name (pthread_setname_np), signal mask
 * (pthread_sigmask), alternate signal stack (sigaltstack, or none) and
 * __thread values:
 *   main       sets its name to "probe-main"
 *   th-cond    blocked in pthread_cond_wait
 *   th-sem     blocked in sem_wait
 *   th-futex   blocked in a raw FUTEX_WAIT; exits with 77 when woken
 *   th-join    blocked in pthread_join(th-futex)
 *   th-spin    running: a loop whose state lives in registers and TLS
 *   th-sig     blocked in pthread_cond_wait, SIGUSR2 and SIGRTMIN+3 blocked;
 *              main sends it SIGUSR2 (pthread_kill) and SIGRTMIN+3 with the
 *              value 4242 (pthread_sigqueue) before the "before" lines, so
 *              both are pending for it alone
 * Once every thread has recorded its state and all but th-spin sit in the
 * futex system call (/proc/self/task/TID/syscall), the program prints
 *
 *   start pid=P
 *   before NAME tid=T comm=C mask=M alt=SP/SIZE/FLAGS tls=V tlsaddr=A pending=S
 *   ready
 *
 * and waits for a file named "go" in its working directory (checked every
 * 20 ms).  Then it wakes the threads one at a time (each records its state
 * again first thing, with th-sig still holding its signals) and prints
 *
 *   after NAME ...                       (same fields)
 *   kill0 E E E E E E                    (pthread_kill(t, 0) of each other
 *                                         thread, before it is woken: 0 or ESRCH)
 *   joined 77                            (th-join's pthread_join result)
 *   spin ok | spin BAD ...               (th-spin's registers and TLS agree)
 *   sig SIGNO code=C pid=self|N value=V  (th-sig's pending signals, taken
 *                                         with sigtimedwait; value 0 for SIGUSR2)
 *   done
 *
 * mask, pending: the first 64 signals as hex; pending = sigpending() (the
 * thread's own and the process's).  EINTR from sem_wait/futex is counted on
 * stderr ("eintr N").
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/futex.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { T_MAIN, T_COND, T_SEM, T_FUTEX, T_JOIN, T_SPIN, T_SIG, NT };
static const char *names[NT] = {"probe-main", "th-cond", "th-sem", "th-futex", "th-join", "th-spin", "th-sig"};

struct report {
    int tid;
    char comm[16];
    uint64_t mask, pending;
    uintptr_t alt_sp;
    size_t alt_size;
    int alt_flags;
    uint64_t tls;
    uintptr_t tlsaddr;
};

static __thread uint64_t tls_value;
static __thread uint64_t tls_spin_count, tls_spin_x;

static struct report before[NT], after[NT];
static pthread_t th[NT];
static int tids[NT];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;      /* phase changes, arrivals */
static pthread_cond_t wake_cv = PTHREAD_COND_INITIALIZER; /* th-cond, th-sig */
static int phase, nsetup, nreported, nafter;
static int wake[NT];
static sem_t sem;
static volatile uint32_t futex_word;
static volatile int spin_stop;
static uint64_t spin_final_x, spin_final_n;
static int eintr;
static void *join_result;
static struct { int signo, code, pid_self, pid; long value; } sigs[2];
static int nsigs;
static char altstacks[NT][65536];
static const size_t altsize[NT] = {16384, 20480, 0, 24576, 28672, 32768, 36864};

static uint64_t mask_bits(const sigset_t *s)
{
    uint64_t m = 0;
    for (int sig = 1; sig <= 64; sig++)
        if (sigismember(s, sig) == 1) m |= 1ull << (sig - 1);
    return m;
}

static void record(struct report *r)
{
    sigset_t s;
    memset(r, 0, sizeof *r);
    r->tid = (int)gettid();
    pthread_getname_np(pthread_self(), r->comm, sizeof r->comm);
    pthread_sigmask(SIG_BLOCK, NULL, &s);
    r->mask = mask_bits(&s);
    sigpending(&s);
    r->pending = mask_bits(&s);
    stack_t ss;
    sigaltstack(NULL, &ss);
    r->alt_sp = (uintptr_t)ss.ss_sp;
    r->alt_size = ss.ss_size;
    r->alt_flags = ss.ss_flags;
    r->tls = tls_value;
    r->tlsaddr = (uintptr_t)&tls_value;
}

static void print_report(const char *when, int i, const struct report *r)
{
    printf("%s %s tid=%d comm=%s mask=%016" PRIx64 " alt=%#lx/%zu/%d tls=%" PRIu64 " tlsaddr=%#lx pending=%016" PRIx64 "\n",
           when, names[i], r->tid, r->comm, r->mask, (unsigned long)r->alt_sp, r->alt_size, r->alt_flags,
           r->tls, (unsigned long)r->tlsaddr, r->pending);
}

/* name, mask, alternate stack, TLS: different in every thread */
static void setup_self(int i)
{
    pthread_setname_np(pthread_self(), names[i]);
    sigset_t s;
    sigemptyset(&s);
    switch (i) {
    case T_MAIN: sigaddset(&s, SIGWINCH); break;
    case T_COND: sigaddset(&s, SIGUSR1); break;
    case T_SEM: break; /* nothing blocked */
    case T_FUTEX: sigaddset(&s, SIGHUP); sigaddset(&s, SIGQUIT); break;
    case T_JOIN: sigaddset(&s, SIGTERM); sigaddset(&s, SIGRTMIN + 5); break;
    case T_SPIN: sigaddset(&s, SIGCHLD); sigaddset(&s, SIGTTIN); sigaddset(&s, SIGUSR1); break;
    case T_SIG: sigaddset(&s, SIGUSR2); sigaddset(&s, SIGRTMIN + 3); break;
    }
    pthread_sigmask(SIG_SETMASK, &s, NULL);
    if (altsize[i]) {
        stack_t ss = {.ss_sp = altstacks[i], .ss_size = altsize[i], .ss_flags = 0};
        if (sigaltstack(&ss, NULL) != 0) perror("sigaltstack");
    } else {
        stack_t ss = {.ss_flags = SS_DISABLE};
        sigaltstack(&ss, NULL);
    }
    tls_value = 1000 + (uint64_t)i * 111;
    tids[i] = (int)gettid();
}

/* setup, wait for phase 1, record "before", count in */
static void arrive(int i)
{
    setup_self(i);
    pthread_mutex_lock(&mu);
    nsetup++;
    pthread_cond_broadcast(&cv);
    while (phase < 1) pthread_cond_wait(&cv, &mu);
    record(&before[i]);
    nreported++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

static void woke(int i)
{
    pthread_mutex_lock(&mu);
    nafter++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    (void)i;
}

static void wait_wake_cv(int i)
{
    pthread_mutex_lock(&mu);
    while (!wake[i]) pthread_cond_wait(&wake_cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void *t_cond(void *arg)
{
    (void)arg;
    arrive(T_COND);
    wait_wake_cv(T_COND);
    record(&after[T_COND]);
    woke(T_COND);
    return NULL;
}

static void *t_sem(void *arg)
{
    (void)arg;
    arrive(T_SEM);
    while (sem_wait(&sem) != 0) {
        if (errno != EINTR) { perror("sem_wait"); exit(1); }
        __atomic_fetch_add(&eintr, 1, __ATOMIC_RELAXED);
    }
    record(&after[T_SEM]);
    woke(T_SEM);
    return NULL;
}

static void *t_futex(void *arg)
{
    (void)arg;
    arrive(T_FUTEX);
    while (__atomic_load_n(&futex_word, __ATOMIC_ACQUIRE) == 0) {
        long r = syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
        if (r != 0 && errno == EINTR) __atomic_fetch_add(&eintr, 1, __ATOMIC_RELAXED);
    }
    record(&after[T_FUTEX]);
    woke(T_FUTEX);
    return (void *)77;
}

static void *t_join(void *arg)
{
    (void)arg;
    arrive(T_JOIN);
    int e = pthread_join(th[T_FUTEX], &join_result);
    if (e) { fprintf(stderr, "pthread_join: %s\n", strerror(e)); exit(1); }
    record(&after[T_JOIN]);
    woke(T_JOIN);
    return NULL;
}

#define SPIN_A 6364136223846793005ull
#define SPIN_C 1442695040888963407ull
static void *t_spin(void *arg)
{
    (void)arg;
    arrive(T_SPIN);
    uint64_t x = 12345, n = 0;
    while (!spin_stop) {
        for (int k = 0; k < 1000; k++) x = x * SPIN_A + SPIN_C;
        n += 1000;
        tls_spin_x = x;
        tls_spin_count = n;
    }
    record(&after[T_SPIN]);
    /* the loop's registers and its TLS copy must agree */
    spin_final_x = x == tls_spin_x && n == tls_spin_count ? x : ~tls_spin_x;
    spin_final_n = tls_spin_count;
    woke(T_SPIN);
    return NULL;
}

static void *t_sig(void *arg)
{
    (void)arg;
    arrive(T_SIG);
    wait_wake_cv(T_SIG);
    record(&after[T_SIG]);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, SIGUSR2);
    sigaddset(&s, SIGRTMIN + 3);
    struct timespec zero = {0, 0};
    siginfo_t si;
    int sig;
    while (nsigs < 2 && (sig = sigtimedwait(&s, &si, &zero)) > 0) {
        sigs[nsigs].signo = sig;
        sigs[nsigs].code = si.si_code;
        sigs[nsigs].pid = si.si_pid;
        sigs[nsigs].pid_self = si.si_pid == getpid();
        sigs[nsigs].value = si.si_code == SI_QUEUE ? (long)si.si_value.sival_int : 0;
        nsigs++;
    }
    woke(T_SIG);
    return NULL;
}

/* the thread's current system call number, from /proc (-1: running) */
static long in_syscall(int tid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -2;
    long nr = -2;
    if (fgets(buf, sizeof buf, f)) nr = strncmp(buf, "running", 7) == 0 ? -1 : strtol(buf, NULL, 10);
    fclose(f);
    return nr;
}

static void wait_after(int n)
{
    pthread_mutex_lock(&mu);
    while (nafter < n) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

int main(void)
{
    static void *(*const fns[NT])(void *) = {NULL, t_cond, t_sem, t_futex, t_join, t_spin, t_sig};
    setvbuf(stdout, NULL, _IOLBF, 0);
    sem_init(&sem, 0, 0);
    setup_self(T_MAIN);
    printf("start pid=%d\n", (int)getpid());
    /* th-join needs th[T_FUTEX]: created in order */
    for (int i = 1; i < NT; i++) {
        int e = pthread_create(&th[i], NULL, fns[i], NULL);
        if (e) { fprintf(stderr, "pthread_create: %s\n", strerror(e)); return 1; }
    }
    pthread_mutex_lock(&mu);
    while (nsetup < NT - 1) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    /* two signals pending for th-sig alone */
    int e = pthread_kill(th[T_SIG], SIGUSR2);
    if (!e) e = pthread_sigqueue(th[T_SIG], SIGRTMIN + 3, (union sigval){.sival_int = 4242});
    if (e) { fprintf(stderr, "pthread_kill: %s\n", strerror(e)); return 1; }
    pthread_mutex_lock(&mu);
    phase = 1;
    pthread_cond_broadcast(&cv);
    while (nreported < NT - 1) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    record(&before[T_MAIN]);
    /* everyone but th-spin inside futex() */
    for (int tries = 0;; tries++) {
        int all = 1;
        for (int i = 1; i < NT; i++)
            if (i != T_SPIN && in_syscall(tids[i]) != SYS_futex) all = 0;
        if (all) break;
        if (tries > 1000) { fprintf(stderr, "threads did not block\n"); return 1; }
        sleep_ms(5);
    }
    for (int i = 0; i < NT; i++) print_report("before", i, &before[i]);
    printf("ready\n");
    while (access("go", F_OK) != 0) sleep_ms(20);

    record(&after[T_MAIN]);
    /* glibc keeps each thread's TID in its descriptor: pthread_kill(t, 0)
     * finds a thread only where the kernel has it under that TID */
    char kill0[128];
    int off = snprintf(kill0, sizeof kill0, "kill0");
    for (int i = 1; i < NT; i++) {
        int e = pthread_kill(th[i], 0);
        off += snprintf(kill0 + off, sizeof kill0 - (size_t)off, " %s", e == 0 ? "0" : e == ESRCH ? "ESRCH" : "ERR");
    }
    int n = 0;
    pthread_mutex_lock(&mu);
    wake[T_COND] = 1;
    pthread_cond_broadcast(&wake_cv);
    pthread_mutex_unlock(&mu);
    wait_after(++n);
    sem_post(&sem);
    wait_after(++n);
    __atomic_store_n(&futex_word, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    wait_after(n += 2); /* th-futex, then th-join */
    spin_stop = 1;
    wait_after(++n);
    pthread_mutex_lock(&mu);
    wake[T_SIG] = 1;
    pthread_cond_broadcast(&wake_cv);
    pthread_mutex_unlock(&mu);
    wait_after(++n);
    for (int i = 1; i < NT; i++)
        if (i != T_FUTEX) pthread_join(th[i], NULL);
    for (int i = 0; i < NT; i++) print_report("after", i, &after[i]);
    printf("%s\n", kill0);
    printf("joined %ld\n", (long)join_result);
    /* th-spin's loop state was in registers when it was stopped; its TLS
     * copy must agree with the sequence recomputed from the start */
    uint64_t x = 12345, cnt = spin_final_n, want_x = spin_final_x;
    for (uint64_t k = 0; k < cnt; k++) x = x * SPIN_A + SPIN_C;
    if (x == want_x && cnt > 0) printf("spin ok\n");
    else printf("spin BAD n=%" PRIu64 " x=%016" PRIx64 " want %016" PRIx64 "\n", cnt, want_x, x);
    for (int i = 0; i < nsigs; i++)
        printf("sig %d code=%d pid=%s value=%ld\n", sigs[i].signo, sigs[i].code, sigs[i].pid_self ? "self" : "other",
               sigs[i].value);
    if (eintr) fprintf(stderr, "eintr %d\n", eintr);
    printf("done\n");
    return 0;
}
