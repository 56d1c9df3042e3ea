/*
 * tests/unit/test_te_checksum.c - per-transfer checksums of the Transfer
 * Engine (MC_TE_CHECKSUM, mc_te_set_checksum; docs/design.md, "Transfer
 * checksums"): two engines in one process over loopback TCP, the same-host
 * path (which hands checksummed slices to TCP), the local path, hand-made
 * frames against the target, and peers that cannot check.
 *
 * A flipped byte in flight is made with base/xsum.h's test hook (the next
 * sender-side sum is spoilt) or, against the target, by sending a payload
 * whose byte differs from the one the trailer was computed over.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/xsum.h"
#include "meta/desc.h"
#include "meta/meta.h"
#include "mooncake/te.h"
#include "support.h"
#include "te/engine.h"
#include "transport/shm.h"
#include "transport/transport.h"

#define BUF (8u << 20)

struct pair {
	struct mc_te *a, *b;
	char *abuf, *bbuf;
	mc_segment_id b_id;
	const char *uri;
};

static int setup_env(void **state, const char *uri, const char *const *env)
{
	struct pair *p = calloc(1, sizeof(*p));
	for (size_t i = 0; env[i]; i += 2)
		setenv(env[i], env[i + 1], 1);
	p->uri = uri;
	p->a = mc_test_engine_new(uri, "127.0.0.1");
	p->b = mc_test_engine_new(uri, "engine-b");
	for (size_t i = 0; env[i]; i += 2)
		unsetenv(env[i]);
	assert_non_null(p->a);
	assert_non_null(p->b);
	p->abuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	p->bbuf = mmap(NULL, BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_int_equal(mc_te_register(p->a, p->abuf, BUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_register(p->b, p->bbuf, BUF, "cpu:0", true), MC_OK);
	assert_int_equal(mc_te_open_segment(p->a, mc_te_local_name(p->b), &p->b_id), MC_OK);
	*state = p;
	return 0;
}

/* TCP only, checksums on from the environment. */
static int setup_tcp(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE", "1", "MC_TE_CHECKSUM", "1", NULL};
	return setup_env(state, "mem://test_sum_tcp", env);
}

/* Same host: the shm transport is there and hands checksummed slices on. */
static int setup_shm(void **state)
{
	static const char *const env[] = {"MC_TE_CHECKSUM", "1", NULL};
	return setup_env(state, "mem://test_sum_shm", env);
}

/* Checksums off (the default); tests turn them on with the C call. */
static int setup_off(void **state)
{
	static const char *const env[] = {"MC_SHM_DISABLE", "1", NULL};
	return setup_env(state, "mem://test_sum_off", env);
}

/* The initiator speaks upstream's v1 framing, which has no room for sums. */
static int setup_v1(void **state)
{
	static const char *const env[] = {
		"MC_SHM_DISABLE", "1", "MC_TCP_PROTO", "1", "MC_TE_CHECKSUM", "1", NULL};
	return setup_env(state, "mem://test_sum_v1", env);
}

static int teardown(void **state)
{
	struct pair *p = *state;
	atomic_store(&mc_xsum_test_flip, 0);
	mc_te_free(p->a);
	mc_te_free(p->b);
	munmap(p->abuf, BUF);
	munmap(p->bbuf, BUF);
	free(p);
	return 0;
}

static int xfer(struct mc_te *te, int op, void *local, mc_segment_id seg, void *remote,
		uint64_t len)
{
	struct mc_xfer_req r = {.opcode = op,
				.source = local,
				.target_id = seg,
				.target_offset = (uint64_t)(uintptr_t)remote,
				.length = len};
	return mc_te_transfer_sync(te, &r, 1, 20000);
}

static const size_t sizes[] = {1, 4096, 32767, 32768, 65539, 1 << 20, (4 << 20) + 1};

/* Writes then reads of every size, each checked byte for byte. */
static void roundtrips(struct pair *p)
{
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		size_t len = sizes[i], off = 5 + i;
		mc_test_fill(p->abuf + off, len, i + 40);
		memset(p->bbuf, 0, len + off + 16);
		assert_int_equal(
			xfer(p->a, MC_OP_WRITE, p->abuf + off, p->b_id, p->bbuf + off, len), MC_OK);
		assert_memory_equal(p->abuf + off, p->bbuf + off, len);
		memset(p->abuf + (4 << 20) - 3, 0, len);
		assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf + (4 << 20) - 3, p->b_id,
				      p->bbuf + off, len),
				 MC_OK);
		assert_memory_equal(p->abuf + (4 << 20) - 3, p->bbuf + off, len);
	}
}

