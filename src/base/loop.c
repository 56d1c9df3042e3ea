/*
 * base/loop.c - the epoll event loop (see loop.h for the contract).
 *
 * The eventfd used by mc_loop_wake and mc_loop_stop is watched like any
 * other fd, with a callback that drains it.  The stop flag is an atomic
 * the loop reads once per round, so mc_loop_stop is a store and a write.
 *
 * Due timers are first moved onto a private list, then run one by one:
 * a callback may stop or start any timer (itself included) and a timer
 * re-armed with delay 0 runs in the next round, not again in this one.
 */
#define MC_LOG_MODULE "loop"
#include "base/loop.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "base/time.h"

struct mc_loop {
	int epfd;
	struct mc_loop_fd wake; /* eventfd: mc_loop_wake, mc_loop_stop */
	atomic_bool stopping;
	uint64_t now_ms;
	uint64_t spin_us;      /* busy polling after a round with events; 0 = off */
	uint64_t spin_polls;   /* empty polls made while busy polling */
	struct mc_list timers; /* struct mc_loop_timer, armed */
	/* the round's events not yet handed out: [batch_next, batch_n) of batch */
	struct epoll_event *batch;
	int batch_next, batch_n;
	/* turn statistics: written by the loop's thread only, read by any */
	bool turn_stats, turn_cpu;
	atomic_uint_fast64_t turns, wall_sum, cpu_turns, cpu_sum, wall_max, cpu_max;
	atomic_uint_fast64_t wall_buckets[MC_LOOP_TURN_NBOUNDS + 1];
	atomic_uint_fast64_t cpu_buckets[MC_LOOP_TURN_NBOUNDS + 1];
};

const uint64_t mc_loop_turn_bounds_us[MC_LOOP_TURN_NBOUNDS] = {
	100, 1000, 5000, 10000, 50000, 100000, 500000, 1000000,
};

static void on_wake(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	uint64_t v;

	while (read(f->fd, &v, sizeof(v)) < 0 && errno == EINTR)
		;
}

mc_status mc_loop_new(struct mc_loop **out)
{
	struct mc_loop *l = mc_calloc(1, sizeof(*l));
	int wfd;

	if (!l)
		return mc_set_error(MC_ERR_NOMEM, "loop: out of memory");
	mc_list_init(&l->timers);
	atomic_init(&l->stopping, false);
	l->now_ms = mc_now_ms();
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	mc_loop_fd_init(&l->wake, wfd, on_wake);
	if (l->epfd < 0 || wfd < 0) {
		mc_set_error(MC_ERR_SOCKET, "loop: epoll/eventfd: %s", strerror(errno));
		goto err_close;
	}
	if (mc_loop_add_fd(l, &l->wake, EPOLLIN) != MC_OK)
		goto err_close;
	*out = l;
	return MC_OK;

err_close:
	if (wfd >= 0)
		close(wfd);
	if (l->epfd >= 0)
		close(l->epfd);
	mc_free(l);
	return MC_ERR_SOCKET;
}

void mc_loop_free(struct mc_loop *l)
{
	if (!l)
		return;
	close(l->wake.fd);
	close(l->epfd);
	mc_free(l);
}

void mc_loop_set_busy_poll(struct mc_loop *l, uint64_t us)
{
	l->spin_us = us;
}

uint64_t mc_loop_spin_window(uint64_t spin_us, uint64_t gap_us)
{
	uint64_t cap = MC_MIN(spin_us * MC_LOOP_SPIN_STRETCH, MC_LOOP_SPIN_STRETCH_MAX_US), win;

	cap = MC_MAX(cap, spin_us);
	if (gap_us > cap)
		return spin_us; /* none before, or too long ago: the base poll */
	win = gap_us + gap_us / 2;
	return MC_MIN(MC_MAX(win, spin_us), cap);
}

uint64_t mc_loop_now_ms(const struct mc_loop *l)
{
	return l->now_ms;
}

/* ---- file descriptors ------------------------------------------------------ */

void mc_loop_fd_init(struct mc_loop_fd *f, int fd, mc_loop_fd_cb cb)
{
	f->fd = fd;
	f->events = 0;
	f->cb = cb;
}

mc_status mc_loop_add_fd(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = f};

	if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, f->fd, &ev) < 0)
		return mc_set_error(MC_ERR_SOCKET, "loop: watching fd %d: %s", f->fd,
				    strerror(errno));
	f->events = events;
	return MC_OK;
}

