"""A put whose master answer was lost is retried (issue 14).

Between a store_node client and a real master sits a small TCP proxy that
parses the frames (mcproto's 32-byte header) and, when told, cuts the
connection at one frame of a given type: either after the master answered
it (the request was applied, the answer is lost) or before the master saw
it (the request is lost).  The client then reconnects and repeats the call
once (store/master_conn.c: PutEnd is answered OK on a complete object;
PutStart is repeated after a revoke of the unknown attempt).  Asserted:
the put succeeds and the object is complete and readable with its data;
no in-flight object is left behind; a put whose PutEnd never reached the
master on either try is reported failed and nothing of it is readable.
Every wait is on the proxy's own count of cuts or on a command's reply.
"""

import socket
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mcproto  # noqa: E402
from test_store_processes import sc  # noqa: E402,F401  (sc: the fixture)

SIZE = 64 << 10


class LossyProxy:
    """Forwards client <-> master frames; lose(type, where) arms one cut of
    the next frame of that type: where="answer" forwards the request and
    cuts the connection instead of passing its answer on, where="request"
    cuts it instead of forwarding the request."""

    def __init__(self, master_port):
        self.master_port = master_port
        self.lsock = socket.socket()
        self.lsock.bind(("127.0.0.1", 0))
        self.lsock.listen(16)
        self.port = self.lsock.getsockname()[1]
        self.lock = threading.Lock()
        self.rules = []  # [type, where] in arming order
        self.cuts = 0
        self.seen = {}  # type -> requests forwarded or cut
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def lose(self, mtype, where):
        with self.lock:
            self.rules.append([mtype, where])

    def armed(self):
        with self.lock:
            return len(self.rules)

    def close(self):
        self.closed = True
        self.lsock.close()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.lsock.accept()
            except OSError:
                return
            m = socket.create_connection(("127.0.0.1", self.master_port))
            for s in (c, m):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = {"c": c, "m": m, "cut_ids": set(), "lock": threading.Lock()}
            threading.Thread(target=self._pump, args=(conn, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(conn, False), daemon=True).start()

    @staticmethod
    def _cut(conn):
        for s in (conn["c"], conn["m"]):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _pump(self, conn, upstream):
        src, dst = (conn["c"], conn["m"]) if upstream else (conn["m"], conn["c"])
        buf = bytearray()
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                buf += chunk
                while len(buf) >= 32:
                    h = mcproto.HDR.unpack(bytes(buf[:32]))
                    mtype, rid, plen = h[3], h[7], h[8]
                    if len(buf) < 32 + plen:
                        break
                    frame = bytes(buf[:32 + plen])
                    del buf[:32 + plen]
                    if upstream:
                        with self.lock:
                            self.seen[mtype] = self.seen.get(mtype, 0) + 1
                            rule = next((r for r in self.rules if r[0] == mtype), None)
                            if rule:
                                self.rules.remove(rule)
                        if rule and rule[1] == "request":
                            with self.lock:
                                self.cuts += 1
                            self._cut(conn)
                            return
                        if rule:
                            with conn["lock"]:
                                conn["cut_ids"].add(rid)
                    else:
                        with conn["lock"]:
                            cut = rid in conn["cut_ids"]
                        if cut:
                            with self.lock:
                                self.cuts += 1
                            self._cut(conn)
                            return
                    dst.sendall(frame)
        except OSError:
            pass
        finally:
            self._cut(conn)


def start(sc, credits=0):  # noqa: F811
    m = sc.start_master()
    proxy = LossyProxy(m.rpc)
    # the client's master is the proxy; its metadata the master's own server
    real = m.rpc
    m.rpc = proxy.port
    # these cases cut PutStart/PutEnd frames: no put credits unless asked
    node = sc.node(env={"MC_STORE_PUT_CREDIT": str(credits)})
    m.rpc = real
    return proxy, node


def test_lost_put_answers_are_retried(sc):  # noqa: F811
    proxy, node = start(sc)
    try:
        # PutEnd applied, its answer lost: the repeated End is answered OK
        proxy.lose(mcproto.PUT_END, "answer")
        want = node.put("end-answer", SIZE, 1)
        assert proxy.cuts == 1 and proxy.armed() == 0
        assert node.get("end-answer") == (SIZE, want)

        # PutEnd lost before the master saw it: the repeat completes the put
        proxy.lose(mcproto.PUT_END, "request")
        want = node.put("end-request", SIZE, 2)
        assert proxy.cuts == 2
        assert node.get("end-request") == (SIZE, want)

        # PutStart allocated, its answer lost: the unknown attempt is
        # revoked and the put starts again (not OBJECT_ALREADY_EXISTS,
        # which the library would report as success with nothing written)
        proxy.lose(mcproto.PUT_START, "answer")
        revokes = proxy.seen.get(mcproto.PUT_REVOKE, 0)
        want = node.put("start-answer", SIZE, 3)
        assert proxy.cuts == 3
        assert proxy.seen.get(mcproto.PUT_REVOKE, 0) == revokes + 1
        assert node.get("start-answer") == (SIZE, want)

        # the same for a batch: BatchPutStart's answer, then BatchPutEnd's
        proxy.lose(mcproto.BATCH_PUT_START, "answer")
        proxy.lose(mcproto.BATCH_PUT_END, "answer")
        r = node.ok(f"bput batch- 4 {SIZE} 10")
        assert r == "OK 0 0 0 0" and proxy.cuts == 5 and proxy.armed() == 0, r
        r = node.ok(f"getn batch- 4 {SIZE} 10")
        assert node.fields(r)["bad"] == "0", r

        # a PutEnd lost on both tries: the put is reported failed, and
        # its write is revoked, so nothing of it is readable
        proxy.lose(mcproto.PUT_END, "request")
        proxy.lose(mcproto.PUT_END, "request")
        name, code = node.err(f"put end-lost {SIZE} 4")
        assert (name, code) == ("ERR_RPC_FAIL", -900)
        assert proxy.cuts == 7
        assert node.ok("exist end-lost") == "OK 0"
        assert node.err("get end-lost") == ("ERR_OBJECT_NOT_FOUND", -704)
        # and the key is free again at once (no in-flight write left)
        want = node.put("end-lost", SIZE, 5)
        assert node.get("end-lost") == (SIZE, want)
    finally:
        proxy.close()


def test_lost_put_credit_answers_are_retried(sc):  # noqa: F811
    """A put through a put credit whose PutCredit was lost is repeated once
    on a new connection: a lost request completes on the repeat; a lost
    answer's repeat names a credit the first attempt used up, is refused
    (INVALID_WRITE), and the put goes the PutStart/PutEnd way, which finds
    the object complete (success, insert-if-absent) - the value read back
    is the one written."""
    proxy, node = start(sc, credits=16)
    try:
        want = node.put("warm", SIZE, 1)  # asks for its first credit
        assert node.get("warm") == (SIZE, want)
        starts = proxy.seen.get(mcproto.PUT_START, 0)

        proxy.lose(mcproto.PUT_CREDIT, "request")
        want = node.put("credit-request", SIZE, 2)
        assert proxy.cuts == 1 and proxy.armed() == 0
        assert proxy.seen.get(mcproto.PUT_START, 0) == starts
        assert node.get("credit-request") == (SIZE, want)

        proxy.lose(mcproto.PUT_CREDIT, "answer")
        want = node.put("credit-answer", SIZE, 3)
        assert proxy.cuts == 2 and proxy.armed() == 0
        assert proxy.seen.get(mcproto.PUT_START, 0) == starts + 1
        assert node.get("credit-answer") == (SIZE, want)
    finally:
        proxy.close()


def test_lost_upsert_answers_are_retried(sc):  # noqa: F811
    """An upsert whose UpsertStart or UpsertEnd answer was lost is repeated
    once: the repeated start pre-empts the lost attempt (this client's
    in-flight write of the key, its blocks parked), the repeated End of an
    applied End is answered OK.  The value read back is the new one, and
    the key is not left in flight."""
    proxy, node = start(sc)
    try:
        # a new key: UpsertStart applied (in flight, ours), answer lost
        proxy.lose(mcproto.UPSERT_START, "answer")
        want = node.put("up-new", SIZE, 1, op="upsert")
        assert proxy.cuts == 1 and proxy.armed() == 0
        assert proxy.seen.get(mcproto.UPSERT_START, 0) == 2
        assert node.get("up-new") == (SIZE, want)

        # an existing key, same size (in place) and another size
        node.put("up-old", SIZE, 2)
        proxy.lose(mcproto.UPSERT_START, "answer")
        want = node.put("up-old", SIZE, 3, op="upsert")
        assert proxy.cuts == 2
        assert node.get("up-old") == (SIZE, want)
        proxy.lose(mcproto.UPSERT_START, "answer")
        want = node.put("up-old", 2 * SIZE, 4, op="upsert")
        assert proxy.cuts == 3
        assert node.get("up-old") == (2 * SIZE, want)

        # UpsertEnd applied, its answer lost; then lost before the master
        proxy.lose(mcproto.UPSERT_END, "answer")
        want = node.put("up-old", SIZE, 5, op="upsert")
        assert proxy.cuts == 4
        assert node.get("up-old") == (SIZE, want)
        proxy.lose(mcproto.UPSERT_END, "request")
        want = node.put("up-old", SIZE, 6, op="upsert")
        assert proxy.cuts == 5
        assert node.get("up-old") == (SIZE, want)

        # nothing left in flight (a remove would be REPLICA_IS_NOT_READY)
        node.ok("remove up-old force")
        node.ok("remove up-new force")
        assert node.ok("exist up-old") == "OK 0"
    finally:
        proxy.close()
