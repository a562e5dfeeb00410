// SPDX-License-Identifier: MIT
/*
 * The KV Partitioner.  Head-wise placement (DESIGN §3.5, the default): KV
 * head h of every layer lives on device h mod N, so each device serves the
 * same cluster lists for its own heads and the load splits evenly whatever
 * the sparsity.  Cluster-wise placement: cluster c of every head lives on
 * device c mod N (as local cluster c / N), so every device serves every
 * head, a head's selection splits across the devices, and the aggregator
 * merges the partial states -- the choice when there are fewer heads than
 * devices.  Each session owns one arena per device, sized from its
 * capacity when it is created, so running out of device memory is an
 * error at session creation, not in the middle of a decode; requests take
 * blocks of the same size at the same offset in every arena.  Inside a
 * block, the store of (layer, local head) holds K rows, V rows and the
 * cluster table, each request's cluster-contiguous layout as the client
 * sent it.  Ingest goes through the Memory API, never the compute queues.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/attention.h>
#include <nelssa/kv_store.h>

#include "nelssad.h"

#define ALIGN 64u
#define ARENA_SLACK (1u << 20)

static uint64_t align_up(uint64_t v)
{
	return (v + ALIGN - 1) & ~(uint64_t)(ALIGN - 1);
}

static double mib(uint64_t bytes)
{
	return (double)bytes / (1 << 20);
}

uint32_t nd_head_device(const struct nelssad *nd, uint32_t head)
{
	return head % nd->n_dev;
}

uint32_t nd_local_head(const struct nelssad *nd, const struct nd_session *s, uint32_t head)
{
	return s->placement == NELSSA_PLACE_HEADS ? head / nd->n_dev : head;
}

/* The session's KV format (the codec refused a type it does not know). */
struct nelssa_kv_fmt nd_kv_fmt(const struct nd_session *s)
{
	return (struct nelssa_kv_fmt){ (enum nelssa_kv_dtype)s->shape.kv_dtype, s->shape.head_dim,
				       (enum nelssa_kv_layout)s->shape.kv_layout };
}

/* K array, V array, then the cluster table (<nelssa/kv_store.h>). */
static uint64_t store_bytes(const struct nd_session *s, uint32_t t, uint32_t c)
{
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);

	return nelssa_kv_store_bytes(&f, t, c);
}

/*
 * A device's share of a head holding @t tokens in @c clusters: all of it
 * head-wise; cluster-wise exactly ceil(c / N) clusters, and their tokens,
 * which round-robin spreads to about t / N -- room for a quarter more, and
 * a store that overflows anyway refuses the rows (-ENOSPC).
 */
static void store_dims(const struct nelssad *nd, const struct nd_session *s, uint32_t t, uint32_t c,
		       uint32_t *st, uint32_t *sc)
{
	uint64_t share;

	if (s->placement == NELSSA_PLACE_HEADS) {
		*st = t;
		*sc = c;
		return;
	}
	share = (uint64_t)t / nd->n_dev + t / 4 + 256;
	*st = share < t ? (uint32_t)share : t;
	*sc = (c + nd->n_dev - 1) / nd->n_dev;
}

void nd_store_offsets(const struct nd_session *s, const struct nd_request *r, uint32_t layer,
		      uint32_t local_head, uint64_t *k, uint64_t *v, uint64_t *table)
{
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);

	nelssa_kv_store_offsets(&f, r->store_tokens, r->store_clusters, s->local_heads, layer,
				local_head, k, v, table);
}

/*
 * Undoes register_dev(): UCX lets go of the memory before it is unmapped.
 * The context is thread-safe (nelssa_link_context()), so either thread may.
 */
static void unregister_dev(struct nelssad *nd, struct nd_sdev *sd, struct nd_device *dev)
{
	if (sd->rkey)
		ucp_rkey_buffer_release(sd->rkey);
	if (sd->arena_memh)
		ucp_mem_unmap(nd->ucp, sd->arena_memh);
	if (sd->arena_map)
		nelssa_pnm_mem_unmap(dev->pnm, sd->arena_map);
	sd->rkey = NULL;
	sd->rkey_len = 0;
	sd->arena_memh = NULL;
	sd->arena_map = NULL;
}

