// SPDX-License-Identifier: MIT
/*
 * A GPU node for the daemon's end-to-end tests (tier T1).  Each scenario
 * prints "# ..." comments and exits 0 when every check held:
 *
 *   check     R requests with random cluster-contiguous KV (random cluster
 *             sizes, a random token permutation) offloaded to every layer
 *             and head, decode-time clusters appended, then steps of random
 *             selections; every output and LSE must equal float64
 *             attention over the selected clusters' tokens
 *   check-clusters  the same with cluster-wise placement (every head split
 *             over the devices, partial states merged by the daemon)
 *   capacity  a session larger than the devices is refused with -ENOSPC
 *             and a message; a request beyond a session's capacity too;
 *             then a small session still serves a step
 *   refused   a request for more room than the session has left is refused
 *             with -ENOSPC and a message; once another is freed it fits; the
 *             session closes and the daemon reclaims it and keeps serving
 *             (a refused request used to be freed twice, killing the daemon)
 *   bad-step  a step naming an unknown request, and one with a cluster id
 *             beyond the stored ones, are refused; the session still works
 *   zero-items  a step of no items is refused with -EINVAL (before anything
 *             is sent); the next real step is exact
 *   stall     with the daemon stopped (SIGSTOP to $NELSSAD_PID) an offload,
 *             a step and a control call each fail within the timeout; after
 *             SIGCONT the control connection serves again, and so does the
 *             data path -- unless the offload failed with KV_ROWS parts in
 *             flight, which closed it (-ECONNRESET, "connect again"): then
 *             a new connection does (the caller's own timeout catches a
 *             hang)
 *   die       sends a step and kills itself before the reply (the daemon
 *             must reclaim the session and keep serving others)
 *   held      (tenant 77, for a daemon run with NELSSAD_TEST_HOLD_TENANT=77,
 *             which answers that tenant's steps only once their connection
 *             is gone) sends a step, proves it in flight on the daemon (a
 *             second one is refused with -EBUSY), prints "held" and waits to
 *             be killed: the daemon must then drop the reply, not send it
 *   outlive   runs steps until the daemon goes away (the test kills it):
 *             every call must then fail with an error, none may hang
 *   split     split batch: steps of two sessions sent at once, collected
 *             later (a poll that finds nothing yet says so), both exact
 *   migrate   a request grows on the "GPU" (dense attention here) until the
 *             router sends it to the PNM tier: its keys are clustered with
 *             the segmented k-means and offloaded, and it goes on growing
 *             there, decode-time chunks clustered and appended; every output
 *             before and after the handoff must equal float64 attention
 *             over exactly the tokens it covered
 *   probe     prints "sessions N" (the daemon's STATS) and "free_mib X", the
 *             device memory the daemon has left (its own figure, from the
 *             refusal of a session too large for any device): what the crash
 *             tests compare before and after
 *   busy      (for the crash tests, which kill it) offloads requests and steps
 *             them, round after round, forever: prints "offload N" before its
 *             N-th offload call and "step N" before its N-th step, so that a
 *             test can kill it at a point of its own progress
 *   load MODE (for the SIGTERM test) offloads (MODE offload) or steps (MODE
 *             step) until a call fails -- the daemon went -- timing each; then
 *             an offload, a step and a control call, each of which must fail
 *             too; every failing call must return within the 3 s timeout plus
 *             2 s of slack.  Prints "running" once served, then "worst_ms N"
 *             (the slowest failing call); exit 0 when all of that held
 *
 *   stall-put (zero-copy forced, over TCP) the daemon stopped while an
 *             offload puts straight from the caller's rows (an index in
 *             cluster order), more of them than the sockets' buffers can
 *             hold, so that puts are still in flight at the timeout: the
 *             offload fails with -ETIMEDOUT, and the rows are unmapped at
 *             once (a put still reading them would fault); the data path
 *             is then closed -- the next offload and step fail with
 *             -ECONNRESET and say why.  The daemon is left stopped, for
 *             the test to kill.  With ARG "rows", the same with KV_ROWS
 *             parts (zero-copy left to AUTO, which sends them where UCX
 *             emulates RMA), rendezvous sends that UCX 1.13's forced close
 *             does not end; the test then continues the daemon, which meets
 *             them from a closed endpoint and must go on serving
 *
 * usage: e2e_client HOST PORT SCENARIO [ARG [ORDER]]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>

#include <nelssa/client.h>
#include <nelssa/half.h>
#include <nelssa/policy.h>
#include <nelssa/sparse.h>

#include "testutil.h"

#define LAYERS 2
#define KV_HEADS 4
#define GROUP 4
#define DIM 64

struct req {
	uint64_t id;
	uint32_t n;			/* tokens */
	uint32_t n0;			/* ... of them in the first offload */
	uint16_t *k, *v;		/* [LAYERS][KV_HEADS][n][DIM], token order */
	struct nelssa_cluster_index ix[LAYERS][KV_HEADS];
};

static struct nelssa_client *cli;
static struct nelssa_client_opts opts;	/* what main() connected with */

/*
 * SIGSTOP to @pid, then 0 once every thread of it is stopped (/proc,
 * polled, 30 s at most).  kill() returns before the stop takes hold: one
 * thread takes the signal and stops the others, and on a loaded machine
 * the rest of the daemon can still answer meanwhile.
 */
static int stop_daemon(pid_t pid)
{
	char path[64];

	if (kill(pid, SIGSTOP)) {
		printf("# cannot stop %d: %s\n", (int)pid, strerror(errno));
		return -1;
	}
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	for (int i = 0; i < 3000; i++) {
		DIR *d = opendir(path);
		struct dirent *e;
		int running = !d;

		while (d && (e = readdir(d))) {
			char stat[sizeof(path) + sizeof(e->d_name) + 8], buf[512];
			FILE *f;
			char *p;

			if (e->d_name[0] == '.')
				continue;
			snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
			f = fopen(stat, "r");
			if (!f)
				continue;	/* a thread that exited meanwhile */
			p = fgets(buf, sizeof(buf), f) ? strrchr(buf, ')') : NULL;
			fclose(f);
			if (!p || (p[2] != 'T' && p[2] != 't'))
				running = 1;
		}
		if (d)
			closedir(d);
		if (!running)
			return 0;
		usleep(10000);
	}
	printf("# %d did not stop within 30 s\n", (int)pid);
	return -1;
}
static const char *scenario_arg;	/* argv[4], where a scenario takes one */
/*
 * argv[5] of check: how an index orders the caller's rows.  Shuffled
 * (the default): no chunk lies in cluster order, the client gathers each;
 * ordered: every token where its cluster has it, the client puts straight
 * from the rows; mixed: the first half so, the rest shuffled, so that one
 * offload takes both ways and a chunk straddles them.
 */
static enum { ORDER_SHUFFLED, ORDER_ORDERED, ORDER_MIXED } index_order;
static int failures;
static uint8_t placement = NELSSA_PLACE_HEADS;
/* The sessions' NELSSA_ATTN_* flags (the check-bf16 scenarios). */
static uint8_t attn_flags;
static uint8_t kv_layout;	/* check-*-adjacent, kv8-adjacent */

#define CHECK(cond, ...)                                         \
	do {                                                     \
		if (!(cond)) {                                   \
			printf("# FAILED: " __VA_ARGS__);        \
			printf(" (%s)\n", nelssa_client_error(cli)); \
			failures++;                              \
		}                                                \
	} while (0)

/* A random index over @n tokens: clusters of 1..31 tokens, tokens permuted as index_order says. */
static void make_index(struct tu_rng *rng, struct nelssa_cluster_index *ix, uint32_t n,
		       uint32_t first_token)
{
	/* Positions [lo, n) are shuffled (index_order). */
	const uint32_t lo = index_order == ORDER_ORDERED ? n : index_order == ORDER_MIXED ? n / 2 : 0;
	uint32_t pos = 0;

	memset(ix, 0, sizeof(*ix));
	ix->head_dim = DIM;
	ix->perm = tu_alloc(sizeof(uint32_t) * n);
	ix->table = tu_alloc(sizeof(struct nelssa_cluster) * n);
	ix->centroids = tu_alloc(4);
	ix->key_mean = tu_alloc(4 * DIM);
	for (uint32_t i = 0; i < n; i++)
		ix->perm[i] = i;
	for (uint32_t i = n; i > lo + 1; i--) {
		uint32_t j = lo + tu_below(rng, i - lo), t = ix->perm[i - 1];

		ix->perm[i - 1] = ix->perm[j];
		ix->perm[j] = t;
	}
	for (uint32_t i = 0; i < n; i++)
		ix->perm[i] += first_token;
	while (pos < n) {
		uint32_t c = 1 + tu_below(rng, 31);

		if (c > n - pos)
			c = n - pos;
		ix->table[ix->n_clusters++] = (struct nelssa_cluster){ first_token + pos, c };
		pos += c;
	}
	ix->n_tokens = n;
}

/* Appends @extra more tokens' clusters to @ix (tokens n..n+extra-1). */
static void grow_index(struct tu_rng *rng, struct nelssa_cluster_index *ix, uint32_t extra)
{
	struct nelssa_cluster_index add;
	uint32_t n = ix->n_tokens;

	make_index(rng, &add, extra, n);
	ix->perm = realloc(ix->perm, sizeof(uint32_t) * (n + extra));
	ix->table = realloc(ix->table, sizeof(struct nelssa_cluster) * (ix->n_clusters + add.n_clusters));
	memcpy(ix->perm + n, add.perm, sizeof(uint32_t) * extra);
	memcpy(ix->table + ix->n_clusters, add.table, sizeof(struct nelssa_cluster) * add.n_clusters);
	ix->n_clusters += add.n_clusters;
	ix->n_tokens += extra;
	nelssa_kmeans_free(&add);
}

