/*
 * store/client_tasks.c - copy and move tasks on the client side (spec
 * store.md 1.14, 9.3; the master's side is master/tasks.c): the calls
 * that make and follow tasks, the unmount of this client's segment, and
 * the executor the heartbeat thread runs.
 *
 * Executing: the master hands a task to the client that owns its source
 * replica, so the source is in this client's own segment or in one of its
 * extra segments (client_mount.c; held mapped for the transfer).  After
 * each ping the heartbeat asks FetchTasks for a batch, writes every
 * task's source bytes to its targets (PROCESSING blocks the master holds
 * for the task) in one engine batch through mc_store_run_transfers, and
 * reports each with MarkTaskToComplete: MC_OK commits the blocks as
 * replicas, anything else gives them back.  While batches come back
 * non-empty it asks again at once, for at most TASK_BUDGET_MS; then the
 * heartbeat pings and, while tasks keep coming, starts again without its
 * one-second wait, so repair traffic flows without gaps and the pings
 * still come well within the client's TTL.  A master of minor version < 7 answers
 * NOT_SUPPORTED, after which this client stops asking.
 *
 * Never: write anywhere but the targets the master named, or read outside
 * the own and the extra segments (a source outside them fails the task).
 */
#define MC_LOG_MODULE "store"
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "store/client_int.h"
#include "store/dummy_proto.h"
#include "store/master_conn.h"
#include "te/engine.h"

#define TASK_BATCH     32
#define TASK_BUDGET_MS 800

static void copy_uuid_out(const struct mc_store_uuid *in, struct mc_store_task_uuid *out)
{
	out->first = in->first;
	out->second = in->second;
}

mc_status mc_store_create_copy_task(struct mc_store *s, const char *key, const char *const *targets,
				    size_t ntargets, struct mc_store_task_uuid *id_out)
{
	if (s && s->dummy)
		return mc_store_dummy_create_task(s, key, targets, ntargets, id_out);
	struct mc_store_copy_task_req req;
	struct mc_proto_str *tv;
	struct mc_store_msg resp;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!key || !id_out || (ntargets && !targets) || ntargets > UINT32_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "create_copy_task: bad arguments");
	tv = mc_calloc(ntargets ? ntargets : 1, sizeof(*tv));
	if (!tv)
		return MC_ERR_NOMEM;
	for (size_t i = 0; i < ntargets; i++) {
		if (!targets[i]) {
			mc_free(tv);
			return mc_set_error(MC_ERR_INVALID_PARAMS, "create_copy_task: NULL target");
		}
		tv[i] = mc_proto_str_c(targets[i]);
	}
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	req.n_targets = (uint32_t)ntargets;
	req.targets = tv;
	rc = mc_master_conn_call(s->conn, MC_STORE_CREATE_COPY_TASK, &req, &resp);
	mc_free(tv);
	if (rc != MC_OK)
		return rc;
	copy_uuid_out(&resp.body.task_id.id, id_out);
	mc_store_msg_release(&resp);
	return MC_OK;
}

mc_status mc_store_change_replica(struct mc_store *s, const char *key, uint32_t replica_num,
				  uint32_t *count_out)
{
	struct mc_store_change_replica_req req;
	struct mc_store_msg resp;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!key || !*key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "change_replica: empty key");
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	req.replica_num = replica_num;
	rc = mc_master_conn_call(s->conn, MC_STORE_CHANGE_REPLICA, &req, &resp);
	if (rc != MC_OK)
		return rc;
	if (count_out)
		*count_out =
			resp.body.count_resp.count < 0 ? 0 : (uint32_t)resp.body.count_resp.count;
	mc_store_msg_release(&resp);
	return MC_OK;
}

mc_status mc_store_create_move_task(struct mc_store *s, const char *key, const char *source,
				    const char *target, struct mc_store_task_uuid *id_out)
{
	if (s && s->dummy) {
		const char *st[2] = {source, target};
		if (!source || !target)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "create_move_task: bad arguments");
		return mc_store_dummy_create_task(s, key, st, SIZE_MAX, id_out);
	}
	struct mc_store_move_task_req req;
	struct mc_store_msg resp;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!key || !source || !target || !id_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "create_move_task: bad arguments");
	req.tenant = mc_store_tenant(s);
	req.key = mc_proto_str_c(key);
	req.source = mc_proto_str_c(source);
	req.target = mc_proto_str_c(target);
	rc = mc_master_conn_call(s->conn, MC_STORE_CREATE_MOVE_TASK, &req, &resp);
	if (rc != MC_OK)
		return rc;
	copy_uuid_out(&resp.body.task_id.id, id_out);
	mc_store_msg_release(&resp);
	return MC_OK;
}

