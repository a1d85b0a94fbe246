"""Process trees with real programs (the acceptance tests of the tree
restart): each job is first run without Lazarus to get the reference
result, then under `lazarus run -i 1` beside a CPU load (as many busy loops
as cores: crashload.CpuLoad), and the WHOLE job is killed 3 times at random
instants (each within 1 s after a new checkpoint appeared), in each of the
three orders of crashload.kill_job in turn: all at once (every process
stopped top-down, then SIGKILLed: a machine dying), the supervisor first and
its processes 5-500 ms later, the processes first and the supervisor
later; `lazarus restart` after each kill, until it finishes, and no restart
may refuse.  The files it made must equal the reference run's byte for
byte, its output lines be the reference's, no restart start over.

- `programs/tree_pipeline.sh`: bash looping over pipelines (awk | sort |
  uniq -c > out.N in the background, awk | sort -n | md5sum > sum.N in a
  subshell, `wait`, a line appended to `log` with `>>`) [root, user];
- `make -j2` of a generated C project (10 modules of generated -O2 code, a
  header, a binary linked from them, run to make result.txt) with the real
  gcc: every object, the binary and result.txt identical to an
  uninterrupted build of the same sources (one for both identities) [root, user];
- `programs/tree_mp_pool.py`: Python multiprocessing, a Pool of 2 forked
  workers each writing task files, the parent a log and a summary [root].

(These were run idle too, killed all at once only, and again beside the
load in test_busy_machine.py: one run each now, loaded, in every order.)
"""
import os
import random
import shutil
from pathlib import Path

import pytest

import crashload
from conftest import IS_ROOT, PROGRAMS_SRC
from crashload import assert_same_files, files_of, plain_run

# 3 kills, every order once; LAZARUS_BUSY_KILLS=N: N times as many
ORDERS = list(crashload.ORDERS) * int(os.environ.get("LAZARUS_BUSY_KILLS", "1"))
PIPE_ARGS = ["72", "150000"]  # iterations, rows per iteration
MAKE_MODULES, MAKE_FUNCS = 10, 70
POOL_ARGS = ["32", "25000"]   # tasks, rounds per task


def need(mode):
    if mode == "root" and not IS_ROOT:
        pytest.skip("the root variant needs the test session to run as root")


def own(runner, path: Path) -> None:
    if IS_ROOT:
        for dirpath, dirs, files in os.walk(path):
            for n in [dirpath] + [os.path.join(dirpath, f) for f in dirs + files]:
                os.lchown(n, runner.uid, runner.uid)




# --------------------------------------------------------------------------
# 1. bash running pipelines
# --------------------------------------------------------------------------
def script_against_plain_run(runner, rng, name: str, interpreter: str, args) -> None:
    """programs/NAME run by INTERPRETER with DIR and ARGS: once without Lazarus
    in ref/, then in work/ killed whole in every order beside a CPU load and
    restarted until done; every file of work/ and the output as in ref/."""
    script = runner.base / name
    shutil.copy(PROGRAMS_SRC / name, script)
    os.chmod(script, 0o644)
    crashload.against_plain_run(runner, rng, lambda d: [interpreter, script, d, *args], ORDERS)


@pytest.mark.parametrize("mode", ["root", "user"])
def test_bash_pipelines_whole_job_killed(mode, runner, rng):
    """bash: iterations of awk | sort | uniq -c > out.N (background) and
    awk | sort -n | md5sum > sum.N (subshell), wait, a line >> log; the
    whole job killed 3 times at random instants in every order beside a CPU
    load and restarted until done: out.*, sum.*, log byte-identical to an
    uninterrupted run."""
    need(mode)
    script_against_plain_run(runner, rng, "tree_pipeline.sh", "bash", PIPE_ARGS)


