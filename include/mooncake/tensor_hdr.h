/*
 * mooncake/tensor_hdr.h - the stored-tensor header: the 304 bytes that
 * precede a tensor's raw bytes when a tensor is kept in the store.
 *
 * Upstream's put_tensor writes [header][payload] under one key (spec
 * store.md 1.12); the Python binding (mooncake.store) and any C program
 * that wants to read or write the same objects share this codec, so the
 * format has one definition.  The header is in native byte order with
 * natural alignment and no padding: struct mc_tensor_hdr below is the
 * byte layout itself.
 *
 * The codec allocates nothing and shares no state; every function is
 * reentrant.  Writing: mc_tensor_hdr_init(), set dtype, ndim, the shapes,
 * data_bytes (and for a shard, layout_kind and the axes), then
 * mc_tensor_hdr_encode() into the first MC_TENSOR_HDR_SIZE bytes of the
 * object.  Reading: mc_tensor_hdr_decode() over the whole stored object,
 * which accepts a header only if every rule of the format holds for that
 * object's length (mc_tensor_hdr_validate() lists them).  A refusal is
 * MC_ERR_INVALID_PARAMS, like every other mc_status failure, with the rule
 * broken and the offending values as the calling thread's mc_last_error()
 * text (mooncake/log.h).
 */
#ifndef MOONCAKE_TENSOR_HDR_H
#define MOONCAKE_TENSOR_HDR_H

#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MC_TENSOR_MAGIC	   0x4d4f4f4eu /* "MOON" read as a u32 */
#define MC_TENSOR_VERSION  1
#define MC_TENSOR_HDR_SIZE 304
#define MC_TENSOR_MAX_DIMS 8
#define MC_TENSOR_MAX_AXES 4

enum mc_tensor_layout {
	MC_TENSOR_LAYOUT_FULL = 0,  /* the whole tensor */
	MC_TENSOR_LAYOUT_SHARD = 1, /* one shard; the axes say which */
};

/* Axis kinds 0..MC_TENSOR_AXIS_KIND_MAX are valid; this build writes TP. */
#define MC_TENSOR_AXIS_TP	1
#define MC_TENSOR_AXIS_KIND_MAX 4

/* dtype codes, pinned by the format; names are torch's attribute names. */
#define MC_TENSOR_DTYPE_MAP(X)                   \
	X(FLOAT32, 0, "float32", 4)              \
	X(FLOAT64, 1, "float64", 8)              \
	X(INT8, 2, "int8", 1)                    \
	X(UINT8, 3, "uint8", 1)                  \
	X(INT16, 4, "int16", 2)                  \
	X(UINT16, 5, "uint16", 2)                \
	X(INT32, 6, "int32", 4)                  \
	X(UINT32, 7, "uint32", 4)                \
	X(INT64, 8, "int64", 8)                  \
	X(UINT64, 9, "uint64", 8)                \
	X(BOOL, 10, "bool", 1)                   \
	X(FLOAT16, 11, "float16", 2)             \
	X(BFLOAT16, 12, "bfloat16", 2)           \
	X(FLOAT8_E4M3FN, 13, "float8_e4m3fn", 1) \
	X(FLOAT8_E5M2, 14, "float8_e5m2", 1)

enum mc_tensor_dtype {
#define MC__TENSOR_DTYPE_ENUM(name, code, str, size) MC_TENSOR_DTYPE_##name = (code),
	MC_TENSOR_DTYPE_MAP(MC__TENSOR_DTYPE_ENUM)
#undef MC__TENSOR_DTYPE_ENUM
};
#define MC_TENSOR_DTYPE_COUNT 15 /* codes are 0..MC_TENSOR_DTYPE_COUNT-1 */

/* One sharding axis (used with MC_TENSOR_LAYOUT_SHARD). */
struct mc_tensor_axis {
	int32_t kind;	     /* 0..MC_TENSOR_AXIS_KIND_MAX */
	int32_t axis_index;  /* which axis of its kind */
	int32_t shard_rank;  /* 0..shard_count-1 */
	int32_t shard_count; /* >= 1 */
	int32_t split_dim;   /* -1 (replicated) or 0..ndim-1 */
	int32_t reserved;
	int64_t reserved2;
};

struct mc_tensor_hdr {
	uint32_t magic;	      /* MC_TENSOR_MAGIC */
	uint16_t version;     /* MC_TENSOR_VERSION */
	uint16_t header_size; /* MC_TENSOR_HDR_SIZE */
	int32_t dtype;	      /* enum mc_tensor_dtype */
	int32_t ndim;	      /* 0..MC_TENSOR_MAX_DIMS */
	uint32_t layout_kind; /* enum mc_tensor_layout */
	uint32_t reserved_flags;
	uint64_t data_offset; /* where the payload starts: >= MC_TENSOR_HDR_SIZE */
	uint64_t data_bytes;  /* payload length: numel(local_shape) x dtype size */
	int64_t global_shape[MC_TENSOR_MAX_DIMS]; /* the whole tensor; -1 past ndim */
	int64_t local_shape[MC_TENSOR_MAX_DIMS];  /* this object's part; -1 past ndim */
	uint32_t axis_count;			  /* 0..MC_TENSOR_MAX_AXES */
	uint32_t reserved0;
	struct mc_tensor_axis axes[MC_TENSOR_MAX_AXES];
};

/* Element size in bytes of a dtype code; 0 for a code outside the format. */
MC_API size_t mc_tensor_dtype_size(int32_t dtype);
/* Name of a dtype code ("bfloat16"); NULL for a code outside the format. */
MC_API const char *mc_tensor_dtype_name(int32_t dtype);

/* A FULL-layout header with no dimensions and no payload: magic, version,
 * header_size and data_offset set, every shape entry -1, the rest 0. */
MC_API void mc_tensor_hdr_init(struct mc_tensor_hdr *h);

/* Write h as the MC_TENSOR_HDR_SIZE bytes at out (any alignment).  h is
 * written as it is; check it first with mc_tensor_hdr_validate(). */
MC_API void mc_tensor_hdr_encode(const struct mc_tensor_hdr *h, void *out);

/*
 * Check every rule of the format for h heading a stored object of total
 * bytes (header and payload): total >= MC_TENSOR_HDR_SIZE; magic, version,
 * header_size; dtype, ndim, layout and axis count in range; ndim
 * non-negative dimensions in both shapes, -1 past ndim; each axis in range
 * (kind, count >= 1, rank < count, split_dim < ndim); data_offset within
 * [MC_TENSOR_HDR_SIZE, total]; data_bytes equal to both total - data_offset
 * and numel(local_shape) x dtype size, without overflow.  Rules are checked
 * in that order: MC_OK, or MC_ERR_INVALID_PARAMS with the first rule
 * broken recorded by mc_set_error (read it with mc_last_error()).
 */
MC_API mc_status mc_tensor_hdr_validate(const struct mc_tensor_hdr *h, uint64_t total);

/*
 * Decode and validate the header of a stored object: buf holds the
 * object's first min(len, MC_TENSOR_HDR_SIZE) bytes at least (any
 * alignment) and len is the whole object's length.  MC_OK and *hdr_out
 * filled, or MC_ERR_INVALID_PARAMS (the rule broken in mc_last_error(),
 * as for mc_tensor_hdr_validate()) and *hdr_out untouched.
 */
MC_API mc_status mc_tensor_hdr_decode(const void *buf, uint64_t len, struct mc_tensor_hdr *hdr_out);

#ifdef __cplusplus
}
#endif

#endif
