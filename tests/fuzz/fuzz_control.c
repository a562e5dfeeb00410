// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for the wire protocol's decoders (runtime/proto).  Any
 * input must decode without a sanitizer report, and whatever decodes must
 * encode back to exactly the same bytes (the decoder accepts only the
 * canonical form: exact lengths, zero reserved bytes, zero-padded strings),
 * except the version of a HELLO, which may be anything.  The same input is
 * also fed to the data-message header decoders and the step parser.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nelssa/proto.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t out[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nelssa_msg m;
	size_t len;

	if (!nelssa_msg_decode(data, size, &m)) {
		if (nelssa_msg_encode(&m, out, sizeof(out), &len) || len != size)
			__builtin_trap();
		if (memcmp(out, data, 4) || memcmp(out + 6, data + 6, size - 6))
			__builtin_trap();
		if (m.type != NELSSA_MSG_HELLO && memcmp(out + 4, data + 4, 2))
			__builtin_trap();
	}
	if (size >= NELSSA_STEP_HDR_BYTES) {
		struct nelssa_step_item items[64];
		struct nelssa_step_hdr h;
		struct nelssa_kv_hdr kv;
		struct nelssa_reply_hdr r;
		struct nelssa_ack_hdr a;
		uint64_t sid, token;
		size_t q[64], s[64];
		const uint32_t group = 1 + data[0] % 8, dim = 1 + data[1] % 64;

		nelssa_step_parse(data, NELSSA_STEP_HDR_BYTES, data + NELSSA_STEP_HDR_BYTES,
				  size - NELSSA_STEP_HDR_BYTES, group, dim, 64, 1024, &h, items, q, s);
		/* Every kind of KV format: rows or 8-bit tiles, packed or adjacent. */
		const struct nelssa_kv_fmt kf = {
			data[2] & 1 ? NELSSA_KV_INT8 : NELSSA_KV_BF16, dim,
			data[2] & 2 ? NELSSA_KV_ADJACENT : NELSSA_KV_PACKED,
		};

		nelssa_kv_hdr_get(data, size < NELSSA_KV_HDR_BYTES ? size : NELSSA_KV_HDR_BYTES,
				  size, &kf, &kv);
		nelssa_kv_rows_get(data, size < NELSSA_KV_HDR_BYTES ? size : NELSSA_KV_HDR_BYTES,
				   size, &kf, &kv);
		nelssa_reply_hdr_get(data, size < NELSSA_REPLY_HDR_BYTES ? size : NELSSA_REPLY_HDR_BYTES,
				     &r);
		nelssa_ack_hdr_get(data, NELSSA_ACK_HDR_BYTES, &a);
		nelssa_am_session_get(data, size, &sid, &token);
	}
	return 0;
}
