/*
 * test_wal.c - the master's write-ahead log (master/wal.h) on real files:
 * replay in order, a torn tail cut, damage in the middle refused, a newer
 * version refused, a missing file found, files dropped after a snapshot,
 * and a failed write (RLIMIT_FSIZE) cut back and not acknowledged.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "base/log.h"
#include "master/wal.h"
#include "support.h"

struct seen {
	uint64_t n, first, last;
	uint64_t sum; /* of payload bytes, position-weighted */
	bool order_ok;
};

static mc_status collect(void *arg, const struct mc_wal_rec *r)
{
	struct seen *s = arg;

	if (s->n == 0)
		s->first = r->seq;
	else if (r->seq != s->last + 1)
		s->order_ok = false;
	s->last = r->seq;
	s->n++;
	/* payload i is (seq & 0xff) repeated, of length seq % 300 */
	if (r->len != r->seq % 300 || r->type != 1 + r->seq % 7)
		s->order_ok = false;
	for (uint32_t i = 0; i < r->len; i++)
		if (r->payload[i] != (uint8_t)r->seq)
			s->order_ok = false;
	return MC_OK;
}

static void append_n(struct mc_wal *w, uint64_t n)
{
	uint8_t buf[300];

	for (uint64_t i = 0; i < n; i++) {
		uint64_t seq = mc_wal_last_seq(w) + 1, got;

		memset(buf, (uint8_t)seq, sizeof(buf));
		assert_int_equal(
			mc_wal_append(w, (uint16_t)(1 + seq % 7), buf, (uint32_t)(seq % 300), &got),
			MC_OK);
		assert_int_equal(got, seq);
	}
}

static char *mkdir_tmp(void)
{
	char tmpl[] = "/tmp/mc-wal-XXXXXX";
	char *d = mkdtemp(tmpl);

	assert_non_null(d);
	return strdup(d);
}

static void rm_rf(const char *dir)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void file_of(const char *dir, uint64_t first, char *out, size_t n)
{
	snprintf(out, n, "%s/wal-%016llx.log", dir, (unsigned long long)first);
}

static off_t size_of(const char *path)
{
	struct stat sb;

	assert_int_equal(stat(path, &sb), 0);
	return sb.st_size;
}

static mc_status reopen(const char *dir, uint64_t after, struct seen *s,
			struct mc_wal_open_info *info, struct mc_wal **out)
{
	struct mc_wal *w = NULL;
	mc_status st;

	memset(s, 0, sizeof(*s));
	s->order_ok = true;
	st = mc_wal_open(dir, MC_WAL_FSYNC_NO, after, collect, s, &w, info);
	if (out)
		*out = w;
	else if (w)
		assert_int_equal(mc_wal_close(w), MC_OK);
	return st;
}

struct hints {
	struct seen s;
	uint64_t after, hinted, last_hint, bad;
};

static mc_status hint_apply(void *arg, const struct mc_wal_rec *r)
{
	struct hints *h = arg;

	/* a record may be applied without a hint (the first of a file or of a
	 * read chunk), never after its hint was passed by */
	if (h->last_hint > r->seq + MC_WAL_HINT_AHEAD)
		h->bad++;
	return collect(&h->s, r);
}

static mc_status hint_note(void *arg, const struct mc_wal_rec *r)
{
	struct hints *h = arg;
	uint64_t done = h->s.n ? h->s.last : h->after; /* read past, applied or not */

	/* each once, in order, after `after`, ahead of what was read, not too
	 * far ahead */
	if (r->seq <= h->last_hint || r->seq <= done || r->seq <= h->after ||
	    r->seq > done + 1 + MC_WAL_HINT_AHEAD || r->len != r->seq % 300)
		h->bad++;
	h->last_hint = r->seq;
	h->hinted++;
	return MC_OK;
}

