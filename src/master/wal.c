/* master/wal.c - the master's write-ahead log; see wal.h for the format. */
#define MC_LOG_MODULE "wal"
#include "master/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"

static const uint8_t wal_magic[8] = {'M', 'C', 'W', 'A', 'L', 0, 0, 0};

#define READ_CHUNK (1u << 20)
/* past a damaged record, how far we look for intact ones before calling it
 * a torn tail; a tail longer than this is not a torn append */
#define RESYNC_SCAN_MAX (64ull << 20)
/* seqs a record found by that scan may be ahead of the last intact one */
#define RESYNC_SEQ_WINDOW 10000000ull

bool mc_wal_fsync_parse(const char *text, enum mc_wal_fsync *out)
{
	if (!text)
		return false;
	if (strcmp(text, "always") == 0)
		*out = MC_WAL_FSYNC_ALWAYS;
	else if (strcmp(text, "everysec") == 0)
		*out = MC_WAL_FSYNC_EVERYSEC;
	else if (strcmp(text, "no") == 0)
		*out = MC_WAL_FSYNC_NO;
	else
		return false;
	return true;
}

/* ---- codec ---------------------------------------------------------------------------- */

void mc_wal_encode_header(uint8_t *out, uint64_t first_seq)
{
	memcpy(out, wal_magic, sizeof(wal_magic));
	mc_put_le32(out + 8, MC_WAL_VERSION);
	mc_put_le32(out + 12, MC_WAL_HDR_LEN);
	mc_put_le64(out + 16, first_seq);
	mc_put_le64(out + 24, XXH3_64bits(out, 24));
}

mc_status mc_wal_decode_header(const uint8_t *p, size_t len, uint64_t *first_seq)
{
	uint32_t version, hlen;

	if (len < MC_WAL_HDR_LEN)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "wal header: %zu bytes, want %u", len,
				    MC_WAL_HDR_LEN);
	if (memcmp(p, wal_magic, sizeof(wal_magic)) != 0)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "wal header: bad magic");
	if (mc_get_le64(p + 24) != XXH3_64bits(p, 24))
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "wal header: checksum mismatch");
	version = mc_get_le32(p + 8);
	hlen = mc_get_le32(p + 12);
	if (version > MC_WAL_VERSION)
		return mc_set_error(MC_ERR_INVALID_VERSION,
				    "wal header: format version %u is newer than this build's %u",
				    version, MC_WAL_VERSION);
	if (version == 0 || hlen != MC_WAL_HDR_LEN)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "wal header: version %u, length %u",
				    version, hlen);
	*first_seq = mc_get_le64(p + 16);
	if (*first_seq == 0)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "wal header: first seq 0");
	return MC_OK;
}

void mc_wal_encode_rec(uint8_t *out, uint64_t seq, uint16_t type, const void *payload, uint32_t len)
{
	mc_put_le32(out, len);
	mc_put_le16(out + 4, type);
	mc_put_le16(out + 6, 0);
	mc_put_le64(out + 8, seq);
	if (len)
		memcpy(out + MC_WAL_REC_HDR_LEN, payload, len);
	mc_put_le64(out + MC_WAL_REC_HDR_LEN + len, XXH3_64bits(out, MC_WAL_REC_HDR_LEN + len));
}

mc_status mc_wal_decode_rec(const uint8_t *p, size_t len, struct mc_wal_rec *r, size_t *used)
{
	uint32_t plen;

	if (len < MC_WAL_REC_HDR_LEN)
		return MC_INPROGRESS;
	plen = mc_get_le32(p);
	if (plen > MC_WAL_MAX_PAYLOAD)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "wal record: payload length %u over the limit %u", plen,
				    MC_WAL_MAX_PAYLOAD);
	if (len < mc_wal_rec_size(plen))
		return MC_INPROGRESS;
	if (mc_get_le64(p + MC_WAL_REC_HDR_LEN + plen) != XXH3_64bits(p, MC_WAL_REC_HDR_LEN + plen))
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "wal record: checksum mismatch");
	r->len = plen;
	r->type = mc_get_le16(p + 4);
	r->seq = mc_get_le64(p + 8);
	r->payload = p + MC_WAL_REC_HDR_LEN;
	if (r->type == 0 || mc_get_le16(p + 6) != 0 || r->seq == 0)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "wal record: type %u flags %u seq %" PRIu64, r->type,
				    mc_get_le16(p + 6), r->seq);
	*used = mc_wal_rec_size(plen);
	return MC_OK;
}

