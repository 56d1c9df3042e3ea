/* tests/unit/test_http.c - the libmicrohttpd glue (base/http.h): routing
 * table lookups, whole requests handed to the handler (bodies kept or
 * drained), the body cap, and bind failures.  The servers built on it
 * are tested through their pages in test_meta.c (metadata server) and
 * tests/integration/test_master_daemon.py (admin pages). */
#include <curl/curl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/auth.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "mooncake/status.h"

static enum MHD_Result echo(void *arg, struct MHD_Connection *conn,
			    const struct mc_http_request *req)
{
	char text[128];

	snprintf(text, sizeof(text), "%s %s %zu", req->method, req->url, req->body_len);
	if (req->body_len && req->body)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), " %.*s",
			 (int)req->body_len, (const char *)req->body);
	return mc_http_respond_text(conn, 200, text, "text/plain");
}

static const struct mc_http_route routes[] = {
	{"/a", MC_HTTP_GET | MC_HTTP_HEAD, false, echo},
	{"/a", MC_HTTP_PUT, false, echo},
	{"/any", 0, false, echo},
	{"/pre/", MC_HTTP_POST, true, echo},
};

static const struct mc_http_route *find(const char *method, unsigned bit, const char *url,
					bool *known)
{
	struct mc_http_request req = {.method = method, .method_bit = bit, .url = url};
	return mc_http_route_find(routes, MC_ARRAY_SIZE(routes), &req, known);
}

static void routes_match_path_then_method(void **state)
{
	bool known;
	(void)state;

	assert_ptr_equal(find("GET", MC_HTTP_GET, "/a", &known), &routes[0]);
	assert_true(known);
	assert_ptr_equal(find("HEAD", MC_HTTP_HEAD, "/a", NULL), &routes[0]);
	assert_ptr_equal(find("PUT", MC_HTTP_PUT, "/a", &known), &routes[1]);
	/* known path, other method: the caller answers 405 */
	assert_null(find("DELETE", MC_HTTP_DELETE, "/a", &known));
	assert_true(known);
	assert_null(find("PATCH", 0, "/a", &known));
	assert_true(known);
	/* exact paths do not take longer ones; prefixes do */
	assert_null(find("GET", MC_HTTP_GET, "/ab", &known));
	assert_false(known);
	assert_ptr_equal(find("PATCH", 0, "/any", &known), &routes[2]);
	assert_ptr_equal(find("POST", MC_HTTP_POST, "/pre/x/y", &known), &routes[3]);
	assert_null(find("POST", MC_HTTP_POST, "/pre", &known));
	assert_false(known);
}

static enum MHD_Result handler(void *arg, struct MHD_Connection *conn,
			       const struct mc_http_request *req)
{
	bool known;
	const struct mc_http_route *r =
		mc_http_route_find(routes, MC_ARRAY_SIZE(routes), req, &known);

	if (r)
		return r->fn(arg, conn, req);
	return mc_http_respond_text(conn, known ? 405 : 404, known ? "method" : "path", NULL);
}

struct resp {
	long code;
	char body[256];
	size_t len;
};

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct resp *r = arg;
	size_t k = size * n;

	if (k > sizeof(r->body) - 1 - r->len)
		k = sizeof(r->body) - 1 - r->len;
	memcpy(r->body + r->len, p, k);
	r->len += k;
	r->body[r->len] = '\0';
	return size * n;
}

static void call_hdr(uint16_t port, const char *method, const char *path, const char *body,
		     const char *hdr, struct resp *r)
{
	CURL *h = curl_easy_init();
	struct curl_slist *hdrs = hdr ? curl_slist_append(NULL, hdr) : NULL;
	char url[128];

	assert_non_null(h);
	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "http://127.0.0.1:%u%s", port, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	if (hdrs)
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	assert_int_equal(curl_easy_perform(h), CURLE_OK);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->code);
	curl_easy_cleanup(h);
	curl_slist_free_all(hdrs);
}

static void call(uint16_t port, const char *method, const char *path, const char *body,
		 struct resp *r)
{
	call_hdr(port, method, path, body, NULL, r);
}

