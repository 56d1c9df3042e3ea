/*
 * store_bench - Mooncake Store throughput and metadata latency, in the
 * spirit of valkey-benchmark, over the public API only (<mooncake/store.h>).
 *
 * Two processes on one machine.  A "holder" contributes a global segment
 * (--segment, default 2 GiB, mapped lazily) and serves it; a "client"
 * (no segment of its own) puts and gets objects whose single replica is
 * placed on the holder (preferred_segment = the holder's hostname), so
 * every byte crosses the Transfer Engine's TCP transport, and measures:
 *
 *   put_from / get_into   zero-copy, one key per call, registered buffers
 *   put / get             upstream's copy-based calls, from and into
 *                         unregistered memory (nothing stages through a
 *                         local buffer; get returns a malloc'ed buffer,
 *                         freed after the check)
 *   batch_put_from / batch_get_into
 *                         --batch keys per call
 *   put_batch / batch_get (--cases=batchcopy, not in the default set)
 *                         the copy-based batch calls, --batch keys per
 *                         call, from and into unregistered memory
 *   mt_put_from / mt_get_into
 *                         --threads threads, one key per call each, phases
 *                         synchronised by a barrier
 *   range_put_from / get_range  (--cases=range, not in the default set)
 *                         zero-copy puts, then get_into_ranges of one
 *                         --range-len range per object (default 64 KiB)
 *                         at offset size / 3 + 100, an unaligned place;
 *                         GB/s counts the range's bytes (with verification
 *                         on, the reader reads the 256 KiB chunks it
 *                         touches and checks them)
 *   put_from_cold, put_from_warm  (--cases=cold, not in the default set)
 *                         one window put into a freshly started holder's
 *                         segment at once, then again into the memory
 *                         that fill touched (MC_STORE_PREFAULT applies)
 *   exist, batch_exist, replica_desc
 *                         metadata calls at batch 1 and --meta-keys keys
 *                         (run first)
 *
 * Data cases run for every --sizes entry (default 1 MiB and 4 MiB).  A
 * round puts a window of keys (--window bytes per thread, default 64 MiB,
 * from as many distinct buffers), reads them back (the first 8 bytes of
 * each object carry its round and index and are checked), then removes
 * them with one forced batch remove, so the pool never fills; rounds repeat
 * for --duration seconds.  --get-rounds=N reads the window N times per put
 * (the zc, copy, batch and batchcopy cases): gets of keys read before, as
 * redis-benchmark's GETs are, which MC_STORE_LOCATION_CACHE serves
 * without the master.  Throughput = bytes / time spent in the timed
 * calls (phase wall time for the threaded case); latency percentiles are
 * per call.  Every case runs --runs times and the median is reported.
 *
 *   store_bench [--master H:P] [--metadata URI] [--target HOSTNAME] ...
 *
 * Without --target the client starts its own holder (this program with
 * --mode=holder, same master and metadata) and stops it at the end.
 * Output: one line per case, "case=<name> size=<B> batch=<n> threads=<n>
 * GB/s=<median> ..." (metadata cases: "ops/s", "keys/s", "p50_us",
 * "p99_us"), or one JSON object per line with --json.  --quick makes one
 * short run per case (smoke test).
 *
 * Same-host engines may move bytes through the same-host transport rather
 * than TCP; run with MC_SHM_DISABLE=1 in the environment (the holder
 * inherits it) to measure TCP, as bench/store_compare.py does.
 *
 * --mode=agg is one client of bench/store_aggregate.py's many: no segment,
 * a window of --window bytes of --sizes[0] objects (registered), all put
 * to the holder --target names, driven from stdin so that the driver can
 * start the same phase in every client at once.  It prints "READY keys=N
 * size=B" and answers each line with one line:
 *
 *   put      put_from every key of the window -> OK bytes=B t0=S t1=S p99_us=X
 *   putb     batch_put_from of --batch keys per call, the same keys -> the same
 *   get      get_into every key (data checked) -> the same
 *   getb     batch_get_into of --batch keys per call (data checked as the
 *            batch case checks it) -> the same
 *   remove   one forced batch remove, next round's keys -> OK
 *   quit     (or end of input) exit
 *
 * t0 and t1 are CLOCK_MONOTONIC seconds around the phase, comparable
 * between processes on one host.
 *
 * Exit status: 0 success, 1 a store call failed or data did not verify,
 * 2 bad flags.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/store.h>

#define PROG "store_bench"
#include "bench_util.h"

#define MAX_SIZES   8
#define MAX_THREADS 16
#define KEY_LEN	    64

static struct options {
	const char *mode; /* client | holder */
	const char *master;
	const char *metadata;
	const char *host;
	const char *target;
	uint64_t segment;
	uint64_t window;
	uint64_t range_len;
	uint64_t sizes[MAX_SIZES];
	int nsizes;
	int runs;
	double duration;
	int batch;
	int threads;
	int meta_keys;
	int get_rounds; /* get phases per put phase (data cases but mt, range) */
	const char *cases;
	bool json;
	bool quick;
} opt = {
	.mode = "client",
	.master = "127.0.0.1:50051",
	.metadata = "http://127.0.0.1:8080/metadata",
	.host = "127.0.0.1",
	.segment = 2ull << 30,
	.window = 64ull << 20,
	.range_len = 64u << 10,
	.sizes = {1u << 20, 4u << 20},
	.nsizes = 2,
	.runs = 5,
	.duration = 2.0,
	.batch = 8,
	.threads = 2,
	.meta_keys = 1000,
	.get_rounds = 1,
	.cases = "zc,copy,batch,mt,meta",
};