static uint16_t *rows(struct req *r, uint16_t *base, uint32_t l, uint32_t h)
{
	return base + ((size_t)(l * KV_HEADS + h) * r->n) * DIM;
}

static struct nelssa_session_cfg session_cfg(uint64_t capacity)
{
	return (struct nelssa_session_cfg){
		.shape = { LAYERS, KV_HEADS * GROUP, KV_HEADS, DIM, NELSSA_KV_BF16, attn_flags,
			   kv_layout },
		.placement = placement, .max_batch = 8, .max_sel = 4096,
		.capacity_tokens = capacity,
	};
}

/* Creates request @id of @n tokens (+@extra appended later) and offloads it. */
static int make_request(struct tu_rng *rng, uint64_t session, struct req *r, uint64_t id,
			uint32_t n, uint32_t extra)
{
	const uint32_t total = n + extra;
	int ret;

	r->id = id;
	r->n = total;
	r->n0 = n;
	r->k = tu_alloc(2ull * LAYERS * KV_HEADS * total * DIM);
	r->v = tu_alloc(2ull * LAYERS * KV_HEADS * total * DIM);
	tu_fill_kv(rng, r->k, (size_t)LAYERS * KV_HEADS * total * DIM, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(rng, r->v, (size_t)LAYERS * KV_HEADS * total * DIM, 1.0, NELSSA_KV_BF16);
	ret = nelssa_client_request(cli, session, id, total, total);
	if (ret)
		return ret;
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KV_HEADS; h++) {
			make_index(rng, &r->ix[l][h], n, 0);
			ret = nelssa_client_offload(cli, session, id, (uint16_t)l, (uint16_t)h,
						    &r->ix[l][h], 0, rows(r, r->k, l, h),
						    rows(r, r->v, l, h));
			if (ret)
				return ret;
		}
	return 0;
}

/*
 * Appends @extra tokens' clusters, giving the library the new tokens' rows
 * alone (nelssa_client_offload_rows()), as a GPU node that keeps no
 * offloaded row does; one row fewer is refused first, with nothing sent.
 */
static int append_request(struct tu_rng *rng, uint64_t session, struct req *r, uint32_t extra)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KV_HEADS; h++) {
			const uint32_t from = r->ix[l][h].n_clusters, base = r->ix[l][h].n_tokens;
			int ret;

			grow_index(rng, &r->ix[l][h], extra);
			ret = nelssa_client_offload_rows(cli, session, r->id, (uint16_t)l,
							 (uint16_t)h, &r->ix[l][h], from,
							 rows(r, r->k, l, h) + (size_t)(base + 1) * DIM,
							 rows(r, r->v, l, h) + (size_t)(base + 1) * DIM,
							 base + 1);
			CHECK(ret == -EINVAL && strstr(nelssa_client_error(cli), "rows given"),
			      "an append without its first new row: %d", ret);
			ret = nelssa_client_offload_rows(cli, session, r->id, (uint16_t)l,
							 (uint16_t)h, &r->ix[l][h], from,
							 rows(r, r->k, l, h) + (size_t)base * DIM,
							 rows(r, r->v, l, h) + (size_t)base * DIM, base);
			if (ret)
				return ret;
		}
	return 0;
}

/* Steps over every (request, head) with random selections; checks each. */
static void run_steps(struct tu_rng *rng, uint64_t session, struct req *reqs, uint32_t nr,
		      uint32_t steps)
{
	const uint32_t n = nr * KV_HEADS;
	const struct nelssa_attn_geom g = { DIM, GROUP, NELSSA_KV_BF16, 1.0f / sqrtf(DIM),
					    attn_flags };
	/* The binary32 products' reference: bf16-dots outputs must miss it. */
	const struct nelssa_attn_geom b32 = { DIM, GROUP, NELSSA_KV_BF16, 1.0f / sqrtf(DIM),
					      0 };
	uint32_t checked = 0, b32_off = 0;
	struct nelssa_step_in *in = tu_alloc(sizeof(*in) * n);
	float *q = tu_alloc(sizeof(float) * n * GROUP * DIM), *o = tu_alloc(sizeof(float) * n * GROUP * DIM);
	float *lse = tu_alloc(sizeof(float) * n * GROUP);
	uint32_t **sel = tu_alloc(sizeof(*sel) * n);

	for (uint32_t s = 0; s < steps; s++) {
		uint32_t layer = s % LAYERS;
		struct nelssa_step_times t;
		int ret;

		tu_fill_f32(rng, q, (size_t)n * GROUP * DIM, 1.0);
		for (uint32_t i = 0; i < n; i++) {
			struct req *r = &reqs[i / KV_HEADS];
			const struct nelssa_cluster_index *ix = &r->ix[layer][i % KV_HEADS];
			uint32_t want = s == 0 && i == 0 ? 0 : 1 + tu_below(rng, ix->n_clusters);

			/* A random subset of distinct clusters (one item selects none). */
			free(sel[i]);
			sel[i] = tu_alloc(sizeof(uint32_t) * (ix->n_clusters + 1));
			for (uint32_t c = 0; c < ix->n_clusters; c++)
				sel[i][c] = c;
			for (uint32_t c = 0; c < want; c++) {
				uint32_t j = c + tu_below(rng, ix->n_clusters - c), x = sel[i][c];

				sel[i][c] = sel[i][j];
				sel[i][j] = x;
			}
			in[i] = (struct nelssa_step_in){ r->id, (uint16_t)(i % KV_HEADS),
							 q + (size_t)i * GROUP * DIM, sel[i], want };
		}
		ret = nelssa_client_step(cli, session, (uint16_t)layer, in, n, o, lse, &t);
		CHECK(ret == 0, "step %u returned %d", s, ret);
		if (ret)
			break;
		for (uint32_t i = 0; i < n; i++) {
			struct req *r = &reqs[i / KV_HEADS];
			const struct nelssa_cluster_index *ix = &r->ix[layer][i % KV_HEADS];
			uint32_t *tok = tu_alloc(sizeof(uint32_t) * (r->n + 1)), nt = 0;
			char what[64];

			/* Token ids (token order) of the selected clusters. */
			for (uint32_t c = 0; c < in[i].nr_sel; c++) {
				const struct nelssa_cluster *e = &ix->table[sel[i][c]];

				for (uint32_t j = 0; j < e->count; j++)
					tok[nt++] = ix->perm[e->first + j];
			}
			snprintf(what, sizeof(what), "step %u item %u", s, i);
			if (tu_check_attn(&g, in[i].q, rows(r, r->k, layer, i % KV_HEADS),
					  rows(r, r->v, layer, i % KV_HEADS), tok, nt,
					  o + (size_t)i * GROUP * DIM, lse + (size_t)i * GROUP, what))
				failures++;
			if (attn_flags && nt) {
				checked++;
				b32_off += tu_check_attn(&b32, in[i].q,
							 rows(r, r->k, layer, i % KV_HEADS),
							 rows(r, r->v, layer, i % KV_HEADS), tok, nt,
							 o + (size_t)i * GROUP * DIM,
							 lse + (size_t)i * GROUP,
							 "binary32 reference (must fail)") != 0;
			}
			free(tok);
		}
		if (s == 0)
			printf("# step of %u items: rtt %.1f us (device %.1f us, dispatch %.1f us)\n",
			       n, t.rtt / 1e3, t.device / 1e3, t.dispatch / 1e3);
	}
	CHECK(b32_off == checked, "%u of %u outputs of a bf16-dots session match binary32 "
	      "products: the flag did not reach the devices", checked - b32_off, checked);
	for (uint32_t i = 0; i < n; i++)
		free(sel[i]);
	free(sel);
	free(in);
	free(q);
	free(o);
	free(lse);
}

static void free_request(struct req *r)
{
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KV_HEADS; h++)
			nelssa_kmeans_free(&r->ix[l][h]);
	free(r->k);
	free(r->v);
}

/*
 * How the KV of @reqs reached the daemon, when the scenario's argument
 * says what to expect: "rma" -- every byte written by this client into the
 * daemon's registered memory, none copied by the daemon; "rdma" the same,
 * with the client left to choose (AUTO puts only over a native RMA lane,
 * so only RDMA gets there) -- or "staged" (or "forced-staged": zero-copy
 * forced, and the daemon gives none, having no RMA) --
 * every byte in KV messages, copied in.  The bytes are counted here from
 * the indexes, independently of the daemon's counters.
 */
