/* SPDX-License-Identifier: MIT */
/*
 * nelssad (NelssaHost): serves decode-time sparse attention to GPU nodes
 * from PNM devices.  Documentation/daemon.rst describes it; this header is
 * shared by its parts:
 *
 *   main.c      options, config file, devices, signals, start and stop
 *   conn.c      control connections: accept, buffers, timeouts, the poll loop
 *   control.c   the control messages: hello, sessions, KV allocation, stats
 *   jobs.c      the queues between the control thread and the poller
 *   fdlimit.c   file descriptors: the limit, a reserve, accept(2) for UCX
 *   dataplane.c the UCX worker and its poller thread: KV ingest, steps
 *   ep_table.c  the poller's endpoints by UCX handle
 *   partition.c the KV Partitioner: device arenas, request stores, ingest
 *   dispatch.c  the Job Dispatcher and Output Aggregator of a decode step
 *   registry.c  the node's record in the cluster's etcd registry (its own thread)
 *
 * Threads: the control thread (main) owns the connections: sockets,
 * buffers, timers.  The poller thread owns everything else -- the UCX
 * worker, the peers, the sessions and their requests, the counters -- and
 * runs every step and every KV ingest.  No lock is shared between them:
 * the control thread hands each control request to the poller as a job
 * (jobs.c: a queue and an eventfd each way), the poller answers it in
 * the same turn that serves steps, and the control thread queues the
 * answer on the connection.  The one slow part of a control request, a
 * session's allocation, zeroing and UCX registration (nd_session_alloc()),
 * runs on the control thread between two jobs, on memory the poller has
 * reserved and no one else can name yet.  A session closes on the poller
 * thread (reap_sessions()), never while a step of it is in flight, and so
 * does every UCX endpoint the daemon holds (tend_peers()).
 */
#ifndef NELSSAD_H
#define NELSSAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <ucp/api/ucp.h>

#include <nelssa/pnm.h>
#include <nelssa/proto.h>
#include <nelssa/util.h>

#define ND_MAX_DEVICES 64
#define ND_NAME "nelssad"
#define ND_STAGE_SLOTS 8
#define ND_STAGE_BYTES (1u << 20)	/* more than a client's 256 KiB KV chunk */
/*
 * Rendezvous receives in flight (started, data not yet all here): at most
 * this many per session and in all, and at most this many bytes in all;
 * beyond, a message is refused with -EBUSY (larger than the bytes alone:
 * -EMSGSIZE).  A client keeps 8 KV chunks and a step or so in flight.
 */
#define ND_RNDV_PER_SESSION 16u
#define ND_RNDV_MAX 256u
#define ND_RNDV_BYTES (1ull << 30)

/* --zero-copy: whether clients write KV into registered device memory. */
enum nd_zero_copy {
	ND_ZERO_COPY_AUTO,	/* where registration works; else staged, and logged */
	ND_ZERO_COPY_OFF,	/* never: every KV byte is staged and copied */
	ND_ZERO_COPY_REQUIRE,	/* always: a session that cannot is refused */
};

struct nd_config {
	char devices[1024];	/* "sim:4", "kdev", or a list of device names */
	char sim_opts[128];	/* for each sim device: mem=..,cores=.. */
	char listen_host[128];
	char port_file[4096];	/* "": none */
	uint16_t port;
	uint32_t max_sessions;
	uint32_t max_conns;
	uint32_t data_port;		/* the UCX listener's; 0: any */
	/* Limits (Documentation/tools/nelssad.rst, LIMITS). */
	uint32_t max_conns_per_addr;	/* control connections from one client address */
	uint32_t max_sessions_per_conn;
	uint32_t max_requests_per_session;
	uint64_t max_memory_per_conn;	/* device bytes, all devices; 0: by percent */
	uint32_t max_memory_pct;	/* ... of the devices' memory, when bytes is 0 */
	uint32_t hello_timeout_ms;	/* accept to HELLO */
	uint32_t frame_timeout_ms;	/* a partial frame in, or replies not read */
	uint32_t max_unread_kib;	/* replies not read, the socket's included */
	uint32_t idle_timeout_ms;	/* no frame and no session; 0: never */
	uint32_t n_admin;		/* --admin-addr: who sees daemon-wide STATS */
	struct nd_addr {
		int family;		/* AF_INET or AF_INET6 (v4-mapped ones as AF_INET) */
		uint8_t a[16];
	} admin[16];
	int zero_copy;		/* enum nd_zero_copy */
	int busy_poll;		/* poller spins instead of sleeping on the efd */
	int require_rdma;
	int emulated_rma;	/* --emulated-rma: UCX's RMA even without RDMA */
	int nop_kernel;		/* benchmarks: NOP instead of SPARSE_ATTN */
	int verbose;
	/* The cluster registry (registry.c; Documentation/cluster.rst).  etcd "": none. */
	char etcd[1024];		/* endpoints, comma-separated URLs */
	char cluster[64];
	char node_id[64];		/* "": HOSTNAME-PORT */
	char advertise[128];		/* host clients reach; "": the listen host */
	uint32_t etcd_ttl;		/* the lease's, s */
	uint32_t etcd_update_ms;	/* the record rewritten at most this often */
	uint32_t etcd_timeout_ms;	/* each etcd call's deadline */
	char etcd_user[128];
	char etcd_password_file[4096];
	char etcd_cacert[4096], etcd_cert[4096], etcd_key[4096];
};

