"""A run started from the Prefect UI's form, in headless Chromium, as a user would.

Uses Debian's chromium and chromium-driver (apt), never a downloaded browser.
Skipped with the reason when they are missing, unless required (CI, where a missing
browser fails: tests/needs.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from specsweep.report.caveats import sentence, simulated_note
from tests.e2e.conftest import TARGET, PrefectStack
from tests.needs import missing
from tests.nightly_times import expected_nightly_name

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    if CHROMIUM is None or CHROMEDRIVER is None:
        missing(
            "BROWSER", "needs chromium and chromedriver: apt-get install chromium chromium-driver"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1400,1100")
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.implicitly_wait(20)
    try:
        yield driver
    finally:
        driver.quit()


def test_a_custom_run_from_the_ui_form_completes(prefect_stack: PrefectStack, browser, tmp_path):
    from selenium.webdriver.common.by import By

    d = browser
    open_custom_run(d, prefect_stack, "step-sweep")
    check_form_layout(d)

    # Change two parameters in the form: the config's name and the run_id. The run's label
    # sits in the form's last group (More); the target's own label comes before it.
    name = d.find_element(By.XPATH, f"({field('Name (Optional)')})[last()]//textarea")
    name.clear()
    name.send_keys("ui-form-sweep")
    type_run_id(d, "ui-run")
    flow_run_id = submit_form(d, prefect_stack, "step-sweep/step-sweep", "ui-run", tmp_path)
    at_creation = named_before_start(prefect_stack, flow_run_id)
    # No page open while the run runs: headless Chromium on the live run page (polling,
    # redrawing) took CPU from the run it shows and the rest of the suite's two cores.
    d.get("about:blank")
    run = prefect_stack.wait_state(flow_run_id, {"COMPLETED", "FAILED", "CRASHED"}, 150)
    assert run["state_type"] == "COMPLETED", run["state"]
    assert run["parameters"]["run_id"] == "ui-run"
    assert run["name"] == f"step-sweep/{TARGET}/steps=2/c=1,2"
    d.get(f"{prefect_stack.ui}/runs/flow-run/{flow_run_id}")
    d.find_element(By.XPATH, "//*[normalize-space()='Completed']")
    deadline = time.monotonic() + 30  # the run's logs, as the page shows them
    while "run ui-run: 2 variants x 2 levels" not in d.find_element(By.TAG_NAME, "body").text:
        assert time.monotonic() < deadline, d.find_element(By.TAG_NAME, "body").text[-2000:]
        time.sleep(0.5)
    shot = tmp_path / "ui-run.png"
    d.save_screenshot(str(shot))
    if os.environ.get("SPECSWEEP_SCREENSHOT_DIR"):
        shutil.copy(shot, Path(os.environ["SPECSWEEP_SCREENSHOT_DIR"]) / shot.name)

    runs = pd.read_parquet(prefect_stack.project / "results" / "runs")
    row = runs.set_index("run_id").loc["ui-run"]
    assert row["sweep_name"] == "ui-form-sweep" and row["status"] == "completed"
    levels = pd.read_parquet(prefect_stack.project / "results" / "levels" / "ui-run")
    assert len(levels) == 4 and set(levels["status"]) == {"ok"}

    check_answer_artifacts(d, prefect_stack, flow_run_id)
    check_labels_and_deployments(d, prefect_stack, flow_run_id, at_creation)
    check_form_at_defaults(d, prefect_stack)


def open_custom_run(driver: Any, stack: PrefectStack, deployment: str) -> None:
    """From the UI's deployments page, the named deployment's Custom run form."""
    from selenium.webdriver.common.by import By

    driver.get(f"{stack.ui}/deployments")
    driver.find_element(
        By.XPATH, f"//a[normalize-space()='{deployment}' and contains(@href, '/deployment/')]"
    ).click()
    click_custom_run(driver)


def click_custom_run(driver: Any) -> None:
    """On a deployment's page: Run, then Custom run."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.XPATH, "//button[normalize-space()='Run']").click()
    driver.find_element(By.XPATH, "//*[normalize-space()='Custom run']").click()


