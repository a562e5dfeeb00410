// SPDX-License-Identifier: MIT
/*
 * SPARSE_ATTN work-item kernel for AVX-512 with AVX512_BF16 (VDPBF16PS),
 * chosen for NPNM_ATTN_F_BF16_DOTS where the CPU has it (isa.c); see
 * attn_vec.h.
 */
#define VW 16
#define NFW_VEC_FN nfw_attn_item_avx512_bf16
#define NFW_FAR_PREFETCH 1
#define NFW_BF16_NATIVE 1
#include "attn_vec.h"
