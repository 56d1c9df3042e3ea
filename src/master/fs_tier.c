/*
 * master/fs_tier.c - the master's side of the legacy shared-filesystem
 * DISK tier (spec store.md 5.1, --root_fs_dir): every object written
 * gets a DISK replica, a file under <root_fs_dir>/<cluster_id> that its
 * writer writes after the memory replicas (store/fsdir.h has the layout
 * and the file format) and any client that sees the directory reads.
 *
 * A DISK replica is an ordinary replica on one segment slot of its own
 * (state MC_SEG_DISK, no client, no allocator, never unmounted), so the
 * code that keeps LOCAL_DISK replicas through eviction and drops them on
 * remove treats it alike; its addr is the replica id shifted left once,
 * with bit 0 set once the file is written.  The id is the PutStart time
 * (ms) above a 16-bit sequence number: unique across master restarts, and
 * what the file's header must name for a reader to take it.
 *
 * The replica's life:
 *   - every PutStart/UpsertStart gives the object a fresh PROCESSING DISK
 *     replica (a rewrite gets a new id; the old file goes);
 *   - PutEnd(MEMORY or ALL) makes the object readable from memory, the
 *     DISK replica stays PROCESSING, unlisted, and keeps the memory copy
 *     from eviction (for put_start_release_timeout at most: a writer that
 *     never reports loses its DISK replica at the next eviction);
 *   - PutEnd(DISK) from the writer: COMPLETE, listed after the memory
 *     replicas; PutRevoke(DISK): dropped.  Both name the replica id
 *     (minor version 4), so the late report of an older write of the key
 *     (its file thread was behind a rewrite) is refused (INVALID_WRITE)
 *     instead of ending the newer write's replica;
 *   - whenever the master drops a DISK replica (remove in every form,
 *     RemoveAll, upsert, pre-emption) the file of that id is to be
 *     deleted: the path joins a list the daemon drains outside the lock
 *     (mc_master_fs_take), deleting the file only if it is that id's.
 *
 * Must never: list a DISK replica before its writer reported the file, or
 * delete a file another write of the same name put there.
 */
#define MC_LOG_MODULE "master"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "master/master_int.h"
#include "store/fsdir.h"

#define ARENA_BLOCK 65536u

mc_status mc_master_fs_init(struct mc_master *m)
{
	const char *d = m->cfg.fsdir;
	mc_status st;

	m->fs_seg = UINT32_MAX;
	if (!d || !*d)
		return MC_OK;
	m->fsdir = mc_strdup(d);
	if (!m->fsdir)
		return MC_ERR_NOMEM;
	m->fsdir_len = strlen(d);
	while (m->fsdir_len > 1 && m->fsdir[m->fsdir_len - 1] == '/')
		m->fsdir[--m->fsdir_len] = '\0';
	m->cfg.fsdir = m->fsdir;
	st = mc_master_seg_mount_disk(m, MC_MASTER_NO_CLIENT, "", 0, &m->fs_seg);
	if (st != MC_OK)
		m->fs_seg = UINT32_MAX;
	return st;
}

const char *mc_master_fsdir(const struct mc_master *m)
{
	return m->fsdir ? m->fsdir : "";
}

void mc_master_fs_free(struct mc_master *m)
{
	struct mc_master_fs_gone *g;
	uint32_t n = mc_master_fs_take(m, &g);

	mc_master_fs_gone_free(g, n);
	for (uint32_t i = 0; i < m->nfs_blocks; i++)
		mc_free(m->fs_blocks[i]);
	mc_free(m->fs_blocks);
	mc_free(m->fs_block_size);
	mc_free(m->fsdir);
}

/* ---- the paths handed out in descriptors ---- */

void mc_master_fs_reset(struct mc_master *m)
{
	for (uint32_t i = 1; i < m->nfs_blocks; i++)
		mc_free(m->fs_blocks[i]);
	if (m->nfs_blocks > 1)
		m->nfs_blocks = 1;
	m->fs_pos = 0;
}