def type_run_id(driver: Any, run_id: str) -> None:
    """Set the form's run_id: switch its type to str, then type into the box it becomes."""
    from selenium.webdriver.common.by import By

    xpath = field("run_id (Optional)")
    driver.find_element(By.XPATH, xpath + "//button[normalize-space()='str']").click()
    # The field re-renders as a text box once its type is str: find it afresh.
    driver.find_element(By.XPATH, f"{xpath}//textarea | {xpath}//input").send_keys(run_id)


def field(label: str) -> str:
    """The form field under a parameter's label (an XPath)."""
    return (
        f"//span[normalize-space()='{label}']"
        "/ancestor::div[contains(concat(' ', @class, ' '), ' p-label ')][1]"
    )


def submit_form(driver: Any, stack: PrefectStack, deployment: str, run_id: str, tmp: Path) -> str:
    """Click the open form's Submit and return the id of the flow run it created.

    The UI creates the run (and says so in a toast that is gone in seconds); find it by
    the run_id typed into the form. Under load (the other xdist worker busy) the UI's
    submit call can fail with its generic "Oops. Something went wrong." toast: the stack's
    Prefect server runs on SQLite, which answers the form's INSERT INTO flow_run with
    "database is locked" when another write (the target limit's slots) overlaps it (its
    server.log; docs/prefect-postgres.md). A user closes the toast and clicks Submit
    again; so does the test, at most twice. A form the API refuses fails every time."""
    from selenium.webdriver.common.by import By

    submit = "//button[@type='submit' and normalize-space()='Submit']"
    driver.find_element(By.XPATH, submit).click()
    deadline, resubmits = time.monotonic() + 90, 0
    while not (created := [r for r in stack.flow_runs(deployment)
                           if r["parameters"].get("run_id") == run_id]):  # fmt: skip
        driver.implicitly_wait(0)  # look, do not wait for the toast
        oops = driver.find_elements(
            By.XPATH, "//*[normalize-space()='Oops. Something went wrong.']"
        )
        driver.implicitly_wait(20)
        if oops and resubmits < 2:
            resubmits += 1
            driver.execute_script("document.querySelectorAll('.p-toast').forEach(t => t.remove())")
            driver.execute_script("arguments[0].click()", driver.find_element(By.XPATH, submit))
        if time.monotonic() > deadline:
            driver.save_screenshot(str(tmp / f"{run_id}-submit-failed.png"))
            raise AssertionError(f"no run created: {driver.find_element(By.TAG_NAME, 'body').text}")
        time.sleep(0.5)
    return created[0]["id"]


def test_an_algorithm_sweep_from_its_ui_form_completes(
    prefect_stack: PrefectStack, browser, tmp_path
):
    """Issue 31: the algorithm sweep's own deployment and form. Its form holds the sections
    the algorithm sweep reads (no step_sweep); submitted with the deployment's config
    (NGRAM enabled), the run measures the baseline and NGRAM and answers which to run."""

    d = browser
    open_custom_run(d, prefect_stack, "algorithm-sweep")
    state = form_state(d)
    keep_form(d, state, "ui-algorithm-form")
    fields = [f for f in state["fields"] if f["label"]]
    assert [f["label"] for f in fields if f["depth"] == 0] == ["run_id", "config", "force"]
    config = next(f for f in fields if f["label"] == "config")
    assert config["children"] == ALGORITHM_SWEEP_CONFIG, config["children"]
    sweep = next(f for f in fields if f["label"] == "Algorithm Sweep" and f["depth"] == 1)
    assert "Ngram" in sweep["children"], sweep["children"]
    d.set_window_size(1400, 1100)

    type_run_id(d, "ui-algorithms")
    flow_run_id = submit_form(
        d, prefect_stack, "algorithm-sweep/algorithm-sweep", "ui-algorithms", tmp_path
    )
    d.get("about:blank")  # nothing left to read in the browser; the live run page costs CPU
    run = prefect_stack.wait_state(flow_run_id, {"COMPLETED", "FAILED", "CRASHED"}, 150)
    assert run["state_type"] == "COMPLETED", run["state"]
    assert run["name"].startswith(f"algorithm-sweep/{TARGET}/"), run["name"]
    levels = pd.read_parquet(prefect_stack.project / "results" / "levels" / "ui-algorithms")
    assert set(levels["status"]) == {"ok"}, levels[["variant", "concurrency", "status"]]
    variants = sorted(set(levels["variant"]))
    assert len(levels) == 4 and variants[0] == "baseline" and variants[1].startswith("ngram-")
    answer = [a for a in prefect_stack.post(
        "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}}
    ) if a["key"] == "specsweep-answer"]  # fmt: skip
    assert answer and "ngram" in str(answer[0]["data"]).lower(), answer


