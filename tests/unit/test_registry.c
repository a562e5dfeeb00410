// SPDX-License-Identifier: MIT
/*
 * The registry's node record (<nelssa/registry.h>): names and keys against
 * known answers, the JSON round trip field by field, and every way a
 * record a reader must not believe can be wrong -- garbage, another
 * schema, a missing or mistyped field, numbers out of range, counts that
 * do not add up, an id that is not its key's.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <pthread.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <json-c/json.h>

#include <nelssa/registry.h>

static void names_and_keys(void **state)
{
	static const char *const good[] = { "a", "node-1", "n.2_x", "A9",
		"123456789012345678901234567890123456789012345678901234567890123" };
	static const char *const bad[] = { "", ".", "..", "a/b", "a b", "ä", "x\n",
		"1234567890123456789012345678901234567890123456789012345678901234" };
	char key[64];

	(void)state;
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(nelssa_registry_name_ok(good[i]));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(nelssa_registry_name_ok(bad[i]));
	assert_false(nelssa_registry_name_ok(NULL));
	assert_int_equal(nelssa_node_key(key, sizeof(key), "prod", "n1"), 0);
	assert_string_equal(key, "/nelssa/prod/nodes/n1");
	assert_int_equal(nelssa_node_key(key, sizeof(key), "prod", NULL), 0);
	assert_string_equal(key, "/nelssa/prod/nodes/");
	assert_int_equal(nelssa_node_key(key, sizeof(key), "a/b", "n1"), -EINVAL);
	assert_int_equal(nelssa_node_key(key, sizeof(key), "prod", ".."), -EINVAL);
	assert_int_equal(nelssa_node_key(key, 10, "prod", "n1"), -ENAMETOOLONG);
}

static void fill(struct nelssa_node *n, struct nelssa_node_held *held, uint32_t n_held)
{
	memset(n, 0, sizeof(*n));
	snprintf(n->id, sizeof(n->id), "node-7");
	snprintf(n->version, sizeof(n->version), "0.1.0");
	snprintf(n->control, sizeof(n->control), "10.0.0.7:18515");
	n->data_port = 40000;
	n->devices = 4;
	n->kv_bytes_total = 64ull << 30;
	n->kv_bytes_free = 60ull << 30;
	n->tokens_held = 123456789012ull;
	n->max_sessions = 64;
	n->sessions = 3;
	n->requests = n_held + 5;
	n->steps_in_flight = 2;
	n->kv_in_flight = 1;
	n->step_us = 850;
	n->steps = 1ull << 40;
	n->updated_ms = 1796646321853ull;
	n->n_held = n_held;
	n->held_more = 5;
	n->held = held;
}

static void round_trip(void **state)
{
	struct nelssa_node_held held[3] = {
		{ 1, 0, 4096 }, { 1, UINT64_MAX, 1 }, { 9, 77, UINT32_MAX },
	};
	struct nelssa_node in, out;
	char why[160] = "", *json;

	(void)state;
	fill(&in, held, 3);
	json = nelssa_node_to_json(&in);
	assert_non_null(json);
	assert_int_equal(nelssa_node_from_json(json, strlen(json), "node-7", &out, why,
					       sizeof(why)), 0);
	assert_string_equal(out.id, in.id);
	assert_string_equal(out.version, in.version);
	assert_string_equal(out.control, in.control);
	assert_int_equal(out.data_port, in.data_port);
	assert_int_equal(out.devices, in.devices);
	assert_true(out.kv_bytes_total == in.kv_bytes_total);
	assert_true(out.kv_bytes_free == in.kv_bytes_free);
	assert_true(out.tokens_held == in.tokens_held);
	assert_int_equal(out.max_sessions, in.max_sessions);
	assert_int_equal(out.sessions, in.sessions);
	assert_int_equal(out.requests, in.requests);
	assert_int_equal(out.steps_in_flight, in.steps_in_flight);
	assert_int_equal(out.kv_in_flight, in.kv_in_flight);
	assert_true(out.step_us == in.step_us);
	assert_true(out.steps == in.steps);
	assert_true(out.updated_ms == in.updated_ms);
	assert_int_equal(out.n_held, 3);
	assert_int_equal(out.held_more, 5);
	for (int i = 0; i < 3; i++) {
		assert_true(out.held[i].session == held[i].session);
		assert_true(out.held[i].request == held[i].request);	/* all 64 bits */
		assert_int_equal(out.held[i].tokens, held[i].tokens);
	}
	nelssa_node_release(&out);
	/* Without a key to match, any valid id is taken. */
	assert_int_equal(nelssa_node_from_json(json, strlen(json), NULL, &out, why, sizeof(why)), 0);
	nelssa_node_release(&out);
	free(json);
}

