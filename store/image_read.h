/* A few bytes of a process's memory as a checkpoint holds them (`show`: a
 * thread's signal frame).  Read as the restorer reads memory: the region,
 * its extent, the extent's frame in its pack (of this checkpoint or an
 * older one of its chain), expanded with the product's codec and checked
 * against the frame's XXH3. */
#ifndef LZ_STORE_IMAGE_READ_H
#define LZ_STORE_IMAGE_READ_H
#include "manifest.h"
#include <stddef.h>
#include <stdint.h>

/* Frame f of a manifest read from its pack (fd), expanded and checked: its
 * stored bytes go to `in` (at least f->stored bytes; unused for an
 * uncompressed frame), its raw bytes to `raw` (LZ_FRAME_MAX); work is
 * lz_dctx_size() bytes.  check_stored: the XXH3 of the stored bytes too, as
 * the restart of several processes checks them (frames_check.c).  NULL, or
 * what is wrong: "cannot be read" (errno says why: ENODATA, the pack is
 * shorter), "does not expand", "fails its checksum". */
const char *lz_frame_load(int fd, const struct lz_frame *f, char *in, char *raw, void *work, int check_stored);

/* The image does not hold those bytes (why says what holds them instead). */
#define LZ_NOT_HELD 1

/* [addr, addr + len) of the process img describes, whose manifest is in
 * part_dir, into buf: 0; LZ_NOT_HELD (in no region, excluded by the program,
 * a file's bytes, the vDSO); or -1 (a pack cannot be read, or its frame is
 * damaged).  why: one line, for the last two. */
int lz_image_read(const char *part_dir, const struct lz_image *img, uint64_t addr, void *buf, size_t len, char *why,
                  size_t whylen);
#endif