# ---- the run form: what the step sweep reads, run_id first, the target typed (issue 28) --

FORM_WINDOW = (1440, 900)
# The form a user meets before filling it (a minimal step sweep: model, draft, steps; every
# other setting at its default): 2,752 px here, 3.1 screens of 900 px, of which Prefect's
# own parts (run name, start, options, buttons) take ~700 (it was 3,470 px while each
# concurrency level had its own input and the run's name and search their own rows).
# Issue 28 asks for about 3 screens.
FORM_AT_DEFAULTS_MAX_PX = round(3.25 * FORM_WINDOW[1])
# This test's deployment sets 17 settings, each a shown field of 105-130 px, with its
# group's siblings where it sits in a folded group: its form (~6,100 px; SweepConfig
# rendered whole was 8,787) is checked for the groups it leaves folded, not for height.
FOLDED = ("Launch", "Sizing", "Text", "Precision", "Search")
# Every labelled field of the form: its label, depth (0: a flow parameter), top and whether
# it holds a JSON editor; and the form's height.
FORM_STATE = r"""
const form = document.querySelector('form');
const depth = e => { let n = 0; for (let p = e.parentElement; p; p = p.parentElement)
  if (p.classList.contains('schema-form-property')) n++; return n; };
const fields = Array.from(form.querySelectorAll('.schema-form-property')).map(e => {
  const label = e.querySelector(':scope > .p-label__header .schema-form-property__label');
  return {label: label ? label.innerText.replace(/ \(Optional\)$/, '').trim() : '',
          depth: depth(e), top: e.getBoundingClientRect().top,
          json: e.querySelector('.p-code-input') !== null,
          children: Array.from(e.querySelectorAll('.schema-form-property')).filter(
            c => depth(c) === depth(e) + 1).map(c => c.querySelector(
            ':scope > .p-label__header .schema-form-property__label')?.innerText.replace(
            / \(Optional\)$/, '').trim())};
});
return {height: form.scrollHeight, inner: window.innerHeight, fields: fields};
"""
STEP_SWEEP_CONFIG = ["Target", "Server", "Load", "Step Sweep", "More"]
ALGORITHM_SWEEP_CONFIG = ["Target", "Server", "Load", "Algorithm Sweep", "More"]
TARGET_FIELDS = ["Kind", "Host", "More"]


def check_form_layout(driver: Any) -> None:
    """The step-sweep run form at 1440x900: run_id first and on the first screen, the
    config holds only the sections the step sweep reads (no topk_sweep, grid_sweep or
    variants), the target as typed fields (no JSON editor), the groups it leaves folded."""
    state = form_state(driver)
    fields = [f for f in state["fields"] if f["label"]]
    top = [f["label"] for f in fields if f["depth"] == 0]
    assert top == ["run_id", "config", "force"], top
    run_id = next(f for f in fields if f["label"] == "run_id")
    assert run_id["top"] < state["inner"], (run_id, state["inner"])  # no scrolling to it
    config = next(f for f in fields if f["label"] == "config")
    assert config["children"] == STEP_SWEEP_CONFIG, config["children"]
    labels = {f["label"] for f in fields}
    assert not labels & {"Topk Sweep", "Grid Sweep", "Variants"}, labels
    target = next(f for f in fields if f["label"] == "Target" and f["depth"] == 1)
    assert target["children"] == TARGET_FIELDS and not target["json"], target
    keep_form(driver, state, "ui-form")
    # what the deployment's config leaves at its defaults is one folded row per group
    folded = {f["label"]: f["children"] for f in fields if f["label"] in FOLDED}
    assert folded == {label: [] for label in FOLDED}, folded
    driver.set_window_size(1400, 1100)  # the rest of the test's window


