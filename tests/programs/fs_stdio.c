/* fs_stdio: C stdio over existing data, between lazarus_checkpoint() calls.
 *
 *   fs_stdio WORKDIR
 *
 * WORKDIR must hold data.txt (at least 4096 bytes) and log.txt.  The program
 * opens data.txt with fopen("r+") and overwrites it in place with fseek +
 * fwrite/fprintf/fputs/fputc/putc (fully buffered: some data is still in the
 * stream's buffer when a checkpoint is taken), appends to log.txt with
 * fopen("a"), creates new.txt with fopen("w"), reads existing data back with
 * fread, remove()s and rename()s, and ftruncate()s under the stream.  It
 * takes three checkpoints with lazarus_checkpoint() (links -llazarus) and
 * prints on stdout, one line each:
 *
 *   SNAP <k> <index> <json>       checkpoint k (0-based) returned CONTINUED
 *                                 (index 0: not under Lazarus)
 *   RESTORED <k> <index> <json>   it returned RESTARTED (then goes on)
 *   OUT <k> <json>                a read's result (after checkpoint k-1)
 *   END <json>                    after fflush(NULL) at the end; then the
 *                                 program SIGKILLs itself
 *
 * <json> = {"tree":{NAME:{"type","size","mode","mtime_ns","fnv"}...},
 *           "stream":{"ftell","fdpos"}}: every entry of WORKDIR (flat), with an
 * FNV-1a 64 hash of a regular file's contents, and the data.txt stream's
 * position (ftell counts buffered bytes, fdpos is the descriptor's offset).
 * Everything but mtime_ns depends only on the initial files.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lazarus.h"

static FILE *data;

static uint64_t fnv_file(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ull;
    int fd = open(name, O_RDONLY);
    if (fd < 0)
        return 0;
    unsigned char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        for (ssize_t i = 0; i < n; i++)
            h = (h ^ buf[i]) * 0x100000001b3ull;
    close(fd);
    return h;
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void snapshot(char *out, size_t cap)
{
    size_t len = 0;
    char *names[256];
    int count = 0;
    DIR *d = opendir(".");
    struct dirent *e;
    while (d && (e = readdir(d)) && count < 256) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        names[count++] = strdup(e->d_name);
    }
    if (d)
        closedir(d);
    qsort(names, count, sizeof names[0], cmp);
    len += snprintf(out + len, cap - len, "{\"tree\":{");
    for (int i = 0; i < count; i++) {
        struct stat st;
        if (lstat(names[i], &st) != 0)
            continue;
        const char *type = S_ISREG(st.st_mode) ? "file" : S_ISDIR(st.st_mode) ? "dir"
                         : S_ISLNK(st.st_mode) ? "symlink" : "other";
        len += snprintf(out + len, cap - len,
                        "%s\"%s\":{\"type\":\"%s\",\"size\":%lld,\"mode\":\"%o\",\"mtime_ns\":%lld,"
                        "\"fnv\":\"%016" PRIx64 "\"}",
                        i ? "," : "", names[i], type, (long long)st.st_size,
                        (unsigned)(st.st_mode & 07777),
                        (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
                        S_ISREG(st.st_mode) ? fnv_file(names[i]) : (uint64_t)0);
        free(names[i]);
    }
    len += snprintf(out + len, cap - len, "},\"stream\":{\"ftell\":%ld,\"fdpos\":%lld}}",
                    ftell(data), (long long)lseek(fileno(data), 0, SEEK_CUR));
}

static void ckpt(int k)
{
    static char buf[65536];
    unsigned long long idx = 0;
    int r = lazarus_checkpoint(&idx);
    snapshot(buf, sizeof buf);
    if (r == LAZARUS_RESTARTED)
        printf("RESTORED %d %llu %s\n", k, idx, buf);
    else if (r == LAZARUS_CONTINUED || r == LAZARUS_INACTIVE)
        printf("SNAP %d %llu %s\n", k, idx, buf);
    else
        printf("CKPTERR %d %d\n", k, r);
    fflush(stdout);
}

static void die(const char *what)
{
    printf("FAIL %s: %s\n", what, strerror(errno));
    fflush(stdout);
    exit(3);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: fs_stdio WORKDIR\n");
        return 2;
    }
    if (chdir(argv[1]) != 0)
        die("chdir");
    data = fopen("data.txt", "r+");
    if (!data)
        die("fopen data.txt");

    /* interval before checkpoint 0: in-place overwrites, one left buffered */
    char as[51];
    memset(as, 'A', 50);
    as[50] = 0;
    fseek(data, 100, SEEK_SET);
    fwrite(as, 1, 50, data);
    fprintf(data, "value=%d\n", 42);
    fflush(data);
    fseek(data, 1000, SEEK_SET);
    fprintf(data, "PENDING-0 %s\n", "buffered at checkpoint 0");
    ckpt(0);

    /* after 0: the buffered bytes reach the file, an append, a new file,
     * a read over existing data, an overwrite of what was read, a tail */
    fflush(data);
    FILE *l = fopen("log.txt", "a");
    if (!l)
        die("fopen log.txt");
    fprintf(l, "appended after checkpoint %d\n", 0);
    fclose(l);
    FILE *n = fopen("new.txt", "w");
    if (!n)
        die("fopen new.txt");
    fprintf(n, "new file %d\n", 1);
    fputs("second line\n", n);
    fclose(n);
    char rd[21] = {0};
    fseek(data, 2000, SEEK_SET);
    size_t got = fread(rd, 1, 20, data);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < got; i++)
        h = (h ^ (unsigned char)rd[i]) * 0x100000001b3ull;
    printf("OUT 1 {\"read\":%zu,\"fnv\":\"%016" PRIx64 "\"}\n", got, h);
    fflush(stdout);
    fseek(data, 2000, SEEK_SET);
    fwrite("BBBBBBBBBBBBBBBBBBBB", 1, 20, data);
    fseek(data, 0, SEEK_END);
    fprintf(data, "tail-%d\n", 1);
    ckpt(1);

    /* after 1: flush the tail, overwrite the head, remove, rename, shrink */
    fflush(data);
    fseek(data, 0, SEEK_SET);
    fputs("HEAD-OVERWRITE", data);
    fputc('!', data);
    putc('\n', data);
    fflush(data);
    if (remove("log.txt") != 0)
        die("remove log.txt");
    if (rename("new.txt", "renamed.txt") != 0)
        die("rename new.txt");
    if (ftruncate(fileno(data), 3000) != 0)
        die("ftruncate");
    fseek(data, 2500, SEEK_SET);
    fprintf(data, "PENDING-2 %d\n", 2);
    ckpt(2);

    /* after 2: more of everything, then the end */
    fflush(data);
    fseek(data, 0, SEEK_END);
    for (int i = 0; i < 100; i++)
        fprintf(data, "after-2 line %d\n", i);
    FILE *r = fopen("renamed.txt", "r+");
    if (!r)
        die("fopen renamed.txt");
    fseek(r, 0, SEEK_END);
    fprintf(r, "more\n");
    fclose(r);
    fflush(NULL);
    static char buf[65536];
    snapshot(buf, sizeof buf);
    printf("END %s\n", buf);
    fflush(stdout);
    kill(getpid(), SIGKILL);
    return 99;
}
