/* step_sim STEPS STEP_MS OUT: a deterministic computation in STEPS paced steps
 * (STEP_MS ms of sleep each, little CPU) over 4 MiB of memory; after each step
 * one line is appended to the file OUT and to stdout, and the last line on
 * stdout is the result.  Its output depends only on the arithmetic, so a run
 * killed, requeued and resumed any number of times must leave OUT and the
 * result byte-identical to an uninterrupted run's.  It knows nothing of
 * Lazarus or Slurm (tests/test_resume.py, tests/test_slurm.py). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WORDS (1u << 19) /* 4 MiB */

int main(int argc, char **argv)
{
    if (argc != 4) { fprintf(stderr, "usage: step_sim STEPS STEP_MS OUT\n"); return 2; }
    long steps = atol(argv[1]), ms = atol(argv[2]);
    int out = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (out < 0) { perror(argv[3]); return 1; }
    uint64_t *m = malloc(WORDS * sizeof *m);
    if (!m) return 1;
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint32_t i = 0; i < WORDS; i++) m[i] = i * 0x2545f4914f6cdd1dull;
    printf("start %ld steps\n", steps);
    fflush(stdout);
    for (long s = 0; s < steps; s++) {
        for (int k = 0; k < 20000; k++) { /* xorshift64* walk over the memory */
            x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
            uint64_t r = x * 0x2545f4914f6cdd1dull;
            m[r % WORDS] += r;
        }
        uint64_t h = 0;
        for (uint32_t i = 0; i < WORDS; i += 64) h = (h ^ m[i]) * 0x100000001b3ull;
        char line[80];
        int n = snprintf(line, sizeof line, "step %ld %016llx\n", s, (unsigned long long)h);
        if (write(out, line, (size_t)n) != n) return 1;
        fputs(line, stdout);
        fflush(stdout);
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
        while (nanosleep(&t, &t) < 0) {}
    }
    uint64_t h = 0;
    for (uint32_t i = 0; i < WORDS; i++) h = (h ^ m[i]) * 0x100000001b3ull;
    printf("result %016llx\n", (unsigned long long)h);
    return 0;
}
