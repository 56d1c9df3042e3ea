"""``mooncake doctor``: checks this host for what Mooncake needs.

Run as ``mooncake doctor [options]`` (the console program) or ``python -m
mooncake.doctor [options]``.  Each check prints one row: the check, its
result (ok, warn, fail, skip), what was found and, when it is not ok, how to
fix it.  The exit code is 0 when every check that is *needed* passes; a
check is needed when the options ask for what it covers (``--protocol rdma``
needs RDMA devices and a memlock limit above the segment size, ``--master``
needs the master to answer, ``--ssd-dir`` needs O_DIRECT there, ``--cuda``
needs a device, ``--port`` needs the port free).  Other checks report and
never fail the run.  ``--json`` prints one JSON object instead.

Options:
  --segment-size SIZE    the global segment this host will mount (for memlock)
  --protocol tcp|rdma    the transport the engine will use (default tcp)
  --metadata URI         the Transfer Engine metadata server (http://, etcd://,
                         redis://, host:port = etcd, P2PHANDSHAKE)
  --master HOST:PORT     the master's RPC address; --master-http HOST:PORT its
                         admin HTTP port (version, clock skew)
  --ssd-dir DIR          the SSD tier's directory (writable with O_DIRECT)
  --port N               a port this host must be able to listen on (repeatable)
  --cuda                 CUDA devices are needed
  --timeout S            per network check (default 2 s)
"""

import argparse
import ctypes
import ctypes.util
import errno
import hmac
import json
import mmap
import os
import resource
import socket
import struct
import sys
import time
import urllib.error
import urllib.request
from email.utils import parsedate_to_datetime

from mooncake import _auth

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"


class Check:
    __slots__ = ("name", "status", "detail", "fix", "needed")

    def __init__(self, name, status, detail, fix="", needed=False):
        self.name, self.status, self.detail, self.fix, self.needed = (
            name, status, detail, fix, needed)

    def as_dict(self):
        return {"check": self.name, "result": self.status, "detail": self.detail,
                "fix": self.fix, "needed": self.needed}