/* @json's field @name set to @val (raw JSON) or, with @val NULL, removed. */
static char *edited(const char *json, const char *name, const char *val)
{
	struct json_object *o = json_tokener_parse(json);
	char *s;

	assert_non_null(o);
	if (val)
		json_object_object_add(o, name, json_tokener_parse(val));
	else
		json_object_object_del(o, name);
	s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
	json_object_put(o);
	return s;
}

static void expect_refused(const char *json, const char *key_id, const char *why_has)
{
	struct nelssa_node out;
	char why[160] = "";

	assert_int_equal(nelssa_node_from_json(json, strlen(json), key_id, &out, why, sizeof(why)),
			 -EINVAL);
	if (!strstr(why, why_has))
		fail_msg("'%s' refused as '%s', expected '%s'", json, why, why_has);
	assert_null(out.held);
	assert_int_equal(out.id[0], 0);
}

static void garbage_refused(void **state)
{
	static const char *const junk[] = {
		"", "not json", "[]", "42", "\"str\"", "{", "{\"schema\":\"nelssa.node/1\"", "null",
	};
	struct nelssa_node out;
	char why[160];

	(void)state;
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
		expect_refused(junk[i], NULL, "JSON object");
	/* A valid object with trailing text is not one record. */
	expect_refused("{} {}", NULL, "JSON object");
	/* Bigger than a record may be. */
	assert_int_equal(nelssa_node_from_json("{}", NELSSA_NODE_MAX_BYTES + 1, NULL, &out, why,
					       sizeof(why)), -EINVAL);
}

static void fields_checked(void **state)
{
	static const struct {
		const char *name, *val, *why;
	} cases[] = {
		{ "schema", "\"nelssa.node/2\"", "schema" },
		{ "schema", NULL, "no 'schema'" },
		{ "id", NULL, "no 'id'" },
		{ "id", "7", "'id' is not a string" },
		{ "id", "\"a/b\"", "not a node name" },
		{ "id", "\"\"", "empty" },
		{ "version", NULL, "no 'version'" },
		{ "control", "\"nohost\"", "HOST:PORT" },
		{ "control", "\"h:0\"", "HOST:PORT" },
		{ "control", "\"h:65536\"", "HOST:PORT" },
		{ "control", "\":80\"", "HOST:PORT" },
		{ "data_port", "0", "data port" },
		{ "data_port", "70000", "'data_port' is out of range" },
		{ "devices", "-1", "out of range" },
		{ "devices", "\"4\"", "not an integer" },
		{ "devices", "4.5", "not an integer" },
		{ "kv_bytes_free", "68719476737", "'kv_bytes_free' is out of range" },
		{ "sessions", "65", "more than its" },
		{ "requests", "9", "add up" },
		{ "held_more", NULL, "no 'held_more'" },
		{ "held", "{}", "not an array" },
		{ "held", "[1]", "not an object" },
		{ "held", "[{\"session\":1,\"request\":\"x\",\"tokens\":1}]", "not a number" },
		{ "held", "[{\"session\":1,\"request\":\"-1\",\"tokens\":1}]", "not a number" },
		{ "held", "[{\"session\":1,\"request\":5,\"tokens\":1}]", "not a string" },
		{ "held", "[{\"session\":1,\"request\":\"18446744073709551616\",\"tokens\":1}]",
		  "not a number" },
		{ "held", "[{\"session\":1,\"tokens\":1}]", "no 'request'" },
		{ "held", "[{\"session\":1,\"request\":\"1\",\"tokens\":4294967296}]",
		  "out of range" },
	};
	struct nelssa_node_held held[2] = { { 1, 2, 3 }, { 4, 5, 6 } };
	struct nelssa_node in;
	char *json;

	(void)state;
	fill(&in, held, 2);
	json = nelssa_node_to_json(&in);
	assert_non_null(json);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *bad = edited(json, cases[i].name, cases[i].val);

		expect_refused(bad, NULL, cases[i].why);
		free(bad);
	}
	/* A record under another node's key. */
	expect_refused(json, "node-8", "under the key of node-8");
	free(json);
}

