/*
 * tests/unit/test_rpc.c - the RPC / handshake channel: framing, the frame
 * reader, the epoll server (deadlines, bad frames, concurrency, stop) and
 * the client's error statuses against real and fake peers on 127.0.0.1.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/auth_hs.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/status.h"
#include "support.h"
#include "te/rpc.h"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                   */

struct handler_state {
	atomic_int calls;
	atomic_int last_type;
	atomic_size_t big_response; /* if non-zero, "big" requests get this many bytes back */
};

/*
 * Test handler: "fail..." is refused; "big" gets big_response bytes of 'x';
 * "nonl" gets a response without a trailing newline; anything else gets
 * "<type>:<request>" back (the request keeps the client's '\n').
 */
static mc_status echo_handler(void *arg, int type, const char *req, size_t len, char **resp_out,
			      size_t *resp_len_out)
{
	struct handler_state *hs = arg;
	char *r;

	atomic_fetch_add(&hs->calls, 1);
	atomic_store(&hs->last_type, type);
	if (len >= 4 && memcmp(req, "fail", 4) == 0)
		return MC_ERR_REJECT_HANDSHAKE;
	if (len >= 3 && memcmp(req, "big", 3) == 0 && atomic_load(&hs->big_response)) {
		size_t n = atomic_load(&hs->big_response);
		r = mc_malloc(n);
		memset(r, 'x', n);
		*resp_out = r;
		*resp_len_out = n;
		return MC_OK;
	}
	if (len >= 4 && memcmp(req, "nonl", 4) == 0) {
		*resp_out = mc_strdup("{\"status\": \"success\"}");
		*resp_len_out = strlen(*resp_out);
		return MC_OK;
	}
	r = mc_malloc(len + 3);
	r[0] = (char)('0' + type);
	r[1] = ':';
	memcpy(r + 2, req, len);
	*resp_out = r;
	*resp_len_out = len + 2;
	return MC_OK;
}

struct fixture {
	struct handler_state hs;
	struct mc_rpc_server *srv;
	uint16_t port;
};

static struct fixture *fixture_start(int recv_timeout_ms, uint64_t max_frame)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct mc_rpc_server_params p = {0};
	int fd;

	assert_non_null(f);
	fd = mc_sock_listen(0, 2048);
	assert_true(fd >= 0);
	f->port = mc_sock_local_port(fd);
	p.listen_fd = fd;
	p.max_frame = max_frame;
	p.recv_timeout_ms = recv_timeout_ms;
	p.handler = echo_handler;
	p.handler_arg = &f->hs;
	assert_int_equal(mc_rpc_server_start(&p, &f->srv), MC_OK);
	return f;
}

static struct fixture *fixture_start_auth(const struct mc_auth_secret *auth, int recv_timeout_ms)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct mc_rpc_server_params p = {0};
	int fd;

	assert_non_null(f);
	fd = mc_sock_listen(0, 2048);
	assert_true(fd >= 0);
	f->port = mc_sock_local_port(fd);
	p.listen_fd = fd;
	p.recv_timeout_ms = recv_timeout_ms;
	p.handler = echo_handler;
	p.handler_arg = &f->hs;
	p.auth = auth;
	assert_int_equal(mc_rpc_server_start(&p, &f->srv), MC_OK);
	return f;
}

static void fixture_stop(struct fixture *f)
{
	mc_rpc_server_stop(f->srv);
	free(f);
}

static int raw_connect(uint16_t port)
{
	int fd = mc_sock_connect("127.0.0.1", port, 2000, false);
	assert_true(fd >= 0);
	return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
	assert_int_equal(mc_sock_write_full(fd, buf, len, mc_now_ms() + 5000), MC_OK);
}

static void put_le64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/*
 * Read until the peer closes (EOF or reset) or timeout_ms passes.  Returns
 * the byte count, or -1 on timeout.  *reset_out tells a reset from an EOF.
 */
static long read_until_close(int fd, char *buf, size_t cap, int timeout_ms)
{
	uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
	size_t got = 0;

	for (;;) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		uint64_t now = mc_now_ms();
		ssize_t n;

		if (now >= deadline)
			return -1;
		if (poll(&p, 1, (int)(deadline - now)) == 0)
			return -1;
		n = recv(fd, buf + got, cap - got, 0);
		if (n > 0) {
			got += (size_t)n;
			assert_true(got < cap);
			continue;
		}
		if (n == 0 || errno == ECONNRESET)
			return (long)got;
		assert_int_equal(errno, EINTR);
	}
}

