/*
 * te/submit.c - batches and submission: the public batch calls, cutting
 * requests into slices and handing runs of same-peer slices to their
 * transport (one indirect call per run), device-memory requests to the
 * stager (te/stage.c), and the status and wait calls.  The batch table
 * and completion are in te/batch.c.
 */
#define MC_LOG_MODULE "te"
#include "te/engine.h"

#include <sched.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "te/batch.h"
#include "te/stage.h"
#include "transport/transport.h"

mc_status mc_te_batch_new(struct mc_te *te, size_t capacity, mc_batch_id *id_out)
{
	struct mc_batch *b;
	mc_status rc;
	if (!te || !id_out)
		return MC_ERR_INVALID_PARAMS;
	rc = mc_batch_alloc(te, capacity, &b);
	if (rc == MC_OK)
		*id_out = b->id;
	return rc;
}

mc_status mc_te_batch_free(struct mc_te *te, mc_batch_id id)
{
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	return mc_batch_release(te, id, false);
}

mc_status mc_te_batch_discard(struct mc_te *te, mc_batch_id id)
{
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	return mc_batch_release(te, id, true);
}

int mc_te_local_device(struct mc_te *te, const void *p, uint64_t len)
{
	return mc_memreg_ptr_device(&te->memreg, te->devmem, p, len);
}

bool mc_te_local_registered(struct mc_te *te, const void *p, uint64_t len)
{
	int dev;
	return !len || mc_memreg_device(&te->memreg, (uint64_t)(uintptr_t)p, len, &dev, NULL);
}

bool mc_te_local_writable(struct mc_te *te, const void *p, uint64_t len)
{
	int dev;
	bool ro = false;
	return !len ||
	       (mc_memreg_device(&te->memreg, (uint64_t)(uintptr_t)p, len, &dev, &ro) && !ro);
}

/* The batch of id, or NULL with MC_ERR_BATCH_NOT_FOUND recorded. */
static struct mc_batch *find_batch(struct mc_te *te, mc_batch_id id)
{
	struct mc_batch *b = mc_batch_lookup(te, id);

	if (!b)
		mc_set_error(MC_ERR_BATCH_NOT_FOUND, "unknown batch id 0x%llx",
			     (unsigned long long)id);
	return b;
}

/* Validate every request before any starts; resolve each target's peer
 * (NULL = the local segment) and transport. */
static mc_status submit_checks(struct mc_te *te, struct mc_batch *b, const struct mc_xfer_req *reqs,
			       size_t n, bool check_local, struct mc_peer **peers,
			       struct mc_transport **tps)
{
	if (b->ntasks + n > b->capacity)
		return mc_set_error(MC_ERR_TOO_MANY_REQUESTS,
				    "batch holds %zu of %zu tasks; %zu more do not fit", b->ntasks,
				    b->capacity, n);
	for (size_t i = 0; i < n; i++) {
		const struct mc_xfer_req *r = &reqs[i];
		struct mc_segment *seg;
		bool refresh;
		if (r->opcode != MC_OP_READ && r->opcode != MC_OP_WRITE)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "request %zu: bad opcode %d", i,
					    r->opcode);
		if (r->length && !r->source)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "request %zu: NULL source", i);
		if (r->length && r->target_offset + r->length < r->target_offset)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "request %zu: target range overflows", i);
		/* the local side: a wild pointer or a length past the caller's
		 * buffer would otherwise be read, or written, by a worker */
		if (check_local && !mc_te_local_registered(te, r->source, r->length))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "request %zu: local range %p+%llu is not inside one "
					    "registered buffer",
					    i, r->source, (unsigned long long)r->length);
		if (check_local && r->opcode == MC_OP_READ &&
		    !mc_te_local_writable(te, r->source, r->length))
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "request %zu: a read into %p+%llu, which is registered "
					    "read-only",
					    i, r->source, (unsigned long long)r->length);
		peers[i] = NULL;
		tps[i] = te->local_tp;
		if (r->target_id == MC_LOCAL_SEGMENT)
			continue;
		if (i > 0 && r->target_id == reqs[i - 1].target_id) {
			peers[i] = peers[i - 1];
			tps[i] = tps[i - 1];
			continue;
		}
		seg = mc_te_segment_get(te, r->target_id);
		if (!seg)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "request %zu: unknown segment %llu", i,
					    (unsigned long long)r->target_id);
		pthread_rwlock_rdlock(&te->seg_lock);
		refresh = atomic_load(&seg->stale) || (seg->peer && mc_peer_failed(seg->peer));
		pthread_rwlock_unlock(&te->seg_lock);
		if (refresh && mc_te_segment_refresh(te, seg) != MC_OK)
			mc_debug("refresh of %s failed: %s", seg->name, mc_last_error());
		pthread_rwlock_rdlock(&te->seg_lock);
		peers[i] = seg->peer;
		if (peers[i])
			tps[i] = peers[i]->tp;
		else
			mc_set_error(MC_ERR_TRANSPORT_UNSUPPORTED,
				     "request %zu: segment %s speaks %s, not tcp", i, seg->name,
				     seg->desc->protocol);
		pthread_rwlock_unlock(&te->seg_lock);
		if (!peers[i])
			return MC_ERR_TRANSPORT_UNSUPPORTED;
	}
	return MC_OK;
}

