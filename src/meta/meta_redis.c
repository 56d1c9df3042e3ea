/*
 * meta/meta_redis.c - the Redis metadata backend (hiredis).
 *
 * Upstream's client (spec transfer-engine.md 3.4) maps the three operations
 * onto GET, SET and DEL of the engine's keys over one connection guarded by
 * a mutex, with optional AUTH [user] pass (MC_REDIS_USERNAME,
 * MC_REDIS_PASSWORD) and SELECT (MC_REDIS_DB_INDEX, 0-255).  We keep the
 * keys, the opaque values and those variables, and add what upstream lacks:
 *
 * Connection strings.  redis://host[:port], redis://:password@host:port and
 * redis://user:password@host:port; the user and password are
 * percent-decoded and take precedence over the environment; the port
 * defaults to 6379; IPv6 hosts are bracketed.  A path is refused (the
 * database comes from MC_REDIS_DB_INDEX) and so is an out-of-range database
 * index: silently falling back to database 0 could mix two clusters.  The
 * password never appears in messages: base.uri is "redis://host:port".
 *
 * Liveness.  Every key this client writes is SET with an expiry (PX, from
 * MC_REDIS_KEY_TTL_SEC, default 10 s, at least 2 s), and a refresher
 * thread extends all of them with one pipelined round of PEXPIRE every
 * TTL/3.  A PEXPIRE answering 0 means the key is gone (the server
 * restarted, or someone flushed it), so the same round re-SETs it from the
 * client's own copy.  A crashed engine's keys thus vanish within the TTL
 * while a live one's come back after any loss.  The client's copy is the
 * "owned" list: every key put and not deleted since, with its latest value.
 * A put records its value even when the SET fails, so the server converges
 * to the latest value once it is reachable again; a del forgets the key
 * first, so a failed DEL leaves the key to expire instead of being revived.
 * close() stops the refresher and deletes every owned key.
 *
 * Failures.  Open connects, authenticates, selects and PINGs, and fails
 * with MC_ERR_METADATA naming the endpoint when any step fails.  Afterwards
 * a broken connection is replaced lazily: the next exchange reconnects
 * (AUTH and SELECT again), and an exchange that failed on a connection
 * which had been working is retried once on a fresh one, unless it timed
 * out, so a server restart is invisible to callers.  Every new connection
 * first runs a refresh round, so after a restart the owned keys are back
 * before the caller's command runs; an idle client is reconnected by its
 * refresher, which retries every second while the server is unreachable.
 *
 * Timeouts.  Connect times out after 1 s and every command after 3 s;
 * MC_METADATA_TIMEOUT_MS (read at open) sets the command timeout and
 * connect gets a third of it.  A call thus fails within about connect + 2
 * command timeouts (a retry pays a connect, the restore round and the
 * command), and at once when the server refuses connections.
 *
 * SIGPIPE.  hiredis writes with write(2), which raises SIGPIPE on a
 * connection the server closed; each exchange blocks SIGPIPE in the calling
 * thread and consumes one it caused (libpq's technique), so the process's
 * signal dispositions are left alone.
 *
 * Threads and locks: one mutex, lock, protects the connection, the owned
 * list and the refresher's flags, and is held across each exchange with the
 * server, so commands from many threads are serialised on the connection.
 * The refresher sleeps on wake (a CLOCK_MONOTONIC condition variable) with
 * lock released.  Nothing else is locked while lock is held, except the
 * allocator and the log.
 */
#define MC_LOG_MODULE "redis"
#include "meta/meta.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/list.h"
#include "base/log.h"
#include "base/time.h"
#include "meta/coord.h"
#include "meta/meta_config.h"
#include "meta/owned.h"
#include "mooncake/status.h"

#define REDIS_DEFAULT_PORT 6379
#define REDIS_TIMEOUT_MS   3000L /* per command; connect gets a third */
#define REDIS_RETRY_MS	   1000L /* refresher period while the server is unreachable */
#define REDIS_ERR_SHOW	   200	 /* bytes of a server error put in messages */

struct redis_client {
	struct mc_meta base; /* must be first; base.uri is redis://host:port */
	char *host;
	int port;
	char *user; /* NULL: AUTH without a user name */
	char *pass; /* NULL: no AUTH */
	int db;
	long connect_ms;
	long cmd_ms;
	long ttl_ms;
	pthread_mutex_t lock;
	redisContext *ctx;    /* NULL while disconnected; under lock */
	bool ever_connected;  /* a later connect is a reconnect; under lock */
	int io_errno;	      /* errno of the last failed hiredis call; under lock */
	struct mc_list owned; /* struct mc_meta_owned_key (meta/owned.h); under lock */
	pthread_cond_t wake;  /* wakes the refresher */
	bool stop;	      /* under lock */
	bool refresh_failing; /* last refresh failed (log once); refresher only */
	bool refresher_up;    /* the thread was started */
	pthread_t refresher;
};

static const struct mc_meta_ops redis_ops;

static struct redis_client *client_of(struct mc_meta *m)
{
	return mc_container_of(m, struct redis_client, base);
}

/* ---- SIGPIPE guard ----------------------------------------------------------- */

struct sigpipe_guard {
	sigset_t old;
	bool was_pending;
};

static void sigpipe_block(struct sigpipe_guard *g)
{
	sigset_t set, pending;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	pthread_sigmask(SIG_BLOCK, &set, &g->old);
	sigemptyset(&pending);
	sigpending(&pending);
	g->was_pending = sigismember(&pending, SIGPIPE) == 1;
}

