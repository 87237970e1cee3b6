#!/usr/bin/env bash
# Held-out placement evidence (Placement issue item 6): usage stats learned on one set of token
# streams (train) pin a plan that is judged on a disjoint set (held out), at small RAM_GB values
# where the SSD matters. Per RAM_GB and arm (no PIN; PIN; PIN + REPIN; PREFETCH on / off, with and
# without PIN) a fresh `strata replay --ubatch 1` of the held-out streams (teacher-forced, one token
# per forward pass like decode) reports the RAM hit rate (pinned + cache), SSD bytes per token, the
# I/O wait the compute thread felt, and tok/s; arms run interleaved (the order flips every rep) and
# every arm's logits are checked byte-identical to the first run's. The train stats are made twice,
# by `strata stats --tokens` and from the ROUTE_TRACE recorded during that same run (`strata stats
# --from-trace`), and the two files must be identical. Optionally (AB_REPS > 0) `strata ab` of PIN
# vs no PIN per RAM_GB adds a paired bootstrap interval on tok/s.
#
# Usage: bench/placement_heldout.sh [BUILD_DIR]
#   env: MODEL (default: <cache>/qwen3-30b-a3b.gguf), RAM="4 8" (GiB, or N% of the model's routed
#        expert bytes), TRAIN=16x32 and HELD=4x16 (streams x tokens), DIST=zipf|uniform (token ids:
#        Zipf(1.1) over one fixed permutation of the vocabulary — text-like repetition — or uniform),
#        REPS=2, THREADS=2, ARMS="none pin pin+repin pf1 pin+pf1 pin+pf2" (arms whose knobs this
#        build lacks are skipped with a note), REPIN_N=8 (REPIN every N decode tokens),
#        TRAIN_RAM (RAM_GB for the training run; default the largest RAM), AB_REPS=0,
#        OUT=BUILD_DIR/placement_heldout/<model name>
# Writes $OUT/summary.md (the Markdown table for bench/RESULTS.md), $OUT/runs.csv, every run's
# PROF JSON and stderr. Exit 3 when logits differ between arms (placement must never change them).
set -euo pipefail

BUILD=${1:-build}
STRATA=${STRATA:-$BUILD/tools/strata}
CACHE=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/strata}
MODEL=${MODEL:-$CACHE/qwen3-30b-a3b.gguf}
RAM=${RAM:-"4 8"}
TRAIN=${TRAIN:-16x32}
HELD=${HELD:-4x16}
DIST=${DIST:-zipf}
REPS=${REPS:-2}
THREADS=${THREADS:-2}
ARMS=${ARMS:-"none pin pin+repin pf1 pin+pf1 pin+pf2"}
REPIN_N=${REPIN_N:-8}
AB_REPS=${AB_REPS:-0}
NAME=$(basename "$MODEL" .gguf)
OUT=${OUT:-$BUILD/placement_heldout/$NAME}

[[ -x $STRATA ]] || { echo "placement_heldout: $STRATA not built" >&2; exit 1; }
[[ -f $MODEL ]] || { echo "placement_heldout: $MODEL missing (strata synth --preset qwen3-30b-a3b --out $MODEL)" >&2; exit 1; }
mkdir -p "$OUT"
LOG=$OUT/log.txt
: >"$LOG"
say() { echo "placement_heldout: $*" | tee -a "$LOG" >&2; }
say "model $MODEL; RAM_GB $RAM; train $TRAIN, held out $HELD ($DIST); reps $REPS; threads $THREADS"
say "machine: $(nproc) cpus, $(free -g | awk '/Mem:/ {print $2 " GiB RAM, " $7 " GiB available"}'); load: $(uptime | sed 's/.*load average: //')"