static mc_status do_submit(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs,
			   size_t n, bool check_local, const char *notify_name,
			   const char *notify_msg)
{
	struct mc_batch *b;
	struct mc_peer *segs_stack[64], **segs = segs_stack;
	struct mc_transport *tps_stack[64], **tps = tps_stack;
	struct mc_slice *slices_stack[256], **slices = slices_stack;
	size_t nslices = 0, cap_slices = MC_ARRAY_SIZE(slices_stack);
	size_t base;
	mc_status rc;

	if (!te || (!reqs && n))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "submit: NULL argument");
	b = find_batch(te, id);
	if (!b)
		return MC_ERR_BATCH_NOT_FOUND;
	if (n > MC_ARRAY_SIZE(segs_stack)) {
		segs = mc_calloc(n, sizeof(*segs));
		tps = mc_calloc(n, sizeof(*tps));
		if (!segs || !tps) {
			mc_free(segs);
			mc_free(tps);
			return MC_ERR_NOMEM;
		}
	}
	rc = submit_checks(te, b, reqs, n, check_local, segs, tps);
	if (rc != MC_OK)
		goto out;
	if (notify_name) {
		mc_free(b->notify_name);
		mc_free(b->notify_msg);
		b->notify_name = mc_strdup(notify_name);
		b->notify_msg = mc_strdup(notify_msg ? notify_msg : "");
		b->notify_target = reqs[0].target_id;
		atomic_store(&b->notify_sent, false);
	}

	base = b->ntasks;
	b->ntasks += n;
	atomic_fetch_add(&b->inflight, (unsigned)n);

	/* Build every task's slices, then hand runs of same-target slices over. */
	for (size_t i = 0; i < n; i++) {
		const struct mc_xfer_req *r = &reqs[i];
		struct mc_task *t = &b->tasks[base + i];
		struct mc_transport *tp = tps[i];
		unsigned k = r->length ? mc_transport_split(tp, r->length) : 1;
		uint64_t per, off = 0;
		int dev;

		memset(t, 0, sizeof(*t));
		t->batch = b;
		t->length = r->length;
		t->target = r->target_id;
		atomic_store(&t->state, MC_XFER_WAITING);
		if (r->length) {
			/* held until the task ends: a deregistration waits for it */
			t->local_ent = mc_memreg_hold(&te->memreg, (uint64_t)(uintptr_t)r->source,
						      r->length);
			if (!t->local_ent && check_local) {
				/* deregistered since submit_checks */
				mc_set_error(MC_ERR_ADDRESS_NOT_REGISTERED,
					     "request %zu: local range %p+%llu was deregistered", i,
					     r->source, (unsigned long long)r->length);
				mc_task_fail_now(t, MC_ERR_ADDRESS_NOT_REGISTERED);
				continue;
			}
		}
		if (r->length == 0) {
			atomic_store(&t->slices_left, 1);
			mc_task_slice_init(t, &t->first);
			mc_slice_done(&t->first, MC_OK);
			continue;
		}
		if (!tp->ops->caps.device_memory &&
		    (dev = mc_te_local_device(te, r->source, r->length)) >= 0) {
			/* device memory: through bounce buffers (te/stage.c) */
			atomic_store(&t->slices_left, 1);
			t->nslices = 1;
			mc_task_slice_init(t, &t->first);
			t->first.len = r->length;
			mc_stager_submit(te->stager, t, segs[i], r, dev);
			continue;
		}
		if (k > 1) {
			t->extra = mc_calloc(k - 1, sizeof(*t->extra));
			if (!t->extra)
				k = 1;
		}
		t->nslices = k;
		atomic_store(&t->slices_left, k);
		per = r->length / k;
		if (nslices + k > cap_slices) {
			size_t ncap = (nslices + k) * 2;
			struct mc_slice **p = mc_malloc(ncap * sizeof(*p));
			if (!p) {
				/* cannot queue: fail this task, keep going */
				mc_task_fail_now(t, MC_ERR_NOMEM);
				continue;
			}
			memcpy(p, slices, nslices * sizeof(*p));
			if (slices != slices_stack)
				mc_free(slices);
			slices = p;
			cap_slices = ncap;
		}
		for (unsigned j = 0; j < k; j++) {
			struct mc_slice *s = j == 0 ? &t->first : &t->extra[j - 1];
			uint64_t len = j == k - 1 ? r->length - off : per;
			mc_task_slice_init(t, s);
			s->opcode = (uint8_t)r->opcode;
			s->local = (char *)r->source + off;
			s->remote_addr = r->target_offset + off;
			s->len = len;
			off += len;
			slices[nslices++] = s;
		}
	}

	for (size_t i = 0; i < nslices;) {
		size_t ti = (size_t)((struct mc_task *)slices[i]->owner - &b->tasks[base]);
		struct mc_peer *seg = segs[ti];
		size_t j = i + 1;
		while (j < nslices &&
		       segs[(struct mc_task *)slices[j]->owner - &b->tasks[base]] == seg)
			j++;
		mc_transport_submit(tps[ti], seg, &slices[i], j - i);
		i = j;
	}
	rc = MC_OK;
