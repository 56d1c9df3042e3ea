/*
 * store/bucket.c - the SSD tier's bucket files; see bucket.h for the
 * format and the commit protocol.
 *
 * Layouts (little-endian):
 *
 *   record header, 64 bytes          .meta header, 32 bytes
 *    0 u32 magic "MCBR"               0 u32 magic "MCBM"
 *    4 u16 version (1)                4 u16 version (1)
 *    6 u16 flags (0)                  6 u16 flags (0)
 *    8 u32 key_len                    8 u32 n entries
 *   12 u32 reserved (0)              12 u32 reserved (0)
 *   16 u64 data_len                  16 u64 bucket_bytes
 *   24 u64 XXH3 of the key           24 u64 reserved (0)
 *   32 u64 XXH3 of the value        then n entries:
 *   40 u64 reserved (0) x2            u64 offset, u64 data_len,
 *   56 u64 XXH3 of bytes 0..55        u64 data_sum, u32 key_len, key
 *                                    then u64 XXH3 of all bytes before it
 *
 * Reserved fields must be zero, so a later version can give them meaning
 * without an old reader misreading them.
 */
#define MC_LOG_MODULE "bucket"
#include "store/bucket.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/endian.h"
#include "base/log.h"
#include "store/disk_io.h"

#define REC_MAGIC	 0x5242434du /* "MCBR" */
#define META_MAGIC	 0x4d42434du /* "MCBM" */
#define VERSION		 1u
#define META_HDR_SIZE	 32u
#define META_ENTRY_FIXED 28u /* before the key */
#define META_TRAILER	 8u

/* ---- record headers ---------------------------------------------------------------------- */

void mc_bucket_rec_hdr_encode(const struct mc_bucket_rec_hdr *h,
			      uint8_t out[MC_BUCKET_REC_HDR_SIZE])
{
	memset(out, 0, MC_BUCKET_REC_HDR_SIZE);
	mc_put_le32(out, REC_MAGIC);
	mc_put_le16(out + 4, VERSION);
	mc_put_le32(out + 8, h->key_len);
	mc_put_le64(out + 16, h->data_len);
	mc_put_le64(out + 24, h->key_sum);
	mc_put_le64(out + 32, h->data_sum);
	mc_put_le64(out + 56, XXH3_64bits(out, 56));
}

static mc_status refuse(mc_status st, const char *what, const char *why)
{
	return mc_set_error(st, "bucket %s: %s", what, why);
}

mc_status mc_bucket_rec_hdr_decode(const void *p, size_t n, struct mc_bucket_rec_hdr *h)
{
	const uint8_t *b = p;
	uint32_t key_len;
	uint64_t data_len;

	if (n < MC_BUCKET_REC_HDR_SIZE)
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "header cut short");
	if (mc_get_le32(b) != REC_MAGIC)
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "bad magic");
	if (mc_get_le64(b + 56) != XXH3_64bits(b, 56))
		return refuse(MC_ERR_CHECKSUM_MISMATCH, "record", "header checksum mismatch");
	if (mc_get_le16(b + 4) != VERSION)
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "unknown version");
	if (mc_get_le16(b + 6) || mc_get_le32(b + 12) || mc_get_le64(b + 40) || mc_get_le64(b + 48))
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "reserved field set");
	key_len = mc_get_le32(b + 8);
	data_len = mc_get_le64(b + 16);
	if (key_len == 0 || key_len > MC_BUCKET_KEY_MAX)
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "key length out of range");
	if (mc_bucket_rec_span(key_len, data_len) == 0)
		return refuse(MC_ERR_FILE_READ_FAIL, "record", "value length out of range");
	h->key_len = key_len;
	h->data_len = data_len;
	h->key_sum = mc_get_le64(b + 24);
	h->data_sum = mc_get_le64(b + 32);
	return MC_OK;
}

/* ---- the index (.meta) ------------------------------------------------------------------- */

mc_status mc_bucket_meta_encode(const struct mc_bucket_meta *m, struct mc_buf *out)
{
	size_t start = out->len;
	uint8_t hdr[META_HDR_SIZE] = {0}, fixed[META_ENTRY_FIXED], sum[8];

	mc_put_le32(hdr, META_MAGIC);
	mc_put_le16(hdr + 4, VERSION);
	mc_put_le32(hdr + 8, m->n);
	mc_put_le64(hdr + 16, m->bucket_bytes);
	mc_buf_append(out, hdr, sizeof(hdr));
	for (uint32_t i = 0; i < m->n; i++) {
		const struct mc_bucket_entry *e = &m->entries[i];
		mc_put_le64(fixed, e->offset);
		mc_put_le64(fixed + 8, e->data_len);
		mc_put_le64(fixed + 16, e->data_sum);
		mc_put_le32(fixed + 24, e->key_len);
		mc_buf_append(out, fixed, sizeof(fixed));
		mc_buf_append(out, e->key, e->key_len);
	}
	if (out->err != MC_OK)
		return out->err;
	mc_put_le64(sum, XXH3_64bits(out->data + start, out->len - start));
	mc_buf_append(out, sum, sizeof(sum));
	return out->err;
}

