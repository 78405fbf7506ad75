"""The answer a run gives: best per level, pivot points, policy, comparisons, regressions.

Plain pandas on the levels table, so a notebook can call it on the Parquet files::

    from specsweep.analysis import analyze_run
    from specsweep.results.store import ResultsStore
    answer = analyze_run(ResultsStore("results"))
    print(answer.first.policy.line())

A run measured on several targets answers from one target per variant
(`answer_rows`); `compare_hosts` puts the targets side by side.
"""

from specsweep.analysis.answer import CellAnswer, RunAnswer, analyze, analyze_run
from specsweep.analysis.compare import compare_runs, environment_changes
from specsweep.analysis.decisions import DecisionReport, judge_decisions
from specsweep.analysis.hosts import HostComparison, compare_hosts, gpu_kind_warning
from specsweep.analysis.levels import (
    answer_rows,
    best_per_level,
    chosen_targets,
    latency_table,
    metric_table,
)
from specsweep.analysis.params import LatencySLO, RegressionPolicy, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.policy import Policy, speculation_policy
from specsweep.analysis.regression import RegressionReport, judge_run, judge_stored_run

__all__ = [
    "CellAnswer",
    "DecisionReport",
    "HostComparison",
    "LatencySLO",
    "Pivot",
    "Policy",
    "RegressionPolicy",
    "RegressionReport",
    "RunAnswer",
    "TrafficMix",
    "analyze",
    "analyze_run",
    "answer_rows",
    "best_per_level",
    "chosen_targets",
    "compare_hosts",
    "compare_runs",
    "environment_changes",
    "gpu_kind_warning",
    "judge_decisions",
    "judge_run",
    "judge_stored_run",
    "latency_table",
    "metric_table",
    "pivot_points",
    "speculation_policy",
]
