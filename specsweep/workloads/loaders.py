"""Prompts from a user's file (JSONL, ShareGPT JSON, a replay of recorded traffic) or
the bundled set, and the workload a load spec sends.

Formats (``dataset_format``):

* ``jsonl``: one object a line, the prompt in ``prompt`` or ``text``, or ``messages``
  (an OpenAI chat list: the last user message's content is the prompt); optional
  ``category`` and ``output_len``.
* ``sharegpt``: a JSON list of ``{"conversations": [{"from": "human", "value": ...},
  ...]}``; the first human (or ``user``) turn of each, as sglang's bench_serving reads
  it. Entries without one are skipped.
* ``replay``: JSONL of recorded requests, ``{"input_len": n, "output_len": m}`` with an
  optional ``prompt``/``text`` and ``category``: every request is sent at its own lengths.
* ``auto``: a file whose first non-space character is ``[`` is ShareGPT, anything else
  JSONL; a JSONL file whose first record has ``input_len`` and no prompt, or has both
  ``input_len`` and ``output_len``, is a replay.

A file that cannot be used raises ``DatasetError`` naming the file and its first bad
record (``data.jsonl: line 7: not valid JSON (...)``), before any server is launched.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson

from specsweep.errors import DatasetError
from specsweep.workloads.bundled import load_builtin
from specsweep.workloads.records import PromptRecord, Workload

if TYPE_CHECKING:
    from specsweep.config import LoadSpec

Format = Literal["auto", "jsonl", "sharegpt", "replay"]
_TEXT_KEYS = ("prompt", "text")


def load_file(path: Path | str, fmt: Format = "auto") -> Workload:
    """The prompts of a user's file; read again only when its modification time changes."""
    path = Path(path).expanduser()
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        raise DatasetError(f"{path}: no such file") from None
    if not path.is_file():
        raise DatasetError(f"{path}: not a file")
    return _load_file(path, mtime, fmt)


@lru_cache(maxsize=8)
def _load_file(path: Path, mtime_ns: int, fmt: Format) -> Workload:
    del mtime_ns  # part of the cache key only: an edited file is read again
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8-sig")  # (a byte-order mark is not part of the JSON)
    except UnicodeDecodeError as exc:
        raise DatasetError(f"{path}: not UTF-8 text ({exc})") from None
    if not text.strip():
        raise DatasetError(f"{path}: no prompts (the file is empty)")
    auto = fmt == "auto"
    if auto:
        fmt = "sharegpt" if text.lstrip().startswith("[") else "jsonl"
    if fmt == "sharegpt":
        return Workload("sharegpt", path.name, _sharegpt(path, text))
    lines = _json_lines(path, text)
    if auto and _looks_like_replay(lines[0][1]):
        fmt = "replay"
    return Workload(
        fmt, path.name, _replay(path, lines) if fmt == "replay" else _jsonl(path, lines)
    )


def _looks_like_replay(first: dict[str, Any]) -> bool:
    has_text = any(k in first for k in (*_TEXT_KEYS, "messages"))
    return "input_len" in first and (not has_text or "output_len" in first)


def _json_lines(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) of every non-blank line."""
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}: line {n}: not valid JSON ({exc.msg} at column {exc.colno})"
            ) from None
        if not isinstance(item, dict):
            raise DatasetError(
                f"{path}: line {n}: expected a JSON object, got {type(item).__name__}"
            )
        out.append((n, item))
    return out


def _jsonl(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> tuple[PromptRecord, ...]:
    return tuple(
        PromptRecord(
            _prompt_of(path, n, item),
            _category(path, n, item),
            None,
            _length(path, n, item, "output_len", required=False),
            n,
        )
        for n, item in lines
    )


def _replay(path: Path, lines: list[tuple[int, dict[str, Any]]]) -> tuple[PromptRecord, ...]:
    records = []
    for n, item in lines:
        has_text = any(k in item for k in (*_TEXT_KEYS, "messages"))
        records.append(
            PromptRecord(
                _prompt_of(path, n, item) if has_text else None,
                _category(path, n, item),
                _length(path, n, item, "input_len", required=True),
                _length(path, n, item, "output_len", required=True),
                n,
            )
        )
    return tuple(records)


def _prompt_of(path: Path, n: int, item: dict[str, Any]) -> str:
    for key in _TEXT_KEYS:
        if key in item:
            return _non_empty(path, n, key, item[key])
    if "messages" in item:
        return _last_user_message(path, n, item["messages"])
    raise DatasetError(f'{path}: line {n}: no "prompt", "text" or "messages"')


def _non_empty(path: Path, n: int, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise DatasetError(f'{path}: line {n}: "{key}" must be a string, got {_kind(value)}')
    if not value.strip():
        raise DatasetError(f'{path}: line {n}: "{key}" is empty')
    return value


def _last_user_message(path: Path, n: int, messages: Any) -> str:
    if not isinstance(messages, list):
        raise DatasetError(f'{path}: line {n}: "messages" must be a list, got {_kind(messages)}')
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # OpenAI content parts: the text ones, joined
                parts = [p.get("text") for p in content if isinstance(p, dict)]
                content = "\n".join(p for p in parts if isinstance(p, str))
            return _non_empty(path, n, "messages", content)
    raise DatasetError(f'{path}: line {n}: "messages" has no user message')


def _category(path: Path, n: int, item: dict[str, Any]) -> str | None:
    value = item.get("category")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise DatasetError(f"{path}: line {n}: category must be a non-empty string, got {value!r}")
    return value.strip()


def _length(path: Path, n: int, item: dict[str, Any], key: str, *, required: bool) -> int | None:
    value = item.get(key)
    if value is None:
        if required:
            raise DatasetError(f"{path}: line {n}: a replay record needs {key}")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DatasetError(f"{path}: line {n}: {key} must be a positive integer, got {value!r}")
    return value


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _sharegpt(path: Path, text: str) -> tuple[PromptRecord, ...]:
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise DatasetError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of conversations")
    records = []
    for i, item in enumerate(data, start=1):
        turns = item.get("conversations") if isinstance(item, dict) else None
        for turn in turns if isinstance(turns, list) else ():
            if isinstance(turn, dict) and turn.get("from") in ("human", "user"):
                value = turn.get("value")
                if isinstance(value, str) and value.strip():
                    category = item.get("category")
                    category = category if isinstance(category, str) and category else None
                    records.append(PromptRecord(value, category, None, None, i))
                break  # the first human turn only, as sglang's bench_serving does
    if not records:
        raise DatasetError(
            f"{path}: no prompts (none of {len(data)} conversations has a non-empty "
            "first human turn)"
        )
    return tuple(records)


def resolve_workload(load: LoadSpec) -> Workload | None:
    """The prompts `load` sends: its dataset, the bundled set, or None for random prompts."""
    if load.dataset is not None:
        return load_file(load.dataset, load.dataset_format)
    if load.prompts == "builtin":
        return load_builtin()
    return None  # "random", and "auto" (resolved before the load generator sees it)


def workload_label(load: LoadSpec) -> str:
    """What the rows call the load's prompts: ``random-ids`` (random token ids on
    /generate), ``random-words`` (random prompts on the text endpoints), ``builtin``,
    or ``<format>:<file name>``."""
    workload = resolve_workload(load)
    if workload is not None:
        return workload.label
    return "random-ids" if load.resolved_endpoint() == "generate" else "random-words"


__all__ = [
    "DatasetError",
    "load_builtin",
    "load_file",
    "resolve_workload",
    "workload_label",
]
