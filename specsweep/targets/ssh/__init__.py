"""GPU hosts behind SSH (fabric): the same lifecycle code, run on the host.

session   one connection per target: reconnects, runs commands and the agent
host      SshHost, the Host of an SSH target
io        the package copied to the host, streamed output lines
errors    paramiko/fabric errors mapped to specsweep's, with what to check
"""

from specsweep.targets.ssh.host import SshHost, host_for, level_timeout_s

__all__ = ["SshHost", "host_for", "level_timeout_s"]