static void checksummed_transfers_move_the_right_bytes(void **state)
{
	struct pair *p = *state;
	assert_true(mc_te_checksum(p->a));
	roundtrips(p);
}

/* Off and on, one engine pair: the switch applies to batches made after it,
 * and the target's own setting does not matter (it checks what is sent
 * checksummed, and takes plain requests as ever). */
static void off_and_on_both_move_the_right_bytes(void **state)
{
	struct pair *p = *state;
	assert_false(mc_te_checksum(p->a));
	roundtrips(p);
	mc_te_set_checksum(p->b, true); /* off initiator, on target */
	roundtrips(p);
	mc_te_set_checksum(p->b, false);
	mc_te_set_checksum(p->a, true); /* on initiator, off target */
	roundtrips(p);
	/* a spoilt sum is seen only while it is on */
	mc_te_set_checksum(p->a, false);
	atomic_store(&mc_xsum_test_flip, 1);
	mc_test_fill(p->abuf, 4096, 3);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096), MC_OK);
	assert_int_equal(atomic_load(&mc_xsum_test_flip), 1);
	atomic_store(&mc_xsum_test_flip, 0);
}

/* A byte flipped in flight: the transfer fails with -801, the next one on
 * the same connection succeeds.  A write under 32 KiB is checked before a
 * byte of it is applied, so the target's memory keeps its old bytes. */
static void flipped_bytes_fail_the_transfer(void **state)
{
	struct pair *p = *state;
	char *old = malloc(1 << 20);

	memset(p->bbuf, 0x5a, 1 << 20);
	memcpy(old, p->bbuf, 1 << 20);
	mc_test_fill(p->abuf, 1 << 20, 77);

	atomic_store(&mc_xsum_test_flip, 1);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_memory_equal(old, p->bbuf, 4096);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf, 4096);

	/* a large write lands where it goes, and is failed all the same */
	atomic_store(&mc_xsum_test_flip, 1);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 1 << 20),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 1 << 20), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf, 1 << 20);

	/* reads: the target's sum is spoilt, the initiator sees it */
	for (size_t len = 4096; len <= (1 << 20); len *= 256) {
		atomic_store(&mc_xsum_test_flip, 1);
		assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf + (2 << 20), p->b_id, p->bbuf, len),
				 MC_ERR_CHECKSUM_MISMATCH);
		assert_int_equal(atomic_load(&mc_xsum_test_flip), 0);
		assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf + (2 << 20), p->b_id, p->bbuf, len),
				 MC_OK);
		assert_memory_equal(p->abuf + (2 << 20), p->bbuf, len);
	}
	free(old);
}

/* The same-host path hands checksummed slices to TCP, and says so in its
 * counters; a flip is caught there too. */
static void same_host_checksums_go_over_tcp(void **state)
{
	struct pair *p = *state;
	struct mc_transport *shm = mc_te_transport(p->a, "shm");
	uint64_t before, after;

	assert_non_null(shm);
	mc_shm_stats(shm, NULL, &before);
	roundtrips(p);
	mc_shm_stats(shm, NULL, &after);
	assert_true(after - before >= 2 * sizeof(sizes) / sizeof(sizes[0]));
	atomic_store(&mc_xsum_test_flip, 1);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096),
			 MC_ERR_CHECKSUM_MISMATCH);
}

/* The engine's own segment: the source is hashed before the copy and the
 * destination after it. */
static void local_copies_are_checked(void **state)
{
	struct pair *p = *state;
	char *dst = p->abuf + (4 << 20);

	mc_test_fill(p->abuf, 1 << 20, 9);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, MC_LOCAL_SEGMENT, dst, 1 << 20), MC_OK);
	assert_memory_equal(p->abuf, dst, 1 << 20);
	atomic_store(&mc_xsum_test_flip, 1);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, MC_LOCAL_SEGMENT, dst, 4096),
			 MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(atomic_load(&mc_xsum_test_flip), 0);
}

/* An initiator held to v1 framing cannot send sums: its checksummed
 * transfers fail with MC_ERR_NOT_SUPPORTED, nothing moves unchecked. */
