/*
 * bench/master_mem_bench.c - master memory per object, and the in-process
 * cost of its hot calls.
 *
 * Puts --objects objects (default 10 M, one replica each, --value-len
 * bytes, keys "bench-key-%010u" = 20 bytes unless --key-len pads them)
 * into one master through mc_master_handle with batched PutStart/PutEnd,
 * and prints the process RSS before and after and the difference per
 * object: that figure includes the object table, the objects and the
 * segment allocator's bookkeeping.  Then it times, through the same
 * decode + handle path the daemon runs, batched ExistKey (keys/s) and
 * single-key GetReplicaList (latency percentiles); network and locking
 * are not included.
 *
 *   master_mem_bench [--objects N] [--batch B] [--value-len L] [--key-len K]
 *                    [--lookups N]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/time.h"
#include "master/master.h"
#include "store/proto.h"

static uint64_t rss_bytes(void)
{
	unsigned long size = 0, resident = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return 0;
	if (fscanf(f, "%lu %lu", &size, &resident) != 2)
		resident = 0;
	fclose(f);
	return (uint64_t)resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static void make_key(char *buf, size_t cap, uint32_t i, unsigned key_len)
{
	int n = snprintf(buf, cap, "bench-key-%010u", i);

	while ((unsigned)n < key_len && (size_t)n + 1 < cap)
		buf[n++] = 'x';
	buf[n] = '\0';
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void die(const char *what, mc_status st)
{
	fprintf(stderr, "%s: %s (%d)\n", what, mc_strerror(st), st);
	exit(1);
}

/* decode frame, handle, release: what the daemon does per request */
static mc_status roundtrip(struct mc_master *m, const struct mc_buf *req, uint64_t now,
			   struct mc_buf *out)
{
	struct mc_store_msg msg;
	mc_status st = mc_store_msg_decode(req->data, req->len, MC_PROTO_MAX_PAYLOAD, &msg);

	if (st != MC_OK)
		die("decode", st);
	st = mc_master_handle(m, &msg, now, out);
	mc_store_msg_release(&msg);
	return st;
}

/* handle a built request that must succeed; the reply is dropped */
static void handle_ok(struct mc_master *m, struct mc_store_msg *msg, uint64_t now,
		      struct mc_buf *out, const char *what)
{
	mc_status st = mc_master_handle(m, msg, now, out);

	if (st != MC_OK)
		die(what, st);
	mc_buf_reset(out);
}

