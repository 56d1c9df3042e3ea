/*
 * meta/meta_etcd.c - the etcd v3 metadata backend, over etcd's JSON gateway.
 *
 * Upstream talks to etcd through its Go client; we speak the gRPC gateway
 * every etcd v3 member serves on its client port instead, with libcurl and
 * jansson, so there is no gRPC stack to link.  Each operation is one POST:
 *   get  -> <ep><prefix>/kv/range        {"key": b64}
 *   put  -> <ep><prefix>/kv/put          {"key": b64, "value": b64, "lease": id}
 *   del  -> <ep><prefix>/kv/deleterange  {"key": b64}
 * plus /lease/grant, /lease/keepalive and /lease/revoke.  Keys and values are
 * base64 in the JSON; int64 fields come back as JSON strings.  The prefix is
 * "/v3" (etcd >= 3.4, the only one 3.5 serves); an older member answers 404
 * with a non-JSON body there, and then the client moves on to "/v3beta"
 * (3.3) and "/v3alpha" (3.2) for good.  Keys are the engine's (the same as
 * over HTTP and upstream); values are stored as given.
 *
 * Connection strings are upstream's: "etcd://host:port[,host:port...]" or
 * the same list without a scheme, separated by ',' or ';'.  An entry may
 * carry its own http:// or https:// and defaults to port 2379.
 *
 * Endpoints and failover.  The client remembers the endpoint that answered
 * last and starts there; a connection failure, a timeout, an HTTP 5xx or a
 * gRPC "unavailable" answer moves the request on to the next endpoint, so a
 * request fails only when every endpoint failed, and its error names each
 * one with its reason.  Requests carry the gRPC metadata "hasleader", so a
 * member without a leader (a minority side, an election) says so at once
 * instead of holding the request, and the round is retried while the
 * request's time lasts.  Each attempt is bounded by MC_METADATA_TIMEOUT_MS
 * (default 3 s) and a connect timeout of 1 s (or half the total).  A
 * request repeated on another member may have been applied by the first;
 * put, revoke and grant tolerate that (a lost grant expires on its own).
 *
 * Leases (spec 10.1 item 7: upstream leaves a crashed engine's keys behind).
 * open grants one lease per client (TTL MC_ETCD_LEASE_TTL_SEC, default 10 s,
 * at least 2) and fails with MC_ERR_METADATA naming every endpoint if no
 * member answers, so an unreachable etcd is a clear error at start-up.
 * Every put is attached to that lease and a keep-alive thread refreshes it
 * every TTL/3, so a crashed process's keys vanish within the TTL; close
 * stops the thread and revokes the lease, which removes any key the engine
 * did not delete at once.
 *
 * A live client must never lose its keys for good, so the client keeps the
 * key/value pairs it put and has not deleted ("owned"), and when the lease
 * is gone (keep-alive answers TTL 0, or a put says "lease not found": etcd
 * was unreachable longer than the TTL, or lost its data) it grants a new
 * lease and puts every owned pair again.  While etcd is unreachable the
 * thread retries every second; it asks etcd rather than guessing from the
 * clock, because a restarted member revives its leases and then nothing
 * needs to be done.  A delete forgets the pair even when the request failed:
 * an entry the engine asked to remove is never resurrected.
 *
 * Threads: get runs in parallel from any thread (curl handles come from a
 * small pool, as in meta_http.c).  put, del and lease replacement hold
 * op_lock, which orders them and guards the lease id and the owned list.
 * The keep-alive thread takes op_lock only to read the lease id and to
 * replace the lease; ka_lock/ka_cond only carry its stop request.  Lock
 * order: op_lock, then the curl pool's lock; ka_lock is never held with another.
 */
#define MC_LOG_MODULE "etcd"
#include "meta/meta.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "meta/coord.h"
#include "meta/curl_pool.h"
#include "meta/meta_config.h"
#include "mooncake/status.h"

#define ETCD_DEFAULT_PORT "2379"
#define ETCD_TIMEOUT_MS	  5000L /* upstream's etcd client uses 5 s */
#define ETCD_CONNECT_MS	  1000L
#define ETCD_RETRY_MS	  1000 /* keep-alive cadence while etcd is unreachable */
#define ETCD_ERR_SHOW	  160  /* bytes of an error answer put in messages */
#define ETCD_ERRS_MAX	  400  /* per-endpoint reasons kept for one request */

/* gRPC status codes the gateway returns in "code". */
#define GRPC_DEADLINE_EXCEEDED 4
#define GRPC_NOT_FOUND	       5
#define GRPC_UNAVAILABLE       14

static const char *const gateway_prefixes[] = {"/v3", "/v3beta", "/v3alpha"};

struct owned_kv {
	struct mc_list node;
	char *key;
	char *value;
	size_t len;
};

struct etcd_client {
	struct mc_meta base; /* must be first */
	char **endpoints;    /* "http://host:port", no trailing '/' */
	size_t nendpoints;
	atomic_size_t cur; /* endpoint that answered last */
	atomic_int prefix; /* index into gateway_prefixes */
	long timeout_ms;
	long connect_ms;

	struct mc_curl_pool pool;

	pthread_mutex_t op_lock; /* orders put/del/lease changes; guards what follows */
	int64_t lease_id;
	int64_t lease_ttl;    /* seconds, as granted */
	bool resync;	      /* owned pairs not all re-put under lease_id yet */
	struct mc_list owned; /* struct owned_kv */

	pthread_mutex_t ka_lock; /* guards stopping */
	pthread_cond_t ka_cond;
	bool stopping;
	pthread_t ka_thread;
};

