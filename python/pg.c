/*
 * python/pg.c - the CPython extension `mooncake._pg`: the data plane of the
 * `mooncake-cpu` torch.distributed backend (python/mooncake/pg.py).
 *
 * One type, Mailbox: a registered host region through which the ranks of one
 * communicator pass messages to each other with Transfer Engine WRITEs, and
 * one call, run(sends, recvs, ...), that moves a set of messages to and from
 * several peers at once with the GIL released.  The collectives (ring
 * reduce-scatter and all-gather, direct exchanges for small tensors) are
 * built from run() calls in Python; every byte moves here.
 *
 * Region layout, identical on every rank of the communicator (n ranks, NS
 * slots of slot bytes per peer):
 *
 *   flags_in[64][NS]   u64  written by sender s: message m is in slot m%NS (value m+1)
 *   acks_in[64][NS]    u64  written by receiver r: it consumed message m of slot m%NS (m+1)
 *   flags_out, acks_out      the sources of those writes (one per peer and slot)
 *   notice_in[64]      u64  written by rank s: bitmap of ranks s saw die
 *   notice_out[64]           sources of notice writes
 *   depart_in[64]      u64  written by rank s when it leaves: 1 + the number of
 *                            messages s consumed from this rank (0: still here)
 *   depart_out[64]           sources of departure writes (one per peer)
 *   view_in[64]        u64  written by the rank that commits a membership view,
 *                            at index epoch % 64: (epoch << 40) | first operation
 *                            of the view (consecutive views use different words,
 *                            so a late write of an older one never hides a newer)
 *   view_out[64]             sources of view writes (the same index)
 *   seen               u64  this rank's acknowledgement: the newest view word
 *                            its watcher thread found in view_in (serve_acks)
 *   ack_in[64]               where a proposer READs each peer's seen word
 *   sent_in[64]        u64  written by rank s when it moves its send/recv to
 *                            this region from its earlier one (announce()):
 *                            (epoch << 40) | 1 + messages s sent us there
 *   sent_out[64]             sources of those writes
 *   recv[n][NS][slot]        landing slots, indexed by sender
 *   send[n][NS][slot]        staging slots, indexed by receiver (TE writes
 *                            from registered memory only)
 *
 * Protocol, per ordered pair (s -> r), messages numbered from 0 (chunks of
 * at most INLINE_MAX bytes skip the flag: see "Inline messages" below):
 *   s may fill slot m%NS once r acknowledged message m-NS (acks_in of s);
 *   s copies the chunk into its staging slot, WRITEs it to r's landing slot,
 *   and when that write completed, WRITEs m+1 into r's flags_in[s][m%NS];
 *   r waits for that value, copies or reduces the slot into the destination,
 *   then WRITEs m+1 into s's acks_in[r][m%NS].
 * A flag or an acknowledgement for slot k is rewritten only after the
 * previous one for slot k was seen by its reader, so these small writes need
 * no ordering between them.  Acknowledgements go out fire-and-forget
 * (batch_discard); a send ends only when its last flag WRITE completed, so a
 * rank may return from an operation and exit without cutting a flag short.  The
 * counters live in the Mailbox, so consecutive calls continue the same
 * streams; both sides cut a message into the same chunks (min(slot, left)).
 *
 * Waiting: nothing signals a landed write, so run() polls its flags.  It
 * yields the CPU at once when idle and then sleeps with a growing pause
 * (capped at 200 us); the machine it runs on has more processes than cores.
 *
 * Failure: a data WRITE that fails marks its peer failed.  A peer that makes
 * no progress for PROBE_EVERY_US is probed (mc_te_probe_within, PROBE_PROOF_MS); a probe refused
 * or dropped marks it failed (one that times out does not, yet).  After timeout_us without progress
 * every peer of the group is probed, and those that fail are reported; if none fails, the wait goes
 * on (a slow rank is not a dead one; a rank that gave up on this operation has sent a notice).  A
 * rank that finds a dead peer writes the bitmap into the notice_in of every other rank of the
 * group, whose run() then probes the named ranks and ends too, so survivors return together.  run()
 * returns (ok, failed_bitmap); after a failure the streams of this Mailbox are out of step and the
 * caller must not use it again (_pg_group.py _check_usable refuses).
 *
 * Departure (depart(), at a group's shutdown or the process's exit): a rank's
 * operation ends once its own WRITEs were answered and its peers' messages
 * landed, but a peer's WRITE into it may still wait for this process's engine
 * to answer (the engine answers after the bytes landed, and the rank may have
 * seen them first).  Exiting then would fail that peer's operation although
 * its message was taken.  So a leaving rank writes into each peer's
 * depart_in[me] how many of that peer's messages it consumed and waits
 * (bounded) until those WRITEs are answered; only then does its engine go.
 * A peer whose WRITE to a departed rank then fails counts the message sent
 * when the departure word says it was consumed; an operation that still needs
 * a departed rank (a message it never took, or one it would send) ends at once
 * with that rank failed, without the probes and notices a failure brings.
 * Departed ranks are neither probed nor sent notices again.
 *
 * Views and their acknowledgements (a group's small agent Mailbox): a rank
 * that commits a membership view WRITEs its word into view_in[epoch % 64] of every
 * other rank (post_view); their next operation reads it (view()).  Each rank
 * runs one watcher thread per agent region (serve_acks) that copies the
 * newest word it finds there into its own seen word, a local store and no
 * I/O, so it cannot block, and it runs without the GIL while the rank's
 * Python is busy.  The proposer READs seen from every rank that must
 * acknowledge until it holds the view's word or the acknowledgement timeout
 * passes: nothing the acknowledging rank does needs the proposer's address,
 * and a stopped or dead process (its watcher does not run) never
 * acknowledges, whatever the transport.
 *
 * Send/recv across a membership change (announce(), on the region of the
 * new view, once it is connected): a rank moves its send/recv to the new
 * view's region only after its run()s on the old one ended (aborted: they
 * raise RuntimeError, and the caller issues them again), then WRITEs into
 * each peer's new region how many messages it had sent that peer on all its
 * earlier regions, and waits for those WRITEs to land before it sends
 * anything on the new region.  The new region keeps how many messages this
 * rank consumed from each peer on all its earlier regions.  Both counts run
 * over every region a rank had, used or skipped (two views installed at
 * once), so they compare whichever views each side used; they start again
 * for a peer whose process changed (a replacement: announce()'s fresh).  A
 * recv from p on the new region compares the two before it takes a message
 * and while it waits: p sent more on older views than this rank consumed,
 * so those messages are lost and the next one is not the one the caller
 * expects; run() raises CrossedView(p, lost, epoch) instead of taking it
 * (once: the lost ones then count as taken).  The word lands before any of
 * p's messages on the new region, so a recv that sees such a message sees
 * the word too.
 *
 * Abort (abort(), the first step of a group's shutdown): a run() in progress
 * on another thread (a send or recv blocked on a peer that says nothing)
 * sees the flag at its next pass, a few hundred microseconds at most, and
 * raises RuntimeError instead of returning; later run()s raise at once.  It
 * sends no notice (nobody failed); the streams are out of step afterwards,
 * which does not matter: the group is leaving.  The caller waits for the
 * run()s to end before depart() and before the region goes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "mooncake/log.h"
#include "mooncake/te.h"

#define MAX_RANKS      64
#define MAX_SLOTS      8
#define PROBE_EVERY_US 200000
/* Probe bounds: a probe for proof (a refusal) of a silent peer, and the
 * verdict probe after the collective's timeout, where no answer means dead. */
#define PROBE_PROOF_MS	 200
#define PROBE_VERDICT_MS 1000
#define MAX_SLEEP_NS	 200000
#define INLINE_MAX	 8192 /* messages up to this size carry their own check */
/* View acknowledgements: the watcher's pause between looks at view_in, and a
 * proposer's pause before it READs again a seen word that was not enough. */