struct nd_device {
	struct nelssa_pnm *pnm;
	char name[128];
	struct npnm_info info;
	uint64_t reserved;	/* bytes promised to sessions */
};

/*
 * One request's KV: a block at the same offset in every device's arena,
 * holding a store per (layer, head the device serves) of @store_tokens
 * rows and @store_clusters table entries.
 */
struct nd_request {
	uint64_t id;
	int used;
	uint32_t max_tokens, max_clusters;
	uint32_t store_tokens, store_clusters;
	uint64_t off[ND_MAX_DEVICES];	/* of its block in each arena */
	uint64_t bytes;			/* per device */
	uint32_t *nr_tokens;		/* [device][layer][kv_head] stored there */
	uint32_t *nr_clusters;		/* likewise, the device's (local) clusters */
	uint32_t *g_clusters;		/* [layer][kv_head]: clusters in all */
};

struct nd_step;

/*
 * A control connection's data path (Documentation/daemon.rst, "The data
 * path").  HELLO makes it, with a random @key that HELLO_OK gives that
 * connection alone; the UCX endpoints its client then connects with carry
 * the key as their UCX client id, and the daemon makes an endpoint from a
 * connection request (struct nd_ep) only for a key of a connection still
 * open, at most ND_EPS_PER_CONN of them.  A session's KV and STEP messages
 * count only on an endpoint of the connection that owns it.  The control
 * thread makes a peer and marks it @gone when the connection closes; the
 * poller closes its endpoints then and frees it once neither a session
 * nor an endpoint refers to it.
 */
struct nd_peer {
	uint64_t id;			/* the connection's, for logs and replies */
	uint64_t key;			/* random, never 0 */
	int shm;			/* NELSSA_HELLO_SHM granted: endpoints without error handling */
	int gone;			/* the control connection closed */
	uint32_t sessions;		/* bound to it */
	uint32_t eps;			/* struct nd_ep of it, open or not yet freed */
	uint64_t done_steps, done_items, done_kv, done_kv_rma, done_kv_recv;	/* of its sessions closed */
	struct nd_peer *next;
};

/* UCX endpoints a connection may have (a client needs one). */
#define ND_EPS_PER_CONN 2u

/*
 * An endpoint the daemon made from a connection request: its own, so UCX
 * reports its failure (ep_failed()) and frees it only when the poller
 * closes it.  A reply goes out on it only while nd_ep_live() gives it.
 * Poller thread only; freed once closed and no step or receive holds it.
 */
struct nd_ep {
	ucp_ep_h ep;			/* NULL once closed */
	struct nd_peer *peer;
	int failed;			/* UCX reported it */
	ucs_status_t why;		/* ... what UCX said */
	uint32_t refs;			/* steps and rendezvous receives that answer on it */
	struct nd_ep *next;
};

/*
 * The open ones of nd->eps by their UCX handle (ep_table.c), for the
 * poller to find the endpoint an active message came on: an endpoint is
 * in it while its @ep is set, from ucp_ep_create() until ep_close().
 * Poller thread only.
 */
struct nd_ep_slot {
	ucp_ep_h ep;			/* NULL: empty */
	struct nd_ep *e;
};
struct nd_ep_table {
	struct nd_ep_slot *slot;	/* 1 << @bits of them, or NULL */
	uint32_t bits;
	uint32_t n;			/* entries, at most half the slots */
};

