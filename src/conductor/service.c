/*
 * conductor/service.c - mooncake_conductor's HTTP API over Algorithm 1
 * (service.h; docs/conductor.md, "The daemon").
 *
 * What it holds.  A table of instances (prefill and decode), each with the
 * store segment its KV cache lives in, its transfer rate, when it last
 * reported, and its load: for a prefill instance when its queue drains
 * (free_at: the last report's queue plus the requests admitted on it
 * since), for a decode instance a list of jobs in sched.h's shape (the
 * last reported context as one job starting at the report, plus every
 * request admitted since, starting when its prefill is predicted to end).
 * One mutex guards the table; libmicrohttpd's pool threads run the
 * handlers.
 *
 * Why it is shaped so.  The prefix match of every instance is the store's
 * truth, not ours: /schedule sends the request's keys to the master in one
 * BatchGetReplicaList, walks the keys in order and, for each complete
 * memory replica, maps its segment name to the prefill instance registered
 * with that segment; an instance's prefix is the run of leading keys it
 * holds.  Nothing of the answer outlives the call, so a block evicted or a
 * segment unmounted stops counting at the next call.  The RPC runs without
 * the table's lock (it needs nothing from the table), the matching and
 * the choice under it.  The choice itself is mc_sched_pick with the cost
 * model, and an admitted request is booked with mc_sched_commit_prefill
 * and as a decode job; a rejected one (an SLO broken, paper 4.5) is
 * answered 429 and books nothing.
 *
 * The answer is written by hand (answer.c) into a buffer each HTTP thread
 * keeps with the call's per-instance tables (struct scratch, behind a
 * thread key), so a /schedule allocates only what the request's decoding
 * and the master's reply need; a jansson tree with an object per reused
 * block used to cost more than the store lookup.
 *
 * An instance that has not reported for instance_timeout is not offered
 * to the scheduler (it stays listed, "up": false, and comes back with its
 * next report); DELETE forgets it.
 *
 * What it must never do: keep a second map of blocks to instances (it
 * would drift from the store), hold the table's lock across an RPC, or
 * answer a bad request with anything but a 4xx naming the cause.  The
 * GetReplicaList it sends grants the master's read leases on the keys it
 * finds, as any reader's does: the blocks about to be fetched are safe
 * from eviction for the lease's time.
 */
#define MC_LOG_MODULE "conductor"
#include "conductor/service.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/http.h"
#include "base/log.h"
#include "base/time.h"
#include "conductor/answer.h"
#include "conductor/request.h"
#include "store/master_conn.h"
#include "store/proto.h"

#define CT_JSON	      "application/json; charset=utf-8"
#define ID_MAX	      MC_CONDUCTOR_ID_MAX
#define MAX_INSTANCES 4096

/* ---- configuration ------------------------------------------------------- */

#define CF(field) offsetof(struct mc_conductor_config, field)
#define ROW(name, type, def, off, lo, hi, doc)                   \
	{                                                        \
		.f = { name, NULL, def, doc, off, type, lo, hi } \
	}

const struct mc_config_entry mc_conductor_config_table[] = {
	ROW("host", MC_CONFIG_STRING, "0.0.0.0", CF(host), 0, 0, "HTTP bind address"),
	ROW("port", MC_CONFIG_INT, "8090", CF(port), 0, 65535, "HTTP port (0: any free port)"),
	ROW("master_server_address", MC_CONFIG_STRING, "127.0.0.1:50051", CF(master_server_address),
	    0, 0, "the store's master (host:port); every /schedule asks it where the blocks are"),
	ROW("tenant", MC_CONFIG_STRING, "", CF(tenant), 0, 0,
	    "store tenant of the block keys (empty: the default tenant)"),
	ROW("key_prefix", MC_CONFIG_STRING, "kv_", CF(key_prefix), 0, 0,
	    "store key of an integer block key (and of hashed tokens): this prefix and the key "
	    "as 16 lowercase hex digits"),
	{.f = {"instance_timeout", NULL, "10",
	       "an instance that has not reported its load for "
	       "this long is out of scheduling (s, or ms/s/m/h)",
	       CF(instance_timeout_ms), MC_CONFIG_DURATION, 1, INT64_MAX},
	 .bare_unit_ms = 1000,
	 .store_unit_ms = 1},
	ROW("http_threads", MC_CONFIG_INT, "4", CF(http_threads), 1, 256,
	    "threads serving the HTTP API"),
	ROW("max_body", MC_CONFIG_SIZE, "16m", CF(max_body), 1024, 1ll << 32,
	    "bytes of a request body at most (413 beyond)"),
	ROW("max_keys", MC_CONFIG_INT, "65536", CF(max_keys), 1, 1 << 20,
	    "block keys of one /schedule at most"),
	ROW("policy", MC_CONFIG_STRING, "global", CF(policy), 0, 0,
	    "prefill selection: random, load, prefix, local or global (Algorithm 1)"),
	ROW("reject", MC_CONFIG_BOOL, "true", CF(sched) + offsetof(struct mc_sched_config, reject),
	    0, 0, "answer 429 when the predicted TTFT or TBT breaks its SLO (4.5)"),
	ROW("prefill_model", MC_CONFIG_STRING, NULL, CF(prefill_model), 0, 0,
	    "JSON file of cost-model options (a fitted prefill regression, "
	    "{\"prefill_lin_s\": .., \"prefill_quad_s\": ..}), applied before the cost-model flags"),
	ROW("virtual_clock", MC_CONFIG_BOOL, "false", CF(virtual_clock), 0, 0,
	    "schedule in the clients' clock: every /schedule and load report carries \"now_s\" "
	    "(s) and queues are booked in that time (replays); liveness stays in wall time"),
	ROW("help", MC_CONFIG_BOOL, "false", CF(help), 0, 0, "print this help"),
};
const size_t mc_conductor_config_table_len = MC_ARRAY_SIZE(mc_conductor_config_table);