mc_status mc_loop_set_events(struct mc_loop *l, struct mc_loop_fd *f, uint32_t events)
{
	struct epoll_event ev = {.events = events, .data.ptr = f};

	if (events == f->events)
		return MC_OK;
	if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, f->fd, &ev) < 0)
		return mc_set_error(MC_ERR_SOCKET, "loop: changing events of fd %d: %s", f->fd,
				    strerror(errno));
	f->events = events;
	return MC_OK;
}

void mc_loop_del_fd(struct mc_loop *l, struct mc_loop_fd *f)
{
	epoll_ctl(l->epfd, EPOLL_CTL_DEL, f->fd, NULL);
	f->events = 0;
	/* an event of f's this round has not run yet: f may be freed next */
	for (int i = l->batch_next; i < l->batch_n; i++) {
		if (l->batch[i].data.ptr == f)
			l->batch[i].data.ptr = NULL;
	}
}

/* ---- timers ------------------------------------------------------------------ */

void mc_loop_timer_init(struct mc_loop_timer *t, mc_loop_timer_cb cb)
{
	t->when_ms = 0;
	t->cb = cb;
	mc_list_init(&t->link);
}

void mc_loop_timer_start(struct mc_loop *l, struct mc_loop_timer *t, uint64_t delay_ms)
{
	mc_list_del(&t->link);
	t->when_ms = mc_now_ms() + delay_ms;
	mc_list_add_tail(&l->timers, &t->link);
}

void mc_loop_timer_stop(struct mc_loop *l, struct mc_loop_timer *t)
{
	mc_list_del(&t->link);
}

/* Runs the due timers; returns how many ran. */
static int run_timers(struct mc_loop *l, uint64_t now)
{
	int ran = 0;

	struct mc_list due, *pos, *tmp;

	mc_list_init(&due);
	mc_list_for_each_safe(pos, tmp, &l->timers) {
		struct mc_loop_timer *t = mc_list_entry(pos, struct mc_loop_timer, link);
		if (t->when_ms <= now) {
			mc_list_del(pos);
			mc_list_add_tail(&due, pos);
		}
	}
	while (!mc_list_empty(&due)) {
		struct mc_loop_timer *t = mc_list_first(&due, struct mc_loop_timer, link);
		int64_t next;

		mc_list_del(&t->link);
		ran++;
		next = t->cb(l, t, now);
		/* the callback may have re-armed t itself: that wins */
		if (next >= 0 && mc_list_empty(&t->link)) {
			t->when_ms = now + (uint64_t)next;
			mc_list_add_tail(&l->timers, &t->link);
		}
	}
	return ran;
}

/* ---- turn statistics ---------------------------------------------------------- */

void mc_loop_set_turn_stats(struct mc_loop *l, bool on, bool cpu)
{
	l->turn_stats = on;
	l->turn_cpu = on && cpu;
}

static uint64_t thread_cpu_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void bump(atomic_uint_fast64_t *n, uint64_t by)
{
	/* one writer: a load and a store, no locked instruction */
	atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + by,
			      memory_order_relaxed);
}

static void turn_record(atomic_uint_fast64_t *count, atomic_uint_fast64_t *sum,
			atomic_uint_fast64_t *buckets, atomic_uint_fast64_t *max, uint64_t us)
{
	size_t i = 0;

	while (i < MC_LOOP_TURN_NBOUNDS && us > mc_loop_turn_bounds_us[i])
		i++;
	bump(&buckets[i], 1);
	bump(sum, us);
	bump(count, 1);
	/* a reader may reset max at the same time: then a larger value wins */
	if (us > atomic_load_explicit(max, memory_order_relaxed))
		atomic_store_explicit(max, us, memory_order_relaxed);
}