static void sigpipe_restore(struct sigpipe_guard *g)
{
	sigset_t set, pending;

	sigemptyset(&set);
	sigaddset(&set, SIGPIPE);
	sigemptyset(&pending);
	sigpending(&pending);
	if (!g->was_pending && sigismember(&pending, SIGPIPE) == 1) {
		struct timespec zero = {0, 0};
		int saved = errno;
		while (sigtimedwait(&set, NULL, &zero) < 0 && errno == EINTR)
			;
		errno = saved;
	}
	pthread_sigmask(SIG_SETMASK, &g->old, NULL);
}

/* ---- connection -------------------------------------------------------------- */

static struct timeval tv_of_ms(long ms)
{
	struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
	return tv;
}

static void drop_conn_locked(struct redis_client *c)
{
	if (c->ctx) {
		redisFree(c->ctx);
		c->ctx = NULL;
	}
}

static bool io_timed_out(int err)
{
	return err == EAGAIN || err == EWOULDBLOCK || err == ETIMEDOUT;
}

/* A blocking command on the current connection; NULL with io_errno set on I/O failure. */
static redisReply *command_locked(struct redis_client *c, int argc, const char **argv,
				  const size_t *lens)
{
	redisReply *r = redisCommandArgv(c->ctx, argc, argv, lens);

	if (!r)
		c->io_errno = errno;
	return r;
}

/* Text for an I/O failure on c->ctx (call before dropping it). */
static const char *io_cause(struct redis_client *c, char *buf, size_t len)
{
	if (c->ctx && c->ctx->err == REDIS_ERR_IO && io_timed_out(c->io_errno))
		snprintf(buf, len, "timed out after %ld ms", c->cmd_ms);
	else if (c->ctx && c->ctx->err)
		snprintf(buf, len, "%s", c->ctx->errstr);
	else
		snprintf(buf, len, "out of memory");
	return buf;
}

/* MC_ERR_METADATA with the server's error reply; NOAUTH says how to give a password. */
static mc_status reply_error(struct redis_client *c, const char *what, const char *key,
			     const redisReply *r)
{
	int n = (int)MC_MIN(r->len, (size_t)REDIS_ERR_SHOW);

	return mc_set_error(MC_ERR_METADATA, "%s: %s%s%s: %.*s%s", c->base.uri, what,
			    key ? " " : "", key ? key : "", n, r->str,
			    strncmp(r->str, "NOAUTH", 6) == 0 ? " (set MC_REDIS_PASSWORD or use "
								"redis://[user]:password@host:port)"
							      : "");
}

/* Run one setup command (AUTH, SELECT) on a new connection. */
static mc_status setup_command_locked(struct redis_client *c, int argc, const char **argv)
{
	size_t lens[3];
	redisReply *r;
	char cause[256];
	mc_status status = MC_OK;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	r = command_locked(c, argc, argv, lens);
	if (!r)
		return mc_set_error(MC_ERR_METADATA, "%s: %s failed: %s", c->base.uri, argv[0],
				    io_cause(c, cause, sizeof(cause)));
	if (r->type == REDIS_REPLY_ERROR)
		status = reply_error(c, argv[0], NULL, r);
	freeReplyObject(r);
	return status;
}

static mc_status restore_locked(struct redis_client *c);

/*
 * Make c->ctx a working, authenticated connection on the right database,
 * with this client's keys in place.
 * On failure c->ctx is NULL and the error names the endpoint.
 */
static mc_status connect_locked(struct redis_client *c)
{
	char db[16];
	mc_status status;

	drop_conn_locked(c);
	c->ctx = redisConnectWithTimeout(c->host, c->port, tv_of_ms(c->connect_ms));
	if (!c->ctx)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory connecting", c->base.uri);
	if (c->ctx->err) {
		status = mc_set_error(MC_ERR_METADATA, "%s: cannot connect: %s", c->base.uri,
				      c->ctx->errstr);
		goto err_drop;
	}
	if (redisSetTimeout(c->ctx, tv_of_ms(c->cmd_ms)) != REDIS_OK) {
		status = mc_set_error(MC_ERR_METADATA, "%s: cannot set socket timeouts: %s",
				      c->base.uri, c->ctx->errstr);
		goto err_drop;
	}
	redisEnableKeepAlive(c->ctx);
	if (c->pass) {
		const char *argv[3] = {"AUTH", c->user ? c->user : c->pass, c->pass};
		status = setup_command_locked(c, c->user ? 3 : 2, argv);
		if (status)
			goto err_drop;
	}
	if (c->db) {
		const char *argv[2] = {"SELECT", db};
		snprintf(db, sizeof(db), "%d", c->db);
		status = setup_command_locked(c, 2, argv);
		if (status)
			goto err_drop;
	}
	if (c->ever_connected)
		mc_info("%s: reconnected", c->base.uri);
	c->ever_connected = true;
	/* the server may have lost our keys (a restart): put them back first */
	status = restore_locked(c);
	if (status)
		goto err_drop;
	return MC_OK;

err_drop:
	drop_conn_locked(c);
	return status;
}

/*
 * One exchange with the server: fn sends its commands and reads their
 * replies on c->ctx.  When it fails with an I/O error on a connection that
 * had been working (and did not time out), the connection was probably
 * closed under us, so the exchange is retried once on a new one.
 */
typedef mc_status (*exchange_fn)(struct redis_client *c, void *arg);

