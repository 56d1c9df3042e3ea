/*
 * store/proto.c - encoder and decoder of the store client <-> master
 * protocol (docs/protocol.md, "Store client <-> master protocol").
 *
 * Design: each payload struct of proto.h is described once, by a table of
 * fields (kind, offset in the struct, and for nested structs and lists the
 * table of the inner struct).  Four walkers interpret the tables: write
 * (encode), read (decode), free (release what read allocated) and equal
 * (compare, for tests and the fuzz target).  A message type names one
 * table per direction.  Adding a message means adding a struct, a table
 * and a row in MC_STORE_MSG_MAP; the walkers do not change, and the
 * encoder and decoder of a field cannot disagree because they read the
 * same row.  The field macros check with _Generic that a row's kind
 * matches the C type of the member it points at, so a table that lies
 * about a struct does not compile.
 *
 * A FK_SWITCH row makes the fields that follow depend on an integer field
 * read before it: replicas carry different fields per replica type, and
 * batch items carry a body only when their status is MC_OK.  The cases
 * are field lists over the same struct.
 *
 * Invariants of the decoder (checked by tests/unit/test_proto_decode.c and
 * tests/fuzz/fuzz_store_proto.c):
 *   - it never reads outside the bytes it was given (every read goes
 *     through struct mc_reader, which checks what is left);
 *   - a list count is checked against the remaining bytes, using the
 *     smallest wire size of one item, before the list is allocated, so
 *     what it allocates is bounded by a small multiple of the input size.
 *     The multiple is the largest ratio of an item's C size to its
 *     smallest wire size: 20 for a BatchGetReplicaList item (80 bytes,
 *     with the minor-10 and minor-15 tails' fields, from a 4-byte failed
 *     status), about 6 for a replica (136 from 22) or a BatchPutEnd item
 *     (32 from 5), at most 1 for strings.  A successful decode consumed
 *     every item, so it allocates at most ~20 bytes per input byte; a
 *     failed one may hold the speculative allocation of each enclosing
 *     list at once, at most the sum along the deepest nesting, ~27 (the
 *     fuzz target checks 21 and 28, plus a constant);
 *   - on failure everything it allocated is freed and the output struct
 *     is zero again;
 *   - what it accepts is canonical: encoding the result gives back the
 *     same bytes.
 * Empty decoded strings point at a static "" and are not freed; a decoded
 * string of non-zero length is always a heap copy.
 */
#define MC_LOG_MODULE "store"
#include "store/proto.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/compiler.h"
#include "base/endian.h"
#include "base/log.h"

/* ------------------------------------------------------------------------ */
/* Little-endian writers over struct mc_buf                                  */

void mc_buf_put_u8(struct mc_buf *b, uint8_t v)
{
	if (mc_buf_reserve(b, 1) == MC_OK)
		b->data[b->len++] = v;
}

void mc_buf_put_u16(struct mc_buf *b, uint16_t v)
{
	if (mc_buf_reserve(b, 2) == MC_OK) {
		mc_put_le16(b->data + b->len, v);
		b->len += 2;
	}
}

void mc_buf_put_u32(struct mc_buf *b, uint32_t v)
{
	if (mc_buf_reserve(b, 4) == MC_OK) {
		mc_put_le32(b->data + b->len, v);
		b->len += 4;
	}
}

void mc_buf_put_u64(struct mc_buf *b, uint64_t v)
{
	if (mc_buf_reserve(b, 8) == MC_OK) {
		mc_put_le64(b->data + b->len, v);
		b->len += 8;
	}
}

/* ------------------------------------------------------------------------ */
/* struct mc_reader                                                          */

void mc_reader_init(struct mc_reader *r, const void *data, size_t len)
{
	r->p = data;
	r->left = data ? len : 0;
	r->pos = 0;
	r->alloc_bytes = 0;
}

/* MC_OK when n more bytes are there; the only place a short input is detected. */
static mc_status need(const struct mc_reader *r, size_t n)
{
	if (n > r->left)
		return mc_set_error(
			MC_ERR_PROTOCOL,
			"store proto: truncated at offset %zu (%zu bytes needed, %zu left)", r->pos,
			n, r->left);
	return MC_OK;
}

static const uint8_t *take(struct mc_reader *r, size_t n)
{
	const uint8_t *p = r->p;
	r->p += n;
	r->left -= n;
	r->pos += n;
	return p;
}

mc_status mc_reader_bytes(struct mc_reader *r, size_t n, const uint8_t **out)
{
	mc_status rc = need(r, n);
	if (rc == MC_OK)
		*out = take(r, n);
	return rc;
}

mc_status mc_reader_u8(struct mc_reader *r, uint8_t *out)
{
	mc_status rc = need(r, 1);
	if (rc == MC_OK)
		*out = *take(r, 1);
	return rc;
}

mc_status mc_reader_u16(struct mc_reader *r, uint16_t *out)
{
	mc_status rc = need(r, 2);
	if (rc == MC_OK)
		*out = mc_get_le16(take(r, 2));
	return rc;
}

mc_status mc_reader_u32(struct mc_reader *r, uint32_t *out)
{
	mc_status rc = need(r, 4);
	if (rc == MC_OK)
		*out = mc_get_le32(take(r, 4));
	return rc;
}

mc_status mc_reader_u64(struct mc_reader *r, uint64_t *out)
{
	mc_status rc = need(r, 8);
	if (rc == MC_OK)
		*out = mc_get_le64(take(r, 8));
	return rc;
}

mc_status mc_reader_count(struct mc_reader *r, size_t min_item, uint32_t *out)
{
	size_t at = r->pos;
	uint32_t n;
	mc_status rc = mc_reader_u32(r, &n);

	if (rc != MC_OK)
		return rc;
	if (min_item == 0)
		min_item = 1;
	if (n > r->left / min_item)
		return mc_set_error(
			MC_ERR_PROTOCOL,
			"store proto: count %u at offset %zu needs at least %zu bytes, %zu left", n,
			at, (size_t)n * min_item, r->left);
	*out = n;
	return MC_OK;
}

/* ------------------------------------------------------------------------ */
/* Frame header                                                              */

void mc_proto_hdr_encode(const struct mc_proto_hdr *h, uint8_t out[MC_PROTO_HDR_LEN])
{
	memset(out, 0, MC_PROTO_HDR_LEN);
	mc_put_le32(out, MC_PROTO_MAGIC);
	out[4] = h->major;
	out[5] = h->minor;
	mc_put_le16(out + 6, h->type);
	mc_put_le16(out + 8, h->flags);
	mc_put_le32(out + 12, (uint32_t)h->status);
	mc_put_le64(out + 16, h->req_id);
	mc_put_le32(out + 24, h->payload_len);
	mc_put_le32(out + MC_PROTO_HDR_VIEW_OFF, h->view);
}

mc_status mc_proto_hdr_decode(const uint8_t in[MC_PROTO_HDR_LEN], uint32_t max_payload,
			      struct mc_proto_hdr *out)
{
	uint32_t magic = mc_get_le32(in);

	if (magic != MC_PROTO_MAGIC)
		return mc_set_error(MC_ERR_PROTOCOL, "store proto: bad magic 0x%08x", magic);
	out->major = in[4];
	out->minor = in[5];
	out->type = mc_get_le16(in + 6);
	out->flags = mc_get_le16(in + 8);
	out->status = (int32_t)mc_get_le32(in + 12);
	out->req_id = mc_get_le64(in + 16);
	out->view = mc_get_le32(in + MC_PROTO_HDR_VIEW_OFF);
	out->payload_len = mc_get_le32(in + 24);
	if (out->major != MC_STORE_PROTO_MAJOR)
		return mc_set_error(MC_ERR_INVALID_VERSION,
				    "store proto: peer speaks protocol %u.%u, we speak %u.%u",
				    out->major, out->minor, MC_STORE_PROTO_MAJOR,
				    MC_STORE_PROTO_MINOR);
	if (out->payload_len > max_payload)
		return mc_set_error(
			MC_ERR_TOO_LARGE,
			"store proto: payload of %u bytes over the limit of %u (request %llu)",
			out->payload_len, max_payload, (unsigned long long)out->req_id);
	return MC_OK;
}

mc_status mc_proto_frame_peek(const void *buf, size_t len, uint32_t max_payload,
			      struct mc_proto_hdr *hdr_out, size_t *frame_len_out)
{
	uint8_t magic[4];
	mc_status rc;

	mc_put_le32(magic, MC_PROTO_MAGIC);
	if (len < MC_PROTO_HDR_LEN) {
		if (memcmp(buf, magic, MC_MIN(len, sizeof(magic))) != 0)
			return mc_set_error(MC_ERR_PROTOCOL, "store proto: bad magic");
		return MC_INPROGRESS;
	}
	rc = mc_proto_hdr_decode(buf, max_payload, hdr_out);
	if (rc != MC_OK)
		return rc;
	*frame_len_out = MC_PROTO_HDR_LEN + (size_t)hdr_out->payload_len;
	return len >= *frame_len_out ? MC_OK : MC_INPROGRESS;
}

