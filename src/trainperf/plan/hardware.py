"""The hardware catalog (`hardware.toml`): GPU kinds and scale-out networks, each figure with its source."""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from trainperf.config import ConfigError
from trainperf.layout import PRECISIONS  # slowest to fastest; one list for the planner and the layout grammar

CATALOG = Path(__file__).with_name("hardware.toml")
# FP16 with loss scaling (A100-era runs) as a matmul format the planner prices: 16-bit like BF16
FP16 = "fp16"
# GPU generations in release order (hardware.toml's `generation`): a stack fitted on some of them
# carries the newest fitted one's efficiency to the ones it has no rows for (plan/calibration.py)
GENERATIONS = ("ampere", "hopper", "blackwell", "blackwell_ultra")
# A GPU run below the power its datasheet rates it at (`tdp_w` < `rated_w`: a fleet's power cap)
# sustains lower clocks: its peaks are the datasheet's times (tdp_w / rated_w) ** POWER_EXPONENT.
# The exponent is NVIDIA's own, read off the catalog's two pairs of one die at two power ratings:
# B200 (1000 W) / GB200 (1200 W) 0.578 at every format, B300 (1100 W) / GB300 (1400 W) 0.437 in
# BF16 and FP8, 0.554 in FP4; 0.53 is their mean.
POWER_EXPONENT = 0.53
PLAN_PRECISIONS = (FP16, *PRECISIONS)  # what `plan --precision` takes


def precision_rank(precision: str) -> int:
    """Position among PRECISIONS, slowest first; FP16 ranks with BF16."""
    return PRECISIONS.index("bf16" if precision == FP16 else precision)


@dataclass(frozen=True)
class Network:
    key: str
    name: str
    gbps: float  # line rate per NIC port, Gb/s
    efficiency: float  # share of the line rate collectives reach on large messages
    alpha_s: float  # latency of one ring step
    source: str
    switch_ports: int = 64  # of its largest switch: a three-tier fat tree connects ports^3/4 NICs

    @property
    def max_gpus(self) -> int:
        return self.switch_ports ** 3 // 4

    @property
    def bytes_per_s(self) -> float:
        """Effective one-direction bandwidth of one GPU's NIC."""
        return self.gbps / 8 * 1e9 * self.efficiency


@dataclass(frozen=True)
class GPU:
    key: str
    name: str
    generation: str
    tflops: dict  # precision -> dense TFLOP/s (absent: no tensor-core support)
    hbm_gb: float
    usable_mib: float
    hbm_tbps: float
    nvlink_gbps: float  # GB/s per GPU, both directions
    nvlink_domain: int
    nic_gbps: float
    network: str
    tdp_w: float  # the power it runs at (the energy estimate's too)
    source: str
    rated_w: float = 0.0  # the power the datasheet's peaks are quoted at; 0: tdp_w

    @property
    def power_scale(self) -> float:
        """The share of the datasheet's peaks sustained at `tdp_w` (1 at the rated power)."""
        if not self.rated_w or self.tdp_w >= self.rated_w:
            return 1.0
        return (self.tdp_w / self.rated_w) ** POWER_EXPONENT

    def peak(self, precision: str) -> float:
        """Dense peak FLOP/s at `precision`, at the power it runs at; the next-slower format when
        this GPU lacks it. FP16 runs at the BF16 tensor-core rate on every catalogued GPU (A100 312,
        H100 989 TFLOP/s dense both), so the catalog states the 16-bit rate once."""
        if precision == FP16:
            precision = "bf16"
        for p in PRECISIONS[: PRECISIONS.index(precision) + 1][::-1]:
            if self.tflops.get(p):
                return self.tflops[p] * 1e12 * self.power_scale
        raise ConfigError(f"gpu {self.key}: no tensor-core rate for {precision}")

    def precisions(self) -> list[str]:
        return [p for p in PRECISIONS if self.tflops.get(p)]

    @property
    def usable_bytes(self) -> float:
        return self.usable_mib * 2**20

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps * 1e12

    @property
    def gpus_per_node(self) -> int:
        """GPUs that reach each other over NVLink (the 'node' of hierarchical collectives)."""
        return self.nvlink_domain


@dataclass(frozen=True)
class NVLink:
    efficiency: float
    alpha_s: float


@dataclass(frozen=True)
class Cluster:
    gpu: GPU
    n_gpus: int
    network: Network
    nvlink: NVLink

    @property
    def nvlink_bytes_per_s(self) -> float:
        """Effective one-direction NVLink bandwidth per GPU."""
        return self.gpu.nvlink_gbps / 2 * 1e9 * self.nvlink.efficiency

    @property
    def nic_bytes_per_s(self) -> float:
        """Per-GPU scale-out bandwidth: the slower of the GPU's NIC and the chosen network."""
        return min(self.gpu.nic_gbps, self.network.gbps) / 8 * 1e9 * self.network.efficiency

    def describe(self) -> str:
        return (f"{self.n_gpus:,} x {self.gpu.name}, NVLink domain {self.gpu.nvlink_domain}, "
                f"{self.network.name}")


