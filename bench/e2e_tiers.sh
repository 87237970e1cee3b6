#!/usr/bin/env bash
# End-to-end tiers bench (issue 4 item 6): greedy `strata run` decode on the qwen3-30b-a3b
# synthetic model at RAM_GB = 2 4 8 12 16 all — decode tok/s, SSD GB/s achieved, cache hit rate,
# felt I/O wait, from --prof-json — next to bench_ssd's raw O_DIRECT throughput at the experts'
# read size, and one run under an 8 GiB memory cgroup with RAM_GB auto. Writes
# $OUT/e2e_tiers.csv and $OUT/e2e_tiers.md (Markdown rows for bench/RESULTS.md "Tiers").
#
# Usage: bench/e2e_tiers.sh [BUILD_DIR]   (env: MODEL, N=32, THREADS=2, OUT=BUILD_DIR/e2e_tiers,
#        BUDGETS="2 4 8 12 16 all", CACHE_BUDGETS="4 8" (RAM_GB all given to the LRU cache,
#        CACHE_GB = RAM_GB), CGROUP_GB=8 (0 = skip), RAW=1 (0 = skip bench_ssd),
#        SSD_BPS=0 (> 0: every run and bench_ssd read the model's disk through a blkio throttle of
#        SSD_BPS bytes/s — a slower SSD, e.g. 900000000 for the 0.85-0.92 GB/s disks the Tiers
#        issue quotes — made by hand as a cgroup v1 blkio / v2 io child of this process's own))
#        Knobs in the environment (PREFETCH, PIN, REPIN, ...) reach every run.
set -euo pipefail
# Placement from the default plan every run: no learned usage profile read or written (USAGE_AUTO).
export USAGE_AUTO=0

BUILD=${1:-build}
STRATA=$BUILD/tools/strata
BENCH_SSD=$BUILD/bench/bench_ssd
N=${N:-32}
THREADS=${THREADS:-2}
OUT=${OUT:-$BUILD/e2e_tiers}
BUDGETS=${BUDGETS-"2 4 8 12 16 all"}
CACHE_BUDGETS=${CACHE_BUDGETS-"4 8"}
CGROUP_GB=${CGROUP_GB:-8}
RAW=${RAW:-1}
PROMPT="The experts that do not fit in memory stream from the disk, and"
CACHE=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}
MODEL=${MODEL:-$CACHE/qwen3-30b-a3b.gguf}

SSD_BPS=${SSD_BPS:-0}
mkdir -p "$OUT"
if [[ ! -f $MODEL ]]; then
  echo "e2e_tiers: $MODEL missing; generating it (strata synth --preset qwen3-30b-a3b)" >&2
  "$STRATA" synth --preset qwen3-30b-a3b --out "$MODEL"
fi

# SSD_BPS: a blkio (v1) / io (v2) cgroup throttling reads of the model's disk; every run and
# bench_ssd join it through $THROTTLE (a command prefix).
THROTTLE=()
throttle_dir=""
if [[ $SSD_BPS != 0 ]]; then
  src=$(df --output=source "$MODEL" | tail -1)
  parent=$(lsblk -no PKNAME "$src" 2>/dev/null | head -1)
  [[ -n $parent ]] && src=/dev/$parent
  majmin=$(lsblk -dno MAJ:MIN "$src" | tr -d ' ')
  if [[ -d /sys/fs/cgroup/blkio ]]; then
    own=$(awk -F: '$2 ~ /(^|,)blkio(,|$)/ {print $3}' /proc/self/cgroup)
    throttle_dir=/sys/fs/cgroup/blkio${own%/}/strata-ssd-$$
    mkdir "$throttle_dir"
    echo "$majmin $SSD_BPS" >"$throttle_dir/blkio.throttle.read_bps_device"
  else
    throttle_dir=/sys/fs/cgroup$(awk -F: '$1 == 0 {print $3}' /proc/self/cgroup)/strata-ssd-$$
    mkdir "$throttle_dir"
    echo "$majmin rbps=$SSD_BPS" >"$throttle_dir/io.max"
  fi
  echo "e2e_tiers: reads of $src ($majmin) throttled to $SSD_BPS bytes/s ($throttle_dir)" >&2
  echo "throttle: $src ($majmin) reads at most $SSD_BPS bytes/s (cgroup $throttle_dir)" >"$OUT/throttle.txt"
  THROTTLE=(sh -c "echo \$\$ > $throttle_dir/cgroup.procs && exec \"\$@\"" sh)
  trap 'rmdir "$throttle_dir" 2>/dev/null || true' EXIT
fi

