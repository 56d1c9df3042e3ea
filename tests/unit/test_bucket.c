/*
 * tests/unit/test_bucket.c - the SSD tier's bucket files (store/bucket.h)
 * on real files: written, found and read back, and every way a bucket on
 * disk can be incomplete or damaged refused, never served.
 *
 * The file cases run three times: through io_uring in a directory under
 * /tmp (the machine's disk) and under /dev/shm (tmpfs, when it exists),
 * and with the pread/pwrite fallback forced, each with O_DIRECT where the
 * directory takes it; a few run a fourth time with O_DIRECT turned off.
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

#include "base/alloc.h"
#include "base/buf.h"
#include "base/endian.h"
#include "base/log.h"
#include "store/bucket.h"
#include "support.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

/* Where and how a file case runs. */
struct mode {
	const char *base_dir;
	bool uring;	/* false: the pread/pwrite fallback, forced */
	bool no_direct; /* buffered even where the file system takes O_DIRECT */
};

/* O_DIRECT is used wherever the directory takes it (the disk; tmpfs too
 * since Linux 6.6, which emulates it); buffered forces it off */
static const struct mode on_disk = {"/tmp", true, false}, on_tmpfs = {"/dev/shm", true, false},
			 fallback = {"/tmp", false, false}, buffered = {"/tmp", true, true};
static char dir[256];
static int dirfd_ = -1;
static struct mc_disk_io *IO;

static int dir_setup(void **state)
{
	const struct mode *m = *state;
	struct mc_disk_io_params p = {.use_uring = m->uring};
	/* without /dev/shm, /tmp: the disk twice */
	if (!mc_test_tmpdir(m->base_dir, "mc-bucket", dir, sizeof(dir)))
		return -1;
	dirfd_ = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd_ < 0)
		return -1;
	/* O_DIRECT where the file system takes it, as the disk store opens it */
	p.direct = !m->no_direct && mc_disk_dir_direct(dirfd_);
	if (mc_disk_io_new(&p, &IO) != MC_OK || mc_disk_io_uring(IO) != m->uring)
		return -1;
	return 0;
}

static int dir_teardown(void **state)
{
	(void)state;
	close(dirfd_);
	mc_disk_io_free(IO);
	IO = NULL;
	return mc_test_rmtree(dir);
}

static bool file_exists(const char *name)
{
	struct stat sb;
	return fstatat(dirfd_, name, &sb, 0) == 0;
}

static off_t file_size(const char *name)
{
	struct stat sb;
	assert_int_equal(fstatat(dirfd_, name, &sb, 0), 0);
	return sb.st_size;
}

static void touch(const char *name, const char *content)
{
	int fd = openat(dirfd_, name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

/* XORs one byte of a file at off. */
static void flip(const char *name, off_t off)
{
	int fd = openat(dirfd_, name, O_RDWR);
	uint8_t c;
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, off), 1);
	c ^= 0x40;
	assert_int_equal(pwrite(fd, &c, 1, off), 1);
	close(fd);
}

/* Three objects: a small one, one of 1 MiB + 1 (not a block multiple),
 * and one with a key of the longest length. */
struct sample {
	char *vals[3];
	char *keys[3];
	struct mc_bucket_obj objs[3];
};

static void sample_make(struct sample *s, uint64_t seed)
{
	size_t lens[3] = {100, (1u << 20) + 1, 5000};
	size_t klens[3] = {5, 12, MC_BUCKET_KEY_MAX};
	for (int i = 0; i < 3; i++) {
		s->vals[i] = malloc(lens[i]);
		s->keys[i] = malloc(klens[i]);
		mc_test_fill(s->vals[i], lens[i], seed + (uint64_t)i);
		for (size_t k = 0; k < klens[i]; k++)
			s->keys[i][k] = (char)('a' + (k + (size_t)i) % 26);
		s->objs[i] = (struct mc_bucket_obj){s->keys[i], klens[i], s->vals[i], lens[i]};
	}
}

static void sample_free(struct sample *s)
{
	for (int i = 0; i < 3; i++) {
		free(s->vals[i]);
		free(s->keys[i]);
	}
}