/* mc_wal_open_hinted: the records about to be applied are hinted first. */
static void hints_run_ahead_of_the_records(void **state)
{
	char *dir = mkdir_tmp();
	struct mc_wal *w;
	struct hints h;

	(void)state;
	assert_int_equal(mc_wal_open(dir, MC_WAL_FSYNC_NO, 0, NULL, NULL, &w, NULL), MC_OK);
	append_n(w, 3000);
	assert_int_equal(mc_wal_commit(w), MC_OK);
	assert_int_equal(mc_wal_rotate(w), MC_OK);
	append_n(w, 3000);
	assert_int_equal(mc_wal_close(w), MC_OK);

	memset(&h, 0, sizeof(h));
	h.s.order_ok = true;
	h.after = 500;
	assert_int_equal(
		mc_wal_open_hinted(dir, MC_WAL_FSYNC_NO, 500, hint_apply, hint_note, &h, &w, NULL),
		MC_OK);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_true(h.s.order_ok);
	assert_int_equal(h.s.first, 501);
	assert_int_equal(h.s.last, 6000);
	assert_int_equal(h.bad, 0);
	/* all but the first of each file and of each read chunk */
	assert_true(h.hinted >= 5400 && h.hinted <= 5499);
	rm_rf(dir);
	free(dir);
}

/* 1,000 records in two commits and two files, replayed whole and after a seq. */
static void records_come_back_in_order(void **state)
{
	char *dir = mkdir_tmp();
	struct mc_wal *w;
	struct mc_wal_open_info info;
	struct seen s;

	(void)state;
	assert_int_equal(reopen(dir, 0, &s, &info, &w), MC_OK);
	assert_int_equal(s.n, 0);
	append_n(w, 400);
	assert_int_equal(mc_wal_commit(w), MC_OK);
	assert_int_equal(mc_wal_rotate(w), MC_OK);
	append_n(w, 600);
	assert_int_equal(mc_wal_close(w), MC_OK); /* commits */

	assert_int_equal(reopen(dir, 0, &s, &info, NULL), MC_OK);
	assert_true(s.order_ok);
	assert_int_equal(s.n, 1000);
	assert_int_equal(s.first, 1);
	assert_int_equal(info.last_seq, 1000);
	assert_int_equal(info.files, 2);
	assert_int_equal(info.cut_bytes, 0);

	assert_int_equal(reopen(dir, 500, &s, &info, &w), MC_OK);
	assert_int_equal(s.n, 500);
	assert_int_equal(s.first, 501);
	append_n(w, 10); /* appending goes on after the last record */
	assert_int_equal(mc_wal_last_seq(w), 1010);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, 0, &s, &info, NULL), MC_OK);
	assert_true(s.order_ok);
	assert_int_equal(s.n, 1010);
	rm_rf(dir);
	free(dir);
}

/* Half a record at the end (a crash mid-append) is cut; the log goes on. */
static void a_torn_tail_is_cut(void **state)
{
	char *dir = mkdir_tmp(), path[512];
	struct mc_wal *w;
	struct mc_wal_open_info info;
	struct seen s;
	uint8_t rec[mc_wal_rec_size(200)], payload[200] = {0};
	off_t whole;
	int fd;

	(void)state;
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	append_n(w, 50);
	assert_int_equal(mc_wal_close(w), MC_OK);
	file_of(dir, 1, path, sizeof(path));
	whole = size_of(path);
	mc_wal_encode_rec(rec, 51, 1, payload, sizeof(payload));
	fd = open(path, O_WRONLY | O_APPEND);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, rec, sizeof(rec) / 2), (ssize_t)(sizeof(rec) / 2));
	close(fd);

	assert_int_equal(reopen(dir, 0, &s, &info, &w), MC_OK);
	assert_int_equal(s.n, 50);
	assert_int_equal(info.cut_bytes, sizeof(rec) / 2);
	assert_int_equal(size_of(path), whole);
	append_n(w, 5);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, 0, &s, &info, NULL), MC_OK);
	assert_true(s.order_ok);
	assert_int_equal(s.n, 55);
	assert_int_equal(info.cut_bytes, 0);
	rm_rf(dir);
	free(dir);
}