#define ACK_POLL_NS 2000000
#define ACK_READ_US 1000

enum { OP_COPY = 0, OP_SUM = 1, OP_PROD = 2, OP_MIN = 3, OP_MAX = 4 };
enum { DT_I8, DT_U8, DT_I16, DT_I32, DT_I64, DT_F32, DT_F64, DT_BOOL, DT_COUNT };
static const size_t dt_size[DT_COUNT] = {1, 1, 2, 4, 8, 4, 8, 1};

struct send_state {
	uint64_t posted;  /* messages whose data WRITE was submitted */
	uint64_t flagged; /* messages whose data completed and flag went out */
	uint64_t landed;  /* messages whose flag WRITE completed */
	mc_batch_id batch[MAX_SLOTS], flagb[MAX_SLOTS];
	uint64_t len[MAX_SLOTS];
	bool inl[MAX_SLOTS]; /* sent inline: no flag WRITE */
};

typedef struct {
	PyObject_HEAD struct mc_te *te;
	unsigned char *base;
	size_t size;
	int n, me, ns;
	uint64_t slot;
	size_t off_recv, off_send;
	mc_segment_id seg[MAX_RANKS];
	uint64_t rbase[MAX_RANKS]; /* peers' region addresses; 0 = not connected */
	char *segname[MAX_RANKS];
	struct send_state tx[MAX_RANKS];
	uint64_t rx[MAX_RANKS]; /* messages consumed from each peer */
	uint64_t notice_sent;
	bool registered;
	bool departed;	     /* depart() ran: no more run() */
	atomic_bool aborted; /* abort(): a run() on another thread ends at its next pass */
	PyObject *owner;     /* keeps the engine's Python object alive */
	pthread_t acker;     /* serve_acks(): the watcher that acknowledges views */
	bool acking;	     /* acker runs (started, not yet joined) */
	atomic_bool ack_stop;
	atomic_int running; /* run()s in progress (announce() waits for them) */
	/* announce(): this region took over from earlier ones, where this rank
	 * sent and consumed these many messages to and from each peer */
	bool took_over;
	uint64_t sent_before[MAX_RANKS], took_before[MAX_RANKS];
} Mailbox;

static PyTypeObject MailboxType;
static PyObject *ViewChanged; /* _pg.ViewChanged, a RuntimeError */
static PyObject *CrossedView; /* _pg.CrossedView, a RuntimeError */

/* control area offsets (u64 units) */
#define CTL_FLAGS_IN   0
#define CTL_ACKS_IN    (MAX_RANKS * MAX_SLOTS)
#define CTL_FLAGS_OUT  (2 * MAX_RANKS * MAX_SLOTS)
#define CTL_ACKS_OUT   (3 * MAX_RANKS * MAX_SLOTS)
#define CTL_NOTICE_IN  (4 * MAX_RANKS * MAX_SLOTS)
#define CTL_NOTICE_OUT (4 * MAX_RANKS * MAX_SLOTS + MAX_RANKS)
#define CTL_DEPART_IN  (4 * MAX_RANKS * MAX_SLOTS + 2 * MAX_RANKS)
#define CTL_DEPART_OUT (4 * MAX_RANKS * MAX_SLOTS + 3 * MAX_RANKS)
#define CTL_VIEW_IN    (4 * MAX_RANKS * MAX_SLOTS + 4 * MAX_RANKS)
#define CTL_VIEW_OUT   (4 * MAX_RANKS * MAX_SLOTS + 5 * MAX_RANKS)
#define CTL_SEEN       (4 * MAX_RANKS * MAX_SLOTS + 6 * MAX_RANKS)
#define CTL_ACK_IN     (4 * MAX_RANKS * MAX_SLOTS + 6 * MAX_RANKS + 1)
#define CTL_SENT_IN    (4 * MAX_RANKS * MAX_SLOTS + 7 * MAX_RANKS + 1)
#define CTL_SENT_OUT   (4 * MAX_RANKS * MAX_SLOTS + 8 * MAX_RANKS + 1)
#define CTL_END	       (4 * MAX_RANKS * MAX_SLOTS + 9 * MAX_RANKS + 1)
#define CTL_BYTES      (4096 * 6) /* (4*64*8 + 9*64 + 1) * 8 = 21000, rounded up to 24 KiB */
_Static_assert(CTL_END * 8 <= CTL_BYTES, "the control area outgrew CTL_BYTES");
#define VIEW_OP_BITS 40 /* view word: epoch above, first operation below */
#define VIEW_OP_MASK ((1ull << VIEW_OP_BITS) - 1)

static inline volatile uint64_t *ctl(Mailbox *m, size_t idx)
{
	return (volatile uint64_t *)m->base + idx;
}

/* Messages rank p consumed from us, as its departure said; 0 while it is here. */
static inline uint64_t departed_took(Mailbox *m, int p)
{
	return __atomic_load_n(ctl(m, CTL_DEPART_IN + p), __ATOMIC_ACQUIRE);
}

/* Whether p left after consuming message q (numbered from 0) of ours. */
static inline bool peer_took(Mailbox *m, int p, uint64_t q)
{
	uint64_t v = departed_took(m, p);
	return v && v - 1 >= q + 1;
}

static uint64_t departed_set(Mailbox *m)
{
	uint64_t gone = 0;
	for (int r = 0; r < m->n; r++)
		if (r != m->me && departed_took(m, r))
			gone |= 1ull << r;
	return gone;
}

/* The newest view word posted into this region (post_view): epoch in the
 * high bits, so the largest word is the newest view. */
static uint64_t view_word(Mailbox *m)
{
	uint64_t w = 0;
	for (int k = 0; k < MAX_RANKS; k++) { /* indexed by epoch, not by rank */
		uint64_t v = __atomic_load_n(ctl(m, CTL_VIEW_IN + k), __ATOMIC_ACQUIRE);
		w = v > w ? v : w;
	}
	return w;
}

/* Whether a view newer than epoch, starting at or before operation op, was
 * posted into m: the operation op running on the old view is stale. */
static bool view_stale(Mailbox *m, uint64_t epoch, uint64_t op)
{
	uint64_t w = view_word(m);
	return (w >> VIEW_OP_BITS) > epoch && (w & ((1ull << VIEW_OP_BITS) - 1)) <= op;
}

/* How many messages peer p sent us on earlier views that this rank never
 * consumed (announce()); 0 when none or not known.  *ep: p's last view. */
static uint64_t lost_from(Mailbox *m, int p, uint64_t *ep)
{
	if (!m->took_over)
		return 0; /* p's word, if any, counts from a region this one never had */
	uint64_t w = __atomic_load_n(ctl(m, CTL_SENT_IN + p), __ATOMIC_ACQUIRE);
	if (!w)
		return 0;
	uint64_t sent = (w & VIEW_OP_MASK) - 1;
	*ep = w >> VIEW_OP_BITS;
	return sent > m->took_before[p] ? sent - m->took_before[p] : 0;
}

static uint64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- reductions: dst[i] = op(dst[i], src[i]) (vectorised by the compiler) ---- */

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

/* SUM and PRODUCT compute in U: an unsigned type at least as wide as int for the
 * integers, so they wrap as torch's (and gloo's) do instead of overflowing a
 * signed int, which is undefined (UBSan stops there); T itself for floats. */
