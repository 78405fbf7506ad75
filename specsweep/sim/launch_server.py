"""``python -m specsweep.sim.launch_server``: the simulated ``sglang.launch_server``.

Same argv as sglang, same observable life cycle, because specsweep's launch, health
waiting, log tailing, stale-process cleanup and teardown are tested against it:

1. parse flags as the simulated release knows them (``SPECSWEEP_SIM_SGLANG_VERSION``;
   unknown flag: usage, exit 2); apply sglang's speculative rules, adaptive ones
   included (any error, e.g. a bad adaptive config: traceback in the log, exit 1);
2. start the children (``sglang::scheduler[_TP<r>]`` per rank, ``sglang::detokenizer``),
   each charged GPU memory in the simulated inventory as it loads;
3. load (port closed): ``Load weight begin/end``, ``KV Cache is allocated``,
   ``Capture cuda graph begin/end`` (+ draft graphs with speculation; with adaptive
   speculation ``AdaptiveSpeculativeParams initialized: ...`` after the draft weights and
   one ``Built adaptive runtime state steps=N: ...`` per other candidate step count);
4. bind the HTTP port (a taken port: uvicorn's error, exit 3); internal warmup
   (``/health`` 503), then ``The server is fired up and ready to roll!``;
5. serve until SIGTERM/SIGINT, then stop within a fraction of a second: children
   SIGKILLed and reaped (orphans excepted), exit 0.

Failures die the way sglang dies: the error in the log, the process tree killed and
the launcher SIGKILLing itself. Knobs: ``specsweep.sim.knobs``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import traceback
from collections.abc import Coroutine, Sequence
from typing import Any, NoReturn

from aiohttp import web

from specsweep.sim.adaptive_runtime import runtime_from_args
from specsweep.sim.engine import Engine, SimRequest
from specsweep.sim.faults import Faults
from specsweep.sim.gpu_inventory import Gpu, Inventory, state_dir
from specsweep.sim.http_app import ServerState, UvicornStyleAccessLogger, build_app
from specsweep.sim.knobs import ENV_GPU_STATE, SimKnobs
from specsweep.sim.perf_model import PerfProfile
from specsweep.sim.procs import ProcessTree, log_prefix
from specsweep.sim.profiles import get_profile
from specsweep.sim.server_args import parse_args, resolve_server_args, spec_config_from_args
from specsweep.sim.sglang_logs import (
    SIGQUIT_LINE,
    WARMUP_ERROR,
    access_logger,
    bind_error,
    flush,
    invalid_device,
    logger,
    oom,
    scheduler_exception,
    setup_logging,
)
from specsweep.sim.sglang_logs import uvicorn_logger as uv
from specsweep.sim.version import server_info_version, simulated_version

BUILD_SHARE = 0.05  # of the load time, per adaptive runtime state built
WEIGHTS_SHARE = 0.6  # of a scheduler's static memory, charged at "Load weight end"
STARTUP_FAILURE = 3  # uvicorn's exit status when it cannot bind


class SimServer:
    """One simulated server: its children, startup phases, HTTP site and shutdown."""

    def __init__(self, args: dict[str, Any], knobs: SimKnobs, profile: PerfProfile) -> None:
        self.args = args
        self.knobs = knobs
        self.profile = profile
        self.spec = spec_config_from_args(args)
        seed = knobs.seed if knobs.seed is not None else int(args["random_seed"])
        self.load_s, self.warmup_s, health_s = knobs.durations(
            profile.load_seconds, profile.warmup_seconds, profile.health_seconds
        )
        self.adaptive = runtime_from_args(profile, self.spec, args, seed, self.log_tp)
        self.engine = Engine(
            profile,
            self.spec,
            max_running_requests=args["max_running_requests"]
            or profile.default_max_running_requests,
            time_scale=knobs.time_scale / knobs.gpu_speed,  # a slower host: longer steps
            seed=seed,
            overlap=not args["disable_overlap_schedule"],
            chunked_prefill_size=int(args["chunked_prefill_size"]),
            max_total_num_tokens=args["max_total_tokens"] or profile.max_total_num_tokens,
            decode_log_interval=int(args["decode_log_interval"]),
            log=self.log_tp,
            adaptive=self.adaptive,
        )
        faults = Faults(knobs, seed, self._crash_soon)
        version = server_info_version(knobs.sglang_version)
        self.state = ServerState(args, self.engine, version, health_s, faults)
        self.state.extra_info = {
            "sim_profile": profile.name,
            "sim_time_scale": knobs.time_scale,
            "sim_gpu_speed": knobs.gpu_speed,
        }
        self.inv = Inventory(state_dir({ENV_GPU_STATE: knobs.gpu_state or ""}))
        self.tree = ProcessTree(args, knobs, profile, self.inv)
        self.tp = log_prefix(args)
        self.runner: web.AppRunner | None = None

    def log_tp(self, msg: str) -> None:
        logger.info(msg, extra={"tp": self.tp})

    # --- dying like sglang --------------------------------------------------------
    def crash(self, phase: str, error: str | None = None) -> NoReturn:
        """The failing scheduler's traceback, the launcher's SIGQUIT line, then
        kill_process_tree(own pid): children SIGKILLed, the launcher SIGKILLs itself."""
        if phase == "warmup":
            logger.error(WARMUP_ERROR)
        else:
            logger.error(error or scheduler_exception(phase), extra={"tp": self.tp})
            logger.error(SIGQUIT_LINE)
        flush()
        self.tree.kill()
        os.kill(os.getpid(), signal.SIGKILL)
        raise SystemExit(137)  # not reached

    def _crash_soon(self) -> None:
        """Crash after the current response has been written (crash after N requests)."""
        asyncio.get_running_loop().call_later(0.05, self.crash, "serve")

    async def _phase_sleep(self, phase: str, start: float, seconds: float) -> None:
        """Sleep; die at ``start + crash_after_s`` when this phase is the crash phase."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        crash_at = start + self.knobs.crash_after_s
        if self.knobs.crash == phase and crash_at <= end:
            await asyncio.sleep(max(0.0, crash_at - loop.time()))
            self.crash(phase)
        await asyncio.sleep(max(0.0, end - loop.time()))

    # --- phases -------------------------------------------------------------------
    def _load_steps(self, gpu: Gpu) -> list[tuple[float, str, str]]:
        """(share of the load time, log line, event) for each loading step."""
        total, ctx = gpu.memory_total_mib / 1024, self.profile.cuda_context_mib / 1024
        static = self.tree.full_mib(gpu) / 1024 - ctx
        weights, kv = static * WEIGHTS_SHARE, static * (1 - WEIGHTS_SHARE)
        avail = total - ctx
        arch = _architecture(str(self.args["model_path"]))
        graph_s = 0.3 * self.load_s
        steps = [
            (0.05, "Init torch distributed begin.", ""),
            (0.0, f"Init torch distributed ends. mem usage={ctx:.2f} GB", ""),
            (0.0, f"Load weight begin. avail mem={avail:.2f} GB", "weights"),
            (0.5, f"Load weight end. type={arch}, dtype=torch.bfloat16, avail mem="
                  f"{avail - weights:.2f} GB, mem usage={weights:.2f} GB.", "weights_end"),
            (0.05, f"KV Cache is allocated. #tokens: {self.engine.max_total_num_tokens}, "
                   f"K size: {kv / 2:.2f} GB, V size: {kv / 2:.2f} GB", "kv"),
            (0.0, "Capture cuda graph begin. This can take up to several minutes. "
                  f"avail mem={avail - static:.2f} GB", ""),
            (0.3, f"Capture cuda graph end. Time elapsed: {graph_s:.2f} s. mem usage=0.61 GB. "
                  f"avail mem={avail - static - 0.61:.2f} GB.", ""),
        ]  # fmt: skip
        # NGRAM has no draft model; UNO drafts with the target itself (plus its LoRA)
        if self.spec is not None and self.spec.algorithm not in ("NGRAM", "UNO"):
            draft_s = 0.03 * self.load_s
            steps += [
                (0.0, f"Load weight begin. avail mem={avail - static - 0.61:.2f} GB", ""),
                (0.04, "Load weight end. type=LlamaForCausalLMEagle3, dtype=torch.bfloat16, "
                       "mem usage=1.20 GB.", ""),
                (0.0, "Capture draft cuda graph begin. This can take up to several minutes.", ""),
                (0.03, f"Capture draft cuda graph end. Time elapsed: {draft_s:.2f} s. "
                       "mem usage=0.20 GB.", ""),
                (0.0, "Capture draft extend cuda graph begin. This can take up to several "
                      "minutes.", ""),
                (0.03, f"Capture draft extend cuda graph end. Time elapsed: {draft_s:.2f} s. "
                       "mem usage=0.15 GB.", ""),
            ]  # fmt: skip
        if self.adaptive is not None:  # the worker's adaptive params, then its states
            steps.insert(-4, (0.0, self.adaptive.params.init_line(), ""))
            steps += [(BUILD_SHARE, self.adaptive.built_line(n, self.load_s), "")
                      for n in self.adaptive.built_states()]  # fmt: skip
        return steps

    async def load(self) -> None:
        """Children, weights, KV cache, CUDA graphs; the port stays closed."""
        start = asyncio.get_running_loop().time()
        p = self.profile
        need = self.tree.gpus_needed
        # The default inventory is everyone's scratch machine: it grows to fit. One
        # named by SPECSWEEP_SIM_GPU_STATE is a fixed machine: too many ranks fail.
        grow = self.knobs.gpu_state is None
        gpus = self.inv.ensure(p.gpu_name, max(p.gpu_count, need), p.gpu_memory_mib, grow)
        self.inv.charged()  # forgets allocations of processes long gone
        self.tree.spawn()
        await asyncio.to_thread(self.tree.wait_started)  # as sglang waits for its ranks
        if len(gpus) < need:
            self.log_tp("Init torch distributed begin.")
            self.crash("load", invalid_device())
        self.tree.charge(gpus, 0.0)
        steps = self._load_steps(gpus[0])
        weight = sum(w for w, _, _ in steps) or 1.0
        for w, msg, event in steps:
            await self._phase_sleep("load", start, self.load_s * w / weight)
            self.log_tp(msg)
            if event == "weights":
                self._check_memory(gpus)
                if self.knobs.hang == "load":
                    await asyncio.Future()  # wedged: alive, silent, port never bound
            elif event == "weights_end":
                self.tree.charge(gpus, WEIGHTS_SHARE)
            elif event == "kv":
                self.tree.charge(gpus, 1.0)
        self.log_tp(
            f"max_total_num_tokens={self.engine.max_total_num_tokens}, "
            f"chunked_prefill_size={self.args['chunked_prefill_size']}, "
            f"max_prefill_tokens={self.args['max_prefill_tokens']}, "
            f"max_running_requests={self.engine.max_running_requests}, "
            f"context_len={self.state.context_length}, "
            f"available_gpu_mem={gpus[0].memory_total_mib * 0.08 / 1024:.2f} GB"
        )
        if self.knobs.crash == "load":
            self.crash("load")

    def _check_memory(self, gpus: list[Gpu]) -> None:
        """With GPU_CHECK_MEMORY, OOM like sglang when others hold the memory we need."""
        if not self.knobs.gpu_check_memory:
            return
        short = self.tree.shortfall(gpus)
        if short is not None:
            gpu, free, want = short
            error = oom(gpu.index, gpu.memory_total_mib, free, want, self.profile.cuda_context_mib)
            self.crash("load", scheduler_exception("load", error))

    async def bind(self) -> None:
        """Open the HTTP port (connections are accepted from now on)."""
        self.runner = web.AppRunner(
            build_app(self.state),
            handle_signals=False,
            access_log_class=UvicornStyleAccessLogger,
            access_log=access_logger,
            shutdown_timeout=0.2,
        )
        await self.runner.setup()
        host, port = str(self.args["host"]), int(self.args["port"])
        uv.info(f"INFO:     Started server process [{os.getpid()}]")
        uv.info("INFO:     Waiting for application startup.")
        uv.info("INFO:     Application startup complete.")
        site = web.TCPSite(self.runner, host, port, backlog=2048, reuse_address=True)
        try:
            if self.knobs.port_in_use:
                raise OSError(98, bind_error(host, port).split("] ", 1)[1])
            await site.start()
        except OSError as exc:
            uv.error(f"ERROR:    {exc}")
            uv.info("INFO:     Waiting for application shutdown.")
            uv.info("INFO:     Application shutdown complete.")
            flush()
            self.tree.kill()  # launch_server's finally: kill_process_tree(include_parent=False)
            os._exit(STARTUP_FAILURE)
        uv.info(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")

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
            if self.knobs.hang == "warmup":
                await asyncio.Future()  # the warmup request never returns
            access_logger.info(f'INFO:     {peer} - "POST /generate HTTP/1.1" 200 OK')
            remaining = self.warmup_s - (loop.time() - start)
            await self._phase_sleep("warmup", start, max(0.0, remaining))
        if self.knobs.crash == "warmup":
            self.crash("warmup")
        self.state.status = "up"
        logger.info("The server is fired up and ready to roll!")
        if self.knobs.crash == "serve" and self.knobs.crash_after_requests is None:
            loop.call_later(self.knobs.crash_after_s, self.crash, "serve")

    async def startup(self) -> None:
        self.engine.start()
        await self.load()
        await self.bind()
        await self.warmup()

    async def shutdown(self) -> None:
        """Stop serving quickly: abort streams, close the site, kill the children."""
        self.state.status = "shutting_down"
        uv.info("INFO:     Shutting down")
        await self.engine.stop()
        if self.runner is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.runner.cleanup(), timeout=0.5)
        self.tree.kill()
        uv.info(f"INFO:     Finished server process [{os.getpid()}]")