/* A damaged record with intact ones after it is refused, the file left as
 * it was; a damaged last record is a torn tail. */
static void damage_in_the_middle_is_refused(void **state)
{
	char *dir = mkdir_tmp(), path[512];
	struct mc_wal *w;
	struct mc_wal_open_info info;
	struct seen s;
	off_t whole;

	(void)state;
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	append_n(w, 30);
	assert_int_equal(mc_wal_close(w), MC_OK);
	file_of(dir, 1, path, sizeof(path));
	whole = size_of(path);

	assert_true(mc_test_flip_byte(path, MC_WAL_HDR_LEN + 20)); /* inside record 1's payload */
	assert_int_equal(reopen(dir, 0, &s, &info, NULL), MC_ERR_CHECKSUM_MISMATCH);
	assert_non_null(strstr(mc_last_error(), "not a torn tail"));
	assert_non_null(strstr(mc_last_error(), path));
	assert_int_equal(size_of(path), whole);
	assert_true(mc_test_flip_byte(path, MC_WAL_HDR_LEN + 20)); /* mended */

	assert_true(mc_test_flip_byte(path, whole - 3)); /* the last record's checksum */
	assert_int_equal(reopen(dir, 0, &s, &info, NULL), MC_OK);
	assert_int_equal(s.n, 29);
	assert_int_equal(info.cut_bytes, mc_wal_rec_size(30 % 300));
	rm_rf(dir);
	free(dir);
}

/* A file of a newer format version, and a file missing between two. */
static void newer_versions_and_gaps_are_refused(void **state)
{
	char *dir = mkdir_tmp(), path[512];
	struct mc_wal *w;
	struct seen s;
	uint64_t second;
	unsigned dropped;
	int fd;

	(void)state;
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	append_n(w, 10);
	assert_int_equal(mc_wal_rotate(w), MC_OK);
	second = mc_wal_last_seq(w) + 1;
	append_n(w, 10);
	assert_int_equal(mc_wal_rotate(w), MC_OK);
	append_n(w, 10);
	assert_int_equal(mc_wal_close(w), MC_OK);

	/* the second file removed: the third does not follow the first */
	file_of(dir, second, path, sizeof(path));
	{
		char moved[600];

		snprintf(moved, sizeof(moved), "%s.away", path);
		assert_int_equal(rename(path, moved), 0);
		assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_ERR_MALFORMED_JSON);
		assert_non_null(strstr(mc_last_error(), "records are missing"));
		assert_int_equal(rename(moved, path), 0);
	}

	/* a header of version 2, checksummed as such */
	{
		uint8_t hdr[MC_WAL_HDR_LEN], good[MC_WAL_HDR_LEN];
		uint64_t first, sum;

		mc_wal_encode_header(hdr, second);
		hdr[8] = 2;
		sum = XXH3_64bits(hdr, 24);
		memcpy(hdr + 24, &sum, sizeof(sum)); /* little-endian host */
		assert_int_equal(mc_wal_decode_header(hdr, sizeof(hdr), &first),
				 MC_ERR_INVALID_VERSION);
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		assert_int_equal(pread(fd, good, sizeof(good), 0), (ssize_t)sizeof(good));
		assert_int_equal(pwrite(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
		assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_ERR_INVALID_VERSION);
		assert_non_null(strstr(mc_last_error(), "newer"));
		assert_int_equal(pwrite(fd, good, sizeof(good), 0), (ssize_t)sizeof(good));
		close(fd);
	}

	/* a snapshot through the second file: the first two go, the log replays
	 * after it, and from 0 the records before are missing */
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	assert_int_equal(s.n, 30);
	assert_int_equal(mc_wal_drop_through(w, second + 9, &dropped), MC_OK);
	assert_int_equal(dropped, 2);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, second + 9, &s, NULL, NULL), MC_OK);
	assert_int_equal(s.n, 10);
	assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "records are missing"));
	rm_rf(dir);
	free(dir);
}

