/* Uploads: one PUT for a small object, a multipart upload for a large one
 * (c->parallel parts in flight, each with its Content-MD5, which the server
 * checks).  The ETag the server answers is checked against the MD5s we
 * computed (a part's: its MD5; the whole: the MD5 of the parts' MD5s, "-N").
 * A multipart upload that fails is aborted, so nothing of it is visible. */
#include "s3.h"
#include "util.h"
#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

size_t s3_part_size(void)
{
    const char *v = getenv("LAZARUS_S3_PART_MIB");
    long mib = v ? strtol(v, NULL, 10) : 16;
    if (mib < 5) mib = 5;
    if (mib > 1024) mib = 1024;
    return (size_t)mib << 20;
}

static int etag_is_md5(const char *etag) { return strlen(etag) == 32 && strspn(etag, "0123456789abcdefABCDEF") == 32; }

int s3_put_buf(const struct s3_conf *c, const char *key, const void *buf, size_t len, int no_overwrite, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "PUT";
    snprintf(r.key, sizeof r.key, "%s", key);
    r.body = buf;
    r.body_len = len;
    r.no_overwrite = no_overwrite;
    int rc = s3_perform1(c, &r);
    if (rc < 0) snprintf(why, whylen, "%s", r.err);
    char md5[33];
    s3_md5_hex(buf, len, md5);
    if (rc == 0 && etag_is_md5(r.etag) && strcasecmp(r.etag, md5)) {
        char obj[1300];
        s3_show(obj, sizeof obj, c, key);
        snprintf(why, whylen, "PUT %s: the server stored MD5 %s, not the %s sent", obj, r.etag, md5);
        rc = -1;
    }
    s3_req_free(&r);
    return rc;
}

int s3_abort_upload(const struct s3_conf *c, const char *key, const char *upload_id, char *why, size_t whylen)
{
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "DELETE";
    r.ok404 = 1;
    snprintf(r.key, sizeof r.key, "%s", key);
    char eu[1600];
    s3_encode(eu, sizeof eu, upload_id, 0);
    snprintf(r.query, sizeof r.query, "uploadId=%s", eu);
    int rc = s3_perform1(c, &r);
    if (rc < 0) snprintf(why, whylen, "%s", r.err);
    s3_req_free(&r);
    return rc;
}

/* The parts of one round, read from fd, sent together. */
static int put_parts(const struct s3_conf *c, const char *key, const char *eid, const struct s3_source *src, uint64_t size, size_t part,
                     size_t first, size_t count, char **bufs, unsigned char (*md5s)[16], EVP_MD_CTX *whole, char *why,
                     size_t whylen)
{
    struct s3_req *rq = calloc(count, sizeof *rq);
    if (!rq) { snprintf(why, whylen, "out of memory"); return -1; }
    for (size_t k = 0; k < count; k++) {
        size_t i = first + k;
        uint64_t off = (uint64_t)i * part;
        size_t len = size - off < part ? (size_t)(size - off) : part;
        if (src->read(src->ctx, bufs[k], len, off) < 0) {
            snprintf(why, whylen, "cannot read the bytes to upload: %s", errno ? strerror(errno) : "the file is shorter");
            free(rq);
            return -1;
        }
        EVP_DigestUpdate(whole, bufs[k], len);
        s3_md5_raw(bufs[k], len, md5s[i]);
        rq[k].method = "PUT";
        snprintf(rq[k].key, sizeof rq[k].key, "%s", key);
        snprintf(rq[k].query, sizeof rq[k].query, "partNumber=%zu&uploadId=%s", i + 1, eid);
        rq[k].body = bufs[k];
        rq[k].body_len = len;
        rq[k].md5 = md5s[i];
        rq[k].unsigned_payload = 1;
    }
    int rc = s3_perform(c, rq, count);
    if (rc < 0) snprintf(why, whylen, "%s", s3_first_error(rq, count));
    for (size_t k = 0; k < count && rc == 0; k++) {
        char want[33];
        s3_hex(md5s[first + k], 16, want);
        if (etag_is_md5(rq[k].etag) && strcasecmp(rq[k].etag, want)) {
            char obj[1300];
            s3_show(obj, sizeof obj, c, key);
            snprintf(why, whylen, "PUT %s part %zu: the server stored MD5 %s, not the %s sent", obj, first + k + 1, rq[k].etag, want);
            rc = -1;
        }
    }
    for (size_t k = 0; k < count; k++) s3_req_free(&rq[k]);
    free(rq);
    return rc;
}

static int pread_source(void *ctx, void *buf, size_t len, uint64_t off)
{
    return lz_pread_all(*(int *)ctx, buf, len, (off_t)off) < 0 ? -1 : 0;
}

int s3_put_file(const struct s3_conf *c, const char *key, int fd, uint64_t size, char *md5_hex, char *why, size_t whylen)
{
    struct s3_source src = {pread_source, &fd};
    return s3_put_source(c, key, &src, size, md5_hex, why, whylen);
}