def form_state(driver: Any) -> dict[str, Any]:
    """The open run form's fields and height at 1440x900."""
    from selenium.webdriver.common.by import By

    driver.set_window_size(*FORM_WINDOW)
    driver.find_element(By.XPATH, "//span[normalize-space()='run_id (Optional)']")
    return driver.execute_script(FORM_STATE)


def keep_form(driver: Any, state: dict[str, Any], name: str) -> None:
    """With SPECSWEEP_SCREENSHOT_DIR set: the form's fields (JSON) and a screenshot."""
    if os.environ.get("SPECSWEEP_SCREENSHOT_DIR"):
        shots = Path(os.environ["SPECSWEEP_SCREENSHOT_DIR"])
        (shots / f"{name}.json").write_text(json.dumps(state, indent=1))
        driver.set_window_size(FORM_WINDOW[0], state["height"] + 300)
        driver.save_screenshot(str(shots / f"{name}.png"))


def check_form_at_defaults(driver: Any, stack: PrefectStack) -> None:
    """The step sweep's form as a user meets it: a deployment whose config is a minimal
    step sweep (model, draft, steps; the rest at its defaults) fits about 3 screens, each
    section its main fields and one folded row of the others."""

    from specsweep.config import SweepConfig
    from specsweep.config.forms import StepSweepForm

    minimal = SweepConfig(
        server={"model_path": "meta-llama/Llama-3.1-8B-Instruct"},
        step_sweep={"draft_model_path": "org/eagle3-draft", "num_steps": [1, 2, 3]},
    )
    served = stack.get("/deployments/name/step-sweep/step-sweep")
    body = {k: served[k] for k in ("flow_id", "entrypoint", "parameter_openapi_schema")}
    body |= {"name": "step-sweep-at-defaults", "parameters": {
        "config": StepSweepForm.values_of(minimal)}}  # fmt: skip
    created = stack.post("/deployments/", body)
    driver.get(f"{stack.ui}/deployments/deployment/{created['id']}")
    click_custom_run(driver)
    state = form_state(driver)
    keep_form(driver, state, "ui-form-at-defaults")
    config = next(f for f in state["fields"] if f["label"] == "config")
    assert config["children"] == STEP_SWEEP_CONFIG, config["children"]
    assert state["height"] <= FORM_AT_DEFAULTS_MAX_PX, state["height"]
    driver.set_window_size(1400, 1100)


# ---- the run's answer as the UI shows it (issue 19) -------------------------------------

WIDE = 1440  # the window the artifact pages must read in without sideways scrolling
# The answer's speedup picture; the report's throughput, speedup, latency and accept length.
LEAST_IMAGES = {"specsweep-answer": 1, "specsweep-report": 4, "specsweep-results": 0}
MARKDOWN_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)+\|?\s*$", re.M)
# On the page: every image loaded, and each table (with its scroll box) inside the window.
# Text blocks (paragraphs, headings, list items, quotes; not a table's cells): `right` is
# where their text really ends (the rightmost box of their contents, which a word too long
# to break pushes past the block), `hidden` how much of it overflows the block; a code
# block's `right` is its scroll box's (the pre, or a wrapper in the column that scrolls),
# and `scrolls` whether it has one. `edge`: the Markdown column's right edge, inside the
# window. `column_hidden`: how far the column itself scrolls sideways (text run past it);
# `clipped`: elements that hide an overflow (overflow hidden or clip) and have one.
PAGE_STATE = """
const view = document.querySelector('.artifact-data-view');
const imgs = Array.from(document.querySelectorAll('.artifact-data-view img'));
const tables = Array.from(document.querySelectorAll('.artifact-data-view table'));
const column = view && view.querySelector('.markdown-renderer');
const edge = Math.min(window.innerWidth,
                      column ? column.getBoundingClientRect().right : window.innerWidth);
const scrolls = el => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
const ink = el => {
  const range = document.createRange();
  range.selectNodeContents(el);
  return Math.max(el.getBoundingClientRect().left,
                  ...Array.from(range.getClientRects()).map(r => r.right));
};
const blocks = [];
for (const el of view ? view.querySelectorAll(
    '.markdown-renderer__text--paragraph, .markdown-renderer__heading, li, blockquote, pre')
    : []) {
  if (el.closest('table')) continue;
  const code = el.tagName === 'PRE';
  let box = el;
  while (code && box !== column && !scrolls(box)) box = box.parentElement;
  const kind = code ? 'code' : el.tagName === 'DIV' ? 'paragraph' : el.tagName.toLowerCase();
  blocks.push({kind, text: el.innerText.slice(0, 120),
               right: code ? box.getBoundingClientRect().right : ink(el),
               hidden: code ? 0 : el.scrollWidth - el.clientWidth,
               scrolls: !code || box !== column});
}
return {
  inner: window.innerWidth, scroll: document.documentElement.scrollWidth,
  images: imgs.map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                          natural: i.naturalWidth, right: i.getBoundingClientRect().right})),
  tables: tables.map(t => ({right: t.getBoundingClientRect().right,
                            hidden: t.parentElement.scrollWidth - t.parentElement.clientWidth})),
  edge, blocks, column_hidden: column ? column.scrollWidth - column.clientWidth : 0,
  clipped: Array.from(view ? view.querySelectorAll('*') : []).filter(el =>
    ['hidden', 'clip'].includes(getComputedStyle(el).overflowX)
    && el.scrollWidth > el.clientWidth + 1)
    .map(el => el.tagName + ': ' + el.innerText.slice(0, 120)),
  codes: Array.from(view ? view.querySelectorAll('pre') : []).map(el => el.innerText.trim().length),
  text: view?.innerText || '',
};
"""


