/*
 * te/engine.c - the Transfer Engine core.
 *
 * The engine ties together the pieces: the metadata client (or none in P2P
 * mode), the RPC listener (handshakes, notifications, probes, descriptor
 * exchange), registered memory, the segment cache (te/segment.c), the batch
 * table (te/batch.c, submission in te/submit.c), and the transports, which
 * it opens from the registry (transport/registry.c) and names nowhere.
 * This file holds the configuration, publishing, the RPC handler,
 * creation and teardown, memory registration and notifications.
 *
 * Restart under the same name: if rpc_meta/<name> already exists and the
 * engine it names does not answer a probe, the stale keys are deleted and
 * replaced; if it answers, creation fails with MC_ERR_EXISTS.
 */
#define MC_LOG_MODULE "te"
#include "te/engine.h"

#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/accept.h"
#include "base/alloc.h"
#include "base/compiler.h"
#include "base/config.h"
#include "base/log.h"
#include "base/sock.h"
#include "base/time.h"
#include "mem/devmem.h"
#include "meta/meta.h"
#include "te/batch.h"
#include "te/rpc.h"
#include "te/stage.h"
#include "transport/transport.h"

#define CFG(f) offsetof(struct mc_te_config, f)
const struct mc_config_entry mc_te_config_table[] = {
	{.f = {"min_rpc_port", "MC_MIN_RPC_PORT", "15000", "lowest random RPC/data port",
	       CFG(min_rpc_port), MC_CONFIG_INT, 1024, 65535}},
	{.f = {"max_rpc_port", "MC_MAX_RPC_PORT", "17000", "highest random RPC/data port",
	       CFG(max_rpc_port), MC_CONFIG_INT, 1024, 65535}},
	{.f = {"handshake_port", "MC_HANDSHAKE_PORT", "12001", "default port of a name without one",
	       CFG(handshake_port), MC_CONFIG_INT, 1, 65535}},
	{.f = {"handshake_max_length", "MC_HANDSHAKE_MAX_LENGTH", "1048576",
	       "largest RPC frame accepted", CFG(handshake_max_length), MC_CONFIG_SIZE, 1 << 20,
	       128 << 20}},
	{.f = {"handshake_connect_timeout", "MC_HANDSHAKE_CONNECT_TIMEOUT", "5",
	       "RPC connect timeout in seconds", CFG(handshake_connect_timeout_s), MC_CONFIG_INT, 1,
	       3599}},
	{.f = {"rpc_io_timeout_ms", "MC_RPC_IO_TIMEOUT_MS", "10000",
	       "RPC reply deadline in milliseconds", CFG(rpc_io_timeout_ms), MC_CONFIG_INT, 10,
	       600000}},
	{.f = {"rpc_recv_timeout_ms", "MC_RPC_RECV_TIMEOUT_MS", "5000",
	       "RPC server: a connection must deliver its whole request within this (ms)",
	       CFG(rpc_recv_timeout_ms), MC_CONFIG_INT, 10, 600000}},
	{.f = {"rpc_max_conns", "MC_RPC_MAX_CONNS", "1024",
	       "RPC server: connections open at most; more are accepted and closed at once",
	       CFG(rpc_max_conns), MC_CONFIG_INT, 1, 1000000}},
	{.f = {"deregister_wait_ms", "MC_TE_DEREGISTER_WAIT_MS", "10000",
	       "deregistration waits this long (ms) for transfers still reading or writing the "
	       "range (served, or this engine's own), then cuts their connections (they fail) "
	       "and returns; 0 = cut at once",
	       CFG(deregister_wait_ms), MC_CONFIG_INT, 0, 3600000}},
	{.f = {"te_checksum", "MC_TE_CHECKSUM", "0",
	       "1: every transfer of a batch allocated from then on is checked end to end with "
	       "XXH3-64 (a mismatch fails it with -801); peers must support it (docs/design.md, "
	       "\"Transfer checksums\")",
	       CFG(checksum), MC_CONFIG_INT, 0, 1}},
	{.f = {"disable_metacache", "MC_DISABLE_METACACHE", NULL,
	       "refetch descriptors on every open", CFG(disable_metacache), MC_CONFIG_PRESENCE, 0,
	       0}},
	{.f = {"legacy_rpc_port_binding", "MC_LEGACY_RPC_PORT_BINDING", NULL,
	       "take the RPC port from the local name", CFG(legacy_rpc_port_binding),
	       MC_CONFIG_PRESENCE, 0, 0}},
	{.f = {"tcp_bind_address", "MC_TCP_BIND_ADDRESS", NULL,
	       "address advertised to peers, and where the RPC and TCP data ports listen (upstream "
	       "listens on every interface)",
	       CFG(tcp_bind_address), MC_CONFIG_STRING, 0, 0}},
	{.f = {"metadata_server", "MC_METADATA_SERVER", NULL,
	       "metadata connection string used when the caller passes none", CFG(metadata_server),
	       MC_CONFIG_STRING, 0, 0}},
	{.f = {"te_filters", "MC_TE_FILTERS", NULL,
	       "devices the engine may use (comma-separated) when the caller names none",
	       CFG(filters), MC_CONFIG_STRING, 0, 0}},
};
#undef CFG
const size_t mc_te_config_table_len = MC_ARRAY_SIZE(mc_te_config_table);

