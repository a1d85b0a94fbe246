/* .ckptrc (ckptrc.h). */
#include "ckptrc.h"
#include "util.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>

static int on_off(const char *v, int *out)
{
    if (!strcmp(v, "on")) *out = 1;
    else if (!strcmp(v, "off")) *out = 0;
    else return -1;
    return 0;
}

int lz_ckptrc_read(const char *path, struct lz_ckptrc *rc, char *why, size_t len)
{
    memset(rc, 0, sizeof *rc);
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT) return 0;
        snprintf(why, len, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    char line[4200];
    int n = 0, rcode = 1;
    while (fgets(line, sizeof line, f)) {
        n++;
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r' || line[l - 1] == ' ' || line[l - 1] == '\t')) line[--l] = 0;
        char *k = line;
        while (*k == ' ' || *k == '\t') k++;
        if (!*k || *k == '#') continue;
        char *v = k;
        while (*v && *v != ' ' && *v != '\t') v++;
        if (*v) *v++ = 0;
        while (*v == ' ' || *v == '\t') v++;
        int bad = 0;
        if (!strcmp(k, "checkpointing")) { bad = on_off(v, &rc->checkpointing); rc->have_checkpointing = 1; }
        else if (!strcmp(k, "incremental")) { bad = on_off(v, &rc->incremental); rc->have_incremental = 1; }
        else if (!strcmp(k, "fork")) { bad = on_off(v, &rc->fork); rc->have_fork = 1; }
        else if (!strcmp(k, "maxtime")) { bad = lz_parse_u64(v, &rc->maxtime_s); rc->have_maxtime = 1; }
        else if (!strcmp(k, "mintime")) { bad = lz_parse_seconds_ms(v, &rc->mintime_ms); rc->have_mintime = 1; }
        else if (!strcmp(k, "maxfiles")) { bad = lz_parse_u64(v, &rc->maxfiles) || !rc->maxfiles; rc->have_maxfiles = 1; }
        else if (!strcmp(k, "dir")) {
            bad = !*v || strlen(v) >= sizeof rc->dir;
            if (!bad) snprintf(rc->dir, sizeof rc->dir, "%s", v);
            rc->have_dir = 1;
        } else {
            snprintf(why, len, "%s line %d: unknown keyword '%.40s' (known: checkpointing, dir, maxtime, mintime, incremental, fork, maxfiles)",
                     path, n, k);
            rcode = -1;
            break;
        }
        if (bad) {
            snprintf(why, len, "%s line %d: bad value '%.60s' for %s", path, n, v, k);
            rcode = -1;
            break;
        }
    }
    fclose(f);
    return rcode;
}
