/* The process's --encrypt-key.  It stays in this process: the job file and
 * every commit object name only its fingerprint (s3_key_fingerprint), no
 * child is given it (the page is wiped in a forked child before the program
 * or restorer is exec'd), nothing prints it. */
#include "remote_key.h"
#include "util.h"
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

static struct s3_key *key;

int remote_key_load(const char *path, const char *cmd)
{
    char why[1024];
    if (!key) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { lz_err("%s: --encrypt-key: out of memory", cmd); return -1; }
        /* best effort: never swapped, never in a core dump, zeros in a child of fork */
        mlock(p, 4096);
        madvise(p, 4096, MADV_DONTDUMP);
        madvise(p, 4096, MADV_WIPEONFORK);
        key = p;
    }
    if (s3_key_load(path, key, why, sizeof why) < 0) {
        lz_err("%s: --encrypt-key: %s", cmd, why);
        memset(key->fp, 0, sizeof key->fp);
        return -1;
    }
    return 0;
}

const struct s3_key *remote_key(void) { return key && *key->fp ? key : NULL; }

int remote_key_fits(const char *fp, const char *where, char *why, size_t whylen)
{
    const struct s3_key *k = remote_key();
    if (*fp && !k)
        snprintf(why, whylen, "the checkpoints of %s are encrypted (key fingerprint %s): give the key with --encrypt-key FILE", where, fp);
    else if (!*fp && k)
        snprintf(why, whylen, "the checkpoints of %s are not encrypted: --encrypt-key is for a job run with it", where);
    else if (k && strcmp(fp, k->fp))
        snprintf(why, whylen, "the checkpoints of %s are encrypted with another key (fingerprint %s; the key given has %s)", where, fp, k->fp);
    else
        return 0;
    return -1;
}
