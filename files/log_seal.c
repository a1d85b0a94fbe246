/* An empty, sealed log (journal.h): BEGIN and END only.  What a journal
 * becomes once the files are back at its checkpoint (fj_journal_reset): an
 * empty log still says whose it is and where it ends, so that a log cut to
 * nothing by damage is never mistaken for an empty one.  The runtime of the
 * restarted program goes on after its BEGIN. */
#include "rollback.h"
#include "journal.h"
#include "hash.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static size_t put_rec(char *at, uint16_t type, const void *payload, uint32_t len)
{
    struct fj_rec h = {FJ_REC_MAGIC, type, 0, len, 0, 0};
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    XXH3_64bits_update(&st, &h, sizeof h);
    XXH3_64bits_update(&st, payload, len);
    h.check = (uint32_t)XXH3_64bits_digest(&st);
    memcpy(at, &h, sizeof h);
    memcpy(at + sizeof h, payload, len);
    return sizeof h + len;
}

int fj_write_empty_log(const char *jdir, const uint64_t job[2], uint64_t index, int32_t pid)
{
    char buf[256], path[4200], tmp[4220];
    struct fj_begin b = {{job[0], job[1]}, index, pid, FJ_VERSION};
    struct fj_end e = {1};
    size_t n = put_rec(buf, FJ_BEGIN, &b, sizeof b);
    n += put_rec(buf + n, FJ_END, &e, sizeof e);
    snprintf(path, sizeof path, "%s/" FJ_LOG, jdir);
    snprintf(tmp, sizeof tmp, "%s/" FJ_LOG ".new", jdir);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    if (lz_write_all(fd, buf, n) < 0 || fsync(fd) < 0) { int er = errno; close(fd); unlink(tmp); errno = er; return -1; }
    close(fd);
    if (rename(tmp, path) < 0) { int er = errno; unlink(tmp); errno = er; return -1; }
    return 0;
}