static mc_status exchange_locked(struct redis_client *c, exchange_fn fn, void *arg,
				 const char *what, const char *key)
{
	struct sigpipe_guard g;
	char cause[256];
	mc_status status;

	sigpipe_block(&g);
	for (int attempt = 0;; attempt++) {
		bool fresh = !c->ctx || c->ctx->err;

		c->io_errno = 0;
		if (fresh) {
			status = connect_locked(c);
			if (status)
				break;
		}
		status = fn(c, arg);
		if (!c->ctx->err)
			break;
		io_cause(c, cause, sizeof(cause));
		drop_conn_locked(c);
		if (fresh || attempt || io_timed_out(c->io_errno)) {
			status = mc_set_error(MC_ERR_METADATA, "%s: %s%s%s: %s", c->base.uri, what,
					      key ? " " : "", key ? key : "", cause);
			break;
		}
		mc_debug("%s: %s: connection lost (%s), retrying on a new one", c->base.uri, what,
			 cause);
	}
	sigpipe_restore(&g);
	return status;
}

/* ---- single commands ---------------------------------------------------------- */

struct one_cmd {
	int argc;
	const char **argv;
	const size_t *lens;
	redisReply *reply; /* out */
};

static mc_status one_cmd_fn(struct redis_client *c, void *arg)
{
	struct one_cmd *cmd = arg;

	cmd->reply = command_locked(c, cmd->argc, cmd->argv, cmd->lens);
	return cmd->reply ? MC_OK : MC_ERR_METADATA;
}

/*
 * Run one command (argv[1], if any, is the key named in messages).  MC_OK
 * with *reply_out set, for the caller to free; an error reply is
 * MC_ERR_METADATA with the server's words.
 */
static mc_status run_locked(struct redis_client *c, int argc, const char **argv, const size_t *lens,
			    redisReply **reply_out)
{
	struct one_cmd cmd = {.argc = argc, .argv = argv, .lens = lens};
	const char *key = argc > 1 ? argv[1] : NULL;
	mc_status status;

	status = exchange_locked(c, one_cmd_fn, &cmd, argv[0], key);
	if (status) {
		if (cmd.reply)
			freeReplyObject(cmd.reply);
		return status;
	}
	if (cmd.reply->type == REDIS_REPLY_ERROR) {
		status = reply_error(c, argv[0], key, cmd.reply);
		freeReplyObject(cmd.reply);
		return status;
	}
	*reply_out = cmd.reply;
	return MC_OK;
}

/* ---- the refresher ---------------------------------------------------------------- */

struct refresh_round {
	char ttl[24];
	size_t nkeys;
	size_t nreset;	  /* out: keys that were missing and SET again */
	mc_status status; /* first error reply */
};

static void note_error_reply(struct redis_client *c, struct refresh_round *rr, const char *what,
			     const char *key, const redisReply *r)
{
	if (rr->status == MC_OK)
		rr->status = reply_error(c, what, key, r);
}

/* PEXPIRE every owned key in one pipeline, then SET again those that were gone. */
static mc_status refresh_fn(struct redis_client *c, void *arg)
{
	struct refresh_round *rr = arg;
	struct mc_list *pos;
	size_t nmissing = 0;
	redisReply *r;

	rr->nreset = 0;
	rr->status = MC_OK;
	mc_list_for_each(pos, &c->owned) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		const char *argv[3] = {"PEXPIRE", o->key, rr->ttl};
		size_t lens[3] = {7, strlen(o->key), strlen(rr->ttl)};
		if (redisAppendCommandArgv(c->ctx, 3, argv, lens) != REDIS_OK)
			return MC_ERR_METADATA;
	}
	mc_list_for_each(pos, &c->owned) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		if (redisGetReply(c->ctx, (void **)&r) != REDIS_OK) {
			c->io_errno = errno;
			return MC_ERR_METADATA;
		}
		o->missing = r->type == REDIS_REPLY_INTEGER && r->integer == 0;
		nmissing += o->missing;
		if (r->type == REDIS_REPLY_ERROR)
			note_error_reply(c, rr, "PEXPIRE", o->key, r);
		freeReplyObject(r);
	}
	if (!nmissing)
		return rr->status;
	mc_list_for_each(pos, &c->owned) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		const char *argv[5] = {"SET", o->key, o->value, "PX", rr->ttl};
		size_t lens[5] = {3, strlen(o->key), o->len, 2, strlen(rr->ttl)};
		if (!o->missing)
			continue;
		if (redisAppendCommandArgv(c->ctx, 5, argv, lens) != REDIS_OK)
			return MC_ERR_METADATA;
	}
	mc_list_for_each(pos, &c->owned) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		if (!o->missing)
			continue;
		if (redisGetReply(c->ctx, (void **)&r) != REDIS_OK) {
			c->io_errno = errno;
			return MC_ERR_METADATA;
		}
		if (r->type == REDIS_REPLY_ERROR)
			note_error_reply(c, rr, "SET", o->key, r);
		else
			rr->nreset++;
		freeReplyObject(r);
	}
	return rr->status;
}

static mc_status refresh_locked(struct redis_client *c, size_t *nreset_out)
{
	struct refresh_round rr = {.nkeys = 0};
	struct mc_list *pos;
	mc_status status;

	*nreset_out = 0;
	mc_list_for_each(pos, &c->owned)
		rr.nkeys++;
	if (!rr.nkeys)
		return MC_OK;
	snprintf(rr.ttl, sizeof(rr.ttl), "%ld", c->ttl_ms);
	status = exchange_locked(c, refresh_fn, &rr, "refresh", NULL);
	*nreset_out = rr.nreset;
	return status;
}

/*
 * On a new connection: one refresh round on it, outside exchange_locked (no
 * reconnect, no retry).  An I/O failure fails the connection; error replies
 * are only logged, the refresher will try again.
 */
