/*
 * store/client_put.c - the put protocol of the store client: PutStart
 * with the master, the writes of every replica (mc_store_run_transfers,
 * client_xfer.c), then PutEnd, or PutRevoke when a write or the End
 * failed; one key (mc_store_put_one) or a batch (mc_store_put_many), put
 * or upsert.  An End that reaches a leader of a newer view than its Start
 * and is answered OBJECT_NOT_FOUND (that leader never heard of the put)
 * does the put again, at most twice.  The value and zero-copy calls that
 * use these are client_calls.c.
 *
 * Threads: as client_xfer.c, any number of callers at once, no lock.
 */
#define MC_LOG_MODULE "store"
#include "store/client_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "store/master_conn.h"
#include "store/proto.h"

/* Translate the public config; preferred (room for n strings) is filled
 * from config->preferred_segments. */
static void make_config(const struct mc_store *s, const struct mc_store_config *cfg,
			struct mc_proto_str *preferred, struct mc_store_replicate_config *out)
{
	memset(out, 0, sizeof(*out));
	out->replica_num = 1;
	out->host_id = mc_proto_str_c(s->host_id);
	if (!cfg)
		return;
	out->replica_num = cfg->replica_num ? cfg->replica_num : 1;
	if (cfg->with_soft_pin) {
		out->soft_pin_action = MC_STORE_SOFT_PIN_ENABLE;
		if (cfg->soft_pin_ttl_ms) {
			out->soft_pin_ttl_ms.present = true;
			out->soft_pin_ttl_ms.value = cfg->soft_pin_ttl_ms;
		}
	}
	out->with_hard_pin = cfg->with_hard_pin;
	out->prefer_alloc_in_same_node = cfg->prefer_alloc_in_same_node;
	out->preferred_segment = mc_proto_str_c(cfg->preferred_segment);
	if (cfg->preferred_segments && cfg->n_preferred_segments) {
		for (size_t i = 0; i < cfg->n_preferred_segments; i++)
			preferred[i] = mc_proto_str_c(cfg->preferred_segments[i]);
		out->preferred_segments = preferred;
		out->n_preferred_segments = (uint32_t)cfg->n_preferred_segments;
	}
}

/* The group of key i of a call: group_ids[i] when given, else group_id. */
static const char *group_of(const struct mc_store_config *cfg, size_t i)
{
	if (!cfg)
		return NULL;
	return cfg->n_group_ids ? cfg->group_ids[i] : cfg->group_id;
}

/* ---- put --------------------------------------------------------------------------------- */

/* Revoke a put's write after a failed transfer or End (its answer lost
 * twice, or a new leader never heard of the write): a put reported failed
 * leaves no write in flight.  Only this client's in-flight write goes; an
 * End that was applied left a complete object, which stays.  The error is
 * "put KEY: " and the cause's text, with status rc. */
