/* tests/unit/test_loop.c - the epoll event loop (base/loop.h): fd events
 * and interest changes, an fd deleted by another's callback in the same
 * round, timers (order, re-arming, restarting an armed one,
 * stopping one another), stop and wake from another thread, busy polling,
 * turn statistics (wall and CPU time of each turn). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/compiler.h"
#include "base/loop.h"
#include "base/time.h"
#include "mooncake/status.h"

struct fdt {
	struct mc_loop_fd io;
	int reads, writes;
	char got[16];
};

static void on_pipe(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct fdt *t = mc_container_of(f, struct fdt, io);

	if (events & EPOLLIN) {
		ssize_t n = read(f->fd, t->got, sizeof(t->got) - 1);
		assert_true(n > 0);
		t->got[n] = '\0';
		t->reads++;
		mc_loop_stop(l); /* from the loop's own thread */
	}
	if (events & EPOLLOUT) {
		t->writes++;
		assert_int_equal(mc_loop_set_events(l, f, 0), MC_OK); /* once is enough */
	}
}

static void fd_events_reach_their_callback(void **state)
{
	struct mc_loop *l;
	struct fdt rd, wr;
	int p[2];
	(void)state;

	assert_int_equal(pipe(p), 0);
	assert_int_equal(mc_loop_new(&l), MC_OK);
	memset(&rd, 0, sizeof(rd));
	memset(&wr, 0, sizeof(wr));
	mc_loop_fd_init(&rd.io, p[0], on_pipe);
	mc_loop_fd_init(&wr.io, p[1], on_pipe);
	assert_int_equal(mc_loop_add_fd(l, &rd.io, EPOLLIN), MC_OK);
	assert_int_equal(mc_loop_add_fd(l, &wr.io, EPOLLOUT), MC_OK);
	assert_int_equal(rd.io.events, EPOLLIN);
	assert_int_equal(mc_loop_set_events(l, &rd.io, EPOLLIN), MC_OK); /* unchanged: no-op */
	assert_int_equal(write(p[1], "ping", 4), 4);
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_int_equal(rd.reads, 1);
	assert_string_equal(rd.got, "ping");
	assert_int_equal(wr.writes, 1);

	/* not watched any more: a write does not call back */
	mc_loop_del_fd(l, &rd.io);
	assert_int_equal(rd.io.events, 0);
	assert_int_equal(write(p[1], "x", 1), 1);
	assert_int_equal(mc_loop_add_fd(l, &wr.io, EPOLLOUT), MC_ERR_SOCKET); /* already in */
	mc_loop_free(l);
	close(p[0]);
	close(p[1]);
}

/*
 * Two fds ready in one round: the first callback stops watching the other
 * (and would free it, as the master frees another connection when a mount
 * probe or an HA stream ends).  The other's event of that round must not
 * be handed out: it would name freed memory.
 */
struct pair {
	struct mc_loop_fd io;
	struct pair *other;
	int calls;
};

static void on_pair(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct pair *x = mc_container_of(f, struct pair, io);

	(void)events;
	x->calls++;
	mc_loop_del_fd(l, &x->other->io);
	mc_loop_del_fd(l, f);
	mc_loop_stop(l);
}

static void an_fd_deleted_in_a_round_gets_no_more_events(void **state)
{
	struct mc_loop *l;
	struct pair a, b;
	int p[2], q[2];
	(void)state;

	assert_int_equal(pipe(p), 0);
	assert_int_equal(pipe(q), 0);
	assert_int_equal(mc_loop_new(&l), MC_OK);
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	a.other = &b;
	b.other = &a;
	mc_loop_fd_init(&a.io, p[0], on_pair);
	mc_loop_fd_init(&b.io, q[0], on_pair);
	assert_int_equal(mc_loop_add_fd(l, &a.io, EPOLLIN), MC_OK);
	assert_int_equal(mc_loop_add_fd(l, &b.io, EPOLLIN), MC_OK);
	/* both readable before the loop waits: one round reports both */
	assert_int_equal(write(p[1], "a", 1), 1);
	assert_int_equal(write(q[1], "b", 1), 1);
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_int_equal(a.calls + b.calls, 1);
	mc_loop_free(l);
	close(p[0]);
	close(p[1]);
	close(q[0]);
	close(q[1]);
}

struct tt {
	struct mc_loop_timer t;
	int runs;
	int64_t every;		    /* returned while runs < max */
	int max;		    /* then MC_LOOP_TIMER_STOP */
	struct mc_loop_timer *kill; /* stopped by this one's first run */
	int *order, *norder;
	int id;
};