def check_answer_artifacts(driver: Any, stack: PrefectStack, flow_run_id: str) -> None:
    """The run's answer, report and results artifacts read in the UI at 1440 px: their plots
    load (data: URIs), no table runs off the page, the simulator's caveat is said; and the
    run's log shows the summary as aligned text, not Markdown pipes."""
    run_id = stack.get(f"/flow_runs/{flow_run_id}")["parameters"]["run_id"]
    levels = pd.read_parquet(stack.project / "results" / "levels" / run_id)
    artifacts = stack.post(
        "/artifacts/filter",
        {"artifacts": {"flow_run_id": {"any_": [flow_run_id]}}, "sort": "CREATED_DESC"},
    )
    latest = {}
    for artifact in artifacts:  # newest first: a retried publish leaves older versions
        latest.setdefault(artifact["key"], artifact)
    assert {"specsweep-answer", "specsweep-report", "specsweep-results"} <= set(latest)
    assert latest["specsweep-report"]["type"] == "markdown"
    assert "specsweep-report-html" not in latest  # nothing served over HTTP here

    driver.set_window_size(WIDE, 1000)
    caveat = sentence(simulated_note(levels) or "")
    assert "SPECSWEEP_SIM_TIME_SCALE=0.05" in caveat  # the e2e sweep's time scale
    for key in ("specsweep-answer", "specsweep-report", "specsweep-results"):
        data = str(latest[key]["data"])
        assert "file://" not in data
        images = data.count("](data:image/png;base64,")
        assert images >= LEAST_IMAGES[key], (key, images)
        driver.get(f"{stack.ui}/artifacts/artifact/{latest[key]['id']}")
        codes = sum(line.lstrip().startswith("```") for line in data.splitlines()) // 2
        state = _page_state(driver, images, codes)
        assert state["inner"] <= WIDE and state["scroll"] <= state["inner"], (key, state["scroll"])
        for table in state["tables"]:
            assert table["right"] <= state["inner"] and table["hidden"] <= 1, (key, table)
        for image in state["images"]:
            assert image["right"] <= state["inner"], (key, image)
        check_text_blocks(key, state)
        if key == "specsweep-answer":  # the decision leads: headline, then what to copy
            text = state["text"]
            assert text.index("Deploy ") < text.index("Measured vs no speculation")
            assert "Decided" in text or "Not decided: measure more at c=" in text
            assert "inconclusive" not in text
            if '"candidate_steps"' in data:  # tiers: the file and the launch command, whole
                assert '"candidate_steps"' in text and "--speculative-adaptive-config" in text
        if key != "specsweep-results":
            assert caveat in state["text"], f"{key}: {state['text'][:1500]}"
        if os.environ.get("SPECSWEEP_SCREENSHOT_DIR"):
            driver.save_screenshot(
                str(Path(os.environ["SPECSWEEP_SCREENSHOT_DIR"]) / f"ui-{key}.png")
            )

    summary = _summary_log(stack, flow_run_id, run_id)
    assert not MARKDOWN_SEPARATOR.search(summary), summary
    lines = summary.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("concurrency  "))
    assert set(lines[header + 1]) == {"-", " "}, summary  # the header ruled off
    measured = sorted(levels["concurrency"].unique())
    rows = lines[header + 2 : header + 2 + len(measured)]
    assert [line.split()[0] for line in rows] == [str(c) for c in measured], summary
    assert caveat in summary