/* Room for @n entries in all, so that adding up to them cannot fail; -ENOMEM. */
int nd_ep_table_reserve(struct nd_ep_table *t, uint32_t n);
/* Adds @ep, not in @t, as @e's, into room nd_ep_table_reserve() made. */
void nd_ep_table_add(struct nd_ep_table *t, ucp_ep_h ep, struct nd_ep *e);
/* The endpoint of @ep, or NULL (none in @t, or @ep NULL). */
struct nd_ep *nd_ep_table_find(const struct nd_ep_table *t, ucp_ep_h ep);
/* Removes @ep, when in @t. */
void nd_ep_table_del(struct nd_ep_table *t, ucp_ep_h ep);
/* Frees @t's slots; @t is then empty, as zeroed, and may be used again. */
void nd_ep_table_free(struct nd_ep_table *t);

/*
 * A session's memory on one device: reserved (counted in the device's
 * @reserved) by the poller, then allocated -- and, for zero-copy ingest,
 * mapped and registered with UCX -- by the control thread
 * (nd_session_alloc()).
 */
struct nd_sdev {
	int reserved;		/* @arena_bytes + @stage_bytes counted */
	uint32_t arena;		/* region handle */
	uint64_t arena_bytes;
	struct nelssa_extent_alloc alloc;
	uint32_t stage;		/* items | in | out */
	uint8_t *stage_map;
	uint64_t stage_bytes, in_off, out_off;
	/*
	 * Zero-copy ingest: the arena mapped here and registered.  It is
	 * pinnable memory (a card's device-dax carve-out) where the device
	 * gave it, else @pin_why says why not.
	 */
	char pin_why[96];
	void *arena_map;
	ucp_mem_h arena_memh;
	void *rkey;		/* packed, for RKEY */
	size_t rkey_len;
};

/*
 * A session is its connection's alone (Documentation/daemon.rst, Tenants):
 * on the control path it is named only on the connection that created it
 * (its @peer), on the data path only together with @token, which SESSION_OK
 * gave that connection alone.  Anything else naming it finds nothing.
 * The poller's alone once listed; before, the control thread's.
 */
struct nd_session {
	uint64_t id;
	uint64_t token;			/* random, never 0: nd_token_new() */
	uint32_t tenant;		/* the client's label, for logs and tests only */
	struct nelssa_shape shape;
	uint32_t group, max_batch, max_sel, local_heads;
	uint8_t placement;
	uint64_t capacity_tokens;
	struct nd_peer *peer;		/* the connection that owns it */
	int closing;			/* set by control, acted on by the poller */
	struct nd_step *step;		/* in flight, at most one */
	int held;			/* test hook: @step is done, its reply parked */
	uint64_t steps, items, kv_bytes;	/* served to it (STATS), as nd->stats */
	uint64_t kv_rma_bytes;			/* ... of @kv_bytes, written by its client */
	uint64_t kv_recv_bytes;			/* ... received by UCX straight into place */
	int rma;			/* zero-copy ingest: every arena registered */
	uint32_t rndv;			/* rendezvous receives in flight (poller) */
	uint32_t rndv_direct;		/* ... of them into its arenas: it stays until 0 */
	uint32_t replies;		/* step replies UCX still sends from its staging */
	struct nd_request *req;
	uint32_t n_req, cap_req;
	struct nd_sdev dev[ND_MAX_DEVICES];
	ucp_ep_h rdma_ep;		/* --require-rdma: the endpoint last found on RDMA */
	struct nd_session *next;
};

struct nd_stats {
	uint64_t steps, items, kv_bytes, kv_rma_bytes, kv_recv_bytes;
	uint64_t t_recv, t_dispatch, t_device, t_aggregate, t_send;
};

/*
 * A control request on its way to the poller and back (jobs.c): what the
 * control thread knows of the connection, the request, and the poller's
 * answer -- a reply frame, or an error code and why.
 */
enum nd_job_kind {
	ND_JOB_MSG,		/* a control frame: HELLO, SESSION_CREATE, REQ_*, CLOSE, STATS, RKEY_GET */
	ND_JOB_SESSION_ADD,	/* @s allocated: list it and answer SESSION_OK */
	ND_JOB_SESSION_DROP,	/* @s not allocated, or its connection gone: unreserve, free */
	ND_JOB_GONE,		/* the connection closed: its sessions close */
};

