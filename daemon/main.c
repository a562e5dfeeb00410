// SPDX-License-Identifier: MIT
/*
 * nelssad: options and config file, device discovery, signals, and the
 * order of start-up and shutdown.  See nelssad(8) in
 * Documentation/daemon.rst.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include <nelssa/registry.h>

#include "nelssad.h"

static struct nelssad the_daemon;

/* The daemon's clock, a seam of its own: the in-process fuzzer replaces it. */
uint64_t nd_now_ns(void)
{
	return nelssa_now_ns();
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
		"usage: nelssad [options]   (--name VALUE and --name=VALUE alike)\n"
		"  --devices LIST     sim:N for N embedded devices (default sim:4), 'kdev' for every\n"
		"                     /dev/nelssa_pnm*, or a comma list of device names, each sim:N\n"
		"                     (device number N) or /dev/nelssa_pnmN; a comma followed by\n"
		"                     neither 'sim:' nor '/' separates a sim device's own options:\n"
		"                     sim:0,mem=2G,sim:1,mem=1G\n"
		"  --sim-opts OPTS    options for each sim device, e.g. mem=2G,cores=2 (a device's\n"
		"                     own options in --devices win)\n"
		"  --listen HOST:PORT control address (default 127.0.0.1:18515; port 0 picks one)\n"
		"  --port-file FILE   write the control port there once listening\n"
		"  --data-port PORT   the UCX data path's port, at the control address (default 0:\n"
		"                     any; clients learn it in HELLO_OK)\n"
		"Limits (a request beyond one is refused with an ERROR naming it):\n"
		"  --max-conns N      control connections at once (default 256)\n"
		"  --max-conns-per-addr N      ... from one client address (default 32)\n"
		"  --max-sessions N   sessions served at once (default 64)\n"
		"  --max-sessions-per-conn N   ... held by one connection (default 16)\n"
		"  --max-requests-per-session N  requests one session holds (default 1024)\n"
		"  --max-memory-per-conn SIZE|PCT%%  device memory one connection's sessions\n"
		"                     reserve, e.g. 8G or 25%% (default 100%%)\n"
		"  --hello-timeout-ms MS       a connection must say HELLO within (default 10000)\n"
		"  --frame-timeout-ms MS       a frame must arrive, and replies be read, within\n"
		"                     (default 10000)\n"
		"  --max-unread-kib N          replies a connection leaves unread, its socket's\n"
		"                     included, before it is closed (default 256)\n"
		"  --idle-timeout-ms MS        a connection with no session and no frame is closed\n"
		"                     after (default 300000; 0: never)\n"
		"  --admin-addr LIST  client addresses whose STATS show the whole daemon, or 'none'\n"
		"                     (default 127.0.0.1,::1); others see their own counters\n"
		"  --busy-poll        spin on the UCX worker instead of sleeping (a core per daemon)\n"
		"  --require-rdma     refuse to run unless UCX can use an RDMA transport\n"
		"  --zero-copy MODE   KV ingest: auto (default: clients write KV into registered\n"
		"                     device memory where UCX can register it, else the daemon\n"
		"                     copies it in, and says so), off (always copy), or require\n"
		"                     (refuse sessions whose memory cannot be registered, and KV\n"
		"                     sent as messages)\n"
		"  --require-zero-copy  the same as --zero-copy=require\n"
		"  --emulated-rma     zero-copy ingest where UCX only emulates RMA (TCP, shared\n"
		"                     memory without CMA).  UCX's emulation writes and reads any\n"
		"                     address a peer names: every client can then read and write\n"
		"                     all of this daemon's memory.  Trusted clients only (tests,\n"
		"                     benchmarks); off by default, when zero-copy needs RDMA\n"
		"Cluster registry (Documentation/cluster.rst):\n"
		"  --etcd URL[,URL...] announce this node in etcd (v3 API, JSON gateway), e.g.\n"
		"                     http://127.0.0.1:2379; off by default\n"
		"  --cluster NAME     the cluster it joins (default 'default')\n"
		"  --node-id NAME     its name there (default HOSTNAME-PORT)\n"
		"  --advertise HOST   the host clients reach it at (default the --listen host, or\n"
		"                     the host name when that is a wildcard)\n"
		"  --etcd-ttl S       the lease's TTL: how long a dead node stays listed (default 10)\n"
		"  --etcd-update-ms MS  load written at most this often (default 1000)\n"
		"  --etcd-timeout-ms MS each etcd call's deadline (default 2000)\n"
		"  --etcd-user NAME, --etcd-password-file FILE   etcd authentication (off by default)\n"
		"  --etcd-cacert FILE, --etcd-cert FILE, --etcd-key FILE   TLS to https:// endpoints\n"
		"  --config FILE      read options from FILE first: one 'name = value' per line, names\n"
		"                     as the long options without dashes, 'name' alone or\n"
		"                     'name = yes|no' for a switch, '#' comments; a regular file of\n"
		"                     at most 1 MiB\n"
		"  --verbose          log every refused message\n"
		"  --nop-kernel       benchmarks only: devices run NOP instead of SPARSE_ATTN, so a\n"
		"                     step measures the serving path alone (outputs are garbage)\n"
		"  --help, --version\n"
		"A switch takes --name or --name=yes|no.  The command line overrides the file.\n"
		"UCX is configured as usual through UCX_* variables (UCX_TLS, UCX_NET_DEVICES).\n"
		"Exit status: 0 after a clean shutdown (SIGINT/SIGTERM), 1 on an error, 2 for a\n"
		"usage error (an unknown option, a bad or missing value, a config file that\n"
		"cannot be read or has a bad line).\n");
}

