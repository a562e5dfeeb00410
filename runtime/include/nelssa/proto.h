/* SPDX-License-Identifier: MIT */
/*
 * The wire protocol between a GPU node (client) and a NELSSA node
 * (nelssad), DESIGN §3.6; Documentation/wire-protocol.rst describes it.
 *
 * Control messages travel over TCP as frames: a 16-byte header (magic,
 * version, type, payload length, sequence number) and a payload of at most
 * NELSSA_PROTO_MAX_PAYLOAD bytes.  Data messages (KV offload, decode
 * steps) travel as UCX active messages whose header is one of the fixed
 * layouts below and whose data follows it.  Everything is little-endian
 * and encoded field by field, so no struct layout reaches the wire; every
 * decoder checks every field and length before anything trusts it.
 */
#ifndef NELSSA_PROTO_H
#define NELSSA_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/kv_store.h>
#include <nelssa/shape.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NELSSA_PROTO_MAGIC	0x41534c4eu	/* "NLSA" */
#define NELSSA_PROTO_VERSION	7u
#define NELSSA_PROTO_HDR_BYTES	16u
#define NELSSA_PROTO_MAX_PAYLOAD 8192u
#define NELSSA_PROTO_NAME_LEN	32u
#define NELSSA_PROTO_ERR_LEN	128u
/* Devices one daemon serves at most (REQ_OK carries an offset for each). */
#define NELSSA_PROTO_MAX_DEVICES 64u
/* Longest packed UCX remote key an RKEY frame carries. */
#define NELSSA_PROTO_MAX_RKEY	(NELSSA_PROTO_MAX_PAYLOAD - 32u)

/* Limits on a session's shape (DESIGN §3.8: parameters, never constants). */
#define NELSSA_PROTO_MAX_LAYERS	1024u
#define NELSSA_PROTO_MAX_HEADS	1024u
#define NELSSA_PROTO_MAX_HEAD_DIM 1024u
#define NELSSA_PROTO_MAX_GROUP	64u
#define NELSSA_PROTO_MAX_BATCH	4096u

/*
 * A u32 the way the codec puts every one on the wire (little-endian,
 * byte by byte), for whatever else a peer reads as wire fields: the KV
 * table entries a client writes by RMA are those of a KV message.
 */
static inline void nelssa_put_le32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * HELLO flag: the client's data endpoint uses no UCX peer error handling,
 * so that UCX may carry it over shared memory, whose transports cannot
 * detect a dead peer (the control socket does).  The daemon grants it in
 * HELLO_OK only to a client on its own host, when it has a shared-memory
 * transport; the client then connects that way (nelssa/link.h).
 */
#define NELSSA_HELLO_SHM	0x1u
#define NELSSA_HELLO_FLAGS	NELSSA_HELLO_SHM	/* every flag defined */

/*
 * SESSION_OK flag: the session's device memory is registered with UCX, so
 * the client may write KV rows straight into it (RKEY_GET, then RMA puts
 * and NELSSA_AM_KV_COMMIT) instead of sending them in NELSSA_AM_KV.
 */
#define NELSSA_SESSION_RMA	0x1u
/*
 * SESSION_OK flag: the session takes NELSSA_AM_KV_ROWS -- K rows, V rows
 * and table entries each in a message of its own, so that the daemon can
 * receive each straight into its place in device memory -- and a
 * NELSSA_AM_KV_COMMIT that counts them (head-wise placement).
 */
#define NELSSA_SESSION_ROWS	0x2u
#define NELSSA_SESSION_FLAGS	(NELSSA_SESSION_RMA | NELSSA_SESSION_ROWS)

