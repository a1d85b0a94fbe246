#!/bin/bash
# Lazarus demo: run examples/sim.c once without interruption, then again under
# `lazarus run` with a checkpoint every second, kill it with SIGKILL half-way,
# restart it from its last checkpoint and check that it prints the same result.
# Every command that matters is printed first, prefixed with "$ ".
# Usage: sh scripts/demo.sh        (after `make`; exits non-zero on a mismatch)
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@" # bash: to close stray descriptors
set -eu
cd "$(dirname "$0")/.."

LZ=build/bin/lazarus
SIM=build/examples/sim
KILL_AFTER=5 # seconds; the simulation takes about 10

show() { printf '$ %s\n' "$*"; }
run() {
    show "$*"
    "$@"
}
note() { printf '# %s\n' "$*"; }
fail() {
    printf 'demo: FAILED: %s\n' "$*" >&2
    exit 1
}

# Close descriptors above 2 that this shell inherited without close-on-exec
# (a terminal emulator's or a CI runner's pipe, say): the program would inherit
# them, and Lazarus refuses to checkpoint a descriptor it cannot restore.
close_stray_fds() {
    local f n
    for f in /proc/"$BASHPID"/fd/*; do
        n=${f##*/}
        if [ "$n" -gt 2 ] && [ "$n" -ne 255 ]; then eval "exec $n>&-" 2>/dev/null || true; fi
    done
}

# Print the pid of the first descendant of process $1 whose name is $2.
find_descendant() {
    ps -e -o pid= -o ppid= -o comm= | awk -v root="$1" -v name="$2" '
        { pid[NR] = $1; ppid[NR] = $2; comm[NR] = $3 }
        END {
            below[root] = 1
            do {
                grew = 0
                for (i = 1; i <= NR; i++)
                    if (!(pid[i] in below) && (ppid[i] in below)) { below[pid[i]] = 1; grew = 1 }
            } while (grew)
            for (i = 1; i <= NR; i++)
                if (pid[i] != root && (pid[i] in below) && comm[i] == name) { print pid[i]; exit }
        }'
}

if [ ! -x "$LZ" ]; then
    run make -j2
fi
run mkdir -p build/examples
run "${CC:-cc}" -std=c17 -O2 -Wall -o "$SIM" examples/sim.c

T=$(mktemp -d "${TMPDIR:-/tmp}/lazarus-demo.XXXXXX")
STORE=$T/store
lzpid=""
cleanup() {
    st=$?
    if [ -n "$lzpid" ] && kill -0 "$lzpid" 2>/dev/null; then
        kill "$lzpid" 2>/dev/null || true
    fi
    if [ "$st" -eq 0 ]; then rm -rf "$T"; else echo "demo: files kept in $T" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo
note "1. The reference: an uninterrupted run."
show "$SIM"
reference=$("$SIM" </dev/null)
printf '%s\n' "$reference"

echo
note "2. The same program under Lazarus, checkpointed every second (output through a pipe)."
show "$LZ run -d $STORE -i 1 -- $SIM </dev/null 2>&1 | cat &"
(
    close_stray_fds
    "$LZ" run -d "$STORE" -i 1 -- "$SIM" </dev/null 2>&1 &
    echo $! >"$T/lazarus.pid"
    st=0
    wait $! || st=$?
    echo "$st" >"$T/lazarus.status"
) | cat &
pipeline=$!
while [ ! -s "$T/lazarus.pid" ]; do sleep 0.05; done
lzpid=$(cat "$T/lazarus.pid")

run sleep "$KILL_AFTER"
note "find the program: the descendant of lazarus (pid $lzpid) named sim"
show "ps -e -o pid= -o ppid= -o comm="
victim=$(find_descendant "$lzpid" sim)
[ -n "$victim" ] || fail "no process named sim below lazarus (pid $lzpid); did it already end?"
run kill -KILL "$victim"
wait "$pipeline" || true
run_status=$(cat "$T/lazarus.status")
note "lazarus run exited with status $run_status (137 = 128 + SIGKILL: the program was killed)"
[ "$run_status" -ne 0 ] || fail "the program finished before it could be killed"

echo
note "3. What the store holds, then the restart from the newest checkpoint."
run "$LZ" list -d "$STORE"
show "$LZ restart -d $STORE"
restart_status=0
restarted=$("$LZ" restart -d "$STORE" </dev/null) || restart_status=$?
printf '%s\n' "$restarted"
[ "$restart_status" -eq 0 ] || fail "lazarus restart exited with status $restart_status"

echo
note "4. Compare."
result=$(printf '%s\n' "$restarted" | grep '^result:' | tail -n 1 || true)
printf 'uninterrupted: %s\n' "$reference"
printf 'restarted:     %s\n' "$result"
[ "$result" = "$reference" ] || fail "the restarted run's result differs from the uninterrupted run's"
echo "demo: OK: killed with SIGKILL half-way, restarted, and finished with the same result."
