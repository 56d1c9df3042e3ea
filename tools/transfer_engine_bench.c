/*
 * transfer_engine_bench - upstream's transfer_engine_bench on the public C API.
 *
 * Two processes.  The target allocates --buffer_size bytes, registers them
 * as one buffer at location cpu:0, prints its segment name on stdout (in P2P
 * mode the "host:port" that initiators must pass) and serves until SIGINT or
 * SIGTERM.  The initiator opens --segment_id, takes the remote base address
 * from buffer 0 of the target's descriptor and runs --threads threads for
 * --duration seconds.  Each thread loops as upstream's does: allocate a
 * batch, submit --batch_size requests of --block_size bytes, poll until the
 * batch completes, free it.  Request i of thread t uses the local and remote
 * offset block_size * (i * threads + t), like upstream, but wrapped so that
 * it stays inside both buffers (upstream grows its own buffer instead and
 * trusts the target's to be as large).
 *
 * Output is upstream's line, "Test completed: duration D, batch count N,
 * throughput X GB/s", on stdout.  Extensions, all off by default so that the
 * default run is upstream's: --latency (per-batch latency percentiles from a
 * log-linear histogram, so the hot loop never allocates), --sweep (tebench's
 * block x batch x threads grid, one line per case), --verify (write a
 * pattern, read it back through the engine, compare), --workers and
 * --conns_per_peer (engine parameters), --poll (how a thread waits for its
 * batch: by default it sleeps in mc_te_batch_wait; upstream's busy loop,
 * --poll=spin, takes a core away from the engine's workers on small
 * machines, so more threads would look slower), --shm (a target on the same host is
 * reached through the same-host transport; --noshm measures the TCP path
 * instead) and --json.  A batch is allocated and freed per
 * iteration, as upstream does: reusing one is not possible, since a batch's capacity counts every
 * request ever submitted to it (MC_ERR_TOO_MANY_REQUESTS).
 *
 * Upstream's GPU flags --use_vram, --gpu_id and --init_mem are accepted:
 * with --use_vram both sides' buffers are device memory (cudaMalloc on
 * --gpu_id, filled with 0xCC unless --noinit_mem), registered at location
 * cuda:<gpu_id>.  Unlike upstream's GPU builds, --use_vram is off by
 * default (one binary serves hosts with and without GPUs) and --gpu_id=-1
 * (one buffer per GPU) is not supported.  The bench loads libcudart with
 * dlopen only when --use_vram is given, so it needs no CUDA to build; the
 * engine must be a CUDA build to move device memory (bench/gpu_check.sh).
 *
 * Flags use gflags' syntax, since scripts written for upstream pass them
 * that way: --flag=value, --flag value, -flag, and --flag / --noflag for
 * booleans.  An unknown flag is an error (exit 2).
 *
 * Timing uses CLOCK_MONOTONIC.  A watchdog thread ends the process (exit 3)
 * when a run has not stopped a few seconds after its deadline (more when a
 * round of batches is large enough to need longer to drain), so a hung
 * transfer cannot hang the benchmark.  Only the public API is used
 * (<mooncake/mooncake.h>), which keeps that API honest.
 *
 * Exit status: 0 success, 1 engine or transfer failure or verify mismatch,
 * 2 bad flags, 3 watchdog.
 */
#include <mooncake/mooncake.h>

#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define PROG	      "transfer_engine_bench"

#define EXIT_USAGE    2
#define EXIT_WATCHDOG 3

/* A run may overrun its duration by this many seconds, plus the time to
 * move one round of in-flight requests at WATCHDOG_MIN_RATE bytes/s, before
 * the watchdog fires. */
#define WATCHDOG_GRACE_S  5.0
#define WATCHDOG_MIN_RATE 5e8
/* Engine creation, segment open and verification get this long. */
#define SETUP_TIMEOUT_S 60.0
/* Largest region --verify writes and reads back. */
#define VERIFY_MAX_BYTES (64ull << 20)

/* ------------------------------------------------------------------------ */
/* Flags                                                                     */

enum poll_mode {
	POLL_SPIN,  /* call mc_te_batch_status in a tight loop (upstream) */
	POLL_YIELD, /* same, with sched_yield between calls */
	POLL_WAIT,  /* block in mc_te_batch_wait */
};

static struct options {
	const char *mode;
	const char *local_server_name;
	const char *metadata_server;
	const char *segment_id;
	const char *operation;
	const char *protocol;
	const char *device_name;
	const char *nic_priority_matrix;
	const char *auth_secret_file;
	bool auto_discovery;
	uint64_t buffer_size;
	int64_t batch_size;
	uint64_t block_size;
	double duration;
	int64_t threads;
	const char *report_unit;
	int64_t report_precision;
	const char *backend;
	/* Ours. */
	bool latency;
	bool sweep;
	bool verify;
	int64_t workers;
	int64_t conns_per_peer;
	uint64_t window;
	bool json;
	const char *poll;
	bool shm;
	/* upstream's GPU flags */
	bool use_vram;
	int64_t gpu_id;
	bool init_mem;
} opt = {
	.mode = "initiator",
	.local_server_name = NULL, /* hostname, filled in main */
	.metadata_server = "192.168.3.77:2379",
	.segment_id = "192.168.3.76",
	.operation = "read",
	.protocol = "rdma",
	.device_name = "mlx5_2",
	.nic_priority_matrix = "",
	.auth_secret_file = "",
	.auto_discovery = false,
	.buffer_size = 1ull << 30,
	.batch_size = 128,
	.block_size = 65536,
	.duration = 10,
	.threads = 12,
	.report_unit = "GB",
	.report_precision = 2,
	.backend = "classic",
	.latency = false,
	.sweep = false,
	.verify = false,
	.workers = 0,
	.conns_per_peer = 0,
	.json = false,
	.poll = "wait",
	.shm = true,
	.use_vram = false,
	.gpu_id = 0,
	.init_mem = true,
};

enum flag_type {
	FLAG_STRING,
	FLAG_BOOL,
	FLAG_INT,    /* int64_t within [min, max] */
	FLAG_UINT64, /* uint64_t >= 1 (>= 0 with min -1) */
	FLAG_DOUBLE, /* double > 0 */
};

struct flag {
	const char *name;
	void *value;
	int64_t min, max; /* FLAG_INT; FLAG_UINT64: min -1 allows 0 */
	const char *doc;
	enum flag_type type;
	bool set; /* given on the command line */
};