/* ------------------------------------------------------------------------ */
/* Field tables                                                              */

enum fkind {
	FK_U8 = 1,
	FK_BOOL,      /* bool; one byte, 0 or 1 */
	FK_U32,	      /* uint32_t */
	FK_I32,	      /* int32_t */
	FK_U64,	      /* uint64_t */
	FK_I64,	      /* int64_t */
	FK_UUID,      /* struct mc_store_uuid: first, second */
	FK_STR,	      /* struct mc_proto_str, at most MC_PROTO_STR_MAX bytes */
	FK_KEY,	      /* struct mc_proto_str, at most MC_STORE_KEY_MAX bytes */
	FK_OPT_U64,   /* struct mc_proto_opt_u64: presence byte, then u64 if present */
	FK_TAIL_U64,  /* struct mc_proto_opt_u64 appended in a later minor version, last fields of
		       * a payload only: absent is nothing on the wire (the older payload),
		       * or the byte 0 when a later tail is present; present is the
		       * presence byte 1 and the u64 */
	FK_TAIL_LIST, /* a list appended in a later minor version, last fields of a payload
		       * only: empty is nothing on the wire, else as FK_LIST (count >= 1) */
	FK_STRUCT,    /* nested struct described by sub */
	FK_LIST,      /* u32 count (member at cnt_off) + items of sub (array at off) */
	FK_SWITCH,    /* fields chosen by an integer read earlier */
};

struct layout;

struct sw_case {
	int64_t value;
	const struct layout *fields; /* over the same struct */
};

struct sw {
	uint32_t tag_off;	     /* offset of the tag member */
	uint8_t tag_kind;	     /* FK_U8 or FK_I32 */
	const struct sw_case *cases; /* tag value -> fields */
	size_t n_cases;
	const struct layout *dflt; /* fields for any other value; NULL: invalid */
};

struct field {
	uint8_t kind;
	uint32_t off;
	uint32_t cnt_off;
	const struct layout *sub;
	const struct sw *sw;
	const char *name;
};

struct layout {
	const char *name;
	size_t size; /* sizeof the struct (list item stride) */
	const struct field *f;
	size_t n;
};

/* offsetof(T, m), failing to compile unless member m has type 'type'. */
/* NOLINTNEXTLINE(bugprone-macro-parentheses): T and type are type names */
#define TYPED(T, m, type) (offsetof(T, m) + _Generic(((T *)0)->m, type : 0))

#define FIELD(K, T, m, type)                                      \
	{                                                         \
		.kind = (K), .off = TYPED(T, m, type), .name = #m \
	}
#define F_U8(T, m)   FIELD(FK_U8, T, m, uint8_t)
#define F_BOOL(T, m) FIELD(FK_BOOL, T, m, bool)
#define F_U32(T, m)  FIELD(FK_U32, T, m, uint32_t)
#define F_I32(T, m)  FIELD(FK_I32, T, m, int32_t)
#define F_U64(T, m)  FIELD(FK_U64, T, m, uint64_t)
#define F_I64(T, m)  FIELD(FK_I64, T, m, int64_t)
#define F_UUID(T, m) FIELD(FK_UUID, T, m, struct mc_store_uuid)
#define F_STR(T, m)  FIELD(FK_STR, T, m, struct mc_proto_str)
#define F_KEY(T, m)  FIELD(FK_KEY, T, m, struct mc_proto_str)
#define F_OPT(T, m)  FIELD(FK_OPT_U64, T, m, struct mc_proto_opt_u64)
#define F_TAIL(T, m) FIELD(FK_TAIL_U64, T, m, struct mc_proto_opt_u64)
/* NOLINTBEGIN(bugprone-macro-parentheses): ET is a type name */
#define F_TAIL_LIST(T, m, n, ET, SUB)                                                             \
	{                                                                                         \
		.kind = FK_TAIL_LIST, .off = TYPED(T, m, ET *), .cnt_off = TYPED(T, n, uint32_t), \
		.sub = &(SUB), .name = #m                                                         \
	}
/* NOLINTEND(bugprone-macro-parentheses) */
#define F_STRUCT(T, m, ST, SUB)                                                             \
	{                                                                                   \
		.kind = FK_STRUCT, .off = TYPED(T, m, struct ST), .sub = &(SUB), .name = #m \
	}
/* NOLINTBEGIN(bugprone-macro-parentheses): ET is a type name */
#define F_LIST(T, m, n, ET, SUB)                                                             \
	{                                                                                    \
		.kind = FK_LIST, .off = TYPED(T, m, ET *), .cnt_off = TYPED(T, n, uint32_t), \
		.sub = &(SUB), .name = #m                                                    \
	}
/* NOLINTEND(bugprone-macro-parentheses) */
#define F_SWITCH(T, tag, SW)                                                          \
	{                                                                             \
		.kind = FK_SWITCH, .off = offsetof(T, tag), .sw = &(SW), .name = #tag \
	}

