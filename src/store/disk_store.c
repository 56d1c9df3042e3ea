/*
 * store/disk_store.c - a client's local disk store over bucket files; see
 * disk_store.h for what it offers and docs/design-tiers.md for why.
 *
 * State: a list of buckets in id order (the fifo order), each holding its
 * decoded index (struct mc_bucket_meta, whose keys the hash index points
 * into), a live flag per entry, its size on disk, the tick of its last
 * read and a reference count; and a chained hash table key -> (bucket,
 * entry).  One mutex (mu) guards all of it and is never held across disk
 * I/O: a reader takes a reference on the bucket under mu and reads
 * without it; a bucket evicted or left without live keys is taken out of
 * the list and the index at once ("detached") and its files are deleted
 * by whoever drops its last reference.  A second mutex (write_mu)
 * serializes the writers (put, append, flush, evict, remove_all): bucket
 * ids and the pending group belong to it; it is taken before mu.
 *
 * An entry that dies while its bucket stays (a key removed, replaced by a
 * newer write, or failing its checksum) gets a tombstone in <id>.dead,
 * sixteen bytes appended and synced: its record's offset and a checksum
 * of it.  The rescan applies them, so a removed or replaced key never
 * comes back after a restart; a torn last tombstone is ignored.  Evicted
 * and emptied buckets need none: their files go.
 *
 * Never: hold mu across I/O, delete a bucket a reader holds, serve an entry
 * that failed its checksum, or leave a bucket whose keys are all dead.
 */
#define MC_LOG_MODULE "disk_store"
#include "store/disk_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"
#include "base/time.h"
#include "store/bucket.h"
#include "store/disk_fpk.h"
#include "store/disk_io.h"

#define LOCK_NAME  "mooncake-offload.lock"
#define TOMB_SIZE  MC_DISK_TOMB_SIZE
#define TOMB_SEED  0x4d434244u /* "MCBD" */
#define IDX_START  1024u
#define BACKEND_OK "bucket_storage_backend"
#define ARENA_MAX  (1ull << 30) /* most address space for the pending copies */

/* ---- configuration ------------------------------------------------------------------------ */

static bool policy_check(const char *value, char *why, size_t why_len)
{
	if (strcmp(value, "none") == 0 || strcmp(value, "fifo") == 0 || strcmp(value, "lru") == 0)
		return true;
	snprintf(why, why_len, "'%s' is not none, fifo or lru", value);
	return false;
}

static bool fsdir_check(const char *value, char *why, size_t why_len)
{
	if (value[0] && value[0] != '.' && !strchr(value, '/') && strlen(value) < 256)
		return true;
	snprintf(why, why_len, "'%s' is not one directory name", value);
	return false;
}

#define CFG(f) offsetof(struct mc_disk_store_config, f)
const struct mc_config_entry mc_disk_store_config_table[] = {
	{.f = {"offload_file_storage_path", "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", NULL,
	       "the SSD tier's directory (created when missing; one process per directory)",
	       CFG(path), MC_CONFIG_STRING, 0, 0}},
	{.f = {"offload_storage_backend_descriptor", "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR",
	       BACKEND_OK,
	       "disk backend: bucket_storage_backend (objects grouped into buckets) or "
	       "file_per_key_storage_backend (one file per object under <path>/" MC_FPK_DIR_DEFAULT
	       "; the bucket limits do not apply); offset_allocator_storage_backend is refused",
	       CFG(backend), MC_CONFIG_STRING, 0, 0}},
	{.f = {"offload_fsdir", "MOONCAKE_OFFLOAD_FSDIR", MC_FPK_DIR_DEFAULT,
	       "file_per_key_storage_backend: the subdirectory of the offload directory that "
	       "holds its files (one name, no slash)",
	       CFG(fsdir), MC_CONFIG_STRING, 0, 0},
	 .check = fsdir_check},
	{.f = {"offload_bucket_size_limit_bytes", "MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES",
	       "268435456", "most value bytes grouped into one bucket", CFG(bucket_size_limit),
	       MC_CONFIG_SIZE, 4096, INT64_MAX}},
	{.f = {"offload_bucket_keys_limit", "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "500",
	       "most keys grouped into one bucket", CFG(bucket_keys_limit), MC_CONFIG_INT, 1,
	       MC_BUCKET_ENTRIES_MAX}},
	{.f = {"offload_bucket_max_total_size", "MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", "0",
	       "logical cap of the directory's buckets; 0: 90% of the file system",
	       CFG(max_total_size), MC_CONFIG_SIZE, 0, INT64_MAX}},
	{.f = {"offload_bucket_max_physical_bytes", "MOONCAKE_OFFLOAD_BUCKET_MAX_PHYSICAL_BYTES",
	       "0", "cap on the blocks the buckets take (du-style, st_blocks*512); 0: none",
	       CFG(max_physical_bytes), MC_CONFIG_SIZE, 0, INT64_MAX}},
	/* the alias first, so the upstream name read after it wins */
	{.f = {"bucket_eviction_policy", "MOONCAKE_BUCKET_EVICTION_POLICY", NULL,
	       "older name of MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY (which wins when both are "
	       "set)",
	       CFG(eviction_policy), MC_CONFIG_STRING, 0, 0},
	 .check = policy_check},
	{.f = {"offload_bucket_eviction_policy", "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "fifo",
	       "disk eviction: none (writes past the cap fail), fifo (oldest bucket), lru (least "
	       "recently read bucket; one never read counts from its write)",
	       CFG(eviction_policy), MC_CONFIG_STRING, 0, 0},
	 .check = policy_check},
	/* the alias first again: upstream reads ENABLE_EVICTION under the newer name */
	{.f = {"enable_eviction", "ENABLE_EVICTION", NULL,
	       "older name of MOONCAKE_OFFLOAD_ENABLE_EVICTION (which wins when both are set)",
	       CFG(enable_eviction), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"offload_enable_eviction", "MOONCAKE_OFFLOAD_ENABLE_EVICTION", "true",
	       "file_per_key_storage_backend: evict files (oldest first, or as "
	       "MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY says) to make room; false: a write past "
	       "the cap fails.  The bucket backend ignores it",
	       CFG(enable_eviction), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"offload_enable_disk_watermark_eviction",
	       "MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", "true",
	       "the heartbeat's eviction pass brings usage above 90% of the cap down to 80%",
	       CFG(watermark_eviction), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"offload_use_uring", "MOONCAKE_OFFLOAD_USE_URING", "true",
	       "disk I/O through io_uring (pread/pwrite when off or refused by the kernel)",
	       CFG(use_uring), MC_CONFIG_BOOL, 0, 0}},
	{.f = {"store_offload_direct_io", "MC_STORE_OFFLOAD_DIRECT_IO", "true",
	       "open the SSD tier's .bucket files with O_DIRECT (bypassing the page cache) when "
	       "the directory's file system takes it (tmpfs does not: buffered there)",
	       CFG(direct_io), MC_CONFIG_BOOL, 0, 0}},
};
#undef CFG
const size_t mc_disk_store_config_table_len = MC_ARRAY_SIZE(mc_disk_store_config_table);

void mc_disk_store_config_init(struct mc_disk_store_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	mc_config_entry_defaults(mc_disk_store_config_table, mc_disk_store_config_table_len, cfg);
	mc_config_entry_load_env(mc_disk_store_config_table, mc_disk_store_config_table_len, cfg);
	cfg->watermark_high = 0.90;
	cfg->watermark_low = 0.80;
}

void mc_disk_store_config_release(struct mc_disk_store_config *cfg)
{
	mc_config_entry_release(mc_disk_store_config_table, mc_disk_store_config_table_len, cfg);
}

/* ---- state -------------------------------------------------------------------------------- */

