"""The Dagster UI in a real browser: `dagster dev` over a small data directory, headless Chromium.

Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium chromium-driver`;
`.ci/run` installs them when absent) and selenium (the dev extra); skips, saying which is missing,
without them. The webserver binds 127.0.0.1 on a free port; the browser gets a fresh profile and no
network beyond it. Screenshots of the asset graph, the methods report's asset page and the Automation page are saved
under the test's temporary directory (the path is printed), or under $DAGSTER_IR_SCREENSHOTS when set: the
documentation's pictures of the UI are taken so (`DAGSTER_IR_SCREENSHOTS=docs/img/ui pytest tests/assets/test_browser.py`).
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROME_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1600,1000",
]
START_TIMEOUT = 150  # seconds for `dagster dev` to answer on 2 loaded cores
RUN_TIMEOUT = 240  # a run's steps start processes that import the project, on 2 shared cores

pytestmark = pytest.mark.slow


def _browser_or_skip():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.skip(
            "needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver; "
            f".ci/run installs them): found chromium={chromium}, chromedriver={driver}"
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.skip("needs selenium (pip install -e '.[dev]')")
    return chromium, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        body = json.loads(response.read())
    assert "errors" not in body, body["errors"]
    return body["data"]


def _wait_for_server(port: int, process: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"dagster dev exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            data = _graphql(port, "{ repositoriesOrError { ... on RepositoryConnection { nodes { name } } } }")
            if data["repositoriesOrError"].get("nodes"):
                return
        except (OSError, AssertionError, KeyError):
            pass
        time.sleep(2)
    pytest.fail(f"dagster dev did not answer on port {port} in {START_TIMEOUT} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def ui(tmp_path):
    """`dagster dev` on a free port over a data directory with the bundled dump registered."""
    chromium, driver = _browser_or_skip()
    data, home = tmp_path / "data", tmp_path / "dagster_home"
    env = {
        **os.environ,
        "DAGSTER_IR_DATA": str(data),
        "DAGSTER_HOME": str(home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("DAGSTER_IR_CONFIG", None)
    registered = subprocess.run(
        [sys.executable, "-m", "assets.cli.main", "--data", str(data), "add-dump", _sample_dump()],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert registered.returncode == 0, registered.stderr
    port, log = _free_port(), tmp_path / "dagster-dev.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "dagster"),
                "dev",
                "-h",
                "127.0.0.1",
                "-p",
                str(port),
                "-w",
                str(ROOT / "workspace.yaml"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_server(port, process, log)
        yield {
            "port": port,
            "data": data,
            "partition": registered.stdout.strip().splitlines()[-1],
            "chromium": chromium,
            "driver": driver,
            "shots": Path(os.environ.get("DAGSTER_IR_SCREENSHOTS") or tmp_path / "screenshots").resolve(),
        }
    finally:
        os.killpg(process.pid, signal.SIGTERM)  # dagster dev and the processes it started
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _sample_dump() -> str:
    from dagster_ir.storage.dumps import sample_dump_path

    return str(sample_dump_path())


def _chrome(ui, profile: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = ui["chromium"]
    for flag in [*CHROME_FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(executable_path=ui["driver"]), options=options)


def _dismiss_welcome(browser, timeout: float = 10) -> None:
    """Close the "Join the Dagster community" dialog a fresh profile gets (it would cover the pictures)."""
    from selenium.webdriver.common.by import By

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        buttons = browser.find_elements(By.XPATH, "//button[normalize-space()='Skip']")
        if buttons:
            buttons[0].click()
            return
        time.sleep(0.5)


def _wait_for_text(browser, texts: list[str], timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    body = ""
    while time.monotonic() < deadline:
        body = browser.execute_script("return document.body ? document.body.innerText : ''") or ""
        if all(t in body for t in texts):
            return body
        time.sleep(1)
    missing = [t for t in texts if t not in body]
    raise AssertionError(f"page {browser.current_url} never showed {missing}; it shows: {body[:1500]!r}")


def _wait_for_run(port: int, run_id: str) -> None:
    status, deadline = None, time.monotonic() + RUN_TIMEOUT
    while time.monotonic() < deadline:
        status = _graphql(
            port, "query R($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }", {"id": run_id}
        )["runOrError"]["status"]
        if status in ("SUCCESS", "FAILURE", "CANCELED"):
            break
        time.sleep(2)
    assert status == "SUCCESS", f"run {run_id} ended {status}"


OBSERVATION_RUNS = """
{ runsOrError(filter: {tags: [{key: "dagster_ir/command", value: "observe"}]}) {
    ... on Runs { results { runId pipelineName } } } }
"""


LAUNCH = """
mutation Launch($params: ExecutionParams!) {
  launchPipelineExecution(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
  }
}
"""


UPDATE_ONE = """
import os, dagster as dg
from assets.definitions import defs, resources
from assets.cli.updates import update_all
with dg.DagsterInstance.get() as instance:
    report = update_all(defs, instance, resources=resources(os.environ["DAGSTER_IR_DATA"]), log=lambda _: None,
                        selection=dg.AssetSelection.assets("wiki_articles"))  # (wiki_dump: the launched run)
    assert report.ok and report.runs, report.failures
    print(instance.get_runs(filters=dg.RunsFilter(tags={"dagster_ir/command": "update"}), limit=1)[0].run_id)
