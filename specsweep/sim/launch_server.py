"""``python -m specsweep.sim.launch_server``: the simulated ``sglang.launch_server``.

Same argv as sglang, same observable life cycle, because specsweep's launch, health
waiting, log tailing and teardown are tested against it:

1. parse flags (unknown flag: usage, exit 2); apply sglang's speculative rules
   (AssertionError/ValueError: traceback in the log, exit 1);
2. load (port closed): ``Load weight begin/end``, ``KV Cache is allocated``,
   ``Capture cuda graph begin/end`` (+ draft graphs with speculation);
3. bind the HTTP port; internal warmup (``/health`` 503), then
   ``The server is fired up and ready to roll!`` (``/health`` 200);
4. serve until SIGTERM/SIGINT, then stop within a fraction of a second, exit 0.

``SPECSWEEP_SIM_CRASH`` makes a phase die with a realistic error and exit status 1.
Timing knobs: see ``specsweep.sim.knobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from specsweep.sim import SIM_SGLANG_VERSION
from specsweep.sim.engine import Engine, SimRequest
from specsweep.sim.http_app import ServerState, UvicornStyleAccessLogger, build_app
from specsweep.sim.knobs import SimKnobs
from specsweep.sim.perf_model import get_profile
from specsweep.sim.server_args import parse_args, resolve_server_args, spec_config_from_args

logger = logging.getLogger("sglang.srt.entrypoints.http_server")
raw_logger = logging.getLogger("uvicorn.error")  # uvicorn-style lines, no prefix
access_logger = logging.getLogger("uvicorn.access")
_TP0 = {"tp": " TP0"}

_SCHED_TB = (
    "Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", '
    "line 2761, in run_scheduler_process\n"
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
    "dp_rank)\n"
)
_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
    "total capacity of 139.81 GiB of which 1.02 GiB is free. Including non-PyTorch memory, "
    "this process has 138.77 GiB memory in use. Of the allocated memory 131.20 GiB is "
    "allocated by PyTorch, and 4.31 GiB is reserved by PyTorch but unallocated."
)
_CRASH_TEXT = {
    "load": _SCHED_TB + '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/'
    'model_runner.py", line 806, in load_model\n'
    "    self.model = get_model(\n" + _OOM,
    "warmup": "Initialization failed. warmup error: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/entrypoints/http_server.py", '
    "line 1432, in _execute_server_warmup\n"
    "    res = requests.post(url + request_name, json=json_data, headers=headers, timeout=600)\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "serve": "Scheduler hit an exception: "
    + _SCHED_TB.replace("run_scheduler_process", "event_loop_normal", 1)
    + _OOM,
}


class _Formatter(logging.Formatter):
    """sglang's ``[time TP0] message`` prefix; uvicorn lines are left bare."""

    def format(self, record: logging.LogRecord) -> str:
        if record.name.startswith("uvicorn"):
            return record.getMessage()
        stamp = self.formatTime(record, "%Y-%m-%d %H:%M:%S")
        return f"[{stamp}{getattr(record, 'tp', '')}] {record.getMessage()}"


