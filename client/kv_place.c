// SPDX-License-Identifier: MIT
/*
 * KV written into its place in the daemon's device memory
 * (Documentation/daemon.rst, "Zero-copy ingest"), one of two ways.  A
 * session whose device memory the daemon registered with UCX for RMA
 * (NELSSA_SESSION_RMA) gives this connection a packed remote key per
 * device (RKEY) and, per request, where its block lies (REQ_OK): an
 * offload puts the K rows, the V rows and the table entries where
 * <nelssa/kv_store.h> places them and flushes the endpoint.  Otherwise a
 * head-wise session (NELSSA_SESSION_ROWS) takes each as a
 * NELSSA_AM_KV_ROWS part, which the daemon has UCX receive straight into
 * the same place and acknowledges once it is there.  Either way each
 * chunk of rows is gathered into cluster-contiguous order first -- the
 * one copy, on this side, and none where the caller's rows are in that
 * order already -- and a small NELSSA_AM_KV_COMMIT naming the ranges a KV
 * message would follows: the daemon checks them, counts the rows and
 * acknowledges, without touching a byte.  Where neither way can be had
 * the session sends KV messages (remote.c), which the daemon copies in.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/kv_store.h>
#include <nelssa/log.h>
#include <nelssa/util.h>

#include <nelssa/link.h>

#include "remote_internal.h"

void nc_rma_session_close(struct csession *s)
{
	for (uint32_t d = 0; s->rk && d < s->n_dev; d++)
		if (s->rk[d].rkey)
			ucp_rkey_destroy(s->rk[d].rkey);
	free(s->rk);
	free(s->req);
	s->rk = NULL;
	s->req = NULL;
	s->n_req = 0;
	s->cap_req = 0;
	s->rma = 0;
}

/* Why a session takes KV messages after all: a warning, not a failure of the call. */
static void fallback(struct csession *s, const char *why)
{
	char msg[384];

	nc_rma_session_close(s);
	snprintf(msg, sizeof(msg), "session %llu: zero-copy ingest unavailable, KV goes in "
		 "messages: %s", (unsigned long long)s->id, why);
	nelssa_log(NELSSA_LOG_WARNING, "client", msg);
}

void nc_rma_session_open(struct nelssa_client *c, struct csession *s)
{
	struct nelssa_msg m = { .type = NELSSA_MSG_RKEY_GET };
	struct nelssa_msg *r;

	if (c->zero_copy == NELSSA_ZERO_COPY_AUTO && !nelssa_link_ep_native_rma(c->ep)) {
		char msg[192];

		snprintf(msg, sizeof(msg), "session %llu: KV goes in messages: UCX has no native "
			 "RMA lane to the daemon here (it would emulate puts with messages, which is "
			 "slower); NELSSA_ZERO_COPY_FORCE puts anyway", (unsigned long long)s->id);
		nelssa_log(NELSSA_LOG_INFO, "client", msg);
		return;
	}
	r = malloc(sizeof(*r));
	s->rk = calloc(s->n_dev ? s->n_dev : 1, sizeof(*s->rk));
	if (!r || !s->rk || s->n_dev > NELSSA_PROTO_MAX_DEVICES) {
		free(r);
		fallback(s, s->n_dev > NELSSA_PROTO_MAX_DEVICES ? "too many devices"
							       : "out of memory");
		return;
	}
	for (uint32_t d = 0; d < s->n_dev; d++) {
		ucs_status_t st;

		m.u.rkey_get.session = s->id;
		m.u.rkey_get.device = d;
		if (nc_ctl_call(c, &m, r)) {
			fallback(s, c->err);
			break;
		}
		if (r->type != NELSSA_MSG_RKEY || r->u.rkey.session != s->id ||
		    r->u.rkey.device != d) {
			fallback(s, "the daemon answered RKEY_GET with something else");
			break;
		}
		st = ucp_ep_rkey_unpack(c->ep, r->u.rkey.key, &s->rk[d].rkey);
		if (st != UCS_OK) {
			s->rk[d].rkey = NULL;
			fallback(s, ucs_status_string(st));
			break;
		}
		s->rk[d].base = r->u.rkey.base;
		s->rk[d].bytes = r->u.rkey.bytes;
		s->rma = d + 1 == s->n_dev;
	}
	free(r);
}

