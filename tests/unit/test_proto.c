// SPDX-License-Identifier: MIT
/*
 * The wire protocol's codec (runtime/proto): every control message
 * survives an encode/decode round trip field for field; every truncation,
 * extension, wrong magic, version or type, non-terminated string, non-zero
 * reserved byte and out-of-range field is refused; the data-message
 * headers' lengths must add up exactly.
 */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/attention.h>
#include <nelssa/proto.h>

#include "npnm_rules.h"
#include "testutil.h"

#define BUF (NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD)

/* One valid message of each type. */
static struct nelssa_msg sample(uint16_t type)
{
	struct nelssa_msg m;

	memset(&m, 0, sizeof(m));
	m.type = type;
	m.seq = 0x01020304u + type;
	switch (type) {
	case NELSSA_MSG_HELLO:
		m.u.hello.min_version = 1;
		m.u.hello.max_version = 3;
		m.u.hello.flags = NELSSA_HELLO_SHM;
		strcpy(m.u.hello.name, "gpu-node-7");
		break;
	case NELSSA_MSG_HELLO_OK:
		m.u.hello_ok.version = 1;
		m.u.hello_ok.devices = 4;
		m.u.hello_ok.data_port = 0xbeef;
		m.u.hello_ok.flags = NELSSA_HELLO_SHM;
		m.u.hello_ok.device_bytes = 0x123456789abull;
		m.u.hello_ok.key = 0xf00dfeedcafe1234ull;
		strcpy(m.u.hello_ok.name, "nelssad");
		break;
	case NELSSA_MSG_SESSION_CREATE:
		m.u.create.tenant = 42;
		m.u.create.shape = (struct nelssa_shape){ 32, 32, 8, 128, 1, NELSSA_ATTN_BF16_DOTS,
						   NELSSA_KV_ADJACENT };
		m.u.create.max_batch = 16;
		m.u.create.max_sel = 4096;
		m.u.create.capacity_tokens = 1u << 20;
		break;
	case NELSSA_MSG_SESSION_OK:
		m.u.session_ok.session = 77;
		m.u.session_ok.token = 0x8877665544332211ull;
		m.u.session_ok.devices = 4;
		m.u.session_ok.flags = NELSSA_SESSION_RMA;
		break;
	case NELSSA_MSG_RKEY_GET:
		m.u.rkey_get.session = 77;
		m.u.rkey_get.device = 3;
		break;
	case NELSSA_MSG_RKEY:
		m.u.rkey.session = 77;
		m.u.rkey.base = 0x7f0012340000ull;
		m.u.rkey.bytes = 1ull << 30;
		m.u.rkey.device = 3;
		m.u.rkey.len = 37;
		for (uint32_t i = 0; i < m.u.rkey.len; i++)
			m.u.rkey.key[i] = (uint8_t)(i * 7 + 1);
		break;
	case NELSSA_MSG_REQ_OK:
		m.u.req_ok.request = 0xfedcba9876543210ull;
		m.u.req_ok.store_tokens = 131072;
		m.u.req_ok.store_clusters = 9000;
		m.u.req_ok.devices = 3;
		m.u.req_ok.off[0] = 0;
		m.u.req_ok.off[1] = 1ull << 33;
		m.u.req_ok.off[2] = 64;
		break;
	case NELSSA_MSG_REQ_ALLOC:
		m.u.req.max_tokens = 131072;
		m.u.req.max_clusters = 9000;
		/* fall through */
	case NELSSA_MSG_REQ_FREE:
		m.u.req.session = 77;
		m.u.req.request = 0xfedcba9876543210ull;
		break;
	case NELSSA_MSG_STATS:
	case NELSSA_MSG_CLOSE:
		m.u.session.session = 77;
		break;
	case NELSSA_MSG_STATS_REPLY:
		m.u.stats.steps = 1;
		m.u.stats.items = 2;
		m.u.stats.kv_bytes = 3;
		m.u.stats.t_recv = 4;
		m.u.stats.t_dispatch = 5;
		m.u.stats.t_device = 6;
		m.u.stats.t_aggregate = 7;
		m.u.stats.t_send = 8;
		m.u.stats.sessions = 9;
		m.u.stats.devices = 10;
		m.u.stats.kv_rma_bytes = 2;
		m.u.stats.kv_recv_bytes = 11;
		break;
	case NELSSA_MSG_ERROR:
		m.u.error.code = -ENOSPC;
		strcpy(m.u.error.msg, "sim:2 lacks room");
		break;
	default:
		break;
	}
	return m;
}