static void v1_initiator_refuses_checksummed_transfers(void **state)
{
	struct pair *p = *state;
	memset(p->bbuf, 0x11, 4096);
	mc_test_fill(p->abuf, 4096, 1);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096),
			 MC_ERR_NOT_SUPPORTED);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, p->b_id, p->bbuf, 4096),
			 MC_ERR_NOT_SUPPORTED);
	for (int i = 0; i < 4096; i++)
		assert_int_equal((unsigned char)p->bbuf[i], 0x11);
	/* off again, the same peer is used as before */
	mc_te_set_checksum(p->a, false);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, p->b_id, p->bbuf, 4096), MC_OK);
}

/* A target that publishes tcp_proto_version 2 (upstream's, or ours before
 * checksums) is refused checksummed transfers; with them off it serves. */
static void a_target_that_cannot_check_is_refused(void **state)
{
	struct pair *p = *state;
	struct mc_seg_desc *d;
	struct mc_meta *m;
	char *json, rpc[128];
	char *k1 = mc_meta_key_rpc("old-b"), *k2 = mc_meta_key_segment("old-b");
	mc_segment_id id;

	assert_int_equal(mc_te_local_desc(p->b, &d), MC_OK);
	assert_int_equal(d->tcp_proto_version, MC_TCP_PROTO_SUM);
	d->tcp_proto_version = 2;
	mc_free(d->name);
	d->name = mc_strdup("old-b");
	assert_int_equal(mc_seg_desc_encode(d, &json), MC_OK);
	snprintf(rpc, sizeof(rpc), "{\"ip_or_host_name\":\"127.0.0.1\",\"rpc_port\":%u}",
		 mc_te_rpc_port(p->b));
	assert_int_equal(mc_meta_open(p->uri, &m), MC_OK);
	assert_int_equal(mc_meta_put(m, k1, rpc, strlen(rpc)), MC_OK);
	assert_int_equal(mc_meta_put(m, k2, json, strlen(json)), MC_OK);
	assert_int_equal(mc_te_open_segment(p->a, "old-b", &id), MC_OK);

	memset(p->bbuf, 0x22, 4096);
	mc_test_fill(p->abuf, 4096, 2);
	mc_te_set_checksum(p->a, true);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, p->bbuf, 4096), MC_ERR_NOT_SUPPORTED);
	assert_int_equal(xfer(p->a, MC_OP_READ, p->abuf, id, p->bbuf, 4096), MC_ERR_NOT_SUPPORTED);
	for (int i = 0; i < 4096; i++)
		assert_int_equal((unsigned char)p->bbuf[i], 0x22);
	mc_te_set_checksum(p->a, false);
	assert_int_equal(xfer(p->a, MC_OP_WRITE, p->abuf, id, p->bbuf, 4096), MC_OK);
	assert_memory_equal(p->abuf, p->bbuf, 4096);

	mc_meta_del(m, k1);
	mc_meta_del(m, k2);
	mc_meta_close(m);
	mc_seg_desc_free(d);
	mc_free(json);
	free(k1);
	free(k2);
}

/* ---- hand-made frames against the target ------------------------------- */

static int raw_connect(struct mc_te *te)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(mc_te_tcp_port(te))};
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct timeval tv = {.tv_sec = 30};
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		assert_true(k > 0);
		p = (const char *)p + k;
		n -= (size_t)k;
	}
}

/* Reads exactly n bytes; false on EOF or error. */
static bool recv_all(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t k = recv(fd, p, n, 0);
		if (k <= 0)
			return false;
		p = (char *)p + k;
		n -= (size_t)k;
	}
	return true;
}

static uint32_t recv_status(int fd)
{
	uint8_t st[8];
	uint32_t code = 99;
	assert_true(recv_all(fd, st, sizeof(st)));
	assert_int_equal(mc_tcp_status_decode(st, &code), MC_OK);
	return code;
}

/* A checksummed write of len bytes whose byte at flip (if < len) differs
 * from what the trailer was computed over. */
static void raw_sum_write(int fd, char *dst, const char *src, size_t len, size_t flip)
{
	uint8_t hdr[MC_TCP_HDR_LEN], sum[MC_TCP_SUM_LEN];
	struct mc_tcp_hdr h = {.size = len,
			       .addr = (uint64_t)(uintptr_t)dst,
			       .opcode = MC_TCP_OP_WRITE | MC_TCP_OP_V2 | MC_TCP_OP_SUM};
	char *wire = malloc(len);

	memcpy(wire, src, len);
	mc_tcp_sum_encode(mc_xsum(src, len), sum);
	if (flip < len)
		wire[flip] ^= 0x04;
	mc_tcp_hdr_encode(&h, hdr);
	send_all(fd, hdr, sizeof(hdr));
	send_all(fd, wire, len);
	send_all(fd, sum, sizeof(sum));
	free(wire);
}

