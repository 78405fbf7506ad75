"""Reference load clients for ``benchmarks/loadgen_ceiling.py``: SGLang's own clients.

``CLIENTS`` maps a name to a function that runs one closed-loop measurement with an
independent client, as a subprocess of the reference environment
(``.refclients/sglang``, installed by ``bash tests/protocol/setup_refclients.sh``):

``sglang-bench-serving``
    ``python -m sglang.bench_serving`` from the ``sglang`` wheel (one asyncio thread;
    a new HTTP connection per request, as that client does).
``sglang-bench-rust``
    the wheel's Rust port (``python -m sglang.benchmark.rust_client``; Tokio worker
    threads, as many as the CPUs it may use).

Each is called as ``fn(base_url, concurrency, num_requests, input_len, output_len)``
(or ``fn(case)`` with an object carrying ``url``, ``concurrency``, ``num_requests``,
``input_len``, ``output_len`` and optionally ``cpus`` to pin the client to) and sends
``num_requests`` requests of exactly ``input_len`` prompt ids and ``output_len``
output tokens, at most ``concurrency`` in flight, after ``concurrency`` warmup
requests. It returns the numbers the client itself wrote to its ``--output-file``::

    {"tokens_per_s": output tokens/s, "requests_per_s": requests/s,
     "wall_s": the client's measured duration (warmup and start-up excluded),
     "raw": the client's result line (per-request columns left out) plus
            "process_wall_s"/"process_cpu_s" of the whole subprocess,
     "tok_s", "req_s", "note": the same, as loadgen_ceiling's table reads them}

A missing environment raises ``RefEnvMissing`` (with the setup command) when a
client is called, so the ceiling table shows why the row is empty.

    .venv/bin/python benchmarks/refclients.py URL [C N IN OUT]   # one quick run of each
"""

from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

_REPO = Path(__file__).resolve().parents[1]


def _load_refenv() -> ModuleType:
    """tests/protocol/refenv.py, the one place that finds and runs the reference env."""
    try:
        from tests.protocol import refenv  # type: ignore[import-not-found]

        return refenv
    except ImportError:
        pass
    path = _REPO / "tests" / "protocol" / "refenv.py"
    spec = importlib.util.spec_from_file_location("specsweep_refenv", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


refenv = _load_refenv()
RefEnvMissing = refenv.RefEnvMissing
ClientFn = Callable[..., dict[str, Any]]

_scratch: Path | None = None


def _scratch_dir() -> Path:
    """One temporary directory per process (tokenizer, result files), removed at exit."""
    global _scratch
    if _scratch is None:
        _scratch = Path(tempfile.mkdtemp(prefix="specsweep-refclients-"))
        atexit.register(shutil.rmtree, _scratch, True)
    return _scratch


def _unpack(args: tuple[Any, ...], cpus: Sequence[int] | None) -> tuple[Any, ...]:
    if len(args) == 1:  # a Case-like object
        case = args[0]
        return (
            str(case.url),
            int(case.concurrency),
            int(case.num_requests),
            int(case.input_len),
            int(case.output_len),
            cpus if cpus is not None else getattr(case, "cpus", None),
        )
    if len(args) != 5:
        raise TypeError("call with (base_url, concurrency, num_requests, input_len, output_len)")
    base_url, c, n, input_len, output_len = args
    return str(base_url), int(c), int(n), int(input_len), int(output_len), cpus


def _make(kind: str, label: str) -> ClientFn:
    def run(*args: Any, cpus: Sequence[int] | None = None, timeout_s: float = 1800.0) -> dict:
        base_url, c, n, input_len, output_len, pin = _unpack(args, cpus)
        env = refenv.find_sglang_env()
        work = _scratch_dir()
        tok = refenv.build_tokenizer(env, work / "tokenizer") if kind == "python" else None
        spec = refenv.BenchSpec(
            concurrency=c,
            num_prompts=n,
            input_len=input_len,
            output_len=output_len,
            warmup_requests=c,
            output_details=False,  # per-token ITL lists get large at high concurrency
        )
        run_ = refenv.run_bench(
            env, kind, base_url, spec, work, tokenizer_dir=tok, timeout_s=timeout_s, cpus=pin
        )
        result = run_.summary
        tok_s = float(result["output_throughput"])
        req_s = float(result["request_throughput"])
        failed = n - int(result["completed"])
        note = f"sglang {env.version} {label}" + (f", {failed} failed" if failed else "")
        raw = {**result, "process_wall_s": run_.wall_s, "process_cpu_s": run_.cpu_s}
        return {
            "tokens_per_s": tok_s,
            "requests_per_s": req_s,
            "wall_s": float(result["duration"]),
            "raw": raw,
            "tok_s": tok_s,
            "req_s": req_s,
            "note": note,
        }

    run.__name__ = f"run_{kind}"
    run.__doc__ = f"One closed-loop run of sglang's {label} (see the module docstring)."
    return run


CLIENTS: dict[str, ClientFn] = {
    "sglang-bench-serving": _make("python", "bench_serving"),
    "sglang-bench-rust": _make("rust", "rust client"),
}


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit(f"usage: {sys.argv[0]} BASE_URL [CONCURRENCY N INPUT_LEN OUTPUT_LEN]")
    base_url = args[0]
    c, n, input_len, output_len = (int(x) for x in (args[1:] or ["16", "64", "16", "64"]))
    for name, fn in CLIENTS.items():
        got = fn(base_url, c, n, input_len, output_len)
        print(
            f"{name:<22} {got['tokens_per_s']:>10,.0f} tok/s {got['requests_per_s']:>8,.1f} req/s "
            f"{got['wall_s']:>6.2f} s  (process {got['raw']['process_wall_s']:.1f} s)  "
            f"{got['note']}"
        )


if __name__ == "__main__":
    main()
