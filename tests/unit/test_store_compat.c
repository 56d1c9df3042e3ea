/*
 * tests/unit/test_store_compat.c - upstream's store C API (store_c.h) the
 * way an upstream program uses it: only that header, linked against
 * libmooncake.so, so the test proves the names are exported.  The data
 * path is covered by test_store_client, which compiles the same file
 * against an in-process master; here no master runs, so the cases are the
 * argument conventions and a setup that cannot reach its master.
 */
#include <mooncake/store_c.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

/* A loopback port nobody listens on (bound, then closed). */
static unsigned closed_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t l = sizeof(a);
	unsigned port = 0;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &l) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static void null_arguments_give_minus_one(void **state)
{
	mooncake_store_t h = mooncake_store_create();
	const char *keys[1] = {"k"};
	void *bufs[1] = {NULL};
	size_t sizes[1] = {1};
	int ires[1];
	int64_t gres[1];
	char v[4] = "abc", name[8];
	(void)state;
	assert_non_null(h);
	assert_int_equal(mooncake_store_setup(NULL, "h", "P2PHANDSHAKE", 0, 0, "tcp", "", NULL),
			 -1);
	assert_int_equal(mooncake_store_health_check(NULL), -1);
	assert_int_equal(mooncake_store_put(h, NULL, v, 1, NULL), -1);
	assert_int_equal(mooncake_store_put(h, "k", NULL, 1, NULL), -1);
	assert_int_equal(mooncake_store_put_from(NULL, "k", v, 1, NULL), -1);
	assert_int_equal(mooncake_store_get_into(h, NULL, v, 1), -1);
	assert_int_equal(mooncake_store_batch_put_from(h, keys, bufs, sizes, 1, NULL, ires), -1);
	assert_int_equal(mooncake_store_batch_get_into(h, keys, bufs, sizes, 1, gres), -1);
	assert_int_equal(mooncake_store_batch_is_exist(h, NULL, 1, ires), -1);
	assert_int_equal(mooncake_store_is_exist(NULL, "k"), -1);
	assert_int_equal(mooncake_store_get_size(h, NULL), -1);
	assert_int_equal(mooncake_store_get_hostname(h, NULL, 8), -1);
	assert_int_equal(mooncake_store_remove(h, NULL, 0), -1);
	assert_int_equal(mooncake_store_remove_by_regex(h, NULL, 0), -1);
	assert_int_equal(mooncake_store_remove_all(NULL, 0), -1);
	assert_int_equal(mooncake_store_register_buffer(h, NULL, 8), -1);
	assert_int_equal(mooncake_store_register_buffer(h, v, 0), -1);
	assert_int_equal(mooncake_store_unregister_buffer(NULL, v), -1);
	assert_int_equal(mooncake_store_init_all(NULL, "tcp", "", 1 << 20), -1);
	/* not set up: upstream's INVALID_PARAMS, health 1, empty hostname */
	assert_int_equal(mooncake_store_health_check(h), 1);
	assert_int_equal(mooncake_store_put(h, "k", v, sizeof(v), NULL), -600);
	assert_int_equal(mooncake_store_get_hostname(h, name, sizeof(name)), 0);
	assert_string_equal(name, "");
	mooncake_store_set_etcd_tls_config(h, NULL, "", NULL);
	mooncake_store_set_etcd_tls_config(NULL, "ca", "cert", "key");
	mooncake_store_destroy(h);
	mooncake_store_destroy(NULL);
}

static void setup_without_master_is_rpc_fail(void **state)
{
	mooncake_store_t h = mooncake_store_create();
	char addr[64];
	(void)state;
	assert_non_null(h);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", closed_port());
	assert_int_equal(mooncake_store_setup(h, "127.0.0.1", "P2PHANDSHAKE", 1 << 20, 1 << 20,
					      "tcp", "", addr),
			 -900);
	assert_int_equal(mooncake_store_health_check(h), 1);
	mooncake_store_destroy(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(null_arguments_give_minus_one),
		cmocka_unit_test(setup_without_master_is_rpc_fail),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
