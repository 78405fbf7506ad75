"""Proof on a real GPU that specsweep's stale-server cleanup kills ours and only ours.

Run from the repo root on an NVIDIA host (nvidia-smi on PATH, PyTorch or CuPy in the
python that runs this; psutil too — the repo's other dependencies are not needed):

    python3 benchmarks/gpu_cleanup_proof.py            # GPU 0, 16 GiB per scheduler
    python3 benchmarks/gpu_cleanup_proof.py --gpu 0 --gib 16 --trainer-gib 8
    python3 benchmarks/gpu_cleanup_proof.py --simulate # no GPU: the simulator

What it starts, the way sglang's processes look (no setproctitle needed: each child
is exec'd with argv[0] set to its title, and its kernel name set with prctl
PR_SET_NAME, so /proc/<pid>/cmdline, ps, psutil and nvidia-smi show
``sglang::scheduler_TP0``; PYTHONPATH carries this python's sys.path because a
python started under another argv[0] cannot find its own site-packages):

* a launcher (``... sglang.launch_server --port P``, own session, listens on P),
* its child ``sglang::scheduler_TP0`` holding ``--gib`` GiB on the GPU,
* its child ``sglang::detokenizer`` (no GPU memory),
* an orphan ``sglang::scheduler_TP1`` holding ``--gib`` GiB: double fork + setsid, so
  it is reparented to init and out of the launcher's process group, and it ignores
  SIGTERM (the sglang issue 23627 orphan),
* a foreign ``trainer`` holding ``--trainer-gib`` GiB on the same GPU, run as user
  ``nobody`` when this runs as root (falls back to this user, still not sglang-named).

Then it checks: (A) kill_stale refuses (StaleProcessError naming the trainer) and
signals nothing; (B) with tolerate_foreign_gpu=True it kills the launcher, both
schedulers and the detokenizer, leaves the trainer alive, and the GPU's memory.used
falls back to the trainer's share; a sampled nvidia-smi timeline shows how fast;
(C) the same server started again is stopped by the teardown (stop_server): its
group, then the orphan outside it, then the GPU's memory back to B's limit, the
trainer alive.
Exit status 0 when all of that holds, 1 otherwise; every process it started is
SIGKILLed at the end.

``--simulate`` does the same against the simulator: the launcher is
``specsweep.sim.launch_server --tp 2`` with ``SPECSWEEP_SIM_ORPHAN=1`` (TP0 is its
orphan), memory lives in a scratch inventory and nvidia-smi is the bundled stand-in.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402

from specsweep.errors import StaleProcessError  # noqa: E402
from specsweep.targets.cleanup import CleanupReport, kill_stale  # noqa: E402
from specsweep.targets.gpus import find_nvidia_smi, memory_used, query  # noqa: E402
from specsweep.targets.handle import ServerHandle  # noqa: E402
from specsweep.targets.launch_record import LaunchState  # noqa: E402
from specsweep.targets.teardown import stop_server  # noqa: E402

# Runs as every child: names itself, takes GPU memory, says so, sleeps. Keep the
# words that mark sglang out of it: the trainer runs it too and must not look ours.
HOLD = r"""
import ctypes, os, signal, sys, time
name, gib, ready, orphan, sim = sys.argv[1:6]
gib = float(gib)
ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME: ps -o comm, top
if orphan == "1":
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
keep = None
if gib > 0 and sim != "1":
    n = int(gib * 2**30)
    try:
        import torch
        keep = torch.empty(n, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
    except ImportError:
        import cupy
        keep = cupy.empty(n, dtype=cupy.uint8)
        cupy.cuda.runtime.deviceSynchronize()
with open(ready + ".tmp", "w") as fh:
    fh.write(str(os.getpid()))
os.rename(ready + ".tmp", ready)
while True:
    time.sleep(3600)
"""

# The launcher: listens on the port, starts TP0 and the detokenizer as children and
# the orphan through a double fork, like a server that lost track of a rank.
LAUNCHER = r"""
import os, socket, sys, time
port, gib, d, sim, hold = sys.argv[-5:]
py, env = sys.executable or os.environ["PROOF_PYTHON"], dict(os.environ)
def child(title, g, orphan):
    ready = os.path.join(d, title.replace(":", "_") + ".ready")
    argv = [title, "-c", hold, title, g, ready, orphan, sim]
    os.execve(py, argv, env)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(port))); s.listen()
