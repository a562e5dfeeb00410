// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for nelssad's state machine, in process: the daemon's
 * real control loop (conn.c, control.c) and data path (dataplane.c,
 * dispatch.c, partition.c) on two embedded sim devices, driven one turn at
 * a time on this one thread (nd_control_poll_once(), nd_dataplane_poll_once(),
 * nelssad.h) by a sequence of operations decoded from the input.  Four
 * connection slots, each a TCP connection to the daemon's real listener and
 * a UCX worker (shared memory) that sends its KV and STEP messages, plus a
 * worker per slot that only receives, do HELLO (giving the slot's receiving
 * worker, its sending worker -- the client library's way, where the
 * daemon's endpoint pairs with the worker's own --, another slot's, none,
 * or an address UCX cannot read), SESSION_CREATE, REQ_ALLOC, REQ_FREE,
 * CLOSE, STATS, raw, mutated, cut and flooded frames, KV and STEP active
 * messages (eager or rendezvous, from valid ones with fields mutated, with
 * the session's token or another), active messages of other ids, clock
 * ticks past the timeouts, disconnects (FIN, RST, half close) and endpoint
 * closes, in any order.  The daemon's clock is this file's nd_now_ns(),
 * which only TICK moves, so the timeouts fire where the input says.
 *
 * The daemon, its devices and the workers persist across inputs (UCX takes
 * milliseconds to set up); every input ends by closing its connections and
 * turning the loops until everything is reaped, and then the daemon must
 * be back where it started: no connection, session or peer, no device
 * memory reserved, no device command or rendezvous receive in flight,
 * every staging slot free.  So each input starts from the same state and
 * a reproducer replays alone.  A worker the daemon may have opened an
 * endpoint to is replaced by a new one (worker_retire()), and every few
 * thousand inputs UCX itself is started again, daemon and clients
 * (ucx_refresh()), for what UCX keeps of peers that went.
 *
 * Oracles, besides ASan, UBSan and LeakSanitizer: every control reply
 * decodes, is a reply type, answers its request in order with a type that
 * fits (an ERROR's code a negative errno); REQ_ALLOC, REQ_FREE, CLOSE and a
 * non-admin STATS of a session the connection does not hold get -ENOENT; a
 * connection does not close with a valid request unanswered and no ERROR;
 * every KV ack and step reply has an exact header, a status of 0 or a
 * negative errno and, for a served step, exactly its items' outputs; a KV
 * or STEP message whose session and token are not an open session's gets
 * -ENOENT; a KV message is acknowledged, and a step answered, whenever its
 * client is there to hear it; no reply comes twice; no send of ours is left
 * incomplete; and the baseline after every input.  A finding prints the
 * last operations and the daemon's log, then "FINDING:", and aborts, so
 * libFuzzer keeps the input.
 *
 * Input: a sequence of operations, each a kind byte, a slot byte (the low
 * two bits: which slot; the rest flags) and the kind's fields, read
 * little-endian and as zeros past the end.  tests/fuzz/corpus-daemon.py has
 * an encoder for each (the reference for the format) and writes the seed
 * corpus, tests/fuzz/corpus-daemon/.  NELSSA_FUZZ_VERBOSE=1 prints every
 * operation and the daemon's log as they come; NELSSA_FUZZ_TLS sets
 * UCX_TLS (default posix,cma: shared memory without SysV's segments).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "nelssad.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOT 4			/* connection slots, each with its UCX worker */
#define NWORKER (2 * NSLOT)	/* ... and a worker that only receives (HELLO's) */
#define REPLY_RETIRE 16		/* daemon endpoints a receiving worker takes, then a new one */
#define NSESS 32		/* sessions an input can learn */
#define NSEND 256		/* data messages an input can send */
#define MAX_OPS 128
#define NDEV 2
#define HELLO_MS 1000u
#define FRAME_MS 1000u
#define IDLE_MS 5000u
#define MS 1000000ull
#define WAIT_NS (5000 * MS)	/* real time a reply or the baseline may take */

enum op {
	OP_CONNECT, OP_HELLO, OP_CREATE, OP_ALLOC, OP_FREE, OP_CLOSE, OP_STATS, OP_RAW, OP_KV,
	OP_STEP, OP_AM_OTHER, OP_TICK, OP_DISCONNECT, OP_EP_CLOSE, OP_SETTLE, OP_FLOOD, OP_MAX
};

static const char *const op_names[OP_MAX] = {
	"connect", "hello", "create", "alloc", "free", "close", "stats", "raw", "kv", "step",
	"am-other", "tick", "disconnect", "ep-close", "settle", "flood",
};

static int verbose;

/*
 * The last lines of the trace and the daemon's log, kept whether or not
 * they are printed: a finding prints them (printing them all as they come
 * changes the timing enough to hide some).
 */
#define RING 4096
static char ring[RING][160];
static unsigned int ring_at;

static void vlog_line(const char *prefix, const char *fmt, va_list ap)
{
	char *l = ring[ring_at++ % RING];
	int n = snprintf(l, sizeof(ring[0]), "%s", prefix);

	vsnprintf(l + n, sizeof(ring[0]) - (size_t)n, fmt, ap);
	if (verbose)
		fprintf(stderr, "%s\n", l);
}

/* ---- The daemon's clock and log (main.c's, in the daemon) ---- */

static uint64_t clock_ns = 1ull << 40;

uint64_t nd_now_ns(void)
{
	return clock_ns;
}

void nd_log(struct nelssad *nd, const char *fmt, ...)
{
	va_list ap;

	(void)nd;
	va_start(ap, fmt);
	vlog_line("  nelssad: ", fmt, ap);
	va_end(ap);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
	va_list ap;

	if (!verbose) {
		fprintf(stderr, "fuzz_daemon: the input's last %u lines:\n", RING);
		for (unsigned int i = ring_at > RING ? ring_at - RING : 0; i < ring_at; i++)
			fprintf(stderr, "%s\n", ring[i % RING]);
	}
	va_start(ap, fmt);
	fprintf(stderr, "fuzz_daemon: FINDING: ");
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	fflush(NULL);		/* UCX's log lines, on stdout */
	abort();
}

static void trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void trace(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog_line("", fmt, ap);
	va_end(ap);
}

static uint64_t real_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- The input ---- */

struct rd {
	const uint8_t *p, *end;
};

static uint8_t u8(struct rd *r)
{
	return r->p < r->end ? *r->p++ : 0;
}

static uint16_t u16(struct rd *r)
{
	uint16_t lo = u8(r);

	return (uint16_t)(lo | (uint16_t)u8(r) << 8);
}

static uint32_t u32(struct rd *r)
{
	uint32_t lo = u16(r);

	return lo | (uint32_t)u16(r) << 16;
}

static uint64_t u64(struct rd *r)
{
	uint64_t lo = u32(r);

	return lo | (uint64_t)u32(r) << 32;
}

/* ---- State: persistent (daemon, workers) and per input ---- */

static struct nelssad nd;
static struct nd_ctl ctl;
static uint16_t port;
static ucp_context_h cctx;

enum sess_state { S_OPEN, S_MAYBE, S_CLOSED };

struct hsess {
	uint64_t id, token;
	int slot;
	enum sess_state state;
	struct nelssa_shape shape;
	uint32_t max_batch, max_sel;
};

/* What a control request expects of its reply. */
struct expect {
	uint32_t seq;
	uint16_t type;
	int enoent;		/* must be ERROR -ENOENT */
	struct nelssa_shape shape;	/* SESSION_CREATE: to remember */
	uint32_t max_batch, max_sel;
	uint64_t session;	/* CLOSE: the session that closes */
};

/*
 * The worker address a HELLO gives: none; the slot's receiving worker (one
 * that never sends: the daemon's endpoints to it pair with nothing); the
 * slot's own sending worker, as the client library does (the daemon's
 * endpoint pairs with the one the worker opened); another slot's receiving
 * worker; or one UCX cannot read.
 */
enum addr_mode { A_NONE, A_OWN, A_SENDER, A_OTHER, A_BAD, A_MODES };

struct slot {
	int fd;			/* -1: none */
	int hello_sent, hello_ok;
	int admin;		/* from 127.0.0.1: sees any session in STATS */
	int lost;		/* an ERROR or a frame we cannot predict: no more checks */
	int eof;
	enum addr_mode addr;	/* what HELLO gave */
	int addr_worker;	/* ... whose worker's address (wk[]) */
	int peer_broken;	/* the worker's endpoint closed since: replies may not come */
	int stepped;		/* a step named its session: the daemon opened its peer */
	uint32_t named;		/* workers any HELLO on it named (raw ones too): wk[] bits */
	uint32_t seq;
	struct expect q[64];
	uint32_t nq;
	uint8_t in[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t have;
};

struct worker {
	ucp_worker_h w;
	ucp_address_t *addr;
	size_t addr_len;
	ucp_ep_h ep;		/* to the daemon; kept from input to input */
	int tainted;		/* the daemon opened an endpoint to it: a new worker */
	unsigned int opened;	/* a receiving worker: endpoints the daemon opened to it */
};

struct hsend {
	int used, done;
	unsigned int w;		/* the worker it went from */
	unsigned int id;	/* NELSSA_AM_KV or _STEP, or another */
	uint64_t key;		/* cookie, step id */
	int replies;
	int32_t status;
	uint32_t nr_items, out_bytes;	/* a step's: what a served reply holds */
	void *buf;
};

static struct worker wk[NWORKER];	/* [NSLOT + i]: slot i's receiving worker */
static struct slot sl[NSLOT];
static struct hsess ss[NSESS];
static uint32_t nss;
static struct hsend sends[NSEND];
static uint32_t nsends;
/*
 * Cookies and step ids, never reused: a reply an input's last step had on
 * its way when the connection closed may arrive during the next input.
 */
static uint64_t next_key = 1000;

/* ---- Client side: UCX ---- */

static struct hsend *send_by_key(unsigned int id, uint64_t key)
{
	for (uint32_t i = 0; i < nsends; i++)
		if (sends[i].used && sends[i].id == id && sends[i].key == key)
			return &sends[i];
	return NULL;
}

/* Rendezvous replies being received: freed when done, or when their worker goes. */
static struct rx {
	void *buf;
	unsigned int w;
} rxs[64];

static void rndv_recv_done(void *req, ucs_status_t st, size_t len, void *user)
{
	struct rx *x = user;

	(void)st;
	(void)len;
	free(x->buf);
	x->buf = NULL;
	if (req)
		ucp_request_free(req);
}

static int known_status(int32_t st)
{
	return st <= 0 && st > -4096;
}

/* A reply that came by rendezvous: take its data (and drop it). */
static void take_rndv(unsigned int w, void *data, size_t len)
{
	ucp_request_param_t p = { 0 };
	struct rx *x = NULL;
	ucs_status_ptr_t sp;

	for (unsigned int i = 0; i < sizeof(rxs) / sizeof(rxs[0]) && !x; i++)
		x = rxs[i].buf ? NULL : &rxs[i];
	if (!x)
		return;		/* dropped: UCX completes the daemon's send */
	x->buf = malloc(len ? len : 1);
	x->w = w;
	if (!x->buf)
		fail("out of memory");
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.cb.recv_am = rndv_recv_done;
	p.user_data = x;
	sp = ucp_am_recv_data_nbx(wk[w].w, data, x->buf, len, &p);
	if (!UCS_PTR_IS_PTR(sp))
		rndv_recv_done(NULL, UCS_OK, len, x);
}

static ucs_status_t on_am(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
			  const ucp_am_recv_param_t *p)
{
	const unsigned int w = (unsigned int)((uintptr_t)arg / 16), id = (unsigned int)((uintptr_t)arg % 16);
	struct hsend *s;

	if (id == NELSSA_AM_KV_ACK) {
		struct nelssa_ack_hdr a;

		if (nelssa_ack_hdr_get(hdr, hdr_len, &a) || len)
			fail("a KV ack of %zu header and %zu data bytes", hdr_len, len);
		if (!known_status(a.status))
			fail("a KV ack of status %d", a.status);
		s = send_by_key(NELSSA_AM_KV, a.cookie);
		trace("    worker %u: KV ack %llu: %d", w, (unsigned long long)a.cookie, a.status);
		if (s) {
			if (++s->replies > 1)
				fail("KV %llu acknowledged twice", (unsigned long long)a.cookie);
			s->status = a.status;
		}
	} else if (id == NELSSA_AM_STEP_REPLY) {
		struct nelssa_reply_hdr r;

		if (nelssa_reply_hdr_get(hdr, hdr_len, &r))
			fail("a step reply with a header of %zu bytes", hdr_len);
		if (!known_status(r.status))
			fail("a step reply of status %d", r.status);
		if (r.status && (r.nr_items || len))
			fail("step %llu refused (%d) with %u items, %zu bytes", (unsigned long long)r.step,
			     r.status, r.nr_items, len);
		s = send_by_key(NELSSA_AM_STEP, r.step);
		trace("    worker %u: step reply %llu: %d, %u items, %zu bytes", w,
		      (unsigned long long)r.step, r.status, r.nr_items, len);
		if (s) {
			if (++s->replies > 1)
				fail("step %llu answered twice", (unsigned long long)r.step);
			if (!r.status && s->out_bytes && (r.nr_items != s->nr_items ||
							  len != (size_t)s->nr_items * s->out_bytes))
				fail("step %llu served with %u items, %zu bytes; %u items of %u bytes "
				     "were asked", (unsigned long long)r.step, r.nr_items, len,
				     s->nr_items, s->out_bytes);
			s->status = r.status;
		}
	} else {
		fail("the daemon sent an active message of id %u", id);
	}
	if (p->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)
		take_rndv(w, data, len);
	return UCS_OK;
}

static void worker_create(unsigned int i)
{
	ucp_worker_params_t wp = { 0 };
	ucp_am_handler_param_t ap = { 0 };

	ucs_status_t st = UCS_ERR_NO_RESOURCE;

	wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
	wp.thread_mode = UCS_THREAD_MODE_SINGLE;
	/*
	 * Shared memory is the machine's: when other processes hold it all,
	 * wait a while (30 s) for some to come back.
	 */
	for (int tries = 0; tries < 300; tries++) {
		st = ucp_worker_create(cctx, &wp, &wk[i].w);
		if (st == UCS_OK)
			break;
		fprintf(stderr, "fuzz_daemon: a client worker: %s; trying again\n",
			ucs_status_string(st));
		usleep(100000);
	}
	if (st != UCS_OK)
		fail("no client worker: %s", ucs_status_string(st));
	st = ucp_worker_get_address(wk[i].w, &wk[i].addr, &wk[i].addr_len);
	if (st != UCS_OK)
		fail("no client worker address: %s", ucs_status_string(st));
	/* Every id up to the daemon's replies, in order (UCX 1.13's table). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_am;
	for (ap.id = 0; ap.id < 16; ap.id++) {
		ap.arg = (void *)(uintptr_t)(i * 16 + ap.id);
		if (ucp_worker_set_am_recv_handler(wk[i].w, &ap) != UCS_OK)
			fail("client AM handler");
	}
}

static void workers_setup(void)
{
	ucp_params_t up = { 0 };

	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM;
	if (ucp_init(&up, NULL, &cctx) != UCS_OK)
		fail("ucp_init for the clients");
	for (unsigned int i = 0; i < NWORKER; i++)
		worker_create(i);
}

/* An endpoint to the daemon's worker: with peer error handling if @peer and UCX can. */
static void ep_open(unsigned int w, int peer)
{
	ucp_ep_params_t p = { 0 };

	p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
	p.address = nd.addr;
	if (peer) {
		p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
		p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
		if (ucp_ep_create(wk[w].w, &p, &wk[w].ep) == UCS_OK)
			goto out;
		p.field_mask &= ~(uint64_t)UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
	}
	if (ucp_ep_create(wk[w].w, &p, &wk[w].ep) != UCS_OK)
		fail("client endpoint to the daemon");
out:
	trace("    worker %u: a new endpoint to the daemon", w);
}

/* Closes @w's endpoint (forced where UCX allows); the close's request, if any. */
static void *ep_close(unsigned int w)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE };
	ucs_status_ptr_t sp;

	if (!wk[w].ep)
		return NULL;
	trace("    worker %u: endpoint closed%s", w, wk[w].tainted ? " (tainted)" : "");
	sp = ucp_ep_close_nbx(wk[w].ep, &p);
	if (UCS_PTR_IS_ERR(sp) && UCS_PTR_STATUS(sp) == UCS_ERR_INVALID_PARAM) {
		p.flags = 0;
		sp = ucp_ep_close_nbx(wk[w].ep, &p);
	}
	wk[w].ep = NULL;
	return UCS_PTR_IS_PTR(sp) ? sp : NULL;
}

static void turn(void);

/*
 * Replaces worker @w by a new one, as a client process that exits and
 * starts again, once the daemon may have opened an endpoint to it: UCX
 * pairs a worker's next endpoint to the daemon with one the daemon's
 * wire-up left there by sequence number (ucp_ep_create() to a worker
 * address takes it), even one the daemon has closed since, and the
 * worker's messages would then go nowhere.  Its sends and receives end
 * with it; connections whose HELLO named it have no one to answer.
 */
static void worker_retire(unsigned int w)
{
	void *req = ep_close(w);
	const uint64_t until = real_ns() + WAIT_NS / 10;

	trace("    worker %u: retired", w);
	while (req && ucp_request_check_status(req) == UCS_INPROGRESS && real_ns() < until)
		turn();
	if (req)
		ucp_request_free(req);
	ucp_worker_release_address(wk[w].w, wk[w].addr);
	ucp_worker_destroy(wk[w].w);
	for (uint32_t i = 0; i < nsends; i++)
		if (sends[i].used && sends[i].w == w && !sends[i].done) {
			sends[i].done = 1;
			free(sends[i].buf);
			sends[i].buf = NULL;
		}
	for (unsigned int i = 0; i < sizeof(rxs) / sizeof(rxs[0]); i++)
		if (rxs[i].buf && rxs[i].w == w) {
			free(rxs[i].buf);
			rxs[i].buf = NULL;
		}
	for (unsigned int i = 0; i < NSLOT; i++)
		if (sl[i].named & 1u << w)
			sl[i].peer_broken = 1;
	worker_create(w);
	wk[w].tainted = 0;
	wk[w].opened = 0;
}

static void progress_clients(void)
{
	for (unsigned int i = 0; i < NWORKER; i++)
		while (ucp_worker_progress(wk[i].w))
			;
}

/* ---- Turns ---- */

static void read_replies(void);

static int steps_in_flight(void)
{
	for (struct nd_session *s = nd.sessions; s; s = s->next)
		if (s->step)
			return 1;
	return 0;
}

/* One turn of everything: the daemon's two loops, the clients, their replies. */
static void turn(void)
{
	int ret = nd_control_poll_once(&nd, &ctl, 0);

	if (ret)
		fail("the control loop's poll: %s", strerror(-ret));
	nd_dataplane_poll_once(&nd);
	progress_clients();
	nd_dataplane_poll_once(&nd);
	read_replies();
	if (steps_in_flight()) {	/* the devices' threads: wait a little for them */
		struct pollfd pfd[NDEV];

		for (uint32_t d = 0; d < nd.n_dev; d++)
			pfd[d] = (struct pollfd){ .fd = nelssa_pnm_event_fd(nd.dev[d].pnm),
						  .events = POLLIN };
		poll(pfd, nd.n_dev, 1);
	}
}

static int sends_pending(void)
{
	for (uint32_t i = 0; i < nsends; i++)
		if (sends[i].used && !sends[i].done)
			return 1;
	return 0;
}

/* Turns until nothing moves: no step on a device, no send of ours in progress. */
static void settle(void)
{
	const uint64_t until = real_ns() + WAIT_NS;

	for (int i = 0; i < 4 || steps_in_flight() || sends_pending(); i++) {
		turn();
		if (real_ns() > until)
			return;		/* the baseline check says what is stuck */
	}
}

/* ---- Control connections ---- */

/*
 * @c's connection is going, or may be: the daemon closes the endpoint it
 * opened to the worker HELLO named, which UCX may have paired with that
 * worker's own endpoint to the daemon -- that one is then dead on the
 * daemon's side, and its worker replaced before its next use.  Which HELLO
 * the daemon took is not always known (a raw one may have been, or a cut
 * address may still be the worker's): every worker any of them named.
 */
static void taint(struct slot *c)
{
	if (!c->stepped)
		return;
	c->stepped = 0;
	for (unsigned int w = 0; w < NWORKER; w++) {
		if (!(c->named & 1u << w))
			continue;
		if (w >= NSLOT) {	/* it never opens one: nothing to pair with */
			wk[w].tainted = ++wk[w].opened >= REPLY_RETIRE;
			continue;
		}
		trace("    worker %u: tainted by slot %td", w, c - sl);
		wk[w].tainted = 1;
	}
}

static void slot_lost(struct slot *c)
{
	c->lost = 1;
	c->nq = 0;
	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].slot == c - sl && ss[i].state == S_OPEN)
			ss[i].state = S_MAYBE;
	taint(c);
}

static void got_frame(struct slot *c, const uint8_t *f, size_t len)
{
	struct nelssa_msg m;
	struct expect *e;
	int ret = nelssa_msg_decode(f, len, &m);

	if (ret)
		fail("slot %td: a reply that does not decode: %s", c - sl, strerror(-ret));
	if (m.type != NELSSA_MSG_HELLO_OK && m.type != NELSSA_MSG_SESSION_OK &&
	    m.type != NELSSA_MSG_OK && m.type != NELSSA_MSG_STATS_REPLY &&
	    m.type != NELSSA_MSG_ERROR)
		fail("slot %td: the daemon sent %s", c - sl, nelssa_msg_type_str(m.type));
	if (m.type == NELSSA_MSG_ERROR && (m.u.error.code >= 0 || m.u.error.code <= -4096))
		fail("slot %td: ERROR of code %d", c - sl, m.u.error.code);
	trace("    slot %td: %s seq %u%s%s", c - sl, nelssa_msg_type_str(m.type), m.seq,
	      m.type == NELSSA_MSG_ERROR ? ": " : "", m.type == NELSSA_MSG_ERROR ? m.u.error.msg : "");
	if (m.type == NELSSA_MSG_SESSION_OK) {	/* a lost connection's too: its id and token */
		if (nss == NSESS)
			fail("more sessions than the harness keeps");
		ss[nss] = (struct hsess){ .id = m.u.session_ok.session, .token = m.u.session_ok.token,
					  .slot = (int)(c - sl), .state = c->lost ? S_MAYBE : S_OPEN };
		for (uint32_t i = 0; i < nss; i++)
			if (ss[i].id == ss[nss].id)
				fail("session id %llu given twice", (unsigned long long)ss[i].id);
		if (c->nq && c->q[0].seq == m.seq) {
			ss[nss].shape = c->q[0].shape;
			ss[nss].max_batch = c->q[0].max_batch;
			ss[nss].max_sel = c->q[0].max_sel;
		}
		nss++;
	}
	if (c->lost)
		return;
	if (!c->nq || c->q[0].seq != m.seq) {
		/* Only an ERROR of the daemon's own: a timeout, a limit, a refusal. */
		if (m.type != NELSSA_MSG_ERROR)
			fail("slot %td: %s of seq %u answers no request", c - sl,
			     nelssa_msg_type_str(m.type), m.seq);
		slot_lost(c);
		return;
	}
	e = &c->q[0];
	switch (e->type) {
	case NELSSA_MSG_HELLO:
		ret = m.type == NELSSA_MSG_HELLO_OK;
		break;
	case NELSSA_MSG_SESSION_CREATE:
		ret = m.type == NELSSA_MSG_SESSION_OK;
		break;
	case NELSSA_MSG_STATS:
		ret = m.type == NELSSA_MSG_STATS_REPLY;
		break;
	default:
		ret = m.type == NELSSA_MSG_OK;
		break;
	}
	if (!ret && m.type != NELSSA_MSG_ERROR)
		fail("slot %td: %s answers %s", c - sl, nelssa_msg_type_str(m.type),
		     nelssa_msg_type_str(e->type));
	if (e->enoent && (m.type != NELSSA_MSG_ERROR || m.u.error.code != -ENOENT))
		fail("slot %td: %s of a session it does not hold: %s %d, not -ENOENT", c - sl,
		     nelssa_msg_type_str(e->type), nelssa_msg_type_str(m.type),
		     m.type == NELSSA_MSG_ERROR ? m.u.error.code : 0);
	if (e->type == NELSSA_MSG_HELLO)
		c->hello_ok = m.type == NELSSA_MSG_HELLO_OK;
	if (e->type == NELSSA_MSG_CLOSE && m.type == NELSSA_MSG_OK)
		for (uint32_t i = 0; i < nss; i++)
			if (ss[i].id == e->session)
				ss[i].state = S_CLOSED;
	memmove(c->q, c->q + 1, (c->nq - 1) * sizeof(c->q[0]));
	c->nq--;
	/* A refused HELLO, or a request before HELLO: the daemon closes it. */
	if (m.type == NELSSA_MSG_ERROR && (e->type == NELSSA_MSG_HELLO || !c->hello_ok))
		slot_lost(c);
}

static void read_slot(struct slot *c)
{
	while (c->fd >= 0 && !c->eof) {
		ssize_t n = recv(c->fd, c->in + c->have, sizeof(c->in) - c->have, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			c->eof = 1;
			if (c->nq && !c->lost)
				fail("slot %td: closed with %u request(s) unanswered and no ERROR",
				     c - sl, c->nq);
			slot_lost(c);
			return;
		}
		c->have += (size_t)n;
		while (c->have >= NELSSA_PROTO_HDR_BYTES) {
			struct nelssa_msg_hdr h;
			size_t len;
			int ret = nelssa_msg_decode_hdr(c->in, &h);

			if (ret)
				fail("slot %td: a reply header that does not decode: %s", c - sl,
				     strerror(-ret));
			len = NELSSA_PROTO_HDR_BYTES + h.length;
			if (c->have < len)
				break;
			got_frame(c, c->in, len);
			memmove(c->in, c->in + len, c->have - len);
			c->have -= len;
		}
	}
}

static void read_replies(void)
{
	for (int i = 0; i < NSLOT; i++)
		read_slot(&sl[i]);
}

static void slot_write(struct slot *c, const uint8_t *buf, size_t len)
{
	const uint64_t until = real_ns() + WAIT_NS;

	while (len && c->fd >= 0) {
		ssize_t n = send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			turn();
			if (real_ns() > until)
				fail("slot %td: the daemon takes no more bytes", c - sl);
			continue;
		}
		if (n < 0)
			return;		/* closed by the daemon: fine, it said why */
		buf += n;
		len -= (size_t)n;
	}
}

