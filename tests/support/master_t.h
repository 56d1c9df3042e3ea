/*
 * tests/support/master_t.h - a master driven one request at a time
 * through the real codec both ways, with explicit time, for the master's
 * unit tests (test_master*.c).  Each request is encoded with
 * mc_store_request_encode, decoded, handed to mc_master_handle, and its
 * response frame decoded into t->resp, so what is checked is what a client
 * would see; nothing sleeps, time is t->now.
 *
 * Link: compile master_t.c into the test, with mc_master_dep.
 */
#ifndef MC_TESTS_MASTER_T_H
#define MC_TESTS_MASTER_T_H

#include <stdbool.h>
#include <stdint.h>

#include "master/master.h"
#include "mooncake/status.h"
#include "store/proto.h"

struct mt {
	struct mc_master *m;
	uint64_t now;		  /* the now_ms of every call; starts at 1,000,000 */
	struct mc_store_msg resp; /* the last response, decoded */
	bool have_resp;
	char err[512]; /* the last error response's text ("" after a success) */
	uint8_t minor; /* not 0: the minor version requests claim (an older client) */
};

/* A master with cfg (asserts it starts). */
struct mt *mt_new(const struct mc_master_config *cfg);
void mt_free(struct mt *t);
/* One request: returns the response's status, after checking the frame
 * (request id, type, response flag, status, an error text on failure). */
mc_status mt_call(struct mt *t, uint16_t type, const void *body);

/* ---- the common requests ---- */

/* Defaults, except that clients never expire unless a test asks. */
void mt_cfg_init(struct mc_master_config *cfg);
/* mt_new of mt_cfg_init's config, and of the plain defaults. */
struct mt *mt_new_default(void);
struct mt *mt_new_liveness(void);
struct mc_store_segment mt_seg(struct mc_store_uuid id, const char *name, uint64_t base,
			       uint64_t size);
mc_status mt_mount(struct mt *t, struct mc_store_uuid client, struct mc_store_uuid id,
		   const char *name, uint64_t base, uint64_t size);
struct mc_store_replicate_config mt_cfg1(void); /* one replica */
mc_status mt_put_start_cfg(struct mt *t, struct mc_store_uuid client, const char *tenant,
			   const char *key, uint64_t len, const char *group,
			   const struct mc_store_replicate_config *cfg, bool upsert);
mc_status mt_put_start(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t len);
mc_status mt_put_end_t(struct mt *t, struct mc_store_uuid client, const char *tenant,
		       const char *key, bool upsert);
mc_status mt_put_end(struct mt *t, struct mc_store_uuid client, const char *key);
mc_status mt_revoke(struct mt *t, struct mc_store_uuid client, const char *key);
/* PutStart and PutEnd, both asserted to succeed. */
void mt_put_ok(struct mt *t, struct mc_store_uuid client, const char *key, uint64_t len);
mc_status mt_get_t(struct mt *t, const char *tenant, const char *key);
mc_status mt_get(struct mt *t, const char *key);
/* 1 or 0, or the failed call's status. */
int mt_exist(struct mt *t, const char *key);
mc_status mt_rm(struct mt *t, const char *key, bool force);
/* The client status a Ping answers (the call itself must succeed). */
mc_status mt_ping(struct mt *t, struct mc_store_uuid client);
struct mc_master_metrics mt_metrics(struct mt *t);
/* The first replica of the last PutStart's answer. */
const struct mc_store_replica *mt_first_replica_start(struct mt *t);

#endif