#define LAYOUT(L, T, ...)                                       \
	static const struct field L##_fields[] = {__VA_ARGS__}; \
	static const struct layout L = {&(#L)[2], sizeof(T), L##_fields, MC_ARRAY_SIZE(L##_fields)}

/* No fields: void results, and batch items whose status is not MC_OK. */
static const struct layout L_nothing = {"nothing", 0, NULL, 0};
static const struct layout L_empty = {"mc_store_empty", sizeof(struct mc_store_empty), NULL, 0};

/* List items that are bare values. */
static const struct field L_key_item_fields[] = {{.kind = FK_KEY, .off = 0, .name = "key"}};
static const struct layout L_key_item = {"key", sizeof(struct mc_proto_str), L_key_item_fields, 1};
static const struct field L_str_item_fields[] = {{.kind = FK_STR, .off = 0, .name = "name"}};
static const struct layout L_str_item = {"name", sizeof(struct mc_proto_str), L_str_item_fields, 1};
static const struct field L_status_item_fields[] = {{.kind = FK_I32, .off = 0, .name = "status"}};
static const struct layout L_status_item = {"status", sizeof(int32_t), L_status_item_fields, 1};
static const struct field L_u64_item_fields[] = {{.kind = FK_U64, .off = 0, .name = "sum"}};
static const struct layout L_u64_item = {"sum", sizeof(uint64_t), L_u64_item_fields, 1};
LAYOUT(L_chunk_sums, struct mc_store_chunk_sums,
       F_LIST(struct mc_store_chunk_sums, v, n, uint64_t, L_u64_item));
static const struct field L_opt_item_fields[] = {{.kind = FK_OPT_U64, .off = 0, .name = "sum"}};
static const struct layout L_opt_item = {"table", sizeof(struct mc_proto_opt_u64),
					 L_opt_item_fields, 1};

LAYOUT(L_segment, struct mc_store_segment, F_UUID(struct mc_store_segment, id),
       F_STR(struct mc_store_segment, name), F_U64(struct mc_store_segment, base),
       F_U64(struct mc_store_segment, size), F_STR(struct mc_store_segment, te_endpoint),
       F_STR(struct mc_store_segment, protocol), F_STR(struct mc_store_segment, host_id));

#define RC struct mc_store_replicate_config
LAYOUT(L_replicate_config, RC, F_U32(RC, replica_num), F_U32(RC, nof_replica_num),
       F_U32(RC, dfs_replica_num), F_U8(RC, soft_pin_action), F_OPT(RC, soft_pin_ttl_ms),
       F_BOOL(RC, with_hard_pin), F_BOOL(RC, prefer_alloc_in_same_node), F_U8(RC, data_type),
       F_STR(RC, preferred_segment),
       F_LIST(RC, preferred_segments, n_preferred_segments, struct mc_proto_str, L_str_item),
       F_LIST(RC, preferred_nof_segments, n_preferred_nof_segments, struct mc_proto_str,
	      L_str_item),
       F_STR(RC, host_id));
#undef RC

/* Replicas: common fields, then the fields of the replica's type. */
#define R struct mc_store_replica
LAYOUT(L_replica_buffer, R, F_U64(R, address), F_STR(R, segment_name), F_STR(R, transport_endpoint),
       F_STR(R, protocol));
LAYOUT(L_replica_disk, R, F_STR(R, file_path));
LAYOUT(L_replica_local_disk, R, F_UUID(R, client_id), F_STR(R, transport_endpoint));
LAYOUT(L_replica_dfs, R, F_STR(R, file_path), F_U64(R, offset), F_U64(R, aligned_size),
       F_U32(R, shard_idx));
static const struct sw_case replica_cases[] = {
	{MC_STORE_REPLICA_MEMORY, &L_replica_buffer},
	{MC_STORE_REPLICA_DISK, &L_replica_disk},
	{MC_STORE_REPLICA_LOCAL_DISK, &L_replica_local_disk},
	{MC_STORE_REPLICA_NOF_SSD, &L_replica_buffer},
	{MC_STORE_REPLICA_DFS, &L_replica_dfs},
};
static const struct sw replica_sw = {offsetof(R, type), FK_U8, replica_cases,
				     MC_ARRAY_SIZE(replica_cases), NULL};
LAYOUT(L_replica, R, F_U64(R, id), F_U8(R, status), F_U8(R, type), F_U64(R, size),
       F_SWITCH(R, type, replica_sw));
#undef R

#define TA struct mc_store_task_assignment
LAYOUT(L_task_assignment, TA, F_UUID(TA, id), F_U8(TA, type), F_STR(TA, payload),
       F_U64(TA, created_at_ms), F_U32(TA, max_retry_attempts),
       F_STRUCT(TA, source, mc_store_replica, L_replica),
       F_LIST(TA, targets, n_targets, struct mc_store_replica, L_replica));
#undef TA
LAYOUT(L_fetch_tasks_resp, struct mc_store_fetch_tasks_resp,
       F_LIST(struct mc_store_fetch_tasks_resp, tasks, n_tasks, struct mc_store_task_assignment,
	      L_task_assignment));

/* Batch items: a status (first member), then the item's body only when it is MC_OK. */
MC_STATIC_ASSERT(offsetof(struct mc_store_exist_item, status) == 0, "status first");
MC_STATIC_ASSERT(offsetof(struct mc_store_replica_list_item, status) == 0, "status first");
MC_STATIC_ASSERT(offsetof(struct mc_store_put_start_item, status) == 0, "status first");
#define STATUS_SWITCH(name, ok_layout)                                        \
	static const struct sw_case name##_cases[] = {{MC_OK, &(ok_layout)}}; \
	static const struct sw name = {0, FK_I32, name##_cases, 1, &L_nothing}

LAYOUT(L_hello, struct mc_store_hello, F_STR(struct mc_store_hello, version));
LAYOUT(L_fsdir_resp, struct mc_store_fsdir_resp, F_STR(struct mc_store_fsdir_resp, fsdir));
LAYOUT(L_client_req, struct mc_store_client_req, F_UUID(struct mc_store_client_req, client_id));
LAYOUT(L_unreachable_req, struct mc_store_unreachable_req,
       F_UUID(struct mc_store_unreachable_req, client_id),
       F_LIST(struct mc_store_unreachable_req, segments, n_segments, struct mc_proto_str,
	      L_str_item));
LAYOUT(L_corrupt_item, struct mc_store_corrupt_item, F_KEY(struct mc_store_corrupt_item, key),
       F_U64(struct mc_store_corrupt_item, replica_id));
LAYOUT(L_corrupt_req, struct mc_store_corrupt_req, F_UUID(struct mc_store_corrupt_req, client_id),
       F_STR(struct mc_store_corrupt_req, tenant),
       F_LIST(struct mc_store_corrupt_req, items, n_items, struct mc_store_corrupt_item,
	      L_corrupt_item));
#define CTR struct mc_store_copy_task_req
LAYOUT(L_copy_task_req, CTR, F_STR(CTR, tenant), F_KEY(CTR, key),
       F_LIST(CTR, targets, n_targets, struct mc_proto_str, L_str_item));
#undef CTR
#define CRR struct mc_store_change_replica_req
LAYOUT(L_change_replica_req, CRR, F_STR(CRR, tenant), F_KEY(CRR, key), F_U32(CRR, replica_num));
#undef CRR
#define MTR struct mc_store_move_task_req
LAYOUT(L_move_task_req, MTR, F_STR(MTR, tenant), F_KEY(MTR, key), F_STR(MTR, source),
       F_STR(MTR, target));
#undef MTR
LAYOUT(L_task_id, struct mc_store_task_id, F_UUID(struct mc_store_task_id, id));
#define TI struct mc_store_task_info
LAYOUT(L_task_info, TI, F_UUID(TI, id), F_U8(TI, type), F_U8(TI, status), F_U64(TI, created_at_ms),
       F_U64(TI, updated_at_ms), F_UUID(TI, assigned_client), F_STR(TI, message));
#undef TI
LAYOUT(L_fetch_tasks_req, struct mc_store_fetch_tasks_req,
       F_UUID(struct mc_store_fetch_tasks_req, client_id),
       F_U32(struct mc_store_fetch_tasks_req, batch));
#define TD struct mc_store_task_done_req
LAYOUT(L_task_done_req, TD, F_UUID(TD, client_id), F_UUID(TD, task_id), F_I32(TD, status),
       F_STR(TD, message));
#undef TD
#define HS struct mc_store_hspoil
LAYOUT(L_hspoil, HS, F_U64(HS, id), F_U64(HS, address), F_U64(HS, size));
#undef HS
LAYOUT(L_ping_resp, struct mc_store_ping_resp, F_I64(struct mc_store_ping_resp, view_version),
       F_U8(struct mc_store_ping_resp, client_status),
       F_TAIL(struct mc_store_ping_resp, client_ttl_ms),
       F_TAIL(struct mc_store_ping_resp, remount_wait_ms),
       F_TAIL_LIST(struct mc_store_ping_resp, spoil, n_spoil, struct mc_store_hspoil, L_hspoil),
       F_TAIL(struct mc_store_ping_resp, spoil_ms));
LAYOUT(L_mount_req, struct mc_store_mount_req, F_UUID(struct mc_store_mount_req, client_id),
       F_STRUCT(struct mc_store_mount_req, segment, mc_store_segment, L_segment));
LAYOUT(L_remount_req, struct mc_store_remount_req, F_UUID(struct mc_store_remount_req, client_id),
       F_LIST(struct mc_store_remount_req, segments, n_segments, struct mc_store_segment,
	      L_segment));
LAYOUT(L_unmount_req, struct mc_store_unmount_req, F_UUID(struct mc_store_unmount_req, client_id),
       F_UUID(struct mc_store_unmount_req, segment_id));
LAYOUT(L_graceful_unmount_req, struct mc_store_graceful_unmount_req,
       F_UUID(struct mc_store_graceful_unmount_req, client_id),
       F_UUID(struct mc_store_graceful_unmount_req, segment_id),
       F_U64(struct mc_store_graceful_unmount_req, grace_period_ms));

LAYOUT(L_key_req, struct mc_store_key_req, F_STR(struct mc_store_key_req, tenant),
       F_KEY(struct mc_store_key_req, key));
LAYOUT(L_keys_req, struct mc_store_keys_req, F_STR(struct mc_store_keys_req, tenant),
       F_LIST(struct mc_store_keys_req, keys, n_keys, struct mc_proto_str, L_key_item),
       F_TAIL(struct mc_store_keys_req, want));
LAYOUT(L_regex_req, struct mc_store_regex_req, F_STR(struct mc_store_regex_req, tenant),
       F_STR(struct mc_store_regex_req, pattern));

LAYOUT(L_exist_resp, struct mc_store_exist_resp, F_BOOL(struct mc_store_exist_resp, exists));
LAYOUT(L_exist_ok, struct mc_store_exist_item, F_BOOL(struct mc_store_exist_item, exists));
STATUS_SWITCH(exist_item_sw, L_exist_ok);
LAYOUT(L_exist_item, struct mc_store_exist_item, F_I32(struct mc_store_exist_item, status),
       F_SWITCH(struct mc_store_exist_item, status, exist_item_sw));
LAYOUT(L_batch_exist_resp, struct mc_store_batch_exist_resp,
       F_LIST(struct mc_store_batch_exist_resp, items, n_items, struct mc_store_exist_item,
	      L_exist_item));

/* A replica list inside another payload; GetReplicaList's answer adds a tail. */
#define RL struct mc_store_replica_list
LAYOUT(L_replica_list_in, RL, F_U64(RL, lease_ttl_ms), F_OPT(RL, checksum),
       F_LIST(RL, replicas, n_replicas, struct mc_store_replica, L_replica));
LAYOUT(L_replica_list, RL, F_U64(RL, lease_ttl_ms), F_OPT(RL, checksum),
       F_LIST(RL, replicas, n_replicas, struct mc_store_replica, L_replica),
       F_TAIL(RL, table_cksum), F_TAIL(RL, nocache));
#undef RL
#define RLI struct mc_store_replica_list_item
LAYOUT(L_replica_list_ok, RLI, F_STRUCT(RLI, list, mc_store_replica_list, L_replica_list_in));
STATUS_SWITCH(replica_list_item_sw, L_replica_list_ok);
LAYOUT(L_replica_list_item, RLI, F_I32(RLI, status), F_SWITCH(RLI, status, replica_list_item_sw));
#undef RLI
LAYOUT(L_batch_replica_list, struct mc_store_batch_replica_list,
       F_LIST(struct mc_store_batch_replica_list, items, n_items, struct mc_store_replica_list_item,
	      L_replica_list_item),
       F_TAIL_LIST(struct mc_store_batch_replica_list, chunks, n_chunks, struct mc_store_chunk_sums,
		   L_chunk_sums),
       F_TAIL_LIST(struct mc_store_batch_replica_list, tables, n_tables, struct mc_proto_opt_u64,
		   L_opt_item),
       F_TAIL_LIST(struct mc_store_batch_replica_list, nocache, n_nocache, uint64_t, L_u64_item));
LAYOUT(L_keyed_replica_list, struct mc_store_keyed_replica_list,
       F_KEY(struct mc_store_keyed_replica_list, key),
       F_STRUCT(struct mc_store_keyed_replica_list, list, mc_store_replica_list,
		L_replica_list_in));
LAYOUT(L_regex_replica_list, struct mc_store_regex_replica_list,
       F_LIST(struct mc_store_regex_replica_list, items, n_items,
	      struct mc_store_keyed_replica_list, L_keyed_replica_list));

#define PS struct mc_store_put_start_req
LAYOUT(L_put_start_req, PS, F_UUID(PS, client_id), F_STR(PS, tenant), F_KEY(PS, key),
       F_U64(PS, value_len), F_STR(PS, group_id),
       F_STRUCT(PS, config, mc_store_replicate_config, L_replicate_config),
       F_TAIL(PS, trailer_len));
#undef PS
#define PSR struct mc_store_put_start_resp
LAYOUT(L_put_start_resp, PSR, F_LIST(PSR, replicas, n_replicas, struct mc_store_replica, L_replica),
       F_TAIL_LIST(PSR, spoil, n_spoil, struct mc_store_replica, L_replica), F_TAIL(PSR, spoil_ms));
#undef PSR
LAYOUT(L_put_item, struct mc_store_put_item, F_KEY(struct mc_store_put_item, key),
       F_U64(struct mc_store_put_item, value_len), F_STR(struct mc_store_put_item, group_id));
#define BPS struct mc_store_batch_put_start_req
LAYOUT(L_batch_put_start_req, BPS, F_UUID(BPS, client_id), F_STR(BPS, tenant),
       F_STRUCT(BPS, config, mc_store_replicate_config, L_replicate_config),
       F_LIST(BPS, items, n_items, struct mc_store_put_item, L_put_item),
       F_TAIL_LIST(BPS, trailers, n_trailers, uint64_t, L_u64_item));
#undef BPS
#define PSI struct mc_store_put_start_item
LAYOUT(L_put_start_ok, PSI, F_LIST(PSI, replicas, n_replicas, struct mc_store_replica, L_replica));
STATUS_SWITCH(put_start_item_sw, L_put_start_ok);
LAYOUT(L_put_start_item, PSI, F_I32(PSI, status), F_SWITCH(PSI, status, put_start_item_sw));
#undef PSI
#define BPSR struct mc_store_batch_put_start_resp
LAYOUT(L_batch_put_start_resp, BPSR,
       F_LIST(BPSR, items, n_items, struct mc_store_put_start_item, L_put_start_item),
       F_TAIL_LIST(BPSR, spoil, n_spoil, struct mc_store_replica, L_replica),
       F_TAIL(BPSR, spoil_ms));
#undef BPSR

#define PE struct mc_store_put_end_req
LAYOUT(L_put_end_req, PE, F_UUID(PE, client_id), F_STR(PE, tenant), F_U8(PE, replica_type),
       F_KEY(PE, key), F_OPT(PE, checksum), F_TAIL(PE, replica_id),
       F_TAIL_LIST(PE, chunk_sums, n_chunk_sums, uint64_t, L_u64_item));
#undef PE
LAYOUT(L_object_meta, struct mc_store_object_meta, F_KEY(struct mc_store_object_meta, key),
       F_OPT(struct mc_store_object_meta, checksum));
#define BPE struct mc_store_batch_put_end_req
LAYOUT(L_batch_put_end_req, BPE, F_UUID(BPE, client_id), F_STR(BPE, tenant),
       F_U8(BPE, replica_type),
       F_LIST(BPE, items, n_items, struct mc_store_object_meta, L_object_meta),
       F_TAIL_LIST(BPE, chunks, n_chunks, struct mc_store_chunk_sums, L_chunk_sums));
#undef BPE
#define PR struct mc_store_put_revoke_req
LAYOUT(L_put_revoke_req, PR, F_UUID(PR, client_id), F_STR(PR, tenant), F_U8(PR, replica_type),
       F_KEY(PR, key), F_TAIL(PR, replica_id));
#undef PR
#define BPR struct mc_store_batch_put_revoke_req
LAYOUT(L_batch_put_revoke_req, BPR, F_UUID(BPR, client_id), F_STR(BPR, tenant),
       F_U8(BPR, replica_type), F_LIST(BPR, keys, n_keys, struct mc_proto_str, L_key_item));
#undef BPR
LAYOUT(L_batch_status_resp, struct mc_store_batch_status_resp,
       F_LIST(struct mc_store_batch_status_resp, statuses, n_items, int32_t, L_status_item));
#define CI struct mc_store_credit_item
LAYOUT(L_credit_item, CI, F_KEY(CI, key), F_U64(CI, value_len), F_U64(CI, trailer_len),
       F_U64(CI, credit), F_U64(CI, address), F_OPT(CI, checksum));
#undef CI
#define PC struct mc_store_put_credit_req
LAYOUT(L_put_credit_req, PC, F_UUID(PC, client_id), F_STR(PC, tenant), F_STR(PC, segment),
       F_LIST(PC, items, n_items, struct mc_store_credit_item, L_credit_item),
       F_LIST(PC, chunks, n_chunks, struct mc_store_chunk_sums, L_chunk_sums),
       F_LIST(PC, release, n_release, uint64_t, L_u64_item),
       F_LIST(PC, want, n_want, uint64_t, L_u64_item));
#undef PC
LAYOUT(L_put_credit_resp, struct mc_store_put_credit_resp,
       F_LIST(struct mc_store_put_credit_resp, statuses, n_items, int32_t, L_status_item),
       F_LIST(struct mc_store_put_credit_resp, credits, n_credits, struct mc_store_replica,
	      L_replica));

LAYOUT(L_remove_req, struct mc_store_remove_req, F_STR(struct mc_store_remove_req, tenant),
       F_KEY(struct mc_store_remove_req, key), F_BOOL(struct mc_store_remove_req, force));
LAYOUT(L_remove_regex_req, struct mc_store_remove_regex_req,
       F_STR(struct mc_store_remove_regex_req, tenant),
       F_STR(struct mc_store_remove_regex_req, pattern),
       F_BOOL(struct mc_store_remove_regex_req, force));
LAYOUT(L_remove_all_req, struct mc_store_remove_all_req,
       F_STR(struct mc_store_remove_all_req, tenant),
       F_BOOL(struct mc_store_remove_all_req, force));
LAYOUT(L_batch_remove_req, struct mc_store_batch_remove_req,
       F_STR(struct mc_store_batch_remove_req, tenant),
       F_BOOL(struct mc_store_batch_remove_req, force),
       F_LIST(struct mc_store_batch_remove_req, keys, n_keys, struct mc_proto_str, L_key_item));
LAYOUT(L_count_resp, struct mc_store_count_resp, F_I64(struct mc_store_count_resp, count));
LAYOUT(L_spoil_done_req, struct mc_store_spoil_done_req,
       F_LIST(struct mc_store_spoil_done_req, ids, n_ids, uint64_t, L_u64_item));
#define RMR struct mc_store_remove_resp
LAYOUT(L_remove_resp, RMR, F_TAIL_LIST(RMR, spoil, n_spoil, struct mc_store_replica, L_replica),
       F_TAIL(RMR, spoil_ms));
#undef RMR
#define BRR struct mc_store_batch_remove_resp
LAYOUT(L_batch_remove_resp, BRR, F_LIST(BRR, statuses, n_items, int32_t, L_status_item),
       F_TAIL_LIST(BRR, spoil, n_spoil, struct mc_store_replica, L_replica), F_TAIL(BRR, spoil_ms));
#undef BRR
#define RCR struct mc_store_replica_clear_req
LAYOUT(L_replica_clear_req, RCR, F_UUID(RCR, client_id), F_STR(RCR, tenant),
       F_STR(RCR, segment_name), F_LIST(RCR, keys, n_keys, struct mc_proto_str, L_key_item));
#undef RCR
LAYOUT(L_keys_resp, struct mc_store_keys_resp,
       F_LIST(struct mc_store_keys_resp, keys, n_keys, struct mc_proto_str, L_key_item));

/* The SSD tier. */
LAYOUT(L_tenant_key, struct mc_store_tenant_key, F_STR(struct mc_store_tenant_key, tenant),
       F_KEY(struct mc_store_tenant_key, key));
#define MLD struct mc_store_mount_local_disk_req
LAYOUT(L_mount_local_disk_req, MLD, F_UUID(MLD, client_id), F_BOOL(MLD, enable_offloading),
       F_STR(MLD, transport_endpoint));
#undef MLD
#define OHQ struct mc_store_offload_heartbeat_req
LAYOUT(L_offload_heartbeat_req, OHQ, F_UUID(OHQ, client_id), F_BOOL(OHQ, enable_offloading),
       F_U32(OHQ, max_items));
#undef OHQ
#define OI struct mc_store_offload_item
LAYOUT(L_offload_item, OI, F_STR(OI, tenant), F_KEY(OI, key), F_U64(OI, size), F_U64(OI, address));
#undef OI
#define OHR struct mc_store_offload_heartbeat_resp
LAYOUT(L_offload_heartbeat_resp, OHR,
       F_LIST(OHR, offload, n_offload, struct mc_store_offload_item, L_offload_item),
       F_LIST(OHR, removes, n_removes, struct mc_store_tenant_key, L_tenant_key),
       F_BOOL(OHR, remove_all));
#undef OHR
#define OR struct mc_store_offload_result
LAYOUT(L_offload_result, OR, F_STR(OR, tenant), F_KEY(OR, key), F_U64(OR, size), F_I32(OR, status));
#undef OR
LAYOUT(L_notify_offload_req, struct mc_store_notify_offload_req,
       F_UUID(struct mc_store_notify_offload_req, client_id),
       F_LIST(struct mc_store_notify_offload_req, items, n_items, struct mc_store_offload_result,
	      L_offload_result));
LAYOUT(L_ssd_capacity_req, struct mc_store_ssd_capacity_req,
       F_UUID(struct mc_store_ssd_capacity_req, client_id),
       F_U64(struct mc_store_ssd_capacity_req, total),
       F_U64(struct mc_store_ssd_capacity_req, used));
LAYOUT(L_evict_disk_req, struct mc_store_evict_disk_req,
       F_UUID(struct mc_store_evict_disk_req, client_id),
       F_LIST(struct mc_store_evict_disk_req, items, n_items, struct mc_store_tenant_key,
	      L_tenant_key));
LAYOUT(L_promotion_heartbeat_req, struct mc_store_promotion_heartbeat_req,
       F_UUID(struct mc_store_promotion_heartbeat_req, client_id),
       F_U32(struct mc_store_promotion_heartbeat_req, max_items));
#define PT struct mc_store_promotion_task
LAYOUT(L_promotion_task, PT, F_STR(PT, tenant), F_KEY(PT, key), F_U64(PT, size),
       F_STRUCT(PT, replica, mc_store_replica, L_replica));
#undef PT
LAYOUT(L_promotion_heartbeat_resp, struct mc_store_promotion_heartbeat_resp,
       F_LIST(struct mc_store_promotion_heartbeat_resp, tasks, n_tasks,
	      struct mc_store_promotion_task, L_promotion_task));
#define PRR struct mc_store_promotion_result
LAYOUT(L_promotion_result, PRR, F_STR(PRR, tenant), F_KEY(PRR, key), F_U64(PRR, replica_id),
       F_I32(PRR, status));
#undef PRR
LAYOUT(L_notify_promotion_req, struct mc_store_notify_promotion_req,
       F_UUID(struct mc_store_notify_promotion_req, client_id),
       F_LIST(struct mc_store_notify_promotion_req, items, n_items,
	      struct mc_store_promotion_result, L_promotion_result));
LAYOUT(L_offload_rpc_item, struct mc_store_offload_rpc_item,
       F_STR(struct mc_store_offload_rpc_item, tenant),
       F_KEY(struct mc_store_offload_rpc_item, key), F_U64(struct mc_store_offload_rpc_item, size));
LAYOUT(L_offload_rpc_get_req, struct mc_store_offload_rpc_get_req,
       F_LIST(struct mc_store_offload_rpc_get_req, items, n_items, struct mc_store_offload_rpc_item,
	      L_offload_rpc_item));
LAYOUT(L_offload_rpc_buf, struct mc_store_offload_rpc_buf,
       F_I32(struct mc_store_offload_rpc_buf, status),
       F_U64(struct mc_store_offload_rpc_buf, address));
#define ORG struct mc_store_offload_rpc_get_resp
LAYOUT(L_offload_rpc_get_resp, ORG, F_U64(ORG, batch_id), F_STR(ORG, segment),
       F_U64(ORG, gc_ttl_ms),
       F_LIST(ORG, items, n_items, struct mc_store_offload_rpc_buf, L_offload_rpc_buf));
#undef ORG
LAYOUT(L_offload_rpc_release_req, struct mc_store_offload_rpc_release_req,
       F_U64(struct mc_store_offload_rpc_release_req, batch_id));

/* ------------------------------------------------------------------------ */
/* Message table                                                             */

struct msg_desc {
	const char *name;
	const struct layout *req;
	const struct layout *resp;
};

#define MSG_TABLE_SIZE 128
static const struct msg_desc msgs[MSG_TABLE_SIZE] = {
#define MSG_ROW(NAME, num, name, rq, rs) [num] = {#NAME, &L_##rq, &L_##rs},
	MC_STORE_MSG_MAP(MSG_ROW)
#undef MSG_ROW
};

#define MSG_CHECK(NAME, num, name, rq, rs) \
	MC_STATIC_ASSERT((num) > 0 && (num) < MSG_TABLE_SIZE, "message number out of table");
MC_STORE_MSG_MAP(MSG_CHECK)
#undef MSG_CHECK

static const struct layout *msg_layout(uint16_t type, bool response)
{
	if (type >= MSG_TABLE_SIZE || !msgs[type].name)
		return NULL;
	return response ? msgs[type].resp : msgs[type].req;
}

bool mc_store_msg_known(uint16_t type)
{
	return msg_layout(type, false) != NULL;
}

const char *mc_store_msg_name(uint16_t type)
{
	return mc_store_msg_known(type) ? msgs[type].name : "unknown";
}

/* ------------------------------------------------------------------------ */
/* Walkers                                                                   */

static const struct layout *sw_pick(const struct sw *sw, const uint8_t *base)
{
	int64_t tag;

	if (sw->tag_kind == FK_U8)
		tag = *(const uint8_t *)(base + sw->tag_off);
	else
		tag = *(const int32_t *)(base + sw->tag_off);
	for (size_t i = 0; i < sw->n_cases; i++)
		if (sw->cases[i].value == tag)
			return sw->cases[i].fields;
	return sw->dflt;
}

static int64_t sw_tag(const struct sw *sw, const uint8_t *base)
{
	if (sw->tag_kind == FK_U8)
		return *(const uint8_t *)(base + sw->tag_off);
	return *(const int32_t *)(base + sw->tag_off);
}

static void *get_ptr(const uint8_t *p)
{
	void *v;
	memcpy(&v, p, sizeof(v));
	return v;
}

static void set_ptr(uint8_t *p, void *v)
{
	memcpy(p, &v, sizeof(v));
}

/* Fewest bytes the fields of l can take on the wire. */
static size_t min_wire(const struct layout *l)
{
	size_t n = 0;

	for (size_t i = 0; i < l->n; i++) {
		const struct field *f = &l->f[i];
		switch (f->kind) {
		case FK_U8:
		case FK_BOOL:
		case FK_OPT_U64:
			n += 1;
			break;
		case FK_TAIL_U64:
		case FK_TAIL_LIST:
			break; /* absent: nothing */
		case FK_U32:
		case FK_I32:
		case FK_STR:
		case FK_KEY:
		case FK_LIST:
			n += 4;
			break;
		case FK_U64:
		case FK_I64:
			n += 8;
			break;
		case FK_UUID:
			n += 16;
			break;
		case FK_STRUCT:
			n += min_wire(f->sub);
			break;
		case FK_SWITCH: {
			size_t m = f->sw->dflt ? min_wire(f->sw->dflt) : SIZE_MAX;
			for (size_t c = 0; c < f->sw->n_cases; c++)
				m = MC_MIN(m, min_wire(f->sw->cases[c].fields));
			n += m;
			break;
		}
		default:
			mc_assert(!"unknown field kind");
		}
	}
	return n;
}

static mc_status write_str(struct mc_buf *b, const struct layout *l, const struct field *f,
			   const struct mc_proto_str *s)
{
	uint32_t max = f->kind == FK_KEY ? MC_STORE_KEY_MAX : MC_PROTO_STR_MAX;

	if (s->len > max)
		return mc_set_error(f->kind == FK_KEY ? MC_ERR_INVALID_KEY : MC_ERR_INVALID_PARAMS,
				    "store proto: %s.%s of %u bytes, limit %u", l->name, f->name,
				    s->len, max);
	if (s->len && !s->ptr)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: %s.%s is NULL", l->name,
				    f->name);
	mc_buf_put_u32(b, s->len);
	mc_buf_append(b, s->ptr, s->len);
	return MC_OK;
}

/* A tail field after field i of l is present in base. */
static bool later_tail(const struct layout *l, size_t i, const uint8_t *base)
{
	for (size_t j = i + 1; j < l->n; j++) {
		const struct field *f = &l->f[j];

		if (f->kind == FK_TAIL_U64 &&
		    ((const struct mc_proto_opt_u64 *)(base + f->off))->present)
			return true;
		if (f->kind == FK_TAIL_LIST && *(const uint32_t *)(base + f->cnt_off))
			return true;
	}
	return false;
}

static mc_status write_fields(struct mc_buf *b, const struct layout *l, const uint8_t *base)
{
	mc_status rc = MC_OK;

	for (size_t i = 0; i < l->n && rc == MC_OK; i++) {
		const struct field *f = &l->f[i];
		const uint8_t *p = base + f->off;

		switch (f->kind) {
		case FK_U8:
			mc_buf_put_u8(b, *p);
			break;
		case FK_BOOL:
			mc_buf_put_u8(b, *(const bool *)p ? 1 : 0);
			break;
		case FK_U32:
			mc_buf_put_u32(b, *(const uint32_t *)p);
			break;
		case FK_I32:
			mc_buf_put_u32(b, (uint32_t) * (const int32_t *)p);
			break;
		case FK_U64:
			mc_buf_put_u64(b, *(const uint64_t *)p);
			break;
		case FK_I64:
			mc_buf_put_u64(b, (uint64_t) * (const int64_t *)p);
			break;
		case FK_UUID: {
			const struct mc_store_uuid *u = (const void *)p;
			mc_buf_put_u64(b, u->first);
			mc_buf_put_u64(b, u->second);
			break;
		}
		case FK_STR:
		case FK_KEY:
			rc = write_str(b, l, f, (const void *)p);
			break;
		case FK_OPT_U64: {
			const struct mc_proto_opt_u64 *o = (const void *)p;
			mc_buf_put_u8(b, o->present ? 1 : 0);
			if (o->present)
				mc_buf_put_u64(b, o->value);
			break;
		}
		case FK_TAIL_U64: {
			const struct mc_proto_opt_u64 *o = (const void *)p;
			if (o->present) {
				mc_buf_put_u8(b, 1);
				mc_buf_put_u64(b, o->value);
			} else if (later_tail(l, i, base)) {
				mc_buf_put_u8(b, 0);
			}
			break;
		}

		case FK_STRUCT:
			rc = write_fields(b, f->sub, p);
			break;
		case FK_TAIL_LIST:
		case FK_LIST: {
			uint32_t n = *(const uint32_t *)(base + f->cnt_off);
			const uint8_t *items = get_ptr(p);
			if (!n && f->kind == FK_TAIL_LIST && !later_tail(l, i, base))
				break; /* empty: nothing, or a count of 0 before a later tail */
			if (n && !items) {
				rc = mc_set_error(MC_ERR_INVALID_PARAMS,
						  "store proto: %s.%s: %u items at NULL", l->name,
						  f->name, n);
				break;
			}
			mc_buf_put_u32(b, n);
			for (uint32_t k = 0; k < n && rc == MC_OK && b->err == MC_OK; k++)
				rc = write_fields(b, f->sub, items + (size_t)k * f->sub->size);
			break;
		}
		case FK_SWITCH: {
			const struct layout *c = sw_pick(f->sw, base);
			if (!c) {
				rc = mc_set_error(MC_ERR_INVALID_PARAMS,
						  "store proto: %s.%s: unknown value %lld", l->name,
						  f->name, (long long)sw_tag(f->sw, base));
				break;
			}
			rc = write_fields(b, c, base);
			break;
		}
		default:
			mc_assert(!"unknown field kind");
		}
	}
	return rc;
}

static const char empty_str[1] = "";

/* ---- allocation: malloc, or the thread's decode arena (proto.h) ---- */

static _Thread_local struct mc_store_decode_arena *tl_arena;

struct mc_store_decode_arena *mc_store_decode_arena_use(struct mc_store_decode_arena *a)
{
	struct mc_store_decode_arena *prev = tl_arena;

	tl_arena = a;
	return prev;
}

void mc_store_decode_arena_init(struct mc_store_decode_arena *a, size_t cap)
{
	memset(a, 0, sizeof(*a));
	if (cap && (a->base = mc_malloc(cap)))
		a->cap = cap;
}

void mc_store_decode_arena_free(struct mc_store_decode_arena *a)
{
	mc_free(a->base);
	memset(a, 0, sizeof(*a));
}

/* n bytes (zeroed when zero), 16-aligned from the arena while it has room. */
static void *dec_alloc(size_t n, bool zero)
{
	struct mc_store_decode_arena *a = tl_arena;
	size_t k = (n + 15) & ~(size_t)15;

	if (a && k >= n && a->used <= a->cap && a->cap - a->used >= k) {
		void *p = a->base + a->used;
		a->used += k;
		if (zero)
			memset(p, 0, n);
		return p;
	}
	if (a)
		a->spilled += k;
	return zero ? mc_calloc(1, n) : mc_malloc(n);
}

static void dec_free(void *p)
{
	struct mc_store_decode_arena *a = tl_arena;

	if (a && a->base && (const uint8_t *)p >= a->base && (const uint8_t *)p < a->base + a->cap)
		return;
	mc_free(p);
}

/* min_wire of a list's item layout, remembered for the last layout asked
 * on this thread: a list of a hundred replica lists asks a hundred times */
static size_t min_wire_cached(const struct layout *l)
{
	static _Thread_local const struct layout *last;
	static _Thread_local size_t last_n;

	if (l != last) {
		last_n = min_wire(l);
		last = l;
	}
	return last_n;
}

static mc_status read_str(struct mc_reader *r, const struct layout *l, const struct field *f,
			  struct mc_proto_str *out)
{
	uint32_t max = f->kind == FK_KEY ? MC_STORE_KEY_MAX : MC_PROTO_STR_MAX;
	size_t at = r->pos;
	const uint8_t *p;
	uint32_t len;
	char *s;
	mc_status rc;

	rc = mc_reader_u32(r, &len);
	if (rc != MC_OK)
		return rc;
	if (len > max)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "store proto: %s.%s of %u bytes at offset %zu, limit %u",
				    l->name, f->name, len, at, max);
	rc = need(r, len);
	if (rc != MC_OK)
		return rc;
	p = take(r, len);
	if (len == 0) {
		out->ptr = empty_str;
		out->len = 0;
		return MC_OK;
	}
	s = dec_alloc((size_t)len + 1, false);
	if (!s)
		return mc_set_error(MC_ERR_NOMEM, "store proto: no memory for a %u-byte string",
				    len);
	r->alloc_bytes += (size_t)len + 1;
	memcpy(s, p, len);
	s[len] = '\0';
	out->ptr = s;
	out->len = len;
	return MC_OK;
}

static mc_status read_flag(struct mc_reader *r, const struct layout *l, const struct field *f,
			   bool *out)
{
	size_t at = r->pos;
	uint8_t v;
	mc_status rc = mc_reader_u8(r, &v);

	if (rc != MC_OK)
		return rc;
	if (v > 1)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "store proto: %s.%s: byte %u at offset %zu is not 0 or 1",
				    l->name, f->name, v, at);
	*out = v;
	return MC_OK;
}

