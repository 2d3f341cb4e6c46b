"""InternLM memory.log: hand-computed numbers from the profiler's own example, cut logs, and garbage refused.

The logs under tests/data/internlm are written by tests/data/internlm/make_memory_logs.py as InternLM's
SimpleMemoryProfiler writes them (no real one is public). The example log is the profiler's ``__main__``:
fp32 Linear(5120, 5120) layers ``layer1`` (with bias), ``layer3`` and a nested ``layer2`` holding another
``layer1`` (with bias) and ``layer3``; Adam; two forwards of a (128, 5120) batch, two backwards, one step.

Sizes are logged in MB (MiB) with two decimals and read back as round(MB * 1,048,576) bytes:
- a weight is 5120 * 5120 * 4 = 104,857,600 B = 100.00 MB exactly; a bias 5120 * 4 = 20,480 B, logged as
  0.02 MB, read as 20,972 B (0.02 * 1,048,576 = 20,971.52);
- parameters: 4 weights + 2 biases = 419,471,360 B = 400.039 MB, logged "400.04 MB" -> 419,472,343 B
  (400.04 * 1,048,576 = 419,472,343.04); gradients and the optimizer's parameters are the same;
- a leaf module's output is 128 * 5120 * 4 = 2,621,440 B = 2.50 MB; the forward of the model adds its four
  leaves, 10.00 MB = 10,485,760 B; each backward removes them;
- Adam's state after the step: exp_avg and exp_avg_sq per parameter (2 * 419,471,360 B) and a 4-byte step
  per parameter: 838,942,744 B = 800.078 MB, logged "800.08 MB" -> 838,944,686 B;
- total at the start 3 * 400.039 MB = 1200.117 MB, logged "1200.12 MB" -> 1,258,417,029 B (1200.12 * 1,048,576
  = 1,258,417,029.12); at the step 2000.195 MB, logged "2000.20 MB" -> 2,097,361,715 B.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from profscope.analysis.memory_log import layer_tree, log_curve, log_summary
from profscope.ingest.memory_log import MemoryLogFormatError, parse_memory_log, parse_memory_log_text

DATA = Path(__file__).resolve().parent / "data" / "internlm"
EXAMPLE = DATA / "memory_trace" / "rank0_dp0_tp0" / "memory.log"
PIPELINE = DATA / "RUN" / "internlm_tiny" / "05-01-10-00-00" / "memory_trace" / "rank0_dp0_wp0_tp0" / "memory.log"
MB = 1_048_576
WEIGHT, BIAS = 104_857_600, 20_972
PARAMS = 419_472_343
ACTIVATIONS = 10_485_760


@pytest.fixture(scope="module")
def example_text() -> str:
    return EXAMPLE.read_text()


def test_the_profilers_example_reads_with_hand_computed_numbers(example_text: str) -> None:
    log = parse_memory_log_text(example_text)
    assert log.points == 6  # start, forward, forward, backward, backward, step
    assert log.time_s == pytest.approx([0.0, 0.3, 0.6, 1.3, 2.0, 2.1])
    assert log.total_bytes == [1_258_417_029, 1_268_902_789, 1_279_388_549, 1_268_902_789, 1_258_417_029, 2_097_361_715]
    assert log.category_bytes["params"] == [PARAMS] * 6
    assert log.category_bytes["grads"] == [PARAMS] * 6
    assert log.category_bytes["os_params"] == [PARAMS] * 6
    assert log.category_bytes["os_state"] == [0] * 5 + [838_944_686]
    assert log.category_bytes["activation"] == [0, ACTIVATIONS, 2 * ACTIVATIONS, ACTIVATIONS, 0, 0]
    # the last step writes every layout; the activations layout was also written at the first forward
    assert sorted(log.layouts) == ["activation_base", "grads", "os_params", "os_state", "params"]
    assert {layout.point for layout in log.layouts.values()} == {5}
    params = log.layouts["params"]
    assert params.paths[:4] == ["param_mem", "param_mem.layer1", "param_mem.layer1.weight", "param_mem.layer1.bias"]
    assert params.own_bytes[2:4] == [WEIGHT, BIAS]
    assert params.total_bytes[0] == PARAMS and params.total_bytes[1] == 104_878_572  # "100.02 MB"
    assert log.warnings == []


def test_curve_and_summary_have_the_profiler_memory_views_shape(example_text: str) -> None:
    log = parse_memory_log_text(example_text)
    curve = log_curve(log)
    assert curve["curve"][1] == [pytest.approx(300_000.0), 1_268_902_789, None]  # [t_us, allocated, reserved]
    assert [point[1] for point in curve["curve"]] == log.total_bytes
    assert curve["category_curve"]["activation"] == [0, ACTIVATIONS, 2 * ACTIVATIONS, ACTIVATIONS, 0, 0]
    windowed = log_curve(log, start_us=250_000, end_us=1_400_000)
    assert windowed["points_in_window"] == 3 and windowed["category_curve"]["activation"] == [
        ACTIVATIONS,
        2 * ACTIVATIONS,
        ACTIVATIONS,
    ]
    summary = log_summary(log)
    assert summary["peak_allocated_bytes"] == 2_097_361_715 and summary["peak_time_us"] == pytest.approx(2_100_000)
    assert summary["peak_reserved_bytes"] is None
    assert summary["peaks"]["activation"] == 2 * ACTIVATIONS
    assert summary["at_peak"]["os_state"] == 838_944_686 and summary["at_peak"]["activation"] == 0
    assert [s["category"] for s in summary["sunbursts"]] == ["params", "grads", "optimizer", "activations"]


def test_many_points_are_drawn_per_pixel_column_keeping_the_peak() -> None:
    block = "Memory State:\ntime: {t}\n---summary---\ntotal_memory: {total:.2f} MB\n" + ", ".join(
        f"{name}_memory: {{{name}:.2f}} MB" for name in ("params", "grads", "os_params", "os_state", "activation")
    )
    text = "".join(
        block.format(t=i / 100, total=1 + (i == 777) * 5, params=1, grads=0, os_params=0, os_state=0, activation=0)
        + "\n\n"
        for i in range(1000)
    )
    curve = log_curve(parse_memory_log_text(text), width_px=50)
    assert curve["points_in_window"] == 1000
    assert len(curve["curve"]) <= 4 * 50
    assert max(point[1] for point in curve["curve"]) == 6 * MB  # the one higher point survives


def test_layer_sunbursts_sum_the_logged_layers(example_text: str) -> None:
    log = parse_memory_log_text(example_text)

    def value(tree: dict, node: str) -> int:
        return tree["values"][tree["ids"].index(node)]

    params = layer_tree(log, "params")
    assert params["parents"][0] == "" and params["ids"][0] == "param_mem" and params["labels"][0] == "parameters"
    assert value(params, "param_mem.layer1") == WEIGHT + BIAS
    assert value(params, "param_mem.layer2") == 2 * WEIGHT + BIAS  # layer2.layer1 (with bias) and layer2.layer3
    # summed from the rounded own sizes: 1 B above the rounded logged total
    assert params["total_bytes"] == 4 * WEIGHT + 2 * BIAS == PARAMS + 1
    for node, parent in zip(params["ids"], params["parents"], strict=True):
        if parent:
            children = [v for v, p in zip(params["values"], params["parents"], strict=True) if p == node]
            assert sum(children) <= value(params, node)  # branchvalues="total" holds: a node is at least its children

    optimizer = layer_tree(log, "optimizer")  # two trees: the parameters' copies and Adam's state
    assert optimizer["ids"][0] == "optimizer" and optimizer["parents"][0] == ""
    assert optimizer["layouts"] == ["os_params", "os_state"]
    assert value(optimizer, "os_params_mem") == 4 * WEIGHT + 2 * BIAS
    assert value(optimizer, "os_state_mem.0") == 2 * WEIGHT  # exp_avg + exp_avg_sq; the 4-byte step logs as 0.00
    assert value(optimizer, "optimizer") == value(optimizer, "os_params_mem") + value(optimizer, "os_state_mem")

    activations = layer_tree(log, "activations")
    assert activations["ids"][0] == "activations_0" and activations["labels"][0] == "activations"
    assert value(activations, "activations_0.layer2") == 2 * 2_621_440
    assert activations["total_bytes"] == ACTIVATIONS
    assert activations["time_us"] == pytest.approx(2_100_000)


def test_two_model_chunks_give_one_activation_tree_each() -> None:
    """Pipeline chunks of a bf16 model (hidden 1024, 2 x 2048 tokens): chunk 0 is the embedding and blocks 0-1,
    chunk 1 blocks 2-3, the final norm and the head (vocabulary 32,000)."""
    log = parse_memory_log(io.BytesIO(PIPELINE.read_bytes()), max_bytes=1 << 20)
    tree = layer_tree(log, "activations")
    assert tree["ids"][0] == "activations" and {tree["ids"][1], tree["ids"][-1].split(".")[0]} == {
        "activations_0",
        "activations_1",
    }
    token_row = 4096 * 1024 * 2  # one (tokens, hidden) bf16 output: 8.00 MB
    block = (3 + 1 + 1 + 4 + 1 + 1) * token_row  # Wqkv, out_proj, norm1, w1, w2, norm2
    head = 4096 * 32000 * 2  # 250.00 MB
    assert tree["values"][tree["ids"].index("activations_0")] == token_row + 2 * block
    assert tree["values"][tree["ids"].index("activations_1")] == 2 * block + token_row + head
    # two micro-batches through both chunks before the first backward
    assert max(log.category_bytes["activation"]) == 2 * (token_row + 4 * block + token_row + head)
    assert log.points == 1 + 3 * (4 + 4 + 1)  # start, then per step 4 forwards, 4 backwards and the step


def test_a_log_cut_while_written_keeps_every_finished_summary(example_text: str) -> None:
    """At any cut, the points are the blocks whose summary line was written whole; a layout is kept only from
    a block written to its end."""
    summary_ends = [
        example_text.index("\n", example_text.index("params_memory:", start)) + 1
        for start in range(len(example_text))
        if example_text.startswith("Memory State:", start)
    ]
    for cut in range(0, len(example_text) + 1, 7):
        log = parse_memory_log_text(example_text[:cut])
        assert log.points == sum(end <= cut for end in summary_ends), cut
        if cut < len(example_text) - 1:
            assert "os_state" not in log.layouts  # written only by the last block
    cut_in_summary = parse_memory_log_text(example_text[: summary_ends[-1] - 10])
    assert cut_in_summary.points == 5
    assert cut_in_summary.warnings == [
        "the last memory state (line 76) was cut before its summary was written: left out"
    ]
    cut_in_layout = parse_memory_log_text(example_text[: example_text.index("os_state_layout:") + 30])
    assert cut_in_layout.points == 6 and cut_in_layout.total_bytes[-1] == 2_097_361_715
    assert cut_in_layout.warnings == [
        "the last memory state (line 76) was not finished when read: its summary is kept, "
        "any layout it was writing is left out"
    ]
    assert cut_in_layout.layouts["params"].point == 0  # the start's layout stands; the last block's is left out
    assert parse_memory_log_text(example_text).layouts["params"].point == 5
    empty = parse_memory_log_text("")
    assert empty.points == 0 and empty.warnings == ["no memory state was written yet (the log is empty)"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"hello world\n",
            "line 1: expected 'Memory State:' (an InternLM SimpleMemoryProfiler memory.log), got 'hello",
        ),
        (b'{"traceEvents": []}', "line 1: expected 'Memory State:'"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not text (byte 0 is not UTF-8)"),
        (
            b"Memory State:\ntime: 0.5\n---summary---\ntotal_memory: 1.00 MB\nparams_memory: one MB\n\n",
            "line 5: expected params_memory: X MB, grads_memory: X MB, ... activation_memory: X MB, got 'params_memory",
        ),
        (b"Memory State:\ntime: soon\n---summary---\n", "line 2: expected time: <seconds>, got 'time: soon'"),
        (
            b"Memory State:\ntime: 1\n---summary---\ntotal_memory: 0.00 MB\n"
            b"params_memory: 0.00 MB, grads_memory: 0.00 MB, os_params_memory: 0.00 MB, os_state_memory: 0.00 MB, "
            b"activation_memory: 0.00 MB\n---Layout---\nweights_layout:\n\n",
            "line 7: expected a layout of params, grads, os_params, os_state, activation_base, got 'weights_layout:'",
        ),
    ],
)
def test_garbage_is_refused_with_where_and_why(content: bytes, message: str) -> None:
    with pytest.raises(MemoryLogFormatError) as refused:
        parse_memory_log(io.BytesIO(content), max_bytes=1 << 20)
    assert message in str(refused.value)


def test_a_block_missing_lines_in_the_middle_of_the_log_is_refused(example_text: str) -> None:
    broken = example_text.replace("---summary---\ntotal_memory: 1210.12 MB\n", "---summary---\n", 1)
    with pytest.raises(MemoryLogFormatError, match=r"line 47: expected total_memory: X MB, got 'params_memory"):
        parse_memory_log_text(broken)


def test_a_log_over_the_size_limit_is_not_read(example_text: str) -> None:
    with pytest.raises(MemoryLogFormatError, match="larger than 1,000 bytes"):
        parse_memory_log(io.BytesIO(example_text.encode()), max_bytes=1000)
