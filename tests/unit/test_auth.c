/*
 * tests/unit/test_auth.c - the challenge-response handshake (base/auth_hs.h):
 * the right secret passes both ways, a wrong one, another channel, a
 * replayed handshake and a peer speaking another protocol each fail, on a
 * real socket pair as well as through the state machine.
 */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/auth_hs.h"
#include "base/sock.h"

static char k1[] = "cluster-secret-1", k2[] = "cluster-secret-2";
static struct mc_auth_secret s1 = {k1, sizeof(k1) - 1}, s2 = {k2, sizeof(k2) - 1};

/* Move a's queued output into b; returns b's result. */
static enum mc_auth_result pump(struct mc_auth_hs *a, struct mc_auth_hs *b)
{
	enum mc_auth_result r = MC_AUTH_AGAIN;
	size_t n = a->out_len - a->out_pos;
	if (n)
		r = mc_auth_hs_feed(b, a->out + a->out_pos, n);
	a->out_pos = a->out_len;
	return r;
}

static void mem_right_secret(void **state)
{
	struct mc_auth_hs c, s;
	(void)state;
	assert_int_equal(mc_auth_hs_init(&c, &s1, MC_AUTH_CLIENT, "te-data"), MC_OK);
	assert_int_equal(mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data"), MC_OK);
	assert_int_equal(pump(&c, &s), MC_AUTH_AGAIN); /* HELLO */
	assert_int_equal(pump(&s, &c), MC_AUTH_DONE);  /* CHALLENGE: server proved */
	assert_int_equal(pump(&c, &s), MC_AUTH_DONE);  /* PROOF: client proved */
	assert_int_equal(mc_auth_hs_need(&s), 0);
}

static void mem_wrong_secret(void **state)
{
	struct mc_auth_hs c, s;
	(void)state;
	mc_auth_hs_init(&c, &s2, MC_AUTH_CLIENT, "te-data");
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	pump(&c, &s);
	assert_int_equal(pump(&s, &c), MC_AUTH_FAIL);
	assert_non_null(strstr(c.why, "server's proof"));
	/* a client that ignores the server's proof still cannot prove itself */
	{
		struct mc_auth_hs c2;
		uint8_t forged[MC_AUTH_HDR_LEN + MC_AUTH_MAC_LEN] = {0};
		mc_auth_hs_init(&c2, &s2, MC_AUTH_CLIENT, "te-data");
		mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
		pump(&c2, &s);
		mc_auth_hdr_encode(MC_AUTH_PROOF, MC_AUTH_MAC_LEN, forged);
		assert_int_equal(mc_auth_hs_feed(&s, forged, sizeof(forged)), MC_AUTH_FAIL);
		assert_non_null(strstr(s.why, "client's proof"));
	}
}

static void mem_other_channel(void **state)
{
	struct mc_auth_hs c, s;
	(void)state;
	mc_auth_hs_init(&c, &s1, MC_AUTH_CLIENT, "te-rpc");
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	pump(&c, &s);
	assert_int_equal(pump(&s, &c), MC_AUTH_FAIL);
}

/* A recorded client's HELLO and PROOF, replayed to a new server connection. */
static void mem_replay(void **state)
{
	struct mc_auth_hs c, s, s2b;
	uint8_t rec[2 * MC_AUTH_FRAME_MAX];
	size_t n;
	(void)state;
	mc_auth_hs_init(&c, &s1, MC_AUTH_CLIENT, "master");
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "master");
	memcpy(rec, c.out, c.out_len);
	n = c.out_len;
	pump(&c, &s);
	assert_int_equal(pump(&s, &c), MC_AUTH_DONE);
	memcpy(rec + n, c.out + c.out_pos, c.out_len - c.out_pos);
	n += c.out_len - c.out_pos;
	assert_int_equal(pump(&c, &s), MC_AUTH_DONE);

	mc_auth_hs_init(&s2b, &s1, MC_AUTH_SERVER, "master");
	assert_int_equal(mc_auth_hs_feed(&s2b, rec, n), MC_AUTH_FAIL);
	assert_non_null(strstr(s2b.why, "client's proof"));
}