struct nd_job {
	enum nd_job_kind kind;
	uint64_t conn;			/* nd_conn's id: where the answer goes */
	struct nd_peer *peer;		/* the connection's (NULL before HELLO_OK) */
	int admin, shm;			/* what the connection may have */
	uint8_t req;			/* the request's type (ND_JOB_MSG) */
	struct nd_session *s;		/* SESSION_CREATE, between its jobs */
	int status;			/* 0, or the negative errno of an ERROR */
	char why[NELSSA_PROTO_ERR_LEN];
	struct nelssa_msg msg;		/* the request, then the reply */
	struct nd_job *next;
};

struct nd_jobq {
	struct nd_job *head, **tail;
	int fd;				/* eventfd: its reader's wake-up */
	bool signalled;			/* fd written, not yet read (jobs_lock) */
};

struct nelssad {
	struct nd_config cfg;
	struct nd_device dev[ND_MAX_DEVICES];
	uint32_t n_dev;
	/* Between the threads: held only to link or unlink a job. */
	pthread_mutex_t jobs_lock;
	struct nd_jobq to_poller;	/* its fd also wakes the poller to stop */
	struct nd_jobq to_control;
	/* Poller thread */
	struct nd_session *sessions;
	uint32_t n_sessions;
	uint32_t n_creating;		/* reserved, allocated by the control thread now */
	uint64_t next_session;
	struct nd_peer *peers;
	struct nd_stats stats;
	/* UCX */
	ucp_context_h ucp;
	ucp_worker_h worker;
	ucp_listener_h listener;
	uint16_t data_port;		/* the listener's */
	int shm_ok;			/* a shared-memory transport: NELSSA_HELLO_SHM can be granted */
	int rma_ok;			/* the UCX context has RMA: zero-copy sessions can be had */
	struct nd_ep *eps;		/* poller thread */
	uint32_t n_eps;
	struct nd_ep_table ep_table;	/* ... the open ones of @eps */
	char transports[256];
	/* Registered staging for rendezvous KV messages (poller thread only). */
	uint8_t *stage;
	ucp_mem_h stage_memh;
	uint32_t stage_free;		/* bitmap of free slots */
	uint32_t rndv;			/* rendezvous receives in flight, in all */
	uint64_t rndv_bytes;		/* ... and their bytes */
	pthread_t poller;
	int poller_running;		/* nd_dataplane_start() started it */
	/*
	 * Test hook, from NELSSAD_TEST_HOLD_TENANT (0: off): the replies of
	 * this tenant's steps are parked until their connection is gone, so
	 * a test can kill a client with its step certainly in flight.
	 */
	uint32_t hold_tenant;
	volatile int stop;
	int draining;			/* stopping: new messages are dropped */
	struct nd_registry *reg;	/* --etcd: the registry's (registry.c); NULL: none */
	uint64_t memory_per_conn;	/* max-memory-per-conn in bytes, resolved at start */
};

/*
 * A control connection (conn.c): its socket, its buffers and timers, and
 * what control.c keeps of it.  A connection is a tenant: the sessions it
 * creates are its own, and the per-connection limits bound it.
 */