/**
 * enum nelssa_msg_type - control message types.
 * @NELSSA_MSG_HELLO: client -> daemon, first frame: versions it speaks,
 *	flags for its data path.
 * @NELSSA_MSG_HELLO_OK: the version chosen, the devices, where the data
 *	path listens and the key that binds endpoints to this connection.
 * @NELSSA_MSG_SESSION_CREATE: model shape and capacity.
 * @NELSSA_MSG_SESSION_OK: the session id and its token.
 * @NELSSA_MSG_REQ_ALLOC: reserve device memory for one request's KV.
 * @NELSSA_MSG_REQ_FREE: release it.
 * @NELSSA_MSG_OK: success without data.
 * @NELSSA_MSG_STATS: ask for counters (one session, or 0 for all).
 * @NELSSA_MSG_STATS_REPLY: the counters.
 * @NELSSA_MSG_CLOSE: end a session.
 * @NELSSA_MSG_ERROR: a request failed: -errno and a message.
 * @NELSSA_MSG_RKEY_GET: ask for the UCX remote key of a session's memory on
 *	one device (a session with NELSSA_SESSION_RMA).
 * @NELSSA_MSG_RKEY: that key, packed, and the range it covers.
 * @NELSSA_MSG_REQ_OK: REQ_ALLOC done: where the request's KV lies.
 * @NELSSA_MSG_MAX: one past the last type.
 */
enum nelssa_msg_type {
	NELSSA_MSG_HELLO = 1,
	NELSSA_MSG_HELLO_OK = 2,
	NELSSA_MSG_SESSION_CREATE = 3,
	NELSSA_MSG_SESSION_OK = 4,
	NELSSA_MSG_REQ_ALLOC = 5,
	NELSSA_MSG_REQ_FREE = 6,
	NELSSA_MSG_OK = 7,
	NELSSA_MSG_STATS = 8,
	NELSSA_MSG_STATS_REPLY = 9,
	NELSSA_MSG_CLOSE = 10,
	NELSSA_MSG_ERROR = 11,
	NELSSA_MSG_RKEY_GET = 12,
	NELSSA_MSG_RKEY = 13,
	NELSSA_MSG_REQ_OK = 14,
	NELSSA_MSG_MAX,
};

/**
 * struct nelssa_msg_hdr - a control frame's header.
 * @magic: NELSSA_PROTO_MAGIC.
 * @version: protocol version of the frame (HELLO may carry any).
 * @type: enum nelssa_msg_type.
 * @length: payload bytes that follow (<= NELSSA_PROTO_MAX_PAYLOAD).
 * @seq: chosen by the sender of a request, echoed by its reply.
 */
struct nelssa_msg_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t length;
	uint32_t seq;
};

/**
 * struct nelssa_msg - a decoded control message.
 * @type: enum nelssa_msg_type.
 * @seq: the header's sequence number.
 * @u: the payload of @type (none for OK).
 */
