#!/usr/bin/env bash
# Runs the kernel-sensitive tests under every oneDNN setting this machine can take, so
# that one machine stands in for the CPUs users have: oneDNN off (TensorFlow's Eigen
# kernels) and on, and oneDNN capped at each instruction-set level below this CPU's own
# (AVX2 = an AVX2-only EPYC; AVX512_CORE = AVX-512 without bfloat16; AVX512_CORE_BF16 =
# Zen 4 / Cooper Lake; AVX512_CORE_AMX = Sapphire Rapids). CTranslate2 and XLA are capped
# at the same level (CT2_FORCE_CPU_ISA, --xla_cpu_max_isa). Last, where qemu-user is
# installed, a subset under QEMU's emulation of an AVX2-only CPU (pytest_on_emulated_cpu.sh),
# where TensorFlow's own CPU detection sees no AVX-512 at all.
#
#   tests/scripts/cpu_matrix.sh                 # the default test files
#   tests/scripts/cpu_matrix.sh tests/test_dense.py tests/test_layer_norm.py
#   CPU_MATRIX_QEMU_TESTS="tests/test_dense.py" tests/scripts/cpu_matrix.sh
#   CPU_MATRIX_SKIP_QEMU=1 tests/scripts/cpu_matrix.sh
#   CPU_MATRIX_ROWS="AVX2 qemu" tests/scripts/cpu_matrix.sh   # only those rows
#
# A cap can crash TensorFlow on half precision: on an AVX-512 CPU, oneDNN capped at AVX2
# segfaults on any bfloat16 matmul, and capped below the CPU's avx512_fp16 on a float16
# one (TensorFlow hands those ops to oneDNN by the CPU's own flags, and the capped oneDNN
# has no such kernels; no real CPU is in that state). So each cap row first runs a
# bfloat16 and a float16 matmul in subprocesses, and where one crashes, the row runs
# without that type's tests and says so; the QEMU row runs them on an emulated AVX2-only
# CPU, where TensorFlow itself takes its non-oneDNN paths. A setting that crashes
# TensorFlow otherwise is reported as such, naming the tests it crashed in, and the row is
# run again without them (and again while new crashes appear); a row that hangs is killed
# after CPU_MATRIX_ROW_TIMEOUT seconds (default 1500) and reported; then the next
# setting runs. Prints a table: setting x passed /
# failed / errors / outcome; exits 1 if any test that ran failed (a crash is no verdict).
# Takes about 5-10 minutes a row on 2 cores; logs go to $CPU_MATRIX_LOGS (a temp dir).
set -uo pipefail
cd "$(dirname "$0")/../.."

PY=${PY:-.venv/bin/python}
if [ ! -x "$PY" ]; then
  echo "$0: $PY not found; run 'make install' first (or set PY=path/to/python)." >&2
  exit 2
