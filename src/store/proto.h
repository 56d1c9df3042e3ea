/*
 * store/proto.h - the binary protocol between store clients and the master.
 *
 * Every message is one frame: a fixed 32-byte little-endian header (magic
 * "MCST", protocol major and minor version, message type, flags, status,
 * request id, payload length) followed by the payload.  Requests and
 * responses share the type number; the RESPONSE flag tells them apart and
 * a response echoes its request's id, so a connection may carry many
 * requests in flight and answers are matched by id, not by order.  Batch
 * operations carry all their items in one frame.  The byte layouts, the
 * version rule and the error conventions are written down in
 * docs/protocol.md ("Store client <-> master protocol").
 *
 * Payloads are sequences of fixed-width little-endian integers, byte
 * strings (u32 length + bytes, any byte allowed) and lists (u32 count +
 * items).  Each payload shape is a C struct below; proto.c describes each
 * one with a field table, and one walker per direction (write, read, free,
 * compare) runs over the tables, so the encoder and the decoder of a
 * message cannot drift apart.
 *
 * Decoding is strict and canonical: a payload either decodes completely,
 * with no bytes left over, or fails with MC_ERR_PROTOCOL; booleans and
 * presence bytes must be 0 or 1, strings and keys respect their maximum
 * lengths, and a list count is checked against the bytes that remain
 * before anything is allocated.  Re-encoding a decoded payload therefore
 * gives back the same bytes, which the fuzz target checks.  What the codec
 * does not judge is meaning: an empty key, a zero length or an unknown
 * enum value decodes fine so the master can answer with the right code.
 *
 * Ownership: the caller owns what it passes to the encoders.  Decoders
 * write into caller-provided structs and allocate every string and list
 * they fill (strings are NUL-terminated after their len bytes, and may
 * contain NULs themselves); the matching _release frees them.  Threads:
 * every function here is reentrant; a struct mc_buf or mc_reader belongs
 * to one thread at a time.
 */
#ifndef MC_STORE_PROTO_H
#define MC_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/buf.h"
#include "mooncake/status.h"

/* ------------------------------------------------------------------------ */
/* Protocol constants                                                        */

#define MC_PROTO_MAGIC	     0x5453434Du /* "MCST" on the wire */
#define MC_STORE_PROTO_MAJOR 1
#define MC_STORE_PROTO_MINOR                                                               \
	15 /* 1: BatchReplicaClear; 2: the SSD tier (64..71); 3: GetFsdir; 4: PutEnd and   \
	    * PutRevoke(DISK) name the replica id; 5: ReportUnreachable; 6: ReportCorrupt; \
	    * 7: copy and move tasks (10..14); 8: ChangeReplica (80, ours); 9: chunk       \
	    * checksums (PutEnd, BatchPutEnd, BatchGetReplicaList tails); 10: chunk-sum    \
	    * trailers (PutStart, BatchPutStart, GetReplicaList, BatchGetReplicaList       \
	    * tails); 11: a promoter writes the trailer of a promoted trailer object;      \
	    * 12: PutCredit (44, ours: put credits); 13: the spoil tails of Remove,        \
	    * BatchRemove, UpsertStart and BatchUpsertStart answers, SpoilDone (45);       \
	    * 14: Ping's answer names client_ttl and a remount wait (the holder's fence);  \
	    * 15: holders spoil (Ping's answer lists blocks), replica lists mark the       \
	    * replicas a reader must not cache (GetReplicaList, BatchGetReplicaList) */
#define MC_PROTO_HDR_LEN 32
/*
 * Chunk checksums (minor 9, docs/design.md "Integrity"): an object larger
 * than one chunk also carries the XXH3-64 of each MC_STORE_CHUNK bytes
 * (the last chunk may be shorter), so a read of part of it can be checked
 * by reading only the chunks it touches.  Pinned by the protocol: the
 * count of an object's list is always mc_store_chunk_count(size).
 */
#define MC_STORE_CHUNK (256u << 10)
static inline uint64_t mc_store_chunk_count(uint64_t size)
{
	return size > MC_STORE_CHUNK ? (size + MC_STORE_CHUNK - 1) / MC_STORE_CHUNK : 0;
}
/*
 * Chunk-sum trailers (minor 10, docs/design.md "Integrity"): an object of
 * more than one trailer chunk (MC_STORE_TCHUNK) and at most
 * MC_STORE_TRAILER_MAX bytes whose writer asks for it (PutStart's
 * trailer_len) is followed in every replica by its trailer: the XXH3-64 of
 * each MC_STORE_TCHUNK bytes of it (the last chunk may be shorter), little-
 * endian u64, mc_store_trailer_len(size) bytes in all.  The master
 * allocates size + trailer, lists size, and keeps one checksum: the
 * XXH3-64 of the trailer's bytes (a ReplicaList's table_cksum).  A read
 * of any part is checked by the chunks it touches and the trailer.
 */
#define MC_STORE_TCHUNK	     (16u << 10)
#define MC_STORE_TRAILER_MAX (448ull << 20) /* its trailer: 224 KiB */
static inline uint64_t mc_store_trailer_len(uint64_t size)
{
	return 8 * ((size + MC_STORE_TCHUNK - 1) / MC_STORE_TCHUNK);
}
/* An object of size bytes may carry a trailer. */
static inline bool mc_store_trailer_fits(uint64_t size)
{
	return size > MC_STORE_TCHUNK && size <= MC_STORE_TRAILER_MAX;
}
/* The object size of an allocation of n = size + mc_store_trailer_len(size)
 * bytes: n holds ceil(n / (MC_STORE_TCHUNK + 8)) chunks and their sums. */
static inline uint64_t mc_store_untrailer(uint64_t n)
{
	return n - 8 * ((n + MC_STORE_TCHUNK + 7) / (MC_STORE_TCHUNK + 8));
}
/* The minor version the frames this process encodes carry
 * (MC_STORE_PROTO_MINOR); tests lower it to play an older peer. */
unsigned mc_store_proto_minor(void);
void mc_store_proto_minor_set(unsigned minor);
/* Largest payload the encoders produce and the default decode limit. */
#define MC_PROTO_MAX_PAYLOAD (64u << 20)
/* Longest key (bytes).  Longer keys are refused by the encoder
 * (MC_ERR_INVALID_KEY) and are a protocol violation on receipt. */
#define MC_STORE_KEY_MAX 4096u
/* Longest other byte string: names, endpoints, tenants, patterns, texts. */
#define MC_PROTO_STR_MAX 65536u

enum mc_proto_flags {
	MC_PROTO_F_RESPONSE = 1u << 0,
};

/* ------------------------------------------------------------------------ */
/* Little-endian writers over struct mc_buf (base/buf.h)                     */

/*
 * Frames are appended to a struct mc_buf; its errors are sticky, so an
 * encoder checks once at the end.  The encoders below restore len (and
 * clear err) when they fail, leaving earlier frames in the buffer intact;
 * several frames may be appended before one send.  Raw bytes go in with
 * mc_buf_append.
 */
