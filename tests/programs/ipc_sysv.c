/* System V IPC and POSIX message queue users in one job, checking
 * themselves after every restart (tests/test_ipc.py):
 * - a producer (the main program) and a consumer (its forked child) pass
 *   numbered messages of three types over a System V message queue, and
 *   numbered records through a ring in a System V segment guarded by a
 *   semaphore set (a mutex and a count of records): after each restart the
 *   consumer takes exactly the records and messages sent before the
 *   checkpoint, in order, none lost, none twice;
 * - the ring's segment is attached twice in the producer (two views of one
 *   segment: a store through one is seen through the other), the child
 *   inherits both; after a restart shmdt of one view works and it can be
 *   attached again;
 * - a segment made, filled and detached (content with no attachment), a
 *   keyed message queue found again by its key;
 * - a segment removed (IPC_RMID) while attached, the usual way to have it
 *   go with its last user: its content and attachment come back (a real
 *   one: /SYSV in maps, shmdt works at the end; the producer alone holds it);
 * - a POSIX message queue with messages of several priorities, read back
 *   in priority order, and its attributes;
 * - with IPC_FOREIGN=ID in the environment, a segment made outside the job
 *   attached by the producer: after restart N its first byte is N, which
 *   the test wrote there while the job was down (its content is left
 *   alone, not the checkpoint's).
 * Usage: ipc_sysv CYCLES FILE_PREFIX.  Prints "ids shm S sem M msg Q ack A
 * key K lone L mq NAME", "ready N", waits for FILE_PREFIX.N, "check N ok" (or FAIL),
 * "done" after removing every object. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <mqueue.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/wait.h>
#include <unistd.h>

#define FAIL(...) do { printf("FAIL %s: ", who); printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)
#define RING 65536
#define REC 64
#define SLOTS ((RING - 64) / REC)
#define K 40      /* messages and records per cycle */
#define MQN 4     /* POSIX messages per cycle */

struct ring { uint64_t head, tail; char pad[48]; char rec[SLOTS][REC]; };
struct msg { long type; uint64_t seq; char text[24]; };

static const char *who = "producer";
static int shm, sem, q, ackq, keyq, lone;
static struct ring *va, *vb;
static volatile char *foreign;
static char *rmd;
static int rid;
static char mqname[64];
static mqd_t mq;

static void semop1(int num, int delta)
{
    struct sembuf b = {(unsigned short)num, (short)delta, 0};
    while (semop(sem, &b, 1) < 0)
        if (errno != EINTR) FAIL("semop: %s", strerror(errno));
}

static void produce(int c)
{
    for (uint64_t k = 0; k < K; k++) {
        uint64_t seq = (uint64_t)(c - 1) * K + k;
        struct msg m = {.type = 1 + (long)(seq % 3), .seq = seq};
        snprintf(m.text, sizeof m.text, "m%llu", (unsigned long long)seq);
        if (msgsnd(q, &m, sizeof m - sizeof(long), 0) < 0) FAIL("msgsnd: %s", strerror(errno));
        semop1(0, -1);
        char *r = va->rec[va->head % SLOTS];
        memset(r, 'a' + (int)(seq % 26), REC);
        memcpy(r, &seq, sizeof seq);
        va->head++;
        semop1(0, 1);
        semop1(1, 1);
    }
    for (int k = 0; k < MQN; k++) {
        char t[32];
        int n = snprintf(t, sizeof t, "c%d-k%d", c, k);
        if (mq_send(mq, t, (size_t)n, (unsigned)(k % 2 ? 7 : 2)) < 0) FAIL("mq_send: %s", strerror(errno));
    }
}

static void consume(int c)
{
    for (uint64_t k = 0; k < K; k++) {
        uint64_t seq = (uint64_t)(c - 1) * K + k;
        struct msg m;
        ssize_t n = msgrcv(q, &m, sizeof m - sizeof(long), 0, IPC_NOWAIT);
        if (n < 0) FAIL("message %llu missing: %s", (unsigned long long)seq, strerror(errno));
        if (m.seq != seq || m.type != 1 + (long)(seq % 3)) FAIL("message %llu (type %ld) where %llu was due", (unsigned long long)m.seq, m.type, (unsigned long long)seq);
        struct sembuf b = {1, -1, IPC_NOWAIT};
        if (semop(sem, &b, 1) < 0) FAIL("record %llu not counted by the semaphore: %s", (unsigned long long)seq, strerror(errno));
        semop1(0, -1);
        uint64_t got;
        const char *r = va->rec[va->tail % SLOTS];
        memcpy(&got, r, sizeof got);
        if (got != seq || r[REC - 1] != 'a' + (int)(seq % 26)) FAIL("ring record %llu where %llu was due", (unsigned long long)got, (unsigned long long)seq);
        va->tail++;
        semop1(0, 1);
    }
    struct msg m;
    if (msgrcv(q, &m, sizeof m - sizeof(long), 0, IPC_NOWAIT) >= 0) FAIL("message %llu too many", (unsigned long long)m.seq);
    if (semctl(sem, 1, GETVAL) != 0) FAIL("semaphore counts %d records too many", semctl(sem, 1, GETVAL));
    struct msg ack = {.type = 99, .seq = (uint64_t)c};
    if (msgsnd(ackq, &ack, sizeof ack - sizeof(long), 0) < 0) FAIL("ack: %s", strerror(errno));
}

