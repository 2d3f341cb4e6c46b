"""The Module page in Chromium: expand two levels of the module tree, click a module in the icicle, a
reload restores the page from its URL, the module's link opens the Trace view at its first occurrence
with that slice selected; the phases chart and a trace without modules."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from serving import running_server, wait_for

from .support import corpus_path, get_json, query_of, screenshot, wait_for_plot

pytestmark = pytest.mark.browser

BERT_H100 = "traces/AMD-AGI_TraceLens/tests/traces/h100/gaunernst_bert-small-uncased__1016001.json.gz"
RESNET = "kineto-tb_plugin/samples/resnet50_num_workers_0/worker0.1623143089861.pt.trace.json.gz"
RECORDED = Path(__file__).resolve().parents[1] / "data" / "modules"
ICICLE_SECTORS = "g.node rect.cell"


@pytest.fixture(scope="module")
def modules_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("module_runs")
    (root / "bert_h100").mkdir()
    shutil.copy(corpus_path(BERT_H100), root / "bert_h100" / "worker0.pt.trace.json.gz")
    (root / "resnet").mkdir()
    shutil.copy(corpus_path(RESNET), root / "resnet" / Path(RESNET).name)
    shutil.copytree(RECORDED / "checkpointing", root / "checkpointing")
    with running_server([root], tmp_path_factory.mktemp("module_server") / "cache") as base:
        wait_for(lambda: all(run["state"] == "ready" for run in get_json(f"{base}/api/runs")[1]["runs"]), timeout=120)
        yield base


def _row_names(page) -> list[str]:
    return [
        text.split("\n")[0].strip(" \u25b8\u25be").split(" \u21bb")[0].strip()
        for text in page.get_by_test_id("module-row").locator("td.name").all_inner_texts()
    ]


def test_expand_click_in_icicle_reload_and_follow_to_the_trace(page, modules_server):
    _, api = get_json(f"{modules_server}/api/modules?run=bert_h100")
    root = api["modules"][0]
    model = next(c for c in root["children"] if c["name"] == "BertModel_0")
    encoder = next(c for c in model["children"] if c["name"] == "BertEncoder_0")

    page.goto(f"{modules_server}/modules?run=bert_h100")
    page.get_by_test_id("module-tree-table").wait_for()
    assert _row_names(page) == [root["name"]]
    page.get_by_test_id(f"toggle-{root['id']}").click()
    page.get_by_test_id(f"toggle-{model['id']}").click()
    names = _row_names(page)
    assert names[:2] == [root["name"], "BertModel_0"] and "BertEncoder_0" in names and "BertEmbeddings_0" in names
    assert query_of(page.url)["expanded"] == ",".join(sorted((str(root["id"]), str(model["id"])), key=int))

    assert wait_for_plot(page, "#icicle", ICICLE_SECTORS) > 10
    page.locator("#icicle g.node").filter(has_text="BertEncoder_0").first.click()
    page.wait_for_function("() => new URLSearchParams(location.search).get('module') !== null")
    assert query_of(page.url)["module"] == str(encoder["id"])
    assert page.get_by_test_id("module-detail-name").inner_text().startswith("BertEncoder_0")
    operators = page.get_by_test_id("module-operators").locator("tbody tr")
    assert operators.count() == len(encoder["top_operators"]) > 0
    first_op = operators.first.locator("a")
    assert query_of(first_op.get_attribute("href"))["search"] == encoder["top_operators"][0]["name"]
    assert page.get_by_test_id("module-source-link").get_attribute("href").startswith("/source?")
    screenshot(page, "modules-bert-selected")

    page.reload()
    page.get_by_test_id("module-detail-name").wait_for()
    assert page.get_by_test_id("module-detail-name").inner_text().startswith("BertEncoder_0")
    assert _row_names(page) == names
    assert page.locator('tr[data-testid="module-row"].expanded td.name').inner_text().strip(" \u25b8\u25be") == (
        "BertEncoder_0"
    )
    screenshot(page, "modules-bert-reloaded")

    page.get_by_test_id("module-trace-link").click()
    page.wait_for_url("**/trace?**")
    page.wait_for_function(
        "(id) => window.__profscopeTrace?.selected?.id === id",
        arg=encoder["first"]["event"],
        timeout=20_000,
    )
    assert page.get_by_test_id("slice-name").inner_text() == "nn.Module: BertEncoder_0"
    view = query_of(page.url)
    assert float(view["start_us"]) <= encoder["first"]["ts_us"] < float(view["end_us"])
    screenshot(page, "modules-bert-trace")


def test_phases_chart_and_recomputation_on_a_checkpointed_training_trace(page, modules_server):
    page.goto(f"{modules_server}/modules?run=checkpointing")
    assert wait_for_plot(page, "[data-testid=phases-chart]", "rect.bar") >= 9  # 3 steps x data, fwd, bwd
    rows = page.get_by_test_id("phases-table").locator("tbody tr")
    assert rows.count() == 6
    assert page.get_by_test_id("metric-host").get_attribute("aria-pressed") == "true"  # a CPU trace: host time
    page.get_by_test_id("toggle-0").click()
    page.get_by_test_id("toggle-1").click()
    page.get_by_test_id("toggle-2").click()
    assert "\u21bb3" in page.get_by_test_id("module-tree-table").inner_text()  # Block_0's recomputed submodules
    screenshot(page, "modules-checkpointing")


def test_a_trace_without_modules_says_how_to_record_them(page, modules_server):
    page.goto(f"{modules_server}/modules?run=resnet")
    empty = page.get_by_test_id("no-modules")
    empty.wait_for()
    assert "with_modules=True" in empty.inner_text() and "with_stack=True" in empty.inner_text()
    assert wait_for_plot(page, "[data-testid=phases-chart]", "rect.bar") >= 1  # it has ProfilerSteps
    screenshot(page, "modules-resnet-none")


def test_operators_of_a_module_as_a_removable_filter_kept_in_the_url(page, modules_server):
    """Module page -> a module -> "Operators of this module": the Operator table of its calls with a chip naming
    the module; a reload keeps it; removing the chip shows every operator again."""
    _, api = get_json(f"{modules_server}/api/modules?run=bert_h100")
    root = api["modules"][0]
    model = next(c for c in root["children"] if c["name"] == "BertModel_0")
    encoder = next(c for c in model["children"] if c["name"] == "BertEncoder_0")
    _, filtered = get_json(f"{modules_server}/api/operators?run=bert_h100&module={encoder['id']}")
    _, everything = get_json(f"{modules_server}/api/operators?run=bert_h100")
    assert 0 < filtered["total_rows"] < everything["total_rows"]

    page.goto(f"{modules_server}/modules?run=bert_h100")
    page.get_by_test_id(f"toggle-{root['id']}").click()
    page.get_by_test_id(f"toggle-{model['id']}").click()
    page.locator(f'tr[data-testid="module-row"][data-id="{encoder["id"]}"]').click()
    page.get_by_test_id("module-operators-link").click()
    page.wait_for_url("**/operators?**")
    assert query_of(page.url)["module"] == str(encoder["id"])

    def shown_rows() -> list[str]:
        page.get_by_test_id("operators-table").wait_for()
        return (
            page.get_by_test_id("operators-table")
            .locator("tbody tr[data-key]")
            .evaluate_all("rows => rows.map(r => r.dataset.key)")
        )

    chip = page.get_by_test_id("module-chip")
    chip.wait_for()
    assert chip.inner_text().startswith("Module: BertLMHeadModel_0 \u203a BertModel_0 \u203a BertEncoder_0")
    assert shown_rows() == [row["name"] for row in filtered["rows"]]
    first = filtered["rows"][0]["name"]
    _, stacks = get_json(
        f"{modules_server}/api/operators/stacks?run=bert_h100&module={encoder['id']}&name={quote(first)}"
    )
    page.get_by_test_id("operators-table").locator("tbody tr[data-key]").first.click()
    page.get_by_test_id("stacks").wait_for()
    assert page.get_by_test_id("stacks").locator("details.stack").count() == len(stacks["stacks"]) > 0
    screenshot(page, "operators-of-module")

    page.reload()
    chip.wait_for()
    assert shown_rows() == [row["name"] for row in filtered["rows"]]
    assert query_of(page.url)["module"] == str(encoder["id"])

    page.get_by_test_id("module-chip-remove").click()
    page.wait_for_function("() => !new URLSearchParams(location.search).has('module')")
    page.wait_for_function(
        "(count) => document.querySelectorAll('[data-testid=operators-table] tbody tr[data-key]').length === count",
        arg=everything["total_rows"],
    )
    assert chip.count() == 0
    assert shown_rows() == [row["name"] for row in everything["rows"]]
    screenshot(page, "operators-module-chip-removed")


def _model_summary_cells(page) -> dict[str, list[str]]:
    rows = page.get_by_test_id("model-summary").locator("tbody tr")
    return {cells[0]: cells[1:] for cells in (rows.nth(i).locator("td").all_inner_texts() for i in range(rows.count()))}


def test_model_summary_of_a_pytorch_trace_with_its_unit_switch(page, modules_server):
    """Paddle's Model Summary under the phases of a PyTorch training trace: Paddle's rows, its numbers in ms; the
    unit switch rewrites them in µs and is kept in the URL."""
    _, api = get_json(f"{modules_server}/api/modules?run=checkpointing")
    expected = {row["name"]: row for row in api["phases"]["model_summary"]}
    page.goto(f"{modules_server}/modules?run=checkpointing")
    page.get_by_test_id("model-summary").wait_for()
    cells = _model_summary_cells(page)
    assert list(cells) == ["ProfileStep", "Dataloader", "Forward", "Backward", "Optimization", "Others"]
    step = expected["ProfileStep"]["cpu"]
    assert cells["ProfileStep"][0] == str(expected["ProfileStep"]["calls"])
    assert cells["ProfileStep"][1].startswith(f"{step['total_ns'] / 1e6:.2f} / {step['avg_ns'] / 1e6:.2f} / ")
    backward = expected["Backward"]["cpu"]
    assert cells["Backward"][1].endswith(f" / {backward['ratio_pct']:.2f}")
    assert cells["Others"][1] == f"{expected['Others']['cpu']['total_ns'] / 1e6:.2f} / - / - / - / " + (
        f"{expected['Others']['cpu']['ratio_pct']:.2f}"
    )
    screenshot(page, "modules-model-summary-ms")

    page.get_by_test_id("model-summary-unit").select_option("us")
    page.wait_for_function("() => new URLSearchParams(location.search).get('unit') === 'us'")
    in_us = _model_summary_cells(page)
    assert in_us["ProfileStep"][1].startswith(f"{step['total_ns'] / 1e3:.2f} / ")
    page.reload()
    page.get_by_test_id("model-summary").wait_for()
    assert _model_summary_cells(page) == in_us
    assert page.get_by_test_id("model-summary-unit").input_value() == "us"
    screenshot(page, "modules-model-summary-us")


def test_model_summary_of_a_gpu_trace_has_device_time(page, modules_server):
    _, api = get_json(f"{modules_server}/api/modules?run=resnet")
    gpu = {row["name"]: row["gpu"] for row in api["phases"]["model_summary"]}
    assert gpu["ProfileStep"]["total_ns"] > 0
    page.goto(f"{modules_server}/modules?run=resnet")
    page.get_by_test_id("model-summary").wait_for()
    cells = _model_summary_cells(page)
    assert cells["ProfileStep"][2].startswith(f"{gpu['ProfileStep']['total_ns'] / 1e6:.2f} / ")
    screenshot(page, "modules-model-summary-resnet")
