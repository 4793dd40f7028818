#!/usr/bin/env bash
# The crate's shape: no import circle among the files of src/ (each file
# uses only files below it), no function over 60 lines and no block nested
# deeper than clippy's excessive_nesting threshold 5 (the impl block and the
# fn body count: three levels inside a method's body, four inside a free
# function's), outside tests.
# The circle check: every `crate::<module>` a file names in code (not in
# comments) is an edge; `tsort` reports any cycle.
set -euo pipefail
cd "$(dirname "$0")/.."
edges=$(for file in src/*.rs; do
    module=$(basename "$file" .rs)
    grep -v '^\s*//' "$file" | grep -o 'crate::[a-z_]*' | sed 's/crate:://' | sort -u |
        grep -vx "$module" | grep -v '^$' | sed "s/^/$module /" || true
done)
if ! order=$(printf '%s\n' "$edges" | tsort 2>&1) || grep -q 'loop' <<<"$order"; then
    echo "import circle among src/*.rs:" >&2
    printf '%s\n' "$order" >&2
    exit 1
fi
echo "== no import circle; files from the top down: $(printf '%s\n' "$order" | tr '\n' ' ')"
CLIPPY_CONF_DIR="$PWD/.ci/structure" cargo clippy --lib --bins --all-features -- \
    -D clippy::too_many_lines -D clippy::excessive_nesting
