/*
 * meta/desc.c - segment descriptors and rpc_meta records as upstream's JSON.
 *
 * Peers publish two documents in the metadata service (spec
 * transfer-engine.md 3.2-3.3): an rpc_meta record {ip_or_host_name,
 * rpc_port} and a segment descriptor {name, protocol, tcp_data_port,
 * tcp_proto_version, timestamp, buffers[{name, addr, length}]}, plus our
 * optional extensions "mc_host_id", "mc_shm_ep" (the same-host transport's
 * endpoint, see transport/shm.c) and "mc_tcp_addrs" (the addresses of a
 * multi-path TCP target: an array of at most MC_SEG_MAX_TCP_ADDRS non-empty
 * strings of at most MC_SEG_MAX_TCP_ADDR_LEN bytes); upstream ignores all
 * three.  This file converts between those documents and struct
 * mc_seg_desc / struct mc_rpc_meta with jansson.
 *
 * Decoding is tolerant where upstream writers differ and strict where a
 * wrong value would later send bytes to the wrong place:
 *   - any key order, a trailing newline (etcd/redis writers add one), and
 *     unknown fields are accepted, so an RDMA descriptor (devices,
 *     priority_matrix, rkey, lkey) decodes to its name/addr/length part;
 *   - integers go through json_int_t (64-bit), never through double; a
 *     JSON real, a string or a negative number where an integer is expected
 *     is rejected.  Values above INT64_MAX cannot be represented by jansson
 *     2.14 and make the whole document fail to parse ("too big integer").
 *     User-space addresses stay below 2^57 on every platform we target, so
 *     this only rejects documents no correct peer writes; the encoder
 *     refuses such values for the same reason, keeping encode/decode
 *     symmetric;
 *   - a buffer needs a non-empty name, addr != 0 and length != 0, otherwise
 *     the whole descriptor is rejected (upstream does the same).
 * Every rejection is MC_ERR_MALFORMED_JSON with mc_last_error() naming the
 * field ("buffers[1].addr").  Encoding is compact JSON without a newline.
 */
#define MC_LOG_MODULE "meta"
#include "meta/desc.h"

#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "meta/meta_config.h"
#include "mooncake/status.h"

#define KEY_PREFIX "mooncake/"

/* ---- decoding helpers ---------------------------------------------------- */

static json_t *parse_object(const char *what, const char *json, size_t len, int *status)
{
	json_error_t err;
	json_t *root;

	if (!json) {
		*status = mc_set_error(MC_ERR_MALFORMED_JSON, "%s: no input", what);
		return NULL;
	}
	root = json_loadb(json, len, JSON_DECODE_ANY, &err);
	if (!root) {
		bool too_big = strstr(err.text, "too big") != NULL;
		*status = mc_set_error(
			MC_ERR_MALFORMED_JSON, "%s: invalid json at line %d column %d: %s%s", what,
			err.line, err.column, err.text,
			too_big ? " (integers above INT64_MAX are not supported)" : "");
		return NULL;
	}
	if (!json_is_object(root)) {
		*status = mc_set_error(MC_ERR_MALFORMED_JSON, "%s: top level is not a json object",
				       what);
		json_decref(root);
		return NULL;
	}
	*status = MC_OK;
	return root;
}

/* Copy a required (or optional, when out may stay NULL) string member. */
static mc_status get_string(const char *what, json_t *obj, const char *key, const char *field,
			    bool required, bool nonempty, char **out)
{
	json_t *v = json_object_get(obj, key);

	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required)
			return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field %s is missing", what,
					    field);
		return MC_OK;
	}
	if (!json_is_string(v))
		return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field %s is not a string", what,
				    field);
	if (nonempty && json_string_length(v) == 0)
		return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field %s is empty", what, field);
	/* jansson rejects \u0000 on load, so strlen() == json_string_length() */
	*out = mc_strdup(json_string_value(v));
	if (!*out)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory copying %s", what, field);
	return MC_OK;
}

/*
 * An integer member within [min, max].  Absent (or null) members leave *out
 * at the caller's default unless required.
 */
static mc_status get_int(const char *what, json_t *obj, const char *key, const char *field,
			 bool required, json_int_t min, json_int_t max, json_int_t *out)
{
	json_t *v = json_object_get(obj, key);
	json_int_t n;

	if (!v || json_is_null(v)) {
		if (required)
			return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field %s is missing", what,
					    field);
		return MC_OK;
	}
	if (!json_is_integer(v))
		return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field %s is not an integer", what,
				    field);
	n = json_integer_value(v);
	if (n < min || n > max)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "%s: field %s is %" PRId64 ", outside [%" PRId64 ", %" PRId64
				    "]",
				    what, field, (int64_t)n, (int64_t)min, (int64_t)max);
	*out = n;
	return MC_OK;
}