static mc_status read_entry(const char *id, const struct mc_bucket_entry *e, void *dst)
{
	mc_status rc;
	int fd = mc_bucket_open(IO, dirfd_, id, &rc);
	if (fd < 0)
		return rc;
	rc = mc_bucket_read(IO, fd, e, dst, e->data_len);
	close(fd);
	return rc;
}

/* ---- written and read back --------------------------------------------------------------- */

static void write_load_read(void **state)
{
	struct sample s;
	struct mc_bucket_meta w, m;
	char id[MC_BUCKET_ID_MAX];
	(void)state;
	sample_make(&s, 1);
	mc_bucket_id(id, 1700000000000ull, 1);
	assert_int_equal(mc_bucket_write(IO, dirfd_, id, s.objs, 3, &w), MC_OK);
	assert_int_equal(mc_bucket_load(dirfd_, id, &m), MC_OK);
	assert_int_equal(m.n, 3);
	assert_int_equal(m.bucket_bytes, w.bucket_bytes);
	assert_int_equal(m.bucket_bytes,
			 (uint64_t)file_size("00000001700000000000-0000000001.bucket"));
	for (uint32_t i = 0; i < 3; i++) {
		const struct mc_bucket_entry *e = &m.entries[i];
		char *got = malloc(e->data_len);
		assert_int_equal(e->offset % MC_BUCKET_ALIGN, 0);
		assert_int_equal((e->offset + mc_bucket_rec_data_off(e->key_len)) % MC_BUCKET_ALIGN,
				 0);
		assert_int_equal(e->key_len, s.objs[i].key_len);
		assert_memory_equal(e->key, s.keys[i], e->key_len);
		assert_int_equal(e->data_len, s.objs[i].len);
		assert_int_equal(read_entry(id, e, got), MC_OK);
		assert_memory_equal(got, s.vals[i], e->data_len);
		free(got);
	}
	/* a buffer too small is refused before any byte is read */
	{
		mc_status rc;
		int fd = mc_bucket_open(IO, dirfd_, id, &rc);
		char small[10];
		assert_true(fd >= 0);
		assert_int_equal(mc_bucket_read(IO, fd, &m.entries[0], small, sizeof(small)),
				 MC_ERR_BUFFER_OVERFLOW);
		close(fd);
	}
	/* a second write of the same id is refused and leaves the first intact */
	assert_int_equal(mc_bucket_write(IO, dirfd_, id, s.objs, 3, NULL), MC_ERR_INVALID_PARAMS);
	mc_bucket_meta_release(&w);
	assert_int_equal(mc_bucket_load(dirfd_, id, &w), MC_OK);
	assert_int_equal(w.n, 3);
	mc_bucket_meta_release(&w);
	mc_bucket_meta_release(&m);
	assert_int_equal(mc_bucket_remove(dirfd_, id), MC_OK);
	assert_false(file_exists("00000001700000000000-0000000001.bucket"));
	assert_false(file_exists("00000001700000000000-0000000001.meta"));
	sample_free(&s);
}

