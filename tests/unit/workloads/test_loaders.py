"""Users' prompt files: JSONL, ShareGPT and replay, format detection, and the errors that
name the file and the first bad record."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specsweep.config import LoadSpec
from specsweep.errors import ConfigError
from specsweep.workloads import (
    DatasetError,
    PromptRecord,
    Workload,
    load_builtin,
    load_file,
    resolve_workload,
    workload_label,
)


def jsonl(path: Path, *rows: Any) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def sharegpt(path: Path, items: list[Any]) -> Path:
    path.write_text(json.dumps(items))
    return path


def conv(*turns: tuple[str, str]) -> dict[str, Any]:
    return {"conversations": [{"from": who, "value": text} for who, text in turns]}


def test_jsonl_reads_prompt_text_and_messages(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "mine.jsonl",
        {"prompt": "first prompt", "category": "chat", "output_len": 12},
        "",  # blank lines are skipped, and line numbers still count them
        {"text": "second prompt"},
        {"messages": [{"role": "user", "content": "old question"},
                      {"role": "assistant", "content": "answer"},
                      {"role": "user", "content": "follow-up question"}], "category": "code"},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                   {"type": "text", "text": "part two"}]}]},
    )  # fmt: skip
    w = load_file(path)
    assert (w.kind, w.name, w.label) == ("jsonl", "mine.jsonl", "jsonl:mine.jsonl")
    assert w.records == (
        PromptRecord("first prompt", "chat", None, 12, 1),
        PromptRecord("second prompt", None, None, None, 3),
        PromptRecord("follow-up question", "code", None, None, 4),
        PromptRecord("part one\npart two", None, None, None, 5),
    )
    assert w.categories == ("chat", "code")
    assert load_file(path, "jsonl") == w


def test_sharegpt_takes_first_human_turns_and_skips_the_rest(tmp_path: Path) -> None:
    path = sharegpt(tmp_path / "share.json", [
        conv(("human", "question 0"), ("gpt", "a"), ("human", "not this one")),
        conv(("gpt", "no human turn")),
        conv(("human", "   ")),
        {"id": "no conversations"},
        conv(("system", "be nice"), ("user", "question 1")),
        {**conv(("human", "question 2")), "category": "chat"},
    ])  # fmt: skip
    w = load_file(path)
    assert (w.kind, w.label) == ("sharegpt", "sharegpt:share.json")
    assert [(r.text, r.category, r.line) for r in w.records] == [
        ("question 0", None, 1),
        ("question 1", None, 5),
        ("question 2", "chat", 6),
    ]
    assert load_file(path, "sharegpt") == w


@pytest.mark.parametrize(
    ("first", "kind"),
    [
        ({"input_len": 100, "output_len": 20}, "replay"),
        ({"input_len": 100}, "replay"),  # no prompt: lengths are all it has (then it fails)
        ({"input_len": 100, "output_len": 20, "prompt": "recorded"}, "replay"),
        ({"prompt": "hi", "output_len": 20}, "jsonl"),
        ({"prompt": "hi", "input_len": 100}, "jsonl"),  # a prompt and only its length
    ],
)
def test_auto_tells_a_replay_from_jsonl_by_the_first_record(
    tmp_path: Path, first: dict[str, Any], kind: str
) -> None:
    path = jsonl(tmp_path / "f.jsonl", first, {"input_len": 5, "output_len": 6, "prompt": "x"})
    if kind == "replay" and "output_len" not in first:
        with pytest.raises(DatasetError, match="line 1: a replay record needs output_len"):
            load_file(path)
        return
    assert load_file(path).kind == kind


def test_replay_records(tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "traffic.jsonl",
        {"input_len": 812, "output_len": 95, "category": "chat"},
        {"input_len": 40, "output_len": 300, "text": "a recorded prompt"},
    )
    w = load_file(path)
    assert (w.kind, w.label) == ("replay", "replay:traffic.jsonl")
    assert w.records == (
        PromptRecord(None, "chat", 812, 95, 1),
        PromptRecord("a recorded prompt", None, 40, 300, 2),
    )
    # Named explicitly, a file with prompts and lengths is read either way.
    assert load_file(path, "replay") == w
    with pytest.raises(DatasetError, match='line 1: no "prompt", "text" or "messages"'):
        load_file(path, "jsonl")


def test_a_byte_order_mark_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "bom.json").write_bytes(
        b"\xef\xbb\xbf" + json.dumps([conv(("human", "hi"))]).encode()
    )
    assert load_file(tmp_path / "bom.json").kind == "sharegpt"
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + b'{"prompt": "hi"}\n')
    assert load_file(tmp_path / "bom.jsonl").records[0].text == "hi"
    (tmp_path / "latin1.jsonl").write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(DatasetError, match="not UTF-8 text"):
        load_file(tmp_path / "latin1.jsonl")


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"data\.json: no such file"):
        load_file(tmp_path / "data.json")
    with pytest.raises(DatasetError, match="not a file"):
        load_file(tmp_path)
    for content in ("", "  \n\n \t\n"):
        (tmp_path / "data.jsonl").write_text(content)
        with pytest.raises(DatasetError, match=r"data\.jsonl: no prompts \(the file is empty\)"):
            load_file(tmp_path / "data.jsonl")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"prompt": "ok"}', '{"prompt": "ok"}', "{not json"], r"line 3: not valid JSON \("),
        (['{"prompt": "ok"}', '["a", "list"]'], "line 2: expected a JSON object, got list"),
        (['{"prompt": "ok"}', "{}", '{"prompt": "ok"}'], 'line 2: no "prompt", "text" or'),
        (['{"prompt": "   "}'], 'line 1: "prompt" is empty'),
        (['{"text": 42}'], 'line 1: "text" must be a string, got int'),
        (['{"messages": [{"role": "assistant", "content": "hi"}]}'], "has no user message"),
        (['{"messages": "hello"}'], '"messages" must be a list, got str'),
        (
            ['{"prompt": "ok", "output_len": -4}'],
            "line 1: output_len must be a positive integer, got -4",
        ),
        (['{"prompt": "ok", "output_len": 0}'], "output_len must be a positive integer, got 0"),
        (['{"prompt": "ok", "output_len": "64"}'], "positive integer, got '64'"),
        (['{"prompt": "ok", "output_len": 2.5}'], "got 2.5"),
        (['{"prompt": "ok", "output_len": true}'], "got True"),
        (['{"prompt": "ok", "category": ""}'], "category must be a non-empty string"),
        (['{"input_len": 10, "output_len": 5}', '{"input_len": 0, "output_len": 5}'],
         "line 2: input_len must be a positive integer, got 0"),
        (['{"input_len": 10, "output_len": 5}', '{"output_len": 5}'],
         "line 2: a replay record needs input_len"),
    ],
)  # fmt: skip
def test_bad_jsonl_names_the_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=message) as info:
        load_file(path)
    assert str(info.value).startswith(f"{path}: ")
    assert isinstance(info.value, ValueError) and isinstance(info.value, ConfigError)


def test_bad_sharegpt(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('[{"conversations": ')
    with pytest.raises(DatasetError, match=r"a\.json: not valid JSON"):
        load_file(tmp_path / "a.json")
    (tmp_path / "b.json").write_text('{"not": "a list"}')
    with pytest.raises(DatasetError, match="expected a JSON list of conversations"):
        load_file(tmp_path / "b.json", "sharegpt")
    sharegpt(tmp_path / "c.json", [conv(("gpt", "only the model")), conv(("human", ""))])
    with pytest.raises(DatasetError, match=r"c\.json: no prompts \(none of 2 conversations"):
        load_file(tmp_path / "c.json")
    sharegpt(tmp_path / "d.json", [])
    with pytest.raises(DatasetError, match="no prompts"):
        load_file(tmp_path / "d.json")


def test_an_edited_file_is_read_again(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "p.jsonl", {"prompt": "before"})
    assert load_file(path).records[0].text == "before"
    assert load_file(str(path)) is load_file(path)  # cached
    jsonl(path, {"prompt": "after"})
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert load_file(path).records[0].text == "after"


def test_resolve_workload_and_labels(tmp_path: Path) -> None:
    path = jsonl(tmp_path / "mine.jsonl", {"prompt": "hello"})
    assert resolve_workload(LoadSpec()) is None
    assert resolve_workload(LoadSpec(prompts="random")) is None
    assert resolve_workload(LoadSpec(prompts="builtin")) is load_builtin()
    assert resolve_workload(LoadSpec(dataset=path)) == load_file(path)
    assert workload_label(LoadSpec()) == "random-ids"
    assert workload_label(LoadSpec(prompts="random", endpoint="generate")) == "random-ids"
    assert workload_label(LoadSpec(endpoint="chat")) == "random-words"
    assert workload_label(LoadSpec(prompts="random", endpoint="completions")) == "random-words"
    assert workload_label(LoadSpec(prompts="builtin")) == "builtin"
    assert workload_label(LoadSpec(prompts="builtin", endpoint="generate")) == "builtin"
    assert workload_label(LoadSpec(dataset=path)) == "jsonl:mine.jsonl"
    replay = jsonl(tmp_path / "r.jsonl", {"input_len": 3, "output_len": 4})
    assert workload_label(LoadSpec(dataset=replay)) == "replay:r.jsonl"


def test_workload_label_and_categories_of_a_hand_made_workload() -> None:
    w = Workload(
        "random", "random", (PromptRecord(None, "b", 1, 1, 1), PromptRecord(None, "a", 1, 1, 2))
    )
    assert w.label == "random" and w.categories == ("a", "b")
