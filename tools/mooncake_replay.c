/*
 * tools/mooncake_replay.c - replay a FAST'25 trace through the
 * conductor's caches and scheduler in virtual time (conductor/replay.h)
 * and print what the paper's figures measure.
 *
 *   mooncake_replay --trace FILE [--nodes N] [--capacity-tokens T]
 *                   [--pool global|local] [--policy random|load|prefix|local|global]
 *                   [--output-length-one] [--json FILE] ...
 *
 * By default it does not touch the store: each node's KV cache is a
 * block LRU of its own (conductor/cache.h), or one pool shared by all.
 * With --store it runs against the real store instead (replay_store.h):
 * a master, a mooncake_conductor and --nodes store clients with real
 * segments, every reused block read through the Transfer Engine.
 *
 * Flags are config tables read by base/config (--name=value or --name
 * value; a bool flag alone means true; '-' and '_' are the same): the
 * program's own, the scheduler's (--kvcache-balancing-threshold, --reject,
 * ...) and the cost model's (--prefill-lin-s, --nic-bps, --ttft-slo-s, ...).  Bad
 * flags exit 2, a trace that cannot be read exits 1.  The summary goes to
 * stdout as one line of key=value pairs; --json writes one object.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/config.h"
#include "base/flags.h"
#include "base/log.h"
#include "conductor/replay.h"
#include "conductor/trace.h"
#include "replay_store.h"

struct options {
	char *trace;
	int64_t nodes;
	int64_t decode_nodes;
	double capacity_tokens;
	char *pool;
	char *policy;
	bool output_length_one;
	bool object_lru;
	char *json;
	double speedup;
	int64_t seed;
	bool skip_bad;
	bool quiet;
	bool help;
	char *replicas_csv;
	char *csv;
	char *cost_model;
	double snapshot_every;
	bool store;
	char *master;
	char *metadata;
	char *conductor;
	uint64_t block_bytes;
	int64_t lease_ms;
};

#define OPT(n, t, d, doc, lo, hi)                                                           \
	{                                                                                   \
		.f = {#n, NULL, d, doc, offsetof(struct options, n), t, lo, hi}, .flags = 0 \
	}
#define OPTN(name, field, t, d, doc, lo, hi)                                                      \
	{                                                                                         \
		.f = {name, NULL, d, doc, offsetof(struct options, field), t, lo, hi}, .flags = 0 \
	}

static const struct mc_config_entry options_table[] = {
	OPT(trace, MC_CONFIG_STRING, NULL, "trace file (JSON Lines), required", 0, 0),
	OPT(nodes, MC_CONFIG_INT, "10", "prefill instances", 1, 4096),
	OPTN("decode_nodes", decode_nodes, MC_CONFIG_INT, "0",
	     "decode instances (0: no decode side)", 0, 4096),
	OPTN("capacity_tokens", capacity_tokens, MC_CONFIG_DOUBLE, "3e6",
	     "KV cache per prefill instance, in tokens (a whole number of 512-token blocks)", 0,
	     INT64_MAX / 2),
	OPT(pool, MC_CONFIG_STRING, "local", "local: a cache per node; global: one shared pool", 0,
	    0),
	OPT(policy, MC_CONFIG_STRING, "global", "random, load, prefix, local or global (Alg. 1)", 0,
	    0),
	OPTN("output_length_one", output_length_one, MC_CONFIG_BOOL, "false",
	     "every request generates one token (Fig. 10)", 0, 0),
	OPTN("object_lru", object_lru, MC_CONFIG_BOOL, "false",
	     "one recency per block across the nodes, as the master keeps one stamp per object: "
	     "a request refreshes every copy of its blocks (default: per node, as the reference "
	     "replay; --store is always per object)",
	     0, 0),
	OPT(json, MC_CONFIG_STRING, NULL, "write the results as one JSON object to this file", 0,
	    0),
	OPT(speedup, MC_CONFIG_DOUBLE, "1.0", "compress arrivals this many times", 0, 1000000),
	OPT(seed, MC_CONFIG_INT, "1", "seed of the random policy", 0, INT64_MAX),
	OPTN("skip_bad", skip_bad, MC_CONFIG_BOOL, "false",
	     "skip malformed trace lines (default: the first one is fatal)", 0, 0),
	OPT(quiet, MC_CONFIG_BOOL, "false", "no progress bar", 0, 0),
	OPT(help, MC_CONFIG_BOOL, "false", "print this help", 0, 0),
	OPTN("replicas_csv", replicas_csv, MC_CONFIG_STRING, NULL,
	     "write the replica counts of the keys ranked 10, 100, 1000, 10000 over time (Fig. "
	     "11) to this CSV file; local pool only (with --store: the store's own count)",
	     0, 0),
	OPT(csv, MC_CONFIG_STRING, NULL,
	    "write one CSV row per request (its choice, times and reuse) to this file; with "
	    "--store the reuse is what was read through the store",
	    0, 0),
	OPTN("cost_model", cost_model, MC_CONFIG_STRING, NULL,
	     "JSON file of cost-model options (a fitted prefill regression, ...) applied before "
	     "the cost-model flags",
	     0, 0),
	OPTN("snapshot_every", snapshot_every, MC_CONFIG_DOUBLE, "30",
	     "seconds of trace time between replica snapshots", 1, 1000000),
	OPT(store, MC_CONFIG_BOOL, "false",
	    "replay against the real store: store clients with real segments in this process, "
	    "scheduled by mooncake_conductor (docs/conductor.md)",
	    0, 0),
	OPT(master, MC_CONFIG_STRING, NULL,
	    "with --store: a running mooncake_master (host:port) instead of starting one", 0, 0),
	OPT(metadata, MC_CONFIG_STRING, NULL,
	    "with --master: the Transfer Engine metadata URI (default P2PHANDSHAKE)", 0, 0),
	OPT(conductor, MC_CONFIG_STRING, NULL,
	    "with --store: a running mooncake_conductor (host:port, its default key_prefix) "
	    "instead of starting one",
	    0, 0),
	OPTN("block_bytes", block_bytes, MC_CONFIG_SIZE, "4k",
	     "with --store: bytes stored per block (the KV of 512 tokens, scaled down)", 8,
	     1ll << 30),
	OPTN("lease_ms", lease_ms, MC_CONFIG_INT, "500",
	     "with --store: the read lease of the master it starts (ms): the pin of the "
	     "request in flight, which its reads must finish within (it pins all that was read "
	     "in that much wall time: lower it for tiny segments if puts fail)",
	     1, 60000),
};
#define N_OPTIONS (sizeof(options_table) / sizeof(options_table[0]))

static int usage_error(const char *msg)
{
	fprintf(stderr, "mooncake_replay: %s\n", msg);
	fprintf(stderr, "try 'mooncake_replay --help'\n");
	return 2;
}

/* --name=value, --name value, or a bool --name alone; '-' in names is '_'.
 * A name is looked up in the program's table, then the cost model's and
 * the scheduler's (conductor/flags.h).  The second pass (tables_only)
 * sets only the model's and the scheduler's options. */
