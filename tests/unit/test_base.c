/* tests/unit/test_base.c - status table, config parsers and tables, host:port splitting, list. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <sys/resource.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/list.h"
#include "base/log.h"
#include "base/sock.h"
#include "mooncake/status.h"
#include "support.h"

static void status_names_and_numbers_are_pinned(void **state)
{
	(void)state;
	assert_int_equal(MC_ERR_NO_AVAILABLE_HANDLE, -200);
	assert_int_equal(MC_ERR_OBJECT_NOT_FOUND, -704);
	assert_int_equal(MC_ERR_INVALID_PARAMS, -600);
	assert_string_equal(mc_status_name(MC_ERR_TIMEOUT), "ERR_TIMEOUT");
	assert_string_equal(mc_strerror(MC_OK), "success");
	assert_string_equal(mc_strerror((mc_status)12345), "unknown status");
}

static void parse_size_accepts_units_and_rejects_garbage(void **state)
{
	uint64_t v;
	(void)state;
	assert_true(mc_parse_size("64kb", &v));
	assert_int_equal(v, 65536);
	assert_true(mc_parse_size("3g", &v));
	assert_int_equal(v, 3ull << 30);
	assert_true(mc_parse_size("1MiB", &v));
	assert_int_equal(v, 1 << 20);
	assert_false(mc_parse_size("-1", &v));
	assert_false(mc_parse_size("12q", &v));
	assert_false(mc_parse_size("99999999999999999999t", &v));
	assert_false(mc_parse_size("", &v));
}

struct cfg {
	int64_t n;
	uint64_t sz;
	bool flag;
	char *s;
};

static const struct mc_config_entry cfg_tab[] = {
	{.f = {"n", "TEST_MC_N", "5", "a number", offsetof(struct cfg, n), MC_CONFIG_INT, 1, 10}},
	{.f = {"sz", NULL, "1k", "a size", offsetof(struct cfg, sz), MC_CONFIG_SIZE, 0, 1 << 20}},
	{.f = {"flag", "TEST_MC_FLAG", NULL, "presence", offsetof(struct cfg, flag),
	       MC_CONFIG_PRESENCE, 0, 0}},
	{.f = {"s", NULL, "x", "a string", offsetof(struct cfg, s), MC_CONFIG_STRING, 0, 0}},
};

static void config_table_defaults_env_and_bounds(void **state)
{
	struct cfg c;
	(void)state;
	setenv("TEST_MC_N", "7", 1);
	setenv("TEST_MC_FLAG", "0", 1);
	mc_config_entry_defaults(cfg_tab, 4, &c);
	assert_int_equal(c.n, 5);
	assert_int_equal(c.sz, 1024);
	assert_false(c.flag);
	assert_string_equal(c.s, "x");
	mc_config_entry_load_env(cfg_tab, 4, &c);
	assert_int_equal(c.n, 7);
	assert_true(c.flag); /* presence flags: any value enables */
	setenv("TEST_MC_N", "70", 1);
	assert_int_equal(mc_config_entry_load_env(cfg_tab, 4, &c), MC_OK);
	assert_int_equal(c.n, 7); /* out of range ignored */
	{
		/* an ENV_STRICT entry: the same bad value fails the load, naming it */
		struct mc_config_entry strict = cfg_tab[0];

		strict.flags = MC_CONFIG_F_ENV_STRICT;
		assert_int_equal(mc_config_entry_load_env(&strict, 1, &c), MC_ERR_INVALID_PARAMS);
		assert_non_null(strstr(mc_last_error(), "TEST_MC_N='70'"));
		assert_int_equal(c.n, 7);
		setenv("TEST_MC_N", "8", 1);
		assert_int_equal(mc_config_entry_load_env(&strict, 1, &c), MC_OK);
		assert_int_equal(c.n, 8);
	}
	assert_int_equal(mc_config_entry_set(&cfg_tab[0], &c, "11"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "option n"));
	assert_null(mc_config_entry_find(cfg_tab, 4, "nope"));
	assert_ptr_equal(mc_config_entry_find(cfg_tab, 4, "s"), &cfg_tab[3]);
	assert_int_equal(mc_config_entry_set(&cfg_tab[3], &c, "hello"), MC_OK);
	assert_string_equal(c.s, "hello");
	mc_config_entry_release(cfg_tab, 4, &c);
	assert_null(c.s);
	unsetenv("TEST_MC_N");
	unsetenv("TEST_MC_FLAG");
}

