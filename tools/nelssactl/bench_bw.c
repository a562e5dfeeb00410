// SPDX-License-Identifier: MIT
/*
 * nelssactl bench DEV bw: device-side FILL and COPY bandwidth and the bulk
 * write/read path (prefill ingest), each against this machine's memcpy of
 * the same size measured in the same run.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nelssactl.h"
#include "tool_util.h"

static const char help[] =
	"usage: nelssactl bench DEV bw [--size SIZE] [--iters N] [--json]\n"
	"  --size N    bytes per transfer (default 268435456)\n"
	"  --iters N   transfers per measurement, best taken (default 5)\n"
	"Reports fill_gbps, copy_gbps (read + write bytes), write_gbps and read_gbps\n"
	"(host <-> device bulk path), memcpy_gbps (host memcpy, read + write bytes, same\n"
	"run) and copy_ratio = copy_gbps / memcpy_gbps.\n";

struct bw {
	struct nelssa_pnm *p;
	uint32_t a, b;
	uint64_t size;
	uint8_t *host, *host2;
};

/* Best GB/s of @iters runs of @op moving @bytes each. */
static double best_of(struct bw *w, uint64_t iters, uint64_t bytes, int (*op)(struct bw *))
{
	double best = 0.0;

	for (uint64_t i = 0; i < iters; i++) {
		double t0 = tl_now(), g;

		if (op(w))
			return -1.0;
		g = (double)bytes / (tl_now() - t0) / 1e9;
		if (g > best)
			best = g;
	}
	return best;
}

static int op_fill(struct bw *w)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_FILL;
	c.op[0] = (struct npnm_operand){ w->a, 0, 0, w->size };
	c.p.fill.pattern = 0x5a;
	c.p.fill.width = 1;
	return nelssa_pnm_exec(w->p, &c, NULL);
}

static int op_copy(struct bw *w)
{
	struct npnm_cmd c;

	memset(&c, 0, sizeof(c));
	c.opcode = NPNM_OP_COPY;
	c.op[0] = (struct npnm_operand){ w->b, 0, 0, w->size };
	c.op[1] = (struct npnm_operand){ w->a, 0, 0, w->size };
	return nelssa_pnm_exec(w->p, &c, NULL);
}

static int op_write(struct bw *w)
{
	return nelssa_pnm_mem_write(w->p, w->a, 0, w->host, w->size);
}

static int op_read(struct bw *w)
{
	return nelssa_pnm_mem_read(w->p, w->a, 0, w->host, w->size);
}

static int op_memcpy(struct bw *w)
{
	memcpy(w->host2, w->host, w->size);
	return w->host2[w->size - 1] != w->host[w->size - 1];
}

int bench_bw(struct ctl *ctl, const char *dev, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "size", required_argument, NULL, 's' }, { "iters", required_argument, NULL, 'i' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	struct bw w = { .size = 256ull << 20 };
	uint64_t iters = 5;
	double fill, copy, wr, rd, mc;
	char name[256], opt[64];
	int c, rc = EXIT_DEVICE;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		int bad = 1;

		if (c == 'h') {
			fputs(help, stdout);
			return EXIT_OK;
		}
		if (c == 's')
			bad = ctl_parse_uint(optarg, 4096, 1ull << 36, &w.size);
		else if (c == 'i')
			bad = ctl_parse_uint(optarg, 1, 1000, &iters);
		if (bad) {
			fprintf(stderr, "nelssactl bench bw: bad option '%s'\n%s", argv[optind - 1], help);
			return EXIT_USAGE;
		}
	}
	snprintf(opt, sizeof(opt), "cores=1,mem=%lluM",
		 (unsigned long long)(2 * w.size / (1 << 20) + 16));
	ctl_sim_name(name, sizeof(name), dev, opt);
	w.p = ctl_open(name);
	if (!w.p)
		return EXIT_DEVICE;
	w.host = malloc(w.size);
	w.host2 = malloc(w.size);
	if (!w.host || !w.host2 || nelssa_pnm_mem_alloc(w.p, w.size, &w.a, NULL) ||
	    nelssa_pnm_mem_alloc(w.p, w.size, &w.b, NULL)) {
		fprintf(stderr, "nelssactl: cannot allocate 2 x %llu bytes: %s\n",
			(unsigned long long)w.size, nelssa_pnm_strerror());
		goto out;
	}
	memset(w.host, 1, w.size);
	memset(w.host2, 2, w.size);
	fill = best_of(&w, iters, w.size, op_fill);
	copy = best_of(&w, iters, 2 * w.size, op_copy);
	wr = best_of(&w, iters, w.size, op_write);
	rd = best_of(&w, iters, w.size, op_read);
	mc = best_of(&w, iters, 2 * w.size, op_memcpy);
	if (fill < 0 || copy < 0 || wr < 0 || rd < 0) {
		fprintf(stderr, "nelssactl: transfer failed: %s\n", nelssa_pnm_strerror());
		rc = EXIT_FAIL;
		goto out;
	}
	if (ctl->json) {
		json_object *j = json_object_new_object();

		json_object_object_add(j, "device", json_object_new_string(name));
		json_object_object_add(j, "bytes", json_object_new_uint64(w.size));
		json_object_object_add(j, "fill_gbps", json_object_new_double(fill));
		json_object_object_add(j, "copy_gbps", json_object_new_double(copy));
		json_object_object_add(j, "write_gbps", json_object_new_double(wr));
		json_object_object_add(j, "read_gbps", json_object_new_double(rd));
		json_object_object_add(j, "memcpy_gbps", json_object_new_double(mc));
		json_object_object_add(j, "copy_ratio", json_object_new_double(copy / mc));
		ctl_print_json(j);
	} else {
		printf("device FILL      %6.2f GB/s\n", fill);
		printf("device COPY      %6.2f GB/s (read + write)\n", copy);
		printf("bulk write       %6.2f GB/s (host -> device)\n", wr);
		printf("bulk read        %6.2f GB/s (device -> host)\n", rd);
		printf("host memcpy      %6.2f GB/s (read + write, same run)\n", mc);
		printf("COPY / memcpy    %6.3f\n", copy / mc);
	}
	rc = EXIT_OK;
out:
	free(w.host);
	free(w.host2);
	nelssa_pnm_close(w.p);
	return rc;
}
