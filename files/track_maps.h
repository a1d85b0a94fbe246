/* Writable shared file mappings, private to track_maps.c (the registry,
 * faults, the program's mapping calls) and track_maps_arm.c (protecting
 * them again at each checkpoint, checking the registry against the kernel's
 * list).  Everything under the engine's lock (track_internal.h). */
#ifndef LZ_FILES_TRACK_MAPS_H
#define LZ_FILES_TRACK_MAPS_H
#include "track_internal.h"
#include <sys/mman.h>

#define MAPS_MAX 256            /* mappings registered; more are saved whole per interval (as before) */
#define RUNS_MAX 4096           /* opened runs remembered by a checkpoint's sync */
#define OPEN_BUDGET 8192        /* pages opened one by one per interval; then by chunks */
#define LOG_MAX 256             /* opened ranges logged for the pause */
#define PAGE 4096ull

struct shmap {
    uint64_t start, end; /* page-aligned */
    uint64_t off;        /* the file offset at start */
    uint64_t dev, ino;
    int32_t fd;          /* ours, read-only (shared by the mappings of one inode) */
    int32_t prot;        /* what the program asked for (without PROT_WRITE: kept in case it asks again) */
    uint8_t armed;       /* some pages may be protected by us: a store there faults */
    uint8_t whole;       /* at the next sync: one mprotect for all of it */
    uint8_t dirty;       /* pages opened since it was protected */
};

/* The registry (sorted, disjoint) and the one a sync or a cut builds. */
extern struct shmap shm_reg[MAPS_MAX], shm_nreg[MAPS_MAX];
extern uint32_t shm_nr, shm_nn;
extern uint32_t shm_opened; /* pages opened this interval */
/* The ranges opened since the last protection, for the pause to protect one
 * by one (shm_nlog > LOG_MAX: too many, the mappings they are in as a whole). */
extern struct shm_range { uint64_t a, b; } shm_olog[LOG_MAX];
extern uint32_t shm_nlog;
/* The interval a sync opens (trk_maps_arm's v): what cannot be protected is
 * saved whole into it. */
extern struct interval *shm_sync_v;

/* What a protected page of a mapping the program made `prot` gets. */
static inline int shm_ro(int prot) { return prot & PROT_WRITE ? (prot & ~PROT_WRITE) | PROT_READ : prot; }

uint32_t shm_find(uint64_t a);    /* the first mapping ending after a */
void shm_commit(uint32_t n);      /* shm_nreg[0, n) becomes the registry */
long shm_save(const struct shmap *e, uint64_t s, uint64_t t);
int shm_file_fd(uint64_t dev, uint64_t ino, int via, const char *path);
#endif
