"""Expand a sweep into the variants and (variant, level) units it will run.

Pure functions: the dry run prints exactly what the flow will execute, and
every cross-variant rule is checked here before a server is launched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from specsweep.config import (
    SGLANG_MRR_DEFAULT_WITH_SPECULATION,
    AlgorithmSweep,
    GridSweep,
    StepSweep,
    SweepConfig,
    TopkSweep,
    Variant,
)
from specsweep.config.algorithm_sweep import TREE_KEYS
from specsweep.config.command import effective_max_running_requests
from specsweep.config.redact import redact_args, redact_env
from specsweep.config.sweep import draft_tokens_rule
from specsweep.errors import ConfigError

BASELINE = Variant()


@dataclass(frozen=True)
class Unit:
    """One benchmark measurement: a variant at one concurrency level."""

    variant: Variant
    concurrency: int


def _variant(where: str, **fields: object) -> Variant:
    """Build one sweep variant, naming the sweep point in a rule's message."""
    try:
        return Variant(**fields)
    except ValidationError as exc:
        msg = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise ConfigError(f"{where}: {msg}") from None


_SHARED = ("algorithm", "draft_model_path", "env", "extra_args")


def _shared(section: StepSweep | TopkSweep | GridSweep, *more: str) -> dict[str, Any]:
    """The fields a sweep section gives every one of its variants."""
    return {name: getattr(section, name) for name in (*_SHARED, *more)}


def step_sweep_variants(step: StepSweep) -> list[Variant]:
    """Baseline first, then one variant per num_steps at the sweep's topk."""
    common = _shared(step, "topk", "num_draft_tokens", "spec_v2")
    return [BASELINE] + [
        _variant(f"step_sweep num_steps={n}", num_steps=n, **common) for n in step.num_steps
    ]


def topk_sweep_variants(sweep: TopkSweep) -> list[Variant]:
    """Baseline first, then one variant per topk (topk=1 also on spec v2 when asked)."""
    common = _shared(sweep, "num_steps")
    variants = [BASELINE]
    for k in sweep.topk:
        # topk=1 leaves the draft tokens to sglang's forced chain (num_steps+1), exactly as a
        # step sweep does, so the matrix sweep sees the same variant once.
        draft = None if k == 1 and k not in sweep.num_draft_tokens else sweep.draft_tokens(k)
        point = {"topk": k, "num_draft_tokens": draft, **common}
        variants.append(_variant(f"topk_sweep topk={k}", **point))
        if k == 1 and sweep.spec_v2_topk1:
            variants.append(_variant("topk_sweep topk=1 spec_v2", spec_v2=True, **point))
    return variants


def grid_sweep_variants(grid: GridSweep) -> list[Variant]:
    """Baseline first, then every (num_steps, topk), topk-major: chains before trees."""
    common = _shared(grid)
    return [BASELINE] + [
        _variant(
            f"grid_sweep num_steps={n} topk={k}",
            num_steps=n,
            topk=k,
            num_draft_tokens=grid.draft_tokens(n, k),
            **common,
        )
        for k in grid.topk
        for n in grid.num_steps
    ]


