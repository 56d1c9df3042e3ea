/*
 * tests/unit/test_meta_redis.c - the Redis metadata backend against real
 * redis-server processes.
 *
 * Each server case starts its own redis-server on a free loopback port
 * (no persistence) and kills it in teardown; readiness is a PING polled
 * against a deadline.  The cases look at the server through a raw hiredis
 * connection to see what the backend hides (expiries, other databases).
 * Key TTLs are shortened to 2 s (MC_REDIS_KEY_TTL_SEC) and the command
 * timeout to 1 s (MC_METADATA_TIMEOUT_MS) so liveness and outage cases are
 * quick.  The whole program is skipped (exit 77) without redis-server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "coord_check.h"
#include "meta/meta.h"
#include "mooncake/status.h"
#include "mooncake/te.h"
#include "support.h"

#define TTL_SEC	   2
#define TIMEOUT_MS 1000

static char redis_bin[512];

struct server {
	pid_t pid;
	uint16_t port;
	char pass[32]; /* requirepass, empty for none */
	char uri[128]; /* redis://127.0.0.1:PORT */
	redisContext *raw;
};

/* ---- helpers ------------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void pause_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static bool find_redis_server(void)
{
	const char *path = getenv("PATH");
	char dirs[4096];

	snprintf(dirs, sizeof(dirs), "%s", path ? path : "/usr/bin:/bin");
	for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d;
	     d = strtok_r(NULL, ":", &save)) {
		snprintf(redis_bin, sizeof(redis_bin), "%s/redis-server", d);
		if (access(redis_bin, X_OK) == 0)
			return true;
	}
	return false;
}

/* A raw connection for looking at the server; NULL when not answering. */
static redisContext *raw_connect(uint16_t port, const char *pass, int db)
{
	struct timeval tv = {.tv_sec = 0, .tv_usec = 300000};
	redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
	redisReply *r;

	if (!c || c->err)
		goto err;
	redisSetTimeout(c, (struct timeval){.tv_sec = 5});
	if (pass && *pass) {
		r = redisCommand(c, "AUTH %s", pass);
		if (!r || r->type == REDIS_REPLY_ERROR)
			goto err_reply;
		freeReplyObject(r);
	}
	if (db) {
		r = redisCommand(c, "SELECT %d", db);
		if (!r || r->type == REDIS_REPLY_ERROR)
			goto err_reply;
		freeReplyObject(r);
	}
	r = redisCommand(c, "PING");
	if (!r || r->type != REDIS_REPLY_STATUS)
		goto err_reply;
	freeReplyObject(r);
	return c;
err_reply:
	if (r)
		freeReplyObject(r);
err:
	if (c)
		redisFree(c);
	return NULL;
}

/* Start redis-server on s->port (0: pick one) and wait until it answers PING. */
static bool server_start(struct server *s)
{
	for (int attempt = 0; attempt < 5; attempt++) {
		uint16_t port = s->port ? s->port : mc_test_free_port();
		char portstr[8];
		uint64_t deadline;
		pid_t pid;

		snprintf(portstr, sizeof(portstr), "%u", port);
		pid = fork();
		if (pid < 0)
			return false;
		if (pid == 0) {
			const char *argv[20] = {redis_bin,   "--port",	   portstr,  "--bind",
						"127.0.0.1", "--save",	   "",	     "--appendonly",
						"no",	     "--dir",	   "/tmp",   "--daemonize",
						"no",	     "--loglevel", "warning"};
			int n = 15;
			if (s->pass[0]) {
				argv[n++] = "--requirepass";
				argv[n++] = s->pass;
			}
			argv[n] = NULL;
			if (!getenv("MC_TEST_REDIS_LOG")) {
				FILE *f = freopen("/dev/null", "w", stdout);
				(void)f;
			}
			execv(redis_bin, (char *const *)argv);
			_exit(127);
		}
		deadline = now_ms() + 10000;
		while (now_ms() < deadline) {
			int st;
			s->raw = raw_connect(port, s->pass, 0);
			if (s->raw) {
				s->pid = pid;
				s->port = port;
				snprintf(s->uri, sizeof(s->uri), "redis://127.0.0.1:%u", port);
				return true;
			}
			if (waitpid(pid, &st, WNOHANG) == pid) {
				pid = 0; /* exited: port taken, try another */
				break;
			}
			pause_ms(10);
		}
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		if (s->port && attempt >= 2)
			return false;
	}
	return false;
}

