/* master/snap.c - snapshot files of the master's tables; see snap.h for the format. */
#define MC_LOG_MODULE "snap"
#include "master/snap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "base/alloc.h"
#include "base/endian.h"
#include "base/log.h"

static const uint8_t snap_magic[8] = {'M', 'C', 'S', 'N', 'A', 'P', 0, 0};

#define WBUF_CAP (4u << 20) /* the writer's buffer; an entry larger goes out alone */

/* ---- codec ---------------------------------------------------------------------------- */

void mc_snap_encode_header(uint8_t *out, uint64_t seq, const uint8_t *body, size_t len)
{
	memcpy(out, snap_magic, 8);
	mc_put_le32(out + 8, MC_SNAP_VERSION);
	mc_put_le32(out + 12, MC_SNAP_HDR_LEN);
	mc_put_le64(out + 16, seq);
	mc_put_le64(out + 24, len);
	mc_put_le64(out + 32, XXH3_64bits(body, len));
	mc_put_le64(out + 40, XXH3_64bits(out, 40));
}

static mc_status decode_header(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *body_len,
			       uint64_t *body_sum)
{
	uint32_t ver, hlen;

	if (len < MC_SNAP_HDR_LEN)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "snapshot: %zu bytes, a header is %u",
				    len, MC_SNAP_HDR_LEN);
	if (memcmp(p, snap_magic, 8) != 0)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "snapshot: bad magic");
	ver = mc_get_le32(p + 8);
	hlen = mc_get_le32(p + 12);
	if (mc_get_le64(p + 40) != XXH3_64bits(p, 40))
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "snapshot: header checksum mismatch");
	if (ver > MC_SNAP_VERSION)
		return mc_set_error(MC_ERR_INVALID_VERSION,
				    "snapshot: format version %u is newer than this master's %u: "
				    "written by a newer mooncake_master",
				    ver, MC_SNAP_VERSION);
	if (ver != MC_SNAP_VERSION || hlen != MC_SNAP_HDR_LEN)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "snapshot: version %u, header length %u",
				    ver, hlen);
	*seq = mc_get_le64(p + 16);
	*body_len = mc_get_le64(p + 24);
	*body_sum = mc_get_le64(p + 32);
	return MC_OK;
}

mc_status mc_snap_decode(const uint8_t *p, size_t len, uint64_t *seq, mc_snap_entry_cb cb,
			 void *arg)
{
	return mc_snap_decode_n(p, len, seq, NULL, cb, arg);
}

static mc_status decode_entries(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *entries,
				mc_snap_entry_cb cb, mc_snap_entry_cb hint, void *arg);

mc_status mc_snap_decode_n(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *entries,
			   mc_snap_entry_cb cb, void *arg)
{
	return decode_entries(p, len, seq, entries, cb, NULL, arg);
}

static mc_status decode_entries(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *entries,
				mc_snap_entry_cb cb, mc_snap_entry_cb hint, void *arg)
{
	size_t hoff = 0; /* the next entry to hint */
	unsigned nhinted = 0;
	uint64_t count = 0;
	uint64_t s = 0, blen = 0, bsum = 0;
	const uint8_t *b;
	size_t off;
	mc_status st = decode_header(p, len, &s, &blen, &bsum);

	if (st != MC_OK)
		return st;
	if (blen != len - MC_SNAP_HDR_LEN)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "snapshot: body of %" PRIu64 " bytes, the file has %zu (torn?)",
				    blen, len - MC_SNAP_HDR_LEN);
	b = p + MC_SNAP_HDR_LEN;
	if (XXH3_64bits(b, blen) != bsum)
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "snapshot: body checksum mismatch");
	/* the framing first, so a bad one changes nothing */
	for (off = 0; off < blen;) {
		uint32_t plen;

		if (blen - off < MC_SNAP_ENTRY_HDR)
			return mc_set_error(MC_ERR_MALFORMED_JSON,
					    "snapshot: entry header at %zu cut short", off);
		plen = mc_get_le32(b + off + 4);
		if (mc_get_le16(b + off) == 0 || mc_get_le16(b + off + 2) != 0 ||
		    plen > MC_SNAP_MAX_PAYLOAD || plen > blen - off - MC_SNAP_ENTRY_HDR)
			return mc_set_error(MC_ERR_MALFORMED_JSON,
					    "snapshot: entry at %zu: type %u, flags %u, length %u",
					    off, mc_get_le16(b + off), mc_get_le16(b + off + 2),
					    plen);
		off += MC_SNAP_ENTRY_HDR + plen;
		count++;
	}
	if (entries)
		*entries = count;
	for (off = 0; cb && off < blen;) {
		uint32_t plen = mc_get_le32(b + off + 4);

		/* the framing is checked: hint the entries ahead, each once */
		for (; hint && nhinted < MC_SNAP_HINT_AHEAD && hoff < blen; nhinted++) {
			uint32_t hl = mc_get_le32(b + hoff + 4);

			(void)hint(arg, mc_get_le16(b + hoff), b + hoff + MC_SNAP_ENTRY_HDR, hl);
			hoff += MC_SNAP_ENTRY_HDR + hl;
		}
		nhinted -= nhinted > 0;
		st = cb(arg, mc_get_le16(b + off), b + off + MC_SNAP_ENTRY_HDR, plen);
		if (st != MC_OK)
			return st;
		off += MC_SNAP_ENTRY_HDR + plen;
	}
	if (seq)
		*seq = s;
	return MC_OK;
}

