#include "cli.h"
#include "codec.h"
#include "util.h"
#include "batch.h"
#include "remote_key.h"
#include "lazarus.h"
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char usage[] =
    "usage: lazarus COMMAND [OPTIONS]\n"
    "Checkpoint and restart a Linux program.\n\n"
    "  run [-d DIR|s3://BUCKET/PREFIX [--fallback DIR]] [-i SECONDS] [-k N] [--compress SPEC] [--durability process|machine] [--exclude DIR]...\n"
    "      [--job-stdio] [--tcp=reset|refuse] [--compact] [--resume] [--checkpoint-signal SIG]\n"
    "      [--remote s3://BUCKET/PREFIX [--keep-remote N] [--encrypt-key FILE]] [--mintime S] [--no-incremental] [--no-fork]\n"
    "      [--check-exclusions] [--quiet] [--log FILE] [--json] [--] PROGRAM [ARG...]\n"
    "                           run PROGRAM under Lazarus (--resume: or go on from DIR's newest checkpoint)\n"
    "  checkpoint [-d DIR|s3://...] [--json]  checkpoint the running job now; prints its index once durable\n"
    "  restart [-d DIR|s3://BUCKET/PREFIX] [--at N] [--force] [--compress SPEC] [--checkpoint-signal SIG] [--quiet] [--log FILE] [--json]\n"
    "                           resume from checkpoint N (default: the newest), its files rolled back to N\n"
    "  rollback [-d DIR] [--at N] [--force] [--json]\n"
    "                           the stopped job's files back to checkpoint N (default: the newest), nothing started\n"
    "  diff [-d DIR] [--at N] [--json]  what a restart to N would change in the files\n"
    "  list [-d DIR|s3://...] [--json]   one row per checkpoint\n"
    "  verify [-d DIR|s3://...] [--at N] [--json]  re-read everything a restart trusts; exit 0 only if all is intact\n"
    "  gc [-d DIR|s3://...] [--json]  free the page data and file journals no retained checkpoint needs\n"
    "  show [-d DIR|s3://...] [--at N] [--json] [tree|threads|regions|fds|chans|journal|packs]\n"
    "                           what checkpoint N holds (default: the newest, all of it)\n\n"
    "DIR is the job's checkpoint store (default ./lazarus.ckpt). `lazarus COMMAND --help` for more;\n"
    "`lazarus --version` prints the version; man lazarus (EXIT STATUS: what each exit code means).\n";