/* ---- descriptors and publishing ----------------------------------------- */

mc_status mc_te_local_desc(struct mc_te *te, struct mc_seg_desc **out)
{
	struct mc_seg_desc *d = mc_calloc(1, sizeof(*d));
	char ts[40];
	mc_status rc;

	if (!d)
		return MC_ERR_NOMEM;
	mc_seg_timestamp(ts, sizeof(ts));
	d->name = mc_strdup(te->name);
	d->timestamp = mc_strdup(ts);
	d->host_id = te->host_id[0] ? mc_strdup(te->host_id) : NULL;
	if (!d->name || !d->timestamp) {
		rc = MC_ERR_NOMEM;
		goto err;
	}
	/* the transports add what peers need to reach them (the data port,
	 * the same-host endpoint...) */
	for (size_t i = 0; i < mc_transport_registry_len; i++) {
		if (!te->tps[i])
			continue;
		rc = mc_transport_fill_desc(te->tps[i], d);
		if (rc != MC_OK)
			goto err;
	}
	rc = mc_memreg_fill_desc(&te->memreg, te->name, d);
	if (rc != MC_OK)
		goto err;
	*out = d;
	return MC_OK;
err:
	mc_seg_desc_free(d);
	return rc;
}

mc_status mc_te_publish(struct mc_te *te)
{
	struct mc_seg_desc *d = NULL;
	char *json = NULL, *key = NULL;
	mc_status rc;

	if (te->p2p)
		return MC_OK; /* served on demand over RPC */
	pthread_mutex_lock(&te->publish_lock);
	rc = mc_te_local_desc(te, &d);
	if (rc != MC_OK)
		goto out;
	rc = mc_seg_desc_encode(d, &json);
	if (rc != MC_OK)
		goto out;
	key = mc_meta_key_segment(te->name);
	if (!key) {
		rc = MC_ERR_NOMEM;
		goto out;
	}
	rc = mc_meta_put(te->meta, key, json, strlen(json));
	if (rc != MC_OK)
		mc_error("cannot publish segment %s: %s", te->name, mc_last_error());
out:
	pthread_mutex_unlock(&te->publish_lock);
	mc_free(key);
	mc_free(json);
	mc_seg_desc_free(d);
	return rc;
}

static mc_status probe_endpoint(struct mc_te *te, const char *host, uint16_t port, int connect_ms,
				int io_ms)
{
	char *resp = NULL;
	size_t len = 0;
	mc_status rc = mc_rpc_call(&te->auth, host, port, MC_RPC_PROBE, "{}", 2, connect_ms, io_ms,
				   te->cfg.handshake_max_length, &resp, &len);
	mc_free(resp);
	return rc;
}

void mc_te_meta_resync(struct mc_te *te)
{
	if (te && te->meta)
		mc_meta_resync(te->meta);
}

/* Publish rpc_meta/<name>, replacing a stale entry left by a dead engine. */
static mc_status publish_rpc_meta(struct mc_te *te)
{
	struct mc_rpc_meta m = {.ip_or_host_name = te->host, .rpc_port = te->rpc_port};
	char *json = NULL, *key = NULL, *old = NULL;
	size_t oldlen = 0;
	mc_status rc;

	key = mc_meta_key_rpc(te->name);
	rc = key ? mc_rpc_meta_encode(&m, &json) : MC_ERR_NOMEM;
	if (rc != MC_OK)
		goto out;
	rc = mc_meta_get(te->meta, key, &old, &oldlen);
	if (rc == MC_OK) {
		struct mc_rpc_meta om = {0};
		if (mc_rpc_meta_decode(old, oldlen, &om) == MC_OK &&
		    probe_endpoint(te, om.ip_or_host_name, om.rpc_port, 1000, 1000) == MC_OK) {
			rc = mc_set_error(MC_ERR_EXISTS,
					  "segment name %s is in use by a live engine at %s:%u",
					  te->name, om.ip_or_host_name, om.rpc_port);
			mc_rpc_meta_release(&om);
			goto out;
		}
		mc_rpc_meta_release(&om);
		mc_info("replacing stale metadata of %s", te->name);
		mc_meta_del(te->meta, key);
	} else if (rc != MC_ERR_NOT_FOUND) {
		goto out;
	}
	rc = mc_meta_put(te->meta, key, json, strlen(json));
out:
	mc_free(old);
	mc_free(json);
	mc_free(key);
	return rc;
}

/* ---- RPC handler ---------------------------------------------------------- */