static mc_status restore_locked(struct redis_client *c)
{
	struct refresh_round rr = {.nkeys = 0};
	struct mc_list *pos;
	char cause[256];
	mc_status status;

	mc_list_for_each(pos, &c->owned)
		rr.nkeys++;
	if (!rr.nkeys)
		return MC_OK;
	snprintf(rr.ttl, sizeof(rr.ttl), "%ld", c->ttl_ms);
	status = refresh_fn(c, &rr);
	if (c->ctx->err)
		return mc_set_error(MC_ERR_METADATA, "%s: restoring this client's keys (%zu): %s",
				    c->base.uri, rr.nkeys, io_cause(c, cause, sizeof(cause)));
	if (status)
		mc_warn("%s", mc_last_error());
	else if (rr.nreset)
		mc_info("%s: %zu keys were gone and are set again", c->base.uri, rr.nreset);
	return MC_OK;
}

static void *refresher_main(void *arg)
{
	struct redis_client *c = arg;
	long interval = MC_MAX(c->ttl_ms / 3, 1L);
	uint64_t next = mc_now_ms() + (uint64_t)interval;

	pthread_mutex_lock(&c->lock);
	while (!c->stop) {
		uint64_t now = mc_now_ms();
		size_t nreset = 0;
		mc_status status;

		if (now < next) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_sec += (time_t)((next - now) / 1000);
			ts.tv_nsec += (long)((next - now) % 1000) * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&c->wake, &c->lock, &ts);
			continue;
		}
		status = refresh_locked(c, &nreset);
		if (status == MC_OK) {
			if (c->refresh_failing || nreset)
				mc_info("%s: keys refreshed, %zu were gone and are set again",
					c->base.uri, nreset);
			c->refresh_failing = false;
			next = mc_now_ms() + (uint64_t)interval;
		} else {
			if (!c->refresh_failing)
				mc_warn("cannot refresh keys: %s (retrying every %ld ms)",
					mc_last_error(), MC_MIN(interval, REDIS_RETRY_MS));
			c->refresh_failing = true;
			next = mc_now_ms() + (uint64_t)MC_MIN(interval, REDIS_RETRY_MS);
		}
	}
	pthread_mutex_unlock(&c->lock);
	return NULL;
}

/* ---- operations ------------------------------------------------------------------- */

static mc_status redis_get(struct mc_meta *m, const char *key, char **value_out, size_t *len_out)
{
	struct redis_client *c = client_of(m);
	redisReply *r = NULL;
	char *v;
	mc_status status;

	if (!key || !value_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL key", m->uri);
	{
		const char *argv[2] = {"GET", key};
		size_t lens[2] = {3, strlen(key)};
		pthread_mutex_lock(&c->lock);
		status = run_locked(c, 2, argv, lens, &r);
		pthread_mutex_unlock(&c->lock);
	}
	if (status)
		return status;
	if (r->type == REDIS_REPLY_NIL) {
		status = mc_set_error(MC_ERR_NOT_FOUND, "%s: key %s not found", m->uri, key);
		goto out_free;
	}
	if (r->type != REDIS_REPLY_STRING) {
		status = mc_set_error(MC_ERR_METADATA, "%s: GET %s: unexpected reply type %d",
				      m->uri, key, r->type);
		goto out_free;
	}
	v = mc_malloc(r->len + 1);
	if (!v) {
		status = mc_set_error(MC_ERR_NOMEM, "%s: out of memory reading %s", m->uri, key);
		goto out_free;
	}
	memcpy(v, r->str, r->len);
	v[r->len] = '\0';
	*value_out = v;
	if (len_out)
		*len_out = r->len;
out_free:
	freeReplyObject(r);
	return status;
}

static mc_status redis_put(struct mc_meta *m, const char *key, const char *value, size_t len)
{
	struct redis_client *c = client_of(m);
	redisReply *r = NULL;
	char ttl[24];
	mc_status status;

	if (!key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL key or value", m->uri);
	snprintf(ttl, sizeof(ttl), "%ld", c->ttl_ms);
	{
		const char *argv[5] = {"SET", key, len ? value : "", "PX", ttl};
		size_t lens[5] = {3, strlen(key), len, 2, strlen(ttl)};
		pthread_mutex_lock(&c->lock);
		/* recorded first: a SET that fails now is made good by the refresher */
		status = mc_meta_owned_set(&c->owned, c->base.uri, key, value, len);
		if (status == MC_OK)
			status = run_locked(c, 5, argv, lens, &r);
		pthread_mutex_unlock(&c->lock);
	}
	if (r)
		freeReplyObject(r);
	return status;
}

static mc_status redis_del(struct mc_meta *m, const char *key)
{
	struct redis_client *c = client_of(m);
	redisReply *r = NULL;
	mc_status status;

	if (!key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL key", m->uri);
	{
		const char *argv[2] = {"DEL", key};
		size_t lens[2] = {3, strlen(key)};
		pthread_mutex_lock(&c->lock);
		/* forgotten first: a DEL that fails leaves the key to expire */
		mc_meta_owned_forget(&c->owned, key);
		status = run_locked(c, 2, argv, lens, &r);
		pthread_mutex_unlock(&c->lock);
	}
	if (status)
		return status;
	if (r->type == REDIS_REPLY_INTEGER && r->integer == 0)
		status = mc_set_error(MC_ERR_NOT_FOUND, "%s: key %s not found", m->uri, key);
	freeReplyObject(r);
	return status;
}

/* Delete every owned key with one DEL (best effort: they expire anyway) and forget them. */
static void delete_owned_locked(struct redis_client *c)
{
	struct mc_list *pos;
	redisReply *r = NULL;
	const char **argv;
	size_t n = 0, i = 1;
	size_t *lens;

	mc_list_for_each(pos, &c->owned)
		n++;
	if (!n)
		return;
	argv = mc_calloc(n + 1, sizeof(*argv));
	lens = mc_calloc(n + 1, sizeof(*lens));
	if (!argv || !lens) {
		mc_warn("%s: out of memory deleting %zu keys at close; they expire within %ld ms",
			c->base.uri, n, c->ttl_ms);
		goto out_free;
	}
	argv[0] = "DEL";
	lens[0] = 3;
	mc_list_for_each(pos, &c->owned) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		argv[i] = o->key;
		lens[i++] = strlen(o->key);
	}
	if (run_locked(c, (int)(n + 1), argv, lens, &r) == MC_OK)
		freeReplyObject(r);
	else
		mc_warn("cannot delete %zu keys at close: %s; they expire within %ld ms", n,
			mc_last_error(), c->ttl_ms);
out_free:
	mc_free(argv);
	mc_free(lens);
	mc_meta_owned_clear(&c->owned);
}

static void client_free(struct redis_client *c)
{
	pthread_cond_destroy(&c->wake);
	pthread_mutex_destroy(&c->lock);
	mc_free(c->host);
	mc_free(c->user);
	if (c->pass) {
		explicit_bzero(c->pass, strlen(c->pass));
		mc_free(c->pass);
	}
	mc_free(c->base.uri);
	mc_free(c);
}

static void redis_close(struct mc_meta *m)
{
	struct redis_client *c = client_of(m);

	pthread_mutex_lock(&c->lock);
	c->stop = true;
	pthread_cond_signal(&c->wake);
	pthread_mutex_unlock(&c->lock);
	if (c->refresher_up)
		pthread_join(c->refresher, NULL);
	pthread_mutex_lock(&c->lock);
	delete_owned_locked(c);
	drop_conn_locked(c);
	pthread_mutex_unlock(&c->lock);
	client_free(c);
}

/* ---- configuration ------------------------------------------------------------------ */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Percent-decode s[0..n) into a new string; NULL (no message) on bad escapes or no memory. */
static char *pct_decode(const char *s, size_t n)
{
	char *out = mc_malloc(n + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '%') {
			int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
			int lo = i + 2 < n ? hexval(s[i + 2]) : -1;
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
				mc_free(out);
				return NULL;
			}
			*o++ = (char)(hi * 16 + lo);
			i += 2;
		} else {
			*o++ = s[i];
		}
	}
	*o = '\0';
	return out;
}

