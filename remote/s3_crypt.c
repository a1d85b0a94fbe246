/* Sealed objects: AES-256-GCM (libcrypto's EVP; nothing of the cipher is
 * written here).  An object is a 40-byte header, then the plaintext in
 * chunks of `chunk` bytes (the last one shorter, or empty for an empty
 * plaintext), each its ciphertext and its 16-byte tag:
 *
 *   0  "LZCRYPT\0"      8  version 1, cipher 1 (AES-256-GCM), 2 zero bytes
 *   12 chunk (u32 LE)   16 key fingerprint (8 bytes)   24 base nonce (12 bytes,
 *   RAND_bytes, fresh per object)   36 4 zero bytes
 *
 * Chunk j is at 40 + j * (chunk + 16); its nonce is the base nonce with j
 * (64-bit big-endian) XORed into its last 8 bytes; its additional data is
 * the header, j (u64 LE) and a byte saying whether it is the last chunk.  So
 * a chunk moved, dropped, or an object cut at a chunk's end fails its tag,
 * and the header (key, chunk size) cannot be changed unnoticed either. */
#include "s3_crypt.h"
#include "util.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char MAGIC[8] = {'L', 'Z', 'C', 'R', 'Y', 'P', 'T', 0};
#define MIN_CHUNK 4096u
#define MAX_CHUNK (1u << 30)

void s3_key_fingerprint(const unsigned char k[32], char fp[17])
{
    static const char domain[] = "lazarus encrypt-key 1"; /* with its NUL: the key's use is named */
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned int dl = 0;
    EVP_MD_CTX *m = EVP_MD_CTX_new();
    EVP_DigestInit_ex(m, EVP_sha256(), NULL);
    EVP_DigestUpdate(m, domain, sizeof domain);
    EVP_DigestUpdate(m, k, 32);
    EVP_DigestFinal_ex(m, d, &dl);
    EVP_MD_CTX_free(m);
    s3_hex(d, 8, fp);
    OPENSSL_cleanse(d, sizeof d);
}

static int hexval(int ch)
{
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

int s3_key_load(const char *path, struct s3_key *key, char *why, size_t whylen)
{
    unsigned char buf[80];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, whylen, "cannot read the key file %s: %s", path, fd < 0 ? strerror(errno) : "not a regular file");
        if (fd >= 0) close(fd);
        return -1;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    int ok = 0;
    if (n == 32) {
        memcpy(key->k, buf, 32);
        ok = 1;
    } else if (n == 64 || n == 65 || n == 66) {
        /* 64 hex digits, then "\n" or "\r\n" or nothing */
        const char *tail = (const char *)buf + 64;
        size_t tl = (size_t)n - 64;
        ok = (tl == 0 || (tl == 1 && tail[0] == '\n') || (tl == 2 && tail[0] == '\r' && tail[1] == '\n'));
        for (int i = 0; i < 32 && ok; i++) {
            int h = hexval(buf[2 * i]), l = hexval(buf[2 * i + 1]);
            if (h < 0 || l < 0) ok = 0;
            else key->k[i] = (unsigned char)(h << 4 | l);
        }
    }
    OPENSSL_cleanse(buf, sizeof buf);
    if (!ok) {
        OPENSSL_cleanse(key->k, sizeof key->k);
        if (n < 0) snprintf(why, whylen, "cannot read the key file %s: %s", path, strerror(errno));
        else snprintf(why, whylen, "the key file %s is not a key: it must hold 32 bytes, or 64 hex digits and a newline (it holds %s%zd bytes)",
                      path, n == (ssize_t)sizeof buf ? "at least " : "", n);
        return -1;
    }
    s3_key_fingerprint(key->k, key->fp);
    return 0;
}

uint64_t s3c_sealed_size(uint64_t plain, size_t chunk)
{
    uint64_t n = plain ? (plain + chunk - 1) / chunk : 1;
    return S3C_HEADER + n * S3C_TAG + plain;
}

int s3c_is_sealed(const void *buf, size_t len) { return len >= sizeof MAGIC && !memcmp(buf, MAGIC, sizeof MAGIC); }

