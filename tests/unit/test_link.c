// SPDX-License-Identifier: MIT
/*
 * How the data path's UCX module (runtime/ucx/link.c) judges an
 * endpoint's transports: the name rule --require-rdma applies to lanes
 * however they were found, and the reader of ucp_ep_print_info()'s text,
 * fed lines UCX 1.13 printed.  Then both questions asked of a live
 * endpoint between two workers here, which runs on TCP or shared memory:
 * never RDMA.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <nelssa/link.h>

#include "testutil.h"

/*
 * Soft-RoCE (rdma_rxe) in the QEMU rig, the client's endpoint to nelssad:
 * lanes as UCX 1.13.1 logged them there (wireup.c; its endpoint
 * configuration "rma(rc_verbs/rxe0:1) am(rc_verbs/rxe0:1)
 * ka(ud_verbs/rxe0:1)"), laid out as ucp_ep_print_info() prints them:
 * the RMA lane has no use word of its own, only its "put[1]" line.
 */
static const char rxe[] =
	"#\n"
	"# UCP endpoint \n"
	"#\n"
	"#               peer: <no debug data>\n"
	"#                 lane[0]: cm rdmacm\n"
	"#                 lane[1]:  0:rc_verbs/rxe0:1.0 md[0]       -> md[0]/ib/sysdev[255] rma_bw#0 am am_bw#0 wireup\n"
	"#                 lane[2]:  1:ud_verbs/rxe0:1.0 md[0]       -> md[0]/ib/sysdev[255] keepalive\n"
	"#\n"
	"#                 am_send: 0..<egr/short>..124..<egr/bcopy>..8192..<rndv>..(inf)\n"
	"#\n"
	"#                  put[1]: 0..<short>..124..<bcopy>..8192..<zcopy>..(inf)\n"
	"#                  get[1]: 0..<bcopy>..8192..<zcopy>..(inf)\n"
	"#\n"
	"#                  rma_bw: mds [0] rndv_rkey_size 18\n";

/* The same endpoint before its RMA lane was chosen: an rc data lane, a ud wire-up lane. */
static const char rxe_am_only[] =
	"#                 lane[0]:  2:rc_verbs/rxe0:1.0 md[1]  -> md[1]/ib/sysdev[255] rma_bw#0 am am_bw#0\n"
	"#                 lane[1]:  7:ud_verbs/rxe0:1.0 md[1]  -> md[1]/ib/sysdev[255] wireup\n"
	"#\n";

/* An RMA lane on dc beside an rc one, its "put" line before its lane's. */
static const char rc_rma[] =
	"#                  put[1]: 0..<short>..220..<bcopy>..8192..<zcopy>..(inf)\n"
	"#                 lane[0]:  2:rc_mlx5/mlx5_0:1.0 md[1]  -> md[1]/ib/sysdev[255] amo#0 am am_bw#0\n"
	"#                 lane[1]:  3:dc_mlx5/mlx5_0:1.0 md[1]  -> md[1]/ib/sysdev[255] rma_bw#0 wireup\n";

/*
 * UCX_TLS=shm,tcp, the client's endpoint to nelssad (UCX 1.13.1, this
 * machine): RMA lanes on sysv and posix, which reach only memory their
 * md allocated -- puts into the daemon's registered memory are emulated.
 */
static const char shm_cm[] =
	"# UCP endpoint \n"
	"#               peer: <no debug data>\n"
	"#                 lane[0]: cm rdmacm\n"
	"#                 lane[1]:  2:sysv/memory.0 md[1]           -> md[1]/sysv/sysdev[255] am am_bw#0\n"
	"#                 lane[2]:  3:posix/memory.0 md[2]          -> md[2]/posix/sysdev[255]\n"
	"#                 lane[3]:  4:cma/memory.0 md[3]            -> md[3]/cma/sysdev[255] rma_bw#0\n"
	"#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n"
	"#                  put[1]: 0..<short>..4294967296..<bcopy>..(inf)\n"
	"#                  get[1]: 0..<bcopy>..(inf)\n"
	"#                  put[2]: 0..<short>..4294967296..<bcopy>..(inf)\n"
	"#                  get[2]: 0..<bcopy>..(inf)\n"
	"#                  rma_bw: mds rndv_rkey_size 9\n";

