/* The fuller C API (tests/test_api_hooks.py).  api_hooks MODE ...
 *   info                 what the API says, one "name value" a line
 *   hooks LOG STOP       hooks that count their calls and append a line each
 *                        to LOG and to stdout; runs until the file STOP exists
 *   api N LOG STOP       hooks as above, and N lazarus_checkpoint() calls
 *   disable SECS STOP [thread]  sections of SECS seconds ("in K" / "out K"), 0.2 s
 *                        apart, until the file STOP exists (in a second thread)
 *   threads N            two threads each call lazarus_checkpoint() N times
 *   error                lazarus_checkpoint() with a socket it cannot take, then without
 *   gate STOP [before]   an after-restart hook that takes 0.3 s, then sets a flag (where a
 *                        program would reopen its connection); the main thread and a worker
 *                        step every 10 ms and say at their first step after a restart whether
 *                        they see it set ("step T restart R reopened F"); [before]: a
 *                        before-hook too (the checkpoint is then taken on the hooks thread);
 *                        [stuck]: the hook waits (30 s at most) for the worker's first step
 *                        after the restart instead, as a hook needing a lock a thread holds */
#include <lazarus.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile int before, after, restart;
static const char *logpath;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (write(1, buf, (size_t)n) < 0) exit(3);
}

/* a hook: may call anything (malloc, stdio, open) */
static void hook(int event, void *arg)
{
    const char *name = arg;
    int n = event == LAZARUS_BEFORE_CHECKPOINT ? ++before : event == LAZARUS_AFTER_CHECKPOINT ? ++after : ++restart;
    char *line = malloc(256);
    snprintf(line, 256, "%s %d before=%d after=%d restart=%d checkpoints=%d restarts=%d\n", name, n, before, after,
             restart, lazarus_checkpoints(), lazarus_restarts());
    FILE *f = fopen(logpath, "a");
    if (f) { fputs(line, f); fclose(f); }
    say("%s", line);
    free(line);
}

static void nap(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (long)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {}
}

static void until(const char *stop)
{
    while (access(stop, F_OK) != 0) nap(0.05);
}

static void register_hooks(void)
{
    int a = lazarus_on(LAZARUS_BEFORE_CHECKPOINT, hook, "before");
    int b = lazarus_on(LAZARUS_AFTER_CHECKPOINT, hook, "after");
    int c = lazarus_on(LAZARUS_AFTER_RESTART, hook, "restart");
    say("on %d %d %d\n", a, b, c);
}

static double sections_secs;
static const char *stopfile;
static void *sections(void *unused)
{
    (void)unused;
    for (int k = 1; access(stopfile, F_OK) != 0; k++) {
        lazarus_disable();
        say("in %d\n", k);
        nap(sections_secs);
        say("out %d\n", k);
        lazarus_enable();
        nap(0.2);
    }
    return NULL;
}

static volatile int reopened, seen_restarts[2];
static void reopen(int event, void *arg)
{
    (void)event;
    (void)arg;
    nap(0.3);
    __atomic_store_n(&reopened, 1, __ATOMIC_RELEASE);
}

static void nothing(int event, void *arg) { (void)event; (void)arg; }

static void stuck(int event, void *arg)
{
    (void)event;
    (void)arg;
    for (int i = 0; i < 3000 && __atomic_load_n(&seen_restarts[1], __ATOMIC_ACQUIRE) != lazarus_restarts(); i++) nap(0.01);
    say("stuck hook done, worker seen %d\n", __atomic_load_n(&seen_restarts[1], __ATOMIC_ACQUIRE));
}

/* one step: at the first one after a restart, is the hook's work done? */
static void step(int t)
{
    int r = lazarus_restarts();
    if (r != seen_restarts[t]) {
        seen_restarts[t] = r;
        say("step %d restart %d reopened %d\n", t, r, __atomic_load_n(&reopened, __ATOMIC_ACQUIRE));
    }
    nap(0.01);
}

static void *worker(void *unused)
{
    (void)unused;
    for (;;) step(1);
    return NULL;
}