/* ---- segment descriptor -------------------------------------------------- */

static const char seg_what[] = "segment descriptor";

void mc_seg_desc_free(struct mc_seg_desc *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nbuffers; i++)
		mc_free(d->buffers[i].name);
	mc_free(d->buffers);
	mc_free(d->name);
	mc_free(d->protocol);
	mc_free(d->timestamp);
	mc_free(d->host_id);
	mc_free(d->shm_ep);
	for (size_t i = 0; i < d->ntcp_addrs; i++)
		mc_free(d->tcp_addrs[i]);
	mc_free(d->tcp_addrs);
	mc_free(d);
}

/* "mc_tcp_addrs": optional; when present an array of bounded non-empty strings. */
static mc_status decode_tcp_addrs(json_t *root, struct mc_seg_desc *d)
{
	json_t *v = json_object_get(root, "mc_tcp_addrs");
	size_t n;

	if (!v || json_is_null(v))
		return MC_OK;
	if (!json_is_array(v))
		return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: field mc_tcp_addrs is not an array",
				    seg_what);
	n = json_array_size(v);
	if (n > MC_SEG_MAX_TCP_ADDRS)
		return mc_set_error(MC_ERR_MALFORMED_JSON,
				    "%s: field mc_tcp_addrs has %zu entries (at most %d)", seg_what,
				    n, MC_SEG_MAX_TCP_ADDRS);
	if (n == 0)
		return MC_OK;
	d->tcp_addrs = mc_calloc(n, sizeof(*d->tcp_addrs));
	if (!d->tcp_addrs)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory for mc_tcp_addrs", seg_what);
	for (size_t i = 0; i < n; i++) {
		json_t *a = json_array_get(v, i);
		if (!json_is_string(a) || json_string_length(a) == 0 ||
		    json_string_length(a) > MC_SEG_MAX_TCP_ADDR_LEN)
			return mc_set_error(
				MC_ERR_MALFORMED_JSON,
				"%s: mc_tcp_addrs[%zu] is not a string of 1 to %d bytes", seg_what,
				i, MC_SEG_MAX_TCP_ADDR_LEN);
		d->tcp_addrs[i] = mc_strdup(json_string_value(a));
		if (!d->tcp_addrs[i])
			return mc_set_error(MC_ERR_NOMEM, "%s: out of memory copying mc_tcp_addrs",
					    seg_what);
		d->ntcp_addrs = i + 1;
	}
	return MC_OK;
}

static mc_status decode_buffer(json_t *b, size_t i, struct mc_seg_buffer *out)
{
	char field[64];
	json_int_t addr = 0, length = 0;
	mc_status status;

	if (!json_is_object(b))
		return mc_set_error(MC_ERR_MALFORMED_JSON, "%s: buffers[%zu] is not an object",
				    seg_what, i);
	snprintf(field, sizeof(field), "buffers[%zu].name", i);
	status = get_string(seg_what, b, "name", field, true, true, &out->name);
	if (status)
		return status;
	snprintf(field, sizeof(field), "buffers[%zu].addr", i);
	status = get_int(seg_what, b, "addr", field, true, 1, INT64_MAX, &addr);
	if (status)
		goto err_free_name;
	snprintf(field, sizeof(field), "buffers[%zu].length", i);
	status = get_int(seg_what, b, "length", field, true, 1, INT64_MAX, &length);
	if (status)
		goto err_free_name;
	out->addr = (uint64_t)addr;
	out->length = (uint64_t)length;
	return MC_OK;

err_free_name:
	mc_free(out->name);
	out->name = NULL;
	return status;
}

