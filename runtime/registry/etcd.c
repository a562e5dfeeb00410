// SPDX-License-Identifier: MIT
/*
 * A client of etcd's v3 API through its JSON gateway: POST /v3/<service>/<call>
 * with the request message as JSON (bytes fields base64, 64-bit integers as
 * decimal strings) and the response message back the same way; an error is
 * {"error", "code" (a gRPC status), "message"}.  libcurl carries it, json-c
 * reads and writes it.  The endpoints are tried in order from the one that
 * answered last, within one deadline per call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include <nelssa/registry.h>
#include <nelssa/util.h>

#define ETCD_MAX_ENDPOINTS 16
#define ETCD_MAX_ANSWER (64u << 20)	/* bytes of one answer, at most */

/* gRPC status codes etcd answers with. */
enum { GRPC_NOT_FOUND = 5, GRPC_PERMISSION_DENIED = 7, GRPC_UNAUTHENTICATED = 16 };

struct nelssa_etcd {
	CURL *curl;
	char *url[ETCD_MAX_ENDPOINTS];
	unsigned int n_url, cur;
	char *user, *password, *cacert, *cert, *key;
	char token[512];		/* from /v3/auth/authenticate; "" before */
	uint32_t timeout_ms;
	char err[256];
	/* The answer being read. */
	char *buf;
	size_t len, cap;
	/* The watch's sockets (curl may try two at once), for nelssa_etcd_watch_abort(). */
	pthread_mutex_t sock_lock;
	int sock[4];			/* -1: none */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ok;

static void curl_setup(void)
{
	curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
}

static int fail(struct nelssa_etcd *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct nelssa_etcd *e, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(e->err, sizeof(e->err), fmt, ap);
	va_end(ap);
	return code;
}

const char *nelssa_etcd_error(const struct nelssa_etcd *e)
{
	return e->err;
}

const char *nelssa_etcd_endpoint(const struct nelssa_etcd *e)
{
	return e->url[e->cur];
}

static char *dup_or_null(const char *s, int *bad)
{
	char *d;

	if (!s)
		return NULL;
	d = strdup(s);
	if (!d)
		*bad = 1;
	return d;
}

int nelssa_etcd_open(const struct nelssa_etcd_opts *o, struct nelssa_etcd **out, char *why,
		     size_t why_len)
{
	struct nelssa_etcd *e;
	const char *p;
	int bad = 0;

	*out = NULL;
	if (!o->endpoints || !*o->endpoints) {
		snprintf(why, why_len, "no etcd endpoint given");
		return -EINVAL;
	}
	pthread_once(&curl_once, curl_setup);
	if (!curl_ok) {
		snprintf(why, why_len, "libcurl could not be initialised");
		return -ENOMEM;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	pthread_mutex_init(&e->sock_lock, NULL);
	for (int i = 0; i < 4; i++)
		e->sock[i] = -1;
	e->timeout_ms = o->timeout_ms ? o->timeout_ms : 2000;
	for (p = o->endpoints; *p;) {
		size_t n = strcspn(p, ",");

		while (n > 1 && p[n - 1] == '/')	/* base URL: no trailing slash */
			n--;
		if (e->n_url == ETCD_MAX_ENDPOINTS ||
		    !((n > 7 && !strncmp(p, "http://", 7)) || (n > 8 && !strncmp(p, "https://", 8))) ||
		    memchr(p, ' ', n)) {
			snprintf(why, why_len, e->n_url == ETCD_MAX_ENDPOINTS ?
				 "more than %d etcd endpoints" :
				 "'%.*s' is not an etcd endpoint (http://HOST:PORT or https://HOST:PORT)",
				 e->n_url == ETCD_MAX_ENDPOINTS ? ETCD_MAX_ENDPOINTS : (int)n,
				 e->n_url == ETCD_MAX_ENDPOINTS ? "" : p);
			nelssa_etcd_close(e);
			return -EINVAL;
		}
		e->url[e->n_url] = strndup(p, n);
		if (!e->url[e->n_url]) {
			nelssa_etcd_close(e);
			return -ENOMEM;
		}
		e->n_url++;
		p += strcspn(p, ",");
		if (*p)
			p++;
	}
	if (!e->n_url) {
		snprintf(why, why_len, "no etcd endpoint given");
		nelssa_etcd_close(e);
		return -EINVAL;
	}
	e->user = dup_or_null(o->user, &bad);
	e->password = dup_or_null(o->password ? o->password : (o->user ? "" : NULL), &bad);
	e->cacert = dup_or_null(o->cacert, &bad);
	e->cert = dup_or_null(o->cert, &bad);
	e->key = dup_or_null(o->key, &bad);
	e->curl = curl_easy_init();
	if (bad || !e->curl) {
		nelssa_etcd_close(e);
		return -ENOMEM;
	}
	*out = e;
	return 0;
}

void nelssa_etcd_close(struct nelssa_etcd *e)
{
	if (!e)
		return;
	if (e->curl)
		curl_easy_cleanup(e->curl);
	for (unsigned int i = 0; i < e->n_url; i++)
		free(e->url[i]);
	if (e->password)
		explicit_bzero(e->password, strlen(e->password));
	explicit_bzero(e->token, sizeof(e->token));
	free(e->user);
	free(e->password);
	free(e->cacert);
	free(e->cert);
	free(e->key);
	free(e->buf);
	pthread_mutex_destroy(&e->sock_lock);
	free(e);
}

/* ---- base64, as protobuf's JSON mapping writes bytes ---- */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const void *data, size_t len)
{
	const uint8_t *s = data;
	char *out = malloc((len + 2) / 3 * 4 + 1), *d = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)s[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)s[i + 1] << 8;
		if (i + 2 < len)
			v |= s[i + 2];
		*d++ = b64[v >> 18];
		*d++ = b64[(v >> 12) & 63];
		*d++ = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		*d++ = i + 2 < len ? b64[v & 63] : '=';
	}
	*d = 0;
	return out;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64, c) : NULL;

	return p ? (int)(p - b64) : -1;
}

