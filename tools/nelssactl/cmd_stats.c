// SPDX-License-Identifier: MIT
/*
 * nelssactl stats: a running nelssad's counters over its control path --
 * sessions, steps served, KV ingested, and where the steps' time went.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nelssa/client.h>

#include "nelssactl.h"

static void add_u64(json_object *o, const char *k, uint64_t v)
{
	json_object_object_add(o, k, json_object_new_uint64(v));
}

int cmd_stats(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl stats [HOST[:PORT]] [--json]\n"
		"Show a running nelssad's sessions, steps served, KV ingested and the mean\n"
		"per-step time breakdown (default 127.0.0.1:18515).\n";
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct nelssa_client_opts o = { "127.0.0.1", 18515, 10000, "nelssactl" };
	struct nelssa_client *c;
	struct nelssa_daemon_stats st;
	char host[256];
	uint64_t port = 18515;
	int ch;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		if (ch == 'j') {
			ctl->json = true;
		} else if (ch == 'h') {
			fputs(help, stdout);
			return EXIT_OK;
		} else {
			ctl_usage_error(ctl, "stats", "bad option '%s'", argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (argc - optind > 1) {
		ctl_usage_error(ctl, "stats", "expected at most one HOST[:PORT]");
		return EXIT_USAGE;
	}
	if (optind < argc) {
		const char *colon = strrchr(argv[optind], ':');

		snprintf(host, sizeof(host), "%s", argv[optind]);
		if (colon) {
			host[colon - argv[optind]] = 0;
			if (ctl_parse_uint(colon + 1, 1, 65535, &port)) {
				ctl_usage_error(ctl, "stats", "bad port in '%s'", argv[optind]);
				return EXIT_USAGE;
			}
		}
		o.host = host;
		o.port = (uint16_t)port;
	}
	if (nelssa_client_connect(&o, &c) || nelssa_client_stats(c, &st)) {
		fprintf(stderr, "nelssactl: %s:%u: %s\n", o.host, o.port, nelssa_client_error(c));
		nelssa_client_close(c);
		return EXIT_DEVICE;
	}
	nelssa_client_close(c);
	if (ctl->json) {
		json_object *j = json_object_new_object();

		add_u64(j, "sessions", st.sessions);
		add_u64(j, "devices", st.devices);
		add_u64(j, "steps", st.steps);
		add_u64(j, "items", st.items);
		add_u64(j, "kv_bytes", st.kv_bytes);
		add_u64(j, "recv_ns", st.recv_ns);
		add_u64(j, "dispatch_ns", st.dispatch_ns);
		add_u64(j, "device_ns", st.device_ns);
		add_u64(j, "aggregate_ns", st.aggregate_ns);
		add_u64(j, "send_ns", st.send_ns);
		ctl_print_json(j);
	} else {
		const double n = st.steps ? (double)st.steps : 1.0;
		char sz[32];

		printf("nelssad at %s:%u: %u device(s), %u session(s)\n", o.host, o.port,
		       st.devices, st.sessions);
		printf("  steps served   %llu (%llu items)\n", (unsigned long long)st.steps,
		       (unsigned long long)st.items);
		printf("  KV ingested    %s\n", ctl_size(st.kv_bytes, sz, sizeof(sz)));
		printf("  per step, mean: receive %.1f us, dispatch %.1f us, device %.1f us, "
		       "aggregate %.1f us, send %.1f us\n", st.recv_ns / n / 1e3,
		       st.dispatch_ns / n / 1e3, st.device_ns / n / 1e3,
		       st.aggregate_ns / n / 1e3, st.send_ns / n / 1e3);
	}
	return EXIT_OK;
}
