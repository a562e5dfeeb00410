// SPDX-License-Identifier: MIT
/*
 * Encoding and validation of the control frames and data-message headers
 * (<nelssa/proto.h>).  Each payload has one fixed length per type, and
 * two types add a counted tail (RKEY its key, REQ_OK an offset per
 * device), so a decoder first checks the exact length, then each field;
 * nothing is copied out before the whole frame passed.  The same
 * checks guard encoding, so a daemon can never send what a client rejects.
 */
#include <errno.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/proto.h>

/* Fixed payload bytes per type (RKEY, REQ_OK: without their tails). */
static const uint32_t payload_len[NELSSA_MSG_MAX] = {
	[NELSSA_MSG_HELLO] = 40,	[NELSSA_MSG_HELLO_OK] = 56,
	[NELSSA_MSG_SESSION_CREATE] = 32, [NELSSA_MSG_SESSION_OK] = 24,
	[NELSSA_MSG_REQ_ALLOC] = 24,	[NELSSA_MSG_REQ_FREE] = 16,
	[NELSSA_MSG_OK] = 0,		[NELSSA_MSG_STATS] = 8,
	[NELSSA_MSG_STATS_REPLY] = 88,	[NELSSA_MSG_CLOSE] = 8,
	[NELSSA_MSG_ERROR] = 136,	[NELSSA_MSG_RKEY_GET] = 16,
	[NELSSA_MSG_RKEY] = 32,		[NELSSA_MSG_REQ_OK] = 24,
};

static const char *const type_name[NELSSA_MSG_MAX] = {
	[NELSSA_MSG_HELLO] = "HELLO",	[NELSSA_MSG_HELLO_OK] = "HELLO_OK",
	[NELSSA_MSG_SESSION_CREATE] = "SESSION_CREATE", [NELSSA_MSG_SESSION_OK] = "SESSION_OK",
	[NELSSA_MSG_REQ_ALLOC] = "REQ_ALLOC", [NELSSA_MSG_REQ_FREE] = "REQ_FREE",
	[NELSSA_MSG_OK] = "OK",		[NELSSA_MSG_STATS] = "STATS",
	[NELSSA_MSG_STATS_REPLY] = "STATS_REPLY", [NELSSA_MSG_CLOSE] = "CLOSE",
	[NELSSA_MSG_ERROR] = "ERROR",	[NELSSA_MSG_RKEY_GET] = "RKEY_GET",
	[NELSSA_MSG_RKEY] = "RKEY",	[NELSSA_MSG_REQ_OK] = "REQ_OK",
};

/* The payload bytes of @m: its type's fixed part and its tail. */
static uint32_t payload_of(const struct nelssa_msg *m)
{
	if (m->type == NELSSA_MSG_RKEY)
		return payload_len[m->type] + m->u.rkey.len;
	if (m->type == NELSSA_MSG_REQ_OK)
		return payload_len[m->type] + 8 * m->u.req_ok.devices;
	return payload_len[m->type];
}

