/* store/dummy_wait.c - a dummy's prediction of its answers; see dummy_wait.h. */
#include "store/dummy_wait.h"

#include <stddef.h>

#include "store/dummy_proto.h"

unsigned mc_dummy_wait_class(uint64_t bytes)
{
	unsigned c;

	if (bytes == 0)
		return 0;
	c = 1 + (unsigned)(63 - __builtin_clzll(bytes)) / 2; /* 1 MiB: 11, 4 MiB: 12 */
	return c < MC_DUMMY_WAIT_CLASSES ? c : MC_DUMMY_WAIT_CLASSES - 1;
}

void mc_dummy_wait_plan(struct mc_dummy_wait *w, uint16_t type, uint64_t bytes, uint64_t sent_us,
			struct mc_dummy_wait_plan *p)
{
	unsigned op;
	uint32_t pred, half = w->window_us / 2;

	p->slot = NULL;
	p->sent_us = p->poll_from_us = p->poll_until_us = sent_us;
	switch (type) {
	case MC_DUMMY_MSG_HELLO: /* the daemon answers these itself: not a call's time */
	case MC_DUMMY_MSG_PING:
	case MC_DUMMY_MSG_MAP_REGION:
	case MC_DUMMY_MSG_UNMAP_REGION:
		return;
	case MC_DUMMY_MSG_PUT:
	case MC_DUMMY_MSG_PUT_RANGES:
		op = 0;
		break;
	case MC_DUMMY_MSG_GET:
	case MC_DUMMY_MSG_GET_RANGES:
	case MC_DUMMY_MSG_GET_INTO_RANGES:
		op = 1;
		break;
	default:
		op = 2;
		break;
	}
	if (w->window_us == 0)
		return;
	p->slot = &w->pred_us[op][mc_dummy_wait_class(bytes)];
	pred = *p->slot;
	if (pred == 0)
		return; /* the first such call: sleep, and learn its time */
	p->poll_from_us = sent_us + (pred > half ? pred - half : 0);
	p->poll_until_us = p->poll_from_us + w->window_us;
}

void mc_dummy_wait_learn(const struct mc_dummy_wait *w, const struct mc_dummy_wait_plan *p,
			 uint64_t arrived_us, enum mc_dummy_wait_phase phase)
{
	int64_t took, pred, next;

	if (!p->slot)
		return;
	took = arrived_us > p->sent_us ? (int64_t)(arrived_us - p->sent_us) : 1;
	pred = *p->slot;
	if (pred == 0) {
		next = took;
	} else if (phase == MC_DUMMY_WAIT_SLEEPING) {
		/* took is an over-estimate by the wake-up: step down instead */
		next = pred - (pred / 8 > 1 ? pred / 8 : 1);
		if (took < next)
			next = took;
	} else if (phase == MC_DUMMY_WAIT_POLLING) {
		next = pred + (took - pred) / 4;
	} else {
		int64_t up = (took - pred) / 4, cap = pred / 4 + (int64_t)w->window_us;
		next = pred + (up < cap ? up : cap);
	}
	if (next < 1)
		next = 1;
	if (next > (int64_t)MC_DUMMY_WAIT_MAX_US)
		next = MC_DUMMY_WAIT_MAX_US;
	*p->slot = (uint32_t)next;
}