void human_bytes(char *buf, size_t len, uint64_t b)
{
    const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int i = 0;
    while (v >= 1024 && i < 4) { v /= 1024; i++; }
    snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

void utc_text(char *buf, size_t len, uint64_t ns)
{
    time_t t = (time_t)(ns / 1000000000ull);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int parse_opts(int argc, char **argv, const char *cmd, const char *allowed, const char *help, struct cli_opts *o)
{
    static const struct option longs[] = {
        {"dir", required_argument, 0, 'd'}, {"at", required_argument, 0, 'a'}, {"interval", required_argument, 0, 'i'},
        {"keep", required_argument, 0, 'k'}, {"json", no_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
        {"durability", required_argument, 0, 'D'}, {"exclude", required_argument, 0, 'x'}, {"force", no_argument, 0, 'f'},
        {"compress", required_argument, 0, 'c'}, {"job-stdio", no_argument, 0, 'S'},
        {"tcp", required_argument, 0, 'T'}, {"compact", no_argument, 0, 'C'},
        {"resume", no_argument, 0, 'R'}, {"checkpoint-signal", required_argument, 0, 'G'},
        {"remote", required_argument, 0, 'M'}, {"keep-remote", required_argument, 0, 'K'},
        {"endpoint", required_argument, 0, 'E'}, {"ca-file", required_argument, 0, 'A'},
        {"insecure", no_argument, 0, 'I'}, {"addressing", required_argument, 0, 'P'},
        {"cache", required_argument, 0, 'Z'}, {"files-as-they-are", no_argument, 0, 'F'},
        {"journal-dir", required_argument, 0, 'J'}, {"older-than", required_argument, 0, 'O'},
        {"check-exclusions", no_argument, 0, 'X'}, {"no-incremental", no_argument, 0, 'N'}, {"no-fork", no_argument, 0, 'W'},
        {"mintime", required_argument, 0, 'U'}, {"encrypt-key", required_argument, 0, 'Y'},
        {"lazy", no_argument, 0, 'L'}, {"fallback", required_argument, 0, 'B'},
        {"fs", required_argument, 0, 'V'}, {"fs-mode", required_argument, 0, 'H'},
        {"fs-buffer-max", required_argument, 0, 'b'}, {"fs-buffer-low", required_argument, 0, 'u'},
        {"files-only", no_argument, 0, 'o'}, {"quiet", no_argument, 0, 'q'}, {"log", required_argument, 0, 'l'}, {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->durability = -1;
    o->dir = "lazarus.ckpt";
    optind = 1;
    opterr = 0;
    int c;
    /* '+': stop at the first operand, so `run prog -x` passes -x to prog */
    while ((c = getopt_long(argc, argv, "+:d:i:k:hx:", longs, NULL)) != -1) {
        if (c == 'h') { fputs(help, stdout); exit(0); }
        if (c == '?' || c == ':') {
            const char *opt = argv[optind - 1];
            if (c == ':') lz_err("%s: option %s needs a value (see `lazarus %s --help`)", cmd, opt, cmd);
            else lz_err("%s: unknown option %s (see `lazarus %s --help`)", cmd, opt, cmd);
            return -1;
        }
        /* the option as typed: its value may be the next word ("-k 3") or not ("-k3", "--keep=3") */
        const char *name = optarg && optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2] : argv[optind - 1];
        if (!strchr(allowed, c)) {
            lz_err("%s: option %s does not apply to this command (see `lazarus %s --help`)", cmd, name, cmd);
            return -1;
        }
        if (c == 'D') {
            if (!strcmp(optarg, "process")) o->durability = 0;
            else if (!strcmp(optarg, "machine")) o->durability = 1;
            else { lz_err("%s: --durability is 'process' or 'machine', not '%s'", cmd, optarg); return -1; }
            continue;
        }
        if (c == 'x') {
            char *a = abs_dir(optarg);
            size_t have = strlen(o->excludes);
            size_t l = strlen(a);
            while (l > 1 && a[l - 1] == '/') a[--l] = 0;
            if (strchr(a, '\n') || have + l + 2 > sizeof o->excludes) {
                lz_err("%s: cannot exclude '%s' (a newline in the name, or too many exclusions)", cmd, optarg);
                free(a);
                return -1;
            }
            sprintf(o->excludes + have, "%s%s", have ? "\n" : "", a);
            free(a);
            continue;
        }
        if (c == 'V') {
            char *a = abs_dir(optarg);
            size_t have = strlen(o->fs), l = strlen(a);
            while (l > 1 && a[l - 1] == '/') a[--l] = 0;
            if (strchr(a, '\n') || have + l + 2 > sizeof o->fs) {
                lz_err("%s: cannot serve '%s' (a newline in the name, or too many --fs)", cmd, optarg);
                free(a);
                return -1;
            }
            sprintf(o->fs + have, "%s%s", have ? "\n" : "", a);
            free(a);
            continue;
        }
        if (c == 'H') {
            if (!strcmp(optarg, "shadow")) {
                lz_err("%s: --fs-mode %s is not implemented yet (undo and buffer are)", cmd, optarg);
                return -1;
            }
            if (strcmp(optarg, "undo") && strcmp(optarg, "buffer")) { lz_err("%s: --fs-mode is 'undo', 'buffer' or 'shadow', not '%s'", cmd, optarg); return -1; }
            o->fs_mode = optarg;
            continue;
        }
        if (c == 'o') { o->files_only = 1; continue; }
        if (c == 'f') { o->force = 1; continue; }
        if (c == 'S') { o->job_stdio = 1; continue; }
        if (c == 'T') {
            if (strcmp(optarg, "reset") && strcmp(optarg, "refuse")) {
                lz_err("%s: --tcp is 'reset' or 'refuse', not '%s'", cmd, optarg);
                return -1;
            }
            o->tcp_refuse = !strcmp(optarg, "refuse");
            continue;
        }
        if (c == 'C') { o->compact = 1; continue; }
        if (c == 'L') { o->lazy = 1; continue; }
        if (c == 'q') { o->quiet = 1; continue; }
        if (c == 'l') { o->log = optarg; continue; }
        if (c == 'R') { o->resume = 1; continue; }
        if (c == 'X') { o->check_excl = 1; continue; }
        if (c == 'N') { o->no_incremental = 1; continue; }
        if (c == 'W') { o->no_fork = 1; continue; }
        if (c == 'U') {
            if (lz_parse_seconds_ms(optarg, &o->mintime_ms) < 0) {
                lz_err("%s: --mintime needs a number of seconds (as 2 or 0.5), not '%s'", cmd, optarg);
                return -1;
            }
            o->have_mintime = 1;
            continue;
        }
        if (c == 'G') {
            if ((o->ckpt_signal = batch_parse_signal(optarg, cmd)) < 0) return -1;
            continue;
        }
        if (c == 'M') { o->remote = optarg; continue; }
        if (c == 'Y') {
            /* read now, kept in this process only (remote_key.c) */
            if (remote_key_load(optarg, cmd) < 0) return -1;
            o->encrypt_key = optarg;
            continue;
        }
        if (c == 'E') { o->endpoint = optarg; continue; }
        if (c == 'A') { o->ca_file = optarg; continue; }
        if (c == 'I') { o->insecure = 1; continue; }
        if (c == 'Z') { o->cache = optarg; continue; }
        if (c == 'F') { o->files_as_they_are = 1; continue; }
        if (c == 'J') { o->journal_dir = optarg; continue; }
        if (c == 'B') { o->fallback = optarg; continue; }
        if (c == 'P') {
            if (strcmp(optarg, "path") && strcmp(optarg, "virtual")) { lz_err("%s: --addressing is 'path' or 'virtual', not '%s'", cmd, optarg); return -1; }
            o->addressing = optarg;
            continue;
        }
        if (c == 'c') {
            char err[256];
            int codec, level;
            if (lz_codec_parse(optarg, &codec, &level, err, sizeof err) < 0) { lz_err("%s: %s", cmd, err); return -1; }
            if (strlen(optarg) >= sizeof o->compress) { lz_err("%s: compression \"%s\" is too long", cmd, optarg); return -1; }
            snprintf(o->compress, sizeof o->compress, "%s", optarg);
            continue;
        }
        uint64_t v = 0;
        if (c != 'd' && c != 'j' && lz_parse_u64(optarg, &v) < 0) {
            lz_err("%s: %s needs a whole number, not '%s'", cmd, name, optarg);
            return -1;
        }
        switch (c) {
        case 'd': o->dir = optarg; o->have_dir = 1; break;
        case 'a': o->have_at = 1; o->at = v; break;
        case 'i': o->have_interval = 1; o->interval = v; break;
        case 'k':
            if (v == 0) { lz_err("%s: -k needs at least 1", cmd); return -1; }
            o->have_keep = 1; o->keep = v; break;
        case 'j': o->json = 1; break;
        case 'K': o->have_keep_remote = 1; o->keep_remote = v; break;
        case 'O': o->have_older_than = 1; o->older_than = v; break;
        case 'b': o->fs_buf_max = v; break;
        case 'u': o->fs_buf_low = v; break;
        }
    }
    if (!*o->dir) { lz_err("%s: -d needs a directory", cmd); return -1; }
    return optind;
}

char *abs_dir(const char *dir)
{
    char *r = realpath(dir, NULL);
    if (r) return r;
    if (dir[0] == '/') return lz_xstrdup(dir);
    char cwd[PATH_MAX];
    if (!getcwd(cwd, sizeof cwd)) return lz_xstrdup(dir);
    char *out = lz_xmalloc(strlen(cwd) + strlen(dir) + 2);
    sprintf(out, "%s/%s", cwd, dir);
    return out;
}

/* 0, 1 and 2 open, on /dev/null if closed: else the first files this opens
 * (the store's) would take their numbers, be written to as stdout and
 * stderr, and be handed to the program as the launcher's. */
static void stdio_open(void)
{
    for (int fd = 0; fd < 3; fd++)
        if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
            int n = open("/dev/null", O_RDWR);
            if (n >= 0 && n != fd) close(n); /* cannot happen: the lowest free number is fd */
        }
}

int main(int argc, char **argv)
{
    stdio_open();
    if (argc < 2) { fputs(usage, stderr); return 2; }
    const char *c = argv[1];
    if (!strcmp(c, "--help") || !strcmp(c, "-h") || !strcmp(c, "help")) { fputs(usage, stdout); return 0; }
    if (!strcmp(c, "--version") || !strcmp(c, "version")) { printf("lazarus %s\n", LAZARUS_VERSION); return 0; }
    if (!strcmp(c, "run")) return cmd_run(argc - 1, argv + 1);
    if (!strcmp(c, "restart")) return cmd_restart(argc - 1, argv + 1);
    if (!strcmp(c, "checkpoint")) return cmd_checkpoint(argc - 1, argv + 1);
    if (!strcmp(c, "list")) return cmd_list(argc - 1, argv + 1);
    if (!strcmp(c, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(c, "diff")) return cmd_diff(argc - 1, argv + 1);
    if (!strcmp(c, "rollback")) return cmd_rollback(argc - 1, argv + 1);
    if (!strcmp(c, "gc")) return cmd_gc(argc - 1, argv + 1);
    if (!strcmp(c, "show")) return cmd_show(argc - 1, argv + 1);
    if (!strcmp(c, "__lazy-serve")) return cmd_lazy_serve(argc - 1, argv + 1); /* restart --lazy's fault server */
    lz_err("unknown command '%s' (commands: run, checkpoint, restart, rollback, list, verify, diff, gc, show; see `lazarus --help`)", c);
    return 2;
}
