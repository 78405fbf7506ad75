"""A derived variant name tells apart every server that differs (issue 14, defect 3).

Servers that differ in extra_args, or in env entries that change the server, get a short
stable suffix (`-x` + 6 hex of a sha256); names without extra args/env stay as they were.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specsweep.config import Variant
from specsweep.config.file import load_config, parse_config
from specsweep.config.plan import check_variant_set, sweep_variants
from specsweep.errors import ConfigError
from tests.conftest import sim_config_data

ROOT = Path(__file__).resolve().parents[3]
COMPILED = ["--enable-torch-compile"]
# sha256 of {"env":{},"extra_args":["--enable-torch-compile"]} (sorted keys, no spaces):
# pinned, so a change of the rule shows here before it renames results history.
COMPILED_SUFFIX = "-x4d0fa3"


def spec(**kw):
    base = {"algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 2, "topk": 1}
    return Variant(**{**base, **kw})


def test_the_issue_cli_example_plans(tmp_path):
    # specsweep plan -c examples/sim.yaml --set 'step_sweep.extra_args=["--enable-torch-compile"]'
    cfg = load_config(
        ROOT / "examples/sim.yaml", ['step_sweep.extra_args=["--enable-torch-compile"]']
    )
    labels = [v.label for v in sweep_variants(cfg)]
    assert len(labels) == len(set(labels))
    assert labels == [
        "baseline",
        *(f"eagle3-s{n}-k1-d{n + 1}{COMPILED_SUFFIX}" for n in (1, 3, 5)),
        "eagle3-s3-k1-d4", "eagle3-s3-k1-d4-v2", "eagle3-s3-k2-d7", "eagle3-s3-k4-d13",
    ]  # fmt: skip


def test_a_step_sweep_alone_names_a_compiled_server_apart_from_a_plain_one(tmp_path):
    plain = parse_config(sim_config_data(tmp_path, 1))
    compiled = parse_config(sim_config_data(tmp_path, 1, step_sweep={"extra_args": COMPILED}))
    assert [v.label for v in sweep_variants(plain, "step-sweep")] == [
        "baseline", "eagle3-s2-k1-d3",
    ]  # fmt: skip
    assert [v.label for v in sweep_variants(compiled, "step-sweep")] == [
        "baseline", "eagle3-s2-k1-d3" + COMPILED_SUFFIX,
    ]  # fmt: skip


def test_names_without_extra_args_or_env_are_unchanged():
    assert Variant().label == "baseline"
    assert spec().label == "eagle3-s2-k1-d3"
    assert spec(spec_v2=True).label == "eagle3-s2-k1-d3-v2"
    assert spec(env={"SGLANG_ENABLE_SPEC_V2": "True"}).label == "eagle3-s2-k1-d3-v2"
    assert spec(num_steps=5, topk=4, num_draft_tokens=8).label == "eagle3-s5-k4-d8"
    assert Variant(algorithm="NEXTN", num_steps=1, topk=1).label == "nextn-s1-k1-d2"


def test_the_suffix_follows_what_changes_the_server():
    assert spec(extra_args=COMPILED).label == "eagle3-s2-k1-d3" + COMPILED_SUFFIX
    assert spec(spec_v2=True, extra_args=COMPILED).label == "eagle3-s2-k1-d3-v2" + COMPILED_SUFFIX
    assert Variant(extra_args=COMPILED).label == "baseline" + COMPILED_SUFFIX
    # a speculative variant says spec v2 with -v2; a baseline has no -v2, so there it counts
    assert spec(env={"SGLANG_ENABLE_SPEC_V2": "0"}).label == "eagle3-s2-k1-d3"
    assert Variant(env={"SGLANG_ENABLE_SPEC_V2": "True"}).label.startswith("baseline-x")
    assert spec(env={"SGLANG_X": "1"}).label == "eagle3-s2-k1-d3-x3bf7b5"
    # env order does not matter; extra_args are hashed in order; values count
    assert spec(env={"A": "1", "B": "2"}).label == spec(env={"B": "2", "A": "1"}).label
    two = ["--cuda-graph-max-bs", "8", "--disable-radix-cache"]
    assert spec(extra_args=two).label != spec(extra_args=[*two[2:], *two[:2]]).label
    assert spec(env={"SGLANG_X": "1"}).label != spec(env={"SGLANG_X": "2"}).label
    assert spec(env={"SGLANG_X": "1"}).label != spec(extra_args=["SGLANG_X", "1"]).label
    for v in (spec(extra_args=COMPILED, spec_v2=True), Variant(extra_args=COMPILED)):
        assert Variant(name=v.label).label == v.label  # a valid name (results file names)


def test_a_given_name_always_wins():
    assert spec(name="compiled", extra_args=COMPILED, env={"SGLANG_X": "1"}).label == "compiled"
    assert Variant(name="plain", extra_args=COMPILED).label == "plain"


def test_secrets_do_not_enter_the_name():
    plain = spec().label
    assert spec(env={"HF_TOKEN": "hf_abc"}).label == plain
    assert spec(env={"HF_TOKEN": "hf_abc"}).label == spec(env={"HF_TOKEN": "hf_xyz"}).label
    assert spec(env={"OPENAI_API_KEY": "sk-1", "DB_PASSWORD": "p"}).label == plain
    assert spec(env={"MY_SETTING": "secret:my-block"}).label == plain  # a reference
    assert spec(env={"HF_TOKEN": "secret:hf"}).label == plain
    # only the server-changing entries count, and a secret beside them changes nothing
    with_secret = spec(env={"SGLANG_X": "1", "HF_TOKEN": "hf_abc"}, extra_args=COMPILED)
    assert with_secret.label == spec(env={"SGLANG_X": "1"}, extra_args=COMPILED).label
    # the value of a secret flag in extra_args does not enter the name either
    a = spec(extra_args=["--api-key", "sk-one"]).label
    assert a == spec(extra_args=["--api-key", "sk-two"]).label != plain
    assert spec(extra_args=["--api-key=sk-one"]).label == spec(extra_args=["--api-key=x"]).label


_LABEL_IN_A_SUBPROCESS = """
from specsweep.config import Variant
print(Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1,
              extra_args=["--enable-torch-compile"], env={"SGLANG_X": "1", "A": "2"}).label)