/*
 * A connect() that a signal interrupted -- libFuzzer's SIGALRM, every half
 * -timeout -- goes on in the background (connect(2)): wait for it there.
 */
static void connect_wait(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	int err = errno;
	socklen_t len = sizeof(err);

	if (err != EINTR && err != EINPROGRESS)
		fail("connect: %s", strerror(err));
	while (poll(&pfd, 1, -1) < 0)
		if (errno != EINTR)
			fail("poll: %s", strerror(errno));
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err)
		fail("connect: %s", strerror(err ? err : errno));
}

static void slot_connect(unsigned int i, int non_admin)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct slot *c = &sl[i];
	int one = 1;

	if (c->fd >= 0 && !c->eof)
		return;
	if (c->fd >= 0)
		close(c->fd);	/* refused or closed by the daemon: a new one */
	memset(c, 0, sizeof(*c));
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		fail("socket: %s", strerror(errno));
	/* The port at connect(), where loopback reuses TIME_WAIT ones. */
	setsockopt(c->fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
	a.sin_addr.s_addr = htonl(non_admin ? 0x7f000002 : 0x7f000001);
	if (bind(c->fd, (struct sockaddr *)&a, sizeof(a)))
		fail("bind: %s", strerror(errno));
	a.sin_addr.s_addr = htonl(0x7f000001);
	a.sin_port = htons(port);
	if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)))
		connect_wait(c->fd);
	c->seq = 1;
	c->admin = !non_admin;
	turn();		/* accepted, or refused */
}

