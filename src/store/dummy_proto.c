/*
 * store/dummy_proto.c - the codec of the frames between a dummy client and
 * its mooncake_client daemon (store/dummy_proto.h).
 *
 * Why its own codec and not rows in the master protocol's table: these
 * frames never reach a master, their shapes are few and flat, and keeping
 * them apart means a change here never moves the master protocol's version.
 * What it does reuse is that protocol's frame header and its integer
 * primitives (mc_buf_put_*, struct mc_reader), so one stream reader
 * (mc_proto_frame_peek) frames both.
 *
 * Which fields of struct mc_dummy_req a type carries is the table `shapes`
 * below; the writer and the reader both walk it, in the same order, so
 * they cannot drift apart.  What this file must never do: allocate before
 * checking a count against the bytes that remain, or accept a payload with
 * bytes left over.
 */
#include "store/dummy_proto.h"

#include <stdlib.h>
#include <string.h>

#include "base/compiler.h"
#include "base/log.h"

enum {
	F_FLAGS = 1u << 0,
	F_A = 1u << 1,
	F_B = 1u << 2,
	F_TEXT = 1u << 3,
	F_CONFIG = 1u << 4,
	F_KEYS = 1u << 5, /* items, keys only */
	F_BUFS = 1u << 6, /* items with buffers */
	F_STRS = 1u << 7, /* strings, empty ones allowed */
	F_NUMS = 1u << 8, /* u64 numbers */
};

static const struct {
	const char *name;
	unsigned fields;
} shapes[] = {
	[MC_DUMMY_MSG_HELLO - MC_DUMMY_MSG_FIRST] = {"Hello", F_TEXT | F_A},
	[MC_DUMMY_MSG_PING - MC_DUMMY_MSG_FIRST] = {"Ping", 0},
	[MC_DUMMY_MSG_MAP_REGION - MC_DUMMY_MSG_FIRST] = {"MapRegion", F_A | F_B},
	[MC_DUMMY_MSG_UNMAP_REGION - MC_DUMMY_MSG_FIRST] = {"UnmapRegion", F_A},
	[MC_DUMMY_MSG_PUT - MC_DUMMY_MSG_FIRST] = {"Put", F_FLAGS | F_CONFIG | F_BUFS},
	[MC_DUMMY_MSG_GET - MC_DUMMY_MSG_FIRST] = {"Get", F_BUFS},
	[MC_DUMMY_MSG_EXIST - MC_DUMMY_MSG_FIRST] = {"Exist", F_KEYS},
	[MC_DUMMY_MSG_GET_SIZE - MC_DUMMY_MSG_FIRST] = {"GetSize", F_KEYS},
	[MC_DUMMY_MSG_REMOVE - MC_DUMMY_MSG_FIRST] = {"Remove", F_FLAGS | F_KEYS},
	[MC_DUMMY_MSG_REMOVE_REGEX - MC_DUMMY_MSG_FIRST] = {"RemoveByRegex", F_FLAGS | F_TEXT},
	[MC_DUMMY_MSG_REMOVE_ALL - MC_DUMMY_MSG_FIRST] = {"RemoveAll", F_FLAGS},
	[MC_DUMMY_MSG_GET_SESSION_START - MC_DUMMY_MSG_FIRST] = {"GetSessionStart", F_KEYS},
	[MC_DUMMY_MSG_GET_RANGES - MC_DUMMY_MSG_FIRST] = {"GetRanges", F_NUMS | F_BUFS},
	[MC_DUMMY_MSG_GET_SESSION_END - MC_DUMMY_MSG_FIRST] = {"GetSessionEnd", F_KEYS},
	[MC_DUMMY_MSG_PUT_SESSION_START -
		MC_DUMMY_MSG_FIRST] = {"PutSessionStart", F_CONFIG | F_NUMS | F_KEYS},
	[MC_DUMMY_MSG_PUT_RANGES - MC_DUMMY_MSG_FIRST] = {"PutRanges", F_NUMS | F_BUFS},
	[MC_DUMMY_MSG_PUT_SESSION_END - MC_DUMMY_MSG_FIRST] = {"PutSessionEnd", F_KEYS},
	[MC_DUMMY_MSG_PUT_SESSION_REVOKE - MC_DUMMY_MSG_FIRST] = {"PutSessionRevoke", F_KEYS},
	[MC_DUMMY_MSG_GET_INTO_RANGES - MC_DUMMY_MSG_FIRST] = {"GetIntoRanges", F_NUMS | F_BUFS},
	[MC_DUMMY_MSG_REPLICA_DESC - MC_DUMMY_MSG_FIRST] = {"ReplicaDesc", F_KEYS},
	[MC_DUMMY_MSG_REPLICA_CLEAR - MC_DUMMY_MSG_FIRST] = {"ReplicaClear", F_TEXT | F_KEYS},
	[MC_DUMMY_MSG_COPY_TASK - MC_DUMMY_MSG_FIRST] = {"CopyTask", F_STRS},
	[MC_DUMMY_MSG_MOVE_TASK - MC_DUMMY_MSG_FIRST] = {"MoveTask", F_STRS},
	[MC_DUMMY_MSG_QUERY_TASK - MC_DUMMY_MSG_FIRST] = {"QueryTask", F_A | F_B},
	[MC_DUMMY_MSG_UNMOUNT_SEGMENT - MC_DUMMY_MSG_FIRST] = {"UnmountSegment", F_A | F_TEXT},
	[MC_DUMMY_MSG_MOUNT_SEGMENT - MC_DUMMY_MSG_FIRST] = {"MountSegment", F_A | F_B | F_STRS},
	[MC_DUMMY_MSG_ALLOC_MOUNT_SEGMENT -
		MC_DUMMY_MSG_FIRST] = {"AllocateAndMountSegment", F_A | F_STRS},
	[MC_DUMMY_MSG_UNMOUNT_FREE_SEGMENT -
		MC_DUMMY_MSG_FIRST] = {"UnmountAndFreeSegment", F_A | F_TEXT},
	[MC_DUMMY_MSG_UNMOUNT_LOCAL_DISK - MC_DUMMY_MSG_FIRST] = {"UnmountLocalDiskSegment", F_A},
};

