/*
 * tests/unit/test_meta.c - metadata backends and the HTTP metadata server.
 *
 * Each server case starts its own server on 127.0.0.1 with port 0 and talks
 * to it through the http backend and with raw libcurl requests (to check
 * status codes and bodies the backend hides).  The mem backend, backend
 * selection and failure modes (refused connection, silent server) need no
 * server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/log.h"
#include "meta/http_server.h"
#include "meta/meta.h"
#include "mooncake/status.h"
#include "support.h"

struct fixture {
	struct mc_http_meta_server *srv;
	struct mc_meta *meta;
	char base[64]; /* http://127.0.0.1:PORT */
	char uri[80];  /* base + /metadata */
};

/* ---- raw HTTP helper ----------------------------------------------------- */

struct raw_resp {
	long code;
	char *body;
	size_t len;
	char ctype[64];
};

static size_t raw_write(char *p, size_t sz, size_t n, void *arg)
{
	struct raw_resp *r = arg;
	char *nb = realloc(r->body, r->len + sz * n + 1);
	if (!nb)
		return 0;
	memcpy(nb + r->len, p, sz * n);
	r->len += sz * n;
	nb[r->len] = '\0';
	r->body = nb;
	return sz * n;
}

/* A request with libcurl directly; returns the curl code, fills r. */
static CURLcode raw(const char *method, const char *url, const void *body, size_t len,
		    struct raw_resp *r)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = NULL;
	char *ct = NULL;
	CURLcode rc;

	memset(r, 0, sizeof(*r));
	assert_non_null(h);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, raw_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		hdrs = curl_slist_append(NULL, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	}
	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->code);
	if (curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
		snprintf(r->ctype, sizeof(r->ctype), "%s", ct);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	return rc;
}

static void raw_expect(const char *method, const char *url, const char *body, long code,
		       const char *text)
{
	struct raw_resp r;
	assert_int_equal(raw(method, url, body, body ? strlen(body) : 0, &r), CURLE_OK);
	assert_int_equal(r.code, code);
	if (text)
		assert_string_equal(r.body ? r.body : "", text);
	free(r.body);
}

/* ---- fixture ------------------------------------------------------------- */

static int server_up(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	uint16_t port;

	if (!f)
		return -1;
	if (mc_http_meta_server_start("127.0.0.1", 0, &f->srv) != MC_OK)
		goto err_free;
	port = mc_http_meta_server_port(f->srv);
	snprintf(f->base, sizeof(f->base), "http://127.0.0.1:%u", port);
	snprintf(f->uri, sizeof(f->uri), "%s/metadata", f->base);
	if (port == 0 || mc_meta_open(f->uri, &f->meta) != MC_OK)
		goto err_stop;
	*state = f;
	return 0;

err_stop:
	mc_http_meta_server_stop(f->srv);
err_free:
	free(f);
	return -1;
}

static int server_down(void **state)
{
	struct fixture *f = *state;
	mc_meta_close(f->meta);
	mc_http_meta_server_stop(f->srv);
	free(f);
	return 0;
}

/* ---- http backend against our server ------------------------------------- */

/* With the periodic check off, mc_meta_resync puts the lost keys back at once. */
static void http_resync_restores_at_once(void **state)
{
	struct fixture *f = *state;
	uint16_t port = mc_http_meta_server_port(f->srv);
	struct mc_meta *m = NULL;
	char *out = NULL;
	size_t len = 0;

	setenv("MC_METADATA_HTTP_CHECK_MS", "0", 1);
	assert_int_equal(mc_meta_open(f->uri, &m), MC_OK);
	unsetenv("MC_METADATA_HTTP_CHECK_MS");
	assert_int_equal(mc_meta_put(m, "mooncake/ram/s1", "{\"s\":1}", 7), MC_OK);
	mc_http_meta_server_stop(f->srv);
	assert_int_equal(mc_http_meta_server_start("127.0.0.1", port, &f->srv), MC_OK);
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/s1", &out, &len), MC_ERR_NOT_FOUND);
	mc_meta_resync(m);
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/s1", &out, &len), MC_OK);
	assert_string_equal(out, "{\"s\":1}");
	mc_free(out);
	mc_meta_resync(m); /* nothing lost: nothing written */
	assert_int_equal(mc_http_meta_server_count(f->srv), 1);
	mc_meta_close(m);
}