/* Gone, as far as the daemon's sessions go: FIN, RST (@rst) or a half close (@half). */
static void slot_disconnect(unsigned int i, int rst, int half)
{
	struct slot *c = &sl[i];

	if (c->fd < 0)
		return;
	if (half) {
		shutdown(c->fd, SHUT_WR);
	} else {
		if (rst) {
			struct linger l = { .l_onoff = 1, .l_linger = 0 };

			setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
		}
		close(c->fd);
		c->fd = -1;
	}
	c->nq = 0;
	c->lost = 1;
	for (uint32_t j = 0; j < nss; j++)
		if (ss[j].slot == (int)i && ss[j].state != S_CLOSED)
			ss[j].state = S_CLOSED;
	taint(c);
	turn();
	if (half)
		read_slot(c);
}

/* ---- Building control frames ---- */

static uint64_t pick_session(struct rd *r, uint8_t sel)
{
	if (nss && sel < 0xe0)
		return ss[sel % nss].id;
	if (sel < 0xf0)
		return sel & 0x0f;
	return u64(r);
}

/* Whether @c holds @id, open, as far as we know for sure. */
static int holds(const struct slot *c, uint64_t id)
{
	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].id == id)
			return ss[i].slot == c - sl && ss[i].state != S_CLOSED;
	return 0;
}

