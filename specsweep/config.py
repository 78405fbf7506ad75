"""What a user configures: pydantic models that double as Prefect UI forms.

Every rule that sglang enforces late (or silently overrides) is enforced here,
before anything is launched, so a sweep never burns an hour of GPU time on a
configuration that was wrong from the start.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from specsweep.errors import ConfigError
from specsweep.results.location import results_root_value

SpecAlgorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE"]
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
    "--served-model-name",
)
_OWNED_PREFIXES = ("--speculative-algorithm", "--speculative-draft-model", "--speculative-num-")
_OWNED_EXACT = ("--speculative-eagle-topk",)
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
)


def _check_extra_args(args: list[str]) -> list[str]:
    for arg in args:
        flag = arg.split("=", 1)[0]
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


class _TargetBase(_Model):
    name: str = Field("local", description="Label recorded with every result.")
    tolerate_foreign_gpu: bool = Field(
        False,
        description="The GPUs are shared: leave other users' GPU processes alone and count "
        "their memory as the baseline, instead of refusing to launch.",
    )


class LocalTarget(_TargetBase):
    """Servers run on this machine, as this user."""

    kind: Literal["local"] = "local"
    workdir: Path = Field(
        Path(".specsweep"),
        description="Where server logs and the launch state file live.",
    )


class SshTarget(_TargetBase):
    """Servers run on another host, reached over SSH (key auth, host key verified)."""

    kind: Literal["ssh"] = "ssh"
    name: str = Field(..., min_length=1, description="Label recorded with every result.")
    host: str = Field(..., min_length=1, description="Host name or address of the GPU host.")
    port: int = Field(22, ge=1, le=65535, description="SSH port.")
    user: str | None = Field(None, description="Remote user; default: ~/.ssh/config or $USER.")
    key_file: Path | None = Field(
        None, description="Private key file; default: ssh-agent and ~/.ssh/id_* keys."
    )
    key_secret: str | None = Field(
        None,
        description="Name of a Prefect Secret block holding the private key (instead of "
        "key_file). Never logged.",
    )
    passphrase_secret: str | None = Field(
        None, description="Name of a Prefect Secret block holding the key's passphrase."
    )
    verify_host_key: bool = Field(
        True,
        description="Check the host key against known_hosts and refuse unknown or changed "
        "keys. Turning this off trusts whoever answers at that address.",
    )
    known_hosts: Path | None = Field(
        None, description="known_hosts file to verify against; default ~/.ssh/known_hosts."
    )
    connect_timeout_s: float = Field(15.0, gt=0, description="TCP connect + handshake limit.")
    connect_attempts: PositiveInt = Field(
        4, description="Tries per connection (backoff 1, 2, 4 s...) when the host is unreachable."
    )
    command_timeout_s: float = Field(
        120.0, gt=0, description="Limit for short remote commands (cleanup, stop, tail)."
    )
    python: str = Field(
        "python3",
        description="Remote Python that runs specsweep's helper and load generator; the "
        "sglang venv's python has everything they need.",
    )
    workdir: str = Field(
        ".specsweep",
        min_length=1,
        description="Remote directory for logs, the launch record and specsweep's helper "
        "code; relative to the remote home.",
    )
    drive_from: Literal["target", "orchestrator"] = Field(
        "target",
        description="Where health checks and the load generator run: 'target' (on the GPU "
        "host, so the network is not measured) or 'orchestrator' (here, over the network; "
        "the server must listen on an address this machine reaches).",
    )

    @model_validator(mode="after")
    def _one_key_source(self) -> SshTarget:
        if self.key_file is not None and self.key_secret is not None:
            raise ValueError("set key_file or key_secret, not both")
        return self

    @model_validator(mode="after")
    def _files_exist(self) -> SshTarget:
        """Read on this machine when connecting: missing, they would fail only then."""
        files = {"key_file": self.key_file}
        if self.verify_host_key:
            files["known_hosts"] = self.known_hosts
        for field, path in files.items():
            if path is not None and not path.expanduser().is_file():
                raise ValueError(f"{field} {path}: no such file on this machine")
        return self

    @property
    def address(self) -> str:
        user = f"{self.user}@" if self.user else ""
        return f"{user}{self.host}:{self.port}"


def _target_kind(value: object) -> str:
    """A target section without `kind` is the local machine, as before SSH targets existed."""
    if isinstance(value, dict):
        return str(value.get("kind", "local"))
    return str(getattr(value, "kind", "local"))


Target = Annotated[
    Annotated[LocalTarget, Tag("local")] | Annotated[SshTarget, Tag("ssh")],
    Discriminator(_target_kind),
]

WILDCARD_HOSTS = ("0.0.0.0", "::", "")
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class ServerSpec(_Model):
    """How to start a server on the target; shared by every variant of a sweep."""

    backend: Literal["sglang", "simulator"] = Field(
        "sglang",
        description="'sglang' runs python -m sglang.launch_server; 'simulator' runs "
        "specsweep's SGLang simulator with the same flags.",
    )
    model_path: str = Field(..., min_length=1, description="--model-path (HF id or local dir).")
    host: str = Field("127.0.0.1", description="--host the server binds and specsweep calls.")
    port: int = Field(30000, ge=1, le=65535, description="--port.")
    tp: PositiveInt = Field(1, description="--tp-size.")
    python: str | None = Field(
        None,
        description="Python executable that has sglang installed (e.g. /opt/sglang/bin/python); "
        "default: python3 for sglang, this interpreter for the simulator.",
    )
    launch_prefix: list[str] = Field(
        default_factory=list,
        description="Argv placed before the python executable, e.g. ['numactl', '-N0'].",
    )
    max_running_requests: PositiveInt | None = Field(
        None,
        description="--max-running-requests for every variant. sglang resets it to 48 "
        "when speculation is on and it is unset, so comparisons need it set.",
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment.")
    extra_args: ExtraArgs = Field(
        default_factory=list, description="Further sglang flags, passed verbatim."
    )
    startup_timeout_s: float = Field(
        1800.0, gt=0, description="Give up waiting for readiness after this long."
    )
    start_attempts: PositiveInt = Field(
        2,
        description="Launches tried per variant when the server dies of a transient cause "
        "(port still held, NCCL/bind errors); a crash like CUDA OOM is never retried.",
    )

    @field_validator("model_path")
    @classmethod
    def _model_path_is_a_value(cls, v: str) -> str:
        return _check_path_value("model_path", v)

    @field_validator("python", "launch_prefix")
    @classmethod
    def _no_nul_in_argv(cls, v: str | list[str] | None) -> str | list[str] | None:
        for part in [v] if isinstance(v, str) else v or []:
            if "\0" in part:
                raise ValueError(f"{part!r} contains a NUL byte")
        return v

    @property
    def base_url(self) -> str:
        """The URL on the server's own host (a wildcard bind is reached on loopback)."""
        return self.url_via("127.0.0.1" if self.host in WILDCARD_HOSTS else self.host)

    def url_via(self, host: str) -> str:
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"