/*
 * Options, as one table for the command line and the config file: every
 * value goes through set_option() whichever it came from.
 */
enum opt_kind { OPT_VALUE, OPT_SWITCH, OPT_CMDLINE };

struct opt {
	const char *name;
	enum opt_kind kind;
	const char *what;	/* the value wanted, for messages */
};

static const struct opt opts[] = {
	{ "devices", OPT_VALUE, "LIST" },
	{ "sim-opts", OPT_VALUE, "OPTS" },
	{ "listen", OPT_VALUE, "HOST:PORT" },
	{ "port-file", OPT_VALUE, "FILE" },
	{ "max-sessions", OPT_VALUE, "N" },
	{ "max-conns", OPT_VALUE, "N" },
	{ "data-port", OPT_VALUE, "PORT" },
	{ "max-conns-per-addr", OPT_VALUE, "N" },
	{ "max-sessions-per-conn", OPT_VALUE, "N" },
	{ "max-requests-per-session", OPT_VALUE, "N" },
	{ "max-memory-per-conn", OPT_VALUE, "SIZE or PERCENT%" },
	{ "hello-timeout-ms", OPT_VALUE, "MS" },
	{ "frame-timeout-ms", OPT_VALUE, "MS" },
	{ "max-unread-kib", OPT_VALUE, "N" },
	{ "idle-timeout-ms", OPT_VALUE, "MS" },
	{ "admin-addr", OPT_VALUE, "ADDR[,ADDR...] or none" },
	{ "busy-poll", OPT_SWITCH, "yes or no" },
	{ "require-rdma", OPT_SWITCH, "yes or no" },
	{ "zero-copy", OPT_VALUE, "auto, off or require" },
	{ "require-zero-copy", OPT_SWITCH, "yes or no" },
	{ "emulated-rma", OPT_SWITCH, "yes or no" },
	{ "verbose", OPT_SWITCH, "yes or no" },
	{ "nop-kernel", OPT_SWITCH, "yes or no" },
	{ "etcd", OPT_VALUE, "URL[,URL...]" },
	{ "cluster", OPT_VALUE, "NAME" },
	{ "node-id", OPT_VALUE, "NAME" },
	{ "advertise", OPT_VALUE, "HOST" },
	{ "etcd-ttl", OPT_VALUE, "S" },
	{ "etcd-update-ms", OPT_VALUE, "MS" },
	{ "etcd-timeout-ms", OPT_VALUE, "MS" },
	{ "etcd-user", OPT_VALUE, "NAME" },
	{ "etcd-password-file", OPT_VALUE, "FILE" },
	{ "etcd-cacert", OPT_VALUE, "FILE" },
	{ "etcd-cert", OPT_VALUE, "FILE" },
	{ "etcd-key", OPT_VALUE, "FILE" },
	{ "config", OPT_CMDLINE, "FILE" },
	{ "help", OPT_CMDLINE, NULL },
	{ "version", OPT_CMDLINE, NULL },
};

#define ND_CONFIG_MAX (1u << 20)	/* bytes of a config file */

/* Where a value came from: a config file's line, or the command line (file NULL). */
struct origin {
	const char *file;
	unsigned int line;
};