def parse_size(text):
    """Bytes of "4GB", "512m", "1073741824"."""
    s = str(text).strip().lower()
    for suf, mult in (("tb", 1 << 40), ("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10),
                      ("t", 1 << 40), ("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10),
                      ("b", 1)):
        if s.endswith(suf):
            return int(float(s[:-len(suf)]) * mult)
    return int(float(s))


def fmt_bytes(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return "%.1f %s" % (n / m, unit)
    return "%d B" % n


def read(path, default=None):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return default


# ---- the checks -----------------------------------------------------------------------


def check_memlock(args):
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    need = args.segment_size or 0
    needed = args.protocol == "rdma"
    lim = "unlimited" if soft == resource.RLIM_INFINITY else fmt_bytes(soft)
    if soft == resource.RLIM_INFINITY or (need and soft >= need):
        return Check("memlock limit", OK, "%s (segment %s)" % (lim, fmt_bytes(need)),
                     needed=needed)
    fix = ("raise it: 'ulimit -l unlimited', or memlock in /etc/security/limits.conf, or "
           "LimitMEMLOCK=infinity in the systemd unit")
    if not need:
        return Check("memlock limit", OK if not needed else WARN,
                     "%s (no --segment-size given)" % lim, fix if needed else "", needed)
    return Check("memlock limit", FAIL if needed else WARN,
                 "%s, below the %s segment (RDMA pins it)" % (lim, fmt_bytes(need)), fix,
                 needed)


def check_hugepages(args):
    info = {}
    for line in (read("/proc/meminfo", "") or "").splitlines():
        k, _, v = line.partition(":")
        info[k.strip()] = v.strip()
    total = int(info.get("HugePages_Total", "0") or 0)
    free = int(info.get("HugePages_Free", "0") or 0)
    size = info.get("Hugepagesize", "?")
    thp = read("/sys/kernel/mm/transparent_hugepage/enabled", "absent")
    thp_mode = thp.split("[")[1].split("]")[0] if "[" in thp else thp
    detail = "explicit %d of %s (%d free); THP %s" % (total, size, free, thp_mode)
    if total == 0 and thp_mode == "never":
        return Check("huge pages", WARN, detail,
                     "segments fault 4 KiB pages: set THP to madvise "
                     "(/sys/kernel/mm/transparent_hugepage/enabled) or reserve hugetlb pages")
    return Check("huge pages", OK, detail)


def check_rdma(args):
    needed = args.protocol == "rdma"
    base = "/sys/class/infiniband"
    try:
        devs = sorted(os.listdir(base))
    except OSError:
        devs = []
    if not devs:
        return Check("RDMA devices", FAIL if needed else SKIP, "none",
                     "install the NIC driver (rdma-core) or use --protocol tcp" if needed
                     else "", needed)
    rows, active = [], 0
    for d in devs:
        pdir = os.path.join(base, d, "ports")
        for p in sorted(os.listdir(pdir)) if os.path.isdir(pdir) else []:
            state = read(os.path.join(pdir, p, "state"), "?")  # "4: ACTIVE"
            gid = read(os.path.join(pdir, p, "gids", "0"), "")
            has_gid = bool(gid) and gid.strip("0:") != ""
            if "ACTIVE" in state:
                active += 1
            rows.append("%s/%s %s%s" % (d, p, state.split(":")[-1].strip(),
                                        " gid0=" + gid if has_gid else " no gid"))
    st = OK if active else (FAIL if needed else WARN)
    return Check("RDMA devices", st, "; ".join(rows),
                 "" if active else "no ACTIVE port: check the cable and 'ibv_devinfo'", needed)


def check_interfaces(args):
    rows, up = [], 0
    try:
        names = [n for _, n in socket.if_nameindex()]
    except OSError:
        names = []
    for n in names:
        state = read("/sys/class/net/%s/operstate" % n, "?")
        mtu = read("/sys/class/net/%s/mtu" % n, "?")
        if n != "lo" and state in ("up", "unknown"):
            up += 1
        rows.append("%s %s mtu %s" % (n, state, mtu))
    if not up:
        return Check("network interfaces", WARN, "; ".join(rows) or "none",
                     "no interface but lo is up: peers on other hosts cannot reach this one")
    return Check("network interfaces", OK, "; ".join(rows))


def _http_get(url, timeout):
    """(status, headers, body); an HTTP error status is an answer too."""
    req = urllib.request.Request(url, headers={"User-Agent": "mooncake-doctor"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read(65536)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read(65536)


def check_metadata(args):
    uri = args.metadata
    if not uri:
        return Check("metadata server", SKIP, "no --metadata given")
    if uri == "P2PHANDSHAKE":
        return Check("metadata server", OK, "P2PHANDSHAKE: peers exchange descriptors "
                     "directly, no server", needed=True)
    t0 = time.monotonic()
    try:
        if uri.startswith(("http://", "https://")):
            st, _h, _b = _http_get(uri.rstrip("/") + "?key=mooncake-doctor-probe", args.timeout)
            if st >= 500:
                raise OSError("HTTP %d" % st)
            detail = "HTTP %d to a probe key" % st
        elif uri.startswith("redis://"):
            with socket.create_connection(_split(uri[8:], 6379), timeout=args.timeout) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                reply = s.recv(64)
            if not reply.startswith((b"+PONG", b"-NOAUTH")):
                raise OSError("answered %r to PING" % reply[:40])
            detail = "redis " + reply.strip().decode(errors="replace")
        else:
            eps = uri[7:] if uri.startswith("etcd://") else uri
            detail = []
            for ep in filter(None, eps.replace(";", ",").split(",")):
                url = ep if ep.startswith("http") else "http://" + ep
                if url.count(":") < 2:
                    url += ":2379"
                _st, _h, body = _http_get(url + "/version", args.timeout)
                detail.append("%s etcd %s" % (ep, json.loads(body).get("etcdserver", "?")))
            detail = "; ".join(detail)
    except (OSError, ValueError, urllib.error.URLError) as e:
        return Check("metadata server", FAIL, "%s: %s" % (uri, e),
                     "start it, or check the address and the firewall", True)
    return Check("metadata server", OK, "%s (%.0f ms)" % (detail, (time.monotonic() - t0) * 1e3),
                 needed=True)


def _split(hostport, default_port):
    host, _, port = hostport.rpartition(":")
    if not host:
        return hostport.strip("[]"), default_port
    return host.strip("[]"), int(port)


def _cluster_secret():
    """(secret bytes or None, where it came from, a Check when it is unusable):
    read as the programs read it (base/auth.c): MC_AUTH_SECRET_FILE first,
    trailing newlines and blanks dropped, refused when group or others may
    read it; else MC_AUTH_SECRET."""
    path = os.environ.get("MC_AUTH_SECRET_FILE", "")
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read(4097).rstrip(b"\r\n \t")
            mode = os.stat(path).st_mode & 0o777
        except OSError as e:
            return None, path, Check("cluster secret", FAIL,
                                     "MC_AUTH_SECRET_FILE=%s: %s" % (path, e),
                                     "point it at a readable file holding the secret", True)
        if not data:
            return None, path, Check("cluster secret", FAIL,
                                     "MC_AUTH_SECRET_FILE=%s is empty" % path,
                                     "write the secret into it", True)
        if mode & 0o044:
            return None, path, Check("cluster secret", FAIL,
                                     "%s is mode %03o: the programs refuse a secret file "
                                     "its group or others may read" % (path, mode),
                                     "chmod 600 %s" % path, True)
        return data, path, None
    if "MC_AUTH_SECRET" in os.environ:
        if not os.environ["MC_AUTH_SECRET"]:
            return None, "MC_AUTH_SECRET", Check(
                "cluster secret", FAIL, "MC_AUTH_SECRET is empty",
                "set it, or unset it to run without a secret", True)
        return os.environ["MC_AUTH_SECRET"].encode(), "MC_AUTH_SECRET", None
    return None, None, None


def _auth_frame(kind, body):
    return _auth.frame(kind, body)


def _auth_mac(secret, label, cn, sn):
    return _auth.mac(secret, label, "master", cn, sn)


def _master_auth(sock, secret, timeout):
    """Probe the master's RPC port with the handshake (docs/protocol.md,
    "Authentication handshake"): "none" when it closes on our HELLO (no
    secret there: it reads upstream's frames), "match" when it proved our
    secret (we then prove it too), "other" when it proved another one,
    "required" when it asks for one and we have none."""
    cn = os.urandom(32)
    sock.settimeout(timeout)
    sock.sendall(_auth_frame(1, cn))
    got = b""
    try:
        while len(got) < 72:
            chunk = sock.recv(72 - len(got))
            if not chunk:
                break
            got += chunk
    except OSError:  # a reset or no answer: our HELLO was not a frame it knows
        pass
    if len(got) < 72 or got[:8] != b"MCAU" + struct.pack("<BBH", 1, 2, 64):
        return "none"
    if secret is None:
        return "required"
    sn, smac = got[8:40], got[40:72]
    if not hmac.compare_digest(smac, _auth_mac(secret, b"server", cn, sn)):
        return "other"
    sock.sendall(_auth_frame(3, _auth_mac(secret, b"client", cn, sn)))
    return "match"


def check_master(args):
    if not args.master:
        return Check("master", SKIP, "no --master given")
    secret, source, bad = _cluster_secret()
    t0 = time.monotonic()
    try:
        with socket.create_connection(_split(args.master, 50051), timeout=args.timeout) as s:
            ms = (time.monotonic() - t0) * 1e3
            mode = _master_auth(s, secret, args.timeout)
    except (OSError, ValueError) as e:
        return Check("master", FAIL, "%s: %s" % (args.master, e),
                     "start mooncake_master, or check --master and the firewall", True)
    detail = "%s accepts connections (%.0f ms); " % (args.master, ms)
    if mode == "match":
        return Check("master", OK, detail + "auth: its secret is this host's (%s)" % source,
                     needed=True)
    if mode == "none" and secret is None:
        return Check("master", OK if bad is None else FAIL,
                     detail + "auth: none on either side (as upstream)",
                     "" if bad is None else "fix the cluster secret row", True)
    if mode == "none":
        return Check("master", FAIL, detail + "auth: the master runs without a secret, this "
                     "host has one (%s): its programs would be refused" % source,
                     "give the master the same secret (--auth_secret_file or "
                     "MC_AUTH_SECRET_FILE), or none here", True)
    if mode == "required":
        return Check("master", FAIL, detail + "auth: the master requires a cluster secret and "
                     "this host gives none" + ("" if bad is None else " usable"),
                     "set MC_AUTH_SECRET_FILE to the cluster's secret file (docs/security.md)",
                     True)
    return Check("master", FAIL, detail + "auth: the master holds another secret than this "
                 "host's (%s)" % source,
                 "give every program of the cluster the same secret file", True)


def check_secret(args):
    """The cluster secret this environment gives the programs (docs/security.md):
    with one, every binary port needs the handshake and the HTTP services
    refuse state changes without the bearer token; the file must be
    readable, not empty, and not readable by group or others."""
    secret, source, bad = _cluster_secret()
    if bad is not None:
        return bad
    if secret is None:
        return Check("cluster secret", WARN, "none: every port takes any peer (as upstream)",
                     "set MC_AUTH_SECRET_FILE on every program of the cluster "
                     "(docs/security.md)")
    return Check("cluster secret", OK, "from %s (binary ports need the handshake, HTTP "
                 "state changes the bearer token)" % source)


def check_master_http(args):
    """The admin port: health, version and the clock skew from its Date header."""
    if not args.master_http:
        return [Check("master admin", SKIP, "no --master-http given")]
    base = "http://" + args.master_http
    out = []
    try:
        t0 = time.time()
        st, headers, body = _http_get(base + "/health", args.timeout)
        t1 = time.time()
    except (OSError, urllib.error.URLError) as e:
        return [Check("master admin", FAIL, "%s: %s" % (base, e),
                      "check --master-http (the master's --metrics_port)", True)]
    version = "?"
    try:
        _st, _h, m = _http_get(base + "/metrics", args.timeout)
        for line in m.decode(errors="replace").splitlines():
            if line.startswith("mooncake_master_version") or "version=" in line:
                version = line.split("version=\"")[-1].split("\"")[0] if "version=\"" in line \
                    else line.split()[-1]
                break
    except (OSError, urllib.error.URLError):
        pass
    out.append(Check("master admin", OK if st == 200 else FAIL,
                     "/health %d %s; version %s" % (st, body[:40].decode(errors="replace"),
                                                    version), needed=True))
    date = headers.get("Date")
    if date:
        try:
            skew = parsedate_to_datetime(date).timestamp() - (t0 + t1) / 2
        except (TypeError, ValueError):
            skew = None
        if skew is not None:
            bad = abs(skew) > 2.0  # the header has whole seconds
            out.append(Check("clock skew", WARN if bad else OK,
                             "%+.1f s against the master (Date header, 1 s resolution)" % skew,
                             "run chrony or systemd-timesyncd on both hosts" if bad else ""))
    else:
        out.append(Check("clock skew", SKIP, "the master's answer has no Date header"))
    return out


def check_ports(args):
    out = []
    for port in args.port or []:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("0.0.0.0", port))
            out.append(Check("port %d" % port, OK, "free", needed=True))
        except OSError as e:
            fix = "another process holds it: 'ss -ltnp sport = :%d'" % port
            out.append(Check("port %d" % port, FAIL, os.strerror(e.errno or 0) or str(e), fix,
                             True))
    return out


def check_io_uring(args):
    disabled = read("/proc/sys/kernel/io_uring_disabled")
    if disabled and disabled != "0":
        return Check("io_uring", WARN, "kernel.io_uring_disabled=%s" % disabled,
                     "the SSD tier falls back to pread/pwrite; sysctl "
                     "kernel.io_uring_disabled=0 to allow it", needed=False)
    libc = ctypes.CDLL(None, use_errno=True)
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    nr = {"x86_64": 425, "aarch64": 425}.get(os.uname().machine, 425)
    fd = libc.syscall(nr, 4, params)
    if fd >= 0:
        os.close(fd)
        return Check("io_uring", OK, "io_uring_setup works")
    err = ctypes.get_errno()
    return Check("io_uring", WARN, "io_uring_setup: %s" % os.strerror(err),
                 "the SSD tier falls back to pread/pwrite (seccomp or a container may "
                 "forbid io_uring)")


def check_ssd_dir(args):
    d = args.ssd_dir
    if not d:
        return Check("SSD directory", SKIP, "no --ssd-dir given")
    if not os.path.isdir(d):
        return Check("SSD directory", FAIL, "%s is not a directory" % d,
                     "create it (the SSD tier does not create its root)", True)
    path = os.path.join(d, ".mooncake-doctor-%d" % os.getpid())
    buf = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT wants
    buf.write(b"m" * 4096)
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | getattr(os, "O_DIRECT", 0),
                     0o600)
    except OSError as e:
        if e.errno == errno.EINVAL:
            return Check("SSD directory", WARN, "%s: O_DIRECT refused (tmpfs?)" % d,
                         "the tier uses buffered I/O here; use a real disk for figures", True)
        return Check("SSD directory", FAIL, "%s: %s" % (d, e.strerror),
                     "make it writable by this user", True)
    try:
        os.write(fd, buf)
        st = os.statvfs(d)
        free = st.f_bavail * st.f_frsize
        return Check("SSD directory", OK, "%s writable with O_DIRECT, %s free" % (d,
                                                                                fmt_bytes(free)),
                     needed=True)
    except OSError as e:
        return Check("SSD directory", FAIL, "%s: O_DIRECT write: %s" % (d, e.strerror),
                     "check the filesystem and free space", True)
    finally:
        os.close(fd)
        os.unlink(path)
        buf.close()


def check_cuda(args):
    try:
        from mooncake import engine
        built = bool(engine.SUPPORT_CUDA)
    except ImportError:
        built = False
    n = ctypes.c_int(0)
    found = "no driver"
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("cuda") or "libcuda.so.1")
        if lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(n)) == 0:
            found = "%d device(s)" % n.value
        else:
            found = "driver present, no device"
    except OSError:
        pass
    detail = "build %s CUDA; %s" % ("with" if built else "without", found)
    ok = built and n.value > 0
    if ok:
        return Check("CUDA", OK, detail, needed=args.cuda)
    return Check("CUDA", FAIL if args.cuda else SKIP, detail,
                 "GPU memory needs a CUDA build and a visible device" if args.cuda else "",
                 args.cuda)


def run_checks(args):
    out = [check_memlock(args), check_hugepages(args), check_rdma(args),
           check_interfaces(args), check_metadata(args), check_master(args), check_secret(args)]
    out += check_master_http(args)
    out += check_ports(args)
    out += [check_io_uring(args), check_ssd_dir(args), check_cuda(args)]
    return out


def render(checks, stream):
    w = max(len(c.name) for c in checks)
    for c in checks:
        line = "%-*s  %-4s  %s" % (w, c.name, c.status, c.detail)
        if c.fix and c.status in (WARN, FAIL):
            line += "\n%*s  fix: %s" % (w + 6, "", c.fix)
        print(line, file=stream)


def parser():
    ap = argparse.ArgumentParser(prog="mooncake doctor",
                                 description="Check this host for what Mooncake needs.")
    ap.add_argument("--segment-size", type=parse_size, default=0)
    ap.add_argument("--protocol", default="tcp", choices=("tcp", "rdma"))
    ap.add_argument("--metadata")
    ap.add_argument("--master")
    ap.add_argument("--master-http")
    ap.add_argument("--ssd-dir")
    ap.add_argument("--port", type=int, action="append")
    ap.add_argument("--cuda", action="store_true")
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--json", action="store_true")
    return ap


def main(argv=None):
    args = parser().parse_args(argv)
    checks = run_checks(args)
    failed = [c for c in checks if c.needed and c.status == FAIL]
    if args.json:
        json.dump({"ok": not failed, "checks": [c.as_dict() for c in checks]}, sys.stdout,
                  indent=1)
        print()
    else:
        render(checks, sys.stdout)
        print("\n%s" % ("all needed checks pass" if not failed else
                        "%d needed check(s) failed: %s" % (len(failed),
                                                          ", ".join(c.name for c in failed))))
    return 1 if failed else 0


def mooncake_main(argv=None):
    """The ``mooncake`` console program: ``mooncake doctor [options]``."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: mooncake doctor [options]   (mooncake doctor --help)")
        return 0 if argv else 2
    if argv[0] != "doctor":
        print("mooncake: unknown command %r (this program has: doctor)" % argv[0],
              file=sys.stderr)
        return 2
    return main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
