/*
 * tests/unit/test_fsdir.c - the legacy shared-FS DISK tier's path layout
 * and file format (store/fsdir.h): the hash letters and the sanitising,
 * the names that get a hash suffix, the header codec and its refusals, and
 * on real files (disk and tmpfs) an atomic write read back, and every file
 * that must not be returned refused: another write's, another object's,
 * cut short, a flipped value byte; delete only of the own write.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mooncake/log.h"
#include "store/fsdir.h"
#include "support.h"

static char dir[256];

static void letters_are_low_bits_of_xxh3(void **state)
{
	(void)state;
	const char *keys[] = {"a", "key-1", "layer/17/block/3", "x"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		uint64_t h = XXH3_64bits(keys[i], strlen(keys[i]));
		char l[2];
		mc_fsdir_letters(keys[i], strlen(keys[i]), l);
		assert_int_equal(l[0], 'a' + (int)(h & 15));
		assert_int_equal(l[1], 'a' + (int)((h >> 4) & 15));
		assert_true(l[0] >= 'a' && l[0] <= 'p' && l[1] >= 'a' && l[1] <= 'p');
	}
}

static void plain_key_keeps_its_name(void **state)
{
	(void)state;
	char p[512], l[2];
	size_t n = mc_fsdir_path(p, sizeof(p), "/r/c", 4, "", 0, "key-1", 5);
	char want[64];
	mc_fsdir_letters("key-1", 5, l);
	snprintf(want, sizeof(want), "/r/c/%c/%c/key-1", l[0], l[1]);
	assert_string_equal(p, want);
	assert_int_equal(n, strlen(want));
	/* "default" is the default tenant */
	mc_fsdir_path(p, sizeof(p), "/r/c", 4, "default", 7, "key-1", 5);
	assert_string_equal(p, want);
	/* too small: the length needed, nothing promised about out */
	assert_int_equal(mc_fsdir_path(p, 5, "/r/c", 4, "", 0, "key-1", 5), strlen(want));
}

static void sanitised_and_hashed_names(void **state)
{
	(void)state;
	const char key[] = "a/b\\c:d*e?f\"g<h>i|j";
	char p[512], q[512], l[2], want[128];
	mc_fsdir_letters(key, sizeof(key) - 1, l);
	mc_fsdir_path(p, sizeof(p), "/r", 2, "", 0, key, sizeof(key) - 1);
	snprintf(want, sizeof(want), "/r/%c/%c/a_b_c_d_e_f_g_h_i_j.%016llx", l[0], l[1],
		 (unsigned long long)mc_fsdir_name_sum("", 0, key, sizeof(key) - 1));
	assert_string_equal(p, want);
	/* NUL in a key is sanitised too */
	mc_fsdir_path(p, sizeof(p), "/r", 2, "", 0, "a\0b", 3);
	assert_non_null(strstr(p, "/a_b."));
	/* two keys that sanitise alike get different names */
	mc_fsdir_path(p, sizeof(p), "/r", 2, "", 0, "a/b", 3);
	mc_fsdir_path(q, sizeof(q), "/r", 2, "", 0, "a:b", 3);
	assert_string_not_equal(strrchr(p, '/'), strrchr(q, '/'));
	/* and neither is the untouched key "a_b" */
	mc_fsdir_path(q, sizeof(q), "/r", 2, "", 0, "a_b", 3);
	assert_string_equal(strrchr(q, '/'), "/a_b");
	assert_string_not_equal(strrchr(p, '/'), "/a_b");
	/* another tenant: another name for the same key */
	mc_fsdir_path(p, sizeof(p), "/r", 2, "t1", 2, "k", 1);
	mc_fsdir_path(q, sizeof(q), "/r", 2, "t2", 2, "k", 1);
	assert_string_not_equal(p, q);
	assert_non_null(strstr(p, "/k."));
	/* "." and ".." never name a directory */
	mc_fsdir_path(p, sizeof(p), "/r", 2, "", 0, ".", 1);
	assert_int_equal(strlen(strrchr(p, '/')), 1 + 1 + 17);
	mc_fsdir_path(p, sizeof(p), "/r", 2, "", 0, "..", 2);
	assert_int_equal(strlen(strrchr(p, '/')), 1 + 2 + 17);
	/* a long key fits NAME_MAX; no name ever holds ':' */
	char big[4096];
	memset(big, 'z', sizeof(big));
	static char lp[8192];
	mc_fsdir_path(lp, sizeof(lp), "/r", 2, "", 0, big, sizeof(big));
	assert_int_equal(strlen(strrchr(lp, '/') + 1), MC_FSDIR_NAME_KEEP + 17);
	assert_null(strchr(lp, ':'));
}

