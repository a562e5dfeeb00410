// SPDX-License-Identifier: MIT
/*
 * nelssa-step-bench: the decode-step round trip through nelssad, with its
 * breakdown, beside a bare UCX ping-pong of the same message sizes between
 * two processes measured in the same run (DESIGN §5: a same-run baseline
 * and a ratio, never an absolute number alone).
 *
 * One request of --context tokens (16-token clusters, random bf16 rows) is
 * offloaded for every KV head of one layer; each step asks for a batch of
 * B copies of it (B x kv_heads items, each with its own random selection
 * of whole clusters filling a 4 % token budget), so the devices do the
 * work of B distinct requests without B times the memory.  The ping-pong
 * baseline is a forked echo process that answers each active message with
 * one of the reply's size, waiting on its worker's event fd as nelssad's
 * poller does.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <ucp/api/ucp.h>

#include <nelssa/client.h>
#include <nelssa/half.h>
#include <nelssa/link.h>
#include <nelssa/proto.h>

#include "tool_util.h"

#define PROG "nelssa-step-bench"
#define CLUSTER 16u
#define MAX_BATCHES 8
/* The ping-pong's: active messages and a wake-up, as the data path's, nothing more. */
#define BARE_FEATURES (UCP_FEATURE_AM | UCP_FEATURE_WAKEUP)

struct opts {
	const char *host, *label;
	uint16_t port;
	uint32_t context, kv_heads, group, head_dim, iters, batch[MAX_BATCHES], n_batch;
	double budget;
	int json, kv_layout;
};

static uint64_t rng = 0x2545f4914f6cdd1dull;

static void *xcalloc(size_t n, size_t sz)
{
	return tl_calloc(PROG, n, sz);
}

/* The echo process: answer every AM 1 with an AM 2 of *reply_len bytes. */
struct echo {
	ucp_worker_h w;
	size_t reply_len;
	void *reply;
	int quit;
};

static void echo_reply(struct echo *e, ucp_ep_h ep)
{
	ucp_request_param_t prm = { 0 };
	ucs_status_ptr_t sp = ucp_am_send_nbx(ep, 2, NULL, 0, e->reply, e->reply_len, &prm);

	if (UCS_PTR_IS_PTR(sp))
		ucp_request_free(sp);
}

struct echo_rx {
	struct echo *e;
	ucp_ep_h ep;
	void *buf;
};

/* Rendezvous data arrived: now answer (never progress inside a callback). */
static void echo_rx_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct echo_rx *rx = user_data;

	(void)status;
	(void)length;
	echo_reply(rx->e, rx->ep);
	free(rx->buf);
	free(rx);
	if (request)
		ucp_request_free(request);
}

static ucs_status_t echo_am(void *arg, const void *header, size_t header_length, void *data,
			    size_t length, const ucp_am_recv_param_t *param)
{
	struct echo *e = arg;

	if (header_length == 8) {
		memcpy(&e->reply_len, header, 8);	/* a size change, or 0: quit */
		e->quit = !e->reply_len;
		free(e->reply);
		e->reply = calloc(1, e->reply_len + 1);
	}
	if (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) || !e->reply)
		return UCS_OK;
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
							   UCP_OP_ATTR_FIELD_USER_DATA };
		struct echo_rx *rx = calloc(1, sizeof(*rx));
		ucs_status_ptr_t sp;

		rx->e = e;
		rx->ep = param->reply_ep;
		rx->buf = malloc(length + 1);
		rp.cb.recv_am = echo_rx_done;
		rp.user_data = rx;
		sp = ucp_am_recv_data_nbx(e->w, data, rx->buf, length, &rp);
		if (!UCS_PTR_IS_PTR(sp))
			echo_rx_done(NULL, UCS_OK, length, rx);
		return UCS_OK;
	}
	echo_reply(e, param->reply_ep);
	return UCS_OK;
}