/* Frees what session_alloc() allocated on device @d; the reservation stays. */
static void free_dev(struct nelssad *nd, struct nd_session *s, uint32_t d)
{
	struct nd_sdev *sd = &s->dev[d];
	struct nd_device *dev = &nd->dev[d];

	unregister_dev(nd, sd, dev);
	if (sd->stage_map)
		nelssa_pnm_mem_unmap(dev->pnm, sd->stage_map);
	if (sd->stage)
		nelssa_pnm_mem_free(dev->pnm, sd->stage);
	if (sd->arena)
		nelssa_pnm_mem_free(dev->pnm, sd->arena);
	if (sd->alloc.free)
		nelssa_extent_fini(&sd->alloc);
	sd->stage_map = NULL;
	sd->stage = 0;
	sd->arena = 0;
	memset(&sd->alloc, 0, sizeof(sd->alloc));
}

/* Gives device @d's reservation back.  Poller thread. */
static void unreserve_dev(struct nelssad *nd, struct nd_session *s, uint32_t d)
{
	struct nd_sdev *sd = &s->dev[d];

	if (sd->reserved)
		nd->dev[d].reserved -= sd->arena_bytes + sd->stage_bytes;
	sd->reserved = 0;
}

static void release_dev(struct nelssad *nd, struct nd_session *s, uint32_t d)
{
	free_dev(nd, s, d);
	unreserve_dev(nd, s, d);
	memset(&s->dev[d], 0, sizeof(s->dev[d]));
}

/* A session's layout on each of its devices. */
struct session_size {
	uint64_t arena;		/* KV store of every request */
	uint64_t stage;		/* work items, then their inputs, then outputs */
	uint64_t items;		/* work items a step may carry */
	uint64_t in_slot;	/* bytes of one item's input */
};

/*
 * What @s will reserve on each device, from its shape alone -- nothing is
 * allocated -- or a refusal its devices cannot serve.  Sets the session's
 * local head count.
 */
static int session_size(struct nelssad *nd, struct nd_session *s, struct session_size *z,
			char *why, size_t why_len)
{
	const uint32_t g = s->group, d = s->shape.head_dim;
	uint64_t out_slot;
	uint32_t st, sc;

	if (s->capacity_tokens > UINT32_MAX / 2) {
		snprintf(why, why_len, "capacity of %llu tokens is beyond what a device can hold",
			 (unsigned long long)s->capacity_tokens);
		return -ENOSPC;
	}
	for (uint32_t i = 0; i < nd->n_dev; i++) {
		const struct nd_device *dev = &nd->dev[i];

		if (d > dev->info.max_head_dim || g > dev->info.max_group) {
			snprintf(why, why_len, "%s supports head_dim <= %u and group <= %u",
				 dev->name, dev->info.max_head_dim, dev->info.max_group);
			return -EINVAL;
		}
	}
	s->local_heads = s->placement == NELSSA_PLACE_HEADS ?
		(s->shape.kv_heads + nd->n_dev - 1) / nd->n_dev : s->shape.kv_heads;
	z->items = (uint64_t)s->max_batch * s->local_heads;
	z->in_slot = 4ull * g * d + 4ull * s->max_sel;
	out_slot = 4ull * g * d + 4ull * g;
	/* Tables: room for a cluster per 4 tokens, far more than k-means makes. */
	store_dims(nd, s, (uint32_t)s->capacity_tokens, (uint32_t)(s->capacity_tokens / 4 + 64), &st,
		   &sc);
	z->arena = (uint64_t)s->shape.layers * s->local_heads * store_bytes(s, st, sc) + ARENA_SLACK;
	z->stage = align_up(z->items * sizeof(struct npnm_attn_item)) +
		   align_up(z->items * z->in_slot) + align_up(z->items * out_slot);
	return 0;
}

