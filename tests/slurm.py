"""A real Slurm for the tests: munged, slurmctld and slurmd (Debian 12's
Slurm 22.05) started on loopback as one node with two CPUs, no systemd, all
state in a temporary directory, every daemon started and stopped here by its
PID.  `Cluster.start()` returns None and a reason when Slurm cannot run
(packages missing, not root); the tests then skip with that reason.

The configuration is the one issue 19 lists: proctrack/linuxproc, task/none,
no accounting, cons_tres, JobRequeue=1, AuthInfo=cred_expire=30 (a requeued
job starts again after ~40 s instead of ~160 s), a `low` and a `high`
partition with partition_prio preemption, PreemptMode=REQUEUE, GraceTime=30,
preempt_send_user_signal.  Added for the tests' pace: sched/builtin with
sched_interval=5 (a requeued job that became eligible starts within 5 s, not
60), MinJobAge=3600 (finished jobs stay in `scontrol show job`).

    python3 tests/slurm.py   # start one by hand, print its SLURM_CONF, stop on Enter
"""
from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "squeue", "sinfo")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _which(name: str) -> str | None:
    return shutil.which(name, path="/usr/sbin:/usr/bin:/sbin:/bin")


def missing() -> str | None:
    """Why Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "a test Slurm needs root (slurmd runs jobs as their users)"
    gone = [n for n in DAEMONS + CLIENTS if not _which(n)]
    if gone:
        return (f"Slurm is not installed (no {', '.join(gone)}): "
                "`sh scripts/setup.sh` installs slurmctld slurmd slurm-client munge")
    try:
        pwd.getpwnam("munge")
    except KeyError:
        return "no user munge (the munge package makes it)"
    return None


class Cluster:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="lazarus-slurm-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.node = socket.gethostname().split(".")[0]
        self.procs: dict[str, subprocess.Popen] = {}
        self.conf = self.dir / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))

    # -- set-up -------------------------------------------------------------
    def _munge(self) -> None:
        m = pwd.getpwnam("munge")
        md = self.dir / "munge"
        md.mkdir(mode=0o700)
        key = md / "munge.key"
        key.write_bytes(os.urandom(128))
        os.chmod(key, 0o400)
        for p in (md, key):
            os.chown(p, m.pw_uid, m.pw_gid)
        self.munge_sock = md / "munge.sock"
        argv = [_which("munged"), "-F", "--force", f"--key-file={key}", f"--socket={self.munge_sock}",
                f"--pid-file={md / 'munged.pid'}", f"--log-file={md / 'munged.log'}",
                f"--seed-file={md / 'munged.seed'}"]
        self._start("munged", argv, user=m)
        self._wait(lambda: self.munge_sock.exists(), 10, "munged to listen")

    def _write_conf(self) -> None:
        d = self.dir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir()
        self.conf.write_text(f"""\
ClusterName=lazarus
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=cred_expire=30,socket={self.munge_sock}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# a requeued job becomes eligible after cred_expire, and only the periodic
# scheduling pass (60 s by default) starts it: every 5 s here
SchedulerParameters=sched_interval=5
JobRequeue=1
ReturnToService=2
MinJobAge=3600
KillWait=30
MpiDefault=none
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=low Nodes={self.node} Default=YES PriorityTier=1 PreemptMode=REQUEUE GraceTime=30 MaxTime=INFINITE State=UP
PartitionName=high Nodes={self.node} PriorityTier=10 PreemptMode=OFF MaxTime=INFINITE State=UP
""")

    def _start(self, name: str, argv, user=None) -> None:
        def drop():
            if user is not None:
                os.setgid(user.pw_gid)
                os.setuid(user.pw_uid)
        log = open(self.dir / f"{name}.out", "wb")
        self.procs[name] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env, preexec_fn=drop, start_new_session=True)
        log.close()

    def _wait(self, ok, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if ok():
                return
            for n, p in self.procs.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{n} exited ({p.returncode}) while waiting for {what}:\n{self.logs()}")
            time.sleep(0.2)
        raise RuntimeError(f"timed out after {timeout}s waiting for {what}:\n{self.logs()}")

    def start(self) -> None:
        self._munge()
        self._write_conf()
        self._start("slurmctld", [_which("slurmctld"), "-D", "-i", "-f", str(self.conf)])
        self._wait(lambda: self.run("scontrol", "ping").returncode == 0, 30, "slurmctld to answer")
        self._start("slurmd", [_which("slurmd"), "-D", "-f", str(self.conf), "-N", self.node])
        self._wait(lambda: self.node_state().startswith("idle"), 60, f"node {self.node} idle in sinfo")

    def stop(self) -> None:
        """Every job cancelled, then slurmd, slurmctld and munged, each by the PID started here."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "-u", "root")
            end = time.monotonic() + 15
            while time.monotonic() < end and self.run("squeue", "-h").stdout.strip():
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            p = self.procs.get(name)
            if p is None or p.poll() is not None:
                continue
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def cleanup(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- use ----------------------------------------------------------------
    def run(self, *argv, check: bool = False, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([_which(argv[0]) or argv[0], *argv[1:]], env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=check, stdin=subprocess.DEVNULL)

    def node_state(self) -> str:
        r = self.run("sinfo", "-h", "-N", "-o", "%T", "-n", self.node)
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else ""

    def sbatch(self, script: Path, *opts) -> int:
        r = self.run("sbatch", "--parsable", *opts, str(script), check=False)
        if r.returncode != 0:
            raise AssertionError(f"sbatch failed: {r.stderr}")
        return int(r.stdout.strip().split(";")[0])

    def job(self, jobid: int) -> dict:
        """`scontrol show job -o` as a dict ({} once Slurm forgot it)."""
        r = self.run("scontrol", "-o", "show", "job", str(jobid))
        out = {}
        for word in r.stdout.split():
            if "=" in word:
                k, v = word.split("=", 1)
                out.setdefault(k, v)
        return out

    def logs(self) -> str:
        out = []
        for f in sorted(self.dir.glob("*.out")) + sorted((self.dir / "log").glob("*.log")):
            try:
                out.append(f"--- {f.name}\n" + f.read_text(errors="replace")[-3000:])
            except OSError:
                pass
        return "\n".join(out)


class SlurmDidNotStart(Exception):
    pass


def start_cluster():
    """(Cluster, None) running, or (None, why) when Slurm is not installed
    here (not root, packages missing).  Installed but failing to start is a
    failure (SlurmDidNotStart), not a skip: CI installs it, so a skip there
    would hide a broken setup."""
    why = missing()
    if why:
        return None, why
    c = Cluster()
    try:
        c.start()
    except Exception as e:  # noqa: BLE001 - said in full, with the daemons' logs
        logs = c.logs()
        c.stop()
        c.cleanup()
        raise SlurmDidNotStart(f"Slurm is installed but did not start: {e}\n{logs}") from e
    return c, None


if __name__ == "__main__":
    c, why = start_cluster()
    if c is None:
        raise SystemExit(why)
    print(f"export SLURM_CONF={c.conf}")
    try:
        input("Enter stops it\n")
    finally:
        c.stop()
