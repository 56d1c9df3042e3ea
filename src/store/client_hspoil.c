/*
 * store/client_hspoil.c - holders spoil (protocol minor 15; proto.h
 * "Holders spoil", master/hspoil.c, docs/design.md "Gets without the
 * master").
 *
 * A master of minor 15 lists in this client's Ping answer the blocks of
 * its own segments that an override parked while a reader's lease was
 * running and whose writer spoils nothing (an older or upstream client, a
 * force RemoveByRegex or RemoveAll).  The heartbeat complements the first
 * min(MC_STORE_SPOIL_LEN, size) bytes of each in this process's memory -
 * a store, no transfer: the block is parked, nobody writes it - so a
 * location cached by any reader fails its check and asks the master, then
 * names the ids in a SpoilDone so the master gives the blocks back at
 * once.  Only within the answer's spoil_ms of the ping's send, less the
 * cache's margin: later the block may be someone else's.  Only addresses
 * inside a segment this client still has in memory are written (an
 * unmounted-and-freed extra segment is skipped).
 */
#define MC_LOG_MODULE "store"
#include <inttypes.h>

#include "base/alloc.h"
#include "base/log.h"
#include "base/time.h"
#include "store/client_int.h"
#include "store/master_conn.h"

static bool inside(uint64_t a, uint64_t len, const void *base, uint64_t size)
{
	uint64_t b = (uint64_t)(uintptr_t)base;

	return base && a >= b && len <= size && a - b <= size - len;
}

/* Under xseg_lock: the memory of [a, a + len) is this client's, mapped. */
static bool ours_locked(struct mc_store *s, uint64_t a, uint64_t len)
{
	if (inside(a, len, s->seg, s->seg_size))
		return true;
	for (size_t i = 0; i < s->n_xsegs; i++)
		if (!s->xsegs[i].freeing && inside(a, len, s->xsegs[i].base, s->xsegs[i].size))
			return true;
	return false;
}

void mc_store_holder_spoil(struct mc_store *s, uint64_t sent_ms, const struct mc_store_ping_resp *p)
{
	struct mc_store_spoil_done_req req = {0, NULL};
	struct mc_store_msg resp;
	uint64_t ms = p->spoil_ms.present ? p->spoil_ms.value : 0;
	uint64_t until = sent_ms + ms - MC_MIN(ms, mc_store_loc_margin_ms(ms));
	uint32_t done = 0;

	if (p->n_spoil == 0)
		return;
	req.ids = mc_calloc(p->n_spoil, sizeof(*req.ids));
	pthread_mutex_lock(&s->xseg_lock);
	for (uint32_t i = 0; i < p->n_spoil && mc_now_ms() < until; i++) {
		const struct mc_store_hspoil *h = &p->spoil[i];
		uint64_t len = MC_MIN(h->size, (uint64_t)MC_STORE_SPOIL_LEN);
		volatile unsigned char *b = (volatile unsigned char *)(uintptr_t)h->address;

		if (len == 0 || !ours_locked(s, h->address, len)) {
			mc_warn("master listed a block to spoil outside this client's segments "
				"(0x%" PRIx64 ", %" PRIu64 " bytes): skipped",
				h->address, h->size);
			continue;
		}
		for (uint64_t k = 0; k < len; k++)
			b[k] = (unsigned char)~b[k];
		done++;
		if (h->id && req.ids)
			req.ids[req.n_ids++] = h->id;
	}
	pthread_mutex_unlock(&s->xseg_lock);
	if (done < p->n_spoil)
		mc_debug("spoiled %u of %u listed blocks (late or not ours)", done, p->n_spoil);
	/* best effort: the blocks come back at their lease's end otherwise */
	if (req.n_ids && mc_master_conn_call(s->conn, MC_STORE_SPOIL_DONE, &req, &resp) == MC_OK)
		mc_store_msg_release(&resp);
	mc_free(req.ids);
	atomic_fetch_add(&s->hspoils, done);
}