void mc_bucket_meta_release(struct mc_bucket_meta *m)
{
	if (!m)
		return;
	for (uint32_t i = 0; m->entries && i < m->n; i++)
		mc_free(m->entries[i].key);
	mc_free(m->entries);
	memset(m, 0, sizeof(*m));
}

mc_status mc_bucket_meta_decode(const void *p, size_t n, struct mc_bucket_meta *out)
{
	const uint8_t *b = p, *q, *end;
	struct mc_bucket_meta m = {0};
	uint64_t next = 0;
	mc_status st;

	memset(out, 0, sizeof(*out));
	if (n < META_HDR_SIZE + META_TRAILER)
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "file cut short");
	if (mc_get_le32(b) != META_MAGIC)
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "bad magic");
	if (mc_get_le64(b + n - META_TRAILER) != XXH3_64bits(b, n - META_TRAILER))
		return refuse(MC_ERR_CHECKSUM_MISMATCH, "index", "checksum mismatch");
	if (mc_get_le16(b + 4) != VERSION)
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "unknown version");
	if (mc_get_le16(b + 6) || mc_get_le32(b + 12) || mc_get_le64(b + 24))
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "reserved field set");
	m.n = mc_get_le32(b + 8);
	m.bucket_bytes = mc_get_le64(b + 16);
	if (m.n == 0 || m.n > MC_BUCKET_ENTRIES_MAX)
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "entry count out of range");
	/* each entry takes at least its fixed part and one key byte */
	if (m.n > (n - META_HDR_SIZE - META_TRAILER) / (META_ENTRY_FIXED + 1))
		return refuse(MC_ERR_FILE_READ_FAIL, "index", "more entries than bytes");
	m.entries = mc_calloc(m.n, sizeof(*m.entries));
	if (!m.entries)
		return mc_set_error(MC_ERR_NOMEM, "bucket index: no memory for %" PRIu32 " entries",
				    m.n);
	q = b + META_HDR_SIZE;
	end = b + n - META_TRAILER;
	for (uint32_t i = 0; i < m.n; i++) {
		struct mc_bucket_entry *e = &m.entries[i];
		uint64_t span;
		if ((size_t)(end - q) < META_ENTRY_FIXED) {
			st = refuse(MC_ERR_FILE_READ_FAIL, "index", "entry cut short");
			goto fail;
		}
		e->offset = mc_get_le64(q);
		e->data_len = mc_get_le64(q + 8);
		e->data_sum = mc_get_le64(q + 16);
		e->key_len = mc_get_le32(q + 24);
		q += META_ENTRY_FIXED;
		if (e->key_len == 0 || e->key_len > MC_BUCKET_KEY_MAX ||
		    (size_t)(end - q) < e->key_len) {
			st = refuse(MC_ERR_FILE_READ_FAIL, "index", "key length out of range");
			goto fail;
		}
		if (memchr(q, 0, e->key_len)) {
			st = refuse(MC_ERR_FILE_READ_FAIL, "index", "key holds a NUL byte");
			goto fail;
		}
		span = mc_bucket_rec_span(e->key_len, e->data_len);
		if (span == 0) {
			st = refuse(MC_ERR_FILE_READ_FAIL, "index", "value length out of range");
			goto fail;
		}
		if (e->offset != next || span > m.bucket_bytes - next || next > m.bucket_bytes) {
			st = refuse(MC_ERR_FILE_READ_FAIL, "index",
				    "records not end to end inside the bucket");
			goto fail;
		}
		next += span;
		e->key = mc_malloc(e->key_len + 1u);
		if (!e->key) {
			st = mc_set_error(MC_ERR_NOMEM, "bucket index: no memory for a key");
			goto fail;
		}
		memcpy(e->key, q, e->key_len);
		e->key[e->key_len] = '\0';
		q += e->key_len;
	}
	if (q != end || next != m.bucket_bytes) {
		st = refuse(MC_ERR_FILE_READ_FAIL, "index", "size does not match its entries");
		goto fail;
	}
	*out = m;
	return MC_OK;
fail:
	mc_bucket_meta_release(&m);
	return st;
}

/* ---- names ------------------------------------------------------------------------------- */

void mc_bucket_id(char out[MC_BUCKET_ID_MAX], uint64_t ms, uint32_t seq)
{
	snprintf(out, MC_BUCKET_ID_MAX, "%020" PRIu64 "-%010" PRIu32, ms, seq);
}