def algorithm_sweep_variants(sweep: AlgorithmSweep) -> list[Variant]:
    """Baseline first, then per enabled algorithm (in `AlgorithmSweep.enabled`'s order) one
    variant per point of its settings; each checked by that algorithm's rules."""
    common = {"env": sweep.env, "extra_args": sweep.extra_args}
    variants = [BASELINE]
    for key in sweep.enabled:
        algorithm = key.upper()
        points: list[dict[str, Any]]
        if key in TREE_KEYS:
            tree = getattr(sweep, key)
            points = [
                {
                    "draft_model_path": tree.draft_model_path,
                    "num_steps": n,
                    "topk": tree.topk,
                    # a chain leaves them to sglang's rule, as the step sweep does, so the
                    # matrix sweep sees the same variant once
                    "num_draft_tokens": None
                    if tree.topk == 1
                    else draft_tokens_rule(n, tree.topk, tree.max_draft_tokens),
                }
                for n in tree.num_steps
            ]
        elif key == "ngram":
            ngram = sweep.ngram
            assert ngram is not None
            corpus = {"match_type": ngram.match_type}
            if ngram.external_corpus_path is not None:
                corpus["external_corpus_path"] = ngram.external_corpus_path
                corpus["external_sam_budget"] = ngram.external_sam_budget
            points = [
                {"num_draft_tokens": d, "ngram": {"max_bfs_breadth": w, **corpus}}
                for w in ngram.max_bfs_breadth
                for d in ngram.num_draft_tokens
            ]
        elif key == "uno":
            uno = sweep.uno
            assert uno is not None
            points = [
                {"uno_lora_path": uno.uno_lora_path, "num_draft_tokens": q}
                for q in uno.num_draft_tokens
            ]
        else:  # dflash, dspark
            block = getattr(sweep, key)
            points = [
                {"draft_model_path": block.draft_model_path, "block_size": b}
                for b in block.block_size
            ]
        for point in points:
            shown = " ".join(f"{k}={v}" for k, v in point.items() if k != "ngram" and v)
            where = f"algorithm_sweep {key}" + (f" {shown}" if shown else "")
            variants.append(_variant(where, algorithm=algorithm, **point, **common))
    return variants


SweepKind = Literal["step-sweep", "topk-sweep", "algorithm-sweep", "matrix-sweep"]


def sweep_variants(config: SweepConfig, kind: SweepKind = "matrix-sweep") -> list[Variant]:
    """The variants of a sweep, validated as a set.

    The step and topk presets expand only their own section, so one config file can
    hold both; the matrix sweep runs every section plus the explicit variants, each
    distinct variant once.
    """
    if kind == "step-sweep":
        if config.step_sweep is None:
            raise ConfigError("a step sweep needs a step_sweep section in the configuration")
        variants = step_sweep_variants(config.step_sweep)
    elif kind == "topk-sweep":
        if config.topk_sweep is None:
            raise ConfigError("a topk sweep needs a topk_sweep section in the configuration")
        variants = topk_sweep_variants(config.topk_sweep)
    elif kind == "algorithm-sweep":
        if config.algorithm_sweep is None:
            raise ConfigError(
                "an algorithm sweep needs an algorithm_sweep section in the configuration"
            )
        variants = algorithm_sweep_variants(config.algorithm_sweep)
    else:
        variants = []
        if config.step_sweep is not None:
            variants += step_sweep_variants(config.step_sweep)
        if config.topk_sweep is not None:
            variants += topk_sweep_variants(config.topk_sweep)
        if config.grid_sweep is not None:
            variants += grid_sweep_variants(config.grid_sweep)
        if config.algorithm_sweep is not None:
            variants += algorithm_sweep_variants(config.algorithm_sweep)
        variants += config.variants
        variants = [v for i, v in enumerate(variants) if v not in variants[:i]]
        if not variants:
            raise ConfigError(
                "nothing to run: add a step_sweep, topk_sweep, grid_sweep or algorithm_sweep "
                "section or a variants list"
            )
    check_variant_set(config, variants)
    return variants


def _shown(field: str, value: Any) -> str:
    """A field's value for a message: secret-looking env values and flag values hidden."""
    if field == "env":
        return repr(redact_env(value))
    if field == "extra_args":
        return repr(redact_args(value))
    return repr(value)


def _differences(group: list[Variant]) -> str:
    """What tells the variants of one name apart: each field that differs, with its values
    (of env only the entries that differ), or "identical"."""
    parts = []
    for field in Variant.model_fields:
        values = [getattr(v, field) for v in group]
        if all(x == values[0] for x in values):
            continue
        if field == "env":
            keys = sorted({k for env in values for k in env})
            # an entry set to the same value in each says nothing; one missing in some does
            differ = [k for k in keys if len({(k in env, env.get(k)) for env in values}) > 1]
            values = [{k: env[k] for k in differ if k in env} for env in values]
        parts.append(f"{field}: " + " vs ".join(_shown(field, x) for x in values))
    return "; ".join(parts) or "identical"


