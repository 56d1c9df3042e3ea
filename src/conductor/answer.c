/*
 * conductor/answer.c - the /schedule answer, encoded by hand (answer.h).
 *
 * Why by hand.  The answer used to be a jansson tree printed with
 * json_dumps: an object per reused block, a malloc per value, reals by
 * %.17g.  A perf profile of the daemon under bench/conductor_bench put
 * most of a call there and about 1% in the match and Algorithm 1.  The
 * answer's shape is fixed and small, so it is written straight into the
 * caller's buffer in one pass: no tree, no allocation once the buffer has
 * grown to the size of an answer, integers and times by integer
 * arithmetic.  Parsing stays with jansson (request.c): only the writing
 * of our own, known shape is done here.
 *
 * What it must never do: write anything but valid JSON.  Strings are
 * escaped (quote, backslash, control bytes; the bytes themselves come
 * from jansson-decoded bodies, so they are UTF-8); a real that is not
 * finite is written as null.  tests/unit/test_conductor_answer.c parses
 * every shape back with jansson.
 */
#include "conductor/answer.h"

#include <math.h>
#include <stdio.h>

/* ---- writers ------------------------------------------------------------- */

static void put(struct mc_buf *b, const char *s)
{
	mc_buf_append(b, s, strlen(s));
}

static void put_u64(struct mc_buf *b, uint64_t v)
{
	char s[20];
	size_t n = sizeof(s);

	do {
		s[--n] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	mc_buf_append(b, s + n, sizeof(s) - n);
}

static void put_i64(struct mc_buf *b, int64_t v)
{
	if (v < 0) {
		put(b, "-");
		put_u64(b, (uint64_t)0 - (uint64_t)v);
	} else {
		put_u64(b, (uint64_t)v);
	}
}

void mc_conductor_json_str(struct mc_buf *b, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	size_t run = 0;

	put(b, "\"");
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		char esc[6] = {'\\', 'u', '0', '0', hex[ch >> 4], hex[ch & 15]};

		if (ch >= 0x20 && ch != '"' && ch != '\\')
			continue;
		mc_buf_append(b, s + run, i - run);
		run = i + 1;
		if (ch == '"' || ch == '\\') {
			esc[1] = (char)ch;
			mc_buf_append(b, esc, 2);
		} else {
			mc_buf_append(b, esc, sizeof(esc));
		}
	}
	mc_buf_append(b, s + run, len - run);
	put(b, "\"");
}

/*
 * Times in seconds to the nanosecond: below 9e6 s the nanoseconds fit a
 * double's 53 bits exactly, and are printed as integer part, point and up
 * to nine digits (trailing zeros dropped, one kept).  Anything larger
 * goes through %.17g.
 */
void mc_conductor_json_real(struct mc_buf *b, double v)
{
	char s[40];
	double a = fabs(v);

	if (!isfinite(v)) {
		put(b, "null");
	} else if (a < 9e6) {
		uint64_t ns = (uint64_t)(a * 1e9 + 0.5), frac = ns % 1000000000u;
		size_t n = 9;

		if (v < 0 && ns)
			put(b, "-");
		put_u64(b, ns / 1000000000u);
		for (int i = 8; i >= 0; i--) {
			s[i] = (char)('0' + frac % 10);
			frac /= 10;
		}
		while (n > 1 && s[n - 1] == '0')
			n--;
		put(b, ".");
		mc_buf_append(b, s, n);
	} else {
		int n = snprintf(s, sizeof(s), "%.17g", v);
		mc_buf_append(b, s, (size_t)n);
		if (!strpbrk(s, ".e"))
			put(b, ".0");
	}
}

/* "name": -- the first of an object's members gets no comma */
static void key(struct mc_buf *b, const char *name, bool *first)
{
	if (!*first)
		put(b, ",");
	*first = false;
	mc_conductor_json_str(b, name, strlen(name));
	put(b, ":");
}

static void ref(struct mc_buf *b, const struct mc_conductor_ref *r)
{
	if (!r) {
		put(b, "null");
		return;
	}
	put(b, "{\"id\":");
	mc_conductor_json_str(b, r->id, strlen(r->id));
	put(b, ",\"segment\":");
	mc_conductor_json_str(b, r->segment, strlen(r->segment));
	put(b, "}");
}

