"""What a user configures: pydantic models that double as Prefect UI forms.

Every rule that sglang enforces late (or silently overrides) is enforced in
these models or in `plan` (the rules across variants), before anything is
launched, so a sweep never burns an hour of GPU time on a configuration that
was wrong from the start. The models live in one module each; this package
exports them under one name:

    common    strict frozen models, env/argv value checks, run ids
    targets   LocalTarget, SshTarget (where servers run)
    server    ServerSpec (how a server starts)
    variant   Variant (one server configuration, its stable name)
    load      LoadSpec (the load at each level)
    sweep     StepSweep, TopkSweep, GridSweep, SweepConfig (the whole sweep)
    algorithm_sweep  AlgorithmSweep (the baseline and each enabled algorithm's settings)
    algorithms       the non-tree algorithms' rules, argv and names (sglang 0.5.23)
    forms     a SweepConfig as each sweep flow's UI run form (what that flow reads)
    search    SearchSpec (grid, or an adaptive search with its budget)
    plan      a sweep expanded into its variants, the rules across them
    command   the one place a variant becomes the sglang command line
    fleet     a fleet file: named GPU hosts
    file      YAML files and --set overrides
    secrets   `secret:NAME` references; redact: hiding values in logs
    schedule  the nightly cron
"""

from specsweep.config.algorithm_sweep import AlgorithmSweep
from specsweep.config.common import (
    SGLANG_MRR_DEFAULT_WITH_SPECULATION,
    SPEC_V2_ENV,
    SpecAlgorithm,
    check_run_id,
)
from specsweep.config.load import LoadSpec
from specsweep.config.search import SearchSpec
from specsweep.config.server import LOOPBACK_HOSTS, WILDCARD_HOSTS, ServerSpec
from specsweep.config.sweep import (
    GridSweep,
    PolicyVerification,
    StepSweep,
    SweepConfig,
    TopkSweep,
)
from specsweep.config.targets import LocalTarget, SshTarget, Target
from specsweep.config.variant import Variant

__all__ = [
    "LOOPBACK_HOSTS",
    "SGLANG_MRR_DEFAULT_WITH_SPECULATION",
    "SPEC_V2_ENV",
    "WILDCARD_HOSTS",
    "AlgorithmSweep",
    "GridSweep",
    "LoadSpec",
    "LocalTarget",
    "PolicyVerification",
    "SearchSpec",
    "ServerSpec",
    "SpecAlgorithm",
    "SshTarget",
    "StepSweep",
    "SweepConfig",
    "Target",
    "TopkSweep",
    "Variant",
    "check_run_id",
]
