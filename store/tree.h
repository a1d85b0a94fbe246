/* ckpt.N/tree: the processes of a job's checkpoint (format.h, struct
 * lz_tree_*), written by the supervisor just before the commit and read by
 * every command that reads the checkpoint. */
#ifndef LZ_TREE_H
#define LZ_TREE_H
#include "format.h"
#include <stddef.h>
#include <stdint.h>

struct lz_tree {
    uint64_t index;
    uint64_t job[2];
    uint32_t trigger;      /* enum lz_trigger, 0: not recorded (an older tree) */
    struct lz_tree_proc *procs;
    size_t nprocs;
    struct lz_tree_shared *shared;
    size_t nshared;
};

/* Writes and fsyncs DIR/tree (a new file): 0, or -1 with why. */
int lz_tree_write(const char *dir, const struct lz_tree *t, char *why, size_t whylen);
/* Reads and checks ckpt_dir/tree: 0, or -1 with why (malloc'ed arrays). */
int lz_tree_load(const char *ckpt_dir, struct lz_tree *t, char *why, size_t whylen);
void lz_tree_free(struct lz_tree *t);
/* The part of process k: ckpt_dir itself or ckpt_dir/proc.PID. */
void lz_tree_part_dir(char *out, size_t len, const char *ckpt_dir, const struct lz_tree_proc *p);
#endif