static const struct mc_meta_ops etcd_ops;
static struct etcd_client *client_of(struct mc_meta *m)
{
	return mc_container_of(m, struct etcd_client, base);
}

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* ---- base64 (RFC 4648, padded), as protobuf's JSON mapping wants -------- */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *b64_encode(const void *data, size_t len)
{
	const unsigned char *p = data;
	char *out, *o;
	size_t i;

	if (len > SIZE_MAX / 4 * 3 - 3)
		return NULL;
	out = mc_malloc((len + 2) / 3 * 4 + 1);
	if (!out)
		return NULL;
	o = out;
	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = b64_alphabet[(v >> 6) & 63];
		*o++ = b64_alphabet[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		*o++ = b64_alphabet[v >> 18];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

static int b64_value(char ch)
{
	if (ch >= 'A' && ch <= 'Z')
		return ch - 'A';
	if (ch >= 'a' && ch <= 'z')
		return ch - 'a' + 26;
	if (ch >= '0' && ch <= '9')
		return ch - '0' + 52;
	if (ch == '+' || ch == '-')
		return 62;
	if (ch == '/' || ch == '_')
		return 63;
	return -1;
}

/*
 * Decode base64 (standard or URL alphabet, padding optional) into a
 * malloc'ed, NUL-terminated buffer.  MC_ERR_MALFORMED_JSON on bad input,
 * MC_ERR_NOMEM; no message is set.
 */
static mc_status b64_decode(const char *s, size_t slen, char **out, size_t *len_out)
{
	uint32_t acc = 0;
	int bits = 0;
	size_t n = 0;
	char *buf;

	while (slen && s[slen - 1] == '=')
		slen--;
	if (slen % 4 == 1)
		return MC_ERR_MALFORMED_JSON;
	buf = mc_malloc(slen / 4 * 3 + 3);
	if (!buf)
		return MC_ERR_NOMEM;
	for (size_t i = 0; i < slen; i++) {
		int v = b64_value(s[i]);
		if (v < 0) {
			mc_free(buf);
			return MC_ERR_MALFORMED_JSON;
		}
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			buf[n++] = (char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	buf[n] = '\0';
	*out = buf;
	*len_out = n;
	return MC_OK;
}

/* ---- JSON helpers ----------------------------------------------------------- */

/* etcd writes int64 as a JSON string; accept a number too.  Absent = 0. */
static bool json_int64(const json_t *v, int64_t *out)
{
	const char *s;
	char *end;
	long long x;

	if (!v) {
		*out = 0;
		return true;
	}
	if (json_is_integer(v)) {
		*out = json_integer_value(v);
		return true;
	}
	if (!json_is_string(v))
		return false;
	s = json_string_value(v);
	errno = 0;
	x = strtoll(s, &end, 10);
	if (errno || end == s || *end)
		return false;
	*out = x;
	return true;
}

/*
 * The gateway's error answer: {"error": "...", "code": N} for unary calls,
 * {"error": {"grpc_code": N, "message": "..."}} for streams.  Copies the
 * message into msg and returns the gRPC code, or -1 when body is not one.
 */
static int grpc_error(const json_t *body, char *msg, size_t msglen)
{
	const json_t *err = json_object_get(body, "error");
	const json_t *code = json_object_get(body, "code");
	const json_t *text = json_object_get(body, "message");

	if (json_is_object(err)) {
		code = json_object_get(err, "grpc_code");
		text = json_object_get(err, "message");
	} else if (!text) {
		text = err;
	}
	if (!json_is_integer(code))
		return -1;
	snprintf(msg, msglen, "%s", json_is_string(text) ? json_string_value(text) : "?");
	return (int)json_integer_value(code);
}

/* ---- requests --------------------------------------------------------------- */

/* Append "<endpoint>: <reason>" to the reasons collected for one request. */
static void errs_add(char *errs, const char *endpoint, const char *fmt, ...) MC_PRINTF(3, 4);
static void errs_add(char *errs, const char *endpoint, const char *fmt, ...)
{
	size_t used = strlen(errs);
	va_list ap;
	int n;

	if (used >= ETCD_ERRS_MAX - 1)
		return;
	n = snprintf(errs + used, ETCD_ERRS_MAX - used, "%s%s: ", used ? "; " : "", endpoint);
	if (n < 0 || (size_t)n >= ETCD_ERRS_MAX - used)
		return;
	used += (size_t)n;
	va_start(ap, fmt);
	vsnprintf(errs + used, ETCD_ERRS_MAX - used, fmt, ap);
	va_end(ap);
}

/*
 * POST body to one endpoint.  MC_OK with the HTTP code and answer, or
 * MC_ERR_METADATA after a transport failure with the reason in errs.
 * Moves to an older gateway prefix when this one is not served.  The
 * attempt is bounded by timeout_ms (connecting by connect_ms).
 */
static mc_status post_once(struct etcd_client *c, size_t idx, const char *path, const char *body,
			   long timeout_ms, long *code_out, struct mc_curl_body *resp, char *errs)
{
	const char *ep = c->endpoints[idx];
	char errbuf[CURL_ERROR_SIZE];
	struct curl_slist *hdrs = NULL;
	mc_status status = MC_OK;
	CURL *h;

	h = mc_curl_pool_take(&c->pool);
	hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	/* gRPC metadata "hasleader": a member cut off from the leader answers
	 * "no leader" at once instead of holding the request until it times out */
	if (hdrs && !curl_slist_append(hdrs, "Grpc-Metadata-hasleader: true")) {
		curl_slist_free_all(hdrs);
		hdrs = NULL;
	}
	if (!h || !hdrs) {
		errs_add(errs, ep, "out of memory");
		status = MC_ERR_NOMEM;
		goto out;
	}
	for (;;) {
		int p = atomic_load(&c->prefix);
		char *url = mc_asprintf("%s%s%s", ep, gateway_prefixes[p], path);
		CURLcode rc;

		if (!url) {
			status = MC_ERR_NOMEM;
			goto out;
		}
		errbuf[0] = '\0';
		mc_buf_release(&resp->buf);
		mc_curl_body_init(resp);
		curl_easy_setopt(h, CURLOPT_URL, url);
		curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
		curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, MC_MIN(c->connect_ms, timeout_ms));
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mc_curl_on_body);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, resp);
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		rc = curl_easy_perform(h);
		mc_free(url);
		if (rc != CURLE_OK) {
			if (resp->too_large)
				errs_add(errs, ep, "answer larger than %u bytes",
					 MC_CURL_MAX_RESPONSE);
			else
				errs_add(errs, ep, "%s",
					 errbuf[0] ? errbuf : curl_easy_strerror(rc));
			/* a member that holds the request (an election) may answer
			 * on the next round; a refused connection will not */
			status = rc == CURLE_OPERATION_TIMEDOUT ? MC_ERR_TIMEOUT : MC_ERR_METADATA;
			goto out;
		}
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code_out);
		/* the gateway's own 404 is JSON; a plain-text one means "no such path" */
		if (*code_out == 404 && mc_curl_body_text(resp)[0] != '{' &&
		    p + 1 < (int)MC_ARRAY_SIZE(gateway_prefixes)) {
			if (atomic_compare_exchange_strong(&c->prefix, &p, p + 1))
				mc_info("%s serves no %s gateway, trying %s", ep,
					gateway_prefixes[p], gateway_prefixes[p + 1]);
			continue;
		}
		break;
	}
out:
	curl_slist_free_all(hdrs);
	if (h) {
		/* the handle keeps pointers to our stack until the next reset */
		curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
		mc_curl_pool_give(&c->pool, h);
	}
	return status;
}

