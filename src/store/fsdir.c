/*
 * store/fsdir.c - the legacy shared-filesystem DISK tier's path layout and
 * file format (store/fsdir.h has both), and the three file operations over
 * them: write a whole file atomically, read one back verified, delete the
 * one of a given write.
 *
 * Shaped for a directory many clients share (NFS and the like): every
 * operation is one path, no lock and no index; a reader trusts only what
 * the file says about itself (header checksum, the object's tenant and
 * key, the replica id, the value's checksum), never its name, so two
 * writers racing on one name, a file rotted on disk or cut short by a
 * crash are refused, never returned.  The writer's temporary file lives
 * beside the final name (rename is atomic within a directory everywhere),
 * under a name no object ever has.
 *
 * Must never: write a file under its final name before it is whole, or
 * delete a file another write put there.
 */
#define MC_LOG_MODULE "fsdir"
#include "store/fsdir.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/endian.h"
#include "base/log.h"

#define MAGIC	0x4446434du /* "MCFD" */
#define VERSION 1u

/* ---- path layout ------------------------------------------------------------------------ */

void mc_fsdir_letters(const char *key, size_t klen, char out[2])
{
	uint64_t h = XXH3_64bits(key, klen);

	out[0] = (char)('a' + (h & 15));
	out[1] = (char)('a' + ((h >> 4) & 15));
}

static bool bad_char(char c)
{
	return c == '/' || c == '\\' || c == ':' || c == '*' || c == '?' || c == '"' || c == '<' ||
	       c == '>' || c == '|' || c == '\0';
}

static bool default_tenant(const char *t, size_t n)
{
	return n == 0 || (n == 7 && memcmp(t, "default", 7) == 0);
}

uint64_t mc_fsdir_name_sum(const char *tenant, size_t tlen, const char *key, size_t klen)
{
	XXH3_state_t st;
	uint8_t l[4];

	if (default_tenant(tenant, tlen))
		tlen = 0;
	mc_put_le32(l, (uint32_t)tlen);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, l, sizeof(l));
	XXH3_64bits_update(&st, tenant, tlen);
	XXH3_64bits_update(&st, key, klen);
	return XXH3_64bits_digest(&st);
}

size_t mc_fsdir_path(char *out, size_t cap, const char *fsdir, size_t dlen, const char *tenant,
		     size_t tlen, const char *key, size_t klen)
{
	bool hashed = !default_tenant(tenant, tlen) || klen > MC_FSDIR_NAME_KEEP ||
		      (klen == 1 && key[0] == '.') || (klen == 2 && key[0] == '.' && key[1] == '.');
	size_t keep = klen > MC_FSDIR_NAME_KEEP ? MC_FSDIR_NAME_KEEP : klen;
	size_t n = dlen + 5 + keep + (hashed ? 17 : 0), pos = 0;
	char letters[2];

	for (size_t i = 0; i < klen && !hashed; i++)
		hashed = bad_char(key[i]);
	if (hashed)
		n = dlen + 5 + keep + 17;
	if (n >= cap)
		return n;
	mc_fsdir_letters(key, klen, letters);
	memcpy(out, fsdir, dlen);
	pos = dlen;
	out[pos++] = '/';
	out[pos++] = letters[0];
	out[pos++] = '/';
	out[pos++] = letters[1];
	out[pos++] = '/';
	for (size_t i = 0; i < keep; i++)
		out[pos++] = bad_char(key[i]) ? '_' : key[i];
	if (hashed)
		pos += (size_t)snprintf(out + pos, cap - pos, ".%016" PRIx64,
					mc_fsdir_name_sum(tenant, tlen, key, klen));
	out[pos] = '\0';
	return pos;
}

/* ---- header ----------------------------------------------------------------------------- */

void mc_fsdir_hdr_encode(const struct mc_fsdir_hdr *h, uint8_t out[MC_FSDIR_HDR_SIZE])
{
	memset(out, 0, MC_FSDIR_HDR_SIZE);
	mc_put_le32(out, MAGIC);
	mc_put_le16(out + 4, VERSION);
	mc_put_le64(out + 8, h->replica_id);
	mc_put_le64(out + 16, h->value_len);
	mc_put_le64(out + 24, h->value_sum);
	mc_put_le32(out + 32, h->key_len);
	mc_put_le32(out + 36, h->tenant_len);
	mc_put_le64(out + 40, h->name_sum);
	mc_put_le64(out + 56, XXH3_64bits(out, 56));
}

static mc_status bad(mc_status st, const char *why)
{
	return mc_set_error(st, "fsdir file header: %s", why);
}