static const uint16_t dims[8] = { 8, 16, 32, 64, 128, 256, 512, 4 };
static const uint64_t caps[8] = { 16, 64, 256, 1024, 4096, 65536, 1u << 22, 1ull << 33 };
static const uint32_t toks[8] = { 1, 16, 64, 256, 1024, 4096, 1u << 20, 0 };

/*
 * The frame of control @kind from the input's fields: a valid message
 * where the fields allow (the encoder checks them), else a valid one of
 * the type with the fields' bytes written in afterwards.  0 and the frame's
 * length, or -1 when there is nothing to send.  @e gets what its reply is
 * expected to be.
 */
static int build(struct slot *c, unsigned int kind, struct rd *r, uint8_t *f, size_t *len,
		 struct expect *e, int raw)
{
	struct nelssa_msg m = { .seq = c->seq };
	uint8_t sel;

	memset(e, 0, sizeof(*e));
	switch (kind) {
	case OP_HELLO: {
		const uint8_t mode = u8(r), ver = u8(r);
		const unsigned int w = (unsigned int)(c - sl);
		enum addr_mode addr = (enum addr_mode)(mode % A_MODES);
		int aw = addr == A_SENDER ? (int)w :
			 addr == A_OTHER ? NSLOT + (int)((w + 1 + mode / 8 % 3) % NSLOT) :
			 NSLOT + (int)w;

		m.type = NELSSA_MSG_HELLO;
		m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
		if (ver % 4 == 1)
			m.u.hello.min_version = 1, m.u.hello.max_version = 3;
		else if (ver % 4 == 2)
			m.u.hello.min_version = 3, m.u.hello.max_version = 5;
		else if (ver % 4 == 3)
			m.u.hello.min_version = m.u.hello.max_version = 1;
		snprintf(m.u.hello.name, sizeof(m.u.hello.name), "fuzz-%u", w);
		if (addr == A_OWN || addr == A_SENDER || addr == A_OTHER) {
			const struct worker *o = &wk[aw];

			m.u.hello.addr_len = (uint32_t)o->addr_len;
			memcpy(m.u.hello.addr, o->addr, o->addr_len);
		} else if (addr == A_BAD) {
			/* Another worker's address cut short, or bytes of the input. */
			const uint8_t n = u8(r);

			if (mode & 0x80) {
				const struct worker *o = &wk[aw];

				m.u.hello.addr_len = 1 + n % (uint32_t)o->addr_len;
				memcpy(m.u.hello.addr, o->addr, m.u.hello.addr_len);
			} else {
				/*
				 * Bytes of the input, of a version UCX does not
				 * have: refused at HELLO.  (One of a version it
				 * has is UCX's to read, as the addresses in its
				 * wire-up are.)
				 */
				m.u.hello.addr_len = 1 + n % 64;
				for (uint32_t i = 0; i < m.u.hello.addr_len; i++)
					m.u.hello.addr[i] = u8(r);
				if ((m.u.hello.addr[0] & 0x0f) <= 1)
					m.u.hello.addr[0] |= 0x02;
			}
		}
		/*
		 * The daemon keeps the first HELLO's address (a second is
		 * refused); a raw frame it may or may not take.
		 */
		if (addr != A_NONE)
			c->named |= 1u << aw;
		if (!c->hello_sent && !raw) {
			c->addr = addr;
			c->addr_worker = aw;
		}
		c->hello_sent = 1;
		trace("  hello: address %s of worker %d, %u bytes", addr == A_NONE ? "none" :
		      addr == A_BAD ? "bad" : "good", aw, m.u.hello.addr_len);
		break;
	}
	case OP_CREATE: {
		const uint8_t layers = u8(r), kvh = u8(r), group = u8(r), dim = u8(r), kind2 = u8(r),
			      batch = u8(r), msel = u8(r), cap = u8(r);

		m.type = NELSSA_MSG_SESSION_CREATE;
		m.u.create.tenant = kind2 >> 4;
		m.u.create.shape.layers = (uint16_t)(layers & 0x80 ? layers << 3 : 1 + layers % 4);
		m.u.create.shape.kv_heads = (uint16_t)(kvh & 0x80 ? kvh << 2 : 1 + kvh % 5);
		m.u.create.shape.q_heads = (uint16_t)(m.u.create.shape.kv_heads *
						      (group & 0x80 ? group : 1 + group % 4));
		m.u.create.shape.head_dim = dims[dim % 8];
		m.u.create.shape.kv_dtype = 1 + (kind2 & 1);
		m.u.create.placement = (kind2 >> 1) & 1;
		m.u.create.max_batch = batch & 0x80 ? (uint32_t)batch << 4 : 1u + batch % 4;
		m.u.create.max_sel = msel & 0x80 ? (uint32_t)msel << 8 : 1u + msel % 16;
		m.u.create.capacity_tokens = caps[cap % 8] + (cap >> 3);
		e->shape = m.u.create.shape;
		e->max_batch = m.u.create.max_batch;
		e->max_sel = m.u.create.max_sel;
		break;
	}
	case OP_ALLOC:
		sel = u8(r);
		m.type = NELSSA_MSG_REQ_ALLOC;
		m.u.req.session = pick_session(r, sel);
		m.u.req.request = u8(r) % 8;
		m.u.req.max_tokens = toks[u8(r) % 8];
		m.u.req.max_clusters = toks[u8(r) % 8];
		if (!m.u.req.max_tokens)
			m.u.req.max_tokens = u32(r);
		if (!m.u.req.max_clusters)
			m.u.req.max_clusters = u32(r);
		break;
	case OP_FREE:
		sel = u8(r);
		m.type = NELSSA_MSG_REQ_FREE;
		m.u.req.session = pick_session(r, sel);
		m.u.req.request = u8(r) % 8;
		break;
	case OP_CLOSE:
	case OP_STATS:
		sel = u8(r);
		m.type = kind == OP_CLOSE ? NELSSA_MSG_CLOSE : NELSSA_MSG_STATS;
		m.u.session.session = kind == OP_STATS && sel == 0xff ? 0 : pick_session(r, sel);
		break;
	default:
		return -1;
	}
	e->seq = m.seq;
	e->type = m.type;
	if (nelssa_msg_encode(&m, f, NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD, len)) {
		/* Fields the encoder refuses: the type's frame, then those fields' bytes. */
		struct nelssa_msg v = m;

		if (m.type == NELSSA_MSG_SESSION_CREATE) {
			v.u.create.shape = (struct nelssa_shape){ 1, 1, 1, 8, 1 };
			v.u.create.max_batch = v.u.create.max_sel = 1;
			v.u.create.capacity_tokens = 1;
		} else if (m.type == NELSSA_MSG_REQ_ALLOC || m.type == NELSSA_MSG_REQ_FREE) {
			v.u.req.session = 1;
			v.u.req.max_tokens = v.u.req.max_clusters = 1;
		} else if (m.type == NELSSA_MSG_CLOSE || m.type == NELSSA_MSG_STATS) {
			v.u.session.session = 1;
		} else if (m.type == NELSSA_MSG_HELLO) {
			v.u.hello.min_version = v.u.hello.max_version = 1;
		}
		if (nelssa_msg_encode(&v, f, NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD, len))
			fail("no frame for %s", nelssa_msg_type_str(m.type));
		if (m.type == NELSSA_MSG_SESSION_CREATE) {
			uint8_t *p = f + NELSSA_PROTO_HDR_BYTES;

			p[4] = (uint8_t)m.u.create.shape.layers;
			p[5] = (uint8_t)(m.u.create.shape.layers >> 8);
			p[6] = (uint8_t)m.u.create.shape.q_heads;
			p[7] = (uint8_t)(m.u.create.shape.q_heads >> 8);
			p[8] = (uint8_t)m.u.create.shape.kv_heads;
			p[9] = (uint8_t)(m.u.create.shape.kv_heads >> 8);
			p[10] = (uint8_t)m.u.create.shape.head_dim;
			p[11] = (uint8_t)(m.u.create.shape.head_dim >> 8);
			for (int i = 0; i < 4; i++) {
				p[16 + i] = (uint8_t)(m.u.create.max_batch >> 8 * i);
				p[20 + i] = (uint8_t)(m.u.create.max_sel >> 8 * i);
			}
			for (int i = 0; i < 8; i++)
				p[24 + i] = (uint8_t)(m.u.create.capacity_tokens >> 8 * i);
		} else if (m.type == NELSSA_MSG_REQ_ALLOC || m.type == NELSSA_MSG_REQ_FREE ||
			   m.type == NELSSA_MSG_CLOSE || m.type == NELSSA_MSG_STATS) {
			uint8_t *p = f + NELSSA_PROTO_HDR_BYTES;

			for (int i = 0; i < 8; i++)
				p[i] = (uint8_t)((m.type == NELSSA_MSG_CLOSE || m.type == NELSSA_MSG_STATS ?
						  m.u.session.session : m.u.req.session) >> 8 * i);
			if (m.type == NELSSA_MSG_REQ_ALLOC)
				for (int i = 0; i < 4; i++) {
					p[16 + i] = (uint8_t)(m.u.req.max_tokens >> 8 * i);
					p[20 + i] = (uint8_t)(m.u.req.max_clusters >> 8 * i);
				}
		} else if (m.type == NELSSA_MSG_HELLO) {
			uint8_t *p = f + NELSSA_PROTO_HDR_BYTES;

			p[0] = (uint8_t)m.u.hello.min_version;
			p[2] = (uint8_t)m.u.hello.max_version;
		}
		e->type = 0;	/* malformed: an ERROR, and the connection ends */
	}
	c->seq++;
	/* Isolation: a session this connection does not hold is one that never existed. */
	if ((m.type == NELSSA_MSG_REQ_ALLOC || m.type == NELSSA_MSG_REQ_FREE ||
	     m.type == NELSSA_MSG_CLOSE) && e->type && c->hello_ok)
		e->enoent = !holds(c, m.type == NELSSA_MSG_CLOSE ? m.u.session.session
								 : m.u.req.session);
	if (m.type == NELSSA_MSG_STATS && m.u.session.session && e->type && c->hello_ok &&
	    !c->admin)
		e->enoent = !holds(c, m.u.session.session);
	if (m.type == NELSSA_MSG_CLOSE)
		e->session = m.u.session.session;
	return 0;
}

