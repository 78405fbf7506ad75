"""Adaptive variants: the three ways to write them, sglang's rules before any launch,
stable names, the command line and the file the server reads (issue 15, part 1)."""

import hashlib
import json

import pytest
from pydantic import ValidationError

from specsweep.config import ServerSpec, Variant
from specsweep.config.adaptive import DEFAULT_TIERS, AdaptiveSpec
from specsweep.config.command import build_launch_command
from specsweep.config.versions import check_version, needs_version_check, parse_version
from specsweep.errors import UnsupportedByVersion

TIERS = {1: [3], 8: [1], 32: [0]}


def eagle3(**kw):
    return Variant(**{"algorithm": "EAGLE3", "draft_model_path": "d", **kw})


def test_adaptive_true_runs_sglangs_default_tiers_and_says_so():
    v = eagle3(adaptive=True)
    assert v.label == "eagle3-adaptive-default"
    assert v.adaptive is not None and v.adaptive.uses_default_tiers
    assert v.adaptive.tier_steps == DEFAULT_TIERS
    # sglang starts at the middle of the candidates' union [0, 1, 3, 5, 7]
    assert (v.resolved_num_steps, v.resolved_topk, v.resolved_num_draft_tokens) == (3, 1, 4)
    argv = build_launch_command(ServerSpec(model_path="m"), v).argv
    assert argv[-1] == "--speculative-adaptive"
    assert "--speculative-adaptive-config" not in argv


def test_tiers_get_a_name_from_their_content_and_a_file_on_the_target():
    v = eagle3(adaptive={"tiers": TIERS})
    canonical = (
        '{"1":{"candidate_steps":[3]},"32":{"candidate_steps":[0]},"8":{"candidate_steps":[1]}}'
    )
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    assert v.adaptive.config_json() == canonical
    assert v.label == f"eagle3-adaptive-{digest[:6]}"
    cmd = build_launch_command(ServerSpec(model_path="m"), v, workdir="/w/")
    i = cmd.argv.index("--speculative-adaptive-config")
    assert cmd.argv[i + 1] == f"/w/adaptive/{digest[:12]}.json"
    assert cmd.argv[cmd.argv.index("--speculative-num-steps") + 1] == "1"  # middle of [0,1,3]
    assert cmd.env["SGLANG_LOG_MS"] == "1"  # the step trace needs ms timestamps
    # the same tiers written another way: the same variant, the same name
    again = eagle3(adaptive={"tiers": {"32": {"candidate_steps": [0]}, 8: [1, 1], "1": [3]}})
    assert again.label == v.label


def test_a_tier_field_changes_the_name_and_reaches_the_file():
    plain = eagle3(adaptive={"tiers": {1: [1, 3]}})
    tuned = eagle3(adaptive={"tiers": {1: {"candidate_steps": [1, 3], "ema_alpha": 0.5}}})
    shared = eagle3(adaptive={"tiers": {1: [1, 3]}, "defaults": {"update_interval": 3}})
    assert len({plain.label, tuned.label, shared.label}) == 3
    assert tuned.adaptive.sglang_config() == {"1": {"candidate_steps": [1, 3], "ema_alpha": 0.5}}
    assert shared.adaptive.sglang_config() == {
        "update_interval": 3, "1": {"candidate_steps": [1, 3]},
    }  # fmt: skip


def test_a_config_file_is_read_checked_and_named_by_its_content(tmp_path):
    path = tmp_path / "tiers.json"
    path.write_text(json.dumps({
        "1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]},
        "32": {"candidate_steps": [0]}, "_specsweep": {"run_id": "r1"},
    }))  # fmt: skip
    from_file = eagle3(adaptive=str(path))
    assert from_file.label == eagle3(adaptive={"tiers": TIERS}).label  # comments ignored
    assert from_file.adaptive.file == str(path)


@pytest.mark.parametrize(
    ("adaptive", "field", "says"),
    [
        ({"tiers": {"a": [1]}}, "adaptive.tiers", "tier key 'a' is not a batch size"),
        ({"tiers": {1.5: [1]}}, "adaptive.tiers", "is not a batch size"),
        ({"tiers": {-1: [1]}}, "adaptive.tiers", "is not a batch size"),
        ({"tiers": {1: []}}, "adaptive.tiers.1.candidate_steps", "at least 1 item"),
        ({"tiers": {1: [-2]}}, "adaptive.tiers.1.candidate_steps.0", "greater than or equal to 0"),
        ({"tiers": {}}, "adaptive", "adaptive.tiers is empty"),
        ({"tiers": {1: [1]}, "defaults": {"ema": 1}}, "adaptive", "'ema' is not a tier field"),
        ({"tiers": {1: {"candidate_steps": [1], "ema_alpha": 2}}}, "ema_alpha", "or equal to 1"),
    ],
)  # fmt: skip
def test_malformed_tiers_name_the_field(adaptive, field, says):
    with pytest.raises(ValidationError) as exc:
        eagle3(adaptive=adaptive)
    text = str(exc.value)
    assert field in text and says in text


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"topk": 2, "num_steps": 3, "num_draft_tokens": 4}, "needs topk=1 (a chain); got topk=2"),
        ({"num_steps": 2}, "num_steps=2 is not among the tiers' candidate steps [0, 1, 3, 5, 7]"),
        ({"num_steps": 3, "num_draft_tokens": 6}, "num_draft_tokens = num_steps + 1 = 4"),
        ({"algorithm": "STANDALONE"}, "EAGLE or EAGLE3 only; with algorithm STANDALONE"),
    ],
)
def test_sglangs_adaptive_rules_are_checked_before_launch(fields, says):
    with pytest.raises(ValidationError) as exc:
        eagle3(adaptive=True, **fields)
    assert says in str(exc.value)