/* Poll key on m until it holds want (bounded); true when it does. */
static bool await_value(struct mc_meta *m, const char *key, const char *want)
{
	for (int i = 0; i < 1000; i++) {
		char *out = NULL;
		size_t len = 0;
		bool same = mc_meta_get(m, key, &out, &len) == MC_OK && strcmp(out, want) == 0;
		mc_free(out);
		if (same)
			return true;
		usleep(5000);
	}
	return false;
}

/* A restarted server has lost every key: the client puts its own again. */
static void http_restores_keys_a_restarted_server_lost(void **state)
{
	struct fixture *f = *state;
	uint16_t port = mc_http_meta_server_port(f->srv);
	struct mc_meta *m = NULL;
	char *out = NULL;
	size_t len = 0;

	setenv("MC_METADATA_HTTP_CHECK_MS", "20", 1);
	assert_int_equal(mc_meta_open(f->uri, &m), MC_OK);
	unsetenv("MC_METADATA_HTTP_CHECK_MS");
	assert_int_equal(mc_meta_put(m, "mooncake/rpc_meta/r1", "{\"a\":1}", 7), MC_OK);
	assert_int_equal(mc_meta_put(m, "mooncake/ram/r1", "{\"b\":1}", 7), MC_OK);
	assert_int_equal(mc_meta_put(m, "mooncake/ram/r1", "{\"b\":2}", 7), MC_OK);
	assert_int_equal(mc_meta_put(m, "mooncake/ram/gone", "{}", 2), MC_OK);
	assert_int_equal(mc_meta_del(m, "mooncake/ram/gone"), MC_OK);

	mc_http_meta_server_stop(f->srv);
	assert_int_equal(mc_http_meta_server_start("127.0.0.1", port, &f->srv), MC_OK);
	assert_int_equal(mc_http_meta_server_count(f->srv), 0);

	/* the latest value of each key the client still owns comes back */
	assert_true(await_value(f->meta, "mooncake/rpc_meta/r1", "{\"a\":1}"));
	assert_true(await_value(f->meta, "mooncake/ram/r1", "{\"b\":2}"));
	/* a key it deleted does not (both others are back: a round has passed) */
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/gone", &out, &len), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_http_meta_server_count(f->srv), 2);

	/* a deleted key stays deleted; close leaves the server's keys alone */
	assert_int_equal(mc_meta_del(m, "mooncake/ram/r1"), MC_OK);
	mc_meta_close(m);
	assert_int_equal(mc_http_meta_server_count(f->srv), 1);
}

static void http_put_get_del_round_trip(void **state)
{
	struct fixture *f = *state;
	const char *v = "{\"name\":\"n\",\"protocol\":\"tcp\"}";
	uint64_t before = mc_http_meta_server_count(f->srv);
	char *out = NULL;
	size_t len = 0;

	assert_int_equal(mc_meta_put(f->meta, "mooncake/ram/n1", v, strlen(v)), MC_OK);
	assert_int_equal(mc_http_meta_server_count(f->srv), before + 1);
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/n1", &out, &len), MC_OK);
	assert_int_equal(len, strlen(v));
	assert_string_equal(out, v);
	mc_free(out);

	/* the embedding process reads the same value in place */
	assert_int_equal(mc_http_meta_server_get(f->srv, "mooncake/ram/n1", &out, &len), MC_OK);
	assert_int_equal(len, strlen(v));
	assert_string_equal(out, v);
	mc_free(out);

	/* plain keys overwrite */
	assert_int_equal(mc_meta_put(f->meta, "mooncake/ram/n1", "{}", 2), MC_OK);
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/n1", &out, &len), MC_OK);
	assert_string_equal(out, "{}");
	mc_free(out);
	assert_int_equal(mc_http_meta_server_count(f->srv), before + 1);

	assert_int_equal(mc_meta_del(f->meta, "mooncake/ram/n1"), MC_OK);
	assert_int_equal(mc_http_meta_server_count(f->srv), before);
	out = (char *)0x1;
	assert_int_equal(mc_meta_get(f->meta, "mooncake/ram/n1", &out, &len), MC_ERR_NOT_FOUND);
	assert_ptr_equal(out, (char *)0x1); /* untouched */
	assert_non_null(strstr(mc_last_error(), "404"));
	assert_int_equal(mc_meta_del(f->meta, "mooncake/ram/n1"), MC_ERR_NOT_FOUND);
	out = (char *)0x1;
	assert_int_equal(mc_http_meta_server_get(f->srv, "mooncake/ram/n1", &out, &len),
			 MC_ERR_NOT_FOUND);
	assert_ptr_equal(out, (char *)0x1);
	assert_int_equal(mc_http_meta_server_get(NULL, "k", &out, &len), MC_ERR_INVALID_PARAMS);
}

