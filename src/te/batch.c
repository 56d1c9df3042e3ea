/*
 * te/batch.c - batches, tasks and completion.
 *
 * A batch id is (slot index + 1) << 32 | generation, so a stale or forged
 * id is refused (MC_ERR_BATCH_NOT_FOUND) instead of dereferenced, unlike
 * upstream's raw pointers.  Completion is lock-free: each slice of a task
 * carries mc_task_slice_done as its completion callback (transport/slice.h),
 * which decrements the task's slices_left; the last one sets the task's terminal state and
 * decrements the batch's inflight count, which doubles as a futex word so
 * mc_te_batch_wait sleeps without polling.  A batch marked discard is freed
 * by whichever thread ends its last task.  A batch may carry a callback
 * (mc_te_batch_on_task_end) that the last slice's completer runs before
 * publishing the task's end.
 */
#define MC_LOG_MODULE "batch"
#include "te/batch.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"

static void futex_wake_all(atomic_uint *w)
{
	syscall(SYS_futex, (void *)w, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* The system call's result, not a status: 0, or -1 with errno (EAGAIN, ETIMEDOUT, EINTR). */
static int futex_wait(atomic_uint *w, unsigned expected, const struct timespec *rel)
{
	return (int)syscall(SYS_futex, (void *)w, FUTEX_WAIT_PRIVATE, expected, rel, NULL, 0);
}

void mc_batch_destroy(struct mc_batch *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < b->ntasks; i++)
		mc_free(b->tasks[i].extra);
	mc_free(b->tasks);
	mc_free(b->notify_name);
	mc_free(b->notify_msg);
	mc_free(b);
}

/* Remove the batch from the slot table; the caller frees it. */
static void unlink_batch(struct mc_te *te, struct mc_batch *b)
{
	uint32_t slot = (uint32_t)(b->id >> 32) - 1;
	pthread_mutex_lock(&te->batch_lock);
	if (slot < te->nbatch_slots && te->batches[slot] == b) {
		te->batches[slot] = NULL;
		te->batch_gen[slot]++;
		te->batch_free[te->nbatch_free++] = slot;
	}
	pthread_mutex_unlock(&te->batch_lock);
}

/*
 * Wait for a counter that a completer is a few instructions away from
 * dropping.  Spin briefly, then yield: the completer may have been
 * preempted in between (its futex wake-up often hands the CPU to the very
 * thread waiting here), and a pure spin would then burn a whole time slice
 * before it runs again -- milliseconds of tail latency per batch on a
 * 2-core machine.
 */
static void wait_zero(atomic_uint *v)
{
	for (unsigned i = 0; atomic_load(v) > 0; i++) {
		if (i < 64)
			mc_cpu_relax();
		else
			sched_yield();
	}
}

static void wait_not_busy(struct mc_batch *b)
{
	wait_zero(&b->busy);
}

/*
 * The completing thread still touches the batch after inflight reaches 0
 * (futex wake, discard check).  `busy` is raised before the decrement, so a
 * thread that sees inflight == 0 and wants to free the batch first waits for
 * busy to drop (a few instructions and one syscall away).  A releasing
 * thread raises busy too, for as long as it touches the batch, because the
 * last completer may free a batch whose release it raced with: whichever
 * of the two wins the `freed` exchange frees, after busy is zero, and the
 * loser's last access is its busy decrement.
 */
static void task_finish(struct mc_task *t)
{
	struct mc_batch *b = t->batch;
	struct mc_memreg_entry *ent = t->local_ent;
	int err = atomic_load(&t->error);
	t->local_ent = NULL;
	if (b->task_end)
		b->task_end(b->task_end_arg, (size_t)(t - b->tasks), err);
	atomic_store_explicit(&t->state, err ? MC_XFER_FAILED : MC_XFER_COMPLETED,
			      memory_order_release);
	/* After the state (a deregistration this lets return finds the task
	 * ended) and before inflight drops (so a batch wait's caller finds the
	 * range free, and b is still ours: no releaser frees it before then). */
	if (ent)
		mc_memreg_put(&b->te->memreg, ent);
	atomic_fetch_add(&b->busy, 1);
	if (atomic_fetch_sub(&b->inflight, 1) == 1) {
		/* no system call when nobody sleeps (a waiter polling, or none
		 * yet): a sleeper counts itself before its futex wait, which
		 * then finds inflight changed if this load missed it */
		if (atomic_load(&b->sleepers))
			futex_wake_all(&b->inflight);
		if (atomic_load(&b->discard) && !atomic_exchange(&b->freed, true)) {
			atomic_fetch_sub(&b->busy, 1);
			/* a releasing thread may still be inside (it holds busy
			 * until its last access): let it leave first */
			wait_not_busy(b);
			unlink_batch(b->te, b);
			mc_batch_destroy(b);
			return;
		}
	}
	atomic_fetch_sub(&b->busy, 1);
}

void mc_task_slice_done(struct mc_slice *s, mc_status status)
{
	struct mc_task *t = s->owner;
	if (status != MC_OK) {
		int zero = 0;
		atomic_compare_exchange_strong(&t->error, &zero, status);
	} else {
		atomic_fetch_add(&t->bytes, s->len);
	}
	if (atomic_fetch_sub(&t->slices_left, 1) == 1)
		task_finish(t);
}

void mc_task_fail_now(struct mc_task *t, mc_status status)
{
	atomic_store(&t->error, status);
	atomic_store(&t->slices_left, 0);
	task_finish(t);
}

void mc_batch_table_init(struct mc_te *te)
{
	pthread_mutex_init(&te->batch_lock, NULL);
}

void mc_batch_table_release(struct mc_te *te)
{
	for (size_t i = 0; i < te->nbatch_slots; i++)
		if (te->batches[i])
			mc_batch_destroy(te->batches[i]);
	mc_free(te->batches);
	mc_free(te->batch_gen);
	mc_free(te->batch_free);
	pthread_mutex_destroy(&te->batch_lock);
}

mc_status mc_batch_alloc(struct mc_te *te, size_t capacity, struct mc_batch **out)
{
	struct mc_batch *b;
	uint32_t slot;
	mc_status rc = MC_OK;

	if (capacity == 0 || capacity > (1u << 24))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "batch capacity %zu out of range",
				    capacity);
	b = mc_calloc(1, sizeof(*b));
	if (!b)
		return MC_ERR_NOMEM;
	b->tasks = mc_calloc(capacity, sizeof(*b->tasks));
	if (!b->tasks) {
		mc_free(b);
		return MC_ERR_NOMEM;
	}
	b->capacity = capacity;
	b->te = te;
	b->checksum = atomic_load(&te->checksum);

	pthread_mutex_lock(&te->batch_lock);
	if (te->nbatch_free == 0) {
		size_t ncap = te->nbatch_slots ? te->nbatch_slots * 2 : 64;
		void *nb, *ng, *nf;
		if (ncap > UINT32_MAX - 1) {
			rc = MC_ERR_NOMEM;
			goto out_unlock;
		}
		nb = mc_realloc(te->batches, ncap * sizeof(*te->batches));
		if (nb)
			te->batches = nb;
		ng = mc_realloc(te->batch_gen, ncap * sizeof(*te->batch_gen));
		if (ng)
			te->batch_gen = ng;
		nf = mc_realloc(te->batch_free, ncap * sizeof(*te->batch_free));
		if (nf)
			te->batch_free = nf;
		if (!nb || !ng || !nf) {
			rc = MC_ERR_NOMEM;
			goto out_unlock;
		}
		for (size_t i = te->nbatch_slots; i < ncap; i++) {
			te->batches[i] = NULL;
			te->batch_gen[i] = 1;
		}
		/* push in reverse so low slots are used first */
		for (size_t i = ncap; i > te->nbatch_slots; i--)
			te->batch_free[te->nbatch_free++] = (uint32_t)(i - 1);
		te->nbatch_slots = ncap;
	}
	slot = te->batch_free[--te->nbatch_free];
	te->batches[slot] = b;
	b->id = ((uint64_t)(slot + 1) << 32) | te->batch_gen[slot];
out_unlock:
	pthread_mutex_unlock(&te->batch_lock);
	if (rc != MC_OK) {
		mc_batch_destroy(b);
		return rc;
	}
	*out = b;
	return MC_OK;
}

