/*
 * meta/owned.c - the list of keys a metadata client owns (meta/owned.h).
 *
 * Linear search: a client owns a handful of keys (an engine's rpc_meta and
 * segment descriptor), and every use is under the owner's lock.
 */
#include "meta/owned.h"

#include <string.h>

#include "base/alloc.h"
#include "base/log.h"

struct mc_meta_owned_key *mc_meta_owned_find(struct mc_list *list, const char *key)
{
	struct mc_list *pos;

	mc_list_for_each(pos, list) {
		struct mc_meta_owned_key *o = mc_list_entry(pos, struct mc_meta_owned_key, node);
		if (strcmp(o->key, key) == 0)
			return o;
	}
	return NULL;
}

static void owned_free(struct mc_meta_owned_key *o)
{
	mc_free(o->key);
	mc_free(o->value);
	mc_free(o);
}

mc_status mc_meta_owned_set(struct mc_list *list, const char *uri, const char *key,
			    const char *value, size_t len)
{
	struct mc_meta_owned_key *o = mc_meta_owned_find(list, key);
	char *copy = mc_malloc(len + 1);

	if (!copy)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory storing %s", uri, key);
	if (len)
		memcpy(copy, value, len);
	copy[len] = '\0';
	if (!o) {
		o = mc_calloc(1, sizeof(*o));
		if (o)
			o->key = mc_strdup(key);
		if (!o || !o->key) {
			mc_free(o);
			mc_free(copy);
			return mc_set_error(MC_ERR_NOMEM, "%s: out of memory storing %s", uri, key);
		}
		mc_list_add_tail(list, &o->node);
	}
	mc_free(o->value);
	o->value = copy;
	o->len = len;
	return MC_OK;
}

void mc_meta_owned_forget(struct mc_list *list, const char *key)
{
	struct mc_meta_owned_key *o = mc_meta_owned_find(list, key);

	if (o) {
		mc_list_del(&o->node);
		owned_free(o);
	}
}

void mc_meta_owned_clear(struct mc_list *list)
{
	struct mc_list *pos, *tmp;

	mc_list_for_each_safe(pos, tmp, list) {
		mc_list_del(pos);
		owned_free(mc_list_entry(pos, struct mc_meta_owned_key, node));
	}
}
