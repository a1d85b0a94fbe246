#!/bin/bash
# busy_cp_cat.sh DIR K: a shell loop of cp and cat processes.
# K rounds; round N: awk computes a chunk of numbered lines into DIR/chunk,
# cp copies it over one of 8 copies (an existing file: cp truncates and
# rewrites it), a second awk streams lines into `cat >> DIR/all.log` (cat
# appends for as long as awk computes), `cat a b > DIR/pair.M` joins two
# copies, and one line is printed.  Prints "start K" first and
# "done DIGEST" (md5 of every file it made) last; depends only on its
# arguments.
set -eu -o pipefail
dir=$1 k=$2
cd "$dir"
echo "start $k"
# (an awk program, not a shell function: bash redirects a function's
# output in the shell itself, and that is not what this job is about)
gen='BEGIN {
    x = n
    for (i = 0; i < lines; i++) {
        for (j = 0; j < 1000; j++) x = (x * 31 + j + n) % 1000003
        printf "round %d line %d value %d\n", n, i, x
    }
}'
for n in $(seq 1 "$k"); do
    c=$((n % 8)) p=$((n % 5))
    awk -v n="$n" -v lines=$((500 + n * 37 % 300)) "$gen" > chunk
    cp chunk "copy.$c"
    awk -v n=$((n + 1000)) -v lines=3000 "$gen" | cat >> all.log
    cat "copy.$c" "copy.$(((c + 3) % 8))" > "pair.$p" 2>/dev/null || cat "copy.$c" > "pair.$p"
    echo "round $n $(wc -c < all.log)"
done
rm -f chunk
echo "done $(cat all.log copy.* pair.* | md5sum | cut -c1-32)"
