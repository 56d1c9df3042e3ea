/*
 * te/segment.c - the segment cache: opening a remote segment by name,
 * fetching its descriptor (from the metadata store, or from the peer
 * itself over RPC in P2P mode) and choosing the transport peer that
 * reaches it.
 *
 * An array indexed by segment id behind te->seg_lock (a rwlock); entries
 * are never removed while the engine lives (ids stay valid), only their
 * descriptor and peer are replaced on refresh.  A descriptor is refreshed
 * when the caller asks, or automatically before the next submit once the
 * peer reports failed (a connection to it failed): that is how a
 * restarted peer (new ports, same name) is found again without
 * restarting the initiator.  The peer is the first transport, in registry
 * order, whose peer_open accepts the descriptor (transport/transport.h).
 */
#define MC_LOG_MODULE "te"
#include "te/engine.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "meta/meta.h"
#include "te/rpc.h"
#include "transport/transport.h"

/* GET key (takes ownership of it; NULL = out of memory); an absent key is
 * MC_ERR_SEGMENT_NOT_FOUND, "segment <name> <missing>". */
static mc_status get_published(struct mc_te *te, char *key, const char *name, const char *missing,
			       char **val_out, size_t *len_out)
{
	mc_status rc;

	if (!key)
		return MC_ERR_NOMEM;
	rc = mc_meta_get(te->meta, key, val_out, len_out);
	mc_free(key);
	if (rc == MC_ERR_NOT_FOUND)
		return mc_set_error(MC_ERR_SEGMENT_NOT_FOUND, "segment %s %s", name, missing);
	return rc;
}

mc_status mc_te_rpc_meta_lookup(struct mc_te *te, const char *name, char *host, size_t host_len,
				uint16_t *port)
{
	struct mc_rpc_meta m = {0};
	char *val = NULL;
	size_t len = 0;
	mc_status rc =
		get_published(te, mc_meta_key_rpc(name), name, "is not published", &val, &len);

	if (rc != MC_OK)
		return rc;
	rc = mc_rpc_meta_decode(val, len, &m);
	mc_free(val);
	if (rc != MC_OK)
		return rc;
	snprintf(host, host_len, "%s", m.ip_or_host_name);
	*port = m.rpc_port;
	mc_rpc_meta_release(&m);
	return MC_OK;
}

/* Fetch name's descriptor and where to reach it. */
static mc_status fetch_segment(struct mc_te *te, const char *name, struct mc_seg_desc **desc_out,
			       char *host, size_t host_len, uint16_t *port_out)
{
	char *val = NULL;
	size_t len = 0;
	mc_status rc;

	if (te->p2p) {
		struct mc_seg_desc *mine = NULL;
		char *req = NULL;
		if (!mc_sock_split_hostport(name, host, host_len, port_out, 0) || !*port_out)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "P2P segment name %s is not host:port", name);
		rc = mc_te_local_desc(te, &mine);
		if (rc == MC_OK)
			rc = mc_seg_desc_encode(mine, &req);
		mc_seg_desc_free(mine);
		if (rc != MC_OK)
			return rc;
		rc = mc_rpc_call(&te->auth, host, *port_out, MC_RPC_METADATA, req, strlen(req),
				 (int)te->cfg.handshake_connect_timeout_s * 1000,
				 (int)te->cfg.rpc_io_timeout_ms, te->cfg.handshake_max_length, &val,
				 &len);
		mc_free(req);
		if (rc != MC_OK)
			return rc;
		if (len >= 4 && strncmp(val, "null", 4) == 0) {
			mc_free(val);
			return mc_set_error(MC_ERR_SEGMENT_NOT_FOUND,
					    "peer %s serves no descriptor (not in P2P mode?)",
					    name);
		}
		rc = mc_seg_desc_decode(val, len, desc_out);
		mc_free(val);
		return rc;
	}

	rc = mc_te_rpc_meta_lookup(te, name, host, host_len, port_out);
	if (rc != MC_OK)
		return rc;
	rc = get_published(te, mc_meta_key_segment(name), name, "has no descriptor", &val, &len);
	if (rc != MC_OK)
		return rc;
	rc = mc_seg_desc_decode(val, len, desc_out);
	mc_free(val);
	if (rc != MC_OK) {
		char why[400];
		snprintf(why, sizeof(why), "%s", mc_last_error());
		mc_warn("skipping segment %s: malformed descriptor: %s", name, why);
		return mc_set_error(rc, "malformed descriptor of segment %s: %s", name, why);
	}
	return MC_OK;
}

