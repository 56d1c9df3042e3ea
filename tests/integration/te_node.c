/*
 * te_node - a scriptable Transfer Engine process for the integration tests
 * and scripts/demo.sh.
 *
 * It starts one engine through the public API only, maps a buffer of
 * --buffer bytes and registers it, maps a second region of --unreg bytes
 * that is never registered (a target for negative tests), prints
 *
 *   READY name=<segment> addr=0x<buffer> size=<bytes> rpc_port=<port>
 *         unreg=0x<addr> unreg_size=<bytes> pid=<pid>
 *
 * and then executes one command per line from stdin, answering exactly one
 * line on stdout per command (flushed).  Replies start with "OK" or
 * "ERR <CODE>", where CODE is an mc_status name (ERR_TIMEOUT, ...) for
 * engine failures and BADCMD / BADARG / TOOLONG for malformed input.
 * Numbers are accepted in decimal or 0x hex, sizes also with a k/m/g
 * suffix.  "LOFF" is an offset into the registered buffer; "ADDR" is an
 * absolute address (ours or the peer's).
 *
 *   fill SEED [LOFF LEN]         xorshift bytes from SEED into the buffer
 *   filla SEED ADDR LEN          same, at an address of one of our regions
 *   zero [LOFF LEN]
 *   crc LOFF LEN                 -> OK <xxh3-64 hex>
 *   crca ADDR LEN                -> OK <hex>, any of our regions
 *   info                         -> OK the READY fields
 *   open SEG | reopen SEG        -> OK <segment id>
 *   close ID
 *   remote_base ID [INDEX]       -> OK <addr> <length> of the peer's buffer INDEX
 *   write [-f] ID LOFF RADDR LEN [TIMEOUT_MS]
 *   read  [-f] ID LOFF RADDR LEN [TIMEOUT_MS]
 *                                one request through a batch, waited for:
 *                                -> OK ms=<t>  |  ERR <status> ms=<t> <last error>
 *                                -f skips the local bounds check (the
 *                                engine must cope with absurd lengths)
 *   writen ID LOFF RADDR LEN NAME MSG
 *                                write submitted with a notification
 *   batch ID SPEC...             SPEC = w|r:LOFF:RADDR:LEN, one batch
 *                                -> OK ms=<t> n=<n> | ERR <status> ms=<t> task=<i> ...
 *   submit w|r ID LOFF RADDR LEN -> OK <batch>   (asynchronous)
 *   status BATCH                 -> OK state=<n> error=<status> bytes=<n>
 *   wait BATCH [TIMEOUT_MS]      -> as write; the batch is released
 *   notify SEG NAME MSG...       by segment name
 *   notifyid ID NAME MSG...      by segment id
 *   notifs                       -> OK <count> [<name>=<msg> ...] (%XX-escaped)
 *   probe SEG                    -> OK | ERR ...
 *   register SIZE                map and register one more buffer -> OK <addr>
 *   deregister ADDR              deregister it (the mapping stays)
 *   quit                         -> OK, then the engine is freed
 *
 * A line longer than MAX_LINE is answered with ERR TOOLONG.  End of input
 * behaves as quit.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mooncake/mooncake.h>
#include <xxhash.h>

#include "node_util.h"

#define MAX_LINE    (256 * 1024)
#define MAX_ARGS    4096
#define MAX_REGIONS 64

struct region {
	uint8_t *addr;
	size_t len;
	bool registered;
};

static struct mc_te *te;
static struct region regions[MAX_REGIONS];
static size_t nregions;
static uint8_t *buf; /* regions[0] */
static size_t buf_size;

/* ------------------------------------------------------------------ */
/* Output */

/* Print s with spaces, '=', '%' and non-printable bytes as %XX. */
static void put_escaped(const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p <= ' ' || *p >= 0x7f || *p == '%' || *p == '=')
			printf("%%%02X", *p);
		else
			putchar(*p);
	}
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void reply_status(mc_status st, const char *what)
{
	reply("ERR %s %s: %s", mc_status_name(st), what, mc_last_error());
}