static void control_op(struct slot *c, unsigned int kind, struct rd *r)
{
	uint8_t f[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	struct expect e;
	size_t len;

	if (build(c, kind, r, f, &len, &e, 0) || c->fd < 0)
		return;
	if (!e.type || c->lost) {
		slot_lost(c);
	} else if (c->nq < sizeof(c->q) / sizeof(c->q[0])) {
		c->q[c->nq++] = e;
	}
	slot_write(c, f, len);
	turn();
}

/* Frames the model cannot predict: bytes, mutated frames, partial ones, huge headers. */
static void raw_op(struct slot *c, struct rd *r)
{
	uint8_t f[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	const uint8_t mode = u8(r);
	struct expect e;
	size_t len = 0;

	if (c->fd < 0)
		return;
	switch (mode % 4) {
	case 0:		/* bytes of the input */
		len = u8(r);
		for (size_t i = 0; i < len; i++)
			f[i] = u8(r);
		break;
	case 1: {	/* a request's frame, one byte changed */
		const unsigned int kind = OP_HELLO + u8(r) % 6;
		uint16_t at;
		uint8_t x;

		if (build(c, kind, r, f, &len, &e, 1))
			return;
		at = u16(r);
		x = u8(r);
		f[at % len] ^= x ? x : 1;
		break;
	}
	case 2: {	/* a frame cut short: the rest never comes */
		const unsigned int kind = OP_HELLO + u8(r) % 6;
		const uint8_t keep = u8(r);

		if (build(c, kind, r, f, &len, &e, 1))
			return;
		len = keep % len;
		break;
	}
	default: {	/* a header of any type, version and length, then a few bytes */
		struct nelssa_msg_hdr h = { .magic = NELSSA_PROTO_MAGIC };
		uint8_t more;

		h.version = u16(r);
		h.type = u16(r);
		h.length = u32(r);
		h.seq = u32(r);
		more = u8(r);
		memcpy(f, &h.magic, 4);
		memcpy(f + 4, &h.version, 2);
		memcpy(f + 6, &h.type, 2);
		memcpy(f + 8, &h.length, 4);
		memcpy(f + 12, &h.seq, 4);
		len = 16 + more % 64;
		for (size_t i = 16; i < len; i++)
			f[i] = u8(r);
		break;
	}
	}
	slot_lost(c);
	slot_write(c, f, len);
	turn();
}

static void flood_op(struct slot *c, struct rd *r)
{
	const unsigned int n = 1 + u8(r) % 64;
	uint8_t *buf = malloc(n * 32), *p = buf;
	size_t len;

	if (!buf)
		fail("out of memory");
	for (unsigned int i = 0; i < n && c->fd >= 0; i++) {
		struct nelssa_msg m = { .type = NELSSA_MSG_STATS, .seq = c->seq++ };

		if (nelssa_msg_encode(&m, p, 32, &len))
			fail("STATS frame");
		p += len;
		if (!c->lost && c->nq < sizeof(c->q) / sizeof(c->q[0]))
			c->q[c->nq++] = (struct expect){ .seq = m.seq, .type = m.type };
		else
			slot_lost(c);
	}
	slot_write(c, buf, (size_t)(p - buf));
	free(buf);
	turn();
}

/* ---- Data path ---- */

static void send_done(void *req, ucs_status_t st, void *user)
{
	struct hsend *s = user;

	trace("    send %llu (id %u) done: %s", (unsigned long long)s->key, s->id,
	      ucs_status_string(st));
	s->done = 1;
	free(s->buf);
	s->buf = NULL;
	ucp_request_free(req);
}

/* The known session of @id and @token, open, or NULL: such a message must get -ENOENT. */
static struct hsess *match(uint64_t id, uint64_t token)
{
	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].id == id && ss[i].token == token && ss[i].state != S_CLOSED)
			return &ss[i];
	return NULL;
}

