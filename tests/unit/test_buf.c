/* tests/unit/test_buf.c - the growable byte buffer (base/buf.h): growth,
 * formatting, steal, and the sticky error after an allocation failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/buf.h"
#include "base/log.h"
#include "mooncake/status.h"
#include "support.h"

static void empty_buffer_allocates_nothing(void **state)
{
	struct mc_buf b;
	(void)state;
	mc_buf_init(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
	assert_int_equal(b.err, MC_OK);
	mc_buf_append(&b, NULL, 0);
	assert_null(b.data);
	mc_buf_release(&b);
	mc_buf_release(&b); /* twice is fine */
}

static void appends_grow_by_doubling_and_keep_bytes(void **state)
{
	struct mc_buf b;
	uint8_t want[100000];
	size_t last_cap = 0, reallocs = 0;
	(void)state;

	mc_test_fill(want, sizeof(want), 7);
	mc_buf_init(&b);
	for (size_t off = 0; off < sizeof(want); off += 37) {
		size_t n = sizeof(want) - off < 37 ? sizeof(want) - off : 37;
		mc_buf_append(&b, want + off, n);
		if (b.cap != last_cap) {
			assert_true(last_cap == 0 ? b.cap == 256 : b.cap == 2 * last_cap);
			last_cap = b.cap;
			reallocs++;
		}
	}
	assert_int_equal(b.err, MC_OK);
	assert_int_equal(b.len, sizeof(want));
	assert_memory_equal(b.data, want, sizeof(want));
	assert_true(reallocs <= 10); /* 256 .. 128 KiB */
	mc_buf_release(&b);
}

static void reserve_gives_room_without_writing(void **state)
{
	struct mc_buf b;
	(void)state;
	mc_buf_init(&b);
	assert_int_equal(mc_buf_reserve(&b, 1000), MC_OK);
	assert_int_equal(b.len, 0);
	assert_true(b.cap >= 1000);
	assert_int_equal(b.cap, 1024);
	assert_int_equal(mc_buf_reserve(&b, 1024), MC_OK);
	assert_int_equal(b.cap, 1024); /* already there */
	mc_buf_release(&b);
}

static void reserve_refuses_sizes_that_would_wrap(void **state)
{
	struct mc_buf b;
	(void)state;
	mc_buf_init(&b);
	mc_buf_append(&b, "x", 1);
	assert_int_equal(mc_buf_reserve(&b, SIZE_MAX), MC_ERR_NOMEM);
	assert_int_equal(b.err, MC_ERR_NOMEM);
	assert_int_equal(b.len, 1);
	mc_buf_release(&b);
}

static void appendf_formats_short_and_long_text(void **state)
{
	struct mc_buf b;
	char big[2000];
	(void)state;

	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	mc_buf_init(&b);
	mc_buf_appendf(&b, "%d-%s", 42, "x");
	mc_buf_append_str(&b, "|");
	mc_buf_appendf(&b, "%s", big); /* longer than the first try's room */
	mc_buf_appendf(&b, "%s", "");
	assert_int_equal(b.err, MC_OK);
	assert_int_equal(b.len, 5 + sizeof(big) - 1);
	assert_memory_equal(b.data, "42-x|", 5);
	assert_memory_equal(b.data + 5, big, sizeof(big) - 1);
	mc_buf_release(&b);
}

static void steal_hands_out_a_terminated_string(void **state)
{
	struct mc_buf b;
	size_t len = 99;
	char *s;
	(void)state;

	mc_buf_init(&b);
	s = mc_buf_steal(&b, &len); /* empty: "" */
	assert_non_null(s);
	assert_string_equal(s, "");
	assert_int_equal(len, 0);
	mc_free(s);

	mc_buf_appendf(&b, "key=%s", "v");
	s = mc_buf_steal(&b, &len);
	assert_string_equal(s, "key=v");
	assert_int_equal(len, 5);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
	mc_free(s);

	/* exactly full: the terminator needs one more byte */
	mc_buf_init(&b);
	assert_int_equal(mc_buf_reserve(&b, 256), MC_OK);
	for (int i = 0; i < 256; i++)
		mc_buf_append(&b, "z", 1);
	assert_int_equal(b.cap, 256);
	s = mc_buf_steal(&b, NULL);
	assert_int_equal(strlen(s), 256);
	mc_free(s);
}

static void reset_keeps_storage_and_clears_error(void **state)
{
	struct mc_buf b;
	uint8_t *data;
	(void)state;

	mc_buf_init(&b);
	mc_buf_append_str(&b, "hello");
	data = b.data;
	b.err = MC_ERR_NOMEM;
	mc_buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.err, MC_OK);
	assert_ptr_equal(b.data, data);
	mc_buf_append_str(&b, "again");
	assert_memory_equal(b.data, "again", 5);
	mc_buf_release(&b);
}

static void allocation_failure_is_sticky(void **state)
{
	struct mc_buf b;
	(void)state;

	mc_buf_init(&b);
	mc_buf_append_str(&b, "kept");
	assert_int_equal(b.cap, 256);

	/* the first allocation fails: the first write, from empty */
	mc_buf_release(&b);
	mc_alloc_fault_arm(1);
	mc_buf_append_str(&b, "lost");
	mc_alloc_fault_arm(0);
	assert_int_equal(b.err, MC_ERR_NOMEM);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_non_null(strstr(mc_last_error(), "cannot grow a buffer"));
	mc_buf_release(&b);

	/* a failure while growing keeps what was there and drops later writes */
	mc_buf_append_str(&b, "kept");
	mc_alloc_fault_arm(1);
	mc_buf_append(&b, NULL, 0); /* nothing to do: no allocation */
	mc_buf_reserve(&b, 1000);
	mc_alloc_fault_arm(0);
	assert_int_equal(b.err, MC_ERR_NOMEM);
	mc_buf_append_str(&b, "dropped");
	mc_buf_appendf(&b, "%d", 1);
	assert_int_equal(mc_buf_reserve(&b, 1), MC_ERR_NOMEM);
	assert_int_equal(b.len, 4);
	assert_memory_equal(b.data, "kept", 4);
	/* steal refuses a failed buffer and frees it */
	assert_null(mc_buf_steal(&b, NULL));
	assert_null(b.data);
	assert_int_equal(b.err, MC_OK);

	/* every single allocation failing in turn: err or the full text, never a mix */
	for (long n = 1; n <= 4; n++) {
		char *s;
		mc_buf_init(&b);
		mc_alloc_fault_arm(n);
		for (int i = 0; i < 100; i++)
			mc_buf_appendf(&b, "%08d", i);
		s = mc_buf_steal(&b, NULL);
		mc_alloc_fault_arm(0);
		if (s) {
			assert_int_equal(strlen(s), 800);
			mc_free(s);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(empty_buffer_allocates_nothing),
		cmocka_unit_test(appends_grow_by_doubling_and_keep_bytes),
		cmocka_unit_test(reserve_gives_room_without_writing),
		cmocka_unit_test(reserve_refuses_sizes_that_would_wrap),
		cmocka_unit_test(appendf_formats_short_and_long_text),
		cmocka_unit_test(steal_hands_out_a_terminated_string),
		cmocka_unit_test(reset_keeps_storage_and_clears_error),
		cmocka_unit_test(allocation_failure_is_sticky),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