static void expect_closed_without_reply(int fd, int timeout_ms)
{
	char buf[256];
	assert_int_equal(read_until_close(fd, buf, sizeof(buf), timeout_ms), 0);
}

/* ------------------------------------------------------------------------ */
/* Framing and the reader (no sockets)                                       */

static void parse_header_typed_legacy_and_rejects(void **state)
{
	uint8_t h[MC_RPC_HEADER_LEN];
	uint64_t len;
	int type;
	(void)state;

	for (int t = 0; t <= 3; t++) {
		put_le64(h, 10);
		h[8] = (uint8_t)t;
		assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_OK);
		assert_int_equal(type, t);
		assert_int_equal(len, 9);
	}
	put_le64(h, 10);
	h[8] = '{';
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_OK);
	assert_int_equal(type, -1);
	assert_int_equal(len, 10);

	h[8] = 4; /* unknown type */
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_PROTOCOL);
	h[8] = 0xff;
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_PROTOCOL);

	put_le64(h, 0);
	h[8] = 0;
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_PROTOCOL);

	put_le64(h, 1); /* type byte only: empty payload */
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_OK);
	assert_int_equal(len, 0);

	put_le64(h, 1 << 20); /* default limit is inclusive */
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_OK);
	put_le64(h, (1 << 20) + 1);
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_TOO_LARGE);
	put_le64(h, 100);
	assert_int_equal(mc_rpc_parse_header(h, 99, &type, &len), MC_ERR_TOO_LARGE);
	put_le64(h, UINT64_MAX);
	assert_int_equal(mc_rpc_parse_header(h, UINT64_MAX, &type, &len), MC_ERR_TOO_LARGE);

	memcpy(h, "GET / HTTP/1.1", 9);
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_TOO_LARGE);
	memcpy(h, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc", 9); /* TLS ClientHello */
	assert_int_equal(mc_rpc_parse_header(h, 0, &type, &len), MC_ERR_TOO_LARGE);
}

static void encode_appends_newline_once(void **state)
{
	char *f;
	size_t n;
	(void)state;

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_NOTIFY, "{}", 2, &f, &n), MC_OK);
	assert_int_equal(n, 9 + 3);
	assert_int_equal(get_le64((uint8_t *)f), 4);
	assert_int_equal(f[8], MC_RPC_NOTIFY);
	assert_memory_equal(f + 9, "{}\n", 3);
	mc_free(f);

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_PROBE, "{}\n", 3, &f, &n), MC_OK);
	assert_int_equal(n, 9 + 3);
	mc_free(f);

	assert_int_equal(mc_rpc_frame_encode(-1, "{}", 2, &f, &n), MC_OK);
	assert_int_equal(n, 8 + 3);
	assert_int_equal(get_le64((uint8_t *)f), 3);
	assert_memory_equal(f + 8, "{}\n", 3);
	mc_free(f);

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_METADATA, NULL, 0, &f, &n), MC_OK);
	assert_int_equal(n, 10);
	assert_int_equal(f[9], '\n');
	mc_free(f);

	assert_int_equal(mc_rpc_frame_encode(4, "{}", 2, &f, &n), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_rpc_frame_encode(-2, "{}", 2, &f, &n), MC_ERR_INVALID_PARAMS);
}

static void reader_assembles_byte_by_byte(void **state)
{
	struct mc_rpc_reader r;
	char *f, *payload;
	size_t n, used, plen;
	(void)state;

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_METADATA, "{\"a\":1}", 7, &f, &n), MC_OK);
	mc_rpc_reader_init(&r, 0);
	for (size_t i = 0; i + 1 < n; i++) {
		assert_int_equal(mc_rpc_reader_feed(&r, f + i, 1, &used), MC_INPROGRESS);
		assert_int_equal(used, 1);
	}
	assert_null(mc_rpc_reader_take(&r, &plen));
	assert_int_equal(mc_rpc_reader_feed(&r, f + n - 1, 1, &used), MC_OK);
	assert_int_equal(used, 1);
	assert_int_equal(r.type, MC_RPC_METADATA);
	/* complete: further bytes are not consumed */
	assert_int_equal(mc_rpc_reader_feed(&r, "zz", 2, &used), MC_OK);
	assert_int_equal(used, 0);
	payload = mc_rpc_reader_take(&r, &plen);
	assert_non_null(payload);
	assert_int_equal(plen, 8);
	assert_string_equal(payload, "{\"a\":1}\n");
	mc_free(payload);
	mc_rpc_reader_release(&r);
	mc_free(f);
}

