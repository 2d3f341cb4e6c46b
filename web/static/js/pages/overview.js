// Overview: environment, GPU summary, step time breakdown, averages, notes and recommendations.

import { isAbort, loadView } from "../api.js";
import { renderPie, renderStepBars } from "../charts.js";
import { csvButton } from "../csv.js";
import { byId, clear, el } from "../dom.js";
import { DASH, fmtDuration, fmtFixed2, fmtGiB, fmtInt, fmtPctSign, fmtUsColumn } from "../format.js";
import { initSelector, setJsonLink, showViewError } from "../selector.js";
import { withQuery } from "../urlstate.js";

// Priority order of the breakdown (each µs of a step is counted once, by the first category active).
export const STEP_CATEGORIES = [
  { key: "kernel_us", label: "Kernel", color: "#4e79a7" },
  { key: "memcpy_us", label: "Memcpy", color: "#f28e2b" },
  { key: "memset_us", label: "Memset", color: "#edc948" },
  { key: "communication_us", label: "Communication", color: "#b07aa1" },
  { key: "runtime_us", label: "Runtime", color: "#59a14f" },
  { key: "dataloader_us", label: "DataLoader", color: "#e15759" },
  { key: "cpu_exec_us", label: "CPU Exec", color: "#76b7b2" },
  { key: "other_us", label: "Other", color: "#bab0ac" },
];

const CATEGORY_HELP = {
  Kernel: "GPU kernels running (communication kernels excluded).",
  Memcpy: "GPU memory copies, where no kernel runs.",
  Memset: "GPU memory sets, where no kernel or copy runs.",
  Communication: "Collective communication (NCCL / Gloo ops and their kernels).",
  Runtime: "CUDA / HIP runtime calls on the host (launches, syncs) while the GPU is idle.",
  DataLoader: "Fetching the next batch (enumerate(DataLoader)#...__next__).",
  "CPU Exec":
    "Other host operators and user annotations (record_function ranges) while nothing above is active; " +
    "annotations count here although they are not rows of the Operator view (docs/definitions.md, \"CPU Exec\").",
  Other: "Time covered by none of the above.",
};

const GPU_METRICS = [
  {
    label: "GPU Utilization",
    key: "utilization_pct",
    help:
      "Share of the all-steps time in which at least one kernel runs on this GPU (union of kernel intervals " +
      "within [first step start, last step end]). A kernel with a single thread running continuously counts as 100%.",
  },
  {
    label: "Est. SM Efficiency",
    key: "est_sm_efficiency_pct",
    help:
      "Estimated share of SMs busy: per kernel min(blocks / number of SMs, 1), concurrent kernels summed and clipped " +
      "at 100%, weighted by time over the all-steps time.",
  },
  {
    label: "Est. Achieved Occupancy",
    key: "est_achieved_occupancy_pct",
    help:
      "Duration-weighted mean over kernels of the trace's 'est. achieved occupancy %' " +
      "(min(threads / SMs / max threads per SM, theoretical occupancy)).",
  },
  {
    label: "Kernel Time on Matrix Cores",
    key: "tensor_cores_pct",
    help:
      "Time of kernels that run on matrix cores (NVIDIA Tensor Cores, AMD MFMA / WMMA; recognised by kernel name) " +
      "divided by the time of all kernels.",
  },
];

function kv(pairs) {
  return el(
    "dl",
    { class: "kv" },
    pairs.map(([label, value, help]) => [el("dt", { title: help || null, text: label }), el("dd", {}, value ?? DASH)]),
  );
}

/** "nccl, rank 0 of 128", leaving out what the trace did not record. */
function describeDistributed(dist) {
  if (!dist) return null;
  const rank = dist.rank ?? null;
  const parts = [
    dist.backend || null,
    rank !== null ? `rank ${rank}${dist.world_size ? ` of ${dist.world_size}` : ""}` : null,
    rank === null && dist.world_size ? `${dist.world_size} ranks` : null,
  ].filter(Boolean);
  return parts.length ? parts.join(", ") : null;
}

function environmentCard(data, selection) {
  const env = data.environment || {};
  const dist = env.distributed;
  const pairs = [
    ["Number of Worker(s)", fmtInt(selection.runInfo.workers.length)],
    ["Device Type", env.device_type || DASH],
    ["Steps", `${fmtInt(data.steps.length)}${data.steps_from_profiler_steps ? "" : " (whole trace)"}`,
      "Steps come from ProfilerStep#N events, else from ranges named like steps (iteration N) or the range " +
      "picked below; without them the whole trace is one step."],
  ];
  const distributed = describeDistributed(dist);
  if (distributed) pairs.push(["Distributed", distributed]);
  return el(
    "section",
    { class: "panel", "data-testid": "environment" },
    el("h2", { text: "Environment" }),
    kv(pairs),
    stepRangePicker(data),
  );
}

