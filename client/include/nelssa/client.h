/* SPDX-License-Identifier: MIT */
/*
 * The GPU node's client of a NELSSA node (nelssad): connect, create a
 * session for a model shape, offload each request's clustered KV, append
 * decode-time clusters, and run decode steps -- per layer, queries and
 * selected cluster ids out, partial outputs and LSEs back -- which the GPU
 * node then merges with its local window (nelssa_final_merge()).  Control
 * over TCP, data over UCX (Documentation/wire-protocol.rst).
 *
 * Every call returns 0 or a negative errno and never waits longer than the
 * connection's timeout (connect, control requests and replies, data sends,
 * acknowledgements, step replies; nelssa_client_close() up to 2 s more per
 * step of the endpoint's close): a daemon that is stopped or wedged shows
 * as -ETIMEDOUT, a dead one as -ECONNRESET.  After a timeout the
 * connection stays usable (but for an offload that closes the data path:
 * nelssa_client_offload()): a late control reply is skipped by the next
 * call, a late step reply or KV acknowledgement is dropped, and a send
 * UCX could not cancel (1.13 cancels none) keeps its buffers until it
 * completes or the connection closes.  nelssa_client_error() has the
 * words.  One connection is not thread-safe: use one per thread.
 */
#ifndef NELSSA_CLIENT_H
#define NELSSA_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include <nelssa/shape.h>
#include <nelssa/sparse.h>

