"""Independent reference load clients, in their own virtualenv, and how to run them.

The reference clients are SGLang's own benchmark clients from the ``sglang`` wheel on
PyPI (pinned in ``refclients-requirements.txt``), installed by
``tests/protocol/setup_refclients.sh`` into ``.refclients/sglang/`` (never into the
project's ``.venv``, never into ``uv.lock``):

``python``
    ``python -m sglang.bench_serving`` (``sglang.benchmark.serving``), the asyncio
    client every SGLang benchmark quotes.
``rust``
    ``python -m sglang.benchmark.rust_client``, its Rust port bundled in the same
    wheel (same flags, same result keys, stream parsing on Tokio worker threads).

Both run through ``sglang_bench_entry.py``, which only skips the torch-importing
package ``__init__`` files (see there). Everything here uses the standard library
only, so the test suite (``tests/protocol``) and ``benchmarks/refclients.py`` share
it without the reference environment's packages.

``SPECSWEEP_REFCLIENTS_DIR`` overrides where the environments live (default
``<repo>/.refclients``). A missing environment skips the test, or fails it where
``SPECSWEEP_REQUIRE_REFCLIENTS=1`` / ``SPECSWEEP_REQUIRE_ALL=1`` (CI): see tests/needs.py.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
ENTRY = HERE / "sglang_bench_entry.py"
MAKE_TOKENIZER = HERE / "make_tokenizer.py"
SETUP_SCRIPT = HERE / "setup_refclients.sh"
REQUIREMENTS = HERE / "refclients-requirements.txt"

ENV_DIR = "SPECSWEEP_REFCLIENTS_DIR"
CLIENT_KINDS = ("python", "rust")
# A loopback server is never reached through a proxy (``requests`` honours *_PROXY).
_NO_PROXY = "127.0.0.1,localhost,::1"
# Filler that stub servers emit (benchmarks/stub_server.py): also one token each.
_COMMON_WORDS = ("the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "was", "with",
                 "as", "at", "by")  # fmt: skip


class RefEnvMissing(RuntimeError):
    """The reference environment is not installed (or not usable)."""


def refclients_dir() -> Path:
    raw = os.environ.get(ENV_DIR, "").strip()
    return Path(raw).expanduser().resolve() if raw else REPO_ROOT / ".refclients"


def setup_command() -> str:
    return f"bash {shlex.quote(str(SETUP_SCRIPT.relative_to(REPO_ROOT)))}"


@dataclass(frozen=True)
class SglangEnv:
    """The installed ``sglang`` reference environment."""

    root: Path
    python: Path
    version: str

    def run(
        self,
        args: Sequence[str],
        *,
        timeout_s: float,
        cwd: Path | None = None,
        cpus: Sequence[int] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run the environment's interpreter with a clean, offline, proxy-free environment.

        ``cpus``: pin the process (and its threads) to these CPUs.
        """
        pin = None
        if cpus:
            chosen = set(cpus)

            def pin() -> None:
                os.sched_setaffinity(0, chosen)

        return subprocess.run(
            [str(self.python), *args],
            cwd=cwd,
            env=client_environ(),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            start_new_session=True,  # a timeout kill cannot hit the caller's group
            preexec_fn=pin,
        )


def client_environ() -> dict[str, str]:
    """The caller's environment minus anything that could make a client leave the machine."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.lower().endswith("_proxy") and not k.startswith(("PYTHON", "VIRTUAL_ENV"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        NO_PROXY=_NO_PROXY,
        no_proxy=_NO_PROXY,
        PYTHONUNBUFFERED="1",
        PYTHONWARNINGS="ignore",
        TOKENIZERS_PARALLELISM="false",
    )
    env.pop("SGLANG_IS_IN_CI", None)  # would make the client POST /flush_cache
    return env


def find_sglang_env() -> SglangEnv:
    """The reference environment, or raise RefEnvMissing saying how to install it."""
    root = refclients_dir() / "sglang"
    python = root / "bin" / "python"
    hint = f"reference clients not installed: run `{setup_command()}` (creates {root})"
    if not python.exists():
        raise RefEnvMissing(f"{hint}; {python} does not exist")
    stamp = root / ".specsweep-complete"
    if not stamp.exists():
        raise RefEnvMissing(f"{hint}; {root} is incomplete (no {stamp.name})")
    first = (stamp.read_text().splitlines() or ["sglang unknown"])[0]
    version = first.removeprefix("sglang ").strip() or "unknown"
    return SglangEnv(root=root, python=python, version=version)


def default_words() -> list[str]:
    """Words that must each be one token: the simulator's filler output and the stub's."""
    words: set[str] = set()
    try:
        from specsweep.sim.engine import token_text

        words |= {token_text(i).strip() for i in range(4096)}
    except ImportError:  # pragma: no cover - the simulator is part of the project
        pass
    words |= set(_COMMON_WORDS)
    return sorted(w for w in words if w and len(w.split()) == 1)


def build_tokenizer(
    env: SglangEnv, out_dir: Path, words: Iterable[str] | None = None, vocab_size: int = 32000
) -> Path:
    """A local word-level tokenizer directory (``AutoTokenizer.from_pretrained(out_dir)``)."""
    out_dir = Path(out_dir)
    if (out_dir / "tokenizer.json").exists():
        return out_dir
    word_list = sorted(set(words)) if words is not None else default_words()
    proc = env.run(
        [str(MAKE_TOKENIZER), str(out_dir), json.dumps(word_list), "--vocab-size", str(vocab_size)],
        timeout_s=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"building the tokenizer failed:\n{proc.stderr[-3000:]}")
    return out_dir


@dataclass(frozen=True)
class BenchSpec:
    """One closed-loop run: ``num_prompts`` requests, ``concurrency`` in flight at most."""

    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    warmup_requests: int = 1
    seed: int = 1
    output_details: bool = True  # per-request columns in the result line
    extra_args: tuple[str, ...] = ()


@dataclass
class BenchRun:
    """What one reference-client run printed and wrote."""

    client: str
    argv: list[str]
    result: dict[str, Any]
    wall_s: float  # the whole process, start-up (imports, tokenizer, warmup) included
    cpu_s: float  # CPU time of the process, start-up included
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)

    @property
    def summary(self) -> dict[str, Any]:
        """The result line without the per-request columns and the server's info."""
        skip = {"input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"}
        return {k: v for k, v in self.result.items() if k not in skip | {"server_info"}}


