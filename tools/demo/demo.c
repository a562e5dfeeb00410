// SPDX-License-Identifier: MIT
/*
 * nelssa-demo: a GPU node's decode loop against nelssad, end to end.
 *
 * Prefill: for every request, layer and KV head, a synthetic context
 * (tools/accuracy/synth.c: sinks, topics on RoPE channels, needles) is
 * clustered with the segmented k-means over its middle tokens and the
 * clusters are offloaded.  Decode: every step and layer, the library's
 * default selection (NELSSA_SELECT_DEFAULT: centroid and far-member
 * scores filling a token budget) picks the clusters per (request, head) on
 * the "GPU" (this process), one step message asks the PNM devices for
 * attention over them, and the reply is merged with the local window (4
 * sinks + 64 recent tokens) and the estimation term over the clusters not
 * selected (weighted by each cluster's key spread), both computed here.  Each merged output is compared with
 * dense attention over the whole context.  Printed: the per-step latency
 * breakdown, decode tokens/s, the tokens read and the accuracy.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include <nelssa/client.h>
#include <nelssa/sparse.h>

#include "../accuracy/synth.h"
#include "attn_store.h"
#include "tool_util.h"

#define D SYNTH_D
#define G SYNTH_G
#define MAX_REQ 16

struct head {
	struct synth s;
	struct nelssa_cluster_index ix;
	uint32_t *sizes;
	float *far;	/* farthest member per cluster, the second probe */
	float *vsum;	/* member V sums, for the estimation term */
	float *m2;	/* member key spread, which weighs it */
};

struct opts {
	const char *host;
	uint16_t port;
	uint32_t ctx[MAX_REQ], n_req, layers, kv_heads, steps;
	double budget;
	int json;
	uint8_t kv_dtype;	/* on the devices: enum nelssa_kv_dtype */
};

static void *xcalloc(size_t n, size_t sz)
{
	return tl_calloc("nelssa-demo", n, sz);
}

struct prefill_job {
	const struct opts *o;
	struct head *heads;
	atomic_uint next;
	atomic_int failed;
};

static void *prefill_worker(void *arg)
{
	struct prefill_job *j = arg;
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	const struct nelssa_kmeans_cfg kcfg = NELSSA_KMEANS_DEFAULT;
	const uint32_t per_req = j->o->layers * j->o->kv_heads;
	uint32_t i;

	while ((i = atomic_fetch_add(&j->next, 1)) < j->o->n_req * per_req) {
		struct head *hd = &j->heads[i];
		const uint32_t r = i / per_req, n = j->o->ctx[r], mid = n - win.sink - win.recent;

		if (synth_make(&hd->s, n, 7919ull * (r + 1) + i) ||
		    nelssa_kmeans_build(&hd->ix, &kcfg, NELSSA_KV_BF16,
					(const char *)hd->s.k + win.sink * D * sizeof(uint16_t), mid, D)) {
			atomic_store(&j->failed, 1);
			break;
		}
		hd->sizes = calloc(hd->ix.n_clusters, sizeof(uint32_t));
		hd->far = calloc((size_t)hd->ix.n_clusters * D, sizeof(float));
		hd->vsum = calloc((size_t)hd->ix.n_clusters * D, sizeof(float));
		hd->m2 = calloc((size_t)hd->ix.n_clusters * D, sizeof(float));
		if (!hd->sizes || !hd->far || !hd->vsum || !hd->m2) {
			atomic_store(&j->failed, 1);
			break;
		}
		for (uint32_t c = 0; c < hd->ix.n_clusters; c++)
			hd->sizes[c] = hd->ix.table[c].count;
		nelssa_cluster_far_keys(&hd->ix, NELSSA_KV_BF16,
					(const char *)hd->s.k + win.sink * D * sizeof(uint16_t), hd->far);
		nelssa_cluster_value_sums(&hd->ix, NELSSA_KV_BF16,
					  (const char *)hd->s.v + win.sink * D * sizeof(uint16_t),
					  hd->vsum);
		nelssa_cluster_key_spread(&hd->ix, NELSSA_KV_BF16,
					  (const char *)hd->s.k + win.sink * D * sizeof(uint16_t),
					  hd->m2);
	}
	return NULL;
}