void mc_conductor_config_defaults(struct mc_conductor_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	mc_sched_config_defaults(&cfg->sched);
	mc_costmodel_defaults(&cfg->cost);
	/* last: the daemon's own rows (reject) win over the scheduler's */
	mc_config_entry_defaults(mc_conductor_config_table, mc_conductor_config_table_len, cfg);
}

void mc_conductor_config_release(struct mc_conductor_config *cfg)
{
	mc_config_entry_release(mc_conductor_config_table, mc_conductor_config_table_len, cfg);
}

/* ---- state --------------------------------------------------------------- */

enum role { ROLE_PREFILL, ROLE_DECODE };

struct inst {
	char id[ID_MAX + 1];
	char *segment; /* "" for a decode instance registered without one */
	size_t segment_len;
	enum role role;
	double bandwidth_Bps; /* 0: the cost model's */
	int64_t capacity_blocks;
	double last_seen_s; /* registration or the last load report */
	/* prefill */
	double free_at_s;
	/* decode */
	struct mc_sched_decode_job *jobs;
	size_t n_jobs, cap_jobs;
	/* as reported */
	double running_requests, queue_tokens, ctx_tokens;
	uint64_t scheduled, fetch_source; /* admitted here; blocks fetched from here */
};

struct mc_conductor {
	struct mc_conductor_config cfg; /* a copy; of its strings only master_server_address
					 * (our own copy) is set, the rest are NULL */
	char *tenant, *key_prefix;
	struct mc_master_conn *conn;
	struct mc_http *http;
	pthread_mutex_t lock;	   /* insts, n_insts, rng, every struct inst */
	pthread_key_t scratch_key; /* each HTTP thread's struct scratch */
	bool have_key;
	struct inst **insts;
	size_t n_insts;
	uint64_t rng;
	double vnow; /* --virtual_clock: the latest now_s given */
};

static double now_s(void)
{
	return (double)mc_now_ns() / 1e9;
}

static bool inst_up(const struct mc_conductor *c, const struct inst *in, double wall)
{
	return wall - in->last_seen_s <= (double)c->cfg.instance_timeout_ms / 1000.0;
}

/* The scheduling time of a call that gave now_s (-1: none) at wall time
 * wall: wall itself, or with --virtual_clock the client's now_s, which is
 * then required (and refused without the flag, never ignored). */
static mc_status call_time(struct mc_conductor *c, double given, double wall, double *out)
{
	if (!c->cfg.virtual_clock) {
		if (given >= 0)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "\"now_s\" is taken only by a conductor started with "
					    "--virtual_clock");
		*out = wall;
		return MC_OK;
	}
	if (given < 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "\"now_s\" (the call's time in the client's clock, s) is "
				    "required: this conductor runs with --virtual_clock");
	*out = given;
	return MC_OK;
}

static struct inst *inst_find_locked(struct mc_conductor *c, const char *id, size_t *idx_out)
{
	for (size_t i = 0; i < c->n_insts; i++)
		if (strcmp(c->insts[i]->id, id) == 0) {
			if (idx_out)
				*idx_out = i;
			return c->insts[i];
		}
	return NULL;
}