"""


def test_the_suffix_is_stable_across_processes():
    here = spec(extra_args=COMPILED, env={"A": "2", "SGLANG_X": "1"}).label
    assert here.startswith("eagle3-s2-k1-d3-x") and len(here) == len("eagle3-s2-k1-d3-x") + 6
    seen = set()
    for seed in ("0", "1", "12345"):  # str hashes differ between these; sha256 must not
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", _LABEL_IN_A_SUBPROCESS],
            cwd=ROOT, env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
        seen.add(out.stdout.strip())
    assert seen == {here}


def _matrix(tmp_path, variants):
    data = sim_config_data(tmp_path, 1)
    data.pop("step_sweep")
    data["variants"] = variants
    return parse_config(data)


def test_a_clash_of_given_names_says_what_differs_and_how_to_settle_it(tmp_path):
    cfg = _matrix(tmp_path, [
        {},
        {"name": "mine", "algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 2,
         "topk": 1, "extra_args": COMPILED, "env": {"SGLANG_X": "1", "HF_TOKEN": "hf_abc"}},
        {"name": "mine", "algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 2,
         "topk": 1},
    ])  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        sweep_variants(cfg)
    msg = str(exc.value)
    assert "variant names must be unique; repeated: mine" in msg
    assert "extra_args: ['--enable-torch-compile'] vs []" in msg
    assert "env: {'HF_TOKEN': '***', 'SGLANG_X': '1'} vs {}" in msg
    assert "hf_abc" not in msg
    assert "num_steps" not in msg  # only the fields that differ
    assert "set `name` on one of them" in msg


def test_a_clash_of_derived_names_names_the_field(tmp_path):
    point = {"algorithm": "EAGLE3", "num_steps": 2, "topk": 1}
    cfg = _matrix(tmp_path, [{}, {**point, "draft_model_path": "a"},
                             {**point, "draft_model_path": "b"}])  # fmt: skip
    with pytest.raises(ConfigError, match="repeated: eagle3-s2-k1-d3") as exc:
        sweep_variants(cfg)
    assert "draft_model_path: 'a' vs 'b'" in str(exc.value)
    assert "set `name` on one of them" in str(exc.value)


def test_a_given_name_equal_to_a_derived_one(tmp_path):
    cfg = _matrix(tmp_path, [{}, {"name": "baseline"}])
    with pytest.raises(ConfigError, match="repeated: baseline") as exc:
        sweep_variants(cfg)
    assert "name: None vs 'baseline'" in str(exc.value)


def test_identical_variants_are_called_identical(tmp_path):
    cfg = _matrix(tmp_path, [{}])
    v = spec(extra_args=COMPILED)
    with pytest.raises(ConfigError, match=r"repeated: eagle3-s2-k1-d3-x\w{6}") as exc:
        check_variant_set(cfg, [Variant(), v, v])
    assert "identical" in str(exc.value)
    # the matrix sweep drops such a repeat before the check
    same = {"algorithm": "EAGLE3", "draft_model_path": "d", "num_steps": 2, "topk": 1}
    labels = [x.label for x in sweep_variants(_matrix(tmp_path, [{}, same, dict(same)]))]
    assert labels == ["baseline", "eagle3-s2-k1-d3"]
