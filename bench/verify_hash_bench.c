/*
 * verify_hash_bench - what checking an object costs the CPU, beside the
 * copy it guards (issue 16 part 1; store/client_verify.c).
 *
 * For each size (1 MiB and 4 MiB), objects laid out over a --window of
 * memory (256 MiB by default, far beyond the caches, as a store's
 * segment is) are, in alternating rounds in the same run:
 *   memcpy   copied into a destination buffer (the reference: what a read
 *            of the object from this client's own segment costs);
 *   hash     hashed with XXH3-64 as the client does it (mc_store_io_hash:
 *            Debian libxxhash's dispatch, AVX2/AVX-512 where present);
 *   copy+hash copied and checked as an own-segment read to be checked is
 *            (mc_store_verify_copy: 64 KiB pieces, each hashed after copying).
 * Prints GB/s medians over --runs rounds and hash/memcpy and
 * (copy+hash)/memcpy time ratios.
 *
 *   verify_hash_bench [--window=MiB] [--runs=N]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "store/client_int.h"
#include "store/client_metrics.h"

static double now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_d);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { MEMCPY, HASH, COPYHASH, NKIND };

int main(int argc, char **argv)
{
	size_t window = 256u << 20;
	int runs = 9;
	static const size_t sizes[] = {1u << 20, 4u << 20};
	static const char *const names[NKIND] = {"memcpy", "hash", "copy+hash"};
	struct mc_client_metrics metrics;
	struct mc_store s;
	char *win, *dst;
	volatile uint64_t sink = 0;

	for (int i = 1; i < argc; i++) {
		if (strncmp(argv[i], "--window=", 9) == 0)
			window = strtoull(argv[i] + 9, NULL, 10) << 20;
		else if (strncmp(argv[i], "--runs=", 7) == 0)
			runs = atoi(argv[i] + 7);
		else {
			fprintf(stderr, "usage: %s [--window=MiB] [--runs=N]\n", argv[0]);
			return 2;
		}
	}
	if (runs < 1 || runs > 1000 || window < (8u << 20))
		return 2;
	win = malloc(window);
	dst = malloc(4u << 20);
	if (!win || !dst)
		return 1;
	for (size_t i = 0; i < window; i++)
		win[i] = (char)(i * 2654435761u >> 13);
	memset(dst, 0, 4u << 20);
	memset(&s, 0, sizeof(s));
	memset(&metrics, 0, sizeof(metrics));
	s.metrics = &metrics;
	s.verify = true;
	printf("window=%zu MiB runs=%d (medians; objects walk the window)\n", window >> 20, runs);
	printf("%-8s %-10s %9s %12s\n", "size", "kind", "GB/s", "time/memcpy");
	for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		size_t size = sizes[z], nobj = window / size;
		double gbps[NKIND][1000], med[NKIND];
		uint64_t *want = malloc(nobj * sizeof(*want));

		if (!want)
			return 1;
		for (size_t o = 0; o < nobj; o++) { /* what each object must hash to */
			void *b[1] = {win + o * size};
			size_t l[1] = {size};
			struct mc_store_io io = {.bufs = b, .lens = l, .nbufs = 1, .len = size};

			want[o] = mc_store_io_hash(&io);
		}

		for (int r = 0; r < runs; r++) {
			for (int k0 = 0; k0 < NKIND; k0++) {
				int k = (k0 + r) % NKIND; /* rotate the order every round */
				double t0 = now_s();

				for (size_t o = 0; o < nobj; o++) {
					void *bufs[1] = {dst};
					size_t lens[1] = {size};
					struct mc_store_io io = {.bufs = bufs,
								 .lens = lens,
								 .nbufs = 1,
								 .len = size,
								 .check = true,
								 .status = MC_OK};
					const char *src = win + o * size;

					if (k == MEMCPY) {
						memcpy(dst, src, size);
						sink += (uint8_t)dst[o % size];
					} else if (k == HASH) {
						bufs[0] = (void *)src;
						sink += mc_store_io_hash(&io);
					} else {
						io.cksum = want[o];
						if (mc_store_verify_copy(&s, &io, src) != MC_OK)
							return 1;
					}
				}
				gbps[k][r] = (double)(nobj * size) / (now_s() - t0) / 1e9;
			}
		}
		free(want);
		for (int k = 0; k < NKIND; k++)
			med[k] = median(gbps[k], runs);
		for (int k = 0; k < NKIND; k++)
			printf("%-8zu %-10s %9.2f %12.2f\n", size >> 20 << 20, names[k], med[k],
			       med[MEMCPY] / med[k]);
	}
	(void)sink;
	free(win);
	free(dst);
	return 0;
}