/*
 * Split redis://[[user]:password@]host[:port][/] into c->host, c->port,
 * c->user, c->pass.  Messages show the URI without its credentials.
 */
static mc_status parse_uri(struct redis_client *c, const char *uri)
{
	const char *auth = uri + strlen("redis://"), *hp = auth, *end, *at, *colon, *host_end;
	size_t hlen;
	long port = REDIS_DEFAULT_PORT;

	end = auth + strcspn(auth, "/?#");
	if (*end && strcmp(end, "/") != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "metadata: redis connection string takes no path or query "
				    "(\"%s\"); the database comes from MC_REDIS_DB_INDEX",
				    end);
	at = memrchr(auth, '@', (size_t)(end - auth));
	if (at) {
		colon = memchr(auth, ':', (size_t)(at - auth));
		if (!colon)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "metadata: redis credentials must be written "
					    "redis://:password@host:port or "
					    "redis://user:password@host:port");
		if (colon > auth) {
			c->user = pct_decode(auth, (size_t)(colon - auth));
			if (!c->user)
				goto err_escape;
		}
		c->pass = pct_decode(colon + 1, (size_t)(at - colon - 1));
		if (!c->pass)
			goto err_escape;
		hp = at + 1;
	}
	if (*hp == '[') {
		host_end = memchr(hp, ']', (size_t)(end - hp));
		if (!host_end)
			goto err_host;
		hp++;
		colon = host_end + 1 < end ? host_end + 1 : NULL;
		if (colon && *colon != ':')
			goto err_host;
	} else {
		colon = memrchr(hp, ':', (size_t)(end - hp));
		host_end = colon ? colon : end;
		if (colon && memchr(hp, ':', (size_t)(colon - hp)))
			goto err_host; /* bare IPv6 is ambiguous: ask for brackets */
	}
	hlen = (size_t)(host_end - hp);
	if (!hlen)
		goto err_host;
	if (colon) {
		char digits[8] = "";
		size_t dlen = (size_t)(end - colon - 1);
		char *dend;
		if (!dlen || dlen >= sizeof(digits))
			goto err_port;
		memcpy(digits, colon + 1, dlen);
		port = strtol(digits, &dend, 10);
		if (*dend || port < 1 || port > 65535 || digits[0] == '-' || digits[0] == '+')
			goto err_port;
	}
	c->host = mc_strndup(hp, hlen);
	c->port = (int)port;
	if (!c->host)
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory parsing a redis uri");
	c->base.uri = strchr(c->host, ':') ? mc_asprintf("redis://[%s]:%d", c->host, c->port)
					   : mc_asprintf("redis://%s:%d", c->host, c->port);
	if (!c->base.uri)
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory parsing a redis uri");
	return MC_OK;

err_escape:
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "metadata: bad percent-escape in the credentials of a redis uri");
err_host:
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "metadata: no host in redis uri (expected redis://host:port, IPv6 "
			    "in brackets)");
err_port:
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "metadata: bad port in redis uri (expected redis://host:port, port "
			    "1-65535)");
}

/* Credentials and database from the environment, where the uri gave none. */
static mc_status config_from_env(struct redis_client *c, const struct mc_meta_config *cfg)
{
	const char *user = cfg->redis_username;
	const char *pass = cfg->redis_password;

	c->db = (int)cfg->redis_db_index;
	if (c->pass)
		return MC_OK; /* the uri's credentials win */
	if (pass && *pass) {
		c->pass = mc_strdup(pass);
		if (!c->pass)
			return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory");
		if (user && *user) {
			c->user = mc_strdup(user);
			if (!c->user)
				return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory");
		}
	} else if (user && *user) {
		mc_warn("ignoring MC_REDIS_USERNAME: AUTH needs MC_REDIS_PASSWORD too");
	}
	return MC_OK;
}

