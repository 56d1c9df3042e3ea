/*
 * tests/unit/test_master_segments.c - the master's segments and where
 * replicas live (master/master.h), driven with explicit time: mounts and
 * remounts and their refusals (the daemon's mount probe), peers' reports
 * of unreachable segments and corrupt replicas, placement (local_first,
 * several replicas, preferred segments, the same node), client liveness,
 * unmounts and the sweep in slices (and the admin listing during a table
 * resize), graceful unmounts.  Split out of test_master.c (the object
 * model), with the same harness.
 *
 * Every request goes through the real codec both ways (the harness in
 * tests/support/master_t.h), so what is checked is what a client would
 * see.  No test sleeps: time is the now_ms argument.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/master.h"
#include "master_t.h"
#include "mooncake/status.h"
#include "store/proto.h"

#define MIB (1ull << 20)

static const struct mc_store_uuid CA = {1, 1}, CB = {2, 2}, CC = {3, 3};
static const struct mc_store_uuid SA = {10, 1}, SB = {20, 2}, SC = {30, 3};

/* ---- mounts ---- */

static void test_ping_mount_remount(void **state)
{
	struct mt *t = mt_new_liveness();
	struct mc_store_remount_req rr = {CA, 0, NULL};
	struct mc_store_segment segs[2];

	(void)state;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(mt_metrics(t).active_clients, 1);

	/* bad segments */
	assert_int_equal(mt_mount(t, CB, SB, "", 0x1000, MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x1000, 0), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", UINT64_MAX - 100, MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x1000, 64), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "b:1"));

	/* mount is idempotent by id and makes the client alive */
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, MIB);
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	assert_int_equal(mt_metrics(t).active_clients, 2);

	/* silence past client_ttl: expired, NEED_REMOUNT, segment gone */
	mt_put_ok(t, CA, "k", 100);
	t->now += 5000;
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	t->now += 6000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 0);
	assert_int_equal(mt_get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_metrics(t).key_count, 0);

	/* remount with all segments (idempotent) brings it back */
	segs[0] = mt_seg(SB, "b:1", 0x100000, MIB);
	segs[1] = mt_seg(SC, "b:1", 0x900000, MIB);
	rr.client_id = CB;
	rr.n_segments = 2;
	rr.segments = segs;
	assert_int_equal(mt_call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(mt_call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 2 * MIB);
	mt_put_ok(t, CA, "k", 100);
	assert_int_equal(mt_get(t, "k"), MC_OK);

	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.master_ping.requests, 7);
		assert_int_equal(x.master_mount_segment.requests, 6);
		assert_int_equal(x.master_mount_segment.failures, 4);
		assert_int_equal(x.master_remount_segment.requests, 3);
	}
	mt_free(t);
}

/* issue 11: a mount must not claim more than a host could have */
static void test_absurd_segments_refused(void **state)
{
	struct mc_master_config cfg;
	struct mt *t = mt_new_default();
	struct mc_store_segment bad = mt_seg(SC, "c:1", 0x7f0000000000ull, 8ull << 60);
	struct mc_store_remount_req rr = {CB, 1, &bad};
	const uint64_t base = 0x7f0000000000ull;

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", base, 8ull << 60), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "larger than max_segment_size"));
	assert_int_equal(mt_mount(t, CB, SB, "b:1", base, MC_MASTER_MAX_SEGMENT_SIZE + 1),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", (1ull << 57) - MIB, 2 * MIB),
			 MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(t->err, "user-space"));
	assert_int_equal(mt_call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 0);
	/* the largest allowed, ending right at the top of user space, is fine */
	assert_int_equal(mt_mount(t, CB, SB, "b:1", (1ull << 57) - MC_MASTER_MAX_SEGMENT_SIZE,
				  MC_MASTER_MAX_SEGMENT_SIZE),
			 MC_OK);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, MC_MASTER_MAX_SEGMENT_SIZE);
	mt_free(t);

	/* the cap is a setting */
	mt_cfg_init(&cfg);
	cfg.max_segment_size = 4 * MIB;
	t = mt_new(&cfg);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", base, 8 * MIB), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", base, 4 * MIB), MC_OK);
	mt_free(t);
}

/* Decode a request as the daemon would see it. */
static void as_msg(uint16_t type, const void *body, struct mc_buf *b, struct mc_store_msg *out)
{
	mc_buf_init(b);
	assert_int_equal(mc_store_request_encode(b, type, 7, body), MC_OK);
	assert_int_equal(mc_store_msg_decode(b->data, b->len, MC_PROTO_MAX_PAYLOAD, out), MC_OK);
}

