/* The transaction API (lazarus.h, cprfs.h) from a program, built dynamically
 * (-llazarus) and statically (gcc -static, liblazarus.a) by
 * tests/test_tx_api.py.  Each result is printed on stdout with
 * lazarus_strerror().
 *   tx_prog FILE [TRIG]   begins, appends "before commit" to FILE, commits,
 *                         appends "after commit", aborts; with TRIG it then
 *                         prints "waiting" and waits for the file TRIG
 *   tx_prog cprfs         CprFS's three calls (cprfs.h)
 *   tx_prog threads N     N threads commit at once */
#include <cprfs.h>
#include <lazarus.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void append(const char *path, const char *line)
{
    FILE *f = fopen(path, "a");
    if (!f) { perror(path); exit(1); }
    fprintf(f, "%s\n", line);
    fclose(f);
}

static void *committer(void *arg)
{
    unsigned long long index = 0;
    int c = lazarus_tx_commit(&index);
    printf("thread %ld commit rc=%d index=%llu err=%s\n", (long)arg, c, index, lazarus_strerror());
    return NULL;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) { fprintf(stderr, "usage: tx_prog FILE [TRIG] | cprfs | threads N\n"); return 2; }
    if (!strcmp(argv[1], "cprfs")) {
        int b = cprfs_begin_tran();
        int c = cprfs_commit_tran();
        int a = cprfs_abort_tran();
        printf("cprfs begin=%d commit=%d abort=%d err=%s\n", b, c, a, lazarus_strerror());
        return 0;
    }
    if (!strcmp(argv[1], "threads") && argc > 2) {
        long n = atol(argv[2]);
        pthread_t t[16];
        for (long i = 0; i < n && i < 16; i++) pthread_create(&t[i], NULL, committer, (void *)i);
        for (long i = 0; i < n && i < 16; i++) pthread_join(t[i], NULL);
        return 0;
    }
    int b = lazarus_tx_begin();
    printf("begin rc=%d err=%s\n", b, lazarus_strerror());
    append(argv[1], "before commit");
    unsigned long long index = 12345;
    int c = lazarus_tx_commit(&index);
    printf("commit rc=%d index=%llu err=%s\n", c, index, lazarus_strerror());
    append(argv[1], "after commit");
    int a = lazarus_tx_abort();
    printf("abort rc=%d err=%s\n", a, lazarus_strerror());
    if (argc > 2) {
        printf("waiting\n");
        while (access(argv[2], F_OK) != 0) usleep(20000);
    }
    printf("done\n");
    return 0;
}