/* ---- open ------------------------------------------------------------------------------ */

/* A client for uri, connected and PINGed; no refresher yet. */
static mc_status client_new(const char *uri, struct redis_client **out)
{
	struct redis_client *c;
	struct mc_meta_config cfg;
	pthread_condattr_t ca;
	redisReply *r = NULL;
	mc_status status;

	if (!uri || !out || strncasecmp(uri, "redis://", 8) != 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: %s is not a redis:// uri",
				    uri ? uri : "(null)");
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening a redis client");
	c->base.ops = &redis_ops;
	mc_list_init(&c->owned);
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->wake, &ca);
	pthread_condattr_destroy(&ca);

	status = parse_uri(c, uri);
	if (status == MC_OK)
		status = mc_meta_config_load(&cfg);
	if (status)
		goto err_free;
	status = config_from_env(c, &cfg);
	c->cmd_ms = cfg.timeout_ms ? (long)cfg.timeout_ms : REDIS_TIMEOUT_MS;
	c->connect_ms = MC_MAX(c->cmd_ms / 3, 1L);
	c->ttl_ms = (long)cfg.redis_key_ttl_sec * 1000;
	mc_meta_config_release(&cfg);
	if (status)
		goto err_free;

	/* connect, AUTH, SELECT and PING now, so a bad endpoint fails here */
	{
		const char *argv[1] = {"PING"};
		size_t lens[1] = {4};
		pthread_mutex_lock(&c->lock);
		status = run_locked(c, 1, argv, lens, &r);
		pthread_mutex_unlock(&c->lock);
		if (status)
			goto err_close; /* an error reply leaves the connection open */
		freeReplyObject(r);
	}
	*out = c;
	return MC_OK;

err_close:
	drop_conn_locked(c);
err_free:
	client_free(c);
	return status;
}