/* ---- names ---------------------------------------------------------------------------- */

static void snap_path(const char *dir, uint64_t seq, const char *ext, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s/snap-%016" PRIx64 ".%s", dir, seq, ext);
}

void mc_snap_tmp_path(const char *dir, uint64_t seq, char *buf, size_t cap)
{
	snap_path(dir, seq, "tmp", buf, cap);
}

/* "snap-<16 hex>.<ext>" -> seq */
static bool parse_name(const char *name, const char *ext, uint64_t *seq)
{
	char *end;
	size_t el = strlen(ext);

	if (strncmp(name, "snap-", 5) != 0 || strlen(name) != 5 + 16 + 1 + el || name[21] != '.' ||
	    strcmp(name + 22, ext) != 0)
		return false;
	errno = 0;
	*seq = strtoull(name + 5, &end, 16);
	return errno == 0 && end == name + 21;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

/* The seqs of dir's .snap files, newest first (*n of them; NULL when none);
 * .tmp files are deleted when del_tmp. */
static mc_status list_snaps(const char *dir, bool del_tmp, uint64_t **out, size_t *n)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t *v = NULL, seq;
	size_t cap = 0;
	char path[4096];

	*out = NULL;
	*n = 0;
	if (!d)
		return errno == ENOENT ? MC_OK
				       : mc_set_error(MC_ERR_FILE_OPEN_FAIL, "snapshot dir %s: %s",
						      dir, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		if (del_tmp && parse_name(e->d_name, "tmp", &seq)) {
			snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
			(void)unlink(path);
			continue;
		}
		if (!parse_name(e->d_name, "snap", &seq))
			continue;
		if (*n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			uint64_t *nv = mc_realloc(v, nc * sizeof(*v));

			if (!nv) {
				mc_free(v);
				closedir(d);
				return MC_ERR_NOMEM;
			}
			v = nv;
			cap = nc;
		}
		v[(*n)++] = seq;
	}
	closedir(d);
	if (*n)
		qsort(v, *n, sizeof(*v), cmp_desc);
	*out = v;
	return MC_OK;
}

static mc_status sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	mc_status st = MC_OK;

	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "snapshot dir %s: %s", dir,
				    strerror(errno));
	if (fsync(fd) != 0)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "snapshot dir %s: fsync: %s", dir,
				  strerror(errno));
	close(fd);
	return st;
}

/* ---- writer --------------------------------------------------------------------------- */

struct mc_snap_writer {
	int fd;
	uint64_t seq;
	uint64_t body_len;
	XXH3_state_t *xx;
	uint8_t *buf;
	size_t len;
	mc_status err;
	char dir[4096];
	char tmp[4200];
};

static mc_status write_all(int fd, const uint8_t *p, size_t n, off_t at)
{
	while (n) {
		ssize_t k = pwrite(fd, p, n, at);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return mc_set_error(MC_ERR_FILE_WRITE_FAIL, "snapshot: write: %s",
					    k < 0 ? strerror(errno) : "no progress");
		p += k;
		n -= (size_t)k;
		at += k;
	}
	return MC_OK;
}