/*
 * One gateway call with failover.  what names the operation in messages
 * ("get mooncake/ram/x").  On MC_OK *resp_out is the parsed answer (the
 * caller json_decref's it).  A gRPC error that is not about availability
 * returns MC_ERR_METADATA with the gRPC code in *grpc_out (else -1).
 *
 * Every endpoint is tried once, starting with the one that answered last.
 * When some member answered "unavailable" (no leader during an election,
 * a proposal that timed out inside etcd) the round is repeated with a short
 * backoff while the request's time (timeout_ms) lasts: an election takes a
 * second or two.  Members that cannot be reached at all are not waited
 * for.  On failure the message names each endpoint with its reason.
 */
static mc_status etcd_call(struct etcd_client *c, const char *what, const char *path, json_t *req,
			   json_t **resp_out, int *grpc_out)
{
	uint64_t deadline = mc_now_ms() + (uint64_t)c->timeout_ms;
	size_t n = c->nendpoints, start = atomic_load(&c->cur);
	/* one stuck member must not use up the whole request time */
	long attempt_cap = MC_MAX(c->timeout_ms / 3, 500L);
	long attempt_ms = MC_MIN(c->timeout_ms, attempt_cap), backoff_ms = 50;
	char errs[ETCD_ERRS_MAX] = "";
	struct mc_curl_body r;
	bool retryable = false;
	char *body;
	mc_status status = MC_ERR_METADATA;

	mc_curl_body_init(&r);
	if (grpc_out)
		*grpc_out = -1;
	body = req ? json_dumps(req, JSON_COMPACT) : NULL;
	if (!body)
		return mc_set_error(MC_ERR_NOMEM, "etcd %s: out of memory", what);
again:
	errs[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		size_t idx = (start + i) % n;
		const char *ep = c->endpoints[idx];
		char msg[ETCD_ERR_SHOW + 1];
		json_error_t jerr;
		json_t *ans;
		long code = 0;
		int gcode;

		status = post_once(c, idx, path, body, attempt_ms, &code, &r, errs);
		if (status == MC_ERR_NOMEM)
			goto out_nomem;
		if (status == MC_ERR_TIMEOUT)
			retryable = true;
		if (status != MC_OK)
			continue;
		ans = json_loadb(mc_curl_body_text(&r), r.buf.len, JSON_DISABLE_EOF_CHECK, &jerr);
		if (!ans || !json_is_object(ans)) {
			errs_add(errs, ep, "HTTP %ld, not JSON: %.*s", code,
				 (int)MC_MIN(r.buf.len, (size_t)ETCD_ERR_SHOW / 2),
				 mc_curl_body_text(&r));
			json_decref(ans);
			status = MC_ERR_METADATA;
			continue;
		}
		gcode = code == 200 ? -1 : grpc_error(ans, msg, sizeof(msg));
		if (code >= 500 || code == 429 || gcode == GRPC_UNAVAILABLE ||
		    gcode == GRPC_DEADLINE_EXCEEDED) {
			errs_add(errs, ep, "HTTP %ld: %s", code, gcode >= 0 ? msg : "server error");
			json_decref(ans);
			status = MC_ERR_METADATA;
			retryable = true;
			continue;
		}
		if (idx != start && atomic_compare_exchange_strong(&c->cur, &start, idx))
			mc_warn("etcd endpoint %s failed, now using %s (%s)", c->endpoints[start],
				ep, errs);
		if (code != 200) {
			if (gcode < 0)
				snprintf(msg, sizeof(msg), "%.*s", ETCD_ERR_SHOW,
					 mc_curl_body_text(&r));
			if (grpc_out)
				*grpc_out = gcode;
			status = mc_set_error(MC_ERR_METADATA, "etcd %s at %s: HTTP %ld: %s", what,
					      ep, code, msg);
			json_decref(ans);
			goto out;
		}
		*resp_out = ans;
		status = MC_OK;
		goto out;
	}
	if (retryable && mc_now_ms() + (uint64_t)backoff_ms + 100 < deadline) {
		nap_ms(backoff_ms);
		attempt_ms = MC_MIN((long)(deadline - mc_now_ms()), attempt_cap);
		backoff_ms = MC_MIN(backoff_ms * 2, 500L);
		retryable = false;
		start = atomic_load(&c->cur);
		goto again;
	}
	status = mc_set_error(MC_ERR_METADATA, "etcd %s: no endpoint answered (%s)", what, errs);
	goto out;
out_nomem:
	status = mc_set_error(MC_ERR_NOMEM, "etcd %s: out of memory", what);
out:
	mc_buf_release(&r.buf);
	free(body); /* jansson's allocation */
	return status;
}

/* ---- leases ----------------------------------------------------------------- */

static mc_status lease_grant(struct etcd_client *c, int64_t ttl, int64_t *id_out, int64_t *ttl_out)
{
	json_t *req = json_pack("{sI}", "TTL", (json_int_t)ttl), *ans = NULL;
	int64_t id, granted;
	mc_status status;

	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd lease grant: out of memory");
	status = etcd_call(c, "lease grant", "/lease/grant", req, &ans, NULL);
	json_decref(req);
	if (status)
		return status;
	if (!json_int64(json_object_get(ans, "ID"), &id) ||
	    !json_int64(json_object_get(ans, "TTL"), &granted) || id == 0 || granted <= 0) {
		status = mc_set_error(MC_ERR_METADATA, "etcd lease grant: answer without ID/TTL");
	} else {
		*id_out = id;
		*ttl_out = granted;
	}
	json_decref(ans);
	return status;
}

/* MC_OK with the TTL left (0 when the lease is gone). */
static mc_status lease_keepalive(struct etcd_client *c, int64_t id, int64_t *left_out,
				 int *grpc_out)
{
	char ids[24];
	json_t *req, *ans = NULL, *res;
	mc_status status;

	snprintf(ids, sizeof(ids), "%" PRId64, id);
	req = json_pack("{ss}", "ID", ids);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd lease keepalive: out of memory");
	status = etcd_call(c, "lease keepalive", "/lease/keepalive", req, &ans, grpc_out);
	json_decref(req);
	if (status)
		return status;
	/* a stream: {"result": {...}} or {"error": {...}} */
	res = json_object_get(ans, "result");
	if (!json_is_object(res) || !json_int64(json_object_get(res, "TTL"), left_out)) {
		char msg[ETCD_ERR_SHOW + 1];
		int g = grpc_error(ans, msg, sizeof(msg));
		if (grpc_out)
			*grpc_out = g;
		status = mc_set_error(MC_ERR_METADATA, "etcd lease keepalive %" PRIx64 ": %s",
				      (uint64_t)id, g >= 0 ? msg : "answer without result");
	}
	json_decref(ans);
	return status;
}

static mc_status lease_revoke(struct etcd_client *c, int64_t id)
{
	char ids[24];
	json_t *req, *ans = NULL;
	mc_status status;

	snprintf(ids, sizeof(ids), "%" PRId64, id);
	req = json_pack("{ss}", "ID", ids);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd lease revoke: out of memory");
	status = etcd_call(c, "lease revoke", "/lease/revoke", req, &ans, NULL);
	json_decref(req);
	json_decref(ans);
	return status;
}