static void put_le32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i)); }
static uint32_t get_le32(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

static int make_header(const struct s3_key *k, size_t chunk, unsigned char h[S3C_HEADER])
{
    memset(h, 0, S3C_HEADER);
    memcpy(h, MAGIC, sizeof MAGIC);
    h[8] = 1;  /* version */
    h[9] = 1;  /* AES-256-GCM */
    put_le32(h + 12, (uint32_t)chunk);
    for (int i = 0; i < 8; i++) h[16 + i] = (unsigned char)(hexval(k->fp[2 * i]) << 4 | hexval(k->fp[2 * i + 1]));
    return RAND_bytes(h + 24, 12) == 1 ? 0 : -1;
}

/* The header of a sealed object, checked against the key: its chunk size,
 * or 0 with why. */
static size_t check_header(const struct s3_key *k, const unsigned char *h, size_t len, const char *name, char *why, size_t whylen)
{
    if (len < S3C_HEADER || memcmp(h, MAGIC, sizeof MAGIC)) {
        snprintf(why, whylen, "%s is not encrypted (it does not begin as an encrypted object does)", name);
        return 0;
    }
    uint32_t chunk = get_le32(h + 12);
    if (h[8] != 1 || h[9] != 1 || chunk < MIN_CHUNK || chunk > MAX_CHUNK) {
        snprintf(why, whylen, "%s is not an encrypted object this version of Lazarus reads (version %u, cipher %u)", name, h[8], h[9]);
        return 0;
    }
    char fp[17];
    s3_hex(h + 16, 8, fp);
    if (strcmp(fp, k->fp)) {
        snprintf(why, whylen, "%s is encrypted with another key (fingerprint %s; the key given has %s)", name, fp, k->fp);
        return 0;
    }
    return chunk;
}

static EVP_CIPHER_CTX *cipher_new(const struct s3_key *k, int enc)
{
    EVP_CIPHER_CTX *x = EVP_CIPHER_CTX_new();
    if (x && EVP_CipherInit_ex(x, EVP_aes_256_gcm(), NULL, k->k, NULL, enc) == 1) return x;
    EVP_CIPHER_CTX_free(x);
    return NULL;
}

/* Chunk j's nonce and additional data: set on x. */
static int chunk_begin(EVP_CIPHER_CTX *x, const unsigned char *hdr, uint64_t j, int last, int enc)
{
    unsigned char iv[12], aad[S3C_HEADER + 9];
    memcpy(iv, hdr + 24, 12);
    for (int i = 0; i < 8; i++) iv[4 + i] ^= (unsigned char)(j >> (56 - 8 * i));
    memcpy(aad, hdr, S3C_HEADER);
    for (int i = 0; i < 8; i++) aad[S3C_HEADER + i] = (unsigned char)(j >> (8 * i));
    aad[S3C_HEADER + 8] = (unsigned char)(last != 0);
    int out;
    return EVP_CipherInit_ex(x, NULL, NULL, NULL, iv, enc) == 1 && EVP_CipherUpdate(x, NULL, &out, aad, (int)sizeof aad) == 1 ? 0 : -1;
}

/* Seals in[0, len) into out (in place if out == in), its tag after it. */
static int seal_chunk(EVP_CIPHER_CTX *x, const unsigned char *hdr, uint64_t j, int last, const unsigned char *in, size_t len,
                      unsigned char *out)
{
    int n = 0, fin = 0;
    if (chunk_begin(x, hdr, j, last, 1) < 0) return -1;
    if (len && EVP_CipherUpdate(x, out, &n, in, (int)len) != 1) return -1;
    if (EVP_CipherFinal_ex(x, out + n, &fin) != 1) return -1;
    return EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_GET_TAG, S3C_TAG, out + len) == 1 ? 0 : -1;
}

/* Opens in[0, len + 16) (ciphertext and tag) into out (in place if out ==
 * in): 0 if authentic; out holds nothing to trust otherwise. */
