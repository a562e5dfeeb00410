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
 */
struct nelssa_shape {
	uint16_t layers;
	uint16_t q_heads;
	uint16_t kv_heads;
	uint16_t head_dim;
	uint8_t kv_dtype;
	uint8_t attn_flags;
};

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_SHAPE_H */
