#!/bin/bash
# tree_pipeline.sh DIR K ROWS: a shell job of many short-lived processes.
# For N in 1..K: awk generates ROWS deterministic words, `sort | uniq -c`
# counts them into DIR/out.N while a background pipeline (awk | sort -n |
# md5sum) writes DIR/sum.N; `wait`; one line per iteration is appended to
# DIR/log (>>) and printed.  Prints "start K ROWS" first and "done DIGEST"
# last (DIGEST: md5 of the log).  Depends only on its arguments; any failing
# command of a pipeline stops it (set -e, pipefail).
set -eu -o pipefail
dir=$1 k=$2 rows=$3
cd "$dir"
echo "start $k $rows"
for n in $(seq 1 "$k"); do
    awk -v n="$n" -v rows="$rows" 'BEGIN {
        for (i = 0; i < rows; i++) {
            x = (i * 7919 + n * 104729) % 100003
            printf "w%05d %s\n", x % 6007, substr("abcdefghij", 1 + (i + n) % 10, 3)
        }
    }' | sort | uniq -c > "out.$n" &
    fg=$!
    ( awk -v n="$n" -v rows="$rows" 'BEGIN { for (i = 0; i < rows / 2; i++) print (i * 31 + n) % 9973 }' \
        | sort -n | md5sum > "sum.$n" )
    wait "$fg"
    line="iter $n $(wc -l < "out.$n") $(md5sum < "out.$n" | cut -c1-12) $(cut -c1-12 "sum.$n")"
    echo "$line" >> log
    echo "$line"
done
echo "done $(md5sum < log | cut -c1-32)"