static void reader_reports_trailing_bytes_and_legacy(void **state)
{
	struct mc_rpc_reader r;
	char buf[64];
	size_t used;
	(void)state;

	/* legacy frame followed by garbage, in one chunk */
	put_le64((uint8_t *)buf, 3);
	memcpy(buf + 8, "{}\nGARBAGE", 10);
	mc_rpc_reader_init(&r, 0);
	assert_int_equal(mc_rpc_reader_feed(&r, buf, 18, &used), MC_OK);
	assert_int_equal(used, 11);
	assert_int_equal(r.type, -1);
	assert_int_equal(r.payload_len, 3);
	assert_string_equal((char *)r.payload.data, "{}\n");
	mc_rpc_reader_release(&r);

	/* errors are sticky */
	memset(buf, 0, 9);
	mc_rpc_reader_init(&r, 0);
	assert_int_equal(mc_rpc_reader_feed(&r, buf, 9, &used), MC_ERR_PROTOCOL);
	assert_int_equal(mc_rpc_reader_feed(&r, buf, 9, &used), MC_ERR_PROTOCOL);
	mc_rpc_reader_release(&r);

	/* a big announced frame allocates only what arrived */
	put_le64((uint8_t *)buf, 1 << 20);
	buf[8] = MC_RPC_CONNECTION;
	memcpy(buf + 9, "{", 1);
	mc_rpc_reader_init(&r, 0);
	assert_int_equal(mc_rpc_reader_feed(&r, buf, 10, &used), MC_INPROGRESS);
	assert_true(r.payload.cap <= 4096);
	mc_rpc_reader_release(&r);
}

static void reader_fault_injection_reports_nomem(void **state)
{
	struct mc_rpc_reader r;
	uint8_t buf[16];
	size_t used;
	(void)state;

	put_le64(buf, 5);
	buf[8] = MC_RPC_PROBE;
	mc_rpc_reader_init(&r, 0);
	mc_alloc_fault_arm(1);
	assert_int_equal(mc_rpc_reader_feed(&r, buf, 9, &used), MC_ERR_NOMEM);
	mc_alloc_fault_arm(0);
	mc_rpc_reader_release(&r);
}

/* ------------------------------------------------------------------------ */
/* Server and client over loopback                                           */

static void round_trip_each_type(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	(void)state;

	for (int t = MC_RPC_CONNECTION; t <= MC_RPC_PROBE; t++) {
		char req[32], want[40], *resp = NULL;
		size_t len = 0;
		snprintf(req, sizeof(req), "{\"t\": %d}", t);
		assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, t, req, strlen(req), 2000,
					     5000, 0, &resp, &len),
				 MC_OK);
		snprintf(want, sizeof(want), "%d:%s\n", t, req);
		assert_string_equal(resp, want);
		assert_int_equal(len, strlen(want));
		assert_int_equal(atomic_load(&f->hs.last_type), t);
		mc_free(resp);
	}
	assert_int_equal(atomic_load(&f->hs.calls), 4);

	/* the server appends the newline a handler left out */
	{
		char *resp = NULL;
		size_t len = 0;
		assert_int_equal(mc_rpc_call(NULL, "localhost", f->port, MC_RPC_PROBE, "nonl", 4,
					     2000, 5000, 0, &resp, &len),
				 MC_OK);
		assert_string_equal(resp, "{\"status\": \"success\"}\n");
		mc_free(resp);
	}
	fixture_stop(f);
}

static void large_frames_and_client_limit(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	size_t big = 700 * 1024;
	char *req = malloc(big), *resp = NULL;
	size_t len = 0;
	(void)state;

	/* a request of 700 KiB arrives in many recv() chunks */
	memset(req, 'r', big);
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_METADATA, req, big, 2000,
				     10000, 0, &resp, &len),
			 MC_OK);
	assert_int_equal(len, big + 3);
	assert_memory_equal(resp, "1:r", 3);
	assert_int_equal(resp[len - 1], '\n');
	mc_free(resp);

	/* a response above the client's limit */
	atomic_store(&f->hs.big_response, 4096);
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_METADATA, "big", 3, 2000,
				     5000, 1024, &resp, &len),
			 MC_ERR_TOO_LARGE);
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_METADATA, "big", 3, 2000,
				     5000, 8192, &resp, &len),
			 MC_OK);
	assert_int_equal(len, 4097);
	mc_free(resp);
	free(req);
	fixture_stop(f);
}

