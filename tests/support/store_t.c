/* tests/support/store_t.c - see store_t.h. */
#include "store_t.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>

#include <cmocka.h>

#include "master/server.h"
#include "mooncake/log.h"
#include "support.h"

struct mc_master_server *st_master;
char st_master_addr[64];
char st_meta_uri[128];

int st_master_start(void (*tune)(struct mc_master_server_config *c))
{
	st_master = mc_test_master_start(tune, st_master_addr, sizeof(st_master_addr), st_meta_uri,
					 sizeof(st_meta_uri));
	return st_master ? 0 : -1;
}

void st_master_stop(void)
{
	mc_master_server_stop(st_master);
	st_master = NULL;
}

void st_no_eviction(struct mc_master_server_config *c)
{
	c->master.eviction_ratio = 0;
	c->master.eviction_high_watermark_ratio = 1.0;
}

struct mc_store_params st_params(uint64_t seg, uint64_t lbuf)
{
	struct mc_store_params p = {
		.local_hostname = "127.0.0.1",
		.metadata_server = st_meta_uri,
		.global_segment_size = seg,
		.local_buffer_size = lbuf,
		.protocol = "tcp",
		.master_server_addr = st_master_addr,
	};
	return p;
}

struct mc_store *st_client_open(const struct mc_store_params *p)
{
	struct mc_store *s = NULL;

	assert_int_equal(mc_store_new(&s), MC_OK);
	if (mc_store_setup(s, p) != MC_OK)
		fail_msg("setup: %s", mc_last_error());
	return s;
}

struct mc_store *st_client_new(uint64_t seg, uint64_t lbuf)
{
	struct mc_store_params p = st_params(seg, lbuf);

	return st_client_open(&p);
}

int st_setup_pair(void (*tune)(struct mc_master_server_config *c), uint64_t seg, uint64_t lbuf,
		  struct mc_store **a, struct mc_store **b)
{
	if (st_master_start(tune) != 0)
		return -1;
	*a = st_client_new(seg, lbuf);
	*b = st_client_new(seg, lbuf);
	return 0;
}

void st_teardown_pair(struct mc_store *a, struct mc_store *b)
{
	mc_store_free(a);
	mc_store_free(b);
	st_master_stop();
}

struct mc_store_config st_prefer(struct mc_store *s)
{
	struct mc_store_config c = {.replica_num = 1, .preferred_segment = mc_store_hostname(s)};

	return c;
}

void st_expect_get(struct mc_store *s, const char *key, const void *want, size_t len)
{
	void *got = NULL;
	int64_t n = mc_store_get(s, key, &got);

	if (n < 0)
		fail_msg("get %s: %lld (%s)", key, (long long)n, mc_last_error());
	assert_int_equal(n, len);
	assert_memory_equal(got, want, len);
	free(got);
}
