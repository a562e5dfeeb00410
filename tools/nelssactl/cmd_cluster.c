// SPDX-License-Identifier: MIT
/*
 * nelssactl cluster: the NELSSA nodes a cluster's registry lists -- their
 * addresses, capacity, load and the requests each holds -- as a reader
 * that places requests would see them (Documentation/cluster.rst).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nelssa/registry.h>

#include "nelssactl.h"

struct ignored {
	json_object *arr;	/* --json: the records set aside */
};

static void on_bad(void *arg, const char *key, const char *why)
{
	struct ignored *ig = arg;

	fprintf(stderr, "nelssactl: cluster: ignoring %s: %s\n", key, why);
	if (ig->arr) {
		json_object *o = json_object_new_object();

		json_object_object_add(o, "key", json_object_new_string(key));
		json_object_object_add(o, "why", json_object_new_string(why));
		json_object_array_add(ig->arr, o);
	}
}

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The record as nelssad wrote it (nelssa_node_to_json()), and its age. */
static json_object *node_json(const struct nelssa_node *n, uint64_t now)
{
	char *s = nelssa_node_to_json(n);
	json_object *o = s ? json_tokener_parse(s) : NULL;

	free(s);
	if (!o)
		return json_object_new_null();
	json_object_object_del(o, "schema");
	json_object_object_add(o, "age_ms", json_object_new_int64(now >= n->updated_ms ?
				(int64_t)(now - n->updated_ms) : -(int64_t)(n->updated_ms - now)));
	return o;
}

static void node_text(const struct nelssa_node *n, uint64_t now, bool requests)
{
	const double gib = 1024.0 * 1024.0 * 1024.0;
	double age = now >= n->updated_ms ? (double)(now - n->updated_ms) / 1000.0 : 0.0;

	printf("%-20s %-22s %3u %7.2f/%-7.2f %5u/%-5u %6u %10" PRIu64 " %5u %8" PRIu64 " %6.1f\n",
	       n->id, n->control, n->devices, (double)n->kv_bytes_free / gib,
	       (double)n->kv_bytes_total / gib, n->sessions, n->max_sessions, n->requests,
	       n->tokens_held, n->steps_in_flight, n->step_us, age);
	if (!requests)
		return;
	for (uint32_t i = 0; i < n->n_held; i++)
		printf("    session %" PRIu64 " request %" PRIu64 ": %u tokens\n", n->held[i].session,
		       n->held[i].request, n->held[i].tokens);
	if (n->held_more)
		printf("    ... and %u more requests\n", n->held_more);
}

static int read_secret(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	size_t n;

	if (!f)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = 0;
	buf[strcspn(buf, "\r\n")] = 0;
	return 0;
}

