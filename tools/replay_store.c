/*
 * tools/replay_store.c - the store-backed replay of mooncake_replay
 * (replay_store.h; docs/conductor.md, "The store-backed replay").
 *
 * What it runs.  A mooncake_master and a mooncake_conductor on loopback
 * (started here as child processes, their ports read from their
 * "listening" lines, unless --master / --conductor name running ones),
 * and --nodes store clients in this process, each with a real segment of
 * capacity_blocks x block_bytes bytes, registered with the conductor as
 * prefill instances under their segment names.  Per request, in timestamp
 * order: the nodes whose queue the conductor may hold wrong are reported
 * (POST /instances/<id>/load with the queue in virtual time: the ones
 * still busy and the ones it booked since their last report), then POST
 * /schedule with the request's hash_ids as integer keys.  The chosen node
 * reads all of the answer's reused blocks through the store (one batch
 * get into a registered buffer; own and fetched alike, so the Transfer
 * Engine moves every reused byte), checks that each block holds its own
 * key, and puts the blocks past what it read with its segment preferred.
 * The hit is what was read, not what was promised: a read that falls
 * short cuts the prefix there and its prefill time is recomputed with the
 * cost model.
 *
 * Why virtual time: a replay runs far faster than the trace, and the
 * conductor's wall clock would run on between a load report and the next
 * /schedule by however long our own calls took (more under a sanitizer),
 * so its picks would depend on the machine.  The conductor is started with
 * --virtual_clock and every call carries the request's time in the trace
 * (now_s); the instances still report their queue, as real instances
 * would, and the report replaces the conductor's booking (service.c).
 *
 * Copies (paper 4.4).  A node keeps every block of the requests it ran,
 * as the cache-only replay admits them into its cache: the blocks it
 * fetched and the ones it computed that another node had stored already.
 * change_replica would add the replica through a copy task that lands
 * within a heartbeat, too late for the next request in virtual time, so
 * the replay does it synchronously: the key's replicas (GetReplicaList),
 * a forced remove, and a put of the bytes in hand with one replica on
 * each of those segments plus its own.  Without it a chain's blocks would
 * end up spread over the segments that first stored each, and no node's
 * prefix would be longer than its root.  A full segment evicts its own
 * least recently used blocks (the master's --preferred_segment_lru), by
 * the master's one recency stamp per object: what the cache-only replay
 * does with --object-lru (docs/conductor.md, Figure 11).
 *
 * What it must never do: count a block as reused that was not read, or
 * leave a child process behind (they get SIGTERM when we exit, and are
 * stopped and reaped on every path).
 */
#include "replay_store.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/config.h"
#include "base/log.h"
#include "conductor/costmodel.h"
#include "meta/curl_pool.h"
#include "mooncake/log.h"
#include "mooncake/store.h"

#define START_TIMEOUT_S 30
#define KEY_PREFIX	"kv_" /* the conductor's default key_prefix */
#define KEY_W		24
#define MAX_REPLICAS	64 /* of one key: the master honours 64 preferred segments */

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- child processes ----------------------------------------------------- */

/* A daemon we started: its stderr is read by a thread that waits for the
 * line containing want and keeps the last line for error messages. */
struct child {
	pid_t pid;
	FILE *err;
	pthread_t reader;
	bool have_reader;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const char *want;
	bool found, eof;
	char line[512], last[512];
};

