// SPDX-License-Identifier: MIT
/*
 * libFuzzer target for nelssad's state machine, in process: the daemon's
 * real control loop (conn.c, control.c) and data path (dataplane.c,
 * dispatch.c, partition.c) on two embedded sim devices, driven one turn at
 * a time on this one thread (nd_control_poll_once(), nd_dataplane_poll_once(),
 * nelssad.h) by a sequence of operations decoded from the input.  Four
 * connection slots, each a TCP connection to the daemon's real listener,
 * do HELLO (asking for shared memory or not, with a flag no version has,
 * or as protocol version 2 with the worker address it carried),
 * SESSION_CREATE, REQ_ALLOC, REQ_FREE, CLOSE, STATS, raw, mutated, cut and
 * flooded frames.  Their data path is UCX's client/server flow
 * (nelssa/link.h): links, each a UCX worker of its own with one endpoint
 * to the daemon's UCX listener, made after HELLO_OK with the connection's
 * key as client id, as the client library does -- or, as a hostile client
 * may, with a key off by a bit, none, another connection's or a closed
 * one's, more of them than ND_EPS_PER_CONN, error handling unlike the
 * daemon's end -- send KV and STEP active messages (eager or rendezvous,
 * from valid ones with fields mutated, with the session's token or
 * another, from another connection's endpoint), active messages of other
 * ids; and clock ticks past the timeouts, disconnects (FIN, RST, half
 * close), endpoint closes and a held poller (HOLD: it does not turn, and
 * requests wait in its queue) come in any order.  The daemon's clock is
 * this file's nd_now_ns(), which only TICK moves, so the timeouts fire
 * where the input says.
 *
 * The daemon, its devices and the clients' UCX context persist across
 * inputs; links live within one (a key is one connection's, and a
 * worker's client id is fixed when it is made).  Every input ends by
 * closing its connections and turning the loops until everything is
 * reaped, and then the daemon must be back where it started: no
 * connection, session, peer or endpoint, no device memory reserved, no
 * device command or rendezvous receive in flight, every staging slot
 * free; then its links go.  So each input starts from the same state and
 * a reproducer replays alone.  Every few thousand inputs UCX itself is
 * started again, daemon and clients (ucx_refresh()), for what UCX keeps of
 * peers that went.
 *
 * Oracles, besides ASan, UBSan and LeakSanitizer: every control reply
 * decodes, is a reply type, answers its request in order with a type that
 * fits (an ERROR's code a negative errno); a HELLO of versions the daemon
 * lacks is refused; no timeout ends a connection whose HELLO or
 * SESSION_CREATE the poller has not answered; HELLO_OK gives the
 * listener's port, a key no other open connection has, and shared memory
 * only to a HELLO that asked, where the
 * daemon has it; REQ_ALLOC, REQ_FREE, CLOSE and a non-admin STATS of a
 * session the connection does not hold get -ENOENT; a connection does not
 * close with a valid request unanswered and no ERROR; every KV ack and
 * step reply has an exact header, a status of 0 or a negative errno and,
 * for a served step, exactly its items' outputs; it comes on the endpoint
 * the message came on, and never to one the daemon had to reject (a key
 * no open connection has, or one past ND_EPS_PER_CONN); a KV or STEP
 * message gets -ENOENT unless it names an open session with its token and
 * comes on an endpoint of the session's connection -- another's gets
 * -ENOENT, never served; a KV message is acknowledged, and a step
 * answered, whenever its endpoint was certainly taken and its connection
 * stands; an endpoint certainly taken comes up; no reply comes twice; no
 * send of ours that UCX must end is left incomplete; after every turn of
 * the poller the daemon's books on its endpoints add up (each of a live
 * peer, a peer's counts those of the endpoints and sessions naming it, at
 * most ND_EPS_PER_CONN, none open of a connection gone or failed); and
 * the baseline after every input.  A finding prints the last operations
 * and the daemon's log, then "FINDING:", and aborts, so libFuzzer keeps
 * the input.
 *
 * Input: a sequence of operations, each a kind byte, a slot byte (the low
 * two bits: which slot; the rest flags) and the kind's fields, read
 * little-endian and as zeros past the end.  tests/fuzz/corpus-daemon.py has
 * an encoder for each (the reference for the format) and writes the seed
 * corpus, tests/fuzz/corpus-daemon/.  NELSSA_FUZZ_VERBOSE=1 prints every
 * operation and the daemon's log as they come; NELSSA_FUZZ_TLS sets
 * UCX_TLS (default posix,cma,tcp: shared memory without SysV's segments,
 * and TCP, which the client/server flow needs).
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

#include <nelssa/link.h>

#include "nelssad.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NSLOT 4			/* control connection slots */
#define NLINK 12		/* UCX workers (one endpoint each) an input may make */
#define NSESS 32		/* sessions an input can learn */
#define NSEND 256		/* data messages an input can send */
#define MAX_OPS 128
#define NDEV 2
#define HELLO_MS 1000u
#define FRAME_MS 1000u
#define IDLE_MS 5000u
#define MS 1000000ull
/*
 * Real time a reply or the baseline may take: a hang detector, not a
 * margin -- the sanitized daemon shares two cores with QEMU guests under
 * make test, so it is as generous as fuzz_live's (30 s).
 */
#define WAIT_NS (30000 * MS)

enum op {
	OP_CONNECT, OP_HELLO, OP_CREATE, OP_ALLOC, OP_FREE, OP_CLOSE, OP_STATS, OP_RAW, OP_KV,
	OP_STEP, OP_AM_OTHER, OP_TICK, OP_DISCONNECT, OP_EP_CLOSE, OP_SETTLE, OP_FLOOD, OP_LINK,
	OP_HOLD, OP_MAX
};

static const char *const op_names[OP_MAX] = {
	"connect", "hello", "create", "alloc", "free", "close", "stats", "raw", "kv", "step",
	"am-other", "tick", "disconnect", "ep-close", "settle", "flood", "link", "hold",
};

/*
 * OP_HOLD: the poller does not turn (a poller busy for as long as the
 * input says) until the next hold op, a settle, a link or a wait for a
 * data-path answer; control jobs wait in its queue, and the connections
 * whose HELLO or SESSION_CREATE is there stay behind their barrier.
 */
static int held;

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

/* ---- State: persistent (daemon, client context) and per input ---- */

static struct nelssad nd;
static struct nd_ctl ctl;
static uint16_t port;
static ucp_context_h cctx;

