/*
 * store/tensor_hdr.c - the stored-tensor header codec
 * (include/mooncake/tensor_hdr.h).
 *
 * A stored tensor is [304-byte header][payload] under one key, upstream's
 * format (spec store.md 1.12).  The header struct is the byte layout, so
 * encoding and decoding are copies; what this file really holds is the
 * validator, which decides whether bytes read back from the store may be
 * believed before anything trusts their sizes: every field is checked
 * against the format's ranges and against the object's length, and every
 * product is checked for overflow before it is formed, so a forged header
 * can neither make a reader index past the object nor wrap a size.  A
 * refusal is MC_ERR_INVALID_PARAMS, the project's one status for bad
 * input, and the first rule broken is recorded with its offending values
 * by mc_set_error() for the calling thread (mc_last_error()), for tests
 * and for callers that report why an object was refused; the Python
 * binding only asks "valid?".
 *
 * No allocation and no shared state (the error text is thread-local);
 * callable from any thread.
 */
#define MC_LOG_MODULE "store"
#include "mooncake/tensor_hdr.h"

#include <inttypes.h>
#include <string.h>

#include "base/compiler.h"
#include "base/log.h"

MC_STATIC_ASSERT(sizeof(struct mc_tensor_hdr) == MC_TENSOR_HDR_SIZE, "tensor header is 304 bytes");
MC_STATIC_ASSERT(offsetof(struct mc_tensor_hdr, data_offset) == 24, "data_offset at 24");
MC_STATIC_ASSERT(offsetof(struct mc_tensor_hdr, global_shape) == 40, "global_shape at 40");
MC_STATIC_ASSERT(offsetof(struct mc_tensor_hdr, local_shape) == 104, "local_shape at 104");
MC_STATIC_ASSERT(offsetof(struct mc_tensor_hdr, axis_count) == 168, "axis_count at 168");
MC_STATIC_ASSERT(offsetof(struct mc_tensor_hdr, axes) == 176, "axes at 176");
MC_STATIC_ASSERT(sizeof(struct mc_tensor_axis) == 32, "an axis is 32 bytes");
MC_STATIC_ASSERT(MC_TENSOR_DTYPE_FLOAT8_E5M2 == MC_TENSOR_DTYPE_COUNT - 1, "dtype count");

static const char *const dtype_names[MC_TENSOR_DTYPE_COUNT] = {
#define DTYPE_NAME(name, code, str, size) [code] = str,
	MC_TENSOR_DTYPE_MAP(DTYPE_NAME)
#undef DTYPE_NAME
};

static const uint8_t dtype_sizes[MC_TENSOR_DTYPE_COUNT] = {
#define DTYPE_SIZE(name, code, str, size) [code] = size,
	MC_TENSOR_DTYPE_MAP(DTYPE_SIZE)
#undef DTYPE_SIZE
};

size_t mc_tensor_dtype_size(int32_t dtype)
{
	return dtype >= 0 && dtype < MC_TENSOR_DTYPE_COUNT ? dtype_sizes[dtype] : 0;
}

const char *mc_tensor_dtype_name(int32_t dtype)
{
	return dtype >= 0 && dtype < MC_TENSOR_DTYPE_COUNT ? dtype_names[dtype] : NULL;
}

void mc_tensor_hdr_init(struct mc_tensor_hdr *h)
{
	memset(h, 0, sizeof(*h));
	h->magic = MC_TENSOR_MAGIC;
	h->version = MC_TENSOR_VERSION;
	h->header_size = MC_TENSOR_HDR_SIZE;
	h->layout_kind = MC_TENSOR_LAYOUT_FULL;
	h->data_offset = MC_TENSOR_HDR_SIZE;
	for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
		h->global_shape[i] = -1;
		h->local_shape[i] = -1;
	}
}

void mc_tensor_hdr_encode(const struct mc_tensor_hdr *h, void *out)
{
	memcpy(out, h, MC_TENSOR_HDR_SIZE);
}

/* The first rule, which decode checks before it copies: a whole header. */
static mc_status too_short(uint64_t total)
{
	return mc_set_error(MC_ERR_INVALID_PARAMS,
			    "stored tensor: object of %" PRIu64
			    " bytes is shorter than the %d-byte header",
			    total, MC_TENSOR_HDR_SIZE);
}

