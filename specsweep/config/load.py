"""The closed-loop load applied at each concurrency level."""

from __future__ import annotations

from itertools import product
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from specsweep.config.common import PositiveInt, _Model

# Distinct prompt seeds per shape (a prime, far from the level offsets of the seed).
_SHAPE_SEED_STRIDE = 7919

PromptSource = Literal["auto", "random", "builtin"]
DatasetFormat = Literal["auto", "jsonl", "sharegpt", "replay"]


class Shape(_Model):
    """One load shape: prompt and output tokens per request (a cell's first key)."""

    input_len: PositiveInt = Field(..., description="Prompt tokens per request.")
    output_len: PositiveInt = Field(..., description="Output tokens per request (ignore_eos).")

    @property
    def label(self) -> str:
        """The shape's name in rows, reports and file names: in512-out256."""
        return shape_label(self.input_len, self.output_len)


def shape_label(input_len: int, output_len: int) -> str:
    return f"in{int(input_len)}-out{int(output_len)}"


class LoadSpec(_Model):
    """The closed-loop load applied at each concurrency level."""

    concurrency: list[PositiveInt] = Field(
        [1, 2, 4, 8, 16, 32, 64], min_length=1, description="Concurrency levels, in order."
    )
    input_len: PositiveInt | list[PositiveInt] = Field(
        256,
        description="Prompt tokens per request (random ids: exact; text prompts: fitted, see "
        "prompt_length). A list sweeps every input length x output length as shapes.",
    )
    output_len: PositiveInt | list[PositiveInt] = Field(
        256, description="Output tokens per request (ignore_eos); a list sweeps shapes."
    )
    shapes: list[Shape] = Field(
        default_factory=list,
        description="Load shapes measured on the same server launch, in this order, each "
        "over every concurrency level; empty: the one shape of input_len x output_len.",
    )
    prompts: PromptSource = Field(
        "auto",
        description="'random': random token ids (random words on the text endpoints); "
        "'builtin': the bundled real prompts (chat, code, reasoning, summarisation); "
        "'auto': builtin for a speculative sweep on real sglang, random otherwise. "
        "A dataset file replaces both.",
    )
    dataset_format: DatasetFormat = Field(
        "auto",
        description='Format of `dataset`: \'jsonl\' (one {"prompt"|"text"|"messages", '
        "\"category\"?} per line), 'sharegpt' (JSON list of conversations), 'replay' "
        '(recorded traffic: JSONL of {"input_len", "output_len", "prompt"?}); '
        "'auto' tells them apart by the file's content.",
    )
    prompt_length: Literal["fit", "natural"] = Field(
        "fit",
        description="Text prompts: 'fit' brings each to the shape's input_len (real text "
        "from the same set is prepended, or the start cut), 'natural' sends them as they "
        "are (one shape; input_len is then not a dimension).",
    )
    requests_per_level: PositiveInt | None = Field(
        None,
        description="Requests measured per level; default max(min_requests, "
        "requests_per_stream * concurrency).",
    )
    requests_per_stream: PositiveInt = Field(
        4, description="Used when requests_per_level is unset."
    )
    min_requests: PositiveInt = Field(8, description="Used when requests_per_level is unset.")
    warmup_requests: int = Field(
        -1, ge=-1, description="Unmeasured requests before each pass; -1 = one per stream."
    )
    phases: Literal["spread", "together"] = Field(
        "spread",
        description="'spread': the last C warmup requests (run before every pass) ask for "
        "1/C .. C/C of the output length, so the streams enter each measured pass at phases "
        "spread over a request, as users' requests arrive. 'together': every warmup "
        "request at full length, the streams in step, as sglang.bench_serving runs (a "
        "deterministic server then keeps its requests ending in waves, which flatters it at "
        "high concurrency).",
    )
    seed: int = Field(0, description="Seed of the random prompt token ids.")
    request_timeout_s: float = Field(600.0, gt=0, description="Per-request timeout.")
    max_error_rate: float = Field(
        0.05, ge=0, le=1, description="A level with more failed requests is marked failed."
    )
    endpoint: Literal["auto", "generate", "completions", "chat"] = Field(
        "auto",
        description="'generate': sglang's native API (random prompts as exact-length token "
        "ids); 'completions' / 'chat': the OpenAI-compatible endpoints ('chat' applies the "
        "model's chat template on the server); 'auto': chat for text prompts, generate for "
        "random ones.",
    )
    dataset: Path | None = Field(
        None,
        description="Your own prompts (see dataset_format): JSONL, ShareGPT JSON or a "
        "replay of recorded traffic; replaces `prompts`.",
    )
    repeats: PositiveInt = Field(
        1, description="Measured passes per level; the row reports their spread (CV)."
    )
    target_cv: float | None = Field(
        None,
        gt=0,
        description="Repeat a level until the coefficient of variation of its output "
        "throughput is at most this (e.g. 0.03), up to max_repeats.",
    )
    max_repeats: PositiveInt = Field(5, description="Upper bound when target_cv is set.")
    target_ci: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Measure a level until the 95% interval of its output throughput is "
        "at most this wide on each side, relative (0.02: ±2%), adding passes of the level's "
        "requests up to max_level_s / max_requests. Unset: fixed counts.",
    )
    max_level_s: float = Field(
        900.0, gt=0, description="With target_ci: no further pass starts after this long."
    )
    calibrate_drift: bool = Field(
        True,
        description="Before the first level on a target, measure this run's drift (the "
        "pass-to-pass spread of throughput that no pass sees from inside) with 10 passes at "
        "concurrency 4, and 10 at the top level when it is 4x higher or more; every level's "
        "throughput interval uses it (interpolated between the two). false: assume +-1.5%.",
    )
    max_requests: PositiveInt | None = Field(
        None,
        description="With target_ci: the most requests measured at a level; default 10 "
        "passes' worth.",
    )
    decide_budget_s: float = Field(
        20.0,
        ge=0,
        description="Server seconds the whole run may spend measuring more while a "
        "variant's server is up, where a level's decision is still open (a config leads "
        "beyond the tie margin, its interval reaching below it): more passes there, pooled "
        "with the level's, plus decide_launch_share of the run's launches. 0: measure "
        "exactly the planned passes.",
    )
    decide_launch_share: float = Field(
        0.25,
        ge=0,
        le=1,
        description="With decide_budget_s > 0, the budget grows by this share of every "
        "launch-to-ready second the run's servers took: settling a decision while a server "
        "is up saves a relaunch, so where a launch takes minutes (8.5 on the seeds' GPU box) "
        "a level's extra passes are worth up to a quarter of one. 0: decide_budget_s alone.",
    )

    @model_validator(mode="before")
    @classmethod
    def _shapes_from_lists(cls, data: Any) -> Any:
        """input_len/output_len lists become shapes (their product, inputs outermost)."""
        if not isinstance(data, dict):
            return data
        ins, outs = data.get("input_len"), data.get("output_len")
        if not isinstance(ins, list) and not isinstance(outs, list):
            shapes = data.get("shapes")
            if isinstance(shapes, list) and shapes:  # input_len/output_len: the first shape's
                first = shapes[0]
                get = first.get if isinstance(first, dict) else lambda k: getattr(first, k, None)
                return {**data, "input_len": get("input_len"), "output_len": get("output_len")}
            return data
        if data.get("shapes"):
            raise ValueError("give shapes, or lists of input_len/output_len, not both")
        ins = ins if isinstance(ins, list) else [256 if ins is None else ins]
        outs = outs if isinstance(outs, list) else [256 if outs is None else outs]
        if not ins or not outs:
            raise ValueError("input_len and output_len lists need at least one value")
        shapes = [{"input_len": i, "output_len": o} for i, o in product(ins, outs)]
        return {**data, "shapes": shapes, "input_len": ins[0], "output_len": outs[0]}

    @field_validator("concurrency")
    @classmethod
    def _distinct_sorted(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"concurrency levels repeat: {v}")
        return sorted(v)

    @field_validator("dataset")
    @classmethod
    def _dataset_exists(cls, v: Path | None) -> Path | None:
        """Checked now: otherwise the first level would find out, after a server launch."""
        if v is not None and not v.is_file():
            raise ValueError(f"dataset {v}: no such file on this machine")
        return v

    @model_validator(mode="after")
    def _one_shape_source(self) -> LoadSpec:
        """After validation input_len/output_len are the first shape's (plain ints)."""
        labels = [s.label for s in self.shapes]
        if len(set(labels)) != len(labels):
            raise ValueError(f"shapes repeat: {labels}")
        if self.prompt_length == "natural" and len(self.shapes) > 1:
            raise ValueError(
                "prompt_length 'natural' sends prompts as they are: input length cannot be a "
                "dimension; use prompt_length 'fit' to sweep shapes"
            )
        if self.dataset is None and self.dataset_format != "auto":
            raise ValueError("dataset_format needs a dataset")
        if self.dataset is not None and self.prompts == "random":
            raise ValueError("prompts 'random' and a dataset exclude each other")
        return self

    @model_validator(mode="after")
    def _repeat_bounds(self) -> LoadSpec:
        if self.target_cv is not None and self.max_repeats < max(self.repeats, 2):
            raise ValueError(
                "target_cv needs max_repeats >= 2 (and >= repeats): a spread needs two passes"
            )
        if self.target_cv is not None and self.target_ci is not None:
            raise ValueError(
                "set target_ci or target_cv, not both: target_ci (the interval of one level's "
                "throughput) supersedes target_cv (the spread between passes)"
            )
        return self

    def shape_list(self) -> list[Shape]:
        """The shapes this load measures, in order (one when none are given)."""
        if self.shapes:
            return list(self.shapes)
        return [Shape(input_len=self.input_len, output_len=self.output_len)]

    def for_shape(self, shape: Shape) -> LoadSpec:
        """The load of one shape: what a level (a cell) is measured with.

        Every shape after the first gets its own prompt seed: with the same seed a longer
        shape's prompts would start with a shorter one's (the same random ids, the same
        filler), and the server's prefix cache would serve that start from the earlier
        shape's levels. The first shape keeps `seed`, so a single-shape load is unchanged."""
        labels = [s.label for s in self.shape_list()]
        index = labels.index(shape.label) if shape.label in labels else 0
        return self.model_copy(
            update={
                "input_len": shape.input_len,
                "output_len": shape.output_len,
                "shapes": [],
                "seed": self.seed + _SHAPE_SEED_STRIDE * index,
            }
        )

    @property
    def shape(self) -> Shape:
        """The first shape (the only one of a single-shape load)."""
        return self.shape_list()[0]

    @property
    def multi_shape(self) -> bool:
        return len(self.shapes) > 1

    def text_prompts(self) -> bool:
        """Whether requests carry text (a dataset or the bundled set), not random prompts."""
        return self.dataset is not None or self.prompts == "builtin"

    def resolved_endpoint(self) -> Literal["generate", "completions", "chat"]:
        if self.endpoint != "auto":
            return self.endpoint
        return "chat" if self.text_prompts() else "generate"

    def max_passes(self, concurrency: int) -> int:
        """The most passes a level can run (what a disk or time estimate must allow for)."""
        if self.target_cv is not None:
            return self.max_repeats
        if self.target_ci is not None:
            return max(
                self.repeats, self.max_requests_at(concurrency) // self.num_requests(concurrency)
            )
        return self.repeats

    def max_requests_at(self, concurrency: int) -> int:
        """With target_ci: the cap on measured requests at this level."""
        if self.max_requests is not None:
            return max(self.max_requests, self.num_requests(concurrency))
        return 10 * self.num_requests(concurrency)

    def num_requests(self, concurrency: int) -> int:
        if self.requests_per_level is not None:
            return self.requests_per_level
        return max(self.min_requests, self.requests_per_stream * concurrency)

    def num_warmup(self, concurrency: int) -> int:
        return concurrency if self.warmup_requests < 0 else self.warmup_requests