static void server_stop(struct server *s)
{
	if (s->raw) {
		redisFree(s->raw);
		s->raw = NULL;
	}
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
}

/* A raw command's reply; the test fails when the server does not answer. */
static redisReply *raw(struct server *s, const char *fmt, ...)
{
	redisReply *r;
	va_list ap;

	va_start(ap, fmt);
	r = redisvCommand(s->raw, fmt, ap);
	va_end(ap);
	assert_non_null(r);
	return r;
}

static long long raw_int(struct server *s, const char *fmt, ...)
{
	redisReply *r;
	long long v;
	va_list ap;

	va_start(ap, fmt);
	r = redisvCommand(s->raw, fmt, ap);
	va_end(ap);
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	v = r->integer;
	freeReplyObject(r);
	return v;
}

static bool raw_exists(struct server *s, const char *key)
{
	return raw_int(s, "EXISTS %s", key) == 1;
}

static struct mc_meta *open_ok(const char *uri)
{
	struct mc_meta *m = NULL;
	int rc = mc_meta_open(uri, &m);
	if (rc != MC_OK)
		fprintf(stderr, "open %s: %s\n", uri, mc_last_error());
	assert_int_equal(rc, MC_OK);
	assert_string_equal(m->ops->name, "redis");
	return m;
}

static void expect_meta(struct mc_meta *m, const char *key, const char *want, size_t len)
{
	char *v = NULL;
	size_t n = 0;
	int rc = mc_meta_get(m, key, &v, &n);
	if (rc != MC_OK)
		fprintf(stderr, "get %s: %s\n", key, mc_last_error());
	assert_int_equal(rc, MC_OK);
	assert_int_equal(n, len);
	assert_memory_equal(v, want, len);
	assert_int_equal(v[len], '\0');
	free(v);
}

/* ---- fixtures -------------------------------------------------------------- */

static int env_up(void)
{
	setenv("MC_REDIS_KEY_TTL_SEC", "2", 1);
	setenv("MC_METADATA_TIMEOUT_MS", "1000", 1);
	unsetenv("MC_REDIS_PASSWORD");
	unsetenv("MC_REDIS_USERNAME");
	unsetenv("MC_REDIS_DB_INDEX");
	return 0;
}

static int server_up(void **state)
{
	struct server *s = calloc(1, sizeof(*s));
	env_up();
	if (!s || !server_start(s)) {
		fprintf(stderr, "cannot start %s\n", redis_bin);
		free(s);
		return -1;
	}
	*state = s;
	return 0;
}

static int server_up_auth(void **state)
{
	struct server *s = calloc(1, sizeof(*s));
	env_up();
	if (!s)
		return -1;
	snprintf(s->pass, sizeof(s->pass), "s3cr@t:pw");
	if (!server_start(s)) {
		free(s);
		return -1;
	}
	*state = s;
	return 0;
}

static int server_down(void **state)
{
	struct server *s = *state;
	server_stop(s);
	free(s);
	return 0;
}

/* ---- cases without a server ----------------------------------------------- */

static void bad_uris_and_settings_are_refused(void **state)
{
	static const char *bad[] = {
		"redis://",
		"redis://:6379",
		"redis://host:0",
		"redis://host:65536",
		"redis://host:12x",
		"redis://host:",
		"redis://host:6379/3",
		"redis://host:6379?db=1",
		"redis://justpassword@host:6379",
		"redis://:%zz@host:6379",
		"redis://::1:6379",
		"redis://[::1:6379",
	};
	struct mc_meta *m = NULL;
	(void)state;

	env_up();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = mc_meta_open(bad[i], &m);
		if (rc != MC_ERR_INVALID_PARAMS)
			fprintf(stderr, "%s: %d %s\n", bad[i], rc, mc_last_error());
		assert_int_equal(rc, MC_ERR_INVALID_PARAMS);
		assert_null(m);
		/* the password never shows */
		assert_null(strstr(mc_last_error(), "justpassword"));
	}
	setenv("MC_REDIS_DB_INDEX", "256", 1);
	assert_int_equal(mc_meta_open("redis://127.0.0.1:1", &m), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "MC_REDIS_DB_INDEX"));
	setenv("MC_REDIS_DB_INDEX", "x", 1);
	assert_int_equal(mc_meta_open("redis://127.0.0.1:1", &m), MC_ERR_INVALID_PARAMS);
	unsetenv("MC_REDIS_DB_INDEX");
	assert_null(m);
}

