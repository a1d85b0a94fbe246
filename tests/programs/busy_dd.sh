#!/bin/bash
# busy_dd.sh DIR K: `dd` patching a 4 MiB image.  Makes DIR/img (zeros)
# and DIR/patches (64 KiB of numbered lines), then K rounds: dd writes a
# 4 KiB block of patches into img at a round-dependent block
# (conv=notrunc), and a second dd writes 64 KiB that awk computes line by
# line into another place (conv=notrunc: dd writes as the lines come);
# every 8th round the first dd writes without conv=notrunc (it truncates
# the image after its block) and a third dd writes zeros back up to 4 MiB.
# Prints "start K" first and "done DIGEST" (md5 of img) last; depends only
# on its arguments.
set -eu -o pipefail
dir=$1 k=$2
cd "$dir"
echo "start $k"
dd if=/dev/zero of=img bs=1M count=4 status=none
seq -f 'patch line %06g' 1 3641 > patches
for n in $(seq 1 "$k"); do
    blk=$(((n * 397) % 1024)) src=$((n % 16))
    if [ $((n % 8)) -eq 0 ]; then
        dd if=patches of=img bs=4k skip="$src" seek="$((blk / 2 + 512))" count=1 status=none
        size=$(($(stat -c %s img) / 4096))
        dd if=/dev/zero of=img bs=4k seek="$size" count="$((1024 - size))" conv=notrunc status=none
    else
        dd if=patches of=img bs=4k skip="$src" seek="$blk" count=1 conv=notrunc status=none
    fi
    awk -v n="$n" 'BEGIN {
        x = n
        for (i = 0; i < 2048; i++) {
            for (j = 0; j < 600; j++) x = (x * 31 + j + n) % 1000003
            printf "%05d %07d %08d\n", n % 100000, i, x
        }
    }' | dd of=img bs=4k seek=$(((n * 131) % 1008)) count=16 iflag=fullblock conv=notrunc status=none
    echo "round $n $(md5sum < img | cut -c1-12)"
done
echo "done $(md5sum < img | cut -c1-32)"