/* ---- key/value ---------------------------------------------------------------- */

static json_t *key_request(const char *key)
{
	char *k64 = b64_encode(key, strlen(key));
	json_t *req = k64 ? json_pack("{ss}", "key", k64) : NULL;

	mc_free(k64);
	return req;
}

static mc_status put_raw(struct etcd_client *c, const char *key, const char *value, size_t len,
			 int64_t lease, int *grpc_out)
{
	char *k64 = b64_encode(key, strlen(key)), *v64 = b64_encode(value, len);
	char what[160], ids[24];
	json_t *req = NULL, *ans = NULL;
	mc_status status;

	snprintf(ids, sizeof(ids), "%" PRId64, lease);
	if (k64 && v64)
		req = json_pack("{ssssss}", "key", k64, "value", v64, "lease", ids);
	mc_free(k64);
	mc_free(v64);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd put %s: out of memory", key);
	snprintf(what, sizeof(what), "put %s", key);
	status = etcd_call(c, what, "/kv/put", req, &ans, grpc_out);
	json_decref(req);
	json_decref(ans);
	return status;
}

static struct owned_kv *owned_find_locked(struct etcd_client *c, const char *key)
{
	struct mc_list *pos;

	mc_list_for_each(pos, &c->owned) {
		struct owned_kv *o = mc_list_entry(pos, struct owned_kv, node);
		if (strcmp(o->key, key) == 0)
			return o;
	}
	return NULL;
}

static void owned_free(struct owned_kv *o)
{
	mc_free(o->key);
	mc_free(o->value);
	mc_free(o);
}

static void owned_forget_locked(struct etcd_client *c, const char *key)
{
	struct owned_kv *o = owned_find_locked(c, key);

	if (o) {
		mc_list_del(&o->node);
		owned_free(o);
	}
}

static void owned_remember_locked(struct etcd_client *c, const char *key, const char *value,
				  size_t len)
{
	struct owned_kv *o = owned_find_locked(c, key);
	char *copy = mc_malloc(len + 1);

	if (copy) {
		memcpy(copy, value, len);
		copy[len] = '\0';
	}
	if (!o && copy) {
		o = mc_calloc(1, sizeof(*o));
		if (o)
			o->key = mc_strdup(key);
		if (o && !o->key) {
			mc_free(o);
			o = NULL;
		}
		if (o)
			mc_list_add_tail(&c->owned, &o->node);
	}
	if (!o || !copy) {
		/* the key is in etcd; only a later lease loss would miss it */
		mc_warn("out of memory: %s will not be restored if the lease is lost", key);
		mc_free(copy);
		return;
	}
	mc_free(o->value);
	o->value = copy;
	o->len = len;
}

/* Put every owned pair again under the current lease. */
static mc_status resync_locked(struct etcd_client *c)
{
	struct mc_list *pos;
	mc_status status = MC_OK;

	mc_list_for_each(pos, &c->owned) {
		struct owned_kv *o = mc_list_entry(pos, struct owned_kv, node);
		status = put_raw(c, o->key, o->value, o->len, c->lease_id, NULL);
		if (status)
			break;
	}
	c->resync = status != MC_OK;
	return status;
}

/*
 * The lease is gone: take a new one and restore every owned pair.  MC_OK
 * once the new lease exists; pairs that could not be put yet are left to
 * the keep-alive thread (c->resync).
 */
static mc_status lease_replace_locked(struct etcd_client *c)
{
	int64_t id, ttl;
	mc_status status;

	status = lease_grant(c, c->lease_ttl, &id, &ttl);
	if (status)
		return status;
	mc_warn("etcd lease %" PRIx64 " was lost; restoring the keys of %s under lease %" PRIx64,
		(uint64_t)c->lease_id, c->base.uri, (uint64_t)id);
	c->lease_id = id;
	c->lease_ttl = ttl;
	if (resync_locked(c) != MC_OK)
		mc_warn("restoring keys under lease %" PRIx64 " failed, will retry: %s",
			(uint64_t)id, mc_last_error());
	return MC_OK;
}