int main(int argc, char **argv)
{
	uint64_t nobj = 10000000, lookups = 2000000;
	uint32_t batch = 1000;
	uint64_t value_len = 1024;
	unsigned key_len = 20;
	struct mc_master_config cfg;
	struct mc_master *m;
	struct mc_buf out, req;
	struct mc_store_put_item *items;
	struct mc_store_object_meta *metas;
	struct mc_proto_str *keys;
	char(*kbuf)[64];
	uint64_t rss0, rss1, t0, t1, worst = 0, now = 1000;
	const struct mc_store_uuid client = {7, 7};
	mc_status st;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--objects") && i + 1 < argc)
			nobj = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = (uint32_t)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--value-len") && i + 1 < argc)
			value_len = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--key-len") && i + 1 < argc)
			key_len = (unsigned)strtoul(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--lookups") && i + 1 < argc)
			lookups = strtoull(argv[++i], NULL, 10);
		else {
			fprintf(stderr,
				"usage: %s [--objects N] [--batch B] [--value-len L] [--key-len K] "
				"[--lookups N]\n",
				argv[0]);
			return 2;
		}
	}
	if (batch == 0 || nobj == 0 || value_len == 0 || key_len > 100 || nobj > UINT32_MAX) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	if (key_len < 20)
		key_len = 20;

	mc_master_config_defaults(&cfg);
	cfg.client_ttl_ms = UINT64_MAX / 4;
	st = mc_master_new(&cfg, &m);
	if (st != MC_OK)
		die("mc_master_new", st);
	mc_buf_init(&out);
	mc_buf_init(&req);
	items = calloc(batch, sizeof(*items));
	metas = calloc(batch, sizeof(*metas));
	keys = calloc(batch, sizeof(*keys));
	kbuf = calloc(batch, sizeof(*kbuf));
	if (!items || !metas || !keys || !kbuf)
		die("calloc", MC_ERR_NOMEM);

	{
		struct mc_store_msg msg;
		uint64_t seg_size = (nobj + 16) * ((value_len + 63) / 64 * 64);

		memset(&msg, 0, sizeof(msg));
		msg.hdr.type = MC_STORE_MOUNT_SEGMENT;
		msg.body.mount_req.client_id = client;
		msg.body.mount_req.segment.id = (struct mc_store_uuid){1, 1};
		msg.body.mount_req.segment.name = mc_proto_str_c("127.0.0.1:12345");
		msg.body.mount_req.segment.base = 1ull << 40;
		msg.body.mount_req.segment.size = seg_size;
		msg.body.mount_req.segment.te_endpoint = mc_proto_str_c("127.0.0.1:12345");
		msg.body.mount_req.segment.protocol = mc_proto_str_c("tcp");
		handle_ok(m, &msg, now, &out, "mount");
	}
	rss0 = rss_bytes();

	t0 = mc_now_ns();
	for (uint64_t done = 0; done < nobj;) {
		uint32_t n = (uint32_t)(nobj - done < batch ? nobj - done : batch);
		struct mc_store_msg msg;
		uint64_t s = mc_now_ns(), e;

		for (uint32_t i = 0; i < n; i++) {
			make_key(kbuf[i], sizeof(kbuf[i]), (uint32_t)(done + i), key_len);
			items[i].key = mc_proto_str_c(kbuf[i]);
			items[i].value_len = value_len;
			metas[i].key = items[i].key;
		}
		memset(&msg, 0, sizeof(msg));
		msg.hdr.type = MC_STORE_BATCH_PUT_START;
		msg.body.batch_put_start_req.client_id = client;
		msg.body.batch_put_start_req.config.replica_num = 1;
		msg.body.batch_put_start_req.n_items = n;
		msg.body.batch_put_start_req.items = items;
		handle_ok(m, &msg, now, &out, "batch put start");
		memset(&msg, 0, sizeof(msg));
		msg.hdr.type = MC_STORE_BATCH_PUT_END;
		msg.body.batch_put_end_req.client_id = client;
		msg.body.batch_put_end_req.replica_type = MC_STORE_REPLICA_ALL;
		msg.body.batch_put_end_req.n_items = n;
		msg.body.batch_put_end_req.items = metas;
		handle_ok(m, &msg, now, &out, "batch put end");
		e = mc_now_ns();
		if (e - s > worst)
			worst = e - s;
		done += n;
	}
	t1 = mc_now_ns();
	rss1 = rss_bytes();
	{
		struct mc_master_metrics x;

		mc_master_metrics(m, &x);
		if (x.key_count != nobj) {
			fprintf(stderr, "expected %" PRIu64 " keys, master has %" PRIu64 "\n", nobj,
				x.key_count);
			return 1;
		}
	}
	printf("objects            %" PRIu64 " (key %u B, value %" PRIu64 " B, 1 replica)\n", nobj,
	       key_len, value_len);
	printf("rss before         %.1f MiB\n", rss0 / 1048576.0);
	printf("rss after          %.1f MiB\n", rss1 / 1048576.0);
	printf("bytes per object   %.1f\n", (double)(rss1 - rss0) / (double)nobj);
	{
		struct mc_master_mem_usage u;
		double n = (double)nobj, rec, known;

		mc_master_mem_usage(m, &u);
		rec = (double)u.record_heap / n;
		known = (double)(u.record_heap + u.ext_heap + u.table_bytes + u.alloc_meta) / n;
		printf("  object records   %.1f (header %.1f, key %.1f, malloc's header and "
		       "rounding %.1f)\n",
		       rec, (double)u.header_bytes / n, (double)u.key_bytes / n,
		       rec - (double)(u.header_bytes + u.key_bytes) / n);
		printf("  more replicas    %.1f (further replicas, checksums)\n",
		       (double)u.ext_heap / n);
		printf("  object table     %.1f (%.2f slots per object)\n",
		       (double)u.table_bytes / n,
		       (double)u.table_bytes / (double)sizeof(uint64_t) / n);
		printf("  allocator        %.1f (the segment's block records)\n",
		       (double)u.alloc_meta / n);
		printf("  the rest         %.1f (RSS not in the above: heap free lists, "
		       "request buffers)\n",
		       (double)(rss1 - rss0) / n - known);
	}
	printf("put rate           %.0f objects/s (batches of %u; slowest batch %.1f ms)\n",
	       nobj / ((t1 - t0) / 1e9), batch, worst / 1e6);

	/* batched ExistKey: frames encoded up front (client work), then the
	 * daemon's part, decode + handle, is timed */
	{
		enum { NFRAMES = 64 };
		struct mc_buf frames[NFRAMES];
		struct mc_store_keys_req kr = {mc_proto_str_c(""), batch, keys, {false, 0}};
		uint64_t nk = 0, seed = 1;

		for (int f = 0; f < NFRAMES; f++) {
			for (uint32_t i = 0; i < batch; i++) {
				seed = seed * 6364136223846793005ull + 1442695040888963407ull;
				make_key(kbuf[i], sizeof(kbuf[i]), (uint32_t)((seed >> 33) % nobj),
					 key_len);
				keys[i] = mc_proto_str_c(kbuf[i]);
			}
			mc_buf_init(&frames[f]);
			st = mc_store_batch_exist_key_request_encode(&frames[f], 1, &kr);
			if (st != MC_OK)
				die("encode", st);
		}
		t0 = mc_now_ns();
		for (int f = 0; nk < lookups; f = (f + 1) % NFRAMES) {
			st = roundtrip(m, &frames[f], now, &out);
			if (st != MC_OK)
				die("batch exist", st);
			mc_buf_reset(&out);
			nk += batch;
		}
		t1 = mc_now_ns();
		printf("batch exist        %.2f M keys/s (batches of %u, random keys, "
		       "decode + handle + response encode)\n",
		       nk / ((t1 - t0) / 1e3), batch);
		for (int f = 0; f < NFRAMES; f++)
			mc_buf_release(&frames[f]);
	}

	/* single-key GetReplicaList latency: decode + handle + response encode */
	{
		uint64_t n = lookups / 10 ? lookups / 10 : 1, seed = 2;
		uint64_t *lat = calloc(n, sizeof(uint64_t));

		if (!lat)
			die("calloc", MC_ERR_NOMEM);
		for (uint64_t i = 0; i < n; i++) {
			struct mc_store_key_req kr;
			uint64_t s;

			seed = seed * 6364136223846793005ull + 1442695040888963407ull;
			make_key(kbuf[0], sizeof(kbuf[0]), (uint32_t)((seed >> 33) % nobj),
				 key_len);
			kr.tenant = mc_proto_str_c("");
			kr.key = mc_proto_str_c(kbuf[0]);
			mc_buf_reset(&req);
			st = mc_store_get_replica_list_request_encode(&req, 1, &kr);
			if (st != MC_OK)
				die("encode", st);
			s = mc_now_ns();
			st = roundtrip(m, &req, now, &out);
			lat[i] = mc_now_ns() - s;
			if (st != MC_OK)
				die("get", st);
			mc_buf_reset(&out);
		}
		qsort(lat, n, sizeof(uint64_t), cmp_u64);
		printf("get (1 key)        p50 %.2f us, p99 %.2f us, p99.9 %.2f us, max %.1f us "
		       "(%" PRIu64 " calls)\n",
		       lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, lat[n * 999 / 1000] / 1e3,
		       lat[n - 1] / 1e3, n);
		free(lat);
	}
	/* an unmount sweeps the whole table once (dead replicas dropped) */
	{
		struct mc_store_msg msg;

		memset(&msg, 0, sizeof(msg));
		msg.hdr.type = MC_STORE_MOUNT_SEGMENT;
		msg.body.mount_req.client_id = client;
		msg.body.mount_req.segment.id = (struct mc_store_uuid){2, 2};
		msg.body.mount_req.segment.name = mc_proto_str_c("127.0.0.1:23456");
		msg.body.mount_req.segment.base = 1ull << 20;
		msg.body.mount_req.segment.size = 1ull << 20;
		handle_ok(m, &msg, now, &out, "mount");
		memset(&msg, 0, sizeof(msg));
		msg.hdr.type = MC_STORE_UNMOUNT_SEGMENT;
		msg.body.unmount_req.client_id = client;
		msg.body.unmount_req.segment_id = (struct mc_store_uuid){2, 2};
		t0 = mc_now_ns();
		st = mc_master_handle(m, &msg, now, &out);
		t1 = mc_now_ns();
		if (st != MC_OK)
			die("unmount", st);
		mc_buf_reset(&out);
		printf("unmount sweep      %.0f ms\n", (t1 - t0) / 1e6);
	}
	/* teardown time is part of the story too */
	t0 = mc_now_ns();
	mc_master_free(m);
	t1 = mc_now_ns();
	printf("free               %.0f ms\n", (t1 - t0) / 1e6);
	mc_buf_release(&out);
	mc_buf_release(&req);
	free(items);
	free(metas);
	free(keys);
	free(kbuf);
	return 0;
}
