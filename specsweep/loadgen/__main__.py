"""Run one level and print JSON lines: ``python -m specsweep.loadgen --base-url URL ...``.

For running the load generator on the GPU host itself (over SSH), so the
network between the caller and the server is not part of the measurement. On
stdout: ``{"event": "progress", "done": n, "total": m}`` lines (at most ten a
second), then one ``{"event": "result", ...}`` line that ``parse_result_line``
turns back into a ``LevelResult``. Logs go to stderr. Exit status: 0 when the
level ran (even if its requests failed: the result says so), 2 for bad input,
1 when the load generator itself failed (an ``{"event": "error"}`` line says why).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from time import monotonic

from pydantic import ValidationError

from specsweep.config import LoadSpec
from specsweep.loadgen.http import split_url
from specsweep.loadgen.runner import resolve_workers, run_level_sync
from specsweep.loadgen.wire import parse_drift, progress_line, result_line

EXIT_BAD_INPUT = 2
_PROGRESS_EVERY_S = 0.1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specsweep.loadgen", description=__doc__)
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:30000")
    p.add_argument("--concurrency", type=int, required=True)
    src = p.add_mutually_exclusive_group()
    src.add_argument("--load", help="LoadSpec as JSON (default: all defaults)")
    src.add_argument("--load-file", type=Path, help="file holding the LoadSpec as JSON")
    p.add_argument("--workers", type=int, default=None, help="processes (default: 1 or $env)")
    p.add_argument(
        "--drift", help='the run\'s measured drift, {"sd": ..., "df": ..., "source": ...}'
    )
    return p


def _emit(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def _bad_input(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed why
        return EXIT_BAD_INPUT if exc.code else 0
    try:
        raw = args.load_file.read_text() if args.load_file else (args.load or "{}")
        load = LoadSpec.model_validate_json(raw)
        split_url(args.base_url)
        workers = resolve_workers(args.workers)
        drift = parse_drift(args.drift) if args.drift else None
        if args.concurrency < 1:
            raise ValueError(f"--concurrency must be >= 1, got {args.concurrency}")
    except ValidationError as exc:
        return _bad_input(f"invalid load spec: {exc}")
    except (OSError, ValueError) as exc:  # WireError is a ValueError
        return _bad_input(str(exc))
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(message)s")

    last = [float("-inf")]  # monotonic counts from boot: 0.0 would hold back the first

    def progress(done: int, total: int) -> None:
        now = monotonic()
        if done == total or now - last[0] >= _PROGRESS_EVERY_S:
            last[0] = now
            _emit(progress_line(done, total))

    try:
        result = run_level_sync(
            args.base_url, args.concurrency, load, on_progress=progress, workers=workers,
            drift=drift,
        )  # fmt: skip
    except Exception as exc:  # report, so the caller is not left with a bare traceback
        import orjson

        _emit(orjson.dumps({"event": "error", "message": f"{type(exc).__name__}: {exc}"}) + b"\n")
        logging.getLogger(__name__).exception("the load generator failed")
        return 1
    _emit(result_line(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