out:
	if (segs != segs_stack) {
		mc_free(segs);
		mc_free(tps);
	}
	if (slices != slices_stack)
		mc_free(slices);
	return rc;
}

mc_status mc_te_submit(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs, size_t n)
{
	return do_submit(te, id, reqs, n, true, NULL, NULL);
}

mc_status mc_te_submit_unchecked(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs,
				 size_t n)
{
	return do_submit(te, id, reqs, n, false, NULL, NULL);
}

/* The batch of id, for a callback `what` that may only be set before its
 * first submit. */
static mc_status batch_before_submit(struct mc_te *te, mc_batch_id id, const char *what,
				     struct mc_batch **b_out)
{
	struct mc_batch *b;

	if (!te)
		return MC_ERR_INVALID_PARAMS;
	b = find_batch(te, id);
	if (!b)
		return MC_ERR_BATCH_NOT_FOUND;
	if (b->ntasks)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "batch 0x%llx: a %s callback is set before any submit",
				    (unsigned long long)id, what);
	*b_out = b;
	return MC_OK;
}

mc_status mc_te_batch_on_task_end(struct mc_te *te, mc_batch_id id, mc_task_end_cb cb, void *arg)
{
	struct mc_batch *b = NULL;
	mc_status st = batch_before_submit(te, id, "task-end", &b);

	if (st != MC_OK)
		return st;
	b->task_end = cb;
	b->task_end_arg = arg;
	return MC_OK;
}

mc_status mc_te_batch_on_task_staged(struct mc_te *te, mc_batch_id id, mc_task_staged_cb cb,
				     void *arg)
{
	struct mc_batch *b = NULL;
	mc_status st = batch_before_submit(te, id, "staging", &b);

	if (st != MC_OK)
		return st;
	b->task_staged = cb;
	b->task_staged_arg = arg;
	return MC_OK;
}

mc_status mc_te_submit_with_notify(struct mc_te *te, mc_batch_id id, const struct mc_xfer_req *reqs,
				   size_t n, const char *notify_name, const char *notify_msg)
{
	if (n == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "submit with notify: no requests");
	return do_submit(te, id, reqs, n, true, notify_name ? notify_name : "", notify_msg);
}

static void maybe_send_batch_notify(struct mc_te *te, struct mc_batch *b)
{
	if (!b->notify_name || atomic_load(&b->inflight) != 0)
		return;
	for (size_t i = 0; i < b->ntasks; i++)
		if (atomic_load(&b->tasks[i].state) != MC_XFER_COMPLETED)
			return;
	if (atomic_exchange(&b->notify_sent, true))
		return;
	if (mc_te_notify_send(te, b->notify_target, b->notify_name, b->notify_msg) != MC_OK)
		mc_warn("batch notify to segment %llu failed: %s",
			(unsigned long long)b->notify_target, mc_last_error());
}