# Text blocks each artifact page has at least (the checks below are not vacuous): the
# answer's and report's paragraphs; the report's server command lines in code blocks.
LEAST_BLOCKS = {
    "specsweep-answer": {"paragraph": 3},
    "specsweep-report": {"paragraph": 3, "code": 2},
    "specsweep-results": {},
}


def check_text_blocks(key: str, state: dict[str, Any]) -> None:
    """Every paragraph, heading, list item and quote of the page ends inside the Markdown
    column (inside the 1440-px window), none overflowing its box; every code block is inside
    it too and scrolls sideways (its lines never wrap) rather than being clipped; the column
    does not scroll sideways, and nothing hides an overflow."""
    edge = state["edge"]
    assert edge <= state["inner"], (key, edge)
    for block in state["blocks"]:
        where = f"{key}: a {block['kind']} ends at {block['right']:.0f} px"
        assert block["right"] <= edge + 1, f"{where}, past the column's {edge:.0f}: {block}"
        assert block["hidden"] <= 1, f"{where} and overflows its box by {block['hidden']}: {block}"
        assert block["scrolls"], f"{key}: a code block that cannot scroll: {block}"
    assert state["column_hidden"] <= 1, f"{key}: the column scrolls sideways: {state['blocks']}"
    assert not state["clipped"], f"{key}: an overflow hidden: {state['clipped']}"
    kinds = [b["kind"] for b in state["blocks"]]
    for kind, least in LEAST_BLOCKS[key].items():
        assert kinds.count(kind) >= least, (key, kind, kinds)


def _page_state(driver: Any, images: int, codes: int, timeout: float = 30) -> dict[str, Any]:
    """The artifact page once its tables are drawn, its `images` images loaded and its
    `codes` code blocks filled: the UI's PCodeHighlight renders a block empty until its
    highlighting web worker answers, which on a loaded machine came after the tables and
    images (CI read the answer's page without its tier file: '"candidate_steps"' missing)."""
    deadline = time.monotonic() + timeout
    while True:
        state = driver.execute_script(PAGE_STATE)
        loaded = [i for i in state["images"] if i["loaded"]]
        filled = [n for n in state["codes"] if n > 0]
        if (
            state["tables"]
            and len(loaded) == len(state["images"]) == images
            and len(filled) == len(state["codes"]) >= codes
        ):
            return state
        assert time.monotonic() < deadline, state["images"] or state["text"][:2000]
        time.sleep(0.5)


def _summary_log(stack: PrefectStack, flow_run_id: str, run_id: str) -> str:
    """The parent run's log message that holds the run summary."""
    messages, offset = [], 0
    while batch := stack.post(
        "/logs/filter",
        {"logs": {"flow_run_id": {"any_": [flow_run_id]}}, "limit": 200, "offset": offset},
    ):
        messages += [log["message"] for log in batch]
        offset += len(batch)
    found = [m for m in messages if f"specsweep run {run_id}\n" in m]
    assert found, "\n".join(messages)[-3000:]
    return found[-1]


# ---- names, tags, schedule, limits and GPU checks as the UI shows them (issue 19) -------

RUN_NAME = f"step-sweep/{TARGET}/steps=2/c=1,2"  # the levels the form left in the name