static struct crequest *request_find(struct csession *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_req; i++)
		if (s->req[i].id == id)
			return &s->req[i];
	return NULL;
}

int nc_rma_request_add(struct nelssa_client *c, struct csession *s, const struct nelssa_msg *r)
{
	struct crequest *q;

	if (r->u.req_ok.devices != s->n_dev)
		return nc_fail(c, -EPROTO, "REQ_OK names %u devices, the session has %u",
			       r->u.req_ok.devices, s->n_dev);
	if (s->n_req == s->cap_req) {
		const uint32_t cap = s->cap_req ? 2 * s->cap_req : 8;
		struct crequest *n = realloc(s->req, sizeof(*n) * cap);

		if (!n)
			return nc_fail(c, -ENOMEM, "out of memory");
		s->req = n;
		s->cap_req = cap;
	}
	q = &s->req[s->n_req++];
	memset(q, 0, sizeof(*q));
	q->id = r->u.req_ok.request;
	q->store_tokens = r->u.req_ok.store_tokens;
	q->store_clusters = r->u.req_ok.store_clusters;
	memcpy(q->off, r->u.req_ok.off, sizeof(q->off[0]) * s->n_dev);
	return 0;
}

void nc_rma_request_del(struct csession *s, uint64_t id)
{
	struct crequest *q = request_find(s, id);

	if (q)
		*q = s->req[--s->n_req];
}

/*
 * One offload's writes into place, by either way (Documentation/
 * daemon.rst, "Zero-copy ingest"): RMA puts at @k_at, @v_at and @t_at
 * under @rkey, or NELSSA_AM_KV_ROWS messages that share header @h and
 * that the daemon receives into the same places.  @op: the writes in
 * flight, oldest first; each owns its source buffer (a send_op's @data)
 * until UCX is done reading it.
 */
struct kv_writes {
	int rows;
	ucp_rkey_h rkey;
	uint64_t k_at, v_at, t_at;
	struct nelssa_kv_hdr h;
	struct nelssa_kv_fmt fmt;
	size_t row;			/* bytes of one row of a row type, else 0 */
	enum nelssa_kv_dtype src;	/* the caller's rows of a tiled session */
	uint32_t base;			/* the token the caller's rows start at */
	uint64_t deadline;
	struct send_op *op[PUT_WINDOW];
	uint32_t n;
};

static const char *what(const struct kv_writes *w)
{
	return w->rows ? "sending KV rows to the daemon" : "RMA write into the daemon's memory";
}

/* Waits for the oldest write; its buffer is freed. */
static int write_retire(struct nelssa_client *c, struct kv_writes *w)
{
	struct send_op *op = w->op[0];
	int ret = nc_wait(c, &op->done, w->deadline);

	if (ret)
		return ret;
	memmove(w->op, w->op + 1, sizeof(w->op[0]) * --w->n);
	if (op->status != UCS_OK)
		ret = nc_fail(c, nc_ucs_errno(op->status), "%s failed: %s", what(w),
			      ucs_status_string(op->status));
	ucp_request_free(op->req);
	nc_op_free(op);
	return ret;
}

static int borrowed_in_flight(const struct kv_writes *w)
{
	for (uint32_t i = 0; i < w->n; i++)
		if (w->op[i]->borrowed && !w->op[i]->done)
			return 1;
	return 0;
}

static int any_in_flight(const struct kv_writes *w)
{
	for (uint32_t i = 0; i < w->n; i++)
		if (!w->op[i]->done)
			return 1;
	return 0;
}

/*
 * After a failure: writes UCX still has go to the connection's orphans
 * (their buffers with them), as sends that outlive their call do.  A put
 * of the caller's own rows cannot outlive the call (the rows are the
 * caller's again once it returns) and UCX 1.13 cannot cancel one: the
 * endpoint is closed, forced, which ends every put on it, and the
 * connection's data path with it (nc_ep_gone()).  A KV_ROWS part still
 * in flight -- from a buffer of its own, never the caller's rows: UCX
 * 1.13's forced close does not end a rendezvous send -- may yet be
 * fetched into its place, after the call has failed; the data path is
 * closed for it too, so that no later offload of the session meets it
 * there.
 */
