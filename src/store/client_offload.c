/*
 * store/client_offload.c - the owner's side of the SSD tier: a client
 * set up with enable_ssd_offload keeps disk copies of the objects in its
 * own segment that the master asks it to offload, tells the master what
 * it holds, and serves the copies to readers (offload_server.c).
 *
 * Set-up, from mc_store_setup: mc_store_offload_open, before the global
 * segment is registered and mounted, opens the disk store in the offload
 * directory (a directory that cannot be created, is not a directory, is
 * not writable or belongs to another process fails setup) and starts the
 * offload RPC server on this client's host, whose staging buffer is thus
 * registered with the engine before any reader can look at this client's
 * segment (a reader's cached descriptor always shows it);
 * mc_store_offload_start, once the segment is mounted, mounts the
 * local-disk segment with the server's endpoint
 * (MountLocalDiskSegment), report the capacity, and re-register every
 * object already on disk (NotifyOffloadSuccess, in batches).  A master
 * without --enable_offload answers UNABLE_OFFLOAD: logged, the tier is
 * closed, and the client goes on DRAM-only.
 *
 * The offload heartbeat thread (mc-offload-hb), every
 * MOONCAKE_OFFLOAD_HEARTBEAT_INTERVAL_SECONDS:
 *   - after the master forgot this client (the ping heartbeat saw
 *     NEED_REMOUNT, mc_store_offload_remount), mount and re-register
 *     again first;
 *   - OffloadObjectHeartbeat: delete what the master says (removes,
 *     remove_all); copy every offload item from this client's own
 *     segment (its address and size checked to lie inside the segment
 *     first) into the disk store's pending group, write it, and report
 *     each object's result (NotifyOffloadSuccess; a failure, a full disk
 *     included, is reported with its status and the DRAM copy stays);
 *     an object the master refuses to record is deleted from disk again;
 *   - keys the disk store evicted (to make room, or its watermark pass)
 *     go to the master (BatchEvictDiskReplica) right after; the store
 *     deletes a bucket's files only once no reader holds it, and a
 *     reader that asks for an evicted key meanwhile is answered
 *     OBJECT_NOT_FOUND, never stale bytes;
 *   - PromotionObjectHeartbeat (the master's --promotion_on_hit): each
 *     object the master wants back in DRAM is read from disk into the
 *     PROCESSING memory replica it allocated (straight in when the block
 *     is in this client's segment, else through the engine), then
 *     NotifyPromotion with each result;
 *   - ReportSsdCapacity.
 *
 * Keys on disk are mc_offload_disk_key(tenant, key) (offload_server.h).
 *
 * Threads: the heartbeat thread is the disk store's only writer; the
 * offload server's thread reads it; readers elsewhere reach it only
 * through the server.  hb_lock/ohb_cond guard the thread's sleep and the
 * remount flag, so close and a remount wake it at once.
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mooncake/te.h"
#include "store/client_int.h"
#include "store/disk_store.h"
#include "store/master_conn.h"
#include "store/offload_server.h"
#include "store/proto.h"
#include "te/engine.h" /* mc_te_submit_unchecked */

#define NOTIFY_BATCH 1000 /* objects per NotifyOffloadSuccess / BatchEvictDiskReplica */

/* ---- talking to the master --------------------------------------------------------------- */

/* A disk key back as (tenant, key); false (logged) for a foreign one. */
static bool split_key(const char *dk, size_t len, struct mc_proto_str *tenant,
		      struct mc_proto_str *key)
{
	const char *t, *k;
	size_t tl, kl;

	if (!mc_offload_disk_key_split(dk, len, &t, &tl, &k, &kl)) {
		mc_warn("disk key of %zu bytes is not a (tenant, key): skipped", len);
		return false;
	}
	*tenant = (struct mc_proto_str){t, (uint32_t)tl};
	*key = (struct mc_proto_str){k, (uint32_t)kl};
	return true;
}

