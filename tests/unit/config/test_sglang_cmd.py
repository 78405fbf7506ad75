import shlex
import sys

from specsweep.config import ServerSpec, Variant
from specsweep.config.command import build_launch_command


def server(**kw):
    return ServerSpec(**{"model_path": "meta-llama/Llama-3.1-8B-Instruct", **kw})


def test_baseline_argv_is_exact():
    cmd = build_launch_command(server(python="/opt/sg/bin/python", port=30001), Variant())
    assert cmd.argv == (
        "/opt/sg/bin/python", "-m", "sglang.launch_server",
        "--model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--host", "127.0.0.1", "--port", "30001", "--tp-size", "1",
    )  # fmt: skip
    assert dict(cmd.env) == {}


def test_speculative_argv_and_shared_cap():
    variant = Variant(algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1)
    cmd = build_launch_command(server(max_running_requests=64, tp=8), variant)
    argv = list(cmd.argv)
    assert argv[argv.index("--max-running-requests") + 1] == "64"
    assert argv[argv.index("--tp-size") + 1] == "8"
    tail = argv[argv.index("--speculative-algorithm") :]
    assert tail == [
        "--speculative-algorithm", "EAGLE3",
        "--speculative-draft-model-path", "d",
        "--speculative-num-steps", "2",
        "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "3",
    ]  # fmt: skip


def test_variant_overrides_and_extra_args_order():
    variant = Variant(
        algorithm="EAGLE", draft_model_path="d", num_steps=5, topk=4, num_draft_tokens=8,
        max_running_requests=16, extra_args=["--speculative-attention-mode", "decode"],
    )  # fmt: skip
    cmd = build_launch_command(
        server(max_running_requests=64, extra_args=["--mem-fraction-static", "0.8"]), variant
    )
    argv = list(cmd.argv)
    assert argv[argv.index("--max-running-requests") + 1] == "16"
    assert argv[-4:] == ["--mem-fraction-static", "0.8", "--speculative-attention-mode", "decode"]


def test_spec_v2_and_env_merge():
    variant = Variant(
        algorithm="EAGLE3", draft_model_path="d", num_steps=2, topk=1, spec_v2=True,
        env={"B": "variant"},
    )  # fmt: skip
    cmd = build_launch_command(server(env={"A": "server", "B": "server"}), variant)
    assert dict(cmd.env) == {"A": "server", "B": "variant", "SGLANG_ENABLE_SPEC_V2": "True"}


def test_launch_prefix_and_default_pythons():
    cmd = build_launch_command(server(launch_prefix=["numactl", "-N0"]), Variant())
    assert cmd.argv[:4] == ("numactl", "-N0", "python3", "-m")
    sim = build_launch_command(server(backend="simulator"), Variant())
    assert sim.argv[0] == sys.executable and sim.argv[2] == "specsweep.sim.launch_server"


def test_shell_line_quotes_everything_and_hides_secrets():
    hostile = "/models/x; rm -rf / $(whoami) 'q'"
    cmd = build_launch_command(
        server(model_path=hostile, env={"HF_TOKEN": "hf_secret", "NCCL_DEBUG": "a b"}), Variant()
    )
    line = cmd.shell()
    assert "hf_secret" not in line and "HF_TOKEN=***" in line
    parsed = shlex.split(line)
    assert hostile in parsed and "NCCL_DEBUG=a b" in parsed
    assert "hf_secret" in cmd.shell(redact=False)
