#!/usr/bin/env bash
# The logic of .github/workflows/leaderboard.yml, runnable (and tested, tests/test_workflow.py) without GitHub.
#
#   scripts/leaderboard_ci.sh tolerance COMMITTED
#       Print "ATOL RTOL" read from COMMITTED/TOLERANCE (lines `atol=<number>` and `rtol=<number>`, `#` comments).
#   scripts/leaderboard_ci.sh compare COMMITTED FRESH
#       `clbench compare COMMITTED FRESH` within COMMITTED/TOLERANCE: exit 1 when a number moved beyond it, a
#       committed cell is missing from FRESH, or a cell ran with other settings. The table also goes to
#       $GITHUB_STEP_SUMMARY when that is set.
#   scripts/leaderboard_ci.sh summary BOARDS
#       Append BOARDS/*.md to $GITHUB_STEP_SUMMARY (stdout when unset), links to result files made plain text.
#   scripts/leaderboard_ci.sh stage COMMITTED FRESH COMMITTED_BOARDS DEST [LEADERBOARD_ARG ...]
#       What a pull request regenerating the committed results would contain: DEST/COMMITTED = COMMITTED's own
#       top-level files (TOLERANCE) + FRESH's cells (result.json and footprints.safetensors, unless git ignores
#       them there), and
#       DEST/COMMITTED_BOARDS = `clbench leaderboard` of it (markdown and plots; LEADERBOARD_ARGs added, as
#       the committed board was made: `--fragility DIR`). Prints `changed=true` when a
#       number differs from the committed one at all (or a cell is added or gone, or the markdown differs),
#       else `changed=false`; the line is also appended to $GITHUB_OUTPUT when that is set. Timings and
#       environment fields are not numbers here: a rerun that only took another time is not a change.
#       COMMITTED and COMMITTED_BOARDS are relative paths (as in the repository), so DEST mirrors the tree.
set -euo pipefail

die() { echo "leaderboard_ci: $*" >&2; exit 2; }

tolerance() {  # COMMITTED -> "ATOL RTOL"
    local file="$1/TOLERANCE" line key value atol="" rtol="" n=0
    [[ -f "$file" ]] || die "$file: missing (it holds the cross-machine atol/rtol of clbench compare)"
    local number='^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$|^[.][0-9]+([eE][-+]?[0-9]+)?$'
    while IFS= read -r line || [[ -n "$line" ]]; do
        n=$((n + 1))
        line="${line%%#*}"
        line="${line//[[:space:]]/}"
        [[ -z "$line" ]] && continue
        [[ "$line" == *=* ]] || die "$file:$n: expected atol=<number> or rtol=<number>, got '$line'"
        key="${line%%=*}" value="${line#*=}"
        [[ "$value" =~ $number ]] || die "$file:$n: $key: '$value' is not a non-negative number"
        case "$key" in
            atol) [[ -z "$atol" ]] || die "$file:$n: atol given twice"; atol="$value" ;;
            rtol) [[ -z "$rtol" ]] || die "$file:$n: rtol given twice"; rtol="$value" ;;
            *) die "$file:$n: unknown key '$key' (only atol and rtol)" ;;
        esac
    done < "$file"
    [[ -n "$atol" ]] || die "$file: no atol=<number> line"
    [[ -n "$rtol" ]] || die "$file: no rtol=<number> line"
    echo "$atol $rtol"
}

summary_file() { echo "${GITHUB_STEP_SUMMARY:-/dev/stdout}"; }

cmd_compare() {
    local committed="$1" fresh="$2" tol atol rtol out status=0
    tol="$(tolerance "$committed")"
    read -r atol rtol <<< "$tol"
    [[ -d "$fresh" ]] || die "$fresh: no such directory (did the run write its results there?)"
    echo "clbench compare $committed $fresh --atol $atol --rtol $rtol  (tolerance from $committed/TOLERANCE)" >&2
    out="$(clbench compare "$committed" "$fresh" --atol "$atol" --rtol "$rtol" 2>&1)" || status=$?
    printf '%s\n' "$out"
    if [[ -n "${GITHUB_STEP_SUMMARY:-}" ]]; then
        {
            echo "## clbench compare $committed $fresh (atol $atol pp, rtol $rtol): $([[ $status == 0 ]] && echo within tolerance || echo FAILED)"
            echo
            echo "<details><summary>per cell</summary>"
            echo
            echo '```text'  # verbatim: the table's own header has | in it
            printf '%s\n' "$out"
            echo '```'
            echo
            echo "</details>"
            echo
        } >> "$GITHUB_STEP_SUMMARY"
    fi
    if [[ $status != 0 ]]; then
        echo "::error::results moved beyond the cross-machine tolerance of $committed/TOLERANCE (atol $atol pp, rtol $rtol), or a cell is missing"
    fi
    return "$status"
}