mc_status mc_seg_desc_decode(const char *json, size_t len, struct mc_seg_desc **desc_out)
{
	struct mc_seg_desc *d;
	json_t *root, *bufs;
	json_int_t port = 0, version = 1;
	mc_status status;

	root = parse_object(seg_what, json, len, &status);
	if (!root)
		return status;
	d = mc_calloc(1, sizeof(*d));
	if (!d) {
		status = mc_set_error(MC_ERR_NOMEM, "%s: out of memory", seg_what);
		goto out_decref;
	}
	status = get_string(seg_what, root, "name", "name", true, true, &d->name);
	if (status)
		goto err_free_desc;
	status = get_string(seg_what, root, "protocol", "protocol", true, true, &d->protocol);
	if (status)
		goto err_free_desc;
	status = get_int(seg_what, root, "tcp_data_port", "tcp_data_port", false, 0, UINT16_MAX,
			 &port);
	if (status)
		goto err_free_desc;
	status = get_int(seg_what, root, "tcp_proto_version", "tcp_proto_version", false, 1,
			 INT_MAX, &version);
	if (status)
		goto err_free_desc;
	d->tcp_data_port = (uint16_t)port;
	d->tcp_proto_version = (int)version;
	status = get_string(seg_what, root, "timestamp", "timestamp", false, false, &d->timestamp);
	if (status)
		goto err_free_desc;
	status = get_string(seg_what, root, "mc_host_id", "mc_host_id", false, false, &d->host_id);
	if (status)
		goto err_free_desc;
	status = get_string(seg_what, root, "mc_shm_ep", "mc_shm_ep", false, false, &d->shm_ep);
	if (status)
		goto err_free_desc;
	status = decode_tcp_addrs(root, d);
	if (status)
		goto err_free_desc;

	bufs = json_object_get(root, "buffers");
	if (bufs && !json_is_null(bufs)) {
		size_t n;
		if (!json_is_array(bufs)) {
			status = mc_set_error(MC_ERR_MALFORMED_JSON,
					      "%s: field buffers is not an array", seg_what);
			goto err_free_desc;
		}
		n = json_array_size(bufs);
		if (n) {
			d->buffers = mc_calloc(n, sizeof(*d->buffers));
			if (!d->buffers) {
				status = mc_set_error(MC_ERR_NOMEM,
						      "%s: out of memory for %zu buffers", seg_what,
						      n);
				goto err_free_desc;
			}
		}
		for (size_t i = 0; i < n; i++) {
			status = decode_buffer(json_array_get(bufs, i), i, &d->buffers[i]);
			if (status)
				goto err_free_desc;
			d->nbuffers = i + 1;
		}
	}
	*desc_out = d;
	status = MC_OK;
	goto out_decref;

err_free_desc:
	mc_seg_desc_free(d);
out_decref:
	json_decref(root);
	return status;
}

/* Serialise root compactly into an mc_malloc'ed string. */
static mc_status dump_compact(const char *what, json_t *root, char **json_out)
{
	size_t n = json_dumpb(root, NULL, 0, JSON_COMPACT);
	char *s;

	if (n == 0)
		return mc_set_error(MC_ERR_INTERNAL, "%s: json encoding failed", what);
	s = mc_malloc(n + 1);
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory", what);
	if (json_dumpb(root, s, n, JSON_COMPACT) != n) {
		mc_free(s);
		return mc_set_error(MC_ERR_INTERNAL, "%s: json encoding failed", what);
	}
	s[n] = '\0';
	*json_out = s;
	return MC_OK;
}

/* json_object_set_new that reports failure (NULL value, bad UTF-8, no memory). */
static int set_new(json_t *obj, const char *key, json_t *v)
{
	if (!v)
		return -1;
	return json_object_set_new(obj, key, v);
}

static mc_status check_encodable(const struct mc_seg_desc *d)
{
	if (!d->name || !*d->name)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: name is empty", seg_what);
	if (!d->protocol || !*d->protocol)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: protocol is empty", seg_what,
				    d->name);
	if (d->tcp_proto_version < 1)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: tcp_proto_version %d < 1",
				    seg_what, d->name, d->tcp_proto_version);
	if (d->nbuffers && !d->buffers)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: %zu buffers but no array",
				    seg_what, d->name, d->nbuffers);
	if (d->ntcp_addrs > MC_SEG_MAX_TCP_ADDRS || (d->ntcp_addrs && !d->tcp_addrs))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s %s: %zu tcp addresses (at most %d)",
				    seg_what, d->name, d->ntcp_addrs, MC_SEG_MAX_TCP_ADDRS);
	for (size_t i = 0; i < d->ntcp_addrs; i++) {
		const char *a = d->tcp_addrs[i];
		if (!a || !*a || strlen(a) > MC_SEG_MAX_TCP_ADDR_LEN)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "%s %s: tcp_addrs[%zu] is empty or too long", seg_what,
					    d->name, i);
	}
	/* refuse to publish what every peer would reject */
	for (size_t i = 0; i < d->nbuffers; i++) {
		const struct mc_seg_buffer *b = &d->buffers[i];
		if (!b->name || !*b->name)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "%s %s: buffers[%zu].name is empty", seg_what, d->name,
					    i);
		if (b->addr == 0 || b->addr > INT64_MAX)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "%s %s: buffers[%zu].addr 0x%" PRIx64
					    " is zero or above INT64_MAX",
					    seg_what, d->name, i, b->addr);
		if (b->length == 0 || b->length > INT64_MAX)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "%s %s: buffers[%zu].length %" PRIu64
					    " is zero or above INT64_MAX",
					    seg_what, d->name, i, b->length);
	}
	return MC_OK;
}