static void http_empty_and_large_values(void **state)
{
	struct fixture *f = *state;
	size_t big = 3u << 20, len = 0;
	char *v = malloc(big), *out = NULL;

	assert_non_null(v);
	mc_test_fill(v, big, 42);
	assert_int_equal(mc_meta_put(f->meta, "big", v, big), MC_OK);
	assert_int_equal(mc_meta_get(f->meta, "big", &out, &len), MC_OK);
	assert_int_equal(len, big);
	assert_memory_equal(out, v, big);
	assert_int_equal(out[len], '\0');
	mc_free(out);
	assert_int_equal(mc_meta_del(f->meta, "big"), MC_OK);
	free(v);

	assert_int_equal(mc_meta_put(f->meta, "empty", "", 0), MC_OK);
	assert_int_equal(mc_meta_get(f->meta, "empty", &out, &len), MC_OK);
	assert_int_equal(len, 0);
	assert_string_equal(out, "");
	mc_free(out);
	assert_int_equal(mc_meta_del(f->meta, "empty"), MC_OK);
}

static void http_keys_are_percent_encoded(void **state)
{
	struct fixture *f = *state;
	const char *key = "mooncake/ram/a b+c&d=e%f:1?#\xc3\xbc";
	char url[256];
	struct raw_resp r;
	char *out;

	assert_int_equal(mc_meta_put(f->meta, key, "{\"k\":1}", 7), MC_OK);
	/* the server stored the decoded key: a hand-encoded raw GET finds it */
	snprintf(url, sizeof(url),
		 "%s?key=mooncake%%2Fram%%2Fa%%20b%%2Bc%%26d%%3De%%25f%%3A1%%3F%%23%%C3%%BC",
		 f->uri);
	assert_int_equal(raw("GET", url, NULL, 0, &r), CURLE_OK);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "{\"k\":1}");
	free(r.body);
	assert_int_equal(mc_meta_get(f->meta, key, &out, NULL), MC_OK);
	mc_free(out);
	assert_int_equal(mc_meta_del(f->meta, key), MC_OK);
}

static void rpc_meta_duplicates_are_refused(void **state)
{
	struct fixture *f = *state;
	const char *key = "mooncake/rpc_meta/node1";
	const char *a = "{\"ip_or_host_name\":\"10.0.0.1\",\"rpc_port\":15000}";
	const char *b = "{\"ip_or_host_name\":\"10.0.0.2\",\"rpc_port\":15000}";
	char url[160], *out;

	assert_int_equal(mc_meta_put(f->meta, key, a, strlen(a)), MC_OK);
	/* byte-identical: accepted (200 "metadata unchanged") */
	assert_int_equal(mc_meta_put(f->meta, key, a, strlen(a)), MC_OK);
	/* different bytes: refused, and the backend says "exists" */
	assert_int_equal(mc_meta_put(f->meta, key, b, strlen(b)), MC_ERR_EXISTS);
	assert_non_null(strstr(mc_last_error(), "Duplicate rpc_meta key not allowed"));
	assert_int_equal(mc_meta_get(f->meta, key, &out, NULL), MC_OK);
	assert_string_equal(out, a);
	mc_free(out);

	snprintf(url, sizeof(url), "%s?key=mooncake%%2Frpc_meta%%2Fnode1", f->uri);
	raw_expect("PUT", url, a, 200, "metadata unchanged");
	raw_expect("PUT", url, b, 400, "Duplicate rpc_meta key not allowed");
	/* the documented recovery: delete the stale key, then register */
	raw_expect("DELETE", url, NULL, 200, "metadata deleted");
	raw_expect("DELETE", url, NULL, 404, NULL);
	raw_expect("PUT", url, b, 200, "metadata updated");
	assert_int_equal(mc_meta_del(f->meta, key), MC_OK);
}

