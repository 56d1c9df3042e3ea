/*
 * tests/unit/test_meta_etcd.c - the etcd metadata backend against real etcd.
 *
 * Every case starts its own members (tests/support/etcd_cluster.c) on free
 * loopback ports and stops them in teardown; the program exits 77 when no
 * etcd binary is installed.  Leases run with MC_ETCD_LEASE_TTL_SEC=2 so the
 * expiry cases stay short.  etcd's own view is read with raw gateway
 * requests (libcurl + jansson) where the backend would hide it: which lease
 * a key is under, whether a key is really gone.  A "crashed" client is this
 * program run again with --crash-child: it opens a client, puts a key,
 * reports, and is SIGKILLed, so its lease is never revoked.
 *
 * Waiting is always polling for the expected state with a deadline; the one
 * plain sleep holds an etcd outage for longer than the lease TTL, which is
 * the scenario itself, not a synchronisation.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "coord_check.h"
#include "etcd_cluster.h"
#include "meta/desc.h"
#include "meta/meta.h"
#include "mooncake/status.h"
#include "mooncake/te.h"
#include "support.h"

#define TTL_SEC	     2
#define START_MS     30000 /* etcd start-up on a loaded 2-core machine */
#define TIMEOUT_MS   5000  /* the backend's default request time */
#define EXPIRY_SLACK 2500  /* etcd checks expiry every 500 ms; scheduling */
#define RESTORE_MS   (TTL_SEC * 1000 + 8000)

struct fx {
	struct mc_etcd_cluster *etcd;
	struct mc_meta *m;
	char uri[512];
};

/* ---- small helpers ---------------------------------------------------------- */

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void nap_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

static char *b64(const void *data, size_t len)
{
	static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const unsigned char *p = data;
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
	size_t i;

	for (i = 0; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
		*o++ = a[v >> 18];
		*o++ = a[(v >> 12) & 63];
		*o++ = a[(v >> 6) & 63];
		*o++ = a[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < len ? (uint32_t)p[i + 1] << 8 : 0);
		*o++ = a[v >> 18];
		*o++ = a[(v >> 12) & 63];
		*o++ = i + 1 < len ? a[(v >> 6) & 63] : '=';
		*o++ = '=';
	}
	*o = '\0';
	return out;
}

static size_t grow(char *p, size_t sz, size_t n, void *arg)
{
	struct {
		char *d;
		size_t len;
	} *r = arg;
	char *nd = realloc(r->d, r->len + sz * n + 1);
	if (!nd)
		return 0;
	memcpy(nd + r->len, p, sz * n);
	r->len += sz * n;
	nd[r->len] = '\0';
	r->d = nd;
	return sz * n;
}

/* POST body to http://<ep>/v3<path>; the parsed answer, or NULL. */
static json_t *raw_post(const char *ep, const char *path, const char *body)
{
	struct {
		char *d;
		size_t len;
	} r = {0};
	char url[128];
	json_t *j = NULL;
	CURL *h = curl_easy_init();

	snprintf(url, sizeof(url), "http://%s/v3%s", ep, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 5000L);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, grow);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
	if (curl_easy_perform(h) == CURLE_OK && r.d)
		j = json_loads(r.d, JSON_DISABLE_EOF_CHECK, NULL);
	curl_easy_cleanup(h);
	free(r.d);
	return j;
}