static void bad_writes_leave_nothing(void **state)
{
	struct sample s;
	struct mc_bucket_obj bad;
	char nul_key[4] = {'a', 0, 'b', 'c'};
	(void)state;
	sample_make(&s, 2);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "b1", s.objs, 0, NULL), MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "../b1", s.objs, 1, NULL),
			 MC_ERR_INVALID_PARAMS);
	assert_int_equal(mc_bucket_write(IO, dirfd_, ".b1", s.objs, 1, NULL),
			 MC_ERR_INVALID_PARAMS);
	bad = (struct mc_bucket_obj){nul_key, sizeof(nul_key), s.vals[0], 10};
	assert_int_equal(mc_bucket_write(IO, dirfd_, "b1", &bad, 1, NULL), MC_ERR_INVALID_PARAMS);
	bad = (struct mc_bucket_obj){s.keys[0], MC_BUCKET_KEY_MAX + 1, s.vals[0], 10};
	assert_int_equal(mc_bucket_write(IO, dirfd_, "b1", &bad, 1, NULL), MC_ERR_INVALID_PARAMS);
	bad = (struct mc_bucket_obj){s.keys[0], 5, NULL, 10};
	assert_int_equal(mc_bucket_write(IO, dirfd_, "b1", &bad, 1, NULL), MC_ERR_INVALID_PARAMS);
	assert_false(file_exists("b1.bucket"));

	/* a write the file system refuses half way (the file size limit
	 * stands in for a full disk): an error, and no file of the bucket */
	{
		struct rlimit old, lim;
		struct sigaction ign = {.sa_handler = SIG_IGN}, prev;
		assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
		lim = old;
		lim.rlim_cur = 64 << 10;
		sigaction(SIGXFSZ, &ign, &prev);
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
		assert_int_equal(mc_bucket_write(IO, dirfd_, "b2", s.objs, 3, NULL),
				 MC_ERR_FILE_WRITE_FAIL);
		assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
		sigaction(SIGXFSZ, &prev, NULL);
		assert_non_null(strstr(mc_last_error(), "b2"));
		assert_false(file_exists("b2.bucket"));
		assert_false(file_exists("b2.meta"));
		assert_false(file_exists("b2.meta.tmp"));
	}
	sample_free(&s);
}

/* Reads of several records of two buckets in one batch: each checked
 * and answered on its own. */
static void batch_reads_check_each_record(void **state)
{
	struct sample s;
	struct mc_bucket_meta m1, m2;
	struct mc_bucket_read_req r[5];
	char *got[5];
	mc_status rc;
	int fd1, fd2;
	(void)state;
	sample_make(&s, 9);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "r1", s.objs, 3, &m1), MC_OK);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "r2", s.objs, 2, &m2), MC_OK);
	flip("r2.bucket", (off_t)(m2.entries[0].offset + mc_bucket_rec_data_off(5) + 3));
	fd1 = mc_bucket_open(IO, dirfd_, "r1", &rc);
	fd2 = mc_bucket_open(IO, dirfd_, "r2", &rc);
	assert_true(fd1 >= 0 && fd2 >= 0);
	for (int i = 0; i < 5; i++)
		got[i] = malloc((1u << 20) + 1);
	r[0] = (struct mc_bucket_read_req){fd1, &m1.entries[2], got[0], (1u << 20) + 1, MC_OK};
	r[1] = (struct mc_bucket_read_req){fd1, &m1.entries[1], got[1], 1000, MC_OK};
	r[2] = (struct mc_bucket_read_req){fd2, &m2.entries[0], got[2], (1u << 20) + 1, MC_OK};
	r[3] = (struct mc_bucket_read_req){fd1, &m1.entries[0], got[3], (1u << 20) + 1, MC_OK};
	r[4] = (struct mc_bucket_read_req){fd2, &m2.entries[1], got[4], (1u << 20) + 1, MC_OK};
	assert_int_equal(mc_bucket_read_batch(IO, r, 5), MC_ERR_BUFFER_OVERFLOW);
	assert_int_equal(r[0].status, MC_OK);
	assert_memory_equal(got[0], s.vals[2], 5000);
	assert_int_equal(r[1].status, MC_ERR_BUFFER_OVERFLOW);
	assert_int_equal(r[2].status, MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(r[3].status, MC_OK);
	assert_memory_equal(got[3], s.vals[0], 100);
	assert_int_equal(r[4].status, MC_OK);
	assert_memory_equal(got[4], s.vals[1], (1u << 20) + 1);
	/* a record past the end of its file: a read failure, the others unharmed */
	{
		int wfd = openat(dirfd_, "r2.bucket", O_WRONLY);
		assert_true(wfd >= 0);
		assert_int_equal(ftruncate(wfd, (off_t)m2.entries[1].offset), 0);
		close(wfd);
	}
	assert_int_equal(mc_bucket_read_batch(IO, r + 3, 2), MC_ERR_FILE_READ_FAIL);
	assert_int_equal(r[3].status, MC_OK);
	assert_int_equal(r[4].status, MC_ERR_FILE_READ_FAIL);
	close(fd1);
	close(fd2);
	for (int i = 0; i < 5; i++)
		free(got[i]);
	mc_bucket_meta_release(&m1);
	mc_bucket_meta_release(&m2);
	sample_free(&s);
}