#define RED_LOOPS(T, U, NAME)                                                          \
	static void NAME(int op, void *restrict d_, const void *restrict s_, size_t k) \
	{                                                                              \
		T *restrict d = d_;                                                    \
		const T *restrict s = s_;                                              \
		switch (op) {                                                          \
		case OP_SUM:                                                           \
			for (size_t i = 0; i < k; i++)                                 \
				d[i] = (T)((U)d[i] + (U)s[i]);                         \
			break;                                                         \
		case OP_PROD:                                                          \
			for (size_t i = 0; i < k; i++)                                 \
				d[i] = (T)((U)d[i] * (U)s[i]);                         \
			break;                                                         \
		case OP_MIN:                                                           \
			for (size_t i = 0; i < k; i++)                                 \
				d[i] = s[i] < d[i] ? s[i] : d[i];                      \
			break;                                                         \
		case OP_MAX:                                                           \
			for (size_t i = 0; i < k; i++)                                 \
				d[i] = s[i] > d[i] ? s[i] : d[i];                      \
			break;                                                         \
		}                                                                      \
	}

RED_LOOPS(int8_t, unsigned, red_i8)
RED_LOOPS(uint8_t, unsigned, red_u8)
RED_LOOPS(int16_t, unsigned, red_i16)
RED_LOOPS(int32_t, uint32_t, red_i32)
RED_LOOPS(int64_t, uint64_t, red_i64)
RED_LOOPS(float, float, red_f32)
RED_LOOPS(double, double, red_f64)