/* Fills base's fields from r.  On failure the caller frees with free_fields. */
static mc_status read_fields(struct mc_reader *r, const struct layout *l, uint8_t *base)
{
	mc_status rc = MC_OK;

	for (size_t i = 0; i < l->n && rc == MC_OK; i++) {
		const struct field *f = &l->f[i];
		uint8_t *p = base + f->off;

		switch (f->kind) {
		case FK_U8:
			rc = mc_reader_u8(r, p);
			break;
		case FK_BOOL:
			rc = read_flag(r, l, f, (bool *)p);
			break;
		case FK_U32:
			rc = mc_reader_u32(r, (uint32_t *)p);
			break;
		case FK_I32: {
			uint32_t v = 0;
			rc = mc_reader_u32(r, &v);
			*(int32_t *)p = (int32_t)v;
			break;
		}
		case FK_U64:
			rc = mc_reader_u64(r, (uint64_t *)p);
			break;
		case FK_I64: {
			uint64_t v = 0;
			rc = mc_reader_u64(r, &v);
			*(int64_t *)p = (int64_t)v;
			break;
		}
		case FK_UUID: {
			struct mc_store_uuid *u = (void *)p;
			rc = mc_reader_u64(r, &u->first);
			if (rc == MC_OK)
				rc = mc_reader_u64(r, &u->second);
			break;
		}
		case FK_STR:
		case FK_KEY:
			rc = read_str(r, l, f, (void *)p);
			break;
		case FK_OPT_U64: {
			struct mc_proto_opt_u64 *o = (void *)p;
			rc = read_flag(r, l, f, &o->present);
			if (rc == MC_OK && o->present)
				rc = mc_reader_u64(r, &o->value);
			break;
		}
		case FK_TAIL_U64: {
			struct mc_proto_opt_u64 *o = (void *)p;
			o->present = false;
			if (!r->left)
				break; /* a sender of an older minor version */
			rc = read_flag(r, l, f, &o->present);
			/* 0 only before a later tail; canonical: nothing else */
			if (rc == MC_OK && !o->present && (!r->left || i + 1 == l->n))
				rc = mc_set_error(MC_ERR_PROTOCOL,
						  "store proto: %s.%s: an absent tail is not sent",
						  l->name, f->name);
			if (rc == MC_OK && o->present)
				rc = mc_reader_u64(r, &o->value);
			break;
		}

		case FK_STRUCT:
			rc = read_fields(r, f->sub, p);
			break;
		case FK_TAIL_LIST:
		case FK_LIST: {
			uint32_t n = 0;
			uint8_t *items = NULL;
			if (f->kind == FK_TAIL_LIST && !r->left)
				break; /* a sender of an older minor version, or empty */
			rc = mc_reader_count(r, min_wire_cached(f->sub), &n);
			/* 0 only before a later tail; canonical: nothing else */
			if (rc == MC_OK && !n && f->kind == FK_TAIL_LIST &&
			    (!r->left || i + 1 == l->n))
				rc = mc_set_error(MC_ERR_PROTOCOL,
						  "store proto: %s.%s: an empty tail is not sent",
						  l->name, f->name);
			if (rc != MC_OK)
				break;
			if (n) {
				/* n * size is bounded: n items of min_wire bytes fit */
				items = dec_alloc((size_t)n * f->sub->size, true);
				if (!items) {
					rc = mc_set_error(MC_ERR_NOMEM,
							  "store proto: no memory for %u %s", n,
							  f->sub->name);
					break;
				}
				r->alloc_bytes += (size_t)n * f->sub->size;
			}
			/* set first, so free_fields finds a partly read list */
			set_ptr(p, items);
			*(uint32_t *)(base + f->cnt_off) = n;
			for (uint32_t k = 0; k < n && rc == MC_OK; k++)
				rc = read_fields(r, f->sub, items + (size_t)k * f->sub->size);
			break;
		}
		case FK_SWITCH: {
			const struct layout *c = sw_pick(f->sw, base);
			if (!c) {
				rc = mc_set_error(
					MC_ERR_PROTOCOL,
					"store proto: %s.%s: unknown value %lld before offset %zu",
					l->name, f->name, (long long)sw_tag(f->sw, base), r->pos);
				break;
			}
			rc = read_fields(r, c, base);
			break;
		}
		default:
			mc_assert(!"unknown field kind");
		}
	}
	return rc;
}

