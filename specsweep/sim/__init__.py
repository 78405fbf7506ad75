"""SGLang-compatible simulated server (``python -m specsweep.sim.launch_server``).

GPUs and real SGLang are not available in tests, CI or a laptop demo, so specsweep
ships a server that is launched with sglang's flags, goes through sglang's startup
phases and log lines, speaks sglang's HTTP API and times its answers with a
continuous-batching performance model in which speculative decoding wins at low
concurrency and loses at saturation. Results from it are labelled simulated
(``/server_info`` has ``"simulated": true`` and version ``SIM_SGLANG_VERSION``).

Modules: ``knobs`` (environment-only settings), ``server_args`` (sglang's flags and
speculative rules), ``perf_model`` (pure timing/acceptance model), ``engine``
(asyncio scheduler), ``http_app`` (aiohttp routes), ``launch_server`` (the process).
"""

SIM_SGLANG_VERSION = "0.5.9-sim"

__all__ = ["SIM_SGLANG_VERSION"]
