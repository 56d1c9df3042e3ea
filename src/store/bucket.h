/*
 * store/bucket.h - the SSD tier's bucket files: their on-disk format and
 * the file operations that write, find and read them back.
 *
 * A bucket is a group of objects written together by one client into its
 * offload directory as two files:
 *
 *   <id>.bucket  the records, each at a 4 KiB-aligned offset:
 *                a 64-byte record header, the key, zero padding to 4 KiB,
 *                the value, zero padding to 4 KiB (so every value starts
 *                and ends on a block boundary, as O_DIRECT reads want);
 *   <id>.meta    the index: a header, one entry per record (offset, value
 *                length, value checksum, key) and a checksum of the file.
 *
 * The .meta file is the commit point.  mc_bucket_write writes and fsyncs
 * the .bucket file first, then the index to <id>.meta.tmp, fsyncs it,
 * renames it into place and fsyncs the directory.  A bucket without its
 * .meta (a client killed while writing) is therefore incomplete, and
 * mc_bucket_scan deletes it; nothing incomplete is ever served.  Every
 * record header carries a checksum of itself and of its key, and every
 * value one of its bytes (XXH3-64), checked on every read, so a torn or
 * rotted record is refused (MC_ERR_CHECKSUM_MISMATCH), never returned.
 *
 * Ids are "<ms>-<seq>" (a millisecond timestamp and a sequence number,
 * both zero-padded), so the names sort in the order buckets were made:
 * the fifo eviction order.  All integers on disk are little-endian.
 *
 * The decoders are pure functions over bytes read from disk and validate
 * everything (tests/fuzz/fuzz_bucket.c); the file functions move their
 * bytes through a store/disk_io.h handle (io_uring, or pread/pwrite where
 * it is refused), or with pread/pwrite when given none.  A handle made
 * with params.direct has the .bucket files opened O_DIRECT: every
 * operation on them is then 4 KiB-aligned (headers and the last partial
 * block of each value go through aligned scratch memory, as does a value
 * whose memory is not aligned); the small .meta files stay buffered.
 * Not thread-safe on one directory: one writer owns it (docs/design-tiers.md).
 */
#ifndef MC_STORE_BUCKET_H
#define MC_STORE_BUCKET_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "mooncake/status.h"
#include "store/disk_io.h"

#define MC_BUCKET_ALIGN	       4096u
#define MC_BUCKET_REC_HDR_SIZE 64u
#define MC_BUCKET_KEY_MAX      4096u	  /* as MC_STORE_KEY_MAX */
#define MC_BUCKET_ENTRIES_MAX  (1u << 16) /* per bucket; upstream's default limit is 500 */
#define MC_BUCKET_ID_MAX       48u	  /* "<20 digits>-<10 digits>" and NUL */

/* The fixed part of a record, before its key. */
struct mc_bucket_rec_hdr {
	uint32_t key_len;  /* 1..MC_BUCKET_KEY_MAX */
	uint64_t data_len; /* value bytes */
	uint64_t key_sum;  /* XXH3-64 of the key */
	uint64_t data_sum; /* XXH3-64 of the value */
};

/* Writes the 64-byte header (with its own checksum) into out. */
void mc_bucket_rec_hdr_encode(const struct mc_bucket_rec_hdr *h,
			      uint8_t out[MC_BUCKET_REC_HDR_SIZE]);
/* Decodes and checks a header read from disk; n is the bytes available.
 * MC_ERR_CHECKSUM_MISMATCH (header checksum), MC_ERR_FILE_READ_FAIL
 * (short, bad magic, version, lengths), reason in mc_last_error(). */
mc_status mc_bucket_rec_hdr_decode(const void *p, size_t n, struct mc_bucket_rec_hdr *h);

/* Bytes from a record's start to its value: header and key, padded. */
static inline uint64_t mc_bucket_rec_data_off(uint32_t key_len)
{
	return ((uint64_t)MC_BUCKET_REC_HDR_SIZE + key_len + MC_BUCKET_ALIGN - 1) &
	       ~(uint64_t)(MC_BUCKET_ALIGN - 1);
}

/* A record's whole span, a multiple of MC_BUCKET_ALIGN; 0 when data_len
 * is so large the span would not fit in 63 bits. */
static inline uint64_t mc_bucket_rec_span(uint32_t key_len, uint64_t data_len)
{
	if (data_len > (UINT64_C(1) << 62))
		return 0;
	return mc_bucket_rec_data_off(key_len) +
	       ((data_len + MC_BUCKET_ALIGN - 1) & ~(uint64_t)(MC_BUCKET_ALIGN - 1));
}

/* One record of a bucket, as its index lists it. */
struct mc_bucket_entry {
	char *key; /* key_len bytes and a NUL (keys hold no NUL) */
	uint32_t key_len;
	uint64_t offset; /* of the record header in the .bucket file */
	uint64_t data_len;
	uint64_t data_sum; /* XXH3-64 of the value */
};

/* A bucket's index: the .meta file decoded. */
struct mc_bucket_meta {
	uint64_t bucket_bytes; /* size of the .bucket file */
	uint32_t n;
	struct mc_bucket_entry *entries; /* in offset order, contiguous from 0 */
};

/* Appends the .meta encoding of m to out (errors sticky in out->err). */
mc_status mc_bucket_meta_encode(const struct mc_bucket_meta *m, struct mc_buf *out);
/*
 * Decodes a .meta file's bytes into out (which owns copies; release with
 * mc_bucket_meta_release).  Checks the magic, version, file checksum,
 * every length, that keys hold no NUL and that the records lie end to end
 * from offset 0 and end at bucket_bytes.  MC_ERR_CHECKSUM_MISMATCH or
 * MC_ERR_FILE_READ_FAIL (reason in mc_last_error()), MC_ERR_NOMEM; out is
 * left empty on failure.
 */