static void free_str(struct mc_proto_str *s)
{
	if (s->len)
		dec_free((void *)s->ptr);
	s->ptr = NULL;
	s->len = 0;
}

static void free_fields(const struct layout *l, uint8_t *base)
{
	for (size_t i = 0; i < l->n; i++) {
		const struct field *f = &l->f[i];
		uint8_t *p = base + f->off;

		switch (f->kind) {
		case FK_STR:
		case FK_KEY:
			free_str((void *)p);
			break;
		case FK_STRUCT:
			free_fields(f->sub, p);
			break;
		case FK_TAIL_LIST:
		case FK_LIST: {
			uint32_t *n = (uint32_t *)(base + f->cnt_off);
			uint8_t *items = get_ptr(p);
			for (uint32_t k = 0; items && k < *n; k++)
				free_fields(f->sub, items + (size_t)k * f->sub->size);
			if (items)
				dec_free(items);
			set_ptr(p, NULL);
			*n = 0;
			break;
		}
		case FK_SWITCH: {
			const struct layout *c = sw_pick(f->sw, base);
			if (c)
				free_fields(c, base);
			break;
		}
		default:
			break;
		}
	}
}

static bool str_equal(const struct mc_proto_str *a, const struct mc_proto_str *b)
{
	return a->len == b->len && (a->len == 0 || memcmp(a->ptr, b->ptr, a->len) == 0);
}