static mc_status queue_notify(struct mc_te *te, const char *name, const char *msg)
{
	mc_status rc = MC_OK;
	pthread_mutex_lock(&te->notify_lock);
	if (te->nnotifs == te->notifs_cap) {
		size_t ncap = te->notifs_cap ? te->notifs_cap * 2 : 16;
		void *p = ncap <= (1u << 20) ? mc_realloc(te->notifs, ncap * sizeof(*te->notifs))
					     : NULL;
		if (!p) {
			rc = MC_ERR_NOMEM;
			goto out;
		}
		te->notifs = p;
		te->notifs_cap = ncap;
	}
	te->notifs[te->nnotifs].name = mc_strdup(name);
	te->notifs[te->nnotifs].msg = mc_strdup(msg);
	if (!te->notifs[te->nnotifs].name || !te->notifs[te->nnotifs].msg) {
		mc_free(te->notifs[te->nnotifs].name);
		mc_free(te->notifs[te->nnotifs].msg);
		rc = MC_ERR_NOMEM;
		goto out;
	}
	te->nnotifs++;
out:
	pthread_mutex_unlock(&te->notify_lock);
	return rc;
}

static mc_status dup_out(const char *s, char **out, size_t *len_out)
{
	*out = mc_strdup(s);
	if (!*out)
		return MC_ERR_NOMEM;
	*len_out = strlen(s);
	return MC_OK;
}

static mc_status rpc_handler(void *arg, int type, const char *req, size_t len, char **resp_out,
			     size_t *resp_len_out)
{
	struct mc_te *te = arg;

	switch (type) {
	case MC_RPC_PROBE:
		return dup_out("{\"status\":\"success\"}", resp_out, resp_len_out);
	case MC_RPC_CONNECTION:
		/* a TCP-only engine answers with an all-empty handshake descriptor */
		return dup_out("{\"local_nic_path\":\"\",\"peer_nic_path\":\"\",\"qp_num\":[],"
			       "\"reply_msg\":\"\"}",
			       resp_out, resp_len_out);
	case MC_RPC_METADATA: {
		struct mc_seg_desc *d = NULL;
		mc_status rc;
		if (!te->p2p)
			return dup_out("null", resp_out, resp_len_out);
		rc = mc_te_local_desc(te, &d);
		if (rc == MC_OK)
			rc = mc_seg_desc_encode(d, resp_out);
		mc_seg_desc_free(d);
		if (rc == MC_OK)
			*resp_len_out = strlen(*resp_out);
		return rc;
	}
	case MC_RPC_NOTIFY: {
		json_error_t jerr;
		json_t *j = json_loadb(req, len, JSON_DISABLE_EOF_CHECK, &jerr);
		json_t *n = j ? json_object_get(j, "name") : NULL;
		json_t *m = j ? json_object_get(j, "notify_msg") : NULL;
		mc_status rc;
		if (!json_is_string(n) || !json_is_string(m)) {
			json_decref(j);
			return mc_set_error(MC_ERR_MALFORMED_JSON, "notify: malformed request");
		}
		rc = queue_notify(te, json_string_value(n), json_string_value(m));
		json_decref(j);
		if (rc != MC_OK)
			return rc;
		return dup_out("{\"name\":\"\",\"notify_msg\":\"success\"}", resp_out,
			       resp_len_out);
	}
	}
	return mc_set_error(MC_ERR_PROTOCOL, "rpc: unknown type %d", type);
}

/* ---- creation ------------------------------------------------------------- */

static void read_host_id(struct mc_te *te)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (!f)
		return;
	if (fgets(te->host_id, sizeof(te->host_id), f))
		te->host_id[strcspn(te->host_id, "\n")] = '\0';
	fclose(f);
}

static mc_status apply_params(struct mc_te *te, const struct mc_te_params *p)
{
	uint64_t m = p ? p->field_mask : 0;
	if ((m & MC_TE_PARAM_WORKERS) && p->workers) {
		if (p->workers > 64)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "workers %u > 64", p->workers);
		te->cfg.workers = p->workers;
	}
	if ((m & MC_TE_PARAM_CONNS_PER_PEER) && p->conns_per_peer) {
		if (p->conns_per_peer > 64)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "conns_per_peer %u > 64",
					    p->conns_per_peer);
		te->cfg.conns_per_peer = p->conns_per_peer;
	}
	if ((m & MC_TE_PARAM_DEVICES) && p->devices && *p->devices) {
		te->devices = mc_strdup(p->devices);
		if (!te->devices)
			return MC_ERR_NOMEM;
	} else if (te->cfg.filters && *te->cfg.filters) {
		te->devices = mc_strdup(te->cfg.filters);
		if (!te->devices)
			return MC_ERR_NOMEM;
	}
	if (te->cfg.min_rpc_port > te->cfg.max_rpc_port) {
		mc_warn("MC_MIN_RPC_PORT > MC_MAX_RPC_PORT; using 15000-17000");
		te->cfg.min_rpc_port = 15000;
		te->cfg.max_rpc_port = 17000;
	}
	return MC_OK;
}

/*
 * Where the RPC and data ports listen: the address peers are told, when it
 * was configured rather than guessed (the host parameter, the store's
 * local_hostname; MC_TCP_BIND_ADDRESS; the local name's host in P2P and
 * legacy modes), else every interface, as upstream.  An explicit 0.0.0.0
 * or :: is every interface too.  A name is resolved, except that one that
 * resolves to loopback without being "localhost" means every interface
 * (Debian maps the machine's own name to 127.0.1.1, where peers on other
 * hosts could not reach it), and so does an address this host does not
 * have (a NAT's public address, advertised only).
 */
