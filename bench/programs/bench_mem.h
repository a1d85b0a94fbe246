/* Memory figures shared by the benchmark programs. */
#ifndef BENCH_MEM_H
#define BENCH_MEM_H
#include <stdio.h>

/* kB of this process's anonymous memory in transparent huge pages. */
static inline long hugekb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}
#endif
