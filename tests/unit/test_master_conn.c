/*
 * tests/unit/test_master_conn.c - the store client's master connection
 * (store/master_conn.c) against a scripted fake master over loopback.
 *
 * The fake answers Ping with view_version = client_id.first * 1000000 +
 * client_id.second, so every caller can check that it got its own answer.
 * A grouping fake reads whatever requests have arrived, waits up to
 * FAKE_PAIR_MS for a second one, and answers each group in reverse order
 * with one write, so one reader receives answers for several callers at
 * once and out of order.  Modes add a connection drop in the middle of an answer, or
 * silence.  The cases cover: a lone caller reading its own answers (the
 * leader-reads path), many callers pipelining on one socket, a connection
 * failing under calls in flight (typed failure within bounded time, then a
 * reconnect), and mc_master_conn_free while calls wait.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/compiler.h"
#include "base/sock.h"
#include "base/time.h"
#include "store/master_conn.h"
#include "store/proto.h"

#define FAKE_PAIR_MS 20	  /* how long the grouping fake waits for a second request */
#define BOUND_MS     5000 /* a failing call must return well within this */

enum fake_mode {
	FAKE_ECHO,   /* answer every Ping */
	FAKE_DROP,   /* like ECHO, but for requests drop_at .. drop_at + drop_n - 1
		      * send half an answer and close the connection */
	FAKE_SILENT, /* answer ServiceReady only */
	FAKE_GATED,  /* answer a Ping only once the test opens the gate */
};

struct fake {
	int lfd;
	uint16_t port;
	enum fake_mode mode;
	int drop_at, drop_n;
	bool grouping; /* answer groups of two or more (or after FAKE_PAIR_MS) */
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int requests; /* Pings received, all connections */
	int connections;
	bool dropped; /* under mu */
	bool gate;    /* under mu: FAKE_GATED may answer */
};

