/* te/batch.h - batch table and completion (internal). */
#ifndef MC_TE_BATCH_H
#define MC_TE_BATCH_H

#include "te/engine.h"

void mc_batch_table_init(struct mc_te *te);
void mc_batch_table_release(struct mc_te *te);
mc_status mc_batch_alloc(struct mc_te *te, size_t capacity, struct mc_batch **out);
/* Borrowed pointer, NULL for an unknown, freed or discarded id. */
struct mc_batch *mc_batch_lookup(struct mc_te *te, mc_batch_id id);
/* Free now (MC_ERR_BATCH_BUSY while in flight) or, with discard, when done. */
mc_status mc_batch_release(struct mc_te *te, mc_batch_id id, bool discard);
void mc_batch_destroy(struct mc_batch *b);
mc_status mc_batch_wait_inflight(struct mc_batch *b, int64_t timeout_ms);
/* Whether a wait on b polls before it sleeps: not while more than 1 MiB of
 * its tasks is still to move (te/batch.c, "Waiting"). */
bool mc_batch_wait_spins(struct mc_batch *b);
/* The completion callback of a task's slices (owner: the task); runs on
 * the thread that finished the slice. */
void mc_task_slice_done(struct mc_slice *s, mc_status status);

static inline void mc_task_slice_init(struct mc_task *t, struct mc_slice *s)
{
	s->complete = mc_task_slice_done;
	s->owner = t;
	s->group = t->batch->id;
	s->checksum = t->batch->checksum;
}

/* Fail a task that never reached a transport. */
void mc_task_fail_now(struct mc_task *t, mc_status status);

#endif