/* A snapshot right after a rotation: the files before are dropped and the
 * log is one empty file; it reopens after the snapshot's seq and appends
 * there (it once tried to make that file again: EEXIST). */
static void an_empty_rotated_log_reopens_after_its_snapshot(void **state)
{
	char *dir = mkdir_tmp();
	struct mc_wal *w;
	struct seen s;
	unsigned dropped;
	uint64_t snap;
	(void)state;
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	append_n(w, 20);
	assert_int_equal(mc_wal_rotate(w), MC_OK);
	snap = mc_wal_last_seq(w);
	assert_int_equal(mc_wal_drop_through(w, snap, &dropped), MC_OK);
	assert_int_equal(dropped, 1);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, snap, &s, NULL, &w), MC_OK);
	assert_int_equal(s.n, 0);
	assert_int_equal(mc_wal_last_seq(w), snap);
	append_n(w, 5);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, snap, &s, NULL, NULL), MC_OK);
	assert_int_equal(s.n, 5);
	assert_true(s.order_ok);
	assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_ERR_MALFORMED_JSON);
	rm_rf(dir);
	free(dir);
}

/* A write the file system refuses (RLIMIT_FSIZE: EFBIG, as a full disk's
 * ENOSPC) is cut back off the file, not acknowledged, and the log goes on
 * once there is room. */
static void a_failed_write_is_not_acknowledged(void **state)
{
	char *dir = mkdir_tmp(), path[512];
	struct mc_wal *w;
	struct seen s;
	struct rlimit old, lim;
	off_t before;

	(void)state;
	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	append_n(w, 20);
	assert_int_equal(mc_wal_commit(w), MC_OK);
	file_of(dir, 1, path, sizeof(path));
	before = size_of(path);

	assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = old;
	lim.rlim_cur = (rlim_t)before + 100;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
	append_n(w, 20); /* ~3 KiB: over the limit */
	assert_int_equal(mc_wal_commit(w), MC_ERR_FILE_WRITE_FAIL);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
	assert_int_equal(size_of(path), before);
	assert_int_equal(mc_wal_last_seq(w), 20); /* the failed ones are forgotten */
	append_n(w, 3);
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_OK);
	assert_true(s.order_ok);
	assert_int_equal(s.n, 23);
	signal(SIGXFSZ, SIG_DFL);
	rm_rf(dir);
	free(dir);
}

/* EVERYSEC runs its fdatasync thread beside the appends (TSan checks it). */
static void everysec_commits_beside_its_thread(void **state)
{
	char *dir = mkdir_tmp();
	struct mc_wal *w;
	struct seen s;
	enum mc_wal_fsync p;

	(void)state;
	assert_true(mc_wal_fsync_parse("everysec", &p));
	assert_int_equal(p, MC_WAL_FSYNC_EVERYSEC);
	assert_false(mc_wal_fsync_parse("sometimes", &p));
	assert_int_equal(mc_wal_open(dir, p, 0, NULL, NULL, &w, NULL), MC_OK);
	for (int i = 0; i < 200; i++) {
		append_n(w, 5);
		assert_int_equal(mc_wal_commit(w), MC_OK);
		if (i % 50 == 0)
			assert_int_equal(mc_wal_rotate(w), MC_OK);
	}
	assert_int_equal(mc_wal_close(w), MC_OK);
	assert_int_equal(reopen(dir, 0, &s, NULL, NULL), MC_OK);
	assert_true(s.order_ok);
	assert_int_equal(s.n, 1000);
	rm_rf(dir);
	free(dir);
}