void mc_buf_put_u8(struct mc_buf *b, uint8_t v);
void mc_buf_put_u16(struct mc_buf *b, uint16_t v);
void mc_buf_put_u32(struct mc_buf *b, uint32_t v);
void mc_buf_put_u64(struct mc_buf *b, uint64_t v);

/* ------------------------------------------------------------------------ */
/* Bounds-checked reader                                                     */

/*
 * A cursor over received bytes.  Every read checks what remains and fails
 * with MC_ERR_PROTOCOL (and mc_set_error naming the offset) instead of
 * reading past the end.  alloc_bytes counts what decoders allocated
 * through this reader, so tests can check that no input makes the decoder
 * allocate much more than the input's own size.
 */
struct mc_reader {
	const uint8_t *p;
	size_t left;
	size_t pos;	    /* bytes consumed so far, for error messages */
	size_t alloc_bytes; /* total bytes allocated by decoders reading from here */
};

void mc_reader_init(struct mc_reader *r, const void *data, size_t len);
mc_status mc_reader_u8(struct mc_reader *r, uint8_t *out);
mc_status mc_reader_u16(struct mc_reader *r, uint16_t *out);
mc_status mc_reader_u32(struct mc_reader *r, uint32_t *out);
mc_status mc_reader_u64(struct mc_reader *r, uint64_t *out);
/* Borrow the next n bytes (valid while the underlying data lives). */
mc_status mc_reader_bytes(struct mc_reader *r, size_t n, const uint8_t **out);
/*
 * Read a u32 item count and check that count items of at least min_item
 * bytes each (min_item >= 1) fit in what remains: the check comes before
 * any allocation, so a forged count cannot cause a large one.
 */
mc_status mc_reader_count(struct mc_reader *r, size_t min_item, uint32_t *out);

/* ------------------------------------------------------------------------ */
/* Frame header                                                              */

struct mc_proto_hdr {
	uint8_t major;	      /* protocol major version of the sender */
	uint8_t minor;	      /* protocol minor version of the sender */
	uint16_t type;	      /* enum mc_store_msg_type */
	uint16_t flags;	      /* enum mc_proto_flags; unknown bits are ignored */
	int32_t status;	      /* responses: mc_status of the call; requests: 0 */
	uint64_t req_id;      /* chosen by the client, echoed in the response */
	uint32_t payload_len; /* bytes after the header */
	uint32_t view;	      /* responses of an HA master: its view version (low 32 bits) */
};

/* Where the view sits in a header (the master stamps its answers there). */
#define MC_PROTO_HDR_VIEW_OFF 28

/* Writes the 32 header bytes (magic included; reserved bytes zero). */
void mc_proto_hdr_encode(const struct mc_proto_hdr *h, uint8_t out[MC_PROTO_HDR_LEN]);
/*
 * Parses the first 32 bytes of a frame.  MC_OK; MC_ERR_PROTOCOL (bad
 * magic); MC_ERR_INVALID_VERSION (a major version other than ours) and
 * MC_ERR_TOO_LARGE (payload_len above max_payload): *out is filled in
 * these two cases as well, so the master can refuse the request by id.
 */
mc_status mc_proto_hdr_decode(const uint8_t in[MC_PROTO_HDR_LEN], uint32_t max_payload,
			      struct mc_proto_hdr *out);
/*
 * For stream readers: look at the bytes received so far.  MC_OK: a whole
 * frame of *frame_len_out bytes starts at buf, header in *hdr_out.
 * MC_INPROGRESS: no whole frame yet; once the 32 header bytes are there,
 * *hdr_out and *frame_len_out are filled anyway so the caller can size its
 * receive buffer.  A wrong magic is reported (MC_ERR_PROTOCOL) as soon as
 * the first bytes show it; otherwise the errors of mc_proto_hdr_decode,
 * with *hdr_out filled where that function fills it.  Frames that follow
 * in buf are left alone (pipelining).
 */
mc_status mc_proto_frame_peek(const void *buf, size_t len, uint32_t max_payload,
			      struct mc_proto_hdr *hdr_out, size_t *frame_len_out);

/* ------------------------------------------------------------------------ */
/* Value types                                                               */

/* A byte string.  Decoded ones are NUL-terminated after len bytes. */
struct mc_proto_str {
	const char *ptr; /* may be NULL when len is 0 */
	uint32_t len;
};

/* A C string as a protocol string (NULL gives the empty string). */
static inline struct mc_proto_str mc_proto_str_c(const char *s)
{
	struct mc_proto_str v = {s, s ? (uint32_t)strlen(s) : 0};
	return v;
}

struct mc_proto_opt_u64 {
	bool present;
	uint64_t value; /* meaningful only when present */
};

/* Upstream's UUID: a pair of u64, printed "<first>-<second>". */
struct mc_store_uuid {
	uint64_t first;
	uint64_t second;
};

enum mc_store_replica_type {
	MC_STORE_REPLICA_MEMORY = 0,
	MC_STORE_REPLICA_DISK = 1,
	MC_STORE_REPLICA_LOCAL_DISK = 2,
	MC_STORE_REPLICA_NOF_SSD = 3,
	MC_STORE_REPLICA_ALL = 4, /* PutEnd/PutRevoke: every replica of the object */
	MC_STORE_REPLICA_DFS = 100,
};

enum mc_store_replica_status {
	MC_STORE_REPLICA_UNDEFINED = 0,
	MC_STORE_REPLICA_INITIALIZED = 1,
	MC_STORE_REPLICA_PROCESSING = 2,
	MC_STORE_REPLICA_COMPLETE = 3,
	MC_STORE_REPLICA_REMOVED = 4,
	MC_STORE_REPLICA_FAILED = 5,
};

enum mc_store_client_status {
	MC_STORE_CLIENT_UNDEFINED = 0,
	MC_STORE_CLIENT_OK = 1,
	MC_STORE_CLIENT_NEED_REMOUNT = 2,
};

enum mc_store_soft_pin_action {
	MC_STORE_SOFT_PIN_PRESERVE = 0,
	MC_STORE_SOFT_PIN_ENABLE = 1,
	MC_STORE_SOFT_PIN_DISABLE = 2,
};

/* A segment a client contributes (spec store.md 2.2). */
struct mc_store_segment {
	struct mc_store_uuid id;
	struct mc_proto_str name; /* the client's host:port */
	uint64_t base;		  /* address in the owner's address space */
	uint64_t size;
	struct mc_proto_str te_endpoint;
	struct mc_proto_str protocol; /* "tcp", "rdma", ... */
	struct mc_proto_str host_id;
};

