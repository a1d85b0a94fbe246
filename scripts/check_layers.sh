#!/bin/sh
# The folders depend one way (ARCHITECTURE.md, "The parts"):
#   runtime  -> files, common        cli      -> store, files, remote, common, include
#   remote   -> common
#   files    -> common               restorer -> store, common
#   fs       -> files, common
#   store    -> common               api      -> include, common
#   common, include -> nothing
# Every #include "name" of a folder's sources is mapped to the folder that
# holds that header (the build finds headers by name: -Icommon -Istore ...);
# a header of a folder the includer may not use, or of no folder at all, fails.
# Usage: scripts/check_layers.sh [TOP] (default: the directory above this script)
top=${1:-$(dirname "$0")/..}
cd "$top" || exit 2

folders="runtime restorer files fs store remote cli api common include"

allowed() {
    case $1 in
    runtime) echo "files common" ;;
    fs) echo "files common" ;;
    files) echo "common" ;;
    store) echo "common" ;;
    cli) echo "store files remote common include" ;;
    remote) echo "common" ;;
    restorer) echo "store common" ;;
    api) echo "include common" ;;
    *) echo "" ;;
    esac
}

# the folder holding header $1 ("" if none, "?" if more than one)
home() {
    found=
    for f in $folders; do
        if [ -f "$f/$1" ]; then
            if [ -n "$found" ]; then found="?"; else found=$f; fi
        fi
    done
    echo "$found"
}

bad=0
for from in $folders; do
    [ -d "$from" ] || continue
    ok=$(allowed "$from")
    shown=$(echo "$ok" | sed 's/ /, /g')
    for src in "$from"/*.c "$from"/*.h "$from"/*.S; do
        [ -f "$src" ] || continue
        for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$src"); do
            to=$(home "$h")
            if [ -z "$to" ]; then
                echo "check_layers: $src includes \"$h\", a header of no folder" >&2
                bad=1
                continue
            fi
            if [ "$to" = "?" ]; then
                echo "check_layers: $src includes \"$h\", which more than one folder has" >&2
                bad=1
                continue
            fi
            [ "$to" = "$from" ] && continue
            case " $ok " in
            *" $to "*) ;;
            *)
                echo "check_layers: $src includes \"$h\" ($to/): $from/ may include only ${shown:+$shown and }its own headers" >&2
                bad=1
                ;;
            esac
        done
    done
done
[ $bad -eq 0 ] && echo "check_layers: ok"
exit $bad
