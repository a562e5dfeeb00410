// SPDX-License-Identifier: MIT
/*
 * A NELSSA node's announcement in the registry (Documentation/cluster.rst,
 * "The node record"): its key, its JSON, and what a reader checks before
 * it places a request on what the record says.  A record from another
 * version, or one a person or a bug wrote, is refused whole, never half
 * believed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include <nelssa/registry.h>

bool nelssa_registry_name_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (!n || n > NELSSA_NAME_MAX || !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '_' || c == '-'))
			return false;
	}
	return true;
}

int nelssa_node_key(char *buf, size_t len, const char *cluster, const char *id)
{
	int n;

	if (!nelssa_registry_name_ok(cluster) || (id && *id && !nelssa_registry_name_ok(id)))
		return -EINVAL;
	n = snprintf(buf, len, "/nelssa/%s/nodes/%s", cluster, id ? id : "");
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

static void add_u64(struct json_object *o, const char *name, uint64_t v)
{
	/* json-c writes int64; every count here is far below 2^63. */
	json_object_object_add(o, name, json_object_new_int64((int64_t)v));
}

char *nelssa_node_to_json(const struct nelssa_node *n)
{
	struct json_object *o = json_object_new_object(), *held = json_object_new_array();
	char *s = NULL;

	if (!o || !held)
		goto out;
	json_object_object_add(o, "schema", json_object_new_string(NELSSA_NODE_SCHEMA));
	json_object_object_add(o, "id", json_object_new_string(n->id));
	json_object_object_add(o, "version", json_object_new_string(n->version));
	json_object_object_add(o, "control", json_object_new_string(n->control));
	add_u64(o, "data_port", n->data_port);
	add_u64(o, "devices", n->devices);
	add_u64(o, "kv_bytes_total", n->kv_bytes_total);
	add_u64(o, "kv_bytes_free", n->kv_bytes_free);
	add_u64(o, "tokens_held", n->tokens_held);
	add_u64(o, "max_sessions", n->max_sessions);
	add_u64(o, "sessions", n->sessions);
	add_u64(o, "requests", n->requests);
	add_u64(o, "steps_in_flight", n->steps_in_flight);
	add_u64(o, "kv_in_flight", n->kv_in_flight);
	add_u64(o, "step_us", n->step_us);
	add_u64(o, "steps", n->steps);
	add_u64(o, "updated_ms", n->updated_ms);
	for (uint32_t i = 0; i < n->n_held; i++) {
		struct json_object *h = json_object_new_object();
		char id[24];

		if (!h)
			goto out;
		add_u64(h, "session", n->held[i].session);
		/* Request ids are the client's, any 64 bits: a decimal string. */
		snprintf(id, sizeof(id), "%" PRIu64, n->held[i].request);
		json_object_object_add(h, "request", json_object_new_string(id));
		add_u64(h, "tokens", n->held[i].tokens);
		json_object_array_add(held, h);
	}
	json_object_object_add(o, "held", held);
	held = NULL;
	add_u64(o, "held_more", n->held_more);
	s = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
out:
	json_object_put(held);
	json_object_put(o);
	return s;
}

struct reader {
	struct json_object *o;
	char *why;
	size_t why_len;
	int bad;
};

static struct json_object *field(struct reader *r, struct json_object *o, const char *name,
				 enum json_type t)
{
	struct json_object *v;

	if (r->bad)
		return NULL;
	if (!json_object_object_get_ex(o, name, &v)) {
		snprintf(r->why, r->why_len, "no '%s'", name);
		r->bad = 1;
		return NULL;
	}
	if (!json_object_is_type(v, t)) {
		snprintf(r->why, r->why_len, "'%s' is not %s", name,
			 t == json_type_int ? "an integer" : t == json_type_string ? "a string" :
			 "an array");
		r->bad = 1;
		return NULL;
	}
	return v;
}

static uint64_t get_u(struct reader *r, struct json_object *o, const char *name, uint64_t max)
{
	struct json_object *v = field(r, o, name, json_type_int);
	int64_t x;

	if (!v)
		return 0;
	errno = 0;
	x = json_object_get_int64(v);
	if (x < 0 || (uint64_t)x > max || errno) {
		snprintf(r->why, r->why_len, "'%s' is out of range", name);
		r->bad = 1;
		return 0;
	}
	return (uint64_t)x;
}

static void get_s(struct reader *r, struct json_object *o, const char *name, char *dst, size_t len)
{
	struct json_object *v = field(r, o, name, json_type_string);
	const char *s;

	if (!v)
		return;
	s = json_object_get_string(v);
	if (!*s || strlen(s) >= len || (size_t)json_object_get_string_len(v) != strlen(s)) {
		snprintf(r->why, r->why_len, "'%s' is empty or too long", name);
		r->bad = 1;
		return;
	}
	memcpy(dst, s, strlen(s) + 1);
}

