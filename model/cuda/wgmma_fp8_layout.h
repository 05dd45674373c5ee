// Where the W4A8 wgmma kernel (model/cuda/cuda_moe.cu, moe_fp4_wgmma_kernel, variant
// mxfp4-w4a8=wgmma) puts each value, in plain integer code that compiles for the GPU and for the
// host: the kernel calls these functions, and tests/cpu/test_wgmma_fp8_layout.cpp replays one MX
// group through wgmma's documented operand layouts with them against the plain dot product.
//
// One wgmma.m64n8k32 (e4m3 x e4m3) multiplies 64 feature rows of the weights (A, in registers) by
// 8 tokens (B, in shared memory) over 32 positions of K, one MX group. Within a group the MMA's
// K order is a permutation of the elements' order, the same on both operands:
// - A: register r (0..3), byte b of lane (grp, tig) of warp w is row 16 w + grp + 8 (r & 1) at
//   K position 4 tig + b + 16 (r >> 1) (CUTLASS's ALayout_64x32 for 8-bit register operands). The
//   lane loads word tig of its row's 16-byte group (elements 8 tig .. 8 tig + 7, the even one of
//   each pair in the low nibble): its even elements go to registers 0 / 1, its odd ones to 2 / 3
//   (e2m1::e4m3_even / e4m3_odd keep each byte's position), so element e of the group sits at
//   K position k_of_element(e).
// - B: K-major without swizzle, core matrices of 8 tokens x 16 bytes (128 contiguous bytes),
//   consecutive along K (the descriptor's leading byte offset 128): B[k][n] of group g is byte
//   (2 g + k / 16) * 128 + 16 n + k % 16 of the codes. The kernel's fill writes a token's element
//   e there at k = k_of_element(e).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define SL_WGMMA_HD __host__ __device__ __forceinline__
#else
#define SL_WGMMA_HD inline
#endif

namespace sl::wgmma_fp8 {

// The MMA's K position of element e (0..31) of an MX group: even elements 8 t + 2 j at 4 t + j,
// odd ones 8 t + 2 j + 1 at 16 + 4 t + j.
SL_WGMMA_HD int k_of_element(int e) { return 16 * (e & 1) + 4 * (e >> 3) + ((e & 7) >> 1); }

// Which of a lane's two loaded words (0: row grp, 1: row grp + 8) and which half of its codes
// (false: even elements, true: odd) make A register r.
SL_WGMMA_HD int a_register_row(int r) { return r & 1; }
SL_WGMMA_HD bool a_register_odd(int r) { return (r >> 1) != 0; }

// The byte offset in the codes (B) of token n's element e of group g (g counts groups from K = 0:
// the 128-value block g / 4 holds groups 4 (g / 4) .. + 3).
SL_WGMMA_HD int b_offset(int g, int e, int n) {
  const int k = k_of_element(e);
  return (2 * g + k / 16) * 128 + 16 * n + k % 16;
}

// A warp's ring stage holds 16 rows of a 128-value chunk (64 packed bytes each); row r's
// 16-byte piece t (group t of the chunk) is stored at piece t ^ ((r >> 1) & 3), so that the lanes'
// 4-byte reads of word tig of group q of rows grp (or grp + 8) hit 32 different banks.
SL_WGMMA_HD int ring_piece(int row, int t) { return row * 64 + ((t ^ (row >> 1)) & 3) * 16; }

}  // namespace sl::wgmma_fp8