const char *nelssa_msg_type_str(uint16_t type)
{
	return type && type < NELSSA_MSG_MAX ? type_name[type] : "?";
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* A string field: NUL-terminated inside @n bytes, zero after the NUL. */
static int str_ok(const char *s, size_t n)
{
	size_t l = 0;

	while (l < n && s[l])
		l++;
	if (l == n)
		return 0;
	for (size_t i = l; i < n; i++)
		if (s[i])
			return 0;
	return 1;
}

int nelssa_shape_check(const struct nelssa_shape *s)
{
	if (!s->layers || s->layers > NELSSA_PROTO_MAX_LAYERS || !s->kv_heads ||
	    s->kv_heads > NELSSA_PROTO_MAX_HEADS || !s->q_heads || s->q_heads % s->kv_heads ||
	    s->q_heads / s->kv_heads > NELSSA_PROTO_MAX_GROUP || !s->head_dim ||
	    s->head_dim > NELSSA_PROTO_MAX_HEAD_DIM ||
	    !nelssa_kv_bytes((enum nelssa_kv_dtype)s->kv_dtype, s->head_dim, 1) ||
	    (s->attn_flags & ~NELSSA_ATTN_FLAGS) || s->kv_layout > NELSSA_KV_ADJACENT)
		return -EINVAL;
	return 0;
}

/* Field checks shared by the encoder and the decoder. */
static int fields_ok(const struct nelssa_msg *m)
{
	switch (m->type) {
	case NELSSA_MSG_HELLO:
		return m->u.hello.min_version >= 1 &&
		       m->u.hello.min_version <= m->u.hello.max_version &&
		       !(m->u.hello.flags & ~NELSSA_HELLO_FLAGS) &&
		       str_ok(m->u.hello.name, sizeof(m->u.hello.name));
	case NELSSA_MSG_HELLO_OK:
		return m->u.hello_ok.version >= 1 && m->u.hello_ok.data_port && m->u.hello_ok.key &&
		       !(m->u.hello_ok.flags & ~NELSSA_HELLO_FLAGS) &&
		       str_ok(m->u.hello_ok.name, sizeof(m->u.hello_ok.name));
	case NELSSA_MSG_SESSION_CREATE:
		return !nelssa_shape_check(&m->u.create.shape) &&
		       m->u.create.placement <= NELSSA_PLACE_CLUSTERS &&
		       m->u.create.max_batch >= 1 &&
		       m->u.create.max_batch <= NELSSA_PROTO_MAX_BATCH &&
		       m->u.create.max_sel >= 1 && m->u.create.max_sel <= 1u << 20 &&
		       m->u.create.capacity_tokens >= 1 &&
		       m->u.create.capacity_tokens <= 1ull << 40;
	case NELSSA_MSG_SESSION_OK:
		return m->u.session_ok.session != 0 && m->u.session_ok.token != 0 &&
		       m->u.session_ok.devices >= 1 &&
		       !(m->u.session_ok.flags & ~NELSSA_SESSION_FLAGS);
	case NELSSA_MSG_RKEY_GET:
		return m->u.rkey_get.session != 0 &&
		       m->u.rkey_get.device < NELSSA_PROTO_MAX_DEVICES;
	case NELSSA_MSG_RKEY:
		return m->u.rkey.session != 0 && m->u.rkey.device < NELSSA_PROTO_MAX_DEVICES &&
		       m->u.rkey.len >= 1 && m->u.rkey.len <= NELSSA_PROTO_MAX_RKEY &&
		       m->u.rkey.bytes && m->u.rkey.base + m->u.rkey.bytes > m->u.rkey.base;
	case NELSSA_MSG_REQ_OK:
		return m->u.req_ok.devices >= 1 &&
		       m->u.req_ok.devices <= NELSSA_PROTO_MAX_DEVICES &&
		       m->u.req_ok.store_tokens >= 1 && m->u.req_ok.store_clusters >= 1;
	case NELSSA_MSG_REQ_ALLOC:
		return m->u.req.session && m->u.req.max_tokens >= 1 && m->u.req.max_clusters >= 1 &&
		       m->u.req.max_clusters <= m->u.req.max_tokens;
	case NELSSA_MSG_REQ_FREE:
		return m->u.req.session != 0;
	case NELSSA_MSG_CLOSE:
		return m->u.session.session != 0;
	case NELSSA_MSG_OK:
	case NELSSA_MSG_STATS:
	case NELSSA_MSG_STATS_REPLY:
		return 1;
	case NELSSA_MSG_ERROR:
		return m->u.error.code < 0 && str_ok(m->u.error.msg, sizeof(m->u.error.msg));
	default:
		return 0;
	}
}

int nelssa_msg_encode(const struct nelssa_msg *m, uint8_t *buf, size_t cap, size_t *len)
{
	uint32_t plen;
	uint8_t *p;

	if (!m->type || m->type >= NELSSA_MSG_MAX || !fields_ok(m))
		return -EINVAL;
	plen = payload_of(m);
	if (cap < NELSSA_PROTO_HDR_BYTES + plen)
		return -ENOSPC;
	nelssa_put_le32(buf, NELSSA_PROTO_MAGIC);
	put16(buf + 4, NELSSA_PROTO_VERSION);
	put16(buf + 6, m->type);
	nelssa_put_le32(buf + 8, plen);
	nelssa_put_le32(buf + 12, m->seq);
	p = buf + NELSSA_PROTO_HDR_BYTES;
	memset(p, 0, plen);
	switch (m->type) {
	case NELSSA_MSG_HELLO:
		put16(p, m->u.hello.min_version);
		put16(p + 2, m->u.hello.max_version);
		nelssa_put_le32(p + 4, m->u.hello.flags);
		memcpy(p + 8, m->u.hello.name, NELSSA_PROTO_NAME_LEN);
		break;
	case NELSSA_MSG_HELLO_OK:
		put16(p, m->u.hello_ok.version);
		put16(p + 2, m->u.hello_ok.devices);
		put16(p + 4, m->u.hello_ok.data_port);
		put16(p + 6, m->u.hello_ok.flags);
		put64(p + 8, m->u.hello_ok.device_bytes);
		put64(p + 16, m->u.hello_ok.key);
		memcpy(p + 24, m->u.hello_ok.name, NELSSA_PROTO_NAME_LEN);
		break;
	case NELSSA_MSG_SESSION_CREATE:
		nelssa_put_le32(p, m->u.create.tenant);
		put16(p + 4, m->u.create.shape.layers);
		put16(p + 6, m->u.create.shape.q_heads);
		put16(p + 8, m->u.create.shape.kv_heads);
		put16(p + 10, m->u.create.shape.head_dim);
		p[12] = m->u.create.shape.kv_dtype;
		p[13] = m->u.create.placement;
		p[14] = m->u.create.shape.attn_flags;
		p[15] = m->u.create.shape.kv_layout;
		nelssa_put_le32(p + 16, m->u.create.max_batch);
		nelssa_put_le32(p + 20, m->u.create.max_sel);
		put64(p + 24, m->u.create.capacity_tokens);
		break;
	case NELSSA_MSG_SESSION_OK:
		put64(p, m->u.session_ok.session);
		put64(p + 8, m->u.session_ok.token);
		nelssa_put_le32(p + 16, m->u.session_ok.devices);
		nelssa_put_le32(p + 20, m->u.session_ok.flags);
		break;
	case NELSSA_MSG_RKEY_GET:
		put64(p, m->u.rkey_get.session);
		nelssa_put_le32(p + 8, m->u.rkey_get.device);
		break;
	case NELSSA_MSG_RKEY:
		put64(p, m->u.rkey.session);
		put64(p + 8, m->u.rkey.base);
		put64(p + 16, m->u.rkey.bytes);
		nelssa_put_le32(p + 24, m->u.rkey.device);
		nelssa_put_le32(p + 28, m->u.rkey.len);
		memcpy(p + 32, m->u.rkey.key, m->u.rkey.len);
		break;
	case NELSSA_MSG_REQ_OK:
		put64(p, m->u.req_ok.request);
		nelssa_put_le32(p + 8, m->u.req_ok.store_tokens);
		nelssa_put_le32(p + 12, m->u.req_ok.store_clusters);
		nelssa_put_le32(p + 16, m->u.req_ok.devices);
		for (uint32_t d = 0; d < m->u.req_ok.devices; d++)
			put64(p + 24 + 8 * d, m->u.req_ok.off[d]);
		break;
	case NELSSA_MSG_REQ_ALLOC:
	case NELSSA_MSG_REQ_FREE:
		put64(p, m->u.req.session);
		put64(p + 8, m->u.req.request);
		if (m->type == NELSSA_MSG_REQ_ALLOC) {
			nelssa_put_le32(p + 16, m->u.req.max_tokens);
			nelssa_put_le32(p + 20, m->u.req.max_clusters);
		}
		break;
	case NELSSA_MSG_STATS:
	case NELSSA_MSG_CLOSE:
		put64(p, m->u.session.session);
		break;
	case NELSSA_MSG_STATS_REPLY: {
		const uint64_t v[8] = { m->u.stats.steps, m->u.stats.items, m->u.stats.kv_bytes,
					m->u.stats.t_recv, m->u.stats.t_dispatch,
					m->u.stats.t_device, m->u.stats.t_aggregate,
					m->u.stats.t_send };

		for (int i = 0; i < 8; i++)
			put64(p + 8 * i, v[i]);
		nelssa_put_le32(p + 64, m->u.stats.sessions);
		nelssa_put_le32(p + 68, m->u.stats.devices);
		put64(p + 72, m->u.stats.kv_rma_bytes);
		put64(p + 80, m->u.stats.kv_recv_bytes);
		break;
	}
	case NELSSA_MSG_ERROR:
		nelssa_put_le32(p, (uint32_t)m->u.error.code);
		memcpy(p + 8, m->u.error.msg, NELSSA_PROTO_ERR_LEN);
		break;
	default:
		break;
	}
	*len = NELSSA_PROTO_HDR_BYTES + plen;
	return 0;
}

int nelssa_msg_decode_hdr(const uint8_t *buf, struct nelssa_msg_hdr *h)
{
	h->magic = get32(buf);
	h->version = get16(buf + 4);
	h->type = get16(buf + 6);
	h->length = get32(buf + 8);
	h->seq = get32(buf + 12);
	if (h->magic != NELSSA_PROTO_MAGIC || !h->type || h->type >= NELSSA_MSG_MAX)
		return -EPROTO;
	if (h->length > NELSSA_PROTO_MAX_PAYLOAD)
		return -EMSGSIZE;
	/* HELLO is how versions are negotiated: any version may send it. */
	if (h->version != NELSSA_PROTO_VERSION && h->type != NELSSA_MSG_HELLO)
		return -EPROTONOSUPPORT;
	return 0;
}

static int zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

int nelssa_msg_decode(const uint8_t *buf, size_t len, struct nelssa_msg *m)
{
	struct nelssa_msg_hdr h;
	const uint8_t *p = buf + NELSSA_PROTO_HDR_BYTES;
	int ret;

	if (len < NELSSA_PROTO_HDR_BYTES)
		return -EBADMSG;
	ret = nelssa_msg_decode_hdr(buf, &h);
	if (ret)
		return ret;
	if (len != NELSSA_PROTO_HDR_BYTES + (size_t)h.length)
		return -EBADMSG;
	/*
	 * A longer HELLO is an older version's (up to 2 it carried a UCX
	 * worker address): only its versions are read, and it is refused
	 * with -EPROTONOSUPPORT, so that the daemon can say which version it
	 * speaks.  It decodes to nothing: no encoder writes such a frame.
	 */
	if (h.type == NELSSA_MSG_HELLO ? h.length < payload_len[h.type]
				       : h.length < payload_len[h.type])
		return -EBADMSG;
	/* The tail a counted type announces, exactly; every other type: none. */
	if (h.type == NELSSA_MSG_RKEY ? h.length != payload_len[h.type] + get32(p + 28)
	    : h.type == NELSSA_MSG_REQ_OK ? h.length != payload_len[h.type] + 8ull * get32(p + 16)
	    : h.type != NELSSA_MSG_HELLO && h.length != payload_len[h.type])
		return -EBADMSG;
	if (h.type == NELSSA_MSG_REQ_OK && get32(p + 16) > NELSSA_PROTO_MAX_DEVICES)
		return -EINVAL;
	if (h.type == NELSSA_MSG_HELLO && h.length > payload_len[h.type]) {
		const uint16_t lo = get16(p), hi = get16(p + 2);

		if (hi >= NELSSA_PROTO_VERSION || lo > hi)
			return -EBADMSG;
		return lo ? -EPROTONOSUPPORT : -EINVAL;
	}
	memset(m, 0, sizeof(*m));
	m->type = h.type;
	m->seq = h.seq;
	switch (h.type) {
	case NELSSA_MSG_HELLO:
		m->u.hello.min_version = get16(p);
		m->u.hello.max_version = get16(p + 2);
		m->u.hello.flags = get32(p + 4);
		memcpy(m->u.hello.name, p + 8, NELSSA_PROTO_NAME_LEN);
		break;
	case NELSSA_MSG_HELLO_OK:
		m->u.hello_ok.version = get16(p);
		m->u.hello_ok.devices = get16(p + 2);
		m->u.hello_ok.data_port = get16(p + 4);
		m->u.hello_ok.flags = get16(p + 6);
		m->u.hello_ok.device_bytes = get64(p + 8);
		m->u.hello_ok.key = get64(p + 16);
		memcpy(m->u.hello_ok.name, p + 24, NELSSA_PROTO_NAME_LEN);
		break;
	case NELSSA_MSG_SESSION_CREATE:
		m->u.create.tenant = get32(p);
		m->u.create.shape.layers = get16(p + 4);
		m->u.create.shape.q_heads = get16(p + 6);
		m->u.create.shape.kv_heads = get16(p + 8);
		m->u.create.shape.head_dim = get16(p + 10);
		m->u.create.shape.kv_dtype = p[12];
		m->u.create.placement = p[13];
		m->u.create.shape.attn_flags = p[14];
		m->u.create.shape.kv_layout = p[15];
		m->u.create.max_batch = get32(p + 16);
		m->u.create.max_sel = get32(p + 20);
		m->u.create.capacity_tokens = get64(p + 24);
		break;
	case NELSSA_MSG_SESSION_OK:
		m->u.session_ok.session = get64(p);
		m->u.session_ok.token = get64(p + 8);
		m->u.session_ok.devices = get32(p + 16);
		m->u.session_ok.flags = get32(p + 20);
		break;
	case NELSSA_MSG_RKEY_GET:
		if (!zero(p + 12, 4))
			return -EINVAL;
		m->u.rkey_get.session = get64(p);
		m->u.rkey_get.device = get32(p + 8);
		break;
	case NELSSA_MSG_RKEY:
		m->u.rkey.session = get64(p);
		m->u.rkey.base = get64(p + 8);
		m->u.rkey.bytes = get64(p + 16);
		m->u.rkey.device = get32(p + 24);
		m->u.rkey.len = get32(p + 28);
		memcpy(m->u.rkey.key, p + 32, m->u.rkey.len);
		break;
	case NELSSA_MSG_REQ_OK:
		if (!zero(p + 20, 4))
			return -EINVAL;
		m->u.req_ok.request = get64(p);
		m->u.req_ok.store_tokens = get32(p + 8);
		m->u.req_ok.store_clusters = get32(p + 12);
		m->u.req_ok.devices = get32(p + 16);
		for (uint32_t d = 0; d < m->u.req_ok.devices; d++)
			m->u.req_ok.off[d] = get64(p + 24 + 8 * d);
		break;
	case NELSSA_MSG_REQ_ALLOC:
	case NELSSA_MSG_REQ_FREE:
		m->u.req.session = get64(p);
		m->u.req.request = get64(p + 8);
		if (h.type == NELSSA_MSG_REQ_ALLOC) {
			m->u.req.max_tokens = get32(p + 16);
			m->u.req.max_clusters = get32(p + 20);
		}
		break;
	case NELSSA_MSG_STATS:
	case NELSSA_MSG_CLOSE:
		m->u.session.session = get64(p);
		break;
	case NELSSA_MSG_STATS_REPLY: {
		uint64_t *v[8] = { &m->u.stats.steps, &m->u.stats.items, &m->u.stats.kv_bytes,
				   &m->u.stats.t_recv, &m->u.stats.t_dispatch,
				   &m->u.stats.t_device, &m->u.stats.t_aggregate,
				   &m->u.stats.t_send };

		for (int i = 0; i < 8; i++)
			*v[i] = get64(p + 8 * i);
		m->u.stats.sessions = get32(p + 64);
		m->u.stats.devices = get32(p + 68);
		m->u.stats.kv_rma_bytes = get64(p + 72);
		m->u.stats.kv_recv_bytes = get64(p + 80);
		break;
	}
	case NELSSA_MSG_ERROR:
		if (!zero(p + 4, 4))
			return -EINVAL;
		m->u.error.code = (int32_t)get32(p);
		memcpy(m->u.error.msg, p + 8, NELSSA_PROTO_ERR_LEN);
		break;
	default:
		break;
	}
	return fields_ok(m) ? 0 : -EINVAL;
}

void nelssa_kv_hdr_put(uint8_t *p, const struct nelssa_kv_hdr *h)
{
	memset(p, 0, NELSSA_KV_HDR_BYTES);
	put64(p, h->session);
	put64(p + 8, h->token);
	put64(p + 16, h->request);
	put64(p + 24, h->cookie);
	put16(p + 32, h->layer);
	put16(p + 34, h->head);
	nelssa_put_le32(p + 36, h->first_token);
	nelssa_put_le32(p + 40, h->nr_tokens);
	nelssa_put_le32(p + 44, h->first_cluster);
	nelssa_put_le32(p + 48, h->nr_clusters);
	p[52] = h->part;
}

int nelssa_am_session_get(const uint8_t *p, size_t len, uint64_t *session, uint64_t *token)
{
	if (len < 16)
		return -EBADMSG;
	*session = get64(p);
	*token = get64(p + 8);
	return 0;
}

/* The KV header's fields and ranges, KV, KV_COMMIT and KV_ROWS alike. */
static int kv_fields(const uint8_t *p, size_t len, struct nelssa_kv_hdr *h)
{
	if (len != NELSSA_KV_HDR_BYTES || !zero(p + 53, 11))
		return -EBADMSG;
	h->part = p[52];
	h->session = get64(p);
	h->token = get64(p + 8);
	h->request = get64(p + 16);
	h->cookie = get64(p + 24);
	h->layer = get16(p + 32);
	h->head = get16(p + 34);
	h->first_token = get32(p + 36);
	h->nr_tokens = get32(p + 40);
	h->first_cluster = get32(p + 44);
	h->nr_clusters = get32(p + 48);
	if ((uint64_t)h->first_token + h->nr_tokens > UINT32_MAX ||
	    (uint64_t)h->first_cluster + h->nr_clusters > UINT32_MAX)
		return -EINVAL;
	return 0;
}

int nelssa_kv_hdr_get(const uint8_t *p, size_t len, size_t data_len,
		      const struct nelssa_kv_fmt *f, struct nelssa_kv_hdr *h)
{
	int ret = kv_fields(p, len, h);

	if (ret)
		return ret;
	if (h->part)
		return -EBADMSG;
	if (2 * nelssa_kv_fmt_bytes(f, h->nr_tokens) + 8ull * h->nr_clusters != data_len)
		return -EBADMSG;
	return nelssa_kv_fmt_first_ok(f, h->first_token) ? 0 : -EINVAL;
}

int nelssa_kv_commit_get(const uint8_t *p, size_t len, size_t data_len, struct nelssa_kv_hdr *h)
{
	int ret = kv_fields(p, len, h);

	return ret ? ret : data_len || h->part > NELSSA_KV_COMMIT_SENT ? -EBADMSG : 0;
}

int nelssa_kv_rows_get(const uint8_t *p, size_t len, size_t data_len,
		       const struct nelssa_kv_fmt *f, struct nelssa_kv_hdr *h)
{
	int ret = kv_fields(p, len, h);

	if (ret)
		return ret;
	switch (h->part) {
	case NELSSA_KV_PART_K:
	case NELSSA_KV_PART_V:
		if (h->first_cluster || h->nr_clusters ||
		    nelssa_kv_fmt_bytes(f, h->nr_tokens) != data_len)
			return -EBADMSG;
		return nelssa_kv_part_fits(f, h->part, h->first_token, h->nr_tokens) ? 0 : -EINVAL;
	case NELSSA_KV_PART_KV:
		if (h->first_cluster || h->nr_clusters || !h->nr_tokens ||
		    nelssa_kv_fmt_kv_bytes(f, h->nr_tokens) != data_len)
			return -EBADMSG;
		return nelssa_kv_part_fits(f, h->part, h->first_token, h->nr_tokens) ? 0 : -EINVAL;
	case NELSSA_KV_PART_TABLE:
		if (h->first_token || h->nr_tokens)
			return -EBADMSG;
		return 8ull * h->nr_clusters == data_len ? 0 : -EBADMSG;
	default:
		return -EBADMSG;
	}
}

void nelssa_ack_hdr_put(uint8_t *p, const struct nelssa_ack_hdr *h)
{
	memset(p, 0, NELSSA_ACK_HDR_BYTES);
	put64(p, h->cookie);
	nelssa_put_le32(p + 8, (uint32_t)h->status);
}

int nelssa_ack_hdr_get(const uint8_t *p, size_t len, struct nelssa_ack_hdr *h)
{
	if (len != NELSSA_ACK_HDR_BYTES || !zero(p + 12, 4))
		return -EBADMSG;
	h->cookie = get64(p);
	h->status = (int32_t)get32(p + 8);
	return h->status <= 0 ? 0 : -EBADMSG;
}

void nelssa_step_hdr_put(uint8_t *p, const struct nelssa_step_hdr *h)
{
	memset(p, 0, NELSSA_STEP_HDR_BYTES);
	put64(p, h->session);
	put64(p + 8, h->token);
	put64(p + 16, h->step);
	put16(p + 24, h->layer);
	nelssa_put_le32(p + 28, h->nr_items);
}

void nelssa_step_item_put(uint8_t *p, const struct nelssa_step_item *it)
{
	memset(p, 0, NELSSA_STEP_ITEM_BYTES);
	put64(p, it->request);
	put16(p + 8, it->head);
	nelssa_put_le32(p + 12, it->nr_sel);
}

int nelssa_step_parse(const uint8_t *hdr, size_t hdr_len, const uint8_t *data, size_t data_len,
		      uint32_t group, uint32_t head_dim, uint32_t max_items, uint32_t max_sel,
		      struct nelssa_step_hdr *h, struct nelssa_step_item *items, size_t *q_off,
		      size_t *sel_off)
{
	const uint64_t q_bytes = 4ull * group * head_dim;
	uint64_t off;

	if (hdr_len != NELSSA_STEP_HDR_BYTES || !zero(hdr + 26, 2) || !zero(hdr + 32, 8))
		return -EBADMSG;
	h->session = get64(hdr);
	h->token = get64(hdr + 8);
	h->step = get64(hdr + 16);
	h->layer = get16(hdr + 24);
	h->nr_items = get32(hdr + 28);
	if (h->nr_items > max_items)
		return -E2BIG;
	off = (uint64_t)h->nr_items * NELSSA_STEP_ITEM_BYTES;
	if (off > data_len)
		return -EBADMSG;
	for (uint32_t i = 0; i < h->nr_items; i++) {
		const uint8_t *p = data + (size_t)i * NELSSA_STEP_ITEM_BYTES;

		if (!zero(p + 10, 2))
			return -EBADMSG;
		items[i].request = get64(p);
		items[i].head = get16(p + 8);
		items[i].nr_sel = get32(p + 12);
		if (items[i].nr_sel > max_sel)
			return -E2BIG;
		q_off[i] = (size_t)off;
		off += q_bytes;
		sel_off[i] = (size_t)off;
		off += 4ull * items[i].nr_sel;
		if (off > data_len)
			return -EBADMSG;
	}
	return off == data_len ? 0 : -EBADMSG;
}

void nelssa_reply_hdr_put(uint8_t *p, const struct nelssa_reply_hdr *h)
{
	memset(p, 0, NELSSA_REPLY_HDR_BYTES);
	put64(p, h->step);
	nelssa_put_le32(p + 8, (uint32_t)h->status);
	nelssa_put_le32(p + 12, h->nr_items);
	put64(p + 16, h->t_recv);
	put64(p + 24, h->t_dispatch);
	put64(p + 32, h->t_device);
	put64(p + 40, h->t_aggregate);
}

int nelssa_reply_hdr_get(const uint8_t *p, size_t len, struct nelssa_reply_hdr *h)
{
	if (len != NELSSA_REPLY_HDR_BYTES)
		return -EBADMSG;
	h->step = get64(p);
	h->status = (int32_t)get32(p + 8);
	h->nr_items = get32(p + 12);
	h->t_recv = get64(p + 16);
	h->t_dispatch = get64(p + 24);
	h->t_device = get64(p + 32);
	h->t_aggregate = get64(p + 40);
	return h->status <= 0 ? 0 : -EBADMSG;
}
