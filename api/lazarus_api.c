/* liblazarus.so: finds the runtime (preloaded by `lazarus run`) at run time,
 * so a program linked with it runs unchanged without Lazarus. */
#include "lazarus.h"
#include <dlfcn.h>

__attribute__((visibility("default"))) int lazarus_checkpoint(unsigned long long *index)
{
    static int (*rt)(unsigned long long *);
    static int looked;
    if (!looked) {
        rt = (int (*)(unsigned long long *))dlsym(RTLD_DEFAULT, "lazarus_rt_checkpoint");
        looked = 1;
    }
    if (index) *index = 0;
    return rt ? rt(index) : LAZARUS_INACTIVE;
}
