"""The phase and root cause of a failed launch, read from realistic sglang log tails.

The tails are built from the lines sglang 0.5.23 prints (source file:line under
``sglang/srt/`` next to each), torch's and NCCL's error texts, and uvicorn's lines as
sglang formats them (``utils/common.py:2630`` ``[time] msg``, ``:3512``
``[time] LEVEL:    msg``; a `` TP<r>`` rank only with tensor parallelism,
managers/scheduler.py:6289). Traceback frames use 0.5.23's real files and lines.
Project issue 14, defect 4: "A failed variant's error hides its cause".
"""

# ruff: noqa: E501  (log lines are as long as sglang prints them)
from __future__ import annotations

import json

import pytest

from specsweep.errors import ServerDiedError, ServerStartTimeout
from specsweep.targets import agent, log_cause
from specsweep.targets.health import wait_until_ready
from specsweep.targets.ssh.errors import rebuild_error
from tests.conftest import free_port

SRT = "/usr/local/lib/python3.12/dist-packages/sglang/srt"
TORCH = "/usr/local/lib/python3.12/dist-packages/torch"


def tail(text: str) -> list[str]:
    """Lines as `tail_file` returns them: blank ones dropped."""
    return [line for line in text.strip("\n").splitlines() if line.strip()]


# torch's CUDACachingAllocator message (c10/cuda/CUDACachingAllocator.cpp), one line.
OOM_WEIGHTS = (
    "CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a total capacity of 79.19 GiB "
    "of which 1.21 GiB is free. Including non-PyTorch memory, this process has 77.97 GiB "
    "memory in use. Of the allocated memory 76.52 GiB is allocated by PyTorch, and 491.08 MiB "
    "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
    "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
    "documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)

# Scheduler dies of a CUDA OOM while loading the weights (TP=1).
OOM_WHILE_LOADING = f"""
# specsweep launch: python -m sglang.launch_server --model-path meta-llama/Llama-3.1-70B-Instruct --port 30000
[2026-05-16 12:09:30] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', port=30000)
[2026-05-16 12:09:37] Load weight begin. avail mem=78.50 GB
Loading safetensors checkpoint shards:  43% Completed | 13/30 [00:21<00:28,  1.67s/it]
[2026-05-16 12:09:58] Scheduler hit an exception: Traceback (most recent call last):
  File "{SRT}/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SRT}/managers/scheduler.py", line 568, in __init__
    self.init_model_worker()
  File "{SRT}/managers/scheduler.py", line 1130, in init_model_worker
    self.init_tp_model_worker()
  File "{SRT}/managers/tp_worker.py", line 487, in __init__
    self._model_runner = ModelRunner(
                         ^^^^^^^^^^^^
  File "{SRT}/model_executor/model_runner.py", line 499, in __init__
    self.initialize()
  File "{SRT}/model_executor/model_runner.py", line 715, in initialize
    self.load_model()
  File "{SRT}/model_executor/model_runner.py", line 1312, in load_model
    loaded = load_model_with_memory_saver(
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{TORCH}/nn/modules/module.py", line 1355, in to
    return self._apply(convert)
           ^^^^^^^^^^^^^^^^^^^^
torch.OutOfMemoryError: {OOM_WEIGHTS}
[2026-05-16 12:09:58] Received sigquit from a child process. It usually means the child failed.
"""
# sglang lines: server_args= entrypoints/engine.py:311; Load weight begin
# model_executor/model_runner.py:1274; the shard bar model_loader/weight_utils.py:1166;
# Scheduler hit an exception managers/scheduler.py:6372; sigquit entrypoints/engine.py:1978.

# OOM while capturing the decode CUDA graphs: the runner wraps the OOM
# (model_executor/runner/decode_cuda_graph_runner.py:602 and
# runner_backend_utils/__init__.py:14 for the "Possible solutions" text).
OOM_WHILE_CAPTURING = f"""
[2026-05-16 12:11:02] Load weight end. elapsed=41.20 s, type=LlamaForCausalLM, avail mem=40.12 GB, mem usage=38.38 GB.
[2026-05-16 12:11:05] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1092843, K size: 16.68 GB, V size: 16.68 GB
[2026-05-16 12:11:05] Memory pool end. avail mem=6.31 GB
[2026-05-16 12:11:06] Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=6.05 GB
Capturing batches (bs=160 avail_mem=2.10 GB):  35%|███▌      | 13/37 [00:03<00:06,  3.71it/s]
[2026-05-16 12:11:10] Scheduler hit an exception: Traceback (most recent call last):
  File "{SRT}/model_executor/runner/decode_cuda_graph_runner.py", line 600, in __init__
    self.capture()
  File "{SRT}/model_executor/runner/decode_cuda_graph_runner.py", line 1359, in capture
    self.capture_one_shape(
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "{SRT}/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SRT}/managers/scheduler.py", line 1146, in init_model_worker
    self.init_all_cuda_graphs()
  File "{SRT}/managers/scheduler.py", line 1124, in init_all_cuda_graphs
    self.tp_worker.init_cuda_graphs()
  File "{SRT}/managers/tp_worker.py", line 435, in init_cuda_graphs
    self.model_runner.init_cuda_graphs(
  File "{SRT}/model_executor/model_runner.py", line 1192, in init_cuda_graphs
    capture = capture_cuda_graphs(
              ^^^^^^^^^^^^^^^^^^^^
  File "{SRT}/model_executor/model_runner_components/cuda_graph_setup.py", line 780, in capture_decode_graph
    runner = GraphRunnerCls(model_runner)
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SRT}/model_executor/runner/decode_cuda_graph_runner.py", line 602, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)
3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)
Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose
[2026-05-16 12:11:10] Received sigquit from a child process. It usually means the child failed.
"""
# Load weight end model_runner.py:1373; KV Cache is allocated mem_cache/memory_pool.py:2088;
# Memory pool end mem_cache/kv_cache_configurator.py:499; Capture target decode CUDA graph
# begin model_runner_components/cuda_graph_setup.py:759; the bar
# model_executor/runner/decode_cuda_graph_runner.py:1343.

# A bad flag: ServerArgs resolution raises in the launcher before anything starts
# (arg_groups/speculative_hook.py:228); Python prints the traceback, exit status 1.
BAD_FLAG = f"""
# specsweep launch: python -m sglang.launch_server --model-path m --speculative-draft-sink-size 4
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "<frozen runpy>", line 88, in _run_code
  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 84, in <module>
    run_server(server_args)
  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "{SRT}/server_args.py", line 277, in resolve_once
    run_resolution_pipeline(self)
  File "{SRT}/arg_groups/pipeline.py", line 306, in run_resolution_pipeline
    run_hook(handle_speculative_decoding, server_args)
  File "{SRT}/arg_groups/resolution_hooks.py", line 139, in run_hook
    step(server_args)
  File "{SRT}/arg_groups/speculative_hook.py", line 228, in handle_speculative_decoding
    raise ValueError(
ValueError: --speculative-draft-sink-size requires --speculative-draft-window-size.
"""

# NCCL cannot connect its ranks (TP=2): torch's DistBackendError with NCCL's detail
# (torch/csrc/distributed/c10d/NCCLUtils: "NCCL error in: ...", then the error's
# description and "Last error:"), then the launcher's SIGQUIT line.
NCCL_FAILURE = f"""
[2026-05-16 12:20:01] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-70B-Instruct', tp_size=2)
[2026-05-16 12:20:14 TP1] Scheduler hit an exception: Traceback (most recent call last):
  File "{SRT}/managers/scheduler.py", line 6362, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{SRT}/distributed/parallel_state.py", line 699, in all_reduce
    torch.distributed.all_reduce(input_, group=self.device_group)
  File "{TORCH}/distributed/c10d_logger.py", line 81, in wrapper
    return func(*args, **kwargs)
           ^^^^^^^^^^^^^^^^^^^^^
  File "{TORCH}/distributed/distributed_c10d.py", line 2806, in all_reduce
    work = group.allreduce([tensor], opts)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5
ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
Last error:
socketStartConnect: Connect to 10.1.2.3<45231> failed : Software caused connection abort
[2026-05-16 12:20:14] Received sigquit from a child process. It usually means the child failed.
"""

# A bare assert in ServerArgs resolution: --speculative-eagle-topk without
# --speculative-num-steps (arg_groups/speculative_hook.py:1160, a multi-line assert).
BARE_ASSERT = f"""
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 29, in run_server
    server_args.resolve_once()
  File "{SRT}/arg_groups/speculative_hook.py", line 1160, in _handle_eagle_family
    assert (
           ^
AssertionError
"""

# A hang in sglang's warmup: only our own /health polls are logged after the port opened.
ONLY_ACCESS_LINES = """
[2026-05-16 12:30:40] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 503 Service Unavailable
[2026-05-16 12:30:41] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 503 Service Unavailable
[2026-05-16 12:30:43] INFO:     127.0.0.1:50312 - "GET /health HTTP/1.1" 503 Service Unavailable
"""

# The port is taken: uvicorn logs the OSError and exits 3 (uvicorn server.py:190).
PORT_TAKEN = """
[2026-05-16 12:40:02] max_total_num_tokens=1092843, chunked_prefill_size=8192, max_prefill_tokens=16384, max_running_requests=4096, context_len=131072, available_gpu_mem=5.51 GB
[2026-05-16 12:40:03] INFO:     Started server process [4242]
[2026-05-16 12:40:03] INFO:     Waiting for application startup.
[2026-05-16 12:40:03] INFO:     Application startup complete.
[2026-05-16 12:40:03] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use
[2026-05-16 12:40:03] INFO:     Waiting for application shutdown.
[2026-05-16 12:40:03] INFO:     Application shutdown complete.
"""

# The OS OOM killer SIGKILLs a scheduler: no traceback from it, the launcher says so
# (entrypoints/engine.py:2006, raised from _wait_for_scheduler_ready).
SCHEDULER_KILLED = """
[2026-05-16 12:50:11] Load weight begin. avail mem=78.50 GB
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/sglang/launch_server.py", line 84, in <module>
    run_server(server_args)
RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` to check.
"""

# fmt: off
CASES = {
    "oom-loading-weights": (
        OOM_WHILE_LOADING, log_cause.LOADING_WEIGHTS,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 0 has a "
        "total capacity of 79.19 GiB of which 1.21 GiB is free.",
    ),
    "oom-capturing-cuda-graphs": (
        OOM_WHILE_CAPTURING, log_cause.CAPTURING_CUDA_GRAPHS,
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.",
    ),
    "bad-flag-value-error": (
        BAD_FLAG, None,
        "ValueError: --speculative-draft-sink-size requires --speculative-draft-window-size.",
    ),
    "nccl-error": (
        NCCL_FAILURE, None,
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/"
        "c10d/ProcessGroupNCCL.cpp:3356, unhandled system error",
    ),
    "bare-assertion-error": (
        BARE_ASSERT, None,
        "AssertionError at sglang/srt/arg_groups/speculative_hook.py:1160: assert (",
    ),
    "port-taken": (
        PORT_TAKEN, log_cause.STARTING_HTTP,
        "[Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): "
        "address already in use",
    ),
    "scheduler-oom-killed": (
        SCHEDULER_KILLED, log_cause.LOADING_WEIGHTS,
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9).",
    ),
}
# fmt: on


