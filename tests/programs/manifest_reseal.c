/* manifest_reseal: rewrites the trailer of a checkpoint manifest (the XXH3-64
 * of every byte before it), so that a test can hand Lazarus a manifest whose
 * records are malformed but whose checksum is right; or the checksum line of
 * a store's job file (`check=` XXH3-64 of every byte before that line), for
 * tests that edit its settings.
 *
 *   manifest_reseal MANIFEST
 *   manifest_reseal --job JOBFILE
 */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int reseal_job(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 1; }
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *ck = strstr(buf, "\ncheck=");
    size_t keep = ck ? (size_t)(ck - buf) + 1 : n; /* every line before the check line */
    f = fopen(path, "wb");
    if (!f) { perror(path); return 1; }
    fwrite(buf, 1, keep, f);
    fprintf(f, "check=%016llx\n", (unsigned long long)XXH3_64bits(buf, keep));
    return fclose(f) == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--job")) return reseal_job(argv[2]);
    if (argc != 2) {
        fprintf(stderr, "usage: manifest_reseal MANIFEST\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "r+b");
    if (!f || fseek(f, 0, SEEK_END) < 0) { perror(argv[1]); return 1; }
    long size = ftell(f);
    if (size < 16) { fprintf(stderr, "too short\n"); return 1; }
    unsigned char *buf = malloc((size_t)size);
    rewind(f);
    if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) { perror("read"); return 1; }
    uint64_t h = XXH3_64bits(buf, (size_t)size - 8);
    fseek(f, size - 8, SEEK_SET);
    fwrite(&h, 8, 1, f); /* little-endian, as the format */
    return fclose(f) == 0 ? 0 : 1;
}
