"""The answer a run gives: best per level, pivot points, policy, comparisons, regressions.

Plain pandas on the levels table, so a notebook can call it on the Parquet files::

    from specsweep.analysis import analyze_run
    from specsweep.results.store import ResultsStore
    answer = analyze_run(ResultsStore("results"))
    print(answer.policy.line())
"""

from specsweep.analysis.answer import Answer, analyze, analyze_run
from specsweep.analysis.compare import compare_runs, environment_changes
from specsweep.analysis.levels import best_per_level, latency_table, metric_table
from specsweep.analysis.params import LatencySLO, RegressionPolicy, TrafficMix
from specsweep.analysis.pivot import Pivot, pivot_points
from specsweep.analysis.policy import Policy, speculation_policy
from specsweep.analysis.regression import RegressionReport, judge_run, judge_stored_run

__all__ = [
    "Answer",
    "LatencySLO",
    "Pivot",
    "Policy",
    "RegressionPolicy",
    "RegressionReport",
    "TrafficMix",
    "analyze",
    "analyze_run",
    "best_per_level",
    "compare_runs",
    "environment_changes",
    "judge_run",
    "judge_stored_run",
    "latency_table",
    "metric_table",
    "pivot_points",
    "speculation_policy",
]