/* An id names no other directory and no hidden file. */
static bool id_ok(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n >= MC_BUCKET_ID_MAX || id[0] == '.')
		return false;
	return strchr(id, '/') == NULL;
}

static void file_name(char *out, size_t cap, const char *id, const char *suffix)
{
	snprintf(out, cap, "%s%s", id, suffix);
}

/* ---- writing ----------------------------------------------------------------------------- */

static mc_status write_fail(const char *what, const char *id, int err)
{
	return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "bucket %s: %s: %s", id, what, strerror(err));
}

/* mc_last_error() without its trailing " (STATUS)", to quote inside another. */
static void last_reason(char *out, size_t cap)
{
	char *p;
	snprintf(out, cap, "%s", mc_last_error());
	p = strrchr(out, '(');
	if (p && p > out && p[-1] == ' ')
		p[-1] = '\0';
}

/* One whole read or write through io (NULL: pread/pwrite). */
static mc_status io_one(struct mc_disk_io *io, int fd, bool write, void *buf, size_t len,
			uint64_t off)
{
	struct mc_disk_op op = {.fd = fd, .write = write, .buf = buf, .len = len, .off = off};
	return mc_disk_io_run(io, &op, 1);
}

static bool block_aligned(const void *p)
{
	return (uintptr_t)p % MC_BUCKET_ALIGN == 0;
}

/*
 * The records of objs into fd, filling m's entries: one batch of
 * operations (each record's header block, the value's whole blocks, its
 * last partial block padded with zeros), in flight together.  On an
 * O_DIRECT descriptor (direct) every operation is 4 KiB-aligned: headers
 * and last blocks are built in aligned scratch memory, and a value whose
 * memory is not aligned is copied there too; an aligned value (the disk
 * store's pending group) is written from where it lies.
 */
static mc_status write_records(struct mc_disk_io *io, int fd, bool direct, const char *id,
			       const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *m)
{
	struct mc_disk_op *ops = mc_calloc(3 * n, sizeof(*ops));
	uint64_t heads_len = 0, tails_len = 0, bounce_len = 0, off = 0;
	uint64_t h_off = 0, t_off = 0, b_off = 0;
	uint8_t *scratch, *heads, *tails, *bounce;
	size_t nops = 0;
	mc_status st;

	for (size_t i = 0; i < n; i++) {
		uint64_t body = objs[i].len & ~(uint64_t)(MC_BUCKET_ALIGN - 1);
		heads_len += mc_bucket_rec_data_off((uint32_t)objs[i].key_len);
		if (objs[i].len != body)
			tails_len += MC_BUCKET_ALIGN;
		if (direct && body && !block_aligned(objs[i].data))
			bounce_len += body;
	}
	scratch = mc_aligned_alloc(MC_BUCKET_ALIGN, heads_len + tails_len + bounce_len);
	if (!ops || !scratch) {
		mc_free(ops);
		mc_free(scratch);
		return mc_set_error(MC_ERR_NOMEM, "bucket %s: no memory for record headers", id);
	}
	heads = scratch;
	tails = heads + heads_len;
	bounce = tails + tails_len;
	for (size_t i = 0; i < n; i++) {
		const struct mc_bucket_obj *o = &objs[i];
		struct mc_bucket_entry *e = &m->entries[i];
		struct mc_bucket_rec_hdr h = {
			.key_len = (uint32_t)o->key_len,
			.data_len = o->len,
			.key_sum = XXH3_64bits(o->key, o->key_len),
			.data_sum = XXH3_64bits(o->data, o->len),
		};
		uint64_t head_len = mc_bucket_rec_data_off(h.key_len);
		uint64_t span = mc_bucket_rec_span(h.key_len, h.data_len);
		uint64_t body = o->len & ~(uint64_t)(MC_BUCKET_ALIGN - 1);
		uint8_t *head = heads + h_off;

		mc_bucket_rec_hdr_encode(&h, head);
		memcpy(head + MC_BUCKET_REC_HDR_SIZE, o->key, o->key_len);
		memset(head + MC_BUCKET_REC_HDR_SIZE + o->key_len, 0,
		       head_len - MC_BUCKET_REC_HDR_SIZE - o->key_len);
		ops[nops++] = (struct mc_disk_op){.fd = fd,
						  .write = true,
						  .buf = head,
						  .len = head_len,
						  .off = off,
						  .direct = direct};
		if (body) {
			void *src = (void *)(uintptr_t)o->data;
			if (direct && !block_aligned(src)) {
				memcpy(bounce + b_off, src, body);
				src = bounce + b_off;
				b_off += body;
			}
			ops[nops++] = (struct mc_disk_op){.fd = fd,
							  .write = true,
							  .buf = src,
							  .len = body,
							  .off = off + head_len,
							  .direct = direct};
		}
		if (o->len > body) {
			uint8_t *tail = tails + t_off;
			memcpy(tail, (const uint8_t *)o->data + body, o->len - body);
			memset(tail + (o->len - body), 0, MC_BUCKET_ALIGN - (o->len - body));
			ops[nops++] = (struct mc_disk_op){.fd = fd,
							  .write = true,
							  .buf = tail,
							  .len = MC_BUCKET_ALIGN,
							  .off = off + head_len + body,
							  .direct = direct};
			t_off += MC_BUCKET_ALIGN;
		}
		e->key = mc_malloc(o->key_len + 1);
		if (!e->key) {
			mc_free(ops);
			mc_free(scratch);
			return mc_set_error(MC_ERR_NOMEM, "bucket %s: no memory for a key", id);
		}
		memcpy(e->key, o->key, o->key_len);
		e->key[o->key_len] = '\0';
		e->key_len = h.key_len;
		e->offset = off;
		e->data_len = h.data_len;
		e->data_sum = h.data_sum;
		off += span;
		h_off += head_len;
	}
	m->bucket_bytes = off;
	/* the file's whole size first: the records' writes then land inside it,
	 * which lets O_DIRECT writes run in parallel (an extending write holds
	 * the inode exclusively), and a full disk fails here, before any write */
	if (off && fallocate(fd, 0, 0, (off_t)off) != 0 && errno != EOPNOTSUPP && errno != ENOSYS) {
		st = write_fail("reserving the data file's space", id, errno);
		mc_free(ops);
		mc_free(scratch);
		return st;
	}
	st = mc_disk_io_run(io, ops, nops);
	if (st != MC_OK) {
		char why[256];
		last_reason(why, sizeof(why));
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "bucket %s: writing its records: %s", id,
				  why);
	}
	mc_free(ops);
	mc_free(scratch);
	return st;
}