struct bucket {
	struct bucket *prev, *next; /* the list, in id order */
	struct bucket *reap_next;   /* on a reap list: files to delete */
	char id[MC_BUCKET_ID_MAX];
	struct mc_bucket_meta meta;
	uint8_t *live;
	uint32_t nlive;
	uint64_t logical, physical;
	uint64_t last_read; /* lru tick of its last read, or of its write */
	uint32_t refs;
	bool detached;
};

struct slot {
	struct slot *next;
	uint64_t hash;
	struct bucket *b;
	uint32_t idx;
};

struct pend {
	char *key;
	size_t key_len;
	void *data; /* block-aligned: in the arena, or its own allocation (own) */
	uint64_t len;
	bool own;
};

struct mc_disk_store {
	pthread_mutex_t mu;	  /* the index, the list, the counters */
	pthread_mutex_t write_mu; /* writers: ids, the pending group */
	int dirfd, lockfd;
	char *path;
	struct mc_disk_io *io;
	const struct mc_disk_backend *be;
	uint64_t size_limit, keys_limit, cap, phys_cap;
	enum mc_disk_evict_policy policy;
	const char *no_evict_why; /* why a policy of none, for the error */
	bool watermark;
	double high, low;

	struct bucket head; /* sentinel of the list */
	struct slot **tab;
	size_t mask, nslots;
	uint64_t logical, physical, objects, nbuckets, tick;
	struct mc_disk_store_stats st;

	uint64_t last_ms;
	uint32_t seq;
	struct pend *pend;
	size_t npend;
	uint8_t *arena; /* the pending copies, reused group after group */
	uint64_t arena_cap, arena_used;
	uint64_t pend_bytes;
};

/* A dying entry's tombstone, written after mu is dropped; holds a ref. */
struct tomb {
	struct bucket *b;
	uint64_t off;
};

struct work {
	struct tomb *t;
	size_t nt, cap;
	struct bucket *reap;
};

static void lock(struct mc_disk_store *ds)
{
	pthread_mutex_lock(&ds->mu);
}

static void unlock(struct mc_disk_store *ds)
{
	pthread_mutex_unlock(&ds->mu);
}

static bool key_ok(const char *key, size_t len)
{
	return key && len > 0 && len <= MC_BUCKET_KEY_MAX && !memchr(key, 0, len);
}

static void file_name(char *out, size_t cap, const char *id, const char *suffix)
{
	snprintf(out, cap, "%s%s", id, suffix);
}

/* ---- the hash index ----------------------------------------------------------------------- */

static struct slot **idx_find(struct mc_disk_store *ds, const char *key, size_t len, uint64_t h)
{
	struct slot **pp = &ds->tab[h & ds->mask];
	for (; *pp; pp = &(*pp)->next) {
		const struct slot *s = *pp;
		const struct mc_bucket_entry *e = &s->b->meta.entries[s->idx];
		if (s->hash == h && e->key_len == len && memcmp(e->key, key, len) == 0)
			break;
	}
	return pp;
}

static void idx_grow(struct mc_disk_store *ds)
{
	size_t n = (ds->mask + 1) * 2;
	struct slot **tab = mc_calloc(n, sizeof(*tab));
	if (!tab)
		return; /* longer chains, still correct */
	for (size_t i = 0; i <= ds->mask; i++) {
		struct slot *s = ds->tab[i], *next;
		for (; s; s = next) {
			next = s->next;
			s->next = tab[s->hash & (n - 1)];
			tab[s->hash & (n - 1)] = s;
		}
	}
	mc_free(ds->tab);
	ds->tab = tab;
	ds->mask = n - 1;
}

/* Drops the slot of (b, i) if the index still points there. */
static void idx_drop_entry(struct mc_disk_store *ds, struct bucket *b, uint32_t i)
{
	const struct mc_bucket_entry *e = &b->meta.entries[i];
	struct slot **pp = idx_find(ds, e->key, e->key_len, XXH3_64bits(e->key, e->key_len));
	struct slot *s = *pp;
	if (s && s->b == b && s->idx == i) {
		*pp = s->next;
		mc_free(s);
		ds->nslots--;
	}
}

/* ---- buckets: accounting, detaching, reaping ---------------------------------------------- */

static void bucket_free(struct bucket *b)
{
	mc_bucket_meta_release(&b->meta);
	mc_free(b->live);
	mc_free(b);
}

static void bucket_sizes(const struct mc_disk_store *ds, struct bucket *b)
{
	ds->be->sizes(ds->dirfd, b->id, &b->logical, &b->physical);
}

static void reap_push(struct work *w, struct bucket *b)
{
	b->reap_next = w->reap;
	w->reap = b;
}

/* Out of the list and the accounting; the files go with the last ref. */
static void detach_locked(struct mc_disk_store *ds, struct bucket *b, struct work *w)
{
	if (b->detached)
		return;
	b->prev->next = b->next;
	b->next->prev = b->prev;
	b->detached = true;
	ds->logical -= b->logical;
	ds->physical -= b->physical;
	ds->nbuckets--;
	if (b->refs == 0)
		reap_push(w, b);
}

static void unref_locked(struct bucket *b, struct work *w)
{
	mc_assert(b->refs > 0);
	if (--b->refs == 0 && b->detached)
		reap_push(w, b);
}

/* Marks entry i of b dead, with a tombstone to write (room for it was
 * reserved in w); a bucket left with no live entry is detached. */
static void kill_locked(struct mc_disk_store *ds, struct bucket *b, uint32_t i, struct work *w)
{
	if (!b->live[i])
		return;
	b->live[i] = 0;
	b->nlive--;
	ds->objects--;
	if (w->nt < w->cap) {
		b->refs++;
		w->t[w->nt++] = (struct tomb){b, b->meta.entries[i].offset};
	}
	if (b->nlive == 0)
		detach_locked(ds, b, w);
}

static mc_status work_init(struct work *w, size_t max_tombs)
{
	memset(w, 0, sizeof(*w));
	if (max_tombs == 0)
		return MC_OK;
	w->t = mc_calloc(max_tombs, sizeof(*w->t));
	if (!w->t)
		return mc_set_error(MC_ERR_NOMEM, "disk store: no memory for %zu tombstones",
				    max_tombs);
	w->cap = max_tombs;
	return MC_OK;
}

void mc_disk_tomb_encode(uint8_t out[MC_DISK_TOMB_SIZE], uint64_t off)
{
	mc_put_le64(out, off);
	mc_put_le64(out + 8, XXH3_64bits_withSeed(out, 8, TOMB_SEED));
}

mc_status mc_disk_tomb_decode(const void *p, size_t n, uint64_t *off_out)
{
	const uint8_t *b = p;
	uint64_t off;

	if (n < MC_DISK_TOMB_SIZE)
		return mc_set_error(MC_ERR_FILE_READ_FAIL, "tombstone: %zu of 16 bytes", n);
	if (mc_get_le64(b + 8) != XXH3_64bits_withSeed(b, 8, TOMB_SEED))
		return mc_set_error(MC_ERR_CHECKSUM_MISMATCH, "tombstone: checksum");
	off = mc_get_le64(b);
	if (off % MC_BUCKET_ALIGN != 0)
		return mc_set_error(MC_ERR_FILE_READ_FAIL,
				    "tombstone: offset %" PRIu64 " is not a record's", off);
	*off_out = off;
	return MC_OK;
}