# ---- model facts, RAM_GB values, token files ----
"$STRATA" inspect "$MODEL" --json >"$OUT/inspect.json"
read -r N_VOCAB EXPERT_BYTES < <(python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
print(j["tokenizer"]["n_tokens"], j["totals"]["expert_bytes"])' "$OUT/inspect.json")
RAM_GB=()
for r in $RAM; do
  if [[ $r == *% ]]; then
    RAM_GB+=("$(python3 -c "print(f'{${r%\%}/100*$EXPERT_BYTES/2**30:.9f}')")")
  else
    RAM_GB+=("$r")
  fi
done
TRAIN_RAM=${TRAIN_RAM:-$(printf '%s\n' "${RAM_GB[@]}" | sort -g | tail -1)}
say "routed experts $(python3 -c "print(f'{$EXPERT_BYTES/2**30:.4f}')") GiB; RAM_GB values ${RAM_GB[*]}"

python3 - "$OUT" "$N_VOCAB" "$TRAIN" "$HELD" "$DIST" <<'EOF'
import random, sys
out, n_vocab, train, held, dist = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
perm = list(range(n_vocab))
random.Random(0).shuffle(perm)  # one "language" for both sets
weights = [1.0 / (r + 1) ** 1.1 for r in range(n_vocab)]
def streams(spec, seed):
    n, length = (int(x) for x in spec.split("x"))
    rng = random.Random(seed)
    if dist == "uniform":
        return [[rng.randrange(n_vocab) for _ in range(length)] for _ in range(n)]
    return [[perm[i] for i in rng.choices(range(n_vocab), weights, k=length)] for _ in range(n)]
tr, ho = streams(train, 1), streams(held, 2)
assert not set(map(tuple, tr)) & set(map(tuple, ho)), "train and held-out share a stream"
for name, ss in (("train", tr), ("heldout", ho)):
    with open(f"{out}/{name}.txt", "w") as f:
        f.writelines(" ".join(map(str, s)) + "\n" for s in ss)
EOF

# ---- train: stats from the token file, and from the route trace of the same run ----
rm -f "$OUT/train.stats" "$OUT/train.rt" "$OUT/train.from-trace.stats"
t0=$(date +%s.%N)
RAM_GB=$TRAIN_RAM THREADS=$THREADS ROUTE_TRACE=$OUT/train.rt \
  "$STRATA" stats -m "$MODEL" --tokens "$OUT/train.txt" -o "$OUT/train.stats" 2>>"$LOG"
"$STRATA" stats --from-trace "$OUT/train.rt" -o "$OUT/train.from-trace.stats" 2>>"$LOG"
if cmp -s "$OUT/train.stats" "$OUT/train.from-trace.stats"; then
  TRACE_CHECK="identical"
else
  TRACE_CHECK="DIFFERENT"
fi
say "train stats in $(echo "$(date +%s.%N) - $t0" | bc) s; stats --from-trace of the run's route trace ($(stat -c %s "$OUT/train.rt") bytes): $TRACE_CHECK to the USAGE stats"

# ---- arms ----
KNOBS=$("$STRATA" knobs 2>/dev/null || true)
have() { grep -qw "$1" <<<"$KNOBS"; }
arm_knobs() {  # arm name -> "K=V ..." (empty for none); exit 1 when a knob is missing
  local arm=$1 k="" part
  [[ $arm == none ]] && { echo ""; return 0; }
  IFS=+ read -ra parts <<<"$arm"
  for part in "${parts[@]}"; do
    case $part in
      pin) k+=" PIN=$OUT/train.stats" ;;
      repin) have REPIN || return 1; k+=" REPIN=$REPIN_N" ;;
      pf[0-9]*) have PREFETCH || return 1; k+=" PREFETCH=${part#pf}" ;;
      *) echo "placement_heldout: unknown arm part '$part'" >&2; exit 1 ;;
    esac
  done
  echo "$k"
}
RUN_ARMS=()
for a in $ARMS; do
  if arm_knobs "$a" >/dev/null; then RUN_ARMS+=("$a"); else say "arm $a skipped: this build lacks its knob"; fi
done