/* What the daemon's mount probe asks, and how it refuses (server_probe.c). */
static void test_mount_probe_queries_and_refuse(void **state)
{
	struct mt *t = mt_new_default();
	const uint64_t base = 0x7f0000000000ull;
	struct mc_store_mount_req good = {CB, mt_seg(SB, "b:1", base, 4 * MIB)};
	struct mc_store_mount_req huge = {CB, mt_seg(SB, "b:1", base, 8ull << 60)};
	struct mc_store_segment two[2] = {mt_seg(SB, "b:1", base, 4 * MIB),
					  mt_seg(SC, "c:1", UINT64_MAX - MIB, 2 * MIB)};
	struct mc_store_remount_req rr = {CB, 2, two};
	struct mc_store_key_req kr = {mc_proto_str_c(""), mc_proto_str_c("k")};
	struct mc_buf b, out;
	struct mc_store_msg m, resp;

	(void)state;
	as_msg(MC_STORE_MOUNT_SEGMENT, &good, &b, &m);
	assert_true(mc_master_mount_acceptable(t->m, &m));
	assert_false(mc_master_segment_mounted(t->m, &SB));
	/* refused: an error answer for the request, counted as a failed mount */
	mc_buf_init(&out);
	assert_int_equal(mc_master_refuse(t->m, &m, MC_ERR_ENDPOINT, "engine at x:1 is gone", &out),
			 MC_ERR_ENDPOINT);
	assert_int_equal(mc_store_msg_decode(out.data, out.len, MC_PROTO_MAX_PAYLOAD, &resp),
			 MC_OK);
	assert_int_equal(resp.hdr.status, MC_ERR_ENDPOINT);
	assert_int_equal(resp.hdr.req_id, 7);
	assert_int_equal(resp.hdr.type, MC_STORE_MOUNT_SEGMENT);
	assert_true(resp.error.len == strlen("engine at x:1 is gone") &&
		    memcmp(resp.error.ptr, "engine at x:1 is gone", resp.error.len) == 0);
	mc_store_msg_release(&resp);
	mc_buf_release(&out);
	assert_int_equal(mt_metrics(t).master_mount_segment.requests, 1);
	assert_int_equal(mt_metrics(t).master_mount_segment.failures, 1);
	assert_false(mc_master_segment_mounted(t->m, &SB));
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 0);
	mc_store_msg_release(&m);
	mc_buf_release(&b);

	/* once mounted, a mount of that id needs no probe */
	assert_int_equal(mt_mount(t, CB, SB, "b:1", base, 4 * MIB), MC_OK);
	assert_true(mc_master_segment_mounted(t->m, &SB));

	/* the master's own refusals need no probe either */
	as_msg(MC_STORE_MOUNT_SEGMENT, &huge, &b, &m);
	assert_false(mc_master_mount_acceptable(t->m, &m));
	mc_store_msg_release(&m);
	mc_buf_release(&b);
	as_msg(MC_STORE_REMOUNT_SEGMENT, &rr, &b, &m); /* the second one wraps */
	assert_false(mc_master_mount_acceptable(t->m, &m));
	mc_store_msg_release(&m);
	mc_buf_release(&b);
	two[1].base = base + 64 * MIB;
	as_msg(MC_STORE_REMOUNT_SEGMENT, &rr, &b, &m);
	assert_true(mc_master_mount_acceptable(t->m, &m));
	mc_store_msg_release(&m);
	mc_buf_release(&b);
	/* and other requests are not mounts */
	as_msg(MC_STORE_EXIST_KEY, &kr, &b, &m);
	assert_false(mc_master_mount_acceptable(t->m, &m));
	mc_store_msg_release(&m);
	mc_buf_release(&b);
	mt_free(t);
}

/* ---- reports and placement ---- */

static mc_status report(struct mt *t, struct mc_store_uuid from, const char *seg)
{
	struct mc_proto_str names[] = {mc_proto_str_c(seg), mc_proto_str_c("nobody:9")};
	struct mc_store_unreachable_req r = {from, 2, names};

	return mt_call(t, MC_STORE_REPORT_UNREACHABLE, &r);
}

/* The segment names of the last GetReplicaList answer, joined by ','. */
static const char *listed(struct mt *t, char *out, size_t cap)
{
	const struct mc_store_replica_list *l = &t->resp.body.replica_list;
	size_t n = 0;

	out[0] = '\0';
	for (uint32_t i = 0; i < l->n_replicas && n < cap; i++)
		n += (size_t)snprintf(out + n, cap - n, "%s%.*s", i ? "," : "",
				      (int)l->replicas[i].segment_name.len,
				      l->replicas[i].segment_name.ptr);
	return out;
}

/*
 * ReportUnreachable (spec 6.5): a segment a peer could not read is left
 * out of replica lists while the object has another copy, and out of
 * placement, until its owner pings; its own owner's report, unknown names
 * and an object with no other copy change nothing.
 */
