// SPDX-License-Identifier: MIT
/*
 * SPARSE_ATTN work-item kernel for AArch64 Advanced SIMD with the BF16
 * extension (BFDOT), chosen for NPNM_ATTN_F_BF16_DOTS where the CPU has it
 * (isa.c); see attn_vec.h.
 */
#define VW 4
#define NFW_VEC_FN nfw_attn_item_neon_bf16
#define NFW_BF16_NATIVE 1
#include "attn_vec.h"