/* ---- O_DIRECT ---------------------------------------------------------------------------- */

static bool on_tmpfs_dir(void)
{
	return strncmp(dir, "/dev/shm/", 9) == 0;
}

/*
 * Values of every shape against the block size (empty, under one block,
 * exactly one, one and a byte, a MiB and a byte), from aligned and
 * unaligned memory, read back into unaligned memory, into aligned memory
 * of exactly their length and into aligned memory with room for the
 * padding: byte-exact every way, nothing written past a capacity, and on
 * a file system that takes O_DIRECT (the disk) every data-file operation
 * went through it, while on tmpfs none did.
 */
static void direct_io_where_the_file_system_takes_it(void **state)
{
	enum { N = 6 };
	static const size_t lens[N] = {0, 1, 4095, 4096, 4097, (1u << 20) + 1};
	const struct mode *mode = *state;
	struct mc_bucket_obj objs[2 * N];
	struct mc_bucket_meta m;
	struct mc_disk_io_stats before, after;
	char keys[2 * N][16];
	uint8_t *vals[2 * N], *raw[2 * N];
	bool direct = mc_disk_io_direct(IO);
	mc_status rc;
	int fd;

	if (mode->no_direct)
		assert_false(direct);
	else
		assert_int_equal(direct, mc_disk_dir_direct(dirfd_));
	/* the disk takes O_DIRECT (a test directory elsewhere may not) */
	if (!mode->no_direct && !on_tmpfs_dir() && !direct)
		fprintf(stderr, "note: %s does not take O_DIRECT; buffered path only\n", dir);
	for (int i = 0; i < 2 * N; i++) {
		size_t len = lens[i % N];
		/* the first N at an odd address, the next N block-aligned */
		raw[i] = aligned_alloc(4096, (len + 4096 + 1 + 4095) & ~(size_t)4095);
		vals[i] = i < N ? raw[i] + 1 : raw[i];
		mc_test_fill(vals[i], len, 100 + (uint64_t)i);
		snprintf(keys[i], sizeof(keys[i]), "key-%d", i);
		objs[i] =
			(struct mc_bucket_obj){keys[i], strlen(keys[i]), len ? vals[i] : NULL, len};
	}
	mc_disk_io_stats(IO, &before);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "dio", objs, 2 * N, &m), MC_OK);
	mc_disk_io_stats(IO, &after);
	if (direct) {
		assert_true(after.direct_ops > before.direct_ops);
		/* every record byte of the data file went through O_DIRECT */
		assert_int_equal(after.direct_bytes - before.direct_bytes, m.bucket_bytes);
	} else {
		assert_int_equal(after.direct_ops, 0);
	}
	fd = mc_bucket_open(IO, dirfd_, "dio", &rc);
	assert_true(fd >= 0);
	assert_int_equal((fcntl(fd, F_GETFL) & O_DIRECT) != 0, direct);
	for (int i = 0; i < 2 * N; i++) {
		size_t len = lens[i % N], padded = (len + 4095) & ~(size_t)4095;
		uint8_t *a = aligned_alloc(4096, padded + 8192); /* a multiple of 4096 */
		uint8_t *u = malloc(len + 2);
		struct mc_bucket_read_req r[3];
		/* unaligned; aligned with exactly len; aligned with room for the padding */
		memset(a, 0xee, padded + 8192);
		memset(u, 0xee, len + 2);
		r[0] = (struct mc_bucket_read_req){fd, &m.entries[i], u + 1, len, MC_OK};
		r[1] = (struct mc_bucket_read_req){fd, &m.entries[i], a, len, MC_OK};
		assert_int_equal(mc_bucket_read_batch(IO, r, 2), MC_OK);
		assert_memory_equal(u + 1, vals[i], len);
		assert_int_equal(u[0], 0xee);
		assert_int_equal(u[len + 1], 0xee);
		assert_memory_equal(a, vals[i], len);
		for (size_t k = len; k < padded + 8192; k++)
			assert_int_equal(a[k], 0xee); /* nothing past cap */
		r[2] = (struct mc_bucket_read_req){fd, &m.entries[i], a + 4096, padded, MC_OK};
		assert_int_equal(mc_bucket_read_batch(IO, &r[2], 1), MC_OK);
		assert_memory_equal(a + 4096, vals[i], len);
		assert_int_equal(a[4096 + padded], 0xee);
		free(a);
		free(u);
	}
	/* a read refused for its capacity does not change how the next read of
	 * the same descriptor is done */
	{
		uint8_t small[16], *big = malloc(lens[5]);
		struct mc_bucket_read_req r[2] = {
			{fd, &m.entries[N + 5], small, sizeof(small), MC_OK},
			{fd, &m.entries[N + 5], big + 0, lens[5], MC_OK},
		};
		assert_int_equal(mc_bucket_read_batch(IO, r, 2), MC_ERR_BUFFER_OVERFLOW);
		assert_int_equal(r[0].status, MC_ERR_BUFFER_OVERFLOW);
		assert_int_equal(r[1].status, MC_OK);
		assert_memory_equal(big, vals[N + 5], lens[5]);
		free(big);
	}
	mc_disk_io_stats(IO, &before);
	if (direct)
		assert_true(before.direct_bytes > after.direct_bytes);
	else
		assert_int_equal(before.direct_ops, 0);
	/* a flipped value byte is caught on the direct path too */
	flip("dio.bucket", (off_t)(m.entries[N + 5].offset + mc_bucket_rec_data_off(6) + 4096));
	{
		uint8_t *got = malloc(lens[5]);
		assert_int_equal(mc_bucket_read(IO, fd, &m.entries[N + 5], got, lens[5]),
				 MC_ERR_CHECKSUM_MISMATCH);
		free(got);
	}
	/* an unaligned operation marked direct is refused before anything runs */
	{
		uint8_t buf[100];
		struct mc_disk_op op = {.fd = fd, .buf = buf, .len = 100, .direct = true};
		assert_int_equal(mc_disk_io_run(IO, &op, 1), MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(mc_last_error(), "aligned"));
	}
	close(fd);
	mc_bucket_meta_release(&m);
	for (int i = 0; i < 2 * N; i++)
		free(raw[i]);
}