def named_before_start(stack: PrefectStack, flow_run_id: str) -> dict[str, Any]:
    """The run as the API shows it once `specsweep worker` named it: its name and tags are
    set while it has not started (the worker names a run before it asks for work)."""
    deadline = time.monotonic() + 30
    while (run := stack.get(f"/flow_runs/{flow_run_id}"))["name"] != RUN_NAME:
        assert time.monotonic() < deadline, run["name"]
        time.sleep(0.2)
    return run


def check_labels_and_deployments(
    driver: Any, stack: PrefectStack, flow_run_id: str, at_creation: dict[str, Any]
) -> None:
    from selenium.webdriver.common.by import By

    # Named and tagged at creation: the worker (not the flow's start) named it, and the
    # name and tags were there before the run's first Running state.
    worker_log = (stack.logs / "worker.log").read_text()
    assert f"named {RUN_NAME!r}" in worker_log, worker_log[-3000:]
    assert {"specsweep", "step-sweep", f"target:{TARGET}", "run:ui-run"} <= set(at_creation["tags"])
    states = stack.get(f"/flow_run_states/?flow_run_id={flow_run_id}")
    running = min(s["timestamp"] for s in states if s["type"] == "RUNNING")
    assert at_creation["state_type"] in {"SCHEDULED", "PENDING"} or (
        at_creation["updated"] <= running
    ), (at_creation["state_type"], at_creation["updated"], running)
    # The run's page shows that name; its subflows carry its tags and their variant's.
    assert RUN_NAME in driver.find_element(By.TAG_NAME, "body").text
    children = stack.post(
        "/flow_runs/filter", {"flow_runs": {"parent_flow_run_id": {"any_": [flow_run_id]}}}
    )
    assert {c["name"] for c in children} == {"variant/baseline", "variant/eagle3-s2-k1-d3"}
    for child in children:
        label = child["name"].removeprefix("variant/")
        assert {f"target:{TARGET}", "run:ui-run", f"variant:{label}"} <= set(child["tags"])

    # The deployment pages: the target's limit and the schedule's timezone.
    deployments = {d["name"]: d for d in stack.post("/deployments/filter", {})}
    driver.get(f"{stack.ui}/deployments/deployment/{deployments['step-sweep']['id']}")
    body = _text_when(driver, "Concurrency Limit")
    assert re.search(r"Concurrency Limit\s+1\b", body), body[:2000]
    driver.get(
        f"{stack.ui}/deployments/deployment/{deployments['step-sweep']['id']}?tab=Description"
    )
    assert f"specsweep-target-{TARGET}" in _text_when(driver, f"specsweep-target-{TARGET}")
    driver.get(f"{stack.ui}/deployments/deployment/{deployments['nightly-regression']['id']}")
    _text_when(driver, "Nightly at 02:00 Europe/Berlin (cron 0 2 * * *)")
    # The nightly's upcoming runs are named with their time in the schedule's zone.
    nightly = _wait_for(
        lambda: [
            r for r in stack.flow_runs("nightly-regression/nightly-regression")
            if r["name"].endswith(" Europe/Berlin")
        ],
        "the nightly's upcoming runs named in its timezone",
    )  # fmt: skip
    # named at its own start in Berlin: 02:00, or 03:00 on the spring switch's night
    expected = expected_nightly_name(TARGET, nightly[0]["expected_start_time"])
    assert nightly[0]["name"] == expected, nightly[0]["name"]

    # GPU checks used the simulator's nvidia-smi: no "not found", and its memory readings.
    logs = stack.post("/logs/filter", {"logs": {"flow_run_id": {"any_": [
        flow_run_id, *(c["id"] for c in children)]}}, "limit": 200})  # fmt: skip
    text = "\n".join(log["message"] for log in logs)
    assert "nvidia-smi not found" not in text
    assert "GPU memory released" in text, text[-3000:]


def _text_when(driver: Any, needle: str, timeout: float = 30) -> str:
    """The page's text once it shows `needle` (the UI renders after its API calls)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while needle not in (body := driver.find_element(By.TAG_NAME, "body").text):
        assert time.monotonic() < deadline, f"{needle!r} not on the page:\n{body[:3000]}"
        time.sleep(0.3)
    return body


def _wait_for(predicate: Any, what: str, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return found