static void writes_abandon(struct nelssa_client *c, struct kv_writes *w)
{
	const uint64_t end = nelssa_now_ms() + CANCEL_GRACE_MS;

	while (any_in_flight(w) && nelssa_now_ms() < end)
		ucp_worker_progress(c->worker);
	if (w->rows ? any_in_flight(w) : borrowed_in_flight(w)) {
		nelssa_log(NELSSA_LOG_WARNING, "client", "an offload failed with writes in flight: "
			   "closing the data path");
		nc_ep_kill(c);
	}
	if (borrowed_in_flight(w)) {
		/* UCX promises the forced close ends them; it did not. */
		nelssa_log(NELSSA_LOG_ERR, "client", "UCX kept a put of the caller's rows after a "
			   "forced close of the endpoint");
		abort();
	}
	for (uint32_t i = 0; i < w->n; i++) {
		w->op[i]->next = c->orphans;
		c->orphans = w->op[i];
	}
	w->n = 0;
	nc_reap_orphans(c);
}

/*
 * Writes @len bytes of @part, which starts at token (or, for the table,
 * entry) @first, bounded by the window: from @src, the caller's rows, when
 * @owned is NULL (the write is waited for before the call returns;
 * writes_abandon()), else from @owned (nc_buf_get()'s when @cached, else
 * malloc'd), which passes on.  A KV_ROWS message is acknowledged by the
 * daemon once its data is in place (nc_wait_acks()).
 */
static int write_part(struct nelssa_client *c, struct kv_writes *w, int part, uint32_t first,
		      uint32_t count, const void *src, void *owned, int cached, size_t len)
{
	ucp_request_param_t prm = { 0 };
	struct send_op *op;
	ucs_status_ptr_t sp;
	int ret = 0;

	if (w->n == PUT_WINDOW)
		ret = write_retire(c, w);
	if (!ret)
		ret = nc_ep_gone(c) ? -ECONNRESET : 0;
	op = ret ? NULL : calloc(1, sizeof(*op));
	if (!op) {
		if (cached)
			nc_buf_put(c, owned);
		else
			free(owned);
		return ret ? ret : nc_fail(c, -ENOMEM, "out of memory");
	}
	op->data = owned;
	op->cache = cached ? c : NULL;
	op->borrowed = !owned;
	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	prm.cb.send = nc_sent;
	prm.user_data = op;
	if (w->rows) {
		struct nelssa_kv_hdr h = w->h;

		/* A part names its own range alone: the other fields are 0. */
		h.part = (uint8_t)part;
		h.first_token = h.nr_tokens = h.first_cluster = h.nr_clusters = 0;
		if (part == NELSSA_KV_PART_TABLE) {
			h.first_cluster = first;
			h.nr_clusters = count;
		} else {
			h.first_token = first;
			h.nr_tokens = count;
		}
		/*
		 * The daemon takes so many rendezvous receives of a session at
		 * once (ND_RNDV_PER_SESSION), and acknowledges each only once
		 * its data is in place: keep fewer than that unacknowledged,
		 * leaving room for a step.
		 */
		ret = nc_wait_acks(c, ACK_WINDOW, w->deadline);
		if (ret) {
			nc_op_free(op);
			return ret;
		}
		h.cookie = ++c->next_cookie;
		nelssa_kv_hdr_put(op->hdr, &h);
		/*
		 * Rows by rendezvous, always: the daemon then has UCX fetch
		 * them straight into their place, where an eager message
		 * would land in UCX's buffers and be copied out.  Table
		 * entries (8 bytes a cluster) eager, always: a handshake
		 * would cost more than their copy.
		 */
		prm.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
		prm.flags = UCP_AM_SEND_FLAG_REPLY | (part == NELSSA_KV_PART_TABLE ?
						      UCP_AM_SEND_FLAG_EAGER : UCP_AM_SEND_FLAG_RNDV);
		c->acks_pending++;
		sp = ucp_am_send_nbx(c->ep, NELSSA_AM_KV_ROWS, op->hdr, NELSSA_KV_HDR_BYTES,
				     owned ? owned : src, len, &prm);
	} else {
		/* A KV part's run starts at its first K block. */
		const uint64_t at = part == NELSSA_KV_PART_TABLE ?
				    w->t_at + (uint64_t)NELSSA_KV_ENTRY_BYTES * first :
				    (part == NELSSA_KV_PART_V ? w->v_at : w->k_at) +
				    nelssa_kv_fmt_row_off(&w->fmt, first);

		sp = ucp_put_nbx(c->ep, owned ? owned : src, len, at, w->rkey, &prm);
	}
	if (!UCS_PTR_IS_PTR(sp)) {
		nc_op_free(op);
		return UCS_PTR_IS_ERR(sp) ? nc_fail(c, nc_ucs_errno(UCS_PTR_STATUS(sp)),
						    "%s failed: %s", what(w),
						    ucs_status_string(UCS_PTR_STATUS(sp))) : 0;
	}
	op->req = sp;
	w->op[w->n++] = op;
	return 0;
}