static void header_codec(void **state)
{
	(void)state;
	struct mc_fsdir_hdr h = {.replica_id = 77,
				 .value_len = 5,
				 .value_sum = 9,
				 .name_sum = 3,
				 .key_len = 4,
				 .tenant_len = 0},
			    g;
	uint8_t b[MC_FSDIR_HDR_SIZE];
	mc_fsdir_hdr_encode(&h, b);
	assert_memory_equal(b, "MCFD", 4);
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b), &g), MC_OK);
	assert_memory_equal(&g, &h, sizeof(h));
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b) - 1, &g), MC_ERR_FILE_READ_FAIL);
	assert_non_null(strstr(mc_last_error(), "short"));
	b[9] ^= 1; /* the replica id: the header's own checksum catches it */
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b), &g), MC_ERR_CHECKSUM_MISMATCH);
	b[9] ^= 1;
	b[0] = 'X';
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b), &g), MC_ERR_FILE_READ_FAIL);
	assert_non_null(strstr(mc_last_error(), "magic"));
	h.key_len = 0;
	mc_fsdir_hdr_encode(&h, b);
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b), &g), MC_ERR_FILE_READ_FAIL);
	assert_non_null(strstr(mc_last_error(), "length"));
	h.key_len = 4;
	h.value_len = UINT64_MAX;
	mc_fsdir_hdr_encode(&h, b);
	assert_int_equal(mc_fsdir_hdr_decode(b, sizeof(b), &g), MC_ERR_FILE_READ_FAIL);
}

static int setup(void **state)
{
	return mc_test_tmpdir(*state, "mc-fsdir", dir, sizeof(dir)) ? 0 : -1;
}

static int teardown(void **state)
{
	(void)state;
	return mc_test_rmtree(dir);
}

static void path_of(char *p, size_t cap, const char *tenant, const char *key)
{
	assert_true(mc_fsdir_path(p, cap, dir, strlen(dir), tenant, strlen(tenant), key,
				  strlen(key)) < cap);
}