static void server_answers_like_upstream_master(void **state)
{
	struct fixture *f = *state;
	char url[160];
	struct raw_resp r;

	snprintf(url, sizeof(url), "%s/health", f->base);
	raw_expect("GET", url, NULL, 200, "OK");
	raw_expect("GET", f->uri, NULL, 400, "Missing key parameter");
	snprintf(url, sizeof(url), "%s?key=", f->uri);
	raw_expect("GET", url, NULL, 400, "Missing key parameter");
	raw_expect("PUT", url, "{}", 400, "Missing key parameter");
	raw_expect("DELETE", f->uri, NULL, 400, "Missing key parameter");
	snprintf(url, sizeof(url), "%s?key=absent", f->uri);
	raw_expect("GET", url, NULL, 404, "metadata not found");
	raw_expect("DELETE", url, NULL, 404, "metadata not found");
	raw_expect("POST", url, "{}", 405, NULL);
	snprintf(url, sizeof(url), "%s/nothing?key=a", f->base);
	raw_expect("GET", url, NULL, 404, NULL);

	snprintf(url, sizeof(url), "%s?key=ct", f->uri);
	raw_expect("PUT", url, "{\"a\":1}", 200, "metadata updated");
	assert_int_equal(raw("GET", url, NULL, 0, &r), CURLE_OK);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "{\"a\":1}");
	assert_string_equal(r.ctype, "application/json");
	free(r.body);
	raw_expect("DELETE", url, NULL, 200, "metadata deleted");
}

static void oversized_bodies_get_413(void **state)
{
	struct fixture *f = *state;
	size_t n = (64u << 20) + 1;
	char url[160], *body = calloc(1, n);
	struct raw_resp r;

	assert_non_null(body);
	snprintf(url, sizeof(url), "%s?key=huge", f->uri);
	assert_int_equal(raw("PUT", url, body, n, &r), CURLE_OK);
	assert_int_equal(r.code, 413);
	free(r.body);
	free(body);
	snprintf(url, sizeof(url), "%s?key=huge", f->uri);
	raw_expect("GET", url, NULL, 404, NULL);
}

struct zero_src {
	size_t left;
};

static size_t read_zeros(char *buf, size_t size, size_t n, void *arg)
{
	struct zero_src *z = arg;
	size_t k = size * n < z->left ? size * n : z->left;
	memset(buf, 0, k);
	z->left -= k;
	return k;
}

static void oversized_chunked_body_gets_413(void **state)
{
	struct fixture *f = *state;
	struct zero_src z = {(64u << 20) + 4096};
	struct curl_slist *hdrs = curl_slist_append(NULL, "Transfer-Encoding: chunked");
	char url[160];
	struct raw_resp r = {0};
	long code = 0;
	CURL *h = curl_easy_init();

	/* no Content-Length: the server only learns the size while reading */
	assert_non_null(h);
	snprintf(url, sizeof(url), "%s?key=chunked", f->uri);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(h, CURLOPT_READFUNCTION, read_zeros);
	curl_easy_setopt(h, CURLOPT_READDATA, &z);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_TIMEOUT, 60L);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, raw_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
	assert_int_equal(code, 413);
	assert_string_equal(r.body, "request body too large");
	free(r.body);
	assert_int_equal(z.left, 0);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	raw_expect("GET", url, NULL, 404, NULL);
	assert_int_equal(mc_http_meta_server_count(f->srv), 0);
}

struct worker_arg {
	struct mc_meta *meta;
	int id;
	atomic_int *failures;
};

static void *worker(void *p)
{
	struct worker_arg *a = p;
	for (int i = 0; i < 40; i++) {
		char key[64], val[64], *out = NULL;
		size_t len;
		int n = snprintf(val, sizeof(val), "{\"w\":%d,\"i\":%d}", a->id, i);
		snprintf(key, sizeof(key), "mooncake/ram/w%d-%d", a->id, i);
		if (mc_meta_put(a->meta, key, val, (size_t)n) != MC_OK ||
		    mc_meta_get(a->meta, key, &out, &len) != MC_OK || len != (size_t)n ||
		    memcmp(out, val, len) != 0 || mc_meta_del(a->meta, key) != MC_OK)
			atomic_fetch_add(a->failures, 1);
		mc_free(out);
	}
	return NULL;
}