/* UCX_TLS=tcp, two workers of one process (UCX 1.13.1). */
static const char tcp[] =
	"#\n"
	"# UCP endpoint \n"
	"#\n"
	"#               peer: <no debug data>\n"
	"#                 lane[0]:  0:tcp/lo.0 md[0]                -> md[0]/tcp/sysdev[255] rma_bw#0 am am_bw#0\n"
	"#                 lane[1]:  1:tcp/eth0.0 md[0]              -> md[0]/tcp/sysdev[255] rma_bw#1 wireup\n"
	"#\n"
	"#                 am_send: 0..<egr/short>..8185..<egr/zcopy>..8192..<rndv>..(inf)\n"
	"#\n"
	"#                  rma_bw: mds [0] rndv_rkey_size 10\n"
	"#\n";

/* UCX_TLS=posix,cma: puts emulated ("put[0]" is not a lane of the RMA API). */
static const char posix_cma[] =
	"#                 lane[0]:  0:posix/memory.0 md[0]          -> md[0]/posix/sysdev[255] am am_bw#0\n"
	"#                 lane[1]:  1:cma/memory.0 md[1]            -> md[1]/cma/sysdev[255] rma_bw#0\n"
	"#\n"
	"#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n"
	"#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)\n"
	"#                  get[0]: 0..<bcopy>..(inf)\n"
	"#\n"
	"#                  rma_bw: mds rndv_rkey_size 9\n";

/* UCX_TLS=all, an endpoint to its own worker: self first, a posix lane unused. */
static const char self_all[] =
	"#                 lane[0]:  0:self/memory0.0 md[0]          -> md[0]/self/sysdev[255] am am_bw#0\n"
	"#                 lane[1]:  3:sysv/memory.0 md[2]           -> md[2]/sysv/sysdev[255]\n"
	"#                 lane[2]:  4:posix/memory.0 md[3]          -> md[3]/posix/sysdev[255]\n"
	"#                 lane[3]:  5:cma/memory.0 md[4]            -> md[4]/cma/sysdev[255] rma_bw#0\n"
	"#\n"
	"#                  put[0]: 0..<short>..4294967296..<bcopy>..(inf)\n";

static void tl_names(void **state)
{
	static const char *const rdma[] = { "rc_verbs", "rc_mlx5", "dc_mlx5", "ud_verbs", "ud_mlx5" };
	static const char *const other[] = { "tcp", "posix", "sysv", "cma", "self", "xpmem", "knem",
					     "", "rc", "ud", "rdmacm", "ib", "tcp_rc_" };

	(void)state;
	for (size_t i = 0; i < sizeof(rdma) / sizeof(rdma[0]); i++)
		assert_true(nelssa_link_tl_is_rdma(rdma[i]));
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
		assert_false(nelssa_link_tl_is_rdma(other[i]));
}

static void tl_lists(void **state)
{
	const char *const rdma[] = { "rc_verbs", "ud_verbs", "dc_mlx5" };
	const char *const mixed[] = { "rc_verbs", "tcp", "posix" };
	const char *const shm[] = { "posix", "cma" };
	char bad[8];

	(void)state;
	assert_true(nelssa_link_tls_rdma_only(rdma, 3, bad, sizeof(bad)));
	assert_false(nelssa_link_tls_rdma_only(mixed, 3, bad, sizeof(bad)));
	assert_string_equal(bad, "tcp");
	assert_false(nelssa_link_tls_rdma_only(shm, 2, bad, sizeof(bad)));
	assert_string_equal(bad, "posix");
	/* No lane at all is no RDMA lane either. */
	assert_false(nelssa_link_tls_rdma_only(rdma, 0, bad, sizeof(bad)));
	assert_string_equal(bad, "unknown");
	/* A long name is cut, not overrun; no room at all is allowed. */
	assert_false(nelssa_link_tls_rdma_only((const char *const[]){ "a_very_long_tl" }, 1, bad, 4));
	assert_string_equal(bad, "a_v");
	assert_true(nelssa_link_tls_rdma_only(rdma, 1, NULL, 0));
	assert_false(nelssa_link_tls_rdma_only(mixed, 2, NULL, 0));

	assert_true(nelssa_link_has_rdma("tcp rc_verbs posix"));
	assert_true(nelssa_link_has_rdma("ud_mlx5"));
	assert_false(nelssa_link_has_rdma("tcp posix sysv cma"));
	assert_false(nelssa_link_has_rdma(""));
	assert_true(nelssa_link_has_shm("tcp sysv"));
	assert_false(nelssa_link_has_shm("tcp cma"));
	assert_true(nelssa_link_can_connect("posix dc_mlx5"));
	assert_true(nelssa_link_can_connect("tcp"));
	assert_false(nelssa_link_can_connect("posix sysv cma"));
}

