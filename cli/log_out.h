/* Lazarus' own lines during `run` and `restart`, all through log_event():
 * on stderr as "lazarus: ..." (as they always were), or appended to
 * `--log FILE` with a timestamp, or as JSON lines with `--json` (schema in
 * docs/json.md); `--quiet` drops the informational ones from stderr, never
 * errors (a --log FILE, asked for, gets every line).
 * lz_err and lz_warn (common/util.c) pass through here once log_setup ran. */
#ifndef LZ_CLI_LOG_OUT_H
#define LZ_CLI_LOG_OUT_H
#include <stdint.h>

enum log_level {
    LOG_EVENT, /* for the log only: in --log FILE and --json, not on a plain stderr */
    LOG_INFO,  /* also on a plain stderr, unless --quiet */
    LOG_WARN,  /* always */
    LOG_ERROR, /* always */
};

/* One member of an event's JSON object: a string, or else a number. */
struct log_kv {
    const char *key;
    const char *str;
    int64_t num;
};
#define LOG_NUM(k, v) ((struct log_kv){(k), NULL, (int64_t)(v)})
#define LOG_STR(k, v) ((struct log_kv){(k), (v), 0}) /* v not NULL */

/* --log FILE (NULL: stderr), --json, --quiet of command `cmd`: 0, or -1
 * having said why (FILE cannot be opened for appending).  Called with none
 * of them it changes nothing (`run --resume` hands over to `restart`). */
int log_setup(const char *cmd, const char *path, int json, int quiet);
/* One line: `text` (printf format) as the human line, or a JSON object
 * {"time", "event", kv..., "message"}. */
void log_event(enum log_level level, const char *event, const struct log_kv *kv, int nkv, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An informational line with no fields (event "info"). */
#define log_info(...) log_event(LOG_INFO, "info", NULL, 0, __VA_ARGS__)
/* The log's descriptor, or -1 for stderr (for a child that must keep it). */
int log_fd(void);
#endif
