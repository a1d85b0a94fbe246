/* .ckptrc, libckpt's settings file (read in the current directory by a
 * program linked with -lckpt and by `lazarus run`): one "keyword value" a
 * line, blank lines and '#' comments allowed.  Keywords: checkpointing
 * on|off, dir PATH, maxtime S (the interval), mintime S, incremental on|off,
 * fork on|off, maxfiles N. */
#ifndef LZ_CKPTRC_H
#define LZ_CKPTRC_H
#include <stddef.h>
#include <stdint.h>

struct lz_ckptrc {
    int have_checkpointing, checkpointing;
    int have_dir; char dir[4096];
    int have_maxtime; uint64_t maxtime_s;
    int have_mintime; uint64_t mintime_ms;
    int have_incremental, incremental;
    int have_fork, fork;
    int have_maxfiles; uint64_t maxfiles;
};

/* 0 (no file: nothing set), 1 (read), or -1 with a one-line reason (an
 * unknown keyword, a bad value, naming the line). */
int lz_ckptrc_read(const char *path, struct lz_ckptrc *rc, char *why, size_t len);
#endif
