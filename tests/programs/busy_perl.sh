#!/bin/bash
# busy_perl.sh DIR FILES ROUNDS: `perl -pi` over many files.  Makes FILES
# files of numbered lines, then for each round rewrites all of them in place
# with one `perl -pi -e` (perl renames a new file over each: new inodes every
# round), every third round also one file by itself, and appends a line to
# DIR/rounds.log.  Prints "start FILES ROUNDS" first and "done DIGEST"
# (md5 of every file's content) last; depends only on its arguments.
set -eu -o pipefail
dir=$1 files=$2 rounds=$3
cd "$dir"
echo "start $files $rounds"
for i in $(seq 0 $((files - 1))); do
    seq -f "line %g value $i" 1 $((200 + i % 50)) > "tmp.$i"
    mv "tmp.$i" "$(printf 'f.%03d' "$i")"
done
for r in $(seq 1 "$rounds"); do
    perl -pi -e 's/value (\d+)/"value " . (($1 * 31 + '"$r"') % 100003)/e' f.*
    if [ $((r % 3)) -eq 0 ]; then
        perl -pi -e '$_ .= "+ round '"$r"'\n" if $. == 1' "$(printf 'f.%03d' $((r % files)))"
    fi
    echo "round $r $(cat f.* | md5sum | cut -c1-12)" >> rounds.log
    echo "round $r"
done
echo "done $(cat f.* rounds.log | md5sum | cut -c1-32)"