/* The peer of the first transport, in registry order, that reaches the
 * target described by d at host; NULL when none does (set as the error). */
static struct mc_peer *peer_for(struct mc_te *te, const struct mc_seg_desc *d, const char *host)
{
	for (size_t i = 0; i < mc_transport_registry_len; i++) {
		struct mc_transport *tp = te->tps[i];
		struct mc_peer *peer;

		if (!tp || tp->ops->caps.local)
			continue;
		if (tp->ops->caps.same_host &&
		    (!d->host_id || !te->host_id[0] || strcmp(d->host_id, te->host_id) != 0))
			continue;
		if (mc_transport_peer_open(tp, d, host, &peer) == MC_OK)
			return peer;
	}
	return NULL;
}

static struct mc_segment *find_segment_locked(struct mc_te *te, const char *name)
{
	for (size_t i = 1; i < te->nsegs; i++)
		if (te->segs[i] && strcmp(te->segs[i]->name, name) == 0)
			return te->segs[i];
	return NULL;
}

/* Whether b names another endpoint or publication than a. */
static bool desc_differs(const struct mc_seg_desc *a, const struct mc_seg_desc *b)
{
	return a->tcp_data_port != b->tcp_data_port ||
	       strcmp(a->timestamp ? a->timestamp : "", b->timestamp ? b->timestamp : "") != 0 ||
	       strcmp(a->shm_ep ? a->shm_ep : "", b->shm_ep ? b->shm_ep : "") != 0;
}

/* Refetch seg's descriptor and swap it in. */
mc_status mc_te_segment_refresh(struct mc_te *te, struct mc_segment *seg)
{
	struct mc_seg_desc *d = NULL, *old;
	char host[256];
	uint16_t port = 0;
	mc_status rc = fetch_segment(te, seg->name, &d, host, sizeof(host), &port);
	if (rc != MC_OK)
		return rc;
	pthread_rwlock_wrlock(&te->seg_lock);
	old = seg->desc;
	if (desc_differs(old, d) || seg->rpc_port != port || strcmp(seg->host, host) != 0)
		atomic_store(&seg->renewed_ms, mc_now_ms());
	seg->desc = d;
	snprintf(seg->host, sizeof(seg->host), "%s", host);
	seg->rpc_port = port;
	seg->peer = peer_for(te, d, host);
	atomic_store(&seg->stale, false);
	pthread_rwlock_unlock(&te->seg_lock);
	if (seg->peer)
		mc_peer_reset(seg->peer);
	/* every reader of seg->desc holds seg_lock, so the old one is unused now */
	mc_seg_desc_free(old);
	return MC_OK;
}

bool mc_te_segment_renewed(struct mc_te *te, const char *name, uint64_t since_ms)
{
	struct mc_segment *seg;
	bool failed;
	uint64_t at;

	pthread_rwlock_rdlock(&te->seg_lock);
	seg = find_segment_locked(te, name);
	failed = seg && seg->peer && mc_peer_failed(seg->peer);
	pthread_rwlock_unlock(&te->seg_lock);
	if (!seg)
		return false;
	if (failed && mc_te_segment_refresh(te, seg) != MC_OK)
		return false;
	at = atomic_load(&seg->renewed_ms);
	return at && at >= since_ms;
}