struct ecfg {
	double ratio;
	uint64_t ttl_ms;  /* bare number: ms */
	uint64_t ttl_s;	  /* bare number: s, stored in s */
	uint64_t life_ms; /* bare number: s, stored in ms */
	char *mode;
	bool ha;
};

static bool check_mode(const char *v, char *why, size_t why_len)
{
	if (strcmp(v, "a") == 0 || strcmp(v, "b") == 0)
		return true;
	snprintf(why, why_len, "must be a or b, not '%s'", v);
	return false;
}

#define EF(f) offsetof(struct ecfg, f)
static const struct mc_config_entry ecfg_tab[] = {
	{.f = {"ratio", NULL, "0.5", "a ratio", EF(ratio), MC_CONFIG_DOUBLE, 0, 1}},
	{.f = {"ttl_ms", NULL, "500", "ms", EF(ttl_ms), MC_CONFIG_DURATION, 1, INT64_MAX}},
	{.f = {"ttl_s", NULL, "30", "s", EF(ttl_s), MC_CONFIG_DURATION, 0, 3600},
	 .bare_unit_ms = 1000,
	 .store_unit_ms = 1000},
	{.f = {"life_ms", NULL, "2", "s", EF(life_ms), MC_CONFIG_DURATION, 1, INT64_MAX},
	 .bare_unit_ms = 1000},
	{.f = {"mode", "TEST_MC_MODE", "a", "a or b", EF(mode), MC_CONFIG_STRING, 0, 0},
	 .check = check_mode},
	{.f = {"ha", NULL, "false", "no HA here", EF(ha), MC_CONFIG_BOOL, 0, 0},
	 .flags = MC_CONFIG_F_DEFAULT_ONLY},
	{.f = {"gone", NULL, "7", "dropped", MC_CONFIG_NO_FIELD, MC_CONFIG_INT, 0, 9},
	 .flags = MC_CONFIG_F_NO_EFFECT},
	{.f = {"path", NULL, "", "argv only", MC_CONFIG_NO_FIELD, MC_CONFIG_STRING, 0, 0},
	 .flags = MC_CONFIG_F_CMDLINE_ONLY},
};
#define ECFG_N (sizeof(ecfg_tab) / sizeof(ecfg_tab[0]))

static mc_status eset(struct ecfg *c, const char *name, const char *value)
{
	const struct mc_config_entry *e = mc_config_entry_find(ecfg_tab, ECFG_N, name);
	assert_non_null(e);
	return mc_config_entry_set(e, c, value);
}

