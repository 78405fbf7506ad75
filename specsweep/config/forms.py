"""A sweep config as a flow's run form: the sections that flow reads, the target as typed
fields, seldom-changed settings folded; the config file's format and rules unchanged.

Prefect renders a flow's pydantic parameters as the UI's run form, one row per field
(110-130 px at 1440 px wide). SweepConfig rendered whole was about 8,800 px tall: every
sweep section whatever the flow, and its target, a discriminated union, as a raw JSON
editor. A form here is a view of a SweepConfig:

- the value a flow is given (a SweepConfig, the config file's mapping, or the form's own
  shape) is validated as a SweepConfig, the one set of rules, then shown in the form's shape;
- the sweep sections a flow does not read are left out (the step sweep's form has no
  topk_sweep); given anyway, they are validated and ignored, as the presets always did;
- the target is one flat model (kind, name, host, workdir; SSH settings in `ssh`);
- a section's seldom-changed settings sit in an optional group (`server.launch`,
  `load.sizing`, ...) that the form shows folded, one row, while all of them have their
  defaults (None); the config file keeps them flat.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from copy import copy
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args, get_origin

from pydantic import (
    BaseModel,
    BeforeValidator,
    Field,
    ModelWrapValidatorHandler,
    PlainSerializer,
    PrivateAttr,
    WithJsonSchema,
    create_model,
    model_validator,
)
from pydantic_core import to_jsonable_python

from specsweep.config.algorithm_sweep import AlgorithmSweep
from specsweep.config.common import _Model
from specsweep.config.load import LoadSpec
from specsweep.config.search import SearchSpec
from specsweep.config.server import ServerSpec
from specsweep.config.sweep import (
    GridSweep,
    PolicyVerification,
    StepSweep,
    SweepConfig,
    TopkSweep,
)
from specsweep.config.targets import LocalTarget, SshTarget
from specsweep.config.variant import Variant

__all__ = [
    "FOLDS",
    "AlgorithmSweepForm",
    "MatrixSweepForm",
    "StepSweepForm",
    "SweepForm",
    "TargetForm",
    "TopkSweepForm",
    "sweep_config",
]


def _numbers(value: Any) -> Any:
    """ "1, 2, 4" (or "1 2 4") as [1, 2, 4]; anything else as it is, for the rules to judge."""
    if isinstance(value, str):
        words = [w for w in re.split(r"[,\s]+", value.strip()) if w]
        return [int(w) if re.fullmatch(r"[+-]?\d+", w) else w for w in words]
    return value


def _numbers_text(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


# A list of whole numbers (concurrency levels, steps, topk) as one text row of the form,
# "1, 2, 4, 8": the UI renders a list as one input per item (7 default levels: ~430 px).
# A list is accepted too (the config file's shape); the config's rules judge the numbers.
NumbersText = Annotated[
    list[Any],
    BeforeValidator(_numbers),
    PlainSerializer(_numbers_text, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "examples": ["1, 2, 4, 8"]}),
]


def _is_numbers(annotation: Any) -> bool:
    args = get_args(annotation)
    return (
        get_origin(annotation) is list and len(args) == 1 and int in (args[0], *get_args(args[0]))
    )


def _field(model: type[BaseModel], name: str) -> tuple[Any, Any]:
    """A field of `model` as create_model takes it: type, default, limits, description; a
    list of whole numbers as one text row (NumbersText)."""
    info = copy(model.model_fields[name])
    if _is_numbers(info.annotation):
        info.metadata = []  # the list's limits are the config's to check
        default = info.get_default(call_default_factory=True)
        if isinstance(default, list):  # the form's default as the text it shows
            info.default, info.default_factory = _numbers_text(default), None
            info.validate_default = True
        return NumbersText, info
    return info.annotation, info


def _default(model: type[BaseModel], name: str) -> Any:
    return to_jsonable_python(model.model_fields[name].get_default(call_default_factory=True))


@dataclass(frozen=True)
class Fold:
    """A config model shown as its main fields, then one optional group per set of the
    others; None: every field of the group has its default. A group holds field names or,
    nested, a Fold of its own (its main fields, then its own folded groups), so that the
    form at its defaults is a few rows however many settings a section has."""

    source: type[BaseModel]
    main_names: str  # space-separated field names
    group_names: Mapping[str, tuple[str, str | Fold]]  # group -> (what it holds, its fields)

    @property
    def main(self) -> list[str]:
        return self.main_names.split()

    @property
    def groups(self) -> dict[str, tuple[str, Fold]]:
        """Each group as a Fold of its own (a plain list of names: a Fold of main fields)."""
        return {
            g: (what, part if isinstance(part, Fold) else Fold(self.source, part, {}))
            for g, (what, part) in self.group_names.items()
        }

    @property
    def names(self) -> list[str]:
        """Every field of the source this fold shows, at any depth."""
        return [*self.main, *(f for _, part in self.groups.values() for f in part.names)]

    def model(self, name: str, doc: str | None = None) -> type[_Model]:
        fields: dict[str, Any] = {f: _field(self.source, f) for f in self.main}
        for group, (what, part) in self.groups.items():
            sub = part.model(f"{name}{group.title()}", what)
            fields[group] = (sub | None, Field(None, description=f"{what} Empty: defaults."))
        return create_model(  # type: ignore[call-overload]
            name, __base__=_Model, __doc__=doc or self.source.__doc__, **fields
        )

    def split(self, flat: Mapping[str, Any]) -> dict[str, Any]:
        """The config file's section (every field given) in the form's shape."""
        out = {f: self._shown(f, flat[f]) for f in self.main if f in flat}
        for group, (_, part) in self.groups.items():
            changed = any(f in flat and flat[f] != _default(self.source, f) for f in part.names)
            out[group] = part.split(flat) if changed else None
        return out

    def join(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The form's shape back to the config file's (a flat mapping is left as it is)."""
        out = {
            k: _numbers(v) if k in self.main and self._numbers(k) else v
            for k, v in data.items()
            if k not in self.groups
        }
        for group, (_, part) in self.groups.items():
            out.update(part.join(data.get(group) or {}))
        return out

    def _numbers(self, name: str) -> bool:
        return _is_numbers(self.source.model_fields[name].annotation)

    def _shown(self, name: str, value: Any) -> Any:
        """A main field's value as the form shows it (a list of numbers as text)."""
        return _numbers_text(value) if self._numbers(name) and isinstance(value, list) else value