/* Placement and pinning of a put (spec store.md 2.2, 2.5, 2.7). */
struct mc_store_replicate_config {
	uint32_t replica_num;
	uint32_t nof_replica_num;
	uint32_t dfs_replica_num;
	uint8_t soft_pin_action; /* enum mc_store_soft_pin_action */
	struct mc_proto_opt_u64 soft_pin_ttl_ms;
	bool with_hard_pin;
	bool prefer_alloc_in_same_node;
	uint8_t data_type;		       /* upstream's ObjectDataType, 0 = UNKNOWN */
	struct mc_proto_str preferred_segment; /* non-empty: replaces the list */
	uint32_t n_preferred_segments;
	struct mc_proto_str *preferred_segments;
	uint32_t n_preferred_nof_segments;
	struct mc_proto_str *preferred_nof_segments;
	struct mc_proto_str host_id; /* the writer's host, for local-first placement */
};

/*
 * Where one copy of an object lives.  Which fields are on the wire depends
 * on type: MEMORY and NOF_SSD carry address, segment_name,
 * transport_endpoint and protocol; DISK carries file_path; LOCAL_DISK
 * carries client_id and transport_endpoint; DFS carries file_path, offset,
 * aligned_size and shard_idx.  The others stay zero.
 */
struct mc_store_replica {
	uint64_t id;
	uint8_t status; /* enum mc_store_replica_status */
	uint8_t type;	/* enum mc_store_replica_type, never ALL */
	uint64_t size;	/* object bytes held by this replica */
	uint64_t address;
	struct mc_proto_str segment_name;
	struct mc_proto_str transport_endpoint;
	struct mc_proto_str protocol;
	struct mc_proto_str file_path;
	uint64_t offset;
	uint64_t aligned_size;
	uint32_t shard_idx;
	struct mc_store_uuid client_id;
};

/* ------------------------------------------------------------------------ */
/* Message bodies: one struct per payload shape                              */

/* Carries nothing; void results use it. */
struct mc_store_empty {
	uint8_t unused;
};

/* ServiceReady, both ways: the sender's software version (informational;
 * compatibility is decided by the header's major version). */
struct mc_store_hello {
	struct mc_proto_str version;
};

struct mc_store_client_req {
	struct mc_store_uuid client_id;
};

/* GetFsdir: the legacy DISK tier's directory, <root_fs_dir>/<cluster_id>,
 * or "" when the master runs without --root_fs_dir. */
struct mc_store_fsdir_resp {
	struct mc_proto_str fsdir;
};

/* ReportUnreachable: segments (by name) whose memory a read could not reach. */
struct mc_store_unreachable_req {
	struct mc_store_uuid client_id; /* the reporter */
	uint32_t n_segments;
	struct mc_proto_str *segments;
};

/* ReportCorrupt: replicas whose bytes failed the object's checksum. */
struct mc_store_corrupt_item {
	struct mc_proto_str key;
	uint64_t replica_id; /* the Replica's id in the list the read came from */
};

struct mc_store_corrupt_req {
	struct mc_store_uuid client_id; /* the reporter */
	struct mc_proto_str tenant;
	uint32_t n_items;
	struct mc_store_corrupt_item *items;
};

/*
 * The holder's fence (minor 14, ours; docs/design.md "Gets without the
 * master"): Ping's answer to a pinger of minor 14 or later names the
 * master's client_ttl, so a client whose pings stop being answered takes
 * its segments' memory out of its engine before the master can expire it
 * (client_fence.c), and how long until every lease this master granted
 * before it last expired a client has ended: a fenced client told
 * NEED_REMOUNT puts its memory back and remounts only then.
 */
#define MC_STORE_FENCE_MINOR 14u
/*
 * Holders spoil (minor 15, ours; docs/design.md "Gets without the
 * master"): an override whose writer spoils nothing (minor 12 or older,
 * upstream's) or a force RemoveByRegex / RemoveAll parks a leased
 * object's memory blocks and lists each to its segment's owner in its
 * next Ping answer, at most MC_STORE_HSPOIL_MAX an answer (the rest in the
 * next ones); the owner complements the first min(MC_STORE_SPOIL_LEN,
 * size) bytes in its own memory, within spoil_ms of its ping's send less
 * a margin, and names the ids (not 0) in a SpoilDone.  A replica list to a
 * reader of minor 15 marks the replicas whose owner is older than 15
 * (neither fences nor spoils): the reader does not cache them.
 */
#define MC_STORE_HSPOIL_MINOR 15u
#define MC_STORE_HSPOIL_MAX   1024u
struct mc_store_hspoil {
	uint64_t id; /* for SpoilDone; 0: none needed (an upsert's block) */
	uint64_t address;
	uint64_t size; /* the value's */
};
struct mc_store_ping_resp {
	int64_t view_version;
	uint8_t client_status; /* enum mc_store_client_status */
	/* minor 14, tails: the master's client_ttl, and the ms until the
	 * leases granted before its latest client expiry end (0: none left) */
	struct mc_proto_opt_u64 client_ttl_ms;
	struct mc_proto_opt_u64 remount_wait_ms;
	/* minor 15, tails: blocks of this client's own segments to spoil
	 * (holders spoil, below) and how long the master keeps them parked */
	uint32_t n_spoil;
	struct mc_store_hspoil *spoil;
	struct mc_proto_opt_u64 spoil_ms;
};

struct mc_store_mount_req {
	struct mc_store_uuid client_id;
	struct mc_store_segment segment;
};

struct mc_store_remount_req {
	struct mc_store_uuid client_id;
	uint32_t n_segments;
	struct mc_store_segment *segments;
};

struct mc_store_unmount_req {
	struct mc_store_uuid client_id;
	struct mc_store_uuid segment_id;
};

struct mc_store_graceful_unmount_req {
	struct mc_store_uuid client_id;
	struct mc_store_uuid segment_id;
	uint64_t grace_period_ms;
};

/* tenant: "" means the default tenant, except in RemoveAll (all tenants). */
struct mc_store_key_req {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
};

struct mc_store_keys_req {
	struct mc_proto_str tenant;
	uint32_t n_keys;
	struct mc_proto_str *keys;
	/* minor 9, a tail: MC_STORE_WANT_CHUNKS asks BatchGetReplicaList for
	 * the objects' chunk checksums; other bits are sent as 0, ignored */
	struct mc_proto_opt_u64 want;
};
#define MC_STORE_WANT_CHUNKS 1u

/* One object's chunk checksums (MC_STORE_CHUNK): none, or
 * mc_store_chunk_count(size) of them. */
struct mc_store_chunk_sums {
	uint32_t n;
	uint64_t *v;
};

struct mc_store_regex_req {
	struct mc_proto_str tenant;
	struct mc_proto_str pattern; /* ECMAScript, search semantics */
};

struct mc_store_exist_resp {
	bool exists;
};

struct mc_store_exist_item {
	int32_t status; /* MC_OK, or why this key could not be checked */
	bool exists;	/* on the wire only when status is MC_OK */
};

struct mc_store_batch_exist_resp {
	uint32_t n_items;
	struct mc_store_exist_item *items; /* in request order */
};

