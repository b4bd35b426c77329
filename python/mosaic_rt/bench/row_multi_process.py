"""The "multi-process" row: one launch across processes under mpirun
(`multi_process`): a cross-process round trip and a remote DMA's
bandwidth, each against MPI's own of the same bytes in the same run, and
a right-permute over 1,024 simulated chips (4 processes x 256 devices on
however few CPUs) checked against XLA's ppermute."""

from __future__ import annotations

from mosaic_rt.bench.row import Row

ROUND_TRIP_TARGET = 3.0  # ours / MPI's own ping-pong
BANDWIDTH_TARGET = 2.0  # ours / MPI's own time for the same bytes
CHIPS = (4, 256)  # processes x devices each


class MultiProcess(Row):
    name, key, devices = "multi-process", "multi_process", 1

    def run(self, budget) -> dict:
        from mosaic_rt.bench import multi_process as mp

        procs, per = CHIPS
        ping = mp.launch("ping", 2, 1)
        # The kernel's own cost of a round trip: both devices in one process.
        ping["in_process_us"] = mp.launch("ping", 1, 2).get("ours_us")
        return {
            "ping": ping,
            "bandwidth": mp.launch("bandwidth", 2, 1, MRT_MIB=8),
            "permute": mp.launch("permute", procs, per, timeout=1800),
        }

    def summary(self, d) -> str:
        p, b, c = d["ping"], d["bandwidth"], d["permute"]
        parts = []
        if "error" not in p:
            parts.append(
                f"round trip {p['ours_us']:.1f} us vs MPI {p['mpi_us']:.1f} us ({p['ratio']:.2f}x; "
                f"in one process {_us(p.get('in_process_us'))})"
            )
        if "error" not in b:
            parts.append(f"DMA {b['ours_gbps']:.2f} GB/s vs MPI {b['mpi_gbps']:.2f} GB/s ({b['ratio']:.2f}x)")
        if "error" not in c:
            parts.append(
                f"{c['chips']} chips {'ok' if c['ok'] else 'MISMATCH'}, {c['us_per_hop']:.0f} us/hop, "
                f"peak RSS {max(c['peak_rss_mib']):.0f} MiB/process"
            )
        from mosaic_rt.bench.console import escape

        errors = [escape(v["error"]) for v in (p, b, c) if "error" in v]
        return "multi-process: " + "; ".join(parts + errors)

    def verdicts(self, d) -> list:
        from mosaic_rt.bench.targets import Verdict

        p, b, c = d["ping"], d["bandwidth"], d["permute"]
        return [
            Verdict(
                "multi-process round trip",
                ROUND_TRIP_TARGET,
                p.get("ratio"),
                "signal round trip between devices of two processes / mpi4py ping-pong of a frame's bytes "
                f"(the same kernel in one process: {_us(p.get('in_process_us'))}, the kernel's own share)",
                p.get("ratio") is not None and p["ratio"] <= ROUND_TRIP_TARGET,
                kind="max",
            ),
            Verdict(
                "multi-process DMA bandwidth",
                BANDWIDTH_TARGET,
                b.get("ratio"),
                "time of a remote DMA to another process / MPI sending the same bytes",
                b.get("ratio") is not None and b["ratio"] <= BANDWIDTH_TARGET,
                kind="max",
            ),
            Verdict(
                "1,024 chips across processes",
                1.0,
                1.0 if c.get("ok") else 0.0,
                f"right-permute over 4 processes x 256 devices equals {c.get('reference', 'the expected result')}",
                bool(c.get("ok")),
            ),
        ]

    def render(self, console, d) -> None:
        console.print(self.summary(d))

    def markdown(self, d) -> list[str]:
        p, b, c = d["ping"], d["bandwidth"], d["permute"]
        lines = [
            "",
            "Multi-process (mpirun, this machine):",
            "",
            "| measure | ours | MPI's own | ratio |",
            "|--|--:|--:|--:|",
        ]
        if "error" not in p:
            lines.append(f"| round trip | {p['ours_us']:.1f} us | {p['mpi_us']:.1f} us | {p['ratio']:.2f}x |")
            lines.append(f"| round trip, both devices in one process | {_us(p.get('in_process_us'))} | | |")
        if "error" not in b:
            lines.append(
                f"| {b['mib']:g} MiB DMA | {b['ours_gbps']:.2f} GB/s | {b['mpi_gbps']:.2f} GB/s | {b['ratio']:.2f}x |"
            )
        if "error" not in c:
            lines += [
                "",
                f"{c['chips']} chips ({c['processes']} processes): right-permute "
                f"{'equals' if c['ok'] else 'DIFFERS FROM'} XLA's ppermute; first call {c['first_call_s']:.1f} s, "
                f"steady {c['steady_s'] * 1e3:.1f} ms ({c['us_per_hop']:.0f} us per hop), peak RSS per process "
                + ", ".join(f"{r:.0f}" for r in c["peak_rss_mib"])
                + " MiB",
            ]
        return lines


def _us(v) -> str:
    return "-" if v is None else f"{v:.1f} us"


ROW = MultiProcess()