static void echo_main(int wfd)
{
	ucp_am_handler_param_t ap = { 0 };
	struct echo e = { 0 };
	ucp_context_h ctx;
	ucp_address_t *addr;
	size_t alen;
	int efd;

	if (nelssa_link_context_features(BARE_FEATURES, &ctx) != UCS_OK ||
	    nelssa_link_worker(ctx, 0, &e.w) != UCS_OK ||
	    ucp_worker_get_address(e.w, &addr, &alen) != UCS_OK ||
	    ucp_worker_get_efd(e.w, &efd) != UCS_OK)
		_exit(1);
	ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
			UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
	ap.id = 1;
	ap.cb = echo_am;
	ap.arg = &e;
	ap.flags = UCP_AM_FLAG_WHOLE_MSG;
	ucp_worker_set_am_recv_handler(e.w, &ap);
	if (write(wfd, &alen, sizeof(alen)) != sizeof(alen) || write(wfd, addr, alen) != (ssize_t)alen)
		_exit(1);
	while (!e.quit) {
		struct pollfd p = { .fd = efd, .events = POLLIN };

		if (ucp_worker_progress(e.w))
			continue;
		if (ucp_worker_arm(e.w) == UCS_ERR_BUSY)
			continue;
		if (poll(&p, 1, 1000) == 0 && getppid() == 1)
			break;
	}
	_exit(0);
}

struct pp {
	ucp_context_h ctx;
	ucp_worker_h w;
	ucp_ep_h ep;
	int efd, got;
};

struct pp_rx {
	struct pp *p;
	void *buf;
};

static void pp_rx_done(void *request, ucs_status_t status, size_t length, void *user_data)
{
	struct pp_rx *rx = user_data;

	(void)status;
	(void)length;
	rx->p->got = 1;
	free(rx->buf);
	free(rx);
	if (request)
		ucp_request_free(request);
}

static ucs_status_t pp_reply(void *arg, const void *header, size_t header_length, void *data,
			     size_t length, const ucp_am_recv_param_t *param)
{
	struct pp *p = arg;

	(void)header;
	(void)header_length;
	if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
		ucp_request_param_t rp = { .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
							   UCP_OP_ATTR_FIELD_USER_DATA };
		struct pp_rx *rx = calloc(1, sizeof(*rx));
		ucs_status_ptr_t sp;

		rx->p = p;
		rx->buf = malloc(length + 1);
		rp.cb.recv_am = pp_rx_done;
		rp.user_data = rx;
		sp = ucp_am_recv_data_nbx(p->w, data, rx->buf, length, &rp);
		if (!UCS_PTR_IS_PTR(sp))
			pp_rx_done(NULL, UCS_OK, length, rx);
		return UCS_OK;
	}
	p->got = 1;
	return UCS_OK;
}

static void pp_wait(struct pp *p)
{
	while (!p->got) {
		struct pollfd f = { .fd = p->efd, .events = POLLIN };

		if (ucp_worker_progress(p->w))
			continue;
		if (ucp_worker_arm(p->w) == UCS_ERR_BUSY)
			continue;
		poll(&f, 1, 100);
	}
}

static void pp_send(struct pp *p, const void *hdr, size_t hl, const void *buf, size_t len)
{
	ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
				    .flags = UCP_AM_SEND_FLAG_REPLY };
	ucs_status_ptr_t sp = ucp_am_send_nbx(p->ep, 1, hdr, hl, buf, len, &prm);

	while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS)
		ucp_worker_progress(p->w);
	if (UCS_PTR_IS_PTR(sp))
		ucp_request_free(sp);
}

