/* Linked statically (no LD_PRELOAD reaches it): sleeps, prints, exits 0. */
#include <stdio.h>
#include <unistd.h>
int main(void) { usleep(1500000); printf("static done\n"); return 0; }