static void round_trip_every_type(void **state)
{
	uint8_t buf[BUF];

	(void)state;
	for (uint16_t t = 1; t < NELSSA_MSG_MAX; t++) {
		struct nelssa_msg m = sample(t), d;
		size_t len;

		assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
		assert_int_equal(0, nelssa_msg_decode(buf, len, &d));
		assert_memory_equal(&m, &d, sizeof(m));
		assert_string_not_equal("?", nelssa_msg_type_str(t));
	}
	assert_string_equal("?", nelssa_msg_type_str(NELSSA_MSG_MAX));
}

static void truncated_and_extended_frames_refused(void **state)
{
	uint8_t buf[BUF + 1];

	(void)state;
	for (uint16_t t = 1; t < NELSSA_MSG_MAX; t++) {
		struct nelssa_msg m = sample(t), d;
		size_t len;

		assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
		for (size_t l = 0; l < len; l++)
			assert_true(nelssa_msg_decode(buf, l, &d) < 0);
		assert_int_equal(-EBADMSG, nelssa_msg_decode(buf, len + 1, &d));
		/* A payload length that disagrees with the type. */
		buf[8] ^= 8;
		assert_true(nelssa_msg_decode(buf, len, &d) < 0);
		buf[8] ^= 8;
		assert_int_equal(-ENOSPC, nelssa_msg_encode(&m, buf, len - 1, &len));
	}
}

static void header_checks(void **state)
{
	struct nelssa_msg m = sample(NELSSA_MSG_STATS), d;
	struct nelssa_msg_hdr h;
	uint8_t buf[BUF];
	size_t len;

	(void)state;
	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	buf[0] ^= 1;
	assert_int_equal(-EPROTO, nelssa_msg_decode_hdr(buf, &h));
	buf[0] ^= 1;
	buf[4] = NELSSA_PROTO_VERSION + 1;
	assert_int_equal(-EPROTONOSUPPORT, nelssa_msg_decode(buf, len, &d));
	buf[4] = NELSSA_PROTO_VERSION - 1;
	assert_int_equal(-EPROTONOSUPPORT, nelssa_msg_decode(buf, len, &d));
	buf[4] = NELSSA_PROTO_VERSION;
	buf[6] = NELSSA_MSG_MAX;
	assert_int_equal(-EPROTO, nelssa_msg_decode_hdr(buf, &h));
	buf[6] = 0;
	assert_int_equal(-EPROTO, nelssa_msg_decode_hdr(buf, &h));
	buf[6] = NELSSA_MSG_STATS;
	buf[10] = 1;	/* payload of 64 KiB + 8 */
	assert_int_equal(-EMSGSIZE, nelssa_msg_decode_hdr(buf, &h));
	buf[10] = 0;
	/* Any version may say HELLO: that is how versions are negotiated. */
	m = sample(NELSSA_MSG_HELLO);
	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	buf[4] = 9;
	assert_int_equal(0, nelssa_msg_decode(buf, len, &d));
}

/*
 * A version-2 HELLO (its worker address after the name) is refused for
 * its version, -EPROTONOSUPPORT, so that the daemon can say which one it
 * speaks; a longer HELLO that claims this version, or a bad range, is
 * malformed.
 */
static void hello_of_older_version(void **state)
{
	uint8_t buf[BUF] = { 0 };
	struct nelssa_msg d;
	const uint32_t addr = 200, plen = 40 + addr;

	(void)state;
	buf[0] = 'N', buf[1] = 'L', buf[2] = 'S', buf[3] = 'A';
	buf[4] = 2;					/* header version */
	buf[6] = NELSSA_MSG_HELLO;
	buf[8] = (uint8_t)plen, buf[9] = (uint8_t)(plen >> 8);
	buf[16] = 2, buf[18] = 2;			/* speaks 2..2 */
	buf[20] = (uint8_t)addr;			/* its address length */
	memcpy(buf + 24, "old-client", 10);
	for (uint32_t i = 0; i < addr; i++)
		buf[56 + i] = (uint8_t)(i * 5 + 1);
	assert_int_equal(-EPROTONOSUPPORT, nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + plen, &d));
	buf[16] = 0;					/* speaks 0..2 */
	assert_int_equal(-EINVAL, nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + plen, &d));
	buf[16] = 2;
	buf[18] = NELSSA_PROTO_VERSION;			/* a longer HELLO of this version */
	assert_int_equal(-EBADMSG, nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + plen, &d));
	buf[16] = 3, buf[18] = 2;			/* min > max */
	assert_int_equal(-EBADMSG, nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + plen, &d));
}

/* Flip one payload byte of an encoded @type at @off; decoding must fail. */
static void refused_with(uint16_t type, size_t off, uint8_t val, int want)
{
	struct nelssa_msg m = sample(type), d;
	uint8_t buf[BUF];
	size_t len;

	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	buf[NELSSA_PROTO_HDR_BYTES + off] = val;
	if (nelssa_msg_decode(buf, len, &d) != want)
		fail_msg("%s: byte %zu = %u: expected %d", nelssa_msg_type_str(type), off, val, want);
}