/*
 * Opens name in dirfd with flags, and O_DIRECT when direct: a file system
 * that refuses O_DIRECT for this file after all (EINVAL) gets it opened
 * without, and *direct says which.  O_CREAT|O_EXCL opens may have created
 * the file before O_DIRECT was refused: it is removed before the retry.
 */
static int open_maybe_direct(int dirfd, const char *name, int flags, bool *direct)
{
	int fd;
	if (*direct) {
		fd = openat(dirfd, name, flags | O_DIRECT | O_CLOEXEC, 0644);
		if (fd >= 0 || errno != EINVAL)
			return fd;
		if (flags & O_EXCL)
			unlinkat(dirfd, name, 0);
		mc_warn("%s: O_DIRECT refused; buffered I/O for it", name);
		*direct = false;
	}
	return openat(dirfd, name, flags | O_CLOEXEC, 0644);
}

static mc_status check_objs(const char *id, const struct mc_bucket_obj *objs, size_t n)
{
	if (!id_ok(id))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket: bad id");
	if (!objs || n == 0 || n > MC_BUCKET_ENTRIES_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket %s: %zu objects", id, n);
	for (size_t i = 0; i < n; i++) {
		const struct mc_bucket_obj *o = &objs[i];
		if (!o->key || o->key_len == 0 || o->key_len > MC_BUCKET_KEY_MAX ||
		    memchr(o->key, 0, o->key_len))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket %s: bad key", id);
		if ((o->len && !o->data) || mc_bucket_rec_span((uint32_t)o->key_len, o->len) == 0)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket %s: bad value", id);
	}
	return MC_OK;
}

/* The index to <id>.meta.tmp, fsynced, renamed to <id>.meta. */
static mc_status write_index(struct mc_disk_io *io, int dirfd, const char *id,
			     const struct mc_bucket_meta *m)
{
	char tmp[MC_BUCKET_ID_MAX + 16], name[MC_BUCKET_ID_MAX + 16];
	struct mc_buf b;
	mc_status st;
	int fd;

	file_name(tmp, sizeof(tmp), id, ".meta.tmp");
	file_name(name, sizeof(name), id, ".meta");
	mc_buf_init(&b);
	st = mc_bucket_meta_encode(m, &b);
	if (st != MC_OK) {
		mc_buf_release(&b);
		return st;
	}
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		st = write_fail("creating the index", id, errno);
	} else {
		if (io_one(io, fd, true, b.data, b.len, 0) != MC_OK) {
			char why[256];
			last_reason(why, sizeof(why));
			st = mc_set_error(MC_ERR_FILE_WRITE_FAIL,
					  "bucket %s: writing the index: %s", id, why);
		} else if (fsync(fd) != 0) {
			st = write_fail("syncing the index", id, errno);
		}
		close(fd);
		if (st == MC_OK && renameat(dirfd, tmp, dirfd, name) != 0)
			st = write_fail("renaming the index", id, errno);
		if (st != MC_OK)
			unlinkat(dirfd, tmp, 0);
	}
	mc_buf_release(&b);
	return st;
}

