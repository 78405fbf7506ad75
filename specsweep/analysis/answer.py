"""Everything a run answers, computed once: the input of the report, the CLI and the artifacts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from specsweep.analysis.adaptive_export import TierExport, export_adaptive
from specsweep.analysis.adaptive_verify import Verification, parse_shares, verify_adaptive
from specsweep.analysis.hosts import HostComparison, compare_hosts, gpu_kind_warning
from specsweep.analysis.levels import (
    adaptive_mask,
    answer_rows,
    best_per_level,
    latency_table,
    metric_table,
)
from specsweep.analysis.params import LatencySLO, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.policy import Policy, speculation_policy
from specsweep.errors import PolicyExportRefused
from specsweep.results.store import ResultsStore

# Per-variant columns of the run's environment, in the order the report lists them.
VARIANT_FACTS = [
    "variant",
    "algorithm",
    "num_steps",
    "topk",
    "num_draft_tokens",
    "spec_v2",
    "adaptive",
    "adaptive_config",
    "draft_model_path",
    "max_running_requests",
    "server_command",
]
RUN_FACTS = [
    "target",
    "hostname",
    "gpu_host",
    "backend",
    "simulated",
    "sglang_version",
    "gpu_name",
    "gpu_count",
    "driver_version",
    "gpu_uuids",
    "model_path",
    "tp",
    "input_len",
    "output_len",
    "num_requests",
    "seed",
]


@dataclass(frozen=True)
class Answer:
    """One run's answer. With several targets, `levels` holds one target per variant.

    `stored` keeps every row (all targets); `hosts` compares the targets (None with one).
    """

    run_id: str
    levels: pd.DataFrame  # the rows the answer uses: levels.answer_rows of the stored ones
    run: dict[str, Any] | None  # its runs-table row (None for a run that never finished)
    throughput: pd.DataFrame  # concurrency x variant, output tok/s
    best: pd.DataFrame  # best_per_level
    latency: pd.DataFrame  # latency_table
    pivots: dict[str, Pivot]
    policy: Policy | None
    mix: TrafficMix
    slo: LatencySLO | None
    stored: pd.DataFrame | None = None  # the run's rows as stored, every target
    hosts: HostComparison | None = None  # compare_hosts(stored): None for a single target
    export: TierExport | None = None  # the measured answer as sglang adaptive tiers
    export_refused: str | None = None  # why there is no export (None when there is one)
    verifications: tuple[Verification, ...] = ()  # each custom-tier adaptive variant, judged

    @property
    def has_adaptive(self) -> bool:
        return bool(adaptive_mask(self.levels).any())

    def steps_ran(self) -> pd.DataFrame:
        """What each adaptive server ran: variant, concurrency, {steps: share of time}."""
        if not self.has_adaptive:
            return pd.DataFrame(columns=["variant", "concurrency", "steps_share"])
        rows = self.levels[adaptive_mask(self.levels)]
        rows = rows[rows["status"] == "ok"]
        return pd.DataFrame(
            {
                "variant": rows["variant"].to_numpy(),
                "concurrency": rows["concurrency"].to_numpy(),
                "steps_share": [parse_shares(t) for t in rows.get("adaptive_steps_share", [])],
            }
        ).sort_values(["variant", "concurrency"], ignore_index=True)

    @property
    def gpu_kind_warning(self) -> str | None:
        """Set when the variants' curves come from GPUs of different kinds (see hosts.py)."""
        return gpu_kind_warning(self.levels)

    @property
    def failed_levels(self) -> pd.DataFrame:
        return self.levels.loc[self.levels["status"] != "ok", ["variant", "concurrency", "error"]]

    @property
    def variant_errors(self) -> dict[str, str]:
        return json.loads((self.run or {}).get("variant_errors") or "{}")

    @property
    def simulated(self) -> bool:
        return bool(self.levels["simulated"].any()) if len(self.levels) else False

    def facts(self) -> dict[str, str]:
        """Run-wide environment: one value per column (distinct values joined when they vary)."""
        out: dict[str, str] = {"run_id": self.run_id}
        for col in RUN_FACTS:
            if col in self.levels.columns:
                values = self.levels[col].dropna().unique()
                if len(values) > 1 and pd.api.types.is_numeric_dtype(self.levels[col]):
                    out[col] = f"{values.min():g} to {values.max():g}"  # e.g. requests per level
                elif len(values):
                    out[col] = ", ".join(sorted(str(v) for v in values))
        for col in ("sweep_kind", "sweep_name", "specsweep_version", "git_revision", "status"):
            if self.run and self.run.get(col) is not None:
                out[f"run {col}" if col == "status" else col] = str(self.run[col])
        if self.run and self.run.get("started_at") is not None:
            out["started"] = f"{self.run['started_at']:%Y-%m-%d %H:%M:%S %Z}"
            out["ended"] = f"{self.run['ended_at']:%Y-%m-%d %H:%M:%S %Z}"
        return out

    def variants(self) -> pd.DataFrame:
        """One row per variant: its speculative parameters and exact server command."""
        cols = [c for c in VARIANT_FACTS if c in self.levels.columns]
        order = list(self.throughput.columns)
        table = self.levels.drop_duplicates("variant")[cols]
        rank = {v: i for i, v in enumerate(order)}
        return table.assign(_r=table["variant"].map(rank).fillna(len(rank))).sort_values("_r")[cols]

    def accept_length(self) -> pd.DataFrame:
        table = metric_table(self.levels, "accept_length")
        return table.dropna(axis=1, how="all") if not table.empty else table

    def config_json(self) -> str | None:
        text = (self.run or {}).get("config")
        return json.dumps(json.loads(text), indent=2, sort_keys=True) if text else None


def analyze(
    levels: pd.DataFrame,
    run_id: str,
    run: dict[str, Any] | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
) -> Answer:
    """The whole answer for one run's level rows (as stored: every target)."""
    mix = mix or TrafficMix()
    stored, levels = levels, answer_rows(levels)
    export, refused = None, None
    try:
        export = export_adaptive(levels)
    except PolicyExportRefused as exc:
        refused = str(exc)
    return Answer(
        run_id=run_id,
        levels=levels,
        run=run,
        throughput=metric_table(levels, "output_throughput"),
        best=best_per_level(levels, slo),
        latency=latency_table(levels, slo),
        pivots=pivot_points(levels),
        policy=speculation_policy(levels, mix, slo),
        mix=mix,
        slo=slo,
        stored=stored,
        hosts=compare_hosts(stored),
        export=export,
        export_refused=refused,
        verifications=tuple(verify_adaptive(levels)),
    )


def analyze_run(
    store: ResultsStore,
    run_id: str | None = None,
    mix: TrafficMix | None = None,
    slo: LatencySLO | None = None,
) -> Answer:
    """analyze() on a stored run (the latest when run_id is None)."""
    run_id = run_id or store.latest_run_id()
    if run_id is None:
        raise LookupError(f"no runs under {store.root}")
    levels = store.read_levels(run_id)
    if levels.empty:
        raise LookupError(f"run {run_id} has no level rows under {store.levels_dir}")
    return analyze(levels, run_id, store.read_run(run_id), mix, slo)