static void target_checks_hand_made_frames(void **state)
{
	struct pair *p = *state;
	int fd = raw_connect(p->b);
	uint8_t hdr[MC_TCP_HDR_LEN], sum[MC_TCP_SUM_LEN];
	struct mc_tcp_hdr h;
	char *got = malloc(65536);

	memset(p->bbuf, 0x33, 1 << 20);
	mc_test_fill(p->abuf, 1 << 20, 123);

	/* a small write with a flipped byte: refused, memory untouched */
	raw_sum_write(fd, p->bbuf, p->abuf, 4096, 100);
	assert_int_equal(recv_status(fd), MC_TCP_STATUS_SUM);
	for (int i = 0; i < 4096; i++)
		assert_int_equal((unsigned char)p->bbuf[i], 0x33);
	/* the stream is in step: the same write, intact, is applied */
	raw_sum_write(fd, p->bbuf, p->abuf, 4096, SIZE_MAX);
	assert_int_equal(recv_status(fd), MC_TCP_STATUS_OK);
	assert_memory_equal(p->abuf, p->bbuf, 4096);
	/* a large one (straight to its destination) is failed as well */
	raw_sum_write(fd, p->bbuf, p->abuf, 1 << 20, (1 << 20) - 1);
	assert_int_equal(recv_status(fd), MC_TCP_STATUS_SUM);
	raw_sum_write(fd, p->bbuf, p->abuf, 1 << 20, SIZE_MAX);
	assert_int_equal(recv_status(fd), MC_TCP_STATUS_OK);
	assert_memory_equal(p->abuf, p->bbuf, 1 << 20);

	/* a checksummed read: status, data, then the sum of the data */
	h = (struct mc_tcp_hdr){.size = 65536,
				.addr = (uint64_t)(uintptr_t)p->bbuf,
				.opcode = MC_TCP_OP_READ | MC_TCP_OP_V2 | MC_TCP_OP_SUM};
	mc_tcp_hdr_encode(&h, hdr);
	send_all(fd, hdr, sizeof(hdr));
	assert_int_equal(recv_status(fd), MC_TCP_STATUS_OK);
	assert_true(recv_all(fd, got, 65536));
	assert_true(recv_all(fd, sum, sizeof(sum)));
	assert_memory_equal(got, p->bbuf, 65536);
	assert_true(mc_tcp_sum_decode(sum) == mc_xsum(p->bbuf, 65536));
	close(fd);

	/* the checksum bit without v2 (no status frame to answer with): the
	 * connection is closed, nothing written */
	fd = raw_connect(p->b);
	h = (struct mc_tcp_hdr){.size = 16,
				.addr = (uint64_t)(uintptr_t)p->bbuf,
				.opcode = MC_TCP_OP_WRITE | MC_TCP_OP_SUM};
	mc_tcp_hdr_encode(&h, hdr);
	memset(got, 0, 16 + MC_TCP_SUM_LEN);
	send_all(fd, hdr, sizeof(hdr));
	send(fd, got, 16 + MC_TCP_SUM_LEN, MSG_NOSIGNAL);
	assert_false(recv_all(fd, sum, 1));
	assert_memory_equal(p->abuf, p->bbuf, 16);
	close(fd);
	free(got);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(checksummed_transfers_move_the_right_bytes,
						setup_tcp, teardown),
		cmocka_unit_test_setup_teardown(off_and_on_both_move_the_right_bytes, setup_off,
						teardown),
		cmocka_unit_test_setup_teardown(flipped_bytes_fail_the_transfer, setup_tcp,
						teardown),
		cmocka_unit_test_setup_teardown(flipped_bytes_fail_the_transfer, setup_shm,
						teardown),
		cmocka_unit_test_setup_teardown(same_host_checksums_go_over_tcp, setup_shm,
						teardown),
		cmocka_unit_test_setup_teardown(local_copies_are_checked, setup_tcp, teardown),
		cmocka_unit_test_setup_teardown(v1_initiator_refuses_checksummed_transfers,
						setup_v1, teardown),
		cmocka_unit_test_setup_teardown(a_target_that_cannot_check_is_refused, setup_off,
						teardown),
		cmocka_unit_test_setup_teardown(target_checks_hand_made_frames, setup_off,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