class Variant(_Model):
    """One server configuration: the baseline (no algorithm) or a speculative setup."""

    name: str | None = Field(
        None, description="Stable name; derived from the parameters when left out."
    )
    algorithm: SpecAlgorithm | None = Field(
        None, description="--speculative-algorithm; empty for the baseline."
    )
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: PositiveInt | None = Field(None, description="--speculative-num-steps.")
    topk: PositiveInt | None = Field(None, description="--speculative-eagle-topk.")
    num_draft_tokens: PositiveInt | None = Field(
        None,
        description="--speculative-num-draft-tokens; with topk=1 it defaults to num_steps+1.",
    )
    spec_v2: bool = Field(
        False, description=f"Run sglang's overlap spec path ({SPEC_V2_ENV}=True); needs topk=1."
    )
    max_running_requests: PositiveInt | None = Field(
        None, description="Overrides the server's --max-running-requests for this variant."
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for this variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("name")
    @classmethod
    def _name_is_safe(cls, v: str | None) -> str | None:
        if v is not None and not _VARIANT_NAME.fullmatch(v):  # no trailing newline
            raise ValueError(
                f"variant name {v!r}: use lowercase letters, digits and . _ = - (max 80)"
            )
        return v

    @field_validator("draft_model_path")
    @classmethod
    def _draft_path_is_a_value(cls, v: str | None) -> str | None:
        return v if v is None else _check_path_value("draft_model_path", v)

    @model_validator(mode="after")
    def _speculative_rules(self) -> Variant:
        spec_fields = {
            "draft_model_path": self.draft_model_path,
            "num_steps": self.num_steps,
            "topk": self.topk,
            "num_draft_tokens": self.num_draft_tokens,
        }
        if self.algorithm is None:
            given = [k for k, v in spec_fields.items() if v is not None]
            if given or self.spec_v2:
                raise ValueError(
                    f"{', '.join(given) or 'spec_v2'} set without an algorithm; "
                    "set algorithm (e.g. EAGLE3) or remove them for the baseline"
                )
            return self
        if self.algorithm in ("EAGLE", "EAGLE3", "STANDALONE") and not self.draft_model_path:
            raise ValueError(f"{self.algorithm} needs draft_model_path")
        if self.num_steps is None or self.topk is None:
            raise ValueError(
                "set num_steps and topk together (sglang fails with a bare AssertionError "
                "when steps is missing, and picks hidden defaults when all are missing)"
            )
        chain = self.num_steps + 1
        tree_max = self.num_steps * self.topk + 1
        if self.topk == 1 and self.num_draft_tokens not in (None, chain):
            raise ValueError(
                f"with topk=1 sglang forces num_draft_tokens = num_steps + 1 = {chain}; "
                f"got {self.num_draft_tokens}. Leave it out or set {chain}"
            )
        if self.topk > 1 and self.num_draft_tokens is None:
            raise ValueError(
                f"topk={self.topk} needs num_draft_tokens (between 2 and num_steps*topk+1 = "
                f"{tree_max})"
            )
        if self.num_draft_tokens is not None and self.num_draft_tokens > tree_max:
            raise ValueError(
                f"num_draft_tokens={self.num_draft_tokens} exceeds num_steps*topk+1 = {tree_max}: "
                "the draft tree cannot hold that many tokens"
            )
        if self.uses_spec_v2 and self.topk > 1:
            raise ValueError(
                f"{SPEC_V2_ENV} (the spec v2 overlap path) only supports topk=1; "
                f"got topk={self.topk}"
            )
        return self

    @property
    def is_baseline(self) -> bool:
        return self.algorithm is None

    @property
    def resolved_num_draft_tokens(self) -> int | None:
        if self.algorithm is None or self.num_steps is None:
            return None
        if self.topk == 1:
            return self.num_steps + 1
        return self.num_draft_tokens

    @property
    def uses_spec_v2(self) -> bool:
        return self.spec_v2 or _truthy(self.env.get(SPEC_V2_ENV))

    @property
    def label(self) -> str:
        """The variant's stable name: the given one, else derived from its parameters."""
        if self.name:
            return self.name
        if self.algorithm is None:
            return "baseline"
        label = (
            f"{self.algorithm.lower()}-s{self.num_steps}-k{self.topk}"
            f"-d{self.resolved_num_draft_tokens}"
        )
        return label + ("-v2" if self.uses_spec_v2 else "")


class LoadSpec(_Model):
    """The closed-loop load applied at each concurrency level."""

    concurrency: list[PositiveInt] = Field(
        [1, 2, 4, 8, 16, 32, 64], min_length=1, description="Concurrency levels, in order."
    )
    input_len: PositiveInt = Field(256, description="Prompt tokens per request (exact).")
    output_len: PositiveInt = Field(256, description="Output tokens per request (ignore_eos).")
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
        -1, ge=-1, description="Unmeasured requests before each level; -1 = one per stream."
    )
    seed: int = Field(0, description="Seed of the random prompt token ids.")
    request_timeout_s: float = Field(600.0, gt=0, description="Per-request timeout.")
    max_error_rate: float = Field(
        0.05, ge=0, le=1, description="A level with more failed requests is marked failed."
    )
    endpoint: Literal["generate", "completions", "chat"] = Field(
        "generate",
        description="'generate': sglang's native API with exact-length random token ids; "
        "'completions' / 'chat': the OpenAI-compatible endpoints with text prompts.",
    )
    dataset: Path | None = Field(
        None,
        description="Optional ShareGPT-style JSON file of prompts (text endpoints and "
        "generate); output length stays output_len.",
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
    def _repeat_bounds(self) -> LoadSpec:
        if self.target_cv is not None and self.max_repeats < max(self.repeats, 2):
            raise ValueError(
                "target_cv needs max_repeats >= 2 (and >= repeats): a spread needs two passes"
            )
        return self

    def num_requests(self, concurrency: int) -> int:
        if self.requests_per_level is not None:
            return self.requests_per_level
        return max(self.min_requests, self.requests_per_stream * concurrency)

    def num_warmup(self, concurrency: int) -> int:
        return concurrency if self.warmup_requests < 0 else self.warmup_requests


class StepSweep(_Model):
    """Baseline plus one speculative variant per num_steps, at a fixed topk."""

    algorithm: SpecAlgorithm = Field("EAGLE3", description="--speculative-algorithm.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: list[PositiveInt] = Field(
        [1, 2, 3], min_length=1, description="One variant per value (--speculative-num-steps)."
    )
    topk: PositiveInt = Field(1, description="--speculative-eagle-topk for every variant.")
    num_draft_tokens: PositiveInt | None = Field(
        None, description="Fixed draft tokens; with topk=1 it is num_steps+1 per variant."
    )
    spec_v2: bool = Field(False, description=f"Every variant on the overlap path ({SPEC_V2_ENV}).")
    env: EnvMap = Field(default_factory=dict, description="Extra environment for this variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("num_steps")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"num_steps repeat: {v}")
        return sorted(v)


DEFAULT_MAX_DRAFT_TOKENS = 16


class TopkSweep(_Model):
    """Baseline plus one speculative variant per topk, at a fixed num_steps.

    num_draft_tokens per topk: the `num_draft_tokens` mapping when it names the topk,
    else the rule: topk=1 is a chain (num_steps+1, sglang forces it); a wider tree
    drafts its full size num_steps*topk+1, capped at `max_draft_tokens`.
    """

    algorithm: SpecAlgorithm = Field("EAGLE3", description="--speculative-algorithm.")
    draft_model_path: str | None = Field(None, description="--speculative-draft-model-path.")
    num_steps: PositiveInt = Field(3, description="--speculative-num-steps, fixed for the sweep.")
    topk: list[PositiveInt] = Field(
        [1, 2, 4], min_length=1, description="One variant per value (--speculative-eagle-topk)."
    )
    num_draft_tokens: dict[PositiveInt, PositiveInt] = Field(
        default_factory=dict,
        description="Per-topk --speculative-num-draft-tokens, e.g. {4: 8}; topks left out "
        "follow the rule (chain for topk=1, full tree capped at max_draft_tokens).",
    )
    max_draft_tokens: PositiveInt = Field(
        DEFAULT_MAX_DRAFT_TOKENS,
        ge=2,
        description="Cap of the rule's num_draft_tokens for topk > 1.",
    )
    spec_v2_topk1: bool = Field(
        False,
        description=f"Also run topk=1 on the overlap path ({SPEC_V2_ENV}=True), beside the "
        "plain topk=1 variant. For sglang versions that have the variable (e.g. 0.5.9); "
        "0.5.23 removed it (v2 is the only path there).",
    )
    env: EnvMap = Field(default_factory=dict, description="Extra environment for every variant.")
    extra_args: ExtraArgs = Field(default_factory=list, description="Further sglang flags.")

    @field_validator("topk")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"topk repeat: {v}")
        return sorted(v)

    @model_validator(mode="after")
    def _mapping_matches(self) -> TopkSweep:
        stray = sorted(set(self.num_draft_tokens) - set(self.topk))
        if stray:
            raise ValueError(
                f"num_draft_tokens names topk {stray} that are not in topk {self.topk}"
            )
        if self.spec_v2_topk1 and 1 not in self.topk:
            raise ValueError(
                "spec_v2_topk1 adds a spec v2 twin of the topk=1 variant; add 1 to topk "
                "(spec v2 only supports topk=1)"
            )
        return self

    def draft_tokens(self, topk: int) -> int:
        """num_draft_tokens for one topk: the mapping, else the documented rule."""
        if topk in self.num_draft_tokens:
            return self.num_draft_tokens[topk]
        if topk == 1:
            return self.num_steps + 1
        return min(self.num_steps * topk + 1, self.max_draft_tokens)


class SweepConfig(_Model):
    """One sweep: where, which server, what load, which variants."""

    name: str = Field("sweep", description="Free label recorded with the run.")
    target: Target = Field(default_factory=LocalTarget)
    server: ServerSpec
    load: LoadSpec = Field(default_factory=LoadSpec)
    results_dir: Annotated[Path | str, BeforeValidator(results_root_value)] = Field(
        Path("results"),
        description="Root of the Parquet results: a local path (a Path), or a pyarrow "
        "filesystem URI such as s3://bucket/prefix or file:///abs/path (kept a string; "
        "credentials come from the environment, never the URI).",
    )
    step_sweep: StepSweep | None = Field(
        None, description="Vary num_steps (the step-sweep flow runs this section)."
    )
    topk_sweep: TopkSweep | None = Field(
        None, description="Vary topk (the topk-sweep flow runs this section)."
    )
    variants: list[Variant] = Field(
        default_factory=list,
        description="Explicit variants; the matrix-sweep flow runs them after the sections.",
    )
    stop_on_failure: bool = Field(
        False,
        description="Stop the sweep at the first failed variant (the rest are recorded as "
        "skipped). Default: record the failure and go on with the next variant.",
    )

    @model_validator(mode="after")
    def _reachable_from_orchestrator(self) -> SweepConfig:
        t = self.target
        if (
            isinstance(t, SshTarget)
            and t.drive_from == "orchestrator"
            and self.server.host in LOOPBACK_HOSTS
            and t.host not in LOOPBACK_HOSTS
        ):
            raise ValueError(
                f"target.drive_from=orchestrator, but the server listens on {self.server.host} "
                f"of {t.host}, which this machine cannot reach: set server.host to 0.0.0.0 "
                "(or the host's address), or drive_from=target"
            )
        return self