static mc_status flush(struct mc_snap_writer *w)
{
	mc_status st;

	if (!w->len)
		return MC_OK;
	st = write_all(w->fd, w->buf, w->len, (off_t)(MC_SNAP_HDR_LEN + w->body_len));
	if (st != MC_OK)
		return st;
	(void)XXH3_64bits_update(w->xx, w->buf, w->len);
	w->body_len += w->len;
	w->len = 0;
	return MC_OK;
}

mc_status mc_snap_writer_open(const char *dir, uint64_t seq, struct mc_snap_writer **out)
{
	struct mc_snap_writer *w;

	if (strlen(dir) >= sizeof(w->dir))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "snapshot dir: path too long");
	if (mkdir(dir, 0755) != 0 && errno != EEXIST)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "snapshot dir %s: %s", dir,
				    strerror(errno));
	w = mc_calloc(1, sizeof(*w));
	if (!w)
		return MC_ERR_NOMEM;
	w->buf = mc_malloc(WBUF_CAP);
	w->xx = XXH3_createState();
	if (!w->buf || !w->xx) {
		mc_free(w->buf);
		XXH3_freeState(w->xx);
		mc_free(w);
		return MC_ERR_NOMEM;
	}
	(void)XXH3_64bits_reset(w->xx);
	snprintf(w->dir, sizeof(w->dir), "%s", dir);
	mc_snap_tmp_path(dir, seq, w->tmp, sizeof(w->tmp));
	w->seq = seq;
	w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		mc_status st = mc_set_error(MC_ERR_FILE_OPEN_FAIL, "snapshot %s: %s", w->tmp,
					    strerror(errno));

		mc_free(w->buf);
		XXH3_freeState(w->xx);
		mc_free(w);
		return st;
	}
	*out = w;
	return MC_OK;
}

mc_status mc_snap_writer_add(struct mc_snap_writer *w, uint16_t type, const void *payload,
			     uint32_t len)
{
	uint8_t h[MC_SNAP_ENTRY_HDR];

	if (w->err != MC_OK)
		return w->err;
	if (!type || len > MC_SNAP_MAX_PAYLOAD)
		return w->err = mc_set_error(MC_ERR_INVALID_PARAMS,
					     "snapshot: entry type %u, length %u", type, len);
	mc_put_le16(h, type);
	mc_put_le16(h + 2, 0);
	mc_put_le32(h + 4, len);
	if (w->len + sizeof(h) + len > WBUF_CAP && (w->err = flush(w)) != MC_OK)
		return w->err;
	memcpy(w->buf + w->len, h, sizeof(h));
	w->len += sizeof(h);
	if (w->len + len > WBUF_CAP) { /* larger than the buffer: straight out */
		if ((w->err = flush(w)) != MC_OK)
			return w->err;
		w->err = write_all(w->fd, payload, len, (off_t)(MC_SNAP_HDR_LEN + w->body_len));
		if (w->err != MC_OK)
			return w->err;
		(void)XXH3_64bits_update(w->xx, payload, len);
		w->body_len += len;
		return MC_OK;
	}
	memcpy(w->buf + w->len, payload, len);
	w->len += len;
	return MC_OK;
}

static void writer_free(struct mc_snap_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	mc_free(w->buf);
	XXH3_freeState(w->xx);
	mc_free(w);
}

void mc_snap_writer_free(struct mc_snap_writer *w)
{
	if (w)
		writer_free(w);
}

void mc_snap_writer_abort(struct mc_snap_writer *w)
{
	if (!w)
		return;
	(void)unlink(w->tmp);
	writer_free(w);
}

mc_status mc_snap_writer_finish(struct mc_snap_writer *w)
{
	uint8_t h[MC_SNAP_HDR_LEN];
	char path[4200];
	mc_status st = w->err;

	if (st == MC_OK)
		st = flush(w);
	if (st == MC_OK) {
		/* the header as mc_snap_encode_header writes it, from the streamed sum */
		memcpy(h, snap_magic, 8);
		mc_put_le32(h + 8, MC_SNAP_VERSION);
		mc_put_le32(h + 12, MC_SNAP_HDR_LEN);
		mc_put_le64(h + 16, w->seq);
		mc_put_le64(h + 24, w->body_len);
		mc_put_le64(h + 32, XXH3_64bits_digest(w->xx));
		mc_put_le64(h + 40, XXH3_64bits(h, 40));
		st = write_all(w->fd, h, sizeof(h), 0);
	}
	if (st == MC_OK && fsync(w->fd) != 0)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "snapshot %s: fsync: %s", w->tmp,
				  strerror(errno));
	snap_path(w->dir, w->seq, "snap", path, sizeof(path));
	if (st == MC_OK && rename(w->tmp, path) != 0)
		st = mc_set_error(MC_ERR_FILE_WRITE_FAIL, "snapshot %s: rename: %s", path,
				  strerror(errno));
	if (st == MC_OK)
		st = sync_dir(w->dir);
	if (st != MC_OK) {
		mc_snap_writer_abort(w);
		return st;
	}
	writer_free(w);
	return MC_OK;
}

