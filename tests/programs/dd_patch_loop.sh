#!/bin/bash
# dd_patch_loop.sh DIR K: many short processes changing one image.  DIR holds
# base.img (2 MiB) and p0..p3 (4 KiB each).  For N in 1..K one `dd` patches a
# 4 KiB block of DIR/img with conv=notrunc; every 7th iteration two dd
# processes write the same block with the same bytes at the same time (and
# a third a block of its own); every 50th a dd without conv=notrunc
# rewrites the whole image (it truncates it to 0 first); every 100th a dd
# cuts the image at block 256 (count=0), so later patches past it grow it
# again over a hole.  A line per 100 iterations goes to DIR/log (>>) and is
# printed.  Prints "start K" first and "done DIGEST" last (md5 of img and
# log).  Depends only on its arguments.
set -eu -o pipefail
dir=$1 k=$2
cd "$dir"
echo "start $k"
cp base.img img
for n in $(seq 1 "$k"); do
    b=$(( (n * 37) % 512 ))
    p=p$(( n % 4 ))
    if [ $(( n % 100 )) -eq 0 ]; then
        dd of=img bs=4096 seek=256 count=0 status=none
        line="iter $n $(md5sum < img | cut -c1-12)"
        echo "$line" >> log
        echo "$line"
    elif [ $(( n % 50 )) -eq 0 ]; then
        dd if=base.img of=img bs=64k status=none
    elif [ $(( n % 7 )) -eq 0 ]; then
        dd if="$p" of=img bs=4096 seek="$b" count=1 conv=notrunc status=none &
        a=$!
        dd if="$p" of=img bs=4096 seek="$(( (b + 300) % 512 ))" count=1 conv=notrunc status=none &
        c=$!
        dd if="$p" of=img bs=4096 seek="$b" count=1 conv=notrunc status=none
        wait "$a" "$c"
    else
        dd if="$p" of=img bs=4096 seek="$b" count=1 conv=notrunc status=none
    fi
done
echo "done $(cat img log | md5sum | cut -c1-32)"