static mc_status etcd_get(struct mc_meta *m, const char *key, char **value_out, size_t *len_out)
{
	struct etcd_client *c = client_of(m);
	json_t *req, *ans = NULL, *kvs, *val;
	char what[160], *out = NULL;
	size_t len = 0;
	mc_status status;

	if (!key || !value_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	req = key_request(key);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd get %s: out of memory", key);
	snprintf(what, sizeof(what), "get %s", key);
	status = etcd_call(c, what, "/kv/range", req, &ans, NULL);
	json_decref(req);
	if (status)
		return status;
	kvs = json_object_get(ans, "kvs");
	if (!json_is_array(kvs) || json_array_size(kvs) == 0) {
		status = mc_set_error(MC_ERR_NOT_FOUND, "etcd get %s: no such key", key);
		goto out;
	}
	/* proto3 leaves an empty value out */
	val = json_object_get(json_array_get(kvs, 0), "value");
	if (val && !json_is_string(val)) {
		status = mc_set_error(MC_ERR_METADATA, "etcd get %s: value is not a string", key);
		goto out;
	}
	status = b64_decode(val ? json_string_value(val) : "", val ? json_string_length(val) : 0,
			    &out, &len);
	if (status == MC_ERR_NOMEM) {
		status = mc_set_error(MC_ERR_NOMEM, "etcd get %s: out of memory", key);
		goto out;
	}
	if (status) {
		status = mc_set_error(MC_ERR_METADATA, "etcd get %s: value is not base64", key);
		goto out;
	}
	*value_out = out;
	if (len_out)
		*len_out = len;
out:
	json_decref(ans);
	return status;
}

static mc_status etcd_put(struct mc_meta *m, const char *key, const char *value, size_t len)
{
	struct etcd_client *c = client_of(m);
	mc_status status;
	int gcode;

	if (!key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key or value",
				    m->uri);
	if (!value)
		value = "";
	pthread_mutex_lock(&c->op_lock);
	status = put_raw(c, key, value, len, c->lease_id, &gcode);
	if (status == MC_ERR_METADATA && gcode == GRPC_NOT_FOUND) {
		/* "requested lease not found": replace it and try once more */
		if (lease_replace_locked(c) == MC_OK)
			status = put_raw(c, key, value, len, c->lease_id, NULL);
	}
	if (status == MC_OK)
		owned_remember_locked(c, key, value, len);
	pthread_mutex_unlock(&c->op_lock);
	return status;
}

static mc_status etcd_del(struct mc_meta *m, const char *key)
{
	struct etcd_client *c = client_of(m);
	json_t *req, *ans = NULL;
	int64_t deleted = 0;
	char what[160];
	mc_status status;

	if (!key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	req = key_request(key);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd del %s: out of memory", key);
	snprintf(what, sizeof(what), "del %s", key);
	pthread_mutex_lock(&c->op_lock);
	owned_forget_locked(c, key); /* even if the request fails: never resurrect it */
	status = etcd_call(c, what, "/kv/deleterange", req, &ans, NULL);
	pthread_mutex_unlock(&c->op_lock);
	json_decref(req);
	if (status)
		return status;
	if (!json_int64(json_object_get(ans, "deleted"), &deleted) || deleted == 0)
		status = mc_set_error(MC_ERR_NOT_FOUND, "etcd del %s: no such key", key);
	json_decref(ans);
	return status;
}

/* ---- revisions and compare-and-swap (the P2P store's catalog) ------------------ */

static bool is_etcd(const struct mc_meta *m)
{
	return m && m->ops == &etcd_ops;
}

void mc_etcd_kvs_free(struct mc_etcd_kv *kvs, size_t n)
{
	for (size_t i = 0; kvs && i < n; i++) {
		mc_free(kvs[i].key);
		mc_free(kvs[i].value);
	}
	mc_free(kvs);
}

/* One entry of a range answer: key and value base64, revisions as strings. */
static mc_status kv_decode(const json_t *kv, struct mc_etcd_kv *out)
{
	const json_t *k = json_object_get(kv, "key"), *v = json_object_get(kv, "value");
	size_t len;

	if (!json_is_string(k) || (v && !json_is_string(v)) ||
	    !json_int64(json_object_get(kv, "mod_revision"), &out->mod_revision))
		return MC_ERR_METADATA;
	if (b64_decode(json_string_value(k), json_string_length(k), &out->key, &len))
		return MC_ERR_METADATA;
	if (b64_decode(v ? json_string_value(v) : "", v ? json_string_length(v) : 0, &out->value,
		       &out->len))
		return MC_ERR_METADATA;
	return MC_OK;
}

mc_status mc_meta_etcd_range(struct mc_meta *m, const char *key, const char *range_end,
			     struct mc_etcd_kv **kvs_out, size_t *n_out, int64_t *revision_out)
{
	json_t *req, *ans = NULL, *kvs, *hdr;
	struct mc_etcd_kv *out = NULL;
	char *k64, *e64 = NULL, what[160];
	size_t n = 0;
	mc_status status;

	if (!is_etcd(m) || !key || !kvs_out || !n_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "etcd range: not an etcd client or NULL key");
	k64 = b64_encode(key, strlen(key));
	if (range_end)
		e64 = b64_encode(range_end, strlen(range_end));
	req = k64 && (e64 || !range_end) ? json_pack("{ss}", "key", k64) : NULL;
	if (req && e64)
		json_object_set_new(req, "range_end", json_string(e64));
	mc_free(k64);
	mc_free(e64);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd range %s: out of memory", key);
	snprintf(what, sizeof(what), "range %s", key);
	status = etcd_call(client_of(m), what, "/kv/range", req, &ans, NULL);
	json_decref(req);
	if (status)
		return status;
	hdr = json_object_get(ans, "header");
	if (revision_out && !json_int64(json_object_get(hdr, "revision"), revision_out)) {
		status = mc_set_error(MC_ERR_METADATA, "etcd range %s: bad header revision", key);
		goto out;
	}
	kvs = json_object_get(ans, "kvs");
	if (kvs && !json_is_array(kvs)) {
		status = mc_set_error(MC_ERR_METADATA, "etcd range %s: kvs is not a list", key);
		goto out;
	}
	if (kvs && json_array_size(kvs)) {
		out = mc_calloc(json_array_size(kvs), sizeof(*out));
		if (!out) {
			status = mc_set_error(MC_ERR_NOMEM, "etcd range %s: out of memory", key);
			goto out;
		}
		for (; n < json_array_size(kvs); n++) {
			if (kv_decode(json_array_get(kvs, n), &out[n]) != MC_OK) {
				n++;
				status = mc_set_error(MC_ERR_METADATA,
						      "etcd range %s: malformed entry", key);
				mc_etcd_kvs_free(out, n);
				goto out;
			}
		}
	}
	*kvs_out = out;
	*n_out = n;
out:
	json_decref(ans);
	return status;
}

/* One txn: if key's mod_revision is rev (rev 0: the key does not exist), do
 * op ("request_put" with value, or "request_delete_range"). */
static mc_status cas_txn(struct mc_meta *m, const char *key, const char *value, size_t len,
			 int64_t rev)
{
	char *k64, *v64 = NULL, revs[24], what[160];
	json_t *req = NULL, *ans = NULL, *op, *ok;
	mc_status status;

	if (!is_etcd(m) || !key || rev < 0 || (value == NULL && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "etcd txn: not an etcd client or bad arguments");
	snprintf(revs, sizeof(revs), "%" PRId64, rev);
	k64 = b64_encode(key, strlen(key));
	if (value)
		v64 = b64_encode(value, len);
	if (k64 && (v64 || !value)) {
		op = value ? json_pack("{s{ssss}}", "request_put", "key", k64, "value", v64)
			   : json_pack("{s{ss}}", "request_delete_range", "key", k64);
		req = json_pack("{s[{ssssssss}]s[o]s[]}", "compare", "key", k64, "result", "EQUAL",
				"target", rev ? "MOD" : "VERSION", rev ? "mod_revision" : "version",
				revs, "success", op, "failure");
	}
	mc_free(k64);
	mc_free(v64);
	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd txn %s: out of memory", key);
	snprintf(what, sizeof(what), "txn %s %s", value ? "put" : "delete", key);
	status = etcd_call(client_of(m), what, "/kv/txn", req, &ans, NULL);
	json_decref(req);
	if (status)
		return status;
	/* proto3 JSON leaves a false "succeeded" out */
	ok = json_object_get(ans, "succeeded");
	if (!json_is_true(ok))
		status = mc_set_error(MC_ERR_ETCD_TRANSACTION_FAIL,
				      "etcd txn %s: %s changed since revision %" PRId64, what, key,
				      rev);
	json_decref(ans);
	return status;
}

mc_status mc_meta_etcd_cas_put(struct mc_meta *m, const char *key, const char *value, size_t len,
			       int64_t mod_revision)
{
	return cas_txn(m, key, value ? value : "", len, mod_revision);
}

mc_status mc_meta_etcd_cas_del(struct mc_meta *m, const char *key, int64_t mod_revision)
{
	if (mod_revision <= 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "etcd txn delete %s: no revision", key);
	return cas_txn(m, key, NULL, 0, mod_revision);
}

mc_status mc_meta_etcd_put_unleased(struct mc_meta *m, const char *key, const char *value,
				    size_t len)
{
	if (!is_etcd(m) || !key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "etcd put: not an etcd client or bad arguments");
	return put_raw(client_of(m), key, value ? value : "", len, 0, NULL);
}

/* ---- keep-alive thread -------------------------------------------------------- */

/* Sleep up to ms; false when close asked the thread to stop. */
static bool ka_wait(struct etcd_client *c, int64_t ms)
{
	struct timespec ts;
	bool run;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += ms / 1000;
	ts.tv_nsec += (ms % 1000) * 1000000L;
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&c->ka_lock);
	while (!c->stopping && pthread_cond_timedwait(&c->ka_cond, &c->ka_lock, &ts) != ETIMEDOUT)
		;
	run = !c->stopping;
	pthread_mutex_unlock(&c->ka_lock);
	return run;
}

static void *ka_main(void *arg)
{
	struct etcd_client *c = arg;
	bool failing = false;
	int64_t wait_ms;

	pthread_mutex_lock(&c->op_lock);
	wait_ms = c->lease_ttl * 1000 / 3;
	pthread_mutex_unlock(&c->op_lock);
	while (ka_wait(c, wait_ms)) {
		int64_t id, ttl, left = 0;
		mc_status status;
		int gcode = -1;
		bool resync;

		pthread_mutex_lock(&c->op_lock);
		id = c->lease_id;
		ttl = c->lease_ttl;
		resync = c->resync;
		pthread_mutex_unlock(&c->op_lock);

		status = lease_keepalive(c, id, &left, &gcode);
		if (status == MC_OK && left > 0) {
			if (failing)
				mc_warn("etcd %s reachable again, lease %" PRIx64 " alive",
					c->base.uri, (uint64_t)id);
			failing = false;
			if (resync) {
				pthread_mutex_lock(&c->op_lock);
				if (c->resync && c->lease_id == id)
					resync_locked(c);
				pthread_mutex_unlock(&c->op_lock);
			}
			wait_ms = MC_MAX(left, (int64_t)1) * 1000 / 3;
			continue;
		}
		if (status == MC_OK || gcode == GRPC_NOT_FOUND) {
			/* etcd answered: the lease expired or vanished */
			pthread_mutex_lock(&c->op_lock);
			if (c->lease_id == id)
				status = lease_replace_locked(c);
			else
				status = MC_OK; /* a put replaced it meanwhile */
			ttl = c->lease_ttl;
			pthread_mutex_unlock(&c->op_lock);
		}
		if (status == MC_OK) {
			failing = false;
			wait_ms = ttl * 1000 / 3;
			continue;
		}
		if (!failing)
			mc_warn("etcd lease keep-alive failed, retrying every %d ms: %s",
				ETCD_RETRY_MS, mc_last_error());
		failing = true;
		wait_ms = MC_MIN(ttl * 1000 / 3, (int64_t)ETCD_RETRY_MS);
	}
	return NULL;
}

/* ---- open / close ------------------------------------------------------------- */

static void client_free(struct etcd_client *c)
{
	struct mc_list *pos, *tmp;

	mc_list_for_each_safe(pos, tmp, &c->owned) {
		owned_free(mc_list_entry(pos, struct owned_kv, node));
	}
	mc_curl_pool_release(&c->pool);
	for (size_t i = 0; i < c->nendpoints; i++)
		mc_free(c->endpoints[i]);
	mc_free(c->endpoints);
	pthread_cond_destroy(&c->ka_cond);
	pthread_mutex_destroy(&c->ka_lock);
	pthread_mutex_destroy(&c->op_lock);
	mc_free(c->base.uri);
	mc_free(c);
}

static void etcd_close(struct mc_meta *m)
{
	struct etcd_client *c = client_of(m);

	pthread_mutex_lock(&c->ka_lock);
	c->stopping = true;
	pthread_cond_signal(&c->ka_cond);
	pthread_mutex_unlock(&c->ka_lock);
	pthread_join(c->ka_thread, NULL);
	/* removes every key still under the lease at once */
	if (lease_revoke(c, c->lease_id) != MC_OK)
		mc_warn("cannot revoke lease %" PRIx64 ", its keys expire within %" PRId64 " s: %s",
			(uint64_t)c->lease_id, c->lease_ttl, mc_last_error());
	client_free(c);
}

/* Split "a:1,b:2;c" into "http://a:1" ... (port 2379 when absent). */
static mc_status parse_endpoints(struct etcd_client *c, const char *list)
{
	const char *p = list;

	while (*p) {
		const char *end = p + strcspn(p, ",;");
		const char *s = p, *e = end, *host;
		bool has_port = false;
		char **grown;
		char *ep;

		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '/'))
			e--;
		p = *end ? end + 1 : end;
		if (s == e)
			continue;
		host = s;
		if (e - s > 7 && strncasecmp(s, "http://", 7) == 0)
			host = s + 7;
		else if (e - s > 8 && strncasecmp(s, "https://", 8) == 0)
			host = s + 8;
		/* a port follows the last ':' unless that ':' is inside [v6] */
		for (const char *q = e; q > host; q--) {
			if (q[-1] == ']')
				break;
			if (q[-1] == ':') {
				has_port = q < e;
				break;
			}
		}
		if (host == e || *host == ':' || (!has_port && e[-1] == ':'))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "metadata: bad etcd endpoint '%.*s' in %s",
					    (int)(e - s), s, c->base.uri);
		ep = mc_asprintf("%s%.*s%s", host == s ? "http://" : "", (int)(e - s), s,
				 has_port ? "" : ":" ETCD_DEFAULT_PORT);
		grown = ep ? mc_realloc(c->endpoints, (c->nendpoints + 1) * sizeof(*grown)) : NULL;
		if (!grown) {
			mc_free(ep);
			return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory parsing %s",
					    c->base.uri);
		}
		c->endpoints = grown;
		c->endpoints[c->nendpoints++] = ep;
	}
	if (!c->nendpoints)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: no etcd endpoint in %s",
				    c->base.uri);
	return MC_OK;
}