#define FLAG(n, t, v, lo, hi, d)                                                             \
	{                                                                                    \
		.name = (n), .type = (t), .value = (v), .min = (lo), .max = (hi), .doc = (d) \
	}

static struct flag flags[] = {
	FLAG("mode", FLAG_STRING, &opt.mode, 0, 0, "initiator or target"),
	FLAG("local_server_name", FLAG_STRING, &opt.local_server_name, 0, 0,
	     "local segment name (default: hostname)"),
	FLAG("metadata_server", FLAG_STRING, &opt.metadata_server, 0, 0,
	     "metadata connection string (http://host:port/metadata, P2PHANDSHAKE, ...)"),
	FLAG("segment_id", FLAG_STRING, &opt.segment_id, 0, 0, "target segment name (initiator)"),
	FLAG("operation", FLAG_STRING, &opt.operation, 0, 0, "read or write"),
	FLAG("protocol", FLAG_STRING, &opt.protocol, 0, 0, "transport; rdma falls back to tcp"),
	FLAG("device_name", FLAG_STRING, &opt.device_name, 0, 0,
	     "comma-separated RDMA NICs (sets MC_TE_FILTERS when given)"),
	FLAG("nic_priority_matrix", FLAG_STRING, &opt.nic_priority_matrix, 0, 0,
	     "priority-matrix JSON file (sets MC_CUSTOM_TOPO_JSON when given)"),
	FLAG("auto_discovery", FLAG_BOOL, &opt.auto_discovery, 0, 0,
	     "accepted for compatibility; this engine always discovers"),
	FLAG("buffer_size", FLAG_UINT64, &opt.buffer_size, 0, 0, "bytes registered on each side"),
	FLAG("batch_size", FLAG_INT, &opt.batch_size, 1, 1 << 20, "requests per batch"),
	FLAG("block_size", FLAG_UINT64, &opt.block_size, 0, 0, "bytes per request"),
	FLAG("duration", FLAG_DOUBLE, &opt.duration, 0, 0,
	     "seconds per run (per case with --sweep)"),
	FLAG("threads", FLAG_INT, &opt.threads, 1, 4096, "initiator submission threads"),
	FLAG("report_unit", FLAG_STRING, &opt.report_unit, 0, 0, "GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb"),
	FLAG("report_precision", FLAG_INT, &opt.report_precision, 0, 30, "digits after the point"),
	FLAG("backend", FLAG_STRING, &opt.backend, 0, 0, "classic (tent is not available)"),
	FLAG("latency", FLAG_BOOL, &opt.latency, 0, 0, "print per-batch latency percentiles"),
	FLAG("sweep", FLAG_BOOL, &opt.sweep, 0, 0,
	     "sweep block 4 KiB..64 MiB x batch 1..128 x threads 1..--threads"),
	FLAG("verify", FLAG_BOOL, &opt.verify, 0, 0, "write a pattern, read it back, compare"),
	FLAG("workers", FLAG_INT, &opt.workers, 0, 1024, "engine worker threads (0 = default)"),
	FLAG("conns_per_peer", FLAG_INT, &opt.conns_per_peer, 0, 1024,
	     "TCP connections per peer (0 = default)"),
	FLAG("window", FLAG_UINT64, &opt.window, -1, 0,
	     "bytes the batches walk: each batch takes the next slots of a window this large "
	     "(0 = upstream: every batch at the same offsets)"),
	FLAG("json", FLAG_BOOL, &opt.json, 0, 0, "print results as JSON lines"),
	FLAG("poll", FLAG_STRING, &opt.poll, 0, 0,
	     "wait (sleep until the batch is done), yield, or spin (upstream's loop)"),
	FLAG("auth_secret_file", FLAG_STRING, &opt.auth_secret_file, 0, 0,
	     "file holding the cluster secret (sets MC_AUTH_SECRET_FILE; docs/security.md)"),
	FLAG("shm", FLAG_BOOL, &opt.shm, 0, 0,
	     "same-host transport to a target on this host (--noshm sets MC_SHM_DISABLE=1: TCP)"),
	FLAG("use_vram", FLAG_BOOL, &opt.use_vram, 0, 0,
	     "buffers in GPU memory (cudaMalloc), registered at cuda:<gpu_id>"),
	FLAG("gpu_id", FLAG_INT, &opt.gpu_id, 0, 1023, "GPU of the --use_vram buffers"),
	FLAG("init_mem", FLAG_BOOL, &opt.init_mem, 0, 0, "fill --use_vram buffers with 0xCC"),
};

#define NFLAGS (sizeof(flags) / sizeof(flags[0]))

static void usage(FILE *out)
{
	fprintf(out, "usage: %s [--flag=value ...]\n\nflags:\n", PROG);
	for (size_t i = 0; i < NFLAGS; i++)
		fprintf(out, "  --%-22s %s\n", flags[i].name, flags[i].doc);
	fprintf(out, "\nbooleans also take --name / --noname; --help prints this.\n");
}

__attribute__((format(printf, 1, 2), noreturn)) static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "ERROR: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (see --help)\n");
	exit(EXIT_USAGE);
}

static struct flag *flag_find(const char *name, size_t len)
{
	for (size_t i = 0; i < NFLAGS; i++)
		if (strlen(flags[i].name) == len && !memcmp(flags[i].name, name, len))
			return &flags[i];
	return NULL;
}

/* gflags' number syntax: decimal, or hex with a 0x prefix. */
static bool parse_int(const char *s, bool is_unsigned, int64_t *out)
{
	int base = (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) ? 16 : 10;
	char *end;

	if (!*s || (is_unsigned && *s == '-'))
		return false;
	errno = 0;
	if (is_unsigned) {
		unsigned long long v = strtoull(s, &end, base);

		if (errno || *end || v > INT64_MAX)
			return false;
		*out = (int64_t)v;
	} else {
		long long v = strtoll(s, &end, base);

		if (errno || *end)
			return false;
		*out = v;
	}
	return true;
}

static bool parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"true", "t", "yes", "y", "1"};
	static const char *const no[] = {"false", "f", "no", "n", "0"};

	for (size_t i = 0; i < 5; i++) {
		if (!strcasecmp(s, yes[i])) {
			*out = true;
			return true;
		}
		if (!strcasecmp(s, no[i])) {
			*out = false;
			return true;
		}
	}
	return false;
}