mc_status mc_bucket_meta_decode(const void *p, size_t n, struct mc_bucket_meta *out);
void mc_bucket_meta_release(struct mc_bucket_meta *m);

/* An object to write: key_len bytes of key (no NUL) and len bytes of value. */
struct mc_bucket_obj {
	const char *key;
	size_t key_len;
	const void *data;
	uint64_t len;
};

/* "<ms>-<seq>", zero-padded so names sort in creation order. */
void mc_bucket_id(char out[MC_BUCKET_ID_MAX], uint64_t ms, uint32_t seq);

/*
 * Writes objs as bucket id in the directory dirfd, durably (the records
 * in one batch through io, store/disk_io.h; NULL for pread/pwrite): on MC_OK both
 * files are written, fsynced and the .meta renamed into place.  out, when
 * not NULL, receives the index written (release it).  On failure nothing
 * of id is left behind.  MC_ERR_INVALID_PARAMS (no objects, a bad key or
 * id, a bucket of that id already), MC_ERR_FILE_WRITE_FAIL (a full disk
 * among others; errno's text in mc_last_error()), MC_ERR_NOMEM.
 */
mc_status mc_bucket_write(struct mc_disk_io *io, int dirfd, const char *id,
			  const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *out);

/*
 * The records half of mc_bucket_write, for the file-per-key backend too:
 * creates name in dirfd (O_EXCL; O_DIRECT as mc_bucket_open), writes the
 * records of objs from offset 0 through io and fsyncs the file; m gets
 * the entries (release it).  On failure name is removed.  The directory
 * is not synced: the caller commits the file.
 */
mc_status mc_bucket_write_data(struct mc_disk_io *io, int dirfd, const char *name, const char *id,
			       const struct mc_bucket_obj *objs, size_t n,
			       struct mc_bucket_meta *m);

/* Reads and decodes <id>.meta and checks that <id>.bucket holds
 * bucket_bytes.  MC_ERR_FILE_NOT_FOUND, MC_ERR_FILE_READ_FAIL,
 * MC_ERR_CHECKSUM_MISMATCH, MC_ERR_NOMEM. */
mc_status mc_bucket_load(int dirfd, const char *id, struct mc_bucket_meta *out);

/* Opens <id>.bucket for reading, O_DIRECT when mc_disk_io_direct(io) (and
 * the file takes it): a descriptor, or -1 with the status in *rc
 * (MC_ERR_FILE_NOT_FOUND, MC_ERR_FILE_OPEN_FAIL).  The reads below find
 * out from the descriptor which it is. */
int mc_bucket_open(struct mc_disk_io *io, int dirfd, const char *id, mc_status *rc);

/* As mc_bucket_open, for a file of any name (id is for the messages). */
int mc_bucket_open_file(struct mc_disk_io *io, int dirfd, const char *name, const char *id,
			mc_status *rc);

/*
 * Reads entry e's value from the open .bucket file fd into dst (cap bytes
 * there, at least e->data_len), checking the record header, that its key
 * is e's key and the value's checksum against both the header and e.
 * MC_ERR_BUFFER_OVERFLOW (cap too small), MC_ERR_FILE_READ_FAIL (short
 * file, header refused), MC_ERR_CHECKSUM_MISMATCH, MC_ERR_NOMEM.
 */
mc_status mc_bucket_read(struct mc_disk_io *io, int fd, const struct mc_bucket_entry *e, void *dst,
			 uint64_t cap);

/* One read of a batch: entry e of the open .bucket file fd into dst. */
struct mc_bucket_read_req {
	int fd;
	const struct mc_bucket_entry *e;
	void *dst;
	uint64_t cap;
	mc_status status; /* out, as mc_bucket_read's */
};

/*
 * The reads of r (from one or several buckets) as one batch of I/O, in
 * flight together, each checked as mc_bucket_read checks it.  Returns the
 * first failure in r's order or MC_OK; mc_last_error() holds the reason
 * of the last one that failed.
 */
mc_status mc_bucket_read_batch(struct mc_disk_io *io, struct mc_bucket_read_req *r, size_t n);

/* Deletes bucket id: its .meta first (so a crash in between leaves an
 * orphan .bucket that the next scan deletes), then its .bucket. */
mc_status mc_bucket_remove(int dirfd, const char *id);

struct mc_bucket_scan_stats {
	uint32_t buckets;   /* complete buckets handed to the callback */
	uint64_t objects;   /* their entries */
	uint32_t orphans;   /* .bucket files without .meta, deleted */
	uint32_t dropped;   /* buckets whose .meta or .bucket was refused, deleted */
	uint32_t stale_tmp; /* .meta.tmp files of interrupted writes, deleted */
};

/*
 * The start-up scan of an offload directory: every complete bucket, in id
 * order, is loaded and handed to cb (which may keep nothing of m beyond
 * the call; returning other than MC_OK stops the scan with that status).
 * Orphan .bucket files, interrupted .meta.tmp files and buckets whose
 * index is refused are deleted, each with one logged line saying why.
 * Files of other names are left alone.  st, when not NULL, gets the
 * counts.  MC_ERR_FILE_READ_FAIL when the directory cannot be listed.
 */
mc_status mc_bucket_scan(int dirfd,
			 mc_status (*cb)(void *arg, const char *id, const struct mc_bucket_meta *m),
			 void *arg, struct mc_bucket_scan_stats *st);

#endif
