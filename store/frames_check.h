/* Phase 1 of a restart, and `verify`: every frame a part of a checkpoint
 * refers to is in its pack, whole and unchanged (its stored bytes' checksum),
 * read ahead so that the restorer finds it in the page cache. */
#ifndef LZ_STORE_FRAMES_CHECK_H
#define LZ_STORE_FRAMES_CHECK_H
#include "manifest.h"
#include <stddef.h>

/* 0, or -1 with why naming the pack and the frame. */
int lz_check_frames(const char *part_dir, const struct lz_image *img, char *why, size_t whylen);
#endif
