// SPDX-License-Identifier: MIT
/*
 * nelssactl bench DEV latency: submit -> complete latency of single
 * outstanding commands (NOP, a 64-byte FILL, a 4 KiB COPY), as the
 * Command API sees it: nelssa_pnm_submit() until nelssa_pnm_wait()
 * returns the completion.  Percentiles over --count commands each.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nelssactl.h"
#include "tool_util.h"

static const char help[] =
	"usage: nelssactl bench DEV latency [--count N] [--cpu N] [--json]\n"
	"  --count N   commands per kind (default 20000, after 1000 warm-up)\n"
	"  --cpu N     run the submitting thread on CPU N (with a sim device's cpus=\n"
	"              option, which places its executor: the same CPU measures a\n"
	"              shared core, another one a core of its own)\n"
	"Reports p50/p90/p99/max submit->complete latency in microseconds for NOP,\n"
	"FILL of 64 bytes and COPY of 4 KiB, one command in flight at a time.\n";

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, uint64_t n, double q)
{
	uint64_t i = (uint64_t)(q * (double)(n - 1) + 0.5);

	return v[i];
}

int bench_latency(struct ctl *ctl, const char *dev, int argc, char **argv)
{
	static const struct option opts[] = {
		{ "count", required_argument, NULL, 'n' }, { "cpu", required_argument, NULL, 'c' },
		{ "help", no_argument, NULL, 'h' }, { 0 },
	};
	static const char *const kinds[] = { "nop", "fill64", "copy4k" };
	uint64_t count = 20000, cpu = UINT64_MAX;
	struct nelssa_pnm *p;
	json_object *res = json_object_new_object();
	double *lat = NULL;
	char name[256];
	uint32_t h;
	int c, rc = EXIT_DEVICE;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			fputs(help, stdout);
			json_object_put(res);
			return EXIT_OK;
		}
		if (c == 'c' && !ctl_parse_uint(optarg, 0, CPU_SETSIZE - 1, &cpu))
			continue;
		if (c != 'n' || ctl_parse_uint(optarg, 10, 10000000, &count)) {
			fprintf(stderr, "nelssactl bench latency: bad option '%s'\n%s", argv[optind - 1],
				help);
			json_object_put(res);
			return EXIT_USAGE;
		}
	}
	ctl_sim_name(name, sizeof(name), dev, "cores=1,mem=64M");
	p = ctl_open(name);
	lat = malloc(count * sizeof(*lat));
	if (!p || !lat)
		goto out;
	/* After the open: the device checks its cpus= against this thread's set. */
	if (cpu != UINT64_MAX) {
		cpu_set_t set;
		int err;

		CPU_ZERO(&set);
		CPU_SET((int)cpu, &set);
		err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
		if (err) {
			fprintf(stderr, "nelssactl bench latency: --cpu %llu: %s\n",
				(unsigned long long)cpu, strerror(err));
			rc = EXIT_USAGE;
			goto out;
		}
	}
	if (nelssa_pnm_mem_alloc(p, 1 << 16, &h, NULL)) {
		fprintf(stderr, "nelssactl: %s: %s\n", name, nelssa_pnm_strerror());
		goto out;
	}
	for (unsigned int k = 0; k < 3; k++) {
		struct npnm_cmd cmd;
		json_object *j;

		memset(&cmd, 0, sizeof(cmd));
		if (k == 1) {
			cmd.opcode = NPNM_OP_FILL;
			cmd.op[0] = (struct npnm_operand){ h, 0, 0, 64 };
			cmd.p.fill.width = 1;
		} else if (k == 2) {
			cmd.opcode = NPNM_OP_COPY;
			cmd.op[0] = (struct npnm_operand){ h, 0, 0, 4096 };
			cmd.op[1] = (struct npnm_operand){ h, 0, 8192, 4096 };
		}
		for (uint64_t i = 0; i < count + 1000; i++) {
			struct npnm_completion comp;
			double t0 = tl_now();

			if (nelssa_pnm_submit(p, &cmd, 1, NULL) != 1 ||
			    nelssa_pnm_wait(p, &comp, 1, 1, -1) != 1 || comp.result) {
				fprintf(stderr, "nelssactl: %s failed: %s\n", kinds[k], nelssa_pnm_strerror());
				rc = EXIT_FAIL;
				goto out;
			}
			if (i >= 1000)
				lat[i - 1000] = (tl_now() - t0) * 1e6;
		}
		qsort(lat, count, sizeof(*lat), cmp_double);
		j = json_object_new_object();
		json_object_object_add(j, "p50_us", json_object_new_double(pct(lat, count, 0.50)));
		json_object_object_add(j, "p90_us", json_object_new_double(pct(lat, count, 0.90)));
		json_object_object_add(j, "p99_us", json_object_new_double(pct(lat, count, 0.99)));
		json_object_object_add(j, "max_us", json_object_new_double(lat[count - 1]));
		json_object_object_add(res, kinds[k], j);
		if (!ctl->json)
			printf("%-7s p50 %7.2f us   p90 %7.2f us   p99 %7.2f us   max %8.1f us\n",
			       kinds[k], pct(lat, count, 0.50), pct(lat, count, 0.90),
			       pct(lat, count, 0.99), lat[count - 1]);
	}
	json_object_object_add(res, "device", json_object_new_string(name));
	json_object_object_add(res, "count", json_object_new_uint64(count));
	if (cpu != UINT64_MAX)
		json_object_object_add(res, "cpu", json_object_new_uint64(cpu));
	if (ctl->json) {
		ctl_print_json(res);
		res = NULL;
	}
	rc = EXIT_OK;
out:
	json_object_put(res);
	free(lat);
	nelssa_pnm_close(p);
	return rc;
}
