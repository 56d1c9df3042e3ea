/*
 * te/stage.c - the initiator side of device memory.
 *
 * A request whose local buffer is device memory cannot be handed to a
 * transport as it is: the TCP transport would send() from it or recv()
 * into it, the same-host target would process_vm_readv() it.  The engine
 * gives such a request to the stager instead, which cuts it into chunks
 * (MC_GPU_STAGE_CHUNK) and moves each through one of a small pool of pinned
 * bounce buffers (MC_GPU_STAGE_BUFFERS), handing host-memory slices to
 * whatever transport the target uses.  So TCP and the same-host path (and
 * its TCP fallback) get device memory without knowing about it.
 *
 *   write: device --D2H--> bounce --transport--> target
 *   read:  target --transport--> bounce --H2D--> device
 *
 * Pipelining: a request holds up to half the buffers (at least two), so
 * while chunk k is on the wire chunk k+1 is being copied out of the device
 * (write), or while chunk k is copied into the device chunk k+1 is arriving
 * (read); the chunks of one request go out together and the TCP transport
 * deals them over its connections.  Requests get buffers first come, first
 * served; a request that holds none waits for one.
 *
 * One thread per engine (started with the engine when a device-memory
 * backend exists) owns the buffers, the requests and every device copy, so
 * all CUDA calls of the initiator side come from it.  Transports report a
 * chunk's end through mc_slice_done(), which calls the chunk's own
 * completion callback (chunk_slice_done) on their threads; that only queues the chunk under
 * sg->lock and wakes the thread. The thread polls the copies it started (event queries) and, when a
 * round made no progress, blocks on the oldest copy, or sleeps on sg->cond when there is none.  A
 * copy is bounded (one chunk at PCIe speed), so blocking on it delays the handling of a transport
 * completion by at most that much.
 *
 * A read chunk's bytes are shown to the batch's staging callback, when it
 * has one (mc_te_batch_on_task_staged), in the pinned buffer before the
 * copy to the device: the store's integrity check hashes them there, the
 * only place a device-memory read's bytes are in host memory.
 *
 * The user's task has one slice, task->first, completed when the last
 * chunk ended; a failed chunk fails the task, after the chunks still in
 * flight came back (their buffers are not reused before).
 */
#define MC_LOG_MODULE "stage"
#include "te/stage.h"

#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "mem/devmem.h"
#include "transport/transport.h"

struct stage_req {
	struct mc_list node;
	struct mc_task *task;
	struct mc_peer *peer; /* its transport moves the chunks */
	uint8_t opcode;
	int dev;
	char *dptr; /* the device buffer */
	uint64_t remote;
	uint64_t len;
	uint64_t next; /* offset of the next chunk to start */
	unsigned held; /* chunks holding a buffer */
	mc_status error;
};

enum chunk_state { CH_FREE, CH_TO_HOST, CH_WIRE, CH_TO_DEV };

struct stage_chunk {
	struct mc_slice slice; /* bounce buffer <-> target, moved by a transport */
	struct mc_list node;   /* on sg->done (lock) or sg->copying (thread) */
	struct mc_stager *sg;
	struct stage_req *req;
	unsigned buf;
	enum chunk_state state;
	uint64_t off;
	mc_status status; /* the transport's verdict */
};

struct mc_stager {
	const struct mc_devmem_ops *ops;
	size_t chunk_size;
	unsigned nbufs, per_req;
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct mc_list incoming; /* new requests */
	struct mc_list done;	 /* chunks back from a transport */
	bool sleeping, stop;

	pthread_mutex_t submit_lock; /* held while chunks are handed to transports */
	bool quiesced;

	/* owned by the thread */
	struct mc_list active;	/* requests, oldest first */
	struct mc_list copying; /* chunks with a device copy in flight, oldest first */
	struct mc_devstage stage;
	bool stage_ok;
	struct stage_chunk *chunks; /* one per buffer */
	unsigned *free_bufs;
	unsigned nfree;
	struct mc_slice **out; /* slices to hand over this round */
	size_t nout;
};

/* A chunk's completion callback (transport/slice.h), on a transport's thread. */
static void chunk_slice_done(struct mc_slice *s, mc_status status)
{
	struct stage_chunk *ch = mc_container_of(s, struct stage_chunk, slice);
	struct mc_stager *sg = ch->sg;

	ch->status = status;
	pthread_mutex_lock(&sg->lock);
	mc_list_add_tail(&sg->done, &ch->node);
	if (sg->sleeping)
		pthread_cond_signal(&sg->cond);
	pthread_mutex_unlock(&sg->lock);
}

