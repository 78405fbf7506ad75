"""Load a sweep configuration from YAML plus ``key.path=value`` overrides.

Validation errors become one readable message per problem, with the dotted
path of the field, so a typo is caught before any server is launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from specsweep.config import SweepConfig
from specsweep.errors import ConfigError


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Set ``a.b.c=value`` in nested dicts; the value is parsed as YAML (so 1, [1,2], true)."""
    if "=" not in assignment:
        raise ConfigError(f"--set {assignment!r}: expected key.path=value")
    key, raw = assignment.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"--set {assignment!r}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {assignment!r}: value is not valid YAML: {exc}") from None
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {assignment!r}: {part} is not a section")
        node = child
    node[parts[-1]] = value


_TARGET_TAGS = ("local", "ssh")


def format_validation_error(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = list(err["loc"])
        if loc[:1] == ["target"] and loc[1:2] and loc[1] in _TARGET_TAGS:
            del loc[1]  # pydantic's union tag, not a key the user wrote
        where = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see examples/*.yaml)"
        elif err["type"] == "union_tag_invalid":
            where += ".kind"
            msg = f"{err['ctx']['tag']!r} is not a target kind; use {' or '.join(_TARGET_TAGS)}"
        lines.append(f"  {where}: {msg}")
    return "invalid configuration:\n" + "\n".join(lines)


def parse_config(data: dict[str, Any]) -> SweepConfig:
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc)) from None


def read_yaml_mapping(path: Path | str, what: str = "config") -> dict[str, Any]:
    """A YAML file whose top level is a mapping, or a ConfigError saying what is wrong."""
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        raise ConfigError(f"{what} file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    return loaded


def load_config(path: Path | str | None, overrides: Sequence[str] = ()) -> SweepConfig:
    data: dict[str, Any] = read_yaml_mapping(path) if path is not None else {}
    for assignment in overrides:
        apply_override(data, assignment)
    return parse_config(data)
