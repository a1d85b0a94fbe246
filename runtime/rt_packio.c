/* Appending a checkpoint's page data to its pack file (rt_packio.h).
 *
 * Threaded: the writer fills blocks in turn; a full block is handed to the
 * I/O thread (a bare CLONE_THREAD running only system calls: the writer is
 * a raw clone of the program, no libc threads here) through two counters,
 * `submitted` by the writer and `completed` by the thread, with futexes to
 * sleep on.  Every block but the last is exactly BLOCK bytes at a
 * BLOCK-aligned offset, as O_DIRECT wants; the last is padded to ALIGN and
 * the file cut to size afterwards. */
#include "rt_packio.h"
#include "rt.h"
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <string.h>

#define BLOCK (8u << 20)
#define NBLOCK 4
#define ALIGN 4096u
#define STACK (64u << 10)

struct rt_packio {
    long fd;
    int threaded;
    volatile int direct;
    char *blk[NBLOCK];
    uint32_t len[NBLOCK];
    uint32_t used;   /* bytes in the block being filled */
    uint64_t off;    /* bytes appended */
    uint64_t woff;   /* file offset of the next block written */
    volatile uint32_t submitted, completed; /* blocks handed over, blocks written */
    volatile uint32_t seq, stop, done;      /* the thread sleeps on seq */
    volatile long err;
};

long rt_clone_call(unsigned long flags, void *stack_top, void (*fn)(void *), void *arg);

#define fwait rt_futex_wait
#define fwake rt_futex_wake
static uint32_t load(volatile uint32_t *w) { return __atomic_load_n(w, __ATOMIC_ACQUIRE); }
static void store(volatile uint32_t *w, uint32_t v) { __atomic_store_n(w, v, __ATOMIC_RELEASE); }

/* Drops O_DIRECT from the descriptor.  0 or -errno. */
static long buffered(struct rt_packio *io)
{
    long fl = lz_sc2(SYS_fcntl, io->fd, F_GETFL);
    long r = fl < 0 ? fl : lz_sc3(SYS_fcntl, io->fd, F_SETFL, fl & ~O_DIRECT);
    if (r == 0) io->direct = 0;
    return r < 0 ? r : 0;
}

static long write_block(struct rt_packio *io, const char *b, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        long n = lz_sc4(SYS_pwrite64, io->fd, b + done, len - done, off + done);
        if (n == -EINTR) continue;
        if (n == -EINVAL && io->direct) { /* O_DIRECT refused after all: buffered from here on */
            if (buffered(io) < 0) return -EINVAL;
            continue;
        }
        if (n <= 0) return n ? n : -EIO;
        done += (size_t)n;
    }
    /* buffered: start writeback now, the disk works while the next block is made */
    if (!io->direct) lz_sc4(SYS_sync_file_range, io->fd, off, len, SYNC_FILE_RANGE_WRITE);
    return 0;
}

static void io_thread(void *arg)
{
    struct rt_packio *io = arg;
    for (;;) {
        uint32_t q = load(&io->seq), c = io->completed;
        if (c == load(&io->submitted)) {
            if (load(&io->stop)) break;
            fwait(&io->seq, q); /* returns at once if seq moved since it was read */
            continue;
        }
        uint32_t i = c % NBLOCK;
        if (!io->err) {
            long e = write_block(io, io->blk[i], io->len[i], io->woff);
            if (e < 0) io->err = e;
        }
        io->woff += io->len[i];
        store(&io->completed, c + 1);
        fwake(&io->completed);
    }
    store(&io->done, 1);
    fwake(&io->done);
}

static void poke(struct rt_packio *io)
{
    store(&io->seq, io->seq + 1);
    fwake(&io->seq);
}

struct rt_packio *rt_packio_open(struct rt_arena *arena, const char *path, int threaded, long *err)
{
    struct rt_packio *io = arena_alloc(arena, sizeof *io);
    char *stack = threaded ? arena_alloc(arena, STACK) : NULL;
    if (!io || (threaded && !stack)) { *err = -ENOMEM; return NULL; }
    memset(io, 0, sizeof *io);
    for (int k = 0; k < (threaded ? NBLOCK : 1); k++) {
        char *b = arena_alloc(arena, BLOCK + ALIGN);
        if (!b) { *err = -ENOMEM; return NULL; }
        io->blk[k] = (char *)(((uintptr_t)b + ALIGN - 1) & ~(uintptr_t)(ALIGN - 1));
    }
    long flags = O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC;
    io->fd = threaded ? lz_sc4(SYS_openat, AT_FDCWD, path, flags | O_DIRECT, 0600) : -EINVAL;
    io->direct = io->fd >= 0;
    if (io->fd < 0) io->fd = lz_sc4(SYS_openat, AT_FDCWD, path, flags, 0600);
    if (io->fd < 0) { *err = io->fd; return NULL; }
    if (threaded) {
        long tid = rt_clone_call(CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SYSVSEM,
                                 stack + STACK, io_thread, io);
        if (tid < 0) { /* no thread: write in turn, buffered */
            threaded = 0;
            if (io->direct && buffered(io) < 0) { lz_sc1(SYS_close, io->fd); *err = -EINVAL; return NULL; }
        }
    }
    io->threaded = threaded;
    return io;
}

/* Hands the block being filled over and waits until the next one is free. */
static long submit(struct rt_packio *io)
{
    uint32_t i = io->submitted % NBLOCK;
    io->len[i] = io->used;
    io->used = 0;
    if (!io->threaded) {
        long e = write_block(io, io->blk[0], io->len[0], io->woff);
        io->woff += io->len[0];
        if (e < 0) io->err = e;
        return io->err;
    }
    store(&io->submitted, io->submitted + 1);
    poke(io);
    for (;;) {
        uint32_t c = load(&io->completed);
        if (io->submitted - c < NBLOCK) break;
        fwait(&io->completed, c);
    }
    return io->err;
}

long rt_packio_append(struct rt_packio *io, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        if (io->err) return io->err;
        size_t k = BLOCK - io->used < n ? BLOCK - io->used : n;
        memcpy(io->blk[io->threaded ? io->submitted % NBLOCK : 0] + io->used, s, k);
        io->used += (uint32_t)k;
        io->off += k;
        s += k;
        n -= k;
        if (io->used == BLOCK) {
            long e = submit(io);
            if (e < 0) return e;
        }
    }
    return io->err;
}

uint64_t rt_packio_offset(const struct rt_packio *io) { return io->off; }

static void stop_thread(struct rt_packio *io)
{
    if (!io->threaded) return;
    store(&io->stop, 1);
    poke(io);
    while (!load(&io->done)) fwait(&io->done, 0);
}

long rt_packio_finish(struct rt_packio *io)
{
    long e = io->err;
    if (!e && io->used) {
        /* O_DIRECT writes whole aligned blocks: pad, cut the file to size below */
        uint32_t pad = (ALIGN - io->used % ALIGN) % ALIGN;
        memset(io->blk[io->threaded ? io->submitted % NBLOCK : 0] + io->used, 0, pad);
        io->used += pad;
        e = submit(io);
    }
    stop_thread(io);
    if (!e) e = io->err;
    if (!e && io->woff != io->off) e = lz_sc2(SYS_ftruncate, io->fd, io->off);
    if (!e) e = lz_sc1(SYS_fsync, io->fd);
    lz_sc1(SYS_close, io->fd);
    return e;
}

void rt_packio_abort(struct rt_packio *io)
{
    stop_thread(io);
    lz_sc1(SYS_close, io->fd);
}