static void opt_error(const struct origin *o, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void opt_error(const struct origin *o, const char *name, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (o->file)
		fprintf(stderr, "nelssad: %s:%u: %s: %s\n", o->file, o->line, name, msg);
	else
		fprintf(stderr, "nelssad: --%s: %s\n", name, msg);
}

static const struct opt *find_opt(const char *name, size_t len)
{
	for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++)
		if (strlen(opts[i].name) == len && !strncmp(opts[i].name, name, len))
			return &opts[i];
	return NULL;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;

	if (nelssa_parse_u64(s, lo, hi, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* The numeric options: where each goes, and its range. */
static const struct {
	const char *name;
	size_t off;
	uint32_t lo, hi;
} num_opts[] = {
	{ "max-sessions", offsetof(struct nd_config, max_sessions), 1, 100000 },
	{ "max-conns", offsetof(struct nd_config, max_conns), 1, 100000 },
	{ "data-port", offsetof(struct nd_config, data_port), 0, 65535 },
	{ "max-conns-per-addr", offsetof(struct nd_config, max_conns_per_addr), 1, 100000 },
	{ "max-sessions-per-conn", offsetof(struct nd_config, max_sessions_per_conn), 1, 100000 },
	{ "max-requests-per-session", offsetof(struct nd_config, max_requests_per_session), 1,
	  1000000 },
	{ "hello-timeout-ms", offsetof(struct nd_config, hello_timeout_ms), 1, 3600000 },
	{ "frame-timeout-ms", offsetof(struct nd_config, frame_timeout_ms), 1, 3600000 },
	{ "max-unread-kib", offsetof(struct nd_config, max_unread_kib), 16, 65536 },
	{ "idle-timeout-ms", offsetof(struct nd_config, idle_timeout_ms), 0, 86400000 },
	{ "etcd-ttl", offsetof(struct nd_config, etcd_ttl), 2, 3600 },
	{ "etcd-update-ms", offsetof(struct nd_config, etcd_update_ms), 100, 60000 },
	{ "etcd-timeout-ms", offsetof(struct nd_config, etcd_timeout_ms), 100, 60000 },
};

/* The registry's string options: where each goes. */
static const struct {
	const char *name;
	size_t off, size;
} str_opts[] = {
	{ "etcd", offsetof(struct nd_config, etcd), sizeof(((struct nd_config *)0)->etcd) },
	{ "cluster", offsetof(struct nd_config, cluster), sizeof(((struct nd_config *)0)->cluster) },
	{ "node-id", offsetof(struct nd_config, node_id), sizeof(((struct nd_config *)0)->node_id) },
	{ "advertise", offsetof(struct nd_config, advertise),
	  sizeof(((struct nd_config *)0)->advertise) },
	{ "etcd-user", offsetof(struct nd_config, etcd_user),
	  sizeof(((struct nd_config *)0)->etcd_user) },
	{ "etcd-password-file", offsetof(struct nd_config, etcd_password_file),
	  sizeof(((struct nd_config *)0)->etcd_password_file) },
	{ "etcd-cacert", offsetof(struct nd_config, etcd_cacert),
	  sizeof(((struct nd_config *)0)->etcd_cacert) },
	{ "etcd-cert", offsetof(struct nd_config, etcd_cert),
	  sizeof(((struct nd_config *)0)->etcd_cert) },
	{ "etcd-key", offsetof(struct nd_config, etcd_key), sizeof(((struct nd_config *)0)->etcd_key) },
};

/* SIZE (bytes, or with K, M, G, T: binary) or PERCENT% (1..100). */
static int set_memory(struct nd_config *c, const char *val)
{
	size_t n = strlen(val);
	char pct[8];
	uint64_t v;

	if (n && val[n - 1] == '%') {
		if (n > sizeof(pct))
			return -1;
		memcpy(pct, val, n - 1);
		pct[n - 1] = '\0';
		if (nelssa_parse_u64(pct, 1, 100, &v))
			return -1;
		c->max_memory_per_conn = 0;
		c->max_memory_pct = (uint32_t)v;
		return 0;
	}
	if (nelssa_parse_size(val, &v) || !v)
		return -1;
	c->max_memory_per_conn = v;
	return 0;
}

/* "none", or up to 16 numeric IPv4 and IPv6 addresses, comma separated. */
static int set_admin(struct nd_config *c, const char *val, char *why, size_t why_len)
{
	struct nd_addr a[sizeof(c->admin) / sizeof(c->admin[0])];
	uint32_t n = 0;
	const char *p = val;

	if (!strcmp(val, "none")) {
		c->n_admin = 0;
		return 0;
	}
	for (;;) {
		size_t len = strcspn(p, ",");
		char one[INET6_ADDRSTRLEN];

		if (!len || len >= sizeof(one)) {
			snprintf(why, why_len, "'%.*s' is not a numeric IPv4 or IPv6 address",
				 (int)(len < 64 ? len : 64), p);
			return -1;
		}
		if (n == sizeof(a) / sizeof(a[0])) {
			snprintf(why, why_len, "more than %zu addresses", sizeof(a) / sizeof(a[0]));
			return -1;
		}
		memcpy(one, p, len);
		one[len] = 0;
		memset(&a[n], 0, sizeof(a[n]));
		if (inet_pton(AF_INET, one, a[n].a) == 1) {
			a[n].family = AF_INET;
		} else if (inet_pton(AF_INET6, one, a[n].a) == 1) {
			static const uint8_t v4mapped[12] = { [10] = 0xff, [11] = 0xff };

			a[n].family = AF_INET6;
			if (!memcmp(a[n].a, v4mapped, 12)) {	/* as conn.c sees such a peer */
				memmove(a[n].a, a[n].a + 12, 4);
				memset(a[n].a + 4, 0, 12);
				a[n].family = AF_INET;
			}
		} else {
			snprintf(why, why_len, "'%s' is not a numeric IPv4 or IPv6 address", one);
			return -1;
		}
		n++;
		p += len;
		if (!*p)
			break;
		p++;
	}
	memcpy(c->admin, a, n * sizeof(a[0]));
	c->n_admin = n;
	return 0;
}

#define ND_DEV_NAME 128		/* as struct nd_device's name */

/*
 * Splits a --devices list into device names.  A comma starts a new device
 * only where "sim:" or "/" follows it; any other comma belongs to the sim
 * device before it, as its options: "sim:0,mem=2G,cores=2,sim:1,mem=1G" is
 * two devices, "/dev/nelssa_pnm0,/dev/nelssa_pnm1" two more.  Each name is
 * sim:N (device number N, 0..255) or a path; none may come twice.  0, or
 * -1 with the reason in @why.
 */
static int split_devices(const char *list, char (*names)[ND_DEV_NAME], uint32_t *n, char *why,
			 size_t why_len)
{
	uint32_t idx[ND_MAX_DEVICES] = { 0 };
	const char *p = list;

	*n = 0;
	while (*p) {
		const char *end = p, *c;
		size_t len;

		for (c = strchr(p, ','); c; c = strchr(c + 1, ','))
			if (!strncmp(c + 1, "sim:", 4) || c[1] == '/' || !c[1] || c[1] == ',')
				break;
		end = c ? c : p + strlen(p);
		len = (size_t)(end - p);
		if (!len) {
			snprintf(why, why_len, "an empty device name");
			return -1;
		}
		if (strncmp(p, "sim:", 4) && *p != '/') {
			snprintf(why, why_len, "'%.*s' is not a device (sim:N or /dev/nelssa_pnmN)",
				 (int)len, p);
			return -1;
		}
		if (*n == ND_MAX_DEVICES) {
			snprintf(why, why_len, "more than %d devices", ND_MAX_DEVICES);
			return -1;
		}
		if (len >= ND_DEV_NAME) {
			snprintf(why, why_len, "device name '%.*s...' is too long", 32, p);
			return -1;
		}
		memcpy(names[*n], p, len);
		names[*n][len] = 0;
		(*n)++;
		if (!c)
			break;
		p = c + 1;
		if (!*p) {
			snprintf(why, why_len, "an empty device name after the last comma");
			return -1;
		}
	}
	if (!*n) {
		snprintf(why, why_len, "names no device");
		return -1;
	}
	/* The same device twice would be opened twice and its memory counted twice. */
	for (uint32_t i = 0; i < *n; i++) {
		char num[8];

		if (strncmp(names[i], "sim:", 4))
			continue;
		snprintf(num, sizeof(num), "%.*s", (int)strcspn(names[i] + 4, ","), names[i] + 4);
		if (strcspn(names[i] + 4, ",") >= sizeof(num) || parse_u32(num, 0, 255, &idx[i])) {
			snprintf(why, why_len, "%s: the device number must be 0..255", names[i]);
			return -1;
		}
	}
	for (uint32_t i = 0; i < *n; i++)
		for (uint32_t j = 0; j < i; j++)
			if (names[i][0] == names[j][0] &&
			    (names[i][0] == 's' ? idx[i] == idx[j] : !strcmp(names[i], names[j]))) {
				snprintf(why, why_len, "names %s twice (as %s and as %s)",
					 names[i][0] == 's' ? "a sim device" : "a device", names[j],
					 names[i]);
				return -1;
			}
	return 0;
}

static int set_string(const struct origin *o, const char *name, char *dst, size_t size,
		      const char *val)
{
	if (strlen(val) >= size) {
		opt_error(o, name, "too long (at most %zu characters)", size - 1);
		return -1;
	}
	memcpy(dst, val, strlen(val) + 1);
	return 0;
}

/*
 * One option's value: @val is NULL when none was given (a bare --name, or
 * a line holding only the name), "" when it was given empty.  0, or -1
 * after saying why.
 */
static int set_option(struct nd_config *c, const struct opt *opt, const char *val,
		      const struct origin *o)
{
	const char *name = opt->name;
	uint32_t v;

	if (opt->kind == OPT_CMDLINE) {
		opt_error(o, name, "only on the command line");
		return -1;
	}
	if (opt->kind == OPT_SWITCH) {
		int on;

		if (!val || !strcmp(val, "1") || !strcmp(val, "yes") || !strcmp(val, "true"))
			on = 1;
		else if (!strcmp(val, "0") || !strcmp(val, "no") || !strcmp(val, "false"))
			on = 0;
		else {
			opt_error(o, name, *val ? "'%s': need yes or no" :
				  "%sneeds yes or no after '=', or the name alone", val);
			return -1;
		}
		if (!strcmp(name, "require-zero-copy")) {
			c->zero_copy = on ? ND_ZERO_COPY_REQUIRE : ND_ZERO_COPY_AUTO;
			return 0;
		}
		if (!strcmp(name, "emulated-rma")) {
			c->emulated_rma = on;
			return 0;
		}
		*(name[0] == 'b' ? &c->busy_poll : name[0] == 'r' ? &c->require_rdma :
		  name[0] == 'n' ? &c->nop_kernel : &c->verbose) = on;
		return 0;
	}
	if (!val || !*val) {
		opt_error(o, name, "needs a value (%s)", opt->what);
		return -1;
	}
	if (!strcmp(name, "devices")) {
		static char names[ND_MAX_DEVICES][ND_DEV_NAME];
		char why[256];
		uint32_t n;

		if (strcmp(val, "kdev") && (strncmp(val, "sim:", 4) || strchr(val, ',') ||
					    parse_u32(val + 4, 1, ND_MAX_DEVICES, &n)) &&
		    split_devices(val, names, &n, why, sizeof(why))) {
			opt_error(o, name, "%s: %s", val, why);
			return -1;
		}
		return set_string(o, name, c->devices, sizeof(c->devices), val);
	}
	if (!strcmp(name, "sim-opts"))
		return set_string(o, name, c->sim_opts, sizeof(c->sim_opts), val);
	if (!strcmp(name, "port-file"))
		return set_string(o, name, c->port_file, sizeof(c->port_file), val);
	if (!strcmp(name, "listen")) {
		const char *colon = strrchr(val, ':');

		if (!colon || parse_u32(colon + 1, 0, 65535, &v)) {
			opt_error(o, name, "'%s': need HOST:PORT, a port 0..65535", val);
			return -1;
		}
		if ((size_t)(colon - val) >= sizeof(c->listen_host)) {
			opt_error(o, name, "host too long (at most %zu characters)",
				  sizeof(c->listen_host) - 1);
			return -1;
		}
		memcpy(c->listen_host, val, (size_t)(colon - val));
		c->listen_host[colon - val] = 0;
		c->port = (uint16_t)v;
		return 0;
	}
	if (!strcmp(name, "max-memory-per-conn")) {
		if (set_memory(c, val)) {
			opt_error(o, name, "'%s': need a size (512M, 8G) or a percentage of the "
				  "devices' memory (1%%..100%%)", val);
			return -1;
		}
		return 0;
	}
	if (!strcmp(name, "zero-copy")) {
		static const char *const modes[] = { [ND_ZERO_COPY_AUTO] = "auto",
						     [ND_ZERO_COPY_OFF] = "off",
						     [ND_ZERO_COPY_REQUIRE] = "require" };

		for (int i = 0; i < 3; i++)
			if (!strcmp(val, modes[i])) {
				c->zero_copy = i;
				return 0;
			}
		opt_error(o, name, "'%s': need auto, off or require", val);
		return -1;
	}
	if (!strcmp(name, "admin-addr")) {
		char why[128];

		if (set_admin(c, val, why, sizeof(why))) {
			opt_error(o, name, "%s (need addresses, comma separated, or none)", why);
			return -1;
		}
		return 0;
	}
	if ((!strcmp(name, "cluster") || !strcmp(name, "node-id")) && !nelssa_registry_name_ok(val)) {
		opt_error(o, name, "'%s': need 1 to %d of A-Z a-z 0-9 . _ -", val, NELSSA_NAME_MAX);
		return -1;
	}
	if (!strcmp(name, "etcd")) {
		struct nelssa_etcd_opts eo = { .endpoints = val };
		struct nelssa_etcd *e;
		char why[256];

		if (nelssa_etcd_open(&eo, &e, why, sizeof(why))) {
			opt_error(o, name, "%s", why);
			return -1;
		}
		nelssa_etcd_close(e);
	}
	for (size_t i = 0; i < sizeof(str_opts) / sizeof(str_opts[0]); i++)
		if (!strcmp(name, str_opts[i].name))
			return set_string(o, name, (char *)c + str_opts[i].off, str_opts[i].size, val);
	for (size_t i = 0; i < sizeof(num_opts) / sizeof(num_opts[0]); i++) {
		if (strcmp(name, num_opts[i].name))
			continue;
		if (parse_u32(val, num_opts[i].lo, num_opts[i].hi, &v)) {
			opt_error(o, name, "'%s': need %u..%u", val, num_opts[i].lo,
				  num_opts[i].hi);
			return -1;
		}
		memcpy((char *)c + num_opts[i].off, &v, sizeof(v));
		return 0;
	}
	opt_error(o, name, "not handled (a bug)");
	return -1;
}

static const char *file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" :
	       S_ISBLK(m) ? "a block device" : S_ISFIFO(m) ? "a FIFO" :
	       S_ISSOCK(m) ? "a socket" : "not a plain file";
}

/*
 * Reads @path, a regular file of at most ND_CONFIG_MAX bytes, whole, into
 * a NUL-terminated buffer.  Never blocks on a FIFO or reads a device.
 */
static char *slurp_config(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	size_t have = 0;
	char *buf;

	if (fd < 0) {
		fprintf(stderr, "nelssad: --config %s: %s\n", path, strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st)) {
		fprintf(stderr, "nelssad: --config %s: %s\n", path, strerror(errno));
		close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		fprintf(stderr, "nelssad: --config %s: not a regular file (%s)\n", path,
			file_kind(st.st_mode));
		close(fd);
		return NULL;
	}
	if ((uint64_t)st.st_size > ND_CONFIG_MAX) {
		fprintf(stderr, "nelssad: --config %s: larger than %u MiB\n", path,
			ND_CONFIG_MAX >> 20);
		close(fd);
		return NULL;
	}
	buf = malloc(ND_CONFIG_MAX + 1);
	if (!buf) {
		fprintf(stderr, "nelssad: --config %s: out of memory\n", path);
		close(fd);
		return NULL;
	}
	/* Bounded even if the file grows (or lies about its size, as /proc). */
	for (;;) {
		ssize_t n = read(fd, buf + have, ND_CONFIG_MAX + 1 - have);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "nelssad: --config %s: %s\n", path, strerror(errno));
			goto fail;
		}
		if (!n)
			break;
		have += (size_t)n;
		if (have > ND_CONFIG_MAX) {
			fprintf(stderr, "nelssad: --config %s: larger than %u MiB\n", path,
				ND_CONFIG_MAX >> 20);
			goto fail;
		}
	}
	close(fd);
	if (memchr(buf, 0, have)) {
		fprintf(stderr, "nelssad: --config %s: holds a NUL byte: not a text file\n", path);
		free(buf);
		return NULL;
	}
	buf[have] = 0;
	return buf;
fail:
	close(fd);
	free(buf);
	return NULL;
}