static const char *const estimate_name[] = { "none", "mean", "spread" };

/* The estimation term over the clusters of @hd that @sel does not hold. */
static int estimate_rest(const struct nelssa_attn_geom *g, enum nelssa_estimate how,
			 const float *q, const struct head *hd, const uint32_t *sel, uint32_t n_sel,
			 float *o, float *lse)
{
	uint32_t *rest = xcalloc(hd->ix.n_clusters, sizeof(uint32_t));
	int n_rest = nelssa_unselected(sel, n_sel, hd->sizes, hd->ix.n_clusters, rest), ret;

	ret = n_rest < 0 ? n_rest :
	      nelssa_estimate_attn_spread(g, q, hd->ix.centroids,
					  how == NELSSA_ESTIMATE_SPREAD ? hd->m2 : NULL, hd->vsum,
					  hd->sizes, rest, (uint32_t)n_rest, o, lse);
	if (ret)
		fprintf(stderr, "nelssa-demo: estimate failed\n");
	free(rest);
	return ret;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nelssa-demo [--host H] [--port P] [--contexts N,N..] [--layers N]\n"
		"                   [--kv-heads N] [--steps N] [--budget F] [--kv-dtype T]\n"
		"                   [--json]\n"
		"  --host, --port  nelssad's control address (default 127.0.0.1:18515)\n"
		"  --contexts      one request per context length (default 32768,49152)\n"
		"  --layers        decoder layers (default 2)\n"
		"  --kv-heads      KV heads per layer, 4 query heads each (default 4)\n"
		"  --steps         decode steps (default 4)\n"
		"  --budget        tokens each selection reads, as a fraction of the\n"
		"                  context's clustered tokens (default 0.04); the window\n"
		"                  is read besides.  --ratio is a deprecated alias: it\n"
		"                  is the same token budget, no longer a ratio of clusters\n"
		"  --kv-dtype      KV on the devices: bf16 (default), fp8 or int8, which the\n"
		"                  client quantises into at offload (half the bytes)\n"
		"  --json          one JSON object instead of the report\n");
}

static int parse(struct opts *o, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "host", required_argument, NULL, 'H' }, { "port", required_argument, NULL, 'p' },
		{ "contexts", required_argument, NULL, 'c' }, { "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' }, { "steps", required_argument, NULL, 's' },
		{ "budget", required_argument, NULL, 'b' }, { "ratio", required_argument, NULL, 'r' },
		{ "json", no_argument, NULL, 'j' }, { "kv-dtype", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	char *end, *tok, *save = NULL;
	unsigned long v;
	int c;

	*o = (struct opts){ "127.0.0.1", 18515, { 32768, 49152 }, 2, 2, 4, 4, 0.04, 0, NELSSA_KV_BF16 };
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'H':
			o->host = optarg;
			break;
		case 'c':
			o->n_req = 0;
			for (tok = strtok_r(optarg, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
				v = strtoul(tok, &end, 10);
				if (*end || v < 1024 || v > (1u << 20) || o->n_req == MAX_REQ) {
					fprintf(stderr, "nelssa-demo: --contexts: up to %d lengths in "
						"1024..1048576\n", MAX_REQ);
					return -1;
				}
				o->ctx[o->n_req++] = (uint32_t)v;
			}
			if (!o->n_req)
				return -1;
			break;
		case 'r':
			fprintf(stderr, "nelssa-demo: --ratio is deprecated: it now sets the "
				"token budget, as --budget does\n");
			/* fall through */
		case 'b':
			o->budget = strtod(optarg, &end);
			if (*end || !(o->budget > 0 && o->budget <= 1)) {
				fprintf(stderr, "nelssa-demo: --budget: need (0, 1]\n");
				return -1;
			}
			break;
		case 'j':
			o->json = 1;
			break;
		case 'T':
			o->kv_dtype = tl_kv_dtype_parse(optarg);
			if (o->kv_dtype != NELSSA_KV_BF16 &&
			    !nelssa_kv_is_tiled((enum nelssa_kv_dtype)o->kv_dtype)) {
				fprintf(stderr, "nelssa-demo: --kv-dtype: need bf16, fp8 or int8\n");
				return -1;
			}
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'p': case 'l': case 'k': case 's':
			v = strtoul(optarg, &end, 10);
			if (*end || !*optarg || v < (c == 'p' ? 1u : 1u) ||
			    v > (c == 'p' ? 65535u : c == 's' ? 10000u : 256u)) {
				fprintf(stderr, "nelssa-demo: bad value '%s'\n", optarg);
				return -1;
			}
			if (c == 'p')
				o->port = (uint16_t)v;
			else
				*(c == 'l' ? &o->layers : c == 'k' ? &o->kv_heads : &o->steps) = (uint32_t)v;
			break;
		default:
			return -1;
		}
	}
	return optind < argc ? -1 : 0;
}