static int64_t jint(const json_t *v)
{
	if (json_is_string(v))
		return strtoll(json_string_value(v), NULL, 10);
	return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* etcd's own view of key: true if present, with its lease and value length. */
static bool raw_key(const char *ep, const char *key, int64_t *lease_out, size_t *b64len_out)
{
	char *k = b64(key, strlen(key)), body[512];
	json_t *ans, *kv;
	bool found = false;

	snprintf(body, sizeof(body), "{\"key\":\"%s\"}", k);
	free(k);
	ans = raw_post(ep, "/kv/range", body);
	assert_non_null(ans);
	kv = json_array_get(json_object_get(ans, "kvs"), 0);
	if (kv) {
		found = true;
		if (lease_out)
			*lease_out = jint(json_object_get(kv, "lease"));
		if (b64len_out)
			*b64len_out = json_string_length(json_object_get(kv, "value"));
	}
	json_decref(ans);
	return found;
}

static void raw_revoke(const char *ep, int64_t lease)
{
	char body[64];
	snprintf(body, sizeof(body), "{\"ID\":\"%lld\"}", (long long)lease);
	json_decref(raw_post(ep, "/lease/revoke", body));
}

static void put_str(struct mc_meta *m, const char *key, const char *val)
{
	int rc = mc_meta_put(m, key, val, strlen(val));
	if (rc != MC_OK)
		fprintf(stderr, "put %s: %s\n", key, mc_last_error());
	assert_int_equal(rc, MC_OK);
}

static void check_value(struct mc_meta *m, const char *key, const char *val)
{
	char *out = NULL;
	size_t len = 0;
	int rc = mc_meta_get(m, key, &out, &len);
	if (rc != MC_OK)
		fprintf(stderr, "get %s: %s\n", key, mc_last_error());
	assert_int_equal(rc, MC_OK);
	assert_int_equal(len, strlen(val));
	assert_string_equal(out, val);
	free(out);
}

static int get_status(struct mc_meta *m, const char *key)
{
	char *out = NULL;
	int rc = mc_meta_get(m, key, &out, NULL);
	free(out);
	return rc;
}

/* Poll until get(key) returns want; the time it took, or -1 at the deadline. */
static long wait_get_status(struct mc_meta *m, const char *key, int want, long deadline_ms)
{
	uint64_t t0 = now_ms();
	for (;;) {
		if (get_status(m, key) == want)
			return (long)(now_ms() - t0);
		if (now_ms() - t0 > (uint64_t)deadline_ms)
			return -1;
		nap_ms(50);
	}
}

/* get(key) must keep returning val until ms have passed. */
static void expect_stays(struct mc_meta *m, const char *key, const char *val, long ms)
{
	uint64_t end = now_ms() + (uint64_t)ms;
	do {
		check_value(m, key, val);
		nap_ms(100);
	} while (now_ms() < end);
}

/* ---- fixtures ----------------------------------------------------------------- */

static int start(void **state, int members)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f || mc_etcd_cluster_start(members, START_MS, &f->etcd) != 0) {
		free(f);
		return -1;
	}
	snprintf(f->uri, sizeof(f->uri), "%s", mc_etcd_cluster_uri(f->etcd));
	*state = f;
	return 0;
}

static int setup_one(void **state)
{
	struct fx *f;

	if (start(state, 1) != 0)
		return -1;
	f = *state;
	if (mc_meta_open(f->uri, &f->m) != MC_OK) {
		fprintf(stderr, "open %s: %s\n", f->uri, mc_last_error());
		return -1;
	}
	return 0;
}

static int setup_one_no_client(void **state)
{
	return start(state, 1);
}

static int setup_three_no_client(void **state)
{
	return start(state, 3);
}

static int teardown(void **state)
{
	struct fx *f = *state;

	if (!f)
		return 0;
	mc_meta_close(f->m);
	mc_etcd_cluster_stop(f->etcd);
	free(f);
	return 0;
}

/* ---- basic operations ------------------------------------------------------- */

/* The master election's view (meta/coord.h): txn create-if-absent under a lease. */
static void leader_view_campaign_renew_resign_expire(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	bool ok = mc_test_coord_view(f->uri, why, sizeof(why));

	if (!ok)
		fail_msg("%s", why);
}

/* The election's candidate entries (meta/coord.h): post, list, drop, lapse. */
static void candidate_entries_post_list_drop_lapse(void **state)
{
	struct fx *f = *state;
	char why[256] = "";
	bool ok = mc_test_coord_cands(f->uri, why, sizeof(why));

	if (!ok)
		fail_msg("%s", why);
}