static void one_client_many_threads(void **state)
{
	struct fixture *f = *state;
	pthread_t t[6];
	struct worker_arg args[6];
	atomic_int failures = 0;
	uint64_t before = mc_http_meta_server_count(f->srv);

	for (int i = 0; i < 6; i++) {
		args[i] = (struct worker_arg){f->meta, i, &failures};
		assert_int_equal(pthread_create(&t[i], NULL, worker, &args[i]), 0);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	assert_int_equal(atomic_load(&failures), 0);
	assert_int_equal(mc_http_meta_server_count(f->srv), before);
}

/* ---- failure modes ------------------------------------------------------- */

static void busy_port_fails_with_reason(void **state)
{
	struct fixture *f = *state;
	struct mc_http_meta_server *second = NULL;

	assert_int_equal(
		mc_http_meta_server_start("127.0.0.1", mc_http_meta_server_port(f->srv), &second),
		MC_ERR_SOCKET);
	assert_null(second);
	assert_non_null(strstr(mc_last_error(), "in use"));
	assert_int_equal(mc_http_meta_server_start("no.such.host.invalid", 0, &second), MC_ERR_DNS);
	assert_null(second);
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (t1.tv_sec - t0->tv_sec) * 1000 + (t1.tv_nsec - t0->tv_nsec) / 1000000;
}

static void refused_connection_is_metadata_error(void **state)
{
	char uri[80], *out = NULL;
	struct mc_meta *m;
	uint16_t port = mc_test_free_port();
	(void)state;

	assert_int_not_equal(port, 0);
	snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", port);
	assert_int_equal(mc_meta_open(uri, &m), MC_OK);
	assert_int_equal(mc_meta_get(m, "k", &out, NULL), MC_ERR_METADATA);
	assert_null(out);
	assert_non_null(strstr(mc_last_error(), uri));
	assert_non_null(strstr(mc_last_error(), "onnect")); /* curl: "Failed to connect ..." */
	assert_int_equal(mc_meta_put(m, "k", "{}", 2), MC_ERR_METADATA);
	assert_int_equal(mc_meta_del(m, "k"), MC_ERR_METADATA);
	mc_meta_close(m);
}

static void silent_server_times_out(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t al = sizeof(a);
	struct timespec t0;
	struct mc_meta *m;
	char uri[80], *out = NULL;
	long ms;
	int fd;
	(void)state;

	/* a listener that never accepts: the kernel completes the handshake, no reply follows */
	fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(fd >= 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
	snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", ntohs(a.sin_port));

	setenv("MC_METADATA_TIMEOUT_MS", "300", 1);
	assert_int_equal(mc_meta_open(uri, &m), MC_OK);
	unsetenv("MC_METADATA_TIMEOUT_MS");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(mc_meta_get(m, "k", &out, NULL), MC_ERR_METADATA);
	ms = ms_since(&t0);
	assert_true(ms >= 250);
	assert_true(ms < 2500);
	assert_non_null(strstr(mc_last_error(), "imed out"));
	mc_meta_close(m);
	close(fd);
}

static void backend_selection_by_scheme(void **state)
{
	struct mc_meta *m = NULL;
	(void)state;

	/* etcd: open grants a lease, so nothing listening is a clear error */
	assert_int_equal(mc_meta_open("etcd://127.0.0.1:1", &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "127.0.0.1:1"));
	/* redis: open connects and PINGs, so nothing listening is a clear error */
	assert_int_equal(mc_meta_open("redis://127.0.0.1:1", &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "redis://127.0.0.1:1"));
	assert_int_equal(mc_meta_open("127.0.0.1:1", &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "127.0.0.1:1"));
	assert_int_equal(mc_meta_open("ftp://host/x", &m), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "ftp://host/x"));
	assert_int_equal(mc_meta_open("", &m), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_open(NULL, &m), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_open("P2PHANDSHAKE", &m), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_open("justaword", &m), MC_ERR_INVALID_PARAMS);
	assert_null(m);

	assert_int_equal(mc_meta_open("HTTP://127.0.0.1:1/metadata", &m), MC_OK);
	assert_string_equal(m->ops->name, "http");
	assert_string_equal(m->uri, "HTTP://127.0.0.1:1/metadata");
	mc_meta_close(m);
	assert_int_equal(mc_meta_open("mem://sel", &m), MC_OK);
	assert_string_equal(m->ops->name, "mem");
	mc_meta_close(m);
	mc_meta_close(NULL);
}

/* ---- mem backend --------------------------------------------------------- */

static void mem_clients_share_by_name(void **state)
{
	struct mc_meta *a, *b, *c;
	char val[8] = "{\"v\":1}", *out;
	size_t len;
	(void)state;

	assert_int_equal(mc_meta_open("mem://shared", &a), MC_OK);
	assert_int_equal(mc_meta_open("mem://shared", &b), MC_OK);
	assert_int_equal(mc_meta_open("mem://other", &c), MC_OK);

	assert_int_equal(mc_meta_put(a, "k", val, 7), MC_OK);
	val[5] = '2'; /* the table holds a copy */
	assert_int_equal(mc_meta_get(b, "k", &out, &len), MC_OK);
	assert_int_equal(len, 7);
	assert_string_equal(out, "{\"v\":1}");
	out[0] = 'X'; /* and hands out copies */
	mc_free(out);
	assert_int_equal(mc_meta_get(a, "k", &out, &len), MC_OK);
	assert_string_equal(out, "{\"v\":1}");
	mc_free(out);
	assert_int_equal(mc_meta_get(c, "k", &out, &len), MC_ERR_NOT_FOUND);

	/* overwrite, binary values with NULs */
	assert_int_equal(mc_meta_put(b, "k", "a\0b", 3), MC_OK);
	assert_int_equal(mc_meta_get(a, "k", &out, &len), MC_OK);
	assert_int_equal(len, 3);
	assert_memory_equal(out, "a\0b", 4);
	mc_free(out);

	/* the table outlives one client, not all of them */
	mc_meta_close(a);
	assert_int_equal(mc_meta_get(b, "k", &out, NULL), MC_OK);
	mc_free(out);
	mc_meta_close(b);
	assert_int_equal(mc_meta_open("mem://shared", &a), MC_OK);
	assert_int_equal(mc_meta_get(a, "k", &out, NULL), MC_ERR_NOT_FOUND);

	assert_int_equal(mc_meta_del(a, "k"), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_meta_put(a, "k", "", 0), MC_OK);
	assert_int_equal(mc_meta_del(a, "k"), MC_OK);
	assert_int_equal(mc_meta_del(a, "k"), MC_ERR_NOT_FOUND);
	/* leave keys behind: close must free them (ASan) */
	assert_int_equal(mc_meta_put(a, "x", "1", 1), MC_OK);
	assert_int_equal(mc_meta_put(c, "y", "2", 1), MC_OK);
	mc_meta_close(a);
	mc_meta_close(c);
}

static void mem_survives_allocation_failures(void **state)
{
	struct mc_meta *m;
	char *out;
	(void)state;
	assert_int_equal(mc_meta_open("mem://faults", &m), MC_OK);
	for (long n = 1; n < 8; n++) {
		int rc;
		mc_alloc_fault_arm(n);
		rc = mc_meta_put(m, "k", "v", 1);
		mc_alloc_fault_arm(0);
		assert_true(rc == MC_OK || rc == MC_ERR_NOMEM);
	}
	assert_int_equal(mc_meta_get(m, "k", &out, NULL), MC_OK);
	mc_free(out);
	for (long n = 1; n < 6; n++) {
		struct mc_meta *m2 = NULL;
		int rc;
		mc_alloc_fault_arm(n);
		rc = mc_meta_open("mem://faults2", &m2);
		mc_alloc_fault_arm(0);
		if (rc == MC_OK)
			mc_meta_close(m2);
		else
			assert_int_equal(rc, MC_ERR_NOMEM);
	}
	mc_meta_close(m);
}

/* With a cluster secret (base/auth.h) the server refuses PUT and DELETE
 * without the bearer token and still serves GET; a client with the secret
 * sends it and works as before, one without is refused with the cause. */
static void http_secret_guards_writes(void **state)
{
	struct mc_http_meta_server *srv;
	struct mc_meta *with, *without;
	char uri[128], *out = NULL;
	size_t len;

	(void)state;
	setenv("MC_AUTH_SECRET", "meta-secret-1", 1);
	assert_int_equal(mc_http_meta_server_start("127.0.0.1", 0, &srv), MC_OK);
	snprintf(uri, sizeof(uri), "http://127.0.0.1:%u/metadata", mc_http_meta_server_port(srv));
	assert_int_equal(mc_meta_open(uri, &with), MC_OK);
	unsetenv("MC_AUTH_SECRET");
	assert_int_equal(mc_meta_open(uri, &without), MC_OK);

	assert_int_equal(mc_meta_put(with, "mooncake/ram/a", "{\"a\":1}", 7), MC_OK);
	assert_int_equal(mc_meta_put(without, "mooncake/ram/a", "{\"a\":2}", 7), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "401"));
	assert_int_equal(mc_meta_del(without, "mooncake/ram/a"), MC_ERR_METADATA);
	assert_int_equal(mc_meta_get(without, "mooncake/ram/a", &out, &len), MC_OK);
	assert_string_equal(out, "{\"a\":1}"); /* untouched */
	mc_free(out);
	assert_int_equal(mc_meta_del(with, "mooncake/ram/a"), MC_OK);
	assert_int_equal(mc_meta_get(with, "mooncake/ram/a", &out, &len), MC_ERR_NOT_FOUND);
	mc_meta_close(with);
	mc_meta_close(without);
	mc_http_meta_server_stop(srv);
}

