"""A fleet sweep's decisions that need no Prefect: who measures which baseline (plan.py),
and a host's names on the Prefect server, its work queue and its facts (hosts.py).

The flows (flows/fleet_sweep.py) carry them out; keeping them here makes every re-plan
(a calibration that fails, a reference lost with its host) testable without a server.
"""
