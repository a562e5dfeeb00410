// SPDX-License-Identifier: MIT
/*
 * A raw UCX peer of nelssad for the daemon's end-to-end tests (tier T1):
 * says HELLO on the control path, connects to the data path it gets back
 * (nelssa/link.h) and sends active messages of every id the daemon does not take --
 * 0, 2, 4, 6 and 7 inside UCX's table of handlers, 8 and 65535 beyond it,
 * eager and rendezvous -- each of which must be dropped -- and UCX's own
 * emulated put to an address the daemon never gave out.  Then a KV
 * message naming no session must still be answered with -ENOENT on the
 * data path, and a STATS request on the control path: the daemon lives
 * and serves.  Prints "# ..." comments; exit 0 when all of that held.
 *
 * usage: am_ids HOST PORT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <poll.h>
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
static int acked;
static int32_t ack_status;

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
	int fd;

	if (getaddrinfo(host, port, &hints, &res))
		return -1;
	fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
	if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen)) {
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

static int read_all(int fd, uint8_t *p, size_t n)
{
	while (n) {
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		ssize_t r;

		if (poll(&pfd, 1, 10000) != 1)
			return -ETIMEDOUT;
		r = recv(fd, p, n, 0);
		if (r <= 0)
			return -ECONNRESET;
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

/* One request, one reply: 0 or a negative errno. */
static int ctl_call(int fd, const struct nelssa_msg *m, struct nelssa_msg *r)
{
	static uint8_t buf[NELSSA_PROTO_HDR_BYTES + NELSSA_PROTO_MAX_PAYLOAD];
	struct nelssa_msg_hdr h;
	size_t len;
	int ret = nelssa_msg_encode(m, buf, sizeof(buf), &len);

	if (ret)
		return ret;
	if (send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
		return -EIO;
	ret = read_all(fd, buf, NELSSA_PROTO_HDR_BYTES);
	if (!ret)
		ret = nelssa_msg_decode_hdr(buf, &h);
	if (!ret)
		ret = read_all(fd, buf + NELSSA_PROTO_HDR_BYTES, h.length);
	if (!ret)
		ret = nelssa_msg_decode(buf, NELSSA_PROTO_HDR_BYTES + h.length, r);
	return ret;
}

static ucs_status_t on_ack(void *arg, const void *header, size_t header_length, void *data,
			   size_t length, const ucp_am_recv_param_t *param)
{
	struct nelssa_ack_hdr a;

	(void)arg;
	(void)data;
	(void)length;
	(void)param;
	if (!nelssa_ack_hdr_get(header, header_length, &a)) {
		ack_status = a.status;
		acked = 1;
	}
	return UCS_OK;
}

static void sent(void *request, ucs_status_t status, void *user_data)
{
	(void)request;
	(void)status;
	*(int *)user_data = 1;
}

/* Sends one message and waits (10 s at most) for UCX to be done with it. */
static int am_send(ucp_ep_h ep, unsigned int id, const void *hdr, size_t hdr_len,
		   const void *data, size_t len)
{
	ucp_request_param_t prm = { 0 };
	const uint64_t end = now_ms() + 10000;
	ucs_status_ptr_t sp;
	int done = 0;

	prm.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
			   UCP_OP_ATTR_FIELD_FLAGS;
	prm.flags = UCP_AM_SEND_FLAG_REPLY;
	prm.cb.send = sent;
	prm.user_data = &done;
	sp = ucp_am_send_nbx(ep, id, hdr, hdr_len, data, len, &prm);
	if (!UCS_PTR_IS_PTR(sp))
		return UCS_PTR_IS_ERR(sp) ? -EIO : 0;
	while (!done && now_ms() < end)
		ucp_worker_progress(worker);
	if (!done) {
		ucp_request_cancel(worker, sp);
		while (!done)
			ucp_worker_progress(worker);
	}
	ucp_request_free(sp);
	return 0;
}

/*
 * UCX's own emulated RMA, as a hostile client would use it: a put under a
 * key to this process's memory, to an address the daemon never gave out
 * (16).  Over TCP UCX 1.13 emulates it with a message whose handler
 * writes wherever the header says; a daemon without RMA (no RDMA, no
 * --emulated-rma) has no such handler and drops it, one with it would
 * fault there.  Over shared memory CMA writes into the daemon itself,
 * and the kernel refuses that address.
 */
static void sw_put(ucp_context_h ucp, ucp_ep_h ep)
{
	static uint64_t word = 0x4141414141414141ull;
	ucp_mem_map_params_t mp = { .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
						  UCP_MEM_MAP_PARAM_FIELD_LENGTH,
				    .address = &word, .length = sizeof(word) };
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
						    UCP_OP_ATTR_FIELD_USER_DATA };
	const uint64_t end = now_ms() + 2000;
	ucs_status_ptr_t sp;
	ucp_mem_h mh;
	ucp_rkey_h rk;
	void *rkb;
	size_t rkl;
	int done = 0;

	if (ucp_mem_map(ucp, &mp, &mh) != UCS_OK) {
		printf("# emulated put: cannot map our own word\n");
		return;
	}
	if (ucp_rkey_pack(ucp, mh, &rkb, &rkl) == UCS_OK) {
		if (ucp_ep_rkey_unpack(ep, rkb, &rk) == UCS_OK) {
			prm.cb.send = sent;
			prm.user_data = &done;
			sp = ucp_put_nbx(ep, &word, sizeof(word), 16, rk, &prm);
			/* Done once sent; its completion from the daemon never comes. */
			while (UCS_PTR_IS_PTR(sp) && !done && now_ms() < end)
				ucp_worker_progress(worker);
			printf("# emulated put to address 16 in the daemon: %s\n",
			       UCS_PTR_IS_PTR(sp) ? (done ? "sent" : "pending") :
			       ucs_status_string(UCS_PTR_STATUS(sp)));
			if (UCS_PTR_IS_PTR(sp) && !done)
				ucp_request_cancel(worker, sp);
			if (UCS_PTR_IS_PTR(sp) && done)
				ucp_request_free(sp);
			ucp_rkey_destroy(rk);
		}
		ucp_rkey_buffer_release(rkb);
	}
	ucp_mem_unmap(ucp, mh);
}