def _setup_logging(level: str, level_http: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)  # flushes after every record
    handler.setFormatter(_Formatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    access_logger.setLevel(getattr(logging, (level_http or level).upper(), logging.INFO))


def _crash(phase: str) -> None:
    """Die like a real failure in ``phase``: error lines in the log, exit status 1."""
    text = _CRASH_TEXT[phase]
    if phase == "warmup":
        logger.error(text)
    else:
        logger.error(text, extra=_TP0)
        logger.error("Received sigquit from a child process. It usually means the child failed.")
    for h in logging.getLogger().handlers:
        h.flush()
    sys.stdout.flush()
    os._exit(1)


class SimServer:
    """One simulated server process: startup phases, HTTP site, shutdown."""

    def __init__(self, args: dict[str, Any], knobs: SimKnobs) -> None:
        self.args = args
        self.knobs = knobs
        self.profile = get_profile(knobs.profile)
        self.spec = spec_config_from_args(args)
        seed = knobs.seed if knobs.seed is not None else int(args["random_seed"])
        mrr = args["max_running_requests"] or self.profile.default_max_running_requests
        self.engine = Engine(
            self.profile,
            self.spec,
            max_running_requests=mrr,
            time_scale=knobs.time_scale,
            seed=seed,
            overlap=not args["disable_overlap_schedule"],
            chunked_prefill_size=int(args["chunked_prefill_size"]),
            max_total_num_tokens=args["max_total_tokens"] or self.profile.max_total_num_tokens,
            decode_log_interval=int(args["decode_log_interval"]),
            log=lambda msg: logger.info(msg, extra=_TP0),
        )
        self.state = ServerState(args, self.engine, SIM_SGLANG_VERSION, knobs.health_seconds)
        self.state.extra_info = {
            "sim_profile": self.profile.name,
            "sim_time_scale": knobs.time_scale,
        }
        self.runner: web.AppRunner | None = None

    async def _phase_sleep(self, phase: str, start: float, seconds: float) -> None:
        """Sleep; die at ``start + crash_after_s`` when this phase is the crash phase."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        if self.knobs.crash == phase:
            crash_at = start + self.knobs.crash_after_s
            if crash_at <= end:
                await asyncio.sleep(max(0.0, crash_at - loop.time()))
                _crash(phase)
        await asyncio.sleep(max(0.0, end - loop.time()))

    async def load(self) -> None:
        """Weights, KV cache, CUDA graphs; the port stays closed."""
        start = asyncio.get_running_loop().time()
        total = self.knobs.load_seconds
        arch = _architecture(str(self.args["model_path"]))
        tp = lambda msg: logger.info(msg, extra=_TP0)  # noqa: E731
        steps: list[tuple[float, str]] = [
            (0.05, "Init torch distributed begin."),
            (0.0, "Init torch distributed ends. mem usage=0.00 GB"),
            (0.0, "Load weight begin. avail mem=138.12 GB"),
            (0.5, f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem=72.35 GB, "
                  "mem usage=65.77 GB."),
            (0.05, f"KV Cache is allocated. #tokens: {self.engine.max_total_num_tokens}, "
                   "K size: 24.41 GB, V size: 24.41 GB"),
            (0.0, "Capture cuda graph begin. This can take up to several minutes. "
                  "avail mem=22.91 GB"),
            (0.3, f"Capture cuda graph end. Time elapsed: {0.3 * total:.2f} s. "
                  "mem usage=0.61 GB. avail mem=22.30 GB."),
        ]  # fmt: skip
        if self.spec is not None:
            steps += [
                (0.0, "Load weight begin. avail mem=22.30 GB"),
                (0.04, "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
                       "avail mem=21.10 GB, mem usage=1.20 GB."),
                (0.0, "Capture draft cuda graph begin. This can take up to several minutes. "
                      "avail mem=21.10 GB"),
                (0.03, f"Capture draft cuda graph end. Time elapsed: {0.03 * total:.2f} s. "
                       "mem usage=0.20 GB."),
                (0.0, "Capture draft extend cuda graph begin. This can take up to several "
                      "minutes. avail mem=20.90 GB"),
                (0.03, f"Capture draft extend cuda graph end. Time elapsed: {0.03 * total:.2f} s. "
                       "mem usage=0.15 GB."),
            ]  # fmt: skip
        weight = sum(w for w, _ in steps) or 1.0
        for w, msg in steps:
            await self._phase_sleep("load", start, total * w / weight)
            tp(msg)
        tp(
            f"max_total_num_tokens={self.engine.max_total_num_tokens}, "
            f"chunked_prefill_size={self.args['chunked_prefill_size']}, "
            f"max_prefill_tokens={self.args['max_prefill_tokens']}, "
            f"max_running_requests={self.engine.max_running_requests}, "
            f"context_len={self.args['context_length'] or 131072}, "
            "available_gpu_mem=20.75 GB"
        )
        if self.knobs.crash == "load":
            _crash("load")

    async def bind(self) -> None:
        """Open the HTTP port (connections are accepted from now on)."""
        app = build_app(self.state)
        self.runner = web.AppRunner(
            app,
            handle_signals=False,
            access_log_class=UvicornStyleAccessLogger,
            access_log=access_logger,
            shutdown_timeout=0.2,
        )
        await self.runner.setup()
        host, port = str(self.args["host"]), int(self.args["port"])
        raw_logger.info(f"INFO:     Started server process [{os.getpid()}]")
        raw_logger.info("INFO:     Waiting for application startup.")
        raw_logger.info("INFO:     Application startup complete.")
        site = web.TCPSite(self.runner, host, port, backlog=2048, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            raw_logger.error(
                f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                f"('{host}', {port}): {exc.strerror}"
            )
            for h in logging.getLogger().handlers:
                h.flush()
            os._exit(1)
        raw_logger.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

    async def warmup(self) -> None:
        """sglang's internal warmup generation; /health answers 503 meanwhile."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        if not self.args["skip_server_warmup"]:
            req = SimRequest(prompt_tokens=6, max_new_tokens=8)
            self.engine.submit(req)
            while not req.finished and not req.aborted:
                await req.event.wait()
                req.event.clear()
            peer = f"{self.args['host']}:{50000 + os.getpid() % 10000}"
            access_logger.info(f'INFO:     {peer} - "GET /get_model_info HTTP/1.1" 200 OK')
            access_logger.info(f'INFO:     {peer} - "POST /generate HTTP/1.1" 200 OK')
            remaining = self.knobs.warmup_seconds - (loop.time() - start)
            await self._phase_sleep("warmup", start, max(0.0, remaining))
        if self.knobs.crash == "warmup":
            _crash("warmup")
        self.state.status = "up"
        logger.info("The server is fired up and ready to roll!")
        if self.knobs.crash == "serve":
            loop.call_later(self.knobs.crash_after_s, _crash, "serve")

    async def startup(self) -> None:
        self.engine.start()
        await self.load()
        await self.bind()
        await self.warmup()

    async def shutdown(self) -> None:
        """Stop serving quickly: abort streams, close the site, bounded waits."""
        self.state.status = "shutting_down"
        raw_logger.info("INFO:     Shutting down")
        await self.engine.stop()
        if self.runner is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.runner.cleanup(), timeout=0.5)
        raw_logger.info("INFO:     Finished server process [%d]", os.getpid())


