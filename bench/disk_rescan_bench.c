/*
 * bench/disk_rescan_bench.c - restart recovery of the SSD tier's disk store
 * (store/disk_store.h): how many objects per second a client re-indexes
 * when it opens an offload directory that holds N objects.
 *
 *   disk_rescan_bench [--objects N] [--value BYTES] [--runs R] [--dir DIR] [--keep]
 *
 * Writes N objects (default 100,000 of 16 bytes, in buckets of the default
 * 500 keys) into a fresh directory under DIR (default /tmp), closes the
 * store, then opens it R times (default 5) and prints one line per run and
 * the median:  disk_rescan objects=N buckets=B run=i ms=T objects_per_s=X.
 * The page cache is warm (the figures are the index work, not the device);
 * --keep leaves the directory.  --quick: 10,000 objects, 2 runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "store/disk_store.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t objects = 100000, value = 16, runs = 5, us[64];
	const char *base = "/tmp";
	struct mc_disk_store_config cfg;
	struct mc_disk_store_stats st;
	struct mc_disk_store *ds;
	struct mc_disk_obj *o;
	char dir[512], cmd[600], (*keys)[32];
	char *val;
	bool keep = false;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--objects") && i + 1 < argc)
			objects = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--value") && i + 1 < argc)
			value = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = strtoull(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
			base = argv[++i];
		else if (!strcmp(argv[i], "--keep"))
			keep = true;
		else if (!strcmp(argv[i], "--quick")) {
			objects = 10000;
			runs = 2;
		} else {
			fprintf(stderr,
				"usage: %s [--objects N] [--value BYTES] [--runs R] "
				"[--dir DIR] [--keep] [--quick]\n",
				argv[0]);
			return 2;
		}
	}
	if (runs == 0 || runs > 64 || objects == 0) {
		fprintf(stderr, "runs must be 1..64, objects at least 1\n");
		return 2;
	}
	snprintf(dir, sizeof(dir), "%s/mc-rescan-XXXXXX", base);
	if (!mkdtemp(dir)) {
		perror(dir);
		return 1;
	}
	mc_disk_store_config_init(&cfg);
	free(cfg.path);
	cfg.path = strdup(dir);
	cfg.max_total_size = 0;
	if (mc_disk_store_open(&cfg, &ds) != MC_OK) {
		fprintf(stderr, "open: %s\n", mc_last_error());
		return 1;
	}
	o = calloc(500, sizeof(*o));
	keys = calloc(500, sizeof(*keys));
	val = calloc(1, value ? value : 1);
	memset(val, 'v', value);
	for (uint64_t i = 0; i < objects; i += 500) {
		size_t n = objects - i < 500 ? (size_t)(objects - i) : 500;
		for (size_t j = 0; j < n; j++) {
			snprintf(keys[j], sizeof(keys[j]), "bench/object/%012llu",
				 (unsigned long long)(i + j));
			o[j] = (struct mc_disk_obj){keys[j], strlen(keys[j]), val, value, MC_OK};
		}
		if (mc_disk_store_put(ds, o, n, NULL) != MC_OK) {
			fprintf(stderr, "put: %s\n", mc_last_error());
			return 1;
		}
	}
	mc_disk_store_close(ds);
	for (uint64_t r = 0; r < runs; r++) {
		if (mc_disk_store_open(&cfg, &ds) != MC_OK) {
			fprintf(stderr, "open: %s\n", mc_last_error());
			return 1;
		}
		mc_disk_store_stats(ds, &st);
		mc_disk_store_close(ds);
		if (st.rescan_objects != objects) {
			fprintf(stderr, "rescan found %llu of %llu objects\n",
				(unsigned long long)st.rescan_objects, (unsigned long long)objects);
			return 1;
		}
		us[r] = st.rescan_us ? st.rescan_us : 1;
		printf("disk_rescan objects=%llu buckets=%llu run=%llu ms=%.1f objects_per_s=%.0f\n",
		       (unsigned long long)objects, (unsigned long long)st.buckets,
		       (unsigned long long)r, (double)us[r] / 1e3,
		       (double)objects * 1e6 / (double)us[r]);
	}
	qsort(us, runs, sizeof(us[0]), cmp_u64);
	printf("disk_rescan objects=%llu median_ms=%.1f median_objects_per_s=%.0f dir=%s\n",
	       (unsigned long long)objects, (double)us[runs / 2] / 1e3,
	       (double)objects * 1e6 / (double)us[runs / 2], base);
	mc_disk_store_config_release(&cfg);
	free(o);
	free(keys);
	free(val);
	if (!keep) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", dir);
	}
	return 0;
}