static void inst_free(struct inst *in)
{
	if (!in)
		return;
	mc_free(in->segment);
	mc_free(in->jobs);
	mc_free(in);
}

/* Drop the decode jobs that will have ended by now (start + t_d). */
static void jobs_prune(struct mc_conductor *c, struct inst *in, double now)
{
	size_t w = 0;
	for (size_t r = 0; r < in->n_jobs; r++)
		if (in->jobs[r].start_s + c->cfg.sched.decode_time_s > now)
			in->jobs[w++] = in->jobs[r];
	in->n_jobs = w;
}

/* Never NULL: a NULL list makes sched.h read ctx_tokens instead of the jobs. */
static const struct mc_sched_decode_job *jobs_of(const struct inst *in)
{
	static const struct mc_sched_decode_job none[1];
	return in->jobs ? in->jobs : none;
}

static mc_status jobs_add(struct inst *in, double start_s, double ctx)
{
	if (in->n_jobs == in->cap_jobs) {
		size_t cap = in->cap_jobs ? in->cap_jobs * 2 : 16;
		struct mc_sched_decode_job *j = mc_realloc(in->jobs, cap * sizeof(*j));
		if (!j)
			return mc_set_error(MC_ERR_NOMEM, "no memory for decode jobs");
		in->jobs = j;
		in->cap_jobs = cap;
	}
	in->jobs[in->n_jobs++] = (struct mc_sched_decode_job){
		.start_s = start_s,
		.ctx_tokens = ctx > UINT32_MAX ? UINT32_MAX : (uint32_t)ctx,
	};
	return MC_OK;
}

/* ---- responses ----------------------------------------------------------- */

/* Takes the reference to j. */
static enum MHD_Result respond_json(struct MHD_Connection *conn, unsigned code, json_t *j)
{
	char *text;
	enum MHD_Result ret;

	if (!j)
		return mc_http_respond_text(conn, 500, "{\"error\":\"out of memory\"}", CT_JSON);
	text = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(j);
	if (!text)
		return mc_http_respond_text(conn, 500, "{\"error\":\"out of memory\"}", CT_JSON);
	ret = mc_http_respond(conn, code, text, strlen(text), CT_JSON);
	free(text);
	return ret;
}

MC_PRINTF(3, 4)
static enum MHD_Result respond_error(struct MHD_Connection *conn, unsigned code, const char *fmt,
				     ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return respond_json(conn, code, json_pack("{s:s}", "error", msg));
}

/* ---- /instances ---------------------------------------------------------- */

static json_t *inst_json_locked(struct mc_conductor *c, struct inst *in, double wall, double now)
{
	json_t *j = json_pack("{s:s,s:s,s:s,s:f,s:I,s:b,s:f,s:f,s:I,s:I}", "id", in->id, "role",
			      in->role == ROLE_PREFILL ? "prefill" : "decode", "segment",
			      in->segment, "bandwidth_Bps", in->bandwidth_Bps, "capacity_blocks",
			      (json_int_t)in->capacity_blocks, "up", inst_up(c, in, wall),
			      "last_report_age_s", wall - in->last_seen_s, "running_requests",
			      in->running_requests, "scheduled", (json_int_t)in->scheduled,
			      "fetch_source_blocks", (json_int_t)in->fetch_source);
	if (!j)
		return NULL;
	if (in->role == ROLE_PREFILL) {
		json_object_set_new(j, "queue_s",
				    json_real(in->free_at_s > now ? in->free_at_s - now : 0));
	} else {
		struct mc_sched_decode d;
		jobs_prune(c, in, now);
		d = (struct mc_sched_decode){.jobs = jobs_of(in), .n_jobs = in->n_jobs};
		json_object_set_new(j, "ctx_tokens",
				    json_real(mc_sched_decode_ctx_at(&c->cfg.sched, &d, now)));
		json_object_set_new(j, "booked_jobs", json_integer((json_int_t)in->n_jobs));
	}
	return j;
}

static enum MHD_Result instances_list(void *arg, struct MHD_Connection *conn,
				      const struct mc_http_request *req)
{
	struct mc_conductor *c = arg;
	json_t *arr = json_array(), *root;
	double wall = now_s();

	(void)req;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; arr && i < c->n_insts; i++)
		json_array_append_new(arr, inst_json_locked(c, c->insts[i], wall,
							    c->cfg.virtual_clock ? c->vnow : wall));
	pthread_mutex_unlock(&c->lock);
	root = json_pack("{s:o,s:f}", "instances", arr, "instance_timeout_s",
			 (double)c->cfg.instance_timeout_ms / 1000.0);
	return respond_json(conn, 200, root);
}