/*
 * NotifyOffloadSuccess of keys (their status and size), in batches; a key
 * reported as on disk (MC_OK) that the master answers with an error is
 * removed from the disk store.  Returns the first call failure.
 */
static mc_status notify(struct mc_store *s, const struct mc_disk_keys *keys)
{
	struct mc_store_offload_result *items = mc_calloc(NOTIFY_BATCH, sizeof(*items));
	const struct mc_disk_key **src = mc_calloc(NOTIFY_BATCH, sizeof(*src));
	mc_status ret = MC_OK;
	size_t i = 0;

	if (!items || !src) {
		mc_free(items);
		mc_free(src);
		return MC_ERR_NOMEM;
	}
	while (i < keys->n) {
		struct mc_store_notify_offload_req req = {s->client_id, 0, items};
		struct mc_store_msg resp;
		mc_status rc;

		for (; i < keys->n && req.n_items < NOTIFY_BATCH; i++) {
			const struct mc_disk_key *k = &keys->v[i];
			struct mc_store_offload_result *it = &items[req.n_items];
			if (!split_key(k->key, k->key_len, &it->tenant, &it->key))
				continue;
			it->size = k->len;
			it->status = k->status;
			src[req.n_items++] = k;
		}
		if (!req.n_items)
			continue;
		rc = mc_master_conn_call(s->conn, MC_STORE_NOTIFY_OFFLOAD_SUCCESS, &req, &resp);
		if (rc != MC_OK) {
			mc_warn("NotifyOffloadSuccess of %u objects: %s", req.n_items,
				mc_last_error());
			if (ret == MC_OK)
				ret = rc;
			continue;
		}
		for (uint32_t j = 0; j < req.n_items && j < resp.body.batch_status_resp.n_items;
		     j++) {
			int32_t st = resp.body.batch_status_resp.statuses[j];
			if (st == MC_OK || src[j]->status != MC_OK)
				continue;
			mc_debug("master refused a disk copy (%s): deleting it",
				 mc_strerror((mc_status)st));
			mc_disk_store_remove(s->disk, src[j]->key, src[j]->key_len);
		}
		mc_store_msg_release(&resp);
	}
	mc_free(items);
	mc_free(src);
	return ret;
}

/* BatchEvictDiskReplica of the keys the disk store evicted. */
static void report_evicted(struct mc_store *s, const struct mc_disk_keys *keys)
{
	struct mc_store_tenant_key *items;
	size_t i = 0;

	if (!keys->n)
		return;
	items = mc_calloc(NOTIFY_BATCH, sizeof(*items));
	if (!items)
		return;
	while (i < keys->n) {
		struct mc_store_evict_disk_req req = {s->client_id, 0, items};
		struct mc_store_msg resp;
		for (; i < keys->n && req.n_items < NOTIFY_BATCH; i++) {
			const struct mc_disk_key *k = &keys->v[i];
			struct mc_store_tenant_key *it = &items[req.n_items];
			if (split_key(k->key, k->key_len, &it->tenant, &it->key))
				req.n_items++;
		}
		if (!req.n_items)
			continue;
		if (mc_master_conn_call(s->conn, MC_STORE_BATCH_EVICT_DISK_REPLICA, &req, &resp) ==
		    MC_OK)
			mc_store_msg_release(&resp);
		else
			mc_warn("BatchEvictDiskReplica of %u objects: %s", req.n_items,
				mc_last_error());
	}
	mc_free(items);
}