static void req_fail(struct stage_req *r, mc_status status)
{
	if (r->error == MC_OK)
		r->error = status;
}

static void chunk_free(struct mc_stager *sg, struct stage_chunk *ch)
{
	ch->req->held--;
	ch->req = NULL;
	ch->state = CH_FREE;
	sg->free_bufs[sg->nfree++] = ch->buf;
}

static void chunk_to_wire(struct mc_stager *sg, struct stage_chunk *ch)
{
	ch->state = CH_WIRE;
	sg->out[sg->nout++] = &ch->slice;
}

/* A device copy of ch ended with rc. */
static void copy_done(struct mc_stager *sg, struct stage_chunk *ch, mc_status rc)
{
	struct stage_req *r = ch->req;

	if (rc != MC_OK) {
		mc_error("device copy of %llu bytes failed: %s", (unsigned long long)ch->slice.len,
			 mc_strerror(rc));
		req_fail(r, rc);
		chunk_free(sg, ch);
	} else if (ch->state == CH_TO_DEV || r->error != MC_OK) {
		chunk_free(sg, ch); /* a read chunk is in place, or the request failed */
	} else {
		chunk_to_wire(sg, ch); /* a write chunk is in the bounce buffer */
	}
}

/* A transport finished ch. */
static void chunk_back(struct mc_stager *sg, struct stage_chunk *ch)
{
	struct stage_req *r = ch->req;
	mc_status rc;

	if (ch->status != MC_OK)
		req_fail(r, ch->status);
	if (r->opcode == MC_OP_WRITE || r->error != MC_OK) {
		chunk_free(sg, ch);
		return;
	}
	if (r->task->batch->task_staged) { /* the store checks the bytes here */
		struct mc_batch *b = r->task->batch;
		b->task_staged(b->task_staged_arg, (size_t)(r->task - b->tasks), ch->off,
			       mc_devstage_host(&sg->stage, ch->buf), ch->slice.len);
	}
	rc = mc_devstage_copy(&sg->stage, ch->buf, r->dev, r->dptr + ch->off,
			      mc_devstage_host(&sg->stage, ch->buf), (size_t)ch->slice.len);
	if (rc != MC_OK) {
		copy_done(sg, ch, rc);
		return;
	}
	ch->state = CH_TO_DEV;
	mc_list_add_tail(&sg->copying, &ch->node);
}

/* Give free buffers to the requests that want them, oldest first. */
static bool start_chunks(struct mc_stager *sg)
{
	struct mc_list *pos;
	bool progress = false;

	mc_list_for_each(pos, &sg->active) {
		struct stage_req *r = mc_list_entry(pos, struct stage_req, node);
		while (sg->nfree && r->error == MC_OK && r->next < r->len &&
		       r->held < sg->per_req) {
			unsigned b = sg->free_bufs[--sg->nfree];
			struct stage_chunk *ch = &sg->chunks[b];
			uint64_t len = MC_MIN((uint64_t)sg->chunk_size, r->len - r->next);
			mc_status rc;

			ch->req = r;
			ch->off = r->next;
			ch->status = MC_OK;
			r->next += len;
			r->held++;
			memset(&ch->slice, 0, sizeof(ch->slice));
			mc_list_init(&ch->slice.node);
			ch->slice.complete = chunk_slice_done;
			ch->slice.opcode = r->opcode;
			ch->slice.checksum = r->task->batch->checksum;
			ch->slice.local = (char *)mc_devstage_host(&sg->stage, b);
			ch->slice.remote_addr = r->remote + ch->off;
			ch->slice.len = len;
			progress = true;
			if (r->opcode == MC_OP_READ) {
				chunk_to_wire(sg, ch);
				continue;
			}
			rc = mc_devstage_copy(&sg->stage, b, r->dev, ch->slice.local,
					      r->dptr + ch->off, (size_t)len);
			if (rc != MC_OK) {
				copy_done(sg, ch, rc);
				continue;
			}
			ch->state = CH_TO_HOST;
			mc_list_add_tail(&sg->copying, &ch->node);
		}
		if (!sg->nfree)
			break;
	}
	return progress;
}

