/* Objects encrypted on the client (`--encrypt-key FILE`; ARCHITECTURE.md,
 * "Remote store", has the format): AES-256-GCM through libcrypto's EVP, a
 * fresh random base nonce per object, the plaintext sealed in fixed chunks
 * so that a chunk sits at an offset one can compute (ranged, parallel
 * fetches) and none can be reordered, dropped or cut off unnoticed. */
#ifndef LZ_S3_CRYPT_H
#define LZ_S3_CRYPT_H
#include "s3.h"
#include <stddef.h>
#include <stdint.h>

#define S3C_HEADER 40 /* bytes before the first chunk */
#define S3C_TAG 16    /* GCM tag after each chunk's ciphertext */

struct s3_key {
    unsigned char k[32];
    char fp[17]; /* fingerprint: first 16 hex digits of SHA-256("lazarus encrypt-key 1\0" || key) */
};

/* A key file: 32 raw bytes, or 64 hex digits and a newline.  0, or -1 with
 * why (never a byte of the file in it). */
int s3_key_load(const char *path, struct s3_key *key, char *why, size_t whylen);
void s3_key_fingerprint(const unsigned char k[32], char fp[17]);

/* The size of a plaintext of `plain` bytes sealed in chunks of `chunk`. */
uint64_t s3c_sealed_size(uint64_t plain, size_t chunk);

/* fd's bytes [0, plain) sealed and uploaded as `key` (s3_put_source, chunks
 * of the part size): the MD5 of what was sent into md5_hex, its size into
 * *sealed.  0, or -1 with why. */
int s3_crypt_put_file(const struct s3_conf *c, const struct s3_key *k, const char *key, int fd, uint64_t plain,
                      char *md5_hex, uint64_t *sealed, char *why, size_t whylen);
/* Object `key` of `sealed` bytes fetched (a chunk per ranged GET, several in
 * flight), each chunk authenticated before its plaintext is written into fd
 * at its offset: the MD5 of the bytes fetched into md5_hex, the plaintext's
 * size into *plain.  0, or -1 with why ("remote object s3://b/k fails its
 * authentication", "... is encrypted with another key", ...). */
int s3_crypt_get_file(const struct s3_conf *c, const struct s3_key *k, const char *key, uint64_t sealed, int fd,
                      char *md5_hex, uint64_t *plain, char *why, size_t whylen);

/* In memory: buf sealed in chunks of `chunk` into out (s3c_sealed_size
 * bytes); a sealed object's plaintext into out (at least as long as it, or
 * malloc'ed and NUL-terminated by open_buf), `name` (as "remote object
 * s3://b/k") for the message.  0, or -1 with why. */
int s3_crypt_seal_into(const struct s3_key *k, const void *buf, size_t len, size_t chunk, unsigned char *out, char *why,
                       size_t whylen);
int s3_crypt_open_into(const struct s3_key *k, const void *buf, size_t len, const char *name, unsigned char *out,
                       size_t *outlen, char *why, size_t whylen);
int s3_crypt_open_buf(const struct s3_key *k, const void *buf, size_t len, const char *name, char **out, size_t *outlen,
                      char *why, size_t whylen);
/* Whether bytes begin as a sealed object does (the magic). */
int s3c_is_sealed(const void *buf, size_t len);
#endif