struct nelssa_msg {
	uint16_t type;
	uint32_t seq;
	union {
		/*
		 * @min_version..@max_version: versions the client speaks;
		 * @flags: NELSSA_HELLO_* it asks for.
		 */
		struct {
			uint16_t min_version, max_version;
			uint32_t flags;
			char name[NELSSA_PROTO_NAME_LEN];
		} hello;
		/*
		 * @device_bytes: device memory in all; @data_port: the UCX
		 * listener's port, at the control connection's address;
		 * @key: the UCX client id this connection's endpoints carry
		 * (secret, never 0); @flags: NELSSA_HELLO_* granted.
		 */
		struct {
			uint16_t version, devices;
			uint16_t data_port, flags;
			uint64_t device_bytes;
			uint64_t key;
			char name[NELSSA_PROTO_NAME_LEN];
		} hello_ok;
		/*
		 * @max_batch: requests per decode step; @max_sel: clusters one
		 * item may select; @capacity_tokens: tokens of all requests at
		 * once, what the devices must have room for.
		 */
		struct {
			uint32_t tenant;
			struct nelssa_shape shape;
			uint8_t placement;
			uint32_t max_batch, max_sel;
			uint64_t capacity_tokens;
		} create;
		/*
		 * @token: the session's secret, random and never 0; every KV
		 * and STEP message of the session must carry it; @flags:
		 * NELSSA_SESSION_*.
		 */
		struct {
			uint64_t session, token;
			uint32_t devices, flags;
		} session_ok;
		/* RKEY_GET: the session and the device whose key is wanted. */
		struct {
			uint64_t session;
			uint32_t device;
		} rkey_get;
		/*
		 * RKEY: the session's memory on @device is [@base, +@bytes)
		 * in the daemon's address space, reachable with the packed
		 * key @key of @len bytes (ucp_ep_rkey_unpack()).
		 */
		struct {
			uint64_t session, base, bytes;
			uint32_t device, len;
			uint8_t key[NELSSA_PROTO_MAX_RKEY];
		} rkey;
		/*
		 * REQ_OK: the request's block lies at @off[d] of the session's
		 * memory on each of the @devices devices; every (layer, head)
		 * store in it has room for @store_tokens rows and
		 * @store_clusters table entries (<nelssa/kv_store.h> places
		 * them).
		 */
		struct {
			uint64_t request;
			uint32_t store_tokens, store_clusters, devices;
			uint64_t off[NELSSA_PROTO_MAX_DEVICES];
		} req_ok;
		struct {
			uint64_t session, request;
			uint32_t max_tokens, max_clusters;
		} req;		/* REQ_ALLOC; REQ_FREE uses session and request */
		struct {
			uint64_t session;
		} session;	/* STATS, CLOSE */
		/*
		 * Counters, times in ns summed over steps; @kv_rma_bytes: the
		 * part of @kv_bytes clients wrote into device memory
		 * themselves; @kv_recv_bytes: the part UCX received straight
		 * into device memory (NELSSA_AM_KV_ROWS); the rest the daemon
		 * copied in.
		 */
		struct {
			uint64_t steps, items, kv_bytes, kv_rma_bytes, kv_recv_bytes;
			uint64_t t_recv, t_dispatch, t_device, t_aggregate, t_send;
			uint32_t sessions, devices;
		} stats;
		struct {
			int32_t code;
			char msg[NELSSA_PROTO_ERR_LEN];
		} error;
	} u;
};

/**
 * nelssa_msg_encode() - encode a control message into a frame.
 * @m: the message; @m->type selects the payload.
 * @buf: receives header and payload.
 * @cap: room in @buf.
 * @len: receives the frame's length.
 *
 * Return: 0; -EINVAL for an unknown type or a field out of range (the
 * same checks as decoding); -ENOSPC when @cap is too small.
 */
int nelssa_msg_encode(const struct nelssa_msg *m, uint8_t *buf, size_t cap, size_t *len);

/**
 * nelssa_msg_decode_hdr() - decode and check a frame header.
 * @buf: NELSSA_PROTO_HDR_BYTES bytes.
 * @h: receives the header.
 *
 * Return: 0; -EPROTO for a bad magic or unknown type; -EMSGSIZE for a
 * payload over NELSSA_PROTO_MAX_PAYLOAD; -EPROTONOSUPPORT for a version
 * other than NELSSA_PROTO_VERSION on anything but HELLO.
 */
int nelssa_msg_decode_hdr(const uint8_t *buf, struct nelssa_msg_hdr *h);

/**
 * nelssa_msg_decode() - decode and check a whole frame.
 * @buf: the frame.
 * @len: its length (header + payload, exactly).
 * @m: receives the message.
 *
 * Every field is checked: lengths exact, strings NUL-terminated inside
 * their field, reserved bytes zero, values in range.
 *
 * Return: 0, or a negative errno as nelssa_msg_decode_hdr(), -EBADMSG for
 * a payload that does not match its type, -EINVAL for a field out of range.
 */
int nelssa_msg_decode(const uint8_t *buf, size_t len, struct nelssa_msg *m);

/* A message's type as text ("HELLO", ...), "?" when unknown. */
const char *nelssa_msg_type_str(uint16_t type);

/* Checks a shape against the limits above; 0 or -EINVAL. */
int nelssa_shape_check(const struct nelssa_shape *s);

/*
 * Data path: UCX active-message ids and headers.
 */