static int read_held(struct reader *r, struct nelssa_node *n)
{
	struct json_object *arr = field(r, r->o, "held", json_type_array);
	size_t cnt;

	if (!arr)
		return -EINVAL;
	cnt = json_object_array_length(arr);
	if (cnt > NELSSA_NODE_MAX_HELD || cnt > n->requests) {
		snprintf(r->why, r->why_len, "'held' lists %zu requests (the most: %u, and 'requests')",
			 cnt, NELSSA_NODE_MAX_HELD);
		return -EINVAL;
	}
	n->held = calloc(cnt ? cnt : 1, sizeof(*n->held));
	if (!n->held) {
		snprintf(r->why, r->why_len, "out of memory");
		return -ENOMEM;
	}
	for (size_t i = 0; i < cnt; i++) {
		struct json_object *h = json_object_array_get_idx(arr, i);
		char id[24], *end;

		if (!json_object_is_type(h, json_type_object)) {
			snprintf(r->why, r->why_len, "'held' has an entry that is not an object");
			return -EINVAL;
		}
		n->held[i].session = get_u(r, h, "session", UINT64_MAX >> 1);
		n->held[i].tokens = (uint32_t)get_u(r, h, "tokens", UINT32_MAX);
		get_s(r, h, "request", id, sizeof(id));
		if (r->bad)
			return -EINVAL;
		errno = 0;
		n->held[i].request = strtoull(id, &end, 10);
		if (*end || errno || id[0] < '0' || id[0] > '9') {
			snprintf(r->why, r->why_len, "'held' has a request id that is not a number");
			return -EINVAL;
		}
		n->n_held++;
	}
	return 0;
}

int nelssa_node_from_json(const char *json, size_t len, const char *key_id,
			  struct nelssa_node *n, char *why, size_t why_len)
{
	struct reader r = { .why = why, .why_len = why_len };
	struct json_tokener *tk;
	char schema[32] = "";
	char *colon;
	int ret = -EINVAL;

	memset(n, 0, sizeof(*n));
	if (len > NELSSA_NODE_MAX_BYTES || len > INT32_MAX) {
		snprintf(why, why_len, "%zu bytes, more than a record may have", len);
		return -EINVAL;
	}
	tk = json_tokener_new();
	if (!tk) {
		snprintf(why, why_len, "out of memory");
		return -ENOMEM;
	}
	r.o = json_tokener_parse_ex(tk, json, (int)len);
	if (!r.o || json_tokener_get_parse_end(tk) != len ||
	    !json_object_is_type(r.o, json_type_object)) {
		snprintf(why, why_len, "not a JSON object");
		goto out;
	}
	get_s(&r, r.o, "schema", schema, sizeof(schema));
	if (!r.bad && strcmp(schema, NELSSA_NODE_SCHEMA)) {
		snprintf(why, why_len, "schema '%s', not '%s'", schema, NELSSA_NODE_SCHEMA);
		goto out;
	}
	get_s(&r, r.o, "id", n->id, sizeof(n->id));
	get_s(&r, r.o, "version", n->version, sizeof(n->version));
	get_s(&r, r.o, "control", n->control, sizeof(n->control));
	n->data_port = (uint16_t)get_u(&r, r.o, "data_port", UINT16_MAX);
	n->devices = (uint32_t)get_u(&r, r.o, "devices", 4096);
	n->kv_bytes_total = get_u(&r, r.o, "kv_bytes_total", UINT64_MAX >> 1);
	n->kv_bytes_free = get_u(&r, r.o, "kv_bytes_free", n->kv_bytes_total);
	n->tokens_held = get_u(&r, r.o, "tokens_held", UINT64_MAX >> 1);
	n->max_sessions = (uint32_t)get_u(&r, r.o, "max_sessions", UINT32_MAX);
	n->sessions = (uint32_t)get_u(&r, r.o, "sessions", UINT32_MAX);
	n->requests = (uint32_t)get_u(&r, r.o, "requests", UINT32_MAX);
	n->steps_in_flight = (uint32_t)get_u(&r, r.o, "steps_in_flight", UINT32_MAX);
	n->kv_in_flight = (uint32_t)get_u(&r, r.o, "kv_in_flight", UINT32_MAX);
	n->step_us = get_u(&r, r.o, "step_us", UINT64_MAX >> 1);
	n->steps = get_u(&r, r.o, "steps", UINT64_MAX >> 1);
	n->updated_ms = get_u(&r, r.o, "updated_ms", UINT64_MAX >> 1);
	n->held_more = (uint32_t)get_u(&r, r.o, "held_more", UINT32_MAX);
	if (r.bad)
		goto out;
	if (!nelssa_registry_name_ok(n->id)) {
		snprintf(why, why_len, "'id' is not a node name");
		goto out;
	}
	if (key_id && strcmp(key_id, n->id)) {
		snprintf(why, why_len, "'id' %s under the key of %s", n->id, key_id);
		goto out;
	}
	/* HOST:PORT, the port a number (a v6 host in brackets). */
	colon = strrchr(n->control, ':');
	if (!colon || colon == n->control || !colon[1] ||
	    strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5 ||
	    atoi(colon + 1) < 1 || atoi(colon + 1) > 65535 || !n->data_port) {
		snprintf(why, why_len, "'control' is not HOST:PORT, or no data port");
		goto out;
	}
	if (n->sessions > n->max_sessions) {
		snprintf(why, why_len, "%u sessions, more than its %u", n->sessions, n->max_sessions);
		goto out;
	}
	ret = read_held(&r, n);
	if (!ret && n->n_held + (uint64_t)n->held_more != n->requests) {
		snprintf(why, why_len, "'held' and 'held_more' do not add up to 'requests'");
		ret = -EINVAL;
	}
out:
	json_object_put(r.o);
	json_tokener_free(tk);
	if (ret)
		nelssa_node_release(n);
	return ret;
}

void nelssa_node_release(struct nelssa_node *n)
{
	free(n->held);
	memset(n, 0, sizeof(*n));
}