# One run: $1 = label, $2 = RAM_GB (or "auto"), $3 = CACHE_GB (or "auto"), rest = a command
# prefix (cgroup wrapper).
run_one() {
  local label=$1 ram=$2 cache=$3
  shift 3
  local json=$OUT/$label.json
  rm -f "$json"
  local start=$(date +%s.%N)
  "$@" "${THROTTLE[@]}" "$STRATA" run -m "$MODEL" -p "$PROMPT" -n "$N" --temp 0 --ignore-eos --no-display-prompt \
    -t "$THREADS" --ram-gb "$ram" --cache-gb "$cache" --prof 1 --prof-json "$json" >"$OUT/$label.out" \
    2>"$OUT/$label.err" || { echo "e2e_tiers: $label failed:" >&2; tail -3 "$OUT/$label.err" >&2; return 0; }
  local wall=$(echo "$(date +%s.%N) - $start" | bc)
  python3 - "$json" "$label" "$ram" "$wall" >>"$OUT/e2e_tiers.csv" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
t, c, io, p = j["tiers"], j["cache"], j["io"], j["plan"]
ram, ssd = t["ram"], t["ssd"]
print(",".join(str(x) for x in [
    sys.argv[2], sys.argv[3], p["cache_bytes"] / 2**30, p["ram_budget_bytes"] / 2**30, p["experts_ram"], p["experts_ssd"],
    j["prefill_tokens"], round(j["prefill_tok_s"], 3), j["decode_tokens"],
    round(j["decode_tok_s"], 3), round(j["decode_latency_ms"]["p50"], 1),
    round(ssd["bytes"] / 1e9, 3), round(ssd["gb_s"], 3), round(c["hit_rate"], 4),
    round(io["wait_seconds"], 3), round(j["decode_seconds"] + j["prefill_seconds"], 3),
    round(io["service_seconds"], 3), round(ram["bytes"] / 1e9, 3), round(ram["seconds"], 2),
    float(sys.argv[4]), round(ssd["seconds"], 3)]))
EOF
}

echo "label,ram_gb_knob,cache_gib,ram_budget_gib,experts_ram,experts_ssd,prefill_tokens,prefill_tok_s,decode_tokens,decode_tok_s,decode_p50_ms,ssd_gb_read,ssd_gb_s,cache_hit_rate,io_wait_s,run_s,io_service_s,ram_load_gb,ram_load_s,wall_s,ssd_busy_s" >"$OUT/e2e_tiers.csv"