/* The same with @n bytes from @off all set to 0 (a field of several bytes). */
static void refused_with_all(uint16_t type, size_t off, size_t n, int want)
{
	struct nelssa_msg m = sample(type), d;
	uint8_t buf[BUF];
	size_t len;

	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	memset(buf + NELSSA_PROTO_HDR_BYTES + off, 0, n);
	if (nelssa_msg_decode(buf, len, &d) != want)
		fail_msg("%s: bytes %zu..%zu = 0: expected %d", nelssa_msg_type_str(type), off,
			 off + n - 1, want);
}

static void fields_checked(void **state)
{
	struct nelssa_msg m;
	uint8_t buf[BUF];
	size_t len;

	(void)state;
	refused_with(NELSSA_MSG_HELLO, 4, 3, -EINVAL);			/* unknown flag */
	refused_with(NELSSA_MSG_HELLO, 7, 0x80, -EINVAL);
	refused_with(NELSSA_MSG_HELLO, 0, 9, -EINVAL);			/* min > max */
	refused_with(NELSSA_MSG_HELLO, 0, 0, -EINVAL);			/* version 0 */
	refused_with(NELSSA_MSG_HELLO, 8 + 31, 'x', -EINVAL);		/* no NUL */
	refused_with(NELSSA_MSG_HELLO, 8 + 20, 'x', -EINVAL);		/* junk after NUL */
	refused_with(NELSSA_MSG_SESSION_CREATE, 4, 0, -EINVAL);		/* 0 layers */
	refused_with(NELSSA_MSG_SESSION_CREATE, 6, 31, -EINVAL);	/* q % kv */
	refused_with(NELSSA_MSG_SESSION_CREATE, 11, 8, -EINVAL);	/* head_dim 2176 */
	refused_with(NELSSA_MSG_SESSION_CREATE, 12, 5, -EINVAL);	/* dtype */
	refused_with(NELSSA_MSG_SESSION_CREATE, 13, 2, -EINVAL);	/* placement */
	refused_with(NELSSA_MSG_SESSION_CREATE, 14, 2, -EINVAL);	/* attention flag */
	refused_with(NELSSA_MSG_SESSION_CREATE, 14, 0x80, -EINVAL);
	refused_with(NELSSA_MSG_SESSION_CREATE, 15, 2, -EINVAL);	/* KV layout */
	refused_with(NELSSA_MSG_SESSION_CREATE, 15, 0x80, -EINVAL);
	refused_with(NELSSA_MSG_SESSION_CREATE, 16, 0, -EINVAL);	/* batch 0 */
	refused_with(NELSSA_MSG_SESSION_CREATE, 31, 1, -EINVAL);	/* capacity > 2^40 */
	refused_with(NELSSA_MSG_SESSION_OK, 0, 0, -EINVAL);		/* session 0 */
	refused_with(NELSSA_MSG_SESSION_OK, 20, 4, -EINVAL);		/* unknown flag */
	refused_with(NELSSA_MSG_SESSION_OK, 23, 0x80, -EINVAL);
	refused_with_all(NELSSA_MSG_RKEY_GET, 0, 8, -EINVAL);		/* session 0 */
	refused_with(NELSSA_MSG_RKEY_GET, 8, 64, -EINVAL);		/* device 64 */
	refused_with(NELSSA_MSG_RKEY_GET, 12, 1, -EINVAL);		/* reserved */
	refused_with(NELSSA_MSG_RKEY, 24, 64, -EINVAL);			/* device 64 */
	refused_with_all(NELSSA_MSG_RKEY, 16, 8, -EINVAL);		/* 0 bytes */
	refused_with(NELSSA_MSG_RKEY, 28, 38, -EBADMSG);		/* key longer than the frame */
	refused_with(NELSSA_MSG_RKEY, 28, 36, -EBADMSG);		/* ... shorter */
	refused_with(NELSSA_MSG_REQ_OK, 16, 4, -EBADMSG);		/* more devices than offsets */
	refused_with(NELSSA_MSG_REQ_OK, 16, 2, -EBADMSG);		/* ... fewer */
	refused_with_all(NELSSA_MSG_REQ_OK, 8, 4, -EINVAL);		/* no tokens */
	refused_with(NELSSA_MSG_REQ_OK, 20, 1, -EINVAL);		/* reserved */
	refused_with_all(NELSSA_MSG_SESSION_OK, 8, 8, -EINVAL);		/* token 0 */
	refused_with(NELSSA_MSG_REQ_ALLOC, 23, 0xff, -EINVAL);		/* clusters > tokens */
	refused_with(NELSSA_MSG_ERROR, 3, 0, -EINVAL);			/* code > 0 */
	refused_with(NELSSA_MSG_ERROR, 4, 5, -EINVAL);			/* reserved */
	refused_with_all(NELSSA_MSG_HELLO_OK, 4, 2, -EINVAL);		/* data port 0 */
	refused_with(NELSSA_MSG_HELLO_OK, 6, 2, -EINVAL);		/* unknown flag */
	refused_with_all(NELSSA_MSG_HELLO_OK, 16, 8, -EINVAL);		/* key 0 */
	/* The encoder refuses what the decoder would. */
	m = sample(NELSSA_MSG_SESSION_CREATE);
	m.u.create.shape.q_heads = 12;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m = sample(NELSSA_MSG_HELLO_OK);
	m.u.hello_ok.key = 0;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m = sample(NELSSA_MSG_RKEY);
	m.u.rkey.base = UINT64_MAX - 10;	/* base + bytes wraps */
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m = sample(NELSSA_MSG_RKEY);
	m.u.rkey.len = NELSSA_PROTO_MAX_RKEY + 1;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m.u.rkey.len = NELSSA_PROTO_MAX_RKEY;	/* the longest fills the largest frame */
	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	assert_int_equal(NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD, len);
	m = sample(NELSSA_MSG_REQ_OK);
	m.u.req_ok.devices = NELSSA_PROTO_MAX_DEVICES + 1;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m = sample(NELSSA_MSG_HELLO);
	m.u.hello.flags = 2;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	m.u.hello.flags = 0;
	assert_int_equal(0, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
	assert_int_equal(NELSSA_PROTO_HDR_BYTES + 40, len);
	m.type = NELSSA_MSG_MAX;
	assert_int_equal(-EINVAL, nelssa_msg_encode(&m, buf, sizeof(buf), &len));
}

/* Row formats: d 64 bf16 (128-byte rows), and d 1. */
static const struct nelssa_kv_fmt F64 = { NELSSA_KV_BF16, 64, NELSSA_KV_PACKED },
				   F1 = { NELSSA_KV_BF16, 1, NELSSA_KV_PACKED };

static void kv_header_lengths(void **state)
{
	struct nelssa_kv_hdr h = { 5, 0xa5a5a5a55a5a5a5aull, 6, 7, 1, 2, 100, 30, 4, 3, 0 }, d;
	uint64_t session, token;
	uint8_t p[NELSSA_KV_HDR_BYTES];
	const size_t data = 4u * 30 * 64 + 8u * 3;

	(void)state;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_hdr_get(p, sizeof(p), data, &F64, &d));
	assert_true(d.session == 5 && d.token == 0xa5a5a5a55a5a5a5aull && d.request == 6 &&
		    d.cookie == 7 && d.layer == 1 &&
		    d.head == 2 && d.first_token == 100 && d.nr_tokens == 30 &&
		    d.first_cluster == 4 && d.nr_clusters == 3);
	assert_int_equal(-EBADMSG, nelssa_kv_hdr_get(p, sizeof(p), data - 1, &F64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_hdr_get(p, sizeof(p) - 1, data, &F64, &d));
	/* Session and token lead, for a receiver to check before anything else. */
	assert_int_equal(0, nelssa_am_session_get(p, sizeof(p), &session, &token));
	assert_true(session == 5 && token == 0xa5a5a5a55a5a5a5aull);
	assert_int_equal(-EBADMSG, nelssa_am_session_get(p, 15, &session, &token));
	p[56] = 1;
	assert_int_equal(-EBADMSG, nelssa_kv_hdr_get(p, sizeof(p), data, &F64, &d));
	h.first_token = UINT32_MAX;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_hdr_get(p, sizeof(p), data, &F64, &d));
	assert_int_equal(-EINVAL, nelssa_kv_commit_get(p, sizeof(p), 0, &d));
}