/* ---- load, retain --------------------------------------------------------------------- */

/* A snapshot's bytes.  Mapped (read-only, private) where it can be: the
 * page cache's pages serve the load directly, where a read() into a heap
 * buffer first faulted in and zeroed as many fresh pages and then copied
 * into them (at 10 M objects, 670 MB: about a second of a restart).  Read
 * into a buffer where it cannot (an empty file, a file system without
 * mmap). */
struct snap_bytes {
	uint8_t *p;
	size_t len;
	bool mapped;
};

/*
 * SIGBUS.  A mapped file that shrinks under its mapping (truncated by
 * another process) or whose page cannot be read back (an I/O error)
 * raises SIGBUS at the access where read() would have failed.  So the
 * decode of a mapped snapshot runs under a guard: a SIGBUS at an address
 * inside the mapping this thread decodes jumps back to the load
 * (siglongjmp), which reports the file as unreadable.  Any other SIGBUS
 * gets the action installed before ours, at the same access again.
 */
struct bus_guard {
	sigjmp_buf jb;
	const uint8_t *lo, *hi;
};

static _Thread_local struct bus_guard *volatile bus_armed;
static struct sigaction bus_prev;
static pthread_mutex_t bus_lock = PTHREAD_MUTEX_INITIALIZER;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
	struct bus_guard *g = bus_armed;
	const uint8_t *a = si->si_addr;

	(void)sig;
	(void)uc;
	if (g && a >= g->lo && a < g->hi)
		siglongjmp(g->jb, 1);
	(void)sigaction(SIGBUS, &bus_prev, NULL); /* not ours: as before */
}

static void bus_install(void)
{
	struct sigaction cur, sa;

	pthread_mutex_lock(&bus_lock);
	if (sigaction(SIGBUS, NULL, &cur) == 0 &&
	    !((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_sigbus)) {
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_sigbus;
		sa.sa_flags = SA_SIGINFO;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGBUS, &sa, &bus_prev) != 0)
			mc_warn("snapshot: cannot catch SIGBUS: %s", strerror(errno));
	}
	pthread_mutex_unlock(&bus_lock);
}

static void bytes_free(struct snap_bytes *b)
{
	if (b->mapped)
		(void)munmap(b->p, b->len);
	else
		mc_free(b->p);
	b->p = NULL;
}

static mc_status read_file(const char *path, struct snap_bytes *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat sb;
	uint8_t *p;
	size_t got = 0;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "%s: %s", path, strerror(errno));
	if (fstat(fd, &sb) != 0) {
		close(fd);
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "%s: %s", path, strerror(errno));
	}
	if (sb.st_size > 0 && (uint64_t)sb.st_size <= SIZE_MAX) {
		/* MAP_POPULATE: the whole file is read (checksummed) first anyway */
		p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
		if (p != MAP_FAILED) {
			(void)madvise(p, (size_t)sb.st_size, MADV_SEQUENTIAL);
			close(fd);
			*out = (struct snap_bytes){p, (size_t)sb.st_size, true};
			return MC_OK;
		}
	}
	p = mc_malloc((size_t)sb.st_size + 1);
	if (!p) {
		close(fd);
		return MC_ERR_NOMEM;
	}
	while (got < (size_t)sb.st_size) {
		ssize_t k = read(fd, p + got, (size_t)sb.st_size - got);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		got += (size_t)k;
	}
	close(fd);
	*out = (struct snap_bytes){p, got, false};
	return MC_OK;
}

/* decode_entries over b, under the SIGBUS guard when it is mapped: a fault
 * in the mapping is FILE_READ_FAIL with *faulted set. */
