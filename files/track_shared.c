/* The blocks saved in an interval by any process of the job, so that each is
 * saved once per interval whichever process writes it (a shell loop of `dd`
 * patching one image: thousands of short processes, each of which saved
 * again what another saved a moment before).  No message to the supervisor:
 * every process of the job maps DIR/files.saved.<N> (journal_layout.h), a
 * sparse file made by the first that needs it, and reads and sets its bits
 * with atomic operations only (no lock a killed process could hold).
 *
 * The rule that keeps a rollback exact: a bit is set only after the DATA
 * record of its block is committed in the journal of the process that saved
 * it (its magic stored in the page cache, or on the disk with machine
 * durability), and that journal is one of the interval's (ckpt.N/ or a
 * proc.<pid>/ below it), which the rollback merges by stamp.  A process
 * seeing the bit changes the block after that record's stamp, so the first
 * record of the block still holds its content at N.  Killed between record
 * and bit: the block is saved again by the next writer, a later record that
 * loses.  Everything else errs towards saving again:
 * - an entry is published (READY) only once filled; one being filled is
 *   skipped, so two processes may make two entries for one inode, each with
 *   its own bits (each set only after a record): some blocks saved twice;
 * - `orig`, the size its maker saw at its first change of the interval: a
 *   block at or past it needs no undo (it did not exist at N, or the
 *   truncation that cut it saved it first), true for every process after;
 * - an inode number reused within the interval names a file made since N,
 *   whose content needs no undo (the rollback removes it);
 * - SM_INODE_DONE: an INODE record of the inode is committed (trk_first_touch
 *   then writes none unless it must keep a link);
 * - a full table or bitmap space, a failed open or allocation: that process
 *   saves what its own tables say, as before.
 * The map starts empty in each interval (a file per N; the main program
 * removes the previous one, the CLI all of them when a job starts, restarts
 * or ends: after a restart its bits would name records the rollback
 * emptied).  It lives in the engine's memory (left out of checkpoints), is
 * inherited by a fork and opened again after an exec or a restart. */
#include "track_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#define SM_MAGIC 0x3144455641534c5aull /* "LZSAVED1" */
#define SM_READY 1u
#define SM_FILLING 2u
#define SM_PROBES 64
#define SM_INODE_DONE 1u /* an INODE record of it is committed */

struct sm_head {
    uint64_t magic;  /* set once the table's blocks are allocated */
    uint64_t index;  /* the interval */
    uint64_t used;   /* bytes of bitmaps handed out after the table */
    uint64_t pad[5];
};

struct sm_ent {
    uint32_t state; /* 0 free, SM_FILLING, SM_READY */
    uint32_t flags; /* SM_INODE_DONE */
    uint64_t dev, ino;
    uint64_t orig;    /* blocks at or past it need no undo */
    uint64_t bits;    /* offset of the bitmap in the map, 0: none */
    uint64_t nblocks; /* bits in it */
};

_Static_assert(sizeof(struct sm_head) == 64, "sm_head");
_Static_assert(sizeof(struct sm_ent) == 48, "sm_ent");
#define SM_TABLE_END ((sizeof(struct sm_head) + (size_t)SM_SLOTS * sizeof(struct sm_ent) + 4095) & ~(size_t)4095)

char *trk_sm_area(struct interval *v)
{
    return trk_engine_mem + 2 * ARENA_BYTES + FDT_BYTES + 2 * LOG_WIN + (size_t)(v - trk_E.iv) * SM_BYTES;
}

static void put_name(char *out, uint64_t index)
{
    const size_t l = trk_E.store_len, pl = sizeof("/" FJ_SAVED) - 1;
    memcpy(out, trk_E.store, l);
    memcpy(out + l, "/" FJ_SAVED, pl);
    char tmp[24];
    int k = 0;
    do tmp[k++] = (char)('0' + index % 10); while ((index /= 10));
    size_t i = l + pl;
    while (k) out[i++] = tmp[--k];
    out[i] = 0;
}

void trk_sm_detach(struct interval *v)
{
    if (v->sm) trk_win_drop(v->sm, SM_BYTES);
    if (v->sm_fd >= 0) lz_sc1(SYS_close, v->sm_fd);
    v->sm_fd = -1;
    v->sm = NULL;
    v->sm_state = 0;
}

/* Maps this interval's map, made if need be: 0, or -1 (then never again in
 * this interval: the process saves what its own tables say). */
