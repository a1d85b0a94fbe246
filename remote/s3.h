/* An S3 client for the remote store (ARCHITECTURE.md, "Remote store"):
 * libcurl for HTTP and TLS and its SigV4 signing, libcrypto for the
 * digests, libxml2 for the answers.  Every request is signed with the
 * payload's SHA-256 (x-amz-content-sha256, which the server checks) and,
 * when it carries a body, its Content-MD5 (which the server checks too).
 * Refused or timed-out connections, 5xx answers and SlowDown are tried again
 * with backoff.  Errors are one line naming the object and the HTTP status
 * and S3 code; the secret and the session token are never in them. */
#ifndef LZ_S3_H
#define LZ_S3_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct s3_creds {
    char key[128];
    char secret[256];
    char token[4096];    /* AWS_SESSION_TOKEN, "" = none */
};

struct s3_conf {
    char endpoint[512];  /* scheme://host[:port], no trailing slash */
    char region[64];
    char bucket[256];
    char prefix[512];    /* the key prefix of the URL, no leading or trailing '/', may be "" */
    int path_style;      /* 1: scheme://host/bucket/key; 0: scheme://bucket.host/key */
    char ca_file[4096];  /* --ca-file, "" = the system's CA certificates */
    int insecure;        /* --insecure: a certificate is not verified */
    int attempts;        /* tries of one request (LAZARUS_S3_ATTEMPTS, default 5) */
    int parallel;        /* requests in flight (LAZARUS_S3_PARALLEL, default 4) */
    long stall_s;        /* a transfer slower than 1 B/s for this long failed (LAZARUS_S3_STALL_S, 30) */
    struct s3_creds creds;
};

/* remote_url.c: "s3://BUCKET[/PREFIX]" -> bucket, prefix: 0, or -1 with why. */
int s3_url_parse(const char *url, char *bucket, size_t blen, char *prefix, size_t plen, char *why, size_t whylen);
int s3_is_url(const char *s); /* begins with "s3://" */
/* The whole configuration of a URL: endpoint (option, else AWS_ENDPOINT_URL,
 * else AWS's for the region), region (AWS_REGION, AWS_DEFAULT_REGION,
 * us-east-1), addressing ("path", "virtual" or NULL: path for an endpoint
 * given, virtual for AWS), TLS, credentials (s3_creds.c).  0 or -1 with why. */
int s3_conf_load(struct s3_conf *c, const char *url, const char *endpoint, const char *addressing, const char *ca_file,
                 int insecure, char *why, size_t whylen);
/* "s3://bucket/key" as shown in messages */
void s3_show(char *buf, size_t len, const struct s3_conf *c, const char *key);
/* The request's URL: the key percent-encoded ('/' kept), then '?' query. */
void s3_url_for(char *buf, size_t len, const struct s3_conf *c, const char *key, const char *query);
/* RFC 3986 encoding of a query value or key ('/' kept when keep_slash). */
void s3_encode(char *out, size_t len, const char *s, int keep_slash);

/* s3_creds.c: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
 * else AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, section AWS_PROFILE
 * (default "default").  0, or -1 with why (naming no secret). */
int s3_creds_load(struct s3_creds *cr, char *why, size_t whylen);

/* One request.  The caller fills the first part; s3_perform the rest. */
struct s3_req {
    const char *method;      /* GET, PUT, HEAD, DELETE, POST */
    char key[1024];          /* the object's whole key ("" = the bucket) */
    char query[16384];        /* sorted by name, values encoded (SigV4 signs it as given) */
    const void *body;        /* PUT / POST */
    size_t body_len;
    uint64_t range_off, range_len; /* GET of a range when range_len > 0 */
    void *dst;               /* GET: into this buffer (dst_cap bytes) instead of resp */
    size_t dst_cap;
    int no_overwrite;        /* PUT: If-None-Match: * (a server that ignores it is not relied on) */
    const unsigned char *md5; /* the body's MD5 if the caller has it (else computed) */
    int unsigned_payload;    /* large bodies: x-amz-content-sha256 UNSIGNED-PAYLOAD; the
                              * signed Content-MD5 still binds the body (and the server checks it) */
    int ok404;               /* a 404 is an answer, not an error */
    int to_fd;               /* GET: the body written in place, pwrite to fd at range_off + bytes so far (no buffer) */
    int fd;
    uint64_t *received;      /* if set, every byte received is added to it (atomically: progress read elsewhere) */
    void (*on_done)(struct s3_req *r, void *arg); /* called once it is over, failed or not (in s3_perform's thread) */
    void *done_arg;
    /* the answer */
    long status;             /* HTTP status, 0 = no answer */
    char *resp;              /* the body (malloc'ed, NUL-terminated) when dst is NULL */
    size_t resp_len;
    size_t got;              /* bytes written into dst */
    char etag[80];           /* without quotes */
    uint64_t length;         /* Content-Length of a HEAD */
    uint64_t total;          /* a ranged GET: the object's whole size (Content-Range), 0 if not said */
    char err[4096];           /* one line when failed */
    int failed;
    /* the engine's */
    int tries;
    uint64_t not_before_ns;
    size_t sent;
    struct curl_slist *hdrs;
    char md5_b64[32];
};
/* Runs n requests, at most c->parallel at once, each tried again on refused
 * or timed-out connections, 5xx and SlowDown.  0 if every one succeeded (2xx,
 * or 404 where ok404), else -1 and each failed one's err set. */