static void test_unreachable_segments(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config two = mt_cfg1(), one = mt_cfg1();
	char names[64];

	(void)state;
	two.replica_num = 2;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, 16 * MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000000, 16 * MIB), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CC, "", "k", 1000, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(mt_put_end(t, CC, "k"), MC_OK);
	one.preferred_segment = mc_proto_str_c("a:1");
	assert_int_equal(mt_put_start_cfg(t, CC, "", "only-a", 1000, "", &one, false), MC_OK);
	assert_int_equal(mt_put_end(t, CC, "only-a"), MC_OK);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);

	/* an owner reporting its own segment is not believed */
	assert_int_equal(report(t, CA, "a:1"), MC_OK);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	assert_int_equal(mt_metrics(t).segments_reported_unreachable, 0);

	/* a peer's report: a:1 is no longer listed beside b:1, nor allocated */
	assert_int_equal(report(t, CB, "a:1"), MC_OK);
	assert_int_equal(mt_metrics(t).segments_reported_unreachable, 1);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_string_equal(listed(t, names, sizeof(names)), "b:1");
	assert_int_equal(mt_get(t, "only-a"), MC_OK); /* nothing else to read */
	assert_string_equal(listed(t, names, sizeof(names)), "a:1");
	assert_int_equal(mt_exist(t, "k"), 1);
	assert_int_equal(mt_put_start_cfg(t, CC, "", "k2", 1000, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 1);
	assert_int_equal(t->resp.body.put_start_resp.replicas[0].segment_name.len, 3);
	assert_memory_equal(t->resp.body.put_start_resp.replicas[0].segment_name.ptr, "b:1", 3);
	assert_int_equal(mt_put_end(t, CC, "k2"), MC_OK);
	/* again: counted once */
	assert_int_equal(report(t, CB, "a:1"), MC_OK);
	assert_int_equal(mt_metrics(t).segments_reported_unreachable, 1);

	/* its owner pings: listed and allocated again */
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	assert_int_equal(mt_put_start_cfg(t, CC, "", "k3", 1000, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	mt_free(t);
}

static mc_status report_corrupt(struct mt *t, const char *tenant, const char *key, uint64_t id)
{
	struct mc_store_corrupt_item it[] = {{mc_proto_str_c(key), id},
					     {mc_proto_str_c("no-such-key"), id}};
	struct mc_store_corrupt_req r = {CB, mc_proto_str_c(tenant), 2, it};

	return mt_call(t, MC_STORE_REPORT_CORRUPT, &r);
}

/*
 * ReportCorrupt (corrupt.c): the named replica of the object goes, and
 * only it; an id the object does not have or an unknown key drop
 * nothing; the last replica's going erases the object.
 */
static void test_report_corrupt(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config two = mt_cfg1();
	uint64_t id0, id1;
	char names[64];

	(void)state;
	two.replica_num = 2;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, 16 * MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x10000000, 16 * MIB), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CC, "", "k", 1000, "", &two, false), MC_OK);
	assert_int_equal(mt_put_end(t, CC, "k"), MC_OK);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	id0 = t->resp.body.replica_list.replicas[0].id;
	id1 = t->resp.body.replica_list.replicas[1].id;
	listed(t, names, sizeof(names));
	assert_true(strchr(names, ','));

	/* nothing of these matches */
	assert_int_equal(report_corrupt(t, "", "k", id0 ^ 2), MC_OK);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 0);

	/* the named one goes, the other stays; a repeat changes nothing */
	assert_int_equal(report_corrupt(t, "", "k", id0), MC_OK);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 1);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_int_equal(t->resp.body.replica_list.replicas[0].id, id1);
	assert_int_equal(report_corrupt(t, "", "k", id0), MC_OK);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 1);

	/* the last one: the object goes */
	assert_int_equal(report_corrupt(t, "", "k", id1), MC_OK);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 2);
	assert_int_equal(mt_get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	mt_free(t);
}

/* PutStart or UpsertStart, then End with checksum cksum, by CC. */
static void put_with_cksum(struct mt *t, const char *key, uint64_t len, bool upsert, uint64_t cksum)
{
	struct mc_store_replicate_config one = mt_cfg1();
	struct mc_store_put_end_req end = {.client_id = CC,
					   .replica_type = MC_STORE_REPLICA_ALL,
					   .key = mc_proto_str_c(key),
					   .checksum = {true, cksum}};

	assert_int_equal(mt_put_start_cfg(t, CC, "", key, len, "", &one, upsert), MC_OK);
	assert_int_equal(mt_call(t, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END, &end), MC_OK);
}

/*
 * A reader whose read was torn by an upsert of the same size (which
 * rewrites the block in place) reports the replica it read; the report
 * names the earlier bytes, so it must not drop the replica of the new
 * ones: the listed id changes with the object's checksum.  Before, the
 * id was the block's alone and the acknowledged upsert was dropped (its
 * only replica: the object erased).
 */