/* A commit is the KV header alone: any data, or a header of another length, is refused. */
static void kv_commit_lengths(void **state)
{
	struct nelssa_kv_hdr h = { 5, 0xa5a5a5a55a5a5a5aull, 6, 7, 1, 2, 100, 30, 4, 3, 0 }, d;
	uint8_t p[NELSSA_KV_HDR_BYTES];

	(void)state;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_commit_get(p, sizeof(p), 0, &d));
	assert_true(d.request == 6 && d.cookie == 7 && d.first_token == 100 &&
		    d.nr_tokens == 30 && d.first_cluster == 4 && d.nr_clusters == 3);
	assert_int_equal(-EBADMSG, nelssa_kv_commit_get(p, sizeof(p), 1, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_commit_get(p, sizeof(p) - 1, 0, &d));
	p[60] = 1;
	assert_int_equal(-EBADMSG, nelssa_kv_commit_get(p, sizeof(p), 0, &d));
}

/*
 * A KV_ROWS header carries one part; its length is that part's alone, the
 * fields the part does not use are 0, and no other message takes a part.
 */
static void kv_rows_lengths(void **state)
{
	struct nelssa_kv_hdr h = { 5, 0xa5a5a5a55a5a5a5aull, 6, 7, 1, 2, 100, 30, 0, 0,
				   NELSSA_KV_PART_K }, d;
	uint8_t p[NELSSA_KV_HDR_BYTES];

	(void)state;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 30 * 128, &F64, &d));
	assert_true(d.part == NELSSA_KV_PART_K && d.first_token == 100 && d.nr_tokens == 30 &&
		    d.cookie == 7 && d.request == 6);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 30 * 128 + 1, &F64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 2 * 30 * 128, &F64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p) - 1, 30 * 128, &F64, &d));
	/* A part is for KV_ROWS only. */
	assert_int_equal(-EBADMSG, nelssa_kv_hdr_get(p, sizeof(p), 2 * 30 * 128, &F64, &d));
	/* A commit's part says how its rows came: puts (0) or KV_ROWS. */
	assert_int_equal(0, nelssa_kv_commit_get(p, sizeof(p), 0, &d));
	assert_int_equal(NELSSA_KV_COMMIT_SENT, d.part);
	p[52] = 2;
	assert_int_equal(-EBADMSG, nelssa_kv_commit_get(p, sizeof(p), 0, &d));
	h.part = NELSSA_KV_PART_V;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 30 * 128, &F64, &d));
	assert_int_equal(NELSSA_KV_PART_V, d.part);
	/* Rows with cluster fields set, entries with token fields set. */
	h.nr_clusters = 1;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 30 * 128, &F64, &d));
	h.part = NELSSA_KV_PART_TABLE;
	h.nr_clusters = 3;
	h.first_cluster = 4;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 24, &F64, &d));
	h.first_token = h.nr_tokens = 0;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 24, &F64, &d));
	assert_true(d.part == NELSSA_KV_PART_TABLE && d.first_cluster == 4 && d.nr_clusters == 3);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 25, &F64, &d));
	/* No part, an unknown part, a reserved byte set. */
	for (unsigned int part = 0; part < 256; part += part == 2 ? 2 : 1) {
		p[52] = (uint8_t)part;
		assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 24, &F64, &d));
	}
	p[52] = NELSSA_KV_PART_TABLE;
	p[63] = 1;
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 24, &F64, &d));
	/* Ranges that wrap, and row bytes that would overflow 32 bits. */
	h.part = NELSSA_KV_PART_K;
	h.first_cluster = h.nr_clusters = 0;
	h.first_token = UINT32_MAX;
	h.nr_tokens = 2;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 2 * 128, &F64, &d));
	h.first_token = 0;
	h.nr_tokens = 1u << 31;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 0, &F1, &d));
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 1ull << 32, &F1, &d));
}