mc_status mc_store_query_task(struct mc_store *s, const struct mc_store_task_uuid *id,
			      struct mc_store_task_state *out)
{
	if (s && s->dummy)
		return mc_store_dummy_query_task(s, id, out);
	struct mc_store_task_id req;
	const struct mc_store_task_info *ti;
	struct mc_store_msg resp;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!id || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "query_task: bad arguments");
	req.id.first = id->first;
	req.id.second = id->second;
	rc = mc_master_conn_call(s->conn, MC_STORE_QUERY_TASK, &req, &resp);
	if (rc != MC_OK)
		return rc;
	ti = &resp.body.task_info;
	memset(out, 0, sizeof(*out));
	copy_uuid_out(&ti->id, &out->id);
	out->type = ti->type;
	out->status = ti->status;
	out->created_at_ms_epoch = ti->created_at_ms;
	out->last_updated_at_ms_epoch = ti->updated_at_ms;
	copy_uuid_out(&ti->assigned_client, &out->assigned_client);
	snprintf(out->message, sizeof(out->message), "%.*s", (int)ti->message.len,
		 ti->message.ptr ? ti->message.ptr : "");
	mc_store_msg_release(&resp);
	return MC_OK;
}

bool mc_store_parse_seg_id(const char *s, struct mc_store_uuid *out)
{
	char *end;
	unsigned long long a, b;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	a = strtoull(s, &end, 10);
	if (*end != '-' || end[1] < '0' || end[1] > '9')
		return false;
	b = strtoull(end + 1, &end, 10);
	if (*end || errno == ERANGE)
		return false;
	out->first = a;
	out->second = b;
	return true;
}

mc_status mc_store_master_unmount(struct mc_store *s, const struct mc_store_uuid *id,
				  uint64_t grace_period_ms)
{
	struct mc_store_msg resp;
	mc_status rc;

	mc_store_loc_forget_all(s); /* its objects go, their bytes stay */
	if (grace_period_ms == 0) {
		struct mc_store_unmount_req req = {s->client_id, *id};

		rc = mc_master_conn_call(s->conn, MC_STORE_UNMOUNT_SEGMENT, &req, &resp);
	} else {
		struct mc_store_graceful_unmount_req req = {s->client_id, *id, grace_period_ms};

		rc = mc_master_conn_call(s->conn, MC_STORE_GRACEFUL_UNMOUNT_SEGMENT, &req, &resp);
	}
	if (rc == MC_OK)
		mc_store_msg_release(&resp);
	return rc;
}

mc_status mc_store_unmount_segment(struct mc_store *s, const char *segment_id,
				   uint64_t grace_period_ms)
{
	if (s && s->dummy)
		return mc_store_dummy_segment(s, MC_DUMMY_MSG_UNMOUNT_SEGMENT, segment_id,
					      grace_period_ms, 0, NULL, NULL, NULL, NULL);
	struct mc_store_uuid id;
	uint64_t sent;
	mc_status rc = mc_store_check_ready(s);

	if (rc != MC_OK)
		return rc;
	if (!mc_store_parse_seg_id(segment_id, &id))
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_segment: '%s' is not a segment id (<first>-<second>)",
				    segment_id ? segment_id : "(null)");
	if (!s->seg_mounted || id.first != s->seg_id.first || id.second != s->seg_id.second)
		return mc_store_xseg_unmount(s, &id, grace_period_ms);
	pthread_mutex_lock(&s->remount_lock); /* no remount in between */
	if (atomic_exchange(&s->seg_unmounted, true)) {
		pthread_mutex_unlock(&s->remount_lock);
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "unmount_segment: %s is not a segment this client has mounted",
				    segment_id);
	}
	sent = mc_now_ms();
	rc = mc_store_master_unmount(s, &id, grace_period_ms);
	if (rc != MC_OK) {
		atomic_store(&s->seg_unmounted, false);
	} else { /* its memory leaves the engine (client_mount.c) */
		pthread_mutex_lock(&s->xseg_lock);
		mc_store_unmounted_locked(s, NULL, sent, grace_period_ms);
		pthread_mutex_unlock(&s->xseg_lock);
	}
	pthread_mutex_unlock(&s->remount_lock);
	return rc;
}

/* ---- the executor (heartbeat thread) ---------------------------------------------------- */