static void response_echoes_type_and_half_closes(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	char *frame, buf[256];
	size_t n;
	long got;
	int fd;
	(void)state;

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_NOTIFY, "{\"name\":\"a\"}", 12, &frame, &n),
			 MC_OK);
	fd = raw_connect(f->port);
	raw_send(fd, frame, n);
	/* the server half-closes after the reply, so this sees EOF */
	got = read_until_close(fd, buf, sizeof(buf), 5000);
	assert_int_equal(got, 9 + 2 + 13);
	assert_int_equal(get_le64((uint8_t *)buf), 1 + 2 + 13);
	assert_int_equal(buf[8], MC_RPC_NOTIFY);
	assert_memory_equal(buf + 9, "2:{\"name\":\"a\"}\n", 15);
	close(fd);
	mc_free(frame);
	fixture_stop(f);
}

static void legacy_frame_answered_untyped(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	const char *json = "{\"local_nic_path\":\"h@mlx5_0\"}\n";
	char buf[256];
	uint8_t hdr[8];
	long got;
	int fd;
	(void)state;

	fd = raw_connect(f->port);
	put_le64(hdr, strlen(json));
	raw_send(fd, hdr, 8);
	raw_send(fd, json, strlen(json));
	got = read_until_close(fd, buf, sizeof(buf), 5000);
	assert_int_equal(got, 8 + 2 + (long)strlen(json));
	assert_int_equal(get_le64((uint8_t *)buf), 2 + strlen(json));
	assert_memory_equal(buf + 8, "0:", 2); /* handled as Connection */
	assert_memory_equal(buf + 10, json, strlen(json));
	assert_int_equal(atomic_load(&f->hs.last_type), MC_RPC_CONNECTION);
	close(fd);
	fixture_stop(f);
}

static void bad_frames_closed_without_reply(void **state)
{
	struct fixture *f = fixture_start(30000, 1024);
	uint8_t zero[9] = {0}, over[9], unknown[16];
	const char *http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
	const uint8_t tls[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
	struct {
		const void *bytes;
		size_t len;
	} cases[5];
	(void)state;

	put_le64(over, 1025);
	over[8] = MC_RPC_CONNECTION;
	put_le64(unknown, 8);
	unknown[8] = 7;
	memcpy(unknown + 9, "{\"x\":1}", 7);
	cases[0].bytes = zero, cases[0].len = sizeof(zero);
	cases[1].bytes = over, cases[1].len = sizeof(over);
	cases[2].bytes = unknown, cases[2].len = sizeof(unknown);
	cases[3].bytes = http, cases[3].len = strlen(http);
	cases[4].bytes = tls, cases[4].len = sizeof(tls);

	for (size_t i = 0; i < 5; i++) {
		uint64_t t0 = mc_now_ms();
		int fd = raw_connect(f->port);
		raw_send(fd, cases[i].bytes, cases[i].len);
		/* closed at once, long before the 30 s receive deadline */
		expect_closed_without_reply(fd, 10000);
		assert_true(mc_now_ms() - t0 < 10000);
		close(fd);
	}
	assert_int_equal(atomic_load(&f->hs.calls), 0);
	/* and the server still serves */
	{
		char *resp = NULL;
		size_t len;
		assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2,
					     2000, 5000, 0, &resp, &len),
				 MC_OK);
		mc_free(resp);
	}
	fixture_stop(f);
}

static void idle_client_does_not_block_others(void **state)
{
	const int timeout_ms = 1500;
	struct fixture *f = fixture_start(timeout_ms, 0);
	struct pollfd p;
	uint64_t t0, t1, elapsed;
	char *resp = NULL;
	size_t len;
	int idle;
	(void)state;

	t0 = mc_now_ms();
	idle = raw_connect(f->port); /* connects and sends nothing */
	t1 = mc_now_ms();
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2, 2000, 5000,
				     0, &resp, &len),
			 MC_OK);
	assert_string_equal(resp, "3:{}\n");
	mc_free(resp);
	/* answered while the idle client is still waiting for its deadline */
	assert_true(mc_now_ms() - t1 < (uint64_t)timeout_ms / 2);
	p.fd = idle;
	p.events = POLLIN;
	p.revents = 0;
	assert_int_equal(poll(&p, 1, 0), 0);

	/* the idle client is closed after the deadline, without a reply */
	expect_closed_without_reply(idle, timeout_ms + 5000);
	elapsed = mc_now_ms() - t0;
	assert_true(elapsed >= (uint64_t)timeout_ms - 50);
	assert_true(elapsed < (uint64_t)timeout_ms + 5000);
	close(idle);
	fixture_stop(f);
}