mc_status mc_fsdir_hdr_decode(const void *p, size_t n, struct mc_fsdir_hdr *h)
{
	const uint8_t *b = p;

	memset(h, 0, sizeof(*h));
	if (n < MC_FSDIR_HDR_SIZE)
		return bad(MC_ERR_FILE_READ_FAIL, "short");
	if (mc_get_le32(b) != MAGIC)
		return bad(MC_ERR_FILE_READ_FAIL, "bad magic");
	if (mc_get_le64(b + 56) != XXH3_64bits(b, 56))
		return bad(MC_ERR_CHECKSUM_MISMATCH, "checksum mismatch");
	if (mc_get_le16(b + 4) != VERSION)
		return bad(MC_ERR_FILE_READ_FAIL, "unknown version");
	if (mc_get_le16(b + 6) != 0 || mc_get_le64(b + 48) != 0)
		return bad(MC_ERR_FILE_READ_FAIL, "reserved bytes set");
	h->key_len = mc_get_le32(b + 32);
	h->tenant_len = mc_get_le32(b + 36);
	if (h->key_len == 0 || h->key_len > MC_FSDIR_KEY_MAX ||
	    h->tenant_len > MC_FSDIR_TENANT_MAX) {
		memset(h, 0, sizeof(*h));
		return bad(MC_ERR_FILE_READ_FAIL, "key or tenant length out of range");
	}
	h->replica_id = mc_get_le64(b + 8);
	h->value_len = mc_get_le64(b + 16);
	h->value_sum = mc_get_le64(b + 24);
	h->name_sum = mc_get_le64(b + 40);
	if (h->value_len > (UINT64_C(1) << 62)) {
		memset(h, 0, sizeof(*h));
		return bad(MC_ERR_FILE_READ_FAIL, "value length out of range");
	}
	return MC_OK;
}

/* ---- files ------------------------------------------------------------------------------ */

/* The directory part of path (up to its last '/'), into dir (PATH_MAX). */
static bool dir_of(const char *path, char *dir, size_t cap)
{
	const char *s = strrchr(path, '/');
	size_t n;

	if (!s)
		return false;
	n = (size_t)(s - path);
	if (n == 0 || n >= cap)
		return false;
	memcpy(dir, path, n);
	dir[n] = '\0';
	return true;
}

/* mkdir -p of the last two components of dir (the letters): fsdir itself
 * must exist. */
static int make_dirs(char *dir)
{
	char *s = strrchr(dir, '/');

	if (mkdir(dir, 0777) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT || !s)
		return -1;
	*s = '\0';
	if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
		*s = '/';
		return -1;
	}
	*s = '/';
	return mkdir(dir, 0777) == 0 || errno == EEXIST ? 0 : -1;
}

static int write_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t w = writev(fd, iov, n > 1024 ? 1024 : n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		while (n > 0 && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

mc_status mc_fsdir_write(const char *path, const char *tenant, size_t tlen, const char *key,
			 size_t klen, uint64_t replica_id, const struct iovec *parts, size_t nparts,
			 uint64_t len)
{
	char dir[4096], tmp[4096 + 32];
	uint8_t hdr[MC_FSDIR_HDR_SIZE];
	struct mc_fsdir_hdr h = {0};
	struct iovec *iov;
	XXH3_state_t st;
	uint64_t sum = 0;
	int fd, dfd, err;

	if (default_tenant(tenant, tlen))
		tlen = 0;
	if (klen == 0 || klen > MC_FSDIR_KEY_MAX || tlen > MC_FSDIR_TENANT_MAX ||
	    nparts > 1u << 20 || !dir_of(path, dir, sizeof(dir)))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "fsdir write: bad key or path");
	XXH3_64bits_reset(&st);
	for (size_t i = 0; i < nparts; i++) {
		XXH3_64bits_update(&st, parts[i].iov_base, parts[i].iov_len);
		sum += parts[i].iov_len;
	}
	if (sum != len)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "fsdir write: parts hold %" PRIu64 " bytes, not %" PRIu64, sum,
				    len);
	h.replica_id = replica_id;
	h.value_len = len;
	h.value_sum = XXH3_64bits_digest(&st);
	h.name_sum = mc_fsdir_name_sum(tenant, tlen, key, klen);
	h.key_len = (uint32_t)klen;
	h.tenant_len = (uint32_t)tlen;
	mc_fsdir_hdr_encode(&h, hdr);
	snprintf(tmp, sizeof(tmp), "%s/:%016" PRIx64 ".tmp", dir, replica_id);
	if (make_dirs(dir) != 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "fsdir: cannot create %s: %s", dir,
				    strerror(errno));
	iov = mc_calloc(nparts + 3, sizeof(*iov));
	if (!iov)
		return mc_set_error(MC_ERR_NOMEM, "fsdir write: no memory");
	iov[0] = (struct iovec){hdr, sizeof(hdr)};
	iov[1] = (struct iovec){(void *)tenant, tlen};
	iov[2] = (struct iovec){(void *)key, klen};
	memcpy(iov + 3, parts, nparts * sizeof(*iov));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0) {
		err = errno;
		mc_free(iov);
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "fsdir: cannot create %s: %s", tmp,
				    strerror(err));
	}
	if (write_all(fd, iov, (int)(nparts + 3)) != 0 || fsync(fd) != 0) {
		err = errno;
		close(fd);
		unlink(tmp);
		mc_free(iov);
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "fsdir: writing %s: %s", tmp,
				    strerror(err));
	}
	mc_free(iov);
	close(fd);
	if (rename(tmp, path) != 0) {
		err = errno;
		unlink(tmp);
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "fsdir: renaming %s to %s: %s", tmp,
				    path, strerror(err));
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return MC_OK;
}

