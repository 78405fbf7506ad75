"""What every config model shares: strict frozen models, and the checks of values that
become argv elements or environment variables of a launched server."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from specsweep.errors import ConfigError

# Every algorithm sglang 0.5.23's parser accepts (srt/speculative/spec_info.py's
# SpeculativeAlgorithm, plus NEXTN, its alias of EAGLE); the rules of each are in
# config/algorithms.py. TreeAlgorithm: those that draft a tree of num_steps x topk (the
# step, topk and grid sweeps vary them).
SpecAlgorithm = Literal[
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP", "NGRAM", "DFLASH", "DSPARK", "UNO"
]
TreeAlgorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "FROZEN_KV_MTP"]
PositiveInt = Annotated[int, Field(ge=1)]

SPEC_V2_ENV = "SGLANG_ENABLE_SPEC_V2"
SGLANG_MRR_DEFAULT_WITH_SPECULATION = 48

# Flags whose value specsweep owns: passing them through extra_args would make
# the recorded configuration lie about what actually ran.
_OWNED_FLAGS = (
    "--model-path",
    "--host",
    "--port",
    "--tp",
    "--tp-size",
    "--max-running-requests",
    "--context-length",
    "--served-model-name",
)
_OWNED_PREFIXES = (
    "--speculative-algorithm",
    "--speculative-draft-model",
    "--speculative-num-",
    "--speculative-adaptive",
    "--speculative-ngram-",
    "--speculative-dflash-block-size",
    "--speculative-dspark-block-size",
)
_OWNED_EXACT = ("--speculative-eagle-topk", "--uno-lora-path")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VARIANT_NAME = re.compile(r"^[a-z0-9][a-z0-9._=-]{0,79}$")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=-]{0,127}")


def check_run_id(run_id: str) -> str:
    """A run id names folders (results, logs, on an SSH host too): no '/', no '..',
    nothing a shell or a file name could misread."""
    if not _RUN_ID.fullmatch(run_id):
        raise ConfigError(
            f"run id {run_id!r}: use letters, digits and . _ = - (not first), at most 128"
        )
    return run_id


class SchemaAlsoAccepts:
    """A field annotation: its JSON schema (the Prefect UI's form, a deployment's parameter
    check) also admits these shorthands, which a BeforeValidator turns into the real type.
    Validation stays on the real type, so errors name only what is wrong."""

    def __init__(self, *schemas: dict[str, Any]) -> None:
        self.schemas = schemas

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        inner = handler(core_schema)
        options = inner.pop("anyOf", None) or [dict(inner)]
        rest = {k: v for k, v in inner.items() if k not in ("$ref", "type", "items", "properties",
                "additionalProperties", "required", "$defs")}  # fmt: skip
        return {**rest, "anyOf": [*self.schemas, *options]}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def _stringify_env(v: object) -> object:
    """YAML turns `CUDA_VISIBLE_DEVICES: 0` into an int; the environment only has strings."""
    if isinstance(v, dict):
        return {k: str(x) if isinstance(x, int | float | bool) else x for k, x in v.items()}
    return v


def _check_env(env: dict[str, str]) -> dict[str, str]:
    for key in env:
        if not _ENV_NAME.fullmatch(key):  # match() would let a trailing newline through
            raise ValueError(f"environment variable name {key!r} is not a valid name")
        if "\0" in env[key]:  # no process can be given it: refuse now, not at launch
            raise ValueError(f"environment variable {key}: the value contains a NUL byte")
    return env


# sglang's parser (argparse) also takes aliases and unambiguous abbreviations of a flag
# (`--model`, `--max-running`): refused like the flags they stand for.
_OWNED_ALIASES = ("--model", "--speculative-draft-model")
_OWNED_SPELLED = (
    *_OWNED_FLAGS,
    *_OWNED_EXACT,
    *_OWNED_ALIASES,
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-steps",
    "--speculative-num-draft-tokens",
    "--speculative-adaptive",
    "--speculative-adaptive-config",
    "--speculative-dflash-block-size",
    "--speculative-dspark-block-size",
    # NGRAM's (config/algorithms.py NgramSettings.args): an abbreviation shorter than
    # their common prefix (`--speculative-ng`) stands for them too
    "--speculative-ngram-min-bfs-breadth",
    "--speculative-ngram-max-bfs-breadth",
    "--speculative-ngram-match-type",
    "--speculative-ngram-max-trie-depth",
    "--speculative-ngram-capacity",
    "--speculative-ngram-external-corpus-path",
    "--speculative-ngram-external-sam-budget",
    "--speculative-ngram-external-corpus-max-tokens",
)


def _check_extra_args(args: list[str]) -> list[str]:
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag.startswith("--speculative-adaptive"):
            raise ValueError(
                f"{flag} is set by specsweep from the variant's `adaptive` field (true for "
                "sglang's default tiers, or {tiers: {...}}), so the variant's name, checks "
                "and results say it runs adaptive; set that instead of passing the flag"
            )
        owned = flag in _OWNED_FLAGS or flag in _OWNED_EXACT or flag in _OWNED_ALIASES
        if owned or flag.startswith(_OWNED_PREFIXES):
            raise ValueError(
                f"{flag} is set by specsweep from the server/variant fields; "
                "set the matching field instead of passing it in extra_args"
            )
        stands_for = [o for o in _OWNED_SPELLED if len(flag) > 3 and o.startswith(flag)]
        if flag.startswith("--") and stands_for:
            raise ValueError(
                f"{flag} abbreviates {stands_for[0]}, which specsweep sets from the "
                "server/variant fields; set the matching field instead"
            )
        if "\0" in arg:
            raise ValueError(f"extra_args item {arg!r} contains a NUL byte")
    return args


def _check_path_value(what: str, value: str) -> str:
    """A path that becomes one argv element after its flag: a NUL cannot be passed to a
    process, and a leading dash would make sglang's parser read it as a flag."""
    if "\0" in value:
        raise ValueError(f"{what} contains a NUL byte")
    if value.startswith("-"):
        raise ValueError(
            f"{what} {value!r} starts with '-': sglang would read it as a flag; "
            "use ./ before a relative path"
        )
    return value


EnvMap = Annotated[dict[str, str], BeforeValidator(_stringify_env), AfterValidator(_check_env)]
ExtraArgs = Annotated[list[str], AfterValidator(_check_extra_args)]