/* Rows of store positions [@a, +@n) of the caller's @rows, gathered into @out in cluster order. */
static void gather(const struct kv_writes *w, const struct nelssa_cluster_index *ix, uint32_t a,
		   uint32_t n, const void *rows, uint8_t *out)
{
	const size_t row = w->row;

	for (uint32_t i = 0; i < n; i++)
		memcpy(out + i * row, (const uint8_t *)rows + (size_t)(ix->perm[a + i] - w->base) * row,
		       row);
}

/* Whether rows @perm[0..n) are consecutive: a run of the caller's memory as it stands. */
static int consecutive(const uint32_t *perm, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (perm[i] != perm[0] + i)
			return 0;
	return 1;
}

/*
 * The writes of clusters [@from, n) of @ix: rows chunk by chunk, then the
 * table.  A chunk whose rows already lie in cluster order in the
 * caller's K and V (consecutive in @ix's permutation -- an engine that
 * gathered them itself, as a GPU does before a transfer) is put from
 * there, or copied whole into a buffer for KV_ROWS; any other is gathered
 * into a buffer first, the one copy.
 */
static int write_table(struct nelssa_client *c, struct kv_writes *w,
		       const struct nelssa_cluster_index *ix, uint32_t from);

static int write_rows(struct nelssa_client *c, struct kv_writes *w,
		      const struct nelssa_cluster_index *ix, uint32_t from, const void *k,
		      const void *v)
{
	const size_t row = w->row;
	int ret = 0;

	for (uint32_t cl = from; cl < ix->n_clusters && !ret;) {
		const uint32_t first = ix->table[cl].first;
		uint32_t end = cl, tokens = 0;
		uint8_t *kb, *vb;
		int cached, run;

		while (end < ix->n_clusters &&
		       (end == cl || 2ull * (tokens + ix->table[end].count) * row <= CHUNK_BYTES))
			tokens += ix->table[end++].count;
		cl = end;
		/*
		 * Clusters are never empty (struct nelssa_cluster_index): tokens
		 * >= 1.  Only a put may read the caller's rows in place: UCX
		 * 1.13's forced close ends a put, but not a rendezvous send that
		 * waits for a stopped daemon, which would then outlive the call.
		 */
		run = consecutive(ix->perm + first, tokens);
		if (run && !w->rows) {
			const size_t at = (size_t)(ix->perm[first] - w->base) * row;

			ret = write_part(c, w, NELSSA_KV_PART_K, first, tokens,
					 (const uint8_t *)k + at, NULL, 0, tokens * row);
			if (!ret)
				ret = write_part(c, w, NELSSA_KV_PART_V, first, tokens,
						 (const uint8_t *)v + at, NULL, 0, tokens * row);
			continue;
		}
		cached = (size_t)tokens * row <= NC_BUF_BYTES;
		kb = cached ? nc_buf_get(c) : malloc((size_t)tokens * row);
		vb = cached ? nc_buf_get(c) : malloc((size_t)tokens * row);
		if (!kb || !vb) {
			if (cached) {
				nc_buf_put(c, kb);
				nc_buf_put(c, vb);
			} else {
				free(kb);
				free(vb);
			}
			return nc_fail(c, -ENOMEM, "out of memory");
		}
		if (run) {
			const size_t at = (size_t)(ix->perm[first] - w->base) * row;

			memcpy(kb, (const uint8_t *)k + at, tokens * row);
			memcpy(vb, (const uint8_t *)v + at, tokens * row);
		} else {
			gather(w, ix, first, tokens, k, kb);
			gather(w, ix, first, tokens, v, vb);
		}
		ret = write_part(c, w, NELSSA_KV_PART_K, first, tokens, NULL, kb, cached,
				 tokens * row);
		if (!ret)
			ret = write_part(c, w, NELSSA_KV_PART_V, first, tokens, NULL, vb, cached,
					 tokens * row);
		else if (cached)
			nc_buf_put(c, vb);
		else
			free(vb);
	}
	return ret ? ret : write_table(c, w, ix, from);
}

