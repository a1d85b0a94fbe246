/* The transaction API (lazarus.h: lazarus_tx_begin/commit/abort) and the
 * reason of a thread's last failure (lazarus_strerror).
 *
 * Under the runtime a commit is lazarus_checkpoint().  Without it -- a
 * statically linked program, which the runtime cannot enter, in a job
 * (`lazarus run`, a files-only job) -- the job is found from the environment
 * the supervisor gives every program (LAZARUS_DIR) and the commit is asked
 * of the supervisor on DIR/ctl.sock exactly as `lazarus checkpoint` asks it.
 * The runtime is looked up through a weak dlsym: a static link does not pull
 * the dynamic loader's code in for it (the reference stays 0), a dynamic one
 * finds dlsym in libc.  Every call opens its own connection and the reason
 * is per thread: safe from any thread (not from a signal handler). */
#include "lazarus.h"
#include "format.h"
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#pragma weak dlsym

#define API __attribute__((visibility("default")))

/* Why this thread's last call failed or did nothing, when that was decided
 * here (else the runtime says it: lazarus_rt_strerror). */
static __thread char api_reason[600];
static __thread int api_reason_set; /* this thread's last call failed here, not in the runtime */

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(api_reason, sizeof api_reason, fmt, ap);
    va_end(ap);
    api_reason_set = 1;
}

/* Called by every entry that hands over to the runtime (lazarus_api.c too):
 * its reason is the runtime's from then on. */
__attribute__((visibility("hidden"))) void lz_api_reason_clear(void) { api_reason_set = 0; }

/* The runtime's entry `name`, NULL without it (no runtime, or a static program). */
static void *rt_sym(void **slot, int *looked, const char *name)
{
    if (!__atomic_load_n(looked, __ATOMIC_ACQUIRE)) {
        *slot = dlsym ? dlsym(RTLD_DEFAULT, name) : NULL;
        __atomic_store_n(looked, 1, __ATOMIC_RELEASE);
    }
    return *slot;
}

typedef int (*ckpt_fn)(unsigned long long *);
typedef const char *(*str_fn)(void);

static ckpt_fn rt_checkpoint(void)
{
    static void *slot;
    static int looked;
    return (ckpt_fn)rt_sym(&slot, &looked, "lazarus_rt_checkpoint");
}

/* The job's store: the runtime's (it follows a restart elsewhere), else the
 * environment `lazarus run` and `restart` give the program. */
static const char *job_dir(void)
{
    static void *slot;
    static int looked;
    str_fn f = (str_fn)rt_sym(&slot, &looked, "lazarus_rt_store_dir");
    const char *d = f ? f() : NULL;
    if (!d || !*d) d = getenv("LAZARUS_DIR");
    return d && *d ? d : NULL;
}

#define NOT_IN_JOB "not in a Lazarus job (no runtime, no LAZARUS_DIR): nothing was %s"

/* Sends `req` to the supervisor of the job in `dir` and waits for its one
 * answer, into buf: 0, or -1 with the reason said. */
static int ask_supervisor(const char *dir, const char *req, char *buf, size_t len)
{
    int dfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) { say("cannot reach the job's supervisor: %s: %s", dir, strerror(errno)); return -1; }
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    /* through /proc/self/fd: within sun_path whatever DIR is (cli/job.c) */
    snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/%s", dfd, LZ_CTLSOCK);
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    int rc = s < 0 ? -1 : connect(s, (struct sockaddr *)&a, sizeof a);
    int e = errno;
    close(dfd);
    if (rc < 0) {
        if (s >= 0) close(s);
        say("no supervisor of the job answers on %s/" LZ_CTLSOCK " (%s)", dir, strerror(e));
        return -1;
    }
    if (send(s, req, strlen(req), MSG_NOSIGNAL) < 0) {
        say("the job's supervisor went away (%s)", strerror(errno));
        close(s);
        return -1;
    }
    ssize_t n;
    for (;;) {
        struct pollfd pf = {s, POLLIN, 0};
        if (poll(&pf, 1, -1) < 0 && errno == EINTR) continue;
        n = recv(s, buf, len - 1, 0);
        if (n < 0 && errno == EINTR) continue;
        break;
    }
    close(s);
    if (n <= 0) {
        say("the job's supervisor did not answer %s (it ended, or does not know the request)", req);
        return -1;
    }
    buf[n] = 0;
    return 0;
}

API int lazarus_tx_begin(void)
{
    if (rt_checkpoint() || job_dir()) { lz_api_reason_clear(); return 0; }
    say(NOT_IN_JOB, "begun");
    return LAZARUS_INACTIVE;
}

API int lazarus_tx_commit(unsigned long long *index)
{
    if (index) *index = 0;
    ckpt_fn rt = rt_checkpoint();
    if (rt) { lz_api_reason_clear(); return rt(index); }
    const char *dir = job_dir();
    if (!dir) { say(NOT_IN_JOB, "committed"); return LAZARUS_INACTIVE; }
    char buf[1400];
    if (ask_supervisor(dir, "CHECKPOINT", buf, sizeof buf) < 0) return LAZARUS_ERROR;
    if (!strncmp(buf, "OK ", 3)) { /* OK index pause_ns stored processes threads */
        if (index) *index = strtoull(buf + 3, NULL, 10);
        lz_api_reason_clear();
        return LAZARUS_CONTINUED;
    }
    say("%s", !strncmp(buf, "ERR ", 4) ? buf + 4 : buf);
    return LAZARUS_ERROR;
}

API int lazarus_tx_abort(void)
{
    const char *dir = job_dir();
    if (!dir) { say(NOT_IN_JOB, "aborted"); return LAZARUS_INACTIVE; }
    char buf[1400];
    if (ask_supervisor(dir, "ABORT", buf, sizeof buf) < 0) return LAZARUS_ERROR;
    if (!strncmp(buf, "OK", 2)) { lz_api_reason_clear(); return LAZARUS_CONTINUED; }
    say("%s", !strncmp(buf, "ERR ", 4) ? buf + 4 : buf);
    return LAZARUS_ERROR;
}

API const char *lazarus_strerror(void)
{
    if (api_reason_set) return api_reason;
    static void *slot;
    static int looked;
    str_fn f = (str_fn)rt_sym(&slot, &looked, "lazarus_rt_strerror");
    return f ? f() : "";
}
