"""MooncakeConfig: client settings for the store service and the connectors.

Upstream's ``mooncake.mooncake_config`` (spec store.md 8.2), used by vLLM's
store connector and ``mooncake.mooncake_store_service``.  Settings come from

1. a JSON file: ``MooncakeConfig.from_file(path)``; ``load_from_env()``
   reads the file named by ``MOONCAKE_CONFIG_PATH`` when that is set;
2. otherwise the environment (``load_from_env()``): ``MOONCAKE_MASTER``
   (required), ``MOONCAKE_TE_META_DATA_SERVER`` (P2PHANDSHAKE),
   ``MOONCAKE_PROTOCOL`` (tcp), ``MOONCAKE_DEVICE`` (""),
   ``MOONCAKE_GLOBAL_SEGMENT_SIZE``, ``MOONCAKE_LOCAL_BUFFER_SIZE``,
   ``MOONCAKE_LOCAL_HOSTNAME`` (localhost), ``MOONCAKE_OFFLOAD_ENABLED``,
   ``MOONCAKE_OFFLOAD_FILE_STORAGE_PATH``, ``MOONCAKE_TENANT_ID`` (default),
   ``MOONCAKE_ENABLE_CLIENT_HTTP_SERVER``, ``MOONCAKE_CLIENT_HTTP_PORT``;
3. ``load(config_path=None, overrides=())``: the store service's order
   (``--config`` file, else ``MOONCAKE_CONFIG_PATH``, else the environment)
   followed by ``-Dfield=value`` overrides.

Sizes are ints or strings: a number (may be fractional) with an optional
binary suffix b/k/kb/m/mb/g/gb/t/tb (case-insensitive, spaces allowed).
Booleans accept true/false/1/0/yes/no/on/off/enable/disable.  The protocol
must be a non-empty string and is lower-cased; one outside KNOWN_PROTOCOLS
is logged through this module's ``logger`` and passed through.  A negative
size raises ValueError naming its field.  ``local_hostname``,
``metadata_server`` and ``master_server_address`` must be non-empty.
"""

import dataclasses
import json
import logging
import os
from dataclasses import dataclass
from typing import Iterable, Optional

__all__ = [
    "MooncakeConfig",
    "DEFAULT_GLOBAL_SEGMENT_SIZE",
    "DEFAULT_LOCAL_BUFFER_SIZE",
    "DEFAULT_CLIENT_HTTP_PORT",
]

DEFAULT_GLOBAL_SEGMENT_SIZE = 3355443200  # 3.125 GiB
DEFAULT_LOCAL_BUFFER_SIZE = 1073741824  # 1 GiB
DEFAULT_CLIENT_HTTP_PORT = 9300

# longest suffix first, so "kb" is not read as "b"
_SIZE_SUFFIXES = (
    ("kb", 1 << 10), ("mb", 1 << 20), ("gb", 1 << 30), ("tb", 1 << 40),
    ("k", 1 << 10), ("m", 1 << 20), ("g", 1 << 30), ("t", 1 << 40),
    ("b", 1),
)

_TRUE = ("true", "1", "yes", "on", "enable", "enabled")
_FALSE = ("false", "0", "no", "off", "disable", "disabled")

_REQUIRED = ("local_hostname", "metadata_server", "master_server_address")

# the protocols some Mooncake build knows; another is logged and passed through
KNOWN_PROTOCOLS = ("tcp", "rdma", "efa", "cxi", "nvlink", "nvlink_intra", "hip", "musa",
                   "ascend", "barex", "cxl", "nvmeof")

logger = logging.getLogger(__name__)


