/*
 * store/client_metrics.h - the store client's counters and latency
 * histograms, and the Prometheus text they print as (the client HTTP
 * server's /metrics, spec store.md 7.4).
 *
 * Everything is a relaxed atomic, bumped by the calling thread at the end
 * of a call: no lock, no allocation, two clock reads per call.  A
 * collector that is switched off (MC_STORE_CLIENT_METRIC=0) reads no
 * clock and counts nothing.
 */
#ifndef MC_STORE_CLIENT_METRICS_H
#define MC_STORE_CLIENT_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "mooncake/status.h"

/*
 * One row per public call that moves object bytes: its op_name label,
 * whether it reads (get) or writes (put), and the upstream histogram its
 * latency also goes into (PUT, GET, BATCH_PUT, BATCH_GET).
 */
#define MC_CM_OP_MAP(X)                                                           \
	X(PUT, "put", WRITE, PUT)                                                 \
	X(PUT_PARTS, "put_parts", WRITE, PUT)                                     \
	X(UPSERT, "upsert", WRITE, PUT)                                           \
	X(UPSERT_PARTS, "upsert_parts", WRITE, PUT)                               \
	X(PUT_BATCH, "put_batch", WRITE, BATCH_PUT)                               \
	X(UPSERT_BATCH, "upsert_batch", WRITE, BATCH_PUT)                         \
	X(PUT_FROM, "put_from", WRITE, PUT)                                       \
	X(UPSERT_FROM, "upsert_from", WRITE, PUT)                                 \
	X(BATCH_PUT_FROM, "batch_put_from", WRITE, BATCH_PUT)                     \
	X(BATCH_UPSERT_FROM, "batch_upsert_from", WRITE, BATCH_PUT)               \
	X(BATCH_PUT_FROM_MULTI, "batch_put_from_multi_buffers", WRITE, BATCH_PUT) \
	X(GET, "get", READ, GET)                                                  \
	X(BATCH_GET, "batch_get", READ, BATCH_GET)                                \
	X(GET_INTO, "get_into", READ, GET)                                        \
	X(BATCH_GET_INTO, "batch_get_into", READ, BATCH_GET)                      \
	X(BATCH_GET_INTO_MULTI, "batch_get_into_multi_buffers", READ, BATCH_GET)  \
	X(GET_INTO_RANGES, "get_into_ranges", READ, BATCH_GET)

enum mc_cm_op {
#define MC__CM_OP_ENUM(NAME, name, dir, hist) MC_CM_OP_##NAME,
	MC_CM_OP_MAP(MC__CM_OP_ENUM)
#undef MC__CM_OP_ENUM
		MC_CM_NOPS
};

enum mc_cm_hist_kind {
	MC_CM_HIST_PUT,
	MC_CM_HIST_GET,
	MC_CM_HIST_BATCH_PUT,
	MC_CM_HIST_BATCH_GET,
	MC_CM_NHIST
};

/* Latency buckets, microseconds (the last one is +Inf). */
#define MC_CM_NBOUNDS 18
extern const uint64_t mc_cm_bounds_us[MC_CM_NBOUNDS];

struct mc_cm_hist {
	_Atomic uint64_t bucket[MC_CM_NBOUNDS + 1]; /* not cumulative; [NBOUNDS] = above all */
	_Atomic uint64_t sum_us;
	_Atomic uint64_t count;
};

struct mc_cm_op_stats {
	_Atomic uint64_t count;	 /* calls */
	_Atomic uint64_t errors; /* calls that failed as a whole */
	_Atomic uint64_t bytes;	 /* object bytes moved by successful calls */
	struct mc_cm_hist latency;
};

/* Message types of the store protocol fit below this (proto.h pins them). */
#define MC_CM_RPC_TYPES 128

struct mc_cm_rpc_stats {
	_Atomic uint64_t count;
	_Atomic uint64_t errors;
	struct mc_cm_hist latency;
};

struct mc_client_metrics {
	bool enabled;
	char cluster_id[128];
	uint64_t started_ms; /* wall clock, for the summary */
	struct mc_cm_op_stats ops[MC_CM_NOPS];
	struct mc_cm_hist hist[MC_CM_NHIST];
	_Atomic uint64_t read_bytes, write_bytes;
	_Atomic uint64_t checksum_mismatches; /* replicas read that failed their checksum */
	/* the location cache (client_loccache.c): gets that found a live
	 * entry, that found none, and cached reads that failed (stale) */
	_Atomic uint64_t loc_hits, loc_misses, loc_stale;
	struct mc_cm_rpc_stats rpc[MC_CM_RPC_TYPES];
};

/* Zero m and read MC_STORE_CLIENT_METRIC and MC_STORE_CLUSTER_ID. */
void mc_client_metrics_init(struct mc_client_metrics *m);

/* The start of a timed call: the monotonic clock in microseconds, or 0 when
 * m is NULL or switched off (then the matching _end does nothing). */
uint64_t mc_client_metrics_start(const struct mc_client_metrics *m);

/* The end of call op started at t0: ok says whether it succeeded as a
 * whole, bytes how many object bytes it moved. */
void mc_client_metrics_op(struct mc_client_metrics *m, enum mc_cm_op op, uint64_t t0, bool ok,
			  uint64_t bytes);

/* The end of one master RPC of protocol type `type` started at t0. */
void mc_client_metrics_rpc(struct mc_client_metrics *m, uint16_t type, uint64_t t0, mc_status rc);

/* Append the Prometheus text (0.0.4) of m to b. */
void mc_client_metrics_prometheus(const struct mc_client_metrics *m, struct mc_buf *b);

/* Append a human-readable summary of m to b. */
void mc_client_metrics_summary(const struct mc_client_metrics *m, struct mc_buf *b);

/* The op's name label ("put_from"). */
const char *mc_client_metrics_op_name(enum mc_cm_op op);

#endif
