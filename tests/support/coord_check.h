/*
 * tests/support/coord_check.h - one behavioural check of a leader-view
 * backend (meta/coord.h), run against a real etcd by test_meta_etcd.c and
 * a real redis-server by test_meta_redis.c.
 */
#ifndef MC_TEST_COORD_CHECK_H
#define MC_TEST_COORD_CHECK_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Two clients of uri campaign for one view key: only one wins; the view
 * names it with a version; the loser's renew holds nothing; resigning
 * frees the key at once; the next winner's version is larger; a view not
 * renewed vanishes within its TTL and the old holder's renew then says
 * so; evicting ends a view only when its version matches, and its
 * holder's renew then finds it gone.  false with the first failed step in why.
 */
bool mc_test_coord_view(const char *uri, char *why, size_t why_len);

/*
 * Candidate entries (mc_coord_cand_*): two clients post, both are listed
 * with what they posted; a second post replaces the first; a dropped
 * entry is gone at once; one not posted again lapses within its TTL
 * while the other, posted again, stays.  false with the first failed
 * step in why.
 */
bool mc_test_coord_cands(const char *uri, char *why, size_t why_len);

#endif