static void test_report_after_an_upsert_in_place(void **state)
{
	struct mt *t = mt_new_default();
	uint64_t old_id, new_id, addr;

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, 16 * MIB), MC_OK);
	put_with_cksum(t, "k", 4096, false, 0x1111);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	old_id = t->resp.body.replica_list.replicas[0].id;
	addr = t->resp.body.replica_list.replicas[0].address;
	t->now += 60000; /* past the read's lease */
	put_with_cksum(t, "k", 4096, true, 0x2222);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.replicas[0].address, addr); /* in place */
	new_id = t->resp.body.replica_list.replicas[0].id;
	assert_true(new_id != old_id);
	assert_int_equal(report_corrupt(t, "", "k", old_id), MC_OK);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 0);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	/* a report of the bytes read now still counts */
	assert_int_equal(report_corrupt(t, "", "k", new_id), MC_OK);
	assert_int_equal(mt_metrics(t).replicas_reported_corrupt, 1);
	assert_int_equal(mt_get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	mt_free(t);
}

static mc_status mount_on(struct mt *t, struct mc_store_uuid client, uint64_t id, const char *name,
			  const char *host, uint64_t size)
{
	struct mc_store_mount_req r = {
		client, mt_seg((struct mc_store_uuid){id, id}, name, id << 28, size)};

	r.segment.host_id = mc_proto_str_c(host);
	return mt_call(t, MC_STORE_MOUNT_SEGMENT, &r);
}

/* Where a put of key (len bytes, one replica) from a writer on host lands;
 * the put is revoked again.  "" when the put failed. */
static const char *lands(struct mt *t, const char *key, uint64_t len, const char *host,
			 const char *preferred)
{
	static char seg[32];
	struct mc_store_replicate_config c = mt_cfg1();
	const struct mc_store_replica *r;

	c.host_id = mc_proto_str_c(host);
	c.preferred_segment = mc_proto_str_c(preferred);
	if (mt_put_start_cfg(t, CC, "", key, len, "", &c, false) != MC_OK)
		return "";
	r = mt_first_replica_start(t);
	snprintf(seg, sizeof(seg), "%.*s", (int)r->segment_name.len, r->segment_name.ptr);
	assert_int_equal(mt_revoke(t, CC, key), MC_OK);
	return seg;
}

/*
 * --allocation_strategy=local_first (spec 3.2): one replica goes to the
 * writer's host, spread over its segments by the key's hash; a host with no
 * segment (or a full one) hands over to the next host id, cyclically; an
 * explicit preferred segment still comes first; two replicas are placed
 * as by random, on two names.
 */