static void range(struct mc_buf *b, uint32_t first, uint32_t count,
		  const struct mc_conductor_ref *src, bool fetch, bool *first_range)
{
	put(b, *first_range ? "{\"first\":" : ",{\"first\":");
	*first_range = false;
	put_u64(b, first);
	put(b, ",\"count\":");
	put_u64(b, count);
	put(b, ",\"instance\":");
	mc_conductor_json_str(b, src->id, strlen(src->id));
	put(b, ",\"segment\":");
	mc_conductor_json_str(b, src->segment, strlen(src->segment));
	put(b, fetch ? ",\"fetch\":true}" : ",\"fetch\":false}");
}

/* ---- the answer ---------------------------------------------------------- */

void mc_conductor_answer_encode(const struct mc_conductor_answer *a, struct mc_buf *out)
{
	const struct mc_sched_choice *ch = a->ch;
	const struct mc_conductor_ref *from = ch->fetch_from >= 0 ? &a->pre[ch->fetch_from] : NULL;
	bool first = true, first_range = true;

	put(out, "{");
	key(out, "prefill", &first);
	ref(out, &a->pre[ch->prefill]);
	key(out, "decode", &first);
	ref(out, a->decode);
	key(out, "ttft_s", &first);
	mc_conductor_json_real(out, ch->ttft_s);
	key(out, "tbt_s", &first);
	mc_conductor_json_real(out, ch->tbt_s);
	put(out, ",\"predicted\":{\"queue_s\":");
	mc_conductor_json_real(out, ch->queue_s);
	put(out, ",\"transfer_s\":");
	mc_conductor_json_real(out, ch->transfer_s);
	put(out, ",\"prefill_s\":");
	mc_conductor_json_real(out, ch->prefill_s);
	put(out, ",\"ttft_s\":");
	mc_conductor_json_real(out, ch->ttft_s);
	put(out, ",\"tbt_s\":");
	mc_conductor_json_real(out, ch->tbt_s);
	put(out, "}");
	key(out, "prefix_blocks", &first);
	put_u64(out, ch->prefix_blocks);
	key(out, "local_blocks", &first);
	put_u64(out, ch->local_blocks);
	key(out, "fetch_blocks", &first);
	put_u64(out, ch->fetch_blocks);
	key(out, "prefix_tokens", &first);
	put_u64(out, ch->prefix_tokens);
	key(out, "fetch_from", &first);
	ref(out, from);
	/* the reused prefix as ranges: [0, local) own, [local, prefix) fetched */
	key(out, "ranges", &first);
	put(out, "[");
	if (ch->local_blocks)
		range(out, 0, ch->local_blocks, &a->pre[ch->prefill], false, &first_range);
	if (from && ch->prefix_blocks > ch->local_blocks)
		range(out, ch->local_blocks, ch->prefix_blocks - ch->local_blocks, from, true,
		      &first_range);
	put(out, "]");
	key(out, "matches", &first);
	put(out, "{");
	for (size_t p = 0; p < a->n_pre; p++) {
		if (p)
			put(out, ",");
		mc_conductor_json_str(out, a->pre[p].id, strlen(a->pre[p].id));
		put(out, ":");
		put_u64(out, a->matches[p]);
	}
	put(out, "}");
	if (a->echo_keys) {
		key(out, "keys", &first);
		put(out, "[");
		for (size_t i = 0; i < a->n_keys; i++) {
			if (i)
				put(out, ",");
			mc_conductor_json_str(out, a->keys[i].ptr, a->keys[i].len);
		}
		put(out, "]");
	}
	if (a->rid_kind == MC_CONDUCTOR_RID_STR) {
		key(out, "request_id", &first);
		mc_conductor_json_str(out, a->rid_str, a->rid_len);
	} else if (a->rid_kind == MC_CONDUCTOR_RID_INT) {
		key(out, "request_id", &first);
		put_i64(out, a->rid_int);
	}
	if (a->error) {
		key(out, "error", &first);
		mc_conductor_json_str(out, a->error, strlen(a->error));
		key(out, "rejected", &first);
		mc_conductor_json_str(out, a->rejected, strlen(a->rejected));
		key(out, "ttft_slo_s", &first);
		mc_conductor_json_real(out, a->ttft_slo_s);
		key(out, "tbt_slo_s", &first);
		mc_conductor_json_real(out, a->tbt_slo_s);
	}
	put(out, "}");
}