mc_status mc_bucket_write_data(struct mc_disk_io *io, int dirfd, const char *name, const char *id,
			       const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *m)
{
	bool direct = mc_disk_io_direct(io);
	mc_status st;
	int fd;

	memset(m, 0, sizeof(*m));
	st = check_objs(id, objs, n);
	if (st != MC_OK)
		return st;
	m->n = (uint32_t)n;
	m->entries = mc_calloc(n, sizeof(*m->entries));
	if (!m->entries)
		return mc_set_error(MC_ERR_NOMEM, "bucket %s: no memory for %zu entries", id, n);
	fd = open_maybe_direct(dirfd, name, O_WRONLY | O_CREAT | O_EXCL, &direct);
	if (fd < 0) {
		st = errno == EEXIST
			     ? mc_set_error(MC_ERR_INVALID_PARAMS, "bucket %s: exists already", id)
			     : write_fail("creating the data file", id, errno);
		mc_bucket_meta_release(m);
		return st;
	}
	st = write_records(io, fd, direct, id, objs, n, m);
	if (st == MC_OK && fsync(fd) != 0)
		st = write_fail("syncing the data file", id, errno);
	close(fd);
	if (st != MC_OK) {
		unlinkat(dirfd, name, 0);
		mc_bucket_meta_release(m);
	}
	return st;
}

mc_status mc_bucket_write(struct mc_disk_io *io, int dirfd, const char *id,
			  const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *out)
{
	char data_name[MC_BUCKET_ID_MAX + 16];
	struct mc_bucket_meta m = {0};
	mc_status st;

	if (out)
		memset(out, 0, sizeof(*out));
	if (!id_ok(id))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket: bad id");
	file_name(data_name, sizeof(data_name), id, ".bucket");
	st = mc_bucket_write_data(io, dirfd, data_name, id, objs, n, &m);
	if (st != MC_OK)
		return st;
	st = write_index(io, dirfd, id, &m);
	if (st == MC_OK && fsync(dirfd) != 0)
		st = write_fail("syncing the directory", id, errno);
	if (st != MC_OK) {
		char meta_name[MC_BUCKET_ID_MAX + 16];
		file_name(meta_name, sizeof(meta_name), id, ".meta");
		unlinkat(dirfd, meta_name, 0);
		unlinkat(dirfd, data_name, 0);
		mc_bucket_meta_release(&m);
		return st;
	}
	if (out)
		*out = m;
	else
		mc_bucket_meta_release(&m);
	return MC_OK;
}

/* ---- reading ----------------------------------------------------------------------------- */

static mc_status read_fail(const char *what, const char *id, int err)
{
	return mc_set_error(MC_ERR_FILE_READ_FAIL, "bucket %s: %s: %s", id, what, strerror(err));
}

/* A whole .meta file, at most what its largest valid form could take. */
static mc_status read_index_file(int dirfd, const char *id, struct mc_buf *b)
{
	char name[MC_BUCKET_ID_MAX + 16];
	const uint64_t limit =
		META_HDR_SIZE + META_TRAILER +
		(uint64_t)MC_BUCKET_ENTRIES_MAX * (META_ENTRY_FIXED + MC_BUCKET_KEY_MAX);
	struct stat sb;
	mc_status st = MC_OK;
	int fd;

	file_name(name, sizeof(name), id, ".meta");
	fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT
			       ? mc_set_error(MC_ERR_FILE_NOT_FOUND, "bucket %s: no index", id)
			       : read_fail("opening the index", id, errno);
	if (fstat(fd, &sb) != 0)
		st = read_fail("stat of the index", id, errno);
	else if ((uint64_t)sb.st_size > limit)
		st = refuse(MC_ERR_FILE_READ_FAIL, "index", "larger than any index");
	else if ((st = mc_buf_reserve(b, (size_t)sb.st_size)) == MC_OK) {
		st = io_one(NULL, fd, false, b->data, (size_t)sb.st_size, 0);
		if (st == MC_OK)
			b->len = (size_t)sb.st_size;
	}
	close(fd);
	return st;
}

mc_status mc_bucket_load(int dirfd, const char *id, struct mc_bucket_meta *out)
{
	char name[MC_BUCKET_ID_MAX + 16];
	struct stat sb;
	struct mc_buf b;
	mc_status st;

	memset(out, 0, sizeof(*out));
	if (!id_ok(id))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket: bad id");
	mc_buf_init(&b);
	st = read_index_file(dirfd, id, &b);
	if (st == MC_OK)
		st = mc_bucket_meta_decode(b.data, b.len, out);
	mc_buf_release(&b);
	if (st != MC_OK)
		return st;
	file_name(name, sizeof(name), id, ".bucket");
	if (fstatat(dirfd, name, &sb, 0) != 0)
		st = errno == ENOENT ? mc_set_error(MC_ERR_FILE_NOT_FOUND,
						    "bucket %s: index without data", id)
				     : read_fail("stat of the data file", id, errno);
	else if ((uint64_t)sb.st_size < out->bucket_bytes)
		st = mc_set_error(MC_ERR_FILE_READ_FAIL,
				  "bucket %s: data file holds %lld of its %" PRIu64 " bytes", id,
				  (long long)sb.st_size, out->bucket_bytes);
	if (st != MC_OK)
		mc_bucket_meta_release(out);
	return st;
}