int cmd_cluster(struct ctl *ctl, int argc, char **argv)
{
	static const char help[] =
		"usage: nelssactl cluster [--etcd URL[,URL...]] [--cluster NAME] [--requests] [--json]\n"
		"List the NELSSA nodes the cluster's etcd registry holds: control address,\n"
		"devices, free/total KV memory, sessions, requests and tokens held, steps in\n"
		"flight, mean step latency, and the age of each record.  Records that are not\n"
		"a node's (garbage, another version) are ignored with a line on stderr.\n"
		"  --etcd URLS         etcd endpoints (default $NELSSA_ETCD, else\n"
		"                      http://127.0.0.1:2379)\n"
		"  --cluster NAME      (default $NELSSA_CLUSTER, else 'default')\n"
		"  --requests          also list the requests each node holds\n"
		"  --etcd-user NAME, --etcd-password-file FILE   etcd authentication\n"
		"  --etcd-cacert FILE, --etcd-cert FILE, --etcd-key FILE   TLS\n"
		"  --timeout-ms MS     etcd's deadline (default 2000)\n"
		"Exit status: 0 listed (even none), 2 usage, 3 etcd cannot be read.\n";
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'j' }, { "help", no_argument, NULL, 'h' },
		{ "etcd", required_argument, NULL, 'e' }, { "cluster", required_argument, NULL, 'c' },
		{ "requests", no_argument, NULL, 'r' },
		{ "etcd-user", required_argument, NULL, 'u' },
		{ "etcd-password-file", required_argument, NULL, 'p' },
		{ "etcd-cacert", required_argument, NULL, 'A' },
		{ "etcd-cert", required_argument, NULL, 'C' },
		{ "etcd-key", required_argument, NULL, 'K' },
		{ "timeout-ms", required_argument, NULL, 't' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cluster = getenv("NELSSA_CLUSTER"), *pwfile = NULL;
	struct nelssa_etcd_opts eo = { .endpoints = getenv("NELSSA_ETCD") };
	struct ignored ig = { NULL };
	struct nelssa_node *nodes;
	struct nelssa_etcd *e;
	char why[256], password[256];
	bool requests = false;
	uint64_t v, now;
	int64_t rev = 0;
	size_t n;
	int ch, ret;

	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'j': ctl->json = true; break;
		case 'h': fputs(help, stdout); return EXIT_OK;
		case 'e': eo.endpoints = optarg; break;
		case 'c': cluster = optarg; break;
		case 'r': requests = true; break;
		case 'u': eo.user = optarg; break;
		case 'p': pwfile = optarg; break;
		case 'A': eo.cacert = optarg; break;
		case 'C': eo.cert = optarg; break;
		case 'K': eo.key = optarg; break;
		case 't':
			if (ctl_parse_uint(optarg, 100, 600000, &v)) {
				ctl_usage_error(ctl, "cluster", "--timeout-ms: need 100..600000");
				return EXIT_USAGE;
			}
			eo.timeout_ms = (uint32_t)v;
			break;
		default:
			ctl_usage_error(ctl, "cluster", "bad option '%s'", argv[optind - 1]);
			return EXIT_USAGE;
		}
	}
	if (optind < argc) {
		ctl_usage_error(ctl, "cluster", "unexpected argument '%s'", argv[optind]);
		return EXIT_USAGE;
	}
	if (!eo.endpoints || !*eo.endpoints)
		eo.endpoints = "http://127.0.0.1:2379";
	if (!cluster || !*cluster)
		cluster = "default";
	if (!nelssa_registry_name_ok(cluster)) {
		ctl_usage_error(ctl, "cluster", "'%s' is not a cluster name (1 to %d of A-Z a-z 0-9 . _ -)",
				cluster, NELSSA_NAME_MAX);
		return EXIT_USAGE;
	}
	if (pwfile) {
		ret = read_secret(pwfile, password, sizeof(password));
		if (ret) {
			fprintf(stderr, "nelssactl: cluster: %s: %s\n", pwfile, strerror(-ret));
			return EXIT_USAGE;
		}
		eo.password = password;
	}
	if (nelssa_etcd_open(&eo, &e, why, sizeof(why))) {
		ctl_usage_error(ctl, "cluster", "--etcd: %s", why);
		return EXIT_USAGE;
	}
	if (ctl->json)
		ig.arr = json_object_new_array();
	ret = nelssa_registry_nodes(e, cluster, &nodes, &n, &rev, on_bad, &ig);
	if (ret) {
		fprintf(stderr, "nelssactl: cluster: %s\n", nelssa_etcd_error(e));
		json_object_put(ig.arr);
		nelssa_etcd_close(e);
		return EXIT_DEVICE;
	}
	now = wall_ms();
	if (ctl->json) {
		json_object *j = json_object_new_object(), *arr = json_object_new_array();

		json_object_object_add(j, "cluster", json_object_new_string(cluster));
		json_object_object_add(j, "etcd", json_object_new_string(nelssa_etcd_endpoint(e)));
		json_object_object_add(j, "revision", json_object_new_int64(rev));
		for (size_t i = 0; i < n; i++)
			json_object_array_add(arr, node_json(&nodes[i], now));
		json_object_object_add(j, "nodes", arr);
		json_object_object_add(j, "ignored", ig.arr);
		ctl_print_json(j);
	} else {
		printf("cluster '%s' at %s (revision %" PRId64 "): %zu node%s\n", cluster,
		       nelssa_etcd_endpoint(e), rev, n, n == 1 ? "" : "s");
		if (n)
			printf("%-20s %-22s %3s %15s %11s %6s %10s %5s %8s %6s\n", "NODE", "CONTROL",
			       "DEV", "KV GiB FREE/ALL", "SESSIONS", "REQS", "TOKENS", "STEPS",
			       "STEP_US", "AGE_S");
		for (size_t i = 0; i < n; i++)
			node_text(&nodes[i], now, requests);
	}
	nelssa_registry_nodes_free(nodes, n);
	nelssa_etcd_close(e);
	return EXIT_OK;
}