static mc_status decode_guarded(const struct snap_bytes *b, uint64_t *seq, uint64_t *entries,
				mc_snap_entry_cb cb, mc_snap_entry_cb hint, void *arg,
				bool *faulted)
{
	struct bus_guard g;
	mc_status st;

	*faulted = false;
	if (!b->mapped)
		return decode_entries(b->p, b->len, seq, entries, cb, hint, arg);
	g.lo = b->p;
	g.hi = b->p + b->len;
	bus_install();
	if (sigsetjmp(g.jb, 1)) {
		bus_armed = NULL;
		*faulted = true;
		return mc_set_error(MC_ERR_FILE_READ_FAIL,
				    "reading its mapping raised SIGBUS (the file shrank "
				    "while read, or an I/O error)");
	}
	bus_armed = &g;
	st = decode_entries(b->p, b->len, seq, entries, cb, hint, arg);
	bus_armed = NULL;
	return st;
}

mc_status mc_snap_load(const char *dir, mc_snap_entry_cb cb, void *arg,
		       struct mc_snap_load_info *info)
{
	return mc_snap_load_hinted(dir, cb, NULL, arg, info);
}

mc_status mc_snap_load_hinted(const char *dir, mc_snap_entry_cb cb, mc_snap_entry_cb hint,
			      void *arg, struct mc_snap_load_info *info)
{
	uint64_t *v;
	size_t n;
	mc_status st = list_snaps(dir, true, &v, &n);

	memset(info, 0, sizeof(*info));
	if (st != MC_OK)
		return st;
	for (size_t i = 0; i < n; i++) {
		char path[4200], bad[4300];
		struct snap_bytes fb;
		uint64_t seq = 0;
		bool faulted;

		snap_path(dir, v[i], "snap", path, sizeof(path));
		st = read_file(path, &fb);
		if (st != MC_OK)
			break;
		/* the whole file checks out (a fault reading it: damaged too) */
		st = decode_guarded(&fb, &seq, &info->total, NULL, NULL, NULL, &faulted);
		if (st == MC_OK && seq != v[i])
			st = mc_set_error(MC_ERR_MALFORMED_JSON,
					  "snapshot: covers seq %" PRIu64 ", named %" PRIu64, seq,
					  v[i]);
		if (st == MC_ERR_INVALID_VERSION) {
			st = mc_set_error(st, "%s: %s", path, mc_last_error());
			bytes_free(&fb);
			break;
		}
		if (st != MC_OK) {
			snprintf(bad, sizeof(bad), "%s.bad", path);
			mc_warn("snapshot %s is damaged (%s): renamed to %s, trying an older one",
				path, mc_last_error(), bad);
			(void)rename(path, bad);
			info->rejected++;
			bytes_free(&fb);
			st = MC_OK; /* none left is no error: the log alone, from its start */
			continue;
		}
		info->entries = 0;
		st = decode_guarded(&fb, NULL, NULL, cb, hint, arg, &faulted);
		if (faulted) {
			/* part of it is applied: no falling back in this load */
			snprintf(bad, sizeof(bad), "%s.bad", path);
			(void)rename(path, bad);
			info->rejected++;
			st = mc_set_error(st,
					  "%s: %s after some of its entries were applied; renamed "
					  "to %s, so the next start uses an older one",
					  path, mc_last_error(), bad);
		} else if (st != MC_OK) {
			st = mc_set_error(st, "%s: %s", path, mc_last_error());
		}
		info->found = st == MC_OK;
		info->seq = seq;
		info->bytes = fb.len;
		bytes_free(&fb);
		break;
	}
	mc_free(v);
	return st;
}

mc_status mc_snap_retain(const char *dir, unsigned keep, uint64_t *oldest)
{
	uint64_t *v;
	size_t n;
	mc_status st = list_snaps(dir, false, &v, &n);

	*oldest = 0;
	if (st != MC_OK)
		return st;
	if (keep < 1)
		keep = 1;
	for (size_t i = keep; i < n; i++) {
		char path[4200];

		snap_path(dir, v[i], "snap", path, sizeof(path));
		if (unlink(path) != 0 && errno != ENOENT)
			mc_warn("snapshot %s: cannot delete: %s", path, strerror(errno));
	}
	if (n)
		*oldest = v[(n < keep ? n : keep) - 1];
	mc_free(v);
	return MC_OK;
}

unsigned mc_snap_count(const char *dir, uint64_t *newest)
{
	uint64_t *v;
	size_t n;

	if (newest)
		*newest = 0;
	if (list_snaps(dir, false, &v, &n) != MC_OK)
		return 0;
	if (n && newest)
		*newest = v[0];
	mc_free(v);
	return (unsigned)n;
}
