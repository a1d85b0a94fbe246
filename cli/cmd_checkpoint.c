/* lazarus checkpoint [-d DIR] [--json]: asks the job's supervisor for a checkpoint and
 * prints its index once it is durable. */
#include "cli.h"
#include "remote_store.h"
#include "util.h"
#include "exit_codes.h"
#include "json_out.h"
#include <time.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A checkpoint not done by then is said to be under way (on a terminal). */
#define UNDER_WAY_MS 1000

static const char help[] =
    "usage: lazarus checkpoint [-d DIR | -d s3://BUCKET/PREFIX [--fallback DIR]] [--json]\n"
    "Checkpoint the job running with DIR now; print the checkpoint's index once it\n"
    "is durable. Exits non-zero, saying why, if no checkpoint was taken (241: no job\n"
    "runs with DIR; 243: the job did not take it).\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --json    one JSON object instead of the index: {\"index\", \"time\", \"duration\",\n"
    "            \"pause\", \"processes\", \"threads\", \"bytes\"} (docs/json.md)\n"
    "  -d s3://BUCKET/PREFIX  the job `run -d s3://...` streams there, found on this\n"
    "            machine by its spool (--fallback DIR if it was given one)\n";

int cmd_checkpoint(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "checkpoint", "dBj", help, &o);
    if (first < 0) return 2;
    char spool[LZ_PATH_MAX];
    const char *shown = o.dir;
    if (s3_is_url(o.dir)) {
        spool_path(spool, sizeof spool, o.dir, o.fallback);
        o.dir = spool;
    } else if (o.fallback) {
        lz_err("checkpoint: --fallback goes with -d s3://BUCKET/PREFIX");
        return 2;
    }
    if (first < argc) { lz_err("checkpoint: unexpected argument '%s'", argv[first]); return 2; }
    int s = ctl_connect(o.dir);
    if (s < 0) {
        if (shown != o.dir) lz_err("no job streaming to %s is running on this machine (its spool %s)", shown, o.dir);
        else lz_err("no job is running with %s (start one with `lazarus run -d %s ...`)", o.dir, o.dir);
        return LZ_EXIT_NOT_RUNNING;
    }
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    if (send(s, "CHECKPOINT", 10, MSG_NOSIGNAL) < 0) { lz_err("the job's supervisor went away"); return LZ_EXIT_CKPT_FAILED; }
    char buf[1400];
    int waited = 0;
    for (;;) {
        struct pollfd pf = {s, POLLIN, 0};
        int r = poll(&pf, 1, UNDER_WAY_MS);
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) {
            if (!waited++ && isatty(2)) lz_err("checkpoint under way...");
            continue;
        }
        break;
    }
    ssize_t n = recv(s, buf, sizeof buf - 1, 0);
    close(s);
    if (n <= 0) { lz_err("the job ended before the checkpoint was complete"); return LZ_EXIT_CKPT_FAILED; }
    buf[n] = 0;
    if (!strncmp(buf, "OK ", 3)) {
        /* OK index pause_ns stored processes threads: the index alone on stdout (scripts read
         * it), what the checkpoint holds on stderr */
        unsigned long long v[5] = {0};
        int got = sscanf(buf + 3, "%llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4]);
        if (o.json) {
            struct jw w;
            jw_init(&w, stdout);
            jw_obj(&w, NULL);
            jw_version(&w);
            jw_u64(&w, "index", v[0]);
            jw_u64(&w, "time", (uint64_t)time(NULL));
            jw_fixed(&w, "duration", (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e9, 3);
            jw_fixed(&w, "pause", (double)v[1] / 1e9, 6);
            jw_u64(&w, "processes", v[3]);
            jw_u64(&w, "threads", v[4]);
            jw_u64(&w, "bytes", v[2]);
            jw_end_obj(&w);
            putchar('\n');
            return 0;
        }
        printf("%llu\n", v[0]);
        fflush(stdout);
        if (got == 5 && v[4] > 0) {
            char stored[32];
            human_bytes(stored, sizeof stored, v[2]);
            fprintf(stderr, "lazarus: checkpoint %llu: %llu process%s, %llu thread%s, paused %.1f ms, %s stored\n", v[0],
                    v[3], v[3] == 1 ? "" : "es", v[4], v[4] == 1 ? "" : "s", (double)v[1] / 1e6, stored);
        }
        return 0;
    }
    lz_err("%s", !strncmp(buf, "ERR ", 4) ? buf + 4 : buf);
    return LZ_EXIT_CKPT_FAILED;
}