/* Hand this round's slices to their transports, consecutive ones with the
 * same transport and peer together. */
static void submit_out(struct mc_stager *sg)
{
	size_t n = sg->nout;

	if (!n)
		return;
	sg->nout = 0;
	pthread_mutex_lock(&sg->submit_lock);
	if (sg->quiesced) {
		pthread_mutex_unlock(&sg->submit_lock);
		for (size_t i = 0; i < n; i++)
			mc_slice_done(sg->out[i], MC_ERR_SHUTDOWN);
		return;
	}
	for (size_t i = 0; i < n;) {
		struct stage_req *r = mc_container_of(sg->out[i], struct stage_chunk, slice)->req;
		size_t j = i + 1;
		while (j < n) {
			struct stage_req *q =
				mc_container_of(sg->out[j], struct stage_chunk, slice)->req;
			if (q->peer != r->peer)
				break;
			j++;
		}
		/* from here the chunks may come back on another thread */
		mc_transport_submit(r->peer->tp, r->peer, &sg->out[i], j - i);
		i = j;
	}
	pthread_mutex_unlock(&sg->submit_lock);
}

/* Complete the requests that have nothing left in flight. */
static void finish_requests(struct mc_stager *sg)
{
	struct mc_list *pos, *tmp;

	mc_list_for_each_safe(pos, tmp, &sg->active) {
		struct stage_req *r = mc_list_entry(pos, struct stage_req, node);
		struct mc_task *t = r->task;
		mc_status status = r->error;

		if (r->held || (status == MC_OK && r->next < r->len))
			continue;
		mc_list_del(&r->node);
		mc_free(r);
		mc_slice_done(&t->first, status); /* may free the batch: t is gone */
	}
}

/* Pinned memory comes at the first request, so engines that never see
 * device memory pin nothing. */
static mc_status stage_ready(struct mc_stager *sg)
{
	mc_status rc;

	if (sg->stage_ok)
		return MC_OK;
	rc = mc_devstage_init(&sg->stage, sg->ops, sg->nbufs, sg->chunk_size);
	if (rc != MC_OK) {
		mc_error("cannot pin %u staging buffers of %zu bytes: %s", sg->nbufs,
			 sg->chunk_size, mc_last_error());
		return rc;
	}
	for (unsigned i = 0; i < sg->nbufs; i++) {
		sg->chunks[i].sg = sg;
		sg->chunks[i].buf = i;
		sg->free_bufs[i] = sg->nbufs - 1 - i;
	}
	sg->nfree = sg->nbufs;
	sg->stage_ok = true;
	return MC_OK;
}

/* One pass over everything that happened; false when nothing moved. */
static bool run_round(struct mc_stager *sg, struct mc_list *in, struct mc_list *done)
{
	struct mc_list *pos, *tmp;
	bool progress = !mc_list_empty(in) || !mc_list_empty(done);

	while (!mc_list_empty(in)) {
		struct stage_req *r = mc_list_first(in, struct stage_req, node);
		mc_status rc = stage_ready(sg);
		mc_list_del(&r->node);
		if (rc != MC_OK)
			req_fail(r, rc);
		mc_list_add_tail(&sg->active, &r->node);
	}
	while (!mc_list_empty(done)) {
		struct stage_chunk *ch = mc_list_first(done, struct stage_chunk, node);
		mc_list_del(&ch->node);
		chunk_back(sg, ch);
	}
	mc_list_for_each_safe(pos, tmp, &sg->copying) {
		struct stage_chunk *ch = mc_list_entry(pos, struct stage_chunk, node);
		mc_status rc = mc_devstage_query(&sg->stage, ch->buf);
		if (rc == MC_INPROGRESS)
			continue;
		mc_list_del(&ch->node);
		copy_done(sg, ch, rc);
		progress = true;
	}
	if (start_chunks(sg))
		progress = true;
	submit_out(sg);
	finish_requests(sg);
	return progress;
}

