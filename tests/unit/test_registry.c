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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(names_and_keys),
		cmocka_unit_test(round_trip),
		cmocka_unit_test(garbage_refused),
		cmocka_unit_test(fields_checked),
		cmocka_unit_test(held_bounds),
		cmocka_unit_test(open_refuses_bad_endpoints),
	};

	return cmocka_run_group_tests_name("registry", tests, NULL, NULL);
}
