/*
 * api/store_c.c - upstream's store C API (store_c.h) over mc_store_*.
 *
 * Each function checks its arguments the way upstream does (-1 for NULL
 * handles, keys and arrays) and makes one mc_store_* call; the store's
 * status numbers are upstream's error codes already, so results pass
 * through unchanged.  Uses only the public headers.
 *
 * The handle is a small wrapper: the store plus the etcd TLS file names
 * that mooncake_store_set_etcd_tls_config was given (kept only to warn,
 * since this build's etcd client has no TLS).
 */
#include "mooncake/store_c.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mooncake/store.h"

#define PREFERRED_MAX 64

struct compat_store {
	struct mc_store *s;
	bool etcd_tls; /* TLS files were configured */
};

static struct mc_store *store_of(mooncake_store_t h)
{
	return h ? ((struct compat_store *)h)->s : NULL;
}

/* Translate the config; false for one we refuse (too many preferred segments). */
static bool to_config(const mooncake_replicate_config_t *in, struct mc_store_config *out)
{
	memset(out, 0, sizeof(*out));
	out->replica_num = 1;
	if (!in)
		return true;
	if (in->replica_num > UINT32_MAX || in->preferred_segments_count > PREFERRED_MAX ||
	    (in->preferred_segments_count && !in->preferred_segments))
		return false;
	out->replica_num = in->replica_num ? (uint32_t)in->replica_num : 1;
	out->with_soft_pin = in->with_soft_pin != 0;
	out->with_hard_pin = in->with_hard_pin != 0;
	out->preferred_segments = in->preferred_segments;
	out->n_preferred_segments = in->preferred_segments_count;
	for (size_t i = 0; i < in->preferred_segments_count; i++)
		if (!in->preferred_segments[i])
			return false;
	return true;
}

mooncake_store_t mooncake_store_create(void)
{
	struct compat_store *h = calloc(1, sizeof(*h));
	if (!h)
		return NULL;
	if (mc_store_new(&h->s) != MC_OK) {
		free(h);
		return NULL;
	}
	return h;
}

void mooncake_store_destroy(mooncake_store_t store)
{
	struct compat_store *h = store;
	if (!h)
		return;
	mc_store_free(h->s);
	free(h);
}

void mooncake_store_set_etcd_tls_config(mooncake_store_t store, const char *ca_file,
					const char *cert_file, const char *key_file)
{
	struct compat_store *h = store;
	if (!h)
		return;
	h->etcd_tls = (ca_file && *ca_file) || (cert_file && *cert_file) || (key_file && *key_file);
}

int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
			 const char *metadata_server, uint64_t global_segment_size,
			 uint64_t local_buffer_size, const char *protocol, const char *device_name,
			 const char *master_server_addr)
{
	struct compat_store *h = store;
	struct mc_store_params p;
	if (!h)
		return -1;
	if (h->etcd_tls)
		fprintf(stderr, "mooncake: etcd TLS is not supported by this build; "
				"the TLS files are ignored\n");
	memset(&p, 0, sizeof(p));
	p.local_hostname = local_hostname ? local_hostname : "";
	p.metadata_server = metadata_server ? metadata_server : "";
	p.global_segment_size = global_segment_size;
	p.local_buffer_size = local_buffer_size;
	p.protocol = protocol ? protocol : "tcp";
	p.rdma_devices = device_name ? device_name : "";
	p.master_server_addr = master_server_addr ? master_server_addr : "127.0.0.1:50051";
	return mc_store_setup(h->s, &p);
}

int mooncake_store_init_all(mooncake_store_t store, const char *protocol, const char *device_name,
			    uint64_t mount_segment_size)
{
	if (!store)
		return -1;
	return mooncake_store_setup(store, "localhost:12345", "127.0.0.1:2379", mount_segment_size,
				    1ull << 30, protocol ? protocol : "tcp", device_name,
				    "127.0.0.1:50051");
}

int mooncake_store_health_check(mooncake_store_t store)
{
	if (!store)
		return -1;
	return mc_store_health_check(store_of(store));
}

int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
		       const mooncake_replicate_config_t *config)
{
	struct mc_store_config c;
	if (!store || !key || (!value && size) || !to_config(config, &c))
		return -1;
	return mc_store_put(store_of(store), key, value, size, &c);
}

int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
			    const mooncake_replicate_config_t *config)
{
	struct mc_store_config c;
	if (!store || !key || (!buffer && size) || !to_config(config, &c))
		return -1;
	return mc_store_put_from(store_of(store), key, buffer, size, &c);
}

int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count,
				  const mooncake_replicate_config_t *config, int *results_out)
{
	struct mc_store_config c;
	mc_status *res;
	if (!store || !keys || !buffers || !sizes || !results_out || !to_config(config, &c))
		return -1;
	for (size_t i = 0; i < count; i++)
		if (!keys[i] || (!buffers[i] && sizes[i]))
			return -1;
	if (count == 0)
		return 0;
	res = calloc(count, sizeof(*res));
	if (!res)
		return -1;
	mc_store_batch_put_from(store_of(store), (const char *const *)keys, buffers, sizes, count,
				&c, res);
	for (size_t i = 0; i < count; i++)
		results_out[i] = res[i];
	free(res);
	return 0;
}

int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer, size_t size)
{
	if (!store || !key || (!buffer && size))
		return -1;
	return mc_store_get_into(store_of(store), key, buffer, size);
}

int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
				  const size_t *sizes, size_t count, int64_t *results_out)
{
	if (!store || !keys || !buffers || !sizes || !results_out)
		return -1;
	for (size_t i = 0; i < count; i++)
		if (!keys[i] || (!buffers[i] && sizes[i]))
			return -1;
	if (count == 0)
		return 0;
	mc_store_batch_get_into(store_of(store), (const char *const *)keys, buffers, sizes, count,
				results_out);
	return 0;
}

int mooncake_store_is_exist(mooncake_store_t store, const char *key)
{
	if (!store || !key)
		return -1;
	return mc_store_is_exist(store_of(store), key);
}

int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
				  int *results_out)
{
	if (!store || !keys || !results_out)
		return -1;
	for (size_t i = 0; i < count; i++)
		if (!keys[i])
			return -1;
	if (count == 0)
		return 0;
	mc_store_batch_is_exist(store_of(store), (const char *const *)keys, count, results_out);
	return 0;
}

int64_t mooncake_store_get_size(mooncake_store_t store, const char *key)
{
	if (!store || !key)
		return -1;
	return mc_store_get_size(store_of(store), key);
}

int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len)
{
	const char *name;
	size_t n;
	if (!store || !buf_out || buf_len == 0)
		return -1;
	name = mc_store_hostname(store_of(store));
	n = strlen(name);
	if (n >= buf_len)
		return -1;
	memcpy(buf_out, name, n + 1);
	return 0;
}

int mooncake_store_remove(mooncake_store_t store, const char *key, int force)
{
	if (!store || !key)
		return -1;
	return mc_store_remove(store_of(store), key, force != 0);
}

int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force)
{
	if (!store || !pattern)
		return -1;
	return mc_store_remove_by_regex(store_of(store), pattern, force != 0);
}

int64_t mooncake_store_remove_all(mooncake_store_t store, int force)
{
	if (!store)
		return -1;
	return mc_store_remove_all(store_of(store), force != 0);
}

int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size)
{
	if (!store || !buffer || size == 0)
		return -1;
	return mc_store_register_buffer(store_of(store), buffer, size);
}

int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer)
{
	if (!store)
		return -1;
	return mc_store_unregister_buffer(store_of(store), buffer);
}