fi
if [ $# -gt 0 ]; then
  TESTS=("$@")
else
  TESTS=(tests/test_dense.py tests/test_layer_norm.py tests/test_plain_ops.py
         tests/test_layers.py tests/test_model.py tests/test_decoding.py
         tests/test_beam_search.py tests/test_relative_attention.py
         tests/test_mixed_precision_training.py tests/test_training.py
         tests/test_ctranslate2.py tests/test_faults_divergence.py tests/test_export.py
         tests/test_t2t_import.py tests/test_near_ties.py tests/test_keras_saving.py
         tests/test_ensemble.py tests/test_forced_prefix.py tests/test_alignment_output.py
         tests/test_alignments.py tests/test_lm_model.py tests/test_prepend_mode.py)
fi
# The QEMU row: these files, and every other bfloat16 or float16 test of the matrix's files.
QEMU_TESTS=${CPU_MATRIX_QEMU_TESTS:-"tests/test_dense.py tests/test_layer_norm.py tests/test_mixed_precision_training.py"}
QEMU_CPU=${CPU_MATRIX_QEMU_CPU:-EPYC-Milan}
LOGS=${CPU_MATRIX_LOGS:-$(mktemp -d /tmp/cpu_matrix.XXXXXX)}
mkdir -p "$LOGS"

# oneDNN's ISA levels, lowest first, with the /proc/cpuinfo flags each needs.
LEVELS=(AVX2 AVX512_CORE AVX512_CORE_BF16 AVX512_CORE_AMX)
declare -A NEEDS=([AVX2]="avx2 fma" [AVX512_CORE]="avx512f avx512bw avx512vl avx512dq"
                  [AVX512_CORE_BF16]="avx512_bf16" [AVX512_CORE_AMX]="amx_bf16 amx_tile")
declare -A CT2_ISA=([AVX2]=AVX2 [AVX512_CORE]=AVX512 [AVX512_CORE_BF16]=AVX512
                    [AVX512_CORE_AMX]=AVX512)
declare -A XLA_ISA=([AVX2]=AVX2 [AVX512_CORE]=AVX512 [AVX512_CORE_BF16]=AVX512_BF16
                    [AVX512_CORE_AMX]=AMX)
FLAGS=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
MODEL=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2 | sed 's/^ *//')
own=""
for level in "${LEVELS[@]}"; do
  ok=1
  for flag in ${NEEDS[$level]}; do
    [[ "$FLAGS" == *" $flag "* ]] || ok=0
  done
  [ $ok = 1 ] && own=$level || break
done
echo "CPU: ${MODEL:-unknown}; oneDNN's level here: ${own:-below AVX2}"
echo "Tests: ${TESTS[*]}"
echo "Logs: $LOGS"
echo

ROWS=()
FAILED=0

# run_row NAME LOGFILE COMMAND...: runs one setting, appends its table row.
# Tests whose process TensorFlow crashed (pytest-xdist names each) count as failed in
# pytest's summary; the row is run again without them (again, while new crashes
# appear, at most CPU_MATRIX_RERUNS times), so that every other test's verdict is
# known. The crashes are reported, not counted as failures. A run that exceeds
# CPU_MATRIX_ROW_TIMEOUT seconds is killed and reported as hung.
ROW_TIMEOUT=${CPU_MATRIX_ROW_TIMEOUT:-1500}
RERUNS=${CPU_MATRIX_RERUNS:-4}
run_row() {
  local name="$1" log="$2"; shift 2
  local start=$SECONDS attempt=0 rc crashed="" new deselect=() id
  echo "== $name"
  while :; do
    timeout -k 30 "$ROW_TIMEOUT" "$@" "${deselect[@]}" >"$log" 2>&1
    rc=$?
    new=$(grep -oE "worker '[^']+' crashed while running '[^']+'" "$log" \
          | sed -E "s/.*running '([^']+)'/\1/" | sort -u || true)
    [ -n "$new" ] && [ "$attempt" -lt "$RERUNS" ] || break
    attempt=$((attempt + 1))
    crashed=$(printf '%s\n%s\n' "$crashed" "$new" | sed '/^$/d' | sort -u)
    deselect=()
    while read -r id; do deselect+=(--deselect "$id"); done <<<"$crashed"
    echo "   TensorFlow crashed in $(wc -l <<<"$new") test(s); running the rest again ($log)"
    log="${log%.log}_rest$attempt.log"
  done
  local secs=$((SECONDS - start)) summary passed failed errors outcome deselected
  summary=$(grep -E "^(=+ )?[0-9]+ (passed|failed|error)" "$log" | tail -1)
  passed=$(grep -oE "[0-9]+ passed" <<<"$summary" | grep -oE "[0-9]+" || true)
  failed=$(grep -oE "[0-9]+ failed" <<<"$summary" | grep -oE "[0-9]+" || true)
  errors=$(grep -oE "[0-9]+ errors?" <<<"$summary" | grep -oE "[0-9]+" || true)
  passed=${passed:-0}; failed=${failed:-0}; errors=${errors:-0}
  if [ $rc = 124 ] || [ $rc = 137 ]; then
    outcome="HUNG: killed after ${ROW_TIMEOUT}s ($log)"
    FAILED=1
  elif [ -n "$new" ]; then
    outcome="CRASHED still after $RERUNS reruns ($log)"
  elif grep -q "^INTERNALERROR" "$log"; then  # xdist lost track of a replaced crashed worker
    outcome="CRASHED: TensorFlow crashed and pytest-xdist failed to replace the worker ($log)"
    FAILED=1
  elif [ $rc -ge 128 ]; then
    outcome="CRASHED (exit $rc; TensorFlow does not run under this setting)"
  elif [ -z "$summary" ]; then
    outcome="DID NOT RUN (exit $rc): $(tail -1 "$log" | cut -c1-80)"
    FAILED=1
  elif [ "$failed" -gt 0 ] || [ "$errors" -gt 0 ]; then
    outcome="FAILED"
    FAILED=1
  else
    outcome="ok"
  fi
  if [ -n "${ROW_NOTE:-}" ]; then
    # (xdist's summary leaves out the deselected count: pytest's own collection gives it)
    deselected=$("$@" --collect-only 2>/dev/null | grep -oE "[0-9]+ deselected" | grep -oE "[0-9]+" | tail -1)
    outcome="$outcome; ${deselected:-?} tests not run, as $ROW_NOTE (the QEMU row runs them on an emulated AVX2 CPU)"
  fi
  if [ -n "$crashed" ]; then
    outcome="$outcome; TensorFlow crashed (segfault/abort) in, so run without: $(tr '\n' ' ' <<<"$crashed")"
  fi
  echo "   $passed passed, $failed failed, $errors errors, ${secs}s: $outcome"
  grep -E "^(FAILED|ERROR) " "$log" | head -20 | sed 's/^/   /'
  ROWS+=("$(printf '| %-58s | %6s | %6s | %6s | %5ss | %s |' "$name" "$passed" "$failed" \
    "$errors" "$secs" "$outcome")")
}