static void config_entries_doubles_durations_checks(void **state)
{
	struct ecfg c;
	char *text = NULL;
	size_t len = 0;
	FILE *f;
	(void)state;
	mc_config_entry_defaults(ecfg_tab, ECFG_N, &c);
	assert_true(c.ratio == 0.5);
	assert_int_equal(c.ttl_ms, 500);
	assert_int_equal(c.ttl_s, 30);
	assert_int_equal(c.life_ms, 2000);
	assert_string_equal(c.mode, "a");
	assert_null(mc_config_entry_find(ecfg_tab, ECFG_N, "nope"));

	assert_int_equal(eset(&c, "ratio", "0.25"), MC_OK);
	assert_true(c.ratio == 0.25);
	assert_int_equal(eset(&c, "ratio", "1.5"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "option ratio"));
	assert_int_equal(eset(&c, "ratio", "nan"), MC_ERR_INVALID_PARAMS);
	assert_true(c.ratio == 0.25);

	/* units; a bare number keeps each entry's unit */
	assert_int_equal(eset(&c, "ttl_ms", "2m"), MC_OK);
	assert_int_equal(c.ttl_ms, 120000);
	assert_int_equal(eset(&c, "ttl_ms", "750"), MC_OK);
	assert_int_equal(c.ttl_ms, 750);
	assert_int_equal(eset(&c, "ttl_s", "500ms"), MC_OK);
	assert_int_equal(c.ttl_s, 1); /* rounded up to the stored unit */
	assert_int_equal(eset(&c, "ttl_s", "2h"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "option ttl_s"));
	assert_int_equal(eset(&c, "life_ms", "30s"), MC_OK);
	assert_int_equal(c.life_ms, 30000);
	assert_int_equal(eset(&c, "life_ms", "3"), MC_OK);
	assert_int_equal(c.life_ms, 3000);
	assert_int_equal(eset(&c, "life_ms", "0"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(eset(&c, "life_ms", "5 days"), MC_ERR_INVALID_PARAMS);

	/* checks, default-only, no-field and argv-only entries */
	assert_int_equal(eset(&c, "mode", "b"), MC_OK);
	assert_string_equal(c.mode, "b");
	assert_int_equal(eset(&c, "mode", "c"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "option mode: must be a or b, not 'c'"));
	/* the environment goes through the same check; a failure is ignored */
	setenv("TEST_MC_MODE", "c", 1);
	mc_config_entry_load_env(ecfg_tab, ECFG_N, &c);
	assert_string_equal(c.mode, "b");
	setenv("TEST_MC_MODE", "a", 1);
	mc_config_entry_load_env(ecfg_tab, ECFG_N, &c);
	assert_string_equal(c.mode, "a");
	unsetenv("TEST_MC_MODE");
	assert_int_equal(eset(&c, "mode", "b"), MC_OK);
	assert_int_equal(eset(&c, "ha", "no"), MC_OK);
	assert_int_equal(eset(&c, "ha", "true"), MC_ERR_INVALID_PARAMS);
	assert_non_null(strstr(mc_last_error(), "not supported"));
	assert_int_equal(eset(&c, "gone", "3"), MC_OK);
	assert_int_equal(eset(&c, "gone", "10"), MC_ERR_INVALID_PARAMS);
	assert_int_equal(eset(&c, "path", "x"), MC_ERR_INVALID_PARAMS);

	f = open_memstream(&text, &len);
	assert_non_null(f);
	mc_config_entry_print_value(&ecfg_tab[1], &c, f);
	fputc(' ', f);
	mc_config_entry_print_value(&ecfg_tab[2], &c, f);
	fputc(' ', f);
	mc_config_entry_print_value(&ecfg_tab[3], &c, f);
	fputc(' ', f);
	mc_config_entry_print_value(&ecfg_tab[4], &c, f);
	mc_config_entry_print_value(&ecfg_tab[6], &c, f);
	fclose(f);
	assert_string_equal(text, "750ms 1 3000ms \"b\"");
	free(text);
	mc_config_entry_release(ecfg_tab, ECFG_N, &c);
	assert_null(c.mode);
	assert_string_equal(mc_config_type_name(MC_CONFIG_DURATION, 1000), "duration (s)");
}

static void split_hostport_forms(void **state)
{
	char h[64];
	uint16_t p;
	(void)state;
	assert_true(mc_sock_split_hostport("10.0.0.1:1234", h, sizeof(h), &p, 12001));
	assert_string_equal(h, "10.0.0.1");
	assert_int_equal(p, 1234);
	assert_true(mc_sock_split_hostport("node1", h, sizeof(h), &p, 12001));
	assert_string_equal(h, "node1");
	assert_int_equal(p, 12001);
	assert_true(mc_sock_split_hostport("[::1]:99", h, sizeof(h), &p, 12001));
	assert_string_equal(h, "::1");
	assert_int_equal(p, 99);
	assert_true(mc_sock_split_hostport("fe80::1", h, sizeof(h), &p, 7));
	assert_string_equal(h, "fe80::1");
	assert_int_equal(p, 7);
	assert_true(mc_sock_split_hostport("h:notaport", h, sizeof(h), &p, 7));
	assert_int_equal(p, 7);
	assert_false(mc_sock_split_hostport("[::1", h, sizeof(h), &p, 7));
	assert_false(mc_sock_split_hostport("averyveryverylonghostname", h, 4, &p, 7));
}

struct item {
	int v;
	struct mc_list node;
};

static void list_add_del_splice(void **state)
{
	struct mc_list a = MC_LIST_INIT(a), b = MC_LIST_INIT(b), *pos, *tmp;
	struct item it[4];
	int sum = 0;
	(void)state;
	for (int i = 0; i < 4; i++) {
		it[i].v = i + 1;
		mc_list_add_tail(i < 2 ? &a : &b, &it[i].node);
	}
	mc_list_splice_tail(&a, &b);
	assert_true(mc_list_empty(&b));
	mc_list_for_each_safe(pos, tmp, &a) {
		struct item *x = mc_list_entry(pos, struct item, node);
		sum = sum * 10 + x->v;
		if (x->v == 2)
			mc_list_del(pos);
	}
	assert_int_equal(sum, 1234);
	assert_int_equal(mc_list_first(&a, struct item, node)->v, 1);
}

static void accept_failures_pause_and_log_once_per_interval(void **state)
{
	struct mc_accept_guard g;

	mc_accept_guard_init(&g, "test");
	assert_int_equal(mc_accept_failed(&g, EINTR, 1000), MC_ACCEPT_AGAIN);
	assert_int_equal(mc_accept_failed(&g, ECONNABORTED, 1000), MC_ACCEPT_AGAIN);
	assert_int_equal(mc_accept_failed(&g, EAGAIN, 1000), MC_ACCEPT_DRAINED);
	/* resource failures pause; only the first of an interval is logged */
	for (int i = 0; i < 50; i++)
		assert_int_equal(mc_accept_failed(&g, EMFILE, 1000 + (uint64_t)i), MC_ACCEPT_PAUSE);
	assert_int_equal(mc_accept_failed(&g, ENFILE, 1100), MC_ACCEPT_PAUSE);
	assert_int_equal(mc_accept_failed(&g, ENOBUFS, 1200), MC_ACCEPT_PAUSE);
	assert_int_equal(atomic_load(&g.paused), 52);
	assert_int_equal(atomic_load(&g.fail_quiet), 51);
	/* the next interval logs again and folds in the ones not logged */
	assert_int_equal(mc_accept_failed(&g, EMFILE, 1000 + MC_ACCEPT_LOG_MS), MC_ACCEPT_PAUSE);
	assert_int_equal(atomic_load(&g.fail_quiet), 0);
	mc_accept_refused(&g, 10, 10, 5000);
	mc_accept_refused(&g, 10, 10, 5001);
	assert_int_equal(atomic_load(&g.refused), 2);
	assert_int_equal(atomic_load(&g.refuse_quiet), 1);
}

static void accept_caps_follow_the_descriptor_limit(void **state)
{
	struct rlimit rl;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_cur == RLIM_INFINITY)
		skip();
	assert_int_equal(mc_accept_cap_for_fds("t", 4, 50), 4);
	assert_int_equal(mc_accept_cap_for_fds("t", UINT64_MAX, 50), MC_MAX(rl.rlim_cur / 2, 8));
	assert_int_equal(mc_accept_cap_for_fds("t", UINT64_MAX, 0), 8);
	assert_int_equal(mc_frame_deadline_ms(100, 1 << 20, 10000, 1 << 20), 100 + 10000 + 1000);
	assert_int_equal(mc_frame_deadline_ms(100, 1 << 20, 500, 0), 600);
}

static void calloc_overflow_and_fault_injection(void **state)
{
	void *p;
	(void)state;
	assert_null(mc_calloc(SIZE_MAX / 2, 4));
	mc_alloc_fault_arm(2);
	p = mc_malloc(8);
	assert_non_null(p);
	assert_null(mc_malloc(8));
	mc_free(p);
	p = mc_malloc(8);
	assert_non_null(p);
	mc_free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(status_names_and_numbers_are_pinned),
		cmocka_unit_test(parse_size_accepts_units_and_rejects_garbage),
		cmocka_unit_test(config_table_defaults_env_and_bounds),
		cmocka_unit_test(config_entries_doubles_durations_checks),
		cmocka_unit_test(split_hostport_forms),
		cmocka_unit_test(list_add_del_splice),
		cmocka_unit_test(calloc_overflow_and_fault_injection),
		cmocka_unit_test(accept_failures_pause_and_log_once_per_interval),
		cmocka_unit_test(accept_caps_follow_the_descriptor_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