int main(int argc, char **argv)
{
	const struct nelssa_window win = NELSSA_WINDOW_DEFAULT;
	const struct nelssa_attn_geom g = { D, G, NELSSA_KV_BF16, 1.0f / sqrtf((float)D), 0 };
	const size_t row = D * sizeof(uint16_t);
	struct nelssa_client_opts co = { 0 };
	struct nelssa_session_cfg sc = { 0 };
	struct nelssa_client *cli;
	struct opts o;
	struct head *heads;
	uint64_t session, cap = 0;
	double t0, t_prefill, t_select = 0, t_window = 0, t_rtt = 0, t_decode = 0;
	double t_dev = 0, t_disp = 0, t_agg = 0, t_recv = 0, *errs;
	uint32_t n_items, n_err = 0, hits = 0, needles = 0, n_steps = 0;
	double sel_tokens = 0, all_tokens = 0, n_sel_items = 0;
	const struct nelssa_select_cfg scfg = NELSSA_SELECT_DEFAULT;
	int ret;

	if (parse(&o, argc, argv)) {
		usage(stderr);
		return 2;
	}
	n_items = o.n_req * o.kv_heads;
	co = (struct nelssa_client_opts){ o.host, o.port, 120000, "nelssa-demo" };
	if (nelssa_client_connect(&co, &cli)) {
		fprintf(stderr, "nelssa-demo: %s\n", nelssa_client_error(cli));
		nelssa_client_close(cli);
		return 1;
	}
	for (uint32_t r = 0; r < o.n_req; r++)
		cap += o.ctx[r];
	sc.shape = (struct nelssa_shape){ (uint16_t)o.layers, (uint16_t)(o.kv_heads * G),
					  (uint16_t)o.kv_heads, D, o.kv_dtype, 0, NELSSA_KV_PACKED };
	sc.max_batch = o.n_req;
	sc.max_sel = 1u << 16;
	sc.capacity_tokens = cap + cap / 8;
	ret = nelssa_client_session(cli, &sc, &session);
	if (ret) {
		fprintf(stderr, "nelssa-demo: session: %s\n", nelssa_client_error(cli));
		return 1;
	}
	if (!o.json)
		printf("nelssa-demo: %u requests (%s%u", o.n_req, "", o.ctx[0]);
	for (uint32_t r = 1; r < o.n_req && !o.json; r++)
		printf(", %u", o.ctx[r]);
	if (!o.json)
		printf(" tokens), %u layers x %u KV heads x %u query heads each, %u PNM devices\n",
		       o.layers, o.kv_heads, G, nelssa_client_devices(cli));

	/* Prefill: generate, cluster, offload. */
	heads = xcalloc((size_t)o.n_req * o.layers * o.kv_heads, sizeof(*heads));
	t0 = tl_now();
	/* The GPU's prefill work (synthesis, k-means) on every core, then offload. */
	{
		struct prefill_job job = { &o, heads, 0, 0 };
		long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
		uint32_t nt = ncpu < 1 ? 1 : ncpu > 64 ? 64 : (uint32_t)ncpu;
		pthread_t th[64];

		if (!o.json)
			fprintf(stderr, "  prefill: clustering %u KV heads on %u threads...\n",
				o.n_req * o.layers * o.kv_heads, nt);
		/*
		 * The heads are spread over the cores here; BLAS threads under
		 * each k-means' sgemm would only contend with them (measured:
		 * prefill 17.6 s with them, 12.3 s without, 2 cores).
		 */
		openblas_set_num_threads(1);
		for (uint32_t i = 0; i < nt; i++)
			pthread_create(&th[i], NULL, prefill_worker, &job);
		for (uint32_t i = 0; i < nt; i++)
			pthread_join(th[i], NULL);
		if (job.failed) {
			fprintf(stderr, "nelssa-demo: prefill failed (out of memory?)\n");
			return 1;
		}
	}
	if (!o.json)
		fprintf(stderr, "  prefill: offloading to the PNM node...\n");
	for (uint32_t r = 0; r < o.n_req; r++) {
		const uint32_t mid = o.ctx[r] - win.sink - win.recent;

		ret = nelssa_client_request(cli, session, r + 1, mid, mid);
		if (ret) {
			fprintf(stderr, "nelssa-demo: request: %s\n", nelssa_client_error(cli));
			return 1;
		}
		for (uint32_t l = 0; l < o.layers; l++) {
			for (uint32_t h = 0; h < o.kv_heads; h++) {
				struct head *hd = &heads[((size_t)r * o.layers + l) * o.kv_heads + h];

				ret = nelssa_client_offload(cli, session, r + 1, (uint16_t)l, (uint16_t)h,
							    &hd->ix, 0,
							    (const char *)hd->s.k + win.sink * row,
							    (const char *)hd->s.v + win.sink * row);
				if (ret) {
					fprintf(stderr, "nelssa-demo: offload: %s\n",
						nelssa_client_error(cli));
					return 1;
				}
			}
		}
	}
	t_prefill = tl_now() - t0;

	/* Decode. */
	errs = xcalloc((size_t)o.steps * o.layers * n_items * G, sizeof(double));
	{
		struct nelssa_step_in *in = xcalloc(n_items, sizeof(*in));
		float *q = xcalloc((size_t)n_items * G * D, sizeof(float));
		float *po = xcalloc((size_t)n_items * G * D, sizeof(float));
		float *pl = xcalloc((size_t)n_items * G, sizeof(float));
		uint32_t **sel = xcalloc(n_items, sizeof(*sel));
		uint64_t rng = 0x9e3779b97f4a7c15ull;

		for (uint32_t s = 0; s < o.steps; s++) {
			for (uint32_t l = 0; l < o.layers; l++) {
				struct nelssa_step_times t;
				double a = tl_now(), b;

				for (uint32_t i = 0; i < n_items; i++) {
					struct head *hd = &heads[((size_t)(i / o.kv_heads) * o.layers + l) *
								 o.kv_heads + i % o.kv_heads];
					float *qi = q + (size_t)i * G * D;
					/* The token budget: a fraction of what was clustered. */
					const uint64_t budget =
						(uint64_t)nearbyint(o.budget * hd->ix.n_tokens);
					int nsel;

					/* The step's queries: the synthetic one, slightly moved. */
					for (uint32_t j = 0; j < G * D; j++)
						qi[j] = hd->s.q[j] + 0.05f * tl_frand(&rng);
					free(sel[i]);
					sel[i] = xcalloc(hd->ix.n_clusters, sizeof(uint32_t));
					nsel = nelssa_select(&scfg, qi, G, D, g.scale, hd->ix.centroids,
							     hd->far, hd->sizes, hd->ix.n_clusters,
							     budget, sel[i], NULL);
					if (nsel < 0) {
						fprintf(stderr, "nelssa-demo: selection failed\n");
						return 1;
					}
					in[i] = (struct nelssa_step_in){ i / o.kv_heads + 1,
									 (uint16_t)(i % o.kv_heads), qi,
									 sel[i], (uint32_t)nsel };
				}
				b = tl_now();
				t_select += b - a;
				ret = nelssa_client_step(cli, session, (uint16_t)l, in, n_items, po, pl, &t);
				if (ret) {
					fprintf(stderr, "nelssa-demo: step: %s\n", nelssa_client_error(cli));
					return 1;
				}
				a = tl_now();
				t_rtt += t.rtt * 1e-9;
				t_dev += t.device * 1e-9;
				t_disp += t.dispatch * 1e-9;
				t_agg += t.aggregate * 1e-9;
				t_recv += t.recv * 1e-9;
				/* Local window, then the final merge with the PNM state. */
				for (uint32_t i = 0; i < n_items; i++) {
					struct head *hd = &heads[((size_t)(i / o.kv_heads) * o.layers + l) *
								 o.kv_heads + i % o.kv_heads];
					float wo[G * D], wl[G], so[G * D], sl[G], eo[G * D], el[G];
					const float *pop[2] = { so, eo }, *plp[2] = { sl, el };
					size_t n_states = 1;

					/* The PNM state moves aside: the merge writes over its output. */
					memcpy(so, po + (size_t)i * G * D, sizeof(so));
					memcpy(sl, pl + (size_t)i * G, sizeof(sl));
					nelssa_window_attn(&g, in[i].q, hd->s.k, hd->s.v, hd->s.n, &win, wo, wl);
					/* The estimation term over every cluster not selected. */
					if (scfg.estimate) {
						if (estimate_rest(&g, scfg.estimate, in[i].q, hd,
								  in[i].sel, in[i].nr_sel, eo, el))
							return 1;
						n_states = 2;
					}
					nelssa_final_merge(po + (size_t)i * G * D, pl + (size_t)i * G, wo, wl,
							   pop, plp, n_states, G, D);
				}
				b = tl_now();
				t_window += b - a;
				t_decode += b - a + t.rtt * 1e-9;
				/* Accuracy against dense attention (not timed). */
				for (uint32_t i = 0; i < n_items; i++) {
					struct head *hd = &heads[((size_t)(i / o.kv_heads) * o.layers + l) *
								 o.kv_heads + i % o.kv_heads];
					float dense[G * D], dl[G];

					nelssa_attn_dense(&g, in[i].q, hd->s.k, hd->s.v, hd->s.n, dense, dl);
					for (uint32_t r = 0; r < G; r++) {
						double num = 0, den = 0;

						for (uint32_t j = 0; j < D; j++) {
							double e = po[((size_t)i * G + r) * D + j] - dense[r * D + j];

							num += e * e;
							den += (double)dense[r * D + j] * dense[r * D + j];
						}
						errs[n_err++] = sqrt(num / (den > 0 ? den : 1));
					}
					for (uint32_t c = 0; c < in[i].nr_sel; c++)
						sel_tokens += hd->ix.table[in[i].sel[c]].count;
					all_tokens += hd->ix.n_tokens;
					n_sel_items++;
					for (uint32_t nd = 0; nd < SYNTH_NEEDLES; nd++) {
						uint32_t pos = hd->s.needle[nd] - win.sink;

						needles++;
						for (uint32_t c = 0; c < in[i].nr_sel; c++) {
							const struct nelssa_cluster *e = &hd->ix.table[in[i].sel[c]];

							for (uint32_t j = 0; j < e->count; j++)
								hits += hd->ix.perm[e->first + j] == pos;
						}
					}
				}
				n_steps++;
			}
		}
		t_decode += t_select;
		free(in);
		free(q);
		free(po);
		free(pl);
		for (uint32_t i = 0; i < n_items; i++)
			free(sel[i]);
		free(sel);
	}
	qsort(errs, n_err, sizeof(double), tl_cmp_double);
	{
		const double per = 1e6 / n_steps;
		const double tps = (double)o.steps * o.n_req / t_decode;
		struct nelssa_daemon_stats st = { 0 };

		nelssa_client_stats(cli, &st);
		if (o.json) {
			printf("{\"requests\":%u,\"layers\":%u,\"kv_heads\":%u,\"steps\":%u,"
			       "\"devices\":%u,\"prefill_s\":%.3f,\"layer_step_us\":{\"select\":%.1f,"
			       "\"rtt\":%.1f,\"daemon_recv\":%.1f,\"dispatch\":%.1f,\"device\":%.1f,"
			       "\"aggregate\":%.1f,\"window_merge\":%.1f},\"tokens_per_s\":%.2f,"
			       "\"median_rel_err\":%.6g,\"max_rel_err\":%.6g,\"needle_hit_rate\":%.4f,"
			       "\"budget\":%g,\"estimate\":\"%s\",\"tokens_read\":%.1f,"
			       "\"window_tokens\":%u,\"selected_token_fraction\":%.4f,"
			       "\"kv_dtype\":\"%s\"}\n",
			       o.n_req, o.layers, o.kv_heads, o.steps, nelssa_client_devices(cli),
			       t_prefill, t_select * per, t_rtt * per, t_recv * per, t_disp * per,
			       t_dev * per, t_agg * per, t_window * per, tps, errs[n_err / 2],
			       errs[n_err - 1], (double)hits / needles, o.budget,
			       estimate_name[scfg.estimate], sel_tokens / n_sel_items,
			       win.sink + win.recent, sel_tokens / all_tokens,
			       tl_kv_dtype_name(o.kv_dtype));
		} else {
			printf("prefill (synthesis, k-means, offload): %.1f s\n", t_prefill);
			printf("decode: %u steps x %u layers, %u (request, KV head) items per layer-step\n",
			       o.steps, o.layers, n_items);
			printf("per layer-step, mean:\n");
			printf("  GPU node: cluster selection   %9.1f us\n", t_select * per);
			printf("  round trip to the PNM node    %9.1f us\n", t_rtt * per);
			printf("    daemon: receive             %9.1f us\n", t_recv * per);
			printf("    daemon: dispatch            %9.1f us\n", t_disp * per);
			printf("    devices: sparse attention   %9.1f us\n", t_dev * per);
			printf("    daemon: aggregate           %9.1f us\n", t_agg * per);
			printf("    network + client            %9.1f us\n",
			       (t_rtt - t_recv - t_disp - t_dev - t_agg) * per);
			printf("  GPU node: window%s + merge %9.1f us\n",
			       scfg.estimate ? " + estimate" : "           ", t_window * per);
			printf("decode throughput: %.2f tokens/s (%u requests; CPU stands in for the GPU)\n",
			       tps, o.n_req);
			printf("accuracy vs dense attention over the full context (a %g%% token budget + "
			       "window%s):\n", o.budget * 100,
			       scfg.estimate ? " + estimation term" : "");
			printf("  relative L2 error: median %.4f%%, max %.4f%% over %u query rows\n",
			       100 * errs[n_err / 2], 100 * errs[n_err - 1], n_err);
			printf("  needle tokens selected: %u of %u (%.1f%%); %.1f tokens (%.2f%% of the "
			       "clustered ones) read per selection, besides the %u of the window\n",
			       hits, needles, 100.0 * hits / needles, sel_tokens / n_sel_items,
			       100 * sel_tokens / all_tokens, win.sink + win.recent);
			printf("daemon: %llu steps served, %.1f MiB of KV ingested (%s on the "
			       "devices)\n", (unsigned long long)st.steps,
			       (double)st.kv_bytes / (1 << 20), tl_kv_dtype_name(o.kv_dtype));
		}
	}
	for (size_t i = 0; i < (size_t)o.n_req * o.layers * o.kv_heads; i++) {
		synth_free(&heads[i].s);
		nelssa_kmeans_free(&heads[i].ix);
		free(heads[i].sizes);
		free(heads[i].far);
		free(heads[i].vsum);
		free(heads[i].m2);
	}
	free(heads);
	free(errs);
	nelssa_client_close(cli);
	return 0;
}