/* MC_ERR_* of a request decoder (request.h) as an HTTP answer. */
static enum MHD_Result respond_decode_error(struct MHD_Connection *conn, mc_status st)
{
	unsigned code = st == MC_ERR_NOMEM ? 500 : st == MC_ERR_TOO_LARGE ? 413 : 400;
	return respond_error(conn, code, "%s", mc_last_error());
}

static enum MHD_Result instances_register(void *arg, struct MHD_Connection *conn,
					  const struct mc_http_request *req)
{
	struct mc_conductor *c = arg;
	struct mc_conductor_inst_req r;
	struct inst *in, *old;
	bool created;
	size_t idx = 0;
	mc_status st = mc_conductor_inst_req_decode(req->body, req->body_len, &r);

	if (st != MC_OK)
		return respond_decode_error(conn, st);
	in = mc_calloc(1, sizeof(*in));
	if (!in) {
		mc_conductor_inst_req_release(&r);
		return respond_error(conn, 500, "out of memory");
	}
	memcpy(in->id, r.id, sizeof(in->id));
	in->segment = r.segment; /* taken */
	in->segment_len = strlen(r.segment);
	in->role = r.decode ? ROLE_DECODE : ROLE_PREFILL;
	in->bandwidth_Bps = r.bandwidth_Bps;
	in->capacity_blocks = (int64_t)r.capacity_blocks;
	in->last_seen_s = now_s();

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; in->segment_len && i < c->n_insts; i++)
		if (strcmp(c->insts[i]->id, in->id) != 0 &&
		    strcmp(c->insts[i]->segment, in->segment) == 0) {
			enum MHD_Result ret =
				respond_error(conn, 409, "segment \"%s\" is instance \"%s\"'s",
					      in->segment, c->insts[i]->id);
			pthread_mutex_unlock(&c->lock);
			inst_free(in);
			return ret;
		}
	old = inst_find_locked(c, in->id, &idx);
	created = !old;
	if (old) {
		c->insts[idx] = in;
	} else {
		struct inst **t = c->n_insts < MAX_INSTANCES
					  ? mc_realloc(c->insts, (c->n_insts + 1) * sizeof(*t))
					  : NULL;
		if (!t) {
			pthread_mutex_unlock(&c->lock);
			inst_free(in);
			return respond_error(
				conn, c->n_insts < MAX_INSTANCES ? 500 : 400,
				"cannot add an instance (out of memory, or %d already)",
				MAX_INSTANCES);
		}
		c->insts = t;
		c->insts[c->n_insts++] = in;
	}
	mc_info("%s %s instance %s (segment \"%s\")", created ? "registered" : "re-registered",
		r.decode ? "decode" : "prefill", r.id, in->segment);
	pthread_mutex_unlock(&c->lock);
	inst_free(old);
	return respond_json(conn, created ? 201 : 200,
			    json_pack("{s:s,s:b}", "id", r.id, "created", created));
}

static enum MHD_Result instance_load(struct mc_conductor *c, struct MHD_Connection *conn,
				     const struct mc_http_request *req, const char *id)
{
	struct mc_conductor_load_req l;
	struct inst *in;
	double now = 0, wall = now_s();
	mc_status st = mc_conductor_load_req_decode(req->body, req->body_len, &l);

	if (st == MC_OK)
		st = call_time(c, l.now_s, wall, &now);
	if (st != MC_OK)
		return respond_decode_error(conn, st);
	pthread_mutex_lock(&c->lock);
	in = inst_find_locked(c, id, NULL);
	if (!in) {
		pthread_mutex_unlock(&c->lock);
		return respond_error(conn, 404, "unknown instance \"%s\"", id);
	}
	in->last_seen_s = wall;
	if (now > c->vnow)
		c->vnow = now;
	if (l.running_requests >= 0)
		in->running_requests = l.running_requests;
	if (l.queue_tokens >= 0)
		in->queue_tokens = l.queue_tokens;
	if (in->role == ROLE_PREFILL) {
		/* the instance's own account of its queue replaces our bookings */
		if (l.queue_s >= 0)
			in->free_at_s = now + l.queue_s;
		else if (l.queue_tokens >= 0)
			in->free_at_s = now + l.queue_tokens * c->cfg.cost.prefill_lin_s;
	} else if (l.ctx_tokens >= 0) {
		/* the jobs that started by now are in the reported context */
		size_t w = 0;
		for (size_t r = 0; r < in->n_jobs; r++)
			if (in->jobs[r].start_s > now)
				in->jobs[w++] = in->jobs[r];
		in->n_jobs = w;
		in->ctx_tokens = l.ctx_tokens;
		if (l.ctx_tokens > 0 && jobs_add(in, now, l.ctx_tokens) != MC_OK) {
			pthread_mutex_unlock(&c->lock);
			return respond_error(conn, 500, "out of memory");
		}
	}
	pthread_mutex_unlock(&c->lock);
	return respond_json(conn, 200, json_pack("{s:s}", "id", id));
}