int mc_bucket_open_file(struct mc_disk_io *io, int dirfd, const char *name, const char *id,
			mc_status *rc)
{
	bool direct = mc_disk_io_direct(io);
	int fd = open_maybe_direct(dirfd, name, O_RDONLY, &direct);

	if (fd < 0)
		*rc = errno == ENOENT
			      ? mc_set_error(MC_ERR_FILE_NOT_FOUND, "bucket %s: no data", id)
			      : mc_set_error(MC_ERR_FILE_OPEN_FAIL, "bucket %s: open: %s", id,
					     strerror(errno));
	else
		*rc = MC_OK;
	return fd;
}

int mc_bucket_open(struct mc_disk_io *io, int dirfd, const char *id, mc_status *rc)
{
	char name[MC_BUCKET_ID_MAX + 16];

	if (!id_ok(id)) {
		*rc = mc_set_error(MC_ERR_INVALID_PARAMS, "bucket: bad id");
		return -1;
	}
	file_name(name, sizeof(name), id, ".bucket");
	return mc_bucket_open_file(io, dirfd, name, id, rc);
}

/* Whether the header read at head is e's record and dst holds its value. */
static mc_status check_record(const struct mc_bucket_entry *e, const uint8_t *head,
			      uint64_t head_len, const void *dst)
{
	struct mc_bucket_rec_hdr h = {0};
	mc_status st = mc_bucket_rec_hdr_decode(head, head_len, &h);

	if (st != MC_OK)
		return st;
	if (h.key_len != e->key_len || h.data_len != e->data_len || h.data_sum != e->data_sum ||
	    memcmp(head + MC_BUCKET_REC_HDR_SIZE, e->key, e->key_len) != 0 ||
	    h.key_sum != XXH3_64bits(e->key, e->key_len))
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH,
				    "bucket read of %s: the record is not the index's", e->key);
	if (XXH3_64bits(dst, e->data_len) != h.data_sum)
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "bucket read of %s: value checksum",
				    e->key);
	return MC_OK;
}

static bool fd_direct(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl >= 0 && (fl & O_DIRECT);
}

/* How one read of a batch lands: its operations, and where the parts of
 * its value that could not be read into dst directly are. */
struct read_plan {
	size_t op0, nops;
	uint8_t *head;
	uint8_t *bounce; /* the value's whole blocks, when dst is not aligned */
	uint8_t *tail;	 /* the value's last partial block */
	uint64_t body;	 /* bytes of the value in whole blocks (direct only) */
};

/*
 * On a buffered descriptor a value is read straight into dst.  On an
 * O_DIRECT one every operation is 4 KiB-aligned: a value whose dst is
 * aligned with room for the padded length (the offload server's staging
 * buffer) is read there in one operation; otherwise its whole blocks go
 * to dst (aligned) or to aligned scratch memory, its last partial block
 * to scratch, and they are copied into dst before the checks.
 */