static void *child_reader(void *arg)
{
	struct child *c = arg;
	char buf[512];

	while (fgets(buf, sizeof(buf), c->err)) {
		pthread_mutex_lock(&c->mu);
		snprintf(c->last, sizeof(c->last), "%s", buf);
		if (!c->found && strstr(buf, c->want)) {
			snprintf(c->line, sizeof(c->line), "%s", buf);
			c->found = true;
			pthread_cond_broadcast(&c->cv);
		}
		pthread_mutex_unlock(&c->mu);
	}
	pthread_mutex_lock(&c->mu);
	c->eof = true;
	pthread_cond_broadcast(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void child_stop(struct child *c)
{
	if (c->pid > 0) {
		kill(c->pid, SIGTERM);
		while (waitpid(c->pid, NULL, 0) < 0 && errno == EINTR)
			;
		c->pid = 0;
	}
	if (c->have_reader)
		pthread_join(c->reader, NULL); /* the pipe is at its end now */
	c->have_reader = false;
	if (c->err)
		fclose(c->err);
	c->err = NULL;
}

/* Start argv and wait for its line with want; c->line holds it. */
static mc_status child_start(struct child *c, char *const *argv, const char *want)
{
	int fds[2];
	struct timespec until;
	mc_status st = MC_OK;

	memset(c, 0, sizeof(*c));
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	c->want = want;
	if (pipe2(fds, O_CLOEXEC) != 0)
		return mc_set_error(MC_ERR_INTERNAL, "pipe: %s", strerror(errno));
	c->pid = fork();
	if (c->pid < 0) {
		close(fds[0]);
		close(fds[1]);
		return mc_set_error(MC_ERR_INTERNAL, "fork: %s", strerror(errno));
	}
	if (c->pid == 0) {
		int null = open("/dev/null", O_RDWR);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(null, 0);
		dup2(null, 1);
		dup2(fds[1], 2);
		execv(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(fds[1]);
	c->err = fdopen(fds[0], "r");
	if (!c->err) {
		close(fds[0]);
		child_stop(c);
		return mc_set_error(MC_ERR_NOMEM, "fdopen failed");
	}
	if (pthread_create(&c->reader, NULL, child_reader, c) != 0) {
		child_stop(c);
		return mc_set_error(MC_ERR_INTERNAL, "cannot start a thread");
	}
	c->have_reader = true;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += START_TIMEOUT_S;
	pthread_mutex_lock(&c->mu);
	while (!c->found && !c->eof)
		if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
			break;
	if (!c->found)
		st = mc_set_error(MC_ERR_RPC_TIMEOUT, "%s did not start within %d s%s: %s", argv[0],
				  START_TIMEOUT_S, c->eof ? " (it exited)" : "",
				  c->last[0] ? c->last : "(nothing on stderr)");
	pthread_mutex_unlock(&c->mu);
	if (st != MC_OK)
		child_stop(c);
	return st;
}

/* ---- the conductor's HTTP API -------------------------------------------- */

struct api {
	CURL *h;
	char base[96];
	struct mc_curl_body body;
	struct curl_slist *hdrs;
};

/* Run the request set up on a->h; the HTTP status, 0 on failure.  The
 * collector keeps a NUL after the bytes. */
static long api_perform(struct api *a)
{
	long code = 0;

	if (curl_easy_perform(a->h) != CURLE_OK)
		return 0;
	curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &code);
	if (mc_buf_reserve(&a->body.buf, 1) == MC_OK)
		a->body.buf.data[a->body.buf.len] = '\0';
	return code;
}

/* POST (or DELETE when body is NULL) path; the HTTP status, 0 on failure. */
static long api_call(struct api *a, const char *path, const char *body, size_t len)
{
	char url[256];

	snprintf(url, sizeof(url), "%s%s", a->base, path);
	mc_buf_reset(&a->body.buf);
	a->body.too_large = false;
	curl_easy_setopt(a->h, CURLOPT_URL, url);
	if (body) {
		curl_easy_setopt(a->h, CURLOPT_CUSTOMREQUEST, NULL);
		curl_easy_setopt(a->h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(a->h, CURLOPT_POSTFIELDSIZE, (long)len);
	} else {
		/* back to a body-less request first: a POST without fields would
		 * read its body from stdin */
		curl_easy_setopt(a->h, CURLOPT_HTTPGET, 1L);
		curl_easy_setopt(a->h, CURLOPT_CUSTOMREQUEST, "DELETE");
	}
	return api_perform(a);
}

/* GET path; the HTTP status, 0 on failure. */
static long api_get(struct api *a, const char *path)
{
	char url[16384];

	if ((size_t)snprintf(url, sizeof(url), "%s%s", a->base, path) >= sizeof(url))
		return 0;
	mc_buf_reset(&a->body.buf);
	a->body.too_large = false;
	curl_easy_setopt(a->h, CURLOPT_URL, url);
	curl_easy_setopt(a->h, CURLOPT_CUSTOMREQUEST, NULL);
	curl_easy_setopt(a->h, CURLOPT_HTTPGET, 1L);
	return api_perform(a);
}

static mc_status api_open(struct api *a, const char *addr)
{
	mc_status st = mc_curl_global_init();

	memset(a, 0, sizeof(*a));
	mc_curl_body_init(&a->body);
	if (st != MC_OK)
		return st;
	snprintf(a->base, sizeof(a->base), "http://%s", addr);
	a->h = curl_easy_init();
	a->hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	if (!a->h || !a->hdrs)
		return mc_set_error(MC_ERR_NOMEM, "no memory for an HTTP client");
	curl_easy_setopt(a->h, CURLOPT_HTTPHEADER, a->hdrs);
	curl_easy_setopt(a->h, CURLOPT_WRITEFUNCTION, mc_curl_on_body);
	curl_easy_setopt(a->h, CURLOPT_WRITEDATA, &a->body);
	curl_easy_setopt(a->h, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(a->h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(a->h, CURLOPT_TCP_NODELAY, 1L);
	return MC_OK;
}

static void api_close(struct api *a)
{
	if (a->h)
		curl_easy_cleanup(a->h);
	curl_slist_free_all(a->hdrs);
	mc_buf_release(&a->body.buf);
}

static const char *api_text(const struct api *a)
{
	return mc_curl_body_text(&a->body);
}

/* ---- nodes --------------------------------------------------------------- */

struct node {
	struct mc_store *s;
	char id[16];
	char seg[128];
	double free_at;	  /* virtual time its queue drains */
	bool need_report; /* the conductor booked it since its last report */
	double reported;  /* the queue last reported, at virtual time reported_at */
};

static void key_of(char *s, uint64_t id)
{
	snprintf(s, KEY_W, KEY_PREFIX "%016" PRIx64, id);
}

/* A block's bytes: its key, eight bytes at a time. */
static void block_fill(uint8_t *p, size_t n, uint64_t id)
{
	for (size_t i = 0; i + 8 <= n; i += 8)
		memcpy(p + i, &id, 8);
}

static bool block_check(const uint8_t *p, size_t n, uint64_t id)
{
	uint64_t a, z;

	if (n < 8)
		return true;
	memcpy(&a, p, 8);
	memcpy(&z, p + (n / 8 - 1) * 8, 8);
	return a == id && z == id;
}

/* ---- the run ------------------------------------------------------------- */

struct run {
	const struct mc_replay_store_opts *o;
	const struct mc_replay_config *cfg;
	struct child master, conductor;
	struct api api;
	struct api admin; /* the started master's admin port (replica snapshots) */
	unsigned admin_port;
	struct node *nodes;
	struct node *dnodes; /* decode instances: store clients without a segment */
	char metadata[160];
	uint32_t max_blocks;
	uint8_t *rbuf, *wbuf;
	char (*keys)[KEY_W];
	const char **kp;
	void **bufs;
	size_t *lens;
	int64_t *got;
	int *exist;
	mc_status *put_st;
	struct mc_buf body;
	double *ttfts;
	long last_code; /* of the last conductor call that failed */
};

static mc_status start_master(struct run *r, struct mc_replay_store_stats *stats)
{
	char exe[4096], lease[64];
	/* Per-node LRU (paper 4.6): a put that prefers a full segment evicts
	 * that segment's least recently used blocks (--preferred_segment_lru),
	 * and no global watermark round decides instead.  The read lease
	 * (--lease-ms, 500 ms) is the pin of the request in flight: its blocks
	 * are never evicted under it, and its reads must finish within it (a
	 * read that ends after the lease is thrown away).  As the LRU key of a
	 * block read is its lease deadline, a shorter lease keeps "read" and
	 * "put" stamps closer to the order they happened in.  Its RPC loop
	 * polls 300 us after work, as a master behind a conductor is to run
	 * (docs/conductor.md, the daemon's latency). */
	char *argv[] = {exe,
			"--preferred_segment_lru=true",
			"--rpc_busy_poll_us=300",
			"--eviction_high_watermark_ratio=1",
			lease,
			"--rpc_port=0",
			"--rpc_address=127.0.0.1",
			"--metrics_port=0",
			"--metrics_host=127.0.0.1",
			"--enable_http_metadata_server=true",
			"--http_metadata_server_port=0",
			"--http_metadata_server_host=127.0.0.1",
			NULL};
	unsigned rpc, metrics, meta;
	mc_status st;

	snprintf(exe, sizeof(exe), "%s/mooncake_master", r->o->bin_dir);
	snprintf(lease, sizeof(lease), "--default_kv_lease_ttl=%" PRIu64,
		 r->o->lease_ms ? r->o->lease_ms : 500);
	st = child_start(&r->master, argv, "mooncake_master listening");
	if (st != MC_OK)
		return st;
	if (sscanf(strstr(r->master.line, "rpc="), "rpc=%u metrics=%u metadata=%u", &rpc, &metrics,
		   &meta) != 3)
		return mc_set_error(MC_ERR_PROTOCOL, "mooncake_master said: %s", r->master.line);
	snprintf(stats->master, sizeof(stats->master), "127.0.0.1:%u", rpc);
	r->admin_port = metrics;
	snprintf(r->metadata, sizeof(r->metadata), "http://127.0.0.1:%u/metadata", meta);
	return MC_OK;
}

/* "--name=value" of entry e of obj, malloc'ed. */
static char *flag_of(const struct mc_config_entry *e, const void *obj)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	if (!f)
		return NULL;
	fprintf(f, "--%s=", e->f.name);
	mc_config_entry_print_value(e, obj, f);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* The replay's cost model as a JSON file for --prefill_model (every row of
 * its table), so the conductor predicts with the same numbers; in *path. */
static mc_status write_cost_model(const struct mc_costmodel *cm, char *path, size_t cap)
{
	int fd;
	FILE *f;

	snprintf(path, cap, "/tmp/mooncake_replay_cost.XXXXXX");
	fd = mkstemp(path);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		if (fd >= 0)
			close(fd);
		return mc_set_error(MC_ERR_INTERNAL, "cannot write %s: %s", path, strerror(errno));
	}
	fputc('{', f);
	for (size_t i = 0; i < mc_costmodel_config_table_len; i++) {
		fprintf(f, "%s\"%s\":", i ? "," : "", mc_costmodel_config_table[i].f.name);
		mc_config_entry_print_value(&mc_costmodel_config_table[i], cm, f);
	}
	fputs("}\n", f);
	if (fclose(f) != 0) {
		unlink(path);
		return mc_set_error(MC_ERR_INTERNAL, "cannot write %s", path);
	}
	return MC_OK;
}

static mc_status start_conductor(struct run *r, struct mc_replay_store_stats *stats)
{
	enum { FIXED = 10 };
	char exe[4096], master[96], policy[48], reject[32], model[64], model_flag[96];
	char *argv[FIXED + 64 + 1] = {0};
	size_t n = 0, first_sched;
	unsigned port;
	mc_status st;

	if (mc_sched_config_table_len > 64)
		return mc_set_error(MC_ERR_INTERNAL, "too many scheduler options");
	if ((st = write_cost_model(&r->cfg->cost, model, sizeof(model))) != MC_OK)
		return st;
	snprintf(exe, sizeof(exe), "%s/mooncake_conductor", r->o->bin_dir);
	snprintf(master, sizeof(master), "--master_server_address=%s", stats->master);
	snprintf(policy, sizeof(policy), "--policy=%s", mc_sched_policy_name(r->cfg->sched.policy));
	snprintf(reject, sizeof(reject), "--reject=%s", r->cfg->sched.reject ? "true" : "false");
	snprintf(model_flag, sizeof(model_flag), "--prefill_model=%s", model);
	argv[n++] = exe;
	argv[n++] = "--port=0";
	argv[n++] = "--host=127.0.0.1";
	argv[n++] = "--http_threads=1";
	argv[n++] = "--instance_timeout=1h"; /* nodes are reported as the replay needs */
	argv[n++] = "--virtual_clock=true";  /* it books in the trace's time, as we do */
	argv[n++] = master;
	argv[n++] = policy;
	argv[n++] = model_flag;
	first_sched = n;
	/* every scheduler option as the replay has it; the daemon's own
	 * --reject (which shadows the scheduler's row) last */
	for (size_t i = 0; i < mc_sched_config_table_len; i++)
		if (strcmp(mc_sched_config_table[i].f.name, "reject") != 0 &&
		    !(argv[n++] = flag_of(&mc_sched_config_table[i], &r->cfg->sched))) {
			st = mc_set_error(MC_ERR_NOMEM, "no memory for the conductor's flags");
			goto out;
		}
	argv[n++] = reject;
	argv[n] = NULL;
	st = child_start(&r->conductor, argv, "mooncake_conductor listening");
	if (st != MC_OK)
		goto out;
	if (sscanf(strstr(r->conductor.line, "port="), "port=%u", &port) != 1) {
		st = mc_set_error(MC_ERR_PROTOCOL, "mooncake_conductor said: %s",
				  r->conductor.line);
		goto out;
	}
	snprintf(stats->conductor, sizeof(stats->conductor), "127.0.0.1:%u", port);
out:
	unlink(model); /* read at its start */
	for (size_t i = first_sched; argv[i]; i++)
		if (argv[i] != reject)
			free(argv[i]);
	return st;
}

/* Register nd with the conductor: a prefill instance with its segment and
 * capacity, or (prefill false) a decode instance. */
static mc_status register_node(struct run *r, const struct node *nd, bool prefill)
{
	char body[320];
	long code;

	if (prefill)
		snprintf(body, sizeof(body),
			 "{\"id\":\"%s\",\"role\":\"prefill\",\"segment\":\"%s\","
			 "\"capacity_blocks\":%" PRIu64 "}",
			 nd->id, nd->seg, r->cfg->capacity_blocks);
	else
		snprintf(body, sizeof(body), "{\"id\":\"%s\",\"role\":\"decode\"}", nd->id);
	code = api_call(&r->api, "/instances", body, strlen(body));
	if (code != 200 && code != 201)
		return mc_set_error(MC_ERR_RPC_FAIL, "register %s with the conductor: %ld %s",
				    nd->id, code, api_text(&r->api));
	return MC_OK;
}

static mc_status nodes_open(struct run *r, const char *master)
{
	const struct mc_replay_config *cfg = r->cfg;
	uint64_t seg = cfg->capacity_blocks * r->o->block_bytes;
	size_t buf = (size_t)r->max_blocks * r->o->block_bytes;
	mc_status st;

	r->nodes = calloc(cfg->nodes, sizeof(*r->nodes));
	r->rbuf = aligned_alloc(4096, (buf + 4095) / 4096 * 4096);
	r->wbuf = malloc(buf);
	if (!r->nodes || !r->rbuf || !r->wbuf)
		return mc_set_error(MC_ERR_NOMEM, "no memory for %u nodes", cfg->nodes);
	for (uint32_t i = 0; i < cfg->nodes; i++) {
		struct node *nd = &r->nodes[i];
		struct mc_store_params p = {
			.local_hostname = "127.0.0.1",
			.metadata_server = r->metadata,
			.global_segment_size = seg,
			.protocol = "tcp",
			.master_server_addr = master,
		};
		snprintf(nd->id, sizeof(nd->id), "p%u", i);
		if ((st = mc_store_new(&nd->s)) != MC_OK)
			return st;
		if ((st = mc_store_setup(nd->s, &p)) != MC_OK)
			return mc_set_error(st, "node %u: store setup: %s", i, mc_last_error());
		/* every node reads into the one buffer: requests run one at a time */
		if ((st = mc_store_register_buffer(nd->s, r->rbuf, buf)) != MC_OK)
			return mc_set_error(st, "node %u: register buffer: %s", i, mc_last_error());
		snprintf(nd->seg, sizeof(nd->seg), "%s", mc_store_hostname(nd->s));
		if ((st = register_node(r, nd, true)) != MC_OK)
			return st;
	}
	return MC_OK;
}

/* The decode instances d0..dM-1: clients that hold no segment (decode
 * keeps its KV in its own HBM, not in the pool) and read a request's KV
 * from where prefill stored it, registered as decode instances. */
static mc_status dnodes_open(struct run *r, const char *master)
{
	size_t buf = (size_t)r->max_blocks * r->o->block_bytes;
	mc_status st;

	if (!r->cfg->decode_nodes)
		return MC_OK;
	r->dnodes = calloc(r->cfg->decode_nodes, sizeof(*r->dnodes));
	if (!r->dnodes)
		return mc_set_error(MC_ERR_NOMEM, "no memory for %u decode nodes",
				    r->cfg->decode_nodes);
	for (uint32_t i = 0; i < r->cfg->decode_nodes; i++) {
		struct node *nd = &r->dnodes[i];
		struct mc_store_params p = {
			.local_hostname = "127.0.0.1",
			.metadata_server = r->metadata,
			.protocol = "tcp",
			.master_server_addr = master,
		};
		snprintf(nd->id, sizeof(nd->id), "d%u", i);
		if ((st = mc_store_new(&nd->s)) != MC_OK)
			return st;
		if ((st = mc_store_setup(nd->s, &p)) != MC_OK)
			return mc_set_error(st, "decode node %u: store setup: %s", i,
					    mc_last_error());
		if ((st = mc_store_register_buffer(nd->s, r->rbuf, buf)) != MC_OK)
			return mc_set_error(st, "decode node %u: register buffer: %s", i,
					    mc_last_error());
		if ((st = register_node(r, nd, false)) != MC_OK)
			return st;
	}
	return MC_OK;
}

static void node_close(struct run *r, struct node *nd)
{
	char path[64];

	if (!nd->s)
		return;
	snprintf(path, sizeof(path), "/instances/%s", nd->id);
	if (r->api.h && r->o->conductor)
		(void)api_call(&r->api, path, NULL, 0); /* a running one forgets us */
	mc_store_unregister_buffer(nd->s, r->rbuf);
	mc_store_close(nd->s);
	mc_store_free(nd->s);
}

static void nodes_close(struct run *r)
{
	/* the clients close one by one and the others' same-host lanes to them
	 * warn as they go down: expected here, so quiet unless asked for */
	if (!getenv("MC_LOG_LEVEL") && mc_log_get_level() > MC_LOG_ERROR)
		mc_log_set_level(MC_LOG_ERROR);
	for (uint32_t i = 0; r->dnodes && i < r->cfg->decode_nodes; i++)
		node_close(r, &r->dnodes[i]);
	for (uint32_t i = 0; r->nodes && i < r->cfg->nodes; i++)
		node_close(r, &r->nodes[i]);
	free(r->dnodes);
	free(r->nodes);
	free(r->rbuf);
	free(r->wbuf);
}

/* Report the nodes whose queue the conductor may hold wrong at time now. */
static mc_status report_loads(struct run *r, double now, struct mc_replay_store_stats *stats)
{
	for (uint32_t i = 0; i < r->cfg->nodes; i++) {
		struct node *nd = &r->nodes[i];
		double q = nd->free_at > now ? nd->free_at - now : 0;
		char path[64], body[96];
		long code;

		if (!nd->need_report && q == 0 && nd->reported == 0)
			continue;
		snprintf(path, sizeof(path), "/instances/%s/load", nd->id);
		snprintf(body, sizeof(body), "{\"queue_s\":%.17g,\"now_s\":%.17g}", q, now);
		code = api_call(&r->api, path, body, strlen(body));
		if (code != 200) {
			r->last_code = code;
			return mc_set_error(MC_ERR_RPC_FAIL, "%s: %ld %s", path, code,
					    code ? api_text(&r->api) : "no answer");
		}
		nd->need_report = false;
		nd->reported = q;
		stats->load_reports++;
	}
	return MC_OK;
}

static int dnode_of(const struct run *r, json_t *ref)
{
	const char *id = json_string_value(json_object_get(ref, "id"));
	for (uint32_t i = 0; id && r->dnodes && i < r->cfg->decode_nodes; i++)
		if (strcmp(r->dnodes[i].id, id) == 0)
			return (int)i;
	return -1;
}

static int node_of(const struct run *r, json_t *ref)
{
	const char *id = json_string_value(json_object_get(ref, "id"));
	for (uint32_t i = 0; id && i < r->cfg->nodes; i++)
		if (strcmp(r->nodes[i].id, id) == 0)
			return (int)i;
	return -1;
}

static double num(json_t *o, const char *a, const char *b)
{
	json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_number_value(v);
}

/* Make nd hold a replica of key (its bytes at data): the key's replicas
 * plus nd's, written anew (remove, then put with every segment preferred). */
static void keep_copy(struct run *r, struct node *nd, const char *key, const void *data,
		      struct mc_replay_store_stats *stats)
{
	struct mc_store_replica_desc d[MAX_REPLICAS];
	const char *segs[MAX_REPLICAS];
	size_t n = 0;
	int64_t got = mc_store_get_replica_desc(nd->s, key, d, MAX_REPLICAS);
	struct mc_store_config pc = {0};

	for (int64_t i = 0; i < got && i < MAX_REPLICAS; i++) {
		if (d[i].type != 0 || d[i].status != 3)
			continue;
		if (strcmp(d[i].segment_name, nd->seg) == 0)
			return; /* it has one already */
		segs[n++] = d[i].segment_name;
	}
	if (n == MAX_REPLICAS)
		n--;
	segs[n++] = nd->seg;
	if (got > 0)
		(void)mc_store_remove(nd->s, key, true);
	pc.replica_num = (uint32_t)n;
	pc.preferred_segments = segs;
	pc.n_preferred_segments = n;
	if (mc_store_put(nd->s, key, data, r->o->block_bytes, &pc) == MC_OK)
		stats->copied_blocks++;
	else
		stats->put_failed++;
}

/* The answer's choice as the scheduler's struct (sched.h), instances as
 * indices into nodes and dnodes (-1: none), for the per-request hook. */
static void choice_of(const struct run *r, json_t *j, struct mc_sched_choice *ch)
{
	const char *rej = json_string_value(json_object_get(j, "rejected"));

	*ch = (struct mc_sched_choice){
		.prefill = node_of(r, json_object_get(j, "prefill")),
		.decode = dnode_of(r, json_object_get(j, "decode")),
		.local_blocks = (uint32_t)json_integer_value(json_object_get(j, "local_blocks")),
		.prefix_blocks = (uint32_t)json_integer_value(json_object_get(j, "prefix_blocks")),
		.fetch_from = node_of(r, json_object_get(j, "fetch_from")),
		.queue_s = num(j, "predicted", "queue_s"),
		.transfer_s = num(j, "predicted", "transfer_s"),
		.prefill_s = num(j, "predicted", "prefill_s"),
		.ttft_s = num(j, "ttft_s", NULL),
		.tbt_s = num(j, "tbt_s", NULL),
		.verdict = !rej			      ? MC_SCHED_ACCEPT
			   : strcmp(rej, "ttft") == 0 ? MC_SCHED_REJECT_TTFT
						      : MC_SCHED_REJECT_TBT,
	};
	ch->fetch_blocks = ch->prefix_blocks - ch->local_blocks;
}

/* One request: schedule, read, put, book.  *ch is the choice as it ran:
 * the answer's, with the prefix cut to what was read and the times of
 * its booking (its verdict not MC_SCHED_ACCEPT: answered 429). */
static mc_status one_request(struct run *r, const struct mc_trace_req *tr, size_t idx, double now,
			     struct mc_replay_result *out, struct mc_replay_store_stats *stats,
			     struct mc_sched_choice *ch)
{
	const struct mc_costmodel *cm = &r->cfg->cost;
	const uint64_t bb = r->o->block_bytes;
	struct node *nd;
	json_t *j;
	json_error_t jerr;
	long code;
	int p, from, dec;
	uint32_t prefix, local, read = 0, n_new = 0, n_put = 0;
	double t0, queue, transfer, prefill;
	struct mc_store_config pc = {.replica_num = 1};

	mc_buf_reset(&r->body);
	mc_buf_append_str(&r->body, "{\"keys\":[");
	for (uint32_t k = 0; k < tr->n_blocks; k++)
		mc_buf_appendf(&r->body, "%s%" PRIu64, k ? "," : "", tr->hash_ids[k]);
	mc_buf_appendf(&r->body, "],\"input_length\":%u,\"request_id\":%zu,\"now_s\":%.17g}",
		       tr->input_length, idx, now);
	if (r->body.err != MC_OK)
		return r->body.err;
	t0 = wall_s();
	code = api_call(&r->api, "/schedule", (const char *)r->body.data, r->body.len);
	stats->schedule_wall_s += wall_s() - t0;
	stats->schedule_calls++;
	if (code != 200 && code != 429) {
		r->last_code = code;
		return mc_set_error(MC_ERR_RPC_FAIL, "/schedule of request %zu: %ld %s", idx, code,
				    code ? api_text(&r->api) : "no answer");
	}
	j = json_loads(api_text(&r->api), 0, &jerr);
	if (!j)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "/schedule answered no JSON: %s",
				    jerr.text);
	choice_of(r, j, ch);
	json_decref(j);
	if (code == 429) {
		if (ch->verdict == MC_SCHED_ACCEPT)
			return mc_set_error(MC_ERR_PROTOCOL,
					    "/schedule of request %zu: a 429 without \"rejected\"",
					    idx);
		ch->prefix_tokens = 0;
		return MC_OK;
	}
	p = ch->prefill;
	from = ch->fetch_from;
	dec = ch->decode;
	prefix = ch->prefix_blocks;
	local = ch->local_blocks;
	transfer = ch->transfer_s;
	prefill = ch->prefill_s;
	if (ch->verdict != MC_SCHED_ACCEPT || p < 0 || prefix > tr->n_blocks || local > prefix ||
	    (r->cfg->decode_nodes && dec < 0))
		return mc_set_error(MC_ERR_PROTOCOL,
				    "/schedule of request %zu: an answer we "
				    "cannot follow (prefill node, prefix)",
				    idx);
	nd = &r->nodes[p];

	/* read every reused block through the store */
	t0 = wall_s();
	for (uint32_t k = 0; k < tr->n_blocks; k++) {
		key_of(r->keys[k], tr->hash_ids[k]);
		r->kp[k] = r->keys[k];
		r->bufs[k] = r->rbuf + (size_t)k * bb;
		r->lens[k] = bb;
	}
	if (prefix) {
		(void)mc_store_batch_get_into(nd->s, r->kp, r->bufs, r->lens, prefix, r->got);
		while (read < prefix && r->got[read] == (int64_t)bb) {
			if (!block_check(r->bufs[read], bb, tr->hash_ids[read]))
				stats->bad_contents++;
			read++;
		}
	}
	stats->read_blocks += read;
	stats->read_bytes += read * bb;
	if (read > local)
		stats->fetched_read_blocks += read - local;
	/* the fetched blocks: this node keeps a copy (4.4) */
	for (uint32_t k = local; k < read; k++)
		keep_copy(r, nd, r->keys[k], r->bufs[k], stats);
	/* store what was computed, on this node's segment; a block another
	 * node stored first (a put would leave it where it is) gets a copy */
	for (uint32_t k = read; k < tr->n_blocks; k++) {
		uint8_t *w = r->wbuf + (size_t)n_new * bb;
		block_fill(w, bb, tr->hash_ids[k]);
		r->kp[n_new] = r->keys[k];
		r->bufs[n_new] = w;
		r->lens[n_new++] = bb;
	}
	if (n_new && mc_store_batch_is_exist(nd->s, r->kp, n_new, r->exist) != MC_OK)
		for (uint32_t k = 0; k < n_new; k++)
			r->exist[k] = 0; /* unknown: put, and count what the put says */
	for (uint32_t k = 0; k < n_new; k++) {
		if (r->exist[k] == 1) {
			stats->put_exists++;
			keep_copy(r, nd, r->kp[k], r->bufs[k], stats);
			continue;
		}
		r->kp[n_put] = r->kp[k];
		r->bufs[n_put] = r->bufs[k];
		r->lens[n_put++] = bb;
	}
	n_new = n_put;
	if (n_new) {
		pc.preferred_segment = nd->seg;
		(void)mc_store_put_batch(nd->s, r->kp, (const void *const *)r->bufs, r->lens, n_new,
					 &pc, r->put_st);
		for (uint32_t k = 0; k < n_new; k++) {
			if (r->put_st[k] == MC_OK) {
				stats->put_blocks++;
				stats->put_bytes += bb;
			} else {
				stats->put_failed++;
			}
		}
	}
	/* decode: its instance reads the request's whole KV from the pool (the
	 * prefill-to-decode transfer of 3.1), every block checked */
	if (dec >= 0) {
		uint32_t got = 0;

		for (uint32_t k = 0; k < tr->n_blocks; k++) {
			r->kp[k] = r->keys[k];
			r->bufs[k] = r->rbuf + (size_t)k * bb;
			r->lens[k] = bb;
		}
		(void)mc_store_batch_get_into(r->dnodes[dec].s, r->kp, r->bufs, r->lens,
					      tr->n_blocks, r->got);
		for (uint32_t k = 0; k < tr->n_blocks; k++) {
			if (r->got[k] != (int64_t)bb)
				continue;
			if (!block_check(r->bufs[k], bb, tr->hash_ids[k]))
				stats->bad_contents++;
			got++;
		}
		stats->decode_read_blocks += got;
		stats->decode_read_bytes += got * bb;
		if (got < tr->n_blocks)
			stats->decode_read_short++;
	}
	stats->store_wall_s += wall_s() - t0;

	/* book it in virtual time; the hit is what was read */
	if (read < prefix) {
		double hit = fmin((double)read * cm->block_tokens, tr->input_length);
		stats->read_short++;
		prefill = mc_cost_prefill_s(cm, tr->input_length, hit);
		transfer =
			read > local
				? mc_cost_transfer_s(cm, (double)(read - local) * cm->block_tokens,
						     mc_cost_transfer_Bps(cm))
				: 0;
	}
	queue = nd->free_at > now ? nd->free_at - now : 0;
	ch->queue_s = queue;
	ch->transfer_s = transfer;
	ch->prefill_s = prefill;
	ch->ttft_s = mc_cost_ttft_s(queue, transfer, prefill);
	ch->prefix_blocks = read;
	ch->local_blocks = local < read ? local : read;
	ch->fetch_blocks = read - ch->local_blocks;
	if (!ch->fetch_blocks)
		ch->fetch_from = -1;
	ch->prefix_tokens = (uint32_t)fmin((double)read * cm->block_tokens, tr->input_length);
	nd->free_at = now + ch->ttft_s;
	nd->need_report = true;
	out->input_tokens += tr->input_length;
	out->hit_tokens += (uint64_t)fmin((double)read * cm->block_tokens, tr->input_length);
	if (from >= 0 && read > local) {
		out->fetches++;
		out->fetched_blocks += read - local;
	}
	return MC_OK;
}

/* ---- a running conductor restarted under us ------------------------------- */

/* The last conductor call failed as a restarted conductor makes it fail:
 * no answer (it is down), an unknown instance (404) or no prefill
 * instance (503: it knows none).  Only a running one (--conductor): the
 * one we started does not restart. */
static bool conductor_lost(const struct run *r, mc_status st)
{
	return st == MC_ERR_RPC_FAIL && r->o->conductor &&
	       (r->last_code == 0 || r->last_code == 404 || r->last_code == 503);
}

/*
 * The conductor keeps nothing about blocks (it asks the store), only its
 * instances and their queues: wait up to RESTART_WAIT_S for it to answer
 * /health again, register every node again and have every prefill node
 * report its queue before the next call.  Decode bookings are the
 * conductor's own and start empty again.
 */
#define RESTART_WAIT_S 30

static mc_status conductor_back(struct run *r, struct mc_replay_store_stats *stats)
{
	double until = wall_s() + RESTART_WAIT_S;
	mc_status st;

	while (api_get(&r->api, "/health") != 200) {
		struct timespec nap = {0, 50 * 1000 * 1000};

		if (wall_s() > until)
			return mc_set_error(MC_ERR_RPC_FAIL,
					    "the conductor at %s did not answer for %d s",
					    stats->conductor, RESTART_WAIT_S);
		nanosleep(&nap, NULL);
	}
	for (uint32_t i = 0; i < r->cfg->nodes; i++) {
		if ((st = register_node(r, &r->nodes[i], true)) != MC_OK)
			return st;
		r->nodes[i].need_report = true;
	}
	for (uint32_t i = 0; r->dnodes && i < r->cfg->decode_nodes; i++)
		if ((st = register_node(r, &r->dnodes[i], false)) != MC_OK)
			return st;
	stats->conductor_restarts++;
	fprintf(stderr,
		"mooncake_replay: the conductor at %s restarted: %u nodes registered again\n",
		stats->conductor, r->cfg->nodes + r->cfg->decode_nodes);
	return MC_OK;
}

/* ---- replica snapshots (Fig. 11) ------------------------------------------ */

static int cmp_replica(const void *a, const void *b)
{
	uint64_t x = ((const struct mc_replay_replica *)a)->key;
	uint64_t y = ((const struct mc_replay_replica *)b)->key;
	return x < y ? -1 : x > y;
}

#define SNAP_CHUNK 400 /* keys per /batch_query_keys (a 10 KB URL) */

/*
 * Every block key the store holds and how many memory replicas it has
 * (sorted by key, in *out, malloc'ed): the started master's admin pages
 * /get_all_keys and /batch_query_keys, which grant no read lease, so the
 * count leaves every block's LRU stamp as it was (a GetReplicaList would
 * stamp all of them and change what is evicted next).
 */
static mc_status replica_snapshot(struct run *r, struct mc_replay_replica **out, size_t *n_out)
{
	struct mc_replay_replica *v = NULL;
	size_t n = 0, cap = 0, w = 0;
	char *list = NULL, *line, *save = NULL;
	mc_status st = MC_OK;

	*out = NULL;
	*n_out = 0;
	if (api_get(&r->admin, "/get_all_keys") != 200)
		return mc_set_error(MC_ERR_RPC_FAIL, "the master's /get_all_keys failed");
	list = strdup(api_text(&r->admin));
	if (!list)
		return mc_set_error(MC_ERR_NOMEM, "no memory for a replica snapshot");
	for (line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *end;
		uint64_t id;

		if (strncmp(line, KEY_PREFIX, strlen(KEY_PREFIX)) != 0 ||
		    strlen(line) != strlen(KEY_PREFIX) + 16)
			continue; /* not a block of ours */
		id = strtoull(line + strlen(KEY_PREFIX), &end, 16);
		if (*end)
			continue;
		if (n == cap) {
			struct mc_replay_replica *t;
			cap = cap ? cap * 2 : 4096;
			t = realloc(v, cap * sizeof(*v));
			if (!t) {
				st = mc_set_error(MC_ERR_NOMEM, "no memory for a replica snapshot");
				goto out;
			}
			v = t;
		}
		v[n++] = (struct mc_replay_replica){.key = id, .replicas = 0};
	}
	if (n) /* v is NULL when no key is ours: qsort wants a pointer */
		qsort(v, n, sizeof(*v), cmp_replica);
	for (size_t at = 0; at < n; at += SNAP_CHUNK) {
		size_t m = n - at < SNAP_CHUNK ? n - at : SNAP_CHUNK;
		json_t *root, *data;
		json_error_t jerr;

		mc_buf_reset(&r->body);
		mc_buf_append_str(&r->body, "/batch_query_keys?keys=");
		for (size_t i = 0; i < m; i++)
			mc_buf_appendf(&r->body, "%s" KEY_PREFIX "%016" PRIx64, i ? "," : "",
				       v[at + i].key);
		mc_buf_append(&r->body, "", 1);
		if (r->body.err != MC_OK) {
			st = r->body.err;
			goto out;
		}
		if (api_get(&r->admin, (const char *)r->body.data) != 200) {
			st = mc_set_error(MC_ERR_RPC_FAIL, "the master's /batch_query_keys failed");
			goto out;
		}
		root = json_loads(api_text(&r->admin), 0, &jerr);
		data = json_object_get(root, "data");
		if (!json_is_object(data)) {
			json_decref(root);
			st = mc_set_error(MC_ERR_PROTOCOL, "/batch_query_keys answered no data");
			goto out;
		}
		for (size_t i = 0; i < m; i++) {
			char key[KEY_W];
			key_of(key, v[at + i].key);
			v[at + i].replicas = (uint32_t)json_array_size(
				json_object_get(json_object_get(data, key), "values"));
		}
		json_decref(root);
	}
	/* keys with no memory replica (being written, or gone meanwhile) drop out */
	for (size_t i = 0; i < n; i++)
		if (v[i].replicas)
			v[w++] = v[i];
	*out = v;
	*n_out = w;
	v = NULL;
out:
	free(v);
	free(list);
	return st;
}

/* The snapshots due by now (one count of the store for all of them). */
static mc_status snapshots_due(struct run *r, const struct mc_replay_hooks *hooks, double now,
			       double *next, bool force)
{
	struct mc_replay_replica *v;
	size_t n;
	mc_status st;

	if (!force && now < *next)
		return MC_OK;
	if ((st = replica_snapshot(r, &v, &n)) != MC_OK)
		return st;
	do {
		hooks->snapshot(*next, v, n, hooks->snapshot_arg);
		*next += r->cfg->snapshot_every_s;
	} while (!force && now >= *next);
	free(v);
	return MC_OK;
}

mc_status mc_replay_store_run(const struct mc_replay_store_opts *o,
			      const struct mc_replay_config *cfg, const struct mc_trace *t,
			      const struct mc_replay_hooks *hooks, struct mc_replay_result *out,
			      struct mc_replay_store_stats *stats)
{
	struct run r = {.o = o, .cfg = cfg};
	size_t *order = NULL, n_ttft = 0;
	double prefill_sum = 0, transfer_sum = 0, tbt_sum = 0, next_snap = 0;
	bool snaps;
	mc_status st;

	memset(out, 0, sizeof(*out));
	memset(stats, 0, sizeof(*stats));
	mc_buf_init(&r.body);
	if (!cfg->nodes || !cfg->capacity_blocks || !o->block_bytes)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "nodes, capacity and block bytes must "
							   "be positive");
	for (size_t i = 0; i < t->n; i++)
		if (t->reqs[i].n_blocks > r.max_blocks)
			r.max_blocks = t->reqs[i].n_blocks;
	if (!r.max_blocks)
		r.max_blocks = 1;
	order = malloc((t->n ? t->n : 1) * sizeof(*order));
	r.ttfts = malloc((t->n ? t->n : 1) * sizeof(*r.ttfts));
	r.keys = calloc(r.max_blocks, sizeof(*r.keys));
	r.kp = calloc(r.max_blocks, sizeof(*r.kp));
	r.bufs = calloc(r.max_blocks, sizeof(*r.bufs));
	r.lens = calloc(r.max_blocks, sizeof(*r.lens));
	r.got = calloc(r.max_blocks, sizeof(*r.got));
	r.put_st = calloc(r.max_blocks, sizeof(*r.put_st));
	r.exist = calloc(r.max_blocks, sizeof(*r.exist));
	if (!order || !r.ttfts || !r.keys || !r.kp || !r.bufs || !r.lens || !r.got || !r.put_st ||
	    !r.exist) {
		st = mc_set_error(MC_ERR_NOMEM, "no memory for a replay of %zu requests", t->n);
		goto out;
	}
	if (o->master) {
		snprintf(stats->master, sizeof(stats->master), "%s", o->master);
		snprintf(r.metadata, sizeof(r.metadata), "%s",
			 o->metadata ? o->metadata : "P2PHANDSHAKE");
	} else if ((st = start_master(&r, stats)) != MC_OK) {
		goto out;
	}
	if (o->conductor)
		snprintf(stats->conductor, sizeof(stats->conductor), "%s", o->conductor);
	else if ((st = start_conductor(&r, stats)) != MC_OK)
		goto out;
	if ((st = api_open(&r.api, stats->conductor)) != MC_OK ||
	    (st = nodes_open(&r, stats->master)) != MC_OK ||
	    (st = dnodes_open(&r, stats->master)) != MC_OK)
		goto out;

	snaps = hooks && hooks->snapshot && cfg->snapshot_every_s > 0;
	if (snaps && !r.admin_port) {
		st = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "replica snapshots need the master the replay starts (its admin "
				  "pages), not --master");
		goto out;
	}
	if (snaps) {
		char addr[32];
		snprintf(addr, sizeof(addr), "127.0.0.1:%u", r.admin_port);
		if ((st = api_open(&r.admin, addr)) != MC_OK)
			goto out;
	}
	mc_replay_order(t, order);
	for (size_t k = 0; k < t->n; k++) {
		const struct mc_trace_req *tr = &t->reqs[order[k]];
		double now = (double)tr->timestamp_ms / 1000.0 / cfg->speedup;
		struct mc_sched_choice ch;

		if (!tr->n_blocks)
			continue;
		if (snaps && (st = snapshots_due(&r, hooks, now, &next_snap, false)) != MC_OK)
			goto out;
		/* a failed /schedule changed nothing yet: after a restart of
		 * the conductor the request is reported and scheduled again */
		for (int again = 0;; again++) {
			st = report_loads(&r, now, stats);
			if (st == MC_OK)
				st = one_request(&r, tr, order[k], now, out, stats, &ch);
			if (st == MC_OK || again || !conductor_lost(&r, st))
				break;
			if ((st = conductor_back(&r, stats)) != MC_OK)
				break;
		}
		if (st != MC_OK)
			goto out;
		out->requests++;
		if (hooks && hooks->request)
			hooks->request(order[k], now, tr, &ch, hooks->request_arg);
		if (hooks && hooks->progress && (k % 64 == 0 || k + 1 == t->n))
			hooks->progress(k + 1, t->n, hooks->progress_arg);
		if (ch.verdict != MC_SCHED_ACCEPT) {
			out->rejected++;
			continue;
		}
		if (now + ch.ttft_s > out->end_s)
			out->end_s = now + ch.ttft_s;
		prefill_sum += ch.prefill_s;
		transfer_sum += ch.transfer_s;
		tbt_sum += ch.tbt_s;
		r.ttfts[n_ttft++] = ch.ttft_s;
	}
	/* the state the last request left */
	if (snaps && (st = snapshots_due(&r, hooks, 0, &next_snap, true)) != MC_OK)
		goto out;
	mc_replay_summarise(cfg,
			    &(struct mc_replay_sums){.prefill_s = prefill_sum,
						     .transfer_s = transfer_sum,
						     .tbt_s = tbt_sum},
			    r.ttfts, n_ttft, out);
	st = MC_OK;
out:
	/* clients first (they unmount), then the conductor, the master last */
	nodes_close(&r);
	api_close(&r.api);
	api_close(&r.admin);
	child_stop(&r.conductor);
	child_stop(&r.master);
	mc_buf_release(&r.body);
	free(order);
	free(r.ttfts);
	free(r.keys);
	free(r.kp);
	free(r.bufs);
	free(r.lens);
	free(r.got);
	free(r.put_st);
	free(r.exist);
	return st;
}
