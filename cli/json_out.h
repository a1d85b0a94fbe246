/* A small streaming JSON writer shared by the commands' --json output
 * (`show`, `list`, `verify`): strings escaped (quotes, backslashes, control
 * characters; bytes that are not UTF-8, as a path may hold, as \u00XX so
 * the document always parses), numbers as numbers, commas placed for the
 * caller.  Keys are NULL inside arrays. */
#ifndef LZ_CLI_JSON_OUT_H
#define LZ_CLI_JSON_OUT_H
#include <stdint.h>
#include <stdio.h>
#include "lazarus.h"

#define JW_DEPTH 16
struct jw {
    FILE *f;
    int depth;
    int n[JW_DEPTH]; /* members written so far at each level */
};

void jw_init(struct jw *w, FILE *f);
void jw_obj(struct jw *w, const char *key);  /* { */
void jw_arr(struct jw *w, const char *key);  /* [ */
void jw_end_obj(struct jw *w);
void jw_end_arr(struct jw *w);
void jw_str(struct jw *w, const char *key, const char *s); /* s NULL: null */
void jw_u64(struct jw *w, const char *key, uint64_t v);
void jw_i64(struct jw *w, const char *key, int64_t v);
void jw_dbl(struct jw *w, const char *key, double v);             /* %.6g */
void jw_fixed(struct jw *w, const char *key, double v, int decimals); /* %.Nf */
void jw_bool(struct jw *w, const char *key, int v);
void jw_null(struct jw *w, const char *key);
/* The member every --json document carries (docs/json.md): "lazarus_version",
 * the version of the lazarus that wrote it; JW_VERSION_MEMBER for the writers
 * that print their objects by hand. */
void jw_version(struct jw *w);
#define JW_VERSION_MEMBER "\"lazarus_version\": \"" LAZARUS_VERSION "\""
/* A string literal, escaped, on its own (for callers that print the rest). */
void json_put_str(FILE *f, const char *s);
#endif