static void flag_set(struct flag *f, const char *value)
{
	int64_t iv;
	double dv;
	char *end;

	switch (f->type) {
	case FLAG_STRING:
		*(const char **)f->value = value;
		break;
	case FLAG_BOOL:
		if (!parse_bool(value, (bool *)f->value))
			usage_error("illegal value '%s' specified for bool flag '%s'", value,
				    f->name);
		break;
	case FLAG_INT:
		if (!parse_int(value, false, &iv) || iv < f->min || iv > f->max)
			usage_error("illegal value '%s' specified for flag '%s'", value, f->name);
		*(int64_t *)f->value = iv;
		break;
	case FLAG_UINT64:
		if (!parse_int(value, true, &iv) || iv < (f->min < 0 ? 0 : 1))
			usage_error("illegal value '%s' specified for flag '%s'", value, f->name);
		*(uint64_t *)f->value = (uint64_t)iv;
		break;
	case FLAG_DOUBLE:
		errno = 0;
		dv = strtod(value, &end);
		if (errno || end == value || *end || !(dv > 0) || dv > 1e6)
			usage_error("illegal value '%s' specified for flag '%s'", value, f->name);
		*(double *)f->value = dv;
		break;
	}
	f->set = true;
}

static void parse_flags(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *name, *eq, *value;
		struct flag *f;
		size_t len;

		if (!strcmp(arg, "--")) {
			if (i + 1 < argc)
				usage_error("unexpected argument '%s'", argv[i + 1]);
			break;
		}
		if (arg[0] != '-' || !arg[1])
			usage_error("unexpected argument '%s'", arg);
		name = arg + 1 + (arg[1] == '-');
		eq = strchr(name, '=');
		len = eq ? (size_t)(eq - name) : strlen(name);
		if ((len == 4 && !memcmp(name, "help", 4)) || (len == 1 && name[0] == 'h')) {
			usage(stdout);
			exit(0);
		}
		f = flag_find(name, len);
		if (!f && !eq && len > 2 && !memcmp(name, "no", 2)) {
			f = flag_find(name + 2, len - 2);
			if (f && f->type == FLAG_BOOL) {
				flag_set(f, "false");
				continue;
			}
			f = NULL;
		}
		if (!f)
			usage_error("unknown command line flag '%.*s'", (int)len, name);
		if (eq)
			value = eq + 1;
		else if (f->type == FLAG_BOOL)
			value = "true";
		else if (i + 1 < argc)
			value = argv[++i];
		else
			usage_error("flag '%s' is missing its argument", f->name);
		flag_set(f, value);
	}
}

static struct flag *flag_by_name(const char *name)
{
	return flag_find(name, strlen(name));
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Print "what: reason".  The engine's last-error text already names the
 * status, so it replaces mc_strerror when there is one. */
static void report_status(const char *what, mc_status st, const char *detail)
{
	if (detail && detail[0])
		fprintf(stderr, "%s: %s: %s\n", PROG, what, detail);
	else
		fprintf(stderr, "%s: %s: %s (%s)\n", PROG, what, mc_strerror(st),
			mc_status_name(st));
}

static void die_status(const char *what, mc_status st)
{
	report_status(what, st, mc_last_error());
	exit(EXIT_FAILURE);
}

static volatile sig_atomic_t stop_requested;

static void on_signal(int signo)
{
	(void)signo;
	stop_requested = 1;
}

static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	/* A second signal kills the process the ordinary way. */
	sa.sa_flags = SA_RESETHAND;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {.tv_sec = (time_t)(ns / 1000000000ull),
			      .tv_nsec = (long)(ns % 1000000000ull)};

	nanosleep(&ts, NULL);
}

/* Anonymous, 2 MiB-aligned, backed by transparent huge pages where the
 * kernel allows (fewer TLB misses in the kernel's socket copies over a large
 * buffer), and prefaulted, so that page faults do not end up in the
 * measurement (upstream's numa_alloc_onnode leaves them in).  Freed with
 * munmap(p, size) like any mapping. */
static uint8_t *buffer_alloc(uint64_t size)
{
	const uint64_t huge = 2ull << 20;
	uint64_t len = size + huge;
	uint8_t *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint8_t *p;

	if (raw == MAP_FAILED) {
		fprintf(stderr, "%s: mmap %" PRIu64 " bytes: %s\n", PROG, size, strerror(errno));
		exit(EXIT_FAILURE);
	}
	p = (uint8_t *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
	if (p > raw)
		munmap(raw, (size_t)(p - raw));
	if (raw + len > p + size)
		munmap(p + size, (size_t)(raw + len - (p + size)));
	madvise(p, size, MADV_HUGEPAGE); /* advisory: ignored where THP is off */
	memset(p, 0xCC, size);
	return p;
}

/* ------------------------------------------------------------------------ */
/* GPU memory (--use_vram), through libcudart loaded at run time             */

enum { CUDA_MEMCPY_DEFAULT = 4 }; /* cudaMemcpyDefault */

static struct {
	void *lib;
	int (*set_device)(int);
	int (*malloc)(void **, size_t);
	int (*free)(void *);
	int (*memset)(void *, int, size_t);
	int (*memcpy)(void *, const void *, size_t, int);
	const char *(*error_string)(int);
} cuda;

static void cuda_die(const char *what, int err)
{
	fprintf(stderr, "%s: %s: %s\n", PROG, what,
		cuda.error_string ? cuda.error_string(err) : "CUDA error");
	exit(EXIT_FAILURE);
}

static void cuda_load(void)
{
	static const char *const names[] = {
#ifdef MC_CUDART_SONAME
		MC_CUDART_SONAME, /* the runtime the engine was built against */
#endif
		"libcudart.so.13", "libcudart.so.12",
		"libcudart.so",	   "/usr/local/cuda/lib64/libcudart.so",
	};
	int err;

	if (cuda.lib)
		return;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !cuda.lib; i++)
		cuda.lib = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
	if (!cuda.lib) {
		fprintf(stderr, "%s: --use_vram: cannot load libcudart: %s\n", PROG, dlerror());
		exit(EXIT_FAILURE);
	}
	*(void **)&cuda.set_device = dlsym(cuda.lib, "cudaSetDevice");
	*(void **)&cuda.malloc = dlsym(cuda.lib, "cudaMalloc");
	*(void **)&cuda.free = dlsym(cuda.lib, "cudaFree");
	*(void **)&cuda.memset = dlsym(cuda.lib, "cudaMemset");
	*(void **)&cuda.memcpy = dlsym(cuda.lib, "cudaMemcpy");
	*(void **)&cuda.error_string = dlsym(cuda.lib, "cudaGetErrorString");
	if (!cuda.set_device || !cuda.malloc || !cuda.free || !cuda.memset || !cuda.memcpy ||
	    !cuda.error_string) {
		fprintf(stderr, "%s: --use_vram: libcudart lacks a symbol\n", PROG);
		exit(EXIT_FAILURE);
	}
	err = cuda.set_device((int)opt.gpu_id);
	if (err)
		cuda_die("cudaSetDevice", err);
}