static void mem_bad_frames(void **state)
{
	struct mc_auth_hs s;
	uint8_t hdr[MC_AUTH_HDR_LEN];
	uint8_t tcp_hdr[24] = {0x00, 0x10, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x7f, 0, 0, 0x81};
	(void)state;
	/* an upstream TCP request header: no auth magic */
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	assert_int_equal(mc_auth_hs_feed(&s, tcp_hdr, mc_auth_hs_need(&s)), MC_AUTH_FAIL);
	/* oversized body */
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	mc_auth_hdr_encode(MC_AUTH_HELLO, 1000, hdr);
	assert_int_equal(mc_auth_hs_feed(&s, hdr, sizeof(hdr)), MC_AUTH_FAIL);
	/* right type, wrong size */
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	mc_auth_hdr_encode(MC_AUTH_HELLO, 16, hdr);
	assert_int_equal(mc_auth_hs_feed(&s, hdr, sizeof(hdr)), MC_AUTH_FAIL);
	/* truncated: waits for the rest, asks for no more than the frame */
	mc_auth_hs_init(&s, &s1, MC_AUTH_SERVER, "te-data");
	mc_auth_hdr_encode(MC_AUTH_HELLO, MC_AUTH_NONCE_LEN, hdr);
	assert_int_equal(mc_auth_hs_feed(&s, hdr, sizeof(hdr)), MC_AUTH_AGAIN);
	assert_int_equal(mc_auth_hs_need(&s), MC_AUTH_NONCE_LEN);
}

struct side {
	int fd;
	const struct mc_auth_secret *sec;
	enum mc_auth_role role;
	mc_status st;
};

static void *side_main(void *arg)
{
	struct side *sd = arg;
	sd->st = mc_auth_hs_run(sd->fd, sd->sec, sd->role, "te-rpc", 2000);
	if (sd->st == MC_OK && sd->role == MC_AUTH_CLIENT)
		(void)!write(sd->fd, "req", 3);
	if (sd->st != MC_OK)
		close(sd->fd); /* as every user does: the peer learns at once */
	return NULL;
}

static void run_pair(const struct mc_auth_secret *cs, mc_status *cst, mc_status *sst, char *after)
{
	int sv[2];
	pthread_t t;
	struct side c, s;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	c = (struct side){sv[0], cs, MC_AUTH_CLIENT, 0};
	s = (struct side){sv[1], &s1, MC_AUTH_SERVER, 0};
	pthread_create(&t, NULL, side_main, &c);
	side_main(&s);
	pthread_join(t, NULL);
	*cst = c.st;
	*sst = s.st;
	if (after && s.st == MC_OK)
		assert_int_equal(read(sv[1], after, 3), 3);
	if (c.st == MC_OK)
		close(sv[0]);
	if (s.st == MC_OK)
		close(sv[1]);
}

static void sock_handshake(void **state)
{
	mc_status cst, sst;
	char after[4] = {0};
	uint64_t before = atomic_load(&mc_auth_refused_total);
	(void)state;
	run_pair(&s1, &cst, &sst, after);
	assert_int_equal(cst, MC_OK);
	assert_int_equal(sst, MC_OK);
	/* the protocol's first bytes after the handshake are intact */
	assert_string_equal(after, "req");

	run_pair(&s2, &cst, &sst, NULL);
	assert_int_equal(cst, MC_ERR_PERMISSION);
	assert_int_equal(sst, MC_ERR_PERMISSION);
	assert_true(atomic_load(&mc_auth_refused_total) == before); /* callers count */
}

struct tcp_side {
	int fd;
	mc_status st;
	int quickack; /* TCP_QUICKACK right after the handshake: 1 = not delaying ACKs */
};

static void *tcp_client_main(void *arg)
{
	struct tcp_side *sd = arg;
	socklen_t l = sizeof(sd->quickack);
	sd->st = mc_auth_hs_run(sd->fd, &s1, MC_AUTH_CLIENT, "te-data", 2000);
	assert_int_equal(getsockopt(sd->fd, IPPROTO_TCP, TCP_QUICKACK, &sd->quickack, &l), 0);
	return NULL;
}

/* A listener on loopback, a client socket connected to it and the server's
 * end of that connection. */
static void tcp_pair(int *lfd, int *cfd, int *sfd)
{
	*lfd = mc_sock_listen_on("127.0.0.1", 0, 4);
	assert_true(*lfd >= 0);
	*cfd = mc_sock_connect("127.0.0.1", mc_sock_local_port(*lfd), 2000, false);
	assert_true(*cfd >= 0);
	*sfd = accept(*lfd, NULL, NULL);
	assert_true(*sfd >= 0);
}

/* Over TCP the exchange (each side answering at once) puts both sockets in
 * the kernel's delayed-ACK ("ping-pong") mode, and the ACKs of the bulk the
 * client sends next came late: its congestion control judged the link full
 * and the engine's 4 KiB writes with a secret ran at 0.87 of plain
 * (docs/security.md).  A finished handshake leaves both sockets
 * acknowledging at once (getsockopt(TCP_QUICKACK) reads 1 outside ping-pong
 * mode). */