static uint64_t pick_token(struct rd *r, uint64_t id, uint8_t mode)
{
	uint64_t right = 0;

	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].id == id)
			right = ss[i].token;
	switch (mode % 5) {
	case 0:
		return right;
	case 1:
		return 0;
	case 2:
		return right ^ (1ull << (mode >> 3 & 63));
	case 3:
		return nss ? ss[(mode >> 3) % nss].token : 1;
	default:
		return u64(r);
	}
}

static struct hsess *sess_of(uint64_t id)
{
	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].id == id)
			return &ss[i];
	return NULL;
}

/*
 * Sends an active message from slot @w's worker: @mode's low bits eager,
 * rendezvous or UCX's choice; bit 2: do not wait for the answer; bit 3:
 * from the next slot's worker instead.  Waits, unless told not to, for the
 * answer; fails when @must and it does not come.
 */
static void am_send(unsigned int w, uint8_t mode, unsigned int id, uint64_t key, uint8_t *buf,
		    size_t hdr_len, size_t len, int must, int32_t want, uint32_t items,
		    uint32_t out_bytes)
{
	ucp_request_param_t p = { 0 };
	struct hsend *s;
	ucs_status_ptr_t sp;
	uint64_t until;

	if (mode & 8)
		w = (w + 1) % NSLOT;
	if (wk[w].tainted && !(mode & 0x80))	/* a new worker, mostly */
		worker_retire(w);
	if (!wk[w].ep)
		ep_open(w, mode & 0x40);
	if (wk[w].tainted)
		must = 0;
	if (nsends == NSEND) {
		free(buf);
		return;
	}
	s = &sends[nsends++];
	*s = (struct hsend){ .used = 1, .w = w, .id = id, .key = key, .buf = buf, .nr_items = items,
			     .out_bytes = out_bytes, .status = 1 };
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			 UCP_OP_ATTR_FIELD_FLAGS;
	p.cb.send = send_done;
	p.user_data = s;
	p.flags = UCP_AM_SEND_FLAG_REPLY | (mode % 4 == 1 ? UCP_AM_SEND_FLAG_EAGER :
					    mode % 4 == 2 ? UCP_AM_SEND_FLAG_RNDV : 0);
	trace("    %s %llu (id %u) from worker %u: %zu + %zu bytes, %s%s", id == NELSSA_AM_KV ? "KV" :
	      id == NELSSA_AM_STEP ? "step" : "AM", (unsigned long long)key, id, w, hdr_len, len,
	      mode % 4 == 1 ? "eager" : mode % 4 == 2 ? "rendezvous" : "either",
	      mode & 4 ? ", not waiting" : "");
	sp = ucp_am_send_nbx(wk[w].ep, id, buf, hdr_len, buf + hdr_len, len, &p);
	if (!UCS_PTR_IS_PTR(sp)) {
		s->done = 1;
		free(s->buf);
		s->buf = NULL;
		if (UCS_PTR_IS_ERR(sp))
			return;
	}
	if (mode & 4)
		return turn();
	/* An answer that must come is waited for; one that may not, a few turns. */
	until = real_ns() + WAIT_NS;
	for (int n = 0; !s->replies && (must || n < 8 || (n < 256 && steps_in_flight())); n++) {
		turn();
		if (real_ns() > until)
			fail("%s %llu: no answer in %llu ms", id == NELSSA_AM_KV ? "KV" : "step",
			     (unsigned long long)key, (unsigned long long)(WAIT_NS / MS));
	}
	for (int n = 0; !s->done && n < 64; n++)
		turn();
	if (s->replies && want && s->status != want)
		fail("%s %llu of no open session's id and token: %d, not %d",
		     id == NELSSA_AM_KV ? "KV" : "step", (unsigned long long)key, s->status, want);
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	uint32_t x = 0x9e3779b9u * (seed + 1u);

	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (uint8_t)(x >> 24);
	}
}