static struct mc_store *store;
static volatile sig_atomic_t stop_signal;

static void check(int64_t st, const char *what, const char *key)
{
	if (st < 0)
		die("%s(%s): %s (%" PRId64 "): %s", what, key ? key : "",
		    mc_status_name((mc_status)st), st, mc_last_error());
}

static bool case_on(const char *name)
{
	size_t n = strlen(name);

	for (const char *p = opt.cases; (p = strstr(p, name)); p += n)
		if ((p == opt.cases || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

/* ------------------------------------------------------------------------ */
/* Samples and statistics                                                    */

struct samples {
	double *v;
	size_t n, cap;
};

static void sample_add(struct samples *s, double x)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 4096;
		s->v = realloc(s->v, s->cap * sizeof(*s->v));
		if (!s->v)
			die("out of memory");
	}
	s->v[s->n++] = x;
}

/* p in [0, 100] of the samples (sorted in place); 0 if none. */
static double percentile(struct samples *s, double p)
{
	size_t i;

	if (!s->n)
		return 0;
	qsort(s->v, s->n, sizeof(*s->v), cmp_double);
	i = (size_t)ceil(p / 100.0 * (double)s->n);
	return s->v[i ? i - 1 : 0];
}

/* One run's figures of a data case. */
struct xfer_result {
	double put_gbs, get_gbs;
	double put_p50, put_p99, get_p50, get_p99; /* us per call */
	/* this process's CPU time (calling thread and engine workers) per GB
	 * and minor page faults per MiB moved; 0: not measured (steadier
	 * than GB/s on a loaded host; the holder is not counted) */
	double put_cpu, get_cpu, put_flt, get_flt;
};

/* This process's CPU seconds and minor faults so far. */
static void usage_now(double *cpu, double *flt)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
	       ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
	*flt = (double)ru.ru_minflt;
}

/* ------------------------------------------------------------------------ */
/* Data cases                                                                */

enum xfer_kind { X_ZC, X_COPY, X_BATCH, X_BATCH_COPY, X_RANGE };

static bool kind_batched(enum xfer_kind k)
{
	return k == X_BATCH || k == X_BATCH_COPY;
}

/* The zero-copy kinds put from and get into registered buffers. */
static bool kind_registered(enum xfer_kind k)
{
	return k == X_ZC || k == X_BATCH || k == X_RANGE;
}

/* The range a --cases=range read asks of an object of size bytes. */
static void range_of(size_t size, uint64_t *off, uint64_t *len)
{
	*off = size / 3 + 100;
	*len = opt.range_len < size - *off ? opt.range_len : size - *off;
}

struct window {
	size_t n;	/* keys per round */
	size_t size;	/* object size */
	uint8_t **bufs; /* n distinct source/destination buffers */
	char (*keys)[KEY_LEN];
	const char **keyp;
};

static struct mc_store_config place_cfg(void)
{
	struct mc_store_config c = {.replica_num = 1, .preferred_segment = opt.target};

	return c;
}

static void stamp(uint8_t *p, uint64_t tag)
{
	memcpy(p, &tag, sizeof(tag));
}

static bool stamped(const uint8_t *p, uint64_t tag)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v == tag;
}

static uint64_t tag_of(unsigned tid, uint64_t round, size_t i)
{
	return ((uint64_t)tid << 56) ^ (round << 24) ^ i;
}

