/* Where a piece of a checkpoint belongs, and the check that it is there.
 *
 * Every manifest, tree and journal names the job (DIR/job `id`) and the
 * checkpoint index it was written for, and a process's part its PID; a
 * reader compares those with the place it was found at (DIR/ckpt.N/,
 * DIR/ckpt.N/proc.PID/, DIR/jrnl.N/).  So a piece swapped with the same
 * piece of another checkpoint, or copied from another job's store, is
 * refused by name instead of being trusted. */
#ifndef LZ_STORE_PLACE_H
#define LZ_STORE_PLACE_H
#include "format.h"
#include <stddef.h>
#include <stdint.h>

struct lz_place {
    char store[LZ_PATH_MAX]; /* DIR */
    uint64_t index;          /* N of ckpt.N / jrnl.N */
    int32_t pid;             /* PID of proc.PID, 0 for the directory's own part */
    int known;               /* the path has one of the forms above */
};

/* Parses a part's directory: DIR/ckpt.N, DIR/jrnl.N, either + /proc.PID. */
void lz_place_parse(const char *part_dir, struct lz_place *pl);

/* The job identity of the store at `store` (its job file): 0, or -1 with
 * why ("the store's job file is damaged", ...). */
int lz_place_job(const char *store, uint64_t job[2], char *why, size_t whylen);

/* Checks what a piece says of itself against where it was found: its job,
 * its index, its PID (pid < 0: not checked).  `what` names the piece ("its
 * manifest").  0, or -1 with why. */
int lz_place_check(const char *part_dir, const char *what, const uint64_t job[2], uint64_t index, int32_t pid,
                   char *why, size_t whylen);
#endif