struct mc_batch *mc_batch_lookup(struct mc_te *te, mc_batch_id id)
{
	uint32_t slot = (uint32_t)(id >> 32);
	struct mc_batch *b = NULL;
	if (slot == 0)
		return NULL;
	slot--;
	pthread_mutex_lock(&te->batch_lock);
	if (slot < te->nbatch_slots && te->batches[slot] && te->batches[slot]->id == id &&
	    !atomic_load(&te->batches[slot]->discard))
		b = te->batches[slot];
	pthread_mutex_unlock(&te->batch_lock);
	return b;
}

static bool all_terminal(struct mc_batch *b)
{
	for (size_t i = 0; i < b->ntasks; i++) {
		int st = atomic_load(&b->tasks[i].state);
		if (st != MC_XFER_COMPLETED && st != MC_XFER_FAILED)
			return false;
	}
	return true;
}

mc_status mc_batch_release(struct mc_te *te, mc_batch_id id, bool discard)
{
	struct mc_batch *b = mc_batch_lookup(te, id);
	if (!b)
		return mc_set_error(MC_ERR_BATCH_NOT_FOUND, "unknown batch id 0x%llx",
				    (unsigned long long)id);
	if (atomic_load(&b->inflight) > 0 && all_terminal(b)) {
		/* every task shows its end state, but the last completer has not
		 * decremented inflight yet: it is a few instructions away */
		wait_zero(&b->inflight);
	}
	if (atomic_load(&b->inflight) > 0 && !discard)
		return mc_set_error(MC_ERR_BATCH_BUSY, "batch 0x%llx has tasks in flight",
				    (unsigned long long)id);
	/* From the discard flag on, the last completer may free the batch:
	 * hold busy while touching it (see task_finish). */
	atomic_fetch_add(&b->busy, 1);
	atomic_store(&b->discard, true);
	/* with tasks still in flight the last completion frees it; it may
	 * also have raced ahead of the flag, hence the exchange */
	if (atomic_load(&b->inflight) > 0 || atomic_exchange(&b->freed, true)) {
		atomic_fetch_sub(&b->busy, 1); /* the last access */
		return MC_OK;
	}
	atomic_fetch_sub(&b->busy, 1);
	wait_not_busy(b);
	unlink_batch(te, b);
	mc_batch_destroy(b);
	return MC_OK;
}