static void put_get_del_and_not_found(void **state)
{
	struct fx *f = *state;
	const char *k = "mooncake/ram/node-a";

	assert_string_equal(f->m->ops->name, "etcd");
	assert_int_equal(get_status(f->m, k), MC_ERR_NOT_FOUND);
	assert_non_null(strstr(mc_last_error(), k));
	put_str(f->m, k, "{\"name\":\"node-a\"}\n");
	check_value(f->m, k, "{\"name\":\"node-a\"}\n");
	put_str(f->m, k, "{\"name\":\"node-a\",\"v\":2}");
	check_value(f->m, k, "{\"name\":\"node-a\",\"v\":2}");
	assert_int_equal(mc_meta_del(f->m, k), MC_OK);
	assert_int_equal(get_status(f->m, k), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_meta_del(f->m, k), MC_ERR_NOT_FOUND);
	/* a key only a prefix of another is not found either */
	put_str(f->m, "mooncake/ram/node-ab", "x");
	assert_int_equal(get_status(f->m, "mooncake/ram/node-a"), MC_ERR_NOT_FOUND);
	assert_int_equal(mc_meta_get(f->m, NULL, NULL, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_put(f->m, "k", NULL, 3), MC_ERR_INVALID_PARAMS);
}

static void binary_empty_and_large_values(void **state)
{
	struct fx *f = *state;
	unsigned char bin[256 * 3];
	const size_t big = 1u << 20;
	char *buf = malloc(big), *out = NULL;
	const char *odd = "mooncake/ram/h\xc3\xa4st:1/with spaces?&=%";
	size_t len = 0;

	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (unsigned char)(i * 7 + 3);
	bin[0] = 0;
	/* 1..3 bytes exercise every base64 padding case */
	for (size_t n = 0; n <= sizeof(bin); n += (n < 8 ? 1 : 97)) {
		assert_int_equal(mc_meta_put(f->m, "bin", (const char *)bin, n), MC_OK);
		assert_int_equal(mc_meta_get(f->m, "bin", &out, &len), MC_OK);
		assert_int_equal(len, n);
		assert_int_equal(out[n], '\0');
		if (n)
			assert_memory_equal(out, bin, n);
		free(out);
	}
	assert_int_equal(mc_meta_put(f->m, "empty", "", 0), MC_OK);
	assert_int_equal(mc_meta_get(f->m, "empty", &out, &len), MC_OK);
	assert_int_equal(len, 0);
	assert_string_equal(out, "");
	free(out);

	mc_test_fill(buf, big, 42);
	assert_int_equal(mc_meta_put(f->m, "big", buf, big), MC_OK);
	assert_int_equal(mc_meta_get(f->m, "big", &out, &len), MC_OK);
	assert_int_equal(len, big);
	assert_memory_equal(out, buf, big);
	free(out);

	put_str(f->m, odd, "v");
	check_value(f->m, odd, "v");
	assert_true(raw_key(mc_etcd_member_endpoint(f->etcd, 0), odd, NULL, NULL));
	free(buf);
}

/* Keys are the engine's, byte for byte, and every put sits under one lease. */
static void keys_verbatim_under_the_client_lease(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	char *k1, *k2;
	int64_t l1 = 0, l2 = 0;
	size_t vlen = 0;

	setenv("MC_METADATA_CLUSTER_ID", "c1", 1);
	k1 = mc_meta_key_segment("node-1");
	k2 = mc_meta_key_rpc("node-1");
	unsetenv("MC_METADATA_CLUSTER_ID");
	assert_string_equal(k1, "mooncake/c1/ram/node-1");
	assert_string_equal(k2, "mooncake/c1/rpc_meta/node-1");
	put_str(f->m, k1, "{\"a\":1}");
	put_str(f->m, k2, "{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":1}");
	assert_true(raw_key(ep, k1, &l1, &vlen));
	assert_true(raw_key(ep, k2, &l2, NULL));
	assert_int_equal(vlen, 12); /* base64 of the 7 bytes */
	assert_true(l1 != 0);
	assert_true(l1 == l2);
	free(k1);
	free(k2);
}

static void bad_connection_strings(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	struct mc_meta *m = NULL;
	char uri[256];

	assert_int_equal(mc_meta_open("etcd://", &m), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_open("etcd://,; ,", &m), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_meta_open("etcd://:2379", &m), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), ":2379"));
	assert_int_equal(mc_meta_open("etcd://host:", &m), MC_ERR_INVALID_PARAMS);
	assert_null(m);

	/* every accepted spelling reaches the member */
	const char *forms[] = {"etcd://%s", "etcd://%s/", "ETCD://http://%s",
			       "%s",	    " %s ; ,",	  "%s,127.0.0.1:1"};
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		snprintf(uri, sizeof(uri), forms[i], ep);
		assert_int_equal(mc_meta_open(uri, &m), MC_OK);
		assert_string_equal(m->ops->name, "etcd");
		assert_string_equal(m->uri, uri);
		put_str(m, "form", uri);
		check_value(f->m, "form", uri);
		mc_meta_close(m);
		m = NULL;
	}
}