static ssize_t read_at(int fd, void *p, size_t n, uint64_t off)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = pread(fd, (char *)p + got, n - got, (off_t)(off + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Open path and check that it is replica_id's file of (tenant, key):
 * the descriptor, or -1 with the status in *st. */
static int open_own(const char *path, const char *tenant, size_t tlen, const char *key, size_t klen,
		    uint64_t replica_id, struct mc_fsdir_hdr *h, mc_status *st)
{
	uint8_t hdr[MC_FSDIR_HDR_SIZE];
	char *name = NULL;
	struct stat sb;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (default_tenant(tenant, tlen))
		tlen = 0;
	if (fd < 0) {
		*st = mc_set_error(errno == ENOENT ? MC_ERR_FILE_NOT_FOUND : MC_ERR_FILE_OPEN_FAIL,
				   "fsdir: %s: %s", path, strerror(errno));
		return -1;
	}
	if (read_at(fd, hdr, sizeof(hdr), 0) != (ssize_t)sizeof(hdr)) {
		*st = mc_set_error(MC_ERR_FILE_READ_FAIL, "fsdir: %s: short header", path);
		goto fail;
	}
	if ((*st = mc_fsdir_hdr_decode(hdr, sizeof(hdr), h)) != MC_OK)
		goto fail;
	if (h->replica_id != replica_id || h->key_len != klen || h->tenant_len != tlen ||
	    h->name_sum != mc_fsdir_name_sum(tenant, tlen, key, klen)) {
		*st = mc_set_error(MC_ERR_FILE_NOT_FOUND,
				   "fsdir: %s holds another object or write (replica %" PRIu64
				   ", wanted %" PRIu64 ")",
				   path, h->replica_id, replica_id);
		goto fail;
	}
	name = mc_malloc(tlen + klen + 1);
	if (!name) {
		*st = mc_set_error(MC_ERR_NOMEM, "fsdir: no memory");
		goto fail;
	}
	if (read_at(fd, name, tlen + klen, MC_FSDIR_HDR_SIZE) != (ssize_t)(tlen + klen) ||
	    memcmp(name, tenant, tlen) != 0 || memcmp(name + tlen, key, klen) != 0) {
		*st = mc_set_error(MC_ERR_FILE_NOT_FOUND, "fsdir: %s holds another object", path);
		goto fail;
	}
	if (fstat(fd, &sb) != 0 ||
	    (uint64_t)sb.st_size != MC_FSDIR_HDR_SIZE + tlen + klen + h->value_len) {
		*st = mc_set_error(MC_ERR_FILE_READ_FAIL,
				   "fsdir: %s: size does not match its header", path);
		goto fail;
	}
	mc_free(name);
	*st = MC_OK;
	return fd;
fail:
	mc_free(name);
	close(fd);
	return -1;
}

mc_status mc_fsdir_read(const char *path, const char *tenant, size_t tlen, const char *key,
			size_t klen, uint64_t replica_id, void *dst, uint64_t len)
{
	struct mc_fsdir_hdr h;
	mc_status st;
	int fd = open_own(path, tenant, tlen, key, klen, replica_id, &h, &st);

	if (fd < 0)
		return st;
	if (h.value_len != len) {
		close(fd);
		return mc_set_error(MC_ERR_FILE_READ_FAIL,
				    "fsdir: %s holds %" PRIu64 " bytes, the object %" PRIu64, path,
				    h.value_len, len);
	}
	if (read_at(fd, dst, (size_t)len, MC_FSDIR_HDR_SIZE + h.tenant_len + h.key_len) !=
	    (ssize_t)len) {
		close(fd);
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "fsdir: %s: short value", path);
	}
	close(fd);
	if (XXH3_64bits(dst, (size_t)len) != h.value_sum)
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "fsdir: %s: value checksum mismatch",
				    path);
	return MC_OK;
}

bool mc_fsdir_unlink(const char *path, uint64_t replica_id)
{
	uint8_t hdr[MC_FSDIR_HDR_SIZE];
	struct mc_fsdir_hdr h;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	bool ours;

	if (fd < 0)
		return false;
	ours = read_at(fd, hdr, sizeof(hdr), 0) == (ssize_t)sizeof(hdr) &&
	       mc_fsdir_hdr_decode(hdr, sizeof(hdr), &h) == MC_OK && h.replica_id == replica_id;
	close(fd);
	return ours && unlink(path) == 0;
}

/* The temporary name of the write of replica_id to path, into tmp. */
static bool tmp_of(const char *path, uint64_t replica_id, char *tmp, size_t cap)
{
	char dir[4096];

	return dir_of(path, dir, sizeof(dir)) &&
	       (size_t)snprintf(tmp, cap, "%s/:%016" PRIx64 ".tmp", dir, replica_id) < cap;
}

void mc_fsdir_unlink_tmp(const char *path, uint64_t replica_id)
{
	char tmp[4096 + 32];

	if (tmp_of(path, replica_id, tmp, sizeof(tmp)))
		(void)unlink(tmp);
}
