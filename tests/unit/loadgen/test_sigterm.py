"""A level must stop when its process is asked to terminate (a cancelled flow run)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import asyncio, signal, sys, time
    from specsweep.loadgen.runner import run_on_new_loop

    class Terminated(BaseException):  # what Prefect's handler raises (TerminationSignal)
        pass

    def handler(signum, frame):
        raise Terminated()

    async def level():
        # Prefect acknowledges a cancel only while its own handler is installed.
        assert signal.getsignal(signal.SIGTERM) is handler, "the handler was replaced"
        # said from the loop's next turn: the level is then suspended in its await
        asyncio.get_running_loop().call_soon(lambda: print("running", flush=True))
        await asyncio.sleep(60)

    signal.signal(signal.SIGTERM, handler)
    start = time.monotonic()
    try:
        run_on_new_loop(level())
    except Terminated:
        print(f"terminated after {time.monotonic() - start:.2f}s", flush=True)
        sys.exit(0)
    print("the level ran to its end", flush=True)
    sys.exit(1)
    """
)


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_sigterm_reaches_the_callers_handler_during_a_level(loop):
    code = CHILD
    if loop == "asyncio":  # the fallback when uvloop is not installed
        code = "import sys; sys.modules['uvloop'] = None\n" + code
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "running"
    proc.send_signal(signal.SIGTERM)  # the level is waiting in its await (said "running")
    try:
        out, err = proc.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("SIGTERM was swallowed by the event loop: the level ran on")
    assert proc.returncode == 0, out + err
    assert out.startswith("terminated after"), out + err