cmd_summary() {
    local boards="$1" md found=0
    for md in "$boards"/*.md; do
        [[ -f "$md" ]] || continue
        found=1
        {
            echo "# $(basename "$md") (from this run)"
            echo
            # [12.34](../quick/…/result.json) -> 12.34: the result files are in the artifact, not next to the summary
            sed -E 's/\[([^]]*)\]\([^)]*\)/\1/g' "$md"
            echo
        } >> "$(summary_file)"
    done
    [[ $found == 1 ]] || die "$boards: no markdown leaderboard"
}

cmd_stage() {
    local committed="$1" fresh="${2%/}" boards="$3" dest="$4" changed=false f rel
    shift 4  # what is left: the leaderboard's own arguments
    [[ "$committed" != /* && "$boards" != /* ]] || die "COMMITTED and COMMITTED_BOARDS must be relative paths"
    [[ -d "$committed" && -d "$fresh" ]] || die "$committed and $fresh must both be directories"
    rm -rf "${dest:?}/$committed" "${dest:?}/$boards"
    mkdir -p "$dest/$committed" "$dest/$boards"
    # the committed folder's own files (TOLERANCE, a README): kept; its cells: replaced by the fresh ones
    find "$committed" -mindepth 1 -maxdepth 1 -type f -exec cp -p {} "$dest/$committed/" \;
    while IFS= read -r -d '' f; do
        rel="${f#"$fresh"/}"
        # what the repository does not keep (.gitignore: the full-size dense footprints) stays out of the PR too
        if git check-ignore -q -- "$committed/$rel" 2> /dev/null; then continue; fi
        mkdir -p "$dest/$committed/$(dirname "$rel")"
        cp -p "$f" "$dest/$committed/$rel"
    done < <(find "$fresh" -mindepth 2 -type f \( -name result.json -o -name footprints.safetensors \) -print0)

    # numbers: identical both ways at zero tolerance (the second direction catches cells only in fresh)
    if ! clbench compare "$committed" "$fresh" --atol 0 --rtol 0 > /dev/null 2>&1 ||
       ! clbench compare "$fresh" "$committed" --atol 0 --rtol 0 > /dev/null 2>&1; then
        changed=true
    fi
    clbench leaderboard "$dest/$committed" --out "$dest/$boards" "$@" >&2
    # markdown (the plots are not compared: PNG bytes vary with the matplotlib/freetype build)
    for f in "$dest/$boards"/*.md; do
        cmp -s "$f" "$boards/$(basename "$f")" || changed=true
    done
    echo "changed=$changed"
    if [[ -n "${GITHUB_OUTPUT:-}" ]]; then
        echo "changed=$changed" >> "$GITHUB_OUTPUT"
    fi
}

[[ $# -ge 1 ]] || die "usage: $0 tolerance|compare|summary|stage ARGS… (see the header of this file)"
cmd="$1"; shift
case "$cmd" in
    tolerance) [[ $# == 1 ]] || die "usage: $0 tolerance COMMITTED"; tolerance "$1" ;;
    compare) [[ $# == 2 ]] || die "usage: $0 compare COMMITTED FRESH"; cmd_compare "$@" ;;
    summary) [[ $# == 1 ]] || die "usage: $0 summary BOARDS"; cmd_summary "$@" ;;
    stage) [[ $# -ge 4 ]] || die "usage: $0 stage COMMITTED FRESH COMMITTED_BOARDS DEST [LEADERBOARD_ARG ...]"
        cmd_stage "$@" ;;
    *) die "unknown command '$cmd' (tolerance, compare, summary, stage)" ;;
esac
