/* What Lazarus refuses to checkpoint among IPC objects, then lets go of
 * (tests/test_ipc.py): "notify", a POSIX message queue with an mq_notify
 * registration (its messages cannot be read and put back without firing
 * it); "partial", a System V attachment of which a part was unmapped
 * (shmat cannot make that again).  Prints "held MQNAME SHMID", waits for FILE_PREFIX.1,
 * lets go (mq_notify(NULL), shmdt), prints "released", waits for
 * FILE_PREFIX.2, checks its queue or segment and prints "done".
 * Usage: ipc_refuse notify|partial FILE_PREFIX */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)

static void wait_file(const char *prefix, int n)
{
    char f[4096];
    snprintf(f, sizeof f, "%s.%d", prefix, n);
    while (access(f, F_OK) != 0) usleep(20000);
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: ipc_refuse notify|partial FILE_PREFIX\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int notify = !strcmp(argv[1], "notify");
    char name[64];
    snprintf(name, sizeof name, "/lzref-%d", getpid());
    mqd_t q = (mqd_t)-1;
    int id = -1;
    char *a = NULL;
    if (notify) {
        struct mq_attr at = {.mq_maxmsg = 4, .mq_msgsize = 16};
        q = mq_open(name, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK, 0600, &at);
        if (q == (mqd_t)-1) FAIL("mq_open: %s", strerror(errno));
        signal(SIGUSR1, SIG_IGN);
        struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGUSR1};
        if (mq_notify(q, &ev) < 0) FAIL("mq_notify: %s", strerror(errno));
        if (mq_send(q, "kept", 4, 3) < 0) FAIL("mq_send: %s", strerror(errno));
        if (mq_notify(q, &ev) < 0) FAIL("mq_notify again: %s", strerror(errno)); /* the send fired the first */
    } else {
        id = shmget(IPC_PRIVATE, 3 * 4096, IPC_CREAT | 0600);
        a = id < 0 ? (void *)-1 : shmat(id, NULL, 0);
        if (a == (void *)-1) FAIL("shmat: %s", strerror(errno));
        strcpy(a, "kept");
        munmap(a + 4096, 4096); /* a hole in the attachment */
    }
    printf("held %s %d\n", name, id);
    wait_file(argv[2], 1);
    if (notify) {
        if (mq_notify(q, NULL) < 0) FAIL("mq_notify(NULL): %s", strerror(errno));
    } else {
        shmdt(a);
        if ((a = shmat(id, NULL, 0)) == (void *)-1) FAIL("shmat again: %s", strerror(errno));
    }
    printf("released\n");
    wait_file(argv[2], 2);
    if (notify) {
        char buf[16];
        unsigned prio;
        ssize_t n = mq_receive(q, buf, sizeof buf, &prio);
        if (n != 4 || memcmp(buf, "kept", 4) || prio != 3) FAIL("the queue lost its message");
        mq_close(q);
        mq_unlink(name);
    } else {
        if (strcmp(a, "kept")) FAIL("the segment lost its content");
        shmdt(a);
        shmctl(id, IPC_RMID, NULL);
    }
    printf("done\n");
    return 0;
}
