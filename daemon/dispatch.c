// SPDX-License-Identifier: MIT
/*
 * The Job Dispatcher and the Output Aggregator of a decode step.  A step
 * message carries one layer's work items (request, KV head, queries,
 * selected clusters) for a batch of requests.  Each item goes to the
 * device holding its head; every device gets one SPARSE_ATTN command with
 * all of its items, submitted at once through the Command API, and the
 * poller thread goes back to its event loop -- no thread waits for a
 * device.  As completions arrive the step's pending count drops; the last
 * one assembles the reply from the devices' output buffers in item order
 * and sends it on the endpoint the step came on (nelssad.h, struct nd_ep),
 * or drops it when that endpoint or its client is gone.
 * With head-wise placement every head's state is complete on its device,
 * so aggregation is a gather; with cluster-wise placement each device holds
 * part of every head, and the aggregator merges the N partial states by
 * their LSEs (numeric core).  Either way its cost depends on the batch,
 * not on the KV size.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/lse.h>

#include "nelssad.h"

_Static_assert(NELSSA_ATTN_BF16_DOTS == NPNM_ATTN_F_BF16_DOTS, "a session's attention flags");

/*
 * A send UCX holds until it is done with it (send_done()): the header --
 * and the data, unless it is the caller's, handed over in @data -- copied
 * behind @iov[], and for a reply sent from a session's staging (@s) the
 * IOV of it.
 */
struct send_ctx {
	struct nd_session *s;	/* a reply's session, held open (replies), or NULL */
	void *data;		/* handed over by nd_send()'s caller, or NULL */
	ucp_dt_iov_t iov[];
};

/*
 * Sends UCX still holds: touched on the poller thread only, and read by
 * nd_dataplane_stop() once the poller is gone (it drains them).
 */
static uint32_t sends_in_flight;

uint32_t nd_sends_in_flight(void)
{
	return sends_in_flight;
}

/* A context for @n_iov IOV entries and @bytes to copy behind them; NULL: no memory. */
static struct send_ctx *send_ctx_new(uint32_t n_iov, size_t bytes)
{
	struct send_ctx *x = malloc(sizeof(*x) + n_iov * sizeof(x->iov[0]) + bytes);

	if (x) {
		x->s = NULL;
		x->data = NULL;
	}
	return x;
}

static void send_ctx_free(struct send_ctx *x)
{
	free(x->data);
	free(x);
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
	struct send_ctx *x = user_data;

	(void)status;
	sends_in_flight--;
	if (x->s)
		x->s->replies--;
	send_ctx_free(x);
	ucp_request_free(request);
}

/*
 * Messages to a client over shared memory go eagerly, never by
 * rendezvous.  Such an endpoint has no error handling, hence no forced
 * close, and UCX 1.13 destroys it after a flushed close with a rendezvous
 * send still waiting for the client to fetch its data -- and aborts
 * (ucp_ep.c:437): a client that leaves a reply unfetched and closes its
 * connection took the daemon down (fuzz sequence reply-unfetched).  An
 * eager send is done once its fragments are in the client's queue; one
 * that does not fit there waits in UCX's pending queue, which a close
 * upon the client's death, or the worker's destruction, empties.
 */
static unsigned int send_flags(struct nelssad *nd, ucp_ep_h ep)
{
	const struct nd_ep *e = nd_ep_table_find(&nd->ep_table, ep);

	return e && e->peer->shm ? UCP_AM_SEND_FLAG_EAGER : 0;
}

/*
 * Hands @x's message to UCX: the header at @hdr, then @count items of
 * @dt at @data, with UCP_AM_SEND_FLAG_* @flags.  UCS_OK once UCX has it,
 * in flight or already sent, with @x then its; else the error, with @x
 * freed.
 */
static ucs_status_t send_post(ucp_ep_h ep, unsigned int id, struct send_ctx *x,
			      const void *hdr, size_t hdr_len, const void *data, size_t count,
			      ucp_datatype_t dt, unsigned int flags)
{
	ucp_request_param_t prm = {
		.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
				UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS,
		.flags = flags,
		.cb.send = send_done,
		.user_data = x,
		.datatype = dt,
	};
	ucs_status_ptr_t sp;

	sp = ucp_am_send_nbx(ep, id, hdr, hdr_len, data, count, &prm);
	if (UCS_PTR_IS_PTR(sp)) {
		sends_in_flight++;
		if (x->s)
			x->s->replies++;
		return UCS_OK;
	}
	send_ctx_free(x);
	return UCS_PTR_STATUS(sp);
}

