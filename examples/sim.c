/* sim: a small deterministic "simulation" for the Lazarus demo.
 *
 * Heat spreads over a 512x512 plate while a pseudo-random walker drops heat
 * on it.  100 steps of ~0.1 s each (about 10 s in all); progress once a second
 * on stderr, one result line on stdout at the end.  The result depends only on
 * the arithmetic, never on timing, so a run that was killed and restarted by
 * Lazarus must print exactly the same line as an uninterrupted one.
 *
 * It knows nothing about Lazarus: it is an ordinary, unmodified program.
 *
 *   cc -O2 -o sim examples/sim.c && ./sim
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { N = 512, STEPS = 100, SUBSTEPS = 4, STEPS_PER_REPORT = 10 };
static const long STEP_NS = 100 * 1000 * 1000; /* pacing: 0.1 s per step */

static double plate[N][N], next[N][N];

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static void diffuse(void)
{
    for (int i = 0; i < N; i++) {
        int up = i > 0 ? i - 1 : i, down = i < N - 1 ? i + 1 : i;
        for (int j = 0; j < N; j++) {
            int left = j > 0 ? j - 1 : j, right = j < N - 1 ? j + 1 : j;
            double lap = plate[up][j] + plate[down][j] + plate[i][left] + plate[i][right] - 4.0 * plate[i][j];
            next[i][j] = 0.999 * (plate[i][j] + 0.2 * lap);
        }
    }
    memcpy(plate, next, sizeof plate);
}

static double total_heat(void)
{
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++)
            sum += plate[i][j];
    return sum;
}

static uint64_t fingerprint(void)
{
    /* FNV-1a over the exact bits of the plate */
    const unsigned char *p = (const unsigned char *)plate;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < sizeof plate; k++) {
        h ^= p[k];
        h *= 0x100000001b3ull;
    }
    return h;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void)
{
    int x = N / 2, y = N / 2;

    for (int step = 1; step <= STEPS; step++) {
        long long start = now_ns();

        for (int s = 0; s < SUBSTEPS; s++) {
            uint64_t r = rng();
            x = (x + (int)(r % 31) - 15 + N) % N;
            y = (y + (int)((r >> 8) % 31) - 15 + N) % N;
            plate[x][y] += 1000.0 + (double)((r >> 20) % 1000);
            diffuse();
        }

        if (step % STEPS_PER_REPORT == 0) {
            fprintf(stderr, "sim: step %3d/%d  heat %.6f  walker at (%d,%d)\n", step, STEPS, total_heat(), x, y);
            fflush(stderr);
        }

        /* Pace to STEP_NS per step.  The sleep is clamped so that a jump of
         * the clock (e.g. after a restart) never stalls or skips the run. */
        long long left = STEP_NS - (now_ns() - start);
        if (left > STEP_NS)
            left = STEP_NS;
        if (left > 0) {
            struct timespec ts = {left / 1000000000LL, left % 1000000000LL};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
            }
        }
    }

    printf("result: steps=%d heat=%.9f fingerprint=%016llx\n", STEPS, total_heat(),
           (unsigned long long)fingerprint());
    return 0;
}
