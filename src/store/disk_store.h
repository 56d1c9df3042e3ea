/*
 * store/disk_store.h - a client's local disk store: the SSD tier's objects
 * in one offload directory, as buckets (store/bucket.h) or one file per key
 * (store/disk_fpk.h), with an in-memory index, caps, eviction and the
 * accounting /metrics will show.
 *
 * The offload heartbeat writes (mc_disk_store_put writes a batch now,
 * mc_disk_store_append groups objects into buckets and lets a partial group
 * wait, as upstream's heartbeat does); the offload RPC server reads
 * (mc_disk_store_get_batch, or mc_disk_store_read_begin/into/end to read
 * into a staging buffer of its own); the master's LOCAL_DISK replicas are
 * told what was written, removed and evicted through the key lists these
 * calls fill.
 *
 * One process owns a directory: mc_disk_store_open takes an exclusive
 * flock on <dir>/mooncake-offload.lock and a second process is refused with
 * MC_ERR_FILE_LOCK_FAIL (docs/design-tiers.md says why), so the caps hold for the
 * directory as a whole.  Thread-safe: one mutex over the index, never held
 * across disk I/O; a reader holds a reference on its bucket, and a bucket
 * evicted or emptied while read is deleted when its last reader is done.
 */
#ifndef MC_STORE_DISK_STORE_H
#define MC_STORE_DISK_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "mooncake/status.h"

enum mc_disk_evict_policy {
	MC_DISK_EVICT_NONE, /* a write past the cap fails (MC_ERR_FILE_WRITE_FAIL) */
	MC_DISK_EVICT_FIFO, /* the oldest bucket first */
	MC_DISK_EVICT_LRU,  /* the least recently read bucket first; a bucket never read
			     * counts as read when it was written */
};

/* The MOONCAKE_OFFLOAD_* settings, from mc_disk_store_config_table. */
struct mc_disk_store_config {
	char *path;    /* MOONCAKE_OFFLOAD_FILE_STORAGE_PATH */
	char *backend; /* MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR */
	char *fsdir;   /* MOONCAKE_OFFLOAD_FSDIR: the file-per-key backend's subdirectory */
	uint64_t bucket_size_limit;
	int64_t bucket_keys_limit;
	uint64_t max_total_size;     /* logical cap; 0: 90% of the file system */
	uint64_t max_physical_bytes; /* st_blocks cap; 0: none */
	char *eviction_policy;	     /* none, fifo, lru */
	bool enable_eviction;	     /* MOONCAKE_OFFLOAD_ENABLE_EVICTION: the file-per-key backend
				      * evicts (by eviction_policy) or refuses writes past the cap */
	bool watermark_eviction;
	bool use_uring;
	bool direct_io; /* O_DIRECT for the .bucket files where the directory takes it */
	double watermark_high, watermark_low; /* fractions of the logical cap (0.90, 0.80) */
};

extern const struct mc_config_entry mc_disk_store_config_table[];
extern const size_t mc_disk_store_config_table_len;

/* Defaults, then the environment. */
void mc_disk_store_config_init(struct mc_disk_store_config *cfg);
void mc_disk_store_config_release(struct mc_disk_store_config *cfg);

struct mc_disk_store;

/*
 * Opens (creating it when missing) the directory cfg->path, locks it and
 * rescans its buckets into the index (a key in two buckets: the newer one
 * wins).  MC_ERR_INVALID_PARAMS (no path, a bad setting),
 * MC_ERR_NOT_SUPPORTED (offset_allocator_storage_backend; bucket_storage_backend
 * and file_per_key_storage_backend, store/disk_fpk.h, are served),
 * MC_ERR_FILE_OPEN_FAIL (missing and not creatable, not a directory, not
 * writable), MC_ERR_FILE_LOCK_FAIL (another process has it),
 * MC_ERR_FILE_READ_FAIL, MC_ERR_NOMEM; the reason in mc_last_error().
 */
