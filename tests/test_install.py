"""`make install PREFIX=... DESTDIR=...` and `make uninstall`: the installed
`lazarus`, from another directory and as an ordinary user, runs a program,
checkpoints it and restarts it after a SIGKILL with the runtime and restorer
of the prefix; pkg-config builds API programs against the installed library,
shared and static; every man page renders without a warning; the bash
completion loads and completes; the options of every command, read from the
CLI's own tables, are in its --help, its man page and both completions;
uninstall leaves no file; `--version` says the version of lazarus.h."""
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import INCLUDE, PROGRAMS_SRC, REPO, find_program, kill_program, wait_gone
from test_restart_at import parse_steps


def _version():
    text = (INCLUDE / "lazarus.h").read_text()
    parts = [re.search(rf"^#define LAZARUS_VERSION_{p} (\d+)$", text, re.M) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) if m else "?" for m in parts)  # "?": none, test_version fails


VERSION = _version()
MAJOR, MINOR = VERSION.split(".")[:2]


def _make(*args, timeout=600):
    cp = subprocess.run(["make", "-s", "-C", str(REPO), *args], capture_output=True, text=True, timeout=timeout)
    assert cp.returncode == 0, f"$ make {' '.join(args)}\n{cp.stdout[-3000:]}\n{cp.stderr[-3000:]}"
    return cp


def _files(root: Path):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir())