static void held_bounds(void **state)
{
	struct nelssa_node_held *held = calloc(NELSSA_NODE_MAX_HELD + 1, sizeof(*held));
	struct nelssa_node in, out;
	char why[160], *json;

	(void)state;
	assert_non_null(held);
	fill(&in, held, NELSSA_NODE_MAX_HELD);
	in.requests = NELSSA_NODE_MAX_HELD + 5;
	json = nelssa_node_to_json(&in);
	assert_int_equal(nelssa_node_from_json(json, strlen(json), NULL, &out, why, sizeof(why)), 0);
	assert_int_equal(out.n_held, NELSSA_NODE_MAX_HELD);
	nelssa_node_release(&out);
	free(json);
	/* One more listed than a record may list: refused, not cut. */
	fill(&in, held, NELSSA_NODE_MAX_HELD + 1);
	in.requests = NELSSA_NODE_MAX_HELD + 6;
	json = nelssa_node_to_json(&in);
	expect_refused(json, NULL, "'held' lists");
	free(json);
	free(held);
}

static void open_refuses_bad_endpoints(void **state)
{
	static const char *const bad[] = { "", "127.0.0.1:2379", "ftp://h:1", "http://",
		"http://a b:1", "http://h:1,,http://g:2" };
	struct nelssa_etcd_opts o = { 0 };
	struct nelssa_etcd *e;
	char why[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.endpoints = bad[i];
		why[0] = 0;
		assert_int_equal(nelssa_etcd_open(&o, &e, why, sizeof(why)), -EINVAL);
		assert_null(e);
		assert_true(why[0] != 0);
	}
	o.endpoints = "http://127.0.0.1:1/,https://[::1]:2379";
	assert_int_equal(nelssa_etcd_open(&o, &e, why, sizeof(why)), 0);
	assert_string_equal(nelssa_etcd_endpoint(e), "http://127.0.0.1:1");
	nelssa_etcd_close(e);
}

/*
 * A fake etcd JSON gateway on loopback: one thread, one connection at a
 * time, each request answered by @answer(path, n-th call of that path) and
 * the connection closed -- or, with hang, never answered (a partitioned
 * member: the connection stands, nothing comes back).
 */
struct fake {
	int fd, hang;
	uint16_t port;
	pthread_t thread;
	int auths, keepalives, watches;
	int held[8], n_held;		/* connections left hanging */
	const char *(*answer)(struct fake *f, const char *path);
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;

	for (;;) {
		char req[8192], path[256] = "", reply[1024];
		const char *body;
		size_t have = 0;
		int c = accept(f->fd, NULL, NULL);

		if (c < 0)
			return NULL;
		if (f->hang) {
			if (f->n_held < 8)
				f->held[f->n_held++] = c;
			continue;
		}
		/* The headers and a small body: enough to know the path. */
		while (have < sizeof(req) - 1) {
			ssize_t n = read(c, req + have, sizeof(req) - 1 - have);

			if (n <= 0)
				break;
			have += (size_t)n;
			req[have] = 0;
			if (strstr(req, "\r\n\r\n") && strchr(strstr(req, "\r\n\r\n"), '}'))
				break;
		}
		sscanf(req, "POST %255s", path);
		body = f->answer(f, path);
		snprintf(reply, sizeof(reply), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body), body);
		if (write(c, reply, strlen(reply)) < 0)
			perror("fake etcd");
		close(c);
	}
}

static void fake_start(struct fake *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	f->fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(f->fd >= 0);
	assert_int_equal(bind(f->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(f->fd, 8), 0);
	getsockname(f->fd, (struct sockaddr *)&a, &len);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->fd, SHUT_RDWR);
	close(f->fd);
	pthread_join(f->thread, NULL);
	for (int i = 0; i < f->n_held; i++)
		close(f->held[i]);
}

static const char *grant_ok(struct fake *f, const char *path)
{
	(void)f;
	return strcmp(path, "/v3/lease/grant") ? "{}" : "{\"ID\":\"7\",\"TTL\":\"5\"}";
}