"""


def _update_run(ui) -> str:
    """The run id of an `update` of the wiki_articles asset, made in its own process against the UI's instance."""
    env = {
        **os.environ,
        "DAGSTER_IR_DATA": str(ui["data"]),
        "DAGSTER_HOME": str(ui["data"].parent / "dagster_home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("DAGSTER_IR_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", UPDATE_ONE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


REPORT_ONE = """
import os, dagster as dg, polars as pl
from assets.definitions import resources
from assets.defs.evaluation import evaluation_report
from assets.lib.partitions import collection_partitions

# The report's inputs are made here (the first-stage chain that makes them takes minutes on 2 cores);
# the report asset itself, its metadata and its table go through the project's own code and IO manager.
queries = [f"q{i}" for i in range(8)]
docs = [f"d{j}" for j in range(5)]
runs = pl.DataFrame([{"query_id": q, "doc_id": d, "score": float(5 - r + (i % 2) * (r == 2)), "rank": r + 1,
                      "run_name": name}
                     for name in ("bm25", "ql", "dense") for i, q in enumerate(queries)
                     for r, d in enumerate(docs if name != "ql" else docs[::-1])])
inputs = {
    "candidate_runs": runs.with_columns(pl.col("rank").cast(pl.Int32)),
    "qrels": pl.DataFrame({"query_id": queries, "doc_id": ["d0"] * 8, "relevance": [1] * 8},
                          schema={"query_id": pl.String, "doc_id": pl.String, "relevance": pl.Int32}),
    "query_splits": pl.DataFrame({"query_id": queries, "split": ["test"] * 8, "fold": [0] * 8},
                                 schema={"query_id": pl.String, "split": pl.String, "fold": pl.Int32}),
}
project = resources(os.environ["DAGSTER_IR_DATA"])


class Inputs(dg.IOManager):
    def load_input(self, context):
        return inputs[context.asset_key.to_user_string()]

    def handle_output(self, context, obj):
        project["io_manager"].handle_output(context, obj)


partition = collection_partitions.get_partition_keys()[0]
upstream = [dg.SourceAsset(key=name, partitions_def=collection_partitions) for name in inputs]
result = dg.materialize([evaluation_report, *upstream], partition_key=partition, instance=dg.DagsterInstance.get(),
                        resources={**project, "io_manager": dg.IOManagerDefinition.hardcoded_io_manager(Inputs())},
                        run_config={"ops": {"evaluation_report": {"config": {"bootstrap_resamples": 200}}}})
assert result.success
print(partition)
"""


def _report_materialized(ui) -> None:
    """A materialization of `evaluation_report` (one collection) in the UI's instance, made in its own process."""
    env = {
        **os.environ,
        "DAGSTER_IR_DATA": str(ui["data"]),
        "DAGSTER_HOME": str(ui["data"].parent / "dagster_home"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("DAGSTER_IR_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", REPORT_ONE], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]


NUMERIC_METADATA = """
query A($key: AssetKeyInput!) { assetOrError(assetKey: $key) { ... on Asset {
  assetMaterializations(limit: 1) { metadataEntries { label __typename } } } } }
"""


def test_ui_shows_every_group_launches_a_materialization_and_the_catalog_records_it(ui, tmp_path):
    from assets.definitions import defs
    from assets.lib.metadata import column_description
    from dagster_ir.storage.catalog import Catalog

    groups = sorted({node.group_name for node in defs.resolve_asset_graph().asset_nodes})
    port = ui["port"]
    nodes = _graphql(port, "{ assetNodes { assetKey { path } groupName } }")["assetNodes"]
    assert sorted({n["groupName"] for n in nodes}) == groups

    ui["shots"].mkdir(parents=True, exist_ok=True)
    for old in ui["shots"].glob("*.png"):  # a folder kept from an earlier run holds only this test's pictures
        old.unlink()
    browser = _chrome(ui, tmp_path / "chrome-profile")
    try:
        browser.get(f"http://127.0.0.1:{port}/asset-groups")
        _wait_for_text(browser, groups, timeout=90)  # the global asset graph names every group
        _dismiss_welcome(browser)
        time.sleep(2)  # let the graph finish its layout before the picture
        browser.save_screenshot(str(ui["shots"] / "asset-graph.png"))

        repository = _graphql(
            port,
            "{ repositoriesOrError { ... on RepositoryConnection { nodes { name "
            "location { name } schedules { name } sensors { name } } } } }",
        )
        repo = repository["repositoriesOrError"]["nodes"][0]
        # one retraining schedule per named asset job holding trained assets: their runs name that job
        assert sorted(s["name"] for s in repo["schedules"]) == [
            "retraining_collection_assets",
            "retraining_unit_assets",
            "retraining_unpartitioned_assets",
        ]
        assert {"default_automation_condition_sensor", "wiki_dump_sensor", "source_observation_sensor"} <= {
            s["name"] for s in repo["sensors"]
        }
        params = {
            "selector": {
                "repositoryLocationName": repo["location"]["name"],
                "repositoryName": repo["name"],
                "pipelineName": "__ASSET_JOB",
                "assetSelection": [{"path": ["wiki_dump"]}],
            },
            "mode": "default",
            "executionMetadata": {
                "tags": [
                    {"key": "dagster/partition", "value": ui["partition"]},
                    {"key": "dagster_ir/command", "value": "browser-test"},
                ]
            },
        }
        launched = _graphql(port, LAUNCH, {"params": params})["launchPipelineExecution"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        _wait_for_run(port, run_id)
        # the observation sensor (on by default) observed the sources at its first tick: one run of each
        # observation job, so no source is unobserved in the UI
        deadline = time.monotonic() + RUN_TIMEOUT  # the daemon ticks the sensor every 30 s
        while (
            len(observed := _graphql(port, OBSERVATION_RUNS)["runsOrError"]["results"]) < 2
            and time.monotonic() < deadline
        ):
            time.sleep(2)
        assert sorted(r["pipelineName"] for r in observed) == [
            "observe_collection_sources_job",
            "observe_dump_sources_job",
        ], observed
        for run in observed:
            _wait_for_run(port, run["runId"])
        recorded = Catalog(ui["data"]).query(
            "select asset_key, partition, rows from materializations where run_id = ?", [run_id]
        )
        assert recorded.rows() == [("wiki_dump", ui["partition"], 1)]

        browser.get(f"http://127.0.0.1:{port}/assets/model_report")
        _wait_for_text(browser, ["model_report", "methods_report"], timeout=60)
        time.sleep(2)
        browser.save_screenshot(str(ui["shots"] / "model_report.png"))

        browser.get(f"http://127.0.0.1:{port}/automation")
        _wait_for_text(
            browser,
            [
                "retraining_unit_assets",
                "default_automation_condition_sensor",
                "wiki_dump_sensor",
                "source_observation_sensor",
            ],
            timeout=60,
        )
        time.sleep(3)  # their statuses load after the names
        browser.save_screenshot(str(ui["shots"] / "automation.png"))

        # A run made by `update` (in its own process) belongs to a job of the definitions: its page offers
        # "Re-execute", enabled (a `dg.materialize` run's job, __ephemeral_asset_job__, is not in them).
        update_run = _update_run(ui)
        job = _graphql(
            port, "query R($id: ID!) { runOrError(runId: $id) { ... on Run { pipelineName } } }", {"id": update_run}
        )["runOrError"]["pipelineName"]
        assert job == "dump_assets_job"
        browser.get(f"http://127.0.0.1:{port}/runs/{update_run}")
        _wait_for_text(browser, [job, "Re-execute"], timeout=60)
        time.sleep(2)  # the job's availability loads after the run
        buttons = [
            b
            for b in browser.find_elements("xpath", "//button[contains(normalize-space(), 'Re-execute')]")
            if b.is_displayed()
        ]
        assert buttons and all(b.is_enabled() and b.get_attribute("disabled") is None for b in buttons), [
            b.text for b in buttons
        ]

        # A report asset's page: its table's columns with their descriptions, and its Plots: one chart per
        # numeric key the IO manager records for every table (rows, bytes), none per run and measure (the
        # results are one table entry), so no chart of a key that only one event has, a point forever.
        _report_materialized(ui)
        entries = _graphql(port, NUMERIC_METADATA, {"key": {"path": ["evaluation_report"]}})["assetOrError"][
            "assetMaterializations"
        ][0]["metadataEntries"]
        labels = {e["label"]: e["__typename"] for e in entries}
        numeric = sorted(label for label, kind in labels.items() if kind in ("IntMetadataEntry", "FloatMetadataEntry"))
        assert numeric == ["bytes", "dagster/row_count"] and labels["results"] == "TableMetadataEntry", labels
        browser.get(f"http://127.0.0.1:{port}/assets/evaluation_report?view=overview")
        described = column_description("evaluation_report", "measure")
        _wait_for_text(browser, ["evaluation_report", "measure", described], timeout=60)  # the Columns section
        plots = [b for b in browser.find_elements("xpath", "//button[normalize-space()='Plots']") if b.is_displayed()]
        assert plots, "no Plots button in the asset's metadata section"
        plots[0].click()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(browser.find_elements("css selector", "canvas")) < len(numeric):
            time.sleep(1)
        time.sleep(2)  # every chart drawn
        charts = browser.find_elements("css selector", "canvas")
        body = browser.execute_script("return document.body.innerText")
        assert len(charts) == len(numeric) and all(label in body for label in numeric), (len(charts), body[:1500])
    finally:
        browser.quit()
    shots = sorted(p.name for p in ui["shots"].iterdir())
    assert shots == ["asset-graph.png", "automation.png", "model_report.png"]
    assert all((ui["shots"] / name).stat().st_size > 10_000 for name in shots)
    print(f"screenshots: {ui['shots']}")