static void unreachable_at_open_names_the_endpoint(void **state)
{
	struct mc_meta *m = NULL;
	uint16_t port = mc_test_free_port();
	char uri[64], want[32];
	uint64_t t0;
	(void)state;

	env_up();
	snprintf(uri, sizeof(uri), "redis://:hunter2@127.0.0.1:%u", port);
	snprintf(want, sizeof(want), "127.0.0.1:%u", port);
	t0 = now_ms();
	assert_int_equal(mc_meta_open(uri, &m), MC_ERR_METADATA);
	assert_true(now_ms() - t0 < 2000);
	assert_null(m);
	assert_non_null(strstr(mc_last_error(), want));
	assert_non_null(strstr(mc_last_error(), "redis://"));
	assert_null(strstr(mc_last_error(), "hunter2"));
}

/* A server that accepts connections and never answers: open times out. */
static void silent_server_at_open_times_out(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	struct mc_meta *m = NULL;
	char uri[64];
	uint64_t t0, ms;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	(void)state;

	env_up();
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	snprintf(uri, sizeof(uri), "redis://127.0.0.1:%u", ntohs(a.sin_port));
	t0 = now_ms();
	assert_int_equal(mc_meta_open(uri, &m), MC_ERR_METADATA);
	ms = now_ms() - t0;
	assert_true(ms >= TIMEOUT_MS - 50);
	assert_true(ms < TIMEOUT_MS + 1500);
	assert_non_null(strstr(mc_last_error(), uri));
	assert_non_null(strstr(mc_last_error(), "timed out"));
	close(fd);
}

/* ---- basic operations -------------------------------------------------------- */

/* The master election's view (meta/coord.h): upstream's hash and scripts. */
static void leader_view_campaign_renew_resign_expire(void **state)
{
	struct server *s = *state;
	char why[256] = "";
	bool ok = mc_test_coord_view(s->uri, why, sizeof(why));

	if (!ok)
		fail_msg("%s", why);
}

/* The election's candidate entries (meta/coord.h): post, list, drop, lapse. */
static void candidate_entries_post_list_drop_lapse(void **state)
{
	struct server *s = *state;
	char why[256] = "";
	bool ok = mc_test_coord_cands(s->uri, why, sizeof(why));

	if (!ok)
		fail_msg("%s", why);
}

static void put_get_del_and_not_found(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	static const char bin[] = "a\0b\r\n$3\0";
	char *v = NULL;
	redisReply *r;

	assert_int_equal(mc_meta_put(m, "mooncake/ram/x", "{\"a\":1}\n", 8), MC_OK);
	expect_meta(m, "mooncake/ram/x", "{\"a\":1}\n", 8);
	/* overwrite, binary-safe, empty */
	assert_int_equal(mc_meta_put(m, "mooncake/ram/x", bin, sizeof(bin)), MC_OK);
	expect_meta(m, "mooncake/ram/x", bin, sizeof(bin));
	assert_int_equal(mc_meta_put(m, "mooncake/empty", "", 0), MC_OK);
	expect_meta(m, "mooncake/empty", "", 0);
	/* the key is the engine's key, verbatim, and carries an expiry */
	r = raw(s, "PTTL %s", "mooncake/ram/x");
	assert_int_equal(r->type, REDIS_REPLY_INTEGER);
	assert_true(r->integer > 0 && r->integer <= TTL_SEC * 1000);
	freeReplyObject(r);

	assert_int_equal(mc_meta_get(m, "mooncake/absent", &v, NULL), MC_ERR_NOT_FOUND);
	assert_non_null(strstr(mc_last_error(), "mooncake/absent"));
	assert_null(v);
	assert_int_equal(mc_meta_del(m, "mooncake/ram/x"), MC_OK);
	assert_int_equal(mc_meta_get(m, "mooncake/ram/x", &v, NULL), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_meta_del(m, "mooncake/ram/x"), MC_ERR_NOT_FOUND);
	assert_false(raw_exists(s, "mooncake/ram/x"));

	/* a key of the wrong type is a service error, not a crash */
	freeReplyObject(raw(s, "LPUSH %s %s", "mooncake/list", "x"));
	assert_int_equal(mc_meta_get(m, "mooncake/list", &v, NULL), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "WRONGTYPE"));
	mc_meta_close(m);
}