@pytest.mark.parametrize("name", list(CASES))
def test_the_cause_is_the_root_error_line(name):
    text, _, expected = CASES[name]
    cause = log_cause.describe_cause(tail(text))
    assert cause.startswith(expected), cause
    assert "\n" not in cause and "File " not in cause and "^^^" not in cause
    assert "sigquit" not in cause.lower()  # the launcher's generic line never wins
    assert len(cause) <= 400


@pytest.mark.parametrize("name", list(CASES))
def test_the_phase_is_the_newest_sglang_marker(name):
    text, phase, _ = CASES[name]
    assert log_cause.phase_of(tail(text)) == phase


def test_an_oom_keeps_its_numbers_but_not_the_allocator_advice():
    cause = log_cause.describe_cause(tail(OOM_WHILE_LOADING))
    assert "Tried to allocate 1.96 GiB" in cause and "1.21 GiB is free" in cause
    assert "PYTORCH_CUDA_ALLOC_CONF" not in cause and cause.endswith("…")


def test_nccl_errors_carry_their_last_error_detail():
    cause = log_cause.describe_cause(tail(NCCL_FAILURE))
    assert "NCCL version 2.21.5" in cause
    assert cause.endswith(
        "last error: socketStartConnect: Connect to 10.1.2.3<45231> failed : "
        "Software caused connection abort"
    )


