// SPDX-License-Identifier: MIT
/*
 * nelssactl calibrate: measure what the routing threshold depends on and
 * print T_input for 1..8 devices (DESIGN §3.7, Documentation/policy.rst).
 *
 *   - the PNM devices' effective sparse-attention bandwidth: the
 *     measurement of 'bench attn' on a device (sim:0 by default);
 *   - the per-layer communication cost T_comm(N) = t_base + N t_dev +
 *     [N > 1] t_host, against a running nelssad: steps whose items touch
 *     k = 1..N of its devices, each selecting one cluster, so the round trip
 *     minus the device time is communication and host work; fitted by least
 *     squares over k;
 *   - the GPU's bandwidth and memory from a profile (built in or a file),
 *     and the PNM memory from the device when it is a card (/dev/...).
 *
 * --output writes the result as a profile file users can edit and load.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/client.h>
#include <nelssa/half.h>
#include <nelssa/policy.h>

#include "nelssactl.h"

#define COMM_STEPS 40

static const char help[] =
	"usage: nelssactl calibrate [--device DEV] [--daemon HOST[:PORT]] [--profile NAME|FILE]\n"
	"                           [--threads N] [--context N] [--iters N] [--layers N]\n"
	"                           [--kv-heads N] [--cluster N] [--select F] [--output FILE] [--json]\n"
	"  --device DEV     device whose SPARSE_ATTN bandwidth is measured (default sim:0)\n"
	"  --daemon H:P     a running nelssad whose per-layer communication cost is measured\n"
	"                   (without it the profile's figures are kept)\n"
	"  --profile P      h200 (default), h100-nvl, or a profile file\n"
	"  --threads N      cores of a sim device (default 1)\n"
	"  --context N, --iters N   the bandwidth measurement's store size and commands\n"
	"                   (default 131072, 5)\n"
	"  --layers N, --kv-heads N, --cluster N, --select F   the model and selection\n"
	"                   (default Llama-3-8B: 32, 8, 16 tokens, 0.04)\n"
	"  --output FILE    write the calibrated profile there\n";

struct cal_opts {
	const char *device, *daemon, *profile, *output;
	struct attn_opts attn;
	uint64_t layers, kv_heads;
};

/* y = a + b x by least squares over @n points. */
static void fit_line(const double *x, const double *y, int n, double *a, double *b)
{
	double sx = 0, sy = 0, sxx = 0, sxy = 0;

	for (int i = 0; i < n; i++) {
		sx += x[i];
		sy += y[i];
		sxx += x[i] * x[i];
		sxy += x[i] * y[i];
	}
	*b = n * sxx - sx * sx > 0 ? (n * sxy - sx * sy) / (n * sxx - sx * sx) : 0.0;
	*a = (sy - *b * sx) / n;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/*
 * Median (round trip - device time) of a step touching k devices, for
 * k = 1..N; y[k-1] in seconds.  Returns N, or 0 after printing why.
 */
static int measure_comm(const char *daemon, double *y, int max)
{
	struct nelssa_client_opts co = { "127.0.0.1", 18515, 20000, "nelssactl-calibrate" };
	struct nelssa_session_cfg sc = { 0 };
	struct nelssa_cluster_index ix = { 0 };
	struct nelssa_client *c = NULL;
	char host[256];
	const char *colon = strrchr(daemon, ':');
	uint64_t session, port;
	uint16_t *kv = NULL;
	float q[4 * 128] = { 0 }, *o = NULL, *lse = NULL;
	uint32_t sel = 0, n = 0;
	int ret = 0;

	snprintf(host, sizeof(host), "%s", daemon);
	if (colon) {
		host[colon - daemon] = 0;
		if (ctl_parse_uint(colon + 1, 1, 65535, &port))
			return 0;
		co.port = (uint16_t)port;
	}
	co.host = host;
	if (nelssa_client_connect(&co, &c))
		goto fail;
	n = nelssa_client_devices(c);
	if (n > (uint32_t)max)
		n = (uint32_t)max;
	/* One KV head per device (head-wise placement), one 4K-token request. */
	sc.shape = (struct nelssa_shape){ 1, (uint16_t)(4 * n), (uint16_t)n, 128, 1, 0,
					  NELSSA_KV_PACKED };
	sc.max_batch = 1;
	sc.max_sel = 1;
	sc.capacity_tokens = 8192;
	ix.head_dim = 128;
	ix.n_tokens = 4096;
	ix.n_clusters = 256;
	ix.perm = calloc(4096, sizeof(uint32_t));
	ix.table = calloc(256, sizeof(*ix.table));
	kv = calloc(4096 * 128, sizeof(uint16_t));
	o = calloc((size_t)n * 4 * 128, sizeof(float));
	lse = calloc((size_t)n * 4, sizeof(float));
	if (!ix.perm || !ix.table || !kv || !o || !lse)
		goto fail;
	for (uint32_t t = 0; t < 4096; t++)
		ix.perm[t] = t;
	for (uint32_t i = 0; i < 4096 * 128; i++)
		kv[i] = nelssa_f32_to_bf16((float)(i % 97) / 97.0f - 0.5f);
	for (uint32_t cl = 0; cl < 256; cl++)
		ix.table[cl] = (struct nelssa_cluster){ cl * 16, 16 };
	if (nelssa_client_session(c, &sc, &session) ||
	    nelssa_client_request(c, session, 1, 4096, 256))
		goto fail;
	for (uint32_t h = 0; h < n; h++)
		if (nelssa_client_offload(c, session, 1, 0, (uint16_t)h, &ix, 0, kv, kv))
			goto fail;
	for (uint32_t k = 1; k <= n; k++) {
		struct nelssa_step_in in[64];
		double t[COMM_STEPS];

		for (uint32_t h = 0; h < k; h++)
			in[h] = (struct nelssa_step_in){ 1, (uint16_t)h, q, &sel, 1 };
		for (int i = 0; i < COMM_STEPS + 5; i++) {
			struct nelssa_step_times st;

			if (nelssa_client_step(c, session, 0, in, k, o, lse, &st))
				goto fail;
			if (i >= 5)
				t[i - 5] = (double)(st.rtt - st.device) * 1e-9;
		}
		qsort(t, COMM_STEPS, sizeof(double), cmp_d);
		y[k - 1] = t[COMM_STEPS / 2];
	}
	ret = (int)n;
	goto out;
fail:
	fprintf(stderr, "nelssactl calibrate: %s: %s\n", daemon, nelssa_client_error(c));
out:
	nelssa_client_close(c);
	free(ix.perm);
	free(ix.table);
	free(kv);
	free(o);
	free(lse);
	return ret;
}

static int parse(struct cal_opts *o, struct ctl *ctl, int argc, char **argv)
{
	static const struct option lo[] = {
		{ "device", required_argument, NULL, 'D' }, { "daemon", required_argument, NULL, 'd' },
		{ "profile", required_argument, NULL, 'p' }, { "output", required_argument, NULL, 'o' },
		{ "threads", required_argument, NULL, 't' }, { "context", required_argument, NULL, 'c' },
		{ "iters", required_argument, NULL, 'i' }, { "layers", required_argument, NULL, 'l' },
		{ "kv-heads", required_argument, NULL, 'k' }, { "cluster", required_argument, NULL, 'C' },
		{ "select", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' }, { NULL, 0, NULL, 0 },
	};
	int c, bad = 0;

	memset(o, 0, sizeof(*o));
	o->device = "sim:0";
	o->profile = "h200";
	attn_defaults(&o->attn);
	o->attn.items = 8;
	o->attn.iters = 5;
	o->layers = 32;
	o->kv_heads = 8;
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'D': o->device = optarg; break;
		case 'd': o->daemon = optarg; break;
		case 'p': o->profile = optarg; break;
		case 'o': o->output = optarg; break;
		case 'j': ctl->json = true; break;
		case 't': bad |= ctl_parse_uint(optarg, 1, 256, &o->attn.threads); break;
		case 'c': bad |= ctl_parse_uint(optarg, 1024, 1u << 24, &o->attn.context); break;
		case 'i': bad |= ctl_parse_uint(optarg, 1, 1000, &o->attn.iters); break;
		case 'l': bad |= ctl_parse_uint(optarg, 1, 1024, &o->layers); break;
		case 'k': bad |= ctl_parse_uint(optarg, 1, 1024, &o->kv_heads); break;
		case 'C': bad |= ctl_parse_uint(optarg, 1, 4096, &o->attn.cluster); break;
		case 's': bad |= ctl_parse_double(optarg, 1e-6, 1.0, &o->attn.select); break;
		case 'h': fputs(help, stdout); return 1;
		default: bad = 1; break;
		}
		if (bad) {
			ctl_usage_error(ctl, "calibrate", "bad option '%s'", argv[optind - 1]);
			return -1;
		}
	}
	if (optind != argc) {
		ctl_usage_error(ctl, "calibrate", "unexpected '%s'", argv[optind]);
		return -1;
	}
	return 0;
}