/*
 * Adjacent sessions: rows come as whole K-then-V blocks from a block
 * boundary (at head dim 64 bf16, 2048 bytes a block; int8, a 1088-byte
 * tile), or as K or V rows within one block (a row type's only); a packed
 * session takes no KV part; KV messages keep their packed rows either way.
 */
static void kv_adjacent_parts(void **state)
{
	static const struct nelssa_kv_fmt A64 = { NELSSA_KV_BF16, 64, NELSSA_KV_ADJACENT },
					  T64 = { NELSSA_KV_INT8, 64, NELSSA_KV_ADJACENT };
	struct nelssa_kv_hdr h = { 5, 1, 6, 7, 1, 2, 32, 17, 0, 0, NELSSA_KV_PART_KV }, d;
	uint8_t p[NELSSA_KV_HDR_BYTES];

	(void)state;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 4 * 2048, &A64, &d));
	assert_true(d.part == NELSSA_KV_PART_KV && d.first_token == 32 && d.nr_tokens == 17);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 4 * 1088, &T64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 4 * 2048 - 1, &A64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 2 * 17 * 128, &A64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 2 * 2048, &A64, &d));
	/* Not a part of a packed store, whatever its length. */
	assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 4 * 2048, &F64, &d));
	h.first_token = 40;		/* mid-block */
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 4 * 2048, &A64, &d));
	h.first_token = 32;
	h.nr_tokens = 0;		/* nothing to write */
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 0, &A64, &d));
	h.nr_tokens = 16;
	h.nr_clusters = 1;		/* entries go in a table part */
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 2 * 2048, &A64, &d));
	/* K or V alone is one run of an adjacent store within a block only. */
	h.nr_clusters = 0;
	for (uint8_t part = NELSSA_KV_PART_K; part <= NELSSA_KV_PART_V; part++) {
		h.part = part;
		h.first_token = 32;		/* a whole block */
		h.nr_tokens = 16;
		nelssa_kv_hdr_put(p, &h);
		assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 2048, &A64, &d));
		assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 2048, &F64, &d));
		h.first_token = 41;		/* the rest of a block */
		h.nr_tokens = 7;
		nelssa_kv_hdr_put(p, &h);
		assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 7 * 128, &A64, &d));
		h.nr_tokens = 8;		/* one row into the next */
		nelssa_kv_hdr_put(p, &h);
		assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 8 * 128, &A64, &d));
		assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 8 * 128, &F64, &d));
		h.nr_tokens = 0;		/* no rows at all */
		nelssa_kv_hdr_put(p, &h);
		assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 0, &A64, &d));
		h.first_token = 32;		/* an 8-bit type's tiles come whole */
		h.nr_tokens = 16;
		nelssa_kv_hdr_put(p, &h);
		assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 1088, &T64, &d));
	}
	/* A KV message from any token: the daemon places its rows block by block. */
	h.part = 0;
	h.first_token = 100;
	h.nr_tokens = 30;
	h.nr_clusters = 3;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_hdr_get(p, sizeof(p), 2 * 30 * 128 + 24, &A64, &d));
}

