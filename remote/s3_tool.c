/* lazarus-s3: the S3 client on its own, for the tests and bench/remote.py
 * (a plain upload is the transport's limit a checkpoint is measured
 * against).  Usage:
 *   lazarus-s3 [--endpoint URL] [--ca-file F] [--insecure] [--addressing path|virtual] CMD ARGS
 *   put s3://B/KEY FILE | get s3://B/KEY FILE | head s3://B/KEY | rm s3://B/KEY |
 *   ls s3://B/PREFIX | uploads s3://B/PREFIX | abort s3://B/PREFIX (every multipart upload under it)
 * With --encrypt-key FILE, put seals the file (s3_crypt.c) and get opens
 * it, authenticated; `lazarus-s3 --encrypt-key FILE crypt-bench MIB` seals
 * and opens MIB MiB in memory and prints both rates (bench/remote.py).
 * One line on stderr and exit 1 on any failure. */
#include "s3.h"
#include "s3_crypt.h"
#include "util.h"
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Seal and open `mib` MiB in memory in chunks of the part size: the
 * cipher's rate on this machine, without the network. */
static int crypt_bench(const struct s3_key *k, uint64_t mib)
{
    size_t len = (size_t)(mib ? mib : 1024) << 20, chunk = s3_part_size(), slen = (size_t)s3c_sealed_size(len, chunk), plen;
    unsigned char *buf = malloc(len), *sealed = malloc(slen), *plain = malloc(len);
    char why[512];
    if (!buf || !sealed || !plain) { lz_err("out of memory"); return 1; }
    for (size_t i = 0; i < len; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
    memset(sealed, 0, slen); /* every page touched before the clock starts */
    memset(plain, 0, len);
    /* wall time, and this process's CPU time (what the cipher costs when other work shares the cores) */
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC), c0 = lz_now_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (s3_crypt_seal_into(k, buf, len, chunk, sealed, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    uint64_t t1 = lz_now_ns(CLOCK_MONOTONIC), c1 = lz_now_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (s3_crypt_open_into(k, sealed, slen, "the sealed copy", plain, &plen, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    uint64_t t2 = lz_now_ns(CLOCK_MONOTONIC), c2 = lz_now_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (plen != len || memcmp(plain, buf, len)) { lz_err("the opened copy differs"); return 1; }
    double gb = (double)len / 1e9, s = (double)(t1 - t0) / 1e9, o = (double)(t2 - t1) / 1e9;
    double cs = (double)(c1 - c0) / 1e9, co = (double)(c2 - c1) / 1e9;
    printf("bytes %zu seal_s %.3f open_s %.3f seal_GBps %.2f open_GBps %.2f seal_cpu_GBps %.2f open_cpu_GBps %.2f\n", len, s, o,
           gb / s, gb / o, gb / cs, gb / co);
    free(buf);
    free(sealed);
    free(plain);
    return 0;
}

int main(int argc, char **argv)
{
    lz_prog = "lazarus-s3";
    static const struct option longs[] = {{"endpoint", required_argument, 0, 'e'}, {"ca-file", required_argument, 0, 'c'},
                                          {"insecure", no_argument, 0, 'k'}, {"addressing", required_argument, 0, 'a'},
                                          {"encrypt-key", required_argument, 0, 'y'}, {0, 0, 0, 0}};
    const char *endpoint = NULL, *ca = NULL, *addr = NULL, *keyfile = NULL;
    int insecure = 0, ch;
    while ((ch = getopt_long(argc, argv, "+", longs, NULL)) != -1) {
        if (ch == 'e') endpoint = optarg;
        else if (ch == 'c') ca = optarg;
        else if (ch == 'k') insecure = 1;
        else if (ch == 'a') addr = optarg;
        else if (ch == 'y') keyfile = optarg;
        else { lz_err("usage: lazarus-s3 [--endpoint URL] [--ca-file F] [--insecure] put|get|head|rm|ls|uploads|abort s3://... [FILE]"); return 2; }
    }
    if (argc - optind < 2) { lz_err("usage: lazarus-s3 [options] put|get|head|rm|ls|uploads|abort s3://... [FILE]"); return 2; }
    const char *cmd = argv[optind], *url = argv[optind + 1], *file = argc - optind > 2 ? argv[optind + 2] : NULL;
    struct s3_conf c;
    char why[2048];
    struct s3_key k, *kp = NULL;
    if (keyfile) {
        if (s3_key_load(keyfile, &k, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
        kp = &k;
    }
    if (!strcmp(cmd, "crypt-bench") && kp) return crypt_bench(kp, strtoull(url, NULL, 10));
    if (s3_conf_load(&c, url, endpoint, addr, ca, insecure, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
    const char *key = c.prefix;
    uint64_t t0 = lz_now_ns(CLOCK_MONOTONIC);
    if (!strcmp(cmd, "put") && file) {
        int fd = open(file, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st) < 0) { lz_err("cannot open %s", file); return 1; }
        char md5[33];
        uint64_t sealed;
        if ((kp ? s3_crypt_put_file(&c, kp, key, fd, (uint64_t)st.st_size, md5, &sealed, why, sizeof why)
                : s3_put_file(&c, key, fd, (uint64_t)st.st_size, md5, why, sizeof why)) < 0) { lz_err("%s", why); return 1; }
        printf("%s %.3f\n", md5, (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        return 0;
    }
    if (!strcmp(cmd, "get") && file) {
        uint64_t size;
        int h = s3_head(&c, key, &size, NULL, 0, why, sizeof why);
        if (h < 0) { lz_err("%s", why); return 1; }
        if (h > 0) { lz_err("no object s3://%s/%s", c.bucket, key); return 1; }
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (fd < 0) { lz_err("cannot create %s", file); return 1; }
        char md5[33];
        uint64_t plain;
        if ((kp ? s3_crypt_get_file(&c, kp, key, size, fd, md5, &plain, why, sizeof why)
                : s3_get_file(&c, key, size, fd, md5, why, sizeof why)) < 0) { lz_err("%s", why); return 1; }
        if (kp && ftruncate(fd, (off_t)plain) < 0) { lz_err("cannot write %s", file); return 1; }
        printf("%s %.3f\n", md5, (double)(lz_now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        return 0;
    }
    if (!strcmp(cmd, "head")) {
        uint64_t size;
        char etag[80];
        int h = s3_head(&c, key, &size, etag, sizeof etag, why, sizeof why);
        if (h < 0) { lz_err("%s", why); return 1; }
        if (h > 0) { lz_err("no object s3://%s/%s", c.bucket, key); return 1; }
        printf("%llu %s\n", (unsigned long long)size, etag);
        return 0;
    }
    if (!strcmp(cmd, "rm")) {
        if (s3_delete(&c, key, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
        return 0;
    }
    if (!strcmp(cmd, "ls")) {
        struct s3_object *v;
        ssize_t n = s3_list(&c, key, &v, why, sizeof why);
        if (n < 0) { lz_err("%s", why); return 1; }
        for (ssize_t i = 0; i < n; i++) printf("%llu %s %s\n", (unsigned long long)v[i].size, v[i].etag, v[i].key);
        free(v);
        return 0;
    }
    if (!strcmp(cmd, "uploads") || !strcmp(cmd, "abort")) {
        struct s3_upload *v;
        ssize_t n = s3_list_uploads(&c, key, &v, why, sizeof why);
        if (n < 0) { lz_err("%s", why); return 1; }
        for (ssize_t i = 0; i < n; i++) {
            if (cmd[0] == 'u') printf("%s %s\n", v[i].id, v[i].key);
            else if (s3_abort_upload(&c, v[i].key, v[i].id, why, sizeof why) < 0) { lz_err("%s", why); return 1; }
        }
        free(v);
        return 0;
    }
    lz_err("unknown command '%s' (put, get, head, rm, ls, uploads, abort)", cmd);
    return 2;
}