def _parse_segment_size(value, field="segment size") -> int:
    """Bytes from an int or a size string ("4GB", "1.5 g", "65536")."""
    if isinstance(value, bool):
        raise ValueError(f"Invalid segment size: {value!r}")
    if isinstance(value, (int, float)) and value < 0:
        raise ValueError(f"Invalid segment size: {field} must not be negative, got {value}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if not isinstance(value, str):
        raise ValueError(f"Invalid segment size: {value!r}")
    s = value.strip().lower()
    if not s:
        raise ValueError("Invalid segment size: empty string")
    mult = 1
    for suffix, m in _SIZE_SUFFIXES:
        if s.endswith(suffix):
            s = s[:-len(suffix)].strip()
            mult = m
            if not s:
                raise ValueError(f"Invalid segment size: missing number before '{suffix}'")
            break
    try:
        num = float(s)
    except ValueError:
        raise ValueError(f"Invalid segment size: {value!r}") from None
    if num < 0:
        raise ValueError(f"Invalid segment size: {field} must not be negative, got {value!r}")
    if num != num or num == float("inf"):
        raise ValueError(f"Invalid segment size: {value!r}")
    return int(num * mult)


def _parse_bool(value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return bool(value)
    if value is None:
        return False
    s = str(value).strip().lower()
    if not s:
        return False
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"Invalid boolean value: {value!r}")


def _parse_port(value) -> int:
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ValueError(f"Invalid port: {value!r}") from None
    if not 0 < port < 65536:
        raise ValueError(f"Invalid port: {value!r}")
    return port


@dataclass
class MooncakeConfig:
    """Client settings; see the module documentation for where they come from.

    Example file::

        {"local_hostname": "node1", "metadata_server": "http://meta:8080/metadata",
         "master_server_address": "master:50051", "protocol": "tcp",
         "global_segment_size": "4GB", "local_buffer_size": "1GB"}
    """

    local_hostname: str
    metadata_server: str
    global_segment_size: int
    local_buffer_size: int
    protocol: str
    device_name: Optional[str]
    master_server_address: str
    enable_ssd_offload: bool = False
    ssd_offload_path: str = ""
    tenant_id: str = "default"
    enable_client_http_server: bool = False
    client_http_port: int = DEFAULT_CLIENT_HTTP_PORT

    def __post_init__(self):
        for name in _REQUIRED:
            v = getattr(self, name)
            if v is None or not str(v).strip():
                raise ValueError(f"Config field '{name}' must be a non-empty string")
            setattr(self, name, str(v))
        self.global_segment_size = _parse_segment_size(self.global_segment_size,
                                                       "global_segment_size")
        self.local_buffer_size = _parse_segment_size(self.local_buffer_size, "local_buffer_size")
        if not isinstance(self.protocol, str) or not self.protocol.strip():
            raise ValueError("Config field 'protocol' must be a non-empty string")
        self.protocol = self.protocol.strip().lower()
        if self.protocol not in KNOWN_PROTOCOLS:
            logger.warning("MooncakeConfig: unknown protocol %r, passed through as given",
                           self.protocol)
        self.device_name = "" if self.device_name is None else str(self.device_name)
        self.enable_ssd_offload = _parse_bool(self.enable_ssd_offload)
        self.ssd_offload_path = "" if self.ssd_offload_path is None else str(self.ssd_offload_path)
        self.tenant_id = "default" if self.tenant_id in (None, "") else str(self.tenant_id)
        self.enable_client_http_server = _parse_bool(self.enable_client_http_server)
        self.client_http_port = _parse_port(self.client_http_port)

    # -- constructors ------------------------------------------------------------------

    @staticmethod
    def from_dict(config: dict) -> "MooncakeConfig":
        """From a mapping with the JSON file's keys (missing required keys raise)."""
        for name in _REQUIRED:
            if name not in config:
                raise ValueError(f"Missing required config field: {name}")
        known = {f.name for f in dataclasses.fields(MooncakeConfig)}
        kw = {k: v for k, v in config.items() if k in known}
        kw.setdefault("global_segment_size", DEFAULT_GLOBAL_SEGMENT_SIZE)
        kw.setdefault("local_buffer_size", DEFAULT_LOCAL_BUFFER_SIZE)
        kw.setdefault("protocol", "tcp")
        kw.setdefault("device_name", "")
        return MooncakeConfig(**kw)

    @staticmethod
    def from_file(file_path: str) -> "MooncakeConfig":
        """From a JSON file."""
        with open(file_path) as f:
            config = json.load(f)
        if not isinstance(config, dict):
            raise ValueError(f"{file_path}: the configuration must be a JSON object")
        return MooncakeConfig.from_dict(config)

    @staticmethod
    def load_from_env() -> "MooncakeConfig":
        """From the file named by MOONCAKE_CONFIG_PATH, else from MOONCAKE_* variables."""
        path = os.getenv("MOONCAKE_CONFIG_PATH")
        if path is not None:
            return MooncakeConfig.from_file(path)
        if not os.getenv("MOONCAKE_MASTER"):
            raise ValueError("Neither the environment variable 'MOONCAKE_CONFIG_PATH' nor "
                             "'MOONCAKE_MASTER' is set.")
        env = os.getenv
        return MooncakeConfig(
            local_hostname=env("MOONCAKE_LOCAL_HOSTNAME", "localhost"),
            metadata_server=env("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE"),
            global_segment_size=env("MOONCAKE_GLOBAL_SEGMENT_SIZE", DEFAULT_GLOBAL_SEGMENT_SIZE),
            local_buffer_size=env("MOONCAKE_LOCAL_BUFFER_SIZE", DEFAULT_LOCAL_BUFFER_SIZE),
            protocol=env("MOONCAKE_PROTOCOL", "tcp"),
            device_name=env("MOONCAKE_DEVICE", ""),
            master_server_address=env("MOONCAKE_MASTER"),
            enable_ssd_offload=env("MOONCAKE_OFFLOAD_ENABLED", "false"),
            ssd_offload_path=env("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""),
            tenant_id=env("MOONCAKE_TENANT_ID", "default"),
            enable_client_http_server=env("MOONCAKE_ENABLE_CLIENT_HTTP_SERVER", "false"),
            client_http_port=env("MOONCAKE_CLIENT_HTTP_PORT", DEFAULT_CLIENT_HTTP_PORT),
        )

    @staticmethod
    def load(config_path: Optional[str] = None,
             overrides: Iterable[str] = ()) -> "MooncakeConfig":
        """The store service's order: config_path, else load_from_env(); then
        each "field=value" of overrides (from -D/--define) replaces a field."""
        if config_path:
            cfg = MooncakeConfig.from_file(config_path)
        else:
            cfg = MooncakeConfig.load_from_env()
        return cfg.with_overrides(overrides)

    # -- helpers -----------------------------------------------------------------------

    def with_overrides(self, overrides: Iterable[str]) -> "MooncakeConfig":
        """A copy with "field=value" strings applied (unknown fields raise)."""
        values = dataclasses.asdict(self)
        for item in overrides:
            if "=" not in item:
                raise ValueError(f"Invalid override {item!r}: expected field=value")
            name, value = item.split("=", 1)
            name = name.strip()
            if name not in values:
                raise ValueError(f"Unknown config field in override: {name}")
            values[name] = value
        return MooncakeConfig(**values)

    def to_dict(self) -> dict:
        """The fields as a dict (the JSON file's keys)."""
        return dataclasses.asdict(self)

    def setup_args(self) -> tuple:
        """The 7 positional arguments of MooncakeDistributedStore.setup()."""
        return (self.local_hostname, self.metadata_server, self.global_segment_size,
                self.local_buffer_size, self.protocol, self.device_name,
                self.master_server_address)