/*
 * Where <nelssa/kv_store.h> puts K, V and the table of a store of @n
 * tokens in format @f, against the device's own rule for reading them
 * (driver/npnm_rules.h): every row the devices read with the session's
 * kv_stride lies inside its array, K and V never meet, and the table
 * follows both.
 */
static void check_store(const struct nelssa_kv_fmt *f, uint32_t n)
{
	const uint32_t stride = nelssa_kv_fmt_stride(f), lay = f->layout == NELSSA_KV_ADJACENT;
	const uint64_t span = npnm_kv_span(f->dtype, f->head_dim, stride, n);
	const uint64_t block = npnm_kv_block_bytes(f->dtype, f->head_dim);
	const uint64_t bytes = nelssa_kv_store_bytes(f, n, 7);
	uint64_t k, v, t, k2, v2, t2;

	assert_true(npnm_kv_stride_valid(f->dtype, f->head_dim, stride));
	assert_int_equal(stride, lay ? 2 * block : 0);
	nelssa_kv_store_offsets(f, n, 7, 3, 0, 0, &k, &v, &t);
	nelssa_kv_store_offsets(f, n, 7, 3, 1, 2, &k2, &v2, &t2);
	/* Both arrays reach no further than the table, which ends the store. */
	assert_true(k == 0 && k + span <= t && v + span <= t && t + 8ull * 7 <= bytes);
	assert_int_equal(0, bytes % NELSSA_KV_STORE_ALIGN);
	/* The store of layer 1, local head 2 of 3 (the 5th) starts past four whole ones. */
	assert_true(k2 == 5 * bytes && v2 - k2 == v - k && t2 - k2 == t);
	/* Adjacent: a K block and its V block side by side, V one block on. */
	assert_true(lay ? v - k == block : v - k >= span);
	for (uint32_t i = 0; i < n; i += nelssa_kv_is_tiled(f->dtype) ? NELSSA_KV_QTILE : 1) {
		const uint64_t at = nelssa_kv_fmt_row_off(f, i);

		assert_int_equal(at, npnm_kv_row_offset(f->dtype, f->head_dim, stride, i));
		/* K's row i never lies where V's rows do, nor V's where K's do. */
		assert_true(!lay || at % (2 * block) < block);
		assert_true(!lay || (v - k + at) % (2 * block) >= block);
	}
	if (lay)
		assert_int_equal(nelssa_kv_fmt_kv_bytes(f, n), (n + 15) / 16 * 2 * block);
}

/*
 * The bytes a write of K and V rows [first, +n) puts into a store,
 * against the parts a client sends for it, counted by hand: rows to the
 * next block boundary as K and V rows apart, then whole blocks.
 */
