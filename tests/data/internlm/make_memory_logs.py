"""Write InternLM ``memory.log`` files as ``SimpleMemoryProfiler`` writes them, without torch or a GPU.

No real memory.log is public (the corpus has none), so this replays what the profiler records
(``InternLM/InternLM:internlm/utils/simple_memory_profiler.py``, anchors.md §5.3) for models
described by their parameter shapes and leaf-module output shapes:

- at start: a block with the params, grads and optimizer-params layouts; a tensor's size is
  ``element_size * numel``; grads are counted from the parameters that require grad (their size is
  the parameter's); optimizer params are ``param_groups[g]["params"][i]`` -> ``os_params_mem.g.params.i``;
- after each forward of a model chunk: activation bytes += that chunk's leaf-module outputs (the
  first forward of a chunk also writes the activations layout, one ``activations_<chunk>`` tree per
  chunk); after each backward of a chunk: -= the same;
- at each optimizer step: optimizer state ``state[i][key]`` -> ``os_state_mem.i.key`` (Adam: ``step``,
  a 4-byte tensor, ``exp_avg``, ``exp_avg_sq``) and a block with its layout; the last step writes every
  layout (``with_options="all"``).

Each tree node is dumped depth first in insertion order as
``layer: <dotted path>, layer_mem: <own MB>, total_mem: <subtree MB>`` with two decimals. Times are
made up (fixed durations per forward / backward / step), printed as Python prints a float.

    python tests/data/internlm/make_memory_logs.py    # rewrites the logs below this folder
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

MB = 1024 * 1024
HERE = Path(__file__).resolve().parent
FORWARD_S, BACKWARD_S, STEP_S = 0.3, 0.7, 0.1


@dataclass
class Node:
    """A module path's bytes (own) and the nodes below it, in insertion order."""

    name: str
    own: int = 0
    children: dict[str, Node] = field(default_factory=dict)

    def set(self, dotted: str, size: int) -> None:
        node = self
        for part in dotted.split("."):
            node = node.children.setdefault(part, Node(part))
        node.own = size

    def total(self) -> int:
        return self.own + sum(child.total() for child in self.children.values())

    def dump(self, prefix: str = "") -> str:
        path = f"{prefix}.{self.name}" if prefix else self.name
        line = f"layer: {path}, layer_mem: {self.own / MB:.2f} MB, total_mem: {self.total() / MB:.2f} MB\n"
        return line + "".join(child.dump(path) for child in self.children.values())


@dataclass
class Model:
    """Parameters (name, numel, bytes per element) and, per chunk, leaf modules and their output bytes."""

    parameters: list[tuple[str, int, int]]
    activations: list[list[tuple[str, int]]]  # per chunk: (leaf module name, output bytes), in call order
    optimizer_groups: list[list[tuple[int, int]]]  # per param group: (numel, bytes per element) of its params


class Profiler:
    def __init__(self, model: Model, out: Path) -> None:
        self.model, self.out, self.clock = model, out, 0.0
        self.params, self.grads = Node("param_mem"), Node("grad_mem")
        for name, numel, element in model.parameters:
            self.params.set(name, numel * element)
            self.grads.set(name, numel * element)
        self.os_params, self.os_state = Node("os_params_mem"), Node("os_state_mem")
        for group, tensors in enumerate(model.optimizer_groups):
            for index, (numel, element) in enumerate(tensors):
                self.os_params.set(f"{group}.params.{index}", numel * element)
        self.chunks = [Node(f"activations_{chunk}") for chunk in range(len(model.activations))]
        self.seen_chunks: set[int] = set()
        self.activation = 0
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("")
        self.point(["params", "grads", "os_params"])

    def point(self, layouts: list[str]) -> None:
        parts = {
            "params": self.params.total(),
            "grads": self.grads.total(),
            "os_params": self.os_params.total(),
            "os_state": self.os_state.total(),
        }
        total = (sum(parts.values()) + self.activation) / MB
        summary = ", ".join(f"{name}_memory: {size / MB:.2f} MB" for name, size in parts.items())
        trees = {"params": [self.params], "grads": [self.grads], "os_params": [self.os_params]}
        trees |= {"os_state": [self.os_state], "activation_base": self.chunks}
        layout = "".join(f"{name}_layout:\n" + "".join(tree.dump() for tree in trees[name]) for name in layouts)
        with open(self.out, "a", encoding="utf-8") as log:
            log.write(f"Memory State:\ntime: {self.clock}\n---summary---\ntotal_memory: {total:.2f} MB\n")
            log.write(f"{summary}, activation_memory: {self.activation / MB:.2f} MB\n")
            log.write(("---Layout---\n" + layout if layout else "") + "\n")

    def forward(self, chunk: int) -> None:
        self.clock += FORWARD_S
        first = chunk not in self.seen_chunks
        if first:
            for name, size in self.model.activations[chunk]:
                self.chunks[chunk].set(name, size)
            self.seen_chunks.add(chunk)
        self.activation += self.chunks[chunk].total()
        self.point(["activation_base"] if first else [])

    def backward(self, chunk: int) -> None:
        self.clock += BACKWARD_S
        self.activation -= self.chunks[chunk].total()
        self.point([])

    def step(self, last: bool) -> None:
        self.clock += STEP_S
        self.os_state = Node("os_state_mem")
        index = 0
        for tensors in self.model.optimizer_groups:
            for numel, _element in tensors:
                for key, size in (("step", 4), ("exp_avg", numel * 4), ("exp_avg_sq", numel * 4)):
                    self.os_state.set(f"{index}.{key}", size)
                index += 1
        everything = ["params", "grads", "os_params", "os_state", "activation_base"]
        self.point(everything if last else ["os_state"])