// Which ranges are the steps: automatic (ProfilerStep#N, "iteration N" ranges) or a repeated range the user
// picks (NVTX / record_function); the choice lives in the URL as step_range, like every page state.
function stepRangePicker(data) {
  const candidates = data.step_ranges || [];
  if (!candidates.length && !data.step_range) return null;
  const select = el(
    "select",
    { id: "step-range", "data-testid": "step-range" },
    el("option", { value: "", text: "automatic" }),
    candidates.map((c) => el("option", { value: c.name, text: `${c.name} (${fmtInt(c.count)})` })),
  );
  if (data.step_range && !candidates.some((c) => c.name === data.step_range)) {
    select.append(el("option", { value: data.step_range, text: data.step_range }));
  }
  select.value = data.step_range || "";
  select.addEventListener("change", () => {
    const params = new URLSearchParams(location.search);
    if (select.value) params.set("step_range", select.value);
    else params.delete("step_range");
    location.search = params.toString();
  });
  return el("label", { class: "step-range" }, "Steps from ", select);
}

function gpuCard(gpu) {
  const pairs = [
    ["Memory", gpu.memory_bytes == null ? DASH : fmtGiB(gpu.memory_bytes), "Total global memory of the device (1 GiB = 2^30 bytes)."],
    ["Compute Capability", gpu.compute_capability || DASH],
    ...GPU_METRICS.map((m) => [m.label, gpu[m.key] == null ? DASH : fmtPctSign(gpu[m.key], 2), m.help]),
    ["Kernel Time", gpu.kernel_time_us == null ? DASH : fmtDuration(gpu.kernel_time_us), "Sum of kernel durations on this GPU."],
  ];
  return el(
    "section",
    { class: "panel", "data-testid": "gpu-card" },
    el("h2", { class: "card-title" }, `GPU ${gpu.device}`, el("span", { class: "sub", text: gpu.name || "unknown device" })),
    kv(pairs),
  );
}

function definitions() {
  return el(
    "details",
    { class: "definitions" },
    el("summary", { text: "How the GPU metrics are defined" }),
    el("dl", {}, GPU_METRICS.map((m) => [el("dt", { text: m.label }), el("dd", { text: m.help })])),
  );
}

function traceLink(selection, step) {
  return withQuery("/trace", {
    run: selection.run,
    worker: selection.worker,
    span: selection.span,
    start_us: step.start_us,
    end_us: step.start_us + step.total_us,
  });
}

function presentCategories(data) {
  return STEP_CATEGORIES.filter((c) => data.steps.some((s) => (s[c.key] || 0) > 0) || (data.average[c.key] || 0) > 0);
}

function drawStepChart(target, data, selection) {
  renderStepBars(target, {
    steps: data.steps,
    categories: presentCategories(data),
    totalKey: "total_us",
    onSelect: (step) => location.assign(traceLink(selection, step)),
  });
}

function averagesTable(data) {
  const total = data.average.total_us || 0;
  const fmtTime = fmtUsColumn([total]); // one number of decimals for the column, set by its largest value
  const share = (us) => (total ? (100 * us) / total : null);
  const csv = csvButton(() => ({
    filename: "overview-average-step.csv",
    header: ["Category", "Time (\u00b5s)", "%"],
    rows: [
      ...STEP_CATEGORIES.map((c) => [c.label, data.average[c.key] || 0, share(data.average[c.key] || 0)]),
      ["Total", total, total ? 100 : null],
    ],
  }));
  return [el("div", { class: "table-tools" }, csv), el(
    "table",
    { class: "data compact", "data-testid": "averages" },
    el("thead", {}, el("tr", {}, el("th", { text: "Category" }), el("th", { class: "num", text: "Time (\u00b5s)" }), el("th", { class: "num", text: "%" }))),
    el(
      "tbody",
      {},
      STEP_CATEGORIES.map((c) =>
        el(
          "tr",
          {},
          el("td", { title: CATEGORY_HELP[c.label] }, el("span", { class: "swatch-inline", style: { background: c.color } }), c.label),
          el("td", { class: "num", text: fmtTime(data.average[c.key] || 0) }),
          el("td", { class: "num", text: total ? fmtFixed2((100 * (data.average[c.key] || 0)) / total) : DASH }),
        ),
      ),
      el(
        "tr",
        { class: "total" },
        el("td", { text: "Total" }),
        el("td", { class: "num", text: fmtTime(total) }),
        el("td", { class: "num", text: total ? "100.00" : DASH }),
      ),
    ),
  )];
}

