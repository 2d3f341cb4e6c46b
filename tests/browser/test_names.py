"""Names shortened in the middle keep the part that tells them apart: the run selector (AMD inference runs
that all start with the same folders), pie legends (``aten::cudnn_convolution_backward_weight`` vs
``..._input``) and the Kernel page's Name / Operator columns; the full name is in the title, and a name
column can be widened by dragging its header's edge."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from .support import PIE_SLICES, Server, corpus_path, parsed_server, screenshot, wait_for_plot

AMD = "traces/AMD-AGI_TraceLens/tests/traces/inference"
DEEP = "lab/profiles/2025-11/AMD-AGI_TraceLens/tests/traces/inference"  # a team's folder above the traces
AMD_RUNS = {
    "vllm_decode_full": f"{AMD}/vllm_decode_full/graph_execution.json.gz",
    "sglang_decode": f"{AMD}/sglang_decode/sglang_Qwen3-8B_decode.json.gz",
}

# For every name element: its whole text, its tail (the text node after the shrinking head; a C++ template or
# parameter list may follow it), and whether the tail is drawn inside the element's box (not cut off).
TAILS = """(nodes) => nodes.map((node) => {
  const tailNode = node.querySelector('.head').nextSibling;
  const range = document.createRange();
  if (tailNode) range.selectNode(tailNode);
  const tail = range.getBoundingClientRect();
  const box = node.getBoundingClientRect();
  return {
    text: node.textContent, title: node.title, tail: tailNode ? tailNode.textContent : "",
    visible: tail.width > 0 && tail.left >= box.left - 1 && tail.right <= box.right + 1,
  };
})"""


@pytest.fixture(scope="module")
def amd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("amd")
    for run, source in AMD_RUNS.items():
        target = work / "traces" / DEEP / run
        target.mkdir(parents=True)
        shutil.copy(corpus_path(source), target)
    with parsed_server([work / "traces"], work) as server:
        yield server


def test_run_selector_keeps_the_end_of_long_run_names(page, amd_server: Server) -> None:
    page.goto(f"{amd_server.url}/kernels")
    select = page.locator("#sel-run")
    select.wait_for()
    options = select.locator("option").evaluate_all("(os) => os.map((o) => [o.value, o.textContent, o.title])")
    assert len(options) == len(AMD_RUNS)
    for value, text, title in options:
        assert value.startswith(DEEP) and title == value  # the whole name on hover
        assert len(text) <= 46 and "\u2026" in text
        assert any(text.endswith(f"inference/{run}") for run in AMD_RUNS)
    assert len({text for _, text, _ in options}) == len(options)
    screenshot(page, "names-run-selector")


def test_kernel_operator_column_shows_what_tells_operators_apart(page, amd_server: Server) -> None:
    page.goto(f"{amd_server.url}/kernels?run={DEEP}/vllm_decode_full&group_by=kernel_op")
    table = page.get_by_test_id("kernels-table")
    table.locator("tbody tr").first.wait_for()
    for column in ("td.name", "td.op"):
        cells = table.locator(f"tbody {column} .mid-ellipsis").evaluate_all(TAILS)
        assert cells
        assert any(cell["tail"] for cell in cells)
        for cell in cells:
            assert cell["title"] == cell["text"] and (cell["visible"] or not cell["tail"]), cell
    operators = table.locator("tbody td.op .mid-ellipsis").evaluate_all(TAILS)
    distinct = {c["text"] for c in operators}
    assert len({c["tail"] for c in operators if c["tail"]}) >= len({t for t in distinct if len(t) > 16})
    screenshot(page, "names-kernel-op-columns")


def test_pie_legend_tells_the_convolutions_apart(page, server: Server) -> None:
    """The issue's example: three entries of the Operator pie read ``aten::cudnn_convoluti…``."""
    page.goto(f"{server.url}/operators?run=resnet50_num_workers_0&pie_top=20")
    wait_for_plot(page, "#pies", PIE_SLICES)
    labels = page.locator("#pies .legend .mid-ellipsis").evaluate_all(TAILS)
    convolutions = [label for label in labels if "cudnn_convolution" in label["text"]]
    assert len({c["text"] for c in convolutions}) >= 3
    for label in convolutions:
        assert label["visible"] and label["title"] == label["text"]
    assert len({c["tail"] for c in convolutions}) == len({c["text"] for c in convolutions})
    screenshot(page, "names-operator-pie-legend")


def test_name_column_widens_by_dragging_its_header_edge(page, server: Server) -> None:
    page.goto(f"{server.url}/kernels?run=resnet50_num_workers_0&group_by=kernel_op")
    table = page.get_by_test_id("kernels-table")
    table.locator("tbody tr").first.wait_for()
    cell = table.locator("tbody td.name").first
    head = cell.locator(".head")
    cut_off = "(head) => head.scrollWidth > head.clientWidth + 1"
    before_cell, before_head = cell.bounding_box()["width"], head.bounding_box()["width"]
    assert head.evaluate(cut_off)
    handle = table.locator("thead th[data-key=name] .col-resize").bounding_box()
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + handle["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + 150, y, steps=5)
    page.mouse.up()
    assert cell.bounding_box()["width"] > before_cell + 100
    assert head.bounding_box()["width"] > before_head + 30  # more of the name shows
    assert not head.evaluate(cut_off)  # here: all of it
    assert "sort" not in page.url  # the drag is not a click on the header
    screenshot(page, "names-widened-column")


def test_amd_matrix_kernels_count_on_the_kernel_page_and_overview(page, amd_server: Server) -> None:
    """MI300 vLLM decode: hipBLASLt ``Cijk_..._MI16x16x1_`` GEMMs and triton_kernels' ``matmul_ogs`` run on
    MFMA units; the page said "Uses TC: No" and 0 % and advised FP16 AMP to this bf16 run."""
    run = f"{DEEP}/vllm_decode_full"
    page.goto(f"{amd_server.url}/kernels?run={run}")
    table = page.get_by_test_id("kernels-table")
    table.locator("tbody tr").first.wait_for()
    column = table.locator("thead th").all_text_contents().index("Matrix Cores")
    for row in table.locator("tbody tr").all():
        cells = row.locator("td").all_text_contents()
        expected = "Yes" if cells[0].startswith(("Cijk_", "_matmul_ogs_")) else "No"
        assert cells[column] == expected, cells[0]
    legend = page.get_by_test_id("pie-tensor-cores").locator(".legend li").first.inner_text()
    assert legend.startswith("On matrix cores")
    page.goto(f"{amd_server.url}/overview?run={run}")
    page.get_by_test_id("recommendations").wait_for()
    assert "Mixed Precision" not in page.get_by_test_id("recommendations").inner_text()
    assert "Kernel Time on Matrix Cores" in page.locator("#overview").inner_text()
    screenshot(page, "matrix-cores-amd-overview")
