/* SPDX-License-Identifier: MIT */
/*
 * What the parts of the nelssad client share: remote.c (the connection,
 * control requests, KV messages, decode steps) and kv_place.c (zero-copy
 * ingest: KV put straight into the daemon's registered memory).  Not
 * installed; nothing here is exported (libnelssa-client.map).
 */
#ifndef NELSSA_REMOTE_INTERNAL_H
#define NELSSA_REMOTE_INTERNAL_H

#include <stdint.h>

#include <ucp/api/ucp.h>

#include <nelssa/client.h>
#include <nelssa/proto.h>

#define MAX_SESSIONS 64
#define CHUNK_BYTES (256u << 10)
/* Writes in flight at once (kv_place.c): a window, so that a failure surfaces near its cause. */
#define PUT_WINDOW 16
/*
 * Source buffers of KV chunks: a connection keeps up to NC_BUF_CACHE of
 * NC_BUF_BYTES (a chunk of a KV message: CHUNK_BYTES and the K and V
 * rows of one more token at the largest head) rather than free each.  A malloc and free of each chunk made
 * glibc grow and trim its heap once a chunk -- brk, page faults and a
 * TLB shoot-down every trim -- which cost ten times the copy: 0.27 GB/s
 * of puts over shared memory against 5.4 with the buffers kept
 * (Documentation/daemon.rst, "Zero-copy ingest").
 */
#define NC_BUF_BYTES (CHUNK_BYTES + 2u * 2u * NELSSA_PROTO_MAX_HEAD_DIM + 8u)
#define NC_BUF_CACHE (PUT_WINDOW + 2)
#define ACK_WINDOW 8

#define MAX_PENDING 16
/* After a cancel, how long UCX may take to let go of a send's buffers. */
#define CANCEL_GRACE_MS 20
/* How long nelssa_client_close() waits for the endpoint's flush, and for its close. */
#define CLOSE_WAIT_NS 2000000000ull

/*
 * One active message being sent: UCX reads its header and data until the
 * send completes.  A send that outlives its call's timeout (a stopped or
 * wedged daemon: UCX 1.13 cannot cancel a send) is left to UCX, with its
 * buffers, on the connection's list of orphans; its completion, or the
 * endpoint's close, ends it, and nelssa_client_close() frees it.
 */
struct send_op {
	struct send_op *next;
	int done;
	ucs_status_t status;
	void *req;		/* UCX's request while in flight */
	void *data;		/* owned */
	struct nelssa_client *cache;	/* @data goes back to its buffer cache */
	int borrowed;		/* a put that reads the caller's rows, not @data */
	uint8_t hdr[64];
};

/* One step in flight: where its reply goes. */
struct nelssa_step_pending {
	struct nelssa_client *c;
	uint64_t id;			/* 0: the slot is free */
	uint32_t n, g, d;
	float *o, *lse;
	int done;
	int receiving;			/* UCX writes @buf: the slot is not free */
	int32_t status;
	struct nelssa_reply_hdr reply;
	uint8_t *buf;
	size_t cap, len;
	uint64_t t0;
};

/*
 * Zero-copy ingest (kv_place.c): where a request's KV lies on each device
 * (REQ_OK), so that its rows can be put there.
 */
struct crequest {
	uint64_t id;
	uint32_t store_tokens, store_clusters;
	uint64_t off[NELSSA_PROTO_MAX_DEVICES];
};

/* A device's part of a session's memory, as RKEY gave it. */
struct crkey {
	ucp_rkey_h rkey;
	uint64_t base, bytes;
};

/*
 * A session of this connection; @token goes in every KV and STEP header.
 * @rma: KV is put into the daemon's memory (the daemon registered it and
 * this connection wants it); then @rk holds a key per device and @req the
 * requests allocated.  @rows: otherwise KV goes in NELSSA_AM_KV_ROWS
 * messages, a part each, which the daemon can receive straight into
 * place (NELSSA_SESSION_ROWS); else in NELSSA_AM_KV messages.
 */
struct csession {
	uint64_t id, token;
	struct nelssa_session_cfg cfg;
	int rma, rows;
	uint32_t n_dev;
	struct crkey *rk;
	struct crequest *req;
	uint32_t n_req, cap_req;
};

struct nelssa_client {
	int fd;
	uint32_t seq, timeout_ms, devices;
	char err[256];
	/* control replies: a frame being read */
	uint8_t rbuf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t rhave;
	ucp_context_h ucp;
	ucp_worker_h worker;
	ucp_ep_h ep;
	int efd;
	int ep_failed;
	/* KV acks: those of the offload in progress have cookies >= ack_base */
	uint32_t acks_pending;
	int ack_seen;			/* an ack came (nc_wait_acks() waits on it) */
	int32_t ack_status;
	uint64_t next_cookie, ack_base;
	struct send_op *orphans;
	void *bufs[NC_BUF_CACHE];	/* nc_buf_get(): free chunk buffers */
	uint32_t n_bufs;
	/* steps sent and not yet collected */
	uint64_t next_step;
	struct nelssa_step_pending pend[MAX_PENDING];
	struct csession sess[MAX_SESSIONS];
	uint32_t n_sess;
	int zero_copy;			/* NELSSA_ZERO_COPY_*, nelssa_client_set_zero_copy() */
};