static int attach(struct interval *v)
{
    if (v->sm) return 0;
    if (v->sm_state < 0 || !v->index || !trk_E.store_len) return -1;
    v->sm_state = -1;
    char path[LZ_PATH_MAX + 48];
    put_name(path, v->index);
    long fd = lz_sc4(SYS_openat, AT_FDCWD, path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return -1;
    struct stat st;
    long r = lz_sc2(SYS_fstat, fd, &st);
    if (r == 0 && (!S_ISREG(st.st_mode) || st.st_nlink != 1)) r = -EINVAL;
    /* sparse: blocks are allocated before they are written (below) */
    if (r == 0 && (uint64_t)st.st_size < SM_BYTES) r = lz_sc2(SYS_ftruncate, fd, SM_BYTES);
    char *at = trk_sm_area(v);
    if (r == 0) {
        long a = lz_sc6(SYS_mmap, (long)at, SM_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
        r = a < 0 && a >= -LZ_MAX_ERRNO ? a : 0;
    }
    struct sm_head *h = (struct sm_head *)at;
    /* a store into a shared mapping of a hole would be a SIGBUS on a full
     * disk: the table's blocks are allocated first (bitmaps as handed out) */
    if (r == 0 && __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SM_MAGIC) {
        r = lz_sc4(SYS_fallocate, fd, 0, 0, SM_TABLE_END);
        if (r == 0) {
            uint64_t zero = 0;
            __atomic_compare_exchange_n(&h->index, &zero, v->index, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
            __atomic_store_n(&h->magic, SM_MAGIC, __ATOMIC_RELEASE);
        }
    }
    if (r == 0 && __atomic_load_n(&h->index, __ATOMIC_RELAXED) != v->index) r = -EINVAL;
    if (r < 0) { lz_sc1(SYS_close, fd); trk_win_drop(at, SM_BYTES); return -1; }
    v->sm_fd = (int)trk_own_fd(fd); /* for allocating the bitmaps' blocks */
    if (v->sm_fd < 0) { trk_win_drop(at, SM_BYTES); return -1; }
    v->sm = at;
    v->sm_state = 1;
    /* the main program removes the previous interval's map (a process still
     * in it keeps its mapping) */
    if (trk_E.main && trk_E.sm_prev && trk_E.sm_prev != v->index) {
        put_name(path, trk_E.sm_prev);
        lz_sc3(SYS_unlinkat, AT_FDCWD, path, 0);
    }
    if (trk_E.main) trk_E.sm_prev = v->index;
    return 0;
}

static uint64_t mix(uint64_t a, uint64_t b) { uint64_t x = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull); x ^= x >> 29; x *= 0xbf58476d1ce4e5b9ull; return x ^ (x >> 32); }

/* The shared entry of e's inode, made (with e->orig) if there is none:
 * NULL when the map cannot be had. */
struct sm_ent *trk_sm_entry(struct interval *v, struct fj_ino *e)
{
    if (e->sm_tried) return e->sm;
    e->sm_tried = 1;
    if (attach(v) < 0) return NULL;
    struct sm_ent *tab = (struct sm_ent *)(v->sm + sizeof(struct sm_head));
    struct sm_head *h = (struct sm_head *)v->sm;
    uint32_t s = (uint32_t)mix(e->dev, e->ino) & (SM_SLOTS - 1);
    for (int probe = 0; probe < SM_PROBES; probe++, s = (s + 1) & (SM_SLOTS - 1)) {
        struct sm_ent *x = &tab[s];
        uint32_t st = __atomic_load_n(&x->state, __ATOMIC_ACQUIRE);
        if (st == SM_READY) {
            if (x->dev == e->dev && x->ino == e->ino) return e->sm = x;
            continue;
        }
        if (st != 0) continue; /* being filled (perhaps by a process killed meanwhile): skipped */
        if (!__atomic_compare_exchange_n(&x->state, &st, SM_FILLING, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            /* another process took it: look again at this slot */
            if (st == SM_READY && x->dev == e->dev && x->ino == e->ino) return e->sm = x;
            continue;
        }
        /* [progress counter | saved bits | claimed bits] */
        uint64_t nb = (e->orig + FJ_BLOCK - 1) / FJ_BLOCK, bytes = 8 + 2 * ((nb + 63) / 64) * 8, off = 0;
        if (nb) {
            bytes = (bytes + 63) & ~63ull;
            off = __atomic_fetch_add(&h->used, bytes, __ATOMIC_RELAXED) + SM_TABLE_END;
            /* its blocks allocated before anyone stores into them */
            if (off + bytes > SM_BYTES || lz_sc4(SYS_fallocate, v->sm_fd, 0, off, bytes) < 0) off = 0, nb = 0;
        }
        x->dev = e->dev;
        x->ino = e->ino;
        x->orig = e->orig;
        x->bits = off;
        x->nblocks = nb;
        __atomic_store_n(&x->state, SM_READY, __ATOMIC_RELEASE);
        return e->sm = x;
    }
    return NULL; /* the table is full here */
}

uint64_t trk_sm_orig(const struct sm_ent *x) { return x->orig; }

static uint64_t *gen_of(struct interval *v, const struct sm_ent *x) { return (uint64_t *)(v->sm + x->bits); }
static uint64_t *saved_of(struct interval *v, const struct sm_ent *x) { return gen_of(v, x) + 1; }
static uint64_t *claims_of(struct interval *v, const struct sm_ent *x) { return saved_of(v, x) + (x->nblocks + 63) / 64; }

/* Block b's content at N is in a committed record of some journal of the
 * interval. */
int trk_sm_saved(struct interval *v, const struct sm_ent *x, uint64_t b)
{
    if (b >= x->nblocks) return 0;
    return (__atomic_load_n(saved_of(v, x) + b / 64, __ATOMIC_ACQUIRE) >> (b % 64)) & 1;
}

/* Blocks [b0, b1) are: their records are committed (and synced, with
 * machine durability). */
void trk_sm_mark(struct interval *v, struct sm_ent *x, uint64_t b0, uint64_t b1)
{
    if (b1 > x->nblocks) b1 = x->nblocks;
    uint64_t *w = saved_of(v, x);
    for (uint64_t b = b0; b < b1;) {
        uint64_t hi = (b / 64 + 1) * 64 < b1 ? (b / 64 + 1) * 64 : b1;
        uint64_t m = (hi - b == 64 ? ~0ull : ((1ull << (hi - b)) - 1)) << (b % 64);
        __atomic_fetch_or(&w[b / 64], m, __ATOMIC_RELEASE);
        b = hi;
    }
    if (b0 < b1) __atomic_fetch_add(gen_of(v, x), 1, __ATOMIC_RELEASE);
}

/* Claims: a process about to save a block says so, so that another one
 * that needs it at the same time waits for that record instead of saving
 * it again (two dd writing one image at once each save all of it before
 * they write, for their stdout).  A claim only ever makes a process wait:
 * skipping a block needs its saved bit.  1: the block is ours to save (or
 * beyond the map), 0: another process claimed it. */
int trk_sm_claim(struct interval *v, struct sm_ent *x, uint64_t b)
{
    if (b >= x->nblocks) return 1;
    uint64_t m = 1ull << (b % 64);
    return !(__atomic_fetch_or(claims_of(v, x) + b / 64, m, __ATOMIC_ACQ_REL) & m);
}

/* A save that failed gives its claims back. */
void trk_sm_unclaim(struct interval *v, struct sm_ent *x, uint64_t b0, uint64_t b1)
{
    if (!x->nblocks) return; /* no bitmap (x->bits is 0) */
    for (uint64_t b = b0; b < b1 && b < x->nblocks; b++)
        __atomic_fetch_and(claims_of(v, x) + b / 64, ~(1ull << (b % 64)), __ATOMIC_RELEASE);
    __atomic_fetch_add(gen_of(v, x), 1, __ATOMIC_RELEASE);
}

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* Waits for block b, claimed by another process, to be saved: 1 once it is,
 * 0 if its claim was given back or nothing was saved in the inode for
 * SM_STALL_NS (its saver was killed, stopped, or starves): then the caller
 * saves it itself (a later record, which loses). */
#define SM_STALL_NS 100000000ull
int trk_sm_wait(struct interval *v, struct sm_ent *x, uint64_t b)
{
    uint64_t g = __atomic_load_n(gen_of(v, x), __ATOMIC_ACQUIRE), since = now_ns();
    for (;;) {
        if (trk_sm_saved(v, x, b)) return 1;
        if (!((__atomic_load_n(claims_of(v, x) + b / 64, __ATOMIC_ACQUIRE) >> (b % 64)) & 1)) return 0;
        uint64_t g2 = __atomic_load_n(gen_of(v, x), __ATOMIC_ACQUIRE), t = now_ns();
        if (g2 != g) { g = g2; since = t; }
        else if (t - since > SM_STALL_NS) return 0;
        struct timespec nap = {0, 20000};
        lz_sc2(SYS_nanosleep, &nap, NULL);
    }
}

/* An INODE record of the inode is committed in a journal of the interval:
 * the first one holds its size, mode and times at N (each process's first
 * change of it comes after its own record, or after seeing this), so a
 * later one would be ignored by the rollback; with none to write, most of
 * a shell loop's processes never make a journal at all. */
int trk_sm_inode_done(const struct sm_ent *x) { return (__atomic_load_n(&x->flags, __ATOMIC_ACQUIRE) & SM_INODE_DONE) != 0; }
void trk_sm_inode_mark(struct sm_ent *x) { __atomic_fetch_or(&x->flags, SM_INODE_DONE, __ATOMIC_RELEASE); }