/* Every rule of one sharding axis; i is its index, for the message. */
static mc_status axis_check(const struct mc_tensor_axis *ax, uint32_t i, int32_t ndim)
{
	if (ax->kind < 0 || ax->kind > MC_TENSOR_AXIS_KIND_MAX)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: axis %u kind %d outside 0..%d", i, ax->kind,
				    MC_TENSOR_AXIS_KIND_MAX);
	if (ax->shard_count < 1)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: axis %u shard_count %d < 1", i,
				    ax->shard_count);
	if (ax->shard_rank < 0 || ax->shard_rank >= ax->shard_count)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: axis %u shard_rank %d outside 0..%d", i,
				    ax->shard_rank, ax->shard_count - 1);
	if (ax->split_dim < -1 || ax->split_dim >= ndim)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: axis %u split_dim %d outside -1..%d", i,
				    ax->split_dim, ndim - 1);
	return MC_OK;
}

mc_status mc_tensor_hdr_validate(const struct mc_tensor_hdr *h, uint64_t total)
{
	uint64_t numel = 1, esize;
	mc_status rc;

	if (total < MC_TENSOR_HDR_SIZE)
		return too_short(total);
	if (h->magic != MC_TENSOR_MAGIC)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: bad magic 0x%08x",
				    h->magic);
	if (h->version != MC_TENSOR_VERSION)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: unknown version %u",
				    h->version);
	if (h->header_size != MC_TENSOR_HDR_SIZE)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: header_size %u is not %d", h->header_size,
				    MC_TENSOR_HDR_SIZE);
	if (h->dtype < 0 || h->dtype >= MC_TENSOR_DTYPE_COUNT)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: unknown dtype code %d",
				    h->dtype);
	if (h->ndim < 0 || h->ndim > MC_TENSOR_MAX_DIMS)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: ndim %d outside 0..%d",
				    h->ndim, MC_TENSOR_MAX_DIMS);
	if (h->layout_kind > MC_TENSOR_LAYOUT_SHARD)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: unknown layout kind %u",
				    h->layout_kind);
	if (h->axis_count > MC_TENSOR_MAX_AXES)
		return mc_set_error(MC_ERR_INVALID_PARAMS, "stored tensor: axis_count %u > %d",
				    h->axis_count, MC_TENSOR_MAX_AXES);
	for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
		if (i >= h->ndim) {
			if (h->global_shape[i] != -1 || h->local_shape[i] != -1)
				return mc_set_error(
					MC_ERR_INVALID_PARAMS,
					"stored tensor: dimension %d past ndim %d is %" PRId64
					" x %" PRId64 " (global x local), not -1",
					i, h->ndim, h->global_shape[i], h->local_shape[i]);
			continue;
		}
		if (h->global_shape[i] < 0 || h->local_shape[i] < 0)
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "stored tensor: dimension %d is negative: %" PRId64
					    " x %" PRId64 " (global x local)",
					    i, h->global_shape[i], h->local_shape[i]);
		if (h->local_shape[i] && numel > UINT64_MAX / (uint64_t)h->local_shape[i])
			return mc_set_error(MC_ERR_INVALID_PARAMS,
					    "stored tensor: element count overflows 64 bits at "
					    "dimension %d (%" PRIu64 " x %" PRId64 ")",
					    i, numel, h->local_shape[i]);
		numel *= (uint64_t)h->local_shape[i];
	}
	for (uint32_t i = 0; i < h->axis_count; i++) {
		rc = axis_check(&h->axes[i], i, h->ndim);
		if (rc != MC_OK)
			return rc;
	}
	if (h->data_offset < MC_TENSOR_HDR_SIZE || h->data_offset > total)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: data_offset %" PRIu64 " outside %d..%" PRIu64,
				    h->data_offset, MC_TENSOR_HDR_SIZE, total);
	if (h->data_bytes != total - h->data_offset)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: data_bytes %" PRIu64 " but %" PRIu64
				    " bytes follow data_offset %" PRIu64,
				    h->data_bytes, total - h->data_offset, h->data_offset);
	esize = dtype_sizes[h->dtype];
	if (numel > UINT64_MAX / esize)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: payload size overflows 64 bits (%" PRIu64
				    " elements of %" PRIu64 " bytes)",
				    numel, esize);
	if (h->data_bytes != numel * esize)
		return mc_set_error(MC_ERR_INVALID_PARAMS,
				    "stored tensor: data_bytes %" PRIu64 " is not %" PRIu64
				    " elements of %" PRIu64 " bytes (%s)",
				    h->data_bytes, numel, esize, dtype_names[h->dtype]);
	return MC_OK;
}

mc_status mc_tensor_hdr_decode(const void *buf, uint64_t len, struct mc_tensor_hdr *hdr_out)
{
	struct mc_tensor_hdr h;
	mc_status rc;

	if (len < MC_TENSOR_HDR_SIZE)
		return too_short(len);
	memcpy(&h, buf, sizeof(h));
	rc = mc_tensor_hdr_validate(&h, len);
	if (rc == MC_OK)
		*hdr_out = h;
	return rc;
}