int nd_session_reserve(struct nelssad *nd, struct nd_session *s, uint64_t held, char *why,
		       size_t why_len)
{
	const uint64_t cap = nd->memory_per_conn;
	struct session_size z;
	int ret = session_size(nd, s, &z, why, why_len);
	const uint64_t arena = z.arena, stage = z.stage;
	uint64_t bytes;

	if (ret)
		return ret;
	for (uint32_t i = 0; i < nd->n_dev; i++) {
		const struct nd_device *dev = &nd->dev[i];
		const uint64_t free_bytes = dev->info.mem_size - dev->reserved;

		if (arena + stage > free_bytes) {
			snprintf(why, why_len,
				 "%s lacks room: the session needs %.1f MiB per device, %.1f MiB are free",
				 dev->name, mib(arena + stage), mib(free_bytes));
			return -ENOSPC;
		}
	}
	/* Fits every device (so no product overflows): now the connection's cap. */
	bytes = (arena + stage) * nd->n_dev;
	if (bytes > cap || held > cap - bytes) {
		snprintf(why, why_len, "max-memory-per-conn: this session (%.1f MiB) would take the "
			 "connection's device memory to %.1f MiB, over %.1f MiB", mib(bytes),
			 mib(held) + mib(bytes), mib(cap));
		return -EDQUOT;
	}
	for (uint32_t i = 0; i < nd->n_dev; i++) {
		struct nd_sdev *sd = &s->dev[i];

		sd->arena_bytes = arena;
		sd->stage_bytes = stage;
		sd->in_off = align_up(z.items * sizeof(struct npnm_attn_item));
		sd->out_off = sd->in_off + align_up(z.items * z.in_slot);
		sd->reserved = 1;
		nd->dev[i].reserved += arena + stage;
	}
	return 0;
}

void nd_session_unreserve(struct nelssad *nd, struct nd_session *s)
{
	for (uint32_t i = 0; i < nd->n_dev; i++)
		unreserve_dev(nd, s, i);
}

/*
 * Registers the session's memory on device @d with UCX (Documentation/
 * daemon.rst, "Zero-copy ingest"): the region mapped into the daemon and
 * ucp_mem_map() of that mapping, so that UCX can receive KV_ROWS straight
 * into it; with @pack also its packed remote key for RKEY, so that the
 * client can write KV rows there itself.  0, or why not in @why -- a
 * mapping UCX cannot register (a card's PFN-mapped window cannot be
 * pinned for RDMA) is the usual reason.
 */
static int register_dev(struct nelssad *nd, struct nd_session *s, uint32_t d, int pack,
			char *why, size_t why_len)
{
	struct nd_sdev *sd = &s->dev[d];
	struct nd_device *dev = &nd->dev[d];
	ucp_mem_map_params_t mp = { 0 };
	uint64_t size = 0;
	ucs_status_t st;
	void *map;
	int ret;

	ret = nelssa_pnm_mem_map(dev->pnm, sd->arena, &map, &size);
	if (ret) {
		snprintf(why, why_len, "%s: cannot map its memory: %s", dev->name,
			 nelssa_pnm_strerror());
		return ret;
	}
	sd->arena_map = map;
	mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
	mp.address = map;
	/*
	 * The whole mapping, rounded as the region is: a device-dax mapping
	 * cannot be split off-alignment (2 MiB), and the verbs library's
	 * madvise(MADV_DONTFORK) of part of it would have to.
	 */
	mp.length = size;
	st = ucp_mem_map(nd->ucp, &mp, &sd->arena_memh);
	if (st == UCS_OK && pack)
		st = ucp_rkey_pack(nd->ucp, sd->arena_memh, &sd->rkey, &sd->rkey_len);
	else if (st != UCS_OK)
		sd->arena_memh = NULL;
	if (st == UCS_OK && pack && (!sd->rkey_len || sd->rkey_len > NELSSA_PROTO_MAX_RKEY))
		st = UCS_ERR_EXCEEDS_LIMIT;
	if (st != UCS_OK) {
		snprintf(why, why_len, "%s: UCX cannot register its memory: %s%s%s", dev->name,
			 ucs_status_string(st), sd->pin_why[0] ? "; not pinnable: " : "",
			 sd->pin_why);
		unregister_dev(nd, sd, dev);
		return -EOPNOTSUPP;
	}
	return 0;
}