static void check_ingest(uint64_t session, const struct req *reqs, uint32_t nr)
{
	const uint64_t row = 2ull * DIM;	/* bf16 */
	struct nelssa_ingest_stats st;
	uint64_t want = 0, table = 0;
	int zc, ret, rma, recv;

	if (!scenario_arg)
		return;
	rma = !strcmp(scenario_arg, "rma") || !strcmp(scenario_arg, "rdma");
	recv = strstr(scenario_arg, "received") != NULL;
	for (uint32_t i = 0; i < nr; i++)
		for (uint32_t l = 0; l < LAYERS; l++)
			for (uint32_t h = 0; h < KV_HEADS; h++) {
				const uint32_t n0 = reqs[i].n0, n = reqs[i].ix[l][h].n_tokens;

				/*
				 * Written into an adjacent store by puts or KV_ROWS
				 * parts (head-wise): whole 16-row K and V blocks, but
				 * an append's rows up to its first block boundary.
				 * In KV messages (cluster-wise): the rows alone.
				 */
				const uint32_t head = n0 % 16 && 16 - n0 % 16 < n - n0 ?
						      16 - n0 % 16 : n0 % 16 ? n - n0 : 0;

				if (kv_layout && placement == NELSSA_PLACE_HEADS)
					want += 2 * 16 * row * ((n0 + 15) / 16 +
								(n - n0 - head + 15) / 16) +
						2 * row * head;
				else
					want += 2 * row * n;
				want += 8ull * reqs[i].ix[l][h].n_clusters;
				table += 8ull * reqs[i].ix[l][h].n_clusters;
			}
	zc = nelssa_client_zero_copy(cli, session);
	ret = nelssa_client_ingest_stats(cli, session, &st);
	CHECK(ret == 0, "ingest stats: %d", ret);
	if (ret)
		return;
	printf("# ingest: %llu bytes, %llu by RMA, %llu received in place, %llu copied "
	       "(expected %llu, %s)\n", (unsigned long long)st.kv_bytes,
	       (unsigned long long)st.rma_bytes, (unsigned long long)st.recv_bytes,
	       (unsigned long long)st.copied_bytes, (unsigned long long)want, scenario_arg);
	CHECK(st.kv_bytes == want, "the daemon ingested %llu bytes, not %llu",
	      (unsigned long long)st.kv_bytes, (unsigned long long)want);
	/*
	 * rma, rdma: every byte put.  *received: sent in KV_ROWS, the rows
	 * (always by rendezvous) received in place, the table entries (small,
	 * eager) copied.  Else every byte copied.
	 */
	CHECK(zc == rma, "nelssa_client_zero_copy() says %d", zc);
	CHECK(st.rma_bytes == (rma ? want : 0) && st.recv_bytes == (recv ? want - table : 0) &&
	      st.copied_bytes == (rma ? 0 : recv ? table : want),
	      "%llu bytes by RMA, %llu received in place, %llu copied by the daemon",
	      (unsigned long long)st.rma_bytes, (unsigned long long)st.recv_bytes,
	      (unsigned long long)st.copied_bytes);
	for (uint32_t i = 0; i < 4; i++)
		CHECK(st.reserved[i] == 0, "reserved counter %u is %llu", i,
		      (unsigned long long)st.reserved[i]);
}

static int scenario_check(struct tu_rng *rng)
{
	struct req reqs[3];
	uint64_t session;
	struct nelssa_session_cfg cfg = session_cfg(1u << 14);
	int ret;

	if (attn_flags) {
		/* A flag no version defines never leaves the client. */
		cfg.shape.attn_flags = 2;
		CHECK(nelssa_client_session(cli, &cfg, &session) == -EINVAL,
		      "attention flag 0x2 was not refused");
		cfg.shape.attn_flags = attn_flags;
	}
	if (kv_layout) {
		/* Nor a layout no version defines. */
		cfg.shape.kv_layout = 2;
		CHECK(nelssa_client_session(cli, &cfg, &session) == -EINVAL,
		      "KV layout 2 was not refused");
		cfg.shape.kv_layout = kv_layout;
	}
	ret = nelssa_client_session(cli, &cfg, &session);
	CHECK(ret == 0, "session create: %d", ret);
	if (ret)
		return 1;
	memset(reqs, 0, sizeof(reqs));
	for (uint32_t i = 0; i < 3; i++) {
		ret = make_request(rng, session, &reqs[i], 100 + i, 700 + 900 * i, 200);
		CHECK(ret == 0, "request %u offload: %d", i, ret);
		if (ret) {
			/* A refusal the scenario expects is no reason to leak. */
			for (uint32_t j = 0; j <= i; j++)
				free_request(&reqs[j]);
			return 1;
		}
	}
	/*
	 * One row this client wrote, for a reader of the device's memory to
	 * look for (tier T3 finds it in a card's device-dax carve-out).
	 */
	if (scenario_arg && (!strcmp(scenario_arg, "rdma") || !strcmp(scenario_arg, "rma"))) {
		const uint8_t *row = (const uint8_t *)rows(&reqs[0], reqs[0].k, 0, 0);

		printf("# first K row: ");
		for (uint32_t i = 0; i < 2 * DIM; i++)
			printf("%02x", row[i]);
		printf("\n");
	}
	run_steps(rng, session, reqs, 3, 4);
	/* Decode-time chunks: new clusters appended, old ones untouched. */
	for (uint32_t i = 0; i < 3; i++) {
		ret = append_request(rng, session, &reqs[i], 200);
		CHECK(ret == 0, "request %u append: %d", i, ret);
	}
	run_steps(rng, session, reqs, 3, 4);
	check_ingest(session, reqs, 3);
	for (uint32_t i = 0; i < 3; i++)
		free_request(&reqs[i]);
	CHECK(nelssa_client_session_close(cli, session) == 0, "session close");
	return failures ? 1 : 0;
}

/*
 * Against a daemon whose devices lack kv_stride (sim kv_stride=off): a
 * session of adjacent K and V blocks is refused, with words, and a packed
 * one is served as ever.
 */
static int scenario_no_stride(struct tu_rng *rng)
{
	struct nelssa_session_cfg cfg = session_cfg(1u << 14);
	uint64_t session;
	int ret;

	cfg.shape.kv_layout = NELSSA_KV_ADJACENT;
	ret = nelssa_client_session(cli, &cfg, &session);
	CHECK(ret == -EOPNOTSUPP && strstr(nelssa_client_error(cli), "kv_stride"),
	      "an adjacent session on devices without kv_stride: %d", ret);
	kv_layout = NELSSA_KV_PACKED;
	return scenario_check(rng) || failures ? 1 : 0;
}

static int scenario_capacity(struct tu_rng *rng)
{
	struct nelssa_session_cfg cfg = session_cfg(1ull << 28);
	struct req r;
	uint64_t session;
	int ret = nelssa_client_session(cli, &cfg, &session);

	CHECK(ret == -ENOSPC, "an oversized session gave %d, not -ENOSPC", ret);
	CHECK(strstr(nelssa_client_error(cli), "lacks room") != NULL, "no clear message");
	printf("# refused as expected: %s\n", nelssa_client_error(cli));
	cfg = session_cfg(4096);
	ret = nelssa_client_session(cli, &cfg, &session);
	CHECK(ret == 0, "a small session: %d", ret);
	ret = nelssa_client_request(cli, session, 1, 1u << 20, 1000);
	CHECK(ret == -ENOSPC, "a request beyond capacity gave %d", ret);
	printf("# refused as expected: %s\n", nelssa_client_error(cli));
	ret = make_request(rng, session, &r, 7, 500, 0);
	CHECK(ret == 0, "a request that fits: %d", ret);
	if (!ret)
		run_steps(rng, session, &r, 1, 2);
	free_request(&r);
	return failures ? 1 : 0;
}

/* Sessions the daemon serves now, or -1 when it does not answer. */
static int64_t daemon_sessions(void)
{
	struct nelssa_daemon_stats st;

	return nelssa_client_stats(cli, &st) ? -1 : (int64_t)st.sessions;
}

static int scenario_refused(struct tu_rng *rng)
{
	struct nelssa_session_cfg cfg = session_cfg(1u << 14);
	int64_t base = daemon_sessions(), now = -1;
	uint64_t session;
	int ret;

	(void)rng;
	ret = nelssa_client_session(cli, &cfg, &session);
	CHECK(ret == 0, "session: %d", ret);
	if (ret)
		return 1;
	/* Each fits alone; both together do not. */
	ret = nelssa_client_request(cli, session, 1, 10000, 10000);
	CHECK(ret == 0, "the first request: %d", ret);
	ret = nelssa_client_request(cli, session, 2, 10000, 10000);
	CHECK(ret == -ENOSPC, "a request beyond what is left gave %d, not -ENOSPC", ret);
	CHECK(strstr(nelssa_client_error(cli), "capacity exhausted") != NULL, "no clear message");
	printf("# refused as expected: %s\n", nelssa_client_error(cli));
	ret = nelssa_client_request_free(cli, session, 1);
	CHECK(ret == 0, "freeing the first: %d", ret);
	ret = nelssa_client_request(cli, session, 3, 10000, 10000);
	CHECK(ret == 0, "the room freed is there again: %d", ret);
	ret = nelssa_client_session_close(cli, session);
	CHECK(ret == 0, "session close: %d", ret);
	/* The poller reclaims it; the daemon must live through that. */
	for (int i = 0; i < 100; i++) {
		now = daemon_sessions();
		if (now < 0 || now <= base)
			break;
		usleep(50000);
	}
	CHECK(now >= 0 && now <= base, "sessions after close: %lld (before: %lld)",
	      (long long)now, (long long)base);
	return failures ? 1 : 0;
}

static int scenario_zero_items(struct tu_rng *rng)
{
	struct nelssa_session_cfg cfg = session_cfg(4096);
	struct nelssa_step_pending *p = (struct nelssa_step_pending *)&cfg;
	uint64_t session;
	struct req r;
	int ret = nelssa_client_session(cli, &cfg, &session);

	CHECK(ret == 0, "session: %d", ret);
	if (!ret)
		ret = make_request(rng, session, &r, 4, 300, 0);
	CHECK(ret == 0, "request: %d", ret);
	if (ret)
		return 1;
	ret = nelssa_client_step(cli, session, 0, NULL, 0, NULL, NULL, NULL);
	CHECK(ret == -EINVAL, "a step of no items gave %d, not -EINVAL", ret);
	printf("# refused as expected: %s\n", nelssa_client_error(cli));
	ret = nelssa_client_step_send(cli, session, 0, NULL, 0, NULL, NULL, &p);
	CHECK(ret == -EINVAL && !p, "sending a step of no items gave %d", ret);
	run_steps(rng, session, &r, 1, 2);
	free_request(&r);
	return failures ? 1 : 0;
}