static void kv_write_bytes(void **state)
{
	static const struct nelssa_kv_fmt P = { NELSSA_KV_BF16, 64, NELSSA_KV_PACKED },
					  A = { NELSSA_KV_BF16, 64, NELSSA_KV_ADJACENT },
					  T = { NELSSA_KV_INT8, 64, NELSSA_KV_ADJACENT };
	const uint64_t row = 128, block = 16 * row;

	(void)state;
	assert_int_equal(nelssa_kv_fmt_write_bytes(&P, 5, 30), 2 * 30 * row);
	assert_int_equal(nelssa_kv_fmt_head(&P, 5, 30), 0);
	/* From 5: 11 rows to 16, then 19 rows in two blocks. */
	assert_int_equal(nelssa_kv_fmt_head(&A, 5, 30), 11);
	assert_int_equal(nelssa_kv_fmt_write_bytes(&A, 5, 30), 2 * 11 * row + 2 * 2 * block);
	/* Fewer rows than reach the boundary: all of them apart, no block. */
	assert_int_equal(nelssa_kv_fmt_head(&A, 5, 7), 7);
	assert_int_equal(nelssa_kv_fmt_write_bytes(&A, 5, 7), 2 * 7 * row);
	/* On a boundary: whole blocks only. */
	assert_int_equal(nelssa_kv_fmt_head(&A, 32, 17), 0);
	assert_int_equal(nelssa_kv_fmt_write_bytes(&A, 32, 17), 2 * 2 * block);
	/* 8-bit tiles are written whole from their start. */
	assert_int_equal(nelssa_kv_fmt_head(&T, 32, 17), 0);
	assert_int_equal(nelssa_kv_fmt_write_bytes(&T, 32, 17), 2 * 2 * 1088);
}

static void kv_store_layout(void **state)
{
	static const enum nelssa_kv_dtype types[] = { NELSSA_KV_BF16, NELSSA_KV_FP16,
						      NELSSA_KV_FP8_E4M3, NELSSA_KV_INT8 };
	static const uint32_t dims[] = { 1, 32, 64, 80, 128, 256 };
	static const uint32_t tokens[] = { 1, 15, 16, 17, 31, 1000, 4096 };

	(void)state;
	for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++)
		for (size_t di = 0; di < sizeof(dims) / sizeof(dims[0]); di++)
			for (size_t ni = 0; ni < sizeof(tokens) / sizeof(tokens[0]); ni++) {
				struct nelssa_kv_fmt f = { types[ti], dims[di], NELSSA_KV_PACKED };

				check_store(&f, tokens[ni]);
				f.layout = NELSSA_KV_ADJACENT;
				check_store(&f, tokens[ni]);
			}
}

/*
 * 8-bit sessions: a K or V range is whole tiles from a tile boundary --
 * at head dim 64, 1088 bytes a 16-token tile, a partial last tile whole
 * -- in KV_ROWS parts and KV messages alike, an empty range too.
 */
static void kv_tiled_lengths(void **state)
{
	static const struct nelssa_kv_fmt T64 = { NELSSA_KV_INT8, 64, NELSSA_KV_PACKED };
	struct nelssa_kv_hdr h = { 5, 1, 6, 7, 1, 2, 32, 17, 0, 0, NELSSA_KV_PART_K }, d;
	uint8_t p[NELSSA_KV_HDR_BYTES];

	(void)state;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_rows_get(p, sizeof(p), 2 * 1088, &T64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 2 * 1088 - 1, &T64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_rows_get(p, sizeof(p), 17 * 64, &T64, &d));
	h.first_token = 40;		/* mid-tile */
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 2 * 1088, &T64, &d));
	h.nr_tokens = 0;		/* an empty range: the same rule */
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_rows_get(p, sizeof(p), 0, &T64, &d));
	/* A KV message: K tiles, V tiles, entries. */
	h.part = 0;
	h.first_token = 48;
	h.nr_tokens = 17;
	h.first_cluster = 3;
	h.nr_clusters = 2;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(0, nelssa_kv_hdr_get(p, sizeof(p), 4 * 1088 + 16, &T64, &d));
	assert_int_equal(-EBADMSG, nelssa_kv_hdr_get(p, sizeof(p), 2 * 17 * 64 + 16, &T64, &d));
	h.first_token = 49;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_hdr_get(p, sizeof(p), 4 * 1088 + 16, &T64, &d));
	h.first_token = 1;		/* entries alone, from a token that is no boundary */
	h.nr_tokens = 0;
	nelssa_kv_hdr_put(p, &h);
	assert_int_equal(-EINVAL, nelssa_kv_hdr_get(p, sizeof(p), 16, &T64, &d));
	/* The same header is fine for a row type. */
	assert_int_equal(0, nelssa_kv_hdr_get(p, sizeof(p), 16, &F64, &d));
}

