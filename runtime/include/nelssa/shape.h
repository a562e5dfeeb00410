/* SPDX-License-Identifier: MIT */
/*
 * The model shape a nelssad session serves and how its KV is placed on
 * the devices: the two types the client API and the wire codec share, in
 * a header of their own so that <nelssa/client.h> carries no wire format.
 */
#ifndef NELSSA_SHAPE_H
#define NELSSA_SHAPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Placement of a session's KV across the devices (DESIGN §3.5). */
enum nelssa_placement {
	NELSSA_PLACE_HEADS = 0,		/* head h on device h mod N */
	NELSSA_PLACE_CLUSTERS = 1,	/* cluster c of every head on device c mod N */
};

/**
 * enum nelssa_kv_layout - how a session's KV stores hold K and V.
 * @NELSSA_KV_PACKED: the K array, then the V array.
 * @NELSSA_KV_ADJACENT: each 16-token block's K and V side by side, so that
 *	a selected cluster's K and V are one run of device memory a block (devices with
 *	NPNM_CAP_KV_STRIDE; Documentation/daemon.rst, "KV layout").
 */
enum nelssa_kv_layout {
	NELSSA_KV_PACKED = 0,
	NELSSA_KV_ADJACENT = 1,
};

/**
 * struct nelssa_shape - the model shape a session serves.
 * @layers: decoder layers.
 * @q_heads: query heads (a multiple of @kv_heads).
 * @kv_heads: KV heads per layer.
 * @head_dim: elements per head.
 * @kv_dtype: enum nelssa_kv_dtype of the KV on the devices: 1 bf16, 2 fp16,
 *	or 3 fp8 E4M3 / 4 int8, which the client quantises into from bf16
 *	rows at offload (head-wise placement only).
 * @attn_flags: NELSSA_ATTN_* bits (<nelssa/attention.h>) of the devices'
 *	attention: 0 for binary32 dot products, NELSSA_ATTN_BF16_DOTS for the
 *	GPU kernels' bf16 ones (every device must offer it).
 * @kv_layout: enum nelssa_kv_layout of the stores:
 *	0 the K array then the V array, 1 each 16-token block's K and V side
 *	by side (every device must have NPNM_CAP_KV_STRIDE).
 */
struct nelssa_shape {
	uint16_t layers;
	uint16_t q_heads;
	uint16_t kv_heads;
	uint16_t head_dim;
	uint8_t kv_dtype;
	uint8_t attn_flags;
	uint8_t kv_layout;
};

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_SHAPE_H */