# --------------------------------------------------------------------------
# 2. make -j2 with gcc
# --------------------------------------------------------------------------
def gen_project(d: Path, modules: int, funcs: int, seed: int = 7) -> None:
    """A C project: mini.h, main.c and `modules` files of `funcs` generated
    functions each (loops, shifts, switches: real work for gcc -O2), a
    Makefile linking `mini` and running it into result.txt."""
    rng = random.Random(seed)
    hdr = ["#ifndef MINI_H", "#define MINI_H", "#include <stdint.h>",
           "typedef struct { uint64_t a, b; uint32_t v[16]; } state_t;"]
    hdr += [f"uint64_t mod{m}_run(state_t *s, uint64_t seed);" for m in range(modules)]
    hdr.append("#endif")
    (d / "mini.h").write_text("\n".join(hdr) + "\n")
    ops = ["+", "^", "-", "|"]
    for m in range(modules):
        src = ['#include "mini.h"']
        for f in range(funcs):
            src += [f"static uint64_t m{m}_f{f}(state_t *s, uint64_t x)", "{",
                    "    uint64_t acc = x;", "    for (int i = 0; i < 16; i++) {"]
            for _ in range(rng.randrange(6, 12)):
                c, j, op = rng.getrandbits(32) | 1, rng.randrange(16), rng.choice(ops)
                src.append(f"        acc = (acc * {c}u) {op} ((uint64_t)s->v[(i + {j}) & 15] << {rng.randrange(1, 31)});")
                src.append(f"        s->v[(i * {rng.randrange(1, 16)} + {j}) & 15] {op}= (uint32_t)(acc >> {rng.randrange(1, 40)});")
            src += ["        if (acc & 1) s->a += acc; else s->b ^= acc;", "    }", "    switch (acc % 7) {"]
            src += [f"    case {k}: acc += {rng.getrandbits(40)}ull * (s->a | {k + 1}); break;" for k in range(7)]
            src += ["    }", "    return acc;", "}"]
        src += [f"uint64_t mod{m}_run(state_t *s, uint64_t seed)", "{", "    uint64_t x = seed;",
                "    for (int r = 0; r < 200; r++) {"]
        src += [f"        x = m{m}_f{f}(s, x + {f});" for f in range(funcs)]
        src += ["    }", "    return x;", "}"]
        (d / f"mod{m}.c").write_text("\n".join(src) + "\n")
    main = ['#include "mini.h"', "#include <stdio.h>", "#include <string.h>", "int main(void)", "{",
            "    state_t s;", "    memset(&s, 0, sizeof s);",
            "    for (int i = 0; i < 16; i++) s.v[i] = 2654435761u * (i + 1);", "    uint64_t x = 1;"]
    main += [f"    x = mod{m}_run(&s, x);\n    printf(\"mod{m} %016llx\\n\", (unsigned long long)x);"
             for m in range(modules)]
    main += ["    printf(\"total %016llx %016llx\\n\", (unsigned long long)s.a, (unsigned long long)s.b);",
             "    return 0;", "}"]
    (d / "main.c").write_text("\n".join(main) + "\n")
    objs = " ".join([f"mod{m}.o" for m in range(modules)] + ["main.o"])
    (d / "Makefile").write_text(
        "CC = gcc\nCFLAGS = -O2 -Wall\n"
        f"OBJS = {objs}\n\n"
        "all: result.txt\n\n"
        "mini: $(OBJS)\n\t$(CC) -o $@ $(OBJS)\n\n"
        "%.o: %.c mini.h\n\t$(CC) $(CFLAGS) -c -o $@ $<\n\n"
        "result.txt: mini\n\t./mini > $@.tmp && mv $@.tmp $@\n")


@pytest.fixture(scope="module")
def make_reference(tmp_path_factory) -> dict:
    """The uninterrupted build's files, once for both identities: gcc -O2
    without -g writes no path into the objects or the binary (checked: two
    builds in two directories are byte-identical) and files_of compares
    relative names, so the build under Lazarus in another directory must
    give exactly these."""
    proj = tmp_path_factory.mktemp("make-reference") / "proj"
    proj.mkdir()
    gen_project(proj, MAKE_MODULES, MAKE_FUNCS)
    plain_run(["make", "-j2", "-C", proj], proj.parent)
    ref = files_of(proj)
    assert {"mini", "result.txt", "main.o"} <= set(ref), sorted(ref)
    return ref


@pytest.mark.parametrize("mode", ["root", "user"])
def test_make_j2_whole_job_killed(mode, runner, rng, make_reference):
    """make -j2 of a generated C project with gcc -O2 (11 objects, a binary,
    its output), the whole job killed 3 times at random instants in every
    order beside a CPU load and restarted until done: every file of the
    project directory (sources, objects, binary, result.txt) byte-identical
    to an uninterrupted build of the same sources, no temporary file left."""
    need(mode)
    proj = runner.mkdir("proj")
    gen_project(proj, MAKE_MODULES, MAKE_FUNCS)
    own(runner, proj)
    with crashload.CpuLoad() as load:
        cr = crashload.run_until_done(runner, runner.base / "store", ["make", "-j2", "-C", proj], rng, ORDERS,
                                      load=load)
    assert cr.kills == len(ORDERS), f"the build finished after only {cr.kills} kills\n{cr.describe()}"
    assert_same_files(files_of(proj), make_reference, cr.describe())


# --------------------------------------------------------------------------
# 3. Python multiprocessing Pool
# --------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["root"])
def test_multiprocessing_pool_whole_job_killed(mode, runner, rng):
    """Python multiprocessing.Pool(2) (forked workers, POSIX semaphores)
    mapping tasks that each write a task file, the parent a log and a
    summary; the whole job killed 3 times at random instants in every order
    beside a CPU load and restarted until done: every file and the output
    as uninterrupted."""
    need(mode)
    script_against_plain_run(runner, rng, "tree_mp_pool.py", "/usr/bin/python3", POOL_ARGS)