static void one_mib_value_roundtrips(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	size_t len = 1u << 20;
	char *big = malloc(len);

	mc_test_fill(big, len, 42);
	assert_int_equal(mc_meta_put(m, "mooncake/big", big, len), MC_OK);
	expect_meta(m, "mooncake/big", big, len);
	assert_int_equal(raw_int(s, "STRLEN %s", "mooncake/big"), (long long)len);
	mc_meta_close(m);
	free(big);
}

static void keys_are_gone_after_close(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	struct mc_meta *other = open_ok(s->uri);

	assert_int_equal(mc_meta_put(m, "k1", "1", 1), MC_OK);
	assert_int_equal(mc_meta_put(m, "k2", "2", 1), MC_OK);
	assert_int_equal(mc_meta_put(m, "k3", "3", 1), MC_OK);
	assert_int_equal(mc_meta_del(m, "k3"), MC_OK);
	assert_int_equal(mc_meta_put(other, "theirs", "t", 1), MC_OK);
	assert_true(raw_exists(s, "k1"));
	mc_meta_close(m);
	assert_false(raw_exists(s, "k1"));
	assert_false(raw_exists(s, "k2"));
	assert_false(raw_exists(s, "k3"));
	/* another client's keys are not ours to delete */
	assert_true(raw_exists(s, "theirs"));
	mc_meta_close(other);
	assert_false(raw_exists(s, "theirs"));
}

/* Many threads share one client. */
struct hammer {
	struct mc_meta *m;
	int id;
	int failures;
};

static void *hammer_main(void *arg)
{
	struct hammer *h = arg;
	char key[32], val[32];

	for (int i = 0; i < 200; i++) {
		char *v = NULL;
		size_t n = 0;
		snprintf(key, sizeof(key), "t%d/%d", h->id, i % 7);
		snprintf(val, sizeof(val), "v%d", i);
		if (mc_meta_put(h->m, key, val, strlen(val)) != MC_OK ||
		    mc_meta_get(h->m, key, &v, &n) != MC_OK || n != strlen(val) ||
		    memcmp(v, val, n) != 0)
			h->failures++;
		free(v);
		if (i % 3 == 0 && mc_meta_del(h->m, key) != MC_OK)
			h->failures++;
	}
	return NULL;
}