void nd_send(struct nelssad *nd, ucp_ep_h ep, unsigned int id, const void *hdr, size_t hdr_len,
	     void *data, size_t len, int free_data)
{
	struct send_ctx *x;
	ucs_status_t st;
	uint8_t *copy;

	/* Header and data stay alive until UCX is done with them. */
	x = send_ctx_new(0, hdr_len + (free_data ? 0 : len));
	if (!x) {
		if (free_data)
			free(data);
		return;
	}
	copy = (uint8_t *)x->iov;
	memcpy(copy, hdr, hdr_len);
	if (free_data) {
		x->data = data;
	} else {
		if (len)
			memcpy(copy + hdr_len, data, len);
		data = copy + hdr_len;
	}
	st = send_post(ep, id, x, copy, hdr_len, data, len, ucp_dt_make_contig(1),
		       send_flags(nd, ep));
	if (st != UCS_OK)
		nd_log(nd, "send of message %u failed: %s", id, ucs_status_string(st));
}

void nd_step_reply_error(struct nelssad *nd, ucp_ep_h ep, uint64_t step, int status)
{
	struct nelssa_reply_hdr r = { .step = step, .status = status };
	uint8_t hdr[NELSSA_REPLY_HDR_BYTES];

	nelssa_reply_hdr_put(hdr, &r);
	nd_send(nd, ep, NELSSA_AM_STEP_REPLY, hdr, sizeof(hdr), NULL, 0, 0);
}

void nd_step_free(struct nd_step *st)
{
	if (!st)
		return;
	if (st->ep)
		st->ep->refs--;
	free(st->item_dev);
	free(st->item_slot);
	free(st->item_req);
	free(st);
}

int nd_step_uses(const struct nd_session *s, uint64_t id)
{
	for (uint32_t i = 0; s->step && i < s->step->nr_items; i++)
		if (s->step->item_req[i] == id)
			return 1;
	return 0;
}

/*
 * A head-wise step's reply, sent where the devices wrote it: an IOV of the
 * session's staging -- one entry per run of items with adjacent output
 * slots on one device -- behind the header, nothing gathered or copied.
 * The staging stays the session's until UCX is done (@s->replies holds the
 * session open); the next step may write it sooner only if its client
 * sent that step before it had this reply, and then spoils its own reply
 * alone.  0 once UCX has it (sent or on its way), or -ENOMEM: gather it
 * instead.
 */
static int send_iov_reply(struct nelssad *nd, ucp_ep_h ep, struct nd_step *st, const uint8_t *hdr,
			  uint64_t out_slot)
{
	const uint32_t max_iov = st->nr_items ? st->nr_items : 1;
	struct nd_session *s = st->s;
	struct send_ctx *x;
	ucs_status_t status;
	uint32_t n = 0;
	uint8_t *copy;

	x = send_ctx_new(max_iov, NELSSA_REPLY_HDR_BYTES);
	if (!x)
		return -ENOMEM;
	x->s = s;
	copy = (uint8_t *)&x->iov[max_iov];
	memcpy(copy, hdr, NELSSA_REPLY_HDR_BYTES);
	for (uint32_t i = 0; i < st->nr_items; i++) {
		const struct nd_sdev *sd = &s->dev[st->item_dev[i]];
		uint8_t *p = sd->stage_map + sd->out_off + st->item_slot[i] * out_slot;
		ucp_dt_iov_t *last = n ? &x->iov[n - 1] : NULL;

		if (last && (uint8_t *)last->buffer + last->length == p)
			last->length += out_slot;
		else
			x->iov[n++] = (ucp_dt_iov_t){ .buffer = p, .length = out_slot };
	}
	status = send_post(ep, NELSSA_AM_STEP_REPLY, x, copy, NELSSA_REPLY_HDR_BYTES, x->iov, n,
			   ucp_dt_make_iov(), send_flags(nd, ep));
	if (status != UCS_OK)
		nd_log(nd, "session %llu: the reply to step %llu failed: %s",
		       (unsigned long long)s->id, (unsigned long long)st->id,
		       ucs_status_string(status));
	return 0;
}

/*
 * Assembles @st's reply and sends it to @ep, or, with no @ep (its client
 * is gone: nd_ep_live()), drops it.  Poller thread, as everything here.
 */