static enum MHD_Result instance_delete(struct mc_conductor *c, struct MHD_Connection *conn,
				       const char *id)
{
	struct inst *in;
	size_t idx;

	pthread_mutex_lock(&c->lock);
	in = inst_find_locked(c, id, &idx);
	if (in)
		c->insts[idx] = c->insts[--c->n_insts];
	pthread_mutex_unlock(&c->lock);
	if (!in)
		return respond_error(conn, 404, "unknown instance \"%s\"", id);
	inst_free(in);
	mc_info("instance %s deregistered", id);
	return respond_json(conn, 200, json_pack("{s:s}", "deleted", id));
}

/* /instances/<id>/load (POST), /instances/<id> (DELETE) */
static enum MHD_Result instances_sub(void *arg, struct MHD_Connection *conn,
				     const struct mc_http_request *req)
{
	const char *rest = req->url + strlen("/instances/"), *slash = strchr(rest, '/');
	size_t n = slash ? (size_t)(slash - rest) : strlen(rest);
	char id[ID_MAX + 1];

	if (!mc_conductor_id_valid(rest, n))
		return respond_error(conn, 404, "no such path \"%s\"", req->url);
	memcpy(id, rest, n);
	id[n] = '\0';
	if (slash && strcmp(slash, "/load") == 0) {
		if (req->method_bit != MC_HTTP_POST)
			return respond_error(conn, 405, "%s takes POST", req->url);
		return instance_load(arg, conn, req, id);
	}
	if (slash)
		return respond_error(conn, 404, "no such path \"%s\"", req->url);
	if (req->method_bit != MC_HTTP_DELETE)
		return respond_error(conn, 405, "%s takes DELETE", req->url);
	return instance_delete(arg, conn, id);
}

/* ---- /schedule ----------------------------------------------------------- */

/* Per prefill instance, the run of leading keys its segment holds. */
static void match_prefixes_locked(struct inst **pre, size_t n_pre,
				  const struct mc_store_batch_replica_list *bl, uint32_t *prefix)
{
	for (size_t p = 0; p < n_pre; p++)
		prefix[p] = 0;
	for (uint32_t i = 0; i < bl->n_items; i++) {
		const struct mc_store_replica_list_item *it = &bl->items[i];
		bool advanced = false;
		if (it->status != MC_OK)
			break;
		for (uint32_t r = 0; r < it->list.n_replicas; r++) {
			const struct mc_store_replica *rep = &it->list.replicas[r];
			if (rep->status != MC_STORE_REPLICA_COMPLETE ||
			    rep->type != MC_STORE_REPLICA_MEMORY)
				continue;
			for (size_t p = 0; p < n_pre; p++)
				if (prefix[p] == i &&
				    pre[p]->segment_len == rep->segment_name.len &&
				    memcmp(pre[p]->segment, rep->segment_name.ptr,
					   rep->segment_name.len) == 0) {
					prefix[p] = i + 1;
					advanced = true;
				}
		}
		if (!advanced)
			break;
	}
}

/*
 * Per HTTP thread: the answer's buffer and the per-instance tables of a
 * call, kept between calls so that a /schedule allocates nothing once
 * they have grown (freed when the thread ends: the key's destructor).
 */
struct scratch {
	struct mc_buf out;
	struct mc_store_decode_arena arena; /* the master's answer decodes into it */
	size_t cap;			    /* entries of each table */
	struct inst **pre, **dec;
	struct mc_sched_prefill *sp;
	struct mc_sched_decode *sd;
	uint32_t *prefix;
	struct mc_conductor_ref *refs;
};

static void scratch_free(void *p)
{
	struct scratch *s = p;

	if (!s)
		return;
	mc_buf_release(&s->out);
	mc_free(s->arena.base);
	mc_free(s->pre);
	mc_free(s->dec);
	mc_free(s->sp);
	mc_free(s->sd);
	mc_free(s->prefix);
	mc_free(s->refs);
	mc_free(s);
}