static void threads_share_one_client(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	struct hammer h[4];
	pthread_t t[4];

	for (int i = 0; i < 4; i++) {
		h[i] = (struct hammer){.m = m, .id = i};
		assert_int_equal(pthread_create(&t[i], NULL, hammer_main, &h[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		assert_int_equal(h[i].failures, 0);
	}
	mc_meta_close(m);
	assert_int_equal(raw_int(s, "DBSIZE"), 0);
}

/* ---- auth and database -------------------------------------------------------- */

static void password_auth_forms_and_wrong_password(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = NULL;
	char uri[160];
	redisReply *r;

	/* no password: the server says NOAUTH and we say how to fix it */
	assert_int_equal(mc_meta_open(s->uri, &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), s->uri));
	assert_non_null(strstr(mc_last_error(), "NOAUTH"));
	assert_non_null(strstr(mc_last_error(), "MC_REDIS_PASSWORD"));

	/* wrong password */
	snprintf(uri, sizeof(uri), "redis://:wrong-pw@127.0.0.1:%u", s->port);
	assert_int_equal(mc_meta_open(uri, &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), s->uri));
	assert_non_null(strstr(mc_last_error(), "AUTH"));
	assert_null(strstr(mc_last_error(), "wrong-pw"));
	assert_null(m);

	/* in the uri, percent-encoded ('@' and ':' in the password) */
	snprintf(uri, sizeof(uri), "redis://:s3cr%%40t%%3Apw@127.0.0.1:%u", s->port);
	m = open_ok(uri);
	assert_string_equal(m->uri, s->uri); /* no credentials in the name */
	assert_int_equal(mc_meta_put(m, "a", "1", 1), MC_OK);
	expect_meta(m, "a", "1", 1);
	mc_meta_close(m);

	/* from the environment */
	setenv("MC_REDIS_PASSWORD", "s3cr@t:pw", 1);
	m = open_ok(s->uri);
	assert_int_equal(mc_meta_put(m, "b", "2", 1), MC_OK);
	mc_meta_close(m);
	setenv("MC_REDIS_PASSWORD", "nope", 1);
	assert_int_equal(mc_meta_open(s->uri, &m), MC_ERR_METADATA);
	unsetenv("MC_REDIS_PASSWORD");

	/* an ACL user, in the uri and from the environment */
	r = raw(s, "ACL SETUSER alice on >alicepw ~* &* +@all");
	assert_int_equal(r->type, REDIS_REPLY_STATUS);
	freeReplyObject(r);
	snprintf(uri, sizeof(uri), "redis://alice:alicepw@127.0.0.1:%u", s->port);
	m = open_ok(uri);
	assert_int_equal(mc_meta_put(m, "c", "3", 1), MC_OK);
	mc_meta_close(m);
	snprintf(uri, sizeof(uri), "redis://alice:s3cr%%40t%%3Apw@127.0.0.1:%u", s->port);
	assert_int_equal(mc_meta_open(uri, &m), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), "AUTH"));
	setenv("MC_REDIS_USERNAME", "alice", 1);
	setenv("MC_REDIS_PASSWORD", "alicepw", 1);
	m = open_ok(s->uri);
	mc_meta_close(m);
	unsetenv("MC_REDIS_USERNAME");
	unsetenv("MC_REDIS_PASSWORD");
}

static void db_index_selects_the_database(void **state)
{
	struct server *s = *state;
	struct mc_meta *m;
	redisContext *db5;
	redisReply *r;

	setenv("MC_REDIS_DB_INDEX", "5", 1);
	m = open_ok(s->uri);
	unsetenv("MC_REDIS_DB_INDEX");
	assert_int_equal(mc_meta_put(m, "in5", "x", 1), MC_OK);
	expect_meta(m, "in5", "x", 1);
	assert_false(raw_exists(s, "in5"));
	/* a reconnection selects the database again */
	freeReplyObject(raw(s, "CLIENT KILL TYPE normal SKIPME yes"));
	expect_meta(m, "in5", "x", 1);
	assert_int_equal(mc_meta_put(m, "in5", "y", 1), MC_OK);
	db5 = raw_connect(s->port, NULL, 5);
	assert_non_null(db5);
	r = redisCommand(db5, "GET in5");
	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_STRING);
	assert_string_equal(r->str, "y");
	freeReplyObject(r);
	assert_false(raw_exists(s, "in5"));
	mc_meta_close(m);
	r = redisCommand(db5, "EXISTS in5");
	assert_non_null(r);
	assert_int_equal(r->integer, 0);
	freeReplyObject(r);
	redisFree(db5);
}

/* ---- liveness ------------------------------------------------------------------ */

/* A child opens a client, puts a key and dies without closing. */
static pid_t crashed_client(const char *uri, int *ready_fd)
{
	int p[2];
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct mc_meta *m = NULL;
		char ok = 0;
		close(p[0]);
		if (mc_meta_open(uri, &m) == MC_OK && mc_meta_put(m, "dead/key", "d", 1) == MC_OK)
			ok = 1;
		if (write(p[1], &ok, 1) != 1)
			_exit(2);
		_exit(0); /* no close: the keys stay behind until they expire */
	}
	close(p[1]);
	*ready_fd = p[0];
	return pid;
}

