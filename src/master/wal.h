/*
 * master/wal.h - the master's write-ahead log (issue 14): a directory of
 * append-only files of checksummed records, with Redis' fsync policies.
 *
 * This is the log itself, what it stores is the caller's: a record is a
 * type and an opaque payload, numbered by a sequence that grows by one per
 * record across files.  The master appends the records of the state
 * changes a loop turn accepted, commits them before the turn's replies
 * leave, and on start replays the records after its snapshot.
 *
 * A file is <dir>/wal-<seq of its first record, 16 hex digits>.log:
 *   header (32 bytes)                 record (24 + len bytes)
 *    0 magic "MCWAL\0\0\0"             0 u32 payload length (at most MC_WAL_MAX_PAYLOAD)
 *    8 u32 version (1)                 4 u16 type (the caller's; 0 is refused)
 *   12 u32 header length (32)          6 u16 flags (0)
 *   16 u64 seq of its first record     8 u64 seq (the one before it + 1)
 *   24 u64 XXH3-64 of bytes 0..23     16 payload
 *                                      16 + len  u64 XXH3-64 of bytes 0 .. 15 + len
 * all little-endian.  A file is only ever appended to; a new one starts on
 * mc_wal_rotate (after a snapshot) and the files a snapshot covers are
 * deleted whole (mc_wal_drop_through).
 *
 * Recovery (mc_wal_open): the files are read in sequence order and every
 * record is checked (length, checksum, seq).  A bad record at the end of
 * the last file is a torn tail, the crash's half-written append: it is cut
 * off (ftruncate) with one logged line saying where and why.  A bad record
 * with intact bytes after it, a gap between files, or a file of a newer
 * version is not a crash's doing and fails the open with a message naming
 * the file and offset; the log is left as it is for an operator.
 *
 * Durability (enum mc_wal_fsync): ALWAYS fdatasyncs in every commit (one
 * per loop turn: a group commit); EVERYSEC leaves it to a thread that
 * fdatasyncs the current file once a second (a crash loses at most about
 * a second of records, as Redis' appendfsync everysec); NO leaves it to
 * the kernel.  A write that fails (a full disk) is cut back off the file,
 * its records are forgotten, and commit returns FILE_WRITE_FAIL: the caller
 * must not acknowledge them.
 *
 * Threads: one caller thread at a time (the master's loop); the EVERYSEC
 * thread is internal.
 */
#ifndef MC_MASTER_WAL_H
#define MC_MASTER_WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define MC_WAL_VERSION	   1u
#define MC_WAL_HDR_LEN	   32u
#define MC_WAL_REC_HDR_LEN 16u
#define MC_WAL_REC_OVER	   24u	       /* a record's bytes beyond its payload */
#define MC_WAL_MAX_PAYLOAD (16u << 20) /* a record's payload at most */

enum mc_wal_fsync {
	MC_WAL_FSYNC_ALWAYS,
	MC_WAL_FSYNC_EVERYSEC,
	MC_WAL_FSYNC_NO,
};

/* "always", "everysec", "no" (the --wal_fsync values); false otherwise. */
bool mc_wal_fsync_parse(const char *text, enum mc_wal_fsync *out);

/* ---- the codec (no I/O; the fuzz target drives these) ---- */

/* A file header for first_seq into out[MC_WAL_HDR_LEN]. */
void mc_wal_encode_header(uint8_t *out, uint64_t first_seq);
/* Check a file header: MC_OK with *first_seq; INVALID_VERSION for a newer
 * version; CHECKSUM_MISMATCH or MALFORMED otherwise (mc_last_error says). */
mc_status mc_wal_decode_header(const uint8_t *p, size_t len, uint64_t *first_seq);

struct mc_wal_rec {
	uint64_t seq;
	uint16_t type;
	uint32_t len;
	const uint8_t *payload; /* into the decoded bytes */
};

/* The encoded size of a record of len payload bytes. */
static inline size_t mc_wal_rec_size(uint32_t len)
{
	return (size_t)MC_WAL_REC_OVER + len;
}
/* Encode a record into out[mc_wal_rec_size(len)]. */
void mc_wal_encode_rec(uint8_t *out, uint64_t seq, uint16_t type, const void *payload,
		       uint32_t len);
