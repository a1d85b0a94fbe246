/* `lazarus show` (cmd_show.c): one checkpoint read as restart reads it —
 * its tree and every live process's manifest — and printed a section at a
 * time, as aligned text or into one JSON document (json_out.h).  The
 * sections of the processes are show_proc.c's (threads: show_threads.c),
 * those of the store and its journals show_store.c's. */
#ifndef LZ_CLI_SHOW_H
#define LZ_CLI_SHOW_H
#include "json_out.h"
#include "manifest.h"
#include "tree.h"
#include <stdint.h>

struct show {
    const char *dir;       /* the store, absolute */
    uint64_t index;        /* the checkpoint shown */
    char ckpt[LZ_PATH_MAX + 64];
    struct lz_tree tree;
    struct lz_image *imgs; /* per tree.procs[k]; zeroed for a zombie */
    int json;
    struct jw w;           /* json: the document being written */
};

/* Each prints its section (text: a heading and a table; json: one member
 * of the document, an array or object under the section's name): 0, or -1
 * having said why on stderr (only the store's sections can fail). */
void show_tree(struct show *s);
void show_threads(struct show *s);
void show_regions(struct show *s);
void show_fds(struct show *s);
void show_chans(struct show *s);
int show_journal(struct show *s); /* -2: a damaged journal */
int show_packs(struct show *s);

/* live processes only: a zombie has no manifest */
#define EACH_LIVE(s, k, img)                                                                     \
    for (size_t k = 0; k < (s)->tree.nprocs; k++)                                                \
        for (const struct lz_image *img = &(s)->imgs[k]; img && (s)->tree.procs[k].state == LZ_TP_LIVE; img = NULL)

/* text only: a blank line and the section's title */
void show_heading(struct show *s, const char *title);

/* "rw-p" */
const char *show_prot(uint32_t prot, uint32_t kind, char buf[8]);
#endif
