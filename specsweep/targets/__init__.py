"""Everything that runs on the GPU host: cleanup, launch, health, facts, teardown.

host          the Host protocol every target kind implements
local         LocalHost: this machine (LocalRunner starts and stops servers)
ssh/          SshHost: a GPU host over SSH, running `agent` there
agent, wire   the helper an SSH host runs, and its JSON messages
handle        ServerHandle, a launched server as every target describes it
launch_record which process groups specsweep started (proof of "ours")
process       process groups and signals (the only code that sends them)
cleanup       kill stale servers before a launch, leftovers after a teardown
gpus          nvidia-smi queries
health        the readiness wait that fails fast when the server dies
server_facts  sglang version, GPUs, driver, as the host reports them
sglang_cmd    the one place a variant becomes a server command line
preflight     a fleet host's pre-flight check
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from specsweep.config import Target
    from specsweep.targets.host import Host


def host_for(target: Target) -> Host:
    """The machine a target names; an SSH host keeps one connection per process."""
    from specsweep.config import SshTarget

    if isinstance(target, SshTarget):
        from specsweep.targets import ssh  # fabric loads only for SSH targets

        return ssh.host_for(target)
    from specsweep.targets.local import LocalHost

    return LocalHost.for_target(target)