static int is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

/* Applies a config file: "name = value", "name" alone for a switch, '#' comments. */
static int read_config(struct nd_config *c, const char *path)
{
	char *buf = slurp_config(path), *line, *next;
	struct origin o = { path, 0 };
	int ret = 0;

	if (!buf)
		return -1;
	for (line = buf; line && !ret; line = next) {
		char *eq, *val = NULL, *e;
		const struct opt *opt;

		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		o.line++;
		line[strcspn(line, "#")] = 0;
		while (is_blank(*line))
			line++;
		for (e = line + strlen(line); e > line && is_blank(e[-1]); e--)
			e[-1] = 0;
		if (!*line)
			continue;
		eq = strchr(line, '=');
		if (eq) {
			*eq = 0;
			for (val = eq + 1; is_blank(*val); val++)
				;
			for (e = eq; e > line && is_blank(e[-1]); e--)
				e[-1] = 0;
		}
		opt = find_opt(line, strlen(line));
		if (!opt) {
			fprintf(stderr, "nelssad: %s:%u: unknown option '%s'\n", path, o.line, line);
			ret = -1;
		} else {
			ret = set_option(c, opt, val, &o);
		}
	}
	free(buf);
	return ret;
}

/*
 * The command line, in two passes over the same parser: the first checks
 * the syntax and finds --config, --help and --version (@apply 0), the
 * second, after the config file, sets the options (@apply 1), so the
 * command line overrides the file.  Returns 0 to go on, 1 to exit 0
 * (--help, --version), -1 to exit 2.
 */