/* Appends the tombstones of one bucket to <id>.dead and syncs it. */
static void tomb_write(struct mc_disk_store *ds, const struct bucket *b, const struct tomb *t,
		       size_t n)
{
	char name[MC_BUCKET_ID_MAX + 16];
	uint8_t *buf = mc_malloc(n * TOMB_SIZE);
	int fd;

	file_name(name, sizeof(name), b->id, ".dead");
	fd = openat(ds->dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (!buf || fd < 0) {
		mc_error(
			"bucket %s: cannot record %zu dead keys (%s); a restart may bring them back",
			b->id, n, buf ? strerror(errno) : "no memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		mc_disk_tomb_encode(buf + i * TOMB_SIZE, t[i].off);
	if (write(fd, buf, n * TOMB_SIZE) != (ssize_t)(n * TOMB_SIZE) || fdatasync(fd) != 0)
		mc_error("bucket %s: recording %zu dead keys: %s; a restart may bring them back",
			 b->id, n, strerror(errno));
out:
	if (fd >= 0)
		close(fd);
	mc_free(buf);
}

static void reap(struct mc_disk_store *ds, struct bucket *list)
{
	while (list) {
		struct bucket *b = list;
		char name[MC_BUCKET_ID_MAX + 16];
		list = b->reap_next;
		if (ds->be->remove(ds->dirfd, b->id) != MC_OK)
			mc_error("%s", mc_last_error());
		if (ds->be->indexed) {
			file_name(name, sizeof(name), b->id, ".dead");
			unlinkat(ds->dirfd, name, 0);
		}
		bucket_free(b);
	}
}

static int tomb_cmp(const void *a, const void *b)
{
	const struct tomb *x = a, *y = b;
	return x->b == y->b ? 0 : ((uintptr_t)x->b < (uintptr_t)y->b ? -1 : 1);
}

/* After mu is dropped: the tombstones, their refs, the deletions. */
static void work_finish(struct mc_disk_store *ds, struct work *w)
{
	if (w->nt)
		qsort(w->t, w->nt, sizeof(*w->t), tomb_cmp);
	for (size_t i = 0, j; i < w->nt; i = j) {
		for (j = i + 1; j < w->nt && w->t[j].b == w->t[i].b; j++)
			;
		if (!w->t[i].b->detached)
			tomb_write(ds, w->t[i].b, &w->t[i], j - i);
	}
	if (w->nt) {
		lock(ds);
		for (size_t i = 0; i < w->nt; i++)
			unref_locked(w->t[i].b, w);
		unlock(ds);
	}
	reap(ds, w->reap);
	mc_free(w->t);
	memset(w, 0, sizeof(*w));
}

/* Puts b's live entries into the index (b is new, newer than any bucket
 * there): an older entry of the same key dies. */
static void insert_locked(struct mc_disk_store *ds, struct bucket *b, struct work *w)
{
	b->prev = ds->head.prev;
	b->next = &ds->head;
	ds->head.prev->next = b;
	ds->head.prev = b;
	ds->nbuckets++;
	b->last_read = ++ds->tick; /* lru: a new bucket ranks as if read when written */
	ds->logical += b->logical;
	ds->physical += b->physical;
	ds->objects += b->nlive;
	for (uint32_t i = 0; i < b->meta.n; i++) {
		const struct mc_bucket_entry *e = &b->meta.entries[i];
		uint64_t h;
		struct slot **pp, *s;
		if (!b->live[i])
			continue;
		h = XXH3_64bits(e->key, e->key_len);
		pp = idx_find(ds, e->key, e->key_len, h);
		if ((s = *pp) != NULL) {
			struct bucket *ob = s->b;
			uint32_t oi = s->idx;
			s->b = b;
			s->idx = i;
			kill_locked(ds, ob, oi, w);
			continue;
		}
		s = mc_malloc(sizeof(*s));
		if (!s) {
			/* not indexed: the entry is unreachable, count it dead */
			mc_error("disk store: no memory to index %s; dropping it", e->key);
			kill_locked(ds, b, i, w);
			continue;
		}
		*s = (struct slot){NULL, h, b, i};
		*pp = s;
		if (++ds->nslots > ds->mask + 1)
			idx_grow(ds);
	}
}

/* ---- eviction ----------------------------------------------------------------------------- */

/* Whether need more bytes pass a cap; on the physical side the index
 * file's last block counts whole. */
static bool over(const struct mc_disk_store *ds, uint64_t need, uint64_t cap, uint64_t phys_cap)
{
	uint64_t phys_need = need ? need + MC_BUCKET_ALIGN : 0;
	return ds->logical + need > cap || (phys_cap && ds->physical + phys_need > phys_cap);
}

static struct bucket *victim_locked(struct mc_disk_store *ds)
{
	struct bucket *best = NULL;
	if (ds->head.next == &ds->head)
		return NULL;
	if (ds->policy == MC_DISK_EVICT_FIFO)
		return ds->head.next;
	for (struct bucket *b = ds->head.next; b != &ds->head; b = b->next)
		if (!best || b->last_read < best->last_read)
			best = b;
	return best;
}

static void keys_push(struct mc_disk_keys *l, const char *key, size_t len, mc_status st,
		      uint64_t vlen)
{
	char *k;
	if (!l)
		return;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct mc_disk_key *v = mc_realloc(l->v, cap * sizeof(*v));
		if (!v)
			goto nomem;
		l->v = v;
		l->cap = cap;
	}
	k = mc_malloc(len + 1);
	if (!k)
		goto nomem;
	memcpy(k, key, len);
	k[len] = '\0';
	l->v[l->n++] = (struct mc_disk_key){k, len, st, vlen};
	return;
nomem:
	mc_error("disk store: no memory to report key %.*s", (int)(len > 64 ? 64 : len), key);
}

void mc_disk_keys_release(struct mc_disk_keys *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		mc_free(l->v[i].key);
	mc_free(l->v);
	memset(l, 0, sizeof(*l));
}

static void evict_bucket_locked(struct mc_disk_store *ds, struct bucket *b,
				struct mc_disk_keys *evicted, struct work *w)
{
	mc_info("evicting bucket %s (%u objects, %" PRIu64 " bytes)", b->id, b->nlive, b->logical);
	for (uint32_t i = 0; i < b->meta.n; i++) {
		const struct mc_bucket_entry *e = &b->meta.entries[i];
		if (!b->live[i])
			continue;
		keys_push(evicted, e->key, e->key_len, MC_OK, e->data_len);
		idx_drop_entry(ds, b, i);
		b->live[i] = 0;
	}
	ds->objects -= b->nlive;
	ds->st.evicted_objects += b->nlive;
	ds->st.evicted_buckets++;
	b->nlive = 0;
	detach_locked(ds, b, w);
}

/* Evicts until need fits under cap and phys_cap. */
static mc_status make_room_locked(struct mc_disk_store *ds, uint64_t need, uint64_t cap,
				  uint64_t phys_cap, struct mc_disk_keys *evicted, struct work *w)
{
	if (need > cap || (phys_cap && need > phys_cap))
		return mc_set_error(MC_ERR_FILE_WRITE_FAIL,
				    "disk store: %" PRIu64 " bytes exceed the cap of %" PRIu64,
				    need, phys_cap && phys_cap < cap ? phys_cap : cap);
	while (over(ds, need, cap, phys_cap)) {
		struct bucket *b;
		if (ds->policy == MC_DISK_EVICT_NONE)
			return mc_set_error(MC_ERR_FILE_WRITE_FAIL,
					    "disk store: cap reached (%" PRIu64 " of %" PRIu64
					    " bytes used) and %s",
					    ds->logical, ds->cap, ds->no_evict_why);
		b = victim_locked(ds);
		if (!b)
			return mc_set_error(
				MC_ERR_FILE_WRITE_FAIL,
				"disk store: nothing left to evict for %" PRIu64 " bytes", need);
		evict_bucket_locked(ds, b, evicted, w);
	}
	return MC_OK;
}

mc_status mc_disk_store_evict(struct mc_disk_store *ds, uint64_t need,
			      struct mc_disk_keys *evicted_out)
{
	struct work w;
	mc_status st = MC_OK;

	work_init(&w, 0);
	pthread_mutex_lock(&ds->write_mu);
	lock(ds);
	if (need) {
		st = make_room_locked(ds, need, ds->cap, ds->phys_cap, evicted_out, &w);
	} else if (ds->watermark && ds->policy != MC_DISK_EVICT_NONE &&
		   over(ds, 0, (uint64_t)((double)ds->cap * ds->high),
			ds->phys_cap ? (uint64_t)((double)ds->phys_cap * ds->high) : 0)) {
		st = make_room_locked(ds, 0, (uint64_t)((double)ds->cap * ds->low),
				      ds->phys_cap ? (uint64_t)((double)ds->phys_cap * ds->low) : 0,
				      evicted_out, &w);
	}
	unlock(ds);
	work_finish(ds, &w);
	pthread_mutex_unlock(&ds->write_mu);
	return st;
}

/* ---- writes ------------------------------------------------------------------------------- */

static uint64_t group_need(const struct mc_disk_store *ds, const struct mc_bucket_obj *objs,
			   size_t n)
{
	bool index = ds->be->indexed;	/* the bucket backend: a .meta beside the records */
	uint64_t need = index ? 40 : 0; /* the index's header and trailer */
	for (size_t i = 0; i < n; i++)
		need += mc_bucket_rec_span((uint32_t)objs[i].key_len, objs[i].len) +
			(index ? 28 + objs[i].key_len : 0);
	return need;
}

static void next_id(struct mc_disk_store *ds, char id[MC_BUCKET_ID_MAX])
{
	uint64_t ms = mc_now_ms();
	if (ms > ds->last_ms) {
		ds->last_ms = ms;
		ds->seq = 0;
	} else {
		ds->seq++;
	}
	mc_bucket_id(id, ds->last_ms, ds->seq);
}

/* Writes one group as one bucket (write_mu held). */
static mc_status write_group(struct mc_disk_store *ds, const struct mc_bucket_obj *objs, size_t n,
			     struct mc_disk_keys *evicted)
{
	uint64_t need = group_need(ds, objs, n);
	struct bucket *b;
	struct work w;
	mc_status st;

	st = work_init(&w, n);
	if (st != MC_OK)
		return st;
	lock(ds);
	st = make_room_locked(ds, need, ds->cap, ds->phys_cap, evicted, &w);
	unlock(ds);
	reap(ds, w.reap); /* the space of evicted buckets, before writing */
	w.reap = NULL;
	b = st == MC_OK ? mc_calloc(1, sizeof(*b)) : NULL;
	if (st == MC_OK && !b)
		st = mc_set_error(MC_ERR_NOMEM, "disk store: no memory for a bucket");
	if (st == MC_OK) {
		next_id(ds, b->id);
		st = ds->be->write(ds->io, ds->dirfd, b->id, objs, n, &b->meta);
	}
	if (st == MC_OK && !(b->live = mc_malloc(n))) {
		ds->be->remove(ds->dirfd, b->id);
		st = mc_set_error(MC_ERR_NOMEM, "disk store: no memory for a bucket");
	}
	if (st != MC_OK) {
		if (b)
			bucket_free(b);
		lock(ds);
		ds->st.write_failures += n;
		unlock(ds);
		mc_free(w.t);
		return st;
	}
	memset(b->live, 1, n);
	b->nlive = (uint32_t)n;
	bucket_sizes(ds, b);
	lock(ds);
	insert_locked(ds, b, &w);
	ds->st.writes += n;
	ds->st.written_bytes += b->logical;
	unlock(ds);
	work_finish(ds, &w);
	return MC_OK;
}

static bool obj_ok(struct mc_disk_obj *o)
{
	if (!key_ok(o->key, o->key_len)) {
		o->status = mc_set_error(MC_ERR_INVALID_PARAMS, "disk store: bad key (%zu bytes)",
					 o->key_len);
		return false;
	}
	if (o->len && !o->data) {
		o->status = mc_set_error(MC_ERR_INVALID_PARAMS, "disk store: a value without data");
		return false;
	}
	return true;
}

mc_status mc_disk_store_put(struct mc_disk_store *ds, struct mc_disk_obj *objs, size_t n,
			    struct mc_disk_keys *evicted_out)
{
	struct mc_bucket_obj *g;
	struct mc_disk_obj **which;
	mc_status first = MC_OK;
	size_t ng = 0;

	if (!ds || (!objs && n))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store put: no objects");
	g = mc_calloc(n ? n : 1, sizeof(*g));
	which = mc_calloc(n ? n : 1, sizeof(*which));
	if (!g || !which) {
		mc_free(g);
		mc_free(which);
		for (size_t i = 0; i < n; i++)
			objs[i].status = MC_ERR_NOMEM;
		return mc_set_error(MC_ERR_NOMEM, "disk store put: no memory");
	}
	/* the valid objects, in order; then group by group */
	for (size_t i = 0; i < n; i++) {
		if (!obj_ok(&objs[i])) {
			if (first == MC_OK)
				first = objs[i].status;
			continue;
		}
		which[ng++] = &objs[i];
	}
	pthread_mutex_lock(&ds->write_mu);
	for (size_t i = 0; i < ng;) {
		size_t k = 0;
		uint64_t bytes = 0;
		mc_status st;
		while (i + k < ng && k < ds->keys_limit &&
		       (k == 0 || bytes + which[i + k]->len <= ds->size_limit)) {
			const struct mc_disk_obj *o = which[i + k];
			bytes += o->len;
			g[k++] = (struct mc_bucket_obj){o->key, o->key_len, o->data, o->len};
		}
		st = write_group(ds, g, k, evicted_out);
		for (size_t j = 0; j < k; j++)
			which[i + j]->status = st;
		if (st != MC_OK && first == MC_OK)
			first = st;
		i += k;
	}
	pthread_mutex_unlock(&ds->write_mu);
	mc_free(g);
	mc_free(which);
	return first;
}

/*
 * The pending group's copies live in one arena, mapped at the first append
 * and reused by every group after: its pages are faulted in once, not per
 * group (a fresh allocation per object costs a page fault per 4 KiB, which
 * on some virtual machines is slower than the disk).  The pages it has
 * touched stay resident while the store is open (at most a group: the
 * bucket size limit plus a block per key, capped at ARENA_MAX); giving them
 * back after each group (MADV_FREE, MADV_DONTNEED) would fault them in
 * again, which is what the arena is for avoiding.  A copy that does not
 * fit (the arena is full, or could not be mapped) gets its own allocation.  Every copy is
 * block-aligned, so an O_DIRECT write takes it from where it lies.
 */
static void *pend_data_alloc(struct mc_disk_store *ds, uint64_t len, bool *own)
{
	uint64_t need = (len + MC_BUCKET_ALIGN) & ~(uint64_t)(MC_BUCKET_ALIGN - 1);
	if (!ds->arena && ds->arena_cap) {
		void *p = mmap(NULL, ds->arena_cap, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (p == MAP_FAILED) {
			mc_warn("offload directory %s: no arena of %" PRIu64 " bytes (%s); "
				"pending copies allocated one by one",
				ds->path, ds->arena_cap, strerror(errno));
			ds->arena_cap = 0;
		} else {
			ds->arena = p;
		}
	}
	if (ds->arena && need <= ds->arena_cap - ds->arena_used) {
		void *p = ds->arena + ds->arena_used;
		ds->arena_used += need;
		*own = false;
		return p;
	}
	*own = true;
	return mc_aligned_alloc(MC_BUCKET_ALIGN, len ? len : 1);
}

static void pend_data_free(struct pend *p)
{
	if (p->own)
		mc_free(p->data);
	p->data = NULL;
}

static void pend_clear(struct mc_disk_store *ds)
{
	for (size_t i = 0; i < ds->npend; i++) {
		mc_free(ds->pend[i].key);
		pend_data_free(&ds->pend[i]);
	}
	ds->arena_used = 0;
	ds->npend = 0;
	ds->pend_bytes = 0;
}

/* Writes the pending group (write_mu held). */
static mc_status flush_locked(struct mc_disk_store *ds, struct mc_disk_keys *done,
			      struct mc_disk_keys *evicted)
{
	struct mc_bucket_obj *g;
	mc_status st;

	if (ds->npend == 0)
		return MC_OK;
	g = mc_calloc(ds->npend, sizeof(*g));
	if (!g)
		return mc_set_error(MC_ERR_NOMEM, "disk store flush: no memory");
	for (size_t i = 0; i < ds->npend; i++)
		g[i] = (struct mc_bucket_obj){ds->pend[i].key, ds->pend[i].key_len,
					      ds->pend[i].data, ds->pend[i].len};
	st = write_group(ds, g, ds->npend, evicted);
	for (size_t i = 0; i < ds->npend; i++)
		keys_push(done, ds->pend[i].key, ds->pend[i].key_len, st, ds->pend[i].len);
	mc_free(g);
	pend_clear(ds);
	return st;
}

/* The objects of this call that were pending get the flush's result. */
static void settle(struct mc_disk_obj *objs, size_t n, mc_status st)
{
	for (size_t j = 0; j < n; j++)
		if (objs[j].status == MC_INPROGRESS)
			objs[j].status = st;
}

mc_status mc_disk_store_append(struct mc_disk_store *ds, struct mc_disk_obj *objs, size_t n,
			       struct mc_disk_keys *done_out, struct mc_disk_keys *evicted_out)
{
	mc_status first = MC_OK;

	if (!ds || (!objs && n))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store append: no objects");
	pthread_mutex_lock(&ds->write_mu);
	for (size_t i = 0; i < n; i++) {
		struct mc_disk_obj *o = &objs[i];
		struct pend *p;
		mc_status st;
		if (!obj_ok(o)) {
			if (first == MC_OK)
				first = o->status;
			continue;
		}
		if (ds->npend && ds->pend_bytes + o->len > ds->size_limit) {
			st = flush_locked(ds, done_out, evicted_out);
			settle(objs, i, st);
			if (st != MC_OK && first == MC_OK)
				first = st;
		}
		p = &ds->pend[ds->npend];
		p->key = mc_malloc(o->key_len + 1);
		p->data = pend_data_alloc(ds, o->len, &p->own);
		if (!p->key || !p->data) {
			mc_free(p->key);
			pend_data_free(p);
			o->status = mc_set_error(MC_ERR_NOMEM, "disk store append: no memory");
			if (first == MC_OK)
				first = o->status;
			continue;
		}
		memcpy(p->key, o->key, o->key_len);
		p->key[o->key_len] = '\0';
		p->key_len = o->key_len;
		if (o->len)
			memcpy(p->data, o->data, o->len);
		p->len = o->len;
		ds->npend++;
		ds->pend_bytes += o->len;
		o->status = MC_INPROGRESS;
		if (ds->npend >= ds->keys_limit || ds->pend_bytes >= ds->size_limit) {
			st = flush_locked(ds, done_out, evicted_out);
			settle(objs, i + 1, st);
			if (st != MC_OK && first == MC_OK)
				first = st;
		}
	}
	pthread_mutex_unlock(&ds->write_mu);
	return first;
}

mc_status mc_disk_store_flush(struct mc_disk_store *ds, struct mc_disk_keys *done_out,
			      struct mc_disk_keys *evicted_out)
{
	mc_status st;
	pthread_mutex_lock(&ds->write_mu);
	st = flush_locked(ds, done_out, evicted_out);
	pthread_mutex_unlock(&ds->write_mu);
	return st;
}

size_t mc_disk_store_pending(struct mc_disk_store *ds)
{
	size_t n;
	pthread_mutex_lock(&ds->write_mu);
	n = ds->npend;
	pthread_mutex_unlock(&ds->write_mu);
	return n;
}

mc_status mc_disk_store_list(struct mc_disk_store *ds, struct mc_disk_keys *out)
{
	uint64_t nobj;
	size_t want;
	mc_status st = MC_OK;

	lock(ds);
	nobj = ds->objects;
	want = out->n + nobj;
	if (want > out->cap) {
		struct mc_disk_key *v = mc_realloc(out->v, want * sizeof(*v));
		if (v) {
			out->v = v;
			out->cap = want;
		}
	}
	for (struct bucket *b = ds->head.next; b != &ds->head; b = b->next)
		for (uint32_t i = 0; i < b->meta.n; i++) {
			const struct mc_bucket_entry *e = &b->meta.entries[i];
			size_t before = out->n;
			if (!b->live[i])
				continue;
			keys_push(out, e->key, e->key_len, MC_OK, e->data_len);
			if (out->n == before)
				st = MC_ERR_NOMEM;
		}
	unlock(ds);
	if (st != MC_OK)
		return mc_set_error(st, "disk store list: no memory for %" PRIu64 " keys", nobj);
	return MC_OK;
}

/* ---- reads -------------------------------------------------------------------------------- */

bool mc_disk_store_contains(struct mc_disk_store *ds, const char *key, size_t key_len,
			    uint64_t *len_out)
{
	struct slot *s;
	if (!key_ok(key, key_len))
		return false;
	lock(ds);
	s = *idx_find(ds, key, key_len, XXH3_64bits(key, key_len));
	if (s && len_out)
		*len_out = s->b->meta.entries[s->idx].data_len;
	unlock(ds);
	return s != NULL;
}

mc_status mc_disk_store_read_begin(struct mc_disk_store *ds, const char *key, size_t key_len,
				   struct mc_disk_read *rd)
{
	struct slot *s;
	memset(rd, 0, sizeof(*rd));
	if (!key_ok(key, key_len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store read: bad key");
	lock(ds);
	s = *idx_find(ds, key, key_len, XXH3_64bits(key, key_len));
	if (s) {
		s->b->refs++;
		rd->bucket = s->b;
		rd->entry = s->idx;
		rd->len = s->b->meta.entries[s->idx].data_len;
	}
	unlock(ds);
	if (!s)
		return mc_set_error(MC_ERR_OBJECT_NOT_FOUND, "disk store: no object %.*s",
				    (int)(key_len > 64 ? 64 : key_len), key);
	return MC_OK;
}

/* A read of entry i of b is over with st: the counters, the lru tick, and
 * a record failing its checksum leaves the index for good. */
static void read_done_locked(struct mc_disk_store *ds, struct bucket *b, uint32_t i, mc_status st,
			     struct work *w)
{
	b->last_read = ++ds->tick;
	ds->st.reads++;
	if (st == MC_OK)
		ds->st.read_bytes += b->meta.entries[i].data_len;
	if (st == MC_ERR_CHECKSUM_MISMATCH) {
		ds->st.checksum_failures++;
		mc_error("bucket %s: a record of %s failed its checksum; dropping the key", b->id,
			 b->meta.entries[i].key);
		idx_drop_entry(ds, b, i);
		kill_locked(ds, b, i, w);
	}
}

static int open_data(struct mc_disk_store *ds, const struct bucket *b, mc_status *st)
{
	int fd = ds->be->open(ds->io, ds->dirfd, b->id, st);
	if (fd < 0 && *st == MC_ERR_FILE_NOT_FOUND)
		*st = mc_set_error(MC_ERR_FILE_READ_FAIL, "bucket %s: its data file is gone",
				   b->id);
	return fd;
}

mc_status mc_disk_store_read_into(struct mc_disk_store *ds, struct mc_disk_read *rd, void *dst,
				  uint64_t cap)
{
	struct bucket *b = rd->bucket;
	struct work w;
	mc_status st;
	int fd = open_data(ds, b, &st);

	if (fd >= 0) {
		st = mc_bucket_read(ds->io, fd, &b->meta.entries[rd->entry], dst, cap);
		close(fd);
	}
	work_init(&w, st == MC_ERR_CHECKSUM_MISMATCH ? 1 : 0);
	lock(ds);
	read_done_locked(ds, b, rd->entry, st, &w);
	unlock(ds);
	work_finish(ds, &w);
	return st;
}

void mc_disk_store_read_end(struct mc_disk_store *ds, struct mc_disk_read *rd)
{
	struct work w;
	if (!rd->bucket)
		return;
	work_init(&w, 0);
	lock(ds);
	unref_locked(rd->bucket, &w);
	unlock(ds);
	reap(ds, w.reap);
	rd->bucket = NULL;
}

mc_status mc_disk_store_get(struct mc_disk_store *ds, const char *key, size_t key_len, void *dst,
			    uint64_t cap, uint64_t *len_out)
{
	struct mc_disk_read rd;
	mc_status st = mc_disk_store_read_begin(ds, key, key_len, &rd);
	if (st != MC_OK)
		return st;
	if (len_out)
		*len_out = rd.len;
	st = mc_disk_store_read_into(ds, &rd, dst, cap);
	mc_disk_store_read_end(ds, &rd);
	return st;
}

/*
 * Every key pinned under one lock, each bucket's data file opened once, all
 * the records read in one batch of I/O (store/bucket.h), then the
 * accounting and the unpinning under one lock again.
 */
mc_status mc_disk_store_get_batch(struct mc_disk_store *ds, struct mc_disk_get *gets, size_t n)
{
	struct mc_bucket_read_req *req = mc_calloc(n + 1, sizeof(*req));
	struct mc_disk_read *rd = mc_calloc(n + 1, sizeof(*rd));
	size_t *which = mc_calloc(n + 1, sizeof(*which));
	int *fds = mc_calloc(n + 1, sizeof(*fds));
	struct bucket **fb = mc_calloc(n + 1, sizeof(*fb));
	size_t nreq = 0, nfd = 0;
	mc_status first = MC_OK;
	struct work w;

	if (!req || !rd || !which || !fds || !fb || work_init(&w, n) != MC_OK) {
		mc_free(req);
		mc_free(rd);
		mc_free(which);
		mc_free(fds);
		mc_free(fb);
		for (size_t i = 0; i < n; i++)
			gets[i].status = MC_ERR_NOMEM;
		return mc_set_error(MC_ERR_NOMEM, "disk store get: no memory for %zu keys", n);
	}
	for (size_t i = 0; i < n; i++) {
		struct mc_disk_get *g = &gets[i];
		struct bucket *b;
		size_t f;
		g->len = 0;
		g->status = mc_disk_store_read_begin(ds, g->key, g->key_len, &rd[i]);
		if (g->status != MC_OK)
			continue;
		g->len = rd[i].len;
		b = rd[i].bucket;
		for (f = 0; f < nfd && fb[f] != b; f++)
			;
		if (f == nfd) {
			fb[nfd] = b;
			fds[nfd++] = open_data(ds, b, &g->status);
		}
		if (fds[f] < 0) {
			if (g->status == MC_OK)
				g->status = MC_ERR_FILE_READ_FAIL;
			continue;
		}
		req[nreq] = (struct mc_bucket_read_req){fds[f], &b->meta.entries[rd[i].entry],
							g->dst, g->cap, MC_OK};
		which[nreq++] = i;
	}
	if (nreq)
		mc_bucket_read_batch(ds->io, req, nreq);
	for (size_t f = 0; f < nfd; f++)
		if (fds[f] >= 0)
			close(fds[f]);
	lock(ds);
	for (size_t k = 0; k < nreq; k++) {
		struct mc_disk_read *r = &rd[which[k]];
		gets[which[k]].status = req[k].status;
		read_done_locked(ds, r->bucket, r->entry, req[k].status, &w);
	}
	for (size_t i = 0; i < n; i++)
		if (rd[i].bucket)
			unref_locked(rd[i].bucket, &w);
	unlock(ds);
	work_finish(ds, &w);
	for (size_t i = 0; i < n; i++)
		if (gets[i].status != MC_OK && first == MC_OK)
			first = gets[i].status;
	mc_free(req);
	mc_free(rd);
	mc_free(which);
	mc_free(fds);
	mc_free(fb);
	return first;
}

/* ---- removal ------------------------------------------------------------------------------ */

mc_status mc_disk_store_remove(struct mc_disk_store *ds, const char *key, size_t key_len)
{
	bool pending = false;
	struct slot **pp, *s;
	struct work w;
	mc_status st;

	if (!key_ok(key, key_len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store remove: bad key");
	st = work_init(&w, 1);
	if (st != MC_OK)
		return st;
	pthread_mutex_lock(&ds->write_mu);
	for (size_t i = 0; i < ds->npend;) {
		struct pend *p = &ds->pend[i];
		if (p->key_len == key_len && memcmp(p->key, key, key_len) == 0) {
			ds->pend_bytes -= p->len;
			mc_free(p->key);
			pend_data_free(p);
			memmove(p, p + 1, (ds->npend - i - 1) * sizeof(*p));
			ds->npend--;
			pending = true;
		} else {
			i++;
		}
	}
	lock(ds);
	pp = idx_find(ds, key, key_len, XXH3_64bits(key, key_len));
	if ((s = *pp) != NULL) {
		struct bucket *b = s->b;
		uint32_t i = s->idx;
		*pp = s->next;
		mc_free(s);
		ds->nslots--;
		kill_locked(ds, b, i, &w);
	}
	unlock(ds);
	work_finish(ds, &w);
	pthread_mutex_unlock(&ds->write_mu);
	if (!s && !pending)
		return mc_set_error(MC_ERR_OBJECT_NOT_FOUND, "disk store: no object %.*s",
				    (int)(key_len > 64 ? 64 : key_len), key);
	return MC_OK;
}

mc_status mc_disk_store_remove_all(struct mc_disk_store *ds, uint64_t *removed_out)
{
	struct work w;
	uint64_t n;

	work_init(&w, 0);
	pthread_mutex_lock(&ds->write_mu);
	pend_clear(ds);
	lock(ds);
	n = ds->objects;
	for (size_t i = 0; i <= ds->mask; i++) {
		struct slot *s = ds->tab[i], *next;
		for (; s; s = next) {
			next = s->next;
			mc_free(s);
		}
		ds->tab[i] = NULL;
	}
	ds->nslots = 0;
	while (ds->head.next != &ds->head) {
		struct bucket *b = ds->head.next;
		memset(b->live, 0, b->meta.n);
		b->nlive = 0;
		detach_locked(ds, b, &w);
	}
	ds->objects = 0;
	unlock(ds);
	work_finish(ds, &w);
	pthread_mutex_unlock(&ds->write_mu);
	if (removed_out)
		*removed_out = n;
	return MC_OK;
}

/* ---- stats -------------------------------------------------------------------------------- */

void mc_disk_store_stats(struct mc_disk_store *ds, struct mc_disk_store_stats *out)
{
	lock(ds);
	*out = ds->st;
	out->logical_bytes = ds->logical;
	out->physical_bytes = ds->physical;
	out->cap_bytes = ds->cap;
	out->objects = ds->objects;
	out->buckets = ds->nbuckets;
	unlock(ds);
	{
		struct mc_disk_io_stats io;
		mc_disk_io_stats(ds->io, &io);
		out->direct = mc_disk_io_direct(ds->io);
		out->direct_ops = io.direct_ops;
		out->direct_bytes = io.direct_bytes;
		out->uring = mc_disk_io_uring(ds->io);
		out->fixed = mc_disk_io_fixed(ds->io);
		out->fixed_ops = io.fixed_ops;
		out->fixed_bytes = io.fixed_bytes;
	}
}

mc_status mc_disk_store_register_staging(struct mc_disk_store *ds, void *buf, size_t len)
{
	mc_status st = mc_disk_io_register_fixed(ds->io, buf, len);
	if (st == MC_OK)
		mc_info("offload directory %s: staging buffer of %zu MiB registered with io_uring",
			ds->path, len >> 20);
	return st;
}

/* ---- open: the directory, its lock, the rescan -------------------------------------------- */

/* mkdir -p */
static int make_dirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);
	if (n >= sizeof(buf)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(buf, path, n + 1);
	for (size_t i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return -1;
		buf[i] = i < n ? '/' : '\0';
	}
	return 0;
}

static mc_status open_dir(struct mc_disk_store *ds, const char *path)
{
	struct stat sb;
	int fd;

	if (stat(path, &sb) != 0) {
		if (errno != ENOENT || make_dirs(path) != 0)
			return mc_set_error(MC_ERR_FILE_OPEN_FAIL,
					    "offload directory %s: cannot create it: %s", path,
					    strerror(errno));
	} else if (!S_ISDIR(sb.st_mode)) {
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "offload directory %s: not a directory",
				    path);
	}
	ds->dirfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ds->dirfd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "offload directory %s: %s", path,
				    strerror(errno));
	/* writable for real (root passes access checks that the file system refuses) */
	fd = openat(ds->dirfd, LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "offload directory %s: not writable: %s",
				    path, strerror(errno));
	ds->lockfd = fd;
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		char pid[32] = "";
		ssize_t r = pread(fd, pid, sizeof(pid) - 1, 0);
		pid[r > 0 ? r : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		return mc_set_error(MC_ERR_FILE_LOCK_FAIL,
				    "offload directory %s is in use by another process (pid %s); "
				    "give each process its own directory",
				    path, pid[0] ? pid : "unknown");
	}
	if (ftruncate(fd, 0) == 0) {
		char pid[32];
		int len = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
		if (pwrite(fd, pid, (size_t)len, 0) != len)
			mc_debug("offload lock file: cannot record the pid");
	}
	return MC_OK;
}

/* The file-per-key backend keeps its files under <path>/file_per_key_dir;
 * the lock file stays in <path>. */
static mc_status open_fpk_dir(struct mc_disk_store *ds, const char *path, const char *sub)
{
	int fd;
	if (!sub || !sub[0])
		sub = MC_FPK_DIR_DEFAULT;
	if (sub[0] == '.' || strchr(sub, '/'))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "MOONCAKE_OFFLOAD_FSDIR=%s: not one directory name", sub);
	if (mkdirat(ds->dirfd, sub, 0755) != 0 && errno != EEXIST)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "offload directory %s/%s: %s", path, sub,
				    strerror(errno));
	fd = openat(ds->dirfd, sub, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return mc_set_error(MC_ERR_FILE_OPEN_FAIL, "offload directory %s/%s: %s", path, sub,
				    strerror(errno));
	close(ds->dirfd);
	ds->dirfd = fd;
	return MC_OK;
}

static void tombs_load(struct mc_disk_store *ds, struct bucket *b)
{
	char name[MC_BUCKET_ID_MAX + 16];
	uint8_t rec[TOMB_SIZE];
	uint64_t pos = 0;
	int fd;

	file_name(name, sizeof(name), b->id, ".dead");
	fd = openat(ds->dirfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	while (pread(fd, rec, TOMB_SIZE, (off_t)pos) == TOMB_SIZE) {
		uint64_t off = 0;
		size_t lo = 0, hi = b->meta.n;
		pos += TOMB_SIZE;
		if (mc_disk_tomb_decode(rec, TOMB_SIZE, &off) != MC_OK) {
			mc_warn("bucket %s: %s at %" PRIu64 "; skipped", b->id, mc_last_error(),
				pos - TOMB_SIZE);
			continue;
		}
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (b->meta.entries[mid].offset < off)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < b->meta.n && b->meta.entries[lo].offset == off && b->live[lo]) {
			b->live[lo] = 0;
			b->nlive--;
		}
	}
	close(fd);
}

struct scan_ctx {
	struct mc_disk_store *ds;
	struct work w;
	size_t tomb_room;
};

static mc_status meta_copy(const struct mc_bucket_meta *m, struct mc_bucket_meta *out)
{
	out->bucket_bytes = m->bucket_bytes;
	out->n = 0;
	out->entries = mc_calloc(m->n ? m->n : 1, sizeof(*out->entries));
	if (!out->entries)
		return MC_ERR_NOMEM;
	for (uint32_t i = 0; i < m->n; i++) {
		out->entries[i] = m->entries[i];
		out->entries[i].key = mc_malloc(m->entries[i].key_len + 1);
		if (!out->entries[i].key)
			return MC_ERR_NOMEM;
		memcpy(out->entries[i].key, m->entries[i].key, m->entries[i].key_len + 1);
		out->n++;
	}
	return MC_OK;
}

static mc_status scan_cb(void *arg, const char *id, const struct mc_bucket_meta *m)
{
	struct scan_ctx *c = arg;
	struct mc_disk_store *ds = c->ds;
	struct bucket *b = mc_calloc(1, sizeof(*b));
	uint64_t ms;
	uint32_t seq;

	if (!b || meta_copy(m, &b->meta) != MC_OK || !(b->live = mc_malloc(m->n ? m->n : 1))) {
		if (b)
			bucket_free(b);
		return mc_set_error(MC_ERR_NOMEM, "offload rescan: no memory");
	}
	snprintf(b->id, sizeof(b->id), "%s", id);
	memset(b->live, 1, m->n);
	b->nlive = m->n;
	if (ds->be->indexed)
		tombs_load(ds, b);
	bucket_sizes(ds, b);
	if (sscanf(id, "%" SCNu64 "-%" SCNu32, &ms, &seq) == 2 &&
	    (ms > ds->last_ms || (ms == ds->last_ms && seq > ds->seq))) {
		ds->last_ms = ms;
		ds->seq = seq;
	}
	if (b->nlive == 0) {
		mc_info("bucket %s: every key is dead; deleting it", id);
		reap_push(&c->w, b);
		return MC_OK;
	}
	/* a replaced key's tombstone may be missing (a crash before it was
	 * written): room to write it now */
	if (c->w.nt + b->nlive > c->w.cap) {
		size_t cap = (c->w.cap + b->nlive) * 2;
		struct tomb *t = mc_realloc(c->w.t, cap * sizeof(*t));
		if (t) {
			c->w.t = t;
			c->w.cap = cap;
		}
	}
	insert_locked(ds, b, &c->w);
	return MC_OK;
}

/* <id>.dead files whose bucket is gone (a crash while deleting it). */
static void drop_stray_tombs(struct mc_disk_store *ds)
{
	int fd = dup(ds->dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d); /* the descriptor's offset is shared with the scan's */
	while ((de = readdir(d)) != NULL) {
		size_t n = strlen(de->d_name);
		char name[MC_BUCKET_ID_MAX + 16];
		struct stat sb;
		if (n <= 5 || n - 5 >= MC_BUCKET_ID_MAX || strcmp(de->d_name + n - 5, ".dead") != 0)
			continue;
		snprintf(name, sizeof(name), "%.*s.meta", (int)(n - 5), de->d_name);
		if (fstatat(ds->dirfd, name, &sb, 0) != 0 && errno == ENOENT) {
			mc_info("%s: tombstones of a deleted bucket; deleting them", de->d_name);
			unlinkat(ds->dirfd, de->d_name, 0);
		}
	}
	closedir(d);
}

static mc_status check_cfg(const struct mc_disk_store_config *cfg, struct mc_disk_store *ds)
{
	const char *be = cfg->backend ? cfg->backend : BACKEND_OK;
	const char *pol = cfg->eviction_policy ? cfg->eviction_policy : "fifo";

	if (!cfg->path || !cfg->path[0])
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"disk store: no directory (MOONCAKE_OFFLOAD_FILE_STORAGE_PATH)");
	if (strcmp(be, mc_disk_backend_bucket.name) == 0)
		ds->be = &mc_disk_backend_bucket;
	else if (strcmp(be, mc_disk_backend_fpk.name) == 0)
		ds->be = &mc_disk_backend_fpk;
	else if (strcmp(be, "offset_allocator_storage_backend") == 0)
		return mc_set_error(MC_ERR_NOT_SUPPORTED,
				    "MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=%s: "
				    "not yet implemented (use " BACKEND_OK
				    " or file_per_key_storage_backend)",
				    be);
	else
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR=%s: unknown backend", be);
	ds->no_evict_why = "the eviction policy is none";
	if (ds->be == &mc_disk_backend_fpk && !cfg->enable_eviction) {
		ds->policy = MC_DISK_EVICT_NONE; /* upstream's switch of that backend */
		ds->no_evict_why = "eviction is off (MOONCAKE_OFFLOAD_ENABLE_EVICTION=false)";
	} else if (strcmp(pol, "none") == 0)
		ds->policy = MC_DISK_EVICT_NONE;
	else if (strcmp(pol, "fifo") == 0)
		ds->policy = MC_DISK_EVICT_FIFO;
	else if (strcmp(pol, "lru") == 0)
		ds->policy = MC_DISK_EVICT_LRU;
	else
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY=%s: not none, fifo or lru", pol);
	if (cfg->bucket_keys_limit < 1 || cfg->bucket_keys_limit > MC_BUCKET_ENTRIES_MAX ||
	    cfg->bucket_size_limit == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store: bad bucket limits");
	if (!(cfg->watermark_low > 0 && cfg->watermark_low <= cfg->watermark_high &&
	      cfg->watermark_high <= 1))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "disk store: watermarks %.2f/%.2f not 0 < low <= high <= 1",
				    cfg->watermark_low, cfg->watermark_high);
	ds->size_limit = cfg->bucket_size_limit;
	ds->keys_limit = (uint64_t)cfg->bucket_keys_limit;
	if (ds->keys_limit > ds->be->keys_max)
		ds->keys_limit = ds->be->keys_max; /* file per key: one object a file */
	ds->phys_cap = cfg->max_physical_bytes;
	ds->watermark = cfg->watermark_eviction;
	ds->high = cfg->watermark_high;
	ds->low = cfg->watermark_low;
	return MC_OK;
}

mc_status mc_disk_store_open(const struct mc_disk_store_config *cfg, struct mc_disk_store **out)
{
	struct mc_disk_store *ds;
	struct mc_disk_io_params iop = {0};
	struct mc_bucket_scan_stats sst;
	struct scan_ctx c;
	struct statvfs vfs;
	uint64_t t0;
	mc_status st;

	*out = NULL;
	if (!cfg)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "disk store: no configuration");
	ds = mc_calloc(1, sizeof(*ds));
	if (!ds)
		return mc_set_error(MC_ERR_NOMEM, "disk store: no memory");
	ds->dirfd = ds->lockfd = -1;
	ds->head.next = ds->head.prev = &ds->head;
	pthread_mutex_init(&ds->mu, NULL);
	pthread_mutex_init(&ds->write_mu, NULL);
	st = check_cfg(cfg, ds);
	if (st != MC_OK)
		goto fail;
	ds->path = mc_strdup(cfg->path);
	ds->tab = mc_calloc(IDX_START, sizeof(*ds->tab));
	ds->mask = IDX_START - 1;
	ds->pend = mc_calloc(ds->keys_limit, sizeof(*ds->pend));
	/* a full group, each copy rounded up to a block; mapped at first use */
	ds->arena_cap = ds->size_limit + ds->keys_limit * MC_BUCKET_ALIGN;
	if (ds->arena_cap > ARENA_MAX)
		ds->arena_cap = ARENA_MAX;
	if (!ds->path || !ds->tab || !ds->pend) {
		st = mc_set_error(MC_ERR_NOMEM, "disk store: no memory");
		goto fail;
	}
	st = open_dir(ds, cfg->path);
	if (st == MC_OK && ds->be == &mc_disk_backend_fpk)
		st = open_fpk_dir(ds, cfg->path, cfg->fsdir);
	if (st != MC_OK)
		goto fail;
	iop.use_uring = cfg->use_uring;
	iop.direct = cfg->direct_io && mc_disk_dir_direct(ds->dirfd);
	st = mc_disk_io_new(&iop, &ds->io);
	if (st != MC_OK)
		goto fail;
	ds->cap = cfg->max_total_size;
	if (ds->cap == 0) {
		if (fstatvfs(ds->dirfd, &vfs) != 0) {
			st = mc_set_error(MC_ERR_FILE_OPEN_FAIL,
					  "offload directory %s: statvfs: %s", cfg->path,
					  strerror(errno));
			goto fail;
		}
		ds->cap = (uint64_t)((double)vfs.f_blocks * (double)vfs.f_frsize * 0.9);
	}

	memset(&c, 0, sizeof(c));
	c.ds = ds;
	t0 = mc_now_us();
	st = ds->be->scan(ds->dirfd, scan_cb, &c, &sst);
	work_finish(ds, &c.w);
	if (st != MC_OK)
		goto fail;
	if (ds->be->indexed)
		drop_stray_tombs(ds);
	ds->st.rescan_us = mc_now_us() - t0;
	ds->st.rescan_objects = ds->objects;
	mc_info("offload directory %s: %" PRIu64 " objects in %" PRIu64 " buckets rescanned in "
		"%.1f ms (%.0f objects/s; %u orphans, %u dropped), %" PRIu64 " of %" PRIu64
		" bytes used, eviction %s, %s, %s",
		cfg->path, ds->objects, ds->nbuckets, (double)ds->st.rescan_us / 1e3,
		ds->st.rescan_us ? (double)ds->objects * 1e6 / (double)ds->st.rescan_us : 0.0,
		sst.orphans, sst.dropped, ds->logical, ds->cap,
		ds->policy == MC_DISK_EVICT_NONE   ? "none"
		: ds->policy == MC_DISK_EVICT_FIFO ? "fifo"
						   : "lru",
		mc_disk_io_uring(ds->io) ? "io_uring" : "pread/pwrite",
		mc_disk_io_direct(ds->io) ? "O_DIRECT" : "buffered");
	*out = ds;
	return MC_OK;
fail:
	mc_disk_store_close(ds);
	return st;
}

void mc_disk_store_close(struct mc_disk_store *ds)
{
	if (!ds)
		return;
	if (ds->pend && ds->npend) {
		mc_warn("offload directory %s: closing with %zu objects pending, never written",
			ds->path, ds->npend);
		pend_clear(ds);
	}
	while (ds->head.next != &ds->head) {
		struct bucket *b = ds->head.next;
		ds->head.next = b->next;
		bucket_free(b);
	}
	if (ds->tab) {
		for (size_t i = 0; i <= ds->mask; i++) {
			struct slot *s = ds->tab[i], *next;
			for (; s; s = next) {
				next = s->next;
				mc_free(s);
			}
		}
	}
	mc_free(ds->tab);
	mc_free(ds->pend);
	if (ds->arena)
		munmap(ds->arena, ds->arena_cap);
	mc_disk_io_free(ds->io);
	if (ds->lockfd >= 0)
		close(ds->lockfd); /* releases the flock */
	if (ds->dirfd >= 0)
		close(ds->dirfd);
	mc_free(ds->path);
	pthread_mutex_destroy(&ds->mu);
	pthread_mutex_destroy(&ds->write_mu);
	mc_free(ds);
}