static int parse_args(struct options *o, struct mc_replay_config *cfg, bool tables_only, int argc,
		      char **argv)
{
	const struct mc_flag_table tabs[] = {
		{options_table, N_OPTIONS, o, tables_only},
		{mc_costmodel_config_table, mc_costmodel_config_table_len, &cfg->cost, false},
		{mc_sched_config_table, mc_sched_config_table_len, &cfg->sched, false},
	};
	if (mc_flags_parse(tabs, sizeof(tabs) / sizeof(tabs[0]), argc, argv) != MC_OK)
		return usage_error(mc_last_error());
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

struct progress {
	double start;
	bool on;
};

static void show_progress(size_t done, size_t total, void *arg)
{
	struct progress *p = arg;
	double el = now_s() - p->start, rate = el > 0 ? (double)done / el : 0;
	int width = 30, fill = total ? (int)((double)done / (double)total * width) : width;
	if (!p->on)
		return;
	fprintf(stderr, "\r[%.*s%*s] %zu/%zu  %.0f req/s  eta %.1fs", fill,
		"##############################", width - fill, "", done, total, rate,
		rate > 0 ? (double)(total - done) / rate : 0);
	if (done == total)
		fputc('\n', stderr);
}

/* ---- replica counts of the hottest keys (Fig. 11) ---- */

#define N_RANKS 4
static const size_t ranks[N_RANKS] = {10, 100, 1000, 10000};

struct replicas {
	/* pass 1: cumulative replica count per key, sorted by key */
	struct mc_replay_replica *cum;
	uint64_t *cum_sum;
	size_t n_cum;
	/* pass 2: the keys at each rank and their count per snapshot */
	uint64_t rank_key[N_RANKS];
	bool rank_valid[N_RANKS];
	double *t;
	uint32_t (*count)[N_RANKS];
	size_t n_snap, cap_snap;
	bool failed;
};

/* Merge a snapshot into the cumulative counts (both sorted by key). */
static void snap_cumulate(double t_s, const struct mc_replay_replica *keys, size_t n, void *arg)
{
	struct replicas *rp = arg;
	size_t cap = rp->n_cum + n, i = 0, j = 0, m = 0;
	struct mc_replay_replica *out = malloc((cap ? cap : 1) * sizeof(*out));
	uint64_t *sum = malloc((cap ? cap : 1) * sizeof(*sum));
	if (!out || !sum) {
		free(out);
		free(sum);
		rp->failed = true;
		return;
	}
	while (i < rp->n_cum || j < n) {
		if (j == n || (i < rp->n_cum && rp->cum[i].key < keys[j].key)) {
			out[m] = rp->cum[i];
			sum[m++] = rp->cum_sum[i++];
		} else if (i == rp->n_cum || keys[j].key < rp->cum[i].key) {
			out[m] = keys[j];
			sum[m++] = keys[j++].replicas;
		} else {
			out[m] = rp->cum[i];
			sum[m++] = rp->cum_sum[i++] + keys[j++].replicas;
		}
	}
	free(rp->cum);
	free(rp->cum_sum);
	rp->cum = out;
	rp->cum_sum = sum;
	rp->n_cum = m;
}

static int cmp_rep_key(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = ((const struct mc_replay_replica *)b)->key;
	return x < y ? -1 : x > y;
}

static void snap_record(double t_s, const struct mc_replay_replica *keys, size_t n, void *arg)
{
	struct replicas *rp = arg;
	if (rp->n_snap == rp->cap_snap) {
		size_t cap = rp->cap_snap ? rp->cap_snap * 2 : 128;
		double *t = realloc(rp->t, cap * sizeof(*t));
		uint32_t(*c)[N_RANKS] = t ? realloc(rp->count, cap * sizeof(*c)) : NULL;
		if (t)
			rp->t = t;
		if (!t || !c) {
			rp->failed = true;
			return;
		}
		rp->count = c;
		rp->cap_snap = cap;
	}
	rp->t[rp->n_snap] = t_s;
	for (int k = 0; k < N_RANKS; k++) {
		const struct mc_replay_replica *e =
			rp->rank_valid[k]
				? bsearch(&rp->rank_key[k], keys, n, sizeof(*keys), cmp_rep_key)
				: NULL;
		rp->count[rp->n_snap][k] = e ? e->replicas : 0;
	}
	rp->n_snap++;
}

static const uint64_t *sort_sums;

static int cmp_rank(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	if (sort_sums[i] != sort_sums[j])
		return sort_sums[i] > sort_sums[j] ? -1 : 1;
	return i < j ? -1 : i > j;
}

/* Rank keys by cumulative replica count, highest first (ties: lower key). */
static bool pick_ranks(struct replicas *rp)
{
	size_t *idx = malloc((rp->n_cum ? rp->n_cum : 1) * sizeof(*idx));
	if (!idx)
		return false;
	for (size_t i = 0; i < rp->n_cum; i++)
		idx[i] = i;
	sort_sums = rp->cum_sum;
	qsort(idx, rp->n_cum, sizeof(*idx), cmp_rank);
	for (int k = 0; k < N_RANKS; k++) {
		rp->rank_valid[k] = ranks[k] <= rp->n_cum;
		if (rp->rank_valid[k])
			rp->rank_key[k] = rp->cum[idx[ranks[k] - 1]].key;
	}
	free(idx);
	return true;
}

/* --store --replicas-csv: the store's snapshots are kept (a store-backed
 * replay is not run twice), then ranked and followed as the two passes of
 * the cache-only replay do. */
struct kept_snaps {
	double *t;
	struct mc_replay_replica **v;
	size_t *n;
	size_t count, cap;
	bool failed;
};

static void snap_keep(double t_s, const struct mc_replay_replica *keys, size_t n, void *arg)
{
	struct kept_snaps *k = arg;
	struct mc_replay_replica *copy = malloc((n ? n : 1) * sizeof(*copy));

	if (k->count == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 128;
		double *t = realloc(k->t, cap * sizeof(*t));
		struct mc_replay_replica **v = t ? realloc(k->v, cap * sizeof(*v)) : NULL;
		size_t *c = v ? realloc(k->n, cap * sizeof(*c)) : NULL;
		if (t)
			k->t = t;
		if (v)
			k->v = v;
		if (!t || !v || !c) {
			free(copy);
			k->failed = true;
			return;
		}
		k->n = c;
		k->cap = cap;
	}
	if (!copy) {
		k->failed = true;
		return;
	}
	if (n) /* keys is NULL for an empty snapshot */
		memcpy(copy, keys, n * sizeof(*copy));
	k->t[k->count] = t_s;
	k->v[k->count] = copy;
	k->n[k->count++] = n;
}

static void kept_release(struct kept_snaps *k)
{
	for (size_t i = 0; i < k->count; i++)
		free(k->v[i]);
	free(k->t);
	free(k->v);
	free(k->n);
}

/* --csv: one row per request, written as the replay goes. */
struct req_csv {
	FILE *f;
	double block_tokens;
};

static const char REQ_CSV_HEADER[] =
	"index,arrival_s,input_length,output_length,admitted,prefill,decode,local_blocks,"
	"prefix_blocks,fetch_from,prefix_tokens,queue_s,transfer_s,prefill_s,ttft_s,tbt_s\n";

static void req_csv_row(size_t index, double arrival_s, const struct mc_trace_req *r,
			const struct mc_sched_choice *ch, void *arg)
{
	struct req_csv *c = arg;
	bool ok = ch->verdict == MC_SCHED_ACCEPT;
	fprintf(c->f, "%zu,%.6f,%u,%u,%d,%d,%d,%u,%u,%d,%u,%.6f,%.6f,%.6f,%.6f,%.6f\n", index,
		arrival_s, r->input_length, r->output_length, ok ? 1 : 0, ok ? ch->prefill : -1,
		ok ? ch->decode : -1, ok ? ch->local_blocks : 0, ok ? ch->prefix_blocks : 0,
		ok ? ch->fetch_from : -1, ok ? ch->prefix_tokens : 0, ch->queue_s, ch->transfer_s,
		ch->prefill_s, ch->ttft_s, ch->tbt_s);
}

static int write_replicas_csv(const char *path, const struct replicas *rp)
{
	FILE *f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "mooncake_replay: cannot write %s\n", path);
		return 1;
	}
	fprintf(f, "t_s,rank10,rank100,rank1000,rank10000\n");
	for (size_t i = 0; i < rp->n_snap; i++)
		fprintf(f, "%.0f,%u,%u,%u,%u\n", rp->t[i], rp->count[i][0], rp->count[i][1],
			rp->count[i][2], rp->count[i][3]);
	return fclose(f) == 0 ? 0 : 1;
}

