/*
 * store/client_http.c - the store client's own HTTP server (upstream's
 * "client HTTP server", spec store.md 7.4): /health, /metrics and
 * /metrics/summary of one client, on one libmicrohttpd thread through
 * base/http (bounded as every port of the project is).
 *
 *   GET /health           {"status":"healthy|not_initialized|master_unreachable",
 *                          "code":0|1|2}; 200 when healthy, else 503
 *   GET /metrics          Prometheus text 0.0.4: the call counters and
 *                         histograms (client_metrics.c) and the global
 *                         segment's memory (size, bytes pre-faulted, bytes
 *                         on huge pages, which pages and which pre-fault
 *                         mode); 503 "metrics not available" when
 *                         MC_STORE_CLIENT_METRIC=0
 *   GET /metrics/summary  the same as text for people
 *
 * It binds the host of the client's local_hostname (the address its
 * engine serves on), never all interfaces unless that is what the host
 * names.  The server is opened last in mc_store_setup and closed first in
 * teardown (mc_http_close waits for a running handler), so a handler
 * only ever sees a client that is set up; it reads the metrics (atomics),
 * the heartbeat's health flag (atomic) and the segment's statistics
 * (mem/hostmem, which reads /proc/self/smaps), and writes nothing.
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>
#include <microhttpd.h>
#include <stdio.h>
#include <string.h>

#include "base/buf.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "base/sock.h"
#include "store/client_http.h"
#include "store/client_int.h"
#include "store/client_metrics.h"

#define CT_TEXT "text/plain; charset=utf-8"
#define CT_PROM "text/plain; version=0.0.4"
#define CT_JSON "application/json; charset=utf-8"

static enum MHD_Result respond_buf(struct MHD_Connection *conn, struct mc_buf *b, const char *ctype)
{
	enum MHD_Result r;
	if (b->err != MC_OK)
		r = mc_http_respond_text(conn, 500, "out of memory\n", CT_TEXT);
	else
		r = mc_http_respond(conn, 200, b->data, b->len, ctype);
	mc_buf_release(b);
	return r;
}

static enum MHD_Result health(void *arg, struct MHD_Connection *conn,
			      const struct mc_http_request *req)
{
	static const char *const names[] = {"healthy", "not_initialized", "master_unreachable"};
	int code = mc_store_health_check(arg);
	char body[96];

	(void)req;
	if (code < 0 || code > 2)
		code = 1;
	snprintf(body, sizeof(body), "{\"status\":\"%s\",\"code\":%d}", names[code], code);
	return mc_http_respond_text(conn, code == 0 ? 200 : 503, body, CT_JSON);
}

static void segment_series(struct mc_store *s, struct mc_buf *b)
{
	struct mc_store_segment_info si;
	const char *cl = s->metrics->cluster_id;

	if (mc_store_segment_info(s, &si) != MC_OK)
		return;
	mc_buf_appendf(
		b,
		"# HELP mooncake_client_segment_bytes bytes of the global segment\n"
		"# TYPE mooncake_client_segment_bytes gauge\n"
		"mooncake_client_segment_bytes{cluster_id=\"%s\"} %" PRIu64 "\n"
		"# HELP mooncake_client_segment_populated_bytes bytes of the global segment "
		"faulted in ahead of use (MC_STORE_PREFAULT)\n"
		"# TYPE mooncake_client_segment_populated_bytes gauge\n"
		"mooncake_client_segment_populated_bytes{cluster_id=\"%s\"} %" PRIu64 "\n"
		"# HELP mooncake_client_segment_huge_page_bytes bytes of the global segment "
		"backed by huge pages now\n"
		"# TYPE mooncake_client_segment_huge_page_bytes gauge\n"
		"mooncake_client_segment_huge_page_bytes{cluster_id=\"%s\"} %" PRIu64 "\n"
		"# HELP mooncake_client_segment_info the global segment's pages and "
		"pre-fault mode\n"
		"# TYPE mooncake_client_segment_info gauge\n"
		"mooncake_client_segment_info{cluster_id=\"%s\",pages=\"%s\",prefault=\"%s\","
		"prefault_done=\"%s\"} 1\n",
		cl, si.size, cl, si.populated, cl, si.huge_bytes, cl, si.pages, si.prefault,
		si.prefault_done ? "true" : "false");
}

static enum MHD_Result metrics(void *arg, struct MHD_Connection *conn,
			       const struct mc_http_request *req)
{
	struct mc_store *s = arg;
	struct mc_buf b;

	(void)req;
	if (!s->metrics->enabled)
		return mc_http_respond_text(conn, 503, "metrics not available\n", CT_TEXT);
	mc_buf_init(&b);
	mc_client_metrics_prometheus(s->metrics, &b);
	segment_series(s, &b);
	return respond_buf(conn, &b, CT_PROM);
}

static enum MHD_Result summary(void *arg, struct MHD_Connection *conn,
			       const struct mc_http_request *req)
{
	struct mc_store *s = arg;
	struct mc_store_segment_info si;
	struct mc_buf b;

	(void)req;
	if (!s->metrics->enabled)
		return mc_http_respond_text(conn, 503, "metrics not available\n", CT_TEXT);
	mc_buf_init(&b);
	mc_buf_appendf(&b, "Client: %s\n", s->name);
	if (mc_store_segment_info(s, &si) == MC_OK && si.size)
		mc_buf_appendf(&b,
			       "Segment: %" PRIu64 " bytes, %" PRIu64
			       " pre-faulted (%s%s), %" PRIu64 " on huge pages (%s)\n",
			       si.size, si.populated, si.prefault, si.prefault_done ? ", done" : "",
			       si.huge_bytes, si.pages);
	mc_client_metrics_summary(s->metrics, &b);
	return respond_buf(conn, &b, CT_TEXT);
}

static const struct mc_http_route routes[] = {
	{"/health", MC_HTTP_GET | MC_HTTP_HEAD, false, health},
	{"/metrics", MC_HTTP_GET | MC_HTTP_HEAD, false, metrics},
	{"/metrics/summary", MC_HTTP_GET | MC_HTTP_HEAD, false, summary},
};

static enum MHD_Result handle(void *arg, struct MHD_Connection *conn,
			      const struct mc_http_request *req)
{
	bool known;
	const struct mc_http_route *r =
		mc_http_route_find(routes, MC_ARRAY_SIZE(routes), req, &known);
	if (r)
		return r->fn(arg, conn, req);
	if (known)
		return mc_http_respond_text(conn, 405, "method not allowed\n", CT_TEXT);
	return mc_http_respond_text(conn, 404, "not found\n", CT_TEXT);
}

mc_status mc_store_http_open(struct mc_store *s, uint16_t port)
{
	struct mc_http_config cfg = {0};
	char host[256];
	uint16_t tport;
	mc_status rc;

	if (!mc_sock_split_hostport(s->name, host, sizeof(host), &tport, 0))
		snprintf(host, sizeof(host), "%s", s->name);
	cfg.name = "client http server";
	cfg.host = host;
	cfg.port = port;
	cfg.prefer_ipv4 = true;
	cfg.threads = 0;
	cfg.idle_timeout_s = 60;
	cfg.request_timeout_ms = 10000;
	cfg.max_conns = 64;
	cfg.handler = handle;
	cfg.arg = s;
	rc = mc_http_open(&cfg, &s->http);
	if (rc != MC_OK)
		return rc;
	mc_info("client http server on %s:%u (/health, /metrics, /metrics/summary)", host,
		mc_http_port(s->http));
	return MC_OK;
}

void mc_store_http_close(struct mc_store *s)
{
	mc_http_close(s->http);
	s->http = NULL;
}