/*
 * Without the client's puts, a head-wise session's KV_ROWS can still be
 * received by UCX straight into place: each device's memory mapped and
 * registered, with no key handed out.  A device where that fails takes
 * them through a staging buffer and a copy; the log says which and why.
 * Returns how it went, for the log.
 */
static const char *session_map_for_rows(struct nelssad *nd, struct nd_session *s)
{
	char reason[NELSSA_PROTO_ERR_LEN] = "";
	uint32_t direct = 0;

	if (s->placement != NELSSA_PLACE_HEADS)
		return "KV is staged and copied (cluster-wise placement)";
	for (uint32_t i = 0; i < nd->n_dev; i++) {
		if (!register_dev(nd, s, i, 0, reason, sizeof(reason))) {
			direct++;
			continue;
		}
		nd_log(nd, "KV rows of this session on %s are staged and copied: %s",
		       nd->dev[i].name, reason);
	}
	return direct == nd->n_dev ? "KV rows are received straight into device memory"
	       : direct ? "KV rows are received straight into device memory on some devices"
	       : "KV is staged and copied";
}

/*
 * Zero-copy ingest for @s where it can be had: head-wise placement (a
 * client computes where each row goes; cluster-wise placement needs the
 * daemon to deal the clusters out) and every device's memory registered.
 * Otherwise the session takes KV messages only (KV_ROWS received in place
 * where session_map_for_rows() can), and the daemon logs why -- or, with
 * --zero-copy=require, refuses the session.
 */
static int session_register(struct nelssad *nd, struct nd_session *s, char *why, size_t why_len)
{
	char reason[NELSSA_PROTO_ERR_LEN] = "";
	int ret = 0;

	if (nd->cfg.zero_copy == ND_ZERO_COPY_OFF)
		return 0;
	if (!nd->ucp)
		snprintf(reason, sizeof(reason), "UCX is not set up");
	else if (!nd->rma_ok)	/* rma_context() */
		snprintf(reason, sizeof(reason), "no RDMA transport, and emulated RMA is not "
			 "allowed (--emulated-rma)");
	else if (s->placement != NELSSA_PLACE_HEADS)
		snprintf(reason, sizeof(reason), "cluster-wise placement deals clusters out "
			 "on the daemon");
	for (uint32_t i = 0; i < nd->n_dev && !reason[0] && !ret; i++)
		ret = register_dev(nd, s, i, 1, reason, sizeof(reason));
	if (!reason[0]) {
		s->rma = 1;
		return 0;
	}
	for (uint32_t i = 0; i < nd->n_dev; i++)
		unregister_dev(nd, &s->dev[i], &nd->dev[i]);
	if (nd->cfg.zero_copy == ND_ZERO_COPY_REQUIRE) {
		snprintf(why, why_len, "zero-copy ingest is required (--zero-copy=require) "
			 "and impossible: %s", reason);
		return -EOPNOTSUPP;
	}
	nd_log(nd, "zero-copy ingest off for this session (%s); %s", reason,
	       session_map_for_rows(nd, s));
	return 0;
}

/*
 * The arena of device @d.  A session that may take zero-copy ingest wants
 * it pinnable, so that UCX can register it for RDMA: on a card that is its
 * device-dax carve-out.  A card without one (or with its carve-out full,
 * or another process's) gives ordinary memory, and session_register()
 * then says why the session is staged.  The library zeroes what it
 * allocates: a store never shows another's rows.
 */