/* The codec alone: lengths, types and the partial-record answer. */
static void the_codec_refuses_what_is_not_a_record(void **state)
{
	uint8_t rec[mc_wal_rec_size(5)];
	struct mc_wal_rec r;
	size_t used;

	(void)state;
	mc_wal_encode_rec(rec, 7, 3, "hello", 5);
	assert_int_equal(mc_wal_decode_rec(rec, sizeof(rec), &r, &used), MC_OK);
	assert_int_equal(used, sizeof(rec));
	assert_int_equal(r.seq, 7);
	assert_int_equal(r.type, 3);
	assert_memory_equal(r.payload, "hello", 5);
	assert_int_equal(mc_wal_decode_rec(rec, sizeof(rec) - 1, &r, &used), MC_INPROGRESS);
	assert_int_equal(mc_wal_decode_rec(rec, 3, &r, &used), MC_INPROGRESS);
	mc_wal_encode_rec(rec, 7, 0, "hello", 5); /* type 0 */
	assert_int_equal(mc_wal_decode_rec(rec, sizeof(rec), &r, &used), MC_ERR_MALFORMED_JSON);
	rec[0] = 0xff, rec[1] = 0xff, rec[2] = 0xff, rec[3] = 0x7f; /* 2 GiB payload */
	assert_int_equal(mc_wal_decode_rec(rec, sizeof(rec), &r, &used), MC_ERR_MALFORMED_JSON);
	assert_non_null(strstr(mc_last_error(), "over the limit"));
}

struct tapped {
	unsigned calls;
	uint64_t first, last, n;
	bool whole; /* every call's bytes decoded to whole records in order */
};

static void tap_cb(void *arg, const uint8_t *recs, size_t len, uint64_t last_seq)
{
	struct tapped *t = arg;
	size_t off = 0;

	t->calls++;
	while (off < len) {
		struct mc_wal_rec r;
		size_t used;

		if (mc_wal_decode_rec(recs + off, len - off, &r, &used) != MC_OK ||
		    r.seq != t->last + 1) {
			t->whole = false;
			return;
		}
		if (!t->first)
			t->first = r.seq;
		t->last = r.seq;
		t->n++;
		off += used;
	}
	if (t->last != last_seq)
		t->whole = false;
}

/* The tap sees each commit's records once, whole, in order (the HA stream). */
static void the_tap_sees_every_commit_once(void **state)
{
	char *dir = mkdir_tmp();
	struct tapped t = {.whole = true};
	struct mc_wal *w;
	struct seen s;

	(void)state;
	assert_int_equal(reopen(dir, 0, &s, NULL, &w), MC_OK);
	mc_wal_set_tap(w, tap_cb, &t);
	assert_int_equal(mc_wal_commit(w), MC_OK); /* nothing to write: no call */
	assert_int_equal(t.calls, 0);
	append_n(w, 3);
	assert_int_equal(mc_wal_commit(w), MC_OK);
	assert_int_equal(t.calls, 1);
	append_n(w, 250);
	assert_int_equal(mc_wal_rotate(w), MC_OK); /* commits too */
	assert_int_equal(t.calls, 2);
	mc_wal_set_tap(w, NULL, NULL);
	append_n(w, 5);
	assert_int_equal(mc_wal_commit(w), MC_OK);
	assert_int_equal(t.calls, 2);
	assert_true(t.whole);
	assert_int_equal(t.first, 1);
	assert_int_equal(t.last, 253);
	assert_int_equal(t.n, 253);
	assert_int_equal(mc_wal_close(w), MC_OK);
	rm_rf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(records_come_back_in_order),
		cmocka_unit_test(hints_run_ahead_of_the_records),
		cmocka_unit_test(a_torn_tail_is_cut),
		cmocka_unit_test(damage_in_the_middle_is_refused),
		cmocka_unit_test(newer_versions_and_gaps_are_refused),
		cmocka_unit_test(an_empty_rotated_log_reopens_after_its_snapshot),
		cmocka_unit_test(a_failed_write_is_not_acknowledged),
		cmocka_unit_test(everysec_commits_beside_its_thread),
		cmocka_unit_test(the_codec_refuses_what_is_not_a_record),
		cmocka_unit_test(the_tap_sees_every_commit_once),
	};
	mc_log_set_level(MC_LOG_ERROR);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