for title, g in (("sglang::scheduler_TP0", gib), ("sglang::detokenizer", "0")):
    if os.fork() == 0:
        child(title, g, "0")
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        child("sglang::scheduler_TP1", gib, "1")
    os._exit(0)
os.waitpid(pid, 0)
while True:
    time.sleep(3600)
"""


class Runner:
    """kill_stale needs only a launch record (LocalRunner would pull in pydantic)."""

    def __init__(self, workdir: Path) -> None:
        self.state = LaunchState(workdir / "launched.json")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(gpu: int) -> dict[str, str]:
    env = dict(os.environ, PROOF_PYTHON=sys.executable, CUDA_DEVICE_ORDER="PCI_BUS_ID")
    env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def wait_files(paths: list[Path], timeout_s: float) -> dict[str, int]:
    end = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        if time.monotonic() > end:
            missing = [p.name for p in paths if not p.exists()]
            raise SystemExit(f"FAIL: not ready after {timeout_s:.0f}s: {missing}")
        time.sleep(0.1)
    return {p.name.removesuffix(".ready"): int(p.read_text()) for p in paths}


def start_trainer(d: Path, gpu: int, gib: float, sim: bool) -> tuple[subprocess.Popen, str]:
    """The foreign GPU user: another uid when we are root, else just not sglang-named."""
    for uid in ([65534] if os.getuid() == 0 else []) + [None]:
        ready = d / f"trainer-{uid}.ready"
        argv = ["trainer", "-c", HOLD, "trainer", str(gib), str(ready), "0", "1" if sim else "0"]
        preexec = (lambda u=uid: os.setuid(u)) if uid is not None else None
        try:
            proc = subprocess.Popen(
                argv, executable=sys.executable, env=child_env(gpu), start_new_session=True,
                preexec_fn=preexec,
            )  # fmt: skip
        except OSError as exc:  # nobody may not read this python (e.g. under /root)
            print(f"  trainer as uid {uid} did not start ({exc}); trying the next way")
            continue
        end = time.monotonic() + 120
        while not ready.exists() and proc.poll() is None and time.monotonic() < end:
            time.sleep(0.1)
        if ready.exists():
            return proc, "nobody" if uid is not None else "this user (not sglang-named)"
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        print(f"  trainer as uid {uid} could not take GPU memory; trying the next way")
    raise SystemExit("FAIL: could not start the foreign trainer")


class Sampler(threading.Thread):
    """nvidia-smi memory.used of the target GPU every ~50 ms, for the timeline."""

    def __init__(self, exe: str, gpu: int) -> None:
        super().__init__(daemon=True)
        self.exe, self.gpu = exe, gpu
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            used = memory_used(self.exe, [self.gpu]).get(self.gpu, -1)
            self.samples.append((time.monotonic() - self.t0, used))
            time.sleep(0.05)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_ours(d: Path, port: int, gpu: int, gib: float, sim: bool) -> tuple[int, dict[str, int]]:
    """Our stale server: (launcher pid, {title: pid}) once every rank holds its memory."""
    if sim:
        env = dict(os.environ, SPECSWEEP_SIM_ORPHAN="1", SPECSWEEP_SIM_TIME_SCALE="0.05")
        env.update(SPECSWEEP_SIM_LOAD_SECONDS="0.3", SPECSWEEP_SIM_WARMUP_SECONDS="0.3")
        argv = [sys.executable, "-m", "specsweep.sim.launch_server", "--model-path", "sim/llama"]
        argv += ["--tp", "2", "--port", str(port)]
        log = (d / "sim.log").open("wb")
        proc = subprocess.Popen(argv, env=env, start_new_session=True, stdout=log, stderr=log)
        end = time.monotonic() + 30
        while not any(c.laddr.port == port for c in psutil.net_connections("tcp")):
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"FAIL: simulated server did not come up, see {d / 'sim.log'}")
            time.sleep(0.05)
        kids = psutil.Process(proc.pid).children()
        return proc.pid, {" ".join(" ".join(k.cmdline()).split()): k.pid for k in kids}
    argv = [sys.executable, "-c", LAUNCHER, "sglang.launch_server", "--port", str(port)]
    argv += [str(port), str(gib), str(d), "0", HOLD]
    proc = subprocess.Popen(argv, env=child_env(gpu), start_new_session=True)
    titles = ["sglang::scheduler_TP0", "sglang::detokenizer", "sglang::scheduler_TP1"]
    ready = wait_files([d / (t.replace(":", "_") + ".ready") for t in titles], 180)
    return proc.pid, {t: ready[t.replace(":", "_")] for t in titles}


def show(report: CleanupReport) -> None:
    for line in report.summary().splitlines():
        print("   ", line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpu", type=int, default=0, help="target GPU index (nvidia-smi's)")
    ap.add_argument("--gib", type=float, default=16.0, help="GiB per scheduler")
    ap.add_argument("--trainer-gib", type=float, default=8.0, help="GiB held by the trainer")
    ap.add_argument("--grace", type=float, default=3.0, help="SIGTERM grace seconds")
    ap.add_argument("--simulate", action="store_true", help="simulator and nvidia-smi stand-in")
    ns = ap.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]
    logging.basicConfig(
        stream=sys.stdout, level=logging.INFO, format="    [%(relativeCreated)7.0fms] %(message)s"
    )
    d = Path(tempfile.mkdtemp(prefix="cleanup-proof-"))
    d.chmod(0o777)  # the trainer may run as nobody and writes its ready file here
    if ns.simulate:
        from specsweep.sim.gpu_inventory import Inventory
        from specsweep.sim.nvidia_smi import BIN_DIR

        os.environ["SPECSWEEP_SIM_GPU_STATE"] = str(d / "gpus")
        os.environ["SPECSWEEP_SIM_PYTHON"] = sys.executable
        os.environ["PATH"] = f"{BIN_DIR}{os.pathsep}{os.environ['PATH']}"
        inv = Inventory(d / "gpus")
        inv.ensure("NVIDIA H200", 2, 143771)
    exe = find_nvidia_smi()
    if exe is None:
        print("FAIL: no nvidia-smi on PATH (use --simulate on a machine without GPUs)")
        return 1
    gpus = [0, 1] if ns.simulate else [ns.gpu]
    gpu = gpus[0]
    print(f"nvidia-smi: {exe}; target GPUs {gpus}; workdir {d}")
    print(f"  before anything: memory.used {memory_used(exe, gpus)} MiB")
    started: list[int] = []
    failures: list[str] = []
    try:
        trainer, trainer_user = start_trainer(d, gpu, ns.trainer_gib, ns.simulate)
        started.append(trainer.pid)
        trainer_mib = round(ns.trainer_gib * 1024)
        if ns.simulate:
            inv.allocate(trainer.pid, gpu, trainer_mib, release_s=0.3, name="trainer")
        with_trainer = memory_used(exe, gpus)
        port = free_port()
        launcher, ranks = start_ours(d, port, gpu, ns.gib, ns.simulate)
        ours = [launcher, *ranks.values()]
        started += ours
        print(f"  foreign: trainer pid {trainer.pid} as {trainer_user}, {trainer_mib} MiB")
        print(f"  ours: launcher pid {launcher} on port {port}; ranks {ranks}")
        print(f"  memory.used now {memory_used(exe, gpus)} MiB")
        runner = Runner(d)

        snap = query(exe)
        hidden = snap is not None and snap.pids_hidden(gpus, 1024)
        limit = None
        if hidden:  # a container: nvidia-smi cannot name the trainer, so A cannot hold
            limit = max(with_trainer.values()) + 1024
            print(f"A) skipped: nvidia-smi lists no PIDs (container); B uses max_used_mib={limit}")
        else:
            print("A) kill_stale(port, gpus) must refuse, naming the trainer, and signal nothing")
            try:
                kill_stale(runner, port, gpus=gpus, grace_s=ns.grace)
                failures.append("A: no StaleProcessError although a foreign process holds the GPU")
            except StaleProcessError as exc:
                print(f"    StaleProcessError: {str(exc)[:400]}")
                if f"pid {trainer.pid}" not in str(exc):
                    failures.append("A: the error does not name the trainer")
            dead = [pid for pid in [trainer.pid, *ours] if not alive(pid)]
            if dead:
                failures.append(f"A: processes died although nothing may be signalled: {dead}")

        print("B) kill_stale(..., tolerate_foreign_gpu=True): ours die, the trainer stays")
        sampler = Sampler(exe, gpu)
        sampler.start()
        t0 = time.monotonic()
        report = kill_stale(
            runner, port, gpus=gpus, grace_s=ns.grace, tolerate_foreign_gpu=True,
            max_used_mib=limit, memory_timeout_s=60,
        )  # fmt: skip
        took = time.monotonic() - t0
        time.sleep(0.5)
        sampler.stop.set()
        sampler.join()
        show(report)
        survivors = [pid for pid in ours if alive(pid)]
        if survivors:
            failures.append(f"B: ours survived: {survivors}")
        missed = set(ours) - set(report.killed_pids)
        if missed - {p for p in ours if not alive(p)} or not set(report.killed_pids) & set(ours):
            failures.append(f"B: the report does not list ours as killed: {missed}")
        if not alive(trainer.pid):
            failures.append("B: the foreign trainer was killed")
        after = memory_used(exe, gpus)
        if any(after[g] > report.memory_limit[g] for g in gpus):
            failures.append(f"B: memory {after} over the limit {report.memory_limit}")
        release = f"{report.release_s:.2f}s" if report.release_s is not None else "-"
        print(f"    kill_stale took {took:.2f}s; memory under the limit {release} after the kills")
        print(f"    timeline (s since kill_stale began, memory.used MiB on GPU {gpu}):")
        last = None
        for t, used in sampler.samples:
            if used != last:
                print(f"      {t:7.3f}  {used}")
                last = used

        print("C) stop_server on a running server: its group, what it left outside, its memory")
        port = free_port()
        fresh = d / "c"  # its own ready files: B's still name B's (dead) processes
        fresh.mkdir()
        launcher, ranks = start_ours(fresh, port, gpu, ns.gib, ns.simulate)
        ours = [launcher, *ranks.values()]
        started += ours
        outside = [pid for pid in ours if os.getpgid(pid) != launcher]  # a group kill misses
        print(f"    ours: launcher {launcher}, ranks {ranks}; outside its group: {outside}")
        handle = ServerHandle(
            launcher, launcher, psutil.Process(launcher).create_time(), port,
            d / "launcher.log", "gpu_cleanup_proof", datetime.now(UTC),
        )  # fmt: skip
        t0 = time.monotonic()
        td = stop_server(
            handle, gpus, memory_limit=report.memory_limit or None, grace_s=ns.grace,
            memory_timeout_s=60,
        )  # fmt: skip
        print(f"    {td.summary()} (stop_server took {time.monotonic() - t0:.2f}s)")
        if survivors := [pid for pid in ours if alive(pid)]:
            failures.append(f"C: ours survived the teardown: {survivors}")
        if not outside or not set(outside) <= set(td.leftover_pids):
            failures.append(f"C: left-behind {outside} not all in {td.leftover_pids}")
        if not alive(trainer.pid):
            failures.append("C: the foreign trainer was killed")
        if td.release_s is None:
            failures.append(f"C: GPU memory not back: {td.memory_after}, held by {td.holders}")
    finally:
        for pid in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(pid).send_signal(signal.SIGKILL)
        if not ns.simulate or not failures:
            shutil.rmtree(d, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("PASS" if not failures else f"FAILED ({len(failures)})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