def bench_args(
    base_url: str, spec: BenchSpec, output_file: Path, tokenizer_dir: Path | None
) -> list[str]:
    """Flags for either client: fixed lengths, input ids, rate inf, bounded concurrency."""
    args = [
        "--backend",
        "sglang",
        "--base-url",
        base_url.rstrip("/"),
        "--dataset-name",
        "random-ids",  # random token ids: no ShareGPT download
        "--tokenize-prompt",  # send input_ids, so the prompt length is exact
        "--random-input-len",
        str(spec.input_len),
        "--random-output-len",
        str(spec.output_len),
        "--random-range-ratio",
        "1.0",
        "--num-prompts",
        str(spec.num_prompts),
        "--max-concurrency",
        str(spec.concurrency),
        "--request-rate",
        "inf",
        "--warmup-requests",
        str(spec.warmup_requests),
        "--seed",
        str(spec.seed),
        "--ready-check-timeout-sec",
        "0",
        "--model",
        "reference-client",
        "--disable-tqdm",
        "--output-file",
        str(output_file),
    ]
    if spec.output_details:
        args.append("--output-details")
    if tokenizer_dir is not None:
        args += ["--tokenizer", str(tokenizer_dir)]
    return args + list(spec.extra_args)


def run_bench(
    env: SglangEnv,
    client: str,
    base_url: str,
    spec: BenchSpec,
    work_dir: Path,
    *,
    tokenizer_dir: Path | None = None,
    timeout_s: float = 300.0,
    cpus: Sequence[int] | None = None,
) -> BenchRun:
    """Run one reference client against ``base_url``; parse its ``--output-file`` line.

    The Python client needs a tokenizer (built here when ``tokenizer_dir`` is None);
    the Rust client runs without one (``--vocab-size``), its retokenized totals are 0.
    """
    if client not in CLIENT_KINDS:
        raise ValueError(f"unknown reference client {client!r}; known: {CLIENT_KINDS}")
    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    out = work_dir / f"{client}-{time.monotonic_ns()}.jsonl"
    tok = tokenizer_dir
    if client == "python" and tok is None:
        tok = build_tokenizer(env, work_dir / "tokenizer")
    argv = [str(ENTRY), client, *bench_args(base_url, spec, out, tok)]
    if client == "rust" and tok is None:
        argv += ["--vocab-size", "32000", "--disable-retokenize"]
    start = time.perf_counter()
    kids0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = env.run(argv, timeout_s=timeout_s, cwd=work_dir, cpus=cpus)
    except subprocess.TimeoutExpired as exc:
        raise RuntimeError(f"{client} reference client timed out after {timeout_s:g}s") from exc
    wall = time.perf_counter() - start
    kids1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (kids1.ru_utime + kids1.ru_stime) - (kids0.ru_utime + kids0.ru_stime)
    tail = f"\n--- stdout ---\n{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}"
    if proc.returncode != 0:
        raise RuntimeError(f"{client} reference client exited {proc.returncode}{tail}")
    lines = out.read_text().splitlines() if out.exists() else []
    if not lines:
        raise RuntimeError(f"{client} reference client wrote no result line to {out}{tail}")
    return BenchRun(
        client=client,
        argv=[str(env.python), *argv],
        result=json.loads(lines[-1]),
        wall_s=wall,
        cpu_s=cpu,
        stdout=proc.stdout,
        stderr=proc.stderr,
    )