static void crashed_client_keys_expire_live_client_keys_stay(void **state)
{
	struct server *s = *state;
	struct mc_meta *live;
	uint64_t t0, gone_ms = 0;
	int fd, st;
	char ok = 0;
	pid_t pid;

	pid = crashed_client(s->uri, &fd);
	assert_int_equal(read(fd, &ok, 1), 1);
	assert_int_equal(ok, 1);
	close(fd);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	t0 = now_ms();
	assert_true(raw_exists(s, "dead/key"));

	live = open_ok(s->uri);
	assert_int_equal(mc_meta_put(live, "live/key", "l", 1), MC_OK);
	/* watch both keys for three TTLs */
	while (now_ms() - t0 < 3 * TTL_SEC * 1000) {
		assert_true(raw_exists(s, "live/key"));
		if (!gone_ms && !raw_exists(s, "dead/key"))
			gone_ms = now_ms() - t0;
		pause_ms(50);
	}
	assert_true(gone_ms > 0);
	assert_true(gone_ms <= TTL_SEC * 1000 + 500);
	expect_meta(live, "live/key", "l", 1);
	mc_meta_close(live);
}

static bool wait_exists(struct server *s, const char *key, uint64_t within_ms)
{
	uint64_t deadline = now_ms() + within_ms;
	do {
		if (raw_exists(s, key))
			return true;
		pause_ms(20);
	} while (now_ms() < deadline);
	return false;
}

/* Someone flushes the database: the owner puts its keys back, not deleted ones. */
static void flushed_keys_are_set_again(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);

	assert_int_equal(mc_meta_put(m, "mine/1", "one", 3), MC_OK);
	assert_int_equal(mc_meta_put(m, "mine/2", "two", 3), MC_OK);
	assert_int_equal(mc_meta_put(m, "mine/2", "TWO", 3), MC_OK);
	assert_int_equal(mc_meta_put(m, "mine/3", "three", 5), MC_OK);
	assert_int_equal(mc_meta_del(m, "mine/3"), MC_OK);
	freeReplyObject(raw(s, "FLUSHALL"));
	assert_false(raw_exists(s, "mine/1"));
	/* within a refresh period (TTL/3) plus slack */
	assert_true(wait_exists(s, "mine/1", TTL_SEC * 1000 / 3 + 1000));
	assert_true(wait_exists(s, "mine/2", 100));
	expect_meta(m, "mine/2", "TWO", 3);
	assert_false(raw_exists(s, "mine/3"));
	assert_true(raw_int(s, "PTTL %s", "mine/1") > 0);
	mc_meta_close(m);
}

static void restarted_server_gets_the_keys_back(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	uint64_t t0;

	assert_int_equal(mc_meta_put(m, "mooncake/rpc_meta/x", "{\"r\":1}", 7), MC_OK);
	server_stop(s);
	assert_true(server_start(s)); /* same port, empty */
	assert_false(raw_exists(s, "mooncake/rpc_meta/x"));
	t0 = now_ms();
	/* the refresher reconnects by itself, without any call from us */
	assert_true(wait_exists(s, "mooncake/rpc_meta/x", TTL_SEC * 1000 / 3 + 1500));
	fprintf(stderr, "# keys back %llu ms after the restart\n",
		(unsigned long long)(now_ms() - t0));
	expect_meta(m, "mooncake/rpc_meta/x", "{\"r\":1}", 7);
	/* and ordinary calls work on the new connection */
	assert_int_equal(mc_meta_put(m, "after", "a", 1), MC_OK);
	expect_meta(m, "after", "a", 1);
	mc_meta_close(m);
	assert_false(raw_exists(s, "mooncake/rpc_meta/x"));
}