static bool equal_fields(const struct layout *l, const uint8_t *a, const uint8_t *b)
{
	for (size_t i = 0; i < l->n; i++) {
		const struct field *f = &l->f[i];
		const uint8_t *pa = a + f->off, *pb = b + f->off;
		bool same = true;

		switch (f->kind) {
		case FK_U8:
			same = *pa == *pb;
			break;
		case FK_BOOL:
			same = *(const bool *)pa == *(const bool *)pb;
			break;
		case FK_U32:
		case FK_I32:
			same = memcmp(pa, pb, 4) == 0;
			break;
		case FK_U64:
		case FK_I64:
			same = memcmp(pa, pb, 8) == 0;
			break;
		case FK_UUID: {
			const struct mc_store_uuid *ua = (const void *)pa, *ub = (const void *)pb;
			same = ua->first == ub->first && ua->second == ub->second;
			break;
		}
		case FK_STR:
		case FK_KEY:
			same = str_equal((const void *)pa, (const void *)pb);
			break;
		case FK_OPT_U64:
		case FK_TAIL_U64: {
			const struct mc_proto_opt_u64 *oa = (const void *)pa,
						      *ob = (const void *)pb;
			same = oa->present == ob->present &&
			       (!oa->present || oa->value == ob->value);
			break;
		}
		case FK_STRUCT:
			same = equal_fields(f->sub, pa, pb);
			break;
		case FK_TAIL_LIST:
		case FK_LIST: {
			uint32_t n = *(const uint32_t *)(a + f->cnt_off);
			const uint8_t *ia = get_ptr(pa), *ib = get_ptr(pb);
			same = n == *(const uint32_t *)(b + f->cnt_off);
			for (uint32_t k = 0; same && k < n; k++)
				same = equal_fields(f->sub, ia + (size_t)k * f->sub->size,
						    ib + (size_t)k * f->sub->size);
			break;
		}
		case FK_SWITCH: {
			/* the tags were compared as earlier fields */
			const struct layout *c = sw_pick(f->sw, a);
			same = !c || equal_fields(c, a, b);
			break;
		}
		default:
			mc_assert(!"unknown field kind");
		}
		if (!same)
			return false;
	}
	return true;
}

