/*
 * store_node - a scriptable Mooncake Store client process for the
 * integration tests, scripts/demo.sh and the benches' helpers.
 *
 * It sets up one store client through the public API only
 * (<mooncake/store.h>): it connects to the master, contributes a global
 * segment of --segment bytes, passes --buffer as local_buffer_size
 * (accepted, unused: nothing stages through it), and maps a scratch region
 * of --zbuf bytes that it registers with mc_store_register_buffer for the
 * zero-copy calls.  Both
 * the segment and the scratch region are touched lazily, so large sizes
 * cost memory only as they fill.  Then it prints
 *
 *   READY hostname=<host:port> pid=<pid> segment=<bytes> buffer=<bytes> zbuf=<bytes>
 *
 * (or "FAILED <STATUS> <text>" and exits 1) and executes one command per
 * line from stdin, answering exactly one line on stdout per command
 * (flushed).  Replies start with "OK" or "ERR <NAME> <code>", where NAME is
 * the mc_status name (ERR_OBJECT_NOT_FOUND, ...) and code its number
 * (-704); malformed input gets ERR BADCMD / BADARG / TOOLONG with code 0.
 *
 * Values are generated, never read from stdin: object data for (SIZE,
 * SEED) is a xorshift stream, and every command that moves data reports
 * the XXH3-64 of what it wrote or read, so two processes can check a
 * transfer bit by bit by comparing checksums.  KEY and PATTERN are
 * percent-decoded (%20 is a space); the token "" stands for the empty
 * string.  Sizes take k/m/g suffixes.  OPTS are put options:
 * seg=NAME (preferred segment; repeat for a list), rep=N (replicas),
 * hard (hard pin), soft (soft pin), same (prefer the same node).
 *
 *   put KEY SIZE SEED [OPTS]       copy-based put   -> OK xxh3=<hex> ms=<t>
 *   put_from KEY SIZE SEED [OPTS]  zero-copy put from the scratch buffer
 *   upsert KEY SIZE SEED [OPTS]    copy-based upsert
 *   get KEY                        -> OK size=<n> xxh3=<hex> ms=<t>
 *   get_into KEY [CAP]             zero-copy get into the scratch buffer
 *   putn PREFIX COUNT SIZE SEED [zc] [OPTS]
 *                                  COUNT puts of keys PREFIX<i>, data seed
 *                                  SEED+i -> OK n=<n> bytes=<b> ms=<t>
 *                                  mbps=<MB/s> xxh3=<hex of all checksums>
 *   bput PREFIX COUNT SIZE SEED [OPTS]
 *                                  one batch put (zero-copy) of keys
 *                                  PREFIX<i>, seed SEED+i, at most 64
 *                                  -> OK <status of each key>...
 *   getn PREFIX COUNT [SIZE SEED] [zc]
 *                                  COUNT gets; with SIZE and SEED each
 *                                  object is also compared with the data
 *                                  putn generated -> as putn, plus bad=<n>
 *                                  (objects that differ; failed gets end
 *                                  the command with ERR)
 *   getloop PREFIX COUNT SECONDS FILE
 *                                  gets of keys PREFIX0..COUNT-1 in turn for
 *                                  SECONDS, one line each in FILE: "<CLOCK_
 *                                  MONOTONIC ms> <latency ms> <rc>" -> OK
 *                                  n=<gets> fails=<n>
 *   exist KEY                      -> OK 1 | OK 0
 *   bexist KEY...                  -> OK <r1> <r2> ... (1, 0 or a status)
 *   bget_into KEY...               one batch_get_into, each key into its
 *                                  share of the scratch buffer
 *                                  -> OK <size>:<xxh3 hex> | <status> ...
 *   size KEY                       -> OK <bytes>
 *   replicas KEY                   -> OK n=<n> [<segment>:<size>:<status>]...
 *   remove KEY [force]
 *   remove_regex PATTERN [force]   -> OK <count>
 *   remove_all [force]             -> OK <count>
 *   health                         -> OK <0|1|2>
 *   hostname                       -> OK <host:port>
 *   close                          mc_store_close (unmounts the segment)
 *   hold                           -> OK holding, then serves its segment
 *                                  until a signal (SIGTERM: clean exit)
 *   quit                           -> OK bye, then the client is freed
 *
 * End of input behaves as quit; SIGTERM or SIGINT make the process close
 * the client and exit 0 (also while it waits for input or holds).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/store.h>
#include <xxhash.h>

#include "node_util.h"

#define MAX_LINE  (64 * 1024)
#define MAX_ARGS  1024
#define MAX_PREFS 16
#define KEY_CAP	  4200 /* a key built from a prefix and a counter */