/* GetReplicaList's answer: readable replicas and the lease granted. */
struct mc_store_replica_list {
	uint64_t lease_ttl_ms;
	struct mc_proto_opt_u64 checksum;
	uint32_t n_replicas;
	struct mc_store_replica *replicas;
	/* minor 10, a tail of GetReplicaList's answer only (a batch carries
	 * it in its own tail, a regex list not at all): the object has a
	 * trailer, whose XXH3-64 this is; checksum is then absent.  Listed
	 * only to a reader of minor 10 or later. */
	struct mc_proto_opt_u64 table_cksum;
	/* minor 15, a tail of GetReplicaList's answer only (a batch carries
	 * it in its own tail): bit i set, replicas[i] must not be cached (its
	 * owner is older than MC_STORE_HSPOIL_MINOR); a reader caches no
	 * replica at index 64 or later.  Listed to a reader of minor 15. */
	struct mc_proto_opt_u64 nocache;
};

struct mc_store_replica_list_item {
	int32_t status;			   /* MC_OK or the key's own error */
	struct mc_store_replica_list list; /* on the wire only when status is MC_OK */
};

struct mc_store_batch_replica_list {
	uint32_t n_items;
	struct mc_store_replica_list_item *items; /* in request order */
	/* minor 9, a tail, only when the request wanted it: per item (n_chunks
	 * is n_items, or 0) the object's chunk checksums */
	uint32_t n_chunks;
	struct mc_store_chunk_sums *chunks;
	/* minor 10, a tail: per item (n_tables is n_items, or 0: no item has
	 * one) its list's table_cksum */
	uint32_t n_tables;
	struct mc_proto_opt_u64 *tables;
	/* minor 15, a tail: per item (n_nocache is n_items, or 0: every
	 * replica may be cached) its list's nocache mask */
	uint32_t n_nocache;
	uint64_t *nocache;
};

struct mc_store_keyed_replica_list {
	struct mc_proto_str key;
	struct mc_store_replica_list list;
};

struct mc_store_regex_replica_list {
	uint32_t n_items;
	struct mc_store_keyed_replica_list *items;
};

struct mc_store_put_start_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint64_t value_len;
	struct mc_proto_str group_id; /* "" = no object group */
	struct mc_store_replicate_config config;
	/* minor 10, a tail: the trailer the writer will put after the value
	 * (mc_store_trailer_len(value_len), or absent / 0: none) */
	struct mc_proto_opt_u64 trailer_len;
};

/*
 * Spoil tails (minor 13, ours; docs/design.md "Gets without the master"):
 * an override (a force Remove or BatchRemove, an UpsertStart or
 * BatchUpsertStart to another size) of an object under a read lease, from
 * a writer of minor 13 or later, parks the old memory blocks until the
 * lease ends and lists them here; the writer overwrites the first
 * min(8, size) bytes of each (their complement) before its call returns,
 * within spoil_ms of the master's answer (the blocks stay parked that
 * long), so a location cached by another client fails its check.
 * Listed to a writer of minor 13 or later only; empty: nothing to spoil.
 */
#define MC_STORE_SPOIL_LEN   8u
#define MC_STORE_SPOIL_MINOR 13u

/* One replica list per key, the descriptors the writer must fill. */
struct mc_store_put_start_resp {
	uint32_t n_replicas;
	struct mc_store_replica *replicas;
	/* minor 13, UpsertStart only: the spoil tails */
	uint32_t n_spoil;
	struct mc_store_replica *spoil;
	struct mc_proto_opt_u64 spoil_ms;
};

struct mc_store_put_item {
	struct mc_proto_str key;
	uint64_t value_len;
	struct mc_proto_str group_id;
};

struct mc_store_batch_put_start_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	struct mc_store_replicate_config config; /* shared by every item */
	uint32_t n_items;
	struct mc_store_put_item *items;
	/* minor 10, a tail: per item (n_trailers is n_items, or 0: none) its
	 * trailer_len, as PutStart's */
	uint32_t n_trailers;
	uint64_t *trailers;
};

struct mc_store_put_start_item {
	int32_t status; /* MC_OK or the key's own error */
	uint32_t n_replicas;
	struct mc_store_replica *replicas; /* on the wire only when status is MC_OK */
};

struct mc_store_batch_put_start_resp {
	uint32_t n_items;
	struct mc_store_put_start_item *items;
	/* minor 13, BatchUpsertStart only: the spoil tails, every item's */
	uint32_t n_spoil;
	struct mc_store_replica *spoil;
	struct mc_proto_opt_u64 spoil_ms;
};

struct mc_store_put_end_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	uint8_t replica_type; /* enum mc_store_replica_type */
	struct mc_proto_str key;
	struct mc_proto_opt_u64 checksum;
	/* minor 4, DISK only: the id of the DISK replica this write was given
	 * (its PutStart descriptor); an older write's report then ends nothing */
	struct mc_proto_opt_u64 replica_id;
	/* minor 9, a tail: the object's chunk checksums (empty: none) */
	uint32_t n_chunk_sums;
	uint64_t *chunk_sums;
};

struct mc_store_object_meta {
	struct mc_proto_str key;
	struct mc_proto_opt_u64 checksum;
};

struct mc_store_batch_put_end_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	uint8_t replica_type;
	uint32_t n_items;
	struct mc_store_object_meta *items;
	/* minor 9, a tail: per item (n_chunks is n_items, or 0: none) */
	uint32_t n_chunks;
	struct mc_store_chunk_sums *chunks;
};

struct mc_store_put_revoke_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	uint8_t replica_type;
	struct mc_proto_str key;
	struct mc_proto_opt_u64 replica_id; /* minor 4, DISK only: as in PutEnd */
};

struct mc_store_batch_put_revoke_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	uint8_t replica_type;
	uint32_t n_keys;
	struct mc_proto_str *keys;
};

/*
 * PutCredit (minor 12, ours; docs/design.md "Put credits"): a client that
 * holds credits (blocks the master reserved for it in a holder's segment)
 * writes small objects into them itself, then completes each with one item
 * here: the master checks the block against the credit (id, address and
 * size; MC_ERR_INVALID_WRITE when this client holds no such credit) and
 * records the object complete, as PutEnd does.  The same frame hands back
 * the credits in release and asks for new ones of the sizes in want
 * (placed as a put preferring segment would be, when it is not ""); the
 * answer has one status per item and the granted blocks (replica
 * descriptors whose id is the credit's id, size the block's).
 */
#define MC_STORE_CREDIT_MAX_BLOCK (64ull << 20) /* the largest block a credit is for */
#define MC_STORE_CREDIT_MAX_WANT  256u		/* credits one PutCredit may ask for */

struct mc_store_credit_item {
	struct mc_proto_str key;
	uint64_t value_len;
	uint64_t trailer_len; /* mc_store_trailer_len(value_len), or 0 */
	uint64_t credit;      /* the credit's id */
	uint64_t address;     /* the credit's block */
	struct mc_proto_opt_u64 checksum;
};

