/* SPDX-License-Identifier: MIT */
/*
 * The UCX data path between nelssad and its clients, set up one way by
 * both (Documentation/daemon.rst, "The data path"): UCX's client/server
 * flow.  The daemon listens with a ucp_listener on a socket address; a
 * client, once HELLO_OK has given it the listener's port and a key of its
 * control connection's own, makes a worker whose UCX client id is that key
 * and connects to the port; the daemon makes its endpoint from the
 * connection request only when the key names a connection of its, so the
 * endpoint belongs to that connection from the start.
 *
 * Why not worker addresses, as before: with them, a client killed during
 * the wire-up over TCP aborts the daemon in UCX 1.13 (ucp_request.c:684,
 * "got REP message"); the client/server flow has no such message, and
 * TCP_CONN_NB=y on the daemon removes the one abort of its own seen in
 * tens of thousands of kills (tcp_ep.c:478).
 */
#ifndef NELSSA_LINK_H
#define NELSSA_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <ucp/api/ucp.h>

#ifdef __cplusplus
extern "C" {
#endif

/* nelssa_link_context() flags. */
#define NELSSA_LINK_SERVER	1u
#define NELSSA_LINK_RMA		2u

/*
 * A UCX context for the data path: active messages and wake-ups, and RMA
 * with NELSSA_LINK_RMA (zero-copy KV ingest).  NELSSA_LINK_SERVER: the
 * daemon's, thread-safe for memory registration from its control thread,
 * with UCX's TCP transport told to connect without blocking
 * (TCP_CONN_NB=y) unless UCX_TCP_CONN_NB says otherwise.
 *
 * RMA on the side that is written to is a trust decision: where no
 * transport does RMA in hardware (TCP, shared memory without CMA), UCX
 * 1.13 emulates it with active messages whose handlers write and read
 * whatever address the peer names, unchecked (rma_sw.c) -- any peer can
 * then read and write all of this process's memory.
 */
ucs_status_t nelssa_link_context(unsigned int flags, ucp_context_h *out);

/* The transports @ctx can use, as "tcp posix cma" (at most @len bytes). */
void nelssa_link_transports(ucp_context_h ctx, char *buf, size_t len);

/* Whether @transports (nelssa_link_transports()) hold one for messages over shared memory. */
int nelssa_link_has_shm(const char *transports);

/* Whether @transports hold an RDMA one (nelssa_link_tl_is_rdma()). */
int nelssa_link_has_rdma(const char *transports);

/* Whether @transports hold one that does RMA in hardware (RC, DC; not UD). */
int nelssa_link_has_rdma_rma(const char *transports);

/*
 * Whether @transports hold one that UCX's client/server flow can set a
 * connection up over: tcp, or an RDMA one (shared memory alone cannot).
 */
int nelssa_link_can_connect(const char *transports);

/* A single-threaded worker; @client_id: the key connections carry (0: none). */
ucs_status_t nelssa_link_worker(ucp_context_h ctx, uint64_t client_id, ucp_worker_h *out);

/*
 * A bare UCX context with @features (UCP_FEATURE_*) and nothing else set,
 * for the benchmarks' baselines: what plain UCX does between two
 * processes, without the data path's settings.
 */
ucs_status_t nelssa_link_context_features(uint64_t features, ucp_context_h *out);

/*
 * An endpoint to the worker whose address is @addr (ucp_worker_get_address()),
 * without error handling: the benchmarks' baselines, between processes
 * that trust each other and die together.
 */
ucs_status_t nelssa_link_connect_worker(ucp_worker_h w, const ucp_address_t *addr, ucp_ep_h *ep);

/*
 * The numeric address of @ss, in @a (pointing into @ss) and its length in
 * bytes, the one rule the daemon and the library read peers' addresses by:
 * 4 for AF_INET and for a v4-mapped AF_INET6 one (::ffff:a.b.c.d is the
 * IPv4 peer a.b.c.d, as a dual-stack listener sees it), 16 for any other
 * AF_INET6; 0 for another family, @a then untouched.
 */
size_t nelssa_link_addr(const struct sockaddr_storage *ss, const uint8_t **a);

/* Whether the far end of the connected socket @fd is on this host. */
int nelssa_link_is_local(int fd);

/*
 * An endpoint to the daemon's data path: the address the control socket
 * @ctl_fd is connected to, at @port, carrying the worker's client id;
 * peer error handling, reported to @cb (may be NULL), unless @shm (HELLO_OK granted NELSSA_HELLO_SHM:
 * then none, as the daemon's end has none).  The connection completes in
 * the background (ucp_ep_flush_nbx() waits for it).
 */
ucs_status_t nelssa_link_connect(ucp_worker_h w, int ctl_fd, uint16_t port, int shm,
				 ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep);

/* nelssa_link_connect_sockaddr()'s @flags. */
#define NELSSA_LINK_SEND_ID	1	/* the connection carries the worker's client id */
#define NELSSA_LINK_PEER_ERRORS	2	/* peer error handling */

/*
 * nelssa_link_connect() to the socket address @sa (@len bytes) as
 * @flags say, for tests that connect the way a careless or hostile client
 * would; @cb (may be NULL) is set whatever the error handling.
 */
ucs_status_t nelssa_link_connect_sockaddr(ucp_worker_h w, const struct sockaddr *sa,
					  socklen_t len, unsigned int flags,
					  ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep);

/*
 * The daemon's endpoint from the connection request @req, errors reported
 * to @cb; peer error handling unless @shm (as the client's end then has
 * none: nelssa_link_connect()).  It fails when the client died meanwhile;
 * UCX frees @req then.
 */
ucs_status_t nelssa_link_accept(ucp_worker_h w, ucp_conn_request_h req, int shm,
				ucp_err_handler_cb_t cb, void *arg, ucp_ep_h *ep);

/*
 * Whether the UCX transport named @tl ("rc_verbs", "tcp", ...) moves data
 * by RDMA: the rc_, dc_ and ud_ families (verbs and mlx5).  TCP, shared
 * memory (posix, sysv, cma, xpmem, knem) and self are not.  The one rule
 * --require-rdma judges an endpoint's lanes by, whichever way they were
 * found (nelssa_link_ep_rdma_only()).
 */
int nelssa_link_tl_is_rdma(const char *tl);

/*
 * Whether all @n transports @tls are RDMA ones (and there is one at
 * least); if not, the first that is not, or "unknown" for none, goes to
 * @bad (@len bytes, may be 0).
 */
int nelssa_link_tls_rdma_only(const char *const *tls, unsigned int n, char *bad, size_t len);

/* The most lanes an endpoint description is read for (UCX 1.13 has 8 at most). */
#define NELSSA_LINK_MAX_LANES 16

/*
 * What UCX's description of an endpoint (ucp_ep_print_info()) says about
 * its lanes:
 *
 *   lane[1]:  0:rc_verbs/rxe0:1.0 md[0]  -> md[0]/ib/sysdev[255] rma_bw#0 am am_bw#0 wireup
 *   ...
 *    put[1]: 0..<short>..124..<bcopy>..8192..<zcopy>..(inf)
 *
 * @tl: the transport of each lane that carries data -- active messages
 * or rendezvous ("am", "am_bw#N", "rma_bw#N"), not wire-up or keep-alive
 * only -- in lane order;
 * @native_rma: whether a lane of UCX's RMA API (one with a "put[N]:"
 * line; UCX prints no use word for it) runs an RDMA transport, which
 * writes memory registered with it.  Shared-memory RMA lanes (sysv,
 * posix) reach only memory their own md allocated, never a registered
 * buffer such as the daemon's, so puts there are emulated all the same.
 */
struct nelssa_link_lanes {
	unsigned int n;
	int native_rma;
	char tl[NELSSA_LINK_MAX_LANES][24];
};

/*
 * Reads @text (ucp_ep_print_info()'s output) into @l; returns the number
 * of lane lines it recognised, data-carrying or not: 0 means a format
 * this parser does not know.
 */
unsigned int nelssa_link_lanes_parse(const char *text, struct nelssa_link_lanes *l);

/*
 * Whether every lane that carries @ep's data runs on an RDMA transport
 * (nelssa_link_tl_is_rdma()): a daemon with RDMA can still reach a client
 * that has none over TCP or shared memory, and --require-rdma refuses
 * that too.  The first offending transport goes to @bad (@len bytes).
 * From ucp_ep_query()'s transports where UCX has them (1.14 and later,
 * NELSSA_HAVE_UCP_EP_TRANSPORTS), else from UCX's description of the
 * endpoint (nelssa_link_lanes_parse()).
 */
int nelssa_link_ep_rdma_only(ucp_ep_h ep, char *bad, size_t len);

/*
 * Whether @ep has a lane for UCX's RMA API (ucp_put_nbx()) that writes
 * registered remote memory itself: RDMA.  Without one UCX 1.13 emulates
 * puts with active messages the target's worker copies in (its endpoint
 * configuration then says "rma_am": TCP; or "rma" on sysv/posix lanes
 * that cannot reach registered memory: shared memory), on the target's
 * poller.  From UCX's description of the endpoint (the "put[N]:" lines
 * and lane N's transport), whatever the version: ucp_ep_query() names
 * transports, not what each lane is used for.
 */
int nelssa_link_ep_native_rma(ucp_ep_h ep);

#ifdef __cplusplus
}
#endif

#endif /* NELSSA_LINK_H */