static void open_server(unsigned threads, size_t max_body, struct mc_http **out)
{
	struct mc_http_config cfg = {
		.name = "test http",
		.host = "127.0.0.1",
		.threads = threads,
		.idle_timeout_s = 5,
		.max_body = max_body,
		.handler = handler,
	};
	assert_int_equal(mc_http_open(&cfg, out), MC_OK);
	assert_true(mc_http_port(*out) > 0);
}

static void bodies_are_kept_up_to_the_cap(void **state)
{
	struct mc_http *h;
	struct resp r;
	(void)state;

	open_server(0, 16, &h);
	call(mc_http_port(h), "PUT", "/a?x=1", "hello", &r);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "PUT /a 5 hello");
	call(mc_http_port(h), "GET", "/a", NULL, &r);
	assert_string_equal(r.body, "GET /a 0");
	call(mc_http_port(h), "PUT", "/a", "0123456789abcdefg", &r); /* 17 > 16 */
	assert_int_equal(r.code, 413);
	assert_string_equal(r.body, "request body too large");
	call(mc_http_port(h), "PUT", "/a", "0123456789abcdef", &r); /* exactly 16 */
	assert_int_equal(r.code, 200);
	call(mc_http_port(h), "DELETE", "/a", NULL, &r);
	assert_int_equal(r.code, 405);
	call(mc_http_port(h), "GET", "/b", NULL, &r);
	assert_int_equal(r.code, 404);
	mc_http_close(h);
}

static void bodies_are_drained_when_not_kept(void **state)
{
	struct mc_http *h;
	struct resp r;
	(void)state;

	open_server(2, 0, &h);
	call(mc_http_port(h), "POST", "/pre/x", "a body nobody reads", &r);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "POST /pre/x 0");
	call(mc_http_port(h), "PATCH", "/any", "x", &r);
	assert_string_equal(r.body, "PATCH /any 0");
	mc_http_close(h);
	mc_http_close(NULL);
}

static void bind_failures_name_the_cause(void **state)
{
	struct mc_http *h, *second;
	struct mc_http_config cfg = {.name = "test http", .host = "127.0.0.1", .handler = handler};
	(void)state;

	open_server(0, 0, &h);
	cfg.port = mc_http_port(h);
	assert_int_equal(mc_http_open(&cfg, &second), MC_ERR_SOCKET);
	assert_non_null(strstr(mc_last_error(), "test http: cannot listen on 127.0.0.1 port"));
	cfg.host = "no.such.host.invalid";
	assert_int_equal(mc_http_open(&cfg, &second), MC_ERR_DNS);
	cfg.handler = NULL;
	assert_int_equal(mc_http_open(&cfg, &second), MC_ERR_INVALID_PARAMS);
	mc_http_close(h);
}

/* ---- the cluster secret (base/auth.h) ------------------------------------ */

/* With a secret, the methods named need "Bearer <secret>"; the others and
 * servers without a secret are served as before. */
static void bearer_guards_the_methods_named(void **state)
{
	struct mc_auth_secret sec = {(char *)"s3cret-token", 12};
	struct mc_http_config cfg = {
		.name = "test http",
		.host = "127.0.0.1",
		.idle_timeout_s = 5,
		.max_body = 64,
		.handler = handler,
		.auth = &sec,
		.auth_methods = MC_HTTP_PUT | MC_HTTP_DELETE,
	};
	struct mc_http *h;
	struct resp r;
	uint16_t port;

	(void)state;
	assert_int_equal(mc_http_open(&cfg, &h), MC_OK);
	port = mc_http_port(h);
	call(port, "PUT", "/a", "x", &r);
	assert_int_equal(r.code, 401);
	assert_string_equal(r.body, "authentication required");
	call_hdr(port, "PUT", "/a", "x", "Authorization: Bearer s3cret-tokeN", &r);
	assert_int_equal(r.code, 401);
	call_hdr(port, "PUT", "/a", "x", "Authorization: Bearer s3cret-token2", &r);
	assert_int_equal(r.code, 401);
	call_hdr(port, "PUT", "/a", "x", "Authorization: Basic s3cret-token", &r);
	assert_int_equal(r.code, 401);
	call_hdr(port, "DELETE", "/a", NULL, "Authorization: Bearer ", &r);
	assert_int_equal(r.code, 401);
	call_hdr(port, "PUT", "/a", "x", "Authorization: Bearer s3cret-token", &r);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "PUT /a 1 x");
	call_hdr(port, "PUT", "/a", "y", "authorization: bearer s3cret-token", &r);
	assert_int_equal(r.code, 200);
	call(port, "GET", "/a", NULL, &r); /* reads stay open */
	assert_int_equal(r.code, 200);
	mc_http_close(h);

	/* no secret: upstream's behaviour */
	sec.bytes = NULL;
	assert_int_equal(mc_http_open(&cfg, &h), MC_OK);
	call(mc_http_port(h), "PUT", "/a", "x", &r);
	assert_int_equal(r.code, 200);
	mc_http_close(h);
}