bool mc_dummy_msg_known(uint16_t type)
{
	return type >= MC_DUMMY_MSG_FIRST && type <= MC_DUMMY_MSG_LAST;
}

const char *mc_dummy_msg_name(uint16_t type)
{
	return mc_dummy_msg_known(type) ? shapes[type - MC_DUMMY_MSG_FIRST].name : "unknown";
}

/* ---- writing ---- */

static void put_str(struct mc_buf *b, struct mc_proto_str s)
{
	mc_buf_put_u32(b, s.len);
	if (s.len)
		mc_buf_append(b, s.ptr, s.len);
}

static mc_status check_str(struct mc_proto_str s, uint32_t max, bool key)
{
	if (s.len && !s.ptr)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL string");
	if (key && (s.len == 0 || s.len > max))
		return mc_set_error(MC_ERR_INVALID_KEY, "dummy proto: key of %u bytes", s.len);
	if (s.len > max)
		return mc_set_error(MC_ERR_TOO_LARGE, "dummy proto: string of %u bytes", s.len);
	return MC_OK;
}

static mc_status put_strs(struct mc_buf *b, const struct mc_proto_str *v, uint32_t n)
{
	if (n && !v)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL list");
	mc_buf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		mc_status rc = check_str(v[i], MC_PROTO_STR_MAX, false);
		if (rc != MC_OK)
			return rc;
		put_str(b, v[i]);
	}
	return MC_OK;
}

static mc_status put_nums(struct mc_buf *b, const uint64_t *v, uint32_t n)
{
	if (n && !v)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL numbers");
	mc_buf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++)
		mc_buf_put_u64(b, v[i]);
	return MC_OK;
}

static mc_status put_config(struct mc_buf *b, const struct mc_dummy_config *c)
{
	mc_status rc = check_str(c->preferred_segment, MC_PROTO_STR_MAX, false);
	if (rc == MC_OK)
		rc = check_str(c->group_id, MC_PROTO_STR_MAX, false);
	if (rc != MC_OK)
		return rc;
	mc_buf_put_u32(b, c->replica_num);
	mc_buf_put_u8(b, c->with_soft_pin);
	mc_buf_put_u64(b, c->soft_pin_ttl_ms);
	mc_buf_put_u8(b, c->with_hard_pin);
	mc_buf_put_u8(b, c->prefer_alloc_in_same_node);
	put_str(b, c->preferred_segment);
	rc = put_strs(b, c->preferred_segments, c->n_preferred_segments);
	if (rc != MC_OK)
		return rc;
	put_str(b, c->group_id);
	return put_strs(b, c->group_ids, c->n_group_ids);
}