/* Mean over the last third of the snapshots and the overall maximum. */
static json_t *replicas_json(const struct replicas *rp)
{
	json_t *o = json_object();
	size_t from = rp->n_snap - rp->n_snap / 3;
	for (int k = 0; o && k < N_RANKS; k++) {
		double sum = 0;
		uint32_t max = 0;
		char name[32];
		for (size_t i = 0; i < rp->n_snap; i++) {
			if (i >= from)
				sum += rp->count[i][k];
			if (rp->count[i][k] > max)
				max = rp->count[i][k];
		}
		snprintf(name, sizeof(name), "rank%zu", ranks[k]);
		json_object_set_new(
			o, name,
			json_pack("{s:f, s:i}", "mean_last_third",
				  rp->n_snap > from ? sum / (double)(rp->n_snap - from) : 0, "max",
				  (int)max));
	}
	return o;
}

static int write_json(const char *path, const struct options *o, const struct mc_replay_config *cfg,
		      const struct mc_replay_result *r, size_t skipped, double wall,
		      const struct replicas *rp, const char *store, json_t *extra)
{
	json_t *j = json_pack(
		"{s:s, s:i, s:i, s:f, s:I, s:s, s:s, s:b, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:I, "
		"s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:f, s:s}",
		"trace", o->trace, "nodes", (int)cfg->nodes, "decode_nodes", (int)cfg->decode_nodes,
		"capacity_tokens", o->capacity_tokens, "capacity_blocks",
		(json_int_t)cfg->capacity_blocks, "pool", cfg->global_pool ? "global" : "local",
		"policy", mc_sched_policy_name(cfg->sched.policy), "output_length_one",
		cfg->output_length_one, "kvcache_balancing_threshold",
		cfg->sched.balancing_threshold, "speedup", cfg->speedup, "requests",
		(json_int_t)r->requests, "rejected", (json_int_t)r->rejected, "input_tokens",
		(json_int_t)r->input_tokens, "hit_tokens", (json_int_t)r->hit_tokens, "fetches",
		(json_int_t)r->fetches, "fetched_blocks", (json_int_t)r->fetched_blocks,
		"token_hit_rate", r->token_hit_rate, "prefill_s_per_request",
		r->prefill_s_per_request, "ttft_avg_s", r->ttft_avg_s, "ttft_p50_s", r->ttft_p50_s,
		"ttft_p90_s", r->ttft_p90_s, "tbt_avg_s", r->tbt_avg_s, "transfer_s_per_request",
		r->transfer_s_per_request, "end_s", r->end_s, "skipped_lines", (json_int_t)skipped,
		"wall_s", wall, "store", store);
	if (j)
		json_object_set_new(j, "lru", json_string(cfg->object_lru ? "object" : "node"));
	int rc = 0;
	if (j && rp)
		json_object_set_new(j, "replicas", replicas_json(rp));
	if (j && extra)
		json_object_update(j, extra);
	if (!j) {
		fprintf(stderr, "mooncake_replay: cannot build the JSON result\n");
		return 1;
	}
	if (json_dump_file(j, path, JSON_INDENT(2) | JSON_SORT_KEYS) != 0) {
		fprintf(stderr, "mooncake_replay: cannot write %s\n", path);
		rc = 1;
	}
	json_decref(j);
	return rc;
}

