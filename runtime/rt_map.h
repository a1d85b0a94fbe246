/* What the newest committed checkpoint stored, remembered by the runtime so
 * that the next checkpoint stores only what changed: its extents (sorted by
 * address), the frames they reference and the packs those live in, plus a
 * table of page digests for deduplication.
 *
 * It lives in a shared anonymous mapping left out of every image: the forked
 * writer builds the next map in the other of two slots, and the program
 * adopts that slot at its next checkpoint once the write is known to have
 * committed.  Nothing here survives a restart; rt_map_seed() rebuilds the map
 * from the manifest the program was restored from. */
#ifndef LZ_RT_MAP_H
#define LZ_RT_MAP_H
#include "format.h"
#include <stddef.h>
#include <stdint.h>

struct rt_map_pack { uint64_t id, size; };

struct rt_map {
    uint64_t index;  /* checkpoint described; 0 = none */
    uint32_t tracked; /* dirty tracking has run since that checkpoint's snapshot: a page it did not
                       * report still holds what the map says */
    uint32_t pad;
    uint64_t nextents, nframes, npacks;
    uint64_t extents_cap, frames_cap, packs_cap;
    struct lz_extent *extents;
    struct lz_frame *frames; /* frame.pack indexes packs[] */
    struct rt_map_pack *packs;
};

/* A page's content seen before: XXH3-128 of the page, and where a frame that
 * the map references holds it.  `check` guards against an entry torn by a
 * writer killed while filling it. */
struct rt_dedup_ent {
    uint64_t d0, d1;
    uint64_t offset; /* of the frame in its pack */
    uint32_t pack;   /* pack id (low 32 bits) */
    uint32_t skip;
    uint64_t check;
};

/* 0, or -1 when the memory cannot be had (checkpoints are then full ones). */
int rt_map_init(void);
int rt_map_ready(void);
/* In a forked child: the parent's map is let go (the child's first checkpoint is a full one). */
void rt_map_fork_child(void);
/* 1 if [start,end) is the map's memory (left out of the image). */
int rt_map_owns(uint64_t start, uint64_t end);

/* The map of the newest committed checkpoint, and the slot a writer fills. */
struct rt_map *rt_map_current(void);
struct rt_map *rt_map_next(void);
struct rt_dedup_ent *rt_map_dedup(uint64_t *nslots);
uint64_t rt_dedup_check(const struct rt_dedup_ent *e);

/* At the start of checkpoint `index`: if the previous write (of `prev`)
 * filled the next slot and committed, that slot becomes current.  Otherwise
 * the current map stays, but its dirty information was spent on the failed
 * write: it is marked untracked (every page is compared by digest). */
void rt_map_settle(const char *dir);
/* A checkpoint failed after its dirty scan, which re-armed the tracking:
 * what the interval changed is lost, every page is compared by digest next. */
void rt_map_untrack(void);
/* The program started a writer for checkpoint `index` (forked or not). */
void rt_map_started(uint64_t index);
/* Scratch memory a writer sharing the program's memory still reads: freed at
 * the next rt_map_settle(), when that writer is done. */
void rt_map_keep_arena(void *base, uint64_t len);
/* The program's pause, told by the program to its forked writer. */
void rt_map_set_pause(uint64_t ns);
uint64_t rt_map_pause(void);
/* Called by the writer once the next slot describes checkpoint `index`,
 * before the commit. */
void rt_map_filled(uint64_t index);

/* Mapping flags (LZ_RF_*) a writer read from smaps, for the program's cache:
 * appended by the writer, taken by the program at its next checkpoint. */
struct rt_map_flags { uint64_t start, end; uint32_t flags, pad; };
void rt_map_learn(uint64_t start, uint64_t end, uint32_t flags);
size_t rt_map_learned(const struct rt_map_flags **v);
void rt_map_learned_clear(void);

/* After a restart from `index`: fresh memory, the map read from that
 * checkpoint's manifest (tracked as given). */
void rt_map_seed(const char *dir, uint64_t index, int tracked);
#endif