mc_status mc_meta_redis_open(const char *uri, struct mc_meta **out)
{
	struct redis_client *c;
	sigset_t all, old;
	mc_status status;

	status = client_new(uri, &c);
	if (status)
		return status;
	/* the refresher takes no signals meant for the application */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	status = pthread_create(&c->refresher, NULL, refresher_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (status) {
		status = mc_set_error(MC_ERR_INTERNAL, "%s: cannot start the key refresher: %s",
				      c->base.uri, strerror(status));
		goto err_close;
	}
	c->refresher_up = true;
	mc_debug("%s: open, db %d, key ttl %ld ms, timeouts %ld/%ld ms", c->base.uri, c->db,
		 c->ttl_ms, c->connect_ms, c->cmd_ms);
	*out = &c->base;
	return MC_OK;

err_close:
	drop_conn_locked(c);
	client_free(c);
	return status;
}

static const struct mc_meta_ops redis_ops = {
	.name = "redis",
	.get = redis_get,
	.put = redis_put,
	.del = redis_del,
	.resync = mc_meta_no_resync,
	.close = redis_close,
};

/* ---- the leader view (meta/coord.h) ------------------------------------------- */

/*
 * Upstream's election on Redis: the view is a hash (leader_address,
 * view_version, owner_token) with a TTL.  Taking it, renewing it and
 * giving it up are each one Lua script, so the check of who holds it and
 * the change are one atomic step on the server: only a candidate that
 * finds no hash creates one, and only the holder of owner_token (random,
 * per campaign) extends or deletes it.  The view version is INCR of
 * "<key>:version", a key without TTL, so it grows across leaders.
 */
static const char acquire_lua[] =
	"if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end "
	"local v = redis.call('INCR', KEYS[2]) "
	"redis.call('HSET', KEYS[1], 'leader_address', ARGV[1], 'view_version', v, "
	"'owner_token', ARGV[2]) "
	"redis.call('PEXPIRE', KEYS[1], ARGV[3]) "
	"return v";
static const char renew_lua[] = "if redis.call('HGET', KEYS[1], 'owner_token') == ARGV[1] then "
				"redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end return 0";
static const char evict_lua[] = "if redis.call('HGET', KEYS[1], 'view_version') == ARGV[1] then "
				"redis.call('DEL', KEYS[1]) return 1 end return 0";
static const char release_lua[] = "if redis.call('HGET', KEYS[1], 'owner_token') == ARGV[1] then "
				  "redis.call('DEL', KEYS[1]) return 1 end return 0";

/*
 * Candidate entries: one hash per view key, a field per master whose value
 * is "<deadline ms> <entry>".  The deadline is the server's own TIME plus
 * the ttl, so the masters' clocks never meet; posting sets it, listing
 * deletes the lapsed fields and returns the others, each in one script.
 * The hash itself lapses a ttl after the last post.
 */
static const char cand_post_lua[] =
	"if redis.replicate_commands then redis.replicate_commands() end "
	"local t = redis.call('TIME') "
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
	"redis.call('HSET', KEYS[1], ARGV[1], (now + tonumber(ARGV[3])) .. ' ' .. ARGV[2]) "
	"redis.call('PEXPIRE', KEYS[1], ARGV[3]) "
	"return 1";
static const char cand_list_lua[] =
	"if redis.replicate_commands then redis.replicate_commands() end "
	"local t = redis.call('TIME') "
	"local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "
	"local all = redis.call('HGETALL', KEYS[1]) "
	"local out = {} "
	"for i = 1, #all, 2 do "
	"  local v = all[i + 1] "
	"  local sp = string.find(v, ' ', 1, true) "
	"  local dl = sp and tonumber(string.sub(v, 1, sp - 1)) "
	"  if dl and dl > now then "
	"    out[#out + 1] = all[i] "
	"    out[#out + 1] = string.sub(v, sp + 1) "
	"  else "
	"    redis.call('HDEL', KEYS[1], all[i]) "
	"  end "
	"end "
	"return out";

struct redis_coord {
	struct mc_coord base; /* must be first */
	struct redis_client *c;
	char key[256];	     /* the view held; "" none */
	char token[40];	     /* its owner_token */
	char ttl_ms[24];     /* its TTL */
	char cand_key[300];  /* the candidates' hash last posted to; "" none */
	char cand_addr[256]; /* the field posted */
};

static struct redis_coord *rcoord_of(struct mc_coord *m)
{
	return mc_container_of(m, struct redis_coord, base);
}

/* One command; MC_OK with *reply_out (an error reply is an error). */
static mc_status coord_cmd(struct redis_client *c, int argc, const char **argv, const char *key,
			   redisReply **reply_out)
{
	struct one_cmd cmd = {.argc = argc, .argv = argv};
	size_t lens[8];
	mc_status status;

	for (int i = 0; i < argc; i++)
		lens[i] = strlen(argv[i]);
	cmd.lens = lens;
	pthread_mutex_lock(&c->lock);
	status = exchange_locked(c, one_cmd_fn, &cmd, argv[0], key);
	if (status == MC_OK && cmd.reply->type == REDIS_REPLY_ERROR)
		status = reply_error(c, argv[0], key, cmd.reply);
	pthread_mutex_unlock(&c->lock);
	if (status) {
		if (cmd.reply)
			freeReplyObject(cmd.reply);
		return status;
	}
	*reply_out = cmd.reply;
	return MC_OK;
}

static void random_token(char *buf, size_t len)
{
	uint64_t a = 0, b = 0;
	FILE *f = fopen("/dev/urandom", "rb");

	if (!f || fread(&a, sizeof(a), 1, f) != 1 || fread(&b, sizeof(b), 1, f) != 1) {
		a = mc_now_ns() ^ (uint64_t)getpid() << 32;
		b = (uint64_t)(uintptr_t)buf ^ mc_now_ns() * 0x9e3779b97f4a7c15ull;
	}
	if (f)
		fclose(f);
	snprintf(buf, len, "%016llx%016llx", (unsigned long long)a, (unsigned long long)b);
}

static mc_status redis_coord_campaign(struct mc_coord *m, const char *key, const char *addr,
				      int64_t ttl_s, bool *won_out, uint64_t *version_out)
{
	struct redis_coord *e = rcoord_of(m);
	char counter[300];
	redisReply *r;
	mc_status st;

	if (strlen(key) >= sizeof(e->key))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "redis view key %s: too long", key);
	snprintf(counter, sizeof(counter), "%s:version", key);
	random_token(e->token, sizeof(e->token));
	snprintf(e->ttl_ms, sizeof(e->ttl_ms), "%lld", (long long)ttl_s * 1000);
	e->key[0] = '\0';
	{
		const char *argv[] = {"EVAL",  acquire_lua, "2",      key,
				      counter, addr,	    e->token, e->ttl_ms};
		st = coord_cmd(e->c, 8, argv, key, &r);
	}
	if (st)
		return st;
	if (r->type != REDIS_REPLY_INTEGER || r->integer < 0) {
		freeReplyObject(r);
		return mc_set_error(MC_ERR_METADATA, "%s: campaign %s: unexpected reply",
				    e->c->base.uri, key);
	}
	if (r->integer > 0) {
		snprintf(e->key, sizeof(e->key), "%s", key);
		*won_out = true;
		*version_out = (uint64_t)r->integer;
	}
	freeReplyObject(r);
	return MC_OK;
}

static mc_status redis_coord_renew(struct mc_coord *m, bool *held_out)
{
	struct redis_coord *e = rcoord_of(m);
	redisReply *r;
	mc_status st;

	if (!e->key[0])
		return MC_OK;
	{
		const char *argv[] = {"EVAL", renew_lua, "1", e->key, e->token, e->ttl_ms};
		st = coord_cmd(e->c, 6, argv, e->key, &r);
	}
	if (st)
		return st;
	*held_out = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	if (!*held_out)
		e->key[0] = '\0';
	freeReplyObject(r);
	return MC_OK;
}

static void redis_coord_resign(struct mc_coord *m)
{
	struct redis_coord *e = rcoord_of(m);
	redisReply *r;

	if (!e->key[0])
		return;
	{
		const char *argv[] = {"EVAL", release_lua, "1", e->key, e->token};
		if (coord_cmd(e->c, 5, argv, e->key, &r) == MC_OK)
			freeReplyObject(r);
		else
			mc_warn("cannot give up %s: %s", e->key, mc_last_error());
	}
	e->key[0] = '\0';
}

static mc_status redis_coord_read(struct mc_coord *m, const char *key, struct mc_coord_view *out)
{
	struct redis_coord *e = rcoord_of(m);
	const redisReply *a, *v;
	redisReply *r;
	char *end;
	mc_status st;

	{
		const char *argv[] = {"HMGET", key, "leader_address", "view_version"};
		st = coord_cmd(e->c, 4, argv, key, &r);
	}
	if (st)
		return st;
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
		st = mc_set_error(MC_ERR_METADATA, "%s: HMGET %s: unexpected reply", e->c->base.uri,
				  key);
		goto out;
	}
	a = r->element[0];
	v = r->element[1];
	if (a->type == REDIS_REPLY_NIL || v->type == REDIS_REPLY_NIL)
		goto out;
	if (a->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
	    a->len >= sizeof(out->addr)) {
		st = mc_set_error(MC_ERR_METADATA, "%s: %s is not a leader view", e->c->base.uri,
				  key);
		goto out;
	}
	errno = 0;
	out->version = strtoull(v->str, &end, 10);
	if (errno || end == v->str || *end || !out->version) {
		st = mc_set_error(MC_ERR_METADATA, "%s: %s: bad view_version", e->c->base.uri, key);
		goto out;
	}
	memcpy(out->addr, a->str, a->len);
	out->addr[a->len] = '\0';
	out->present = true;