struct mc_store_put_credit_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	struct mc_proto_str segment; /* want's blocks preferably there ("": any) */
	uint32_t n_items;
	struct mc_store_credit_item *items;
	uint32_t n_chunks; /* per item (n_items), or 0: none */
	struct mc_store_chunk_sums *chunks;
	uint32_t n_release;
	uint64_t *release; /* credit ids given back unused */
	uint32_t n_want;
	uint64_t *want; /* block sizes asked for */
};

struct mc_store_put_credit_resp {
	uint32_t n_items;
	int32_t *statuses;
	uint32_t n_credits;
	struct mc_store_replica *credits;
};

/* Per-key results of BatchPutEnd/Revoke, in request order. */
struct mc_store_batch_status_resp {
	uint32_t n_items;
	int32_t *statuses;
};

struct mc_store_remove_req {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	bool force;
};

struct mc_store_remove_regex_req {
	struct mc_proto_str tenant;
	struct mc_proto_str pattern;
	bool force;
};

struct mc_store_remove_all_req {
	struct mc_proto_str tenant; /* "" = every tenant */
	bool force;
};

struct mc_store_batch_remove_req {
	struct mc_proto_str tenant;
	bool force;
	uint32_t n_keys;
	struct mc_proto_str *keys;
};

/* SpoilDone (45, minor 13, ours): the writer spoiled (or gave up on) the
 * blocks of these ids (a force remove's spoil list, Replica.id; an
 * upsert's are 0 and never sent): the master may reuse them now rather
 * than at the lease's end.  Unknown ids are ignored. */
struct mc_store_spoil_done_req {
	uint32_t n_ids;
	uint64_t *ids;
};

/* Remove's answer: nothing, or (minor 13) the spoil tails. */
struct mc_store_remove_resp {
	uint32_t n_spoil;
	struct mc_store_replica *spoil;
	struct mc_proto_opt_u64 spoil_ms;
};

/* BatchRemove's: per-key results in request order, then (minor 13) the
 * spoil tails, every key's. */
struct mc_store_batch_remove_resp {
	uint32_t n_items;
	int32_t *statuses;
	uint32_t n_spoil;
	struct mc_store_replica *spoil;
	struct mc_proto_opt_u64 spoil_ms;
};

struct mc_store_count_resp {
	int64_t count;
};

/* BatchReplicaClear: only objects client_id wrote, lease expired.
 * segment_name "" = whole objects, else only the replicas on that segment. */
struct mc_store_replica_clear_req {
	struct mc_store_uuid client_id;
	struct mc_proto_str tenant;
	struct mc_proto_str segment_name;
	uint32_t n_keys;
	struct mc_proto_str *keys;
};

/* The keys cleared, in request order. */
struct mc_store_keys_resp {
	uint32_t n_keys;
	struct mc_proto_str *keys;
};

/* ---- the SSD tier (messages 64..71, minor version 2) ---- */

/* A (tenant, key) pair: removals, disk evictions. */
struct mc_store_tenant_key {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
};

/* MountLocalDiskSegment: the client's SSD tier, reachable for loads at
 * transport_endpoint (its offload RPC host:port, which LOCAL_DISK replica
 * descriptors carry). */
struct mc_store_mount_local_disk_req {
	struct mc_store_uuid client_id;
	bool enable_offloading;
	struct mc_proto_str transport_endpoint;
};

struct mc_store_offload_heartbeat_req {
	struct mc_store_uuid client_id;
	bool enable_offloading; /* false: hand out no offload work this time */
	uint32_t max_items;	/* at most this many offload items (0: the master's choice) */
};

/* An object to copy to disk: its memory replica lies in the client's own
 * segment at address (the client's address space). */
struct mc_store_offload_item {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint64_t size;
	uint64_t address;
};

struct mc_store_offload_heartbeat_resp {
	uint32_t n_offload;
	struct mc_store_offload_item *offload;
	uint32_t n_removes; /* disk copies the client must delete */
	struct mc_store_tenant_key *removes;
	bool remove_all; /* wipe the whole disk store */
};

/* status 0: on the client's disk (or, re-registering, found there). */
struct mc_store_offload_result {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint64_t size;
	int32_t status;
};

struct mc_store_notify_offload_req {
	struct mc_store_uuid client_id;
	uint32_t n_items;
	struct mc_store_offload_result *items;
};

struct mc_store_ssd_capacity_req {
	struct mc_store_uuid client_id;
	uint64_t total;
	uint64_t used;
};

struct mc_store_evict_disk_req {
	struct mc_store_uuid client_id;
	uint32_t n_items;
	struct mc_store_tenant_key *items;
};

struct mc_store_promotion_heartbeat_req {
	struct mc_store_uuid client_id;
	uint32_t max_items; /* 0: the master's --promotion_max_per_heartbeat */
};

/* Read key from the client's disk into replica (a PROCESSING MEMORY
 * replica the master allocated), then NotifyPromotion. */
struct mc_store_promotion_task {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint64_t size;
	struct mc_store_replica replica;
};

struct mc_store_promotion_heartbeat_resp {
	uint32_t n_tasks;
	struct mc_store_promotion_task *tasks;
};

/* status 0: replica_id now holds the bytes; otherwise the promotion failed. */
struct mc_store_promotion_result {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint64_t replica_id;
	int32_t status;
};

struct mc_store_notify_promotion_req {
	struct mc_store_uuid client_id;
	uint32_t n_items;
	struct mc_store_promotion_result *items;
};

/* ---- copy and move tasks (spec store.md 1.14; master/tasks.c, store/client_tasks.c) ---- */

enum mc_store_task_type {
	MC_STORE_TASK_REPLICA_COPY = 0,
	MC_STORE_TASK_REPLICA_MOVE = 1,
};

enum mc_store_task_status {
	MC_STORE_TASK_PENDING = 0,
	MC_STORE_TASK_PROCESSING = 1,
	MC_STORE_TASK_FAILED = 2,
	MC_STORE_TASK_SUCCESS = 3,
};

/* CreateCopyTask: copy key's object to each of targets (segment names). */
struct mc_store_copy_task_req {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint32_t n_targets;
	struct mc_proto_str *targets;
};

/* ChangeReplica (ours; paper 4.4's change_replica, no upstream RPC): give
 * key replica_num memory replicas (copy tasks add, extra ones are dropped);
 * 0 only asks how many it has.  Answered with a count_resp. */
struct mc_store_change_replica_req {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	uint32_t replica_num;
};

/* CreateMoveTask: move key's replica on segment source to segment target. */
struct mc_store_move_task_req {
	struct mc_proto_str tenant;
	struct mc_proto_str key;
	struct mc_proto_str source;
	struct mc_proto_str target;
};

/* A task's id: the answer of Create*Task, the request of QueryTask. */
struct mc_store_task_id {
	struct mc_store_uuid id;
};

