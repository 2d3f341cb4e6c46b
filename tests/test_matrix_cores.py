"""Matrix-core kernels (NVIDIA Tensor Cores, AMD MFMA / WMMA) recognised by name, on real traces.

Every kernel below was classified by hand from its library's naming (Tensile's ``MI<m>x<n>x<k>``
is the MFMA instruction a GEMM is built on, composable_kernel's ``xdl`` is MFMA, FlashAttention's
``flash_fwd_kernel`` is its GEMM kernel while ``..._combine_kernel`` only reduces).
"""

from __future__ import annotations

from functools import cache

import pytest

from conftest import corpus_file
from profscope.analysis import name_rules
from profscope.analysis.context import TraceContext
from profscope.analysis.kernels import kernel_rows
from profscope.analysis.overview import build_overview, matrix_core_advice
from profscope.ingest.kineto import parse_trace_file

MI250 = "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"
MI300_VLLM = "traces/AMD-AGI_TraceLens/tests/traces/inference/vllm_decode_full/graph_execution.json.gz"
MI300_SGLANG = "traces/AMD-AGI_TraceLens/tests/traces/inference/sglang_decode/sglang_Qwen3-8B_decode.json.gz"
H100_QWEN = "traces/AMD-AGI_TraceLens/tests/traces/h100/Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"

MATRIX_KERNELS = [
    "Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_ISA90a_IU1_K1",
    "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT256x32x64_MI16x16x1_SN_LDSB1_AFC1_AFEM1_AFEM1_ASEM1_CLR1",
    "void paged_attention_ll4mi_QKV_mfma16_kernel<0, __hip_bfloat16, __hip_bfloat16, (vllm::Fp8KVCacheDataType)0>",
    "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_34GridwiseGemm",
    "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x256x32_wt32x32x8_ws1x2_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x4x1_1x4x1x64",
    "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128, 128, 4, false, false>>",
    "attn_fwd",
    "fmhaSm100aKernel_QkvE4m3OBfloat16H64PagedKvCausalP16VarSeqQ128Kv128PersistentContext",
    "bmm_MxE4m3_MxE2m1MxE4m3_Fp32_t128x16x256u2_s3_et128x16_m128x16x32_cga1x1x1_16dp256b_rM_TN_transOut",
    "_matmul_ogs_NNT_bf16xbf16xmxfp4_16x128x256x1",
    "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_32x1_nn_align8>",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel",
    "nvjet_tst_64x64_64x16_2x1_2cta_v_bz_bias_TNT",
    "volta_h884gemm_64x64_nn",
]
OTHER_KERNELS = [
    "void pytorch_flash::flash_fwd_splitkv_combine_kernel<pytorch_flash::Flash_fwd_kernel_traits<64>>",
    "Cijk_Ailk_Bljk_SB_MT64x64x8_SE_K1",  # a Tensile GEMM without an MI instruction: plain vector ALUs
    "triton_poi_fused_addmm_gelu_view_15",  # pointwise epilogue, the GEMM ran elsewhere
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float>>>",
    "batched_transpose_32x32_half",
    "volta_sgemm_64x64_nt",  # FP32 SGEMM on CUDA cores
    "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>",
]


@pytest.mark.parametrize("name", MATRIX_KERNELS)
def test_matrix_kernels_are_recognised(name: str) -> None:
    assert name_rules.uses_tensor_cores(name)


@pytest.mark.parametrize("name", OTHER_KERNELS)
def test_other_kernels_are_not(name: str) -> None:
    assert not name_rules.uses_tensor_cores(name)


@cache
def analysed(source: str) -> tuple:
    tables = parse_trace_file(corpus_file(source))
    context = TraceContext(tables)
    return tables, context, build_overview(context, context.steps)


def matrix_share(source: str) -> tuple[float, float, set[str]]:
    """(matrix-core kernel µs, all kernel µs, names of the matrix kernels) from the Kernel table."""
    tables, context, _ = analysed(source)
    rows = kernel_rows(tables, context.tree, "kernel")
    matrix = [r for r in rows if r["tensor_cores_used"]]
    return sum(r["total_us"] for r in matrix), sum(r["total_us"] for r in rows), {r["name"] for r in matrix}


@pytest.mark.parametrize("source", [MI250, MI300_VLLM, MI300_SGLANG])
def test_amd_gemms_count_as_matrix_core_time(source: str) -> None:
    """Every Tensile GEMM with an MFMA instruction is a matrix kernel, and nothing else of these traces but the
    MFMA attention kernel; the Overview's GPU share agrees with the Kernel table."""
    matrix_us, kernel_us, matrix_names = matrix_share(source)
    tables, context, overview = analysed(source)
    all_names = {r["name"] for r in kernel_rows(tables, context.tree, "kernel")}
    expected = {n for n in all_names if n.startswith("Cijk_") and "_MI16x16x1_" in n} | {
        n for n in all_names if "_mfma16_" in n or n.startswith("_matmul_ogs_")
    }
    assert expected and matrix_names == expected
    assert 0 < matrix_us < kernel_us
    gpu_kernel_us = sum(g["kernel_time_us"] for g in overview["gpus"])
    gpu_matrix_us = sum(g["tensor_cores_pct"] / 100 * g["kernel_time_us"] for g in overview["gpus"])
    assert gpu_matrix_us / gpu_kernel_us == pytest.approx(matrix_us / kernel_us, rel=0.02)


def test_h100_flash_attention_counts() -> None:
    _, _, matrix_names = matrix_share(H100_QWEN)
    assert any("pytorch_flash::flash_fwd_kernel" in n for n in matrix_names)
    assert any(n.startswith("sm90_xmma_gemm") for n in matrix_names)


@pytest.mark.parametrize("source", [MI250, MI300_VLLM, MI300_SGLANG, H100_QWEN])
def test_no_fp16_advice_once_matrix_cores_run(source: str) -> None:
    _, _, overview = analysed(source)
    assert not any("Mixed Precision" in r for r in overview["recommendations"])


def test_advice_names_the_precision_in_use() -> None:
    assert name_rules.low_precisions(["Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV", "void f<c10::BFloat16>"]) == ["bf16"]
    assert name_rules.low_precisions(["volta_sgemm_64x64_nt"]) == []
    on_bf16 = matrix_core_advice(0.5, ["bf16"])
    assert "already computes in bf16" in on_bf16 and "enable Automatic Mixed Precision" not in on_bf16
    on_fp32 = matrix_core_advice(0.68, [])
    assert "Kernels with 68% time" in on_fp32 and "Automatic Mixed Precision" in on_fp32
