"""The `specsweep` app: every command group registered on one typer app.

Each module adds its own commands; none imports another's (shared helpers
live in cli/common.py), and Prefect loads only inside the commands that run
or deploy flows.
"""

from __future__ import annotations

import typer

from specsweep.cli import answer, deploy, fleet, policy, run

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Benchmark SGLang speculative-decoding variants across concurrency levels.",
)
run.register(app)  # run step-sweep|topk-sweep|algorithm-sweep|matrix-sweep, demo, plan, summary
deploy.register(app)  # serve, deploy, worker, limits
answer.register(app)  # report, compare, regression
fleet.register(app)  # fleet check|deploy|worker|run
policy.register(app)  # policy export|verify