def _architecture(model_path: str) -> str:
    low = model_path.lower()
    if "kimi" in low or "deepseek" in low:
        return "DeepseekV3ForCausalLM"
    if "qwen" in low:
        return "Qwen3ForCausalLM"
    return "LlamaForCausalLM"


async def _serve(args: dict[str, Any], knobs: SimKnobs) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        logger.info(f"Received {sig.name.lower()}, shutting down.")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    server = SimServer(args, knobs)
    startup = asyncio.create_task(server.startup())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({startup, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if startup.done() and not startup.cancelled() and startup.exception() is not None:
        exc = startup.exception()
        logger.error("".join(traceback.format_exception(exc)))
        return 1
    await stop.wait()
    startup.cancel()
    await asyncio.gather(startup, return_exceptions=True)
    await server.shutdown()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    _setup_logging(ns.log_level, ns.log_level_http)
    try:
        knobs = SimKnobs.from_env()
        get_profile(knobs.profile)
        args, warnings = resolve_server_args(ns)
    except (AssertionError, ValueError, KeyError):
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        return 1
    for line in warnings:
        logger.warning(line)
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    logger.info(f"server_args=ServerArgs({shown})")
    return asyncio.run(_serve(args, knobs))


if __name__ == "__main__":
    sys.exit(main())