avail_gib() { awk '/MemAvailable/ {print int($2 / 1048576)}' /proc/meminfo; }
# RAM every expert needs (GiB, rounded up), so a budget at or above it is the "all" run.
all_gib=$("$STRATA" inspect "$MODEL" --json 2>/dev/null | python3 -c '
import json, sys
print(-(-sum(l["expert_bytes"] for l in json.load(sys.stdin)["layers"]) // 2**30))' || echo 999)
for b in $BUDGETS; do
  ram=$b
  [[ $b == all ]] && ram=1024  # more than every expert: the plan keeps what it needs
  if [[ $b != all && $b -ge $all_gib ]]; then
    echo "e2e_tiers: RAM_GB=$b holds every expert ($all_gib GiB): same plan as all, skipped" >&2
    continue
  fi
  need=$((${ram%.*} < all_gib ? ${ram%.*} : all_gib))
  if (($(avail_gib) < need + 3)); then
    echo "e2e_tiers: RAM_GB=$b skipped: only $(avail_gib) GiB available (others' jobs)" >&2
    continue
  fi
  echo "e2e_tiers: RAM_GB=$b" >&2
  run_one "ram_$b" "$ram" auto
done
for b in $CACHE_BUDGETS; do
  echo "e2e_tiers: RAM_GB=$b CACHE_GB=$b" >&2
  run_one "cache_$b" "$b" "$b"
done

# 8 GiB memory cgroup, RAM_GB auto: systemd-run when systemd runs, else a cgroup v1/v2 child of
# this process's own memory cgroup made by hand (what cgcreate/cgexec would do).
if [[ $CGROUP_GB != 0 ]]; then
  limit=$((CGROUP_GB * 1024 * 1024 * 1024))
  if [[ $(ps -p 1 -o comm=) == systemd ]] && command -v systemd-run >/dev/null; then
    echo "e2e_tiers: cgroup via systemd-run --scope -p MemoryMax=${CGROUP_GB}G" >&2
    echo "cgroup: systemd-run --scope -p MemoryMax=${CGROUP_GB}G" >"$OUT/cgroup.txt"
    run_one "cgroup_${CGROUP_GB}g" auto auto systemd-run --quiet --scope -p MemoryMax=${CGROUP_GB}G -p MemorySwapMax=0
  else
    own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
    if [[ -n $own ]]; then
      dir=/sys/fs/cgroup/memory$own/strata-e2e-$$
      mkdir "$dir"
      echo "$limit" >"$dir/memory.limit_in_bytes"
      [[ -f $dir/memory.memsw.limit_in_bytes ]] && echo "$limit" >"$dir/memory.memsw.limit_in_bytes"
      echo "cgroup: v1 memory cgroup $dir, memory.limit_in_bytes=$limit (by hand; no systemd)" >"$OUT/cgroup.txt"
      echo "e2e_tiers: $(cat "$OUT/cgroup.txt")" >&2
      run_one "cgroup_${CGROUP_GB}g" auto auto sh -c "echo \$\$ > $dir/cgroup.procs && exec \"\$@\"" sh
      echo "peak $(cat "$dir/memory.max_usage_in_bytes") bytes, failcnt $(cat "$dir/memory.failcnt")" >>"$OUT/cgroup.txt"
      rmdir "$dir"
    else
      dir=/sys/fs/cgroup$(awk -F: '$1 == 0 {print $3}' /proc/self/cgroup)/strata-e2e-$$
      mkdir "$dir"
      echo "$limit" >"$dir/memory.max"
      echo 0 >"$dir/memory.swap.max" 2>/dev/null || true
      echo "cgroup: v2 cgroup $dir, memory.max=$limit (by hand; no systemd)" >"$OUT/cgroup.txt"
      run_one "cgroup_${CGROUP_GB}g" auto auto sh -c "echo \$\$ > $dir/cgroup.procs && exec \"\$@\"" sh
      echo "peak $(cat "$dir/memory.peak" 2>/dev/null || echo ?) bytes" >>"$OUT/cgroup.txt"
      rmdir "$dir"
    fi
  fi
fi

# The disk's raw O_DIRECT throughput at the experts' read size (one slice's 4 KiB-aligned
# superset) and the queue depths a decode step uses (3 reads per SSD expert, top-8).
if [[ $RAW != 0 && -x $BENCH_SSD ]]; then
  slice_kib=$("$STRATA" inspect "$MODEL" --json 2>/dev/null | python3 -c '
import json, sys
gate = json.load(sys.stdin)["layers"][0]["gate"]["bytes"]  # one expert slice
print((gate + 4095) // 4096 * 4 + 4)  # its superset at an unaligned offset' 2>/dev/null || echo 868)
  "${THROTTLE[@]}" "$BENCH_SSD" --file="$OUT/bench-ssd.tmp" --size-gib=4 --seconds=2 --sizes="$slice_kib" \
    --qds=3,8,24 >"$OUT/bench_ssd.txt" 2>&1 || true
fi

python3 - "$OUT" <<'EOF' >"$OUT/e2e_tiers.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/e2e_tiers.csv")))
print("| RAM_GB | cache | experts RAM / SSD | decode tok/s | p50 ms | SSD GB read | SSD GB/s busy (mean QD) | SSD GB/s over the run | cache hit rate | I/O wait felt (s, % of run) | prefill tok/s | start-up RAM load |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    run = float(r["run_s"])
    wait = float(r["io_wait_s"])
    knob = r["ram_gb_knob"] if r["ram_gb_knob"] != "1024" else "all"
    print(f"| {knob} ({float(r['ram_budget_gib']):.2f} GiB) | {float(r['cache_gib']):.2f} GiB | {r['experts_ram']} / {r['experts_ssd']} | "
          f"{float(r['decode_tok_s']):.2f} | {r['decode_p50_ms']} | {r['ssd_gb_read']} | {r['ssd_gb_s']} "
          f"({float(r['io_service_s']) / float(r['ssd_busy_s']) if float(r['ssd_busy_s']) else 0:.1f}) | "
          f"{float(r['ssd_gb_read']) / run if run else 0:.2f} | "
          f"{100 * float(r['cache_hit_rate']):.1f}% | {wait:.2f} ({100 * wait / run if run else 0:.0f}%) | "
          f"{float(r['prefill_tok_s']):.2f} | {r['ram_load_gb']} GB in {r['ram_load_s']} s |")
EOF
cat "$OUT/e2e_tiers.md"
[[ -f $OUT/bench_ssd.txt ]] && cat "$OUT/bench_ssd.txt"
[[ -f $OUT/cgroup.txt ]] && cat "$OUT/cgroup.txt"
