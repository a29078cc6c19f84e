// Compile check for the K=64 SM120 patch: instantiates the NVFP4 block-scaled grouped-GEMM kernel that
// FlashInfer's MoE launcher (moe_gemm_tma_ws_launcher.inl, SM120 branch, no swap, default epilogue) builds,
// against the CUTLASS headers shipped inside the FlashInfer package, with a 128x128xTILE_K CTA tile.
//
// Verdict (nvcc 13.x): nvcc -std=c++17 -arch=sm_120a --expt-relaxed-constexpr -DTILE_K=64 -DK64_MXFP8_MXFP4 \
//                        -I <flashinfer>/data/cutlass/include -cubin k64_collective.cu -o k64.cubin
// Unpatched CUTLASS 4.2.1 (FlashInfer 0.6.6) fails with TILE_K=64 and MXFP8 x MXFP4; patched it compiles.
// Figures: the same with -DK64_FIGURES_ONLY and -o k64_figures (an executable): it prints the kernel's
// pipeline stages and shared-storage bytes (no GPU needed). patches/check/k64_check.py runs both.
#include <cstdio>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/group_array_problem_shape.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"

#ifndef TILE_K
#define TILE_K 64
#endif

// SM120's opt-in shared memory per block (cudaDevAttrMaxSharedMemoryPerBlockOptin): 100 KiB per SM less the
// 1 KiB reserved per block = 101376 bytes (CCCL cuda/__device/arch_traits.h, arch_traits<sm_120>, in CUDA 13.5;
// the same figure as CUTLASS's cutlass::arch::sm120_smem_capacity_bytes, which sizes the pipeline stages).
constexpr int kSm120OptinSharedMemoryPerBlock = 101376;

namespace k64 {
using namespace cute;

using ArchTag = cutlass::arch::Sm120;
#ifdef K64_MXFP8_MXFP4
// FP8 activations x MXFP4 weights (the launcher's IsMXFPX branch; T = __nv_fp8_e4m3, WeightType = e2m1):
// 32 elements share one UE8M0 scale factor, so a K=64 tile holds 2 per row where a CUTLASS SF block holds 4.
constexpr char const* kKind = "MXFP8 x MXFP4 (SFVectorSize 32)";
using ElementAct = cutlass::float_e4m3_t;
using ElementWeight = cutlass::float_e2m1_t;
using MainloopElementA = cutlass::mx_float8_t<ElementAct>;
using MainloopElementB = cutlass::mx_float4_t<ElementWeight>;
constexpr int AlignmentA = 128 / cutlass::sizeof_bits<ElementAct>::value;
constexpr int AlignmentB = 128;  // the launcher's AlignmentWeight for FP4 weights with FP8 activations
#else
// NVFP4 x NVFP4 (T = WeightType = __nv_fp4_e2m1): 16 elements share one UE4M3 scale factor.
constexpr char const* kKind = "NVFP4 x NVFP4 (SFVectorSize 16)";
using ElementAct = cutlass::float_e2m1_t;
using ElementWeight = cutlass::float_e2m1_t;
using MainloopElementA = cutlass::nv_float4_t<ElementAct>;     // the launcher's ElementActBlockScaled on SM120
using MainloopElementB = cutlass::nv_float4_t<ElementWeight>;  // ElementWeightBlockScaled
constexpr int AlignmentA = 128 / cutlass::sizeof_bits<ElementAct>::value;
constexpr int AlignmentB = 128 / cutlass::sizeof_bits<ElementWeight>::value;
#endif
using ElementD = cutlass::bfloat16_t;
using ElementC = ElementD;  // EpilogueElementC = ElementCSafe = ElementD on SM120
using ElementAccumulator = float;

using LayoutA = cutlass::layout::RowMajor;     // TmaWarpSpecializedGroupedGemmInput::LayoutA
using LayoutB = cutlass::layout::ColumnMajor;  // ::LayoutB
using LayoutC = cutlass::layout::RowMajor;     // ::LayoutC
using LayoutD = cutlass::layout::RowMajor;     // ::LayoutD

constexpr int AlignmentC = 128 / cutlass::sizeof_bits<ElementC>::value;
constexpr int AlignmentD = 128 / cutlass::sizeof_bits<ElementD>::value;

using ClusterShape = Shape<_1, _1, _1>;  // SM120 has no multicast clusters
using ProblemShape = cutlass::gemm::GroupProblemShape<Shape<int64_t, int64_t, int64_t>>;

template <int TileK>
struct GroupedGemm {
  using MmaTileShape = Shape<_128, _128, Int<TileK>>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, MmaTileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAccumulator, ElementAccumulator, ElementC, LayoutC*,
      AlignmentC, ElementD, LayoutD*, AlignmentD, cutlass::epilogue::TmaWarpSpecialized>::CollectiveOp;

  using StageCountAutoCarveout = cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
      sizeof(typename CollectiveEpilogue::SharedStorage))>;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      ArchTag, cutlass::arch::OpClassBlockScaledTensorOp, MainloopElementA, LayoutA*, AlignmentA, MainloopElementB,
      LayoutB*, AlignmentB, ElementAccumulator, MmaTileShape, ClusterShape, StageCountAutoCarveout,
      cutlass::gemm::collective::KernelScheduleAuto>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

#ifndef K64_FIGURES_ONLY
// The verdict build (nvcc -cubin): k64_entry runs the grouped-GEMM kernel body, compiled for sm_120a,
// and make_params instantiates to_underlying_arguments, which builds the TMA descriptors for A, B and both
// scale-factor tensors (make_tma_copy) where the K=64 bugs surface. -cubin runs nvcc's C++ front end on all
// of it and the device back end, but not the host compiler (gcc 13 rejects CUTLASS 4.2.1's grouped
// to_underlying_arguments for every tile, patched or not).
using CheckedKernel = GroupedGemm<TILE_K>::GemmKernel;
__global__ void k64_entry(CheckedKernel::Params const params) {
  extern __shared__ char smem[];
  CheckedKernel{}(params, smem);
}
CheckedKernel::Params make_params(void* workspace) {
  CheckedKernel::Arguments args{};
  return CheckedKernel::to_underlying_arguments(args, workspace);
}
#endif  // the figures build (-DK64_FIGURES_ONLY, a host executable) has only sizes and stage counts

template <int TileK>
void report() {
  using G = GroupedGemm<TileK>;
  using Mainloop = typename G::CollectiveMainloop;
  std::printf(
      "%s, tile 128x128x%d: mainloop stages %d, mainloop shared storage %zu bytes, epilogue shared storage %zu "
      "bytes, kernel shared storage %zu bytes, SM120 opt-in limit %d bytes\n",
      kKind, TileK, static_cast<int>(Mainloop::DispatchPolicy::Stages), sizeof(typename Mainloop::SharedStorage),
      sizeof(typename G::CollectiveEpilogue::SharedStorage), sizeof(typename G::GemmKernel::SharedStorage),
      kSm120OptinSharedMemoryPerBlock);
}
}  // namespace k64

int main() {
  k64::report<TILE_K>();
  static_assert(sizeof(typename k64::GroupedGemm<TILE_K>::GemmKernel::SharedStorage) <=
                    kSm120OptinSharedMemoryPerBlock,
                "kernel shared storage exceeds SM120's opt-in shared memory per block");
  return 0;
}
