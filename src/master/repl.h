/*
 * master/repl.h - the HA log stream between masters (issue 14): frame
 * types and payloads on the leader's RPC port.  docs/design.md, "Master:
 * the log stream", says why it looks like this.
 *
 * Every frame has the store protocol's 32-byte header (store/proto.h);
 * these types are master-to-master, outside MC_STORE_MSG_MAP, and are
 * taken only by a master running with --enable_ha:
 *
 *   SYNC    standby -> leader, req_id = the view version the standby read
 *           in the coordinator, no payload.  The leader refuses (an error
 *           frame, UNAVAILABLE_IN_CURRENT_MODE) unless it serves under that
 *           view; otherwise the connection becomes a stream.
 *   STREAM  leader -> standby, flags RESPONSE, req_id = the kind:
 *             SNAP      payload: the next bytes of a snapshot file
 *                       (master/snap.h format, checksummed whole)
 *             SNAP_END  payload: u64 seq the snapshot covers; the bytes
 *                       since the last SNAP_END are one snapshot
 *             RECS      payload: whole log records (master/wal.h record
 *                       format: length, type, seq, payload, XXH3), seqs
 *                       consecutive and following the last one sent
 *             BEAT      payload: u64 the leader's last committed seq
 *   ACK     standby -> leader, req_id = the last seq the standby has
 *           applied and committed to its own log, no payload.
 */
#ifndef MC_MASTER_REPL_H
#define MC_MASTER_REPL_H

enum mc_repl_type {
	MC_REPL_SYNC = 120,
	MC_REPL_STREAM = 121,
	MC_REPL_ACK = 122,
};

enum mc_repl_kind {
	MC_REPL_SNAP = 1,
	MC_REPL_SNAP_END = 2,
	MC_REPL_RECS = 3,
	MC_REPL_BEAT = 4,
};

#define MC_REPL_CHUNK (1u << 20) /* snapshot bytes and records per STREAM frame, about */

#endif