static void choose_bind_host(struct mc_te *te, const struct mc_te_params *p, const char *local_name)
{
	const char *host = p && (p->field_mask & MC_TE_PARAM_HOST) ? p->host : NULL;
	char h[256] = "";
	struct in6_addr a6;
	struct in_addr a4;
	struct sockaddr_storage ss;
	socklen_t sl;
	int fd;

	if (host && *host)
		snprintf(h, sizeof(h), "%s", host);
	else if (!te->p2p && te->cfg.tcp_bind_address && *te->cfg.tcp_bind_address)
		snprintf(h, sizeof(h), "%s", te->cfg.tcp_bind_address);
	else if ((te->p2p || te->cfg.legacy_rpc_port_binding) && local_name && *local_name) {
		uint16_t port;
		if (!mc_sock_split_hostport(local_name, h, sizeof(h), &port, 0))
			h[0] = '\0';
	}
	te->bind_host[0] = '\0';
	if (mc_sock_host_is_any(h))
		return;
	if (inet_pton(AF_INET, h, &a4) != 1 && inet_pton(AF_INET6, h, &a6) != 1 &&
	    strcmp(h, "localhost") != 0) {
		if (mc_sock_resolve(h, &ss, &sl) != MC_OK) {
			mc_info("%s; listening on every interface", mc_last_error());
			return;
		}
		if (mc_sock_addr_is_loopback(&ss)) {
			mc_info("%s resolves to a loopback address; listening on every interface",
				h);
			return;
		}
	}
	/* an address of another host (a NAT's, say) is only advertised, as upstream */
	fd = mc_sock_listen_on(h, 0, 1);
	if (fd < 0) {
		mc_warn("%s; listening on every interface", mc_last_error());
		return;
	}
	close(fd);
	snprintf(te->bind_host, sizeof(te->bind_host), "%s", h);
}

static mc_status open_rpc_listener(struct mc_te *te, const struct mc_te_params *p,
				   const char *local_name, int *fd_out)
{
	const char *bh = te->bind_host;
	int fd;
	if (p && (p->field_mask & MC_TE_PARAM_RPC_PORT) && p->rpc_port) {
		fd = mc_sock_listen_on(bh, p->rpc_port, 128);
	} else if (!te->p2p && te->cfg.legacy_rpc_port_binding) {
		char h[256];
		uint16_t port;
		mc_sock_split_hostport(local_name, h, sizeof(h), &port,
				       (uint16_t)te->cfg.handshake_port);
		fd = mc_sock_listen_on(bh, port, 128);
	} else {
		fd = mc_sock_listen_range_on(bh, (uint16_t)te->cfg.min_rpc_port,
					     (uint16_t)te->cfg.max_rpc_port, 500, 128);
	}
	if (fd < 0)
		return (mc_status)fd; /* a negative mc_status */
	*fd_out = fd;
	return MC_OK;
}

static mc_status choose_identity(struct mc_te *te, const struct mc_te_params *p,
				 const char *local_name)
{
	const char *host = p && (p->field_mask & MC_TE_PARAM_HOST) ? p->host : NULL;
	char hostname[256];

	if (!local_name || !*local_name) {
		if (gethostname(hostname, sizeof(hostname)) < 0)
			snprintf(hostname, sizeof(hostname), "localhost");
		hostname[sizeof(hostname) - 1] = '\0';
		local_name = hostname;
	}
	if (te->p2p) {
		char h[256];
		uint16_t port;
		if (!mc_sock_split_hostport(local_name, h, sizeof(h), &port, 0))
			return mc_set_error(MC_ERR_INVALID_PARAMS, "bad local name %s", local_name);
		snprintf(te->host, sizeof(te->host), "%s", host && *host ? host : h);
		if (strchr(h, ':'))
			te->name = mc_asprintf("[%s]:%u", h, te->rpc_port);
		else
			te->name = mc_asprintf("%s:%u", h, te->rpc_port);
	} else {
		if (host && *host)
			snprintf(te->host, sizeof(te->host), "%s", host);
		else if (te->cfg.tcp_bind_address && *te->cfg.tcp_bind_address)
			snprintf(te->host, sizeof(te->host), "%s", te->cfg.tcp_bind_address);
		else if (te->cfg.legacy_rpc_port_binding) {
			uint16_t port;
			mc_sock_split_hostport(local_name, te->host, sizeof(te->host), &port, 0);
		} else
			mc_sock_local_ip(te->host, sizeof(te->host));
		te->name = mc_strdup(local_name);
	}
	return te->name ? MC_OK : MC_ERR_NOMEM;
}

/*
 * Open the registry's transports from the last row to the first, so that
 * a row's fallback (a later row) is open before it.  An optional one that
 * cannot open is left out (logged); it may also switch itself off.
 */