/* Decode the record at the start of p[0..len): MC_OK with *r and its size
 * in *used; MC_INPROGRESS when p holds only part of a record (a torn tail
 * at the end of a file); CHECKSUM_MISMATCH or MALFORMED when the bytes
 * cannot be a record (mc_last_error says which field). */
mc_status mc_wal_decode_rec(const uint8_t *p, size_t len, struct mc_wal_rec *r, size_t *used);

/* ---- the log ---- */

struct mc_wal;

/* Called by mc_wal_open for each record after `after`, in order; a status
 * other than MC_OK stops the open with it. */
typedef mc_status (*mc_wal_apply_cb)(void *arg, const struct mc_wal_rec *r);

struct mc_wal_open_info {
	uint64_t replayed;  /* records given to the callback */
	uint64_t last_seq;  /* of the last intact record; 0 for an empty log */
	uint64_t cut_bytes; /* torn tail cut off the last file */
	uint32_t files;	    /* files read */
	uint64_t bytes;	    /* of intact records read */
};

/* Open (creating dir when missing) and recover the log in dir: replay the
 * records with seq > after through cb, cut a torn tail, and append after
 * the last record (or from after + 1 in a new file when the log is empty or
 * ends before it: the snapshot is newer than the log).  info may be NULL. */
mc_status mc_wal_open(const char *dir, enum mc_wal_fsync policy, uint64_t after, mc_wal_apply_cb cb,
		      void *arg, struct mc_wal **out, struct mc_wal_open_info *info);
/* mc_wal_open with hint: before the callback applies a record, hint is
 * given (in order, each once) the records up to MC_WAL_HINT_AHEAD after it
 * that are already read, with seq > after, for prefetching what applying
 * them will touch.  A hinted record is not yet checked (its checksum and
 * seq are checked when it is applied): hint must only read it. */
#define MC_WAL_HINT_AHEAD 16u
mc_status mc_wal_open_hinted(const char *dir, enum mc_wal_fsync policy, uint64_t after,
			     mc_wal_apply_cb cb, mc_wal_apply_cb hint, void *arg,
			     struct mc_wal **out, struct mc_wal_open_info *info);
/* The bytes of dir's log files that hold records after seq after (0 when
 * none or dir cannot be read): what a replay will read, to size tables. */
uint64_t mc_wal_dir_bytes(const char *dir, uint64_t after);
/* Buffer one record (type > 0, len <= MC_WAL_MAX_PAYLOAD); *seq_out (may be
 * NULL) gets its sequence number.  Nothing reaches the file before commit. */
mc_status mc_wal_append(struct mc_wal *w, uint16_t type, const void *payload, uint32_t len,
			uint64_t *seq_out);
/* Write the buffered records (and fdatasync under ALWAYS).  On failure
 * they are cut off the file and forgotten: FILE_WRITE_FAIL. */
mc_status mc_wal_commit(struct mc_wal *w);
/* The seq of the last record appended (committed or not); 0 when none. */
uint64_t mc_wal_last_seq(const struct mc_wal *w);
/* Bytes written to the log's files since open (for metrics). */
uint64_t mc_wal_bytes(const struct mc_wal *w);
/* Commit, fdatasync, and start a new file for the records after. */
mc_status mc_wal_rotate(struct mc_wal *w);
/* Delete the files whose every record has seq <= seq (never the current
 * one); the count deleted in *n (may be NULL). */
mc_status mc_wal_drop_through(struct mc_wal *w, uint64_t seq, unsigned *n);
/*
 * A tap: after every commit that wrote records, tap(arg, bytes, len,
 * last_seq) gets their encoded bytes (whole records in the format above,
 * seqs up to last_seq), before the next append.  HA's log stream to the
 * standbys (server_repl.c) is fed by it.  NULL turns it off.
 */
typedef void (*mc_wal_tap_cb)(void *arg, const uint8_t *recs, size_t len, uint64_t last_seq);
void mc_wal_set_tap(struct mc_wal *w, mc_wal_tap_cb tap, void *arg);
/* Commit, fdatasync (every policy: a clean stop loses nothing) and close. */
mc_status mc_wal_close(struct mc_wal *w);

#endif