mc_status mc_bucket_read_batch(struct mc_disk_io *io, struct mc_bucket_read_req *r, size_t n)
{
	uint64_t heads_len = 0, tails_len = 0, bounce_len = 0;
	uint64_t h_off = 0, t_off = 0, b_off = 0;
	struct read_plan *plan;
	struct mc_disk_op *ops;
	mc_status first = MC_OK;
	size_t nops = 0;
	uint8_t *scratch;
	bool *direct;
	char why[256] = "";

	for (size_t i = 0; i < n; i++)
		r[i].status = MC_OK;
	plan = mc_calloc(n + 1, sizeof(*plan));
	direct = mc_calloc(n + 1, sizeof(*direct));
	ops = mc_calloc(3 * n + 1, sizeof(*ops));
	if (!plan || !direct || !ops)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		const struct mc_bucket_entry *e = r[i].e;
		uint64_t padded =
			(e->data_len + MC_BUCKET_ALIGN - 1) & ~(uint64_t)(MC_BUCKET_ALIGN - 1);
		/* one F_GETFL per run of reads of one descriptor */
		direct[i] = i && r[i].fd == r[i - 1].fd ? direct[i - 1] : fd_direct(r[i].fd);
		if (r[i].cap < e->data_len) {
			r[i].status =
				mc_set_error(MC_ERR_BUFFER_OVERFLOW,
					     "bucket read of %s: %" PRIu64 " bytes into %" PRIu64,
					     e->key, e->data_len, r[i].cap);
			continue;
		}
		heads_len += mc_bucket_rec_data_off(e->key_len);
		if (!direct[i] || (block_aligned(r[i].dst) && r[i].cap >= padded))
			continue;
		plan[i].body = e->data_len & ~(uint64_t)(MC_BUCKET_ALIGN - 1);
		if (plan[i].body && !block_aligned(r[i].dst))
			bounce_len += plan[i].body;
		if (e->data_len > plan[i].body)
			tails_len += MC_BUCKET_ALIGN;
	}
	scratch = mc_aligned_alloc(MC_BUCKET_ALIGN, heads_len + tails_len + bounce_len);
	if (!scratch)
		goto nomem;
	/* every header and value in one batch; a value is trusted only after both check out */
	for (size_t i = 0; i < n; i++) {
		const struct mc_bucket_entry *e = r[i].e;
		struct read_plan *pl = &plan[i];
		uint64_t head_len = mc_bucket_rec_data_off(e->key_len);
		uint64_t voff = e->offset + head_len;
		struct mc_disk_op op = {.fd = r[i].fd, .write = false, .direct = direct[i]};

		if (r[i].status != MC_OK)
			continue;
		pl->op0 = nops;
		pl->head = scratch + h_off;
		h_off += head_len;
		op.buf = pl->head;
		op.len = head_len;
		op.off = e->offset;
		ops[nops++] = op;
		if (!direct[i]) {
			if (e->data_len) {
				op.buf = r[i].dst;
				op.len = e->data_len;
				op.off = voff;
				ops[nops++] = op;
			}
		} else if (e->data_len) {
			uint64_t padded = (e->data_len + MC_BUCKET_ALIGN - 1) &
					  ~(uint64_t)(MC_BUCKET_ALIGN - 1);
			if (block_aligned(r[i].dst) && r[i].cap >= padded) {
				op.buf = r[i].dst;
				op.len = padded;
				op.off = voff;
				ops[nops++] = op;
			} else {
				if (pl->body) {
					if (block_aligned(r[i].dst)) {
						op.buf = r[i].dst;
					} else {
						pl->bounce =
							scratch + heads_len + tails_len + b_off;
						b_off += pl->body;
						op.buf = pl->bounce;
					}
					op.len = pl->body;
					op.off = voff;
					ops[nops++] = op;
				}
				if (e->data_len > pl->body) {
					pl->tail = scratch + heads_len + t_off;
					t_off += MC_BUCKET_ALIGN;
					op.buf = pl->tail;
					op.len = MC_BUCKET_ALIGN;
					op.off = voff + pl->body;
					ops[nops++] = op;
				}
			}
		}
		pl->nops = nops - pl->op0;
	}
	if (nops && mc_disk_io_run(io, ops, nops) != MC_OK)
		last_reason(why, sizeof(why));
	for (size_t i = 0; i < n; i++) {
		const struct mc_bucket_entry *e = r[i].e;
		const struct read_plan *pl = &plan[i];
		uint64_t head_len = mc_bucket_rec_data_off(e->key_len);
		mc_status io_st = MC_OK;
		if (r[i].status != MC_OK)
			goto next;
		for (size_t k = pl->op0; k < pl->op0 + pl->nops && io_st == MC_OK; k++)
			io_st = ops[k].status;
		if (io_st != MC_OK) {
			r[i].status = mc_set_error(MC_ERR_FILE_READ_FAIL, "bucket read of %s: %s",
						   e->key, why[0] ? why : mc_strerror(io_st));
			goto next;
		}
		if (pl->bounce)
			memcpy(r[i].dst, pl->bounce, pl->body);
		if (pl->tail)
			memcpy((uint8_t *)r[i].dst + pl->body, pl->tail, e->data_len - pl->body);
		r[i].status = check_record(e, pl->head, head_len, r[i].dst);
	next:
		if (r[i].status != MC_OK && first == MC_OK)
			first = r[i].status;
	}
	mc_free(scratch);
	mc_free(plan);
	mc_free(direct);
	mc_free(ops);
	return first;
nomem:
	mc_free(plan);
	mc_free(direct);
	mc_free(ops);
	for (size_t i = 0; i < n; i++)
		if (r[i].status == MC_OK)
			r[i].status = MC_ERR_NOMEM;
	return mc_set_error(MC_ERR_NOMEM, "bucket read: no memory for %zu records", n);
}

mc_status mc_bucket_read(struct mc_disk_io *io, int fd, const struct mc_bucket_entry *e, void *dst,
			 uint64_t cap)
{
	struct mc_bucket_read_req r = {fd, e, dst, cap, MC_OK};
	return mc_bucket_read_batch(io, &r, 1);
}