static int open_chunk(EVP_CIPHER_CTX *x, const unsigned char *hdr, uint64_t j, int last, const unsigned char *in, size_t len,
                      unsigned char *out)
{
    int n = 0, fin = 0;
    unsigned char tag[S3C_TAG];
    memcpy(tag, in + len, S3C_TAG);
    if (chunk_begin(x, hdr, j, last, 0) < 0) return -1;
    if (len && EVP_CipherUpdate(x, out, &n, in, (int)len) != 1) return -1;
    if (EVP_CIPHER_CTX_ctrl(x, EVP_CTRL_GCM_SET_TAG, S3C_TAG, tag) != 1) return -1;
    return EVP_CipherFinal_ex(x, out + n, &fin) == 1 ? 0 : -1;
}

/* The chunks of a sealed object of `sealed` bytes: count, and the plaintext's
 * size; -1 if no object of chunks that size is that long. */
static int64_t chunk_count(uint64_t sealed, size_t chunk, uint64_t *plain)
{
    if (sealed < S3C_HEADER + S3C_TAG) return -1;
    uint64_t body = sealed - S3C_HEADER, sc = chunk + S3C_TAG, n = (body + sc - 1) / sc;
    if (body - (n - 1) * sc < S3C_TAG) return -1; /* a last chunk shorter than its tag */
    *plain = body - n * S3C_TAG;
    return (int64_t)n;
}

/* ---- upload: a source that seals fd's chunks as the upload asks for them */

struct sealer {
    EVP_CIPHER_CTX *x;
    int fd;
    uint64_t plain, nchunks;
    size_t chunk;
    unsigned char hdr[S3C_HEADER];
    unsigned char *buf; /* chunk `have`, sealed: chunk + 16 bytes */
    int64_t have;
    size_t have_len;
};

static int sealer_read(void *ctx, void *out, size_t len, uint64_t off)
{
    struct sealer *s = ctx;
    unsigned char *o = out;
    while (len) {
        if (off < S3C_HEADER) {
            size_t n = S3C_HEADER - off < len ? (size_t)(S3C_HEADER - off) : len;
            memcpy(o, s->hdr + off, n);
            o += n, off += n, len -= n;
            continue;
        }
        uint64_t sc = s->chunk + S3C_TAG, j = (off - S3C_HEADER) / sc, in = (off - S3C_HEADER) % sc;
        if (j >= s->nchunks) { errno = EINVAL; return -1; }
        if (s->have != (int64_t)j) {
            uint64_t p0 = j * s->chunk;
            size_t pl = s->plain - p0 < s->chunk ? (size_t)(s->plain - p0) : s->chunk;
            if (pl && lz_pread_all(s->fd, s->buf, pl, (off_t)p0) < 0) return -1;
            if (seal_chunk(s->x, s->hdr, j, j + 1 == s->nchunks, s->buf, pl, s->buf) < 0) { errno = EIO; return -1; }
            s->have = (int64_t)j;
            s->have_len = pl + S3C_TAG;
        }
        if (in >= s->have_len) { errno = EINVAL; return -1; }
        size_t n = s->have_len - in < len ? (size_t)(s->have_len - in) : len;
        memcpy(o, s->buf + in, n);
        o += n, off += n, len -= n;
    }
    return 0;
}

int s3_crypt_put_file(const struct s3_conf *c, const struct s3_key *k, const char *key, int fd, uint64_t plain,
                      char *md5_hex, uint64_t *sealed, char *why, size_t whylen)
{
    struct sealer s = {.fd = fd, .plain = plain, .chunk = s3_part_size(), .have = -1};
    s.nchunks = plain ? (plain + s.chunk - 1) / s.chunk : 1;
    s.x = cipher_new(k, 1);
    s.buf = malloc(s.chunk + S3C_TAG);
    int rc = -1;
    if (!s.x || !s.buf) snprintf(why, whylen, "cannot set up the cipher (out of memory)");
    else if (make_header(k, s.chunk, s.hdr) < 0) snprintf(why, whylen, "cannot draw a random nonce (RAND_bytes)");
    else {
        struct s3_source src = {sealer_read, &s};
        *sealed = s3c_sealed_size(plain, s.chunk);
        rc = s3_put_source(c, key, &src, *sealed, md5_hex, why, whylen);
    }
    if (s.buf) OPENSSL_cleanse(s.buf, s.chunk + S3C_TAG);
    free(s.buf);
    EVP_CIPHER_CTX_free(s.x);
    return rc;
}