static void half_sent_frame_times_out_pieces_are_answered(void **state)
{
	const int timeout_ms = 1000;
	struct fixture *f = fixture_start(timeout_ms, 0);
	char *frame, buf[128];
	uint8_t hdr[9];
	size_t n;
	uint64_t t0;
	int fd;
	(void)state;

	/* header announces 100 bytes, only 10 arrive */
	put_le64(hdr, 101);
	hdr[8] = MC_RPC_NOTIFY;
	t0 = mc_now_ms();
	fd = raw_connect(f->port);
	raw_send(fd, hdr, sizeof(hdr));
	raw_send(fd, "{\"name\":\"x", 10);
	expect_closed_without_reply(fd, timeout_ms + 5000);
	assert_true(mc_now_ms() - t0 >= (uint64_t)timeout_ms - 50);
	close(fd);

	/* the header split in the middle of the length, sent in separate writes */
	assert_int_equal(mc_rpc_frame_encode(MC_RPC_PROBE, "{}", 2, &frame, &n), MC_OK);
	fd = raw_connect(f->port);
	for (size_t i = 0; i < n; i++)
		raw_send(fd, frame + i, 1);
	assert_int_equal(read_until_close(fd, buf, sizeof(buf), 5000), 9 + 5);
	assert_int_equal(buf[8], MC_RPC_PROBE);
	assert_memory_equal(buf + 9, "3:{}\n", 5);
	close(fd);

	/* a client that gives up mid-frame is cleaned up */
	fd = raw_connect(f->port);
	raw_send(fd, frame, 5);
	close(fd);
	mc_free(frame);
	assert_int_equal(atomic_load(&f->hs.calls), 1);
	fixture_stop(f);
}

static void handler_error_closes_without_reply(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	char *frame, *resp = NULL;
	size_t n, len;
	int fd;
	(void)state;

	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_CONNECTION, "fail", 4, 2000,
				     5000, 0, &resp, &len),
			 MC_ERR_CONN_CLOSED);
	assert_null(resp);
	assert_non_null(strstr(mc_last_error(), "no response header"));

	assert_int_equal(mc_rpc_frame_encode(MC_RPC_NOTIFY, "fail", 4, &frame, &n), MC_OK);
	fd = raw_connect(f->port);
	raw_send(fd, frame, n);
	expect_closed_without_reply(fd, 5000);
	close(fd);
	mc_free(frame);
	assert_int_equal(atomic_load(&f->hs.calls), 2);
	fixture_stop(f);
}

#define N_CLIENTS	 64
#define CALLS_PER_CLIENT 8

struct client_arg {
	uint16_t port;
	int id;
	int failures;
};

static void *client_main(void *arg)
{
	struct client_arg *a = arg;

	for (int i = 0; i < CALLS_PER_CLIENT; i++) {
		char req[64], want[80], *resp = NULL;
		size_t len = 0;
		int type = (a->id + i) % 4;
		snprintf(req, sizeof(req), "{\"client\": %d, \"call\": %d}", a->id, i);
		snprintf(want, sizeof(want), "%d:%s\n", type, req);
		if (mc_rpc_call(NULL, "127.0.0.1", a->port, type, req, strlen(req), 5000, 20000, 0,
				&resp, &len) != MC_OK ||
		    strcmp(resp, want) != 0 || len != strlen(want))
			a->failures++;
		mc_free(resp);
	}
	return NULL;
}

static void concurrent_clients(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	pthread_t th[N_CLIENTS];
	struct client_arg args[N_CLIENTS];
	(void)state;

	for (int i = 0; i < N_CLIENTS; i++) {
		args[i] = (struct client_arg){.port = f->port, .id = i};
		assert_int_equal(pthread_create(&th[i], NULL, client_main, &args[i]), 0);
	}
	for (int i = 0; i < N_CLIENTS; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(args[i].failures, 0);
	}
	assert_int_equal(atomic_load(&f->hs.calls), N_CLIENTS * CALLS_PER_CLIENT);
	fixture_stop(f);
}

static void call_to_closed_port_is_refused(void **state)
{
	uint16_t port = mc_test_free_port();
	char *resp = NULL;
	size_t len;
	uint64_t t0 = mc_now_ms();
	(void)state;

	assert_true(port != 0);
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", port, MC_RPC_PROBE, "{}", 2, 5000, 5000, 0,
				     &resp, &len),
			 MC_ERR_CONN_REFUSED);
	assert_true(mc_now_ms() - t0 < 1000);
	assert_null(resp);
	assert_int_equal(
		mc_rpc_call(NULL, "127.0.0.1", port, 4, "{}", 2, 2000, 2000, 0, &resp, &len),
		MC_ERR_INVALID_PARAMS);
}