static int arena_alloc(struct nelssad *nd, struct nd_session *s, uint32_t d)
{
	struct nd_sdev *sd = &s->dev[d];
	struct nelssa_pnm *pnm = nd->dev[d].pnm;

	sd->pin_why[0] = 0;
	if (nd->cfg.zero_copy != ND_ZERO_COPY_OFF && nd->rma_ok && s->placement == NELSSA_PLACE_HEADS) {
		if (!nelssa_pnm_mem_alloc_flags(pnm, sd->arena_bytes, NELSSA_PNM_MEM_PINNABLE,
						&sd->arena, NULL))
			return 0;
		snprintf(sd->pin_why, sizeof(sd->pin_why), "%s", nelssa_pnm_strerror());
	}
	return nelssa_pnm_mem_alloc(pnm, sd->arena_bytes, &sd->arena, NULL);
}

int nd_session_alloc(struct nelssad *nd, struct nd_session *s, char *why, size_t why_len)
{
	int ret = 0;

	for (uint32_t i = 0; i < nd->n_dev && !ret; i++) {
		struct nd_device *dev = &nd->dev[i];
		struct nd_sdev *sd = &s->dev[i];
		void *map;

		ret = arena_alloc(nd, s, i);
		if (!ret)
			ret = nelssa_extent_init(&sd->alloc, sd->arena_bytes, ALIGN);
		if (!ret)
			ret = nelssa_pnm_mem_alloc(dev->pnm, sd->stage_bytes, &sd->stage, NULL);
		if (!ret)
			ret = nelssa_pnm_mem_map(dev->pnm, sd->stage, &map, NULL);
		if (!ret)
			sd->stage_map = map;
		else
			snprintf(why, why_len, "%s: cannot allocate %.1f MiB: %s", dev->name,
				 mib(sd->arena_bytes + sd->stage_bytes), nelssa_pnm_strerror());
	}
	if (!ret)
		ret = session_register(nd, s, why, why_len);
	if (ret)
		for (uint32_t i = 0; i < nd->n_dev; i++)
			free_dev(nd, s, i);
	return ret;
}

/*
 * A request slot owns its counters while it is used; a free slot owns
 * nothing and holds no pointers, so that whoever frees it -- a refused
 * REQ_ALLOC, REQ_FREE, or the session's end -- frees each array once.
 */
static void request_clear(struct nd_request *r)
{
	free(r->nr_tokens);
	free(r->nr_clusters);
	free(r->g_clusters);
	memset(r, 0, sizeof(*r));
}

void nd_session_free(struct nelssad *nd, struct nd_session *s)
{
	for (uint32_t i = 0; i < nd->n_dev; i++)
		release_dev(nd, s, i);
	for (uint32_t i = 0; i < s->n_req; i++)
		request_clear(&s->req[i]);
	free(s->req);
	free(s);
}

struct nd_request *nd_request_find(struct nd_session *s, uint64_t id)
{
	for (uint32_t i = 0; i < s->n_req; i++)
		if (s->req[i].used && s->req[i].id == id)
			return &s->req[i];
	return NULL;
}

