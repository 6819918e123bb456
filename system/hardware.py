"""WSE-2 / CS-2 hardware facts in one place (docs/cost-model.md, docs/sources.md), each with its
public source.

The compiler's estimates (placement, est_samples_per_sec) are computed from these numbers and
nothing else, so a figure it prints can be traced back to a line here. Facts are constants;
derived figures are properties of WaferSpec (WSE2 is the real chip; tests may build a tiny one).
Units are in the names: _BYTES, _HZ, _BITS_S (bits/s), _BYTES_S (bytes/s), _FLOPS (FLOP/s).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WaferSpec", "WSE2", "SYSTEM_PORTS", "PORT_BITS_S"]

# -- the chip ---------------------------------------------------------------------------------
# Cerebras blog "Supporting PyTorch on the Cerebras WSE" (WSE-2 vs A100 table);
# ALCF System Overview.
WSE2_CORES = 850_000
# ALCF System Overview (docs.alcf.anl.gov/ai-testbed/cerebras/system-overview): "48 KB" per core.
# Read as KiB: 850,000 x 48 KiB = 41.8e9 bytes, which the same sources round to "40 GB".
SRAM_PER_CORE_BYTES = 48 * 1024
# Same sources: "On-chip memory 40 Gigabytes".
SRAM_TOTAL_BYTES = 40 * 10**9
# Blog table: "Memory bandwidth 20 Petabytes/sec".
MEMORY_BANDWIDTH_BYTES_S = 20 * 10**15
# Blog table: "Fabric bandwidth 220 Petabits/sec".
FABRIC_BANDWIDTH_BITS_S = 220 * 10**15
# Blog table; eenewseurope.com: 46,225 mm², 2.6 T transistors, TSMC 7 nm.
DIE_AREA_MM2 = 46_225
TRANSISTORS = 2.6e12
PROCESS_NM = 7
# Public CSL examples: `cslc --arch=wse2 --fabric-dims=757,996 --fabric-offsets=4,1`
# ("the fabric dimension of the actual CS-2, 757 x 996"). 757 x 996 = 753,972 PEs are exposed to
# programs, fewer than the 850,000 marketed cores; the difference is not explained publicly.
FABRIC_WIDTH = 757
FABRIC_HEIGHT = 996
FABRIC_OFFSETS = (4, 1)
# Cerebras SDK documentation, "A Conceptual View" (sdk.cerebras.net): PEs talk only through
# wavelets, 32-bit messages with a 5-bit colour; each PE's router has five bidirectional links
# (north, south, east, west and the "ramp" to its own compute engine); a hop between
# neighbours takes about a nanosecond (~1 cycle). We read a link as moving one wavelet per
# cycle in each direction: 850,000 cores x 8 link directions x 32 bits x 1.1 GHz = 239 Pb/s,
# consistent with the published 220 Pb/s fabric bandwidth (which counts fewer, or slower, links).
# A 16-bit value travels alone in a wavelet (its upper half unused), as the SDK's 16-bit DSDs do.
WAVELET_BYTES = 4
HOP_CYCLES = 1
# Ours (not published): per PE, the memory a compiled program keeps for its code, task stacks
# and fabric FIFOs; the SDK's examples leave a similar share of the 48 KB free. Only the rest
# holds weights, optimizer state and activations.
PE_RESERVED_BYTES = 8 * 1024
# Zhang et al., HPEC 2024 (arXiv 2409.00287) Table I: 1.1 GHz; 7.5 PFLOP/s dense fp16 per CS-2
# (Andromeda: 120 PF dense over 16 systems). "1 exaflop" figures count sparsity and are not used.
CLOCK_HZ = 1.1 * 10**9
PEAK_FP16_FLOPS = 7.5 * 10**15

# -- the system around it ---------------------------------------------------------------------
# argonne-lcf/AIaccelerators-SC24-tutorial, Cerebras README:
# "Each WSE is housed within a CS system, which provides 1.2 Tbps I/O".
SYSTEM_IO_BITS_S = 1.2 * 10**12
# ... as twelve 100 Gigabit Ethernet ports: tweakers.net on the CS-1 ("twaalf 100Gbit-
# ethernetpoorten"), vengineer.hatenablog.com (2025-07-02) counting the 12 Ethernet cables of a
# CS-3's 1.2 Tb/s ("CS-1, CS-2, CS-3 are all 100 Gbps Ethernet"); 12 x 100 Gb/s = 1.2 Tb/s.
SYSTEM_PORTS = 12
PORT_BITS_S = 100 * 10**9
# The appliance moves data over RoCE (ALCF logs: "Using network type: ROCE"). Line rate less
# framing, per RoCE v2 packet with a 4096-byte RoCE MTU (ours: the largest RoCE MTU): IEEE 802.3
# preamble+SFD 8, MAC header 14, FCS 4, inter-frame gap 12; IPv4 20, UDP 8, InfiniBand BTH 12,
# ICRC 4 -> 82 bytes of overhead per 4096 of payload (98.0%).
ROCE_PAYLOAD_BYTES = 4096
ROCE_OVERHEAD_BYTES = 8 + 14 + 4 + 12 + 20 + 8 + 12 + 4
# Cerebras' Glossary: "packaged into a 15RU system", one WSE per system.
RACK_UNITS = 15
# MZ R_1.6.0 common/pytorch/utils.py parse_cs_ip: "Default port number of CM".
CM_PORT = 9000

# -- the cluster ------------------------------------------------------------------------------
# cerebras.net/glossary/memoryx: "capacity … can scale from 4TB to 2.4PB, allowing the solution
# to support models with up to 120 trillion parameters".
MEMORYX_MIN_BYTES = 4 * 10**12
MEMORYX_MAX_BYTES = 2400 * 10**12
MEMORYX_MAX_PARAMS = 120 * 10**12
# cerebras.net/product-cluster: "clusters of up to 192 Cerebras CS-2s" (SwarmX fan-out).
MAX_SYSTEMS_PER_CLUSTER = 192
# Cerebras' Glossary / ALCF: pipelined is "best for models below 1B parameters, which can fit
# into WSE on-chip SRAM"; weight streaming for larger ones.
PIPELINED_MAX_PARAMS = 10**9
# Linley newsletter 2021: on-chip SRAM "can store up to 10 billion FP32 parameters".
SRAM_MAX_FP32_PARAMS = 10 * 10**9


@dataclass(frozen=True)
class WaferSpec:
    """A wafer as the compiler sees it: the PE grid, memory per PE, clock and peak compute."""

    name: str
    width: int  # PEs along x
    height: int  # PEs along y
    sram_per_pe_bytes: int
    clock_hz: float
    cores: int  # marketed core count: the peak-FLOP/s figure is spread over these
    peak_fp16_flops: float  # dense, whole chip
    memory_bandwidth_bytes_s: float
    fabric_bandwidth_bits_s: float
    io_bits_s: float
    ports: int = SYSTEM_PORTS
    reserved_per_pe_bytes: int = PE_RESERVED_BYTES
    wavelet_bytes: int = WAVELET_BYTES
    hop_cycles: int = HOP_CYCLES

    @property
    def pes(self) -> int:
        """PEs in the fabric the compiler places on (757 x 996 = 753,972 on the WSE-2)."""
        return self.width * self.height

    @property
    def fabric_sram_bytes(self) -> int:
        """SRAM of the placeable fabric: pes x sram_per_pe_bytes."""
        return self.pes * self.sram_per_pe_bytes

    @property
    def flops_per_pe_cycle(self) -> float:
        """Estimated dense fp16 FLOP per PE per cycle: peak / (cores x clock), ~8.0 on the WSE-2."""
        # 7.5e15 / (850,000 x 1.1e9) = 8.02, i.e. a 4-wide fp16 FMAC (2 FLOP each) per core.
        # An estimate derived from the two public figures, not a published per-core number.
        return self.peak_fp16_flops / (self.cores * self.clock_hz)

    @property
    def pe_flops(self) -> float:
        """Estimated dense fp16 FLOP/s of one PE."""
        return self.flops_per_pe_cycle * self.clock_hz

    @property
    def fabric_peak_flops(self) -> float:
        """Estimated dense fp16 FLOP/s of the placeable fabric (pes x pe_flops)."""
        return self.pes * self.pe_flops

    @property
    def memory_bandwidth_per_pe_bytes_s(self) -> float:
        """SRAM bandwidth of one PE: the chip's memory bandwidth spread over its cores."""
        return self.memory_bandwidth_bytes_s / self.cores

    @property
    def io_bytes_s(self) -> float:
        """System I/O in bytes/s (input samples in, outputs out), at line rate."""
        return self.io_bits_s / 8

    @property
    def port_payload_bytes_s(self) -> float:
        """Payload bytes/s one port carries in each direction: line rate less RoCE framing."""
        eff = ROCE_PAYLOAD_BYTES / (ROCE_PAYLOAD_BYTES + ROCE_OVERHEAD_BYTES)
        return self.io_bits_s / self.ports / 8 * eff

    @property
    def usable_per_pe_bytes(self) -> int:
        """Memory of one PE left for data after the program's reserve."""
        return max(0, self.sram_per_pe_bytes - self.reserved_per_pe_bytes)

    @property
    def usable_sram_bytes(self) -> int:
        """Data memory of the placeable fabric: pes x usable_per_pe_bytes."""
        return self.pes * self.usable_per_pe_bytes

    @property
    def link_bytes_s(self) -> float:
        """Bytes/s of one fabric link in one direction: a wavelet per cycle."""
        return self.wavelet_bytes * self.clock_hz


WSE2 = WaferSpec(
    name="WSE-2",
    width=FABRIC_WIDTH,
    height=FABRIC_HEIGHT,
    sram_per_pe_bytes=SRAM_PER_CORE_BYTES,
    clock_hz=CLOCK_HZ,
    cores=WSE2_CORES,
    peak_fp16_flops=PEAK_FP16_FLOPS,
    memory_bandwidth_bytes_s=MEMORY_BANDWIDTH_BYTES_S,
    fabric_bandwidth_bits_s=FABRIC_BANDWIDTH_BITS_S,
    io_bits_s=SYSTEM_IO_BITS_S,
)
