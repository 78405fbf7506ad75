"""A terminal of 100 columns: commands break between arguments and still run as one."""

from __future__ import annotations

import shlex

from specsweep.cli.wrap import command_lines, sentence_lines

COMMAND = (
    "env SGLANG_LOG_MS=1 SPECSWEEP_SIM_TIME_SCALE=0.07 /opt/venv/bin/python -m "
    "sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --host 127.0.0.1 "
    "--port 31000 --tp-size 1 --speculative-algorithm EAGLE3 --speculative-draft-model-path "
    "'/models/my eagle3 draft' --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4 --speculative-adaptive --speculative-adaptive-config "
    "tiers.json"
)


def test_a_long_command_fits_100_columns_and_the_shell_reads_the_same_words():
    text = command_lines("deploy:", COMMAND)
    lines = text.splitlines()
    assert len(lines) > 1 and max(map(len, lines)) <= 100
    assert all(line.endswith(" \\") for line in lines[:-1])
    assert lines[0].startswith("deploy: env ")
    # pasted into a shell, the continuation lines join into the same argv
    joined = text.removeprefix("deploy:").replace(" \\\n", " ")
    assert shlex.split(joined) == shlex.split(COMMAND)
    # a flag stays beside its value, the quoted path whole
    assert any("--speculative-draft-model-path '/models/my eagle3 draft'" in ln for ln in lines)


def test_a_word_wider_than_the_line_is_never_cut():
    path = "/" + "x" * 150
    lines = command_lines("deploy:", f"python -m sglang.launch_server --model-path {path}")
    assert path in lines and len(lines.splitlines()) == 2


def test_sentences_wrap_at_words():
    text = sentence_lines("adaptive: " + "tiers 1:[3] 5:[0] " * 12 + "end.")
    assert max(map(len, text.splitlines())) <= 100 and text.splitlines()[1].startswith("  ")
    assert " ".join(text.split()) == " ".join(
        ("adaptive: " + "tiers 1:[3] 5:[0] " * 12 + "end.").split()
    )