/* Median round trip of @req_len bytes out, @reply_len back, in us. */
static double pingpong(struct pp *p, size_t req_len, size_t reply_len, uint32_t iters)
{
	uint64_t rl = reply_len;
	void *buf = xcalloc(req_len + 1, 1);
	double *t = xcalloc(iters, sizeof(double)), med;

	p->got = 0;
	pp_send(p, &rl, 8, NULL, 0);
	pp_wait(p);
	for (uint32_t i = 0; i < iters + 20; i++) {
		double a = tl_now();

		p->got = 0;
		pp_send(p, NULL, 0, buf, req_len);
		pp_wait(p);
		if (i >= 20)
			t[i - 20] = (tl_now() - a) * 1e6;
	}
	med = tl_percentile(t, iters, 0.5);
	free(t);
	free(buf);
	return med;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " --port P [--host H] [--context N] [--kv-heads N] [--batches B,B..]\n"
		"                         [--budget F] [--iters N] [--label NAME]\n"
		"                         [--kv-layout packed|adjacent] [--json]\n"
		"  --context N   tokens of the request (default 131072)\n"
		"  --kv-heads N  KV heads of the layer, 4 query heads each (default 8)\n"
		"  --batches     requests per step (default 1,8)\n"
		"  --budget F    tokens each item reads, as a fraction of the context\n"
		"                (default 0.04): as many 16-token clusters as fit, at\n"
		"                least one.  --ratio is a deprecated alias: it is the\n"
		"                same token budget, no longer a ratio of clusters\n"
		"  --iters N     timed steps per batch size (default 200, after 20 warm-up)\n"
		"  --label NAME  tag for the output (e.g. the daemon's kernel mode)\n"
		"  --kv-layout L packed (default) or adjacent: each 16-token block's K\n"
		"                and V side by side in device memory\n"
		"  --json        one JSON object instead of text\n");
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "host", required_argument, NULL, 'H' }, { "port", required_argument, NULL, 'p' },
		{ "context", required_argument, NULL, 'c' }, { "kv-heads", required_argument, NULL, 'k' },
		{ "batches", required_argument, NULL, 'b' },
		{ "budget", required_argument, NULL, 'B' },
		{ "ratio", required_argument, NULL, 'r' },
		{ "iters", required_argument, NULL, 'i' }, { "label", required_argument, NULL, 'l' },
		{ "kv-layout", required_argument, NULL, 'L' },
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end, *tok, *save = NULL;
	unsigned long v;
	int c;

	*o = (struct opts){ "127.0.0.1", "", 0, 131072, 8, 4, 128, 200, { 1, 8 }, 2, 0.04, 0, 0 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'H': o->host = optarg; break;
		case 'l': o->label = optarg; break;
		case 'j': o->json = 1; break;
		case 'h': usage(stdout); exit(0);
		case 'L':
			if (!strcmp(optarg, "packed") || !strcmp(optarg, "adjacent")) {
				o->kv_layout = !strcmp(optarg, "adjacent");
				break;
			}
			fprintf(stderr, PROG ": --kv-layout: packed or adjacent\n");
			return -1;
		case 'r':
			fprintf(stderr, PROG ": --ratio is deprecated: it now sets the token "
				"budget, as --budget does\n");
			/* fall through */
		case 'B':
			o->budget = strtod(optarg, &end);
			if (*end || !(o->budget > 0 && o->budget <= 1)) {
				fprintf(stderr, PROG ": --budget: need (0, 1]\n");
				return -1;
			}
			break;
		case 'b':
			o->n_batch = 0;
			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				v = strtoul(tok, &end, 10);
				if (*end || v < 1 || v > 64 || o->n_batch == MAX_BATCHES)
					return -1;
				o->batch[o->n_batch++] = (uint32_t)v;
			}
			if (!o->n_batch)
				return -1;
			break;
		default:
			v = strtoul(optarg ? optarg : "", &end, 10);
			if (!optarg || *end || !*optarg)
				return -1;
			if (c == 'p' && v >= 1 && v <= 65535)
				o->port = (uint16_t)v;
			else if (c == 'c' && v >= 1024 && v <= (1u << 22))
				o->context = (uint32_t)v;
			else if (c == 'k' && v >= 1 && v <= 64)
				o->kv_heads = (uint32_t)v;
			else if (c == 'i' && v >= 1 && v <= 100000)
				o->iters = (uint32_t)v;
			else
				return -1;
		}
	}
	return optind < argc || !o->port ? -1 : 0;
}