static void kv_op(unsigned int w, struct rd *r)
{
	const uint8_t sel = u8(r);
	const uint64_t id = pick_session(r, sel);
	const uint64_t token = pick_token(r, id, u8(r));
	const struct hsess *h = sess_of(id), *m = match(id, token);
	const uint32_t dim = h && h->shape.head_dim ? h->shape.head_dim : 8;
	struct nelssa_kv_hdr k = { .session = id, .token = token, .cookie = ++next_key };
	uint8_t req = u8(r), dmode, tmode, smode, hmode;
	size_t hdr_len = NELSSA_KV_HDR_BYTES, len;
	uint8_t *buf;

	k.request = req < 0xf0 ? req % 8 : u64(r);
	k.layer = u8(r);
	k.head = u8(r);
	k.first_token = u16(r);
	k.nr_tokens = u16(r) % 1024;
	k.first_cluster = u16(r);
	k.nr_clusters = u8(r);
	if (k.layer >= 0x80)
		k.layer = (uint16_t)(k.layer << 8);
	if (k.first_token >= 0xf000)
		k.first_token = u32(r);
	dmode = u8(r);
	tmode = u8(r);
	smode = u8(r);
	hmode = smode >> 4 & 3;
	len = 4ull * k.nr_tokens * dim + 8ull * k.nr_clusters;
	if (dmode % 4 == 1)
		len -= len ? 1 + (dmode >> 2) % len : 0;
	else if (dmode % 4 == 2)
		len += 1 + (dmode >> 2);
	else if (dmode % 4 == 3)
		len = (size_t)(dmode >> 2) << 14;	/* up to 1 MiB of whatever */
	if (hmode == 1)
		hdr_len = u8(r) % NELSSA_KV_HDR_BYTES;
	else if (hmode == 2)
		hdr_len = NELSSA_KV_HDR_BYTES + 8;
	buf = calloc(1, hdr_len + len + NELSSA_KV_HDR_BYTES + 8);
	if (!buf)
		fail("out of memory");
	nelssa_kv_hdr_put(buf, &k);
	if (hmode == 3)
		buf[52 + u8(r) % 12] = 1;	/* a reserved byte set */
	fill(buf + hdr_len, len, tmode);
	/* The table: clusters tiling the rows, or the bytes above. */
	if (tmode % 2 == 0 && len == 4ull * k.nr_tokens * dim + 8ull * k.nr_clusters) {
		uint8_t *t = buf + hdr_len + 4ull * k.nr_tokens * dim;
		const uint32_t n = k.nr_clusters, per = n ? k.nr_tokens / n : 0;

		for (uint32_t i = 0; i < n; i++) {
			const uint32_t first = k.first_token + i * per;
			const uint32_t count = i + 1 == n ? k.nr_tokens - i * per : per;

			memcpy(t + 8ull * i, &first, 4);
			memcpy(t + 8ull * i + 4, &count, 4);
		}
	}
	trace("  kv: session %llu (%s token) request %llu layer %u head %u tokens %u+%u "
		      "clusters %u+%u", (unsigned long long)id, m ? "its" : "no open session's",
		      (unsigned long long)k.request, k.layer, k.head, k.first_token, k.nr_tokens,
		      k.first_cluster, k.nr_clusters);
	/* Acknowledged always; by its cookie when the header is whole (else cookie 0). */
	am_send(w, smode, NELSSA_AM_KV, k.cookie, buf, hdr_len, len, hmode == 0,
		m ? 0 : -ENOENT, 0, 0);
}

static void step_op(unsigned int w, struct rd *r)
{
	const uint8_t sel = u8(r);
	const uint64_t id = pick_session(r, sel);
	const uint64_t token = pick_token(r, id, u8(r));
	const struct hsess *h = sess_of(id), *m = match(id, token);
	const uint32_t dim = h && h->shape.head_dim ? h->shape.head_dim : 8;
	const uint32_t group = h && h->shape.kv_heads ? h->shape.q_heads / h->shape.kv_heads : 1;
	struct nelssa_step_hdr sh = { .session = id, .token = token, .step = ++next_key };
	struct nelssa_step_item it[8];
	uint32_t nsel[8], total_sel = 0;
	uint8_t ids[8][32], dmode, smode;
	size_t hdr_len = NELSSA_STEP_HDR_BYTES, len, at;
	uint8_t *buf;
	int must;

	sh.layer = u8(r);
	if (sh.layer >= 0xc0)
		sh.layer = (uint16_t)(sh.layer << 8);
	sh.nr_items = u8(r) % 9;
	for (uint32_t i = 0; i < sh.nr_items; i++) {
		const uint8_t req = u8(r);

		it[i].request = req < 0xf0 ? req % 8 : u64(r);
		it[i].head = u8(r);
		nsel[i] = u8(r) % 33;
		it[i].nr_sel = nsel[i];
		for (uint32_t j = 0; j < nsel[i]; j++)
			ids[i][j] = u8(r);
		total_sel += nsel[i];
	}
	dmode = u8(r);
	smode = u8(r);
	len = sh.nr_items * (NELSSA_STEP_ITEM_BYTES + 4ull * group * dim) + 4ull * total_sel;
	if (dmode % 4 == 1)
		len -= len ? 1 + (dmode >> 2) % len : 0;
	else if (dmode % 4 == 2)
		len += 4 * (1 + (dmode >> 2));
	if (smode >> 4 & 1)
		hdr_len = u8(r) % NELSSA_STEP_HDR_BYTES;
	buf = calloc(1, NELSSA_STEP_HDR_BYTES + len + 8 * 16 + 8 * 4 * 32);
	if (!buf)
		fail("out of memory");
	nelssa_step_hdr_put(buf, &sh);
	at = hdr_len;
	for (uint32_t i = 0; i < sh.nr_items && at + NELSSA_STEP_ITEM_BYTES <= hdr_len + len; i++) {
		nelssa_step_item_put(buf + at, &it[i]);
		at += NELSSA_STEP_ITEM_BYTES;
	}
	for (uint32_t i = 0; i < sh.nr_items; i++) {
		const size_t q = 4ull * group * dim;

		if (at + q <= hdr_len + len) {
			for (size_t j = 0; j < q / 4; j++) {
				const float v = 0.01f * (float)((i * 31 + j) % 17) - 0.08f;

				memcpy(buf + at + 4 * j, &v, 4);
			}
		}
		at += q;
		for (uint32_t j = 0; j < nsel[i]; j++, at += 4)
			if (at + 4 <= hdr_len + len) {
				const uint32_t c = ids[i][j] < 0xf0 ? ids[i][j] % 16 : 0x7ffffff0u + ids[i][j];

				memcpy(buf + at, &c, 4);
			}
	}
	/*
	 * Its answer must come: a refusal to the sender; a served step's
	 * reply to the worker of the connection that holds the session,
	 * while that connection and its worker's endpoint stand.
	 */
	must = !m && hdr_len == NELSSA_STEP_HDR_BYTES;
	if (m && hdr_len >= 16)
		sl[m->slot].stepped = 1;
	if (m && hdr_len == NELSSA_STEP_HDR_BYTES) {
		const struct slot *c = &sl[m->slot];

		must = m->state == S_OPEN && !c->lost && c->fd >= 0 && !c->peer_broken &&
		       (c->addr == A_NONE || (c->addr != A_BAD && !wk[c->addr_worker].tainted));
	}
	trace("  step: session %llu (%s token) layer %u, %u items, %zu bytes",
		      (unsigned long long)id, m ? "its" : "no open session's", sh.layer, sh.nr_items,
		      len);
	am_send(w, smode, NELSSA_AM_STEP, sh.step, buf, hdr_len, len, must, m ? 0 : -ENOENT,
		sh.nr_items, h && h->shape.head_dim ? (uint32_t)(4 * group * dim + 4 * group) : 0);
}

static void am_other_op(unsigned int w, struct rd *r)
{
	unsigned int id = u16(r);
	const size_t hdr_len = u8(r) % 80, len = (size_t)u16(r) * 16;
	const uint8_t smode = u8(r);
	uint8_t *buf = calloc(1, hdr_len + len + 1);

	if (id == NELSSA_AM_KV || id == NELSSA_AM_STEP)
		id = 0;
	if (!buf)
		fail("out of memory");
	fill(buf, hdr_len + len, (uint8_t)id);
	am_send(w, smode | 4, id, ++next_key, buf, hdr_len, len, 0, 0, 0, 0);
}

/* ---- One input ---- */


static void check_baseline(void)
{
	const uint64_t until = real_ns() + WAIT_NS;
	int ok = 0;

	while (!ok) {
		turn();
		ok = !ctl.n && !nd.sessions && !nd.n_sessions && !nd.peers && !nd.rndv &&
		     !nd.rndv_bytes && !steps_in_flight();
		for (uint32_t d = 0; d < nd.n_dev; d++)
			ok = ok && !nd.dev[d].reserved && !nelssa_pnm_inflight(nd.dev[d].pnm);
		if (!ok && real_ns() > until)
			break;
	}
	if (!ok) {
		uint32_t sessions = 0, peers = 0;

		for (struct nd_session *s = nd.sessions; s; s = s->next)
			sessions++;
		for (struct nd_peer *p = nd.peers; p; p = p->next)
			peers++;
		fail("not back at the baseline %llu ms after the input: %u connections, %u "
		     "sessions (%u counted), %u peers, %u rendezvous receives (%llu bytes), "
		     "device memory reserved %llu + %llu", (unsigned long long)(WAIT_NS / MS), ctl.n,
		     sessions, nd.n_sessions, peers, nd.rndv, (unsigned long long)nd.rndv_bytes,
		     (unsigned long long)nd.dev[0].reserved, (unsigned long long)nd.dev[1].reserved);
	}
	if (nd.stage && nd.stage_free != (1u << ND_STAGE_SLOTS) - 1)
		fail("staging slots still taken: %#x free", nd.stage_free);
}