static void stopped_server_fails_bounded_then_recovers(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	char *v = NULL;
	uint64_t t0, ms;

	assert_int_equal(mc_meta_put(m, "k", "before", 6), MC_OK);
	server_stop(s);
	for (int i = 0; i < 3; i++) {
		t0 = now_ms();
		assert_int_equal(mc_meta_get(m, "k", &v, NULL), MC_ERR_METADATA);
		ms = now_ms() - t0;
		assert_true(ms < TIMEOUT_MS + 1000);
		assert_non_null(strstr(mc_last_error(), s->uri));
		t0 = now_ms();
		assert_int_equal(mc_meta_put(m, "k", "during", 6), MC_ERR_METADATA);
		assert_true(now_ms() - t0 < TIMEOUT_MS + 1000);
		assert_int_equal(mc_meta_del(m, "gone"), MC_ERR_METADATA);
	}
	assert_null(v);
	assert_true(server_start(s));
	/* the first call after the restart reconnects */
	expect_meta(m, "k", "during", 6); /* the latest put was made good */
	assert_int_equal(mc_meta_put(m, "k", "after", 5), MC_OK);
	expect_meta(m, "k", "after", 5);
	mc_meta_close(m);
}

/* A server that stops answering (SIGSTOP): calls time out, then work again. */
static void frozen_server_times_out_then_recovers(void **state)
{
	struct server *s = *state;
	struct mc_meta *m = open_ok(s->uri);
	char *v = NULL;
	uint64_t t0, ms;

	assert_int_equal(mc_meta_put(m, "k", "v", 1), MC_OK);
	assert_int_equal(kill(s->pid, SIGSTOP), 0);
	for (int i = 0; i < 2; i++) {
		t0 = now_ms();
		assert_int_equal(mc_meta_get(m, "k", &v, NULL), MC_ERR_METADATA);
		ms = now_ms() - t0;
		fprintf(stderr, "# frozen server: get failed after %llu ms: %s\n",
			(unsigned long long)ms, mc_last_error());
		/* at worst: waiting for the refresher's timed-out round, a connect (the
		 * kernel still accepts), the restore round and the command */
		assert_true(ms < 3 * TIMEOUT_MS + 1000);
		assert_non_null(strstr(mc_last_error(), s->uri));
		assert_non_null(strstr(mc_last_error(), "timed out"));
	}
	assert_null(v);
	assert_int_equal(kill(s->pid, SIGCONT), 0);
	expect_meta(m, "k", "v", 1);
	mc_meta_close(m);
	assert_false(raw_exists(s, "k"));
}

/* ---- two engines through Redis ------------------------------------------------ */

#define EBUF (4u << 20)

static struct mc_te *engine(const char *uri, const char *name)
{
	struct mc_te *te = mc_test_engine_new(uri, name);
	assert_non_null(te);
	return te;
}

static int xfer(struct mc_te *te, int op, void *local, mc_segment_id seg, void *remote,
		uint64_t len)
{
	struct mc_xfer_req r = {.opcode = op,
				.source = local,
				.target_id = seg,
				.target_offset = (uint64_t)(uintptr_t)remote,
				.length = len};
	return mc_te_transfer_sync(te, &r, 1, 10000);
}