static void report(struct mc_store *s, const struct mc_store_uuid *task, mc_status st,
		   const char *why)
{
	struct mc_store_task_done_req req = {s->client_id, *task, st, mc_proto_str_c(why)};
	struct mc_store_msg resp;

	if (mc_master_conn_call(s->conn, MC_STORE_MARK_TASK_TO_COMPLETE, &req, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	else
		mc_debug("task %" PRIu64 "-%" PRIu64 ": report failed: %s", task->first,
			 task->second, mc_last_error());
}

/* One batch: false when there was nothing (or no more) to do. */
static bool run_batch(struct mc_store *s)
{
	struct mc_store_fetch_tasks_req req = {s->client_id, TASK_BATCH};
	const struct mc_store_fetch_tasks_resp *r;
	struct mc_store_io *ios;
	void **bufs;
	size_t *lens;
	struct mc_store_uuid *held; /* the extra segment a source is in, or {0, 0} */
	struct mc_store_msg resp;
	mc_status rc = mc_master_conn_call(s->conn, MC_STORE_FETCH_TASKS, &req, &resp);
	bool more;

	if (rc == MC_ERR_NOT_SUPPORTED) {
		s->no_tasks = true;
		mc_info("the master has no copy/move tasks (protocol minor < 7)");
		return false;
	}
	if (rc != MC_OK)
		return false;
	r = &resp.body.fetch_tasks_resp;
	if (r->n_tasks == 0) {
		mc_store_msg_release(&resp);
		return false;
	}
	more = true; /* ask again: the master may have queued more since */
	ios = mc_calloc(r->n_tasks, sizeof(*ios));
	bufs = mc_calloc(r->n_tasks, sizeof(*bufs));
	lens = mc_calloc(r->n_tasks, sizeof(*lens));
	held = mc_calloc(r->n_tasks, sizeof(*held));
	if (!ios || !bufs || !lens || !held) {
		for (uint32_t i = 0; i < r->n_tasks; i++)
			report(s, &r->tasks[i].id, MC_ERR_NOMEM, "no memory on the client");
		goto out;
	}
	for (uint32_t i = 0; i < r->n_tasks; i++) {
		const struct mc_store_task_assignment *t = &r->tasks[i];
		uint64_t a = t->source.address, n = t->source.size;
		uint64_t base = (uint64_t)(uintptr_t)s->seg;

		bufs[i] = (void *)(uintptr_t)a;
		lens[i] = (size_t)n;
		ios[i].bufs = &bufs[i];
		ios[i].lens = &lens[i];
		ios[i].nbufs = 1;
		ios[i].len = n;
		ios[i].reps = t->targets;
		ios[i].nreps = t->n_targets;
		ios[i].key = (struct mc_proto_str){0};
		ios[i].status = MC_OK;
		if (t->source.type != MC_STORE_REPLICA_MEMORY)
			ios[i].status = MC_ERR_INVALID_PARAMS;
		else if (s->seg && a >= base && n <= s->seg_size && a - base <= s->seg_size - n)
			; /* in the own segment */
		else if (!mc_store_xseg_hold(s, a, n, &held[i]))
			ios[i].status = MC_ERR_INVALID_PARAMS; /* in none of this client's */
	}
	mc_store_run_transfers(s, ios, r->n_tasks, MC_OP_WRITE);
	for (uint32_t i = 0; i < r->n_tasks; i++)
		if (held[i].first || held[i].second)
			mc_store_xseg_release(s, &held[i]);
	for (uint32_t i = 0; i < r->n_tasks; i++) {
		mc_status st = ios[i].status;

		report(s, &r->tasks[i].id, st,
		       st == MC_OK		     ? ""
		       : st == MC_ERR_INVALID_PARAMS ? "the source is not in this client's segments"
						     : "the transfer to a target failed");
	}
out:
	mc_free(held);
	mc_free(ios);
	mc_free(bufs);
	mc_free(lens);
	mc_store_msg_release(&resp);
	return more;
}

bool mc_store_tasks_poll(struct mc_store *s)
{
	uint64_t end = mc_now_ms() + TASK_BUDGET_MS;

	bool own = s->seg_mounted && !atomic_load(&s->seg_unmounted), extra;

	pthread_mutex_lock(&s->xseg_lock);
	extra = s->n_xsegs > 0;
	pthread_mutex_unlock(&s->xseg_lock);
	if (s->no_tasks || (!own && !extra))
		return false;
	while (run_batch(s)) {
		if (mc_now_ms() >= end)
			return true; /* more may wait: ping, then come back at once */
	}
	return false;
}