static void a_hung_member_does_not_take_the_whole_deadline(void **state)
{
	struct fake hung = { .hang = 1 }, good = { .answer = grant_ok };
	struct nelssa_etcd_opts o = { .timeout_ms = 6000 };
	struct nelssa_etcd *e;
	char urls[128], why[256];
	int64_t id = 0;
	uint32_t ttl = 0;

	(void)state;
	fake_start(&hung);
	fake_start(&good);
	snprintf(urls, sizeof(urls), "http://127.0.0.1:%u,http://127.0.0.1:%u", hung.port,
		 good.port);
	o.endpoints = urls;
	assert_int_equal(nelssa_etcd_open(&o, &e, why, sizeof(why)), 0);
	/* The first member gets half the deadline, the second answers. */
	assert_int_equal(nelssa_etcd_lease_grant(e, 5, &id, &ttl), 0);
	assert_true(id == 7 && ttl == 5);
	/* ... and the next call starts at the member that answered. */
	assert_int_equal(nelssa_etcd_lease_grant(e, 5, &id, &ttl), 0);
	nelssa_etcd_close(e);
	fake_stop(&hung);
	fake_stop(&good);
	assert_int_equal(hung.n_held, 1);	/* read once its thread is joined */
}

/* Tokens: the first keep-alive's is stale (a nested streaming error), the watch's cancelled. */
static const char *auth_script(struct fake *f, const char *path)
{
	if (!strcmp(path, "/v3/auth/authenticate"))
		return ++f->auths == 1 ? "{\"token\":\"old\"}" : "{\"token\":\"new\"}";
	if (!strcmp(path, "/v3/lease/keepalive"))
		return ++f->keepalives == 1 ?
		       "{\"error\":{\"grpc_code\":16,\"http_code\":401,"
		       "\"message\":\"etcdserver: invalid auth token\"}}" :
		       "{\"result\":{\"ID\":\"7\",\"TTL\":\"9\"}}";
	if (!strcmp(path, "/v3/watch"))
		return ++f->watches == 1 ?
		       "{\"result\":{\"created\":true,\"canceled\":true,\"cancel_reason\":"
		       "\"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token\"}}\n" :
		       "{\"result\":{\"header\":{\"revision\":\"3\"},\"created\":true}}\n";
	return "{}";
}

static int stop_at_once(void *arg, int64_t revision, size_t events)
{
	*(int64_t *)arg = revision + (int64_t)events;
	return 1;
}

static void stale_tokens_are_renewed(void **state)
{
	struct fake f = { .answer = auth_script };
	struct nelssa_etcd_opts o = { .user = "root", .password = "pw", .timeout_ms = 2000 };
	struct nelssa_etcd *e;
	char url[64], why[256];
	static const int never = 0;
	int64_t rev = 0;
	uint32_t ttl = 0;

	(void)state;
	fake_start(&f);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u", f.port);
	o.endpoints = url;
	assert_int_equal(nelssa_etcd_open(&o, &e, why, sizeof(why)), 0);
	/* Authenticates, is told the token is stale, authenticates again, renews. */
	assert_int_equal(nelssa_etcd_lease_keepalive(e, 7, &ttl), 0);
	assert_int_equal(ttl, 9);
	assert_int_equal(f.auths, 2);
	assert_int_equal(f.keepalives, 2);
	/* The watch is cancelled for its token: -EACCES, and the next one authenticates anew. */
	assert_int_equal(nelssa_etcd_watch(e, "/nelssa/t/nodes/", stop_at_once, &rev, &never),
			 -EACCES);
	assert_non_null(strstr(nelssa_etcd_error(e), "invalid auth token"));
	assert_int_equal(nelssa_etcd_watch(e, "/nelssa/t/nodes/", stop_at_once, &rev, &never), 0);
	assert_int_equal(f.auths, 3);
	assert_true(rev == 3);
	nelssa_etcd_close(e);
	fake_stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_and_keys),
		cmocka_unit_test(round_trip),
		cmocka_unit_test(garbage_refused),
		cmocka_unit_test(fields_checked),
		cmocka_unit_test(held_bounds),
		cmocka_unit_test(open_refuses_bad_endpoints),
		cmocka_unit_test(a_hung_member_does_not_take_the_whole_deadline),
		cmocka_unit_test(stale_tokens_are_renewed),
	};

	return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
