// SPDX-License-Identifier: MIT
/* SPARSE_ATTN work-item kernel for AVX-512F (16 fp32 lanes); see attn_vec.h. */
#define VW 16
#define NFW_VEC_FN nfw_attn_item_avx512
#define NFW_FAR_PREFETCH 1
#include "attn_vec.h"
