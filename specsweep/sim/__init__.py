"""SGLang-compatible simulated server (``python -m specsweep.sim.launch_server``).

GPUs and real SGLang are not available in tests, CI or a laptop demo, so specsweep
ships a server that is launched with sglang's flags, goes through sglang's startup
phases and log lines, runs sglang's process tree (``sglang::scheduler_TP<r>``,
``sglang::detokenizer``) holding memory on simulated GPUs that a bundled
``nvidia-smi`` stand-in reports, speaks sglang's HTTP API, and times its answers with
a continuous-batching performance model in which speculative decoding wins at low
concurrency and loses at saturation on short contexts, keeps paying at larger batches
on long ones (the KV read), and accepts more on natural text than on random ids.
Every failure a GPU host shows (crash or hang while loading, crash after N requests,
slow or flapping health, 5xx bursts, a taken port, orphaned schedulers holding memory)
can be switched on. Results from it are labelled simulated (``/server_info`` has
``"simulated": true`` and version ``<release>-sim``: ``SIM_SGLANG_VERSION`` by default,
or the release chosen with ``SPECSWEEP_SIM_SGLANG_VERSION``). Guide and calibration:
``docs/simulator.md``.

Modules: ``knobs`` (environment-only settings and faults), ``server_args`` (sglang's
flags and speculative rules), ``perf_model`` (pure timing/acceptance model),
``profiles`` (+ ``profiles/*.yaml``: deployments as data), ``engine`` (asyncio
scheduler), ``http_app``/``http_common``/``http_openai``/``http_admin`` (routes),
``faults`` (request-time faults), ``procs`` and ``child`` (the process tree),
``gpu_inventory`` and ``nvidia_smi`` (+ ``bin/nvidia-smi``: simulated GPUs),
``sglang_logs`` (log format and failure texts), ``launch_server`` (the process),
``version`` (the simulated sglang release), ``adaptive`` (``--speculative-adaptive``:
config, per-tier step slots, routing) and ``adaptive_runtime`` (the active step count
per decode cycle, its costs and log lines).
"""

SIM_SGLANG_VERSION = "0.5.23-sim"  # the default release (version.DEFAULT_SGLANG_VERSION)

__all__ = ["SIM_SGLANG_VERSION"]