static int64_t on_timer(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct tt *x = mc_container_of(t, struct tt, t);

	x->runs++;
	if (x->order)
		x->order[(*x->norder)++] = x->id;
	if (x->kill) {
		mc_loop_timer_stop(l, x->kill);
		x->kill = NULL;
	}
	if (x->max < 0) {
		mc_loop_stop(l);
		return MC_LOOP_TIMER_STOP;
	}
	return x->runs < x->max ? x->every : MC_LOOP_TIMER_STOP;
}

static void timers_run_when_due_and_rearm(void **state)
{
	struct mc_loop *l;
	struct tt rep = {.every = 5, .max = 4}, zero = {.every = 0, .max = 3},
		  victim = {.every = 1, .max = 100}, killer = {.max = 1}, end = {.max = -1};
	uint64_t t0;
	(void)state;

	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_timer_init(&rep.t, on_timer);
	mc_loop_timer_init(&zero.t, on_timer);
	mc_loop_timer_init(&victim.t, on_timer);
	mc_loop_timer_init(&killer.t, on_timer);
	mc_loop_timer_init(&end.t, on_timer);
	killer.kill = &victim.t;
	mc_loop_timer_start(l, &rep.t, 0);
	mc_loop_timer_start(l, &zero.t, 0);
	mc_loop_timer_start(l, &victim.t, 30);
	mc_loop_timer_start(l, &killer.t, 10); /* stops victim before it is due */
	mc_loop_timer_start(l, &end.t, 100);
	mc_loop_timer_stop(l, &end.t);
	mc_loop_timer_stop(l, &end.t); /* twice: a no-op */
	mc_loop_timer_start(l, &end.t, 80);
	t0 = mc_now_ms();
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_true(mc_now_ms() - t0 >= 80);
	assert_true(mc_now_ms() - t0 < 1000);
	assert_int_equal(rep.runs, 4);
	assert_int_equal(zero.runs, 3); /* delay 0: once a round, not forever in one */
	assert_int_equal(killer.runs, 1);
	assert_int_equal(victim.runs, 0);
	assert_int_equal(end.runs, 1);
	mc_loop_free(l);
}

static void due_timers_run_in_arming_order(void **state)
{
	struct mc_loop *l;
	int order[4], n = 0;
	struct tt a = {.max = 1, .id = 1, .order = order, .norder = &n};
	struct tt b = {.max = 1, .id = 2, .order = order, .norder = &n};
	struct tt c = {.max = -1, .id = 3, .order = order, .norder = &n};
	(void)state;

	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_timer_init(&a.t, on_timer);
	mc_loop_timer_init(&b.t, on_timer);
	mc_loop_timer_init(&c.t, on_timer);
	mc_loop_timer_start(l, &b.t, 0);
	mc_loop_timer_start(l, &a.t, 0);
	mc_loop_timer_start(l, &c.t, 0);
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_int_equal(n, 3);
	assert_int_equal(order[0], 2);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 3);
	mc_loop_free(l);
}

/* te/rpc.c re-arms a list's timer while it may still be armed for an
 * earlier head: the new time replaces the old one. */
static void restarting_an_armed_timer_moves_it(void **state)
{
	struct mc_loop *l;
	struct tt later = {.max = 1}, sooner = {.max = 1}, end = {.max = -1};
	uint64_t t0;
	(void)state;

	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_timer_init(&later.t, on_timer);
	mc_loop_timer_init(&sooner.t, on_timer);
	mc_loop_timer_init(&end.t, on_timer);
	mc_loop_timer_start(l, &later.t, 10);
	mc_loop_timer_start(l, &later.t, 5000); /* armed: moved later */
	mc_loop_timer_start(l, &sooner.t, 5000);
	mc_loop_timer_start(l, &sooner.t, 10); /* armed: moved sooner */
	mc_loop_timer_start(l, &end.t, 200);
	t0 = mc_now_ms();
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_true(mc_now_ms() - t0 < 1000);
	assert_int_equal(later.runs, 0);
	assert_int_equal(sooner.runs, 1);
	assert_int_equal(end.runs, 1);
	mc_loop_free(l);
}

struct poker {
	struct mc_loop *l;
	bool stop;
};

static void *poke(void *arg)
{
	struct poker *p = arg;

	usleep(50 * 1000);
	if (p->stop)
		mc_loop_stop(p->l);
	else
		mc_loop_wake(p->l);
	return NULL;
}

struct waker {
	struct mc_loop_timer t;
	uint64_t armed_at;
	uint64_t woke_after;
};