static void tcp_handshake_acks_at_once(void **state)
{
	int lfd, sfd;
	struct tcp_side c = {-1, 0, 0}, s = {-1, 0, 0};
	socklen_t l = sizeof(s.quickack);
	pthread_t t;
	(void)state;
	tcp_pair(&lfd, &c.fd, &sfd);
	pthread_create(&t, NULL, tcp_client_main, &c);
	s.st = mc_auth_hs_run(sfd, &s1, MC_AUTH_SERVER, "te-data", 2000);
	assert_int_equal(getsockopt(sfd, IPPROTO_TCP, TCP_QUICKACK, &s.quickack, &l), 0);
	pthread_join(t, NULL);
	assert_int_equal(s.st, MC_OK);
	assert_int_equal(c.st, MC_OK);
	assert_int_equal(s.quickack, 1);
	assert_int_equal(c.quickack, 1);
	close(c.fd);
	close(sfd);
	close(lfd);
}

/* Over BBR a handshake's few small frames left a bandwidth sample and
 * counted rounds on the socket, and one data connection in a few then left
 * BBR's start-up within the first batches and paced the bulk at that rate:
 * the engine's 4 KiB writes with a secret ran at 0.94-0.96 of plain
 * (docs/security.md).  A finished handshake starts the congestion control
 * afresh: BBR reports no bandwidth sample yet (TCP_CC_INFO).  Checked on
 * the server's socket, whose last frame (CHALLENGE) the client's PROOF
 * acknowledged before the server restarts: nothing is in flight then.
 * The client restarts right after sending PROOF, and the server's ACK of
 * it comes before or after that as the two threads are scheduled (after
 * in 25 of 600 runs under ASan, four at once), leaving the client's BBR
 * that one frame's sample or none: its socket is not checked.  Skipped
 * where bbr cannot be chosen. */
static void tcp_handshake_restarts_congestion_control(void **state)
{
	int lfd, sfd;
	struct tcp_side c = {-1, 0, 0};
	struct {
		uint32_t bw_lo, bw_hi, min_rtt, pacing_gain, cwnd_gain;
	} info;
	socklen_t l;
	pthread_t t;
	mc_status st;
	(void)state;
	tcp_pair(&lfd, &c.fd, &sfd);
	if (setsockopt(c.fd, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) < 0 ||
	    setsockopt(sfd, IPPROTO_TCP, TCP_CONGESTION, "bbr", 3) < 0) {
		close(c.fd);
		close(sfd);
		close(lfd);
		skip();
	}
	pthread_create(&t, NULL, tcp_client_main, &c);
	st = mc_auth_hs_run(sfd, &s1, MC_AUTH_SERVER, "te-data", 2000);
	pthread_join(t, NULL);
	assert_int_equal(st, MC_OK);
	assert_int_equal(c.st, MC_OK);
	l = sizeof(info);
	assert_int_equal(getsockopt(sfd, IPPROTO_TCP, TCP_CC_INFO, &info, &l), 0);
	assert_int_equal(l, sizeof(info));
	if (info.bw_lo | info.bw_hi)
		fail_msg("the server's BBR has a bandwidth sample (%u, %u) after the handshake",
			 info.bw_lo, info.bw_hi);
	close(c.fd);
	close(sfd);
	close(lfd);
}

/* Run fn with stderr in a file; the file's text into out. */
static void capture_stderr(void (*fn)(void), char *out, size_t cap)
{
	FILE *f = tmpfile();
	int saved = dup(2);
	size_t n;
	assert_non_null(f);
	fflush(stderr);
	assert_true(dup2(fileno(f), 2) == 2);
	fn();
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(f);
	n = fread(out, 1, cap - 1, f);
	out[n] = 0;
	fclose(f);
}

static void refuse_two_ports(void)
{
	for (int i = 0; i < 5; i++)
		mc_auth_refused("tcp data", "peer-a", "flood");
	mc_auth_refused("same-host", "peer-b", "wrong secret");
	mc_auth_refused("same-host", "peer-b", "wrong secret");
}

/* One port's refusals do not silence another's log line (the limiter is per
 * listener): a flood on the data port, then one refusal on the same-host
 * port within the same second, logs both; repeats on each are only counted. */
static void refused_logged_per_port(void **state)
{
	char text[4096];
	uint64_t before = atomic_load(&mc_auth_refused_total);
	(void)state;
	capture_stderr(refuse_two_ports, text, sizeof(text));
	assert_non_null(strstr(text, "refused a connection to the tcp data port from peer-a"));
	assert_non_null(strstr(text, "refused a connection to the same-host port from peer-b"));
	assert_null(strstr(strstr(text, "tcp data port") + 1, "tcp data port"));
	assert_true(atomic_load(&mc_auth_refused_total) == before + 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(mem_right_secret),
		cmocka_unit_test(mem_wrong_secret),
		cmocka_unit_test(mem_other_channel),
		cmocka_unit_test(mem_replay),
		cmocka_unit_test(mem_bad_frames),
		cmocka_unit_test(sock_handshake),
		cmocka_unit_test(tcp_handshake_acks_at_once),
		cmocka_unit_test(tcp_handshake_restarts_congestion_control),
		cmocka_unit_test(refused_logged_per_port),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