static mc_status put_items(struct mc_buf *b, const struct mc_dummy_req *r, bool bufs)
{
	if (r->n_items && !r->items)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL items");
	mc_buf_put_u32(b, r->n_items);
	for (uint32_t i = 0; i < r->n_items; i++) {
		const struct mc_dummy_item *it = &r->items[i];
		mc_status rc = check_str(it->key, MC_STORE_KEY_MAX, true);
		if (rc != MC_OK)
			return rc;
		put_str(b, it->key);
		if (!bufs)
			continue;
		if (it->nbufs && !it->bufs)
			return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL buffers");
		mc_buf_put_u32(b, it->nbufs);
		for (uint32_t j = 0; j < it->nbufs; j++) {
			mc_buf_put_u64(b, it->bufs[j].region);
			mc_buf_put_u64(b, it->bufs[j].offset);
			mc_buf_put_u64(b, it->bufs[j].len);
		}
	}
	return MC_OK;
}

static mc_status req_body(struct mc_buf *b, const struct mc_dummy_req *r)
{
	unsigned f = shapes[r->type - MC_DUMMY_MSG_FIRST].fields;
	mc_status rc = MC_OK;

	if (f & F_FLAGS)
		mc_buf_put_u8(b, r->flags);
	if (f & F_A)
		mc_buf_put_u64(b, r->a);
	if (f & F_B)
		mc_buf_put_u64(b, r->b);
	if (f & F_TEXT) {
		rc = check_str(r->text, MC_PROTO_STR_MAX, false);
		if (rc == MC_OK)
			put_str(b, r->text);
	}
	if (rc == MC_OK && (f & F_CONFIG))
		rc = put_config(b, &r->config);
	if (rc == MC_OK && (f & F_STRS))
		rc = put_strs(b, r->strs, r->n_strs);
	if (rc == MC_OK && (f & F_NUMS))
		rc = put_nums(b, r->nums, r->n_nums);
	if (rc == MC_OK && (f & (F_KEYS | F_BUFS)))
		rc = put_items(b, r, f & F_BUFS);
	return rc;
}

/* Header, then body(b, ctx); fills in payload_len, or restores b. */
static mc_status frame(struct mc_buf *b, uint16_t type, uint16_t flags, int32_t status,
		       uint64_t req_id, mc_status (*body)(struct mc_buf *, const void *),
		       const void *ctx)
{
	size_t start = b->len;
	struct mc_proto_hdr h = {.major = MC_STORE_PROTO_MAJOR,
				 .minor = MC_STORE_PROTO_MINOR,
				 .type = type,
				 .flags = flags,
				 .status = status,
				 .req_id = req_id};
	uint8_t hdr[MC_PROTO_HDR_LEN];
	mc_status rc;
	size_t plen;

	mc_buf_append(b, hdr, sizeof(hdr)); /* placeholder */
	rc = body(b, ctx);
	if (rc == MC_OK && b->err)
		rc = mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
	plen = b->len - start - MC_PROTO_HDR_LEN;
	if (rc == MC_OK && plen > MC_DUMMY_MAX_PAYLOAD)
		rc = mc_set_error(MC_ERR_TOO_LARGE, "dummy proto: %zu-byte payload", plen);
	if (rc != MC_OK) {
		b->len = start;
		b->err = MC_OK;
		return rc;
	}
	h.payload_len = (uint32_t)plen;
	mc_proto_hdr_encode(&h, hdr);
	memcpy(b->data + start, hdr, sizeof(hdr));
	return MC_OK;
}

static mc_status req_body_cb(struct mc_buf *b, const void *ctx)
{
	return req_body(b, ctx);
}

mc_status mc_dummy_req_encode(struct mc_buf *b, uint64_t req_id, const struct mc_dummy_req *req)
{
	if (!mc_dummy_msg_known(req->type))
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: unknown type %u",
				    req->type);
	return frame(b, req->type, 0, 0, req_id, req_body_cb, req);
}

static mc_status resp_body_cb(struct mc_buf *b, const void *ctx)
{
	const struct mc_dummy_resp *r = ctx;
	mc_status rc;
	if (r->n_results && !r->results)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "dummy proto: NULL results");
	mc_buf_put_u32(b, r->n_results);
	for (uint32_t i = 0; i < r->n_results; i++)
		mc_buf_put_u64(b, (uint64_t)r->results[i]);
	rc = check_str(r->text, MC_PROTO_STR_MAX, false);
	if (rc == MC_OK)
		put_str(b, r->text);
	if (rc == MC_OK)
		rc = put_strs(b, r->strs, r->n_strs);
	return rc;
}

mc_status mc_dummy_resp_encode(struct mc_buf *b, uint16_t type, uint64_t req_id, mc_status status,
			       const struct mc_dummy_resp *resp)
{
	struct mc_dummy_resp none = {0};
	return frame(b, type, MC_PROTO_F_RESPONSE, status, req_id, resp_body_cb,
		     resp ? resp : &none);
}

/* ---- reading ---- */