SERVER = Fold(
    ServerSpec,
    "model_path",
    {
        "more": (
            "sglang or the simulator, the server's Python, port, tensor parallelism, running "
            "requests, start timeout, environment and sglang flags; the launch's details.",
            Fold(
                ServerSpec,
                "backend python port tp max_running_requests startup_timeout_s env extra_args",
                {
                    "launch": (
                        "The server process: bind address, argv prefix, context length, "
                        "start attempts, stop grace, the sglang version when the target "
                        "cannot say it.",
                        "host launch_prefix context_length start_attempts stop_grace_s "
                        "sglang_version",
                    ),
                },
            ),
        ),
    },
)
LOAD = Fold(
    LoadSpec,
    "concurrency prompts",
    {
        "more": (
            "The requests' shape, requests per level; sizing, text prompts, precision and "
            "measuring to decide.",
            Fold(
                LoadSpec,
                "input_len output_len requests_per_stream min_requests",
                {
                    "sizing": (
                        "Requests per level, warmup, timeouts, the error budget, the seed "
                        "and further load shapes.",
                        "requests_per_level warmup_requests phases request_timeout_s "
                        "max_error_rate seed shapes",
                    ),
                    "text": (
                        "Text prompts: your own dataset, its format, prompt length, the endpoint.",
                        "dataset dataset_format prompt_length endpoint",
                    ),
                    "precision": (
                        "Repeated passes per level, or measuring until an interval is "
                        "narrow enough.",
                        "repeats target_cv max_repeats target_ci max_level_s max_requests",
                    ),
                    "deciding": (
                        "The run's drift calibration, and the server time spent measuring "
                        "more where a level's decision is still open.",
                        "calibrate_drift decide_budget_s decide_launch_share",
                    ),
                },
            ),
        ),
    },
)
_SWEEP_MAIN = "draft_model_path num_steps"
STEP = Fold(
    StepSweep,
    _SWEEP_MAIN,
    {
        "more": (
            "The algorithm, topk, draft tokens, spec v2, environment, sglang flags.",
            "algorithm topk num_draft_tokens spec_v2 env extra_args",
        )
    },
)
TOPK = Fold(
    TopkSweep,
    "draft_model_path topk",
    {
        "more": (
            "The algorithm, steps, draft tokens per topk and their cap, spec v2 at topk 1, "
            "environment, sglang flags.",
            "algorithm num_steps num_draft_tokens max_draft_tokens spec_v2_topk1 env extra_args",
        )
    },
)
GRID = Fold(
    GridSweep,
    "draft_model_path num_steps topk",
    {
        "more": (
            "The algorithm, draft token cap, environment, sglang flags.",
            "algorithm max_draft_tokens env extra_args",
        )
    },
)
ALGORITHM = Fold(
    AlgorithmSweep,
    "eagle3 ngram dflash",
    {
        "more": (
            "The other algorithms (EAGLE, NEXTN, STANDALONE, FROZEN_KV_MTP, DSPARK, UNO), "
            "environment, sglang flags.",
            "eagle nextn standalone frozen_kv_mtp dspark uno env extra_args",
        )
    },
)
FOLDS: dict[str, Fold] = {
    "server": SERVER, "load": LOAD, "step_sweep": STEP, "topk_sweep": TOPK, "grid_sweep": GRID,
    "algorithm_sweep": ALGORITHM,
}  # fmt: skip

