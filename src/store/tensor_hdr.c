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
 * can neither make a reader index past the object nor wrap a size.  The
 * verdict names the first rule broken, for tests and for callers that
 * report why an object was refused; the Python binding only asks "valid?".
 *
 * Pure: no allocation, no logging, no state; callable from any thread.
 */
#include "mooncake/tensor_hdr.h"

#include <stdbool.h>
#include <string.h>

#include "base/compiler.h"

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

const char *mc_tensor_hdr_strerror(enum mc_tensor_hdr_status status)
{
	switch (status) {
#define STATUS_DESC(name, value, desc) \
	case MC_TENSOR_HDR_##name:     \
		return desc;
		MC_TENSOR_HDR_STATUS_MAP(STATUS_DESC)
#undef STATUS_DESC
	}
	return "unknown";
}

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

static bool axis_valid(const struct mc_tensor_axis *ax, int32_t ndim)
{
	return ax->kind >= 0 && ax->kind <= MC_TENSOR_AXIS_KIND_MAX && ax->shard_count >= 1 &&
	       ax->shard_rank >= 0 && ax->shard_rank < ax->shard_count && ax->split_dim >= -1 &&
	       ax->split_dim < ndim;
}

enum mc_tensor_hdr_status mc_tensor_hdr_validate(const struct mc_tensor_hdr *h, uint64_t total)
{
	uint64_t numel = 1, esize;

	if (total < MC_TENSOR_HDR_SIZE)
		return MC_TENSOR_HDR_ERR_SHORT;
	if (h->magic != MC_TENSOR_MAGIC)
		return MC_TENSOR_HDR_ERR_MAGIC;
	if (h->version != MC_TENSOR_VERSION)
		return MC_TENSOR_HDR_ERR_VERSION;
	if (h->header_size != MC_TENSOR_HDR_SIZE)
		return MC_TENSOR_HDR_ERR_HEADER_SIZE;
	if (h->dtype < 0 || h->dtype >= MC_TENSOR_DTYPE_COUNT)
		return MC_TENSOR_HDR_ERR_DTYPE;
	if (h->ndim < 0 || h->ndim > MC_TENSOR_MAX_DIMS)
		return MC_TENSOR_HDR_ERR_NDIM;
	if (h->layout_kind > MC_TENSOR_LAYOUT_SHARD)
		return MC_TENSOR_HDR_ERR_LAYOUT;
	if (h->axis_count > MC_TENSOR_MAX_AXES)
		return MC_TENSOR_HDR_ERR_AXIS_COUNT;
	for (int i = 0; i < MC_TENSOR_MAX_DIMS; i++) {
		if (i >= h->ndim) {
			if (h->global_shape[i] != -1 || h->local_shape[i] != -1)
				return MC_TENSOR_HDR_ERR_SHAPE;
			continue;
		}
		if (h->global_shape[i] < 0 || h->local_shape[i] < 0)
			return MC_TENSOR_HDR_ERR_SHAPE;
		if (h->local_shape[i] && numel > UINT64_MAX / (uint64_t)h->local_shape[i])
			return MC_TENSOR_HDR_ERR_SHAPE_OVERFLOW;
		numel *= (uint64_t)h->local_shape[i];
	}
	for (uint32_t i = 0; i < h->axis_count; i++)
		if (!axis_valid(&h->axes[i], h->ndim))
			return MC_TENSOR_HDR_ERR_AXIS;
	if (h->data_offset < MC_TENSOR_HDR_SIZE || h->data_offset > total)
		return MC_TENSOR_HDR_ERR_DATA_OFFSET;
	if (h->data_bytes != total - h->data_offset)
		return MC_TENSOR_HDR_ERR_DATA_LENGTH;
	esize = dtype_sizes[h->dtype];
	if (numel > UINT64_MAX / esize)
		return MC_TENSOR_HDR_ERR_SHAPE_OVERFLOW;
	if (h->data_bytes != numel * esize)
		return MC_TENSOR_HDR_ERR_DATA_SIZE;
	return MC_TENSOR_HDR_OK;
}

enum mc_tensor_hdr_status mc_tensor_hdr_decode(const void *buf, uint64_t len,
					       struct mc_tensor_hdr *hdr_out)
{
	struct mc_tensor_hdr h;
	enum mc_tensor_hdr_status st;

	if (len < MC_TENSOR_HDR_SIZE)
		return MC_TENSOR_HDR_ERR_SHORT;
	memcpy(&h, buf, sizeof(h));
	st = mc_tensor_hdr_validate(&h, len);
	if (st == MC_TENSOR_HDR_OK)
		*hdr_out = h;
	return st;
}