static mc_status get_str(struct mc_reader *r, uint32_t max, bool key, struct mc_proto_str *out)
{
	uint32_t n;
	const uint8_t *p;
	char *s;
	mc_status rc = mc_reader_u32(r, &n);

	if (rc != MC_OK)
		return rc;
	if (n > max || (key && n == 0))
		return mc_set_error(MC_ERR_PROTOCOL, "dummy proto: %s of %u bytes at offset %zu",
				    key ? "key" : "string", n, r->pos);
	rc = mc_reader_bytes(r, n, &p);
	if (rc != MC_OK)
		return rc;
	s = malloc((size_t)n + 1);
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
	memcpy(s, p, n);
	s[n] = 0;
	r->alloc_bytes += (size_t)n + 1;
	out->ptr = s;
	out->len = n;
	return MC_OK;
}

static mc_status get_bool(struct mc_reader *r, bool *out)
{
	uint8_t v;
	mc_status rc = mc_reader_u8(r, &v);
	if (rc != MC_OK)
		return rc;
	if (v > 1)
		return mc_set_error(MC_ERR_PROTOCOL, "dummy proto: boolean %u at offset %zu", v,
				    r->pos - 1);
	*out = v;
	return MC_OK;
}

static mc_status get_strs(struct mc_reader *r, uint32_t *n_out, struct mc_proto_str **out)
{
	uint32_t n;
	mc_status rc = mc_reader_count(r, 4, &n);
	if (rc != MC_OK || n == 0)
		return rc;
	*out = calloc(n, sizeof(**out));
	if (!*out)
		return mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
	r->alloc_bytes += (size_t)n * sizeof(**out);
	*n_out = n;
	for (uint32_t i = 0; i < n; i++)
		if ((rc = get_str(r, MC_PROTO_STR_MAX, false, &(*out)[i])) != MC_OK)
			return rc;
	return MC_OK;
}

static mc_status get_nums(struct mc_reader *r, uint32_t *n_out, uint64_t **out)
{
	uint32_t n;
	mc_status rc = mc_reader_count(r, 8, &n);
	if (rc != MC_OK || n == 0)
		return rc;
	*out = calloc(n, sizeof(**out));
	if (!*out)
		return mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
	r->alloc_bytes += (size_t)n * sizeof(**out);
	*n_out = n;
	for (uint32_t i = 0; i < n && rc == MC_OK; i++)
		rc = mc_reader_u64(r, &(*out)[i]);
	return rc;
}

static mc_status get_config(struct mc_reader *r, struct mc_dummy_config *c)
{
	mc_status rc = mc_reader_u32(r, &c->replica_num);
	if (rc == MC_OK)
		rc = get_bool(r, &c->with_soft_pin);
	if (rc == MC_OK)
		rc = mc_reader_u64(r, &c->soft_pin_ttl_ms);
	if (rc == MC_OK)
		rc = get_bool(r, &c->with_hard_pin);
	if (rc == MC_OK)
		rc = get_bool(r, &c->prefer_alloc_in_same_node);
	if (rc == MC_OK)
		rc = get_str(r, MC_PROTO_STR_MAX, false, &c->preferred_segment);
	if (rc == MC_OK)
		rc = get_strs(r, &c->n_preferred_segments, &c->preferred_segments);
	if (rc == MC_OK)
		rc = get_str(r, MC_PROTO_STR_MAX, false, &c->group_id);
	if (rc == MC_OK)
		rc = get_strs(r, &c->n_group_ids, &c->group_ids);
	return rc;
}

static mc_status get_items(struct mc_reader *r, bool bufs, struct mc_dummy_req *q)
{
	uint32_t n;
	mc_status rc = mc_reader_count(r, bufs ? 9 : 5, &n);
	if (rc != MC_OK || n == 0)
		return rc;
	q->items = calloc(n, sizeof(*q->items));
	if (!q->items)
		return mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
	r->alloc_bytes += (size_t)n * sizeof(*q->items);
	q->n_items = n;
	for (uint32_t i = 0; i < n; i++) {
		struct mc_dummy_item *it = &q->items[i];
		uint32_t nb;
		if ((rc = get_str(r, MC_STORE_KEY_MAX, true, &it->key)) != MC_OK)
			return rc;
		if (!bufs)
			continue;
		if ((rc = mc_reader_count(r, 24, &nb)) != MC_OK)
			return rc;
		if (nb == 0)
			continue;
		it->bufs = calloc(nb, sizeof(*it->bufs));
		if (!it->bufs)
			return mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
		r->alloc_bytes += (size_t)nb * sizeof(*it->bufs);
		it->nbufs = nb;
		for (uint32_t j = 0; j < nb && rc == MC_OK; j++) {
			rc = mc_reader_u64(r, &it->bufs[j].region);
			if (rc == MC_OK)
				rc = mc_reader_u64(r, &it->bufs[j].offset);
			if (rc == MC_OK)
				rc = mc_reader_u64(r, &it->bufs[j].len);
		}
		if (rc != MC_OK)
			return rc;
	}
	return MC_OK;
}