/* ---- the log -------------------------------------------------------------------------- */

struct mc_wal {
	char *dir;
	enum mc_wal_fsync policy;
	int fd;		    /* the current file, opened for appending */
	uint64_t size;	    /* of the current file: every byte of it intact */
	uint64_t next_seq;  /* of the next record appended */
	uint64_t committed; /* seq of the last record written to the file */
	struct mc_buf pend; /* encoded records not yet written */
	uint64_t bytes;
	uint64_t *files; /* first seq of each file in dir, ascending; the last is current */
	size_t nfiles, capfiles;

	pthread_t syncer;
	bool syncer_on;
	pthread_mutex_t lock; /* fd for the syncer, dirty, stop, sync_err */
	pthread_cond_t cond;
	bool dirty, stop;
	int sync_err; /* errno of a failed background fdatasync: the log is broken */
	bool broken;
	mc_wal_tap_cb tap; /* mc_wal_set_tap */
	void *tap_arg;
};

static void file_path(const struct mc_wal *w, uint64_t first, char *out, size_t n)
{
	snprintf(out, n, "%s/wal-%016" PRIx64 ".log", w->dir, first);
}

static bool parse_name(const char *name, uint64_t *first)
{
	char *end;
	unsigned long long v;

	if (strncmp(name, "wal-", 4) != 0 || strlen(name) != 4 + 16 + 4 ||
	    strcmp(name + 20, ".log") != 0)
		return false;
	for (int i = 4; i < 20; i++)
		if (!strchr("0123456789abcdef", name[i]))
			return false;
	errno = 0;
	v = strtoull(name + 4, &end, 16);
	if (errno || end != name + 20 || v == 0)
		return false;
	*first = v;
	return true;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static mc_status add_file(struct mc_wal *w, uint64_t first)
{
	if (w->nfiles == w->capfiles) {
		size_t cap = w->capfiles ? 2 * w->capfiles : 16;
		uint64_t *v = mc_realloc(w->files, cap * sizeof(*v));

		if (!v)
			return mc_set_error(MC_ERR_NOMEM, "wal: no memory for the file list");
		w->files = v;
		w->capfiles = cap;
	}
	w->files[w->nfiles++] = first;
	return MC_OK;
}

static mc_status list_files(struct mc_wal *w)
{
	DIR *d = opendir(w->dir);
	struct dirent *e;
	mc_status st = MC_OK;

	if (!d)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "wal: cannot open %s: %s", w->dir,
				    strerror(errno));
	while (st == MC_OK && (e = readdir(d)) != NULL) {
		uint64_t first;

		if (parse_name(e->d_name, &first))
			st = add_file(w, first);
	}
	closedir(d);
	if (st == MC_OK && w->nfiles)
		qsort(w->files, w->nfiles, sizeof(*w->files), cmp_u64);
	return st;
}

uint64_t mc_wal_dir_bytes(const char *dir, uint64_t after)
{
	struct mc_wal w = {.dir = (char *)dir};
	uint64_t total = 0;

	if (list_files(&w) != MC_OK) { /* the open that follows says why */
		mc_free(w.files);
		return 0;
	}
	for (size_t i = 0; i < w.nfiles; i++) {
		char path[4200];
		struct stat sb;

		if (i + 1 < w.nfiles && w.files[i + 1] <= after + 1)
			continue; /* every record in it is at or before after */
		snprintf(path, sizeof(path), "%s/wal-%016" PRIx64 ".log", dir, w.files[i]);
		if (stat(path, &sb) == 0)
			total += (uint64_t)sb.st_size;
	}
	mc_free(w.files);
	return total;
}

static mc_status sync_dir(const struct mc_wal *w)
{
	int fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	mc_status st = MC_OK;

	if (fd < 0 || fsync(fd) != 0)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: cannot sync %s: %s", w->dir,
				  strerror(errno));
	if (fd >= 0)
		close(fd);
	return st;
}

