/* No privilege from a store: a restart runs the job as the user it ran as,
 * with the ids and capabilities it had, and only if the restarting user
 * could have given them. */
#ifndef LZ_CLI_PRIVILEGE_H
#define LZ_CLI_PRIVILEGE_H
#include "manifest.h"
#include <stddef.h>

/* Run by `restart` before anything else: root restarting a store that
 * belongs to an ordinary user becomes that user for good — its gid and uid,
 * and the supplementary groups the checkpoint to restart (newest, or --at)
 * recorded if the user has each of them now, else its login groups; no
 * capability.  0, or -1 with why. */
int privilege_become_store_owner(const char *dir, int have_at, uint64_t at, char *why, size_t whylen);

/* The ids, groups and capabilities a part of a checkpoint claims are exactly
 * what this process has and will give the restarted program.  0, or -1 with
 * why ("... refused"). */
int privilege_check_image(const struct lz_image *img, char *why, size_t whylen);
#endif
