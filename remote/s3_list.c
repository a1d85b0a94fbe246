/* Listings and XML answers through libxml2: ListObjectsV2 and
 * ListMultipartUploads (every page), and the code and message of an S3
 * error. */
#include "s3.h"
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static xmlDocPtr parse(const char *body, size_t len)
{
    if (!body || !len || len > (1u << 30)) return NULL;
    return xmlReadMemory(body, (int)len, "s3.xml", NULL, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
}

static int is(xmlNodePtr n, const char *name)
{
    return n->type == XML_ELEMENT_NODE && !strcmp((const char *)n->name, name);
}

static void text_of(xmlNodePtr n, char *out, size_t len)
{
    xmlChar *t = xmlNodeGetContent(n);
    snprintf(out, len, "%s", t ? (const char *)t : "");
    xmlFree(t);
}

/* "2026-11-26T06:30:26.000Z" -> seconds since the epoch (0 if unreadable) */
static int64_t iso_time(xmlNodePtr n)
{
    char t[64];
    struct tm tm;
    text_of(n, t, sizeof t);
    memset(&tm, 0, sizeof tm);
    if (!strptime(t, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
    return (int64_t)timegm(&tm);
}

static xmlNodePtr find(xmlNodePtr n, const char *name)
{
    for (; n; n = n->next) {
        if (is(n, name)) return n;
        xmlNodePtr f = find(n->children, name);
        if (f) return f;
    }
    return NULL;
}

void s3_xml_value(const char *body, size_t len, const char *name, char *out, size_t olen)
{
    out[0] = 0;
    xmlDocPtr d = parse(body, len);
    if (!d) return;
    xmlNodePtr n = find(xmlDocGetRootElement(d), name);
    if (n) text_of(n, out, olen);
    xmlFreeDoc(d);
}

void s3_error_code(const char *body, size_t len, char *code, size_t clen, char *msg, size_t mlen)
{
    code[0] = msg[0] = 0;
    xmlDocPtr d = parse(body, len);
    if (!d) return;
    xmlNodePtr root = xmlDocGetRootElement(d);
    if (root && is(root, "Error"))
        for (xmlNodePtr n = root->children; n; n = n->next) {
            if (is(n, "Code")) text_of(n, code, clen);
            if (is(n, "Message")) text_of(n, msg, mlen);
        }
    for (char *p = msg; *p; p++) if (*p == '\n' || *p == '\r') *p = ' ';
    xmlFreeDoc(d);
}

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 0;
    size_t nc = *cap ? *cap * 2 : 64;
    void *nv = realloc(*v, nc * size);
    if (!nv) return -1;
    *v = nv;
    *cap = nc;
    return 0;
}

/* A listing cut short would look complete (gc would miss objects, restart
 * a commit): out of memory is an error, never a shorter answer. */
static ssize_t listing_oom(const struct s3_conf *c, const char *prefix, void *v, char *why, size_t whylen)
{
    free(v);
    snprintf(why, whylen, "cannot list s3://%s/%s: out of memory", c->bucket, prefix);
    return -1;
}

/* One page of a listing: the request performed and its answer parsed, its
 * root element the one expected (NULL and why otherwise; the caller frees r). */
static xmlDocPtr fetch_listing(const struct s3_conf *c, struct s3_req *r, const char *root_name, const char *what, char *why,
                               size_t whylen)
{
    if (s3_perform1(c, r) < 0) {
        snprintf(why, whylen, "%s", r->err);
        return NULL;
    }
    xmlDocPtr d = parse(r->resp, r->resp_len);
    xmlNodePtr root = d ? xmlDocGetRootElement(d) : NULL;
    if (!root || !is(root, root_name)) {
        snprintf(why, whylen, "GET s3://%s?%s: the answer is not a listing", c->bucket, what);
        if (d) xmlFreeDoc(d);
        return NULL;
    }
    return d;
}

ssize_t s3_list(const struct s3_conf *c, const char *prefix, struct s3_object **out, char *why, size_t whylen)
{
    struct s3_object *v = NULL;
    size_t n = 0, cap = 0;
    char token[2048] = "", ep[3200], et[6200];
    s3_encode(ep, sizeof ep, prefix, 0);
    for (;;) {
        struct s3_req r;
        memset(&r, 0, sizeof r);
        r.method = "GET";
        s3_encode(et, sizeof et, token, 0);
        /* sorted by name: SigV4 signs the query as it is sent */
        snprintf(r.query, sizeof r.query, "%s%s%slist-type=2&prefix=%s", *token ? "continuation-token=" : "", et,
                 *token ? "&" : "", ep);
        xmlDocPtr d = fetch_listing(c, &r, "ListBucketResult", "list-type=2", why, whylen);
        if (!d) {
            s3_req_free(&r);
            free(v);
            return -1;
        }
        xmlNodePtr root = xmlDocGetRootElement(d);
        int more = 0, oom = 0;
        token[0] = 0;
        for (xmlNodePtr e = root->children; e; e = e->next) {
            char val[64];
            if (is(e, "IsTruncated")) { text_of(e, val, sizeof val); more = !strcmp(val, "true"); }
            if (is(e, "NextContinuationToken")) text_of(e, token, sizeof token);
            if (!is(e, "Contents")) continue;
            if (grow((void **)&v, &cap, n, sizeof *v) < 0) { oom = 1; break; }
            struct s3_object *o = &v[n++];
            memset(o, 0, sizeof *o);
            for (xmlNodePtr f = e->children; f; f = f->next) {
                if (is(f, "Key")) text_of(f, o->key, sizeof o->key);
                if (is(f, "Size")) { text_of(f, val, sizeof val); o->size = strtoull(val, NULL, 10); }
                if (is(f, "LastModified")) o->mtime = iso_time(f);
                if (is(f, "ETag")) {
                    char t[100];
                    text_of(f, t, sizeof t);
                    char *q = t;
                    while (*q == '"') q++;
                    snprintf(o->etag, sizeof o->etag, "%.79s", q);
                    char *z = strchr(o->etag, '"');
                    if (z) *z = 0;
                }
            }
        }
        xmlFreeDoc(d);
        s3_req_free(&r);
        if (oom) return listing_oom(c, prefix, v, why, whylen);
        if (!more || !*token) break;
    }
    *out = v;
    return (ssize_t)n;
}

ssize_t s3_list_uploads(const struct s3_conf *c, const char *prefix, struct s3_upload **out, char *why, size_t whylen)
{
    struct s3_upload *v = NULL;
    size_t n = 0, cap = 0;
    char km[1100] = "", um[600] = "", ep[3200], ek[3400], eu[2000];
    s3_encode(ep, sizeof ep, prefix, 0);
    for (;;) {
        struct s3_req r;
        memset(&r, 0, sizeof r);
        r.method = "GET";
        s3_encode(ek, sizeof ek, km, 0);
        s3_encode(eu, sizeof eu, um, 0);
        if (*km) snprintf(r.query, sizeof r.query, "key-marker=%s&prefix=%s&upload-id-marker=%s&uploads=", ek, ep, eu);
        else snprintf(r.query, sizeof r.query, "prefix=%s&uploads=", ep);
        xmlDocPtr d = fetch_listing(c, &r, "ListMultipartUploadsResult", "uploads", why, whylen);
        if (!d) {
            s3_req_free(&r);
            free(v);
            return -1;
        }
        xmlNodePtr root = xmlDocGetRootElement(d);
        int more = 0, oom = 0;
        km[0] = um[0] = 0;
        for (xmlNodePtr e = root->children; e; e = e->next) {
            char val[64];
            if (is(e, "IsTruncated")) { text_of(e, val, sizeof val); more = !strcmp(val, "true"); }
            if (is(e, "NextKeyMarker")) text_of(e, km, sizeof km);
            if (is(e, "NextUploadIdMarker")) text_of(e, um, sizeof um);
            if (!is(e, "Upload")) continue;
            if (grow((void **)&v, &cap, n, sizeof *v) < 0) { oom = 1; break; }
            struct s3_upload *u = &v[n++];
            memset(u, 0, sizeof *u);
            for (xmlNodePtr f = e->children; f; f = f->next) {
                if (is(f, "Key")) text_of(f, u->key, sizeof u->key);
                if (is(f, "UploadId")) text_of(f, u->id, sizeof u->id);
                if (is(f, "Initiated")) u->initiated = iso_time(f);
            }
        }
        xmlFreeDoc(d);
        s3_req_free(&r);
        if (oom) return listing_oom(c, prefix, v, why, whylen);
        if (!more || !*km) break;
    }
    *out = v;
    return (ssize_t)n;
}