/* Decodes @s (padding optional) into a NUL-terminated malloc'd buffer; -EPROTO, -ENOMEM. */
static int b64_decode(const char *s, char **out, size_t *out_len)
{
	size_t n = strlen(s), o = 0;
	uint32_t acc = 0;
	unsigned int bits = 0;
	char *d;

	while (n && s[n - 1] == '=')
		n--;
	d = malloc(n / 4 * 3 + 3 + 1);
	if (!d)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		int v = b64_value(s[i]);

		if (v < 0) {
			free(d);
			return -EPROTO;
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			d[o++] = (char)(acc >> bits & 0xff);
		}
	}
	d[o] = 0;
	*out = d;
	*out_len = o;
	return 0;
}

/* ---- one call ---- */

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
	struct nelssa_etcd *e = arg;
	size_t n = size * nmemb;

	if (e->len + n + 1 > ETCD_MAX_ANSWER)
		return 0;
	if (e->len + n + 1 > e->cap) {
		size_t cap = e->cap ? e->cap : 4096;
		char *b;

		while (cap < e->len + n + 1)
			cap *= 2;
		b = realloc(e->buf, cap);
		if (!b)
			return 0;
		e->buf = b;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, p, n);
	e->len += n;
	e->buf[e->len] = 0;
	return n;
}

static int64_t json_i64(struct json_object *o, const char *name, int *bad)
{
	struct json_object *v;
	const char *s;
	char *end;
	long long x;

	if (!json_object_object_get_ex(o, name, &v))
		return 0;		/* proto3: a zero field is left out */
	if (json_object_is_type(v, json_type_int))
		return json_object_get_int64(v);
	if (!json_object_is_type(v, json_type_string)) {
		*bad = 1;
		return 0;
	}
	s = json_object_get_string(v);
	errno = 0;
	x = strtoll(s, &end, 10);
	if (!*s || *end || errno)
		*bad = 1;
	return x;
}

/*
 * POSTs @req (consumed) to @path on the endpoints in turn until one
 * answers; the answer's JSON in *@ans (put it).  An error etcd reported is
 * mapped to an errno, and, for a stale token, authentication is redone
 * once.
 */
static int call(struct nelssa_etcd *e, const char *path, struct json_object *req,
		struct json_object **ans);

