/* Small helpers for the CLI and the restorer (not for the runtime's signal
 * handler, which must stay async-signal-safe). */
#ifndef LZ_UTIL_H
#define LZ_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

extern const char *lz_prog; /* name used in messages */

/* One line on stderr, "lazarus: ...". */
void lz_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lz_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
_Noreturn void lz_die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Where those lines go instead of stderr, once set (`run --log`, `--json`:
 * cli/log_out.c): called with "error" or "warning" and the text after
 * "lazarus: " (and "warning: "), without the newline. */
extern void (*lz_msg_sink)(const char *kind, const char *text);

/* Allocations that do not fail: out of memory ends the process with one line
 * ("lazarus: out of memory"), for the CLI and the restorer (a rollback cut
 * short this way is finished by the next one: files/journal.h).  A size of 0
 * gives a valid pointer. */
void *lz_xmalloc(size_t n);
void *lz_xcalloc(size_t n, size_t size);
void *lz_xrealloc(void *p, size_t n);
char *lz_xstrdup(const char *s);

int lz_write_all(int fd, const void *buf, size_t len);
int lz_pread_all(int fd, void *buf, size_t len, off_t off); /* 0 ok, -1 error/short */
/* Reads a whole file into malloc'ed memory; returns NULL and sets errno. */
void *lz_read_file(const char *path, size_t *len);
void *lz_read_fd(int fd, size_t *len);
int lz_fsync_dir(const char *path);
/* Deletes `name` in directory dirfd and everything below it (no symlink is followed). */
void lz_remove_tree(int dirfd, const char *name);
uint64_t lz_now_ns(int clock);
int lz_parse_u64(const char *s, uint64_t *out);
/* Seconds as "2" or "0.25" into milliseconds: 0, or -1 if malformed. */
int lz_parse_seconds_ms(const char *s, uint64_t *ms);
#endif