int main(int argc, char **argv)
{
	struct nelssa_client_opts co;
	struct nelssa_session_cfg sc = { 0 };
	struct nelssa_cluster_index ix = { 0 };
	struct nelssa_client *cli;
	struct opts o;
	uint64_t session;
	uint16_t *k, *v;
	uint32_t nclu, nfull, nsel;
	uint64_t budget;
	int pfd[2], status;
	pid_t child;
	struct pp p = { 0 };

	if (parse(&o, argc, argv)) {
		usage(stderr);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	/* The echo process first, before this process has any UCX state. */
	if (pipe(pfd) || (child = fork()) < 0) {
		perror(PROG);
		return 1;
	}
	if (!child) {
		close(pfd[0]);
		echo_main(pfd[1]);
	}
	close(pfd[1]);
	co = (struct nelssa_client_opts){ o.host, o.port, 60000, PROG };
	if (nelssa_client_connect(&co, &cli)) {
		fprintf(stderr, PROG ": %s\n", nelssa_client_error(cli));
		kill(child, SIGKILL);
		return 1;
	}
	nclu = (o.context + CLUSTER - 1) / CLUSTER;
	/*
	 * Every cluster is CLUSTER tokens but a short last one, which no
	 * selection takes, so each item reads exactly nsel * CLUSTER tokens:
	 * the budget rounded down to whole clusters (at least one, as the
	 * daemon takes no empty selection).
	 */
	nfull = o.context / CLUSTER;
	budget = (uint64_t)llround(o.budget * o.context);
	nsel = (uint32_t)(budget / CLUSTER);
	nsel = nsel ? nsel : 1;
	sc.shape = (struct nelssa_shape){ 1, (uint16_t)(o.kv_heads * o.group), (uint16_t)o.kv_heads,
					  (uint16_t)o.head_dim, NELSSA_KV_BF16, 0,
					  (uint8_t)o.kv_layout };
	sc.max_sel = nsel;
	sc.max_batch = 64;
	sc.capacity_tokens = o.context + 1024;
	if (nelssa_client_session(cli, &sc, &session) ||
	    nelssa_client_request(cli, session, 1, o.context, nclu)) {
		fprintf(stderr, PROG ": %s\n", nelssa_client_error(cli));
		kill(child, SIGKILL);
		return 1;
	}
	/* One synthetic clustered store per head: identity order, 16-token clusters. */
	ix.head_dim = o.head_dim;
	ix.n_tokens = o.context;
	ix.n_clusters = nclu;
	ix.perm = xcalloc(o.context, sizeof(uint32_t));
	ix.table = xcalloc(nclu, sizeof(*ix.table));
	for (uint32_t t = 0; t < o.context; t++)
		ix.perm[t] = t;
	for (uint32_t c = 0; c < nclu; c++)
		ix.table[c] = (struct nelssa_cluster){ c * CLUSTER,
			c * CLUSTER + CLUSTER <= o.context ? CLUSTER : o.context - c * CLUSTER };
	k = xcalloc((size_t)o.context * o.head_dim, 2);
	v = xcalloc((size_t)o.context * o.head_dim, 2);
	if (!o.json)
		fprintf(stderr, "offloading %u KV heads of %u tokens...\n", o.kv_heads, o.context);
	for (uint32_t h = 0; h < o.kv_heads; h++) {
		for (size_t i = 0; i < (size_t)o.context * o.head_dim; i++) {
			k[i] = nelssa_f32_to_bf16((float)((tl_next(&rng) >> 40) & 0xffff) / 32768.0f - 1.0f);
			v[i] = nelssa_f32_to_bf16((float)((tl_next(&rng) >> 40) & 0xffff) / 32768.0f - 1.0f);
		}
		if (nelssa_client_offload(cli, session, 1, 0, (uint16_t)h, &ix, 0, k, v)) {
			fprintf(stderr, PROG ": %s\n", nelssa_client_error(cli));
			kill(child, SIGKILL);
			return 1;
		}
	}
	free(k);
	free(v);
	/* The ping-pong endpoint to the echo process. */
	{
		ucp_am_handler_param_t ap = { 0 };
		size_t alen;
		void *addr;

		if (read(pfd[0], &alen, sizeof(alen)) != sizeof(alen) || alen > 65536 ||
		    !(addr = malloc(alen)) || read(pfd[0], addr, alen) != (ssize_t)alen ||
		    nelssa_link_context_features(BARE_FEATURES, &p.ctx) != UCS_OK ||
		    nelssa_link_worker(p.ctx, 0, &p.w) != UCS_OK ||
		    ucp_worker_get_efd(p.w, &p.efd) != UCS_OK) {
			fprintf(stderr, PROG ": cannot set up the ping-pong baseline\n");
			kill(child, SIGKILL);
			return 1;
		}
		ap.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
				UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
		ap.id = 2;
		ap.cb = pp_reply;
		ap.arg = &p;
		ap.flags = UCP_AM_FLAG_WHOLE_MSG;
		ucp_worker_set_am_recv_handler(p.w, &ap);
		if (nelssa_link_connect_worker(p.w, addr, &p.ep) != UCS_OK) {
			fprintf(stderr, PROG ": cannot reach the echo process\n");
			kill(child, SIGKILL);
			return 1;
		}
		free(addr);
	}
	if (o.json)
		printf("{\"label\":\"%s\",\"context\":%u,\"kv_heads\":%u,\"budget\":%g,"
		       "\"budget_tokens\":%llu,\"cluster_tokens\":%u,\"selected\":%u,"
		       "\"tokens_read\":%u,\"kv_layout\":\"%s\",\"runs\":[", o.label, o.context,
		       o.kv_heads, o.budget, (unsigned long long)budget, CLUSTER, nsel, nsel * CLUSTER,
		       o.kv_layout ? "adjacent" : "packed");
	else
		printf("%s selection: %u clusters of %u tokens = %u tokens read per item "
		       "(budget %llu tokens, %g of %u), KV layout %s\n", o.label, nsel, CLUSTER,
		       nsel * CLUSTER, (unsigned long long)budget, o.budget, o.context,
		       o.kv_layout ? "adjacent" : "packed");
	for (uint32_t b = 0; b < o.n_batch; b++) {
		const uint32_t n = o.batch[b] * o.kv_heads;
		const size_t q_bytes = 4ull * o.group * o.head_dim;
		const size_t req_len = NELSSA_STEP_HDR_BYTES + n * (NELSSA_STEP_ITEM_BYTES + q_bytes + 4ull * nsel);
		const size_t reply_len = NELSSA_REPLY_HDR_BYTES + n * (q_bytes + 4ull * o.group);
		struct nelssa_step_in *in = xcalloc(n, sizeof(*in));
		float *q = xcalloc((size_t)n * o.group * o.head_dim, sizeof(float));
		float *out = xcalloc((size_t)n * o.group * o.head_dim, sizeof(float));
		float *lse = xcalloc((size_t)n * o.group, sizeof(float));
		uint32_t *sel = xcalloc((size_t)n * nsel, sizeof(uint32_t)), *perm = xcalloc(nclu, 4);
		double *rtt = xcalloc(o.iters, sizeof(double)), disp = 0, dev = 0, agg = 0, recv = 0;
		double med, p99, base;

		for (size_t i = 0; i < (size_t)n * o.group * o.head_dim; i++)
			q[i] = (float)((tl_next(&rng) >> 40) & 0xffff) / 32768.0f - 1.0f;
		for (uint32_t i = 0; i < n; i++) {
			for (uint32_t c = 0; c < nclu; c++)
				perm[c] = c;
			for (uint32_t c = 0; c < nsel; c++) {
				uint32_t j = c + (uint32_t)(tl_next(&rng) % (nfull - c));
				uint32_t x = perm[c];

				perm[c] = perm[j];
				perm[j] = x;
				sel[(size_t)i * nsel + c] = perm[c];
			}
			in[i] = (struct nelssa_step_in){ 1, (uint16_t)(i % o.kv_heads),
							 q + (size_t)i * o.group * o.head_dim,
							 sel + (size_t)i * nsel, nsel };
		}
		for (uint32_t it = 0; it < o.iters + 20; it++) {
			struct nelssa_step_times t;

			if (nelssa_client_step(cli, session, 0, in, n, out, lse, &t)) {
				fprintf(stderr, PROG ": %s\n", nelssa_client_error(cli));
				kill(child, SIGKILL);
				return 1;
			}
			if (it < 20)
				continue;
			rtt[it - 20] = t.rtt / 1e3;
			disp += t.dispatch / 1e3;
			dev += t.device / 1e3;
			agg += t.aggregate / 1e3;
			recv += t.recv / 1e3;
		}
		p99 = tl_percentile(rtt, o.iters, 0.99);
		med = tl_percentile(rtt, o.iters, 0.5);
		base = pingpong(&p, req_len, reply_len, o.iters);
		disp /= o.iters;
		dev /= o.iters;
		agg /= o.iters;
		recv /= o.iters;
		if (o.json)
			printf("%s{\"batch\":%u,\"items\":%u,\"request_bytes\":%zu,\"reply_bytes\":%zu,"
			       "\"rtt_median_us\":%.1f,\"rtt_p99_us\":%.1f,\"recv_us\":%.1f,"
			       "\"dispatch_us\":%.1f,\"device_us\":%.1f,\"aggregate_us\":%.1f,"
			       "\"pingpong_median_us\":%.1f,\"rtt_over_pingpong\":%.3f,"
			       "\"host_over_device\":%.4f}",
			       b ? "," : "", o.batch[b], n, req_len, reply_len, med, p99, recv, disp, dev,
			       agg, base, med / base, dev > 0 ? (disp + agg) / dev : 0.0);
		else
			printf("%s batch %u (%u items, %zu B out, %zu B back): step RTT median %.1f us "
			       "(p99 %.1f) = receive %.1f + dispatch %.1f + device %.1f + aggregate %.1f "
			       "+ transport; bare UCX ping-pong %.1f us; ratio %.2f; (dispatch + "
			       "aggregate) / device %.2f%%\n", o.label, o.batch[b], n, req_len,
			       reply_len, med, p99, recv, disp, dev, agg, base, med / base,
			       dev > 0 ? 100 * (disp + agg) / dev : 0.0);
		free(in);
		free(q);
		free(out);
		free(lse);
		free(sel);
		free(perm);
		free(rtt);
	}
	if (o.json)
		printf("]}\n");
	{
		uint64_t zero = 0;

		p.got = 0;
		pp_send(&p, &zero, 8, NULL, 0);	/* tells the echo process to quit */
	}
	waitpid(child, &status, 0);
	{
		ucp_request_param_t cp = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
					   .flags = UCP_EP_CLOSE_FLAG_FORCE };
		ucs_status_ptr_t sp = ucp_ep_close_nbx(p.ep, &cp);

		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS)
			ucp_worker_progress(p.w);
		if (UCS_PTR_IS_PTR(sp))
			ucp_request_free(sp);
		ucp_worker_destroy(p.w);
		ucp_cleanup(p.ctx);
	}
	nelssa_client_close(cli);
	nelssa_kmeans_free(&ix);
	return 0;
}