def test_a_tail_of_access_lines_says_there_is_no_error():
    lines = tail(ONLY_ACCESS_LINES)
    assert log_cause.find_cause(lines) is None
    assert log_cause.describe_cause(lines) == "no error in the log; only HTTP access lines"
    assert log_cause.phase_of(lines) is None
    hung = tail(OOM_WHILE_CAPTURING.split("[2026-05-16 12:11:10] Scheduler")[0]) + lines
    assert log_cause.describe_cause(hung) == (
        "no error in the log; last line: Capturing batches (bs=160 avail_mem=2.10 GB): "
        "35%|███▌ | 13/37 [00:03<00:06, 3.71it/s]"
    )


def test_the_sigquit_line_alone_is_reported_when_nothing_better_is_there():
    lines = tail(OOM_WHILE_LOADING)[-1:]
    assert log_cause.describe_cause(lines) == (
        "Received sigquit from a child process. It usually means the child failed."
    )
    assert log_cause.describe_cause([]) == "the server wrote nothing to its log"


def test_the_phase_survives_a_traceback_longer_than_the_tail():
    lines = tail(OOM_WHILE_LOADING)
    tracker = log_cause.PhaseTracker()
    tracker.feed(lines[:5])  # an earlier poll saw "Load weight begin"
    short = lines[-12:]  # the error's tail: the marker has scrolled out
    assert log_cause.phase_of(short) is None
    assert tracker.feed(short) == log_cause.LOADING_WEIGHTS