/* A client for uri: endpoints and timeouts, no lease and no thread yet. */
static mc_status client_new(const char *uri, struct etcd_client **out)
{
	struct mc_meta_config cfg;
	pthread_condattr_t ca;
	struct etcd_client *c;
	const char *list;
	mc_status status;

	list = strncasecmp(uri, "etcd://", 7) == 0 ? uri + 7 : uri;
	if (mc_curl_global_init() != MC_OK)
		return MC_ERR_METADATA;
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s", uri);
	c->base.ops = &etcd_ops;
	mc_list_init(&c->owned);
	mc_curl_pool_init(&c->pool);
	pthread_mutex_init(&c->op_lock, NULL);
	pthread_mutex_init(&c->ka_lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->ka_cond, &ca);
	pthread_condattr_destroy(&ca);
	c->base.uri = mc_strdup(uri);
	if (!c->base.uri) {
		status = mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s", uri);
		goto err_free;
	}
	status = parse_endpoints(c, list);
	if (status)
		goto err_free;
	status = mc_meta_config_load(&cfg);
	if (status)
		goto err_free;
	c->timeout_ms = cfg.timeout_ms ? (long)cfg.timeout_ms : ETCD_TIMEOUT_MS;
	c->connect_ms = MC_MIN(ETCD_CONNECT_MS, MC_MAX(c->timeout_ms / 2, 1L));
	c->lease_ttl = cfg.etcd_lease_ttl_sec;
	mc_meta_config_release(&cfg);
	*out = c;
	return MC_OK;

err_free:
	client_free(c);
	return status;
}

