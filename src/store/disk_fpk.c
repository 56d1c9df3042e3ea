/*
 * store/disk_fpk.c - the disk store's backends' file operations: the
 * bucket backend's (store/bucket.c) and the file-per-key backend's
 * (store/disk_fpk.h says the layout and why it is crash-safe).
 */
#include "store/disk_fpk.h"
#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

/* ---- the bucket backend ------------------------------------------------------------------- */

static void bucket_sizes(int dirfd, const char *id, uint64_t *logical, uint64_t *physical)
{
	static const char *const sfx[] = {".bucket", ".meta", ".dead"};
	*logical = *physical = 0;
	for (size_t i = 0; i < MC_ARRAY_SIZE(sfx); i++) {
		char name[MC_BUCKET_ID_MAX + 16];
		struct stat sb;
		snprintf(name, sizeof(name), "%s%s", id, sfx[i]);
		if (fstatat(dirfd, name, &sb, 0) != 0)
			continue;
		*logical += (uint64_t)sb.st_size;
		*physical += (uint64_t)sb.st_blocks * 512u;
	}
}

const struct mc_disk_backend mc_disk_backend_bucket = {
	.name = "bucket_storage_backend",
	.keys_max = MC_BUCKET_ENTRIES_MAX,
	.indexed = true,
	.write = mc_bucket_write,
	.open = mc_bucket_open,
	.remove = mc_bucket_remove,
	.scan = mc_bucket_scan,
	.sizes = bucket_sizes,
};

/* ---- the file-per-key format -------------------------------------------------------------- */

mc_status mc_fpk_decode(const void *p, size_t n, uint64_t file_size, struct mc_bucket_entry *e)
{
	struct mc_bucket_rec_hdr h;
	const uint8_t *key = (const uint8_t *)p + MC_BUCKET_REC_HDR_SIZE;
	mc_status st = mc_bucket_rec_hdr_decode(p, n, &h);

	memset(e, 0, sizeof(*e));
	if (st != MC_OK)
		return st;
	if (n < MC_BUCKET_REC_HDR_SIZE + (size_t)h.key_len)
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "file-per-key record: torn key");
	if (XXH3_64bits(key, h.key_len) != h.key_sum)
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "file-per-key record: key checksum");
	if (memchr(key, 0, h.key_len))
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "file-per-key record: NUL in the key");
	if (mc_bucket_rec_span(h.key_len, h.data_len) != file_size)
		return mc_set_error(MC_ERR_FILE_READ_FAIL,
				    "file-per-key record: file of %llu bytes, record of %llu",
				    (unsigned long long)file_size,
				    (unsigned long long)mc_bucket_rec_span(h.key_len, h.data_len));
	e->key = (char *)key;
	e->key_len = h.key_len;
	e->offset = 0;
	e->data_len = h.data_len;
	e->data_sum = h.data_sum;
	return MC_OK;
}

/* ---- the file-per-key backend ------------------------------------------------------------- */

/* "<h1>/<h2>" of id, and the file's name in it with suffix. */
static void fpk_path(const char *id, const char *suffix, char sub[8], char name[96])
{
	uint64_t h = XXH3_64bits(id, strlen(id));
	snprintf(sub, 8, "%02x/%02x", (unsigned)(h & 0xff), (unsigned)((h >> 8) & 0xff));
	snprintf(name, 96, "%s/%s%s", sub, id, suffix);
}

static int fpk_subdir(int dirfd, const char *sub)
{
	char top[4];
	memcpy(top, sub, 2);
	top[2] = '\0';
	if (mkdirat(dirfd, top, 0755) != 0 && errno != EEXIST)
		return -1;
	if (mkdirat(dirfd, sub, 0755) != 0 && errno != EEXIST)
		return -1;
	return openat(dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

static mc_status fpk_write(struct mc_disk_io *io, int dirfd, const char *id,
			   const struct mc_bucket_obj *objs, size_t n, struct mc_bucket_meta *out)
{
	char sub[8], name[96], tmp[96];
	struct mc_bucket_meta m;
	mc_status st;
	int sfd;

	memset(out, 0, sizeof(*out));
	if (n != 1)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "file-per-key %s: %zu objects", id, n);
	fpk_path(id, ".kv", sub, name);
	fpk_path(id, ".kv.tmp", sub, tmp);
	sfd = fpk_subdir(dirfd, sub);
	if (sfd < 0)
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "file-per-key %s: directory %s: %s", id,
				    sub, strerror(errno));
	st = mc_bucket_write_data(io, dirfd, tmp, id, objs, n, &m);
	if (st == MC_OK && renameat(dirfd, tmp, dirfd, name) != 0) {
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "file-per-key %s: rename: %s", id,
				  strerror(errno));
		unlinkat(dirfd, tmp, 0);
	}
	if (st == MC_OK && fsync(sfd) != 0) {
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "file-per-key %s: syncing %s: %s", id,
				  sub, strerror(errno));
		unlinkat(dirfd, name, 0);
	}
	close(sfd);
	if (st != MC_OK) {
		if (m.entries)
			mc_bucket_meta_release(&m);
		return st;
	}
	*out = m;
	return MC_OK;
}