static void fake_count(struct fake *f, int *total_out)
{
	pthread_mutex_lock(&f->mu);
	f->requests++;
	*total_out = f->requests;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* Answer one group of request frames (in reverse order); false: close. */
static bool fake_answer_group(struct fake *f, int fd, struct mc_store_msg *reqs, int n)
{
	struct mc_buf out;
	bool ok = true, drop = false;
	int total;

	mc_buf_init(&out);
	for (int i = n - 1; i >= 0; i--) {
		struct mc_store_msg *m = &reqs[i];
		if (m->hdr.type == MC_STORE_SERVICE_READY) {
			struct mc_store_hello hello = {mc_proto_str_c("fake")};
			mc_store_service_ready_response_encode(&out, m->hdr.req_id, &hello);
		} else if (m->hdr.type == MC_STORE_PING) {
			const struct mc_store_uuid *id = &m->body.client_req.client_id;
			struct mc_store_ping_resp pr = {
				.view_version = (int64_t)(id->first * 1000000 + id->second),
				.client_status = MC_STORE_CLIENT_OK};
			fake_count(f, &total);
			if (f->mode == FAKE_SILENT)
				continue;
			if (f->mode == FAKE_GATED) { /* bounded: a failing test ends */
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				ts.tv_sec += 10;
				pthread_mutex_lock(&f->mu);
				while (!f->gate &&
				       pthread_cond_timedwait(&f->cv, &f->mu, &ts) != ETIMEDOUT)
					;
				pthread_mutex_unlock(&f->mu);
			}
			if (f->mode == FAKE_DROP && total >= f->drop_at &&
			    total < f->drop_at + f->drop_n)
				drop = true;
			mc_store_ping_response_encode(&out, m->hdr.req_id, &pr);
		}
	}
	if (drop) {
		/* half of the group's first answer, then the end of the stream */
		pthread_mutex_lock(&f->mu);
		f->dropped = true;
		pthread_mutex_unlock(&f->mu);
		(void)mc_sock_write_full(fd, out.data, MC_PROTO_HDR_LEN / 2 + 1,
					 mc_now_ms() + 10000);
		ok = false;
	} else if (out.len) {
		ok = mc_sock_write_full(fd, out.data, out.len, mc_now_ms() + 10000) == MC_OK;
	}
	mc_buf_release(&out);
	return ok;
}

static void fake_serve(struct fake *f, int fd)
{
	enum { BUF = 1 << 16 };
	struct mc_store_msg reqs[64];
	uint8_t *buf = malloc(BUF);
	size_t have = 0;
	int n = 0;

	assert_non_null(buf);

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		size_t off = 0;
		ssize_t got;

		/* wait a little for more requests to join the group */
		if (n && poll(&p, 1, FAKE_PAIR_MS) == 0) {
			bool ok = fake_answer_group(f, fd, reqs, n);
			for (int i = 0; i < n; i++)
				mc_store_msg_release(&reqs[i]);
			n = 0;
			if (!ok)
				goto out;
			continue;
		}
		got = recv(fd, buf + have, BUF - have, 0);
		if (got <= 0)
			break;
		have += (size_t)got;
		for (;;) {
			struct mc_proto_hdr h;
			size_t flen;
			if (mc_proto_frame_peek(buf + off, have - off, MC_PROTO_MAX_PAYLOAD, &h,
						&flen) != MC_OK)
				break;
			if (n == (int)MC_ARRAY_SIZE(reqs) ||
			    mc_store_msg_decode(buf + off, flen, MC_PROTO_MAX_PAYLOAD, &reqs[n]) !=
				    MC_OK)
				goto out;
			n++;
			off += flen;
		}
		memmove(buf, buf + off, have - off);
		have -= off;
		if (n >= (f->grouping ? 2 : 1)) { /* a group: answer at once */
			bool ok = fake_answer_group(f, fd, reqs, n);
			for (int i = 0; i < n; i++)
				mc_store_msg_release(&reqs[i]);
			n = 0;
			if (!ok)
				goto out;
		}
	}
out:
	for (int i = 0; i < n; i++)
		mc_store_msg_release(&reqs[i]);
	free(buf);
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	for (;;) {
		int fd = accept(f->lfd, NULL, NULL);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			break;
		}
		pthread_mutex_lock(&f->mu);
		f->connections++;
		pthread_mutex_unlock(&f->mu);
		fake_serve(f, fd);
		close(fd);
	}
	return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode, int drop_at, int drop_n, bool grouping)
{
	memset(f, 0, sizeof(*f));
	f->mode = mode;
	f->drop_at = drop_at;
	f->drop_n = drop_n;
	f->grouping = grouping;
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->lfd = mc_sock_listen(0, 16);
	assert_true(f->lfd >= 0);
	assert_int_equal(mc_sock_set_nonblock(f->lfd, false), 0);
	f->port = mc_sock_local_port(f->lfd);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	shutdown(f->lfd, SHUT_RDWR);
	pthread_join(f->th, NULL);
	close(f->lfd);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
}

/* Wait (bounded) until the fake has received n Pings. */
static bool fake_wait_requests(struct fake *f, int n)
{
	struct timespec ts;
	bool ok;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&f->mu);
	while (f->requests < n)
		if (pthread_cond_timedwait(&f->cv, &f->mu, &ts) == ETIMEDOUT)
			break;
	ok = f->requests >= n;
	pthread_mutex_unlock(&f->mu);
	return ok;
}

static struct mc_master_conn *conn_new(const struct fake *f)
{
	struct mc_master_conn *c = NULL;
	char addr[64];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", f->port);
	assert_int_equal(mc_master_conn_new(addr, &c), MC_OK);
	return c;
}

/* One Ping as caller (t, i): MC_OK only with the caller's own answer. */
static mc_status ping(struct mc_master_conn *c, uint64_t t, uint64_t i)
{
	struct mc_store_client_req req = {{t, i}};
	struct mc_store_msg resp;
	mc_status rc = mc_master_conn_call(c, MC_STORE_PING, &req, &resp);
	if (rc != MC_OK)
		return rc;
	if (resp.body.ping_resp.view_version != (int64_t)(t * 1000000 + i))
		rc = MC_ERR_PROTOCOL;
	mc_store_msg_release(&resp);
	return rc;
}

/* ---- a lone caller reads its own answers -------------------------------------------- */

