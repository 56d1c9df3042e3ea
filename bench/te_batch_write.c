/*
 * te_batch_write - the engine's own rate for the writes one store batch put
 * makes: a synchronous batch of --count writes of --size bytes (default
 * 32 x 64 KiB), each followed, as in a store put, by its --trailer-byte
 * trailer (0: none), to a target engine in a second process over loopback
 * TCP.  The ceiling under store_small's batch_put_from at 64 KiB
 * (docs/bench/issue-12-scale.md, session 25).
 *
 *   te_batch_write [--count N] [--size B] [--trailer T] [--seconds S]
 *                  [--window W] [--hash] [--runs R]
 *
 * The process forks the target before either makes an engine; the target
 * registers --window bytes (default 64 MiB) and the initiator walks it one
 * batch after another, as a store client's puts walk fresh blocks.  With
 * --hash the initiator computes XXH3-64 of each value between submitting
 * the values and submitting the trailers, where the store's put signs
 * (src/store/client_xfer.c run_pass), so the two lines bound what the
 * store adds beyond signing.  Per run one line:
 *
 *   run=K keys_s=X gb_s=Y batch_us=Z cpu_us_per_key init=A target=B busy=C
 *
 * busy is the two processes' CPU time over the wall time (2.0: both of a
 * two-core host's cores).  Only the public API is used, and libxxhash.
 */
#include <mooncake/mooncake.h>

#include <getopt.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <xxhash.h>
#if defined(__x86_64__)
#include <xxh_x86dispatch.h> /* AVX2 where the CPU has it, as the store's */
#define hash64 XXH3_64bits_dispatch
#else
#define hash64 XXH3_64bits
#endif

#define PROG "te_batch_write"
#include "bench_util.h"

#define TIMEOUT_MS 30000

static unsigned count = 32, runs = 3;
static uint64_t size = 64u << 10, trailer = 32, window = 64ull << 20;
static double seconds = 2.0;
static bool hash;

static struct mc_te *engine_new(void)
{
	struct mc_te_params p = {
		.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL,
		.metadata_uri = "P2PHANDSHAKE",
		.local_name = "127.0.0.1",
		.protocol = "tcp",
	};
	struct mc_te *te = NULL;
	mc_status st = mc_te_new(&p, &te);

	if (st != MC_OK)
		die_status("mc_te_new", st);
	return te;
}

static void *buffer_alloc(uint64_t n)
{
	void *p = buffer_map(n);

	memset(p, 0x5a, n);
	return p;
}

/* The target: registers the window, writes "name addr\n" to fd, serves
 * until fd's other end closes. */
static void serve(int wfd, int rfd)
{
	struct mc_te *te = engine_new();
	void *buf = buffer_alloc(window);
	mc_status st = mc_te_register(te, buf, window, "cpu:0", true);
	char line[256], c;
	int n;

	if (st != MC_OK)
		die_status("mc_te_register", st);
	n = snprintf(line, sizeof(line), "%s %" PRIuPTR "\n", mc_te_local_name(te), (uintptr_t)buf);
	if (write(wfd, line, (size_t)n) != n)
		die("pipe: %s", strerror(errno));
	while (read(rfd, &c, 1) > 0)
		;
	_exit(0);
}

static double cpu_s_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* utime + stime of pid from /proc, in seconds. */
static double cpu_s_of(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		die("%s: %s", path, strerror(errno));
	fclose(f);
	p = strrchr(buf, ')'); /* fields after the command's name */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		die("%s: cannot parse", path);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static uint64_t one_batch(struct mc_te *te, mc_segment_id seg, struct mc_xfer_req *reqs, char *buf,
			  uint64_t raddr, uint64_t *at)
{
	uint64_t obj = size + trailer, sink = 0;
	mc_batch_id id;
	mc_status st;

	if (*at + count * obj > window)
		*at = 0;
	for (unsigned i = 0; i < count; i++) {
		reqs[i] = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
					       .source = buf + *at + i * obj,
					       .target_id = seg,
					       .target_offset = raddr + *at + i * obj,
					       .length = size};
		reqs[count + i] = reqs[i];
		reqs[count + i].source = (char *)reqs[i].source + size;
		reqs[count + i].target_offset += size;
		reqs[count + i].length = trailer;
	}
	st = mc_te_batch_new(te, count * (trailer ? 2 : 1), &id);
	if (st == MC_OK)
		st = mc_te_submit(te, id, reqs, count);
	for (unsigned i = 0; hash && st == MC_OK && i < count; i++)
		sink ^= hash64(reqs[i].source, size);
	if (st == MC_OK && trailer)
		st = mc_te_submit(te, id, reqs + count, count);
	if (st == MC_OK)
		st = mc_te_batch_wait(te, id, TIMEOUT_MS, NULL);
	if (st != MC_OK)
		die_status("batch", st);
	mc_te_batch_discard(te, id);
	*at += count * obj;
	return sink;
}

