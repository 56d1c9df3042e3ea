/*
 * master/validate.c - the request validators of the command table
 * (master.c): each checks every string and list of one message's body once,
 * before its handler runs.
 */
#include <stdbool.h>
#include <stddef.h>

#include "master/handler_int.h"

/*
 * The decoder never yields a NULL pointer with a non-zero length or count;
 * a request built by hand (tests, in-process callers) might.  Each
 * message's validator checks every string and list once, before its
 * handler runs, so the handlers can trust them.
 */
static bool s_ok(const struct mc_proto_str *s)
{
	return s->ptr || s->len == 0;
}

static bool strs_ok(const struct mc_proto_str *v, uint32_t n)
{
	if (n && !v)
		return false;
	for (uint32_t i = 0; i < n; i++) {
		if (!s_ok(&v[i]))
			return false;
	}
	return true;
}

static bool seg_ok(const struct mc_store_segment *s)
{
	return s_ok(&s->name) && s_ok(&s->te_endpoint) && s_ok(&s->protocol) && s_ok(&s->host_id);
}

static bool cfg_ok(const struct mc_store_replicate_config *c)
{
	return s_ok(&c->preferred_segment) && s_ok(&c->host_id) &&
	       strs_ok(c->preferred_segments, c->n_preferred_segments) &&
	       strs_ok(c->preferred_nof_segments, c->n_preferred_nof_segments);
}

bool mc_master_v_hello(const struct mc_store_msg *q)
{
	return s_ok(&q->body.hello.version);
}

bool mc_master_v_mount(const struct mc_store_msg *q)
{
	return seg_ok(&q->body.mount_req.segment);
}

bool mc_master_v_remount(const struct mc_store_msg *q)
{
	const struct mc_store_remount_req *r = &q->body.remount_req;

	if (r->n_segments && !r->segments)
		return false;
	for (uint32_t i = 0; i < r->n_segments; i++) {
		if (!seg_ok(&r->segments[i]))
			return false;
	}
	return true;
}

bool mc_master_v_key(const struct mc_store_msg *q)
{
	return s_ok(&q->body.key_req.tenant) && s_ok(&q->body.key_req.key);
}

bool mc_master_v_keys(const struct mc_store_msg *q)
{
	return s_ok(&q->body.keys_req.tenant) &&
	       strs_ok(q->body.keys_req.keys, q->body.keys_req.n_keys);
}

bool mc_master_v_unreachable(const struct mc_store_msg *q)
{
	return strs_ok(q->body.unreachable_req.segments, q->body.unreachable_req.n_segments);
}

bool mc_master_v_regex(const struct mc_store_msg *q)
{
	return s_ok(&q->body.regex_req.tenant) && s_ok(&q->body.regex_req.pattern);
}

bool mc_master_v_put_start(const struct mc_store_msg *q)
{
	const struct mc_store_put_start_req *r = &q->body.put_start_req;

	return s_ok(&r->tenant) && s_ok(&r->key) && s_ok(&r->group_id) && cfg_ok(&r->config);
}

bool mc_master_v_batch_put_start(const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_start_req *r = &q->body.batch_put_start_req;

	if (!s_ok(&r->tenant) || !cfg_ok(&r->config) || (r->n_items && !r->items))
		return false;
	for (uint32_t i = 0; i < r->n_items; i++) {
		if (!s_ok(&r->items[i].key) || !s_ok(&r->items[i].group_id))
			return false;
	}
	return true;
}

bool mc_master_v_put_end(const struct mc_store_msg *q)
{
	return s_ok(&q->body.put_end_req.tenant) && s_ok(&q->body.put_end_req.key);
}

bool mc_master_v_batch_put_end(const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_end_req *r = &q->body.batch_put_end_req;

	if (!s_ok(&r->tenant) || (r->n_items && !r->items))
		return false;
	for (uint32_t i = 0; i < r->n_items; i++) {
		if (!s_ok(&r->items[i].key))
			return false;
	}
	return true;
}

bool mc_master_v_put_credit(const struct mc_store_msg *q)
{
	const struct mc_store_put_credit_req *r = &q->body.put_credit_req;

	if (!s_ok(&r->tenant) || !s_ok(&r->segment) || (r->n_items && !r->items) ||
	    (r->n_chunks && !r->chunks) || (r->n_release && !r->release) || (r->n_want && !r->want))
		return false;
	for (uint32_t i = 0; i < r->n_items; i++) {
		if (!s_ok(&r->items[i].key))
			return false;
	}
	return true;
}

bool mc_master_v_put_revoke(const struct mc_store_msg *q)
{
	return s_ok(&q->body.put_revoke_req.tenant) && s_ok(&q->body.put_revoke_req.key);
}

bool mc_master_v_batch_put_revoke(const struct mc_store_msg *q)
{
	const struct mc_store_batch_put_revoke_req *r = &q->body.batch_put_revoke_req;

	return s_ok(&r->tenant) && strs_ok(r->keys, r->n_keys);
}

bool mc_master_v_remove(const struct mc_store_msg *q)
{
	return s_ok(&q->body.remove_req.tenant) && s_ok(&q->body.remove_req.key);
}

bool mc_master_v_remove_regex(const struct mc_store_msg *q)
{
	return s_ok(&q->body.remove_regex_req.tenant) && s_ok(&q->body.remove_regex_req.pattern);
}

bool mc_master_v_remove_all(const struct mc_store_msg *q)
{
	return s_ok(&q->body.remove_all_req.tenant);
}

bool mc_master_v_batch_remove(const struct mc_store_msg *q)
{
	const struct mc_store_batch_remove_req *r = &q->body.batch_remove_req;

	return s_ok(&r->tenant) && strs_ok(r->keys, r->n_keys);
}

bool mc_master_v_replica_clear(const struct mc_store_msg *q)
{
	const struct mc_store_replica_clear_req *r = &q->body.replica_clear_req;

	return s_ok(&r->tenant) && s_ok(&r->segment_name) && strs_ok(r->keys, r->n_keys);
}

bool mc_master_v_copy_task(const struct mc_store_msg *q)
{
	const struct mc_store_copy_task_req *r = &q->body.copy_task_req;

	return s_ok(&r->tenant) && s_ok(&r->key) && strs_ok(r->targets, r->n_targets);
}

bool mc_master_v_change_replica(const struct mc_store_msg *q)
{
	const struct mc_store_change_replica_req *r = &q->body.change_replica_req;

	return s_ok(&r->tenant) && s_ok(&r->key);
}

bool mc_master_v_move_task(const struct mc_store_msg *q)
{
	const struct mc_store_move_task_req *r = &q->body.move_task_req;

	return s_ok(&r->tenant) && s_ok(&r->key) && s_ok(&r->source) && s_ok(&r->target);
}

bool mc_master_v_task_done(const struct mc_store_msg *q)
{
	return s_ok(&q->body.task_done_req.message);
}