static void write_file(const char *path, const char *text, int mode)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	fputs(text, f);
	fclose(f);
	chmod(path, (mode_t)mode);
}

static void secret_comes_from_file_or_environment(void **state)
{
	char path[] = "/tmp/mc_test_secret_XXXXXX";
	struct mc_auth_secret s;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	unsetenv("MC_AUTH_SECRET_FILE");
	unsetenv("MC_AUTH_SECRET");
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_OK); /* none: off */
	assert_false(mc_auth_on(&s));
	assert_true(mc_auth_bearer_ok(&s, NULL));

	write_file(path, "from-the-file\n\n", 0600);
	assert_int_equal(mc_auth_secret_load(path, &s), MC_OK); /* a flag's file */
	assert_string_equal(s.bytes, "from-the-file");
	assert_int_equal(s.len, 13);
	assert_true(mc_auth_bearer_ok(&s, "Bearer from-the-file"));
	assert_false(mc_auth_bearer_ok(&s, NULL));
	mc_auth_secret_release(&s);
	assert_null(s.bytes);

	setenv("MC_AUTH_SECRET", "from-the-env", 1);
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_OK);
	assert_string_equal(s.bytes, "from-the-env");
	mc_auth_secret_release(&s);
	setenv("MC_AUTH_SECRET_FILE", path, 1); /* the file comes first */
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_OK);
	assert_string_equal(s.bytes, "from-the-file");
	mc_auth_secret_release(&s);

	/* a file its group or others may read is refused, naming the fix */
	write_file(path, "from-the-file\n", 0644);
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "chmod 600"));
	assert_null(s.bytes);
	chmod(path, 0640);
	assert_int_equal(mc_auth_secret_load(path, &s), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_auth_use_file(path), MC_ERR_INVALID_PARAMS); /* a program's flag */
	chmod(path, 0600);
	/* the flag: checked, then the environment every loader reads */
	unsetenv("MC_AUTH_SECRET_FILE");
	assert_int_equal(mc_auth_use_file(""), MC_OK);
	assert_null(getenv("MC_AUTH_SECRET_FILE"));
	assert_int_equal(mc_auth_use_file(path), MC_OK);
	assert_string_equal(getenv("MC_AUTH_SECRET_FILE"), path);
	unsetenv("MC_AUTH_SECRET");
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_OK);
	assert_string_equal(s.bytes, "from-the-file");
	mc_auth_secret_release(&s);

	/* told to authenticate, but nothing usable: refused, not ignored */
	write_file(path, "\n \n", 0600);
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "empty"));
	assert_int_equal(unlink(path), 0);
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), path));
	unsetenv("MC_AUTH_SECRET_FILE");
	setenv("MC_AUTH_SECRET", "", 1);
	assert_int_equal(mc_auth_secret_load(NULL, &s), MC_ERR_INVALID_PARAMS);
	unsetenv("MC_AUTH_SECRET");
	assert_null(s.bytes);
}