/* ---- damage on disk ---------------------------------------------------------------------- */

static void damaged_records_are_refused(void **state)
{
	struct sample s;
	struct mc_bucket_meta m;
	char *got = malloc((1u << 20) + 1);
	(void)state;
	sample_make(&s, 3);
	assert_int_equal(mc_bucket_write(IO, dirfd_, "d1", s.objs, 3, &m), MC_OK);

	/* one bit of the second value: that object is refused, the others read */
	flip("d1.bucket", (off_t)(m.entries[1].offset + mc_bucket_rec_data_off(12) + 777));
	assert_int_equal(read_entry("d1", &m.entries[1], got), MC_ERR_CHECKSUM_MISMATCH);
	assert_int_equal(read_entry("d1", &m.entries[0], got), MC_OK);
	assert_memory_equal(got, s.vals[0], 100);
	assert_int_equal(read_entry("d1", &m.entries[2], got), MC_OK);

	/* the third record's header, then its key */
	flip("d1.bucket", (off_t)(m.entries[2].offset + 17));
	assert_int_equal(read_entry("d1", &m.entries[2], got), MC_ERR_CHECKSUM_MISMATCH);
	flip("d1.bucket", (off_t)(m.entries[2].offset + 17));
	assert_int_equal(read_entry("d1", &m.entries[2], got), MC_OK);
	flip("d1.bucket", (off_t)(m.entries[2].offset + MC_BUCKET_REC_HDR_SIZE + 9));
	assert_int_equal(read_entry("d1", &m.entries[2], got), MC_ERR_CHECKSUM_MISMATCH);

	/* a data file cut short: the index no longer fits, load refuses */
	{
		char path[300];
		snprintf(path, sizeof(path), "%s/d1.bucket", dir);
		assert_int_equal(truncate(path, (off_t)m.entries[2].offset), 0);
	}
	{
		struct mc_bucket_meta l;
		assert_int_equal(mc_bucket_load(dirfd_, "d1", &l), MC_ERR_FILE_READ_FAIL);
		assert_null(l.entries);
	}
	/* an index with one bit flipped */
	assert_int_equal(mc_bucket_write(IO, dirfd_, "d2", s.objs, 3, NULL), MC_OK);
	flip("d2.meta", 40);
	{
		struct mc_bucket_meta l;
		assert_int_equal(mc_bucket_load(dirfd_, "d2", &l), MC_ERR_CHECKSUM_MISMATCH);
	}
	mc_bucket_meta_release(&m);
	free(got);
	sample_free(&s);
}

