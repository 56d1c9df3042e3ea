/* tests/support/coord_check.c - see coord_check.h. */
#include "coord_check.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/time.h"
#include "meta/coord.h"

#define FAIL(...)                                    \
	do {                                         \
		snprintf(why, why_len, __VA_ARGS__); \
		goto out;                            \
	} while (0)

bool mc_test_coord_view(const char *uri, char *why, size_t why_len)
{
	struct mc_coord *a = NULL, *b = NULL;
	struct mc_coord_view v;
	uint64_t va = 0, vb = 0, vc = 0, deadline;
	bool won = false, held = false, ok = false;
	char key[128];

	snprintf(key, sizeof(key), "mooncake-store/ut_%d/master_view", (int)getpid());
	if (mc_coord_open(uri, 2000, &a) != MC_OK || mc_coord_open(uri, 2000, &b) != MC_OK)
		FAIL("open %s: %s", uri, mc_last_error());
	if (mc_coord_read(a, key, &v) != MC_OK || v.present)
		FAIL("a fresh key reads as held (%s)", mc_last_error());
	if (mc_coord_campaign(a, key, "a:1", 2, &won, &va) != MC_OK || !won || !va)
		FAIL("the first campaign did not win: %s", mc_last_error());
	if (mc_coord_campaign(b, key, "b:2", 2, &won, &vb) != MC_OK || won)
		FAIL("the second campaign won too");
	if (mc_coord_read(b, key, &v) != MC_OK || !v.present || strcmp(v.addr, "a:1") ||
	    v.version != va)
		FAIL("the view is not a's: present %d addr %s version %" PRIu64 "/%" PRIu64,
		     v.present, v.addr, v.version, va);
	if (mc_coord_renew(a, &held) != MC_OK || !held)
		FAIL("the winner's renew failed: %s", mc_last_error());
	if (mc_coord_renew(b, &held) != MC_OK || held)
		FAIL("the loser's renew holds something");
	mc_coord_resign(a);
	if (mc_coord_read(b, key, &v) != MC_OK || v.present)
		FAIL("the view outlived its holder's resign");
	if (mc_coord_campaign(b, key, "b:2", 2, &won, &vb) != MC_OK || !won || vb <= va)
		FAIL("the next campaign: won %d, version %" PRIu64 " after %" PRIu64, won, vb, va);
	if (mc_coord_renew(a, &held) != MC_OK || held)
		FAIL("a resigned holder's renew still holds");
	/* not renewed: gone within the TTL (2 s), with slack for a loaded machine */
	deadline = mc_now_ms() + 15000;
	for (;;) {
		if (mc_coord_read(a, key, &v) != MC_OK)
			FAIL("read: %s", mc_last_error());
		if (!v.present)
			break;
		if (mc_now_ms() > deadline)
			FAIL("a view not renewed did not expire");
		{
			struct timespec ts = {0, 100 * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	if (mc_coord_renew(b, &held) != MC_OK || held)
		FAIL("an expired holder's renew still holds");
	if (mc_coord_campaign(a, key, "a:1", 2, &won, &vc) != MC_OK || !won || vc <= vb)
		FAIL("campaign after expiry: won %d, version %" PRIu64 " after %" PRIu64, won, vc,
		     vb);
	/* ending a view: not an older version's, then this one's at once, and
	 * its holder's renew finds it gone */
	if (mc_coord_evict(b, key, vb, &held) != MC_OK || held)
		FAIL("evicting an old version ended the view (%s)", mc_last_error());
	if (mc_coord_read(b, key, &v) != MC_OK || !v.present || v.version != vc)
		FAIL("the view changed after evicting an old version");
	if (mc_coord_evict(b, key, vc, &held) != MC_OK || !held)
		FAIL("evicting the current view did not end it: %s", mc_last_error());
	if (mc_coord_read(b, key, &v) != MC_OK || v.present)
		FAIL("the view is still there after it was evicted");
	if (mc_coord_renew(a, &held) != MC_OK || held)
		FAIL("the evicted holder's renew still holds");
	if (mc_coord_evict(b, key, vc, &held) != MC_OK || held)
		FAIL("evicting an absent view ended something");
	ok = true;
out:
	mc_coord_close(a);
	mc_coord_close(b);
	return ok;
}

/* The entry of addr in l[0..n), or NULL. */
static const struct mc_coord_cand *cand_find(const struct mc_coord_cand *l, size_t n,
					     const char *addr)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(l[i].addr, addr) == 0)
			return &l[i];
	return NULL;
}

bool mc_test_coord_cands(const char *uri, char *why, size_t why_len)
{
	struct mc_coord *a = NULL, *b = NULL;
	struct mc_coord_cand l[MC_COORD_CAND_MAX],
		ea = {.addr = "10.0.0.1:50051", .view = 7, .seq = 100};
	struct mc_coord_cand eb = {.addr = "10.0.0.2:50051", .view = 7, .seq = 90};
	const struct mc_coord_cand *x;
	uint64_t deadline;
	size_t n = 0;
	bool ok = false;
	char key[128];

	snprintf(key, sizeof(key), "mooncake-store/utc_%d/master_view", (int)getpid());
	if (mc_coord_open(uri, 2000, &a) != MC_OK || mc_coord_open(uri, 2000, &b) != MC_OK)
		FAIL("open %s: %s", uri, mc_last_error());
	if (mc_coord_cand_list(a, key, l, MC_COORD_CAND_MAX, &n) != MC_OK || n)
		FAIL("a fresh key lists %zu candidates (%s)", n, mc_last_error());
	if (mc_coord_cand_post(a, key, &ea, 2) != MC_OK ||
	    mc_coord_cand_post(b, key, &eb, 2) != MC_OK)
		FAIL("post: %s", mc_last_error());
	if (mc_coord_cand_list(a, key, l, MC_COORD_CAND_MAX, &n) != MC_OK || n != 2)
		FAIL("listing two posted: %zu (%s)", n, mc_last_error());
	x = cand_find(l, n, ea.addr);
	if (!x || x->view != 7 || x->seq != 100 || x->electing)
		FAIL("a's entry is not what it posted");
	if (!mc_coord_cand_better(x, cand_find(l, n, eb.addr)))
		FAIL("a (seq 100) is not better than b (seq 90)");
	/* posted again: replaced */
	eb.seq = 120;
	eb.electing = true;
	if (mc_coord_cand_post(b, key, &eb, 2) != MC_OK ||
	    mc_coord_cand_list(a, key, l, MC_COORD_CAND_MAX, &n) != MC_OK || n != 2)
		FAIL("listing after a second post: %zu (%s)", n, mc_last_error());
	x = cand_find(l, n, eb.addr);
	if (!x || x->seq != 120 || !x->electing)
		FAIL("b's second post did not replace its first");
	/* dropped: gone at once */
	mc_coord_cand_drop(b, key, eb.addr);
	if (mc_coord_cand_list(a, key, l, MC_COORD_CAND_MAX, &n) != MC_OK || n != 1 ||
	    !cand_find(l, n, ea.addr))
		FAIL("after b dropped its entry: %zu listed", n);
	/* b posts again and keeps posting; a stops: a's lapses, b's stays */
	if (mc_coord_cand_post(b, key, &eb, 2) != MC_OK)
		FAIL("post again: %s", mc_last_error());
	deadline = mc_now_ms() + 15000;
	for (;;) {
		if (mc_coord_cand_post(b, key, &eb, 2) != MC_OK ||
		    mc_coord_cand_list(b, key, l, MC_COORD_CAND_MAX, &n) != MC_OK)
			FAIL("post or list: %s", mc_last_error());
		if (!cand_find(l, n, eb.addr))
			FAIL("an entry posted again lapsed");
		if (!cand_find(l, n, ea.addr))
			break;
		if (mc_now_ms() > deadline)
			FAIL("an entry not posted again did not lapse");
		{
			struct timespec ts = {0, 200 * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	ok = true;
out:
	mc_coord_close(a);
	mc_coord_close(b);
	return ok;
}