/* ---- leases ------------------------------------------------------------------- */

static void closed_client_keys_are_gone_at_once(void **state)
{
	struct fx *f = *state;
	struct mc_meta *other = NULL;

	assert_int_equal(mc_meta_open(f->uri, &other), MC_OK);
	put_str(f->m, "mooncake/ram/closing", "x");
	put_str(other, "mooncake/ram/staying", "y");
	mc_meta_close(f->m);
	f->m = NULL;
	/* no waiting: revoke removed it before close returned */
	assert_int_equal(get_status(other, "mooncake/ram/closing"), MC_ERR_NOT_FOUND);
	check_value(other, "mooncake/ram/staying", "y");
	mc_meta_close(other);
}

/* Run by the crash cases: open, put, say "ok", wait to be killed. */
static int crash_child(const char *uri, const char *key)
{
	struct mc_meta *m = NULL;

	if (mc_meta_open(uri, &m) != MC_OK || mc_meta_put(m, key, "crash", 5) != MC_OK) {
		fprintf(stderr, "crash child: %s\n", mc_last_error());
		return 1;
	}
	printf("ok\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* Start the crash child and wait for its "ok"; its pid. */
static pid_t spawn_crash_child(const char *uri, const char *key)
{
	pid_t parent = getpid(), pid;
	struct pollfd pfd;
	char line[8] = "";
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execl("/proc/self/exe", "test_meta_etcd", "--crash-child", uri, key, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	pfd.fd = fds[0];
	pfd.events = POLLIN;
	assert_int_equal(poll(&pfd, 1, 20000), 1);
	assert_true(read(fds[0], line, sizeof(line) - 1) > 0);
	close(fds[0]);
	assert_string_equal(line, "ok\n");
	return pid;
}

static void crashed_client_keys_vanish_within_ttl(void **state)
{
	struct fx *f = *state;
	uint64_t live_put;
	pid_t child;
	long gone;

	put_str(f->m, "mooncake/ram/live", "alive");
	live_put = now_ms();
	child = spawn_crash_child(f->uri, "mooncake/ram/crashed");
	check_value(f->m, "mooncake/ram/crashed", "crash");
	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	gone = wait_get_status(f->m, "mooncake/ram/crashed", MC_ERR_NOT_FOUND,
			       TTL_SEC * 1000 + EXPIRY_SLACK);
	fprintf(stderr, "# crashed client's key gone after %ld ms (ttl %d s)\n", gone, TTL_SEC);
	assert_true(gone >= 0);
	/* the live client's key outlives several TTLs */
	expect_stays(f->m, "mooncake/ram/live", "alive",
		     (long)(live_put + 3 * TTL_SEC * 1000 - now_ms()));
}

static void lease_lost_behind_the_clients_back_keys_come_back(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	int64_t old = 0, now = 0, l3 = 0;
	long back;

	put_str(f->m, "k1", "one");
	put_str(f->m, "k2", "two");
	put_str(f->m, "k2", "two-b");
	put_str(f->m, "k4", "four");
	assert_int_equal(mc_meta_del(f->m, "k4"), MC_OK);
	assert_true(raw_key(ep, "k1", &old, NULL));
	raw_revoke(ep, old);
	assert_false(raw_key(ep, "k1", NULL, NULL));
	/* the next put finds the lease gone and replaces it at once */
	put_str(f->m, "k3", "three");
	check_value(f->m, "k3", "three");
	back = wait_get_status(f->m, "k1", MC_OK, RESTORE_MS);
	assert_true(back >= 0);
	/* the keys come back one put at a time: wait for each */
	assert_true(wait_get_status(f->m, "k2", MC_OK, RESTORE_MS) >= 0);
	check_value(f->m, "k1", "one");
	check_value(f->m, "k2", "two-b");
	assert_int_equal(get_status(f->m, "k4"), MC_ERR_NOT_FOUND);
	assert_true(raw_key(ep, "k1", &now, NULL));
	assert_true(raw_key(ep, "k3", &l3, NULL));
	assert_true(now != old && now != 0);
	assert_true(l3 == now);

	/* and again, found by the keep-alive thread this time */
	raw_revoke(ep, now);
	back = wait_get_status(f->m, "k2", MC_OK, RESTORE_MS);
	fprintf(stderr, "# keys restored %ld ms after the lease was revoked\n", back);
	assert_true(back >= 0);
	assert_true(wait_get_status(f->m, "k1", MC_OK, RESTORE_MS) >= 0);
	assert_true(wait_get_status(f->m, "k3", MC_OK, RESTORE_MS) >= 0);
	check_value(f->m, "k1", "one");
	check_value(f->m, "k3", "three");
	assert_int_equal(get_status(f->m, "k4"), MC_ERR_NOT_FOUND);
}

/* ---- faults ------------------------------------------------------------------- */

static void etcd_restart_keeps_live_client_keys(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	uint64_t t0;
	long back;

	put_str(f->m, "mooncake/ram/survivor", "v1");
	mc_etcd_member_kill(f->etcd, 0);
	t0 = now_ms();
	assert_int_equal(get_status(f->m, "mooncake/ram/survivor"), MC_ERR_METADATA);
	assert_true(now_ms() - t0 < TIMEOUT_MS);
	assert_non_null(strstr(mc_last_error(), ep));
	assert_int_equal(mc_meta_put(f->m, "mooncake/ram/during", "x", 1), MC_ERR_METADATA);
	nap_ms(TTL_SEC * 1000 + 500); /* the outage outlasts the lease TTL */
	assert_int_equal(mc_etcd_member_restart(f->etcd, 0, false, START_MS), 0);
	back = wait_get_status(f->m, "mooncake/ram/survivor", MC_OK, RESTORE_MS);
	assert_true(back >= 0);
	expect_stays(f->m, "mooncake/ram/survivor", "v1", 2 * TTL_SEC * 1000);
	put_str(f->m, "mooncake/ram/after", "v2");
	check_value(f->m, "mooncake/ram/after", "v2");
}

static void etcd_data_lost_live_client_keys_come_back(void **state)
{
	struct fx *f = *state;
	long back;

	put_str(f->m, "mooncake/rpc_meta/me", "{\"rpc_port\":1}");
	put_str(f->m, "mooncake/ram/me", "{\"name\":\"me\"}");
	assert_int_equal(mc_etcd_member_restart(f->etcd, 0, true, START_MS), 0);
	back = wait_get_status(f->m, "mooncake/ram/me", MC_OK, RESTORE_MS);
	fprintf(stderr, "# keys back %ld ms after etcd restarted empty\n", back);
	assert_true(back >= 0);
	check_value(f->m, "mooncake/rpc_meta/me", "{\"rpc_port\":1}");
	expect_stays(f->m, "mooncake/ram/me", "{\"name\":\"me\"}", 2 * TTL_SEC * 1000);
}

/* Index of the member that leads the cluster. */
static int find_leader(struct mc_etcd_cluster *c, int n)
{
	for (int i = 0; i < n; i++) {
		json_t *st = raw_post(mc_etcd_member_endpoint(c, i), "/maintenance/status", "{}");
		/* uint64 ids as strings: compare the text */
		const char *me = json_string_value(
			json_object_get(json_object_get(st, "header"), "member_id"));
		const char *leader = json_string_value(json_object_get(st, "leader"));
		bool is_leader = me && leader && strcmp(me, leader) == 0;
		json_decref(st);
		if (is_leader)
			return i;
	}
	return -1;
}

static void three_members_leader_killed_client_keeps_working(void **state)
{
	struct fx *f = *state;
	uint64_t killed, worst = 0;
	char uri[256], key[32], val[32];
	int leader = find_leader(f->etcd, 3);

	assert_true(leader >= 0);
	/* bare endpoints, ';'-separated, the leader first so the client uses it */
	snprintf(uri, sizeof(uri), "%s;%s;%s", mc_etcd_member_endpoint(f->etcd, leader),
		 mc_etcd_member_endpoint(f->etcd, (leader + 1) % 3),
		 mc_etcd_member_endpoint(f->etcd, (leader + 2) % 3));
	assert_int_equal(mc_meta_open(uri, &f->m), MC_OK);
	put_str(f->m, "mooncake/ram/before", "b");
	mc_etcd_member_kill(f->etcd, leader);
	killed = now_ms();
	for (int i = 0; now_ms() - killed < 3 * TTL_SEC * 1000 || i < 50; i++) {
		uint64_t t0 = now_ms(), dt;
		snprintf(key, sizeof(key), "mooncake/ram/k%d", i % 7);
		snprintf(val, sizeof(val), "v%d", i);
		put_str(f->m, key, val);
		check_value(f->m, key, val);
		dt = now_ms() - t0;
		worst = dt > worst ? dt : worst;
	}
	fprintf(stderr, "# leader killed: slowest put+get %llu ms\n", (unsigned long long)worst);
	/* within one request's time plus one failed attempt per member */
	assert_true(worst < 2 * 3 * TIMEOUT_MS);
	/* the lease lived on through the election */
	check_value(f->m, "mooncake/ram/before", "b");
	/* and the member comes back into service */
	assert_int_equal(mc_etcd_member_restart(f->etcd, leader, false, START_MS), 0);
	mc_etcd_member_kill(f->etcd, (leader + 1) % 3);
	put_str(f->m, "mooncake/ram/after", "a");
	check_value(f->m, "mooncake/ram/after", "a");
}

static void unreachable_endpoints_fail_open_naming_each(void **state)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	struct mc_meta *m = NULL;
	char uri[128], e1[32], e2[32];
	uint64_t t0;
	uint16_t closed = mc_test_free_port();
	int silent = socket(AF_INET, SOCK_STREAM, 0);
	(void)state;

	/* a listener that never answers: connects, then the request times out */
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(silent, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(silent, 8), 0);
	assert_int_equal(getsockname(silent, (struct sockaddr *)&a, &alen), 0);
	snprintf(e1, sizeof(e1), "127.0.0.1:%u", closed);
	snprintf(e2, sizeof(e2), "127.0.0.1:%u", ntohs(a.sin_port));
	setenv("MC_METADATA_TIMEOUT_MS", "500", 1);

	snprintf(uri, sizeof(uri), "etcd://%s,%s", e1, e2);
	t0 = now_ms();
	assert_int_equal(mc_meta_open(uri, &m), MC_ERR_METADATA);
	assert_true(now_ms() - t0 < 2000);
	fprintf(stderr, "# %s\n", mc_last_error());
	assert_non_null(strstr(mc_last_error(), e1));
	assert_non_null(strstr(mc_last_error(), e2));
	assert_null(m);

	/* bare form, through the engine: a clear error, no abort */
	struct mc_te_params p = {
		.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_HOST,
		.metadata_uri = e1,
		.local_name = "nobody",
		.host = "127.0.0.1",
	};
	struct mc_te *te = NULL;
	assert_int_equal(mc_te_new(&p, &te), MC_ERR_METADATA);
	assert_non_null(strstr(mc_last_error(), e1));
	assert_null(te);
	unsetenv("MC_METADATA_TIMEOUT_MS");
	close(silent);
}

/* ---- two engines through etcd -------------------------------------------- */

#define EBUF (4u << 20)

struct engines {
	struct mc_te *a, *b;
	char *abuf, *bbuf;
	mc_segment_id b_id;
};

static struct mc_te *new_engine(const char *uri, const char *name)
{
	struct mc_te *te = mc_test_engine_new(uri, name);
	assert_non_null(te);
	return te;
}

static void engines_up(struct engines *e, const char *uri)
{
	e->a = new_engine(uri, "etcd-a");
	e->b = new_engine(uri, "etcd-b");
	e->abuf = mmap(NULL, EBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	e->bbuf = mmap(NULL, EBUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_int_equal(mc_te_register(e->a, e->abuf, EBUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_register(e->b, e->bbuf, EBUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_open_segment(e->a, "etcd-b", &e->b_id), MC_OK);
}

static void engines_down(struct engines *e)
{
	mc_te_free(e->a);
	mc_te_free(e->b);
	munmap(e->abuf, EBUF);
	munmap(e->bbuf, EBUF);
}

/* Write then read back len bytes at off through the TCP transport. */
static void roundtrip(struct engines *e, size_t off, size_t len, uint64_t seed)
{
	struct mc_xfer_req r = {.opcode = MC_OP_WRITE,
				.source = e->abuf,
				.target_id = e->b_id,
				.target_offset = (uint64_t)(uintptr_t)(e->bbuf + off),
				.length = len};

	mc_test_fill(e->abuf, len, seed);
	assert_int_equal(mc_te_transfer_sync(e->a, &r, 1, 10000), MC_OK);
	r.opcode = MC_OP_READ;
	r.source = e->abuf + EBUF / 2;
	assert_int_equal(mc_te_transfer_sync(e->a, &r, 1, 10000), MC_OK);
	assert_memory_equal(e->abuf, e->abuf + EBUF / 2, len);
	assert_memory_equal(e->abuf, e->bbuf + off, len);
}

static void two_engines_transfer_through_etcd(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	struct engines e;
	int64_t lease = 0;

	struct mc_meta *m = NULL;
	mc_segment_id bad;

	engines_up(&e, f->uri);
	roundtrip(&e, 123, 1u << 20, 1);
	roundtrip(&e, 0, 7, 2);
	/* corrupt JSON under a segment's key: reported with its name, skipped */
	assert_int_equal(mc_meta_open(f->uri, &m), MC_OK);
	put_str(m, "mooncake/rpc_meta/bad-seg",
		"{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":1}");
	put_str(m, "mooncake/ram/bad-seg", "{\"name\":\"bad-seg\",\"protocol\":");
	assert_int_equal(mc_te_open_segment(e.a, "bad-seg", &bad), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "bad-seg"));
	mc_meta_close(m);
	roundtrip(&e, 9, 4096, 6);
	assert_true(raw_key(ep, "mooncake/ram/etcd-b", &lease, NULL));
	assert_true(lease != 0);
	assert_true(raw_key(ep, "mooncake/rpc_meta/etcd-b", NULL, NULL));
	assert_true(raw_key(ep, "mooncake/ram/etcd-a", NULL, NULL));
	engines_down(&e);
	assert_false(raw_key(ep, "mooncake/ram/etcd-b", NULL, NULL));
	assert_false(raw_key(ep, "mooncake/rpc_meta/etcd-b", NULL, NULL));
	assert_false(raw_key(ep, "mooncake/rpc_meta/etcd-a", NULL, NULL));
}

/* Issue 5: losing the metadata service leaves established transfers working,
 * and the engines' entries come back when it returns (even empty). */
static void transfers_survive_etcd_outage(void **state)
{
	struct fx *f = *state;
	const char *ep = mc_etcd_member_endpoint(f->etcd, 0);
	struct mc_te *c;
	mc_segment_id id;
	uint64_t t0;

	struct engines e;
	engines_up(&e, f->uri);
	roundtrip(&e, 0, 65536, 3);
	mc_etcd_member_kill(f->etcd, 0);
	roundtrip(&e, 4096, 1u << 20, 4);
	assert_int_equal(mc_etcd_member_restart(f->etcd, 0, true, START_MS), 0);
	roundtrip(&e, 1, 4097, 5);
	t0 = now_ms();
	while (!raw_key(ep, "mooncake/ram/etcd-b", NULL, NULL) ||
	       !raw_key(ep, "mooncake/rpc_meta/etcd-b", NULL, NULL)) {
		assert_true(now_ms() - t0 < RESTORE_MS);
		nap_ms(50);
	}
	/* a newcomer finds etcd-b through the restored entries */
	c = new_engine(f->uri, "etcd-c");
	assert_int_equal(mc_te_open_segment(c, "etcd-b", &id), MC_OK);
	mc_te_free(c);
	engines_down(&e);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(put_get_del_and_not_found, setup_one, teardown),
		cmocka_unit_test_setup_teardown(leader_view_campaign_renew_resign_expire,
						setup_one_no_client, teardown),
		cmocka_unit_test_setup_teardown(candidate_entries_post_list_drop_lapse,
						setup_one_no_client, teardown),
		cmocka_unit_test_setup_teardown(binary_empty_and_large_values, setup_one, teardown),
		cmocka_unit_test_setup_teardown(keys_verbatim_under_the_client_lease, setup_one,
						teardown),
		cmocka_unit_test_setup_teardown(bad_connection_strings, setup_one, teardown),
		cmocka_unit_test_setup_teardown(closed_client_keys_are_gone_at_once, setup_one,
						teardown),
		cmocka_unit_test_setup_teardown(crashed_client_keys_vanish_within_ttl, setup_one,
						teardown),
		cmocka_unit_test_setup_teardown(lease_lost_behind_the_clients_back_keys_come_back,
						setup_one, teardown),
		cmocka_unit_test_setup_teardown(etcd_restart_keeps_live_client_keys, setup_one,
						teardown),
		cmocka_unit_test_setup_teardown(etcd_data_lost_live_client_keys_come_back,
						setup_one, teardown),
		cmocka_unit_test_setup_teardown(three_members_leader_killed_client_keeps_working,
						setup_three_no_client, teardown),
		cmocka_unit_test(unreachable_endpoints_fail_open_naming_each),
		cmocka_unit_test_setup_teardown(two_engines_transfer_through_etcd,
						setup_one_no_client, teardown),
		cmocka_unit_test_setup_teardown(transfers_survive_etcd_outage, setup_one_no_client,
						teardown),
	};

	setenv("MC_ETCD_LEASE_TTL_SEC", "2", 1);
	if (argc == 4 && strcmp(argv[1], "--crash-child") == 0)
		return crash_child(argv[2], argv[3]);
	if (!mc_etcd_available()) {
		printf("1..0 # SKIP etcd is not installed (apt-get install etcd-server)\n");
		return 77;
	}
	curl_global_init(CURL_GLOBAL_ALL);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
