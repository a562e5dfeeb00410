// SPDX-License-Identifier: MIT
/*
 * A raw UCX peer of nelssad for the crash-consistency tests (tier T1,
 * check-crash.sh): it says HELLO on the control path and then does one of
 *
 *   eps N [close|exit [HOLD_MS]]
 *                   opens N endpoints to the daemon's data path from one
 *                   worker (its connection's key), sends a KV message
 *                   naming no session on each (answered -ENOENT on an
 *                   endpoint the daemon took; it takes ND_EPS_PER_CONN, 2,
 *                   and rejects the others' connection requests), waits
 *                   until each is answered or failed (10 s at most), keeps
 *                   them open HOLD_MS more (default 0) and exits without
 *                   closing them -- as a process that ends does -- or, with
 *                   "close", closes them first.  Prints "answered A of N,
 *                   rejected R".
 *   wireup STAGE    stops at a point of the UCX wire-up with the daemon,
 *                   prints "ready" and waits to be killed there:
 *                     created  right after ucp_ep_create(), nothing progressed
 *                     sent     its first active message (a KV for no session)
 *                              posted, not progressed
 *                     step     with a session and a request, a STEP posted
 *                     acked    the first KV message answered: wire-up done
 *                   With "die MS", instead of printing "ready" it goes on
 *                   progressing its worker for MS ms and then kills itself
 *                   (SIGKILL): a death at a point of its own progress.
 *                   With "gated", it prints "hello" once HELLO is done and
 *                   reads a line from stdin before it opens the endpoint, so
 *                   that a test can stop the daemon (SIGSTOP) first: the
 *                   daemon then meets the wire-up of a peer already dead.
 *
 * Messages are built with the protocol's encoders (nelssa_msg_encode(),
 * nelssa_kv_hdr_put(), nelssa_step_hdr_put()); exit 0 when the control
 * connection and UCX came up (and, for eps, every endpoint was answered or
 * failed).
 *
 * usage: crash_peer HOST PORT eps N [close|exit [HOLD_MS]] |
 *        crash_peer HOST PORT wireup created|sent|step|acked [gated | die MS]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/link.h>
#include <nelssa/proto.h>

static ucp_worker_h worker;
static unsigned int answered, rejected;
static int fd = -1;
static uint32_t seq;

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int ctl_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res;
	int s;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	s = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (s >= 0 && connect(s, res->ai_addr, res->ai_addrlen)) {
		close(s);
		s = -1;
	}
	freeaddrinfo(res);
	return s;
}

static int read_all(uint8_t *p, size_t n)
{
	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 20000) != 1)
			return -ETIMEDOUT;
		r = recv(fd, p, n, 0);
		if (r <= 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One request, one reply: 0 or a negative errno (an ERROR reply: its code). */
static int ctl_call(struct nelssa_msg *m, struct nelssa_msg *r)
{
	static uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	struct nelssa_msg_hdr h;
	size_t len;
	int ret;

	m->seq = ++seq;
	ret = nelssa_msg_encode(m, buf, sizeof(buf), &len);
	if (ret)
		return ret;
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -EIO;
	ret = read_all(buf, NELSSA_PROTO_HDR_BYTES);
	if (!ret)
		ret = nelssa_msg_decode_hdr(buf, &h);
	if (!ret)
		ret = read_all(buf + NELSSA_PROTO_HDR_BYTES, h.length);
	if (!ret)
		ret = nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + h.length, r);
	if (!ret && r->type == NELSSA_MSG_ERROR) {
		printf("# %s refused: %s\n", nelssa_msg_type_str(m->type), r->u.error.msg);
		ret = r->u.error.code;
	}
	return ret;
}

static ucs_status_t on_am(void *arg, const void *header, size_t header_length, void *data,
			  size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssa_ack_hdr a;

	(void)arg;
	(void)data;
	(void)length;
	(void)param;
	if (!nelssa_ack_hdr_get(header, header_length, &a))
		answered++;
	return UCS_OK;
}