/* ------------------------------------------------------------------------ */
/* Bodies                                                                    */

static mc_status read_body(struct mc_reader *r, const struct layout *l, void *body_out)
{
	mc_status rc;

	if (l->n == 0)
		return MC_OK;
	memset(body_out, 0, l->size);
	rc = read_fields(r, l, body_out);
	if (rc != MC_OK) {
		free_fields(l, body_out);
		memset(body_out, 0, l->size);
	}
	return rc;
}

mc_status mc_store_body_read(struct mc_reader *r, uint16_t type, bool response, void *body_out)
{
	const struct layout *l = msg_layout(type, response);

	if (!l)
		return mc_set_error(MC_ERR_NOT_SUPPORTED, "store proto: unknown message type %u",
				    type);
	return read_body(r, l, body_out);
}

mc_status mc_store_payload_decode(uint16_t type, bool response, const void *payload, size_t len,
				  void *body_out)
{
	struct mc_reader r;
	mc_status rc;

	mc_reader_init(&r, payload, len);
	rc = mc_store_body_read(&r, type, response, body_out);
	if (rc == MC_OK && r.left) {
		mc_store_body_release(type, response, body_out);
		rc = mc_set_error(
			MC_ERR_PROTOCOL, "store proto: %s %s: %zu bytes left over after offset %zu",
			mc_store_msg_name(type), response ? "response" : "request", r.left, r.pos);
	}
	return rc;
}

void mc_store_body_release(uint16_t type, bool response, void *body)
{
	const struct layout *l = msg_layout(type, response);

	if (!l || !body || l->n == 0)
		return;
	free_fields(l, body);
	memset(body, 0, l->size);
}

bool mc_store_body_equal(uint16_t type, bool response, const void *a, const void *b)
{
	const struct layout *l = msg_layout(type, response);

	return l && (l->n == 0 || equal_fields(l, a, b));
}

mc_status mc_store_body_write(struct mc_buf *b, uint16_t type, bool response, const void *body)
{
	const struct layout *l = msg_layout(type, response);
	size_t start = b->len;
	mc_status rc;

	if (b->err != MC_OK)
		return b->err;
	if (!l)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: unknown message type %u",
				    type);
	if (l->n && !body)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: %s without a body",
				    mc_store_msg_name(type));
	rc = l->n ? write_fields(b, l, body) : MC_OK;
	if (rc == MC_OK)
		rc = b->err;
	if (rc != MC_OK) {
		b->len = start;
		b->err = MC_OK;
	}
	return rc;
}