/* ---- the start-up scan ------------------------------------------------------------------- */

struct seen {
	char ids[8][MC_BUCKET_ID_MAX];
	uint32_t objects[8];
	int n;
};

static mc_status record(void *arg, const char *id, const struct mc_bucket_meta *m)
{
	struct seen *s = arg;
	if (s->n == 8)
		return MC_ERR_INTERNAL;
	snprintf(s->ids[s->n], MC_BUCKET_ID_MAX, "%s", id);
	s->objects[s->n++] = m->n;
	return MC_OK;
}

/* A new offload directory holds nothing: the scan finds nothing, cleanly
 * (it once passed NULL to qsort and bsearch, which UBSan reports). */
static void scan_of_an_empty_directory(void **state)
{
	struct seen seen = {0};
	struct mc_bucket_scan_stats st;
	(void)state;
	assert_int_equal(mc_bucket_scan(dirfd_, record, &seen, &st), MC_OK);
	assert_int_equal(seen.n, 0);
	assert_int_equal(st.buckets + st.orphans + st.dropped + st.stale_tmp, 0);
	assert_int_equal(st.objects, 0);
	/* an index without data, alone: still no data file list to search */
	touch("00000000000000006000-0000000001.meta", "orphan index");
	assert_int_equal(mc_bucket_scan(dirfd_, record, &seen, &st), MC_OK);
	assert_int_equal(st.dropped, 1);
	assert_false(file_exists("00000000000000006000-0000000001.meta"));
}

static void scan_keeps_complete_buckets_only(void **state)
{
	struct sample s;
	struct seen seen = {0};
	struct mc_bucket_scan_stats st;
	char a[MC_BUCKET_ID_MAX], b[MC_BUCKET_ID_MAX], c[MC_BUCKET_ID_MAX], d[MC_BUCKET_ID_MAX];
	char name[MC_BUCKET_ID_MAX + 16];
	(void)state;
	sample_make(&s, 4);
	/* made out of order; the scan hands them over in id (time) order */
	mc_bucket_id(a, 1000, 2);
	mc_bucket_id(b, 999, 7);
	mc_bucket_id(c, 20000, 1);
	mc_bucket_id(d, 1000, 1);
	assert_int_equal(mc_bucket_write(IO, dirfd_, a, s.objs, 1, NULL), MC_OK);
	assert_int_equal(mc_bucket_write(IO, dirfd_, b, s.objs, 2, NULL), MC_OK);
	assert_int_equal(mc_bucket_write(IO, dirfd_, c, s.objs, 3, NULL), MC_OK);
	assert_int_equal(mc_bucket_write(IO, dirfd_, d, s.objs + 1, 2, NULL), MC_OK);
	/* an interrupted write: data without its index, and a half index */
	touch("00000000000000005000-0000000001.bucket", "partial records");
	touch("00000000000000005000-0000000002.bucket", "partial records");
	touch("00000000000000005000-0000000002.meta.tmp", "half an index");
	/* a damaged index: dropped with its data */
	snprintf(name, sizeof(name), "%s.meta", c);
	flip(name, 20);
	/* an index whose data file was deleted by hand */
	touch("00000000000000006000-0000000001.meta", "orphan index");
	/* files of other names are not the scan's */
	touch("README", "operator notes");
	touch("x.bucket.bak", "a backup");

	assert_int_equal(mc_bucket_scan(dirfd_, record, &seen, &st), MC_OK);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.ids[0], b);
	assert_string_equal(seen.ids[1], d);
	assert_string_equal(seen.ids[2], a);
	assert_int_equal(seen.objects[0], 2);
	assert_int_equal(seen.objects[1], 2);
	assert_int_equal(seen.objects[2], 1);
	assert_int_equal(st.buckets, 3);
	assert_int_equal(st.objects, 5);
	assert_int_equal(st.orphans, 2);
	assert_int_equal(st.dropped, 2);
	assert_int_equal(st.stale_tmp, 1);
	assert_false(file_exists("00000000000000005000-0000000001.bucket"));
	assert_false(file_exists("00000000000000005000-0000000002.bucket"));
	assert_false(file_exists("00000000000000005000-0000000002.meta.tmp"));
	assert_false(file_exists("00000000000000006000-0000000001.meta"));
	snprintf(name, sizeof(name), "%s.bucket", c);
	assert_false(file_exists(name));
	assert_true(file_exists("README"));
	assert_true(file_exists("x.bucket.bak"));

	/* a second scan finds the same and deletes nothing more */
	memset(&seen, 0, sizeof(seen));
	assert_int_equal(mc_bucket_scan(dirfd_, record, &seen, &st), MC_OK);
	assert_int_equal(seen.n, 3);
	assert_int_equal(st.orphans + st.dropped + st.stale_tmp, 0);
	/* the callback's status stops the scan */
	seen.n = 8;
	assert_int_equal(mc_bucket_scan(dirfd_, record, &seen, NULL), MC_ERR_INTERNAL);
	sample_free(&s);
}

