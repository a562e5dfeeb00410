// SPDX-License-Identifier: MIT
/*
 * nelssactl: list, inspect, self-test and benchmark NELSSA PNM devices, and
 * show where they sit in the CXL hierarchy.
 * Human output by default, --json for machines.  See
 * Documentation/tools/nelssactl.rst (the man page source).
 */
#include <stdio.h>
#include <string.h>

#include "nelssactl.h"

#define NELSSA_VERSION "0.1.0"

static void usage(FILE *f, const char *prog)
{
	fprintf(f,
		"usage: %s [--json] COMMAND [ARGS]\n"
		"\n"
		"Commands:\n"
		"  list                        devices on this machine and the embedded sim backend\n"
		"  info DEV                    ABI, firmware, memory, cores and limits of DEV\n"
		"  selftest DEV [--mask M]     run the firmware's built-in checks on DEV\n"
		"  bench DEV bw|attn|latency   benchmarks; see '%s bench --help'\n"
		"  stats [HOST[:PORT]]         a running nelssad's counters (default 127.0.0.1:18515)\n"
		"  calibrate [OPTIONS]         measure PNM bandwidth and T_comm, print T_input for N=1..8\n"
		"  topology [DEV]              CXL bus, host bridge, root port, endpoint, decoders and\n"
		"                              dax device of a card or CXL memdev (libcxl)\n"
		"  cluster [--etcd URL]        the NELSSA nodes a cluster's etcd registry lists\n"
		"\n"
		"DEV is /dev/nelssa_pnmN (kernel driver) or sim:N[,mem=SIZE,cores=N,isa=NAME]\n"
		"(a device emulated in this process).\n"
		"\n"
		"Options:\n"
		"  --json       machine-readable output (also accepted after the command)\n"
		"  -h, --help   this text; '%s COMMAND --help' for a command\n"
		"  --version    print the version\n"
		"\n"
		"Exit status: 0 success, 1 the operation failed, 2 usage error, 3 device error.\n",
		prog, prog, prog);
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(struct ctl *, int, char **);
	} cmds[] = {
		{ "list", cmd_list },
		{ "info", cmd_info },
		{ "selftest", cmd_selftest },
		{ "bench", cmd_bench },
		{ "stats", cmd_stats },
		{ "calibrate", cmd_calibrate },
		{ "topology", cmd_topology },
		{ "cluster", cmd_cluster },
	};
	struct ctl ctl = { .prog = "nelssactl" };
	int i = 1;

	for (; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--json")) {
			ctl.json = true;
		} else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
			usage(stdout, ctl.prog);
			return EXIT_OK;
		} else if (!strcmp(argv[i], "--version")) {
			printf("nelssactl %s (uapi ABI %d)\n", NELSSA_VERSION, NPNM_ABI_VERSION);
			return EXIT_OK;
		} else {
			fprintf(stderr, "%s: unknown option '%s'\n", ctl.prog, argv[i]);
			usage(stderr, ctl.prog);
			return EXIT_USAGE;
		}
	}
	if (i == argc) {
		usage(stderr, ctl.prog);
		return EXIT_USAGE;
	}
	if (!strcmp(argv[i], "help")) {
		usage(stdout, ctl.prog);
		return EXIT_OK;
	}
	for (size_t c = 0; c < sizeof(cmds) / sizeof(cmds[0]); c++)
		if (!strcmp(argv[i], cmds[c].name))
			return cmds[c].fn(&ctl, argc - i, argv + i);
	fprintf(stderr, "%s: unknown command '%s'\n", ctl.prog, argv[i]);
	usage(stderr, ctl.prog);
	return EXIT_USAGE;
}