/* The bench's buffers: host memory (buffer_alloc), or GPU memory with
 * --use_vram.  Freed with mem_free(p, size). */
static uint8_t *mem_alloc(uint64_t size)
{
	void *p = NULL;
	int err;

	if (!opt.use_vram)
		return buffer_alloc(size);
	cuda_load();
	err = cuda.malloc(&p, (size_t)size);
	if (err)
		cuda_die("cudaMalloc", err);
	if (opt.init_mem && (err = cuda.memset(p, 0xCC, (size_t)size)) != 0)
		cuda_die("cudaMemset", err);
	return p;
}

static void mem_free(uint8_t *p, uint64_t size)
{
	if (opt.use_vram)
		cuda.free(p);
	else
		munmap(p, size);
}

/* Copy between the bench's buffers and host memory (either may be GPU memory). */
static void mem_copy(void *dst, const void *src, uint64_t len)
{
	int err;

	if (!opt.use_vram) {
		memcpy(dst, src, len);
		return;
	}
	err = cuda.memcpy(dst, src, (size_t)len, CUDA_MEMCPY_DEFAULT);
	if (err)
		cuda_die("cudaMemcpy", err);
}

static void json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(out, "\\%c", c);
		else if (c < 0x20)
			fprintf(out, "\\u%04x", c);
		else
			fputc(c, out);
	}
	fputc('"', out);
}

/* ------------------------------------------------------------------------ */
/* Watchdog                                                                  */

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	uint64_t deadline_ns; /* 0 = disarmed */
	const char *what;
} wd = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *watchdog_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&wd.lock);
	for (;;) {
		uint64_t deadline = wd.deadline_ns;
		struct timespec ts;

		if (!deadline) {
			pthread_cond_wait(&wd.cond, &wd.lock);
			continue;
		}
		if (now_ns() >= deadline) {
			fprintf(stderr, "%s: watchdog: %s did not finish in time; giving up\n",
				PROG, wd.what);
			fflush(stdout);
			_exit(EXIT_WATCHDOG);
		}
		ts.tv_sec = (time_t)(deadline / 1000000000ull);
		ts.tv_nsec = (long)(deadline % 1000000000ull);
		pthread_cond_timedwait(&wd.cond, &wd.lock, &ts);
	}
	return NULL;
}

static void watchdog_start(void)
{
	pthread_condattr_t attr;
	pthread_t tid;

	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&wd.cond, &attr);
	pthread_condattr_destroy(&attr);
	if (pthread_create(&tid, NULL, watchdog_main, NULL)) {
		fprintf(stderr, "%s: cannot start the watchdog thread\n", PROG);
		exit(EXIT_FAILURE);
	}
	pthread_detach(tid);
}

static void watchdog_arm(const char *what, double seconds)
{
	pthread_mutex_lock(&wd.lock);
	wd.what = what;
	wd.deadline_ns = now_ns() + (uint64_t)(seconds * 1e9);
	pthread_cond_signal(&wd.cond);
	pthread_mutex_unlock(&wd.lock);
}

static void watchdog_disarm(void)
{
	pthread_mutex_lock(&wd.lock);
	wd.deadline_ns = 0;
	pthread_cond_signal(&wd.cond);
	pthread_mutex_unlock(&wd.lock);
}

/* ------------------------------------------------------------------------ */
/* Latency histogram: log-linear, 64 sub-buckets per power of two (under 2 %
 * error), exact below 64 ns, fixed size so recording never allocates.      */

#define HIST_SUB_BITS 6
#define HIST_SUB      (1u << HIST_SUB_BITS)
#define HIST_MAX_EXP  44 /* 2^44 ns, about 4.9 hours */
#define HIST_BUCKETS  (HIST_SUB + (HIST_MAX_EXP - HIST_SUB_BITS) * HIST_SUB)

struct hist {
	uint64_t count;
	uint64_t bucket[HIST_BUCKETS];
};

static unsigned hist_index(uint64_t v)
{
	unsigned e;

	if (v < HIST_SUB)
		return (unsigned)v;
	e = 63u - (unsigned)__builtin_clzll(v);
	if (e >= HIST_MAX_EXP)
		return HIST_BUCKETS - 1;
	return HIST_SUB + (e - HIST_SUB_BITS) * HIST_SUB +
	       (unsigned)((v >> (e - HIST_SUB_BITS)) & (HIST_SUB - 1));
}

/* Middle of bucket idx. */
static uint64_t hist_value(unsigned idx)
{
	unsigned k, shift;

	if (idx < HIST_SUB)
		return idx;
	k = idx - HIST_SUB;
	shift = k / HIST_SUB;
	return ((uint64_t)(HIST_SUB + k % HIST_SUB) << shift) + ((1ull << shift) >> 1);
}

static void hist_add(struct hist *h, uint64_t v)
{
	h->count++;
	h->bucket[hist_index(v)]++;
}

static void hist_merge(struct hist *dst, const struct hist *src)
{
	dst->count += src->count;
	for (unsigned i = 0; i < HIST_BUCKETS; i++)
		dst->bucket[i] += src->bucket[i];
}

/* q in (0, 1]; nanoseconds; 0 when empty. */
static uint64_t hist_quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	rank = (uint64_t)(q * (double)h->count);
	if ((double)rank < q * (double)h->count)
		rank++;
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < HIST_BUCKETS; i++) {
		seen += h->bucket[i];
		if (seen >= rank)
			return hist_value(i);
	}
	return hist_value(HIST_BUCKETS - 1);
}

/* ------------------------------------------------------------------------ */
/* Engine set-up shared by both modes                                        */

static const struct {
	const char *name;
	uint64_t bytes;
} rate_units[] = {
	{"GB", 1000000000ull}, {"GiB", 1ull << 30}, {"Gb", 1000000000ull / 8},
	{"MB", 1000000ull},    {"MiB", 1ull << 20}, {"Mb", 1000000ull / 8},
	{"KB", 1000ull},       {"KiB", 1ull << 10}, {"Kb", 1000ull / 8},
};