/* Table entries: struct npnm_cluster, little-endian, as a KV message carries them. */
static int write_table(struct nelssa_client *c, struct kv_writes *w,
		       const struct nelssa_cluster_index *ix, uint32_t from)
{
	uint8_t *table = malloc((size_t)NELSSA_KV_ENTRY_BYTES * (ix->n_clusters - from));

	if (!table)
		return nc_fail(c, -ENOMEM, "out of memory");
	for (uint32_t j = from; j < ix->n_clusters; j++) {
		nelssa_put_le32(table + 8 * (j - from), ix->table[j].first);
		nelssa_put_le32(table + 8 * (j - from) + 4, ix->table[j].count);
	}
	return write_part(c, w, NELSSA_KV_PART_TABLE, from, ix->n_clusters - from, NULL, table, 0,
			  (size_t)NELSSA_KV_ENTRY_BYTES * (ix->n_clusters - from));
}

/*
 * Whether tokens [@start, @end) of @k and @v can be quantised: a bad value
 * found halfway would leave the first tile rewritten with scales the rest
 * never joins, so every row is looked at before any write.
 */
static int tiles_finite(struct nelssa_client *c, const struct kv_writes *w,
			const struct nelssa_cluster_index *ix, uint32_t start, uint32_t end,
			const void *k, const void *v)
{
	int ret = nc_rows_finite(c, &w->fmt, w->src, ix, start, end - start, k, w->base);

	return ret ? ret : nc_rows_finite(c, &w->fmt, w->src, ix, start, end - start, v, w->base);
}

/*
 * The writes of clusters [@from, n) of @ix into a tiled (8-bit) store:
 * tokens from the tile holding cluster @from's first onwards, quantised
 * in cluster order a chunk of whole tiles at a time (nc_quantise_tiles()),
 * then the table.  The tile an append starts in is quantised again with
 * its earlier tokens, so the store is what one offload of everything
 * would have made.
 */
static int write_tiles(struct nelssa_client *c, struct kv_writes *w,
		       const struct nelssa_cluster_index *ix, uint32_t from, const void *k,
		       const void *v)
{
	const uint32_t end = nc_index_tokens(ix), step = nc_tile_chunk(&w->fmt);
	const uint32_t start = nc_tile_start(ix, from);
	int ret;

	ret = tiles_finite(c, w, ix, start, end, k, v);
	for (uint32_t a = start; a < end && !ret; a += step) {
		const uint32_t n = end - a < step ? end - a : step;
		const size_t bytes = nelssa_kv_fmt_bytes(&w->fmt, n);
		uint8_t *kb = malloc(bytes), *vb = malloc(bytes);

		if (!kb || !vb) {
			free(kb);
			free(vb);
			return nc_fail(c, -ENOMEM, "out of memory");
		}
		ret = nc_quantise_tiles(c, &w->fmt, w->src, ix, a, n, k, w->base, kb);
		if (!ret)
			ret = nc_quantise_tiles(c, &w->fmt, w->src, ix, a, n, v, w->base, vb);
		if (ret) {
			free(kb);
			free(vb);
			return ret;
		}
		ret = write_part(c, w, NELSSA_KV_PART_K, a, n, NULL, kb, 0, bytes);
		if (!ret)
			ret = write_part(c, w, NELSSA_KV_PART_V, a, n, NULL, vb, 0, bytes);
		else
			free(vb);
	}
	return ret ? ret : write_table(c, w, ix, from);
}

/*
 * One block of tokens [@a, @a + @n), @n <= NELSSA_KV_QTILE, of the caller's
 * @rows into @out: gathered in cluster order, or quantised into a tile;
 * the rows of a partial block after the last are zeroes.
 */
static int put_block(struct nelssa_client *c, const struct kv_writes *w,
		     const struct nelssa_cluster_index *ix, uint32_t a, uint32_t n,
		     const void *rows, uint8_t *out)
{
	const size_t row = w->row;

	if (!row)
		return nc_quantise_tiles(c, &w->fmt, w->src, ix, a, n, rows, w->base, out);
	gather(w, ix, a, n, rows, out);
	memset(out + n * row, 0, (NELSSA_KV_QTILE - n) * row);
	return 0;
}