# CPU_MATRIX_ROWS="onednn0 onednn1 AVX2 AVX512_CORE AVX512_CORE_BF16 AVX512_CORE_AMX qemu"
# (any of them) runs only those rows.
wanted() { [ -z "${CPU_MATRIX_ROWS:-}" ] || [[ " $CPU_MATRIX_ROWS " == *" $1 "* ]]; }

# A crashed worker is replaced (xdist's default allows 4 per worker, fewer than a
# crashing setting can use up).
# A matmul and a Dense layer in DTYPE: crash (segfault, abort) where oneDNN gets ops of a
# half-precision type it has no kernels for.
HALF_PROBE='import sys
import tensorflow as tf
dtype = sys.argv[1]
x = tf.cast(tf.random.normal([64, 64]), dtype)
print(float(tf.reduce_sum(tf.cast(tf.matmul(x, x), tf.float32))))
print(tf.keras.layers.Dense(8, dtype="mixed_" + dtype)(tf.ones([4, 64])).dtype)'
PYTEST=("$PY" -m pytest -q -n 2 --dist loadfile --max-worker-restart=1000 -p no:cacheprovider
        "${TESTS[@]}")
wanted onednn0 && run_row "TF_ENABLE_ONEDNN_OPTS=0" "$LOGS/onednn0.log" \
  env TF_ENABLE_ONEDNN_OPTS=0 "${PYTEST[@]}"
wanted onednn1 && run_row "TF_ENABLE_ONEDNN_OPTS=1 (this CPU's own level)" "$LOGS/onednn1.log" \
  env TF_ENABLE_ONEDNN_OPTS=1 "${PYTEST[@]}"