static void *stager_main(void *arg)
{
	struct mc_stager *sg = arg;
	struct mc_list in = MC_LIST_INIT(in), done = MC_LIST_INIT(done);

	for (;;) {
		pthread_mutex_lock(&sg->lock);
		for (;;) {
			mc_list_splice_tail(&in, &sg->incoming);
			mc_list_splice_tail(&done, &sg->done);
			if (!mc_list_empty(&in) || !mc_list_empty(&done) ||
			    !mc_list_empty(&sg->copying))
				break;
			if (sg->stop && mc_list_empty(&sg->active)) {
				pthread_mutex_unlock(&sg->lock);
				return NULL;
			}
			sg->sleeping = true;
			pthread_cond_wait(&sg->cond, &sg->lock);
			sg->sleeping = false;
		}
		pthread_mutex_unlock(&sg->lock);
		if (!run_round(sg, &in, &done) && !mc_list_empty(&sg->copying)) {
			/* nothing else to do: wait for the oldest copy */
			struct stage_chunk *ch =
				mc_list_first(&sg->copying, struct stage_chunk, node);
			mc_status rc = mc_devstage_wait(&sg->stage, ch->buf);
			mc_list_del(&ch->node);
			copy_done(sg, ch, rc);
			start_chunks(sg);
			submit_out(sg);
			finish_requests(sg);
		}
	}
}

void mc_stager_submit(struct mc_stager *sg, struct mc_task *t, struct mc_peer *peer,
		      const struct mc_xfer_req *r, int dev)
{
	struct stage_req *q = mc_calloc(1, sizeof(*q));

	if (!q) {
		mc_slice_done(&t->first, MC_ERR_NOMEM);
		return;
	}
	q->task = t;
	q->peer = peer;
	q->opcode = (uint8_t)r->opcode;
	q->dev = dev;
	q->dptr = (char *)r->source;
	q->remote = r->target_offset;
	q->len = r->length;
	pthread_mutex_lock(&sg->lock);
	mc_list_add_tail(&sg->incoming, &q->node);
	if (sg->sleeping)
		pthread_cond_signal(&sg->cond);
	pthread_mutex_unlock(&sg->lock);
}

void mc_stager_quiesce(struct mc_stager *sg)
{
	if (!sg)
		return;
	pthread_mutex_lock(&sg->submit_lock);
	sg->quiesced = true;
	pthread_mutex_unlock(&sg->submit_lock);
}

void mc_stager_close(struct mc_stager *sg)
{
	if (!sg)
		return;
	if (sg->started) {
		mc_stager_quiesce(sg);
		pthread_mutex_lock(&sg->lock);
		sg->stop = true;
		pthread_cond_signal(&sg->cond);
		pthread_mutex_unlock(&sg->lock);
		pthread_join(sg->thread, NULL);
	}
	if (sg->stage_ok)
		mc_devstage_release(&sg->stage);
	pthread_mutex_destroy(&sg->lock);
	pthread_cond_destroy(&sg->cond);
	pthread_mutex_destroy(&sg->submit_lock);
	mc_free(sg->chunks);
	mc_free(sg->free_bufs);
	mc_free(sg->out);
	mc_free(sg);
}

mc_status mc_stager_open(struct mc_te *te, struct mc_stager **out)
{
	struct mc_stager *sg = mc_calloc(1, sizeof(*sg));

	if (!sg)
		return MC_ERR_NOMEM;
	sg->ops = te->devmem;
	sg->chunk_size = (size_t)te->stage_cfg.stage_chunk;
	sg->nbufs = (unsigned)te->stage_cfg.stage_buffers;
	sg->per_req = MC_MAX(2u, sg->nbufs / 2);
	pthread_mutex_init(&sg->lock, NULL);
	pthread_cond_init(&sg->cond, NULL);
	pthread_mutex_init(&sg->submit_lock, NULL);
	mc_list_init(&sg->incoming);
	mc_list_init(&sg->done);
	mc_list_init(&sg->active);
	mc_list_init(&sg->copying);
	sg->chunks = mc_calloc(sg->nbufs, sizeof(*sg->chunks));
	sg->free_bufs = mc_calloc(sg->nbufs, sizeof(*sg->free_bufs));
	sg->out = mc_calloc(sg->nbufs, sizeof(*sg->out));
	if (!sg->chunks || !sg->free_bufs || !sg->out) {
		mc_stager_close(sg);
		return MC_ERR_NOMEM;
	}
	if (pthread_create(&sg->thread, NULL, stager_main, sg) != 0) {
		mc_stager_close(sg);
		return mc_set_error(MC_ERR_INTERNAL, "cannot start the staging thread");
	}
	sg->started = true;
	*out = sg;
	return MC_OK;
}