/* Whether an intact record with a seq after last lies in p[from..len). */
static bool intact_after(const uint8_t *p, size_t len, size_t from, uint64_t last)
{
	for (size_t o = from; o + MC_WAL_REC_OVER <= len; o++) {
		uint64_t seq = mc_get_le64(p + o + 8);
		struct mc_wal_rec r;
		size_t used;

		if (seq <= last || seq - last > RESYNC_SEQ_WINDOW)
			continue; /* cheap filter before the checksum */
		if (mc_wal_decode_rec(p + o, len - o, &r, &used) == MC_OK)
			return true;
	}
	return false;
}

struct reader {
	int fd;
	uint8_t *buf;
	size_t cap, off, fill;
	uint64_t pos; /* file offset of buf[0] */
	bool eof;
};

static mc_status reader_more(struct reader *rd, size_t want, const char *path)
{
	if (rd->off) {
		memmove(rd->buf, rd->buf + rd->off, rd->fill - rd->off);
		rd->pos += rd->off;
		rd->fill -= rd->off;
		rd->off = 0;
	}
	if (want > rd->cap) {
		uint8_t *b = mc_realloc(rd->buf, want);

		if (!b)
			return mc_set_error(MC_ERR_NOMEM, "wal: no memory to read %s", path);
		rd->buf = b;
		rd->cap = want;
	}
	while (rd->fill < rd->cap) {
		ssize_t n = read(rd->fd, rd->buf + rd->fill, rd->cap - rd->fill);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return mc_set_error(MC_ERR_FILE_READ_FAIL, "wal: reading %s: %s", path,
					    strerror(errno));
		if (n == 0) {
			rd->eof = true;
			break;
		}
		rd->fill += (size_t)n;
	}
	return MC_OK;
}

/* Read the whole rest of the file into rd->buf (the damaged-tail check). */
static mc_status reader_rest(struct reader *rd, uint64_t size, const char *path)
{
	uint64_t rest = size - (rd->pos + rd->off);

	if (rest > RESYNC_SCAN_MAX)
		return MC_OK; /* the caller sees that the rest is not all in */
	while (!rd->eof) {
		mc_status st = reader_more(rd, MC_MAX(rd->cap, (size_t)rest + 1), path);

		if (st != MC_OK)
			return st;
	}
	return MC_OK;
}

/* Check (and replay the records after `after` of) file i; a torn tail of the
 * last file is cut.  *last is the seq of the last intact record so far. */
/* A record's framing only, no checksum: for hints (mc_wal_open_hinted). */
static bool peek_rec(const uint8_t *p, size_t len, struct mc_wal_rec *r, size_t *used)
{
	uint32_t plen;

	if (len < MC_WAL_REC_HDR_LEN)
		return false;
	plen = mc_get_le32(p);
	if (plen > MC_WAL_MAX_PAYLOAD || len < mc_wal_rec_size(plen))
		return false;
	r->len = plen;
	r->type = mc_get_le16(p + 4);
	r->seq = mc_get_le64(p + 8);
	r->payload = p + MC_WAL_REC_HDR_LEN;
	*used = mc_wal_rec_size(plen);
	return true;
}

static mc_status read_file(struct mc_wal *w, size_t i, uint64_t after, mc_wal_apply_cb cb,
			   mc_wal_apply_cb hint, void *arg, uint64_t *last,
			   struct mc_wal_open_info *info)
{
	/* hints: the records in [rd.off + hinted, ...) are not hinted yet; the
	 * nhinted before that, after the current one, are */
	size_t hinted = 0;
	unsigned nhinted = 0;
	char path[PATH_MAX];
	bool is_last = i + 1 == w->nfiles;
	struct reader rd = {.fd = -1};
	uint8_t hdr[MC_WAL_HDR_LEN];
	uint64_t first, good = 0, size;
	struct stat sb;
	const char *why = NULL;
	mc_status st = MC_OK;
	ssize_t n;

