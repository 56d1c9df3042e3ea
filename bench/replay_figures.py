#!/usr/bin/env python3
"""The paper's cache and scheduling figures from the replay (cache-only or --store).

Runs build/tools/mooncake_replay over both shipped traces for

  fig9   one global cache, hit rate against capacity (paper.md 3.1)
  fig10  ten prefill nodes of 3M tokens, output length 1, every router
         beside the global pool (paper.md 3.2)
  fig8   prefill time per request without a prefix cache (vLLM's column,
         the cost model over every whole prompt) against Mooncake's pool
         and Algorithm 1, and the cut (paper.md A11, A12)
  fig5   eight prefill nodes of 3M tokens, average / p50 / p90 TTFT per
         scheduler (paper.md 3.3)
  fig11  replica counts of the keys ranked 10 / 100 / 1000 / 10000 under
         Algorithm 1 on ten 3M nodes, sampled every 30 s (paper.md 3.3),
         with per-node recency (the reference's) and per-object recency
         (--object-lru, the master's: docs/conductor.md, Figure 11)

and prints each as a Markdown table with the reference replay's values
beside ours, as docs/conductor.md holds them (about 10 s on 2 cores).

With --store every replay runs against the real store (mooncake_replay
--store: its own master and conductor, the nodes store clients with real
segments of --block-bytes per block, every reused block read through the
store): Figure 9's one global cache is one node's segment, Figure 10's "one
30M pool" one node of 30M tokens (the hit rate and prefill time of a pool do
not depend on how many nodes share it), and Figure 11's snapshots count each
block's memory replicas in the store (the master's lease-free admin pages).  --caps picks Figure 9's
capacities (a store-backed point takes 10-60 s); --lease-ms is the started
master's read lease (20 ms here: a 500 ms one pins much of a small segment).

With --png DIR each figure is also drawn, ours beside the reference, as
DIR/fig9.png, fig10.png, fig8.png, fig5.png and fig11.png (matplotlib: Debian's
python3-matplotlib, `scripts/install-deps.sh --bench`).

usage: bench/replay_figures.py [--build build] [--traces ../shared/traces]
                               [--only fig9,fig10,fig8,fig5,fig11] [--json FILE]
                               [--png DIR] [--store [--block-bytes 1k] [--lease-ms 20]]
                               [--caps 1e6,3e6,...]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

# paper.md 3.1 (LRU columns), token-weighted hit rate
FIG9_REF = {
    "conversation": {1e4: .043, 1e5: .043, 5.12e5: .045, 1e6: .054, 2e6: .086, 3e6: .139,
                     5.12e6: .216, 1e7: .291, 1.54e7: .332, 2.56e7: .362, 5.12e7: .371,
                     1e8: .374},
    "synthetic": {1e4: .002, 1e5: .017, 5.12e5: .086, 1e6: .145, 2e6: .233, 3e6: .315,
                  5.12e6: .432, 1e7: .577, 1.54e7: .636, 2.56e7: .651, 5.12e7: .651,
                  1e8: .651},
}
# paper.md 3.2: (nodes, pool, policy) -> (conv hit, conv s, synth hit, synth s)
FIG10 = [
    ("one 3M cache", 1, "global", "load", (.139, 1.400, .315, 1.427)),
    ("one 30M pool", 10, "global", "load", (.366, 1.035, .651, .711)),
    ("local, longest prefix", 10, "local", "prefix", (.139, 1.400, .642, .731)),
    ("local-cache-aware (Alg. 1, no fetch)", 10, "local", "local", (.321, 1.102, .616, .780)),
    ("load balancing", 10, "local", "load", (.111, 1.441, .178, 1.710)),
    ("random", 10, "local", "random", (.104, 1.453, .191, 1.686)),
    ("global-cache-aware (Alg. 1, fetch)", 10, "local", "global", (.362, 1.043, .634, .748)),
]
# paper.md A11, A12 (Fig. 8): setup, flags, (conv s, synth s) of the reference
# replay, the paper's read-offs, and whether --store applies: "no prefix cache"
# runs cache-only always (there is nothing to store); over the store the pool
# is one node's segment of 30M tokens, as in Figure 10
FIG8 = [
    ("vLLM, no prefix cache", ["--nodes", "16", "--capacity-tokens", "0", "--policy", "load"],
     (1.608, 2.102), (1.65, 2.02), False),
    ("Mooncake, one 30M pool", ["--nodes", "10", "--pool", "global", "--policy", "load",
                                "--capacity-tokens", "3e6"], (1.035, .711), (1.06, .73), True),
    ("Mooncake, Alg. 1 on ten 3M nodes", ["--nodes", "10", "--policy", "global",
                                          "--capacity-tokens", "3e6"], (1.043, .748),
     (1.06, .73), True),
]
# paper.md 3.3: conversation TTFT avg / p50 / p90, synthetic avg; the paper's avg
FIG5 = [
    ("global", (1.18, .48, 2.66, .79), 3.07),
    ("local", (1.31, .63, 2.92, .92), 3.58),
    ("load", (1.78, .99, 3.91, 2.99), 5.27),
    ("random", (6.50, 3.06, 18.10, 16.59), 19.65),
]
# paper.md 3.3: mean over the last third (max) of ranks 10 / 100 / 1000 / 10000
FIG11_REF = {"conversation": "5.4 (6) / 3.0 (4) / 1.0 (3) / 0.1 (2)",
             "synthetic": "3.0 (3) / 2.6 (3) / 2.0 (2) / 1.0 (1)"}
TRACES = ("conversation", "synthetic")


def replay(args, trace, *flags, store=True):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [os.path.join(args.build, "tools", "mooncake_replay"), "--quiet", "--trace",
               os.path.join(args.traces, trace + "_trace.jsonl"), "--json", out.name, *flags]
        if args.store and store:
            cmd += ["--store", "--block-bytes", args.block_bytes, "--lease-ms", args.lease_ms]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        with open(out.name) as f:
            return json.load(f)


def fig9(args, results):
    print("| tokens | blocks | conv ref | conv ours | synth ref | synth ours |")
    print("|---:|---:|---:|---:|---:|---:|")
    caps = [float(c) for c in args.caps.split(",")] if args.caps else FIG9_REF["conversation"]
    for cap in caps:
        if cap not in FIG9_REF["conversation"]:
            sys.exit(f"--caps: {cap:g} is not one of Figure 9's capacities")
        row = []
        for t in TRACES:
            r = replay(args, t, "--nodes", "1", "--pool", "global", "--policy", "load",
                       "--capacity-tokens", repr(cap))
            results.append({**r, "figure": "fig9", "trace": t, "capacity_tokens": cap})
            row += [f"{FIG9_REF[t][cap] * 100:.1f}%", f"{r['token_hit_rate'] * 100:.1f}%"]
        print(f"| {cap:g} | {int(cap // 512):,} | " + " | ".join(row) + " |")


def fig10(args, results):
    print("| setup | conv hit ref / ours | conv prefill s ref / ours "
          "| synth hit ref / ours | synth prefill s ref / ours |")
    print("|---|---:|---:|---:|---:|")
    for name, nodes, pool, policy, ref in FIG10:
        cells = []
        cap = 3e6
        if args.store and pool == "global" and nodes > 1:
            nodes, cap = 1, 3e6 * nodes  # one segment holds the pool
        for k, t in enumerate(TRACES):
            r = replay(args, t, "--nodes", str(nodes), "--pool", pool, "--policy", policy,
                       "--capacity-tokens", repr(cap), "--output-length-one")
            results.append({**r, "figure": "fig10", "trace": t, "setup": name})
            cells += [f"{ref[2 * k] * 100:.1f}% / {r['token_hit_rate'] * 100:.1f}%",
                      f"{ref[2 * k + 1]:.3f} / {r['prefill_s_per_request']:.3f}"]
        print(f"| {name} (`--nodes {nodes} --pool {pool} --policy {policy}`) | "
              + " | ".join(cells) + " |")


def fig8(args, results):
    print("| system | conv prefill s ref / ours | synth prefill s ref / ours "
          "| paper conv / synth | ours: cut against no cache, conv / synth |")
    print("|---|---:|---:|---:|---:|")
    base = {}
    for name, flags, ref, paper, over_store in FIG8:
        flags = list(flags)
        if args.store and "--pool" in flags:
            flags[flags.index("--nodes") + 1] = "1"  # one segment holds the pool
            flags[flags.index("--capacity-tokens") + 1] = "3e7"
        cells, cuts = [], []
        for k, t in enumerate(TRACES):
            r = replay(args, t, *flags, "--output-length-one", store=over_store)
            results.append({**r, "figure": "fig8", "trace": t, "setup": name})
            s = r["prefill_s_per_request"]
            cells.append(f"{ref[k]:.3f} / {s:.3f}")
            cuts.append(f"{(1 - s / base[t]) * 100:.0f}%" if t in base else "(the base)")
            base.setdefault(t, s)
        print(f"| {name} (`{' '.join(flags)}`) | " + " | ".join(cells)
              + f" | ≈{paper[0]:.2f} / ≈{paper[1]:.2f} | " + " / ".join(cuts) + " |")


def fig5(args, results):
    print("| scheduler | conv TTFT avg / p50 / p90 ref | ours | synth avg ref / ours "
          "| paper conv avg | ours / global | paper / global |")
    print("|---|---|---|---|---:|---:|---:|")
    ours_global = paper_global = None
    for policy, ref, paper in FIG5:
        rc = replay(args, "conversation", "--nodes", "8", "--capacity-tokens", "3e6",
                    "--policy", policy)
        rs = replay(args, "synthetic", "--nodes", "8", "--capacity-tokens", "3e6",
                    "--policy", policy)
        results += [{**rc, "figure": "fig5", "trace": "conversation"},
                    {**rs, "figure": "fig5", "trace": "synthetic"}]
        if ours_global is None:
            ours_global, paper_global = rc["ttft_avg_s"], paper
        print(f"| {policy} | {ref[0]:.2f} / {ref[1]:.2f} / {ref[2]:.2f} | "
              f"{rc['ttft_avg_s']:.2f} / {rc['ttft_p50_s']:.2f} / {rc['ttft_p90_s']:.2f} | "
              f"{ref[3]:.2f} / {rs['ttft_avg_s']:.2f} | {paper:.2f} | "
              f"{rc['ttft_avg_s'] / ours_global:.2f} | {paper / paper_global:.2f} |")


def fig11(args, results):
    """Cache-only: with per-node recency (the reference replay's) and with
    per-object recency (--object-lru, the master's); over the store the
    store's own, which is per object."""
    lrus = [[]] if args.store else [[], ["--object-lru"]]
    heads = (["ours (over the store)"] if args.store
             else ["ours, per-node LRU", "ours, per-object LRU (`--object-lru`)"])
    print("| trace | ref: mean of last third (max), ranks 10 / 100 / 1000 / 10000 | "
          + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for t in TRACES:
        cells = []
        for lru in lrus:
            with tempfile.NamedTemporaryFile(suffix=".csv") as csv:
                r = replay(args, t, "--nodes", "10", "--capacity-tokens", "3e6", "--policy",
                           "global", "--output-length-one", "--replicas-csv", csv.name, *lru)
                with open(csv.name) as f:
                    rows = [line.strip().split(",") for line in f][1:]
            series = [[float(x) for x in row] for row in rows if row]
            results.append({**r, "figure": "fig11", "trace": t, "series": series})
            rep = r["replicas"]
            cells.append(" / ".join(f"{rep[k]['mean_last_third']:.1f} ({rep[k]['max']})"
                                    for k in ("rank10", "rank100", "rank1000", "rank10000")))
        print(f"| {t} | {FIG11_REF[t]} | " + " | ".join(cells) + " |")


def draw(results, outdir):
    """The figures as PNG files in outdir; returns their paths."""
    try:
        import matplotlib
    except ImportError:
        raise SystemExit("--png needs matplotlib: apt install python3-matplotlib "
                         "(scripts/install-deps.sh --bench)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(outdir, exist_ok=True)
    paths = []

    def save(fig, name):
        path = os.path.join(outdir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    by = {}
    for r in results:
        by.setdefault(r["figure"], []).append(r)
    if "fig9" in by:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for t, color in zip(TRACES, ("tab:blue", "tab:orange")):
            rows = sorted((r["capacity_tokens"], r["token_hit_rate"]) for r in by["fig9"]
                          if r["trace"] == t)
            ax.plot([c for c, _ in rows], [h * 100 for _, h in rows], "o-", color=color,
                    label=f"{t}: ours")
            ref = sorted(FIG9_REF[t].items())
            ax.plot([c for c, _ in ref], [h * 100 for _, h in ref], "x--", color=color,
                    alpha=0.6, label=f"{t}: reference")
        ax.set_xscale("log")
        ax.set_xlabel("global cache capacity (tokens)")
        ax.set_ylabel("token hit rate (%)")
        ax.set_title("Fig. 9: hit rate against capacity (one global LRU)")
        ax.legend(fontsize=8)
        save(fig, "fig9.png")
    if "fig10" in by:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.4), sharey=True)
        names = [f[0] for f in FIG10]
        for k, (t, ax) in enumerate(zip(TRACES, axes)):
            ours = {r["setup"]: r["token_hit_rate"] * 100 for r in by["fig10"]
                    if r["trace"] == t}
            ref = [f[4][2 * k] * 100 for f in FIG10]
            ys = range(len(names))
            ax.barh([y + 0.2 for y in ys], [ours.get(n, 0) for n in names], 0.4,
                    label="ours")
            ax.barh([y - 0.2 for y in ys], ref, 0.4, label="reference", alpha=0.6)
            ax.set_yticks(list(ys))
            ax.set_yticklabels(names, fontsize=7)
            ax.set_title(f"Fig. 10, {t}")
            ax.set_xlabel("token hit rate (%)")
        axes[0].legend(fontsize=8)
        save(fig, "fig10.png")
    if "fig8" in by:
        fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
        names = [f[0] for f in FIG8]
        for k, (t, ax) in enumerate(zip(TRACES, axes)):
            ours = {r["setup"]: r["prefill_s_per_request"] for r in by["fig8"]
                    if r["trace"] == t}
            xs = range(len(names))
            ax.bar([x - 0.2 for x in xs], [ours.get(n, 0) for n in names], 0.4, label="ours")
            ax.bar([x + 0.2 for x in xs], [f[3][k] for f in FIG8], 0.4, label="paper",
                   alpha=0.6)
            ax.set_xticks(list(xs))
            ax.set_xticklabels([n.replace(", ", ",\n") for n in names], fontsize=7)
            ax.set_title(f"Fig. 8, {t}")
            ax.set_ylabel("prefill time per request (s)")
        axes[0].legend(fontsize=8)
        save(fig, "fig8.png")
    if "fig5" in by:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        pols = [f[0] for f in FIG5]
        conv = {r["policy"]: r for r in by["fig5"] if r["trace"] == "conversation"}
        xs = range(len(pols))
        ax.bar([x - 0.2 for x in xs], [conv[p]["ttft_avg_s"] if p in conv else 0
                                       for p in pols], 0.4, label="ours")
        ax.bar([x + 0.2 for x in xs], [f[1][0] for f in FIG5], 0.4, label="reference",
               alpha=0.6)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(pols)
        ax.set_ylabel("average TTFT (s)")
        ax.set_title("Fig. 5: TTFT by scheduler, conversation trace, 8 nodes")
        ax.legend(fontsize=8)
        save(fig, "fig5.png")
    if "fig11" in by:
        n = len(by["fig11"])
        fig, axes = plt.subplots(1, n, figsize=(5 * n, 4), squeeze=False)
        for ax, r in zip(axes[0], by["fig11"]):
            ser = r.get("series", [])
            for col, name in enumerate(("rank 10", "rank 100", "rank 1000", "rank 10000"),
                                       start=1):
                ax.plot([row[0] for row in ser], [row[col] for row in ser], label=name)
            ax.set_title(f"Fig. 11, {r['trace']}, {r.get('lru', 'node')} LRU")
            ax.set_xlabel("trace time (s)")
            ax.set_ylabel("replicas")
            ax.legend(fontsize=7)
        save(fig, "fig11.png")
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--build", default=os.path.join(here, "build"))
    ap.add_argument("--traces", default=os.path.join(here, "..", "shared", "traces"))
    ap.add_argument("--only", default="fig9,fig10,fig8,fig5,fig11")
    ap.add_argument("--json")
    ap.add_argument("--png", metavar="DIR", help="also draw the figures as PNG files here")
    ap.add_argument("--store", action="store_true",
                    help="replay against the real store (mooncake_replay --store)")
    ap.add_argument("--block-bytes", default="1k",
                    help="with --store: bytes stored per block (1k: 100M tokens in 200 MB)")
    ap.add_argument("--lease-ms", default="20",
                    help="with --store: the master's read lease (20 ms: with one small "
                         "segment a 500 ms lease pins much of it and puts fail, "
                         "docs/conductor.md)")
    ap.add_argument("--caps", help="Figure 9's capacities to run, e.g. 1e6,3e6,1e7 (all)")
    args = ap.parse_args()
    results = []
    for name in args.only.split(","):
        print(f"\n### {name}\n")
        figs = {"fig9": fig9, "fig10": fig10, "fig8": fig8, "fig5": fig5, "fig11": fig11}
        figs[name](args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.png:
        for path in draw(results, args.png):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