/* n bytes that stay put until the next mc_master_fs_reset, or NULL. */
static char *arena_get(struct mc_master *m, size_t n)
{
	size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;
	char *b;

	if (m->nfs_blocks && m->fs_pos + n <= m->fs_block_size[m->nfs_blocks - 1]) {
		b = m->fs_blocks[m->nfs_blocks - 1] + m->fs_pos;
		m->fs_pos += n;
		return b;
	}
	if (!mc_master_grow((void **)&m->fs_blocks, &m->fs_blocks_cap, m->nfs_blocks + 1,
			    sizeof(*m->fs_blocks)) ||
	    !mc_master_grow((void **)&m->fs_block_size, &m->fs_sizes_cap, m->nfs_blocks + 1,
			    sizeof(*m->fs_block_size)))
		return NULL;
	b = mc_malloc(size);
	if (!b)
		return NULL;
	m->fs_blocks[m->nfs_blocks] = b;
	m->fs_block_size[m->nfs_blocks++] = size;
	m->fs_pos = n;
	return b;
}

/* o's path, malloc'ed (arena false) or in the arena; NULL without memory. */
static char *obj_path(struct mc_master *m, const struct mc_obj *o, bool arena, size_t *len_out)
{
	const char *t = o->tenant ? m->tenants[o->tenant] : "";
	size_t tlen = o->tenant ? m->tenant_lens[o->tenant] : 0;
	size_t n = mc_fsdir_path(NULL, 0, m->fsdir, m->fsdir_len, t, tlen, o->key, o->key_len);
	char *p = arena ? arena_get(m, n + 1) : mc_malloc(n + 1);

	if (!p)
		return NULL;
	mc_fsdir_path(p, n + 1, m->fsdir, m->fsdir_len, t, tlen, o->key, o->key_len);
	*len_out = n;
	return p;
}

bool mc_master_fs_fill(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r,
		       struct mc_store_replica *d)
{
	size_t len;
	char *p = obj_path(m, o, true, &len);

	if (!p)
		return false;
	d->id = r->addr >> 1;
	d->status = (r->addr & 1) ? MC_STORE_REPLICA_COMPLETE : MC_STORE_REPLICA_PROCESSING;
	d->type = MC_STORE_REPLICA_DISK;
	d->size = mc_obj_vsize(o); /* a DISK file holds no trailer */
	d->file_path.ptr = p;
	d->file_path.len = (uint32_t)len;
	return true;
}

/* ---- the replica's life ---- */

static struct mc_rep *fs_rep(struct mc_master *m, struct mc_obj *o)
{
	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep *r = mc_master_obj_rep(o, i);

		if (mc_master_rep_fs(m, r))
			return r;
	}
	return NULL;
}

static void drop_rep(struct mc_master *m, struct mc_obj *o, struct mc_rep *gone)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < o->nrep; i++) {
		struct mc_rep *r = mc_master_obj_rep(o, i);

		if (r != gone)
			*mc_master_obj_rep(o, n++) = *r;
	}
	o->nrep = (uint8_t)n;
}

void mc_master_fs_begin(struct mc_master *m, struct mc_obj *o, uint64_t now_ms)
{
	struct mc_rep *r;
	uint64_t id;

	if (m->fs_seg == UINT32_MAX)
		return;
	id = (now_ms << 16 | (m->fs_seq++ & 0xffff)) & (UINT64_MAX >> 1);
	r = fs_rep(m, o);
	if (r) {
		if (r->addr & 1)
			mc_master_fs_rep_gone(m, o, r); /* the old file: replaced */
		r->addr = id << 1;
		return;
	}
	if (o->nrep >= MC_MASTER_MAX_REPLICAS || !mc_master_obj_ext_fit(o, o->nrep + 1u)) {
		mc_warn("key '%.*s': no memory for its DISK replica; memory only", (int)o->key_len,
			o->key);
		return;
	}
	*mc_master_obj_rep(o, o->nrep++) =
		(struct mc_rep){id << 1, m->fs_seg, m->segs[m->fs_seg].gen};
}