static int parse_args(int argc, char **argv, struct nd_config *c, int apply,
		      const char **config)
{
	const struct origin o = { NULL, 0 };

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *name = a + 2, *eq, *val;
		const struct opt *opt;
		size_t len;

		if (!strcmp(a, "-h")) {
			a = "--help";
			name = a + 2;
		}
		if (strncmp(a, "--", 2) || !a[2]) {
			fprintf(stderr, "nelssad: unexpected argument '%s' (options are --name)\n", a);
			return -1;
		}
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		opt = find_opt(name, len);
		if (!opt) {
			fprintf(stderr, "nelssad: unknown option '--%.*s' (--help lists them)\n",
				(int)len, name);
			return -1;
		}
		val = eq ? eq + 1 : NULL;
		if (opt->kind == OPT_VALUE || (opt->kind == OPT_CMDLINE && opt->what)) {
			if (!val && i + 1 < argc)
				val = argv[++i];
			if (!val || !*val) {
				opt_error(&o, opt->name, "needs a value (%s)", opt->what);
				return -1;
			}
		} else if (opt->kind == OPT_CMDLINE && val) {
			opt_error(&o, opt->name, "takes no value");
			return -1;
		}
		if (!strcmp(opt->name, "config")) {
			if (!apply && *config) {
				opt_error(&o, opt->name, "given twice");
				return -1;
			}
			*config = val;
		} else if (!strcmp(opt->name, "help")) {
			if (!apply) {
				usage(stdout);
				return 1;
			}
		} else if (!strcmp(opt->name, "version")) {
			if (!apply) {
				printf("nelssad %s (protocol %u)\n", NELSSA_VERSION, NELSSA_PROTO_VERSION);
				return 1;
			}
		} else if (apply && set_option(c, opt, val, &o)) {
			return -1;
		}
	}
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