# --- the target: one flat model for both kinds ----------------------------------------

_TARGET_MAIN = ("kind", "name", "host", "workdir", "tolerate_foreign_gpu")
SshOptions = create_model(  # type: ignore[call-overload]
    "SshOptions",
    __base__=_Model,
    __doc__="How to reach an SSH target: port, user, keys, host key check, timeouts.",
    **{f: _field(SshTarget, f) for f in SshTarget.model_fields if f not in _TARGET_MAIN},
)


class TargetMore(_Model):
    """The target's label in results, where logs go on it, a foreign GPU process, how to
    reach an SSH host."""

    name: str = Field("local", min_length=1, description="Label recorded with every result.")
    workdir: str = Field(
        ".specsweep", min_length=1, description="Logs and launch record (ssh: in the remote home)."
    )
    tolerate_foreign_gpu: bool = _field(LocalTarget, "tolerate_foreign_gpu")[1]
    ssh: SshOptions | None = Field(  # type: ignore[valid-type]
        None, description="ssh: port, user, keys, host key check, timeouts. Empty: defaults."
    )


_TARGET_MORE_DEFAULTS = TargetMore().model_dump(mode="json")


class TargetForm(_Model):
    """Where servers run: this machine, or a GPU host over SSH."""

    kind: Literal["local", "ssh"] = Field("local", description="local: this machine; ssh: host.")
    host: str | None = Field(None, description="ssh: host name or address of the GPU host.")
    more: TargetMore | None = Field(None, description=f"{TargetMore.__doc__} Empty: defaults.")

    @staticmethod
    def split(flat: Mapping[str, Any]) -> dict[str, Any]:
        out = {f: flat[f] for f in ("kind", "host") if f in flat}
        rest = {f: v for f, v in flat.items() if f not in _TARGET_MAIN}
        ssh = rest if any(v != _default(SshTarget, f) for f, v in rest.items()) else None
        more = {f: flat[f] for f in ("name", "workdir", "tolerate_foreign_gpu") if f in flat}
        changed = ssh is not None or any(v != _TARGET_MORE_DEFAULTS[f] for f, v in more.items())
        return {**out, "more": {**more, "ssh": ssh} if changed else None}

    @staticmethod
    def join(data: Mapping[str, Any]) -> dict[str, Any]:
        out = {
            k: v
            for k, v in data.items()
            if k not in ("more", "ssh") and not (k == "host" and v is None)
        }
        more = dict(data.get("more") or {})
        ssh = more.pop("ssh", None) or data.get("ssh") or {}
        return {**out, **more, **ssh}


# --- the forms --------------------------------------------------------------------------


def _join(data: Mapping[str, Any]) -> dict[str, Any]:
    """A form-shaped (or already flat) mapping in the config file's shape."""
    out = dict(data)
    if isinstance(out.get("target"), Mapping):
        out["target"] = TargetForm.join(out["target"])
    for section, fold in FOLDS.items():
        if isinstance(out.get(section), Mapping):
            out[section] = fold.join(out[section])
    if "more" in out:
        out.update(out.pop("more") or {})
    if out.get("search", "") is None:
        del out["search"]  # the form's empty search: the default grid
    return out


def sweep_config(value: object) -> SweepConfig:
    """The SweepConfig of a flow's `config`: a SweepConfig, a form, or a mapping in the
    config file's shape or a form's. Validated by SweepConfig's rules, nothing else."""
    if isinstance(value, SweepConfig):
        return value
    if isinstance(value, SweepForm):
        return value.sweep
    if isinstance(value, Mapping):
        return SweepConfig.model_validate(_join(value))
    return SweepConfig.model_validate(value)  # its error says what it expected


_DEFAULT_SEARCH = SearchSpec().model_dump(mode="json")
_RUN_MORE = ("name", "results_dir", "stop_on_failure", "verify_policy")


