/*
 * meta/meta_mem.c - the in-process metadata backend ("mem://<name>").
 *
 * Every client opened with the same mem://<name> sees one table, so two
 * engines in one process (and the tests) can find each other without a
 * server.  A table lives in a process-wide registry, a singly linked list
 * under registry_lock, and is refcounted by the clients that opened it: the
 * last mc_meta_close frees it, so a later open of the same name starts
 * empty.  Inside a table, entries are kept in a libc binary tree (tsearch,
 * a red-black tree in glibc) under the table's own mutex.  Values are copied
 * in and out; callers never see the table's memory.
 *
 * Locks: registry_lock and a table's lock are never held together; should
 * that change, registry_lock comes first.
 */
#define MC_LOG_MODULE "meta"
#include "meta/meta.h"

#include <pthread.h>
#include <search.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/log.h"
#include "mooncake/status.h"

struct mem_entry {
	char *key;
	char *value; /* NUL-terminated copy, len bytes before the NUL */
	size_t len;
};

struct mem_table {
	struct mem_table *next; /* registry link, under registry_lock */
	char *name;
	unsigned refs; /* under registry_lock */
	pthread_mutex_t lock;
	void *root; /* tsearch tree of struct mem_entry, under lock */
};

struct mem_client {
	struct mc_meta base; /* must be first */
	struct mem_table *table;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_table *registry;

static const struct mc_meta_ops mem_ops;

static int entry_cmp(const void *a, const void *b)
{
	return strcmp(((const struct mem_entry *)a)->key, ((const struct mem_entry *)b)->key);
}

static void entry_free(void *p)
{
	struct mem_entry *e = p;
	mc_free(e->key);
	mc_free(e->value);
	mc_free(e);
}

static struct mem_table *table_ref(const char *name)
{
	struct mem_table *t;