/*
 * Waiting: first poll for up to WAIT_SPIN_NS, yielding the CPU between
 * polls (so a worker on the same core still runs), then sleep on the futex.
 * A futex wake-up costs tens of microseconds on a virtual machine, more than
 * a small request's whole round trip, so short transfers finish inside the
 * polling window; long ones sleep and leave the cores to the workers.
 *
 * A wait that finds more than WAIT_SPIN_BYTES still to move sleeps at once:
 * that much outlasts the window at any rate the transports reach (10 GB/s
 * would be needed), so the poll would end in the same sleep and the same
 * wake-up, having cost a system call or two per microsecond of it (a store
 * batch put of 32 x 64 KiB made about 4 sched_yield calls per object).
 */
#define WAIT_SPIN_NS	100000ull
#define WAIT_SPIN_BYTES (1ull << 20)

bool mc_batch_wait_spins(struct mc_batch *b)
{
	uint64_t left = 0;

	for (size_t i = 0; i < b->ntasks; i++) {
		struct mc_task *t = &b->tasks[i];
		uint64_t done = atomic_load_explicit(&t->bytes, memory_order_relaxed);

		if (atomic_load_explicit(&t->state, memory_order_relaxed) > MC_XFER_PENDING)
			continue; /* ended (or never started: nothing to wait for) */
		left += t->length > done ? t->length - done : 0;
		if (left > WAIT_SPIN_BYTES)
			return false;
	}
	return true;
}

mc_status mc_batch_wait_inflight(struct mc_batch *b, int64_t timeout_ms)
{
	uint64_t start = mc_now_ns();
	uint64_t deadline = timeout_ms >= 0 ? start + (uint64_t)timeout_ms * 1000000ull : 0;
	bool spin = atomic_load(&b->inflight) && mc_batch_wait_spins(b);
	for (;;) {
		unsigned v = atomic_load(&b->inflight);
		struct timespec rel, *relp = NULL;
		if (v == 0)
			return MC_OK;
		if (spin && mc_now_ns() - start < WAIT_SPIN_NS) {
			for (int i = 0; i < 16 && atomic_load(&b->inflight); i++)
				mc_cpu_relax();
			sched_yield();
			continue;
		}
		if (deadline) {
			uint64_t now = mc_now_ns();
			if (now >= deadline)
				return MC_ERR_TIMEOUT;
			rel.tv_sec = (time_t)((deadline - now) / 1000000000ull);
			rel.tv_nsec = (long)((deadline - now) % 1000000000ull);
			relp = &rel;
		}
		atomic_fetch_add(&b->sleepers, 1);
		futex_wait(&b->inflight, v, relp);
		atomic_fetch_sub(&b->sleepers, 1);
	}
}