static void call_to_silent_server_times_out(void **state)
{
	const int io_ms = 300;
	int lfd = mc_sock_listen(0, 16); /* never accepts: the kernel completes the connect */
	char *resp = NULL;
	size_t len;
	uint64_t t0, elapsed;
	(void)state;

	assert_true(lfd >= 0);
	t0 = mc_now_ms();
	assert_int_equal(mc_rpc_call(NULL, "127.0.0.1", mc_sock_local_port(lfd), MC_RPC_PROBE, "{}",
				     2, 2000, io_ms, 0, &resp, &len),
			 MC_ERR_TIMEOUT);
	elapsed = mc_now_ms() - t0;
	assert_true(elapsed >= (uint64_t)io_ms - 10);
	assert_true(elapsed < (uint64_t)io_ms + 2000);
	assert_null(resp);
	close(lfd);
}

/* One deadline bounds the whole call, and the call works before it. */
static void call_until_keeps_one_deadline(void **state)
{
	struct fixture *f = fixture_start(0, 0);
	int lfd = mc_sock_listen(0, 16);
	char *resp = NULL;
	size_t len = 0;
	uint64_t t0, elapsed;
	(void)state;

	assert_int_equal(mc_rpc_call_until(NULL, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2,
					   mc_now_ms() + 2000, 0, &resp, &len),
			 MC_OK);
	assert_string_equal(resp, "3:{}\n");
	mc_free(resp);
	resp = NULL;
	fixture_stop(f);

	assert_true(lfd >= 0);
	t0 = mc_now_ms();
	assert_int_equal(mc_rpc_call_until(NULL, "127.0.0.1", mc_sock_local_port(lfd), MC_RPC_PROBE,
					   "{}", 2, t0 + 300, 0, &resp, &len),
			 MC_ERR_TIMEOUT);
	elapsed = mc_now_ms() - t0;
	assert_true(elapsed >= 290);
	assert_true(elapsed < 1000); /* by the deadline */
	assert_null(resp);
	/* a deadline already past fails at once */
	assert_int_equal(mc_rpc_call_until(NULL, "127.0.0.1", mc_sock_local_port(lfd), MC_RPC_PROBE,
					   "{}", 2, mc_now_ms() - 1, 0, &resp, &len),
			 MC_ERR_TIMEOUT);
	assert_int_equal(mc_rpc_call_until(NULL, "127.0.0.1", mc_sock_local_port(lfd), MC_RPC_PROBE,
					   "{}", 2, 0, 0, &resp, &len),
			 MC_ERR_INVALID_PARAMS);
	close(lfd);
}

enum fake_mode {
	FAKE_WRONG_TYPE,
	FAKE_UNTYPED,
	FAKE_HUGE,
	FAKE_TRUNCATED,
	FAKE_ZERO_LENGTH,
};

struct fake_server {
	int lfd;
	enum fake_mode mode;
	int got_type;
};