static void stop_and_wake_from_another_thread(void **state)
{
	struct mc_loop *l;
	struct poker p;
	pthread_t th;
	uint64_t t0;
	(void)state;

	/* no timers: the loop sleeps MC_LOOP_MAX_WAIT_MS at a time; stop ends that */
	assert_int_equal(mc_loop_new(&l), MC_OK);
	p.l = l;
	p.stop = true;
	t0 = mc_now_ms();
	assert_int_equal(pthread_create(&th, NULL, poke, &p), 0);
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_true(mc_now_ms() - t0 < MC_LOOP_MAX_WAIT_MS / 2);
	pthread_join(th, NULL);

	/* a wake alone does not stop it; the stop after it does */
	p.stop = false;
	assert_int_equal(pthread_create(&th, NULL, poke, &p), 0);
	pthread_join(th, NULL);
	mc_loop_stop(l);
	assert_int_equal(mc_loop_run(l), MC_OK);
	mc_loop_free(l);
	mc_loop_free(NULL);
}

/* Empty polls the loop makes over 100 ms after one event. */
static uint64_t spins_after_one_event(uint64_t busy_poll_us)
{
	struct mc_loop *l;
	struct fdt wr;
	struct tt end = {.max = -1};
	int p[2];
	uint64_t t0, spins;

	assert_int_equal(pipe(p), 0);
	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_set_busy_poll(l, busy_poll_us);
	memset(&wr, 0, sizeof(wr));
	mc_loop_fd_init(&wr.io, p[1], on_pipe);
	assert_int_equal(mc_loop_add_fd(l, &wr.io, EPOLLOUT), MC_OK); /* one event, then off */
	mc_loop_timer_init(&end.t, on_timer);
	mc_loop_timer_start(l, &end.t, 100);
	t0 = mc_now_ms();
	assert_int_equal(mc_loop_run(l), MC_OK);
	assert_true(mc_now_ms() - t0 >= 100);
	assert_true(mc_loop_now_ms(l) >= t0 + 100);
	assert_int_equal(wr.writes, 1);
	spins = mc_loop_spin_polls(l);
	mc_loop_free(l);
	close(p[0]);
	close(p[1]);
	return spins;
}

static void busy_poll_spins_after_events(void **state)
{
	(void)state;

	/* without busy polling the loop sleeps until the timer; with it, it
	 * polls (yielding between polls) for the whole 100 ms after the event.
	 * Counted in polls, not CPU time, so that a loaded machine cannot fail
	 * it: the first poll after the event comes within the 1 s window */
	assert_int_equal(spins_after_one_event(0), 0);
	assert_true(spins_after_one_event(1000 * 1000) >= 1);
}

static void busy_poll_stretches_to_close_bursts(void **state)
{
	(void)state;

	/* bursts 60-200 us apart (a client's batches with their transfers
	 * between them) are polled through; a first burst, one further apart
	 * or polling off keeps the base poll */
	assert_int_equal(mc_loop_spin_window(50, UINT64_MAX), 50);
	assert_int_equal(mc_loop_spin_window(50, 10), 50);
	assert_int_equal(mc_loop_spin_window(50, 60), 90);
	assert_int_equal(mc_loop_spin_window(50, 100), 150);
	assert_int_equal(mc_loop_spin_window(50, 180), 200);
	assert_int_equal(mc_loop_spin_window(50, 200), 200);
	assert_int_equal(mc_loop_spin_window(50, 201), 50);
	assert_int_equal(mc_loop_spin_window(50, 850), 50);
	assert_int_equal(mc_loop_spin_window(20, 60), 80); /* 4 base polls */
	assert_int_equal(mc_loop_spin_window(20, 81), 20);
	/* a long base poll (a conductor's 300) is not stretched */
	assert_int_equal(mc_loop_spin_window(300, 250), 300);
	assert_int_equal(mc_loop_spin_window(300, 1000), 300);
	assert_int_equal(mc_loop_spin_window(0, 100), 0);
	assert_int_equal(mc_loop_spin_window(0, 0), 0);
}

/* ---- turn statistics: a turn that works and one that waits ---- */

static uint64_t cpu_us_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int64_t on_spin(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	uint64_t c0 = cpu_us_now();
	(void)l, (void)t, (void)now_ms;

	while (cpu_us_now() - c0 < 3000) /* 3 ms of this thread's CPU */
		;
	return MC_LOOP_TIMER_STOP;
}

static int64_t on_nap(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	struct timespec ts = {0, 30 * 1000 * 1000};
	(void)l, (void)t, (void)now_ms;

	/* a turn that is long in wall time and costs no CPU: what a turn looks
	 * like whose thread waited for a CPU (this is the event under test, not
	 * a synchronisation) */
	nanosleep(&ts, NULL);
	return MC_LOOP_TIMER_STOP;
}