/* ------------------------------------------------------------------ */
/* Parsing */

static bool parse_i64(const char *s, int64_t *out)
{
	char *end;
	long long v;

	if (!s || !*s)
		return false;
	errno = 0;
	v = strtoll(s, &end, 0);
	if (errno || *end)
		return false;
	*out = v;
	return true;
}

/* [addr, addr+len) inside one of our mapped regions? */
static struct region *find_region(uint64_t addr, uint64_t len)
{
	for (size_t i = 0; i < nregions; i++) {
		uint64_t a = (uintptr_t)regions[i].addr;

		if (addr >= a && addr - a <= regions[i].len && len <= regions[i].len - (addr - a))
			return &regions[i];
	}
	return NULL;
}

static bool local_range(uint64_t off, uint64_t len)
{
	return off <= buf_size && len <= buf_size - off;
}

/* ------------------------------------------------------------------ */
/* Memory helpers */

static void *map_region(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static struct region *add_region(size_t len)
{
	uint8_t *p;

	if (nregions == MAX_REGIONS)
		return NULL;
	p = map_region(len);
	if (!p)
		return NULL;
	regions[nregions] = (struct region){.addr = p, .len = len};
	return &regions[nregions++];
}

/* ------------------------------------------------------------------ */
/* Transfers */

/* Wait for a batch and release it; prints the reply. */
static void finish_batch(mc_batch_id bid, int64_t timeout_ms, double t0, size_t n)
{
	struct mc_xfer_status xs = {0};
	mc_status st = mc_te_batch_wait(te, bid, timeout_ms, &xs);
	double ms = now_ms() - t0;
	char err[512];

	if (st == MC_OK) {
		mc_te_batch_free(te, bid);
		reply("OK ms=%.3f n=%zu", ms, n);
		return;
	}
	snprintf(err, sizeof(err), "%s", mc_last_error());
	/* Find the first failed task for the report. */
	size_t bad = n;
	for (size_t i = 0; i < n && n > 1; i++) {
		struct mc_xfer_status ts = {0};

		if (mc_te_task_status(te, bid, i, &ts) == MC_OK && ts.state != MC_XFER_COMPLETED &&
		    ts.state != MC_XFER_WAITING && ts.state != MC_XFER_PENDING) {
			bad = i;
			break;
		}
	}
	if (mc_te_batch_free(te, bid) != MC_OK)
		mc_te_batch_discard(te, bid);
	if (bad < n)
		reply("ERR %s ms=%.3f task=%zu state=%d error=%s %s", mc_status_name(st), ms, bad,
		      xs.state, mc_status_name(xs.error), err);
	else
		reply("ERR %s ms=%.3f state=%d error=%s %s", mc_status_name(st), ms, xs.state,
		      mc_status_name(xs.error), err);
}

/* Submit reqs as one batch; returns false after replying on failure. */
static bool submit_batch(const struct mc_xfer_req *reqs, size_t n, const char *nname,
			 const char *nmsg, mc_batch_id *bid_out, double *t0_out)
{
	mc_batch_id bid;
	mc_status st;
	double t0 = now_ms();

	st = mc_te_batch_new(te, n, &bid);
	if (st != MC_OK) {
		reply("ERR %s ms=%.3f batch_new: %s", mc_status_name(st), now_ms() - t0,
		      mc_last_error());
		return false;
	}
	if (nname)
		st = mc_te_submit_with_notify(te, bid, reqs, n, nname, nmsg);
	else
		st = mc_te_submit(te, bid, reqs, n);
	if (st != MC_OK) {
		char err[512];

		snprintf(err, sizeof(err), "%s", mc_last_error());
		if (mc_te_batch_free(te, bid) != MC_OK)
			mc_te_batch_discard(te, bid);
		reply("ERR %s ms=%.3f submit: %s", mc_status_name(st), now_ms() - t0, err);
		return false;
	}
	*bid_out = bid;
	*t0_out = t0;
	return true;
}

/* Parse "ID LOFF RADDR LEN" into req; force skips the local check. */
static bool parse_req(int op, char **a, bool force, struct mc_xfer_req *req)
{
	uint64_t id, off, raddr, len;

	if (!parse_u64(a[0], &id) || !parse_u64(a[1], &off) || !parse_u64(a[2], &raddr) ||
	    !parse_u64(a[3], &len)) {
		reply("ERR BADARG expected ID LOFF RADDR LEN");
		return false;
	}
	if (!force && !local_range(off, len)) {
		reply("ERR BADARG local range [%" PRIu64 ", +%" PRIu64 ") outside the buffer (%zu)",
		      off, len, buf_size);
		return false;
	}
	if (off > buf_size) {
		reply("ERR BADARG local offset past the buffer");
		return false;
	}
	*req = (struct mc_xfer_req){
		.opcode = op,
		.source = buf + off,
		.target_id = id,
		.target_offset = raddr,
		.length = len,
	};
	return true;
}

static int parse_op(const char *s)
{
	if (!strcmp(s, "w") || !strcmp(s, "write"))
		return MC_OP_WRITE;
	if (!strcmp(s, "r") || !strcmp(s, "read"))
		return MC_OP_READ;
	return -1;
}

/* write|read [-f] ID LOFF RADDR LEN [TIMEOUT_MS] */
static void cmd_xfer(int op, int argc, char **argv)
{
	struct mc_xfer_req req;
	bool force = false;
	int64_t timeout = -1;
	mc_batch_id bid;
	double t0;

	argv++;
	argc--;
	if (argc > 0 && !strcmp(argv[0], "-f")) {
		force = true;
		argv++;
		argc--;
	}
	if (argc != 4 && argc != 5) {
		reply("ERR BADARG usage: write|read [-f] ID LOFF RADDR LEN [TIMEOUT_MS]");
		return;
	}
	if (argc == 5 && !parse_i64(argv[4], &timeout)) {
		reply("ERR BADARG bad timeout");
		return;
	}
	if (!parse_req(op, argv, force, &req))
		return;
	if (submit_batch(&req, 1, NULL, NULL, &bid, &t0))
		finish_batch(bid, timeout, t0, 1);
}

/* writen ID LOFF RADDR LEN NAME MSG */
static void cmd_writen(int argc, char **argv)
{
	struct mc_xfer_req req;
	mc_batch_id bid;
	double t0;

	if (argc != 7) {
		reply("ERR BADARG usage: writen ID LOFF RADDR LEN NAME MSG");
		return;
	}
	if (!parse_req(MC_OP_WRITE, argv + 1, false, &req))
		return;
	if (submit_batch(&req, 1, argv[5], argv[6], &bid, &t0))
		finish_batch(bid, -1, t0, 1);
}

/* batch ID SPEC... with SPEC = w|r:LOFF:RADDR:LEN */
static void cmd_batch(int argc, char **argv)
{
	uint64_t id;
	size_t n = argc - 2;
	struct mc_xfer_req *reqs;
	mc_batch_id bid;
	double t0;

	if (argc < 3 || !parse_u64(argv[1], &id)) {
		reply("ERR BADARG usage: batch ID w|r:LOFF:RADDR:LEN...");
		return;
	}
	reqs = calloc(n, sizeof(*reqs));
	if (!reqs) {
		reply("ERR NOMEM");
		return;
	}
	for (size_t i = 0; i < n; i++) {
		char *f[4], *save = NULL, *s = argv[i + 2];
		char idbuf[32];
		char *a[4];
		int op, k = 0;

		for (char *t = strtok_r(s, ":", &save); t && k < 4; t = strtok_r(NULL, ":", &save))
			f[k++] = t;
		if (k != 4 || strtok_r(NULL, ":", &save) || (op = parse_op(f[0])) < 0) {
			reply("ERR BADARG bad spec #%zu", i);
			goto out;
		}
		snprintf(idbuf, sizeof(idbuf), "%" PRIu64, id);
		a[0] = idbuf;
		a[1] = f[1];
		a[2] = f[2];
		a[3] = f[3];
		if (!parse_req(op, a, false, &reqs[i]))
			goto out;
	}
	if (submit_batch(reqs, n, NULL, NULL, &bid, &t0))
		finish_batch(bid, -1, t0, n);
out:
	free(reqs);
}

/* submit w|r ID LOFF RADDR LEN */
static void cmd_submit(int argc, char **argv)
{
	struct mc_xfer_req req;
	mc_batch_id bid;
	double t0;
	int op;

	if (argc != 6 || (op = parse_op(argv[1])) < 0) {
		reply("ERR BADARG usage: submit w|r ID LOFF RADDR LEN");
		return;
	}
	if (!parse_req(op, argv + 2, false, &req))
		return;
	if (submit_batch(&req, 1, NULL, NULL, &bid, &t0))
		reply("OK %" PRIu64, bid);
}

static void cmd_status(int argc, char **argv)
{
	uint64_t bid;
	struct mc_xfer_status xs = {0};
	mc_status st;

	if (argc != 2 || !parse_u64(argv[1], &bid)) {
		reply("ERR BADARG usage: status BATCH");
		return;
	}
	st = mc_te_batch_status(te, bid, &xs);
	if (st != MC_OK) {
		reply_status(st, "batch_status");
		return;
	}
	reply("OK state=%d error=%s bytes=%" PRIu64, xs.state, mc_status_name(xs.error),
	      xs.transferred_bytes);
}

static void cmd_wait(int argc, char **argv)
{
	uint64_t bid;
	int64_t timeout = -1;

	if ((argc != 2 && argc != 3) || !parse_u64(argv[1], &bid) ||
	    (argc == 3 && !parse_i64(argv[2], &timeout))) {
		reply("ERR BADARG usage: wait BATCH [TIMEOUT_MS]");
		return;
	}
	/* ms counts from the wait, not from the submit. */
	finish_batch(bid, timeout, now_ms(), 1);
}

/* ------------------------------------------------------------------ */
/* Segments, notifications, probes */

static void cmd_open(int argc, char **argv, bool again)
{
	mc_segment_id id;
	mc_status st;
	double t0 = now_ms();

	if (argc != 2) {
		reply("ERR BADARG usage: open SEG");
		return;
	}
	st = again ? mc_te_reopen_segment(te, argv[1], &id) : mc_te_open_segment(te, argv[1], &id);
	if (st != MC_OK) {
		reply("ERR %s ms=%.3f open %s: %s", mc_status_name(st), now_ms() - t0, argv[1],
		      mc_last_error());
		return;
	}
	reply("OK %" PRIu64 " ms=%.3f", id, now_ms() - t0);
}

static void cmd_close(int argc, char **argv)
{
	uint64_t id;
	mc_status st;

	if (argc != 2 || !parse_u64(argv[1], &id)) {
		reply("ERR BADARG usage: close ID");
		return;
	}
	st = mc_te_close_segment(te, id);
	if (st != MC_OK)
		reply_status(st, "close");
	else
		reply("OK");
}

static void cmd_remote_base(int argc, char **argv)
{
	uint64_t id, index = 0, addr, len;
	mc_status st;

	if ((argc != 2 && argc != 3) || !parse_u64(argv[1], &id) ||
	    (argc == 3 && !parse_u64(argv[2], &index))) {
		reply("ERR BADARG usage: remote_base ID [INDEX]");
		return;
	}
	st = mc_te_segment_buffer(te, id, index, &addr, &len);
	if (st != MC_OK) {
		reply_status(st, "segment_buffer");
		return;
	}
	reply("OK 0x%" PRIx64 " %" PRIu64, addr, len);
}

/* Rejoin argv[from..] with single spaces (the message may contain spaces). */
static void join_args(int argc, char **argv, int from, char *out, size_t cap)
{
	size_t used = 0;

	out[0] = '\0';
	for (int i = from; i < argc && used < cap; i++)
		used += snprintf(out + used, cap - used, "%s%s", i > from ? " " : "", argv[i]);
}

static void cmd_notify(int argc, char **argv, bool by_id)
{
	static char msg[MAX_LINE];
	mc_status st;
	uint64_t id = 0;
	double t0 = now_ms();

	if (argc < 4 || (by_id && !parse_u64(argv[1], &id))) {
		reply("ERR BADARG usage: notify SEG|ID NAME MSG...");
		return;
	}
	join_args(argc, argv, 3, msg, sizeof(msg));
	if (by_id)
		st = mc_te_notify_send(te, id, argv[2], msg);
	else
		st = mc_te_notify_send_by_name(te, argv[1], argv[2], msg);
	if (st != MC_OK) {
		reply("ERR %s ms=%.3f notify: %s", mc_status_name(st), now_ms() - t0,
		      mc_last_error());
		return;
	}
	reply("OK ms=%.3f", now_ms() - t0);
}

static void cmd_notifs(void)
{
	struct mc_te_notify *list = NULL;
	size_t n = 0;
	mc_status st = mc_te_notify_recv(te, &list, &n);

	if (st != MC_OK) {
		reply_status(st, "notify_recv");
		return;
	}
	printf("OK %zu", n);
	for (size_t i = 0; i < n; i++) {
		putchar(' ');
		put_escaped(list[i].name ? list[i].name : "");
		putchar('=');
		put_escaped(list[i].msg ? list[i].msg : "");
	}
	reply("%s", "");
	mc_te_notify_free(list, n);
}

static void cmd_probe(int argc, char **argv)
{
	double t0 = now_ms();
	mc_status st;

	if (argc != 2) {
		reply("ERR BADARG usage: probe SEG");
		return;
	}
	st = mc_te_probe(te, argv[1]);
	if (st != MC_OK) {
		reply("ERR %s ms=%.3f probe: %s", mc_status_name(st), now_ms() - t0,
		      mc_last_error());
		return;
	}
	reply("OK ms=%.3f", now_ms() - t0);
}

/* ------------------------------------------------------------------ */
/* Local memory */

static void cmd_fill(int argc, char **argv, bool absolute)
{
	uint64_t seed, off = 0, len = buf_size;
	uint8_t *p;

	if (absolute ? argc != 4 : (argc != 2 && argc != 4)) {
		reply("ERR BADARG usage: fill SEED [LOFF LEN] | filla SEED ADDR LEN");
		return;
	}
	if (!parse_u64(argv[1], &seed) ||
	    (argc == 4 && (!parse_u64(argv[2], &off) || !parse_u64(argv[3], &len)))) {
		reply("ERR BADARG bad number");
		return;
	}
	if (absolute ? !find_region(off, len) : !local_range(off, len)) {
		reply("ERR BADARG range outside our memory");
		return;
	}
	p = absolute ? (uint8_t *)(uintptr_t)off : buf + off;
	fill_bytes(p, len, seed);
	reply("OK");
}

static void cmd_zero(int argc, char **argv)
{
	uint64_t off = 0, len = buf_size;

	if ((argc != 1 && argc != 3) ||
	    (argc == 3 && (!parse_u64(argv[1], &off) || !parse_u64(argv[2], &len)))) {
		reply("ERR BADARG usage: zero [LOFF LEN]");
		return;
	}
	if (!local_range(off, len)) {
		reply("ERR BADARG range outside the buffer");
		return;
	}
	memset(buf + off, 0, len);
	reply("OK");
}

static void cmd_crc(int argc, char **argv, bool absolute)
{
	uint64_t off, len;
	const uint8_t *p;

	if (argc != 3 || !parse_u64(argv[1], &off) || !parse_u64(argv[2], &len)) {
		reply("ERR BADARG usage: crc LOFF LEN | crca ADDR LEN");
		return;
	}
	if (absolute ? !find_region(off, len) : !local_range(off, len)) {
		reply("ERR BADARG range outside our memory");
		return;
	}
	p = absolute ? (const uint8_t *)(uintptr_t)off : buf + off;
	reply("OK %016llx", (unsigned long long)XXH3_64bits(p, len));
}

static void cmd_register(int argc, char **argv)
{
	uint64_t len;
	struct region *r;
	mc_status st;

	if (argc != 2 || !parse_u64(argv[1], &len) || len == 0) {
		reply("ERR BADARG usage: register SIZE");
		return;
	}
	r = add_region(len);
	if (!r) {
		reply("ERR NOMEM cannot map %" PRIu64 " bytes", len);
		return;
	}
	st = mc_te_register(te, r->addr, r->len, NULL, true);
	if (st != MC_OK) {
		reply_status(st, "register");
		return;
	}
	r->registered = true;
	reply("OK 0x%" PRIxPTR, (uintptr_t)r->addr);
}

static void cmd_deregister(int argc, char **argv)
{
	uint64_t addr;
	mc_status st;

	if (argc != 2 || !parse_u64(argv[1], &addr)) {
		reply("ERR BADARG usage: deregister ADDR");
		return;
	}
	st = mc_te_deregister(te, (void *)(uintptr_t)addr);
	if (st != MC_OK) {
		reply_status(st, "deregister");
		return;
	}
	for (size_t i = 0; i < nregions; i++)
		if ((uintptr_t)regions[i].addr == addr)
			regions[i].registered = false;
	reply("OK");
}

static void print_info(const char *head)
{
	reply("%s name=%s addr=0x%" PRIxPTR " size=%zu rpc_port=%u unreg=0x%" PRIxPTR
	      " unreg_size=%zu pid=%ld",
	      head, mc_te_local_name(te), (uintptr_t)buf, buf_size, mc_te_rpc_port(te),
	      (uintptr_t)regions[1].addr, regions[1].len, (long)getpid());
}

/* ------------------------------------------------------------------ */
/* Main loop */

/* Returns false on quit. */
static bool run_line(char *line)
{
	static char *argv[MAX_ARGS];
	int argc = split_args(line, argv, MAX_ARGS, "");

	if (argc == 0)
		return true;

	const char *c = argv[0];

	if (!strcmp(c, "quit"))
		return false;
	else if (!strcmp(c, "fill"))
		cmd_fill(argc, argv, false);
	else if (!strcmp(c, "filla"))
		cmd_fill(argc, argv, true);
	else if (!strcmp(c, "zero"))
		cmd_zero(argc, argv);
	else if (!strcmp(c, "crc"))
		cmd_crc(argc, argv, false);
	else if (!strcmp(c, "crca"))
		cmd_crc(argc, argv, true);
	else if (!strcmp(c, "info"))
		print_info("OK");
	else if (!strcmp(c, "open"))
		cmd_open(argc, argv, false);
	else if (!strcmp(c, "reopen"))
		cmd_open(argc, argv, true);
	else if (!strcmp(c, "close"))
		cmd_close(argc, argv);
	else if (!strcmp(c, "remote_base"))
		cmd_remote_base(argc, argv);
	else if (!strcmp(c, "write"))
		cmd_xfer(MC_OP_WRITE, argc, argv);
	else if (!strcmp(c, "read"))
		cmd_xfer(MC_OP_READ, argc, argv);
	else if (!strcmp(c, "writen"))
		cmd_writen(argc, argv);
	else if (!strcmp(c, "batch"))
		cmd_batch(argc, argv);
	else if (!strcmp(c, "submit"))
		cmd_submit(argc, argv);
	else if (!strcmp(c, "status"))
		cmd_status(argc, argv);
	else if (!strcmp(c, "wait"))
		cmd_wait(argc, argv);
	else if (!strcmp(c, "notify"))
		cmd_notify(argc, argv, false);
	else if (!strcmp(c, "notifyid"))
		cmd_notify(argc, argv, true);
	else if (!strcmp(c, "notifs"))
		cmd_notifs();
	else if (!strcmp(c, "probe"))
		cmd_probe(argc, argv);
	else if (!strcmp(c, "register"))
		cmd_register(argc, argv);
	else if (!strcmp(c, "deregister"))
		cmd_deregister(argc, argv);
	else
		reply("ERR BADCMD unknown command '%.64s'", c);
	return true;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: te_node --metadata URI [--name NAME] [--host HOST] [--buffer SIZE]\n"
		   "               [--unreg SIZE] [--protocol P] [--rpc-port N] [--workers N]\n"
		   "               [--log-level L]\n"
		   "Reads commands from stdin, one reply line each; see the source's header.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"metadata", required_argument, NULL, 'm'},
		{"name", required_argument, NULL, 'n'},
		{"host", required_argument, NULL, 'H'},
		{"buffer", required_argument, NULL, 'b'},
		{"unreg", required_argument, NULL, 'u'},
		{"protocol", required_argument, NULL, 'p'},
		{"rpc-port", required_argument, NULL, 'r'},
		{"workers", required_argument, NULL, 'w'},
		{"log-level", required_argument, NULL, 'l'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct mc_te_params params = {0};
	uint64_t bufsz = 64ull << 20, unregsz = 1ull << 20, v;
	const char *name = NULL, *host = NULL;
	mc_status st;
	int o, rc = 0;

	while ((o = getopt_long(argc, argv, "m:n:H:b:u:p:r:w:l:h", opts, NULL)) != -1) {
		switch (o) {
		case 'm':
			params.metadata_uri = optarg;
			params.field_mask |= MC_TE_PARAM_METADATA;
			break;
		case 'n':
			name = optarg;
			break;
		case 'H':
			host = optarg;
			break;
		case 'b':
			if (!opt_u64("te_node", "buffer", optarg, 1, UINT64_MAX, &bufsz))
				return 2;
			break;
		case 'u':
			if (!opt_u64("te_node", "unreg", optarg, 1, UINT64_MAX, &unregsz))
				return 2;
			break;
		case 'p':
			params.protocol = optarg;
			params.field_mask |= MC_TE_PARAM_PROTOCOL;
			break;
		case 'r':
			if (!opt_u64("te_node", "rpc-port", optarg, 0, 65535, &v))
				return 2;
			params.rpc_port = (uint16_t)v;
			params.field_mask |= MC_TE_PARAM_RPC_PORT;
			break;
		case 'w':
			if (!opt_u64("te_node", "workers", optarg, 1, 64, &v))
				return 2;
			params.workers = (unsigned)v;
			params.field_mask |= MC_TE_PARAM_WORKERS;
			break;
		case 'l':
			if (!opt_log_level("te_node", optarg))
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
	if (optind != argc || !params.metadata_uri) {
		usage(stderr);
		return 2;
	}
	if (!name)
		name = host ? host : "127.0.0.1";
	params.local_name = name;
	params.field_mask |= MC_TE_PARAM_LOCAL_NAME;
	if (host) {
		params.host = host;
		params.field_mask |= MC_TE_PARAM_HOST;
	}

	st = mc_te_new(&params, &te);
	if (st != MC_OK) {
		report_failed("te_node", "mc_te_new", st);
		return 1;
	}
	if (!add_region(bufsz) || !add_region(unregsz)) {
		fprintf(stderr, "te_node: cannot map %" PRIu64 " + %" PRIu64 " bytes\n", bufsz,
			unregsz);
		printf("FAILED NOMEM\n");
		fflush(stdout);
		rc = 1;
		goto out;
	}
	buf = regions[0].addr;
	buf_size = regions[0].len;
	st = mc_te_register(te, buf, buf_size, NULL, true);
	if (st != MC_OK) {
		report_failed("te_node", "mc_te_register", st);
		rc = 1;
		goto out;
	}
	regions[0].registered = true;
	print_info("READY");

	command_loop(run_line, MAX_LINE, "", NULL);
	for (size_t i = 0; i < nregions; i++)
		if (regions[i].registered)
			mc_te_deregister(te, regions[i].addr);
	reply("OK bye");
out:
	mc_te_free(te);
	for (size_t i = 0; i < nregions; i++)
		munmap(regions[i].addr, regions[i].len);
	return rc;
}