/* Records @fmt as the connection's last error, logs it, returns @err. */
int nc_fail(struct nelssa_client *c, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * The errno of a UCX operation's failure: a peer gone (reset, unreachable,
 * its endpoint timed out) is -ECONNRESET, as the endpoint's own error
 * callback says, so a caller tells a lost daemon from a local fault
 * (-EIO) whichever call noticed first.
 */
int nc_ucs_errno(ucs_status_t st);
/* A control request and its reply; an ERROR reply becomes its code. */
int nc_ctl_call(struct nelssa_client *c, struct nelssa_msg *m, struct nelssa_msg *r);
/* Progresses the worker until *@done, the deadline or the daemon's end. */
int nc_wait(struct nelssa_client *c, const int *done, uint64_t deadline);
/* Sends an active message, waiting for UCX to be done with *@data (see remote.c). */
int nc_am_send(struct nelssa_client *c, unsigned int id, const void *hdr, size_t hdr_len,
	       void **data, size_t len, uint64_t deadline);
/* UCX's completion of a send_op's request. */
void nc_sent(void *request, ucs_status_t status, void *user_data);
void nc_op_free(struct send_op *op);
/* A buffer of NC_BUF_BYTES from the connection's cache (malloc'd when it is empty). */
void *nc_buf_get(struct nelssa_client *c);
/* Gives a buffer of nc_buf_get() back (NULL: nothing); freed when the cache is full. */
void nc_buf_put(struct nelssa_client *c, void *buf);
void nc_reap_orphans(struct nelssa_client *c);
/* Closes the data endpoint, forced: every request on it ends (cancelled). */
void nc_ep_kill(struct nelssa_client *c);
/* -ECONNRESET, with the reason recorded, once nc_ep_kill() closed the endpoint; else 0. */
int nc_ep_gone(struct nelssa_client *c);
/* Flushes the data endpoint until @deadline; *@status: how the flush ended. */
int nc_ep_flush(struct nelssa_client *c, uint64_t deadline, ucs_status_t *status);
struct csession *nc_find(struct nelssa_client *c, uint64_t id);
/* A daemon's refusal status in words. */
const char *nc_refusal(int status);
/* Waits for the KV acks outstanding (c->acks_pending) until @deadline. */
int nc_wait_acks(struct nelssa_client *c, uint32_t below, uint64_t deadline);
/* Starts an offload's acknowledgements: those of earlier offloads are ignored from here. */
void nc_acks_begin(struct nelssa_client *c);
/* Waits for every acknowledgement of the offload; 0, or the first refusal among them. */
int nc_acks_end(struct nelssa_client *c, uint64_t deadline);

/* kv_place.c */
/* After SESSION_OK with NELSSA_SESSION_RMA: fetches and unpacks the keys. */
void nc_rma_session_open(struct nelssa_client *c, struct csession *s);
/* Lets go of @s's keys and requests (before the endpoint closes). */
void nc_rma_session_close(struct csession *s);
/* REQ_OK of a request of @s: remembered, for its puts. */
int nc_rma_request_add(struct nelssa_client *c, struct csession *s, const struct nelssa_msg *r);
void nc_rma_request_del(struct csession *s, uint64_t id);
/*
 * nelssa_client_offload() of a session with @rma or @rows: the rows and
 * entries written into place -- puts and a flush, or KV_ROWS messages and
 * their acks -- then a commit.
 */
/* kv_tiles.c: offloading into an 8-bit (tiled) session. */
uint32_t nc_index_tokens(const struct nelssa_cluster_index *ix);
/* The first token of the tile cluster @from's first token lies in. */
uint32_t nc_tile_start(const struct nelssa_cluster_index *ix, uint32_t from);
/*
 * The first store position an offload of clusters [@from, n) writes and
 * reads the rows of: the first new token's, or for an 8-bit @dtype the
 * start of its tile, which is written whole (n_tokens: none).
 */
uint32_t nc_write_start(const struct nelssa_cluster_index *ix, uint32_t from,
			enum nelssa_kv_dtype dtype);
/* Tokens a chunk of whole tiles of about CHUNK_BYTES (K and V) holds. */
uint32_t nc_tile_chunk(const struct nelssa_kv_fmt *f);
/* The type of the caller's rows of a tiled session. */
enum nelssa_kv_dtype nc_offload_dtype(const struct nelssa_shape *sh);
/* -EINVAL, before anything is written, if a value of the rows is not finite. */
int nc_rows_finite(struct nelssa_client *c, const struct nelssa_kv_fmt *f,
		   enum nelssa_kv_dtype src, const struct nelssa_cluster_index *ix, uint32_t first,
		   uint32_t n, const void *rows, uint32_t base);
/*
 * Tokens [@first, @first + @n) in @ix's cluster order, from the caller's
 * @rows (token order from token @base, type @src), quantised into @out
 * (nelssa_kv_fmt_bytes(@n) bytes); -EINVAL for a value not finite.
 */
int nc_quantise_tiles(struct nelssa_client *c, const struct nelssa_kv_fmt *f,
		      enum nelssa_kv_dtype src, const struct nelssa_cluster_index *ix,
		      uint32_t first, uint32_t n, const void *rows, uint32_t base, uint8_t *out);

int nc_place_offload(struct nelssa_client *c, struct csession *s, uint64_t request,
		     uint16_t layer, uint16_t head, const struct nelssa_cluster_index *ix,
		     uint32_t from, const void *k, const void *v, uint32_t base);

#endif /* NELSSA_REMOTE_INTERNAL_H */