	file_path(w, w->files[i], path, sizeof(path));
	rd.fd = open(path, O_RDWR | O_CLOEXEC);
	if (rd.fd < 0 || fstat(rd.fd, &sb) != 0) {
		st = mc_set_error(MC_ERR_FILE_OPEN_FAIL, "wal: cannot open %s: %s", path,
				  strerror(errno));
		goto out;
	}
	size = (uint64_t)sb.st_size;
	n = pread(rd.fd, hdr, sizeof(hdr), 0);
	st = n == (ssize_t)sizeof(hdr) ? mc_wal_decode_header(hdr, sizeof(hdr), &first)
				       : mc_set_error(MC_ERR_MALFORMED_JSON, "a short file");
	if (st != MC_OK) {
		char cause[256];

		snprintf(cause, sizeof(cause), "%s", mc_last_error());
		if (st == MC_ERR_INVALID_VERSION) {
			st = mc_set_error(MC_ERR_INVALID_VERSION, "wal: %s: %s; refusing to start",
					  path, cause);
			goto out;
		}
		if (is_last && size <= MC_WAL_HDR_LEN) {
			/* a crash while the file was being created: it held nothing */
			mc_warn("wal: %s: a header of %" PRIu64 " bytes, cut at creation; removed",
				path, size);
			close(rd.fd);
			rd.fd = -1;
			st = unlink(path) == 0 ? sync_dir(w)
					       : mc_set_error(MC_ERR_FILE_WRITE_FAIL,
							      "wal: cannot remove %s: %s", path,
							      strerror(errno));
			w->nfiles--;
			goto out;
		}
		st = mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "wal: %s: damaged header (%s)", path,
				  cause);
		goto out;
	}
	if (first != w->files[i]) {
		st = mc_set_error(MC_ERR_MALFORMED_JSON,
				  "wal: %s: its header says first seq %" PRIu64, path, first);
		goto out;
	}
	if (*last && first != *last + 1) {
		st = mc_set_error(MC_ERR_MALFORMED_JSON,
				  "wal: %s starts at seq %" PRIu64
				  " but the file before ends at %" PRIu64 ": records are missing",
				  path, first, *last);
		goto out;
	}
	if (!*last && first > after + 1) {
		st = mc_set_error(MC_ERR_MALFORMED_JSON,
				  "wal: the log starts at seq %" PRIu64
				  " and the snapshot ends at %" PRIu64 ": records are missing",
				  first, after);
		goto out;
	}
	/* an empty file (rotated, then the files before it dropped) still says
	 * where the log is: its first record would be first */
	if (first - 1 > *last)
		*last = first - 1;
	if (lseek(rd.fd, MC_WAL_HDR_LEN, SEEK_SET) < 0) {
		st = mc_set_error(MC_ERR_FILE_READ_FAIL, "wal: %s: %s", path, strerror(errno));
		goto out;
	}
	rd.pos = MC_WAL_HDR_LEN;
	good = MC_WAL_HDR_LEN;
	/* the first read gives rd.buf its memory: the decode below never does
	 * pointer arithmetic on NULL (undefined even for an offset of 0) */
	st = reader_more(&rd, READ_CHUNK, path);
	if (st != MC_OK)
		goto out;
	for (;;) {
		struct mc_wal_rec r;
		size_t used;
		mc_status d;

		d = mc_wal_decode_rec(rd.buf + rd.off, rd.fill - rd.off, &r, &used);
		if (d == MC_INPROGRESS && !rd.eof) {
			size_t want = MC_MAX((size_t)READ_CHUNK, rd.fill - rd.off);

			if (rd.fill - rd.off >= MC_WAL_REC_HDR_LEN)
				want = MC_MAX(want, mc_wal_rec_size(mc_get_le32(rd.buf + rd.off)));
			st = reader_more(&rd, want, path);
			if (st != MC_OK)
				goto out;
			continue;
		}
		if (d == MC_INPROGRESS && rd.off == rd.fill)
			break; /* the end, on a record boundary */
		if (d == MC_OK && r.seq != (*last ? *last + 1 : first)) {
			d = mc_set_error(MC_ERR_MALFORMED_JSON,
					 "seq %" PRIu64 " where %" PRIu64 " was due", r.seq,
					 *last ? *last + 1 : first);
		}
		if (d != MC_OK) {
			why = d == MC_INPROGRESS ? "the file ends inside it" : mc_last_error();
			break;
		}
		if (hint) {
			if (hinted < used)
				hinted = used;
			while (nhinted < MC_WAL_HINT_AHEAD) {
				struct mc_wal_rec h;
				size_t hu;

				if (!peek_rec(rd.buf + rd.off + hinted, rd.fill - rd.off - hinted,
					      &h, &hu))
					break;
				if (h.seq > after)
					(void)hint(arg, &h);
				hinted += hu;
				nhinted++;
			}
		}
		if (r.seq > after && cb) {
			st = cb(arg, &r);
			if (st != MC_OK)
				goto out;
			if (info)
				info->replayed++;
		}
		*last = r.seq;
		rd.off += used;
		good += used;
		if (hinted) {
			hinted -= used;
			nhinted -= nhinted > 0;
		}
		if (info)
			info->bytes += used;
	}
	if (why) {
		char whybuf[256];
		bool intact;

		snprintf(whybuf, sizeof(whybuf), "%s", why);
		st = reader_rest(&rd, size, path);
		if (st != MC_OK)
			goto out;
		intact = !rd.eof || intact_after(rd.buf, rd.fill, rd.off + 1, *last);
		if (!is_last || intact) {
			st = mc_set_error(MC_ERR_CHECKSUM_MISMATCH,
					  "wal: %s: the record at offset %" PRIu64
					  " is damaged (%s) and %s follows: not a torn "
					  "tail; refusing to start (move the file away to start "
					  "from what is before it)",
					  path, good, whybuf,
					  is_last ? "an intact record" : "another file");
			goto out;
		}
		mc_warn("wal: %s: torn tail cut at offset %" PRIu64 " (%" PRIu64 " bytes: %s)",
			path, good, size - good, whybuf);
		if (ftruncate(rd.fd, (off_t)good) != 0 || fdatasync(rd.fd) != 0) {
			st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: cannot cut %s: %s", path,
					  strerror(errno));
			goto out;
		}
		if (info)
			info->cut_bytes += size - good;
	}
	if (is_last) {
		w->size = good;
		w->fd = rd.fd;
		rd.fd = -1;
	}
	if (info)
		info->files++;
