// SPDX-License-Identifier: MIT
/*
 * nelssad: options and config file, device discovery, signals, and the
 * order of start-up and shutdown.  See nelssad(8) in
 * Documentation/daemon.rst.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "nelssad.h"

static struct nelssad the_daemon;

uint64_t nd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void nd_log(struct nelssad *nd, const char *fmt, ...)
{
	struct timespec ts;
	char line[512];
	va_list ap;

	(void)nd;
	clock_gettime(CLOCK_REALTIME, &ts);
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s[%lld.%03ld]: %s\n", ND_NAME, (long long)ts.tv_sec,
		ts.tv_nsec / 1000000, line);
}

static void on_signal(int sig)
{
	(void)sig;
	the_daemon.stop = 1;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: nelssad [options]\n"
		"  --devices LIST     sim:N for N embedded devices (default sim:4), 'kdev' for every\n"
		"                     /dev/nelssa_pnm*, or a comma list of device names\n"
		"  --sim-opts OPTS    options for each sim device, e.g. mem=2G,cores=2\n"
		"  --listen HOST:PORT control address (default 127.0.0.1:18515; port 0 picks one)\n"
		"  --port-file FILE   write the control port there once listening\n"
		"  --max-sessions N   sessions served at once (default 64)\n"
		"  --max-conns N      control connections at once (default 256)\n"
		"  --busy-poll        spin on the UCX worker instead of sleeping (a core per daemon)\n"
		"  --require-rdma     refuse to run unless UCX can use an RDMA transport\n"
		"  --config FILE      read options from FILE: one 'name = value' per line, names as\n"
		"                     the long options without dashes, '#' comments\n"
		"  --verbose          log every refused message\n"
		"  --nop-kernel       benchmarks only: devices run NOP instead of SPARSE_ATTN, so a\n"
		"                     step measures the serving path alone (outputs are garbage)\n"
		"  --help, --version\n"
		"UCX is configured as usual through UCX_* variables (UCX_TLS, UCX_NET_DEVICES).\n"
		"Exit status: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on an error, 2 usage.\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || !*s || *end || v < lo || v > hi)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* One option by long name; 0, or -1 after printing why. */
static int set_option(struct nd_config *c, const char *name, const char *val, const char **cfgf)
{
	uint32_t v;

	if (!strcmp(name, "devices")) {
		snprintf(c->devices, sizeof(c->devices), "%s", val);
	} else if (!strcmp(name, "sim-opts")) {
		snprintf(c->sim_opts, sizeof(c->sim_opts), "%s", val);
	} else if (!strcmp(name, "listen")) {
		const char *colon = strrchr(val, ':');

		if (!colon || parse_u32(colon + 1, 0, 65535, &v) ||
		    (size_t)(colon - val) >= sizeof(c->listen_host)) {
			fprintf(stderr, "nelssad: --listen %s: need HOST:PORT\n", val);
			return -1;
		}
		memcpy(c->listen_host, val, (size_t)(colon - val));
		c->listen_host[colon - val] = 0;
		c->port = (uint16_t)v;
	} else if (!strcmp(name, "max-sessions") || !strcmp(name, "max-conns")) {
		if (parse_u32(val, 1, 100000, &v)) {
			fprintf(stderr, "nelssad: --%s %s: need 1..100000\n", name, val);
			return -1;
		}
		*(name[4] == 's' ? &c->max_sessions : &c->max_conns) = v;
	} else if (!strcmp(name, "busy-poll") || !strcmp(name, "require-rdma") ||
		   !strcmp(name, "verbose") || !strcmp(name, "nop-kernel")) {
		int on = !val || !strcmp(val, "1") || !strcmp(val, "yes") || !strcmp(val, "true");

		if (val && !on && strcmp(val, "0") && strcmp(val, "no") && strcmp(val, "false")) {
			fprintf(stderr, "nelssad: %s = %s: need yes or no\n", name, val);
			return -1;
		}
		*(name[0] == 'b' ? &c->busy_poll : name[0] == 'r' ? &c->require_rdma :
		  name[0] == 'n' ? &c->nop_kernel : &c->verbose) = on;
	} else if (!strcmp(name, "port-file") && cfgf) {
		*cfgf = strdup(val);
	} else {
		fprintf(stderr, "nelssad: unknown option '%s'\n", name);
		return -1;
	}
	return 0;
}