/* Accept one connection, read one typed request, answer it wrongly. */
static void *fake_main(void *arg)
{
	struct fake_server *fs = arg;
	uint64_t deadline = mc_now_ms() + 10000;
	uint8_t hdr[9], out[64];
	char req[256];
	size_t out_len = 0;
	int fd;

	mc_sock_set_nonblock(fs->lfd, false);
	fd = accept(fs->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	if (mc_sock_read_full(fd, hdr, 9, deadline) != MC_OK || get_le64(hdr) - 1 > sizeof(req) ||
	    mc_sock_read_full(fd, req, get_le64(hdr) - 1, deadline) != MC_OK)
		goto out;
	fs->got_type = hdr[8];
	switch (fs->mode) {
	case FAKE_WRONG_TYPE:
		put_le64(out, 4);
		out[8] = (uint8_t)((hdr[8] + 1) % 4);
		memcpy(out + 9, "{}\n", 3);
		out_len = 12;
		break;
	case FAKE_UNTYPED:
		put_le64(out, 3);
		memcpy(out + 8, "{}\n", 3);
		out_len = 11;
		break;
	case FAKE_HUGE:
		put_le64(out, 1ull << 40);
		out[8] = hdr[8];
		out_len = 9;
		break;
	case FAKE_TRUNCATED:
		put_le64(out, 50);
		out[8] = hdr[8];
		memcpy(out + 9, "{\"a\"", 4);
		out_len = 13;
		break;
	case FAKE_ZERO_LENGTH:
		memset(out, 0, 9);
		out_len = 9;
		break;
	}
	mc_sock_write_full(fd, out, out_len, deadline);
out:
	close(fd);
	return NULL;
}

static int call_fake(enum fake_mode mode)
{
	struct fake_server fs = {.mode = mode, .got_type = -1};
	pthread_t th;
	char *resp = NULL;
	size_t len;
	int rc;

	fs.lfd = mc_sock_listen(0, 16);
	assert_true(fs.lfd >= 0);
	assert_int_equal(pthread_create(&th, NULL, fake_main, &fs), 0);
	rc = mc_rpc_call(NULL, "127.0.0.1", mc_sock_local_port(fs.lfd), MC_RPC_METADATA, "{}", 2,
			 2000, 5000, 0, &resp, &len);
	pthread_join(th, NULL);
	assert_int_equal(fs.got_type, MC_RPC_METADATA);
	assert_null(resp);
	close(fs.lfd);
	return rc;
}

static void bad_responses_are_protocol_errors(void **state)
{
	(void)state;
	assert_int_equal(call_fake(FAKE_WRONG_TYPE), MC_ERR_PROTOCOL);
	assert_non_null(strstr(mc_last_error(), "does not match"));
	assert_int_equal(call_fake(FAKE_UNTYPED), MC_ERR_PROTOCOL);
	assert_int_equal(call_fake(FAKE_ZERO_LENGTH), MC_ERR_PROTOCOL);
	assert_int_equal(call_fake(FAKE_HUGE), MC_ERR_TOO_LARGE);
	assert_int_equal(call_fake(FAKE_TRUNCATED), MC_ERR_CONN_CLOSED);
}

static void stop_with_connections_open(void **state)
{
	struct fixture *f = fixture_start(60000, 0);
	char *frame, buf[256];
	size_t n;
	int idle, half, lingering, writing;
	(void)state;

	idle = raw_connect(f->port);
	half = raw_connect(f->port);
	raw_send(half, "\x20\x00\x00\x00\x00\x00\x00\x00\x01{", 10);

	/* got its answer and the server's EOF, but keeps its end open */
	assert_int_equal(mc_rpc_frame_encode(MC_RPC_PROBE, "{}", 2, &frame, &n), MC_OK);
	lingering = raw_connect(f->port);
	raw_send(lingering, frame, n);
	assert_int_equal(read_until_close(lingering, buf, sizeof(buf), 5000), 9 + 5);
	mc_free(frame);

	/* asks for 16 MiB and never reads it: the server is stuck writing */
	atomic_store(&f->hs.big_response, (size_t)16 << 20);
	assert_int_equal(mc_rpc_frame_encode(MC_RPC_METADATA, "big", 3, &frame, &n), MC_OK);
	writing = raw_connect(f->port);
	raw_send(writing, frame, n);
	mc_free(frame);
	/* the handler ran once the server has started answering */
	{
		struct pollfd p = {.fd = writing, .events = POLLIN};
		assert_int_equal(poll(&p, 1, 5000), 1);
	}

	fixture_stop(f);
	expect_closed_without_reply(idle, 5000);
	expect_closed_without_reply(half, 5000);
	close(idle);
	close(half);
	close(lingering);
	close(writing);
}

static void connection_limit_refuses_extra_clients(void **state)
{
	enum { LIMIT = 1024 }; /* RPC_MAX_CONNS in rpc.c */
	rlim_t need = 2 * LIMIT + 64;
	struct rlimit rl;
	struct fixture *f;
	struct pollfd p = {.events = POLLIN};
	int *fds, extra;
	(void)state;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur < need && rl.rlim_max >= need) {
		rl.rlim_cur = need;
		setrlimit(RLIMIT_NOFILE, &rl);
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < need)
		skip(); /* both ends of 1025 connections live in this process */

	f = fixture_start(60000, 0);
	fds = calloc(LIMIT, sizeof(*fds));
	assert_non_null(fds);
	for (int i = 0; i < LIMIT; i++)
		fds[i] = raw_connect(f->port);
	/* accept is FIFO: the first LIMIT are taken, this one is refused */
	extra = raw_connect(f->port);
	expect_closed_without_reply(extra, 10000);
	close(extra);
	p.fd = fds[0];
	assert_int_equal(poll(&p, 1, 0), 0);
	p.fd = fds[LIMIT - 1];
	assert_int_equal(poll(&p, 1, 0), 0);
	fixture_stop(f);
	for (int i = 0; i < LIMIT; i++)
		close(fds[i]);
	free(fds);
}

