"""What the Prefect API holds for one flow run and everything under it.

The flow tests share one Prefect harness for the whole session, so "every log line"
would include earlier tests' lines: a check that a line is present must read this
run's records only, and a check that a secret is absent must first wait until the
run's last log lines have reached the API (they are sent in batches by a background
worker).
"""

from __future__ import annotations

import asyncio
from uuid import UUID

from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    ArtifactFilter,
    ArtifactFilterFlowRunId,
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.logging.handlers import APILogWorker
from prefect.states import State

PAGE = 200


def flush_logs(timeout_s: float = 60) -> None:
    """Send every queued log line to the API and wait until it is stored."""
    _, pending = APILogWorker.drain_all(timeout=timeout_s)
    assert not pending, f"log lines still unsent after {timeout_s} s"


def flow_run_id(state: State) -> UUID:
    run_id = state.state_details.flow_run_id
    assert run_id is not None, state
    return run_id


async def _tree(root: UUID) -> list[UUID]:
    """`root` and its subflow runs, at any depth (a task's logs carry its flow run's id)."""
    ids, frontier = [root], [root]
    async with get_client() as client:
        while frontier:
            children = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)
                )
            )
            frontier = [r.id for r in children if r.id not in ids]
            ids += frontier
    return ids


async def _logs(ids: list[UUID]) -> list[str]:
    lines: list[str] = []
    log_filter = LogFilter(flow_run_id=LogFilterFlowRunId(any_=ids))
    async with get_client() as client:
        while batch := await client.read_logs(log_filter, limit=PAGE, offset=len(lines)):
            lines += [log.message for log in batch]
    return lines


async def _artifacts(ids: list[UUID]) -> list[str]:
    out: list[str] = []
    artifact_filter = ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids))
    async with get_client() as client:
        while batch := await client.read_artifacts(
            artifact_filter=artifact_filter, limit=PAGE, offset=len(out)
        ):
            out += [f"{a.key} {a.description} {a.data}" for a in batch]
    return out


def run_tree(state: State) -> list[UUID]:
    """The flow run of `state` and all its subflow runs."""
    return asyncio.run(_tree(flow_run_id(state)))


def run_logs(state: State) -> str:
    """Every log line of the run of `state`: its own, its subflows' and their tasks'."""
    flush_logs()
    return "\n".join(asyncio.run(_logs(run_tree(state))))


def run_artifacts(state: State) -> str:
    """Every artifact the run of `state` or its subflows created, one per line."""
    return "\n".join(asyncio.run(_artifacts(run_tree(state))))