mc_status mc_meta_etcd_open(const char *uri, struct mc_meta **out)
{
	struct etcd_client *c;
	mc_status status;

	if (!uri || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: NULL etcd connection string");
	status = client_new(uri, &c);
	if (status)
		return status;

	/* the first request: proves some member answers, and is needed anyway */
	status = lease_grant(c, c->lease_ttl, &c->lease_id, &c->lease_ttl);
	if (status)
		goto err_free;
	if (pthread_create(&c->ka_thread, NULL, ka_main, c) != 0) {
		status = mc_set_error(MC_ERR_METADATA, "etcd %s: cannot start keep-alive thread",
				      uri);
		lease_revoke(c, c->lease_id);
		goto err_free;
	}
	pthread_setname_np(c->ka_thread, "mc-etcd-lease");
	mc_info("etcd %s: lease %" PRIx64 ", ttl %" PRId64 " s", uri, (uint64_t)c->lease_id,
		c->lease_ttl);
	*out = &c->base;
	return MC_OK;

err_free:
	client_free(c);
	return status;
}

static const struct mc_meta_ops etcd_ops = {
	.name = "etcd",
	.get = etcd_get,
	.put = etcd_put,
	.del = etcd_del,
	.resync = mc_meta_no_resync,
	.close = etcd_close,
};

/* ---- the leader view (meta/coord.h) ------------------------------------------- */

/*
 * Upstream's election on etcd: a lease of the election's TTL, then one txn
 * that puts the view key under it only if the key's create_revision is 0
 * (absent).  The winner's view version is the revision of that txn, which
 * is the key's create_revision, so every reader sees the same number and a
 * later leader always has a larger one.  Renewing is a lease keep-alive;
 * resigning revokes the lease, which deletes the key at once.  The client
 * has no lease of its own and no thread: the caller drives every request.
 *
 * A candidate entry is a key under "<view key>/candidates/" put under a
 * second lease (cand_lease, the entry's ttl), which every post keeps alive
 * before it writes the entry; a master that stops posting loses its entry
 * within the ttl.  The listing is one prefix range; dropping revokes.
 */
struct etcd_coord {
	struct mc_coord base; /* must be first */
	struct etcd_client *c;
	int64_t lease;	    /* the lease campaign won under; 0: none */
	int64_t cand_lease; /* the candidate entry's lease; 0: none */
};

static const struct mc_coord_ops etcd_coord_ops;

static struct etcd_coord *coord_of(struct mc_coord *m)
{
	return mc_container_of(m, struct etcd_coord, base);
}

static mc_status coord_range(struct etcd_client *c, const char *key, json_t **kv_out,
			     json_t **ans_out)
{
	json_t *req = key_request(key);
	char what[200];
	mc_status st;

	if (!req)
		return mc_set_error(MC_ERR_NOMEM, "etcd get %s: out of memory", key);
	snprintf(what, sizeof(what), "get %s", key);
	st = etcd_call(c, what, "/kv/range", req, ans_out, NULL);
	json_decref(req);
	if (st)
		return st;
	*kv_out = json_array_get(json_object_get(*ans_out, "kvs"), 0);
	return MC_OK;
}

static mc_status etcd_coord_campaign(struct mc_coord *m, const char *key, const char *addr,
				     int64_t ttl_s, bool *won_out, uint64_t *version_out)
{
	struct etcd_coord *e = coord_of(m);
	char *k64 = NULL, *v64 = NULL, ids[24], what[200];
	json_t *req = NULL, *ans = NULL;
	int64_t id, ttl, rev;
	mc_status st;

	if (e->lease) {
		lease_revoke(e->c, e->lease);
		e->lease = 0;
	}
	st = lease_grant(e->c, ttl_s, &id, &ttl);
	if (st)
		return st;
	snprintf(ids, sizeof(ids), "%" PRId64, id);
	k64 = b64_encode(key, strlen(key));
	v64 = b64_encode(addr, strlen(addr));
	if (k64 && v64)
		req = json_pack("{s[{ssssssss}]s[{s{ssssss}}]}", "compare", "key", k64, "result",
				"EQUAL", "target", "CREATE", "create_revision", "0", "success",
				"request_put", "key", k64, "value", v64, "lease", ids);
	mc_free(k64);
	mc_free(v64);
	if (!req) {
		st = mc_set_error(MC_ERR_NOMEM, "etcd campaign %s: out of memory", key);
		goto out;
	}
	snprintf(what, sizeof(what), "txn create-if-absent %s", key);
	st = etcd_call(e->c, what, "/kv/txn", req, &ans, NULL);
	if (st)
		goto out;
	if (json_is_true(json_object_get(ans, "succeeded"))) {
		if (!json_int64(json_object_get(json_object_get(ans, "header"), "revision"),
				&rev) ||
		    rev <= 0) {
			st = mc_set_error(MC_ERR_METADATA, "etcd %s: answer without a revision",
					  what);
			goto out;
		}
		e->lease = id;
		*won_out = true;
		*version_out = (uint64_t)rev;
	}
out:
	if (!e->lease)
		(void)lease_revoke(e->c, id);
	json_decref(req);
	json_decref(ans);
	return st;
}

static mc_status etcd_coord_renew(struct mc_coord *m, bool *held_out)
{
	struct etcd_coord *e = coord_of(m);
	int64_t left = 0;
	int grpc = -1;
	mc_status st;

	if (!e->lease)
		return MC_OK;
	st = lease_keepalive(e->c, e->lease, &left, &grpc);
	if (st == MC_OK && left > 0) {
		*held_out = true;
		return MC_OK;
	}
	if (st == MC_OK || grpc == GRPC_NOT_FOUND) {
		e->lease = 0; /* etcd says the lease is gone, and so is the key */
		return MC_OK;
	}
	return st;
}

static void etcd_coord_resign(struct mc_coord *m)
{
	struct etcd_coord *e = coord_of(m);

	if (e->lease && lease_revoke(e->c, e->lease) != MC_OK)
		mc_warn("cannot revoke the election lease %" PRIx64 ": %s", (uint64_t)e->lease,
			mc_last_error());
	e->lease = 0;
}

static mc_status etcd_coord_read(struct mc_coord *m, const char *key, struct mc_coord_view *out)
{
	struct etcd_coord *e = coord_of(m);
	json_t *ans = NULL, *kv = NULL, *val;
	char *v = NULL;
	size_t len = 0;
	int64_t rev;
	mc_status st;

	st = coord_range(e->c, key, &kv, &ans);
	if (st || !kv)
		goto out;
	val = json_object_get(kv, "value");
	if (!json_is_string(val) ||
	    b64_decode(json_string_value(val), json_string_length(val), &v, &len) != MC_OK ||
	    !json_int64(json_object_get(kv, "create_revision"), &rev) || rev <= 0 ||
	    len >= sizeof(out->addr)) {
		st = mc_set_error(MC_ERR_METADATA, "etcd %s: not a leader view", key);
		goto out;
	}
	memcpy(out->addr, v, len + 1);
	out->version = (uint64_t)rev;
	out->present = true;
out:
	mc_free(v);
	json_decref(ans);
	return st;
}

/* The view's lease, read with the view: revoking it deletes the key and
 * fails its holder's next keep-alive (NOT_FOUND). */
static mc_status etcd_coord_evict(struct mc_coord *m, const char *key, uint64_t version,
				  bool *ended_out)
{
	struct etcd_coord *e = coord_of(m);
	json_t *ans = NULL, *kv = NULL;
	int64_t rev, lease;
	mc_status st;

	st = coord_range(e->c, key, &kv, &ans);
	if (st || !kv)
		goto out;
	if (!json_int64(json_object_get(kv, "create_revision"), &rev) || (uint64_t)rev != version)
		goto out;
	if (!json_int64(json_object_get(kv, "lease"), &lease) || lease <= 0) {
		st = mc_set_error(MC_ERR_METADATA, "etcd %s: the view has no lease", key);
		goto out;
	}
	st = lease_revoke(e->c, lease);
	if (st == MC_OK)
		*ended_out = true;
out:
	json_decref(ans);
	return st;
}

static mc_status etcd_cand_post(struct mc_coord *m, const char *key, const char *addr,
				const char *entry, int64_t ttl_s)
{
	struct etcd_coord *e = coord_of(m);
	char k[600];
	int64_t left = 0, ttl;
	int grpc = -1;
	mc_status st;

	snprintf(k, sizeof(k), "%s/candidates/%s", key, addr);
	if (e->cand_lease) {
		st = lease_keepalive(e->c, e->cand_lease, &left, &grpc);
		if (st != MC_OK && grpc != GRPC_NOT_FOUND)
			return st;
		if (st != MC_OK || left <= 0)
			e->cand_lease = 0; /* lapsed: the entry went with it */
	}
	if (!e->cand_lease) {
		st = lease_grant(e->c, ttl_s, &e->cand_lease, &ttl);
		if (st != MC_OK) {
			e->cand_lease = 0;
			return st;
		}
	}
	st = put_raw(e->c, k, entry, strlen(entry), e->cand_lease, &grpc);
	if (st != MC_OK && grpc == GRPC_NOT_FOUND)
		e->cand_lease = 0; /* the lease lapsed in between: a new one next time */
	return st;
}

static mc_status etcd_cand_list(struct mc_coord *m, const char *key,
				void (*add)(void *arg, const char *name, size_t nlen,
					    const char *val, size_t vlen),
				void *arg)
{
	struct etcd_coord *e = coord_of(m);
	struct mc_etcd_kv *kvs = NULL;
	char prefix[600], end[600];
	size_t n = 0, plen;
	mc_status st;

	snprintf(prefix, sizeof(prefix), "%s/candidates/", key);
	plen = strlen(prefix);
	memcpy(end, prefix, plen + 1);
	end[plen - 1]++; /* '/' + 1: every key under the prefix, nothing else */
	st = mc_meta_etcd_range(&e->c->base, prefix, end, &kvs, &n, NULL);
	if (st != MC_OK)
		return st;
	for (size_t i = 0; i < n; i++)
		if (strncmp(kvs[i].key, prefix, plen) == 0)
			add(arg, kvs[i].key + plen, strlen(kvs[i].key + plen), kvs[i].value,
			    kvs[i].len);
	mc_etcd_kvs_free(kvs, n);
	return MC_OK;
}

static void etcd_cand_drop(struct mc_coord *m, const char *key, const char *addr)
{
	struct etcd_coord *e = coord_of(m);

	(void)key;
	(void)addr;
	/* revoking deletes the one key under it */
	if (e->cand_lease && lease_revoke(e->c, e->cand_lease) != MC_OK)
		mc_warn("cannot revoke the candidate lease %" PRIx64 ": %s",
			(uint64_t)e->cand_lease, mc_last_error());
	e->cand_lease = 0;
}

static void etcd_coord_close(struct mc_coord *m)
{
	struct etcd_coord *e = coord_of(m);

	etcd_cand_drop(m, NULL, NULL);
	etcd_coord_resign(m);
	client_free(e->c);
	mc_free(e);
}

static const struct mc_coord_ops etcd_coord_ops = {
	.campaign = etcd_coord_campaign,
	.renew = etcd_coord_renew,
	.resign = etcd_coord_resign,
	.read = etcd_coord_read,
	.evict = etcd_coord_evict,
	.cand_post = etcd_cand_post,
	.cand_list = etcd_cand_list,
	.cand_drop = etcd_cand_drop,
	.close = etcd_coord_close,
};

mc_status mc_coord_etcd_open(const char *uri, long timeout_ms, struct mc_coord **out)
{
	struct mc_coord_view v;
	struct etcd_coord *e;
	mc_status st;

	e = mc_calloc(1, sizeof(*e));
	if (!e)
		return mc_set_error(MC_ERR_NOMEM, "etcd: out of memory opening %s", uri);
	e->base.ops = &etcd_coord_ops;
	st = client_new(uri, &e->c);
	if (st) {
		mc_free(e);
		return st;
	}
	if (timeout_ms > 0) {
		e->c->timeout_ms = timeout_ms;
		e->c->connect_ms = MC_MIN(ETCD_CONNECT_MS, MC_MAX(timeout_ms / 2, 1L));
	}
	/* one request now, so an unreachable etcd fails here, naming every endpoint */
	st = etcd_coord_read(&e->base, "mooncake-store/", &v);
	if (st) {
		client_free(e->c);
		mc_free(e);
		return st;
	}
	*out = &e->base;
	return MC_OK;
}