static void files_round_trip_and_refusals(void **state)
{
	(void)state;
	char p[512], v[3000], got[3000];
	for (size_t i = 0; i < sizeof(v); i++)
		v[i] = (char)(i * 7 + 1);
	struct iovec parts[2] = {{v, 1000}, {v + 1000, 2000}};
	path_of(p, sizeof(p), "", "obj");
	assert_int_equal(mc_fsdir_write(p, "", 0, "obj", 3, 42, parts, 2, sizeof(v)), MC_OK);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 42, got, sizeof(got)), MC_OK);
	assert_memory_equal(got, v, sizeof(v));
	/* nothing temporary left beside it */
	char d[512];
	snprintf(d, sizeof(d), "%s", p);
	*strrchr(d, '/') = '\0';
	char tmp[600];
	snprintf(tmp, sizeof(tmp), "%s/:%016llx.tmp", d, 42ull);
	assert_int_not_equal(access(tmp, F_OK), 0);
	/* another write of the same object, another object at the path */
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 43, got, sizeof(got)),
			 MC_ERR_FILE_NOT_FOUND);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obk", 3, 42, got, sizeof(got)),
			 MC_ERR_FILE_NOT_FOUND);
	assert_int_equal(mc_fsdir_read(p, "t", 1, "obj", 3, 42, got, sizeof(got)),
			 MC_ERR_FILE_NOT_FOUND);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 42, got, 10), MC_ERR_FILE_READ_FAIL);
	/* a flipped value byte */
	int fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	char c;
	assert_int_equal(pread(fd, &c, 1, MC_FSDIR_HDR_SIZE + 3 + 100), 1);
	c ^= 0x10;
	assert_int_equal(pwrite(fd, &c, 1, MC_FSDIR_HDR_SIZE + 3 + 100), 1);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 42, got, sizeof(got)),
			 MC_ERR_CHECKSUM_MISMATCH);
	/* cut short */
	assert_int_equal(ftruncate(fd, MC_FSDIR_HDR_SIZE + 3 + 50), 0);
	close(fd);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 42, got, sizeof(got)),
			 MC_ERR_FILE_READ_FAIL);
	/* delete: not another write's file, then the own one */
	assert_false(mc_fsdir_unlink(p, 41));
	assert_int_equal(access(p, F_OK), 0);
	assert_true(mc_fsdir_unlink(p, 42));
	assert_int_not_equal(access(p, F_OK), 0);
	assert_int_equal(mc_fsdir_read(p, "", 0, "obj", 3, 42, got, sizeof(got)),
			 MC_ERR_FILE_NOT_FOUND);
	/* a rewrite replaces the file whole; a tenant's file is its own */
	path_of(p, sizeof(p), "t1", "obj");
	assert_int_equal(mc_fsdir_write(p, "t1", 2, "obj", 3, 5, parts, 1, 1000), MC_OK);
	assert_int_equal(mc_fsdir_write(p, "t1", 2, "obj", 3, 6, parts + 1, 1, 2000), MC_OK);
	assert_int_equal(mc_fsdir_read(p, "t1", 2, "obj", 3, 5, got, 1000), MC_ERR_FILE_NOT_FOUND);
	assert_int_equal(mc_fsdir_read(p, "t1", 2, "obj", 3, 6, got, 2000), MC_OK);
	assert_memory_equal(got, v + 1000, 2000);
	/* a writer killed before its rename leaves its temporary file: deleted by id */
	snprintf(d, sizeof(d), "%s", p);
	*strrchr(d, '/') = '\0';
	snprintf(tmp, sizeof(tmp), "%s/:%016llx.tmp", d, 99ull);
	fd = open(tmp, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	close(fd);
	mc_fsdir_unlink_tmp(p, 98);
	assert_int_equal(access(tmp, F_OK), 0);
	mc_fsdir_unlink_tmp(p, 99);
	assert_int_not_equal(access(tmp, F_OK), 0);
	assert_int_equal(access(p, F_OK), 0); /* the final file stays */
	/* parts that do not add up are refused before anything is written */
	assert_int_equal(mc_fsdir_write(p, "t1", 2, "obj", 3, 7, parts, 1, 999),
			 MC_ERR_INVALID_PARAMS);
}

static void unwritable_directory_fails_cleanly(void **state)
{
	(void)state;
	char p[512], v[8] = "abcdefg";
	struct iovec part = {v, sizeof(v)};
	snprintf(p, sizeof(p), "%s/missing/x/y/k", dir);
	assert_int_equal(mc_fsdir_write(p, "", 0, "k", 1, 1, &part, 1, sizeof(v)),
			 MC_ERR_FILE_OPEN_FAIL);
	assert_non_null(strstr(mc_last_error(), "cannot create"));
}

int main(void)
{
	static const char on_disk[] = "/tmp", on_tmpfs[] = "/dev/shm";
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(letters_are_low_bits_of_xxh3),
		cmocka_unit_test(plain_key_keeps_its_name),
		cmocka_unit_test(sanitised_and_hashed_names),
		cmocka_unit_test(header_codec),
		cmocka_unit_test_prestate_setup_teardown(files_round_trip_and_refusals, setup,
							 teardown, (void *)on_disk),
		cmocka_unit_test_prestate_setup_teardown(files_round_trip_and_refusals, setup,
							 teardown, (void *)on_tmpfs),
		cmocka_unit_test_prestate_setup_teardown(unwritable_directory_fails_cleanly, setup,
							 teardown, (void *)on_disk),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