	pthread_mutex_lock(&registry_lock);
	for (t = registry; t; t = t->next) {
		if (strcmp(t->name, name) == 0) {
			t->refs++;
			goto out_unlock;
		}
	}
	t = mc_calloc(1, sizeof(*t));
	if (!t)
		goto out_unlock;
	t->name = mc_strdup(name);
	if (!t->name) {
		mc_free(t);
		t = NULL;
		goto out_unlock;
	}
	pthread_mutex_init(&t->lock, NULL);
	t->refs = 1;
	t->next = registry;
	registry = t;
out_unlock:
	pthread_mutex_unlock(&registry_lock);
	return t;
}

static void table_unref(struct mem_table *t)
{
	struct mem_table **pp;

	pthread_mutex_lock(&registry_lock);
	if (--t->refs) {
		pthread_mutex_unlock(&registry_lock);
		return;
	}
	for (pp = &registry; *pp; pp = &(*pp)->next) {
		if (*pp == t) {
			*pp = t->next;
			break;
		}
	}
	pthread_mutex_unlock(&registry_lock);
	tdestroy(t->root, entry_free);
	pthread_mutex_destroy(&t->lock);
	mc_free(t->name);
	mc_free(t);
}

static struct mem_table *table_of(struct mc_meta *m)
{
	return mc_container_of(m, struct mem_client, base)->table;
}

static mc_status mem_get(struct mc_meta *m, const char *key, char **value_out, size_t *len_out)
{
	struct mem_table *t = table_of(m);
	struct mem_entry probe = {.key = (char *)key};
	struct mem_entry **found;
	char *copy = NULL;
	size_t len = 0;
	mc_status status = MC_OK;

	if (!key || !value_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	pthread_mutex_lock(&t->lock);
	found = tfind(&probe, &t->root, entry_cmp);
	if (!found) {
		status = mc_set_error(MC_ERR_NOT_FOUND, "metadata %s: key %s not found", m->uri,
				      key);
		goto out_unlock;
	}
	len = (*found)->len;
	copy = mc_malloc(len + 1);
	if (!copy) {
		status = mc_set_error(MC_ERR_NOMEM, "metadata %s: out of memory reading %s", m->uri,
				      key);
		goto out_unlock;
	}
	memcpy(copy, (*found)->value, len + 1);
out_unlock:
	pthread_mutex_unlock(&t->lock);
	if (status == MC_OK) {
		*value_out = copy;
		if (len_out)
			*len_out = len;
	}
	return status;
}

static mc_status mem_put(struct mc_meta *m, const char *key, const char *value, size_t len)
{
	struct mem_table *t = table_of(m);
	struct mem_entry *e, **slot;
	char *copy;

	if (!key || (!value && len))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key or value",
				    m->uri);
	copy = mc_malloc(len + 1);
	e = mc_calloc(1, sizeof(*e));
	if (!copy || !e || !(e->key = mc_strdup(key)))
		goto err_nomem;
	if (len)
		memcpy(copy, value, len);
	copy[len] = '\0';
	e->value = copy;
	e->len = len;

	pthread_mutex_lock(&t->lock);
	slot = tsearch(e, &t->root, entry_cmp);
	if (!slot) {
		pthread_mutex_unlock(&t->lock);
		goto err_nomem;
	}
	if (*slot != e) { /* key existed: swap the value in, keep the node */
		char *old = (*slot)->value;
		(*slot)->value = copy;
		(*slot)->len = len;
		e->value = old;
		e->len = 0;
		pthread_mutex_unlock(&t->lock);
		entry_free(e);
		return MC_OK;
	}
	pthread_mutex_unlock(&t->lock);
	return MC_OK;

err_nomem:
	if (e) {
		mc_free(e->key);
		mc_free(e);
	}
	mc_free(copy);
	return mc_set_error(MC_ERR_NOMEM, "metadata %s: out of memory storing %s", m->uri, key);
}

static mc_status mem_del(struct mc_meta *m, const char *key)
{
	struct mem_table *t = table_of(m);
	struct mem_entry probe = {.key = (char *)key};
	struct mem_entry **found, *e;

	if (!key)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata %s: NULL key", m->uri);
	pthread_mutex_lock(&t->lock);
	found = tfind(&probe, &t->root, entry_cmp);
	if (!found) {
		pthread_mutex_unlock(&t->lock);
		return mc_set_error(MC_ERR_NOT_FOUND, "metadata %s: key %s not found", m->uri, key);
	}
	e = *found;
	tdelete(e, &t->root, entry_cmp);
	pthread_mutex_unlock(&t->lock);
	entry_free(e);
	return MC_OK;
}

static void mem_close(struct mc_meta *m)
{
	struct mem_client *c = mc_container_of(m, struct mem_client, base);

	table_unref(c->table);
	mc_free(c->base.uri);
	mc_free(c);
}

mc_status mc_meta_mem_open(const char *uri, struct mc_meta **out)
{
	static const char prefix[] = "mem://";
	struct mem_client *c;

	if (!uri || strncmp(uri, prefix, sizeof(prefix) - 1) != 0 || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "metadata: %s is not a mem:// uri",
				    uri ? uri : "(null)");
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		goto err_nomem;
	c->base.ops = &mem_ops;
	c->base.uri = mc_strdup(uri);
	if (!c->base.uri)
		goto err_free_client;
	c->table = table_ref(uri + sizeof(prefix) - 1);
	if (!c->table)
		goto err_free_uri;
	*out = &c->base;
	return MC_OK;

err_free_uri:
	mc_free(c->base.uri);
err_free_client:
	mc_free(c);
err_nomem:
	return mc_set_error(MC_ERR_NOMEM, "metadata: out of memory opening %s", uri);
}

static const struct mc_meta_ops mem_ops = {
	.name = "mem",
	.get = mem_get,
	.put = mem_put,
	.del = mem_del,
	.resync = mc_meta_no_resync,
	.close = mem_close,
};
