/*
 * tests/unit/test_store_restart.c - a holder that restarts under its name.
 *
 * A store client names its engine after local_hostname's host:port, so a
 * holder that comes back on the same port has the same segment name, but
 * another data port and other memory.  A client that moved bytes to the
 * first one keeps that one's descriptor; its next put into, or get from,
 * the new one failed with MC_ERR_TRANSFER_FAIL (-800) before it refetched
 * the descriptor, at random in the tests, whose clients pick their ports
 * at random (client_xfer.c, retry_renewed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mooncake/store.h"
#include "store_t.h"
#include "support.h"

#define MiB (1ull << 20)
#define LEN (256 * 1024)

static int group_setup(void **state)
{
	(void)state;
	return st_master_start(st_no_eviction);
}

static int group_teardown(void **state)
{
	(void)state;
	st_master_stop();
	return 0;
}

/* A holder named 127.0.0.1:port with a 16 MiB segment. */
static struct mc_store *holder_at(uint16_t port)
{
	char name[64];
	struct mc_store_params p = st_params(16 * MiB, 16 * MiB);

	snprintf(name, sizeof(name), "127.0.0.1:%u", port);
	p.local_hostname = name;
	return st_client_open(&p);
}

/* A (no segment of its own) puts into and reads from the first holder on
 * a port, then from the one that took its place: puts into the second
 * land, and a key the second put itself reads back through A.  Over TCP
 * (shm false: MC_SHM_DISABLE, read by each engine as it starts) or the
 * same-host transport. */
static void second_holder_serves(bool shm)
{
	uint16_t port = mc_test_free_port();
	struct mc_store *A, *H, *H2;
	struct mc_store_config on_h;
	char *v = malloc(2 * LEN), name[64];
	const char *const *k = shm ? (const char *const[]){"rs-s1", "rs-s2", "rs-s3"}
				   : (const char *const[]){"rs-t1", "rs-t2", "rs-t3"};

	if (shm)
		unsetenv("MC_SHM_DISABLE");
	else
		setenv("MC_SHM_DISABLE", "1", 1);
	A = st_client_new(0, 16 * MiB);
	H = holder_at(port);
	assert_non_null(v);
	mc_test_fill(v, 2 * LEN, 51);
	on_h = st_prefer(H);
	snprintf(name, sizeof(name), "127.0.0.1:%u", port);
	assert_string_equal(on_h.preferred_segment, name);
	assert_int_equal(mc_store_put(A, k[0], v, LEN, &on_h), MC_OK);
	st_expect_get(A, k[0], v, LEN);
	mc_store_free(H);

	H2 = holder_at(port);
	on_h = st_prefer(H2);
	assert_string_equal(on_h.preferred_segment, name); /* the premise: the same name */
	assert_int_equal(mc_store_put(A, k[1], v + LEN, LEN, &on_h), MC_OK);
	st_expect_get(A, k[1], v + LEN, LEN);
	st_expect_get(H2, k[1], v + LEN, LEN); /* it landed in H2's memory */
	mc_store_free(H2);

	H = holder_at(port); /* and once more, read first */
	on_h = st_prefer(H);
	assert_int_equal(mc_store_put(H, k[2], v, LEN, &on_h), MC_OK);
	st_expect_get(A, k[2], v, LEN);
	mc_store_free(H);
	mc_store_free(A);
	free(v);
	unsetenv("MC_SHM_DISABLE");
}

static void the_second_holder_on_a_port_serves_tcp(void **state)
{
	(void)state;
	second_holder_serves(false);
}

static void the_second_holder_on_a_port_serves_shm(void **state)
{
	(void)state;
	second_holder_serves(true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_second_holder_on_a_port_serves_tcp),
		cmocka_unit_test(the_second_holder_on_a_port_serves_shm),
	};
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