out:
	freeReplyObject(r);
	return st;
}

static mc_status redis_coord_evict(struct mc_coord *m, const char *key, uint64_t version,
				   bool *ended_out)
{
	struct redis_coord *e = rcoord_of(m);
	char v[24];
	redisReply *r;
	mc_status st;

	snprintf(v, sizeof(v), "%llu", (unsigned long long)version);
	{
		const char *argv[] = {"EVAL", evict_lua, "1", key, v};
		st = coord_cmd(e->c, 5, argv, key, &r);
	}
	if (st)
		return st;
	*ended_out = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
	freeReplyObject(r);
	return MC_OK;
}

static mc_status redis_cand_post(struct mc_coord *m, const char *key, const char *addr,
				 const char *entry, int64_t ttl_s)
{
	struct redis_coord *e = rcoord_of(m);
	char hk[300], ttl[24];
	redisReply *r;
	mc_status st;

	mc_coord_cand_key(key, hk, sizeof(hk));
	snprintf(ttl, sizeof(ttl), "%lld", (long long)ttl_s * 1000);
	snprintf(e->cand_key, sizeof(e->cand_key), "%s", hk);
	snprintf(e->cand_addr, sizeof(e->cand_addr), "%s", addr);
	{
		const char *argv[] = {"EVAL", cand_post_lua, "1", hk, addr, entry, ttl};
		st = coord_cmd(e->c, 7, argv, hk, &r);
	}
	if (st == MC_OK)
		freeReplyObject(r);
	return st;
}

static mc_status redis_cand_list(struct mc_coord *m, const char *key,
				 void (*add)(void *arg, const char *name, size_t nlen,
					     const char *val, size_t vlen),
				 void *arg)
{
	struct redis_coord *e = rcoord_of(m);
	char hk[300];
	redisReply *r;
	mc_status st;

	mc_coord_cand_key(key, hk, sizeof(hk));
	{
		const char *argv[] = {"EVAL", cand_list_lua, "1", hk};
		st = coord_cmd(e->c, 4, argv, hk, &r);
	}
	if (st)
		return st;
	if (r->type != REDIS_REPLY_ARRAY || r->elements % 2) {
		freeReplyObject(r);
		return mc_set_error(MC_ERR_METADATA, "%s: candidates of %s: unexpected reply",
				    e->c->base.uri, key);
	}
	for (size_t i = 0; i + 1 < r->elements; i += 2) {
		const redisReply *n = r->element[i], *v = r->element[i + 1];
		if (n->type == REDIS_REPLY_STRING && v->type == REDIS_REPLY_STRING)
			add(arg, n->str, n->len, v->str, v->len);
	}
	freeReplyObject(r);
	return MC_OK;
}

static void redis_cand_drop(struct mc_coord *m, const char *key, const char *addr)
{
	struct redis_coord *e = rcoord_of(m);
	char hk[300];
	redisReply *r;

	if (key)
		mc_coord_cand_key(key, hk, sizeof(hk));
	else
		snprintf(hk, sizeof(hk), "%s", e->cand_key);
	if (!addr)
		addr = e->cand_addr;
	if (!hk[0] || !addr[0])
		return;
	{
		const char *argv[] = {"HDEL", hk, addr};
		if (coord_cmd(e->c, 3, argv, hk, &r) == MC_OK)
			freeReplyObject(r);
		else
			mc_warn("cannot remove the candidate entry %s of %s: %s", addr, hk,
				mc_last_error());
	}
	e->cand_key[0] = '\0';
}

static void redis_coord_close(struct mc_coord *m)
{
	struct redis_coord *e = rcoord_of(m);

	redis_cand_drop(m, NULL, NULL);
	redis_coord_resign(m);
	pthread_mutex_lock(&e->c->lock);
	drop_conn_locked(e->c);
	pthread_mutex_unlock(&e->c->lock);
	client_free(e->c);
	mc_free(e);
}

static const struct mc_coord_ops redis_coord_ops = {
	.campaign = redis_coord_campaign,
	.renew = redis_coord_renew,
	.resign = redis_coord_resign,
	.read = redis_coord_read,
	.evict = redis_coord_evict,
	.cand_post = redis_cand_post,
	.cand_list = redis_cand_list,
	.cand_drop = redis_cand_drop,
	.close = redis_coord_close,
};

mc_status mc_coord_redis_open(const char *uri, long timeout_ms, struct mc_coord **out)
{
	struct redis_coord *e;
	mc_status st;

	e = mc_calloc(1, sizeof(*e));
	if (!e)
		return mc_set_error(MC_ERR_NOMEM, "redis: out of memory opening a coordinator");
	e->base.ops = &redis_coord_ops;
	st = client_new(uri, &e->c); /* connects and PINGs: unreachable fails here */
	if (st) {
		mc_free(e);
		return st;
	}
	if (timeout_ms > 0) {
		/* the next connection (made at once) runs on the caller's bounds */
		pthread_mutex_lock(&e->c->lock);
		e->c->cmd_ms = timeout_ms;
		e->c->connect_ms = MC_MAX(timeout_ms / 3, 1L);
		drop_conn_locked(e->c);
		pthread_mutex_unlock(&e->c->lock);
	}
	*out = &e->base;
	return MC_OK;
}