def _check_unique_labels(variants: list[Variant]) -> None:
    groups: dict[str, list[Variant]] = {}
    for v in variants:
        groups.setdefault(v.label, []).append(v)
    clashes = {label: group for label, group in sorted(groups.items()) if len(group) > 1}
    if clashes:
        detail = ", ".join(f"{label} ({_differences(g)})" for label, g in clashes.items())
        raise ConfigError(
            f"variant names must be unique; repeated: {detail}; "
            "set `name` on one of them to tell them apart (a given name always wins)"
        )


# sglang 0.5.23 (srt/arg_groups/speculative_hook.py): who refuses dp attention, pp > 1.
_NO_DP_ATTENTION = {
    "NGRAM": "Currently ngram speculative decoding does not support dp attention.",
    "STANDALONE": "Currently standalone speculative decoding does not support dp attention.",
    "UNO": "UNO does not support DP attention or context parallelism.",
}
_NO_PP = {
    "DFLASH": "Currently DFLASH speculative decoding only supports pp_size == 1.",
    "DSPARK": "DSpark pipeline parallelism requires PD prefill; decode and "
    "non-disaggregated serving require pp_size == 1.",
    "UNO": "UNO requires TP=PP=1.",
}


def _flag_value(args: list[str], *flags: str) -> str | None:
    """The value of the last of ``flags`` in ``args`` (``--f v`` or ``--f=v``); a bare flag
    gives "true"."""
    value = None
    for i, arg in enumerate(args):
        name, eq, given = arg.partition("=")
        if name in flags:
            nxt = args[i + 1] if i + 1 < len(args) else ""
            value = given if eq else (nxt if nxt and not nxt.startswith("-") else "true")
    return value


def _check_algorithms_on_server(config: SweepConfig, variants: list[Variant]) -> None:
    """sglang's rules of an algorithm that depend on the server: TP, PP, dp attention (read
    from the extra args, the only way specsweep passes them), and the adaptive search, whose
    model describes EAGLE-style trees only."""
    for v in variants:
        if v.algorithm is None:
            continue
        args = [*config.server.extra_args, *v.extra_args]
        if v.algorithm == "UNO" and config.server.tp != 1:
            raise ConfigError(
                f"{v.label}: UNO requires TP=PP=1 (sglang refuses it); server.tp is "
                f"{config.server.tp}"
            )
        if v.algorithm in _NO_DP_ATTENTION and _flag_value(args, "--enable-dp-attention"):
            raise ConfigError(f"{v.label}: {_NO_DP_ATTENTION[v.algorithm]} (sglang refuses it)")
        pp = _flag_value(args, "--pp-size", "--pp")
        if v.algorithm in _NO_PP and pp not in (None, "1"):
            raise ConfigError(f"{v.label}: {_NO_PP[v.algorithm]} (sglang refuses it)")
        if config.search.adaptive and v.algorithm in ("NGRAM", "DFLASH", "DSPARK", "UNO"):
            raise ConfigError(
                f"{v.label}: the adaptive search's model describes EAGLE-style trees (steps, "
                "topk); run NGRAM, DFLASH, DSPARK and UNO with search: grid"
            )


def check_variant_set(config: SweepConfig, variants: list[Variant]) -> None:
    _check_unique_labels(variants)
    _check_algorithms_on_server(config, variants)
    speculative = [v for v in variants if not v.is_baseline]
    if not speculative:
        return
    caps = {v.label: effective_max_running_requests(config.server, v) for v in variants}
    missing = [name for name, cap in caps.items() if cap is None]
    if missing:
        raise ConfigError(
            "set server.max_running_requests: with speculation sglang silently caps it at "
            f"{SGLANG_MRR_DEFAULT_WITH_SPECULATION} while the baseline keeps its own default, so "
            f"the comparison would be unfair above {SGLANG_MRR_DEFAULT_WITH_SPECULATION} "
            f"concurrent requests (unset for: {', '.join(missing)})"
        )
    if len(set(caps.values())) > 1:
        detail = ", ".join(f"{k}={v}" for k, v in caps.items())
        raise ConfigError(
            f"max_running_requests differs between variants ({detail}); "
            "baseline and speculative variants must run with the same cap"
        )


def plan_units(config: SweepConfig, kind: SweepKind = "matrix-sweep") -> list[Unit]:
    variants = sweep_variants(config, kind)
    return [Unit(variant, c) for variant in variants for c in config.load.concurrency]