/* Whether what @text describes runs on RDMA alone, the first other transport in @bad. */
static int text_rdma_only(const char *text, unsigned int want_seen, struct nelssa_link_lanes *l,
			  char *bad, size_t len)
{
	const char *tls[NELSSA_LINK_MAX_LANES];

	assert_int_equal(want_seen, nelssa_link_lanes_parse(text, l));
	for (unsigned int i = 0; i < l->n; i++)
		tls[i] = l->tl[i];
	return nelssa_link_tls_rdma_only(tls, l->n, bad, len);
}

static void parse_samples(void **state)
{
	struct nelssa_link_lanes l;
	char bad[32];

	(void)state;
	/* The ud lane keeps the connection alive only: not a data lane; cm has no transport. */
	assert_true(text_rdma_only(rxe, 2, &l, bad, sizeof(bad)));
	assert_int_equal(1, l.n);
	assert_string_equal(l.tl[0], "rc_verbs");
	assert_true(l.native_rma);

	assert_true(text_rdma_only(rxe_am_only, 2, &l, bad, sizeof(bad)));
	assert_int_equal(1, l.n);
	assert_false(l.native_rma);	/* rma_bw serves rendezvous, not ucp_put_nbx() */

	assert_true(text_rdma_only(rc_rma, 2, &l, bad, sizeof(bad)));
	assert_int_equal(2, l.n);	/* rma_bw on the wire-up lane: rendezvous data */
	assert_string_equal(l.tl[1], "dc_mlx5");
	assert_true(l.native_rma);

	assert_false(text_rdma_only(shm_cm, 3, &l, bad, sizeof(bad)));
	assert_string_equal(bad, "sysv");
	assert_int_equal(2, l.n);	/* posix: an RMA lane only, no use word */
	assert_string_equal(l.tl[1], "cma");
	assert_false(l.native_rma);

	assert_false(text_rdma_only(tcp, 2, &l, bad, sizeof(bad)));
	assert_string_equal(bad, "tcp");
	assert_int_equal(2, l.n);
	assert_false(l.native_rma);

	assert_false(text_rdma_only(posix_cma, 2, &l, bad, sizeof(bad)));
	assert_string_equal(bad, "posix");
	assert_int_equal(2, l.n);
	assert_string_equal(l.tl[1], "cma");
	assert_false(l.native_rma);

	assert_false(text_rdma_only(self_all, 4, &l, bad, sizeof(bad)));
	assert_string_equal(bad, "self");
	assert_int_equal(2, l.n);	/* the unused sysv and posix lanes carry nothing */
	assert_string_equal(l.tl[1], "cma");
	assert_false(l.native_rma);
}

