/* Downloads and the small requests: an object into a file in ranges
 * (c->parallel in flight, written in place, its MD5 computed in order), a
 * small object into memory, HEAD and DELETE. */
#include "s3.h"
#include "util.h"
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int s3_get_file(const struct s3_conf *c, const char *key, uint64_t size, int fd, char *md5_hex, char *why, size_t whylen)
{
    size_t chunk = s3_part_size(), par = (size_t)(c->parallel > 0 ? c->parallel : 1);
    size_t n = size ? (size_t)((size + chunk - 1) / chunk) : 0;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    struct s3_req *rq = calloc(par, sizeof *rq);
    char **bufs = calloc(par, sizeof *bufs);
    int rc = md && rq && bufs ? 0 : -1;
    for (size_t k = 0; k < par && rc == 0; k++) if (!(bufs[k] = malloc(chunk))) rc = -1;
    if (rc < 0) snprintf(why, whylen, "out of memory");
    else EVP_DigestInit_ex(md, EVP_md5(), NULL);
    for (size_t i = 0; i < n && rc == 0; i += par) {
        size_t cnt = n - i < par ? n - i : par;
        for (size_t k = 0; k < cnt; k++) {
            uint64_t off = (uint64_t)(i + k) * chunk;
            memset(&rq[k], 0, sizeof rq[k]);
            rq[k].method = "GET";
            snprintf(rq[k].key, sizeof rq[k].key, "%s", key);
            rq[k].range_off = off;
            rq[k].range_len = size - off < chunk ? size - off : chunk;
            rq[k].dst = bufs[k];
            rq[k].dst_cap = (size_t)rq[k].range_len;
        }
        if (s3_perform(c, rq, cnt) < 0) { snprintf(why, whylen, "%s", s3_first_error(rq, cnt)); rc = -1; }
        for (size_t k = 0; k < cnt && rc == 0; k++) {
            EVP_DigestUpdate(md, bufs[k], rq[k].got);
            if (pwrite(fd, bufs[k], rq[k].got, (off_t)rq[k].range_off) != (ssize_t)rq[k].got) {
                snprintf(why, whylen, "cannot write what s3://%s/%s holds: %s", c->bucket, key, strerror(errno));
                rc = -1;
            }
        }
        for (size_t k = 0; k < cnt; k++) s3_req_free(&rq[k]);
    }
    if (rc == 0 && md5_hex) {
        unsigned char m[16];
        unsigned int ml = 0;
        EVP_DigestFinal_ex(md, m, &ml);
        s3_hex(m, 16, md5_hex);
    }
    for (size_t k = 0; bufs && k < par; k++) free(bufs[k]);
    free(bufs);
    free(rq);
    EVP_MD_CTX_free(md);
    return rc;
}

int s3_get_buf(const struct s3_conf *c, const char *key, char **buf, size_t *len, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "GET";
    r.ok404 = 1;
    snprintf(r.key, sizeof r.key, "%s", key);
    if (s3_perform1(c, &r) < 0) { snprintf(why, whylen, "%s", r.err); s3_req_free(&r); return -1; }
    if (r.status == 404) { s3_req_free(&r); return 1; }
    if (!r.resp) r.resp = lz_xstrdup("");
    *buf = r.resp;
    *len = r.resp_len;
    return 0;
}

int s3_delete(const struct s3_conf *c, const char *key, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "DELETE";
    r.ok404 = 1;
    snprintf(r.key, sizeof r.key, "%s", key);
    int rc = s3_perform1(c, &r);
    if (rc < 0) snprintf(why, whylen, "%s", r.err);
    s3_req_free(&r);
    return rc;
}

int s3_head(const struct s3_conf *c, const char *key, uint64_t *size, char *etag, size_t elen, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "HEAD";
    r.ok404 = 1;
    snprintf(r.key, sizeof r.key, "%s", key);
    if (s3_perform1(c, &r) < 0) { snprintf(why, whylen, "%s", r.err); s3_req_free(&r); return -1; }
    int rc = r.status == 404;
    if (!rc) {
        if (size) *size = r.length;
        if (etag) snprintf(etag, elen, "%s", r.etag);
    }
    s3_req_free(&r);
    return rc;
}
