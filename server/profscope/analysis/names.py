"""Name rules shared by the analyses: steps, data loading, communication, tensor cores.

Kept in one place so that each rule has one definition (torch-tb-profiler's, widened where it
silently missed newer names) and one test.
"""

from __future__ import annotations

import re

import numpy as np

from profscope.tables import StringTable

PROFILER_STEP_PREFIX = "ProfilerStep#"

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

_COMM_OP = re.compile(r"^(nccl:|gloo:|c10d::|ucc:|mpi:|hccl:|xccl:)|^record_param_comms$")
_COMM_KERNEL = re.compile(r"^nccl|^rccl|ncclKernel|ncclDevKernel|^hccl|^ucc_|^msccl", re.IGNORECASE)


def is_profiler_step(name: str) -> bool:
    return name.startswith(PROFILER_STEP_PREFIX)


def is_dataloader(name: str) -> bool:
    return (name.startswith("enumerate(DataLoader)#") and name.endswith(".__next__")) or name.startswith(
        "enumerate(DataPipe)#"
    )


def is_optimizer(name: str) -> bool:
    return name.startswith("Optimizer.")


def is_comm_op(name: str) -> bool:
    """Host-side collective / point-to-point ops of any backend."""
    return _COMM_OP.search(name) is not None


def is_comm_kernel(name: str) -> bool:
    return _COMM_KERNEL.search(name) is not None


# Newer kernel names that torch-tb-profiler's list predates (Ampere/Hopper/Blackwell cuBLAS, cuDNN
# and CUTLASS): any xmma kernel, CUTLASS "tensorop" kernels, "tensor16x8x8"-style tile names,
# Hopper warp-group MMA (wgmma/gmma) and cuBLAS "nvjet" kernels.
_NEWER_TENSOR_CORE_KERNEL = re.compile(r"xmma|tensorop|tensor\d+x\d+x\d+|wgmma|gmma_|nvjet")


def uses_tensor_cores(kernel_name: str) -> bool:
    return any(pattern in kernel_name for pattern in TENSOR_CORE_KERNEL_PATTERNS) or (
        _NEWER_TENSOR_CORE_KERNEL.search(kernel_name) is not None
    )


def string_mask(strings: StringTable, predicate) -> np.ndarray:
    """Boolean lookup table over string ids: ``mask[name_id]`` is ``predicate(name)``."""
    return np.fromiter((predicate(s) for s in strings.strings), dtype=bool, count=len(strings))