static int calls;
static void *caller(void *arg)
{
    long t = (long)arg;
    for (int i = 0; i < calls; i++) {
        unsigned long long idx = 99;
        int r = lazarus_checkpoint(&idx);
        say("thread %ld call %d result %d index %llu\n", t, i, r, idx);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "info";
    if (!strcmp(mode, "info")) {
        const char *dir = lazarus_store_dir();
        say("enabled %d\n", lazarus_is_enabled());
        say("store %s\n", dir ? dir : "(null)");
        say("checkpoints %d\n", lazarus_checkpoints());
        say("restarts %d\n", lazarus_restarts());
        say("strerror [%s]\n", lazarus_strerror());
        int d1 = lazarus_disable(), d2 = lazarus_disable();
        unsigned long long idx = 7;
        int inside = lazarus_checkpoint(&idx);
        say("checkpoint inside a section %d [%s]\n", inside, lazarus_strerror());
        int e1 = lazarus_enable(), e2 = lazarus_enable();
        errno = 0;
        int e3 = lazarus_enable();
        say("disable %d %d enable %d %d %d errno %d\n", d1, d2, e1, e2, e3, e3 < 0 ? errno : 0);
        errno = 0;
        int bad = lazarus_on(99, hook, NULL);
        say("on bad event %d errno %d\n", bad, bad < 0 ? errno : 0);
        say("on %d\n", lazarus_on(LAZARUS_AFTER_CHECKPOINT, hook, "after"));
        say("version %s\n", LAZARUS_VERSION);
        return 0;
    }
    if (!strcmp(mode, "hooks") && argc == 4) {
        logpath = argv[2];
        register_hooks();
        say("ready\n");
        until(argv[3]);
        say("done before=%d after=%d restart=%d checkpoints=%d restarts=%d\n", before, after, restart,
            lazarus_checkpoints(), lazarus_restarts());
        return 0;
    }
    if (!strcmp(mode, "api") && argc == 5) {
        logpath = argv[3];
        register_hooks();
        for (int i = 0, n = atoi(argv[2]); i < n; i++) {
            unsigned long long idx = 0;
            int r = lazarus_checkpoint(&idx);
            /* the hooks of this checkpoint ran before the call returned */
            say("api %d result %d index %llu before=%d after=%d restart=%d\n", i + 1, r, idx, before, after, restart);
        }
        say("ready\n");
        until(argv[4]);
        say("done\n");
        return 0;
    }
    if (!strcmp(mode, "disable") && (argc == 4 || argc == 5)) {
        sections_secs = atof(argv[2]);
        stopfile = argv[3];
        if (argc == 5) { /* in another thread: the main one takes the request */
            pthread_t t;
            pthread_create(&t, NULL, sections, NULL);
            pthread_join(t, NULL);
        } else {
            sections(NULL);
        }
        say("done\n");
        return 0;
    }
    if (!strcmp(mode, "error")) {
        int s = socket(AF_NETLINK, SOCK_RAW, 0); /* NETLINK_ROUTE: a socket Lazarus cannot checkpoint */
        unsigned long long idx = 5;
        int r = lazarus_checkpoint(&idx);
        say("with socket %d index %llu [%s]\n", r, idx, lazarus_strerror());
        close(s);
        r = lazarus_checkpoint(&idx);
        say("without %d index %llu [%s]\n", r, idx, lazarus_strerror());
        return 0;
    }
    if (!strcmp(mode, "gate") && (argc == 3 || argc == 4)) {
        int blocked = argc == 4 && !strcmp(argv[3], "stuck");
        lazarus_on(LAZARUS_AFTER_RESTART, blocked ? stuck : reopen, NULL);
        if (argc == 4 && !blocked) lazarus_on(LAZARUS_BEFORE_CHECKPOINT, nothing, NULL);
        pthread_t w;
        pthread_create(&w, NULL, worker, NULL);
        say("ready\n");
        while (access(argv[2], F_OK) != 0) step(0);
        say("done\n");
        return 0;
    }
    if (!strcmp(mode, "threads") && argc == 3) {
        calls = atoi(argv[2]);
        pthread_t a, b;
        pthread_create(&a, NULL, caller, (void *)1L);
        pthread_create(&b, NULL, caller, (void *)2L);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        say("done\n");
        return 0;
    }
    fprintf(stderr, "usage: api_hooks info | hooks LOG STOP | api N LOG STOP | disable SECS STOP [thread] | threads N | error | "
            "gate STOP [before]\n");
    return 2;
}
