/*
 * store/client_metrics.c - the store client's counters and histograms and
 * their Prometheus text; see client_metrics.h.
 *
 * Names are upstream's client metrics (spec store.md 7.4), every series
 * labelled with cluster_id: mooncake_transfer_read_bytes and _write_bytes
 * (object bytes of successful calls), the four latency histograms
 * mooncake_transfer_{put,get,batch_put,batch_get}_latency in
 * microseconds, mooncake_client_rpc_count / _rpc_latency by rpc_name, and
 * mooncake_transfer_{read,write}_operation_{count,bytes,latency} by
 * op_name.  A series that has seen nothing is still printed (at zero) for
 * the ops and histograms, so dashboards find them; RPC series appear once
 * the message type was sent.
 *
 * Counters are bumped with relaxed atomics; a scrape reads them one by
 * one, so a histogram's count and its buckets may disagree by the calls
 * that ended during the scrape (Prometheus tolerates this; nothing here
 * derives one from the other).
 */
#include "store/client_metrics.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/compiler.h"
#include "base/time.h"
#include "store/client_config.h"
#include "store/proto.h"

const uint64_t mc_cm_bounds_us[MC_CM_NBOUNDS] = {
	10,    20,    50,    100,    200,    500,    1000,    2000,    5000,
	10000, 20000, 50000, 100000, 200000, 500000, 1000000, 2000000, 5000000,
};

enum { DIR_READ, DIR_WRITE };

static const struct {
	const char *name;
	int dir;
	enum mc_cm_hist_kind hist;
} ops[MC_CM_NOPS] = {
#define MC__CM_OP_ROW(NAME, nm, d, h) [MC_CM_OP_##NAME] = {nm, DIR_##d, MC_CM_HIST_##h},
	MC_CM_OP_MAP(MC__CM_OP_ROW)
#undef MC__CM_OP_ROW
};

static const char *const hist_names[MC_CM_NHIST] = {
	[MC_CM_HIST_PUT] = "mooncake_transfer_put_latency",
	[MC_CM_HIST_GET] = "mooncake_transfer_get_latency",
	[MC_CM_HIST_BATCH_PUT] = "mooncake_transfer_batch_put_latency",
	[MC_CM_HIST_BATCH_GET] = "mooncake_transfer_batch_get_latency",
};

const char *mc_client_metrics_op_name(enum mc_cm_op op)
{
	return (unsigned)op < MC_CM_NOPS ? ops[op].name : "unknown";
}