mc_status mc_disk_store_open(const struct mc_disk_store_config *cfg, struct mc_disk_store **out);
/* Drops pending objects (never written), closes.  No call may be in flight. */
void mc_disk_store_close(struct mc_disk_store *ds);

/* An object handed to put or append; status is set per object. */
struct mc_disk_obj {
	const char *key;
	size_t key_len; /* 1..4096, no NUL */
	const void *data;
	uint64_t len;
	mc_status status; /* out: MC_OK written, MC_INPROGRESS pending, or why not */
};

/* A key the store hands back (written, evicted), owned by the list. */
struct mc_disk_key {
	char *key; /* key_len bytes and a NUL */
	size_t key_len;
	mc_status status;
	uint64_t len; /* value bytes */
};

struct mc_disk_keys {
	struct mc_disk_key *v;
	size_t n, cap;
};

void mc_disk_keys_release(struct mc_disk_keys *l);

/*
 * Writes objs now, in as many buckets as the limits need, evicting first
 * when the caps call for it (the keys evicted are appended to evicted_out,
 * which may be NULL).  A key already stored is replaced.  Returns the
 * first object's failure or MC_OK; each object's own result is in its
 * status.  MC_ERR_FILE_WRITE_FAIL: the disk is full or the cap is reached
 * and the policy is none (or nothing is left to evict).
 */
mc_status mc_disk_store_put(struct mc_disk_store *ds, struct mc_disk_obj *objs, size_t n,
			    struct mc_disk_keys *evicted_out);
/*
 * Copies objs into the pending group; each full group (keys or bytes
 * limit) is written at once.  An object's status is MC_INPROGRESS while it
 * waits.  done_out receives every key that left the pending group in this
 * call (from this call or an earlier one) with its result.
 */
mc_status mc_disk_store_append(struct mc_disk_store *ds, struct mc_disk_obj *objs, size_t n,
			       struct mc_disk_keys *done_out, struct mc_disk_keys *evicted_out);
/* Writes the pending partial group (nothing to do is MC_OK). */
mc_status mc_disk_store_flush(struct mc_disk_store *ds, struct mc_disk_keys *done_out,
			      struct mc_disk_keys *evicted_out);
/* Objects waiting in the pending group. */
size_t mc_disk_store_pending(struct mc_disk_store *ds);

/* Whether key is stored, and its value's length. */
bool mc_disk_store_contains(struct mc_disk_store *ds, const char *key, size_t key_len,
			    uint64_t *len_out);

/*
 * Appends every stored key with its value's length to out, oldest bucket
 * first: what a client re-registers with the master after a restart (its
 * own, or the master's).  MC_ERR_NOMEM (out then holds a part).
 */
mc_status mc_disk_store_list(struct mc_disk_store *ds, struct mc_disk_keys *out);

/* One key of a batched get. */
struct mc_disk_get {
	const char *key;
	size_t key_len;
	void *dst;
	uint64_t cap;
	uint64_t len;	  /* out: value bytes */
	mc_status status; /* out */
};

/* MC_ERR_OBJECT_NOT_FOUND, MC_ERR_BUFFER_OVERFLOW, MC_ERR_CHECKSUM_MISMATCH
 * (the key is dropped from the store), MC_ERR_FILE_READ_FAIL. */
mc_status mc_disk_store_get(struct mc_disk_store *ds, const char *key, size_t key_len, void *dst,
			    uint64_t cap, uint64_t *len_out);
/* Every get of the batch, the records read as one batch of I/O; returns
 * the first failure in gets' order or MC_OK. */
mc_status mc_disk_store_get_batch(struct mc_disk_store *ds, struct mc_disk_get *gets, size_t n);

/* A read in three steps: begin pins the object's bucket (it is not deleted
 * until end), into reads it, end unpins.  end is called after every begin
 * that returned MC_OK. */