static void compare_and_loopback(void **state)
{
	(void)state;
	assert_true(mc_auth_equal("abc", 3, "abc", 3));
	assert_true(mc_auth_equal("", 0, "", 0));
	assert_false(mc_auth_equal("abc", 3, "abd", 3));
	assert_false(mc_auth_equal("abc", 3, "abc\0", 4)); /* a zero byte more */
	assert_false(mc_auth_equal("ab", 2, "abc", 3));
	assert_true(mc_auth_host_loopback("127.0.0.1"));
	assert_true(mc_auth_host_loopback("127.1.2.3"));
	assert_true(mc_auth_host_loopback("::1"));
	assert_true(mc_auth_host_loopback("localhost"));
	assert_false(mc_auth_host_loopback("0.0.0.0"));
	assert_false(mc_auth_host_loopback(""));
	assert_false(mc_auth_host_loopback(NULL));
	assert_false(mc_auth_host_loopback("10.0.0.1"));
	assert_false(mc_auth_host_loopback("::"));
}

/* HTTPS: with a certificate and key from MC_HTTP_TLS_*, the server
 * speaks TLS only; a client that checks it against the certificate (the
 * CA here) is served, a plain-HTTP request is not.  The certificate is
 * made with the openssl command for the test (skipped without it). */
static void tls_serves_https_only(void **state)
{
	char dir[] = "/tmp/mc_test_tls_XXXXXX", cmd[1024], cert[128], key[128], url[128];
	struct mc_http_tls tls;
	struct mc_http_config cfg = {
		.name = "test https",
		.host = "127.0.0.1",
		.idle_timeout_s = 5,
		.max_body = 64,
		.handler = handler,
	};
	struct mc_http *h;
	struct resp r;
	CURL *c;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(cert, sizeof(cert), "%s/cert.pem", dir);
	snprintf(key, sizeof(key), "%s/key.pem", dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
		 "-keyout %s -out %s -days 1 -subj /CN=127.0.0.1 "
		 "-addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1",
		 key, cert);
	if (system(cmd) != 0) {
		snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
		if (system(cmd) != 0)
			print_message("could not remove %s\n", dir);
		skip();
	}
	setenv("MC_HTTP_TLS_CERT_FILE", cert, 1);
	unsetenv("MC_HTTP_TLS_KEY_FILE");
	assert_int_equal(mc_http_tls_load(&tls), MC_ERR_INVALID_PARAMS); /* key missing */
	setenv("MC_HTTP_TLS_KEY_FILE", key, 1);
	setenv("MC_HTTP_TLS_CA_FILE", cert, 1);
	assert_int_equal(mc_http_tls_load(&tls), MC_OK);
	assert_true(mc_http_tls_on(&tls));
	unsetenv("MC_HTTP_TLS_CERT_FILE");
	unsetenv("MC_HTTP_TLS_KEY_FILE");
	unsetenv("MC_HTTP_TLS_CA_FILE");
	cfg.tls = &tls;
	assert_int_equal(mc_http_open(&cfg, &h), MC_OK);

	snprintf(url, sizeof(url), "https://127.0.0.1:%u/a", mc_http_port(h));
	c = curl_easy_init();
	memset(&r, 0, sizeof(r));
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_CAINFO, tls.ca_file);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.code);
	assert_int_equal(r.code, 200);
	assert_string_equal(r.body, "GET /a 0");
	/* without the CA the certificate is not trusted */
	curl_easy_setopt(c, CURLOPT_CAINFO, "/dev/null");
	assert_int_not_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
	/* plain HTTP on the TLS port is not served */
	c = curl_easy_init();
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/a", mc_http_port(h));
	memset(&r, 0, sizeof(r));
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	if (curl_easy_perform(c) == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.code);
		assert_int_not_equal(r.code, 200);
	}
	curl_easy_cleanup(c);
	mc_http_close(h);
	mc_http_tls_release(&tls);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	assert_int_equal(system(cmd), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(routes_match_path_then_method),
		cmocka_unit_test(bodies_are_kept_up_to_the_cap),
		cmocka_unit_test(bodies_are_drained_when_not_kept),
		cmocka_unit_test(bind_failures_name_the_cause),
		cmocka_unit_test(bearer_guards_the_methods_named),
		cmocka_unit_test(secret_comes_from_file_or_environment),
		cmocka_unit_test(compare_and_loopback),
		cmocka_unit_test(tls_serves_https_only),
	};
	int rc;

	curl_global_init(CURL_GLOBAL_ALL);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