/*
 * The rows of a 16-bit adjacent store's first block before its boundary,
 * [@a, +@n): K rows, then V rows, each a part of their own (one run within
 * the block), so an append writes only its new tokens.
 */
static int write_head(struct nelssa_client *c, struct kv_writes *w,
		      const struct nelssa_cluster_index *ix, uint32_t a, uint32_t n,
		      const void *k, const void *v)
{
	const size_t bytes = (size_t)n * w->row;
	uint8_t *kb = malloc(bytes), *vb = malloc(bytes);
	int ret;

	if (!kb || !vb) {
		free(kb);
		free(vb);
		return nc_fail(c, -ENOMEM, "out of memory");
	}
	gather(w, ix, a, n, k, kb);
	gather(w, ix, a, n, v, vb);
	ret = write_part(c, w, NELSSA_KV_PART_K, a, n, NULL, kb, 0, bytes);
	if (!ret)
		ret = write_part(c, w, NELSSA_KV_PART_V, a, n, NULL, vb, 0, bytes);
	else
		free(vb);
	return ret;
}

/*
 * The writes of clusters [@from, n) of @ix into an adjacent store
 * (NELSSA_KV_ADJACENT), whose K and V alternate block by block: of a
 * 16-bit type, the new rows before the first block boundary as a K part
 * and a V part of their own (write_head()), then whole blocks, each chunk
 * built as it lies there -- K block, V block, K block... -- and written
 * as one run (NELSSA_KV_PART_KV), then the table.  An 8-bit type's tiles
 * are written whole from the one @from's first token lies in, quantised
 * again with its earlier tokens as in a packed store (write_tiles()).
 */
static int write_blocks(struct nelssa_client *c, struct kv_writes *w,
			const struct nelssa_cluster_index *ix, uint32_t from, const void *k,
			const void *v)
{
	const uint32_t end = nc_index_tokens(ix), step = nc_tile_chunk(&w->fmt);
	const uint64_t block = nelssa_kv_fmt_block(&w->fmt);
	uint32_t start = nc_write_start(ix, from, w->fmt.dtype), head;
	int ret = 0;

	if (!w->row)
		ret = tiles_finite(c, w, ix, start, end, k, v);
	head = (uint32_t)nelssa_kv_fmt_head(&w->fmt, start, end - start);
	if (head && !ret)
		ret = write_head(c, w, ix, start, head, k, v);
	start += head;
	for (uint32_t a = start; a < end && !ret; a += step) {
		const uint32_t n = end - a < step ? end - a : step;
		const size_t bytes = nelssa_kv_fmt_kv_bytes(&w->fmt, n);
		const int cached = bytes <= NC_BUF_BYTES;
		uint8_t *img = cached ? nc_buf_get(c) : malloc(bytes);

		if (!img)
			return nc_fail(c, -ENOMEM, "out of memory");
		for (uint32_t b = 0; b * NELSSA_KV_QTILE < n && !ret; b++) {
			const uint32_t t = a + b * NELSSA_KV_QTILE;
			const uint32_t m = end - t < NELSSA_KV_QTILE ? end - t : NELSSA_KV_QTILE;

			ret = put_block(c, w, ix, t, m, k, img + 2 * b * block);
			if (!ret)
				ret = put_block(c, w, ix, t, m, v, img + (2 * b + 1) * block);
		}
		if (ret) {
			if (cached)
				nc_buf_put(c, img);
			else
				free(img);
			return ret;
		}
		ret = write_part(c, w, NELSSA_KV_PART_KV, a, n, NULL, img, cached, bytes);
	}
	return ret ? ret : write_table(c, w, ix, from);
}

/*
 * Where the puts of @head's store go, in the daemon's address space, from
 * the key of its device and where REQ_OK put @q; -EPROTO when that lies
 * outside what the key reaches.
 */