/* --store: the directory of this program, where mooncake_master and
 * mooncake_conductor are built and installed beside it. */
static int run_store(const struct options *o, const struct mc_replay_config *cfg,
		     const struct mc_trace *t, const struct mc_replay_hooks *hooks,
		     struct mc_replay_result *r, struct mc_replay_store_stats *ss)
{
	char self[4096], *slash;
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	struct mc_replay_store_opts so = {
		.master = o->master,
		.metadata = o->metadata,
		.conductor = o->conductor,
		.bin_dir = self,
		.block_bytes = o->block_bytes,
		.lease_ms = (uint64_t)o->lease_ms,
	};

	if (n <= 0) {
		fprintf(stderr, "mooncake_replay: cannot find its own directory\n");
		return 1;
	}
	self[n] = '\0';
	slash = strrchr(self, '/');
	if (slash)
		*slash = '\0';
	if (mc_replay_store_run(&so, cfg, t, hooks, r, ss) != MC_OK) {
		fprintf(stderr, "mooncake_replay: %s\n", mc_last_error());
		return 1;
	}
	return 0;
}

static json_t *store_json(const struct mc_replay_store_stats *s)
{
	return json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, "
			 "s:I, s:I, s:I, s:I, s:f, s:f}",
			 "master", s->master, "conductor", s->conductor, "read_blocks",
			 (json_int_t)s->read_blocks, "fetched_read_blocks",
			 (json_int_t)s->fetched_read_blocks, "read_bytes",
			 (json_int_t)s->read_bytes, "put_blocks", (json_int_t)s->put_blocks,
			 "put_bytes", (json_int_t)s->put_bytes, "put_exists",
			 (json_int_t)s->put_exists, "put_failed", (json_int_t)s->put_failed,
			 "copied_blocks", (json_int_t)s->copied_blocks, "read_short",
			 (json_int_t)s->read_short, "bad_contents", (json_int_t)s->bad_contents,
			 "schedule_calls", (json_int_t)s->schedule_calls, "load_reports",
			 (json_int_t)s->load_reports, "decode_read_blocks",
			 (json_int_t)s->decode_read_blocks, "decode_read_bytes",
			 (json_int_t)s->decode_read_bytes, "decode_read_short",
			 (json_int_t)s->decode_read_short, "conductor_restarts",
			 (json_int_t)s->conductor_restarts, "schedule_wall_s", s->schedule_wall_s,
			 "store_wall_s", s->store_wall_s);
}

