/* Reading and validating a checkpoint manifest (format.h).  A manifest that
 * passes lz_manifest_parse() can be used without further bounds checks. */
#ifndef LZ_MANIFEST_H
#define LZ_MANIFEST_H
#include "format.h"
#include <stddef.h>

struct lz_image {
    void *buf;             /* the whole manifest (owned) */
    size_t size;
    const struct lz_header *hdr; /* in buf, or a copy in owned: a version-5 header completed (manifest.c) */
    void *owned[24];       /* copies of the header and of records longer than this build's (owned;
                            * copies of the struct share them, as they share buf) */
    size_t nowned;
    const struct lz_proc *proc;
    const struct lz_thread *threads; size_t nthreads; /* the main thread (tid = pid) first */
    const struct lz_region *regions; size_t nregions;
    const struct lz_extent *extents; size_t nextents;
    const struct lz_frame *frames;   size_t nframes;
    const struct lz_fd *fds;         size_t nfds;
    const struct lz_pack *packs;     size_t npacks;
    const struct lz_chan *chans;     size_t nchans;
    const struct lz_event *events;   size_t nevents;
    const struct lz_pty *ptys;       size_t nptys;   /* pseudo-terminals whose master the process held */
    const char *pty_data;            size_t pty_data_len; /* their queued bytes (lz_pty.data) */
    const struct lz_usock *usocks;   size_t nusocks;
    const struct lz_inet *inets;     size_t ninets;
    const struct lz_timer *timers;   size_t ntimers;
    const struct lz_ipc *ipc;        size_t nipc;     /* System V objects, message queues */
    const char *ipc_bytes;           size_t ipc_len;  /* their bytes (lz_ipc.data, .length) */
    const struct lz_siginfo_rec *sigq; size_t nsigq; /* pending signals past proc->pending's */
    const struct lz_exclusion *excl; size_t nexcl; /* memory the program excluded (none in older manifests) */
    const char *strings;             size_t strings_len;
    const void *auxv;                size_t auxv_len;
    const uint32_t *groups;          /* the supplementary groups, proc->ngroups of them */
    size_t ngroups_listed;
};

/* Takes ownership of buf (malloc'ed).  On failure returns -1 (damage) or
 * LZ_UNREADABLE (a version, byte order or section this build cannot read:
 * intact, written by another Lazarus) and writes a one-line reason (without
 * the path) into why.  Reads every version from LZ_VERSION_MIN to LZ_VERSION;
 * records longer than this build's are read by their known prefix. */
#define LZ_UNREADABLE (-2)
int lz_manifest_parse(void *buf, size_t size, struct lz_image *img, char *why, size_t whylen);
/* The checkpoint's machine (architecture, page size) is this one's kind: 0,
 * or LZ_UNREADABLE and a line naming what differs (a restart's check). */
int lz_image_fits_host(const struct lz_image *img, char *why, size_t whylen);
/* Reads DIR/ckpt.N/manifest and parses it; why gets a full one-line reason. */
int lz_manifest_load(const char *ckpt_dir, struct lz_image *img, char *why, size_t whylen);
void lz_image_free(struct lz_image *img);
static inline const char *lz_str(const struct lz_image *img, uint32_t off)
{
    return off ? img->strings + off : "";
}
const char *lz_trigger_name(uint32_t trigger);
/* The data in flight of pipe or socket c (store/chans.c): its file in
 * ckpt_dir, checked against the size and checksum of the record.  0 and
 * *data malloc'ed (NULL if nothing is in flight), or -1 with a one-line
 * reason naming the file. */
int lz_chan_data(const char *ckpt_dir, const struct lz_image *img, const struct lz_chan *c, void **data,
                 char *why, size_t whylen);
/* The record of the named pipe LZ_FD_FIFO descriptor f opens, or NULL. */
const struct lz_chan *lz_fifo_chan(const struct lz_image *img, const struct lz_fd *f);
/* The local socket record of descriptor fd (store/usocks.c), or NULL. */
const struct lz_usock *lz_usock_of(const struct lz_image *img, int32_t fd);
/* The senders of the datagrams queued on u (per datagram: u32 length + sun_path),
 * read from ckpt_dir and checked: 0 and *data malloc'ed (NULL: none kept), or -1 and why. */
int lz_usock_senders(const char *ckpt_dir, const struct lz_image *img, const struct lz_usock *u, void **data, char *why,
                     size_t whylen);
/* Every LZ_FD_USOCK descriptor has exactly one well-formed record: 0, or -1 and why. */
int lz_usocks_valid(const struct lz_image *img, char *why, size_t whylen);
/* The same from the data file's path (another process's part). */
int lz_chan_data_path(const char *path, const struct lz_chan *c, void **data, char *why, size_t whylen);
#endif