int cmd_calibrate(struct ctl *ctl, int argc, char **argv)
{
	struct cal_opts o;
	struct nelssa_hw_profile hw;
	struct nelssa_model_profile m;
	struct attn_result ar;
	double y[64], x[64], tin[8];
	char err[256];
	int ret = parse(&o, ctl, argc, argv), n = 0, rc;

	if (ret)
		return ret > 0 ? EXIT_OK : EXIT_USAGE;
	if (nelssa_hw_profile_builtin(o.profile, &hw) &&
	    nelssa_hw_profile_load(o.profile, &hw, err, sizeof(err))) {
		fprintf(stderr, "nelssactl calibrate: %s\n", err);
		return EXIT_USAGE;
	}
	rc = attn_measure(o.device, &o.attn, ctl->json, &ar);
	if (rc)
		return rc;
	hw.pnm_bw = ar.gbps * 1e9;
	/* A card's memory is its own; a sim device's is whatever it was given. */
	if (!strncmp(ar.name, "/dev/", 5))
		hw.pnm_mem = (double)ar.mem_size;
	if (o.daemon) {
		n = measure_comm(o.daemon, y, 64);
		if (!n)
			return EXIT_DEVICE;
		for (int k = 0; k < n; k++)
			x[k] = k + 1;
		/* T(1) = a + d; T(k > 1) = (a + h) + k d. */
		if (n >= 3) {
			fit_line(x + 1, y + 1, n - 1, &hw.t_host, &hw.t_dev);
			hw.t_dev = hw.t_dev > 0 ? hw.t_dev : 0.0;
			hw.t_base = y[0] - hw.t_dev;
			hw.t_host -= hw.t_base;
		} else {
			hw.t_dev = 0.0;
			hw.t_base = y[0];
			hw.t_host = n == 2 ? y[1] - y[0] : hw.t_host;
		}
		hw.t_base = hw.t_base > 0 ? hw.t_base : 0.0;
		hw.t_host = hw.t_host > 0 ? hw.t_host : 0.0;
	}
	snprintf(hw.name, sizeof(hw.name), "calibrated");
	m = (struct nelssa_model_profile){ (uint32_t)o.layers, (uint32_t)o.kv_heads, 128, 2, 0.0,
					   (double)o.attn.cluster, o.attn.select, o.attn.kv_dtype };
	for (int d = 0; d < 8; d++)
		tin[d] = nelssa_crossover(&hw, &m, (uint32_t)d + 1);
	if (o.output) {
		FILE *f = fopen(o.output, "w");

		if (!f || fprintf(f, "# nelssactl calibrate: PNM bandwidth on %s%s%s\n"
				  "name = calibrated\ngpu_bw = %.6g\ngpu_mem = %.6g\npnm_bw = %.6g\n"
				  "pnm_mem = %.6g\nt_base = %.6g\nt_dev = %.6g\nt_host = %.6g\n",
				  ar.name, o.daemon ? ", communication against " : "",
				  o.daemon ? o.daemon : "", hw.gpu_bw, hw.gpu_mem, hw.pnm_bw, hw.pnm_mem,
				  hw.t_base, hw.t_dev, hw.t_host) < 0 || fclose(f)) {
			fprintf(stderr, "nelssactl calibrate: cannot write %s\n", o.output);
			return EXIT_FAIL;
		}
	}
	if (ctl->json) {
		json_object *j = json_object_new_object(), *a = json_object_new_array();

		json_object_object_add(j, "device", json_object_new_string(ar.name));
		json_object_object_add(j, "pnm_bw", json_object_new_double(hw.pnm_bw));
		json_object_object_add(j, "gpu_bw", json_object_new_double(hw.gpu_bw));
		json_object_object_add(j, "comm_measured", json_object_new_boolean(n > 0));
		json_object_object_add(j, "daemon_devices", json_object_new_int(n));
		json_object_object_add(j, "t_base", json_object_new_double(hw.t_base));
		json_object_object_add(j, "t_dev", json_object_new_double(hw.t_dev));
		json_object_object_add(j, "t_host", json_object_new_double(hw.t_host));
		for (int d = 0; d < 8; d++) {
			json_object *e = json_object_new_object();

			json_object_object_add(e, "devices", json_object_new_int(d + 1));
			json_object_object_add(e, "t_input", isinf(tin[d]) ? NULL :
					       json_object_new_double(tin[d]));
			json_object_object_add(e, "t_comm", json_object_new_double(
				nelssa_t_comm(&hw, &m, (uint32_t)d + 1)));
			json_object_array_add(a, e);
		}
		json_object_object_add(j, "thresholds", a);
		ctl_print_json(j);
	} else {
		printf("PNM sparse attention on %s: %.2f GB/s effective\n", ar.name, hw.pnm_bw / 1e9);
		if (n)
			printf("communication per layer against %s (%d devices): t_base %.1f us, "
			       "t_dev %.2f us, t_host %.1f us\n", o.daemon, n, hw.t_base * 1e6,
			       hw.t_dev * 1e6, hw.t_host * 1e6);
		else
			printf("communication per layer from the profile: t_base %.1f us, t_dev %.2f us, "
			       "t_host %.1f us (no --daemon)\n", hw.t_base * 1e6, hw.t_dev * 1e6,
			       hw.t_host * 1e6);
		printf("GPU from '%s': %.2f TB/s\n", o.profile, hw.gpu_bw / 1e12);
		printf("model: %llu layers x %llu KV heads x 128, 2 B, clusters of %llu, %.1f%% "
		       "selected\n", (unsigned long long)o.layers, (unsigned long long)o.kv_heads,
		       (unsigned long long)o.attn.cluster, 100 * o.attn.select);
		printf("devices  T_comm/step   T_input\n");
		for (int d = 0; d < 8; d++) {
			printf("%7d  %8.1f us   ", d + 1, 1e6 * nelssa_t_comm(&hw, &m, (uint32_t)d + 1));
			if (isinf(tin[d]))
				printf("never (PNM per-token cost not below the GPU's)\n");
			else
				printf("%.0f tokens\n", tin[d]);
		}
	}
	return EXIT_OK;
}