int s3_put_source(const struct s3_conf *c, const char *key, const struct s3_source *src, uint64_t size, char *md5_hex,
                  char *why, size_t whylen)
{
    size_t part = s3_part_size();
    char obj[1300];
    s3_show(obj, sizeof obj, c, key);
    if (size <= part) {
        char *buf = malloc(size ? size : 1);
        if (!buf) { snprintf(why, whylen, "out of memory"); return -1; }
        if (src->read(src->ctx, buf, (size_t)size, 0) < 0) {
            snprintf(why, whylen, "cannot read the bytes of %s to upload: %s", obj, errno ? strerror(errno) : "the file is shorter");
            free(buf);
            return -1;
        }
        int rc = s3_put_buf(c, key, buf, (size_t)size, 0, why, whylen);
        if (rc == 0 && md5_hex) s3_md5_hex(buf, (size_t)size, md5_hex);
        free(buf);
        return rc;
    }
    struct s3_req r;
    memset(&r, 0, sizeof r);
    r.method = "POST";
    snprintf(r.key, sizeof r.key, "%s", key);
    snprintf(r.query, sizeof r.query, "uploads=");
    if (s3_perform1(c, &r) < 0) { snprintf(why, whylen, "%s", r.err); s3_req_free(&r); return -1; }
    char id[512], eid[1600];
    s3_xml_value(r.resp, r.resp_len, "UploadId", id, sizeof id);
    s3_req_free(&r);
    if (!*id) { snprintf(why, whylen, "POST %s?uploads: the answer holds no UploadId", obj); return -1; }
    s3_encode(eid, sizeof eid, id, 0);
    size_t nparts = (size_t)((size + part - 1) / part), par = (size_t)(c->parallel > 0 ? c->parallel : 1);
    unsigned char (*md5s)[16] = calloc(nparts, sizeof *md5s);
    char **bufs = calloc(par, sizeof *bufs);
    EVP_MD_CTX *whole = EVP_MD_CTX_new();
    int rc = md5s && bufs && whole ? 0 : -1;
    if (rc < 0) snprintf(why, whylen, "out of memory");
    if (rc == 0) EVP_DigestInit_ex(whole, EVP_md5(), NULL);
    for (size_t k = 0; k < par && rc == 0; k++)
        if (!(bufs[k] = malloc(part))) { snprintf(why, whylen, "out of memory"); rc = -1; }
    for (size_t i = 0; i < nparts && rc == 0; i += par)
        rc = put_parts(c, key, eid, src, size, part, i, nparts - i < par ? nparts - i : par, bufs, md5s, whole, why, whylen);
    for (size_t k = 0; bufs && k < par; k++) free(bufs[k]);
    free(bufs);
    /* complete: the parts in order, each with the ETag (our MD5) the server checked */
    size_t xl = 128 + nparts * 96;
    char *xml = rc == 0 ? malloc(xl) : NULL;
    if (rc == 0 && !xml) { snprintf(why, whylen, "out of memory"); rc = -1; }
    if (rc == 0) {
        size_t o = (size_t)snprintf(xml, xl, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
        for (size_t i = 0; i < nparts; i++) {
            char h[33];
            s3_hex(md5s[i], 16, h);
            o += (size_t)snprintf(xml + o, xl - o, "<Part><PartNumber>%zu</PartNumber><ETag>\"%s\"</ETag></Part>", i + 1, h);
        }
        snprintf(xml + o, xl - o, "</CompleteMultipartUpload>");
        memset(&r, 0, sizeof r);
        r.method = "POST";
        snprintf(r.key, sizeof r.key, "%s", key);
        snprintf(r.query, sizeof r.query, "uploadId=%s", eid);
        r.body = xml;
        r.body_len = strlen(xml);
        rc = s3_perform1(c, &r);
        if (rc < 0) snprintf(why, whylen, "%s", r.err);
        char code[128] = "", msg[256] = "";
        if (rc == 0) s3_error_code(r.resp, r.resp_len, code, sizeof code, msg, sizeof msg);
        if (*code) { snprintf(why, whylen, "POST %s?uploadId: %s (%s)", obj, code, msg); rc = -1; }
        char etag[80] = "";
        if (rc == 0) s3_xml_value(r.resp, r.resp_len, "ETag", etag, sizeof etag);
        s3_req_free(&r);
        /* the MD5 of the parts' MD5s, "-N": what S3 answers for a multipart object */
        unsigned char mm[16];
        char want[48];
        s3_md5_raw(md5s, nparts * 16, mm);
        s3_hex(mm, 16, want);
        snprintf(want + 32, sizeof want - 32, "-%zu", nparts);
        char *e = etag;
        while (*e == '"') e++;
        char *q = strchr(e, '"');
        if (q) *q = 0;
        if (rc == 0 && strchr(e, '-') && strcasecmp(e, want)) {
            snprintf(why, whylen, "POST %s?uploadId: the server made ETag %s of the parts, not %s", obj, e, want);
            rc = -1;
        }
    }
    free(xml);
    if (rc == 0 && md5_hex) {
        unsigned char m[16];
        unsigned int ml = 0;
        EVP_DigestFinal_ex(whole, m, &ml);
        s3_hex(m, 16, md5_hex);
    }
    EVP_MD_CTX_free(whole);
    free(md5s);
    if (rc < 0) {
        char ignore[256];
        s3_abort_upload(c, key, id, ignore, sizeof ignore); /* nothing of it stays; gc aborts it if this fails */
    }
    return rc;
}