/* A sim device of the list, with --sim-opts before its own options (which win). */
static int sim_name(struct nelssad *nd, const char *dev, char *out, size_t len)
{
	const char *own = strchr(dev, ',');
	int n;

	if (!nd->cfg.sim_opts[0])
		n = snprintf(out, len, "%s", dev);
	else
		n = snprintf(out, len, "%.*s,%s%s", (int)(own ? (size_t)(own - dev) : strlen(dev)),
			     dev, nd->cfg.sim_opts, own ? own : "");
	if (n < 0 || (size_t)n >= len) {
		nd_log(nd, "%s with --sim-opts %s: device name too long", dev, nd->cfg.sim_opts);
		return -EINVAL;
	}
	return 0;
}

static int open_devices(struct nelssad *nd)
{
	static char names[ND_MAX_DEVICES][ND_DEV_NAME];
	const char *list = nd->cfg.devices;
	dev_t rdev[ND_MAX_DEVICES];
	char name[ND_DEV_NAME], why[256];
	uint32_t n;
	int ret = 0;

	if (!strncmp(list, "sim:", 4) && !parse_u32(list + 4, 1, ND_MAX_DEVICES, &n) &&
	    !strchr(list, ',')) {
		for (uint32_t i = 0; i < n && !ret; i++) {
			char dev[16];

			snprintf(dev, sizeof(dev), "sim:%u", i);
			ret = sim_name(nd, dev, name, sizeof(name));
			if (!ret)
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
	if (split_devices(list, names, &n, why, sizeof(why))) {
		nd_log(nd, "--devices %s: %s", list, why);
		return -EINVAL;
	}
	/* A path and a link to it are one device: refused before any is opened. */
	for (uint32_t i = 0; i < n; i++) {
		struct stat st;

		rdev[i] = names[i][0] == '/' && !stat(names[i], &st) && S_ISCHR(st.st_mode) ?
			  st.st_rdev : 0;
		for (uint32_t j = 0; j < i; j++)
			if (rdev[i] && rdev[i] == rdev[j]) {
				nd_log(nd, "--devices %s: %s and %s are the same device", list,
				       names[j], names[i]);
				return -EINVAL;
			}
	}
	for (uint32_t i = 0; i < n && !ret; i++) {
		if (names[i][0] == 's')
			ret = sim_name(nd, names[i], name, sizeof(name));
		else if (strlen(names[i]) < sizeof(name))
			memcpy(name, names[i], strlen(names[i]) + 1);
		else
			ret = -ENAMETOOLONG;	/* split_devices() bounds names: never */
		if (!ret)
			ret = open_one(nd, name);
	}
	return ret;
}

/* Resolves max-memory-per-conn and logs the limits in force. */
static void limits(struct nelssad *nd)
{
	const struct nd_config *c = &nd->cfg;
	char admin[16 * (INET6_ADDRSTRLEN + 2)] = "none", pct[16] = "";
	uint64_t total = 0;

	for (uint32_t d = 0; d < nd->n_dev; d++)
		total += nd->dev[d].info.mem_size;
	/* total * pct / 100, without overflowing */
	nd->memory_per_conn = c->max_memory_per_conn ? c->max_memory_per_conn :
			      total / 100 * c->max_memory_pct +
			      total % 100 * c->max_memory_pct / 100;
	if (!c->max_memory_per_conn)
		snprintf(pct, sizeof(pct), "%u%%: ", c->max_memory_pct);
	for (uint32_t i = 0, at = 0; i < c->n_admin; i++) {
		char one[INET6_ADDRSTRLEN];

		inet_ntop(c->admin[i].family, c->admin[i].a, one, sizeof(one));
		at += (uint32_t)snprintf(admin + at, sizeof(admin) - at, "%s%s", i ? "," : "", one);
	}
	nd_log(nd, "limits: %u connections, %u per address; %u sessions, %u per connection; "
	       "%u requests per session; %s%.1f MiB of device memory per connection; %u KiB of "
	       "replies unread; timeouts: HELLO %u ms, frame %u ms, idle %u ms; admin: %s",
	       c->max_conns, c->max_conns_per_addr, c->max_sessions, c->max_sessions_per_conn,
	       c->max_requests_per_session, pct, (double)nd->memory_per_conn / (1 << 20),
	       c->max_unread_kib, c->hello_timeout_ms, c->frame_timeout_ms, c->idle_timeout_ms,
	       admin);
}

int main(int argc, char **argv)
{
	struct nelssad *nd = &the_daemon;
	struct sigaction sa = { .sa_handler = on_signal };
	const char *config = NULL;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int lfd = -1, ret = 1;

	snprintf(nd->cfg.devices, sizeof(nd->cfg.devices), "sim:4");
	snprintf(nd->cfg.listen_host, sizeof(nd->cfg.listen_host), "127.0.0.1");
	nd->cfg.port = 18515;
	nd->cfg.max_sessions = 64;
	nd->cfg.max_conns = 256;
	nd->cfg.max_conns_per_addr = 32;
	nd->cfg.max_sessions_per_conn = 16;
	nd->cfg.max_requests_per_session = 1024;
	nd->cfg.max_memory_pct = 100;
	nd->cfg.hello_timeout_ms = 10000;
	nd->cfg.frame_timeout_ms = 10000;
	nd->cfg.max_unread_kib = 256;
	nd->cfg.idle_timeout_ms = 300000;
	set_admin(&nd->cfg, "127.0.0.1,::1", NULL, 0);
	snprintf(nd->cfg.cluster, sizeof(nd->cfg.cluster), "default");
	nd->cfg.etcd_ttl = 10;
	nd->cfg.etcd_update_ms = 1000;
	nd->cfg.etcd_timeout_ms = 2000;
	/* The config file first, so the command line overrides it. */
	ret = parse_args(argc, argv, &nd->cfg, 0, &config);
	if (ret)
		return ret > 0 ? 0 : 2;
	if (config && read_config(&nd->cfg, config))
		return 2;
	if (parse_args(argc, argv, &nd->cfg, 1, &config))
		return 2;
	ret = 1;
	if (nd_jobs_init(nd)) {
		nd_log(nd, "cannot make the control thread's eventfd: %s", strerror(errno));
		return 1;
	}
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (open_devices(nd))
		goto out;
	limits(nd);
	nd_fd_setup(nd);
	if (nd_registry_init(nd) || nd_dataplane_start(nd))
		goto out;
	lfd = nd_control_listen(nd);
	if (lfd < 0)
		goto out;
	getsockname(lfd, (struct sockaddr *)&ss, &sl);
	nd->cfg.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						       : ((struct sockaddr_in *)&ss)->sin_port);
	if (nd->cfg.port_file[0]) {
		FILE *f = fopen(nd->cfg.port_file, "w");

		if (!f || fprintf(f, "%u\n", nd->cfg.port) < 0 || fclose(f)) {
			nd_log(nd, "cannot write %s", nd->cfg.port_file);
			goto out;
		}
	}
	nd_log(nd, "listening on %s:%u with %u device(s)%s%s", nd->cfg.listen_host, nd->cfg.port,
	       nd->n_dev, nd->cfg.busy_poll ? ", busy-polling" : "",
	       nd->cfg.nop_kernel ? ", NOP kernel (benchmark mode)" : "");
	if (nd_registry_start(nd))
		goto out;
	ret = nd_control_run(nd, lfd) ? 1 : 0;
	nd_log(nd, "shutting down");
out:
	nd_registry_stop(nd);
	if (lfd >= 0)
		close(lfd);
	nd_dataplane_stop(nd);
	nd_registry_free(nd);
	nd_jobs_fini(nd);
	for (uint32_t d = 0; d < nd->n_dev; d++)
		nelssa_pnm_close(nd->dev[d].pnm);
	return ret;
}