/* ---- the index codec --------------------------------------------------------------------- */

static void encode_sample(struct mc_buf *b, uint32_t n)
{
	struct mc_bucket_entry e[3] = {
		{(char *)"k0", 2, 0, 10, 0x1111},
		{(char *)"key1", 4, 0, 5000, 0x2222},
		{(char *)"k2", 2, 0, 0, 0x3333},
	};
	struct mc_bucket_meta m = {0, n, e};
	uint64_t off = 0;
	for (uint32_t i = 0; i < n; i++) {
		e[i].offset = off;
		off += mc_bucket_rec_span(e[i].key_len, e[i].data_len);
	}
	m.bucket_bytes = off;
	mc_buf_init(b);
	assert_int_equal(mc_bucket_meta_encode(&m, b), MC_OK);
}

/* Rewrites the trailing checksum after an edit, so the edit itself is what
 * the decoder judges. */
static void reseal(struct mc_buf *b);

static void expect_refused(struct mc_buf *b, mc_status want, const char *why)
{
	struct mc_bucket_meta m;
	mc_status got = mc_bucket_meta_decode(b->data, b->len, &m);
	if (got != want)
		fail_msg("%s: decode gave %d", why, got);
	assert_null(m.entries);
	if (!strstr(mc_last_error(), why))
		fail_msg("reason '%s', expected '%s'", mc_last_error(), why);
}

static void index_codec_round_trip_and_refusals(void **state)
{
	struct mc_buf b, again;
	struct mc_bucket_meta m;
	(void)state;
	encode_sample(&b, 3);
	assert_int_equal(mc_bucket_meta_decode(b.data, b.len, &m), MC_OK);
	assert_int_equal(m.n, 3);
	assert_string_equal(m.entries[1].key, "key1");
	assert_int_equal(m.entries[2].data_sum, 0x3333);
	mc_buf_init(&again);
	assert_int_equal(mc_bucket_meta_encode(&m, &again), MC_OK);
	assert_int_equal(again.len, b.len);
	assert_memory_equal(again.data, b.data, b.len);
	mc_buf_release(&again);
	mc_bucket_meta_release(&m);

	b.len -= 1;
	expect_refused(&b, MC_ERR_CHECKSUM_MISMATCH, "checksum");
	b.len = 10;
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "cut short");
	mc_buf_release(&b);

	encode_sample(&b, 3);
	b.data[0] ^= 1;
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "magic");
	b.data[0] ^= 1;
	mc_put_le16(b.data + 4, 2);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "version");
	mc_put_le16(b.data + 4, 1);
	mc_put_le64(b.data + 24, 1);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "reserved");
	mc_put_le64(b.data + 24, 0);
	mc_put_le32(b.data + 8, 0);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "entry count");
	mc_put_le32(b.data + 8, MC_BUCKET_ENTRIES_MAX + 1);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "entry count");
	mc_put_le32(b.data + 8, 40);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "more entries than bytes");
	mc_put_le32(b.data + 8, 2);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "size does not match");
	mc_put_le32(b.data + 8, 3);
	/* the second entry's offset one block late: a gap */
	mc_put_le64(b.data + 32 + 28 + 2, 3 * MC_BUCKET_ALIGN);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "end to end");
	mc_put_le64(b.data + 32 + 28 + 2, 2 * MC_BUCKET_ALIGN);
	/* a NUL inside the first key */
	b.data[32 + 28 + 1] = 0;
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "NUL");
	b.data[32 + 28 + 1] = '0';
	/* a key length past the end */
	mc_put_le32(b.data + 32 + 24, 60000);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "key length");
	mc_put_le32(b.data + 32 + 24, 2);
	/* the bucket's size larger than its records */
	mc_put_le64(b.data + 16, 7 * MC_BUCKET_ALIGN);
	reseal(&b);
	expect_refused(&b, MC_ERR_FILE_READ_FAIL, "size does not match");
	mc_buf_release(&b);
}

