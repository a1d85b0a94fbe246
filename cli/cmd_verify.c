/* lazarus verify [-d DIR] [--at N]: re-reads every byte and checks every
 * checksum; changes nothing. */
#include "cli.h"
#include "util.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char help[] =
    "usage: lazarus verify [-d DIR] [--at N]\n"
    "Re-read every retained checkpoint (or only N) and check every checksum.\n"
    "Exit 0 only if all is intact; one line per damaged checkpoint on stderr.\n\n"
    "  -d DIR    checkpoint store (default ./lazarus.ckpt)\n"
    "  --at N    verify only checkpoint N\n";

int cmd_verify(int argc, char **argv)
{
    struct cli_opts o;
    int first = parse_opts(argc, argv, "verify", "da", help, &o);
    if (first < 0) return 2;
    if (first < argc) { lz_err("verify: unexpected argument '%s'", argv[first]); return 2; }
    char *dir = abs_dir(o.dir);
    char why[1400];
    if (access(dir, F_OK) < 0) { lz_err("no checkpoint store at %s", o.dir); return 1; }
    uint64_t *v;
    int n = lz_store_list(dir, &v);
    if (n <= 0) { lz_err("no checkpoint in %s", o.dir); return 1; }
    if (o.have_at) {
        uint64_t idx;
        if (lz_store_pick(dir, 1, o.at, &idx, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
        v[0] = idx;
        n = 1;
    }
    int bad = 0;
    for (int i = 0; i < n; i++) {
        if (lz_verify_ckpt(dir, v[i], why, sizeof why) < 0) { lz_err("%s", why); bad = 1; }
        else printf("checkpoint %" PRIu64 ": intact\n", v[i]);
    }
    free(v);
    return bad;
}