int nd_request_alloc(struct nelssad *nd, struct nd_session *s, uint64_t id, uint32_t max_tokens,
		     uint32_t max_clusters, char *why, size_t why_len)
{
	const size_t cells = (size_t)s->shape.layers * s->shape.kv_heads;
	struct nd_request *r = NULL;
	uint32_t d;

	if (nd_request_find(s, id)) {
		snprintf(why, why_len, "request %llu already exists", (unsigned long long)id);
		return -EEXIST;
	}
	for (uint32_t i = 0; i < s->n_req && !r; i++)
		if (!s->req[i].used)
			r = &s->req[i];
	if (!r) {
		if (s->n_req == s->cap_req) {
			uint32_t cap = s->cap_req ? 2 * s->cap_req : 8;
			struct nd_request *n = realloc(s->req, sizeof(*n) * cap);

			if (!n) {
				snprintf(why, why_len, "out of memory");
				return -ENOMEM;
			}
			s->req = n;
			s->cap_req = cap;
		}
		r = &s->req[s->n_req++];
	}
	memset(r, 0, sizeof(*r));
	r->id = id;
	r->max_tokens = max_tokens;
	r->max_clusters = max_clusters;
	store_dims(nd, s, max_tokens, max_clusters, &r->store_tokens, &r->store_clusters);
	r->bytes = (uint64_t)s->shape.layers * s->local_heads *
		   store_bytes(s, r->store_tokens, r->store_clusters);
	r->nr_tokens = calloc(cells * nd->n_dev, sizeof(uint32_t));
	r->nr_clusters = calloc(cells * nd->n_dev, sizeof(uint32_t));
	r->g_clusters = calloc(cells, sizeof(uint32_t));
	if (!r->nr_tokens || !r->nr_clusters || !r->g_clusters) {
		request_clear(r);
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	for (d = 0; d < nd->n_dev; d++)
		if (nelssa_extent_get(&s->dev[d].alloc, r->bytes, &r->off[d]))
			break;
	if (d < nd->n_dev) {
		for (uint32_t j = 0; j < d; j++)
			nelssa_extent_put(&s->dev[j].alloc, r->off[j], r->bytes);
		snprintf(why, why_len,
			 "session capacity exhausted: request %llu needs %.1f MiB per device",
			 (unsigned long long)id, mib(r->bytes));
		request_clear(r);
		return -ENOSPC;
	}
	r->used = 1;
	return 0;
}

int nd_request_free(struct nelssad *nd, struct nd_session *s, uint64_t id)
{
	struct nd_request *r = nd_request_find(s, id);

	if (!r)
		return -ENOENT;
	for (uint32_t d = 0; d < nd->n_dev; d++)
		nelssa_extent_put(&s->dev[d].alloc, r->off[d], r->bytes);
	request_clear(r);
	return 0;
}

/*
 * Writes @n tokens' rows (or tiles) of a K or V array, packed at @src, into
 * the array at @at of device @d's arena from token @t: one write in a
 * packed store, a block at a time in an adjacent one, where a block's K
 * and V alternate (<nelssa/kv_store.h>).
 */
static int write_array(struct nelssad *nd, struct nd_session *s, uint32_t d, uint64_t at,
		       uint64_t t, const uint8_t *src, uint64_t n)
{
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);

	/* The codec checked it; a tile's offset rounds, so check where it is used too. */
	if (!nelssa_kv_fmt_first_ok(&f, t))
		return -EINVAL;
	while (n) {
		uint64_t piece = n, bytes;
		int ret;

		if (f.layout == NELSSA_KV_ADJACENT && NELSSA_KV_QTILE - t % NELSSA_KV_QTILE < n)
			piece = NELSSA_KV_QTILE - t % NELSSA_KV_QTILE;
		bytes = nelssa_kv_fmt_bytes(&f, piece);
		ret = nelssa_pnm_mem_write(nd->dev[d].pnm, s->dev[d].arena,
					   at + nelssa_kv_fmt_row_off(&f, t), src, bytes);
		if (ret)
			return ret;
		src += bytes;
		t += piece;
		n -= piece;
	}
	return 0;
}

/*
 * Cluster-wise ingest: each cluster of the message goes to device c mod N,
 * appended to that device's store as local cluster c / N.  Clusters must
 * come in order, each once (prefill from 0, then decode-time appends).
 */