/* ---- removal and the start-up scan ------------------------------------------------------- */

mc_status mc_bucket_remove(int dirfd, const char *id)
{
	char name[MC_BUCKET_ID_MAX + 16];
	mc_status st = MC_OK;

	if (!id_ok(id))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "bucket: bad id");
	file_name(name, sizeof(name), id, ".meta");
	if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
		st = write_fail("removing the index", id, errno);
	file_name(name, sizeof(name), id, ".bucket");
	if (st == MC_OK && unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
		st = write_fail("removing the data file", id, errno);
	return st;
}

static bool has_suffix(const char *name, const char *suffix, char *id_out)
{
	size_t n = strlen(name), s = strlen(suffix);
	if (n <= s || n - s >= MC_BUCKET_ID_MAX || strcmp(name + n - s, suffix) != 0)
		return false;
	memcpy(id_out, name, n - s);
	id_out[n - s] = '\0';
	return id_ok(id_out);
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

struct id_list {
	char **v;
	size_t n, cap;
};

static mc_status id_list_add(struct id_list *l, const char *id)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		char **v = mc_realloc(l->v, cap * sizeof(*v));
		if (!v)
			return MC_ERR_NOMEM;
		l->v = v;
		l->cap = cap;
	}
	if (!(l->v[l->n] = mc_strdup(id)))
		return MC_ERR_NOMEM;
	l->n++;
	return MC_OK;
}

static void id_list_release(struct id_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		mc_free(l->v[i]);
	mc_free(l->v);
}

/* Lists the ids of .bucket and of .meta files, deleting .meta.tmp files
 * as it goes. */
static mc_status list_buckets(int dirfd, struct id_list *ids, struct id_list *metas,
			      struct mc_bucket_scan_stats *st)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	mc_status rc = MC_OK;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "bucket scan: %s", strerror(errno));
	}
	rewinddir(d);
	while (rc == MC_OK && (de = readdir(d)) != NULL) {
		char id[MC_BUCKET_ID_MAX];
		if (has_suffix(de->d_name, ".meta.tmp", id)) {
			mc_warn("bucket %s: deleting the index of an interrupted write", id);
			unlinkat(dirfd, de->d_name, 0);
			st->stale_tmp++;
		} else if (has_suffix(de->d_name, ".bucket", id)) {
			if (id_list_add(ids, id) != MC_OK)
				rc = mc_set_error(MC_ERR_NOMEM, "bucket scan: no memory");
		} else if (has_suffix(de->d_name, ".meta", id)) {
			if (id_list_add(metas, id) != MC_OK)
				rc = mc_set_error(MC_ERR_NOMEM, "bucket scan: no memory");
		}
	}
	closedir(d);
	return rc;
}

mc_status mc_bucket_scan(int dirfd,
			 mc_status (*cb)(void *arg, const char *id, const struct mc_bucket_meta *m),
			 void *arg, struct mc_bucket_scan_stats *st)
{
	struct mc_bucket_scan_stats local = {0};
	struct id_list ids = {0}, metas = {0};
	mc_status rc;

	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	rc = list_buckets(dirfd, &ids, &metas, st);
	if (rc == MC_OK && ids.n) /* no list at all when empty: qsort wants one */
		qsort(ids.v, ids.n, sizeof(*ids.v), cmp_id);
	/* an index whose data file is gone (deleted by hand) serves nothing */
	for (size_t i = 0; rc == MC_OK && i < metas.n; i++) {
		if (ids.n && bsearch(&metas.v[i], ids.v, ids.n, sizeof(*ids.v), cmp_id))
			continue;
		mc_warn("bucket %s: index without its data file; deleting it", metas.v[i]);
		mc_bucket_remove(dirfd, metas.v[i]);
		st->dropped++;
	}
	for (size_t i = 0; rc == MC_OK && i < ids.n; i++) {
		struct mc_bucket_meta m;
		mc_status lr = mc_bucket_load(dirfd, ids.v[i], &m);
		if (lr == MC_ERR_FILE_NOT_FOUND) {
			mc_warn("bucket %s: no index (an interrupted write); deleting it",
				ids.v[i]);
			mc_bucket_remove(dirfd, ids.v[i]);
			st->orphans++;
			continue;
		}
		if (lr == MC_ERR_NOMEM) {
			rc = lr;
			break;
		}
		if (lr != MC_OK) {
			mc_warn("%s; deleting bucket %s", mc_last_error(), ids.v[i]);
			mc_bucket_remove(dirfd, ids.v[i]);
			st->dropped++;
			continue;
		}
		st->buckets++;
		st->objects += m.n;
		rc = cb ? cb(arg, ids.v[i], &m) : MC_OK;
		mc_bucket_meta_release(&m);
	}
	id_list_release(&ids);
	id_list_release(&metas);
	return rc;
}