static void test_local_first(void **state)
{
	struct mc_master_config cfg;
	struct mc_store_replicate_config two = mt_cfg1();
	struct mt *t;
	bool seen_a1 = false, seen_a2 = false;

	(void)state;
	mt_cfg_init(&cfg);
	assert_true(mc_alloc_strategy_parse("local_first", &cfg.strategy));
	assert_string_equal(mc_alloc_strategy_name(cfg.strategy), "local_first");
	t = mt_new(&cfg);
	assert_int_equal(mount_on(t, CA, 1, "a:2", "hostA", 4 * MIB), MC_OK);
	assert_int_equal(mount_on(t, CA, 2, "a:1", "hostA", 4 * MIB), MC_OK);
	assert_int_equal(mount_on(t, CB, 3, "b:1", "hostB", MIB), MC_OK);
	assert_int_equal(mount_on(t, CC, 4, "c:1", "hostC", 4 * MIB), MC_OK);
	for (int i = 0; i < 32; i++) {
		char k[16];
		const char *seg;

		snprintf(k, sizeof(k), "key-%d", i);
		assert_string_equal(lands(t, k, 4096, "hostB", ""), "b:1");
		seg = lands(t, k, 4096, "hostA", "");
		assert_true(!strcmp(seg, "a:1") || !strcmp(seg, "a:2"));
		seen_a1 |= !strcmp(seg, "a:1");
		seen_a2 |= !strcmp(seg, "a:2");
		/* the same key, the same segment of its host */
		assert_string_equal(lands(t, k, 4096, "hostA", ""), seg);
		/* no segment on the writer's host: the next host id, then around */
		assert_string_equal(lands(t, k, 4096, "hostAB", ""), "b:1");
		assert_int_equal(lands(t, k, 4096, "hostZ", "")[0], 'a');
	}
	assert_true(seen_a1 && seen_a2);
	/* the writer's host cannot hold it: the next host (c, not a) */
	assert_string_equal(lands(t, "big", 2 * MIB, "hostB", ""), "c:1");
	/* an explicit preferred segment comes first */
	assert_string_equal(lands(t, "pref", 4096, "hostA", "c:1"), "c:1");
	/* two replicas: anywhere, on two names */
	two.replica_num = 2;
	two.host_id = mc_proto_str_c("hostB");
	assert_int_equal(mt_put_start_cfg(t, CC, "", "two", 4096, "", &two, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	mt_free(t);
}

/* ---- liveness, unmounts and the sweep ---- */

static void test_liveness_and_unmount(void **state)
{
	struct mt *t = mt_new_liveness();
	struct mc_store_replicate_config c = mt_cfg1();
	struct mc_store_remount_req rr = {CA, 0, NULL};

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	/* an object on A's segment; A writing an object onto B's segment */
	c.preferred_segment = mc_proto_str_c("a:1");
	assert_int_equal(mt_put_start_cfg(t, CB, "", "onA", 100, "", &c, false), MC_OK);
	assert_memory_equal(mt_first_replica_start(t)->segment_name.ptr, "a:1", 3);
	assert_int_equal(mt_put_end(t, CB, "onA"), MC_OK);
	c.preferred_segment = mc_proto_str_c("b:1");
	assert_int_equal(mt_put_start_cfg(t, CA, "", "byA", 100, "", &c, false), MC_OK);
	assert_memory_equal(mt_first_replica_start(t)->segment_name.ptr, "b:1", 3);
	assert_int_equal(mt_metrics(t).allocated_bytes, 200);

	/* B keeps pinging, A goes silent */
	t->now += 6000;
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	t->now += 5000;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_get(t, "onA"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "byA"), MC_ERR_OBJECT_NOT_FOUND);
	{
		struct mc_master_metrics x = mt_metrics(t);

		assert_int_equal(x.allocated_bytes, 0);
		assert_int_equal(x.key_count, 0);
		assert_int_equal(x.active_clients, 1);
		assert_int_equal(x.total_capacity_bytes, MIB);
	}
	assert_int_equal(mt_put_end(t, CA, "byA"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_NEED_REMOUNT);
	assert_int_equal(mt_call(t, MC_STORE_REMOUNT_SEGMENT, &rr), MC_OK);
	assert_int_equal(mt_ping(t, CA), MC_STORE_CLIENT_OK);

	/* explicit unmount: replicas dead at once, in-flight puts fail at End */
	c.preferred_segment = mc_proto_str_c("b:1");
	assert_int_equal(mt_put_start_cfg(t, CA, "", "w", 100, "", &c, false), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "v", 100, "", &c, false), MC_OK);
	assert_int_equal(mt_put_end(t, CA, "v"), MC_OK);
	{
		struct mc_store_unmount_req u = {CB, SB};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK); /* idempotent */
	}
	assert_int_equal(mt_get(t, "v"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_put_end(t, CA, "w"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_metrics(t).key_count, 1); /* "v": absent, erased by the sweep */
	while (mc_master_sweep_pending(t->m))
		mc_master_tick(t->m, t->now);
	assert_int_equal(mt_metrics(t).key_count, 0);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 0);
	assert_int_equal(mt_metrics(t).master_unmount_segment.requests, 2);
	mt_free(t);
}

static bool collect_keys(void *arg, const char *key, size_t len)
{
	char *out = arg;

	strncat(out, key, len);
	strcat(out, ",");
	return true;
}

/*
 * The End rule: an unmount makes replicas dead at once but the sweep that
 * erases the objects left with none runs later (in slices); meanwhile no
 * End may complete such an object and nothing may see it.
 */
static void test_ends_before_the_sweep(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config a = mt_cfg1(), two = mt_cfg1();
	struct mc_store_object_meta items[2] = {{mc_proto_str_c("b1"), {false, 0}},
						{mc_proto_str_c("b2"), {false, 0}}};
	struct mc_store_batch_put_end_req be = {.client_id = CB,
						.replica_type = MC_STORE_REPLICA_ALL,
						.n_items = 2,
						.items = items};
	char keys[256] = "";

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	a.preferred_segment = mc_proto_str_c("a:1");
	two.replica_num = 2;
	/* in flight on a:1: a put, an upsert, one item of a batch */
	assert_int_equal(mt_put_start_cfg(t, CB, "", "p", 100, "", &a, false), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "u", 100, "", &a, true), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "b1", 100, "", &a, false), MC_OK);
	a.preferred_segment = mc_proto_str_c("b:1");
	assert_int_equal(mt_put_start_cfg(t, CB, "", "b2", 100, "", &a, false), MC_OK);
	a.preferred_segment = mc_proto_str_c("a:1");
	/* complete: one on a:1 only, one on both segments */
	assert_int_equal(mt_put_start_cfg(t, CB, "", "c", 100, "", &a, false), MC_OK);
	assert_int_equal(mt_put_end(t, CB, "c"), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "r", 100, "", &a, false), MC_OK);
	assert_int_equal(mt_put_end(t, CB, "r"), MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CB, "", "two", 100, "", &two, false), MC_OK);
	assert_int_equal(mt_put_end(t, CB, "two"), MC_OK);
	{
		struct mc_store_unmount_req u = {CA, SA};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	assert_true(mc_master_sweep_pending(t->m)); /* nothing swept yet */

	/* no End completes an object whose replicas all died */
	assert_int_equal(mt_put_end(t, CB, "p"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "p"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_put_end_t(t, CB, "", "u", true), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_exist(t, "u"), 0);
	assert_int_equal(mt_call(t, MC_STORE_BATCH_PUT_END, &be), MC_OK);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[0], MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(t->resp.body.batch_status_resp.statuses[1], MC_OK);
	assert_int_equal(mt_get(t, "b1"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "b2"), MC_OK);

	/* a complete object left with no replica is absent, not "not ready" */
	assert_int_equal(mt_get(t, "c"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_exist(t, "c"), 0);
	assert_int_equal(mt_rm(t, "r", true), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "b:1", 3);
	mc_master_foreach_key(t->m, NULL, collect_keys, keys);
	assert_true(strstr(keys, "two,") && strstr(keys, "b2,"));
	assert_null(strstr(keys, "c,"));
	assert_int_equal(strlen(keys), strlen("two,b2,"));
	/* and its key can be put again at once */
	assert_int_equal(mt_put_start(t, CB, "c", 50), MC_OK);
	assert_int_equal(mt_put_end(t, CB, "c"), MC_OK);
	assert_int_equal(mt_get(t, "c"), MC_OK);

	/* the sweep erases what is left: "u" and the gone parts of "two" */
	assert_false(mc_master_sweep_run(t->m, 0));
	assert_false(mc_master_sweep_pending(t->m));
	assert_int_equal(mt_metrics(t).key_count, 3); /* two, b2, c */
	assert_int_equal(mt_metrics(t).allocated_bytes, 100 + 100 + 50);
	mt_free(t);
}

/*
 * The sweep in slices: objects on three segments, two of them unmounted
 * at different points of the walk, requests and a table resize between
 * the slices.  Gone objects are absent from the first instant; at the end
 * exactly the objects with a replica on the last segment are left.
 */
#define SW_N 6000

static void test_sweep_in_slices(void **state)
{
	static const char *names[] = {"a:1", "b:1", "c:1"};
	const struct mc_store_uuid clients[3] = {CA, CB, CC}, segids[3] = {SA, SB, SC};
	struct mt *t = mt_new_default();
	uint8_t *where = calloc(SW_N, 1); /* bit s: a replica on segment s */
	uint64_t left = 0, bytes = 0;
	uint32_t slices = 0, ticks = 0, added = 0;
	char k[32];

	(void)state;
	assert_non_null(where);
	for (int s = 0; s < 3; s++)
		assert_int_equal(mt_mount(t, clients[s], segids[s], names[s],
					  0x10000000ull * (s + 1), 64 * MIB),
				 MC_OK);
	for (uint32_t i = 0; i < SW_N; i++) {
		struct mc_store_replicate_config c = mt_cfg1();

		c.preferred_segment = mc_proto_str_c(names[i % 3]);
		c.replica_num = i % 5 == 0 ? 2 : 1;
		snprintf(k, sizeof(k), "k%u", i);
		assert_int_equal(mt_put_start_cfg(t, CA, "", k, 64 + i % 64, "", &c, false), MC_OK);
		for (uint32_t r = 0; r < t->resp.body.put_start_resp.n_replicas; r++)
			where[i] |=
				1u << (t->resp.body.put_start_resp.replicas[r].segment_name.ptr[0] -
				       'a');
		assert_int_equal(mt_put_end(t, CA, k), MC_OK);
	}
	{
		struct mc_store_unmount_req u = {CA, SA};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	while (mc_master_sweep_run(t->m, 1)) {
		uint32_t i = (slices * 7919u) % SW_N;

		slices++;
		/* between slices: gone objects are absent, the others readable */
		snprintf(k, sizeof(k), "k%u", i);
		assert_int_equal(mt_get(t, k), where[i] & 6 ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
		if (slices == 3) {
			/* the second unmount lands in the middle of the walk */
			struct mc_store_unmount_req u = {CB, SB};

			assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
			for (uint32_t j = 0; j < SW_N; j++)
				where[j] &= (uint8_t)~3u;
		}
		if (slices >= 3 && slices < 40) {
			/* puts meanwhile: the table grows under the cursor */
			struct mc_store_replicate_config c = mt_cfg1();

			c.preferred_segment = mc_proto_str_c("c:1");
			for (int n = 0; n < 200; n++, added++) {
				snprintf(k, sizeof(k), "new%u", added);
				assert_int_equal(mt_put_start_cfg(t, CB, "", k, 32, "", &c, false),
						 MC_OK);
				assert_int_equal(mt_put_end(t, CB, k), MC_OK);
			}
		}
		if (slices == 20)
			break; /* the tick drives the rest */
	}
	assert_true(slices >= 3); /* the walk did take several slices */
	while (mc_master_sweep_pending(t->m)) {
		mc_master_tick(t->m, t->now);
		ticks++;
	}
	assert_true(ticks >= 1);
	for (uint32_t i = 0; i < SW_N; i++) {
		snprintf(k, sizeof(k), "k%u", i);
		if (where[i] & 4) {
			assert_int_equal(mt_get(t, k), MC_OK);
			assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
			assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr,
					    "c:1", 3);
			left++;
			bytes += 64 + i % 64;
		} else {
			assert_int_equal(mt_get(t, k), MC_ERR_OBJECT_NOT_FOUND);
		}
	}
	/* nothing gone is left behind, and every byte is accounted for */
	assert_int_equal(mt_metrics(t).key_count, left + added);
	assert_int_equal(mt_metrics(t).allocated_bytes, bytes + 32ull * added);
	free(where);
	mt_free(t);
}

struct key_sum {
	uint64_t n, sum;
};

static bool sum_keys(void *arg, const char *key, size_t len)
{
	struct key_sum *ks = arg;
	char buf[16];

	assert_true(len < sizeof(buf));
	memcpy(buf, key + 1, len - 1);
	buf[len - 1] = '\0';
	ks->n++;
	ks->sum += strtoull(buf, NULL, 10) + 1;
	return true;
}

/* The admin listing walks both tables of a resize in progress as they are:
 * every key once, nothing migrated first. */
static void test_listing_during_a_resize(void **state)
{
	struct mt *t = mt_new_default();
	struct key_sum ks = {0, 0};
	char k[16];
	uint64_t n = 769; /* the 769th object passes 3/4 of 1024 slots */

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, 64 * MIB), MC_OK);
	for (uint64_t i = 0; i < n; i++) {
		snprintf(k, sizeof(k), "k%" PRIu64, i);
		mt_put_ok(t, CA, k, 64);
	}
	mc_master_foreach_key(t->m, NULL, sum_keys, &ks);
	assert_int_equal(ks.n, n);
	assert_int_equal(ks.sum, n * (n + 1) / 2);
	mt_free(t);
}

static bool count_graceful(void *arg, const struct mc_master_segment_info *s)
{
	assert_int_equal(s->status, MC_SEGMENT_GRACEFULLY_UNMOUNTING);
	assert_string_equal(s->name, "b:1");
	assert_int_equal(s->capacity_bytes, MIB);
	assert_int_equal(s->used_bytes, 100);
	assert_int_equal(s->client_id.first, CB.first);
	(*(int *)arg)++;
	return true;
}

static void test_graceful_unmount(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_graceful_unmount_req g = {CA, SB, 5000};

	(void)state;
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	mt_put_ok(t, CA, "k", 100);
	assert_int_equal(mt_call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_ERR_INVALID_PARAMS);
	g.client_id = CB;
	g.segment_id = SC;
	assert_int_equal(mt_call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g),
			 MC_ERR_SEGMENT_NOT_FOUND);
	g.segment_id = SB;
	assert_int_equal(mt_call(t, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &g), MC_OK);
	/* readable, not allocatable */
	assert_int_equal(mt_get(t, "k"), MC_OK);
	assert_int_equal(mt_put_start(t, CA, "k2", 100), MC_ERR_NO_AVAILABLE_HANDLE);
	{
		int n = 0;

		mc_master_foreach_segment(t->m, count_graceful, &n);
		assert_int_equal(n, 1);
	}
	t->now += 4999;
	assert_int_equal(mt_ping(t, CB), MC_STORE_CLIENT_OK);
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_get(t, "k"), MC_OK);
	t->now += 1;
	mc_master_tick(t->m, t->now);
	assert_int_equal(mt_get(t, "k"), MC_ERR_OBJECT_NOT_FOUND);
	assert_int_equal(mt_metrics(t).total_capacity_bytes, 0);
	mt_free(t);
}