static mc_status open_transports(struct mc_te *te)
{
	struct mc_transport_env env = {
		.memreg = &te->memreg,
		.devmem = te->devmem,
		.stage_chunk = (size_t)te->stage_cfg.stage_chunk,
		.devices = te->devices,
		.host_id = te->host_id,
		.bind_host = te->bind_host,
		.min_port = (uint16_t)te->cfg.min_rpc_port,
		.max_port = (uint16_t)te->cfg.max_rpc_port,
		.workers = te->cfg.workers,
		.conns_per_peer = te->cfg.conns_per_peer,
		.auth = &te->auth,
	};

	for (size_t i = mc_transport_registry_len; i-- > 0;) {
		const struct mc_transport_entry *e = &mc_transport_registry[i];
		mc_status rc;

		mc_assert(e->fallback < 0 || (size_t)e->fallback > i);
		env.fallback = e->fallback >= 0 ? te->tps[e->fallback] : NULL;
		if (e->fallback >= 0 && !env.fallback)
			continue; /* its fallback is off, so is it */
		rc = mc_transport_open(e->ops, &env, &te->tps[i]);
		if (rc != MC_OK) {
			te->tps[i] = NULL;
			if (!e->ops->caps.optional)
				return rc;
			mc_info("%s transport unavailable: %s", e->ops->name, mc_last_error());
			continue;
		}
		if (te->tps[i] && e->ops->caps.local && !te->local_tp)
			te->local_tp = te->tps[i];
	}
	if (!te->local_tp)
		return mc_set_error(MC_ERR_INTERNAL, "no transport serves the local segment");
	return MC_OK;
}

/* First to last: a transport closes before its fallback, to which it may
 * still hand slices while it closes. */
static void close_transports(struct mc_te *te)
{
	for (size_t i = 0; i < mc_transport_registry_len; i++) {
		mc_transport_close(te->tps[i]);
		te->tps[i] = NULL;
	}
	te->local_tp = NULL;
}

mc_status mc_te_new(const struct mc_te_params *params, struct mc_te **te_out)
{
	struct mc_te *te;
	const char *uri =
		params && (params->field_mask & MC_TE_PARAM_METADATA) ? params->metadata_uri : NULL;
	const char *local_name =
		params && (params->field_mask & MC_TE_PARAM_LOCAL_NAME) ? params->local_name : NULL;
	const char *proto =
		params && (params->field_mask & MC_TE_PARAM_PROTOCOL) ? params->protocol : NULL;
	struct mc_rpc_server_params rp = {0};
	mc_status rc;
	int fd = -1;

	mc_log_init_from_env();
	if (!te_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "te_out is NULL");
	if (proto && *proto && strcmp(proto, "tcp") != 0) {
		if (strcmp(proto, "rdma") == 0)
			mc_info("no usable RDMA device; protocol rdma falls back to tcp");
		else
			return mc_set_error(MC_ERR_TRANSPORT_UNSUPPORTED,
					    "protocol %s is not supported by this build", proto);
	}

	te = mc_calloc(1, sizeof(*te));
	if (!te)
		return MC_ERR_NOMEM;
	mc_config_entry_defaults(mc_te_config_table, mc_te_config_table_len, &te->cfg);
	mc_config_entry_load_env(mc_te_config_table, mc_te_config_table_len, &te->cfg);
	atomic_init(&te->checksum, te->cfg.checksum != 0);
	mc_config_entry_defaults(mc_devmem_config_table, mc_devmem_config_table_len,
				 &te->stage_cfg);
	mc_config_entry_load_env(mc_devmem_config_table, mc_devmem_config_table_len,
				 &te->stage_cfg);
	mc_memreg_init(&te->memreg);
	pthread_mutex_init(&te->publish_lock, NULL);
	pthread_rwlock_init(&te->seg_lock, NULL);
	pthread_mutex_init(&te->notify_lock, NULL);
	mc_batch_table_init(te);
	read_host_id(te);
	rc = apply_params(te, params);
	if (rc != MC_OK)
		goto err;
	rc = mc_auth_secret_load(NULL, &te->auth);
	if (rc != MC_OK)
		goto err;

	if (!uri || !*uri)
		uri = te->cfg.metadata_server;
	if (!uri || !*uri) {
		rc = mc_set_error(MC_ERR_INVALID_PARAMS,
				  "no metadata server given (an http:// URI or P2PHANDSHAKE; "
				  "MC_METADATA_SERVER)");
		goto err;
	}
	te->metadata_uri = mc_strdup(uri);
	te->p2p = strcmp(uri, "P2PHANDSHAKE") == 0;
	if (!te->p2p) {
		rc = mc_meta_open(uri, &te->meta);
		if (rc != MC_OK)
			goto err;
	}
	choose_bind_host(te, params, local_name);
	rc = open_rpc_listener(te, params, local_name, &fd);
	if (rc != MC_OK)
		goto err;
	te->rpc_port = mc_sock_local_port(fd);
	rc = choose_identity(te, params, local_name);
	if (rc != MC_OK)
		goto err;

	te->devmem = mc_devmem();
	if (te->devmem) {
		rc = mc_stager_open(te, &te->stager);
		if (rc != MC_OK)
			goto err;
	}
	rc = open_transports(te);
	if (rc != MC_OK)
		goto err;
	mc_auth_warn_open(&te->auth, "the Transfer Engine's data and RPC ports", te->bind_host);

	rp.listen_fd = fd;
	rp.max_frame = te->cfg.handshake_max_length;
	rp.recv_timeout_ms = (int)te->cfg.rpc_recv_timeout_ms;
	rp.max_conns = (unsigned)mc_accept_cap_for_fds("rpc", (uint64_t)te->cfg.rpc_max_conns, 10);
	rp.handler = rpc_handler;
	rp.handler_arg = te;
	rp.auth = &te->auth;
	fd = -1; /* the server owns it now, even on failure */
	rc = mc_rpc_server_start(&rp, &te->rpc);
	if (rc != MC_OK)
		goto err;

	if (!te->p2p) {
		rc = publish_rpc_meta(te);
		if (rc != MC_OK)
			goto err;
		te->published = true; /* from here on the keys are ours to delete */
		rc = mc_te_publish(te);
		if (rc != MC_OK)
			goto err;
	}
	/* the backend's uri has any password removed */
	mc_info("engine %s up: rpc %s:%u, tcp port %u, metadata %s", te->name, te->host,
		te->rpc_port, mc_te_tcp_port(te), te->meta ? te->meta->uri : uri);
	*te_out = te;
	return MC_OK;
err:
	if (fd >= 0)
		close(fd);
	{
		/* keep the cause: teardown may overwrite the thread's last error */
		char why[512];
		snprintf(why, sizeof(why), "%s", mc_last_error());
		mc_te_free(te);
		mc_restore_error(why);
	}
	return rc;
}

