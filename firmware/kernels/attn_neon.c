// SPDX-License-Identifier: MIT
/* SPARSE_ATTN work-item kernel for AArch64 Advanced SIMD (4 fp32 lanes); see attn_vec.h. */
#define VW 4
#define NFW_VEC_FN nfw_attn_item_neon
#include "attn_vec.h"
