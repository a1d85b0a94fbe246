/* liblazarus.so: finds the runtime (preloaded by `lazarus run`) at run time,
 * so a program linked with it runs unchanged without Lazarus.  dlsym is a
 * weak reference: a program linked statically with liblazarus.a (which the
 * runtime cannot enter) does not get the dynamic loader's code for it, and
 * every call is a no-op there (lazarus_tx.c: the transaction API, which
 * reaches the job's supervisor without the runtime, and lazarus_strerror). */
#include "lazarus.h"
#include <dlfcn.h>

#pragma weak dlsym

/* lazarus_tx.c: the reason is the runtime's from now on */
void lz_api_reason_clear(void);

__attribute__((visibility("default"))) int lazarus_checkpoint(unsigned long long *index)
{
    static int (*rt)(unsigned long long *);
    static int looked;
    if (!looked) {
        rt = dlsym ? (int (*)(unsigned long long *))dlsym(RTLD_DEFAULT, "lazarus_rt_checkpoint") : NULL;
        looked = 1;
    }
    if (index) *index = 0;
    lz_api_reason_clear();
    return rt ? rt(index) : LAZARUS_INACTIVE;
}

/* The runtime's entry, looked up once (NULL: no runtime, the call is a no-op). */
static void *rt_entry(void **slot, int *looked, const char *name)
{
    if (!__atomic_load_n(looked, __ATOMIC_ACQUIRE)) {
        *slot = dlsym ? dlsym(RTLD_DEFAULT, name) : NULL;
        __atomic_store_n(looked, 1, __ATOMIC_RELEASE);
    }
    return *slot;
}

typedef int (*exclude_fn)(void *, size_t, int);
typedef int (*include_fn)(void *, size_t);

__attribute__((visibility("default"))) int lazarus_exclude(void *addr, size_t len, int how)
{
    static void *slot;
    static int looked;
    exclude_fn f = (exclude_fn)rt_entry(&slot, &looked, "lazarus_rt_exclude");
    return f ? f(addr, len, how) : 0;
}

__attribute__((visibility("default"))) int lazarus_include(void *addr, size_t len)
{
    static void *slot;
    static int looked;
    include_fn f = (include_fn)rt_entry(&slot, &looked, "lazarus_rt_include");
    return f ? f(addr, len) : 0;
}

typedef int (*here_fn)(unsigned long long *);

__attribute__((visibility("default"))) int lazarus_checkpoint_here(unsigned long long *index)
{
    static void *slot;
    static int looked;
    here_fn f = (here_fn)rt_entry(&slot, &looked, "lazarus_rt_checkpoint_here");
    if (index) *index = 0;
    lz_api_reason_clear();
    return f ? f(index) : LAZARUS_INACTIVE;
}

/* The fuller API (lazarus.h): each a no-op with a documented result when the
 * runtime is absent. */
#define RT_CALL(type, name, ...) \
    static void *slot; \
    static int looked; \
    type f = (type)rt_entry(&slot, &looked, name)

typedef int (*int_fn)(void);
typedef const char *(*str_fn)(void);
typedef int (*on_fn)(int, void (*)(int, void *), void *);

__attribute__((visibility("default"))) int lazarus_is_enabled(void)
{
    RT_CALL(int_fn, "lazarus_rt_is_enabled");
    return f ? f() : 0;
}

__attribute__((visibility("default"))) int lazarus_disable(void)
{
    RT_CALL(int_fn, "lazarus_rt_disable");
    return f ? f() : 0;
}

__attribute__((visibility("default"))) int lazarus_enable(void)
{
    RT_CALL(int_fn, "lazarus_rt_enable");
    return f ? f() : 0;
}

__attribute__((visibility("default"))) int lazarus_on(int event, void (*fn)(int, void *), void *arg)
{
    RT_CALL(on_fn, "lazarus_rt_on");
    return f ? f(event, fn, arg) : 0;
}

__attribute__((visibility("default"))) const char *lazarus_store_dir(void)
{
    RT_CALL(str_fn, "lazarus_rt_store_dir");
    return f ? f() : NULL;
}

__attribute__((visibility("default"))) int lazarus_checkpoints(void)
{
    RT_CALL(int_fn, "lazarus_rt_checkpoints");
    return f ? f() : 0;
}

__attribute__((visibility("default"))) int lazarus_restarts(void)
{
    RT_CALL(int_fn, "lazarus_rt_restarts");
    return f ? f() : 0;
}