#define BODY_FUNCS(name)                                                                \
	void mc_store_##name##_release(struct mc_store_##name *m)                       \
	{                                                                               \
		if (m && L_##name.n) {                                                  \
			free_fields(&L_##name, (uint8_t *)m);                           \
			memset(m, 0, sizeof(*m));                                       \
		}                                                                       \
	}                                                                               \
	bool mc_store_##name##_equal(const struct mc_store_##name *a,                   \
				     const struct mc_store_##name *b)                   \
	{                                                                               \
		return L_##name.n == 0 ||                                               \
		       equal_fields(&L_##name, (const uint8_t *)a, (const uint8_t *)b); \
	}
MC_STORE_BODY_MAP(BODY_FUNCS)
#undef BODY_FUNCS

/* ------------------------------------------------------------------------ */
/* Frames                                                                    */

static atomic_uint proto_minor = MC_STORE_PROTO_MINOR;

unsigned mc_store_proto_minor(void)
{
	return atomic_load_explicit(&proto_minor, memory_order_relaxed);
}

void mc_store_proto_minor_set(unsigned minor)
{
	atomic_store_explicit(&proto_minor, minor, memory_order_relaxed);
}

/* Appends header + payload; exactly one of l (with body) and text is used. */
static mc_status frame_encode(struct mc_buf *b, uint16_t type, uint16_t flags, int32_t status,
			      uint64_t req_id, const struct layout *l, const void *body,
			      const struct mc_proto_str *text)
{
	struct mc_proto_hdr h = {
		.major = MC_STORE_PROTO_MAJOR,
		.minor = (uint8_t)atomic_load_explicit(&proto_minor, memory_order_relaxed),
		.type = type,
		.flags = flags,
		.status = status,
		.req_id = req_id,
	};
	size_t start = b->len;
	size_t payload;
	mc_status rc = MC_OK;

	if (b->err != MC_OK)
		return b->err;
	if (l && l->n && !body)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: %s without a body",
				    mc_store_msg_name(type));
	if (mc_buf_reserve(b, MC_PROTO_HDR_LEN) != MC_OK)
		goto out_restore;
	b->len += MC_PROTO_HDR_LEN;
	if (l) {
		rc = l->n ? write_fields(b, l, body) : MC_OK;
	} else {
		uint32_t n = MC_MIN(text->len, MC_PROTO_STR_MAX);
		mc_buf_put_u32(b, n);
		mc_buf_append(b, text->ptr, n);
	}
	if (rc != MC_OK)
		goto out_restore;
	if (b->err != MC_OK)
		goto out_restore;
	payload = b->len - start - MC_PROTO_HDR_LEN;
	if (payload > MC_PROTO_MAX_PAYLOAD) {
		rc = mc_set_error(MC_ERR_TOO_LARGE,
				  "store proto: %s payload of %zu bytes over the limit of %u",
				  mc_store_msg_name(type), payload, MC_PROTO_MAX_PAYLOAD);
		goto out_restore;
	}
	h.payload_len = (uint32_t)payload;
	mc_proto_hdr_encode(&h, b->data + start);
	return MC_OK;

out_restore:
	if (rc == MC_OK)
		rc = b->err;
	b->len = start;
	b->err = MC_OK;
	return rc;
}

mc_status mc_store_request_encode(struct mc_buf *b, uint16_t type, uint64_t req_id,
				  const void *body)
{
	const struct layout *l = msg_layout(type, false);

	if (!l)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: unknown message type %u",
				    type);
	return frame_encode(b, type, 0, 0, req_id, l, body, NULL);
}

mc_status mc_store_response_encode(struct mc_buf *b, uint16_t type, uint64_t req_id,
				   const void *body)
{
	const struct layout *l = msg_layout(type, true);

	if (!l)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: unknown message type %u",
				    type);
	return frame_encode(b, type, MC_PROTO_F_RESPONSE, 0, req_id, l, body, NULL);
}

static mc_status error_encode(struct mc_buf *b, uint16_t type, uint64_t req_id, int32_t status,
			      const struct mc_proto_str *text)
{
	if (status == 0)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "store proto: an error response needs a non-zero status");
	if (text->len && !text->ptr)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "store proto: error text is NULL");
	/* unknown types may be refused too: that is how MC_ERR_NOT_SUPPORTED gets back */
	return frame_encode(b, type, MC_PROTO_F_RESPONSE, status, req_id, NULL, NULL, text);
}

mc_status mc_store_error_encode(struct mc_buf *b, uint16_t type, uint64_t req_id, mc_status status,
				const char *text)
{
	struct mc_proto_str t = mc_proto_str_c(text);
	return error_encode(b, type, req_id, status, &t);
}

mc_status mc_store_msg_encode(struct mc_buf *b, const struct mc_store_msg *m)
{
	if (!(m->hdr.flags & MC_PROTO_F_RESPONSE))
		return mc_store_request_encode(b, m->hdr.type, m->hdr.req_id, &m->body);
	if (m->hdr.status != 0)
		return error_encode(b, m->hdr.type, m->hdr.req_id, m->hdr.status, &m->error);
	return mc_store_response_encode(b, m->hdr.type, m->hdr.req_id, &m->body);
}

mc_status mc_store_msg_decode(const void *frame, size_t len, uint32_t max_payload,
			      struct mc_store_msg *out)
{
	const struct layout *l;
	struct mc_reader r;
	bool response;
	mc_status rc;

	memset(out, 0, sizeof(*out));
	if (len < MC_PROTO_HDR_LEN)
		return mc_set_error(MC_ERR_PROTOCOL, "store proto: frame of %zu bytes", len);
	rc = mc_proto_hdr_decode(frame, max_payload, &out->hdr);
	if (rc != MC_OK)
		return rc;
	if (len != MC_PROTO_HDR_LEN + (size_t)out->hdr.payload_len)
		return mc_set_error(MC_ERR_PROTOCOL,
				    "store proto: frame of %zu bytes, header says %u + %u", len,
				    MC_PROTO_HDR_LEN, out->hdr.payload_len);
	response = out->hdr.flags & MC_PROTO_F_RESPONSE;
	l = msg_layout(out->hdr.type, response);
	if (!l && !(response && out->hdr.status != 0))
		return mc_set_error(MC_ERR_NOT_SUPPORTED,
				    "store proto: unknown message type %u (request %llu)",
				    out->hdr.type, (unsigned long long)out->hdr.req_id);
	mc_reader_init(&r, (const uint8_t *)frame + MC_PROTO_HDR_LEN, out->hdr.payload_len);
	if (response && out->hdr.status != 0) {
		static const struct field text = {.kind = FK_STR, .name = "error"};
		static const struct layout err = {"error response", 0, &text, 1};
		rc = read_str(&r, &err, &text, &out->error);
	} else {
		rc = read_body(&r, l, &out->body);
	}
	if (rc == MC_OK && r.left)
		rc = mc_set_error(MC_ERR_PROTOCOL,
				  "store proto: %s: %zu bytes left over after offset %zu",
				  mc_store_msg_name(out->hdr.type), r.left, r.pos);
	if (rc != MC_OK) {
		struct mc_proto_hdr h = out->hdr;
		mc_store_msg_release(out);
		out->hdr = h;
	}
	return rc;
}

void mc_store_msg_release(struct mc_store_msg *m)
{
	if (!m)
		return;
	free_str(&m->error);
	mc_store_body_release(m->hdr.type, m->hdr.flags & MC_PROTO_F_RESPONSE, &m->body);
	memset(m, 0, sizeof(*m));
}

mc_status mc_store_msg_decode_in(struct mc_store_decode_arena *a, const void *frame, size_t len,
				 uint32_t max_payload, struct mc_store_msg *out)
{
	struct mc_store_decode_arena *prev = tl_arena;
	mc_status rc;

	tl_arena = a;
	rc = mc_store_msg_decode(frame, len, max_payload, out);
	tl_arena = prev;
	return rc;
}

void mc_store_msg_release_in(struct mc_store_decode_arena *a, struct mc_store_msg *m)
{
	struct mc_store_decode_arena *prev = tl_arena;

	tl_arena = a;
	mc_store_msg_release(m);
	tl_arena = prev;
}

bool mc_store_msg_equal(const struct mc_store_msg *a, const struct mc_store_msg *b)
{
	bool resp = a->hdr.flags & MC_PROTO_F_RESPONSE;

	if (a->hdr.type != b->hdr.type || resp != !!(b->hdr.flags & MC_PROTO_F_RESPONSE) ||
	    a->hdr.req_id != b->hdr.req_id)
		return false;
	if (!resp)
		return mc_store_body_equal(a->hdr.type, false, &a->body, &b->body);
	if (a->hdr.status != b->hdr.status)
		return false;
	if (a->hdr.status != 0)
		return str_equal(&a->error, &b->error);
	return mc_store_body_equal(a->hdr.type, true, &a->body, &b->body);
}