void mc_te_free(struct mc_te *te)
{
	if (!te)
		return;
	if (te->rpc)
		mc_rpc_server_stop(te->rpc);
	mc_stager_quiesce(te->stager); /* it hands chunks to the transports */
	close_transports(te);
	mc_stager_close(te->stager); /* after the transports gave every chunk back */
	if (te->meta && te->name && te->published) {
		char *k1 = mc_meta_key_rpc(te->name), *k2 = mc_meta_key_segment(te->name);
		if (k1)
			mc_meta_del(te->meta, k1);
		if (k2)
			mc_meta_del(te->meta, k2);
		mc_free(k1);
		mc_free(k2);
	}
	if (te->meta)
		mc_meta_close(te->meta);
	for (size_t i = 0; i < te->nsegs; i++) {
		if (!te->segs[i])
			continue;
		mc_seg_desc_free(te->segs[i]->desc);
		mc_free(te->segs[i]->name);
		mc_free(te->segs[i]);
	}
	mc_free(te->segs);
	mc_batch_table_release(te);
	for (size_t i = 0; i < te->nnotifs; i++) {
		mc_free(te->notifs[i].name);
		mc_free(te->notifs[i].msg);
	}
	mc_free(te->notifs);
	mc_memreg_release(&te->memreg);
	mc_config_entry_release(mc_te_config_table, mc_te_config_table_len, &te->cfg);
	mc_auth_secret_release(&te->auth);
	mc_config_entry_release(mc_devmem_config_table, mc_devmem_config_table_len, &te->stage_cfg);
	pthread_mutex_destroy(&te->publish_lock);
	pthread_rwlock_destroy(&te->seg_lock);
	pthread_mutex_destroy(&te->notify_lock);
	mc_free(te->metadata_uri);
	mc_free(te->devices);
	mc_free(te->name);
	mc_free(te);
}

const char *mc_te_local_name(const struct mc_te *te)
{
	return te ? te->name : NULL;
}

const char *mc_te_local_host(const struct mc_te *te)
{
	return te ? te->host : NULL;
}

uint16_t mc_te_rpc_port(const struct mc_te *te)
{
	return te ? te->rpc_port : 0;
}

void mc_te_set_checksum(struct mc_te *te, bool on)
{
	if (te)
		atomic_store(&te->checksum, on);
}

bool mc_te_checksum(const struct mc_te *te)
{
	return te && atomic_load(&((struct mc_te *)te)->checksum);
}

/* The first data port a transport publishes (upstream's name: TCP's). */
uint16_t mc_te_tcp_port(const struct mc_te *te)
{
	for (size_t i = 0; te && i < mc_transport_registry_len; i++) {
		uint16_t port = te->tps[i] ? mc_transport_data_port(te->tps[i]) : 0;
		if (port)
			return port;
	}
	return 0;
}

struct mc_transport *mc_te_transport(struct mc_te *te, const char *name)
{
	for (size_t i = 0; i < mc_transport_registry_len; i++)
		if (te->tps[i] && strcmp(mc_transport_registry[i].ops->name, name) == 0)
			return te->tps[i];
	return NULL;
}

/* ---- memory registration ---------------------------------------------------- */

/*
 * Is the range at addr device memory (*dev_out: its device, else -1), and
 * under which location is it recorded?  With a backend the pointer decides,
 * whatever the label says, and "*" or "" becomes "cuda:N" for device memory
 * (upstream resolves "*" the same way).  Without one, "cuda:N" is refused:
 * no transport could reach such memory.
 */