@functools.lru_cache(maxsize=1)
def _raw() -> dict:
    return tomllib.loads(CATALOG.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def gpus() -> dict[str, GPU]:
    out = {}
    for key, t in _raw()["gpu"].items():
        if t["generation"] not in GENERATIONS:
            raise ConfigError(f"{CATALOG}: gpu.{key}.generation: unknown '{t['generation']}' (known: {', '.join(GENERATIONS)})")
        tf = {p: float(t[f"{p}_tflops"]) for p in PRECISIONS if t.get(f"{p}_tflops")}
        out[key] = GPU(key=key, name=t["name"], generation=t["generation"], tflops=tf, hbm_gb=t["hbm_gb"],
                       usable_mib=t["usable_mib"], hbm_tbps=t["hbm_tbps"], nvlink_gbps=t["nvlink_gbps"],
                       nvlink_domain=int(t["nvlink_domain"]), nic_gbps=t["nic_gbps"], network=t["network"],
                       tdp_w=t["tdp_w"], source=t["source"], rated_w=t.get("rated_w", 0.0))
    return out


@functools.lru_cache(maxsize=None)
def networks() -> dict[str, Network]:
    return {k: Network(key=k, name=t["name"], gbps=t["gbps"], efficiency=t["efficiency"],
                       alpha_s=t["alpha_us"] * 1e-6, source=t["source"], switch_ports=int(t["switch_ports"]))
            for k, t in _raw()["network"].items()}


def nvlink() -> NVLink:
    t = _raw()["nvlink"]
    return NVLink(efficiency=t["efficiency"], alpha_s=t["alpha_us"] * 1e-6)


def _aliases() -> dict[str, str]:
    out = {}
    for key, t in _raw()["gpu"].items():
        out[key] = key
        for a in t.get("aliases", []):
            out[a.lower()] = key
    return out


def get_gpu(name: str) -> GPU:
    key = _aliases().get(name.strip().lower().replace(" ", "_"))
    if key is None:
        raise ConfigError(f"--gpu: unknown GPU '{name}' (known: {', '.join(gpus())})")
    return gpus()[key]


def get_network(name: str) -> Network:
    if name not in networks():
        raise ConfigError(f"--network: unknown network '{name}' (known: {', '.join(networks())})")
    return networks()[name]


def cluster(gpu: str | GPU, n_gpus: int, network: str | None = None) -> Cluster:
    g = gpu if isinstance(gpu, GPU) else get_gpu(gpu)
    if n_gpus < 1:
        raise ConfigError(f"--gpus: must be >= 1, got {n_gpus}")
    big = max(networks().values(), key=lambda x: x.max_gpus)
    if n_gpus > big.max_gpus:
        raise ConfigError(f"--gpus: {n_gpus:,} GPUs is beyond any catalogued system: the largest network the "
                          f"catalog describes, a three-tier fat tree of {big.switch_ports}-port {big.name} switches, "
                          f"connects {big.max_gpus:,} (hardware.toml)")
    return Cluster(gpu=g, n_gpus=n_gpus, network=get_network(network or g.network), nvlink=nvlink())


# The catalog GPUs a device's or an MLPerf result's name can spell (h100_96gb has no such name).
CATALOG_NAMES = ("a100", "h100", "h200", "gh200", "b200", "gb200", "b300", "gb300")


def catalog_kind(name: str, names: tuple[str, ...] = CATALOG_NAMES) -> str | None:
    """The catalog GPU `name` spells (a CUDA device name, an MLPerf accelerator column), or one of
    `names`: the longest of them inside it, as one name can hold another ("gh200" holds "h200",
    "gb300" "b300"); letters and digits only are compared."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    found = [k for k in names if k in s]
    return max(found, key=len) if found else None


def gpu_for_result(accelerator: str) -> GPU | None:
    """The catalog GPU an MLPerf result's accelerator column names, or None (TPU, Gaudi, AMD, L40S)."""
    s = accelerator.lower().replace(" ", "").replace("-", "")
    if ("nvl" in s or "pcie" in s) and not ("gb200" in s or "gb300" in s):
        return None  # H100/H200 NVL and PCIe cards: lower clocks and power, NVLink bridges; not the SXM parts
    if "gh200" in s and any(t in s for t in ("141", "144", "hbm3e")):
        return None  # the HBM3e Grace Hopper: the catalog's gh200 is the 96 GB HBM3 part
    kind = catalog_kind(accelerator)
    return gpus()[kind] if kind else None
