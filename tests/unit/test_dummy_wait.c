/*
 * tests/unit/test_dummy_wait.c - a dummy client's prediction of its
 * answers (store/dummy_wait.h), on made-up times: size classes; off means
 * no window and nothing learnt; the first call learns its time; the
 * window centres on steady answers; answers found while sleeping pull the
 * window earlier even though their measured time (with the wake-up) is
 * late; one stall raises the prediction by a bounded step; the daemon's
 * own requests (ping, regions) learn nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "store/dummy_proto.h"
#include "store/dummy_wait.h"

#define MIB (1ull << 20)

static void size_classes(void **state)
{
	(void)state;
	assert_int_equal(mc_dummy_wait_class(0), 0);
	assert_int_equal(mc_dummy_wait_class(1), 1);
	assert_int_equal(mc_dummy_wait_class(MIB), 11);
	assert_int_equal(mc_dummy_wait_class(4 * MIB), 12);
	assert_int_equal(mc_dummy_wait_class(2 * MIB - 1), 11);
	assert_int_equal(mc_dummy_wait_class(MIB - 1), 10);
	assert_int_equal(mc_dummy_wait_class(UINT64_MAX), MC_DUMMY_WAIT_CLASSES - 1);
}

static void off_plans_no_window(void **state)
{
	struct mc_dummy_wait w;
	struct mc_dummy_wait_plan p;
	(void)state;

	memset(&w, 0, sizeof(w));
	mc_dummy_wait_plan(&w, MC_DUMMY_MSG_GET, MIB, 1000, &p);
	assert_null(p.slot);
	assert_true(p.poll_from_us == p.poll_until_us);
	mc_dummy_wait_learn(&w, &p, 1300, MC_DUMMY_WAIT_LATE);
	for (int op = 0; op < MC_DUMMY_WAIT_OPS; op++)
		for (int c = 0; c < MC_DUMMY_WAIT_CLASSES; c++)
			assert_int_equal(w.pred_us[op][c], 0);
}

/* One call of type/bytes at `at` whose answer arrives `took` us later;
 * where it is found follows from the plan, as the dummy would find it. */
static struct mc_dummy_wait_plan one_call(struct mc_dummy_wait *w, uint16_t type, uint64_t bytes,
					  uint64_t at, uint64_t took)
{
	struct mc_dummy_wait_plan p;
	enum mc_dummy_wait_phase ph;
	uint64_t arrive = at + took, seen = arrive;

	mc_dummy_wait_plan(w, type, bytes, at, &p);
	if (p.poll_from_us == p.poll_until_us) {
		ph = MC_DUMMY_WAIT_LATE;
		seen = arrive + 40; /* asleep: the wake-up */
	} else if (arrive < p.poll_from_us) {
		ph = MC_DUMMY_WAIT_SLEEPING;
		seen = arrive + 40;
	} else if (arrive < p.poll_until_us) {
		ph = MC_DUMMY_WAIT_POLLING;
	} else {
		ph = MC_DUMMY_WAIT_LATE;
		seen = arrive + 40;
	}
	mc_dummy_wait_learn(w, &p, seen, ph);
	return p;
}

static void window_centres_on_steady_answers(void **state)
{
	struct mc_dummy_wait w;
	struct mc_dummy_wait_plan p;
	uint64_t t = 1000000;
	(void)state;

	memset(&w, 0, sizeof(w));
	w.window_us = 50;
	p = one_call(&w, MC_DUMMY_MSG_GET, MIB, t, 300);
	assert_non_null(p.slot);
	assert_true(p.poll_from_us == p.poll_until_us); /* nothing known yet */
	assert_int_equal(w.pred_us[1][11], 340);	/* learnt, wake-up and all */
	for (int i = 0; i < 40; i++)
		p = one_call(&w, MC_DUMMY_MSG_GET, MIB, t += 1000, 300);
	/* sleeping answers walked it down into the window: it stays there */
	assert_true(p.poll_from_us <= t + 300 && t + 300 < p.poll_until_us);
	assert_int_equal(p.poll_until_us - p.poll_from_us, 50);
	assert_true(w.pred_us[1][11] >= 280 && w.pred_us[1][11] <= 320);
	/* another kind and size learnt apart */
	assert_int_equal(w.pred_us[0][11], 0);
	assert_int_equal(w.pred_us[1][12], 0);
}

static void short_calls_poll_from_the_start(void **state)
{
	struct mc_dummy_wait w;
	struct mc_dummy_wait_plan p;
	(void)state;

	memset(&w, 0, sizeof(w));
	w.window_us = 50;
	w.pred_us[2][0] = 10;
	p = one_call(&w, MC_DUMMY_MSG_EXIST, 0, 5000, 9);
	assert_int_equal(p.poll_from_us, 5000);
	assert_int_equal(p.poll_until_us, 5050);
	assert_true(w.pred_us[2][0] >= 9 && w.pred_us[2][0] <= 10);
}

static void a_stall_moves_the_window_a_bounded_step(void **state)
{
	struct mc_dummy_wait w;
	(void)state;

	memset(&w, 0, sizeof(w));
	w.window_us = 50;
	w.pred_us[0][11] = 300;
	one_call(&w, MC_DUMMY_MSG_PUT, MIB, 1000, 20000); /* a 20 ms stall */
	assert_int_equal(w.pred_us[0][11], 300 + 300 / 4 + 50);
	for (int i = 0; i < 30; i++) /* and back within a few dozen calls */
		one_call(&w, MC_DUMMY_MSG_PUT, MIB, 100000 + i * 1000, 300);
	assert_true(w.pred_us[0][11] >= 275 && w.pred_us[0][11] <= 325);
	/* a real change of speed is followed */
	for (int i = 0; i < 40; i++)
		one_call(&w, MC_DUMMY_MSG_PUT, MIB, 200000 + i * 10000, 1200);
	assert_true(w.pred_us[0][11] >= 1150 && w.pred_us[0][11] <= 1250);
	/* never past the cap */
	for (int i = 0; i < 200; i++)
		one_call(&w, MC_DUMMY_MSG_PUT, MIB, 1000000 + i * 10000000ull, 5000000);
	assert_int_equal(w.pred_us[0][11], MC_DUMMY_WAIT_MAX_US);
}

static void own_requests_learn_nothing(void **state)
{
	static const uint16_t types[] = {MC_DUMMY_MSG_HELLO, MC_DUMMY_MSG_PING,
					 MC_DUMMY_MSG_MAP_REGION, MC_DUMMY_MSG_UNMAP_REGION};
	struct mc_dummy_wait w;
	struct mc_dummy_wait_plan p;
	(void)state;

	memset(&w, 0, sizeof(w));
	w.window_us = 50;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		p = one_call(&w, types[i], 0, 1000, 5);
		assert_null(p.slot);
	}
	assert_int_equal(w.pred_us[2][0], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(size_classes),
		cmocka_unit_test(off_plans_no_window),
		cmocka_unit_test(window_centres_on_steady_answers),
		cmocka_unit_test(short_calls_poll_from_the_start),
		cmocka_unit_test(a_stall_moves_the_window_a_bounded_step),
		cmocka_unit_test(own_requests_learn_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