static mc_status open_segment(struct mc_te *te, const char *name, bool nocache,
			      mc_segment_id *id_out)
{
	struct mc_segment *seg;
	struct mc_seg_desc *d = NULL;
	char host[256];
	uint16_t port = 0;
	mc_status rc;

	if (!te || !name || !id_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "open_segment: NULL argument");
	while (*name == '/')
		name++;
	if (!*name)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "open_segment: empty name");
	if (strcmp(name, te->name) == 0) {
		*id_out = MC_LOCAL_SEGMENT;
		return MC_OK;
	}
	pthread_rwlock_rdlock(&te->seg_lock);
	seg = find_segment_locked(te, name);
	pthread_rwlock_unlock(&te->seg_lock);
	if (seg) {
		bool failed;
		pthread_rwlock_rdlock(&te->seg_lock);
		failed = seg->peer && mc_peer_failed(seg->peer);
		pthread_rwlock_unlock(&te->seg_lock);
		if (nocache || te->cfg.disable_metacache || atomic_load(&seg->stale) || failed) {
			rc = mc_te_segment_refresh(te, seg);
			if (rc != MC_OK)
				return rc;
		}
		*id_out = seg->id;
		return MC_OK;
	}

	rc = fetch_segment(te, name, &d, host, sizeof(host), &port);
	if (rc != MC_OK)
		return rc;
	pthread_rwlock_wrlock(&te->seg_lock);
	seg = find_segment_locked(te, name); /* lost a race with another opener? */
	if (seg) {
		pthread_rwlock_unlock(&te->seg_lock);
		mc_seg_desc_free(d);
		*id_out = seg->id;
		return MC_OK;
	}
	if (te->nsegs == te->segs_cap) {
		size_t ncap = te->segs_cap ? te->segs_cap * 2 : 16;
		void *p = mc_realloc(te->segs, ncap * sizeof(*te->segs));
		if (!p) {
			rc = MC_ERR_NOMEM;
			goto err_unlock;
		}
		te->segs = p;
		te->segs_cap = ncap;
		if (te->nsegs == 0)
			te->segs[te->nsegs++] = NULL; /* id 0 is the local segment */
	}
	seg = mc_calloc(1, sizeof(*seg));
	if (!seg || !(seg->name = mc_strdup(name))) {
		mc_free(seg);
		rc = MC_ERR_NOMEM;
		goto err_unlock;
	}
	seg->id = te->nsegs;
	seg->desc = d;
	snprintf(seg->host, sizeof(seg->host), "%s", host);
	seg->rpc_port = port;
	seg->peer = peer_for(te, d, host);
	te->segs[te->nsegs++] = seg;
	pthread_rwlock_unlock(&te->seg_lock);
	*id_out = seg->id;
	return MC_OK;
err_unlock:
	pthread_rwlock_unlock(&te->seg_lock);
	mc_seg_desc_free(d);
	return rc;
}

mc_status mc_te_open_segment(struct mc_te *te, const char *name, mc_segment_id *id_out)
{
	return open_segment(te, name, false, id_out);
}

mc_status mc_te_reopen_segment(struct mc_te *te, const char *name, mc_segment_id *id_out)
{
	return open_segment(te, name, true, id_out);
}

mc_status mc_te_close_segment(struct mc_te *te, mc_segment_id id)
{
	(void)te;
	(void)id;
	return MC_OK; /* ids stay valid for the engine's life, as upstream */
}

struct mc_segment *mc_te_segment_get(struct mc_te *te, mc_segment_id id)
{
	struct mc_segment *s = NULL;
	pthread_rwlock_rdlock(&te->seg_lock);
	if (id > 0 && id < te->nsegs)
		s = te->segs[id];
	pthread_rwlock_unlock(&te->seg_lock);
	return s;
}

mc_status mc_te_sync_segment_cache(struct mc_te *te, const char *name)
{
	mc_status first = MC_OK;
	size_t n;
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	pthread_rwlock_rdlock(&te->seg_lock);
	n = te->nsegs;
	pthread_rwlock_unlock(&te->seg_lock);
	for (size_t i = 1; i < n; i++) {
		struct mc_segment *s = mc_te_segment_get(te, i);
		mc_status rc;
		if (!s || (name && *name && strcmp(name, s->name) != 0))
			continue;
		rc = mc_te_segment_refresh(te, s);
		if (rc != MC_OK && first == MC_OK)
			first = rc;
	}
	return first;
}

mc_status mc_te_segment_buffer(struct mc_te *te, mc_segment_id id, size_t index, uint64_t *addr_out,
			       uint64_t *length_out)
{
	mc_status rc = MC_OK;
	if (!te || !addr_out || !length_out)
		return MC_ERR_INVALID_PARAMS;
	if (id == MC_LOCAL_SEGMENT) {
		return mc_memreg_nth(&te->memreg, index, addr_out, length_out);
	}
	pthread_rwlock_rdlock(&te->seg_lock);
	if (id >= te->nsegs || !te->segs[id]) {
		rc = mc_set_error(MC_ERR_SEGMENT_NOT_FOUND, "unknown segment id %llu",
				  (unsigned long long)id);
	} else if (index >= te->segs[id]->desc->nbuffers) {
		rc = MC_ERR_NOT_FOUND;
	} else {
		*addr_out = te->segs[id]->desc->buffers[index].addr;
		*length_out = te->segs[id]->desc->buffers[index].length;
	}
	pthread_rwlock_unlock(&te->seg_lock);
	return rc;
}