static int ingest_clusters(struct nelssad *nd, struct nd_session *s, struct nd_request *r,
			   const struct nelssa_kv_hdr *h, const uint8_t *data, uint32_t cell)
{
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);
	const uint64_t row = (uint64_t)f.head_dim * nelssa_kv_elem_bytes(f.dtype);
	const uint8_t *table = data + 2 * h->nr_tokens * row;
	const size_t cells = (size_t)s->shape.layers * s->shape.kv_heads;

	if (!row)
		return -EOPNOTSUPP;	/* 8-bit tiles are not split: control.c refuses them */
	if (h->first_cluster != r->g_clusters[cell])
		return -EINVAL;
	for (uint32_t j = 0; j < h->nr_clusters; j++) {
		const uint32_t c = h->first_cluster + j, d = c % nd->n_dev;
		uint32_t *nt = &r->nr_tokens[d * cells + cell], *nc = &r->nr_clusters[d * cells + cell];
		struct npnm_cluster e;
		uint64_t k, v, t, from;
		int ret;

		memcpy(&e, table + 8ull * j, sizeof(e));
		if (e.first < h->first_token || (uint64_t)e.first + e.count >
		    (uint64_t)h->first_token + h->nr_tokens)
			return -ERANGE;
		if ((uint64_t)*nt + e.count > r->store_tokens || *nc >= r->store_clusters)
			return -ENOSPC;
		nd_store_offsets(s, r, h->layer, h->head, &k, &v, &t);
		from = e.first - h->first_token;
		ret = write_array(nd, s, d, r->off[d] + k, *nt, data + from * row, e.count);
		if (!ret)
			ret = write_array(nd, s, d, r->off[d] + v, *nt,
					  data + (h->nr_tokens + from) * row, e.count);
		e.first = *nt;
		if (!ret)
			ret = nelssa_pnm_mem_write(nd->dev[d].pnm, s->dev[d].arena,
						   r->off[d] + t + 8ull * *nc, &e, sizeof(e));
		if (ret)
			return ret;
		*nt += e.count;
		(*nc)++;
		r->g_clusters[cell]++;
	}
	return 0;
}

/*
 * Whether @h names a request of @s and stays inside its room: what a KV
 * message is checked against before its data is taken (a rendezvous one
 * before its data is even fetched).
 */
int nd_kv_check(struct nd_session *s, const struct nelssa_kv_hdr *h)
{
	const struct nd_request *r = nd_request_find(s, h->request);

	if (!r)
		return -ENOENT;
	if (h->layer >= s->shape.layers || h->head >= s->shape.kv_heads ||
	    (uint64_t)h->first_token + h->nr_tokens > r->max_tokens ||
	    (uint64_t)h->first_cluster + h->nr_clusters > r->max_clusters)
		return -ERANGE;
	return 0;
}

/* Rows and entries of @h are in place on device @d: the stores' counts follow. */
static void note_rows(struct nelssad *nd, struct nd_session *s, struct nd_request *r,
		      const struct nelssa_kv_hdr *h, uint32_t d, uint32_t cell)
{
	const size_t cells = (size_t)s->shape.layers * s->shape.kv_heads;
	uint32_t *nt = &r->nr_tokens[d * cells + cell], *nc = &r->nr_clusters[d * cells + cell];

	(void)nd;
	if (h->first_token + h->nr_tokens > *nt)
		*nt = h->first_token + h->nr_tokens;
	if (h->first_cluster + h->nr_clusters > *nc)
		*nc = h->first_cluster + h->nr_clusters;
	r->g_clusters[cell] = *nc;
}

int nd_kv_ingest(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		 const uint8_t *data)
{
	struct nd_request *r = nd_request_find(s, h->request);
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);
	const uint64_t rows = nelssa_kv_fmt_bytes(&f, h->nr_tokens);
	uint64_t k, v, t;
	uint32_t cell, d;
	int ret = nd_kv_check(s, h);

	if (ret)
		return ret;
	cell = (uint32_t)h->layer * s->shape.kv_heads + h->head;
	if (s->placement == NELSSA_PLACE_CLUSTERS)
		return ingest_clusters(nd, s, r, h, data, cell);
	/*
	 * Head-wise: the K rows and the V rows where <nelssa/kv_store.h> puts
	 * them, the table entries (struct npnm_cluster, little-endian like
	 * the wire) where a KV_ROWS part of them would go.
	 */
	d = nd_head_device(nd, h->head);
	nd_store_offsets(s, r, h->layer, nd_local_head(nd, s, h->head), &k, &v, &t);
	ret = write_array(nd, s, d, r->off[d] + k, h->first_token, data, h->nr_tokens);
	if (!ret)
		ret = write_array(nd, s, d, r->off[d] + v, h->first_token, data + rows,
				  h->nr_tokens);
	if (!ret && h->nr_clusters) {
		struct nelssa_kv_hdr p = *h;

		p.part = NELSSA_KV_PART_TABLE;
		ret = nd_kv_rows_write(nd, s, &p, data + 2 * rows);
	}
	if (ret)
		return ret;
	note_rows(nd, s, r, h, d, cell);
	return 0;
}