static uint64_t rate_unit_bytes(void)
{
	for (size_t i = 0; i < sizeof(rate_units) / sizeof(rate_units[0]); i++)
		if (!strcmp(rate_units[i].name, opt.report_unit))
			return rate_units[i].bytes;
	/* Upstream warns and falls back to GB. */
	fprintf(stderr,
		"%s: WARNING: report_unit only supports GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb, not %s; "
		"using GB\n",
		PROG, opt.report_unit);
	opt.report_unit = "GB";
	return 1000000000ull;
}

/*
 * The engine has no call for an RDMA device list or a priority matrix; its
 * RDMA transport reads upstream's environment variables instead, so the two
 * flags are mapped onto those when the user gives them.  Upstream's default
 * device name (mlx5_2) is not forced on anyone.
 */
static void apply_rdma_flags(void)
{
	if (flag_by_name("device_name")->set && opt.device_name[0])
		setenv("MC_TE_FILTERS", opt.device_name, 0);
	if (opt.nic_priority_matrix[0])
		setenv("MC_CUSTOM_TOPO_JSON", opt.nic_priority_matrix, 0);
}

static struct mc_te *engine_open(void)
{
	struct mc_te_params p;
	struct mc_te *te;
	mc_status st;

	apply_rdma_flags();
	if (!opt.shm)
		setenv("MC_SHM_DISABLE", "1", 1);
	/* the engine reads it there, and refuses a file it cannot use */
	if (opt.auth_secret_file[0])
		setenv("MC_AUTH_SECRET_FILE", opt.auth_secret_file, 1);
	memset(&p, 0, sizeof(p));
	p.field_mask = MC_TE_PARAM_METADATA | MC_TE_PARAM_LOCAL_NAME | MC_TE_PARAM_PROTOCOL;
	p.metadata_uri = opt.metadata_server;
	p.local_name = opt.local_server_name;
	p.protocol = opt.protocol;
	if (opt.workers > 0) {
		p.field_mask |= MC_TE_PARAM_WORKERS;
		p.workers = (unsigned)opt.workers;
	}
	if (opt.conns_per_peer > 0) {
		p.field_mask |= MC_TE_PARAM_CONNS_PER_PEER;
		p.conns_per_peer = (unsigned)opt.conns_per_peer;
	}
	watchdog_arm("engine start-up", SETUP_TIMEOUT_S);
	st = mc_te_new(&p, &te);
	watchdog_disarm();
	if (st != MC_OK)
		die_status("cannot create the transfer engine", st);
	return te;
}

static void buffer_register(struct mc_te *te, uint8_t *buf, uint64_t len)
{
	char location[32] = "cpu:0";
	mc_status st;

	if (opt.use_vram)
		snprintf(location, sizeof(location), "cuda:%d", (int)opt.gpu_id);
	st = mc_te_register(te, buf, (size_t)len, location, true);

	if (st != MC_OK)
		die_status("cannot register the buffer", st);
}

/* ------------------------------------------------------------------------ */
/* Target                                                                    */