static void report_capacity(struct mc_store *s)
{
	struct mc_disk_store_stats st;
	struct mc_store_ssd_capacity_req req;
	struct mc_store_msg resp;

	mc_disk_store_stats(s->disk, &st);
	req = (struct mc_store_ssd_capacity_req){s->client_id, st.cap_bytes, st.logical_bytes};
	if (mc_master_conn_call(s->conn, MC_STORE_REPORT_SSD_CAPACITY, &req, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	else
		mc_debug("ReportSsdCapacity: %s", mc_last_error());
}

/* MountLocalDiskSegment, ReportSsdCapacity, and every disk object again. */
static mc_status mount_disk(struct mc_store *s)
{
	struct mc_store_mount_local_disk_req req = {
		s->client_id, true, mc_proto_str_c(mc_offload_server_endpoint(s->osrv))};
	struct mc_disk_keys all = {0};
	struct mc_store_msg resp;
	mc_status rc;

	rc = mc_master_conn_call(s->conn, MC_STORE_MOUNT_LOCAL_DISK_SEGMENT, &req, &resp);
	if (rc != MC_OK)
		return rc;
	mc_store_msg_release(&resp);
	s->disk_mounted = true;
	report_capacity(s);
	rc = mc_disk_store_list(s->disk, &all);
	if (rc == MC_OK) {
		for (size_t i = 0; i < all.n; i++)
			all.v[i].status = MC_OK;
		rc = notify(s, &all);
		if (all.n)
			mc_info("re-registered %zu objects on disk with the master", all.n);
	}
	mc_disk_keys_release(&all);
	return rc;
}

/* ---- one heartbeat ----------------------------------------------------------------------- */

/* [addr, addr + len) lies in this client's global segment. */
static bool in_segment(const struct mc_store *s, uint64_t addr, uint64_t len)
{
	uint64_t base = (uint64_t)(uintptr_t)s->seg;
	return s->seg && addr >= base && len <= s->seg_size && addr - base <= s->seg_size - len;
}

/*
 * An object written and evicted again within one call (a later group of
 * the same call needed its room) was never reported: it is reported as
 * failed, so the master keeps its DRAM copy and never lists a disk copy
 * that is gone, and it leaves the eviction report (the master has no disk
 * replica of it to drop).
 */
static void drop_evicted_in_call(struct mc_disk_keys *done, struct mc_disk_keys *evicted)
{
	size_t kept = 0;

	for (size_t e = 0; e < evicted->n; e++) {
		struct mc_disk_key *ev = &evicted->v[e];
		bool ours = false;
		for (size_t i = 0; i < done->n; i++) {
			struct mc_disk_key *d = &done->v[i];
			if (d->status == MC_OK && d->key_len == ev->key_len &&
			    memcmp(d->key, ev->key, ev->key_len) == 0) {
				d->status = mc_set_error(MC_ERR_FILE_WRITE_FAIL,
							 "evicted for a later object of the same "
							 "heartbeat");
				ours = true;
			}
		}
		if (ours)
			mc_free(ev->key);
		else
			evicted->v[kept++] = *ev;
	}
	evicted->n = kept;
}

/* Copies the offload items to disk and reports them. */
static void offload_items(struct mc_store *s, const struct mc_store_offload_heartbeat_resp *r)
{
	struct mc_disk_obj *objs = mc_calloc(r->n_offload ? r->n_offload : 1, sizeof(*objs));
	char *kbuf = NULL;
	size_t kcap = 0, kpos = 0, nobj = 0;
	struct mc_store_offload_result *bad =
		mc_calloc(r->n_offload ? r->n_offload : 1, sizeof(*bad));
	struct mc_disk_keys done = {0}, evicted = {0};
	uint32_t nbad = 0;
	mc_status rc;

	for (uint32_t i = 0; i < r->n_offload; i++)
		kcap += (size_t)r->offload[i].tenant.len + r->offload[i].key.len + 32;
	kbuf = mc_malloc(kcap ? kcap : 1);
	if (!objs || !kbuf || !bad)
		goto out;
	for (uint32_t i = 0; i < r->n_offload; i++) {
		const struct mc_store_offload_item *it = &r->offload[i];
		char *dk = kbuf + kpos;
		size_t kl = mc_offload_disk_key(it->tenant.ptr, it->tenant.len, it->key.ptr,
						it->key.len, dk, kcap - kpos);
		mc_status st = MC_OK;

		if (!kl)
			st = MC_ERR_INVALID_KEY;
		else if (!in_segment(s, it->address, it->size))
			st = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "offload item of %" PRIu64 " bytes at 0x%" PRIx64
					  " is not in this client's segment",
					  it->size, it->address);
		if (st != MC_OK) {
			/* reported as failed below: the master keeps the DRAM copy */
			mc_warn("offload of a %" PRIu64 "-byte object refused: %s", it->size,
				mc_last_error());
			bad[nbad++] =
				(struct mc_store_offload_result){it->tenant, it->key, it->size, st};
			continue;
		}
		kpos += kl;
		objs[nobj++] = (struct mc_disk_obj){.key = dk,
						    .key_len = kl,
						    .data = (const void *)(uintptr_t)it->address,
						    .len = it->size};
	}
	if (nobj) {
		rc = mc_disk_store_append(s->disk, objs, nobj, &done, &evicted);
		if (rc == MC_OK || mc_disk_store_pending(s->disk))
			rc = mc_disk_store_flush(s->disk, &done, &evicted);
		for (size_t i = 0; i < done.n; i++)
			if (done.v[i].status != MC_OK)
				mc_error("offload to %s failed: %s; the DRAM copy stays",
					 s->disk_path, mc_strerror(done.v[i].status));
		drop_evicted_in_call(&done, &evicted);
		report_evicted(s, &evicted);
		notify(s, &done);
	}
	if (nbad) {
		struct mc_store_notify_offload_req req = {s->client_id, nbad, bad};
		struct mc_store_msg resp;
		if (mc_master_conn_call(s->conn, MC_STORE_NOTIFY_OFFLOAD_SUCCESS, &req, &resp) ==
		    MC_OK)
			mc_store_msg_release(&resp);
	}
out:
	mc_disk_keys_release(&done);
	mc_disk_keys_release(&evicted);
	mc_free(objs);
	mc_free(kbuf);
	mc_free(bad);
}

/* Deletes the disk copies the master dropped. */
static void remove_items(struct mc_store *s, const struct mc_store_offload_heartbeat_resp *r)
{
	char dk[MC_STORE_KEY_MAX + 32];

	if (r->remove_all) {
		uint64_t n = 0;
		mc_disk_store_remove_all(s->disk, &n);
		mc_info("master asked to drop the whole disk store: %" PRIu64 " objects removed",
			n);
	}
	for (uint32_t i = 0; i < r->n_removes; i++) {
		const struct mc_store_tenant_key *k = &r->removes[i];
		size_t kl = mc_offload_disk_key(k->tenant.ptr, k->tenant.len, k->key.ptr,
						k->key.len, dk, sizeof(dk));
		if (kl)
			mc_disk_store_remove(s->disk, dk, kl);
	}
}

/* Writes one promoted object into the memory replica the master allocated:
 * straight from disk when the block is in this client's own segment, else
 * through a bounce buffer and the engine. */
static mc_status promote_one(struct mc_store *s, const struct mc_store_promotion_task *t)
{
	const struct mc_store_replica *r = &t->replica;
	char dk[MC_STORE_KEY_MAX + 32], name[256];
	size_t kl = mc_offload_disk_key(t->tenant.ptr, t->tenant.len, t->key.ptr, t->key.len, dk,
					sizeof(dk));
	struct mc_xfer_req x;
	mc_segment_id seg;
	uint64_t len = 0, tl = 0;
	char *tmp;
	mc_status rc;

	if (!kl)
		return MC_ERR_INVALID_KEY;
	if (r->type != MC_STORE_REPLICA_MEMORY || r->size < t->size ||
	    r->segment_name.len >= sizeof(name))
		return mc_set_error(MC_ERR_INVALID_REPLICA,
				    "promotion target is not a memory block");
	/* a block room for a chunk-sum trailer after the value (minor 10):
	 * the disk copy holds none, so the trailer of the bytes read goes
	 * there, and readers check it against the object's trailer hash */
	if (mc_store_trailer_fits(t->size) && r->size == t->size + mc_store_trailer_len(t->size))
		tl = mc_store_trailer_len(t->size);
	if (in_segment(s, r->address, t->size + tl)) {
		rc = mc_disk_store_get(s->disk, dk, kl, (void *)(uintptr_t)r->address, t->size,
				       &len);
		if (rc == MC_OK && len != t->size)
			rc = MC_ERR_INVALID_PARAMS;
		if (rc == MC_OK && tl)
			mc_store_trailer_build((const void *)(uintptr_t)r->address, t->size,
					       (void *)(uintptr_t)(r->address + t->size));
		return rc;
	}
	tmp = mc_malloc(t->size + tl ? t->size + tl : 1);
	if (!tmp)
		return MC_ERR_NOMEM;
	rc = mc_disk_store_get(s->disk, dk, kl, tmp, t->size, &len);
	if (rc == MC_OK && len != t->size)
		rc = MC_ERR_INVALID_PARAMS;
	if (rc == MC_OK && tl)
		mc_store_trailer_build(tmp, t->size, tmp + t->size);
	if (rc == MC_OK) {
		memcpy(name, r->segment_name.ptr, r->segment_name.len);
		name[r->segment_name.len] = '\0';
		rc = mc_te_open_segment(s->te, name, &seg);
	}
	if (rc == MC_OK && t->size) {
		x = (struct mc_xfer_req){.opcode = MC_OP_WRITE,
					 .source = tmp,
					 .target_id = seg,
					 .target_offset = r->address,
					 .length = t->size + tl};
		mc_batch_id bid;
		rc = mc_te_batch_new(s->te, 1, &bid);
		if (rc == MC_OK) {
			rc = mc_te_submit_unchecked(s->te, bid, &x, 1); /* tmp: not registered */
			/* no deadline: tmp must outlive the transfer, which ends
			 * (completes or fails with its peer) as the get paths' do */
			if (rc == MC_OK)
				rc = mc_te_batch_wait(s->te, bid, -1, NULL);
			mc_te_batch_free(s->te, bid);
		}
	}
	mc_free(tmp);
	return rc;
}

/* PromotionObjectHeartbeat: objects read from disk often enough go back to
 * DRAM (the master's --promotion_on_hit); a master that does not promote
 * answers NOT_SUPPORTED, and is not asked again until a remount. */
static void promotions(struct mc_store *s)
{
	struct mc_store_promotion_heartbeat_req req = {s->client_id, 0};
	struct mc_store_promotion_result *items;
	const struct mc_store_promotion_heartbeat_resp *r;
	struct mc_store_msg resp;
	mc_status rc;

	if (s->promotion_off)
		return;
	rc = mc_master_conn_call(s->conn, MC_STORE_PROMOTION_OBJECT_HEARTBEAT, &req, &resp);
	if (rc == MC_ERR_NOT_SUPPORTED) {
		s->promotion_off = true;
		return;
	}
	if (rc != MC_OK)
		return;
	r = &resp.body.promotion_heartbeat_resp;
	items = r->n_tasks ? mc_calloc(r->n_tasks, sizeof(*items)) : NULL;
	if (items) {
		struct mc_store_notify_promotion_req nreq = {s->client_id, r->n_tasks, items};
		struct mc_store_msg nresp;
		for (uint32_t i = 0; i < r->n_tasks; i++) {
			const struct mc_store_promotion_task *t = &r->tasks[i];
			mc_status st = promote_one(s, t);
			if (st != MC_OK)
				mc_info("promotion of a %" PRIu64 "-byte object failed: %s",
					t->size, mc_strerror(st));
			items[i] = (struct mc_store_promotion_result){t->tenant, t->key,
								      t->replica.id, st};
		}
		if (mc_master_conn_call(s->conn, MC_STORE_NOTIFY_PROMOTION, &nreq, &nresp) == MC_OK)
			mc_store_msg_release(&nresp);
		else
			mc_debug("NotifyPromotion: %s", mc_last_error());
		mc_free(items);
	}
	mc_store_msg_release(&resp);
}

static void offload_heartbeat_once(struct mc_store *s)
{
	struct mc_store_offload_heartbeat_req req = {s->client_id, true,
						     (uint32_t)s->offload_cfg.heartbeat_max_items};
	struct mc_disk_keys evicted = {0};
	struct mc_store_msg resp;
	mc_status rc;

	if (!s->disk_mounted || atomic_exchange(&s->disk_remount, false)) {
		s->promotion_off = false;
		rc = mount_disk(s);
		if (rc != MC_OK) {
			atomic_store(&s->disk_remount, true);
			mc_warn("mounting the local disk segment: %s", mc_last_error());
			return;
		}
	}
	rc = mc_master_conn_call(s->conn, MC_STORE_OFFLOAD_OBJECT_HEARTBEAT, &req, &resp);
	if (rc == MC_ERR_SEGMENT_NOT_FOUND || rc == MC_ERR_CLIENT_NOT_FOUND) {
		atomic_store(&s->disk_remount, true); /* the master forgot us */
		return;
	}
	if (rc != MC_OK) {
		mc_debug("OffloadObjectHeartbeat: %s", mc_last_error());
		return;
	}
	remove_items(s, &resp.body.offload_heartbeat_resp);
	offload_items(s, &resp.body.offload_heartbeat_resp);
	mc_store_msg_release(&resp);
	promotions(s);
	if (mc_disk_store_evict(s->disk, 0, &evicted) == MC_OK)
		report_evicted(s, &evicted);
	mc_disk_keys_release(&evicted);
	report_capacity(s);
}

static void *offload_main(void *arg)
{
	struct mc_store *s = arg;
	uint64_t period = (uint64_t)s->offload_cfg.heartbeat_interval_s * 1000;

	pthread_mutex_lock(&s->hb_lock);
	while (!s->ohb_stop) {
		struct timespec ts;
		uint64_t until;
		pthread_mutex_unlock(&s->hb_lock);
		offload_heartbeat_once(s);
		atomic_fetch_add(&s->ohb_passes, 1);
		until = mc_now_ms() + period;
		ts.tv_sec = (time_t)(until / 1000);
		ts.tv_nsec = (long)(until % 1000) * 1000000L;
		pthread_mutex_lock(&s->hb_lock);
		while (!s->ohb_stop && !atomic_load(&s->disk_remount) && mc_now_ms() < until)
			pthread_cond_timedwait(&s->ohb_cond, &s->hb_lock, &ts);
	}
	pthread_mutex_unlock(&s->hb_lock);
	return NULL;
}

/* ---- lifecycle --------------------------------------------------------------------------- */

void mc_store_offload_remount(struct mc_store *s)
{
	if (!s->disk)
		return;
	pthread_mutex_lock(&s->hb_lock);
	atomic_store(&s->disk_remount, true);
	pthread_cond_broadcast(&s->ohb_cond);
	pthread_mutex_unlock(&s->hb_lock);
}

mc_status mc_store_offload_open(struct mc_store *s, const char *path)
{
	struct mc_disk_store_config dc;
	char host[256];
	uint16_t port = 0;
	mc_status rc;

	mc_offload_config_init(&s->offload_cfg);
	mc_disk_store_config_init(&dc);
	if (path && *path) {
		mc_free(dc.path);
		dc.path = mc_strdup(path);
	}
	if (!dc.path || !*dc.path) {
		mc_disk_store_config_release(&dc);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "enable_ssd_offload needs ssd_offload_path or "
				    "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
	}
	snprintf(s->disk_path, sizeof(s->disk_path), "%s", dc.path);
	rc = mc_disk_store_open(&dc, &s->disk);
	mc_disk_store_config_release(&dc);
	if (rc != MC_OK)
		return rc;
	/* the engine's host: what this client's segment name advertises */
	if (!mc_sock_split_hostport(s->name, host, sizeof(host), &port, 0) || !host[0])
		snprintf(host, sizeof(host), "%s", mc_te_local_host(s->te));
	rc = mc_offload_server_start(&s->offload_cfg, host, (uint16_t)s->offload_cfg.rpc_port,
				     s->disk, s->te, &s->osrv);
	if (rc != MC_OK)
		mc_store_offload_stop(s);
	return rc;
}

mc_status mc_store_offload_start(struct mc_store *s)
{
	mc_status rc;

	if (!s->disk)
		return MC_OK;
	atomic_store(&s->disk_remount, false);
	rc = mount_disk(s);
	if (rc == MC_ERR_UNABLE_OFFLOAD || rc == MC_ERR_NOT_SUPPORTED) {
		mc_warn("the master %s: the SSD tier in %s stays off, this client keeps its "
			"objects in DRAM only",
			rc == MC_ERR_UNABLE_OFFLOAD ? "has no --enable_offload"
						    : "does not know the SSD tier's messages",
			s->disk_path);
		mc_store_offload_stop(s);
		return MC_OK;
	}
	if (rc != MC_OK)
		goto fail;
	s->ohb_stop = false;
	if (pthread_create(&s->ohb, NULL, offload_main, s) != 0) {
		rc = mc_set_error(MC_ERR_INTERNAL, "cannot start the offload heartbeat thread");
		goto fail;
	}
	pthread_setname_np(s->ohb, "mc-offload-hb");
	s->ohb_started = true;
	mc_info("SSD tier on in %s, offload RPC on %s, heartbeat every %" PRId64 " s", s->disk_path,
		mc_offload_server_endpoint(s->osrv), s->offload_cfg.heartbeat_interval_s);
	return MC_OK;
fail:
	mc_store_offload_stop(s);
	return rc;
}

mc_status mc_store_offload_withdraw(struct mc_store *s)
{
	struct mc_store_client_req req = {s->client_id};
	struct mc_store_msg resp;
	mc_status rc;
	bool started;

	/* first the heartbeat: it would mount the segment again (one caller joins it) */
	pthread_mutex_lock(&s->hb_lock);
	started = s->disk && s->ohb_started;
	s->ohb_started = false;
	s->ohb_stop = true;
	pthread_cond_broadcast(&s->ohb_cond);
	pthread_mutex_unlock(&s->hb_lock);
	if (started)
		pthread_join(s->ohb, NULL);
	if (!s->disk || !s->disk_mounted)
		return mc_set_error(
			MC_ERR_INVALID_PARAMS,
			"unmount_local_disk_segment: this client has no local disk "
			"segment mounted (enable_ssd_offload off, or unmounted already)");
	rc = mc_master_conn_call(s->conn, MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT, &req, &resp);
	if (rc != MC_OK)
		return rc; /* close tries again */
	mc_store_msg_release(&resp);
	s->disk_mounted = false;
	mc_info("local disk segment %s unmounted; its offload RPC serves until close",
		s->disk_path);
	return MC_OK;
}

void mc_store_offload_stop(struct mc_store *s)
{
	if (s->ohb_started) {
		pthread_mutex_lock(&s->hb_lock);
		s->ohb_stop = true;
		pthread_cond_broadcast(&s->ohb_cond);
		pthread_mutex_unlock(&s->hb_lock);
		pthread_join(s->ohb, NULL);
		s->ohb_started = false;
	}
	if (s->disk_mounted && s->conn) {
		struct mc_store_client_req req = {s->client_id};
		struct mc_store_msg resp;
		if (mc_master_conn_call(s->conn, MC_STORE_UNMOUNT_LOCAL_DISK_SEGMENT, &req,
					&resp) == MC_OK)
			mc_store_msg_release(&resp);
		else
			mc_debug("UnmountLocalDiskSegment: %s", mc_last_error());
	}
	s->disk_mounted = false;
	mc_offload_server_stop(s->osrv);
	s->osrv = NULL;
	mc_disk_store_close(s->disk);
	s->disk = NULL;
}