void mc_client_metrics_init(struct mc_client_metrics *m)
{
	struct mc_store_client_env env;
	struct timespec ts;

	memset(m, 0, sizeof(*m));
	mc_store_client_env_load(&env);
	m->enabled = env.metrics;
	snprintf(m->cluster_id, sizeof(m->cluster_id), "%s",
		 env.cluster_id ? env.cluster_id : "mooncake_cluster");
	mc_store_client_env_release(&env);
	clock_gettime(CLOCK_REALTIME, &ts);
	m->started_ms = (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

uint64_t mc_client_metrics_start(const struct mc_client_metrics *m)
{
	if (!m || !m->enabled)
		return 0;
	return mc_now_us() | 1; /* never 0, which means "not timed" */
}

static void hist_add(struct mc_cm_hist *h, uint64_t us)
{
	size_t i = 0;
	while (i < MC_CM_NBOUNDS && us > mc_cm_bounds_us[i])
		i++;
	atomic_fetch_add_explicit(&h->bucket[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
}

static uint64_t elapsed_us(uint64_t t0)
{
	uint64_t now = mc_now_us();
	return now > t0 ? now - t0 : 0;
}

void mc_client_metrics_op(struct mc_client_metrics *m, enum mc_cm_op op, uint64_t t0, bool ok,
			  uint64_t bytes)
{
	struct mc_cm_op_stats *o;
	uint64_t us;

	if (!t0 || !m || (unsigned)op >= MC_CM_NOPS)
		return;
	us = elapsed_us(t0);
	o = &m->ops[op];
	atomic_fetch_add_explicit(&o->count, 1, memory_order_relaxed);
	if (!ok)
		atomic_fetch_add_explicit(&o->errors, 1, memory_order_relaxed);
	if (bytes) {
		atomic_fetch_add_explicit(&o->bytes, bytes, memory_order_relaxed);
		atomic_fetch_add_explicit(ops[op].dir == DIR_READ ? &m->read_bytes
								  : &m->write_bytes,
					  bytes, memory_order_relaxed);
	}
	hist_add(&o->latency, us);
	hist_add(&m->hist[ops[op].hist], us);
}

void mc_client_metrics_rpc(struct mc_client_metrics *m, uint16_t type, uint64_t t0, mc_status rc)
{
	struct mc_cm_rpc_stats *r;

	if (!t0 || !m || type >= MC_CM_RPC_TYPES)
		return;
	r = &m->rpc[type];
	atomic_fetch_add_explicit(&r->count, 1, memory_order_relaxed);
	if (rc != MC_OK)
		atomic_fetch_add_explicit(&r->errors, 1, memory_order_relaxed);
	hist_add(&r->latency, elapsed_us(t0));
}

/* ---- Prometheus text ---------------------------------------------------------------- */

static uint64_t ld(const _Atomic uint64_t *v)
{
	return atomic_load_explicit(v, memory_order_relaxed);
}

static void header(struct mc_buf *b, const char *name, const char *type, const char *help)
{
	mc_buf_appendf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One histogram's _bucket/_sum/_count lines; labels is "" or `,k="v"`. */
static void hist_lines(struct mc_buf *b, const char *name, const char *cluster, const char *labels,
		       const struct mc_cm_hist *h)
{
	uint64_t cum = 0;
	for (size_t i = 0; i < MC_CM_NBOUNDS; i++) {
		cum += ld(&h->bucket[i]);
		mc_buf_appendf(b, "%s_bucket{cluster_id=\"%s\"%s,le=\"%" PRIu64 "\"} %" PRIu64 "\n",
			       name, cluster, labels, mc_cm_bounds_us[i], cum);
	}
	cum += ld(&h->bucket[MC_CM_NBOUNDS]);
	mc_buf_appendf(b, "%s_bucket{cluster_id=\"%s\"%s,le=\"+Inf\"} %" PRIu64 "\n", name, cluster,
		       labels, cum);
	mc_buf_appendf(b, "%s_sum{cluster_id=\"%s\"%s} %" PRIu64 "\n", name, cluster, labels,
		       ld(&h->sum_us));
	mc_buf_appendf(b, "%s_count{cluster_id=\"%s\"%s} %" PRIu64 "\n", name, cluster, labels,
		       ld(&h->count));
}

/* A counter of struct mc_cm_op_stats: its series name after the direction, its help. */
static const struct {
	const char *what, *help;
	size_t off;
} op_counters[] = {
	{"count", "calls by API", offsetof(struct mc_cm_op_stats, count)},
	{"bytes", "object bytes moved by successful calls, by API",
	 offsetof(struct mc_cm_op_stats, bytes)},
	{"errors", "calls that failed as a whole, by API", offsetof(struct mc_cm_op_stats, errors)},
};

static uint64_t op_counter(const struct mc_cm_op_stats *st, size_t off)
{
	return ld((const _Atomic uint64_t *)(const void *)((const char *)st + off));
}

static void op_series(const struct mc_client_metrics *m, struct mc_buf *b, int dir)
{
	const char *d = dir == DIR_READ ? "read" : "write";
	const char *cl = m->cluster_id;
	char name[96], labels[96];

	for (size_t c = 0; c < MC_ARRAY_SIZE(op_counters); c++) {
		snprintf(name, sizeof(name), "mooncake_transfer_%s_operation_%s", d,
			 op_counters[c].what);
		header(b, name, "counter", op_counters[c].help);
		for (size_t i = 0; i < MC_CM_NOPS; i++)
			if (ops[i].dir == dir)
				mc_buf_appendf(b,
					       "%s{cluster_id=\"%s\",op_name=\"%s\"} %" PRIu64 "\n",
					       name, cl, ops[i].name,
					       op_counter(&m->ops[i], op_counters[c].off));
	}
	snprintf(name, sizeof(name), "mooncake_transfer_%s_operation_latency", d);
	header(b, name, "histogram", "call latency by API, microseconds");
	for (size_t i = 0; i < MC_CM_NOPS; i++)
		if (ops[i].dir == dir) {
			snprintf(labels, sizeof(labels), ",op_name=\"%s\"", ops[i].name);
			hist_lines(b, name, cl, labels, &m->ops[i].latency);
		}
}

/* The series of calls to the master, for the message types called at least once. */
static void rpc_series(const struct mc_client_metrics *m, struct mc_buf *b)
{
	const char *cl = m->cluster_id;
	char labels[96];

	header(b, "mooncake_client_rpc_count", "counter", "calls to the master by message");
	for (unsigned t = 0; t < MC_CM_RPC_TYPES; t++)
		if (ld(&m->rpc[t].count))
			mc_buf_appendf(
				b,
				"mooncake_client_rpc_count{cluster_id=\"%s\",rpc_name=\"%s\"} %" PRIu64
				"\n",
				cl, mc_store_msg_name((uint16_t)t), ld(&m->rpc[t].count));
	header(b, "mooncake_client_rpc_errors", "counter",
	       "calls to the master that failed, by message");
	for (unsigned t = 0; t < MC_CM_RPC_TYPES; t++)
		if (ld(&m->rpc[t].count))
			mc_buf_appendf(
				b,
				"mooncake_client_rpc_errors{cluster_id=\"%s\",rpc_name=\"%s\"} %" PRIu64
				"\n",
				cl, mc_store_msg_name((uint16_t)t), ld(&m->rpc[t].errors));
	header(b, "mooncake_client_rpc_latency", "histogram",
	       "round trip of calls to the master by message, microseconds");
	for (unsigned t = 0; t < MC_CM_RPC_TYPES; t++)
		if (ld(&m->rpc[t].count)) {
			snprintf(labels, sizeof(labels), ",rpc_name=\"%s\"",
				 mc_store_msg_name((uint16_t)t));
			hist_lines(b, "mooncake_client_rpc_latency", cl, labels,
				   &m->rpc[t].latency);
		}
}

void mc_client_metrics_prometheus(const struct mc_client_metrics *m, struct mc_buf *b)
{
	const char *cl = m->cluster_id;

	header(b, "mooncake_transfer_read_bytes", "counter",
	       "object bytes read by successful get calls");
	mc_buf_appendf(b, "mooncake_transfer_read_bytes{cluster_id=\"%s\"} %" PRIu64 "\n", cl,
		       ld(&m->read_bytes));
	header(b, "mooncake_transfer_write_bytes", "counter",
	       "object bytes written by successful put calls");
	mc_buf_appendf(b, "mooncake_transfer_write_bytes{cluster_id=\"%s\"} %" PRIu64 "\n", cl,
		       ld(&m->write_bytes));
	header(b, "mooncake_client_checksum_mismatch_total", "counter",
	       "replicas read whose bytes failed the object's checksum (each was reported "
	       "to the master and the next replica read)");
	mc_buf_appendf(b,
		       "mooncake_client_checksum_mismatch_total{cluster_id=\"%s\"} %" PRIu64 "\n",
		       cl, ld(&m->checksum_mismatches));
	header(b, "mooncake_client_location_cache_total", "counter",
	       "gets that found a live cached replica location (hit), found none (miss), and "
	       "cached reads that failed or failed their checksum and asked the master (stale)");
	mc_buf_appendf(b,
		       "mooncake_client_location_cache_total{cluster_id=\"%s\",result=\"hit\"} "
		       "%" PRIu64 "\n"
		       "mooncake_client_location_cache_total{cluster_id=\"%s\",result=\"miss\"} "
		       "%" PRIu64 "\n"
		       "mooncake_client_location_cache_total{cluster_id=\"%s\",result=\"stale\"} "
		       "%" PRIu64 "\n",
		       cl, ld(&m->loc_hits), cl, ld(&m->loc_misses), cl, ld(&m->loc_stale));
	for (size_t h = 0; h < MC_CM_NHIST; h++) {
		header(b, hist_names[h], "histogram", "call latency, microseconds");
		hist_lines(b, hist_names[h], cl, "", &m->hist[h]);
	}
	op_series(m, b, DIR_READ);
	op_series(m, b, DIR_WRITE);
	rpc_series(m, b);
}

/* ---- summary ---------------------------------------------------------------------- */

/* The smallest bucket bound at or above quantile q of h; 0 when h is empty. */
static uint64_t hist_quantile(const struct mc_cm_hist *h, double q)
{
	uint64_t n = 0, cum = 0, want;
	for (size_t i = 0; i <= MC_CM_NBOUNDS; i++)
		n += ld(&h->bucket[i]);
	if (!n)
		return 0;
	want = (uint64_t)(q * (double)n);
	if (want < 1)
		want = 1;
	for (size_t i = 0; i < MC_CM_NBOUNDS; i++) {
		cum += ld(&h->bucket[i]);
		if (cum >= want)
			return mc_cm_bounds_us[i];
	}
	return UINT64_MAX;
}

static void summary_hist(struct mc_buf *b, const char *what, const struct mc_cm_hist *h)
{
	uint64_t n = ld(&h->count), p50 = hist_quantile(h, 0.5), p99 = hist_quantile(h, 0.99);
	mc_buf_appendf(b, "%s: %" PRIu64 " calls", what, n);
	if (n)
		mc_buf_appendf(b, ", mean %.1f us, p50 <= %" PRIu64 " us, p99 %s%" PRIu64 " us",
			       (double)ld(&h->sum_us) / (double)n, p50,
			       p99 == UINT64_MAX ? "> " : "<= ",
			       p99 == UINT64_MAX ? mc_cm_bounds_us[MC_CM_NBOUNDS - 1] : p99);
	mc_buf_appendf(b, "\n");
}

void mc_client_metrics_summary(const struct mc_client_metrics *m, struct mc_buf *b)
{
	static const char *const hist_titles[MC_CM_NHIST] = {"Put", "Get", "Batch put",
							     "Batch get"};
	mc_buf_appendf(b, "Cluster: %s\n", m->cluster_id);
	mc_buf_appendf(b, "Bytes written: %" PRIu64 ", read: %" PRIu64 "\n", ld(&m->write_bytes),
		       ld(&m->read_bytes));
	for (size_t h = 0; h < MC_CM_NHIST; h++)
		summary_hist(b, hist_titles[h], &m->hist[h]);
	for (size_t i = 0; i < MC_CM_NOPS; i++)
		if (ld(&m->ops[i].count))
			mc_buf_appendf(b,
				       "  %s: %" PRIu64 " calls, %" PRIu64 " failed, %" PRIu64
				       " bytes\n",
				       ops[i].name, ld(&m->ops[i].count), ld(&m->ops[i].errors),
				       ld(&m->ops[i].bytes));
}