out:
	if (rd.fd >= 0)
		close(rd.fd);
	mc_free(rd.buf);
	return st;
}

/* Start a new current file whose first record is first. */
static mc_status new_file(struct mc_wal *w, uint64_t first)
{
	char path[PATH_MAX];
	uint8_t hdr[MC_WAL_HDR_LEN];
	mc_status st;
	int fd;

	file_path(w, first, path, sizeof(path));
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "wal: cannot create %s: %s", path,
				    strerror(errno));
	mc_wal_encode_header(hdr, first);
	if (write(fd, hdr, sizeof(hdr)) != (ssize_t)sizeof(hdr) || fdatasync(fd) != 0) {
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: cannot write %s: %s", path,
				  strerror(errno));
		close(fd);
		unlink(path);
		return st;
	}
	st = sync_dir(w);
	if (st == MC_OK)
		st = add_file(w, first);
	if (st != MC_OK) {
		close(fd);
		return st;
	}
	pthread_mutex_lock(&w->lock);
	if (w->fd >= 0)
		close(w->fd);
	w->fd = fd;
	w->dirty = false;
	pthread_mutex_unlock(&w->lock);
	w->size = MC_WAL_HDR_LEN;
	return MC_OK;
}

static void *syncer_main(void *arg)
{
	struct mc_wal *w = arg;
	struct timespec ts;

	pthread_mutex_lock(&w->lock);
	while (!w->stop) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += 1;
		while (!w->stop && pthread_cond_timedwait(&w->cond, &w->lock, &ts) == 0)
			;
		if (w->dirty && w->fd >= 0) {
			int fd = dup(w->fd);

			w->dirty = false;
			pthread_mutex_unlock(&w->lock);
			/* the caller may write meanwhile: those bytes wait for the next round */
			if (fd < 0 || fdatasync(fd) != 0) {
				int e = errno;

				pthread_mutex_lock(&w->lock);
				w->sync_err = e ? e : EIO;
				pthread_mutex_unlock(&w->lock);
			}
			if (fd >= 0)
				close(fd);
			pthread_mutex_lock(&w->lock);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

static void wal_free(struct mc_wal *w)
{
	if (w->syncer_on) {
		pthread_mutex_lock(&w->lock);
		w->stop = true;
		pthread_cond_signal(&w->cond);
		pthread_mutex_unlock(&w->lock);
		pthread_join(w->syncer, NULL);
	}
	if (w->fd >= 0)
		close(w->fd);
	pthread_mutex_destroy(&w->lock);
	pthread_cond_destroy(&w->cond);
	mc_buf_release(&w->pend);
	mc_free(w->files);
	mc_free(w->dir);
	mc_free(w);
}

mc_status mc_wal_open(const char *dir, enum mc_wal_fsync policy, uint64_t after, mc_wal_apply_cb cb,
		      void *arg, struct mc_wal **out, struct mc_wal_open_info *info)
{
	return mc_wal_open_hinted(dir, policy, after, cb, NULL, arg, out, info);
}

mc_status mc_wal_open_hinted(const char *dir, enum mc_wal_fsync policy, uint64_t after,
			     mc_wal_apply_cb cb, mc_wal_apply_cb hint, void *arg,
			     struct mc_wal **out, struct mc_wal_open_info *info)
{
	struct mc_wal *w;
	pthread_condattr_t ca;
	uint64_t last = 0;
	mc_status st = MC_OK;

	if (info)
		memset(info, 0, sizeof(*info));
	if (!dir || !*dir || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "wal: no directory given");
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "wal: cannot create %s: %s", dir,
				    strerror(errno));
	w = mc_calloc(1, sizeof(*w));
	if (!w)
		return mc_set_error(MC_ERR_NOMEM, "wal: no memory");
	w->fd = -1;
	w->policy = policy;
	mc_buf_init(&w->pend);
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	w->dir = mc_strdup(dir);
	if (!w->dir) {
		st = mc_set_error(MC_ERR_NOMEM, "wal: no memory");
		goto err;
	}
	st = list_files(w);
	for (size_t i = 0; st == MC_OK && i < w->nfiles; i++)
		st = read_file(w, i, after, cb, hint, arg, &last, info);
	if (st != MC_OK)
		goto err;
	if (info)
		info->last_seq = last;
	/* the snapshot may be newer than the whole log: its records are after it */
	if (w->fd < 0 || last < after) {
		st = new_file(w, MC_MAX(last, after) + 1);
		if (st != MC_OK)
			goto err;
		last = MC_MAX(last, after);
	}
	w->next_seq = last + 1;
	w->committed = last;
	if (policy == MC_WAL_FSYNC_EVERYSEC) {
		if (pthread_create(&w->syncer, NULL, syncer_main, w) != 0) {
			st = mc_set_error(MC_ERR_INTERNAL, "wal: cannot start the fsync thread");
			goto err;
		}
		pthread_setname_np(w->syncer, "mc-wal-sync");
		w->syncer_on = true;
	}
	*out = w;
	return MC_OK;
err : {
	char why[512];

	snprintf(why, sizeof(why), "%s", mc_last_error());
	wal_free(w);
	mc_restore_error(why);
}
	return st;
}

mc_status mc_wal_append(struct mc_wal *w, uint16_t type, const void *payload, uint32_t len,
			uint64_t *seq_out)
{
	size_t at = w->pend.len;

	if (type == 0 || len > MC_WAL_MAX_PAYLOAD)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "wal: record of type %u, %u bytes", type,
				    len);
	if (mc_buf_reserve(&w->pend, mc_wal_rec_size(len)) != MC_OK)
		return mc_set_error(MC_ERR_NOMEM, "wal: no memory for a record of %u bytes", len);
	mc_wal_encode_rec(w->pend.data + at, w->next_seq, type, payload, len);
	w->pend.len = at + mc_wal_rec_size(len);
	if (seq_out)
		*seq_out = w->next_seq;
	w->next_seq++;
	return MC_OK;
}