#define NELSSA_AM_KV		1u	/* client -> daemon: K/V rows and table */
#define NELSSA_AM_KV_ACK	2u	/* daemon -> client */
#define NELSSA_AM_STEP		3u	/* client -> daemon: one layer's queries */
#define NELSSA_AM_STEP_REPLY	4u	/* daemon -> client: outputs and LSEs */
#define NELSSA_AM_KV_COMMIT	5u	/* client -> daemon: rows in place, count them */
#define NELSSA_AM_KV_ROWS	6u	/* client -> daemon: K rows, V rows or entries */

#define NELSSA_KV_HDR_BYTES	64u
#define NELSSA_ACK_HDR_BYTES	16u
#define NELSSA_STEP_HDR_BYTES	40u
#define NELSSA_STEP_ITEM_BYTES	16u
#define NELSSA_REPLY_HDR_BYTES	48u

/**
 * struct nelssa_kv_hdr - NELSSA_AM_KV: write one (request, layer, head)'s
 *	tokens [@first_token, +@nr_tokens) and table entries
 *	[@first_cluster, +@nr_clusters).
 * @session: the session.
 * @token: its token (SESSION_OK): a message whose session and token do not
 *	both match a session of the daemon is refused with -ENOENT.
 * @request: the request (from REQ_ALLOC).
 * @cookie: echoed in the ack.
 * @layer: layer.
 * @head: KV head.
 * @first_token: position of the first row in the cluster-contiguous store.
 * @nr_tokens: K rows, then as many V rows, follow the header.
 * @first_cluster: table index of the first entry.
 * @nr_clusters: &struct nelssa_cluster entries after the V rows; their
 *	token ranges are absolute positions in the store.
 * @part: 0 in NELSSA_AM_KV; in NELSSA_AM_KV_ROWS which part its data is
 *	(&enum nelssa_kv_part); in NELSSA_AM_KV_COMMIT how the rows came: 0
 *	by the client's puts, NELSSA_KV_COMMIT_SENT in KV_ROWS messages
 *	(counted as they came).
 *
 * Data length must be exactly 2 * nelssa_kv_fmt_bytes(nr_tokens) + 8 *
 * nr_clusters: the K and V arrays of the tokens in the session's KV format
 * (rows of head_dim elements, or for an 8-bit type whole tiles with their
 * scales, then starting on a tile boundary).
 * NELSSA_AM_KV_COMMIT carries the same header and no data: the rows and
 * entries it names are already in the session's memory, written there by
 * the client's RMA puts (completed -- flushed -- before it is sent) or
 * by NELSSA_AM_KV_ROWS messages (acknowledged before it is sent).
 *
 * NELSSA_AM_KV_ROWS carries one part, to be stored where <nelssa/kv_store.h>
 * puts it: K or V rows [@first_token, +@nr_tokens) of the store (then
 * @first_cluster and @nr_clusters are 0, and the data is exactly
 * nr_tokens * row bytes), or table entries [@first_cluster, +@nr_clusters)
 * (then @first_token and @nr_tokens are 0, and the data is exactly
 * 8 * nr_clusters bytes).  Its data lands in the session's memory and is
 * acknowledged; the store's counts do not change until a commit names it.
 */
struct nelssa_kv_hdr {
	uint64_t session, token, request, cookie;
	uint16_t layer, head;
	uint32_t first_token, nr_tokens, first_cluster, nr_clusters;
	uint8_t part;
};

/**
 * enum nelssa_kv_part - what a NELSSA_AM_KV_ROWS message carries.
 * @NELSSA_KV_PART_K: K rows.
 * @NELSSA_KV_PART_V: V rows.
 * @NELSSA_KV_PART_TABLE: table entries (&struct nelssa_cluster, as in a
 *	KV message: token ranges absolute positions in the store).
 * @NELSSA_KV_PART_KV: whole blocks of an adjacent store (NELSSA_KV_ADJACENT)
 *	as they lie there: for each block holding tokens [@first_token,
 *	+@nr_tokens), its K block then its V block (rows past the last token
 *	are written with what the data holds there); @first_token on a block
 *	boundary, the data nelssa_kv_fmt_kv_bytes(@nr_tokens).  A packed
 *	session takes none; an adjacent one takes K or V parts only within
 *	one block, of a 16-bit type (nelssa_kv_fmt_one_run()).
 */