echo "rep,ram_gb,arm,knobs,tokens,tok_s,hit_rate,ram_pinned,ram_cache,ssd_gb_per_token,io_wait_s,io_wait_share,prefetch_precision,prefetch_recall,prefetch_wait_saved_s,repin_moves,logits_identical,load" >"$OUT/runs.csv"
REF=""
MISMATCH=0
for ((rep = 0; rep < REPS; rep++)); do
  order=("${RUN_ARMS[@]}")
  if ((rep % 2)); then  # B A ... A B on odd reps: drift hits every arm alike
    order=(); for ((i = ${#RUN_ARMS[@]} - 1; i >= 0; i--)); do order+=("${RUN_ARMS[i]}"); done
  fi
  for ram in "${RAM_GB[@]}"; do
    for arm in "${order[@]}"; do
      tag="r${rep}_${ram}_${arm}"
      knobs="RAM_GB=$ram THREADS=$THREADS$(arm_knobs "$arm")"
      rm -rf "$OUT/dump_$tag"
      load=$(uptime | sed 's/.*load average: //; s/,.*//')
      # shellcheck disable=SC2086
      env $knobs "$STRATA" replay -m "$MODEL" --tokens "$OUT/heldout.txt" --ubatch 1 \
        --prof-json "$OUT/$tag.json" --dump-logits "$OUT/dump_$tag" 2>"$OUT/$tag.err" ||
        { say "$tag failed: $(tail -1 "$OUT/$tag.err")"; exit 1; }
      same=1
      if [[ -z $REF ]]; then
        REF=$OUT/dump_ref; rm -rf "$REF"; mv "$OUT/dump_$tag" "$REF"
      else
        for f in "$REF"/*; do cmp -s "$f" "$OUT/dump_$tag/$(basename "$f")" || same=0; done
        rm -rf "$OUT/dump_$tag"
      fi
      ((same)) || MISMATCH=1
      python3 - "$OUT/$tag.json" "$rep" "$ram" "$arm" "$knobs" "$same" "$load" >>"$OUT/runs.csv" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
rep, ram, arm, knobs, same, load = sys.argv[2:8]
tokens = j["prefill_tokens"] + j["decode_tokens"]
secs = j["prefill_seconds"] + j["decode_seconds"]
h, io = j["hit_rates"], j["io"]
pf = j.get("prefetch", {})
row = [rep, ram, arm, knobs.replace(",", ";"), tokens, round(tokens / secs, 3),
       round(h["fast"], 4), round(h["ram_pinned"], 4), round(h["ram_cache"], 4),
       round(j["ssd_gb_per_token"], 5), round(io["wait_seconds"], 3),
       round(j["time_shares"]["io_wait"], 4), round(pf.get("precision", 0), 3),
       round(pf.get("recall", 0), 3), round(pf.get("wait_saved_seconds", 0), 3),
       j.get("repin", {}).get("moves", 0), same, load]
print(",".join(map(str, row)))
EOF
      say "$(tail -1 "$OUT/runs.csv")"
    done
  done
done

# ---- optional: strata ab PIN vs no PIN per RAM_GB ----
AB_LINES=""
if ((AB_REPS > 0)); then
  for ram in "${RAM_GB[@]}"; do
    "$STRATA" ab -m "$MODEL" --tokens "$OUT/heldout.txt" --reps "$AB_REPS" \
      --a "RAM_GB=$ram THREADS=$THREADS" --b "RAM_GB=$ram THREADS=$THREADS PIN=$OUT/train.stats" \
      --json "$OUT/ab_$ram.json" >"$OUT/ab_$ram.txt" 2>>"$LOG"
    AB_LINES+="RAM_GB=$ram, strata ab --reps $AB_REPS (A: no PIN, B: PIN):"$'\n'"$(sed 's/^/    /' "$OUT/ab_$ram.txt")"$'\n'
  done
fi

# ---- summary ----
python3 - "$OUT/runs.csv" "$TRACE_CHECK" >"$OUT/summary.md" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
keys = []
for r in rows:
    k = (r["ram_gb"], r["arm"])
    if k not in keys: keys.append(k)
print("| RAM_GB | arm | hit rate (pinned + cache) | SSD MB/token | I/O wait felt (s, share) | tok/s median [min–max] | prefetch precision / recall | REPIN moves | logits |")
print("|---|---|---|---|---|---|---|---|---|")
for ram, arm in keys:
    rs = [r for r in rows if r["ram_gb"] == ram and r["arm"] == arm]
    tok = [float(r["tok_s"]) for r in rs]
    f = lambda c: statistics.median(float(r[c]) for r in rs)
    pf = f"{f('prefetch_precision'):.2f} / {f('prefetch_recall'):.2f}" if "pf" in arm else "—"
    print(f"| {float(ram):.4g} | {arm} | {100 * f('hit_rate'):.1f}% ({100 * f('ram_pinned'):.1f} + "
          f"{100 * f('ram_cache'):.1f}) | {1000 * f('ssd_gb_per_token'):.2f} | {f('io_wait_s'):.2f} "
          f"({100 * f('io_wait_share'):.0f}%) | {statistics.median(tok):.2f} [{min(tok):.2f}–{max(tok):.2f}] "
          f"| {pf} | {f('repin_moves'):.0f} | {'identical' if all(r['logits_identical'] == '1' for r in rs) else 'DIFFER'} |")
print()
print(f"{len(rows)} runs, {rows[0]['tokens']} held-out tokens each; load average at the runs "
      f"{min(float(r['load']) for r in rows):.1f}–{max(float(r['load']) for r in rows):.1f}; "
      f"train stats vs stats --from-trace of the same run: {sys.argv[2]}.")
EOF
[[ -n $AB_LINES ]] && printf '\n```\n%s```\n' "$AB_LINES" >>"$OUT/summary.md"
cat "$OUT/summary.md"
say "load at the end: $(uptime | sed 's/.*load average: //')"
if ((MISMATCH)); then say "LOGITS DIFFER between arms"; exit 3; fi