/* QueryTask's answer (upstream's QueryTaskResponse). */
struct mc_store_task_info {
	struct mc_store_uuid id;
	uint8_t type;	/* enum mc_store_task_type */
	uint8_t status; /* enum mc_store_task_status */
	uint64_t created_at_ms;
	uint64_t updated_at_ms;
	struct mc_store_uuid assigned_client;
	struct mc_proto_str message;
};

struct mc_store_fetch_tasks_req {
	struct mc_store_uuid client_id;
	uint32_t batch; /* most tasks wanted */
};

/* A task handed to the client that owns its source replica: write the
 * source's bytes (in the client's own segment) to every target (PROCESSING
 * blocks the master holds for the task), then MarkTaskToComplete.  The
 * master did what upstream's CopyStart/MoveStart do when it handed it
 * out; MarkTaskToComplete does CopyEnd/MoveEnd or the Revoke. */
struct mc_store_task_assignment {
	struct mc_store_uuid id;
	uint8_t type;		     /* enum mc_store_task_type */
	struct mc_proto_str payload; /* upstream's JSON: key, source, targets */
	uint64_t created_at_ms;
	uint32_t max_retry_attempts;
	struct mc_store_replica source;
	uint32_t n_targets;
	struct mc_store_replica *targets;
};

struct mc_store_fetch_tasks_resp {
	uint32_t n_tasks;
	struct mc_store_task_assignment *tasks;
};

/* MarkTaskToComplete: status MC_OK = the bytes are written (commit). */
struct mc_store_task_done_req {
	struct mc_store_uuid client_id;
	struct mc_store_uuid task_id;
	int32_t status;
	struct mc_proto_str message;
};

/* ---- client <-> client: the SSD tier's offload RPC (store/offload_server.c) ---- */

/* An object a reader wants from the owner of its LOCAL_DISK replica. */
struct mc_store_offload_rpc_item {
	struct mc_proto_str tenant; /* the reader's tenant ("" = default) */
	struct mc_proto_str key;
	uint64_t size; /* the replica's size, as the master gave it */
};

struct mc_store_offload_rpc_get_req {
	uint32_t n_items;
	struct mc_store_offload_rpc_item *items;
};

/* Where an object was staged: address in the owner's segment, valid until
 * ReleaseOffloadBuffer or gc_ttl_ms after the answer was sent. */
struct mc_store_offload_rpc_buf {
	int32_t status; /* MC_OK, or why this object was not staged */
	uint64_t address;
};

struct mc_store_offload_rpc_get_resp {
	uint64_t batch_id;
	struct mc_proto_str segment; /* the owner's Transfer Engine segment name */
	uint64_t gc_ttl_ms;
	uint32_t n_items;
	struct mc_store_offload_rpc_buf *items; /* in request order */
};

struct mc_store_offload_rpc_release_req {
	uint64_t batch_id;
};

/* X(name): struct mc_store_<name>; generates mc_store_<name>_release() and
 * mc_store_<name>_equal(); release only what a decoder filled. */
#define MC_STORE_BODY_MAP(X)        \
	X(empty)                    \
	X(hello)                    \
	X(fsdir_resp)               \
	X(client_req)               \
	X(ping_resp)                \
	X(unreachable_req)          \
	X(corrupt_req)              \
	X(copy_task_req)            \
	X(change_replica_req)       \
	X(move_task_req)            \
	X(task_id)                  \
	X(task_info)                \
	X(fetch_tasks_req)          \
	X(fetch_tasks_resp)         \
	X(task_done_req)            \
	X(mount_req)                \
	X(remount_req)              \
	X(unmount_req)              \
	X(graceful_unmount_req)     \
	X(key_req)                  \
	X(keys_req)                 \
	X(regex_req)                \
	X(exist_resp)               \
	X(batch_exist_resp)         \
	X(replica_list)             \
	X(batch_replica_list)       \
	X(regex_replica_list)       \
	X(put_start_req)            \
	X(put_start_resp)           \
	X(batch_put_start_req)      \
	X(batch_put_start_resp)     \
	X(put_end_req)              \
	X(batch_put_end_req)        \
	X(put_revoke_req)           \
	X(batch_put_revoke_req)     \
	X(batch_status_resp)        \
	X(put_credit_req)           \
	X(spoil_done_req)           \
	X(put_credit_resp)          \
	X(remove_req)               \
	X(remove_regex_req)         \
	X(remove_all_req)           \
	X(batch_remove_req)         \
	X(count_resp)               \
	X(remove_resp)              \
	X(batch_remove_resp)        \
	X(replica_clear_req)        \
	X(keys_resp)                \
	X(mount_local_disk_req)     \
	X(offload_heartbeat_req)    \
	X(offload_heartbeat_resp)   \
	X(notify_offload_req)       \
	X(ssd_capacity_req)         \
	X(evict_disk_req)           \
	X(promotion_heartbeat_req)  \
	X(promotion_heartbeat_resp) \
	X(notify_promotion_req)     \
	X(offload_rpc_get_req)      \
	X(offload_rpc_get_resp)     \
	X(offload_rpc_release_req)

/* ------------------------------------------------------------------------ */
/* Messages                                                                  */

/*
 * X(NAME, number, name, request body, response body), one row per master
 * RPC (spec store.md 2.3), then from 96 the client-to-client offload RPC
 * (a client's offload server answers them, the master refuses them); 80 is
 * ours (ChangeReplica, no upstream RPC).
 * Numbers are pinned forever.  Upsert* use the
 * Put* shapes.  GetSize has no RPC of its own: the client asks
 * GetReplicaList and reads the first replica's size, as upstream does.
 */