enum sess_state { S_OPEN, S_MAYBE, S_CLOSED };

struct hsess {
	uint64_t id, token;
	uint64_t key;		/* its connection's: only that key's endpoints are served */
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
	int refused;		/* must be an ERROR (a HELLO of versions the daemon lacks) */
	int shm;		/* HELLO: asked for NELSSA_HELLO_SHM */
	struct nelssa_shape shape;	/* SESSION_CREATE: to remember */
	uint32_t max_batch, max_sel;
	uint64_t session;	/* CLOSE: the session that closes */
};

struct slot {
	int fd;			/* -1: none */
	int hello_ok;
	int admin;		/* from 127.0.0.1: sees any session in STATS */
	int lost;		/* an ERROR or a frame we cannot predict: no more checks */
	int eof;
	uint64_t key;		/* HELLO_OK's (any HELLO_OK on it, raw ones too); 0: none */
	uint64_t old_key;	/* the slot's connection before this one's */
	uint16_t data_port;
	int shm;		/* NELSSA_HELLO_SHM granted */
	/*
	 * Endpoints made with @key as client id, by any slot, and whether
	 * one of them was closed since: the daemon takes ND_EPS_PER_CONN of
	 * them and rejects the rest -- for certain only while none closed,
	 * as the daemon frees a closed one's place when it notices.
	 */
	uint32_t key_eps;
	int key_freed;
	int cur;		/* the link (lk[]) its data messages go from; -1: none yet */
	uint32_t seq;
	/*
	 * A HELLO or SESSION_CREATE sent whole and not yet answered: while
	 * the poller has it the daemon reads no more from the connection, so
	 * no timeout of the connection's may end it (its HELLO and frame
	 * clocks wait; the poller's delay is not the client's).
	 */
	int barrier;
	uint32_t barrier_seq;
	struct expect q[64];
	uint32_t nq;
	uint8_t in[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	size_t have;
};

/*
 * A client's UCX worker and its one endpoint to the daemon's listener
 * (nelssa/link.h), made with some client id: its connection's key, as the
 * client library does, or a hostile one.  One endpoint per worker, so a
 * reply shows, by the worker it reaches, which endpoint the daemon sent it
 * on.  All go at the end of the input.
 */
enum key_mode { K_RIGHT, K_WRONG, K_NONE, K_OTHER, K_STALE, K_MODES };

struct link {
	int used;
	ucp_worker_h w;
	ucp_ep_h ep;		/* NULL once closed */
	unsigned int slot;	/* the slot that made it */
	int owner;		/* the slot whose connection's key it carries; -1: no open one's */
	uint64_t id;		/* its client id (0: none) */
	int eh;			/* peer error handling */
	int sure_ok;		/* the daemon certainly took it */
	int sure_rej;		/* ... certainly rejected it */
	int failed;		/* UCX reported it */
};

struct hsend {
	int used, done;
	unsigned int l;		/* the link it went from */
	unsigned int id;	/* NELSSA_AM_KV or _STEP, or another */
	uint64_t key;		/* cookie, step id */
	int replies;
	int32_t status;
	uint32_t nr_items, out_bytes;	/* a step's: what a served reply holds */
	void *buf;
};

static struct link lk[NLINK];
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
	unsigned int l;
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
static void take_rndv(unsigned int l, void *data, size_t len)
{
	ucp_request_param_t p = { 0 };
	struct rx *x = NULL;
	ucs_status_ptr_t sp;

	for (unsigned int i = 0; i < sizeof(rxs) / sizeof(rxs[0]) && !x; i++)
		x = rxs[i].buf ? NULL : &rxs[i];
	if (!x)
		return;		/* dropped: UCX completes the daemon's send */
	x->buf = malloc(len ? len : 1);
	x->l = l;
	if (!x->buf)
		fail("out of memory");
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
	p.cb.recv_am = rndv_recv_done;
	p.user_data = x;
	sp = ucp_am_recv_data_nbx(lk[l].w, data, x->buf, len, &p);
	if (!UCS_PTR_IS_PTR(sp))
		rndv_recv_done(NULL, UCS_OK, len, x);
}

/*
 * A reply reaches the worker of the endpoint it was sent on, or the
 * daemon answered on an endpoint other than the message's; and none comes
 * to an endpoint the daemon had to reject.
 */
static void reply_where(struct hsend *s, unsigned int l, const char *what, uint64_t key)
{
	if (lk[l].sure_rej)
		fail("%s %llu answered on endpoint %u, whose connection request the daemon had to "
		     "reject (client id %#llx)", what, (unsigned long long)key, l,
		     (unsigned long long)lk[l].id);
	if (s && s->l != l)
		fail("%s %llu came on endpoint %u, its answer on endpoint %u", what,
		     (unsigned long long)key, s->l, l);
}

static ucs_status_t on_am(void *arg, const void *hdr, size_t hdr_len, void *data, size_t len,
			  const ucp_am_recv_param_t *p)
{
	const unsigned int l = (unsigned int)((uintptr_t)arg / 16), id = (unsigned int)((uintptr_t)arg % 16);
	struct hsend *s;

	if (id == NELSSA_AM_KV_ACK) {
		struct nelssa_ack_hdr a;

		if (nelssa_ack_hdr_get(hdr, hdr_len, &a) || len)
			fail("a KV ack of %zu header and %zu data bytes", hdr_len, len);
		if (!known_status(a.status))
			fail("a KV ack of status %d", a.status);
		s = send_by_key(NELSSA_AM_KV, a.cookie);
		if (!s)
			s = send_by_key(NELSSA_AM_KV_ROWS, a.cookie);
		trace("    link %u: KV ack %llu: %d", l, (unsigned long long)a.cookie, a.status);
		reply_where(s, l, "KV", a.cookie);
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
		trace("    link %u: step reply %llu: %d, %u items, %zu bytes", l,
		      (unsigned long long)r.step, r.status, r.nr_items, len);
		reply_where(s, l, "step", r.step);
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
		take_rndv(l, data, len);
	return UCS_OK;
}

static void link_failed(void *arg, ucp_ep_h ep, ucs_status_t st)
{
	struct link *k = arg;

	(void)ep;
	trace("    link %td: failed: %s", k - lk, ucs_status_string(st));
	k->failed = 1;
}

static ucp_worker_h worker_new(unsigned int l, uint64_t id)
{
	ucp_am_handler_param_t ap = { 0 };
	ucs_status_t st = UCS_ERR_NO_RESOURCE;
	ucp_worker_h w = NULL;

	/*
	 * Shared memory is the machine's: when other processes hold it all,
	 * wait a while (30 s) for some to come back.
	 */
	for (int tries = 0; tries < 300; tries++) {
		st = nelssa_link_worker(cctx, id, &w);
		if (st == UCS_OK)
			break;
		fprintf(stderr, "fuzz_daemon: a client worker: %s; trying again\n",
			ucs_status_string(st));
		usleep(100000);
	}
	if (st != UCS_OK)
		fail("no client worker: %s", ucs_status_string(st));
	/* Every id up to the daemon's replies, in order (UCX 1.13's table). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_am;
	for (ap.id = 0; ap.id < 16; ap.id++) {
		ap.arg = (void *)(uintptr_t)(l * 16 + ap.id);
		if (ucp_worker_set_am_recv_handler(w, &ap) != UCS_OK)
			fail("client AM handler");
	}
	return w;
}

/* Whether the daemon certainly still has slot @i's connection (and its key). */
static int slot_alive(int i)
{
	return i >= 0 && sl[i].fd >= 0 && !sl[i].eof && !sl[i].lost && sl[i].hello_ok;
}

/* Whether the daemon certainly still has the connection whose key @k carries. */
static int link_alive(const struct link *k)
{
	return k->owner >= 0 && sl[k->owner].key == k->id && slot_alive(k->owner);
}

/*
 * Whether a message on @k is certainly answered there: the daemon took
 * the endpoint, which is open, and the connection it belongs to stands.
 */
static int link_answers(const struct link *k)
{
	return k->sure_ok && k->ep && !k->failed && link_alive(k);
}

static void turn(void);

/*
 * Waits for @l's wire-up, as the client library does (data_path_up()): a
 * flush ends once it is done -- or, rejected, fails, where the endpoint
 * has error handling.  UCX 1.13 asserts in the client (rndv.c:169,
 * packed_rkey_size) on a rendezvous send queued before the wire-up that
 * it then replays.  One the daemon must take must come up.  The poller
 * takes endpoints, so a hold ends here, as it does in settle().
 */
static void link_wait(unsigned int l)
{
	ucp_request_param_t p = { 0 };
	const uint64_t until = real_ns() + WAIT_NS;
	ucs_status_ptr_t sp;
	ucs_status_t st;

	held = 0;
	sp = ucp_ep_flush_nbx(lk[l].ep, &p);
	st = UCS_PTR_STATUS(sp);
	if (UCS_PTR_IS_PTR(sp)) {
		while ((st = ucp_request_check_status(sp)) == UCS_INPROGRESS && real_ns() < until)
			turn();
		if (st == UCS_INPROGRESS)
			ucp_request_cancel(lk[l].w, sp);
		ucp_request_free(sp);
	}
	trace("    link %u: wire-up %s", l, ucs_status_string(st));
	if (st != UCS_OK && lk[l].sure_ok && link_alive(&lk[l]))
		fail("link %u: the daemon had to take its endpoint, which did not come up: %s", l,
		     ucs_status_string(st));
}

/*
 * A new worker and endpoint for slot @i with a client id of @mode: its
 * connection's key (the client library's way: nelssa_link_connect() on
 * the control socket), or a key off by a bit, none sent at all, another
 * slot's key or its own connection's before.  Peer error handling when
 * @eh, or unless the daemon certainly takes it: rejected, one without it
 * need not learn (UCX tells no error), nor its sends end.  -1 when NLINK
 * are taken.
 */
static int link_open(unsigned int i, enum key_mode mode, uint8_t bits, int eh)
{
	const unsigned int other = (i + 1 + bits % (NSLOT - 1)) % NSLOT;
	struct slot *c = &sl[i];
	struct sockaddr_in a = { .sin_family = AF_INET };
	struct link *k = NULL;
	ucs_status_t st;
	int l;

	for (l = 0; l < NLINK && lk[l].used; l++)
		;
	if (l == NLINK)
		return -1;
	k = &lk[l];
	*k = (struct link){ .used = 1, .slot = i, .owner = -1 };
	switch (mode) {
	case K_RIGHT:
		k->id = c->key;
		k->owner = c->key ? (int)i : -1;
		break;
	case K_WRONG:
		k->id = (c->key ? c->key : 1) ^ 1ull << (bits & 63);
		break;
	case K_NONE:
		break;
	case K_OTHER:
		k->id = sl[other].key;
		k->owner = sl[other].key ? (int)other : -1;
		break;
	default:
		k->id = c->old_key;
		break;
	}
	/* A key that names no open connection of ours is certainly refused. */
	if (k->owner >= 0) {
		struct slot *o = &sl[k->owner];

		o->key_eps++;
		k->sure_ok = slot_alive(k->owner) && o->key_eps <= ND_EPS_PER_CONN;
		k->sure_rej = o->key_eps > ND_EPS_PER_CONN && !o->key_freed;
		k->eh = eh || !k->sure_ok;
		/*
		 * Error handling unlike the daemon's end: UCX's to take or
		 * refuse (1.13 refuses none here against peer there, in the
		 * daemon's ucp_ep_create()), so nothing is certain of it, nor
		 * of the places left after it.
		 */
		if (k->eh != !o->shm && !k->sure_rej) {
			k->sure_ok = 0;
			o->key_freed = 1;
		}
	} else {
		k->sure_rej = mode != K_STALE || !k->id;
		k->eh = 1;
	}
	k->w = worker_new((unsigned int)l, k->id);
	st = UCS_ERR_UNREACHABLE;
	if (mode == K_RIGHT && c->fd >= 0 && c->key)
		st = nelssa_link_connect(k->w, c->fd, c->data_port, !k->eh, link_failed, k, &k->ep);
	/* Or where the control socket is reset already (getpeername() fails there). */
	if (st == UCS_ERR_UNREACHABLE) {
		/* As nelssa_link_connect(), to the daemon's port, with or without the id. */
		a.sin_addr.s_addr = htonl(0x7f000001);
		a.sin_port = htons(nd.data_port);
		st = nelssa_link_connect_sockaddr(k->w, (const struct sockaddr *)&a, sizeof(a),
						  (mode == K_NONE ? 0 : NELSSA_LINK_SEND_ID) |
						  (k->eh ? NELSSA_LINK_PEER_ERRORS : 0),
						  link_failed, k, &k->ep);
	}
	if (st != UCS_OK)
		fail("a client endpoint to the daemon's port %u: %s", nd.data_port,
		     ucs_status_string(st));
	trace("    link %d: slot %u, client id %#llx (%s), %s error handling%s%s", l, i,
	      (unsigned long long)k->id, (const char *[]){ "its key", "wrong", "none sent",
							   "another's", "stale" }[mode],
	      k->eh ? "peer" : "no", k->sure_ok ? ", taken" : "", k->sure_rej ? ", rejected" : "");
	c->cur = l;
	link_wait((unsigned int)l);
	return l;
}

/* Closes @l's endpoint (forced where UCX allows); the close's request, if any. */
static void *ep_close(unsigned int l)
{
	ucp_request_param_t p = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				  .flags = UCP_EP_CLOSE_FLAG_FORCE };
	struct link *k = &lk[l];
	ucs_status_ptr_t sp;

	if (!k->ep)
		return NULL;
	trace("    link %u: endpoint closed", l);
	/* The daemon frees its place once it notices: later ones may be taken. */
	if (k->owner >= 0 && sl[k->owner].key == k->id && !k->sure_rej)
		sl[k->owner].key_freed = 1;
	if (!k->eh)
		p.flags = 0;	/* UCX forces only with error handling */
	sp = ucp_ep_close_nbx(k->ep, &p);
	k->ep = NULL;
	return UCS_PTR_IS_PTR(sp) ? sp : NULL;
}

/*
 * Link @l goes, as a client process that exits: its endpoint closed, its
 * worker destroyed, its sends and receives ended with it.
 */
static void link_free(unsigned int l)
{
	void *req = ep_close(l);
	const uint64_t until = real_ns() + WAIT_NS / 10;

	while (req && ucp_request_check_status(req) == UCS_INPROGRESS && real_ns() < until)
		turn();
	if (req)
		ucp_request_free(req);
	ucp_worker_destroy(lk[l].w);
	for (uint32_t i = 0; i < nsends; i++)
		if (sends[i].used && sends[i].l == l && !sends[i].done) {
			sends[i].done = 1;
			free(sends[i].buf);
			sends[i].buf = NULL;
		}
	for (unsigned int i = 0; i < sizeof(rxs) / sizeof(rxs[0]); i++)
		if (rxs[i].buf && rxs[i].l == l) {
			free(rxs[i].buf);
			rxs[i].buf = NULL;
		}
	for (unsigned int i = 0; i < NSLOT; i++)
		if (sl[i].cur == (int)l)
			sl[i].cur = -1;
	lk[l] = (struct link){ 0 };
}

static void progress_clients(void)
{
	for (unsigned int i = 0; i < NLINK; i++)
		while (lk[i].used && ucp_worker_progress(lk[i].w))
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

/*
 * The daemon's books on its endpoints, right after a turn of its poller
 * (nothing of UCX's runs between): the list holds n_eps, each of a peer
 * in the list, a peer's count is the endpoints that name it and its
 * sessions those that do, never more than ND_EPS_PER_CONN; and no endpoint
 * of a connection gone, or one UCX failed, is still open.
 */
static void check_books(void)
{
	uint32_t n = 0;

	for (struct nd_ep *e = nd.eps; e; e = e->next) {
		const struct nd_peer *p = nd.peers;

		while (p && p != e->peer)
			p = p->next;
		if (!p)
			fail("an endpoint of a peer the daemon no longer has");
		if (e->ep && (e->failed || p->gone))
			fail("an endpoint still open after a poller turn, its %s",
			     e->failed ? "failure reported" : "connection gone");
		n++;
	}
	if (n != nd.n_eps)
		fail("%u endpoints listed, %u counted", n, nd.n_eps);
	for (const struct nd_peer *p = nd.peers; p; p = p->next) {
		uint32_t eps = 0, sessions = 0;

		for (const struct nd_ep *e = nd.eps; e; e = e->next)
			eps += e->peer == p;
		for (const struct nd_session *s = nd.sessions; s; s = s->next)
			sessions += s->peer == p;
		if (eps != p->eps || sessions != p->sessions)
			fail("connection %llu's peer counts %u endpoints and %u sessions; %u and %u "
			     "name it", (unsigned long long)p->id, p->eps, p->sessions, eps, sessions);
		if (p->eps > ND_EPS_PER_CONN)
			fail("connection %llu has %u endpoints, more than %u",
			     (unsigned long long)p->id, p->eps, ND_EPS_PER_CONN);
	}
}

/*
 * One turn of everything: the daemon's two loops, the clients, their
 * replies.  The loops go round until no job is between them (jobs.c), as
 * the daemon's two threads would in that time: a SESSION_CREATE crosses
 * three times, and the frames behind it follow.  Bounded: each round
 * handles what the sockets held, and they are not refilled meanwhile.
 */
static void turn(void)
{
	int ret, rounds = 0;

	if (held) {
		ret = nd_control_poll_once(&nd, &ctl, 0);
		if (ret)
			fail("the control loop's poll: %s", strerror(-ret));
		progress_clients();
		read_replies();
		return;
	}
	do {
		ret = nd_control_poll_once(&nd, &ctl, 0);
		if (ret)
			fail("the control loop's poll: %s", strerror(-ret));
		nd_dataplane_poll_once(&nd);
		check_books();
	} while ((nd.to_poller.head || nd.to_control.head) && ++rounds < 64);
	if (nd.to_poller.head || nd.to_control.head)
		fail("control jobs still between the daemon's loops after %d rounds", rounds);
	progress_clients();
	nd_dataplane_poll_once(&nd);
	check_books();
	read_replies();
	if (steps_in_flight()) {	/* the devices' threads: wait a little for them */
		struct pollfd pfd[NDEV];

		for (uint32_t d = 0; d < nd.n_dev; d++)
			pfd[d] = (struct pollfd){ .fd = nelssa_pnm_event_fd(nd.dev[d].pnm),
						  .events = POLLIN };
		poll(pfd, nd.n_dev, 1);
	}
}

/*
 * Whether send @s must complete: UCX ends it, one way or the other, on an
 * endpoint with error handling; on one without, only while the daemon's
 * end stands, as it certainly does while its connection does.
 */
static int must_end(const struct hsend *s)
{
	const struct link *k = &lk[s->l];

	return s->used && !s->done && k->used && (k->eh || (k->sure_ok && link_alive(k)));
}

static int sends_pending(void)
{
	for (uint32_t i = 0; i < nsends; i++)
		if (must_end(&sends[i]))
			return 1;
	return 0;
}

/* Turns until nothing moves: no step on a device, no send of ours in progress. */
static void settle(void)
{
	const uint64_t until = real_ns() + WAIT_NS;

	held = 0;	/* what settles needs the poller */
	for (int i = 0; i < 4 || steps_in_flight() || sends_pending(); i++) {
		turn();
		if (real_ns() > until)
			return;		/* the baseline check says what is stuck */
	}
}

/* ---- Control connections ---- */

static void slot_lost(struct slot *c)
{
	c->lost = 1;
	c->nq = 0;
	for (uint32_t i = 0; i < nss; i++)
		if (ss[i].slot == c - sl && ss[i].state == S_OPEN)
			ss[i].state = S_MAYBE;
}

/*
 * HELLO_OK: the listener's port, a key of this connection's alone (never
 * 0, none other open has it), and shared memory only where asked (@asked:
 * 1 or 0; -1 where a raw HELLO may have asked) and the daemon has it.
 */
static void hello_ok(struct slot *c, const struct nelssa_msg *m, int asked)
{
	const uint64_t key = m->u.hello_ok.key;

	if (m->u.hello_ok.version != NELSSA_PROTO_VERSION || m->u.hello_ok.devices != nd.n_dev ||
	    m->u.hello_ok.data_port != nd.data_port)
		fail("slot %td: HELLO_OK of version %u, %u devices, data port %u (the daemon's: %u)",
		     c - sl, m->u.hello_ok.version, m->u.hello_ok.devices, m->u.hello_ok.data_port,
		     nd.data_port);
	if ((m->u.hello_ok.flags & NELSSA_HELLO_SHM) && (!asked || !nd.shm_ok))
		fail("slot %td: shared memory granted, %s", c - sl,
		     asked ? "the daemon having none" : "not asked for");
	for (unsigned int i = 0; i < NSLOT; i++)
		if (sl[i].key == key && &sl[i] != c && sl[i].fd >= 0 && !sl[i].eof)
			fail("slot %td: HELLO_OK gave it slot %u's key", c - sl, i);
	c->key = key;
	c->data_port = m->u.hello_ok.data_port;
	c->shm = !!(m->u.hello_ok.flags & NELSSA_HELLO_SHM);
	c->key_eps = 0;
	c->key_freed = 0;
	c->cur = -1;
}

static void got_frame(struct slot *c, const uint8_t *f, size_t len)
{
	struct nelssa_msg m;
	struct expect *e;
	int ret = nelssa_msg_decode(f, len, &m);

	if (ret)
		fail("slot %td: a reply that does not decode: %s", c - sl, strerror(-ret));
	if (c->barrier && m.seq == c->barrier_seq)
		c->barrier = 0;
	if (c->barrier && m.type == NELSSA_MSG_ERROR && m.u.error.code == -ETIMEDOUT)
		fail("slot %td: timed out (%s) while its request %u waited for the poller%s", c - sl,
		     m.u.error.msg, c->barrier_seq, held ? ", held" : "");
	if (m.type != NELSSA_MSG_HELLO_OK && m.type != NELSSA_MSG_SESSION_OK &&
	    m.type != NELSSA_MSG_OK && m.type != NELSSA_MSG_STATS_REPLY &&
	    m.type != NELSSA_MSG_REQ_OK && m.type != NELSSA_MSG_RKEY &&
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
					  .key = c->key, .slot = (int)(c - sl),
					  .state = c->lost ? S_MAYBE : S_OPEN };
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
	if (m.type == NELSSA_MSG_HELLO_OK)	/* a lost connection's too: its key */
		hello_ok(c, &m, c->nq && c->q[0].seq == m.seq && c->q[0].type == NELSSA_MSG_HELLO &&
			 !c->lost ? c->q[0].shm : -1);
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
	case NELSSA_MSG_REQ_ALLOC:
		ret = m.type == NELSSA_MSG_REQ_OK;
		break;
	case NELSSA_MSG_RKEY_GET:
		ret = m.type == NELSSA_MSG_RKEY;
		break;
	default:
		ret = m.type == NELSSA_MSG_OK;
		break;
	}
	if (!ret && m.type != NELSSA_MSG_ERROR)
		fail("slot %td: %s answers %s", c - sl, nelssa_msg_type_str(m.type),
		     nelssa_msg_type_str(e->type));
	if (e->refused && m.type != NELSSA_MSG_ERROR)
		fail("slot %td: a HELLO of versions %s taken", c - sl, "the daemon does not speak");
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
	uint64_t old_key;
	int one = 1;

	if (c->fd >= 0 && !c->eof)
		return;
	if (c->fd >= 0)
		close(c->fd);	/* refused or closed by the daemon: a new one */
	old_key = c->key ? c->key : c->old_key;
	memset(c, 0, sizeof(*c));
	c->old_key = old_key;
	c->cur = -1;
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

/*
 * A SESSION_CREATE of @c sent and not yet answered: the daemon reads the
 * requests after it only once it is answered, and the session it makes
 * has an id this file cannot know yet -- any id it does not know may be
 * that one.
 */
static int creating(const struct slot *c)
{
	for (uint32_t i = 0; i < c->nq; i++)
		if (c->q[i].type == NELSSA_MSG_SESSION_CREATE)
			return 1;
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
/*
 * A HELLO as protocol version 2 wrote it: versions, the length of the UCX
 * worker address that followed the name, the address -- here of bytes of
 * the input, first a header version UCX 1.13 aborts on (6; it knows 0 and
 * 1), which the daemon once passed to UCX.  Refused, as its versions are.
 */
static int legacy_hello(struct slot *c, struct rd *r, uint8_t *f, size_t *len, struct expect *e)
{
	const uint32_t n = 1 + u8(r) % 64;
	uint8_t *p = f + NELSSA_PROTO_HDR_BYTES;
	const uint32_t plen = 40 + n;
	const struct nelssa_msg_hdr h = { .magic = NELSSA_PROTO_MAGIC, .version = 2,
					  .type = NELSSA_MSG_HELLO, .length = plen,
					  .seq = c->seq };

	memset(f, 0, NELSSA_PROTO_HDR_BYTES + plen);
	for (int i = 0; i < 4; i++) {
		f[i] = (uint8_t)(h.magic >> 8 * i);
		f[8 + i] = (uint8_t)(h.length >> 8 * i);
		f[12 + i] = (uint8_t)(h.seq >> 8 * i);
		p[4 + i] = (uint8_t)(n >> 8 * i);
	}
	f[4] = (uint8_t)h.version;
	f[6] = (uint8_t)h.type;
	p[0] = 1;		/* min_version */
	p[2] = 2;		/* max_version */
	memcpy(p + 8, "fuzz-v2", 7);
	for (uint32_t i = 0; i < n; i++)
		p[40 + i] = u8(r);
	p[40] = (uint8_t)((p[40] & 0xf0) | 6);
	*len = NELSSA_PROTO_HDR_BYTES + plen;
	e->seq = h.seq;
	e->type = NELSSA_MSG_HELLO;
	e->refused = 1;
	c->seq++;
	return 0;
}

static int build(struct slot *c, unsigned int kind, struct rd *r, uint8_t *f, size_t *len,
		 struct expect *e)
{
	struct nelssa_msg m = { .seq = c->seq };
	uint8_t sel;

	memset(e, 0, sizeof(*e));
	switch (kind) {
	case OP_HELLO: {
		/*
		 * @mode: shared memory asked or not, a flag no version has
		 * (refused), or a HELLO of version 2, with the worker
		 * address it carried (refused, the address never read).
		 */
		const uint8_t mode = u8(r), ver = u8(r);

		m.type = NELSSA_MSG_HELLO;
		m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
		if (ver % 4 == 1)
			m.u.hello.min_version = 1, m.u.hello.max_version = 3;
		else if (ver % 4 == 2)
			m.u.hello.min_version = 3, m.u.hello.max_version = 5;
		else if (ver % 4 == 3)
			m.u.hello.min_version = m.u.hello.max_version = 1;
		e->refused = ver % 4 == 3;
		snprintf(m.u.hello.name, sizeof(m.u.hello.name), "fuzz-%td", c - sl);
		if (mode % 4 == 1)
			m.u.hello.flags = NELSSA_HELLO_SHM;
		else if (mode % 4 == 2)
			m.u.hello.flags = 1u << (1 + (mode >> 2) % 31);
		e->shm = mode % 4 == 1;
		trace("  hello: versions %u..%u, flags %#x%s", m.u.hello.min_version,
		      m.u.hello.max_version, m.u.hello.flags, mode % 4 == 3 ? ", version 2's" : "");
		if (mode % 4 == 3)
			return legacy_hello(c, r, f, len, e);
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
		/* Bit 7 of the dim byte: K and V blocks adjacent (NELSSA_KV_ADJACENT). */
		m.u.create.shape.kv_layout = dim >> 7;
		m.u.create.shape.kv_dtype = 1 + (kind2 & 1);
		m.u.create.placement = (kind2 >> 1) & 1;
		/* bf16 dot products; with bit 3 a flag no version defines (refused). */
		m.u.create.shape.attn_flags = (uint8_t)((kind2 & 4 ? NELSSA_ATTN_BF16_DOTS : 0) |
							(kind2 & 8 ? 0x80 : 0));
		m.u.create.max_batch = batch & 0x80 ? (uint32_t)batch << 4 : 1u + batch % 4;
		m.u.create.max_sel = msel & 0x80 ? (uint32_t)msel << 8 : 1u + msel % 16;
		m.u.create.capacity_tokens = caps[cap % 8] + (cap >> 3);
		e->shape = m.u.create.shape;
		trace("  create: %u layers, %u/%u heads, dim %u, KV type %u, layout %u, placement %u",
		      m.u.create.shape.layers, m.u.create.shape.q_heads, m.u.create.shape.kv_heads,
		      m.u.create.shape.head_dim, m.u.create.shape.kv_dtype,
		      m.u.create.shape.kv_layout, m.u.create.placement);
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
			v.u.create.shape = (struct nelssa_shape){ 1, 1, 1, 8, 1, 0,
								       NELSSA_KV_PACKED };
			v.u.create.max_batch = v.u.create.max_sel = 1;
			v.u.create.capacity_tokens = 1;
		} else if (m.type == NELSSA_MSG_REQ_ALLOC || m.type == NELSSA_MSG_REQ_FREE) {
			v.u.req.session = 1;
			v.u.req.max_tokens = v.u.req.max_clusters = 1;
		} else if (m.type == NELSSA_MSG_CLOSE || m.type == NELSSA_MSG_STATS) {
			v.u.session.session = 1;
		} else if (m.type == NELSSA_MSG_HELLO) {
			v.u.hello.min_version = v.u.hello.max_version = 1;
			v.u.hello.flags = 0;
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
			p[14] = m.u.create.shape.attn_flags;
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
			for (int i = 0; i < 4; i++)
				p[4 + i] = (uint8_t)(m.u.hello.flags >> 8 * i);
		}
		e->type = 0;	/* malformed: an ERROR, and the connection ends */
	}
	c->seq++;
	/*
	 * Isolation: a session this connection does not hold is one that
	 * never existed -- unless it is the one a create in flight makes.
	 */
	if ((m.type == NELSSA_MSG_REQ_ALLOC || m.type == NELSSA_MSG_REQ_FREE ||
	     m.type == NELSSA_MSG_CLOSE) && e->type && c->hello_ok && !creating(c))
		e->enoent = !holds(c, m.type == NELSSA_MSG_CLOSE ? m.u.session.session
								 : m.u.req.session);
	if (m.type == NELSSA_MSG_STATS && m.u.session.session && e->type && c->hello_ok &&
	    !c->admin && !creating(c))
		e->enoent = !holds(c, m.u.session.session);
	if (m.type == NELSSA_MSG_CLOSE)
		e->session = m.u.session.session;
	return 0;
}

/*
 * A request; with @tail, the first bytes of another frame follow it in
 * the same write, so the daemon reads them with the request: a partial
 * frame it holds while the request is with the poller.
 */
static void control_op(struct slot *c, unsigned int kind, struct rd *r, int tail)
{
	uint8_t f[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD + 9];
	struct expect e;
	size_t len;

	if (build(c, kind, r, f, &len, &e) || c->fd < 0)
		return;
	if (tail) {
		memcpy(f + len, f, 9);	/* a header's magic, version, type, a length byte */
		len += 9;
	}
	if (!e.type || c->lost) {
		slot_lost(c);
	} else if (c->nq < sizeof(c->q) / sizeof(c->q[0])) {
		c->q[c->nq++] = e;
		if (kind == OP_HELLO || kind == OP_CREATE) {
			c->barrier = 1;
			c->barrier_seq = e.seq;
		}
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

		if (build(c, kind, r, f, &len, &e))
			return;
		at = u16(r);
		x = u8(r);
		f[at % len] ^= x ? x : 1;
		break;
	}
	case 2: {	/* a frame cut short: the rest never comes */
		const unsigned int kind = OP_HELLO + u8(r) % 6;
		const uint8_t keep = u8(r);

		if (build(c, kind, r, f, &len, &e))
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
 * The link a data message of slot @w goes from (@mode, bit 3: the next
 * slot's instead): its current one, or a new one with its connection's key
 * (none before HELLO_OK) when it has none open or bit 7 asks for one more;
 * bit 6: with peer error handling even where shared memory was granted.
 */
static int pick_link(unsigned int w, uint8_t mode)
{
	struct slot *c;

	if (mode & 8)
		w = (w + 1) % NSLOT;
	c = &sl[w];
	if (c->cur >= 0 && lk[c->cur].ep && !(mode & 0x80))
		return c->cur;
	return link_open(w, c->key ? K_RIGHT : K_NONE, 0, (mode & 0x40) || !c->shm);
}

/* Whether the daemon may serve a message naming @m from @k: only its connection's. */
static int served_ok(const struct link *k, const struct hsess *m)
{
	return m && k->id && k->id == m->key;
}

/*
 * Sends an active message from link @l: @mode's low bits eager,
 * rendezvous or UCX's choice; bit 2: do not wait for the answer.  Waits,
 * unless told not to, for the answer; fails when @must and it does not
 * come, or when it is not @want (0: any).
 */
static void am_send(int l, uint8_t mode, unsigned int id, uint64_t key, uint8_t *buf,
		    size_t hdr_len, size_t len, int must, int32_t want, uint32_t items,
		    uint32_t out_bytes)
{
	ucp_request_param_t p = { 0 };
	struct hsend *s;
	ucs_status_ptr_t sp;
	uint64_t until;

	if (l < 0 || !lk[l].ep || nsends == NSEND) {
		free(buf);
		return;
	}
	s = &sends[nsends++];
	*s = (struct hsend){ .used = 1, .l = (unsigned int)l, .id = id, .key = key, .buf = buf,
			     .nr_items = items, .out_bytes = out_bytes, .status = 1 };
	p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			 UCP_OP_ATTR_FIELD_FLAGS;
	p.cb.send = send_done;
	p.user_data = s;
	p.flags = UCP_AM_SEND_FLAG_REPLY | (mode % 4 == 1 ? UCP_AM_SEND_FLAG_EAGER :
					    mode % 4 == 2 ? UCP_AM_SEND_FLAG_RNDV : 0);
	trace("    %s %llu (id %u) from link %d: %zu + %zu bytes, %s%s%s", id == NELSSA_AM_KV ? "KV" :
	      id == NELSSA_AM_STEP ? "step" : "AM", (unsigned long long)key, id, l, hdr_len, len,
	      mode % 4 == 1 ? "eager" : mode % 4 == 2 ? "rendezvous" : "either",
	      mode & 4 ? ", not waiting" : "", must ? ", must be answered" : "");
	sp = ucp_am_send_nbx(lk[l].ep, id, buf, hdr_len, buf + hdr_len, len, &p);
	if (!UCS_PTR_IS_PTR(sp)) {
		s->done = 1;
		free(s->buf);
		s->buf = NULL;
		if (UCS_PTR_IS_ERR(sp))
			return;
	}
	if (mode & 4)
		return turn();
	/*
	 * An answer that must come is waited for; one that may not, a few
	 * turns.  The poller answers, so a hold ends here.  It must come only
	 * while the link still answers: a frame sent before on the link's
	 * connection may end it meanwhile (an ERROR the daemon owed it), and
	 * its endpoints close with it.
	 */
	held = 0;
	until = real_ns() + WAIT_NS;
	for (int n = 0; !s->replies && ((must && link_answers(&lk[l])) || n < 8 ||
					(n < 256 && steps_in_flight())); n++) {
		turn();
		if (real_ns() > until)
			fail("%s %llu: no answer in %llu ms", id == NELSSA_AM_KV ? "KV" : "step",
			     (unsigned long long)key, (unsigned long long)(WAIT_NS / MS));
	}
	for (int n = 0; !s->done && n < 64; n++)
		turn();
	if (s->replies && want && s->status != want)
		fail("%s %llu not of an open session of its endpoint's connection, with its token: "
		     "%d, not %d", id == NELSSA_AM_KV ? "KV" : "step", (unsigned long long)key,
		     s->status, want);
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
	int l, ok, rows;

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
	/*
	 * tmode 0xc0 and up: a KV_ROWS message instead, of part (tmode >> 2)
	 * % 6 (1-4 are parts, 0 and 5 none); the fields its part does not use
	 * zeroed unless tmode bit 1 is set; a KV part (whole K-then-V blocks of
	 * an adjacent session) from a block boundary unless bit 0 is.
	 */
	rows = tmode >= 0xc0;
	if (rows) {
		k.part = (uint8_t)((tmode >> 2) % 6);
		if (!(tmode & 2) && k.part == NELSSA_KV_PART_TABLE)
			k.first_token = k.nr_tokens = 0;
		else if (!(tmode & 2))
			k.first_cluster = k.nr_clusters = 0;
		if (k.part == NELSSA_KV_PART_KV && !(tmode & 1))
			k.first_token &= ~15u;
		len = k.part == NELSSA_KV_PART_TABLE ? 8ull * k.nr_clusters :
		      k.part == NELSSA_KV_PART_KV ? 64ull * ((k.nr_tokens + 15) / 16) * dim :
						    2ull * k.nr_tokens * dim;
	}
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
	if (!rows && tmode % 2 == 0 && len == 4ull * k.nr_tokens * dim + 8ull * k.nr_clusters) {
		uint8_t *t = buf + hdr_len + 4ull * k.nr_tokens * dim;
		const uint32_t n = k.nr_clusters, per = n ? k.nr_tokens / n : 0;

		for (uint32_t i = 0; i < n; i++) {
			const uint32_t first = k.first_token + i * per;
			const uint32_t count = i + 1 == n ? k.nr_tokens - i * per : per;

			memcpy(t + 8ull * i, &first, 4);
			memcpy(t + 8ull * i + 4, &count, 4);
		}
	}
	l = pick_link(w, smode);
	ok = l >= 0 && served_ok(&lk[l], m);
	trace("  kv%s: session %llu (%s token%s) request %llu layer %u head %u tokens %u+%u "
	      "clusters %u+%u part %u", rows ? " rows" : "", (unsigned long long)id,
	      m ? "its" : "no open session's", m && !ok ? ", another connection's endpoint" : "",
	      (unsigned long long)k.request, k.layer, k.head, k.first_token, k.nr_tokens,
	      k.first_cluster, k.nr_clusters, k.part);
	/*
	 * Acknowledged always on an endpoint the daemon took; by its cookie
	 * when the header is whole (else cookie 0).
	 */
	am_send(l, smode, rows ? NELSSA_AM_KV_ROWS : NELSSA_AM_KV, k.cookie, buf, hdr_len, len,
		hmode == 0 && l >= 0 && link_answers(&lk[l]), ok ? 0 : -ENOENT, 0, 0);
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
	int must, l, ok;

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
	 * Its answer comes on the endpoint it came on, if the daemon took
	 * it and it stands: at once when refused; for a served step, when
	 * the devices are done, while its session is open.
	 */
	l = pick_link(w, smode);
	ok = l >= 0 && served_ok(&lk[l], m);
	must = hdr_len == NELSSA_STEP_HDR_BYTES && l >= 0 && link_answers(&lk[l]) &&
	       (!ok || m->state == S_OPEN);
	trace("  step: session %llu (%s token%s) layer %u, %u items, %zu bytes",
	      (unsigned long long)id, m ? "its" : "no open session's",
	      m && !ok ? ", another connection's endpoint" : "", sh.layer, sh.nr_items, len);
	am_send(l, smode, NELSSA_AM_STEP, sh.step, buf, hdr_len, len, must, ok ? 0 : -ENOENT,
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
	am_send(pick_link(w, smode), smode | 4, id, ++next_key, buf, hdr_len, len, 0, 0, 0, 0);
}

/* ---- One input ---- */


static void check_baseline(void)
{
	const uint64_t until = real_ns() + WAIT_NS;
	int ok = 0;

	while (!ok) {
		turn();
		ok = !ctl.n && !nd.sessions && !nd.n_sessions && !nd.peers && !nd.eps &&
		     !nd.n_eps && !nd.rndv && !nd.rndv_bytes && !steps_in_flight();
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
		     "sessions (%u counted), %u peers, %u endpoints, %u rendezvous receives "
		     "(%llu bytes), device memory reserved %llu + %llu",
		     (unsigned long long)(WAIT_NS / MS), ctl.n, sessions, nd.n_sessions, peers,
		     nd.n_eps, nd.rndv, (unsigned long long)nd.rndv_bytes,
		     (unsigned long long)nd.dev[0].reserved, (unsigned long long)nd.dev[1].reserved);
	}
	if (nd.stage && nd.stage_free != (1u << ND_STAGE_SLOTS) - 1)
		fail("staging slots still taken: %#x free", nd.stage_free);
}

/*
 * The end of an input: the sends that must end do (on the endpoints with
 * error handling, and those without whose connection stands), then every
 * connection goes (RST), the daemon must come back to its baseline -- and
 * the endpoints of the connections gone with it -- and the workers go.
 */
static void end_input(void)
{
	settle();
	for (uint32_t i = 0; i < nsends; i++)
		if (must_end(&sends[i]))
			fail("a send of ours never completed (message %u, %llu, link %u)",
			     sends[i].id, (unsigned long long)sends[i].key, sends[i].l);
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
	for (unsigned int i = 0; i < NLINK; i++)
		if (lk[i].used)
			link_free(i);
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
	if (nd_sends_in_flight() || nd.rndv)
		return;		/* another time */
	fprintf(stderr, "fuzz_daemon: UCX started again (%u mappings, %u after the last start)\n",
		maps(), maps_base);
	ucp_cleanup(cctx);	/* the links went at the end of the input */
	nd_dataplane_stop(&nd);
	nd.stop = 0;
	if (nd_dataplane_init(&nd))
		fail("the daemon's data path, started again");
	if (nelssa_link_context(NELSSA_LINK_RMA, &cctx) != UCS_OK)
		fail("UCX for the clients");
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
	c->max_unread_kib = 256;	/* the default */
	c->idle_timeout_ms = IDLE_MS;
	c->n_admin = 1;
	c->admin[0].family = AF_INET;
	c->admin[0].a[0] = 127;
	c->admin[0].a[3] = 1;
	c->verbose = 1;		/* every refusal logged, into the ring */
	c->emulated_rma = 1;	/* zero-copy over TCP and shared memory: its paths fuzzed */
	if (nd_jobs_init(&nd))
		fail("the daemon's job queues");
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
	/* The data path's listener binds the control address's host. */
	lfd = nd_control_listen(&nd);
	if (lfd < 0)
		fail("the daemon's listener");
	if (nd_dataplane_init(&nd))
		fail("the daemon's data path");
	if (nd_control_init(&nd, &ctl, lfd))
		fail("the daemon's control loop");
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
	 * (kernel.shmmni), which other processes may have taken; and TCP,
	 * which UCX's client/server flow sets every connection up over, and
	 * which carries the endpoints with peer error handling.
	 */
	setenv("UCX_TLS", getenv("NELSSA_FUZZ_TLS") ? getenv("NELSSA_FUZZ_TLS") : "posix,cma,tcp",
	       1);
	signal(SIGPIPE, SIG_IGN);
	daemon_setup();
	if (nelssa_link_context(NELSSA_LINK_RMA, &cctx) != UCS_OK)
		fail("UCX for the clients");
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
	memset(&nd.stats, 0, sizeof(nd.stats));
	nss = 0;
	nsends = 0;
	for (unsigned int i = 0; i < NSLOT; i++) {
		memset(&sl[i], 0, sizeof(sl[i]));
		sl[i].fd = -1;
		sl[i].cur = -1;
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
			control_op(c, kind, &r, b & 0x10);
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
			if (c->cur >= 0) {
				void *req = ep_close((unsigned int)c->cur);

				if (req)
					ucp_request_free(req);
				c->cur = -1;
				turn();
			}
			break;
		case OP_LINK: {
			const uint8_t mode = u8(&r);

			/* Bit 7: error handling other than the daemon's end has. */
			link_open(i, (enum key_mode)((mode & 7) % K_MODES), mode >> 3 & 0x0f,
				  !c->shm ^ !!(mode & 0x80));
			turn();
			break;
		}
		case OP_SETTLE:
			settle();
			break;
		case OP_HOLD:
			held = !held;
			turn();
			break;
		}
	}
	end_input();
	if (++inputs % 256 == 0 && maps() > maps_base + REFRESH_MAPS)
		ucx_refresh();
	return 0;
}
