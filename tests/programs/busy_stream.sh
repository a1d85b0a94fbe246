#!/bin/bash
# busy_stream.sh DIR K LINES: long-lived processes of a shell job.  K rounds;
# in each, awk computes LINES numbered lines (about a second per 15000),
# flushing every 50, and `cat >> DIR/stream.log` appends them as they come,
# through `tee -a DIR/copy.N` (N = the round modulo 3); then one line is
# printed.  Prints "start K LINES" first and "done DIGEST" (md5 of every file
# it made) last; depends only on its arguments.
set -eu -o pipefail
dir=$1 k=$2 lines=$3
cd "$dir"
echo "start $k $lines"
for n in $(seq 1 "$k"); do
    awk -v n="$n" -v lines="$lines" 'BEGIN {
        x = n
        for (i = 0; i < lines; i++) {
            for (j = 0; j < 1000; j++) x = (x * 31 + j + n) % 1000003
            printf "round %d line %d value %d\n", n, i, x
            if (i % 50 == 49) fflush()
        }
    }' | tee -a "copy.$((n % 3))" | cat >> stream.log
    echo "round $n $(wc -c < stream.log)"
done
echo "done $(cat stream.log copy.* | md5sum | cut -c1-32)"