def internlm_example(out: Path) -> None:
    """The profiler's own ``__main__``: a fp32 model of Linear(5120, 5120) layers (layer2 nested), Adam,
    two forwards of a (128, 5120) batch, two backwards, one step (``total_steps=1``)."""
    linear = 5120 * 5120
    parameters = [
        ("layer1.weight", linear, 4),
        ("layer1.bias", 5120, 4),
        ("layer3.weight", linear, 4),
        ("layer2.layer1.weight", linear, 4),
        ("layer2.layer1.bias", 5120, 4),
        ("layer2.layer3.weight", linear, 4),
    ]
    output = 128 * 5120 * 4
    leaves = [("layer1", output), ("layer2.layer1", output), ("layer2.layer3", output), ("layer3", output)]
    model = Model(parameters, [leaves], [[(numel, 4) for _name, numel, _element in parameters]])
    profiler = Profiler(model, out)
    profiler.forward(0)
    profiler.forward(0)
    profiler.backward(0)
    profiler.backward(0)
    profiler.step(last=True)


def pipeline_chunks(out: Path, rank: int, data_parallel: int) -> None:
    """A small bf16 transformer in two pipeline chunks (InternLM's ``model.0.*`` / ``model.1.*``), a ZeRO
    optimizer whose fp32 master weights and Adam state are this data-parallel rank's shard of each chunk,
    two micro-batches per step, three steps (the last writes every layout)."""
    hidden, vocab, layers, tokens = 1024, 32000, 4, 2 * 2048
    parameters = [("0.embedding.weight", vocab * hidden, 2)]
    for block in range(layers):
        chunk = 0 if block < layers // 2 else 1
        prefix = f"{chunk}.blocks.{block}"
        parameters += [
            (f"{prefix}.mixer.Wqkv.weight", 3 * hidden * hidden, 2),
            (f"{prefix}.mixer.out_proj.weight", hidden * hidden, 2),
            (f"{prefix}.norm1.weight", hidden, 2),
            (f"{prefix}.mlp.w1.weight", 4 * hidden * hidden, 2),
            (f"{prefix}.mlp.w2.weight", 4 * hidden * hidden, 2),
            (f"{prefix}.norm2.weight", hidden, 2),
        ]
    parameters += [("1.norm.weight", hidden, 2), ("1.head.weight", vocab * hidden, 2)]
    activations: list[list[tuple[str, int]]] = [[("embedding", tokens * hidden * 2)], []]
    for block in range(layers):
        chunk = 0 if block < layers // 2 else 1
        activations[chunk] += [
            (f"blocks.{block}.mixer.Wqkv", tokens * 3 * hidden * 2),
            (f"blocks.{block}.mixer.out_proj", tokens * hidden * 2),
            (f"blocks.{block}.norm1", tokens * hidden * 2),
            (f"blocks.{block}.mlp.w1", tokens * 4 * hidden * 2),
            (f"blocks.{block}.mlp.w2", tokens * hidden * 2),
            (f"blocks.{block}.norm2", tokens * hidden * 2),
        ]
    activations[1] += [("norm", tokens * hidden * 2), ("head", tokens * vocab * 2)]
    chunk_numel = [sum(n for name, n, _e in parameters if name.startswith(f"{c}.")) for c in (0, 1)]
    shards = [[(numel // data_parallel, 4)] for numel in chunk_numel]  # one flat fp32 shard per chunk's group
    profiler = Profiler(Model(parameters, activations, shards), out)
    profiler.clock += 0.001 * rank  # ranks start a little apart
    steps, micro_batches = 3, 2
    for step in range(steps):
        for _ in range(micro_batches):
            profiler.forward(0)
            profiler.forward(1)
        for _ in range(micro_batches):
            profiler.backward(1)
            profiler.backward(0)
        profiler.step(last=step == steps - 1)


def main() -> None:
    internlm_example(HERE / "memory_trace" / "rank0_dp0_tp0" / "memory.log")
    run = HERE / "RUN" / "internlm_tiny" / "05-01-10-00-00" / "memory_trace"
    for rank in range(2):
        pipeline_chunks(run / f"rank{rank}_dp{rank}_wp0_tp0" / "memory.log", rank, data_parallel=2)


if __name__ == "__main__":
    main()