static struct mc_store *store;
static uint8_t *zbuf; /* registered scratch region */
static size_t zbuf_size;
static volatile sig_atomic_t stop_signal;

/* ------------------------------------------------------------------ */
/* Output */

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void reply_err(int64_t st, double ms, const char *what)
{
	reply("ERR %s %" PRId64 " ms=%.3f %s: %s", mc_status_name((mc_status)st), st, ms, what,
	      mc_last_error());
}

/* ------------------------------------------------------------------ */
/* Parsing */

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode s in place; "" (two quote characters) becomes empty. */
static char *decode_arg(char *s)
{
	char *w = s;

	if (!strcmp(s, "\"\""))
		return s + 2;
	for (const char *r = s; *r; r++) {
		if (r[0] == '%' && hexval(r[1]) >= 0 && hexval(r[2]) >= 0) {
			*w++ = (char)(hexval(r[1]) * 16 + hexval(r[2]));
			r += 2;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
	return s;
}

struct put_opts {
	struct mc_store_config cfg;
	const char *prefs[MAX_PREFS];
	bool zero_copy; /* putn/getn: zc */
};

/* Parse OPTS from argv[from..]; false after replying on a bad one. */
static bool parse_opts(int argc, char **argv, int from, struct put_opts *o)
{
	uint64_t v;

	memset(o, 0, sizeof(*o));
	for (int i = from; i < argc; i++) {
		char *a = argv[i];

		if (!strncmp(a, "seg=", 4)) {
			if (o->cfg.n_preferred_segments == MAX_PREFS) {
				reply("ERR BADARG 0 too many seg= options");
				return false;
			}
			o->prefs[o->cfg.n_preferred_segments++] = decode_arg(a + 4);
		} else if (!strncmp(a, "rep=", 4)) {
			if (!parse_u64(a + 4, &v) || v > 64) {
				reply("ERR BADARG 0 bad rep=");
				return false;
			}
			o->cfg.replica_num = (uint32_t)v;
		} else if (!strcmp(a, "hard")) {
			o->cfg.with_hard_pin = true;
		} else if (!strcmp(a, "soft")) {
			o->cfg.with_soft_pin = true;
		} else if (!strcmp(a, "same")) {
			o->cfg.prefer_alloc_in_same_node = true;
		} else if (!strcmp(a, "zc")) {
			o->zero_copy = true;
		} else {
			reply("ERR BADARG 0 unknown option '%.64s'", a);
			return false;
		}
	}
	/* One preferred segment goes in the single field (upstream's
	 * deprecated but common form), several in the list. */
	if (o->cfg.n_preferred_segments == 1) {
		o->cfg.preferred_segment = o->prefs[0];
		o->cfg.n_preferred_segments = 0;
	} else if (o->cfg.n_preferred_segments > 1) {
		o->cfg.preferred_segments = o->prefs;
	}
	return true;
}

/* ------------------------------------------------------------------ */
/* Data */

/* Checksum of the data (SIZE, SEED) without keeping it. */
static uint64_t expected_xxh3(uint8_t *tmp, size_t len, uint64_t seed)
{
	fill_bytes(tmp, len, seed);
	return XXH3_64bits(tmp, len);
}

/* A buffer for generated values: the scratch region for zero-copy calls
 * (it is registered), a heap buffer otherwise. */
static uint8_t *value_buf(size_t len, bool zero_copy, bool *heap_out)
{
	*heap_out = false;
	if (zero_copy) {
		if (len > zbuf_size)
			return NULL;
		return zbuf;
	}
	*heap_out = true;
	return malloc(len ? len : 1);
}

enum put_kind { PUT_COPY, PUT_ZC, PUT_UPSERT };

static mc_status do_put(enum put_kind k, const char *key, const uint8_t *v, size_t len,
			const struct mc_store_config *cfg)
{
	switch (k) {
	case PUT_ZC:
		return mc_store_put_from(store, key, v, len, cfg);
	case PUT_UPSERT:
		return mc_store_upsert(store, key, v, len, cfg);
	default:
		return mc_store_put(store, key, v, len, cfg);
	}
}

/* put|put_from|upsert KEY SIZE SEED [OPTS] */
static void cmd_put(enum put_kind k, int argc, char **argv)
{
	struct put_opts o;
	uint64_t len, seed;
	uint8_t *v;
	bool heap;
	mc_status st;
	double t0;
	uint64_t sum;

	if (argc < 4 || !parse_u64(argv[2], &len) || !parse_u64(argv[3], &seed)) {
		reply("ERR BADARG 0 usage: %s KEY SIZE SEED [OPTS]", argv[0]);
		return;
	}
	if (!parse_opts(argc, argv, 4, &o))
		return;
	v = value_buf(len, k == PUT_ZC, &heap);
	if (!v) {
		reply("ERR BADARG 0 %" PRIu64 " bytes do not fit the %s buffer", len,
		      k == PUT_ZC ? "scratch" : "heap");
		return;
	}
	fill_bytes(v, len, seed);
	sum = XXH3_64bits(v, len);
	t0 = now_ms();
	st = do_put(k, decode_arg(argv[1]), v, len, &o.cfg);
	if (st != MC_OK)
		reply_err(st, now_ms() - t0, argv[0]);
	else
		reply("OK xxh3=%016" PRIx64 " ms=%.3f", sum, now_ms() - t0);
	if (heap)
		free(v);
}

/* get KEY | get_into KEY [CAP] */
static void cmd_get(bool zero_copy, int argc, char **argv)
{
	uint64_t cap = zbuf_size;
	void *v = NULL;
	int64_t n;
	double t0;

	if ((zero_copy ? (argc != 2 && argc != 3) : argc != 2) ||
	    (argc == 3 && !parse_u64(argv[2], &cap))) {
		reply("ERR BADARG 0 usage: get KEY | get_into KEY [CAP]");
		return;
	}
	if (zero_copy && cap > zbuf_size) {
		reply("ERR BADARG 0 capacity above the scratch buffer (%zu)", zbuf_size);
		return;
	}
	t0 = now_ms();
	if (zero_copy) {
		n = mc_store_get_into(store, decode_arg(argv[1]), zbuf, cap);
		v = zbuf;
	} else {
		n = mc_store_get(store, decode_arg(argv[1]), &v);
	}
	if (n < 0) {
		reply_err(n, now_ms() - t0, argv[0]);
		return;
	}
	reply("OK size=%" PRId64 " xxh3=%016" PRIx64 " ms=%.3f", n, XXH3_64bits(v, (size_t)n),
	      now_ms() - t0);
	if (!zero_copy)
		free(v);
}

static void make_key(char *out, size_t cap, const char *prefix, uint64_t i)
{
	snprintf(out, cap, "%s%" PRIu64, prefix, i);
}

/* putn PREFIX COUNT SIZE SEED [zc] [OPTS] */
static void cmd_putn(int argc, char **argv)
{
	struct put_opts o;
	uint64_t count, len, seed;
	uint64_t *sums = NULL;
	uint8_t *v;
	bool heap;
	double busy = 0;
	char key[KEY_CAP];

	if (argc < 5 || !parse_u64(argv[2], &count) || !parse_u64(argv[3], &len) ||
	    !parse_u64(argv[4], &seed) || count == 0) {
		reply("ERR BADARG 0 usage: putn PREFIX COUNT SIZE SEED [zc] [OPTS]");
		return;
	}
	if (!parse_opts(argc, argv, 5, &o))
		return;
	v = value_buf(len, o.zero_copy, &heap);
	sums = calloc(count, sizeof(*sums));
	if (!v || !sums) {
		reply("ERR BADARG 0 no buffer for %" PRIu64 " bytes", len);
		goto out;
	}
	decode_arg(argv[1]);
	for (uint64_t i = 0; i < count; i++) {
		mc_status st;
		double t0;

		fill_bytes(v, len, seed + i);
		sums[i] = XXH3_64bits(v, len);
		make_key(key, sizeof(key), argv[1], i);
		t0 = now_ms();
		st = do_put(o.zero_copy ? PUT_ZC : PUT_COPY, key, v, len, &o.cfg);
		busy += now_ms() - t0;
		if (st != MC_OK) {
			reply_err(st, busy, key);
			goto out;
		}
	}
	reply("OK n=%" PRIu64 " bytes=%" PRIu64 " ms=%.3f mbps=%.1f xxh3=%016" PRIx64, count,
	      count * len, busy, busy > 0 ? (double)(count * len) / 1e3 / busy : 0.0,
	      XXH3_64bits(sums, count * sizeof(*sums)));
out:
	free(sums);
	if (heap)
		free(v);
}

/* bput PREFIX COUNT SIZE SEED [OPTS]: one mc_store_batch_put_from of keys
 * PREFIX<i>, each from its own share of the scratch buffer, data seed
 * SEED+i -> OK <r0> <r1> ... (each key's status) */
static void cmd_bput(int argc, char **argv)
{
	const char *keys[64];
	char names[64][KEY_CAP];
	void *bufs[64];
	size_t lens[64];
	mc_status res[64];
	struct put_opts o;
	uint64_t count, len, seed;
	char out[64 * 8];
	size_t off = 0;
	mc_status st;

	if (argc < 5 || !parse_u64(argv[2], &count) || !parse_u64(argv[3], &len) ||
	    !parse_u64(argv[4], &seed) || count == 0 || count > 64 || len == 0) {
		reply("ERR BADARG 0 usage: bput PREFIX COUNT(1..64) SIZE SEED [OPTS]");
		return;
	}
	if (!parse_opts(argc, argv, 5, &o))
		return;
	if (count * len > zbuf_size) {
		reply("ERR BADARG 0 %" PRIu64 " x %" PRIu64 " bytes do not fit the scratch buffer",
		      count, len);
		return;
	}
	decode_arg(argv[1]);
	for (uint64_t i = 0; i < count; i++) {
		make_key(names[i], KEY_CAP, argv[1], i);
		keys[i] = names[i];
		bufs[i] = zbuf + i * len;
		lens[i] = len;
		fill_bytes(bufs[i], len, seed + i);
	}
	st = mc_store_batch_put_from(store, keys, bufs, lens, count, &o.cfg, res);
	if (st != MC_OK) {
		reply_err(st, 0, "batch_put_from");
		return;
	}
	for (uint64_t i = 0; i < count; i++)
		off += (size_t)snprintf(out + off, sizeof(out) - off, " %d", (int)res[i]);
	reply("OK%s", out);
}

/* getloop PREFIX COUNT SECONDS FILE (bench/store_read_kill.py) */
static void cmd_getloop(int argc, char **argv)
{
	uint64_t count, secs, n = 0, fails = 0;
	double end;
	char key[KEY_CAP];
	FILE *f;

	if (argc != 5 || !parse_u64(argv[2], &count) || count == 0 || !parse_u64(argv[3], &secs)) {
		reply("ERR BADARG 0 usage: getloop PREFIX COUNT SECONDS FILE");
		return;
	}
	f = fopen(argv[4], "w");
	if (!f) {
		reply("ERR BADARG 0 cannot write %s: %s", argv[4], strerror(errno));
		return;
	}
	decode_arg(argv[1]);
	end = now_ms() + (double)secs * 1e3;
	for (double t0 = now_ms(); t0 < end; t0 = now_ms(), n++) {
		void *v = NULL;
		int64_t got;

		make_key(key, sizeof(key), argv[1], n % count);
		got = mc_store_get(store, key, &v);
		fprintf(f, "%.3f %.3f %" PRId64 "\n", t0, now_ms() - t0, got < 0 ? got : 0);
		if (got < 0)
			fails++;
		free(v);
	}
	fclose(f);
	reply("OK n=%" PRIu64 " fails=%" PRIu64, n, fails);
}

/* getn PREFIX COUNT [SIZE SEED] [zc] */
static void cmd_getn(int argc, char **argv)
{
	uint64_t count, len = 0, seed = 0, bad = 0, bytes = 0;
	uint64_t *sums = NULL;
	uint8_t *tmp = NULL;
	bool zc = false, check;
	double busy = 0;
	char key[KEY_CAP];

	if (argc > 2 && !strcmp(argv[argc - 1], "zc")) {
		zc = true;
		argc--;
	}
	check = argc == 5;
	if ((argc != 3 && argc != 5) || !parse_u64(argv[2], &count) || count == 0 ||
	    (check && (!parse_u64(argv[3], &len) || !parse_u64(argv[4], &seed)))) {
		reply("ERR BADARG 0 usage: getn PREFIX COUNT [SIZE SEED] [zc]");
		return;
	}
	sums = calloc(count, sizeof(*sums));
	if (check)
		tmp = malloc(len ? len : 1);
	if (!sums || (check && !tmp)) {
		reply("ERR NOMEM 0 buffers");
		goto out;
	}
	decode_arg(argv[1]);
	for (uint64_t i = 0; i < count; i++) {
		void *v = NULL;
		int64_t n;
		double t0;

		make_key(key, sizeof(key), argv[1], i);
		t0 = now_ms();
		if (zc) {
			n = mc_store_get_into(store, key, zbuf, zbuf_size);
			v = zbuf;
		} else {
			n = mc_store_get(store, key, &v);
		}
		busy += now_ms() - t0;
		if (n < 0) {
			reply_err(n, busy, key);
			goto out;
		}
		sums[i] = XXH3_64bits(v, (size_t)n);
		bytes += (uint64_t)n;
		if (!zc)
			free(v);
		if (check && ((uint64_t)n != len || sums[i] != expected_xxh3(tmp, len, seed + i)))
			bad++;
	}
	reply("OK n=%" PRIu64 " bytes=%" PRIu64 " ms=%.3f mbps=%.1f xxh3=%016" PRIx64
	      " bad=%" PRIu64,
	      count, bytes, busy, busy > 0 ? (double)bytes / 1e3 / busy : 0.0,
	      XXH3_64bits(sums, count * sizeof(*sums)), bad);
out:
	free(sums);
	free(tmp);
}

/* ------------------------------------------------------------------ */
/* Metadata */

static void cmd_exist(int argc, char **argv)
{
	int r;
	double t0 = now_ms();

	if (argc != 2) {
		reply("ERR BADARG 0 usage: exist KEY");
		return;
	}
	r = mc_store_is_exist(store, decode_arg(argv[1]));
	if (r < 0)
		reply_err(r, now_ms() - t0, "exist");
	else
		reply("OK %d", r);
}

static void cmd_bexist(int argc, char **argv)
{
	size_t n = (size_t)argc - 1;
	const char **keys;
	int *res;
	mc_status st;
	double t0;

	if (argc < 2) {
		reply("ERR BADARG 0 usage: bexist KEY...");
		return;
	}
	keys = calloc(n, sizeof(*keys));
	res = calloc(n, sizeof(*res));
	if (!keys || !res) {
		reply("ERR NOMEM 0 buffers");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		keys[i] = decode_arg(argv[i + 1]);
	t0 = now_ms();
	st = mc_store_batch_is_exist(store, keys, n, res);
	if (st != MC_OK) {
		reply_err(st, now_ms() - t0, "batch_is_exist");
		goto out;
	}
	printf("OK");
	for (size_t i = 0; i < n; i++)
		printf(" %d", res[i]);
	reply("%s", "");
out:
	free(keys);
	free(res);
}

static void cmd_bget_into(int argc, char **argv)
{
	size_t n = (size_t)argc - 1, slot;
	const char **keys;
	void **bufs;
	size_t *lens;
	int64_t *res;
	mc_status st;
	double t0;

	if (argc < 2) {
		reply("ERR BADARG 0 usage: bget_into KEY...");
		return;
	}
	slot = zbuf_size / n / 4096 * 4096;
	keys = calloc(n, sizeof(*keys));
	bufs = calloc(n, sizeof(*bufs));
	lens = calloc(n, sizeof(*lens));
	res = calloc(n, sizeof(*res));
	if (!keys || !bufs || !lens || !res || !slot) {
		reply("ERR NOMEM 0 buffers");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		keys[i] = decode_arg(argv[i + 1]);
		bufs[i] = zbuf + i * slot;
		lens[i] = slot;
	}
	t0 = now_ms();
	for (size_t i = 0; i < n; i++)
		res[i] = MC_ERR_INTERNAL;
	st = mc_store_batch_get_into(store, keys, bufs, lens, n, res);
	if (st == MC_ERR_INVALID_PARAMS || st == MC_ERR_NOMEM) { /* the call itself */
		reply_err(st, now_ms() - t0, "batch_get_into");
		goto out;
	}
	printf("OK"); /* else each key's result, whatever the call's */
	for (size_t i = 0; i < n; i++) {
		if (res[i] < 0)
			printf(" %s", mc_status_name((mc_status)res[i]));
		else
			printf(" %" PRId64 ":%016" PRIx64, res[i],
			       XXH3_64bits(bufs[i], (size_t)res[i]));
	}
	reply("%s", "");
out:
	free(keys);
	free(bufs);
	free(lens);
	free(res);
}

static void cmd_size(int argc, char **argv)
{
	int64_t n;
	double t0 = now_ms();

	if (argc != 2) {
		reply("ERR BADARG 0 usage: size KEY");
		return;
	}
	n = mc_store_get_size(store, decode_arg(argv[1]));
	if (n < 0)
		reply_err(n, now_ms() - t0, "get_size");
	else
		reply("OK %" PRId64, n);
}

static void cmd_replicas(int argc, char **argv)
{
	struct mc_store_replica_desc d[8];
	int64_t n;
	double t0 = now_ms();

	if (argc != 2) {
		reply("ERR BADARG 0 usage: replicas KEY");
		return;
	}
	n = mc_store_get_replica_desc(store, decode_arg(argv[1]), d, 8);
	if (n < 0) {
		reply_err(n, now_ms() - t0, "get_replica_desc");
		return;
	}
	printf("OK n=%" PRId64, n);
	for (int64_t i = 0; i < n && i < 8; i++)
		printf(" %s:%" PRIu64 ":%d", d[i].segment_name, d[i].size, d[i].status);
	reply("%s", "");
}

static bool parse_force(int argc, char **argv, int at, bool *force)
{
	*force = false;
	if (argc == at + 1) {
		if (strcmp(argv[at], "force"))
			return false;
		*force = true;
	}
	return argc <= at + 1;
}

static void cmd_remove(int argc, char **argv)
{
	bool force;
	mc_status st;
	double t0 = now_ms();

	if (argc < 2 || !parse_force(argc, argv, 2, &force)) {
		reply("ERR BADARG 0 usage: remove KEY [force]");
		return;
	}
	st = mc_store_remove(store, decode_arg(argv[1]), force);
	if (st != MC_OK)
		reply_err(st, now_ms() - t0, "remove");
	else
		reply("OK");
}

static void cmd_remove_regex(int argc, char **argv)
{
	bool force;
	int64_t n;
	double t0 = now_ms();

	if (argc < 2 || !parse_force(argc, argv, 2, &force)) {
		reply("ERR BADARG 0 usage: remove_regex PATTERN [force]");
		return;
	}
	n = mc_store_remove_by_regex(store, decode_arg(argv[1]), force);
	if (n < 0)
		reply_err(n, now_ms() - t0, "remove_by_regex");
	else
		reply("OK %" PRId64, n);
}

static void cmd_remove_all(int argc, char **argv)
{
	bool force;
	int64_t n;
	double t0 = now_ms();

	if (!parse_force(argc, argv, 1, &force)) {
		reply("ERR BADARG 0 usage: remove_all [force]");
		return;
	}
	n = mc_store_remove_all(store, force);
	if (n < 0)
		reply_err(n, now_ms() - t0, "remove_all");
	else
		reply("OK %" PRId64, n);
}

/* copy KEY SEG...: a copy task; move KEY SRC DST: a move task; both answer
 * "OK id=A-B".  task A-B: "OK status=S type=T msg=...".  unmount SEGID
 * [GRACE_MS]: this client's segment. */
static void cmd_copy_move(bool move, int argc, char **argv)
{
	struct mc_store_task_uuid id;
	const char *t[MAX_ARGS];
	mc_status st;
	double t0 = now_ms();

	if (move ? argc != 4 : argc < 3) {
		reply(move ? "ERR BADARG 0 usage: move KEY SRC DST"
			   : "ERR BADARG 0 usage: copy KEY SEG...");
		return;
	}
	for (int i = 2; i < argc; i++)
		t[i - 2] = argv[i];
	st = move ? mc_store_create_move_task(store, decode_arg(argv[1]), argv[2], argv[3], &id)
		  : mc_store_create_copy_task(store, decode_arg(argv[1]), t, (size_t)(argc - 2),
					      &id);
	if (st != MC_OK)
		reply_err(st, now_ms() - t0, move ? "create_move_task" : "create_copy_task");
	else
		reply("OK id=%" PRIu64 "-%" PRIu64, id.first, id.second);
}

static void cmd_task(int argc, char **argv)
{
	struct mc_store_task_uuid id;
	struct mc_store_task_state ts;
	mc_status st;
	double t0 = now_ms();

	if (argc != 2 || sscanf(argv[1], "%" SCNu64 "-%" SCNu64, &id.first, &id.second) != 2) {
		reply("ERR BADARG 0 usage: task FIRST-SECOND");
		return;
	}
	st = mc_store_query_task(store, &id, &ts);
	if (st != MC_OK)
		reply_err(st, now_ms() - t0, "query_task");
	else
		reply("OK status=%d type=%d msg=%s", ts.status, ts.type,
		      ts.message[0] ? ts.message : "-");
}

static void cmd_unmount(int argc, char **argv)
{
	mc_status st;
	double t0 = now_ms();

	if (argc < 2 || argc > 3) {
		reply("ERR BADARG 0 usage: unmount SEGID [GRACE_MS]");
		return;
	}
	st = mc_store_unmount_segment(store, argv[1], argc == 3 ? strtoull(argv[2], NULL, 10) : 0);
	if (st != MC_OK)
		reply_err(st, now_ms() - t0, "unmount_segment");
	else
		reply("OK");
}

/* ------------------------------------------------------------------ */
/* Main loop */

/* Returns false on quit. */
static bool run_line(char *line)
{
	static char *argv[MAX_ARGS];
	int argc = split_args(line, argv, MAX_ARGS, "0 ");

	if (argc == 0)
		return true;

	const char *c = argv[0];

	if (!strcmp(c, "quit"))
		return false;
	else if (!strcmp(c, "put"))
		cmd_put(PUT_COPY, argc, argv);
	else if (!strcmp(c, "put_from"))
		cmd_put(PUT_ZC, argc, argv);
	else if (!strcmp(c, "upsert"))
		cmd_put(PUT_UPSERT, argc, argv);
	else if (!strcmp(c, "get"))
		cmd_get(false, argc, argv);
	else if (!strcmp(c, "get_into"))
		cmd_get(true, argc, argv);
	else if (!strcmp(c, "bput"))
		cmd_bput(argc, argv);
	else if (!strcmp(c, "putn"))
		cmd_putn(argc, argv);
	else if (!strcmp(c, "getn"))
		cmd_getn(argc, argv);
	else if (!strcmp(c, "getloop"))
		cmd_getloop(argc, argv);
	else if (!strcmp(c, "exist"))
		cmd_exist(argc, argv);
	else if (!strcmp(c, "bexist"))
		cmd_bexist(argc, argv);
	else if (!strcmp(c, "bget_into"))
		cmd_bget_into(argc, argv);
	else if (!strcmp(c, "size"))
		cmd_size(argc, argv);
	else if (!strcmp(c, "replicas"))
		cmd_replicas(argc, argv);
	else if (!strcmp(c, "remove"))
		cmd_remove(argc, argv);
	else if (!strcmp(c, "remove_regex"))
		cmd_remove_regex(argc, argv);
	else if (!strcmp(c, "remove_all"))
		cmd_remove_all(argc, argv);
	else if (!strcmp(c, "copy") || !strcmp(c, "move"))
		cmd_copy_move(c[0] == 'm', argc, argv);
	else if (!strcmp(c, "task"))
		cmd_task(argc, argv);
	else if (!strcmp(c, "unmount"))
		cmd_unmount(argc, argv);
	else if (!strcmp(c, "health"))
		reply("OK %d", mc_store_health_check(store));
	else if (!strcmp(c, "hostname"))
		reply("OK %s", mc_store_hostname(store));
	else if (!strcmp(c, "close")) {
		mc_status st = mc_store_close(store);

		if (st != MC_OK)
			reply_err(st, 0, "close");
		else
			reply("OK");
	} else if (!strcmp(c, "hold")) {
		reply("OK holding");
		while (!stop_signal)
			pause();
		return false;
	} else {
		reply("ERR BADCMD 0 unknown command '%.64s'", c);
	}
	return true;
}

static void on_signal(int sig)
{
	stop_signal = sig;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: store_node [--master HOST:PORT] --metadata URI [--host NAME[:PORT]]\n"
		   "                  [--segment SIZE] [--buffer SIZE] [--zbuf SIZE]\n"
		   "                  [--protocol P] [--tenant T] [--log-level L]\n"
		   "Reads commands from stdin, one reply line each; see the source's header.\n");
}

static void *map_lazy(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"master", required_argument, NULL, 'M'},
		{"metadata", required_argument, NULL, 'm'},
		{"host", required_argument, NULL, 'H'},
		{"segment", required_argument, NULL, 's'},
		{"buffer", required_argument, NULL, 'b'},
		{"zbuf", required_argument, NULL, 'z'},
		{"protocol", required_argument, NULL, 'p'},
		{"tenant", required_argument, NULL, 't'},
		{"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct mc_store_params p = {
		.local_hostname = "127.0.0.1",
		.global_segment_size = 64ull << 20,
		.local_buffer_size = 64ull << 20,
		.master_server_addr = "127.0.0.1:50051",
	};
	struct sigaction sa = {.sa_handler = on_signal}; /* no SA_RESTART: getline returns */
	uint64_t zsize = 64ull << 20;
	mc_status st;
	int o, rc = 0;

	while ((o = getopt_long(argc, argv, "M:m:H:s:b:z:p:t:l:h", opts, NULL)) != -1) {
		switch (o) {
		case 'M':
			p.master_server_addr = optarg;
			break;
		case 'm':
			p.metadata_server = optarg;
			break;
		case 'H':
			p.local_hostname = optarg;
			break;
		case 's':
			if (!opt_u64("store_node", "segment", optarg, 0, UINT64_MAX,
				     &p.global_segment_size))
				return 2;
			break;
		case 'b':
			if (!opt_u64("store_node", "buffer", optarg, 0, UINT64_MAX,
				     &p.local_buffer_size))
				return 2;
			break;
		case 'z':
			if (!opt_u64("store_node", "zbuf", optarg, 1, UINT64_MAX, &zsize))
				return 2;
			break;
		case 'p':
			p.protocol = optarg;
			break;
		case 't':
			p.tenant_id = optarg;
			break;
		case 'l':
			if (!opt_log_level("store_node", optarg))
				return 2;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind != argc || !p.metadata_server) {
		usage(stderr);
		return 2;
	}
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	st = mc_store_new(&store);
	if (st == MC_OK)
		st = mc_store_setup(store, &p);
	if (st != MC_OK) {
		report_failed("store_node", "setup", st);
		rc = 1;
		goto out;
	}
	zbuf_size = zsize;
	zbuf = map_lazy(zbuf_size);
	if (!zbuf) {
		printf("FAILED ERR_NOMEM cannot map %zu bytes\n", zbuf_size);
		fflush(stdout);
		rc = 1;
		goto out;
	}
	st = mc_store_register_buffer(store, zbuf, zbuf_size);
	if (st != MC_OK) {
		printf("FAILED %s register_buffer: %s\n", mc_status_name(st), mc_last_error());
		fflush(stdout);
		rc = 1;
		goto out;
	}
	reply("READY hostname=%s pid=%ld segment=%" PRIu64 " buffer=%" PRIu64 " zbuf=%zu",
	      mc_store_hostname(store), (long)getpid(), p.global_segment_size, p.local_buffer_size,
	      zbuf_size);

	command_loop(run_line, MAX_LINE, "0 ", &stop_signal);
	if (!stop_signal)
		reply("OK bye");
	mc_store_unregister_buffer(store, zbuf);
out:
	mc_store_free(store);
	if (zbuf)
		munmap(zbuf, zbuf_size);
	return rc;
}