/* bool: SUM and MAX are OR, PRODUCT and MIN are AND (bytes are 0 or 1) */
static void red_bool(int op, void *restrict d_, const void *restrict s_, size_t k)
{
	uint8_t *restrict d = d_;
	const uint8_t *restrict s = s_;
	if (op == OP_SUM || op == OP_MAX)
		for (size_t i = 0; i < k; i++)
			d[i] = (uint8_t)((d[i] | s[i]) != 0);
	else
		for (size_t i = 0; i < k; i++)
			d[i] = (uint8_t)((d[i] & s[i]) != 0);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

static void (*const red_fn[DT_COUNT])(int, void *restrict, const void *restrict, size_t) = {
	red_i8, red_u8, red_i16, red_i32, red_i64, red_f32, red_f64, red_bool};

/* ---- Mailbox ---- */

/* The watcher of serve_acks(): seen = the newest view word posted here. */
static void *ack_watch(void *arg)
{
	Mailbox *m = arg;
	struct timespec ts = {0, ACK_POLL_NS};
	while (!atomic_load_explicit(&m->ack_stop, memory_order_acquire)) {
		uint64_t w = view_word(m);
		if (w > __atomic_load_n(ctl(m, CTL_SEEN), __ATOMIC_RELAXED))
			__atomic_store_n(ctl(m, CTL_SEEN), w, __ATOMIC_RELEASE);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void stop_acks(Mailbox *m)
{
	if (!m->acking)
		return;
	atomic_store_explicit(&m->ack_stop, true, memory_order_release);
	pthread_join(m->acker, NULL);
	m->acking = false;
}

static void mailbox_dealloc(Mailbox *m)
{
	stop_acks(m); /* before the region goes */
	if (m->registered)
		mc_te_deregister(m->te, m->base);
	if (m->base)
		mc_te_host_free(m->base);
	for (int i = 0; i < MAX_RANKS; i++)
		PyMem_Free(m->segname[i]);
	Py_XDECREF(m->owner);
	Py_TYPE(m)->tp_free((PyObject *)m);
}

/* Mailbox(engine_ptr, nranks, rank, slot_bytes, nslots, owner=None): owner is
 * the object that owns the engine (kept alive as long as the mailbox) */
static int mailbox_init(Mailbox *m, PyObject *args, PyObject *kw)
{
	unsigned long long ptr, slot;
	int n, me, ns;
	PyObject *owner = Py_None;
	mc_status rc;
	if (!PyArg_ParseTuple(args, "KiiKi|O", &ptr, &n, &me, &slot, &ns, &owner))
		return -1;
	if (m->base) {
		PyErr_SetString(PyExc_RuntimeError, "Mailbox already initialised");
		return -1;
	}
	if (!ptr || n < 1 || n > MAX_RANKS || me < 0 || me >= n || ns < 1 || ns > MAX_SLOTS ||
	    slot < 64 || slot % 64) {
		PyErr_Format(PyExc_ValueError,
			     "Mailbox: bad arguments (engine %llx, %d ranks, rank %d, slot %llu, "
			     "%d slots)",
			     ptr, n, me, slot, ns);
		return -1;
	}
	m->te = (struct mc_te *)(uintptr_t)ptr;
	Py_INCREF(owner);
	m->owner = owner;
	m->n = n;
	m->me = me;
	m->ns = ns;
	m->slot = slot;
	m->off_recv = CTL_BYTES;
	m->off_send = m->off_recv + (size_t)n * ns * slot;
	m->size = m->off_send + (size_t)n * ns * slot;
	rc = mc_te_host_alloc(m->size, (void **)&m->base);
	if (rc != MC_OK) {
		m->base = NULL;
		PyErr_Format(PyExc_MemoryError, "Mailbox: cannot allocate %zu bytes: %s", m->size,
			     mc_last_error());
		return -1;
	}
	mc_te_host_prefault(m->base, CTL_BYTES);
	rc = mc_te_register(m->te, m->base, m->size, "cpu:0", true);
	if (rc != MC_OK) {
		PyErr_Format(PyExc_RuntimeError, "Mailbox: register failed: %s (%s)",
			     mc_status_name(rc), mc_last_error());
		return -1;
	}
	m->registered = true;
	return 0;
}

/* connect(rank, segment_name, region_address) */
static PyObject *mailbox_connect(Mailbox *m, PyObject *args)
{
	int r;
	const char *name;
	unsigned long long addr;
	mc_segment_id id;
	mc_status rc;
	if (!PyArg_ParseTuple(args, "isK", &r, &name, &addr))
		return NULL;
	if (!m->base || r < 0 || r >= m->n || r == m->me || !addr) {
		PyErr_Format(PyExc_ValueError, "connect: bad rank %d or address", r);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS rc = mc_te_reopen_segment(m->te, name, &id);
	Py_END_ALLOW_THREADS if (rc != MC_OK)
	{
		PyErr_Format(PyExc_RuntimeError,
			     "connect: cannot open segment %s of rank %d: %s (%s)", name, r,
			     mc_status_name(rc), mc_last_error());
		return NULL;
	}
	PyMem_Free(m->segname[r]);
	m->segname[r] = PyMem_Malloc(strlen(name) + 1);
	if (!m->segname[r])
		return PyErr_NoMemory();
	strcpy(m->segname[r], name);
	m->seg[r] = id;
	m->rbase[r] = addr;
	Py_RETURN_NONE;
}

struct item {
	int peer;
	unsigned char *ptr;
	uint64_t len;
	uint64_t moved; /* bytes posted (send) or consumed (recv) */
	uint64_t done;	/* send: bytes whose flag went out */
	int op, dt;
	uint64_t last; /* time of the last progress */
};

static bool write1(Mailbox *m, int peer, void *src, uint64_t remote, uint64_t len,
		   mc_batch_id *keep)
{
	struct mc_xfer_req req = {MC_OP_WRITE, src, m->seg[peer], remote, len};
	mc_batch_id b;
	if (mc_te_batch_new(m->te, 1, &b) != MC_OK)
		return false;
	if (mc_te_submit(m->te, b, &req, 1) != MC_OK) {
		mc_te_batch_free(m->te, b);
		return false;
	}
	if (keep)
		*keep = b;
	else
		mc_te_batch_discard(m->te, b);
	return true;
}

/*
 * Inline messages: a chunk of at most INLINE_MAX bytes goes out in one WRITE,
 * zero-padded to 8 bytes and followed by {seq, hash(seq, padded bytes)}; the
 * receiver takes it when the trailer's seq is the one it expects and the hash
 * of the bytes in its slot matches, so a chunk whose bytes have not all
 * landed yet (the engine gives no order within a WRITE) is not taken.  This
 * saves the flag WRITE and its round trip on small operations.  The slot is
 * not rewritten before the receiver acknowledged, so what was checked stays.
 */
static inline uint64_t pad8(uint64_t n)
{
	return (n + 7) & ~(uint64_t)7;
}

static uint64_t inline_hash(uint64_t seq, const unsigned char *p, uint64_t padded)
{
	uint64_t h = seq * 0x9E3779B97F4A7C15ull ^ padded;
	for (uint64_t i = 0; i < padded; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		h = (h ^ w) * 0xFF51AFD7ED558CCDull;
		h ^= h >> 32;
	}
	h *= 0xC4CEB9FE1A85EC53ull;
	return h ^ (h >> 29);
}

static inline unsigned char *send_slot(Mailbox *m, int peer, int k)
{
	return m->base + m->off_send + ((size_t)peer * m->ns + k) * m->slot;
}

static inline unsigned char *recv_slot(Mailbox *m, int peer, int k)
{
	return m->base + m->off_recv + ((size_t)peer * m->ns + k) * m->slot;
}

/* One pass over a send item; returns true if anything moved.  Sets *fail. */
static bool progress_send(Mailbox *m, struct item *it, bool *fail)
{
	struct send_state *st = &m->tx[it->peer];
	int p = it->peer, ns = m->ns;
	bool moved = false;
	while (it->moved < it->len) {
		uint64_t q = st->posted;
		int k = (int)(q % ns);
		if (q >= (uint64_t)ns && (st->landed < q - ns + 1 ||
					  __atomic_load_n(ctl(m, CTL_ACKS_IN + p * MAX_SLOTS + k),
							  __ATOMIC_ACQUIRE) < q - ns + 1))
			break;
		uint64_t len = it->len - it->moved < m->slot ? it->len - it->moved : m->slot;
		unsigned char *stage = send_slot(m, p, k);
		uint64_t wlen = len;
		memcpy(stage, it->ptr + it->moved, len);
		st->inl[k] = len <= INLINE_MAX;
		if (st->inl[k]) {
			uint64_t t[2], padded = pad8(len);
			memset(stage + len, 0, padded - len);
			t[0] = q + 1;
			t[1] = inline_hash(q + 1, stage, padded);
			memcpy(stage + padded, t, sizeof(t));
			wlen = padded + sizeof(t);
		}
		uint64_t remote = m->rbase[p] + m->off_recv + ((uint64_t)m->me * ns + k) * m->slot;
		if (!write1(m, p, stage, remote, wlen, &st->batch[k])) {
			*fail = true;
			return moved;
		}
		st->len[k] = len;
		st->posted++;
		it->moved += len;
		moved = true;
	}
	while (st->flagged < st->posted) {
		uint64_t q = st->flagged;
		int k = (int)(q % ns);
		struct mc_xfer_status xs;
		if (mc_te_batch_status(m->te, st->batch[k], &xs) != MC_OK) {
			*fail = true;
			return moved;
		}
		if (xs.state == MC_XFER_WAITING || xs.state == MC_XFER_PENDING)
			break;
		mc_te_batch_free(m->te, st->batch[k]);
		st->batch[k] = 0;
		if (xs.state != MC_XFER_COMPLETED) {
			if (!peer_took(m, p, q)) {
				*fail = true;
				return moved;
			}
			/* p took it, then left before its engine answered */
			st->inl[k] = true; /* nothing more to await for it */
		}
		if (st->inl[k]) { /* its WRITE completed: it has landed */
			st->flagged++;
			moved = true;
			continue;
		}
		volatile uint64_t *src = ctl(m, CTL_FLAGS_OUT + p * MAX_SLOTS + k);
		*src = q + 1;
		uint64_t remote =
			m->rbase[p] + (CTL_FLAGS_IN + (uint64_t)m->me * MAX_SLOTS + k) * 8;
		if (!write1(m, p, (void *)src, remote, 8, &st->flagb[k])) {
			*fail = true;
			return moved;
		}
		st->flagged++;
		moved = true;
	}
	/* a message counts as sent once its flag landed: the caller may exit then */
	while (st->landed < st->flagged) {
		int k = (int)(st->landed % ns);
		struct mc_xfer_status xs;
		if (st->inl[k]) {
			st->landed++;
			it->done += st->len[k];
			moved = true;
			continue;
		}
		if (mc_te_batch_status(m->te, st->flagb[k], &xs) != MC_OK) {
			*fail = true;
			return moved;
		}
		if (xs.state == MC_XFER_WAITING || xs.state == MC_XFER_PENDING)
			break;
		mc_te_batch_free(m->te, st->flagb[k]);
		st->flagb[k] = 0;
		if (xs.state != MC_XFER_COMPLETED && !peer_took(m, p, st->landed)) {
			*fail = true;
			return moved;
		}
		st->landed++;
		it->done += st->len[k];
		moved = true;
	}
	return moved;
}

static bool progress_recv(Mailbox *m, struct item *it, bool *fail, uint64_t *lost,
			  uint64_t *lost_ep)
{
	int p = it->peer, ns = m->ns;
	bool moved = false;
	while (it->moved < it->len) {
		uint64_t q = m->rx[p];
		int k = (int)(q % ns);
		uint64_t len = it->len - it->moved < m->slot ? it->len - it->moved : m->slot;
		unsigned char *src = recv_slot(m, p, k);
		if (len <= INLINE_MAX) {
			uint64_t padded = pad8(len);
			volatile uint64_t *t = (volatile uint64_t *)(src + padded);
			if (t[0] != q + 1)
				break;
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (t[1] != inline_hash(q + 1, src, padded))
				break; /* not all of it has landed yet */
		} else if (__atomic_load_n(ctl(m, CTL_FLAGS_IN + p * MAX_SLOTS + k),
					   __ATOMIC_ACQUIRE) < q + 1) {
			break;
		}
		/* a message has landed: a word p wrote before it is visible now */
		if ((*lost = lost_from(m, p, lost_ep)))
			break;
		if (it->op == OP_COPY)
			memcpy(it->ptr + it->moved, src, len);
		else
			red_fn[it->dt](it->op, it->ptr + it->moved, src, len / dt_size[it->dt]);
		volatile uint64_t *a = ctl(m, CTL_ACKS_OUT + p * MAX_SLOTS + k);
		*a = q + 1;
		uint64_t remote = m->rbase[p] + (CTL_ACKS_IN + (uint64_t)m->me * MAX_SLOTS + k) * 8;
		m->rx[p]++;
		it->moved += len;
		moved = true;
		if (!write1(m, p, (void *)a, remote, 8, NULL)) {
			*fail = true;
			return moved;
		}
	}
	return moved;
}

/* Whether peer r is dead.  proof_only: only a port that refuses or drops
 * the connection, or an endpoint gone from the metadata, counts; a probe
 * that times out (a live peer descheduled on a loaded host answers late)
 * does not, until the collective's timeout has passed (proof_only false). */
static bool probe_dead(Mailbox *m, int r, bool proof_only)
{
	mc_status rc;

	if (!m->segname[r])
		return false;
	/* bounded: the run loop waits for it, and the collective's promise is its
	 * timeout (mc_te_probe alone waits up to twice the handshake timeout) */
	rc = mc_te_probe_within(m->te, m->segname[r],
				proof_only ? PROBE_PROOF_MS : PROBE_VERDICT_MS);
	if (rc == MC_OK)
		return false;
	return !proof_only || rc == MC_ERR_CONN_REFUSED || rc == MC_ERR_CONN_CLOSED ||
	       rc == MC_ERR_NOT_FOUND;
}

/* Tell every other rank of `group` (bitmap) which ranks we found dead. */
static void send_notice(Mailbox *m, uint64_t group, uint64_t dead)
{
	uint64_t all = m->notice_sent | dead;
	if (all == m->notice_sent)
		return;
	m->notice_sent = all;
	volatile uint64_t *src = ctl(m, CTL_NOTICE_OUT + m->me);
	*src = all;
	group &= ~departed_set(m);
	for (int r = 0; r < m->n; r++) {
		if (r == m->me || !(group >> r & 1) || (all >> r & 1) || !m->rbase[r])
			continue;
		write1(m, r, (void *)src, m->rbase[r] + (CTL_NOTICE_IN + (uint64_t)m->me) * 8, 8,
		       NULL);
	}
}

/* Ranks named dead by other ranks' notices, confirmed by our own probe. */
static uint64_t check_notices(Mailbox *m, uint64_t group, uint64_t *seen)
{
	uint64_t named = 0, dead = 0;
	for (int r = 0; r < m->n; r++)
		if (group >> r & 1)
			named |= __atomic_load_n(ctl(m, CTL_NOTICE_IN + r), __ATOMIC_ACQUIRE);
	named &= ~*seen & ~departed_set(m); /* a departed rank is not a failed one */
	if (!named)
		return 0;
	*seen |= named;
	for (int r = 0; r < m->n; r++)
		if ((named >> r & 1) && r != m->me && probe_dead(m, r, false))
			dead |= 1ull << r;
	return dead;
}

static int parse_items(Mailbox *m, PyObject *list, bool recv, struct item **out, Py_ssize_t *nout)
{
	PyObject *seq = PySequence_Fast(list, "sends/recvs must be sequences");
	if (!seq)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	struct item *v = PyMem_Calloc(n ? n : 1, sizeof(*v));
	if (!v) {
		Py_DECREF(seq);
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *t = PySequence_Fast_GET_ITEM(seq, i);
		unsigned long long ptr, len;
		int peer, op = OP_COPY, dt = DT_U8;
		if (recv ? !PyArg_ParseTuple(t, "iKK|ii", &peer, &ptr, &len, &op, &dt)
			 : !PyArg_ParseTuple(t, "iKK", &peer, &ptr, &len))
			goto bad;
		if (peer < 0 || peer >= m->n || peer == m->me || !m->rbase[peer] || op < 0 ||
		    op > OP_MAX || dt < 0 || dt >= DT_COUNT || (len && !ptr) || len % dt_size[dt]) {
			PyErr_Format(PyExc_ValueError,
				     "run: bad item (peer %d, len %llu, op %d, dtype %d)", peer,
				     len, op, dt);
			goto bad;
		}
		v[i] = (struct item){.peer = peer,
				     .ptr = (unsigned char *)(uintptr_t)ptr,
				     .len = len,
				     .op = op,
				     .dt = dt};
	}
	Py_DECREF(seq);
	*out = v;
	*nout = n;
	return 0;
bad:
	Py_DECREF(seq);
	PyMem_Free(v);
	return -1;
}

/*
 * run(sends, recvs, timeout_us, group_bitmap[, watch, epoch, op]) -> (ok, failed_bitmap)
 *   sends: [(peer, address, nbytes)], recvs: [(peer, address, nbytes[, op, dtype])]
 * Sends and receives progress together; returns when all are done, or a
 * peer failed (then every item ends).  With watch (the group's agent
 * Mailbox), a view newer than epoch that starts at or before operation op,
 * posted there while this waits, ends it with ViewChanged: the operation
 * runs on a view its peers have left, and would wait for them forever.  A
 * recv from a peer that sent messages on an earlier view which this rank
 * never took there raises CrossedView(peer, lost, epoch) (see announce()).
 */
static PyObject *mailbox_run(Mailbox *m, PyObject *args)
{
	PyObject *sl, *rl;
	unsigned long long timeout_us, group;
	struct item *sv = NULL, *rv = NULL;
	Py_ssize_t ns = 0, nr = 0;
	uint64_t failed = 0;
	PyObject *watch_obj = Py_None;
	unsigned long long wepoch = 0, wop = 0;
	if (!PyArg_ParseTuple(args, "OOKK|OKK", &sl, &rl, &timeout_us, &group, &watch_obj, &wepoch,
			      &wop))
		return NULL;
	Mailbox *watch = NULL;
	if (watch_obj != Py_None) {
		if (!PyObject_TypeCheck(watch_obj, &MailboxType) || !((Mailbox *)watch_obj)->base) {
			PyErr_SetString(PyExc_TypeError,
					"run: watch must be an initialised Mailbox");
			return NULL;
		}
		watch = (Mailbox *)watch_obj;
	}
	if (!m->base) {
		PyErr_SetString(PyExc_RuntimeError, "Mailbox not initialised");
		return NULL;
	}
	if (m->departed) {
		PyErr_SetString(PyExc_RuntimeError, "run: this rank has left the group (depart)");
		return NULL;
	}
	/* counted before the abort flag is read: announce() sets the flag, then
	 * waits for the count, so a run() it does not wait for sees the flag */
	atomic_fetch_add(&m->running, 1);
	if (atomic_load(&m->aborted)) {
		atomic_fetch_sub(&m->running, 1);
		PyErr_SetString(PyExc_RuntimeError,
				"run: the group was shut down on this rank (shutdown)");
		return NULL;
	}
	if (parse_items(m, sl, false, &sv, &ns) || parse_items(m, rl, true, &rv, &nr)) {
		atomic_fetch_sub(&m->running, 1);
		PyMem_Free(sv);
		return NULL;
	}
	bool aborted = false, stale = false;
	int crossed = -1; /* a peer that sent on an earlier view what we never took */
	uint64_t lost = 0, lost_ep = 0;
	Py_BEGIN_ALLOW_THREADS;
	uint64_t t0 = now_us(), seen = 0, last_probe = t0;
	unsigned idle = 0;
	prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
	for (Py_ssize_t i = 0; i < ns; i++)
		sv[i].last = t0;
	for (Py_ssize_t i = 0; i < nr; i++)
		rv[i].last = t0;
	for (;;) {
		bool any = false, pending = false;
		uint64_t now, gone = departed_set(m); /* read before this pass's progress */
		for (Py_ssize_t i = 0; i < ns; i++) {
			struct item *it = &sv[i];
			bool fail = false;
			if (it->done >= it->len || (failed >> it->peer & 1))
				continue;
			if (progress_send(m, it, &fail)) {
				any = true;
				it->last = now_us();
			}
			if (fail)
				failed |= 1ull << it->peer;
			else if (it->done < it->len)
				pending = true;
		}
		for (Py_ssize_t i = 0; i < nr; i++) {
			struct item *it = &rv[i];
			bool fail = false;
			if (it->moved >= it->len || (failed >> it->peer & 1))
				continue;
			if (progress_recv(m, it, &fail, &lost, &lost_ep)) {
				any = true;
				it->last = now_us();
			}
			if (lost) {
				crossed = it->peer;
				break;
			}
			if (fail)
				failed |= 1ull << it->peer;
			else if (it->moved < it->len)
				pending = true;
		}
		if (crossed >= 0 || failed || !pending)
			break;
		if (atomic_load_explicit(&m->aborted, memory_order_relaxed)) {
			aborted = true;
			break;
		}
		if (any) {
			idle = 0;
			continue;
		}
		if (watch && view_stale(watch, wepoch, wop)) {
			stale = true;
			break;
		}
		for (Py_ssize_t i = 0; crossed < 0 && i < nr; i++)
			if (rv[i].moved < rv[i].len && (lost = lost_from(m, rv[i].peer, &lost_ep)))
				crossed = rv[i].peer;
		if (crossed >= 0)
			break;
		/* idle: departed peers, notices, probes of silent peers, the timeout */
		now = now_us();
		if (gone) {
			/* everything a departed rank sent had landed before it left, so
			 * this pass saw it; what is still open will never complete */
			for (Py_ssize_t i = 0; i < ns + nr; i++) {
				struct item *it = i < ns ? &sv[i] : &rv[i - ns];
				if ((gone >> it->peer & 1) && it->moved < it->len)
					failed |= 1ull << it->peer;
			}
			if (failed)
				break;
		}
		failed |= check_notices(m, group, &seen);
		if (!failed && now - last_probe >= PROBE_EVERY_US) {
			last_probe = now;
			for (Py_ssize_t i = 0; i < ns + nr; i++) {
				struct item *it = i < ns ? &sv[i] : &rv[i - ns];
				bool open = i < ns ? it->done < it->len : it->moved < it->len;
				if (open && !(gone >> it->peer & 1) &&
				    now - it->last >= PROBE_EVERY_US &&
				    probe_dead(m, it->peer, true))
					failed |= 1ull << it->peer;
			}
		}
		if (!failed && timeout_us) {
			uint64_t silent = 0;
			for (Py_ssize_t i = 0; i < ns + nr; i++) {
				struct item *it = i < ns ? &sv[i] : &rv[i - ns];
				bool open = i < ns ? it->done < it->len : it->moved < it->len;
				if (open && now - it->last >= timeout_us)
					silent |= 1ull << it->peer;
			}
			if (silent) {
				/* a slow rank that still answers is waited for again */
				for (int r = 0; r < m->n; r++)
					if ((group >> r & 1) && !(gone >> r & 1) && r != m->me &&
					    probe_dead(m, r, false))
						failed |= 1ull << r;
				for (Py_ssize_t i = 0; !failed && i < ns + nr; i++) {
					struct item *it = i < ns ? &sv[i] : &rv[i - ns];
					if (silent >> it->peer & 1)
						it->last = now;
				}
			}
		}
		if (failed)
			break;
		if (idle < 64) {
			sched_yield();
		} else {
			uint64_t ns_sleep = 1000ull
					    << ((idle - 64) / 16 < 8 ? (idle - 64) / 16 : 8);
			struct timespec ts = {
				0, (long)(ns_sleep < MAX_SLEEP_NS ? ns_sleep : MAX_SLEEP_NS)};
			nanosleep(&ts, NULL);
		}
		idle++;
	}
	if (crossed >= 0) /* reported once: they count as taken from now on */
		m->took_before[crossed] += lost;
	else if (!aborted && !stale && (failed & ~departed_set(m)))
		send_notice(m, group, failed & ~departed_set(m));
	atomic_fetch_sub(&m->running, 1);
	Py_END_ALLOW_THREADS;
	PyMem_Free(sv);
	PyMem_Free(rv);
	if (crossed >= 0) {
		PyObject *a = Py_BuildValue("(iKK)", crossed, (unsigned long long)lost,
					    (unsigned long long)lost_ep);
		if (a) {
			PyErr_SetObject(CrossedView, a);
			Py_DECREF(a);
		}
		return NULL;
	}
	if (stale) {
		PyErr_Format(ViewChanged,
			     "run: the group's membership changed (a view after epoch %llu starts "
			     "at operation %llu) while this operation waited on the old view",
			     wepoch, wop);
		return NULL;
	}
	if (aborted) {
		PyErr_SetString(PyExc_RuntimeError,
				"run: the group was shut down on this rank while this operation "
				"waited (shutdown)");
		return NULL;
	}
	return Py_BuildValue("(OK)", failed ? Py_False : Py_True, (unsigned long long)failed);
}

/*
 * depart(timeout_us) -> list of ranks that did not answer: tell every
 * connected peer still here how many of its messages this rank consumed, and
 * wait until those WRITEs are answered (the peer's engine wrote the word) or
 * timeout_us passed.  Afterwards run() refuses.  Idempotent.
 */
static PyObject *mailbox_depart(Mailbox *m, PyObject *args)
{
	unsigned long long timeout_us;
	mc_batch_id b[MAX_RANKS] = {0};
	uint64_t unanswered = 0;
	if (!PyArg_ParseTuple(args, "K", &timeout_us))
		return NULL;
	if (!m->base || m->departed)
		return PyList_New(0);
	m->departed = true;
	Py_BEGIN_ALLOW_THREADS;
	uint64_t gone = departed_set(m), t0 = now_us();
	unsigned idle = 0;
	for (int r = 0; r < m->n; r++) {
		if (r == m->me || !m->rbase[r] || (gone >> r & 1))
			continue;
		volatile uint64_t *src = ctl(m, CTL_DEPART_OUT + r);
		*src = m->rx[r] + 1;
		if (write1(m, r, (void *)src, m->rbase[r] + (CTL_DEPART_IN + (uint64_t)m->me) * 8,
			   8, &b[r]))
			unanswered |= 1ull << r;
	}
	while (unanswered) {
		for (int r = 0; r < m->n; r++) {
			struct mc_xfer_status xs;
			if (!(unanswered >> r & 1))
				continue;
			if (mc_te_batch_status(m->te, b[r], &xs) == MC_OK &&
			    (xs.state == MC_XFER_WAITING || xs.state == MC_XFER_PENDING))
				continue;
			/* answered, or failed: a peer that is gone needs no word */
			mc_te_batch_free(m->te, b[r]);
			b[r] = 0;
			unanswered &= ~(1ull << r);
		}
		if (!unanswered || now_us() - t0 >= timeout_us)
			break;
		if (idle++ < 64) {
			sched_yield();
		} else {
			struct timespec ts = {0, MAX_SLEEP_NS};
			nanosleep(&ts, NULL);
		}
	}
	for (int r = 0; r < m->n; r++)
		if (unanswered >> r & 1)
			mc_te_batch_discard(m->te, b[r]);
	Py_END_ALLOW_THREADS;
	PyObject *out = PyList_New(0);
	for (int r = 0; out && r < m->n; r++) {
		if (!(unanswered >> r & 1))
			continue;
		PyObject *v = PyLong_FromLong(r);
		if (!v || PyList_Append(out, v) < 0) {
			Py_XDECREF(v);
			Py_CLEAR(out);
			break;
		}
		Py_DECREF(v);
	}
	return out;
}

/* Whether a batch is still in flight; otherwise frees it and says in *ok
 * whether it completed. */
static bool batch_busy(Mailbox *m, mc_batch_id *b, bool *ok)
{
	struct mc_xfer_status xs;
	bool known = mc_te_batch_status(m->te, *b, &xs) == MC_OK;
	if (known && (xs.state == MC_XFER_WAITING || xs.state == MC_XFER_PENDING))
		return true;
	*ok = known && xs.state == MC_XFER_COMPLETED;
	mc_te_batch_free(m->te, *b);
	*b = 0;
	return false;
}

/*
 * post_view(ranks, word, timeout_us, expect=0, ack_timeout_us=0, nowait=0)
 *   -> (unanswered, unacknowledged), all bitmaps of in-group ranks:
 * WRITE word into view_in[epoch % 64] of each connected rank of ranks, and wait, up
 * to timeout_us, for the answers of those not in nowait (the ranks already
 * known silent get theirs fire-and-forget).  Each rank of expect (connected
 * ones; the others are unacknowledged at once) must acknowledge the view:
 * its seen word, READ here every ACK_READ_US, must reach word within
 * ack_timeout_us; a READ that fails counts as a refusal when a probe proves
 * the rank dead (refused or closed), so a dead rank does not hold the wait.
 * A membership change committed by this rank reaches the others this way;
 * they read it with view() at their next operation, and a run() watching
 * the region ends (see run()).
 */
static PyObject *mailbox_post_view(Mailbox *m, PyObject *args)
{
	unsigned long long ranks, word, timeout_us, expect = 0, ack_us = 0, nowait = 0;
	mc_batch_id wb[MAX_RANKS] = {0}, rb[MAX_RANKS] = {0};
	uint64_t next_read[MAX_RANKS] = {0};
	uint64_t unanswered = 0, writing = 0, unacked = 0;
	if (!PyArg_ParseTuple(args, "KKK|KKK", &ranks, &word, &timeout_us, &expect, &ack_us,
			      &nowait))
		return NULL;
	if (!m->base) {
		PyErr_SetString(PyExc_RuntimeError, "Mailbox not initialised");
		return NULL;
	}
	uint64_t mask = (m->n == 64 ? ~0ull : (1ull << m->n) - 1) & ~(1ull << m->me);
	if ((ranks | expect | nowait) & ~mask) {
		PyErr_Format(PyExc_ValueError,
			     "post_view: a rank outside 0..%d or this rank (%d) in ranks %llx, "
			     "expect %llx or nowait %llx",
			     m->n - 1, m->me, ranks, expect, nowait);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS;
	uint64_t k = (word >> VIEW_OP_BITS) % MAX_RANKS;
	volatile uint64_t *src = ctl(m, CTL_VIEW_OUT + k);
	uint64_t t0 = now_us(), waiting = 0;
	unsigned idle = 0;
	*src = word;
	for (int r = 0; r < m->n; r++) {
		if (!(ranks >> r & 1))
			continue;
		if (!m->rbase[r] ||
		    !write1(m, r, (void *)src, m->rbase[r] + (CTL_VIEW_IN + k) * 8, 8, &wb[r])) {
			unanswered |= 1ull << r; /* not connected, or not submitted */
		} else if (nowait >> r & 1) {
			mc_te_batch_discard(m->te, wb[r]);
			wb[r] = 0;
		} else {
			writing |= 1ull << r;
		}
	}
	for (int r = 0; r < m->n; r++)
		if ((expect >> r & 1) && !m->rbase[r])
			unacked |= 1ull << r; /* no region to READ: it cannot acknowledge */
	waiting = expect & ~unacked;
	while (writing || waiting) {
		uint64_t now = now_us();
		bool ok;
		for (int r = 0; r < m->n; r++) {
			if ((writing >> r & 1) && !batch_busy(m, &wb[r], &ok)) {
				writing &= ~(1ull << r);
				if (!ok)
					unanswered |= 1ull << r;
			}
			if (!(waiting >> r & 1))
				continue;
			volatile uint64_t *seen = ctl(m, CTL_ACK_IN + r);
			if (rb[r]) {
				if (batch_busy(m, &rb[r], &ok))
					continue;
				if (ok && __atomic_load_n(seen, __ATOMIC_ACQUIRE) >= word) {
					waiting &= ~(1ull << r);
				} else if (!ok && probe_dead(m, r, true)) {
					waiting &= ~(1ull << r);
					unacked |= 1ull << r;
				}
				next_read[r] = now + ACK_READ_US;
			} else if (now >= next_read[r]) {
				struct mc_xfer_req req = {MC_OP_READ, (void *)seen, m->seg[r],
							  m->rbase[r] + CTL_SEEN * 8, 8};
				*seen = 0;
				if (mc_te_batch_new(m->te, 1, &rb[r]) != MC_OK) {
					rb[r] = 0;
				} else if (mc_te_submit(m->te, rb[r], &req, 1) != MC_OK) {
					mc_te_batch_free(m->te, rb[r]);
					rb[r] = 0;
				}
				if (!rb[r])
					next_read[r] = now + ACK_READ_US;
			}
		}
		now = now_us();
		if (now - t0 >= timeout_us && writing) {
			for (int r = 0; r < m->n; r++)
				if (writing >> r & 1)
					mc_te_batch_discard(m->te, wb[r]);
			unanswered |= writing;
			writing = 0;
		}
		if (now - t0 >= ack_us && waiting) {
			for (int r = 0; r < m->n; r++)
				if (rb[r]) {
					mc_te_batch_discard(m->te, rb[r]);
					rb[r] = 0;
				}
			unacked |= waiting;
			waiting = 0;
		}
		if (!writing && !waiting)
			break;
		if (idle++ < 64) {
			sched_yield();
		} else {
			struct timespec ts = {0, MAX_SLEEP_NS};
			nanosleep(&ts, NULL);
		}
	}
	Py_END_ALLOW_THREADS;
	return Py_BuildValue("(KK)", (unsigned long long)unanswered, (unsigned long long)unacked);
}

/* view() -> the newest view word posted into this region (0: none) */
static PyObject *mailbox_view(Mailbox *m, PyObject *unused)
{
	(void)unused;
	if (!m->base)
		return PyLong_FromLong(0);
	return PyLong_FromUnsignedLongLong(view_word(m));
}

/* serve_acks(): start this region's watcher (see "Views and their
 * acknowledgements" above); idempotent. */
static PyObject *mailbox_serve_acks(Mailbox *m, PyObject *unused)
{
	(void)unused;
	if (!m->base) {
		PyErr_SetString(PyExc_RuntimeError, "Mailbox not initialised");
		return NULL;
	}
	if (m->acking)
		Py_RETURN_NONE;
	atomic_store(&m->ack_stop, false);
	int rc = pthread_create(&m->acker, NULL, ack_watch, m);
	if (rc) {
		PyErr_Format(PyExc_RuntimeError, "serve_acks: cannot start the watcher: %s",
			     strerror(rc));
		return NULL;
	}
	pthread_setname_np(m->acker, "mc-pg-ack");
	m->acking = true;
	Py_RETURN_NONE;
}

/* stop_acks(): stop the watcher (views posted later are not acknowledged).
 * The GIL stays held (at most one pause of the watcher), so two callers
 * cannot join the thread twice. */
static PyObject *mailbox_stop_acks(Mailbox *m, PyObject *unused)
{
	(void)unused;
	stop_acks(m);
	Py_RETURN_NONE;
}

/*
 * announce(old, epoch, timeout_us, fresh=0) -> whether old's run()s ended
 * in time: this region takes over this rank's send/recv from old (the region
 * of view epoch; see "Send/recv across a membership change" above).  Aborts
 * old, waits (bounded) until its run()s ended, adds what this rank sent to
 * and consumed from each peer there to old's counts of the regions before
 * it (the peers of bitmap fresh, new processes, start from 0), and WRITEs
 * into each connected peer not fresh how many it sent that peer in all,
 * waiting (bounded) until those WRITEs are answered.  Call it once this
 * region is connected, before any run() on it.
 */
static PyObject *mailbox_announce(Mailbox *m, PyObject *args)
{
	PyObject *o;
	unsigned long long epoch, timeout_us, fresh = 0;
	mc_batch_id b[MAX_RANKS] = {0};
	uint64_t writing = 0;
	bool ended;
	if (!PyArg_ParseTuple(args, "O!KK|K", &MailboxType, &o, &epoch, &timeout_us, &fresh))
		return NULL;
	Mailbox *old = (Mailbox *)o;
	if (!m->base || !old->base || old == m || old->n != m->n || old->me != m->me ||
	    epoch >> (64 - VIEW_OP_BITS)) {
		PyErr_SetString(PyExc_ValueError,
				"announce: old must be another initialised Mailbox of the same "
				"rank and size, and epoch below 2**24");
		return NULL;
	}
	atomic_store(&old->aborted, true);
	Py_BEGIN_ALLOW_THREADS;
	uint64_t t0 = now_us();
	while (atomic_load(&old->running) && now_us() - t0 < timeout_us) {
		struct timespec ts = {0, MAX_SLEEP_NS};
		nanosleep(&ts, NULL);
	}
	ended = !atomic_load(&old->running);
	m->took_over = true;
	for (int r = 0; r < m->n; r++) {
		if (fresh >> r & 1)
			continue; /* a new process: nothing before this region counts */
		m->sent_before[r] = old->sent_before[r] + old->tx[r].posted;
		m->took_before[r] = old->took_before[r] + old->rx[r];
		if (r == m->me || !m->rbase[r])
			continue;
		volatile uint64_t *src = ctl(m, CTL_SENT_OUT + r);
		*src = (uint64_t)epoch << VIEW_OP_BITS | ((m->sent_before[r] + 1) & VIEW_OP_MASK);
		if (write1(m, r, (void *)src, m->rbase[r] + (CTL_SENT_IN + (uint64_t)m->me) * 8, 8,
			   &b[r]))
			writing |= 1ull << r;
	}
	uint64_t t1 = now_us();
	while (writing && now_us() - t1 < timeout_us) {
		bool ok;
		for (int r = 0; r < m->n; r++)
			if ((writing >> r & 1) && !batch_busy(m, &b[r], &ok))
				writing &= ~(1ull << r); /* a peer that is gone needs no word */
		if (writing) {
			struct timespec ts = {0, MAX_SLEEP_NS};
			nanosleep(&ts, NULL);
		}
	}
	for (int r = 0; r < m->n; r++)
		if (writing >> r & 1)
			mc_te_batch_discard(m->te, b[r]);
	Py_END_ALLOW_THREADS;
	return PyBool_FromLong(ended);
}

/* abort(): make run()s in progress on other threads, and later ones, raise. */
static PyObject *mailbox_abort(Mailbox *m, PyObject *unused)
{
	(void)unused;
	atomic_store(&m->aborted, true);
	Py_RETURN_NONE;
}

/* departed() -> bitmap of the peers that left (depart() on their side) */
static PyObject *mailbox_departed(Mailbox *m, PyObject *unused)
{
	if (!m->base)
		return PyLong_FromLong(0);
	return PyLong_FromUnsignedLongLong(departed_set(m));
}

/* reduce(op, dtype, dst_address, src_address, nbytes): dst = op(dst, src), GIL released */
static PyObject *py_reduce(PyObject *mod, PyObject *args)
{
	int op, dt;
	unsigned long long d, s, len;
	if (!PyArg_ParseTuple(args, "iiKKK", &op, &dt, &d, &s, &len))
		return NULL;
	if (op < OP_SUM || op > OP_MAX || dt < 0 || dt >= DT_COUNT || len % dt_size[dt] ||
	    (len && (!d || !s))) {
		PyErr_SetString(PyExc_ValueError, "reduce: bad op, dtype or length");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS red_fn[dt](op, (void *)(uintptr_t)d, (const void *)(uintptr_t)s,
					  len / dt_size[dt]);
	Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* local_name(engine_ptr) -> str: the engine's segment name (peers open it) */
static PyObject *py_local_name(PyObject *mod, PyObject *args)
{
	unsigned long long ptr;
	if (!PyArg_ParseTuple(args, "K", &ptr))
		return NULL;
	if (!ptr) {
		PyErr_SetString(PyExc_ValueError, "local_name: engine not initialised");
		return NULL;
	}
	return PyUnicode_FromString(mc_te_local_name((struct mc_te *)(uintptr_t)ptr));
}

static PyObject *mailbox_address(Mailbox *m, void *unused)
{
	return PyLong_FromUnsignedLongLong((uintptr_t)m->base);
}

static PyObject *mailbox_slot(Mailbox *m, void *unused)
{
	return PyLong_FromUnsignedLongLong(m->slot);
}

static PyMethodDef mailbox_methods[] = {
	{"connect", (PyCFunction)mailbox_connect, METH_VARARGS,
	 "connect(rank, segment_name, region_address): the peer's region"},
	{"run", (PyCFunction)mailbox_run, METH_VARARGS,
	 "run(sends, recvs, timeout_us, group_bitmap[, watch, epoch, op]) -> (ok, failed_bitmap)"},
	{"depart", (PyCFunction)mailbox_depart, METH_VARARGS,
	 "depart(timeout_us) -> ranks that did not answer: tell the peers this rank leaves"},
	{"announce", (PyCFunction)mailbox_announce, METH_VARARGS,
	 "announce(old, epoch, timeout_us, fresh=0) -> bool: take over send/recv from old's region"},
	{"abort", (PyCFunction)mailbox_abort, METH_NOARGS,
	 "abort(): run()s in progress on other threads, and later ones, raise RuntimeError"},
	{"departed", (PyCFunction)mailbox_departed, METH_NOARGS,
	 "departed() -> bitmap of the peers that left"},
	{"post_view", (PyCFunction)mailbox_post_view, METH_VARARGS,
	 "post_view(ranks, word, timeout_us, expect=0, ack_timeout_us=0, nowait=0) -> "
	 "(unanswered, unacknowledged): write a view word, await acknowledgements (bitmaps)"},
	{"serve_acks", (PyCFunction)mailbox_serve_acks, METH_NOARGS,
	 "serve_acks(): start the thread that acknowledges the views posted here"},
	{"stop_acks", (PyCFunction)mailbox_stop_acks, METH_NOARGS,
	 "stop_acks(): stop acknowledging views (the group leaves)"},
	{"view", (PyCFunction)mailbox_view, METH_NOARGS,
	 "view() -> the newest view word posted here (epoch << 40 | first operation)"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef mailbox_getset[] = {
	{"address", (getter)mailbox_address, NULL, "region address", NULL},
	{"slot_bytes", (getter)mailbox_slot, NULL, "bytes per slot", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject MailboxType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "mooncake._pg.Mailbox",
	.tp_basicsize = sizeof(Mailbox),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc =
		"Mailbox(engine_ptr, nranks, rank, slot_bytes, nslots, owner=None): a communicator's "
		"registered message region (python/pg.c)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)mailbox_init,
	.tp_dealloc = (destructor)mailbox_dealloc,
	.tp_methods = mailbox_methods,
	.tp_getset = mailbox_getset,
};

static PyMethodDef module_methods[] = {
	{"reduce", py_reduce, METH_VARARGS,
	 "reduce(op, dtype, dst_address, src_address, nbytes): dst = op(dst, src)"},
	{"local_name", py_local_name, METH_VARARGS,
	 "local_name(engine_ptr) -> str: the engine's segment name"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef pg_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "mooncake._pg",
	.m_doc = "Data plane of mooncake.pg (python/pg.c)",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__pg(void);

PyMODINIT_FUNC PyInit__pg(void)
{
	PyObject *mod;
	if (PyType_Ready(&MailboxType) < 0)
		return NULL;
	mod = PyModule_Create(&pg_module);
	if (!mod)
		return NULL;
	Py_INCREF(&MailboxType);
	if (PyModule_AddObject(mod, "Mailbox", (PyObject *)&MailboxType) < 0) {
		Py_DECREF(&MailboxType);
		Py_DECREF(mod);
		return NULL;
	}
	ViewChanged = PyErr_NewExceptionWithDoc(
		"mooncake._pg.ViewChanged",
		"The group's membership changed while an operation waited on the old view",
		PyExc_RuntimeError, NULL);
	if (!ViewChanged || PyModule_AddObject(mod, "ViewChanged", ViewChanged) < 0) {
		Py_XDECREF(ViewChanged);
		Py_DECREF(mod);
		return NULL;
	}
	Py_INCREF(ViewChanged); /* the module's reference and ours */
	CrossedView = PyErr_NewExceptionWithDoc(
		"mooncake._pg.CrossedView",
		"A peer sent messages on an earlier view that this rank never received there: "
		"args (peer, lost, epoch)",
		PyExc_RuntimeError, NULL);
	if (!CrossedView || PyModule_AddObject(mod, "CrossedView", CrossedView) < 0) {
		Py_XDECREF(CrossedView);
		Py_DECREF(mod);
		return NULL;
	}
	Py_INCREF(CrossedView);
	PyModule_AddIntConstant(mod, "MAX_RANKS", MAX_RANKS);
	PyModule_AddIntConstant(mod, "VIEW_OP_BITS", VIEW_OP_BITS);
	PyModule_AddIntConstant(mod, "MAX_SLOTS", MAX_SLOTS);
	return mod;
}
