"""Name rules shared by the analyses: steps, data loading, communication, matrix (tensor) cores.

Kept in one place so that each rule has one definition (torch-tb-profiler's, widened where it
silently missed newer names) and one test.
"""

from __future__ import annotations

import re

import numpy as np

from profscope.tables import StringTable

PROFILER_STEP_PREFIX = "ProfilerStep#"
# PaddlePaddle's profiler names its steps "ProfileStep#N"
PROFILER_STEP_PREFIXES = (PROFILER_STEP_PREFIX, "ProfileStep#")

# torch-tb-profiler's kernel-name patterns for tensor-core kernels (from NVIDIA PyProf's tc.py).
TENSOR_CORE_KERNEL_PATTERNS = (
    "h884",
    "s884",
    "h1688",
    "s1688",
    "hmma",
    "i8816",
    "16816",
    "dgrad_1x1_stride_2x2",
    "first_layer_wgrad_kernel",
    "conv1x1",
    "conv2d_c1_k1",
    "direct_group",
    "xmma_implicit_gemm",
    "xmma_sparse_conv",
    "xmma_warp_specialized_implicit_gemm",
    "xmma_gemm",
    "xmma_sparse_gemm",
    "c1688",
)

# Operators that can use tensor cores (torch-tb-profiler's list, from the autocast fp16 list).
TENSOR_CORE_ELIGIBLE_OPS = frozenset(
    (
        "aten::_convolution",
        "aten::conv1d",
        "aten::conv2d",
        "aten::conv3d",
        "aten::conv_tbc",
        "aten::conv_transpose1d",
        "aten::conv_transpose2d",
        "aten::conv_transpose3d",
        "aten::convolution",
        "aten::cudnn_convolution",
        "aten::cudnn_convolution_transpose",
        "aten::prelu",
        "aten::addmm",
        "aten::addmv",
        "aten::addr",
        "aten::matmul",
        "aten::mm",
        "aten::mv",
        "aten::linear",
        "aten::addbmm",
        "aten::baddbmm",
        "aten::bmm",
        "aten::chain_matmul",
        "aten::linalg_multi_dot",
        "aten::_thnn_fused_lstm_cell",
        "aten::_thnn_fused_gru_cell",
        "aten::lstm_cell",
        "aten::gru_cell",
        "aten::rnn_tanh_cell",
        "aten::rnn_relu_cell",
        "CudnnConvolutionBackward",
        "BmmBackward0",
        "aten::cudnn_convolution_transpose_backward",
        "CudnnConvolutionTransposeBackward",
        "MmBackward",
        "aten::cudnn_convolution_backward_weight",
        "aten::addmm_",
        "AddmvBackward",
        "MvBackward",
        "aten::cudnn_convolution_transpose_backward_weight",
        "aten::cudnn_convolution_transpose_backward_input",
        "AddmmBackward",
        "aten::cudnn_convolution_backward_input",
        "AddbmmBackward",
        "aten::cudnn_convolution_backward",
    )
)

# Host ops that are not "operators" in the operator table (torch-tb-profiler's ExcludeOpName + node types).
EXCLUDED_OPERATOR_NAMES = frozenset(("DataParallel.forward", "DistributedDataParallel.forward"))

# ... and NCCL's own NVTX ranges of its API calls (Nsight Systems exports: ``ncclAllReduce``, ``ncclSend``,
# ``ncclGroupStart``), whole names only: kernels are ``ncclDevKernel_*`` / ``ncclKernel_*``.
_COMM_OP = re.compile(
    r"^(nccl:|gloo:|c10d::|ucc:|mpi:|hccl:|xccl:)|^record_param_comms$"
    r"|^nccl(?:All[A-Za-z]*|Reduce[A-Za-z]*|Broadcast|Bcast|Send|Recv|Gather|Scatter|Group(?:Start|End))$"
)
# The backend's own record of a collective (ProcessGroupNCCL / Gloo / UCC / MPI ... name it
# "<backend>:<collective>"); c10d::* and record_param_comms are the front-end call around it.
_BACKEND_COMM_OP = re.compile(r"^(nccl|gloo|ucc|mpi|hccl|xccl|rccl):")
# NCCL / RCCL / HCCL / UCC / MSCCL kernels (HTA's `^nccl.*Kernel`, widened), and the custom all-reduce
# kernels of torch symmetric memory, vLLM and TensorRT-LLM / FlashInfer that move data between GPUs.
_COMM_KERNEL = re.compile(
    r"^nccl|^rccl|ncclKernel|ncclDevKernel|^hccl|^ucc_|^msccl"
    r"|multimem_all_reduce|one_shot_all_reduce|two_shot_all_reduce|cross_device_reduce|custom_all_reduce"
    r"|allreduce_fusion|lamport",
    re.IGNORECASE,
)


