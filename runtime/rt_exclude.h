/* Memory the program excluded from its checkpoints (lazarus_exclude,
 * libckpt's exclude_bytes), and how the page plan obeys it (rt_exclude.c).
 *
 * Dead bytes are left out; a page wholly dead holds no data in the image
 * (in a private file mapping it is stored as zeros, else the restorer would
 * map the file's bytes there), a page partly dead is stored with its dead
 * bytes zeroed.  Read-only bytes are stored by the next checkpoint
 * (`stored_at`); from the one after on, a page wholly read-only refers to
 * the frame that checkpoint's map holds, written or not. */
#ifndef LZ_RT_EXCLUDE_H
#define LZ_RT_EXCLUDE_H
#include "rt.h"
#include "rt_map.h"

/* The program ever excluded memory: copy mode is off (its plan of clean
 * pages knows only what the previous checkpoint held, not what an include
 * brought back). */
int rt_excl_used(void);

/* In the pause, after the dirty scan: read-only ranges new since the last
 * checkpoint are stored by this one; with LAZARUS_CHECK_EXCLUSIONS, a write
 * into a stored read-only range is named on stderr and its pages stored
 * again. */
void rt_excl_pause(struct rt_ckpt *ck);

/* The planner's sink for one run of pages (rt_plan.c's push). */
typedef int (*rt_push_fn)(void *pl, uint64_t addr, uint64_t len, int kind, uint32_t pframe, uint32_t skip,
                          int file, int64_t delta, int flags);
#define RT_ITEM_ZEROED 1 /* rt_item.pad: a page partly dead, its dead bytes zeroed in a copy */

/* A run of pages as the plan made it, cut where the exclusions say, each
 * piece handed to fn. */
int rt_excl_split(void *pl, rt_push_fn fn, const struct rt_map *pm, uint64_t addr, uint64_t len, int kind,
                  uint32_t pframe, uint32_t skip, int file, int64_t delta);

/* In the writer, once planned: the partly dead pages copied into the arena
 * with their dead bytes zeroed. */
int rt_excl_zero(struct rt_ckpt *ck);

/* The table as of the pause, for the manifest (LZ_SEC_EXCLUDE). */
size_t rt_excl_table(const struct lz_exclusion **v);
#endif