static int fpk_open(struct mc_disk_io *io, int dirfd, const char *id, mc_status *rc)
{
	char sub[8], name[96];
	fpk_path(id, ".kv", sub, name);
	return mc_bucket_open_file(io, dirfd, name, id, rc);
}

static mc_status fpk_remove(int dirfd, const char *id)
{
	char sub[8], name[96];
	fpk_path(id, ".kv", sub, name);
	if (unlinkat(dirfd, name, 0) != 0 && errno != ENOENT)
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "file-per-key %s: remove: %s", id,
				    strerror(errno));
	return MC_OK;
}

static void fpk_sizes(int dirfd, const char *id, uint64_t *logical, uint64_t *physical)
{
	char sub[8], name[96];
	struct stat sb;
	fpk_path(id, ".kv", sub, name);
	*logical = *physical = 0;
	if (fstatat(dirfd, name, &sb, 0) == 0) {
		*logical = (uint64_t)sb.st_size;
		*physical = (uint64_t)sb.st_blocks * 512u;
	}
}

struct fpk_file {
	char id[MC_BUCKET_ID_MAX];
	char sub[8];
};

struct fpk_list {
	struct fpk_file *v;
	size_t n, cap;
};

static int fpk_cmp(const void *a, const void *b)
{
	return strcmp(((const struct fpk_file *)a)->id, ((const struct fpk_file *)b)->id);
}

static bool ends_with(const char *s, const char *sfx, size_t *stem)
{
	size_t n = strlen(s), k = strlen(sfx);
	if (n <= k || strcmp(s + n - k, sfx) != 0)
		return false;
	*stem = n - k;
	return true;
}

static bool hex2(const char *s)
{
	return strlen(s) == 2 && strspn(s, "0123456789abcdef") == 2;
}

/* The .kv files of sub (deleting .kv.tmp ones) onto l. */
static mc_status fpk_list_sub(int top, const char *sub, struct fpk_list *l,
			      struct mc_bucket_scan_stats *st)
{
	int fd = openat(top, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	mc_status rc = MC_OK;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return MC_OK; /* not a directory of ours */
	}
	while (rc == MC_OK && (de = readdir(d)) != NULL) {
		size_t stem;
		if (ends_with(de->d_name, ".kv.tmp", &stem)) {
			mc_info("file-per-key %s/%s: an interrupted write; deleting it", sub,
				de->d_name);
			unlinkat(dirfd(d), de->d_name, 0);
			st->stale_tmp++;
			continue;
		}
		if (!ends_with(de->d_name, ".kv", &stem) || stem == 0 || stem >= MC_BUCKET_ID_MAX)
			continue;
		if (l->n == l->cap) {
			size_t cap = l->cap ? l->cap * 2 : 256;
			struct fpk_file *v = mc_realloc(l->v, cap * sizeof(*v));
			if (!v) {
				rc = mc_set_error(MC_ERR_NOMEM, "file-per-key scan: no memory");
				break;
			}
			l->v = v;
			l->cap = cap;
		}
		memcpy(l->v[l->n].id, de->d_name, stem);
		l->v[l->n].id[stem] = '\0';
		snprintf(l->v[l->n].sub, sizeof(l->v[l->n].sub), "%s", sub);
		l->n++;
	}
	closedir(d);
	return rc;
}

/* One file's record, as a one-entry index of file_size bytes. */
static mc_status fpk_load(int top, const struct fpk_file *f, const char *name,
			  struct mc_bucket_meta *m)
{
	uint8_t head[MC_BUCKET_REC_HDR_SIZE + MC_BUCKET_KEY_MAX];
	struct mc_bucket_entry e;
	struct stat sb;
	mc_status rc;
	ssize_t got;
	int fd;