static int run_target(void)
{
	struct mc_te *te = engine_open();
	uint8_t *buf = mem_alloc(opt.buffer_size);
	const char *name;

	buffer_register(te, buf, opt.buffer_size);
	name = mc_te_local_name(te);
	if (opt.json) {
		printf("{\"mode\":\"target\",\"segment_name\":");
		json_string(stdout, name);
		printf(",\"buffer\":%" PRIu64 ",\"length\":%" PRIu64 "}\n",
		       (uint64_t)(uintptr_t)buf, opt.buffer_size);
	} else {
		printf("%s\n", name);
	}
	fflush(stdout);
	fprintf(stderr, "%s: target %s serving %" PRIu64 " bytes; SIGINT or SIGTERM to stop\n",
		PROG, name, opt.buffer_size);

	while (!stop_requested)
		sleep_ns(100000000ull);

	watchdog_arm("target shutdown", SETUP_TIMEOUT_S);
	mc_te_deregister(te, buf);
	mc_te_free(te);
	watchdog_disarm();
	mem_free(buf, opt.buffer_size);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Initiator                                                                 */

struct bench {
	struct mc_te *te;
	mc_segment_id seg;
	int opcode;
	enum poll_mode poll;
	uint64_t remote_base;
	uint64_t remote_len;
	uint8_t *local;
	uint64_t local_len;
};

/* One measured run: a point of the sweep, or the whole default run. */
struct run {
	struct bench *b;
	uint64_t block;
	unsigned batch;
	unsigned threads;
	atomic_bool running;
	atomic_bool failed;
};

struct worker {
	pthread_t tid;
	unsigned index;
	struct run *run;
	struct mc_xfer_req *reqs; /* batch entries, built once (or per batch: --window) */
	struct hist *hist;
	uint64_t batches;
	/* First failure, for the report. */
	const char *fail_what;
	mc_status fail_status;
	int fail_state;
	char fail_detail[256];
};

struct result {
	double seconds;
	uint64_t batches;
	uint64_t requests;
	uint64_t bytes;
	struct hist *hist;
};

static void worker_fail(struct worker *w, const char *what, mc_status st, int state)
{
	w->fail_what = what;
	w->fail_status = st;
	w->fail_state = state;
	/* A failed task is described by its status; the thread's last error
	 * text belongs to the last failed call. */
	snprintf(w->fail_detail, sizeof(w->fail_detail), "%s", state < 0 ? mc_last_error() : "");
	atomic_store(&w->run->failed, true);
	atomic_store(&w->run->running, false);
}

/* Wait for batch id to end; true when every task completed. */
static bool batch_finish(struct worker *w, mc_batch_id id)
{
	struct bench *b = w->run->b;
	struct mc_xfer_status xs = {.state = -1}; /* -1: the call failed before a state */
	mc_status st;

	if (b->poll == POLL_WAIT) {
		st = mc_te_batch_wait(b->te, id, -1, &xs);
		if (st != MC_OK) {
			worker_fail(w, "batch failed", xs.error ? xs.error : st, xs.state);
			return false;
		}
		return true;
	}
	for (;;) {
		st = mc_te_batch_status(b->te, id, &xs);
		if (st != MC_OK) {
			worker_fail(w, "cannot read the batch status", st, -1);
			return false;
		}
		if (xs.state == MC_XFER_COMPLETED)
			return true;
		if (xs.state != MC_XFER_WAITING && xs.state != MC_XFER_PENDING) {
			worker_fail(w, "batch failed", xs.error, xs.state);
			return false;
		}
		if (b->poll == POLL_YIELD)
			sched_yield();
		else
			cpu_relax();
	}
}

/* Offset of request slot inside a buffer of len bytes: upstream's block *
 * slot, wrapped to a whole block inside the buffer. */
static uint64_t req_offset(uint64_t block, uint64_t slot, uint64_t len)
{
	return block * (slot % (len / block));
}

/*
 * Build worker w's requests for its round-th batch.  Request i of thread t
 * takes slot i * threads + t, as upstream's bench; with --window the slots
 * of batch round follow those of batch round - 1 inside the first --window
 * bytes, so consecutive batches walk memory as a store's puts do.
 */
static void fill_reqs(struct worker *w, uint64_t round)
{
	struct run *run = w->run;
	struct bench *b = run->b;
	uint64_t llen = opt.window && opt.window < b->local_len ? opt.window : b->local_len;
	uint64_t rlen = opt.window && opt.window < b->remote_len ? opt.window : b->remote_len;

	if (llen < run->block || rlen < run->block) /* a window below the block: none */
		llen = b->local_len, rlen = b->remote_len;

	for (unsigned i = 0; i < run->batch; i++) {
		uint64_t slot =
			((opt.window ? round * run->batch : 0) + i) * run->threads + w->index;
		struct mc_xfer_req *r = &w->reqs[i];

		r->opcode = b->opcode;
		r->source = b->local + req_offset(run->block, slot, llen);
		r->target_id = b->seg;
		r->target_offset = b->remote_base + req_offset(run->block, slot, rlen);
		r->length = run->block;
	}
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct run *run = w->run;
	struct bench *b = run->b;
	mc_batch_id id = MC_INVALID_BATCH;
	uint64_t batches = 0;
	mc_status st;

	while (atomic_load_explicit(&run->running, memory_order_relaxed)) {
		uint64_t t0 = now_ns();

		if (opt.window && batches)
			fill_reqs(w, batches);
		st = mc_te_batch_new(b->te, run->batch, &id);
		if (st != MC_OK) {
			worker_fail(w, "cannot allocate a batch", st, -1);
			break;
		}
		st = mc_te_submit(b->te, id, w->reqs, run->batch);
		if (st != MC_OK) {
			worker_fail(w, "cannot submit the batch", st, -1);
			break;
		}
		if (!batch_finish(w, id))
			break;
		st = mc_te_batch_free(b->te, id);
		if (st != MC_OK) {
			worker_fail(w, "cannot free the batch", st, -1);
			break;
		}
		id = MC_INVALID_BATCH;
		hist_add(w->hist, now_ns() - t0);
		batches++;
	}
	/* A failed batch may still have tasks in flight. */
	if (id != MC_INVALID_BATCH)
		mc_te_batch_discard(b->te, id);
	w->batches = batches;
	return NULL;
}

/* Returns false when a transfer failed (the reason is already printed). */
static bool run_once(struct bench *b, uint64_t block, unsigned batch, unsigned threads,
		     double duration, struct result *res)
{
	struct run run = {.b = b, .block = block, .batch = batch, .threads = threads};
	struct worker *w = calloc(threads, sizeof(*w));
	struct mc_xfer_req *reqs = calloc((size_t)threads * batch, sizeof(*reqs));
	struct hist *hists = calloc(threads, sizeof(*hists));
	uint64_t start, deadline, stop;
	unsigned started = 0;
	bool ok = true;

	if (!w || !reqs || !hists) {
		fprintf(stderr, "%s: out of memory\n", PROG);
		exit(EXIT_FAILURE);
	}
	for (unsigned t = 0; t < threads; t++) {
		w[t].index = t;
		w[t].run = &run;
		w[t].reqs = reqs + (size_t)t * batch;
		w[t].hist = &hists[t];
		fill_reqs(&w[t], 0);
	}

	atomic_store(&run.running, true);
	atomic_store(&run.failed, false);
	/* The last round of batches drains after the deadline; allow it at a
	 * pessimistic WATCHDOG_MIN_RATE on top of the fixed grace. */
	watchdog_arm("the transfer run",
		     duration + WATCHDOG_GRACE_S +
			     (double)block * batch * threads / WATCHDOG_MIN_RATE);
	start = now_ns();
	deadline = start + (uint64_t)(duration * 1e9);
	for (; started < threads; started++) {
		if (pthread_create(&w[started].tid, NULL, worker_main, &w[started])) {
			fprintf(stderr, "%s: cannot start thread %u\n", PROG, started);
			atomic_store(&run.running, false);
			ok = false;
			break;
		}
	}
	for (;;) {
		uint64_t now = now_ns();

		if (now >= deadline || stop_requested || atomic_load(&run.failed))
			break;
		sleep_ns(deadline - now < 10000000ull ? deadline - now : 10000000ull);
	}
	atomic_store(&run.running, false);
	for (unsigned t = 0; t < started; t++)
		pthread_join(w[t].tid, NULL);
	stop = now_ns();
	watchdog_disarm();

	memset(res, 0, sizeof(*res));
	res->seconds = (double)(stop - start) / 1e9;
	res->hist = calloc(1, sizeof(*res->hist));
	if (!res->hist) {
		fprintf(stderr, "%s: out of memory\n", PROG);
		exit(EXIT_FAILURE);
	}
	for (unsigned t = 0; t < started; t++) {
		res->batches += w[t].batches;
		hist_merge(res->hist, w[t].hist);
		if (w[t].fail_what) {
			char what[128];

			ok = false;
			if (w[t].fail_state >= 0)
				snprintf(what, sizeof(what), "thread %u: %s (task state %d)", t,
					 w[t].fail_what, w[t].fail_state);
			else
				snprintf(what, sizeof(what), "thread %u: %s", t, w[t].fail_what);
			report_status(what, w[t].fail_status, w[t].fail_detail);
		}
	}
	res->requests = res->batches * batch;
	res->bytes = res->requests * block;
	free(hists);
	free(reqs);
	free(w);
	return ok;
}

static void print_result(const struct result *res, uint64_t block, unsigned batch, unsigned threads)
{
	uint64_t unit = rate_unit_bytes();
	double rate = res->seconds > 0 ? (double)res->bytes / res->seconds / (double)unit : 0;
	double rps = res->seconds > 0 ? (double)res->requests / res->seconds : 0;
	double p50 = (double)hist_quantile(res->hist, 0.50) / 1e3;
	double p99 = (double)hist_quantile(res->hist, 0.99) / 1e3;
	double p999 = (double)hist_quantile(res->hist, 0.999) / 1e3;
	int prec = (int)opt.report_precision;

	if (opt.json) {
		printf("{\"mode\":\"initiator\",\"operation\":");
		json_string(stdout, opt.operation);
		printf(",\"protocol\":");
		json_string(stdout, opt.protocol);
		printf(",\"segment\":");
		json_string(stdout, opt.segment_id);
		printf(",\"block_size\":%" PRIu64 ",\"batch_size\":%u,\"threads\":%u", block, batch,
		       threads);
		printf(",\"duration\":%.6f,\"batch_count\":%" PRIu64 ",\"requests\":%" PRIu64
		       ",\"bytes\":%" PRIu64,
		       res->seconds, res->batches, res->requests, res->bytes);
		printf(",\"throughput\":%.*f,\"unit\":\"%s/s\",\"gb_per_s\":%.6f,\"requests_per_s\":%.1f",
		       prec, rate, opt.report_unit,
		       res->seconds > 0 ? (double)res->bytes / res->seconds / 1e9 : 0, rps);
		printf(",\"latency_us\":{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f}}\n", p50, p99,
		       p999);
		return;
	}
	printf("Test completed: duration %.2f, batch count %" PRIu64 ", throughput %.*f %s/s\n",
	       res->seconds, res->batches, prec, rate, opt.report_unit);
	if (opt.latency)
		printf("latency: batch p50 %.1f us p99 %.1f us p999 %.1f us, requests/s %.0f\n",
		       p50, p99, p999, rps);
}

static void print_sweep_line(const struct result *res, uint64_t block, unsigned batch,
			     unsigned threads)
{
	double gbs = res->seconds > 0 ? (double)res->bytes / res->seconds / 1e9 : 0;
	double rps = res->seconds > 0 ? (double)res->requests / res->seconds : 0;
	double p50 = (double)hist_quantile(res->hist, 0.50) / 1e3;
	double p99 = (double)hist_quantile(res->hist, 0.99) / 1e3;

	if (opt.json) {
		printf("{\"sweep\":true,\"operation\":");
		json_string(stdout, opt.operation);
		printf(",\"block_size\":%" PRIu64 ",\"batch_size\":%u,\"threads\":%u"
		       ",\"duration\":%.6f,\"bytes\":%" PRIu64 ",\"gb_per_s\":%.6f"
		       ",\"requests_per_s\":%.1f,\"p50_us\":%.3f,\"p99_us\":%.3f}\n",
		       block, batch, threads, res->seconds, res->bytes, gbs, rps, p50, p99);
	} else {
		printf("sweep op=%s block=%" PRIu64 " batch=%u threads=%u GB/s=%.*f req/s=%.0f "
		       "p50_us=%.1f p99_us=%.1f\n",
		       opt.operation, block, batch, threads, (int)opt.report_precision, gbs, rps,
		       p50, p99);
	}
	fflush(stdout);
}

/* tebench's grid: block 4 KiB..64 MiB, batch 1..128, threads 1..--threads,
 * all powers of two, skipping cases that do not fit in the buffers. */
static bool run_sweep(struct bench *b)
{
	uint64_t room = b->local_len < b->remote_len ? b->local_len : b->remote_len;
	unsigned skipped = 0;

	for (uint64_t block = 4096; block <= (64ull << 20); block <<= 1) {
		for (unsigned batch = 1; batch <= 128; batch <<= 1) {
			for (unsigned threads = 1; threads <= (unsigned)opt.threads;
			     threads <<= 1) {
				struct result res;
				bool ok;

				if (block * batch * threads > room) {
					skipped++;
					continue;
				}
				if (stop_requested)
					return true;
				ok = run_once(b, block, batch, threads, opt.duration, &res);
				print_sweep_line(&res, block, batch, threads);
				free(res.hist);
				if (!ok)
					return false;
			}
		}
	}
	if (skipped)
		fprintf(stderr, "%s: sweep skipped %u cases larger than the buffer\n", PROG,
			skipped);
	return true;
}

/* Fill with a pattern that depends on the position and on seed. */
static void pattern_fill(uint8_t *p, uint64_t len, uint64_t seed)
{
	for (uint64_t off = 0; off + 8 <= len; off += 8) {
		uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ seed;

		x ^= x >> 31;
		x *= 0xBF58476D1CE4E5B9ull;
		x ^= x >> 29;
		memcpy(p + off, &x, 8);
	}
	for (uint64_t off = len & ~7ull; off < len; off++)
		p[off] = (uint8_t)(seed >> (off & 7));
}

/* Transfer [0, len) between buf and the remote base in block-sized requests,
 * batch_size at a time. */
static mc_status verify_transfer(struct bench *b, int opcode, uint8_t *buf, uint64_t len,
				 uint64_t block)
{
	unsigned batch = (unsigned)opt.batch_size;
	struct mc_xfer_req *reqs = calloc(batch, sizeof(*reqs));
	mc_status st = MC_OK;
	uint64_t off = 0;

	if (!reqs)
		return MC_ERR_NOMEM;
	while (off < len && st == MC_OK) {
		unsigned n = 0;

		for (; n < batch && off < len; n++) {
			uint64_t chunk = len - off < block ? len - off : block;

			reqs[n].opcode = opcode;
			reqs[n].source = buf + off;
			reqs[n].target_id = b->seg;
			reqs[n].target_offset = b->remote_base + off;
			reqs[n].length = chunk;
			off += chunk;
		}
		st = mc_te_transfer_sync(b->te, reqs, n, (int64_t)(SETUP_TIMEOUT_S * 1000 / 2));
	}
	free(reqs);
	return st;
}

static bool run_verify(struct bench *b)
{
	uint64_t len = b->remote_len < VERIFY_MAX_BYTES ? b->remote_len : VERIFY_MAX_BYTES;
	uint64_t seed = now_ns() ^ ((uint64_t)getpid() << 32);
	uint64_t block = opt.block_size < len ? opt.block_size : len;
	uint8_t *src = mem_alloc(len), *dst = mem_alloc(len);
	/* what src holds and what dst got, in host memory (src, dst may be GPU memory) */
	uint8_t *want = buffer_alloc(len), *got = buffer_alloc(len);
	uint64_t bad = 0, first_bad = 0;
	mc_status st;

	buffer_register(b->te, src, len);
	buffer_register(b->te, dst, len);
	pattern_fill(want, len, seed);
	mem_copy(src, want, len);
	memset(got, 0, len);
	mem_copy(dst, got, len);

	watchdog_arm("verification", SETUP_TIMEOUT_S + 5);
	st = verify_transfer(b, MC_OP_WRITE, src, len, block);
	if (st != MC_OK) {
		report_status("verify: write failed", st, mc_last_error());
		goto out;
	}
	st = verify_transfer(b, MC_OP_READ, dst, len, block);
	if (st != MC_OK) {
		report_status("verify: read failed", st, mc_last_error());
		goto out;
	}
	mem_copy(got, dst, len);
	for (uint64_t i = 0; i < len; i++) {
		if (want[i] != got[i]) {
			if (!bad)
				first_bad = i;
			bad++;
		}
	}
	if (bad)
		fprintf(stderr,
			"%s: verify: MISMATCH: %" PRIu64 " of %" PRIu64
			" bytes differ, first at offset %" PRIu64 " (wrote 0x%02x, read 0x%02x)\n",
			PROG, bad, len, first_bad, want[first_bad], got[first_bad]);
	else if (opt.json)
		printf("{\"verify\":\"ok\",\"bytes\":%" PRIu64 ",\"block_size\":%" PRIu64 "}\n",
		       len, block);
	else
		printf("verify: OK, %" PRIu64 " bytes written and read back in %" PRIu64
		       "-byte requests\n",
		       len, block);
out:
	watchdog_disarm();
	mc_te_deregister(b->te, src);
	mc_te_deregister(b->te, dst);
	mem_free(src, len);
	mem_free(dst, len);
	munmap(want, len);
	munmap(got, len);
	return st == MC_OK && !bad;
}

/* One batch before the sweep so that connection set-up is not in case 1. */
static bool warm_up(struct bench *b)
{
	struct mc_xfer_req r = {
		.opcode = b->opcode,
		.source = b->local,
		.target_id = b->seg,
		.target_offset = b->remote_base,
		.length = 4096 < b->remote_len ? 4096 : b->remote_len,
	};
	mc_status st = mc_te_transfer_sync(b->te, &r, 1, (int64_t)(SETUP_TIMEOUT_S * 1000));

	if (st != MC_OK)
		report_status("warm-up transfer failed", st, mc_last_error());
	return st == MC_OK;
}

static int run_initiator(void)
{
	struct bench b = {0};
	struct result res;
	mc_status st;
	bool ok = true;

	if (!strcmp(opt.operation, "read")) {
		b.opcode = MC_OP_READ;
	} else if (!strcmp(opt.operation, "write")) {
		b.opcode = MC_OP_WRITE;
	} else {
		fprintf(stderr, "%s: unsupported operation '%s': must be read or write\n", PROG,
			opt.operation);
		return EXIT_USAGE;
	}
	if (!strcmp(opt.poll, "spin")) {
		b.poll = POLL_SPIN;
	} else if (!strcmp(opt.poll, "yield")) {
		b.poll = POLL_YIELD;
	} else if (!strcmp(opt.poll, "wait")) {
		b.poll = POLL_WAIT;
	} else {
		fprintf(stderr, "%s: --poll must be spin, yield or wait\n", PROG);
		return EXIT_USAGE;
	}
	rate_unit_bytes(); /* warn about a bad unit before the run, as upstream */

	b.te = engine_open();
	b.local_len = opt.buffer_size;
	b.local = mem_alloc(b.local_len);
	buffer_register(b.te, b.local, b.local_len);

	watchdog_arm("opening the target segment", SETUP_TIMEOUT_S);
	st = mc_te_open_segment(b.te, opt.segment_id, &b.seg);
	if (st != MC_OK)
		die_status("cannot open the target segment", st);
	st = mc_te_segment_buffer(b.te, b.seg, 0, &b.remote_base, &b.remote_len);
	if (st != MC_OK)
		die_status("cannot read buffer 0 of the target segment", st);
	watchdog_disarm();

	if (!opt.sweep) {
		uint64_t room = b.local_len < b.remote_len ? b.local_len : b.remote_len;

		if (opt.block_size > room) {
			fprintf(stderr,
				"%s: block_size %" PRIu64 " exceeds the buffer (local %" PRIu64
				", remote %" PRIu64 ")\n",
				PROG, opt.block_size, b.local_len, b.remote_len);
			return EXIT_FAILURE;
		}
		if (opt.block_size > room / (uint64_t)opt.batch_size / (uint64_t)opt.threads)
			fprintf(stderr,
				"%s: note: block_size x batch_size x threads exceeds the buffer; "
				"offsets wrap\n",
				PROG);
		ok = run_once(&b, opt.block_size, (unsigned)opt.batch_size, (unsigned)opt.threads,
			      opt.duration, &res);
		if (ok)
			print_result(&res, opt.block_size, (unsigned)opt.batch_size,
				     (unsigned)opt.threads);
		free(res.hist);
	} else {
		ok = warm_up(&b) && run_sweep(&b);
	}
	fflush(stdout);

	if (ok && opt.verify)
		ok = run_verify(&b);

	watchdog_arm("engine shutdown", SETUP_TIMEOUT_S);
	mc_te_close_segment(b.te, b.seg);
	mc_te_deregister(b.te, b.local);
	mc_te_free(b.te);
	watchdog_disarm();
	mem_free(b.local, b.local_len);
	return ok ? 0 : EXIT_FAILURE;
}

int main(int argc, char **argv)
{
	static char hostname[256];

	if (gethostname(hostname, sizeof(hostname) - 1))
		snprintf(hostname, sizeof(hostname), "localhost");
	opt.local_server_name = hostname;
	parse_flags(argc, argv);

	if (opt.json)
		setvbuf(stdout, NULL, _IOLBF, 0);
	install_signals();
	watchdog_start();

	if (!strcmp(opt.backend, "tent")) {
		fprintf(stderr, "%s: the TENT backend is not available in this build\n", PROG);
		return EXIT_FAILURE;
	}
	if (strcmp(opt.backend, "classic")) {
		fprintf(stderr, "%s: unsupported backend '%s': must be classic or tent\n", PROG,
			opt.backend);
		return EXIT_FAILURE;
	}
	if (!strcmp(opt.mode, "initiator"))
		return run_initiator();
	if (!strcmp(opt.mode, "target"))
		return run_target();
	fprintf(stderr, "%s: unsupported mode '%s': must be initiator or target\n", PROG, opt.mode);
	return EXIT_FAILURE;
}