/* A region for n buffers of size bytes, registered for zero-copy calls. */
static void window_init(struct window *w, size_t size, size_t n, bool zc)
{
	uint8_t *base;

	w->n = n;
	w->size = size;
	w->bufs = calloc(n, sizeof(*w->bufs));
	w->keys = calloc(n, sizeof(*w->keys));
	w->keyp = calloc(n, sizeof(*w->keyp));
	if (!w->bufs || !w->keys || !w->keyp)
		die("out of memory");
	base = mmap(NULL, n * size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		die("mmap %zu bytes: %s", n * size, strerror(errno));
	madvise(base, n * size, MADV_HUGEPAGE);
	for (size_t i = 0; i < n * size; i += 8)
		base[i] = (uint8_t)(i * 131 + 7); /* touch and fill */
	for (size_t i = 0; i < n; i++) {
		w->bufs[i] = base + i * size;
		w->keyp[i] = w->keys[i];
	}
	if (zc)
		check(mc_store_register_buffer(store, base, n * size), "register_buffer", NULL);
}

static void window_release(struct window *w, bool zc)
{
	if (zc)
		mc_store_unregister_buffer(store, w->bufs[0]);
	munmap(w->bufs[0], w->n * w->size);
	free(w->bufs);
	free(w->keys);
	free(w->keyp);
}

static void window_keys(struct window *w, unsigned tid, uint64_t round)
{
	for (size_t i = 0; i < w->n; i++) {
		snprintf(w->keys[i], KEY_LEN, "sb-%d-%u-%" PRIu64 "-%zu", (int)getpid(), tid, round,
			 i);
		stamp(w->bufs[i], tag_of(tid, round, i));
	}
}

static void window_remove(struct window *w)
{
	mc_status *res = calloc(w->n, sizeof(*res));

	if (!res)
		die("out of memory");
	check(mc_store_batch_remove(store, w->keyp, w->n, true, res), "batch_remove", NULL);
	free(res);
}

/* n copies of size in a malloc'ed array (the lengths of a batch call). */
static size_t *sizes_of(size_t n, size_t size)
{
	size_t *v = malloc(n * sizeof(*v));

	if (!v)
		die("out of memory");
	for (size_t i = 0; i < n; i++)
		v[i] = size;
	return v;
}

/* Put phase of one round; per-call latencies into lat (us). */
static void put_phase(enum xfer_kind k, struct window *w, struct samples *lat)
{
	struct mc_store_config cfg = place_cfg();

	if (kind_batched(k)) {
		size_t b = (size_t)opt.batch;
		size_t *lens = sizes_of(b, w->size);
		mc_status *res = calloc(b, sizeof(*res));

		if (!res)
			die("out of memory");
		for (size_t i = 0; i + b <= w->n; i += b) {
			double t0 = now_s();
			mc_status st =
				k == X_BATCH
					? mc_store_batch_put_from(store, w->keyp + i,
								  (void *const *)(w->bufs + i),
								  lens, b, &cfg, res)
					: mc_store_put_batch(store, w->keyp + i,
							     (const void *const *)(w->bufs + i),
							     lens, b, &cfg, res);

			sample_add(lat, (now_s() - t0) * 1e6);
			check(st, k == X_BATCH ? "batch_put_from" : "put_batch", w->keyp[i]);
		}
		free(lens);
		free(res);
		return;
	}
	for (size_t i = 0; i < w->n; i++) {
		double t0 = now_s();
		mc_status st =
			k == X_ZC ? mc_store_put_from(store, w->keyp[i], w->bufs[i], w->size, &cfg)
				  : mc_store_put(store, w->keyp[i], w->bufs[i], w->size, &cfg);

		sample_add(lat, (now_s() - t0) * 1e6);
		check(st, k == X_ZC ? "put_from" : "put", w->keyp[i]);
	}
}

static void get_phase(enum xfer_kind k, struct window *w, unsigned tid, uint64_t round,
		      struct samples *lat)
{
	if (k == X_BATCH) {
		size_t b = (size_t)opt.batch;
		size_t *caps = sizes_of(b, w->size);
		int64_t *res = calloc(b, sizeof(*res));

		if (!res)
			die("out of memory");
		for (size_t i = 0; i + b <= w->n; i += b) {
			double t0 = now_s();
			mc_status st;

			memset(w->bufs[i], 0, 8);
			st = mc_store_batch_get_into(store, w->keyp + i,
						     (void *const *)(w->bufs + i), caps, b, res);
			sample_add(lat, (now_s() - t0) * 1e6);
			check(st, "batch_get_into", w->keyp[i]);
			for (size_t j = 0; j < b; j++)
				if (res[j] != (int64_t)w->size)
					die("batch_get_into(%s): %" PRId64, w->keyp[i + j], res[j]);
			if (!stamped(w->bufs[i], tag_of(tid, round, i)))
				die("batch_get_into(%s): wrong data", w->keyp[i]);
		}
		free(caps);
		free(res);
		return;
	}
	if (k == X_RANGE) {
		for (size_t i = 0; i < w->n; i++) {
			struct mc_store_range rg;
			struct mc_store_range_read rr = {w->keyp[i], w->bufs[i], &rg, 1, NULL};
			int64_t got = 0;
			uint64_t want;
			double t0;

			range_of(w->size, &rg.src_offset, &rg.length);
			rg.dst_offset = rg.src_offset; /* where the put took it from */
			rr.results = &got;
			memcpy(&want, w->bufs[i] + rg.src_offset, 8);
			memset(w->bufs[i] + rg.src_offset, 0, 8);
			t0 = now_s();
			check(mc_store_get_into_ranges(store, &rr, 1), "get_into_ranges",
			      w->keyp[i]);
			sample_add(lat, (now_s() - t0) * 1e6);
			if (got != (int64_t)rg.length ||
			    memcmp(&want, w->bufs[i] + rg.src_offset, 8))
				die("get_into_ranges(%s): wrong size or data", w->keyp[i]);
		}
		return;
	}
	if (k == X_BATCH_COPY) {
		size_t b = (size_t)opt.batch;
		void **vals = calloc(b, sizeof(*vals));
		int64_t *res = calloc(b, sizeof(*res));

		if (!vals || !res)
			die("out of memory");
		for (size_t i = 0; i + b <= w->n; i += b) {
			double t0 = now_s();
			mc_status st = mc_store_batch_get(store, w->keyp + i, b, vals, res);

			sample_add(lat, (now_s() - t0) * 1e6);
			check(st, "batch_get", w->keyp[i]);
			for (size_t j = 0; j < b; j++) {
				if (res[j] != (int64_t)w->size ||
				    !stamped(vals[j], tag_of(tid, round, i + j)))
					die("batch_get(%s): wrong size or data", w->keyp[i + j]);
				free(vals[j]);
			}
		}
		free(vals);
		free(res);
		return;
	}
	for (size_t i = 0; i < w->n; i++) {
		double t0 = now_s();
		void *v = NULL;
		int64_t n;

		if (k == X_ZC) {
			memset(w->bufs[i], 0, 8);
			n = mc_store_get_into(store, w->keyp[i], w->bufs[i], w->size);
			v = w->bufs[i];
		} else {
			n = mc_store_get(store, w->keyp[i], &v);
		}
		sample_add(lat, (now_s() - t0) * 1e6);
		check(n, k == X_ZC ? "get_into" : "get", w->keyp[i]);
		if (n != (int64_t)w->size || !stamped(v, tag_of(tid, round, i)))
			die("%s(%s): wrong size or data", k == X_ZC ? "get_into" : "get",
			    w->keyp[i]);
		if (k != X_ZC)
			free(v);
	}
}

static size_t window_count(size_t size, size_t unit)
{
	size_t n = opt.window / size;

	if (n < unit)
		n = unit;
	return n / unit * unit;
}

static struct xfer_result run_single(enum xfer_kind k, size_t size)
{
	struct window w;
	struct samples pl = {0}, gl = {0};
	double put_t = 0, get_t = 0, t_end, c0, f0, c1, f1;
	double put_c = 0, get_c = 0, put_f = 0, get_f = 0;
	uint64_t bytes = 0, got = 0, roff, rlen;
	struct xfer_result r;
	static uint64_t round;

	range_of(size, &roff, &rlen);

	window_init(&w, size, window_count(size, kind_batched(k) ? (size_t)opt.batch : 1),
		    kind_registered(k));
	t_end = now_s() + opt.duration;
	do {
		double t0;

		window_keys(&w, 0, ++round);
		usage_now(&c0, &f0);
		t0 = now_s();
		put_phase(k, &w, &pl);
		put_t += now_s() - t0;
		usage_now(&c1, &f1);
		put_c += c1 - c0;
		put_f += f1 - f0;
		for (int g = 0; g < opt.get_rounds; g++) {
			usage_now(&c0, &f0);
			t0 = now_s();
			get_phase(k, &w, 0, round, &gl);
			get_t += now_s() - t0;
			usage_now(&c1, &f1);
			get_c += c1 - c0;
			get_f += f1 - f0;
			got += w.n * (k == X_RANGE ? rlen : size);
		}
		bytes += w.n * size;
		window_remove(&w);
	} while (now_s() < t_end && !stop_signal);
	r.put_gbs = (double)bytes / put_t / 1e9;
	r.get_gbs = (double)got / get_t / 1e9;
	r.put_cpu = put_c * 1e3 / ((double)bytes / 1e9);
	r.get_cpu = get_c * 1e3 / ((double)got / 1e9);
	r.put_flt = put_f / ((double)bytes / (1 << 20));
	r.get_flt = get_f / ((double)got / (1 << 20));
	r.put_p50 = percentile(&pl, 50);
	r.put_p99 = percentile(&pl, 99);
	r.get_p50 = percentile(&gl, 50);
	r.get_p99 = percentile(&gl, 99);
	free(pl.v);
	free(gl.v);
	window_release(&w, kind_registered(k));
	return r;
}

/* Threaded zero-copy: every thread owns a window; phases are barriers. */
struct mt_shared {
	pthread_barrier_t bar;
	size_t size;
	volatile bool done;
	double put_t, get_t;
	uint64_t bytes;
	struct samples pl[MAX_THREADS], gl[MAX_THREADS];
};

struct mt_arg {
	struct mt_shared *sh;
	unsigned tid;
};

static void *mt_thread(void *p)
{
	struct mt_arg *a = p;
	struct mt_shared *sh = a->sh;
	struct window w;
	uint64_t round = 0;
	double t0 = 0;

	window_init(&w, sh->size, window_count(sh->size, 1), true);
	for (;;) {
		window_keys(&w, a->tid, ++round);
		pthread_barrier_wait(&sh->bar);
		if (sh->done)
			break;
		if (a->tid == 0)
			t0 = now_s();
		put_phase(X_ZC, &w, &sh->pl[a->tid]);
		pthread_barrier_wait(&sh->bar);
		if (a->tid == 0) {
			sh->put_t += now_s() - t0;
			t0 = now_s();
		}
		get_phase(X_ZC, &w, a->tid, round, &sh->gl[a->tid]);
		pthread_barrier_wait(&sh->bar);
		if (a->tid == 0)
			sh->get_t += now_s() - t0;
		window_remove(&w);
		if (a->tid == 0)
			sh->bytes += (uint64_t)opt.threads * w.n * sh->size;
		/* The main thread decides between this barrier and the next start. */
		pthread_barrier_wait(&sh->bar);
	}
	window_release(&w, true);
	return NULL;
}

static struct xfer_result run_mt(size_t size)
{
	struct mt_shared sh = {.size = size};
	struct mt_arg args[MAX_THREADS];
	pthread_t th[MAX_THREADS];
	struct samples pl = {0}, gl = {0};
	struct xfer_result r = {0};
	double t_end;
	int n = opt.threads;

	pthread_barrier_init(&sh.bar, NULL, (unsigned)n + 1);
	for (int i = 0; i < n; i++) {
		args[i] = (struct mt_arg){&sh, (unsigned)i};
		if (pthread_create(&th[i], NULL, mt_thread, &args[i]))
			die("pthread_create failed");
	}
	/* The main thread takes part in the barriers and owns the clock. */
	t_end = now_s() + opt.duration;
	for (;;) {
		pthread_barrier_wait(&sh.bar); /* start */
		if (sh.done)
			break;
		pthread_barrier_wait(&sh.bar); /* puts done */
		pthread_barrier_wait(&sh.bar); /* gets done */
		pthread_barrier_wait(&sh.bar); /* removed */
		if (now_s() >= t_end || stop_signal)
			sh.done = true;
	}
	for (int i = 0; i < n; i++) {
		pthread_join(th[i], NULL);
		for (size_t j = 0; j < sh.pl[i].n; j++)
			sample_add(&pl, sh.pl[i].v[j]);
		for (size_t j = 0; j < sh.gl[i].n; j++)
			sample_add(&gl, sh.gl[i].v[j]);
		free(sh.pl[i].v);
		free(sh.gl[i].v);
	}
	pthread_barrier_destroy(&sh.bar);
	r.put_gbs = (double)sh.bytes / sh.put_t / 1e9;
	r.get_gbs = (double)sh.bytes / sh.get_t / 1e9;
	r.put_p50 = percentile(&pl, 50);
	r.put_p99 = percentile(&pl, 99);
	r.get_p50 = percentile(&gl, 50);
	r.get_p99 = percentile(&gl, 99);
	free(pl.v);
	free(gl.v);
	return r;
}

static void report_xfer(const char *put_name, const char *get_name, size_t size, int batch,
			int threads, struct xfer_result *rs, int n)
{
	double v[10][MAX_RUNS];
	const char *names[2] = {put_name, get_name};

	for (int i = 0; i < n; i++) {
		v[0][i] = rs[i].put_gbs;
		v[1][i] = rs[i].get_gbs;
		v[2][i] = rs[i].put_p50;
		v[3][i] = rs[i].put_p99;
		v[4][i] = rs[i].get_p50;
		v[5][i] = rs[i].get_p99;
		v[6][i] = rs[i].put_cpu;
		v[7][i] = rs[i].get_cpu;
		v[8][i] = rs[i].put_flt;
		v[9][i] = rs[i].get_flt;
	}
	for (int k = 0; k < 2; k++) {
		double gbs = median(v[k], n), p50 = median(v[2 + 2 * k], n),
		       p99 = median(v[3 + 2 * k], n), cpu = median(v[6 + k], n),
		       flt = median(v[8 + k], n);

		if (opt.json) {
			printf("{\"case\":\"%s\",\"size\":%zu,\"batch\":%d,\"threads\":%d,"
			       "\"runs\":%d,\"gbps\":%.4f,\"p50_us\":%.1f,\"p99_us\":%.1f,",
			       names[k], size, batch, threads, n, gbs, p50, p99);
			if (cpu > 0)
				printf("\"cpu_ms_per_gb\":%.1f,\"faults_per_mib\":%.2f,", cpu, flt);
			printf("\"gbps_runs\":[");
			for (int i = 0; i < n; i++)
				printf("%s%.4f", i ? "," : "", v[k][i]);
			printf("]}\n");
		} else {
			printf("case=%s size=%zu batch=%d threads=%d GB/s=%.3f p50_us=%.1f "
			       "p99_us=%.1f",
			       names[k], size, batch, threads, gbs, p50, p99);
			if (cpu > 0)
				printf(" cpu_ms/GB=%.1f faults/MiB=%.2f", cpu, flt);
			printf(" runs=%d\n", n);
		}
		fflush(stdout);
	}
}

/* ------------------------------------------------------------------------ */
/* Metadata cases                                                            */

enum meta_kind { M_EXIST, M_BATCH_EXIST, M_DESC };

static struct meta_result run_meta(enum meta_kind k, const char **keys, size_t n)
{
	struct samples lat = {0};
	struct meta_result r;
	double t_end = now_s() + opt.duration, busy = 0;
	int *res = calloc(n, sizeof(*res));
	uint64_t ops = 0, nkeys = 0;
	size_t i = 0;

	if (!res)
		die("out of memory");
	do {
		double t0 = now_s(), dt;

		if (k == M_EXIST) {
			int e = mc_store_is_exist(store, keys[i]);

			check(e, "is_exist", keys[i]);
			if (e != 1)
				die("is_exist(%s) = %d", keys[i], e);
			nkeys++;
		} else if (k == M_BATCH_EXIST) {
			check(mc_store_batch_is_exist(store, keys, n, res), "batch_is_exist", NULL);
			if (res[0] != 1 || res[n - 1] != 1)
				die("batch_is_exist: %d %d", res[0], res[n - 1]);
			nkeys += n;
		} else {
			struct mc_store_replica_desc d;
			int64_t c = mc_store_get_replica_desc(store, keys[i], &d, 1);

			check(c, "get_replica_desc", keys[i]);
			if (c < 1)
				die("get_replica_desc(%s): no replica", keys[i]);
			nkeys++;
		}
		dt = now_s() - t0;
		busy += dt;
		sample_add(&lat, dt * 1e6);
		ops++;
		i = (i + 1) % n;
	} while (now_s() < t_end && !stop_signal);
	r.ops = (double)ops / busy;
	r.keys = (double)nkeys / busy;
	r.p50 = percentile(&lat, 50);
	r.p99 = percentile(&lat, 99);
	free(lat.v);
	free(res);
	return r;
}

static void meta_cases(void)
{
	size_t n = (size_t)opt.meta_keys, vsize = 1024;
	char(*keys)[KEY_LEN] = calloc(n, sizeof(*keys));
	const char **keyp = calloc(n, sizeof(*keyp));
	mc_status *st = calloc(n, sizeof(*st));
	uint8_t *val = calloc(1, vsize);
	struct mc_store_config cfg = place_cfg();
	struct meta_result rs[MAX_RUNS];

	if (!keys || !keyp || !st || !val)
		die("out of memory");
	for (size_t i = 0; i < n; i++) {
		snprintf(keys[i], KEY_LEN, "sbm-%d-%zu", (int)getpid(), i);
		keyp[i] = keys[i];
		check(mc_store_put(store, keyp[i], val, vsize, &cfg), "put", keyp[i]);
	}
	for (int r = 0; r < opt.runs; r++)
		rs[r] = run_meta(M_EXIST, keyp, n);
	report_meta("exist", 1, rs, opt.runs, opt.json);
	for (int r = 0; r < opt.runs; r++)
		rs[r] = run_meta(M_BATCH_EXIST, keyp, n);
	report_meta("batch_exist", n, rs, opt.runs, opt.json);
	for (int r = 0; r < opt.runs; r++)
		rs[r] = run_meta(M_DESC, keyp, n);
	report_meta("replica_desc", 1, rs, opt.runs, opt.json);
	check(mc_store_batch_remove(store, keyp, n, true, st), "batch_remove", NULL);
	free(keys);
	free(keyp);
	free(st);
	free(val);
}

/* ------------------------------------------------------------------------ */
/* Processes                                                                 */

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void setup_store(uint64_t segment, uint64_t local_buffer)
{
	struct mc_store_params p = {
		.local_hostname = opt.host,
		.metadata_server = opt.metadata,
		.global_segment_size = segment,
		.local_buffer_size = local_buffer,
		.protocol = "tcp",
		.master_server_addr = opt.master,
	};

	check(mc_store_new(&store), "store_new", NULL);
	check(mc_store_setup(store, &p), "store_setup", NULL);
}

/* Holder: contribute the segment, print READY, serve until stdin closes
 * or a signal comes. */
static int holder_main(void)
{
	char buf[64];

	setup_store(opt.segment, 16u << 20);
	printf("READY hostname=%s pid=%ld segment=%" PRIu64 "\n", mc_store_hostname(store),
	       (long)getpid(), opt.segment);
	fflush(stdout);
	while (!stop_signal && read(STDIN_FILENO, buf, sizeof(buf)) > 0)
		;
	mc_store_free(store);
	return 0;
}

/* One phase of an aggregate client: "OK bytes=B t0=S t1=S p99_us=X". */
static void agg_phase(bool put, bool batch, struct window *w, uint64_t round)
{
	struct samples lat = {0};
	double t0 = now_s(), t1;

	if (put)
		put_phase(batch ? X_BATCH : X_ZC, w, &lat);
	else
		get_phase(batch ? X_BATCH : X_ZC, w, 0, round, &lat);
	t1 = now_s();
	printf("OK bytes=%zu t0=%.6f t1=%.6f p99_us=%.1f\n", w->n * w->size, t0, t1,
	       percentile(&lat, 99));
	free(lat.v);
}

/* Aggregate client (--mode=agg): one window, its phases run on command. */
static int agg_main(void)
{
	struct window w;
	uint64_t round = 1;
	char line[64];

	if (!opt.target)
		die("--mode=agg needs --target=HOLDER_HOSTNAME");
	setup_store(0, 16u << 20);
	window_init(&w, opt.sizes[0], window_count(opt.sizes[0], 1), true);
	window_keys(&w, 0, round);
	printf("READY keys=%zu size=%zu\n", w.n, w.size);
	fflush(stdout);
	while (!stop_signal && fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\r\n")] = '\0';
		if ((!strcmp(line, "putb") || !strcmp(line, "getb")) && w.n % (size_t)opt.batch) {
			printf("ERR window of %zu keys is not a multiple of --batch=%d\n", w.n,
			       opt.batch);
		} else if (!strcmp(line, "put")) {
			agg_phase(true, false, &w, round);
		} else if (!strcmp(line, "putb")) {
			agg_phase(true, true, &w, round);
		} else if (!strcmp(line, "get")) {
			agg_phase(false, false, &w, round);
		} else if (!strcmp(line, "getb")) {
			agg_phase(false, true, &w, round);
		} else if (!strcmp(line, "remove")) {
			window_remove(&w);
			window_keys(&w, 0, ++round);
			printf("OK\n");
		} else if (!strcmp(line, "quit")) {
			break;
		} else {
			printf("ERR unknown command '%s'\n", line);
		}
		fflush(stdout);
	}
	window_release(&w, true);
	mc_store_free(store);
	return 0;
}

static pid_t holder_pid = -1;
static int holder_stdin = -1;
static char holder_name[256];

static void start_holder(const char *self)
{
	int in[2], out[2];
	char seg[32], line[512];
	FILE *f;

	snprintf(seg, sizeof(seg), "--segment=%" PRIu64, opt.segment);
	if (pipe(in) || pipe(out))
		die("pipe: %s", strerror(errno));
	holder_pid = fork();
	if (holder_pid < 0)
		die("fork: %s", strerror(errno));
	if (holder_pid == 0) {
		char m[300], md[600], h[300];

		snprintf(m, sizeof(m), "--master=%s", opt.master);
		snprintf(md, sizeof(md), "--metadata=%s", opt.metadata);
		snprintf(h, sizeof(h), "--host=%s", opt.host);
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		close(in[1]);
		close(out[0]);
		execl(self, self, "--mode=holder", m, md, h, seg, (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	holder_stdin = in[1];
	f = fdopen(out[0], "r");
	if (!f || !fgets(line, sizeof(line), f) || strncmp(line, "READY hostname=", 15))
		die("the holder did not start");
	sscanf(line + 15, "%255s", holder_name);
	fclose(f);
	opt.target = holder_name;
}

static void stop_holder(void)
{
	int status;

	if (holder_pid <= 0)
		return;
	close(holder_stdin);
	if (waitpid(holder_pid, &status, 0) == holder_pid &&
	    !(WIFEXITED(status) && !WEXITSTATUS(status)))
		fprintf(stderr, PROG ": the holder exited with status %d\n", status);
	holder_pid = -1;
}

/*
 * First fill against refill: a fresh holder (a freshly mounted segment,
 * pre-faulted as MC_STORE_PREFAULT in the environment says) is started
 * and the window is put into it at once (put_gbs, "cold"), then removed
 * and put again into the memory the first fill touched (get_gbs slot,
 * "warm").  The data of both fills is read back and checked.
 */
static struct xfer_result run_cold(size_t size)
{
	struct window w;
	struct samples cl = {0}, wl = {0}, gl = {0};
	struct xfer_result r = {0};
	double t0, cold_t, warm_t;
	static uint64_t round;

	if (holder_pid <= 0)
		die("--cases=cold starts its own holders: drop --target");
	window_init(&w, size, window_count(size, 1), true);
	stop_holder();
	start_holder("/proc/self/exe");
	window_keys(&w, 0, ++round);
	t0 = now_s();
	put_phase(X_ZC, &w, &cl);
	cold_t = now_s() - t0;
	get_phase(X_ZC, &w, 0, round, &gl);
	window_remove(&w);
	window_keys(&w, 0, ++round);
	t0 = now_s();
	put_phase(X_ZC, &w, &wl);
	warm_t = now_s() - t0;
	get_phase(X_ZC, &w, 0, round, &gl);
	window_remove(&w);
	r.put_gbs = (double)(w.n * size) / cold_t / 1e9;
	r.get_gbs = (double)(w.n * size) / warm_t / 1e9;
	r.put_p50 = percentile(&cl, 50);
	r.put_p99 = percentile(&cl, 99);
	r.get_p50 = percentile(&wl, 50);
	r.get_p99 = percentile(&wl, 99);
	free(cl.v);
	free(wl.v);
	free(gl.v);
	window_release(&w, true);
	return r;
}

static bool parse_size(const char *s, uint64_t *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v < 0)
		return false;
	switch (*end) {
	case 'k':
	case 'K':
		v *= 1024;
		end++;
		break;
	case 'm':
	case 'M':
		v *= 1024 * 1024;
		end++;
		break;
	case 'g':
	case 'G':
		v *= 1024.0 * 1024 * 1024;
		end++;
		break;
	}
	if (*end)
		return false;
	*out = (uint64_t)v;
	return true;
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [--mode=client|holder|agg] [--master=H:P] [--metadata=URI]\n"
		"       [--host=NAME] [--target=HOLDER_HOSTNAME] [--segment=2g] [--window=64m]\n"
		"       [--sizes=1m,4m] [--runs=5] [--duration=2] [--batch=8] [--threads=2]\n"
		"       [--meta-keys=1000] [--cases=zc,copy,batch,batchcopy,mt,meta,cold,range]\n"
		"       [--range-len=64k] [--get-rounds=1] [--json] [--quick]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"mode", required_argument, NULL, 'o'},
		{"master", required_argument, NULL, 'M'},
		{"metadata", required_argument, NULL, 'm'},
		{"host", required_argument, NULL, 'H'},
		{"target", required_argument, NULL, 'T'},
		{"segment", required_argument, NULL, 's'},
		{"window", required_argument, NULL, 'w'},
		{"range-len", required_argument, NULL, 'R'},
		{"sizes", required_argument, NULL, 'z'},
		{"runs", required_argument, NULL, 'r'},
		{"duration", required_argument, NULL, 'd'},
		{"batch", required_argument, NULL, 'b'},
		{"threads", required_argument, NULL, 't'},
		{"meta-keys", required_argument, NULL, 'k'},
		{"cases", required_argument, NULL, 'c'},
		{"get-rounds", required_argument, NULL, 'g'},
		{"json", no_argument, NULL, 'j'},
		{"quick", no_argument, NULL, 'q'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct sigaction sa = {.sa_handler = on_signal};
	struct xfer_result rs[MAX_RUNS];
	uint64_t v;
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'o':
			opt.mode = optarg;
			break;
		case 'M':
			opt.master = optarg;
			break;
		case 'm':
			opt.metadata = optarg;
			break;
		case 'H':
			opt.host = optarg;
			break;
		case 'T':
			opt.target = optarg;
			break;
		case 's':
			if (!parse_size(optarg, &opt.segment) || !opt.segment)
				goto bad;
			break;
		case 'w':
			if (!parse_size(optarg, &opt.window) || !opt.window)
				goto bad;
			break;
		case 'R':
			if (!parse_size(optarg, &opt.range_len) || !opt.range_len)
				goto bad;
			break;
		case 'z': {
			char *s = strdup(optarg), *save = NULL;

			opt.nsizes = 0;
			for (char *t = strtok_r(s, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
				if (opt.nsizes == MAX_SIZES || !parse_size(t, &v) || v < 8)
					goto bad;
				opt.sizes[opt.nsizes++] = v;
			}
			free(s);
			break;
		}
		case 'r':
			opt.runs = atoi(optarg);
			if (opt.runs < 1 || opt.runs > MAX_RUNS)
				goto bad;
			break;
		case 'd':
			opt.duration = atof(optarg);
			if (!(opt.duration > 0))
				goto bad;
			break;
		case 'b':
			opt.batch = atoi(optarg);
			if (opt.batch < 1 || opt.batch > 1024)
				goto bad;
			break;
		case 't':
			opt.threads = atoi(optarg);
			if (opt.threads < 1 || opt.threads > MAX_THREADS)
				goto bad;
			break;
		case 'k':
			opt.meta_keys = atoi(optarg);
			if (opt.meta_keys < 1)
				goto bad;
			break;
		case 'c':
			opt.cases = optarg;
			break;
		case 'g':
			opt.get_rounds = atoi(optarg);
			if (opt.get_rounds < 1 || opt.get_rounds > 1000)
				goto bad;
			break;
		case 'j':
			opt.json = true;
			break;
		case 'q':
			opt.quick = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			goto bad;
		}
	}
	if (optind != argc)
		goto bad;
	if (opt.quick) {
		opt.runs = 1;
		opt.duration = 0.3;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	if (!strcmp(opt.mode, "holder"))
		return holder_main();
	if (!strcmp(opt.mode, "agg"))
		return agg_main();
	if (strcmp(opt.mode, "client"))
		goto bad;
	if (!opt.target)
		start_holder("/proc/self/exe");
	atexit(stop_holder);
	/* A pure client: no segment, so every replica lands on the holder
	 * (a local buffer is passed as applications do; nothing uses it). */
	setup_store(0, 64u << 20);

	/* Metadata first: right after the data cases the machine is still busy
	 * settling their memory, which shows in microsecond round trips. */
	if (case_on("meta"))
		meta_cases();
	for (int s = 0; s < opt.nsizes; s++) {
		size_t size = opt.sizes[s];

		if (case_on("zc")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_single(X_ZC, size);
			report_xfer("put_from", "get_into", size, 1, 1, rs, opt.runs);
		}
		if (case_on("copy") && size <= (32u << 20)) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_single(X_COPY, size);
			report_xfer("put", "get", size, 1, 1, rs, opt.runs);
		}
		if (case_on("batch")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_single(X_BATCH, size);
			report_xfer("batch_put_from", "batch_get_into", size, opt.batch, 1, rs,
				    opt.runs);
		}
		if (case_on("range")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_single(X_RANGE, size);
			report_xfer("range_put_from", "get_range", size, 1, 1, rs, opt.runs);
		}
		if (case_on("batchcopy")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_single(X_BATCH_COPY, size);
			report_xfer("put_batch", "batch_get", size, opt.batch, 1, rs, opt.runs);
		}
		if (case_on("cold")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_cold(size);
			report_xfer("put_from_cold", "put_from_warm", size, 1, 1, rs, opt.runs);
		}
		if (case_on("mt")) {
			for (int r = 0; r < opt.runs; r++)
				rs[r] = run_mt(size);
			report_xfer("mt_put_from", "mt_get_into", size, 1, opt.threads, rs,
				    opt.runs);
		}
	}
	mc_store_free(store);
	stop_holder();
	return 0;
bad:
	usage(stderr);
	return 2;
}