struct mc_disk_read {
	void *bucket; /* the store's */
	uint32_t entry;
	uint64_t len; /* value bytes */
};

mc_status mc_disk_store_read_begin(struct mc_disk_store *ds, const char *key, size_t key_len,
				   struct mc_disk_read *rd);
mc_status mc_disk_store_read_into(struct mc_disk_store *ds, struct mc_disk_read *rd, void *dst,
				  uint64_t cap);
void mc_disk_store_read_end(struct mc_disk_store *ds, struct mc_disk_read *rd);

/* Removes key (MC_ERR_OBJECT_NOT_FOUND when absent); a bucket left with no
 * live key is deleted.  Durable: a restart does not bring it back. */
mc_status mc_disk_store_remove(struct mc_disk_store *ds, const char *key, size_t key_len);
/* Removes every object (and every pending one); *removed_out, when not
 * NULL, gets how many stored objects went. */
mc_status mc_disk_store_remove_all(struct mc_disk_store *ds, uint64_t *removed_out);

/*
 * Evicts by the policy until need more bytes fit under the caps (need 0:
 * the watermark pass, which with watermark eviction on brings a store above
 * the high watermark down to the low one).  The keys evicted are appended
 * to evicted_out.  MC_ERR_FILE_WRITE_FAIL when the bytes cannot be made
 * to fit (policy none, or nothing left to evict).
 */
mc_status mc_disk_store_evict(struct mc_disk_store *ds, uint64_t need,
			      struct mc_disk_keys *evicted_out);

/*
 * A tombstone in <id>.dead: the offset of a record that died while its
 * bucket lived on (removed, replaced, failed its checksum), little-endian,
 * then XXH3-64 of those 8 bytes (seeded), 16 bytes in all.
 * decode: MC_ERR_FILE_READ_FAIL (short, offset not 4 KiB-aligned),
 * MC_ERR_CHECKSUM_MISMATCH; the reason in mc_last_error().
 */
#define MC_DISK_TOMB_SIZE 16u
void mc_disk_tomb_encode(uint8_t out[MC_DISK_TOMB_SIZE], uint64_t off);
mc_status mc_disk_tomb_decode(const void *p, size_t n, uint64_t *off_out);

struct mc_disk_store_stats {
	uint64_t logical_bytes;	 /* bucket and index file sizes */
	uint64_t physical_bytes; /* their st_blocks * 512 */
	uint64_t cap_bytes;	 /* the logical cap in force */
	uint64_t objects, buckets;
	uint64_t evicted_objects, evicted_buckets;
	uint64_t reads, read_bytes, checksum_failures;
	uint64_t writes, written_bytes, write_failures;
	uint64_t rescan_objects, rescan_us; /* the open's rescan */
	bool direct;			    /* .bucket files are opened O_DIRECT */
	uint64_t direct_ops, direct_bytes;  /* disk operations on them, and their bytes */
	bool uring;			    /* batches go through io_uring (not pread/pwrite) */
	bool fixed;			    /* a staging buffer is registered as a fixed buffer */
	uint64_t fixed_ops, fixed_bytes;    /* operations run with READ_FIXED/WRITE_FIXED */
};

void mc_disk_store_stats(struct mc_disk_store *ds, struct mc_disk_store_stats *out);

/*
 * Registers the offload RPC server's staging buffer (len bytes at buf)
 * with the store's io_uring as a fixed buffer, so reads into it run as
 * READ_FIXED (no per-request page pinning); pins and faults in its pages.
 * Safe while the store is in use.  MC_ERR_NOT_SUPPORTED (pread/pwrite:
 * io_uring off or refused), MC_ERR_NOMEM (the kernel refused, e.g.
 * RLIMIT_MEMLOCK); the store works on without it either way.
 */
mc_status mc_disk_store_register_staging(struct mc_disk_store *ds, void *buf, size_t len);

#endif