class RunMore(_Model):
    """The run's label, the search, where results go, whether a failed variant stops the
    sweep, verifying the exported policy."""

    name: str = _field(SweepConfig, "name")[1]
    search: SearchSpec | None = Field(
        None,
        description="Empty: grid, every variant. " + SweepConfig.model_fields["search"].description,
    )
    results_dir: str = Field(
        "results", description=SweepConfig.model_fields["results_dir"].description
    )
    stop_on_failure: bool = _field(SweepConfig, "stop_on_failure")[1]
    verify_policy: PolicyVerification | None = Field(
        None, description=SweepConfig.model_fields["verify_policy"].description
    )


class SweepForm(_Model):
    """Base of the forms: what every sweep flow reads, in the order the form shows it.
    Subclasses add their sweep sections; `SECTIONS` names them."""

    SECTIONS: ClassVar[tuple[str, ...]] = ()
    _sweep: SweepConfig = PrivateAttr()

    @property
    def sweep(self) -> SweepConfig:
        """The validated config: what the flow runs."""
        return self._sweep

    @model_validator(mode="wrap")
    @classmethod
    def _via_sweep_config(cls, value: Any, handler: ModelWrapValidatorHandler[SweepForm]) -> Any:
        if isinstance(value, cls):
            return value
        config = sweep_config(value)
        form = handler(cls.values_of(config))
        form._sweep = config
        return form

    @classmethod
    def values_of(cls, config: SweepConfig) -> dict[str, Any]:
        """The form's values for a config (a deployment's defaults): JSON types."""
        data = config.model_dump(mode="json")
        out: dict[str, Any] = {"target": TargetForm.split(data["target"])}
        for key in ("server", "load", *cls.SECTIONS):
            fold, value = FOLDS.get(key), data[key]
            out[key] = fold.split(value) if fold is not None and value is not None else value
        search = None if data["search"] == _DEFAULT_SEARCH else data["search"]
        more = {k: data[k] for k in _RUN_MORE}
        changed = search is not None or any(v != _default(SweepConfig, k) for k, v in more.items())
        return {**out, "more": {**more, "search": search} if changed else None}


def _form(name: str, doc: str, sections: dict[str, Any]) -> type[SweepForm]:
    """A form with SweepConfig's fields in the form's order, `sections` after the load."""
    own = SweepConfig.model_fields
    load = LOAD.model("LoadSpec")
    fields: dict[str, Any] = {
        "target": (TargetForm, Field(default_factory=TargetForm)),
        "server": (SERVER.model("ServerSpec"), Field(description=own["server"].description)),
        "load": (load, Field(default_factory=load, description=own["load"].description)),
        **sections,
        "more": (RunMore | None, Field(None, description=f"{RunMore.__doc__} Empty: defaults.")),
    }
    form = create_model(name, __base__=SweepForm, __doc__=doc, **fields)  # type: ignore[call-overload]
    form.SECTIONS = tuple(sections)
    return form


def _section(key: str, fold: Fold, title: str) -> tuple[Any, Any]:
    description = SweepConfig.model_fields[key].description
    return fold.model(title) | None, Field(None, description=description)


StepSweepForm = _form(
    "StepSweepConfig",
    "A step sweep: target, server, load and the step_sweep section.",
    {"step_sweep": _section("step_sweep", STEP, "StepSweep")},
)
TopkSweepForm = _form(
    "TopkSweepConfig",
    "A topk sweep: target, server, load and the topk_sweep section.",
    {"topk_sweep": _section("topk_sweep", TOPK, "TopkSweep")},
)
AlgorithmSweepForm = _form(
    "AlgorithmSweepConfig",
    "An algorithm sweep: target, server, load and the algorithm_sweep section.",
    {"algorithm_sweep": _section("algorithm_sweep", ALGORITHM, "AlgorithmSweep")},
)
MatrixSweepForm = _form(
    "MatrixSweepConfig",
    "Every sweep section and the explicit variants.",
    {
        "step_sweep": _section("step_sweep", STEP, "StepSweep"),
        "topk_sweep": _section("topk_sweep", TOPK, "TopkSweep"),
        "grid_sweep": _section("grid_sweep", GRID, "GridSweep"),
        "algorithm_sweep": _section("algorithm_sweep", ALGORITHM, "AlgorithmSweep"),
        "variants": (
            list[Variant],
            Field(
                default_factory=list, description=SweepConfig.model_fields["variants"].description
            ),
        ),
    },
)
