"""VariantServer.skip_reason: the level-skip rule as the benchmark-variant flow asks it,
from what the run stored, with the search's settings (no server is started here)."""

from __future__ import annotations

from specsweep.config import SearchSpec
from specsweep.config.file import parse_config
from specsweep.config.plan import sweep_variants
from specsweep.pipeline import VariantServer
from specsweep.results.rows import RunContext
from specsweep.results.store import ResultsStore
from tests.conftest import sim_config_data
from tests.synthetic_levels import level_row

LEVELS = [1, 2, 4, 8, 16]


def _server(tmp_path):
    data = sim_config_data(tmp_path, 1, search="adaptive", load={"concurrency": LEVELS})
    config = parse_config(data)
    _, spec = sweep_variants(config)
    ctx = RunContext("r1", "matrix_sweep", "test", "test-host")
    store = ResultsStore(config.results_dir)
    for c in LEVELS[:3]:
        base = 100.0 * c
        store.write_level(level_row("r1", "baseline", c, base, target="test-host"))
        # 0.9x, 0.8x, 0.7x of the baseline: trailing, falling (intervals ±1%)
        tput = base * (1.0 - 0.1 * LEVELS.index(c) - 0.1)
        store.write_level(
            level_row("r1", spec.label, c, tput, target="test-host", is_baseline=False)
            | {"output_throughput_lo": tput * 0.99, "output_throughput_hi": tput * 1.01}
        )
    return VariantServer.for_variant(config, spec, ctx), config


def test_the_flow_skips_where_the_rule_says_and_never_the_baseline(tmp_path):
    server, config = _server(tmp_path)
    reason = server.skip_reason(config.search, 8)
    assert reason is not None and reason.startswith("skipped from c=8 up")
    assert server.skip_reason(config.search, 2) is None  # one level below: no trend yet
    row = server.skip_level(8, reason)
    assert row["status"] == "skipped" and row.get("output_throughput") is None
    assert server.store.has_level("r1", server.label, 8, "test-host")  # resume: done
    assert server.skip_reason(config.search, 16) == reason  # carried over


def test_confirm_top_and_a_grid_measure_anyway(tmp_path):
    server, _ = _server(tmp_path)
    top = SearchSpec(mode="adaptive", confirm_top=True)
    assert server.skip_reason(top, 8) is not None
    assert server.skip_reason(top, 16) is None  # the top level: one confirmation
    assert server.skip_reason(SearchSpec(), 8) is None  # grid: every level
    assert server.skip_reason(SearchSpec(mode="adaptive", skip_levels=False), 8) is None
