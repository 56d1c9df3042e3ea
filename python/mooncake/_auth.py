"""The cluster secret and the authentication handshake, for the package's
pure-Python programs (the HTTP metadata server, the RPC helpers of
``mooncake.engine``, ``mooncake doctor``).

The same secret and the same handshake as the C library's (src/base/auth.c,
src/base/auth_hs.c; docs/protocol.md, "Authentication handshake"), so a
Python end and a C end of one channel would agree.  Three frames open a
connection when a secret is set::

    client -> server  HELLO      client nonce (32 bytes)
    server -> client  CHALLENGE  server nonce (32), server MAC (32)
    client -> server  PROOF      client MAC (32)

each "MCAU", version 1, type, body length (u16 little-endian), body; MAC =
HMAC-SHA256(secret, "mooncake-auth-v1 " label NUL channel NUL client nonce
server nonce) with label "server" or "client", so a proof for one direction
or one channel is none for another.  Both sides compare in constant time and
read no byte past the handshake's last frame: the channel's own protocol
starts on a clean stream.

What it must never do: accept a frame of another magic, version, type or
length than the step expects, or send the secret itself.  The handshake runs
on a blocking socket whose timeout the caller set (the whole exchange should
be bounded by it: a peer that stalls raises socket.timeout, an OSError).
"""

import hashlib
import hmac
import os
import struct

__all__ = ["AuthError", "SECRET_MAX", "load_secret", "frame", "mac", "client_handshake",
           "server_handshake"]

SECRET_MAX = 4096
NONCE_LEN = 32
MAC_LEN = 32
HDR = struct.Struct("<4sBBH")  # magic, version, type, body length
HELLO, CHALLENGE, PROOF = 1, 2, 3


class AuthError(ConnectionError):
    """The peer did not prove the cluster secret (or spoke no handshake)."""


def load_secret(path=None):
    """The cluster secret as the C programs read it (src/base/auth.c): the
    file path (a flag) or MC_AUTH_SECRET_FILE names, trailing newlines and
    blanks dropped, else MC_AUTH_SECRET, else None.  ValueError naming the
    cause for a file that cannot be read, is empty, is over 4096 bytes or
    that its group or others may read, and for an empty MC_AUTH_SECRET."""
    path = path or os.environ.get("MC_AUTH_SECRET_FILE", "")
    if path:
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode & 0o777
                if mode & 0o044:
                    raise ValueError(f"auth secret file {path}: mode {mode:03o} lets other "
                                     f"users read it: chmod 600 {path} (docs/security.md)")
                data = f.read(SECRET_MAX + 1)
        except OSError as e:
            raise ValueError(f"auth secret file {path}: {e.strerror}") from None
        if len(data) > SECRET_MAX:
            raise ValueError(f"auth secret file {path}: longer than {SECRET_MAX} bytes")
        data = data.rstrip(b"\r\n \t")
        if not data:
            raise ValueError(f"auth secret file {path}: empty")
        return data
    if "MC_AUTH_SECRET" in os.environ:
        if not os.environ["MC_AUTH_SECRET"]:
            raise ValueError("MC_AUTH_SECRET is empty")
        return os.environ["MC_AUTH_SECRET"].encode()
    return None


def frame(kind, body):
    return HDR.pack(b"MCAU", 1, kind, len(body)) + body


def mac(secret, label, channel, cn, sn):
    """label: b"server" or b"client"; channel: the port's protocol name."""
    msg = b"mooncake-auth-v1 " + label + b"\0" + channel.encode() + b"\0" + cn + sn
    return hmac.new(secret, msg, hashlib.sha256).digest()


def _recv_exact(sock, n, what):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            raise AuthError(f"authentication: the peer closed the connection before its {what}"
                            " (no cluster secret there, or another one)")
        got += k
    return bytes(buf)


def _recv_frame(sock, kind, what):
    """One frame of type kind (a body of 64 bytes for CHALLENGE, 32 else),
    its header checked before the body is read."""
    body_len = 2 * NONCE_LEN if kind == CHALLENGE else NONCE_LEN
    magic, ver, typ, ln = HDR.unpack(_recv_exact(sock, HDR.size, what))
    if magic != b"MCAU" or ver != 1 or typ != kind or ln != body_len:
        raise AuthError(f"authentication: expected a {what} frame, got another frame "
                        "(is the peer running without a cluster secret?)")
    return _recv_exact(sock, body_len, what)


def client_handshake(sock, secret, channel):
    cn = os.urandom(NONCE_LEN)
    sock.sendall(frame(HELLO, cn))
    body = _recv_frame(sock, CHALLENGE, "CHALLENGE")
    sn, smac = body[:NONCE_LEN], body[NONCE_LEN:]
    if not hmac.compare_digest(smac, mac(secret, b"server", channel, cn, sn)):
        raise AuthError("authentication: the server does not hold this cluster secret")
    sock.sendall(frame(PROOF, mac(secret, b"client", channel, cn, sn)))


def server_handshake(sock, secret, channel):
    cn = _recv_frame(sock, HELLO, "HELLO")
    sn = os.urandom(NONCE_LEN)
    sock.sendall(frame(CHALLENGE, sn + mac(secret, b"server", channel, cn, sn)))
    cmac = _recv_frame(sock, PROOF, "PROOF")
    if not hmac.compare_digest(cmac, mac(secret, b"client", channel, cn, sn)):
        raise AuthError("authentication: the client does not hold this cluster secret")