static void step_finish(struct nelssad *nd, struct nd_step *st, ucp_ep_h ep)
{
	struct nd_session *s = st->s;
	const uint64_t o_bytes = 4ull * s->group * s->shape.head_dim, l_bytes = 4ull * s->group;
	const uint64_t out_slot = o_bytes + l_bytes;
	struct nelssa_reply_hdr r = { .step = st->id, .status = st->status,
				      .nr_items = st->nr_items };
	uint8_t hdr[NELSSA_REPLY_HDR_BYTES], *buf = NULL;
	uint64_t t_ready;

	if (!ep) {
		nd_log(nd, "session %llu: the reply to step %llu dropped: its client is gone",
		       (unsigned long long)s->id, (unsigned long long)st->id);
		s->step = NULL;
		nd_step_free(st);
		return;
	}
	r.t_recv = st->t_start - st->t_arrive;
	r.t_dispatch = st->t_submitted - st->t_start;
	r.t_device = st->t_done - st->t_submitted;
	t_ready = nd_now_ns();
	r.t_aggregate = t_ready - st->t_done;
	if (!r.status && s->placement == NELSSA_PLACE_HEADS) {
		nelssa_reply_hdr_put(hdr, &r);
		if (!send_iov_reply(nd, ep, st, hdr, out_slot))
			goto sent;
	}
	if (!r.status) {
		buf = malloc(st->nr_items * out_slot + 1);
		if (!buf)
			r.status = -ENOMEM;
	}
	if (r.status) {
		r.nr_items = 0;
	} else if (s->placement == NELSSA_PLACE_HEADS) {
		/* No memory for the IOV's descriptors: gathered, then. */
		for (uint32_t i = 0; i < st->nr_items; i++) {
			const struct nd_sdev *sd = &s->dev[st->item_dev[i]];

			memcpy(buf + i * out_slot,
			       sd->stage_map + sd->out_off + st->item_slot[i] * out_slot, out_slot);
		}
	} else {
		/* A head's clusters were split over the devices: merge their states. */
		const float *o_in[ND_MAX_DEVICES], *l_in[ND_MAX_DEVICES];

		for (uint32_t i = 0; i < st->nr_items; i++) {
			for (uint32_t d = 0; d < nd->n_dev; d++) {
				const uint8_t *p = s->dev[d].stage_map + s->dev[d].out_off + i * out_slot;

				o_in[d] = (const float *)p;
				l_in[d] = (const float *)(p + o_bytes);
			}
			nelssa_lse_merge_n((float *)(buf + i * out_slot),
					   (float *)(buf + i * out_slot + o_bytes), o_in, l_in,
					   nd->n_dev, s->group, s->shape.head_dim);
		}
		t_ready = nd_now_ns();
		r.t_aggregate = t_ready - st->t_done;
	}
	nelssa_reply_hdr_put(hdr, &r);
	nd_send(nd, ep, NELSSA_AM_STEP_REPLY, hdr, sizeof(hdr), buf,
		r.status ? 0 : st->nr_items * out_slot, buf != NULL);
sent:
	nd->stats.steps++;
	nd->stats.items += st->nr_items;
	s->steps++;
	s->items += st->nr_items;
	nd->stats.t_recv += r.t_recv;
	nd->stats.t_dispatch += r.t_dispatch;
	nd->stats.t_device += r.t_device;
	nd->stats.t_aggregate += r.t_aggregate;
	nd->stats.t_send += nd_now_ns() - t_ready;
	s->step = NULL;
	nd_step_free(st);
}

void nd_step_complete(struct nelssad *nd, const struct npnm_completion *c)
{
	struct nd_step *st = (struct nd_step *)(uintptr_t)c->user_tag;

	if (c->result && !st->status) {
		st->status = c->result < 0 ? c->result : -EIO;
		nd_log(nd, "session %llu step %llu: device status %s",
		       (unsigned long long)st->s->id, (unsigned long long)st->id,
		       nelssa_pnm_status_str(c->status));
	}
	if (--st->pending)
		return;
	st->t_done = nd_now_ns();
	if (nd->hold_tenant && st->s->tenant == nd->hold_tenant && !st->s->closing &&
	    nd_ep_live(st->ep)) {
		st->s->held = 1;	/* until nd_step_release() */
		return;
	}
	step_finish(nd, st, nd_ep_live(st->ep));
}

/* Test hook: finishes a step parked for NELSSAD_TEST_HOLD_TENANT. */
void nd_step_release(struct nelssad *nd, struct nd_session *s)
{
	s->held = 0;
	step_finish(nd, s->step, nd_ep_live(s->step->ep));
}

