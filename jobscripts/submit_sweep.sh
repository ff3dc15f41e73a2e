#!/bin/bash
# mpiec — submit a whole study: sweep array + kill array, then the analysis.
#
#   jobscripts/submit_sweep.sh [--dry-run] [OUT]
#
# Submits sweep.sbatch (strategies × seeds), kill.sbatch (strategies × kill
# plans, unless SKIP_KILL=1) and analyze.sbatch with --dependency=afterok on
# both arrays, all writing into OUT [results/sweep-<date>]. Inputs (environment):
#   STRATEGIES, SEEDS, STRATEGIES_FILE, KILL_PLANS_FILE, PRESET, CONFIG, SETS,
#   MPIEC_LAUNCH, ... (passed through to the jobs; see run.sbatch)
#   SKIP_KILL      1: no kill experiments                                 [0]
#   ANALYZE_AFTER  dependency type for the analysis: afterok | afterany   [afterok]
#                  run.sbatch exits 0 whenever a valid result file was written
#                  (also for runs lost to a kill), so afterok only waits in vain
#                  when a run crashed; afterany analyses whatever exists.
#   SBATCH_ARGS    extra sbatch arguments for every job (e.g. '--partition=x')
# --dry-run (or DRY_RUN=1) prints the sbatch commands without submitting.

set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DRY_RUN=${DRY_RUN:-0}
if [[ ${1:-} == --dry-run || ${1:-} == -n ]]; then
    DRY_RUN=1
    shift
fi
if [[ ${1:-} == -h || ${1:-} == --help ]]; then
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 0
fi
OUT=$(realpath -m "${1:-results/sweep-$(date +%Y%m%d-%H%M%S)}")
SKIP_KILL=${SKIP_KILL:-0}
ANALYZE_AFTER=${ANALYZE_AFTER:-afterok}
KILL_PLANS_FILE=$(realpath -m "${KILL_PLANS_FILE:-$here/kill_plans.txt}")
case $ANALYZE_AFTER in
    afterok | afterany) ;;
    *) echo "submit_sweep.sh: error: ANALYZE_AFTER must be afterok or afterany" >&2; exit 2 ;;
esac

if [[ -n ${STRATEGIES_FILE:-} ]]; then
    STRATEGIES_FILE=$(realpath -m "$STRATEGIES_FILE")
    mapfile -t strategies < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$STRATEGIES_FILE")
    export STRATEGIES_FILE
else
    list=${STRATEGIES:-none ckpt cpr cnr ecrm}
    read -r -a strategies <<<"${list//;/ }" || true
fi
seeds_list=${SEEDS:-1 2 3}
read -r -a seeds <<<"${seeds_list//;/ }" || true
n_sweep=$((${#strategies[@]} * ${#seeds[@]}))
((n_sweep > 0)) || { echo "submit_sweep.sh: error: no strategies or seeds" >&2; exit 2; }

# The jobs find run.sbatch here and write into OUT (sbatch exports the environment).
export MPIEC_JOBSCRIPTS=$here OUT KILL_PLANS_FILE
read -r -a sbatch_extra <<<"${SBATCH_ARGS:-}" || true
[[ $DRY_RUN == 1 ]] || mkdir -p "$OUT"

fake_id=1000
submit() {
    set -- --export=ALL "$@"
    printf '+ sbatch'
    printf ' %q' "$@"
    printf '\n'
    if [[ $DRY_RUN == 1 ]]; then
        fake_id=$((fake_id + 1))
        job_id=$fake_id
    else
        job_id=$(sbatch --parsable "$@")
        job_id=${job_id%%;*}
    fi
    echo "  -> job $job_id"
}

submit "${sbatch_extra[@]}" --array="0-$((n_sweep - 1))" "$here/sweep.sbatch"
deps=$job_id

if [[ $SKIP_KILL != 1 ]]; then
    mapfile -t plans < <(sed -e 's/#.*//' -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//' \
        -e '/^$/d' "$KILL_PLANS_FILE")
    n_kill=$((${#strategies[@]} * ${#plans[@]}))
    if ((n_kill > 0)); then
        submit "${sbatch_extra[@]}" --array="0-$((n_kill - 1))" "$here/kill.sbatch"
        deps=$deps:$job_id
    fi
fi

submit "${sbatch_extra[@]}" --dependency="$ANALYZE_AFTER:$deps" --kill-on-invalid-dep=yes \
    "$here/analyze.sbatch"
echo "results: $OUT (report: $OUT/report.txt once job $job_id has run)"
