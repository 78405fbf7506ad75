"""The health wait against the real simulator process over real HTTP."""

from __future__ import annotations

import pytest

from specsweep.config.file import parse_config
from specsweep.config.plan import BASELINE
from specsweep.errors import ServerDiedError, ServerStartTimeout
from specsweep.targets.health import Readiness
from tests.conftest import sim_config_data
from tests.integration.sim_server import launched

pytestmark = pytest.mark.integration


def config_with(tmp_path, port, **env):
    data = sim_config_data(tmp_path, port)
    data["server"]["env"].update({k: str(v) for k, v in env.items()})
    return parse_config(data)


def test_refused_then_warming_then_ready(tmp_path, port):
    config = config_with(
        tmp_path, port, SPECSWEEP_SIM_LOAD_SECONDS=1.0, SPECSWEEP_SIM_WARMUP_SECONDS=1.0
    )
    seen: list[tuple[Readiness, str]] = []
    with launched(config, BASELINE) as server:
        report = server.wait_for_health(on_progress=lambda s, ln: seen.append((s, ln)))
    states = [s for _, s in report.transitions]
    assert states[0] == Readiness.REFUSED and states[-1] == Readiness.READY
    assert Readiness.WARMING in states
    assert states.index(Readiness.REFUSED) < states.index(Readiness.WARMING)
    lines = " ".join(line for _, line in seen)
    assert "Load weight" in lines or "KV Cache" in lines or "cuda graph" in lines.lower()
    assert "GET /health" not in lines  # our own polls are not progress


@pytest.mark.parametrize("phase", ["load", "warmup"])
def test_crash_fails_at_once_with_the_log_tail(tmp_path, port, phase):
    config = config_with(
        tmp_path, port, SPECSWEEP_SIM_CRASH=phase, SPECSWEEP_SIM_CRASH_AFTER_S=0.2,
        SPECSWEEP_SIM_LOAD_SECONDS=2.0 if phase == "warmup" else 30,
        SPECSWEEP_SIM_WARMUP_SECONDS=30,
    )  # fmt: skip
    with launched(config, BASELINE) as server:
        with pytest.raises(ServerDiedError) as exc:
            server.wait_for_health()
        # The wait ended because the process died (ServerDiedError, not the timeout's
        # ServerStartTimeout, which a wait that missed the death would raise at 30 s).
        assert server.handle is not None and not server.host.is_alive(server.handle)
    assert exc.value.log_tail, "the error carries the server's last log lines"
    assert "Error" in "\n".join(exc.value.log_tail)
    assert "last log lines" in str(exc.value)


def test_alive_but_never_ready_times_out(tmp_path, port):
    config = config_with(tmp_path, port, SPECSWEEP_SIM_LOAD_SECONDS=60)
    config = config.model_copy(
        update={"server": config.server.model_copy(update={"startup_timeout_s": 1.0})}
    )
    with launched(config, BASELINE) as server, pytest.raises(ServerStartTimeout) as exc:
        server.wait_for_health()
    assert "not ready after 1s" in str(exc.value)
    assert exc.value.log_tail[0].startswith("# specsweep launch:")  # the tail is attached
