/*
 * tests/support/proto_t.h - sample bodies of every store message for the
 * codec's unit tests (test_proto*.c): a request and a response body of
 * each type in MC_STORE_MSG_MAP, batch forms with 0 to 1000 items, keys
 * with NUL bytes, empty and maximum-length keys, every replica type.
 * pt_setup (the cmocka group setup) fills the samples.
 *
 * Link: compile proto_t.c into the test.
 */
#ifndef MC_TESTS_PROTO_T_H
#define MC_TESTS_PROTO_T_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "store/proto.h"

/* A string literal as a struct mc_proto_str (without its NUL). */
#define S(lit)				    ((struct mc_proto_str){(lit), sizeof(lit) - 1})

#define PT__ONE(NAME, num, name, req, resp) +1
#define PT_N_TYPES			    (0 MC_STORE_MSG_MAP(PT__ONE))

/* Every message type, in MC_STORE_MSG_MAP's order. */
extern const uint16_t pt_types[PT_N_TYPES];
/* The samples the tests also use directly. */
extern char pt_key_nul[5];		      /* "k\0e\0y" */
extern char pt_key_max[MC_STORE_KEY_MAX + 1]; /* MC_STORE_KEY_MAX 'x's */
extern struct mc_store_replica pt_reps[5];    /* one of each replica type */
extern struct mc_store_replica_list pt_lists[2];

/* A body of any message, either direction. */
union pt_body {
#define PT__BODY_MEMBER(name) struct mc_store_##name name;
	MC_STORE_BODY_MAP(PT__BODY_MEMBER)
#undef PT__BODY_MEMBER
};

/* The cmocka group setup: fills the samples. */
int pt_setup(void **state);
/* A request or response body of type with n items in its list (batch
 * forms; n at most 1000); fails the test for a type it has no sample of. */
void pt_fill(uint16_t type, bool resp, uint32_t n, union pt_body *u);
/* Encode (type, resp) with n items as a frame into b (appending). */
void pt_encode_sample(struct mc_buf *b, uint16_t type, bool resp, uint32_t n, uint64_t id,
		      union pt_body *u);

#endif