/* ---- download: the header, then a chunk per ranged GET */

int s3_crypt_get_file(const struct s3_conf *c, const struct s3_key *k, const char *key, uint64_t sealed, int fd,
                      char *md5_hex, uint64_t *plain, char *why, size_t whylen)
{
    char name[1400], obj[1300];
    s3_show(obj, sizeof obj, c, key);
    snprintf(name, sizeof name, "remote object %s", obj);
    unsigned char hdr[S3C_HEADER];
    struct s3_req h;
    memset(&h, 0, sizeof h);
    h.method = "GET";
    snprintf(h.key, sizeof h.key, "%s", key);
    h.range_off = 0;
    h.range_len = sealed < S3C_HEADER ? sealed : S3C_HEADER;
    h.dst = hdr;
    h.dst_cap = sizeof hdr;
    if (sealed == 0) { snprintf(why, whylen, "%s is empty: it is not encrypted", name); return -1; }
    if (s3_perform1(c, &h) < 0) { snprintf(why, whylen, "%s", h.err); s3_req_free(&h); return -1; }
    size_t got = h.got;
    s3_req_free(&h);
    size_t chunk = check_header(k, hdr, got, name, why, whylen);
    if (!chunk) return -1;
    int64_t n = chunk_count(sealed, chunk, plain);
    if (n < 0) { snprintf(why, whylen, "%s fails its authentication (it is %" PRIu64 " bytes, no whole number of chunks)", name, sealed); return -1; }
    size_t par = (size_t)(c->parallel > 0 ? c->parallel : 1), sc = chunk + S3C_TAG;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    EVP_CIPHER_CTX *x = cipher_new(k, 0);
    struct s3_req *rq = calloc(par, sizeof *rq);
    unsigned char **bufs = calloc(par, sizeof *bufs);
    int rc = md && x && rq && bufs ? 0 : -1;
    for (size_t i = 0; i < par && rc == 0; i++) if (!(bufs[i] = malloc(sc))) rc = -1;
    if (rc < 0) snprintf(why, whylen, "out of memory");
    else {
        EVP_DigestInit_ex(md, EVP_md5(), NULL);
        EVP_DigestUpdate(md, hdr, S3C_HEADER);
    }
    for (uint64_t j = 0; j < (uint64_t)n && rc == 0; j += par) {
        size_t cnt = (uint64_t)n - j < par ? (size_t)((uint64_t)n - j) : par;
        for (size_t i = 0; i < cnt; i++) {
            uint64_t off = S3C_HEADER + (j + i) * sc;
            memset(&rq[i], 0, sizeof rq[i]);
            rq[i].method = "GET";
            snprintf(rq[i].key, sizeof rq[i].key, "%s", key);
            rq[i].range_off = off;
            rq[i].range_len = sealed - off < sc ? sealed - off : sc;
            rq[i].dst = bufs[i];
            rq[i].dst_cap = (size_t)rq[i].range_len;
        }
        if (s3_perform(c, rq, cnt) < 0) { snprintf(why, whylen, "%s", s3_first_error(rq, cnt)); rc = -1; }
        for (size_t i = 0; i < cnt && rc == 0; i++) {
            uint64_t ci = j + i;
            if (rq[i].got != rq[i].range_len) {
                snprintf(why, whylen, "%s fails its authentication (chunk %" PRIu64 " of %" PRId64 " came short)", name, ci + 1, n);
                rc = -1;
                break;
            }
            EVP_DigestUpdate(md, bufs[i], rq[i].got);
            size_t pl = rq[i].got - S3C_TAG;
            if (open_chunk(x, hdr, ci, ci + 1 == (uint64_t)n, bufs[i], pl, bufs[i]) < 0) {
                snprintf(why, whylen, "%s fails its authentication (chunk %" PRIu64 " of %" PRId64 ")", name, ci + 1, n);
                rc = -1;
            } else if (pl && pwrite(fd, bufs[i], pl, (off_t)(ci * chunk)) != (ssize_t)pl) {
                snprintf(why, whylen, "cannot write what %s holds: %s", obj, strerror(errno));
                rc = -1;
            }
        }
        for (size_t i = 0; i < cnt; i++) s3_req_free(&rq[i]);
    }
    if (rc == 0 && md5_hex) {
        unsigned char m[16];
        unsigned int ml = 0;
        EVP_DigestFinal_ex(md, m, &ml);
        s3_hex(m, 16, md5_hex);
    }
    for (size_t i = 0; bufs && i < par; i++) {
        if (bufs[i]) OPENSSL_cleanse(bufs[i], sc);
        free(bufs[i]);
    }
    free(bufs);
    free(rq);
    EVP_CIPHER_CTX_free(x);
    EVP_MD_CTX_free(md);
    return rc;
}

