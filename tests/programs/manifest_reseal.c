/* manifest_reseal: rewrites the trailer of a checkpoint manifest (the XXH3-64
 * of every byte before it), so that a test can hand Lazarus a manifest whose
 * records are malformed but whose checksum is right.
 *
 *   manifest_reseal MANIFEST
 */
#define XXH_INLINE_ALL
#include <xxhash.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
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
