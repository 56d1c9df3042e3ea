/*
 * store/disk_fpk.h - the disk store's file operations, by backend: the
 * bucket backend (store/bucket.h, many objects to a bucket) and the
 * file-per-key backend (MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=
 * file_per_key_storage_backend, spec store.md 5.5).
 *
 * A file-per-key "bucket" holds one object in one file,
 *
 *   <path>/<fsdir>/<h1>/<h2>/<id>.kv   (fsdir: MOONCAKE_OFFLOAD_FSDIR,
 *                                      default file_per_key_dir; h1, h2: two
 *                                      hex digits each of XXH3-64(id))
 *
 * whose bytes are exactly one bucket record at offset 0 (store/bucket.h:
 * the 64-byte header with its checksum and the key's and value's, the key,
 * padding to 4 KiB, the value, padding), so the bucket reads serve it
 * unchanged, O_DIRECT included.  There is no index file: the record header
 * is the index.  A write goes to <id>.kv.tmp, is fsynced, renamed to
 * <id>.kv and the directory fsynced: a client killed mid-write leaves a
 * .tmp file, which the next scan deletes; nothing incomplete is ever
 * named .kv.  A remove unlinks the file.  The scan walks the two levels,
 * decodes each file's header and key (mc_fpk_decode), checks the file's
 * size against the record's span and hands the files over in id order (the
 * fifo order); a refused file is deleted with one logged line.
 */
#ifndef MC_STORE_DISK_FPK_H
#define MC_STORE_DISK_FPK_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"
#include "store/bucket.h"
#include "store/disk_io.h"

#define MC_FPK_DIR_DEFAULT "file_per_key_dir"

typedef mc_status (*mc_disk_scan_cb)(void *arg, const char *id, const struct mc_bucket_meta *m);

/* What the disk store asks of a backend; dirfd is the backend's directory. */
struct mc_disk_backend {
	const char *name;
	uint32_t keys_max; /* objects per bucket the backend takes */
	bool indexed;	   /* an <id>.meta index and <id>.dead tombstones per bucket */
	mc_status (*write)(struct mc_disk_io *io, int dirfd, const char *id,
			   const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *out);
	int (*open)(struct mc_disk_io *io, int dirfd, const char *id, mc_status *rc);
	mc_status (*remove)(int dirfd, const char *id);
	mc_status (*scan)(int dirfd, mc_disk_scan_cb cb, void *arg,
			  struct mc_bucket_scan_stats *st);
	/* bytes the bucket's files take: sizes, and st_blocks * 512 */
	void (*sizes)(int dirfd, const char *id, uint64_t *logical, uint64_t *physical);
};

extern const struct mc_disk_backend mc_disk_backend_bucket;
extern const struct mc_disk_backend mc_disk_backend_fpk;

/*
 * Decodes the first n bytes of a file-per-key file of file_size bytes
 * into e (e->key points into p, not NUL-terminated; offset 0): the record
 * header and its checksum, the key against its checksum, no NUL in it,
 * and file_size equal to the record's span.  MC_ERR_FILE_READ_FAIL (short,
 * torn, bad lengths), MC_ERR_CHECKSUM_MISMATCH; reason in mc_last_error().
 */
mc_status mc_fpk_decode(const void *p, size_t n, uint64_t file_size, struct mc_bucket_entry *e);

#endif