/* This thread's scratch, or NULL. */
static struct scratch *scratch_of_thread(struct mc_conductor *c)
{
	struct scratch *s = pthread_getspecific(c->scratch_key);

	if (!s) {
		s = mc_calloc(1, sizeof(*s));
		if (!s)
			return NULL;
		mc_buf_init(&s->out);
		if (pthread_setspecific(c->scratch_key, s) != 0) {
			mc_free(s);
			return NULL;
		}
	}
	return s;
}

/*
 * The arena the master's answer for n keys decodes into, emptied: a
 * BatchGetReplicaList item takes about 48 bytes plus 200 per replica, so
 * 1 KiB a key leaves room for four replicas each; what does not fit (a
 * larger answer, or one beyond ARENA_MAX) is malloc'ed as before.
 */
#define ARENA_MIN (64u << 10)
#define ARENA_MAX (4u << 20)

static struct mc_store_decode_arena *scratch_arena(struct scratch *s, size_t n)
{
	size_t want = n > ARENA_MAX / 1024 ? ARENA_MAX : n * 1024;

	if (want < ARENA_MIN)
		want = ARENA_MIN;
	if (want > s->arena.cap) {
		uint8_t *p = mc_realloc(s->arena.base, want);
		if (p) {
			s->arena.base = p;
			s->arena.cap = want;
		}
	}
	s->arena.used = 0;
	return s->arena.base ? &s->arena : NULL;
}

/* This thread's scratch with tables of n entries at least, or NULL. */
static struct scratch *scratch_get(struct mc_conductor *c, size_t n)
{
	struct scratch *s = scratch_of_thread(c);

	if (!s)
		return NULL;
	if (n > s->cap) {
		size_t cap = n < 16 ? 16 : n * 2;
#define GROW(f)                                                   \
	do {                                                      \
		void *p_ = mc_realloc(s->f, cap * sizeof(*s->f)); \
		if (!p_)                                          \
			return NULL;                              \
		s->f = p_;                                        \
	} while (0)
		GROW(pre);
		GROW(dec);
		GROW(sp);
		GROW(sd);
		GROW(prefix);
		GROW(refs);
#undef GROW
		s->cap = cap;
	}
	mc_buf_reset(&s->out);
	return s;
}