#define MC_STORE_MSG_MAP(X)                                                                        \
	X(SERVICE_READY, 1, service_ready, hello, hello)                                           \
	X(PING, 2, ping, client_req, ping_resp)                                                    \
	X(MOUNT_SEGMENT, 3, mount_segment, mount_req, empty)                                       \
	X(REMOUNT_SEGMENT, 4, remount_segment, remount_req, empty)                                 \
	X(UNMOUNT_SEGMENT, 5, unmount_segment, unmount_req, empty)                                 \
	X(GRACEFUL_UNMOUNT_SEGMENT, 6, graceful_unmount_segment, graceful_unmount_req, empty)      \
	X(GET_FSDIR, 7, get_fsdir, empty, fsdir_resp)                                              \
	X(REPORT_UNREACHABLE, 8, report_unreachable, unreachable_req, empty)                       \
	X(REPORT_CORRUPT, 9, report_corrupt, corrupt_req, empty)                                   \
	X(CREATE_COPY_TASK, 10, create_copy_task, copy_task_req, task_id)                          \
	X(CREATE_MOVE_TASK, 11, create_move_task, move_task_req, task_id)                          \
	X(QUERY_TASK, 12, query_task, task_id, task_info)                                          \
	X(FETCH_TASKS, 13, fetch_tasks, fetch_tasks_req, fetch_tasks_resp)                         \
	X(MARK_TASK_TO_COMPLETE, 14, mark_task_to_complete, task_done_req, empty)                  \
	X(EXIST_KEY, 16, exist_key, key_req, exist_resp)                                           \
	X(BATCH_EXIST_KEY, 17, batch_exist_key, keys_req, batch_exist_resp)                        \
	X(GET_REPLICA_LIST, 18, get_replica_list, key_req, replica_list)                           \
	X(BATCH_GET_REPLICA_LIST, 19, batch_get_replica_list, keys_req, batch_replica_list)        \
	X(GET_REPLICA_LIST_BY_REGEX, 20, get_replica_list_by_regex, regex_req, regex_replica_list) \
	X(PUT_START, 32, put_start, put_start_req, put_start_resp)                                 \
	X(PUT_END, 33, put_end, put_end_req, empty)                                                \
	X(PUT_REVOKE, 34, put_revoke, put_revoke_req, empty)                                       \
	X(BATCH_PUT_START, 35, batch_put_start, batch_put_start_req, batch_put_start_resp)         \
	X(BATCH_PUT_END, 36, batch_put_end, batch_put_end_req, batch_status_resp)                  \
	X(BATCH_PUT_REVOKE, 37, batch_put_revoke, batch_put_revoke_req, batch_status_resp)         \
	X(UPSERT_START, 38, upsert_start, put_start_req, put_start_resp)                           \
	X(UPSERT_END, 39, upsert_end, put_end_req, empty)                                          \
	X(UPSERT_REVOKE, 40, upsert_revoke, put_revoke_req, empty)                                 \
	X(BATCH_UPSERT_START, 41, batch_upsert_start, batch_put_start_req, batch_put_start_resp)   \
	X(BATCH_UPSERT_END, 42, batch_upsert_end, batch_put_end_req, batch_status_resp)            \
	X(BATCH_UPSERT_REVOKE, 43, batch_upsert_revoke, batch_put_revoke_req, batch_status_resp)   \
	X(PUT_CREDIT, 44, put_credit, put_credit_req, put_credit_resp)                             \
	X(SPOIL_DONE, 45, spoil_done, spoil_done_req, empty)                                       \
	X(REMOVE, 48, remove, remove_req, remove_resp)                                             \
	X(REMOVE_BY_REGEX, 49, remove_by_regex, remove_regex_req, count_resp)                      \
	X(REMOVE_ALL, 50, remove_all, remove_all_req, count_resp)                                  \
	X(BATCH_REMOVE, 51, batch_remove, batch_remove_req, batch_remove_resp)                     \
	X(BATCH_REPLICA_CLEAR, 52, batch_replica_clear, replica_clear_req, keys_resp)              \
	X(MOUNT_LOCAL_DISK_SEGMENT, 64, mount_local_disk_segment, mount_local_disk_req, empty)     \
	X(UNMOUNT_LOCAL_DISK_SEGMENT, 65, unmount_local_disk_segment, client_req, empty)           \
	X(OFFLOAD_OBJECT_HEARTBEAT, 66, offload_object_heartbeat, offload_heartbeat_req,           \
	  offload_heartbeat_resp)                                                                  \
	X(NOTIFY_OFFLOAD_SUCCESS, 67, notify_offload_success, notify_offload_req,                  \
	  batch_status_resp)                                                                       \
	X(REPORT_SSD_CAPACITY, 68, report_ssd_capacity, ssd_capacity_req, empty)                   \
	X(BATCH_EVICT_DISK_REPLICA, 69, batch_evict_disk_replica, evict_disk_req,                  \
	  batch_status_resp)                                                                       \
	X(PROMOTION_OBJECT_HEARTBEAT, 70, promotion_object_heartbeat, promotion_heartbeat_req,     \
	  promotion_heartbeat_resp)                                                                \
	X(NOTIFY_PROMOTION, 71, notify_promotion, notify_promotion_req, batch_status_resp)         \
	X(CHANGE_REPLICA, 80, change_replica, change_replica_req, count_resp)                      \
	X(BATCH_GET_OFFLOAD_OBJECT, 96, batch_get_offload_object, offload_rpc_get_req,             \
	  offload_rpc_get_resp)                                                                    \
	X(RELEASE_OFFLOAD_BUFFER, 97, release_offload_buffer, offload_rpc_release_req, empty)

enum mc_store_msg_type {
#define MC__STORE_MSG_ENUM(NAME, num, name, req, resp) MC_STORE_##NAME = (num),
	MC_STORE_MSG_MAP(MC__STORE_MSG_ENUM)
#undef MC__STORE_MSG_ENUM
};

/* True for the types in MC_STORE_MSG_MAP. */
bool mc_store_msg_known(uint16_t type);
/* The X-macro name for logs ("PUT_START"); "unknown" for unknown types. */
const char *mc_store_msg_name(uint16_t type);

/*
 * A decoded frame.  body holds the request or response struct of
 * hdr.type (per the RESPONSE flag) unless this is an error response
 * (hdr.status != 0), which carries only the error text.
 */
struct mc_store_msg {
	struct mc_proto_hdr hdr;
	struct mc_proto_str error; /* error responses: why (may be empty) */
	union {
#define MC__STORE_BODY_MEMBER(name) struct mc_store_##name name;
		MC_STORE_BODY_MAP(MC__STORE_BODY_MEMBER)
#undef MC__STORE_BODY_MEMBER
	} body;
};

/* ------------------------------------------------------------------------ */
/* Encoding                                                                  */

/*
 * Append one frame to b: a request (status 0), a response (status 0, the
 * body struct of type), or an error response (any non-zero status; the
 * payload is text, NULL for none, cut at MC_PROTO_STR_MAX; any type, so
 * an unknown one can be refused with MC_ERR_NOT_SUPPORTED).  body must
 * point to the struct that MC_STORE_MSG_MAP names for type and direction
 * (it may be NULL for the empty ones).  Returns MC_OK; MC_ERR_INVALID_KEY
 * (a key over MC_STORE_KEY_MAX); MC_ERR_INVALID_PARAMS (unknown type, a
 * string over MC_PROTO_STR_MAX, a NULL pointer with a non-zero length or
 * count, an unknown replica type, status 0 for an error response);
 * MC_ERR_TOO_LARGE (payload over MC_PROTO_MAX_PAYLOAD); MC_ERR_NOMEM.  On
 * failure b is as it was before the call.
 */
mc_status mc_store_request_encode(struct mc_buf *b, uint16_t type, uint64_t req_id,
				  const void *body);
mc_status mc_store_response_encode(struct mc_buf *b, uint16_t type, uint64_t req_id,
				   const void *body);
mc_status mc_store_error_encode(struct mc_buf *b, uint16_t type, uint64_t req_id, mc_status status,
				const char *text);
/* Re-encode a decoded (or hand-built) message, header fields included. */
mc_status mc_store_msg_encode(struct mc_buf *b, const struct mc_store_msg *m);