mc_status mc_seg_desc_encode(const struct mc_seg_desc *d, char **json_out)
{
	char now[32];
	json_t *root, *bufs;
	mc_status status;

	if (!d || !json_out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL argument", seg_what);
	status = check_encodable(d);
	if (status)
		return status;
	root = json_object();
	bufs = json_array();
	if (!root || !bufs) {
		status = mc_set_error(MC_ERR_NOMEM, "%s: out of memory", seg_what);
		goto out_decref;
	}
	if (!d->timestamp)
		mc_seg_timestamp(now, sizeof(now));
	/* upstream's field order, though readers must not depend on it */
	if (set_new(root, "name", json_string(d->name)) ||
	    set_new(root, "protocol", json_string(d->protocol)) ||
	    set_new(root, "tcp_data_port", json_integer(d->tcp_data_port)) ||
	    set_new(root, "tcp_proto_version", json_integer(d->tcp_proto_version)) ||
	    set_new(root, "timestamp", json_string(d->timestamp ? d->timestamp : now)) ||
	    (d->host_id && set_new(root, "mc_host_id", json_string(d->host_id))) ||
	    (d->shm_ep && set_new(root, "mc_shm_ep", json_string(d->shm_ep))) ||
	    json_object_set(root, "buffers", bufs)) {
		status = mc_set_error(MC_ERR_INVALID_PARAMS,
				      "%s %s: a string field is not valid UTF-8 (or out of memory)",
				      seg_what, d->name);
		goto out_decref;
	}
	for (size_t i = 0; i < d->nbuffers; i++) {
		const struct mc_seg_buffer *b = &d->buffers[i];
		json_t *o = json_object();
		if (!o || json_array_append_new(bufs, o) ||
		    set_new(o, "name", json_string(b->name)) ||
		    set_new(o, "addr", json_integer((json_int_t)b->addr)) ||
		    set_new(o, "length", json_integer((json_int_t)b->length))) {
			status = mc_set_error(MC_ERR_INVALID_PARAMS,
					      "%s %s: buffers[%zu].name is not valid UTF-8 (or out "
					      "of memory)",
					      seg_what, d->name, i);
			goto out_decref;
		}
	}
	if (d->ntcp_addrs) {
		json_t *addrs = json_array();
		if (!addrs || json_object_set_new(root, "mc_tcp_addrs", addrs)) {
			status = mc_set_error(MC_ERR_NOMEM, "%s: out of memory", seg_what);
			goto out_decref;
		}
		for (size_t i = 0; i < d->ntcp_addrs; i++) {
			if (json_array_append_new(addrs, json_string(d->tcp_addrs[i]))) {
				status =
					mc_set_error(MC_ERR_INVALID_PARAMS,
						     "%s %s: tcp_addrs[%zu] is not valid UTF-8 (or "
						     "out of memory)",
						     seg_what, d->name, i);
				goto out_decref;
			}
		}
	}
	status = dump_compact(seg_what, root, json_out);

out_decref:
	json_decref(bufs);
	json_decref(root);
	return status;
}

mc_status mc_seg_desc_dup(const struct mc_seg_desc *d, struct mc_seg_desc **out)
{
	struct mc_seg_desc *c;

	if (!d || !out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL argument to dup", seg_what);
	c = mc_calloc(1, sizeof(*c));
	if (!c)
		goto err_nomem;
	c->tcp_data_port = d->tcp_data_port;
	c->tcp_proto_version = d->tcp_proto_version;
	if ((d->name && !(c->name = mc_strdup(d->name))) ||
	    (d->protocol && !(c->protocol = mc_strdup(d->protocol))) ||
	    (d->timestamp && !(c->timestamp = mc_strdup(d->timestamp))) ||
	    (d->host_id && !(c->host_id = mc_strdup(d->host_id))) ||
	    (d->shm_ep && !(c->shm_ep = mc_strdup(d->shm_ep))))
		goto err_free_copy;
	if (d->ntcp_addrs) {
		c->tcp_addrs = mc_calloc(d->ntcp_addrs, sizeof(*c->tcp_addrs));
		if (!c->tcp_addrs)
			goto err_free_copy;
		for (size_t i = 0; i < d->ntcp_addrs; i++) {
			c->ntcp_addrs = i + 1;
			if (!(c->tcp_addrs[i] = mc_strdup(d->tcp_addrs[i])))
				goto err_free_copy;
		}
	}
	if (d->nbuffers) {
		c->buffers = mc_calloc(d->nbuffers, sizeof(*c->buffers));
		if (!c->buffers)
			goto err_free_copy;
		for (size_t i = 0; i < d->nbuffers; i++) {
			c->buffers[i].addr = d->buffers[i].addr;
			c->buffers[i].length = d->buffers[i].length;
			c->nbuffers = i + 1;
			if (d->buffers[i].name &&
			    !(c->buffers[i].name = mc_strdup(d->buffers[i].name)))
				goto err_free_copy;
		}
	}
	*out = c;
	return MC_OK;

err_free_copy:
	mc_seg_desc_free(c);
err_nomem:
	return mc_set_error(MC_ERR_NOMEM, "%s: out of memory copying", seg_what);
}

/* ---- rpc_meta ------------------------------------------------------------ */

static const char rpc_what[] = "rpc_meta";

mc_status mc_rpc_meta_decode(const char *json, size_t len, struct mc_rpc_meta *out)
{
	json_int_t port = 0;
	char *host = NULL;
	json_t *root;
	mc_status status;

	if (!out)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: NULL output", rpc_what);
	root = parse_object(rpc_what, json, len, &status);
	if (!root)
		return status;
	status =
		get_string(rpc_what, root, "ip_or_host_name", "ip_or_host_name", true, true, &host);
	if (status)
		goto out_decref;
	status = get_int(rpc_what, root, "rpc_port", "rpc_port", true, 0, UINT16_MAX, &port);
	if (status) {
		mc_free(host);
		goto out_decref;
	}
	out->ip_or_host_name = host;
	out->rpc_port = (uint16_t)port;

out_decref:
	json_decref(root);
	return status;
}

mc_status mc_rpc_meta_encode(const struct mc_rpc_meta *m, char **json_out)
{
	json_t *root;
	mc_status status;

	if (!m || !json_out || !m->ip_or_host_name || !*m->ip_or_host_name)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "%s: ip_or_host_name is empty",
				    rpc_what);
	root = json_object();
	if (!root)
		return mc_set_error(MC_ERR_NOMEM, "%s: out of memory", rpc_what);
	if (set_new(root, "ip_or_host_name", json_string(m->ip_or_host_name)) ||
	    set_new(root, "rpc_port", json_integer(m->rpc_port))) {
		status = mc_set_error(MC_ERR_INVALID_PARAMS,
				      "%s: ip_or_host_name is not valid UTF-8 (or out of memory)",
				      rpc_what);
		goto out_decref;
	}
	status = dump_compact(rpc_what, root, json_out);

out_decref:
	json_decref(root);
	return status;
}

void mc_rpc_meta_release(struct mc_rpc_meta *m)
{
	if (!m)
		return;
	mc_free(m->ip_or_host_name);
	m->ip_or_host_name = NULL;
	m->rpc_port = 0;
}

/* ---- keys and timestamps ------------------------------------------------- */

/* "mooncake/" or "mooncake/<cluster>/" followed by rest1 and rest2. */
static char *make_key(const char *rest1, const char *rest2)
{
	const char *cluster = mc_meta_cluster_id();
	const char *sep = "";

	if (!rest2)
		return NULL;
	if (!cluster)
		return mc_asprintf(KEY_PREFIX "%s%s", rest1, rest2);
	if (cluster[strlen(cluster) - 1] != '/')
		sep = "/";
	return mc_asprintf(KEY_PREFIX "%s%s%s%s", cluster, sep, rest1, rest2);
}

char *mc_meta_key_rpc(const char *name)
{
	return make_key("rpc_meta/", name);
}

char *mc_meta_key_segment(const char *name)
{
	if (name && strchr(name, '/'))
		return make_key("", name);
	return make_key("ram/", name);
}

void mc_seg_timestamp(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	if (!buf || !len)
		return;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (!localtime_r(&ts.tv_sec, &tm)) {
		buf[0] = '\0';
		return;
	}
	snprintf(buf, len, "%04d-%02d-%02d %02d:%02d:%02d.%06ld", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000);
}