enum nelssa_kv_part {
	NELSSA_KV_PART_K = 1,
	NELSSA_KV_PART_V = 2,
	NELSSA_KV_PART_TABLE = 3,
	NELSSA_KV_PART_KV = 4,
};

/*
 * Whether a NELSSA_AM_KV_ROWS part of rows [@first, +@n) lies where a store
 * of format @f can take it as one run: a K or V part's rows within one
 * block of an adjacent store (and on a tile of an 8-bit type), a KV part
 * on a block boundary of an adjacent store.  Table parts always do.  The
 * codec refuses a part that does not with -EINVAL, and the daemon checks
 * it again where it places the part.
 */
static inline int nelssa_kv_part_fits(const struct nelssa_kv_fmt *f, unsigned int part,
				      uint64_t first, uint64_t n)
{
	if (part == NELSSA_KV_PART_KV)
		return f->layout == NELSSA_KV_ADJACENT && first % NELSSA_KV_QTILE == 0;
	if (part == NELSSA_KV_PART_TABLE)
		return 1;
	return nelssa_kv_fmt_one_run(f, first, n) && nelssa_kv_fmt_first_ok(f, first);
}

/* &struct nelssa_kv_hdr @part of a commit of rows sent in KV_ROWS messages. */
#define NELSSA_KV_COMMIT_SENT 1u

/**
 * struct nelssa_ack_hdr - NELSSA_AM_KV_ACK.
 * @cookie: the KV message's.
 * @status: 0 or -errno.
 */
struct nelssa_ack_hdr {
	uint64_t cookie;
	int32_t status;
};

/**
 * struct nelssa_step_hdr - NELSSA_AM_STEP: one layer of one decode step.
 * @session: the session.
 * @token: its token, as in &struct nelssa_kv_hdr.
 * @step: echoed in the reply.
 * @layer: the layer.
 * @nr_items: (request, KV head) items that follow.
 *
 * Then @nr_items item headers (request u64, head u16, pad u16, nr_sel
 * u32), then per item its queries fp32 [group][head_dim] and its nr_sel
 * u32 cluster ids.
 */
struct nelssa_step_hdr {
	uint64_t session, token, step;
	uint16_t layer;
	uint32_t nr_items;
};

/**
 * struct nelssa_step_item - one work item of a step.
 * @request: the request.
 * @head: its KV head.
 * @nr_sel: selected clusters.
 */
struct nelssa_step_item {
	uint64_t request;
	uint16_t head;
	uint32_t nr_sel;
};

/**
 * struct nelssa_reply_hdr - NELSSA_AM_STEP_REPLY.
 * @step: the step's.
 * @status: 0 or -errno (then no data follows).
 * @nr_items: items; then per item o fp32 [group][head_dim], lse fp32 [group].
 * @t_dispatch: daemon time from receipt to the last command submitted, ns.
 * @t_device: from then to the last completion, ns.
 * @t_aggregate: from then to the reply being ready, ns.
 * @t_recv: from the message's arrival to its processing, ns.
 */
struct nelssa_reply_hdr {
	uint64_t step;
	int32_t status;
	uint32_t nr_items;
	uint64_t t_recv, t_dispatch, t_device, t_aggregate;
};

/* Encoders write exactly the *_HDR_BYTES of each header. */
void nelssa_kv_hdr_put(uint8_t *p, const struct nelssa_kv_hdr *h);
void nelssa_ack_hdr_put(uint8_t *p, const struct nelssa_ack_hdr *h);
void nelssa_step_hdr_put(uint8_t *p, const struct nelssa_step_hdr *h);
void nelssa_step_item_put(uint8_t *p, const struct nelssa_step_item *it);
void nelssa_reply_hdr_put(uint8_t *p, const struct nelssa_reply_hdr *h);