void mc_loop_turn_stats_read(struct mc_loop *l, struct mc_loop_turn_stats *out, bool reset_max)
{
	memset(out, 0, sizeof(*out));
	out->turns = atomic_load_explicit(&l->turns, memory_order_relaxed);
	out->wall_us_sum = atomic_load_explicit(&l->wall_sum, memory_order_relaxed);
	out->cpu_turns = atomic_load_explicit(&l->cpu_turns, memory_order_relaxed);
	out->cpu_us_sum = atomic_load_explicit(&l->cpu_sum, memory_order_relaxed);
	for (size_t i = 0; i <= MC_LOOP_TURN_NBOUNDS; i++) {
		out->wall_buckets[i] =
			atomic_load_explicit(&l->wall_buckets[i], memory_order_relaxed);
		out->cpu_buckets[i] =
			atomic_load_explicit(&l->cpu_buckets[i], memory_order_relaxed);
	}
	if (reset_max) {
		out->wall_us_max = atomic_exchange_explicit(&l->wall_max, 0, memory_order_relaxed);
		out->cpu_us_max = atomic_exchange_explicit(&l->cpu_max, 0, memory_order_relaxed);
	} else {
		out->wall_us_max = atomic_load_explicit(&l->wall_max, memory_order_relaxed);
		out->cpu_us_max = atomic_load_explicit(&l->cpu_max, memory_order_relaxed);
	}
}

/* ---- running ----------------------------------------------------------------- */

mc_status mc_loop_run(struct mc_loop *l)
{
	struct epoll_event events[MC_LOOP_MAX_EVENTS];
	uint64_t spin_until = 0, burst_us = 0, win = 0;

	while (!atomic_load_explicit(&l->stopping, memory_order_acquire)) {
		uint64_t now = mc_now_ms(), deadline = now + MC_LOOP_MAX_WAIT_MS;
		struct mc_list *pos;
		int timeout, n;
		bool spinning;

		mc_list_for_each(pos, &l->timers) {
			const struct mc_loop_timer *t =
				mc_list_entry(pos, struct mc_loop_timer, link);
			deadline = MC_MIN(deadline, t->when_ms);
		}
		timeout = deadline > now ? (int)(deadline - now) : 0;
		spinning = spin_until && mc_now_us() < spin_until;
		if (spinning)
			timeout = 0;
		n = epoll_wait(l->epfd, events, MC_LOOP_MAX_EVENTS, timeout);
		if (n < 0 && errno != EINTR)
			return mc_set_error(MC_ERR_SOCKET, "loop: epoll_wait: %s", strerror(errno));
		if (n > 0 && l->spin_us) {
			uint64_t t = mc_now_us();

			/* a round more than half the poll after the last burst's
			 * first starts a new burst: its gap sets the window */
			if (!burst_us || t - burst_us >= l->spin_us / 2) {
				win = mc_loop_spin_window(l->spin_us,
							  burst_us ? t - burst_us : UINT64_MAX);
				burst_us = t;
			}
			spin_until = MC_MAX(spin_until, t + win);
		} else if (n == 0 && spinning)
			l->spin_polls++;
		if (n == 0 && timeout == 0)
			sched_yield(); /* polling must not keep a runnable thread off this CPU */
		uint64_t t0 = mc_now_ns(), cpu0 = 0;
		l->now_ms = t0 / 1000000u;
		if (l->turn_cpu && (n > 0 || deadline <= l->now_ms))
			cpu0 = thread_cpu_us();
		l->batch = events;
		l->batch_n = n > 0 ? n : 0;
		for (l->batch_next = 0; l->batch_next < l->batch_n;) {
			const struct epoll_event *e = &events[l->batch_next++];
			struct mc_loop_fd *f = e->data.ptr;

			if (f) /* NULL: mc_loop_del_fd by an earlier callback */
				f->cb(l, f, e->events);
		}
		l->batch_n = 0;
		l->batch_next = 0;
		if (run_timers(l, l->now_ms) + (n > 0 ? n : 0) > 0 && l->turn_stats) {
			turn_record(&l->turns, &l->wall_sum, l->wall_buckets, &l->wall_max,
				    (mc_now_ns() - t0) / 1000u);
			if (cpu0) {
				uint64_t c = thread_cpu_us();
				turn_record(&l->cpu_turns, &l->cpu_sum, l->cpu_buckets, &l->cpu_max,
					    c > cpu0 ? c - cpu0 : 0);
			}
		}
	}
	return MC_OK;
}

uint64_t mc_loop_spin_polls(const struct mc_loop *l)
{
	return l->spin_polls;
}

void mc_loop_stop(struct mc_loop *l)
{
	atomic_store_explicit(&l->stopping, true, memory_order_release);
	mc_loop_wake(l);
}

void mc_loop_wake(struct mc_loop *l)
{
	uint64_t one = 1;

	if (write(l->wake.fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		mc_warn("loop: cannot wake the loop: %s", strerror(errno));
}