bool mc_master_fs_pending(const struct mc_master *m, const struct mc_obj *o, uint64_t now_ms)
{
	if (m->fs_seg == UINT32_MAX)
		return false;
	for (uint32_t i = 0; i < o->nrep; i++) {
		const struct mc_rep *r = mc_master_obj_rep((struct mc_obj *)o, i);

		if (mc_master_rep_fs(m, r) && !(r->addr & 1))
			return now_ms < (r->addr >> 17) + m->cfg.put_start_release_timeout_ms;
	}
	return false;
}

uint32_t mc_master_fs_drop_pending(struct mc_master *m, struct mc_obj *o, bool quiet)
{
	struct mc_rep *r = m->fs_seg == UINT32_MAX ? NULL : fs_rep(m, o);

	if (r && !(r->addr & 1)) {
		if (!quiet)
			mc_warn("key '%.*s': its writer never reported the DISK file; dropped",
				(int)o->key_len, o->key);
		mc_master_fs_rep_gone(m, o, r);
		drop_rep(m, o, r);
	}
	return o->nrep;
}

void mc_master_fs_rep_gone(struct mc_master *m, const struct mc_obj *o, const struct mc_rep *r)
{
	struct mc_master_fs_gone *g;
	size_t len;

	if (!mc_master_grow((void **)&m->fs_gone, &m->fs_gone_cap, m->nfs_gone + 1,
			    sizeof(*m->fs_gone))) {
		mc_warn("key '%.*s': no memory to delete its DISK file", (int)o->key_len, o->key);
		return;
	}
	g = &m->fs_gone[m->nfs_gone];
	g->path = obj_path(m, o, false, &len);
	if (!g->path) {
		mc_warn("key '%.*s': no memory to delete its DISK file", (int)o->key_len, o->key);
		return;
	}
	g->replica_id = r->addr >> 1;
	g->written = r->addr & 1;
	m->nfs_gone++;
}

uint32_t mc_master_fs_take(struct mc_master *m, struct mc_master_fs_gone **out)
{
	uint32_t n = m->nfs_gone;

	*out = m->fs_gone;
	m->fs_gone = NULL;
	m->nfs_gone = m->fs_gone_cap = 0;
	return n;
}

void mc_master_fs_gone_free(struct mc_master_fs_gone *g, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		mc_free(g[i].path);
	mc_free(g);
}

mc_status mc_master_fs_end(struct mc_master *m, uint32_t client, struct mc_obj *o, bool end,
			   const struct mc_proto_opt_u64 *id, char *err, size_t err_len)
{
	struct mc_rep *r;

	if (m->fs_seg == UINT32_MAX) {
		snprintf(err, err_len, "no DISK replicas: the master runs without --root_fs_dir");
		return MC_ERR_INVALID_WRITE;
	}
	if (mc_master_obj_writer(m, o) != client) {
		snprintf(err, err_len, "key '%.*s' was written by another client",
			 (int)(o->key_len < 80 ? o->key_len : 80), o->key);
		return MC_ERR_ILLEGAL_CLIENT;
	}
	r = fs_rep(m, o);
	if (!r || (o->flags & MC_OBJ_PROC) || (!end && (r->addr & 1))) {
		snprintf(err, err_len, "key '%.*s' has no DISK replica being written",
			 (int)(o->key_len < 80 ? o->key_len : 80), o->key);
		return MC_ERR_INVALID_WRITE;
	}
	if (id && id->present && id->value != r->addr >> 1) {
		/* a report of an older write: its file is not this replica's */
		snprintf(err, err_len,
			 "key '%.*s': DISK replica %" PRIu64
			 " is not the one being written (%" PRIu64 ")",
			 (int)(o->key_len < 80 ? o->key_len : 80), o->key, id->value, r->addr >> 1);
		return MC_ERR_INVALID_WRITE;
	}
	if (end) {
		r->addr |= 1; /* idempotent */
		return MC_OK;
	}
	mc_master_fs_rep_gone(m, o, r);
	drop_rep(m, o, r);
	if (o->nrep == 0)
		mc_master_obj_erase(m, o);
	return MC_OK;
}