below=1
for level in "${LEVELS[@]}"; do
  if [ "$level" = "$own" ] || [ -z "$own" ]; then
    below=0
  fi
  name="ONEDNN_MAX_CPU_ISA=$level"
  wanted "$level" || continue
  if [ $below = 0 ]; then
    ROWS+=("$(printf '| %-58s | %6s | %6s | %6s | %6s | %s |' "$name" - - - - \
      "not run: not below this CPU's ${own:-level}")")
    continue
  fi
  CAP=(env TF_ENABLE_ONEDNN_OPTS=1 ONEDNN_MAX_CPU_ISA=$level CT2_FORCE_CPU_ISA=${CT2_ISA[$level]}
       XLA_FLAGS="--xla_cpu_max_isa=${XLA_ISA[$level]}")
  ROW_NOTE="" KEEP=() left=()
  for dtype in bfloat16 float16; do
    # (stderr of the group: bash's report of the crash it expects)
    { "${CAP[@]}" TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c "$HALF_PROBE" $dtype \
        >"$LOGS/probe_${level}_$dtype.log" 2>&1; probe=$?; } 2>/dev/null
    [ $probe -ge 128 ] && left+=("$dtype")
  done
  # -k matches substrings of test names: "float16" is in every bfloat16 test's too.
  case "${left[*]}" in
    "bfloat16 float16") KEEP=(-k "not float16") ;;
    "bfloat16") KEEP=(-k "not bfloat16") ;;
    "float16") KEEP=(-k "not float16 or bfloat16") ;;
  esac
  if [ ${#left[@]} -gt 0 ]; then
    if [ ${#left[@]} = 2 ]; then
      ROW_NOTE="a bfloat16 and a float16 matmul crash TensorFlow under this cap"
    else
      ROW_NOTE="a ${left[0]} matmul crashes TensorFlow under this cap"
    fi
    echo "   ($ROW_NOTE: those tests are left out)"
  fi
  run_row "$name (+ CT2_FORCE_CPU_ISA=${CT2_ISA[$level]}, XLA ${XLA_ISA[$level]})" \
    "$LOGS/cap_$level.log" "${CAP[@]}" "${PYTEST[@]}" "${KEEP[@]}"
  ROW_NOTE=""
done
name="QEMU -cpu $QEMU_CPU (AVX2 only): ${QEMU_TESTS}"
if ! wanted qemu; then
  :
elif [ -n "${CPU_MATRIX_SKIP_QEMU:-}" ]; then
  ROWS+=("$(printf '| %-58s | %6s | %6s | %6s | %6s | %s |' "$name" - - - - \
    "not run: CPU_MATRIX_SKIP_QEMU is set")")
elif ! command -v qemu-x86_64 >/dev/null; then
  ROWS+=("$(printf '| %-58s | %6s | %6s | %6s | %6s | %s |' "$name" - - - - \
    "not run: qemu-x86_64 not found (apt-get install qemu-user)")")
else
  # Every bfloat16 and float16 test of the matrix's files not in QEMU_TESTS, by node id.
  QEMU_IDS=()
  while IFS= read -r id; do
    [[ " $QEMU_TESTS " == *" ${id%%::*} "* ]] || QEMU_IDS+=("$id")
  done < <("$PY" -m pytest -q --collect-only -k float16 -p no:cacheprovider "${TESTS[@]}" \
             2>/dev/null | grep "::")
  name="QEMU -cpu $QEMU_CPU (AVX2 only): ${QEMU_TESTS} + ${#QEMU_IDS[@]} (b)float16 tests"
  # shellcheck disable=SC2086  # the test list is meant to split
  run_row "$name" "$LOGS/qemu.log" env PY="$PY" tests/scripts/pytest_on_emulated_cpu.sh "$QEMU_CPU" -q \
    $QEMU_TESTS "${QEMU_IDS[@]}"
fi

echo
echo "CPU: ${MODEL:-unknown}"
printf '| %-58s | %6s | %6s | %6s | %6s | %s |\n' setting passed failed errors time outcome
printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..60})" "--------" "--------" \
  "--------" "--------" "---------"
printf '%s\n' "${ROWS[@]}"
exit $FAILED