static void end_input(void)
{
	for (unsigned int i = 0; i < NSLOT; i++)
		taint(&sl[i]);
	for (unsigned int i = 0; i < NSLOT; i++)
		if (sl[i].fd >= 0) {
			struct linger l = { .l_onoff = 1, .l_linger = 0 };

			/* RST: no TIME_WAIT left behind by a million inputs */
			setsockopt(sl[i].fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
			close(sl[i].fd);
			sl[i].fd = -1;
		}
	check_baseline();
	settle();
	for (unsigned int i = 0; i < NWORKER; i++)
		if (wk[i].tainted)
			worker_retire(i);
	settle();
	for (uint32_t i = 0; i < nsends; i++) {
		if (!sends[i].done)
			fail("a send of ours never completed (message %u, %llu)", sends[i].id,
			     (unsigned long long)sends[i].key);
	}
	check_baseline();
}

static unsigned int maps(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	unsigned int n = 0;
	int ch;

	while (f && (ch = getc(f)) != EOF)
		n += ch == '\n';
	if (f)
		fclose(f);
	return n;
}

/*
 * UCX keeps, for as long as a worker lives, what it made for a peer whose
 * end it cannot see: over shared memory, the daemon's side of every
 * endpoint a client closed or lost with its worker, and the segment it
 * mapped for it -- a few hundred bytes and a mapping each, and a long run
 * would reach vm.max_map_count.  So every so often, at the baseline, the
 * daemon's data path is stopped and started again (nd_dataplane_stop(),
 * nd_dataplane_init(), as at the daemon's shutdown and start), and the
 * clients' workers with it.
 */
#define REFRESH_MAPS 2048	/* mappings grown since the last start */

static unsigned int maps_base;

static void ucx_refresh(void)
{
	ucp_params_t up = { 0 };

	if (nd_sends_in_flight() || nd.rndv)
		return;		/* another time */
	fprintf(stderr, "fuzz_daemon: UCX started again (%u mappings, %u after the last start)\n",
		maps(), maps_base);
	for (unsigned int i = 0; i < NWORKER; i++) {
		void *req = ep_close(i);

		if (req)
			ucp_request_free(req);
		ucp_worker_release_address(wk[i].w, wk[i].addr);
		ucp_worker_destroy(wk[i].w);
	}
	ucp_cleanup(cctx);
	nd_dataplane_stop(&nd);
	nd.stop = 0;
	if (nd_dataplane_init(&nd))
		fail("the daemon's data path, started again");
	up.field_mask = UCP_PARAM_FIELD_FEATURES;
	up.features = UCP_FEATURE_AM;
	if (ucp_init(&up, NULL, &cctx) != UCS_OK)
		fail("ucp_init for the clients, again");
	for (unsigned int i = 0; i < NWORKER; i++) {
		worker_create(i);
		wk[i].tainted = 0;
		wk[i].opened = 0;
	}
	maps_base = maps();
}

static void daemon_setup(void)
{
	struct nd_config *c = &nd.cfg;
	uint64_t total = 0;
	int lfd;

	snprintf(c->listen_host, sizeof(c->listen_host), "127.0.0.1");
	c->port = 0;
	c->max_conns = 3;		/* < NSLOT: the fourth is refused */
	c->max_conns_per_addr = 2;
	c->max_sessions = 4;
	c->max_sessions_per_conn = 2;
	c->max_requests_per_session = 3;
	c->max_memory_pct = 60;
	c->hello_timeout_ms = HELLO_MS;
	c->frame_timeout_ms = FRAME_MS;
	c->idle_timeout_ms = IDLE_MS;
	c->n_admin = 1;
	c->admin[0].family = AF_INET;
	c->admin[0].a[0] = 127;
	c->admin[0].a[3] = 1;
	c->verbose = 1;		/* every refusal logged, into the ring */
	pthread_mutex_init(&nd.lock, NULL);
	for (unsigned int d = 0; d < NDEV; d++) {
		struct nd_device *dev = &nd.dev[d];

		snprintf(dev->name, sizeof(dev->name), "sim:%u,mem=32M,cores=1,spin_us=0", d);
		if (nelssa_pnm_open(dev->name, &dev->pnm) || nelssa_pnm_info(dev->pnm, &dev->info))
			fail("cannot open %s: %s", dev->name, nelssa_pnm_strerror());
		total += dev->info.mem_size;
		nd.n_dev++;
	}
	nd.memory_per_conn = total / 100 * c->max_memory_pct;
	nd_fd_setup(&nd);
	if (nd_dataplane_init(&nd))
		fail("the daemon's data path");
	lfd = nd_control_listen(&nd);
	if (lfd < 0 || nd_control_init(&nd, &ctl, lfd))
		fail("the daemon's listener");
	{
		struct sockaddr_in a;
		socklen_t al = sizeof(a);

		getsockname(lfd, (struct sockaddr *)&a, &al);
		port = ntohs(a.sin_port);
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	verbose = getenv("NELSSA_FUZZ_VERBOSE") && atoi(getenv("NELSSA_FUZZ_VERBOSE"));
	/*
	 * Shared memory, less SysV's: its segments are the machine's
	 * (kernel.shmmni), which other processes may have taken.
	 */
	setenv("UCX_TLS", getenv("NELSSA_FUZZ_TLS") ? getenv("NELSSA_FUZZ_TLS") : "posix,cma", 1);
	signal(SIGPIPE, SIG_IGN);
	daemon_setup();
	workers_setup();
	maps_base = maps();
	for (unsigned int i = 0; i < NSLOT; i++)
		sl[i].fd = -1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned long inputs;
	struct rd r = { data, data + size };

	/* Ids from 1 again: each input starts where the last began. */
	nd.next_session = 0;
	nd.next_peer = 0;
	memset(&nd.stats, 0, sizeof(nd.stats));
	nss = 0;
	nsends = 0;
	for (unsigned int i = 0; i < NSLOT; i++) {
		memset(&sl[i], 0, sizeof(sl[i]));
		sl[i].fd = -1;
	}
	for (int n = 0; n < MAX_OPS && r.p < r.end; n++) {
		const unsigned int kind = u8(&r) % OP_MAX, b = u8(&r), i = b % NSLOT;
		struct slot *c = &sl[i];

		trace("op %d: %s, slot %u (%#x)", n, op_names[kind], i, b);
		switch (kind) {
		case OP_CONNECT:
			slot_connect(i, i >= 2 || (b & 4));
			break;
		case OP_HELLO:
		case OP_CREATE:
		case OP_ALLOC:
		case OP_FREE:
		case OP_CLOSE:
		case OP_STATS:
			if (c->fd < 0)
				slot_connect(i, i >= 2);
			control_op(c, kind, &r);
			break;
		case OP_RAW:
			raw_op(c, &r);
			break;
		case OP_FLOOD:
			flood_op(c, &r);
			break;
		case OP_KV:
			kv_op(i, &r);
			break;
		case OP_STEP:
			step_op(i, &r);
			break;
		case OP_AM_OTHER:
			am_other_op(i, &r);
			break;
		case OP_TICK: {
			static const uint64_t ticks[8] = { 1 * MS, 100 * MS, HELLO_MS * MS + 1,
							   FRAME_MS * MS + 1, IDLE_MS * MS + 1,
							   10000 * MS, 0, 500 * MS };
			const uint8_t t = u8(&r);

			clock_ns += ticks[t % 8] + (t >> 3) * MS;
			turn();
			turn();
			break;
		}
		case OP_DISCONNECT:
			slot_disconnect(i, b & 4, b & 8);
			break;
		case OP_EP_CLOSE:
			if (wk[i].ep) {
				void *req = ep_close(i);

				if (req)
					ucp_request_free(req);
				for (unsigned int j = 0; j < NSLOT; j++)
					if (sl[j].named & 1u << i)
						sl[j].peer_broken = 1;
				turn();
			}
			break;
		case OP_SETTLE:
			settle();
			break;
		}
	}
	end_input();
	if (++inputs % 256 == 0 && maps() > maps_base + REFRESH_MAPS)
		ucx_refresh();
	return 0;
}