	memset(m, 0, sizeof(*m));
	fd = openat(top, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &sb) != 0) {
		rc = mc_set_error(MC_ERR_FILE_READ_FAIL, "file-per-key %s: %s", f->id,
				  strerror(errno));
		goto out;
	}
	got = pread(fd, head, sizeof(head), 0);
	if (got < 0) {
		rc = mc_set_error(MC_ERR_FILE_READ_FAIL, "file-per-key %s: read: %s", f->id,
				  strerror(errno));
		goto out;
	}
	rc = mc_fpk_decode(head, (size_t)got, (uint64_t)sb.st_size, &e);
	if (rc != MC_OK)
		goto out;
	m->entries = mc_calloc(1, sizeof(*m->entries));
	if (m->entries)
		m->entries[0].key = mc_malloc(e.key_len + 1u);
	if (!m->entries || !m->entries[0].key) {
		mc_bucket_meta_release(m);
		rc = mc_set_error(MC_ERR_NOMEM, "file-per-key scan: no memory");
		goto out;
	}
	memcpy(m->entries[0].key, e.key, e.key_len);
	m->entries[0].key[e.key_len] = '\0';
	m->entries[0].key_len = e.key_len;
	m->entries[0].data_len = e.data_len;
	m->entries[0].data_sum = e.data_sum;
	m->n = 1;
	m->bucket_bytes = (uint64_t)sb.st_size;
out:
	if (fd >= 0)
		close(fd);
	return rc;
}

static mc_status fpk_scan(int top, mc_disk_scan_cb cb, void *arg, struct mc_bucket_scan_stats *st)
{
	struct mc_bucket_scan_stats local;
	struct fpk_list l = {0};
	int fd = dup(top);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;
	mc_status rc = MC_OK;

	if (!st)
		st = &local;
	memset(st, 0, sizeof(*st));
	if (!d) {
		if (fd >= 0)
			close(fd);
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "file-per-key scan: %s",
				    strerror(errno));
	}
	rewinddir(d);
	/* the names first: the callbacks must see the files in id order */
	while (rc == MC_OK && (de = readdir(d)) != NULL) {
		int sfd;
		DIR *sd;
		struct dirent *se;
		if (!hex2(de->d_name))
			continue;
		sfd = openat(top, de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		sd = sfd >= 0 ? fdopendir(sfd) : NULL;
		if (!sd) {
			if (sfd >= 0)
				close(sfd);
			continue;
		}
		while (rc == MC_OK && (se = readdir(sd)) != NULL) {
			char sub[8];
			if (!hex2(se->d_name))
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", de->d_name, se->d_name);
			rc = fpk_list_sub(top, sub, &l, st);
		}
		closedir(sd);
	}
	closedir(d);
	if (l.n)
		qsort(l.v, l.n, sizeof(*l.v), fpk_cmp);
	for (size_t i = 0; rc == MC_OK && i < l.n; i++) {
		const struct fpk_file *f = &l.v[i];
		char sub[8], name[96], have[96];
		struct mc_bucket_meta m;
		mc_status lr;

		fpk_path(f->id, ".kv", sub, name);
		snprintf(have, sizeof(have), "%s/%s.kv", f->sub, f->id);
		if (strcmp(sub, f->sub) != 0) {
			mc_warn("file-per-key %s: not in its directory %s; deleting it", have, sub);
			unlinkat(top, have, 0);
			st->dropped++;
			continue;
		}
		lr = fpk_load(top, f, name, &m);
		if (lr == MC_ERR_NOMEM) {
			rc = lr;
			break;
		}
		if (lr != MC_OK) {
			mc_warn("%s; deleting %s", mc_last_error(), have);
			unlinkat(top, have, 0);
			st->dropped++;
			continue;
		}
		st->buckets++;
		st->objects++;
		rc = cb(arg, f->id, &m);
		mc_bucket_meta_release(&m);
	}
	mc_free(l.v);
	return rc;
}

const struct mc_disk_backend mc_disk_backend_fpk = {
	.name = "file_per_key_storage_backend",
	.keys_max = 1,
	.indexed = false,
	.write = fpk_write,
	.open = fpk_open,
	.remove = fpk_remove,
	.scan = fpk_scan,
	.sizes = fpk_sizes,
};