static void wait_file(const char *prefix, int c)
{
    char f[4096];
    snprintf(f, sizeof f, "%s.%d", prefix, c);
    while (access(f, F_OK) != 0) usleep(20000);
}

static void check_producer(int c)
{
    /* the semaphores as the checkpoint left them */
    if (semctl(sem, 0, GETVAL) != 1 || semctl(sem, 1, GETVAL) != K)
        FAIL("semaphores %d %d, want 1 %d", semctl(sem, 0, GETVAL), semctl(sem, 1, GETVAL), K);
    /* the two views are one segment */
    va->pad[3] = (char)c;
    if (vb->pad[3] != (char)c) FAIL("the segment's two attachments are not one segment");
    struct shmid_ds ds;
    if (shmctl(shm, IPC_STAT, &ds) < 0 || ds.shm_nattch != 4) FAIL("ring segment attached %lu times, want 4", (unsigned long)ds.shm_nattch);
    /* a real attachment: detached and attached again */
    void *at = vb;
    if (shmdt(vb) < 0) FAIL("shmdt of the second view: %s", strerror(errno));
    vb = shmat(shm, at, 0);
    if (vb == (void *)-1) FAIL("shmat again: %s", strerror(errno));
    if (memcmp(va, vb, RING)) FAIL("the view attached again differs");
    /* content with no attachment */
    char *l = shmat(lone, NULL, SHM_RDONLY);
    if (l == (void *)-1) FAIL("shmat lone: %s", strerror(errno));
    for (int i = 0; i < 8192; i++)
        if (l[i] != (char)(i * 7)) FAIL("the detached segment's byte %d is %d", i, l[i]);
    shmdt(l);
    for (int i = 1; i < 3 * 4096; i++)
        if (rmd[i] != (char)(i * 13)) FAIL("the removed segment's byte %d is %d", i, rmd[i]);
    if (rmd[0] != (char)(c - 1)) FAIL("the removed segment's first byte is %d, want %d", rmd[0], c - 1);
    rmd[0] = (char)c;
    char line[512], want[32];
    int attached = 0;
    snprintf(want, sizeof want, "%lx-", (unsigned long)rmd);
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps && fgets(line, sizeof line, maps))
        if (!strncmp(line, want, strlen(want)) && strstr(line, "/SYSV")) attached = 1;
    if (maps) fclose(maps);
    if (!attached) FAIL("the removed segment is not a System V attachment");
    if (foreign && foreign[0] != (char)c) FAIL("the outside segment reads %d, want %d (written while the job was down)", foreign[0], c);
    if (msgget((key_t)(0x4c5a0000 | (getpid() & 0xffff)), 0) != keyq) FAIL("the keyed queue is not found by its key");
    struct msqid_ds qd;
    if (msgctl(q, IPC_STAT, &qd) < 0 || qd.msg_qnum != K) FAIL("message queue holds %lu, want %d", (unsigned long)qd.msg_qnum, K);
    /* the POSIX queue: attributes, then messages by priority, in order within one */
    struct mq_attr a;
    if (mq_getattr(mq, &a) < 0 || a.mq_maxmsg != 10 || a.mq_msgsize != 64 || a.mq_curmsgs != MQN || !(a.mq_flags & O_NONBLOCK))
        FAIL("mq attributes %ld %ld %ld %#lx", a.mq_maxmsg, a.mq_msgsize, a.mq_curmsgs, a.mq_flags);
    static const int order[MQN] = {1, 3, 0, 2};
    for (int k = 0; k < MQN; k++) {
        char t[64], want[32];
        unsigned prio;
        ssize_t n = mq_receive(mq, t, sizeof t, &prio);
        snprintf(want, sizeof want, "c%d-k%d", c, order[k]);
        if (n < 0 || (size_t)n != strlen(want) || memcmp(t, want, (size_t)n) || prio != (unsigned)(order[k] % 2 ? 7 : 2))
            FAIL("mq message %d: %.*s prio %u, want %s", k, (int)(n > 0 ? n : 0), t, prio, want);
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) { fprintf(stderr, "usage: ipc_sysv CYCLES FILE_PREFIX\n"); return 2; }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int cycles = atoi(argv[1]);
    shm = shmget(IPC_PRIVATE, RING, IPC_CREAT | 0600);
    sem = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
    q = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    ackq = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
    keyq = msgget((key_t)(0x4c5a0000 | (getpid() & 0xffff)), IPC_CREAT | IPC_EXCL | 0600);
    lone = shmget(IPC_PRIVATE, 8192, IPC_CREAT | 0600);
    if (shm < 0 || sem < 0 || q < 0 || ackq < 0 || keyq < 0 || lone < 0) FAIL("making the objects: %s", strerror(errno));
    va = shmat(shm, NULL, 0);
    vb = shmat(shm, NULL, 0);
    char *l = shmat(lone, NULL, 0);
    if (va == (void *)-1 || vb == (void *)-1 || l == (void *)-1) FAIL("shmat: %s", strerror(errno));
    for (int i = 0; i < 8192; i++) l[i] = (char)(i * 7);
    rid = shmget(IPC_PRIVATE, 3 * 4096, IPC_CREAT | 0600);
    if (rid < 0 || (rmd = shmat(rid, NULL, 0)) == (void *)-1) FAIL("removed segment: %s", strerror(errno));
    for (int i = 0; i < 3 * 4096; i++) rmd[i] = (char)(i * 13);
    rmd[0] = 0;
    if (shmctl(rid, IPC_RMID, NULL) < 0) FAIL("IPC_RMID: %s", strerror(errno));
    if (getenv("IPC_FOREIGN") && (foreign = shmat(atoi(getenv("IPC_FOREIGN")), NULL, 0)) == (void *)-1)
        FAIL("shmat of the outside segment: %s", strerror(errno));
    shmdt(l);
    unsigned short init[2] = {1, 0};
    if (semctl(sem, 0, SETALL, init) < 0) FAIL("SETALL: %s", strerror(errno));
    snprintf(mqname, sizeof mqname, "/lzipc-%d", getpid());
    struct mq_attr a = {.mq_maxmsg = 10, .mq_msgsize = 64};
    mq_unlink(mqname);
    mq = mq_open(mqname, O_RDWR | O_CREAT | O_EXCL | O_NONBLOCK, 0600, &a);
    if (mq == (mqd_t)-1) FAIL("mq_open: %s", strerror(errno));
    printf("ids shm %d sem %d msg %d ack %d key %d lone %d mq %s\n", shm, sem, q, ackq, keyq, lone, mqname);
    pid_t child = fork();
    if (child < 0) FAIL("fork: %s", strerror(errno));
    if (child == 0) {
        who = "consumer";
        shmdt(rmd); /* the producer's alone */
        for (int c = 1; c <= cycles; c++) {
            /* once the producer has checked (polled: a checkpoint would cut a blocking msgrcv short) */
            struct msg go;
            while (msgrcv(ackq, &go, sizeof go - sizeof(long), 50 + c, IPC_NOWAIT) < 0) usleep(20000);
            consume(c);
        }
        _exit(0);
    }
    /* the child has let go of the removed segment before the first checkpoint */
    for (struct shmid_ds d; shmctl(rid, IPC_STAT, &d) == 0 && d.shm_nattch > 1;) usleep(1000);
    for (int c = 1; c <= cycles; c++) {
        produce(c);
        printf("ready %d\n", c);
        wait_file(argv[2], c);
        check_producer(c);
        struct msg go = {.type = 50 + c}, ack;
        if (msgsnd(ackq, &go, sizeof go - sizeof(long), 0) < 0) FAIL("go: %s", strerror(errno));
        if (msgrcv(ackq, &ack, sizeof ack - sizeof(long), 99, 0) < 0 || ack.seq != (uint64_t)c) FAIL("no ack from the consumer");
        printf("check %d ok\n", c);
    }
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) FAIL("consumer failed");
    shmdt(va);
    shmdt(vb);
    if (shmdt(rmd) < 0) FAIL("shmdt of the removed segment: %s", strerror(errno));
    shmctl(shm, IPC_RMID, NULL);
    shmctl(lone, IPC_RMID, NULL);
    semctl(sem, 0, IPC_RMID);
    msgctl(q, IPC_RMID, NULL);
    msgctl(ackq, IPC_RMID, NULL);
    msgctl(keyq, IPC_RMID, NULL);
    mq_close(mq);
    mq_unlink(mqname);
    printf("done\n");
    return 0;
}