static int put_targets(struct nelssa_client *c, const struct csession *s,
		       const struct crequest *q, uint16_t layer, uint16_t head, struct kv_writes *w)
{
	const struct nelssa_shape *sh = &s->cfg.shape;
	const uint32_t d = head % s->n_dev;
	const struct crkey *rk = &s->rk[d];
	uint64_t end;

	nelssa_kv_store_offsets(&w->fmt, q->store_tokens, q->store_clusters,
				(sh->kv_heads + s->n_dev - 1) / s->n_dev, layer, head / s->n_dev,
				&w->k_at, &w->v_at, &w->t_at);
	end = q->off[d] + w->t_at + (uint64_t)NELSSA_KV_ENTRY_BYTES * q->store_clusters;
	if (end > rk->bytes || end < q->off[d])
		return nc_fail(c, -EPROTO, "request %llu's store lies outside the memory its key "
			       "reaches", (unsigned long long)q->id);
	w->k_at += rk->base + q->off[d];
	w->v_at += rk->base + q->off[d];
	w->t_at += rk->base + q->off[d];
	w->rkey = rk->rkey;
	return 0;
}

int nc_place_offload(struct nelssa_client *c, struct csession *s, uint64_t request,
		     uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
		     uint32_t from, const void *k, const void *v, uint32_t base)
{
	const struct nelssa_shape *sh = &s->cfg.shape;
	struct nelssa_kv_hdr h = { .session = s->id, .token = s->token, .request = request,
				   .layer = layer, .head = head, .first_cluster = from };
	struct kv_writes w = {
		.rows = !s->rma, .h = h, .deadline = nelssa_now_ms() + c->timeout_ms,
		.fmt = { (enum nelssa_kv_dtype)sh->kv_dtype, ix->head_dim,
			 (enum nelssa_kv_layout)sh->kv_layout },
		.row = (size_t)ix->head_dim * nelssa_kv_elem_bytes((enum nelssa_kv_dtype)sh->kv_dtype),
		.src = nc_offload_dtype(sh),
		.base = base,
	};
	const int tiled = nelssa_kv_is_tiled(w.fmt.dtype);
	uint8_t hdr[NELSSA_KV_HDR_BYTES];
	ucs_status_t st;
	void *none = NULL;
	int ret;

	if (from == ix->n_clusters)
		return 0;
	h.first_token = nc_write_start(ix, from, w.fmt.dtype);
	h.nr_clusters = ix->n_clusters - from;
	if (tiled)
		h.nr_tokens = nc_index_tokens(ix) - h.first_token;
	else
		for (uint32_t j = from; j < ix->n_clusters; j++)
			h.nr_tokens += ix->table[j].count;
	if (s->rma) {
		const struct crequest *q = request_find(s, request);

		if (!q)
			return nc_fail(c, -ENOENT, "no request %llu in session %llu",
				       (unsigned long long)request, (unsigned long long)s->id);
		/* What the daemon would refuse a KV message for, refused before any put. */
		if (layer >= sh->layers || head >= sh->kv_heads ||
		    (uint64_t)h.first_token + h.nr_tokens > q->store_tokens ||
		    (uint64_t)from + h.nr_clusters > q->store_clusters)
			return nc_fail(c, -ERANGE, "the daemon refused KV rows: %s",
				       strerror(ERANGE));
		ret = put_targets(c, s, q, layer, head, &w);
		if (ret)
			return ret;
	}
	nc_acks_begin(c);
	if (w.fmt.layout == NELSSA_KV_ADJACENT)
		ret = write_blocks(c, &w, ix, from, k, v);
	else if (tiled)
		ret = write_tiles(c, &w, ix, from, k, v);
	else
		ret = write_rows(c, &w, ix, from, k, v);
	while (!ret && w.n)
		ret = write_retire(c, &w);
	if (ret) {
		writes_abandon(c, &w);
		return ret;
	}
	if (w.rows) {
		/* Every part has landed in the daemon's memory before the commit names it. */
		ret = nc_acks_end(c, w.deadline);
	} else {
		/* Every put has landed in the daemon's memory before the commit names it. */
		ret = nc_ep_flush(c, w.deadline, &st);
		if (!ret && st != UCS_OK)
			ret = nc_fail(c, nc_ucs_errno(st), "flushing RMA writes failed: %s",
				      ucs_status_string(st));
	}
	if (ret)
		return ret;
	h.cookie = ++c->next_cookie;
	h.part = w.rows ? NELSSA_KV_COMMIT_SENT : 0;
	nelssa_kv_hdr_put(hdr, &h);
	c->acks_pending++;
	ret = nc_am_send(c, NELSSA_AM_KV_COMMIT, hdr, sizeof(hdr), &none, 0, w.deadline);
	return ret ? ret : nc_acks_end(c, w.deadline);
}
