/* treeheap: a job of N processes, each with a heap of its own;
 * bench/tree.py checkpoints it, driven over stdin.
 *
 *   treeheap MIB NPROCS        (normally under `lazarus run`)
 *
 * The main process forks NPROCS-1 children before any memory is touched,
 * then each of the NPROCS processes maps MIB MiB of private anonymous memory
 * (MADV_NOHUGEPAGE: 4 KiB pages, like bench/threads.py) and fills it with
 * pseudo-random data (nothing compresses, no page repeats, no two processes
 * alike).  With NPROCS 1 there is only the main process: the single-process
 * reference.  Once every process has filled its heap the main process prints
 *   filled BYTES procs=N hugekb=K          (BYTES, K: the whole job's)
 * and reads commands, one a line:
 *   dirty PCT   every process rewrites about PCT % of its own pages (chosen
 *               at random) with new random data; prints
 *               "dirtied PAGES seconds=S" (PAGES: the whole job's)
 *   quit        the children exit, the main process reaps them and exits 0
 * Each child is told over a pipe of its own (one command byte) and answers on
 * a pipe shared by all children (one record); between commands, i.e. while
 * checkpoints are taken, every child is blocked in read() on its pipe and the
 * main process in read() on stdin: the whole job is idle.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_clock.h"
#include "bench_mem.h"

#define PAGE 4096ul
#define MAXPROCS 256

static unsigned char *heap;
static size_t heap_pages;
static uint64_t rng;

/* what a child sends back: which command, pages written, its hugekb */
struct answer {
    long cmd, pages, hugekb;
};

static inline uint64_t next64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void write_page(size_t page)
{
    uint64_t *w = (uint64_t *)(heap + page * PAGE);
    for (size_t i = 0; i < PAGE / sizeof *w; i++) w[i] = next64();
}

/* pct 0: fill every page; else rewrite about pct % of them; returns the pages written */
static long do_command(long pct)
{
    long n = 0;
    if (pct == 0) {
        for (size_t p = 0; p < heap_pages; p++) write_page(p);
        return (long)heap_pages;
    }
    uint64_t limit = (uint64_t)pct * (UINT64_MAX / 100);
    for (size_t p = 0; p < heap_pages; p++)
        if (next64() < limit) {
            write_page(p);
            n++;
        }
    return n;
}

static int read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, (char *)buf + got, len - got);
        if (r < 0 && errno == EINTR) continue; /* a checkpoint's signal (SA_RESTART aside) */
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
    size_t put = 0;
    while (put < len) {
        ssize_t r = write(fd, (const char *)buf + put, len - put);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        put += (size_t)r;
    }
    return 0;
}

static void map_heap(size_t bytes)
{
    heap = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (heap == MAP_FAILED) {
        perror("treeheap: mmap");
        exit(1);
    }
    madvise(heap, bytes, MADV_NOHUGEPAGE);
    heap_pages = bytes / PAGE;
}

/* a child: fill, answer, then one command byte at a time ('q' ends it) */
static void child(int index, int cmd_fd, int ans_fd, size_t bytes)
{
    map_heap(bytes);
    struct answer a = {0, do_command(0), hugekb()};
    if (write_full(ans_fd, &a, sizeof a) < 0) _exit(1);
    for (;;) {
        unsigned char c;
        if (read_full(cmd_fd, &c, 1) < 0 || c == 'q') _exit(0);
        a.cmd = c;
        a.pages = do_command(c);
        a.hugekb = hugekb();
        if (write_full(ans_fd, &a, sizeof a) < 0) _exit(1);
    }
    (void)index;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: treeheap MIB NPROCS\n");
        return 2;
    }
    size_t bytes = strtoul(argv[1], NULL, 0) << 20;
    long nprocs = strtol(argv[2], NULL, 0);
    if (nprocs < 1 || nprocs > MAXPROCS) {
        fprintf(stderr, "treeheap: 1 to %d processes\n", MAXPROCS);
        return 2;
    }
    /* all pipes first, then the children: each keeps its own command pipe's
     * read end and the answers' write end */
    int cmd[MAXPROCS][2], ans[2];
    if (pipe(ans) < 0) { perror("treeheap: pipe"); return 1; }
    for (long i = 1; i < nprocs; i++)
        if (pipe(cmd[i]) < 0) { perror("treeheap: pipe"); return 1; }
    pid_t kids[MAXPROCS];
    fflush(stdout);
    for (long i = 1; i < nprocs; i++) {
        kids[i] = fork();
        if (kids[i] < 0) { perror("treeheap: fork"); return 1; }
        if (kids[i] == 0) {
            for (long k = 1; k < nprocs; k++) {
                close(cmd[k][1]);
                if (k != i) close(cmd[k][0]);
            }
            close(ans[0]);
            rng = 0x243f6a8885a308d3ull * (uint64_t)(i + 1) | 1;
            child((int)i, cmd[i][0], ans[1], bytes);
        }
    }
    for (long i = 1; i < nprocs; i++) close(cmd[i][0]);
    close(ans[1]);
    rng = 0x243f6a8885a308d3ull | 1;
    map_heap(bytes);
    long pages = do_command(0), hk = hugekb();
    for (long i = 1; i < nprocs; i++) {
        struct answer a;
        if (read_full(ans[0], &a, sizeof a) < 0) { fprintf(stderr, "treeheap: a child is gone\n"); return 1; }
        pages += a.pages;
        hk += a.hugekb;
    }
    printf("filled %zu procs=%ld hugekb=%ld\n", (size_t)pages * PAGE, nprocs, hk);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof line, stdin)) {
        long pct;
        if (sscanf(line, "dirty %ld", &pct) == 1 && pct > 0 && pct < 100) {
            double t0 = mono_s();
            unsigned char c = (unsigned char)pct;
            for (long i = 1; i < nprocs; i++)
                if (write_full(cmd[i][1], &c, 1) < 0) { fprintf(stderr, "treeheap: a child is gone\n"); return 1; }
            long n = do_command(pct);
            for (long i = 1; i < nprocs; i++) {
                struct answer a;
                if (read_full(ans[0], &a, sizeof a) < 0) { fprintf(stderr, "treeheap: a child is gone\n"); return 1; }
                n += a.pages;
            }
            printf("dirtied %ld seconds=%.6f\n", n, mono_s() - t0);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("unknown command\n");
        }
        fflush(stdout);
    }
    for (long i = 1; i < nprocs; i++) {
        unsigned char q = 'q';
        write_full(cmd[i][1], &q, 1);
        close(cmd[i][1]);
    }
    int status, rc = 0;
    for (long i = 1; i < nprocs; i++)
        if (waitpid(kids[i], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
    return rc;
}
