/*
 * master/snap.h - snapshot files of the master's tables (issue 14): what
 * lets the write-ahead log (master/wal.h) be cut after a snapshot.
 *
 * Like wal.h this is the file format and the files, not what they hold: a
 * snapshot is a sequence of entries, each a record type and an opaque
 * payload (the master writes the write-ahead log's SEG_MOUNT and OBJ_PUT
 * payloads, master/wal_rec.h, so one replay serves both), and the log seq
 * it covers: replaying the snapshot then the log's records after that seq
 * gives the tables as they were.
 *
 * A file is <dir>/snap-<covered seq, 16 hex digits>.snap:
 *   header (48 bytes)                 entry (8 + len bytes)
 *    0 magic "MCSNAP\0\0"              0 u16 type (the caller's; 0 is refused)
 *    8 u32 version (1)                 2 u16 flags (0)
 *   12 u32 header length (48)          4 u32 payload length (<= MC_SNAP_MAX_PAYLOAD)
 *   16 u64 covered seq                 8 payload
 *   24 u64 body length (the entries)
 *   32 u64 XXH3-64 of the body
 *   40 u64 XXH3-64 of bytes 0..39
 * all little-endian.  The body is checked whole before any entry is given
 * to the caller, so a torn or damaged file changes nothing.
 *
 * Writing: mc_snap_writer_open makes <dir>/snap-<seq>.tmp, entries are
 * buffered and written, mc_snap_writer_finish writes the header, fsyncs,
 * renames the file into place and fsyncs the directory.  The writer
 * allocates only in open (one buffer), so the master's forked child can
 * use it (server_snap.c).
 *
 * Loading (mc_snap_load): the newest file whose header and body check out.
 * A damaged one (bad checksum, torn, bad header, or unreadable: its
 * mapping faulted with SIGBUS, the file shrank while read or an I/O error)
 * is renamed to <name>.bad with a logged reason and the next older one is
 * tried; a fault while its entries are given to the callback renames it
 * too but fails the load (FILE_READ_FAIL: part of it was applied); a file
 * of a newer version refuses (INVALID_VERSION): an older master never
 * guesses at a newer one's tables.  The SIGBUS handler is installed on the
 * first load of a mapped file and passes any fault outside the mapping
 * being read to the action it replaced.
 *
 * Threads: none of its own; one caller per writer.
 */
#ifndef MC_MASTER_SNAP_H
#define MC_MASTER_SNAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "mooncake/status.h"

#define MC_SNAP_VERSION	    1u
#define MC_SNAP_HDR_LEN	    48u
#define MC_SNAP_ENTRY_HDR   8u
#define MC_SNAP_MAX_PAYLOAD (16u << 20)

/* Called for each entry in order; a status other than MC_OK stops with it. */
typedef mc_status (*mc_snap_entry_cb)(void *arg, uint16_t type, const uint8_t *payload,
				      uint32_t len);

/* ---- the codec (no I/O; tests/fuzz/fuzz_snap.c drives it) ---- */

/* Check p[0..len) as a whole snapshot file and give its entries to cb (may
 * be NULL: check only).  MC_OK with *seq (may be NULL); INVALID_VERSION for
 * a newer version; CHECKSUM_MISMATCH or MALFORMED_JSON (the log's
 * "malformed") otherwise, before any entry is given; or cb's status. */
mc_status mc_snap_decode(const uint8_t *p, size_t len, uint64_t *seq, mc_snap_entry_cb cb,
			 void *arg);
/* The same, with the count of entries in *entries (may be NULL), set once
 * the framing checks out, before the first entry is given to cb. */
mc_status mc_snap_decode_n(const uint8_t *p, size_t len, uint64_t *seq, uint64_t *entries,
			   mc_snap_entry_cb cb, void *arg);
/* The header of a snapshot covering seq whose body is body[0..len). */
void mc_snap_encode_header(uint8_t *out, uint64_t seq, const uint8_t *body, size_t len);

/* ---- the files ---- */

struct mc_snap_writer;

/* Start <dir>/snap-<seq>.tmp (dir made when missing). */
mc_status mc_snap_writer_open(const char *dir, uint64_t seq, struct mc_snap_writer **out);
/* Add one entry (type > 0, len <= MC_SNAP_MAX_PAYLOAD); buffered. */
mc_status mc_snap_writer_add(struct mc_snap_writer *w, uint16_t type, const void *payload,
			     uint32_t len);
/* Write the rest and the header, fsync, rename into place, fsync dir, free w. */
mc_status mc_snap_writer_finish(struct mc_snap_writer *w);
/* Close and free w, leaving the file (the parent's copy after a fork). */
void mc_snap_writer_free(struct mc_snap_writer *w);
/* Remove the temp file and free w. */
void mc_snap_writer_abort(struct mc_snap_writer *w);
/* The temp file of a snapshot covering seq (what a failed child leaves). */
void mc_snap_tmp_path(const char *dir, uint64_t seq, char *buf, size_t cap);

struct mc_snap_load_info {
	bool found;	   /* a snapshot was loaded */
	uint64_t seq;	   /* the seq it covers (0: none) */
	uint64_t entries;  /* given to the callback */
	uint64_t total;	   /* in the file: set before the first callback (a
			    * loader may size its tables from it) */
	uint64_t bytes;	   /* its file's size */
	uint32_t rejected; /* damaged files renamed to .bad */
};

/* Load the newest valid snapshot in dir (a missing dir: none) through cb;
 * stale .tmp files are deleted.  info is filled on MC_OK. */
mc_status mc_snap_load(const char *dir, mc_snap_entry_cb cb, void *arg,
		       struct mc_snap_load_info *info);
/* mc_snap_load with hint: before cb gets an entry, hint has been given it
 * and up to MC_SNAP_HINT_AHEAD - 1 entries after it (in order, each once),
 * for prefetching what applying them will touch; hint must only read. */
#define MC_SNAP_HINT_AHEAD 16u
mc_status mc_snap_load_hinted(const char *dir, mc_snap_entry_cb cb, mc_snap_entry_cb hint,
			      void *arg, struct mc_snap_load_info *info);
/* Keep the keep newest snapshots in dir, delete the older ones; the seq of
 * the oldest one kept in *oldest (0 when none). */
mc_status mc_snap_retain(const char *dir, unsigned keep, uint64_t *oldest);
/* How many snapshot files (.snap) dir holds; their newest seq in *newest. */
unsigned mc_snap_count(const char *dir, uint64_t *newest);

#endif