/* ---- in memory */

int s3_crypt_seal_into(const struct s3_key *k, const void *buf, size_t len, size_t chunk, unsigned char *out, char *why,
                       size_t whylen)
{
    if (chunk < MIN_CHUNK || chunk > MAX_CHUNK) { snprintf(why, whylen, "a chunk of %zu bytes is not allowed", chunk); return -1; }
    uint64_t n = len ? (len + chunk - 1) / chunk : 1;
    EVP_CIPHER_CTX *x = cipher_new(k, 1);
    int rc = x ? 0 : -1;
    if (rc < 0) snprintf(why, whylen, "cannot set up the cipher");
    else if (make_header(k, chunk, out) < 0) { snprintf(why, whylen, "cannot draw a random nonce (RAND_bytes)"); rc = -1; }
    for (uint64_t j = 0; j < n && rc == 0; j++) {
        size_t p0 = (size_t)j * chunk, pl = len - p0 < chunk ? len - p0 : chunk;
        if (seal_chunk(x, out, j, j + 1 == n, (const unsigned char *)buf + p0, pl, out + S3C_HEADER + j * (chunk + S3C_TAG)) < 0) {
            snprintf(why, whylen, "the cipher failed");
            rc = -1;
        }
    }
    EVP_CIPHER_CTX_free(x);
    return rc;
}

int s3_crypt_open_into(const struct s3_key *k, const void *buf, size_t len, const char *name, unsigned char *out,
                       size_t *outlen, char *why, size_t whylen)
{
    const unsigned char *in = buf;
    size_t chunk = check_header(k, in, len, name, why, whylen);
    if (!chunk) return -1;
    uint64_t plain;
    int64_t n = chunk_count(len, chunk, &plain);
    if (n < 0) { snprintf(why, whylen, "%s fails its authentication (it is %zu bytes, no whole number of chunks)", name, len); return -1; }
    EVP_CIPHER_CTX *x = cipher_new(k, 0);
    int rc = x ? 0 : -1;
    if (rc < 0) snprintf(why, whylen, "cannot set up the cipher");
    for (int64_t j = 0; j < n && rc == 0; j++) {
        size_t off = S3C_HEADER + (size_t)j * (chunk + S3C_TAG), cl = len - off < chunk + S3C_TAG ? len - off : chunk + S3C_TAG;
        if (open_chunk(x, in, (uint64_t)j, j + 1 == n, in + off, cl - S3C_TAG, out + (size_t)j * chunk) < 0) {
            snprintf(why, whylen, "%s fails its authentication (chunk %" PRId64 " of %" PRId64 ")", name, j + 1, n);
            rc = -1;
        }
    }
    EVP_CIPHER_CTX_free(x);
    if (rc == 0) *outlen = (size_t)plain;
    return rc;
}

int s3_crypt_open_buf(const struct s3_key *k, const void *buf, size_t len, const char *name, char **out, size_t *outlen,
                      char *why, size_t whylen)
{
    unsigned char *o = malloc(len + 1); /* the plaintext is shorter than what seals it */
    if (!o) { snprintf(why, whylen, "out of memory"); return -1; }
    if (s3_crypt_open_into(k, buf, len, name, o, outlen, why, whylen) < 0) {
        OPENSSL_cleanse(o, len);
        free(o);
        return -1;
    }
    o[*outlen] = 0;
    *out = (char *)o;
    return 0;
}
