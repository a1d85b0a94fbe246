# bash completion for lazarus(1): the commands, then each command's options
# (the CLI's option tables, cli/main.c and cli/cmd_*.c; tests/test_install.py
# checks that they agree) and their values.
_lazarus()
{
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local s3="--endpoint --ca-file --insecure --addressing"
    COMPREPLY=()
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "run checkpoint restart rollback diff list verify gc show --help --version" -- "$cur"))
        return
    fi
    local opts
    case ${COMP_WORDS[1]} in
    run) opts="-d --dir -i --interval -k --keep --compress --durability -x --exclude --fs --fs-mode --fs-buffer-max --fs-buffer-low --files-only --job-stdio --tcp=
               --compact --resume --checkpoint-signal --remote --keep-remote --journal-dir --encrypt-key
               --fallback --mintime --no-incremental --no-fork --check-exclusions --quiet --log --json $s3 --help" ;;
    checkpoint) opts="-d --dir --fallback --json --help" ;;
    restart) opts="-d --dir --at --force --lazy --compress --checkpoint-signal --cache --fallback
                   --files-as-they-are --encrypt-key --quiet --log --json $s3 --help" ;;
    rollback) opts="-d --dir --at --force --json --help" ;;
    diff) opts="-d --dir --at --json --encrypt-key $s3 --help" ;;
    list) opts="-d --dir --json --fallback --encrypt-key $s3 --help" ;;
    verify) opts="-d --dir --at --json --encrypt-key $s3 --help" ;;
    gc) opts="-d --dir --older-than --json $s3 --help" ;;
    show) opts="-d --dir --at --json --encrypt-key $s3 --help tree threads regions fds chans journal packs" ;;
    *) return ;;
    esac
    # --tcp=VALUE: bash splits the word at '='
    if [ "$prev" = "=" ] && [ "${COMP_WORDS[COMP_CWORD-2]}" = "--tcp" ]; then
        COMPREPLY=($(compgen -W "reset refuse" -- "$cur"))
        return
    fi
    case $prev in
    -d|--dir|-x|--exclude|--fs|--fallback|--journal-dir|--cache)
        COMPREPLY=($(compgen -d -- "$cur")); return ;;
    --encrypt-key|--ca-file|--log)
        COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --durability) COMPREPLY=($(compgen -W "process machine" -- "$cur")); return ;;
    --fs-mode) COMPREPLY=($(compgen -W "undo buffer shadow" -- "$cur")); return ;;
    --fs-buffer-max|--fs-buffer-low) return ;;
    --addressing) COMPREPLY=($(compgen -W "path virtual" -- "$cur")); return ;;
    --compress) COMPREPLY=($(compgen -W "none lz4 zstd zstd:" -- "$cur")); return ;;
    --checkpoint-signal) COMPREPLY=($(compgen -W "USR1 USR2 HUP INT TERM" -- "$cur")); return ;;
    -i|--interval|-k|--keep|--at|--keep-remote|--mintime|--older-than|--remote|--endpoint)
        return ;;
    esac
    # run: from the program on (after `--` or the first operand), its own words
    if [ "${COMP_WORDS[1]}" = run ]; then
        local i w
        for ((i = 2; i < COMP_CWORD; i++)); do
            w=${COMP_WORDS[i]}
            case $w in
            --) break ;;
            -d|--dir|-i|--interval|-k|--keep|--compress|--durability|-x|--exclude|--checkpoint-signal|\
            --remote|--keep-remote|--journal-dir|--encrypt-key|--fallback|--mintime|--endpoint|--ca-file|--addressing|--log)
                ((i++)) ;;
            --tcp) ((i += 2)) ;;
            -*) ;;
            *) break ;;
            esac
        done
        if [ "$i" -lt "$COMP_CWORD" ]; then
            if [ "$((i + 1))" -eq "$COMP_CWORD" ] && [ "${COMP_WORDS[i]}" = -- ]; then
                COMPREPLY=($(compgen -c -- "$cur"))
            else
                COMPREPLY=($(compgen -f -- "$cur"))
            fi
            return
        fi
        if [[ $cur != -* ]]; then
            COMPREPLY=($(compgen -c -- "$cur"))
            return
        fi
    fi
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    [[ ${COMPREPLY[0]-} == *= ]] && compopt -o nospace 2>/dev/null
    return 0
}
complete -F _lazarus lazarus