@pytest.fixture(scope="module")
def prefix():
    """Lazarus installed into a fresh prefix every user can read; removed after."""
    top = Path(tempfile.mkdtemp(prefix="lazarus-prefix-", dir="/tmp"))
    os.chmod(top, 0o755)
    pre = top / "usr"
    try:
        _make("install", f"PREFIX={pre}", "DESTDIR=")
        yield pre
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def outdir():
    d = Path(tempfile.mkdtemp(prefix="lazarus-inst-progs-", dir="/tmp"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _pkg_config(prefix, *args):
    env = dict(os.environ, PKG_CONFIG_PATH=str(prefix / "lib" / "pkgconfig"))
    cp = subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=env)
    assert cp.returncode == 0, cp.stderr
    return cp.stdout.split()


def _gcc(out, src, flags):
    cmd = ["gcc", "-O2", "-Wall", "-o", str(out), str(src), *flags]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0 and not cp.stderr.strip(), f"$ {' '.join(cmd)}\n{cp.stderr}"
    os.chmod(out, 0o755)
    return out


@pytest.fixture(scope="module")
def api_prog(prefix, outdir):
    """tests/programs/api_prog.c built with `pkg-config --cflags --libs lazarus`."""
    return _gcc(outdir / "api_prog", PROGRAMS_SRC / "api_prog.c", _pkg_config(prefix, "--cflags", "--libs", "lazarus"))


def test_version(prefix):
    lz = prefix / "bin" / "lazarus"
    for arg in ("--version", "version"):
        cp = subprocess.run([str(lz), arg], capture_output=True, text=True, cwd="/")
        assert (cp.returncode, cp.stdout, cp.stderr) == (0, f"lazarus {VERSION}\n", ""), cp
    assert _pkg_config(prefix, "--modversion", "lazarus") == [VERSION]
    assert _pkg_config(prefix, "--modversion", "libckpt") == [VERSION]
    for lib in ("liblazarus", "libckpt"):
        real = prefix / "lib" / f"{lib}.so.{MAJOR}.{MINOR}"
        assert os.readlink(prefix / "lib" / f"{lib}.so.{MAJOR}") == real.name
        assert os.readlink(prefix / "lib" / f"{lib}.so") == real.name
        dyn = subprocess.run(["readelf", "-d", str(real)], capture_output=True, text=True).stdout
        assert f"Library soname: [{lib}.so.{MAJOR}]" in dyn, dyn


def test_installed_job_restarts(runner, prefix, api_prog):
    """From a directory of its own (runner.base), as root and as nobody: the
    installed lazarus runs the API program, `lazarus checkpoint` checkpoints
    it, and after a SIGKILL `lazarus restart` resumes it where it waited."""
    lz = prefix / "bin" / "lazarus"
    runner.env["LD_LIBRARY_PATH"] = str(prefix / "lib")  # liblazarus.so.MAJOR, for the program
    store = runner.base / "store"
    gofile = runner.base / "go"
    proc = runner.start([lz, "run", "-d", store, "-i", "0", "--", api_prog, "2", "1", gofile])
    proc.wait_for_output(r"^waiting$", timeout=120)
    steps = parse_steps(proc.stdout)
    assert [s[1] for s in steps] == ["continued"] * 2, f"{proc.stdout}\n{proc.stderr}"
    # the runtime in the program is the prefix's, not the build tree's
    pid = find_program(proc.pid, "api_prog")
    maps = Path(f"/proc/{pid}/maps").read_text()
    assert str(prefix / "lib" / "lazarus" / "liblazarus-rt.so") in maps, maps
    r = runner.run([lz, "checkpoint", "-d", store], timeout=120)
    assert r.rc == 0 and int(r.stdout) > steps[-1][2], str(r)
    kill_program(proc, "api_prog")

    runner.touch(gofile)
    r = runner.run([lz, "restart", "-d", store], timeout=120)
    assert r.rc == 0, str(r)
    # resumed in its wait loop (the CLI's checkpoint), its memory intact
    assert r.stdout.splitlines() == [f"done digest {steps[-1][4]}"], str(r)


def test_api_programs_shared_and_static(prefix, outdir, api_prog):
    """Both run without Lazarus and say so; the static one has no loader."""
    env = dict(os.environ, LD_LIBRARY_PATH=str(prefix / "lib"))
    static = outdir / "api_prog_static"
    cmd = ["gcc", "-static", "-O2", "-o", str(static), str(PROGRAMS_SRC / "api_prog.c"),
           *_pkg_config(prefix, "--static", "--cflags", "--libs", "lazarus")]
    cp = subprocess.run(cmd, capture_output=True, text=True)
    assert cp.returncode == 0, f"$ {' '.join(cmd)}\n{cp.stderr}"
    interp = subprocess.run(["readelf", "-l", str(static)], capture_output=True, text=True).stdout
    assert "INTERP" not in interp, "not a static program"
    for prog in (api_prog, static):
        cp = subprocess.run([str(prog), "2", "1", "-"], capture_output=True, text=True, env=env, timeout=60)
        assert cp.returncode == 0, cp.stderr
        assert [s[1] for s in parse_steps(cp.stdout)] == ["inactive"] * 2, cp.stdout
    # libckpt's static archive: a libckpt program with checkpointing off runs plainly
    ckpt = _gcc(outdir / "ckpt_prog_static", PROGRAMS_SRC / "ckpt_prog.c",
                [*_pkg_config(prefix, "--cflags", "libckpt"), f"-L{prefix}/lib", "-Wl,-Bstatic", "-lckpt", "-Wl,-Bdynamic"])
    work = outdir / "ckpt_work"
    work.mkdir()
    (work / ".ckptrc").write_text("checkpointing off\n")
    cp = subprocess.run([str(ckpt), "20"], capture_output=True, text=True, cwd=work, timeout=60)
    assert cp.returncode == 0 and re.search(r"^result \w+$", cp.stdout, re.M), cp


def _commands(lz):
    out = subprocess.run([str(lz), "--help"], capture_output=True, text=True).stdout
    return re.findall(r"^  ([a-z]+) ", out, re.M)


def test_man_pages_render(prefix):
    man = prefix / "share" / "man"
    want = {"man1/lazarus.1", "man3/lazarus.3", "man3/libckpt.3"}
    want |= {f"man1/lazarus-{c}.1" for c in _commands(prefix / "bin" / "lazarus")}
    assert set(_files(man)) == want
    env = dict(os.environ, MANWIDTH="80", LANG="C.UTF-8", MAN_DISABLE_SECCOMP="1")
    for page in sorted(want):
        cp = subprocess.run(["man", "-l", "--warnings", str(man / page)], capture_output=True, text=True, env=env)
        assert cp.returncode == 0 and cp.stderr == "", f"{page}:\n{cp.stderr}"
        assert re.search(r"^NAME\n", cp.stdout, re.M) and "@VERSION@" not in cp.stdout, cp.stdout[:500]
        assert f"Lazarus {VERSION}" in cp.stdout, page
    # and found by name through the prefix's man directory
    cp = subprocess.run(["man", "-M", str(man), "lazarus-restart"], capture_output=True, text=True, env=env)
    assert cp.returncode == 0 and "lazarus-restart - " in cp.stdout, cp.stderr


# --------------------------------------------------------------------------
# The CLI's option tables: cli/main.c's `longs` (name -> letter) and each
# command's `parse_opts(argc, argv, "CMD", "LETTERS", ...)`.
# --------------------------------------------------------------------------
def option_tables():
    main = (REPO / "cli" / "main.c").read_text()
    longs = re.findall(r'\{"([a-z-]+)", (?:no|required)_argument, 0, \'(.)\'\}', main)
    shorts = set(re.search(r'getopt_long\(argc, argv, "\+:([^"]*)"', main).group(1).replace(":", ""))
    tables = {}
    for src in sorted((REPO / "cli").glob("cmd_*.c")):
        for cmd, letters in re.findall(r'parse_opts\(argc, argv, "([a-z]+)", "([^"]*)"', src.read_text()):
            # one set of names per option: {"-d", "--dir"}, {"--force"}...
            tables[cmd] = [{f"--{n}" for n, c in longs if c == l} | ({f"-{l}"} if l in shorts else set())
                           for l in letters + "h"]
    return tables


def _bash_complete(comp: Path, words):
    script = (f'source "{comp}"; COMP_WORDS=({" ".join(words)}); COMP_CWORD={len(words) - 1}; '
              '_lazarus; printf "%s\\n" "${COMPREPLY[@]}"')
    cp = subprocess.run(["bash", "-c", script], capture_output=True, text=True)
    assert cp.returncode == 0 and cp.stderr == "", cp.stderr
    return [w for w in cp.stdout.split("\n") if w]


def test_bash_completion(prefix):
    comp = prefix / "share" / "bash-completion" / "completions" / "lazarus"
    cp = subprocess.run(["bash", "-c", f'source "{comp}" && complete -p lazarus'], capture_output=True, text=True)
    assert cp.returncode == 0 and cp.stdout.strip() == "complete -F _lazarus lazarus", cp
    assert _bash_complete(comp, ["lazarus", "re"]) == ["restart"]
    commands = _commands(prefix / "bin" / "lazarus")
    assert _bash_complete(comp, ["lazarus", ""])[:len(commands)] == commands
    assert set(_bash_complete(comp, ["lazarus", "run", "--durability", ""])) == {"process", "machine"}
    # after the program, its own words: no lazarus options
    assert _bash_complete(comp, ["lazarus", "run", "-d", "s", "--", "ls", "--no"]) == []


def test_every_option_documented_and_completed(prefix):
    """Every option of every command, from the CLI's tables: in `lazarus CMD
    --help`, in its man page, in the bash completion (exactly that set) and
    in the zsh completion's section of the command."""
    lz = prefix / "bin" / "lazarus"
    tables = option_tables()
    assert sorted(tables) == sorted(_commands(lz)), "a command without a table, or a table without a command"
    bash = prefix / "share" / "bash-completion" / "completions" / "lazarus"
    zsh = (prefix / "share" / "zsh" / "site-functions" / "_lazarus").read_text()
    zsh_common = {o for o in re.findall(r"--[a-z-]+|-[a-z]\b", zsh.split("\ncase $cmd in")[0])}
    for cmd, opts in tables.items():
        helptext = subprocess.run([str(lz), cmd, "--help"], capture_output=True, text=True).stdout
        page = (REPO / "man" / f"lazarus-{cmd}.1.scd").read_text().replace("\\_", "_")
        comp = {o.rstrip("=") for o in _bash_complete(bash, ["lazarus", cmd, "-"])}
        section = re.search(rf"^{cmd}\)\n(.*?)^  ;;", zsh, re.M | re.S).group(1)
        zopts = {o for o in re.findall(r"--[a-z-]+|(?<![\w-])-[a-z]\b", section)} | zsh_common
        every = set().union(*opts) - {"-h"}
        for names in opts[:-1]:  # all but -h/--help
            # --help shows each option in one of its forms (-d or --dir)
            assert any(re.search(rf"(?<![\w-]){o}(?![\w-])", helptext) for o in names), \
                f"{cmd} --help does not show {names}"
        for o in sorted(every):
            assert re.search(rf"\*{o}[*,= ]|[ ,*]{o}\*", page), f"lazarus-{cmd}(1) does not document {o}"
            assert o in zopts, f"zsh completion of {cmd} lacks {o}"
        assert comp == every, f"bash completion of {cmd}: {sorted(comp ^ every)} differ"


def test_environment_documented():
    """Every LAZARUS_ variable the product reads or sets is in lazarus(1),
    but no test hook (LAZARUS_TEST_*)."""
    page = (REPO / "man" / "lazarus.1.scd").read_text().replace("\\_", "_")
    srcs = [p for d in ("cli", "runtime", "restorer", "api", "files", "store", "remote", "common")
            for p in (REPO / d).iterdir() if p.suffix in (".c", ".h")]
    names = set()
    for p in srcs:
        names |= set(re.findall(r"\bLAZARUS_[A-Z0-9_]+(?==|\"|\))", p.read_text()))
    names -= set(re.findall(r"\bLAZARUS_[A-Z0-9_]+", (INCLUDE / "lazarus.h").read_text()))  # the API's names
    hooks = {n for n in names if n.startswith("LAZARUS_TEST_")}
    assert names - hooks, names
    for n in sorted(names - hooks):
        assert n in page, f"lazarus(1) does not name {n}"
    for n in sorted(hooks):
        assert n not in page, f"lazarus(1) names the test hook {n}"


def test_uninstall_leaves_nothing(tmp_path):
    """Staged with DESTDIR: exactly these files, and none after uninstall."""
    stage = tmp_path / "stage"
    _make("install", "PREFIX=/usr", f"DESTDIR={stage}")
    files = _files(stage)
    for f in (f"usr/bin/lazarus", "usr/libexec/lazarus/lazarus-restore", "usr/lib/lazarus/liblazarus-rt.so",
              f"usr/lib/liblazarus.so.{MAJOR}.{MINOR}", "usr/lib/liblazarus.a", "usr/lib/libckpt.a",
              "usr/include/lazarus.h", "usr/include/libckpt.h", "usr/include/cprfs.h", "usr/lib/pkgconfig/lazarus.pc",
              "usr/share/bash-completion/completions/lazarus", "usr/share/zsh/site-functions/_lazarus"):
        assert f in files, files
    pc = (stage / "usr/lib/pkgconfig/lazarus.pc").read_text()
    assert "prefix=/usr\n" in pc and str(stage) not in pc, pc
    _make("uninstall", "PREFIX=/usr", f"DESTDIR={stage}")
    assert _files(stage) == []
    assert not (stage / "usr/lib/lazarus").exists() and not (stage / "usr/libexec/lazarus").exists()


def test_man_needs_scdoc_all_does_not(tmp_path):
    """Without scdoc `make man` says so in one line and fails; `make all` builds."""
    cp = subprocess.run(["make", "-s", "-C", str(REPO), "man", f"B={tmp_path}", "SCDOC=/nonexistent/scdoc"],
                        capture_output=True, text=True)
    assert cp.returncode != 0 and "scdoc is missing" in cp.stderr.splitlines()[0], cp
    _make("all", "SCDOC=/nonexistent/scdoc")
    _make("man", f"B={tmp_path}")
    assert sorted(p.name for p in (tmp_path / "man").iterdir()) == sorted(p.name[:-4] for p in (REPO / "man").glob("*.scd"))


def test_every_api_function_documented():
    """Every function lazarus.h, cprfs.h and libckpt.h declare is in lazarus(3) and libckpt(3)."""
    for header, page in (("lazarus.h", "lazarus.3.scd"), ("cprfs.h", "lazarus.3.scd"), ("libckpt.h", "libckpt.3.scd")):
        decls = re.findall(r"^\w[\w\s\*]*?\b(\w+)\s*\(", (INCLUDE / header).read_text(), re.M)
        text = (REPO / "man" / page).read_text().replace("\\_", "_")
        assert decls, header
        for f in decls:
            assert re.search(rf"\*{f}\(|\*{f}\*\(", text), f"{page[:-4]} does not document {f}()"