def _architecture(model_path: str) -> str:
    low = model_path.lower()
    if "kimi" in low or "deepseek" in low:
        return "DeepseekV3ForCausalLM"
    if "qwen" in low:
        return "Qwen3ForCausalLM"
    return "LlamaForCausalLM"


async def _serve(args: dict[str, Any], knobs: SimKnobs, profile: PerfProfile) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        logger.info(f"Received {sig.name.lower()}, shutting down.")
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    server = SimServer(args, knobs, profile)
    try:
        startup = asyncio.create_task(server.startup())
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait({startup, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if startup.done() and not startup.cancelled() and startup.exception() is not None:
            logger.error("".join(traceback.format_exception(startup.exception())))
            return 1
        await stop.wait()
        startup.cancel()
        await asyncio.gather(startup, return_exceptions=True)
        await server.shutdown()
        return 0
    finally:
        server.tree.kill()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit status."""
    try:
        version = simulated_version()
    except ValueError:
        sys.stderr.write(traceback.format_exc())
        return 1
    ns = parse_args(sys.argv[1:] if argv is None else argv, version)
    setup_logging(ns.log_level, ns.log_level_http)
    try:
        knobs = SimKnobs.from_env()
        profile = get_profile(knobs.profile)
        args, warnings = resolve_server_args(ns, version=version)
    except Exception:  # sglang dies on any error of its arguments: traceback, status 1
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        return 1
    for line in warnings:
        logger.warning(line)
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    logger.info(f"server_args=ServerArgs({shown})")
    return _run(_serve(args, knobs, profile))


def _run(main: Coroutine[Any, Any, int]) -> int:
    """On uvloop when installed: sglang serves on it too, and it cuts per-chunk overhead."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


if __name__ == "__main__":
    sys.exit(main())