static mc_status check_end(const struct mc_reader *r)
{
	if (r->left)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "dummy proto: %zu bytes left over at offset %zu", r->left,
				    r->pos);
	return MC_OK;
}

mc_status mc_dummy_req_decode(uint16_t type, const void *payload, size_t len,
			      struct mc_dummy_req *out)
{
	struct mc_reader r;
	unsigned f;
	mc_status rc = MC_OK;

	memset(out, 0, sizeof(*out));
	out->type = type;
	if (!mc_dummy_msg_known(type))
		return mc_set_error(MC_ERR_PROTOCOL, "dummy proto: unknown request type %u", type);
	f = shapes[type - MC_DUMMY_MSG_FIRST].fields;
	mc_reader_init(&r, payload, len);
	if (f & F_FLAGS)
		rc = mc_reader_u8(&r, &out->flags);
	if (rc == MC_OK && (f & F_A))
		rc = mc_reader_u64(&r, &out->a);
	if (rc == MC_OK && (f & F_B))
		rc = mc_reader_u64(&r, &out->b);
	if (rc == MC_OK && (f & F_TEXT))
		rc = get_str(&r, MC_PROTO_STR_MAX, false, &out->text);
	if (rc == MC_OK && (f & F_CONFIG))
		rc = get_config(&r, &out->config);
	if (rc == MC_OK && (f & F_STRS))
		rc = get_strs(&r, &out->n_strs, &out->strs);
	if (rc == MC_OK && (f & F_NUMS))
		rc = get_nums(&r, &out->n_nums, &out->nums);
	if (rc == MC_OK && (f & (F_KEYS | F_BUFS)))
		rc = get_items(&r, f & F_BUFS, out);
	if (rc == MC_OK)
		rc = check_end(&r);
	if (rc != MC_OK)
		mc_dummy_req_release(out);
	return rc;
}

static void free_strs(struct mc_proto_str *v, uint32_t n)
{
	if (!v)
		return;
	for (uint32_t i = 0; i < n; i++)
		free((void *)v[i].ptr);
	free(v);
}

void mc_dummy_req_release(struct mc_dummy_req *q)
{
	uint16_t type = q->type;
	free((void *)q->text.ptr);
	free((void *)q->config.preferred_segment.ptr);
	free_strs(q->config.preferred_segments, q->config.n_preferred_segments);
	free((void *)q->config.group_id.ptr);
	free_strs(q->config.group_ids, q->config.n_group_ids);
	free_strs(q->strs, q->n_strs);
	free(q->nums);
	if (q->items) {
		for (uint32_t i = 0; i < q->n_items; i++) {
			free((void *)q->items[i].key.ptr);
			free(q->items[i].bufs);
		}
		free(q->items);
	}
	memset(q, 0, sizeof(*q));
	q->type = type;
}

mc_status mc_dummy_resp_decode(const void *payload, size_t len, struct mc_dummy_resp *out)
{
	struct mc_reader r;
	uint32_t n;
	mc_status rc;

	memset(out, 0, sizeof(*out));
	mc_reader_init(&r, payload, len);
	rc = mc_reader_count(&r, 8, &n);
	if (rc == MC_OK && n) {
		out->results = calloc(n, sizeof(*out->results));
		if (!out->results)
			rc = mc_set_error(MC_ERR_NOMEM, "dummy proto: out of memory");
		else
			out->n_results = n;
		for (uint32_t i = 0; i < n && rc == MC_OK; i++) {
			uint64_t v;
			rc = mc_reader_u64(&r, &v);
			out->results[i] = (int64_t)v;
		}
	}
	if (rc == MC_OK)
		rc = get_str(&r, MC_PROTO_STR_MAX, false, &out->text);
	if (rc == MC_OK)
		rc = get_strs(&r, &out->n_strs, &out->strs);
	if (rc == MC_OK)
		rc = check_end(&r);
	if (rc != MC_OK)
		mc_dummy_resp_release(out);
	return rc;
}

void mc_dummy_resp_release(struct mc_dummy_resp *resp)
{
	free(resp->results);
	free((void *)resp->text.ptr);
	free_strs(resp->strs, resp->n_strs);
	memset(resp, 0, sizeof(*resp));
}
