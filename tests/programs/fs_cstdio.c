/* fs_cstdio: deterministic stdio file I/O over existing data, for
 * file-rollback restart tests.
 *
 *   fs_cstdio WORKDIR [ROUNDS] [BALLAST_MB] [PAUSE_US]
 *                                    default 3000 rounds, 0 MiB, 1000 us
 *
 * Expects WORKDIR/existing.dat (at least 64 KiB, made by the caller) and
 * WORKDIR/ro.dat (only ever read).  Holds existing.dat open as an "r+"
 * stream for the whole run: each round fseek+fwrite, fseek+fprintf and
 * fseek+fread at pseudo-random offsets, sometimes past the end (the file
 * grows, with holes) and sometimes an ftruncate back, against a model of the
 * file's bytes in memory; every fread and, every 16 rounds, an fflush + pread
 * of the whole file must equal the model, else `MISMATCH ...` and exit 3.
 * journal.log is an "a" stream open the whole run (a line per operation).
 * ro.dat is read through an "r" stream into a checksum.  Every 8 rounds a
 * file chunk.K is written with "w" and closed, reopened "r+", partly
 * rewritten and read back, closed; chunk.(K-2) is renamed to keep.(K%5)
 * (over an existing one) and now and then a keep.* file is removed.
 * BALLAST_MB allocates that much heap and dirties all of it every 16 rounds
 * (slower checkpoints).  PAUSE_US sleeps after each round.
 *
 * Output: `start rounds=N`, `round I/N size=S` every 250 rounds, and
 * `done <hex>` (FNV-1a over existing.dat, journal.log, the chunk and keep
 * files and ro.dat's checksum).  Files and output depend only on ROUNDS and
 * the two input files, never on timing.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SIZE (8u << 20)

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static const char *dir;
static unsigned char *model;
static size_t msize;
static unsigned long round_no;

static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

static uint64_t below(uint64_t n) { return n ? rnd() % n : 0; }

static void die(const char *fmt, ...)
{
    va_list ap;
    printf("MISMATCH round %lu: ", round_no);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(3);
}

static char *path(const char *fmt, ...)
{
    static char buf[4][4096];
    static int which;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    which = (which + 1) % 4;
    snprintf(buf[which], sizeof buf[which], "%s/%s", dir, name);
    return buf[which];
}

static void fill(unsigned char *p, size_t n)
{
    if (rnd() & 1) {
        for (size_t i = 0; i < n; i++)
            p[i] = (unsigned char)rnd();
    } else {
        unsigned long v = (unsigned long)rnd();
        for (size_t i = 0; i < n; i++)
            p[i] = "0123456789abcdef lazarus\n"[(v + i * (i & 7)) % 25];
    }
}

static void grow_model(size_t n)
{
    if (n > msize) {
        memset(model + msize, 0, n - msize);
        msize = n;
    }
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static uint64_t fnv_file(uint64_t h, const char *p)
{
    FILE *f = fopen(p, "r");
    if (!f)
        return fnv(h, "-", 1);
    unsigned char buf[65536];
    size_t n;
    h = fnv(h, p + strlen(dir), strlen(p + strlen(dir)));
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        h = fnv(h, buf, n);
    fclose(f);
    return h;
}

static void check_whole(FILE *rw)
{
    if (fflush(rw) != 0)
        die("fflush: %s", strerror(errno));
    struct stat st;
    if (fstat(fileno(rw), &st) != 0)
        die("fstat: %s", strerror(errno));
    if ((size_t)st.st_size != msize)
        die("existing.dat has %lld bytes, want %zu", (long long)st.st_size, msize);
    static unsigned char buf[MAX_SIZE + 4096];
    size_t got = 0;
    while (got < msize) {
        ssize_t n = pread(fileno(rw), buf + got, msize - got, (off_t)got);
        if (n <= 0)
            die("pread: %s", n < 0 ? strerror(errno) : "short");
        got += (size_t)n;
    }
    if (memcmp(buf, model, msize) != 0) {
        size_t at = 0;
        while (buf[at] == model[at])
            at++;
        die("existing.dat differs from the model at offset %zu", at);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fs_cstdio WORKDIR [ROUNDS] [BALLAST_MB] [PAUSE_US]\n");
        return 2;
    }
    dir = argv[1];
    unsigned long rounds = argc > 2 ? strtoul(argv[2], NULL, 10) : 3000;
    size_t ballast_mb = argc > 3 ? strtoul(argv[3], NULL, 10) : 0;
    unsigned long pause_us = argc > 4 ? strtoul(argv[4], NULL, 10) : 1000;
    unsigned char *ballast = ballast_mb ? malloc(ballast_mb << 20) : NULL;
    if (ballast_mb && !ballast)
        return 2;
    if (ballast)
        memset(ballast, 1, ballast_mb << 20);

    model = malloc(MAX_SIZE + 4096);
    FILE *rw = fopen(path("existing.dat"), "r+");
    if (!model || !rw) {
        fprintf(stderr, "fs_cstdio: %s: %s\n", path("existing.dat"), strerror(errno));
        return 2;
    }
    msize = fread(model, 1, MAX_SIZE, rw);
    if (msize < 65536) {
        fprintf(stderr, "fs_cstdio: existing.dat is too small\n");
        return 2;
    }
    FILE *jl = fopen(path("journal.log"), "a");
    FILE *ro = fopen(path("ro.dat"), "r");
    if (!jl || !ro) {
        fprintf(stderr, "fs_cstdio: journal.log/ro.dat: %s\n", strerror(errno));
        return 2;
    }
    uint64_t ro_sum = 0xcbf29ce484222325ull;
    printf("start rounds=%lu\n", rounds);
    fflush(stdout);

    static unsigned char buf[65536], back[65536];
    for (round_no = 1; round_no <= rounds; round_no++) {
        int ops = 4 + (int)below(6);
        for (int op = 0; op < ops; op++) {
            uint64_t kind = below(100);
            size_t off, len;
            if (kind < 40) {                 /* fwrite in place or past the end */
                len = 1 + below(kind < 5 ? 16384 : 2048);
                off = kind < 5 ? msize + below(8192) : below(msize);
                if (off + len > MAX_SIZE)
                    off = below(msize - len);
                fill(buf, len);
                if (fseek(rw, (long)off, SEEK_SET) != 0 || fwrite(buf, 1, len, rw) != len)
                    die("fwrite at %zu: %s", off, strerror(errno));
                grow_model(off);
                memcpy(model + off, buf, len);
                if (off + len > msize)
                    msize = off + len;
                fprintf(jl, "%lu.%d fwrite %zu+%zu\n", round_no, op, off, len);
            } else if (kind < 60) {          /* fprintf in place */
                char txt[128];
                off = below(msize);
                int n = snprintf(txt, sizeof txt, "<%lu:%d:%016" PRIx64 ">", round_no, op, rnd());
                if (fseek(rw, (long)off, SEEK_SET) != 0 || fprintf(rw, "%s", txt) != n)
                    die("fprintf at %zu: %s", off, strerror(errno));
                memcpy(model + off, txt, (size_t)n);
                if (off + (size_t)n > msize)
                    msize = off + (size_t)n;
                fprintf(jl, "%lu.%d fprintf %zu %s\n", round_no, op, off, txt);
            } else if (kind < 90) {          /* fread back */
                off = below(msize);
                len = 1 + below(msize - off < 8192 ? msize - off : 8192);
                if (fseek(rw, (long)off, SEEK_SET) != 0)
                    die("fseek %zu: %s", off, strerror(errno));
                size_t n = fread(back, 1, len, rw);
                if (n != len || memcmp(back, model + off, len) != 0)
                    die("fread %zu+%zu got %zu bytes, not the model's", off, len, n);
                fprintf(jl, "%lu.%d fread %zu+%zu\n", round_no, op, off, len);
            } else if (kind < 93 && msize > (6u << 20)) { /* shrink */
                size_t n = (2u << 20) + below(msize - (2u << 20));
                if (fflush(rw) != 0 || ftruncate(fileno(rw), (off_t)n) != 0)
                    die("ftruncate %zu: %s", n, strerror(errno));
                msize = n;
                fprintf(jl, "%lu.%d ftruncate %zu\n", round_no, op, n);
            } else if (kind < 96) {          /* fflush */
                if (fflush(rw) != 0)
                    die("fflush: %s", strerror(errno));
                fprintf(jl, "%lu.%d fflush\n", round_no, op);
            } else {                         /* read-only input */
                size_t n = fread(buf, 1, 1 + below(4096), ro);
                if (n == 0) {
                    if (ferror(ro))
                        die("reading ro.dat: %s", strerror(errno));
                    rewind(ro);
                }
                ro_sum = fnv(ro_sum, buf, n);
                fprintf(jl, "%lu.%d ro %zu %016" PRIx64 "\n", round_no, op, n, ro_sum);
            }
        }
        if (round_no % 8 == 0) {
            unsigned long k = round_no / 8;
            size_t len = 8192 + below(57344);
            fill(buf, len);
            FILE *c = fopen(path("chunk.%lu", k), "w");
            if (!c || fwrite(buf, 1, len, c) != len ||
                fprintf(c, "\nchunk %lu of %zu bytes\n", k, len) < 0 || fclose(c) != 0)
                die("writing chunk.%lu: %s", k, strerror(errno));
            c = fopen(path("chunk.%lu", k), "r+");
            size_t off = below(len), n = 1 + below(len - off);
            fill(buf + off, n);
            if (!c || fseek(c, (long)off, SEEK_SET) != 0 || fwrite(buf + off, 1, n, c) != n ||
                fseek(c, 0, SEEK_SET) != 0 || fread(back, 1, len, c) != len ||
                memcmp(back, buf, len) != 0 || fclose(c) != 0)
                die("rewriting chunk.%lu", k);
            if (k >= 3 && rename(path("chunk.%lu", k - 2), path("keep.%lu", k % 5)) != 0)
                die("rename chunk.%lu: %s", k - 2, strerror(errno));
            if (k % 7 == 0 && remove(path("keep.%lu", (k + 2) % 5)) != 0 && errno != ENOENT)
                die("remove keep.%lu: %s", (k + 2) % 5, strerror(errno));
            fprintf(jl, "%lu chunk %lu %zu\n", round_no, k, len);
        }
        if (round_no % 16 == 0) {
            check_whole(rw);
            if (ballast)
                for (size_t i = 0; i < ballast_mb << 20; i += 4096)
                    ballast[i] = (unsigned char)(ballast[i] + round_no);
        }
        if (round_no % 250 == 0 || round_no == rounds) {
            printf("round %lu/%lu size=%zu\n", round_no, rounds, msize);
            fflush(stdout);
        }
        if (pause_us) {
            struct timespec ts = {(time_t)(pause_us / 1000000), (long)(pause_us % 1000000) * 1000};
            nanosleep(&ts, NULL);
        }
    }
    round_no = rounds;
    check_whole(rw);
    if (fclose(rw) != 0 || fclose(jl) != 0 || fclose(ro) != 0)
        die("fclose: %s", strerror(errno));

    uint64_t h = fnv(0xcbf29ce484222325ull, &ro_sum, sizeof ro_sum);
    h = fnv_file(h, path("existing.dat"));
    h = fnv_file(h, path("journal.log"));
    unsigned long last = rounds / 8;
    for (unsigned long k = last > 1 ? last - 1 : 1; k <= last; k++)
        h = fnv_file(h, path("chunk.%lu", k));
    for (int i = 0; i < 5; i++)
        h = fnv_file(h, path("keep.%d", i));
    printf("done %016" PRIx64 "\n", h);
    return 0;
}