static void initiate(const char *peer, uint64_t raddr, pid_t target)
{
	struct mc_te *te = engine_new();
	char *buf = buffer_alloc(window);
	struct mc_xfer_req *reqs = calloc(2 * count, sizeof(*reqs));
	mc_status st = mc_te_register(te, buf, window, "cpu:0", true);
	mc_segment_id seg;
	uint64_t at = 0, sink = 0;

	if (st != MC_OK)
		die_status("mc_te_register", st);
	if (!reqs)
		die("out of memory");
	st = mc_te_open_segment(te, peer, &seg);
	if (st != MC_OK)
		die_status("mc_te_open_segment", st);
	for (unsigned i = 0; i < 20; i++) /* connect, warm up */
		sink ^= one_batch(te, seg, reqs, buf, raddr, &at);
	for (unsigned r = 1; r <= runs; r++) {
		double c0 = cpu_s_self(), t0c = cpu_s_of(target), t0 = now_s(), t1;
		uint64_t batches = 0;

		do {
			sink ^= one_batch(te, seg, reqs, buf, raddr, &at);
			batches++;
		} while ((t1 = now_s()) - t0 < seconds);
		{
			double keys = (double)batches * count, ci = cpu_s_self() - c0,
			       ct = cpu_s_of(target) - t0c, wall = t1 - t0;

			printf("run=%u keys_s=%.0f gb_s=%.3f batch_us=%.1f cpu_us_per_key init=%.2f "
			       "target=%.2f busy=%.2f\n",
			       r, keys / wall, keys * (double)size / wall / 1e9,
			       wall * 1e6 / (double)batches, ci * 1e6 / keys, ct * 1e6 / keys,
			       (ci + ct) / wall);
			fflush(stdout);
		}
	}
	if (sink == 42)
		printf("#\n"); /* keeps the hash */
	free(reqs);
	mc_te_deregister(te, buf);
	mc_te_free(te);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: %s [--count N] [--size B] [--trailer T] [--seconds S] [--window W] "
		"[--hash] [--runs R]\n",
		PROG);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"count", required_argument, NULL, 'n'},
		{"size", required_argument, NULL, 'z'},
		{"trailer", required_argument, NULL, 't'},
		{"seconds", required_argument, NULL, 's'},
		{"window", required_argument, NULL, 'w'},
		{"hash", no_argument, NULL, 'h'},
		{"runs", required_argument, NULL, 'r'},
		{NULL, 0, NULL, 0},
	};
	int c, up[2], down[2], status;
	char line[256], peer[200];
	uintptr_t raddr;
	pid_t pid;
	FILE *f;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			count = (unsigned)strtoul(optarg, NULL, 0);
			break;
		case 'z':
			size = strtoull(optarg, NULL, 0);
			break;
		case 't':
			trailer = strtoull(optarg, NULL, 0);
			break;
		case 's':
			seconds = strtod(optarg, NULL);
			break;
		case 'w':
			window = strtoull(optarg, NULL, 0);
			break;
		case 'h':
			hash = true;
			break;
		case 'r':
			runs = (unsigned)strtoul(optarg, NULL, 0);
			break;
		default:
			usage();
		}
	}
	if (!count || !size || !runs || seconds <= 0 || window < count * (size + trailer))
		usage();
	if (pipe(up) || pipe(down))
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		close(up[0]);
		close(down[1]);
		serve(up[1], down[0]);
	}
	close(up[1]);
	close(down[0]);
	f = fdopen(up[0], "r");
	if (!f || !fgets(line, sizeof(line), f) ||
	    sscanf(line, "%199s %" SCNuPTR, peer, &raddr) != 2)
		die("the target did not start");
	initiate(peer, raddr, pid);
	close(down[1]); /* the target ends */
	(void)waitpid(pid, &status, 0);
	fclose(f);
	return 0;
}
