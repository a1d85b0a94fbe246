/* The --json writer (json_out.h). */
#include "json_out.h"
#include <inttypes.h>
#include <math.h>

/* Length of the valid UTF-8 sequence at s (1..4), or 0. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0; /* overlong, surrogate */
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return n;
}

void json_put_str(FILE *f, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    putc('"', f);
    while (*s) {
        int n;
        if (*s == '"' || *s == '\\') { putc('\\', f); putc(*s++, f); }
        else if (*s == '\n') { fputs("\\n", f); s++; }
        else if (*s == '\t') { fputs("\\t", f); s++; }
        else if (*s < 0x20 || *s == 0x7f) fprintf(f, "\\u%04x", *s++);
        else if (*s < 0x80) putc(*s++, f);
        else if ((n = utf8_len(s)) > 0) { fwrite(s, 1, (size_t)n, f); s += n; }
        else fprintf(f, "\\u%04x", *s++); /* not UTF-8: the byte as a code point below 256 */
    }
    putc('"', f);
}

void jw_init(struct jw *w, FILE *f)
{
    w->f = f;
    w->depth = 0;
    w->n[0] = 0;
}

/* The comma and key before a member. */
static void member(struct jw *w, const char *key)
{
    if (w->n[w->depth]++) fputs(", ", w->f);
    if (key) { json_put_str(w->f, key); fputs(": ", w->f); }
}

static void open_(struct jw *w, const char *key, char c)
{
    member(w, key);
    putc(c, w->f);
    if (w->depth + 1 < JW_DEPTH) w->n[++w->depth] = 0;
}

void jw_obj(struct jw *w, const char *key) { open_(w, key, '{'); }
void jw_arr(struct jw *w, const char *key) { open_(w, key, '['); }
void jw_end_obj(struct jw *w) { putc('}', w->f); if (w->depth) w->depth--; }
void jw_end_arr(struct jw *w) { putc(']', w->f); if (w->depth) w->depth--; }

void jw_str(struct jw *w, const char *key, const char *s)
{
    member(w, key);
    if (s) json_put_str(w->f, s); else fputs("null", w->f);
}

void jw_u64(struct jw *w, const char *key, uint64_t v) { member(w, key); fprintf(w->f, "%" PRIu64, v); }
void jw_i64(struct jw *w, const char *key, int64_t v) { member(w, key); fprintf(w->f, "%" PRId64, v); }
void jw_bool(struct jw *w, const char *key, int v) { member(w, key); fputs(v ? "true" : "false", w->f); }
void jw_null(struct jw *w, const char *key) { member(w, key); fputs("null", w->f); }

void jw_dbl(struct jw *w, const char *key, double v)
{
    member(w, key);
    if (isfinite(v)) fprintf(w->f, "%.6g", v); else fputs("null", w->f);
}

void jw_fixed(struct jw *w, const char *key, double v, int decimals)
{
    member(w, key);
    if (isfinite(v)) fprintf(w->f, "%.*f", decimals, v); else fputs("null", w->f);
}

void jw_version(struct jw *w) { jw_str(w, "lazarus_version", LAZARUS_VERSION); }