static bool seg_order(void *arg, const struct mc_master_segment_info *s)
{
	char *buf = arg;
	size_t n = strlen(buf);

	buf[n] = s->name[0];
	buf[n + 1] = '\0';
	return n + 2 < 16;
}

static void test_multi_replica(void **state)
{
	struct mt *t = mt_new_default();
	struct mc_store_replicate_config c = mt_cfg1();
	const struct mc_proto_str prefs[2] = {mc_proto_str_c("zz:9"), mc_proto_str_c("c:1")};

	(void)state;
	assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
	assert_int_equal(mt_mount(t, CB, SB, "b:1", 0x900000, MIB), MC_OK);
	/* a second segment with the same name: still one target */
	assert_int_equal(mt_mount(t, CB, SC, "b:1", 0x1900000, MIB), MC_OK);
	c.replica_num = 2;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "two", 100, "", &c, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_true(t->resp.body.put_start_resp.replicas[0].segment_name.ptr[0] !=
		    t->resp.body.put_start_resp.replicas[1].segment_name.ptr[0]);
	assert_int_equal(mt_put_end(t, CA, "two"), MC_OK);
	assert_int_equal(mt_get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 2);
	/* best effort: 3 wanted, 2 names */
	c.replica_num = 3;
	assert_int_equal(mt_put_start_cfg(t, CA, "", "three", 100, "", &c, false), MC_OK);
	assert_int_equal(t->resp.body.put_start_resp.n_replicas, 2);
	assert_int_equal(mt_metrics(t).put_start_partial_allocations, 1);
	assert_int_equal(mt_put_end(t, CA, "three"), MC_OK);
	/* preferred list: unknown names dropped */
	c.replica_num = 1;
	c.n_preferred_segments = 2;
	c.preferred_segments = (struct mc_proto_str *)prefs;
	assert_int_equal(mt_mount(t, CC, (struct mc_store_uuid){40, 4}, "c:1", 0x4000000, MIB),
			 MC_OK);
	assert_int_equal(mt_put_start_cfg(t, CA, "", "pref", 100, "", &c, false), MC_OK);
	assert_memory_equal(mt_first_replica_start(t)->segment_name.ptr, "c:1", 3);
	assert_int_equal(mt_put_end(t, CA, "pref"), MC_OK);
	/* same node first */
	{
		struct mc_store_mount_req r = {
			CC, mt_seg((struct mc_store_uuid){50, 5}, "d:1", 0x8000000, MIB)};
		struct mc_store_replicate_config d = mt_cfg1();

		r.segment.host_id = mc_proto_str_c("hostD");
		assert_int_equal(mt_call(t, MC_STORE_MOUNT_SEGMENT, &r), MC_OK);
		d.prefer_alloc_in_same_node = true;
		d.host_id = mc_proto_str_c("hostD");
		for (int i = 0; i < 4; i++) {
			char k[8];

			snprintf(k, sizeof(k), "n%d", i);
			assert_int_equal(mt_put_start_cfg(t, CA, "", k, 8, "", &d, false), MC_OK);
			assert_memory_equal(mt_first_replica_start(t)->segment_name.ptr, "d:1", 3);
			assert_int_equal(mt_revoke(t, CA, k), MC_OK);
		}
	}
	assert_int_equal(mt_metrics(t).allocated_bytes, 500);
	/* unmounting one copy's segment keeps the object readable */
	{
		struct mc_store_unmount_req u = {CA, SA};

		assert_int_equal(mt_call(t, MC_STORE_UNMOUNT_SEGMENT, &u), MC_OK);
	}
	assert_int_equal(mt_get(t, "two"), MC_OK);
	assert_int_equal(t->resp.body.replica_list.n_replicas, 1);
	assert_memory_equal(t->resp.body.replica_list.replicas[0].segment_name.ptr, "b:1", 3);
	{
		char order[16] = "";

		mc_master_foreach_segment(t->m, seg_order, order);
		assert_string_equal(order, "bbcd"); /* mount order, a:1 gone */
		/* a new mount reuses a:1's slot but comes last */
		assert_int_equal(mt_mount(t, CA, SA, "a:1", 0x100000, MIB), MC_OK);
		order[0] = '\0';
		mc_master_foreach_segment(t->m, seg_order, order);
		assert_string_equal(order, "bbcda");
	}
	t->now += 20000;
	assert_int_equal(mt_rm(t, "two", false), MC_OK);
	assert_int_equal(mt_rm(t, "three", false), MC_OK);
	assert_int_equal(mt_rm(t, "pref", false), MC_OK);
	assert_int_equal(mt_metrics(t).allocated_bytes, 0);
	mt_free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping_mount_remount),
		cmocka_unit_test(test_absurd_segments_refused),
		cmocka_unit_test(test_mount_probe_queries_and_refuse),
		cmocka_unit_test(test_unreachable_segments),
		cmocka_unit_test(test_report_corrupt),
		cmocka_unit_test(test_report_after_an_upsert_in_place),
		cmocka_unit_test(test_local_first),
		cmocka_unit_test(test_liveness_and_unmount),
		cmocka_unit_test(test_ends_before_the_sweep),
		cmocka_unit_test(test_sweep_in_slices),
		cmocka_unit_test(test_listing_during_a_resize),
		cmocka_unit_test(test_graceful_unmount),
		cmocka_unit_test(test_multi_replica),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