/* Forget the buffered records and cut what of them reached the file. */
static mc_status undo(struct mc_wal *w, const char *what, int err)
{
	mc_buf_reset(&w->pend);
	w->next_seq = w->committed + 1;
	if (ftruncate(w->fd, (off_t)w->size) != 0)
		w->broken = true; /* the file may hold records no one acknowledged */
	return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: %s: %s", what, strerror(err));
}

mc_status mc_wal_commit(struct mc_wal *w)
{
	size_t done = 0;
	int serr;

	pthread_mutex_lock(&w->lock);
	serr = w->sync_err;
	pthread_mutex_unlock(&w->lock);
	if (serr)
		w->broken = true;
	if (w->broken) {
		mc_buf_reset(&w->pend);
		w->next_seq = w->committed + 1;
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL,
				    "wal: an earlier fdatasync or cut failed (%s); no record is "
				    "accepted until a restart",
				    strerror(serr ? serr : EIO));
	}
	if (!w->pend.len)
		return MC_OK;
	while (done < w->pend.len) {
		ssize_t n = pwrite(w->fd, w->pend.data + done, w->pend.len - done,
				   (off_t)(w->size + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return undo(w, "write", n < 0 ? errno : ENOSPC);
		done += (size_t)n;
	}
	if (w->policy == MC_WAL_FSYNC_ALWAYS && fdatasync(w->fd) != 0) {
		int e = errno;

		w->broken = true; /* after a failed fdatasync the page cache says nothing */
		return undo(w, "fdatasync", e);
	}
	w->size += done;
	w->bytes += done;
	w->committed = w->next_seq - 1;
	if (w->tap)
		w->tap(w->tap_arg, w->pend.data, w->pend.len, w->committed);
	mc_buf_reset(&w->pend);
	if (w->policy == MC_WAL_FSYNC_EVERYSEC) {
		pthread_mutex_lock(&w->lock);
		w->dirty = true;
		pthread_mutex_unlock(&w->lock);
	}
	return MC_OK;
}

void mc_wal_set_tap(struct mc_wal *w, mc_wal_tap_cb tap, void *arg)
{
	w->tap = tap;
	w->tap_arg = arg;
}

uint64_t mc_wal_last_seq(const struct mc_wal *w)
{
	return w->next_seq - 1;
}

uint64_t mc_wal_bytes(const struct mc_wal *w)
{
	return w->bytes;
}

mc_status mc_wal_rotate(struct mc_wal *w)
{
	mc_status st = mc_wal_commit(w);

	if (st != MC_OK)
		return st;
	/* the old file must be whole on disk before a newer one exists, or a
	 * crash could leave a gap that recovery refuses */
	if (fdatasync(w->fd) != 0) {
		w->broken = true;
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: fdatasync: %s", strerror(errno));
	}
	return new_file(w, w->next_seq);
}

mc_status mc_wal_drop_through(struct mc_wal *w, uint64_t seq, unsigned *n)
{
	size_t keep = 0, i;
	unsigned gone = 0;
	mc_status st = MC_OK;

	/* file i holds seqs [files[i], files[i + 1]); the current one stays */
	for (i = 0; i + 1 < w->nfiles && w->files[i + 1] - 1 <= seq; i++) {
		char path[PATH_MAX];

		file_path(w, w->files[i], path, sizeof(path));
		if (unlink(path) != 0 && errno != ENOENT) {
			st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: cannot remove %s: %s", path,
					  strerror(errno));
			break;
		}
		gone++;
	}
	keep = i;
	memmove(w->files, w->files + keep, (w->nfiles - keep) * sizeof(*w->files));
	w->nfiles -= keep;
	if (gone && st == MC_OK)
		st = sync_dir(w);
	if (n)
		*n = gone;
	return st;
}

mc_status mc_wal_close(struct mc_wal *w)
{
	mc_status st;

	if (!w)
		return MC_OK;
	st = mc_wal_commit(w);
	if (st == MC_OK && !w->broken && fdatasync(w->fd) != 0)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "wal: fdatasync: %s", strerror(errno));
	wal_free(w);
	return st;
}