static void parse_hostile(void **state)
{
	static const char *const none[] = {
		"", "#\n# UCP endpoint\n#\n", "lane[", "lane[0]", "lane[0]:  2:rc_verbs",
		"lane[0]:  2:rc_verbs/rxe0 md[1]",			/* no "->" */
		"lane[0]  2:rc_verbs/rxe0 -> md[1] am",			/* no "]:" */
		"lane[0]:  2:/rxe0 -> md[1] am",			/* no name */
		"lane[0]:  2:rc_verbs -> md[1]/ib am\n",		/* no '/' before "->" */
		"put[0]: 0..<short>..4294967296..<bcopy>..(inf)\nrma_bw: mds rma#0\n",
		"lane[1000]:  0:rc_verbs/d md[0] -> md[0]/ib am\n",	/* no such lane index */
	};
	struct nelssa_link_lanes l;
	char text[4096] = "", bad[32];
	size_t used = 0;

	(void)state;
	for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
		assert_false(text_rdma_only(none[i], 0, &l, bad, sizeof(bad)));
		assert_int_equal(0, l.n);
		assert_false(l.native_rma);
		assert_string_equal(bad, "unknown");
	}
	assert_int_equal(0, nelssa_link_lanes_parse(NULL, &l));
	/* The uses end at the line's end: "am" on the next line is not this lane's. */
	assert_int_equal(1, nelssa_link_lanes_parse("lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp wireup\n"
						    "rma_bw#0 am\n", &l));
	assert_int_equal(0, l.n);
	assert_false(l.native_rma);
	/* A "put" line names its lane by index: another lane's RDMA does not count. */
	assert_int_equal(2, nelssa_link_lanes_parse("lane[0]:  0:tcp/lo.0 md[0] -> md[0]/tcp am\n"
						    "lane[1]:  1:rc_verbs/d md[0] -> md[0]/ib am_bw#0\n"
						    " put[0]: 0..<bcopy>..(inf)\n put[2]: 0..(inf)\n",
						    &l));
	assert_false(l.native_rma);
	/* A lane past the table is counted; its "put" line is not judged. */
	assert_int_equal(1, nelssa_link_lanes_parse("put[99]: 0..(inf)\n"
						    "lane[99]:  0:rc_verbs/d md[0] -> md[0]/ib am\n", &l));
	assert_int_equal(1, l.n);
	assert_false(l.native_rma);
	/* "put" must open its line, as UCX prints it. */
	assert_int_equal(1, nelssa_link_lanes_parse("lane[0]:  0:rc_verbs/d md[0] -> md[0]/ib am "
						    "put[0]: 0..(inf)\n", &l));
	assert_false(l.native_rma);
	/* No trailing newline; a name longer than the room for it is cut. */
	assert_int_equal(1, nelssa_link_lanes_parse("put[3]: 0..(inf)\nlane[3]:  9:"
						    "an_rdma_transport_of_the_future/dev0 md[0] -> md[0]/x am",
						    &l));
	assert_int_equal(1, l.n);
	assert_false(l.native_rma);	/* not a transport the name rule knows as RDMA */
	assert_int_equal(sizeof(l.tl[0]) - 1, strlen(l.tl[0]));
	assert_memory_equal(l.tl[0], "an_rdma_transport_of_the_future", sizeof(l.tl[0]) - 1);
	/* More lanes than the table holds: counted, the first ones kept. */
	for (int i = 0; i < NELSSA_LINK_MAX_LANES + 4; i++)
		used += (size_t)snprintf(text + used, sizeof(text) - used,
					 "lane[%d]:  %d:rc_verbs/d md[0] -> md[0]/ib am\n", i, i);
	assert_true(text_rdma_only(text, NELSSA_LINK_MAX_LANES + 4, &l, bad, sizeof(bad)));
	assert_int_equal(NELSSA_LINK_MAX_LANES, l.n);
}

/* Both questions of a live endpoint between two workers of this process. */
static void live_endpoint(void **state)
{
	ucp_context_h ctx;
	ucp_worker_h a, b;
	ucp_address_t *addr;
	size_t alen;
	ucp_ep_h ep;
	char bad[32] = "";

	(void)state;
	if (nelssa_link_context_features(UCP_FEATURE_AM | UCP_FEATURE_RMA, &ctx) != UCS_OK)
		skip();
	assert_int_equal(UCS_OK, nelssa_link_worker(ctx, 0, &a));
	assert_int_equal(UCS_OK, nelssa_link_worker(ctx, 0, &b));
	assert_int_equal(UCS_OK, ucp_worker_get_address(b, &addr, &alen));
	assert_int_equal(UCS_OK, nelssa_link_connect_worker(a, addr, &ep));
	ucp_worker_release_address(b, addr);
	for (int i = 0; i < 100; i++) {
		ucp_worker_progress(a);
		ucp_worker_progress(b);
	}
	assert_false(nelssa_link_ep_rdma_only(ep, bad, sizeof(bad)));
	assert_true(bad[0]);
	assert_false(nelssa_link_tl_is_rdma(bad));
	/* No RDMA here (this test's premise, as in the QEMU-less tiers). */
	assert_false(nelssa_link_ep_native_rma(ep));
	{
		ucp_request_param_t cp = { 0 };
		ucs_status_ptr_t sp = ucp_ep_close_nbx(ep, &cp);

		while (UCS_PTR_IS_PTR(sp) && ucp_request_check_status(sp) == UCS_INPROGRESS) {
			ucp_worker_progress(a);
			ucp_worker_progress(b);
		}
		if (UCS_PTR_IS_PTR(sp))
			ucp_request_free(sp);
	}
	ucp_worker_destroy(a);
	ucp_worker_destroy(b);
	ucp_cleanup(ctx);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(tl_names),
		cmocka_unit_test(tl_lists),
		cmocka_unit_test(parse_samples),
		cmocka_unit_test(parse_hostile),
		cmocka_unit_test(live_endpoint),
	};

	return cmocka_run_group_tests_name("link", tests, NULL, NULL);
}