#ifdef __cplusplus
extern "C" {
#endif

struct nelssa_client;

/**
 * struct nelssa_client_opts - how to reach a daemon.
 * @host: control address (name or IP).
 * @port: control port.
 * @timeout_ms: most any call waits (0: 30 s).
 * @name: this node's name for the daemon's logs (may be NULL).
 */
struct nelssa_client_opts {
	const char *host;
	uint16_t port;
	uint32_t timeout_ms;
	const char *name;
};

/**
 * nelssa_client_connect() - connect to a daemon (HELLO, UCX endpoint).
 * @o: where and how.
 * @out: receives the connection (also on most failures, for
 *	nelssa_client_error(); NULL only when out of memory).
 *
 * Return: 0; -ECONNREFUSED, -ETIMEDOUT, -EPROTONOSUPPORT (no common
 * version), -EIO (UCX could not reach the daemon), -ENOMEM.
 */
int nelssa_client_connect(const struct nelssa_client_opts *o, struct nelssa_client **out);

/**
 * nelssa_client_close() - close a connection.
 * @c: connection; NULL is fine.
 *
 * The daemon reclaims the connection's sessions.  Besides the
 * connection's timeout, it may wait up to 2 s for each step of the UCX
 * endpoint's close (flush, then close).
 */
void nelssa_client_close(struct nelssa_client *c);

/**
 * nelssa_client_error() - words about the last failure of a connection.
 * @c: connection; NULL (what a connect that ran out of memory leaves) is
 *	fine.
 *
 * Return: the message of the connection's last failure, "" if none;
 * "out of memory" for a NULL @c.
 */
const char *nelssa_client_error(const struct nelssa_client *c);

/**
 * nelssa_client_set_timeout() - set the most any later call waits.
 * @c: connection.
 * @timeout_ms: the timeout in ms (0: 30 s).
 */
void nelssa_client_set_timeout(struct nelssa_client *c, uint32_t timeout_ms);

/**
 * nelssa_client_devices() - how many PNM devices the daemon serves with.
 * @c: connection.
 *
 * Return: the device count from the daemon's HELLO_OK.
 */
uint32_t nelssa_client_devices(const struct nelssa_client *c);

/**
 * struct nelssa_session_cfg - a session's shape and limits.
 * @shape: the model.
 * @placement: enum nelssa_placement.
 * @max_batch: requests in one decode step.
 * @max_sel: clusters one (request, head) may select in a step.
 * @capacity_tokens: tokens of all requests at once.
 * @tenant: tenant id (DESIGN §3.8).
 */
struct nelssa_session_cfg {
	struct nelssa_shape shape;
	uint8_t placement;
	uint32_t max_batch, max_sel;
	uint64_t capacity_tokens;
	uint32_t tenant;
};

/**
 * nelssa_client_session() - create a session.
 * @c: connection.
 * @cfg: shape and limits.
 * @session: receives its id.
 *
 * Return: 0, or the daemon's refusal: -ENOSPC (the devices lack room),
 * -EINVAL (shape, or an attention flag or KV layout no version defines),
 * -EBUSY (session limit), -EOPNOTSUPP (a type or an attention flag a
 * device does not take, 8-bit KV with cluster-wise placement, adjacent K
 * and V blocks on a device without NPNM_CAP_KV_STRIDE).
 */
int nelssa_client_session(struct nelssa_client *c, const struct nelssa_session_cfg *cfg,
			  uint64_t *session);

/**
 * nelssa_client_session_close() - end a session, freeing its device memory.
 * @c: connection.
 * @session: a session created on this connection.
 *
 * The connection forgets the session before it asks the daemon, so it is
 * gone here even when the daemon's answer is an error.
 *
 * Return: 0, -ENOENT (no such session on this connection), or the
 * daemon's refusal, -ETIMEDOUT, -ECONNRESET.
 */
int nelssa_client_session_close(struct nelssa_client *c, uint64_t session);

/**
 * nelssa_client_request() - reserve device room for a request's KV.
 * @c: connection.
 * @session: its session.
 * @request: an id of the caller's choosing, unique in the session.
 * @max_tokens: tokens its store may hold (prefill + appends).
 * @max_clusters: clusters its tables may hold.
 *
 * Return: 0, -ENOSPC (session capacity exhausted), -EEXIST.
 */
int nelssa_client_request(struct nelssa_client *c, uint64_t session, uint64_t request,
			  uint32_t max_tokens, uint32_t max_clusters);

/**
 * nelssa_client_request_free() - release a request's room.
 * @c: connection.
 * @session: its session.
 * @request: the id given to nelssa_client_request().
 *
 * Return: 0, or the daemon's refusal (such as -ENOENT), -ETIMEDOUT,
 * -ECONNRESET.
 */
int nelssa_client_request_free(struct nelssa_client *c, uint64_t session, uint64_t request);

/**
 * nelssa_client_offload() - send clusters [from, ix->n_clusters) of one
 *	(request, layer, KV head) with their K and V rows.
 * @c: connection.
 * @session: session.
 * @request: request.
 * @layer: layer.
 * @head: KV head.
 * @ix: the head's cluster index (nelssa_kmeans_build()/_append()).
 * @from: first cluster to send: 0 for the prefill, the old cluster count
 *	after nelssa_kmeans_append() (decode-time chunks).
 * @k: K rows of the index's tokens in token order ([ix->n_tokens][head_dim],
 *	the shape's KV dtype; bf16 for a session of an 8-bit type).
 * @v: V rows, likewise.
 *
 * Rows are gathered into cluster-contiguous order and sent in chunks of
 * about 256 KiB; returns once the daemon acknowledged every chunk, or at
 * the connection's timeout.  After -ETIMEDOUT or -ECONNRESET some chunks
 * may have been stored and others not: free the request, or send the
 * clusters again (head-wise placement overwrites; cluster-wise needs a
 * fresh request).
 *
 * A session of an 8-bit KV type (NELSSA_KV_FP8_E4M3, NELSSA_KV_INT8) is
 * quantised here, in cluster order, per 16-token tile and 32 channels
 * (nelssa_kv_quantize()); tiles are written whole, so an append starts at
 * the tile its first new token falls in and quantises that tile again
 * with its earlier tokens (from @k and @v, which hold them all): the
 * store ends exactly as one offload of everything would leave it -- and
 * that tile's earlier tokens change value as it does.  So, unlike with the
 * 16-bit types, do not append to a request while a step that reads it is
 * in flight (nelssa_client_step_send() not yet polled): it may read the
 * tile half rewritten.  A value that is not finite fails the call
 * (-EINVAL) before anything is written.
 *
 * A session of adjacent K and V blocks (shape.kv_layout NELSSA_KV_ADJACENT)
 * is written in whole 16-token blocks, K block then V block, but for an
 * append's rows up to its first block boundary, which go as K and V rows
 * apart: only new tokens are written (an 8-bit type's tiles as above).
 *
 * In a packed zero-copy session, a chunk whose rows already lie in cluster order
 * in @k and @v (consecutive tokens in @ix->perm: an engine that ordered
 * them itself) is put into the daemon's memory straight from there, with
 * no copy on this side.  @k and @v are the caller's again when the call
 * returns, whatever it returns: should it fail while such puts are still
 * in flight, which UCX cannot cancel one by one, the connection's data
 * path is closed to end them, and every later offload and step on the
 * connection fails with -ECONNRESET (control calls still work; connect
 * again).  So is it when the session sends its KV as KV_ROWS parts (no
 * RMA: Documentation/daemon.rst, "Zero-copy ingest") and the call fails
 * with parts in flight: they may still land in their place later, where
 * no later offload of the session is to meet them.
 *
 * Return: 0, or the daemon's refusal (-ERANGE beyond the request's room,
 * -ENOENT no such request, -EPROTONOSUPPORT the daemon requires RDMA and
 * this client reaches it over another transport), -ETIMEDOUT (not all
 * acknowledged in the timeout), -ECONNRESET.
 */
int nelssa_client_offload(struct nelssa_client *c, uint64_t session, uint64_t request,
			  uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
			  uint32_t from, const void *k, const void *v);

/**
 * nelssa_client_offload_rows() - nelssa_client_offload() from the rows of
 *	the index's later tokens only.
 * @c: connection.
 * @session: session.
 * @request: request.
 * @layer: layer.
 * @head: KV head.
 * @ix: the head's cluster index.
 * @from: first cluster to send.
 * @k: K rows of tokens [@base, ix->n_tokens) in token order
 *	([ix->n_tokens - @base][head_dim]).
 * @v: V rows, likewise.
 * @base: the token @k and @v start at.
 *
 * For a GPU node that lets go of the rows it has offloaded: a 16-bit
 * session reads the rows of the tokens of clusters [@from, n) only -- an
 * append's new tokens, so @base may be the first of them -- and an 8-bit
 * session those and the earlier members of the tile the first of them
 * falls in, which it quantises again (members of older clusters, any
 * older token: @base is then the lowest of them).  A row the call would read below @base (or
 * a token past the index) fails it with -EINVAL before anything is sent.
 * nelssa_client_offload() is this call with @base 0.
 *
 * Return: as nelssa_client_offload().
 */
int nelssa_client_offload_rows(struct nelssa_client *c, uint64_t session, uint64_t request,
			       uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
			       uint32_t from, const void *k, const void *v, uint32_t base);

/**
 * struct nelssa_step_in - one (request, KV head) of a decode step.
 * @request: request.
 * @head: KV head.
 * @q: fp32 [group][head_dim] queries.
 * @sel: selected cluster ids (numbered as in the index sent).
 * @nr_sel: how many.
 */
struct nelssa_step_in {
	uint64_t request;
	uint16_t head;
	const float *q;
	const uint32_t *sel;
	uint32_t nr_sel;
};

/**
 * struct nelssa_step_times - where a step's time went, in ns.
 * @rtt: from send to reply, on the client.
 * @recv: the daemon's receive (rendezvous data) time.
 * @dispatch: staging and submitting the device commands.
 * @device: from the last submit to the last completion.
 * @aggregate: gathering the outputs into the reply.
 */
struct nelssa_step_times {
	uint64_t rtt, recv, dispatch, device, aggregate;
};

/**
 * nelssa_client_step() - one layer of a decode step on the PNM devices.
 * @c: connection.
 * @session: session.
 * @layer: layer.
 * @in: the work items.
 * @n: how many: 1 to max_batch * kv_heads.  A step of no items is refused
 *	with -EINVAL before anything is sent (a layer with no PNM requests
 *	has nothing to step).
 * @o: receives fp32 [@n][group][head_dim].
 * @lse: receives fp32 [@n][group].
 * @t: receives the time breakdown; may be NULL.
 *
 * Return: 0, -EINVAL (no items, or @in, @o or @lse NULL), or the daemon's
 * refusal (-ENOENT unknown request, -ERANGE a
 * cluster id beyond the stored ones, -E2BIG too many, -EBUSY a step of the
 * session still running, -EPROTONOSUPPORT not on RDMA to a daemon that
 * requires it), -EIO (a device failed), -ETIMEDOUT, -ECONNRESET.
 */
int nelssa_client_step(struct nelssa_client *c, uint64_t session, uint16_t layer,
		       const struct nelssa_step_in *in, uint32_t n, float *o, float *lse,
		       struct nelssa_step_times *t);

/*
 * Split batch (DESIGN §3.7): the GPU node sends the PNM requests'
 * attention, runs everything else, and collects the PNM results when it
 * needs them; a request whose result is not back yet rejoins the next
 * batch.  At most 16 steps in flight per connection (one per session:
 * the daemon runs one step of a session at a time).
 */
struct nelssa_step_pending;

/**
 * nelssa_client_step_send() - send one layer's step and return at once.
 * @c: connection.
 * @session: session.
 * @layer: layer.
 * @in: the work items (copied: may be reused at once).
 * @n: how many: at least one, as for nelssa_client_step().
 * @o: where nelssa_client_step_poll() puts the outputs, fp32 [@n][group][head_dim].
 * @lse: where it puts the LSEs, fp32 [@n][group].
 * @out: receives the handle to poll.
 *
 * Return: 0, -EINVAL (no items), -ENOENT, -EBUSY (too many in flight),
 * -ENOMEM, or a send error (-ETIMEDOUT, -ECONNRESET, -EIO).
 */
int nelssa_client_step_send(struct nelssa_client *c, uint64_t session, uint16_t layer,
			    const struct nelssa_step_in *in, uint32_t n, float *o, float *lse,
			    struct nelssa_step_pending **out);

/**
 * nelssa_client_step_poll() - collect a step sent with nelssa_client_step_send().
 * @c: connection.
 * @p: the handle.
 * @timeout_ms: how long to wait (0: just look).
 * @t: receives the time breakdown on success; may be NULL.
 *
 * Return: 0 (the outputs are in place and the handle is spent), -EAGAIN
 * (not back yet: poll again), or an error as nelssa_client_step() (the
 * handle is spent).
 */
int nelssa_client_step_poll(struct nelssa_client *c, struct nelssa_step_pending *p,
			    uint32_t timeout_ms, struct nelssa_step_times *t);

/**
 * nelssa_client_step_cancel() - give up on a step in flight.
 * @c: connection.
 * @p: the handle from nelssa_client_step_send(); NULL, or a handle of
 *	another connection, is ignored.
 *
 * The step's reply, if it comes, is dropped and the handle is spent.
 */
void nelssa_client_step_cancel(struct nelssa_client *c, struct nelssa_step_pending *p);

/**
 * struct nelssa_daemon_stats - the daemon's counters since it started.
 * @sessions: sessions open now, of every client.
 * @devices: PNM devices the daemon serves.
 * @steps: decode steps served.
 * @items: work items (request x layer x KV head) in those steps.
 * @kv_bytes: KV bytes ingested (offload and append).
 * @recv_ns: time receiving step messages, summed over steps.
 * @dispatch_ns: time building and submitting device commands, likewise.
 * @device_ns: time the devices took, likewise.
 * @aggregate_ns: time merging the devices' partial states, likewise.
 * @send_ns: time sending the replies, likewise.
 *
 * The library's own type: what the wire carries is the codec's business.
 */
struct nelssa_daemon_stats {
	uint32_t sessions, devices;
	uint64_t steps, items, kv_bytes;
	uint64_t recv_ns, dispatch_ns, device_ns, aggregate_ns, send_ns;
};

/**
 * nelssa_client_stats() - the daemon's counters.
 * @c: connection.
 * @st: receives them; untouched on error.
 *
 * Return: 0 or a negative errno.
 */
int nelssa_client_stats(struct nelssa_client *c, struct nelssa_daemon_stats *st);

/* nelssa_client_set_zero_copy() modes. */
#define NELSSA_ZERO_COPY_OFF	0
#define NELSSA_ZERO_COPY_AUTO	1
#define NELSSA_ZERO_COPY_FORCE	2

/**
 * nelssa_client_set_zero_copy() - choose how later sessions send their KV.
 * @c: connection.
 * @enable: NELSSA_ZERO_COPY_AUTO (the default): where the daemon registered
 *	a session's device memory with UCX and this connection's endpoint has
 *	a native RMA lane (RDMA), nelssa_client_offload() writes the rows
 *	there itself (RMA puts, then a small commit) and the daemon copies
 *	nothing; NELSSA_ZERO_COPY_FORCE: so even where UCX emulates RMA with
 *	active messages (TCP, shared memory in UCX 1.13, Documentation/
 *	daemon.rst); NELSSA_ZERO_COPY_OFF: never by RMA.  Without RMA the KV
 *	goes in messages: on a head-wise session a part each (K rows, V rows,
 *	table entries), which UCX receives straight into device memory where
 *	the daemon could register it, else the daemon copies it in.
 *
 * Sessions created before the call keep their way.
 */
void nelssa_client_set_zero_copy(struct nelssa_client *c, int mode);

/**
 * nelssa_client_zero_copy() - whether a session's KV goes by RMA.
 * @c: connection.
 * @session: a session of @c.
 *
 * A daemon that cannot register a session's memory (a card whose window
 * cannot be pinned, cluster-wise placement, --zero-copy=off) says so in
 * its log, and the session's KV goes in messages.
 *
 * Return: 1 (zero-copy), 0 (KV messages), or -ENOENT.
 */
int nelssa_client_zero_copy(struct nelssa_client *c, uint64_t session);

/**
 * struct nelssa_ingest_stats - how the KV a daemon took in got there.
 * @kv_bytes: KV bytes ingested (offload and append), as in
 *	&struct nelssa_daemon_stats.
 * @rma_bytes: of those, bytes clients wrote into device memory themselves.
 * @copied_bytes: of those, bytes the daemon copied in from messages.
 * @recv_bytes: of those, bytes UCX received straight into device memory
 *	(KV rows sent in messages, a part each: no copy by the daemon).
 * @reserved: zero; room for counters a later minor release adds.
 */
struct nelssa_ingest_stats {
	uint64_t kv_bytes, rma_bytes, copied_bytes;
	uint64_t recv_bytes;
	uint64_t reserved[4];
};

/**
 * nelssa_client_ingest_stats() - the daemon's ingest counters.
 * @c: connection.
 * @session: one of @c's sessions, or 0: the connection's sessions, open
 *	and closed (the whole daemon's on an admin connection, as STATS).
 * @st: receives them; untouched on error.
 *
 * Return: 0 or a negative errno (-ENOENT: no such session of @c).
 */
int nelssa_client_ingest_stats(struct nelssa_client *c, uint64_t session,
			       struct nelssa_ingest_stats *st);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_CLIENT_H */
