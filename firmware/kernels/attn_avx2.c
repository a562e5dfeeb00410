// SPDX-License-Identifier: MIT
/* SPARSE_ATTN work-item kernel for AVX2 and FMA (8 fp32 lanes); see attn_vec.h. */
#define VW 8
#define NFW_VEC_FN nfw_attn_item_avx2
#include "attn_vec.h"
