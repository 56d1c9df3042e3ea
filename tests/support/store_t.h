/*
 * tests/support/store_t.h - the store client tests' fixture: one
 * in-process master for the whole program (mc_test_master_start, every
 * port chosen by the system), clients set up against it over loopback
 * TCP, and the checks those tests share (test_store_*.c).
 *
 * Link: compile store_t.c and master.c into the test, with mc_master_dep.
 */
#ifndef MC_TESTS_STORE_T_H
#define MC_TESTS_STORE_T_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/store.h"

struct mc_master_server;
struct mc_master_server_config;

/* The program's master, its RPC address and its metadata URI, set by
 * st_master_start. */
extern struct mc_master_server *st_master;
extern char st_master_addr[64];
extern char st_meta_uri[128];

/* Starts st_master (tune as mc_test_master_start's): 0, or -1 (cause printed). */
int st_master_start(void (*tune)(struct mc_master_server_config *c));
void st_master_stop(void);
/* A tune: no eviction, so that no tick evicts the unleased objects later
 * cases read back (eviction has its own tests in test_master.c). */
void st_no_eviction(struct mc_master_server_config *c);

/* A client's parameters against st_master: a global segment of seg bytes
 * (none when 0) and a local buffer of lbuf bytes. */
struct mc_store_params st_params(uint64_t seg, uint64_t lbuf);
/* A client set up with p (asserted). */
struct mc_store *st_client_open(const struct mc_store_params *p);
/* st_client_open of st_params(seg, lbuf). */
struct mc_store *st_client_new(uint64_t seg, uint64_t lbuf);

/* The group set-up most cases share: st_master (tuned) and two clients
 * with st_params(seg, lbuf) in *a and *b: 0, or -1.  Torn down by
 * st_teardown_pair. */
int st_setup_pair(void (*tune)(struct mc_master_server_config *c), uint64_t seg, uint64_t lbuf,
		  struct mc_store **a, struct mc_store **b);
void st_teardown_pair(struct mc_store *a, struct mc_store *b);

/* One replica, on s's own segment. */
struct mc_store_config st_prefer(struct mc_store *s);
/* s's mc_store_get of key gives the len bytes of want (asserted). */
void st_expect_get(struct mc_store *s, const char *key, const void *want, size_t len);

#endif