static void lone_caller_reads_its_own_answers(void **state)
{
	struct mc_master_conn_stats st;
	struct mc_master_conn *c;
	struct fake f;
	(void)state;
	fake_start(&f, FAKE_ECHO, 0, 0, false);
	c = conn_new(&f);
	for (uint64_t i = 0; i < 200; i++)
		assert_int_equal(ping(c, 1, i), MC_OK);
	mc_master_conn_stats(c, &st);
	assert_int_equal(st.own, 200);
	assert_int_equal(st.for_others, 0);
	assert_int_equal(st.by_receiver, 0);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* ---- many callers on one socket ------------------------------------------------------ */

struct caller {
	struct mc_master_conn *c;
	uint64_t t;
	int calls;
	int ok, failed, wrong;
	uint64_t slowest_fail_ms;
	mc_status first_error;
	bool stop_after_fail; /* then one more call, which must succeed */
	bool recovered;
};

static void *caller_main(void *arg)
{
	struct caller *w = arg;
	for (int i = 0; i < w->calls; i++) {
		uint64_t t0 = mc_now_ms();
		mc_status rc = ping(w->c, w->t, (uint64_t)i);
		if (rc == MC_OK) {
			w->ok++;
			continue;
		}
		if (rc == MC_ERR_PROTOCOL)
			w->wrong++;
		if (!w->first_error)
			w->first_error = rc;
		w->failed++;
		w->slowest_fail_ms = MC_MAX(w->slowest_fail_ms, mc_now_ms() - t0);
		if (w->stop_after_fail) {
			/* the next calls reconnect; a few may still meet the
			 * fake's window of cut answers */
			for (int k = 0; k < 10 && !w->recovered; k++)
				w->recovered = ping(w->c, w->t, 999999) == MC_OK;
			break;
		}
	}
	return NULL;
}

static void concurrent_callers_share_the_socket(void **state)
{
	enum { T = 8, N = 150 };
	struct mc_master_conn_stats st;
	struct mc_master_conn *c;
	struct caller w[T];
	pthread_t th[T];
	struct fake f;
	(void)state;
	fake_start(&f, FAKE_ECHO, 0, 0, true);
	c = conn_new(&f);
	for (int i = 0; i < T; i++) {
		w[i] = (struct caller){.c = c, .t = (uint64_t)i + 1, .calls = N};
		assert_int_equal(pthread_create(&th[i], NULL, caller_main, &w[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].wrong, 0);
		assert_int_equal(w[i].failed, 0);
		assert_int_equal(w[i].ok, N);
	}
	mc_master_conn_stats(c, &st);
	/* every answer was read by a caller: its own or, while holding the
	 * read role, another's (the fake answers groups in reverse order) */
	assert_int_equal(st.own + st.for_others, T * N);
	assert_true(st.for_others > 0);
	assert_int_equal(st.by_receiver, 0);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* ---- the connection fails under calls in flight -------------------------------------- */

static void connection_drop_fails_calls_in_flight(void **state)
{
	enum { T = 4, N = 100 };
	struct mc_master_conn *c;
	struct caller w[T];
	pthread_t th[T];
	struct fake f;
	int failed = 0;
	(void)state;
	/* a ping whose answer is lost is repeated once on a new connection: cut
	 * 8 requests in a row, so that some call's repeat is cut too (at most 4
	 * calls are in flight, so the repeat of the call cut at 61 comes by 65) */
	fake_start(&f, FAKE_DROP, 60, 8, true);
	setenv("MC_RPC_TIMEOUT_MS", "60000", 1); /* a hang would not be a timeout */
	c = conn_new(&f);
	unsetenv("MC_RPC_TIMEOUT_MS");
	for (int i = 0; i < T; i++) {
		w[i] = (struct caller){
			.c = c, .t = (uint64_t)i + 1, .calls = N, .stop_after_fail = true};
		assert_int_equal(pthread_create(&th[i], NULL, caller_main, &w[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].wrong, 0);
		failed += w[i].failed;
		if (w[i].failed) {
			/* typed, fast, and the next call reconnects */
			assert_int_equal(w[i].first_error, MC_ERR_RPC_FAIL);
			assert_true(w[i].slowest_fail_ms < BOUND_MS);
			assert_true(w[i].recovered);
		}
	}
	assert_true(failed >= 1); /* the call whose answer was cut */
	pthread_mutex_lock(&f.mu);
	assert_true(f.dropped);
	assert_true(f.connections >= 2);
	pthread_mutex_unlock(&f.mu);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* A lone caller's answer cut in the middle: the caller itself reads the
 * end of the stream and fails at once; the half frame is not left behind
 * to garble the next connection. */
static void lone_caller_sees_a_cut_answer(void **state)
{
	struct mc_master_conn *c;
	struct fake f;
	uint64_t t0;
	(void)state;
	/* requests 3 and 4 cut: the call and its one repeat */
	fake_start(&f, FAKE_DROP, 3, 2, false);
	setenv("MC_RPC_TIMEOUT_MS", "60000", 1);
	c = conn_new(&f);
	unsetenv("MC_RPC_TIMEOUT_MS");
	assert_int_equal(ping(c, 7, 1), MC_OK);
	assert_int_equal(ping(c, 7, 2), MC_OK);
	t0 = mc_now_ms();
	assert_int_equal(ping(c, 7, 3), MC_ERR_RPC_FAIL);
	assert_true(mc_now_ms() - t0 < BOUND_MS);
	pthread_mutex_lock(&f.mu);
	assert_int_equal(f.requests, 4);
	pthread_mutex_unlock(&f.mu);
	for (uint64_t i = 4; i < 20; i++)
		assert_int_equal(ping(c, 7, i), MC_OK);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* A lone caller's answer cut once: the ping (retry-safe) is repeated on a
 * new connection and succeeds. */
static void a_cut_answer_is_repeated_once(void **state)
{
	struct mc_master_conn *c;
	struct fake f;
	(void)state;
	fake_start(&f, FAKE_DROP, 2, 1, false);
	setenv("MC_RPC_TIMEOUT_MS", "60000", 1);
	c = conn_new(&f);
	unsetenv("MC_RPC_TIMEOUT_MS");
	assert_int_equal(ping(c, 9, 1), MC_OK);
	assert_int_equal(ping(c, 9, 2), MC_OK); /* cut, then repeated */
	assert_int_equal(ping(c, 9, 3), MC_OK);
	pthread_mutex_lock(&f.mu);
	assert_true(f.dropped);
	assert_int_equal(f.requests, 4);
	assert_true(f.connections >= 2);
	pthread_mutex_unlock(&f.mu);
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* ---- free while calls wait ------------------------------------------------------------- */

static void free_fails_calls_in_flight(void **state)
{
	enum { T = 4 };
	struct mc_master_conn *c;
	struct caller w[T];
	pthread_t th[T];
	struct fake f;
	uint64_t t0;
	(void)state;
	fake_start(&f, FAKE_SILENT, 0, 0, false);
	setenv("MC_RPC_TIMEOUT_MS", "60000", 1);
	c = conn_new(&f);
	unsetenv("MC_RPC_TIMEOUT_MS");
	for (int i = 0; i < T; i++) {
		w[i] = (struct caller){.c = c, .t = (uint64_t)i + 1, .calls = 1};
		assert_int_equal(pthread_create(&th[i], NULL, caller_main, &w[i]), 0);
	}
	/* every caller's request is at the master: all are inside the call */
	assert_true(fake_wait_requests(&f, T));
	t0 = mc_now_ms();
	mc_master_conn_free(c);
	assert_true(mc_now_ms() - t0 < BOUND_MS);
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failed, 1);
		assert_int_equal(w[i].first_error, MC_ERR_RPC_FAIL);
		assert_true(w[i].slowest_fail_ms < BOUND_MS);
	}
	fake_stop(&f);
}

/* A silent master: the leader's own deadline ends its wait, and the read
 * role passes on to the callers still waiting, which time out in turn. */
static void silent_master_times_out_every_caller(void **state)
{
	enum { T = 3 };
	struct mc_master_conn *c;
	struct caller w[T];
	pthread_t th[T];
	struct fake f;
	(void)state;
	fake_start(&f, FAKE_SILENT, 0, 0, false);
	setenv("MC_RPC_TIMEOUT_MS", "300", 1);
	c = conn_new(&f);
	unsetenv("MC_RPC_TIMEOUT_MS");
	for (int i = 0; i < T; i++) {
		w[i] = (struct caller){.c = c, .t = (uint64_t)i + 1, .calls = 2};
		assert_int_equal(pthread_create(&th[i], NULL, caller_main, &w[i]), 0);
	}
	for (int i = 0; i < T; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(w[i].failed, 2);
		assert_int_equal(w[i].first_error, MC_ERR_RPC_TIMEOUT);
		assert_true(w[i].slowest_fail_ms >= 250);
		assert_true(w[i].slowest_fail_ms < BOUND_MS);
	}
	mc_master_conn_free(c);
	fake_stop(&f);
}

/* ---- the caller's work while its answer is on the way ---------------------------------- */

struct work {
	struct fake *f;
	int calls;	     /* pieces run */
	int open_at;	     /* the piece that opens the fake's gate */
	int more_until;	     /* pieces that say more is left (then false) */
	int nth;	     /* the call is the master's nth Ping */
	bool request_was_in; /* the request had reached the master at the first piece */
};

static bool work_piece(void *arg)
{
	struct work *w = arg;

	if (++w->calls == 1) /* written before any work: the master has it */
		w->request_was_in = fake_wait_requests(w->f, w->nth);
	if (w->calls == w->open_at) {
		pthread_mutex_lock(&w->f->mu);
		w->f->gate = true;
		pthread_cond_broadcast(&w->f->cv);
		pthread_mutex_unlock(&w->f->mu);
	}
	return w->calls < w->more_until;
}

static mc_status ping_working(struct mc_master_conn *c, uint64_t i, struct work *w)
{
	struct mc_store_client_req req = {{7, i}};
	struct mc_store_msg resp;
	mc_status rc = mc_master_conn_call_working(c, MC_STORE_PING, &req, &resp, work_piece, w);
	if (rc != MC_OK)
		return rc;
	if (resp.body.ping_resp.view_version != (int64_t)(7 * 1000000 + i))
		rc = MC_ERR_PROTOCOL;
	mc_store_msg_release(&resp);
	return rc;
}

/* The work runs after the request is written and before the answer is
 * read: the master answers only once a piece of it opened the gate.  Work
 * that always has more left does not keep the caller from its answer
 * once it is in; work that says it is done is not called again. */
static void work_runs_while_the_answer_is_awaited(void **state)
{
	struct mc_master_conn *c;
	struct work w;
	struct fake f;
	(void)state;
	fake_start(&f, FAKE_GATED, 0, 0, false);
	c = conn_new(&f);

	/* never done: the answer still ends the call, after the gate opened */
	w = (struct work){.f = &f, .open_at = 3, .more_until = 1 << 30, .nth = 1};
	assert_int_equal(ping_working(c, 1, &w), MC_OK);
	assert_true(w.request_was_in);
	assert_true(w.calls >= 3);

	/* done at the first piece, which opens the gate: called once */
	pthread_mutex_lock(&f.mu);
	f.gate = false;
	pthread_mutex_unlock(&f.mu);
	w = (struct work){.f = &f, .open_at = 1, .more_until = 1, .nth = 2};
	assert_int_equal(ping_working(c, 2, &w), MC_OK);
	assert_true(w.request_was_in);
	assert_int_equal(w.calls, 1);

	mc_master_conn_free(c);
	fake_stop(&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lone_caller_reads_its_own_answers),
		cmocka_unit_test(concurrent_callers_share_the_socket),
		cmocka_unit_test(connection_drop_fails_calls_in_flight),
		cmocka_unit_test(lone_caller_sees_a_cut_answer),
		cmocka_unit_test(a_cut_answer_is_repeated_once),
		cmocka_unit_test(free_fails_calls_in_flight),
		cmocka_unit_test(silent_master_times_out_every_caller),
		cmocka_unit_test(work_runs_while_the_answer_is_awaited),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