/* HTTPS (MC_HTTP_TLS_*): the server serves TLS, an https:// client that
 * trusts its certificate (MC_HTTP_TLS_CA_FILE) puts and gets; skipped
 * without the openssl command to make the certificate. */
static void https_round_trip(void **state)
{
	char dir[] = "/tmp/mc_test_mtls_XXXXXX", cmd[1024], cert[128], key[128], uri[128];
	struct mc_http_meta_server *srv;
	struct mc_meta *m;
	char *out = NULL;
	size_t len;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout %s -out %s -days 1 -subj /CN=127.0.0.1 "
		 "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
		 key, cert);
	if (system(cmd) != 0)
		skip();
	setenv("MC_HTTP_TLS_CERT_FILE", cert, 1);
	setenv("MC_HTTP_TLS_KEY_FILE", key, 1);
	setenv("MC_HTTP_TLS_CA_FILE", cert, 1);
	assert_int_equal(mc_http_meta_server_start("127.0.0.1", 0, &srv), MC_OK);
	snprintf(uri, sizeof(uri), "https://127.0.0.1:%u/metadata", mc_http_meta_server_port(srv));
	assert_int_equal(mc_meta_open(uri, &m), MC_OK);
	unsetenv("MC_HTTP_TLS_CERT_FILE");
	unsetenv("MC_HTTP_TLS_KEY_FILE");
	unsetenv("MC_HTTP_TLS_CA_FILE");
	assert_int_equal(mc_meta_put(m, "mooncake/ram/t", "{\"t\":1}", 7), MC_OK);
	assert_int_equal(mc_meta_get(m, "mooncake/ram/t", &out, &len), MC_OK);
	assert_string_equal(out, "{\"t\":1}");
	mc_free(out);
	mc_meta_close(m);
	mc_http_meta_server_stop(srv);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	/* hermetic: requests to 127.0.0.1 must not go through a proxy */
	unsetenv("http_proxy");
	unsetenv("HTTP_PROXY");
	unsetenv("all_proxy");
	unsetenv("ALL_PROXY");
	unsetenv("MC_METADATA_TIMEOUT_MS");
	curl_global_init(CURL_GLOBAL_ALL);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(http_secret_guards_writes),
		cmocka_unit_test(https_round_trip),
		cmocka_unit_test_setup_teardown(http_put_get_del_round_trip, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(http_empty_and_large_values, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(http_keys_are_percent_encoded, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(rpc_meta_duplicates_are_refused, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(server_answers_like_upstream_master, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(oversized_bodies_get_413, server_up, server_down),
		cmocka_unit_test_setup_teardown(oversized_chunked_body_gets_413, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(one_client_many_threads, server_up, server_down),
		cmocka_unit_test_setup_teardown(http_restores_keys_a_restarted_server_lost,
						server_up, server_down),
		cmocka_unit_test_setup_teardown(http_resync_restores_at_once, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(busy_port_fails_with_reason, server_up,
						server_down),
		cmocka_unit_test(refused_connection_is_metadata_error),
		cmocka_unit_test(silent_server_times_out),
		cmocka_unit_test(backend_selection_by_scheme),
		cmocka_unit_test(mem_clients_share_by_name),
		cmocka_unit_test(mem_survives_allocation_failures),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
