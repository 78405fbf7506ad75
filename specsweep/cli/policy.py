"""`specsweep policy export|verify`: a run's answer as the config SGLang acts on, and its proof.

`export` reads Parquet only (no server, no Prefect): the run's measured static chains
and baseline become an adaptive tier config (docs/adaptive.md), printed with the exact
server command that deploys it. `verify` resumes the run with `verify_policy` on: the
static variants are already measured and are not relaunched; the exported config (and
sglang's default tiers) are launched and measured at every level.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from specsweep.cli.common import (
    ConfigOpt,
    ForceOpt,
    ResultsOpt,
    SetOpt,
    console,
    err,
    fail,
    load_sweep,
    open_store,
)
from specsweep.config import PolicyVerification
from specsweep.config.plan import SweepKind, sweep_variants
from specsweep.errors import ConfigError, PolicyExportRefused

if TYPE_CHECKING:
    import pandas as pd

policy_app = typer.Typer(
    no_args_is_help=True,
    help="Turn a run's answer into the config the engine acts on, and prove it delivers.",
)

FORMATS = ("sglang-adaptive",)
KINDS: dict[str, SweepKind] = {
    "step_sweep": "step-sweep",
    "topk_sweep": "topk-sweep",
    "algorithm_sweep": "algorithm-sweep",
    "matrix_sweep": "matrix-sweep",
}
VariantOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--variant",
        help="A static topk-1 chain to export from (repeatable); default: every chain of "
        "the run (they must come from one family).",
    ),
]


ShapeOpt = Annotated[
    str | None,
    typer.Option(
        "--shape",
        help="The load shape to export for, e.g. in4096-out256 (default: the run's first). "
        "sglang's tiers key on batch size only and the best step count moves with context "
        "length: export one config per shape and serve each shape's traffic with its own.",
    ),
]


def pick_shape(
    levels: pd.DataFrame, run: dict[str, object] | None, shape: str | None, run_id: str
) -> tuple[pd.DataFrame, str | None, list[str]]:
    """(the rows of the shape asked for, that shape, every shape of the run in order).

    Default: the run's first shape. An unknown label is a usage error that lists the run's
    shapes. Rows without a shape (written before load shapes) are their own
    in<input_len>-out<output_len>."""
    import pandas as pd

    from specsweep.analysis.shapes import shape_order
    from specsweep.config.load import shape_label

    lengths = zip(levels["input_len"], levels["output_len"], strict=True)
    own = pd.Series([shape_label(i, o) for i, o in lengths], index=levels.index)
    labels = levels["shape"].fillna(own) if "shape" in levels.columns else own
    shapes = shape_order(levels.assign(shape=labels), run)
    if shape is None:
        shape = shapes[0] if shapes else None
    elif shape not in shapes:
        raise fail(
            f"--shape {shape}: run {run_id} has no such load shape; its shapes: "
            f"{', '.join(shapes) or 'none recorded'}"
        )
    if shape is None or len(shapes) <= 1:
        return levels, shape, shapes
    return levels[labels == shape], shape, shapes


@policy_app.command("export")
def export(
    run_id: Annotated[str, typer.Argument(help="The run whose answer to export.")],
    results_dir: ResultsOpt = "results",
    format_: Annotated[
        str, typer.Option("--format", help="sglang-adaptive: --speculative-adaptive-config.")
    ] = "sglang-adaptive",
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the config here (default: stdout).")
    ] = None,
    variant: VariantOpt = None,
    shape: ShapeOpt = None,
    tie_margin: Annotated[
        float, typer.Option(help="Relative margin of a near-tie, resolved to fewer steps.")
    ] = 0.01,
) -> None:
    """Export a run's measured per-level answer at one load shape as an SGLang adaptive tier
    config."""
    from specsweep.analysis.adaptive_export import export_adaptive
    from specsweep.analysis.deploy_command import run_config
    from specsweep.analysis.verification_plan import verification_variants
    from specsweep.config.command import build_launch_command

    if format_ not in FORMATS:
        raise fail(f"--format {format_}: use one of {', '.join(FORMATS)}")
    store = open_store(results_dir)
    levels = store.read_levels(run_id)
    if levels.empty:
        raise fail(f"run {run_id} has no level rows under {store.levels_dir}", 1)
    run = store.read_run(run_id)
    levels, shape, shapes = pick_shape(levels, run, shape, run_id)
    try:
        tiers = export_adaptive(levels, variants=variant or None, tie_margin=tie_margin)
    except PolicyExportRefused as exc:
        raise fail(f"run {run_id}: {exc}", 1) from None
    text = json.dumps(tiers.sglang_config(), indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
        shown = err  # the JSON alone on stdout: `> tiers.json` works
    else:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        shown = console
        shown.print(f"wrote {out}", soft_wrap=True)
    if len(shapes) > 1:
        others = ", ".join(s for s in shapes if s != shape)
        shown.print(
            f"load shape {shape} ({shapes.index(shape) + 1} of {len(shapes)}; the others: "
            f"{others}: export each with --shape)",
            soft_wrap=True,
            markup=False,
        )
    for line in tiers.describe():
        shown.print(line, soft_wrap=True, markup=False)
    config = run_config(run)
    path = str(out.resolve()) if out is not None else "tiers.json"
    if config is None:
        shown.print(
            "deploy: the run's chains' server command plus --speculative-adaptive "
            f"--speculative-adaptive-config {path} (the run's config does not validate here, "
            "so the exact line cannot be rebuilt)",
            soft_wrap=True,
            markup=False,
        )
        return
    statics = [v for v in sweep_variants(config) if v.adaptive is None]
    adaptive = verification_variants(statics, tiers, default_tiers=False)[0]
    cmd = build_launch_command(config.server, adaptive, adaptive_config=path)
    shown.print("deploy with:", soft_wrap=True)
    shown.print(f"  {cmd.shell()}", soft_wrap=True, markup=False)


@policy_app.command("verify")
def verify(
    run_id: Annotated[str, typer.Argument(help="The run whose answer to export and verify.")],
    config: ConfigOpt,
    set_: SetOpt = None,
    force: ForceOpt = False,
    default_tiers: Annotated[
        bool | None,
        typer.Option(
            help="Also measure sglang's default tiers for comparison (default: the config's "
            "verify_policy.default_tiers, else yes)."
        ),
    ] = None,
) -> None:
    """Launch the run's exported tier config (and sglang's default tiers) in the same run
    and measure them at every level; the answer says whether the export delivers."""
    from specsweep.cli.sweep_runner import run_sweep_now

    loaded = load_sweep(config, set_)
    run = open_store(str(loaded.results_dir)).read_run(run_id)
    if run is None:
        raise fail(f"no run {run_id} under {loaded.results_dir}", 1)
    kind: SweepKind = KINDS.get(str(run.get("sweep_kind")), "matrix-sweep")
    spec = loaded.verify_policy or PolicyVerification()
    if default_tiers is not None:
        spec = spec.model_copy(update={"default_tiers": default_tiers})
    cfg = loaded.model_copy(update={"verify_policy": spec})
    try:
        sweep_variants(cfg, kind)
    except ConfigError as exc:
        raise fail(exc) from None
    console.print(f"verifying run {run_id} ({kind}): measured variants are not relaunched")
    run_sweep_now(kind, cfg, run_id, force)


def register(app: typer.Typer) -> None:
    app.add_typer(policy_app, name="policy")
