"""sglang's log format and the exact text of its failures, for the simulated launcher.

specsweep tails the server log to show progress and to say why a launch failed, so
the simulator writes what sglang writes: ``[time TP0] message`` from the scheduler
side, ``[time] INFO:     ...`` from uvicorn (sglang's ``set_uvicorn_logging_configs``),
and on failure the tracebacks and lines a real crash leaves behind.

With ``SGLANG_LOG_MS`` true, sglang's own lines carry milliseconds
(``[2026-12-01 23:18:01.123 TP0] ...``: ``configure_logger`` in ``srt/utils/common.py``
adds ``.%(msecs)03d`` after the time); uvicorn's lines keep whole seconds, since
``set_uvicorn_logging_configs`` sets their format and date format without it.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping

logger = logging.getLogger("sglang.srt.entrypoints.http_server")
uvicorn_logger = logging.getLogger("uvicorn.error")
access_logger = logging.getLogger("uvicorn.access")

_DIST = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
_SCHED_TB = (
    "Traceback (most recent call last):\n"
    f'  File "{_DIST}/managers/scheduler.py", line 2761, in run_scheduler_process\n'
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
    "dp_rank)\n"
)
_LOAD_TB = (
    f'  File "{_DIST}/model_executor/model_runner.py", line 806, in load_model\n'
    "    self.model = get_model(\n"
)
_DEVICE_TB = (
    f'  File "{_DIST}/model_executor/model_runner.py", line 412, in init_torch_distributed\n'
    "    torch.get_device_module(self.device).set_device(self.gpu_id)\n"
    "torch.AcceleratorError: CUDA error: invalid device ordinal\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)
_DECODE_TB = _SCHED_TB.replace("run_scheduler_process", "event_loop_normal", 1).replace(
    "    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, "
    "dp_rank)\n",
    "    result = self.run_batch(batch)\n",
)
WARMUP_ERROR = (
    "Initialization failed. warmup error: Traceback (most recent call last):\n"
    f'  File "{_DIST}/entrypoints/http_server.py", line 1432, in _execute_server_warmup\n'
    "    res = requests.post(url + request_name, json=json_data, headers=headers, timeout=600)\n"
    "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect."
)
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


def oom(gpu: int, total_mib: int, free_mib: int, want_mib: int, own_mib: int) -> str:
    """torch's CUDA OOM message with this GPU's numbers."""
    gib = 1024.0
    return (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {want_mib / gib:.2f} "
        f"GiB. GPU {gpu} has a total capacity of {total_mib / gib:.2f} GiB of which "
        f"{max(free_mib, 0) / gib:.2f} GiB is free. Including non-PyTorch memory, this "
        f"process has {own_mib / gib:.2f} GiB memory in use. Of the allocated memory 0.00 GiB "
        "is allocated by PyTorch, and 0.00 GiB is reserved by PyTorch but unallocated."
    )


DEFAULT_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.75 GiB. GPU 0 has a "
    "total capacity of 139.81 GiB of which 1.02 GiB is free. Including non-PyTorch memory, "
    "this process has 138.77 GiB memory in use. Of the allocated memory 131.20 GiB is "
    "allocated by PyTorch, and 4.31 GiB is reserved by PyTorch but unallocated."
)


def scheduler_exception(phase: str, error: str = DEFAULT_OOM) -> str:
    """A scheduler's dying words (sglang logs them, then SIGQUITs its launcher)."""
    if phase == "load":
        return "Scheduler hit an exception: " + _SCHED_TB + _LOAD_TB + error
    return "Scheduler hit an exception: " + _DECODE_TB + error


def invalid_device() -> str:
    """What a scheduler says when its GPU id does not exist on this machine."""
    return "Scheduler hit an exception: " + _SCHED_TB + _DEVICE_TB


def bind_error(host: str, port: int) -> str:
    """uvicorn's line when the port is taken (asyncio's message; sglang prints it as is)."""
    return (
        f"[Errno 98] error while attempting to bind on address ('{host}', {port}): "
        "address already in use"
    )


class SglangFormatter(logging.Formatter):
    """``[time TP0] message`` for sglang's loggers (``[time.msec TP0]`` with ``log_ms``),
    ``[time] INFO:     ...`` for uvicorn."""

    def __init__(self, log_ms: bool = False) -> None:
        super().__init__()
        self.log_ms = log_ms

    def format(self, record: logging.LogRecord) -> str:
        stamp = self.formatTime(record, "%Y-%m-%d %H:%M:%S")
        if record.name.startswith("uvicorn"):
            return f"[{stamp}] {record.getMessage()}"
        if self.log_ms:
            stamp += f".{int(record.msecs):03d}"
        return f"[{stamp}{getattr(record, 'tp', '')}] {record.getMessage()}"


def log_ms_enabled(env: Mapping[str, str] | None = None) -> bool:
    """sglang's ``SGLANG_LOG_MS`` (a boolean: true/1/yes/y, any case)."""
    env = os.environ if env is None else env
    return (env.get("SGLANG_LOG_MS") or "").strip().lower() in ("true", "1", "yes", "y")


def setup_logging(level: str, level_http: str | None) -> None:
    handler = logging.StreamHandler(sys.stderr)  # flushes after every record
    handler.setFormatter(SglangFormatter(log_ms_enabled()))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    access_logger.setLevel(getattr(logging, (level_http or level).upper(), logging.INFO))


def flush() -> None:
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