def test_adaptive_without_an_algorithm_is_refused():
    with pytest.raises(ValidationError, match="adaptive set without an algorithm"):
        Variant(adaptive=True)


def test_the_raw_flag_in_extra_args_is_refused_so_names_never_lie():
    with pytest.raises(ValidationError, match="set by specsweep from the variant's `adaptive`"):
        eagle3(num_steps=2, topk=1, extra_args=["--speculative-adaptive"])
    with pytest.raises(ValidationError, match="--speculative-adaptive-config is set by specsweep"):
        eagle3(num_steps=2, topk=1, extra_args=["--speculative-adaptive-config=x.json"])


def test_a_missing_or_bad_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(ValidationError, match=r"nope\.json: No such file"):
        eagle3(adaptive=str(tmp_path / "nope.json"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"1": {"candidate_steps": [1]}, "emaalpha": 0.3}')
    with pytest.raises(ValidationError, match=r"keys \['emaalpha'\] are neither batch sizes"):
        eagle3(adaptive=str(bad))
    bad.write_text('{"ema_alpha": 0.3}')
    with pytest.raises(ValidationError, match="no batch-size keys"):
        eagle3(adaptive=str(bad))


def test_initial_steps_zero_is_allowed_only_adaptive():
    pinned = eagle3(adaptive={"tiers": {1: [0]}})
    assert pinned.resolved_num_steps == 0 and pinned.resolved_num_draft_tokens == 1
    with pytest.raises(ValidationError, match="num_steps must be at least 1"):
        eagle3(num_steps=0, topk=1)


def test_an_explicit_start_other_than_the_middle_is_in_the_name():
    assert eagle3(adaptive=True, num_steps=3).label == "eagle3-adaptive-default"
    assert eagle3(adaptive=True, num_steps=7).label == "eagle3-adaptive-default-s7"
    assert eagle3(adaptive=True, spec_v2=True).label == "eagle3-adaptive-default-v2"


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("0.5.23", (0, 5, 23)), ("0.5.11rc1", (0, 5, 11)), ("0.5.23-sim", (0, 5, 23)),
     ("0.5.9.post2", (0, 5, 9)), ("v0.6", (0, 6, 0)), ("unknown", None)],
)  # fmt: skip
def test_versions_parse(text, parsed):
    assert parse_version(text) == parsed


def test_a_version_without_the_flag_is_refused_naming_the_one_that_has_it():
    variants = [Variant(), eagle3(adaptive=True), eagle3(num_steps=2, topk=1)]
    assert needs_version_check(variants)
    assert not needs_version_check([Variant(), eagle3(num_steps=2, topk=1)])
    check_version(variants, "0.5.11", "target t")  # the first version that has it
    with pytest.raises(UnsupportedByVersion) as exc:
        check_version(variants, "0.5.9", "target t")
    assert str(exc.value) == (
        "target t has sglang 0.5.9: eagle3-adaptive-default needs --speculative-adaptive, "
        "which sglang has from 0.5.11. Upgrade sglang there, or remove those variants"
    )
    v2 = [eagle3(adaptive=True, spec_v2=True)]
    check_version(v2, "0.5.23", "target t")
    with pytest.raises(
        UnsupportedByVersion, match=r"overlap scheduler, which sglang has from 0\.5\.23"
    ):
        check_version(v2, "0.5.12", "target t")
    with pytest.raises(UnsupportedByVersion, match="cannot tell which sglang it has"):
        check_version(v2, "garbage", "target t")


def test_the_spec_is_a_form_value_too():
    # Prefect forms hand the model back as plain JSON: it must validate to the same variant
    v = eagle3(adaptive={"tiers": TIERS})
    again = Variant.model_validate(json.loads(v.model_dump_json()))
    assert again == v and again.label == v.label
    assert AdaptiveSpec.model_validate({}).uses_default_tiers