static enum MHD_Result schedule(void *arg, struct MHD_Connection *conn,
				const struct mc_http_request *req)
{
	struct mc_conductor *c = arg;
	enum MHD_Result ret;
	struct mc_conductor_sched_opts opts = {.key_prefix = c->key_prefix,
					       .default_block = (uint32_t)c->cfg.cost.block_tokens,
					       .max_keys = (size_t)c->cfg.max_keys};
	struct mc_conductor_sched_req k;
	struct mc_store_keys_req kr;
	struct mc_store_msg resp;
	bool have_resp = false;
	struct scratch *s;
	size_t n_pre = 0, n_dec = 0;
	struct mc_costmodel cm;
	struct mc_sched_req sr;
	struct mc_sched_choice ch;
	struct mc_conductor_answer a;
	struct mc_conductor_ref dref;
	char msg[512];
	double now = 0, wall;
	mc_status st = mc_conductor_sched_req_decode(req->body, req->body_len, &opts, &k);

	if (st != MC_OK)
		return respond_decode_error(conn, st);
	if ((st = call_time(c, k.now_s, 0, &now)) != MC_OK) {
		mc_conductor_sched_req_release(&k);
		return respond_decode_error(conn, st);
	}
	/* one round trip: where every key of the request is; the answer is
	 * decoded into this thread's arena (released at the end, in it) */
	s = scratch_of_thread(c);
	mc_store_decode_arena_use(s ? scratch_arena(s, k.n) : NULL);
	kr = (struct mc_store_keys_req){
		.tenant = mc_proto_str_c(c->tenant), .n_keys = (uint32_t)k.n, .keys = k.keys};
	st = mc_master_conn_call(c->conn, MC_STORE_BATCH_GET_REPLICA_LIST, &kr, &resp);
	if (st != MC_OK) {
		ret = respond_error(conn, 502, "store master %s: %s", c->cfg.master_server_address,
				    mc_last_error());
		goto out;
	}
	have_resp = true;
	if (resp.body.batch_replica_list.n_items != k.n) {
		ret = respond_error(conn, 502, "store master answered %u of %zu keys",
				    resp.body.batch_replica_list.n_items, k.n);
		goto out;
	}

	cm = c->cfg.cost;
	cm.block_tokens = k.block_size;
	sr = (struct mc_sched_req){.input_len = k.input_len, .n_blocks = (uint32_t)k.n};
	wall = now_s();
	if (!c->cfg.virtual_clock)
		now = wall;
	pthread_mutex_lock(&c->lock);
	if (now > c->vnow)
		c->vnow = now;
	s = scratch_get(c, c->n_insts + 1);
	if (!s) {
		pthread_mutex_unlock(&c->lock);
		ret = respond_error(conn, 500, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < c->n_insts; i++) {
		struct inst *in = c->insts[i];
		if (in->role == ROLE_PREFILL) {
			s->sp[n_pre] = (struct mc_sched_prefill){.free_at_s = in->free_at_s,
								 .bandwidth_Bps = in->bandwidth_Bps,
								 .up = inst_up(c, in, wall)};
			s->refs[n_pre] = (struct mc_conductor_ref){in->id, in->segment};
			s->pre[n_pre++] = in;
		} else {
			jobs_prune(c, in, now);
			s->sd[n_dec] = (struct mc_sched_decode){.jobs = jobs_of(in),
								.n_jobs = in->n_jobs,
								.up = inst_up(c, in, wall)};
			if (!c->cfg.sched.predict_decode) {
				s->sd[n_dec].ctx_tokens =
					mc_sched_decode_ctx_at(&c->cfg.sched, &s->sd[n_dec], now);
				s->sd[n_dec].jobs = NULL;
			}
			s->dec[n_dec++] = in;
		}
	}
	match_prefixes_locked(s->pre, n_pre, &resp.body.batch_replica_list, s->prefix);
	st = mc_sched_pick(&c->cfg.sched, &cm, s->sp, n_pre, s->prefix, s->sd, n_dec, &sr, now,
			   &c->rng, &ch);
	if (st == MC_ERR_NOT_FOUND) {
		pthread_mutex_unlock(&c->lock);
		ret = respond_error(conn, 503, "no prefill instance is up (%zu registered)", n_pre);
		goto out;
	}
	if (st != MC_OK) {
		pthread_mutex_unlock(&c->lock);
		ret = respond_error(conn, 500, "scheduler: %s", mc_last_error());
		goto out;
	}
	if (ch.decode >= 0)
		dref = (struct mc_conductor_ref){s->dec[ch.decode]->id, s->dec[ch.decode]->segment};
	a = (struct mc_conductor_answer){
		.ch = &ch,
		.pre = s->refs,
		.matches = s->prefix,
		.n_pre = n_pre,
		.decode = ch.decode >= 0 ? &dref : NULL,
		.keys = k.keys,
		.n_keys = k.n,
		.echo_keys = k.hashed,
		.rid_kind = k.rid_kind,
		.rid_str = k.rid_str,
		.rid_len = k.rid_len,
		.rid_int = k.rid_int,
	};
	if (ch.verdict != MC_SCHED_ACCEPT) {
		bool ttft = ch.verdict == MC_SCHED_REJECT_TTFT;
		if (ttft)
			snprintf(msg, sizeof(msg), "predicted TTFT %.3f s exceeds the SLO of %g s",
				 ch.ttft_s, cm.ttft_slo_s);
		else if (ch.decode < 0)
			snprintf(msg, sizeof(msg), "no decode instance is up");
		else
			snprintf(msg, sizeof(msg), "predicted TBT %.4f s exceeds the SLO of %g s",
				 ch.tbt_s, cm.tbt_slo_s);
		a.error = msg;
		a.rejected = ttft ? "ttft" : "tbt";
		a.ttft_slo_s = cm.ttft_slo_s;
		a.tbt_slo_s = cm.tbt_slo_s;
	} else {
		/* admitted: book it */
		mc_sched_commit_prefill(&ch, s->sp, now);
		s->pre[ch.prefill]->free_at_s = s->sp[ch.prefill].free_at_s;
		s->pre[ch.prefill]->scheduled++;
		if (ch.fetch_from >= 0)
			s->pre[ch.fetch_from]->fetch_source += ch.fetch_blocks;
		if (ch.decode >= 0) {
			s->dec[ch.decode]->scheduled++;
			(void)jobs_add(s->dec[ch.decode], now + ch.ttft_s, k.input_len);
		}
	}
	/* under the lock: the answer names instances the table owns */
	mc_conductor_answer_encode(&a, &s->out);
	pthread_mutex_unlock(&c->lock);
	if (s->out.err != MC_OK)
		ret = respond_error(conn, 500, "out of memory");
	else
		ret = mc_http_respond(conn, ch.verdict == MC_SCHED_ACCEPT ? 200 : 429, s->out.data,
				      s->out.len, CT_JSON);
out:
	if (have_resp)
		mc_store_msg_release(&resp);
	mc_store_decode_arena_use(NULL);
	mc_conductor_sched_req_release(&k);
	return ret;
}

/* ---- server -------------------------------------------------------------- */

static enum MHD_Result health(void *arg, struct MHD_Connection *conn,
			      const struct mc_http_request *req)
{
	(void)arg;
	(void)req;
	return mc_http_respond_text(conn, 200, "{\"status\":\"ok\"}", CT_JSON);
}

static const struct mc_http_route routes[] = {
	{"/health", MC_HTTP_GET | MC_HTTP_HEAD, false, health},
	{"/instances", MC_HTTP_GET | MC_HTTP_HEAD, false, instances_list},
	{"/instances", MC_HTTP_POST, false, instances_register},
	{"/instances/", MC_HTTP_POST | MC_HTTP_DELETE, true, instances_sub},
	{"/schedule", MC_HTTP_POST, false, schedule},
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
		return respond_error(conn, 405, "%s does not take %s", req->url, req->method);
	return respond_error(conn, 404, "no such path \"%s\"", req->url);
}

mc_status mc_conductor_start(const struct mc_conductor_config *cfg, struct mc_conductor **out)
{
	struct mc_http_config hc = {0};
	struct mc_conductor *c;
	mc_status st;

	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "no memory for the conductor");
	c->cfg = *cfg;
	c->cfg.host = c->cfg.master_server_address = c->cfg.tenant = c->cfg.key_prefix = NULL;
	c->cfg.policy = c->cfg.prefill_model = NULL;
	c->rng = 0x9e3779b97f4a7c15ull;
	pthread_mutex_init(&c->lock, NULL);
	if (pthread_key_create(&c->scratch_key, scratch_free) != 0) {
		pthread_mutex_destroy(&c->lock);
		mc_free(c);
		return mc_set_error(MC_ERR_NOMEM, "no thread key for the conductor");
	}
	c->have_key = true;
	c->tenant = mc_strdup(cfg->tenant ? cfg->tenant : "");
	c->key_prefix = mc_strdup(cfg->key_prefix ? cfg->key_prefix : "");
	c->cfg.master_server_address =
		mc_strdup(cfg->master_server_address ? cfg->master_server_address : "");
	if (!c->tenant || !c->key_prefix || !c->cfg.master_server_address) {
		st = mc_set_error(MC_ERR_NOMEM, "no memory for the conductor");
		goto fail;
	}
	if (strlen(c->key_prefix) + 16 > MC_STORE_KEY_MAX) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS, "key_prefix is too long");
		goto fail;
	}
	st = mc_sched_policy_parse(cfg->policy ? cfg->policy : "global", &c->cfg.sched.policy);
	if (st != MC_OK)
		goto fail;
	st = mc_master_conn_new(c->cfg.master_server_address, &c->conn);
	if (st != MC_OK)
		goto fail;
	hc.name = "conductor http server";
	hc.host = cfg->host;
	hc.port = (uint16_t)cfg->port;
	hc.threads = (unsigned)cfg->http_threads;
	hc.idle_timeout_s = 60;
	hc.request_timeout_ms = 10000;
	hc.max_body = (size_t)cfg->max_body;
	hc.handler = handle;
	hc.arg = c;
	st = mc_http_open(&hc, &c->http);
	if (st != MC_OK)
		goto fail;
	*out = c;
	return MC_OK;
fail:
	mc_conductor_stop(c);
	return st;
}

uint16_t mc_conductor_port(const struct mc_conductor *c)
{
	return mc_http_port(c->http);
}

void mc_conductor_stop(struct mc_conductor *c)
{
	if (!c)
		return;
	mc_http_close(c->http);
	mc_master_conn_free(c->conn);
	for (size_t i = 0; i < c->n_insts; i++)
		inst_free(c->insts[i]);
	mc_free(c->insts);
	mc_free(c->tenant);
	mc_free(c->key_prefix);
	mc_free(c->cfg.master_server_address);
	/* the HTTP threads are gone and freed their scratch as they ended */
	if (c->have_key)
		pthread_key_delete(c->scratch_key);
	pthread_mutex_destroy(&c->lock);
	mc_free(c);
}