static int authenticate(struct nelssa_etcd *e)
{
	struct json_object *req = json_object_new_object(), *ans = NULL, *tok;
	int ret;

	if (!req)
		return fail(e, -ENOMEM, "out of memory");
	json_object_object_add(req, "name", json_object_new_string(e->user));
	json_object_object_add(req, "password", json_object_new_string(e->password));
	e->token[0] = 0;
	ret = call(e, "/v3/auth/authenticate", req, &ans);
	if (ret)
		return ret;
	if (!json_object_object_get_ex(ans, "token", &tok) ||
	    !json_object_is_type(tok, json_type_string) ||
	    strlen(json_object_get_string(tok)) >= sizeof(e->token)) {
		json_object_put(ans);
		return fail(e, -EPROTO, "etcd gave no usable token");
	}
	snprintf(e->token, sizeof(e->token), "%s", json_object_get_string(tok));
	json_object_put(ans);
	return 0;
}

/*
 * The handle set up for one POST of @body to @url: JSON, the token, TLS,
 * the answer into e->buf.  Returns the headers, for the caller to free
 * once the transfer is done.
 */
static struct curl_slist *post_setup(struct nelssa_etcd *e, const char *url, const char *body)
{
	struct curl_slist *hdr = NULL;
	char auth[sizeof(e->token) + 32];