static void step_lengths(void **state)
{
	const uint32_t g = 4, dim = 8, nsel[3] = { 2, 0, 5 };
	struct nelssa_step_hdr h = { 9, 0x0102030405060708ull, 10, 3, 3 }, dh;
	uint64_t session, token;
	struct nelssa_step_item it[3], di[3];
	uint8_t hdr[NELSSA_STEP_HDR_BYTES], data[1024];
	size_t len = 3 * NELSSA_STEP_ITEM_BYTES, q[3], s[3];

	(void)state;
	nelssa_step_hdr_put(hdr, &h);
	for (int i = 0; i < 3; i++) {
		it[i] = (struct nelssa_step_item){ 100u + (unsigned)i, (uint16_t)i, nsel[i] };
		nelssa_step_item_put(data + i * NELSSA_STEP_ITEM_BYTES, &it[i]);
	}
	for (int i = 0; i < 3; i++)
		len += 4 * g * dim + 4 * nsel[i];
	assert_int_equal(0, nelssa_step_parse(hdr, sizeof(hdr), data, len, g, dim, 3, 5, &dh, di, q, s));
	assert_int_equal(3, dh.nr_items);
	assert_int_equal(10, dh.step);
	assert_int_equal(3, dh.layer);
	assert_true(dh.session == 9 && dh.token == 0x0102030405060708ull);
	assert_int_equal(0, nelssa_am_session_get(hdr, sizeof(hdr), &session, &token));
	assert_true(session == 9 && token == 0x0102030405060708ull);
	assert_int_equal(5, di[2].nr_sel);
	assert_int_equal(3 * NELSSA_STEP_ITEM_BYTES, q[0]);
	assert_int_equal(q[0] + 4 * g * dim, s[0]);
	assert_int_equal(s[0] + 8, q[1]);
	assert_int_equal(-EBADMSG, nelssa_step_parse(hdr, sizeof(hdr), data, len - 1, g, dim, 3, 5,
						     &dh, di, q, s));
	assert_int_equal(-EBADMSG, nelssa_step_parse(hdr, sizeof(hdr), data, len + 4, g, dim, 3, 5,
						     &dh, di, q, s));
	assert_int_equal(-E2BIG, nelssa_step_parse(hdr, sizeof(hdr), data, len, g, dim, 2, 5, &dh,
						   di, q, s));
	assert_int_equal(-E2BIG, nelssa_step_parse(hdr, sizeof(hdr), data, len, g, dim, 3, 4, &dh,
						   di, q, s));
	assert_int_equal(-EBADMSG, nelssa_step_parse(hdr, sizeof(hdr) - 1, data, len, g, dim, 3, 5,
						     &dh, di, q, s));
	data[10] = 1;	/* item 0's pad */
	assert_int_equal(-EBADMSG, nelssa_step_parse(hdr, sizeof(hdr), data, len, g, dim, 3, 5,
						     &dh, di, q, s));
}

static void reply_and_ack_headers(void **state)
{
	struct nelssa_reply_hdr r = { 1, -EIO, 3, 4, 5, 6, 7 }, dr;
	struct nelssa_ack_hdr a = { 99, -ENOENT }, da;
	uint8_t p[NELSSA_REPLY_HDR_BYTES], q[NELSSA_ACK_HDR_BYTES];

	(void)state;
	nelssa_reply_hdr_put(p, &r);
	assert_int_equal(0, nelssa_reply_hdr_get(p, sizeof(p), &dr));
	assert_true(dr.step == 1 && dr.status == -EIO && dr.nr_items == 3 && dr.t_recv == 4 &&
		    dr.t_dispatch == 5 && dr.t_device == 6 && dr.t_aggregate == 7);
	assert_int_equal(-EBADMSG, nelssa_reply_hdr_get(p, sizeof(p) - 1, &dr));
	nelssa_ack_hdr_put(q, &a);
	assert_int_equal(0, nelssa_ack_hdr_get(q, sizeof(q), &da));
	assert_true(da.cookie == 99 && da.status == -ENOENT);
	q[8] = 1;	/* status 1 is not an errno */
	q[9] = q[10] = q[11] = 0;
	assert_int_equal(-EBADMSG, nelssa_ack_hdr_get(q, sizeof(q), &da));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(round_trip_every_type),
		cmocka_unit_test(truncated_and_extended_frames_refused),
		cmocka_unit_test(header_checks),
		cmocka_unit_test(fields_checked),
		cmocka_unit_test(hello_of_older_version),
		cmocka_unit_test(kv_header_lengths),
		cmocka_unit_test(kv_commit_lengths),
		cmocka_unit_test(kv_rows_lengths),
		cmocka_unit_test(kv_tiled_lengths),
		cmocka_unit_test(kv_adjacent_parts),
		cmocka_unit_test(kv_store_layout),
		cmocka_unit_test(kv_write_bytes),
		cmocka_unit_test(step_lengths),
		cmocka_unit_test(reply_and_ack_headers),
	};

	tu_init("proto");
	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
