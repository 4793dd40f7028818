#!/usr/bin/env bash
# The crate's shape, outside tests:
# - no import circle among the files of src/ (each file uses only files
#   below it). Every `crate::a::b` or `super::b` a file names in code (not in
#   comments) is an edge to the deepest module it names; a folder's `mod.rs`
#   has an edge to each of its files, so a file in a folder uses its
#   siblings (`super::sibling`), never the folder's face. `tsort` reports
#   any cycle;
# - no file of src/ (the CLI's included) over 500 lines before its tests,
#   docs included;
# - no function over 60 lines and no block nested deeper than clippy's
#   excessive_nesting threshold 5 (the impl block and the fn body count:
#   three levels inside a method's body, four inside a free function's).
set -euo pipefail
cd "$(dirname "$0")/.."

max_lines=500
files=$(find src -name '*.rs' -not -path 'src/bin/*' -not -name lib.rs | sort)
# The CLI is its own crate: its files count for length, not for the circle.
cli_files=$(find src/bin -name '*.rs' | sort)

# src/a/b.rs -> a::b, src/a/mod.rs -> a
module_of() {
    local path=${1#src/}
    path=${path%.rs}
    path=${path%/mod}
    echo "${path//\//::}"
}

declare -A known=()
for file in $files; do known[$(module_of "$file")]=1; done

# The deepest known module that `path` (a::b::c, without crate::) names.
resolve() {
    local path=$1
    while [ -n "$path" ]; do
        if [ -n "${known[$path]:-}" ]; then
            echo "$path"
            return
        fi
        [[ $path == *::* ]] || return 0
        path=${path%::*}
    done
}

# A file's code before its tests, without comment lines.
code_of() {
    awk '/^#\[cfg\(test\)\]/ { exit } { print }' "$1" | grep -v '^\s*//' || true
}

edges=""
too_long=""
for file in $files; do
    module=$(module_of "$file")
    parent=""
    [[ $module == *::* ]] && parent=${module%::*}
    [[ $file == */mod.rs ]] && folder=$module || folder=$parent
    code=$(code_of "$file")
    lines=$(awk '/^#\[cfg\(test\)\]/ { n = NR - 1; exit } END { print (n == "" ? NR : n) }' "$file")
    [ "$lines" -le "$max_lines" ] || too_long+="  $file: $lines lines before its tests"$'\n'
    refs=$(grep -oE '(crate|super)(::[a-z_][a-z0-9_]*)+' <<<"$code" | sort -u || true)
    for ref in $refs; do
        case $ref in
            crate::*) target=$(resolve "${ref#crate::}") ;;
            super::*) target=$(resolve "${parent:+$parent::}${ref#super::}") ;;
        esac
        [ -n "$target" ] && [ "$target" != "$module" ] && edges+="$module $target"$'\n'
    done
    if [[ $file == */mod.rs ]]; then
        for child in "${!known[@]}"; do
            [[ $child == "$folder"::* && $child != "$folder"::*::* ]] && edges+="$module $child"$'\n'
        done
    fi
done
edges=$(printf '%s' "$edges" | sort -u)
if ! order=$(printf '%s\n' "$edges" | tsort 2>&1) || grep -q 'loop' <<<"$order"; then
    echo "import circle among the files of src/:" >&2
    printf '%s\n' "$order" >&2
    exit 1
fi
echo "== no import circle; files from the top down: $(printf '%s\n' "$order" | tr '\n' ' ')"
for file in $cli_files; do
    lines=$(awk '/^#\[cfg\(test\)\]/ { n = NR - 1; exit } END { print (n == "" ? NR : n) }' "$file")
    [ "$lines" -le "$max_lines" ] || too_long+="  $file: $lines lines before its tests"$'\n'
done
if [ -n "$too_long" ]; then
    echo "files of src/ over $max_lines lines before their tests (split them by concept):" >&2
    printf '%s' "$too_long" >&2
    exit 1
fi
echo "== every file of src/ is at most $max_lines lines before its tests"
CLIPPY_CONF_DIR="$PWD/.ci/structure" cargo clippy --lib --bins --all-features -- \
    -D clippy::too_many_lines -D clippy::excessive_nesting