/**
 * nelssa_kv_hdr_get() - decode a KV header and check it against its data.
 * @p: the header bytes.
 * @len: header length (must be NELSSA_KV_HDR_BYTES).
 * @data_len: length of the data that came with it.
 * @f: the session's KV format: the data is the K array of the header's
 *	tokens, then the V array (nelssa_kv_fmt_bytes() each), then the
 *	table entries.
 * @h: receives the header.
 *
 * Return: 0, -EBADMSG (lengths), -EINVAL (overflowing ranges, or rows of
 * an 8-bit type that do not start on a tile boundary).
 */
int nelssa_kv_hdr_get(const uint8_t *p, size_t len, size_t data_len,
		      const struct nelssa_kv_fmt *f, struct nelssa_kv_hdr *h);

/**
 * nelssa_kv_commit_get() - decode a NELSSA_AM_KV_COMMIT header.
 * @p: the header bytes.
 * @len: header length (must be NELSSA_KV_HDR_BYTES).
 * @data_len: length of the data that came with it (must be 0).
 * @h: receives the header.
 *
 * Return: 0, -EBADMSG (lengths), -EINVAL (overflowing ranges).
 */
int nelssa_kv_commit_get(const uint8_t *p, size_t len, size_t data_len, struct nelssa_kv_hdr *h);

/**
 * nelssa_kv_rows_get() - decode a NELSSA_AM_KV_ROWS header and check it
 *	against its data.
 * @p: the header bytes.
 * @len: header length (must be NELSSA_KV_HDR_BYTES).
 * @data_len: length of the data that came with it.
 * @f: the session's KV format (a K or V part is nelssa_kv_fmt_bytes() of
 *	its tokens).
 * @h: receives the header.
 *
 * Return: 0, -EBADMSG (lengths, an unknown part, fields the part does not
 * use not 0), -EINVAL (overflowing ranges, rows of an 8-bit type that do
 * not start on a tile boundary, a K or V part of an adjacent store that
 * is not rows within one block, a KV
 * part of a packed one or not on a block boundary).
 */
int nelssa_kv_rows_get(const uint8_t *p, size_t len, size_t data_len,
		       const struct nelssa_kv_fmt *f, struct nelssa_kv_hdr *h);

/**
 * nelssa_am_session_get() - the session and token a KV or STEP header names.
 * @p: the header bytes.
 * @len: their length.
 * @session: receives the session id.
 * @token: receives its token.
 *
 * Both headers start with them, so a receiver can find the session, and
 * check that the sender holds its token, before it decodes the rest
 * against the session's shape.
 *
 * Return: 0, or -EBADMSG when @len is too short to hold them.
 */
int nelssa_am_session_get(const uint8_t *p, size_t len, uint64_t *session, uint64_t *token);

/* Decoders of the fixed headers; 0 or -EBADMSG when @len is not exact. */
int nelssa_ack_hdr_get(const uint8_t *p, size_t len, struct nelssa_ack_hdr *h);
int nelssa_reply_hdr_get(const uint8_t *p, size_t len, struct nelssa_reply_hdr *h);

/**
 * nelssa_step_parse() - decode and check a whole step message.
 * @hdr: the AM header.
 * @hdr_len: its length.
 * @data: the AM data: item headers, then queries and ids.
 * @data_len: its length.
 * @group: the session's GQA group.
 * @head_dim: the session's head dimension.
 * @max_items: most items accepted.
 * @max_sel: most ids per item.
 * @h: receives the step header.
 * @items: receives up to @max_items items.
 * @q_off: receives per item the byte offset of its queries in @data.
 * @sel_off: receives per item the byte offset of its ids in @data.
 *
 * Return: 0, -EBADMSG (lengths do not add up), -E2BIG (too many items or
 * ids).
 */
int nelssa_step_parse(const uint8_t *hdr, size_t hdr_len, const uint8_t *data, size_t data_len,
		      uint32_t group, uint32_t head_dim, uint32_t max_items, uint32_t max_sel,
		      struct nelssa_step_hdr *h, struct nelssa_step_item *items, size_t *q_off,
		      size_t *sel_off);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_PROTO_H */