int s3_perform(const struct s3_conf *c, struct s3_req *reqs, size_t n);
int s3_perform1(const struct s3_conf *c, struct s3_req *r);
void s3_req_free(struct s3_req *r); /* its response body */
/* The first failure of a batch, for the caller's message. */
const char *s3_first_error(const struct s3_req *reqs, size_t n);

/* s3_sign.c: the headers every request carries (payload SHA-256,
 * Content-MD5, session token) and SigV4 on the curl handle. */
struct curl_slist;
struct curl_slist *s3_sign_headers(const struct s3_conf *c, struct s3_req *r);
void s3_md5_hex(const void *buf, size_t len, char out[33]);
void s3_md5_raw(const void *buf, size_t len, unsigned char out[16]);
void s3_hex(const unsigned char *in, size_t n, char *out); /* n bytes as 2n lower-case hex digits and a NUL */

/* s3_list.c (libxml2) */
struct s3_object { char key[1024]; uint64_t size; char etag[80]; int64_t mtime; /* LastModified, s since the epoch */ };
/* Every object whose key begins with prefix (all pages): count, -1 with why. */
ssize_t s3_list(const struct s3_conf *c, const char *prefix, struct s3_object **out, char *why, size_t whylen);
struct s3_upload { char key[1024]; char id[512]; int64_t initiated; /* s since the epoch */ };
ssize_t s3_list_uploads(const struct s3_conf *c, const char *prefix, struct s3_upload **out, char *why, size_t whylen);
/* The S3 error code and message of an error body ("" if none). */
void s3_error_code(const char *body, size_t len, char *code, size_t clen, char *msg, size_t mlen);
/* The value of the first element `name` in an XML body ("" if none). */
void s3_xml_value(const char *body, size_t len, const char *name, char *out, size_t olen);

/* s3_multipart.c: a file's bytes [0, size) as object `key`: one PUT up to
 * the part size, else a multipart upload with c->parallel parts in flight
 * (aborted on failure: nothing visible).  The server checks each part's
 * MD5; the ETag it answers is checked against ours.  md5_hex (33 bytes)
 * gets the object's MD5, or NULL.  0, or -1 with why. */
int s3_put_file(const struct s3_conf *c, const char *key, int fd, uint64_t size, char *md5_hex, char *why, size_t whylen);
/* The same from any source of bytes: read(ctx, buf, len, off) fills buf
 * with the object's bytes [off, off + len), asked in ascending order; 0, or
 * -1 with errno (s3_crypt.c seals a file's chunks as they are asked for). */
struct s3_source { int (*read)(void *ctx, void *buf, size_t len, uint64_t off); void *ctx; };
int s3_put_source(const struct s3_conf *c, const char *key, const struct s3_source *src, uint64_t size, char *md5_hex,
                  char *why, size_t whylen);
int s3_put_buf(const struct s3_conf *c, const char *key, const void *buf, size_t len, int no_overwrite, char *why, size_t whylen);
int s3_abort_upload(const struct s3_conf *c, const char *key, const char *upload_id, char *why, size_t whylen);
/* The part size of multipart uploads (LAZARUS_S3_PART_MIB, default 16 MiB, at least 5). */
size_t s3_part_size(void);

/* s3_get.c: object `key` of `size` bytes into fd at offset 0, fetched in
 * ranges with c->parallel in flight; md5_hex (33 bytes): its MD5, or NULL.
 * 0, or -1 with why. */
int s3_get_file(const struct s3_conf *c, const char *key, uint64_t size, int fd, char *md5_hex, char *why, size_t whylen);

/* s3_fetch.c: many objects at once, each into its own file: every object
 * cut in ranges of the part size, `in_flight` ranges fetched at a time
 * across objects, each written in place at its offset; a thread reads back
 * and hashes each object in order as its ranges arrive (the MD5 of the
 * bytes in the file, so a range tried again is hashed once) and starts
 * their writeback.  Each object's size is checked against what the server
 * says it holds.  progress (may be NULL) is called about 5 times a second
 * and once at the end, from that thread.  0 with every md5_hex set, or -1
 * with why naming the first object that failed. */
struct s3_fetch {
    const char *key;
    uint64_t size;
    int fd;
    char md5_hex[33];
};
typedef void (*s3_progress_fn)(uint64_t got, uint64_t total, double seconds, void *arg);
int s3_get_objects(const struct s3_conf *c, struct s3_fetch *objs, size_t n, int in_flight, s3_progress_fn progress,
                   void *arg, char *why, size_t whylen);
/* A whole small object into malloc'ed memory (*buf, *len): 0, 1 if there is
 * none (404), -1 with why. */
int s3_get_buf(const struct s3_conf *c, const char *key, char **buf, size_t *len, char *why, size_t whylen);
int s3_delete(const struct s3_conf *c, const char *key, char *why, size_t whylen);
/* HEAD: 0 and size/etag, 1 if there is none, -1 with why. */
int s3_head(const struct s3_conf *c, const char *key, uint64_t *size, char *etag, size_t elen, char *why, size_t whylen);
#endif