int main(int argc, char **argv)
{
	static const unsigned int ids[] = { 0, 2, 4, 6, 7, 8, 65535 };
	static struct nelssa_msg m, r;
	static uint8_t big[4u << 20];
	uint8_t hdr[NELSSA_KV_HDR_BYTES] = { 0 };
	struct nelssa_kv_hdr kv = { .session = 999999, .cookie = 42, .nr_tokens = 1 };
	ucp_am_handler_param_t ap = { 0 };
	ucp_context_h ucp;
	ucp_ep_h ep;
	uint64_t end;
	int fd, ret;

	if (argc != 3) {
		fprintf(stderr, "usage: am_ids HOST PORT\n");
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
	strcpy(m.u.hello.name, "am-ids");
	ret = ctl_call(fd, &m, &r);
	if (ret || r.type != NELSSA_MSG_HELLO_OK) {
		printf("# HELLO: %d, type %u\n", ret, r.type);
		return 1;
	}
	if (nelssa_link_context(NELSSA_LINK_RMA, &ucp) != UCS_OK ||
	    nelssa_link_worker(ucp, r.u.hello_ok.key, &worker) != UCS_OK) {
		printf("# UCX setup failed\n");
		return 1;
	}
	/* In ascending order, as the daemon does (see nd_dataplane_start()). */
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ap.cb = on_ack;
	for (ap.id = 0; ap.id <= NELSSA_AM_KV_ACK; ap.id++)
		ucp_worker_set_am_recv_handler(worker, &ap);
	if (nelssa_link_connect(worker, fd, r.u.hello_ok.data_port,
				r.u.hello_ok.flags & NELSSA_HELLO_SHM, NULL, NULL, &ep) != UCS_OK) {
		printf("# cannot reach the daemon's data path\n");
		return 1;
	}
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		am_send(ep, ids[i], hdr, sizeof(hdr), "x", 1);
		am_send(ep, ids[i], hdr, sizeof(hdr), big, sizeof(big));	/* rendezvous */
		printf("# sent id %u, eager and rendezvous\n", ids[i]);
	}
	sw_put(ucp, ep);
	/* Still served on the data path: a KV message for no session, -ENOENT. */
	nelssa_kv_hdr_put(hdr, &kv);
	am_send(ep, NELSSA_AM_KV, hdr, sizeof(hdr), "x", 1);
	end = now_ms() + 10000;
	while (!acked && now_ms() < end)
		ucp_worker_progress(worker);
	printf("# KV for no session: %s, status %d\n", acked ? "answered" : "no answer", ack_status);
	ret = acked && ack_status == -ENOENT ? 0 : 1;
	/* ... and on the control path. */
	memset(&m, 0, sizeof(m));
	m.type = NELSSA_MSG_STATS;
	if (ctl_call(fd, &m, &r) || r.type != NELSSA_MSG_STATS_REPLY) {
		printf("# STATS afterwards: no reply\n");
		ret = 1;
	}
	{
		ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					    .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &prm);

		end = now_ms() + 10000;
		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS &&
		       now_ms() < end)
			ucp_worker_progress(worker);
		if (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) != UCS_INPROGRESS)
			ucp_request_free(sp);
	}
	ucp_worker_destroy(worker);
	ucp_cleanup(ucp);
	close(fd);
	return ret;
}