struct nd_conn {
	int fd;
	uint64_t id;			/* for logs */
	char name[64];			/* "ADDR:PORT", for logs */
	struct nd_addr addr;		/* the client's, for --max-conns-per-addr */
	int admin;			/* from an --admin-addr: daemon-wide STATS */
	/* control.c */
	int hello;
	struct nd_peer *peer;		/* from HELLO_OK; NULL before.  The poller's: not read here */
	uint32_t waiting;		/* its jobs with the poller, answers not yet sent */
	int barrier;			/* one is HELLO or SESSION_CREATE: no frame is handled */
	uint32_t n_sessions;		/* open, as the poller's answers say */
	/* conn.c */
	uint64_t t_open, t_frame, t_partial, t_wrote, t_close;
	int closing;			/* a last ERROR queued: flush, then close */
	int gone;			/* nd_control_gone() done */
	int overflow;			/* a reply found no room in @out */
	size_t have;
	uint8_t in[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	/* Replies, queued; written once the frames of a read are handled. */
	uint8_t *out;
	size_t out_off, out_len, out_cap;
	size_t unsent;			/* in the socket, not sent yet, at the last look */
};

/*
 * The control loop (conn.c): its listener and connections.  The daemon
 * runs it with nd_control_run(); a test drives it a turn at a time
 * (nd_control_init(), nd_control_poll_once() with @wait 0, so that poll()
 * only looks, nd_control_fini()) on the thread that owns it, with the
 * clock it gives nd_now_ns().
 */
struct nd_ctl {
	int listen_fd;
	struct pollfd *pfd;		/* [0]: the listener, then one per connection */
	struct nd_conn **conns;
	uint32_t n;			/* connections open (or closing) */
	uint64_t pause_until;		/* out of descriptors: not accepting until */
};

/* conn.c */
int nd_control_listen(struct nelssad *nd);
int nd_control_run(struct nelssad *nd, int listen_fd);
int nd_control_init(struct nelssad *nd, struct nd_ctl *ctl, int listen_fd);
int nd_control_poll_once(struct nelssad *nd, struct nd_ctl *ctl, int wait);
void nd_control_fini(struct nelssad *nd, struct nd_ctl *ctl);
int nd_conn_send(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m);
int nd_conn_error(struct nelssad *nd, struct nd_conn *c, uint32_t seq, int code,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void nd_conn_refuse(int fd, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* fdlimit.c */
void nd_fd_setup(struct nelssad *nd);
int nd_fd_refuse(struct nelssad *nd, int listen_fd, const char *why);

/* main.c */
void nd_log(struct nelssad *nd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
uint64_t nd_now_ns(void);

/*
 * registry.c: nd_registry_init() before the poller starts (which calls
 * nd_registry_tick() each turn), nd_registry_start() once both listeners
 * are up, nd_registry_stop() (withdraws the record) before the node stops
 * serving, nd_registry_free() after the poller stopped.  All do nothing
 * without --etcd.
 */
struct nd_registry;
int nd_registry_init(struct nelssad *nd);
int nd_registry_start(struct nelssad *nd);
void nd_registry_tick(struct nelssad *nd);
void nd_registry_stop(struct nelssad *nd);
void nd_registry_free(struct nelssad *nd);

/* partition.c */
/* Bytes of one K or V row of @s: head_dim elements of its KV type. */
struct nelssa_kv_fmt nd_kv_fmt(const struct nd_session *s);
/*
 * Reserves @s's device memory, after checking -- before any allocation --
 * that it fits every device (-ENOSPC) and, with the @held bytes its
 * connection's other sessions reserve, max-memory-per-conn (-EDQUOT).
 * Accounting only, on the poller thread; nd_session_unreserve() undoes it.
 */
int nd_session_reserve(struct nelssad *nd, struct nd_session *s, uint64_t held, char *why,
		       size_t why_len);
void nd_session_unreserve(struct nelssad *nd, struct nd_session *s);
/*
 * Allocates (zeroed) what nd_session_reserve() reserved and registers it
 * for zero-copy ingest where it can (--zero-copy): on the control thread,
 * as @s is no one else's yet.  On failure nothing stays allocated.
 */
int nd_session_alloc(struct nelssad *nd, struct nd_session *s, char *why, size_t why_len);
void nd_session_free(struct nelssad *nd, struct nd_session *s);
int nd_request_alloc(struct nelssad *nd, struct nd_session *s, uint64_t id, uint32_t max_tokens,
		     uint32_t max_clusters, char *why, size_t why_len);
int nd_request_free(struct nelssad *nd, struct nd_session *s, uint64_t id);
struct nd_request *nd_request_find(struct nd_session *s, uint64_t id);
int nd_kv_check(struct nd_session *s, const struct nelssa_kv_hdr *h);
int nd_kv_ingest(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		 const uint8_t *data);
/* NELSSA_AM_KV_COMMIT: @h's rows are in @s's memory already; counts them. */
int nd_kv_commit(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h);
/*
 * A KV_ROWS part of head-wise @s: where it goes (device, offset in the
 * session's arena there, bytes), after nd_kv_check(); -EOPNOTSUPP for a
 * cluster-wise session.
 */
int nd_kv_rows_place(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		     uint32_t *dev, uint64_t *off, uint64_t *len);
/* Where UCX may receive into @off of @s's arena on @d itself (and its memh), or NULL. */
void *nd_kv_rows_target(struct nd_session *s, uint32_t d, uint64_t off, ucp_mem_h *memh);
/* Copies a KV_ROWS part's data into place (an eager message, or one staged). */
int nd_kv_rows_write(struct nelssad *nd, struct nd_session *s, const struct nelssa_kv_hdr *h,
		     const uint8_t *data);
/* Device of a head (head-wise placement); the store index of a head on a device. */
uint32_t nd_head_device(const struct nelssad *nd, uint32_t head);
uint32_t nd_local_head(const struct nelssad *nd, const struct nd_session *s, uint32_t head);
/* Where a (layer, local head)'s store lies in a request's block. */
void nd_store_offsets(const struct nd_session *s, const struct nd_request *r, uint32_t layer,
		      uint32_t local_head, uint64_t *k, uint64_t *v, uint64_t *table);

/* dispatch.c */
struct nd_step {
	struct nd_session *s;
	uint64_t id;
	uint32_t nr_items, pending;
	int32_t status;
	uint64_t t_arrive, t_start, t_submitted, t_done;
	uint32_t *item_dev, *item_slot;		/* per item: device, index there */
	uint64_t *item_req;			/* ... and its request */
	uint32_t dev_items[ND_MAX_DEVICES];
	struct nd_ep *ep;			/* its reply goes there (a reference) */
};
int nd_step_start(struct nelssad *nd, struct nd_session *s, struct nd_ep *e, const uint8_t *hdr,
		  size_t hdr_len, const uint8_t *data, size_t data_len, uint64_t t_arrive);
void nd_step_complete(struct nelssad *nd, const struct npnm_completion *c);
void nd_step_release(struct nelssad *nd, struct nd_session *s);
void nd_step_free(struct nd_step *st);
/* Whether @s's step in flight, if any, reads request @id (REQ_FREE waits for it). */
int nd_step_uses(const struct nd_session *s, uint64_t id);
void nd_step_reply_error(struct nelssad *nd, ucp_ep_h ep, uint64_t step, int status);
/* Sends UCX has not finished yet (nd_send()'s). */
uint32_t nd_sends_in_flight(void);
void nd_send(struct nelssad *nd, ucp_ep_h ep, unsigned int id, const void *hdr, size_t hdr_len,
	     void *data, size_t len, int free_data);

/*
 * dataplane.c.  nd_dataplane_start() is nd_dataplane_init() (UCX, the
 * worker, its handlers, the staging, the listener at the control
 * address's host) and the poller thread, whose loop
 * runs nd_dataplane_poll_once() -- the worker's progress, the peers'
 * endpoints, the devices' completions, the sessions to close -- and then
 * sleeps.  A test that calls nd_dataplane_init() alone runs the turns
 * itself, on one thread with the control loop; nd_dataplane_stop() ends
 * either, and leaves @nd for nd_dataplane_init() to start again once
 * @stop is cleared (the test does, to shed what UCX keeps of peers gone).
 */
int nd_token_new(uint64_t *token);
ucp_ep_h nd_ep_live(const struct nd_ep *e);
int nd_dataplane_init(struct nelssad *nd);
unsigned int nd_dataplane_poll_once(struct nelssad *nd);
int nd_dataplane_start(struct nelssad *nd);
void nd_dataplane_stop(struct nelssad *nd);

/*
 * control.c.  nd_control_handle(): a frame of @c's; non-zero closes @c
 * (after what it queued).  Most become a job for the poller, which runs
 * nd_control_job() on it and sends it back; nd_control_answer() then
 * answers on @c -- NULL when @c is gone meanwhile.
 */
int nd_control_handle(struct nelssad *nd, struct nd_conn *c, const struct nelssa_msg *m);
void nd_control_gone(struct nelssad *nd, struct nd_conn *c);
void nd_control_job(struct nelssad *nd, struct nd_job *j);
int nd_control_answer(struct nelssad *nd, struct nd_conn *c, struct nd_job *j);

/*
 * jobs.c.  nd_jobs_init() once, before either thread starts; nd_job_post()
 * to the poller, nd_job_done() back to the control thread; each side takes
 * its queue whole with nd_jobs_take().  nd_jobs_drop() frees what is left
 * (nd_dataplane_stop() does), nd_jobs_fini() that and the queues.
 */
int nd_jobs_init(struct nelssad *nd);
void nd_jobs_drop(struct nelssad *nd);
void nd_jobs_fini(struct nelssad *nd);
struct nd_job *nd_job_new(enum nd_job_kind kind, uint64_t conn);
void nd_job_post(struct nelssad *nd, struct nd_job *j);
void nd_job_done(struct nelssad *nd, struct nd_job *j);
struct nd_job *nd_jobs_take(struct nelssad *nd, struct nd_jobq *q);
void nd_jobs_wake(struct nelssad *nd, struct nd_jobq *q);
/* Gives back the reservation of the session a SESSION_CREATE's job carries. */
void nd_job_unreserve(struct nelssad *nd, struct nd_job *j);
void nd_job_free(struct nelssad *nd, struct nd_job *j);
/* The poller's turn at its queue: runs every job and sends it back. */
unsigned int nd_jobs_run(struct nelssad *nd);

#endif /* NELSSAD_H */