static int64_t on_end(struct mc_loop *l, struct mc_loop_timer *t, uint64_t now_ms)
{
	(void)t, (void)now_ms;
	mc_loop_stop(l);
	return MC_LOOP_TIMER_STOP;
}

/* Turns longer than bound_us (one of the bucket bounds): bucket i > 0 holds
 * (bounds[i - 1], bounds[i]], the last one everything above. */
static uint64_t above(const uint64_t *buckets, uint64_t bound_us)
{
	uint64_t n = 0;

	for (size_t i = 1; i <= MC_LOOP_TURN_NBOUNDS; i++)
		if (mc_loop_turn_bounds_us[i - 1] >= bound_us)
			n += buckets[i];
	return n;
}

static void turn_stats_tell_work_from_waiting(void **state)
{
	struct mc_loop *l;
	struct mc_loop_timer spin, nap, end;
	struct mc_loop_turn_stats st;
	uint64_t wall_n = 0, cpu_n = 0;
	(void)state;

	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_set_turn_stats(l, true, true);
	mc_loop_timer_init(&spin, on_spin);
	mc_loop_timer_init(&nap, on_nap);
	mc_loop_timer_init(&end, on_end);
	mc_loop_timer_start(l, &spin, 0);
	mc_loop_timer_start(l, &nap, 5);
	mc_loop_timer_start(l, &end, 50);
	assert_int_equal(mc_loop_run(l), MC_OK);

	mc_loop_turn_stats_read(l, &st, true);
	for (size_t i = 0; i <= MC_LOOP_TURN_NBOUNDS; i++) {
		wall_n += st.wall_buckets[i];
		cpu_n += st.cpu_buckets[i];
	}
	/* three timer turns (the loop may also have handed out no events) */
	assert_true(st.turns >= 3);
	assert_int_equal(wall_n, st.turns);
	assert_int_equal(cpu_n, st.cpu_turns);
	assert_int_equal(st.cpu_turns, st.turns);
	/* the nap: at least 30 ms of wall; no turn reached 10 ms of CPU */
	assert_true(st.wall_us_max >= 30000);
	assert_true(above(st.wall_buckets, 10000) >= 1);
	assert_int_equal(above(st.cpu_buckets, 10000), 0);
	/* the spin: 3 ms of CPU in one turn */
	assert_true(st.cpu_us_max >= 3000 && st.cpu_us_max < 10000);
	assert_true(st.cpu_us_sum >= 3000);
	/* the maxima were reset by that read, the counts were not */
	mc_loop_turn_stats_read(l, &st, false);
	assert_int_equal(st.wall_us_max, 0);
	assert_int_equal(st.cpu_us_max, 0);
	assert_true(st.turns >= 3);
	mc_loop_free(l);
}

static void turn_stats_off_by_default(void **state)
{
	struct mc_loop *l;
	struct mc_loop_timer end;
	struct mc_loop_turn_stats st;
	(void)state;

	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_timer_init(&end, on_end);
	mc_loop_timer_start(l, &end, 1);
	assert_int_equal(mc_loop_run(l), MC_OK);
	mc_loop_turn_stats_read(l, &st, false);
	assert_int_equal(st.turns, 0);
	assert_int_equal(st.cpu_turns, 0);
	mc_loop_free(l);
	/* wall only: no CPU clock reads (a stopped loop stays stopped: a new one) */
	assert_int_equal(mc_loop_new(&l), MC_OK);
	mc_loop_set_turn_stats(l, true, false);
	mc_loop_timer_start(l, &end, 1);
	assert_int_equal(mc_loop_run(l), MC_OK);
	mc_loop_turn_stats_read(l, &st, false);
	assert_true(st.turns >= 1);
	assert_int_equal(st.cpu_turns, 0);
	mc_loop_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fd_events_reach_their_callback),
		cmocka_unit_test(an_fd_deleted_in_a_round_gets_no_more_events),
		cmocka_unit_test(timers_run_when_due_and_rearm),
		cmocka_unit_test(due_timers_run_in_arming_order),
		cmocka_unit_test(restarting_an_armed_timer_moves_it),
		cmocka_unit_test(stop_and_wake_from_another_thread),
		cmocka_unit_test(busy_poll_spins_after_events),
		cmocka_unit_test(busy_poll_stretches_to_close_bursts),
		cmocka_unit_test(turn_stats_tell_work_from_waiting),
		cmocka_unit_test(turn_stats_off_by_default),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