static int read_config(struct nd_config *c, const char *path, const char **port_file)
{
	FILE *f = fopen(path, "r");
	char line[1200];
	int lineno = 0;

	if (!f) {
		fprintf(stderr, "nelssad: %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *p = line, *eq, *name, *val, *e;

		lineno++;
		p[strcspn(p, "#\n")] = 0;
		while (*p == ' ' || *p == '\t')
			p++;
		if (!*p)
			continue;
		eq = strchr(p, '=');
		name = p;
		val = eq ? eq + 1 : NULL;
		if (eq)
			*eq = 0;
		for (e = name + strlen(name); e > name && (e[-1] == ' ' || e[-1] == '\t'); e--)
			e[-1] = 0;
		while (val && (*val == ' ' || *val == '\t'))
			val++;
		for (e = val ? val + strlen(val) : NULL; e && e > val && (e[-1] == ' ' || e[-1] == '\t'); e--)
			e[-1] = 0;
		if (set_option(c, name, val && *val ? val : NULL, port_file)) {
			fprintf(stderr, "nelssad: %s:%d: in this line\n", path, lineno);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	return 0;
}

static int open_one(struct nelssad *nd, const char *name)
{
	struct nd_device *dev;

	if (nd->n_dev == ND_MAX_DEVICES) {
		nd_log(nd, "more than %d devices", ND_MAX_DEVICES);
		return -E2BIG;
	}
	dev = &nd->dev[nd->n_dev];
	snprintf(dev->name, sizeof(dev->name), "%s", name);
	if (nelssa_pnm_open(name, &dev->pnm) || nelssa_pnm_info(dev->pnm, &dev->info)) {
		nd_log(nd, "cannot open %s: %s", name, nelssa_pnm_strerror());
		return -ENODEV;
	}
	nd_log(nd, "device %s (%s): %.0f MiB, %u cores", name, nelssa_pnm_backend(dev->pnm),
	       (double)dev->info.mem_size / (1 << 20), dev->info.nr_cores);
	nd->n_dev++;
	return 0;
}

static int open_devices(struct nelssad *nd)
{
	const char *list = nd->cfg.devices;
	uint32_t n;
	char name[256], *copy, *tok, *save = NULL;
	int ret = 0;

	if (!strncmp(list, "sim:", 4) && !parse_u32(list + 4, 1, ND_MAX_DEVICES, &n) &&
	    !strchr(list, ',')) {
		for (uint32_t i = 0; i < n && !ret; i++) {
			snprintf(name, sizeof(name), "sim:%u%s%s", i, nd->cfg.sim_opts[0] ? "," : "",
				 nd->cfg.sim_opts);
			ret = open_one(nd, name);
		}
		return ret;
	}
	if (!strcmp(list, "kdev")) {
		glob_t g;

		if (glob("/dev/nelssa_pnm[0-9]*", 0, NULL, &g)) {
			nd_log(nd, "no /dev/nelssa_pnm* devices (is the nelssa_pnm module loaded?)");
			return -ENODEV;
		}
		for (size_t i = 0; i < g.gl_pathc && !ret; i++)
			ret = open_one(nd, g.gl_pathv[i]);
		globfree(&g);
		return ret;
	}
	copy = strdup(list);
	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok && !ret; tok = strtok_r(NULL, ",", &save))
		ret = open_one(nd, tok);
	free(copy);
	if (!ret && !nd->n_dev) {
		nd_log(nd, "--devices names no device");
		ret = -ENODEV;
	}
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "devices", required_argument, NULL, 0 }, { "sim-opts", required_argument, NULL, 0 },
		{ "listen", required_argument, NULL, 0 }, { "port-file", required_argument, NULL, 0 },
		{ "max-sessions", required_argument, NULL, 0 },
		{ "max-conns", required_argument, NULL, 0 }, { "busy-poll", no_argument, NULL, 0 },
		{ "require-rdma", no_argument, NULL, 0 }, { "verbose", no_argument, NULL, 0 },
		{ "nop-kernel", no_argument, NULL, 0 },
		{ "config", required_argument, NULL, 'c' }, { "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' }, { NULL, 0, NULL, 0 },
	};
	struct nelssad *nd = &the_daemon;
	struct sigaction sa = { .sa_handler = on_signal };
	const char *port_file = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int c, idx, lfd, ret = 1;

	snprintf(nd->cfg.devices, sizeof(nd->cfg.devices), "sim:4");
	snprintf(nd->cfg.listen_host, sizeof(nd->cfg.listen_host), "127.0.0.1");
	nd->cfg.port = 18515;
	nd->cfg.max_sessions = 64;
	nd->cfg.max_conns = 256;
	/* The config file first, so the command line overrides it. */
	for (int i = 1; i < argc - 1; i++)
		if (!strcmp(argv[i], "--config") && read_config(&nd->cfg, argv[i + 1], &port_file))
			return 2;
	while ((c = getopt_long(argc, argv, "h", lo, &idx)) != -1) {
		if (c == 0) {
			if (set_option(&nd->cfg, lo[idx].name, optarg, &port_file))
				return 2;
		} else if (c == 'h') {
			usage(stdout);
			return 0;
		} else if (c == 'V') {
			printf("nelssad %s (protocol %u)\n", NELSSA_VERSION, NELSSA_PROTO_VERSION);
			return 0;
		} else if (c != 'c') {
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nelssad: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	pthread_mutex_init(&nd->lock, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (open_devices(nd))
		goto out;
	if (nd_dataplane_start(nd))
		goto out;
	lfd = nd_control_listen(nd);
	if (lfd < 0)
		goto out;
	getsockname(lfd, (struct sockaddr *)&ss, &sl);
	nd->cfg.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						       : ((struct sockaddr_in *)&ss)->sin_port);
	if (port_file) {
		FILE *f = fopen(port_file, "w");

		if (!f || fprintf(f, "%u\n", nd->cfg.port) < 0 || fclose(f)) {
			nd_log(nd, "cannot write %s", port_file);
			goto out;
		}
	}
	nd_log(nd, "listening on %s:%u with %u device(s)%s%s", nd->cfg.listen_host, nd->cfg.port,
	       nd->n_dev, nd->cfg.busy_poll ? ", busy-polling" : "",
	       nd->cfg.nop_kernel ? ", NOP kernel (benchmark mode)" : "");
	ret = nd_control_run(nd, lfd) ? 1 : 0;
	close(lfd);
	nd_log(nd, "shutting down");
out:
	nd_dataplane_stop(nd);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		nelssa_pnm_close(nd->dev[d].pnm);
	free((void *)port_file);
	return ret;
}
