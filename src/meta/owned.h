/*
 * meta/owned.h - the keys a metadata client wrote and still owns, with
 * their latest values, so a backend can write them again when the service
 * lost them (a restarted server, a flushed database): meta_redis.c's
 * refresher and meta_http.c's checker share it.
 *
 * A plain list (an engine owns two or three keys); the caller locks.
 */
#ifndef MC_META_OWNED_H
#define MC_META_OWNED_H

#include <stdbool.h>
#include <stddef.h>

#include "base/list.h"
#include "mooncake/status.h"

struct mc_meta_owned_key {
	struct mc_list node; /* in the owner's list */
	char *key;
	char *value; /* len bytes, NUL-terminated */
	size_t len;
	bool missing; /* scratch for the owner's check round */
};

/* The entry of key in list, or NULL. */
struct mc_meta_owned_key *mc_meta_owned_find(struct mc_list *list, const char *key);
/* Remember key = value (len bytes) in list, replacing an older value;
 * MC_ERR_NOMEM (recorded, naming uri) leaves list as it was. */
mc_status mc_meta_owned_set(struct mc_list *list, const char *uri, const char *key,
			    const char *value, size_t len);
/* Forget key (nothing when absent). */
void mc_meta_owned_forget(struct mc_list *list, const char *key);
/* Forget every key. */
void mc_meta_owned_clear(struct mc_list *list);

#endif