/* Fills one item's descriptor and inputs in device @dev's staging, @slot. */
static void stage(struct nelssad *nd, struct nd_session *s, struct nd_request *r, uint32_t layer,
		  uint32_t head, const uint8_t *q, const uint32_t *sel, uint32_t nr_sel, uint32_t dev,
		  uint32_t slot)
{
	const uint64_t q_bytes = 4ull * s->group * s->shape.head_dim;
	const uint64_t in_slot = q_bytes + 4ull * s->max_sel;
	const uint64_t out_slot = q_bytes + 4ull * s->group;
	const size_t cells = (size_t)s->shape.layers * s->shape.kv_heads;
	const uint32_t cell = layer * s->shape.kv_heads + head;
	struct nd_sdev *sd = &s->dev[dev];
	struct npnm_attn_item *ai = (struct npnm_attn_item *)sd->stage_map + slot;
	uint64_t k, v, t;

	nd_store_offsets(s, r, layer, nd_local_head(nd, s, head), &k, &v, &t);
	memcpy(sd->stage_map + sd->in_off + slot * in_slot, q, q_bytes);
	memcpy(sd->stage_map + sd->in_off + slot * in_slot + q_bytes, sel, 4ull * nr_sel);
	*ai = (struct npnm_attn_item){
		.k_off = r->off[dev] + k,
		.v_off = r->off[dev] + v,
		.table_off = r->off[dev] + t,
		.q_off = slot * in_slot,
		.sel_off = slot * in_slot + q_bytes,
		.o_off = slot * out_slot,
		.lse_off = slot * out_slot + q_bytes,
		.nr_tokens = r->nr_tokens[dev * cells + cell],
		.nr_clusters = r->nr_clusters[dev * cells + cell],
		.nr_sel = nr_sel,
	};
}

/*
 * Checks item @i and stages it: on its head's device (head-wise), or split
 * by cluster over every device at slot @i (cluster-wise).
 */
static int stage_item(struct nelssad *nd, struct nd_session *s, struct nd_step *st,
		      const struct nelssa_step_hdr *h, uint32_t i, const struct nelssa_step_item *it,
		      const uint8_t *q, const uint8_t *sel_bytes, uint32_t *scratch)
{
	struct nd_request *r = nd_request_find(s, it->request);
	uint32_t cell, d;

	if (!r || it->head >= s->shape.kv_heads)
		return -ENOENT;
	cell = (uint32_t)h->layer * s->shape.kv_heads + it->head;
	memcpy(scratch, sel_bytes, 4ull * it->nr_sel);
	for (uint32_t j = 0; j < it->nr_sel; j++)
		if (scratch[j] >= r->g_clusters[cell])
			return -ERANGE;
	if (s->placement == NELSSA_PLACE_HEADS) {
		d = nd_head_device(nd, it->head);
		if (st->dev_items[d] >= s->max_batch * s->local_heads)
			return -E2BIG;
		stage(nd, s, r, h->layer, it->head, q, scratch, it->nr_sel, d, st->dev_items[d]);
		st->item_dev[i] = d;
		st->item_slot[i] = st->dev_items[d]++;
		return 0;
	}
	/* Cluster c is local cluster c / N of device c mod N. */
	for (d = 0; d < nd->n_dev; d++) {
		uint32_t *mine = scratch + it->nr_sel, n = 0;

		for (uint32_t j = 0; j < it->nr_sel; j++)
			if (scratch[j] % nd->n_dev == d)
				mine[n++] = scratch[j] / nd->n_dev;
		stage(nd, s, r, h->layer, it->head, q, mine, n, d, i);
		st->dev_items[d]++;
	}
	st->item_slot[i] = i;
	return 0;
}

/*
 * Called from the step message's callback (or its rendezvous receive's),
 * @e the endpoint it came on, which is open there and then.  The step
 * holds @e until it is freed; its reply goes there, if still live, when
 * the last device is done.
 */