static mc_status resolve_location(struct mc_te *te, const void *addr, const char *location,
				  char *buf, size_t buflen, const char **loc_out, int *dev_out)
{
	int want = mc_devmem_location_device(location);
	int dev;

	*loc_out = location;
	*dev_out = -1;
	if (!te->devmem) {
		if (want >= 0)
			return mc_set_error(
				MC_ERR_DEVICE_NOT_FOUND,
				"register: location %s needs device memory support, "
				"which this process lacks (a CUDA build and a CUDA device)",
				location);
		return MC_OK;
	}
	dev = te->devmem->ptr_device(addr);
	if (dev < 0) {
		if (want >= 0)
			mc_info("register: %p is host memory, although its location is %s", addr,
				location);
		return MC_OK;
	}
	if (!location || !*location || strcmp(location, "*") == 0) {
		snprintf(buf, buflen, "cuda:%d", dev);
		*loc_out = buf;
	} else if (want >= 0 && want != dev) {
		mc_info("register: %p is memory of device %d, although its location is %s", addr,
			dev, location);
	}
	*dev_out = dev;
	return MC_OK;
}

static mc_status memreg_add(struct mc_te *te, void *addr, size_t length, const char *location,
			    bool remote, bool read_only)
{
	char buf[32];
	int dev;
	mc_status rc = resolve_location(te, addr, location, buf, sizeof(buf), &location, &dev);
	if (rc != MC_OK)
		return rc;
	/* published at once: a hole or a read-only page would kill this process
	 * at a peer's first write; device memory is the backend's to vouch for */
	if (dev < 0 &&
	    (rc = mc_memreg_check_mapped((uint64_t)(uintptr_t)addr, length, read_only)) != MC_OK)
		return rc;
	return mc_memreg_add(&te->memreg, (uint64_t)(uintptr_t)addr, length, location, dev, remote,
			     read_only);
}

mc_status mc_te_register(struct mc_te *te, void *addr, size_t length, const char *location,
			 bool remote_accessible)
{
	return mc_te_register_flags(te, addr, length, location, remote_accessible, 0);
}

mc_status mc_te_register_flags(struct mc_te *te, void *addr, size_t length, const char *location,
			       bool remote_accessible, unsigned flags)
{
	mc_status rc;
	if (!te || !addr || !length)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register: NULL address or zero length");
	if (flags & ~(unsigned)MC_TE_REGISTER_READ_ONLY)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "register: unknown flags 0x%x",
				    flags & ~(unsigned)MC_TE_REGISTER_READ_ONLY);
	rc = memreg_add(te, addr, length, location, remote_accessible,
			(flags & MC_TE_REGISTER_READ_ONLY) != 0);
	if (rc != MC_OK)
		return rc;
	rc = mc_te_publish(te);
	if (rc != MC_OK) {
		char why[400];
		snprintf(why, sizeof(why), "%s", mc_last_error());
		mc_memreg_remove(&te->memreg, (uint64_t)(uintptr_t)addr, 0, NULL);
		/* a failed put may still have landed: publish the rolled-back state */
		mc_te_publish(te);
		mc_restore_error(why);
	}
	return rc;
}

/* When a deregistration called now stops waiting for the range's users. */
static uint64_t deregister_deadline(const struct mc_te *te)
{
	return mc_now_ms() + (uint64_t)te->cfg.deregister_wait_ms + 1; /* never 0: bounded */
}

mc_status mc_te_deregister(struct mc_te *te, void *addr)
{
	mc_status rc;
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	rc = mc_memreg_remove(&te->memreg, (uint64_t)(uintptr_t)addr, deregister_deadline(te),
			      NULL);
	if (rc != MC_OK)
		return rc;
	return mc_te_publish(te);
}

mc_status mc_te_register_batch(struct mc_te *te, const struct mc_te_buffer *bufs, size_t n,
			       const char *location)
{
	size_t i;
	mc_status rc = MC_OK;
	if (!te || (!bufs && n))
		return MC_ERR_INVALID_PARAMS;
	for (i = 0; i < n; i++) {
		if (!bufs[i].addr || !bufs[i].length) {
			rc = mc_set_error(MC_ERR_INVALID_PARAMS,
					  "register: entry %zu has NULL address or zero length", i);
			break;
		}
		rc = memreg_add(te, bufs[i].addr, bufs[i].length, location, true, false);
		if (rc != MC_OK)
			break;
	}
	if (rc == MC_OK)
		rc = mc_te_publish(te);
	if (rc != MC_OK) {
		char why[400];
		bool published = i == n;
		snprintf(why, sizeof(why), "%s", mc_last_error());
		while (i-- > 0)
			mc_memreg_remove(&te->memreg, (uint64_t)(uintptr_t)bufs[i].addr, 0, NULL);
		if (published)
			mc_te_publish(te); /* a failed put may still have landed */
		mc_restore_error(why);
	}
	return rc;
}

mc_status mc_te_deregister_batch(struct mc_te *te, void *const *addrs, size_t n)
{
	mc_status first = MC_OK;
	uint64_t deadline;
	if (!te || (!addrs && n))
		return MC_ERR_INVALID_PARAMS;
	deadline = deregister_deadline(te); /* one bound for the whole batch */
	for (size_t i = 0; i < n; i++) {
		mc_status rc = mc_memreg_remove(&te->memreg, (uint64_t)(uintptr_t)addrs[i],
						deadline, NULL);
		if (rc != MC_OK && first == MC_OK)
			first = rc;
	}
	mc_te_publish(te);
	return first;
}