int main(int argc, char **argv)
{
	struct options o;
	struct mc_replay_config cfg;
	struct mc_replay_result r;
	struct mc_trace t;
	struct progress prog;
	struct replicas rp;
	struct mc_replay_hooks hooks;
	struct mc_replay_store_stats ss;
	json_t *extra = NULL;
	struct req_csv csv = {0};
	struct kept_snaps kept = {0};
	double t0 = now_s(), wall;
	mc_status st;
	int rc;

	memset(&rp, 0, sizeof(rp));
	mc_log_init_from_env();
	mc_config_entry_defaults(options_table, N_OPTIONS, &o);
	mc_replay_config_defaults(&cfg);
	if ((rc = parse_args(&o, &cfg, false, argc, argv)) != 0)
		goto out_opts;
	if (o.cost_model) {
		/* the file first, then the flags again so that they win */
		mc_replay_config_defaults(&cfg);
		if (mc_costmodel_load_file(&cfg.cost, o.cost_model) != MC_OK) {
			fprintf(stderr, "mooncake_replay: %s\n", mc_last_error());
			rc = 1;
			goto out_opts;
		}
		if ((rc = parse_args(&o, &cfg, true, argc, argv)) != 0)
			goto out_opts;
	}
	if (o.help) {
		printf("usage: mooncake_replay --trace FILE [flags]\n");
		mc_config_entry_print_help(options_table, N_OPTIONS, stdout);
		printf("\nscheduler (Algorithm 1):\n");
		mc_config_entry_print_help(mc_sched_config_table, mc_sched_config_table_len,
					   stdout);
		printf("\ncost model (paper.md 5.4, Table 1):\n");
		mc_config_entry_print_help(mc_costmodel_config_table, mc_costmodel_config_table_len,
					   stdout);
		goto out_opts;
	}
	if (!o.trace) {
		rc = usage_error("--trace FILE is required");
		goto out_opts;
	}
	cfg.nodes = (uint32_t)o.nodes;
	cfg.decode_nodes = (uint32_t)o.decode_nodes;
	cfg.capacity_blocks = (uint64_t)(o.capacity_tokens / cfg.cost.block_tokens);
	cfg.output_length_one = o.output_length_one;
	cfg.object_lru = o.object_lru || o.store; /* the master's LRU is per object */
	cfg.speedup = o.speedup > 0 ? o.speedup : 1;
	cfg.seed = (uint64_t)o.seed;
	if (strcmp(o.pool, "global") == 0)
		cfg.global_pool = true;
	else if (strcmp(o.pool, "local") != 0) {
		rc = usage_error("--pool is global or local");
		goto out_opts;
	}
	if (mc_sched_policy_parse(o.policy, &cfg.sched.policy) != MC_OK) {
		rc = usage_error(mc_last_error());
		goto out_opts;
	}
	if (o.replicas_csv && cfg.global_pool) {
		rc = usage_error("--replicas-csv needs --pool local (a pool holds one copy)");
		goto out_opts;
	}
	if (o.store && cfg.global_pool && cfg.nodes != 1) {
		/* one node's segment is a global pool of its capacity (Fig. 9) */
		rc = usage_error(
			"--store replays over the nodes' segments: --pool global only with "
			"--nodes 1 (one segment is the pool)");
		goto out_opts;
	}
	if (o.store && o.replicas_csv && o.master) {
		rc = usage_error(
			"--store --replicas-csv counts replicas through the admin pages of "
			"the master it starts: no --master");
		goto out_opts;
	}
	if (!o.store && (o.master || o.conductor || o.metadata)) {
		rc = usage_error("--master, --metadata and --conductor need --store");
		goto out_opts;
	}

	mc_trace_init(&t);
	if (mc_trace_load_file(&t, o.trace, o.skip_bad ? MC_TRACE_SKIP_BAD : 0) != MC_OK) {
		fprintf(stderr, "mooncake_replay: %s\n", mc_last_error());
		rc = 1;
		goto out_trace;
	}
	if (t.skipped)
		fprintf(stderr, "mooncake_replay: skipped %zu malformed lines (first: line %zu)\n",
			t.skipped, t.first_bad_line);
	prog.start = now_s();
	prog.on = !o.quiet && isatty(STDERR_FILENO);
	hooks = (struct mc_replay_hooks){.progress = show_progress, .progress_arg = &prog};
	if (o.csv) {
		if (!(csv.f = fopen(o.csv, "w"))) {
			fprintf(stderr, "mooncake_replay: %s: %s\n", o.csv, strerror(errno));
			rc = 1;
			goto out_trace;
		}
		fputs(REQ_CSV_HEADER, csv.f);
		hooks.request = req_csv_row;
		hooks.request_arg = &csv;
	}
	if (o.store) {
		if (o.replicas_csv) {
			cfg.snapshot_every_s = o.snapshot_every;
			hooks.snapshot = snap_keep;
			hooks.snapshot_arg = &kept;
		}
		if ((rc = run_store(&o, &cfg, &t, &hooks, &r, &ss)) != 0)
			goto out_trace;
		extra = store_json(&ss);
		if (o.replicas_csv) {
			for (size_t i = 0; i < kept.count; i++)
				snap_cumulate(kept.t[i], kept.v[i], kept.n[i], &rp);
			if (kept.failed || rp.failed || !pick_ranks(&rp)) {
				fprintf(stderr,
					"mooncake_replay: replica snapshots: out of memory\n");
				rc = 1;
				goto out_trace;
			}
			for (size_t i = 0; i < kept.count; i++)
				snap_record(kept.t[i], kept.v[i], kept.n[i], &rp);
			if (rp.failed) {
				fprintf(stderr,
					"mooncake_replay: replica snapshots: out of memory\n");
				rc = 1;
				goto out_trace;
			}
		}
	} else {
		if (o.replicas_csv) {
			/* pass 1 ranks the keys by cumulative replica count, pass 2
			 * (the same deterministic replay) follows the ranked keys */
			struct mc_replay_hooks h1 = {.snapshot = snap_cumulate,
						     .snapshot_arg = &rp};
			cfg.snapshot_every_s = o.snapshot_every;
			if (mc_replay_run(&cfg, &t, &h1, &r) != MC_OK || rp.failed ||
			    !pick_ranks(&rp)) {
				fprintf(stderr, "mooncake_replay: replica pass: %s\n",
					rp.failed ? "out of memory" : mc_last_error());
				rc = 1;
				goto out_trace;
			}
			hooks.snapshot = snap_record;
			hooks.snapshot_arg = &rp;
		}
		st = mc_replay_run(&cfg, &t, &hooks, &r);
		if (st != MC_OK || rp.failed) {
			fprintf(stderr, "mooncake_replay: %s\n",
				rp.failed ? "out of memory" : mc_last_error());
			rc = 1;
			goto out_trace;
		}
	}
	if (csv.f) {
		bool bad = ferror(csv.f) != 0;
		if (fclose(csv.f) != 0 || bad) {
			fprintf(stderr, "mooncake_replay: %s: write failed\n", o.csv);
			rc = 1;
		}
		csv.f = NULL;
		if (rc)
			goto out_trace;
	}
	wall = now_s() - t0;
	printf("requests=%llu rejected=%llu token_hit_rate=%.4f prefill_s_per_request=%.4f "
	       "ttft_avg_s=%.4f ttft_p50_s=%.4f ttft_p90_s=%.4f fetches=%llu nodes=%u "
	       "capacity_blocks=%llu pool=%s policy=%s wall_s=%.3f\n",
	       (unsigned long long)r.requests, (unsigned long long)r.rejected, r.token_hit_rate,
	       r.prefill_s_per_request, r.ttft_avg_s, r.ttft_p50_s, r.ttft_p90_s,
	       (unsigned long long)r.fetches, cfg.nodes, (unsigned long long)cfg.capacity_blocks,
	       cfg.global_pool ? "global" : "local", mc_sched_policy_name(cfg.sched.policy), wall);
	if (o.store)
		printf("store: master=%s conductor=%s read_blocks=%llu fetched_read_blocks=%llu "
		       "read_bytes=%llu put_blocks=%llu put_exists=%llu put_failed=%llu "
		       "copied_blocks=%llu read_short=%llu bad_contents=%llu decode_read_blocks=%llu "
		       "decode_read_short=%llu schedule_calls=%llu load_reports=%llu "
		       "schedule_us_per_call=%.1f\n",
		       ss.master, ss.conductor, (unsigned long long)ss.read_blocks,
		       (unsigned long long)ss.fetched_read_blocks,
		       (unsigned long long)ss.read_bytes, (unsigned long long)ss.put_blocks,
		       (unsigned long long)ss.put_exists, (unsigned long long)ss.put_failed,
		       (unsigned long long)ss.copied_blocks, (unsigned long long)ss.read_short,
		       (unsigned long long)ss.bad_contents,
		       (unsigned long long)ss.decode_read_blocks,
		       (unsigned long long)ss.decode_read_short,
		       (unsigned long long)ss.schedule_calls, (unsigned long long)ss.load_reports,
		       ss.schedule_calls ? ss.schedule_wall_s * 1e6 / (double)ss.schedule_calls
					 : 0);
	if (o.replicas_csv)
		rc = write_replicas_csv(o.replicas_csv, &rp);
	if (o.json && !rc)
		rc = write_json(o.json, &o, &cfg, &r, t.skipped, wall, o.replicas_csv ? &rp : NULL,
				o.store ? "real (store clients, mooncake_conductor)"
					: "none (cache-only replay)",
				extra);
out_trace:
	kept_release(&kept);
	if (csv.f)
		fclose(csv.f);
	json_decref(extra);
	mc_trace_release(&t);
	free(rp.cum);
	free(rp.cum_sum);
	free(rp.t);
	free(rp.count);
out_opts:
	mc_config_entry_release(options_table, N_OPTIONS, &o);
	return rc;
}