# --- through the health wait: the error's first line ---------------------------------
def died(text: str) -> ServerDiedError:
    lines = tail(text)
    with pytest.raises(ServerDiedError) as info:
        wait_until_ready(
            f"http://127.0.0.1:{free_port()}",
            is_alive=lambda: False,
            tail_log=lambda n: lines[-n:],
            timeout_s=5,
        )
    return info.value


def test_a_died_error_names_phase_and_cause_in_its_first_line():
    exc = died(OOM_WHILE_LOADING)
    first = str(exc).splitlines()[0]
    assert first.startswith("server process exited while loading weights after ")
    assert "s: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB." in first
    assert "last log lines:" in str(exc) and exc.log_tail == tail(OOM_WHILE_LOADING)[-30:]
    assert not exc.transient  # an OOM fails the same way again
    graphs = str(died(OOM_WHILE_CAPTURING)).splitlines()[0]
    assert "while capturing CUDA graphs" in graphs and "Capture cuda graph failed" in graphs
    flag = str(died(BAD_FLAG)).splitlines()[0]
    assert flag.startswith("server process exited while starting after ")
    assert flag.rstrip().endswith("ValueError: --speculative-draft-sink-size requires "
                                  "--speculative-draft-window-size.")  # fmt: skip


def test_transient_still_reads_the_tail():
    assert died(NCCL_FAILURE).transient
    assert died(PORT_TAKEN).transient
    port = str(died(PORT_TAKEN)).splitlines()[0]
    assert "while starting the HTTP server" in port and "address already in use" in port


def test_the_first_line_survives_the_ssh_round_trip():
    exc = died(OOM_WHILE_LOADING)
    back = rebuild_error(json.loads(json.dumps(agent.error_event(exc))), "gpu-a")
    assert isinstance(back, ServerDiedError)
    first = str(back).splitlines()[0]
    assert first == str(exc).splitlines()[0] + " (on gpu-a)"
    assert "while loading weights" in first and "torch.OutOfMemoryError" in first
    assert back.log_tail == exc.log_tail and not back.transient


def test_a_timeout_keeps_its_meaning_and_gains_phase_and_cause():
    lines = tail(OOM_WHILE_LOADING)[:4]  # alive, stuck in loading, nothing failed
    with pytest.raises(ServerStartTimeout) as info:
        wait_until_ready(
            f"http://127.0.0.1:{free_port()}",
            is_alive=lambda: True,
            tail_log=lambda n: lines[-n:],
            timeout_s=0,
        )
    first = str(info.value).splitlines()[0]
    assert first.startswith("server not ready after 0s (last state: refused)")
    assert "while loading weights: no error in the log; last line: Loading safetensors" in first