int nd_step_start(struct nelssad *nd, struct nd_session *s, struct nd_ep *e, const uint8_t *hdr,
		  size_t hdr_len, const uint8_t *data, size_t data_len, uint64_t t_arrive)
{
	const uint32_t max_items = s->max_batch * s->shape.kv_heads;
	const struct nelssa_kv_fmt fmt = nd_kv_fmt(s);
	struct nelssa_step_item *items = NULL;
	size_t *q_off = NULL, *sel_off = NULL;
	struct nelssa_step_hdr h = { 0 };
	struct nd_step *st = NULL;
	uint32_t submitted = 0, *scratch = NULL;
	int ret = -ENOMEM;

	items = malloc(sizeof(*items) * max_items);
	q_off = malloc(sizeof(*q_off) * max_items);
	sel_off = malloc(sizeof(*sel_off) * max_items);
	scratch = malloc(8ull * s->max_sel + 4);
	st = calloc(1, sizeof(*st));
	if (!items || !q_off || !sel_off || !scratch || !st)
		goto fail;
	ret = nelssa_step_parse(hdr, hdr_len, data, data_len, s->group, s->shape.head_dim,
				max_items, s->max_sel, &h, items, q_off, sel_off);
	if (ret)
		goto fail;
	ret = -EINVAL;
	if (h.layer >= s->shape.layers)
		goto fail;
	ret = -EBUSY;		/* one step per session at a time */
	if (s->step)
		goto fail;
	st->s = s;
	st->ep = e;
	e->refs++;
	st->id = h.step;
	st->nr_items = h.nr_items;
	st->t_arrive = t_arrive;
	st->t_start = nd_now_ns();
	st->item_dev = calloc(h.nr_items + 1, sizeof(uint32_t));
	st->item_slot = calloc(h.nr_items + 1, sizeof(uint32_t));
	st->item_req = calloc(h.nr_items + 1, sizeof(uint64_t));
	ret = -ENOMEM;
	if (!st->item_dev || !st->item_slot || !st->item_req)
		goto fail;
	for (uint32_t i = 0; i < h.nr_items; i++) {
		st->item_req[i] = items[i].request;
		ret = stage_item(nd, s, st, &h, i, &items[i], data + q_off[i], data + sel_off[i],
				 scratch);
		if (ret)
			goto fail;
	}
	s->step = st;
	for (uint32_t d = 0; d < nd->n_dev; d++) {
		struct nd_sdev *sd = &s->dev[d];
		struct npnm_cmd cmd;
		int n;

		if (!st->dev_items[d])
			continue;
		memset(&cmd, 0, sizeof(cmd));
		cmd.user_tag = (uint64_t)(uintptr_t)st;
		if (nd->cfg.nop_kernel) {
			/* The serving path alone: everything but the attention itself. */
			cmd.opcode = NPNM_OP_NOP;
			goto submit;
		}
		cmd.opcode = NPNM_OP_SPARSE_ATTN;
		cmd.op[NPNM_ATTN_ITEMS] = (struct npnm_operand){ sd->stage, 0, 0,
			st->dev_items[d] * sizeof(struct npnm_attn_item) };
		cmd.op[NPNM_ATTN_KV] = (struct npnm_operand){ sd->arena, 0, 0, sd->arena_bytes };
		cmd.op[NPNM_ATTN_IN] = (struct npnm_operand){ sd->stage, 0, sd->in_off,
			sd->out_off - sd->in_off };
		cmd.op[NPNM_ATTN_OUT] = (struct npnm_operand){ sd->stage, 0, sd->out_off,
			sd->stage_bytes - sd->out_off };
		cmd.p.attn = (struct npnm_sparse_attn_params){
			.nr_items = st->dev_items[d],
			.head_dim = s->shape.head_dim,
			.group = (uint8_t)s->group,
			.kv_dtype = s->shape.kv_dtype,
			.flags = s->shape.attn_flags,	/* NELSSA_ATTN_* are NPNM_ATTN_F_* */
			.kv_stride = nelssa_kv_fmt_stride(&fmt),
		};
submit:
		n = nelssa_pnm_submit(nd->dev[d].pnm, &cmd, 1, NULL);
		if (n != 1) {
			st->status = n < 0 ? n : -EIO;
			nd_log(nd, "%s: submit failed: %s", nd->dev[d].name, nelssa_pnm_strerror());
			break;
		}
		submitted++;
	}
	st->t_submitted = nd_now_ns();
	st->pending = submitted;
	free(items);
	free(q_off);
	free(sel_off);
	free(scratch);
	if (!submitted) {	/* nothing to wait for: no items, or the first submit failed */
		st->t_done = st->t_submitted;
		step_finish(nd, st, e->ep);	/* still in the message's callback */
	}
	return 0;
fail:
	free(items);
	free(q_off);
	free(sel_off);
	free(scratch);
	if (st)
		nd_step_free(st);
	nd_step_reply_error(nd, e->ep, h.step, ret);
	return ret;
}