static void two_engines_transfer_through_redis(void **state)
{
	struct server *s = *state;
	struct mc_te *a = engine(s->uri, "redis-a"), *b = engine(s->uri, "redis-b");
	char *abuf = mmap(NULL, EBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *bbuf = mmap(NULL, EBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mc_segment_id bid;

	assert_int_equal(mc_te_register(a, abuf, EBUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_register(b, bbuf, EBUF, "cpu:0", true), MC_OK);
	assert_true(raw_exists(s, "mooncake/rpc_meta/redis-b"));
	assert_true(raw_exists(s, "mooncake/ram/redis-b"));
	assert_true(raw_int(s, "PTTL %s", "mooncake/ram/redis-b") > 0);

	assert_int_equal(mc_te_open_segment(a, "redis-b", &bid), MC_OK);
	/* reads first: the test writes b's memory only before b's threads serve it
	 * (TSan cannot see the ordering that loopback sockets give) */
	mc_test_fill(bbuf, EBUF, 6);
	assert_int_equal(xfer(a, MC_OP_READ, abuf, bid, bbuf + 7, EBUF - 7), MC_OK);
	assert_memory_equal(abuf, bbuf + 7, EBUF - 7);
	mc_test_fill(abuf, EBUF, 5);
	assert_int_equal(xfer(a, MC_OP_WRITE, abuf, bid, bbuf + 100, EBUF - 200), MC_OK);
	/* a read on the same connection is answered after the write landed */
	assert_int_equal(xfer(a, MC_OP_READ, abuf + EBUF - 100, bid, bbuf, 100), MC_OK);
	assert_memory_equal(abuf, bbuf + 100, EBUF - 200);

	/* the metadata service goes away: established transfers keep working */
	{
		uint16_t port = s->port;
		server_stop(s);
		mc_test_fill(abuf, 4096, 9);
		assert_int_equal(xfer(a, MC_OP_WRITE, abuf, bid, bbuf, 4096), MC_OK);
		assert_int_equal(xfer(a, MC_OP_READ, abuf + 8192, bid, bbuf, 4096), MC_OK);
		assert_memory_equal(abuf, abuf + 8192, 4096);
		s->port = port;
		assert_true(server_start(s));
		/* and both engines publish themselves again */
		assert_true(wait_exists(s, "mooncake/ram/redis-b", TTL_SEC * 1000 / 3 + 1500));
		assert_true(wait_exists(s, "mooncake/rpc_meta/redis-a", 500));
	}

	mc_te_free(b);
	assert_false(raw_exists(s, "mooncake/rpc_meta/redis-b"));
	assert_false(raw_exists(s, "mooncake/ram/redis-b"));
	mc_te_free(a);
	assert_int_equal(raw_int(s, "DBSIZE"), 0);
	munmap(abuf, EBUF);
	munmap(bbuf, EBUF);
}

/* Garbage under a descriptor key is reported with the key's name. */
static void corrupt_descriptor_is_named(void **state)
{
	struct server *s = *state;
	struct mc_te *a = engine(s->uri, "redis-a"), *b = engine(s->uri, "redis-c");
	mc_segment_id id;

	freeReplyObject(raw(s, "SET %s %s", "mooncake/ram/redis-c", "{not json"));
	assert_int_not_equal(mc_te_open_segment(a, "redis-c", &id), MC_OK);
	assert_non_null(strstr(mc_last_error(), "redis-c"));
	mc_te_free(b);
	mc_te_free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bad_uris_and_settings_are_refused),
		cmocka_unit_test(unreachable_at_open_names_the_endpoint),
		cmocka_unit_test(silent_server_at_open_times_out),
		cmocka_unit_test_setup_teardown(put_get_del_and_not_found, server_up, server_down),
		cmocka_unit_test_setup_teardown(leader_view_campaign_renew_resign_expire, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(candidate_entries_post_list_drop_lapse, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(one_mib_value_roundtrips, server_up, server_down),
		cmocka_unit_test_setup_teardown(keys_are_gone_after_close, server_up, server_down),
		cmocka_unit_test_setup_teardown(threads_share_one_client, server_up, server_down),
		cmocka_unit_test_setup_teardown(password_auth_forms_and_wrong_password,
						server_up_auth, server_down),
		cmocka_unit_test_setup_teardown(db_index_selects_the_database, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(crashed_client_keys_expire_live_client_keys_stay,
						server_up, server_down),
		cmocka_unit_test_setup_teardown(flushed_keys_are_set_again, server_up, server_down),
		cmocka_unit_test_setup_teardown(restarted_server_gets_the_keys_back, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(stopped_server_fails_bounded_then_recovers,
						server_up, server_down),
		cmocka_unit_test_setup_teardown(frozen_server_times_out_then_recovers, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(two_engines_transfer_through_redis, server_up,
						server_down),
		cmocka_unit_test_setup_teardown(corrupt_descriptor_is_named, server_up,
						server_down),
	};

	if (!find_redis_server()) {
		printf("1..0 # SKIP redis-server not found\n");
		return 77;
	}
	signal(SIGPIPE, SIG_DFL); /* the backend must not need SIGPIPE ignored */
	return cmocka_run_group_tests(tests, NULL, NULL);
}