int nd_kv_rows_place(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		     uint32_t *dev, uint64_t *off, uint64_t *len)
{
	const struct nelssa_kv_fmt f = nd_kv_fmt(s);
	const struct nd_request *r;
	uint64_t k, v, t;
	uint32_t d;
	int ret = nd_kv_check(s, h);

	if (ret)
		return ret;
	if (s->placement != NELSSA_PLACE_HEADS)
		return -EOPNOTSUPP;
	/* The codec checked it; an offset that is not a row's rounds, so check it here too. */
	if (!nelssa_kv_part_fits(&f, h->part, h->first_token, h->nr_tokens))
		return -EINVAL;
	r = nd_request_find(s, h->request);
	d = nd_head_device(nd, h->head);
	nd_store_offsets(s, r, h->layer, nd_local_head(nd, s, h->head), &k, &v, &t);
	if (h->part == NELSSA_KV_PART_TABLE) {
		*off = r->off[d] + t + 8ull * h->first_cluster;
		*len = 8ull * h->nr_clusters;
	} else if (h->part == NELSSA_KV_PART_KV) {
		/* K block b, then V block b: the run starts at K's row. */
		*off = r->off[d] + k + nelssa_kv_fmt_row_off(&f, h->first_token);
		*len = nelssa_kv_fmt_kv_bytes(&f, h->nr_tokens);
	} else {
		*off = r->off[d] + (h->part == NELSSA_KV_PART_K ? k : v) +
		       nelssa_kv_fmt_row_off(&f, h->first_token);
		*len = nelssa_kv_fmt_bytes(&f, h->nr_tokens);
	}
	*dev = d;
	return 0;
}

void *nd_kv_rows_target(struct nd_session *s, uint32_t d, uint64_t off, ucp_mem_h *memh)
{
	const struct nd_sdev *sd = &s->dev[d];

	if (!sd->arena_map || !sd->arena_memh)
		return NULL;
	*memh = sd->arena_memh;
	return (uint8_t *)sd->arena_map + off;
}

int nd_kv_rows_write(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		     const uint8_t *data)
{
	uint64_t off, len;
	uint32_t d;
	int ret = nd_kv_rows_place(nd, s, h, &d, &off, &len);

	return ret ? ret : nelssa_pnm_mem_write(nd->dev[d].pnm, s->dev[d].arena, off, data, len);
}

/*
 * The client wrote @h's rows and entries where <nelssa/kv_store.h> puts
 * them, in its session's own memory -- by RMA puts it flushed, or by
 * KV_ROWS messages the daemon acknowledged -- before sending the commit:
 * the same ranges as a KV message are checked, and the counts follow as
 * if the daemon had written them.  What the rows hold is the client's
 * affair as with a KV message (a row it never wrote reads as the zeroes
 * the session's memory started with, or as its own earlier rows); the
 * device checks each table entry against its store when it reads it.
 */
int nd_kv_commit(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h)
{
	int ret = nd_kv_check(s, h);

	if (ret)
		return ret;
	/* Puts need a key, which only a session with RMA gave out. */
	if (s->placement != NELSSA_PLACE_HEADS || (h->part != NELSSA_KV_COMMIT_SENT && !s->rma))
		return -EOPNOTSUPP;
	note_rows(nd, s, nd_request_find(s, h->request), h, nd_head_device(nd, h->head),
		  (uint32_t)h->layer * s->shape.kv_heads + h->head);
	return 0;
}