def is_profiler_step(name: str) -> bool:
    return name.startswith(PROFILER_STEP_PREFIXES)


def profiler_step_id(name: str) -> str:
    """The N of a ``ProfilerStep#N`` (or Paddle's ``ProfileStep#N``) name."""
    return name.split("#", 1)[1]


# Ranges people wrap training steps in when there is no ProfilerStep#N (Nsight Systems runs, NVTX or
# record_function): "iteration 12", "iteration12", "iter_3", "step 7", "train_step 4", "Batch 0".
_STEP_RANGE = re.compile(
    r"^(?:iteration|iter|step|train[ _]?step|training[ _]?step|batch)(?:[ _#:=-]*(?:num|no|number)\.?)?[ _#:=-]*(\d+)$",
    re.IGNORECASE,
)


def step_range_number(name: str) -> str | None:
    """The step number of a ``ProfilerStep#N`` (``ProfileStep#N``) or step-like range name, else None."""
    if is_profiler_step(name):
        return profiler_step_id(name)
    found = _STEP_RANGE.match(name)
    return found.group(1) if found else None


def is_step_range(name: str) -> bool:
    return step_range_number(name) is not None


def is_dataloader(name: str) -> bool:
    return (
        (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__"))
        or name.startswith("enumerate(DataPipe)#")
        or name.startswith("_DataLoaderIter")  # Paddle's _DataLoaderIterSingleProcess / MultiProcess
    )


def is_optimizer(name: str) -> bool:
    return name.startswith("Optimizer.")


def is_comm_op(name: str) -> bool:
    """Host-side collective / point-to-point ops of any backend."""
    return _COMM_OP.search(name) is not None


def is_comm_kernel(name: str) -> bool:
    return _COMM_KERNEL.search(name) is not None


def is_paddle_collective_op(name: str) -> bool:
    """A PaddlePaddle collective operator (``all_reduce dygraph``, ``c_allreduce_sum``): on a CPU rank the only
    record of a collective, as Paddle writes no ``gloo:*`` op (``docs/definitions.md`` §6)."""
    return _PADDLE_COLLECTIVE_OP.match(name) is not None


def is_backend_comm_op(name: str) -> bool:
    """``nccl:all_reduce``, ``gloo:all_reduce``...: the host record of a collective by its backend."""
    return _BACKEND_COMM_OP.search(name) is not None


# Paddle's collective operators: the phi communication kernels and the older ``c_*`` ops, in place (``_``) or
# not, with the " dygraph" Paddle writes after an operator run eagerly. (Tensor ops such as ``reduce_sum`` or
# ``broadcast_to`` are not collectives: only the names below are.)
_PADDLE_COLLECTIVE_OP = re.compile(
    r"^(?:all_reduce|all_gather|all_to_all|reduce_scatter|broadcast|reduce|barrier|p_send|p_recv|send_v2|recv_v2"
    r"|c_allreduce_(?:sum|max|min|prod|avg)|c_allgather|c_broadcast|c_reducescatter|c_reduce_(?:sum|max|min|prod)"
    r"|mp_allreduce_sum|partial_send|partial_recv|partial_allgather)_?(?: dygraph)?$"
)
_PADDLE_EAGER_SUFFIX = " dygraph"

# Canonical collective types, matched on the name without backend prefix, underscores or case:
# "nccl:_all_gather_base", "allgather_into_tensor_coalesced", "ncclDevKernel_AllGather_RING_LL" -> all_gather.
_COLLECTIVE_KINDS = (
    ("all_to_all", re.compile(r"alltoall|all2all|sendrecv_all")),
    ("reduce_scatter", re.compile(r"reducescatter")),
    ("all_gather", re.compile(r"allgather")),
    ("all_reduce", re.compile(r"allreduce|crossdevicereduce|oneshot|twoshot")),
    ("broadcast", re.compile(r"broadcast|bcast")),
    ("barrier", re.compile(r"barrier")),
    ("send_recv", re.compile(r"sendrecv")),
    ("send", re.compile(r"send")),
    ("recv", re.compile(r"recv")),
    ("reduce", re.compile(r"reduce")),
    ("gather", re.compile(r"gather")),
    ("scatter", re.compile(r"scatter")),
    ("coalesced", re.compile(r"coalesced")),
)
_BACKEND_PREFIX = re.compile(r"^[A-Za-z0-9]+:[^:]")


def collective_kind(name: str) -> str:
    """The canonical type of a collective op / kernel name (``other`` when none fits)."""
    text = name.replace("(anonymous namespace)", "").removesuffix(_PADDLE_EAGER_SUFFIX)
    if _BACKEND_PREFIX.match(text):
        text = text.split(":", 1)[1]
    text = text.split("(", 1)[0].split("<", 1)[0].rsplit("::", 1)[-1].strip().rsplit(" ", 1)[-1]
    flat = text.replace("_", "").replace("-", "").lower()
    if flat.startswith("ncclkernel") or flat.startswith("nccldevkernel"):
        flat = flat.removeprefix("ncclkernel").removeprefix("nccldevkernel")
    for kind, pattern in _COLLECTIVE_KINDS:
        if pattern.search(flat):
            return kind
    return "other"


# Bytes per element of the collective ``dtype`` arg (c10 ScalarType names) and of ``Input type``
# (C++ type names; torch-tb-profiler's table covered six of them, ``docs/definitions.md`` §6).
DTYPE_BYTES = {
    "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "ComplexHalf": 4, "ComplexFloat": 8, "ComplexDouble": 16,
    "Long": 8, "Int": 4, "Short": 2, "Char": 1, "Byte": 1, "Bool": 1, "UInt16": 2, "UInt32": 4, "UInt64": 8,
    "Float8_e4m3fn": 1, "Float8_e5m2": 1, "Float8_e4m3fnuz": 1, "Float8_e5m2fnuz": 1, "Float8_e8m0fnu": 1,
    "double": 8, "float": 4, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "long": 8, "int64_t": 8,
    "int": 4, "unsigned int": 4, "short int": 2, "short": 2, "signed char": 1, "unsigned char": 1, "char": 1,
    "bool": 1, "c10::complex<float>": 8, "c10::complex<double>": 16, "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1,
}  # fmt: skip


# Newer kernel names that torch-tb-profiler's list predates (Ampere/Hopper/Blackwell cuBLAS, cuDNN
# and CUTLASS): any xmma kernel, CUTLASS "tensorop" kernels, "tensor16x8x8"-style tile names,
# Hopper warp-group MMA (wgmma/gmma) and cuBLAS "nvjet" kernels.
_NEWER_TENSOR_CORE_KERNEL = re.compile(r"xmma|tensorop|tensor\d+x\d+x\d+|wgmma|gmma_|nvjet")

# Matrix kernels of other vendors and libraries, named for what runs them (docs/definitions.md,
# "Matrix cores"); each alternative was checked on the corpus's MI250 / MI300 / H100 / B200 traces.
_MATRIX_CORE_KERNEL = re.compile(
    r"^Cijk_.*_MI\d+x\d+x\d+"  # AMD Tensile / hipBLASLt GEMMs built on MFMA (or WMMA) instructions
    r"|mfma|wmma"  # kernels named for the matrix instruction (vLLM's paged_attention_..._mfma16, CUTLASS wmma)
    r"|_xdl_|xdlops"  # composable_kernel XDL kernels (XDL = MFMA)
    r"|^igemm_\w+_gtcx"  # MIOpen implicit GEMM convolutions on xdlops
    r"|(?-i:flash_fwd_kernel|flash_fwd_splitkv_kernel|flash_bwd_dq_dk_dv)"  # FlashAttention GEMMs
    r"|fmha"  # fused multi-head attention (TensorRT-LLM, xformers, CK)
    r"|^_?attn_fwd$"  # Triton flash attention (ROCm)
    r"|^bmm_\w+_t\d+x\d+x\d+"  # TensorRT-LLM's generated Blackwell batched GEMMs (FP4 / FP8)
    r"|matmul_ogs",  # triton_kernels' MoE matmul
    re.IGNORECASE,
)


def uses_tensor_cores(kernel_name: str) -> bool:
    """The kernel runs on matrix cores: NVIDIA Tensor Cores, AMD MFMA / WMMA units (by name)."""
    return (
        any(pattern in kernel_name for pattern in TENSOR_CORE_KERNEL_PATTERNS)
        or _NEWER_TENSOR_CORE_KERNEL.search(kernel_name) is not None
        or _MATRIX_CORE_KERNEL.search(kernel_name) is not None
    )


# Low-precision types as kernel names spell them (ATen templates, CUTLASS, cuBLAS, Tensile "HA"/"BBS").
_LOW_PRECISION = {
    "bf16": re.compile(r"bf16|bfloat16|_BBS_", re.IGNORECASE),
    "fp16": re.compile(r"fp16|c10::Half|__half|_HHS_|h884|h1688|_f16", re.IGNORECASE),
    "fp8": re.compile(r"fp8|e4m3|e5m2", re.IGNORECASE),
}


def low_precisions(kernel_names: list[str]) -> list[str]:
    """The low-precision types (bf16, fp16, fp8) some kernel of the trace computes in, by name."""
    return [kind for kind, pattern in _LOW_PRECISION.items() if any(pattern.search(n) for n in kernel_names)]


def string_mask(strings: StringTable, predicate) -> np.ndarray:
    """Boolean lookup table over string ids: ``mask[name_id]`` is ``predicate(name)``."""
    return np.fromiter((predicate(s) for s in strings.strings), dtype=bool, count=len(strings))
