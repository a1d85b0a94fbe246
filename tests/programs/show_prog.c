/* show_prog: a known process for `lazarus show` (tests/test_show.py).
 *
 *   show_prog DIR
 *
 * Names its main thread "show-main" and starts a second one named
 * "show-worker" (pthread_setname_np); makes a pipe with 1234 bytes queued
 * and a stream socket pair with 777 bytes queued towards its second end;
 * maps DIR/mapped.bin (8 KiB, made here) shared; writes DIR/a.txt.  Prints
 * `ready PIPE_R PIPE_W SOCK_A SOCK_B` and then polls every 20 ms for
 * DIR/go: once it appears, overwrites the start of a.txt, creates b.txt,
 * prints `wrote` and polls on.  Exits when DIR/stop appears.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

static void *worker(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "show-worker");
    for (;;) pause();
    return NULL;
}

static int exists(const char *dir, const char *name)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void write_file(const char *dir, const char *name, const char *text, int flags)
{
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_WRONLY | O_CREAT | flags, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) { perror(p); exit(1); }
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: show_prog DIR\n"); return 2; }
    const char *dir = argv[1];
    pthread_setname_np(pthread_self(), "show-main");
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL)) return 1;

    int p[2], s[2];
    if (pipe(p) || socketpair(AF_UNIX, SOCK_STREAM, 0, s)) { perror("pipe"); return 1; }
    char buf[1234];
    memset(buf, 'p', sizeof buf);
    if (write(p[1], buf, 1234) != 1234 || write(s[0], buf, 777) != 777) { perror("write"); return 1; }

    char path[4096];
    snprintf(path, sizeof path, "%s/mapped.bin", dir);
    int mf = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (mf < 0 || ftruncate(mf, 8192)) { perror(path); return 1; }
    char *m = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, mf, 0);
    if (m == MAP_FAILED) { perror("mmap"); return 1; }
    close(mf);
    m[0] = 'x';
    write_file(dir, "a.txt", "the first version of a\n", O_TRUNC);

    printf("ready %d %d %d %d\n", p[0], p[1], s[0], s[1]);
    fflush(stdout);
    int wrote = 0;
    while (!exists(dir, "stop")) {
        if (!wrote && exists(dir, "go")) {
            write_file(dir, "a.txt", "THE", 0);
            write_file(dir, "b.txt", "b is new\n", O_TRUNC);
            printf("wrote\n");
            fflush(stdout);
            wrote = 1;
        }
        usleep(20000);
    }
    return 0;
}