/* Payload only: append the body of (type, response) without a header. */
mc_status mc_store_body_write(struct mc_buf *b, uint16_t type, bool response, const void *body);

/* ------------------------------------------------------------------------ */
/* Decoding                                                                  */

/*
 * Decode one whole frame (len must be exactly header + payload_len).
 * Returns MC_OK and fills *out, which the caller frees with
 * mc_store_msg_release; or MC_ERR_PROTOCOL (bad magic, wrong length,
 * malformed payload, trailing bytes); MC_ERR_INVALID_VERSION (foreign
 * major version); MC_ERR_TOO_LARGE (payload_len over max_payload);
 * MC_ERR_NOT_SUPPORTED (unknown message type); MC_ERR_NOMEM.  On failure
 * nothing is left allocated in *out; out->hdr is valid after
 * MC_ERR_INVALID_VERSION, MC_ERR_TOO_LARGE and MC_ERR_NOT_SUPPORTED (and
 * after MC_ERR_PROTOCOL from a bad payload) so the master can answer by id.
 */
mc_status mc_store_msg_decode(const void *frame, size_t len, uint32_t max_payload,
			      struct mc_store_msg *out);
void mc_store_msg_release(struct mc_store_msg *m);
/* Same header fields (reserved bytes aside), same error text, same body. */
bool mc_store_msg_equal(const struct mc_store_msg *a, const struct mc_store_msg *b);

/*
 * Payload only: read the body of (type, response) from r into *body_out
 * (zeroed first).  Does not require r to be empty afterwards.  MC_OK,
 * MC_ERR_PROTOCOL, MC_ERR_NOMEM, MC_ERR_NOT_SUPPORTED (unknown type).  On
 * failure *body_out holds nothing.
 */
mc_status mc_store_body_read(struct mc_reader *r, uint16_t type, bool response, void *body_out);
/* Whole payload: as mc_store_body_read, and leftover bytes are MC_ERR_PROTOCOL. */
mc_status mc_store_payload_decode(uint16_t type, bool response, const void *payload, size_t len,
				  void *body_out);
/* Free what a decoder allocated in a body of (type, response). */
void mc_store_body_release(uint16_t type, bool response, void *body);
/* Compare two bodies of (type, response) field by field. */
bool mc_store_body_equal(uint16_t type, bool response, const void *a, const void *b);

/*
 * A decode arena: a buffer the caller owns, from which the decoders on the
 * calling thread take what they allocate (lists and strings) while it is
 * in use, instead of a malloc each; what does not fit is malloc'ed as
 * usual.  For a hot caller that decodes a large answer per call (the
 * conductor's BatchGetReplicaList of a hundred keys: some 300 strings and
 * lists) the mallocs and frees were most of the decode.
 *
 *   a->used = 0;                      (the bodies decoded in it are gone)
 *   mc_store_decode_arena_use(a);
 *   ... mc_master_conn_call / mc_store_msg_decode ... mc_store_msg_release
 *   mc_store_decode_arena_use(NULL);
 *
 * A body decoded with an arena in use must be released while the same
 * arena is in use on the same thread (the release skips what lies in it),
 * and before the arena is reused or freed.  Decoding with or without one
 * gives equal bodies.
 */
struct mc_store_decode_arena {
	uint8_t *base;
	size_t cap, used;
	size_t spilled; /* bytes malloc'ed beyond it while in use (its owner
			 * may grow it by as much; the owner resets it) */
};

/* The calling thread's arena from now on (NULL: none, malloc as usual);
 * returns the one in use before, to be put back. */
struct mc_store_decode_arena *mc_store_decode_arena_use(struct mc_store_decode_arena *a);

/*
 * An arena of its own for one message (a client's answer from the master
 * that it keeps a while): cap bytes from one malloc, none when cap is 0
 * or the malloc fails (the decode then mallocs as usual).  Free it after
 * the message's mc_store_msg_release_in(a, ...).
 */
void mc_store_decode_arena_init(struct mc_store_decode_arena *a, size_t cap);
void mc_store_decode_arena_free(struct mc_store_decode_arena *a);

/*
 * mc_store_msg_decode and mc_store_msg_release with a in use for the call
 * only (the thread's arena before it is restored after): for a caller that
 * decodes one frame, acts on it with code that may decode for itself (the
 * master's handlers), and releases it.  A message decoded _in(a) is
 * released _in(a) on the same thread, before a->used is reset.
 */
mc_status mc_store_msg_decode_in(struct mc_store_decode_arena *a, const void *frame, size_t len,
				 uint32_t max_payload, struct mc_store_msg *out);
void mc_store_msg_release_in(struct mc_store_decode_arena *a, struct mc_store_msg *m);

#define MC__STORE_BODY_DECL(name)                                     \
	void mc_store_##name##_release(struct mc_store_##name *m);    \
	bool mc_store_##name##_equal(const struct mc_store_##name *a, \
				     const struct mc_store_##name *b);
MC_STORE_BODY_MAP(MC__STORE_BODY_DECL)
#undef MC__STORE_BODY_DECL

/*
 * Typed wrappers, per message (name from MC_STORE_MSG_MAP):
 *   mc_store_<name>_request_encode(b, req_id, const struct mc_store_<req> *)
 *   mc_store_<name>_response_encode(b, req_id, const struct mc_store_<resp> *)
 *   mc_store_<name>_request_decode(payload, len, struct mc_store_<req> *)
 *   mc_store_<name>_response_decode(payload, len, struct mc_store_<resp> *)
 * e.g. mc_store_put_start_request_encode(b, id, &req).
 */
#define MC__STORE_MSG_WRAP(NAME, num, name, req, resp)                                             \
	static inline mc_status mc_store_##name##_request_encode(                                  \
		struct mc_buf *b, uint64_t req_id, const struct mc_store_##req *m)                 \
	{                                                                                          \
		return mc_store_request_encode(b, MC_STORE_##NAME, req_id, m);                     \
	}                                                                                          \
	static inline mc_status mc_store_##name##_response_encode(                                 \
		struct mc_buf *b, uint64_t req_id, const struct mc_store_##resp *m)                \
	{                                                                                          \
		return mc_store_response_encode(b, MC_STORE_##NAME, req_id, m);                    \
	}                                                                                          \
	static inline mc_status mc_store_##name##_request_decode(const void *payload, size_t len,  \
								 struct mc_store_##req *out)       \
	{                                                                                          \
		return mc_store_payload_decode(MC_STORE_##NAME, false, payload, len, out);         \
	}                                                                                          \
	static inline mc_status mc_store_##name##_response_decode(const void *payload, size_t len, \
								  struct mc_store_##resp *out)     \
	{                                                                                          \
		return mc_store_payload_decode(MC_STORE_##NAME, true, payload, len, out);          \
	}
MC_STORE_MSG_MAP(MC__STORE_MSG_WRAP)
#undef MC__STORE_MSG_WRAP

#endif