static void reseal(struct mc_buf *b)
{
	mc_put_le64(b->data + b->len - 8, XXH3_64bits(b->data, b->len - 8));
}

static void record_header_codec(void **state)
{
	struct mc_bucket_rec_hdr h = {7, 12345, 0xabc, 0xdef}, d;
	uint8_t raw[MC_BUCKET_REC_HDR_SIZE];
	(void)state;
	mc_bucket_rec_hdr_encode(&h, raw);
	assert_int_equal(mc_bucket_rec_hdr_decode(raw, sizeof(raw), &d), MC_OK);
	assert_int_equal(d.key_len, 7);
	assert_int_equal(d.data_len, 12345);
	assert_int_equal(d.key_sum, 0xabc);
	assert_int_equal(d.data_sum, 0xdef);
	assert_int_equal(mc_bucket_rec_hdr_decode(raw, 63, &d), MC_ERR_FILE_READ_FAIL);
	raw[20] ^= 1;
	assert_int_equal(mc_bucket_rec_hdr_decode(raw, sizeof(raw), &d), MC_ERR_CHECKSUM_MISMATCH);
	h.key_len = 0;
	mc_bucket_rec_hdr_encode(&h, raw);
	assert_int_equal(mc_bucket_rec_hdr_decode(raw, sizeof(raw), &d), MC_ERR_FILE_READ_FAIL);
	h.key_len = 7;
	h.data_len = UINT64_MAX;
	mc_bucket_rec_hdr_encode(&h, raw);
	assert_int_equal(mc_bucket_rec_hdr_decode(raw, sizeof(raw), &d), MC_ERR_FILE_READ_FAIL);
	/* ids sort in time order */
	{
		char x[MC_BUCKET_ID_MAX], y[MC_BUCKET_ID_MAX];
		mc_bucket_id(x, 999, 4000000000u);
		mc_bucket_id(y, 1000, 0);
		assert_true(strcmp(x, y) < 0);
	}
}

#define ON(t, m)     cmocka_unit_test_prestate_setup_teardown(t, dir_setup, dir_teardown, (void *)&m)
#define ALL_MODES(t) ON(t, on_disk), ON(t, on_tmpfs), ON(t, fallback)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(index_codec_round_trip_and_refusals),
		cmocka_unit_test(record_header_codec),
		ALL_MODES(write_load_read),
		ALL_MODES(direct_io_where_the_file_system_takes_it),
		ON(direct_io_where_the_file_system_takes_it, buffered),
		ON(write_load_read, buffered),
		ON(batch_reads_check_each_record, buffered),
		ALL_MODES(bad_writes_leave_nothing),
		ALL_MODES(damaged_records_are_refused),
		ALL_MODES(scan_keeps_complete_buckets_only),
		ON(scan_of_an_empty_directory, on_disk),
		ALL_MODES(batch_reads_check_each_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
