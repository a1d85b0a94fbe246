/* Lazarus' own lines of run and restart (log_out.h). */
#include "log_out.h"
#include "json_out.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    int fd;    /* where the lines go: 2, or --log FILE */
    int file;  /* a file: each line starts with its time */
    int json;
    int quiet;
} L = {2, 0, 0, 0};

static void now_text(char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* The whole line in one write(2): lines of several processes never mix. */
static void put_line(char *line, size_t len)
{
    (void)lz_write_all(L.fd, line, len);
}

static void emit(enum log_level level, const char *event, const struct log_kv *kv, int nkv, const char *text)
{
    if (level == LOG_EVENT && !L.file && !L.json) return;
    if (level <= LOG_INFO && L.quiet && !L.file) return; /* a log asked for gets every line */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) { /* out of memory: the plain line all the same */
        char line[2200];
        int n = snprintf(line, sizeof line, "%s: %s%s\n", lz_prog, level == LOG_WARN ? "warning: " : "", text);
        if (n > 0) put_line(line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
        return;
    }
    char when[40];
    now_text(when, sizeof when);
    if (L.json) {
        struct jw w;
        jw_init(&w, f);
        jw_obj(&w, NULL);
        jw_str(&w, "time", when);
        jw_str(&w, "event", event);
        static int versioned; /* the first line of the run says which lazarus writes them */
        if (!versioned++) jw_version(&w);
        for (int i = 0; i < nkv; i++) {
            if (kv[i].str) jw_str(&w, kv[i].key, kv[i].str);
            else jw_i64(&w, kv[i].key, kv[i].num);
        }
        jw_str(&w, "message", text);
        jw_end_obj(&w);
    } else {
        if (L.file) fprintf(f, "%s ", when);
        fprintf(f, "%s: %s%s", lz_prog, level == LOG_WARN ? "warning: " : "", text);
    }
    putc('\n', f);
    if (fclose(f) == 0) put_line(buf, len);
    free(buf);
}

static void sink(const char *kind, const char *text)
{
    int warn = !strcmp(kind, "warning");
    emit(warn ? LOG_WARN : LOG_ERROR, kind, NULL, 0, text);
}

int log_setup(const char *cmd, const char *path, int json, int quiet)
{
    if (!path && !json && !quiet) return 0;
    if (path) {
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0) { lz_err("%s: --log %s: %s", cmd, path, strerror(errno)); return -1; }
        if (L.fd != 2) close(L.fd);
        L.fd = fd;
        L.file = 1;
    }
    L.json |= json;
    L.quiet |= quiet;
    lz_msg_sink = sink;
    return 0;
}

void log_event(enum log_level level, const char *event, const struct log_kv *kv, int nkv, const char *fmt, ...)
{
    char text[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    emit(level, event, kv, nkv, text);
}

int log_fd(void) { return L.fd == 2 ? -1 : L.fd; }