static void revoke_put(struct mc_store *s, const char *key, bool upsert, mc_status rc)
{
	struct mc_store_put_revoke_req rev = {
		.client_id = s->client_id,
		.tenant = mc_store_tenant(s),
		.replica_type = MC_STORE_REPLICA_ALL,
		.key = mc_proto_str_c(key),
	};
	struct mc_store_msg resp;
	char why[400];

	snprintf(why, sizeof(why), "%s", mc_last_error());
	if (mc_master_conn_call(s->conn, upsert ? MC_STORE_UPSERT_REVOKE : MC_STORE_PUT_REVOKE,
				&rev, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	else
		mc_warn("revoke of %s failed: %s", key, mc_last_error());
	mc_set_error(rc, "put %s: %s", key, why);
}

static mc_status put_one_body(struct mc_store *s, const char *key, void *const *bufs,
			      const size_t *lens, size_t nbufs, uint64_t len,
			      const struct mc_store_config *cfg, bool upsert);

/* A put changes key: its cached location goes before the put starts and
 * again once it is over (a get meanwhile may have cached the old one). */
mc_status mc_store_put_one(struct mc_store *s, const char *key, void *const *bufs,
			   const size_t *lens, size_t nbufs, uint64_t len,
			   const struct mc_store_config *cfg, bool upsert)
{
	mc_status rc = MC_OK;
	bool fallback = true;

	mc_store_loc_forget(s, key, strlen(key));
	if (mc_store_credit_on(s, cfg, upsert)) /* one exchange (client_credit.c) */
		mc_store_credit_put(s, &key, &bufs, &lens, &nbufs, &len, 1, cfg, &rc, &fallback);
	if (fallback)
		rc = put_one_body(s, key, bufs, lens, nbufs, len, cfg, upsert);
	mc_store_loc_forget(s, key, strlen(key));
	return rc;
}

static mc_status put_one_body(struct mc_store *s, const char *key, void *const *bufs,
			      const size_t *lens, size_t nbufs, uint64_t len,
			      const struct mc_store_config *cfg, bool upsert)
{
	struct mc_proto_str preferred_stack[8], *preferred = preferred_stack;
	struct mc_store_put_start_req req;
	const struct mc_store_replica *disk;
	struct mc_store_fs_job *job = NULL;
	struct mc_store_msg resp;
	struct mc_store_io io;
	struct mc_store_ahead ahead = {.s = s, .ios = &io, .n = 1};
	uint64_t views = mc_master_conn_leader_changes(s->conn), sent;
	int redone = 0;
	mc_status rc;

again:
	preferred = preferred_stack;
	if (cfg && cfg->n_preferred_segments > MC_ARRAY_SIZE(preferred_stack)) {
		preferred = mc_calloc(cfg->n_preferred_segments, sizeof(*preferred));
		if (!preferred)
			return MC_ERR_NOMEM;
	}
	memset(&io, 0, sizeof(io));
	io.bufs = bufs;
	io.lens = lens;
	io.nbufs = nbufs;
	io.len = len;
	io.key = mc_proto_str_c(key);
	io.tlen = mc_store_trailer_for(s, len); /* minor 10 */
	io.sign = true;
	ahead.next = 0;
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	req.value_len = len;
	req.group_id = mc_proto_str_c(group_of(cfg, 0));
	make_config(s, cfg, preferred, &req.config);
	req.trailer_len.value = io.tlen;
	req.trailer_len.present = req.trailer_len.value != 0;
	/* the bytes are hashed while the Start is in flight, as far as it
	 * lets them; the rest while the batch moves them (run_pass) */
	sent = mc_now_ms();
	rc = mc_master_conn_call_working(s->conn,
					 upsert ? MC_STORE_UPSERT_START : MC_STORE_PUT_START, &req,
					 &resp, mc_store_verify_ahead, &ahead);
	if (preferred != preferred_stack)
		mc_free(preferred);
	if (rc != MC_OK)
		mc_store_io_sums_free(&io);
	if (rc == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert)
		return MC_OK; /* insert-if-absent: upstream reports success */
	if (rc != MC_OK)
		return rc;

	/* the old blocks of a leased object upserted to another size */
	mc_store_spoil(s, resp.body.put_start_resp.spoil, resp.body.put_start_resp.n_spoil,
		       &resp.body.put_start_resp.spoil_ms, sent);
	io.reps = resp.body.put_start_resp.replicas;
	io.nreps = resp.body.put_start_resp.n_replicas;
	io.status = io.nreps ? MC_OK : mc_set_error(MC_ERR_INVALID_REPLICA, "no replica allocated");
	if (io.status == MC_OK)
		mc_store_run_transfers(s, &io, 1, MC_OP_WRITE);
	if (io.status == MC_OK && (disk = mc_store_fs_replica(io.reps, io.nreps)))
		job = mc_store_fs_job_new(&io, disk, upsert); /* NULL: End(ALL) drops it */
	mc_store_msg_release(&resp);

	if (io.status == MC_OK) {
		struct mc_store_put_end_req end = {
			.client_id = s->client_id,
			.tenant = mc_store_tenant(s),
			/* MEMORY: the DISK replica stays PROCESSING until its file is written */
			.replica_type = job ? MC_STORE_REPLICA_MEMORY : MC_STORE_REPLICA_ALL,
			.key = mc_proto_str_c(key),
			.checksum = {io.has_cksum, io.cksum},
		};
		if (io.nchunks && mc_master_conn_peer_minor(s->conn) >= 9) {
			end.n_chunk_sums = io.nchunks; /* minor 9: for ranged reads */
			end.chunk_sums = io.chunk_sums;
		}
		rc = mc_master_conn_call(s->conn, upsert ? MC_STORE_UPSERT_END : MC_STORE_PUT_END,
					 &end, &resp);
		mc_store_io_sums_free(&io);
		if (rc == MC_OK)
			mc_store_msg_release(&resp);
		if (rc == MC_OK && job)
			(void)mc_store_fs_submit(s, job);
		else
			mc_store_fs_job_drop(s, job, false);
		/*
		 * The End reached a leader of a newer view than the Start did
		 * and it never heard of the put (the Start was not in the log
		 * the new leader had): nothing of this write is known there,
		 * so the whole put is done again, which the caller would
		 * otherwise have to do.  Bounded: twice.
		 */
		if (rc == MC_ERR_OBJECT_NOT_FOUND && redone < 2 &&
		    mc_master_conn_leader_changes(s->conn) != views) {
			mc_info("put %s: the new master leader never saw its start; putting it again",
				key);
			views = mc_master_conn_leader_changes(s->conn);
			redone++;
			goto again;
		}
		if (rc != MC_OK)
			revoke_put(s, key, upsert, rc);
		return rc;
	}
	mc_store_io_sums_free(&io);
	revoke_put(s, key, upsert, io.status);
	return io.status;
}

mc_status mc_store_send_put_start(struct mc_store *s, const char *const *keys,
				  const uint64_t *totals, const uint64_t *trailers,
				  const uint32_t *sent, uint32_t nsent,
				  const struct mc_store_config *cfg, bool upsert,
				  struct mc_store_ahead *ahead, struct mc_store_msg *resp)
{
	struct mc_proto_str preferred_stack[8], *preferred = preferred_stack;
	struct mc_store_batch_put_start_req req;
	struct mc_store_put_item *items;
	uint64_t *tls = NULL, sent_ms;
	bool any_trailer = false;
	mc_status rc;

	for (uint32_t j = 0; trailers && j < nsent; j++)
		any_trailer |= trailers[sent[j]] != 0;
	if (any_trailer && !(tls = mc_calloc(nsent, sizeof(*tls))))
		return MC_ERR_NOMEM;
	for (uint32_t j = 0; tls && j < nsent; j++)
		tls[j] = trailers[sent[j]];
	items = mc_calloc(nsent ? nsent : 1, sizeof(*items));
	if (cfg && cfg->n_preferred_segments > MC_ARRAY_SIZE(preferred_stack))
		preferred = mc_calloc(cfg->n_preferred_segments, sizeof(*preferred));
	if (!items || !preferred) {
		rc = MC_ERR_NOMEM;
		goto out;
	}
	for (uint32_t j = 0; j < nsent; j++) {
		items[j].key = mc_proto_str_c(keys[sent[j]]);
		items[j].value_len = totals[sent[j]];
		items[j].group_id = mc_proto_str_c(group_of(cfg, sent[j]));
		/* a put changes the key: its cached location goes (client_loccache.c) */
		mc_store_loc_forget(s, keys[sent[j]], items[j].key.len);
	}
	memset(&req, 0, sizeof(req));
	req.client_id = s->client_id;
	req.tenant = mc_store_tenant(s);
	make_config(s, cfg, preferred, &req.config);
	req.n_items = nsent;
	req.items = items;
	req.n_trailers = tls ? nsent : 0; /* minor 10 */
	req.trailers = tls;
	sent_ms = mc_now_ms();
	rc = mc_master_conn_call_working(
		s->conn, upsert ? MC_STORE_BATCH_UPSERT_START : MC_STORE_BATCH_PUT_START, &req,
		resp, ahead ? mc_store_verify_ahead : NULL, ahead);
	if (rc == MC_OK) /* the old blocks of leased objects upserted to another size */
		mc_store_spoil(s, resp->body.batch_put_start_resp.spoil,
			       resp->body.batch_put_start_resp.n_spoil,
			       &resp->body.batch_put_start_resp.spoil_ms, sent_ms);
	if (rc == MC_OK && resp->body.batch_put_start_resp.n_items != nsent) {
		uint32_t got = resp->body.batch_put_start_resp.n_items;
		mc_store_msg_release(resp);
		rc = mc_set_error(MC_ERR_PROTOCOL, "master answered %u of %u items", got, nsent);
	}
out:
	if (preferred && preferred != preferred_stack)
		mc_free(preferred);
	mc_free(items);
	mc_free(tls);
	return rc;
}

mc_status mc_store_send_put_revoke(struct mc_store *s, struct mc_proto_str *keys, uint32_t n,
				   bool upsert, struct mc_store_msg *resp)
{
	struct mc_store_batch_put_revoke_req rev = {
		.client_id = s->client_id,
		.tenant = mc_store_tenant(s),
		.replica_type = MC_STORE_REPLICA_ALL,
		.n_keys = n,
		.keys = keys,
	};
	mc_status rc = mc_master_conn_call(
		s->conn, upsert ? MC_STORE_BATCH_UPSERT_REVOKE : MC_STORE_BATCH_PUT_REVOKE, &rev,
		resp);
	if (rc != MC_OK)
		mc_warn("batch revoke failed: %s", mc_last_error());
	return rc;
}

/*
 * The batch put path: BatchPutStart for every key with status MC_OK in
 * results, transfers of all of them in one engine batch, then BatchPutEnd
 * for the ones that made it and BatchPutRevoke for the rest.
 */
static void put_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		     const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
		     size_t n, const struct mc_store_config *cfg, bool upsert, mc_status *results)
{
	struct mc_store_object_meta *metas = NULL;
	struct mc_store_chunk_sums *chunks = NULL; /* per PutEnd item */
	bool any_chunks = false;
	struct mc_proto_str *revoke_keys = NULL;
	uint32_t *sent = NULL;					/* item index -> key index */
	uint32_t *end_owner = NULL;				/* PutEnd item -> key index */
	struct mc_store_fs_job **jobs = NULL, **end_job = NULL; /* DISK files to write */
	bool any_disk = false;
	struct mc_store_io *ios = NULL;
	uint64_t *tls = NULL; /* per key: its trailer (minor 10) */
	struct mc_store_ahead ahead;
	struct mc_store_msg resp;
	bool have_resp = false;
	uint32_t nsent = 0, nend = 0, nrev = 0;
	mc_status rc;

	sent = mc_calloc(n, sizeof(*sent));
	tls = mc_calloc(n ? n : 1, sizeof(*tls));
	jobs = mc_calloc(n ? n : 1, sizeof(*jobs));
	end_job = mc_calloc(n ? n : 1, sizeof(*end_job));
	end_owner = mc_calloc(n, sizeof(*end_owner));
	ios = mc_calloc(n, sizeof(*ios));
	metas = mc_calloc(n, sizeof(*metas));
	chunks = mc_calloc(n ? n : 1, sizeof(*chunks));
	revoke_keys = mc_calloc(n, sizeof(*revoke_keys));
	if (!sent || !tls || !jobs || !end_job || !end_owner || !ios || !metas || !chunks ||
	    !revoke_keys) {
		rc = MC_ERR_NOMEM;
		goto fail_all;
	}
	for (size_t i = 0; i < n; i++) {
		if (results[i] == MC_OK)
			sent[nsent++] = (uint32_t)i;
		tls[i] = mc_store_trailer_for(s, totals[i]);
	}
	if (nsent == 0)
		goto out;
	for (uint32_t j = 0; j < nsent; j++) {
		uint32_t i = sent[j];
		struct mc_store_io *io = &ios[j];
		io->bufs = bufs[i];
		io->lens = lens[i];
		io->nbufs = nbufs[i];
		io->len = totals[i];
		io->key = mc_proto_str_c(keys[i]);
		io->tlen = tls[i];
		io->sign = true;
	}
	/* hashed while the Start is in flight, as far as it lets them */
	ahead = (struct mc_store_ahead){.s = s, .ios = ios, .n = nsent};
	rc = mc_store_send_put_start(s, keys, totals, tls, sent, nsent, cfg, upsert, &ahead, &resp);
	if (rc != MC_OK)
		goto fail_all;
	have_resp = true;
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_put_start_item *it = &resp.body.batch_put_start_resp.items[j];
		struct mc_store_io *io = &ios[j];
		io->reps = it->replicas;
		io->nreps = it->n_replicas;
		io->status = (mc_status)it->status;
		if (io->status == MC_OK && io->nreps == 0)
			io->status = MC_ERR_INVALID_REPLICA;
	}
	mc_store_run_transfers(s, ios, nsent, MC_OP_WRITE);
	for (uint32_t j = 0; j < nsent; j++) {
		const struct mc_store_replica *disk =
			ios[j].status == MC_OK ? mc_store_fs_replica(ios[j].reps, ios[j].nreps)
					       : NULL;
		if (disk) {
			any_disk = true;
			jobs[j] = mc_store_fs_job_new(&ios[j], disk, upsert);
		}
	}

	for (uint32_t j = 0; j < nsent; j++) {
		int32_t st = resp.body.batch_put_start_resp.items[j].status;
		uint32_t i = sent[j];
		if (st == MC_ERR_OBJECT_ALREADY_EXISTS && !upsert) {
			results[i] = MC_OK;
		} else if (st != MC_OK) {
			results[i] = (mc_status)st;
		} else if (ios[j].status == MC_OK) {
			metas[nend].key = mc_proto_str_c(keys[i]);
			metas[nend].checksum.present = ios[j].has_cksum;
			metas[nend].checksum.value = ios[j].cksum;
			chunks[nend].n = ios[j].nchunks;
			chunks[nend].v = ios[j].chunk_sums;
			any_chunks |= ios[j].nchunks != 0;
			end_job[nend] = jobs[j];
			jobs[j] = NULL;
			end_owner[nend++] = i;
			results[i] = MC_OK;
		} else {
			revoke_keys[nrev++] = mc_proto_str_c(keys[i]);
			results[i] = ios[j].status;
		}
	}
	mc_store_msg_release(&resp);
	have_resp = false;

	if (nend) {
		struct mc_store_batch_put_end_req end = {
			.client_id = s->client_id,
			.tenant = mc_store_tenant(s),
			/* MEMORY: DISK replicas stay PROCESSING until their files are written */
			.replica_type = any_disk ? MC_STORE_REPLICA_MEMORY : MC_STORE_REPLICA_ALL,
			.n_items = nend,
			.items = metas,
			/* minor 9: the chunk checksums, for ranged reads */
			.n_chunks =
				any_chunks && mc_master_conn_peer_minor(s->conn) >= 9 ? nend : 0,
			.chunks = chunks,
		};
		rc = mc_master_conn_call(
			s->conn, upsert ? MC_STORE_BATCH_UPSERT_END : MC_STORE_BATCH_PUT_END, &end,
			&resp);
		/* map the per-key answers back, in order */
		for (uint32_t e = 0; e < nend; e++) {
			uint32_t i = end_owner[e];
			if (rc != MC_OK)
				results[i] = rc;
			else if (e < resp.body.batch_status_resp.n_items)
				results[i] = (mc_status)resp.body.batch_status_resp.statuses[e];
			if (results[i] != MC_OK) /* as revoke_put */
				revoke_keys[nrev++] = metas[e].key;
		}
		if (rc == MC_OK)
			mc_store_msg_release(&resp);
		for (uint32_t e = 0; e < nend; e++) {
			uint32_t i = end_owner[e];
			if (results[i] == MC_OK && end_job[e])
				(void)mc_store_fs_submit(s, end_job[e]);
			else if (results[i] == MC_OK && any_disk)
				/* no copy of it (memory): its DISK replica goes */
				(void)mc_store_fs_report(s, keys[i], upsert, false, 0);
			else
				mc_store_fs_job_drop(s, end_job[e], false);
			end_job[e] = NULL;
		}
	}
	if (nrev && mc_store_send_put_revoke(s, revoke_keys, nrev, upsert, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	goto out;
fail_all:
	for (size_t i = 0; i < n; i++)
		if (results[i] == MC_OK)
			results[i] = rc;
	if (have_resp)
		mc_store_msg_release(&resp);
out:
	/* again once the puts are over: a get meanwhile may have cached the old */
	for (uint32_t j = 0; sent && j < nsent; j++)
		mc_store_loc_forget(s, keys[sent[j]], strlen(keys[sent[j]]));
	for (size_t i = 0; jobs && i < n; i++)
		mc_store_fs_job_drop(s, jobs[i], false);
	mc_free(jobs);
	mc_free(end_job);
	mc_free(sent);
	mc_free(tls);
	mc_free(end_owner);
	for (size_t j = 0; ios && j < nsent; j++)
		mc_store_io_sums_free(&ios[j]);
	mc_free(ios);
	mc_free(metas);
	mc_free(chunks);
	mc_free(revoke_keys);
}

/*
 * put_many, and again for the keys whose End reached a leader of a newer
 * view than their Start and was answered OBJECT_NOT_FOUND: that leader
 * never heard of those writes (as mc_store_put_one).  Bounded: twice.
 */
void mc_store_put_many(struct mc_store *s, const char *const *keys, void *const *const *bufs,
		       const size_t *const *lens, const size_t *nbufs, const uint64_t *totals,
		       size_t n, const struct mc_store_config *cfg, bool upsert, mc_status *results)
{
	uint64_t views = mc_master_conn_leader_changes(s->conn);
	mc_status *again = NULL;

	if (n && mc_store_credit_on(s, cfg, upsert)) { /* client_credit.c */
		bool *fallback = mc_calloc(n, sizeof(*fallback));

		if (fallback && (again = mc_calloc(n, sizeof(*again)))) {
			bool any = false;

			mc_store_credit_put(s, keys, bufs, lens, nbufs, totals, n, cfg, results,
					    fallback);
			for (size_t i = 0; i < n; i++) {
				again[i] = fallback[i] ? MC_OK : MC_ERR_INVALID_PARAMS;
				any |= fallback[i];
			}
			if (any)
				put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, again);
			for (size_t i = 0; i < n; i++)
				if (fallback[i])
					results[i] = again[i];
			mc_free(fallback);
			mc_free(again);
			/* a key put the two-call way across a leader change is
			 * not put again here: its result says what happened */
			return;
		}
		mc_free(fallback);
		mc_free(again);
		again = NULL;
	}
	put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, results);
	for (int redone = 0; redone < 2 && mc_master_conn_leader_changes(s->conn) != views;
	     redone++) {
		size_t nagain = 0;

		views = mc_master_conn_leader_changes(s->conn);
		if (!again && !(again = mc_calloc(n ? n : 1, sizeof(*again))))
			return;
		for (size_t i = 0; i < n; i++) {
			/* put_many sends the keys whose entry is MC_OK */
			again[i] = results[i] == MC_ERR_OBJECT_NOT_FOUND ? MC_OK
									 : MC_ERR_INVALID_PARAMS;
			nagain += again[i] == MC_OK;
		}
		if (!nagain)
			break;
		mc_info("batch put: the new master leader never saw the start of %zu key(s); "
			"putting them again",
			nagain);
		put_many(s, keys, bufs, lens, nbufs, totals, n, cfg, upsert, again);
		for (size_t i = 0; i < n; i++)
			if (results[i] == MC_ERR_OBJECT_NOT_FOUND)
				results[i] = again[i];
	}
	mc_free(again);
}
