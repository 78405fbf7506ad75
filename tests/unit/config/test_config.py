import pytest
from pydantic import ValidationError

from specsweep.config import LoadSpec, ServerSpec, Variant


def spec(**kw):
    base = {"algorithm": "EAGLE3", "draft_model_path": "draft", "num_steps": 3, "topk": 1}
    return Variant(**{**base, **kw})


def error_of(**kw) -> str:
    with pytest.raises(ValidationError) as exc:
        spec(**kw)
    return str(exc.value)


def test_baseline_label_and_defaults():
    v = Variant()
    assert v.is_baseline and v.label == "baseline" and v.resolved_num_draft_tokens is None


def test_topk1_draft_tokens_default_to_steps_plus_one():
    v = spec(num_steps=3)
    assert v.resolved_num_draft_tokens == 4
    assert v.label == "eagle3-s3-k1-d4"


def test_topk1_rejects_draft_tokens_sglang_would_override():
    assert "forces num_draft_tokens = num_steps + 1 = 4" in error_of(num_draft_tokens=8)


def test_draft_tokens_beyond_tree_rejected():
    msg = error_of(num_steps=2, topk=2, num_draft_tokens=6)
    assert "exceeds num_steps*topk+1 = 5" in msg


def test_topk_above_one_needs_draft_tokens():
    assert "needs num_draft_tokens" in error_of(topk=4)
    assert spec(num_steps=5, topk=4, num_draft_tokens=8).label == "eagle3-s5-k4-d8"


def test_steps_and_topk_go_together():
    assert "set num_steps and topk together" in error_of(num_steps=None)
    assert "set num_steps and topk together" in error_of(topk=None)


def test_spec_v2_only_with_topk_one():
    assert "only supports topk=1" in error_of(topk=2, num_draft_tokens=4, spec_v2=True)
    env_form = error_of(topk=2, num_draft_tokens=4, env={"SGLANG_ENABLE_SPEC_V2": "true"})
    assert "only supports topk=1" in env_form
    assert spec(spec_v2=True).label.endswith("-v2")


def test_baseline_rejects_speculative_fields():
    with pytest.raises(ValidationError, match="without an algorithm"):
        Variant(num_steps=2)
    with pytest.raises(ValidationError, match="without an algorithm"):
        Variant(spec_v2=True)


def test_eagle_needs_draft_model():
    assert "needs draft_model_path" in error_of(draft_model_path=None)
    assert Variant(algorithm="NEXTN", num_steps=1, topk=1).label == "nextn-s1-k1-d2"


@pytest.mark.parametrize(
    "flag", ["--port", "--port=1", "--speculative-num-steps", "--max-running-requests"]
)
def test_extra_args_cannot_override_owned_flags(flag):
    with pytest.raises(ValidationError, match="set by specsweep"):
        Variant(extra_args=[flag, "3"])
    with pytest.raises(ValidationError, match="set by specsweep"):
        ServerSpec(model_path="m", extra_args=[flag])


def test_unknown_keys_and_bad_names_rejected():
    with pytest.raises(ValidationError, match="Extra inputs"):
        Variant(num_stpes=2)
    with pytest.raises(ValidationError, match="not a valid name"):
        ServerSpec(model_path="m", env={"BAD NAME": "1"})
    with pytest.raises(ValidationError, match="variant name"):
        Variant(name="Has Spaces")


def test_load_spec_request_counts():
    load = LoadSpec(concurrency=[8, 1, 4], requests_per_stream=3, min_requests=5)
    assert load.concurrency == [1, 4, 8]
    assert [load.num_requests(c) for c in load.concurrency] == [5, 12, 24]
    assert load.num_warmup(8) == 8
    assert LoadSpec(requests_per_level=7, warmup_requests=0).num_requests(64) == 7
    with pytest.raises(ValidationError, match="repeat"):
        LoadSpec(concurrency=[1, 1])


def test_base_url_brackets_ipv6():
    assert ServerSpec(model_path="m", host="::1", port=1).base_url == "http://[::1]:1"


def test_only_transient_deaths_are_retried():
    from specsweep.errors import ServerDiedError

    bind = ServerDiedError(
        "died",
        [
            "ERROR:    [Errno 98] error while attempting to bind on "
            "address ('127.0.0.1', 30000): address already in use"
        ],
    )
    nccl = ServerDiedError("died", ["torch.distributed.DistBackendError: ncclSystemError"])
    oom = ServerDiedError("died", ["torch.OutOfMemoryError: CUDA out of memory."])
    assert bind.transient and nccl.transient and not oom.transient


def test_target_ci_bounds_and_the_passes_it_can_take():
    load = LoadSpec(target_ci=0.02, requests_per_stream=4)
    assert load.max_requests_at(8) == 320  # default: ten passes' worth
    assert load.max_passes(8) == 10
    assert LoadSpec(target_ci=0.02, max_requests=100).max_passes(8) == 3
    assert LoadSpec().max_passes(8) == 1  # fixed counts: one pass
    for bad in (0, 1.0, -0.1):
        with pytest.raises(ValidationError):
            LoadSpec(target_ci=bad)
    with pytest.raises(ValidationError, match="set target_ci or target_cv, not both"):
        LoadSpec(target_ci=0.02, target_cv=0.03)