static void sent(void *request, ucs_status_t status, void *user_data)
{
	(void)status;
	(void)user_data;
	ucp_request_free(request);
}

/* Posts one active message; UCX owns @hdr and @data (static here) until it is done. */
static void am_post(ucp_ep_h ep, unsigned int id, const void *hdr, size_t hdr_len,
		    const void *data, size_t len)
{
	ucp_request_param_t prm = { 0 };

	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY;
	prm.cb.send = sent;
	ucp_am_send_nbx(ep, id, hdr, hdr_len, data, len, &prm);
}

/* An endpoint rejected by the daemon (or failed otherwise): it is done. */
static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
	(void)arg;
	(void)ep;
	(void)status;
	rejected++;
}

static int ep_open(const struct nelssa_msg *hello_ok, ucp_ep_h *ep)
{
	return nelssa_link_connect(worker, fd, hello_ok->u.hello_ok.data_port,
				   hello_ok->u.hello_ok.flags & NELSSA_HELLO_SHM, ep_failed, NULL,
				   ep) == UCS_OK ? 0 : -EIO;
}

static int die_ms = -1;	/* "die MS": progress that long, then SIGKILL itself */

static void ready(void)
{
	if (die_ms >= 0) {
		const uint64_t end = now_ms() + (uint64_t)die_ms;

		while (now_ms() < end)
			ucp_worker_progress(worker);
		raise(SIGKILL);
	}
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	static struct nelssa_msg m, r, hello_ok;
	static uint8_t kv[NELSSA_KV_HDR_BYTES], step[NELSSA_STEP_HDR_BYTES];
	static uint8_t step_data[NELSSA_STEP_ITEM_BYTES + 4 * 64];
	const struct nelssa_kv_hdr nokv = { .session = 999999, .token = 1, .cookie = 7,
					    .nr_tokens = 1 };
	ucp_am_handler_param_t ap = { 0 };
	ucp_context_h ucp;
	ucp_ep_h *eps, ep;
	unsigned int n = 0;
	int ret;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 4 || (strcmp(argv[3], "eps") && strcmp(argv[3], "wireup")) || argc < 5) {
		fprintf(stderr, "usage: crash_peer HOST PORT eps N [close|exit [HOLD_MS]] | "
			"wireup created|sent|step|acked [gated | die MS]\n");
		return 2;
	}
	fd = ctl_connect(argv[1], argv[2]);
	if (fd < 0) {
		printf("# cannot connect to %s:%s\n", argv[1], argv[2]);
		return 1;
	}
	m.type = NELSSA_MSG_HELLO;
	m.u.hello.min_version = m.u.hello.max_version = NELSSA_PROTO_VERSION;
	m.u.hello.flags = NELSSA_HELLO_SHM;	/* granted where it can be */
	strcpy(m.u.hello.name, "crash-peer");
	ret = ctl_call(&m, &hello_ok);
	if (ret || hello_ok.type != NELSSA_MSG_HELLO_OK) {
		printf("# HELLO: %d\n", ret);
		return 1;
	}
	if (nelssa_link_context(NELSSA_LINK_RMA, &ucp) != UCS_OK ||
	    nelssa_link_worker(ucp, hello_ok.u.hello_ok.key, &worker) != UCS_OK) {
		printf("# UCX setup failed\n");
		return 1;
	}
	/* Handlers for ids 0..4 in ascending order (see nd_dataplane_start()). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_am;
	for (ap.id = 0; ap.id <= NELSSA_AM_STEP_REPLY; ap.id++)
		ucp_worker_set_am_recv_handler(worker, &ap);
	nelssa_kv_hdr_put(kv, &nokv);
	if (!strcmp(argv[3], "eps")) {
		const unsigned int want = (unsigned int)atoi(argv[4]);
		uint64_t end;

		eps = calloc(want + 1, sizeof(*eps));
		for (n = 0; eps && n < want && !ep_open(&hello_ok, &eps[n]); n++)
			am_post(eps[n], NELSSA_AM_KV, kv, sizeof(kv), "x", 1);
		end = now_ms() + 10000;
		while (answered + rejected < n && now_ms() < end)
			ucp_worker_progress(worker);
		printf("answered %u of %u, rejected %u (%u endpoints opened)\n", answered, want,
		       rejected, n);
		if (argc > 6) {
			/* Held open (and answering) while the daemon's keepalive rounds run. */
			end = now_ms() + (uint64_t)atoi(argv[6]);
			while (now_ms() < end)
				ucp_worker_progress(worker);
		}
		if (argc > 5 && !strcmp(argv[5], "close")) {
			for (unsigned int i = 0; i < n; i++) {
				ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
							    .flags = UCP_EP_CLOSE_FLAG_FORCE };
				ucs_status_ptr_t sp = ucp_ep_close_nbx(eps[i], &prm);

				end = now_ms() + 2000;
				while (UCS_PTR_IS_PTR(sp) &&
				       ucp_request_check_status(sp) == UCS_INPROGRESS && now_ms() < end)
					ucp_worker_progress(worker);
				if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
					ucp_request_free(sp);
			}
			ucp_worker_destroy(worker);
			ucp_cleanup(ucp);
		}
		/* Otherwise: exit as a process does, the endpoints left open. */
		return n == want && answered + rejected == want ? 0 : 1;
	}
	if (!strcmp(argv[4], "step")) {
		struct nelssa_step_hdr sh = { .step = 1, .nr_items = 1 };
		struct nelssa_step_item it = { .request = 1, .head = 0, .nr_sel = 0 };

		memset(&m, 0, sizeof(m));
		m.type = NELSSA_MSG_SESSION_CREATE;
		m.u.create.shape = (struct nelssa_shape){ 1, 1, 1, 64, 1, 0, NELSSA_KV_PACKED };
		m.u.create.max_batch = 1;
		m.u.create.max_sel = 4;
		m.u.create.capacity_tokens = 64;
		ret = ctl_call(&m, &r);
		if (ret || r.type != NELSSA_MSG_SESSION_OK) {
			printf("# SESSION_CREATE: %d\n", ret);
			return 1;
		}
		sh.session = r.u.session_ok.session;
		sh.token = r.u.session_ok.token;
		memset(&m, 0, sizeof(m));
		m.type = NELSSA_MSG_REQ_ALLOC;
		m.u.req.session = sh.session;
		m.u.req.request = 1;
		m.u.req.max_tokens = 64;
		m.u.req.max_clusters = 8;
		ret = ctl_call(&m, &r);
		if (ret) {
			printf("# REQ_ALLOC: %d\n", ret);
			return 1;
		}
		nelssa_step_hdr_put(step, &sh);
		nelssa_step_item_put(step_data, &it);	/* then one group's queries: zeros */
	}
	if (argc > 6 && !strcmp(argv[5], "die"))
		die_ms = atoi(argv[6]);
	if (argc > 5 && !strcmp(argv[5], "gated")) {
		char line[16];

		/* The test stops the daemon now: the wire-up meets a stopped peer. */
		printf("hello\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
	}
	if (ep_open(&hello_ok, &ep)) {
		printf("# cannot reach the daemon's data path\n");
		return 1;
	}
	if (!strcmp(argv[4], "created"))
		ready();
	if (!strcmp(argv[4], "step")) {
		am_post(ep, NELSSA_AM_STEP, step, sizeof(step), step_data, sizeof(step_data));
		ready();
	}
	am_post(ep, NELSSA_AM_KV, kv, sizeof(kv), "x", 1);
	if (!strcmp(argv[4], "sent"))
		ready();
	{
		const uint64_t end = now_ms() + 10000;

		while (!answered && now_ms() < end)
			ucp_worker_progress(worker);
	}
	if (!answered) {
		printf("# the first KV message was never answered\n");
		return 1;
	}
	ready();
	return 0;
}