static int scenario_stall(struct tu_rng *rng)
{
	const char *env = getenv("NELSSAD_PID");
	const pid_t pid = env ? (pid_t)atoi(env) : 0;
	struct nelssa_session_cfg cfg = session_cfg(1u << 15);
	float q[GROUP * DIM] = { 0 }, o[GROUP * DIM], lse[GROUP];
	uint32_t sel[1] = { 0 };
	struct nelssa_step_in in = { 5, 0, q, sel, 1 };
	struct nelssa_cluster_index ix;
	struct req r;
	uint64_t session;
	uint16_t *k, *v;
	int ret, rows;

	if (pid <= 0) {
		printf("# stall: NELSSAD_PID names no daemon\n");
		return 2;
	}
	ret = nelssa_client_session(cli, &cfg, &session);
	if (!ret)
		ret = make_request(rng, session, &r, 5, 300, 0);
	if (!ret)
		ret = nelssa_client_request(cli, session, 6, 30000, 30000);
	if (ret) {
		printf("# setup failed: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	/* 30000 tokens: 15 MB in chunks, far more than the sockets buffer. */
	k = tu_alloc(2ull * 30000 * DIM);
	v = tu_alloc(2ull * 30000 * DIM);
	tu_fill_kv(rng, k, 30000ull * DIM, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(rng, v, 30000ull * DIM, 1.0, NELSSA_KV_BF16);
	make_index(rng, &ix, 30000, 0);
	if (stop_daemon(pid))
		return 1;
	nelssa_client_set_timeout(cli, 500);
	ret = nelssa_client_offload(cli, session, 6, 0, 0, &ix, 0, k, v);
	printf("# offload to a stopped daemon: %d (%s)\n", ret, nelssa_client_error(cli));
	CHECK(ret == -ETIMEDOUT, "offload to a stopped daemon gave %d, not -ETIMEDOUT", ret);
	/* An offload that failed with KV_ROWS parts in flight closed the data path. */
	rows = nelssa_client_zero_copy(cli, session) == 0;
	ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
	printf("# step to a stopped daemon: %d (%s)\n", ret, nelssa_client_error(cli));
	CHECK(ret == (rows ? -ECONNRESET : -ETIMEDOUT),
	      "a step to a stopped daemon gave %d, not %s", ret, rows ? "-ECONNRESET" : "-ETIMEDOUT");
	ret = daemon_sessions() < 0 ? 0 : 1;
	printf("# stats from a stopped daemon: %s\n", nelssa_client_error(cli));
	CHECK(ret == 0, "a control call to a stopped daemon answered");
	kill(pid, SIGCONT);
	/* A daemon that comes back is served again on the same control connection. */
	nelssa_client_set_timeout(cli, 30000);
	ret = daemon_sessions() < 0 ? -1 : 0;
	CHECK(ret == 0, "no control reply after SIGCONT");
	if (rows) {
		/*
		 * KV_ROWS parts still in flight when the offload failed may yet
		 * land: the client closed its data path then, and says so; a new
		 * connection is served.
		 */
		ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
		printf("# step after SIGCONT on the old data path: %d (%s)\n", ret,
		       nelssa_client_error(cli));
		CHECK(ret == -ECONNRESET && strstr(nelssa_client_error(cli), "connect again"),
		      "a step on the data path the failed offload closed gave %d", ret);
		nelssa_client_close(cli);
		cli = NULL;
		ret = nelssa_client_connect(&opts, &cli);
		if (!ret)
			ret = nelssa_client_session(cli, &cfg, &session);
		if (!ret) {
			free_request(&r);
			ret = make_request(rng, session, &r, 5, 300, 0);
		}
		CHECK(ret == 0, "a new connection after SIGCONT: %d (%s)", ret,
		      nelssa_client_error(cli));
		if (ret)
			goto out;
	}
	/* The step that timed out may still be running there (-EBUSY). */
	for (int i = 0; i < 100; i++) {
		ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
		if (ret != -EBUSY)
			break;
		usleep(20000);
	}
	CHECK(ret == 0, "a step after SIGCONT: %d", ret);
	run_steps(rng, session, &r, 1, 2);
out:
	free_request(&r);
	nelssa_kmeans_free(&ix);
	free(k);
	free(v);
	return failures ? 1 : 0;
}

/* The largest buffer a TCP socket may grow to, from @path's third field; 0 if unknown. */
static uint64_t tcp_buf_max(const char *path)
{
	unsigned long long a, b, c = 0;
	FILE *f = fopen(path, "r");

	if (f && fscanf(f, "%llu %llu %llu", &a, &b, &c) != 3)
		c = 0;
	if (f)
		fclose(f);
	return c;
}

static int scenario_stall_put(struct tu_rng *rng)
{
	const char *env = getenv("NELSSAD_PID");
	const pid_t pid = env ? (pid_t)atoi(env) : 0;
	const int rows = scenario_arg && !strcmp(scenario_arg, "rows");
	struct nelssa_session_cfg cfg = {
		.shape = { 1, GROUP, 1, DIM, NELSSA_KV_BF16 },
		.placement = NELSSA_PLACE_HEADS, .max_batch = 1, .max_sel = 64,
	};
	const uint64_t wmem = tcp_buf_max("/proc/sys/net/ipv4/tcp_wmem");
	const uint64_t rmem = tcp_buf_max("/proc/sys/net/ipv4/tcp_rmem");
	float q[GROUP * DIM] = { 0 }, o[GROUP * DIM], lse[GROUP];
	uint32_t sel[1] = { 0 };
	struct nelssa_step_in in = { 7, 0, q, sel, 1 };
	struct nelssa_cluster_index ix;
	uint64_t session, tokens, bytes;
	uint16_t *kv;
	int ret;

	if (pid <= 0 || !wmem || !rmem) {
		printf("# stall-put: NELSSAD_PID names no daemon, or no TCP buffer sizes\n");
		return 2;
	}
	/*
	 * What both sockets of the connection may buffer, and 16 MB for UCX's
	 * own: puts must still be waiting for room when the daemon, stopped,
	 * reads none of it.
	 */
	tokens = (wmem + rmem + (16u << 20)) / (2 * 2 * DIM) + 1;
	bytes = tokens * 2 * DIM;
	printf("# socket buffers up to %llu + %llu bytes: %llu tokens, %llu bytes of K and of V\n",
	       (unsigned long long)wmem, (unsigned long long)rmem, (unsigned long long)tokens,
	       (unsigned long long)bytes);
	cfg.capacity_tokens = tokens;
	if (!rows)
		nelssa_client_set_zero_copy(cli, NELSSA_ZERO_COPY_FORCE);
	ret = nelssa_client_session(cli, &cfg, &session);
	if (!ret)
		ret = nelssa_client_request(cli, session, 7, (uint32_t)tokens, (uint32_t)tokens / 8);
	if (ret || nelssa_client_zero_copy(cli, session) != !rows) {
		printf("# setup failed: %d (%s), zero-copy %d\n", ret, nelssa_client_error(cli),
		       nelssa_client_zero_copy(cli, session));
		return 1;
	}
	index_order = ORDER_ORDERED;
	make_index(rng, &ix, (uint32_t)tokens, 0);
	kv = mmap(NULL, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (kv == MAP_FAILED) {
		printf("# mmap: %s\n", strerror(errno));
		return 1;
	}
	tu_fill_kv(rng, kv, 2 * tokens * DIM, 1.0, NELSSA_KV_BF16);
	if (stop_daemon(pid))
		return 1;
	nelssa_client_set_timeout(cli, 500);
	ret = nelssa_client_offload(cli, session, 7, 0, 0, &ix, 0, kv, kv + tokens * DIM);
	printf("# offload to a stopped daemon: %d (%s)\n", ret, nelssa_client_error(cli));
	CHECK(ret == -ETIMEDOUT, "offload to a stopped daemon gave %d, not -ETIMEDOUT", ret);
	/* The rows are the caller's again: gone, a put still reading them faults. */
	munmap(kv, 2 * bytes);
	/* Nothing to send (from the last cluster on): the data path's state alone answers. */
	ret = nelssa_client_offload(cli, session, 7, 0, 0, &ix, ix.n_clusters, q, q);
	printf("# offload after it: %d (%s)\n", ret, nelssa_client_error(cli));
	CHECK(ret == -ECONNRESET && strstr(nelssa_client_error(cli), "connect again"),
	      "an offload after puts in flight were abandoned gave %d, not -ECONNRESET", ret);
	ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
	printf("# step after it: %d (%s)\n", ret, nelssa_client_error(cli));
	CHECK(ret == -ECONNRESET, "a step after puts in flight were abandoned gave %d", ret);
	/*
	 * The daemon stays stopped: continued, UCX 1.13 aborts it in the
	 * emulated put's handler (check-zero-copy.sh kills it instead).
	 */
	nelssa_kmeans_free(&ix);
	return failures ? 1 : 0;
}

static int scenario_bad_step(struct tu_rng *rng)
{
	struct req r;
	uint64_t session;
	float q[GROUP * DIM] = { 0 }, o[GROUP * DIM], lse[GROUP];
	uint32_t sel[1] = { 0 };
	struct nelssa_step_in in = { 999, 0, q, sel, 1 };
	struct nelssa_session_cfg cfg = session_cfg(8192);
	int ret = nelssa_client_session(cli, &cfg, &session);

	CHECK(ret == 0, "session: %d", ret);
	ret = make_request(rng, session, &r, 5, 300, 0);
	CHECK(ret == 0, "request: %d", ret);
	ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
	CHECK(ret == -ENOENT, "unknown request gave %d", ret);
	in.request = 5;
	sel[0] = r.ix[0][0].n_clusters;
	ret = nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL);
	CHECK(ret == -ERANGE, "cluster id beyond the stored ones gave %d", ret);
	ret = nelssa_client_step(cli, session, LAYERS, &in, 1, o, lse, NULL);
	CHECK(ret == -EINVAL, "a layer beyond the shape gave %d", ret);
	run_steps(rng, session, &r, 1, 2);
	free_request(&r);
	return failures ? 1 : 0;
}

static int scenario_die(struct tu_rng *rng)
{
	struct req r;
	uint64_t session;
	float q[GROUP * DIM] = { 0 };
	uint32_t sel[4] = { 0, 1, 2, 3 };
	struct nelssa_step_in in[KV_HEADS];
	struct nelssa_session_cfg cfg = session_cfg(1u << 15);
	int ret = nelssa_client_session(cli, &cfg, &session);

	if (!ret)
		ret = make_request(rng, session, &r, 9, 20000, 0);
	if (ret) {
		printf("# setup failed: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	for (uint32_t h = 0; h < KV_HEADS; h++)
		in[h] = (struct nelssa_step_in){ 9, (uint16_t)h, q, sel, 4 };
	/* Ask for a step with a 1 ms budget, then die with it in flight. */
	printf("# sending a step and dying\n");
	nelssa_client_set_timeout(cli, 1);
	fflush(stdout);
	{
		float o[KV_HEADS * GROUP * DIM], lse[KV_HEADS * GROUP];

		nelssa_client_step(cli, session, 0, in, KV_HEADS, o, lse, NULL);
	}
	raise(SIGKILL);
	return 1;
}

static int scenario_held(struct tu_rng *rng)
{
	struct req r;
	uint64_t session;
	float q[GROUP * DIM] = { 0 };
	uint32_t sel[2] = { 0, 1 };
	struct nelssa_step_in in[KV_HEADS];
	float o[2][KV_HEADS * GROUP * DIM], lse[2][KV_HEADS * GROUP];
	struct nelssa_session_cfg cfg = session_cfg(4096);
	struct nelssa_step_pending *p;
	int ret;

	cfg.tenant = 77;
	ret = nelssa_client_session(cli, &cfg, &session);
	if (!ret)
		ret = make_request(rng, session, &r, 4, 64, 0);
	if (ret) {
		printf("# setup failed: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	for (uint32_t h = 0; h < KV_HEADS; h++)
		in[h] = (struct nelssa_step_in){ 4, (uint16_t)h, q, sel, 2 };
	ret = nelssa_client_step_send(cli, session, 0, in, KV_HEADS, o[0], lse[0], &p);
	if (ret) {
		printf("# sending the step: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	/* The daemon runs one step of a session at a time: -EBUSY proves ours is there. */
	ret = nelssa_client_step(cli, session, 0, in, KV_HEADS, o[1], lse[1], NULL);
	if (ret != -EBUSY) {
		printf("# a second step gave %d (%s), not -EBUSY: is the daemon holding steps?\n",
		       ret, nelssa_client_error(cli));
		return 1;
	}
	/* The request the step reads stays until the step is answered. */
	ret = nelssa_client_request_free(cli, session, 4);
	if (ret != -EBUSY || !strstr(nelssa_client_error(cli), "in flight")) {
		printf("# freeing the held step's request gave %d (%s), not -EBUSY\n", ret,
		       nelssa_client_error(cli));
		return 1;
	}
	printf("held\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int scenario_outlive(struct tu_rng *rng)
{
	struct req r;
	uint64_t session;
	struct nelssa_session_cfg cfg = session_cfg(4096);
	float q[KV_HEADS * GROUP * DIM] = { 0 }, o[KV_HEADS * GROUP * DIM], lse[KV_HEADS * GROUP];
	uint32_t sel[2] = { 0, 1 };
	struct nelssa_step_in in[KV_HEADS];
	int ret = nelssa_client_session(cli, &cfg, &session);

	if (!ret)
		ret = make_request(rng, session, &r, 3, 500, 0);
	if (ret) {
		printf("# setup failed: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	for (uint32_t h = 0; h < KV_HEADS; h++)
		in[h] = (struct nelssa_step_in){ 3, (uint16_t)h, q + h * GROUP * DIM, sel, 2 };
	printf("# ready\n");
	nelssa_client_set_timeout(cli, 5000);
	for (uint32_t i = 0; i < 100000; i++) {
		ret = nelssa_client_step(cli, session, 0, in, KV_HEADS, o, lse, NULL);
		if (ret) {
			printf("# after %u steps: %d (%s)\n", i, ret, nelssa_client_error(cli));
			break;
		}
		usleep(20000);
	}
	free_request(&r);
	/* Control calls fail too, promptly. */
	ret = ret ? nelssa_client_request(cli, session, 4, 10, 10) : 0;
	printf("# a control call afterwards: %d (%s)\n", ret, nelssa_client_error(cli));
	return ret < 0 ? 0 : 1;
}

/* Random selections for every head of @r at @layer; checks @o/@lse against float64. */
static void make_items(struct tu_rng *rng, struct req *r, uint32_t layer, float *q,
		       uint32_t **sel, struct nelssa_step_in *in)
{
	tu_fill_f32(rng, q, (size_t)KV_HEADS * GROUP * DIM, 1.0);
	for (uint32_t h = 0; h < KV_HEADS; h++) {
		const struct nelssa_cluster_index *ix = &r->ix[layer][h];
		uint32_t n = 0;

		sel[h] = tu_alloc(sizeof(uint32_t) * (ix->n_clusters + 1));
		for (uint32_t c = 0; c < ix->n_clusters; c++)
			if (tu_below(rng, 3) == 0)
				sel[h][n++] = c;
		in[h] = (struct nelssa_step_in){ r->id, (uint16_t)h, q + (size_t)h * GROUP * DIM,
						 sel[h], n };
	}
}

static void check_items(struct req *r, uint32_t layer, const struct nelssa_step_in *in,
			const float *o, const float *lse, const char *tag)
{
	const struct nelssa_attn_geom g = { DIM, GROUP, NELSSA_KV_BF16, 1.0f / sqrtf(DIM), 0 };

	for (uint32_t h = 0; h < KV_HEADS; h++) {
		const struct nelssa_cluster_index *ix = &r->ix[layer][h];
		uint32_t *tok = tu_alloc(sizeof(uint32_t) * (r->n + 1)), nt = 0;

		for (uint32_t c = 0; c < in[h].nr_sel; c++)
			for (uint32_t j = 0; j < ix->table[in[h].sel[c]].count; j++)
				tok[nt++] = ix->perm[ix->table[in[h].sel[c]].first + j];
		failures += tu_check_attn(&g, in[h].q, rows(r, r->k, layer, h), rows(r, r->v, layer, h),
					  tok, nt, o + (size_t)h * GROUP * DIM, lse + h * GROUP, tag);
		free(tok);
	}
}

static int scenario_split(struct tu_rng *rng)
{
	struct nelssa_session_cfg cfg = session_cfg(8192);
	struct req ra, rb;
	uint64_t sa, sb;
	float qa[KV_HEADS * GROUP * DIM], qb[KV_HEADS * GROUP * DIM];
	float oa[KV_HEADS * GROUP * DIM], ob[KV_HEADS * GROUP * DIM];
	float la[KV_HEADS * GROUP], lb[KV_HEADS * GROUP];
	uint32_t *sel_a[KV_HEADS], *sel_b[KV_HEADS];
	struct nelssa_step_in ia[KV_HEADS], ib[KV_HEADS];
	struct nelssa_step_pending *pa, *pb;
	int ret;

	if (nelssa_client_session(cli, &cfg, &sa) || nelssa_client_session(cli, &cfg, &sb) ||
	    make_request(rng, sa, &ra, 1, 600, 0) || make_request(rng, sb, &rb, 2, 900, 0)) {
		printf("# setup: %s\n", nelssa_client_error(cli));
		return 1;
	}
	for (int round = 0; round < 5; round++) {
		make_items(rng, &ra, 0, qa, sel_a, ia);
		make_items(rng, &rb, 1, qb, sel_b, ib);
		ret = nelssa_client_step_send(cli, sa, 0, ia, KV_HEADS, oa, la, &pa);
		CHECK(ret == 0, "send A: %d", ret);
		ret = nelssa_client_step_send(cli, sb, 1, ib, KV_HEADS, ob, lb, &pb);
		CHECK(ret == 0, "send B: %d", ret);
		if (failures)
			return 1;
		/* The GPU part of the batch would run here; a look finds the step or not. */
		ret = nelssa_client_step_poll(cli, pa, 0, NULL);
		CHECK(ret == 0 || ret == -EAGAIN, "a look at A gave %d", ret);
		if (ret == -EAGAIN)
			ret = nelssa_client_step_poll(cli, pa, 10000, NULL);
		CHECK(ret == 0, "collect A: %d", ret);
		ret = nelssa_client_step_poll(cli, pb, 10000, NULL);
		CHECK(ret == 0, "collect B: %d", ret);
		check_items(&ra, 0, ia, oa, la, "split A");
		check_items(&rb, 1, ib, ob, lb, "split B");
		for (uint32_t h = 0; h < KV_HEADS; h++) {
			free(sel_a[h]);
			free(sel_b[h]);
		}
	}
	CHECK(nelssa_client_step_poll(cli, pa, 0, NULL) == -EINVAL, "a spent handle polled again");
	free_request(&ra);
	free_request(&rb);
	return failures ? 1 : 0;
}

/*
 * Sessions whose devices hold 8-bit KV (int8, then fp8): the client
 * quantises the bf16 rows at offload.  A prefill by real k-means, then two
 * appends whose first new token falls inside a tile (so the client
 * rewrites that tile with its earlier tokens), then steps over prefill and
 * appended clusters: each checked against float64 attention over the
 * store quantised in one go on this side (tu_decode_tiled(), the uapi's
 * layout decoded by the test) -- so the appends must leave the store as
 * one offload of everything would.  A cluster-wise 8-bit session is
 * refused.
 */
/* Whether the daemon gives a session of @capacity tokens of @dtype (then closed). */
static int session_fits(uint64_t capacity, enum nelssa_kv_dtype dtype)
{
	struct nelssa_session_cfg cfg = session_cfg(capacity);
	uint64_t session;

	cfg.shape.kv_dtype = dtype;
	if (nelssa_client_session(cli, &cfg, &session))
		return 0;
	nelssa_client_session_close(cli, session);
	return 1;
}

static int scenario_kv8(struct tu_rng *rng)
{
	enum { SINK = 4, PREFILL = 1501, CHUNK = 203, MAXT = PREFILL + 2 * CHUNK };
	static const enum nelssa_kv_dtype types[] = { NELSSA_KV_INT8, NELSSA_KV_FP8_E4M3 };
	const struct nelssa_kmeans_cfg kcfg = NELSSA_KMEANS_DEFAULT;
	const struct nelssa_attn_geom ref = { DIM, GROUP, TU_KV_F32, 1.0f / sqrtf(DIM), 0 };
	uint16_t *k = tu_alloc(2ull * KV_HEADS * MAXT * DIM), *v = tu_alloc(2ull * KV_HEADS * MAXT * DIM);
	float *x = tu_alloc(sizeof(float) * MAXT * DIM), *kf = tu_alloc(sizeof(float) * MAXT * DIM);
	float *vf = tu_alloc(sizeof(float) * MAXT * DIM);
	uint8_t *qk = tu_alloc(nelssa_kv_bytes(NELSSA_KV_INT8, DIM, MAXT));
	uint8_t *qv = tu_alloc(nelssa_kv_bytes(NELSSA_KV_INT8, DIM, MAXT));
	uint32_t *sel = tu_alloc(sizeof(uint32_t) * MAXT), *tok = tu_alloc(sizeof(uint32_t) * MAXT);
	uint64_t lo = 1024, hi = 1ull << 30;

	/*
	 * The daemon's capacity: the most bf16 tokens a session may reserve
	 * (to 2 %), then 1.8 times as many of int8 fit -- 136 bytes a token
	 * and head at head dim 64 against 256, tables aside.
	 */
	CHECK(session_fits(lo, NELSSA_KV_BF16) && !session_fits(hi, NELSSA_KV_BF16),
	      "no bf16 capacity bracket");
	while (hi - lo > lo / 64) {
		const uint64_t mid = lo + (hi - lo) / 2;

		*(session_fits(mid, NELSSA_KV_BF16) ? &lo : &hi) = mid;
	}
	printf("# bf16 sessions up to %llu tokens\n", (unsigned long long)lo);
	CHECK(session_fits(lo * 18 / 10, NELSSA_KV_INT8) && session_fits(lo * 18 / 10,
									 NELSSA_KV_FP8_E4M3),
	      "8-bit sessions of 1.8x the bf16 capacity (%llu tokens) refused",
	      (unsigned long long)(lo * 18 / 10));
	CHECK(!session_fits(lo * 21 / 10, NELSSA_KV_INT8),
	      "an int8 session of 2.1x the bf16 capacity was given: the sizes are not int8's");

	for (unsigned int ti = 0; ti < 2; ti++) {
		struct nelssa_session_cfg cfg = session_cfg(4 * MAXT);
		struct nelssa_cluster_index ix[KV_HEADS];
		uint64_t session;
		uint32_t n = PREFILL;

		cfg.shape.kv_dtype = types[ti];
		cfg.placement = NELSSA_PLACE_CLUSTERS;
		CHECK(nelssa_client_session(cli, &cfg, &session) == -EOPNOTSUPP &&
		      strstr(nelssa_client_error(cli), "head-wise"),
		      "a cluster-wise 8-bit session was not refused as such");
		cfg.placement = NELSSA_PLACE_HEADS;
		if (nelssa_client_session(cli, &cfg, &session) ||
		    nelssa_client_request(cli, session, 5, MAXT, MAXT)) {
			printf("# 8-bit session: %s\n", nelssa_client_error(cli));
			return 1;
		}
		if (scenario_arg && !strcmp(scenario_arg, "rma"))
			CHECK(nelssa_client_zero_copy(cli, session) == 1,
			      "the 8-bit session does not put its tiles by RMA");
		tu_fill_kv(rng, k, (size_t)KV_HEADS * MAXT * DIM, 1.0, NELSSA_KV_BF16);
		tu_fill_kv(rng, v, (size_t)KV_HEADS * MAXT * DIM, 1.0, NELSSA_KV_BF16);
		memset(ix, 0, sizeof(ix));
		for (int round = 0; round < 3; round++) {
			for (uint32_t h = 0; h < KV_HEADS; h++) {
				const uint16_t *kh = k + (size_t)h * MAXT * DIM, *vh = v + (size_t)h * MAXT * DIM;
				uint32_t old = ix[h].n_clusters;
				int ret = round ? nelssa_kmeans_append(&ix[h], &kcfg, NELSSA_KV_BF16,
								       kh + (size_t)(n - CHUNK) * DIM, CHUNK) :
						  nelssa_kmeans_build(&ix[h], &kcfg, NELSSA_KV_BF16, kh, n, DIM);

				/*
				 * An append needs the rows of its first tile's earlier
				 * tokens too, which it quantises again: the new ones
				 * alone are refused; from the lowest of those on do.
				 */
				if (!ret && round) {
					const uint32_t t0 = ix[h].table[old].first / 16 * 16;
					uint32_t low = n - CHUNK;

					for (uint32_t p = t0; p < n; p++)
						low = ix[h].perm[p] < low ? ix[h].perm[p] : low;
					CHECK(low < n - CHUNK && nelssa_client_offload_rows(
						      cli, session, 5, 0, (uint16_t)h, &ix[h], old,
						      kh + (size_t)(n - CHUNK) * DIM,
						      vh + (size_t)(n - CHUNK) * DIM, n - CHUNK) == -EINVAL,
					      "an 8-bit append given its new tokens' rows alone");
					ret = nelssa_client_offload_rows(cli, session, 5, 0, (uint16_t)h,
									 &ix[h], old, kh + (size_t)low * DIM,
									 vh + (size_t)low * DIM, low);
				} else if (!ret) {
					ret = nelssa_client_offload(cli, session, 5, 0, (uint16_t)h, &ix[h],
								    old, kh, vh);
				}
				CHECK(ret == 0, "%s offload round %d head %u: %d",
				      types[ti] == NELSSA_KV_INT8 ? "int8" : "fp8", round, h, ret);
				if (ret)
					return 1;
			}
			for (uint32_t h = 0; h < KV_HEADS; h++) {
				const uint16_t *kh = k + (size_t)h * MAXT * DIM, *vh = v + (size_t)h * MAXT * DIM;
				float q[GROUP * DIM], o[GROUP * DIM], lse[GROUP];
				struct nelssa_step_in in = { 5, (uint16_t)h, q, sel, 0 };
				uint32_t nt = 0;
				char what[64];

				/* The store as one offload of all n tokens makes it. */
				for (uint32_t p = 0; p < n; p++)
					nelssa_bf16_to_f32_n(x + (size_t)p * DIM,
							     kh + (size_t)ix[h].perm[p] * DIM, DIM);
				nelssa_kv_quantize(types[ti], DIM, x, n, qk);
				for (uint32_t p = 0; p < n; p++)
					nelssa_bf16_to_f32_n(x + (size_t)p * DIM,
							     vh + (size_t)ix[h].perm[p] * DIM, DIM);
				nelssa_kv_quantize(types[ti], DIM, x, n, qv);
				tu_decode_tiled(qk, n, DIM, types[ti], kf);
				tu_decode_tiled(qv, n, DIM, types[ti], vf);
				for (uint32_t c = 0; c < ix[h].n_clusters; c++)
					if (tu_below(rng, 3) == 0 || c == ix[h].n_clusters - 1)
						sel[in.nr_sel++] = c;
				for (uint32_t c = 0; c < in.nr_sel; c++)
					for (uint32_t j = 0; j < ix[h].table[sel[c]].count; j++)
						tok[nt++] = ix[h].table[sel[c]].first + j;
				tu_fill_f32(rng, q, GROUP * DIM, 1.0);
				if (nelssa_client_step(cli, session, 0, &in, 1, o, lse, NULL)) {
					printf("# 8-bit step: %s\n", nelssa_client_error(cli));
					return 1;
				}
				snprintf(what, sizeof(what), "%s round %d head %u",
					 types[ti] == NELSSA_KV_INT8 ? "int8" : "fp8", round, h);
				failures += tu_check_attn(&ref, q, (const uint16_t *)(void *)kf,
							  (const uint16_t *)(void *)vf, tok, nt, o, lse, what);
			}
			n += CHUNK;
		}
		for (uint32_t h = 0; h < KV_HEADS; h++)
			nelssa_kmeans_free(&ix[h]);
		CHECK(nelssa_client_session_close(cli, session) == 0, "8-bit session close");
	}
	free(k);
	free(v);
	free(x);
	free(kf);
	free(vf);
	free(qk);
	free(qv);
	free(sel);
	free(tok);
	return failures ? 1 : 0;
}

static int scenario_migrate(struct tu_rng *rng)
{
	enum { MAXT = 4200, SINK = 4, CHUNK = 512 };
	const struct nelssa_attn_geom g = { DIM, GROUP, NELSSA_KV_BF16, 1.0f / sqrtf(DIM), 0 };
	const struct nelssa_kmeans_cfg kcfg = NELSSA_KMEANS_DEFAULT;
	struct nelssa_hw_profile hw;
	struct nelssa_model_profile m = { LAYERS, KV_HEADS, DIM, 2, 0.0, 16.0, 0.04, 0 };
	struct nelssa_router router;
	struct nelssa_cluster_index ix[KV_HEADS];
	uint16_t *k = tu_alloc(2ull * KV_HEADS * MAXT * DIM), *v = tu_alloc(2ull * KV_HEADS * MAXT * DIM);
	float q[KV_HEADS * GROUP * DIM], o[KV_HEADS * GROUP * DIM], lse[KV_HEADS * GROUP];
	uint32_t *tok = tu_alloc(sizeof(uint32_t) * MAXT), *sel[KV_HEADS], clustered = 0;
	struct nelssa_session_cfg cfg = session_cfg(8192);
	uint64_t session = 0;
	int on_pnm = 0, steps_gpu = 0, steps_pnm = 0, appends = 0;

	nelssa_hw_profile_builtin("h200", &hw);
	nelssa_router_init(&router, &hw, &m, 4);
	router.t_input = 1500;		/* a short threshold, so the test grows past it soon */
	router.cap_step = router.cap_gpu_meta = 1e30;
	tu_fill_kv(rng, k, (size_t)KV_HEADS * MAXT * DIM, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(rng, v, (size_t)KV_HEADS * MAXT * DIM, 1.0, NELSSA_KV_BF16);
	memset(ix, 0, sizeof(ix));
	for (uint32_t h = 0; h < KV_HEADS; h++)
		sel[h] = tu_alloc(sizeof(uint32_t) * MAXT);
	for (uint32_t n = 1000; n <= MAXT - 100; n += 100) {
		tu_fill_f32(rng, q, sizeof(q) / sizeof(q[0]), 1.0);
		/*
		 * Re-routed at its length now, reserving its final length on the
		 * tier (the router admits nothing it could not carry to its end).
		 */
		const struct nelssa_route_query rq = { .len = n, .final_len = MAXT, .prev = -1 };

		if (on_pnm)
			nelssa_router_grow(&router, 100, MAXT);	/* the last step's tokens */
		if (!on_pnm && nelssa_route(&router, &rq) == NELSSA_ROUTE_PNM) {
			/* The handoff: cluster what leaves the window, offload it. */
			clustered = n - 64;
			if (nelssa_client_session(cli, &cfg, &session) ||
			    nelssa_client_request(cli, session, 77, MAXT, MAXT)) {
				printf("# handoff setup: %s\n", nelssa_client_error(cli));
				return 1;
			}
			for (uint32_t h = 0; h < KV_HEADS; h++) {
				const uint16_t *kh = k + (size_t)h * MAXT * DIM, *vh = v + (size_t)h * MAXT * DIM;

				if (nelssa_kmeans_build(&ix[h], &kcfg, NELSSA_KV_BF16, kh + SINK * DIM,
							clustered - SINK, DIM) ||
				    nelssa_client_offload(cli, session, 77, 0, (uint16_t)h, &ix[h], 0,
							  kh + SINK * DIM, vh + SINK * DIM)) {
					printf("# handoff offload: %s\n", nelssa_client_error(cli));
					return 1;
				}
			}
			on_pnm = 1;
			printf("# handed off at %u tokens (%u clustered)\n", n, clustered);
		}
		if (on_pnm && n - clustered >= 64 + CHUNK) {
			/* A decode-time chunk leaves the window: cluster it, append. */
			for (uint32_t h = 0; h < KV_HEADS; h++) {
				const uint16_t *kh = k + (size_t)h * MAXT * DIM, *vh = v + (size_t)h * MAXT * DIM;
				uint32_t old = ix[h].n_clusters;

				if (nelssa_kmeans_append(&ix[h], &kcfg, NELSSA_KV_BF16,
							 kh + (size_t)clustered * DIM, CHUNK) ||
				    nelssa_client_offload(cli, session, 77, 0, (uint16_t)h, &ix[h], old,
							  kh + SINK * DIM, vh + SINK * DIM)) {
					printf("# append: %s\n", nelssa_client_error(cli));
					return 1;
				}
			}
			clustered += CHUNK;
			appends++;
		}
		for (uint32_t h = 0; h < KV_HEADS; h++) {
			const uint16_t *kh = k + (size_t)h * MAXT * DIM, *vh = v + (size_t)h * MAXT * DIM;
			float *qh = q + (size_t)h * GROUP * DIM, *oh = o + (size_t)h * GROUP * DIM;
			uint32_t nt = 0;
			char what[64];

			if (!on_pnm) {
				/* On the GPU: dense attention over all n tokens. */
				nelssa_attn_dense(&g, qh, kh, vh, n, oh, lse + h * GROUP);
				snprintf(what, sizeof(what), "GPU at %u, head %u", n, h);
				failures += tu_check_attn(&g, qh, kh, vh, NULL, n, oh, lse + h * GROUP, what);
				continue;
			}
			/* On PNM: a random half of the clusters, plus the window here. */
			for (uint32_t c = 0; c < ix[h].n_clusters; c++)
				if (tu_below(rng, 2))
					sel[h][nt++] = c;
			{
				struct nelssa_step_in in = { 77, (uint16_t)h, qh, sel[h], nt };
				struct nelssa_window win = { SINK, n - clustered };
				float wo[GROUP * DIM], wl[GROUP], po[GROUP * DIM], pl[GROUP];
				const float *pop = po, *plp = pl;
				uint32_t count = 0;

				if (nelssa_client_step(cli, session, 0, &in, 1, po, pl, NULL)) {
					printf("# PNM step: %s\n", nelssa_client_error(cli));
					return 1;
				}
				nelssa_window_attn(&g, qh, kh, vh, n, &win, wo, wl);
				nelssa_final_merge(oh, lse + h * GROUP, wo, wl, &pop, &plp, 1, GROUP, DIM);
				for (uint32_t t = 0; t < SINK; t++)
					tok[count++] = t;
				for (uint32_t c = 0; c < nt; c++) {
					const struct nelssa_cluster *e = &ix[h].table[sel[h][c]];

					for (uint32_t j = 0; j < e->count; j++)
						tok[count++] = SINK + ix[h].perm[e->first + j];
				}
				for (uint32_t t = clustered; t < n; t++)
					tok[count++] = t;
				snprintf(what, sizeof(what), "PNM at %u, head %u", n, h);
				failures += tu_check_attn(&g, qh, kh, vh, tok, count, oh, lse + h * GROUP,
							  what);
			}
		}
		if (on_pnm)
			steps_pnm++;
		else
			steps_gpu++;
	}
	printf("# %d steps on the GPU, %d on PNM, %d chunks appended\n", steps_gpu, steps_pnm,
	       appends);
	CHECK(steps_gpu > 0 && steps_pnm > 0 && appends > 0, "the request did not cross over");
	/* The router's count followed the request to its last length, and let go. */
	CHECK(router.pnm_requests == 1 && router.pnm_tokens == MAXT - 100 &&
	      router.pnm_final == MAXT, "the router counts %u PNM request(s), %.0f tokens, %.0f "
	      "reserved, not 1, %u, %u", router.pnm_requests, router.pnm_tokens, router.pnm_final,
	      MAXT - 100, MAXT);
	nelssa_router_leave(&router, MAXT - 100, MAXT);
	CHECK(router.pnm_requests == 0 && router.pnm_tokens == 0 && router.pnm_final == 0,
	      "the router still counts a PNM request after it left");
	for (uint32_t h = 0; h < KV_HEADS; h++) {
		nelssa_kmeans_free(&ix[h]);
		free(sel[h]);
	}
	free(k);
	free(v);
	free(tok);
	return failures ? 1 : 0;
}

/* Sessions and free device memory as the daemon counts them (scenario "probe"). */
static int scenario_probe(struct tu_rng *rng)
{
	/* Far beyond any device, within what a session may ask for. */
	struct nelssa_session_cfg cfg = session_cfg(UINT32_MAX / 2);
	int64_t sessions = daemon_sessions();
	const char *msg, *at;
	uint64_t session;
	double free_mib;
	int ret;

	(void)rng;
	if (sessions < 0) {
		printf("# stats: %s\n", nelssa_client_error(cli));
		return 1;
	}
	ret = nelssa_client_session(cli, &cfg, &session);
	msg = nelssa_client_error(cli);
	at = strstr(msg, "MiB per device, ");
	if (ret != -ENOSPC || !at || sscanf(at, "MiB per device, %lf MiB are free", &free_mib) != 1) {
		printf("# an oversized session gave %d (%s), not -ENOSPC naming the free memory\n",
		       ret, msg);
		return 1;
	}
	printf("sessions %lld\nfree_mib %.1f\n", (long long)sessions, free_mib);
	return 0;
}

/* Offloads and steps round after round until killed, saying where it is. */
static int scenario_busy(struct tu_rng *rng)
{
	enum { TOKENS = 8192 };
	struct nelssa_session_cfg cfg = session_cfg(1u << 14);
	float q[KV_HEADS * GROUP * DIM], o[KV_HEADS * GROUP * DIM], lse[KV_HEADS * GROUP];
	uint32_t sel[8] = { 0, 1, 2, 3, 4, 5, 6, 7 }, offloads = 0, steps = 0;
	struct nelssa_step_in in[KV_HEADS];
	struct req r;
	uint64_t session;
	int ret = nelssa_client_session(cli, &cfg, &session);

	if (ret) {
		printf("# session: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	/* One request's data, made once: each round offloads it again, anew. */
	r.n = TOKENS;
	r.k = tu_alloc(2ull * LAYERS * KV_HEADS * TOKENS * DIM);
	r.v = tu_alloc(2ull * LAYERS * KV_HEADS * TOKENS * DIM);
	tu_fill_kv(rng, r.k, (size_t)LAYERS * KV_HEADS * TOKENS * DIM, 1.0, NELSSA_KV_BF16);
	tu_fill_kv(rng, r.v, (size_t)LAYERS * KV_HEADS * TOKENS * DIM, 1.0, NELSSA_KV_BF16);
	for (uint32_t l = 0; l < LAYERS; l++)
		for (uint32_t h = 0; h < KV_HEADS; h++)
			make_index(rng, &r.ix[l][h], TOKENS, 0);
	tu_fill_f32(rng, q, sizeof(q) / sizeof(q[0]), 1.0);
	for (uint64_t round = 1;; round++) {
		r.id = round;
		ret = nelssa_client_request(cli, session, r.id, TOKENS, TOKENS);
		for (uint32_t l = 0; l < LAYERS && !ret; l++)
			for (uint32_t h = 0; h < KV_HEADS && !ret; h++) {
				printf("offload %u\n", ++offloads);
				ret = nelssa_client_offload(cli, session, r.id, (uint16_t)l, (uint16_t)h,
							    &r.ix[l][h], 0, rows(&r, r.k, l, h),
							    rows(&r, r.v, l, h));
			}
		for (uint32_t h = 0; h < KV_HEADS; h++)
			in[h] = (struct nelssa_step_in){ r.id, (uint16_t)h, q + (size_t)h * GROUP * DIM,
							 sel, 8 };
		for (uint32_t s = 0; s < 4 && !ret; s++) {
			printf("step %u\n", ++steps);
			ret = nelssa_client_step(cli, session, (uint16_t)(s % LAYERS), in, KV_HEADS, o,
						 lse, NULL);
		}
		if (!ret)
			ret = nelssa_client_request_free(cli, session, r.id);
		if (ret) {
			printf("# round %llu: %d (%s)\n", (unsigned long long)round, ret,
			       nelssa_client_error(cli));
			return 1;
		}
	}
}

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Works until the daemon goes, then checks that every call fails, each
 * within its timeout (plus slack for a loaded machine), none hanging.
 */
static int scenario_load(struct tu_rng *rng)
{
	enum { TIMEOUT_MS = 3000, SLACK_MS = 2000, TOKENS = 4096 };
	const int offload = scenario_arg && !strcmp(scenario_arg, "offload");
	struct nelssa_session_cfg cfg = session_cfg(1u << 15);
	float q[KV_HEADS * GROUP * DIM], o[KV_HEADS * GROUP * DIM], lse[KV_HEADS * GROUP];
	uint32_t sel[4] = { 0, 1, 2, 3 };
	struct nelssa_step_in in[KV_HEADS];
	uint64_t session, t0, ms, worst = 0, calls = 0, id = 1;
	struct req r;
	int ret;

	ret = nelssa_client_session(cli, &cfg, &session);
	if (!ret)
		ret = make_request(rng, session, &r, id, TOKENS, 0);
	if (ret) {
		printf("# setup: %d (%s)\n", ret, nelssa_client_error(cli));
		return 1;
	}
	for (uint32_t h = 0; h < KV_HEADS; h++)
		in[h] = (struct nelssa_step_in){ 1, (uint16_t)h, q + (size_t)h * GROUP * DIM, sel, 4 };
	tu_fill_f32(rng, q, sizeof(q) / sizeof(q[0]), 1.0);
	nelssa_client_set_timeout(cli, TIMEOUT_MS);
	printf("running\n");
	for (;;) {
		t0 = mono_ms();
		if (offload) {
			/* A second request offloaded over and over (heads-wise: rewrites). */
			ret = calls ? 0 : nelssa_client_request(cli, session, 2, TOKENS, TOKENS);
			for (uint32_t h = 0; h < KV_HEADS && !ret; h++)
				ret = nelssa_client_offload(cli, session, 2, 0, (uint16_t)h, &r.ix[0][h], 0,
							    rows(&r, r.k, 0, h), rows(&r, r.v, 0, h));
		} else {
			ret = nelssa_client_step(cli, session, 0, in, KV_HEADS, o, lse, NULL);
		}
		ms = mono_ms() - t0;
		calls++;
		if (ret)
			break;
	}
	printf("# after %llu calls: %d in %llu ms (%s)\n", (unsigned long long)calls, ret,
	       (unsigned long long)ms, nelssa_client_error(cli));
	worst = ms;
	/* Then each kind of call once more: all fail, none hangs. */
	for (int k = 0; k < 3; k++) {
		t0 = mono_ms();
		if (k == 0)
			ret = nelssa_client_offload(cli, session, 1, 1, 0, &r.ix[1][0], 0,
						    rows(&r, r.k, 1, 0), rows(&r, r.v, 1, 0));
		else if (k == 1)
			ret = nelssa_client_step(cli, session, 1, in, KV_HEADS, o, lse, NULL);
		else
			ret = nelssa_client_request(cli, session, 9, 10, 10);
		ms = mono_ms() - t0;
		printf("# %s afterwards: %d in %llu ms (%s)\n",
		       k == 0 ? "offload" : k == 1 ? "step" : "REQ_ALLOC", ret,
		       (unsigned long long)ms, nelssa_client_error(cli));
		CHECK(ret < 0, "a call to a daemon that is gone succeeded");
		if (ms > worst)
			worst = ms;
	}
	printf("worst_ms %llu\n", (unsigned long long)worst);
	CHECK(worst <= TIMEOUT_MS + SLACK_MS, "a call took %llu ms, beyond its %u ms timeout",
	      (unsigned long long)worst, TIMEOUT_MS);
	free_request(&r);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct nelssa_client_opts o = { 0 };
	struct tu_rng rng;
	const char *sc;
	char sc_buf[64];
	int ret;

	if (argc < 4) {
		fprintf(stderr, "usage: e2e_client HOST PORT check|check-clusters|check-staged [rma|rdma|staged "
			"[ordered|mixed|shuffled]]|stall-put|"
			"capacity|refused|"
			"bad-step|zero-items|stall|die|held|outlive|migrate|kv8 [rma]|split|probe|busy|no-stride|"
			"load offload|step\n"
			"  (check*, kv8: SCENARIO-adjacent for adjacent K and V blocks)\n");
		return 2;
	}
	o.host = argv[1];
	o.port = (uint16_t)atoi(argv[2]);
	o.timeout_ms = 60000;
	o.name = "e2e";
	/*
	 * SCENARIO-adjacent: the same in a session of adjacent K and V blocks
	 * (NELSSA_KV_ADJACENT).
	 */
	snprintf(sc_buf, sizeof(sc_buf), "%s", argv[3]);
	if (strlen(sc_buf) > 9 && !strcmp(sc_buf + strlen(sc_buf) - 9, "-adjacent")) {
		sc_buf[strlen(sc_buf) - 9] = 0;
		kv_layout = NELSSA_KV_ADJACENT;
	}
	sc = sc_buf;
	scenario_arg = argc > 4 ? argv[4] : NULL;
	if (argc > 5 && strcmp(argv[5], "ordered") && strcmp(argv[5], "mixed") &&
	    strcmp(argv[5], "shuffled")) {
		fprintf(stderr, "e2e_client: the index order is ordered, mixed or shuffled, "
			"not '%s'\n", argv[5]);
		return 2;
	}
	if (argc > 5)
		index_order = !strcmp(argv[5], "ordered") ? ORDER_ORDERED :
			      !strcmp(argv[5], "mixed") ? ORDER_MIXED : ORDER_SHUFFLED;
	setvbuf(stdout, NULL, _IOLBF, 0);
	tu_init("e2e");
	tu_rng_for(&rng, sc, 0);
	opts = o;
	ret = nelssa_client_connect(&o, &cli);
	if (ret) {
		printf("# connect: %s\n", nelssa_client_error(cli));
		nelssa_client_close(cli);
		return 1;
	}
	if (!strcmp(sc, "check-clusters") || !strcmp(sc, "check-clusters-bf16"))
		placement = NELSSA_PLACE_CLUSTERS;
	/* check-bf16, check-clusters-bf16: the GPU kernels' bf16 dot products. */
	if (strstr(sc, "-bf16"))
		attn_flags = NELSSA_ATTN_BF16_DOTS;
	/* check-staged: this client opts out of zero-copy ingest. */
	if (!strcmp(sc, "check-staged"))
		nelssa_client_set_zero_copy(cli, NELSSA_ZERO_COPY_OFF);
	/*
	 * Expecting RMA: put even where UCX emulates it (TCP, shared memory),
	 * the transports a test has; AUTO would stage there.
	 */
	else if (scenario_arg && (!strcmp(scenario_arg, "rma") ||
				  !strcmp(scenario_arg, "forced-received")))
		nelssa_client_set_zero_copy(cli, NELSSA_ZERO_COPY_FORCE);
	if (!strcmp(sc, "check") || !strcmp(sc, "check-clusters") || !strcmp(sc, "check-staged") ||
	    !strcmp(sc, "check-bf16") || !strcmp(sc, "check-clusters-bf16"))
		ret = scenario_check(&rng);
	else if (!strcmp(sc, "capacity"))
		ret = scenario_capacity(&rng);
	else if (!strcmp(sc, "no-stride"))
		ret = scenario_no_stride(&rng);
	else if (!strcmp(sc, "refused"))
		ret = scenario_refused(&rng);
	else if (!strcmp(sc, "bad-step"))
		ret = scenario_bad_step(&rng);
	else if (!strcmp(sc, "zero-items"))
		ret = scenario_zero_items(&rng);
	else if (!strcmp(sc, "stall-put"))
		ret = scenario_stall_put(&rng);
	else if (!strcmp(sc, "stall"))
		ret = scenario_stall(&rng);
	else if (!strcmp(sc, "die"))
		ret = scenario_die(&rng);
	else if (!strcmp(sc, "held"))
		ret = scenario_held(&rng);
	else if (!strcmp(sc, "outlive"))
		ret = scenario_outlive(&rng);
	else if (!strcmp(sc, "migrate"))
		ret = scenario_migrate(&rng);
	else if (!strcmp(sc, "kv8"))
		ret = scenario_kv8(&rng);
	else if (!strcmp(sc, "split"))
		ret = scenario_split(&rng);
	else if (!strcmp(sc, "probe"))
		ret = scenario_probe(&rng);
	else if (!strcmp(sc, "busy"))
		ret = scenario_busy(&rng);
	else if (!strcmp(sc, "load"))
		ret = scenario_load(&rng);
	else
		ret = 2;
	nelssa_client_close(cli);
	return ret;
}