function stepsTable(data, selection) {
  const categories = STEP_CATEGORIES;
  const fmtTime = fmtUsColumn(data.steps.map((s) => s.start_us + s.total_us)); // the same decimals in every column
  return el(
    "details",
    { class: "steps-details" },
    el("summary", { text: `Per-step numbers (${data.steps.length} step${data.steps.length === 1 ? "" : "s"}, \u00b5s)` }),
    el("div", { class: "table-tools" }, csvButton(() => ({
      filename: "overview-steps.csv",
      header: ["Step", "Start (\u00b5s)", "Total (\u00b5s)", ...categories.map((c) => `${c.label} (\u00b5s)`)],
      rows: data.steps.map((s) => [s.step, s.start_us, s.total_us, ...categories.map((c) => s[c.key] || 0)]),
    }))),
    el(
      "div",
      { class: "table-scroll" },
      el(
        "table",
        { class: "data compact", "data-testid": "steps" },
        el(
          "thead",
          {},
          el("tr", {}, el("th", { text: "Step" }), el("th", { class: "num", text: "Start" }), el("th", { class: "num", text: "Total" }),
            categories.map((c) => el("th", { class: "num", text: c.label })), el("th", { text: "Trace" })),
        ),
        el(
          "tbody",
          {},
          data.steps.map((s) =>
            el(
              "tr",
              {},
              el("td", { text: String(s.step) }),
              el("td", { class: "num", text: fmtTime(s.start_us) }),
              el("td", { class: "num", text: fmtTime(s.total_us) }),
              categories.map((c) => el("td", { class: "num", text: fmtTime(s[c.key] || 0) })),
              el("td", {}, el("a", { href: traceLink(selection, s), text: "open" })),
            ),
          ),
        ),
      ),
    ),
  );
}

function render(data, selection) {
  const root = byId("overview");
  const cards = el("div", { class: "grid cards" }, environmentCard(data, selection), (data.gpus || []).map(gpuCard));
  const gpuDefs = data.gpus && data.gpus.length ? definitions() : null;

  const barPanel = el(
    "section",
    { class: "panel fill", "data-testid": "step-breakdown" },
    el("h2", {}, "Step Time Breakdown", el("span", { class: "sub", text: "click a bar to open that step in the trace view" })),
    el("div", { class: "chart", id: "step-chart" }),
  );
  const piePanel = el(
    "section",
    { class: "panel pie-panel", "data-testid": "average-step" },
    el("h2", {}, "Average Step Time", el("span", { class: "sub", text: fmtDuration(data.average.total_us) })),
    el("div", { id: "average-pie" }),
    averagesTable(data),
  );

  const notes = (data.notes || []).length
    ? el(
        "section",
        { class: "panel", "data-testid": "notes" },
        el("h2", { text: "Notes" }),
        el("ul", { class: "plain" }, data.notes.map((n) => el("li", { text: n }))),
      )
    : null;
  const recommendations = el(
    "section",
    { class: "panel", "data-testid": "recommendations" },
    el("h2", { text: "Performance Recommendations" }),
    (data.recommendations || []).length
      ? el("ul", { class: "plain recommendations" }, data.recommendations.map((r) => el("li", { text: r })))
      : el("p", { class: "muted", text: "No recommendation for this trace." }),
  );

  clear(
    root,
    cards,
    gpuDefs,
    el("div", { class: "grid charts-2-1" }, barPanel, piePanel),
    recommendations,
    notes,
    el("section", { class: "panel" }, stepsTable(data, selection)),
  );

  // The pie first: it sets the row height that the bar chart then fills.
  renderPie(byId("average-pie"), {
    slices: presentCategories(data).map((c) => ({ label: c.label, value: data.average[c.key] || 0, color: c.color })),
    emptyText: "No step time recorded.",
    legend: false,
  });
  if (!data.steps.length) {
    clear(byId("step-chart"), el("div", { class: "pie-empty", text: "This trace has no steps to break down." }));
  } else {
    drawStepChart(byId("step-chart"), data, selection);
  }
}

async function main() {
  const statusEl = byId("status");
  const selection = await initSelector("overview", statusEl);
  if (!selection) return;
  const stepRange = new URLSearchParams(location.search).get("step_range");
  const url = withQuery("/api/overview", {
    run: selection.run, worker: selection.worker, span: selection.span, step_range: stepRange,
  });
  setJsonLink(url);
  try {
    const data = await loadView(url, { statusEl });
    render(data, selection);
  } catch (error) {
    if (!isAbort(error)) showViewError(statusEl, error, selection);
  }
}

main();