mc_status mc_te_task_status(struct mc_te *te, mc_batch_id id, size_t task,
			    struct mc_xfer_status *status_out)
{
	struct mc_batch *b;
	struct mc_task *t;
	if (!te || !status_out)
		return MC_ERR_INVALID_PARAMS;
	b = find_batch(te, id);
	if (!b)
		return MC_ERR_BATCH_NOT_FOUND;
	if (task >= b->ntasks)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "task %zu out of range (%zu tasks)",
				    task, b->ntasks);
	t = &b->tasks[task];
	status_out->state = atomic_load_explicit(&t->state, memory_order_acquire);
	status_out->error = status_out->state == MC_XFER_FAILED ? atomic_load(&t->error) : MC_OK;
	status_out->transferred_bytes = atomic_load(&t->bytes);
	if (status_out->state == MC_XFER_COMPLETED)
		maybe_send_batch_notify(te, b);
	else if (status_out->state == MC_XFER_WAITING)
		sched_yield(); /* a spinning poller must not starve the workers */
	return MC_OK;
}

static void batch_status(struct mc_batch *b, struct mc_xfer_status *st)
{
	bool all = true;
	st->state = MC_XFER_WAITING;
	st->error = MC_OK;
	st->transferred_bytes = 0;
	for (size_t i = 0; i < b->ntasks; i++) {
		int s = atomic_load_explicit(&b->tasks[i].state, memory_order_acquire);
		if (s == MC_XFER_FAILED || s == MC_XFER_TIMEOUT) {
			if (st->state != MC_XFER_FAILED) {
				st->state = MC_XFER_FAILED;
				st->error = atomic_load(&b->tasks[i].error);
			}
			all = false;
		} else if (s == MC_XFER_COMPLETED) {
			st->transferred_bytes += b->tasks[i].length;
		} else {
			all = false;
		}
	}
	if (all && st->state != MC_XFER_FAILED)
		st->state = MC_XFER_COMPLETED;
}

mc_status mc_te_batch_status(struct mc_te *te, mc_batch_id id, struct mc_xfer_status *status_out)
{
	struct mc_batch *b;
	if (!te || !status_out)
		return MC_ERR_INVALID_PARAMS;
	b = find_batch(te, id);
	if (!b)
		return MC_ERR_BATCH_NOT_FOUND;
	batch_status(b, status_out);
	if (status_out->state == MC_XFER_COMPLETED)
		maybe_send_batch_notify(te, b);
	else if (status_out->state == MC_XFER_WAITING)
		sched_yield(); /* a spinning poller must not starve the workers */
	return MC_OK;
}

mc_status mc_te_batch_wait(struct mc_te *te, mc_batch_id id, int64_t timeout_ms,
			   struct mc_xfer_status *status_out)
{
	struct mc_batch *b;
	struct mc_xfer_status st;
	mc_status rc;
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	b = find_batch(te, id);
	if (!b)
		return MC_ERR_BATCH_NOT_FOUND;
	rc = mc_batch_wait_inflight(b, timeout_ms);
	batch_status(b, &st);
	if (status_out)
		*status_out = st;
	if (rc != MC_OK)
		return mc_set_error(rc, "batch 0x%llx not done after %lld ms",
				    (unsigned long long)id, (long long)timeout_ms);
	if (st.state == MC_XFER_COMPLETED) {
		maybe_send_batch_notify(te, b);
		return MC_OK;
	}
	return mc_set_error(st.error ? st.error : MC_ERR_TRANSFER_FAIL, "batch 0x%llx failed: %s",
			    (unsigned long long)id, mc_strerror(st.error));
}

mc_status mc_te_transfer_sync(struct mc_te *te, const struct mc_xfer_req *reqs, size_t n,
			      int64_t timeout_ms)
{
	mc_batch_id id;
	mc_status rc;
	if (n == 0)
		return MC_OK;
	rc = mc_te_batch_new(te, n, &id);
	if (rc != MC_OK)
		return rc;
	rc = mc_te_submit(te, id, reqs, n);
	if (rc != MC_OK) {
		mc_te_batch_discard(te, id);
		return rc;
	}
	rc = mc_te_batch_wait(te, id, timeout_ms, NULL);
	/* on timeout the tasks still run; the batch goes when they end */
	mc_te_batch_discard(te, id);
	return rc;
}