	curl_easy_reset(e->curl);
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	if (e->token[0]) {
		snprintf(auth, sizeof(auth), "Authorization: %s", e->token);
		hdr = curl_slist_append(hdr, auth);
	}
	e->len = 0;
	curl_easy_setopt(e->curl, CURLOPT_URL, url);
	curl_easy_setopt(e->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(e->curl, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, e);
	curl_easy_setopt(e->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	if (e->cacert)
		curl_easy_setopt(e->curl, CURLOPT_CAINFO, e->cacert);
	if (e->cert)
		curl_easy_setopt(e->curl, CURLOPT_SSLCERT, e->cert);
	if (e->key)
		curl_easy_setopt(e->curl, CURLOPT_SSLKEY, e->key);
	return hdr;
}

static int post_once(struct nelssa_etcd *e, const char *url, const char *body, uint64_t deadline,
		     long *http)
{
	struct curl_slist *hdr;
	uint64_t now = nelssa_now_ms();
	CURLcode rc;

	if (now >= deadline)
		return fail(e, -ETIMEDOUT, "etcd did not answer within %u ms", e->timeout_ms);
	hdr = post_setup(e, url, body);
	curl_easy_setopt(e->curl, CURLOPT_TIMEOUT_MS, (long)(deadline - now));
	rc = curl_easy_perform(e->curl);
	curl_slist_free_all(hdr);
	if (rc == CURLE_OPERATION_TIMEDOUT)
		return fail(e, -ETIMEDOUT, "%s: %s", url, curl_easy_strerror(rc));
	if (rc != CURLE_OK)
		return fail(e, -EHOSTDOWN, "%s: %s", url, curl_easy_strerror(rc));
	curl_easy_getinfo(e->curl, CURLINFO_RESPONSE_CODE, http);
	return 0;
}

static int etcd_status(struct nelssa_etcd *e, const char *path, struct json_object *ans, long http)
{
	struct json_object *v;
	const char *msg = "";
	int bad = 0;
	int64_t code;

	if (!json_object_object_get_ex(ans, "error", &v) &&
	    !json_object_object_get_ex(ans, "code", &v)) {
		if (http != 200)
			return fail(e, -EPROTO, "%s: HTTP status %ld", path, http);
		return 0;
	}
	/* A streaming call's error: {"error": {"grpc_code", "message", ...}}. */
	if (json_object_object_get_ex(ans, "error", &v) && json_object_is_type(v, json_type_object)) {
		struct json_object *m;

		code = json_i64(v, "grpc_code", &bad);
		if (json_object_object_get_ex(v, "message", &m) &&
		    json_object_is_type(m, json_type_string))
			msg = json_object_get_string(m);
		goto mapped;
	}
	code = json_i64(ans, "code", &bad);
	if (json_object_object_get_ex(ans, "message", &v) && json_object_is_type(v, json_type_string))
		msg = json_object_get_string(v);
	else if (json_object_object_get_ex(ans, "error", &v) &&
		 json_object_is_type(v, json_type_string))
		msg = json_object_get_string(v);
mapped:
	if (code == GRPC_NOT_FOUND)
		return fail(e, -ENOENT, "%s: %s", path, msg);
	if (code == GRPC_PERMISSION_DENIED || code == GRPC_UNAUTHENTICATED)
		return fail(e, -EACCES, "%s: %s", path, msg);
	return fail(e, -EIO, "%s: etcd error %lld: %s", path, (long long)code, msg);
}

static int call(struct nelssa_etcd *e, const char *path, struct json_object *req,
		struct json_object **ans)
{
	uint64_t deadline = nelssa_now_ms() + e->timeout_ms;
	int ret = 0, retried = 0;
	unsigned int first;
	char *body = NULL;

	*ans = NULL;
	if (!req)
		return fail(e, -ENOMEM, "out of memory");
	body = strdup(json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
	json_object_put(req);
	if (!body)
		return fail(e, -ENOMEM, "out of memory");
again:
	if (e->user && !e->token[0] && strcmp(path, "/v3/auth/authenticate")) {
		ret = authenticate(e);
		if (ret)
			goto out;
	}
	ret = -EHOSTDOWN;
	first = e->cur;
	for (unsigned int i = 0; i < e->n_url && (ret == -EHOSTDOWN || ret == -ETIMEDOUT); i++) {
		unsigned int u = (first + i) % e->n_url;
		uint64_t now = nelssa_now_ms(), share;
		char url[1024];
		long http = 0;
		struct json_tokener *tk;

		if (now >= deadline)
			break;
		/*
		 * Each endpoint left gets an equal share of the time left: one
		 * that is partitioned away (connections hang, not refused) must
		 * not take it all from the healthy ones after it.
		 */
		share = (deadline - now) / (e->n_url - i);
		snprintf(url, sizeof(url), "%s%s", e->url[u], path);
		ret = post_once(e, url, body, now + (share ? share : 1), &http);
		if (ret) {
			e->cur = (u + 1) % e->n_url;	/* the next call starts past it */
			continue;
		}
		e->cur = u;
		tk = json_tokener_new();
		*ans = tk ? json_tokener_parse_ex(tk, e->buf ? e->buf : "", (int)e->len) : NULL;
		if (tk)
			json_tokener_free(tk);
		if (!*ans || !json_object_is_type(*ans, json_type_object)) {
			json_object_put(*ans);
			*ans = NULL;
			ret = fail(e, -EPROTO, "%s: not the etcd v3 gateway's JSON (HTTP %ld)", url,
				   http);
			break;
		}
		ret = etcd_status(e, path, *ans, http);
	}
	if (ret) {
		json_object_put(*ans);
		*ans = NULL;
	}
	/* A token etcd no longer knows (it restarted, or the token expired): once more. */
	if (ret == -EACCES && e->user && e->token[0] && !retried &&
	    strstr(e->err, "invalid auth token")) {
		e->token[0] = 0;
		retried = 1;
		goto again;
	}
out:
	free(body);
	return ret;
}

/* The streaming calls (keepalive) answer {"result": message}. */
static struct json_object *result_of(struct json_object *ans)
{
	struct json_object *r;

	return json_object_object_get_ex(ans, "result", &r) ? r : ans;
}

int nelssa_etcd_lease_grant(struct nelssa_etcd *e, uint32_t ttl_s, int64_t *id, uint32_t *ttl)
{
	struct json_object *req = json_object_new_object(), *ans;
	int bad = 0, ret;
	int64_t t;

	if (req)
		json_object_object_add(req, "TTL", json_object_new_int64(ttl_s));
	ret = call(e, "/v3/lease/grant", req, &ans);
	if (ret)
		return ret;
	*id = json_i64(ans, "ID", &bad);
	t = json_i64(ans, "TTL", &bad);
	json_object_put(ans);
	if (bad || !*id || t <= 0)
		return fail(e, -EPROTO, "lease grant: no lease in etcd's answer");
	if (ttl)
		*ttl = (uint32_t)t;
	return 0;
}

int nelssa_etcd_lease_keepalive(struct nelssa_etcd *e, int64_t id, uint32_t *ttl)
{
	struct json_object *req = json_object_new_object(), *ans;
	int bad = 0, ret;
	int64_t t;

	if (req)
		json_object_object_add(req, "ID", json_object_new_int64(id));
	ret = call(e, "/v3/lease/keepalive", req, &ans);
	if (ret)
		return ret;
	t = json_i64(result_of(ans), "TTL", &bad);
	json_object_put(ans);
	if (bad)
		return fail(e, -EPROTO, "lease keepalive: a TTL that is not a number");
	if (t <= 0)	/* etcd answers an expired lease with no TTL */
		return fail(e, -ENOENT, "lease %llx expired", (unsigned long long)id);
	if (ttl)
		*ttl = (uint32_t)t;
	return 0;
}

int nelssa_etcd_lease_revoke(struct nelssa_etcd *e, int64_t id)
{
	struct json_object *req = json_object_new_object(), *ans;
	int ret;

	if (req)
		json_object_object_add(req, "ID", json_object_new_int64(id));
	ret = call(e, "/v3/lease/revoke", req, &ans);
	json_object_put(ans);
	return ret == -ENOENT ? 0 : ret;
}

static struct json_object *new_bytes(const void *p, size_t len)
{
	char *s = b64_encode(p, len);
	struct json_object *o = s ? json_object_new_string(s) : NULL;

	free(s);
	return o;
}

/* The end of @prefix's range: @prefix with its last byte below 0xff raised by one. */
static struct json_object *prefix_end(const char *prefix)
{
	size_t n = strlen(prefix);
	char *end = strdup(prefix);
	struct json_object *o = NULL;

	if (!end)
		return NULL;
	while (n && (uint8_t)end[n - 1] == 0xff)
		n--;
	if (n) {
		end[n - 1]++;
		o = new_bytes(end, n);
	} else {
		o = new_bytes("", 1);	/* "\0": every key */
	}
	free(end);
	return o;
}

int nelssa_etcd_put(struct nelssa_etcd *e, const char *key, const void *val, size_t len,
		    int64_t lease)
{
	struct json_object *req = json_object_new_object(), *ans;
	int ret;

	if (req) {
		json_object_object_add(req, "key", new_bytes(key, strlen(key)));
		json_object_object_add(req, "value", new_bytes(val, len));
		if (lease)
			json_object_object_add(req, "lease", json_object_new_int64(lease));
	}
	ret = call(e, "/v3/kv/put", req, &ans);
	json_object_put(ans);
	return ret;
}

int nelssa_etcd_delete(struct nelssa_etcd *e, const char *key, bool prefix, uint64_t *n)
{
	struct json_object *req = json_object_new_object(), *ans;
	int bad = 0, ret;
	int64_t d;

	if (req) {
		json_object_object_add(req, "key", new_bytes(key, strlen(key)));
		if (prefix)
			json_object_object_add(req, "range_end", prefix_end(key));
	}
	ret = call(e, "/v3/kv/deleterange", req, &ans);
	if (ret)
		return ret;
	d = json_i64(ans, "deleted", &bad);
	json_object_put(ans);
	if (bad || d < 0)
		return fail(e, -EPROTO, "delete: a count that is not a number");
	if (n)
		*n = (uint64_t)d;
	return 0;
}

void nelssa_etcd_kvs_free(struct nelssa_etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; i < n && kvs; i++) {
		free(kvs[i].key);
		free(kvs[i].value);
	}
	free(kvs);
}

int nelssa_etcd_get_prefix(struct nelssa_etcd *e, const char *prefix, struct nelssa_etcd_kv **kvs,
			   size_t *n, int64_t *revision)
{
	struct json_object *req = json_object_new_object(), *ans, *arr, *hdr;
	struct nelssa_etcd_kv *out = NULL;
	size_t cnt = 0;
	int bad = 0, ret;

	*kvs = NULL;
	*n = 0;
	if (req) {
		json_object_object_add(req, "key", new_bytes(prefix, strlen(prefix)));
		json_object_object_add(req, "range_end", prefix_end(prefix));
	}
	ret = call(e, "/v3/kv/range", req, &ans);
	if (ret)
		return ret;
	if (revision)
		*revision = json_object_object_get_ex(ans, "header", &hdr) ?
			    json_i64(hdr, "revision", &bad) : 0;
	if (json_object_object_get_ex(ans, "kvs", &arr)) {
		if (!json_object_is_type(arr, json_type_array)) {
			json_object_put(ans);
			return fail(e, -EPROTO, "range: kvs is not an array");
		}
		cnt = json_object_array_length(arr);
		out = calloc(cnt ? cnt : 1, sizeof(*out));
		if (!out) {
			json_object_put(ans);
			return fail(e, -ENOMEM, "out of memory");
		}
	}
	for (size_t i = 0; i < cnt && !ret; i++) {
		struct json_object *kv = json_object_array_get_idx(arr, i), *k, *v;
		size_t klen;

		if (!json_object_is_type(kv, json_type_object) ||
		    !json_object_object_get_ex(kv, "key", &k) ||
		    !json_object_is_type(k, json_type_string)) {
			ret = fail(e, -EPROTO, "range: an entry without a key");
			break;
		}
		ret = b64_decode(json_object_get_string(k), &out[i].key, &klen);
		if (!ret && json_object_object_get_ex(kv, "value", &v)) {
			if (!json_object_is_type(v, json_type_string))
				ret = -EPROTO;
			else
				ret = b64_decode(json_object_get_string(v), &out[i].value,
						 &out[i].value_len);
		} else if (!ret) {
			out[i].value = calloc(1, 1);	/* an empty value is left out */
			ret = out[i].value ? 0 : -ENOMEM;
		}
		out[i].mod_revision = json_i64(kv, "mod_revision", &bad);
		out[i].lease = json_i64(kv, "lease", &bad);
		if (ret)
			ret = fail(e, ret, "range: an entry that cannot be decoded");
	}
	json_object_put(ans);
	if (!ret && bad)
		ret = fail(e, -EPROTO, "range: a number that is not a number");
	if (ret) {
		nelssa_etcd_kvs_free(out, cnt);
		return ret;
	}
	*kvs = out;
	*n = cnt;
	return 0;
}

/* ---- watch: a stream of JSON messages, one a line ---- */

struct watch {
	struct nelssa_etcd *e;
	int (*fn)(void *arg, int64_t revision, size_t events);
	void *arg;
	const volatile int *stop;
	int ret;			/* what the stream said: 0, -ESTALE, -EPROTO */
	int done;			/* @fn asked to stop */
};

/* One message of the stream: {"result": WatchResponse} or {"error": ...}. */
static int watch_message(struct watch *w, const char *line, size_t len)
{
	struct json_tokener *tk = json_tokener_new();
	struct json_object *o = tk ? json_tokener_parse_ex(tk, line, (int)len) : NULL, *r, *v, *h;
	int64_t rev = 0;
	size_t events = 0;
	int bad = 0, stop = 0;

	if (tk)
		json_tokener_free(tk);
	if (!o || !json_object_is_type(o, json_type_object)) {
		json_object_put(o);
		w->ret = fail(w->e, -EPROTO, "watch: not the etcd v3 gateway's JSON");
		return 1;
	}
	if (!json_object_object_get_ex(o, "result", &r)) {
		w->ret = etcd_status(w->e, "/v3/watch", o, 200);
		if (!w->ret)
			w->ret = fail(w->e, -EPROTO, "watch: a message with no result");
		json_object_put(o);
		return 1;
	}
	if (json_object_object_get_ex(r, "canceled", &v) && json_object_get_boolean(v)) {
		const char *why = json_object_object_get_ex(r, "cancel_reason", &v) &&
				  json_object_is_type(v, json_type_string) ?
				  json_object_get_string(v) : "";

		/* A token etcd no longer knows cancels the watch as it is made. */
		w->ret = fail(w->e, strstr(why, "auth") ? -EACCES : -ESTALE,
			      "watch: etcd cancelled it%s%s", *why ? ": " : "", why);
		json_object_put(o);
		return 1;
	}
	if (json_object_object_get_ex(r, "header", &h))
		rev = json_i64(h, "revision", &bad);
	if (json_object_object_get_ex(r, "events", &v) && json_object_is_type(v, json_type_array))
		events = json_object_array_length(v);
	json_object_put(o);
	stop = w->fn(w->arg, rev, events);
	w->done |= stop;
	return stop;
}

static size_t on_watch_data(char *p, size_t size, size_t nmemb, void *arg)
{
	struct watch *w = arg;
	struct nelssa_etcd *e = w->e;
	size_t n = size * nmemb, start = 0;

	if (on_data(p, size, nmemb, e) != n)
		return 0;
	for (size_t i = 0; i < e->len; i++) {
		if (e->buf[i] != '\n')
			continue;
		if (i > start && watch_message(w, e->buf + start, i - start))
			return 0;	/* stops the transfer */
		start = i + 1;
	}
	memmove(e->buf, e->buf + start, e->len - start);
	e->len -= start;
	return n;
}

/* The watch's socket is made here, so that another thread can shut it down. */
static curl_socket_t watch_open(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct nelssa_etcd *e = arg;
	curl_socket_t fd;
	int slot = -1;

	(void)purpose;
	pthread_mutex_lock(&e->sock_lock);
	for (int i = 0; i < 4 && slot < 0; i++)
		if (e->sock[i] < 0)
			slot = i;
	fd = slot < 0 ? CURL_SOCKET_BAD : socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
	if (fd >= 0)
		e->sock[slot] = fd;
	pthread_mutex_unlock(&e->sock_lock);
	return fd < 0 ? CURL_SOCKET_BAD : fd;
}

static int watch_close(void *arg, curl_socket_t fd)
{
	struct nelssa_etcd *e = arg;

	pthread_mutex_lock(&e->sock_lock);
	for (int i = 0; i < 4; i++)
		if (e->sock[i] == fd)
			e->sock[i] = -1;
	close(fd);	/* under the lock: no one shuts down a number reused meanwhile */
	pthread_mutex_unlock(&e->sock_lock);
	return 0;
}

void nelssa_etcd_watch_abort(struct nelssa_etcd *e)
{
	pthread_mutex_lock(&e->sock_lock);
	for (int i = 0; i < 4; i++)
		if (e->sock[i] >= 0)
			shutdown(e->sock[i], SHUT_RDWR);
	pthread_mutex_unlock(&e->sock_lock);
}

static int on_watch_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	const struct watch *w = arg;

	(void)a;
	(void)b;
	(void)c;
	(void)d;
	return *w->stop ? 1 : 0;
}

int nelssa_etcd_watch(struct nelssa_etcd *e, const char *prefix,
		      int (*fn)(void *arg, int64_t revision, size_t events), void *arg,
		      const volatile int *stop)
{
	struct json_object *req = json_object_new_object(), *cr = json_object_new_object();
	struct watch w = { .e = e, .fn = fn, .arg = arg, .stop = stop };
	struct curl_slist *hdr;
	char url[1024];
	char *body;
	CURLcode rc;
	int ret;

	if (!req || !cr) {
		json_object_put(req);
		json_object_put(cr);
		return fail(e, -ENOMEM, "out of memory");
	}
	json_object_object_add(cr, "key", new_bytes(prefix, strlen(prefix)));
	json_object_object_add(cr, "range_end", prefix_end(prefix));
	json_object_object_add(req, "create_request", cr);
	body = strdup(json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
	json_object_put(req);
	if (!body)
		return fail(e, -ENOMEM, "out of memory");
	if (e->user && !e->token[0]) {
		ret = authenticate(e);
		if (ret) {
			free(body);
			return ret;
		}
	}
	snprintf(url, sizeof(url), "%s/v3/watch", e->url[e->cur]);
	hdr = post_setup(e, url, body);
	curl_easy_setopt(e->curl, CURLOPT_WRITEFUNCTION, on_watch_data);
	curl_easy_setopt(e->curl, CURLOPT_WRITEDATA, &w);
	curl_easy_setopt(e->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e->curl, CURLOPT_XFERINFOFUNCTION, on_watch_progress);
	curl_easy_setopt(e->curl, CURLOPT_XFERINFODATA, &w);
	curl_easy_setopt(e->curl, CURLOPT_OPENSOCKETFUNCTION, watch_open);
	curl_easy_setopt(e->curl, CURLOPT_OPENSOCKETDATA, e);
	curl_easy_setopt(e->curl, CURLOPT_CLOSESOCKETFUNCTION, watch_close);
	curl_easy_setopt(e->curl, CURLOPT_CLOSESOCKETDATA, e);
	/* A socket of its own each time: one curl keeps would outlive the callbacks' care. */
	curl_easy_setopt(e->curl, CURLOPT_FORBID_REUSE, 1L);
	curl_easy_setopt(e->curl, CURLOPT_FRESH_CONNECT, 1L);
	curl_easy_setopt(e->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)e->timeout_ms);
	rc = curl_easy_perform(e->curl);
	curl_slist_free_all(hdr);
	free(body);
	e->len = 0;
	if (w.ret == -EACCES && e->user && strstr(e->err, "invalid auth token"))
		e->token[0] = 0;	/* stale (etcd restarted, or it expired): anew next time */
	if (w.ret)
		return w.ret;
	if (w.done || *stop)
		return 0;
	if (rc == CURLE_OK)
		return fail(e, -ECONNRESET, "watch: etcd ended the stream");
	/* The next watch tries the next endpoint. */
	e->cur = (e->cur + 1) % e->n_url;
	return fail(e, rc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -EHOSTDOWN, "%s: %s", url,
		    curl_easy_strerror(rc));
}
