/* What makes a request trusted both ways: SigV4 (libcurl's CURLOPT_AWS_SIGV4
 * signs the method, the path, the query as given and every header we add),
 * the payload's SHA-256 in x-amz-content-sha256 (curl does not add it; the
 * server recomputes it and refuses a mismatch) and, for a body, its
 * Content-MD5 (checked by every S3 server, so a corrupted upload is refused
 * there).  Digests from libcrypto. */
#include "s3.h"
#include <curl/curl.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>

static void digest(const EVP_MD *md, const void *buf, size_t len, unsigned char *out)
{
    unsigned int n = 0;
    EVP_Digest(buf, len, out, &n, md, NULL);
}

void s3_hex(const unsigned char *in, size_t n, char *out)
{
    static const char h[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) { out[2 * i] = h[in[i] >> 4]; out[2 * i + 1] = h[in[i] & 15]; }
    out[2 * n] = 0;
}

void s3_md5_raw(const void *buf, size_t len, unsigned char out[16]) { digest(EVP_md5(), buf ? buf : "", len, out); }

void s3_md5_hex(const void *buf, size_t len, char out[33])
{
    unsigned char m[16];
    s3_md5_raw(buf, len, m);
    s3_hex(m, 16, out);
}

static struct curl_slist *add(struct curl_slist *l, const char *fmt, const char *v)
{
    char line[4400];
    snprintf(line, sizeof line, fmt, v);
    struct curl_slist *n = curl_slist_append(l, line);
    if (!n) { curl_slist_free_all(l); return NULL; }
    return n;
}

struct curl_slist *s3_sign_headers(const struct s3_conf *c, struct s3_req *r)
{
    unsigned char sha[32], md5[16];
    char sha_hex[65] = "UNSIGNED-PAYLOAD";
    if (!r->unsigned_payload) {
        digest(EVP_sha256(), r->body ? r->body : "", r->body_len, sha);
        s3_hex(sha, 32, sha_hex);
    }
    struct curl_slist *l = add(NULL, "x-amz-content-sha256: %s", sha_hex);
    int has_body = !strcmp(r->method, "PUT") || !strcmp(r->method, "POST");
    if (l && has_body) {
        if (r->md5) memcpy(md5, r->md5, 16);
        else s3_md5_raw(r->body, r->body_len, md5);
        EVP_EncodeBlock((unsigned char *)r->md5_b64, md5, 16);
        l = add(l, "Content-MD5: %s", r->md5_b64);
        if (l) l = add(l, "Content-Type: %s", "application/octet-stream");
    }
    if (l && *c->creds.token) l = add(l, "x-amz-security-token: %s", c->creds.token);
    if (l && r->no_overwrite) l = add(l, "If-None-Match: %s", "*");
    if (l) l = add(l, "Expect:%s", ""); /* no 100-continue round trip */
    return l;
}