/* ---- notifications and probes ------------------------------------------------------ */

/* Where a segment's RPC listener is: from its name in P2P mode, else from
 * its rpc_meta record. */
static mc_status rpc_endpoint_by_name(struct mc_te *te, const char *name, char *host,
				      size_t host_len, uint16_t *port)
{
	if (te->p2p) {
		if (!mc_sock_split_hostport(name, host, host_len, port, 0) || !*port)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "%s is not host:port", name);
		return MC_OK;
	}
	return mc_te_rpc_meta_lookup(te, name, host, host_len, port);
}

static mc_status send_notify(struct mc_te *te, const char *host, uint16_t port, const char *name,
			     const char *msg)
{
	json_t *j = json_pack("{s:s, s:s}", "name", name ? name : "", "notify_msg", msg ? msg : "");
	char *req = j ? json_dumps(j, JSON_COMPACT) : NULL, *resp = NULL;
	size_t rlen = 0;
	mc_status rc;

	json_decref(j);
	if (!req)
		return MC_ERR_NOMEM;
	rc = mc_rpc_call(&te->auth, host, port, MC_RPC_NOTIFY, req, strlen(req),
			 (int)te->cfg.handshake_connect_timeout_s * 1000,
			 (int)te->cfg.rpc_io_timeout_ms, te->cfg.handshake_max_length, &resp,
			 &rlen);
	free(req);
	if (rc == MC_OK) {
		json_error_t jerr;
		json_t *r = json_loadb(resp, rlen, JSON_DISABLE_EOF_CHECK, &jerr);
		json_t *m = r ? json_object_get(r, "notify_msg") : NULL;
		if (!json_is_string(m) || !*json_string_value(m))
			rc = mc_set_error(MC_ERR_METADATA, "notify to %s:%u was not accepted", host,
					  port);
		json_decref(r);
	}
	mc_free(resp);
	return rc;
}

mc_status mc_te_notify_send(struct mc_te *te, mc_segment_id target, const char *name,
			    const char *msg)
{
	struct mc_segment *s;
	char host[256];
	uint16_t port;
	if (!te)
		return MC_ERR_INVALID_PARAMS;
	if (target == MC_LOCAL_SEGMENT)
		return queue_notify(te, name ? name : "", msg ? msg : "");
	s = mc_te_segment_get(te, target);
	if (!s)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "notify: unknown segment %llu",
				    (unsigned long long)target);
	pthread_rwlock_rdlock(&te->seg_lock);
	snprintf(host, sizeof(host), "%s", s->host);
	port = s->rpc_port;
	pthread_rwlock_unlock(&te->seg_lock);
	return send_notify(te, host, port, name, msg);
}

mc_status mc_te_notify_send_by_name(struct mc_te *te, const char *segment_name, const char *name,
				    const char *msg)
{
	char host[256];
	uint16_t port = 0;
	mc_status rc;
	if (!te || !segment_name)
		return MC_ERR_INVALID_PARAMS;
	if (strcmp(segment_name, te->name) == 0)
		return queue_notify(te, name ? name : "", msg ? msg : "");
	rc = rpc_endpoint_by_name(te, segment_name, host, sizeof(host), &port);
	if (rc != MC_OK)
		return rc;
	return send_notify(te, host, port, name, msg);
}

mc_status mc_te_notify_recv(struct mc_te *te, struct mc_te_notify **list_out, size_t *count_out)
{
	if (!te || !list_out || !count_out)
		return MC_ERR_INVALID_PARAMS;
	pthread_mutex_lock(&te->notify_lock);
	*list_out = te->nnotifs ? te->notifs : NULL;
	*count_out = te->nnotifs;
	if (te->nnotifs) {
		te->notifs = NULL;
		te->nnotifs = 0;
		te->notifs_cap = 0;
	}
	pthread_mutex_unlock(&te->notify_lock);
	return MC_OK;
}

void mc_te_notify_free(struct mc_te_notify *list, size_t count)
{
	for (size_t i = 0; list && i < count; i++) {
		mc_free(list[i].name);
		mc_free(list[i].msg);
	}
	mc_free(list);
}

mc_status mc_te_probe_within(struct mc_te *te, const char *segment_name, int timeout_ms)
{
	char host[256];
	uint16_t port = 0;
	mc_status rc;
	if (!te || !segment_name)
		return MC_ERR_INVALID_PARAMS;
	if (timeout_ms <= 0)
		timeout_ms = (int)te->cfg.handshake_connect_timeout_s * 1000;
	rc = rpc_endpoint_by_name(te, segment_name, host, sizeof(host), &port);
	if (rc != MC_OK)
		return rc;
	/* a live peer answers a probe at once: one bound for the connect and the answer */
	return probe_endpoint(te, host, port, timeout_ms, timeout_ms);
}

mc_status mc_te_probe(struct mc_te *te, const char *segment_name)
{
	return mc_te_probe_within(te, segment_name, 0);
}
