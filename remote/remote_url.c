/* s3:// URLs, the endpoint and region, and the URLs of requests: what a
 * remote store's address is made of (the AWS conventions: AWS_ENDPOINT_URL,
 * AWS_REGION; path-style or virtual-host addressing). */
#include "s3.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int s3_is_url(const char *s) { return s && !strncmp(s, "s3://", 5); }

int s3_url_parse(const char *url, char *bucket, size_t blen, char *prefix, size_t plen, char *why, size_t whylen)
{
    if (!s3_is_url(url)) {
        snprintf(why, whylen, "'%s' is not an s3:// URL (s3://BUCKET/PREFIX)", url);
        return -1;
    }
    const char *b = url + 5, *slash = strchr(b, '/');
    size_t bl = slash ? (size_t)(slash - b) : strlen(b);
    /* S3's bucket names: 3-63 of lower-case letters, digits, '-' and '.' */
    int ok = bl >= 3 && bl <= 63 && bl < blen;
    for (size_t i = 0; ok && i < bl; i++) ok = islower((unsigned char)b[i]) || isdigit((unsigned char)b[i]) || b[i] == '-' || b[i] == '.';
    if (!ok) {
        snprintf(why, whylen, "'%s' names no valid bucket (3 to 63 lower-case letters, digits, '-' or '.')", url);
        return -1;
    }
    memcpy(bucket, b, bl);
    bucket[bl] = 0;
    const char *p = slash ? slash + 1 : "";
    while (*p == '/') p++;
    size_t pl = strlen(p);
    while (pl && p[pl - 1] == '/') pl--;
    if (pl >= plen || pl > 400) { snprintf(why, whylen, "the prefix of '%s' is too long", url); return -1; }
    for (size_t i = 0; i < pl; i++)
        if ((unsigned char)p[i] < 0x20 || p[i] == 0x7f || p[i] == '\\') {
            snprintf(why, whylen, "the prefix of '%s' holds a control character or '\\'", url);
            return -1;
        }
    memcpy(prefix, p, pl);
    prefix[pl] = 0;
    return 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int env_int(const char *name, int def, int min, int max)
{
    const char *v = env(name);
    if (!v) return def;
    long n = strtol(v, NULL, 10);
    return n < min ? min : n > max ? max : (int)n;
}

int s3_conf_load(struct s3_conf *c, const char *url, const char *endpoint, const char *addressing, const char *ca_file,
                 int insecure, char *why, size_t whylen)
{
    memset(c, 0, sizeof *c);
    if (s3_url_parse(url, c->bucket, sizeof c->bucket, c->prefix, sizeof c->prefix, why, whylen) < 0) return -1;
    const char *r = env("AWS_REGION");
    if (!r) r = env("AWS_DEFAULT_REGION");
    snprintf(c->region, sizeof c->region, "%s", r ? r : "us-east-1");
    for (const char *q = c->region; *q; q++)
        if (!isalnum((unsigned char)*q) && *q != '-') { snprintf(why, whylen, "the region '%s' is not a region name", c->region); return -1; }
    const char *e = endpoint && *endpoint ? endpoint : env("AWS_ENDPOINT_URL_S3");
    if (!e) e = env("AWS_ENDPOINT_URL");
    if (e) {
        if (strncmp(e, "http://", 7) && strncmp(e, "https://", 8)) {
            snprintf(why, whylen, "the endpoint '%.200s' is not an http:// or https:// URL", e);
            return -1;
        }
        snprintf(c->endpoint, sizeof c->endpoint, "%s", e);
        size_t l = strlen(c->endpoint);
        while (l > 8 && c->endpoint[l - 1] == '/') c->endpoint[--l] = 0;
        if (strchr(c->endpoint + (c->endpoint[4] == 's' ? 8 : 7), '/')) {
            snprintf(why, whylen, "the endpoint '%.200s' has a path; give scheme://host[:port]", e);
            return -1;
        }
    } else {
        snprintf(c->endpoint, sizeof c->endpoint, "https://s3.%s.amazonaws.com", c->region);
    }
    if (!addressing || !*addressing) addressing = env("LAZARUS_S3_ADDRESSING");
    if (addressing && !strcmp(addressing, "path")) c->path_style = 1;
    else if (addressing && !strcmp(addressing, "virtual")) c->path_style = 0;
    else if (addressing) { snprintf(why, whylen, "addressing is 'path' or 'virtual', not '%s'", addressing); return -1; }
    else c->path_style = e != NULL; /* S3-compatible stores answer path-style; AWS prefers virtual hosts */
    if (!c->path_style && strchr(c->bucket, '.') && !strncmp(c->endpoint, "https://", 8)) {
        snprintf(why, whylen, "bucket '%s' has a '.', which a TLS certificate of virtual hosts cannot cover: use path addressing", c->bucket);
        return -1;
    }
    if (ca_file && *ca_file) snprintf(c->ca_file, sizeof c->ca_file, "%s", ca_file);
    c->insecure = insecure;
    c->attempts = env_int("LAZARUS_S3_ATTEMPTS", 5, 1, 100);
    c->parallel = env_int("LAZARUS_S3_PARALLEL", 4, 1, 64);
    c->stall_s = env_int("LAZARUS_S3_STALL_S", 30, 1, 3600);
    return s3_creds_load(&c->creds, why, whylen);
}

void s3_show(char *buf, size_t len, const struct s3_conf *c, const char *key)
{
    snprintf(buf, len, "s3://%s%s%s", c->bucket, *key ? "/" : "", key);
}

void s3_encode(char *out, size_t len, const char *s, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *s && o + 4 < len; s++) {
        unsigned char ch = (unsigned char)*s;
        if (isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' || (keep_slash && ch == '/')) {
            out[o++] = (char)ch;
        } else {
            out[o++] = '%';
            out[o++] = hex[ch >> 4];
            out[o++] = hex[ch & 15];
        }
    }
    out[o] = 0;
}

void s3_url_for(char *buf, size_t len, const struct s3_conf *c, const char *key, const char *query)
{
    char ek[3200];
    s3_encode(ek, sizeof ek, key, 1);
    const char *host = strstr(c->endpoint, "://") + 3;
    size_t scheme = (size_t)(host - c->endpoint);
    if (c->path_style)
        snprintf(buf, len, "%s/%s/%s%s%s", c->endpoint, c->bucket, ek, *query ? "?" : "", query);
    else
        snprintf(buf, len, "%.*s%s.%s/%s%s%s", (int)scheme, c->endpoint, c->bucket, host, ek, *query ? "?" : "", query);
}