/* With a secret: the right one is answered; a wrong one, none (an
 * upstream client's frame) or a replayed proof never reach the handler. */
static void secret_guards_every_call(void **state)
{
	static char k1[] = "rpc-secret", k2[] = "other";
	struct mc_auth_secret s1 = {k1, sizeof(k1) - 1}, s2 = {k2, sizeof(k2) - 1};
	struct fixture *f = fixture_start_auth(&s1, 2000);
	char *resp = NULL, buf[64];
	size_t len = 0;
	uint64_t refused = atomic_load(&mc_auth_refused_total);
	uint8_t frame[16];
	int fd;
	(void)state;

	assert_int_equal(mc_rpc_call(&s1, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2, 2000, 5000,
				     0, &resp, &len),
			 MC_OK);
	assert_string_equal(resp, "3:{}\n");
	mc_free(resp);
	assert_int_equal(atomic_load(&f->hs.calls), 1);

	assert_int_equal(mc_rpc_call(&s2, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2, 2000, 5000,
				     0, &resp, &len),
			 MC_ERR_PERMISSION);
	assert_int_not_equal(mc_rpc_call(NULL, "127.0.0.1", f->port, MC_RPC_PROBE, "{}", 2, 2000,
					 5000, 0, &resp, &len),
			     MC_OK);
	/* an upstream frame sent raw: closed without a reply, well before the
	 * receive deadline */
	fd = raw_connect(f->port);
	put_le64(frame, 3);
	frame[8] = MC_RPC_PROBE;
	memcpy(frame + 9, "{}", 2);
	raw_send(fd, frame, 11);
	assert_true(read_until_close(fd, buf, sizeof(buf), 1000) == 0);
	close(fd);
	assert_int_equal(atomic_load(&f->hs.calls), 1);
	assert_true(atomic_load(&mc_auth_refused_total) >= refused + 3);
	fixture_stop(f);
}

static void start_rejects_bad_params(void **state)
{
	struct mc_rpc_server_params p = {.listen_fd = -1, .handler = echo_handler};
	struct mc_rpc_server *s = NULL;
	(void)state;

	assert_int_equal(mc_rpc_server_start(&p, &s), MC_ERR_INVALID_PARAMS);
	p.listen_fd = mc_sock_listen(0, 4);
	p.handler = NULL;
	/* the listener is closed even though start fails */
	assert_int_equal(mc_rpc_server_start(&p, &s), MC_ERR_INVALID_PARAMS);
	assert_null(s);
	mc_rpc_server_stop(NULL);
}

int main(void)
{
	const char *level = getenv("MC_LOG_LEVEL");
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parse_header_typed_legacy_and_rejects),
		cmocka_unit_test(secret_guards_every_call),
		cmocka_unit_test(encode_appends_newline_once),
		cmocka_unit_test(reader_assembles_byte_by_byte),
		cmocka_unit_test(reader_reports_trailing_bytes_and_legacy),
		cmocka_unit_test(reader_fault_injection_reports_nomem),
		cmocka_unit_test(round_trip_each_type),
		cmocka_unit_test(large_frames_and_client_limit),
		cmocka_unit_test(response_echoes_type_and_half_closes),
		cmocka_unit_test(legacy_frame_answered_untyped),
		cmocka_unit_test(bad_frames_closed_without_reply),
		cmocka_unit_test(idle_client_does_not_block_others),
		cmocka_unit_test(half_sent_frame_times_out_pieces_are_answered),
		cmocka_unit_test(handler_error_closes_without_reply),
		cmocka_unit_test(concurrent_clients),
		cmocka_unit_test(call_to_closed_port_is_refused),
		cmocka_unit_test(call_to_silent_server_times_out),
		cmocka_unit_test(call_until_keeps_one_deadline),
		cmocka_unit_test(bad_responses_are_protocol_errors),
		cmocka_unit_test(stop_with_connections_open),
		cmocka_unit_test(connection_limit_refuses_extra_clients),
		cmocka_unit_test(start_rejects_bad_params),
	};
	/* internal tests bypass the API entry points that read MC_LOG_LEVEL */
	if (level && mc_log_level_parse(level) >= 0)
		mc_log_set_level(mc_log_level_parse(level));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
